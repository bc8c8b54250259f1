// zerotrain train: the training loop. Options → MPI runtime, communicator, backend → ZeroEngine
// (initialised from a seed or loaded from a model directory) → for each step: learning rate,
// this rank's micro-batches, engine.train_step, one metrics line. At the end: optional eval,
// report files and the final bf16 model directory. Only rank 0 writes files.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "app/deepspeed_config.h"
#include "app/engine_device.h"
#include "app/run_setup.h"
#include "app/train_checkpointing.h"
#include "backend/backend.h"
#include "checkpoint/consolidate.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "io/data_loader.h"
#include "io/fs_util.h"
#include "io/model_dir.h"
#include "io/token_dataset.h"
#include "report/run_recorder.h"
#include "runtime/mpi_runtime.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {
namespace {

const char* const kCommand = "train";

struct TrainOptions {
  std::string model_dir, preset, data, out;
  bool overwrite = false;
  int64_t steps = 100, micro_batch = 4, grad_accum = 1, seq_len = 256;
  int64_t seed = 1234;
  AdamWConfig optim;
  std::string lr_schedule = "cosine", warmup_type = "linear";  // --lr-schedule, --warmup-type
  std::string precision = "bf16";
  std::string backend = "auto";  // --backend cpu | cuda | auto
  ZeroConfig zero;
  std::string activation_checkpointing = "none";
  bool cpu_checkpointing = false;
  double comm_timeout = Communicator::kDefaultTimeoutSeconds;
  int64_t eval_batches = 0;
  int64_t log_every = 10;
  int64_t save_consolidated_every = 0;  // OUT/consolidated/step-N bf16 model every N steps
  CheckpointFlags checkpoint;  // --save-every, --keep-last, --resume, ... (train_checkpointing.h)
  OffloadOptions offload;      // --offload-optimizer, --offload-param, --nvme-path, ...
  std::string deepspeed;       // --deepspeed FILE
  BatchSizeRule batch_rule;    // its train_batch_size rule, applied once the world size is known

