// ZeroEngine's internals, shared by zero_engine.cpp (allocation, the training step),
// zero_engine_optimizer.cpp (the optimizer step) and zero_engine_state.cpp (initialisation,
// checkpoint access, full-tensor export). Not a public header.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/decay_segments.h"
#include "engine/grad_reducer.h"
#include "engine/loss_scaler.h"
#include "engine/memory_plan.h"
#include "engine/micro_batch_graphs.h"
#include "engine/offload/host_device_copier.h"
#include "engine/offload/offload_optimizer.h"
#include "engine/pairwise_sum.h"
#include "engine/param_gatherer.h"
#include "engine/stage_traits.h"
#include "engine/zero_engine.h"

namespace zt {

// What a divergence report adds: the learning rate of the update before it (none before the
// first, last_update_lr < 0), the usual cause of a loss or gradient that stops being finite.
std::string learning_rate_hint(float last_update_lr);

// A source of a group's fp32 values over [begin, begin+count) of its flat (unpadded) range;
// padding beyond numel is zero.
using GroupSource = std::function<void(const TensorInfo&, int64_t begin, int64_t count, float*)>;

struct ZeroEngine::Impl {
  Impl(ZeroEngine& e, const ZeroConfig& z, Precision p, const AdamWConfig& o, Backend& b,
       Communicator& c, Communicator& h, MemoryTracker& m)
      : self(e),
        zero(z),
        traits(StageTraits::of(z.stage)),
        precision(p),
        optim(o),
        be(b),
        dev(b.device_memory()),
        comm(c),
        host(h),
        memory(m),
        intervals(b.timeline()),
        world(c.world_size()),
        rank(c.rank()),
        copier(std::make_unique<DeviceMemoryCopier>(b.device_memory())) {}

  ZeroEngine& self;
  ZeroConfig zero;
  StageTraits traits;  // what zero.stage means
  Precision precision;
  AdamWConfig optim;
  Backend& be;
  DeviceMemory& dev;   // where the buffers below live (host-pool ones excepted)
  Communicator& comm;  // data plane: device buffers
  Communicator& host;  // host buffers: scalars
  MemoryTracker& memory;
  StepIntervals intervals;  // the step's phases and collective waits, on the device's timeline
  int world, rank;
  OffloadConfig offload;
  MemoryPlan plan;  // every buffer of the engine (engine/engine_memory_plan.h)
  std::unique_ptr<HostDeviceCopier> copier;
  std::unique_ptr<OffloadOptimizer> offloader;  // optimizer offload (cpu | nvme)
  // fp16 (Precision::kFp16): the loss scaler, and the steps it skipped so far. Adam's step count
  // and the learning-rate schedule advance only on the steps that update, as in DeepSpeed.
  std::unique_ptr<LossScaler> scaler;
  int64_t skipped_steps = 0;
  float last_update_lr = -1;  // the learning rate of the last update (-1: none yet), for errors
  uint64_t d2h_at_step_start = 0, h2d_at_step_start = 0;  // the copier's counters

