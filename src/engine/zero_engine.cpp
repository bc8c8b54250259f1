#include "engine/zero_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/decay_segments.h"
#include "engine/grad_reducer.h"
#include "engine/host_device_copier.h"
#include "engine/offload_optimizer.h"
#include "engine/param_gatherer.h"
#include "io/model_dir.h"
#include "model/init.h"
#include "util/error.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A source of a group's fp32 values over [begin, begin+count) of its flat (unpadded) range;
// padding beyond numel is zero.
using GroupSource = std::function<void(const TensorInfo&, int64_t begin, int64_t count, float*)>;

void produce_group_range(const ParamLayout& layout, int g, int64_t begin, int64_t count,
                         const GroupSource& source, float* out) {
  std::fill(out, out + count, 0.0f);
  for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
    const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
    const int64_t lo = std::max(begin, t.offset), hi = std::min(begin + count, t.offset + t.numel);
    if (lo < hi) source(t, lo - t.offset, hi - lo, out + (lo - begin));
  }
}

}  // namespace

struct ZeroEngine::Impl {
  Impl(ZeroEngine& e, const ZeroConfig& z, Precision p, const AdamWConfig& o, Backend& b,
       Communicator& c, MemoryTracker& m)
      : self(e),
        zero(z),
        precision(p),
        optim(o),
        be(b),
        comm(c),
        memory(m),
        world(c.world_size()),
        rank(c.rank()) {}

  ZeroEngine& self;
  ZeroConfig zero;
  Precision precision;
  AdamWConfig optim;
  Backend& be;
  Communicator& comm;
  MemoryTracker& memory;
  int world, rank;
  OffloadConfig offload;
  std::unique_ptr<HostDeviceCopier> copier = std::make_unique<CpuHostDeviceCopier>();
  std::unique_ptr<OffloadOptimizer> offloader;  // optimizer offload (cpu | nvme)
  uint64_t d2h_at_step_start = 0;

  // Working params: stage 0-2 the full padded group, stage 3 the rank's shard.
  std::vector<TrackedBuffer<bf16_t>> work_bf16;
  std::vector<TrackedBuffer<float>> work_f32;
  // Optimizer state over the rank's own range (stage 0: the whole group).
  std::vector<TrackedBuffer<float>> master, adam_m, adam_v;
  // Gradients: stage 0/1 full padded accumulators, stage 2/3 fp32 shards.
  std::vector<TrackedBuffer<float>> grads;
  TrackedBuffer<float> compute;  // fp32 upcast of the group being computed (bf16 mode)
  std::unique_ptr<GradReducer> reducer;
  std::unique_ptr<ParamGatherer> gatherer;

  const GroupPartition& part(int g) const { return self.parts_[static_cast<size_t>(g)]; }
  int num_groups() const { return static_cast<int>(self.parts_.size()); }
  bool bf16() const { return precision == Precision::kBf16; }
  DType work_dtype() const { return bf16() ? DType::kBf16 : DType::kFloat32; }
  size_t work_elem() const { return bf16() ? sizeof(bf16_t) : sizeof(float); }
  void* work(int g) {
    return bf16() ? static_cast<void*>(work_bf16[static_cast<size_t>(g)].data())
                  : static_cast<void*>(work_f32[static_cast<size_t>(g)].data());
  }
  // Own range of the optimizer state, in group coordinates.
  int64_t own_begin(int g) const { return zero.stage == 0 ? 0 : rank * part(g).shard; }
  int64_t own_size(int g) const { return zero.stage == 0 ? part(g).numel : part(g).shard; }

  void allocate();
  void fill(const GroupSource& source);
  const float* as_compute(const void* w, int g);
  const float* params_for(int g, size_t use);
  std::vector<DecaySegment> own_segments(int g) const;
  const float* resident_master(int g);
  void release(size_t use);
  void run_micro_batch(bool last, float grad_scale, StepStats& stats);
  void optimizer_step(float lr, int64_t step, StepStats& stats);
  void gather_updated_params();
};

