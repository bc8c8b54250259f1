// CPU backend: SwiGLU, token embedding and fused softmax cross-entropy, forward and backward side
// by side.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include <omp.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_staging.h"
#include "backend/glu_math.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt::cpu {
namespace {

// Columns summed at once in embedding_backward.
constexpr int64_t kEmbeddingColumnBlock = 64;

void check_ids(const int32_t* ids, int64_t n, int64_t limit, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    ZT_CHECK(ids[i] >= 0 && ids[i] < limit, std::string(what) + " " + std::to_string(ids[i]) +
                                                " at position " + std::to_string(i) +
                                                " is outside [0, " + std::to_string(limit) + ")");
  }
}

}  // namespace

// ---- gated MLP activation (SwiGLU, GeGLU: backend/glu_math.h) ----
namespace {

// The backend's exp and tanh for backend/glu_math.h's activations.
struct CpuMath {
  static float exp(float x) { return fast_expf(x); }
  static float tanh(float x) { return std::tanh(x); }
};
using Silu = zt::Silu<CpuMath>;
using GeluTanh = zt::GeluTanh<CpuMath>;

template <typename Act>
void glu_forward_rows(float* h, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) h[i] = Act::value(gate[i]) * up[i];
}

template <typename Act>
void glu_backward_rows(float* dgate, float* dup, const float* dh, const float* gate,
                       const float* up, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) Act::grads(gate[i], dh[i], up[i], dgate[i], dup[i]);
}

}  // namespace

// Forward: h = act(a)·u.
void CpuBackend::glu_forward(TensorView h_view, ConstTensorView gate_view, ConstTensorView up_view,
                             int64_t n, GluActivation act) {
  const Fp32Input gate32(gate_view, n), up32(up_view, n);
  Fp32Output h32(h_view, n, Fp32Output::Contents::kOverwrite);
  if (act == GluActivation::kSilu)
    glu_forward_rows<Silu>(h32.get(), gate32.get(), up32.get(), n);
  else
    glu_forward_rows<GeluTanh>(h32.get(), gate32.get(), up32.get(), n);
  h32.commit();
}

// Backward: dgate = dh·u·act'(a);  dup = dh·act(a).
void CpuBackend::glu_backward(TensorView dgate_view, TensorView dup_view, ConstTensorView dh_view,
                              ConstTensorView gate_view, ConstTensorView up_view, int64_t n,
                              GluActivation act) {
  const Fp32Input dh32(dh_view, n), gate32(gate_view, n), up32(up_view, n);
  Fp32Output dgate32(dgate_view, n, Fp32Output::Contents::kOverwrite),
      dup32(dup_view, n, Fp32Output::Contents::kOverwrite);
  if (act == GluActivation::kSilu)
    glu_backward_rows<Silu>(dgate32.get(), dup32.get(), dh32.get(), gate32.get(), up32.get(), n);
  else
    glu_backward_rows<GeluTanh>(dgate32.get(), dup32.get(), dh32.get(), gate32.get(), up32.get(),
                                n);
  dgate32.commit();
  dup32.commit();
}

// ---- token embedding ----
// Forward: x[i] = table[tokens[i]].
// Rows are copied in the table's type, or converted one row at a time (16-bit → fp32 exactly,
// fp32 → 16-bit rounded, bf16 ↔ fp16 through fp32): a 16-bit table is never widened as a whole.
void CpuBackend::embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table,
                                   int64_t n, int64_t D) {
  // The vocabulary size is not passed; ids are only checked for sign here.
  check_ids(tokens, n, INT32_MAX, "embedding: token id");
  ZT_CHECK(is_activation_dtype(x.dtype) && is_activation_dtype(table.dtype),
           "embedding_forward: unsupported tensor storage");
#pragma omp parallel for schedule(static) if (n * D > kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const ConstTensorView src = table.at(static_cast<int64_t>(tokens[i]) * D);
    const TensorView dst = x.at(i * D);
    const auto d = static_cast<size_t>(D);
    if (src.dtype == dst.dtype) {
      std::memcpy(dst.data, src.data, view_bytes(src, D));
    } else if (src.is_f32()) {
      round_16bit(dst.dtype, static_cast<const float*>(src.data), static_cast<uint16_t*>(dst.data),
                  d);
    } else if (dst.is_f32()) {
      widen_16bit(src.dtype, static_cast<const uint16_t*>(src.data), static_cast<float*>(dst.data),
                  d);
    } else {
      std::vector<float> row(d);
      widen_16bit(src.dtype, static_cast<const uint16_t*>(src.data), row.data(), d);
      round_16bit(dst.dtype, row.data(), static_cast<uint16_t*>(dst.data), d);
    }
  }
}

