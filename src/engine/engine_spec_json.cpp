#include "engine/engine_spec_json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/activation_checkpointing.h"
#include "engine/lr_schedule.h"
#include "model/layout.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace {

// Each block's fields, listed once for both directions: `io` is a JsonWriter or a JsonReader.
// io(key, value) for numbers, flags and text; io.real for floats (written as their shortest
// decimals); io.named for enums, through their name and parse functions.
template <typename Io, typename Zero>
void visit_zero(Io& io, Zero& z) {
  io("stage", z.stage);
  io("overlap_comm", z.overlap_comm);
  io("reduce_bucket_size", z.reduce_bucket_size);
  io("allgather_bucket_size", z.allgather_bucket_size);
  io("prefetch_bucket_size", z.prefetch_bucket_size);
  io("param_persistence_threshold", z.param_persistence_threshold);
  io("max_live_parameters", z.max_live_parameters);
  io("max_reuse_distance", z.max_reuse_distance);
  io("world_invariant", z.world_invariant);
}

template <typename Io, typename Offload>
void visit_offload(Io& io, Offload& o) {
  io.named("optimizer", o.optimizer, offload_device_name, parse_offload_device);
  io.named("param", o.param, offload_device_name, parse_offload_device);
  io("nvme_path", o.nvme_path);
  io("buffer_count", o.buffer_count);
  io("sub_group_size", o.sub_group_size);
  io("delay", o.delay);
  io("delay_after", o.delay_after);
  io("overlap", o.overlap);
  io("overlap_bytes", o.overlap_bytes);
  io.added_later("bf16_gradient_copies", o.bf16_gradient_copies);  // absent: fp32 copies
}

template <typename Io, typename AdamW>
void visit_optimizer(Io& io, AdamW& a) {
  io.real("lr", a.lr);
  io.real("min_lr", a.min_lr);
  io("warmup_steps", a.warmup_steps);
  io.named("schedule", a.schedule, lr_schedule_name, parse_lr_schedule);
  io.named("warmup_shape", a.warmup_shape, warmup_shape_name, parse_warmup_shape);
  io.real("warmup_start_lr", a.warmup_start_lr);
  io("schedule_steps", a.schedule_steps);
  io.real("beta1", a.beta1);
  io.real("beta2", a.beta2);
  io.real("eps", a.eps);
  io.real("weight_decay", a.weight_decay);
  io.real("clip", a.clip);
}

template <typename Io, typename LossScale>
void visit_loss_scale(Io& io, LossScale& l) {
  io("loss_scale", l.loss_scale);
  io("initial_scale_power", l.initial_scale_power);
  io("loss_scale_window", l.loss_scale_window);
  io("hysteresis", l.hysteresis);
  io("consecutive_hysteresis", l.consecutive_hysteresis);
  io("min_loss_scale", l.min_loss_scale);
}

class JsonWriter {
 public:
  template <typename T>
  void operator()(const char* key, const T& value) {
    j_[key] = value;
  }
  void real(const char* key, float value) { j_[key] = decimal_of_float(value); }
  template <typename T>
  void added_later(const char* key, const T& value) {
    j_[key] = value;
  }
  template <typename E, typename Name, typename Parse>
  void named(const char* key, E value, Name name, Parse) {
    j_[key] = name(value);
  }
  nlohmann::json take() { return std::move(j_); }

 private:
  nlohmann::json j_ = nlohmann::json::object();
};

