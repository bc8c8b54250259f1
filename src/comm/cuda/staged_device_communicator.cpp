#include "comm/cuda/staged_device_communicator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>

#include "util/cuda/cuda_check.h"
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
  const CollectiveBytes sizes = collective_bytes(call);
  PinnedBufferPool::Block send = pool_->acquire(sizes.send);
  PinnedBufferPool::Block recv = pool_->acquire(sizes.recv);
  // The device input goes to its host copy: send for all_gather/reduce_scatter (an in-place
  // all_gather needs nothing special, the host send and recv are separate), recv for all_reduce
  // and for the root of a broadcast.
  if (sizes.send > 0) {
    ZT_CUDA_CHECK(cudaMemcpy(send.data, call.send, sizes.send, cudaMemcpyDeviceToHost));
  } else if (call.op == CollectiveOp::kAllReduce ||
             (call.op == CollectiveOp::kBroadcast && call.rank == call.root)) {
    ZT_CUDA_CHECK(cudaMemcpy(recv.data, call.recv, sizes.recv, cudaMemcpyDeviceToHost));
  }
  CommHandle inner = forward_collective(mpi_, call, send.data, recv.data);
  return std::make_unique<StagedRequest>(std::move(call), pool_, send, recv, sizes.recv,
                                         std::move(inner));
}

}  // namespace zt::cuda
