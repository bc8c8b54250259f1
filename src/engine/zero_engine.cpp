#include "engine/zero_engine.h"

#include <algorithm>
#include <cmath>

#include "engine/engine_memory_plan.h"
#include "engine/zero_engine_impl.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

ZeroEngine::ZeroEngine(const EngineSpec& spec, Backend& backend, Communicator& comm,
                       MemoryTracker& memory, Communicator* host_comm)
    : model_(spec.model, backend, memory, spec.micro_batch, spec.seq_len, spec.ac, 0,
             spec.activation_storage),
      impl_(std::make_unique<Impl>(*this, spec.zero, spec.precision, spec.optim, backend, comm,
                                   host_comm ? *host_comm : comm, memory)) {
  model_.set_trainable(spec.trainable);
  model_.set_parameter_type(working_dtype(spec.precision));
  impl_->offload = spec.offload;
  if (spec.precision == Precision::kFp16)
    impl_->scaler = std::make_unique<LossScaler>(spec.loss_scale);
  const int64_t N = comm.world_size();
  for (const GroupInfo& g : model_.layout().groups())
    parts_.push_back(GroupPartition::of(g.numel, N, spec.zero.shard_alignment()));
  impl_->plan = plan_engine_memory(spec, static_cast<int>(N));
  impl_->allocate();
}

ZeroEngine::~ZeroEngine() = default;

// Allocates the buffers of `plan` (engine/engine_memory_plan.h) that the engine owns; its parts
// allocate theirs by the same rules.
void ZeroEngine::Impl::allocate() {
  const int G = num_groups();
  const ParamLayout& layout = self.model_.layout();
  const TrainableSet& trainable = self.model_.trainable();
  for (int g = 0; g < G; ++g) group_trains.push_back(trainable.group_trains(layout, g));
  lowest_backward_group = trainable.lowest_backward_group(layout);
  for (int g = 0; g < G; ++g) {
    if (half())
      work16.push_back(allocate_planned<uint16_t>(memory, plan, BufferRole::kWorkingParams, g));
    else
      work_f32.push_back(allocate_planned<float>(memory, plan, BufferRole::kWorkingParams, g));
    grads.push_back(allocate_planned<float>(memory, plan, BufferRole::kGradients, g));
    if (offload.optimizer_offloaded()) continue;  // master/m/v: OffloadOptimizer's store
    master.push_back(allocate_planned<float>(memory, plan, BufferRole::kMaster, g));
    adam_m.push_back(allocate_planned<float>(memory, plan, BufferRole::kAdamM, g));
    adam_v.push_back(allocate_planned<float>(memory, plan, BufferRole::kAdamV, g));
    if (offload.delay == 0) continue;
    delayed_work.push_back(allocate_planned<uint8_t>(memory, plan, BufferRole::kDelayedWorking, g));
    delayed_fresh.push_back(allocate_planned<uint8_t>(memory, plan, BufferRole::kDelayedFresh, g));
  }
  if (offload.optimizer_offloaded()) {
    std::vector<int64_t> own_sizes;
    std::vector<std::vector<DecaySegment>> segments;
    for (int g = 0; g < G; ++g) {
      own_sizes.push_back(trains(g) ? own_size(g) : 0);
      segments.push_back(trains(g) ? own_segments(g) : std::vector<DecaySegment>{});
      for (DecaySegment& s : segments.back()) s.begin -= own_begin(g), s.end -= own_begin(g);
    }
    offloader = std::make_unique<OffloadOptimizer>(
        offload, std::move(own_sizes), std::move(segments), precision, memory, host, *copier, be);
  }
  compute = allocate_planned<float>(memory, plan, BufferRole::kComputeUpcast);
  tied_compute = allocate_planned<float>(memory, plan, BufferRole::kTiedUpcast);
  tied_grads = allocate_planned<float>(memory, plan, BufferRole::kTiedGradients);
  // LoRA: a layer unit computes with its adapters, so the layer's own tensors stay frozen (one
  // gradient group per unit).
  for (int l = 0; l < self.model_.config().num_layers && layout.adapter_group(0) >= 0; ++l)
    ZT_CHECK(!trains(layout.layer_group(l)),
             "LoRA: layer " + std::to_string(l) + "'s own tensors must stay frozen");
  adapter_compute = allocate_planned<float>(memory, plan, BufferRole::kAdapterUpcast);
  int64_t max_trained_padded = 0;  // gradients exist for trained groups only
  for (int g = 0; g < G; ++g)
    if (trains(g)) max_trained_padded = std::max(max_trained_padded, part(g).padded);
  const int slots = zero.overlap_comm ? 2 : 1;
  reducer = std::make_unique<GradReducer>(be, comm, memory, intervals, max_trained_padded,
                                          zero.reduce_bucket_size, slots,
                                          /*own_buckets=*/reduces_each_micro_batch(),
                                          /*reduce_scatter=*/traits.shard_optimizer || invariant(),
                                          invariant() ? SumOrder::kRankTree : SumOrder::kLibrary);
  group_sumsq = allocate_planned<double>(memory, plan, BufferRole::kGroupSumsq);
  if (invariant()) {
    int64_t shards = 0, blocks = 0;
    for (int g = 0; g < G; ++g) {  // frozen groups have no leaf range and no norm blocks
      shard_offset.push_back(shards);
      norm_block_offset.push_back(blocks);
      if (!trains(g)) continue;
      shards += part(g).shard;
      blocks += part(g).padded / ZeroConfig::kInvariantNormBlock;
    }
    leaf_elements = shards;
    norm_blocks = allocate_planned<double>(memory, plan, BufferRole::kNormBlocks);
  }
  if (traits.shard_parameters) {
    std::vector<const void*> shards;
    for (int g = 0; g < G; ++g) shards.push_back(work(g));
    gatherer = std::make_unique<ParamGatherer>(comm, memory, intervals, self.parts_, work_dtype(),
                                               zero, std::move(shards),
                                               offload.param_offloaded() ? copier.get() : nullptr);
  }
  staged.resize(static_cast<size_t>(G));
}

