// CPU AdamW: scalar reference, AVX2+FMA and AVX-512 paths (see cpu_adam.h for the numerics).
// Built with -ffp-contract=off (CMakeLists.txt): only the explicit fmas below are fused.
// GCC 12 reports the self-initialised _mm512_undefined_* inside its own AVX-512 intrinsics as
// maybe-uninitialized (GCC bug 105593); nothing here reads an undefined value.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/adam_constants.h"
#include "backend/cpu/cpu_adam.h"
#include "backend/cpu/cpu_math.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt::cpu {
namespace {

// The update of one element: the definition every path reproduces bit for bit.
inline void adam_element(const AdamConstants& c, float* master, float* m, float* v,
                         const float* grad, bf16_t* out_bf16, float* out_f32, int64_t i) {
  const float g = grad[i] * c.grad_scale;
  const float mi = std::fma(c.beta1, m[i], c.one_minus_beta1 * g);
  const float vi = std::fma(c.beta2, v[i], c.one_minus_beta2 * (g * g));
  m[i] = mi;
  v[i] = vi;
  const float w = master[i];
  const float step = c.lr * (mi / c.bc1) / (std::sqrt(vi / c.bc2) + c.eps);
  const float updated = w - std::fma(c.decay, w, step);
  master[i] = updated;
  if (out_bf16) out_bf16[i] = float_to_bf16(updated);
  if (out_f32) out_f32[i] = updated;
}

void adam_scalar(const AdamConstants& c, float* master, float* m, float* v, const float* grad,
                 bf16_t* out_bf16, float* out_f32, int64_t n) {
  for (int64_t i = 0; i < n; ++i) adam_element(c, master, m, v, grad, out_bf16, out_f32, i);
}

// ---- AVX2 + FMA: 8 lanes, scalar tail ----

// util/bf16.h's float_to_bf16 on 8 lanes; returns the 8 results in the low 128 bits.
__attribute__((target("avx2,fma"))) __m128i bf16_round_avx2(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x0040));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Every lane is in [0, 0xffff], so the saturating pack is exact; it packs per 128-bit half.
  const __m256i packed = _mm256_packus_epi32(result, result);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

__attribute__((target("avx2,fma"))) void adam_avx2(const AdamConstants& c, float* master, float* m,
                                                   float* v, const float* grad, bf16_t* out_bf16,
                                                   float* out_f32, int64_t n) {
  const __m256 grad_scale = _mm256_set1_ps(c.grad_scale), beta1 = _mm256_set1_ps(c.beta1),
               beta2 = _mm256_set1_ps(c.beta2), omb1 = _mm256_set1_ps(c.one_minus_beta1),
               omb2 = _mm256_set1_ps(c.one_minus_beta2), bc1 = _mm256_set1_ps(c.bc1),
               bc2 = _mm256_set1_ps(c.bc2), eps = _mm256_set1_ps(c.eps), lr = _mm256_set1_ps(c.lr),
               decay = _mm256_set1_ps(c.decay);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_mul_ps(_mm256_loadu_ps(grad + i), grad_scale);
    const __m256 mi = _mm256_fmadd_ps(beta1, _mm256_loadu_ps(m + i), _mm256_mul_ps(omb1, g));
    const __m256 vi =
        _mm256_fmadd_ps(beta2, _mm256_loadu_ps(v + i), _mm256_mul_ps(omb2, _mm256_mul_ps(g, g)));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 w = _mm256_loadu_ps(master + i);
    const __m256 denom = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vi, bc2)), eps);
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(lr, _mm256_div_ps(mi, bc1)), denom);
    const __m256 updated = _mm256_sub_ps(w, _mm256_fmadd_ps(decay, w, step));
    _mm256_storeu_ps(master + i, updated);
    if (out_bf16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out_bf16 + i), bf16_round_avx2(updated));
    if (out_f32) _mm256_storeu_ps(out_f32 + i, updated);
  }
  for (; i < n; ++i) adam_element(c, master, m, v, grad, out_bf16, out_f32, i);
}

// ---- AVX-512: 16 lanes, masked tail ----

// util/bf16.h's float_to_bf16 on 16 lanes; the results are in the low 16 bits of each lane.
__attribute__((target("avx512f"))) __m512i bf16_round_avx512(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
}

