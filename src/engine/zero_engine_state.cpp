// ZeroEngine: where parameters and optimizer state come from and go to — initialisation and
// loading (values built on the host, uploaded), checkpoint access (one group staged on the
// host at a time) and the full-tensor export (gathered on the device, downloaded to rank 0).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/zero_engine_impl.h"
#include "model/init.h"
#include "util/error.h"

namespace zt {

namespace {

void produce_group_range(const ParamLayout& layout, int g, int64_t begin, int64_t count,
                         const GroupSource& source, float* out) {
  std::fill(out, out + count, 0.0f);
  for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
    const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
    const int64_t lo = std::max(begin, t.offset), hi = std::min(begin + count, t.offset + t.numel);
    if (lo < hi) source(t, lo - t.offset, hi - lo, out + (lo - begin));
  }
}

// fp16 working params hold magnitudes below 65520 (larger ones round to infinity): a value beyond
// is refused, naming its tensor, before anything trains on an infinite weight.
void check_fits_fp16(const ParamLayout& layout, int g, int64_t begin,
                     const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(round_to_fp16(values[i])) || !std::isfinite(values[i])) continue;
    const int64_t at = begin + static_cast<int64_t>(i);
    for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      if (at >= t.offset && at < t.offset + t.numel)
        fail(t.name + " holds " + std::to_string(values[i]) + " at element " +
             std::to_string(at - t.offset) +
             ", beyond fp16's largest finite value 65504: --precision fp16 cannot hold this "
             "model's weights (use bf16)");
    }
  }
}

}  // namespace

// Fills working params and fp32 masters from `source`; each rank produces only what it holds,
// on the host (each value read once), and copies it to where it lives.
void ZeroEngine::Impl::fill(const GroupSource& source) {
  const ParamLayout& layout = self.model_.layout();
  for (int g = 0; g < num_groups(); ++g) {
    const GroupPartition& p = part(g);
    // Stages 0-2 hold the full working group, whose slice is the own range; stage 3 holds only
    // the own range (working shard = master shard).
    const bool full_group = !traits.shard_parameters;
    const int64_t begin = full_group ? 0 : own_begin(g), count = full_group ? p.padded : p.shard;
    std::vector<float> values(static_cast<size_t>(count));
    produce_group_range(layout, g, begin, count, source, values.data());
    if (work_dtype() == DType::kFloat16) check_fits_fp16(layout, g, begin, values);
    const float* own = values.data() + (own_begin(g) - begin);
    if (!trains(g)) {  // frozen: working params only
    } else if (offloader)
      offloader->initialize(g, own);
    else
      dev.to_device(master[static_cast<size_t>(g)].data(), own,
                    static_cast<size_t>(own_size(g)) * sizeof(float));
    put_working(g, 0, values.data(), count);
  }
}

// Working params [offset, offset+n) of group g := host fp32 values (rounded to bf16 or fp16 in
// those modes, the same rounding as Backend::to_bf16 / to_fp16).
void ZeroEngine::Impl::put_working(int g, int64_t offset, const float* host_values, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * work_elem();
  auto* dst = static_cast<uint8_t*>(work(g)) + static_cast<size_t>(offset) * work_elem();
  std::vector<uint16_t> rounded;
  const void* src = host_values;
  if (half()) {
    rounded.resize(static_cast<size_t>(n));
    round_16bit(work_dtype(), host_values, rounded.data(), rounded.size());
    src = rounded.data();
  }
  if (offload.param_offloaded())
    std::memcpy(dst, src, bytes);  // stage-3 shards in the host pool
  else
    dev.to_device(dst, src, bytes);
}

// Working params of the own range := the fp32 masters (rounded in bf16 and fp16 modes).
void ZeroEngine::Impl::master_to_working(int g) {
  if (!trains(g)) return;  // no master: the working params are the frozen values
  const int64_t off = traits.shard_parameters ? 0 : own_begin(g), n = own_size(g);
  if (offloader) {  // masters on the host
    put_working(g, off, offloader->store().resident(g).master, n);
    return;
  }
  const float* m = master[static_cast<size_t>(g)].data();
  if (offload.param_offloaded()) {  // device masters, host working shards
    std::vector<float> host_master(static_cast<size_t>(n));
    dev.to_host(host_master.data(), m, host_master.size() * sizeof(float));
    put_working(g, off, host_master.data(), n);
  } else if (half()) {
    be.round_to_16bit(work_dtype(), work16[static_cast<size_t>(g)].data() + off, m, n);
  } else {
    dev.copy(work_f32[static_cast<size_t>(g)].data() + off, m,
             static_cast<size_t>(n) * sizeof(float));
  }
}

