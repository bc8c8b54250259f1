// CPU AdamW kernel shared by the CPU backend's `adamw` and the offloaded optimizer
// (engine/offload/offload_optimizer.h): one scalar reference and AVX2 / AVX-512 paths chosen at
// run time (__builtin_cpu_supports), OpenMP over fixed chunks of the range.
//
// Numerics: every path is BITWISE identical to the scalar path, which defines the update:
//   g  = grad·grad_scale
//   m' = fma(β1, m, (1−β1)·g)
//   v' = fma(β2, v, (1−β2)·(g·g))
//   u  = lr·(m'/bc1) / (sqrt(v'/bc2) + eps)
//   w' = w − fma(lr·wd, w, u)
// with bc1 = 1−β1^t, bc2 = 1−β2^t computed in double and rounded to fp32 once per call. The three
// fused multiply-adds are the only fused operations: the scalar path uses std::fma (correctly
// rounded, in hardware or in libm), the SIMD paths the FMA instructions, and the rest are IEEE
// operations (mul, div, sqrt, add, sub) that round identically in every width. The file is
// compiled with -ffp-contract=off so that no other multiply-add is fused behind our back. The
// tail of a range that is not a multiple of the vector width runs the scalar element function
// (AVX2) or masked vector lanes (AVX-512) — the same bits either way.
// bf16 output: round to nearest, ties to even; NaN stays a quiet NaN (util/bf16.h's rule),
// vectorised in the SIMD paths.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace zt::cpu {

enum class AdamSimd { kScalar, kAvx2, kAvx512 };
const char* adam_simd_name(AdamSimd path);
// Whether this CPU (and build) can run `path`; kScalar always can.
bool adam_simd_available(AdamSimd path);
// The widest available path; ZT_CPU_ADAM_SIMD=scalar|avx2|avx512 caps it (for tests/benchmarks).
AdamSimd best_adam_simd();

// Elements per OpenMP work item (a multiple of every vector width).
constexpr int64_t kAdamChunk = 1 << 14;

// AdamW over n elements with `path` (which must be available), exactly the formula above; writes
// the updated master rounded to bf16 into out_bf16 and/or copied into out_f32 (either may be
// null). Throws when h.step < 1. OpenMP-parallel over kAdamChunk chunks for large n.
void adam_update(AdamSimd path, float* master, float* m, float* v, const float* grad,
                 bf16_t* out_bf16, float* out_f32, int64_t n, const AdamWHyper& h);
// The same update from bf16 gradients (the offloaded optimizer's bf16 gradient copies): each
// chunk's gradients are widened to fp32, which is exact, in a buffer of the thread's, so the
// result is the fp32 adam_update's on the widened gradients, bit for bit.
void adam_update(AdamSimd path, float* master, float* m, float* v, const bf16_t* grad,
                 bf16_t* out_bf16, float* out_f32, int64_t n, const AdamWHyper& h);

}  // namespace zt::cpu
