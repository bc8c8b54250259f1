// Where a rank's CPU threads can run. A launcher may narrow a rank's affinity mask: Open MPI's
// mpirun binds each rank to a single core when it starts two ranks or fewer, and to a socket
// otherwise, unless told `--bind-to none`. The rank's OpenMP threads (the CPU backend, the CPU
// Adam of optimizer offload, the conversions of the offload and checkpoint paths) then share
// that mask, and a 16-thread CPU Adam bound to one core runs many times slower than on 16.
// train warns when this happens (docs/ARCHITECTURE.md §1, runtime).
#pragma once
#include <string>

namespace zt {

// CPUs in this process's affinity mask (sched_getaffinity); 0 when the mask cannot be read.
int affinity_cpu_count();

// OpenMP's thread count for the next parallel region (omp_get_max_threads: OMP_NUM_THREADS, or
// the runtime's default).
int openmp_thread_count();

// "" unless a launcher narrowed the mask (affinity_cpus < host_cpus) below the threads the rank
// will run (threads > affinity_cpus); else one line saying so and how to launch instead.
std::string cpu_oversubscription_warning(int threads, int affinity_cpus, int host_cpus);

}  // namespace zt
