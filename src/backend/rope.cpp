#include "backend/rope.h"

#include <cmath>
#include <numbers>
#include <string>

#include "util/error.h"

namespace zt {

// Every operation below is one fp32 operation, as PyTorch evaluates the fp32 tensor expressions
// of transformers' rope functions: a Python number meets an fp32 tensor as an fp32 value, and
// `number / tensor` is computed as reciprocal(tensor) · number.
std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t head_dim) {
  const int64_t dims = rope.rotated(head_dim), half = dims / 2;
  const RopeScalingParams& sc = rope.scaling;
  std::vector<float> inv(static_cast<size_t>(half));
  const std::vector<double>& factors = sc.long_factors ? sc.long_factor : sc.short_factor;
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dims);
    const float power = static_cast<float>(std::pow(static_cast<double>(rope.theta), exponent));
    // longrope: 1.0 / (ext_factors * base ** exponent), the factors an fp32 tensor.
    const float divisor = sc.type == RopeScaling::kLongrope
                              ? static_cast<float>(factors.at(static_cast<size_t>(i))) * power
                              : power;
    inv[static_cast<size_t>(i)] = 1.0f / divisor;
  }
  const auto factor = static_cast<float>(sc.factor);
  if (sc.type == RopeScaling::kLinear) {
    for (float& f : inv) f = f / factor;
  } else if (sc.type == RopeScaling::kLlama3) {
    const double old_len = static_cast<double>(sc.original_max_positions);
    const auto low_wavelen = static_cast<float>(old_len / sc.low_freq_factor);
    const auto high_wavelen = static_cast<float>(old_len / sc.high_freq_factor);
    const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
    const auto old_len_f = static_cast<float>(old_len);
    const auto low_factor = static_cast<float>(sc.low_freq_factor);
    const auto band = static_cast<float>(sc.high_freq_factor - sc.low_freq_factor);
    for (float& f : inv) {
      const float wavelen = (1.0f / f) * two_pi;
      const float scaled = wavelen > low_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      if (medium) {
        const float smooth = ((1.0f / wavelen) * old_len_f - low_factor) / band;
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      } else {
        f = scaled;
      }
    }
  }
  return inv;
}

int64_t checked_rotated_dims(const RopeSpec& rope, int64_t head_dim) {
  const int64_t rotated = rope.rotated(head_dim);
  ZT_CHECK(rotated % 2 == 0 && rotated <= head_dim,
           "rope: " + std::to_string(rotated) + " rotated elements of a head of " +
               std::to_string(head_dim) + " (an even count, at most the head's, is needed)");
  return rotated;
}

double longrope_attention_factor(int64_t max_positions, int64_t original) {
  const double scale = static_cast<double>(max_positions) / static_cast<double>(original);
  return scale <= 1.0 ? 1.0
                      : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(original)));
}

}  // namespace zt
