// zerotrain train: the training loop. Options → MPI runtime, communicator, backend → ZeroEngine
// (initialised from a seed or loaded from a model directory) → for each step: learning rate,
// this rank's micro-batches, engine.train_step, one metrics line. At the end: optional eval,
// report files and the final bf16 model directory. Only rank 0 writes files.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "app/deepspeed_config.h"
#include "app/engine_device.h"
#include "app/error_report.h"
#include "app/kernel_profiling.h"
#include "app/run_agreement.h"
#include "app/run_setup.h"
#include "app/train_checkpointing.h"
#include "app/train_eval.h"
#include "app/train_options.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_adam.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/consolidate.h"
#include "checkpoint/peft_adapter.h"
#include "comm/mpi_communicator.h"
#include "engine/engine_spec_json.h"
#include "engine/lr_schedule.h"
#include "engine/zero_engine.h"
#include "io/data_loader.h"
#include "io/fs_util.h"
#include "io/hf_import.h"
#include "io/model_dir.h"
#include "io/peft_adapter_file.h"
#include "io/run_directory.h"
#include "io/token_dataset.h"
#include "io/tokenizer_files.h"
#include "model/trainable.h"
#include "report/run_recorder.h"
#include "report/run_report.h"
#include "runtime/cpu_placement.h"
#include "runtime/mpi_runtime.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {
namespace {

const char* const kCommand = kTrainCommand;

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
    char line[200], eval[40] = "";
    if (r.eval)  // an evaluation's step is always logged
      std::snprintf(eval, sizeof eval, "  eval_loss %.4f", r.eval->loss);
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  %.0f tok/s  ETA %s%s",
                  static_cast<long long>(r.step), static_cast<long long>(total_), r.stats.loss,
                  r.tokens_per_s, clock_string(eta).c_str(), eval);
    if (tty_) std::fprintf(stderr, "\r\033[K%s", line);
    if (log_every_ > 0 && (r.step % log_every_ == 0 || r.step == total_ || r.eval))
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

// What every rank opens on its own before the job's first collective: the model (configuration,
// and with --model its weights), the dataset and its data order, the checkpoint to resume.
struct TrainInputs {
  std::unique_ptr<RunDirectoryLock> lock;  // rank 0: one run at a time in --out
  std::unique_ptr<ModelDirReader> reader;  // --model: the weights to start from
  // What the engine is built for: the model's configuration (with LoRA), --precision,
  // --activations, the micro-batch, checkpointing, offload, --trainable / --freeze, AdamW and
  // loss scaling, resolved and validated once here.
  EngineSpec spec;
  std::unique_ptr<TokenDataset> data;
  std::unique_ptr<WindowSampler> sampler;
  std::string data_identity;  // TokenDataset::identity()
  TrainEvalSet eval;          // what --eval-batches scores: --eval-data's windows or --data's
  TokenizerFiles tokenizer;   // the data's Hugging Face tokenizer, else the model's; or empty
  std::string resume_dir;     // "" when the run starts fresh
  // The checkpoint keeps frozen groups as digests: the resume loads the base first (as a fresh run
  // does) and load_checkpoint verifies it.
  bool resume_reloads_base = false;
  std::unique_ptr<PeftAdapterReader> adapter;  // --lora-init-from: the adapters to continue
};

