// Where an offloaded optimizer keeps the rank's fp32 master, Adam m and v: host memory (the
// kHostOffload pool) or NVMe (nvme_swapper.h). Each group's own range is cut into tiles of at
// most `tile` elements (DeepSpeed's sub_group_size); the optimizer visits them in order.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine_types.h"
#include "util/memory.h"

namespace zt {

// Elements [begin, begin+count) of group g's own range (own-range coordinates).
struct StateTile {
  int group = 0;
  int64_t begin = 0, count = 0;
  float *master = nullptr, *m = nullptr, *v = nullptr;
};

// The tiles of every group's own range, group-major.
std::vector<StateTile> plan_tiles(const std::vector<int64_t>& own_sizes, int64_t tile);

class OptimizerStateStore {
 public:
  virtual ~OptimizerStateStore() = default;
  // Initial state of group g: master copied from `master` (own-range size), m = v = 0.
  virtual void initialize(int g, const float* master) = 0;
  // Visits every tile in plan order with its state resident; what fn writes persists.
  virtual void update_tiles(const std::function<void(const StateTile&)>& fn) = 0;
  // Group g's whole state resident in host memory (begin is left 0) until release(g) or flush().
  virtual OptimizerShard resident(int g) = 0;
  // Ends resident(g): writes the group back when the caller modified it (NVMe) and frees its
  // staging, so that callers visiting the groups one by one stage one group at a time.
  virtual void release(int g, bool write_back) = 0;
  // Ends every resident(): writes back what it exposed (NVMe) and frees staging.
  virtual void flush() = 0;
  // NVMe traffic so far and bytes kept on NVMe (0 for host memory).
  virtual uint64_t bytes_read() const { return 0; }
  virtual uint64_t bytes_written() const { return 0; }
  virtual uint64_t bytes_on_nvme() const { return 0; }
};

std::unique_ptr<OptimizerStateStore> make_host_state_store(const std::vector<int64_t>& own_sizes,
                                                           int64_t tile, MemoryTracker& memory);

}  // namespace zt
