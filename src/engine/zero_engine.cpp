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
       Communicator& c, Communicator& h, MemoryTracker& m)
      : self(e),
        zero(z),
        precision(p),
        optim(o),
        be(b),
        dev(b.device_memory()),
        comm(c),
        host(h),
        memory(m),
        world(c.world_size()),
        rank(c.rank()),
        copier(std::make_unique<DeviceMemoryCopier>(b.device_memory())) {}

  ZeroEngine& self;
  ZeroConfig zero;
  Precision precision;
  AdamWConfig optim;
  Backend& be;
  DeviceMemory& dev;   // where the buffers below live (host-pool ones excepted)
  Communicator& comm;  // data plane: device buffers
  Communicator& host;  // host buffers: scalars
  MemoryTracker& memory;
  int world, rank;
  OffloadConfig offload;
  std::unique_ptr<HostDeviceCopier> copier;
  std::unique_ptr<OffloadOptimizer> offloader;            // optimizer offload (cpu | nvme)
  uint64_t d2h_at_step_start = 0, h2d_at_step_start = 0;  // the copier's counters

  // Working params: stage 0-2 the full padded group, stage 3 the rank's shard.
  std::vector<TrackedBuffer<bf16_t>> work_bf16;
  std::vector<TrackedBuffer<float>> work_f32;
  // Optimizer state over the rank's own range (stage 0: the whole group).
  std::vector<TrackedBuffer<float>> master, adam_m, adam_v;
  // Gradients: stage 0/1 full padded accumulators, stage 2/3 fp32 shards.
  std::vector<TrackedBuffer<float>> grads;
  TrackedBuffer<float> compute;  // fp32 upcast of the group being computed (bf16 mode)
  // Host copies of optimizer shards handed out by optimizer_shard() (no optimizer offload).
  struct HostShard {
    std::vector<float> master, m, v;
    bool held = false;
  };
  std::vector<HostShard> staged;
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

  // Step and phase for both communicators' timeout reports.
  void set_phase(int64_t step, const char* phase) {
    comm.set_context(step, phase);
    if (&host != &comm) host.set_context(step, phase);
  }
  void allocate();
  void fill(const GroupSource& source);
  void put_working(int g, int64_t offset, const float* host_values, int64_t n);
  void master_to_working(int g);
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
                       ActivationCheckpointing ac, const OffloadConfig& offload,
                       Communicator* host_comm)
    : model_(model, backend, memory, micro_batch, seq_len, ac),
      impl_(std::make_unique<Impl>(*this, zero, precision, optim, backend, comm,
                                   host_comm ? *host_comm : comm, memory)) {
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
        offload, std::move(own_sizes), std::move(segments), precision, memory, host, *copier);
  }
  if (bf16())
    compute =
        TrackedBuffer<float>(memory, MemCategory::kCommBuffers, static_cast<size_t>(max_padded));
  const int slots = zero.overlap_comm ? 2 : 1;
  reducer =
      std::make_unique<GradReducer>(be, comm, memory, max_padded, zero.reduce_bucket_size, slots,
                                    /*own_buckets=*/zero.stage >= 2,
                                    /*reduce_scatter=*/zero.stage >= 1);
  if (zero.stage == 3) {
    std::vector<const void*> shards;
    for (int g = 0; g < G; ++g) shards.push_back(work(g));
    gatherer = std::make_unique<ParamGatherer>(comm, memory, self.parts_, work_dtype(), zero,
                                               std::move(shards),
                                               offload.param_offloaded() ? copier.get() : nullptr);
  }
  staged.resize(static_cast<size_t>(G));
}