// Reads an object's keys; errors name `source`'s "engine.<block>.<key>".
class JsonReader {
 public:
  JsonReader(const nlohmann::json& j, std::string path) : j_(j), path_(std::move(path)) {
    ZT_CHECK(j_.is_object(), path_ + ": expected an object");
  }
  // A flag, a whole number within T's range, a number, a text or a list of texts, as T asks;
  // anything else (2.5 for a count, true for a number) is refused, not converted.
  template <typename T>
  void operator()(const char* key, T& out) const {
    const nlohmann::json& v = json(key);
    bool fits = true;
    if constexpr (std::is_same_v<T, bool>) {
      fits = v.is_boolean();
    } else if constexpr (std::is_integral_v<T>) {
      fits = v.is_number_integer() &&
             (v.is_number_unsigned()
                  ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                  : v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                        v.get<int64_t>() <= std::numeric_limits<T>::max());
    } else if constexpr (std::is_floating_point_v<T>) {
      fits = v.is_number();
    } else if constexpr (std::is_same_v<T, std::string>) {
      fits = v.is_string();
    }
    try {
      ZT_CHECK(fits, "");
      out = v.get<T>();
    } catch (const std::exception&) {
      throw Error(at(key) + " has the wrong type or range: " + v.dump());
    }
  }
  // A key records written before it existed lack: absent, `out` keeps its value (the default,
  // which is what those runs did).
  template <typename T>
  void added_later(const char* key, T& out) const {
    if (j_.contains(key)) (*this)(key, out);
  }
  void real(const char* key, float& out) const {
    double v = 0;
    (*this)(key, v);
    ZT_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(),
             at(key) + " is beyond a float's range: " + json(key).dump());
    out = static_cast<float>(v);
  }
  template <typename E, typename Name, typename Parse>
  void named(const char* key, E& out, Name, Parse parse) const {
    std::string text;
    (*this)(key, text);
    out = parse(text, at(key));
  }
  // What `make` returns; its error is prefixed with the key.
  template <typename Make>
  auto keyed(const char* key, Make make) const {
    try {
      return make();
    } catch (const Error& e) {
      throw Error(at(key) + ": " + e.what());
    }
  }
  // The key's text through `parse`, whose error is prefixed with the key.
  template <typename Parse>
  auto parsed(const char* key, Parse parse) const {
    std::string text;
    (*this)(key, text);
    return keyed(key, [&] { return parse(text); });
  }
  JsonReader block(const char* key) const { return JsonReader(json(key), at(key)); }
  std::string at(const char* key) const { return path_ + "." + key; }
  const nlohmann::json& json(const char* key) const {
    const auto it = j_.find(key);
    ZT_CHECK(it != j_.end(), at(key) + " is missing");
    return *it;
  }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

}  // namespace

nlohmann::json engine_spec_to_json(const EngineSpec& spec) {
  JsonWriter zero, offload, optimizer, loss_scale;
  visit_zero(zero, spec.zero);
  visit_offload(offload, spec.offload);
  visit_optimizer(optimizer, spec.optim);
  visit_loss_scale(loss_scale, spec.loss_scale);
  return {{"model", spec.model.to_hf_json()},
          {"zero", zero.take()},
          {"precision", precision_name(spec.precision)},
          {"activation_storage", activation_storage_name(spec.activation_storage)},
          {"micro_batch", spec.micro_batch},
          {"seq_len", spec.seq_len},
          {"grad_accum", spec.grad_accum},
          {"activation_checkpointing", activation_checkpointing_name(spec.ac)},
          {"cpu_checkpointing", spec.ac.on_host},
          {"offload", offload.take()},
          {"frozen_tensors", spec.trainable.frozen_names(ParamLayout(spec.model))},
          {"optimizer", optimizer.take()},
          {"loss_scale", loss_scale.take()}};
}

EngineSpec engine_spec_from_json(const nlohmann::json& j, const std::string& source) {
  const JsonReader r(j, source + ": engine");
  EngineSpec spec;
  spec.model = ModelConfig::from_hf_json(r.json("model"), source + ": engine.model");
  const JsonReader zero = r.block("zero"), offload = r.block("offload");
  const JsonReader optimizer = r.block("optimizer"), loss_scale = r.block("loss_scale");
  visit_zero(zero, spec.zero);
  visit_offload(offload, spec.offload);
  visit_optimizer(optimizer, spec.optim);
  visit_loss_scale(loss_scale, spec.loss_scale);
  spec.precision = r.parsed("precision", parse_precision);
  spec.activation_storage = r.parsed("activation_storage", [](const std::string& text) {
    return parse_activation_storage(text, "activation_storage");
  });
  r("micro_batch", spec.micro_batch);
  r("seq_len", spec.seq_len);
  r("grad_accum", spec.grad_accum);
  bool on_host = false;
  r("cpu_checkpointing", on_host);
  spec.ac = r.parsed("activation_checkpointing", [&](const std::string& v) {
    return parse_activation_checkpointing(v, on_host);
  });
  std::vector<std::string> frozen;
  r("frozen_tensors", frozen);
  if (!frozen.empty())
    spec.trainable = r.keyed("frozen_tensors", [&] {
      return TrainableSet::from_frozen_names(ParamLayout(spec.model), frozen);
    });
  return spec;
}

}  // namespace zt
