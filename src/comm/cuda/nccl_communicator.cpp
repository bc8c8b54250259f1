#include "comm/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "comm/cuda/nccl_rank_tree_add.h"
#include "comm/mpi_communicator.h"
#include "comm/rank_tree_schedule.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_runtime.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt {
namespace {

void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess || result == ncclInProgress) return;
  fail(std::string(call) + " failed: " + ncclGetErrorString(result) + " (" + file + ":" +
       std::to_string(line) + ")");
}
#define ZT_NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kBf16:
      return ncclBfloat16;  // moved, never summed (the base class rejects bf16 sums)
    case DType::kFloat16:
      return ncclFloat16;  // moved, never summed (likewise)
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kUint8:
      return ncclUint8;
    default:
      break;
  }
  fail("nccl_datatype: no collective dtype " + std::to_string(static_cast<int>(dtype)));
}

// A completion event shared by the handles of one collective or one group; `recorded` turns true
// once the event has been recorded after the op(s) (cudaEventQuery on an unrecorded event would
// report success).
struct Completion {
  cudaEvent_t event = nullptr;
  bool recorded = false;

  Completion() { ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~Completion() { cudaEventDestroy(event); }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
};

class NcclRequest final : public CommRequest {
 public:
  NcclRequest(CollectiveCall call, ncclComm_t comm, std::shared_ptr<Completion> completion,
              cudaStream_t consumer)
      : CommRequest(std::move(call)),
        comm_(comm),
        completion_(std::move(completion)),
        consumer_(consumer) {}

  // The consumer (compute) stream waits for the completion event; impossible before the event
  // is recorded (a handle of a still-open group) or without a consumer stream.
  bool enqueue_device_wait() override {
    if (!consumer_ || !completion_->recorded) return false;
    ZT_CUDA_CHECK(cudaStreamWaitEvent(consumer_, completion_->event, 0));
    return true;
  }

  bool poll() override {
    if (completion_->recorded) {
      const cudaError_t status = cudaEventQuery(completion_->event);
      if (status == cudaSuccess) return true;
      if (status != cudaErrorNotReady) ZT_CUDA_CHECK(status);
    }
    ncclResult_t async_error = ncclSuccess;
    ZT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
    ZT_NCCL_CHECK(async_error);
    return false;
  }

  // MPI_Abort alone: every process of the job ends, and with it its GPU context and any NCCL
  // kernel still waiting for a peer. ncclCommAbort first could itself wait for peers that are
  // stuck (recent NCCL aborts the ranks of a node together).
  void abort_job(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::abort();
  }