// The working params as the ops read them (see upcasts_params).
ConstTensorView ZeroEngine::Impl::as_compute(const void* w, int g, float* upcast) {
  if (!half()) return static_cast<const float*>(w);
  if (!upcasts_params()) return {w, work_dtype()};
  be.widen_from_16bit(work_dtype(), upcast, static_cast<const uint16_t*>(w), part(g).numel);
  return upcast;
}

// Working params of the group at schedule position `use` (stage 3 gathers them).
ConstTensorView ZeroEngine::Impl::params_for(int g, size_t use, float* upcast) {
  return as_compute(traits.shard_parameters ? gatherer->acquire(use) : work(g), g, upcast);
}

ZeroEngine::Impl::GroupUse ZeroEngine::Impl::acquire_use(int unit, size_t use) {
  const ParamLayout& layout = self.model_.layout();
  GroupUse u;
  u.use = use;
  u.next = use + 1;
  u.params = params_for(unit, use, compute.data());
  if (tied() && unit == layout.head_group())
    u.embedding = params_for(0, u.next++, tied_compute.data());
  if (unit > layout.embed_group() && unit < layout.head_group()) {
    u.adapter_group = layout.adapter_group(unit - 1);
    if (u.adapter_group >= 0)
      u.adapters = params_for(u.adapter_group, u.next++, adapter_compute.data());
  }
  return u;
}

void ZeroEngine::Impl::release_use(const GroupUse& u) {
  for (size_t i = u.use; i < u.next; ++i) release(i);
}

// Weight-decay segments of the own range, in group coordinates.
std::vector<DecaySegment> ZeroEngine::Impl::own_segments(int g) const {
  return decay_segments(self.model_.layout(), g, own_begin(g), own_size(g),
                        self.model_.trainable());
}

// The fp32 master of the own range (offload: made resident until the store is flushed).
const float* ZeroEngine::Impl::resident_master(int g) {
  return offloader ? offloader->store().resident(g).master : master[static_cast<size_t>(g)].data();
}

void ZeroEngine::Impl::release(size_t use) {
  if (traits.shard_parameters) gatherer->release_after(use);
}

