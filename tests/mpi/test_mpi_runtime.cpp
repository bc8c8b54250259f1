// MpiRuntime and the hostname-based local rank numbering.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cpu_placement.h"
#include "runtime/mpi_runtime.h"
#include "util/error.h"

namespace zt {
namespace {

TEST(MpiRuntime, ProvidesFunneledThreadsAndNestsWithoutFinalizing) {
  int provided = MPI_THREAD_SINGLE;
  ASSERT_EQ(MPI_Query_thread(&provided), MPI_SUCCESS);
  EXPECT_GE(provided, MPI_THREAD_FUNNELED);
  {
    MpiRuntime nested;  // MPI is already up (main's runtime): this one must not finalise it
    EXPECT_FALSE(nested.initialized_here());
    EXPECT_GE(nested.thread_level(), MPI_THREAD_FUNNELED);
    int world_rank = -1, world_size = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    EXPECT_EQ(nested.world_rank(), world_rank);
    EXPECT_EQ(nested.world_size(), world_size);
  }
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);
}

TEST(MpiRuntime, HostnamesAreGatheredInRankOrder) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char own[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(own, &length);
  const std::vector<std::string> names = hostnames();
  ASSERT_EQ(names.size(), static_cast<size_t>(size));
  EXPECT_EQ(names[static_cast<size_t>(rank)], std::string(own, static_cast<size_t>(length)));
  for (const std::string& name : names) EXPECT_FALSE(name.empty());
}

TEST(MpiRuntime, LocalRanksNumberTheRanksOfEachHostFromZero) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const LocalRank local = local_rank_by_hostname();
  const int mine[2] = {local.local_rank, local.local_size};
  std::vector<int> all(2 * static_cast<size_t>(size));
  ASSERT_EQ(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, MPI_COMM_WORLD), MPI_SUCCESS);

  const std::vector<std::string> names = hostnames();
  EXPECT_EQ(local.hostname, names[static_cast<size_t>(rank)]);
  for (int r = 0; r < size; ++r) {
    int before = 0, same_host = 0;
    for (int q = 0; q < size; ++q) {
      if (names[static_cast<size_t>(q)] != names[static_cast<size_t>(r)]) continue;
      ++same_host;
      if (q < r) ++before;
    }
    EXPECT_EQ(all[2 * static_cast<size_t>(r)], before) << "local rank of rank " << r;
    EXPECT_EQ(all[2 * static_cast<size_t>(r) + 1], same_host) << "local size of rank " << r;
  }
  // Every rank of a single-host job (this sandbox) is local: local rank = rank.
  if (local.local_size == size) {
    EXPECT_EQ(local.local_rank, rank);
  }
}

// Two nodes of two ranks, placed by block and round-robin: each node numbers its ranks from 0,
// and the CUDA device a rank would drive is its local rank (wrapped past the node's GPUs).
TEST(MpiRuntime, PlacementAndDevicesFollowEachNodesOwnRanks) {
  for (const auto& [names, locals] :
       {std::pair{std::vector<std::string>{"nodeA", "nodeA", "nodeB", "nodeB"},
                  std::vector<int>{0, 1, 0, 1}},
        std::pair{std::vector<std::string>{"nodeA", "nodeB", "nodeA", "nodeB"},
                  std::vector<int>{0, 0, 1, 1}}}) {
    const std::vector<LocalRank> placed = local_ranks_of(names);
    ASSERT_EQ(placed.size(), names.size());
    for (size_t r = 0; r < names.size(); ++r) {
      EXPECT_EQ(placed[r].hostname, names[r]);
      EXPECT_EQ(placed[r].local_rank, locals[r]) << "rank " << r;
      EXPECT_EQ(placed[r].local_size, 2) << "rank " << r;
      EXPECT_EQ(device_for_local_rank(placed[r], 8), locals[r]) << "rank " << r;
      EXPECT_EQ(device_for_local_rank(placed[r], 1), 0) << "rank " << r << ": one shared GPU";
    }
  }
}

