#include "backend/cuda/cuda_staged_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {

PinnedBufferPool::~PinnedBufferPool() {
  for (const Block& block : all_) cudaFreeHost(block.data);
}

PinnedBufferPool::Block PinnedBufferPool::acquire(size_t bytes) {
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->capacity >= bytes && (best == free_.end() || it->capacity < best->capacity)) best = it;
  }
  if (best != free_.end()) {
    const Block block = *best;
    free_.erase(best);
    return block;
  }
  Block block;
  block.capacity = std::max<size_t>(bytes, 1);
  ZT_CUDA_CHECK(cudaMallocHost(&block.data, block.capacity));
  all_.push_back(block);
  return block;
}

void PinnedBufferPool::release(Block block) {
  free_.push_back(block);
}

namespace {

// Bytes of the input and output of a collective (per rank, in the layout of communicator.h).
struct StagedSizes {
  size_t send = 0;
  size_t recv = 0;
};

StagedSizes staged_sizes(const CollectiveCall& call) {
  const size_t block = call.count * dtype_size(call.dtype);
  const size_t world = static_cast<size_t>(call.world_size);
  switch (call.op) {
    case CollectiveOp::kAllGather:
      return {block, world * block};
    case CollectiveOp::kReduceScatter:
      return {world * block, block};
    case CollectiveOp::kAllReduce:
    case CollectiveOp::kBroadcast:
      return {0, block};  // in place in recv
    case CollectiveOp::kBarrier:
      return {0, 0};
  }
  return {0, 0};
}

class StagedRequest final : public CommRequest {
 public:
  StagedRequest(CollectiveCall call, std::shared_ptr<PinnedBufferPool> pool,
                PinnedBufferPool::Block send, PinnedBufferPool::Block recv, size_t recv_bytes,
                CommHandle inner)
      : CommRequest(std::move(call)),
        pool_(std::move(pool)),
        send_(send),
        recv_(recv),
        recv_bytes_(recv_bytes),
        inner_(std::move(inner)) {}

  ~StagedRequest() override {
    if (!inner_.done()) inner_.wait();  // never hand a block in use back to the pool
    pool_->release(send_);
    pool_->release(recv_);
  }

  bool poll() override {
    if (!inner_.test()) return false;
    if (recv_bytes_ > 0) {
      ZT_CUDA_CHECK(cudaMemcpy(call().recv, recv_.data, recv_bytes_, cudaMemcpyHostToDevice));
      recv_bytes_ = 0;
    }
    return true;
  }

  void abort_job(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::abort();
  }

 private:
  std::shared_ptr<PinnedBufferPool> pool_;
  PinnedBufferPool::Block send_;
  PinnedBufferPool::Block recv_;
  size_t recv_bytes_;
  CommHandle inner_;
};

}  // namespace

StagedDeviceCommunicator::StagedDeviceCommunicator(MPI_Comm parent)
    : mpi_(parent), pool_(std::make_shared<PinnedBufferPool>()) {}

StagedDeviceCommunicator::~StagedDeviceCommunicator() = default;

std::unique_ptr<CommRequest> StagedDeviceCommunicator::start_collective(CollectiveCall call) {
  mpi_.set_timeout_seconds(call.timeout_seconds);
  mpi_.set_context(call.step, call.phase.c_str());
  const StagedSizes sizes = staged_sizes(call);
  PinnedBufferPool::Block send = pool_->acquire(sizes.send);
  PinnedBufferPool::Block recv = pool_->acquire(sizes.recv);
  CommHandle inner;
  switch (call.op) {
    case CollectiveOp::kAllGather: {
      // In place (send is this rank's block of recv on the device) needs nothing special: the
      // host copies of send and recv are separate buffers.
      ZT_CUDA_CHECK(cudaMemcpy(send.data, call.send, sizes.send, cudaMemcpyDeviceToHost));
      inner = mpi_.all_gather(call.dtype, send.data, recv.data, call.count);
      break;
    }
    case CollectiveOp::kReduceScatter:
      ZT_CUDA_CHECK(cudaMemcpy(send.data, call.send, sizes.send, cudaMemcpyDeviceToHost));
      inner = mpi_.reduce_scatter_sum(call.dtype, send.data, recv.data, call.count);
      break;
    case CollectiveOp::kAllReduce:
      ZT_CUDA_CHECK(cudaMemcpy(recv.data, call.recv, sizes.recv, cudaMemcpyDeviceToHost));
      inner = mpi_.all_reduce_sum(call.dtype, recv.data, call.count);
      break;
    case CollectiveOp::kBroadcast:
      if (call.rank == call.root) {
        ZT_CUDA_CHECK(cudaMemcpy(recv.data, call.recv, sizes.recv, cudaMemcpyDeviceToHost));
      }
      inner = mpi_.broadcast(call.dtype, recv.data, call.count, call.root);
      break;
    case CollectiveOp::kBarrier:
      mpi_.barrier();
      break;
  }
  return std::make_unique<StagedRequest>(std::move(call), pool_, send, recv, sizes.recv,
                                         std::move(inner));
}

}  // namespace zt::cuda
