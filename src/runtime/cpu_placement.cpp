#include "runtime/cpu_placement.h"

#include <omp.h>
#include <sched.h>

namespace zt {

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
