// The delayed parameter update (--offload-optimizer-delay 1, engine/offload/offload_config.h), at
// the world size the binary is launched with (1, 2, 4), against a reference that applies delayed
// updates explicitly: an engine without the delay whose working params are set before each step
// to the weights of two updates back (its masters set to those, the working params rebuilt from
// them, the masters put back), so that its step t computes the gradients on the weights after
// update t - 2 and applies them to the weights after update t - 1. Checked:
//   - with CPU optimizer offload (the update on a host thread while the next step computes) at
//     stages 1-3, and without offload (the same update held back synchronously) at stages 0-3,
//     every loss and the final fp32 masters equal those of the reference at the same stage bit
//     for bit (bf16 working params, clipping active, two warm-up steps without the delay);
//   - so do a partly frozen group, tied embeddings with persistent parameters at stage 3, fp16
//     with overflowing (skipped) steps after the warm-up, and an eval pass after the last step
//     (which applies the held-back update); the learning rate changes from step to step;
//   - the delay changes the run (the losses differ from the run without it);
//   - a checkpoint applies the held-back update: training on after the save, resuming from it in
//     a new engine and the reference with the update applied there all agree bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "shared_dir_test.h"

namespace zt {
namespace {

using engine_test::EngineOptions;
using engine_test::Masters;
using engine_test::TestEngine;

constexpr int64_t kAccum = 2;
constexpr int kSteps = 6;
constexpr int64_t kWarmup = 2;  // delay_after
constexpr float kLr = 2e-3f;

// A step's learning rate: varying, so that an update applied with another step's rate shows.
float lr_at(int step) {
  return kLr * static_cast<float>(1 + step % 3) / 2.0f;
}

EngineOptions options(int stage, bool offload, bool delayed, EngineOptions o = {}) {
  o.stage = stage;
  if (o.precision == Precision::kFp32) o.precision = Precision::kBf16;
  o.bucket = 20'000;
  if (offload) {
    o.offload.optimizer = OffloadDevice::kCpu;
    o.offload.sub_group_size = 3000;  // several tiles per group
  }
  o.offload.delay = delayed ? 1 : 0;
  o.offload.delay_after = kWarmup;
  return o;
}

// Every group's own range of the fp32 masters (collective in nothing: each rank its own).
std::vector<std::vector<float>> own_masters(ZeroEngine& e) {
  return engine_test::own_state(e).master;
}

void set_own_masters(ZeroEngine& e, const std::vector<std::vector<float>>& values) {
  for (int g = 0; g < static_cast<int>(values.size()); ++g) {
    const OptimizerShard s = e.optimizer_shard(g);
    if (!values[static_cast<size_t>(g)].empty())  // an empty own range has no pointer to copy
      std::memcpy(s.master, values[static_cast<size_t>(g)].data(),
                  values[static_cast<size_t>(g)].size() * sizeof(float));
    e.release_optimizer_shard(g, /*modified=*/true);
  }
}

// The reference: delayed updates applied explicitly on an engine without the delay. When the
// step before updated (not an fp16 skip), after the warm-up, and its update was not applied at
// once (a save after it, `applied_after`), this step computes on the weights before that update.
class ExplicitDelay {
 public:
  ExplicitDelay(Communicator& comm, const EngineOptions& o, int applied_after = -1)
      : engine_(comm, o), applied_after_(applied_after) {
    engine_.init();
  }
  std::vector<double> train(int first, int last) {
    std::vector<double> losses;
    for (int t = first; t <= last; ++t) {
      std::vector<std::vector<float>> current = own_masters(engine_.engine());
      if (last_update_held_) {
        set_own_masters(engine_.engine(), before_last_update_);
        engine_.engine().refresh_working_params();   // the weights before the last update
        set_own_masters(engine_.engine(), current);  // the masters after it
      } else {
        // Every update so far (after a skipped step the last step's working params are stale).
        engine_.engine().refresh_working_params();
      }
      const StepStats st = engine_.step(t, kAccum, lr_at(t));
      losses.push_back(st.loss);
      skipped_ += st.skipped && last_update_held_ ? 1 : 0;
      last_update_held_ = !st.skipped && t > kWarmup && t != applied_after_;
      before_last_update_ = std::move(current);
    }
    return losses;
  }
  Masters masters() { return engine_test::rank0_masters(engine_.engine()); }
  // An eval pass sees every update so far: the working params of the masters.
  double eval(int step) {
    engine_.engine().refresh_working_params();
    return eval_loss(engine_, step);
  }
  // Skipped steps that came right after an update held back (the delayed engine publishes it).
  int skipped_after_held_update() const { return skipped_; }

  static double eval_loss(TestEngine& e, int step) {
    const engine_test::StepBatches b(step, 1, 2, 1, 0, 16, e.engine().model().config().vocab_size);
    return e.engine().eval_loss_sum(b.input_ptrs[0], b.target_ptrs[0], nullptr);
  }

 private:
  TestEngine engine_;
  int applied_after_;
  bool last_update_held_ = false;
  int skipped_ = 0;
  std::vector<std::vector<float>> before_last_update_;
};

std::vector<double> train(TestEngine& e, int first, int last) {
  std::vector<double> losses;
  for (int t = first; t <= last; ++t) losses.push_back(e.step(t, kAccum, lr_at(t)).loss);
  return losses;
}

Masters final_masters(TestEngine& e) {
  e.engine().apply_delayed_update();
  return engine_test::rank0_masters(e.engine());
}

void expect_same(const std::vector<double>& losses, const Masters& masters,
                 const std::vector<double>& ref_losses, const Masters& ref_masters,
                 const std::string& what) {
  ASSERT_EQ(losses.size(), ref_losses.size()) << what;
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&losses[i], &ref_losses[i], sizeof(double)), 0)
        << what << ": loss " << i << " " << losses[i] << " vs " << ref_losses[i];
  ASSERT_EQ(masters.size(), ref_masters.size()) << what;
  for (const auto& [name, values] : ref_masters)
    EXPECT_EQ(std::memcmp(masters.at(name).data(), values.data(), values.size() * sizeof(float)), 0)
        << what << ": master " << name << " differs";
}

