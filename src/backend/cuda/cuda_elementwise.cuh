// Elementwise kernels in 16-byte accesses. A kernel body is a functor whose operator() takes a
// position `at`: either a chunk of kChunk consecutive elements, read and written with 16-byte
// vector accesses (one per chunk for a 16-bit type, two for fp32), or a single element. The body
// loads its inputs widened to fp32 into arrays of at.kCount, computes element by element and
// stores, so both positions run the same per-element arithmetic and give the same bits
// (cuda_storage.cuh's load/store). elementwise_kernel runs the chunks when every pointer of the
// call is 16-byte aligned (the activation arena's tensors are), then the tail, or every element
// one by one otherwise.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_storage.cuh"
#include "backend/vector_alignment.h"
#include "util/cuda/cuda_check.h"

namespace zt::cuda {

constexpr int kChunk = 8;  // elements per chunk: 16 bytes of a 16-bit type, 32 of fp32

// 16 bytes of T: one vector load or store.
template <typename T>
struct alignas(16) Pack16 {
  T e[16 / sizeof(T)];
};

// kChunk elements starting at element `first`, in 16-byte accesses (p + first 16-byte aligned).
struct ChunkAt {
  static constexpr int kCount = kChunk;
  int64_t first;
  template <typename T>
  __device__ __forceinline__ void load(const T* p, float (&v)[kCount]) const {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
    const Pack16<T>* packs = reinterpret_cast<const Pack16<T>*>(p + first);
#pragma unroll
    for (int part = 0; part < kCount / kPer; ++part) {
      const Pack16<T> pack = packs[part];
#pragma unroll
      for (int j = 0; j < kPer; ++j) v[part * kPer + j] = zt::cuda::load(pack.e, j);
    }
  }
  template <typename T>
  __device__ __forceinline__ void store(T* p, const float (&v)[kCount]) const {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
    Pack16<T>* packs = reinterpret_cast<Pack16<T>*>(p + first);
#pragma unroll
    for (int part = 0; part < kCount / kPer; ++part) {
      Pack16<T> pack;
#pragma unroll
      for (int j = 0; j < kPer; ++j) zt::cuda::store(pack.e, j, v[part * kPer + j]);
      packs[part] = pack;
    }
  }
};

// The single element `first`.
struct ElementAt {
  static constexpr int kCount = 1;
  int64_t first;
  template <typename T>
  __device__ __forceinline__ void load(const T* p, float (&v)[kCount]) const {
    v[0] = zt::cuda::load(p, first);
  }
  template <typename T>
  __device__ __forceinline__ void store(T* p, const float (&v)[kCount]) const {
    zt::cuda::store(p, first, v[0]);
  }
};

// op over elements [0, n): chunks (grid-stride) and then the tail when `chunked`, else one by one.
template <typename Op>
__global__ void elementwise_kernel(Op op, int64_t n, bool chunked) {
  int64_t done = 0;
  if (chunked) {
    const int64_t chunks = n / kChunk;
    for (int64_t c = global_thread(); c < chunks; c += grid_threads()) op(ChunkAt{c * kChunk});
    done = chunks * kChunk;
  }
  for (int64_t i = done + global_thread(); i < n; i += grid_threads()) op(ElementAt{i});
}

// Row kernels (one block per row of D elements): body(at) over the positions this thread owns.
// With D a multiple of kChunk, thread t owns chunks c = t, t + blockDim, ..., read as one ChunkAt
// when `chunked` (the row's tensors aligned) or as its kChunk elements in order otherwise: the
// same positions in the same order either way, so a sum over them depends on D and blockDim
// only, never on alignment. Other D: elements d = t, t + blockDim, ...
template <typename Body>
__device__ __forceinline__ void for_row(int64_t D, bool chunked, Body&& body) {
  if (D % kChunk == 0) {
    for (int64_t c = threadIdx.x; c < D / kChunk; c += blockDim.x) {
      if (chunked) {
        body(ChunkAt{c * kChunk});
      } else {
#pragma unroll
        for (int j = 0; j < kChunk; ++j) body(ElementAt{c * kChunk + j});
      }
    }
  } else {
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) body(ElementAt{d});
  }
}

// Every pointer 16-byte aligned (null pointers are ignored).
inline bool aligned16(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// 16-byte accesses along rows of D elements: whole chunks per row and every tensor of the call
// aligned. For for_row's callers which positions a thread sums, and in which order, does not
// depend on it; the cross-entropy groups its logits otherwise when chunked (cuda_cross_entropy.cu),
// so its bits depend on the alignment, which the device arena fixes for a run.
inline bool chunked_rows(int64_t D, std::initializer_list<const void*> pointers) {
  return D % kChunk == 0 && aligned16(pointers);
}

// Enqueues op over n elements, chunked when `chunkable` (the op's own condition) and every
// pointer in `pointers` is 16-byte aligned; a failed launch is a zt::Error naming `name`.
template <typename Op>
void launch_elementwise(const char* name, Op op, int64_t n,
                        std::initializer_list<const void*> pointers, cudaStream_t stream,
                        bool chunkable = true) {
  if (n == 0) return;
  const bool chunked = chunkable && aligned16(pointers);
  const int64_t work = chunked ? (n + kChunk - 1) / kChunk : n;
  elementwise_kernel<<<elementwise_blocks(work), kElementwiseThreads, 0, stream>>>(op, n, chunked);
  check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);
}

}  // namespace zt::cuda
