// CPU backend: causal grouped-query attention, forward and backward side by side.
//
// Work is split over heads: the forward over (batch, query head), the backward over (batch, kv
// head) so that dK/dV — sums over the query rows of every head sharing a kv head — are each
// accumulated by one thread in a fixed order. Within a head, query rows go in blocks of
// kQueryBlock; a block of rows [i0, i1) only meets keys [k0, i1), so the score, value and gradient
// products are single-threaded sgemm calls on strided views of q/k/v (about half the work of
// the full T×T square is skipped). k0 is 0, or with document masks or a sliding window the first
// key of the block's first row (neither start decreases along a row), so the keys of earlier
// documents and those out of every row's window are skipped too. The softmax runs in fp32 with
// the vectorisable fast_expf.

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_staging.h"
#include "util/error.h"

namespace zt::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;

// T query rows per batch row; past: keys and values cached before them (incremental decoding),
// so k/v hold past + T rows and query t sits at position past + t. scores: the scale and soft cap.
struct AttentionShape {
  int64_t B, T, H, Hkv, hd, past;
  AttentionScores scores;
  int64_t group() const { return H / Hkv; }  // query heads per kv head
  int64_t keys() const { return past + T; }  // rows of k/v per batch row
  // Offsets of row t of batch b, head h in q/out/dq ([B,T,H,hd]) and k/v/dk/dv
  // ([B,past+T,Hkv,hd]).
  int64_t q_offset(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * hd; }
  int64_t kv_offset(int64_t b, int64_t t, int64_t g) const {
    return ((b * keys() + t) * Hkv + g) * hd;
  }
  int64_t q_stride() const { return H * hd; }     // between consecutive t of one head
  int64_t kv_stride() const { return Hkv * hd; }  // same for k/v
  float scale() const { return scores.scale_for(hd); }
  // Small problems (unit tests, tiny models) stay on the calling thread.
  bool worth_parallel() const { return B * H * T * keys() * hd > 4 * kParallelMinElements; }
};

AttentionShape checked_shape(int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                             const AttentionScores& scores, int64_t past = 0) {
  ZT_CHECK(Hkv > 0 && H % Hkv == 0, "attention: " + std::to_string(H) +
                                        " query heads are not a multiple of " +
                                        std::to_string(Hkv) + " kv heads");
  ZT_CHECK(past >= 0, "attention: negative count of cached keys " + std::to_string(past));
  ZT_CHECK(scores.softcap >= 0.0f && scores.scale >= 0.0f && scores.window >= 0,
           "attention: a negative scale, soft cap or window (" + std::to_string(scores.scale) +
               ", " + std::to_string(scores.softcap) + ", " + std::to_string(scores.window) + ")");
  return AttentionShape{B, T, H, Hkv, hd, past, scores};
}

// The keys a block of query rows [i0, i0 + rows) of batch row b meets: [first, end), and row r's
// visible ones [first + lo(r), first + hi(r)) (columns lo(r) ≤ j < hi(r) of the block's scores).
// past: cached keys before the queries (query row i sees keys up to past + i). A row's first key
// is the later of its document's start and its window's (first_visible_key); both never
// decrease along a row, so the block's first row has the block's first key.
struct KeyRange {
  const int32_t* doc_start;  // of batch row b, or null
  AttentionScores scores;
  int64_t i0, past, first, end;
  KeyRange(const int32_t* doc_start_row, const AttentionScores& scores_, int64_t i0_, int64_t rows,
           int64_t past_ = 0)
      : doc_start(doc_start_row),
        scores(scores_),
        i0(i0_),
        past(past_),
        first(first_visible(0)),
        end(past_ + i0_ + rows) {}
  int64_t first_visible(int64_t r) const {
    return first_visible_key(past + i0 + r, doc_start ? doc_start[i0 + r] : 0, scores.window);
  }
  int64_t width() const { return end - first; }
  int64_t lo(int64_t r) const { return first_visible(r) - first; }
  int64_t hi(int64_t r) const { return past + i0 + r + 1 - first; }
};

// scores[r, j] = scale · q_{i0+r}·k_{first+j} for a block of query rows of head (b, h) against the
// keys of `keys`, then with a soft cap c: c·tanh(scores/c); row stride of scores is keys.width().
void block_scores(float* scores, const float* q, const float* k, const AttentionShape& sh,
                  int64_t b, int64_t h, int64_t rows, const KeyRange& keys) {
  sgemm(false, true, rows, keys.width(), sh.hd, sh.scale(), q + sh.q_offset(b, keys.i0, h),
        sh.q_stride(), k + sh.kv_offset(b, keys.first, h / sh.group()), sh.kv_stride(), 0.0f,
        scores, keys.width());
  const float cap = sh.scores.softcap;
  if (cap <= 0.0f) return;
  for (int64_t n = 0; n < rows * keys.width(); ++n) scores[n] = cap * std::tanh(scores[n] / cap);
}

