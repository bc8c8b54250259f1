#include "engine/engine_spec_json.h"

#include <utility>
#include <vector>

#include "engine/activation_checkpointing.h"
#include "engine/lr_schedule.h"
#include "model/layout.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace {

const char* storage_name(DType storage) {
  return storage == DType::kBf16 ? "bf16" : storage == DType::kFloat16 ? "fp16" : "fp32";
}

DType parse_storage(const std::string& name, const std::string& key) {
  if (name == "fp32") return DType::kFloat32;
  if (name == "bf16") return DType::kBf16;
  ZT_CHECK(name == "fp16", key + ": expected fp32, bf16 or fp16, got '" + name + "'");
  return DType::kFloat16;
}

nlohmann::json zero_json(const ZeroConfig& z) {
  return {{"stage", z.stage},
          {"overlap_comm", z.overlap_comm},
          {"reduce_bucket_size", z.reduce_bucket_size},
          {"allgather_bucket_size", z.allgather_bucket_size},
          {"prefetch_bucket_size", z.prefetch_bucket_size},
          {"param_persistence_threshold", z.param_persistence_threshold},
          {"max_live_parameters", z.max_live_parameters},
          {"max_reuse_distance", z.max_reuse_distance},
          {"world_invariant", z.world_invariant}};
}

nlohmann::json offload_json(const OffloadConfig& o) {
  return {{"optimizer", offload_device_name(o.optimizer)},
          {"param", offload_device_name(o.param)},
          {"nvme_path", o.nvme_path},
          {"buffer_count", o.buffer_count},
          {"sub_group_size", o.sub_group_size},
          {"delay", o.delay},
          {"delay_after", o.delay_after},
          {"overlap", o.overlap},
          {"overlap_bytes", o.overlap_bytes}};
}

nlohmann::json optimizer_json(const AdamWConfig& a) {
  return {{"lr", decimal_of_float(a.lr)},
          {"min_lr", decimal_of_float(a.min_lr)},
          {"warmup_steps", a.warmup_steps},
          {"schedule", lr_schedule_name(a.schedule)},
          {"warmup_shape", warmup_shape_name(a.warmup_shape)},
          {"warmup_start_lr", decimal_of_float(a.warmup_start_lr)},
          {"schedule_steps", a.schedule_steps},
          {"beta1", decimal_of_float(a.beta1)},
          {"beta2", decimal_of_float(a.beta2)},
          {"eps", decimal_of_float(a.eps)},
          {"weight_decay", decimal_of_float(a.weight_decay)},
          {"clip", decimal_of_float(a.clip)}};
}

nlohmann::json loss_scale_json(const LossScaleConfig& l) {
  return {{"loss_scale", l.loss_scale},
          {"initial_scale_power", l.initial_scale_power},
          {"loss_scale_window", l.loss_scale_window},
          {"hysteresis", l.hysteresis},
          {"consecutive_hysteresis", l.consecutive_hysteresis},
          {"min_loss_scale", l.min_loss_scale}};
}

