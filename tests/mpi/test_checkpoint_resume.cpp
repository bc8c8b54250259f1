// Training checkpoints through the ZeroEngine, at the world size the binary is launched with
// (1, 2, 4): save + fresh engine + load continues bitwise at every stage; with world-invariant
// training a checkpoint written at N ranks / stage s loads into a world of one rank and into the
// full world at another stage and continues bit for bit like the run that wrote it; each rank
// reads only the files that hold its range.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/consolidate.h"
#include "comm/mpi_communicator.h"
#include "engine/lr_schedule.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeq = 16;
constexpr int64_t kMicro = 2;  // per rank of the launched world
constexpr int64_t kAccum = 2;
constexpr int kHalf = 3;  // steps before the checkpoint; as many after it

using engine_test::Masters;

// One engine on `comm` (micro-batches of kMicro sequences, `accum` of them per rank and step)
// plus the bookkeeping a checkpoint needs.
class Trainer {
 public:
  Trainer(Communicator& comm, int stage, Precision precision, int64_t accum = kAccum,
          const AdamWConfig* optim = nullptr, bool world_invariant = false)
      : comm_(comm),
        accum_(accum),
        engine_(comm, options(stage, precision, optim, world_invariant)) {}

  static engine_test::EngineOptions options(int stage, Precision precision,
                                            const AdamWConfig* optim, bool world_invariant) {
    engine_test::EngineOptions o;
    o.stage = stage;
    o.precision = precision;
    o.world_invariant = world_invariant;
    o.bucket = 20'000;  // several buckets: exercises the chunked paths
    o.micro = kMicro;
    o.seq = kSeq;
    if (optim) o.optim = *optim;
    return o;
  }

  ZeroEngine& engine() { return engine_.engine(); }
  engine_test::TestEngine& test_engine() { return engine_; }
  void init() { engine_.init(); }
  static float lr_at(int64_t step) {
    return learning_rate_at(engine_test::EngineOptions{}.optim, step, 2 * kHalf);
  }

  // Trains steps [first, last]; returns their losses.
  std::vector<double> train(int first, int last) {
    std::vector<double> losses;
    for (int step = first; step <= last; ++step) {
      losses.push_back(engine_.step(step, accum_, lr_at(step)).loss);
      progress_.step = step;
      progress_.tokens_seen += accum_ * kMicro * comm_.world_size() * kSeq;
      progress_.cursor.position = step;  // any value: the test checks it comes back
    }
    return losses;
  }

  SavedCheckpoint save(const std::string& root) {
    return engine_test::save_test_checkpoint(engine(), progress_,
                                             engine_test::EngineOptions{}.optim, 2 * kHalf, kMicro,
                                             accum_, kSeq, root);
  }

  // The fp32 masters on rank 0 of comm (empty elsewhere).
  Masters masters() { return engine_test::rank0_masters(engine()); }

  TrainingProgress progress_;

 private:
  Communicator& comm_;
  int64_t accum_;
  engine_test::TestEngine engine_;
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
    Trainer straight(world_, stage, bf16);
    straight.init();
    const std::vector<double> all = straight.train(1, 2 * kHalf);
    const Masters final_masters = straight.masters();

