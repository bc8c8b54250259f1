// The reduce-scatter in rank-tree order (SumOrder::kRankTree): every element's sum must be, bit
// for bit, the balanced binary tree over the ranks in rank order, whatever the count, with
// several reductions in flight at once, and it must send the ring's bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/rank_tree_schedule.h"
#include "comm_test_support.h"
#include "util/error.h"

namespace zt {
namespace {

// Values whose sums round differently in different orders: magnitudes spread over 2^±20.
template <typename T>
T spread_value(int rank, size_t i) {
  uint64_t x =
      (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  const double unit = static_cast<double>(x >> 11) * 0x1.0p-53 - 0.5;  // [-0.5, 0.5)
  const int exponent = static_cast<int>((x >> 3) % 41) - 20;
  return static_cast<T>(std::ldexp(unit, exponent));
}

template <typename T>
std::vector<T> rank_input(int rank, int world, size_t count) {
  std::vector<T> v(static_cast<size_t>(world) * count);
  for (size_t i = 0; i < v.size(); ++i) v[i] = spread_value<T>(rank, i);
  return v;
}

// Σ over ranks [lo, hi) of element e of every rank's input, as a balanced tree.
template <typename T>
T tree_sum(const std::vector<std::vector<T>>& inputs, int lo, int hi, size_t e) {
  if (hi - lo == 1) return inputs[static_cast<size_t>(lo)][e];
  const int mid = (lo + hi) / 2;
  return tree_sum(inputs, lo, mid, e) + tree_sum(inputs, mid, hi, e);
}

template <typename T>
class RankTreeReduceScatter : public CommTest {};
using FloatTypes = testing::Types<float, double>;
TYPED_TEST_SUITE(RankTreeReduceScatter, FloatTypes, DTypeNames);

TYPED_TEST(RankTreeReduceScatter, EveryElementIsTheBalancedTreeOverTheRanks) {
  using T = TypeParam;
  const int world = this->world(), rank = this->rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
    std::vector<std::vector<T>> inputs;
    for (int r = 0; r < world; ++r) inputs.push_back(rank_input<T>(r, world, count));
    std::vector<T> recv(count, T(-1));
    this->comm()
        .reduce_scatter_sum(inputs[static_cast<size_t>(rank)].data(), recv.data(), count,
                            SumOrder::kRankTree)
        .wait();
    for (size_t e = 0; e < count; ++e) {
      const T expected = tree_sum(inputs, 0, world, static_cast<size_t>(rank) * count + e);
      ASSERT_EQ(std::signbit(recv[e]), std::signbit(expected)) << "count " << count << " e " << e;
      ASSERT_EQ(recv[e], expected) << "count " << count << " element " << e;
    }
  }
}

// Four ranks holding 1, ε, −1, ε: the tree gives (1 + ε) + (−1 + ε) = 0 in float (ε is lost
// twice), a left-to-right sum gives ε. The result tells the association apart.
TEST_F(CommTest, RankTreeOrderIsNotLeftToRight) {
  if (world() != 4) GTEST_SKIP() << "needs 4 ranks";
  const float values[] = {1.0f, 1e-8f, -1.0f, 1e-8f};
  std::vector<float> send(4, values[rank()]);
  float recv = -1.0f;
  comm().reduce_scatter_sum(send.data(), &recv, 1, SumOrder::kRankTree).wait();
  EXPECT_EQ(recv, 0.0f);
  const float left_to_right = ((values[0] + values[1]) + values[2]) + values[3];
  EXPECT_NE(recv, left_to_right);
}

TEST_F(CommTest, RankTreeReductionsInFlightTogetherKeepTheirBlocks) {
  const int world = this->world();
  const size_t count = 513;
  std::vector<std::vector<float>> a_in, b_in;
  for (int r = 0; r < world; ++r) {
    a_in.push_back(rank_input<float>(r, world, count));
    b_in.push_back(rank_input<float>(r + 50, world, count));
  }
  std::vector<float> a(count), b(count);
  const CommCounters before = comm().counters();
  CommHandle ha = comm().reduce_scatter_sum(a_in[static_cast<size_t>(rank())].data(), a.data(),
                                            count, SumOrder::kRankTree);
  CommHandle hb = comm().reduce_scatter_sum(b_in[static_cast<size_t>(rank())].data(), b.data(),
                                            count, SumOrder::kRankTree);
  hb.wait();  // the later one first
  ha.wait();
  for (size_t e = 0; e < count; ++e) {
    const size_t at = static_cast<size_t>(rank()) * count + e;
    ASSERT_EQ(a[e], tree_sum(a_in, 0, world, at)) << e;
    ASSERT_EQ(b[e], tree_sum(b_in, 0, world, at)) << e;
  }
  // Recursive halving sends N/2 + N/4 + ... + 1 = N − 1 blocks: the ring's bytes.
  const uint64_t sent = comm().counters()[CollectiveOp::kReduceScatter].bytes_sent -
                        before[CollectiveOp::kReduceScatter].bytes_sent;
  EXPECT_EQ(sent, 2 * static_cast<uint64_t>(world - 1) * count * sizeof(float));
}

// A caller's scratch (what the engine's reduce slots lend: planned, so counted) holds the
// partial sums: a NaN sentinel there is overwritten from 4 ranks on (where there are partials to
// keep), the sums are the tree's, bit for bit, and a scratch that overlaps the send or receive
// buffer, or one given for the library's order, is refused before anything is sent.
TEST_F(CommTest, RankTreeKeepsItsPartialSumsInALentScratch) {
  const int world = this->world();
  const size_t count = 257;
  EXPECT_EQ(rank_tree_scratch_elements(world, count),
            world > 2 ? static_cast<size_t>(world - 2) * count : 0);
  std::vector<std::vector<double>> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rank_input<double>(r, world, count));
  const std::vector<double>& mine = inputs[static_cast<size_t>(rank())];
  const size_t scratch_n = rank_tree_scratch_elements(world, count);
  std::vector<double> scratch(scratch_n + 1, std::nan(""));  // one more: a guard after it
  std::vector<double> recv(count, -1.0);
  const uint64_t unlent_before = comm().counters().unlent_scratch_bytes;
  comm()
      .reduce_scatter_sum(mine.data(), recv.data(), count, SumOrder::kRankTree, scratch.data())
      .wait();
  EXPECT_EQ(comm().counters().unlent_scratch_bytes, unlent_before);
  comm().reduce_scatter_sum(mine.data(), recv.data(), count, SumOrder::kRankTree).wait();
  EXPECT_EQ(comm().counters().unlent_scratch_bytes - unlent_before, scratch_n * sizeof(double));
  for (size_t e = 0; e < count; ++e)
    ASSERT_EQ(recv[e], tree_sum(inputs, 0, world, static_cast<size_t>(rank()) * count + e)) << e;
  size_t written = 0;
  for (size_t i = 0; i < scratch_n; ++i) written += std::isnan(scratch[i]) ? 0 : 1;
  EXPECT_EQ(written, scratch_n) << "the partial sums went elsewhere";
  EXPECT_TRUE(std::isnan(scratch[scratch_n])) << "written past (N - 2)·count";

