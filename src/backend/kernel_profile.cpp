#include "backend/kernel_profile.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>

#include "util/error.h"

namespace zt {

const char* kernel_category_name(KernelCategory c) {
  switch (c) {
    case KernelCategory::kGemm:
      return "gemm";
    case KernelCategory::kAttention:
      return "attention";
    case KernelCategory::kPointwise:
      return "pointwise";
    case KernelCategory::kCrossEntropy:
      return "cross_entropy";
    case KernelCategory::kOptimizer:
      return "optimizer";
    case KernelCategory::kCommunication:
      return "communication";
    case KernelCategory::kCopies:
      return "copies";
    case KernelCategory::kOther:
      return "other";
  }
  return "other";
}

KernelCategory classify_kernel(std::string_view name) {
  auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
  auto any = [&](std::initializer_list<std::string_view> parts) {
    return std::any_of(parts.begin(), parts.end(), has);
  };
  if (has("cross_entropy")) return KernelCategory::kCrossEntropy;
  // cuDNN's generated SDPA kernels and its backward's helpers (cudnn::fusion: dQ of the
  // deterministic algorithm, rowsum(dO∘O)), flash/fmha from other libraries, and our GEMM path's
  // softmax and its statistics transpose.
  if (any({"sdpa", "attention", "flash_fprop", "flash_bprop", "fmha", "flash::", "cudnn::fusion"}))
    return KernelCategory::kAttention;
  // AdamW (its elementwise body AdamWUpdate) and the gradient norm's sums of squares (the
  // clipping and loss scale ride in AdamW).
  if (any({"adamw", "AdamW", "sum_squares"})) return KernelCategory::kOptimizer;
  if (any({"nccl", "rank_tree_add"})) return KernelCategory::kCommunication;
  if (any({"nvjet", "gemm", "gemv", "cutlass", "splitKreduce", "cublasLt::", "cublas"}))
    return KernelCategory::kGemm;
  // RoPE by its elementwise body's name (a bare "rope" is inside words: "Property").
  if (any({"elementwise_kernel", "rmsnorm", "RopeRotate", "swiglu", "bias_", "embedding_",
           "column_sum", "Convert", "AddInPlace", "dropout_kernel", "dora_",
           // the model's scaling passes (MapInPlace: ScaleBy for LoRA's rank-r products and
           // Gemma's embedding, SoftCap for Gemma 2's logits)
           "MapInPlace",
           // CUB's radix sort, which the embedding backward sorts its positions with
           "cub::"}))
    return KernelCategory::kPointwise;
  return KernelCategory::kOther;
}

namespace {

// An activity's interval clipped to one window.
struct Clipped {
  size_t window = 0;
  uint64_t start_ns = 0, end_ns = 0;
  const std::string* name = nullptr;
  bool operator<(const Clipped& o) const {
    return std::tie(window, start_ns, end_ns) < std::tie(o.window, o.start_ns, o.end_ns);
  }
};

// busy_ns (the union of the intervals, overlapping time on concurrent streams counted once) and
// idle_gaps, window by window; `clipped` sorted.
void sweep_windows(KernelProfile& p, const std::vector<Clipped>& clipped,
                   const std::vector<ProfileWindow>& windows) {
  static const std::string kStepStart = "(step start)", kStepEnd = "(step end)";
  std::map<std::pair<std::string, std::string>, KernelProfile::IdleGap> gaps;
  const auto add_gap = [&](const std::string& after, const std::string& before, uint64_t ns) {
    if (ns == 0) return;
    KernelProfile::IdleGap& gap = gaps[{after, before}];
    gap.after = after, gap.before = before;
    gap.count += 1;
    gap.total_ns += ns;
    const auto& bounds = KernelProfile::kIdleGapBucketsNs;
    const auto bucket =
        static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), ns) - bounds.begin());
    p.idle_gap_sizes[bucket].calls += 1;
    p.idle_gap_sizes[bucket].total_ns += ns;
  };
  size_t i = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    uint64_t covered_until = windows[w].start_ns;
    const std::string* last = &kStepStart;
    for (; i < clipped.size() && clipped[i].window == w; ++i) {
      const Clipped& c = clipped[i];
      if (c.start_ns > covered_until) add_gap(*last, *c.name, c.start_ns - covered_until);
      if (c.end_ns <= covered_until) continue;  // within what is already covered
      p.busy_ns += c.end_ns - std::max(c.start_ns, covered_until);
      covered_until = c.end_ns;
      last = c.name;
    }
    add_gap(*last, kStepEnd, windows[w].end_ns - covered_until);
  }
  for (auto& [pair, gap] : gaps) p.idle_gaps.push_back(std::move(gap));
  std::stable_sort(p.idle_gaps.begin(), p.idle_gaps.end(),
                   [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; });
}

}  // namespace

