// Choosing the next token (model/token_sampling.h): greedy, and the distribution Hugging Face's
// temperature → top-k → top-p warpers leave, on logits whose probabilities are known exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/token_sampling.h"
#include "util/error.h"

namespace zt {
namespace {

// Logits log(p) of a distribution p: softmax gives p back (up to rounding).
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> out;
  for (double x : p) out.push_back(static_cast<float>(std::log(x)));
  return out;
}

void expect_distribution(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
}

TEST(TokenSampling, GreedyTakesTheFirstLargestLogit) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(greedy_token(logits.data(), 4), 1);  // torch.argmax's first maximum
}

TEST(TokenSampling, TemperatureTopKAndTopPAsHuggingFaceWarps) {
  const std::vector<double> p = {0.05, 0.4, 0.1, 0.3, 0.15};
  const std::vector<float> logits = logits_of(p);
  SamplingConfig c;
  c.sample = true;
  expect_distribution(sampling_distribution(logits.data(), 5, c), p);
  // Temperature 2: p_i^(1/2), renormalised.
  c.temperature = 2.0;
  std::vector<double> tempered;
  double sum = 0;
  for (double x : p) sum += std::sqrt(x);
  for (double x : p) tempered.push_back(std::sqrt(x) / sum);
  expect_distribution(sampling_distribution(logits.data(), 5, c), tempered);
  // Top-k 2: the two largest (0.4, 0.3), renormalised.
  c.temperature = 1.0;
  c.top_k = 2;
  expect_distribution(sampling_distribution(logits.data(), 5, c), {0, 0.4 / 0.7, 0, 0.3 / 0.7, 0});
  // Top-p 0.75: ascending, the cumulative sums are 0.05, 0.15, 0.30, ...; the tokens whose sum is
  // ≤ 1 − 0.75 = 0.25 (0.05 and 0.1) are dropped: the nucleus {0.4, 0.3, 0.15} holds 0.85.
  c.top_k = 0;
  c.top_p = 0.75;
  expect_distribution(sampling_distribution(logits.data(), 5, c),
                      {0, 0.4 / 0.85, 0, 0.3 / 0.85, 0.15 / 0.85});
  // A tiny top-p keeps the most probable token alone; top-k 1 too.
  c.top_p = 1e-6;
  expect_distribution(sampling_distribution(logits.data(), 5, c), {0, 1, 0, 0, 0});
  c.top_p = 1.0;
  c.top_k = 1;
  expect_distribution(sampling_distribution(logits.data(), 5, c), {0, 1, 0, 0, 0});
  // Ties at the k-th logit are kept (scores < k-th largest are removed).
  const std::vector<float> tied = {1.0f, 3.0f, 1.0f, 0.0f};
  c.top_k = 2;
  const auto d = sampling_distribution(tied.data(), 4, c);
  EXPECT_GT(d[0], 0);
  EXPECT_GT(d[2], 0);
  EXPECT_EQ(d[3], 0);
}

TEST(TokenSampling, DrawWalksTheCumulativeIntervals) {
  const std::vector<double> p = {0, 0.25, 0, 0.75};
  EXPECT_EQ(draw_token(p, 0.0), 1);
  EXPECT_EQ(draw_token(p, 0.2499), 1);
  EXPECT_EQ(draw_token(p, 0.25), 3);
  EXPECT_EQ(draw_token(p, 0.999999), 3);
  EXPECT_THROW(draw_token(p, 1.0), Error);
  EXPECT_THROW(draw_token({0, 0}, 0.5), Error);
}

TEST(TokenSampling, BadConfigurationsNameTheOption) {
  const std::vector<float> logits = {0, 1};
  auto message = [&](SamplingConfig c) {
    try {
      sampling_distribution(logits.data(), 2, c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingConfig c;
  c.temperature = 0;
  EXPECT_NE(message(c).find("--temperature"), std::string::npos);
  c = {};
  c.top_k = -1;
  EXPECT_NE(message(c).find("--top-k"), std::string::npos);
  c = {};
  c.top_p = 1.5;
  EXPECT_NE(message(c).find("--top-p"), std::string::npos);
  c.top_p = 0;
  EXPECT_NE(message(c).find("--top-p"), std::string::npos);
}

}  // namespace
}  // namespace zt
