// CUDA graphs of a backend's stream (Backend::capture, --cuda-graphs): the work a function issues
// on the stream is recorded (stream capture, this thread only) and instantiated once, and each
// replay launches the whole graph at once, without the host's per-kernel launches. A recording
// holds every kernel's arguments, pointers and scalars, as they were when it was made.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace zt::cuda {

// Records what `work` issues on `stream`; null, with `why_not`, when a call inside it failed or
// was one a capture cannot hold (then nothing it issued ran), or when the graph cannot be
// instantiated.
std::unique_ptr<CapturedWork> capture_stream_work(cudaStream_t stream,
                                                  const std::function<void()>& work,
                                                  std::string& why_not);

// A buffer the backend's ops use was moved or freed (a workspace grown, a table replaced):
// recordings made before may point at it (Backend::own_buffers_moved). Counted process-wide.
void note_own_buffer_moved();
uint64_t own_buffer_moves();

}  // namespace zt::cuda