// Reads object keys as `source`'s "engine.<block>.<key>" in errors.
class Reader {
 public:
  Reader(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {
    ZT_CHECK(j_.is_object(), path_ + ": expected an object");
  }
  template <typename T>
  void operator()(const char* key, T& out) const {
    const auto it = j_.find(key);
    ZT_CHECK(it != j_.end(), path_ + "." + key + " is missing");
    try {
      out = it->get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(path_ + "." + key + " has the wrong type: " + it->dump());
    }
  }
  void real(const char* key, float& out) const {
    double v = 0;
    (*this)(key, v);
    out = static_cast<float>(v);
  }
  std::string text(const char* key) const {
    std::string s;
    (*this)(key, s);
    return s;
  }
  Reader block(const char* key) const {
    const auto it = j_.find(key);
    ZT_CHECK(it != j_.end(), path_ + "." + key + " is missing");
    return Reader(*it, path_ + "." + key);
  }
  std::string at(const char* key) const { return path_ + "." + key; }
  // The key's text through `parse`, whose error is prefixed with the key.
  template <typename Parse>
  auto parsed(const char* key, Parse parse) const {
    const std::string value = text(key);
    try {
      return parse(value);
    } catch (const Error& e) {
      throw Error(at(key) + ": " + e.what());
    }
  }
  const nlohmann::json& json(const char* key) const {
    const auto it = j_.find(key);
    ZT_CHECK(it != j_.end(), path_ + "." + key + " is missing");
    return *it;
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

void read_zero(const Reader& r, ZeroConfig& z) {
  r("stage", z.stage);
  r("overlap_comm", z.overlap_comm);
  r("reduce_bucket_size", z.reduce_bucket_size);
  r("allgather_bucket_size", z.allgather_bucket_size);
  r("prefetch_bucket_size", z.prefetch_bucket_size);
  r("param_persistence_threshold", z.param_persistence_threshold);
  r("max_live_parameters", z.max_live_parameters);
  r("max_reuse_distance", z.max_reuse_distance);
  r("world_invariant", z.world_invariant);
}

void read_offload(const Reader& r, OffloadConfig& o) {
  o.optimizer = parse_offload_device(r.text("optimizer"), r.at("optimizer"));
  o.param = parse_offload_device(r.text("param"), r.at("param"));
  r("nvme_path", o.nvme_path);
  r("buffer_count", o.buffer_count);
  r("sub_group_size", o.sub_group_size);
  r("delay", o.delay);
  r("delay_after", o.delay_after);
  r("overlap", o.overlap);
  r("overlap_bytes", o.overlap_bytes);
}

void read_optimizer(const Reader& r, AdamWConfig& a) {
  r.real("lr", a.lr);
  r.real("min_lr", a.min_lr);
  r("warmup_steps", a.warmup_steps);
  a.schedule = parse_lr_schedule(r.text("schedule"), r.at("schedule"));
  a.warmup_shape = parse_warmup_shape(r.text("warmup_shape"), r.at("warmup_shape"));
  r.real("warmup_start_lr", a.warmup_start_lr);
  r("schedule_steps", a.schedule_steps);
  r.real("beta1", a.beta1);
  r.real("beta2", a.beta2);
  r.real("eps", a.eps);
  r.real("weight_decay", a.weight_decay);
  r.real("clip", a.clip);
}

void read_loss_scale(const Reader& r, LossScaleConfig& l) {
  r("loss_scale", l.loss_scale);
  r("initial_scale_power", l.initial_scale_power);
  r("loss_scale_window", l.loss_scale_window);
  r("hysteresis", l.hysteresis);
  r("consecutive_hysteresis", l.consecutive_hysteresis);
  r("min_loss_scale", l.min_loss_scale);
}

}  // namespace

nlohmann::json engine_spec_to_json(const EngineSpec& spec) {
  return {{"model", spec.model.to_hf_json()},
          {"zero", zero_json(spec.zero)},
          {"precision", precision_name(spec.precision)},
          {"activation_storage", storage_name(spec.activation_storage)},
          {"micro_batch", spec.micro_batch},
          {"seq_len", spec.seq_len},
          {"grad_accum", spec.grad_accum},
          {"activation_checkpointing", activation_checkpointing_name(spec.ac)},
          {"cpu_checkpointing", spec.ac.on_host},
          {"offload", offload_json(spec.offload)},
          {"frozen_tensors", spec.trainable.frozen_names(ParamLayout(spec.model))},
          {"optimizer", optimizer_json(spec.optim)},
          {"loss_scale", loss_scale_json(spec.loss_scale)}};
}

EngineSpec engine_spec_from_json(const nlohmann::json& j, const std::string& source) {
  const Reader r(j, source + ": engine");
  EngineSpec spec;
  spec.model = ModelConfig::from_hf_json(r.json("model"), source);
  read_zero(r.block("zero"), spec.zero);
  spec.precision = r.parsed("precision", parse_precision);
  spec.activation_storage = parse_storage(r.text("activation_storage"), r.at("activation_storage"));
  r("micro_batch", spec.micro_batch);
  r("seq_len", spec.seq_len);
  r("grad_accum", spec.grad_accum);
  bool on_host = false;
  r("cpu_checkpointing", on_host);
  spec.ac = r.parsed("activation_checkpointing", [&](const std::string& v) {
    return parse_activation_checkpointing(v, on_host);
  });
  read_offload(r.block("offload"), spec.offload);
  std::vector<std::string> frozen;
  r("frozen_tensors", frozen);
  if (!frozen.empty())
    spec.trainable = TrainableSet::from_frozen_names(ParamLayout(spec.model), frozen);
  read_optimizer(r.block("optimizer"), spec.optim);
  read_loss_scale(r.block("loss_scale"), spec.loss_scale);
  return spec;
}

}  // namespace zt
