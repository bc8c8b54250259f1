#include "runtime/mpi_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <string>

#include "runtime/cpu_placement.h"
#include "runtime/mpi_check.h"
#include "util/error.h"
#include "util/scratch_files.h"

namespace zt {

MpiRuntime::MpiRuntime(int* argc, char*** argv) : uncaught_at_start_(std::uncaught_exceptions()) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) {
    check_mpi(MPI_Query_thread(&thread_level_), "MPI_Query_thread");
  } else {
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &thread_level_), "MPI_Init_thread");
    initialized_here_ = true;
  }
  if (thread_level_ < MPI_THREAD_FUNNELED) {
    if (initialized_here_) MPI_Finalize();
    fail("MPI provides thread level " + std::to_string(thread_level_) +
         ", below MPI_THREAD_FUNNELED");
  }
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
}

MpiRuntime::~MpiRuntime() {
  if (!initialized_here_) return;
  if (std::uncaught_exceptions() > uncaught_at_start_) return;  // end_mpi_after_error decides
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int mpi_world_size_if_running() {
  int initialized = 0, finalized = 0, size = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return 0;
  return MPI_Comm_size(MPI_COMM_WORLD, &size) == MPI_SUCCESS ? size : 0;
}

bool is_rank_zero_of_launch() {
  int rank = 0;
  if (mpi_world_size_if_running() > 0 && MPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS)
    return rank == 0;
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(var)) return std::string(v) == "0";
  return true;
}

void end_mpi_after_error(bool agreed, int exit_code) {
  if (!agreed) remove_scratch_files();  // MPI_Abort ends the process without destructors
  const int world = mpi_world_size_if_running();
  if (world == 0) return;
  if (agreed)
    MPI_Finalize();
  else
    MPI_Abort(MPI_COMM_WORLD, exit_code);
}

std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& own,
                                            size_t max_length) {
  ZT_CHECK(own.size() <= max_length && max_length <= (1u << 20),
           "all_gather_strings: " + std::to_string(own.size()) + " bytes, more than " +
               std::to_string(max_length));
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::string padded = own;
  padded.resize(max_length, '\0');
  std::string all(static_cast<size_t>(size) * max_length, '\0');
  const int width = static_cast<int>(max_length);
  check_mpi(MPI_Allgather(padded.data(), width, MPI_CHAR, all.data(), width, MPI_CHAR, comm),
            "MPI_Allgather");
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const char* s = all.data() + static_cast<size_t>(r) * max_length;
    out.emplace_back(s, std::find(s, s + max_length, '\0'));
  }
  return out;
}

std::vector<std::string> hostnames(MPI_Comm comm) {
  char own[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  check_mpi(MPI_Get_processor_name(own, &length), "MPI_Get_processor_name");
  return all_gather_strings(comm, std::string(own, static_cast<size_t>(length)),
                            MPI_MAX_PROCESSOR_NAME);
}

std::vector<int> ranks_sharing_device(const std::vector<std::string>& device_ids) {
  std::vector<int> out;
  out.reserve(device_ids.size());
  for (const std::string& id : device_ids)
    out.push_back(static_cast<int>(std::count(device_ids.begin(), device_ids.end(), id)));
  return out;
}

std::vector<LocalRank> local_ranks_of(const std::vector<std::string>& names) {
  std::vector<LocalRank> out;
  for (size_t r = 0; r < names.size(); ++r) {
    LocalRank local;
    local.hostname = names[r];
    local.local_rank = static_cast<int>(
        std::count(names.begin(), names.begin() + static_cast<std::ptrdiff_t>(r), names[r]));
    local.local_size = static_cast<int>(std::count(names.begin(), names.end(), names[r]));
    out.push_back(local);
  }
  return out;
}

LocalRank local_rank_by_hostname(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  return local_ranks_of(hostnames(comm))[static_cast<size_t>(rank)];
}

std::vector<int> host_worker_cpus_on_this_host(MPI_Comm comm) {
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  std::string mine;
  for (int cpu : affinity_cpus()) mine += std::to_string(cpu) + ",";
  // CPU_SETSIZE CPUs of at most 4 digits and a comma each.
  const std::vector<std::string> masks = all_gather_strings(comm, mine, 5 * 1024);
  const std::vector<std::string> names = hostnames(comm);
  std::vector<std::vector<int>> here;  // the masks of this host's ranks, by local rank
  for (size_t r = 0; r < names.size(); ++r) {
    if (names[r] != names[static_cast<size_t>(rank)]) continue;
    here.emplace_back();
    for (size_t begin = 0, end; (end = masks[r].find(',', begin)) != std::string::npos;
         begin = end + 1)
      here.back().push_back(std::stoi(masks[r].substr(begin, end - begin)));
  }
  const int local = local_ranks_of(names)[static_cast<size_t>(rank)].local_rank;
  return split_host_worker_cpus(here, physical_core_of)[static_cast<size_t>(local)];
}

}  // namespace zt
