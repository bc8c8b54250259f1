#include "engine/pairwise_sum.h"

#include <string>
#include <utility>

#include "util/error.h"

namespace zt {

PairwiseSum::PairwiseSum(Backend& backend, MemoryTracker& memory, int64_t n, int64_t leaves)
    : be_(backend), n_(n), leaves_(leaves) {
  ZT_CHECK(n > 0, "PairwiseSum: the vectors must have elements");
  ZT_CHECK(
      leaves > 0 && (leaves & (leaves - 1)) == 0,
      "PairwiseSum: the number of leaves must be a power of two, got " + std::to_string(leaves));
  const int levels = levels_for(leaves);
  for (int k = 0; k < levels; ++k)
    levels_.emplace_back(memory, MemCategory::kGrads, static_cast<size_t>(n));
  full_.assign(static_cast<size_t>(levels), false);
}

float* PairwiseSum::next_leaf() {
  ZT_CHECK(!leaf_open_, "PairwiseSum: the previous leaf was not added");
  ZT_CHECK(added_ < leaves_, "PairwiseSum: all " + std::to_string(leaves_) + " leaves were added");
  // Levels 0..t−1 are full (t = trailing ones of the count added), level t is free: the leaf is
  // written there, where the carry will end.
  leaf_level_ = 0;
  while (full_[static_cast<size_t>(leaf_level_)]) ++leaf_level_;
  float* leaf = levels_[static_cast<size_t>(leaf_level_)].data();
  be_.zero(leaf, n_);
  leaf_open_ = true;
  return leaf;
}

void PairwiseSum::add_leaf() {
  ZT_CHECK(leaf_open_, "PairwiseSum: add_leaf() without next_leaf()");
  leaf_open_ = false;
  // Level k < t holds the 2^k leaves just before the newer ones: the left sibling of everything
  // after it. So: level 0 += leaf, level 1 += level 0, ..., level t−1 += level t−2; the sum of
  // the last 2^t leaves is then in level t−1's buffer, which trades places with level t's.
  const int t = leaf_level_;
  for (int k = 0; k < t; ++k) {
    float* right = levels_[static_cast<size_t>(k == 0 ? t : k - 1)].data();
    be_.add_inplace(levels_[static_cast<size_t>(k)].data(), right, n_);
    full_[static_cast<size_t>(k)] = false;
  }
  if (t > 0) std::swap(levels_[static_cast<size_t>(t)], levels_[static_cast<size_t>(t - 1)]);
  full_[static_cast<size_t>(t)] = true;
  ++added_;
}

float* PairwiseSum::result() {
  ZT_CHECK(added_ == leaves_ && !leaf_open_, "PairwiseSum: " + std::to_string(added_) + " of " +
                                                 std::to_string(leaves_) + " leaves added");
  return levels_.back().data();
}

void PairwiseSum::reset() {
  added_ = 0;
  leaf_open_ = false;
  full_.assign(full_.size(), false);
}

}  // namespace zt