// Backward: dtable[v] += Σ_{i: tokens[i]=v} dx[i], the sum formed first (from zero, positions in
// order) and added once, so a call contributes one float per element — as its GEMMs do to dW,
// and as PyTorch adds a micro-batch's gradient into .grad. Positions are grouped by id (stable
// sort); threads own ids, so every element's order is fixed whatever the thread count.
void CpuBackend::embedding_backward(float* dtable, ConstTensorView dx_view, const int32_t* tokens,
                                    int64_t n, int64_t D) {
  const Fp32Input dx32(dx_view, n * D);
  const float* dx = dx32.get();
  std::vector<int64_t> order;  // the positions with an id (a negative one adds nothing)
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] >= 0) order.push_back(i);
  n = static_cast<int64_t>(order.size());
  std::stable_sort(order.begin(), order.end(),
                   [tokens](int64_t a, int64_t b) { return tokens[a] < tokens[b]; });
  std::vector<int64_t> starts;  // where each id's run of positions begins in `order`
  for (int64_t k = 0; k < n; ++k) {
    if (k == 0 ||
        tokens[order[static_cast<size_t>(k)]] != tokens[order[static_cast<size_t>(k - 1)]])
      starts.push_back(k);
  }
  starts.push_back(n);
  const int64_t ids = static_cast<int64_t>(starts.size()) - 1;
#pragma omp parallel for schedule(static) if (n * D > kParallelMinElements)
  for (int64_t u = 0; u < ids; ++u) {
    const int64_t* run = order.data() + starts[static_cast<size_t>(u)];
    const int64_t count = starts[static_cast<size_t>(u) + 1] - starts[static_cast<size_t>(u)];
    float* row = dtable + static_cast<int64_t>(tokens[run[0]]) * D;
    for (int64_t d0 = 0; d0 < D; d0 += kEmbeddingColumnBlock) {
      const int64_t width = std::min(kEmbeddingColumnBlock, D - d0);
      float sum[kEmbeddingColumnBlock] = {};
      for (int64_t k = 0; k < count; ++k) axpy(sum, 1.0f, dx + run[k] * D + d0, width);
      for (int64_t j = 0; j < width; ++j) row[d0 + j] += sum[j];
    }
  }
}

// ---- fused softmax + cross-entropy ----
// losses[m] = lse_m − logits[m, t_m] with lse_m = max + log Σ_j exp(logits[m,j] − max);
// dlogits[m, j] = (exp(logits[m,j] − max)/Σ − [j = t_m]) · grad_scale, written in place when
// dlogits aliases logits (the target logit is read before its row is overwritten).
namespace {

// One row: its loss, and its gradient into drow when there is one (drow may be row itself).
float cross_entropy_row(const float* row, float* drow, int32_t target, int64_t V, float grad_scale,
                        float softcap) {
  if (target == kIgnoredTarget) {  // a loss that does not count: 0, and no gradient
    if (drow) std::fill(drow, drow + V, 0.0f);
    return 0.0f;
  }
  const float target_logit = row[target];
  const float row_max = max_of(row, V);
  double sum = 0.0;
  if (drow && softcap > 0.0f) {  // the row read whole before drow, which may alias it, is written
    sum = lane_sum(
        V, [row, row_max](int64_t j) { return static_cast<double>(fast_expf(row[j] - row_max)); });
    const float factor = static_cast<float>(static_cast<double>(grad_scale) / sum);
    for (int64_t j = 0; j < V; ++j) {
      const float capped = row[j] / softcap;  // tanh(z/c)
      float d = fast_expf(row[j] - row_max) * factor;
      if (j == target) d -= grad_scale;
      drow[j] = d * (1.0f - capped * capped);
    }
  } else if (drow) {
    for (int64_t j = 0; j < V; ++j) drow[j] = fast_expf(row[j] - row_max);
    sum = sum_double(drow, V);
    const float factor = static_cast<float>(static_cast<double>(grad_scale) / sum);
    for (int64_t j = 0; j < V; ++j) drow[j] *= factor;
    drow[target] -= grad_scale;
  } else {
    sum = lane_sum(
        V, [row, row_max](int64_t j) { return static_cast<double>(fast_expf(row[j] - row_max)); });
  }
  return static_cast<float>(static_cast<double>(row_max) + std::log(sum) -
                            static_cast<double>(target_logit));
}

}  // namespace

