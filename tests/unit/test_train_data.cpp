// Training data order (WindowSchedule / WindowSampler), eval windows and the LR schedule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "engine/lr_schedule.h"
#include "engine/zero_config.h"
#include "io/data_loader.h"
#include "io/token_dataset.h"
#include "support/error_text.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {
namespace {

// All windows of one step as the union over ranks and micro-batches, in position order.
std::vector<int64_t> step_union(WindowSchedule& s, int world) {
  const int64_t per_slot = s.global_batch_windows();
  std::vector<int64_t> positions(static_cast<size_t>(per_slot), -1);
  // Recover each window's slot from the documented mapping: rank r, micro m, element b sits at
  // position (m·N + r)·B + b.
  int64_t B = 0, A = 0;
  for (int r = 0; r < world; ++r) {
    const auto micro = s.rank_windows(r);
    A = static_cast<int64_t>(micro.size());
    for (size_t m = 0; m < micro.size(); ++m) {
      B = static_cast<int64_t>(micro[m].size());
      for (size_t b = 0; b < micro[m].size(); ++b) {
        const int64_t p = (static_cast<int64_t>(m) * world + r) * B + static_cast<int64_t>(b);
        EXPECT_EQ(positions[static_cast<size_t>(p)], -1);
        positions[static_cast<size_t>(p)] = micro[m][b];
      }
    }
  }
  EXPECT_EQ(A * B * world, per_slot);
  return positions;
}

TEST(TrainData, EpochPermutationIsADeterministicPermutation) {
  const auto p = epoch_permutation(1000, 7, 0);
  EXPECT_EQ(p, epoch_permutation(1000, 7, 0));
  EXPECT_NE(p, epoch_permutation(1000, 7, 1));
  EXPECT_NE(p, epoch_permutation(1000, 8, 0));
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[static_cast<size_t>(i)], i);
  // Golden values pin the generator: the order must not depend on the platform's library.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ull);
}

TEST(TrainData, GlobalBatchIsIndependentOfWorldSize) {
  // Global batch of 8 windows: (B, A, N) = (8,1,1), (4,2,1), (2,2,2), (1,2,4), (2,1,4).
  const int64_t n_tokens = 1000, T = 16;  // W = 62 windows: batches straddle epochs
  struct Shape {
    int64_t B, A;
    int N;
  };
  const std::vector<Shape> shapes = {{8, 1, 1}, {4, 2, 1}, {2, 2, 2}, {1, 2, 4}, {2, 1, 4}};
  std::vector<std::vector<int64_t>> reference;
  for (const Shape& sh : shapes) {
    WindowSchedule s(n_tokens, T, sh.B, sh.A, sh.N, 42);
    EXPECT_EQ(s.num_windows(), 62);
    std::vector<std::vector<int64_t>> steps;
    for (int step = 0; step < 20; ++step) {
      auto u = step_union(s, sh.N);
      EXPECT_EQ(u, s.global_windows());
      steps.push_back(u);
      s.advance();
    }
    if (reference.empty()) {
      reference = steps;
    } else {
      EXPECT_EQ(steps, reference) << "B=" << sh.B << " A=" << sh.A << " N=" << sh.N;
    }
    EXPECT_EQ(s.windows_consumed(), 20 * 8);
    EXPECT_EQ(s.cursor(), (DataCursor{160 / 62, 160 % 62}));
  }
  // Each epoch visits every window exactly once: the first 62 positions are a permutation.
  std::vector<int64_t> first_epoch;
  for (const auto& step : reference)
    for (int64_t w : step)
      if (first_epoch.size() < 62) first_epoch.push_back(w);
  EXPECT_EQ(std::set<int64_t>(first_epoch.begin(), first_epoch.end()).size(), 62u);
}

