// When the GEMMs of a batch (backend.h's matmul_forward_batch and matmul_weight_grad_batch) can
// run as one strided-batched GEMM. A strided batch finds matrix i of an operand at
// base + i·stride, so the matrices must be evenly spaced, in whole elements, in increasing
// address order. Outputs must not overlap (stride at least one matrix); a shared input (the
// activation all weights multiply) is stride 0, which needs no check. Host-side logic only: the
// CUDA backend calls it before cuBLASLt, and the CPU unit tests pin it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace zt {

// The stride in elements of `element_bytes` that takes each of `pointers` to the next, if
// every step is the same positive whole number of elements, at least `min_stride`; nullopt
// otherwise (a null pointer, uneven or decreasing addresses, a step under min_stride or not a
// whole element). One pointer has stride 0: it is a batch of one.
std::optional<int64_t> even_stride(std::span<const void* const> pointers, size_t element_bytes,
                                   int64_t min_stride);

}  // namespace zt