// 16-bit logits and dlogits are widened and rounded a row at a time, into fp32 rows of each
// thread: a head chunk of 1024 rows at V = 128256 costs 2·threads·V floats of fp32, not the two
// M·V copies (≈ 1 GiB) that Fp32Input/Fp32Output would make. Each element is widened and rounded
// exactly as they would, so the bits are the same.
void CpuBackend::cross_entropy(float* losses, TensorView dlogits_view, ConstTensorView logits_view,
                               const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                               float softcap, const float* grad_scale_factor) {
  if (grad_scale_factor) grad_scale *= *grad_scale_factor;
  for (int64_t m = 0; m < M; ++m)
    ZT_CHECK(targets[m] == kIgnoredTarget || (targets[m] >= 0 && targets[m] < V),
             "cross_entropy: target " + std::to_string(targets[m]) + " at position " +
                 std::to_string(m) + " is outside [0, " + std::to_string(V) + ")");
  ZT_CHECK(!dlogits_view || dlogits_view.data != logits_view.data ||
               dlogits_view.dtype == logits_view.dtype,
           "cross_entropy: dlogits aliases logits in another storage type");
  // In place is row for row; dlogits that overlap logits otherwise would overwrite rows not yet
  // read.
  const auto* logits_begin = static_cast<const std::byte*>(logits_view.data);
  const auto* dlogits_begin = static_cast<const std::byte*>(dlogits_view.data);
  const size_t elements = static_cast<size_t>(M * V);
  ZT_CHECK(!dlogits_view || dlogits_begin == logits_begin ||
               dlogits_begin + elements * dtype_size(dlogits_view.dtype) <= logits_begin ||
               logits_begin + elements * dtype_size(logits_view.dtype) <= dlogits_begin,
           "cross_entropy: dlogits overlap logits without being them");
  const bool widen_rows = needs_fp32_copy(logits_view);
  const bool round_rows = needs_fp32_copy(dlogits_view);
  const size_t row_elements = static_cast<size_t>(V);
  // Each thread's fp32 rows, allocated here: an allocation that fails inside the parallel region
  // could not unwind out of it.
  const size_t rows_per_thread = (widen_rows ? 1 : 0) + (round_rows ? 1 : 0);
  std::vector<float> thread_rows(static_cast<size_t>(omp_get_max_threads()) * rows_per_thread *
                                 row_elements);
#pragma omp parallel if (M * V > kParallelMinElements)
  {
    float* const own = thread_rows.data() +
                       static_cast<size_t>(omp_get_thread_num()) * rows_per_thread * row_elements;
    float* const row32 = own;
    float* const drow32 = own + (widen_rows ? row_elements : 0);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      const float* row = row32;
      if (widen_rows)  // read whole before its dlogits, which may alias it, are stored
        widen_16bit(logits_view.dtype, static_cast<const uint16_t*>(logits_view.data) + m * V,
                    row32, row_elements);
      else
        row = static_cast<const float*>(logits_view.data) + m * V;
      float* drow = !dlogits_view ? nullptr
                    : round_rows  ? drow32
                                  : static_cast<float*>(dlogits_view.data) + m * V;
      losses[m] = cross_entropy_row(row, drow, targets[m], V, grad_scale, softcap);
      if (round_rows)
        round_16bit(dlogits_view.dtype, drow32, static_cast<uint16_t*>(dlogits_view.data) + m * V,
                    row_elements);
    }
  }
}

// Blocks of kSoftcapBlock elements, each widened into (and rounded back from) a thread's fp32
// block for 16-bit storage: a head chunk's logits never take a whole fp32 copy.
void CpuBackend::softcap_inplace(TensorView y_view, float c, int64_t n) {
  ZT_CHECK(c > 0.0f, "softcap_inplace: the cap must be positive, got " + std::to_string(c));
  constexpr int64_t kSoftcapBlock = 4096;
  const bool widen = needs_fp32_copy(y_view);
#pragma omp parallel if (n > kParallelMinElements)
  {
    std::vector<float> block(widen ? static_cast<size_t>(kSoftcapBlock) : 0);
#pragma omp for schedule(static)
    for (int64_t b0 = 0; b0 < n; b0 += kSoftcapBlock) {
      const int64_t count = std::min(kSoftcapBlock, n - b0);
      uint16_t* stored = widen ? static_cast<uint16_t*>(y_view.data) + b0 : nullptr;
      float* y = widen ? block.data() : static_cast<float*>(y_view.data) + b0;
      if (widen) widen_16bit(y_view.dtype, stored, y, static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) y[i] = c * std::tanh(y[i] / c);
      if (widen) round_16bit(y_view.dtype, y, stored, static_cast<size_t>(count));
    }
  }
}

}  // namespace zt::cpu
