// The tensor types of GGUF files (llama.cpp's ggml types) that Llama-family files use, and their
// conversion to and from fp32. A quantized row is a run of blocks: each block holds a fixed number
// of elements (32, or 256 for the K-quants) as small integers with fp16 scales, and a value is
// rebuilt as scale·q (+ min, or − min for the K-quants). The layouts, per block:
//   Q8_0  d:fp16, q:int8[32]                                 x = d·q
//   Q4_0  d:fp16, nibbles[16]                                x = d·(q − 8)
//   Q4_1  d:fp16, m:fp16, nibbles[16]                        x = d·q + m
//   Q5_0  d:fp16, high bits:u32, nibbles[16]                 x = d·(q − 16)
//   Q5_1  d:fp16, m:fp16, high bits:u32, nibbles[16]         x = d·q + m
//   (element j < 16 is byte j's low nibble, element j + 16 its high nibble; bit j of the u32 is
//   element j's fifth bit)
//   Q2_K  scales:u8[16], q:2-bit[256], d:fp16, dmin:fp16     16 groups of 16: x = d·s·q − dmin·m
//   Q3_K  high bits[32], q:2-bit[256], 6-bit scales[16], d   x = d·(s − 32)·(q − 4·!high)
//   Q4_K  d, dmin, 6-bit scales and mins[8+8], nibbles[128]  8 groups of 32: x = d·s·q − dmin·m
//   Q5_K  d, dmin, scales and mins, high bits[32], nibbles   same, with a fifth bit
//   Q6_K  low nibbles[128], high 2 bits[64], scales:i8[16], d  16 groups: x = d·s·(q − 32)
// Each value is computed in fp32 in the order ggml's reference dequantization uses, so that the
// result is the same bits as llama.cpp's own reader (and the `gguf` Python package's).
#pragma once
#include <cstdint>
#include <string>

namespace zt {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Whether zerotrain reads tensors of this ggml type id; its name ("Q4_K", or "type N").
bool ggml_type_supported(uint32_t type);
std::string ggml_type_name(uint32_t type);

// Elements per block and bytes per block of a supported type (1 and the element size for F32,
// F16 and BF16).
int64_t ggml_block_elements(GgmlType type);
int64_t ggml_block_bytes(GgmlType type);
// Bytes of a row of `elements` (a multiple of the block size).
int64_t ggml_row_bytes(GgmlType type, int64_t elements);

// Dequantizes `elements` values (a multiple of the block size) from `data` into fp32.
void ggml_dequantize(GgmlType type, const uint8_t* data, int64_t elements, float* out);

// Quantizes `elements` values (a multiple of 32) as Q8_0, as ggml's reference quantization does:
// per block d = max|x| / 127 (stored as fp16), q = round(x / d) half away from zero, 0 when d = 0.
void quantize_q8_0(const float* values, int64_t elements, uint8_t* out);

}  // namespace zt