TrainInputs open_inputs(TrainOptions& o, int rank, int world) {
  apply_batch_size_rule(o.from_deepspeed.batch_rule, world, o.micro_batch, o.grad_accum);
  validate_naming_deepspeed_file(o.deepspeed, o.from_deepspeed.options_set, [&] {
    if (o.epochs == 0) check_run_size(o, world);  // with --epochs, once the data gives the steps
    if (o.zero.world_invariant) check_world_invariant_shape(world, o.grad_accum);
  });
  TrainInputs in;
  if (!o.model_dir.empty()) in.reader = std::make_unique<ModelDirReader>(o.model_dir);
  in.spec = engine_spec(o, in.reader ? in.reader->config() : preset_config(o.preset));
  const ModelConfig& config = in.spec.model;
  check_seq_len(config, o.seq_len,
                in.reader ? "model '" + o.model_dir + "'" : "preset '" + o.preset + "'", kCommand);
  if (!o.lora.init_from.empty())
    in.adapter = std::make_unique<PeftAdapterReader>(o.lora.init_from, config);
  in.data = std::make_unique<TokenDataset>(o.data);
  in.tokenizer = in.data->tokenizer_files();
  // Data that carries no tokenizer (llm.c or nanoGPT shards) trains a model that may: final/ and
  // the checkpoints then carry the model's, so that what the run writes loads as the model did.
  if (in.tokenizer.empty() && !o.model_dir.empty()) {
    TokenizerFiles model_tokenizer = read_tokenizer_files(o.model_dir);
    if (model_tokenizer.files.count("tokenizer.json")) in.tokenizer = std::move(model_tokenizer);
  }
  check_data_fits_model(*in.data, o.data, o.model_dir);
  // From here on the options hold the mode that runs, so the ranks agree on it and run.json
  // records it.
  const bool document_masks =
      resolve_document_masking(o.document_masking, in.data->num_documents(), o.data, kCommand);
  o.document_masking = document_masks ? AutoSwitch::kOn : AutoSwitch::kOff;
  o.packing = packing_for_run(o.packing, o.checkpoint, o.out, *in.data);
  in.sampler = std::make_unique<WindowSampler>(
      *in.data, config.vocab_size, o.seq_len, o.micro_batch, o.grad_accum, world, rank,
      static_cast<uint64_t>(o.seed), document_masks, o.packing);
  if (o.epochs > 0) {  // the run's length in steps, from the windows an epoch holds
    validate_naming_deepspeed_file(o.deepspeed, o.from_deepspeed.options_set, [&] {
      resolve_epochs(o, *in.sampler);
      check_run_size(o, world);
    });
    in.spec.optim = o.optim;  // with --warmup-ratio, the warmup it came to
  }
  in.data_identity = in.data->identity();
  in.eval = open_eval_set(o, *in.data, in.tokenizer, document_masks, config, world);
  // Only once the inputs are known to be usable (a refused dataset leaves the previous run in
  // place): --resume continues a run in its own (non-empty) --out; --overwrite replaces one.
  if (rank == 0) in.lock = std::make_unique<RunDirectoryLock>(o.out);
  std::string fallback_note;
  in.resume_dir = resolve_resume_checkpoint(o.checkpoint.resume, o.out, &fallback_note);
  if (rank == 0 && !fallback_note.empty())
    std::fprintf(stderr, "warning: --resume auto: %s\n", fallback_note.c_str());
  // Another run's checkpoint may start beside what a job script wrote in OUT, not over a run.
  const bool afresh = starts_afresh_in(o.out, o.checkpoint.resume, in.resume_dir, o.overwrite);
  if (o.checkpoint.resume == "none") check_output_dir(o.out, o.overwrite);
  if (o.checkpoint.resume == "auto" && in.resume_dir.empty())
    check_fresh_start_in(o.out, o.overwrite);
  if (rank == 0 && afresh && o.overwrite && (in.resume_dir.empty() || holds_zerotrain_run(o.out)))
    clear_previous_run(o.out);
  // A checkpoint of another model, other adapters or other frozen tensors is refused before the
  // engine is built (its buffers, and a model directory's weights read, for nothing).
  if (!in.resume_dir.empty()) {
    const CheckpointManifest manifest =
        manifest_to_resume(o.checkpoint, o.out, in.resume_dir, o.steps);
    const ParamLayout layout(config);
    check_checkpoint_model(manifest, config, layout, in.resume_dir);
    check_checkpoint_trainable(manifest, layout, in.spec.trainable, in.resume_dir);
    in.resume_reloads_base = keeps_frozen_digests(manifest);
  }
  return in;
}

