// ZeRO-Offload / ZeRO-Infinity on the CPU backend (engine/offload/offload_config.h): every offload
// mode at stages 1-3 reproduces the non-offloaded run bitwise (losses and fp32 masters),
// model-state bytes move from the device pool to the host pool as the accounting says, and NVMe
// faults give clear errors before training (unusable path, too little space) or a clean abort (full
// disk).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/offload/nvme_swapper.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"
#include "support/engine_spec_for.h"
#include "util/error.h"

namespace zt {
namespace {

constexpr int kSteps = 4;
constexpr int64_t kSeq = 16, kMicro = 2, kAccum = 2;
constexpr int64_t kTile = 3000;  // sub_group_size: several tiles per group, ragged last tile

struct Outcome {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> master;  // rank 0
  size_t peak[kNumMemCategories] = {};
  int64_t own_elements = 0;  // Σ own range over groups
  uint64_t nvme_read = 0, nvme_written = 0, nvme_resident = 0;
};

Outcome train(Communicator& comm, int stage, Precision precision, const OffloadConfig& offload) {
  const ModelConfig cfg = preset_config("tiny");
  auto backend = make_cpu_backend();
  MemoryTracker memory;
  ZeroConfig zero;
  zero.stage = stage;
  zero.prefetch_bucket_size = 3 * 50'000;
  zero.param_persistence_threshold = 0;
  EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
  spec.precision = precision;
  spec.offload = offload;
  spec.optim.lr = 2e-3f;
  spec.optim.clip = 0.5f;
  spec.validate(comm.world_size());  // as a command resolves it: a bad offload is refused here
  ZeroEngine engine(spec, *backend, comm, memory);
  engine.init_from_seed(1234);
  Outcome out;
  for (int step = 1; step <= kSteps; ++step) {
    const engine_test::StepBatches batch(step, kAccum, kMicro, comm.world_size(), comm.rank(), kSeq,
                                         cfg.vocab_size);
    const StepStats st = engine.train_step(batch.input_ptrs, batch.target_ptrs, 1e-3f, step);
    out.losses.push_back(st.loss);
    out.nvme_read += st.nvme_read_bytes;
    out.nvme_written += st.nvme_write_bytes;
    out.nvme_resident = st.nvme_resident_bytes;
  }
  for (int c = 0; c < kNumMemCategories; ++c)
    out.peak[c] = memory.peak(static_cast<MemCategory>(c));
  for (int g = 0; g < engine.layout().num_groups(); ++g)
    out.own_elements += engine.partition(g).shard;
  out.master = engine_test::rank0_masters(engine);
  return out;
}

size_t peak(const Outcome& o, MemCategory c) {
  return o.peak[static_cast<int>(c)];
}

void expect_bitwise(const Outcome& got, const Outcome& ref, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&got.losses[i], &ref.losses[i], sizeof(double)), 0)
        << what << " step " << i + 1 << ": " << got.losses[i] << " vs " << ref.losses[i];
  ASSERT_EQ(got.master.size(), ref.master.size()) << what;
  for (const auto& [name, values] : ref.master) {
    const std::vector<float>& mine = got.master.at(name);
    EXPECT_EQ(std::memcmp(mine.data(), values.data(), values.size() * sizeof(float)), 0)
        << what << ": tensor " << name << " differs";
  }
}

class OffloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("zt-offload-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  OffloadConfig nvme() const {
    OffloadConfig o;
    o.optimizer = OffloadDevice::kNvme;
    o.nvme_path = dir_.string();
    o.buffer_count = 3;
    o.sub_group_size = kTile;
    return o;
  }
  bool swap_files_left() const {
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      if (e.path().extension() == ".swp") return true;
    return false;
  }
  MpiCommunicator world_{MPI_COMM_WORLD};
  MpiCommunicator self_{MPI_COMM_SELF};
  std::filesystem::path dir_;
};