// --epochs E over W windows, G a step: ceil(E·W/G) steps, at least 1; a decimal E whose binary
// value puts E·W/G a hair above a whole number (0.14 · 50 = 7.000000000000001 in doubles) gives
// that number; a length that is not one is refused.
TEST(TrainData, EpochsAreTheStepsThatReadThemRoundedUp) {
  EXPECT_EQ(steps_for_epochs(3, 17, 4), 13);  // 51 windows: 12.75 steps
  EXPECT_EQ(steps_for_epochs(1, 16, 4), 4);
  EXPECT_EQ(steps_for_epochs(3, 10, 4), 8);  // 30 windows: 7.5 steps (the Trainer's 3·⌈10/4⌉ = 9)
  EXPECT_EQ(steps_for_epochs(0.5, 30, 4), 4);  // 15 windows: 3.75 steps
  EXPECT_EQ(steps_for_epochs(0.1, 40, 4), 1);
  EXPECT_EQ(steps_for_epochs(0.1, 1630, 4), 41);  // 40.75
  EXPECT_EQ(steps_for_epochs(0.14, 50, 1), 7);    // 7.000000000000001
  EXPECT_EQ(steps_for_epochs(0.56, 50, 2), 14);   // 14.000000000000002
  EXPECT_EQ(steps_for_epochs(1e-9, 10, 4), 1);
  EXPECT_EQ(steps_for_epochs(2.5, 1'000'000'007, 3), 833'333'340);  // 833333339.17
  for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL, 1e300})
    EXPECT_THROW(steps_for_epochs(bad, 10, 4), Error) << bad;
}

TEST(TrainData, CursorCanBeRestored) {
  WindowSchedule a(1000, 16, 2, 2, 2, 5), b(1000, 16, 2, 2, 2, 5);
  for (int i = 0; i < 9; ++i) a.advance();
  EXPECT_FALSE(b.set_cursor(a.cursor()));
  EXPECT_EQ(a.global_windows(), b.global_windows());
  EXPECT_THROW(b.set_cursor(DataCursor{0, -1}), Error);
  // A position past this data's 62 windows (a resume onto smaller data) starts the next epoch.
  EXPECT_TRUE(b.set_cursor(DataCursor{3, 62}));
  EXPECT_EQ(b.cursor().epoch, 4);
  EXPECT_EQ(b.cursor().position, 0);
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("zt_train_data_" + std::to_string(getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// Dataset whose token i is i % 251 (so a window's tokens tell where it starts).
std::string write_ramp_dataset(const TempDir& dir, int64_t n) {
  const std::string path = dir.file("ramp.h5");
  TokenDatasetWriter w(path, 256, "byte");
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 251);
  w.append(tokens.data(), n, "ramp");
  w.finish();
  return path;
}

TEST(TrainData, SamplerReadsTheScheduledWindows) {
  TempDir dir;
  const int64_t T = 8, B = 2, A = 2;
  TokenDataset data(write_ramp_dataset(dir, 200));
  WindowSchedule schedule(200, T, B, A, 2, 3);
  WindowSampler sampler(data, 256, T, B, A, 2, 1, 3);
  for (int step = 0; step < 5; ++step) {
    const auto windows = schedule.rank_windows(1);
    sampler.next_step();
    schedule.advance();
    for (size_t m = 0; m < windows.size(); ++m)
      for (size_t b = 0; b < windows[m].size(); ++b)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t start = windows[m][b] * T;
          const int64_t i = static_cast<int64_t>(b) * T + t;
          EXPECT_EQ(sampler.inputs()[m][i], (start + t) % 251);
          EXPECT_EQ(sampler.targets()[m][i], (start + t + 1) % 251);
        }
    EXPECT_EQ(sampler.cursor(), schedule.cursor());
  }
}

TEST(TrainData, SamplerRejectsShortDatasetAndBadTokens) {
  TempDir dir;
  const std::string path = write_ramp_dataset(dir, 100);  // 12 windows of 9 tokens
  TokenDataset data(path);
  try {
    WindowSampler s(data, 256, 8, 4, 2, 2, 0, 1);  // needs 16 windows
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("12 windows"), std::string::npos) << msg;
    EXPECT_NE(msg.find("16 windows"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lower one of those, or --seq-len, until a step fits"), std::string::npos)
        << msg;
  }
  EXPECT_THROW(WindowSampler(data, 50, 8, 1, 1, 1, 0, 1), Error);  // token 99 ≥ 50
  EXPECT_NO_THROW(WindowSampler(data, 256, 8, 4, 3, 1, 0, 1));
}

TEST(TrainData, EvalWindowsAreConsecutiveAndNonOverlapping) {
  TempDir dir;
  TokenDataset data(write_ramp_dataset(dir, 100));
  const int64_t T = 9;  // windows of 10 tokens
  std::vector<int32_t> in(3 * T), tg(3 * T);
  read_eval_windows(data, 2, 3, T, in.data(), tg.data());
  for (int64_t w = 0; w < 3; ++w)
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(in[static_cast<size_t>(w * T + t)], (2 + w) * 10 + t);
      EXPECT_EQ(tg[static_cast<size_t>(w * T + t)], (2 + w) * 10 + t + 1);
    }
  EXPECT_NO_THROW(check_eval_windows(data, 10, T));
  // An error names what fits: fewer batches, or a shorter --seq-len.
  const std::string fewer = error_of([&] { check_eval_windows(data, 11, T); });
  EXPECT_NE(fewer.find("needs 110; ask for fewer batches (all: the 10 whole windows it holds)"),
            std::string::npos)
      << fewer;
  const std::string shorter = error_of([&] { check_eval_windows(data, 1, 100); });
  EXPECT_NE(shorter.find("needs 101; a shorter --seq-len fits it"), std::string::npos) << shorter;
}

// "all" (kAllEvalBatches): every whole window, in batches that cover them; the last batch's windows
// past the set count nothing, and a batch read before them leaves no trace.
TEST(TrainData, EveryEvalWindowIsScoredOnceAndPaddingCountsNothing) {
  TempDir dir;
  TokenDataset data(write_ramp_dataset(dir, 135));  // 13 windows of 10 tokens, 5 tokens over
  const int64_t T = 9, B = 3;
  const EvalWindows all = eval_windows(data, kAllEvalBatches, B, T);
  EXPECT_EQ(all.windows, 13);
  EXPECT_EQ(all.batches, 5);  // 4 full batches and one of 1 window
  const EvalWindows some = eval_windows(data, 4, B, T);
  EXPECT_EQ(some.windows, 12);
  EXPECT_EQ(some.batches, 4);
  EXPECT_THROW(eval_windows(data, 5, B, T), Error);  // 15 windows: more than the set holds
  EvalBatch batch(B, T, false);
  EXPECT_EQ(batch.read(data, all, 1), B * T);  // a full batch first: the padding must overwrite it
  EXPECT_EQ(batch.read(data, all, 4), T);
  for (int64_t i = 0; i < B * T; ++i) {
    const bool real = i < T;  // window 12: tokens 120..129
    EXPECT_EQ(batch.inputs()[static_cast<size_t>(i)], real ? 120 + i : 0) << i;
    EXPECT_EQ(batch.targets()[static_cast<size_t>(i)], real ? 121 + i : kIgnoredTarget) << i;
  }
  EXPECT_EQ(batch.read(data, all, 5), 0);  // a round's batch past the set: padding only
  for (int32_t t : batch.targets()) EXPECT_EQ(t, kIgnoredTarget);
  // Shorter than one window: refused, naming the file.
  TempDir other;
  TokenDataset tiny(write_ramp_dataset(other, 9));
  try {
    eval_windows(tiny, kAllEvalBatches, B, T);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tiny.path()), std::string::npos) << e.what();
  }
}

