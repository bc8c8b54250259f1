// The NVMe optimizer swapper (engine/offload/nvme_swapper.h) on a directory: GB/s of its own reads
// and writes, and how much of the swap the CPU Adam hides. Three timed passes over the same state:
//   initialize   writes every tile record once (write GB/s);
//   swap only    update_tiles with an empty update: each tile read and written back (GB/s);
//   swap + Adam  update_tiles running the CPU AdamW kernel on each tile, next to the same kernel
//                over host-resident tiles (the compute alone): with the reads of tile k+1
//                and the write of tile k-1 overlapping tile k's update, the combined pass
//                approaches max(swap, Adam) rather than their sum.
// Usage: bench_nvme_swapper DIR [state MiB = 1024] [tile elements = 16777216] [buffers = 4]
// Compare with `bench/bench_nvme_io.sh DIR` (dd O_DIRECT) on the same directory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/cpu_adam.h"
#include "comm/mpi_communicator.h"
#include "engine/offload/nvme_swapper.h"
#include "runtime/mpi_runtime.h"
#include "util/error.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double gb_per_s(uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [state MiB] [tile elements] [buffers]\n", argv[0]);
    return 2;
  }
  try {
    zt::MpiRuntime mpi(&argc, &argv);
    zt::MpiCommunicator comm(MPI_COMM_WORLD);
    const std::string dir = argv[1];
    const double mib = argc > 2 ? std::atof(argv[2]) : 1024.0;
    const int64_t tile = argc > 3 ? static_cast<int64_t>(std::atof(argv[3])) : int64_t{1} << 24;
    const int buffers = argc > 4 ? std::atoi(argv[4]) : 4;
    // 12 bytes of state per element (fp32 master, m, v), one group.
    const int64_t n = static_cast<int64_t>(mib * 1024 * 1024 / 12);
    ZT_CHECK(n > 0 && tile > 0 && buffers >= 2, "bad arguments");
    const std::vector<int64_t> own_sizes{n};
    zt::MemoryTracker memory;
    auto store = zt::make_nvme_state_store(own_sizes, tile, buffers, dir, comm, memory);
    std::vector<float> master(static_cast<size_t>(n), 0.5f), grads(static_cast<size_t>(n), 1e-3f);
    std::vector<zt::bf16_t> out(static_cast<size_t>(tile));
    const uint64_t file_bytes = memory.peak(zt::MemCategory::kNvme);
    std::printf(
        "nvme swapper on %s: %.0f MiB of state (%lld elements), file %.1f MiB, tile %lld "
        "elements, %d buffers\n",
        dir.c_str(), mib, static_cast<long long>(n), file_bytes / 1048576.0,
        static_cast<long long>(tile), buffers);

    auto t0 = Clock::now();
    store->initialize(0, master.data());
    const double init_s = seconds_since(t0);
    std::printf("initialize (write):      %7.3f s  %6.2f GB/s\n", init_s,
                gb_per_s(file_bytes, init_s));

    t0 = Clock::now();
    store->update_tiles([](const zt::StateTile&) {});
    const double swap_s = seconds_since(t0);
    std::printf("swap only (read+write):  %7.3f s  %6.2f GB/s each way\n", swap_s,
                gb_per_s(file_bytes, swap_s));

    const zt::cpu::AdamSimd path = zt::cpu::best_adam_simd();
    zt::AdamWHyper h;
    auto adam_on = [&](const zt::StateTile& t) {
      zt::cpu::adam_update(path, t.master, t.m, t.v, grads.data() + t.begin, out.data(), nullptr,
                           t.count, h);
    };
    t0 = Clock::now();
    store->update_tiles(adam_on);
    const double both_s = seconds_since(t0);

    // The same kernel over host-resident tiles: the compute alone.
    std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    t0 = Clock::now();
    for (const zt::StateTile& plan : zt::plan_tiles(own_sizes, tile)) {
      zt::StateTile t = plan;
      t.master = master.data() + t.begin;
      t.m = m.data() + t.begin;
      t.v = v.data() + t.begin;
      adam_on(t);
    }
    const double adam_s = seconds_since(t0);
    std::printf("CPU Adam alone (host):   %7.3f s\n", adam_s);
    std::printf(
        "swap + Adam:             %7.3f s  (no overlap would take %.3f s, full overlap "
        "%.3f s)\n",
        both_s, swap_s + adam_s, std::max(swap_s, adam_s));
    std::printf("swapper traffic: %.1f MiB read, %.1f MiB written\n",
                store->bytes_read() / 1048576.0, store->bytes_written() / 1048576.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nvme_swapper: %s\n", e.what());
    return 1;
  }
}
