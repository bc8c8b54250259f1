// Attention, GEMM path. Head h uses kv head g = h / group (group = H/Hkv), so h = g·group + j.
// Work goes in passes over (batch b, offset j, a range of kv heads [g0, g0 + heads)): the query
// heads of a pass, (g0 + c)·group + j, are equally spaced (group·hd floats apart in a row of q),
// and so are their kv heads (hd apart), which makes every product of the pass ONE strided-batched
// cuBLASLt GEMM over c. Per pass, with S/P/dS [heads, T, T] in the attention scratch:
//   forward   S = scale·Q·Kᵀ  →  (soft cap)  →  causal softmax (P, lse)  →  O = P·V
//   backward  S = scale·Q·Kᵀ, dP = dO·Vᵀ  →  P = exp(S − lse), dS = P∘(dP − rowsum(dO∘O))·scale
//             (with a soft cap c: S capped first, dS times 1 − (S/c)²)
//             dQ = dS·K;  dK (=, then += over j) dSᵀ·Q;  dV (=, then += over j) Pᵀ·dO
// Passes run in a fixed order on one stream and dK/dV accumulate over j in increasing order
// (β = 0 for j = 0, then 1): deterministic. The full T×T products are computed and the upper
// triangle discarded — twice the causal FLOPs; fine for correctness and as the reference of the
// fused path (cudnn_attention.h). Document masks (backend.h) only change which scores the row
// kernels keep: a pass's rows read their batch row's doc_start. With bf16 storage the tensors are
// widened into fp32 copies first and the outputs rounded once at the end (cuda_attention.h).
#include "backend/cuda/cuda_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_attention_staging.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_storage.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

void check_shape(const AttentionShape& s) {
  ZT_CHECK(s.Hkv > 0 && s.H % s.Hkv == 0, "attention: " + std::to_string(s.H) +
                                              " query heads are not a multiple of " +
                                              std::to_string(s.Hkv) + " kv heads");
}

// Pointers and strides of one pass.
struct PassView {
  int64_t b, j, g0, heads;
  const AttentionShape& s;
  const int32_t* doc_start;  // [B, T] or null

  int64_t group() const { return s.H / s.Hkv; }
  int64_t q_row_stride() const { return s.H * s.hd; }       // between tokens, q/out/dq/dout
  int64_t kv_row_stride() const { return s.Hkv * s.hd; }    // between tokens, k/v/dk/dv
  int64_t q_head_stride() const { return group() * s.hd; }  // between the pass's query heads
  int64_t kv_head_stride() const { return s.hd; }
  int64_t q_offset() const { return (b * s.T * s.H + g0 * group() + j) * s.hd; }
  int64_t kv_offset() const { return (b * s.T * s.Hkv + g0) * s.hd; }
  int64_t lse_offset() const { return (b * s.H + g0 * group() + j) * s.T; }
  float scale() const { return s.scores.scale_for(s.hd); }