// Ranks that drive one GPU are told apart by the GPU's id, not by their host: one id on every
// rank (all share), ids paired across two hosts, and one GPU per rank (none shares, though a
// per-task binding shows each rank a single device 0).
TEST(MpiRuntime, RanksSharingADeviceAreCountedByItsId) {
  using Ids = std::vector<std::string>;
  EXPECT_EQ(ranks_sharing_device(Ids{"gpu-a", "gpu-a", "gpu-a"}), (std::vector<int>{3, 3, 3}));
  EXPECT_EQ(ranks_sharing_device(Ids{"gpu-a", "gpu-b", "gpu-a", "gpu-c"}),
            (std::vector<int>{2, 1, 2, 1}));
  EXPECT_EQ(ranks_sharing_device(Ids{"gpu-a", "gpu-b", "gpu-c", "gpu-d"}),
            (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(ranks_sharing_device(Ids{}), std::vector<int>{});
}

// all_gather_strings: every rank's string of its own length, in rank order; a longer one than
// the width is refused.
// Device selection under each launcher's binding, simulated: a job's ranks with their host names
// and the physical GPUs each rank's CUDA_VISIBLE_DEVICES shows it (what cudaGetDeviceCount and
// device i then are). Each rank picks device_for_local_rank among what it sees, the job counts the
// ranks per physical GPU (by UUID, as make_cuda_device does), and NCCL is used only when no GPU
// is shared.
struct Binding {
  std::string launcher;
  std::vector<std::string> hosts;                 // per rank
  std::vector<std::vector<std::string>> visible;  // per rank: physical GPUs, in CUDA's order
  std::vector<std::string> want;                  // per rank: the physical GPU it must drive
  bool shares = false;                            // whether the job must take the staged comm
};

TEST(MpiRuntime, EveryLauncherBindingDrivesTheIntendedGpus) {
  using S = std::vector<std::string>;
  const S node4 = {"n0-gpu0", "n0-gpu1", "n0-gpu2", "n0-gpu3"};
  const std::vector<Binding> bindings = {
      // mpirun -np 4 on one 4-GPU node: every rank sees all four; local rank picks.
      {"mpirun, no binding", {"n0", "n0", "n0", "n0"}, {node4, node4, node4, node4}, node4, false},
      // srun --gpus-per-task=1 (or --gpu-bind=single:1): each task sees its own GPU as device 0.
      {"srun --gpus-per-task=1",
       {"n0", "n0", "n0", "n0"},
       {{"n0-gpu0"}, {"n0-gpu1"}, {"n0-gpu2"}, {"n0-gpu3"}},
       node4,
       false},
      // Two nodes, srun --ntasks-per-node=2 --gpus-per-task=1, ranks placed round-robin.
      {"srun two nodes, cyclic",
       {"n0", "n1", "n0", "n1"},
       {{"n0-gpu0"}, {"n1-gpu0"}, {"n0-gpu1"}, {"n1-gpu1"}},
       {"n0-gpu0", "n1-gpu0", "n0-gpu1", "n1-gpu1"},
       false},
      // CUDA_VISIBLE_DEVICES=2,3 exported to both ranks of mpirun -np 2: the list's order.
      {"CUDA_VISIBLE_DEVICES=2,3",
       {"n0", "n0"},
       {{"n0-gpu2", "n0-gpu3"}, {"n0-gpu2", "n0-gpu3"}},
       {"n0-gpu2", "n0-gpu3"},
       false},
      // CUDA_VISIBLE_DEVICES=3,1 (a reordered list): device 0 is physical GPU 3.
      {"CUDA_VISIBLE_DEVICES=3,1",
       {"n0", "n0"},
       {{"n0-gpu3", "n0-gpu1"}, {"n0-gpu3", "n0-gpu1"}},
       {"n0-gpu3", "n0-gpu1"},
       false},
      // Four ranks on two visible GPUs: they wrap and share, so the whole job goes staged.
      {"4 ranks, CUDA_VISIBLE_DEVICES=0,1",
       {"n0", "n0", "n0", "n0"},
       {{"n0-gpu0", "n0-gpu1"},
        {"n0-gpu0", "n0-gpu1"},
        {"n0-gpu0", "n0-gpu1"},
        {"n0-gpu0", "n0-gpu1"}},
       {"n0-gpu0", "n0-gpu1", "n0-gpu0", "n0-gpu1"},
       true},
      // One lent GPU, two ranks (the CI's and a loan's case): both on it, staged.
      {"2 ranks, one GPU", {"n0", "n0"}, {{"n0-gpu0"}, {"n0-gpu0"}}, {"n0-gpu0", "n0-gpu0"}, true},
  };
  for (const Binding& b : bindings) {
    SCOPED_TRACE(b.launcher);
    const std::vector<LocalRank> local = local_ranks_of(b.hosts);
    std::vector<std::string> driven;
    for (size_t r = 0; r < b.hosts.size(); ++r) {
      const std::vector<std::string>& seen = b.visible[r];
      const int device = device_for_local_rank(local[r], static_cast<int>(seen.size()));
      driven.push_back(seen[static_cast<size_t>(device)]);
    }
    EXPECT_EQ(driven, b.want);
    const std::vector<int> sharing = ranks_sharing_device(driven);
    EXPECT_EQ(*std::max_element(sharing.begin(), sharing.end()) > 1, b.shares);
  }
}

TEST(MpiRuntime, AllGatherStringsKeepsEachRanksStringInRankOrder) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // rank r: (r mod 8) + 1 copies of a letter of its own.
  auto string_of = [](int r) {
    return std::string(static_cast<size_t>(r % 8) + 1, static_cast<char>('a' + r % 26));
  };
  const std::vector<std::string> got = all_gather_strings(MPI_COMM_WORLD, string_of(rank), 8);
  ASSERT_EQ(got.size(), static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], string_of(r));
  EXPECT_THROW(all_gather_strings(MPI_COMM_WORLD, "123456789", 8), Error);  // before any MPI call
}

