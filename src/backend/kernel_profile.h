// A device's kernel-time profile over a window of training steps (`train --profile-steps A:B`,
// docs/gpu.md): the activities a profiler recorded (kernels, copies, memsets), each kernel put in
// the category the step's time is read by, and the window's busy and idle time. The profiler
// itself is the backend's (CUPTI on CUDA, backend/cuda/cupti_kernel_profiler.h); this part is
// plain host code, so the grouping and the arithmetic are tested without a GPU.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// What the device did for an interval of its clock (nanoseconds).
struct DeviceActivity {
  enum class Kind { kKernel, kCopy, kMemset };
  Kind kind = Kind::kKernel;
  std::string name;  // a kernel's demangled name; "memcpy HtoD" etc. for copies
  uint64_t start_ns = 0, end_ns = 0;
  int64_t bytes = 0;  // copies and memsets
};

// The groups a step's device time is read by. kCopies holds copies and memsets; kOther every
// kernel no rule names (its names are listed, so a new library kernel shows up there).
enum class KernelCategory {
  kGemm,
  kAttention,
  kPointwise,
  kCrossEntropy,
  kOptimizer,
  kCommunication,
  kCopies,
  kOther
};
inline constexpr int kNumKernelCategories = 8;
const char* kernel_category_name(KernelCategory c);

// The category of a kernel by its (demangled) name: zerotrain's own kernels by name, cuBLASLt's
// (nvjet_*, *_xmma_gemm_*, cutlass*, splitKreduce), cuDNN's fused attention
// (cudnn_generated_*sdpa*), NCCL's (nccl*) and CUB's (cub::, the embedding backward's sort, as
// pointwise). Case-sensitive substrings, checked in a fixed
// order (cross-entropy, attention, optimizer, communication, GEMM, pointwise).
KernelCategory classify_kernel(std::string_view name);

// A stretch of the device clock the profile counts (one training step), [start_ns, end_ns].
struct ProfileWindow {
  uint64_t start_ns = 0, end_ns = 0;
};

struct KernelProfile {
  struct Row {
    std::string name;
    KernelCategory category = KernelCategory::kOther;
    int64_t calls = 0;
    uint64_t total_ns = 0;
  };
  struct CategoryTotal {
    int64_t calls = 0;
    uint64_t total_ns = 0;
  };
  int64_t steps = 0;
  uint64_t window_ns = 0;  // the windows' total length
  uint64_t busy_ns = 0;    // the union of every activity's interval within them
  uint64_t idle_ns() const { return window_ns - busy_ns; }
  std::array<CategoryTotal, kNumKernelCategories> categories{};
  std::vector<Row> rows;  // one per distinct name, the longest total first
  // The idle time by where it falls: each stretch of a window with no activity, named by the
  // activity that ended last before it and the one that starts it ("(step start)" and
  // "(step end)" at a window's ends), summed over equal pairs, the longest total first. Their
  // total is idle_ns(): a host that blocks on the device, or issues work late, shows up as the
  // gap before the activity it issues next.
  struct IdleGap {
    std::string after, before;
    int64_t count = 0;
    uint64_t total_ns = 0;
  };
  std::vector<IdleGap> idle_gaps;
  // The same stretches by length: many short ones are the device's own gaps between back-to-back
  // kernels and the host's launch rate (fewer kernels, or CUDA graphs, remove them); a few long
  // ones are a host that waited or computed. Bucket b holds lengths in
  // [kIdleGapBucketsNs[b - 1], kIdleGapBucketsNs[b]), the first from 0, the last unbounded.
  static constexpr std::array<uint64_t, 4> kIdleGapBucketsNs = {5'000, 20'000, 100'000, 1'000'000};
  std::array<CategoryTotal, kIdleGapBucketsNs.size() + 1> idle_gap_sizes{};
  // Records the profiler lost (its buffers full) and kernels it recorded without timestamps
  // (CUPTI short of device memory): time the figures above miss.
  int64_t dropped_records = 0, untimed_records = 0;
};

// Sums the activities inside the windows (each activity clipped to them; the windows in order and
// apart) over `steps` steps. Category totals add durations, so activities on concurrent streams
// can make them sum to more than busy_ns; busy_ns counts overlapping time once. Throws zt::Error
// on a window that ends before it starts or overlaps the one before.
KernelProfile summarize_kernel_profile(const std::vector<DeviceActivity>& activities,
                                       const std::vector<ProfileWindow>& windows, int64_t steps);

// {steps, window_ms, busy_ms, idle_ms, per_step_ms, categories: {name: {ms, calls, share}},
//  kernels: [{name, category, ms, calls}] (the `top_kernels` longest), distinct_kernels,
//  idle_gaps: [{after, before, ms, count}] (the `top_kernels` longest),
//  idle_gap_sizes: [{from_us, to_us (null: unbounded), ms, count}], dropped_records,
//  untimed_records}; share is of the windows. Returned as JSON text.
std::string kernel_profile_json(const KernelProfile& p, int top_kernels = 40);
// The same as a fixed-width table: categories, idle, the top kernels, then the longest idle gaps.
std::string kernel_profile_table(const KernelProfile& p, int top_kernels = 15);

// Records device activity between start() and stop(); a backend makes one (Backend::
// make_kernel_profiler).
class KernelProfiler {
 public:
  virtual ~KernelProfiler() = default;
  virtual void start() = 0;
  // Waits for the device to finish what was issued, then reads the activities' clock: the ends
  // of a window.
  virtual uint64_t now() = 0;
  struct Recording {
    std::vector<DeviceActivity> activities;
    int64_t dropped_records = 0, untimed_records = 0;
  };
  // The activities since start(), or since the last discard(); waits for the device first.
  virtual Recording stop() = 0;
  // Drops what was recorded so far and goes on recording (waits for the device first).
  virtual void discard() = 0;
};

}  // namespace zt
