#include "backend/cuda/cuda_event_timeline.h"

#include <string>

#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {

CudaEventTimeline::~CudaEventTimeline() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

PhaseTimeline::Mark CudaEventTimeline::mark() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    ZT_CUDA_CHECK(cudaEventCreate(&e));  // default flags: timing enabled
    events_.push_back(e);
  }
  ZT_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
  return static_cast<Mark>(used_++);
}

cudaEvent_t CudaEventTimeline::event(Mark m, const char* which) const {
  ZT_CHECK(m >= 0 && static_cast<size_t>(m) < used_, std::string("CudaEventTimeline: the ") +
                                                         which + " mark " + std::to_string(m) +
                                                         " was not recorded since the last reset");
  return events_[static_cast<size_t>(m)];
}

double CudaEventTimeline::seconds(Mark from, Mark to) {
  cudaEvent_t a = event(from, "from"), b = event(to, "to");
  ZT_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0.0f;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return static_cast<double>(ms) * 1e-3;
}

}  // namespace zt::cuda
