#include "comm/mpi_communicator.h"

#include <cstdlib>
#include <string>

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

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm parent) {
  int initialized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  ZT_CHECK(initialized, "MpiCommunicator: MPI is not initialised (create an MpiRuntime first)");
  check_mpi(MPI_Comm_dup(parent, &comm_), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &world_size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<CommRequest> MpiCommunicator::start_collective(CollectiveCall call) {
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
