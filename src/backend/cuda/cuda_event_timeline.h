// CudaEventTimeline: a PhaseTimeline on one CUDA stream. mark() records a timing event on the
// stream and returns at once; seconds(from, to) waits for `to` and reads cudaEventElapsedTime
// (resolution about half a microsecond). Events are created on first use and reused every step.
#pragma once
#include <cuda_runtime_api.h>

#include <vector>

#include "backend/phase_timeline.h"

namespace zt::cuda {

class CudaEventTimeline final : public PhaseTimeline {
 public:
  explicit CudaEventTimeline(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventTimeline() override;
  CudaEventTimeline(const CudaEventTimeline&) = delete;
  CudaEventTimeline& operator=(const CudaEventTimeline&) = delete;

  Mark mark() override;
  double seconds(Mark from, Mark to) override;
  void reset() override { used_ = 0; }

 private:
  cudaEvent_t event(Mark m, const char* which) const;

  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;  // [0, used_) recorded since the last reset
  size_t used_ = 0;
};

}  // namespace zt::cuda
