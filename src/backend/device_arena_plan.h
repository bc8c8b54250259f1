// Host-side bookkeeping of the CUDA backend's scratch memory, free of CUDA so that CPU-only unit
// tests cover it: bump regions (one per DeviceArena category), free-list regions (one per engine
// memory category, CudaDeviceMemory), and how many attention heads or row chunks a scratch region
// of a given size holds.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "backend/attention_choice.h"

namespace zt::cuda {

// Every allocation starts on this boundary (cudaMalloc's own alignment; cuBLASLt's preferred one).
constexpr size_t kArenaAlignment = 256;

// The CUDA backend's scratch regions as the app sizes them (CudaBackendOptions' defaults): the
// cuBLASLt workspace, the attention scratch's floor (the GEMM attention's T×T matrices; the
// fused path's staging when larger) and the reduction partials (rmsnorm dg, sum of squares; its
// own floor, 1024 doubles and two alignments, is below this).
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
constexpr size_t kAttentionScoreScratchBytes = size_t{512} << 20;
constexpr size_t kReductionScratchBytes = size_t{8} << 20;

// cuDNN's workspace for the fused attention's graphs of `shape` (the backward's is the larger):
//   deterministic   B·H·T² bf16 for dP, B·H·T fp32 (rowsum(dO∘O)), and 256 bytes. cuDNN reports
//                   the figure itself at run time; this formula matched it byte for byte on an
//                   H100 with cuDNN 9 for the 125m and 1b presets at 4 × 2048
//                   (bench/results/2026-11-27-h100) and is a prediction elsewhere.
//   nondeterministic (--deterministic false) the fp32 dQ accumulator, B·H·T·hd, the same B·H·T
//                   fp32 and 256 bytes: the cuDNN frontend's own terms (its sdpa backward node),
//                   a prediction not yet compared with cuDNN's figure on a GPU.
// Both are for the plain causal graphs. The ragged graphs of document masks with GQA (H > Hkv)
// also keep dK and dV per query head in fp32 in the workspace (2·B·T·H·hd·4 bytes, the
// frontend's), which this does not count; CudnnAttention allocates what cuDNN asks either way.
size_t cudnn_attention_workspace_bytes(const AttentionShape& shape, bool deterministic = true);

// The CUDA backend's device scratch outside the memory tracker's categories (metrics.jsonl's
// backend_scratch_bytes) for a micro-batch of `shape` with activations in `storage`: the three
// regions above, the attention scratch sized by attention_scratch_bytes, and cuDNN's workspace
// when the attention is fused (for the backward `deterministic` or not). What `estimate --backend
// cuda` adds to its figures.
size_t cuda_backend_scratch_bytes(const AttentionShape& shape, AttentionKernel kernel,
                                  DType storage, bool deterministic = true);

// Rounds bytes up to a multiple of alignment (a power of two); throws zt::Error on overflow.
size_t align_up(size_t bytes, size_t alignment = kArenaAlignment);

// A bump allocator over [0, capacity): allocate() hands out aligned offsets in order, release_to()
// frees everything allocated after a mark. Errors name the region.
class BumpRegion {
 public:
  BumpRegion(std::string name, size_t capacity);

  // Offset of a new block of `bytes` (aligned); throws zt::Error naming the region, the request,
  // the bytes in use and the capacity when it does not fit. bytes = 0 returns the current top.
  size_t allocate(size_t bytes);
  size_t mark() const { return used_; }
  void release_to(size_t mark);  // mark must come from mark() and be ≤ used()

  const std::string& name() const { return name_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }

 private:
  std::string name_;
  size_t capacity_;
  size_t used_ = 0;
  size_t peak_ = 0;
};

// A first-fit free-list allocator over [0, capacity) for blocks of any lifetime (the engine's
// buffers: one region per memory category): allocate() takes the lowest free range that fits,
// release() returns a block and merges it with its free neighbours. Deterministic: the same
// sequence of calls gives the same offsets.
class FreeListRegion {
 public:
  FreeListRegion(std::string name, size_t capacity);

  // Offset of a new aligned block of `bytes` (≥ 1 alignment unit), or nullopt when no free range
  // holds it.
  std::optional<size_t> allocate(size_t bytes);
  // Returns the block at `offset`; throws zt::Error naming the region for an unknown offset.
  void release(size_t offset);

  const std::string& name() const { return name_; }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t largest_free() const;

 private:
  std::string name_;
  size_t capacity_;
  std::map<size_t, size_t> free_;    // offset → bytes, no two adjacent
  std::map<size_t, size_t> blocks_;  // offset → bytes in use
  size_t used_ = 0;
  size_t peak_ = 0;
};

// Bytes to reserve for a category's arena from its estimated peak: the estimate plus 10% and
// 16 MiB of slack (the estimator is within 10% of measured peaks, not an upper bound), rounded
// to the arena alignment; 0 for an estimate of 0 (no arena: that category never allocates).
size_t arena_reservation_bytes(int64_t estimated_peak);

// Attention scores are T×T fp32 matrices, `matrices_per_head` of them per head (1 forward: the
// probabilities; 2 backward: probabilities and score gradients). The most heads (≤ max_heads)
// whose matrices fit in scratch_bytes; throws zt::Error naming the bytes one head needs when not
// even one fits.
int64_t attention_heads_per_pass(size_t scratch_bytes, int64_t T, int64_t matrices_per_head,
                                 int64_t max_heads);

// Column sums over `rows` rows go in chunks of consecutive rows whose partial sums (one double
// per column per chunk) fit in scratch_bytes: at most kMaxColumnSumChunks chunks of at least
// kMinRowsPerChunk rows. Returns the number of rows per chunk (≥ 1); throws when one chunk's
// partials do not fit. The chunking depends only on (rows, cols, scratch_bytes): deterministic.
constexpr int64_t kMaxColumnSumChunks = 128;
constexpr int64_t kMinRowsPerChunk = 32;
int64_t column_sum_rows_per_chunk(int64_t rows, int64_t cols, size_t scratch_bytes);

}  // namespace zt::cuda
