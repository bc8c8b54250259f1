// The warning train prints when a launcher's binding leaves a rank fewer CPUs than its OpenMP
// threads (runtime/cpu_placement.h); the mpirun end of it is TrainMpi.RankBoundToFewer....
#include <gtest/gtest.h>

#include <sched.h>
#include <algorithm>

#include <string>
#include <thread>
#include <vector>

#include "runtime/cpu_placement.h"

namespace zt {
namespace {

TEST(CpuPlacement, WarnsOnlyWhenANarrowedMaskHasFewerCpusThanThreads) {
  const std::string w = cpu_oversubscription_warning(16, 1, 16);
  EXPECT_NE(w.find("16 OpenMP threads on 1 CPU "), std::string::npos) << w;
  EXPECT_NE(w.find("the host has 16 CPUs"), std::string::npos) << w;
  EXPECT_NE(w.find("mpirun --bind-to none"), std::string::npos) << w;
  EXPECT_NE(w.find("--cpus-per-task=16"), std::string::npos) << w;
  EXPECT_NE(cpu_oversubscription_warning(8, 4, 32).find("on 4 CPUs"), std::string::npos);
  EXPECT_EQ(cpu_oversubscription_warning(4, 4, 32), "");   // as many threads as CPUs
  EXPECT_EQ(cpu_oversubscription_warning(1, 1, 16), "");   // one thread on its core
  EXPECT_EQ(cpu_oversubscription_warning(16, 2, 2), "");   // the whole host: the user's choice
  EXPECT_EQ(cpu_oversubscription_warning(16, 0, 16), "");  // mask unreadable: nothing claimed
}

TEST(CpuPlacement, CountsThisProcessesMask) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  EXPECT_EQ(affinity_cpu_count(), CPU_COUNT(&mask));
  EXPECT_GE(openmp_thread_count(), 1);
}

// The CPU AdamW's host thread: one CPU per physical core of the mask, without the core of the
// mask's first CPU (the thread that feeds the GPU); the whole mask when that leaves nothing.
TEST(CpuPlacement, HostWorkerCpusLeaveTheFeedingCore) {
  // 8 logical CPUs, hyperthread pairs (0,4) (1,5) (2,6) (3,7).
  const auto pairs = [](int cpu) { return static_cast<int64_t>(cpu % 4); };
  EXPECT_EQ(host_worker_cpus({0, 1, 2, 3, 4, 5, 6, 7}, pairs), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(host_worker_cpus({4, 5, 6, 7}, pairs), (std::vector<int>{5, 6, 7}));
  EXPECT_EQ(host_worker_cpus({2, 6}, pairs), (std::vector<int>{2}));  // one core: shared
  EXPECT_EQ(host_worker_cpus({}, pairs), std::vector<int>{});
  const auto own = [](int cpu) { return static_cast<int64_t>(cpu); };
  EXPECT_EQ(host_worker_cpus({3, 9, 10}, own), (std::vector<int>{9, 10}));
}

// The ranks of one host split the cores their masks share: each keeps one for its feeding thread
// and gets a contiguous run of the rest, none twice; disjoint masks keep their own cores.
TEST(CpuPlacement, RanksOfAHostSplitTheCoresTheirMasksShare) {
  const auto pairs = [](int cpu) { return static_cast<int64_t>(cpu % 8); };  // 8 cores, 16 CPUs
  std::vector<int> all(16);
  for (int i = 0; i < 16; ++i) all[static_cast<size_t>(i)] = i;
  // mpirun --bind-to none: two ranks with the whole host. Feeding cores 0 and 1; 2-4 and 5-7.
  EXPECT_EQ(split_host_worker_cpus({all, all}, pairs),
            (std::vector<std::vector<int>>{{2, 3, 4}, {5, 6, 7}}));
  // Three ranks: 5 spare cores, the lower ranks one more.
  EXPECT_EQ(split_host_worker_cpus({all, all, all}, pairs),
            (std::vector<std::vector<int>>{{3, 4}, {5, 6}, {7}}));
  // One rank: what host_worker_cpus gives it.
  EXPECT_EQ(split_host_worker_cpus({all}, pairs),
            std::vector<std::vector<int>>{host_worker_cpus(all, pairs)});
  // Bound per socket (cores 0-3 and 4-7), two ranks each: each socket split apart.
  const std::vector<int> socket0 = {0, 1, 2, 3, 8, 9, 10, 11},
                         socket1 = {4, 5, 6, 7, 12, 13, 14, 15};
  EXPECT_EQ(split_host_worker_cpus({socket0, socket0, socket1, socket1}, pairs),
            (std::vector<std::vector<int>>{{2}, {3}, {6}, {7}}));
  // Bound to one core each: no spare core, each shares its own (host_worker_cpus).
  EXPECT_EQ(split_host_worker_cpus({{0, 8}, {1, 9}}, pairs),
            (std::vector<std::vector<int>>{{0}, {1}}));
  // More ranks than cores in a shared mask: all share what host_worker_cpus leaves.
  EXPECT_EQ(split_host_worker_cpus({{0, 1}, {0, 1}, {0, 1}}, pairs),
            (std::vector<std::vector<int>>{{1}, {1}, {1}}));
  // Fewer spare cores than ranks (4 ranks, 6 cores): all four share the 2 spare ones alike.
  const std::vector<int> six = {0, 1, 2, 3, 4, 5};
  EXPECT_EQ(split_host_worker_cpus({six, six, six, six}, pairs),
            (std::vector<std::vector<int>>{{4, 5}, {4, 5}, {4, 5}, {4, 5}}));
  // No core is ever given to two ranks when there are enough.
  const auto split = split_host_worker_cpus({all, all, all, all}, pairs);
  std::vector<int64_t> cores;
  for (const auto& cpus : split)
    for (int cpu : cpus) cores.push_back(pairs(cpu));
  std::sort(cores.begin(), cores.end());
  EXPECT_EQ(std::adjacent_find(cores.begin(), cores.end()), cores.end());
  EXPECT_EQ(cores.size(), 4u);  // 8 cores: 4 feeding, 4 spare
}

// Pinning the calling thread: its mask becomes the list, and an empty list changes nothing.
TEST(CpuPlacement, PinsThisThread) {
  const std::vector<int> mine = affinity_cpus();
  ASSERT_FALSE(mine.empty());
  EXPECT_EQ(static_cast<int>(mine.size()), affinity_cpu_count());
  bool pinned = false;
  std::vector<int> seen;
  std::thread([&] {
    pinned = pin_this_thread({mine.back()});
    seen = affinity_cpus();
    EXPECT_FALSE(pin_this_thread({}));
  }).join();
  EXPECT_TRUE(pinned);
  EXPECT_EQ(seen, std::vector<int>{mine.back()});
  EXPECT_EQ(affinity_cpus(), mine) << "another thread's pinning left this one alone";
  EXPECT_GE(physical_core_of(mine.front()), 0);
}

}  // namespace
}  // namespace zt
