// Every collective, every element type, several counts (0, 1 and odd sizes included): each
// rank fills rank-dependent data and checks the result against values computed locally.
#include <gtest/gtest.h>

#include <memory>
#include <type_traits>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm_test_support.h"
#include "util/bf16.h"

namespace zt {
namespace {

constexpr size_t kCounts[] = {0, 1, 2, 7, 64, 1023, 4099};

template <typename T>
class CommAllTypes : public CommTest {};
template <typename T>
class CommReducibleTypes : public CommTest {};

using AllTypes = testing::Types<float, double, uint16_t, int32_t, int64_t, uint8_t>;
using ReducibleTypes = testing::Types<float, double, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(CommAllTypes, AllTypes, DTypeNames);
TYPED_TEST_SUITE(CommReducibleTypes, ReducibleTypes, DTypeNames);

TYPED_TEST(CommAllTypes, AllGatherConcatenatesRankBlocks) {
  using T = TypeParam;
  const size_t world = static_cast<size_t>(this->world());
  for (size_t count : kCounts) {
    const std::vector<T> send = samples<T>(this->rank(), 0, count);
    std::vector<T> recv(world * count, T{});
    this->comm().all_gather(send.data(), recv.data(), count).wait();
    std::vector<T> expected;
    for (int r = 0; r < this->world(); ++r) append(expected, samples<T>(r, 0, count));
    EXPECT_EQ(recv, expected) << "count " << count;
  }
}

TYPED_TEST(CommAllTypes, AllGatherInPlaceFromOwnBlock) {
  using T = TypeParam;
  const size_t world = static_cast<size_t>(this->world());
  const size_t own = static_cast<size_t>(this->rank());
  for (size_t count : kCounts) {
    std::vector<T> buffer = samples<T>(kJunkRank, 0, world * count);
    const std::vector<T> mine = samples<T>(this->rank(), 0, count);
    std::copy(mine.begin(), mine.end(), buffer.begin() + static_cast<ptrdiff_t>(own * count));
    this->comm().all_gather_blocking(buffer.data() + own * count, buffer.data(), count);
    std::vector<T> expected;
    for (int r = 0; r < this->world(); ++r) append(expected, samples<T>(r, 0, count));
    EXPECT_EQ(buffer, expected) << "count " << count;
  }
}

TYPED_TEST(CommAllTypes, BroadcastCopiesRootBufferFromEveryRoot) {
  using T = TypeParam;
  for (int root = 0; root < this->world(); ++root) {
    for (size_t count : kCounts) {
      std::vector<T> buf = samples<T>(this->rank() == root ? root : kJunkRank, 0, count);
      this->comm().broadcast(buf.data(), count, root).wait();
      EXPECT_EQ(buf, samples<T>(root, 0, count)) << "root " << root << ", count " << count;
    }
  }
}

TYPED_TEST(CommReducibleTypes, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  using T = TypeParam;
  const size_t world = static_cast<size_t>(this->world());
  const size_t own = static_cast<size_t>(this->rank());
  for (size_t count : kCounts) {
    const std::vector<T> send = samples<T>(this->rank(), 0, world * count);
    std::vector<T> recv(count, T{});
    this->comm().reduce_scatter_sum(send.data(), recv.data(), count).wait();
    EXPECT_EQ(recv, sum_over_ranks<T>(this->world(), own * count, count)) << "count " << count;
  }
}

TYPED_TEST(CommReducibleTypes, AllReduceSumsOverRanks) {
  using T = TypeParam;
  for (size_t count : kCounts) {
    std::vector<T> inout = samples<T>(this->rank(), 0, count);
    this->comm().all_reduce_sum(inout.data(), count).wait();
    EXPECT_EQ(inout, sum_over_ranks<T>(this->world(), 0, count)) << "count " << count;
  }
}

TYPED_TEST(CommReducibleTypes, BlockingFormsMatchAsyncForms) {
  using T = TypeParam;
  const size_t count = 33;
  const size_t world = static_cast<size_t>(this->world());
  std::vector<T> inout = samples<T>(this->rank(), 0, count);
  this->comm().all_reduce_sum_blocking(inout.data(), count);
  EXPECT_EQ(inout, sum_over_ranks<T>(this->world(), 0, count));

  const std::vector<T> send = samples<T>(this->rank(), 0, world * count);
  std::vector<T> recv(count, T{});
  this->comm().reduce_scatter_sum_blocking(send.data(), recv.data(), count);
  EXPECT_EQ(recv,
            sum_over_ranks<T>(this->world(), static_cast<size_t>(this->rank()) * count, count));

  std::vector<T> buf = samples<T>(this->rank() == 0 ? 0 : kJunkRank, 0, count);
  this->comm().broadcast_blocking(buf.data(), count, 0);
  EXPECT_EQ(buf, samples<T>(0, 0, count));
}

}  // namespace
}  // namespace zt