// The ramp dataset with a loss mask that counts token i unless i % 3 == 0.
std::string write_masked_ramp_dataset(const TempDir& dir, int64_t n) {
  const std::string path = dir.file("masked_ramp.h5");
  TokenDatasetWriter w(path, 256, "byte");
  std::vector<uint32_t> tokens(static_cast<size_t>(n));
  std::vector<uint8_t> mask(tokens.size());
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 251);
    mask[static_cast<size_t>(i)] = i % 3 == 0 ? 0 : 1;
  }
  w.append(tokens.data(), n / 2, "ramp", mask.data());  // two appends: the mask follows
  w.append(tokens.data() + n / 2, n - n / 2, "ramp", mask.data() + n / 2);
  w.finish();
  return path;
}

// SFT data: a target whose mask value is 0 is kIgnoredTarget, the others are the dataset's
// tokens, and every rank reports the same count of counted targets for the step: that of the
// whole global batch, whatever the world size.
TEST(TrainData, LossMaskIgnoresTargetsAndCountsTheGlobalBatch) {
  TempDir dir;
  const int64_t T = 8, B = 2, A = 2, n = 300;
  TokenDataset data(write_masked_ramp_dataset(dir, n));
  ASSERT_TRUE(data.has_loss_mask());
  EXPECT_EQ(data.counted_tokens(), n - (n + 2) / 3);
  WindowSchedule schedule(n, T, B, A, 2, 3);
  WindowSampler rank0(data, 256, T, B, A, 2, 0, 3), rank1(data, 256, T, B, A, 2, 1, 3);
  WindowSampler alone(data, 256, T, B, 2 * A, 1, 0, 3);  // the same global batch on one rank
  for (int step = 0; step < 4; ++step) {
    int64_t expected = 0;
    for (int64_t w : schedule.global_windows())
      for (int64_t t = 1; t <= T; ++t) expected += (w * T + t) % 3 == 0 ? 0 : 1;
    const auto windows = schedule.rank_windows(1);
    schedule.advance();
    rank0.next_step();
    rank1.next_step();
    alone.next_step();
    EXPECT_EQ(rank0.counted_targets(), expected);
    EXPECT_EQ(rank1.counted_targets(), expected);
    EXPECT_EQ(alone.counted_targets(), expected);
    EXPECT_LT(expected, B * A * 2 * T);
    for (size_t m = 0; m < windows.size(); ++m)
      for (size_t b = 0; b < windows[m].size(); ++b)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t target_index = windows[m][b] * T + t + 1;
          const int64_t i = static_cast<int64_t>(b) * T + t;
          EXPECT_EQ(rank1.inputs()[m][i], (target_index - 1) % 251);
          EXPECT_EQ(rank1.targets()[m][i],
                    target_index % 3 == 0 ? kIgnoredTarget : target_index % 251);
        }
  }
  // Without a mask every target counts.
  TokenDataset plain(write_ramp_dataset(dir, n));
  EXPECT_FALSE(plain.has_loss_mask());
  WindowSampler unmasked(plain, 256, T, B, A, 2, 0, 3);
  unmasked.next_step();
  EXPECT_EQ(unmasked.counted_targets(), B * A * 2 * T);
  // Eval windows: the same rule, and the count is returned.
  std::vector<int32_t> in(2 * T), tg(2 * T);
  int64_t expected = 0;
  for (int64_t w = 3; w < 5; ++w)
    for (int64_t t = 1; t <= T; ++t) expected += (w * (T + 1) + t) % 3 == 0 ? 0 : 1;
  EXPECT_EQ(read_eval_windows(data, 3, 2, T, in.data(), tg.data()), expected);
  EXPECT_EQ(tg[0], (3 * (T + 1) + 1) % 3 == 0 ? kIgnoredTarget : 3 * (T + 1) + 1);
  EXPECT_EQ(read_eval_windows(plain, 3, 2, T, in.data(), tg.data()), 2 * T);
  EXPECT_THROW(check_eval_targets_counted(data, 2, 0), AgreedError);
  // A mask that counts nothing leaves nothing to train on: refused when the sampler opens it.
  {
    TokenDatasetWriter w(dir.file("nothing.h5"), 256, "byte");
    const std::vector<uint32_t> tokens(static_cast<size_t>(n), 5);
    const std::vector<uint8_t> zeros(tokens.size(), 0);
    w.append(tokens.data(), n, "zeros", zeros.data());
    w.finish();
  }
  TokenDataset nothing(dir.file("nothing.h5"));
  try {
    WindowSampler s(nothing, 256, T, B, A, 2, 0, 3);
    ADD_FAILURE() << "a mask counting no token was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing.h5"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_eval_targets_counted(data, 2, 1));
}