  nlohmann::json to_json() const;
};

// A float setting in run.json: the number its shortest decimal reads as (0.9f as 0.9).
double json_number(float v) {
  return std::strtod(shortest_decimal(v).c_str(), nullptr);
}

nlohmann::json TrainOptions::to_json() const {
  return {{"model", model_dir.empty() ? nlohmann::json(nullptr) : nlohmann::json(model_dir)},
          {"preset", preset.empty() ? nlohmann::json(nullptr) : nlohmann::json(preset)},
          {"data", data},
          {"out", out},
          {"overwrite", overwrite},
          {"steps", steps},
          {"micro_batch", micro_batch},
          {"grad_accum", grad_accum},
          {"seq_len", seq_len},
          {"seed", seed},
          {"lr", json_number(optim.lr)},
          {"min_lr", json_number(optim.min_lr)},
          {"warmup_steps", optim.warmup_steps},
          {"lr_schedule", lr_schedule_name(optim.schedule)},
          {"warmup_type", warmup_shape_name(optim.warmup_shape)},
          {"warmup_start_lr", json_number(optim.warmup_start_lr)},
          {"schedule_steps", optim.schedule_steps > 0 ? optim.schedule_steps : steps},
          {"beta1", json_number(optim.beta1)},
          {"beta2", json_number(optim.beta2)},
          {"eps", json_number(optim.eps)},
          {"weight_decay", json_number(optim.weight_decay)},
          {"clip", json_number(optim.clip)},
          {"precision", precision},
          {"backend", backend},
          {"zero_stage", zero.stage},
          {"overlap_comm", zero.overlap_comm},
          {"reduce_bucket_size", zero.reduce_bucket_size},
          {"allgather_bucket_size", zero.allgather_bucket_size},
          {"prefetch_bucket_size", zero.prefetch_bucket_size},
          {"param_persistence_threshold", zero.param_persistence_threshold},
          {"max_live_parameters", zero.max_live_parameters},
          {"max_reuse_distance", zero.max_reuse_distance},
          {"offload_optimizer", offload.optimizer},
          {"offload_param", offload.param},
          {"nvme_path", offload.config.nvme_path},
          {"offload_buffer_count", offload.config.buffer_count},
          {"sub_group_size", offload.config.sub_group_size},
          {"activation_checkpointing", activation_checkpointing},
          {"cpu_checkpointing", cpu_checkpointing},
          {"comm_timeout", comm_timeout},
          {"eval_batches", eval_batches},
          {"log_every", log_every},
          {"save_consolidated_every", save_consolidated_every},
          {"save_every", checkpoint.save_every},
          {"keep_last", checkpoint.keep_last},
          {"resume", checkpoint.resume}};
}

// Returns false when --help was printed.
bool parse_train_options(int argc, char** argv, TrainOptions& o) {
  po::options_description opts("train options");
  const auto flag = bool_flag;
  auto add = opts.add_options();
  add("model", po::value(&o.model_dir), "model directory to start from (or --preset)");
  add("preset", po::value(&o.preset), "start from a fresh preset model: tiny, small, 125m, ...");
  add("data", po::value(&o.data), "token dataset (HDF5, /tokens)");
  add("out", po::value(&o.out), "output directory");
  add("overwrite", flag(&o.overwrite, false), "allow a non-empty --out");
  add("steps", po::value(&o.steps)->default_value(o.steps), "optimizer steps");
  add("micro-batch", po::value(&o.micro_batch)->default_value(o.micro_batch),
      "sequences per micro-batch per rank");
  add("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum),
      "micro-batches per optimizer step");
  add("seq-len", po::value(&o.seq_len)->default_value(o.seq_len), "tokens per sequence");
  add("lr", decimal_option(&o.optim.lr), "peak learning rate");
  add("min-lr", decimal_option(&o.optim.min_lr),
      "floor of the decay (cosine, WarmupDecayLR, WarmupCosineLR)");
  add("warmup-steps", po::value(&o.optim.warmup_steps)->default_value(o.optim.warmup_steps),
      "warmup steps");
  add("lr-schedule", po::value(&o.lr_schedule)->default_value(o.lr_schedule),
      "cosine | WarmupLR | WarmupDecayLR | WarmupCosineLR (DeepSpeed's formulas)");
  add("warmup-type", po::value(&o.warmup_type)->default_value(o.warmup_type),
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
  add("seed", po::value(&o.seed)->default_value(o.seed),
      "seed of the data order and of --preset init");
  add("precision", po::value(&o.precision)->default_value(o.precision), "bf16 | fp32");
  add("backend", po::value(&o.backend)->default_value(o.backend),
      "compute backend: cpu | cuda | auto (auto = cuda when built with CUDA and a GPU is "
      "visible, else cpu)");
  add("zero-stage", po::value(&o.zero.stage)->default_value(o.zero.stage), "ZeRO stage 0-3");
  add("activation-checkpointing",
      po::value(&o.activation_checkpointing)->default_value(o.activation_checkpointing),
      "none | full | every:K");
  add("cpu-checkpointing", flag(&o.cpu_checkpointing, false),
      "keep checkpointed layer inputs in host memory");
  add("comm-timeout", decimal_option(&o.comm_timeout),
      "seconds before a stuck collective aborts the job");
  add("eval-batches", po::value(&o.eval_batches)->default_value(o.eval_batches),
      "eval batches at the end (0 = skip)");
  add("log-every", po::value(&o.log_every)->default_value(o.log_every),
      "log a line to stderr every N steps (0 = never)");
  add("save-consolidated-every",
      po::value(&o.save_consolidated_every)->default_value(o.save_consolidated_every),
      "write the bf16 model to OUT/consolidated/step-NNNNNNNN every N steps (0 = never)");
  add_checkpoint_options(opts, o.checkpoint);
  po::options_description testing("testing (fault injection)");
  add_fault_injection_options(testing, o.checkpoint);
  add("deepspeed", po::value(&o.deepspeed),
      "DeepSpeed JSON config. Precedence: command line > --config INI > "
      "--deepspeed JSON > defaults");
  const CommandSpec spec{kCommand, "Train a Llama-style model with ZeRO stage 0-3.",
                         "zerotrain train (--model DIR | --preset NAME) --data FILE.h5 --out DIR "
                         "[options]"};
  add_zero_bucket_options(opts, o.zero);
  add_offload_options(opts, o.offload);
  opts.add(testing);
  po::variables_map vm;
  if (!parse_command_line(spec, opts, nullptr, argc, argv, vm)) return false;
  require_option(vm, "data", kCommand);
  require_option(vm, "out", kCommand);
  ZT_CHECK(vm.count("model") + vm.count("preset") == 1,
           std::string(kCommand) + ": give exactly one of --model DIR and --preset NAME");
  // ---- DeepSpeed JSON (app/deepspeed_config.h): fills options left unset above ----
  if (!o.deepspeed.empty())
    o.batch_rule = apply_deepspeed_file(
        o.deepspeed,
        o.model_dir.empty() ? preset_config(o.preset)
                            : ModelConfig::from_hf_file(o.model_dir + "/config.json"),
        opts, vm);
  // ---- end DeepSpeed JSON ----
  o.optim.schedule = parse_lr_schedule(o.lr_schedule, std::string(kCommand) + ": --lr-schedule");
  o.optim.warmup_shape =
      parse_warmup_shape(o.warmup_type, std::string(kCommand) + ": --warmup-type");
  return true;
}

void validate(const TrainOptions& o) {
  check_positive(static_cast<double>(o.steps), "steps", kCommand);
  check_positive(static_cast<double>(o.micro_batch), "micro-batch", kCommand);
  check_positive(static_cast<double>(o.grad_accum), "grad-accum", kCommand);
  check_positive(static_cast<double>(o.seq_len), "seq-len", kCommand);
  check_positive(o.optim.lr, "lr", kCommand);
  check_positive(o.optim.eps, "eps", kCommand);
  check_positive(o.comm_timeout, "comm-timeout", kCommand);
  auto at_least_zero = [](double v, const char* option) {
    ZT_CHECK(v >= 0,
             std::string(kCommand) + ": --" + option + " must be >= 0, got " + std::to_string(v));
  };
  at_least_zero(o.optim.min_lr, "min-lr");
  at_least_zero(static_cast<double>(o.optim.warmup_steps), "warmup-steps");
  at_least_zero(o.optim.weight_decay, "weight-decay");
  at_least_zero(static_cast<double>(o.seed), "seed");
  at_least_zero(static_cast<double>(o.eval_batches), "eval-batches");
  at_least_zero(static_cast<double>(o.log_every), "log-every");
  at_least_zero(static_cast<double>(o.save_consolidated_every), "save-consolidated-every");
  for (auto [beta, name] : {std::pair{o.optim.beta1, "beta1"}, {o.optim.beta2, "beta2"}})
    ZT_CHECK(beta >= 0 && beta < 1, std::string(kCommand) + ": --" + name +
                                        " must be in [0, 1), got " + std::to_string(beta));
  ZT_CHECK(o.zero.stage >= 0 && o.zero.stage <= 3, std::string(kCommand) +
                                                       ": --zero-stage must be 0, 1, 2 or 3, got " +
                                                       std::to_string(o.zero.stage));
  check_positive(static_cast<double>(o.zero.reduce_bucket_size), "reduce-bucket-size", kCommand);
  check_positive(static_cast<double>(o.zero.allgather_bucket_size), "allgather-bucket-size",
                 kCommand);
  check_positive(static_cast<double>(o.zero.prefetch_bucket_size), "prefetch-bucket-size",
                 kCommand);
  check_positive(static_cast<double>(o.zero.max_live_parameters), "max-live-parameters", kCommand);
  at_least_zero(static_cast<double>(o.zero.param_persistence_threshold),
                "param-persistence-threshold");
  at_least_zero(static_cast<double>(o.zero.max_reuse_distance), "max-reuse-distance");
  o.zero.validate();
  validate_schedule(o.optim);
  parse_precision(o.precision);
  resolve_engine_backend(o.backend, kCommand);  // rejects unknown or unavailable backends early
  parse_activation_checkpointing(o.activation_checkpointing, o.cpu_checkpointing);
  validate_checkpoint_flags(o.checkpoint, kCommand);
  o.offload.resolved().validate(o.zero.stage);
}

// The one-line progress display (rank 0, stderr a terminal) and the periodic log lines.
class Progress {
 public:
  Progress(bool active, int64_t total_steps, int64_t log_every)
      : tty_(active && isatty(STDERR_FILENO)),
        active_(active),
        total_(total_steps),
        log_every_(log_every) {}
  void update(const StepRecord& r, double elapsed_s) {
    if (!active_) return;
    const double eta =
        elapsed_s / static_cast<double>(r.step) * static_cast<double>(total_ - r.step);
    char line[200];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f tok/s  ETA %s",
                  static_cast<long long>(r.step), static_cast<long long>(total_), r.stats.loss,
                  r.tokens_per_s, clock_string(eta).c_str());
    if (tty_) std::fprintf(stderr, "\r\033[K%s", line);
    if (log_every_ > 0 && (r.step % log_every_ == 0 || r.step == total_))
      std::fprintf(stderr, tty_ ? "\n" : "%s\n", line);
    std::fflush(stderr);
  }
  void finish() {
    if (tty_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  static std::string clock_string(double seconds) {
    const auto s = static_cast<long long>(std::max(0.0, seconds));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    return buf;
  }
  bool tty_, active_;
  int64_t total_, log_every_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --eval-batches K at the end of training: K rounds in which every rank scores B windows, i.e.
// the first K·N·B non-overlapping windows (docs/ARCHITECTURE.md §3) — the same figure as
// `zerotrain eval --batches K --micro-batch N·B` on the trained weights.
nlohmann::json evaluate_after_training(ZeroEngine& engine, const TokenDataset& data,
                                       const TrainOptions& o, int rank, int world) {
  const int64_t B = o.micro_batch, T = o.seq_len;
  check_eval_windows(data, o.eval_batches * world * B, T);
  std::vector<int32_t> inputs(static_cast<size_t>(B * T)), targets(inputs.size());
  double loss_sum = 0;
  for (int64_t k = 0; k < o.eval_batches; ++k) {
    read_eval_windows(data, (k * world + rank) * B, B, T, inputs.data(), targets.data());
    loss_sum += engine.eval_loss_sum(inputs.data(), targets.data());
  }
  const int64_t tokens = o.eval_batches * world * B * T;
  return {{"loss", loss_sum / static_cast<double>(tokens)},
          {"tokens", tokens},
          {"batches", o.eval_batches},
          {"micro_batch", world * B}};
}

// The model's configuration: the --model directory's (opened into `reader`) or the preset's.
ModelConfig model_config(const TrainOptions& o, std::unique_ptr<ModelDirReader>& reader) {
  if (!o.model_dir.empty()) reader = std::make_unique<ModelDirReader>(o.model_dir);
  const ModelConfig config = reader ? reader->config() : preset_config(o.preset);
  check_seq_len(config, o.seq_len,
                reader ? "model '" + o.model_dir + "'" : "preset '" + o.preset + "'", kCommand);
  return config;
}

// OUT/run.json: what ran (collective; rank 0 writes).
void write_run_json(const TrainOptions& o, ZeroEngine& engine, Communicator& comm,
                    const std::string& backend, const std::string& communicator,
                    const ActivationCheckpointing& ac) {
  const ParamLayout& layout = engine.layout();
  const ModelConfig& config = engine.model().config();
  RunInfo info{kCommand,
               o.to_json(),
               comm.world_size(),
               hostnames(MPI_COMM_WORLD),
               backend,
               communicator,
               o.precision,
               config.to_hf_json(),
               layout.total_numel(),
               layout.non_embedding_numel()};
  info.config["activation_checkpointing"] = activation_checkpointing_name(ac);
  run_collectively(comm, [&] {
    if (comm.rank() != 0) return;
    std::filesystem::create_directories(o.out);
    write_text_file(o.out + "/run.json", run_json(info).dump(2) + "\n");
  });
}

// After the last step: the optional evaluation, OUT/final/ and the report files. Collective.
void finish_run(ZeroEngine& engine, const TokenDataset& data, const TrainOptions& o,
                MpiCommunicator& comm, RunRecorder& recorder, double total_time_s) {
  const int world = comm.world_size();
  nlohmann::json eval;
  if (o.eval_batches > 0) eval = evaluate_after_training(engine, data, o, comm.rank(), world);
  write_consolidated_model(engine, o.out + "/final", comm, {.overwrite = true});
  nlohmann::json extra = {
      {"world_size", world},
      {"zero_stage", o.zero.stage},
      {"precision", o.precision},
      {"global_batch_tokens", o.micro_batch * o.grad_accum * world * o.seq_len}};
  if (!eval.is_null()) extra["eval"] = eval;
  recorder.write_report(extra, total_time_s);
  if (comm.rank() == 0 && !eval.is_null()) std::cerr << "eval: " << eval.dump() << "\n";
}

int run_training(TrainOptions o) {
  const auto t_start = std::chrono::steady_clock::now();
  MpiRuntime runtime;
  MpiCommunicator comm;
  comm.set_timeout_seconds(o.comm_timeout);
  const int rank = comm.rank(), world = comm.world_size();
  const bool is_root = rank == 0;
  // ---- DeepSpeed train_batch_size rule (needs the world size) ----
  apply_batch_size_rule(o.batch_rule, world, o.micro_batch, o.grad_accum);

  std::unique_ptr<ModelDirReader> reader;  // --model: the weights to start from
  const ModelConfig config = model_config(o, reader);
  const Precision precision = parse_precision(o.precision);
  const ActivationCheckpointing ac =
      parse_activation_checkpointing(o.activation_checkpointing, o.cpu_checkpointing);

  // --resume continues a run in its own (non-empty) --out.
  if (o.checkpoint.resume == "none") check_output_dir(o.out, o.overwrite);
  TokenDataset data(o.data);
  WindowSampler sampler(data, config.vocab_size, o.seq_len, o.micro_batch, o.grad_accum, world,
                        rank, static_cast<uint64_t>(o.seed));

  const OffloadConfig offload = o.offload.resolved();
  EngineDevice device =
      make_engine_device(o.backend, comm, comm.comm(),
                         estimate_memory(config, world, o.zero, precision, o.micro_batch, o.seq_len,
                                         ac, offload, o.grad_accum),
                         kCommand);
  Backend* backend = device.backend.get();
  Communicator& data_comm = device.data_comm(comm);  // device buffers; `comm`: host ones
  MemoryTracker memory(backend->device_memory());
  ZeroEngine engine(config, o.zero, precision, o.optim, *backend, data_comm, memory, o.micro_batch,
                    o.seq_len, ac, offload, &comm);
  TrainCheckpointing checkpointing(
      o.checkpoint, o.out,
      {o.optim, o.steps, o.micro_batch, o.grad_accum, o.seq_len, static_cast<uint64_t>(o.seed)},
      comm);
  TrainingProgress start;  // steps done before this run (a resumed checkpoint's)
  if (!checkpointing.resume_dir().empty()) {
    start = checkpointing.resume(engine);
    sampler.set_cursor(start.cursor);
    if (start.step >= o.steps) {
      if (is_root)
        std::cerr << "checkpoint is at step " << start.step << " of " << o.steps
                  << ": nothing to train\n";
      return 0;
    }
  } else if (reader) {
    engine.load_from(*reader);
  } else {
    engine.init_from_seed(static_cast<uint64_t>(o.seed));
  }

  write_run_json(o, engine, comm, backend->name(), data_comm.backend_name(), ac);
  RunRecorder recorder(
      comm, data_comm, memory,
      {o.out, checkpointing.resume_dir().empty() ? -1 : start.step, start.tokens_seen,
       config.training_flops_per_token(o.seq_len), backend->name()});
  Progress progress(is_root, o.steps, o.log_every);

  for (int64_t step = start.step + 1; step <= o.steps; ++step) {
    checkpointing.before_step(step);
    recorder.begin_step(step);
    sampler.next_step();
    recorder.data_ready();
    const float lr = learning_rate_at(o.optim, step, o.steps);
    const StepStats stats = engine.train_step(sampler.inputs(), sampler.targets(), lr, step);
    const StepRecord& r = recorder.trained(lr, stats);
    if (!std::isfinite(stats.loss)) {
      progress.finish();
      fail("loss is " + std::to_string(stats.loss) + " at step " + std::to_string(step) +
           "; stopping (metrics so far are in " + o.out + "/metrics.jsonl, no final model)");
    }
    // Stop agreement + checkpoint save, timed into this step's record before it is written.
    const bool stop = checkpointing.after_step(engine, {step, r.tokens_seen, sampler.cursor()});
    if (o.save_consolidated_every > 0 && step % o.save_consolidated_every == 0)
      write_consolidated_model(engine, consolidated_step_dir(o.out, step), comm,
                               {.overwrite = true});
    progress.update(recorder.end_step(), recorder.loop_seconds());
    if (stop) {
      recorder.write_trace();
      progress.finish();
      return kStoppedExitCode;
    }
  }
  progress.finish();

  finish_run(engine, data, o, comm, recorder, seconds_since(t_start));
  return 0;
}

}  // namespace

int cmd_train(int argc, char** argv) {
  TrainOptions options;
  if (!parse_train_options(argc, argv, options)) return 0;
  validate(options);
  return run_training(options);
}

}  // namespace zt