void ZeroEngine::Impl::run_micro_batch(int64_t micro_batch, bool last, float grad_scale,
                                       bool document_masks) {
  LlamaModel& model = self.model_;
  if (traits.shard_parameters)
    gatherer->begin_pass(
        Stage3Residency::flatten(Stage3Residency::unit_pass(model.layout(), lowest_backward())));
  // Each pass between its phase marks; the backward's also lands the reductions and the losses.
  const auto timed = [&](bool backward, const MicroBatchGraphs::Pass& pass) {
    const PhaseTimeline::Mark phase = intervals.begin();
    set_phase(comm.step(), backward ? "backward" : "forward");
    pass();
    if (backward) finish_backward(micro_batch, last);
    intervals.end(backward ? StepIntervals::kBackward : StepIntervals::kForward, phase);
  };
  const auto forward = [&] { forward_units(grad_scale); };
  const auto backward = [&] { backward_units(micro_batch, last); };
  if (graphs) {  // op by op where they are off, counted in their report
    graphs->run(MicroBatchGraphs::Key{micro_batch == 0}, document_masks, forward, backward, timed);
    return;
  }
  timed(false, forward);
  timed(true, backward);
}

void ZeroEngine::Impl::forward_units(float grad_scale) {
  LlamaModel& model = self.model_;
  size_t use = 0;  // position in the pass (Stage3Residency::unit_pass)
  for (int unit = 0; unit < model.layout().num_compute_units(); ++unit) {
    const GroupUse u = acquire_use(unit, use);
    model.forward_group(unit, u.params, true, grad_scale, u.embedding, u.adapters);
    release_use(u);
    use = u.next;
  }
  backward_use = use;
}

// While micro-batches are recorded (records_micro_batches) no reduction starts here: the pass is
// recorded, and finish_backward starts them after it.
void ZeroEngine::Impl::backward_units(int64_t micro_batch, bool last) {
  LlamaModel& model = self.model_;
  const int U = model.layout().num_compute_units();
  size_t use = backward_use;
  // Tied embeddings: the head's backward adds the embedding's gradient into tied_grads, the
  // embedding's backward adds its own, then it is reduced (stages 2/3) or accumulated (0/1).
  float* embedding_grads = nullptr;
  if (tied() && trains(0)) {
    embedding_grads = tied_grads.data();
    be.zero(embedding_grads, part(0).padded);
  }
  // No backward below the lowest unit that trains (frozen parameters: nothing needs it). A unit's
  // gradient group g is its own group, or a layer's LoRA adapter group (the layer is frozen).
  for (int unit = U - 1; unit >= lowest_backward(); --unit) {
    const GroupUse u = acquire_use(unit, use);
    const bool adapters_train = u.adapter_group >= 0 && trains(u.adapter_group);
    const int g = adapters_train ? u.adapter_group : unit;
    const GroupPartition& p = part(g);
    const ConstTensorView params = u.params;
    float* full_grads = grads[static_cast<size_t>(g)].data();
    // This unit's backward, its gradient group's into `into`: added (+=), or (kAssign) written
    // over whatever the buffer held, the padding past the group's tensors zeroed here.
    auto backward = [&](float* into, GradWrite write) {
      model.backward_group(unit, params, adapters_train ? nullptr : into, u.embedding,
                           embedding_grads, u.adapters, adapters_train ? into : nullptr, write);
      if (into && write == GradWrite::kAssign && p.padded > p.numel)
        be.zero(into + p.numel, p.padded - p.numel);
    };
    if (!trains(g)) {  // only the input gradient (and, tied, the head's share of the embedding's)
      backward(nullptr, GradWrite::kAdd);
      release_use(u);
      use = u.next;
      continue;
    }
    // Optimizer offload: the final reduced shard goes to the host as soon as it lands.
    std::function<void()> landed;
    if (offloader && last && !invariant()) {
      const float* shard = own_grads(g);
      landed = [this, g, shard] { offloader->gradient_ready(g, shard); };
    }
    // No gradient buffer is zeroed for a step: the first micro-batch's backward overwrites the
    // accumulator (or its reduced shard lands by a store), each micro-batch's bucket is written
    // whole. Tied, the embedding's gradient collects the head's share first and is added to.
    const bool first = micro_batch == 0;
    const bool tied_embedding = tied() && g == 0;
    if (reduces_each_micro_batch()) {
      float* bucket = tied_embedding ? embedding_grads : reducer->acquire_bucket(p.padded);
      backward(bucket, tied_embedding ? GradWrite::kAdd : GradWrite::kAssign);
      if (invariant())  // this micro-batch's leaf of the tree (offload: land_invariant_gradients)
        reducer->start(GradReducer::Mode::kReduceScatterStore, bucket, p.padded,
                       leaf + shard_offset[static_cast<size_t>(g)]);
      else
        reducer->start(first ? GradReducer::Mode::kReduceScatterStore
                             : GradReducer::Mode::kReduceScatterAccumulate,
                       bucket, p.padded, full_grads, std::move(landed));
    } else {
      if (tied_embedding) {  // one addition per element after the first, as every other group's
        backward(embedding_grads, GradWrite::kAdd);
        if (first)
          dev.copy(full_grads, embedding_grads, static_cast<size_t>(p.padded) * sizeof(float));
        else
          be.add_inplace(full_grads, embedding_grads, p.padded);
      } else {
        backward(full_grads, first ? GradWrite::kAssign : GradWrite::kAdd);
      }
      if (last && !records_micro_batches()) start_reduction_after_last(g, std::move(landed));
    }
    release_use(u);
    use = u.next;
    if (records_micro_batches()) continue;
    if (zero.overlap_comm)
      reducer->poll();
    else
      reducer->drain_all();
  }
}