TEST(TrainData, LearningRateWarmupAndCosine) {
  AdamWConfig c;
  c.lr = 1e-3f;
  c.min_lr = 1e-4f;
  c.warmup_steps = 10;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 1, 110), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 5, 110), 5e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 10, 110), 1e-3f);
  // Halfway through the decay the cosine is at its midpoint.
  EXPECT_NEAR(learning_rate_at(c, 60, 110), 5.5e-4f, 1e-9);
  EXPECT_NEAR(learning_rate_at(c, 35, 110), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI * 0.25)),
              1e-8);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 110, 110), 1e-4f);
  c.warmup_steps = 0;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 0, 100), 1e-3f);
  EXPECT_LT(learning_rate_at(c, 2, 100), learning_rate_at(c, 1, 100));
  // --schedule-steps: the cosine spans 210 steps although the run stops at 110.
  c.warmup_steps = 10;
  c.schedule_steps = 210;
  EXPECT_NEAR(learning_rate_at(c, 110, 110), 5.5e-4f, 1e-9);  // halfway through the decay
  c.schedule_steps = 0;
  // A warmup from a non-zero start.
  c.warmup_steps = 10;
  c.warmup_start_lr = 2e-4f;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 5, 110), 2e-4f + 8e-4f * 0.5f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 10, 110), 1e-3f);
}

