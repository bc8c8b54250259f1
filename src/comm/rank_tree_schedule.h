// The schedule of a reduce-scatter in rank-tree order (SumOrder::kRankTree, communicator.h):
// recursive halving over N = 2^k ranks that pairs ranks at distance 1, 2, 4, ..., so every
// element's sum is the balanced binary tree over the ranks in rank order.
//
// Blocks: the send buffer holds N blocks of `count` elements; block s is rank s's share. Before
// step t (distance d = 2^t) a rank holds the partial sums, over its aligned group of d ranks, of
// the N/d "live" blocks s ≡ rank (mod d): live block i is s = rank mod d + i·d. In step t it
// sends the live blocks whose bit d differs from its own rank's to the partner rank ^ d, receives
// the partner's partials of the others, and adds them: a kept block's new partial covers the
// aligned group of 2d ranks. After the last step the one block left is block `rank`.
//
// Storage: step 0 reads the send buffer; step t's kept blocks go to region t of a scratch buffer
// (N/2^(t+1) blocks, kept block s at index s / 2d), the last step's into recv. Scratch holds
// N/2 + N/4 + ... + 2 = N − 2 blocks. Pure arithmetic, no library calls: the MPI and NCCL
// implementations and the tests share it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zt {

inline bool is_power_of_two_world(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

class RankTreeSchedule {
 public:
  RankTreeSchedule(int rank, int world) : rank_(rank), world_(world) {
    while ((1 << steps_) < world) ++steps_;
  }
  int steps() const { return steps_; }  // log2 N
  int partner(int step) const { return rank_ ^ (1 << step); }
  int live_blocks(int step) const { return world_ >> step; }
  // The block index (0..N−1) of live block i before `step`.
  int block(int step, int i) const { return (rank_ & ((1 << step) - 1)) + i * (1 << step); }
  // Whether live block i stays here (received from the partner and added) or goes to the partner.
  bool keeps(int step, int i) const {
    return (block(step, i) & (1 << step)) == (rank_ & (1 << step));
  }
  // Where kept live block i of `step` lands: its index in the step's output region; and where
  // live block i of step t > 0 is read: index i of region t − 1.
  int kept_index(int step, int i) const { return block(step, i) >> (step + 1); }
  bool last(int step) const { return step == steps_ - 1; }
  // Blocks of scratch before region `step` (the last step writes recv instead).
  size_t region_offset(int step) const {
    size_t offset = 0;
    for (int t = 0; t < step; ++t) offset += static_cast<size_t>(world_ >> (t + 1));
    return offset;
  }

  // A block of one of the three buffers, in blocks of `count` elements.
  enum class Buffer { kSend, kScratch, kRecv };
  struct BlockRef {
    Buffer buffer;
    size_t block;
  };
  // Where live block i of `step` is read, and where it lands when kept.
  BlockRef live(int step, int i) const {
    if (step == 0) return {Buffer::kSend, static_cast<size_t>(block(0, i))};
    return {Buffer::kScratch, region_offset(step - 1) + static_cast<size_t>(i)};
  }
  BlockRef kept(int step, int i) const {
    if (last(step)) return {Buffer::kRecv, 0};
    return {Buffer::kScratch, region_offset(step) + static_cast<size_t>(kept_index(step, i))};
  }
  static size_t scratch_blocks(int world) { return world > 2 ? static_cast<size_t>(world - 2) : 0; }

 private:
  int rank_, world_;
  int steps_ = 0;
};

}  // namespace zt
