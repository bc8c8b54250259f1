// Communicator semantics beyond the values: byte counters against docs/ARCHITECTURE.md §4's ring
// formulas, handle behaviour (overlap, reverse-order waits, idempotence, moves, destruction),
// argument checks, determinism of float sums and the settings used by timeout reports.
#include <gtest/gtest.h>

#include <mpi.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm_test_support.h"
#include "util/error.h"

namespace zt {
namespace {

// ---- byte counters ----

// Bytes sent by one rank, written out per world size for the worlds the tests run at.
uint64_t expected_all_reduce_bytes_40(int world) {  // all_reduce of 10 float32 = 40 bytes
  switch (world) {
    case 1:
      return 0;
    case 2:
      return 40;  // 2·(1/2)·40
    case 4:
      return 60;  // 2·(3/4)·40
    default:
      return 2 * 40 * static_cast<uint64_t>(world - 1) / static_cast<uint64_t>(world);
  }
}
uint64_t expected_broadcast_bytes_7(int world) {  // broadcast of 7 uint8 = 7 bytes
  switch (world) {
    case 1:
      return 0;
    case 2:
      return 3;  // ⌊7·1/2⌋
    case 4:
      return 5;  // ⌊7·3/4⌋
    default:
      return 7 * static_cast<uint64_t>(world - 1) / static_cast<uint64_t>(world);
  }
}

TEST_F(CommTest, CountersFollowTheRingConvention) {
  const uint64_t n = static_cast<uint64_t>(world());
  std::vector<float> f_send(10, 1.0f), f_recv(n * 10);
  std::vector<double> d_send(n * 3, 1.0), d_recv(3);
  std::vector<float> f_inout(10, 1.0f);
  std::vector<uint8_t> bytes(7, 1);

  comm().all_gather_blocking(f_send.data(), f_recv.data(), 10);
  comm().all_gather_blocking(f_send.data(), f_recv.data(), 10);
  comm().reduce_scatter_sum_blocking(d_send.data(), d_recv.data(), 3);
  comm().all_reduce_sum_blocking(f_inout.data(), 10);
  comm().all_reduce_sum_blocking(f_inout.data(), 0);
  comm().broadcast_blocking(bytes.data(), 7, 0);
  comm().barrier();

  const CommCounters& c = comm().counters();
  EXPECT_EQ(c[CollectiveOp::kAllGather].calls, 2u);
  EXPECT_EQ(c[CollectiveOp::kAllGather].elements, 2 * n * 10);
  EXPECT_EQ(c[CollectiveOp::kAllGather].bytes_sent, 2 * (n - 1) * 10 * 4);
  EXPECT_EQ(c[CollectiveOp::kReduceScatter].calls, 1u);
  EXPECT_EQ(c[CollectiveOp::kReduceScatter].elements, n * 3);
  EXPECT_EQ(c[CollectiveOp::kReduceScatter].bytes_sent, (n - 1) * 3 * 8);
  EXPECT_EQ(c[CollectiveOp::kAllReduce].calls, 2u);
  EXPECT_EQ(c[CollectiveOp::kAllReduce].elements, 10u);
  EXPECT_EQ(c[CollectiveOp::kAllReduce].bytes_sent, expected_all_reduce_bytes_40(world()));
  EXPECT_EQ(c[CollectiveOp::kBroadcast].calls, 1u);
  EXPECT_EQ(c[CollectiveOp::kBroadcast].elements, 7u);
  EXPECT_EQ(c[CollectiveOp::kBroadcast].bytes_sent, expected_broadcast_bytes_7(world()));
  EXPECT_EQ(c[CollectiveOp::kBarrier].calls, 1u);
  EXPECT_EQ(c[CollectiveOp::kBarrier].bytes_sent, 0u);
  EXPECT_EQ(c.total_bytes_sent(), 2 * (n - 1) * 40 + (n - 1) * 24 +
                                      expected_all_reduce_bytes_40(world()) +
                                      expected_broadcast_bytes_7(world()));

  comm().reset_counters();
  for (const CollectiveCounter& counter : comm().counters().by_op) {
    EXPECT_EQ(counter.calls, 0u);
    EXPECT_EQ(counter.elements, 0u);
    EXPECT_EQ(counter.bytes_sent, 0u);
  }
}

// docs/ARCHITECTURE.md §4, per step and rank in elements of Ψ: stage 0 all-reduce 2Ψ(N−1)/N; stage
// 1/2 reduce-scatter Ψ(N−1)/N + all-gather Ψ(N−1)/N; stage 3 two all-gathers + one reduce-scatter.
TEST_F(CommTest, CountersReproduceTheZeroStageVolumes) {
  const uint64_t n = static_cast<uint64_t>(world());
  const size_t shard = 48;  // Ψ = N·48 fp32 elements, split evenly
  const uint64_t psi = n * shard;
  std::vector<float> full(psi, 1.0f), part(shard, 1.0f), gathered(psi);

  comm().all_reduce_sum_blocking(full.data(), psi);
  const uint64_t stage0 = comm().counters().total_bytes_sent();
  comm().reset_counters();

  comm().reduce_scatter_sum_blocking(full.data(), part.data(), shard);
  comm().all_gather_blocking(part.data(), gathered.data(), shard);
  const uint64_t stage2 = comm().counters().total_bytes_sent();
  comm().reset_counters();

  comm().all_gather_blocking(part.data(), gathered.data(), shard);
  comm().all_gather_blocking(part.data(), gathered.data(), shard);
  comm().reduce_scatter_sum_blocking(full.data(), part.data(), shard);
  const uint64_t stage3 = comm().counters().total_bytes_sent();

  EXPECT_EQ(stage0, 2 * psi * (n - 1) / n * 4);
  EXPECT_EQ(stage2, stage0);
  EXPECT_EQ(stage3, 3 * psi * (n - 1) / n * 4);
  EXPECT_EQ(comm().counters()[CollectiveOp::kAllGather].elements, 2 * psi);
}

TEST(RingBytesSent, MatchesTheFormulasAtOtherWorldSizes) {
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kAllGather, 8, 800, 2), 1400u);   // 7/8 · 1600
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kReduceScatter, 3, 30, 4), 80u);  // 2/3 · 120
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kAllReduce, 8, 100, 4), 700u);    // 2·7/8 · 400
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kAllReduce, 3, 10, 1), 13u);      // ⌊2·2/3 · 10⌋
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kBroadcast, 3, 10, 1), 6u);       // ⌊2/3 · 10⌋
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kAllReduce, 1, 1000, 4), 0u);
  EXPECT_EQ(ring_bytes_sent(CollectiveOp::kBarrier, 4, 0, 1), 0u);
}

