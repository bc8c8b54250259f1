// Checkpoints across ZeRO-Offload settings, at the world size the binary is launched with (1, 2,
// 4): a checkpoint saved by an engine with its optimizer state offloaded (cpu, nvme; at stage 3
// also the params on cpu) resumes in an engine without offload, and a checkpoint saved without
// offload resumes in an offloading engine, both continuing bitwise like an uninterrupted run
// without offload (offload itself is bitwise no offload, test_offload.cpp). The writer that
// offloads keeps training after its save, which must not disturb it either. NVMe swap files are
// gone once the engines are.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "engine/lr_schedule.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"
#include "shared_dir_test.h"
#include "support/engine_spec_for.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeq = 16, kMicro = 2, kAccum = 2;
constexpr int kHalf = 2;         // steps before the checkpoint; as many after it
constexpr int64_t kTile = 3000;  // nvme/cpu sub_group_size: several tiles per group
constexpr int kSwapBuffers = 3;

using engine_test::Masters;

// One bf16 engine of the tiny preset on `comm` with the given offload settings.
class Trainer {
 public:
  Trainer(Communicator& comm, int stage, const OffloadConfig& offload)
      : comm_(comm), backend_(make_cpu_backend()) {
    ZeroConfig zero;
    zero.stage = stage;
    zero.reduce_bucket_size = 20'000;
    zero.allgather_bucket_size = 20'000;
    optim_.lr = 2e-3f;
    optim_.weight_decay = 0.1f;
    optim_.clip = 0.5f;
    EngineSpec spec = engine_spec_for(preset_config("tiny"), zero, kMicro, kSeq);
    spec.optim = optim_;
    spec.offload = offload;
    engine_ = std::make_unique<ZeroEngine>(spec, *backend_, comm, memory_);
  }

  ZeroEngine& engine() { return *engine_; }
  MemoryTracker& memory() { return memory_; }
  void init() { engine_->init_from_seed(1234); }

  // Trains steps [first, last]; returns their losses.
  std::vector<double> train(int first, int last) {
    std::vector<double> losses;
    for (int step = first; step <= last; ++step) {
      const engine_test::StepBatches batch(step, kAccum, kMicro, comm_.world_size(), comm_.rank(),
                                           kSeq, engine_->model().config().vocab_size);
      const float lr = learning_rate_at(optim_, step, 2 * kHalf);
      losses.push_back(engine_->train_step(batch.input_ptrs, batch.target_ptrs, lr, step).loss);
      progress_.step = step;
      progress_.tokens_seen += kAccum * kMicro * comm_.world_size() * kSeq;
    }
    return losses;
  }

  SavedCheckpoint save(const std::string& root) {
    return engine_test::save_test_checkpoint(*engine_, progress_, optim_, 2 * kHalf, kMicro, kAccum,
                                             kSeq, root);
  }

  // The fp32 masters on rank 0 of comm (empty elsewhere).
  Masters masters() { return engine_test::rank0_masters(*engine_); }

 private:
  Communicator& comm_;
  std::unique_ptr<Backend> backend_;
  MemoryTracker memory_;
  AdamWConfig optim_;
  std::unique_ptr<ZeroEngine> engine_;
  TrainingProgress progress_;
};

class CheckpointResumeOffloadTest : public engine_test::SharedDirTest {
 protected:
  const char* dir_prefix() const override { return "zt_ckpt_offload_"; }

  // The offload modes at `stage`, by name.
  std::vector<std::pair<std::string, OffloadConfig>> modes(int stage) const {
    return engine_test::offload_modes(stage, kTile, nvme_offload(kSwapBuffers, kTile));
  }
  // Swap files of any rank left in the shared nvme directory (collective).
  bool swap_files_left() {
    world_.barrier();
    double left = 0;
    if (root())
      for (const auto& e : fs::directory_iterator(dir_ / "nvme"))
        if (e.path().extension() == ".swp") left = 1;
    world_.all_reduce_sum_blocking(&left, 1);
    return left > 0;
  }
};

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// Losses of the resumed steps and rank 0's final masters against the uninterrupted run.
void expect_bitwise(const std::vector<double>& losses, const Masters& masters,
                    const std::vector<double>& ref_losses, const Masters& ref_masters, bool root,
                    const std::string& what) {
  EXPECT_TRUE(same_bits(losses, std::vector<double>(ref_losses.begin() + kHalf, ref_losses.end())))
      << what << ": losses of steps " << kHalf + 1 << ".." << 2 * kHalf << " differ";
  if (!root) return;
  ASSERT_EQ(masters.size(), ref_masters.size()) << what;
  for (const auto& [name, values] : ref_masters) {
    const std::vector<float>& got = masters.at(name);
    EXPECT_EQ(std::memcmp(got.data(), values.data(), values.size() * sizeof(float)), 0)
        << what << ": master " << name << " differs";
  }
}

