// The gated MLP's activations (backend.h's glu_forward/glu_backward), one definition for both
// backends: each gives act(a), and the gradients dgate = dh·u·act'(a), dup = dh·act(a). `Math`
// is the backend's exp and tanh (the CPU's vectorisable fast_expf, CUDA's expf and tanhf).
#pragma once
#include "util/splitmix64.h"  // ZT_HOST_DEVICE

namespace zt {

// silu(a) = a / (1 + exp(−a)) (PyTorch's form); σ = 1/(1 + exp(−a)), silu' = σ·(1 + a·(1 − σ)).
template <typename Math>
struct Silu {
  ZT_HOST_DEVICE static float value(float a) { return a / (1.0f + Math::exp(-a)); }
  ZT_HOST_DEVICE static void grads(float a, float g, float u, float& dg, float& du) {
    const float sigma = 1.0f / (1.0f + Math::exp(-a));
    dg = g * u * sigma * (1.0f + a * (1.0f - sigma));
    du = g * (a * sigma);
  }
};

// gelu_tanh(a) = a/2 · (1 + t), t = tanh(k·(a + c·a³)), k = sqrt(2/π), c = 0.044715 (PyTorch's
// gelu(approximate="tanh"), in its order of operations); gelu' = (1 + t)/2 + a/2 · (1 − t²) ·
// k·(1 + 3c·a²).
template <typename Math>
struct GeluTanh {
  static constexpr float kScale = 0.7978845608028654f;
  static constexpr float kCubic = 0.044715f;
  ZT_HOST_DEVICE static float inner(float a) {
    return Math::tanh(kScale * (a + kCubic * a * a * a));
  }
  ZT_HOST_DEVICE static float value(float a) { return 0.5f * a * (1.0f + inner(a)); }
  ZT_HOST_DEVICE static void grads(float a, float g, float u, float& dg, float& du) {
    const float t = inner(a);
    const float half_a = 0.5f * a;
    const float slope =
        0.5f * (1.0f + t) + half_a * (1.0f - t * t) * kScale * (1.0f + 3.0f * kCubic * a * a);
    dg = g * u * slope;
    du = g * (half_a * (1.0f + t));
  }
};

}  // namespace zt
