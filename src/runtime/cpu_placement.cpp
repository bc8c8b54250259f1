#include "runtime/cpu_placement.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <set>

namespace zt {

std::vector<int> affinity_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  return cpus;
}

int64_t physical_core_of(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  int64_t package = -1, core = -1;
  std::ifstream(dir + "physical_package_id") >> package;
  std::ifstream(dir + "core_id") >> core;
  if (package < 0 || core < 0) return cpu;
  return (package << 32) | core;
}

std::vector<int> host_worker_cpus(const std::vector<int>& allowed,
                                  const std::function<int64_t(int)>& core_of) {
  std::vector<int> out, all;
  if (allowed.empty()) return out;
  const int64_t feeding = core_of(allowed.front());
  std::set<int64_t> seen, seen_all;
  for (int cpu : allowed) {
    const int64_t core = core_of(cpu);
    if (seen_all.insert(core).second) all.push_back(cpu);
    if (core != feeding && seen.insert(core).second) out.push_back(cpu);
  }
  return out.empty() ? all : out;
}

std::vector<std::vector<int>> split_host_worker_cpus(const std::vector<std::vector<int>>& masks,
                                                     const std::function<int64_t(int)>& core_of) {
  std::vector<std::vector<int>> out(masks.size());
  std::vector<bool> placed(masks.size(), false);
  std::set<int64_t> taken;  // the cores an earlier group took
  for (size_t first = 0; first < masks.size(); ++first) {
    if (placed[first]) continue;
    std::vector<size_t> group;  // the ranks with this mask
    for (size_t r = first; r < masks.size(); ++r)
      if (!placed[r] && masks[r] == masks[first]) group.push_back(r), placed[r] = true;
    std::vector<int> cores;  // one CPU per physical core not yet taken, in the mask's order
    for (int cpu : masks[first])
      if (taken.insert(core_of(cpu)).second) cores.push_back(cpu);
    const size_t k = group.size();
    const size_t spare = cores.size() > k ? cores.size() - k : 0;  // after the feeding cores
    const auto after_feeding =
        cores.begin() + static_cast<std::ptrdiff_t>(std::min(k, cores.size()));
    size_t next = 0;
    for (size_t i = 0; i < k; ++i) {
      if (spare < k) {  // fewer spare cores than ranks: all of them share the spare ones
        out[group[i]].assign(after_feeding, cores.end());
        if (out[group[i]].empty()) out[group[i]] = host_worker_cpus(masks[group[i]], core_of);
        continue;
      }
      const size_t count = spare / k + (i < spare % k ? 1 : 0);
      out[group[i]].assign(after_feeding + static_cast<std::ptrdiff_t>(next),
                           after_feeding + static_cast<std::ptrdiff_t>(next + count));
      next += count;
    }
  }
  return out;
}

bool pin_this_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return false;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int cpu : cpus)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &mask);
  if (pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask) != 0) return false;
  omp_set_num_threads(static_cast<int>(cpus.size()));
  return true;
}

int affinity_cpu_count() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return 0;
  return CPU_COUNT(&mask);
}

int openmp_thread_count() {
  return omp_get_max_threads();
}

std::string cpu_oversubscription_warning(int threads, int affinity_cpus, int host_cpus) {
  if (affinity_cpus <= 0 || affinity_cpus >= host_cpus || threads <= affinity_cpus) return "";
  const auto cpus = [](int n) { return std::to_string(n) + (n == 1 ? " CPU" : " CPUs"); };
  return "runs " + std::to_string(threads) + " OpenMP threads on " + cpus(affinity_cpus) +
         " (its affinity mask; the host has " + cpus(host_cpus) +
         "): the CPU optimizer, the offload conversions and the CPU backend share them. Open "
         "MPI's mpirun binds each rank to one core when it starts two ranks or fewer: launch "
         "with `mpirun --bind-to none` (or srun --cpus-per-task=" +
         std::to_string(threads) + "), or lower OMP_NUM_THREADS";
}

}  // namespace zt
