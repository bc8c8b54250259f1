// Exact offload overlap (--offload-optimizer-overlap, engine/offload/offload_config.h), at the
// world size the binary is launched with (1, 2, 4): each group's host AdamW starts during the
// backward, on the hyperparameters of an unclipped, unskipped step, and the optimizer step keeps
// it or undoes it. Against the same engine with the overlap off and against no offload, bit for
// bit (every loss, this rank's masters, m and v after the last step, and an evaluation on the
// working params the last step published):
//   - stages 1-3 (bf16), with clipping that never triggers (every step keeps its speculation),
//     that triggers on every step (every step undoes and redoes it), and that triggers on some
//     steps only (both happen, each where the gradient norm says);
//   - gradient accumulation 1 and 3, tied embeddings with a frozen set, world-invariant mode, fp32
//     working params, parameters offloaded to the host, each kept (no clipping) and redone;
//   - fp16 with overflowing (skipped) steps at stages 1-3: the speculation is undone and nothing
//     applied, the other steps kept (no clipping) or redone;
//   - on the CPU backend every trained element goes to the host thread before the norm;
//   - host memory: the kept state is 12 bytes per element of the rank's shard, the speculated
//     working values 2 or 4 more, and off keeps none;
//     with a limit (overlap_bytes) only the groups that land first and fit are speculated on;
//   - bf16 gradient copies: the rounded gradients the host reads, the bytes, on against off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "util/bf16.h"