// DeepSpeed's schedulers as a DeepSpeed run applies them: step s trains at last_batch_iteration
// i = s - 2, step 1 at the constructor's rate. Values worked out by hand from the formulas in
// lr_schedule.h (tests/oracle/test_lr_schedules.py checks against DeepSpeed's own code).
TEST(TrainData, LearningRateDeepSpeedSchedules) {
  AdamWConfig c;
  c.lr = 1e-3f;
  c.warmup_steps = 10;
  c.warmup_start_lr = 1e-4f;
  c.warmup_shape = WarmupShape::kLog;
  c.schedule = LrScheduleKind::kWarmupLR;
  // Log warmup: γ = ln(i+1)/ln(10); steps 1 (the constructor) and 2 (i = 0) at warmup_min_lr.
  EXPECT_FLOAT_EQ(learning_rate_at(c, 1, 100), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 2, 100), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 5, 100), 1e-4f + 9e-4f * std::log10(4.0f));    // i = 3
  EXPECT_FLOAT_EQ(learning_rate_at(c, 11, 100), 1e-4f + 9e-4f * std::log10(10.0f));  // i = 9
  EXPECT_FLOAT_EQ(learning_rate_at(c, 12, 100), 1e-3f);  // i = 10: warmup over, constant
  EXPECT_FLOAT_EQ(learning_rate_at(c, 100, 100), 1e-3f);
  c.warmup_shape = WarmupShape::kLinear;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 7, 100), 1e-4f + 9e-4f * 0.5f);  // γ = i/W = 5/10
  // warmup_num_steps below 2 warms up over 2 iterations (DeepSpeed's max(2, W)).
  c.warmup_steps = 0;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 2, 100), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 3, 100), 1e-4f + 9e-4f * 0.5f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 4, 100), 1e-3f);

  // WarmupDecayLR: linear from lr at i = W to min_lr (its warmup_min_lr) at i = S.
  c.schedule = LrScheduleKind::kWarmupDecayLR;
  c.warmup_steps = 10;
  c.min_lr = 1e-4f;
  EXPECT_FLOAT_EQ(learning_rate_at(c, 1, 110), 1e-4f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 12, 110), 1e-3f);                   // i = 10: 100/100
  EXPECT_FLOAT_EQ(learning_rate_at(c, 62, 110), 1e-4f + 9e-4f * 0.5f);    // i = 60: 50/100
  EXPECT_FLOAT_EQ(learning_rate_at(c, 110, 110), 1e-4f + 9e-4f * 0.02f);  // i = 108: 2/100

  // WarmupCosineLR: step 1 at 0; then ½(1 + cos(π·(i − W + 1)/(S − W))) between min_lr and lr.
  c.schedule = LrScheduleKind::kWarmupCosineLR;
  EXPECT_EQ(learning_rate_at(c, 1, 110), 0.0f);
  EXPECT_FLOAT_EQ(learning_rate_at(c, 2, 110), 1e-4f);  // i = 0: the warmup's start
  EXPECT_FLOAT_EQ(learning_rate_at(c, 12, 110),
                  static_cast<float>(1e-4 + 9e-4 * 0.5 * (1 + std::cos(M_PI * 0.01))));
  EXPECT_FLOAT_EQ(learning_rate_at(c, 61, 110), 1e-4f + 9e-4f * 0.5f);  // i − W + 1 = 50
  EXPECT_FLOAT_EQ(learning_rate_at(c, 110, 110),
                  static_cast<float>(1e-4 + 9e-4 * 0.5 * (1 + std::cos(M_PI * 0.99))));
  EXPECT_FLOAT_EQ(learning_rate_at(c, 112, 110), 1e-4f);  // past the end: the floor, no rise
  // A schedule no longer than its warmup stays at the floor afterwards.
  EXPECT_FLOAT_EQ(learning_rate_at(c, 12, 10), 1e-4f);
}

TEST(TrainData, LearningRateScheduleNamesAndContradictions) {
  EXPECT_EQ(parse_lr_schedule("WarmupCosineLR", "x"), LrScheduleKind::kWarmupCosineLR);
  EXPECT_STREQ(lr_schedule_name(LrScheduleKind::kWarmupDecayLR), "WarmupDecayLR");
  EXPECT_EQ(parse_warmup_shape("log", "x"), WarmupShape::kLog);
  try {
    parse_lr_schedule("OneCycle", "--lr-schedule");
    FAIL() << "an unknown schedule was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lr-schedule: unknown schedule 'OneCycle'"),
              std::string::npos);
  }
  AdamWConfig c;
  c.warmup_shape = WarmupShape::kLog;
  EXPECT_THROW(validate_schedule(c), Error);  // log warmup is DeepSpeed's
  c.schedule = LrScheduleKind::kWarmupLR;
  EXPECT_NO_THROW(validate_schedule(c));
  c.warmup_start_lr = 2 * c.lr;
  EXPECT_THROW(validate_schedule(c), Error);
}

}  // namespace
}  // namespace zt