KernelProfile summarize_kernel_profile(const std::vector<DeviceActivity>& activities,
                                       const std::vector<ProfileWindow>& windows, int64_t steps) {
  KernelProfile p;
  p.steps = steps;
  for (size_t w = 0; w < windows.size(); ++w) {
    ZT_CHECK(windows[w].end_ns >= windows[w].start_ns,
             "kernel profile: window " + std::to_string(w) + " ends before it starts");
    ZT_CHECK(w == 0 || windows[w].start_ns >= windows[w - 1].end_ns,
             "kernel profile: window " + std::to_string(w) + " overlaps the one before");
    p.window_ns += windows[w].end_ns - windows[w].start_ns;
  }
  std::map<std::string, KernelProfile::Row> by_name;
  std::vector<Clipped> clipped;
  for (const DeviceActivity& a : activities) {
    uint64_t inside = 0;
    for (size_t w = 0; w < windows.size(); ++w) {
      const uint64_t start = std::max(a.start_ns, windows[w].start_ns);
      const uint64_t end = std::min(a.end_ns, windows[w].end_ns);
      if (end <= start) continue;  // outside this window (or empty)
      inside += end - start;
      clipped.push_back({w, start, end, &a.name});
    }
    if (inside == 0) continue;
    const KernelCategory c =
        a.kind == DeviceActivity::Kind::kKernel ? classify_kernel(a.name) : KernelCategory::kCopies;
    KernelProfile::Row& row = by_name[a.name];
    row.name = a.name;
    row.category = c;
    row.calls += 1;
    row.total_ns += inside;
    KernelProfile::CategoryTotal& total = p.categories[static_cast<size_t>(c)];
    total.calls += 1;
    total.total_ns += inside;
  }
  std::sort(clipped.begin(), clipped.end());
  sweep_windows(p, clipped, windows);
  for (auto& [name, row] : by_name) p.rows.push_back(std::move(row));
  std::stable_sort(p.rows.begin(), p.rows.end(),
                   [](const auto& a, const auto& b) { return a.total_ns > b.total_ns; });
  return p;
}

