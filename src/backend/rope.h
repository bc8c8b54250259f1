// Rotary position embedding parameters: the base θ and Hugging Face's rope_scaling of type
// `linear`, `llama3`, `yarn` or Phi-3's `longrope` (docs/ARCHITECTURE.md §2). Both backends rotate
// by the same fp32 table, built from rope_inv_freq (and the attention factor of longrope and
// yarn) on the host.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace zt {

enum class RopeScaling { kNone, kLinear, kLlama3, kLongrope, kYarn };

// Hugging Face's config.json `rope_scaling` object.
struct RopeScalingParams {
  RopeScaling type = RopeScaling::kNone;
  // As config.json gives them (doubles, as Python reads them); rounded to fp32 where PyTorch
  // meets them with an fp32 tensor.
  double factor = 1.0;           // linear, llama3 and yarn
  double low_freq_factor = 1.0;  // llama3
  double high_freq_factor = 4.0;
  // llama3 and yarn: its original_max_position_embeddings (yarn's defaults to
  // max_position_embeddings); longrope: config.json's top-level one
  int64_t original_max_positions = 0;
  // longrope (transformers' Phi3LongRoPEScaledRotaryEmbedding): one factor per frequency that
  // divides it, short_factor for sequences up to original_max_positions and long_factor beyond;
  // and the factor multiplying cos and sin, sqrt(1 + ln(max_position_embeddings / original) /
  // ln(original)) when that ratio exceeds 1, whichever factors apply. long_factors: those of a
  // sequence longer than original_max_positions (a model's, chosen by its sequence length as
  // transformers 4.46 chooses them by the forward's key/value length; not from config.json).
  // yarn's attention factor: config.json's, else 0.1·ln(factor) + 1 (or DeepSeek's mscale ratio).
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;
  bool long_factors = false;
  // yarn: the rotation counts bounding the band of frequencies that blends extrapolation
  // (beta_fast: above it, kept) into interpolation (beta_slow: below it, divided by factor).
  double beta_fast = 32.0, beta_slow = 1.0;
  // Written out: the CUDA sources that include this header are compiled as C++17.
  bool operator==(const RopeScalingParams& o) const {
    return type == o.type && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor &&
           original_max_positions == o.original_max_positions && short_factor == o.short_factor &&
           long_factor == o.long_factor && attention_factor == o.attention_factor &&
           long_factors == o.long_factors && beta_fast == o.beta_fast && beta_slow == o.beta_slow;
  }
};

struct RopeSpec {
  float theta = 10000.0f;
  RopeScalingParams scaling;
  // The leading elements of each head that rotate (transformers' int(head_dim ·
  // partial_rotary_factor), Phi-4-mini's 96 of 128); the rest pass through. 0: the whole head.
  int64_t rotary_dims = 0;
  // Which elements pair up: false, element i with i + r/2 of the rotated r (transformers'
  // rotate_half, Llama's); true, element 2i with 2i + 1 (GLM's rotate_half on x[..., 0::2] and
  // x[..., 1::2], GPT-J's). Pair i turns by angle p·inv_freq_i either way.
  bool interleaved = false;
  static RopeSpec unscaled(float theta) {
    RopeSpec r;
    r.theta = theta;
    return r;
  }
  int64_t rotated(int64_t head_dim) const { return rotary_dims > 0 ? rotary_dims : head_dim; }
  // Where pair i's first element lies (i·pair_step()) and how far its second is from it.
  int64_t pair_step() const { return interleaved ? 2 : 1; }
  int64_t pair_partner(int64_t head_dim) const { return interleaved ? 1 : rotated(head_dim) / 2; }
  bool operator==(const RopeSpec& o) const {
    return theta == o.theta && scaling == o.scaling && rotary_dims == o.rotary_dims &&
           interleaved == o.interleaved;
  }
};

// inv_freq_i for i < r/2, r = rope.rotated(head_dim) (the rotated dims: transformers' `dim`),
// rounded at the points where transformers (4.4x, modeling_rope_utils) rounds them in fp32:
//   default: inv_i = 1 / θ^(2i/r)                            (the power correctly rounded)
//   linear:  inv_i / factor
//   llama3:  wavelen = (1/inv_i)·2π; below original/high_freq_factor kept, above
//            original/low_freq_factor divided by factor, in between
//            (1 − s)·inv_i/factor + s·inv_i with s = (original/wavelen − low)/(high − low).
//   longrope: 1 / (factor_i · θ^(2i/r))     (the product, then its reciprocal; factor_i the
//             short_factor, or with long_factors the long_factor)
//   yarn:    e_i = 1 − clamp((i − lo) / (hi − lo), 0, 1), blending the extrapolated 1/θ^(2i/r)
//            and the interpolated 1/(factor · θ^(2i/r)): interp·(1 − e_i) + extrap·e_i, where
//            lo = max(0, ⌊d(beta_fast)⌋), hi = min(r − 1, ⌈d(beta_slow)⌉) and
//            d(β) = r·ln(original / (2π·β)) / (2·ln θ), the pair index that turns β times over
//            the original length (yarn_correction_range).
std::vector<float> rope_inv_freq(const RopeSpec& rope, int64_t head_dim);

// rope.rotated(head_dim), the count both backends rotate; a zt::Error unless it is even and at
// most the head's.
int64_t checked_rotated_dims(const RopeSpec& rope, int64_t head_dim);

// yarn's band [lo, hi] of pair indices (above: interpolated, below: kept), in double as Python
// evaluates it; hi is lo + 0.001 when they meet, as transformers keeps the ramp defined.
std::pair<double, double> yarn_correction_range(const RopeSpec& rope, int64_t head_dim);

// yarn's factor on cos and sin for a scaling `factor` (transformers' get_mscale, in double):
// 0.1·mscale·ln(factor) + 1, or 1 for a factor of at most 1. Its default is mscale 1; DeepSeek's
// configs give the ratio of two.
double yarn_attention_factor(double factor, double mscale = 1.0);

// Longrope's factor on cos and sin, in double as transformers computes it:
// sqrt(1 + ln(max_positions / original) / ln(original)), or 1 when the ratio is at most 1.
double longrope_attention_factor(int64_t max_positions, int64_t original);

}  // namespace zt