__attribute__((target("avx512f"))) void adam_avx512(const AdamConstants& c, float* master, float* m,
                                                    float* v, const float* grad, bf16_t* out_bf16,
                                                    float* out_f32, int64_t n) {
  const __m512 grad_scale = _mm512_set1_ps(c.grad_scale), beta1 = _mm512_set1_ps(c.beta1),
               beta2 = _mm512_set1_ps(c.beta2), omb1 = _mm512_set1_ps(c.one_minus_beta1),
               omb2 = _mm512_set1_ps(c.one_minus_beta2), bc1 = _mm512_set1_ps(c.bc1),
               bc2 = _mm512_set1_ps(c.bc2), eps = _mm512_set1_ps(c.eps), lr = _mm512_set1_ps(c.lr),
               decay = _mm512_set1_ps(c.decay);
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i;
    const __mmask16 k =
        left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
    const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, grad + i), grad_scale);
    const __m512 mi =
        _mm512_fmadd_ps(beta1, _mm512_maskz_loadu_ps(k, m + i), _mm512_mul_ps(omb1, g));
    const __m512 vi = _mm512_fmadd_ps(beta2, _mm512_maskz_loadu_ps(k, v + i),
                                      _mm512_mul_ps(omb2, _mm512_mul_ps(g, g)));
    _mm512_mask_storeu_ps(m + i, k, mi);
    _mm512_mask_storeu_ps(v + i, k, vi);
    const __m512 w = _mm512_maskz_loadu_ps(k, master + i);
    const __m512 denom = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vi, bc2)), eps);
    const __m512 step = _mm512_div_ps(_mm512_mul_ps(lr, _mm512_div_ps(mi, bc1)), denom);
    const __m512 updated = _mm512_sub_ps(w, _mm512_fmadd_ps(decay, w, step));
    _mm512_mask_storeu_ps(master + i, k, updated);
    if (out_bf16) {
      const __m512i rounded = bf16_round_avx512(updated);
      if (k == 0xffff)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_bf16 + i),
                            _mm512_cvtepi32_epi16(rounded));
      else
        _mm512_mask_cvtepi32_storeu_epi16(out_bf16 + i, k, rounded);
    }
    if (out_f32) _mm512_mask_storeu_ps(out_f32 + i, k, updated);
  }
}

using AdamKernel = void (*)(const AdamConstants&, float*, float*, float*, const float*, bf16_t*,
                            float*, int64_t);

AdamKernel kernel_for(AdamSimd path) {
  switch (path) {
    case AdamSimd::kAvx512:
      return adam_avx512;
    case AdamSimd::kAvx2:
      return adam_avx2;
    case AdamSimd::kScalar:
      break;
  }
  return adam_scalar;
}

}  // namespace

const char* adam_simd_name(AdamSimd path) {
  switch (path) {
    case AdamSimd::kAvx512:
      return "avx512";
    case AdamSimd::kAvx2:
      return "avx2";
    case AdamSimd::kScalar:
      break;
  }
  return "scalar";
}

bool adam_simd_available(AdamSimd path) {
  switch (path) {
    case AdamSimd::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case AdamSimd::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case AdamSimd::kScalar:
      break;
  }
  return true;
}

AdamSimd best_adam_simd() {
  static const AdamSimd best = [] {
    AdamSimd cap = AdamSimd::kAvx512;
    if (const char* env = std::getenv("ZT_CPU_ADAM_SIMD")) {
      const std::string s = env;
      ZT_CHECK(s == "scalar" || s == "avx2" || s == "avx512",
               "ZT_CPU_ADAM_SIMD must be scalar, avx2 or avx512, got '" + s + "'");
      cap = s == "scalar" ? AdamSimd::kScalar : s == "avx2" ? AdamSimd::kAvx2 : AdamSimd::kAvx512;
    }
    for (AdamSimd p : {AdamSimd::kAvx512, AdamSimd::kAvx2})
      if (static_cast<int>(p) <= static_cast<int>(cap) && adam_simd_available(p)) return p;
    return AdamSimd::kScalar;
  }();
  return best;
}

namespace {

// adam_update's body over kAdamChunk chunks: grad_chunk(i, len) gives the fp32 gradients of
// [i, i + len), valid until the calling thread's next call.
template <typename GradChunk>
void adam_update_chunks(AdamSimd path, float* master, float* m, float* v, GradChunk grad_chunk,
                        bf16_t* out_bf16, float* out_f32, int64_t n, const AdamWHyper& h) {
  ZT_CHECK(h.step >= 1, "adamw: step " + std::to_string(h.step) + " is not 1-based");
  ZT_CHECK(adam_simd_available(path), std::string("adamw: the ") + adam_simd_name(path) +
                                          " path is not available on this CPU");
  const AdamConstants c = adam_constants(h);
  const AdamKernel kernel = kernel_for(path);
  const int64_t chunks = (n + kAdamChunk - 1) / kAdamChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMinElements)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t i = k * kAdamChunk;
    const int64_t len = std::min(kAdamChunk, n - i);
    kernel(c, master + i, m + i, v + i, grad_chunk(i, len), out_bf16 ? out_bf16 + i : nullptr,
           out_f32 ? out_f32 + i : nullptr, len);
  }
}

}  // namespace

void adam_update(AdamSimd path, float* master, float* m, float* v, const float* grad,
                 bf16_t* out_bf16, float* out_f32, int64_t n, const AdamWHyper& h) {
  adam_update_chunks(
      path, master, m, v, [grad](int64_t i, int64_t) { return grad + i; }, out_bf16, out_f32, n, h);
}

void adam_update(AdamSimd path, float* master, float* m, float* v, const bf16_t* grad,
                 bf16_t* out_bf16, float* out_f32, int64_t n, const AdamWHyper& h) {
  adam_update_chunks(
      path, master, m, v,
      [grad](int64_t i, int64_t len) {
        // bf16 → fp32 is exact (the 16 bits above 16 zero bits); the chunk stays in cache.
        thread_local std::vector<float> widened(static_cast<size_t>(kAdamChunk));
        for (int64_t j = 0; j < len; ++j)
          widened[static_cast<size_t>(j)] = bf16_to_float(grad[i + j]);
        return static_cast<const float*>(widened.data());
      },
      out_bf16, out_f32, n, h);
}

}  // namespace zt::cpu
