#include "app/deepspeed_config.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>

#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace po = boost::program_options;
using nlohmann::json;

namespace {

// One JSON object of the config at a dotted path. Typed getters name "source: path.key" in
// errors; every key looked up is known, and finish() warns about the others.
class Section {
 public:
  Section(const json& object, std::string path, DeepSpeedConfig& out)
      : object_(object), path_(std::move(path)), out_(out) {
    ZT_CHECK(object_.is_object(), where("") + " must be a JSON object");
  }
  ~Section() {
    for (const auto& [key, value] : object_.items())
      if (!known_.count(key))
        out_.warnings.push_back(out_.source + ": unknown key '" + path_ + key + "' (ignored)");
  }
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;

  std::string where(const std::string& key) const { return out_.source + ": " + path_ + key; }
  const json* get(const std::string& key) {
    known_.insert(key);
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool is_auto(const std::string& key) {
    const json* v = get(key);
    return v && v->is_string() && v->get<std::string>() == "auto";
  }
  // Accepts integers and integral floats (5e8); nullopt when absent or "auto".
  std::optional<int64_t> integer(const std::string& key) {
    const json* v = get(key);
    if (!v || is_auto(key)) return std::nullopt;
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {
      const double d = v->get<double>();
      ZT_CHECK(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18,
               where(key) + " must be an integer, got " + v->dump());
      return static_cast<int64_t>(d);
    }
    fail(where(key) + " must be an integer or \"auto\", got " + v->dump());
  }
  std::optional<int64_t> integer_at_least(const std::string& key, int64_t min) {
    const std::optional<int64_t> v = integer(key);
    if (v)
      ZT_CHECK(*v >= min, where(key) + (min == 1 ? " must be positive" : " must be >= 0") +
                              ", got " + std::to_string(*v));
    return v;
  }
  std::optional<double> number(const std::string& key) {
    const json* v = get(key);
    if (!v || is_auto(key)) return std::nullopt;
    ZT_CHECK(v->is_number(), where(key) + " must be a number or \"auto\", got " + v->dump());
    return v->get<double>();
  }
  std::optional<bool> boolean(const std::string& key) {
    const json* v = get(key);
    if (!v || is_auto(key)) return std::nullopt;
    ZT_CHECK(v->is_boolean(), where(key) + " must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::optional<std::string> string(const std::string& key) {
    const json* v = get(key);
    if (!v) return std::nullopt;
    ZT_CHECK(v->is_string(), where(key) + " must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  // Marks keys that are accepted without effect.
  void accept(std::initializer_list<const char*> keys) {
    for (const char* k : keys) known_.insert(k);
  }
  const std::string& path() const { return path_; }

 private:
  const json& object_;
  std::string path_;
  DeepSpeedConfig& out_;
  std::set<std::string> known_;
};

void set_option(DeepSpeedConfig& c, const std::string& name, const std::string& value) {
  c.options.emplace_back(name, value);
}
// For a key that overrides another block's mapping of the same option (the scheduler's peak
// over the optimizer's lr).
void replace_option(DeepSpeedConfig& c, const std::string& name, const std::string& value) {
  std::erase_if(c.options, [&](const auto& option) { return option.first == name; });
  set_option(c, name, value);
}
void set_number(DeepSpeedConfig& c, const std::string& name, std::optional<double> v) {
  if (v) set_option(c, name, shortest_decimal(*v));
}
void set_integer(DeepSpeedConfig& c, const std::string& name, std::optional<int64_t> v) {
  if (v) set_option(c, name, std::to_string(*v));
}
void set_bool(DeepSpeedConfig& c, const std::string& name, std::optional<bool> v) {
  if (v) set_option(c, name, *v ? "true" : "false");
}

void parse_precision_blocks(Section& top, DeepSpeedConfig& c) {
  if (const json* fp16 = top.get("fp16")) {
    Section s(*fp16, "fp16.", c);
    s.accept({"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
              "min_loss_scale", "consecutive_hysteresis", "auto_cast"});
    ZT_CHECK(!s.boolean("enabled").value_or(false),
             s.where("enabled") + ": fp16 is not supported, use bf16 {\"enabled\": true}");
  }
  if (const json* bf16 = top.get("bf16")) {
    Section s(*bf16, "bf16.", c);
    s.accept({"immediate_grad_update", "check_grad_overflow"});
    if (const auto enabled = s.boolean("enabled"))
      set_option(c, "precision", *enabled ? "bf16" : "fp32");
  }
}

void parse_optimizer(const json& block, DeepSpeedConfig& c) {
  Section s(block, "optimizer.", c);
  if (const auto type = s.string("type")) {
    ZT_CHECK(*type == "AdamW" || *type == "Adam" || *type == "adamw" || *type == "adam",
             s.where("type") + ": optimizer '" + *type + "' is not supported (AdamW or Adam)");
  }
  const json* params = s.get("params");
  if (!params) return;
  Section p(*params, "optimizer.params.", c);
  p.accept({"torch_adam", "bias_correction", "amsgrad"});
  set_number(c, "lr", p.number("lr"));
  if (const json* betas = p.get("betas"); betas && !p.is_auto("betas")) {
    ZT_CHECK(betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() &&
                 (*betas)[1].is_number(),
             p.where("betas") + " must be [beta1, beta2], got " + betas->dump());
    set_number(c, "beta1", (*betas)[0].get<double>());
    set_number(c, "beta2", (*betas)[1].get<double>());
  }
  set_number(c, "eps", p.number("eps"));
  set_number(c, "weight-decay", p.number("weight_decay"));
  if (p.boolean("adam_w_mode") == false)
    c.warnings.push_back(p.where("adam_w_mode") +
                         ": false (L2 Adam) is not available; zerotrain's AdamW decouples decay");
}

// DeepSpeed's schedulers onto --lr-schedule of the same name (their formulas, lr_schedule.h), with
// the warmup from --warmup-start-lr and the decay to --min-lr at --steps. Absent parameters take
// DeepSpeed's defaults (log warmup over 1000 steps); "auto" keeps our value.
void parse_scheduler(const json& block, DeepSpeedConfig& c) {
  Section s(block, "scheduler.", c);
  const std::string type = s.string("type").value_or("");
  ZT_CHECK(type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR",
           s.where("type") + ": scheduler '" + type +
               "' is not supported (WarmupLR, WarmupDecayLR, WarmupCosineLR)");
  static const json kEmpty = json::object();
  const json* params = s.get("params");
  Section p(params ? *params : kEmpty, "scheduler.params.", c);
  p.accept({"last_batch_iteration"});
  auto warn = [&](const std::string& key, const std::string& what) {
    c.warnings.push_back(p.where(key) + ": " + what);
  };
  set_option(c, "lr-schedule", type);
  // DeepSpeed refuses a warmup of 0 steps (and warms up over at least 2 iterations).
  if (!p.is_auto("warmup_num_steps"))
    set_integer(c, "warmup-steps", p.integer_at_least("warmup_num_steps", 1).value_or(1000));
  std::string warmup_type = p.string("warmup_type").value_or("log");
  if (warmup_type != "linear" && warmup_type != "log") {
    warn("warmup_type", "'" + warmup_type + "' is not log or linear; log, as DeepSpeed does");
    warmup_type = "log";
  }
  set_option(c, "warmup-type", warmup_type);
  // The decay's length, as DeepSpeed takes it, whatever --steps the run makes ("auto": --steps).
  if (type != "WarmupLR" && !p.is_auto("total_num_steps"))
    set_integer(c, "schedule-steps", p.integer_at_least("total_num_steps", 1));
  if (type == "WarmupCosineLR") {  // ratios of the optimizer's lr
    if (!p.is_auto("warmup_min_ratio"))
      c.warmup_min_ratio = p.number("warmup_min_ratio").value_or(0.0);
    if (!p.is_auto("cos_min_ratio")) c.cos_min_ratio = p.number("cos_min_ratio").value_or(1e-4);
    return;
  }
  // WarmupLR / WarmupDecayLR: absolute rates; WarmupDecayLR decays back to warmup_min_lr. The
  // peak is warmup_max_lr, over the optimizer's lr; absent, WarmupLR keeps the optimizer's and
  // WarmupDecayLR takes 0.001 (DeepSpeed 0.19.8's defaults).
  if (!p.is_auto("warmup_max_lr")) {
    const std::optional<double> peak = p.number("warmup_max_lr");
    if (peak || type == "WarmupDecayLR")
      replace_option(c, "lr", shortest_decimal(peak.value_or(1e-3)));
  }
  if (!p.is_auto("warmup_min_lr")) {
    const double start = p.number("warmup_min_lr").value_or(0.0);
    set_number(c, "warmup-start-lr", start);
    if (type == "WarmupDecayLR") set_number(c, "min-lr", start);
  }
}

void parse_offload(Section& zero, const std::string& key, OffloadSettings& out,
                   DeepSpeedConfig& c) {
  const json* block = zero.get(key);
  if (!block) return;
  Section s(*block, zero.path() + key + ".", c);
  s.accept({"ratio", "buffer_size", "max_in_cpu", "pipeline_read", "pipeline_write"});
  out.device = s.string("device").value_or("none");
  ZT_CHECK(out.device == "none" || out.device == "cpu" || out.device == "nvme",
           s.where("device") + " must be none, cpu or nvme, got '" + out.device + "'");
  out.nvme_path = s.string("nvme_path").value_or("");
  out.pin_memory = s.boolean("pin_memory").value_or(false);
  out.buffer_count = s.integer_at_least("buffer_count", 1).value_or(0);
  out.fast_init = s.boolean("fast_init").value_or(false);
}

void parse_zero(const json& block, const ModelConfig& model, DeepSpeedConfig& c) {
  Section s(block, "zero_optimization.", c);
  s.accept({"allgather_partitions", "reduce_scatter", "round_robin_gradients",
            "stage3_gather_fp16_weights_on_model_save"});
  if (const auto stage = s.integer("stage")) {
    ZT_CHECK(*stage >= 0 && *stage <= 3,
             s.where("stage") + " must be 0, 1, 2 or 3, got " + std::to_string(*stage));
    set_integer(c, "zero-stage", stage);
  }
  set_bool(c, "overlap-comm", s.boolean("overlap_comm"));
  c.contiguous_gradients = s.boolean("contiguous_gradients").value_or(true);
  const int64_t d = model.hidden_size;
  // (JSON key, option, minimum, "auto" value or 0 when "auto" keeps ours)
  struct SizeKey {
    const char* key;
    const char* option;
    int64_t min;
    int64_t auto_value;
  };
  const SizeKey sizes[] = {
      {"reduce_bucket_size", "reduce-bucket-size", 1, d * d},
      {"allgather_bucket_size", "allgather-bucket-size", 1, 0},
      {"stage3_prefetch_bucket_size", "prefetch-bucket-size", 1,
       static_cast<int64_t>(0.9 * static_cast<double>(d * d))},
      {"stage3_param_persistence_threshold", "param-persistence-threshold", 0, 10 * d},
      {"stage3_max_live_parameters", "max-live-parameters", 1, 0},
      {"stage3_max_reuse_distance", "max-reuse-distance", 0, 0},
  };
  for (const SizeKey& k : sizes) {
    if (s.is_auto(k.key)) {
      if (k.auto_value > 0) set_integer(c, k.option, k.auto_value);
      continue;
    }
    set_integer(c, k.option, s.integer_at_least(k.key, k.min));
  }
  c.gather_16bit_weights_on_model_save =
      s.boolean("stage3_gather_16bit_weights_on_model_save").value_or(true);
  c.sub_group_size = s.integer_at_least("sub_group_size", 1).value_or(0);
  parse_offload(s, "offload_optimizer", c.offload_optimizer, c);
  parse_offload(s, "offload_param", c.offload_param, c);
  if (c.offload_optimizer.enabled()) set_option(c, "offload-optimizer", c.offload_optimizer.device);
  if (c.offload_param.enabled()) set_option(c, "offload-param", c.offload_param.device);
  const std::string& nvme = c.offload_optimizer.nvme_path.empty() ? c.offload_param.nvme_path
                                                                  : c.offload_optimizer.nvme_path;
  if (!nvme.empty()) set_option(c, "nvme-path", nvme);
  if (c.offload_optimizer.buffer_count > 0)
    set_integer(c, "offload-buffer-count", c.offload_optimizer.buffer_count);
  if (c.sub_group_size > 0) set_integer(c, "sub-group-size", c.sub_group_size);
}

// A present block turns checkpointing on: every layer, or every K-th layer when
// number_checkpoints asks for fewer checkpoints than layers.
void parse_activation_checkpointing(const json& block, const ModelConfig& model,
                                    DeepSpeedConfig& c) {
  Section s(block, "activation_checkpointing.", c);
  s.accept({"contiguous_memory_optimization", "synchronize_checkpoint_boundary", "profile"});
  if (s.boolean("partition_activations").value_or(false))
    c.warnings.push_back(s.where("partition_activations") +
                         ": has no effect without model parallelism (ignored)");
  const int64_t layers = model.num_layers;
  const int64_t wanted = s.integer_at_least("number_checkpoints", 1).value_or(layers);
  const int64_t every = std::max<int64_t>(1, layers / std::max<int64_t>(1, wanted));
  if ((layers + every - 1) / every != std::min(wanted, layers))
    c.warnings.push_back(s.where("number_checkpoints") + ": " + std::to_string(wanted) +
                         " checkpoints approximated by every " + std::to_string(every) +
                         " layer(s)");
  set_option(c, "activation-checkpointing", every == 1 ? "full" : "every:" + std::to_string(every));
  set_bool(c, "cpu-checkpointing", s.boolean("cpu_checkpointing"));
}

bool launch_rank_is_zero() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::string(v) == "0";
  return true;
}

}  // namespace

std::optional<std::string> DeepSpeedConfig::option(const std::string& name) const {
  std::optional<std::string> value;
  for (const auto& [n, v] : options)
    if (n == name) value = v;
  return value;
}

DeepSpeedConfig parse_deepspeed_config(const json& j, const std::string& source,
                                       const ModelConfig& model) {
  DeepSpeedConfig c;
  c.source = source;
  {
    Section top(j, "", c);
    parse_precision_blocks(top, c);
    top.accept({"steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
                "zero_force_ds_cpu_optimizer", "dump_state"});
    c.train_batch_size = top.integer_at_least("train_batch_size", 1);
    set_integer(c, "micro-batch", top.integer_at_least("train_micro_batch_size_per_gpu", 1));
    set_integer(c, "grad-accum", top.integer_at_least("gradient_accumulation_steps", 1));
    set_number(c, "clip", top.number("gradient_clipping"));
    if (const json* b = top.get("optimizer")) parse_optimizer(*b, c);
    if (const json* b = top.get("scheduler")) parse_scheduler(*b, c);
    if (const json* b = top.get("zero_optimization")) parse_zero(*b, model, c);
    if (const json* b = top.get("activation_checkpointing"))
      parse_activation_checkpointing(*b, model, c);
  }
  return c;
}

DeepSpeedConfig load_deepspeed_config(const std::string& path, const ModelConfig& model) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot open DeepSpeed config '" + path + "'");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail("DeepSpeed config '" + path + "' is not valid JSON: " + e.what());
  }
  return parse_deepspeed_config(j, path, model);
}

void apply_batch_size_rule(const BatchSizeRule& rule, int world, int64_t& micro, int64_t& accum) {
  if (!rule.train_batch_size) return;
  const int64_t total = *rule.train_batch_size, n = world;
  const std::string tbs = rule.source + ": train_batch_size " + std::to_string(total);
  // Products past int64 exceed any train_batch_size: they are "not divisible" / "!=" too.
  auto times = [](int64_t a, int64_t b) {
    int64_t p = 0;
    return __builtin_mul_overflow(a, b, &p) ? std::optional<int64_t>() : std::optional(p);
  };
  auto text = [](std::optional<int64_t> v) {
    return v ? std::to_string(*v) : std::string("more than 2^63");
  };
  for (auto [value, name] : {std::pair{micro, "micro-batch"}, std::pair{accum, "grad-accum"}})
    ZT_CHECK(value >= 1,
             rule.source + ": --" + name + " must be at least 1, got " + std::to_string(value));
  auto divide = [&](std::optional<int64_t> by, const std::string& what) {
    ZT_CHECK(by && *by > 0 && total % *by == 0,
             tbs + " is not divisible by " + what + " = " + text(by));
    return total / *by;
  };
  if (rule.micro_batch && rule.grad_accum) {
    const std::optional<int64_t> micro_accum = times(*rule.micro_batch, *rule.grad_accum);
    const std::optional<int64_t> product = micro_accum ? times(*micro_accum, n) : micro_accum;
    ZT_CHECK(product == total, tbs + " != micro-batch " + std::to_string(*rule.micro_batch) +
                                   " × gradient_accumulation_steps " +
                                   std::to_string(*rule.grad_accum) + " × world size " +
                                   std::to_string(n) + " = " + text(product));
  } else if (rule.micro_batch) {
    accum = divide(times(*rule.micro_batch, n), "micro-batch " + std::to_string(*rule.micro_batch) +
                                                    " × world size " + std::to_string(n));
  } else if (rule.grad_accum) {
    micro = divide(times(*rule.grad_accum, n), "gradient_accumulation_steps " +
                                                   std::to_string(*rule.grad_accum) +
                                                   " × world size " + std::to_string(n));
  } else {
    micro = divide(n, "world size " + std::to_string(n));
    accum = 1;
  }
  if (rule.micro_batch) micro = *rule.micro_batch;
  if (rule.grad_accum) accum = *rule.grad_accum;
}

AppliedDeepSpeedFile apply_deepspeed_file(const std::string& path, const ModelConfig& model,
                                          const po::options_description& desc,
                                          po::variables_map& vm) {
  DeepSpeedConfig c = load_deepspeed_config(path, model);
  // Offload devices the engine does not implement yet: every such key in one error.
  std::string not_implemented;
  auto refuse = [&](const std::string& key, const OffloadSettings& o) {
    if (!o.enabled()) return;
    not_implemented += (not_implemented.empty() ? "" : "; ") + std::string("zero_optimization.") +
                       key + ".device '" + o.device + "'";
  };
  if (desc.find_nothrow("offload-param", false) == nullptr)
    refuse("offload_param", c.offload_param);
  if (desc.find_nothrow("offload-optimizer", false) == nullptr)
    refuse("offload_optimizer", c.offload_optimizer);
  ZT_CHECK(not_implemented.empty(),
           path + ": " + not_implemented + ": not implemented yet (set \"device\": \"none\")");
  auto unset = [&](const std::string& name) {
    return desc.find_nothrow(name, false) && (!vm.count(name) || vm[name].defaulted());
  };
  AppliedDeepSpeedFile applied;
  auto store = [&](const std::vector<std::pair<std::string, std::string>>& options) {
    std::vector<std::string> args;
    for (const auto& [name, value] : options)
      if (unset(name)) {
        args.push_back("--" + name + "=" + value);
        applied.options_set.push_back(name);
      }
    try {
      po::store(po::command_line_parser(args).options(desc).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      fail(path + ": " + e.what());
    }
  };
  store(c.options);
  // Values that depend on the final peak learning rate / step count.
  for (const auto& [option, ratio] :
       {std::pair{"min-lr", c.cos_min_ratio}, std::pair{"warmup-start-lr", c.warmup_min_ratio}})
    if (ratio && vm.count("lr"))
      store({{option, shortest_decimal(static_cast<float>(*ratio * vm["lr"].as<float>()))}});
  if (launch_rank_is_zero())
    for (const std::string& w : c.warnings) std::cerr << "warning: " << w << "\n";
  BatchSizeRule& rule = applied.batch_rule;
  rule.source = path;
  rule.train_batch_size = c.train_batch_size;
  auto given = [&](const char* name) -> std::optional<int64_t> {
    if (!vm.count(name) || vm[name].defaulted()) return std::nullopt;
    return vm[name].as<int64_t>();
  };
  rule.micro_batch = given("micro-batch");
  rule.grad_accum = given("grad-accum");
  // With train_batch_size, micro-batch and grad-accum may be derived from the file's numbers.
  if (rule.train_batch_size)
    for (const char* derived : {"micro-batch", "grad-accum"})
      applied.options_set.push_back(derived);
  return applied;
}

std::string attributed_to_deepspeed_file(const std::string& what, const std::string& path,
                                         const std::vector<std::string>& options_set) {
  for (const std::string& name : options_set) {
    const std::string flag = "--" + name;
    for (size_t at = what.find(flag); at != std::string::npos; at = what.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole = end == what.size() ||
                         !(std::isalnum(static_cast<unsigned char>(what[end])) || what[end] == '-');
      if (whole) return what + " (the value comes from DeepSpeed config '" + path + "')";
    }
  }
  return what;
}

}  // namespace zt
