#include "backend/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "util/error.h"

namespace zt {

namespace {

// θ^(2i/r), rounded to fp32: the exponent an fp32 quotient, the power correctly rounded.
float frequency_divisor(const RopeSpec& rope, int64_t i, int64_t dims) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(dims);
  return static_cast<float>(std::pow(static_cast<double>(rope.theta), exponent));
}

// yarn: `inv` holds the extrapolated frequencies 1/θ^(2i/r) (`powers` the θ^(2i/r)); each becomes
// its blend with the interpolated 1/(factor·θ^(2i/r)), transformers' (4.46 and 4.56+) tensor
// expressions in fp32:
//   ramp = clamp((arange(r/2) − lo) / (hi − lo), 0, 1);  e = 1 − ramp
//   inv  = interp · (1 − e) + extrap · e
void blend_yarn(const RopeSpec& rope, int64_t head_dim, const std::vector<float>& powers,
                std::vector<float>& inv) {
  const auto [low, high] = yarn_correction_range(rope, head_dim);
  const auto low_f = static_cast<float>(low), span = static_cast<float>(high - low);
  const auto factor = static_cast<float>(rope.scaling.factor);
  for (size_t i = 0; i < inv.size(); ++i) {
    const float extrapolated = inv[i];
    const float interpolated = 1.0f / (factor * powers[i]);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float kept = 1.0f - ramp;
    inv[i] = interpolated * (1.0f - kept) + extrapolated * kept;
  }
}

}  // namespace

// Every operation below is one fp32 operation, as PyTorch evaluates the fp32 tensor expressions
// of transformers' rope functions: a Python number meets an fp32 tensor as an fp32 value, and
// `number / tensor` is computed as reciprocal(tensor) · number.
std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t head_dim) {
  const int64_t dims = rope.rotated(head_dim), half = dims / 2;
  const RopeScalingParams& sc = rope.scaling;
  std::vector<float> inv(static_cast<size_t>(half)), powers(inv.size());
  const std::vector<double>& factors = sc.long_factors ? sc.long_factor : sc.short_factor;
  for (int64_t i = 0; i < half; ++i) {
    const float power = powers[static_cast<size_t>(i)] = frequency_divisor(rope, i, dims);
    // longrope: 1.0 / (ext_factors * base ** exponent), the factors an fp32 tensor.
    const float divisor = sc.type == RopeScaling::kLongrope
                              ? static_cast<float>(factors.at(static_cast<size_t>(i))) * power
                              : power;
    inv[static_cast<size_t>(i)] = 1.0f / divisor;
  }
  const auto factor = static_cast<float>(sc.factor);
  if (sc.type == RopeScaling::kLinear) {
    for (float& f : inv) f = f / factor;
  } else if (sc.type == RopeScaling::kYarn) {
    blend_yarn(rope, head_dim, powers, inv);
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

std::pair<double, double> yarn_correction_range(const RopeSpec& rope, int64_t head_dim) {
  const RopeScalingParams& sc = rope.scaling;
  const auto dims = static_cast<double>(rope.rotated(head_dim));
  const double log_base = std::log(static_cast<double>(rope.theta));
  const auto original = static_cast<double>(sc.original_max_positions);
  // The pair index whose frequency turns `rotations` times over the original length.
  auto pair_turning = [&](double rotations) {
    return (dims * std::log(original / (rotations * 2.0 * std::numbers::pi))) / (2.0 * log_base);
  };
  const double low = std::max(std::floor(pair_turning(sc.beta_fast)), 0.0);
  const double high = std::min(std::ceil(pair_turning(sc.beta_slow)), dims - 1.0);
  return {low, low == high ? high + 0.001 : high};
}

int64_t checked_rotated_dims(const RopeSpec& rope, int64_t head_dim) {
  const int64_t rotated = rope.rotated(head_dim);
  ZT_CHECK(rotated % 2 == 0 && rotated <= head_dim,
           "rope: " + std::to_string(rotated) + " rotated elements of a head of " +
               std::to_string(head_dim) + " (an even count, at most the head's, is needed)");
  return rotated;
}

double yarn_attention_factor(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

double longrope_attention_factor(int64_t max_positions, int64_t original) {
  const double scale = static_cast<double>(max_positions) / static_cast<double>(original);
  return scale <= 1.0 ? 1.0
                      : std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(original)));
}

}  // namespace zt
