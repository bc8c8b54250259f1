// MPI process setup. MpiRuntime initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the
// main thread calls MPI) unless someone already did, and finalises it on destruction if it
// initialised it — but not while an exception unwinds through it: on an error path MPI is left
// to end_mpi_after_error(), which main() calls once it has printed the error. Works without a
// launcher (an MPI singleton: world size 1).
//
// local_rank_by_hostname() numbers the ranks that share a host (by MPI_Get_processor_name), in
// rank order, for mapping ranks to the devices of their node.
#pragma once
// The C interface only: Open MPI's deprecated C++ bindings need libmpi_cxx, which is not linked.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <string>
#include <vector>

namespace zt {

class MpiRuntime {
 public:
  // argc/argv may be null. Throws zt::Error if MPI cannot give MPI_THREAD_FUNNELED.
  MpiRuntime(int* argc, char*** argv);
  MpiRuntime() : MpiRuntime(nullptr, nullptr) {}
  ~MpiRuntime();  // MPI_Finalize, if this object called MPI_Init_thread and no error unwinds
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int thread_level() const { return thread_level_; }  // MPI_THREAD_* provided
  bool initialized_here() const { return initialized_here_; }

 private:
  bool initialized_here_ = false;
  int uncaught_at_start_ = 0;  // std::uncaught_exceptions() when constructed
  int thread_level_ = MPI_THREAD_SINGLE;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// After main() printed an error: if MPI is running, ends it so that the job stops in bounded
// time. An error every rank agreed on (`agreed`) finalises; any other error aborts the whole
// job (MPI_Abort with `exit_code`), even a world of one rank: other ranks may be waiting in a
// collective that this rank will never join, and libraries may hold state that MPI_Finalize
// would trip over (parallel HDF5's file left open by a write that failed crashes in
// MPI_Finalize: FullDisk.ConsolidationThatFillsTheDiskMidWriteEndsWithoutHanging). Never throws.
void end_mpi_after_error(bool agreed, int exit_code);
// MPI_COMM_WORLD's size while MPI is initialised and not finalised; 0 otherwise.
int mpi_world_size_if_running();
// Whether this process is the job's rank 0: MPI_COMM_WORLD's while MPI runs, else the launcher's
// (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID; no launcher: true). The rank that
// prints a warning every rank would print.
bool is_rank_zero_of_launch();

struct LocalRank {
  int local_rank = 0;  // index of this rank among the ranks on its host, in rank order
  int local_size = 1;  // number of ranks on this host
  std::string hostname;
};

// Every rank's `own` string (at most `max_length` bytes, no NUL), indexed by rank (collective
// over comm).
std::vector<std::string> all_gather_strings(MPI_Comm comm, const std::string& own,
                                            size_t max_length);
// Processor names of all ranks of `comm`, indexed by rank (collective over comm).
std::vector<std::string> hostnames(MPI_Comm comm = MPI_COMM_WORLD);
// Every rank's position among the ranks with its host name, from the names indexed by rank.
std::vector<LocalRank> local_ranks_of(const std::vector<std::string>& names);
// This rank's position among the ranks of `comm` on the same host (collective over comm).
LocalRank local_rank_by_hostname(MPI_Comm comm = MPI_COMM_WORLD);
// The CPUs of this rank's CPU AdamW host thread: split_host_worker_cpus over the affinity masks
// of the ranks of `comm` on this host, in local-rank order (collective over comm).
std::vector<int> host_worker_cpus_on_this_host(MPI_Comm comm);
// The GPU a rank drives among the `devices` its host shows it: its local rank, wrapped when the
// host has fewer devices than ranks (they then share, through the staged communicator).
inline int device_for_local_rank(const LocalRank& local, int devices) {
  return devices > 0 ? local.local_rank % devices : 0;
}
// For each rank, how many ranks (itself included) drive the device it drives, from every rank's
// device id (a GPU's UUID, unique across hosts), indexed by rank.
std::vector<int> ranks_sharing_device(const std::vector<std::string>& device_ids);

}  // namespace zt
