// ZeRO engine: owns who holds which bytes. Every parameter group's flat buffer is padded to a
// multiple of N ranks and split into N equal contiguous shards; rank r owns shard r of every
// group (fp32 master, Adam m and v, and at stages 2/3 the fp32 gradient shard).
//   stage 0: full replicas; gradients all-reduced (bucketed) after the last micro-batch.
//   stage 1: full fp32 gradient accumulators; reduce-scatter after the last micro-batch;
//            each rank updates its shard; bf16 params all-gathered.
//   stage 2: gradients reduce-scattered bucket by bucket during backward into fp32 shards.
//   stage 3: params sharded too; each group gathered before its forward and its backward,
//            released after use, prefetched ahead within the configured bounds.
// Frozen parameters (model/trainable.h): a group with no trainable tensor has working params
// only (sharded and gathered at stage 3 like any other), no gradient, master or moments, and
// moves no reduction bytes; the backward stops at the lowest group that trains.
// The model (LlamaModel) computes; the engine decides when parameters exist and where
// gradients go. Parameters, gradients, optimizer state and buffers are device memory (the
// backend's DeviceMemory): host code here only moves bytes through its copies, and collectives
// on them use the data-plane communicator (NCCL on GPUs); host scalars use the host one (MPI).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "engine/engine_spec.h"
#include "engine/engine_types.h"
#include "engine/loss_scaler.h"
#include "engine/memory_plan.h"
#include "engine/micro_batch_graphs.h"
#include "engine/offload/offload_config.h"
#include "engine/zero_config.h"
#include "model/init.h"
#include "model/llama.h"
#include "model/tensor_source.h"
#include "util/memory.h"

namespace zt {

class ZeroEngine {
 public:
  // The engine `spec` describes (validated: EngineSpec::validate) on the ranks of `comm`, the
  // data-plane communicator; `host_comm` carries host buffers (null: `comm` carries both).
  ZeroEngine(const EngineSpec& spec, Backend& backend, Communicator& comm, MemoryTracker& memory,
             Communicator* host_comm = nullptr);
  ~ZeroEngine();

  const ParamLayout& layout() const { return model_.layout(); }
  // The offload settings the engine runs with (auto's choices resolved).
  const OffloadConfig& offload_config() const;
  // Optimizer offload: the CPU AdamW's rate, elements per second, measured now on its host thread
  // over `elements` elements (OffloadOptimizer::measure_adam_rate); 0 without optimizer offload.
  double measure_host_adam_rate(int64_t elements);
  // The buffers it allocated and holds while it trains (engine/engine_memory_plan.h).
  const MemoryPlan& memory_plan() const;
  const GroupPartition& partition(int g) const { return parts_[static_cast<size_t>(g)]; }
  LlamaModel& model() { return model_; }
  const LlamaModel& model() const { return model_; }

  // Parameters: each rank produces only the elements it holds.
  void init_from_seed(uint64_t seed);
  // The tensors `source` holds (TensorSource::holds; its configuration is the model's, or the
  // model's without LoRA); LoRA adapters it does not hold start from their initialisation with
  // `adapter_seed`, a DoRA magnitude from the norms of the base rows the source holds, in the
  // working parameters' type (model/init.h's init_start_range).
  void load_from(TensorSource& source, uint64_t adapter_seed = 0);

  // One optimizer step over `accum` micro-batches of this rank. fp16: the loss is scaled before
  // the backward; when any rank's gradients overflow, the step is skipped (StepStats::skipped).
  // Adam's bias correction uses step − skipped_steps(). inputs[i]/targets[i] point at
  // B·T tokens each. lr is the scheduled learning rate of this step (1-based `step`).
  // counted_targets: the targets of the whole global batch that are not kIgnoredTarget (the loss
  // is their mean); -1 when every target counts (B·T·accum·world). doc_starts[i]: micro-batch
  // i's document masks (LlamaModel::set_batch); empty for plain causal attention.
  StepStats train_step(const std::vector<const int32_t*>& inputs,
                       const std::vector<const int32_t*>& targets, float lr, int64_t step,
                       int64_t counted_targets = -1,
                       const std::vector<const int32_t*>& doc_starts = {});
  // --cuda-graphs on: from now on each micro-batch's forward and backward are recorded once and
  // replayed (engine/micro_batch_graphs.h), where this engine allows it (one rank, stage 0, no
  // LoRA, no cpu_checkpointing, no world-invariant training) and the backend can record; the
  // report says what happened, and why not. Call before the first step.
  void use_cuda_graphs();
  const MicroBatchGraphs::Report* cuda_graphs_report() const;  // null unless use_cuda_graphs()
  // fp16 loss scaling (engine/loss_scaler.h; null in bf16 and fp32 runs): its state, and the
  // steps it skipped, which a checkpoint saves and a resume restores. A skipped step advances
  // neither Adam's step count nor (in the caller) the learning-rate schedule.
  const LossScaler* loss_scaler() const;
  int64_t skipped_steps() const;
  // A checkpoint's: `state` is applied when this run has a scaler and the checkpoint one (null:
  // the scaler starts afresh); the skipped steps in any precision.
  void restore_loss_scaling(const LossScaler::State* state, int64_t skipped_steps);
  // Σ per-token loss over this rank's micro-batch (forward only), all-reduced over ranks.
  double eval_loss_sum(const int32_t* inputs, const int32_t* targets,
                       const int32_t* doc_start = nullptr);

  // Checkpoint access: this rank's fp32 master and Adam moments of group g, in HOST memory: the
  // group is staged on the host (copied from the device, or read from NVMe) until
  // release_optimizer_shard(g), which writes it back when `modified`. Stage one group at a time.
  OptimizerShard optimizer_shard(int g);
  void release_optimizer_shard(int g, bool modified);
  // Delayed parameter update (OffloadConfig::delay): applies the update held back one step, so
  // that the working params are the masters' again; the next step then computes on them. Called
  // before a checkpoint, a consolidated model and an eval pass read the weights. Collective.
  void apply_delayed_update();
  // After every rank has overwritten its optimizer shards (checkpoint load), rebuilds the
  // working params from the masters (bf16 rounding in bf16 mode; stages 1/2 all-gather).
  // Collective.
  void refresh_working_params();
  const ZeroConfig& zero_config() const;
  Precision precision() const;
  // The communicator for host buffers (checkpoint metadata, scalars); device buffers go through
  // the data-plane communicator given to the constructor. The same object on the CPU backend.
  Communicator& communicator();

  // The name of the first tensor (layout order) whose fp32 master holds a NaN or an infinity on
  // any rank, "" when every master is finite: checked before a checkpoint or a model is written.
  // Collective.
  std::string non_finite_master_tensor();

  // Visits every tensor in layout order with its full values as bf16 (or fp32 for the fp32
  // master when `master` is true; fp16 runs export their trainable tensors from the masters), one
  // tensor at a time. Collective: every rank must call it; only rank 0's callback receives data
  // (others get nullptr). `groups`, when given, says which groups to visit (every rank alike).
  void for_each_full_tensor(bool master,
                            const std::function<void(const TensorInfo&, const void*)>& fn,
                            const std::function<bool(int g)>& groups = {});

 private:
  // `read` with each value rounded to the working parameters' type (16-bit precisions): what the
  // forward multiplies by, which a DoRA magnitude starts from (init_from_seed, load_from).
  TensorRangeReader as_working_values(TensorRangeReader read) const;
  struct Impl;
  LlamaModel model_;
  std::vector<GroupPartition> parts_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
