#include "model/rope_freq_factors.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "backend/rope.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace {

// The unscaled inverse frequencies θ^(-2i/d), as the model and llama.cpp's converter compute them.
std::vector<float> plain_inv_freq(double theta, int64_t head_dim) {
  return rope_inv_freq(RopeSpec{static_cast<float>(theta), RopeScalingParams{}}, head_dim);
}

// llama.cpp's converter, one frequency: fp32 tensor arithmetic meeting Python numbers, as in
// rope_inv_freq (a number divided by a tensor is the tensor's reciprocal times the number).
float freq_factor(float inv_freq, const RopeScalingParams& p) {
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float wavelen = (1.0f / inv_freq) * two_pi;
  const auto old_len = static_cast<double>(p.original_max_positions);
  if (wavelen < static_cast<float>(old_len / p.high_freq_factor)) return 1.0f;
  if (wavelen > static_cast<float>(old_len / p.low_freq_factor))
    return static_cast<float>(p.factor);
  const float smooth =
      ((1.0f / wavelen) * static_cast<float>(old_len) - static_cast<float>(p.low_freq_factor)) /
      static_cast<float>(p.high_freq_factor - p.low_freq_factor);
  return 1.0f / ((1.0f - smooth) / static_cast<float>(p.factor) + smooth);
}

std::vector<float> factors_of(const std::vector<float>& inv_freq, const RopeScalingParams& p) {
  std::vector<float> out;
  for (float f : inv_freq) out.push_back(freq_factor(f, p));
  return out;
}

// The largest relative difference between two factor lists.
double largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::abs(b[i]));
  return worst;
}

}  // namespace

std::vector<float> llama3_rope_freq_factors(const ModelConfig& c) {
  ZT_CHECK(c.rope_scaling.type == RopeScaling::kLlama3,
           "llama3_rope_freq_factors: the model's rope scaling is not llama3");
  return factors_of(plain_inv_freq(c.rope_theta, c.head_dim()), c.rope_scaling);
}

RopeScalingParams llama3_scaling_from_freq_factors(const std::vector<float>& factors, double theta,
                                                   int64_t head_dim, const std::string& where) {
  ZT_CHECK(static_cast<int64_t>(factors.size()) * 2 == head_dim,
           where + " has " + std::to_string(factors.size()) + " values; the heads of " +
               std::to_string(head_dim) + " rotate " + std::to_string(head_dim / 2) +
               " frequencies");
  for (float f : factors)
    ZT_CHECK(std::isfinite(f) && f >= 1.0f,
             where + " holds " + std::to_string(f) +
                 "; llama3 rope scaling factors are finite and at least 1");
  const float largest = *std::max_element(factors.begin(), factors.end());
  if (largest == 1.0f) return {};  // every factor 1: the frequencies unscaled
  const std::vector<float> inv_freq = plain_inv_freq(theta, head_dim);
  RopeScalingParams p;
  p.type = RopeScaling::kLlama3;
  p.factor = decimal_of_float(largest);  // 2.2, not 2.2000000477
  p.low_freq_factor = 1.0;
  p.high_freq_factor = 4.0;  // llama.cpp's converter's defaults, when the band is too narrow
  p.original_max_positions = 8192;
  // Between the bands s = A / wavelength + B, with A = original / (high - low) and
  // B = -low / (high - low); a least-squares line through the band's points gives A and B.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < factors.size(); ++i) {
    if (!(factors[i] > 1.0f && factors[i] < static_cast<float>(p.factor))) continue;
    const double x = inv_freq[i] / (2.0 * std::numbers::pi);
    const double y = (p.factor / factors[i] - 1.0) / (p.factor - 1.0);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  if (n >= 2 && n * sxx - sx * sx > 0) {
    const double a = (n * sxy - sx * sy) / (n * sxx - sx * sx), b = (sy - a * sx) / n;
    if (b < 0 && a > 0) {
      p.high_freq_factor = std::round((1.0 - 1.0 / b) * 1000.0) / 1000.0;
      p.original_max_positions = std::llround(a * (p.high_freq_factor - 1.0));
    }
  }
  const double difference = largest_difference(factors_of(inv_freq, p), factors);
  ZT_CHECK(difference <= 1e-5,
           where + " is not llama3 rope scaling of base " + shortest_decimal(theta) +
               ": the nearest parameters (factor " + shortest_decimal(p.factor) +
               ", low_freq_factor 1, high_freq_factor " + shortest_decimal(p.high_freq_factor) +
               ", original_max_position_embeddings " + std::to_string(p.original_max_positions) +
               ") give factors that differ by " + shortest_decimal(difference) +
               " (relative). Import the model's Hugging Face checkpoint instead");
  return p;
}

}  // namespace zt