// Stages 0/1: the group's gradient, accumulated over the step's micro-batches, is reduced.
void ZeroEngine::Impl::start_reduction_after_last(int g, std::function<void()> landed) {
  float* full_grads = grads[static_cast<size_t>(g)].data();
  const int64_t padded = part(g).padded;
  if (traits.reduction == GradReduction::kAllReduceAfterLast)
    reducer->start(GradReducer::Mode::kAllReduce, full_grads, padded, nullptr);
  if (traits.reduction == GradReduction::kReduceScatterAfterLast)
    reducer->start(GradReducer::Mode::kReduceScatterStore, full_grads, padded, own_grads(g),
                   std::move(landed));
}

void ZeroEngine::Impl::finish_backward(int64_t micro_batch, bool last) {
  LlamaModel& model = self.model_;
  // Micro-batch graphs (stage 0, one rank, no offload): the reductions the backward would have
  // started, in its order, now that the recorded pass is queued.
  if (records_micro_batches() && last)
    for (int g = model.layout().num_compute_units() - 1; g >= lowest_backward(); --g)
      if (trains(g)) start_reduction_after_last(g, {});
  reducer->drain_all();
  // The head's backward wrote the losses (the fused linear + cross-entropy, LlamaModel).
  const int64_t M = model.tokens_per_micro_batch();
  dev.copy(step_losses.data() + micro_batch * M, model.token_losses(),
           static_cast<size_t>(M) * sizeof(float));
}

std::string ZeroEngine::Impl::why_no_graphs() const {
  const LlamaModel& model = self.model_;
  if (world > 1)
    return "graphs need one rank (at several the reductions overlap the backward; " +
           std::to_string(world) + " ranks here)";
  if (zero.stage != 0) return "graphs need ZeRO stage 0 (stage " + std::to_string(zero.stage) + ")";
  if (invariant()) return "graphs do not run world-invariant training";
  if (model.config().lora.enabled())
    return "graphs do not run LoRA (its dropout masks follow the batch's position)";
  if (model.checkpointing().on_host) return "graphs do not run cpu_checkpointing (its host copies)";
  return "";
}

void ZeroEngine::use_cuda_graphs() {
  impl_->graphs = std::make_unique<MicroBatchGraphs>(impl_->be, impl_->why_no_graphs());
}

const MicroBatchGraphs::Report* ZeroEngine::cuda_graphs_report() const {
  return impl_->graphs ? &impl_->graphs->report() : nullptr;
}

