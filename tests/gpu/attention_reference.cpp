// The fp64 reference of the causal attention and its derived bounds (attention_reference.h).
#include "attention_reference.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "util/bf16.h"

namespace zt::gpu_test {

namespace {

constexpr double kU = 1.0 / 256.0;                       // bf16 unit roundoff
constexpr double kE = 1.0 / 16777216.0;                  // fp32 unit roundoff
constexpr double kHalfFp16Subnormal = 1.0 / 33554432.0;  // 2⁻²⁵: half fp16's subnormal spacing

}  // namespace

std::vector<float> bf16_rounded(std::vector<float> x) {
  for (float& v : x) v = round_to_bf16(v);
  return x;
}

std::vector<float> both_16bit(std::vector<float> x) {
  x = bf16_rounded(std::move(x));
  for (float& e : x)
    if (std::fabs(e) < 6.2e-5f) e = 0.0f;
  return x;
}

// `bound` + `extra`, elementwise.
std::vector<double> plus(std::vector<double> bound, const std::vector<double>& extra) {
  for (size_t i = 0; i < bound.size(); ++i) bound[i] += extra[i];
  return bound;
}

// doc_start (empty: none): query i of row b sees keys doc_start[b·T+i] ≤ j ≤ i (backend.h).
Reference reference(const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout,
                    const AttentionShape& s, const std::vector<int32_t>& doc_start) {
  const int64_t group = s.H / s.Hkv, q_n = s.B * s.T * s.H * s.hd, kv_n = s.B * s.T * s.Hkv * s.hd;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.hd));
  Reference r;
  r.out.assign(q_n, 0), r.out_bound.assign(q_n, 0), r.lse.assign(s.B * s.H * s.T, 0);
  r.dq.assign(q_n, 0), r.dq_bound.assign(q_n, 0);
  r.dk.assign(kv_n, 0), r.dk_bound.assign(kv_n, 0), r.dv.assign(kv_n, 0),
      r.dv_bound.assign(kv_n, 0);
  // each result rounded once, and under GQA each head's partial of dK and dV too
  r.out_fp16.assign(q_n, kHalfFp16Subnormal), r.dq_fp16.assign(q_n, kHalfFp16Subnormal);
  const double kv_roundings = group > 1 ? static_cast<double>(group + 1) : 1.0;
  r.dk_fp16.assign(kv_n, kv_roundings * kHalfFp16Subnormal);
  r.dv_fp16.assign(kv_n, kv_roundings * kHalfFp16Subnormal);
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return ((b * s.T + t) * s.H + h) * s.hd; };
  auto ki = [&](int64_t b, int64_t t, int64_t g) { return ((b * s.T + t) * s.Hkv + g) * s.hd; };
  std::vector<double> p(s.T), ds(s.T), ds_err(s.T);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.T; ++i) {
        const float* qr = &q[qi(b, i, h)];
        const int64_t lo = doc_start.empty() ? 0 : doc_start[b * s.T + i];
        double max_s = -INFINITY, max_abs_dot = 0;
        for (int64_t j = lo; j <= i; ++j) {
          double dot = 0, abs_dot = 0;
          for (int64_t d = 0; d < s.hd; ++d) {
            dot += static_cast<double>(qr[d]) * k[ki(b, j, g) + d];
            abs_dot += std::fabs(static_cast<double>(qr[d]) * k[ki(b, j, g) + d]);
          }
          p[j] = dot * scale;
          max_s = std::max(max_s, p[j]);
          max_abs_dot = std::max(max_abs_dot, abs_dot);
        }
        double sum = 0;
        for (int64_t j = lo; j <= i; ++j) sum += std::exp(p[j] - max_s);
        const double lse = max_s + std::log(sum);
        r.lse[(b * s.H + h) * s.T + i] = lse;
        for (int64_t j = lo; j <= i; ++j) p[j] = std::exp(p[j] - lse);
        const double ds_i = 2.0 * s.hd * kE * scale * max_abs_dot + 2 * kE * (1 + std::fabs(lse));
        const double p_rel = kU + 2 * ds_i + 2 * s.T * kE;
        // forward
        for (int64_t d = 0; d < s.hd; ++d) {
          double o = 0, abs_o = 0;
          for (int64_t j = lo; j <= i; ++j) {
            o += p[j] * v[ki(b, j, g) + d];
            abs_o += p[j] * std::fabs(v[ki(b, j, g) + d]);
            r.out_fp16[qi(b, i, h) + d] += kHalfFp16Subnormal * std::fabs(v[ki(b, j, g) + d]);
          }
          r.out[qi(b, i, h) + d] = o;
          r.out_bound[qi(b, i, h) + d] = p_rel * abs_o + kU * std::fabs(o);
        }
        // backward: both paths get the reference output rounded to bf16, so D uses it too
        const float* dor = &dout[qi(b, i, h)];
        double D = 0, abs_D = 0;
        for (int64_t d = 0; d < s.hd; ++d) {
          const double o16 = round_to_bf16(static_cast<float>(r.out[qi(b, i, h) + d]));
          D += dor[d] * o16;
          abs_D += std::fabs(dor[d] * o16);
        }
        for (int64_t j = lo; j <= i; ++j) {
          double dp = 0, abs_dp = 0;
          for (int64_t d = 0; d < s.hd; ++d) {
            dp += static_cast<double>(dor[d]) * v[ki(b, j, g) + d];
            abs_dp += std::fabs(static_cast<double>(dor[d]) * v[ki(b, j, g) + d]);
          }
          ds[j] = p[j] * (dp - D) * scale;
          ds_err[j] = (kU + 2 * ds_i) * std::fabs(ds[j]) +
                      p[j] * scale * 2.0 * s.hd * kE * (abs_dp + abs_D) +
                      2 * s.T * kE * std::fabs(ds[j]);
          // dK/dV sum over the group's query heads too, with bf16 per-head partials under GQA.
          const double kv_extra = (group > 1 ? kU : 0.0) + 2 * s.T * (group - 1) * kE;
          for (int64_t d = 0; d < s.hd; ++d) {
            const int64_t kv = ki(b, j, g) + d;
            r.dv[kv] += p[j] * dor[d];
            r.dv_bound[kv] += (p_rel + kv_extra) * p[j] * std::fabs(dor[d]);
            r.dq[qi(b, i, h) + d] += ds[j] * k[kv];
            r.dq_bound[qi(b, i, h) + d] += ds_err[j] * std::fabs(k[kv]);
            r.dk[kv] += ds[j] * qr[d];
            r.dk_bound[kv] += (ds_err[j] + kv_extra * std::fabs(ds[j])) * std::fabs(qr[d]);
            r.dv_fp16[kv] += kHalfFp16Subnormal * std::fabs(dor[d]);
            r.dq_fp16[qi(b, i, h) + d] += kHalfFp16Subnormal * std::fabs(k[kv]);
            r.dk_fp16[kv] += kHalfFp16Subnormal * std::fabs(qr[d]);
          }
        }
      }
    }
  }
  for (size_t i = 0; i < r.dq.size(); ++i) r.dq_bound[i] += kU * std::fabs(r.dq[i]);
  for (size_t i = 0; i < r.dk.size(); ++i) r.dk_bound[i] += kU * std::fabs(r.dk[i]);
  for (size_t i = 0; i < r.dv.size(); ++i) r.dv_bound[i] += kU * std::fabs(r.dv[i]);
  return r;
}

::testing::AssertionResult within(const std::vector<float>& got, const std::vector<double>& want,
                                  const std::vector<double>& bound, const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double allowed = kSecondOrderSlack * bound[i] + 1e-12;
    if (!(std::fabs(got[i] - want[i]) <= allowed) && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << want.size() << " elements beyond the bound (first at "
         << first << ": got " << got[first] << ", reference " << want[first] << ", allowed "
         << kSecondOrderSlack * bound[first] << ")";
}

}  // namespace zt::gpu_test