// Fills working params and fp32 masters from `source`; each rank produces only what it holds,
// on the host, and copies it to where it lives.
void ZeroEngine::Impl::fill(const GroupSource& source) {
  const ParamLayout& layout = self.model_.layout();
  for (int g = 0; g < num_groups(); ++g) {
    const GroupPartition& p = part(g);
    std::vector<float> own(static_cast<size_t>(own_size(g)));
    produce_group_range(layout, g, own_begin(g), own_size(g), source, own.data());
    if (offloader)
      offloader->initialize(g, own.data());
    else
      dev.to_device(master[static_cast<size_t>(g)].data(), own.data(), own.size() * sizeof(float));
    if (zero.stage == 3) {  // working shard = master shard
      put_working(g, 0, own.data(), p.shard);
      continue;
    }
    // Stages 0-2 hold the full working group (stage 0's own range is the group).
    std::vector<float> full(static_cast<size_t>(p.padded));
    if (zero.stage == 0)
      std::copy(own.begin(), own.end(), full.begin());
    else
      produce_group_range(layout, g, 0, p.padded, source, full.data());
    put_working(g, 0, full.data(), p.padded);
  }
}

// Working params [offset, offset+n) of group g := host fp32 values (rounded to bf16 in bf16 mode,
// the same rounding as Backend::to_bf16).
void ZeroEngine::Impl::put_working(int g, int64_t offset, const float* host_values, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * work_elem();
  auto* dst = static_cast<uint8_t*>(work(g)) + static_cast<size_t>(offset) * work_elem();
  std::vector<bf16_t> rounded;
  const void* src = host_values;
  if (bf16()) {
    rounded.resize(static_cast<size_t>(n));
    floats_to_bf16(host_values, rounded.data(), rounded.size());
    src = rounded.data();
  }
  if (offload.param_offloaded())
    std::memcpy(dst, src, bytes);  // stage-3 shards in the host pool
  else
    dev.to_device(dst, src, bytes);
}

