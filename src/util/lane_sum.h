// A sum in double whose order is fixed by the number of terms alone (the CPU backend's reductions,
// and what must equal them bit for bit: a DoRA magnitude's initial norm, model/init.cpp).
#pragma once
#include <cstdint>

namespace zt {

// Sums in double over kSumLanes interleaved partial sums (lane l takes the elements i ≡ l mod
// kSumLanes, the tail goes to lane 0), combined pairwise in lane order at the end. The order is
// fixed by n alone, and the independent lanes avoid one long chain of dependent additions.
constexpr int64_t kSumLanes = 8;

template <typename Term>
double lane_sum(int64_t n, Term term) {
  double lanes[kSumLanes] = {};
  int64_t i = 0;
  for (; i + kSumLanes <= n; i += kSumLanes) {
    for (int64_t l = 0; l < kSumLanes; ++l) lanes[l] += term(i + l);
  }
  for (; i < n; ++i) lanes[0] += term(i);
  for (int64_t width = kSumLanes / 2; width > 0; width /= 2) {
    for (int64_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

}  // namespace zt