// Forward, per query row i of head h (kv head g = h / group), keys j with doc_start_i ≤ j ≤
// past + i (and past + i − w < j under a window w):
//   s_j = q_i·k_j·scale (c·tanh(s_j/c) with a soft cap c);  lse_i = log Σ_j exp(s_j);  out_i = Σ_j
//   exp(s_j − lse_i)·v_j
void attention_forward_rows(TensorView out_view, float* lse, ConstTensorView q_view,
                            ConstTensorView k_view, ConstTensorView v_view,
                            const AttentionShape& sh, const int32_t* doc_start) {
  const int64_t B = sh.B, T = sh.T, H = sh.H, hd = sh.hd;
  const Fp32Input q32(q_view, B * T * H * hd), k32(k_view, B * sh.keys() * sh.Hkv * hd),
      v32(v_view, B * sh.keys() * sh.Hkv * hd);
  Fp32Output out32(out_view, B * T * H * hd, Fp32Output::Contents::kOverwrite);
  const float* q = q32.get();
  const float* k = k32.get();
  const float* v = v32.get();
  float* out = out32.get();
  use_single_threaded_blas();  // OpenMP runs one head per thread; each sgemm on its caller
#pragma omp parallel if (sh.worth_parallel())
  {
    std::vector<float> probs(static_cast<size_t>(std::min(kQueryBlock, T) * sh.keys()));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H;
      const int64_t h = bh % H;
      for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, T - i0);
        const KeyRange keys(doc_start ? doc_start + b * T : nullptr, sh.scores, i0, rows, sh.past);
        const int64_t width = keys.width();
        block_scores(probs.data(), q, k, sh, b, h, rows, keys);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t lo = keys.lo(r), hi = keys.hi(r);  // keys visible to row i0 + r
          float* p = probs.data() + r * width;
          const float row_max = max_of(p + lo, hi - lo);
          for (int64_t j = lo; j < hi; ++j) p[j] = fast_expf(p[j] - row_max);
          const double sum = sum_double(p + lo, hi - lo);
          const float inv_sum = static_cast<float>(1.0 / sum);
          for (int64_t j = lo; j < hi; ++j) p[j] *= inv_sum;
          std::fill(p, p + lo, 0.0f);
          std::fill(p + hi, p + width, 0.0f);
          lse[(b * H + h) * T + i0 + r] = row_max + static_cast<float>(std::log(sum));
        }
        sgemm(false, false, rows, hd, width, 1.0f, probs.data(), width,
              v + sh.kv_offset(b, keys.first, h / sh.group()), sh.kv_stride(), 0.0f,
              out + sh.q_offset(b, i0, h), sh.q_stride());
      }
    }
  }
  out32.commit();
}

}  // namespace

void CpuBackend::attention_forward(TensorView out, float* lse, ConstTensorView q, ConstTensorView k,
                                   ConstTensorView v, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                   int64_t hd, const int32_t* doc_start,
                                   const AttentionScores& scores) {
  attention_forward_rows(out, lse, q, k, v, checked_shape(B, T, H, Hkv, hd, scores), doc_start);
}

void CpuBackend::attention_forward_after(TensorView out, float* lse, ConstTensorView q,
                                         ConstTensorView k, ConstTensorView v, int64_t B, int64_t T,
                                         int64_t past, int64_t H, int64_t Hkv, int64_t hd,
                                         const AttentionScores& scores) {
  attention_forward_rows(out, lse, q, k, v, checked_shape(B, T, H, Hkv, hd, scores, past), nullptr);
}

