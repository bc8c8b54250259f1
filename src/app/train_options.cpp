#include "app/train_options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "app/cli.h"
#include "app/engine_device.h"
#include "app/kernel_profiling.h"
#include "engine/lr_schedule.h"
#include "io/data_loader.h"
#include "io/fs_util.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "util/crc32c.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/word_choice.h"

namespace zt {
namespace {

const char* const kCommand = kTrainCommand;

constexpr WordChoice<bool> kOffOnWords[] = {{false, "off"}, {true, "on"}};

// A float setting in run.json: the number its shortest decimal reads as (0.9f as 0.9).
double json_number(float v) {
  return std::strtod(shortest_decimal(v).c_str(), nullptr);
}

// DeepSpeed's fp16 block as options (the --deepspeed file maps its keys onto these names).
constexpr const char* kLossScaleOptions[] = {
    "loss-scale", "initial-scale-power",    "loss-scale-window",
    "hysteresis", "consecutive-hysteresis", "min-loss-scale"};

void add_loss_scale_options(po::options_description& options, LossScaleConfig& c) {
  options.add_options()(kLossScaleOptions[0], decimal_option(&c.loss_scale),
                        "fp16: static loss scale (> 0), or 0 for dynamic loss scaling")(
      kLossScaleOptions[1], po::value(&c.initial_scale_power)->default_value(c.initial_scale_power),
      "fp16, dynamic: the first loss scale is 2^this")(
      kLossScaleOptions[2], po::value(&c.loss_scale_window)->default_value(c.loss_scale_window),
      "fp16, dynamic: the scale doubles after this many steps without overflow")(
      kLossScaleOptions[3], po::value(&c.hysteresis)->default_value(c.hysteresis),
      "fp16, dynamic: overflows absorbed before the scale halves")(
      kLossScaleOptions[4], bool_flag(&c.consecutive_hysteresis, false),
      "fp16, dynamic: refill the hysteresis after every step without overflow")(
      kLossScaleOptions[5], decimal_option(&c.min_loss_scale),
      "fp16, dynamic: the scale's floor; an overflow there stops the run");
}

bool loss_scale_options_given(const po::variables_map& vm) {
  for (const char* name : kLossScaleOptions)
    if (vm.count(name) && !vm[name].defaulted()) return true;
  return false;
}

// "--steps S", or "--epochs E (S steps)" once the data has given them.
std::string run_length_text(const TrainOptions& o) {
  return o.epochs > 0 ? "--epochs " + shortest_decimal(o.epochs) + " (" + std::to_string(o.steps) +
                            (o.steps == 1 ? " step)" : " steps)")
                      : "--steps " + std::to_string(o.steps);
}

void validate_settings(TrainOptions& o) {
  // Checked first: every path under --out is built as OUT + "/...", so '' would mean '/'.
  ZT_CHECK(!o.out.empty(), std::string(kCommand) + ": the output path is empty (--out '')");
  check_output_apart_from_inputs(kCommand, o.out,
                                 {{"the model", o.model_dir},
                                  {"the data", o.data},
                                  {"the eval data", o.eval_data},
                                  {"the DeepSpeed config", o.deepspeed},
                                  {"the LoRA config", o.lora.config_file},
                                  {"the LoRA adapter to continue", o.lora.init_from}});
  ZT_CHECK(o.epochs == 0 || (std::isfinite(o.epochs) && o.epochs > 0),
           std::string(kCommand) + ": --epochs must be a positive number, got " +
               shortest_decimal(o.epochs));
  ZT_CHECK(o.warmup_ratio == -1 || (o.warmup_ratio >= 0 && o.warmup_ratio <= 1),
           std::string(kCommand) + ": --warmup-ratio must lie in [0, 1], got " +
               shortest_decimal(o.warmup_ratio));
  ZT_CHECK(o.warmup_ratio == -1 || !o.warmup_steps_given,
           std::string(kCommand) +
               ": give --warmup-steps or --warmup-ratio, not both (the warmup is one of them; a "
               "DeepSpeed scheduler block sets it unless its warmup_num_steps is \"auto\", "
               "DeepSpeed's default being 1000)");
  if (o.epochs == 0) {  // else once the data gives the steps
    validate_run_length(o);
    resolve_warmup_ratio(o);
  }
  check_count(o.micro_batch, 1, "micro-batch", kCommand);
  check_count(o.grad_accum, 1, "grad-accum", kCommand);
  check_count(o.seq_len, 1, "seq-len", kCommand);
  ZT_CHECK(o.seed >= 0,
           std::string(kCommand) + ": --seed must be >= 0, got " + std::to_string(o.seed));
  if (o.eval_batches != kAllEvalBatches) check_count(o.eval_batches, 0, "eval-batches", kCommand);
  check_count(o.eval_every, 0, "eval-every", kCommand);
  // Evaluation options that would do nothing are refused rather than ignored.
  ZT_CHECK(o.evaluates() || (o.eval_every == 0 && o.eval_data.empty()),
           std::string(kCommand) + ": " + (o.eval_every > 0 ? "--eval-every" : "--eval-data") +
               " needs --eval-batches K > 0 or all, the batches each evaluation scores");
  ZT_CHECK(
      !o.checkpoint.keep_best || (o.eval_every > 0 && o.checkpoint.save_every % o.eval_every == 0),
      std::string(kCommand) +
          ": --keep-best needs --eval-every N and a --save-every that is a multiple of it, "
          "so that the checkpoints it compares hold an eval_loss");
  check_count(o.log_every, 0, "log-every", kCommand);
  check_count(o.save_consolidated_every, 0, "save-consolidated-every", kCommand);
  check_count(o.optim.warmup_steps, 0, "warmup-steps", kCommand);
  check_count(o.optim.schedule_steps, 0, "schedule-steps", kCommand);
  check_positive(o.optim.lr, "lr", kCommand);
  check_finite_at_least(o.optim.lr, 0, "lr", kCommand);
  check_positive(o.optim.eps, "eps", kCommand);
  check_finite_at_least(o.optim.eps, 0, "eps", kCommand);
  check_finite_at_least(o.optim.min_lr, 0, "min-lr", kCommand);
  check_finite_at_least(o.optim.weight_decay, 0, "weight-decay", kCommand);
  ZT_CHECK(std::isfinite(o.optim.clip), std::string(kCommand) +
                                            ": --clip must be a finite number (<= 0 disables), "
                                            "got " +
                                            shortest_decimal(o.optim.clip));
  // The schedules decay from --lr to --min-lr; a floor above the peak would make them rise.
  ZT_CHECK(o.optim.min_lr <= o.optim.lr || o.optim.schedule == LrScheduleKind::kWarmupLR,
           std::string(kCommand) + ": --min-lr " + shortest_decimal(o.optim.min_lr) +
               " is above --lr " + shortest_decimal(o.optim.lr) +
               " (the schedule decays from --lr to --min-lr)");
  check_comm_timeout(o.comm_timeout, kCommand);
  check_finite_at_least(o.device_memory_limit_gib, 0, "device-memory-limit", kCommand);
  // 0 is "no limit"; otherwise at least one KiB (so it never rounds to 0 bytes) and at most
  // 2^30 GiB (so the byte count fits).
  ZT_CHECK(o.device_memory_limit_gib == 0 || (o.device_memory_limit_gib >= 1.0 / (1 << 20) &&
                                              o.device_memory_limit_gib <= 0x1p30),
           std::string(kCommand) +
               ": --device-memory-limit must be 0 (no limit) or between 1 KiB "
               "and 2^30 GiB, got " +
               shortest_decimal(o.device_memory_limit_gib) + " GiB");
  for (auto [beta, name] : {std::pair{o.optim.beta1, "beta1"}, {o.optim.beta2, "beta2"}})
    ZT_CHECK(beta >= 0 && beta < 1, std::string(kCommand) + ": --" + name +
                                        " must be in [0, 1), got " + std::to_string(beta));
  o.zero.validate();  // names each ZeRO option and its DeepSpeed key
  validate_schedule(o.optim);
  const Precision precision = o.precision;
  if (precision == Precision::kFp16) {
    o.loss_scale.validate();
  } else {
    ZT_CHECK(!o.loss_scale_given,
             std::string(kCommand) +
                 ": --loss-scale, --initial-scale-power, --loss-scale-window, --hysteresis, "
                 "--consecutive-hysteresis and --min-loss-scale apply to --precision fp16 only "
                 "(this run's precision is " +
                 precision_name(o.precision) + ")");
  }
  check_attention_request(o.attention_request, o.backend_kind, kCommand);
  check_gemm_algorithms(o.gemm_algorithms, o.backend_kind, kCommand);
  check_deterministic(o.deterministic, o.backend_kind, o.zero.world_invariant, kCommand);
  ZT_CHECK(!o.cuda_graphs || o.backend_kind == BackendKind::kCuda,
           std::string(kCommand) +
               ": --cuda-graphs on needs the CUDA backend (this run uses the CPU backend, which "
               "launches nothing)");
  validate_checkpoint_flags(o.checkpoint, kCommand);
  o.choices = parse_engine_choices(o, kCommand);
  o.choices.offload.validate(o.zero.stage);
}

}  // namespace

void validate_run_length(const TrainOptions& o) {
  if (o.epochs > 0) {
    ZT_CHECK(o.steps >= 1 && o.steps < kMaxCount,
             std::string(kCommand) + ": " + run_length_text(o) + " is too long: a run has below " +
                 std::to_string(kMaxCount) + " steps");
  } else {
    check_count(o.steps, 1, "steps", kCommand);
  }
  check_profile_steps(o.profile, o.steps);
  // At or past the last step the run would end as usual (exit 0, no stop): a contradiction.
  ZT_CHECK(o.checkpoint.stop_after_step < o.steps,
           std::string(kCommand) + ": --stop-after-step " +
               std::to_string(o.checkpoint.stop_after_step) + " is not before the last step (" +
               run_length_text(o) +
               "): the run would end there without stopping; give a step below it, or 0");
}

void resolve_epochs(TrainOptions& o, const WindowSampler& sampler) {
  if (o.epochs == 0) return;
  o.steps = steps_for_epochs(o.epochs, sampler.schedule().num_windows(),
                             sampler.schedule().global_batch_windows());
  validate_run_length(o);
  resolve_warmup_ratio(o);
}

void resolve_warmup_ratio(TrainOptions& o) {
  if (o.warmup_ratio >= 0)
    o.optim.warmup_steps =
        static_cast<int64_t>(std::ceil(static_cast<double>(o.steps) * o.warmup_ratio));
}

nlohmann::json TrainOptions::to_json() const {
  return {{"model", model_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(model_dir)},
          {"preset", preset.empty() ? nlohmann::json(nullptr) : nlohmann::json(preset)},
          {"data", data},
          {"out", out},
          {"overwrite", overwrite},
          {"steps", steps},
          {"epochs", epochs > 0 ? nlohmann::json(epochs) : nlohmann::json(nullptr)},
          {"micro_batch", micro_batch},
          {"grad_accum", grad_accum},
          {"seq_len", seq_len},
          {"seed", seed},
          {"lr", json_number(optim.lr)},
          {"min_lr", json_number(optim.min_lr)},
          {"warmup_steps", optim.warmup_steps},
          {"warmup_ratio", warmup_ratio >= 0 ? nlohmann::json(warmup_ratio) : nlohmann::json()},
          {"lr_schedule", lr_schedule_name(optim.schedule)},
          {"warmup_type", warmup_shape_name(optim.warmup_shape)},
          {"warmup_start_lr", json_number(optim.warmup_start_lr)},
          {"schedule_steps", optim.schedule_steps > 0 ? optim.schedule_steps : steps},
          {"beta1", json_number(optim.beta1)},
          {"beta2", json_number(optim.beta2)},
          {"eps", json_number(optim.eps)},
          {"weight_decay", json_number(optim.weight_decay)},
          {"clip", json_number(optim.clip)},
          {"precision", precision_name(precision)},
          {"loss_scaling",
           precision != Precision::kFp16
               ? nlohmann::json(nullptr)
               : nlohmann::json{{"loss_scale", loss_scale.loss_scale},
                                {"initial_scale_power", loss_scale.initial_scale_power},
                                {"loss_scale_window", loss_scale.loss_scale_window},
                                {"hysteresis", loss_scale.hysteresis},
                                {"consecutive_hysteresis", loss_scale.consecutive_hysteresis},
                                {"min_loss_scale", loss_scale.min_loss_scale}}},
          {"backend", backend_request_name(backend)},
          {"attention", attention_request_name(attention_request)},
          {"gemm_algorithms", gemm_algorithms_name(gemm_algorithms)},
          {"deterministic", deterministic},
          {"cuda_graphs", word_of(cuda_graphs, kOffOnWords)},
          {"document_masking", auto_switch_name(document_masking)},
          {"packing", packing_name(packing)},
          {"activations", activation_storage_name(activations)},
          {"zero_stage", zero.stage},
          {"overlap_comm", zero.overlap_comm},
          {"world_invariant", zero.world_invariant},
          {"reduce_bucket_size", zero.reduce_bucket_size},
          {"allgather_bucket_size", zero.allgather_bucket_size},
          {"prefetch_bucket_size", zero.prefetch_bucket_size},
          {"param_persistence_threshold", zero.param_persistence_threshold},
          {"max_live_parameters", zero.max_live_parameters},
          {"max_reuse_distance", zero.max_reuse_distance},
          {"offload_optimizer", offload_device_name(offload.config.optimizer)},
          {"offload_param", offload_device_name(offload.config.param)},
          {"nvme_path", offload.config.nvme_path},
          {"offload_buffer_count", offload.config.buffer_count},
          {"sub_group_size", offload.config.sub_group_size},
          {"offload_optimizer_delay", offload.config.delay},
          {"offload_optimizer_overlap", auto_switch_name(offload.overlap)},
          {"offload_optimizer_delay_after", offload.config.delay_after},
          {"offload_gradient_copies", choices.offload.bf16_gradient_copies ? "bf16" : "fp32"},
          {"activation_checkpointing", activation_checkpointing_name(activation_checkpointing)},
          {"cpu_checkpointing", cpu_checkpointing},
          {"comm_timeout", comm_timeout},
          {"device_memory_limit_gib", device_memory_limit_gib},
          {"trainable", trainable},
          {"freeze", freeze},
          {"lora", lora.to_json(choices.lora)},
          {"eval_batches",
           eval_batches == kAllEvalBatches ? nlohmann::json("all") : nlohmann::json(eval_batches)},
          {"eval_every", eval_every},
          {"eval_data", eval_data},
          {"log_every", log_every},
          {"save_consolidated_every", save_consolidated_every},
          {"profile_steps", profile_steps_name(profile)},  // the window: "4:4" is recorded as "4"
          {"save_every", checkpoint.save_every},
          {"keep_last", checkpoint.keep_last},
          {"keep_best", checkpoint.keep_best},
          {"checkpoint_frozen", checkpoint.frozen},
          {"resume", checkpoint.resume}};
}

RunSettings TrainOptions::agreed_settings(const ModelConfig& model,
                                          const std::string& data_identity,
                                          const std::string& eval_data_identity,
                                          const std::string& resume_dir) const {
  RunSettings settings;
  const nlohmann::json options = to_json();
  for (const auto& [key, value] : options.items()) {
    if (key == "model" || key == "data" || key == "eval_data" || key == "nvme_path") continue;
    std::string option = "--" + key;
    std::replace(option.begin(), option.end(), '_', '-');
    settings.emplace_back(option, value.is_string() ? value.get<std::string>() : value.dump());
  }
  settings.emplace_back("backend resolved on this host", backend_kind_name(backend_kind));
  settings.emplace_back("model configuration", model.to_hf_json().dump());
  settings.emplace_back("dataset", data_identity);
  settings.emplace_back("eval dataset", eval_data_identity.empty() ? "none" : eval_data_identity);
  settings.emplace_back(
      "checkpoint resumed",
      resume_dir.empty() ? "none"
                         : resume_dir + " (manifest CRC-32C " +
                               crc32c_hex(crc32c_file(resume_dir + "/manifest.json").crc32c) + ")");
  return settings;
}

TrainingHyperparameters TrainOptions::hyperparameters(const std::string& data_identity,
                                                      const std::string& attention_kernel) const {
  TrainingHyperparameters h;
  h.optim = optim;
  h.total_steps = steps;
  h.micro_batch = micro_batch;
  h.grad_accum = grad_accum;
  h.seq_len = seq_len;
  h.data_seed = static_cast<uint64_t>(seed);
  h.data_identity = data_identity;
  h.world_invariant = zero.world_invariant;
  h.deterministic = deterministic;
  h.backend = backend_kind_name(backend_kind);  // what computes the math: "cpu" | "cuda"
  h.attention = attention_kernel;
  h.activations = activation_storage_name(activations);
  h.document_masking = auto_switch_name(document_masking);
  h.packing = packing_name(packing);
  return h;
}

namespace {

// AdamW and its learning-rate schedule: --lr, --min-lr, the warmup, --lr-schedule, the betas,
// epsilon, weight decay and clipping.
void add_optimizer_options(po::options_description& opts, TrainOptions& o) {
  auto add = opts.add_options();
  add("lr", decimal_option(&o.optim.lr), "peak learning rate");
  add("min-lr", decimal_option(&o.optim.min_lr),
      "floor of the decay (cosine, WarmupDecayLR, WarmupCosineLR); when not given and --lr is "
      "below the default, --lr / 10");
  add("warmup-steps", po::value(&o.optim.warmup_steps)->default_value(o.optim.warmup_steps),
      "warmup steps");
  add("warmup-ratio", po::value(&o.warmup_ratio),
      "instead of --warmup-steps: the warmup as a share R of the run's steps, ceil(R x steps) "
      "(the Hugging Face Trainer's warmup_ratio)");
  add("lr-schedule",
      word_option<LrScheduleKind>(
          &o.optim.schedule,
          [](const std::string& text) { return parse_lr_schedule(text, "--lr-schedule"); },
          lr_schedule_name(o.optim.schedule)),
      "cosine | WarmupLR | WarmupDecayLR | WarmupCosineLR (DeepSpeed's formulas)");
  add("warmup-type",
      word_option<WarmupShape>(
          &o.optim.warmup_shape,
          [](const std::string& text) { return parse_warmup_shape(text, "--warmup-type"); },
          warmup_shape_name(o.optim.warmup_shape)),
      "linear | log (log: DeepSpeed schedules)");
  add("warmup-start-lr", decimal_option(&o.optim.warmup_start_lr),
      "learning rate the warmup starts from");
  add("schedule-steps", po::value(&o.optim.schedule_steps)->default_value(0),
      "length of the schedule's decay, in steps (0: --steps)");
  add("beta1", decimal_option(&o.optim.beta1), "AdamW beta1");
  add("beta2", decimal_option(&o.optim.beta2), "AdamW beta2");
  add("eps", decimal_option(&o.optim.eps), "AdamW epsilon");
  add("weight-decay", decimal_option(&o.optim.weight_decay),
      "decoupled weight decay (not on norms and the embedding)");
  add("clip", decimal_option(&o.optim.clip), "global gradient-norm clip (<= 0 disables)");
}

// The batch's shape and what fills it: --micro-batch, --grad-accum, --seq-len, --packing.
void add_batch_options(po::options_description& opts, TrainOptions& o) {
  auto add = opts.add_options();
  add("micro-batch", po::value(&o.micro_batch)->default_value(o.micro_batch),
      "sequences per micro-batch per rank");
  add("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum),
      "micro-batches per optimizer step");
  add("seq-len", po::value(&o.seq_len)->default_value(o.seq_len), "tokens per sequence");
  add("packing", word_option<Packing>(&o.packing, parse_packing, packing_name(o.packing)),
      "how the data is cut into sequences: bfd (whole documents packed best-fit decreasing, as "
      "TRL packs, each sequence padded; a document longer than a sequence is split into "
      "sequences of its own) | documents (whole documents packed in the data's order) | wrapped "
      "(every --seq-len tokens, documents running on from one sequence into the next) | auto "
      "(bfd for SFT data, which has a loss mask and document boundaries; else wrapped; on a "
      "resume, the checkpoint's)");
}

// After parsing (and the DeepSpeed JSON): --steps or --epochs, not both; whether --warmup-steps
// was set (on the command line, in the INI or by the JSON's scheduler), which --warmup-ratio
// may not be beside. -1 and 0 are the unset values of --warmup-ratio and --epochs: refused here.
void note_run_length_options(const po::variables_map& vm, TrainOptions& o) {
  ZT_CHECK(!vm.count("epochs") || !vm.count("steps") || vm["steps"].defaulted(),
           std::string(kCommand) + ": give --steps or --epochs, not both");
  ZT_CHECK(!vm.count("epochs") || o.epochs != 0,
           std::string(kCommand) + ": --epochs must be a positive number, got 0");
  ZT_CHECK(!vm.count("warmup-ratio") || o.warmup_ratio != -1,
           std::string(kCommand) + ": --warmup-ratio must lie in [0, 1], got -1");
  const auto& from_json = o.from_deepspeed.options_set;
  o.warmup_steps_given = (vm.count("warmup-steps") && !vm["warmup-steps"].defaulted()) ||
                         std::count(from_json.begin(), from_json.end(), "warmup-steps") > 0;
}

// How the backend's kernels run: --attention, --deterministic, --gemm-algorithms and
// --cuda-graphs.
void add_kernel_options(po::options_description& opts, TrainOptions& o) {
  auto add = opts.add_options();
  add_attention_option(opts, &o.attention_request);
  add_deterministic_option(opts, &o.deterministic);
  add("gemm-algorithms",
      word_option<GemmAlgorithms>(&o.gemm_algorithms, parse_gemm_algorithms,
                                  gemm_algorithms_name(o.gemm_algorithms)),
      "CUDA GEMMs: heuristic (cuBLASLt's first choice) | timed (each shape's first call times "
      "the heuristic's other answers on its own operands and keeps the fastest that computes "
      "the same bits)");
  add("cuda-graphs",
      word_option<bool>(
          &o.cuda_graphs,
          [](const std::string& w) { return parse_word(w, kOffOnWords, "--cuda-graphs"); },
          word_of(o.cuda_graphs, kOffOnWords)),
      "off | on: record each micro-batch's forward and backward once as CUDA graphs and replay "
      "them (one rank at ZeRO stage 0, without LoRA; the same bits; docs/gpu.md)");
}

}  // namespace

void add_train_options(po::options_description& opts, TrainOptions& o) {
  const auto flag = bool_flag;
  auto add = opts.add_options();
  add("model", po::value(&o.model_dir), "model directory to start from (or --preset)");
  add("preset", po::value(&o.preset), "start from a fresh preset model: tiny, small, 125m, ...");
  add("data", po::value(&o.data), "token dataset (HDF5, /tokens)");
  add("out", po::value(&o.out), "output directory");
  add("overwrite", flag(&o.overwrite, false), "allow a non-empty --out");
  add("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps");
  add("epochs", po::value(&o.epochs),
      "instead of --steps: the run's length in passes over the data's windows (a decimal, like "
      "the Hugging Face Trainer's num_train_epochs): ceil(E x windows an epoch / windows a "
      "step) steps, the data read on across epochs (no short last batch an epoch)");
  add_batch_options(opts, o);
  add_optimizer_options(opts, o);
  add("seed", po::value(&o.seed)->default_value(o.seed),
      "seed of the data order and of --preset init");
  add("precision", precision_option(&o.precision), "bf16 | fp16 (dynamic loss scaling) | fp32");
  add_loss_scale_options(opts, o.loss_scale);
  add("backend", backend_option(&o.backend),
      "compute backend: cpu | cuda | auto (auto = cuda when built with CUDA and a GPU is "
      "visible, else cpu)");
  add_kernel_options(opts, o);
  add_document_masking_option(opts, &o.document_masking);
  add_activations_option(opts, &o.activations);
  add("zero-stage", po::value(&o.zero.stage)->default_value(o.zero.stage), "ZeRO stage 0-3");
  add("activation-checkpointing", activation_checkpointing_option(&o.activation_checkpointing),
      "none | selective | full | every:K");
  add("cpu-checkpointing", flag(&o.cpu_checkpointing, false),
      "keep checkpointed layer inputs in host memory");
  add_comm_timeout_option(opts, &o.comm_timeout);
  add("device-memory-limit", decimal_option(&o.device_memory_limit_gib),
      "GiB of device memory per rank this run may use (0 = no limit): refused before training "
      "when the estimate exceeds it; any allocation past it is an error naming the category");
  add("eval-batches", eval_batches_option(&o.eval_batches, "--eval-batches"),
      "batches of micro-batch windows per rank each evaluation scores, at the end and every "
      "--eval-every steps (0 = no evaluation; all = every whole window of the set, the same "
      "windows at every world size)");
  add("eval-every", po::value(&o.eval_every)->default_value(o.eval_every),
      "evaluate after every N steps too, into metrics.jsonl's eval_loss (0 = at the end only)");
  add("eval-data", po::value(&o.eval_data),
      "held-out token dataset (HDF5) to evaluate, prepared with the training data's tokenizer "
      "(default: the first windows of --data)");
  add("log-every", po::value(&o.log_every)->default_value(o.log_every),
      "log a line to stderr every N steps (0 = never)");
  add("save-consolidated-every",
      po::value(&o.save_consolidated_every)->default_value(o.save_consolidated_every),
      "write the bf16 model to OUT/consolidated/step-NNNNNNNN every N steps (0 = never)");
  add("profile-steps",
      word_option<ProfileSteps>(
          &o.profile, [](const std::string& text) { return parse_profile_steps(text); },
          std::nullopt),
      "A:B (or A): record the device's kernels over steps A..B (CUDA, through CUPTI) and write "
      "OUT/kernel_profile.json, time by GEMM, attention, pointwise, cross-entropy, optimizer, "
      "communication, copies and idle");
  add_trainable_options(opts, &o.trainable, &o.freeze);
  add_lora_options(opts, o.lora);
  add_checkpoint_options(opts, o.checkpoint);
  po::options_description testing("testing (fault injection)");
  add_fault_injection_options(testing, o.checkpoint);
  add("deepspeed", po::value(&o.deepspeed),
      "DeepSpeed JSON config. Precedence: command line > --config INI > "
      "--deepspeed JSON > defaults");
  add_zero_bucket_options(opts, o.zero);
  add_offload_options(opts, o.offload);
  opts.add(testing);
}

// Returns false when --help was printed.
bool parse_train_options(int argc, char** argv, TrainOptions& o) {
  po::options_description opts("train options");
  add_train_options(opts, o);
  const CommandSpec spec{kCommand, "Train a Llama-style model with ZeRO stage 0-3.",
                         "zerotrain train (--model DIR | --preset NAME) --data FILE.h5 --out DIR "
                         "[options]"};
  po::variables_map vm;
  if (!parse_command_line(spec, opts, nullptr, argc, argv, vm)) return false;
  o.loss_scale_given = loss_scale_options_given(vm);
  note_lora_options_given(vm, o.lora);
  require_option(vm, "data", kCommand);
  require_option(vm, "out", kCommand);
  ZT_CHECK(vm.count("model") + vm.count("preset") == 1,
           std::string(kCommand) + ": give exactly one of --model DIR and --preset NAME");
  // ---- DeepSpeed JSON (app/deepspeed_config.h): fills options left unset above ----
  if (!o.deepspeed.empty())
    o.from_deepspeed = apply_deepspeed_file(
        o.deepspeed,
        o.model_dir.empty() ? preset_config(o.preset)
                            : ModelConfig::from_hf_file(o.model_dir + "/config.json"),
        opts, vm);
  // ---- end DeepSpeed JSON ----
  resolve_device_options(vm, o, kCommand);
  note_run_length_options(vm, o);
  // The default floor is for the default peak: a lower --lr alone (fine-tuning) keeps the ratio.
  if ((!vm.count("min-lr") || vm["min-lr"].defaulted()) && o.optim.min_lr > o.optim.lr)
    o.optim.min_lr = o.optim.lr / 10;
  return true;
}

void validate(TrainOptions& o) {
  validate_naming_deepspeed_file(o.deepspeed, o.from_deepspeed.options_set,
                                 [&] { validate_settings(o); });
}

EngineSpec engine_spec(const TrainOptions& o, const ModelConfig& model) {
  EngineSpec spec = resolve_engine_spec(o, o.choices, model);
  spec.optim = o.optim;
  spec.loss_scale = o.loss_scale;
  return spec;
}

void check_run_size(const TrainOptions& o, int world) {
  check_run_tokens(o.micro_batch, o.seq_len, o.grad_accum, world, o.steps, run_length_text(o),
                   kCommand);
}

size_t device_memory_limit_bytes(const TrainOptions& o) {
  return static_cast<size_t>(o.device_memory_limit_gib * 1024.0 * 1024.0 * 1024.0);
}

void check_device_memory_limit(const TrainOptions& o, const MemoryEstimate& e, int world,
                               size_t backend_scratch) {
  const size_t limit = device_memory_limit_bytes(o);
  const size_t need = static_cast<size_t>(e.device_total()) + backend_scratch;
  if (limit == 0 || need <= limit) return;
  const auto gib = [](size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f GiB", static_cast<double>(bytes) / (1 << 30));
    return std::string(buf);
  };
  const std::string scratch = backend_scratch > 0 ? ", and the backend's scratch " +
                                                        std::to_string(backend_scratch) + " bytes"
                                                  : "";
  throw AgreedError(std::string(kCommand) + ": --device-memory-limit " + gib(limit) +
                    ": this run needs " + gib(need) + " per rank (ZeRO stage " +
                    std::to_string(o.zero.stage) + ", micro-batch " +
                    std::to_string(o.micro_batch) + ", seq-len " + std::to_string(o.seq_len) +
                    ", world " + std::to_string(world) + "): " + device_breakdown(e) + scratch +
                    "; short by " + std::to_string(need - limit) +
                    " bytes. `zerotrain estimate --max-micro-batch --device-memory-gib " +
                    shortest_decimal(o.device_memory_limit_gib) +
                    "` with this run's options gives the largest micro-batch that fits");
}

}  // namespace zt
