// MpiCommunicator: Communicator over MPI nonblocking collectives (MPI_Iallgather,
// MPI_Ireduce_scatter_block, MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier; the rank-tree
// reduce-scatter from MPI_Isend/MPI_Irecv) on a private duplicate
// of a parent communicator, so the engine's traffic never matches anyone else's. The duplicate
// returns errors (MPI_ERRORS_RETURN) and every failing MPI call throws zt::Error naming the
// call. Host buffers only (device buffers are staged by the caller or use the NCCL backend).
//
// Determinism: Open MPI picks its collective algorithm from (world size, message size) and
// each algorithm combines contributions in a fixed order, so for a fixed world size the sums
// are bitwise reproducible from call to call and identical on every rank (all_reduce results
// are computed once and distributed, or reduced in the same order everywhere).
#pragma once
// The C interface only: Open MPI's deprecated C++ bindings need libmpi_cxx, which is not linked.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>

#include "comm/communicator.h"

namespace zt {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `parent` (collective over it). MPI must be initialised (see MpiRuntime).
  explicit MpiCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
  ~MpiCommunicator() override;  // frees the duplicate unless MPI is already finalised
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend_name() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }

 protected:
  std::unique_ptr<CommRequest> start_collective(CollectiveCall call) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  int tag_bound_ = 32767;  // MPI_TAG_UB: rank-tree messages use tags 0 ... tag_bound_ − 1
};

MPI_Datatype mpi_datatype(DType dtype);

}  // namespace zt
