// train's options: every setting of a training run, from the command line, a --config INI file
// and a --deepspeed JSON (app/deepspeed_config.h), parsed, validated and written to run.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/deepspeed_config.h"
#include "app/kernel_profiling.h"
#include "app/lora_options.h"
#include "app/run_agreement.h"
#include "app/run_setup.h"
#include "app/train_checkpointing.h"
#include "backend/attention_choice.h"
#include "backend/gemm_tuning.h"
#include "comm/communicator.h"
#include "engine/engine_spec.h"
#include "engine/estimator.h"
#include "engine/loss_scaler.h"
#include "engine/zero_config.h"
#include "io/data_loader.h"

namespace zt {

inline constexpr const char* kTrainCommand = "train";

// Besides the engine's options (RunEngineOptions, app/run_setup.h):
struct TrainOptions : RunEngineOptions {
  std::string model_dir, preset, data, out;
  bool overwrite = false;
  int64_t steps = 100;  // --steps, or once the data is open, what --epochs comes to
  double epochs = 0;    // --epochs E: the run's length in passes over the data (0: --steps)
  // --warmup-ratio R: the warmup is ceil(R·steps) steps once the steps are known (-1: not given,
  // --warmup-steps holds it); warmup_steps_given: --warmup-steps was set (command line, INI or
  // DeepSpeed JSON).
  double warmup_ratio = -1;
  bool warmup_steps_given = false;
  int64_t seed = 1234;
  // --packing auto | bfd | documents | wrapped; once the dataset is open, the mode that runs.
  Packing packing = Packing::kAuto;
  AdamWConfig optim;  // with --lr-schedule and --warmup-type, parsed as they are read
  // fp16 loss scaling (--loss-scale, --initial-scale-power, ...; DeepSpeed's fp16 block);
  // loss_scale_given: one of those options was on the command line.
  LossScaleConfig loss_scale;
  bool loss_scale_given = false;
  double comm_timeout = Communicator::kDefaultTimeoutSeconds;
  double device_memory_limit_gib = 0;  // --device-memory-limit: 0 = the device's own size
  // K: rounds of B windows per rank each evaluation scores; kAllEvalBatches: every whole window
  int64_t eval_batches = 0;
  int64_t eval_every = 0;  // evaluate after every N steps too (0: at the end only)
  std::string eval_data;   // the held-out token dataset evaluated ("": the training data)
  int64_t log_every = 10;
  int64_t save_consolidated_every = 0;  // OUT/consolidated/step-N bf16 model every N steps
  ProfileSteps profile;  // --profile-steps A:B: kernel profile of steps A..B (off unset)
  // --gemm-algorithms heuristic | timed: how the CUDA GEMMs pick their cuBLASLt algorithms
  // (backend/gemm_tuning.h); either computes the same bits.
  GemmAlgorithms gemm_algorithms = GemmAlgorithms::kHeuristic;
  // --cuda-graphs off | on: record each micro-batch's forward and backward once as CUDA graphs
  // and replay them (engine/micro_batch_graphs.h); the same bits either way.
  bool cuda_graphs = false;
  CheckpointFlags checkpoint;  // --save-every, --keep-last, --resume, ... (train_checkpointing.h)
  std::string deepspeed;       // --deepspeed FILE
  // The file's train_batch_size rule (applied once the world size is known) and the options it
  // set (named in validation errors).
  AppliedDeepSpeedFile from_deepspeed;

  EngineChoices choices;  // the engine's options resolved together, by validate()

  bool evaluates() const { return eval_batches != 0; }  // --eval-batches K > 0 or all

  // run.json's `config` and the settings the ranks agree on; after validate() (the LoRA record is
  // the parsed spec).
  nlohmann::json to_json() const;
  // What every rank must hold alike (app/run_agreement.h): every option of to_json() but the paths
  // a node may hold its own copy under, the backend --backend resolved to on the rank's host (auto
  // may resolve to cuda on one node and cpu on another), the model's configuration (`model`), the
  // identities of the dataset and of --eval-data's ("" for none), and the checkpoint resumed (""
  // for none).
  RunSettings agreed_settings(const ModelConfig& model, const std::string& data_identity,
                              const std::string& eval_data_identity,
                              const std::string& resume_dir) const;
  // What a checkpoint of this run records of it (checkpoint/checkpoint_manifest.h), once the
  // dataset is open (its identity, --document-masking resolved) and the device is built (the
  // attention kernel it runs).
  TrainingHyperparameters hyperparameters(const std::string& data_identity,
                                          const std::string& attention_kernel) const;
};

// Adds train's options, bound to `o`, to `opts` (estimate reads a train INI's keys through it).
void add_train_options(po::options_description& opts, TrainOptions& o);
// Parses train's options; false when --help was printed. Throws zt::Error on bad input.
bool parse_train_options(int argc, char** argv, TrainOptions& o);
// Throws zt::Error naming the option whose value is out of range or that does not go with the
// others; resolves o.choices.
void validate(TrainOptions& o);
// The checks that need the run's length in steps: by validate() with --steps; with --epochs once
// the data has given the steps (resolve_epochs).
void validate_run_length(const TrainOptions& o);
// With --epochs, the steps it comes to for `sampler`'s windows (steps_for_epochs), checked as
// validate_run_length checks them; nothing without.
void resolve_epochs(TrainOptions& o, const WindowSampler& sampler);
// With --warmup-ratio R, the warmup steps it comes to for the run's steps: ceil(R·steps) in
// double, as the Hugging Face Trainer's get_warmup_steps computes them. Called where the steps
// become known (validate() with --steps, resolve_epochs with --epochs).
void resolve_warmup_ratio(TrainOptions& o);
// The engine train builds for `model`: resolve_engine_spec with train's AdamW and loss scaling.
// The values were checked and parsed by validate().
EngineSpec engine_spec(const TrainOptions& o, const ModelConfig& model);
// Once the world size is known: the tokens of a micro-batch fit 32-bit GEMM dimensions and
// those of the whole run fit the int64 counters. Throws zt::Error naming the options.
void check_run_size(const TrainOptions& o, int world);

// --device-memory-limit in bytes (0: no limit).
size_t device_memory_limit_bytes(const TrainOptions& o);
// --device-memory-limit: a run whose estimated device peak per rank (MemoryEstimate::device_total,
// an upper bound of the measured peak), plus the `backend_scratch` bytes its backend holds outside
// those categories, exceeds the limit is refused, naming the categories, the scratch and the
// shortfall. Throws AgreedError: every rank must pass the same figures.
void check_device_memory_limit(const TrainOptions& o, const MemoryEstimate& e, int world,
                               size_t backend_scratch = 0);

}  // namespace zt