// The CPU AdamW's host thread on this backend: pinned off the GPU-feeding core and the cores of
// the host's other ranks (a GPU backend);
// --offload-optimizer-overlap auto off on the CPU backend, whose host thread would share the
// cores computing the backward, elsewhere its kept state limited to half the host memory that the
// run's planned host pool leaves (auto_overlap_bytes). Collective over `comm` (the ranks per host)
// with CPU optimizer offload on a GPU backend, the same on every rank.
void resolve_host_adam(const TrainOptions& o, int world, MpiCommunicator& comm, EngineSpec& spec) {
  OffloadConfig& offload = spec.offload;
  // A GPU backend: the CPU AdamW's host thread keeps off the core that feeds the GPU, and off
  // the cores of the other ranks' threads on its host.
  if (o.backend_kind != BackendKind::kCpu && offload.optimizer == OffloadDevice::kCpu)
    offload.host_adam_cpus = host_worker_cpus_on_this_host(comm.comm());
  if (o.offload.overlap != AutoSwitch::kAuto || !offload.keeps_speculated_state()) return;
  if (o.backend_kind == BackendKind::kCpu) {
    offload.overlap = false;
    return;
  }
  EngineSpec without = spec;
  without.offload.overlap = false;
  const MemoryEstimate planned = estimate_memory(without, world);
  offload.overlap_bytes =
      auto_overlap_bytes(planned.host, local_rank_by_hostname(comm.comm()).local_size);
}

// OUT/run.json: what ran (collective; rank 0 writes).
void write_run_json(const TrainOptions& o, ZeroEngine& engine, Communicator& comm,
                    const std::string& backend, const std::string& communicator,
                    const EngineSpec& spec, const std::string& attention_kernel, bool resumed) {
  const ParamLayout& layout = engine.layout();
  const ModelConfig& config = engine.model().config();
  const std::vector<std::string> names = hostnames(MPI_COMM_WORLD);
  RunInfo info{kCommand,
               o.to_json(),
               comm.world_size(),
               names,
               backend,
               communicator,
               precision_name(o.precision),
               config.to_hf_json(),
               layout.total_numel(),
               layout.non_embedding_numel()};
  info.config["activation_checkpointing"] = activation_checkpointing_name(spec.ac);
  // What --attention resolved to on this backend: "cpu" (its one attention), "gemm" or "fused".
  info.config["attention_kernel"] = attention_kernel;
  // Optimizer offload: what runs the CPU AdamW, and its rate measured now on rank 0's host
  // thread (metrics.jsonl's host_adam gives the rate step by step). Its host thread's CPUs when
  // train pinned it (a GPU backend), and the overlap's limit on the state it keeps (-1: none;
  // auto's is this host's).
  const OffloadConfig& offload = engine.offload_config();
  if (offload.optimizer_offloaded()) {
    const std::vector<int>& cpus = offload.host_adam_cpus;
    constexpr int64_t kMeasuredElements = int64_t{1} << 23;  // 160 MB: past the caches
    info.config["host_adam"] = {
        {"threads", cpus.empty() ? openmp_thread_count() : static_cast<int>(cpus.size())},
        {"simd", cpu::adam_simd_name(cpu::best_adam_simd())},
        {"cpus", cpus},
        {"overlap", offload.keeps_speculated_state()},
        {"overlap_bytes", offload.overlap_bytes},
        {"measured_elements", comm.rank() == 0 ? kMeasuredElements : 0},
        {"measured_params_per_s",
         comm.rank() == 0 ? engine.measure_host_adam_rate(kMeasuredElements) : 0.0}};
  }
  info.trainable_parameters = engine.model().trainable().trainable_numel(layout);
  info.frozen_tensors = engine.model().trainable().frozen_names(layout);
  for (const LocalRank& l : local_ranks_of(names))
    info.placement.push_back(
        {{"host", l.hostname}, {"local_rank", l.local_rank}, {"local_size", l.local_size}});
  run_collectively(comm, [&] {
    if (comm.rank() != 0) return;
    std::filesystem::create_directories(o.out);
    nlohmann::json record = run_json(info);
    // The engine the run built, as the report reads it back (engine/engine_spec_json.h).
    record["engine"] = engine_spec_to_json(spec);
    // The DeepSpeed file: its path, SHA-256, what each key became and the warnings.
    if (!o.deepspeed.empty()) record["deepspeed"] = o.from_deepspeed.record;
    // An imported model's provenance: its Hugging Face directory and what import read past.
    const std::string import_record = o.model_dir + "/" + kImportRecordFile;
    if (!o.model_dir.empty() && std::filesystem::exists(import_record))
      record["model_import"] = read_json_file(import_record);
    if (resumed) archive_diverged_final(o.out, record);
    write_text_file(o.out + "/run.json", record.dump(2) + "\n");
  });
}

