// Communicator: the collectives the ZeRO engine needs, on typed contiguous host buffers.
//
// Semantics
// ---------
// * SPMD. Every rank of the communicator must issue the same collectives, in the same order,
//   with the same op, dtype, count and root. Issuing returns at once with a CommHandle; the
//   buffers belong to the collective until the handle is complete (wait() returned or test()
//   returned true): do not read the output or write the input before then. Handles may be
//   waited in any order (start A, start B, wait B, wait A is fine).
// * CommHandle is move-only. wait() blocks until the collective is complete; it is idempotent
//   (a second wait, or a wait on a moved-from/default handle, returns at once). test() polls
//   once and returns true when complete. Destroying an un-waited handle waits for it. Backends
//   such as MPI progress nonblocking collectives only inside library calls, so an engine that
//   overlaps communication with compute should call test() now and then.
// * Ops (count = elements of T; "block r" = elements [r·count, (r+1)·count)):
//     all_gather(send[count], recv[N·count], count)       recv block r = send of rank r.
//         In place when send == recv + rank·count (this rank's block of recv); any other
//         overlap of send and recv is an error.
//     reduce_scatter_sum(send[N·count], recv[count], count)  recv = Σ_ranks (send block rank).
//         send and recv must not overlap. With SumOrder::kRankTree the sum of every element is
//         associated as a balanced binary tree over the ranks in rank order, for 4 ranks
//         (r0 + r1) + (r2 + r3): recursive halving that pairs ranks at distance 1, 2, 4, ...,
//         built from point-to-point messages (float32 and float64; N a power of two; the same
//         bytes as the ring). Each pair's sum is computed by one rank or by both, with the same
//         bits (IEEE addition is commutative), so a subtree's sum does not depend on the world
//         size: the building block of world-invariant training (docs/ARCHITECTURE.md §4).
//         Its partial sums need (N − 2)·count elements besides send and recv
//         (rank_tree_scratch_elements): the caller may lend them as `scratch`, a buffer of the
//         send's kind (host or device) that belongs to the collective like its other buffers
//         (the engine plans it, so its bytes are counted); null, the communicator allocates them
//         for the call.
//     all_reduce_sum(inout[count], count)                 inout = Σ_ranks inout, in place.
//     broadcast(buf[count], count, root)                  buf = root's buf.
//     barrier()                                           blocking.
//   Element types: float, double, int32_t, int64_t, uint8_t for every op; uint16_t holds bf16
//   bits and is accepted by all_gather and broadcast only (summing bit patterns is
//   meaningless: the templates reject it at compile time, the DType entry points with
//   zt::Error). Integer sums are not overflow-checked: keep values in range.
// * Determinism: a backend's sums are a fixed function of (world size, count, dtype): the same
//   inputs give bitwise-identical outputs on every call and on every rank. Different world
//   sizes may round fp32 differently (reduction order changes with N).
// * Timeouts: wait() gives up when the collective has not completed timeout_seconds() after
//   wait() started blocking (default 600 s; set_timeout_seconds()). It then prints a report to
//   stderr naming the rank, world size, op, dtype, element count, the collective's sequence
//   number on this communicator, and the engine's step and phase (set_context(), captured when
//   the collective was issued), and aborts the whole job with a non-zero exit code (MPI_Abort
//   for MPI). A mismatched or skipped collective therefore never hangs silently.
// * Device-ordered waits: device_wait(handle) makes the backend work issued AFTER the call run
//   after the collective, without blocking the host where the communicator can (NCCL with a
//   consumer stream enqueues cudaStreamWaitEvent; the guarded test communicator models it).
//   Elsewhere it is wait(). Either way the handle is done for the caller, and its buffers may be
//   used by later backend work and released (a later user is ordered after that work). The host
//   must not read them before finish_device_waits(), which host-waits every collective so
//   ordered, with the timeout report above. An engine calls it before reading device results on
//   the host and before a device-wide synchronisation, so a lost peer is reported, not a hang.
// * Threading: one thread issues and waits (MPI_THREAD_FUNNELED). The Communicator must outlive
//   its handles.
// * Limits: a count must fit in an int (the MPI-3 interface); larger buffers go in buckets.
//
// Byte counters (what docs/ARCHITECTURE.md §4 compares with)
// -----------------------------------------------
// counters()[op] holds, since construction or reset_counters(): `calls`, `elements` and
// `bytes_sent`, counted when a collective is issued. `elements` is the size of the logical
// full buffer, the "Ψ" of docs/ARCHITECTURE.md §4: N·count for all_gather and reduce_scatter, count
// for all_reduce and broadcast. `bytes_sent` is the bytes this rank sends under the standard ring
// algorithms, whatever algorithm the library really picks (E = elements · sizeof(T)):
//     all_gather       (N−1)/N · E   = (N−1)·count_per_rank·sizeof(T)   (exact)
//     reduce_scatter   (N−1)/N · E   = (N−1)·count_per_rank·sizeof(T)   (exact)
//     all_reduce     2·(N−1)/N · E   (reduce-scatter + all-gather ring), rounded down per call
//     broadcast        (N−1)/N · E   (pipelined ring: every rank but one forwards the buffer
//                                     once; averaged over ranks), rounded down per call
//     barrier          0 bytes, calls only.
// With N = 1 nothing is sent. ring_bytes_sent() computes one call's figure.
#pragma once
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "util/dtype.h"

