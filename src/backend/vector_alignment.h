// Where 16-byte vector accesses can start over buffers of different element sizes. The CUDA
// backend's elementwise kernels (backend/cuda/cuda_elementwise.cuh) read and write 16 bytes at a
// time only where every buffer of a call is aligned. Host logic without CUDA, tested anywhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace zt {

// A buffer of elements of `bytes` each (p null: none, ignored).
struct ElementBuffer {
  const void* p;
  size_t bytes;
};

// The fewest leading elements, under `limit`, past which every buffer is 16-byte aligned (a
// stage-3 shard starts at any element of its flat buffers); 0 when they are aligned already, or
// when no count under `limit` aligns them all (buffers misaligned to one another).
inline int64_t elements_to_alignment(std::initializer_list<ElementBuffer> buffers, int64_t limit) {
  for (int64_t head = 0; head < limit; ++head) {
    bool aligned = true;
    for (const ElementBuffer& b : buffers) {
      const uintptr_t at =
          reinterpret_cast<uintptr_t>(b.p) + static_cast<uintptr_t>(head) * b.bytes;
      if (b.p != nullptr && at % 16 != 0) aligned = false;
    }
    if (aligned) return head;
  }
  return 0;
}

}  // namespace zt
