// PairwiseSum (engine/pairwise_sum.h): the streamed sum equals a balanced binary tree written out
// recursively, bit for bit, and a subtree's sum is the same bits whether it is summed alone or
// inside the whole tree (what lets each rank sum its own micro-batches).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "engine/pairwise_sum.h"
#include "support/error_text.h"
#include "util/memory.h"

namespace zt {
namespace {

using Vec = std::vector<float>;

// ((v0 + v1) + (v2 + v3)) ..., written recursively in fp32.
Vec tree_sum(const std::vector<Vec>& leaves, size_t lo, size_t hi) {
  if (hi - lo == 1) return leaves[lo];
  const size_t mid = (lo + hi) / 2;
  Vec left = tree_sum(leaves, lo, mid);
  const Vec right = tree_sum(leaves, mid, hi);
  for (size_t i = 0; i < left.size(); ++i) left[i] += right[i];
  return left;
}

std::vector<Vec> random_leaves(size_t count, size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  // Magnitudes over several orders, so that the association visibly changes the rounding.
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<Vec> leaves(count, Vec(n));
  for (Vec& v : leaves)
    for (float& x : v) x = std::ldexp(normal(rng), exponent(rng));
  return leaves;
}

Vec streamed(Backend& be, const std::vector<Vec>& leaves) {
  MemoryTracker memory;
  const int64_t n = static_cast<int64_t>(leaves[0].size());
  PairwiseSum sum(be, memory, n, static_cast<int64_t>(leaves.size()));
  for (const Vec& v : leaves) {
    float* leaf = sum.next_leaf();
    // Accumulated (+=) into the zeroed leaf, as a model's backward accumulates a gradient.
    for (int64_t i = 0; i < n; ++i) leaf[i] += v[static_cast<size_t>(i)];
    sum.add_leaf();
  }
  return Vec(sum.result(), sum.result() + n);
}

bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(PairwiseSum, EqualsTheBalancedTreeBitForBit) {
  auto be = make_cpu_backend();
  for (size_t count : {1, 2, 4, 8, 16, 64}) {
    SCOPED_TRACE(count);
    const std::vector<Vec> leaves = random_leaves(count, 257, static_cast<unsigned>(count));
    EXPECT_TRUE(same_bits(streamed(*be, leaves), tree_sum(leaves, 0, count)));
  }
  // The association matters: a left-to-right sum of the same 16 leaves rounds differently.
  const std::vector<Vec> leaves = random_leaves(16, 257, 99);
  Vec sequential = leaves[0];
  for (size_t j = 1; j < leaves.size(); ++j)
    for (size_t i = 0; i < sequential.size(); ++i) sequential[i] += leaves[j][i];
  EXPECT_FALSE(same_bits(streamed(*be, leaves), sequential));
}

// 16 leaves as 4 "ranks" of 4 consecutive leaves: each rank's streamed sum, then the 4 partials
// streamed again, equal the whole tree: the split does not change a bit.
TEST(PairwiseSum, SubtreesSummedApartGiveTheWholeTree) {
  auto be = make_cpu_backend();
  const std::vector<Vec> leaves = random_leaves(16, 129, 7);
  std::vector<Vec> partials;
  for (size_t r = 0; r < 4; ++r)
    partials.push_back(
        streamed(*be, std::vector<Vec>(leaves.begin() + 4 * r, leaves.begin() + 4 * (r + 1))));
  EXPECT_TRUE(same_bits(streamed(*be, partials), streamed(*be, leaves)));
}

TEST(PairwiseSum, MisuseIsRefused) {
  auto be = make_cpu_backend();
  MemoryTracker memory;
  EXPECT_NE(error_of([&] { PairwiseSum(*be, memory, 4, 3); }).find("power of two"),
            std::string::npos);
  PairwiseSum sum(*be, memory, 4, 2);
  EXPECT_NE(error_of([&] { sum.add_leaf(); }).find("without next_leaf"), std::string::npos);
  sum.next_leaf();
  EXPECT_NE(error_of([&] { sum.next_leaf(); }).find("not added"), std::string::npos);
  sum.add_leaf();
  EXPECT_NE(error_of([&] { sum.result(); }).find("1 of 2"), std::string::npos);
  sum.next_leaf();
  sum.add_leaf();
  EXPECT_NO_THROW(sum.result());
  EXPECT_NE(error_of([&] { sum.next_leaf(); }).find("were added"), std::string::npos);
}

}  // namespace
}  // namespace zt
