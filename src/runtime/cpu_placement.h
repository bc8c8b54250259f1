// Where a rank's CPU threads can run. A launcher may narrow a rank's affinity mask: Open MPI's
// mpirun binds each rank to a single core when it starts two ranks or fewer, and to a socket
// otherwise, unless told `--bind-to none`. The rank's OpenMP threads (the CPU backend, the CPU
// Adam of optimizer offload, the conversions of the offload and checkpoint paths) then share
// that mask, and a 16-thread CPU Adam bound to one core runs many times slower than on 16.
// train warns when this happens (docs/ARCHITECTURE.md §1, runtime).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zt {

// CPUs in this process's affinity mask (sched_getaffinity); 0 when the mask cannot be read.
int affinity_cpu_count();

// The CPUs of this process's affinity mask, ascending; empty when the mask cannot be read.
std::vector<int> affinity_cpus();

// A key equal for the logical CPUs of one physical core: (package id << 32) | core id from
// /sys/devices/system/cpu/cpuN/topology, or the CPU itself when that cannot be read.
int64_t physical_core_of(int cpu);

// The CPUs for a host thread that works beside the thread feeding the GPU (the offloaded
// optimizer's CPU AdamW): one logical CPU per physical core of `allowed`, leaving out the core of
// allowed.front() for the feeding thread; all of `allowed`, one per core, when that would leave
// none. core_of: physical_core_of, or a test's map.
std::vector<int> host_worker_cpus(const std::vector<int>& allowed,
                                  const std::function<int64_t(int)>& core_of);

// host_worker_cpus for each rank of one host, from every local rank's affinity mask (masks[i]:
// local rank i's), so that ranks whose masks overlap (mpirun --bind-to none gives them all the
// same) do not pin their CPU AdamW threads to the same cores. Ranks with the same mask form a
// group (in the order of its first rank); each group takes the physical cores of its mask that an
// earlier group did not, in the mask's order: the first one per rank for the thread feeding that
// rank's GPU, the rest in contiguous runs (one more for the lower ranks when they do not divide
// evenly), one logical CPU per core. With fewer of the rest than ranks, the group's ranks all
// share the rest (none left: host_worker_cpus of their mask), so that no rank's thread is slower
// than another's. One rank alone: host_worker_cpus(masks[0]).
std::vector<std::vector<int>> split_host_worker_cpus(const std::vector<std::vector<int>>& masks,
                                                     const std::function<int64_t(int)>& core_of);

// Pins the calling thread to `cpus` (pthread_setaffinity_np) and sets its OpenMP team (for the
// parallel regions it starts) to one thread per CPU; threads it starts later inherit the mask.
// False, changing nothing, when cpus is empty or the mask cannot be set.
bool pin_this_thread(const std::vector<int>& cpus);

// OpenMP's thread count for the next parallel region (omp_get_max_threads: OMP_NUM_THREADS, or
// the runtime's default).
int openmp_thread_count();

// "" unless a launcher narrowed the mask (affinity_cpus < host_cpus) below the threads the rank
// will run (threads > affinity_cpus); else one line saying so and how to launch instead.
std::string cpu_oversubscription_warning(int threads, int affinity_cpus, int host_cpus);

}  // namespace zt
