// Launchers of the CUDA backend's kernels (defined in the .cu files, called by cuda_backend.cpp
// and cuda_attention.cpp). Every launcher enqueues on `stream`, checks the launch
// (cudaGetLastError) and throws zt::Error on failure. Pointers are device memory.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/adam_constants.h"
#include "backend/glu_activation.h"
#include "util/dtype.h"
#include "util/tensor_view.h"

namespace zt::cuda {

// Activations and working parameters are views (util/tensor_view.h) stored in float32 or
// bfloat16; the activations of one call share one type (cuda_storage.cuh), a weight (g, table)
// may have another. Statistics and parameter gradients are fp32.

// ---- cuda_norm_rope.cu ----
// The norm's weight enters as weight_offset + g (backend.h: Gemma's 1 + g).
void launch_rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g,
                            int64_t M, int64_t D, float eps, float weight_offset,
                            cudaStream_t stream);
void launch_rmsnorm_backward_dx(TensorView dx, ConstTensorView dy, ConstTensorView x,
                                ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                                float weight_offset, cudaStream_t stream);
// dg[d] += Σ_m dy·x·rstd (assign: dg[d] =, whatever it held) in two passes: partials[chunk][d]
// (doubles, rows_per_chunk rows each), then the chunks in order.
void launch_rmsnorm_backward_dg(float* dg, double* partials, ConstTensorView dy, ConstTensorView x,
                                const float* rstd, int64_t M, int64_t D, int64_t rows_per_chunk,
                                bool assign, cudaStream_t stream);
// A rotation by ±angle from the [T, rotated/2] cos/sin tables (sin_sign = ±1) of the `rotated`
// leading elements of each head; pair i is elements i·step and i·step + partner
// (RopeSpec::pair_step and pair_partner: (i, i + rotated/2), or GLM's (2i, 2i + 1)).
struct RopeRotation {
  const float* cos_table;
  const float* sin_table;
  int64_t rotated, step, partner;
  float sin_sign;
};
// x[B,T,H,hd] and, where x2 is given, x2[B,T,H2,hd] (a layer's q and k) rotated in one launch,
// token t of row b at position t − doc_start[b·T + t] (t when doc_start is null; backend.h).
void launch_rope(TensorView x, int64_t H, TensorView x2, int64_t H2, int64_t B, int64_t T,
                 int64_t hd, const RopeRotation& rotation, const int32_t* doc_start,
                 cudaStream_t stream);

// ---- cuda_pointwise.cu ----
void launch_glu_forward(TensorView h, ConstTensorView gate, ConstTensorView up, int64_t n,
                        GluActivation act, cudaStream_t stream);
void launch_glu_backward(TensorView dgate, TensorView dup, ConstTensorView dh, ConstTensorView gate,
                         ConstTensorView up, int64_t n, GluActivation act, cudaStream_t stream);
void launch_embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table, int64_t n,
                              int64_t D, cudaStream_t stream);
// The scan kernel: O(n · distinct ids) comparisons, no scratch (micro-batches whose sort does not
// fit the reduction scratch).
void launch_embedding_backward(float* dtable, ConstTensorView dx, const int32_t* tokens, int64_t n,
                               int64_t D, cudaStream_t stream);

// y[M,N] += b[N] (b may be stored in another type than y).
void launch_bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N,
                         cudaStream_t stream);
// db[n] += Σ_m dy[m,n], in two passes as rmsnorm's dg.
void launch_bias_backward(float* db, double* partials, ConstTensorView dy, int64_t M, int64_t N,
                          int64_t rows_per_chunk, cudaStream_t stream);
void launch_add(TensorView y, ConstTensorView x, int64_t n, cudaStream_t stream);  // y += x
void launch_scale(TensorView y, float s, int64_t n, cudaStream_t stream);          // y *= s
void launch_softcap(TensorView y, float c, int64_t n, cudaStream_t stream);  // y = c·tanh(y/c)
// y[e] = x[e]/(1−p) where element first_element + e of `stream_key` is kept
// (backend/dropout_hash.h).
void launch_dropout(TensorView y, ConstTensorView x, int64_t n, uint64_t first_element, float p,
                    uint64_t stream_key, cudaStream_t stream);

// ---- cuda_cross_entropy.cu ----
// dlogits may alias logits (then both have its type). grad_scale_factor: null, or a device float
// that multiplies grad_scale, read by the kernel (Backend::cross_entropy).
void launch_cross_entropy(float* losses, TensorView dlogits, ConstTensorView logits,
                          const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                          float softcap, const float* grad_scale_factor, cudaStream_t stream);

// ---- cuda_embedding_sort.cu ----
// The embedding backward over positions sorted by id (CUB's radix sort), the CPU's order: the same
// bits as launch_embedding_backward. Takes embedding_sort_scratch_bytes(n) of 256-byte aligned
// device scratch.
size_t embedding_sort_scratch_bytes(int64_t n);
void launch_embedding_backward_sorted(float* dtable, ConstTensorView dx, const int32_t* tokens,
                                      int64_t n, int64_t D, void* scratch, size_t scratch_bytes,
                                      cudaStream_t stream);

