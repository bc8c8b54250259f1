#include "comm/communicator.h"

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <thread>

#include "comm/rank_tree_schedule.h"
#include "util/error.h"
#include "util/scratch_files.h"
#include "util/stopwatch.h"

namespace zt {

bool dtype_is_collective(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kBf16:
    case DType::kFloat16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUint8:
      return true;
    default:
      return false;
  }
}

bool dtype_is_reducible(DType dtype) {
  return dtype_is_collective(dtype) && dtype != DType::kBf16 && dtype != DType::kFloat16;
}

const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kBroadcast:
      return "broadcast";
    case CollectiveOp::kBarrier:
      return "barrier";
  }
  return "unknown";
}

uint64_t ring_bytes_sent(CollectiveOp op, int world_size, uint64_t elements, size_t elem_size) {
  const uint64_t n = static_cast<uint64_t>(world_size);
  const uint64_t bytes = elements * elem_size;
  switch (op) {
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kBroadcast:
      return bytes * (n - 1) / n;
    case CollectiveOp::kAllReduce:
      return 2 * bytes * (n - 1) / n;
    case CollectiveOp::kBarrier:
      return 0;
  }
  return 0;
}

uint64_t CommCounters::total_bytes_sent() const {
  uint64_t total = 0;
  for (const CollectiveCounter& c : by_op) total += c.bytes_sent;
  return total;
}

// ---------------------------------------------------------------------------------------------
// CommHandle

namespace {

// Polls this many times back to back before sleeping between polls: short collectives finish
// with no sleep latency, long waits do not burn a core that compute threads could use.
constexpr int kSpinPolls = 2000;
constexpr auto kPollSleep = std::chrono::microseconds(50);
constexpr int kTimeoutExitCode = 3;

std::string describe_count(const CollectiveCall& call) {
  switch (call.op) {
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
      return std::to_string(call.count) + " elements per rank (" +
             std::to_string(call.count * static_cast<size_t>(call.world_size)) + " in all)";
    case CollectiveOp::kAllReduce:
      return std::to_string(call.count) + " elements";
    case CollectiveOp::kBroadcast:
      return std::to_string(call.count) + " elements from root " + std::to_string(call.root);
    case CollectiveOp::kBarrier:
      return "no data";
  }
  return "";
}

}  // namespace

CommHandle::~CommHandle() {
  if (!request_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    // A destructor cannot throw: report and end the job rather than leave peers hanging.
    std::fprintf(stderr, "zerotrain: rank %d: %s failed while its handle was destroyed: %s\n",
                 request_->call().rank, collective_op_name(request_->call().op), e.what());
    std::fflush(stderr);
    remove_scratch_files();
    request_->abort_job(kTimeoutExitCode);
    std::abort();
  }
}

CommHandle& CommHandle::operator=(CommHandle&& other) noexcept {
  if (this != &other) {
    CommHandle finished_first(std::move(*this));  // waits for the collective we held, if any
    request_ = std::move(other.request_);
  }
  return *this;
}

bool CommHandle::test() {
  if (request_ && request_->poll()) request_.reset();
  return done();
}

void CommHandle::wait() {
  if (!request_) return;
  const auto wait_start = std::chrono::steady_clock::now();
  // An infinite timeout (none) never expires; a finite one is at most kMaxTimeoutSeconds, so the
  // deadline fits the clock's 64-bit nanoseconds.
  const double timeout = request_->call().timeout_seconds;
  const auto deadline =
      std::isfinite(timeout)
          ? wait_start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(timeout))
          : std::chrono::steady_clock::time_point::max();
  for (int polls = 0; !request_->poll(); ++polls) {
    if (polls < kSpinPolls) continue;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      report_timeout_and_abort(std::chrono::duration<double>(now - wait_start).count());
    }
    std::this_thread::sleep_for(kPollSleep);
  }
  request_.reset();
}

void CommHandle::report_timeout_and_abort(double waited_seconds) {
  const CollectiveCall& call = request_->call();
  const double since_issue =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - request_->issued()).count();
  std::fprintf(stderr,
               "zerotrain: COMMUNICATION TIMEOUT on rank %d of %d: collective %s "
               "(dtype %s, %s, collective #%llu on this communicator) did not complete within "
               "%.3g s (waited %.3f s, issued %.3f s ago) at step %lld, phase '%s'. A peer rank "
               "probably skipped, reordered or mismatched this collective, or died. "
               "Aborting the job.\n",
               call.rank, call.world_size, collective_op_name(call.op), dtype_name(call.dtype),
               describe_count(call).c_str(), static_cast<unsigned long long>(call.sequence),
               call.timeout_seconds, waited_seconds, since_issue, static_cast<long long>(call.step),
               call.phase.c_str());
  std::fflush(stderr);
  remove_scratch_files();  // the abort skips the destructors that would remove them
  request_->abort_job(kTimeoutExitCode);
  std::abort();  // abort_job does not return; this is the fallback if it ever did
}

