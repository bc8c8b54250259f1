// Activations in their storage type on the device (docs/ARCHITECTURE.md §2, "Activation
// storage"), host side: the CUDA kernels are templates over the element type of their
// activations and weights (cuda_storage.cuh); with_storage() turns a view's DType into that
// template argument, and shared_storage() checks that the activations of one call share one type
// (the model stores all of them in one; a mixed call is a zt::Error naming the op).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "util/dtype.h"
#include "util/error.h"
#include "util/tensor_view.h"

namespace zt::cuda {

using Bf16Bits = uint16_t;  // a bf16 element as the kernels see it
// An IEEE fp16 element as the kernels see it (--precision fp16): a type of its own, so that the
// templates tell it from bf16.
struct Fp16Bits {
  uint16_t bits;
};
static_assert(sizeof(Fp16Bits) == 2, "fp16 elements are packed 2-byte values");

// Calls fn(T*{}) with T the element type of `dtype` (float, Bf16Bits or Fp16Bits); anything else
// is a zt::Error naming `what`.
template <typename Fn>
void with_storage(DType dtype, const std::string& what, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      fn(static_cast<float*>(nullptr));
      return;
    case DType::kBf16:
      fn(static_cast<Bf16Bits*>(nullptr));
      return;
    case DType::kFloat16:
      fn(static_cast<Fp16Bits*>(nullptr));
      return;
    default:
      throw Error("CUDA backend: " + what + " is stored in " + dtype_name(dtype) +
                  "; activations and working parameters are float32, bfloat16 or float16");
  }
}

// The storage type shared by the non-null views of one call (float32 when all are null); a
// zt::Error naming the op when two differ.
inline DType shared_storage(const std::string& op, std::initializer_list<ConstTensorView> views) {
  const ConstTensorView* first = nullptr;
  for (const ConstTensorView& view : views) {
    if (!view) continue;
    if (first == nullptr) {
      first = &view;
    } else {
      ZT_CHECK(view.dtype == first->dtype,
               "CUDA backend: " + op + " mixes " + dtype_name(first->dtype) + " and " +
                   dtype_name(view.dtype) + " activations; its kernels take one storage type");
    }
  }
  return first == nullptr ? DType::kFloat32 : first->dtype;
}

template <typename T>
T* typed(TensorView view) {
  return static_cast<T*>(view.data);
}
template <typename T>
const T* typed(ConstTensorView view) {
  return static_cast<const T*>(view.data);
}

}  // namespace zt::cuda