namespace zt {

// ---- element types ----
// The element types a collective moves: float32, float64, bf16 and fp16 (bit patterns), int32,
// int64, uint8 (util/dtype.h's enum; the others are refused).
bool dtype_is_collective(DType dtype);
// Whether sums are defined for the type (every collective type but 16-bit float bit patterns).
bool dtype_is_reducible(DType dtype);

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::kFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::kFloat64;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return DType::kBf16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kInt64;
  else {
    static_assert(std::is_same_v<T, uint8_t>, "unsupported communicator element type");
    return DType::kUint8;
  }
}

template <typename T>
concept CommElement =
    std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, uint16_t> ||
    std::same_as<T, int32_t> || std::same_as<T, int64_t> || std::same_as<T, uint8_t>;
template <typename T>
concept ReducibleCommElement = CommElement<T> && !std::same_as<T, uint16_t>;

// How a reduction's sums are associated across the ranks.
enum class SumOrder : uint8_t {
  kLibrary,   // the library's choice, fixed for a given world size and count
  kRankTree,  // a balanced binary tree over the ranks in rank order (reduce_scatter only)
};

// Elements of partial sums a rank-tree reduce-scatter of `count_per_rank` over `world` ranks
// needs besides its send and recv buffers: (N − 2)·count (comm/rank_tree_schedule.h).
size_t rank_tree_scratch_elements(int world, size_t count_per_rank);

// ---- collectives and their counters ----
enum class CollectiveOp : uint8_t { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier };
constexpr int kNumCollectiveOps = 5;
const char* collective_op_name(CollectiveOp op);  // "all_gather", "reduce_scatter", ...

// Bytes one rank sends for one call under the ring convention above.
uint64_t ring_bytes_sent(CollectiveOp op, int world_size, uint64_t elements, size_t elem_size);

struct CollectiveCounter {
  uint64_t calls = 0;
  uint64_t elements = 0;    // logical full-buffer elements (Ψ), summed over calls
  uint64_t bytes_sent = 0;  // ring-algorithm bytes sent by this rank
};

struct CommCounters {
  std::array<CollectiveCounter, kNumCollectiveOps> by_op{};
  // Bytes of rank-tree partial sums the communicator allocated itself, for calls that lent no
  // scratch (the engine lends its planned buffers: 0 there).
  uint64_t unlent_scratch_bytes = 0;

