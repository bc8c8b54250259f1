// Derived bounds for one training step of two runs that differ only in how fp32 sums are
// associated: a run X at N ranks (any stage, or another world after a resharding load) against
// one rank at stage 0. Both start from the same state and train the same global batch as the same
// n = N·A micro-batches of B sequences ("leaves"; the reference runs grad-accum n), so every leaf
// is computed by the same GEMM shapes and gives the same gradient floats c_i in both runs. What
// differs is only the order in which the n leaf gradients are added — over micro-batches, inside
// MPI's reductions, bucket by bucket — and likewise for the loss and the gradient norm. The
// bounds below follow from that arithmetic; no constant in them is tuned to a machine.
//
// Notation: u = 2^-24 (fp32) or 2^-53 (double), γ_k = k·u / (1 − k·u).
// * Gradient. Any association of k floats computes their sum within γ_{k−1}·Σ|x_i| (Higham,
//   Accuracy and Stability of Numerical Algorithms, 2nd ed., §4.2), so two associations of the
//   same n leaf gradients differ per element by at most δ_e = 2·γ_{n−1}·Σ_i |c_{i,e}|. The c_i are
//   measured: each leaf trained alone on one rank, read through a gradient probe, divided by n
//   (exact: n is a power of two and the backward is linear in the loss scale 1/tokens).
//   That the engine adds whole leaf gradients at all is checked, not assumed: the reference's
//   gradient must equal the sequential fp32 sum of the c_i bit for bit. (It holds because each
//   leaf contributes one float per element: the dW GEMMs contract a micro-batch's tokens in one
//   pass, RMSNorm adds its double sum once, and the embedding adds one row per input token, the
//   test data repeating no token within a micro-batch.)
// * Loss. The per-token losses are identical floats and each micro-batch's double sum is
//   identical; the n sums are associated differently: |Δ| ≤ (2·γ^d_{n−1} + 2u_d)·loss.
// * Gradient norm. |‖g_X‖ − ‖g_ref‖| ≤ ‖g_X − g_ref‖₂ ≤ ‖δ‖₂; each norm is a double sum of exact
//   squares of floats (relative error ≤ γ^d_P over P elements) and a square root.
// * Update. With the same master, m and v, AdamW's new master is a function of the gradient
//   alone. Interval arithmetic carries g ∈ [g_ref − δ, g_ref + δ], times the run's own clip scale,
//   through backend/cpu/cpu_adam.h's formula, widening every fp32 operation by one rounding; the
//   run's new master must lie in the interval. The reference's own new master, from its own
//   gradient (δ = 0), must lie in its interval too, which checks the widening itself. Where the
//   gradient interval contains 0 the normalised update m/√v can change sign, and the interval
//   then allows the element to move by up to ~2·lr: Adam's amplification of rounding noise,
//   confined to the elements where it can happen.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iomanip>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/adam_constants.h"
#include "engine/decay_segments.h"
#include "engine_test_support.h"