 private:
  ncclComm_t comm_;
  std::shared_ptr<Completion> completion_;
  cudaStream_t consumer_;
};

// A reduce-scatter in rank-tree order (comm/rank_tree_schedule.h), queued whole on the comm
// stream: per step one NCCL group of sends and receives with the partner, then the adds. The
// partial sums go to the caller's scratch (the engine's planned buffer), or else to a
// stream-ordered allocation freed after the last add.
void enqueue_rank_tree_reduce_scatter(const CollectiveCall& call, ncclComm_t comm,
                                      cudaStream_t stream) {
  const RankTreeSchedule schedule(call.rank, call.world_size);
  const size_t elem = dtype_size(call.dtype);
  const size_t block_bytes = call.count * elem;
  const ncclDataType_t type = nccl_datatype(call.dtype);
  const auto* send = static_cast<const char*>(call.send);
  auto* recv = static_cast<char*>(call.recv);
  if (schedule.steps() == 0) {
    ZT_CUDA_CHECK(cudaMemcpyAsync(recv, send, block_bytes, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  char* scratch = static_cast<char*>(call.scratch);
  const bool owns_scratch = scratch == nullptr;
  const size_t scratch_bytes = rank_tree_scratch_bytes(call);
  if (owns_scratch && scratch_bytes > 0)
    ZT_CUDA_CHECK(cudaMallocAsync(&scratch, scratch_bytes, stream));
  // The send buffer's blocks are only read (sent or added from).
  auto at = [&](RankTreeSchedule::BlockRef ref) -> char* {
    using B = RankTreeSchedule::Buffer;
    char* base = ref.buffer == B::kRecv      ? recv
                 : ref.buffer == B::kScratch ? scratch
                                             : const_cast<char*>(send);
    return base + ref.block * block_bytes;
  };
  auto live = [&](int step, int i) -> const char* { return at(schedule.live(step, i)); };
  auto kept = [&](int step, int i) { return at(schedule.kept(step, i)); };
  for (int step = 0; step < schedule.steps(); ++step) {
    const int partner = schedule.partner(step);
    ZT_NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < schedule.live_blocks(step); ++i) {
      if (schedule.keeps(step, i))
        ZT_NCCL_CHECK(ncclRecv(kept(step, i), call.count, type, partner, comm, stream));
      else
        ZT_NCCL_CHECK(ncclSend(live(step, i), call.count, type, partner, comm, stream));
    }
    ZT_NCCL_CHECK(ncclGroupEnd());
    for (int i = 0; i < schedule.live_blocks(step); ++i)
      if (schedule.keeps(step, i))
        launch_rank_tree_add(kept(step, i), live(step, i), call.count, call.dtype, stream);
  }
  if (owns_scratch && scratch) ZT_CUDA_CHECK(cudaFreeAsync(scratch, stream));
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t producer_ready = nullptr;
  int32_t* barrier_word = nullptr;  // device
  int group_depth = 0;
  std::shared_ptr<Completion> group_completion;  // shared by the handles of the open group

  ~Impl() {
    // While an error unwinds, the job is about to end (main prints the error, then ends MPI on
    // every rank), and the peers may be waiting in a collective this rank will never join, which
    // ncclCommDestroy (it finalizes the communicator first) could wait for: the communicator
    // and its stream are left to the process's exit, so that the error is printed.
    if (std::uncaught_exceptions() > 0) return;
    if (stream) cudaStreamSynchronize(stream);
    if (comm) ncclCommDestroy(comm);
    cudaFree(barrier_word);
    if (producer_ready) cudaEventDestroy(producer_ready);
    if (stream) cudaStreamDestroy(stream);
  }
};

NcclCommunicator::NcclCommunicator(MPI_Comm parent, int device) : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  ZT_CHECK(initialized, "NcclCommunicator: MPI is not initialised (create an MpiRuntime first)");
  check_mpi(MPI_Comm_rank(parent, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(parent, &world_size_), "MPI_Comm_size");
  const LocalRank local = local_rank_by_hostname(parent);
  int devices = 0;
  ZT_CUDA_CHECK(cudaGetDeviceCount(&devices));
  device_ = device >= 0 ? device : local.local_rank;
  ZT_CHECK(device_ < devices, "NcclCommunicator: rank " + std::to_string(rank_) +
                                  " is local rank " + std::to_string(local.local_rank) + " of " +
                                  std::to_string(local.local_size) + " on " + local.hostname +
                                  " but that host has " + std::to_string(devices) +
                                  " GPU(s); NCCL needs one GPU per rank");
  ZT_CUDA_CHECK(cudaSetDevice(device_));

  ncclUniqueId id{};
  if (rank_ == 0) ZT_NCCL_CHECK(ncclGetUniqueId(&id));
  check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, parent), "MPI_Bcast(ncclUniqueId)");
  ZT_NCCL_CHECK(ncclCommInitRank(&impl_->comm, world_size_, id, rank_));

  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->producer_ready, cudaEventDisableTiming));
  ZT_CUDA_CHECK(cudaMalloc(&impl_->barrier_word, sizeof(int32_t)));
  ZT_CUDA_CHECK(cudaMemset(impl_->barrier_word, 0, sizeof(int32_t)));
}

