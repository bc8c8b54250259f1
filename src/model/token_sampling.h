// Choosing the next token from a row of logits, as Hugging Face's generate() does: greedy (the
// first largest logit, torch.argmax's choice), or sampling from the distribution its logits
// warpers leave, applied in its order:
//   temperature  logits / t
//   top-k        keep every token whose logit is ≥ the k-th largest (ties at the k-th kept)
//   top-p        sort ascending, drop the tokens whose cumulative probability is ≤ 1 − p, always
//                keeping the most probable one (the nucleus: the fewest most probable tokens that
//                hold at least p of the mass)
// then softmax over what is left.
#pragma once
#include <cstdint>
#include <vector>

namespace zt {

struct SamplingConfig {
  bool sample = false;       // false: greedy
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // in (0, 1]; 1: off
};

// The first index of the largest logit.
int32_t greedy_token(const float* logits, int64_t vocab);

// The probabilities sampling draws from (0 for every token the warpers removed), in double.
std::vector<double> sampling_distribution(const float* logits, int64_t vocab,
                                          const SamplingConfig& config);

// The token whose cumulative probability interval [Σ_{j<i} p_j, Σ_{j≤i} p_j) holds u ∈ [0, 1)
// (the last token with p > 0 if rounding leaves u past the sum).
int32_t draw_token(const std::vector<double>& probabilities, double u);

// Checks a configuration (temperature > 0, top_k ≥ 0, 0 < top_p ≤ 1), naming the bad option.
void check_sampling_config(const SamplingConfig& config);

}  // namespace zt