// The CPU AdamW's CPUs of each rank: the split of its host's masks, each rank's own entry (every
// rank here shares one host); a subset of its own mask; and, where the host has a spare core for
// each rank beyond the feeding ones, apart from every other rank's.
TEST(MpiRuntime, TheRanksOfAHostPinTheirCpuAdamThreadsApart) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::vector<int> mine = host_worker_cpus_on_this_host(MPI_COMM_WORLD);
  const std::vector<int> mask = affinity_cpus();
  ASSERT_FALSE(mine.empty());
  for (int cpu : mine) EXPECT_TRUE(std::count(mask.begin(), mask.end(), cpu)) << cpu;
  // Every rank's mask and result, gathered as fixed-size rows (-1 padded).
  constexpr int kMax = CPU_SETSIZE;
  std::vector<int> row(2 * kMax, -1), all(static_cast<size_t>(size) * 2 * kMax);
  std::copy_n(mask.begin(), std::min<size_t>(mask.size(), kMax), row.begin());
  std::copy_n(mine.begin(), std::min<size_t>(mine.size(), kMax), row.begin() + kMax);
  MPI_Allgather(row.data(), 2 * kMax, MPI_INT, all.data(), 2 * kMax, MPI_INT, MPI_COMM_WORLD);
  std::vector<std::vector<int>> masks(static_cast<size_t>(size)), got(masks.size());
  for (size_t r = 0; r < masks.size(); ++r)
    for (int i = 0; i < 2 * kMax; ++i) {
      const int cpu = all[r * 2 * kMax + static_cast<size_t>(i)];
      if (cpu >= 0) (i < kMax ? masks[r] : got[r]).push_back(cpu);
    }
  EXPECT_EQ(got, split_host_worker_cpus(masks, physical_core_of));
  std::vector<int64_t> cores, mask_cores;
  for (const auto& cpus : got)
    for (int cpu : cpus) cores.push_back(physical_core_of(cpu));
  for (int cpu : mask) mask_cores.push_back(physical_core_of(cpu));
  std::sort(mask_cores.begin(), mask_cores.end());
  mask_cores.erase(std::unique(mask_cores.begin(), mask_cores.end()), mask_cores.end());
  const bool same_masks = std::all_of(masks.begin(), masks.end(),
                                      [&](const std::vector<int>& m) { return m == masks[0]; });
  if (same_masks && mask_cores.size() >= 2 * static_cast<size_t>(size)) {
    std::sort(cores.begin(), cores.end());
    EXPECT_EQ(std::adjacent_find(cores.begin(), cores.end()), cores.end())
        << "two ranks' CPU AdamW threads share a core";
  }
}

}  // namespace
}  // namespace zt