TensorRangeReader ZeroEngine::as_working_values(TensorRangeReader read) const {
  const DType work = impl_->work_dtype();
  if (work == DType::kFloat32) return read;
  // A DoRA magnitude starts at the norms of the rows the forward multiplies by: the base's values
  // in the working parameters' type (as PEFT computes them on a model loaded in bf16).
  return [read = std::move(read), work](const TensorInfo& t, int64_t b, int64_t n, float* out) {
    read(t, b, n, out);
    round_through_16bit(work, out, static_cast<size_t>(n));
  };
}

void ZeroEngine::init_from_seed(uint64_t seed) {
  const ModelConfig& c = model_.config();
  const TensorRangeReader initial =
      as_working_values([&](const TensorInfo& t, int64_t b, int64_t n, float* out) {
        init_tensor_range(c, t, seed, b, n, out);
      });
  impl_->fill([&](const TensorInfo& t, int64_t b, int64_t n, float* out) {
    init_start_range(model_.layout(), t, seed, b, n, initial, out);
  });
}

void ZeroEngine::load_from(TensorSource& source, uint64_t adapter_seed) {
  const ModelConfig& c = model_.config();
  ZT_CHECK(source.config() == c || source.config() == c.base(),
           source.description() + " does not match the configured model");
  const TensorRangeReader base =
      as_working_values([&](const TensorInfo& t, int64_t b, int64_t n, float* out) {
        source.read_range_f32(t, b, n, out);
      });
  impl_->fill([&](const TensorInfo& t, int64_t b, int64_t n, float* out) {
    if (source.holds(t))
      source.read_range_f32(t, b, n, out);
    else if (t.is_lora())  // A and B drawn, a DoRA magnitude from the base the source holds
      init_start_range(model_.layout(), t, adapter_seed, b, n, base, out);
    else
      fail(source.description() + " has no tensor '" + t.name + "'");
  });
}

const OffloadConfig& ZeroEngine::offload_config() const {
  return impl_->offload;
}

double ZeroEngine::measure_host_adam_rate(int64_t elements) {
  return impl_->offloader ? impl_->offloader->measure_adam_rate(elements) : 0.0;
}

const MemoryPlan& ZeroEngine::memory_plan() const {
  return impl_->plan;
}

void ZeroEngine::apply_delayed_update() {
  Impl& I = *impl_;
  if (I.offloader) I.offloader->roll_back_overlap();  // an overlap a failed step left open
  if (!I.publish_delayed_update(nullptr)) return;
  if (I.traits.gather_after_update) I.gather_updated_params(/*every_group=*/false);
  if (I.traits.shard_parameters) I.gatherer->release_all();  // gathered copies are stale
  I.comm.finish_device_waits();
}

OptimizerShard ZeroEngine::optimizer_shard(int g) {
  Impl& I = *impl_;
  const size_t i = static_cast<size_t>(g);
  ZT_CHECK(!(I.offloader ? I.offloader->update_running() : I.delayed_held),
           "optimizer_shard: a delayed update is held back (apply_delayed_update first)");
  if (!I.trains(g)) return I.frozen_shard(g);
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
  if (!I.trains(g)) {
    Impl::HostShard& s = I.staged[static_cast<size_t>(g)];
    if (s.held && modified)  // the own range of the working params := the staged values
      I.put_working(g, I.traits.shard_parameters ? 0 : I.own_begin(g), s.master.data(),
                    I.own_size(g));
    s = Impl::HostShard{};
    return;
  }
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
  apply_delayed_update();  // a held-back update must not overwrite what this rebuilds
  Impl& I = *impl_;
  if (I.offloader) I.offloader->store().flush();  // shards a caller modified and kept staged
  for (int g = 0; g < I.num_groups(); ++g) {
    I.master_to_working(g);
    release_optimizer_shard(g, /*modified=*/false);
  }
  if (I.traits.gather_after_update) I.gather_updated_params(/*every_group=*/true);
  if (I.gatherer) I.gatherer->release_all();
}

// A frozen group's stand-in for its optimizer shard: its own range of the working params,
// widened to fp32 (exact), as the master, with the working dtype that holds them; no moments.
OptimizerShard ZeroEngine::Impl::frozen_shard(int g) {
  HostShard& s = staged[static_cast<size_t>(g)];
  const int64_t n = own_size(g);
  if (!s.held) {
    const int64_t off = traits.shard_parameters ? 0 : own_begin(g);
    const size_t bytes = static_cast<size_t>(n) * work_elem();
    const auto* src = static_cast<const uint8_t*>(work(g)) + static_cast<size_t>(off) * work_elem();
    std::vector<uint8_t> raw(bytes);
    if (offload.param_offloaded())
      std::memcpy(raw.data(), src, bytes);
    else
      dev.to_host(raw.data(), src, bytes);
    s.master.resize(static_cast<size_t>(n));
    if (half())
      widen_16bit(work_dtype(), reinterpret_cast<const uint16_t*>(raw.data()), s.master.data(),
                  s.master.size());
    else
      std::memcpy(s.master.data(), raw.data(), bytes);
    s.held = true;
  }
  return {s.master.data(), nullptr, nullptr, own_begin(g), n, work_dtype()};
}