NcclCommunicator::~NcclCommunicator() {
  // The device-ordered requests poll the NCCL comm that Impl destroys: they finish first. One that
  // fails (an NCCL or CUDA error, a peer gone) cannot throw out of a destructor, and the handles
  // still pending would poll the comm again: the error is reported and the job ends here, as
  // abort_job ends it on a timeout (MPI_Abort).
  try {
    finish_device_waits();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: closing the NCCL communicator: %s; aborting the job\n", rank_,
                 e.what());
    std::fflush(stderr);
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }
}

void* NcclCommunicator::comm_stream() const {
  return impl_->stream;
}

void NcclCommunicator::make_stream_wait(void* stream) {
  auto done = std::make_shared<Completion>();
  ZT_CUDA_CHECK(cudaEventRecord(done->event, impl_->stream));
  ZT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done->event, 0));
}

void NcclCommunicator::group_start() {
  if (impl_->group_depth++ == 0) impl_->group_completion = std::make_shared<Completion>();
  ZT_NCCL_CHECK(ncclGroupStart());
}

void NcclCommunicator::group_end() {
  ZT_CHECK(impl_->group_depth > 0, "NcclCommunicator: group_end without group_start");
  ZT_NCCL_CHECK(ncclGroupEnd());
  if (--impl_->group_depth == 0) {
    ZT_CUDA_CHECK(cudaEventRecord(impl_->group_completion->event, impl_->stream));
    impl_->group_completion->recorded = true;
    impl_->group_completion.reset();
  }
}

std::unique_ptr<CommRequest> NcclCommunicator::start_collective(CollectiveCall call) {
  Impl& s = *impl_;
  if (producer_stream_) {
    ZT_CUDA_CHECK(cudaEventRecord(s.producer_ready, static_cast<cudaStream_t>(producer_stream_)));
    ZT_CUDA_CHECK(cudaStreamWaitEvent(s.stream, s.producer_ready, 0));
  }
  const ncclDataType_t type = nccl_datatype(call.dtype);
  const size_t count = call.count;
  switch (call.op) {
    case CollectiveOp::kAllGather: {
      // NCCL's in-place form is exactly ours: send == recv + rank·count.
      ZT_NCCL_CHECK(ncclAllGather(call.send, call.recv, count, type, s.comm, s.stream));
      break;
    }
    case CollectiveOp::kReduceScatter:
      if (call.order == SumOrder::kRankTree) {
        // Its adds are kernels between NCCL groups: they cannot sit inside an open group.
        ZT_CHECK(s.group_depth == 0,
                 "NcclCommunicator: a rank-tree reduce_scatter cannot be part of a group");
        enqueue_rank_tree_reduce_scatter(call, s.comm, s.stream);
        break;
      }
      ZT_NCCL_CHECK(
          ncclReduceScatter(call.send, call.recv, count, type, ncclSum, s.comm, s.stream));
      break;
    case CollectiveOp::kAllReduce:
      ZT_NCCL_CHECK(ncclAllReduce(call.recv, call.recv, count, type, ncclSum, s.comm, s.stream));
      break;
    case CollectiveOp::kBroadcast:
      ZT_NCCL_CHECK(ncclBroadcast(call.recv, call.recv, count, type, call.root, s.comm, s.stream));
      break;
    case CollectiveOp::kBarrier:
      ZT_CHECK(s.group_depth == 0, "NcclCommunicator: barrier inside a group");
      ZT_NCCL_CHECK(
          ncclAllReduce(s.barrier_word, s.barrier_word, 1, ncclInt32, ncclSum, s.comm, s.stream));
      break;
  }
  std::shared_ptr<Completion> completion = s.group_completion;
  if (!completion) {
    completion = std::make_shared<Completion>();
    ZT_CUDA_CHECK(cudaEventRecord(completion->event, s.stream));
    completion->recorded = true;
  }
  return std::make_unique<NcclRequest>(std::move(call), s.comm, std::move(completion),
                                       static_cast<cudaStream_t>(producer_stream_));
}

int nccl_library_version() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : 0;
}

}  // namespace zt
