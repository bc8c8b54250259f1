#include "backend/cuda/cuda_device_arena.h"

#include <cuda_runtime_api.h>

#include "util/cuda/cuda_check.h"

namespace zt::cuda {

const char* scratch_category_name(ScratchCategory category) {
  switch (category) {
    case ScratchCategory::kGemmWorkspace:
      return "gemm_workspace";
    case ScratchCategory::kAttention:
      return "attention";
    case ScratchCategory::kReduction:
      return "reduction";
  }
  return "unknown";
}

namespace {

BumpRegion region_for(int c, const std::array<size_t, kNumScratchCategories>& bytes) {
  return BumpRegion(scratch_category_name(static_cast<ScratchCategory>(c)),
                    align_up(bytes[static_cast<size_t>(c)]));
}

}  // namespace

DeviceArena::DeviceArena(const std::array<size_t, kNumScratchCategories>& bytes)
    : slots_{Slot{region_for(0, bytes)}, Slot{region_for(1, bytes)}, Slot{region_for(2, bytes)}} {
  static_assert(kNumScratchCategories == 3, "initialise every slot above");
  try {
    for (Slot& slot : slots_) {
      if (slot.region.capacity() > 0) ZT_CUDA_CHECK(cudaMalloc(&slot.base, slot.region.capacity()));
    }
  } catch (...) {
    for (Slot& slot : slots_) cudaFree(slot.base);
    throw;
  }
}

DeviceArena::~DeviceArena() {
  for (Slot& slot : slots_) cudaFree(slot.base);  // errors at teardown are not actionable
}

void* DeviceArena::allocate_bytes(ScratchCategory category, size_t bytes) {
  Slot& slot = slots_[index(category)];
  const size_t offset = slot.region.allocate(bytes);
  return static_cast<char*>(slot.base) + offset;
}

ArenaScope::ArenaScope(DeviceArena& arena) : arena_(arena) {
  for (size_t c = 0; c < marks_.size(); ++c) marks_[c] = arena_.slots_[c].region.mark();
}

ArenaScope::~ArenaScope() {
  for (size_t c = 0; c < marks_.size(); ++c) arena_.slots_[c].region.release_to(marks_[c]);
}

}  // namespace zt::cuda
