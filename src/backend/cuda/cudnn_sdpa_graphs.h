// The cuDNN SDPA graphs of the fused attention (cudnn_attention.h), built from an SdpaGraphKey
// through the cuDNN frontend's graph API: our [B,T,H,hd] rows as strides, fp32 statistics, the
// causal mask and the model's scale, and for document masks cuDNN's ragged (THD) layout with
// per-sequence offsets. A graph cuDNN will not build for its key (a build step that fails other
// than by a CUDA call, the handle or the device; a cuDNN too old for the ragged layout) is a
// GraphRefused; any other failure an Error.
//
// The frontend's headers are included by cudnn_sdpa_graphs.cpp alone (they take most of the CUDA
// backend's compile time): callers hold a graph as an opaque pointer and run it here.
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "backend/attention_choice.h"
#include "util/error.h"

namespace cudnn_frontend::graph {
class Graph;
}

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
// Whether the key is a documents' ragged graph.
bool ragged(const SdpaGraphKey& key);

// The graphs of a key, built (validated, planned, checked) but not run, with cuDNN's workspace.
std::shared_ptr<BuiltGraph> build_forward(cudnnHandle_t handle, const SdpaGraphKey& key);
std::shared_ptr<BuiltGraph> build_backward(cudnnHandle_t handle, const SdpaGraphKey& key);

// Enqueues the graph built for `key` on the handle's stream with the tensors of `pack` (uid →
// device pointer) and cuDNN's workspace; an Error naming the key if cuDNN fails.
void execute_graph(const BuiltGraph& built, cudnnHandle_t handle, const SdpaGraphKey& key,
                   std::unordered_map<int64_t, void*>& pack, void* workspace);

}  // namespace zt::cuda