namespace zt::engine_test {

constexpr double kRoundoffF32 = 0x1p-24;
constexpr double kRoundoffF64 = 0x1p-53;

inline double gamma_k(int64_t k, double u) {
  return static_cast<double>(k) * u / (1.0 - static_cast<double>(k) * u);
}

// A closed interval of reals, evaluated in double (whose own rounding, ≤ 2^-53 per operation, is
// covered by an extra 2^-50 of relative widening wherever an fp32 rounding is added).
struct Interval {
  double lo, hi;
  static Interval around(double x, double radius) { return {x - radius, x + radius}; }
  bool contains(double x) const { return lo <= x && x <= hi; }
  // One fp32 rounding of any value in the interval: |fl(x) − x| ≤ u·|x|.
  Interval fp32() const {
    const double pad = (kRoundoffF32 + 0x1p-50) * std::max(std::fabs(lo), std::fabs(hi));
    return {lo - pad, hi + pad};
  }
};
inline Interval operator+(Interval a, Interval b) {
  return {a.lo + b.lo, a.hi + b.hi};
}
inline Interval operator-(Interval a, Interval b) {
  return {a.lo - b.hi, a.hi - b.lo};
}
inline Interval operator*(Interval a, Interval b) {
  const double p[] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  return {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
}
inline Interval operator/(Interval a, Interval b) {  // b must not contain 0
  const double q[] = {a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi};
  return {*std::min_element(q, q + 4), *std::max_element(q, q + 4)};
}
inline Interval square(Interval a) {
  const double l = a.lo * a.lo, h = a.hi * a.hi;
  if (a.lo <= 0 && a.hi >= 0) return {0.0, std::max(l, h)};
  return {std::min(l, h), std::max(l, h)};
}
inline Interval sqrt(Interval a) {
  return {std::sqrt(std::max(a.lo, 0.0)), std::sqrt(a.hi)};
}

// The exact-arithmetic range of backend/cpu/cpu_adam.h's new master for a gradient in `grad`,
// each fp32 operation widened by its rounding:
//   g = fl(grad·s); m' = fma(β1, m, fl((1−β1)·g)); v' = fma(β2, v, fl((1−β2)·fl(g·g)));
//   step = fl(fl(lr·fl(m'/bc1)) / fl(fl(sqrt(fl(v'/bc2))) + eps)); w' = fl(w − fma(decay, w, step))
inline Interval adamw_master_range(const AdamConstants& c, Interval grad, float master, float m,
                                   float v, float decay) {
  auto point = [](double x) { return Interval{x, x}; };
  const Interval g = (grad * point(c.grad_scale)).fp32();
  const Interval m1 = (point(double(c.beta1) * m) + (point(c.one_minus_beta1) * g).fp32()).fp32();
  const Interval v1 =
      (point(double(c.beta2) * v) + (point(c.one_minus_beta2) * square(g).fp32()).fp32()).fp32();
  const Interval numerator = (point(c.lr) * (m1 / point(c.bc1)).fp32()).fp32();
  const Interval denominator = (sqrt((v1 / point(c.bc2)).fp32()).fp32() + point(c.eps)).fp32();
  const Interval step = (numerator / denominator).fp32();
  return (point(master) - (point(double(decay) * master) + step).fp32()).fp32();
}

// The reference side of a one-step comparison, computed on one rank at stage 0 from a start state
// that `make` reproduces (a fresh engine each call: micro-batch B, stage 0, the given optimizer).
class OneStepReference {
 public:
  using Factory = std::function<std::unique_ptr<TestEngine>(const AdamWConfig&)>;

  // The step `step` at learning rate `lr` over `leaves` leaves (n = N·A, a power of two).
  OneStepReference(const Factory& make, const AdamWConfig& optim, int64_t step, int64_t leaves,
                   float lr)
      : optim_(optim), step_(step), leaves_(leaves), lr_(lr) {
    EXPECT_EQ(leaves & (leaves - 1), 0) << "the leaf scaling is exact for a power of two only";
    const AdamWConfig probe = gradient_probe(optim);
    before_ = make(optim)->own_state();
    layout_ = std::make_unique<ParamLayout>(make(optim)->engine().layout());
    gradient_ = make(probe)->probe_gradient(step, leaves);
    // Σ|c_i| per element, and the sequential fp32 sum of the c_i that the reference must equal.
    std::vector<std::vector<float>> sequential(gradient_.size());
    abs_sum_.resize(gradient_.size());
    for (size_t g = 0; g < gradient_.size(); ++g) {
      sequential[g].assign(gradient_[g].size(), 0.0f);
      abs_sum_[g].assign(gradient_[g].size(), 0.0);
    }
    for (int64_t leaf = 0; leaf < leaves; ++leaf) {
      auto engine = make(probe);
      engine->leaf_step(step, leaf, leaves, 0.0f);
      const OwnState c = engine->own_state();
      for (size_t g = 0; g < gradient_.size(); ++g) {
        for (size_t e = 0; e < gradient_[g].size(); ++e) {
          const float ci = c.m[g][e] / static_cast<float>(leaves);
          sequential[g][e] += ci;
          abs_sum_[g][e] += std::fabs(static_cast<double>(ci));
        }
      }
    }
    for (size_t g = 0; g < gradient_.size(); ++g)
      EXPECT_EQ(std::memcmp(sequential[g].data(), gradient_[g].data(),
                            sequential[g].size() * sizeof(float)),
                0)
          << "group " << g << ": the reference's gradient is not the sequential sum of its "
          << "micro-batches' gradients, which the bounds assume";
    const double gamma = 2.0 * gamma_k(leaves - 1, kRoundoffF32);
    double delta_sq = 0.0, norm_sq = 0.0;
    int64_t elements = 0;
    for (size_t g = 0; g < gradient_.size(); ++g) {
      for (size_t e = 0; e < gradient_[g].size(); ++e) {
        const double d = gamma * abs_sum_[g][e];
        delta_sq += d * d;
        norm_sq += double(gradient_[g][e]) * gradient_[g][e];
        ++elements;
      }
    }
    auto engine = make(optim);
    ref_stats_ = engine->step(step, leaves, lr);
    norm_bound_ = std::sqrt(delta_sq) * (1 + 1e-12) +
                  4.0 * (gamma_k(elements, kRoundoffF64) + kRoundoffF64) * std::sqrt(norm_sq);
    // The reference's own new masters lie in their intervals: checks the widening above.
    expect_masters_in_range(ref_stats_, engine->own_state(), 0.0, "reference (self-check)");
  }

  // X's gradient probe (trained with gradient_probe(optim) at lr 0): within δ of the reference.
  void expect_gradient(const OwnState& x, const std::string& what) const {
    const double gamma = 2.0 * gamma_k(leaves_ - 1, kRoundoffF32);
    for (size_t g = 0; g < gradient_.size(); ++g) {
      int64_t bad = 0;
      double worst = 0.0;
      for (size_t i = 0; i < x.m[g].size(); ++i) {
        const size_t e = static_cast<size_t>(x.begin[g]) + i;
        const double diff = std::fabs(double(x.m[g][i]) - gradient_[g][e]);
        if (diff > gamma * abs_sum_[g][e]) ++bad;
        worst = std::max(worst, diff);
      }
      EXPECT_EQ(bad, 0) << what << ": group " << g << ", " << bad
                        << " gradient elements beyond 2·γ_{n−1}·Σ|c_i| (largest difference "
                        << worst << ")";
    }
  }

  // X's real step from the same start: loss, gradient norm and every new master of its range.
  void expect_step(const StepStats& x, const OwnState& x_after, const std::string& what) const {
    const double loss_bound =
        (2.0 * gamma_k(leaves_ - 1, kRoundoffF64) + 2.0 * kRoundoffF64) * ref_stats_.loss;
    EXPECT_LE(std::fabs(x.loss - ref_stats_.loss), loss_bound) << what << ": loss";
    EXPECT_LE(std::fabs(x.grad_norm - ref_stats_.grad_norm), norm_bound_) << what << ": norm";
    expect_masters_in_range(x, x_after, 2.0 * gamma_k(leaves_ - 1, kRoundoffF32), what);
  }

  // The probe optimizer: β1 = 0 and no clipping make m' = fma(0, m, 1·g) = g exactly, and lr 0
  // (passed to the step) leaves every master unchanged.
  static AdamWConfig gradient_probe(AdamWConfig optim) {
    optim.beta1 = 0.0f;
    optim.clip = 0.0f;
    return optim;
  }

 private:
  void expect_masters_in_range(const StepStats& stats, const OwnState& after, double gamma,
                               const std::string& what) const {
    const AdamConstants c =
        adam_constants(adamw_hyper(optim_, lr_, step_, static_cast<float>(stats.clip_scale)));
    const float decay = lr_ * optim_.weight_decay;  // adam_constants' lr·wd, for decayed tensors
    for (size_t g = 0; g < gradient_.size(); ++g) {
      const int64_t begin = after.begin[g], count = static_cast<int64_t>(after.master[g].size());
      int64_t bad = 0;
      std::string first;
      for (const DecaySegment& s : decay_segments(*layout_, static_cast<int>(g), begin, count)) {
        for (int64_t e = s.begin; e < s.end; ++e) {
          const size_t i = static_cast<size_t>(e - begin), ei = static_cast<size_t>(e);
          const Interval range = adamw_master_range(
              c, Interval::around(gradient_[g][ei], gamma * abs_sum_[g][ei]), before_.master[g][ei],
              before_.m[g][ei], before_.v[g][ei], s.decay ? decay : 0.0f);
          if (range.contains(after.master[g][i])) continue;
          if (bad++ == 0) {
            std::ostringstream os;
            os << std::setprecision(9) << "element " << e << ": " << after.master[g][i]
               << " outside [" << range.lo << ", " << range.hi << "]";
            first = os.str();
          }
        }
      }
      EXPECT_EQ(bad, 0) << what << ": group " << g << ", " << bad
                        << " new masters outside their bound; first " << first;
    }
  }

  AdamWConfig optim_;
  int64_t step_, leaves_;
  float lr_;
  std::unique_ptr<ParamLayout> layout_;
  OwnState before_;
  std::vector<std::vector<float>> gradient_;  // the reference's reduced gradient, per group
  std::vector<std::vector<double>> abs_sum_;  // Σ_i |c_i| per element
  StepStats ref_stats_;
  double norm_bound_ = 0.0;
};

}  // namespace zt::engine_test
