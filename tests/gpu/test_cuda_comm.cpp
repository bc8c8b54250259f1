// Communicators on device buffers: NcclCommunicator (one rank per GPU: the single-rank world of
// a plain run, and mpirun -np 2 on two GPUs, skipped with fewer) and StagedDeviceCommunicator
// (any number of ranks, also sharing one GPU: ctest runs it under mpirun -np 2). Every
// collective against its definition in communicator.h, the rank-tree reduce-scatter bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_devices.h"
#include "comm/cuda/nccl_communicator.h"
#include "comm/cuda/nccl_rank_tree_add.h"
#include "comm/cuda/staged_device_communicator.h"
#include "gpu_test_util.h"
#include "util/error.h"

namespace zt::gpu_test {
namespace {

// all_gather, reduce_scatter, all_reduce, broadcast and barrier on device buffers; rank r
// contributes r + 1 + i/1000 at element i (exact in fp32 for these sizes).
void check_collectives(Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  const size_t count = 1000;
  auto value = [](int r, size_t i) { return static_cast<float>(r + 1) + i / 1024.0f; };
  std::vector<float> mine(count), blocks(count * world);
  for (size_t i = 0; i < count; ++i) mine[i] = value(rank, i);
  for (int r = 0; r < world; ++r)
    for (size_t i = 0; i < count; ++i) blocks[r * count + i] = value(r, i);

  DeviceBuffer<float> send(mine), gathered(count * world);
  comm.all_gather(send.get(), gathered.get(), count).wait();
  EXPECT_TRUE(bitwise_equal(gathered.download(), blocks, "all_gather"));

  // reduce_scatter: every rank sends `blocks`; block `rank` summed over ranks = world·block.
  DeviceBuffer<float> rs_send(blocks), rs_recv(count);
  comm.reduce_scatter_sum(rs_send.get(), rs_recv.get(), count).wait();
  std::vector<float> expected(count);
  for (size_t i = 0; i < count; ++i) expected[i] = static_cast<float>(world) * value(rank, i);
  EXPECT_TRUE(bitwise_equal(rs_recv.download(), expected, "reduce_scatter"));

  // kRankTree (a power-of-two world): each element summed as the balanced tree over the ranks in
  // rank order, (r0 + r1) + (r2 + r3) at 4, on values whose exponents differ by rank so that the
  // sums round and another association gives other bits (checked from 4 ranks on, where one
  // exists); the host forms the same tree in fp32.
  if ((world & (world - 1)) == 0) {
    auto spread = [](int r, size_t e) {
      const auto k = static_cast<int>((static_cast<size_t>(r) * 7919 + e * 104729) % 2001);
      return (1.0f + static_cast<float>(k) / 1048576.0f) * std::ldexp(k % 2 ? -1.0f : 1.0f, 12 * r);
    };
    std::function<float(int, int, size_t)> tree = [&](int lo, int hi, size_t e) -> float {
      if (hi - lo == 1) return spread(lo, e);
      const int mid = (lo + hi) / 2;
      return tree(lo, mid, e) + tree(mid, hi, e);
    };
    std::vector<float> tree_blocks(count * world), tree_expected(count);
    for (size_t e = 0; e < count * world; ++e) tree_blocks[e] = spread(rank, e);
    size_t order_shows = 0;  // elements where the sum in rank order differs from the tree's
    for (size_t i = 0; i < count; ++i) {
      const size_t e = rank * count + i;
      tree_expected[i] = tree(0, world, e);
      float in_rank_order = 0.0f;
      for (int r = 0; r < world; ++r) in_rank_order += spread(r, e);
      order_shows += in_rank_order != tree_expected[i];
    }
    if (world >= 4) {
      EXPECT_GT(order_shows, 0u) << "the values do not tell the orders apart";
    }
    DeviceBuffer<float> tree_send(tree_blocks), tree_recv(count);
    comm.reduce_scatter_sum(tree_send.get(), tree_recv.get(), count, SumOrder::kRankTree).wait();
    EXPECT_TRUE(bitwise_equal(tree_recv.download(), tree_expected, "reduce_scatter rank tree"));
    // The same with the partial sums in a lent device scratch (the engine's planned one): the
    // same bits, and under NCCL every scratch element written (from 4 ranks on; none below). The
    // staged communicator sums on the host, in host scratch of its own, and leaves it alone.
    const size_t scratch_n = rank_tree_scratch_elements(world, count);
    DeviceBuffer<float> lent(std::vector<float>(scratch_n + 1, std::nanf(""))), lent_recv(count);
    comm.reduce_scatter_sum(tree_send.get(), lent_recv.get(), count, SumOrder::kRankTree,
                            lent.get())
        .wait();
    EXPECT_TRUE(bitwise_equal(lent_recv.download(), tree_expected, "rank tree, lent scratch"));
    const std::vector<float> partials = lent.download();
    const bool on_device = std::string(comm.backend_name()) == "nccl";
    for (size_t i = 0; i < scratch_n; ++i) ASSERT_NE(std::isnan(partials[i]), on_device) << i;
    EXPECT_TRUE(std::isnan(partials[scratch_n])) << "written past (N - 2)·count";
  }

  DeviceBuffer<int64_t> counter(std::vector<int64_t>{rank + 1});
  comm.all_reduce_sum(counter.get(), 1).wait();
  EXPECT_EQ(counter.download()[0], static_cast<int64_t>(world) * (world + 1) / 2);

  DeviceBuffer<float> bcast(mine);
  comm.broadcast(bcast.get(), count, world - 1).wait();
  std::vector<float> from_last(count);
  for (size_t i = 0; i < count; ++i) from_last[i] = value(world - 1, i);
  EXPECT_TRUE(bitwise_equal(bcast.download(), from_last, "broadcast"));

  comm.barrier();
  EXPECT_EQ(comm.counters()[CollectiveOp::kAllGather].calls, 1u);
  EXPECT_EQ(comm.counters()[CollectiveOp::kBarrier].calls, 1u);
}

// NCCL needs one GPU per rank: the world of a plain run, or mpirun -np N on N GPUs (one host).
// Empty when this world has them, else why the test skips.
std::string nccl_skip_reason() {
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (cuda_device_count() >= world) return "";
  return "NCCL needs one GPU per rank: " + std::to_string(world) + " ranks, " +
         std::to_string(cuda_device_count()) + " GPU(s) visible";
}

TEST(NcclComm, Collectives) {
  if (const std::string why = nccl_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  NcclCommunicator comm;
  check_collectives(comm);
}

TEST(NcclComm, GroupedCollectivesCompleteTogether) {
  if (const std::string why = nccl_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  NcclCommunicator comm;
  DeviceBuffer<float> a(std::vector<float>(100, 1.0f)), b(std::vector<float>(50, 2.0f));
  comm.group_start();
  CommHandle ha = comm.all_reduce_sum(a.get(), 100);
  CommHandle hb = comm.all_reduce_sum(b.get(), 50);
  comm.group_end();
  hb.wait();
  ha.wait();
  EXPECT_TRUE(bitwise_equal(a.download(), std::vector<float>(100, 1.0f), "grouped a"));
  EXPECT_TRUE(bitwise_equal(b.download(), std::vector<float>(50, 2.0f), "grouped b"));
}

// device_wait: the compute stream waits for the collective on the device; the host does not.
// A backend op issued right after it sees the collective's result; the handle stays pending for
// the host until finish_device_waits().
TEST(NcclComm, DeviceWaitOrdersTheComputeStreamAfterTheCollective) {
  if (const std::string why = nccl_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  auto gpu = make_cuda_backend(rank);  // one host: rank = local rank
  NcclCommunicator comm(MPI_COMM_WORLD, rank);
  comm.set_producer_stream(gpu->stream_handle());
  const size_t count = size_t{1} << 22;  // 16 MiB: the gather takes a while
  const size_t gathered_count = count * static_cast<size_t>(world);
  std::vector<float> ones(count, 1.0f);
  DeviceBuffer<float> send(ones), gathered(gathered_count);
  CommHandle h = comm.all_gather(send.get(), gathered.get(), count);
  comm.device_wait(h);
  EXPECT_TRUE(h.done());
  EXPECT_EQ(comm.pending_device_waits(), 1u);
  gpu->scale_inplace(gathered.get(), 3.0f, static_cast<int64_t>(gathered_count));  // after it
  EXPECT_GE(comm.finish_device_waits(), 0.0);
  EXPECT_EQ(comm.pending_device_waits(), 0u);
  EXPECT_EQ(comm.device_ordered_waits(), 1u);
  gpu->synchronize();
  EXPECT_TRUE(
      bitwise_equal(gathered.download(), std::vector<float>(gathered_count, 3.0f), "ordered"));
}

// The rank-tree reduce-scatter's add (out += in), alone on one GPU: bitwise the host's IEEE add
// in fp32 and fp64, for counts that end mid-block, fill one block and pass the grid's 65535
// blocks (its grid-stride loop), and nothing for a count of 0.
TEST(NcclComm, RankTreeAddKernelIsTheHostsAddBitwise) {
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&stream));
  for (size_t count :
       {size_t{1}, size_t{255}, size_t{256}, size_t{1000003}, size_t{65535} * 256 + 77}) {
    std::vector<float> out = random_floats(count, 7 + count), in = random_floats(count, 9);
    std::vector<double> out64(count), in64(count);
    for (size_t i = 0; i < count; ++i) {
      out64[i] = static_cast<double>(out[i]) / 3.0;
      in64[i] = static_cast<double>(in[i]) * 1e-9;
    }
    DeviceBuffer<float> d_out(out), d_in(in);
    DeviceBuffer<double> d_out64(out64), d_in64(in64);
    launch_rank_tree_add(d_out.get(), d_in.get(), count, DType::kFloat32, stream);
    launch_rank_tree_add(d_out64.get(), d_in64.get(), count, DType::kFloat64, stream);
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < count; ++i) {
      out[i] = out[i] + in[i];
      out64[i] = out64[i] + in64[i];
    }
    EXPECT_TRUE(bitwise_equal(d_out.download(), out, "fp32 count " + std::to_string(count)));
    EXPECT_EQ(d_out64.download(), out64) << "fp64 count " << count;
  }
  DeviceBuffer<float> untouched(std::vector<float>{1.5f});
  launch_rank_tree_add(untouched.get(), untouched.get(), 0, DType::kFloat32, stream);
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(untouched.download(), std::vector<float>{1.5f});
  EXPECT_THROW(launch_rank_tree_add(untouched.get(), untouched.get(), 1, DType::kBf16, stream),
               Error);
  ZT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(StagedComm, CollectivesOnDeviceBuffers) {
  cuda::StagedDeviceCommunicator comm;
  check_collectives(comm);
}

}  // namespace
}  // namespace zt::gpu_test
