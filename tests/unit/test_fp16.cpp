// fp16 storage (--precision fp16): util/bf16.h's float -> fp16 rounding against a reference that
// shares none of its bit tricks (the nearest of every finite fp16 value, found by binary search
// over the exactly widened table, ties to the even code, in double), and the CPU backend's fp16
// views. The engine's loss-scaled, overflow-skipping step is tested in tests/mpi
// (ZeroEngineTest.Fp16*) and tests/oracle (test_fp16_loss_scaling.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "util/bf16.h"
#include "util/tensor_view.h"

namespace zt {
namespace {

// Every finite non-negative fp16 value in increasing order, with its code (0x0000 .. 0x7bff).
struct Fp16Table {
  std::vector<double> value;
  std::vector<uint16_t> code;
  Fp16Table() {
    for (uint32_t h = 0; h <= 0x7bffu; ++h) {
      value.push_back(static_cast<double>(fp16_to_float(static_cast<uint16_t>(h))));
      code.push_back(static_cast<uint16_t>(h));
    }
  }
};

// IEEE round to nearest, ties to even, with overflow to infinity at or beyond 65520 (the
// midpoint between 65504 and the next step, 65536, which is not representable).
uint16_t reference_fp16(float f) {
  static const Fp16Table table;
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  const auto it = std::lower_bound(table.value.begin(), table.value.end(), a);
  const size_t hi = static_cast<size_t>(it - table.value.begin());
  if (hi < table.value.size() && table.value[hi] == a) return sign | table.code[hi];
  if (hi == table.value.size()) return sign | 0x7bff;  // between 65504 and 65520
  const size_t lo = hi - 1;
  const double dlo = a - table.value[lo], dhi = table.value[hi] - a;
  const bool up = dhi < dlo || (dhi == dlo && (table.code[hi] & 1u) == 0);
  return sign | table.code[up ? hi : lo];
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(Fp16, EveryFp16ValueRoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t code = static_cast<uint16_t>(h);
    const float f = fp16_to_float(code);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f)))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(float_to_fp16(f), code) << std::hex << h;
  }
}