// A bf16 model directory with the tokenizer the data was made with beside it, for export
// (io/tokenizer_files.h); with LoRA, PEFT's adapter directory instead (the base is unchanged;
// checkpoint/peft_adapter.h), its base_model_name_or_path the one the LoRA options' adapter config
// named, else the --model directory or the preset.
// Collective.
void write_model_with_tokenizer(ZeroEngine& engine, const std::string& dir, MpiCommunicator& comm,
                                const TokenizerFiles& tokenizer, const TrainOptions& o) {
  const std::string& named = o.choices.lora_named_base_model;
  if (engine.model().config().lora.enabled())
    write_peft_adapter(engine, dir, comm,
                       !named.empty()        ? named
                       : o.model_dir.empty() ? o.preset
                                             : o.model_dir);
  else
    write_consolidated_model(engine, dir, comm, {.overwrite = true});
  run_collectively(comm, [&] {
    if (comm.rank() == 0) write_tokenizer_files(tokenizer, dir);
  });
}

// Whether `dir` holds a whole model, and its tokenizer when the data was made with one.
bool have_model_with_tokenizer(const std::string& dir, const TokenizerFiles& tokenizer,
                               bool adapter) {
  return std::filesystem::exists(dir + "/" + (adapter ? kPeftWeightsFile : kModelIndexFile)) &&
         (tokenizer.empty() || std::filesystem::exists(dir + "/tokenizer.json"));
}

// After the last step: the optional evaluation, OUT/final/ and the report files. Collective.
void finish_run(ZeroEngine& engine, const TrainInputs& in, const TrainOptions& o,
                MpiCommunicator& comm, RunRecorder& recorder, const Backend& backend,
                double total_time_s) {
  const int world = comm.world_size();
  nlohmann::json eval;
  // The last step's --eval-every evaluation, when it had one, has scored these weights already.
  const std::optional<StepEval> last = recorder.last_eval();
  if (o.evaluates())
    eval = eval_report_json(last ? *last : evaluate_windows(engine, in.eval, o, comm.rank(), world),
                            in.eval, o, world);
  write_model_with_tokenizer(engine, o.out + "/final", comm, in.tokenizer, o);
  nlohmann::json extra = {
      {"world_size", world},
      {"zero_stage", o.zero.stage},
      {"precision", precision_name(o.precision)},
      {"global_batch_tokens", o.micro_batch * o.grad_accum * world * o.seq_len}};
  if (!eval.is_null()) extra["eval"] = eval;
  const BackendTallies tallies = backend_tallies(backend, engine.cuda_graphs_report());  // rank 0's
  extra.update(tallies.fields);
  if (comm.rank() == 0)
    for (const std::string& line : tallies.log_lines)
      std::cerr << "zerotrain train: rank 0's " << line << "\n";
  recorder.write_report(extra, total_time_s);
  if (comm.rank() == 0 && !eval.is_null()) std::cerr << "eval: " << eval.dump() << "\n";
}