namespace zt {
namespace {

using engine_test::EngineOptions;
using engine_test::OwnState;
using engine_test::TestEngine;

constexpr int kSteps = 4;

enum class Offload { kNone, kOverlapOff, kOverlapOn };

EngineOptions with_offload(EngineOptions o, Offload mode) {
  if (mode == Offload::kNone) {
    o.offload = {};
    return o;
  }
  const bool params = o.offload.param_offloaded();
  o.offload = {};
  o.offload.param = params ? OffloadDevice::kCpu : OffloadDevice::kNone;
  o.offload.optimizer = OffloadDevice::kCpu;
  o.offload.sub_group_size = 3000;  // several tiles per group
  o.offload.overlap = mode == Offload::kOverlapOn;
  return o;
}

struct TrainedRun {
  std::vector<double> losses, grad_norms;
  std::vector<int64_t> speculated;       // elements handed to the host thread before the norm
  std::vector<std::string> speculation;  // per step: "kept", "redone" or "" (none, or a skip)
  std::vector<bool> skipped;
  OwnState state;
  double final_eval = 0;  // the working params after the last step: an evaluation's loss sum
  size_t host_offload_peak = 0;
};

TrainedRun train(Communicator& comm, const EngineOptions& o, int64_t accum, int steps = kSteps) {
  TestEngine t(comm, o);
  t.init();
  TrainedRun r;
  for (int step = 1; step <= steps; ++step) {
    const StepStats s = t.step(step, accum, 2e-3f);
    r.losses.push_back(s.loss);
    r.grad_norms.push_back(s.grad_norm);
    r.speculation.push_back(s.host_adam_speculation);
    r.speculated.push_back(s.host_adam_speculated_params);
    r.skipped.push_back(s.skipped);
  }
  r.state = t.own_state();
  r.final_eval = t.eval_loss(steps + 1);
  r.host_offload_peak = t.memory().peak(MemCategory::kHostOffload);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // An empty own range (a small group sharded over many ranks) has no data pointer for memcmp.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void expect_bitwise(const TrainedRun& got, const TrainedRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&got.losses[i], &want.losses[i], sizeof(double)), 0)
        << what << ", step " << i + 1 << ": loss " << got.losses[i] << " vs " << want.losses[i];
  EXPECT_EQ(std::memcmp(&got.final_eval, &want.final_eval, sizeof(double)), 0)
      << what << ": the working params after the last step evaluate to " << got.final_eval << " vs "
      << want.final_eval;
  for (size_t g = 0; g < want.state.master.size(); ++g) {
    EXPECT_TRUE(same_bits(got.state.master[g], want.state.master[g])) << what << ", master " << g;
    EXPECT_TRUE(same_bits(got.state.m[g], want.state.m[g])) << what << ", m " << g;
    EXPECT_TRUE(same_bits(got.state.v[g], want.state.v[g])) << what << ", v " << g;
  }
}

// Overlap on equals overlap off and no offload; returns the overlapped run.
TrainedRun check(Communicator& comm, const EngineOptions& o, int64_t accum, const std::string& what,
                 int steps = kSteps) {
  const TrainedRun none = train(comm, with_offload(o, Offload::kNone), accum, steps);
  const TrainedRun off = train(comm, with_offload(o, Offload::kOverlapOff), accum, steps);
  const TrainedRun on = train(comm, with_offload(o, Offload::kOverlapOn), accum, steps);
  expect_bitwise(off, none, what + ", overlap off against no offload");
  expect_bitwise(on, none, what + ", overlap on against no offload");
  for (const std::string& s : off.speculation) EXPECT_EQ(s, "") << what << ", overlap off";
  // The kept state (master, m and v of the rank's shard) and the speculated working values, on
  // top of what off holds.
  int64_t own = 0;
  for (const auto& master : on.state.master) own += static_cast<int64_t>(master.size());
  const size_t elem = dtype_size(working_dtype(o.precision));
  EXPECT_GE(on.host_offload_peak, off.host_offload_peak + (12 + elem) * static_cast<size_t>(own))
      << what;
  return on;
}

class OffloadOverlapTest : public ::testing::Test {
 protected:
  MpiCommunicator world_{MPI_COMM_WORLD};
};

EngineOptions bf16(int stage, float clip) {
  EngineOptions o;
  o.stage = stage;
  o.precision = Precision::kBf16;
  o.bucket = 20'000;
  o.optim.clip = clip;
  return o;
}

// Every step keeps its speculation, and on the CPU backend (synchronous copies) every trained
// element went to the host thread during the backward.
void expect_all_kept(const TrainedRun& r, const std::string& what) {
  int64_t own = 0;
  for (const auto& master : r.state.master) own += static_cast<int64_t>(master.size());
  for (size_t i = 0; i < r.speculation.size(); ++i) {
    if (r.skipped[i]) continue;
    EXPECT_EQ(r.speculation[i], "kept") << what << ", step " << i + 1;
    EXPECT_GE(r.speculated[i], own) << what << ", step " << i + 1;  // shards: padding counts
  }
}

TEST_F(OffloadOverlapTest, KeepsWhatDoesNotClipAndRedoesWhatDoes) {
  for (int stage = 1; stage <= 3; ++stage) {
    const std::string at = "stage " + std::to_string(stage);
    // Clipping off: every speculation stands.
    expect_all_kept(check(world_, bf16(stage, 0.0f), 2, at + ", no clip"), at);
    // A clip below every norm: every step undoes its speculation and redoes the update.
    for (const std::string& s :
         check(world_, bf16(stage, 1e-6f), 2, at + ", clip always").speculation)
      EXPECT_EQ(s, "redone") << at;
    // A clip between the steps' norms: each step as its own norm says.
    const TrainedRun probe = train(world_, bf16(stage, 0.0f), 2);
    std::vector<double> norms = probe.grad_norms;
    std::sort(norms.begin(), norms.end());
    const float clip = static_cast<float>((norms[1] + norms[2]) / 2);
    const TrainedRun some =
        check(world_, bf16(stage, clip), 2, at + ", clip " + std::to_string(clip));
    int kept = 0, redone = 0;
    for (size_t i = 0; i < some.speculation.size(); ++i) {
      const bool clipped = some.grad_norms[i] > clip;
      EXPECT_EQ(some.speculation[i], clipped ? "redone" : "kept") << at << ", step " << i + 1;
      (clipped ? redone : kept) += 1;
    }
    EXPECT_GT(kept, 0) << at;
    EXPECT_GT(redone, 0) << at;
  }
}

// Each case kept (no clipping) and redone (clipping at 0.5, below these norms).
TEST_F(OffloadOverlapTest, AccumulationTiedFrozenWorldInvariantFp32AndParamOffload) {
  for (float clip : {0.0f, 0.5f}) {
    const std::string c = clip > 0 ? ", clip" : ", no clip";
    for (int64_t accum : {1, 3}) {
      const TrainedRun r =
          check(world_, bf16(2, clip), accum, "accum " + std::to_string(accum) + c);
      if (clip == 0) expect_all_kept(r, "accum " + std::to_string(accum));
    }
    EngineOptions tied = bf16(3, clip);
    tied.tied = true;
    tied.freeze = {"model.layers.0.self_attn.q_proj.weight", "model\\.layers\\.0\\.mlp\\..*"};
    const TrainedRun t = check(world_, tied, 2, "tied, part of layer 0 frozen, stage 3" + c);
    EngineOptions invariant = bf16(2, clip);
    invariant.world_invariant = true;
    const TrainedRun w = check(world_, invariant, 4, "world-invariant, stage 2" + c);
    EngineOptions fp32 = bf16(1, clip);
    fp32.precision = Precision::kFp32;
    const TrainedRun f = check(world_, fp32, 2, "fp32 working params, stage 1" + c);
    EngineOptions on_host = bf16(3, clip);
    on_host.offload.param = OffloadDevice::kCpu;
    const TrainedRun h = check(world_, on_host, 2, "params on the host, stage 3" + c);
    if (clip == 0)
      for (const auto* r : {&t, &w, &f, &h}) expect_all_kept(*r, "no clip");
  }
}

// A limit on the kept state: the last groups (the first to land) are speculated on, the others
// updated after the norm; a limit of 0 keeps nothing and runs the steps as without overlap.
// Bitwise either way.
TEST_F(OffloadOverlapTest, ALimitSpeculatesOnTheGroupsThatLandFirst) {
  const EngineOptions o = with_offload(bf16(2, 0.0f), Offload::kOverlapOn);
  const TrainedRun none = train(world_, bf16(2, 0.0f), 2);
  int64_t own_last = 0, own_all = 0;
  for (const auto& master : none.state.master) own_all += static_cast<int64_t>(master.size());
  own_last = static_cast<int64_t>(none.state.master.back().size());
  // The last group's kept state (12 B) and speculated bf16 working values (2 B) per element.
  for (const int64_t limit : {int64_t{0}, 14 * own_last}) {
    EngineOptions limited = o;
    limited.offload.overlap_bytes = limit;
    TestEngine t(world_, limited);
    t.init();
    std::vector<double> losses;
    for (int step = 1; step <= kSteps; ++step) {
      const StepStats s = t.step(step, 2, 2e-3f);
      losses.push_back(s.loss);
      // Nothing kept (limit 0): the steps run as without overlap.
      EXPECT_EQ(s.host_adam_speculation, limit == 0 ? "" : "kept");
      // Rank-local shards: the limit holds the last group's shard (the padded shard of a group is
      // at least what own_state shows), and nothing below it.
      if (limit == 0) {
        EXPECT_EQ(s.host_adam_speculated_params, 0);
      } else {
        EXPECT_GT(s.host_adam_speculated_params, 0);
        EXPECT_LT(s.host_adam_speculated_params, own_all);
      }
    }
    TrainedRun got;
    got.losses = losses;
    got.state = t.own_state();
    got.final_eval = t.eval_loss(kSteps + 1);
    expect_bitwise(got, none, "overlap limited to " + std::to_string(limit) + " bytes");
    const size_t off_peak =
        train(world_, with_offload(bf16(2, 0.0f), Offload::kOverlapOff), 2).host_offload_peak;
    EXPECT_LE(t.memory().peak(MemCategory::kHostOffload), off_peak + static_cast<size_t>(limit));
  }
}

TEST_F(OffloadOverlapTest, Fp16SkipsUndoTheSpeculation) {
  for (int stage = 1; stage <= 3; ++stage) {
    for (float clip : {0.0f, 0.5f}) {
      EngineOptions o = engine_test::overflowing_fp16_options();
      o.stage = stage;
      o.bucket = 20'000;
      o.optim.clip = clip;
      const std::string what = "fp16, stage " + std::to_string(stage) + (clip > 0 ? ", clip" : "");
      const TrainedRun on = check(world_, o, 2, what, 3 * kSteps);
      int skips = 0;
      for (size_t i = 0; i < on.skipped.size(); ++i) {
        if (!on.skipped[i]) continue;
        ++skips;
        EXPECT_EQ(on.speculation[i], "")
            << what << ": a skipped step applies nothing, step " << i + 1;
      }
      EXPECT_GT(skips, 0) << what << ": the loss scale must overflow at least once";
      EXPECT_LT(skips, 3 * kSteps) << what << ": and some step must update";
      if (clip == 0) expect_all_kept(on, what);
    }
  }
}

// bf16 gradient copies (OffloadConfig::bf16_gradient_copies), stages 1-3:
//   - the host AdamW reads each reduced gradient rounded to bf16, to nearest even: a gradient
//     probe (β1 = 0, no clipping, lr 0: m is the gradient) reads float_to_bf16 of the fp32
//     gradient the engine without offload reduces, element by element;
//   - a step copies half the bytes device→host of fp32 copies (a delayed update's too);
//   - the overlap keeps, undoes and redoes its speculation over them, bit for bit as off, with
//     clipping that never, always and sometimes triggers, and with fp16's skipped steps; and the
//     masters are not fp32 copies' masters.
TEST_F(OffloadOverlapTest, Bf16GradientCopies) {
  // `delayed`: the delayed update from step 2 on (step 1 is its warm-up).
  const auto copies = [](EngineOptions o, Offload mode, bool bf16_copies, bool delayed = false) {
    o = with_offload(o, mode);
    o.offload.bf16_gradient_copies = bf16_copies;
    o.offload.delay = delayed ? 1 : 0;
    o.offload.delay_after = delayed ? 1 : OffloadConfig{}.delay_after;
    return o;
  };
  for (int stage = 1; stage <= 3; ++stage) {
    const std::string at = "stage " + std::to_string(stage);
    EngineOptions probe = bf16(stage, 0.0f);
    probe.optim.beta1 = 0.0f;
    TestEngine none(world_, with_offload(probe, Offload::kNone));
    none.init();
    const std::vector<std::vector<float>> fp32 = none.probe_gradient(1, 2);
    TestEngine host(world_, copies(probe, Offload::kOverlapOn, true));
    host.init();
    const std::vector<std::vector<float>> read = host.probe_gradient(1, 2);
    ASSERT_EQ(read.size(), fp32.size()) << at;
    int64_t rounded = 0;
    for (size_t g = 0; g < fp32.size(); ++g) {
      ASSERT_EQ(read[g].size(), fp32[g].size()) << at << ", group " << g;
      for (size_t e = 0; e < fp32[g].size(); ++e) {
        const float want = bf16_to_float(float_to_bf16(fp32[g][e]));
        ASSERT_EQ(std::memcmp(&read[g][e], &want, sizeof(float)), 0)
            << at << ", group " << g << ", element " << e << ": the host read " << read[g][e]
            << " for the gradient " << fp32[g][e] << " (bf16: " << want << ")";
        rounded += want != fp32[g][e];
      }
    }
    EXPECT_GT(rounded, 0) << at << ": no gradient needed rounding";

    for (const bool delayed : {false, true}) {
      const EngineOptions o = bf16(stage, 0.0f);
      const std::string what = at + (delayed ? ", delayed" : "");
      TestEngine bf16_engine(world_, copies(o, Offload::kOverlapOff, true, delayed));
      TestEngine fp32_engine(world_, copies(o, Offload::kOverlapOff, false, delayed));
      bf16_engine.init();
      fp32_engine.init();
      for (int step = 1; step <= 3; ++step) {
        const StepStats b = bf16_engine.step(step, 2, 2e-3f), f = fp32_engine.step(step, 2, 2e-3f);
        EXPECT_GT(f.offload_d2h_bytes, 0u) << what;
        EXPECT_EQ(2 * b.offload_d2h_bytes, f.offload_d2h_bytes) << what << ", step " << step;
        EXPECT_TRUE(std::isfinite(b.loss)) << what;
        // Step 2 is the first delayed step: it publishes no update (the one it starts runs on).
        EXPECT_EQ(b.host_adam_params == 0, delayed && step == 2) << what << ", step " << step;
      }
    }

    std::vector<double> norms =
        train(world_, copies(bf16(stage, 0.0f), Offload::kOverlapOff, true), 2).grad_norms;
    std::sort(norms.begin(), norms.end());
    for (const float clip : {0.0f, 1e-6f, static_cast<float>((norms[1] + norms[2]) / 2)}) {
      const std::string what = at + ", clip " + std::to_string(clip);
      const TrainedRun off =
          train(world_, copies(bf16(stage, clip), Offload::kOverlapOff, true), 2);
      const TrainedRun on = train(world_, copies(bf16(stage, clip), Offload::kOverlapOn, true), 2);
      expect_bitwise(on, off, what + ", bf16 copies, overlap on against off");
      int kept = 0;
      for (const std::string& s : on.speculation) kept += s == "kept";
      EXPECT_EQ(kept > 0, clip != 1e-6f) << what;
      const TrainedRun fp32_copies =
          train(world_, copies(bf16(stage, clip), Offload::kOverlapOff, false), 2);
      bool masters_differ = false;
      for (size_t g = 0; g < on.state.master.size(); ++g)
        masters_differ |= !same_bits(on.state.master[g], fp32_copies.state.master[g]);
      EXPECT_TRUE(masters_differ) << what << ": the same masters as fp32 copies";
    }
  }
  // fp16 (where auto copies in bf16 too): overflowing steps skip with the overlap on and off, the
  // same bits either way.
  for (int stage : {1, 3}) {
    EngineOptions o = engine_test::overflowing_fp16_options();
    o.stage = stage;
    o.bucket = 20'000;
    o.optim.clip = 0.5f;
    const std::string what = "fp16, bf16 copies, stage " + std::to_string(stage);
    const TrainedRun off = train(world_, copies(o, Offload::kOverlapOff, true), 2, 3 * kSteps);
    const TrainedRun on = train(world_, copies(o, Offload::kOverlapOn, true), 2, 3 * kSteps);
    expect_bitwise(on, off, what + ", overlap on against off");
    const auto skips = std::count(on.skipped.begin(), on.skipped.end(), true);
    EXPECT_GT(skips, 0) << what << ": the loss scale must overflow at least once";
    EXPECT_LT(skips, 3 * kSteps) << what << ": and some step must update";
  }
}

}  // namespace
}  // namespace zt
