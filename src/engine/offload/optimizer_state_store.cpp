#include "engine/offload/optimizer_state_store.h"

#include <algorithm>
#include <cstring>

namespace zt {

std::vector<StateTile> plan_tiles(const std::vector<int64_t>& own_sizes, int64_t tile) {
  std::vector<StateTile> tiles;
  for (size_t g = 0; g < own_sizes.size(); ++g)
    for (int64_t b = 0; b < own_sizes[g]; b += tile)
      tiles.push_back({static_cast<int>(g), b, std::min(tile, own_sizes[g] - b)});
  return tiles;
}

namespace {

class HostStateStore final : public OptimizerStateStore {
 public:
  HostStateStore(const std::vector<int64_t>& own_sizes, int64_t tile, MemoryTracker& memory)
      : tiles_(plan_tiles(own_sizes, tile)) {
    for (int64_t n : own_sizes) {
      master_.emplace_back(memory, MemCategory::kHostOffload, static_cast<size_t>(n));
      m_.emplace_back(memory, MemCategory::kHostOffload, static_cast<size_t>(n));
      v_.emplace_back(memory, MemCategory::kHostOffload, static_cast<size_t>(n));
    }
  }
  void initialize(int g, const float* master) override {
    const size_t i = static_cast<size_t>(g);
    std::memcpy(master_[i].data(), master, master_[i].bytes());
    std::memset(m_[i].data(), 0, m_[i].bytes());
    std::memset(v_[i].data(), 0, v_[i].bytes());
  }
  void update_tiles(const std::function<void(const StateTile&)>& fn) override {
    for (StateTile t : tiles_) {
      const size_t i = static_cast<size_t>(t.group);
      t.master = master_[i].data() + t.begin;
      t.m = m_[i].data() + t.begin;
      t.v = v_[i].data() + t.begin;
      fn(t);
    }
  }
  OptimizerShard resident(int g) override {
    const size_t i = static_cast<size_t>(g);
    return {master_[i].data(), m_[i].data(), v_[i].data(), 0,
            static_cast<int64_t>(master_[i].size())};
  }
  void release(int, bool) override {}
  void flush() override {}

 private:
  std::vector<StateTile> tiles_;
  std::vector<TrackedBuffer<float>> master_, m_, v_;
};

}  // namespace

std::unique_ptr<OptimizerStateStore> make_host_state_store(const std::vector<int64_t>& own_sizes,
                                                           int64_t tile, MemoryTracker& memory) {
  return std::make_unique<HostStateStore>(own_sizes, tile, memory);
}

}  // namespace zt
