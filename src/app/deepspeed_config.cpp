#include "app/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "app/deepspeed_block.h"
#include "engine/loss_scaler.h"
#include "engine/stage_traits.h"
#include "model/layout.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_text.h"
#include "util/sha256.h"

namespace zt {

namespace po = boost::program_options;
using nlohmann::json;

namespace {

using Block = DeepSpeedBlock;

// The mapping's key for what a file implies by leaving a key out.
std::string absent(const std::string& key) {
  return key + " (absent: DeepSpeed's default)";
}

void set_option(DeepSpeedConfig& c, const std::string& key, const std::string& name,
                const std::string& value) {
  c.options.push_back({key, name, value});
}
// For a key that overrides another block's mapping of the same option (the scheduler's peak
// over the optimizer's lr).
void replace_option(DeepSpeedConfig& c, const std::string& key, const std::string& name,
                    const std::string& value) {
  std::erase_if(c.options, [&](const MappedOption& option) { return option.option == name; });
  set_option(c, key, name, value);
}
// The key a value came from: `key` itself, or DeepSpeed's default for it.
std::string source_of(const Block& b, const std::string& key) {
  return b.has(key) ? b.dotted(key) : absent(b.dotted(key));
}
void set_number(Block& b, const std::string& key, const std::string& name,
                std::optional<double> v) {
  if (v) set_option(b.config(), source_of(b, key), name, shortest_decimal(*v));
}
void set_integer(Block& b, const std::string& key, const std::string& name,
                 std::optional<int64_t> v) {
  if (v) set_option(b.config(), source_of(b, key), name, std::to_string(*v));
}
void set_bool(Block& b, const std::string& key, const std::string& name, std::optional<bool> v) {
  if (v) set_option(b.config(), source_of(b, key), name, *v ? "true" : "false");
}

// DeepSpeed trains in fp32 unless fp16 or bf16 ("bfloat16", its older name) is enabled. "auto"
// is the Trainer's flag: the precision then follows --precision. fp16's loss-scaling keys map onto
// the --loss-scale options, which take effect with --precision fp16 only, as the block's keys do
// in DeepSpeed only when it is enabled.
void parse_precision_blocks(Block& top, DeepSpeedConfig& c) {
  bool fp16_on = false, precision_auto = false;
  if (const json* fp16 = top.get("fp16")) {
    Block s(
        *fp16, "fp16.", c,
        {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
         "hysteresis", "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"},
        UnknownKeys::kRefuse);
    s.refuse_unless_default("fp16_master_weights_and_grads", false,
                            "fp16 master weights and gradients (zerotrain keeps them fp32)");
    precision_auto = s.is_auto("enabled");
    fp16_on = s.boolean("enabled").value_or(false);
    if (fp16_on || precision_auto) {
      // Each key read once: mapped onto the --loss-scale options, and (enabled) validated.
      const std::optional<double> scale = s.number("loss_scale");
      const std::optional<int64_t> power = s.integer("initial_scale_power"),
                                   window = s.integer("loss_scale_window"),
                                   hysteresis = s.integer("hysteresis"),
                                   floor = s.integer("min_loss_scale");  // an integer in DeepSpeed
      const std::optional<bool> consecutive = s.boolean("consecutive_hysteresis");
      set_number(s, "loss_scale", "loss-scale", scale);
      set_integer(s, "initial_scale_power", "initial-scale-power", power);
      set_integer(s, "loss_scale_window", "loss-scale-window", window);
      set_integer(s, "hysteresis", "hysteresis", hysteresis);
      set_bool(s, "consecutive_hysteresis", "consecutive-hysteresis", consecutive);
      set_integer(s, "min_loss_scale", "min-loss-scale", floor);
      if (fp16_on) {
        // Refused as DeepSpeed refuses them, whichever command reads the file.
        LossScaleConfig scaling;
        scaling.loss_scale = scale.value_or(scaling.loss_scale);
        scaling.initial_scale_power = static_cast<int>(power.value_or(scaling.initial_scale_power));
        scaling.loss_scale_window = window.value_or(scaling.loss_scale_window);
        scaling.hysteresis = static_cast<int>(hysteresis.value_or(scaling.hysteresis));
        if (floor) scaling.min_loss_scale = static_cast<double>(*floor);
        try {
          scaling.validate();
        } catch (const Error& e) {
          fail(s.config().source + ": " + e.what());  // the file that holds the value
        }
        set_option(c, s.dotted("enabled"), "precision", "fp16");
      }
    }
  }
  const std::string bf16_key = top.either({"bf16", "bfloat16"});
  if (const json* bf16 = top.get(bf16_key)) {
    Block s(*bf16, bf16_key + ".", c,
            {"enabled", "immediate_grad_update", "check_grad_overflow",
             "bf16_master_weights_and_grads", "bf16_optimizer_states"},
            UnknownKeys::kRefuse);
    for (const char* key : {"bf16_master_weights_and_grads", "bf16_optimizer_states"})
      s.refuse_unless_default(key, false, "bf16 master weights or optimizer states");
    precision_auto = precision_auto || s.is_auto("enabled");
    if (s.boolean("enabled").value_or(false)) {
      ZT_CHECK(!fp16_on, s.where("enabled") +
                             " and fp16.enabled are both true: DeepSpeed refuses fp16 and bf16 "
                             "together; enable one");
      set_option(c, s.dotted("enabled"), "precision", "bf16");
      return;
    }
  }
  if (fp16_on || precision_auto) return;
  set_option(c, top.has(bf16_key) ? bf16_key + ".enabled" : kNoPrecisionBlock, "precision", "fp32");
}

void parse_optimizer(const json& block, DeepSpeedConfig& c) {
  Block s(block, "optimizer.", c, {"type", "params", "legacy_fusion"}, UnknownKeys::kRefuse);
  std::string type = s.string("type").value_or("");
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  ZT_CHECK(type == "adamw" || type == "adam", s.where("type") + ": optimizer '" +
                                                  s.string("type").value_or("") +
                                                  "' is not supported (AdamW or Adam)");
  static const json kEmpty = json::object();
  const json* params = s.get("params");
  // The keywords of the classes DeepSpeed builds for Adam/AdamW: FusedAdam, DeepSpeedCPUAdam and
  // torch.optim.AdamW, with DeepSpeed's own torch_adam and adam_w_mode.
  Block p(params ? *params : kEmpty, "optimizer.params.", c,
          {"lr", "betas", "eps", "weight_decay", "bias_correction", "amsgrad", "adam_w_mode",
           "torch_adam", "set_grad_none", "fp32_optimizer_states", "maximize", "foreach",
           "capturable", "differentiable", "fused", "max_grad_norm"},
          UnknownKeys::kRefuse);
  ZT_CHECK(!p.has("max_grad_norm"),
           p.where("max_grad_norm") +
               " is not an optimizer parameter in DeepSpeed either: use \"gradient_clipping\"");
  p.refuse_unless_default("amsgrad", false, "AMSGrad");
  p.refuse_unless_default("bias_correction", true, "Adam without bias correction");
  p.refuse_unless_default("maximize", false, "gradient ascent");
  p.refuse_unless_default("fp32_optimizer_states", true, "low-precision Adam moments");
  // A parameter left out takes the default of the class DeepSpeed builds (lr 1e-3, betas (0.9,
  // 0.999), eps 1e-8, no decay), as in DeepSpeed; "auto" keeps zerotrain's option.
  auto number = [&](const char* key, const char* option, double deepspeed_default) {
    if (p.is_auto(key)) return std::optional<double>();
    const std::optional<double> v = p.number(key);
    set_option(c, source_of(p, key), option, shortest_decimal(v.value_or(deepspeed_default)));
    return std::optional<double>(v.value_or(deepspeed_default));
  };
  number("lr", "lr", 1e-3);
  if (!p.is_auto("betas")) {
    const json* betas = p.get("betas");
    ZT_CHECK(!betas || (betas->is_array() && betas->size() == 2 && (*betas)[0].is_number() &&
                        (*betas)[1].is_number()),
             p.where("betas") + " must be [beta1, beta2], got " + (betas ? betas->dump() : ""));
    const std::string key = source_of(p, "betas");
    set_option(c, key, "beta1", shortest_decimal(betas ? (*betas)[0].get<double>() : 0.9));
    set_option(c, key, "beta2", shortest_decimal(betas ? (*betas)[1].get<double>() : 0.999));
  }
  number("eps", "eps", 1e-8);
  // torch_adam builds torch.optim.AdamW (AdamW, or Adam in its default AdamW mode), whose
  // default decay is 0.01; FusedAdam's and DeepSpeedCPUAdam's is 0.
  const bool torch_adamw = p.boolean("torch_adam").value_or(false) &&
                           (type == "adamw" || p.boolean("adam_w_mode").value_or(true));
  const std::optional<double> decay =
      number("weight_decay", "weight-decay", torch_adamw ? 0.01 : 0.0);
  // DeepSpeed's "Adam" with adam_w_mode false is L2-regularised Adam ("AdamW" ignores the flag);
  // zerotrain's decay is decoupled, which is the same only without decay.
  const bool l2_adam = type == "adam" && p.boolean("adam_w_mode") == false;
  ZT_CHECK(!l2_adam || decay == 0.0,
           p.where("adam_w_mode") + " = false with weight decay " +
               (decay ? shortest_decimal(*decay) : std::string("\"auto\"")) +
               " is L2-regularised Adam, which is not implemented (zerotrain's AdamW decouples "
               "the decay; set adam_w_mode true or weight_decay 0)");
}

// DeepSpeed's schedulers onto --lr-schedule of the same name (their formulas, lr_schedule.h), with
// the warmup from --warmup-start-lr and the decay to --min-lr at --steps. Absent parameters take
// DeepSpeed's defaults (log warmup over 1000 steps); "auto" keeps our value. The parameters are
// the keywords of the scheduler's constructor, as DeepSpeed passes them.
void parse_scheduler(const json& block, DeepSpeedConfig& c) {
  Block s(block, "scheduler.", c, {"type", "params"}, UnknownKeys::kRefuse);
  const std::string type = s.string("type").value_or("");
  ZT_CHECK(type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR",
           s.where("type") + ": scheduler '" + type +
               "' is not supported (WarmupLR, WarmupDecayLR, WarmupCosineLR)");
  std::vector<std::string> keywords = {"warmup_num_steps", "warmup_type", "last_batch_iteration"};
  if (type != "WarmupLR") keywords.push_back("total_num_steps");
  if (type == "WarmupCosineLR")
    keywords.insert(keywords.end(), {"warmup_min_ratio", "cos_min_ratio"});
  else
    keywords.insert(keywords.end(), {"warmup_min_lr", "warmup_max_lr"});
  static const json kEmpty = json::object();
  const json* params = s.get("params");
  Block p(params ? *params : kEmpty, "scheduler.params.", c, keywords, UnknownKeys::kRefuse);
  set_option(c, s.dotted("type"), "lr-schedule", type);
  // DeepSpeed refuses a warmup of 0 steps (and warms up over at least 2 iterations).
  if (!p.is_auto("warmup_num_steps"))
    set_integer(p, "warmup_num_steps", "warmup-steps",
                p.integer_at_least("warmup_num_steps", 1).value_or(1000));
  std::string warmup_type = p.string("warmup_type").value_or("log");
  if (warmup_type != "linear" && warmup_type != "log") {
    p.warn("warmup_type", "'" + warmup_type + "' is not log or linear; log, as DeepSpeed does");
    warmup_type = "log";
  }
  set_option(c, source_of(p, "warmup_type"), "warmup-type", warmup_type);
  // The decay's length, as DeepSpeed takes it, whatever --steps the run makes ("auto": --steps).
  if (type != "WarmupLR" && !p.is_auto("total_num_steps"))
    set_integer(p, "total_num_steps", "schedule-steps", p.integer_at_least("total_num_steps", 1));
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
      replace_option(c, source_of(p, "warmup_max_lr"), "lr", shortest_decimal(peak.value_or(1e-3)));
  }
  if (!p.is_auto("warmup_min_lr")) {
    const double start = p.number("warmup_min_lr").value_or(0.0);
    set_number(p, "warmup_min_lr", "warmup-start-lr", start);
    if (type == "WarmupDecayLR") set_number(p, "warmup_min_lr", "min-lr", start);
  }
}

// offload_optimizer / offload_param, with the keys DeepSpeed's two offload models accept; the
// deprecated zero_optimization.cpu_offload / cpu_offload_param (true: device cpu) map onto them.
void parse_offload(Block& zero, const std::string& key, const std::string& deprecated_key,
                   OffloadSettings& out, DeepSpeedConfig& c) {
  const bool is_param = key == "offload_param";
  if (zero.boolean(deprecated_key).value_or(false)) {
    ZT_CHECK(!zero.has(key), zero.where(deprecated_key) + " (deprecated) and " + zero.dotted(key) +
                                 " are both given; keep " + zero.dotted(key));
    out.device = "cpu";
    out.pin_memory = zero.boolean("cpu_offload_use_pin_memory").value_or(false);
    return;
  }
  const json* block = zero.get(key);
  if (!block) return;
  std::vector<std::string> keys = {"device", "nvme_path", "buffer_count", "pin_memory"};
  if (is_param)
    keys.insert(keys.end(), {"buffer_size", "max_in_cpu"});
  else
    keys.insert(keys.end(), {"pipeline_read", "pipeline_write", "fast_init", "ratio",
                             "super_offload", "cpuadam_cores_perc"});
  Block s(*block, zero.path() + key + ".", c, keys, UnknownKeys::kRefuse);
  out.device = s.string("device").value_or("none");
  ZT_CHECK(out.device == "none" || out.device == "cpu" || out.device == "nvme",
           s.where("device") + " must be none, cpu or nvme, got '" + out.device + "'");
  out.nvme_path = s.string("nvme_path").value_or("");
  out.pin_memory = s.boolean("pin_memory").value_or(false);
  out.buffer_count = s.integer_at_least("buffer_count", 1).value_or(0);
  if (is_param) return;
  out.fast_init = s.boolean("fast_init").value_or(false);
  s.warn_unless_default("ratio", 1.0, "zerotrain offloads the whole optimizer");
  // SuperOffload's speculative CPU AdamW is what --offload-optimizer-overlap auto (the default)
  // runs with CPU optimizer offload (docs/offload.md); elsewhere the key does nothing.
  if (out.device != "cpu")
    s.warn_unless_default("super_offload", false, "it needs offload_optimizer.device cpu");
  s.warn_unless_default("cpuadam_cores_perc", 0.8,
                        "the CPU AdamW runs on the rank's cores off the one that feeds the GPU");
}

// DeepSpeedZeroConfig's fields and their aliases (DeepSpeed 0.19.8).
const std::vector<std::string>& zero_keys() {
  static const std::vector<std::string> keys = {"stage",
                                                "contiguous_gradients",
                                                "reduce_scatter",
                                                "reduce_bucket_size",
                                                "use_multi_rank_bucket_allreduce",
                                                "allgather_partitions",
                                                "allgather_bucket_size",
                                                "overlap_comm",
                                                "compute_grad_norm",
                                                "load_from_fp32_weights",
                                                "elastic_checkpoint",
                                                "offload_param",
                                                "offload_optimizer",
                                                "zenflow",
                                                "sub_group_size",
                                                "cpu_offload_param",
                                                "cpu_offload_use_pin_memory",
                                                "cpu_offload",
                                                "prefetch_bucket_size",
                                                "stage3_prefetch_bucket_size",
                                                "param_persistence_threshold",
                                                "stage3_param_persistence_threshold",
                                                "model_persistence_threshold",
                                                "stage3_model_persistence_threshold",
                                                "max_live_parameters",
                                                "stage3_max_live_parameters",
                                                "max_reuse_distance",
                                                "stage3_max_reuse_distance",
                                                "gather_16bit_weights_on_model_save",
                                                "stage3_gather_16bit_weights_on_model_save",
                                                "stage3_gather_fp16_weights_on_model_save",
                                                "module_granularity_threshold",
                                                "stage3_module_granularity_threshold",
                                                "use_all_reduce_for_fetch_params",
                                                "stage3_use_all_reduce_for_fetch_params",
                                                "allgather_sequential",
                                                "stage3_allgather_sequential",
                                                "ignore_unused_parameters",
                                                "legacy_stage1",
                                                "round_robin_gradients",
                                                "parameter_alignment",
                                                "zero_hpz_partition_size",
                                                "zero_quantized_weights",
                                                "zero_quantized_nontrainable_weights",
                                                "zero_quantized_gradients",
                                                "memory_efficient_linear",
                                                "pipeline_loading_checkpoint",
                                                "override_module_apply",
                                                "log_trace_cache_warnings",
                                                "enable_sanity_checks",
                                                "save_muon_momentum_buffer_in_memory",
                                                "leaf_module"};
  return keys;
}

int64_t largest_tensor_numel(const ModelConfig& model) {
  int64_t largest = 1;
  const ParamLayout layout(model);
  for (const TensorInfo& t : layout.tensors()) largest = std::max(largest, t.numel);
  return largest;
}

// The bucket, prefetch, persistence, live-parameter and reuse-distance sizes, with "auto" resolved
// as the Hugging Face Trainer resolves it from the model's hidden size.
void map_zero_sizes(Block& s, const ModelConfig& model) {
  const int64_t d = model.hidden_size;
  // (JSON key and alias, option, minimum, "auto" value or 0 when "auto" keeps ours)
  struct SizeKey {
    std::initializer_list<const char*> keys;
    const char* option;
    int64_t min;
    int64_t auto_value;
  };
  const SizeKey sizes[] = {
      {{"reduce_bucket_size"}, "reduce-bucket-size", 1, d * d},
      {{"allgather_bucket_size"}, "allgather-bucket-size", 1, 0},
      {{"stage3_prefetch_bucket_size", "prefetch_bucket_size"},
       "prefetch-bucket-size",
       0,
       static_cast<int64_t>(0.9 * static_cast<double>(d * d))},
      {{"stage3_param_persistence_threshold", "param_persistence_threshold"},
       "param-persistence-threshold",
       0,
       10 * d},
      {{"stage3_max_live_parameters", "max_live_parameters"}, "max-live-parameters", 0, 0},
      {{"stage3_max_reuse_distance", "max_reuse_distance"}, "max-reuse-distance", 0, 0},
  };
  for (const SizeKey& k : sizes) {
    const std::string key = s.either(k.keys);
    if (s.is_auto(key)) {
      if (k.auto_value > 0) set_integer(s, key, k.option, k.auto_value);
      continue;
    }
    set_integer(s, key, k.option, s.integer_at_least(key, k.min));
  }
}

// offload_optimizer / offload_param (and their older cpu_offload aliases) onto the offload options.
void map_zero_offload(Block& s, DeepSpeedConfig& c) {
  parse_offload(s, "offload_optimizer", "cpu_offload", c.offload_optimizer, c);
  parse_offload(s, "offload_param", "cpu_offload_param", c.offload_param, c);
  const std::string optimizer_key =
      s.has("offload_optimizer") ? "offload_optimizer" : "cpu_offload";
  const std::string param_key = s.has("offload_param") ? "offload_param" : "cpu_offload_param";
  if (c.offload_optimizer.enabled())
    set_option(c, s.dotted(optimizer_key), "offload-optimizer", c.offload_optimizer.device);
  if (c.offload_param.enabled())
    set_option(c, s.dotted(param_key), "offload-param", c.offload_param.device);
  const bool optimizer_path = !c.offload_optimizer.nvme_path.empty();
  const std::string& nvme =
      optimizer_path ? c.offload_optimizer.nvme_path : c.offload_param.nvme_path;
  if (!nvme.empty())
    set_option(c, s.dotted((optimizer_path ? optimizer_key : param_key) + ".nvme_path"),
               "nvme-path", nvme);
  if (c.offload_optimizer.buffer_count > 0)
    set_option(c, s.dotted("offload_optimizer.buffer_count"), "offload-buffer-count",
               std::to_string(c.offload_optimizer.buffer_count));
}

void parse_zero(const json& block, const ModelConfig& model, DeepSpeedConfig& c) {
  Block s(block, "zero_optimization.", c, zero_keys(), UnknownKeys::kRefuse);
  for (const char* key : {"zero_quantized_weights", "zero_quantized_nontrainable_weights",
                          "zero_quantized_gradients"})
    s.refuse_unless_default(key, false, "ZeRO++ quantization");
  s.refuse_unless_default("zenflow", nullptr, "ZenFlow");
  s.warn_unless_default("zero_hpz_partition_size", 1, "hierarchical partitioning (ZeRO++ hpZ)");
  s.warn_unless_default("compute_grad_norm", true, "zerotrain always computes the norm");
  if (const auto stage = s.integer("stage")) {
    ZT_CHECK(StageTraits::exists(*stage), s.where("stage") + " must be " + StageTraits::kRangeText +
                                              ", got " + std::to_string(*stage));
    set_integer(s, "stage", "zero-stage", stage);
  }
  set_bool(s, "overlap_comm", "overlap-comm", s.boolean("overlap_comm"));
  c.contiguous_gradients = s.boolean("contiguous_gradients").value_or(true);
  map_zero_sizes(s, model);
  c.gather_16bit_weights_on_model_save =
      s.boolean(s.either({"stage3_gather_16bit_weights_on_model_save",
                          "gather_16bit_weights_on_model_save",
                          "stage3_gather_fp16_weights_on_model_save"}))
          .value_or(true);
  // 0 is DeepSpeed's smallest sub-group, a parameter's slice on a rank each (axolotl's stage 3
  // configs give it). zerotrain's tile is in elements, bounded by each rank's own range: the
  // model's largest tensor, whole (DeepSpeed's largest sub-group holds 1/N of it).
  std::optional<int64_t> sub_group = s.integer_at_least("sub_group_size", 0);
  if (sub_group == 0) sub_group = largest_tensor_numel(model);
  c.sub_group_size = sub_group.value_or(0);
  map_zero_offload(s, c);
  if (c.sub_group_size > 0) set_integer(s, "sub_group_size", "sub-group-size", c.sub_group_size);
}

// A present block turns checkpointing on: every layer, or every K-th layer when
// number_checkpoints asks for fewer checkpoints than layers. DeepSpeed reads this block
// leniently: unknown keys are warnings.
void parse_activation_checkpointing(const json& block, const ModelConfig& model,
                                    DeepSpeedConfig& c) {
  Block s(block, "activation_checkpointing.", c,
          {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
           "number_checkpoints", "synchronize_checkpoint_boundary", "profile"},
          UnknownKeys::kWarn);
  if (s.boolean("partition_activations").value_or(false))
    s.warn("partition_activations", "has no effect without model parallelism (ignored)");
  const int64_t layers = model.num_layers;
  const int64_t wanted = s.integer_at_least("number_checkpoints", 1).value_or(layers);
  const int64_t every = std::max<int64_t>(1, layers / std::max<int64_t>(1, wanted));
  if ((layers + every - 1) / every != std::min(wanted, layers))
    s.warn("number_checkpoints", std::to_string(wanted) + " checkpoints approximated by every " +
                                     std::to_string(every) + " layer(s)");
  set_option(c, "activation_checkpointing", "activation-checkpointing",
             every == 1 ? "full" : "every:" + std::to_string(every));
  set_bool(s, "cpu_checkpointing", "cpu-checkpointing", s.boolean("cpu_checkpointing"));
}

// DeepSpeed's top-level keys: those mapped here, those accepted without effect, and the
// features zerotrain does not implement (a warning each when present).
const std::vector<std::string> kMappedTopLevel = {"train_batch_size",
                                                  "train_micro_batch_size_per_gpu",
                                                  "gradient_accumulation_steps",
                                                  "gradient_clipping",
                                                  "optimizer",
                                                  "scheduler",
                                                  "zero_optimization",
                                                  "activation_checkpointing",
                                                  "fp16",
                                                  "bf16",
                                                  "bfloat16",
                                                  "zerotrain"};
const std::vector<std::string> kSilentTopLevel = {
    "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "dump_state", "dataloader_drop_last", "disable_allgather",
    // warned about unless at DeepSpeed's default:
    "gradient_predivide_factor", "prescale_gradients"};
const std::vector<std::string> kUnimplementedTopLevel = {"amp",
                                                         "autotuning",
                                                         "aio",
                                                         "checkpoint",
                                                         "comet",
                                                         "comms_logger",
                                                         "communication_data_type",
                                                         "compile",
                                                         "compression_training",
                                                         "csv_monitor",
                                                         "curriculum_learning",
                                                         "data_efficiency",
                                                         "data_types",
                                                         "eigenvalue",
                                                         "elasticity",
                                                         "flops_profiler",
                                                         "hybrid_engine",
                                                         "load_universal_checkpoint",
                                                         "nebula",
                                                         "pipeline",
                                                         "progressive_layer_drop",
                                                         "quantize_training",
                                                         "seq_parallel_communication_data_type",
                                                         "sparse_attention",
                                                         "sparse_gradients",
                                                         "tensor_parallel",
                                                         "tensorboard",
                                                         "timers",
                                                         "torch_autocast",
                                                         "use_data_before_expert_parallel_",
                                                         "use_node_local_storage",
                                                         "wandb",
                                                         "weight_quantization"};
// Of those, the blocks that change what is trained when enabled ("enabled": true anywhere in
// them, as compression_training's techniques have it under shared_parameters; any
// sparse_attention block): refused rather than ignored. "auto" (the Trainer's Apex amp) is off.
const std::vector<std::string> kResultChangingTopLevel = {"amp",
                                                          "compression_training",
                                                          "curriculum_learning",
                                                          "data_efficiency",
                                                          "elasticity",
                                                          "hybrid_engine",
                                                          "progressive_layer_drop",
                                                          "quantize_training",
                                                          "sparse_attention",
                                                          "torch_autocast"};

// Whether `block` or any object inside it has "enabled": true.
bool enabled_anywhere(const json& block) {
  if (!block.is_object()) return false;
  for (const auto& [key, value] : block.items())
    if ((key == "enabled" && value.is_boolean() && value.get<bool>()) || enabled_anywhere(value))
      return true;
  return false;
}

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const json& j, const std::string& source,
                                       const ModelConfig& model) {
  DeepSpeedConfig c;
  c.source = source;
  std::vector<std::string> top_level = kMappedTopLevel;
  for (const auto* list : {&kSilentTopLevel, &kUnimplementedTopLevel})
    top_level.insert(top_level.end(), list->begin(), list->end());
  Block top(j, "", c, top_level, UnknownKeys::kWarn);
  for (const std::string& key : kUnimplementedTopLevel) {
    if (!top.has(key)) continue;
    const json& block = *top.get(key);
    const bool enabled = enabled_anywhere(block);
    const bool changes_training =
        std::find(kResultChangingTopLevel.begin(), kResultChangingTopLevel.end(), key) !=
        kResultChangingTopLevel.end();
    // sparse_attention has no "enabled": its presence switches it on.
    const bool present_enables = key == "sparse_attention" && block.is_object() && !block.empty();
    ZT_CHECK(!(changes_training && (enabled || present_enables)),
             top.where(key) +
                 " is enabled: it changes the training and is not implemented in "
                 "zerotrain (remove the block or set \"enabled\": false)");
    // A block DeepSpeed switches off ("enabled": false) is ignored there too: nothing to say.
    const bool switched_off =
        block.is_object() && block.contains("enabled") && block["enabled"] == false;
    if (!switched_off) top.warn(key, "not implemented in zerotrain (ignored)");
  }
  // Gradient-reduction knobs without a counterpart: a warning unless at DeepSpeed's default
  // (runtime/constants.py).
  top.warn_unless_default("gradient_predivide_factor", 1.0, "not implemented in zerotrain");
  top.warn_unless_default("prescale_gradients", false, "not implemented in zerotrain");
  parse_precision_blocks(top, c);
  c.train_batch_size = top.integer_at_least("train_batch_size", 1);
  set_integer(top, "train_micro_batch_size_per_gpu", "micro-batch",
              top.integer_at_least("train_micro_batch_size_per_gpu", 1));
  set_integer(top, "gradient_accumulation_steps", "grad-accum",
              top.integer_at_least("gradient_accumulation_steps", 1));
  set_number(top, "gradient_clipping", "clip", top.number("gradient_clipping"));
  if (const json* b = top.get("optimizer")) parse_optimizer(*b, c);
  if (const json* b = top.get("scheduler")) parse_scheduler(*b, c);
  if (const json* b = top.get("zero_optimization")) parse_zero(*b, model, c);
  if (const json* b = top.get("activation_checkpointing"))
    parse_activation_checkpointing(*b, model, c);
  // zerotrain's own block (DeepSpeed ignores top-level keys it does not know).
  if (const json* b = top.get("zerotrain")) {
    Block s(*b, "zerotrain.", c, {"world_invariant"}, UnknownKeys::kRefuse);
    set_bool(s, "world_invariant", "world-invariant", s.boolean("world_invariant"));
  }
  return c;
}

DeepSpeedConfig load_deepspeed_config(const std::string& path, const ModelConfig& model) {
  // Read once: the digest is of the bytes that were parsed (a FIFO or a file being rewritten
  // cannot differ between the two).
  std::error_code ec;
  ZT_CHECK(!std::filesystem::is_directory(path, ec),
           "DeepSpeed config '" + path + "' (--deepspeed) is a directory, not a JSON file");
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open DeepSpeed config '" + path + "'");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  ZT_CHECK(!in.bad(), "cannot read DeepSpeed config '" + path + "'");
  // As DeepSpeed reads it (hjson): comments allowed, a key twice refused.
  const json j = parse_json(bytes.str(), "DeepSpeed config '" + path + "'",
                            {.hjson_comments = true, .reject_duplicate_keys = true});
  DeepSpeedConfig c = parse_deepspeed_config(j, path, model);
  c.sha256 = sha256_hex(bytes.str());
  return c;
}

}  // namespace zt
