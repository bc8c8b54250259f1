// Training checkpoints through the ZeroEngine, at the world size the binary is launched with
// (1, 2, 4): save + fresh engine + load continues bitwise at every stage; a checkpoint written at
// N ranks / stage s loads into a world of one rank and into the full world at another stage and
// continues like an uninterrupted run there (fp32 reduction-order tolerance); each rank reads
// only the files that hold its range.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "io/checkpoint.h"
#include "io/checkpoint_files.h"
#include "model/config.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeq = 16;
constexpr int64_t kMicro = 2;  // per rank of the launched world
constexpr int64_t kAccum = 2;
constexpr int kHalf = 3;  // steps before the checkpoint; as many after it

using engine_test::Masters;

// One engine on `comm` plus the bookkeeping a checkpoint needs.
class Trainer {
 public:
  Trainer(Communicator& comm, int stage, Precision precision, int64_t micro_per_rank)
      : comm_(comm), micro_(micro_per_rank), backend_(make_cpu_backend()) {
    ZeroConfig zero;
    zero.stage = stage;
    zero.reduce_bucket_size = 20'000;  // several buckets: exercises the chunked paths
    zero.allgather_bucket_size = 20'000;
    optim_.lr = 2e-3f;
    optim_.weight_decay = 0.1f;
    optim_.clip = 0.5f;
    engine_ = std::make_unique<ZeroEngine>(preset_config("tiny"), zero, precision, optim_,
                                           *backend_, comm, memory_, micro_per_rank, kSeq,
                                           ActivationCheckpointing{});
  }

  ZeroEngine& engine() { return *engine_; }
  void init() { engine_->init_from_seed(1234); }

  // Trains steps [first, last]; returns their losses.
  std::vector<double> train(int first, int last) {
    std::vector<double> losses;
    for (int step = first; step <= last; ++step) {
      const engine_test::StepBatches batch(step, kAccum, micro_, comm_.world_size(), comm_.rank(),
                                           kSeq, engine_->model().config().vocab_size);
      const float lr = learning_rate_at(optim_, step, 2 * kHalf);
      losses.push_back(engine_->train_step(batch.input_ptrs, batch.target_ptrs, lr, step).loss);
      progress_.step = step;
      progress_.tokens_seen += kAccum * micro_ * comm_.world_size() * kSeq;
      progress_.cursor.position = step;  // any value: the test checks it comes back
    }
    return losses;
  }

  SavedCheckpoint save(const std::string& root) {
    return engine_test::save_test_checkpoint(*engine_, progress_, optim_, 2 * kHalf, micro_, kAccum,
                                             kSeq, root);
  }

  // The fp32 masters on rank 0 of comm (empty elsewhere).
  Masters masters() { return engine_test::rank0_masters(*engine_); }

  TrainingProgress progress_;

 private:
  Communicator& comm_;
  int64_t micro_;
  std::unique_ptr<Backend> backend_;
  MemoryTracker memory_;
  AdamWConfig optim_;
  std::unique_ptr<ZeroEngine> engine_;
};

class CheckpointResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory for all ranks: rank 0's pid names it.
    int64_t pid = getpid();
    world_.broadcast_blocking(&pid, 1, 0);
    dir_ = (fs::temp_directory_path() / ("zt_ckpt_mpi_" + std::to_string(pid))).string();
  }
  void TearDown() override {
    world_.barrier();
    if (world_.rank() == 0) fs::remove_all(dir_);
    world_.barrier();
  }
  int N() const { return world_.world_size(); }
  bool root() const { return world_.rank() == 0; }

  MpiCommunicator world_{MPI_COMM_WORLD};
  MpiCommunicator self_{MPI_COMM_SELF};
  std::string dir_;
};

// bf16 working params: the load must also reproduce their rounding from the masters.
TEST_F(CheckpointResumeTest, SaveLoadContinuesBitwiseAtEveryStage) {
  const Precision bf16 = Precision::kBf16;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string what = "stage " + std::to_string(stage);
    Trainer straight(world_, stage, bf16, kMicro);
    straight.init();
    const std::vector<double> all = straight.train(1, 2 * kHalf);
    const Masters final_masters = straight.masters();

    SavedCheckpoint saved;
    TrainingProgress progress;
    {
      Trainer first(world_, stage, bf16, kMicro);
      first.init();
      first.train(1, kHalf);
      progress = first.progress_;
      saved = first.save(dir_ + "/bitwise_s" + std::to_string(stage));
    }
    Trainer second(world_, stage, bf16, kMicro);  // not initialised: the load fills it all
    const CheckpointManifest m = load_checkpoint(second.engine(), saved.dir);
    EXPECT_EQ(m.progress.step, kHalf) << what;
    EXPECT_EQ(m.progress.tokens_seen, progress.tokens_seen) << what;
    EXPECT_EQ(m.progress.cursor, progress.cursor) << what;
    EXPECT_EQ(m.world_size, N()) << what;
    EXPECT_EQ(m.zero_stage, stage) << what;
    const std::vector<double> rest = second.train(kHalf + 1, 2 * kHalf);
    EXPECT_EQ(rest, std::vector<double>(all.begin() + kHalf, all.end())) << what;
    const Masters resumed = second.masters();
    if (root()) {
      ASSERT_EQ(resumed.size(), final_masters.size()) << what;
      EXPECT_TRUE(resumed == final_masters) << what << ": final masters differ";
    }
  }
}

