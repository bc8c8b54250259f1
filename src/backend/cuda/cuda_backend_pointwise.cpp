// The CUDA backend's pointwise ops (backend/backend.h): the gated MLP activation, the embedding,
// the cross-entropy and the elementwise helpers, each cuda_pointwise.cu's kernels (through
// cuda_kernels.h) on the backend's stream.
#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device_arena.h"
#include "backend/cuda/cuda_kernels.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt {
namespace cuda {

namespace {

cudaStream_t stream_of(const CudaBackend& backend) {
  return static_cast<cudaStream_t>(backend.stream_handle());
}

}  // namespace

// ---- gated MLP activation, embedding, cross-entropy (cuda_pointwise.cu) ----
void CudaBackend::glu_forward(TensorView h, ConstTensorView gate, ConstTensorView up, int64_t n,
                              GluActivation act) {
  launch_glu_forward(h, gate, up, n, act, stream_of(*this));
}

void CudaBackend::glu_backward(TensorView dgate, TensorView dup, ConstTensorView dh,
                               ConstTensorView gate, ConstTensorView up, int64_t n,
                               GluActivation act) {
  launch_glu_backward(dgate, dup, dh, gate, up, n, act, stream_of(*this));
}

void CudaBackend::embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table,
                                    int64_t n, int64_t D) {
  launch_embedding_forward(x, tokens, table, n, D, stream_of(*this));
}

// The sorted kernel where its scratch fits the reduction region (every micro-batch of up to about
// half a million tokens), else the scan kernel; both give the CPU's bits.
void CudaBackend::embedding_backward(float* dtable, ConstTensorView dx, const int32_t* tokens,
                                     int64_t n, int64_t D) {
  if (n == 0 || D == 0) return;
  const ArenaScope scope(scratch_arena());
  const BumpRegion& region = scratch_arena().region(ScratchCategory::kReduction);
  const size_t need = embedding_sort_scratch_bytes(n);
  if (need + kArenaAlignment > region.capacity() - region.used()) {
    launch_embedding_backward(dtable, dx, tokens, n, D, stream_of(*this));
    return;
  }
  void* scratch = scratch_arena().allocate_bytes(ScratchCategory::kReduction, need);
  launch_embedding_backward_sorted(dtable, dx, tokens, n, D, scratch, need, stream_of(*this));
}

void CudaBackend::cross_entropy(float* losses, TensorView dlogits, ConstTensorView logits,
                                const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                                float softcap, const float* grad_scale_factor) {
  launch_cross_entropy(losses, dlogits, logits, targets, M, V, grad_scale, softcap,
                       grad_scale_factor, stream_of(*this));
}

void CudaBackend::softcap_inplace(TensorView y, float c, int64_t n) {
  ZT_CHECK(c > 0.0f, "softcap_inplace: the cap must be positive, got " + std::to_string(c));
  launch_softcap(y, c, n, stream_of(*this));
}

// ---- elementwise helpers ----
void CudaBackend::add_inplace(TensorView y, ConstTensorView x, int64_t n) {
  launch_add(y, x, n, stream_of(*this));
}

void CudaBackend::scale_inplace(TensorView y, float s, int64_t n) {
  launch_scale(y, s, n, stream_of(*this));
}

void CudaBackend::dropout_forward(TensorView y, ConstTensorView x, int64_t M, int64_t K, float p,
                                  uint64_t stream, int64_t first_row) {
  launch_dropout(y, x, M * K, static_cast<uint64_t>(first_row) * static_cast<uint64_t>(K), p,
                 stream, stream_of(*this));
}

void CudaBackend::zero(TensorView y, int64_t n) {
  if (n > 0) ZT_CUDA_CHECK(cudaMemsetAsync(y.data, 0, view_bytes(y, n), stream_of(*this)));
}

void CudaBackend::to_bf16(bf16_t* out, const float* in, int64_t n) {
  launch_to_bf16(out, in, n, stream_of(*this));
}

void CudaBackend::from_bf16(float* out, const bf16_t* in, int64_t n) {
  launch_from_bf16(out, in, n, stream_of(*this));
}

void CudaBackend::to_fp16(uint16_t* out, const float* in, int64_t n) {
  launch_to_fp16(out, in, n, stream_of(*this));
}

void CudaBackend::from_fp16(float* out, const uint16_t* in, int64_t n) {
  launch_from_fp16(out, in, n, stream_of(*this));
}

}  // namespace cuda
}  // namespace zt
