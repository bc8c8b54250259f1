// The fp64 reference of causal (grouped-query, optionally document-masked) attention, forward
// and backward, with per-element bounds derived from bf16 rounding, that the fused attention
// (cuDNN SDPA) and the GEMM path are held to (test_cudnn_attention.cpp).
//
// clang-format off
// Inputs q, k, v, dout are rounded to bf16 on the host first, so the fused path's own input
// rounding is exact and the reference sees the same values. What remains, with u = 2⁻⁸ (bf16's
// unit roundoff) and e = 2⁻²⁴ (fp32's), for a flash-style kernel that rounds P and dS to bf16
// before its second GEMMs and writes bf16 results:
//   Δs_i     = 2·hd·e·scale·max_j Σ_d |q_id|·|k_jd|   (fp32 error of a score), so |δp_ij| ≤ 2Δs_i·p_ij
//   |δO_id|  ≤ (u + 2Δs_i + 2T·e)·Σ_j p_ij|v_jd| + u·|O_id|
//   |δdV_jd| ≤ Σ_i (u + 2Δs_i + 2T·e)·p_ij|dO_id| + u·|dV_jd|
//   |δdS_ij| ≤ (u + 2Δs_i)·|dS_ij| + p_ij·scale·2hd·e·(Σ_d |dO_id||v_jd| + Σ_d |dO_id||O_id|)
//   |δdQ_id| ≤ Σ_j (|δdS_ij| + 2T·e·|dS_ij|)·|k_jd| + u·|dQ_id|,   dK likewise with q
// With GQA (group = H/Hkv > 1) cuDNN forms dK/dV per query head in bf16 and then sums the group:
// each head's partial adds u·|its partial| ≤ u·Σ_i |dS_ij||q_id| (p_ij|dO_id| for dV), and the
// accumulation runs over T·group terms (2T·group·e).
// (Δs_i also carries the fp32 rounding of the lse the backward is given.) The backward of both
// paths gets the reference's output rounded to bf16 and its lse, so its check does not inherit
// the forward's differences. These are first-order in u; the comparison allows twice the bound
// for the second-order terms. The GEMM path with exact fp32 GEMMs must meet the same bound (it
// is more accurate). With bf16 storage both paths must give bitwise what fp32 storage gives,
// rounded once (the backend contract's rounding points).
// fp16 storage (a graph of its own) rounds P, dS and its results with a finer unit roundoff
// (2⁻¹¹) but in a narrower range: below 2⁻¹⁴ fp16 is subnormal, with a fixed spacing of 2⁻²⁴. A
// rounding there errs by up to h = 2⁻²⁵ absolute, so its bound adds h·Σ|operand| over the terms a
// rounded P or dS multiplies (Σ_j |v_jd| for O, Σ_i |dO_id| for dV, Σ_j |k_jd| for dQ, Σ_i |q_id|
// for dK) and h for each rounded result (one more per head of a GQA group for dK and dV).
// clang-format on
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/attention_choice.h"

namespace zt::gpu_test {

constexpr double kSecondOrderSlack = 2.0;  // see the comment above

// Each value rounded to bf16.
std::vector<float> bf16_rounded(std::vector<float> x);
// Inputs that bf16 and fp16 both hold exactly: bf16 values, with those below fp16's normal range
// (where fp16 keeps fewer bits) set to zero.
std::vector<float> both_16bit(std::vector<float> x);

// The fp64 reference and the per-element bounds of the comment above.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;                     // values
  std::vector<double> out_bound, dq_bound, dk_bound, dv_bound;  // allowed |error|
  // fp16 storage's extra absolute error from its subnormal range (comment above)
  std::vector<double> out_fp16, dq_fp16, dk_fp16, dv_fp16;
};

// `bound` + `extra`, elementwise.
std::vector<double> plus(std::vector<double> bound, const std::vector<double>& extra);

// doc_start (empty: none): query i of row b sees keys doc_start[b·T+i] ≤ j ≤ i (backend.h).
Reference reference(const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout,
                    const AttentionShape& s, const std::vector<int32_t>& doc_start = {});

// Whether every element of `got` is within kSecondOrderSlack · bound of `want`; the failure
// names `what`, the count beyond and the first one.
::testing::AssertionResult within(const std::vector<float>& got, const std::vector<double>& want,
                                  const std::vector<double>& bound, const std::string& what);

}  // namespace zt::gpu_test