    SavedCheckpoint saved;
    TrainingProgress progress;
    {
      Trainer first(world_, stage, bf16);
      first.init();
      first.train(1, kHalf);
      progress = first.progress_;
      saved = first.save(dir_ + "/bitwise_s" + std::to_string(stage));
    }
    Trainer second(world_, stage, bf16);  // not initialised: the load fills it all
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

// World-invariant training (docs/ARCHITECTURE.md §4): a checkpoint written at N ranks, stage s,
// loads at another world size and stage and continues bit for bit as if the run had never
// stopped. The reference is one rank at stage 0 that trains every step with grad-accum N·A (the
// same micro-batches). Checked against it: the writer's losses before and after the save and its
// final masters; a load into a world of one rank at stage 3 − s; a load into the full world at
// stage s + 1, whose loaded optimizer range also equals a one-rank stage-0 load's.
TEST_F(CheckpointResumeTest, ReshardsBitwiseToOneRankAndToAnotherStage) {
  const Precision fp32 = Precision::kFp32;
  const int64_t leaves = kAccum * N();
  const int next_step = kHalf + 1, last = 2 * kHalf;
  const auto invariant = [&](Communicator& comm, int stage, int64_t accum) {
    return std::make_unique<Trainer>(comm, stage, fp32, accum, nullptr, true);
  };
  const auto reference = invariant(self_, 0, leaves);
  reference->init();
  const std::vector<double> all = reference->train(1, last);
  const std::vector<double> rest(all.begin() + kHalf, all.end());
  const Masters final_masters = reference->masters();  // every rank: its world is itself
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string from = "N=" + std::to_string(N()) + " stage " + std::to_string(stage);
    const auto writer = invariant(world_, stage, kAccum);
    writer->init();
    EXPECT_EQ(writer->train(1, kHalf), std::vector<double>(all.begin(), all.begin() + kHalf))
        << from;
    const SavedCheckpoint saved = writer->save(dir_ + "/reshard_s" + std::to_string(stage));
    EXPECT_EQ(writer->train(next_step, last), rest) << from << ", uninterrupted";
    const Masters written = writer->masters();
    if (root()) {
      EXPECT_TRUE(written == final_masters) << from << ": final masters differ";
    }

    // Into a world of one rank (every rank on its own), at stage 3 − s.
    const std::string alone_what = from + " -> 1 rank stage " + std::to_string(3 - stage);
    const auto alone = invariant(self_, 3 - stage, leaves);
    load_checkpoint(alone->engine(), saved.dir);
    EXPECT_EQ(alone->train(next_step, last), rest) << alone_what;
    EXPECT_TRUE(alone->masters() == final_masters) << alone_what << ": final masters differ";

    // Into the full world at the next stage.
    const int next = (stage + 1) % 4;
    const std::string moved_what = from + " -> stage " + std::to_string(next);
    const auto moved = invariant(world_, next, kAccum);
    load_checkpoint(moved->engine(), saved.dir);
    const auto one_rank = invariant(self_, 0, leaves);
    load_checkpoint(one_rank->engine(), saved.dir);
    engine_test::expect_same_range(moved->test_engine().own_state(),
                                   one_rank->test_engine().own_state(), moved_what);
    EXPECT_EQ(moved->train(next_step, last), rest) << moved_what;
    const Masters moved_masters = moved->masters();
    if (root()) {
      EXPECT_TRUE(moved_masters == final_masters) << moved_what << ": final masters differ";
    }
  }
}

// A master that is NaN on one rank (here: the first element the last rank owns of layer 0's
// group) is never committed: the checkpoint and the consolidated model are refused on every rank,
// naming the tensor, and `latest` still names the last good checkpoint.
TEST_F(CheckpointResumeTest, ANonFiniteMasterIsNeverSaved) {
  const std::string root = dir_ + "/poisoned";
  Trainer t(world_, 3, Precision::kFp32);
  t.init();
  t.train(1, 1);
  const SavedCheckpoint good = t.save(root);
  if (world_.rank() == N() - 1) {
    const OptimizerShard shard = t.engine().optimizer_shard(1);
    shard.master[0] = std::numeric_limits<float>::quiet_NaN();
    t.engine().release_optimizer_shard(1, /*modified=*/true);
  }
  t.progress_.step = 2;
  try {
    t.save(root);
    ADD_FAILURE() << "a checkpoint with a NaN master was saved";
  } catch (const AgreedError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0."), std::string::npos) << e.what();
  }
  try {
    write_consolidated_model(t.engine(), dir_ + "/poisoned_model", world_, {});
    ADD_FAILURE() << "a model with a NaN master was written";
  } catch (const AgreedError& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  world_.barrier();
  std::ifstream latest(root + "/latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(root + "/" + name, good.dir);
  EXPECT_FALSE(fs::exists(root + "/step-00000002"));
  EXPECT_FALSE(fs::exists(dir_ + "/poisoned_model"));
}

TEST_F(CheckpointResumeTest, EachRankReadsOnlyTheFilesHoldingItsRange) {
  Trainer writer(world_, 1, Precision::kBf16);
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
