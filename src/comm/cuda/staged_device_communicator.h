// StagedDeviceCommunicator: the MPI communicator for DEVICE buffers, staged through pinned host
// memory — so several ranks can share one GPU in tests (NCCL refuses that, docs/ARCHITECTURE.md
// §7), and a build without NCCL can still run multi-rank on GPUs.
//
// Issuing a collective copies its input device→pinned host (cudaMemcpy: synchronous, and on the
// legacy default stream it orders after the work of blocking streams such as CudaBackend's),
// then starts the same collective on the wrapped MpiCommunicator over the host copies. The
// handle completes when the MPI request has completed AND the output has been copied back
// host→device. Timeouts and aborts are the MPI communicator's (MPI_Abort). Counters are this
// communicator's own (the base class), the same figures MPI reports.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "comm/mpi_communicator.h"

namespace zt::cuda {

// Reusable pinned host blocks (cudaMallocHost is slow: blocks are kept and handed out again).
class PinnedBufferPool {
 public:
  PinnedBufferPool() = default;
  ~PinnedBufferPool();
  PinnedBufferPool(const PinnedBufferPool&) = delete;
  PinnedBufferPool& operator=(const PinnedBufferPool&) = delete;

  struct Block {
    void* data = nullptr;
    size_t capacity = 0;
  };
  Block acquire(size_t bytes);  // the smallest free block that fits, else a new one
  void release(Block block);

 private:
  std::vector<Block> free_;
  std::vector<Block> all_;
};

class StagedDeviceCommunicator final : public Communicator {
 public:
  // Duplicates `parent` like MpiCommunicator (collective over it).
  explicit StagedDeviceCommunicator(MPI_Comm parent = MPI_COMM_WORLD);
  ~StagedDeviceCommunicator() override;

  int rank() const override { return mpi_.rank(); }
  int world_size() const override { return mpi_.world_size(); }
  const char* backend_name() const override { return "mpi-staged"; }

 protected:
  std::unique_ptr<CommRequest> start_collective(CollectiveCall call) override;

 private:
  MpiCommunicator mpi_;
  std::shared_ptr<PinnedBufferPool> pool_;
};

}  // namespace zt::cuda