ZeroEngine::ZeroEngine(const ModelConfig& model, const ZeroConfig& zero, Precision precision,
                       const AdamWConfig& optim, Backend& backend, Communicator& comm,
                       MemoryTracker& memory, int64_t micro_batch, int64_t seq_len,
                       ActivationCheckpointing ac, const OffloadConfig& offload)
    : model_(model, backend, memory, micro_batch, seq_len, ac),
      impl_(std::make_unique<Impl>(*this, zero, precision, optim, backend, comm, memory)) {
  zero.validate();
  offload.validate(zero.stage);
  impl_->offload = offload;
  const int64_t N = comm.world_size();
  for (const GroupInfo& g : model_.layout().groups()) {
    GroupPartition p;
    p.numel = g.numel;
    p.shard = (g.numel + N - 1) / N;
    p.padded = p.shard * N;
    parts_.push_back(p);
  }
  impl_->allocate();
}

ZeroEngine::~ZeroEngine() = default;

void ZeroEngine::Impl::allocate() {
  const int G = num_groups();
  int64_t max_padded = 0;
  for (int g = 0; g < G; ++g) max_padded = std::max(max_padded, part(g).padded);
  for (int g = 0; g < G; ++g) {
    const GroupPartition& p = part(g);
    const size_t work_n = static_cast<size_t>(zero.stage == 3 ? p.shard : p.padded);
    // offload_param: the stage-3 working shards live in the host pool.
    const MemCategory work_cat =
        offload.param_offloaded() ? MemCategory::kHostOffload : MemCategory::kParams;
    if (bf16())
      work_bf16.emplace_back(memory, work_cat, work_n);
    else
      work_f32.emplace_back(memory, work_cat, work_n);
    grads.emplace_back(memory, MemCategory::kGrads,
                       static_cast<size_t>(zero.stage <= 1 ? p.padded : p.shard));
    if (offload.optimizer_offloaded()) continue;  // master/m/v: OffloadOptimizer's store
    const size_t own = static_cast<size_t>(own_size(g));
    master.emplace_back(memory, MemCategory::kOptimizer, own);
    adam_m.emplace_back(memory, MemCategory::kOptimizer, own);
    adam_v.emplace_back(memory, MemCategory::kOptimizer, own);
  }
  if (offload.optimizer_offloaded()) {
    std::vector<int64_t> own_sizes;
    std::vector<std::vector<DecaySegment>> segments;
    for (int g = 0; g < G; ++g) {
      own_sizes.push_back(own_size(g));
      segments.push_back(own_segments(g));
      for (DecaySegment& s : segments.back()) s.begin -= own_begin(g), s.end -= own_begin(g);
    }
    offloader = std::make_unique<OffloadOptimizer>(
        offload, std::move(own_sizes), std::move(segments), precision, memory, comm, *copier);
  }
  if (bf16())
    compute =
        TrackedBuffer<float>(memory, MemCategory::kCommBuffers, static_cast<size_t>(max_padded));
  const int slots = zero.overlap_comm ? 2 : 1;
  reducer = std::make_unique<GradReducer>(comm, memory, max_padded, zero.reduce_bucket_size, slots,
                                          /*own_buckets=*/zero.stage >= 2,
                                          /*reduce_scatter=*/zero.stage >= 1);
  if (zero.stage == 3) {
    std::vector<const void*> shards;
    for (int g = 0; g < G; ++g) shards.push_back(work(g));
    gatherer = std::make_unique<ParamGatherer>(comm, memory, self.parts_, work_dtype(), zero,
                                               std::move(shards),
                                               offload.param_offloaded() ? copier.get() : nullptr);
  }
}