// ---- handles ----

TEST_F(CommTest, OverlappingCollectivesMayBeWaitedInReverseOrder) {
  const size_t n = static_cast<size_t>(world());
  const std::vector<float> send = samples<float>(rank(), 0, 101);
  std::vector<float> gathered(n * 101);
  std::vector<int64_t> summed = samples<int64_t>(rank(), 0, 57);
  std::vector<double> bcast = samples<double>(rank(), 0, 13);

  CommHandle gather = comm().all_gather(send.data(), gathered.data(), 101);
  CommHandle reduce = comm().all_reduce_sum(summed.data(), 57);
  CommHandle broadcast = comm().broadcast(bcast.data(), 13, world() - 1);
  broadcast.wait();
  reduce.wait();
  gather.wait();

  std::vector<float> expected_gather;
  for (int r = 0; r < world(); ++r) append(expected_gather, samples<float>(r, 0, 101));
  EXPECT_EQ(gathered, expected_gather);
  EXPECT_EQ(summed, sum_over_ranks<int64_t>(world(), 0, 57));
  EXPECT_EQ(bcast, samples<double>(world() - 1, 0, 13));
}

TEST_F(CommTest, TestPollsUntilComplete) {
  std::vector<int32_t> inout = samples<int32_t>(rank(), 0, 999);
  CommHandle handle = comm().all_reduce_sum(inout.data(), inout.size());
  while (!handle.test()) {
  }
  EXPECT_TRUE(handle.done());
  EXPECT_TRUE(handle.test());  // stays complete
  EXPECT_EQ(inout, sum_over_ranks<int32_t>(world(), 0, 999));
}