class DelayedUpdateTest : public engine_test::SharedDirTest {
 protected:
  const char* dir_prefix() const override { return "zt_delayed_update_"; }
};

// The delayed engine (with and without CPU offload) against the reference at the same stage:
// every loss, the final masters, and an eval pass after the last step.
void expect_matches_reference(Communicator& world, int stage, const EngineOptions& base,
                              const std::string& variant, int steps = kSteps) {
  ExplicitDelay reference(world, options(stage, false, false, base));
  const std::vector<double> ref_losses = reference.train(1, steps);
  const double ref_eval = reference.eval(steps + 1);
  const Masters ref_masters = reference.masters();
  for (const bool offload : {false, true}) {
    if (offload && stage == 0) continue;  // optimizer offload needs a sharded optimizer
    const std::string what = variant + (offload ? ", CPU offload" : ", no offload") + " at stage " +
                             std::to_string(stage);
    TestEngine delayed(world, options(stage, offload, true, base));
    delayed.init();
    const std::vector<double> losses = train(delayed, 1, steps);
    const double eval = ExplicitDelay::eval_loss(delayed, steps + 1);  // applies the update
    EXPECT_EQ(std::memcmp(&eval, &ref_eval, sizeof(double)), 0) << what << ": eval pass";
    expect_same(losses, final_masters(delayed), ref_losses, ref_masters, what);
  }
}

TEST_F(DelayedUpdateTest, EqualsExplicitlyDelayedUpdatesBitwise) {
  for (int stage = 0; stage <= 3; ++stage) expect_matches_reference(world_, stage, {}, "bf16");
  // A partly frozen group (publish rounds whole tiles of masters; the held buffer copies the
  // trained segments only), and tied embeddings with persistent parameters at stage 3.
  EngineOptions frozen;
  frozen.freeze = {"model.layers.0.self_attn.q_proj.weight"};
  expect_matches_reference(world_, 2, frozen, "q_proj of layer 0 frozen");
  EngineOptions tied;
  tied.tied = true;
  tied.persistence = 100'000;
  expect_matches_reference(world_, 3, tied, "tied embeddings, persistent parameters");
  // The delay is visible: without it the losses after the warm-up differ.
  ExplicitDelay delayed_reference(world_, options(2, false, false));
  const std::vector<double> ref_losses = delayed_reference.train(1, kSteps);
  TestEngine plain(world_, options(2, true, false));
  plain.init();
  const std::vector<double> undelayed = train(plain, 1, kSteps);
  EXPECT_EQ(std::memcmp(undelayed.data(), ref_losses.data(), (kWarmup + 1) * sizeof(double)), 0)
      << "the steps before the first delayed gradient differ";
  EXPECT_NE(std::memcmp(undelayed.data(), ref_losses.data(), kSteps * sizeof(double)), 0)
      << "the delay changes nothing";
}

// fp16 with overflowing steps: a skipped step publishes the update held back and starts none.
TEST_F(DelayedUpdateTest, Fp16SkipsEqualExplicitlyDelayedUpdatesBitwise) {
  const EngineOptions fp16 = engine_test::overflowing_fp16_options();
  constexpr int kFp16Steps = 10;  // the scale doubles every 2 good steps: overflows come back
  ExplicitDelay probe(world_, options(2, false, false, fp16));
  probe.train(1, kFp16Steps);
  ASSERT_GT(probe.skipped_after_held_update(), 0) << "no step overflowed after a held update";
  expect_matches_reference(world_, 2, fp16, "fp16 with skips", kFp16Steps);
}

TEST_F(DelayedUpdateTest, ACheckpointAppliesTheHeldBackUpdateAndResumesBitwise) {
  constexpr int kSave = kWarmup + 2;  // a step whose update is held back
  ExplicitDelay reference(world_, options(2, false, false), kSave);
  const std::vector<double> ref_losses = reference.train(1, kSteps);
  const Masters ref_masters = reference.masters();
  for (const bool offload : {true, false}) {
    const std::string what = offload ? "CPU offload" : "no offload";
    SavedCheckpoint saved;
    {
      TestEngine writer(world_, options(2, offload, true));
      writer.init();
      std::vector<double> losses = train(writer, 1, kSave);
      TrainingProgress progress;
      progress.step = kSave;
      saved = engine_test::save_test_checkpoint(
          writer.engine(), progress, options(2, offload, true).optim, kSteps, 2, kAccum, 16,
          (dir_ / (offload ? "ckpt_offload" : "ckpt_plain")).string());
      for (double l : train(writer, kSave + 1, kSteps)) losses.push_back(l);
      expect_same(losses, final_masters(writer), ref_losses, ref_masters,
                  what + ", training on after the save");
    }
    TestEngine resumed(world_, options(2, offload, true));
    load_checkpoint(resumed.engine(), saved.dir);
    const std::vector<double> rest = train(resumed, kSave + 1, kSteps);
    expect_same(rest, final_masters(resumed),
                std::vector<double>(ref_losses.begin() + kSave, ref_losses.end()), ref_masters,
                what + ", resumed from the save");
  }
}

}  // namespace
}  // namespace zt
