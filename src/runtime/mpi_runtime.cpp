#include "runtime/mpi_runtime.h"

#include <algorithm>
#include <exception>
#include <string>

#include "runtime/mpi_check.h"
#include "util/error.h"

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

void end_mpi_after_error(bool agreed, int exit_code) {
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  if (agreed)
    MPI_Finalize();
  else
    MPI_Abort(MPI_COMM_WORLD, exit_code);
}

std::vector<std::string> hostnames(MPI_Comm comm) {
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  std::string own(MPI_MAX_PROCESSOR_NAME, '\0');
  int length = 0;
  check_mpi(MPI_Get_processor_name(own.data(), &length), "MPI_Get_processor_name");
  std::string all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME, '\0');
  check_mpi(MPI_Allgather(own.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                          MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm),
            "MPI_Allgather");
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const char* name = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    names.emplace_back(name, std::find(name, name + MPI_MAX_PROCESSOR_NAME, '\0'));
  }
  return names;
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

}  // namespace zt