// Fills working params and fp32 masters from `source`; each rank produces only what it holds.
void ZeroEngine::Impl::fill(const GroupSource& source) {
  const ParamLayout& layout = self.model_.layout();
  for (int g = 0; g < num_groups(); ++g) {
    const GroupPartition& p = part(g);
    TrackedBuffer<float> offload_master;  // optimizer offload: handed to the store below
    if (offloader)
      offload_master =
          TrackedBuffer<float>(memory, MemCategory::kCommBuffers, static_cast<size_t>(own_size(g)));
    float* m = offloader ? offload_master.data() : master[static_cast<size_t>(g)].data();
    produce_group_range(layout, g, own_begin(g), own_size(g), source, m);
    if (offloader) offloader->initialize(g, m);
    if (zero.stage == 3) {  // working shard = master shard
      if (bf16())
        be.to_bf16(work_bf16[static_cast<size_t>(g)].data(), m, p.shard);
      else
        std::memcpy(work_f32[static_cast<size_t>(g)].data(), m, static_cast<size_t>(p.shard) * 4);
      continue;
    }
    // Stages 0-2 hold the full working group.
    TrackedBuffer<float> full(memory, MemCategory::kCommBuffers, static_cast<size_t>(p.padded));
    if (zero.stage == 0)
      std::memcpy(full.data(), m, static_cast<size_t>(p.numel) * 4);
    else
      produce_group_range(layout, g, 0, p.padded, source, full.data());
    if (bf16())
      be.to_bf16(work_bf16[static_cast<size_t>(g)].data(), full.data(), p.padded);
    else
      std::memcpy(work_f32[static_cast<size_t>(g)].data(), full.data(),
                  static_cast<size_t>(p.padded) * 4);
  }
}

void ZeroEngine::init_from_seed(uint64_t seed) {
  const ModelConfig& c = model_.config();
  impl_->fill([&](const TensorInfo& t, int64_t b, int64_t n, float* out) {
    init_tensor_range(c, t, seed, b, n, out);
  });
}

void ZeroEngine::load_from(ModelDirReader& reader) {
  ZT_CHECK(reader.config() == model_.config(),
           "model directory '" + reader.dir() + "' does not match the configured model");
  impl_->fill([&](const TensorInfo& t, int64_t b, int64_t n, float* out) {
    reader.read_tensor_range_f32(t.name, b, n, out);
  });
}

const float* ZeroEngine::Impl::as_compute(const void* w, int g) {
  if (!bf16()) return static_cast<const float*>(w);
  be.from_bf16(compute.data(), static_cast<const bf16_t*>(w), part(g).numel);
  return compute.data();
}

// Working params of the group at schedule position `use` (stage 3 gathers them).
const float* ZeroEngine::Impl::params_for(int g, size_t use) {
  if (zero.stage == 3) return as_compute(gatherer->acquire(use), g);
  return as_compute(work(g), g);
}

// Weight-decay segments of the own range, in group coordinates.
std::vector<DecaySegment> ZeroEngine::Impl::own_segments(int g) const {
  return decay_segments(self.model_.layout(), g, own_begin(g), own_size(g));
}

// The fp32 master of the own range (offload: made resident until the store is flushed).
const float* ZeroEngine::Impl::resident_master(int g) {
  return offloader ? offloader->store().resident(g).master : master[static_cast<size_t>(g)].data();
}

void ZeroEngine::Impl::release(size_t use) {
  if (zero.stage == 3) gatherer->release_after(use);
}