namespace {

double ms(uint64_t ns) {
  return static_cast<double>(ns) * 1e-6;
}

double share(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

// Bucket b of KernelProfile::idle_gap_sizes: [from_ns, to_ns), to_ns 0 for the unbounded last.
struct GapBucket {
  uint64_t from_ns = 0, to_ns = 0;
};
GapBucket gap_bucket(size_t b) {
  const auto& bounds = KernelProfile::kIdleGapBucketsNs;
  return {b == 0 ? 0 : bounds[b - 1], b < bounds.size() ? bounds[b] : 0};
}

}  // namespace

std::string kernel_profile_json(const KernelProfile& p, int top_kernels) {
  nlohmann::ordered_json j;
  j["steps"] = p.steps;
  j["window_ms"] = ms(p.window_ns);
  j["busy_ms"] = ms(p.busy_ns);
  j["idle_ms"] = ms(p.idle_ns());
  j["per_step_ms"] = p.steps > 0 ? ms(p.window_ns) / static_cast<double>(p.steps) : 0.0;
  nlohmann::ordered_json categories = nlohmann::ordered_json::object();
  for (int c = 0; c < kNumKernelCategories; ++c) {
    const KernelProfile::CategoryTotal& t = p.categories[static_cast<size_t>(c)];
    categories[kernel_category_name(static_cast<KernelCategory>(c))] = {
        {"ms", ms(t.total_ns)}, {"calls", t.calls}, {"share", share(t.total_ns, p.window_ns)}};
  }
  categories["idle"] = {{"ms", ms(p.idle_ns())}, {"share", share(p.idle_ns(), p.window_ns)}};
  j["categories"] = categories;
  nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
  for (size_t i = 0; i < p.rows.size() && static_cast<int>(i) < top_kernels; ++i) {
    const KernelProfile::Row& r = p.rows[i];
    kernels.push_back({{"name", r.name},
                       {"category", kernel_category_name(r.category)},
                       {"ms", ms(r.total_ns)},
                       {"calls", r.calls}});
  }
  j["kernels"] = kernels;
  j["distinct_kernels"] = p.rows.size();
  nlohmann::ordered_json gaps = nlohmann::ordered_json::array();
  for (size_t i = 0; i < p.idle_gaps.size() && static_cast<int>(i) < top_kernels; ++i) {
    const KernelProfile::IdleGap& g = p.idle_gaps[i];
    gaps.push_back(
        {{"after", g.after}, {"before", g.before}, {"ms", ms(g.total_ns)}, {"count", g.count}});
  }
  j["idle_gaps"] = gaps;
  nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
  for (size_t b = 0; b < p.idle_gap_sizes.size(); ++b) {
    const KernelProfile::CategoryTotal& t = p.idle_gap_sizes[b];
    const GapBucket bucket = gap_bucket(b);
    nlohmann::ordered_json to_us = nullptr;
    if (bucket.to_ns > 0) to_us = static_cast<double>(bucket.to_ns) * 1e-3;
    sizes.push_back({{"from_us", static_cast<double>(bucket.from_ns) * 1e-3},
                     {"to_us", to_us},
                     {"ms", ms(t.total_ns)},
                     {"count", t.calls}});
  }
  j["idle_gap_sizes"] = sizes;
  j["dropped_records"] = p.dropped_records;
  j["untimed_records"] = p.untimed_records;
  return j.dump(2) + "\n";
}

std::string kernel_profile_table(const KernelProfile& p, int top_kernels) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "kernel profile: %lld step(s), %.3f ms in them (%.3f ms/step), busy %.3f ms\n",
                static_cast<long long>(p.steps), ms(p.window_ns),
                p.steps > 0 ? ms(p.window_ns) / static_cast<double>(p.steps) : 0.0, ms(p.busy_ns));
  out += line;
  out += "category          ms/step   share    calls/step\n";
  const double steps = static_cast<double>(std::max<int64_t>(1, p.steps));
  for (int c = 0; c < kNumKernelCategories; ++c) {
    const KernelProfile::CategoryTotal& t = p.categories[static_cast<size_t>(c)];
    std::snprintf(line, sizeof line, "%-16s %9.3f  %5.1f%%  %11.1f\n",
                  kernel_category_name(static_cast<KernelCategory>(c)), ms(t.total_ns) / steps,
                  100.0 * share(t.total_ns, p.window_ns), static_cast<double>(t.calls) / steps);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-16s %9.3f  %5.1f%%\n", "idle", ms(p.idle_ns()) / steps,
                100.0 * share(p.idle_ns(), p.window_ns));
  out += line;
  out += "longest kernels (ms/step, calls/step, category, name):\n";
  for (size_t i = 0; i < p.rows.size() && static_cast<int>(i) < top_kernels; ++i) {
    const KernelProfile::Row& r = p.rows[i];
    std::snprintf(line, sizeof line, "  %9.3f %7.1f  %-13s %.160s\n", ms(r.total_ns) / steps,
                  static_cast<double>(r.calls) / steps, kernel_category_name(r.category),
                  r.name.c_str());
    out += line;
  }
  out += "idle gaps by length (ms/step, gaps/step):";
  for (size_t b = 0; b < p.idle_gap_sizes.size(); ++b) {
    const KernelProfile::CategoryTotal& t = p.idle_gap_sizes[b];
    const GapBucket bucket = gap_bucket(b);
    const std::string from = std::to_string(bucket.from_ns / 1000),
                      to = std::to_string(bucket.to_ns / 1000);
    const std::string range = bucket.to_ns == 0     ? ">=" + from + "us"
                              : bucket.from_ns == 0 ? "<" + to + "us"
                                                    : from + "-" + to + "us";
    std::snprintf(line, sizeof line, "  %s %.3f/%.1f", range.c_str(), ms(t.total_ns) / steps,
                  static_cast<double>(t.calls) / steps);
    out += line;
  }
  out += "\n";
  if (!p.idle_gaps.empty()) out += "longest idle gaps (ms/step, gaps/step, after -> before):\n";
  for (size_t i = 0; i < p.idle_gaps.size() && static_cast<int>(i) < top_kernels; ++i) {
    const KernelProfile::IdleGap& g = p.idle_gaps[i];
    std::snprintf(line, sizeof line, "  %9.3f %7.1f  %.80s -> %.80s\n", ms(g.total_ns) / steps,
                  static_cast<double>(g.count) / steps, g.after.c_str(), g.before.c_str());
    out += line;
  }
  if (p.dropped_records > 0 || p.untimed_records > 0)
    out += "warning: the profiler dropped " + std::to_string(p.dropped_records) +
           " record(s) and recorded " + std::to_string(p.untimed_records) +
           " kernel(s) without timestamps; the figures above miss them\n";
  return out;
}

}  // namespace zt