  // C[T, T] per head = alpha · X[T, hd] · Yᵀ, X rows of a q-like tensor, Y of a kv-like one.
  RowMajorGemm q_times_kv_t(const float* x, const float* y, float alpha, float* c) const {
    RowMajorGemm g;
    g.transpose_b = true;
    g.rows = s.T, g.cols = s.T, g.inner = s.hd, g.alpha = alpha;
    g.a = x + q_offset(), g.lda = q_row_stride(), g.stride_a = q_head_stride();
    g.b = y + kv_offset(), g.ldb = kv_row_stride(), g.stride_b = kv_head_stride();
    g.c = c, g.ldc = s.T, g.stride_c = s.T * s.T, g.batch = heads;
    return g;
  }
  // out[T, hd] per head (q-like) = M[T, T] · Y[T, hd] (kv-like).
  RowMajorGemm scores_times_kv(const float* m, const float* y, float* out) const {
    RowMajorGemm g;
    g.rows = s.T, g.cols = s.hd, g.inner = s.T;
    g.a = m, g.lda = s.T, g.stride_a = s.T * s.T;
    g.b = y + kv_offset(), g.ldb = kv_row_stride(), g.stride_b = kv_head_stride();
    g.c = out + q_offset(), g.ldc = q_row_stride(), g.stride_c = q_head_stride(), g.batch = heads;
    return g;
  }
  // out[T, hd] per head (kv-like) (β·out +) = M[T, T]ᵀ · X[T, hd] (q-like).
  RowMajorGemm scores_t_times_q(const float* m, const float* x, float beta, float* out) const {
    RowMajorGemm g;
    g.transpose_a = true;
    g.rows = s.T, g.cols = s.hd, g.inner = s.T, g.beta = beta;
    g.a = m, g.lda = s.T, g.stride_a = s.T * s.T;
    g.b = x + q_offset(), g.ldb = q_row_stride(), g.stride_b = q_head_stride();
    g.c = out + kv_offset(), g.ldc = kv_row_stride(), g.stride_c = kv_head_stride();
    g.batch = heads;
    return g;
  }
  AttentionPass rows(float* lse, const float* dout, const float* out) const {
    AttentionPass p;
    p.T = s.T, p.heads = heads, p.hd = s.hd;
    p.lse = lse + lse_offset(), p.lse_head_stride = group() * s.T;
    p.dout = dout ? dout + q_offset() : nullptr;
    p.out = out ? out + q_offset() : nullptr;
    p.row_stride = q_row_stride(), p.head_stride = q_head_stride();
    p.scale = scale();
    p.softcap = s.scores.softcap;
    p.window = s.scores.window;
    p.doc_start = doc_start ? doc_start + b * s.T : nullptr;
    return p;
  }
};

// Calls fn(view) for every pass in the fixed order b, j, g0.
template <typename Fn>
void for_each_pass(const AttentionShape& s, int64_t heads_per_pass, const int32_t* doc_start,
                   Fn fn) {
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t j = 0; j < s.H / s.Hkv; ++j) {
      for (int64_t g0 = 0; g0 < s.Hkv; g0 += heads_per_pass) {
        fn(PassView{b, j, g0, std::min(heads_per_pass, s.Hkv - g0), s, doc_start});
      }
    }
  }
}

}  // namespace

namespace {

void attention_forward_f32(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, float* out,
                           float* lse, const float* q, const float* k, const float* v,
                           const AttentionShape& shape, const int32_t* doc_start) {
  const int64_t heads_per_pass =
      attention_heads_per_pass(arena.region(ScratchCategory::kAttention).capacity() -
                                   arena.region(ScratchCategory::kAttention).used(),
                               shape.T, 1, shape.Hkv);
  float* scores = arena.allocate<float>(ScratchCategory::kAttention,
                                        static_cast<size_t>(heads_per_pass * shape.T * shape.T));
  for_each_pass(shape, heads_per_pass, doc_start, [&](const PassView& pass) {
    gemm.run(pass.q_times_kv_t(q, k, pass.scale(), scores));
    launch_attention_softmax(scores, pass.rows(lse, nullptr, nullptr), stream);
    gemm.run(pass.scores_times_kv(scores, v, out));
  });
}

void attention_backward_f32(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, float* dq,
                            float* dk, float* dv, const float* dout, const float* q, const float* k,
                            const float* v, const float* out, const float* lse,
                            const AttentionShape& shape, const int32_t* doc_start) {
  const BumpRegion& region = arena.region(ScratchCategory::kAttention);
  const int64_t heads_per_pass =
      attention_heads_per_pass(region.capacity() - region.used(), shape.T, 2, shape.Hkv);
  const size_t matrices = static_cast<size_t>(heads_per_pass * shape.T * shape.T);
  float* probs = arena.allocate<float>(ScratchCategory::kAttention, matrices);
  float* dscores = arena.allocate<float>(ScratchCategory::kAttention, matrices);
  // The row kernel reads lse through AttentionPass::lse (non-const for the forward's writes).
  float* lse_rows = const_cast<float*>(lse);
  for_each_pass(shape, heads_per_pass, doc_start, [&](const PassView& pass) {
    gemm.run(pass.q_times_kv_t(q, k, pass.scale(), probs));
    gemm.run(pass.q_times_kv_t(dout, v, 1.0f, dscores));
    launch_attention_backward_rows(probs, dscores, pass.rows(lse_rows, dout, out), stream);
    gemm.run(pass.scores_times_kv(dscores, k, dq));
    const float beta = pass.j == 0 ? 0.0f : 1.0f;
    gemm.run(pass.scores_t_times_q(dscores, q, beta, dk));
    gemm.run(pass.scores_t_times_q(probs, dout, beta, dv));
  });
}

constexpr DType kF32 = DType::kFloat32;  // what the GEMM path computes in

const float* fp32_input(DeviceArena& arena, ConstTensorView src, int64_t n, cudaStream_t stream) {
  return static_cast<const float*>(staged_input(arena, src, kF32, n, stream));
}
float* fp32_output(DeviceArena& arena, TensorView dst, int64_t n) {
  return static_cast<float*>(staged_output(arena, dst, kF32, n));
}

}  // namespace

