// A pointer to a tensor's first element together with its storage type: how the backend contract
// (backend/backend.h) passes activations and working parameters, which may be stored in fp32 or
// in bf16 (or fp16, --precision fp16). Statistics, gradients of parameters and optimizer state
// stay plain float pointers.
// A view converts implicitly from float* (fp32) and bf16_t* (bf16), and from nullptr (no
// tensor), so code that has fp32 buffers passes them as before.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "util/bf16.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {

// The storage types an activation or a working parameter may have.
inline bool is_activation_dtype(DType d) {
  return d == DType::kFloat32 || d == DType::kBf16 || d == DType::kFloat16;
}

// n 16-bit floats of type `dtype` (bf16 or fp16) widened to fp32, exactly.
inline void widen_16bit(DType dtype, const uint16_t* in, float* out, size_t n) {
  ZT_CHECK(dtype == DType::kBf16 || dtype == DType::kFloat16,
           std::string("widen_16bit: not a 16-bit float type: ") + dtype_name(dtype));
  if (dtype == DType::kBf16)
    bf16_to_floats(in, out, n);
  else
    fp16_to_floats(in, out, n);
}
// n floats rounded to nearest even into 16-bit floats of type `dtype` (bf16 or fp16).
inline void round_16bit(DType dtype, const float* in, uint16_t* out, size_t n) {
  ZT_CHECK(dtype == DType::kBf16 || dtype == DType::kFloat16,
           std::string("round_16bit: not a 16-bit float type: ") + dtype_name(dtype));
  if (dtype == DType::kBf16)
    floats_to_bf16(in, out, n);
  else
    floats_to_fp16(in, out, n);
}

// Each of n floats rounded to `dtype` (bf16 or fp16) and widened back, in place: the value a
// 16-bit tensor of that type holds.
inline void round_through_16bit(DType dtype, float* values, size_t n) {
  std::vector<uint16_t> rounded(n);
  round_16bit(dtype, values, rounded.data(), n);
  widen_16bit(dtype, rounded.data(), values, n);
}

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;

  TensorView() = default;
  TensorView(std::nullptr_t) {}                              // NOLINT(google-explicit-constructor)
  TensorView(float* p) : data(p), dtype(DType::kFloat32) {}  // NOLINT
  TensorView(bf16_t* p) : data(p), dtype(DType::kBf16) {}    // NOLINT
  TensorView(void* p, DType d) : data(p), dtype(d) {}

  explicit operator bool() const { return data != nullptr; }
  bool is_f32() const { return dtype == DType::kFloat32; }
  // The element `elements` further on, same type.
  // A null view stays null.
  TensorView at(int64_t elements) const {
    if (data == nullptr) return {nullptr, dtype};
    return {static_cast<std::byte*>(data) + elements * static_cast<int64_t>(dtype_size(dtype)),
            dtype};
  }
  // The fp32 pointer; a zt::Error naming `what` when the tensor is stored in another type.
  float* f32(const char* what) const {
    ZT_CHECK(data == nullptr || is_f32(),
             std::string(what) + ": expected a float32 tensor, got " + dtype_name(dtype));
    return static_cast<float*>(data);
  }
};

struct ConstTensorView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;

  ConstTensorView() = default;
  ConstTensorView(std::nullptr_t) {}                                    // NOLINT
  ConstTensorView(const float* p) : data(p), dtype(DType::kFloat32) {}  // NOLINT
  ConstTensorView(const bf16_t* p) : data(p), dtype(DType::kBf16) {}    // NOLINT
  ConstTensorView(TensorView v) : data(v.data), dtype(v.dtype) {}       // NOLINT
  ConstTensorView(const void* p, DType d) : data(p), dtype(d) {}

  explicit operator bool() const { return data != nullptr; }
  bool is_f32() const { return dtype == DType::kFloat32; }
  ConstTensorView at(int64_t elements) const {
    if (data == nullptr) return {nullptr, dtype};
    return {
        static_cast<const std::byte*>(data) + elements * static_cast<int64_t>(dtype_size(dtype)),
        dtype};
  }
  const float* f32(const char* what) const {
    ZT_CHECK(data == nullptr || is_f32(),
             std::string(what) + ": expected a float32 tensor, got " + dtype_name(dtype));
    return static_cast<const float*>(data);
  }
};

// Bytes of n elements of the view's type.
inline size_t view_bytes(ConstTensorView v, int64_t n) {
  return static_cast<size_t>(n) * dtype_size(v.dtype);
}

// n elements of a view in `memory`, copied to the host and widened to fp32 (exact for bf16/fp16).
inline std::vector<float> widened_to_host(DeviceMemory& memory, ConstTensorView v, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (v.is_f32()) {
    memory.to_host(out.data(), v.data, view_bytes(v, n));
  } else {
    std::vector<uint16_t> stored(static_cast<size_t>(n));
    memory.to_host(stored.data(), v.data, view_bytes(v, n));
    widen_16bit(v.dtype, stored.data(), out.data(), stored.size());
  }
  return out;
}

}  // namespace zt
