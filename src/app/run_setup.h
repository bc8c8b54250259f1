// Helpers shared by the commands that run the model (train, eval): option checks that name the
// flag, the activation-checkpointing policy, and collective error agreement across ranks.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "app/cli.h"
#include "app/lora_options.h"
#include "comm/collective_outcome.h"  // run_collectively (lives in the core library)
#include "comm/communicator.h"
#include "engine/activation_checkpointing.h"  // parse_activation_checkpointing (moved there)
#include "engine/engine_spec.h"
#include "engine/offload/offload_config.h"
#include "engine/zero_config.h"
#include "io/token_dataset.h"
#include "model/config.h"
#include "model/llama.h"

namespace zt {

// Fails "<command>: --<option> must be positive, got <value>" unless value > 0 (NaN fails).
void check_positive(double value, const std::string& option, const std::string& command);
// Fails unless value is a finite number >= minimum ("--eps inf", "--clip nan").
void check_finite_at_least(double value, double minimum, const std::string& option,
                           const std::string& command);

// Counts (steps, micro-batches, windows, ...) stay below 2^31, so no product of a few of them
// overflows 64 bits anywhere downstream.
constexpr int64_t kMaxCount = int64_t{1} << 31;
// Fails naming the option unless minimum <= value < kMaxCount.
void check_count(int64_t value, int64_t minimum, const std::string& option,
                 const std::string& command);

// A micro-batch's tokens (micro_batch × seq_len) fit 32-bit GEMM dimensions; returns them, else a
// zt::Error naming both options.
int64_t check_micro_batch_tokens(int64_t micro_batch, int64_t seq_len, const std::string& command);
// The run's sizes as train and estimate both take them: a micro-batch's tokens within 32-bit GEMM
// dimensions, and steps × global batch × seq-len tokens within 2^62 (the int64 token counters and
// every byte figure derived from them). `run_length` says where the steps came from, for the
// message: "--steps 12", "--epochs 3 (12 steps)", "one step".
void check_run_tokens(int64_t micro_batch, int64_t seq_len, int64_t grad_accum, int64_t world,
                      int64_t steps, const std::string& run_length, const std::string& command);
// A shard size in MiB (--shard-size-mb, --max-shard-size-mb) as bytes: finite, positive and at
// most 2^30 MiB (1 PiB); else a zt::Error naming the option and the value.
uint64_t shard_limit_bytes(double mib, const std::string& option, const std::string& command);
// Fails naming both numbers when seq_len exceeds the model's longest sequence
// (ModelConfig::max_positions(): max_position_embeddings, or yarn's scaled length).
void check_seq_len(const ModelConfig& config, int64_t seq_len, const std::string& model_source,
                   const std::string& command);

// Registers the ZeRO tuning options shared by train and estimate: --overlap-comm and the bucket,
// prefetch, persistence, live-parameter and reuse-distance bounds (zero_optimization keys).
void add_zero_bucket_options(po::options_description& options, ZeroConfig& zero);

// The offload options shared by train and estimate (DeepSpeed's offload_optimizer/offload_param):
// --offload-optimizer, --offload-param, --nvme-path, --offload-buffer-count, --sub-group-size,
// the delayed update and --offload-optimizer-overlap, each parsed as it is read.
struct OffloadOptions {
  OffloadConfig config;  // the devices, nvme_path, buffer_count, sub_group_size, ...
  AutoSwitch overlap = AutoSwitch::kAuto;  // --offload-optimizer-overlap auto | on | off
  std::string gradient_copies = "auto";    // --offload-gradient-copies auto | bf16 | fp32
  // The engine's OffloadConfig: `overlap` on unless off (auto's limit: auto_overlap_bytes, set by
  // train); the gradient copies in bf16 when asked, or, for auto, with optimizer offload on a GPU
  // `backend` under bf16 or fp16 `precision`; not yet validated for the stage.
  OffloadConfig resolved(BackendKind backend, Precision precision) const;
  // Whether gradient_copies gives bf16 copies to a run that offloads its optimizer (or not).
  bool bf16_gradient_copies(bool optimizer_offloaded, BackendKind backend,
                            Precision precision) const;
};
void add_offload_options(po::options_description& options, OffloadOptions& offload);
// --activation-checkpointing none | selective | full | every:K, parsed as it is read (on_host
// false); *target is the default.
po::value_semantic* activation_checkpointing_option(ActivationCheckpointing* target);

// The options train, estimate and eval share that decide the engine a run builds and the device
// it runs on: the micro-batch's shape, --precision, --activations, --backend, --attention,
// --document-masking, ZeRO, checkpointing, offload, --trainable / --freeze and the LoRA options
// (eval takes the first six). Defaults are train's; estimate and eval set their own.
struct RunEngineOptions {
  int64_t micro_batch = 4, grad_accum = 1, seq_len = 256;
  Precision precision = Precision::kBf16;          // --precision bf16 | fp16 | fp32
  DType activations = DType::kFloat32;             // --activations fp32 | bf16 | fp16 (storage)
  BackendRequest backend = BackendRequest::kAuto;  // --backend cpu | cuda | auto
  BackendKind backend_kind = BackendKind::kCpu;    // --backend resolved (resolve_device_options)
  // --attention gemm | fused | auto (the CUDA backend's; checked against the backend)
  AttentionRequest attention_request = AttentionRequest::kAuto;
  // --deterministic (train, estimate): false lets the CUDA backend's fused attention backward
  // accumulate with atomics (checked against the backend and --world-invariant)
  bool deterministic = true;
  // --document-masking auto | on | off; once the dataset is open, the mode that runs (on | off).
  AutoSwitch document_masking = AutoSwitch::kAuto;
  ZeroConfig zero;
  // --activation-checkpointing none | selective | full | every:K (on_host false: EngineChoices::ac
  // adds --cpu-checkpointing)
  ActivationCheckpointing activation_checkpointing;
  bool cpu_checkpointing = false;
  OffloadOptions offload;  // --offload-optimizer, --offload-param, --nvme-path, ...
  // --trainable / --freeze: regular expressions over tensor names (model/trainable.h).
  std::vector<std::string> trainable, freeze;
  LoraOptions lora;  // --lora-rank, --lora-config, ... (app/lora_options.h)
};

// After parsing, for train and eval: --backend resolved on this host (unknown or unavailable:
// refused), and --activations left unset given the default for the precision and that backend.
void resolve_device_options(const po::variables_map& vm, RunEngineOptions& o,
                            const std::string& command);

// What the engine options resolve to once they are checked together: train resolves them in
// validate(), estimate before it plans its run. LoRA's come from the options or from the one read
// of --lora-config's (or --lora-init-from's) adapter_config.json.
struct EngineChoices {
  ActivationCheckpointing ac;  // --activation-checkpointing on the host with --cpu-checkpointing
  OffloadConfig offload;       // OffloadOptions::resolved(); not validated for the stage
  LoraSpec lora;               // rank 0: no adapters
  // The base_model_name_or_path the LoRA options' adapter_config.json names ("" when none).
  std::string lora_named_base_model;
};
// Checks --activations against --precision and --cpu-checkpointing against the policy. Errors
// name `command`'s option (or the LoRA file's key).
EngineChoices parse_engine_choices(const RunEngineOptions& o, const std::string& command);

// The engine these options build for `model`, the one resolution train and estimate share: the
// parsed choices, the LoRA adapters added to the model, and the trainable set (--trainable,
// --freeze and the adapters' modules_to_save) made on its layout. The AdamW and loss-scale
// settings are train's own (left at their defaults here); not validated (EngineSpec::validate).
EngineSpec resolve_engine_spec(const RunEngineOptions& o, const EngineChoices& choices,
                               const ModelConfig& model);

// The training data's tokens are the model's (`model_dir`, "" for a preset): byte-level data
// (prepare-data --text without --tokenizer) does not go to a model that carries its own
// tokenizer.json, which would read the bytes as its token ids, nor data that another tokenizer
// made (its tokenizer.json holds a regular token at an id where the model's holds another). A
// tokenizer with more tokens than the model's vocab_size (an added token past the embedding's
// rows, which len(tokenizer) counts) is the model's all the same, as the Hugging Face Trainer
// takes it: an id at or past vocab_size is what cannot train, which the sampler refuses by index.
void check_data_fits_model(const TokenDataset& data, const std::string& data_path,
                           const std::string& model_dir);

// --offload-optimizer-overlap auto: the host bytes one rank's kept state may take, half of what
// the host's available memory (/proc/meminfo's MemAvailable, shared by `local_size` ranks) leaves
// beyond the rank's planned host pool `planned_host_bytes`; 0 when it leaves nothing or cannot be
// read.
int64_t auto_overlap_bytes(int64_t planned_host_bytes, int local_size);

}  // namespace zt
