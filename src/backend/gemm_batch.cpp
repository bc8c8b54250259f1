#include "backend/gemm_batch.h"

namespace zt {

std::optional<int64_t> even_stride(std::span<const void* const> pointers, size_t element_bytes,
                                   int64_t min_stride) {
  if (pointers.empty() || element_bytes == 0) return std::nullopt;
  for (const void* p : pointers)
    if (p == nullptr) return std::nullopt;
  if (pointers.size() == 1) return 0;
  auto address = [&](size_t i) { return reinterpret_cast<uintptr_t>(pointers[i]); };
  if (address(1) <= address(0)) return std::nullopt;
  const uintptr_t step = address(1) - address(0);
  if (step % element_bytes != 0) return std::nullopt;
  for (size_t i = 2; i < pointers.size(); ++i)
    if (address(i) <= address(i - 1) || address(i) - address(i - 1) != step) return std::nullopt;
  const int64_t stride = static_cast<int64_t>(step / element_bytes);
  if (stride < min_stride) return std::nullopt;
  return stride;
}

}  // namespace zt