TEST_F(OffloadTest, EveryModeMatchesNoOffloadBitwise) {
  for (Precision precision : {Precision::kBf16, Precision::kFp32, Precision::kFp16}) {
    for (int stage = 1; stage <= 3; ++stage) {
      const Outcome ref = train(world_, stage, precision, {});
      EXPECT_GT(peak(ref, MemCategory::kOptimizer), 0u);
      for (const auto& [name, offload] : engine_test::offload_modes(stage, kTile, nvme())) {
        const std::string what =
            name + " stage " + std::to_string(stage) + " " + precision_name(precision);
        const Outcome got = train(world_, stage, precision, offload);
        expect_bitwise(got, ref, what);
        // Device pool: no optimizer state; params and grads as without offload (or params in
        // the host pool too with offload_param).
        EXPECT_EQ(peak(got, MemCategory::kOptimizer), 0u) << what;
        EXPECT_EQ(peak(got, MemCategory::kGrads), peak(ref, MemCategory::kGrads)) << what;
        const size_t elem = dtype_size(working_dtype(precision));
        const size_t own = static_cast<size_t>(got.own_elements);
        const size_t staging = 2 * static_cast<size_t>(kTile) * elem;  // two rotating tiles
        if (offload.param_offloaded()) {
          EXPECT_LT(peak(got, MemCategory::kParams), peak(ref, MemCategory::kParams)) << what;
        } else {
          EXPECT_EQ(peak(got, MemCategory::kParams), peak(ref, MemCategory::kParams)) << what;
        }
        const size_t params_on_host = offload.param_offloaded() ? own * elem : 0;
        if (offload.optimizer == OffloadDevice::kCpu) {
          // 12 bytes/element of state (master, m, v) + 4 of gradient shard + the staging tiles;
          // the exact overlap keeps the state once more, and its speculated working values.
          const size_t kept = offload.keeps_speculated_state() ? (12 + elem) * own : 0;
          EXPECT_EQ(peak(got, MemCategory::kHostOffload),
                    16 * own + kept + staging + params_on_host)
              << what;
          EXPECT_EQ(peak(ref, MemCategory::kOptimizer), 12 * own) << what;
        } else {
          // NVMe: the state is on disk; the host holds gradients, staging and 3 swap buffers.
          const size_t buffers = 3 * static_cast<size_t>(nvme_record_bytes(kTile));
          EXPECT_EQ(peak(got, MemCategory::kHostOffload), 4 * own + staging + buffers) << what;
          EXPECT_GE(got.nvme_resident, 12 * own) << what;
          EXPECT_EQ(got.nvme_read, kSteps * got.nvme_resident) << what;
          EXPECT_EQ(got.nvme_written, kSteps * got.nvme_resident) << what;
        }
      }
      EXPECT_FALSE(swap_files_left()) << "swap files must be removed at the end";
    }
  }
}

TEST_F(OffloadTest, ParamOffloadNeedsStageThreeAndOptimizerOffloadStageOneOrMore) {
  OffloadConfig param;
  param.param = OffloadDevice::kCpu;
  EXPECT_THROW(
      {
        try {
          train(self_, 2, Precision::kBf16, param);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("offload_param"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  OffloadConfig cpu;
  cpu.optimizer = OffloadDevice::kCpu;
  EXPECT_THROW(train(self_, 0, Precision::kBf16, cpu), Error);
}

// Collective check before training: a file instead of a directory, a missing directory, and a
// filesystem reporting too little free space (fault injection) all fail on every rank.
TEST_F(OffloadTest, UnusableNvmePathIsAClearErrorBeforeTraining) {
  const std::string file = (dir_ / "not-a-dir").string();
  std::ofstream(file) << "x";
  auto expect_error = [&](OffloadConfig o, const std::string& needle) {
    try {
      train(world_, 2, Precision::kBf16, o);
      ADD_FAILURE() << "no error for nvme_path '" << o.nvme_path << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  OffloadConfig o = nvme();
  o.nvme_path = file;
  expect_error(o, "is not a directory");
  o.nvme_path = (dir_ / "missing").string();
  expect_error(o, "missing");
  ::setenv("ZT_NVME_FAKE_FREE_BYTES", "4096", 1);
  expect_error(nvme(), "bytes free");
  ::unsetenv("ZT_NVME_FAKE_FREE_BYTES");
  EXPECT_FALSE(swap_files_left());
}

// A real full disk: a 64 KiB tmpfs (skipped where mount is not permitted), with the free-space
// check bypassed so that the writes themselves fail. Each rank uses its own mount.
TEST_F(OffloadTest, FullDiskAbortsCleanly) {
  const std::filesystem::path mnt = dir_ / "tiny";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  ::setenv("ZT_NVME_FAKE_FREE_BYTES", "1000000000000", 1);
  OffloadConfig o = nvme();
  o.nvme_path = mnt.string();
  try {
    train(self_, 1, Precision::kBf16, o);
    ADD_FAILURE() << "a full disk did not stop training";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mnt.string()), std::string::npos) << e.what();
  }
  ::unsetenv("ZT_NVME_FAKE_FREE_BYTES");
  EXPECT_TRUE(std::filesystem::is_empty(mnt)) << "the swap file must be removed";
  ::umount(mnt.c_str());
}

}  // namespace
}  // namespace zt
