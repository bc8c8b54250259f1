// How the CPU backend honours the storage types of backend.h: its kernels compute in fp32, so a
// bf16 (or fp16) input is widened into an fp32 copy first and an fp32 result is rounded once into
// a 16-bit output after. fp32 views pass straight through (no copy, nothing rounded), so an
// all-fp32 run computes exactly as it did before views existed. The copies live only for one op
// (cross_entropy, whose logits may take 2^28 values, widens and rounds a row at a time instead).
#pragma once
#include <cstdint>
#include <vector>

#include "util/bf16.h"
#include "util/tensor_view.h"

namespace zt::cpu {

// Whether a view needs an fp32 copy: false for fp32 (or no tensor), true for bf16 and fp16; any
// other type is refused.
inline bool needs_fp32_copy(ConstTensorView v) {
  if (v.data == nullptr || v.is_f32()) return false;
  ZT_CHECK(v.dtype == DType::kBf16 || v.dtype == DType::kFloat16,
           std::string("cpu backend: unsupported tensor storage ") + dtype_name(v.dtype));
  return true;
}

// An input as fp32: the view itself, or a widened copy of its 16-bit values (exact).
class Fp32Input {
 public:
  Fp32Input(ConstTensorView v, int64_t n) {
    if (!needs_fp32_copy(v)) {
      data_ = static_cast<const float*>(v.data);
      return;
    }
    copy_.resize(static_cast<size_t>(n));
    widen_16bit(v.dtype, static_cast<const uint16_t*>(v.data), copy_.data(), copy_.size());
    data_ = copy_.data();
  }
  const float* get() const { return data_; }

 private:
  const float* data_ = nullptr;
  std::vector<float> copy_;
};

// An output as fp32. kKeep: the kernel reads the current values (+= or in place); kOverwrite: it
// writes every element. commit() rounds the fp32 result into a 16-bit view (a no-op for fp32).
class Fp32Output {
 public:
  enum class Contents { kOverwrite, kKeep };
  Fp32Output(TensorView v, int64_t n, Contents contents) : view_(v) {
    if (!needs_fp32_copy(v)) {
      data_ = static_cast<float*>(v.data);
      return;
    }
    copy_.resize(static_cast<size_t>(n));
    if (contents == Contents::kKeep)
      widen_16bit(v.dtype, static_cast<const uint16_t*>(v.data), copy_.data(), copy_.size());
    data_ = copy_.data();
  }
  float* get() const { return data_; }
  void commit() {
    if (!copy_.empty())
      round_16bit(view_.dtype, copy_.data(), static_cast<uint16_t*>(view_.data), copy_.size());
  }

 private:
  TensorView view_;
  float* data_ = nullptr;
  std::vector<float> copy_;
};

}  // namespace zt::cpu
