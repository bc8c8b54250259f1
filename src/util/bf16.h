// bfloat16 <-> float32. bf16 is the top 16 bits of an IEEE float32; conversion from fp32 rounds
// to nearest, ties to even, and keeps NaN a (quiet) NaN. Also fp16 -> float32 (reading
// checkpoints stored in half precision).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zt {

using bf16_t = uint16_t;

inline float bf16_to_float(bf16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline bf16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<bf16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  }
  uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>((bits + rounding_bias) >> 16);
}

// Rounds a float to the nearest bf16-representable float.
inline float round_to_bf16(float f) {
  return bf16_to_float(float_to_bf16(f));
}

// IEEE binary16 (fp16) bits -> float32, exact (subnormals, infinities and NaN included).
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, or NaN keeping its payload
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  } else if (mantissa == 0) {
    bits = sign;  // ±0
  } else {        // subnormal: m·2^-24, normalised for float32
    int shift = 0;
    uint32_t m = mantissa;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((m & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void floats_to_bf16(const float* in, bf16_t* out, size_t n);
void bf16_to_floats(const bf16_t* in, float* out, size_t n);

}  // namespace zt
