// AdamW's per-call constants, rounded to fp32 once, shared by every backend so that the CPU and
// CUDA updates start from bit-identical constants: bias corrections 1 − β^t computed in double
// then rounded, decoupled decay lr·wd.
#pragma once
#include <cmath>

#include "backend/backend.h"

namespace zt {

struct AdamConstants {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, bc1, bc2, eps, decay, grad_scale;
};

inline AdamConstants adam_constants(const AdamWHyper& h) {
  const double t = static_cast<double>(h.step);
  AdamConstants c;
  c.lr = h.lr;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta1 = 1.0f - h.beta1;
  c.one_minus_beta2 = 1.0f - h.beta2;
  c.bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta1), t));
  c.bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(h.beta2), t));
  c.eps = h.eps;
  c.decay = h.lr * h.weight_decay;
  c.grad_scale = h.grad_scale;
  return c;
}

}  // namespace zt