  const CollectiveCounter& operator[](CollectiveOp op) const {
    return by_op[static_cast<size_t>(op)];
  }
  CollectiveCounter& operator[](CollectiveOp op) { return by_op[static_cast<size_t>(op)]; }
  uint64_t total_bytes_sent() const;
};

// Everything needed to issue one collective and to explain it in a timeout report.
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::kBarrier;
  DType dtype = DType::kUint8;
  const void* send = nullptr;  // all_gather, reduce_scatter
  void* recv = nullptr;        // all_gather, reduce_scatter; the buffer of all_reduce/broadcast
  size_t count = 0;            // per rank for all_gather/reduce_scatter, else the buffer size
  int root = 0;                // broadcast
  bool in_place = false;       // all_gather whose send is this rank's block of recv
  SumOrder order = SumOrder::kLibrary;  // reduce_scatter
  void* scratch = nullptr;  // reduce_scatter in rank-tree order: lent partial-sum storage, or null
  // Context for reports.
  int rank = 0;
  int world_size = 1;
  uint64_t sequence = 0;  // 0-based index of this collective on its communicator
  int64_t step = -1;
  std::string phase;
  double timeout_seconds = 600.0;
};

// Bytes of partial sums a call needs besides its send and recv buffers: those of
// rank_tree_scratch_elements for a reduce-scatter in rank-tree order, else 0 (what the
// communicator's checks, the NCCL communicator's own allocation and the tests' guard take).
size_t rank_tree_scratch_bytes(const CollectiveCall& call);

// A backend's in-flight collective.
class CommRequest {
 public:
  explicit CommRequest(CollectiveCall call)
      : call_(std::move(call)), issued_(std::chrono::steady_clock::now()) {}
  virtual ~CommRequest() = default;
  CommRequest(const CommRequest&) = delete;
  CommRequest& operator=(const CommRequest&) = delete;

  // One nonblocking progress-and-completion check; true once complete. Throws zt::Error when
  // the library reports a failure.
  virtual bool poll() = 0;
  // Orders the backend's later work after this collective on the device; false when the
  // backend cannot (the caller then waits on the host).
  virtual bool enqueue_device_wait() { return false; }
  // Ends the whole job with a non-zero exit code; does not return.
  virtual void abort_job(int exit_code) = 0;

  const CollectiveCall& call() const { return call_; }
  std::chrono::steady_clock::time_point issued() const { return issued_; }

 private:
  CollectiveCall call_;
  std::chrono::steady_clock::time_point issued_;
};

class CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::unique_ptr<CommRequest> request) : request_(std::move(request)) {}
  ~CommHandle();
  CommHandle(CommHandle&&) noexcept = default;
  CommHandle& operator=(CommHandle&& other) noexcept;
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;

  // Blocks until complete; on timeout reports and aborts the job (see the header comment).
  void wait();
  // Polls once; true when complete.
  bool test();
  bool done() const { return request_ == nullptr; }

 private:
  friend class Communicator;  // device_wait takes the request over

  [[noreturn]] void report_timeout_and_abort(double waited_seconds);

  std::unique_ptr<CommRequest> request_;  // null once complete
};

// Bytes of one rank's input (send) and output (recv) buffers of a collective; all_reduce and
// broadcast work in place in recv (send = 0).
struct CollectiveBytes {
  size_t send = 0;
  size_t recv = 0;
};
CollectiveBytes collective_bytes(const CollectiveCall& call);

class Communicator {
 public:
  static constexpr double kDefaultTimeoutSeconds = 600.0;
  // Longer timeouts are none at all (as are 0 and infinity).
  static constexpr double kMaxTimeoutSeconds = 1e9;

  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend_name() const = 0;

