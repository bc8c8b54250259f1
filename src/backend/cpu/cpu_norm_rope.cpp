// CPU backend: RMSNorm and rotary position embedding, forward and backward side by side.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_staging.h"
#include "util/error.h"

namespace zt::cpu {

// ---- RMSNorm ----
// Forward: rstd[m] = 1/sqrt(mean_d x² + eps), y = (o + g) · (x · rstd) (Hugging Face's order of
// the two products; o = weight_offset, Gemma's 1 added in fp32 as GemmaRMSNorm adds it). The mean
// of squares is accumulated in double.
void CpuBackend::rmsnorm_forward(TensorView y_view, float* rstd, ConstTensorView x_view,
                                 ConstTensorView g_view, int64_t M, int64_t D, float eps,
                                 float weight_offset) {
  const Fp32Input x32(x_view, M * D), g32(g_view, D);
  Fp32Output y32(y_view, M * D, Fp32Output::Contents::kOverwrite);
  const float* x = x32.get();
  const float* g = g32.get();
  float* y = y32.get();
#pragma omp parallel for schedule(static) if (M * D > kParallelMinElements)
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * D;
    const double mean_square = dot_double(xr, xr, D) / static_cast<double>(D);
    const float r = static_cast<float>(1.0 / std::sqrt(mean_square + static_cast<double>(eps)));
    rstd[m] = r;
    float* yr = y + m * D;
    for (int64_t d = 0; d < D; ++d) yr[d] = (weight_offset + g[d]) * (xr[d] * r);
  }
  y32.commit();
}

// Backward: dx += rstd·(w·dy) − x·rstd³·mean_d(w·dy·x), w = o + g, rows in parallel;
// dg[d] += Σ_m dy·x·rstd (kAssign: =), columns in parallel (each column summed over m in order,
// in double).
void CpuBackend::rmsnorm_backward(TensorView dx_view, float* dg, ConstTensorView dy_view,
                                  ConstTensorView x_view, ConstTensorView g_view, const float* rstd,
                                  int64_t M, int64_t D, float weight_offset, GradWrite dg_write) {
  const Fp32Input dy32(dy_view, M * D), x32(x_view, M * D), g32(g_view, D);
  Fp32Output dx32(dx_view, M * D, Fp32Output::Contents::kKeep);
  const float* dy = dy32.get();
  const float* x = x32.get();
  const float* g = g32.get();
  float* dx = dx32.get();
  const bool parallel = M * D > kParallelMinElements;
  if (dx) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * D;
      const float* dyr = dy + m * D;
      const double gdy_x = lane_sum(D, [&](int64_t d) {
        return static_cast<double>((weight_offset + g[d]) * dyr[d]) * xr[d];
      });
      const float r = rstd[m];
      const float coef = static_cast<float>(gdy_x / static_cast<double>(D)) * r * r * r;
      float* dxr = dx + m * D;
      for (int64_t d = 0; d < D; ++d)
        dxr[d] += r * ((weight_offset + g[d]) * dyr[d]) - xr[d] * coef;
    }
  }
  if (dg) {
    add_column_sums(
        dg, M, D, parallel,
        [&](int64_t m, int64_t d) {
          return static_cast<double>(dy[m * D + d] * x[m * D + d] * rstd[m]);
        },
        dg_write == GradWrite::kAssign);
  }
  dx32.commit();
}

// ---- rotary position embedding (rotate-half) ----
// Hugging Face computes, in fp32: inv_freq_i (rope_inv_freq: 1 / theta^(float(2i)/r), r the
// rotated elements of a head, then the
// rope_scaling), angle = float(t)·inv_freq_i (one fp32 product), then cos/sin of that fp32 angle
// rounded to fp32 (times longrope's attention factor, one more fp32 product). The same roundings
// here, with pow/cos/sin evaluated in double and rounded once (correctly rounded in practice).
std::shared_ptr<const RopeTable> make_rope_table(int64_t max_positions, int64_t head_dim,
                                                 const RopeSpec& rope) {
  auto table = std::make_shared<RopeTable>();
  table->max_positions = max_positions;
  table->head_dim = head_dim;
  table->rope = rope;
  const int64_t half = rope.rotated(head_dim) / 2;
  const std::vector<float> inv_freq = rope_inv_freq(rope, head_dim);
  // longrope's attention factor: emb.cos() * scaling_factor, an fp32 product (1 elsewhere: exact).
  const auto amplitude = static_cast<float>(rope.scaling.attention_factor);
  table->cos.resize(static_cast<size_t>(max_positions * half));
  table->sin.resize(table->cos.size());
  for (int64_t t = 0; t < max_positions; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[static_cast<size_t>(i)];
      const size_t at = static_cast<size_t>(t * half + i);
      table->cos[at] = static_cast<float>(std::cos(static_cast<double>(angle))) * amplitude;
      table->sin[at] = static_cast<float>(std::sin(static_cast<double>(angle))) * amplitude;
    }
  }
  return table;
}

