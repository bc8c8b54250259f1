// DeviceArena: the CUDA backend's scratch memory. One cudaMalloc per category, sized once at
// construction (no managed memory, no allocation while training); inside a category, bump
// allocation (BumpRegion) that an ArenaScope rolls back when an op returns. Ops run in stream
// order on one stream, so the next op may reuse the bytes while the previous op's kernels are
// still queued.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "backend/device_arena_plan.h"

namespace zt::cuda {

enum class ScratchCategory { kGemmWorkspace, kAttention, kReduction };
constexpr int kNumScratchCategories = 3;
const char* scratch_category_name(ScratchCategory category);

class DeviceArena {
 public:
  // bytes[c] for each category (0 allowed: that category allocates nothing).
  explicit DeviceArena(const std::array<size_t, kNumScratchCategories>& bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A block of `count` T's, aligned to kArenaAlignment; throws zt::Error when it does not fit.
  template <typename T>
  T* allocate(ScratchCategory category, size_t count) {
    return static_cast<T*>(allocate_bytes(category, count * sizeof(T)));
  }
  void* allocate_bytes(ScratchCategory category, size_t bytes);

  // The whole category as one block (cuBLASLt's workspace).
  void* base(ScratchCategory category) const { return slots_[index(category)].base; }
  const BumpRegion& region(ScratchCategory category) const {
    return slots_[index(category)].region;
  }

 private:
  friend class ArenaScope;
  static size_t index(ScratchCategory category) { return static_cast<size_t>(category); }
  struct Slot {
    BumpRegion region;
    void* base = nullptr;
  };
  std::array<Slot, kNumScratchCategories> slots_;
};

// Restores every category to its top at construction when destroyed.
class ArenaScope {
 public:
  explicit ArenaScope(DeviceArena& arena);
  ~ArenaScope();
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  DeviceArena& arena_;
  std::array<size_t, kNumScratchCategories> marks_{};
};

}  // namespace zt::cuda