// ZT_DEBUG_FAIL_AT=R:S (tests): the step S at which rank R throws a rank-local error, as a device
// or I/O failure of that rank alone would, while the other ranks go on into the step's
// collectives; -1 for any other rank, or without the variable. Read once, before the loop.
int64_t debug_failure_step(int rank) {
  const char* at = std::getenv("ZT_DEBUG_FAIL_AT");
  int fail_rank = -1;
  long long fail_step = -1;
  if (!at || std::sscanf(at, "%d:%lld", &fail_rank, &fail_step) != 2 || fail_rank != rank)
    return -1;
  return fail_step;
}

// The first values of a run that does not resume: the --lora-init-from adapters over the base,
// the --model weights, or the seed's initialisation (adapters the source lacks from the seed).
void set_first_values(ZeroEngine& engine, const TrainInputs& in, uint64_t seed) {
  if (in.adapter) {
    LoraStartSource start(in.spec.model, in.reader.get(), in.adapter.get(), seed);
    engine.load_from(start, seed);
  } else if (in.reader) {
    engine.load_from(*in.reader, seed);
  } else {
    engine.init_from_seed(seed);
  }
}

// Whether OUT's run has ended: its final model and report are there, as rank 0 sees them (every
// rank takes its answer). A checkpoint at --steps without them was stopped after its save (a kill,
// a full disk). Collective.
bool run_has_ended(const TrainInputs& in, const TrainOptions& o, Communicator& comm) {
  std::error_code ec;
  int32_t ended =
      std::filesystem::exists(o.out + "/report.json", ec) &&
      have_model_with_tokenizer(o.out + "/final", in.tokenizer, in.spec.model.lora.enabled());
  comm.broadcast_blocking(&ended, 1, 0);
  return ended != 0;
}

// What the training loop steps with.
struct TrainLoop {
  const TrainOptions& o;
  TrainInputs& in;
  ZeroEngine& engine;
  MpiCommunicator& comm;
  Backend& backend;
  TrainCheckpointing& checkpointing;
  RunRecorder& recorder;
  StepProfiling& profiling;
};

// Steps first_step..--steps: the learning rate, the step, its record, the checkpoint and stop
// agreement, the consolidated model every --save-consolidated-every steps. Returns
// kStoppedExitCode when the ranks agreed to stop (a signal), else 0. Collective.
int run_steps(TrainLoop& loop, int64_t first_step) {
  const TrainOptions& o = loop.o;
  ZeroEngine& engine = loop.engine;
  MpiCommunicator& comm = loop.comm;
  Backend& backend = loop.backend;
  WindowSampler& sampler = *loop.in.sampler;
  TrainCheckpointing& checkpointing = loop.checkpointing;
  RunRecorder& recorder = loop.recorder;
  StepProfiling& profiling = loop.profiling;
  const TokenizerFiles& tokenizer = loop.in.tokenizer;
  const bool is_root = comm.rank() == 0;
  // The data's line, as the Hugging Face Trainer tells its examples and epochs.
  if (is_root) std::cerr << "data: " << sampler.epoch_summary(o.steps) << "\n";
  const std::string zero_rate =
      zero_learning_rate_warning(o.optim, first_step, o.steps, engine.skipped_steps());
  if (is_root && !zero_rate.empty()) std::cerr << "zerotrain train: warning: " << zero_rate << "\n";
  Progress progress(is_root, o.steps, o.log_every);
  const int64_t injected_failure_step = debug_failure_step(comm.rank());
  for (int64_t step = first_step; step <= o.steps; ++step) {
    checkpointing.before_step(step);
    if (step == injected_failure_step)
      throw Error("injected failure at step " + std::to_string(step) + " (ZT_DEBUG_FAIL_AT)");
    recorder.begin_step(step);
    sampler.next_step();
    recorder.data_ready();
    // fp16: a step skipped on overflow does not advance the schedule (as in DeepSpeed).
    const float lr = learning_rate_at(o.optim, step - engine.skipped_steps(), o.steps);
    profiling.before_step(step);
    const StepStats stats = engine.train_step(sampler.inputs(), sampler.targets(), lr, step,
                                              sampler.counted_targets(), sampler.doc_starts());
    profiling.after_step(step);
    if (is_root && stats.loss_targets == 0)  // SFT data whose mask excludes this whole batch
      std::cerr << "zerotrain train: warning: step " << step
                << ": no target of the global batch counts (the loss mask is 0 there, or each "
                   "begins a document); the step has no loss "
                   "gradient (AdamW's momentum and weight decay still move the weights)\n";
    const StepRecord& r = recorder.trained(lr, stats, backend.scratch_bytes());
    if (eval_due(o, step))
      recorder.evaluated(evaluate_windows(engine, loop.in.eval, o, comm.rank(), comm.world_size()));
    // Stop agreement + checkpoint save, timed into this step's record before it is written.
    const bool stop =
        checkpointing.after_step(engine, {step, r.tokens_seen, sampler.cursor()}, r.to_json());
    if (o.save_consolidated_every > 0 && step % o.save_consolidated_every == 0)
      write_model_with_tokenizer(engine, consolidated_step_dir(o.out, step), comm, tokenizer, o);
    progress.update(recorder.end_step(), recorder.loop_seconds());
    if (stop) {
      recorder.write_trace();
      progress.finish();
      return kStoppedExitCode;
    }
  }
  progress.finish();
  return 0;
}

