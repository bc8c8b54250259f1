#include "model/token_sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"

namespace zt {

int32_t greedy_token(const float* logits, int64_t vocab) {
  ZT_CHECK(vocab > 0, "greedy_token: empty vocabulary");
  return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
}

void check_sampling_config(const SamplingConfig& config) {
  ZT_CHECK(std::isfinite(config.temperature) && config.temperature > 0,
           "--temperature must be positive, got " + std::to_string(config.temperature));
  ZT_CHECK(config.top_k >= 0,
           "--top-k must be 0 (off) or positive, got " + std::to_string(config.top_k));
  ZT_CHECK(config.top_p > 0 && config.top_p <= 1,
           "--top-p must be in (0, 1], got " + std::to_string(config.top_p));
}

std::vector<double> sampling_distribution(const float* logits, int64_t vocab,
                                          const SamplingConfig& config) {
  check_sampling_config(config);
  const auto V = static_cast<size_t>(vocab);
  std::vector<double> scores(V);
  for (size_t i = 0; i < V; ++i) scores[i] = static_cast<double>(logits[i]) / config.temperature;
  std::vector<bool> kept(V, true);
  if (config.top_k > 0 && static_cast<size_t>(config.top_k) < V) {
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + config.top_k - 1, sorted.end(),
                     std::greater<>());
    const double kth = sorted[static_cast<size_t>(config.top_k - 1)];
    for (size_t i = 0; i < V; ++i) kept[i] = scores[i] >= kth;
  }
  auto softmax_over_kept = [&] {
    double top = -INFINITY;
    for (size_t i = 0; i < V; ++i)
      if (kept[i]) top = std::max(top, scores[i]);
    std::vector<double> p(V, 0.0);
    double sum = 0;
    for (size_t i = 0; i < V; ++i)
      if (kept[i]) sum += p[i] = std::exp(scores[i] - top);
    for (double& x : p) x /= sum;
    return p;
  };
  std::vector<double> probabilities = softmax_over_kept();
  if (config.top_p < 1.0) {
    // Ascending by probability (stable: among equals the lower index comes first, as a stable
    // ascending sort of the scores would place them).
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return probabilities[a] < probabilities[b]; });
    double cumulative = 0;
    for (size_t r = 0; r + 1 < V; ++r) {  // the most probable token is always kept
      cumulative += probabilities[order[r]];
      if (cumulative <= 1.0 - config.top_p) kept[order[r]] = false;
    }
    probabilities = softmax_over_kept();
  }
  return probabilities;
}

int32_t draw_token(const std::vector<double>& probabilities, double u) {
  ZT_CHECK(u >= 0 && u < 1, "draw_token: u must be in [0, 1)");
  double cumulative = 0;
  int32_t last = -1;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    cumulative += probabilities[i];
    if (u < cumulative) return last;
  }
  ZT_CHECK(last >= 0, "draw_token: no token has a positive probability");
  return last;
}

}  // namespace zt