void attention_forward(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, TensorView out,
                       float* lse, ConstTensorView q, ConstTensorView k, ConstTensorView v,
                       const AttentionShape& shape, const int32_t* doc_start) {
  check_shape(shape);
  shared_storage("attention_forward", {out, q, k, v});
  if (shape.B == 0 || shape.T == 0 || shape.H == 0) return;
  const ArenaScope scope(arena);
  const int64_t q_n = shape.B * shape.T * shape.H * shape.hd;
  const int64_t kv_n = shape.B * shape.T * shape.Hkv * shape.hd;
  const float *q32 = fp32_input(arena, q, q_n, stream), *k32 = fp32_input(arena, k, kv_n, stream),
              *v32 = fp32_input(arena, v, kv_n, stream);
  float* out32 = fp32_output(arena, out, q_n);
  attention_forward_f32(gemm, arena, stream, out32, lse, q32, k32, v32, shape, doc_start);
  commit_output(out, out32, kF32, q_n, stream);
}

void attention_backward(LtGemm& gemm, DeviceArena& arena, cudaStream_t stream, TensorView dq,
                        TensorView dk, TensorView dv, ConstTensorView dout, ConstTensorView q,
                        ConstTensorView k, ConstTensorView v, ConstTensorView out, const float* lse,
                        const AttentionShape& shape, const int32_t* doc_start) {
  check_shape(shape);
  shared_storage("attention_backward", {dq, dk, dv, dout, q, k, v, out});
  if (shape.B == 0 || shape.T == 0 || shape.H == 0) return;
  const ArenaScope scope(arena);
  const int64_t q_n = shape.B * shape.T * shape.H * shape.hd;
  const int64_t kv_n = shape.B * shape.T * shape.Hkv * shape.hd;
  const float *q32 = fp32_input(arena, q, q_n, stream), *k32 = fp32_input(arena, k, kv_n, stream),
              *v32 = fp32_input(arena, v, kv_n, stream),
              *out32 = fp32_input(arena, out, q_n, stream),
              *dout32 = fp32_input(arena, dout, q_n, stream);
  float *dq32 = fp32_output(arena, dq, q_n), *dk32 = fp32_output(arena, dk, kv_n),
        *dv32 = fp32_output(arena, dv, kv_n);
  attention_backward_f32(gemm, arena, stream, dq32, dk32, dv32, dout32, q32, k32, v32, out32, lse,
                         shape, doc_start);
  commit_output(dq, dq32, kF32, q_n, stream);
  commit_output(dk, dk32, kF32, kv_n, stream);
  commit_output(dv, dv32, kF32, kv_n, stream);
}

}  // namespace zt::cuda
