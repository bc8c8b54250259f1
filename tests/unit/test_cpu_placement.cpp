// The warning train prints when a launcher's binding leaves a rank fewer CPUs than its OpenMP
// threads (runtime/cpu_placement.h); the mpirun end of it is TrainMpi.RankBoundToFewer....
#include <gtest/gtest.h>
#include <sched.h>

#include <string>

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

}  // namespace
}  // namespace zt