std::shared_ptr<const RopeTable> CpuBackend::rope_table(int64_t T, int64_t hd,
                                                        const RopeSpec& rope) {
  constexpr size_t kKeptTables = 4;
  std::lock_guard<std::mutex> lock(rope_mutex_);
  auto same_key = [&](const std::shared_ptr<const RopeTable>& t) {
    return t->head_dim == hd && t->rope == rope;
  };
  const auto cached = std::find_if(rope_cache_.begin(), rope_cache_.end(), same_key);
  if (cached != rope_cache_.end() && (*cached)->max_positions >= T) return *cached;
  // A table outgrown one position at a time (incremental decoding) doubles, so that its
  // rebuilds cost O(T) in all; an entry does not depend on the table's length.
  const int64_t grown = cached != rope_cache_.end() ? std::max(T, 2 * (*cached)->max_positions) : T;
  if (cached != rope_cache_.end()) rope_cache_.erase(cached);
  if (rope_cache_.size() >= kKeptTables) rope_cache_.erase(rope_cache_.begin());
  rope_cache_.push_back(make_rope_table(grown, hd, rope));
  return rope_cache_.back();
}

// x1' = x1·c − x2·(σ·s), x2' = x2·c + x1·(σ·s) with x1 = x[:r/2], x2 = x[r/2:r] (interleaved:
// x1 = x[0:r:2], x2 = x[1:r:2]) for the r = rope.rotated(hd) leading elements of each head (the
// others pass through, as transformers' Phi-3 and GLM leave a partial rotation's q_pass and
// k_pass). σ = +1 is the rotation by p·θ_i (p = past +
// t − doc_start[t], or past + t); σ = −1 its transpose (the inverse, divided by the square of
// longrope's attention factor where it has one: the backward of the scaled rotation).
void CpuBackend::rope_apply(float* x, int64_t B, int64_t T, int64_t H, int64_t hd,
                            const RopeSpec& rope, float sin_sign, const int32_t* doc_start,
                            int64_t past) {
  const int64_t rotated = checked_rotated_dims(rope, hd);
  ZT_CHECK(past >= 0, "rope: negative first position " + std::to_string(past));
  const auto table = rope_table(past + T, hd, rope);
  const int64_t half = rotated / 2;
  const int64_t step = rope.pair_step(), partner = rope.pair_partner(hd);
#pragma omp parallel for schedule(static) if (B * T * H * hd > kParallelMinElements)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t position = past + bt % T - (doc_start ? doc_start[bt] : 0);
    const float* cos_t = table->cos.data() + position * half;
    const float* sin_t = table->sin.data() + position * half;
    for (int64_t h = 0; h < H; ++h) {
      float* head = x + (bt * H + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cos_t[i];
        const float s = sin_sign * sin_t[i];
        float& a = head[i * step];
        float& b = head[i * step + partner];
        const float a0 = a;
        a = a0 * c - b * s;
        b = b * c + a0 * s;
      }
    }
  }
}

void CpuBackend::rope_forward(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd,
                              const RopeSpec& rope, const int32_t* doc_start) {
  Fp32Output x32(x, B * T * H * hd, Fp32Output::Contents::kKeep);
  rope_apply(x32.get(), B, T, H, hd, rope, 1.0f, doc_start);
  x32.commit();
}

void CpuBackend::rope_forward_after(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd,
                                    const RopeSpec& rope, int64_t past) {
  Fp32Output x32(x, B * T * H * hd, Fp32Output::Contents::kKeep);
  rope_apply(x32.get(), B, T, H, hd, rope, 1.0f, nullptr, past);
  x32.commit();
}

void CpuBackend::rope_backward(TensorView dx, int64_t B, int64_t T, int64_t H, int64_t hd,
                               const RopeSpec& rope, const int32_t* doc_start) {
  Fp32Output dx32(dx, B * T * H * hd, Fp32Output::Contents::kKeep);
  rope_apply(dx32.get(), B, T, H, hd, rope, -1.0f, doc_start);
  dx32.commit();
}

}  // namespace zt::cpu