// The midpoint between each pair of neighbours (exact in float32: fp16 has 11 significant bits)
// rounds to the even code; a float32 step either side rounds to the nearer one.
TEST(Fp16, MidpointsTieToEvenAndNeighboursRoundToTheNearer) {
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const float lo = fp16_to_float(static_cast<uint16_t>(h));
    const float hi = fp16_to_float(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;
    ASSERT_EQ(float_to_fp16(mid), (h & 1u) ? h + 1 : h) << std::hex << h;
    ASSERT_EQ(float_to_fp16(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(float_to_fp16(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
    ASSERT_EQ(float_to_fp16(-mid), 0x8000u | ((h & 1u) ? h + 1 : h)) << std::hex << h;
  }
}

TEST(Fp16, RangeEdges) {
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // the tie goes to the even code: infinity
  EXPECT_EQ(float_to_fp16(-1e30f), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: even
  EXPECT_EQ(float_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 subnormal steps: to even
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400);     // the smallest normal
  EXPECT_EQ(float_to_fp16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(1e-30f), 0x0000);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  EXPECT_EQ(round_to_fp16(1.0f / 3.0f), 0.333251953125f);
}

// Random float32 bit patterns over the whole exponent range, and values dense around the fp16
// range, against the table reference.
TEST(Fp16, RandomFloatsMatchTheNearestFp16Value) {
  std::mt19937 rng(20261124);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> exponent(-26.0f, 17.0f);
  for (int i = 0; i < 400000; ++i) {
    const float any = from_bits(bits(rng));
    if (!std::isnan(any)) {
      ASSERT_EQ(float_to_fp16(any), reference_fp16(any)) << any;
    }
    const float near = std::copysign(std::exp2(exponent(rng)), any);
    ASSERT_EQ(float_to_fp16(near), reference_fp16(near)) << near;
  }
}

TEST(Fp16, BulkConversionsAndViews) {
  std::vector<float> in = {0.1f, -2.5f, 70000.0f, 1e-6f, 3.14159f};
  std::vector<uint16_t> half(in.size());
  floats_to_fp16(in.data(), half.data(), in.size());
  std::vector<float> back(in.size());
  fp16_to_floats(half.data(), back.data(), half.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(half[i], float_to_fp16(in[i]));
    EXPECT_EQ(back[i], round_to_fp16(in[i]));
  }
  EXPECT_TRUE(std::isinf(back[2]));
  EXPECT_TRUE(is_activation_dtype(DType::kFloat16));
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  std::vector<float> widened(in.size());
  widen_16bit(DType::kFloat16, half.data(), widened.data(), half.size());
  EXPECT_EQ(widened, back);
  EXPECT_THROW(widen_16bit(DType::kInt32, half.data(), widened.data(), 1), Error);
}

// The CPU backend's ops read fp16 views widened exactly and round their fp16 outputs once: an
// elementwise op on fp16 storage equals the fp32 op on the widened values, rounded to fp16.
TEST(Fp16, CpuBackendOpsRoundFp16OutputsOnce) {
  auto be = make_cpu_backend();
  const int64_t n = 1000;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> gate(n), up(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[static_cast<size_t>(i)] = round_to_fp16(normal(rng));
    up[static_cast<size_t>(i)] = round_to_fp16(normal(rng));
  }
  std::vector<uint16_t> gate16(n), up16(n), h16(n);
  floats_to_fp16(gate.data(), gate16.data(), gate16.size());
  floats_to_fp16(up.data(), up16.data(), up16.size());
  std::vector<float> h32(n);
  be->glu_forward(h32.data(), gate.data(), up.data(), n);
  be->glu_forward(TensorView(h16.data(), DType::kFloat16),
                  ConstTensorView(gate16.data(), DType::kFloat16),
                  ConstTensorView(up16.data(), DType::kFloat16), n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(h16[static_cast<size_t>(i)], float_to_fp16(h32[static_cast<size_t>(i)])) << i;
  std::vector<uint16_t> via_backend(n);
  be->to_fp16(via_backend.data(), h32.data(), n);
  EXPECT_EQ(via_backend, h16);
  std::vector<float> widened(n);
  be->widen_from_16bit(DType::kFloat16, widened.data(), h16.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(widened[static_cast<size_t>(i)], round_to_fp16(h32[static_cast<size_t>(i)]));
}

// The embedding copies rows between storage types: fp32 → fp16 rounds once, fp16 → fp32 widens,
// bf16 → fp16 goes through fp32 (exact, then rounded once).
TEST(Fp16, EmbeddingRowsConvertBetweenStorageTypes) {
  auto be = make_cpu_backend();
  const int64_t V = 5, D = 7, n = 4;
  const std::vector<int32_t> tokens = {3, 0, 3, 4};
  std::vector<float> table(V * D);
  for (size_t i = 0; i < table.size(); ++i)
    table[i] = std::ldexp(1.0f + 0.1234567f * static_cast<float>(i), static_cast<int>(i % 9) - 4);
  std::vector<uint16_t> table16(table.size()), table_bf16(table.size()), x16(n * D);
  floats_to_fp16(table.data(), table16.data(), table.size());
  floats_to_bf16(table.data(), table_bf16.data(), table.size());
  std::vector<float> x32(n * D);
  be->embedding_forward(TensorView(x16.data(), DType::kFloat16), tokens.data(), table.data(), n, D);
  be->embedding_forward(x32.data(), tokens.data(), ConstTensorView(table16.data(), DType::kFloat16),
                        n, D);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const float v = table[static_cast<size_t>(tokens[static_cast<size_t>(i)] * D + d)];
      ASSERT_EQ(x16[static_cast<size_t>(i * D + d)], float_to_fp16(v)) << i << "," << d;
      ASSERT_EQ(x32[static_cast<size_t>(i * D + d)], round_to_fp16(v)) << i << "," << d;
    }
  be->embedding_forward(TensorView(x16.data(), DType::kFloat16), tokens.data(),
                        ConstTensorView(table_bf16.data(), DType::kBf16), n, D);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) {
      const float v = table[static_cast<size_t>(tokens[static_cast<size_t>(i)] * D + d)];
      ASSERT_EQ(x16[static_cast<size_t>(i * D + d)], float_to_fp16(round_to_bf16(v)));
    }
}

}  // namespace
}  // namespace zt