void ZeroEngine::Impl::run_micro_batch(bool last, float grad_scale, StepStats& stats) {
  LlamaModel& model = self.model_;
  const int G = num_groups();
  if (zero.stage == 3) {
    std::vector<int> uses;
    for (int g = 0; g < G; ++g) uses.push_back(g);
    for (int g = G - 1; g >= 0; --g) uses.push_back(g);
    gatherer->begin_pass(std::move(uses));
  }
  auto t0 = Clock::now();
  comm.set_context(comm.step(), "forward");
  for (int g = 0; g < G; ++g) {
    model.forward_group(g, params_for(g, static_cast<size_t>(g)), true, grad_scale);
    release(static_cast<size_t>(g));
  }
  stats.loss += model.loss_sum();
  stats.forward_s += seconds_since(t0);
  t0 = Clock::now();
  comm.set_context(comm.step(), "backward");
  for (int g = G - 1; g >= 0; --g) {
    const size_t use = static_cast<size_t>(2 * G - 1 - g);
    const GroupPartition& p = part(g);
    const float* params = params_for(g, use);
    float* full_grads = grads[static_cast<size_t>(g)].data();
    // Optimizer offload: the final reduced shard goes to the host as soon as it lands.
    std::function<void()> landed;
    if (offloader && last) {
      const float* shard = zero.stage == 1 ? full_grads + rank * p.shard : full_grads;
      landed = [this, g, shard] { offloader->gradient_ready(g, shard); };
    }
    if (zero.stage >= 2) {
      float* bucket = reducer->acquire_bucket(p.padded, true);
      model.backward_group(g, params, bucket);
      reducer->start(GradReducer::Mode::kReduceScatterAccumulate, bucket, p.padded, full_grads,
                     std::move(landed));
    } else {
      model.backward_group(g, params, full_grads);
      if (last && zero.stage == 0)
        reducer->start(GradReducer::Mode::kAllReduce, full_grads, p.padded, nullptr);
      if (last && zero.stage == 1)
        reducer->start(GradReducer::Mode::kReduceScatterStore, full_grads, p.padded,
                       full_grads + rank * p.shard, std::move(landed));
    }
    release(use);
    if (zero.overlap_comm)
      reducer->poll();
    else
      stats.comm_wait_s += reducer->drain_all();
  }
  stats.comm_wait_s += reducer->drain_all();
  stats.backward_s += seconds_since(t0);
}

void ZeroEngine::Impl::optimizer_step(float lr, int64_t step, StepStats& stats) {
  const auto t0 = Clock::now();
  comm.set_context(step, "optimizer");
  const int G = num_groups();
  // Own gradient range of group g (stage 1 keeps it inside the full accumulator).
  auto own_grads = [&](int g) {
    float* base = grads[static_cast<size_t>(g)].data();
    return zero.stage == 1 ? base + own_begin(g) : base;
  };
  double sumsq = 0.0;
  for (int g = 0; g < G; ++g) sumsq += be.sum_squares(own_grads(g), own_size(g));
  if (zero.stage > 0) comm.all_reduce_sum_blocking(&sumsq, 1);
  stats.grad_norm = std::sqrt(sumsq);
  stats.clip_scale = (optim.clip > 0 && stats.grad_norm > optim.clip)
                         ? optim.clip / (stats.grad_norm + 1e-6)
                         : 1.0;
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = optim.beta1;
  h.beta2 = optim.beta2;
  h.eps = optim.eps;
  h.step = step;
  h.grad_scale = static_cast<float>(stats.clip_scale);
  // Output position of the own range inside the working buffer (stage 3 holds the shard).
  auto work_out = [&](int g) {
    const int64_t off = zero.stage == 3 ? 0 : own_begin(g);
    return static_cast<uint8_t*>(work(g)) + static_cast<size_t>(off) * work_elem();
  };
  if (offloader) {
    const OffloadTraffic before = offloader->traffic();
    offloader->step(h, optim.weight_decay, work_out);
    const OffloadTraffic after = offloader->traffic();
    stats.offload_h2d_bytes = after.host_to_device - before.host_to_device;
    stats.nvme_read_bytes = after.nvme_read - before.nvme_read;
    stats.nvme_write_bytes = after.nvme_written - before.nvme_written;
    stats.nvme_resident_bytes = after.nvme_resident;
    stats.offload_d2h_bytes = after.device_to_host - d2h_at_step_start;
  }
  for (int g = 0; g < G && !offloader; ++g) {
    const int64_t begin = own_begin(g);
    for (const DecaySegment& s : own_segments(g)) {
      const int64_t i = s.begin - begin;
      h.weight_decay = s.decay ? optim.weight_decay : 0.0f;
      uint8_t* out = work_out(g) + static_cast<size_t>(i) * work_elem();
      be.adamw(master[static_cast<size_t>(g)].data() + i, adam_m[static_cast<size_t>(g)].data() + i,
               adam_v[static_cast<size_t>(g)].data() + i, own_grads(g) + i,
               bf16() ? reinterpret_cast<bf16_t*>(out) : nullptr,
               bf16() ? nullptr : reinterpret_cast<float*>(out), s.end - s.begin, h);
    }
  }
  stats.optimizer_s += seconds_since(t0);
  if (zero.stage == 1 || zero.stage == 2) gather_updated_params();
  if (zero.stage == 3) gatherer->release_all();
}

