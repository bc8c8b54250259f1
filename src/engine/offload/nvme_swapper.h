// ZeRO-Infinity optimizer state on NVMe: the rank's fp32 master, Adam m and v live in one file,
// `nvme_path/zerotrain-rankRRRRR-PID.swp`, tile by tile (a tile's record is master|m|v, padded to
// a 4 KiB multiple), and are swapped through `buffer_count` rotating 4 KiB-aligned host buffers
// (kHostOffload); the file's bytes are counted in the kNvme pool. The file is opened with O_DIRECT
// when the filesystem allows it (else buffered, with a warning) and accessed asynchronously
// (async_file_io.h). During update_tiles the reads of the next tiles are in flight while tile k is
// updated, and tile k's write-back overlaps the following updates; a buffer is reused only once its
// write has completed. The file is removed when the store is destroyed (normal end, or an exception
// unwinding the engine). Checkpoints: resident(g) stages a whole group in host memory until
// release(g) (written back only when modified) or flush(); checkpoint save, load, consolidation
// and exports stage one group at a time.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "engine/offload/optimizer_state_store.h"

namespace zt {

// Record bytes of a tile of `count` elements (3 fp32 arrays, rounded up to 4 KiB).
int64_t nvme_record_bytes(int64_t count);
// Bytes of one swap buffer for records of at most `tile` elements.
int64_t nvme_swap_buffer_bytes(int64_t tile);
// Bytes the swap file of these own ranges needs.
int64_t nvme_file_bytes(const std::vector<int64_t>& own_sizes, int64_t tile);

// Checks nvme_path (a writable directory with room for `bytes`) and creates this rank's swap
// file; collective, so that every rank throws (naming the path and the failing rank's reason)
// before training starts when any rank's check fails.
std::unique_ptr<OptimizerStateStore> make_nvme_state_store(const std::vector<int64_t>& own_sizes,
                                                           int64_t tile, int buffer_count,
                                                           const std::string& nvme_path,
                                                           Communicator& comm,
                                                           MemoryTracker& memory);

}  // namespace zt
