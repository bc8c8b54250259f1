#include "backend/device_arena_plan.h"

#include <algorithm>
#include <iterator>
#include <limits>

#include "util/error.h"

namespace zt::cuda {

size_t align_up(size_t bytes, size_t alignment) {
  ZT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
           "align_up: alignment " + std::to_string(alignment) + " is not a power of two");
  ZT_CHECK(bytes <= std::numeric_limits<size_t>::max() - (alignment - 1),
           "align_up: " + std::to_string(bytes) + " bytes overflow");
  return (bytes + alignment - 1) & ~(alignment - 1);
}

BumpRegion::BumpRegion(std::string name, size_t capacity)
    : name_(std::move(name)), capacity_(capacity) {}

size_t BumpRegion::allocate(size_t bytes) {
  const size_t size = align_up(bytes);
  ZT_CHECK(size <= capacity_ - used_,
           "device arena '" + name_ + "': cannot allocate " + std::to_string(bytes) + " bytes (" +
               std::to_string(used_) + " of " + std::to_string(capacity_) +
               " bytes in use); raise its size in CudaBackendOptions");
  const size_t offset = used_;
  used_ += size;
  peak_ = std::max(peak_, used_);
  return offset;
}

void BumpRegion::release_to(size_t mark) {
  ZT_CHECK(mark <= used_, "device arena '" + name_ + "': release to " + std::to_string(mark) +
                              " above the top " + std::to_string(used_));
  used_ = mark;
}

FreeListRegion::FreeListRegion(std::string name, size_t capacity)
    : name_(std::move(name)), capacity_(capacity / kArenaAlignment * kArenaAlignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

std::optional<size_t> FreeListRegion::allocate(size_t bytes) {
  const size_t size = align_up(std::max<size_t>(bytes, 1));
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const size_t offset = it->first, left = it->second - size;
    free_.erase(it);
    if (left > 0) free_[offset + size] = left;
    blocks_[offset] = size;
    used_ += size;
    peak_ = std::max(peak_, used_);
    return offset;
  }
  return std::nullopt;
}

void FreeListRegion::release(size_t offset) {
  auto block = blocks_.find(offset);
  ZT_CHECK(block != blocks_.end(), "device region '" + name_ + "': release of offset " +
                                       std::to_string(offset) + ", which is not a live block");
  size_t begin = offset, size = block->second;
  blocks_.erase(block);
  used_ -= size;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == begin + size) {  // merge with the range after
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // merge with the range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == begin) {
      begin = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[begin] = size;
}

size_t FreeListRegion::largest_free() const {
  size_t largest = 0;
  for (const auto& [offset, bytes] : free_) largest = std::max(largest, bytes);
  return largest;
}

size_t arena_reservation_bytes(int64_t estimated_peak) {
  ZT_CHECK(estimated_peak >= 0,
           "arena reservation: negative estimate " + std::to_string(estimated_peak));
  if (estimated_peak == 0) return 0;
  const auto bytes = static_cast<size_t>(estimated_peak);
  return align_up(bytes + bytes / 10 + (size_t{16} << 20));
}

int64_t attention_heads_per_pass(size_t scratch_bytes, int64_t T, int64_t matrices_per_head,
                                 int64_t max_heads) {
  ZT_CHECK(T > 0 && matrices_per_head > 0 && max_heads > 0,
           "attention_heads_per_pass: T, matrices per head and heads must be positive");
  const size_t matrix_bytes =
      align_up(static_cast<size_t>(T) * static_cast<size_t>(T) * sizeof(float));
  const size_t head_bytes = matrix_bytes * static_cast<size_t>(matrices_per_head);
  const size_t fit = scratch_bytes / head_bytes;
  ZT_CHECK(fit >= 1, "attention: one head at T=" + std::to_string(T) + " needs " +
                         std::to_string(head_bytes) + " bytes of scratch, the arena has " +
                         std::to_string(scratch_bytes) +
                         " (raise CudaBackendOptions::attention_scratch_bytes)");
  return static_cast<int64_t>(std::min<size_t>(fit, static_cast<size_t>(max_heads)));
}

int64_t column_sum_rows_per_chunk(int64_t rows, int64_t cols, size_t scratch_bytes) {
  ZT_CHECK(rows > 0 && cols > 0, "column sums: rows and columns must be positive");
  const size_t chunk_bytes = align_up(static_cast<size_t>(cols) * sizeof(double));
  const int64_t fit = static_cast<int64_t>(scratch_bytes / chunk_bytes);
  ZT_CHECK(fit >= 1, "column sums over " + std::to_string(cols) + " columns need " +
                         std::to_string(chunk_bytes) + " bytes of scratch, the arena has " +
                         std::to_string(scratch_bytes) +
                         " (raise CudaBackendOptions::reduction_scratch_bytes)");
  const int64_t max_chunks = std::min(fit, kMaxColumnSumChunks);
  const int64_t wanted = (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  const int64_t chunks = std::max<int64_t>(1, std::min(wanted, max_chunks));
  return (rows + chunks - 1) / chunks;
}

size_t cudnn_attention_workspace_bytes(const AttentionShape& s, bool deterministic) {
  ZT_CHECK(s.B > 0 && s.H > 0 && s.T > 0 && s.hd > 0,
           "cuDNN workspace: every dimension must be positive, got " + describe(s));
  // B·H·T·(bytes per query row) + 256 in size_t without overflow, a row holding its dP row in bf16
  // (T elements of 2 bytes) or its fp32 dQ accumulator (hd of 4), and its fp32 rowsum (4).
  const auto b = static_cast<size_t>(s.B), h = static_cast<size_t>(s.H),
             t = static_cast<size_t>(s.T);
  const size_t elements = static_cast<size_t>(deterministic ? s.T : s.hd);
  const size_t element_bytes = deterministic ? 2 : 4;
  const size_t max = std::numeric_limits<size_t>::max();
  ZT_CHECK(elements <= (max - 4) / element_bytes,
           "cuDNN workspace of " + describe(s) + " overflows");
  const size_t row = element_bytes * elements + 4;
  ZT_CHECK(b <= max / h && b * h <= max / t && b * h * t <= (max - 256) / row,
           "cuDNN workspace of " + describe(s) + " overflows");
  return b * h * t * row + 256;
}

size_t cuda_backend_scratch_bytes(const AttentionShape& shape, AttentionKernel kernel,
                                  DType storage, bool deterministic) {
  const size_t attention =
      attention_scratch_bytes(shape, kernel, storage, kAttentionScoreScratchBytes, kArenaAlignment);
  const size_t workspace =
      kernel == AttentionKernel::kFused ? cudnn_attention_workspace_bytes(shape, deterministic) : 0;
  const size_t fixed = kGemmWorkspaceBytes + kReductionScratchBytes;
  const size_t max = std::numeric_limits<size_t>::max();
  ZT_CHECK(workspace <= max - fixed && attention <= max - fixed - workspace,
           "CUDA backend scratch of " + describe(shape) + " overflows");
  return fixed + attention + workspace;
}

}  // namespace zt::cuda
