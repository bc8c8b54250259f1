#include "backend/cuda/cuda_graph_capture.h"

#include <atomic>
#include <exception>

#include "util/cuda/cuda_check.h"

namespace zt::cuda {

namespace {

std::atomic<uint64_t> g_own_buffer_moves{0};

class StreamGraph final : public CapturedWork {
 public:
  StreamGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~StreamGraph() override { cudaGraphExecDestroy(exec_); }  // teardown errors: not actionable
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;
  void replay() override { ZT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

std::string failed_call(const char* call, cudaError_t status) {
  return std::string(call) + ": " + cudaGetErrorString(status);
}

}  // namespace

std::unique_ptr<CapturedWork> capture_stream_work(cudaStream_t stream,
                                                  const std::function<void()>& work,
                                                  std::string& why_not) {
  // Thread-local mode: another thread's allocations or waits (an offload worker, a profiler's
  // buffers) do not break this capture; this thread's own do, and say so.
  ZT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::string failed;
  try {
    work();
  } catch (const std::exception& e) {
    failed = e.what();
  } catch (...) {
    failed = "an exception that is not a std::exception";
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (failed.empty() && ended != cudaSuccess) failed = failed_call("cudaStreamEndCapture", ended);
  cudaGraphExec_t exec = nullptr;
  if (failed.empty()) {
    const cudaError_t made = cudaGraphInstantiateWithFlags(&exec, graph, 0);
    if (made != cudaSuccess) failed = failed_call("cudaGraphInstantiateWithFlags", made);
  }
  if (failed.empty()) {  // the graph's device resources now, not at its first replay
    const cudaError_t uploaded = cudaGraphUpload(exec, stream);
    if (uploaded != cudaSuccess) {
      cudaGraphExecDestroy(exec);
      failed = failed_call("cudaGraphUpload", uploaded);
    }
  }
  if (graph) cudaGraphDestroy(graph);
  if (!failed.empty()) {
    cudaGetLastError();  // a capture's errors are not sticky: clear the last one for later checks
    why_not = failed;
    return nullptr;
  }
  return std::make_unique<StreamGraph>(exec, stream);
}

void note_own_buffer_moved() {
  g_own_buffer_moves.fetch_add(1, std::memory_order_relaxed);
}

uint64_t own_buffer_moves() {
  return g_own_buffer_moves.load(std::memory_order_relaxed);
}

}  // namespace zt::cuda