double max_abs_diff(const Masters& a, const Masters& b) {
  double diff = 0;
  for (const auto& [name, values] : b) {
    const std::vector<float>& other = a.at(name);
    for (size_t i = 0; i < values.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::fabs(values[i] - other[i])));
  }
  return diff;
}

// test_zero_engine.cpp's tolerances: losses 2e-6 relative, weights 1e-4 absolute.
void expect_close(const std::vector<double>& got, const std::vector<double>& ref,
                  const Masters& got_masters, const Masters& ref_masters, const std::string& what,
                  bool compare_masters) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], 2e-6 * std::fabs(ref[i])) << what << " step " << kHalf + 1 + i;
  if (!compare_masters) return;
  ASSERT_EQ(got_masters.size(), ref_masters.size()) << what;
  EXPECT_LT(max_abs_diff(got_masters, ref_masters), 1e-4) << what;
}

TEST_F(CheckpointResumeTest, ReshardsToOneRankAndToAnotherStage) {
  const Precision fp32 = Precision::kFp32;
  // Uninterrupted references: a world of one rank, and the launched world (stage 0; the stages
  // agree to this tolerance, test_zero_engine.cpp).
  Trainer one_rank(self_, 0, fp32, kMicro * N());
  one_rank.init();
  const std::vector<double> one_rank_losses = one_rank.train(1, 2 * kHalf);
  const Masters one_rank_masters = one_rank.masters();
  Trainer reference(world_, 0, fp32, kMicro);
  reference.init();
  const std::vector<double> ref_losses = reference.train(1, 2 * kHalf);
  const Masters ref_masters = reference.masters();
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string ckpt_root = dir_ + "/reshard_s" + std::to_string(stage);
    SavedCheckpoint saved;
    {
      Trainer writer(world_, stage, fp32, kMicro);
      writer.init();
      writer.train(1, kHalf);
      saved = writer.save(ckpt_root);
    }
    // Into a world of one rank (every rank on its own), at stage 3 - s.
    const int one_stage = 3 - stage;
    Trainer alone(self_, one_stage, fp32, kMicro * N());
    load_checkpoint(alone.engine(), saved.dir);
    const std::vector<double> alone_losses = alone.train(kHalf + 1, 2 * kHalf);
    expect_close(alone_losses,
                 std::vector<double>(one_rank_losses.begin() + kHalf, one_rank_losses.end()),
                 alone.masters(), one_rank_masters,
                 "N=" + std::to_string(N()) + " stage " + std::to_string(stage) +
                     " -> 1 rank stage " + std::to_string(one_stage),
                 true);
    // Into the full world at the next stage.
    const int next = (stage + 1) % 4;
    Trainer moved(world_, next, fp32, kMicro);
    load_checkpoint(moved.engine(), saved.dir);
    const std::vector<double> moved_losses = moved.train(kHalf + 1, 2 * kHalf);
    expect_close(moved_losses, std::vector<double>(ref_losses.begin() + kHalf, ref_losses.end()),
                 moved.masters(), ref_masters,
                 "N=" + std::to_string(N()) + " stage " + std::to_string(stage) + " -> stage " +
                     std::to_string(next),
                 root());
  }
}

TEST_F(CheckpointResumeTest, EachRankReadsOnlyTheFilesHoldingItsRange) {
  Trainer writer(world_, 1, Precision::kBf16, kMicro);
  writer.init();
  writer.train(1, 1);
  const SavedCheckpoint saved = writer.save(dir_ + "/ranges");
  const CheckpointManifest m = CheckpointManifest::read(saved.dir);
  ASSERT_EQ(m.files.size(), static_cast<size_t>(N()));
  // This rank's own slice of every group lives in its own file only.
  CheckpointRangeReader own(saved.dir, m);
  std::vector<float> buf;
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const ElementRange r = m.groups[g].ranges[static_cast<size_t>(world_.rank())];
    buf.resize(static_cast<size_t>(r.count));
    own.read(static_cast<int>(g), OptimizerTensor::kAdamV, r, buf.data());
  }
  EXPECT_EQ(own.files_opened(), std::vector<int>{world_.rank()});
  // A range straddling two ranks' slices opens exactly those two files.
  if (N() >= 2) {
    const CheckpointGroup& g0 = m.groups[0];
    CheckpointRangeReader straddle(saved.dir, m);
    buf.resize(2);
    straddle.read(0, OptimizerTensor::kMaster, {g0.ranges[1].begin - 1, 2}, buf.data());
    EXPECT_EQ(straddle.files_opened(), (std::vector<int>{0, 1}));
  }
}

}  // namespace
}  // namespace zt
