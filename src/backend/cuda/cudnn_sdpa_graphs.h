// The cuDNN SDPA graphs of the fused attention (cudnn_attention.h), built from an SdpaGraphKey
// through the cuDNN frontend's graph API: our [B,T,H,hd] rows as strides, fp32 statistics, the
// causal mask and the model's scale, and for document masks cuDNN's ragged (THD) layout with
// per-sequence offsets. A graph cuDNN will not build for its key (a build step that fails other
// than by a CUDA call, the handle or the device; a cuDNN too old for the ragged layout) is a
// GraphRefused; any other failure an Error.
#pragma once
#include <cudnn.h>

#include <cudnn_frontend.h>
#include <cstdint>
#include <memory>

#include "backend/attention_choice.h"
#include "util/error.h"

namespace zt::cuda {

// Tensor ids of the variant pack; the last five only in the ragged (document-masked) graphs.
enum SdpaTensorUid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSeqLenQ,
  kSeqLenKv,
  kQOffsets,
  kKvOffsets,
  kStatsOffsets
};

struct BuiltGraph {
  std::shared_ptr<cudnn_frontend::graph::Graph> graph;
  int64_t workspace = 0;
};

// cuDNN refused to build the graph of a key (the message names the key and the step).
class GraphRefused : public Error {
 public:
  using Error::Error;
};

// Throws Error naming `call` unless status is CUDNN_STATUS_SUCCESS.
void check_cudnn(cudnnStatus_t status, const char* call);
// Throws Error naming the key and the step unless status is good (running a graph, or its
// workspace query; its build steps throw GraphRefused for a refusal).
void check_frontend(cudnn_frontend::error_t status, const SdpaGraphKey& key, const char* step);
// Whether the key is a documents' ragged graph.
bool ragged(const SdpaGraphKey& key);

// The graphs of a key, built (validated, planned, checked) but not run, with cuDNN's workspace.
std::shared_ptr<BuiltGraph> build_forward(cudnnHandle_t handle, const SdpaGraphKey& key);
std::shared_ptr<BuiltGraph> build_backward(cudnnHandle_t handle, const SdpaGraphKey& key);

}  // namespace zt::cuda
