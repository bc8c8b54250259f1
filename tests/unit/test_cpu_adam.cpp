// CPU AdamW kernel (backend/cpu/cpu_adam.h): every SIMD path this CPU has against the scalar
// path and the backend's adamw, bitwise, on ragged sizes; bf16 output rounding (ties, NaN, inf);
// bf16 gradients against the fp32 update of the widened ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_adam.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt {
namespace {

using cpu::AdamSimd;

struct AdamState {
  std::vector<float> master, m, v, grad, out_f32;
  std::vector<bf16_t> out_bf16;
};

AdamState random_state(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AdamState s;
  for (int64_t i = 0; i < n; ++i) {
    s.master.push_back(normal(rng));
    s.m.push_back(0.1f * normal(rng));
    s.v.push_back(0.01f * std::abs(normal(rng)));
    s.grad.push_back(normal(rng) * (i % 7 == 0 ? 1e-4f : 1.0f));
  }
  s.out_f32.assign(static_cast<size_t>(n), 0.0f);
  s.out_bf16.assign(static_cast<size_t>(n), 0);
  return s;
}

AdamWHyper hyper(int64_t step) {
  AdamWHyper h;
  h.lr = 3e-3f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.grad_scale = 0.7f;
  h.step = step;
  return h;
}

void expect_same_bits(const AdamState& a, const AdamState& b, const std::string& what) {
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  EXPECT_TRUE(same(a.master, b.master)) << what << ": master differs";
  EXPECT_TRUE(same(a.m, b.m)) << what << ": m differs";
  EXPECT_TRUE(same(a.v, b.v)) << what << ": v differs";
  EXPECT_TRUE(same(a.out_f32, b.out_f32)) << what << ": fp32 output differs";
  EXPECT_TRUE(same(a.out_bf16, b.out_bf16)) << what << ": bf16 output differs";
}

void run_steps(AdamSimd path, AdamState& s, int steps) {
  for (int step = 1; step <= steps; ++step)
    cpu::adam_update(path, s.master.data(), s.m.data(), s.v.data(), s.grad.data(),
                     s.out_bf16.data(), s.out_f32.data(), static_cast<int64_t>(s.master.size()),
                     hyper(step));
}

std::vector<AdamSimd> available_paths() {
  std::vector<AdamSimd> paths;
  for (AdamSimd p : {AdamSimd::kScalar, AdamSimd::kAvx2, AdamSimd::kAvx512})
    if (cpu::adam_simd_available(p)) paths.push_back(p);
  return paths;
}

TEST(CpuAdam, ReportsPaths) {
  std::string names;
  for (AdamSimd p : available_paths()) names += std::string(cpu::adam_simd_name(p)) + " ";
  std::cout << "[ CPU Adam ] available: " << names
            << "best: " << cpu::adam_simd_name(cpu::best_adam_simd()) << "\n";
  EXPECT_TRUE(cpu::adam_simd_available(AdamSimd::kScalar));
  EXPECT_TRUE(cpu::adam_simd_available(cpu::best_adam_simd()));
}

// ./run.sh test's variants cap the path with ZT_CPU_ADAM_SIMD: the widest available path up to
// the cap must be the one in use, or the variant would test the default path twice.
TEST(CpuAdam, HonoursTheRequestedCap) {
  const char* env = std::getenv("ZT_CPU_ADAM_SIMD");
  if (!env) GTEST_SKIP() << "ZT_CPU_ADAM_SIMD not set";
  const std::string cap = env;
  AdamSimd want = AdamSimd::kScalar;
  for (AdamSimd p : available_paths())
    if (static_cast<int>(p) <= (cap == "scalar" ? 0 : cap == "avx2" ? 1 : 2)) want = p;
  EXPECT_EQ(cpu::best_adam_simd(), want) << "ZT_CPU_ADAM_SIMD=" << cap;
}

// Ragged sizes: below, at and around every vector width, and above an OpenMP chunk.
TEST(CpuAdam, EverySimdPathMatchesScalarBitwise) {
  for (int64_t n : std::vector<int64_t>{1, 7, 8, 9, 15, 16, 17, 31, 33, 1000, 4099,
                                        cpu::kAdamChunk + 13, 3 * cpu::kAdamChunk + 5}) {
    AdamState reference = random_state(n, static_cast<uint32_t>(n));
    run_steps(AdamSimd::kScalar, reference, 3);
    for (AdamSimd p : available_paths()) {
      AdamState s = random_state(n, static_cast<uint32_t>(n));
      run_steps(p, s, 3);
      expect_same_bits(reference, s,
                       std::string(cpu::adam_simd_name(p)) + " n=" + std::to_string(n));
    }
  }
}

// bf16 gradients (the offloaded optimizer's bf16 copies) are the fp32 update on the widened
// gradients, bit for bit, on every path, ragged sizes and OpenMP chunks included.
TEST(CpuAdam, Bf16GradientsAreTheUpdateOfTheWidenedGradients) {
  for (int64_t n : std::vector<int64_t>{1, 9, 17, 4099, 3 * cpu::kAdamChunk + 5}) {
    for (AdamSimd p : available_paths()) {
      const std::string what = std::string(cpu::adam_simd_name(p)) + " n=" + std::to_string(n);
      AdamState reference = random_state(n, 11), s = random_state(n, 11);
      std::vector<bf16_t> grad_bf16;
      for (float& g : reference.grad) {
        grad_bf16.push_back(float_to_bf16(g));
        g = bf16_to_float(grad_bf16.back());
      }
      run_steps(p, reference, 3);
      for (int step = 1; step <= 3; ++step)
        cpu::adam_update(p, s.master.data(), s.m.data(), s.v.data(), grad_bf16.data(),
                         s.out_bf16.data(), s.out_f32.data(), n, hyper(step));
      expect_same_bits(reference, s, what);
      // The rounding mattered: the unrounded gradients give other moments (n = 1's one gradient
      // is small beside its m).
      AdamState unrounded = random_state(n, 11);
      run_steps(p, unrounded, 3);
      if (n > 1) {
        EXPECT_NE(std::memcmp(unrounded.m.data(), s.m.data(), s.m.size() * sizeof(float)), 0)
            << what;
      }
    }
  }
}

TEST(CpuAdam, BackendAdamwIsTheScalarDefinition) {
  auto be = make_cpu_backend();
  const int64_t n = 70001;  // parallel, ragged
  AdamState reference = random_state(n, 5), s = random_state(n, 5);
  run_steps(AdamSimd::kScalar, reference, 2);
  for (int step = 1; step <= 2; ++step)
    be->adamw(s.master.data(), s.m.data(), s.v.data(), s.grad.data(), s.out_bf16.data(),
              s.out_f32.data(), n, hyper(step));
  expect_same_bits(reference, s, "backend adamw");
}

TEST(CpuAdam, NullOutputsAndStepCheck) {
  for (AdamSimd p : available_paths()) {
    AdamState a = random_state(37, 9), b = random_state(37, 9);
    cpu::adam_update(p, a.master.data(), a.m.data(), a.v.data(), a.grad.data(), nullptr, nullptr,
                     37, hyper(1));
    run_steps(AdamSimd::kScalar, b, 1);
    EXPECT_EQ(std::memcmp(a.master.data(), b.master.data(), 37 * sizeof(float)), 0);
    EXPECT_THROW(cpu::adam_update(p, a.master.data(), a.m.data(), a.v.data(), a.grad.data(),
                                  nullptr, nullptr, 37, hyper(0)),
                 Error);
  }
}

// With lr = 0 the update leaves finite masters unchanged (w' = w − fma(0, w, 0)), so the bf16
// output is the rounding of chosen values — ties to even both ways, just above/below a tie, NaN,
// the largest float (rounds to inf), denormals, ±0 (±inf become NaN: 0·inf). Every output must
// equal float_to_bf16 of the updated master.
TEST(CpuAdam, Bf16OutputRoundsLikeScalar) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> special = {1.0f + 0x1p-8f,
                                1.0f + 3 * 0x1p-8f,
                                1.0f + 0x1p-8f + 0x1p-20f,
                                1.0f + 0x1p-8f - 0x1p-20f,
                                -(1.0f + 0x1p-8f),
                                -(1.0f + 3 * 0x1p-8f),
                                nan,
                                -nan,
                                inf,
                                -inf,
                                std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::denorm_min(),
                                -0.0f,
                                0.0f,
                                65504.5f};
  // Ragged: 3 copies + 2, so vector bodies and tails both see every value.
  std::vector<float> master;
  for (int r = 0; r < 3; ++r) master.insert(master.end(), special.begin(), special.end());
  master.push_back(special[0]);
  master.push_back(special[1]);
  const int64_t n = static_cast<int64_t>(master.size());
  AdamWHyper h = hyper(1);
  h.lr = 0.0f;
  h.weight_decay = 0.0f;
  for (AdamSimd p : available_paths()) {
    std::vector<float> w = master, m(master.size(), 0.0f), v(master.size(), 0.0f),
                       g(master.size(), 0.0f);
    std::vector<bf16_t> out(master.size());
    cpu::adam_update(p, w.data(), m.data(), v.data(), g.data(), out.data(), nullptr, n, h);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      EXPECT_EQ(out[k], float_to_bf16(w[k]))
          << cpu::adam_simd_name(p) << " element " << i << " value " << master[k];
    }
    EXPECT_EQ(bf16_to_float(out[0]), 1.0f);            // tie to even (down)
    EXPECT_EQ(bf16_to_float(out[1]), 1.0f + 0x1p-6f);  // tie to even (up)
    EXPECT_EQ(bf16_to_float(out[2]), 1.0f + 0x1p-7f);  // above the tie
    EXPECT_TRUE(std::isnan(bf16_to_float(out[6])));    // NaN stays NaN
    EXPECT_EQ(bf16_to_float(out[10]), inf);            // FLT_MAX rounds up to inf
  }
}

// kBf16RoundsToInfinity is where float_to_bf16 starts rounding to infinity: the engine's check
// on bf16 gradient copies (a norm at least this large may hold such an element) relies on it.
TEST(Bf16Rounding, TheInfinityBoundary) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_to_float(float_to_bf16(kBf16RoundsToInfinity)), inf);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-kBf16RoundsToInfinity)), -inf);
  const float below = std::nextafter(kBf16RoundsToInfinity, 0.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(below)), 0x1.fep127f);  // bf16's largest finite value
}

}  // namespace
}  // namespace zt