// ---------------------------------------------------------------------------------------------
// Communicator

namespace {

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a);
  const auto b0 = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

void check_count(CollectiveOp op, DType dtype, size_t count) {
  ZT_CHECK(dtype_is_collective(dtype), std::string(collective_op_name(op)) +
                                           ": collectives do not move dtype " + dtype_name(dtype));
  ZT_CHECK(count <= static_cast<size_t>(INT_MAX),
           std::string(collective_op_name(op)) + ": count " + std::to_string(count) +
               " exceeds INT_MAX elements; split the buffer into buckets");
}

void check_buffer(CollectiveOp op, const void* ptr, size_t count, const char* which) {
  ZT_CHECK(ptr != nullptr || count == 0, std::string(collective_op_name(op)) + ": " + which +
                                             " buffer is null for " + std::to_string(count) +
                                             " elements");
}

void check_reducible(CollectiveOp op, DType dtype) {
  ZT_CHECK(dtype_is_reducible(dtype), std::string(collective_op_name(op)) +
                                          ": sums are not defined for dtype " + dtype_name(dtype));
}

}  // namespace

CommHandle Communicator::all_gather(DType dtype, const void* send, void* recv,
                                    size_t count_per_rank) {
  const CollectiveOp op = CollectiveOp::kAllGather;
  check_count(op, dtype, count_per_rank);
  check_buffer(op, send, count_per_rank, "send");
  check_buffer(op, recv, count_per_rank, "recv");
  const size_t block_bytes = count_per_rank * dtype_size(dtype);
  const size_t world = static_cast<size_t>(world_size());
  const void* own_block =
      static_cast<const char*>(recv) + static_cast<size_t>(rank()) * block_bytes;
  const bool in_place = block_bytes > 0 && send == own_block;
  ZT_CHECK(in_place || !ranges_overlap(send, block_bytes, recv, world * block_bytes),
           "all_gather: send overlaps recv without being this rank's block of it");
  CollectiveCall call;
  call.op = op;
  call.dtype = dtype;
  call.send = send;
  call.recv = recv;
  call.count = count_per_rank;
  call.in_place = in_place;
  return issue(std::move(call), world * count_per_rank);
}

size_t rank_tree_scratch_elements(int world, size_t count_per_rank) {
  return RankTreeSchedule::scratch_blocks(world) * count_per_rank;
}

size_t rank_tree_scratch_bytes(const CollectiveCall& call) {
  if (call.op != CollectiveOp::kReduceScatter || call.order != SumOrder::kRankTree) return 0;
  return rank_tree_scratch_elements(call.world_size, call.count) * dtype_size(call.dtype);
}

CommHandle Communicator::reduce_scatter_sum(DType dtype, const void* send, void* recv,
                                            size_t count_per_rank, SumOrder order, void* scratch) {
  const CollectiveOp op = CollectiveOp::kReduceScatter;
  check_reducible(op, dtype);
  if (order == SumOrder::kRankTree) {
    ZT_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
             std::string("reduce_scatter in rank-tree order sums float32 or float64, not ") +
                 dtype_name(dtype));
    ZT_CHECK(is_power_of_two_world(world_size()),
             "reduce_scatter in rank-tree order needs a power-of-two number of ranks; this job "
             "has " +
                 std::to_string(world_size()));
  }
  check_count(op, dtype, count_per_rank);
  check_buffer(op, send, count_per_rank, "send");
  check_buffer(op, recv, count_per_rank, "recv");
  const size_t block_bytes = count_per_rank * dtype_size(dtype);
  const size_t world = static_cast<size_t>(world_size());
  ZT_CHECK(!ranges_overlap(send, world * block_bytes, recv, block_bytes),
           "reduce_scatter: send and recv overlap");
  ZT_CHECK(scratch == nullptr || order == SumOrder::kRankTree,
           "reduce_scatter: only the rank-tree order takes a scratch buffer");
  CollectiveCall call;
  call.op = op;
  call.dtype = dtype;
  call.send = send;
  call.recv = recv;
  call.count = count_per_rank;
  call.order = order;
  call.world_size = world_size();
  const size_t scratch_bytes = rank_tree_scratch_bytes(call);
  ZT_CHECK(
      scratch == nullptr || (!ranges_overlap(send, world * block_bytes, scratch, scratch_bytes) &&
                             !ranges_overlap(recv, block_bytes, scratch, scratch_bytes)),
      "reduce_scatter: the rank-tree scratch overlaps send or recv");
  call.scratch = scratch_bytes > 0 ? scratch : nullptr;
  if (order == SumOrder::kRankTree && call.scratch == nullptr)
    counters_.unlent_scratch_bytes += scratch_bytes;
  return issue(std::move(call), world * count_per_rank);
}