// Working params of the own range := the fp32 masters (bf16-rounded in bf16 mode).
void ZeroEngine::Impl::master_to_working(int g) {
  const int64_t off = zero.stage == 3 ? 0 : own_begin(g), n = own_size(g);
  if (offloader) {  // masters on the host
    put_working(g, off, offloader->store().resident(g).master, n);
    return;
  }
  const float* m = master[static_cast<size_t>(g)].data();
  if (offload.param_offloaded()) {  // device masters, host working shards
    std::vector<float> host_master(static_cast<size_t>(n));
    dev.to_host(host_master.data(), m, host_master.size() * sizeof(float));
    put_working(g, off, host_master.data(), n);
  } else if (bf16()) {
    be.to_bf16(work_bf16[static_cast<size_t>(g)].data() + off, m, n);
  } else {
    dev.copy(work_f32[static_cast<size_t>(g)].data() + off, m,
             static_cast<size_t>(n) * sizeof(float));
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
  set_phase(comm.step(), "forward");
  for (int g = 0; g < G; ++g) {
    model.forward_group(g, params_for(g, static_cast<size_t>(g)), true, grad_scale);
    release(static_cast<size_t>(g));
  }
  stats.loss += model.loss_sum();
  stats.forward_s += seconds_since(t0);
  t0 = Clock::now();
  set_phase(comm.step(), "backward");
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
  set_phase(step, "optimizer");
  const int G = num_groups();
  // Own gradient range of group g (stage 1 keeps it inside the full accumulator).
  auto own_grads = [&](int g) {
    float* base = grads[static_cast<size_t>(g)].data();
    return zero.stage == 1 ? base + own_begin(g) : base;
  };
  double sumsq = 0.0;
  for (int g = 0; g < G; ++g) sumsq += be.sum_squares(own_grads(g), own_size(g));
  if (zero.stage > 0) host.all_reduce_sum_blocking(&sumsq, 1);
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
    stats.nvme_read_bytes = after.nvme_read - before.nvme_read;
    stats.nvme_write_bytes = after.nvme_written - before.nvme_written;
    stats.nvme_resident_bytes = after.nvme_resident;
  }
  // offload_param without optimizer offload: the update lands in a device tile, then the host.
  TrackedBuffer<uint8_t> device_out;
  for (int g = 0; g < G && !offloader; ++g) {
    const int64_t begin = own_begin(g);
    const size_t out_bytes = static_cast<size_t>(own_size(g)) * work_elem();
    if (offload.param_offloaded() && device_out.size() < out_bytes)
      device_out = TrackedBuffer<uint8_t>(memory, MemCategory::kCommBuffers, out_bytes);
    uint8_t* out_base = offload.param_offloaded() ? device_out.data() : work_out(g);
    for (const DecaySegment& s : own_segments(g)) {
      const int64_t i = s.begin - begin;
      h.weight_decay = s.decay ? optim.weight_decay : 0.0f;
      uint8_t* out = out_base + static_cast<size_t>(i) * work_elem();
      be.adamw(master[static_cast<size_t>(g)].data() + i, adam_m[static_cast<size_t>(g)].data() + i,
               adam_v[static_cast<size_t>(g)].data() + i, own_grads(g) + i,
               bf16() ? reinterpret_cast<bf16_t*>(out) : nullptr,
               bf16() ? nullptr : reinterpret_cast<float*>(out), s.end - s.begin, h);
    }
    if (offload.param_offloaded()) {
      copier->device_to_host(work_out(g), device_out.data(), out_bytes);
      copier->synchronize();
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
  set_phase(comm.step(), "param all-gather");
  const size_t es = work_elem();
  const int64_t per_rank = std::max<int64_t>(1, zero.allgather_bucket_size / world);
  TrackedBuffer<uint8_t> staging;  // one chunk of every rank, when a group needs chunks
  for (int g = 0; g < num_groups(); ++g) {
    const GroupPartition& p = part(g);
    auto* base = static_cast<uint8_t*>(work(g));
    if (per_rank >= p.shard) {
      comm.all_gather(work_dtype(), base + rank * p.shard * es, base, static_cast<size_t>(p.shard))
          .wait();
      continue;
    }
    if (staging.size() == 0)
      staging = TrackedBuffer<uint8_t>(memory, MemCategory::kCommBuffers,
                                       static_cast<size_t>(per_rank * world) * es);
    for (int64_t c0 = 0; c0 < p.shard; c0 += per_rank) {
      const int64_t len = std::min(per_rank, p.shard - c0);
      comm.all_gather(work_dtype(), base + (rank * p.shard + c0) * es, staging.data(),
                      static_cast<size_t>(len))
          .wait();
      for (int r = 0; r < world; ++r)
        dev.copy(base + (r * p.shard + c0) * es, staging.data() + r * len * es,
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
  I.set_phase(step, "start");
  if (I.offloader) {
    I.offloader->store().flush();  // state staged for a checkpoint goes back to its store
  }
  // Offload traffic of this step: gradient shards down, updated params and (offload_param)
  // fetched shards up.
  I.d2h_at_step_start = I.copier->device_to_host_bytes();
  I.h2d_at_step_start = I.copier->host_to_device_bytes();
  for (auto& g : I.grads) I.be.zero(g.data(), static_cast<int64_t>(g.size()));
  const int64_t accum = static_cast<int64_t>(inputs.size());
  StepStats stats;
  stats.tokens = model_.tokens_per_micro_batch() * accum * I.world;
  const float grad_scale = 1.0f / static_cast<float>(stats.tokens);
  if (I.gatherer) I.gatherer->reset_wait_seconds();
  for (int64_t m = 0; m < accum; ++m) {
    model_.set_batch(inputs[static_cast<size_t>(m)], targets[static_cast<size_t>(m)]);
    I.run_micro_batch(m == accum - 1, grad_scale, stats);
  }
  I.host.all_reduce_sum_blocking(&stats.loss, 1);
  stats.loss /= static_cast<double>(stats.tokens);
  ZT_CHECK(std::isfinite(stats.loss),
           "loss is " + std::to_string(stats.loss) + " at step " + std::to_string(step));
  I.optimizer_step(lr, step, stats);
  stats.offload_d2h_bytes = I.copier->device_to_host_bytes() - I.d2h_at_step_start;
  stats.offload_h2d_bytes = I.copier->host_to_device_bytes() - I.h2d_at_step_start;
  I.be.synchronize();  // the step's device work is done when it returns (honest step times)
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
  Impl::HostShard& s = I.staged[i];
  const size_t n = static_cast<size_t>(I.own_size(g)), bytes = n * sizeof(float);
  if (!s.held) {
    s.master.resize(n);
    s.m.resize(n);
    s.v.resize(n);
    I.dev.to_host(s.master.data(), I.master[i].data(), bytes);
    I.dev.to_host(s.m.data(), I.adam_m[i].data(), bytes);
    I.dev.to_host(s.v.data(), I.adam_v[i].data(), bytes);
    s.held = true;
  }
  return {s.master.data(), s.m.data(), s.v.data(), I.own_begin(g), I.own_size(g)};
}

void ZeroEngine::release_optimizer_shard(int g, bool modified) {
  Impl& I = *impl_;
  if (I.offloader) {
    I.offloader->store().release(g, modified);
    return;
  }
  const size_t i = static_cast<size_t>(g);
  Impl::HostShard& s = I.staged[i];
  if (!s.held) return;
  if (modified) {
    const size_t bytes = s.master.size() * sizeof(float);
    I.dev.to_device(I.master[i].data(), s.master.data(), bytes);
    I.dev.to_device(I.adam_m[i].data(), s.m.data(), bytes);
    I.dev.to_device(I.adam_v[i].data(), s.v.data(), bytes);
  }
  s = Impl::HostShard{};
}

void ZeroEngine::refresh_working_params() {
  Impl& I = *impl_;
  if (I.offloader) I.offloader->store().flush();  // shards a caller modified and kept staged
  for (int g = 0; g < I.num_groups(); ++g) {
    I.master_to_working(g);
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
  return impl_->host;
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
  I.host.all_reduce_sum_blocking(&loss, 1);
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
    const DType dt = master ? DType::kFloat32 : I.work_dtype();
    const size_t es = dtype_size(dt);
    // What this rank holds: the masters (host with optimizer offload) or working params (host
    // with param offload); a shard at stages 1-3 (masters) or 3 (params), else the whole group.
    const void* mine = master ? static_cast<const void*>(I.resident_master(g)) : I.work(g);
    const bool on_host = master ? I.offloader != nullptr : I.offload.param_offloaded();
    const bool sharded = master ? I.zero.stage > 0 : I.zero.stage == 3;
    std::vector<uint8_t> full(root ? static_cast<size_t>(p.numel) * es : 0);
    if (!sharded) {
      if (root) I.dev.to_host(full.data(), mine, full.size());
    } else {
      // All-gathered on the device (a host-resident shard is uploaded), then to rank 0's host.
      TrackedBuffer<uint8_t> uploaded;
      const size_t shard_bytes = static_cast<size_t>(p.shard) * es;
      if (on_host) {
        uploaded = TrackedBuffer<uint8_t>(I.memory, MemCategory::kCommBuffers, shard_bytes);
        I.dev.to_device(uploaded.data(), mine, shard_bytes);
        mine = uploaded.data();
      }
      TrackedBuffer<uint8_t> gathered(I.memory, MemCategory::kCommBuffers,
                                      static_cast<size_t>(p.padded) * es);
      I.comm.all_gather(dt, mine, gathered.data(), static_cast<size_t>(p.shard)).wait();
      if (root) I.dev.to_host(full.data(), gathered.data(), full.size());
    }
    if (master) release_optimizer_shard(g, /*modified=*/false);
    if (!root) continue;
    std::vector<bf16_t> as_bf16;
    for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      const uint8_t* at = full.data() + static_cast<size_t>(t.offset) * es;
      if (master || dt == DType::kBf16) {
        fn(t, at);
      } else {  // fp32 working params, exported as bf16
        as_bf16.resize(static_cast<size_t>(t.numel));
        floats_to_bf16(reinterpret_cast<const float*>(at), as_bf16.data(), as_bf16.size());
        fn(t, as_bf16.data());
      }
    }
  }
  if (I.offloader) I.offloader->store().flush();
  if (!root) {
    for (const TensorInfo& t : layout.tensors()) fn(t, nullptr);
  }
}

}  // namespace zt
