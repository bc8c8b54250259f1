// NcclCommunicator: the Communicator interface (communicator.h) on NCCL, for DEVICE buffers.
// Built only when CUDA and NCCL are found (ZEROTRAIN_HAVE_NCCL).
//
// Setup (collective over the parent MPI communicator): the local GPU is this rank's index among
// the ranks on its host (local_rank_by_hostname), unless a device is given; rank 0 creates the
// ncclUniqueId and broadcasts it with MPI_Bcast; every rank calls ncclCommInitRank. NCCL refuses
// two ranks of one communicator on the same GPU (docs/ARCHITECTURE.md §7): for tests that share a
// GPU, use StagedDeviceCommunicator (comm/cuda/staged_device_communicator.h) instead.
//
// Streams and events: collectives run on a dedicated comm stream. When a producer stream is set
// (the backend's compute stream), each collective first makes the comm stream wait on an event
// recorded on the producer, so it reads its buffers only after the compute work queued before
// the call. After the collective an event is recorded on the comm stream; the handle's poll is
// cudaEventQuery on it (plus ncclCommGetAsyncError, which turns a failed peer into zt::Error),
// so CommHandle::wait/test and the timeout report work as for MPI. device_wait(handle) makes the
// producer stream (the compute stream, which consumes the results) wait for that event on the
// device, with no host wait; make_stream_wait lets any other stream wait for the comm stream.
//
// Grouping: group_start()/group_end() bracket several collectives (bucketed ops) in one
// ncclGroupStart/ncclGroupEnd. Their handles complete together, after group_end(); waiting on
// one before group_end() times out (it is reported like any timeout).
//
// Timeout / abort: CommHandle's timeout report calls abort_job, which calls MPI_Abort: the job's
// processes end, and their kernels with their GPU contexts (ncclCommAbort is not called: it can
// wait for stuck peers). While an error unwinds, the communicator is not destroyed (its
// finalisation could wait for peers): the process's exit ends it after main reports the error.
//
// Limit: --comm-timeout bounds the host's waits for collectives. A host blocked in a CUDA call
// behind a collective that never completes (a copy or a cudaFree that waits for the device) is
// not bounded by it; Slurm's time limit or the peers' timeouts end such a job.
//
// Counters: the base class counts calls, elements and ring bytes when a collective is issued.
// Barrier: an all_reduce of one int on the device, waited for on the host.
// Determinism: NCCL's reduction order is fixed for a given world size, topology, algorithm,
// protocol, channel count and NCCL version; pin NCCL_ALGO/NCCL_PROTO and the NCCL version for
// bitwise reproducibility across machines, or use --world-invariant, whose sums NCCL does not
// order (the rank-tree reduce-scatter adds with zerotrain's own kernel).
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace zt {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `parent`. device < 0: the local rank by hostname. MPI must be initialised.
  explicit NcclCommunicator(MPI_Comm parent = MPI_COMM_WORLD, int device = -1);
  ~NcclCommunicator() override;  // ncclCommDestroy after the comm stream drained
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend_name() const override { return "nccl"; }
  int device() const { return device_; }

  // The cudaStream_t collectives run on (void* keeps CUDA headers out of this header).
  void* comm_stream() const;
  // Collectives issued from now on wait for the work queued on `stream` (a cudaStream_t; null:
  // no producer, the caller synchronised).
  void set_producer_stream(void* stream) { producer_stream_ = stream; }
  // Makes `stream` wait (on the device) for everything issued on the comm stream so far.
  void make_stream_wait(void* stream);

  void group_start();
  void group_end();

 protected:
  std::unique_ptr<CommRequest> start_collective(CollectiveCall call) override;

 private:
  struct Impl;  // NCCL comm, comm stream, events (nccl_communicator.cpp)
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  void* producer_stream_ = nullptr;
};

// The NCCL library's version (ncclGetVersion: 10000·major + 100·minor + patch), 0 if unknown.
int nccl_library_version();

}  // namespace zt
