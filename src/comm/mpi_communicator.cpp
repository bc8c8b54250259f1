#include "comm/mpi_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/rank_tree_schedule.h"
#include "runtime/mpi_check.h"
#include "util/error.h"

namespace zt {

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kBf16:
    case DType::kFloat16:
      return MPI_UINT16_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kUint8:
      return MPI_UINT8_T;
    default:
      break;
  }
  fail("mpi_datatype: no collective dtype " + std::to_string(static_cast<int>(dtype)));
}

namespace {

class MpiRequest final : public CommRequest {
 public:
  MpiRequest(CollectiveCall call, MPI_Comm comm) : CommRequest(std::move(call)), comm_(comm) {}

  MPI_Request* mpi_request() { return &request_; }

  bool poll() override {
    int flag = 0;
    check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    return flag != 0;
  }

  void abort_job(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::abort();
  }

 private:
  MPI_Comm comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// A reduce-scatter in rank-tree order (rank_tree_schedule.h) from MPI_Isend/MPI_Irecv: each poll
// tests the current step's messages and, once they are complete, adds the received partials and
// posts the next step. Messages carry the collective's sequence number modulo the
// communicator's largest tag (MPI_TAG_UB, 2^31 − 1 in Open MPI) as their tag, so two such
// reductions in flight between the same ranks never take each other's blocks. The partial sums
// go to the caller's scratch, or to a vector of the request's own.
template <typename T>
class MpiRankTreeReduceScatter final : public CommRequest {
 public:
  MpiRankTreeReduceScatter(CollectiveCall collective, MPI_Comm comm, int tag_bound)
      : CommRequest(std::move(collective)),
        comm_(comm),
        schedule_(call().rank, call().world_size),
        count_(call().count),
        send_(static_cast<const T*>(call().send)),
        recv_(static_cast<T*>(call().recv)),
        owned_scratch_(
            call().scratch ? 0 : rank_tree_scratch_elements(call().world_size, call().count)),
        scratch_(call().scratch ? static_cast<T*>(call().scratch) : owned_scratch_.data()),
        tag_(static_cast<int>(call().sequence % static_cast<uint64_t>(tag_bound))) {
    if (schedule_.steps() == 0) {  // one rank: its block is the sum (an empty one has no buffers)
      if (count_ > 0) std::memcpy(recv_, send_, count_ * sizeof(T));
      return;
    }
    post(0);
  }

  bool poll() override {
    while (step_ < schedule_.steps()) {
      int done = 0;
      check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                            MPI_STATUSES_IGNORE),
                "MPI_Testall (rank-tree reduce_scatter)");
      if (!done) return false;
      requests_.clear();
      add_received(step_);
      if (++step_ < schedule_.steps()) post(step_);
    }
    return true;
  }

  void abort_job(int exit_code) override {
    MPI_Abort(comm_, exit_code);
    std::abort();
  }

 private:
  // The send buffer's blocks are only read (sent, or added from).
  T* at(RankTreeSchedule::BlockRef ref) {
    using B = RankTreeSchedule::Buffer;
    T* base = ref.buffer == B::kSend      ? const_cast<T*>(send_)
              : ref.buffer == B::kScratch ? scratch_
                                          : recv_;
    return base + ref.block * count_;
  }
  const T* live(int step, int i) { return at(schedule_.live(step, i)); }
  T* kept(int step, int i) { return at(schedule_.kept(step, i)); }
  void post(int step) {
    const MPI_Datatype type = mpi_datatype(dtype_of<T>());
    const int n = static_cast<int>(count_);  // Communicator checked count <= INT_MAX
    const int partner = schedule_.partner(step);
    // Both partners walk the live blocks in the same order, so the k-th message one sends is the
    // k-th receive the other posted.
    for (int i = 0; i < schedule_.live_blocks(step); ++i) {
      requests_.push_back(MPI_REQUEST_NULL);
      if (schedule_.keeps(step, i))
        check_mpi(MPI_Irecv(kept(step, i), n, type, partner, tag_, comm_, &requests_.back()),
                  "MPI_Irecv (rank-tree reduce_scatter)");
      else
        check_mpi(MPI_Isend(live(step, i), n, type, partner, tag_, comm_, &requests_.back()),
                  "MPI_Isend (rank-tree reduce_scatter)");
    }
  }
  // kept = partner's partial + ours (commutative: the partner computes the same bits).
  void add_received(int step) {
    for (int i = 0; i < schedule_.live_blocks(step); ++i) {
      if (!schedule_.keeps(step, i)) continue;
      T* out = kept(step, i);
      const T* mine = live(step, i);
      for (size_t e = 0; e < count_; ++e) out[e] = out[e] + mine[e];
    }
  }

  MPI_Comm comm_;
  RankTreeSchedule schedule_;
  size_t count_;
  const T* send_;
  T* recv_;
  std::vector<T> owned_scratch_;  // when the caller lent none
  T* scratch_;
  int tag_;
  int step_ = 0;
  std::vector<MPI_Request> requests_;
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  ZT_CHECK(initialized, "MpiCommunicator: MPI is not initialised (create an MpiRuntime first)");
  check_mpi(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &world_size_), "MPI_Comm_size");
  // Tags 0 ... MPI_TAG_UB are valid (at least 32767 by the standard).
  void* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
  tag_bound_ = found && tag_ub ? *static_cast<int*>(tag_ub) : 32767;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<CommRequest> MpiCommunicator::start_collective(CollectiveCall call) {
  if (call.op == CollectiveOp::kReduceScatter && call.order == SumOrder::kRankTree) {
    if (call.dtype == DType::kFloat64)
      return std::make_unique<MpiRankTreeReduceScatter<double>>(std::move(call), comm_, tag_bound_);
    return std::make_unique<MpiRankTreeReduceScatter<float>>(std::move(call), comm_, tag_bound_);
  }
  const MPI_Datatype type = mpi_datatype(call.dtype);
  const int count = static_cast<int>(call.count);  // Communicator checked count <= INT_MAX
  const CollectiveOp op = call.op;
  const void* send = call.send;
  void* recv = call.recv;
  const bool in_place = call.in_place;
  const int root = call.root;
  auto request = std::make_unique<MpiRequest>(std::move(call), comm_);
  MPI_Request* req = request->mpi_request();
  switch (op) {
    case CollectiveOp::kAllGather:
      check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type,
                               comm_, req),
                "MPI_Iallgather");
      break;
    case CollectiveOp::kReduceScatter:
      check_mpi(MPI_Ireduce_scatter_block(send, recv, count, type, MPI_SUM, comm_, req),
                "MPI_Ireduce_scatter_block");
      break;
    case CollectiveOp::kAllReduce:
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, recv, count, type, MPI_SUM, comm_, req),
                "MPI_Iallreduce");
      break;
    case CollectiveOp::kBroadcast:
      check_mpi(MPI_Ibcast(recv, count, type, root, comm_, req), "MPI_Ibcast");
      break;
    case CollectiveOp::kBarrier:
      check_mpi(MPI_Ibarrier(comm_, req), "MPI_Ibarrier");
      break;
  }
  return request;
}

}  // namespace zt
