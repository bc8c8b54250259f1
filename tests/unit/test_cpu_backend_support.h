// Shared helpers of the CPU backend tests: random tensors, the scalar objective L = Σ r·y and a
// central finite-difference gradient check.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace zt::test {

inline std::vector<float> random_normal(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

inline std::vector<int32_t> random_ids(size_t n, int32_t limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> out(n);
  for (int32_t& x : out) x = dist(rng);
  return out;
}

// Σ r·y in double.
inline double weighted_sum(const std::vector<float>& r, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r[i]) * y[i];
  return s;
}

// Checks analytic[i] against (L(x + h·e_i) − L(x − h·e_i)) / 2h for every element of x, where
// objective() evaluates L at the current contents of x. Every element must agree within
// tol · max_i |fd_i|.
inline void expect_gradient_matches(const std::string& what, std::vector<float>& x,
                                    const std::vector<float>& analytic,
                                    const std::function<double()>& objective, float step,
                                    double tol) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::vector<double> fd(x.size());
  double scale = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + step;
    const double plus = objective();
    x[i] = saved - step;
    const double minus = objective();
    x[i] = saved;
    fd[i] = (plus - minus) / (2.0 * static_cast<double>(step));
    scale = std::max(scale, std::abs(fd[i]));
  }
  ASSERT_GT(scale, 1e-3) << what << ": gradient vanishes, the check would prove nothing";
  int reported = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::abs(analytic[i] - fd[i]);
    if (err > tol * scale && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " vs finite difference "
                    << fd[i] << " (scale " << scale << ")";
    }
  }
}

// Largest |a − b| / max(|b|, floor).
inline double max_relative_error(const std::vector<float>& a, const std::vector<double>& b,
                                 double floor = 1e-3) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), floor));
  }
  return worst;
}

}  // namespace zt::test
