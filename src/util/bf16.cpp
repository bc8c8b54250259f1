#include "util/bf16.h"

namespace zt {

void floats_to_bf16(const float* in, bf16_t* out, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
}

void bf16_to_floats(const bf16_t* in, float* out, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

void floats_to_fp16(const float* in, uint16_t* out, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}

void fp16_to_floats(const uint16_t* in, float* out, size_t n) {
#pragma omp parallel for schedule(static) if (n > (1u << 16))
  for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
}

}  // namespace zt