CommHandle Communicator::all_reduce_sum(DType dtype, void* inout, size_t count) {
  const CollectiveOp op = CollectiveOp::kAllReduce;
  check_reducible(op, dtype);
  check_count(op, dtype, count);
  check_buffer(op, inout, count, "inout");
  CollectiveCall call;
  call.op = op;
  call.dtype = dtype;
  call.recv = inout;
  call.count = count;
  return issue(std::move(call), count);
}

CommHandle Communicator::broadcast(DType dtype, void* buf, size_t count, int root) {
  const CollectiveOp op = CollectiveOp::kBroadcast;
  check_count(op, dtype, count);
  check_buffer(op, buf, count, "buf");
  ZT_CHECK(root >= 0 && root < world_size(), "broadcast: root " + std::to_string(root) +
                                                 " is not a rank of a world of " +
                                                 std::to_string(world_size()));
  CollectiveCall call;
  call.op = op;
  call.dtype = dtype;
  call.recv = buf;
  call.count = count;
  call.root = root;
  return issue(std::move(call), count);
}

void Communicator::barrier() {
  CollectiveCall call;
  call.op = CollectiveOp::kBarrier;
  issue(std::move(call), 0).wait();
}

CommHandle Communicator::issue(CollectiveCall call, uint64_t full_elements) {
  call.rank = rank();
  call.world_size = world_size();
  call.sequence = next_sequence_;
  call.step = step_;
  call.phase = phase_;
  call.timeout_seconds = timeout_seconds_;
  const CollectiveOp op = call.op;
  const size_t elem_size = dtype_size(call.dtype);
  CommHandle handle(start_collective(std::move(call)));
  ++next_sequence_;
  CollectiveCounter& counter = counters_[op];
  counter.calls += 1;
  counter.elements += full_elements;
  counter.bytes_sent += ring_bytes_sent(op, world_size(), full_elements, elem_size);
  return handle;
}

void Communicator::device_wait(CommHandle& handle) {
  if (handle.done()) return;
  if (!handle.request_->enqueue_device_wait()) {
    handle.wait();
    return;
  }
  device_waited_.push_back(std::move(handle));
  ++device_ordered_waits_;
}

double Communicator::finish_device_waits() {
  const Stopwatch clock;
  for (CommHandle& h : device_waited_) h.wait();
  device_waited_.clear();
  return clock.seconds();
}

void Communicator::set_context(int64_t step, const char* phase) {
  step_ = step;
  phase_ = phase ? phase : "";
}

void Communicator::set_timeout_seconds(double seconds) {
  ZT_CHECK(seconds >= 0.0,
           "communicator timeout must be >= 0 seconds (0: none), got " + std::to_string(seconds));
  timeout_seconds_ = seconds == 0.0 || seconds > kMaxTimeoutSeconds
                         ? std::numeric_limits<double>::infinity()
                         : seconds;
}

CollectiveBytes collective_bytes(const CollectiveCall& call) {
  const size_t block = call.count * dtype_size(call.dtype);
  const size_t world = static_cast<size_t>(call.world_size);
  switch (call.op) {
    case CollectiveOp::kAllGather:
      return {block, world * block};
    case CollectiveOp::kReduceScatter:
      return {world * block, block};
    case CollectiveOp::kAllReduce:
    case CollectiveOp::kBroadcast:
      return {0, block};
    case CollectiveOp::kBarrier:
      return {0, 0};
  }
  return {0, 0};
}

CommHandle forward_collective(Communicator& target, const CollectiveCall& call, const void* send,
                              void* recv, void* scratch) {
  target.set_timeout_seconds(call.timeout_seconds);
  target.set_context(call.step, call.phase.c_str());
  switch (call.op) {
    case CollectiveOp::kAllGather:
      return target.all_gather(call.dtype, send, recv, call.count);
    case CollectiveOp::kReduceScatter:
      return target.reduce_scatter_sum(call.dtype, send, recv, call.count, call.order, scratch);
    case CollectiveOp::kAllReduce:
      return target.all_reduce_sum(call.dtype, recv, call.count);
    case CollectiveOp::kBroadcast:
      return target.broadcast(call.dtype, recv, call.count, call.root);
    case CollectiveOp::kBarrier:
      target.barrier();
      return {};
  }
  fail("forward_collective: unknown op");
}

}  // namespace zt
