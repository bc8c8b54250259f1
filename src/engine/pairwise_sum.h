// A sum of `leaves` equal-length fp32 vectors, given one at a time, associated as a balanced
// binary tree over them in the order given: for 4 leaves, (v0 + v1) + (v2 + v3). World-invariant
// training (docs/ARCHITECTURE.md §4) sums a rank's micro-batches with it, each leaf already the
// rank-tree sum over the ranks: a subtree's sum does not depend on where the rest of the tree
// is computed, so the bits are those of one rank summing every leaf. `leaves` must be a power
// of two.
//
// Streaming, as a binary counter: level k holds the sum of the last 2^k leaves not yet merged
// upward; a new leaf merges with level 0, that sum with level 1, ... while the level is full.
// It keeps log2(leaves) + 1 buffers of n floats in the backend's memory (kGrads), and every merge
// is one backend add (left += right, so the left operand is the earlier leaves, as a tree written
// left to right; IEEE addition is commutative, so the order of operands never changes a bit).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "util/memory.h"

namespace zt {

class PairwiseSum {
 public:
  PairwiseSum(Backend& backend, MemoryTracker& memory, int64_t n, int64_t leaves);

  // The zeroed buffer the next leaf is written (or accumulated, +=) into.
  float* next_leaf();
  // Merges the leaf written since next_leaf() into the tree.
  void add_leaf();
  // The tree's sum, once every leaf was added (writable: its user may consume it in place, until
  // the next reset()).
  float* result();
  // Starts a new sum over the same number of leaves.
  void reset();
  int64_t leaves() const { return leaves_; }
  // The buffers a sum over `leaves` keeps: log2(leaves) + 1.
  static int levels_for(int64_t leaves) {
    int levels = 1;
    while ((int64_t{1} << (levels - 1)) < leaves) ++levels;
    return levels;
  }

 private:
  Backend& be_;
  int64_t n_, leaves_, added_ = 0;
  bool leaf_open_ = false;
  // levels_[k]: the partial of 2^k leaves (level 0 also receives each new leaf); full_[k] whether
  // it holds one waiting for its right sibling.
  std::vector<TrackedBuffer<float>> levels_;
  std::vector<bool> full_;
  int leaf_level_ = 0;  // the level the open leaf is written into (the lowest free one)
};

}  // namespace zt