void ZeroEngine::for_each_full_tensor(bool master,
                                      const std::function<void(const TensorInfo&, const void*)>& fn,
                                      const std::function<bool(int g)>& groups) {
  apply_delayed_update();  // the masters are read, not written, by a running update's thread
  Impl& I = *impl_;
  const ParamLayout& layout = model_.layout();
  const bool root = I.rank == 0;
  if (I.offloader) I.offloader->store().flush();  // shards a caller modified and kept staged
  for (int g = 0; g < I.num_groups(); ++g) {
    if (groups && !groups(g)) continue;
    const GroupPartition& p = parts_[static_cast<size_t>(g)];
    // A frozen group has no master: its working params are its values. fp16 working params are
    // exported from the masters (rounded once to bf16, not through fp16).
    const bool from_master = (master || I.work_dtype() == DType::kFloat16) && I.trains(g);
    const DType dt = from_master ? DType::kFloat32 : I.work_dtype();
    const size_t es = dtype_size(dt);
    // What this rank holds: the masters (host with optimizer offload) or working params (host
    // with param offload); a shard at stages 1-3 (masters) or 3 (params), else the whole group.
    const void* mine = from_master ? static_cast<const void*>(I.resident_master(g)) : I.work(g);
    const bool on_host = from_master ? I.offloader != nullptr : I.offload.param_offloaded();
    const bool sharded = from_master ? I.traits.shard_optimizer : I.traits.shard_parameters;
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
    if (from_master) release_optimizer_shard(g, /*modified=*/false);
    if (!root) continue;
    std::vector<bf16_t> as_bf16;
    std::vector<float> as_f32;
    for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      const uint8_t* at = full.data() + static_cast<size_t>(t.offset) * es;
      const float* values = reinterpret_cast<const float*>(at);
      if (dt != DType::kFloat32 && !(dt == DType::kBf16 && !master)) {  // 16-bit values, widened
        as_f32.resize(static_cast<size_t>(t.numel));
        widen_16bit(dt, reinterpret_cast<const uint16_t*>(at), as_f32.data(), as_f32.size());
        values = as_f32.data();
      }
      if (master) {
        fn(t, values);
      } else if (dt == DType::kBf16) {
        fn(t, at);
      } else {  // fp32 values (working params or fp16 mode's masters), exported as bf16
        as_bf16.resize(static_cast<size_t>(t.numel));
        floats_to_bf16(values, as_bf16.data(), as_bf16.size());
        fn(t, as_bf16.data());
      }
    }
  }
  if (I.offloader) I.offloader->store().flush();
  if (!root) {
    for (const TensorInfo& t : layout.tensors()) fn(t, nullptr);
  }
}

int64_t ZeroEngine::Impl::first_non_finite_tensor(bool gradients) {
  const ParamLayout& layout = self.model_.layout();
  int64_t first = std::numeric_limits<int64_t>::max();
  for (int g = 0; g < num_groups() && first == std::numeric_limits<int64_t>::max(); ++g) {
    if (!trains(g)) continue;  // no gradient and no master; the frozen values never change
    const int64_t begin = own_begin(g), end = begin + own_size(g);
    // Masters offloaded to the host (or NVMe) are staged one group at a time and read there;
    // everything else is summed by the backend where it lives.
    const bool on_host = !gradients && offloader != nullptr;
    const float* values = gradients ? own_grads(g)
                          : on_host ? self.optimizer_shard(g).master
                                    : master[static_cast<size_t>(g)].data();
    for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      const int64_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
      if (lo >= hi) continue;
      const float* x = values + (lo - begin);
      // Σx² in double is finite exactly when every x is (no float squared overflows a double).
      double sum = 0;
      if (on_host)
        for (int64_t i = 0; i < hi - lo; ++i) sum += static_cast<double>(x[i]) * x[i];
      else
        sum = be.sum_squares(x, hi - lo);
      if (!std::isfinite(sum)) {
        first = ti;
        break;
      }
    }
    if (on_host) self.release_optimizer_shard(g, /*modified=*/false);
  }
  std::vector<int64_t> all(static_cast<size_t>(host.world_size()));
  host.all_gather_blocking(&first, all.data(), 1);
  const int64_t found = *std::min_element(all.begin(), all.end());
  return found == std::numeric_limits<int64_t>::max() ? -1 : found;
}

std::string ZeroEngine::non_finite_master_tensor() {
  apply_delayed_update();
  const int64_t t = impl_->first_non_finite_tensor(/*gradients=*/false);
  return t < 0 ? "" : model_.layout().tensors()[static_cast<size_t>(t)].name;
}

}  // namespace zt