TEST_F(CommTest, HandlesAreMoveOnlyAndWaitingIsIdempotent) {
  static_assert(!std::is_copy_constructible_v<CommHandle>);
  static_assert(!std::is_copy_assignable_v<CommHandle>);
  static_assert(std::is_nothrow_move_constructible_v<CommHandle>);

  CommHandle empty;
  EXPECT_TRUE(empty.done());
  empty.wait();

  std::vector<double> inout = samples<double>(rank(), 0, 17);
  CommHandle first = comm().all_reduce_sum(inout.data(), inout.size());
  CommHandle moved = std::move(first);
  EXPECT_TRUE(first.done());  // NOLINT(bugprone-use-after-move): moved-from is empty
  first.wait();
  moved.wait();
  moved.wait();
  EXPECT_TRUE(moved.done());
  EXPECT_EQ(inout, sum_over_ranks<double>(world(), 0, 17));
}

TEST_F(CommTest, AssigningOverAPendingHandleWaitsForIt) {
  std::vector<int64_t> a = samples<int64_t>(rank(), 0, 5);
  std::vector<int64_t> b = samples<int64_t>(rank(), 100, 5);
  CommHandle handle = comm().all_reduce_sum(a.data(), a.size());
  handle = comm().all_reduce_sum(b.data(), b.size());
  EXPECT_EQ(a, sum_over_ranks<int64_t>(world(), 0, 5));
  handle.wait();
  EXPECT_EQ(b, sum_over_ranks<int64_t>(world(), 100, 5));
}

TEST_F(CommTest, DestroyingAnUnwaitedHandleWaits) {
  std::vector<float> inout = samples<float>(rank(), 0, 300);
  { CommHandle discarded = comm().all_reduce_sum(inout.data(), inout.size()); }
  EXPECT_EQ(inout, sum_over_ranks<float>(world(), 0, 300));
}

// ---- argument checks (thrown on every rank before anything is issued) ----

TEST_F(CommTest, InvalidCallsThrowWithoutIssuingAnything) {
  const size_t n = static_cast<size_t>(world());
  std::vector<uint16_t> bf16(n * 4, 0);
  std::vector<float> buf(n * 4 + 8, 0.0f);
  EXPECT_THROW(comm().all_reduce_sum(DType::kBf16, bf16.data(), 4), Error);
  EXPECT_THROW(comm().reduce_scatter_sum(DType::kBf16, bf16.data(), bf16.data() + n * 4 - 4, 1),
               Error);
  EXPECT_THROW(comm().broadcast(buf.data(), 4, world()), Error);
  EXPECT_THROW(comm().broadcast(buf.data(), 4, -1), Error);
  // send overlapping recv without being this rank's block
  const size_t own = static_cast<size_t>(rank()) * 4;
  EXPECT_THROW(comm().all_gather(buf.data() + own + 1, buf.data(), 4), Error);
  EXPECT_THROW(comm().reduce_scatter_sum(buf.data(), buf.data() + 1, 2), Error);
  EXPECT_THROW(comm().all_reduce_sum(static_cast<float*>(nullptr), 3), Error);
  EXPECT_THROW(comm().all_reduce_sum(buf.data(), static_cast<size_t>(INT_MAX) + 1), Error);
  for (const CollectiveCounter& counter : comm().counters().by_op) EXPECT_EQ(counter.calls, 0u);

  // The communicator is still in step on every rank.
  std::vector<int32_t> inout = samples<int32_t>(rank(), 0, 9);
  comm().all_reduce_sum_blocking(inout.data(), inout.size());
  EXPECT_EQ(inout, sum_over_ranks<int32_t>(world(), 0, 9));
}

// ---- determinism ----