  // ---- type-erased collectives (validate, count, then start_collective) ----
  CommHandle all_gather(DType dtype, const void* send, void* recv, size_t count_per_rank);
  CommHandle reduce_scatter_sum(DType dtype, const void* send, void* recv, size_t count_per_rank,
                                SumOrder order = SumOrder::kLibrary, void* scratch = nullptr);
  CommHandle all_reduce_sum(DType dtype, void* inout, size_t count);
  CommHandle broadcast(DType dtype, void* buf, size_t count, int root);
  void barrier();

  // ---- typed forms ----
  template <CommElement T>
  CommHandle all_gather(const T* send, T* recv, size_t count_per_rank) {
    return all_gather(dtype_of<T>(), send, recv, count_per_rank);
  }
  template <ReducibleCommElement T>
  CommHandle reduce_scatter_sum(const T* send, T* recv, size_t count_per_rank,
                                SumOrder order = SumOrder::kLibrary, T* scratch = nullptr) {
    return reduce_scatter_sum(dtype_of<T>(), send, recv, count_per_rank, order, scratch);
  }
  template <ReducibleCommElement T>
  CommHandle all_reduce_sum(T* inout, size_t count) {
    return all_reduce_sum(dtype_of<T>(), inout, count);
  }
  template <CommElement T>
  CommHandle broadcast(T* buf, size_t count, int root) {
    return broadcast(dtype_of<T>(), buf, count, root);
  }

  // ---- blocking forms: issue and wait ----
  template <CommElement T>
  void all_gather_blocking(const T* send, T* recv, size_t count_per_rank) {
    all_gather(send, recv, count_per_rank).wait();
  }
  template <ReducibleCommElement T>
  void reduce_scatter_sum_blocking(const T* send, T* recv, size_t count_per_rank) {
    reduce_scatter_sum(send, recv, count_per_rank).wait();
  }
  template <ReducibleCommElement T>
  void all_reduce_sum_blocking(T* inout, size_t count) {
    all_reduce_sum(inout, count).wait();
  }
  template <CommElement T>
  void broadcast_blocking(T* buf, size_t count, int root) {
    broadcast(buf, count, root).wait();
  }

  // ---- device-ordered waits (see the header comment) ----
  void device_wait(CommHandle& handle);
  // Host-waits every collective passed to device_wait since the last call; returns the seconds
  // it blocked.
  double finish_device_waits();
  size_t pending_device_waits() const { return device_waited_.size(); }
  // Handles ordered on the device (not host-waited) by device_wait, since construction.
  uint64_t device_ordered_waits() const { return device_ordered_waits_; }

  // ---- context for timeout reports ----
  void set_context(int64_t step, const char* phase);
  int64_t step() const { return step_; }
  const std::string& phase() const { return phase_; }

  // ---- timeout (seconds; 0, infinity or more than kMaxTimeoutSeconds: none) ----
  void set_timeout_seconds(double seconds);
  double timeout_seconds() const { return timeout_seconds_; }

  // ---- counters ----
  const CommCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = CommCounters{}; }

 protected:
  // The backend's one entry point: issue the (validated) collective without blocking.
  virtual std::unique_ptr<CommRequest> start_collective(CollectiveCall call) = 0;

 private:
  CommHandle issue(CollectiveCall call, uint64_t full_elements);

  CommCounters counters_;
  std::vector<CommHandle> device_waited_;  // ordered on the device, not yet seen complete
  uint64_t device_ordered_waits_ = 0;
  uint64_t next_sequence_ = 0;
  int64_t step_ = -1;
  std::string phase_ = "none";
  double timeout_seconds_ = kDefaultTimeoutSeconds;
};

// Issues `call`'s collective (op, dtype, count, root, sum order) on `target` over the buffers
// send/recv and a rank-tree reduce-scatter's `scratch` (null: target allocates its own): for
// communicators that wrap another one (staging, which sums host copies in host scratch of its
// own; guarding, which hands the caller's on). A barrier blocks and returns a completed handle.
CommHandle forward_collective(Communicator& target, const CollectiveCall& call, const void* send,
                              void* recv, void* scratch = nullptr);

}  // namespace zt