double ZeroEngine::Impl::step_loss_sum(int64_t micro_batches) {
  const int64_t M = self.model_.tokens_per_micro_batch();
  std::vector<float> losses(static_cast<size_t>(M * micro_batches));
  dev.to_host(losses.data(), step_losses.data(), losses.size() * sizeof(float));
  std::vector<double> sums(static_cast<size_t>(micro_batches));
  for (int64_t m = 0; m < micro_batches; ++m)
    sums[static_cast<size_t>(m)] = sum_token_losses(losses.data() + m * M, M);
  double total = 0.0;
  if (!invariant()) {
    for (double s : sums) total += s;
    host.all_reduce_sum_blocking(&total, 1);
    return total;
  }
  // Rank r's micro-batch m is global micro-batch m·N + r (docs/ARCHITECTURE.md §2).
  std::vector<double> all(sums.size() * static_cast<size_t>(world));
  host.all_gather_blocking(sums.data(), all.data(), sums.size());
  for (int64_t m = 0; m < micro_batches; ++m)
    for (int r = 0; r < world; ++r) total += all[static_cast<size_t>(r * micro_batches + m)];
  return total;
}

float* ZeroEngine::Impl::own_grads(int g) {
  if (grads_in_tree()) return micro_batch_sum->result() + shard_offset[static_cast<size_t>(g)];
  float* base = grads[static_cast<size_t>(g)].data();
  // A sharded optimizer over a full accumulator (stage 1): the own range inside it.
  return traits.shard_gradients ? base : base + own_begin(g);
}

double ZeroEngine::Impl::gradient_norm() {
  if (invariant()) return invariant_gradient_norm();
  const int G = num_groups();
  std::vector<SquaresSum> group_sums;
  for (int g = 0; g < G; ++g)
    if (trains(g)) group_sums.push_back({group_sumsq.data() + g, own_grads(g), own_size(g)});
  be.sum_squares_each(group_sums);
  std::vector<double> sums(static_cast<size_t>(G));
  dev.to_host(sums.data(), group_sumsq.data(), sums.size() * sizeof(double));
  double sumsq = 0.0;
  for (int g = 0; g < G; ++g)
    if (trains(g)) sumsq += sums[static_cast<size_t>(g)];
  if (traits.shard_optimizer) host.all_reduce_sum_blocking(&sumsq, 1);
  return std::sqrt(sumsq);
}

// Every block of the global flat index is summed by the one rank that holds it (stage 0: by
// every rank); the all-reduce then adds zeros to each block's sum, which is exact, and the sums
// are added in block order on every rank. Padding blocks are zero, so their number, which grows
// with N, changes nothing.
double ZeroEngine::Impl::invariant_gradient_norm() {
  const int64_t K = ZeroConfig::kInvariantNormBlock;
  std::vector<double> blocks(norm_blocks.size(), 0.0);
  dev.to_device(norm_blocks.data(), blocks.data(), blocks.size() * sizeof(double));
  for (int g = 0; g < num_groups(); ++g) {
    if (!trains(g)) continue;
    const int64_t begin = own_begin(g), n = traits.shard_optimizer ? part(g).shard : part(g).padded;
    be.block_sum_squares(norm_blocks.data() + norm_block_offset[static_cast<size_t>(g)] + begin / K,
                         own_grads(g), n, K);
  }
  if (traits.shard_optimizer) {
    CommHandle h = comm.all_reduce_sum(norm_blocks.data(), norm_blocks.size());
    intervals.time(StepIntervals::kCommWait, [&] { comm.device_wait(h); });
    comm.finish_device_waits();
  }
  dev.to_host(blocks.data(), norm_blocks.data(), blocks.size() * sizeof(double));
  double sumsq = 0.0;
  for (double s : blocks) sumsq += s;
  return std::sqrt(sumsq);
}

void ZeroEngine::Impl::land_invariant_gradients() {
  const float* sum = micro_batch_sum->result();
  for (int g = num_groups() - 1; g >= 0; --g) {
    if (!trains(g)) continue;
    if (!grads_in_tree()) {  // stage 0: every rank updates the whole group
      CommHandle h =
          comm.all_gather(sum + shard_offset[static_cast<size_t>(g)],
                          grads[static_cast<size_t>(g)].data(), static_cast<size_t>(part(g).shard));
      intervals.time(StepIntervals::kCommWait, [&] { comm.device_wait(h); });
    }
    if (offloader) offloader->gradient_ready(g, own_grads(g));
  }
}