TEST_F(CommTest, FloatSumsAreBitwiseReproducibleAndEqualOnAllRanks) {
  const size_t count = 10007;
  std::mt19937 rng(1234u + static_cast<unsigned>(rank()));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> input(count);
  for (float& x : input) x = dist(rng) * std::pow(10.0f, static_cast<float>(rng() % 7) - 3.0f);

  std::vector<float> first = input, second = input;
  comm().all_reduce_sum_blocking(first.data(), count);
  comm().all_reduce_sum_blocking(second.data(), count);
  EXPECT_EQ(std::memcmp(first.data(), second.data(), count * sizeof(float)), 0);

  // Every rank holds the same bits.
  const size_t n = static_cast<size_t>(world());
  std::vector<float> everyone(n * count);
  comm().all_gather_blocking(first.data(), everyone.data(), count);
  for (size_t r = 0; r < n; ++r) {
    EXPECT_EQ(std::memcmp(everyone.data() + r * count, first.data(), count * sizeof(float)), 0)
        << "rank " << r << " holds different bits";
  }

  // And the sum is right to fp32 reduction-order tolerance.
  std::vector<double> exact(count, 0.0), magnitude(count, 0.0);
  std::vector<float> all_inputs(n * count);
  comm().all_gather_blocking(input.data(), all_inputs.data(), count);
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      exact[i] += all_inputs[r * count + i];
      magnitude[i] += std::fabs(all_inputs[r * count + i]);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    ASSERT_NEAR(first[i], exact[i], 1e-6 * magnitude[i] + 1e-30) << "element " << i;
  }

  // reduce_scatter is reproducible too.
  std::vector<float> rs_send(n * 31), rs_a(31), rs_b(31);
  for (float& x : rs_send) x = dist(rng);
  comm().reduce_scatter_sum_blocking(rs_send.data(), rs_a.data(), 31);
  comm().reduce_scatter_sum_blocking(rs_send.data(), rs_b.data(), 31);
  EXPECT_EQ(std::memcmp(rs_a.data(), rs_b.data(), 31 * sizeof(float)), 0);
}

// ---- settings ----

TEST_F(CommTest, ContextAndTimeoutSettings) {
  EXPECT_EQ(comm().step(), -1);
  comm().set_context(7, "backward");
  EXPECT_EQ(comm().step(), 7);
  EXPECT_EQ(comm().phase(), "backward");
  EXPECT_DOUBLE_EQ(comm().timeout_seconds(), 60.0);
  EXPECT_THROW(comm().set_timeout_seconds(-1.0), Error);
  EXPECT_THROW(comm().set_timeout_seconds(std::nan("")), Error);
  EXPECT_DOUBLE_EQ(comm().timeout_seconds(), 60.0);
  // 0, infinity and timeouts too long to mean anything are "none": a collective waited under
  // them completes (a deadline of now + 1e30 s would overflow the clock's nanoseconds).
  for (double none : {0.0, 1e10, 1e30, std::numeric_limits<double>::infinity()}) {
    comm().set_timeout_seconds(none);
    EXPECT_EQ(comm().timeout_seconds(), std::numeric_limits<double>::infinity()) << none;
    double x = 1.0;
    comm().all_reduce_sum_blocking(&x, 1);
    EXPECT_EQ(x, comm().world_size()) << none;
  }
  comm().set_timeout_seconds(60.0);
  EXPECT_DOUBLE_EQ(MpiCommunicator().timeout_seconds(), Communicator::kDefaultTimeoutSeconds);
  EXPECT_STREQ(comm().backend_name(), "mpi");
}

TEST_F(CommTest, UsesAPrivateDuplicateOfTheWorld) {
  int result = MPI_UNEQUAL;
  ASSERT_EQ(MPI_Comm_compare(comm().comm(), MPI_COMM_WORLD, &result), MPI_SUCCESS);
  EXPECT_EQ(result, MPI_CONGRUENT);
  int world_rank = -1, world_size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT_EQ(rank(), world_rank);
  EXPECT_EQ(world(), world_size);
}

}  // namespace
}  // namespace zt
