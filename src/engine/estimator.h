// Memory estimator: per-rank bytes by MemoryTracker category, computed from the same rules
// ZeroEngine, GradReducer, ParamGatherer and the activation arena (ActivationPlan) allocate by,
// so a run's measured peaks can be put next to the prediction. Also the ZeRO-paper theory
// figures of docs/ARCHITECTURE.md §4 and a DeepSpeed-style offload figure, and the "which stage
// fits" decision tree used by `zerotrain estimate --device-memory`.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine_spec.h"

namespace zt {

// Peak bytes per rank. Device-pool categories match MemCategory; host is the host pool.
struct MemoryEstimate {
  int64_t params = 0;           // working params; stage 3: own shards + peak gathered groups
  int64_t stage3_gathered = 0;  // the gathered part of params (stage 3 only)
  int64_t grads = 0;            // fp32 accumulators: full padded (stage 0/1) or shards (2/3)
  int64_t optimizer = 0;        // fp32 master + Adam m, v of the own range (0 when offloaded)
  int64_t activations = 0;      // activation arena + token ids
  int64_t buffers = 0;          // compute upcast scratch, reduce slots, the step's token losses
  int64_t host = 0;             // host pool: CPU-checkpointed residuals, offloaded state
  int64_t nvme = 0;             // nvme pool: this rank's swap file (optimizer offload to nvme)

  // The peak of one MemoryTracker category (buffers: buffers_peak()).
  int64_t of(MemCategory category) const;
  int64_t model_states() const { return params + grads + optimizer; }
  int64_t buffers_peak() const { return buffers; }
  // Device peak during a training step, and over the run (start-up builds values on the host,
  // so it adds nothing).
  int64_t step_total() const { return model_states() + activations + buffers; }
  int64_t device_total() const { return step_total(); }
};

// Offload (offload_config.h) moves state out of the device pool: optimizer = cpu puts master,
// m, v (12 B per own element) plus the fp32 gradient shard (4 B) and two working-dtype staging
// tiles in the host pool; nvme keeps the gradient shard and tiles there but swaps master/m/v
// through buffer_count tile records (host) to a file (nvme); param = cpu (stage 3) puts the working
// shards in the host pool and adds their device staging copies while gathers are in flight.
// Frozen tensors (`trainable`, model/trainable.h): groups with none trainable keep working params
// only, and the stage-3 pass stops its backward at the lowest group that trains.
// `spec` is validated (EngineSpec::validate); world is the number of data-parallel ranks.
MemoryEstimate estimate_memory(const EngineSpec& spec, int world);

// docs/ARCHITECTURE.md §4 model states per rank with k-byte working params (k = 2 for bf16):
// stage 0 (k+16)Ψ, 1 (k+4)Ψ + 12Ψ/N, 2 kΨ + 16Ψ/N, 3 (k+16)Ψ/N — i.e. 18Ψ, 6Ψ+12Ψ/N,
// 2Ψ+16Ψ/N, 18Ψ/N for bf16.
// psi_frozen of the psi elements have working params only, no gradient or optimizer state (the
// elements of groups that do not train: TrainableSet::state_numel).
double theory_model_states_bytes(int64_t psi, int world, int stage, Precision precision,
                                 int64_t psi_frozen = 0);

// The data a training checkpoint of this run holds, all rank files together (each rank file about
// 1/N of it; docs/checkpoints-and-formats.md): per element, 12 bytes in a group with a trainable
// tensor (fp32 master, m, v) and the working dtype's (2 under bf16 or fp16, 4 under fp32) in a
// wholly frozen group (its values alone), none there when `frozen_as_digest` (the manifest keeps
// a digest instead). HDF5's own metadata is not counted.
int64_t checkpoint_data_bytes(const EngineSpec& spec, bool frozen_as_digest);

// DeepSpeed's published rules of thumb (estimate_zero2/zero3_model_states_mem_needs, "cold"
// variant, 1.5× buffer factor) for ZeRO-Offload with 16-bit params, "largest" = the largest
// layer group:
//   optimizer on CPU, stages 1-2: device 2Ψ, host per node Ψ·max(4·ranks_per_node, 16)·1.5;
//   optimizer on CPU, stage 3:    device 4·largest + 2Ψ/N, host Ψ·max(4·ranks_per_node, 16)·1.5;
//   + params on CPU (stage 3):    device 4·largest, host Ψ·max(4·ranks_per_node, 18)·1.5.
// DeepSpeed publishes no NVMe figure; for nvme the same figures apply with the 12Ψ of optimizer
// state on NVMe instead of in host memory.
struct OffloadFigure {
  double device_bytes = 0;
  double host_bytes_per_node = 0;
};
OffloadFigure deepspeed_offload_figure(const ModelConfig& model, int world, int stage,
                                       int ranks_per_node, bool params_on_cpu = false);

// One configuration tried by the decision tree.
struct FitCandidate {
  std::string label;  // e.g. "stage 2 + checkpointing"
  int stage = 0;
  ActivationCheckpointing ac;
  OffloadConfig offload;
  MemoryEstimate estimate;
  bool fits = false;
};

// Tries stage 0 → 1 → 2 → 2+selective checkpointing → 2+full checkpointing → 3 → 3+selective →
// 3+full → 3+full+CPU optimizer offload → the same + CPU param offload (with a policy requested,
// every row uses it and the rows that add one without offload drop out), and returns every
// candidate in that order;
// the first that fits in device_bytes (device_total ≤ device_bytes) is the recommendation
// (index, or -1 if none).
struct FitRecommendation {
  std::vector<FitCandidate> candidates;
  int chosen = -1;
};
// spec.ac is the requested policy; each candidate sets its own stage and offload (none, or the
// CPU offload of its row, its gradient copies in bf16 when `bf16_gradient_copies`: what the
// recommended train command would resolve) and keeps every other setting of `spec`.
FitRecommendation recommend_configuration(const EngineSpec& spec, int world, int64_t device_bytes,
                                          bool bf16_gradient_copies = false);

// "params 0.01 GiB, grads 0.01 GiB, optimizer 0.03 GiB, activations 0.40 GiB (largest),
// buffers 0.01 GiB": the device categories of an estimate, for messages.
std::string device_breakdown(const MemoryEstimate& e);

// The largest micro-batch whose estimated device peak (device_total) fits in device_bytes with
// everything else as given, and the estimates at it and at one more ("the ZeRO tutorial's
// exercise": the maximum batch size per stage). micro_batch 0 when not even one sequence fits.
// The estimate grows with the micro-batch, so the search doubles, then bisects.
struct MaxMicroBatch {
  int64_t micro_batch = 0;
  MemoryEstimate at;    // at micro_batch (at 1 when micro_batch is 0)
  MemoryEstimate next;  // at micro_batch + 1
};
// outside_bytes(b): device bytes a micro-batch of b needs outside the categories (a backend's
// own scratch, growing with b), counted against device_bytes too; none when empty.
// spec.micro_batch is what the search varies.
MaxMicroBatch max_micro_batch(const EngineSpec& spec, int world, int64_t device_bytes,
                              const std::function<int64_t(int64_t)>& outside_bytes = {});

}  // namespace zt
