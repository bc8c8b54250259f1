#include "io/gguf_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/bf16.h"
#include "util/error.h"

namespace zt {

namespace {

constexpr int64_t kBlock = 32;   // elements of a Q4_0 ... Q8_0 block
constexpr int64_t kSuper = 256;  // elements of a K-quant super-block
constexpr int64_t kScales = 12;  // bytes of a Q4_K/Q5_K/Q3_K packed scale array

struct TypeRow {
  GgmlType type;
  const char* name;
  int64_t block_elements, block_bytes;
};

constexpr TypeRow kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4},          {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kBF16, "BF16", 1, 2},        {GgmlType::kQ4_0, "Q4_0", kBlock, 18},
    {GgmlType::kQ4_1, "Q4_1", kBlock, 20},  {GgmlType::kQ5_0, "Q5_0", kBlock, 22},
    {GgmlType::kQ5_1, "Q5_1", kBlock, 24},  {GgmlType::kQ8_0, "Q8_0", kBlock, 34},
    {GgmlType::kQ2_K, "Q2_K", kSuper, 84},  {GgmlType::kQ3_K, "Q3_K", kSuper, 110},
    {GgmlType::kQ4_K, "Q4_K", kSuper, 144}, {GgmlType::kQ5_K, "Q5_K", kSuper, 176},
    {GgmlType::kQ6_K, "Q6_K", kSuper, 210},
};

const TypeRow* find_type(uint32_t type) {
  for (const TypeRow& row : kTypes)
    if (static_cast<uint32_t>(row.type) == type) return &row;
  return nullptr;
}

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_float(h);
}

// Q4_0, Q4_1, Q5_0, Q5_1: element j < 16 is byte j's low nibble, element j + 16 its high nibble,
// with bit j (j + 16) of `high` as the fifth bit when the type has one. `offset` is subtracted
// from q (8 or 16, or 0 with a min); the value is d·q (+ m).
void dequantize_small_block(const uint8_t* nibbles, uint32_t high, bool has_high, float d, float m,
                            bool has_min, int offset, float* y) {
  for (int j = 0; j < 16; ++j) {
    int q0 = nibbles[j] & 0x0F, q1 = nibbles[j] >> 4;
    if (has_high) {
      q0 |= static_cast<int>((high >> j) << 4 & 0x10);
      q1 |= static_cast<int>((high >> (j + 12)) & 0x10);
    }
    q0 -= offset;
    q1 -= offset;
    y[j] = has_min ? static_cast<float>(q0) * d + m : static_cast<float>(q0) * d;
    y[j + 16] = has_min ? static_cast<float>(q1) * d + m : static_cast<float>(q1) * d;
  }
}

void dequantize_legacy(GgmlType type, const uint8_t* b, float* y) {
  const float d = half(b);
  switch (type) {
    case GgmlType::kQ8_0:
      for (int j = 0; j < kBlock; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
      return;
    case GgmlType::kQ4_0:
      return dequantize_small_block(b + 2, 0, false, d, 0, false, 8, y);
    case GgmlType::kQ4_1:
      return dequantize_small_block(b + 4, 0, false, d, half(b + 2), true, 0, y);
    case GgmlType::kQ5_0: {
      uint32_t high;
      std::memcpy(&high, b + 2, 4);
      return dequantize_small_block(b + 6, high, true, d, 0, false, 16, y);
    }
    case GgmlType::kQ5_1: {
      uint32_t high;
      std::memcpy(&high, b + 4, 4);
      return dequantize_small_block(b + 8, high, true, d, half(b + 2), true, 0, y);
    }
    default:
      fail("ggml_dequantize: not a 32-element block type");
  }
}

// The 6-bit scale and min of group j (0..7) of a Q4_K/Q5_K super-block: groups 0-3 keep them in
// the low 6 bits of bytes j and j + 4; groups 4-7 in the nibbles of bytes j + 4, with their top
// two bits in the top bits of bytes j − 4 (scale) and j (min).
void scale_min_k4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Q4_K (144 bytes: d, dmin, scales[12], nibbles[128]) and Q5_K (176: d, dmin, scales[12],
// high bits[32], nibbles[128]): 4 chunks of 64 elements, a chunk's low nibbles one group of 32
// and its high nibbles the next; Q5_K's fifth bit of chunk c is bit 2c (2c + 1) of high[l].
void dequantize_q4_q5_k(bool five_bits, const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* high = five_bits ? b + 4 + kScales : nullptr;
  const uint8_t* q = b + 4 + kScales + (five_bits ? 32 : 0);
  for (int chunk = 0; chunk < 4; ++chunk, q += 32, y += 64) {
    uint8_t s0, m0, s1, m1;
    scale_min_k4(2 * chunk, scales, &s0, &m0);
    scale_min_k4(2 * chunk + 1, scales, &s1, &m1);
    const float d0 = d * s0, min0 = dmin * m0, d1 = d * s1, min1 = dmin * m1;
    for (int l = 0; l < 32; ++l) {
      int q0 = q[l] & 0xF, q1 = q[l] >> 4;
      if (five_bits) {
        q0 += (high[l] >> (2 * chunk)) & 1 ? 16 : 0;
        q1 += (high[l] >> (2 * chunk + 1)) & 1 ? 16 : 0;
      }
      y[l] = d0 * static_cast<float>(q0) - min0;
      y[l + 32] = d1 * static_cast<float>(q1) - min1;
    }
  }
}

// Q6_K (210 bytes: low nibbles[128], high 2 bits[64], scales:int8[16], d): two halves of 128;
// in each, element l + 32k (k = 0..3) takes low nibble (k odd: from byte l + 32, k ≥ 2: the high
// nibble) and bits 2k, 2k + 1 of high[l]; its scale is scales[l / 16 + 2k].
void dequantize_q6_k(const uint8_t* b, float* y) {
  const uint8_t* low = b;
  const uint8_t* high = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int part = 0; part < 2; ++part, low += 64, high += 32, scales += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q[4] = {((low[l] & 0xF) | ((high[l] >> 0 & 3) << 4)) - 32,
                        ((low[l + 32] & 0xF) | ((high[l] >> 2 & 3) << 4)) - 32,
                        ((low[l] >> 4) | ((high[l] >> 4 & 3) << 4)) - 32,
                        ((low[l + 32] >> 4) | ((high[l] >> 6 & 3) << 4)) - 32};
      for (int k = 0; k < 4; ++k)
        y[l + 32 * k] = d * static_cast<float>(scales[is + 2 * k]) * static_cast<float>(q[k]);
    }
  }
}