// Backward, per query row i with p_j = exp(s_j − lse_i) recomputed (0 for keys row i does not see):
//   dp_j = dout_i·v_j;  D_i = dout_i·out_i;  ds_j = p_j·(dp_j − D_i)·scale  (·(1 − (s_j/c)²) with a
//   soft cap c, s_j the capped score)
//   dq_i = Σ_j ds_j·k_j;  dk_j = Σ_{heads of the group, i} ds_j·q_i;  dv_j = Σ p_j·dout_i
void CpuBackend::attention_backward(TensorView dq_view, TensorView dk_view, TensorView dv_view,
                                    ConstTensorView dout_view, ConstTensorView q_view,
                                    ConstTensorView k_view, ConstTensorView v_view,
                                    ConstTensorView out_view, const float* lse, int64_t B,
                                    int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                                    const int32_t* doc_start, const AttentionScores& scores) {
  const AttentionShape sh = checked_shape(B, T, H, Hkv, hd, scores);
  const float cap = scores.softcap;
  const int64_t q_elements = B * T * H * hd, kv_elements = B * T * Hkv * hd;
  const Fp32Input dout32(dout_view, q_elements), q32(q_view, q_elements), k32(k_view, kv_elements),
      v32(v_view, kv_elements), out32(out_view, q_elements);
  Fp32Output dq32(dq_view, q_elements, Fp32Output::Contents::kOverwrite),
      dk32(dk_view, kv_elements, Fp32Output::Contents::kOverwrite),
      dv32(dv_view, kv_elements, Fp32Output::Contents::kOverwrite);
  const float* dout = dout32.get();
  const float* q = q32.get();
  const float* k = k32.get();
  const float* v = v32.get();
  const float* out = out32.get();
  float* dq = dq32.get();
  float* dk = dk32.get();
  float* dv = dv32.get();
  const float scale = sh.scale();
  use_single_threaded_blas();  // OpenMP runs one head per thread; each sgemm on its caller
#pragma omp parallel if (sh.worth_parallel())
  {
    const size_t block_elems = static_cast<size_t>(std::min(kQueryBlock, T) * T);
    std::vector<float> probs(block_elems);
    std::vector<float> dscores(block_elems);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < B * Hkv; ++bg) {
      const int64_t b = bg / Hkv;
      const int64_t g = bg % Hkv;
      float* dk_head = dk + sh.kv_offset(b, 0, g);
      float* dv_head = dv + sh.kv_offset(b, 0, g);
      for (int64_t t = 0; t < T; ++t) {
        std::fill_n(dk_head + t * sh.kv_stride(), hd, 0.0f);
        std::fill_n(dv_head + t * sh.kv_stride(), hd, 0.0f);
      }
      for (int64_t h = g * sh.group(); h < (g + 1) * sh.group(); ++h) {
        for (int64_t i0 = 0; i0 < T; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, T - i0);
          const KeyRange keys(doc_start ? doc_start + b * T : nullptr, sh.scores, i0, rows);
          const int64_t width = keys.width();
          const float* q_block = q + sh.q_offset(b, i0, h);
          const float* dout_block = dout + sh.q_offset(b, i0, h);
          block_scores(probs.data(), q, k, sh, b, h, rows, keys);
          // dscores = dout_block · v[first:end]ᵀ
          sgemm(false, true, rows, width, hd, 1.0f, dout_block, sh.q_stride(),
                v + sh.kv_offset(b, keys.first, g), sh.kv_stride(), 0.0f, dscores.data(), width);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t lo = keys.lo(r), hi = keys.hi(r);
            const int64_t row_offset = sh.q_offset(b, i0 + r, h);
            const float row_lse = lse[(b * H + h) * T + i0 + r];
            const float dout_dot_out =
                static_cast<float>(dot_double(dout + row_offset, out + row_offset, hd));
            float* p = probs.data() + r * width;
            float* ds = dscores.data() + r * width;
            for (int64_t j = lo; j < hi; ++j) {
              const float capped = cap > 0.0f ? p[j] / cap : 0.0f;  // tanh(s/c) with a cap
              p[j] = fast_expf(p[j] - row_lse);
              ds[j] = p[j] * (ds[j] - dout_dot_out) * scale * (1.0f - capped * capped);
            }
            for (float* zeroed : {p, ds}) {
              std::fill(zeroed, zeroed + lo, 0.0f);
              std::fill(zeroed + hi, zeroed + width, 0.0f);
            }
          }
          // dq_block = ds · k[first:end];  dk[first:end] += dsᵀ · q_block;
          // dv[first:end] += pᵀ · dout_block
          float* dk_keys = dk_head + keys.first * sh.kv_stride();
          float* dv_keys = dv_head + keys.first * sh.kv_stride();
          sgemm(false, false, rows, hd, width, 1.0f, dscores.data(), width,
                k + sh.kv_offset(b, keys.first, g), sh.kv_stride(), 0.0f,
                dq + sh.q_offset(b, i0, h), sh.q_stride());
          sgemm(true, false, width, hd, rows, 1.0f, dscores.data(), width, q_block, sh.q_stride(),
                1.0f, dk_keys, sh.kv_stride());
          sgemm(true, false, width, hd, rows, 1.0f, probs.data(), width, dout_block, sh.q_stride(),
                1.0f, dv_keys, sh.kv_stride());
        }
      }
    }
  }
  dq32.commit();
  dk32.commit();
  dv32.commit();
}

}  // namespace zt::cpu