  // Working params: stage 0-2 the full padded group, stage 3 the rank's shard.
  std::vector<TrackedBuffer<uint16_t>> work16;  // bf16 or fp16 working params (work_dtype())
  std::vector<TrackedBuffer<float>> work_f32;
  // Optimizer state over the rank's own range (stage 0: the whole group).
  std::vector<TrackedBuffer<float>> master, adam_m, adam_v;
  // Gradients: stage 0/1 full padded accumulators, stage 2/3 fp32 shards.
  std::vector<TrackedBuffer<float>> grads;
  TrackedBuffer<float> step_losses;   // [micro-batches · tokens] per-token losses of this step
  TrackedBuffer<double> group_sumsq;  // [groups] Σ grad² of the own range, read once per step
  TrackedBuffer<float> compute;       // fp32 upcast of the group being computed (upcasts_params)
  // Tied embeddings: the embedding's fp32 upcast while the head computes (upcasts_params), and
  // the embedding's gradient bucket of the micro-batch (zeroed, then filled by the head's
  // backward and the embedding's own): reduced like a bucket (stages 2/3) or, at stages 0/1,
  // copied into the accumulator at a step's first micro-batch and added in one addition per
  // element after, as every other group's micro-batch gradient is.
  TrackedBuffer<float> tied_compute, tied_grads;
  // LoRA: the fp32 upcast of a layer's adapter group while the layer computes (upcasts_params).
  TrackedBuffer<float> adapter_compute;
  // Host copies of optimizer shards handed out by optimizer_shard() (no optimizer offload).
  struct HostShard {
    std::vector<float> master, m, v;
    bool held = false;
  };
  std::vector<HostShard> staged;
  // Delayed parameter update without optimizer offload (offload.delay): the working values of
  // the last update, held back one step (`delayed_held` when they are), and the buffer the
  // update being computed writes; the own range of each trained group.
  std::vector<TrackedBuffer<uint8_t>> delayed_work, delayed_fresh;
  bool delayed_held = false;
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<ParamGatherer> gatherer;
  // World-invariant training (zero.world_invariant, docs/ARCHITECTURE.md §4). Each micro-batch's
  // gradient is reduce-scattered over the ranks in rank-tree order into a leaf of
  // `micro_batch_sum`, the balanced tree over the rank's micro-batches; the leaves hold every
  // group's shard, group g at shard_offset[g]. At stages 1-3 the tree's sum is the optimizer's
  // gradient in place (no `grads` buffers). norm_blocks: Σ grad² of every block of
  // kInvariantNormBlock elements of every padded group (group g's from norm_block_offset[g]).
  std::unique_ptr<PairwiseSum> micro_batch_sum;
  float* leaf = nullptr;  // the open leaf of the micro-batch being computed
  std::vector<int64_t> shard_offset, norm_block_offset;
  int64_t leaf_elements = 0;  // Σ shard of every group: one leaf
  TrackedBuffer<double> norm_blocks;
  // Frozen parameters (model/trainable.h), resolved once: whether each group trains, and the
  // lowest group whose backward runs.
  std::vector<bool> group_trains;
  int lowest_backward_group = 0;
  // --cuda-graphs on (engine/micro_batch_graphs.h); null when not asked for. backward_use: the
  // pass position where the forward left off (Stage3Residency::unit_pass).
  std::unique_ptr<MicroBatchGraphs> graphs;
  size_t backward_use = 0;
  // Whether micro-batches go through `graphs` (asked for, allowed, and not turned off by a failed
  // recording, which happens only before a micro-batch's passes run op by op): then the
  // reductions start after the backward, not inside it (one rank at stage 0: the same bits).
  bool records_micro_batches() const { return graphs && graphs->on(); }

  const GroupPartition& part(int g) const { return self.parts_[static_cast<size_t>(g)]; }
  int num_groups() const { return static_cast<int>(self.parts_.size()); }
  // 16-bit working params (bf16 or fp16) with fp32 masters; false: fp32 working params.
  bool half() const { return precision != Precision::kFp32; }
  bool invariant() const { return zero.world_invariant; }
  // Whether each micro-batch's gradient is reduced at once (stages 2/3, and every stage in
  // world-invariant training).
  bool reduces_each_micro_batch() const { return traits.reduces_each_micro_batch() || invariant(); }
  // Whether the own gradient shards are read from the micro-batch tree's sum (world-invariant
  // stages 1-3) rather than from `grads`.
  bool grads_in_tree() const { return invariant() && traits.shard_optimizer; }
  bool tied() const { return self.model_.layout().tied_embeddings(); }
  // Whether group g has a trainable tensor (gradients, optimizer state); the lowest such group.
  bool trains(int g) const { return group_trains[static_cast<size_t>(g)]; }
  int lowest_backward() const { return lowest_backward_group; }
  bool upcasts_params() const {
    return upcasts_working_params(precision, self.model_.activation_storage());
  }
  DType work_dtype() const { return working_dtype(precision); }
  size_t work_elem() const { return dtype_size(work_dtype()); }
  void* work(int g) {
    return half() ? static_cast<void*>(work16[static_cast<size_t>(g)].data())
                  : static_cast<void*>(work_f32[static_cast<size_t>(g)].data());
  }
  // The own range inside the working buffer (stage 3 holds the shard).
  uint8_t* own_working(int g) {
    const int64_t off = traits.shard_parameters ? 0 : own_begin(g);
    return static_cast<uint8_t*>(work(g)) + static_cast<size_t>(off) * work_elem();
  }
  // Own range of the optimizer state, in group coordinates.
  int64_t own_begin(int g) const { return traits.shard_optimizer ? rank * part(g).shard : 0; }
  int64_t own_size(int g) const { return traits.shard_optimizer ? part(g).shard : part(g).numel; }