  std::vector<double> send_copy = mine;
  EXPECT_THROW(comm().reduce_scatter_sum(send_copy.data(), recv.data(), count, SumOrder::kLibrary,
                                         scratch.data()),
               Error);
  if (world < 4) return;  // below 4 ranks no scratch is used, and none is checked
  EXPECT_THROW(comm().reduce_scatter_sum(send_copy.data(), recv.data(), count, SumOrder::kRankTree,
                                         send_copy.data() + count),
               Error);
  EXPECT_THROW(comm().reduce_scatter_sum(send_copy.data(), recv.data(), count, SumOrder::kRankTree,
                                         recv.data()),
               Error);
}

TEST(RankTreeSchedule, EveryBlockEndsAtItsRankAndScratchHoldsTheRegions) {
  for (int world : {1, 2, 4, 8, 16}) {
    size_t sent_blocks = 0;
    for (int rank = 0; rank < world; ++rank) {
      const RankTreeSchedule s(rank, world);
      for (int step = 0; step < s.steps(); ++step) {
        int kept = 0;
        for (int i = 0; i < s.live_blocks(step); ++i) {
          if (!s.keeps(step, i)) {
            ++sent_blocks;
            continue;
          }
          ++kept;
          if (s.last(step))
            EXPECT_EQ(s.block(step, i), rank);
          else
            EXPECT_LT(s.region_offset(step) + static_cast<size_t>(s.kept_index(step, i)),
                      RankTreeSchedule::scratch_blocks(world));
        }
        EXPECT_EQ(kept, s.live_blocks(step) / 2);
      }
    }
    EXPECT_EQ(sent_blocks, static_cast<size_t>(world) * static_cast<size_t>(world - 1));
  }
}

}  // namespace
}  // namespace zt
