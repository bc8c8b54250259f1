// Causal grouped-query attention through cuDNN's fused SDPA (the cuDNN frontend's graph API):
// one flash-style kernel per pass (the forward keeps no T×T matrix; the deterministic backward's
// cuDNN workspace holds dP, B·H·T² bf16, which this class allocates at prepare or at first use;
// with --deterministic false the backward accumulates dQ with atomics instead, its workspace the
// fp32 accumulator).
// Built only when cuDNN and its frontend headers were found (ZEROTRAIN_HAVE_CUDNN); the backend's
// --attention choice (backend/attention_choice.h) decides whether it runs.
//
// Layout: our q/out [B,T,H,hd] and k/v [B,T,Hkv,hd] are handed to cuDNN as [B,H,T,hd] with
// strides (T·H·hd, hd, H·hd, 1) — no transpose; lse [B,H,T] is cuDNN's fp32 Stats tensor
// [B,H,T,1] (natural log-sum-exp of the scaled scores, the GEMM path's definition), read and
// written in place where it starts at a 16-byte boundary, else copied through the scratch. GQA is
// cuDNN's own: H a multiple of Hkv, head h reads kv head h/(H/Hkv).
//
// Precision: the kernels read and write bf16 (fp16 for activations stored in fp16, a graph of its
// own: SdpaGraphKey::io) and keep softmax statistics and accumulation in fp32. Activations stored
// in bf16 or fp16 are read and written where they are. Activations stored in fp32 are staged:
// q/k/v/out/dout rounded to bf16 into the attention scratch and the results widened back
// (attention_staging_bytes), exact for `out`, which a forward wrote from bf16.
//
// Document masks (packed sequences): each document's stretch of a row is one sequence of cuDNN's
// ragged (THD) layout, read in place through per-sequence element offsets, with the padding mask
// giving each its length and the causal mask applied within it (RaggedDocuments; Hopper only). A
// graph takes K sequences of at most L tokens (powers of two, K·L² within the plain graph's B·T²,
// K halved further until cuDNN's workspace for it fits the one prepare() planned at start-up:
// fit_documents); a micro-batch with more documents runs it several times, and the rest in
// graphs of smaller powers of two, no sequence empty (RaggedDocuments). The statistics are
// token-major there and transposed to the model's lse. set_documents gives the micro-batch's
// documents (host memory) before its calls; the first call with documents uploads their offsets
// (16-byte aligned arrays).
//
// Graphs are built once per key (shape, direction, storage, ragged K and L: SdpaGraphKey) and
// cached; a training run without documents builds two, one with them a few more (one per K and L
// its micro-batches meet, each pair within the workspace prepare() allocated). Each call takes its
// staging (bf16 copies, and the fp32 statistics where the caller's lse is not 16-byte aligned or
// the graph is ragged) from the attention scratch and checks that all of it would fit
// (check_fused_attention_fits) before it enqueues anything. The model's activation arena aligns
// its lse to 256 bytes, so a plain graph takes it in place.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backend/attention_choice.h"
#include "backend/attention_graph_report.h"
#include "backend/cuda/cuda_device_arena.h"
#include "util/tensor_view.h"

namespace zt::cuda {

class CudnnAttention {
 public:
  // Creates the cuDNN handle on `stream` (every graph runs there). deterministic: the backward's
  // algorithm (SdpaGraphKey::deterministic; false with --deterministic false).
  explicit CudnnAttention(cudaStream_t stream, bool deterministic = true);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Backend::attention_forward's contract (device memory; all views one storage type).
  // with_documents: the call has document masks, the ones set_documents gave last (a zt::Error
  // when none were given, or for another B and T).
  void forward(DeviceArena& arena, TensorView out, float* lse, ConstTensorView q, ConstTensorView k,
               ConstTensorView v, const AttentionShape& shape, bool with_documents = false);
  // Backend::attention_backward's contract: dq, dk, dv overwritten.
  void backward(DeviceArena& arena, TensorView dq, TensorView dk, TensorView dv,
                ConstTensorView dout, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                ConstTensorView out, const float* lse, const AttentionShape& shape,
                bool with_documents = false);

  // The micro-batch's document starts (host memory, [B, T], Backend's doc_start contract; null:
  // none), for the calls with_documents until the next set_documents. A doc_start that breaks the
  // contract is a zt::Error naming the entry.
  void set_documents(const int32_t* host_doc_start, int64_t B, int64_t T);

  // Builds (and caches) the forward graph of `shape` for activations stored in `storage`, and the
  // backward graph `with_backward` (training), without running them (validate, plans,
  // check_support, build_plans), and allocates the larger one's workspace. A graph cuDNN refuses,
  // or a workspace the device cannot hold, is a zt::Error naming the step; what the start-up
  // check of --attention auto | fused asks. document_masks: also the documents' ragged graphs
  // with the largest workspace (L = T), whose workspace every other ragged graph fits in.
  void prepare(const AttentionShape& shape, DType storage, bool with_backward = true,
               bool document_masks = false);

  // Fills the cuDNN workspace held with `byte`, on the stream (nothing when none is held): what a
  // test uses to show that no result depends on what the workspace held before a call.
  void fill_workspace(unsigned char byte);

  int64_t graphs_built() const;
  // The graphs built so far and their builds' seconds, in all and by prepare(), and the
  // workspace held (a run's report).
  AttentionGraphReport graph_report() const;
  // Bytes of cuDNN workspace held (sized for the largest graph prepared or run so far).
  int64_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The cuDNN library's version (cudnnGetVersion: 10000·major + 100·minor + patch).
size_t cudnn_library_version();

}  // namespace zt::cuda