StepStats ZeroEngine::train_step(const std::vector<const int32_t*>& inputs,
                                 const std::vector<const int32_t*>& targets, float lr, int64_t step,
                                 int64_t counted_targets,
                                 const std::vector<const int32_t*>& doc_starts) {
  ZT_CHECK(!inputs.empty() && inputs.size() == targets.size() &&
               (doc_starts.empty() || doc_starts.size() == inputs.size()),
           "train_step: bad micro-batches");
  Impl& I = *impl_;
  I.set_phase(step, "start");
  if (I.offloader) {
    I.offloader->store().flush();  // state staged for a checkpoint goes back to its store
  }
  // Offload traffic of this step: gradient shards down, updated params and (offload_param)
  // fetched shards up.
  I.d2h_at_step_start = I.copier->device_to_host_bytes();
  I.h2d_at_step_start = I.copier->host_to_device_bytes();
  I.intervals.reset();
  const int64_t accum = static_cast<int64_t>(inputs.size());
  StepStats stats;
  stats.tokens = model_.tokens_per_micro_batch() * accum * I.world;
  ZT_CHECK(counted_targets <= stats.tokens, "train_step: " + std::to_string(counted_targets) +
                                                " counted targets in a batch of " +
                                                std::to_string(stats.tokens) + " tokens");
  stats.loss_targets = counted_targets < 0 ? stats.tokens : counted_targets;
  // A global batch whose targets are all masked out has loss 0 and no loss gradient (the
  // optimizer still steps: weight decay and the moments' momentum move the weights).
  // fp16: the loss is multiplied by the loss scale before the backward (DeepSpeed's scaled loss).
  const double loss_scale = I.scaler ? I.scaler->scale() : 1.0;
  const float grad_scale =
      stats.loss_targets > 0
          ? static_cast<float>(loss_scale / static_cast<double>(stats.loss_targets))
          : 0.0f;
  const size_t loss_elements = static_cast<size_t>(model_.tokens_per_micro_batch() * accum);
  if (I.step_losses.size() != loss_elements)
    I.step_losses = TrackedBuffer<float>(I.memory, MemCategory::kCommBuffers, loss_elements);
  if (I.invariant()) {
    check_world_invariant_shape(I.world, accum);
    if (!I.micro_batch_sum || I.micro_batch_sum->leaves() != accum)
      I.micro_batch_sum = std::make_unique<PairwiseSum>(I.be, I.memory, I.leaf_elements, accum);
    I.micro_batch_sum->reset();
  }
  // Exact offload overlap: each group's host AdamW starts as its gradients land in the last
  // micro-batch; optimizer_step keeps or undoes it, and an error before then undoes it here.
  struct UndoOverlapOnError {
    OffloadOptimizer* offloader;
    ~UndoOverlapOnError() {
      if (!offloader) return;
      try {
        offloader->roll_back_overlap();  // nothing once optimizer_step settled it
      } catch (...) {                    // the error being thrown says more
      }
    }
  } undo_overlap{I.offloader.get()};
  if (I.offloader && I.offload.overlapped(step)) I.begin_offload_overlap(lr, step);
  // The global data order (docs/ARCHITECTURE.md §2): step s holds the windows [(s−1)·G, s·G) and
  // rank r's micro-batch m those from (m·N + r)·B; their first token keys LoRA's dropout masks.
  const int64_t B = model_.micro_batch(), T = model_.seq_len();
  const int64_t G = accum * I.world * B;
  for (int64_t m = 0; m < accum; ++m) {
    model_.set_batch(inputs[static_cast<size_t>(m)], targets[static_cast<size_t>(m)],
                     doc_starts.empty() ? nullptr : doc_starts[static_cast<size_t>(m)]);
    model_.set_batch_position(((step - 1) * G + (m * I.world + I.rank) * B) * T);
    model_.set_loss_gradient_scale(grad_scale);  // before the passes, which may be recorded
    if (I.invariant()) I.leaf = I.micro_batch_sum->next_leaf();
    I.run_micro_batch(m, m == accum - 1, grad_scale,
                      !doc_starts.empty() && doc_starts[static_cast<size_t>(m)] != nullptr);
    if (I.invariant()) I.micro_batch_sum->add_leaf();
  }
  if (I.invariant()) I.land_invariant_gradients();
  // Every reduction seen complete on the host (with the timeout report) before the first host
  // read of device results (the losses; then the gradient norms). On a GPU this is where the
  // host catches up with the queued backward kernels and the last reductions.
  I.comm.finish_device_waits();
  stats.loss = I.step_loss_sum(accum);
  if (stats.loss_targets > 0) stats.loss /= static_cast<double>(stats.loss_targets);
  // Every rank holds the same reduced loss and norm, so these stops are agreed (AgreedError).
  if (!std::isfinite(stats.loss) && !I.scaler)  // fp16: an overflow, skipped by the scaler
    throw AgreedError("the loss is " + std::to_string(stats.loss) + " at step " +
                      std::to_string(step) + "; training stopped before the update" +
                      learning_rate_hint(I.last_update_lr));
  I.optimizer_step(lr, step, stats);
  if (!stats.skipped) I.last_update_lr = lr;
  stats.offload_d2h_bytes = I.copier->device_to_host_bytes() - I.d2h_at_step_start;
  stats.offload_h2d_bytes = I.copier->host_to_device_bytes() - I.h2d_at_step_start;
  I.comm.finish_device_waits();  // the parameter all-gathers
  I.be.synchronize();  // the step's device work is done when it returns (honest step times)
  // Phase times as the device saw them. Collective waits lie inside forward/backward (stage 3
  // gathers, gradient reductions) or after the optimizer (stage 1/2 parameter all-gathers).
  stats.forward_s = I.intervals.total(StepIntervals::kForward);
  stats.backward_s = I.intervals.total(StepIntervals::kBackward);
  stats.optimizer_s = I.intervals.total(StepIntervals::kOptimizer);
  stats.comm_wait_s = I.intervals.total(StepIntervals::kCommWait);
  return stats;
}