int run_training(TrainOptions o) {
  const Stopwatch run_clock;
  MpiRuntime runtime;
  MpiCommunicator comm;
  comm.set_timeout_seconds(o.comm_timeout);
  const int rank = comm.rank(), world = comm.world_size();
  const bool is_root = rank == 0;
  // A launcher that bound this rank to fewer CPUs than its threads (mpirun's default binding).
  const std::string cpu_warning =
      cpu_oversubscription_warning(openmp_thread_count(), affinity_cpu_count(),
                                   static_cast<int>(std::thread::hardware_concurrency()));
  if (!cpu_warning.empty())
    std::cerr << "zerotrain train: warning: rank " << rank << " " << cpu_warning << "\n";
  // Every rank opens its inputs, then the ranks agree that they did and that they are about to
  // run the same job, before any collective whose shape depends on the options.
  TrainInputs in;
  run_collectively(comm, [&] { in = open_inputs(o, rank, world); });
  agree_on_run(
      comm, o.agreed_settings(in.spec.model, in.data_identity, in.eval.identity(), in.resume_dir));
  const ModelConfig& config = in.spec.model;
  WindowSampler& sampler = *in.sampler;

  const MemoryEstimate estimate = estimate_memory(in.spec, world);
  check_device_memory_limit(o, estimate, world);  // every rank computes the same: agreed
  EngineDevice device =
      make_engine_device(o.backend_kind, comm, comm.comm(), estimate,
                         {o.attention_request, attention_shape(config, o.micro_batch, o.seq_len),
                          in.spec.activation_storage, in.spec.precision == Precision::kFp32,
                          /*backward=*/true, sampler.document_masks(), o.deterministic},
                         o.gemm_algorithms);
  Backend* backend = device.backend.get();
  resolve_host_adam(o, world, comm, in.spec);        // collective
  Communicator& data_comm = device.data_comm(comm);  // device buffers; `comm`: host ones
  // Again with the scratch the backend holds outside the categories (the CUDA backend's GEMM,
  // attention and cuDNN workspaces), which each rank measures: agreed through run_collectively.
  const auto scratch = static_cast<size_t>(backend->scratch_bytes());
  if (device_memory_limit_bytes(o) > 0)  // the same options on every rank: no collective else
    run_collectively(comm, [&] { check_device_memory_limit(o, estimate, world, scratch); });
  MemoryTracker memory(backend->device_memory());
  memory.set_device_limit(device_memory_limit_bytes(o), scratch);
  // --profile-steps: the profiler made (CUPTI loaded) on every rank before anything is written,
  // so a backend or host without one fails the start on every rank alike.
  std::unique_ptr<StepProfiling> profiling;
  run_collectively(comm, [&] {
    profiling = std::make_unique<StepProfiling>(
        o.profile, o.out, is_root, o.profile.on() ? backend->make_kernel_profiler() : nullptr,
        /*trace_from_first_step=*/o.cuda_graphs);
  });
  // The engine outlives the loop's lambda, like the device: a rank-local error is reported
  // while both are alive, and ends the job (report_rank_local_errors_here).
  std::unique_ptr<ZeroEngine> engine_ptr;
  return report_rank_local_errors_here(kCommand, [&]() -> int {
    const TrainingHyperparameters hyper =
        o.hyperparameters(in.data_identity, device.attention_kernel);
    TrainCheckpointing checkpointing(o.checkpoint, o.out, hyper, comm, in.resume_dir,
                                     tokenizer_files_to_write(in.tokenizer));
    // The engine's buffers and its first values (rank-local work), agreed before any collective.
    run_collectively(comm, [&] {
      engine_ptr = std::make_unique<ZeroEngine>(in.spec, *backend, data_comm, memory, &comm);
      engine_ptr->model().set_lora_dropout_seed(static_cast<uint64_t>(o.seed));
      if (o.cuda_graphs) engine_ptr->use_cuda_graphs();
      if (in.resume_dir.empty() || in.resume_reloads_base)
        set_first_values(*engine_ptr, in, static_cast<uint64_t>(o.seed));
    });
    ZeroEngine& engine = *engine_ptr;
    TrainingProgress start;  // steps done before this run (a resumed checkpoint's)
    if (!in.resume_dir.empty()) {
      start = checkpointing.resume(engine);
      if (sampler.set_cursor(start.cursor) && is_root)
        std::cerr << "zerotrain train: note: the checkpoint's data position "
                  << start.cursor.position
                  << " is past this dataset's end: the run continues at epoch "
                  << start.cursor.epoch + 1 << "'s start\n";
      if (start.step == o.steps && run_has_ended(in, o, comm)) {  // nothing to train
        if (in.lock) in.lock->keep();
        if (is_root) announce_finished_run(o.out, o.to_json(), world, start.step);
        return 0;
      }
      if (is_root && start.step == o.steps)  // the end (evaluation, final/, report), no step
        std::cerr << "checkpoint is at step " << start.step << " of " << o.steps
                  << ": training is complete; finishing the run in " << o.out << "\n";
    }

    write_run_json(o, engine, comm, backend->name(), data_comm.backend_name(), in.spec,
                   device.attention_kernel, !in.resume_dir.empty());
    if (in.lock) in.lock->keep();  // the run has begun writing into --out
    RunRecorder recorder(comm, data_comm, memory,
                         {o.out, checkpointing.resume_dir().empty() ? -1 : start.step,
                          checkpointing.resumed_metrics_line(), start.tokens_seen,
                          training_flops_per_token(config, o.seq_len, in.spec.trainable),
                          backend->name(), o.zero.stage});
    TrainLoop loop{o, in, engine, comm, *backend, checkpointing, recorder, *profiling};
    if (run_steps(loop, start.step + 1) == kStoppedExitCode) return kStoppedExitCode;
    finish_run(engine, in, o, comm, recorder, *backend, run_clock.seconds());
    return 0;
  });
}

}  // namespace

int cmd_train(int argc, char** argv) {
  TrainOptions options;
  if (!parse_train_options(argc, argv, options)) return 0;
  validate(options);
  return run_training(options);
}

}  // namespace zt
