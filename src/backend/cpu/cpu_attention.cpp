// CPU backend: causal grouped-query attention, forward and backward side by side.
//
// Work is split over heads: the forward over (batch, query head), the backward over (batch, kv
// head) so that dK/dV — sums over the query rows of every head sharing a kv head — are each
// accumulated by one thread in a fixed order. Keys and values of the head are first transposed to
// [hd, T] so that a row of scores is a sequence of contiguous axpys (vectorises without reordering
// any sum); the softmax runs in fp32 with the vectorisable fast_expf.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "util/error.h"

namespace zt::cpu {
namespace {

struct AttentionShape {
  int64_t B, T, H, Hkv, hd;
  int64_t group() const { return H / Hkv; }  // query heads per kv head
  // Offsets of row t of batch b, head h in q/out/dq ([B,T,H,hd]) and k/v/dk/dv ([B,T,Hkv,hd]).
  int64_t q_offset(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * hd; }
  int64_t kv_offset(int64_t b, int64_t t, int64_t g) const { return ((b * T + t) * Hkv + g) * hd; }
  int64_t q_stride() const { return H * hd; }     // between consecutive t of one head
  int64_t kv_stride() const { return Hkv * hd; }  // same for k/v
};

AttentionShape checked_shape(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd) {
  ZT_CHECK(Hkv > 0 && H % Hkv == 0, "attention: " + std::to_string(H) +
                                        " query heads are not a multiple of " +
                                        std::to_string(Hkv) + " kv heads");
  return AttentionShape{B, T, H, Hkv, hd};
}

// Small problems (unit tests, tiny models) stay on the calling thread.
bool worth_parallel(const AttentionShape& sh) {
  return sh.B * sh.H * sh.T * sh.T * sh.hd > 4 * kParallelMinElements;
}

// dst[d·T + t] = src[t·stride + d] for t < T, d < hd.
void transpose_head(float* dst, const float* src, int64_t T, int64_t hd, int64_t stride) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = 0; d < hd; ++d) dst[d * T + t] = src[t * stride + d];
  }
}

// out[j] = scale · Σ_d row[d]·mat_t[d·T + j] for j < count (mat_t is a transposed head [hd, T]).
void row_times_transposed(float* out, const float* row, const float* mat_t, int64_t T,
                          int64_t count, int64_t hd, float scale) {
  std::fill(out, out + count, 0.0f);
  for (int64_t d = 0; d < hd; ++d) axpy(out, scale * row[d], mat_t + d * T, count);
}

float max_of(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[j] = exp(x[j] − shift) in place; returns Σ x[j] (summed in double, in order).
double exp_shifted(float* x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = fast_expf(x[j] - shift);
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += x[j];
  return sum;
}

}  // namespace

// Forward, per query row i of head h (kv head g = h / group):
//   s_j = q_i·k_j / sqrt(hd) for j ≤ i;  lse_i = log Σ_j exp(s_j);  out_i = Σ_j exp(s_j −
//   lse_i)·v_j
void CpuBackend::attention_forward(float* out, float* lse, const float* q, const float* k,
                                   const float* v, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                   int64_t hd) {
  const AttentionShape sh = checked_shape(B, T, H, Hkv, hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel if (worth_parallel(sh))
  {
    std::vector<float> k_t(static_cast<size_t>(hd * T));
    std::vector<float> probs(static_cast<size_t>(T));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H;
      const int64_t h = bh % H;
      const int64_t g = h / sh.group();
      transpose_head(k_t.data(), k + sh.kv_offset(b, 0, g), T, hd, sh.kv_stride());
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = i + 1;
        row_times_transposed(probs.data(), q + sh.q_offset(b, i, h), k_t.data(), T, n, hd, scale);
        const float row_max = max_of(probs.data(), n);
        const double sum = exp_shifted(probs.data(), n, row_max);
        float* out_row = out + sh.q_offset(b, i, h);
        std::fill(out_row, out_row + hd, 0.0f);
        for (int64_t j = 0; j < n; ++j) axpy(out_row, probs[j], v + sh.kv_offset(b, j, g), hd);
        const float inv_sum = static_cast<float>(1.0 / sum);
        for (int64_t d = 0; d < hd; ++d) out_row[d] *= inv_sum;
        lse[(b * H + h) * T + i] = row_max + static_cast<float>(std::log(sum));
      }
    }
  }
}

// Backward, per query row i with p_j = exp(s_j − lse_i) recomputed:
//   dp_j = dout_i·v_j;  D_i = dout_i·out_i;  ds_j = p_j·(dp_j − D_i)
//   dq_i = Σ_j ds_j·k_j / sqrt(hd);  dk_j += ds_j·q_i / sqrt(hd);  dv_j += p_j·dout_i
void CpuBackend::attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                    const float* q, const float* k, const float* v,
                                    const float* out, const float* lse, int64_t B, int64_t T,
                                    int64_t H, int64_t Hkv, int64_t hd) {
  const AttentionShape sh = checked_shape(B, T, H, Hkv, hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel if (worth_parallel(sh))
  {
    std::vector<float> k_t(static_cast<size_t>(hd * T));
    std::vector<float> v_t(static_cast<size_t>(hd * T));
    std::vector<float> probs(static_cast<size_t>(T));
    std::vector<float> dscores(static_cast<size_t>(T));
    std::vector<float> dk_acc(static_cast<size_t>(T * hd));
    std::vector<float> dv_acc(static_cast<size_t>(T * hd));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < B * Hkv; ++bg) {
      const int64_t b = bg / Hkv;
      const int64_t g = bg % Hkv;
      const float* k_head = k + sh.kv_offset(b, 0, g);
      transpose_head(k_t.data(), k_head, T, hd, sh.kv_stride());
      transpose_head(v_t.data(), v + sh.kv_offset(b, 0, g), T, hd, sh.kv_stride());
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
      for (int64_t h = g * sh.group(); h < (g + 1) * sh.group(); ++h) {
        for (int64_t i = 0; i < T; ++i) {
          const int64_t n = i + 1;
          const float* q_row = q + sh.q_offset(b, i, h);
          const float* dout_row = dout + sh.q_offset(b, i, h);
          row_times_transposed(probs.data(), q_row, k_t.data(), T, n, hd, scale);
          const float row_lse = lse[(b * H + h) * T + i];
          for (int64_t j = 0; j < n; ++j) probs[j] = fast_expf(probs[j] - row_lse);
          row_times_transposed(dscores.data(), dout_row, v_t.data(), T, n, hd, 1.0f);
          const float dout_dot_out =
              static_cast<float>(dot_double(dout_row, out + sh.q_offset(b, i, h), hd));
          for (int64_t j = 0; j < n; ++j) dscores[j] = probs[j] * (dscores[j] - dout_dot_out);
          float* dq_row = dq + sh.q_offset(b, i, h);
          std::fill(dq_row, dq_row + hd, 0.0f);
          for (int64_t j = 0; j < n; ++j) {
            const float ds = scale * dscores[j];
            axpy(dq_row, ds, k_head + j * sh.kv_stride(), hd);
            axpy(dk_acc.data() + j * hd, ds, q_row, hd);
            axpy(dv_acc.data() + j * hd, probs[j], dout_row, hd);
          }
        }
      }
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(dk_acc.data() + t * hd, hd, dk + sh.kv_offset(b, t, g));
        std::copy_n(dv_acc.data() + t * hd, hd, dv + sh.kv_offset(b, t, g));
      }
    }
  }
}

}  // namespace zt::cpu