  // Step and phase for both communicators' timeout reports.
  void set_phase(int64_t step, const char* phase) {
    comm.set_context(step, phase);
    if (&host != &comm) host.set_context(step, phase);
  }
  void allocate();
  void fill(const GroupSource& source);
  void put_working(int g, int64_t offset, const float* host_values, int64_t n);
  OptimizerShard frozen_shard(int g);
  void master_to_working(int g);
  ConstTensorView as_compute(const void* w, int g, float* upcast);
  // upcast: where fp32 params go when upcasts_params (compute, or tied_compute for the
  // embedding computed with the head).
  ConstTensorView params_for(int g, size_t use, float* upcast);
  // The pass positions of one compute unit (model/layout.h): from `use`, its own group, then with
  // tied embeddings at the head the embedding, or a layer's LoRA adapter group. Acquires them all.
  struct GroupUse {
    size_t use = 0, next = 0;
    ConstTensorView params, embedding, adapters;
    int adapter_group = -1;
  };
  GroupUse acquire_use(int unit, size_t use);
  void release_use(const GroupUse& u);
  std::vector<DecaySegment> own_segments(int g) const;
  const float* resident_master(int g);
  void release(size_t use);
  // One micro-batch's forward and backward, its reductions and its losses' copy; recorded and
  // replayed through `graphs` where the engine has them.
  void run_micro_batch(int64_t micro_batch, bool last, float grad_scale, bool document_masks);
  void forward_units(float grad_scale);
  void backward_units(int64_t micro_batch, bool last);
  void start_reduction_after_last(int g, std::function<void()> landed);
  void finish_backward(int64_t micro_batch, bool last);
  // Why this engine's micro-batches cannot be recorded as CUDA graphs ("" when they can).
  std::string why_no_graphs() const;
  // Σ over the ranks of the per-token losses kept by run_micro_batch: read once, after the step's
  // device work (no host synchronisation between micro-batches). Each micro-batch in double; in
  // world-invariant training the micro-batches' sums are added in global micro-batch order.
  double step_loss_sum(int64_t micro_batches);
  // Global gradient norm: every group's Σ grad² on the device, one read, summed in group order;
  // world-invariant: the blocks' sums, added in global block order.
  double gradient_norm();
  double invariant_gradient_norm();
  // World-invariant training, after the last micro-batch: the tree's sum becomes the optimizer's
  // gradient (stages 1-3 read it in place; stage 0 all-gathers the shards into the whole group).
  void land_invariant_gradients();
  float* own_grads(int g);  // the own range's gradients
  // Collective over `host`: the layout index of the first tensor in which any rank's own range of
  // the gradients (or of the fp32 masters) holds a NaN or an infinity; -1 when none does.
  int64_t first_non_finite_tensor(bool gradients);
  void optimizer_step(float lr, int64_t step, StepStats& stats);
  // Throws (an agreed error, the overlap rolled back) when the unscaled norm is not finite, or
  // when bf16 gradient copies may have overflowed (`copy_overflowed`): the step cannot update.
  void stop_unless_steppable(double grad_norm, int64_t step, bool copy_overflowed);
  // Delayed parameter update: the update held back (offload: the one running on the host, waited
  // for) becomes the working params; false when none was held. The caller all-gathers (1/2).
  bool publish_delayed_update(StepStats* stats);
  // The AdamW of the own ranges, its working values at out(g) (the working params, or a delayed
  // update's buffer), without optimizer offload.
  void device_adamw(AdamWHyper h, const std::function<uint8_t*(int g)>& out);
  // Exact offload overlap: opens the speculation of step `step` at rate lr (before its backward).
  void begin_offload_overlap(float lr, int64_t step);
  void gather_updated_params(bool every_group);
};

}  // namespace zt