// Stages 1/2: every rank updated its shard of the full working params; all-gather them, in
// chunks of at most allgather_bucket_size elements.
void ZeroEngine::Impl::gather_updated_params() {
  const auto t0 = Clock::now();
  comm.set_context(comm.step(), "param all-gather");
  const size_t es = work_elem();
  for (int g = 0; g < num_groups(); ++g) {
    const GroupPartition& p = part(g);
    auto* base = static_cast<uint8_t*>(work(g));
    const int64_t per_rank = std::max<int64_t>(1, zero.allgather_bucket_size / world);
    if (per_rank >= p.shard) {
      comm.all_gather(work_dtype(), base + rank * p.shard * es, base, static_cast<size_t>(p.shard))
          .wait();
      continue;
    }
    std::vector<uint8_t> staging(static_cast<size_t>(per_rank * world) * es);
    for (int64_t c0 = 0; c0 < p.shard; c0 += per_rank) {
      const int64_t len = std::min(per_rank, p.shard - c0);
      comm.all_gather(work_dtype(), base + (rank * p.shard + c0) * es, staging.data(),
                      static_cast<size_t>(len))
          .wait();
      for (int r = 0; r < world; ++r)
        std::memcpy(base + (r * p.shard + c0) * es, staging.data() + r * len * es,
                    static_cast<size_t>(len) * es);
    }
  }
  (void)t0;
}

StepStats ZeroEngine::train_step(const std::vector<const int32_t*>& inputs,
                                 const std::vector<const int32_t*>& targets, float lr,
                                 int64_t step) {
  ZT_CHECK(!inputs.empty() && inputs.size() == targets.size(), "train_step: bad micro-batches");
  Impl& I = *impl_;
  I.comm.set_context(step, "start");
  if (I.offloader) {
    I.offloader->store().flush();  // state staged for a checkpoint goes back to its store
    I.d2h_at_step_start = I.offloader->traffic().device_to_host;
  }
  for (auto& g : I.grads) std::memset(g.data(), 0, g.bytes());
  const int64_t accum = static_cast<int64_t>(inputs.size());
  StepStats stats;
  stats.tokens = model_.tokens_per_micro_batch() * accum * I.world;
  const float grad_scale = 1.0f / static_cast<float>(stats.tokens);
  if (I.gatherer) I.gatherer->reset_wait_seconds();
  for (int64_t m = 0; m < accum; ++m) {
    model_.set_batch(inputs[static_cast<size_t>(m)], targets[static_cast<size_t>(m)]);
    I.run_micro_batch(m == accum - 1, grad_scale, stats);
  }
  I.comm.all_reduce_sum_blocking(&stats.loss, 1);
  stats.loss /= static_cast<double>(stats.tokens);
  ZT_CHECK(std::isfinite(stats.loss),
           "loss is " + std::to_string(stats.loss) + " at step " + std::to_string(step));
  I.optimizer_step(lr, step, stats);
  if (I.gatherer) stats.comm_wait_s += I.gatherer->wait_seconds();
  return stats;
}

OptimizerShard ZeroEngine::optimizer_shard(int g) {
  Impl& I = *impl_;
  const size_t i = static_cast<size_t>(g);
  if (I.offloader) {
    OptimizerShard held = I.offloader->store().resident(g);
    held.begin = I.own_begin(g);
    return held;
  }
  return {I.master[i].data(), I.adam_m[i].data(), I.adam_v[i].data(), I.own_begin(g),
          I.own_size(g)};
}