const LossScaler* ZeroEngine::loss_scaler() const {
  return impl_->scaler.get();
}
int64_t ZeroEngine::skipped_steps() const {
  return impl_->skipped_steps;
}
void ZeroEngine::restore_loss_scaling(const LossScaler::State* state, int64_t skipped_steps) {
  ZT_CHECK(skipped_steps >= 0, "restore_loss_scaling: negative skipped steps");
  if (state && impl_->scaler) impl_->scaler->restore(*state);
  impl_->skipped_steps = skipped_steps;
}

const ZeroConfig& ZeroEngine::zero_config() const {
  return impl_->zero;
}
Precision ZeroEngine::precision() const {
  return impl_->precision;
}
Communicator& ZeroEngine::communicator() {
  return impl_->host;
}

double ZeroEngine::eval_loss_sum(const int32_t* inputs, const int32_t* targets,
                                 const int32_t* doc_start) {
  Impl& I = *impl_;
  apply_delayed_update();  // the eval sees the weights of every update so far
  const int U = model_.layout().num_compute_units();
  I.intervals.reset();  // the gathers' waits of an eval pass are nobody's step (bounded marks)
  model_.set_batch(inputs, targets, doc_start);
  if (I.gatherer) {
    // The forward half of a training pass (no unit's backward).
    I.gatherer->begin_pass(
        Stage3Residency::flatten(Stage3Residency::unit_pass(model_.layout(), U)));
  }
  size_t use = 0;
  for (int unit = 0; unit < U; ++unit) {
    const Impl::GroupUse u = I.acquire_use(unit, use);
    model_.forward_group(unit, u.params, false, 1.0f, u.embedding, u.adapters);
    I.release_use(u);
    use = u.next;
  }
  if (I.gatherer) I.gatherer->release_all();
  I.comm.finish_device_waits();
  double loss = model_.loss_sum();
  I.host.all_reduce_sum_blocking(&loss, 1);
  return loss;
}

}  // namespace zt
