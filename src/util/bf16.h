// bfloat16 <-> float32. bf16 is the top 16 bits of an IEEE float32; conversion from fp32 rounds
// to nearest, ties to even, and keeps NaN a (quiet) NaN. Also IEEE fp16 <-> float32: reading
// checkpoints stored in half precision, and fp16 working params and activations (--precision
// fp16), rounded to nearest even with overflow to infinity, as a GPU's __float2half_rn does.
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

// The smallest float float_to_bf16 rounds to infinity: halfway from bf16's largest finite value
// (0x1.fep127) to 2^128, a tie that rounds to the even side. A vector whose Euclidean norm is
// below it has no element that does.
constexpr float kBf16RoundsToInfinity = 0x1.ffp127f;

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

// float32 -> IEEE binary16 bits, round to nearest, ties to even: values beyond the largest
// finite fp16 (65504) round to ±infinity (from 65520 on), tiny ones to subnormals or ±0; NaN
// stays a quiet NaN.
inline uint16_t float_to_fp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // ≥ 65520: inf
  if (magnitude >= 0x38800000u) {  // normal fp16 (≥ 2^-14): rebias 127 -> 15, drop 13 bits
    const uint32_t rebased = magnitude - 0x38000000u;
    const uint32_t rounded = rebased + 0xfffu + ((rebased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  if (magnitude < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to ±0
  // Subnormal fp16: value = m·2^-24 with m < 1024. Shift the full 24-bit significand so that its
  // unit is 2^-24, rounding the shifted-out bits to nearest even.
  const uint32_t exponent = magnitude >> 23;  // 102..112
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  const uint32_t kept = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t m = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  return static_cast<uint16_t>(sign | m);  // m = 1024 carries into the smallest normal: right
}

// Rounds a float to the nearest fp16-representable float (±inf beyond the fp16 range).
inline float round_to_fp16(float f) {
  return fp16_to_float(float_to_fp16(f));
}

void floats_to_fp16(const float* in, uint16_t* out, size_t n);
void fp16_to_floats(const uint16_t* in, float* out, size_t n);

void floats_to_bf16(const float* in, bf16_t* out, size_t n);
void bf16_to_floats(const bf16_t* in, float* out, size_t n);

}  // namespace zt