// Q2_K (84 bytes: scales[16], 2-bit q[64], d, dmin) and Q3_K (110 bytes: high bits[32], 2-bit
// q[64], 6-bit scales[12], d): two halves of 128 whose 32 bytes of q hold four 2-bit planes
// (shift 0, 2, 4, 6); each plane is two groups of 16 (bytes l and l + 16), scales in order.
void dequantize_q2_q3_k(bool three_bits, const uint8_t* b, float* y) {
  const uint8_t* q = b + (three_bits ? 32 : 16);
  int8_t scale[16];  // Q3_K: 6-bit scales − 32; Q2_K: the bytes (low nibble scale, high min)
  uint8_t packed[16];
  float d, dmin = 0;
  if (three_bits) {
    const uint8_t* s = b + 96;  // scale j: low 4 bits from s[j] (j < 8) or its high nibble
    for (int j = 0; j < 16; ++j) {
      const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
      const int top = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
      scale[j] = static_cast<int8_t>((low | top << 4) - 32);
    }
    d = half(b + 108);
  } else {
    std::memcpy(packed, b, 16);
    d = half(b + 80);
    dmin = half(b + 82);
  }
  const uint8_t* high = b;
  int group = 0;
  uint8_t mask = 1;
  for (int part = 0; part < 2; ++part, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, mask = static_cast<uint8_t>(mask << 1)) {
      for (int half_group = 0; half_group < 2; ++half_group, ++group, y += 16) {
        const int base = 16 * half_group;
        if (three_bits) {
          const float dl = d * static_cast<float>(scale[group]);
          for (int l = 0; l < 16; ++l) {
            const int v = ((q[base + l] >> shift) & 3) - ((high[base + l] & mask) ? 0 : 4);
            y[l] = dl * static_cast<float>(v);
          }
        } else {
          const float dl = d * static_cast<float>(packed[group] & 0xF);
          const float ml = dmin * static_cast<float>(packed[group] >> 4);
          for (int l = 0; l < 16; ++l)
            y[l] = dl * static_cast<float>((q[base + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

}  // namespace

bool ggml_type_supported(uint32_t type) {
  return find_type(type) != nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const TypeRow* row = find_type(type);
  return row ? row->name : "type " + std::to_string(type);
}

int64_t ggml_block_elements(GgmlType type) {
  const TypeRow* row = find_type(static_cast<uint32_t>(type));
  ZT_CHECK(row != nullptr, "unsupported ggml type " + std::to_string(static_cast<int>(type)));
  return row->block_elements;
}

int64_t ggml_block_bytes(GgmlType type) {
  const TypeRow* row = find_type(static_cast<uint32_t>(type));
  ZT_CHECK(row != nullptr, "unsupported ggml type " + std::to_string(static_cast<int>(type)));
  return row->block_bytes;
}

int64_t ggml_row_bytes(GgmlType type, int64_t elements) {
  return elements / ggml_block_elements(type) * ggml_block_bytes(type);
}

void ggml_dequantize(GgmlType type, const uint8_t* data, int64_t elements, float* out) {
  const int64_t per_block = ggml_block_elements(type), bytes = ggml_block_bytes(type);
  ZT_CHECK(elements % per_block == 0, "ggml_dequantize: " + std::to_string(elements) +
                                          " elements are not whole " +
                                          ggml_type_name(static_cast<uint32_t>(type)) + " blocks");
  for (int64_t blk = 0; blk < elements / per_block; ++blk) {
    const uint8_t* b = data + blk * bytes;
    float* y = out + blk * per_block;
    switch (type) {
      case GgmlType::kF32:
        std::memcpy(y, b, 4);
        break;
      case GgmlType::kF16:
        *y = half(b);
        break;
      case GgmlType::kBF16: {
        bf16_t h;
        std::memcpy(&h, b, 2);
        *y = bf16_to_float(h);
        break;
      }
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        dequantize_q4_q5_k(type == GgmlType::kQ5_K, b, y);
        break;
      case GgmlType::kQ6_K:
        dequantize_q6_k(b, y);
        break;
      case GgmlType::kQ2_K:
      case GgmlType::kQ3_K:
        dequantize_q2_q3_k(type == GgmlType::kQ3_K, b, y);
        break;
      default:
        dequantize_legacy(type, b, y);
    }
  }
}

void quantize_q8_0(const float* values, int64_t elements, uint8_t* out) {
  ZT_CHECK(elements % kBlock == 0,
           "quantize_q8_0: " + std::to_string(elements) + " elements are not whole blocks of 32");
  for (int64_t blk = 0; blk < elements / kBlock; ++blk) {
    const float* x = values + blk * kBlock;
    uint8_t* b = out + blk * 34;
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inverse = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t d16 = float_to_fp16(d);
    std::memcpy(b, &d16, 2);
    for (int j = 0; j < kBlock; ++j)
      b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * inverse)));
  }
}

}  // namespace zt