// ---- cuda_dora.cu (backend.h's DoRA ops) ----
void launch_dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b, ConstTensorView a,
                              float s, int64_t N, int64_t r, int64_t K, DType norm_type,
                              cudaStream_t stream);
void launch_dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                               const float* norms, float offset, int64_t M, int64_t N,
                               bool accumulate, cudaStream_t stream);
// sums: N floats of device scratch; partials as launch_bias_backward's.
void launch_dora_magnitude_grad(float* dm, float* sums, double* partials, ConstTensorView dy,
                                ConstTensorView z, const float* norms, int64_t M, int64_t N,
                                int64_t rows_per_chunk, cudaStream_t stream);

void launch_to_bf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);
void launch_from_bf16(float* out, const uint16_t* in, int64_t n, cudaStream_t stream);
void launch_to_fp16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream);
void launch_from_fp16(float* out, const uint16_t* in, int64_t n, cudaStream_t stream);

// ---- cuda_optimizer.cu ----
// Per-call AdamW constants, each rounded to fp32 once on the host (as cpu_adam.h does).
void launch_adamw(float* master, float* m, float* v, const float* grad, uint16_t* out_bf16,
                  float* out_f32, int64_t n, const AdamConstants& c, cudaStream_t stream);
// Σ x² in double: kSumSquaresBlocks fixed blocks write partials[kSumSquaresBlocks], one block adds
// them into *result (device). The order depends on n only.
constexpr int kSumSquaresBlocks = 1024;
void launch_sum_squares(double* result, double* partials, const float* x, int64_t n,
                        cudaStream_t stream);
// launch_sum_squares of up to kSumSquaresBatch sums in two launches: each sum's blocks and tree are
// launch_sum_squares's (the same bits); partials holds count·kSumSquaresBlocks doubles.
constexpr int kSumSquaresBatch = 64;
struct SquaresSumBatch {
  const float* x[kSumSquaresBatch];
  int64_t n[kSumSquaresBatch];
  double* out[kSumSquaresBatch];
  int count = 0;
};
void launch_sum_squares_batch(const SquaresSumBatch& batch, double* partials, cudaStream_t stream);
// out[b] = Σ x² over block b of `block` elements (the last one shorter): one CUDA block each.
void launch_block_sum_squares(double* out, const float* x, int64_t n, int64_t block,
                              cudaStream_t stream);

// ---- cuda_fingerprint.cu ----
// out[0..2] += the fingerprint (backend/gemm_tuning.h: hash, finite changed elements, non-finite
// ones) of `batch` row-major rows×cols matrices of `type` (fp32, bf16 or fp16), rows ld elements
// apart, matrices `stride` apart; `baseline` (null: zeros) the C it is compared with, in the same
// layout. out starts at zeros.
void launch_fingerprint(unsigned long long* out, const void* data, const void* baseline, DType type,
                        int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                        cudaStream_t stream);

// ---- cuda_attention_kernels.cu ----
// One pass of attention covers `heads` query heads of one batch entry that share the offset j in
// their kv group: local head c is query head h = (g0 + c)·group + j. scores holds [heads, T, T].
struct AttentionPass {
  int64_t T = 0;
  int64_t heads = 0;
  int64_t hd = 0;
  float* lse = nullptr;  // lse of local head 0, row 0; head c at + c·lse_head_stride
  int64_t lse_head_stride = 0;
  const float* dout = nullptr;  // dout/out row t of local head c at + t·row_stride + c·head_stride
  const float* out = nullptr;
  int64_t row_stride = 0;
  int64_t head_stride = 0;
  float scale = 1.0f;    // of the scores: 1/sqrt(hd) unless the model sets its own
  float softcap = 0.0f;  // the scores' soft cap c (s ← c·tanh(s/c)); 0: none
  int64_t window = 0;    // sliding window w: row i sees keys j > i − w; 0: none
  // Document masks of the pass's batch row ([T], device; null: plain causal): row i sees keys
  // doc_start[i] ≤ j ≤ i (backend.h).
  const int32_t* doc_start = nullptr;
};
// Forward: scores (already scaled) → causal (block-causal) softmax probabilities in place, lse
// written.
void launch_attention_softmax(float* scores, const AttentionPass& pass, cudaStream_t stream);
// Backward: probs holds the recomputed scaled scores, dscores holds dP = dout·vᵀ; on return
// probs = exp(s − lse) (0 for keys the row does not see) and dscores = p·(dP − dout·out)·scale.
void launch_attention_backward_rows(float* probs, float* dscores, const AttentionPass& pass,
                                    cudaStream_t stream);

// The fused attention's statistics for document masks are token-major, stats[(b·T + t)·H + h]
// (cuDNN's ragged layout); the model's lse is head-major, lse[(b·H + h)·T + t] (backend.h).
// to_heads: lse ← stats; otherwise stats ← lse. Plain copies, exact.
void launch_transpose_attention_stats(float* dst, const float* src, int64_t B, int64_t T, int64_t H,
                                      bool to_heads, cudaStream_t stream);

}  // namespace zt::cuda