void ZeroEngine::release_optimizer_shard(int g, bool modified) {
  if (impl_->offloader) impl_->offloader->store().release(g, modified);
}

void ZeroEngine::refresh_working_params() {
  Impl& I = *impl_;
  if (I.offloader) I.offloader->store().flush();  // shards a caller modified and kept staged
  for (int g = 0; g < I.num_groups(); ++g) {
    const int64_t off = I.zero.stage == 3 ? 0 : I.own_begin(g), n = I.own_size(g);
    const float* m = I.resident_master(g);
    if (I.bf16())
      I.be.to_bf16(I.work_bf16[static_cast<size_t>(g)].data() + off, m, n);
    else
      std::memcpy(I.work_f32[static_cast<size_t>(g)].data() + off, m, static_cast<size_t>(n) * 4);
    release_optimizer_shard(g, /*modified=*/false);
  }
  if (I.zero.stage == 1 || I.zero.stage == 2) I.gather_updated_params();
  if (I.gatherer) I.gatherer->release_all();
}

const ZeroConfig& ZeroEngine::zero_config() const {
  return impl_->zero;
}
Precision ZeroEngine::precision() const {
  return impl_->precision;
}
Communicator& ZeroEngine::communicator() {
  return impl_->comm;
}

double ZeroEngine::eval_loss_sum(const int32_t* inputs, const int32_t* targets) {
  Impl& I = *impl_;
  const int G = I.num_groups();
  model_.set_batch(inputs, targets);
  if (I.gatherer) {
    std::vector<int> uses;
    for (int g = 0; g < G; ++g) uses.push_back(g);
    I.gatherer->begin_pass(std::move(uses));
  }
  for (int g = 0; g < G; ++g) {
    model_.forward_group(g, I.params_for(g, static_cast<size_t>(g)), false, 1.0f);
    I.release(static_cast<size_t>(g));
  }
  if (I.gatherer) I.gatherer->release_all();
  double loss = model_.loss_sum();
  I.comm.all_reduce_sum_blocking(&loss, 1);
  return loss;
}

void ZeroEngine::for_each_full_tensor(
    bool master, const std::function<void(const TensorInfo&, const void*)>& fn) {
  Impl& I = *impl_;
  const ParamLayout& layout = model_.layout();
  const bool root = I.rank == 0;
  if (I.offloader) I.offloader->store().flush();  // shards a caller modified and kept staged
  for (int g = 0; g < I.num_groups(); ++g) {
    const GroupPartition& p = parts_[static_cast<size_t>(g)];
    std::vector<uint8_t> gathered;
    const void* full = nullptr;
    bool full_is_f32 = master || !I.bf16();
    if (master && I.zero.stage == 0) {
      full = I.resident_master(g);
    } else if (master || I.zero.stage == 3) {
      const DType dt = master ? DType::kFloat32 : I.work_dtype();
      const void* shard = master ? static_cast<const void*>(I.resident_master(g)) : I.work(g);
      gathered.resize(static_cast<size_t>(p.padded) * dtype_size(dt));
      I.comm.all_gather(dt, shard, gathered.data(), static_cast<size_t>(p.shard)).wait();
      release_optimizer_shard(g, /*modified=*/false);
      full = gathered.data();
    } else {
      full = I.work(g);
    }
    if (!root) continue;
    std::vector<bf16_t> as_bf16;
    for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      if (master) {
        fn(t, static_cast<const float*>(full) + t.offset);
      } else if (full_is_f32) {
        as_bf16.resize(static_cast<size_t>(t.numel));
        I.be.to_bf16(as_bf16.data(), static_cast<const float*>(full) + t.offset, t.numel);
        fn(t, as_bf16.data());
      } else {
        fn(t, static_cast<const bf16_t*>(full) + t.offset);
      }
    }
  }
  if (I.offloader) I.offloader->store().flush();
  if (!root) {
    for (const TensorInfo& t : layout.tensors()) fn(t, nullptr);
  }
}

}  // namespace zt
