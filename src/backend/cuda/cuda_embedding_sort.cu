// CUDA backend: the token embedding's backward over positions sorted by id, the CPU backend's
// algorithm (cpu_pointwise_loss.cpp) on the device:
//   dtable[v] += Σ_{i: tokens[i]=v} dx[i],  the sum formed from zero over v's positions in position
//   order and added once.
// 1. CUB's radix sort of (id, position) pairs, stable: each id's positions stay in position order.
// 2. One block per sorted index and tile of columns; the first index of each id's run owns the id
//    (the others exit) and sums the run's dx rows column by column, then adds each sum into
//    dtable[v] once. A negative id (an ignored position) adds nothing.
// Every element is therefore summed in the CPU's order, bitwise equal to it. Cost: the sort,
// O(n), and one read of each dx row; the scan kernel of cuda_pointwise.cu (O(n · distinct ids)
// comparisons) remains for micro-batches whose sort does not fit the reduction scratch.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/cuda_storage.cuh"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

constexpr size_t kSortAlignment = 256;

size_t sort_aligned(size_t bytes) {
  return (bytes + kSortAlignment - 1) / kSortAlignment * kSortAlignment;
}

__global__ void embedding_positions_kernel(int32_t* positions, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    positions[i] = static_cast<int32_t>(i);
}

// Block (x, y): sorted index x, columns [y·kSortedTileColumns, (y + 1)·kSortedTileColumns). Thread
// t holds columns t, t + blockDim, ... (kSortedColumnsPerThread of them) in registers and walks
// the run once, kSortedRowsInFlight positions at a time: their positions, then all their row
// loads, are issued before the first add, so a frequent token's run (hundreds of positions in
// real text; a run is one block's, and the kernel lasts as long as its longest run) is walked at
// the loads' throughput rather than two load latencies a position. The adds keep position order.
// The run's end is found blockDim ids at a time (the ids are sorted, so the ones equal to the
// run's id are a prefix of each look).
constexpr int kSortedColumnsPerThread = 4;
constexpr int kSortedRowsInFlight = 4;
constexpr int64_t kSortedTileColumns = int64_t{kSortedColumnsPerThread} * kRowThreads;

template <typename A>
__global__ void embedding_backward_sorted_kernel(float* dtable, const A* dx, const int32_t* ids,
                                                 const int32_t* positions, int64_t n, int64_t D) {
  const int64_t first = blockIdx.x;
  const int32_t id = ids[first];
  if (id < 0 || (first > 0 && ids[first - 1] == id)) return;  // uniform across the block
  int64_t end = first + 1;
  for (;;) {
    const int64_t i = end + threadIdx.x;
    const int same = __syncthreads_count(i < n && ids[i] == id);
    end += same;
    if (same < static_cast<int>(blockDim.x)) break;
  }
  const int64_t column0 = static_cast<int64_t>(blockIdx.y) * kSortedTileColumns + threadIdx.x;
  float sum[kSortedColumnsPerThread] = {};
  for (int64_t k = first; k < end; k += kSortedRowsInFlight) {
    const A* source[kSortedRowsInFlight];  // null past the run's end (uniform across the block)
#pragma unroll
    for (int r = 0; r < kSortedRowsInFlight; ++r)
      source[r] = k + r < end ? dx + static_cast<int64_t>(positions[k + r]) * D : nullptr;
    float value[kSortedRowsInFlight][kSortedColumnsPerThread];
#pragma unroll
    for (int r = 0; r < kSortedRowsInFlight; ++r) {
#pragma unroll
      for (int c = 0; c < kSortedColumnsPerThread; ++c) {
        const int64_t d = column0 + int64_t{c} * kRowThreads;
        value[r][c] = source[r] != nullptr && d < D ? load(source[r], d) : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < kSortedRowsInFlight; ++r) {
      if (source[r] == nullptr) break;
#pragma unroll
      for (int c = 0; c < kSortedColumnsPerThread; ++c) sum[c] += value[r][c];
    }
  }
  float* row = dtable + static_cast<int64_t>(id) * D;
#pragma unroll
  for (int c = 0; c < kSortedColumnsPerThread; ++c) {
    const int64_t d = column0 + int64_t{c} * kRowThreads;
    if (d < D) row[d] += sum[c];
  }
}

// The four arrays of n int32 (keys and positions, each double-buffered) and CUB's temporary
// storage, in that order, each aligned.
struct SortLayout {
  size_t array_bytes = 0, temp_bytes = 0;
  size_t total() const { return 4 * array_bytes + temp_bytes; }
};

SortLayout sort_layout(int64_t n) {
  ZT_CHECK(n > 0 && n <= INT_MAX,
           "embedding backward: " + std::to_string(n) + " positions do not fit CUB's int count");
  SortLayout layout;
  layout.array_bytes = sort_aligned(static_cast<size_t>(n) * sizeof(int32_t));
  cub::DoubleBuffer<int32_t> keys(nullptr, nullptr), positions(nullptr, nullptr);
  size_t temp = 0;
  ZT_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, positions, static_cast<int>(n)));
  layout.temp_bytes = sort_aligned(temp);
  return layout;
}

}  // namespace

size_t embedding_sort_scratch_bytes(int64_t n) {
  return n > 0 ? sort_layout(n).total() : 0;
}

void launch_embedding_backward_sorted(float* dtable, ConstTensorView dx, const int32_t* tokens,
                                      int64_t n, int64_t D, void* scratch, size_t scratch_bytes,
                                      cudaStream_t stream) {
  if (n == 0 || D == 0) return;
  const SortLayout layout = sort_layout(n);
  ZT_CHECK(
      scratch_bytes >= layout.total() && reinterpret_cast<uintptr_t>(scratch) % kSortAlignment == 0,
      "embedding backward: the sort needs " + std::to_string(layout.total()) +
          " bytes of aligned scratch, was given " + std::to_string(scratch_bytes));
  auto* base = static_cast<unsigned char*>(scratch);
  auto array = [&](int i) { return reinterpret_cast<int32_t*>(base + i * layout.array_bytes); };
  ZT_CUDA_CHECK(cudaMemcpyAsync(array(0), tokens, static_cast<size_t>(n) * sizeof(int32_t),
                                cudaMemcpyDeviceToDevice, stream));
  embedding_positions_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(array(2),
                                                                                        n);
  ZT_CUDA_CHECK_LAUNCH("embedding_positions_kernel");
  cub::DoubleBuffer<int32_t> keys(array(0), array(1)), positions(array(2), array(3));
  size_t temp_bytes = layout.temp_bytes;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      base + 4 * layout.array_bytes, temp_bytes, keys, positions, static_cast<int>(n), 0,
      static_cast<int>(sizeof(int32_t) * CHAR_BIT), stream));
  with_storage(dx.dtype, "embedding_backward dx", [&](auto tag) {
    using A = std::remove_pointer_t<decltype(tag)>;
    const dim3 grid(static_cast<unsigned>(n),
                    static_cast<unsigned>((D + kSortedTileColumns - 1) / kSortedTileColumns));
    embedding_backward_sorted_kernel<<<grid, kRowThreads, 0, stream>>>(
        dtable, typed<A>(dx), keys.Current(), positions.Current(), n, D);
  });
  ZT_CUDA_CHECK_LAUNCH("embedding_backward_sorted_kernel");
}

}  // namespace zt::cuda