TEST_F(CheckpointResumeOffloadTest, ResumesAcrossOffloadSettingsBitwise) {
  for (int stage = 1; stage <= 3; ++stage) {
    const std::string at = " at stage " + std::to_string(stage);
    // The uninterrupted run without offload, and a checkpoint of its first half.
    std::vector<double> ref_losses;
    Masters ref_masters;
    {
      Trainer straight(world_, stage, {});
      straight.init();
      ref_losses = straight.train(1, 2 * kHalf);
      ref_masters = straight.masters();
    }
    SavedCheckpoint plain;
    {
      Trainer writer(world_, stage, {});
      writer.init();
      writer.train(1, kHalf);
      plain = writer.save((dir_ / ("plain_s" + std::to_string(stage))).string());
    }
    int index = 0;
    for (const auto& [name, offload] : modes(stage)) {
      const bool nvme = offload.optimizer == OffloadDevice::kNvme;
      // Offload -> no offload. The writer trains on after its save.
      SavedCheckpoint saved;
      {
        Trainer writer(world_, stage, offload);
        writer.init();
        writer.train(1, kHalf);
        EXPECT_EQ(swap_files_left(), nvme) << name << at;
        saved = writer.save(
            (dir_ / ("offload_s" + std::to_string(stage) + "_" + std::to_string(index++)))
                .string());
        const std::vector<double> rest = writer.train(kHalf + 1, 2 * kHalf);
        expect_bitwise(rest, writer.masters(), ref_losses, ref_masters, root(),
                       name + at + ", training on after its save");
      }
      {
        Trainer resumed(world_, stage, {});  // not initialised: the load fills it all
        const CheckpointManifest m = load_checkpoint(resumed.engine(), saved.dir);
        EXPECT_EQ(m.progress.step, kHalf);
        const std::vector<double> rest = resumed.train(kHalf + 1, 2 * kHalf);
        expect_bitwise(rest, resumed.masters(), ref_losses, ref_masters, root(),
                       name + " -> no offload" + at);
      }
      // No offload -> offload.
      {
        Trainer resumed(world_, stage, offload);
        load_checkpoint(resumed.engine(), plain.dir);
        const std::vector<double> rest = resumed.train(kHalf + 1, 2 * kHalf);
        expect_bitwise(rest, resumed.masters(), ref_losses, ref_masters, root(),
                       "no offload -> " + name + at);
      }
      EXPECT_FALSE(swap_files_left()) << name << at << ": swap files outlive their engines";
    }
  }
}

// With the optimizer state on NVMe, saving and loading a checkpoint stage one group's state in
// host memory at a time, never the whole state.
TEST_F(CheckpointResumeOffloadTest, NvmeCheckpointStagesOneGroupAtATime) {
  const int N = world_.world_size();
  OffloadConfig nvme;
  for (const auto& [name, mode] : modes(2))
    if (mode.optimizer == OffloadDevice::kNvme) nvme = mode;
  ASSERT_EQ(nvme.optimizer, OffloadDevice::kNvme);
  Trainer writer(world_, 2, nvme);
  writer.init();
  writer.train(1, 1);
  int64_t max_shard = 0, sum_shard = 0;
  for (const GroupInfo& g : writer.engine().layout().groups()) {
    max_shard = std::max(max_shard, (g.numel + N - 1) / N);
    sum_shard += (g.numel + N - 1) / N;
  }
  const size_t one_group = static_cast<size_t>(12 * max_shard);
  ASSERT_LT(2 * one_group, static_cast<size_t>(12 * sum_shard)) << "the test needs >2 groups";
  auto staged_peak = [&](const std::function<void()>& action) {
    const size_t before = writer.memory().current(MemCategory::kHostOffload);
    writer.memory().reset_peaks();
    action();
    EXPECT_EQ(writer.memory().current(MemCategory::kHostOffload), before) << "staging left over";
    return writer.memory().peak(MemCategory::kHostOffload) - before;
  };
  SavedCheckpoint saved;
  const size_t save_peak = staged_peak([&] { saved = writer.save((dir_ / "staging").string()); });
  EXPECT_GT(save_peak, 0u);
  EXPECT_LE(save_peak, one_group) << "save staged more than one group";
  const size_t load_peak = staged_peak([&] { load_checkpoint(writer.engine(), saved.dir); });
  EXPECT_GT(load_peak, 0u);
  EXPECT_LE(load_peak, one_group) << "load staged more than one group";
}

}  // namespace
}  // namespace zt
