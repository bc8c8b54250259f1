// The largest micro-batch per ZeRO stage (`estimate --max-micro-batch --device-memory-gib G`) and
// `train --device-memory-limit G`: on the CPU backend the predicted maximum trains under the
// limit, which the memory tracker enforces on every device allocation, and one more sequence is
// refused before training with the categories and the shortfall. Reference: the measured run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/train_options.h"
#include "engine/estimator.h"
#include "test_train_support.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

using train_test::mpirun_zerotrain;
using train_test::run_command;
using train_test::run_zerotrain;

TEST(DeviceMemoryLimit, TrackerRefusesAnAllocationPastTheLimitAndCountsNothing) {
  MemoryTracker memory;
  memory.set_device_limit(1000);
  TrackedBuffer<char> params(memory, MemCategory::kParams, 600);
  try {
    TrackedBuffer<char> activations(memory, MemCategory::kActivations, 500);
    FAIL() << "500 more bytes were admitted past a 1000-byte limit with 600 in use";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("500 more bytes of activations"), std::string::npos) << what;
    EXPECT_NE(what.find("params 600"), std::string::npos) << what;
    EXPECT_NE(what.find("short by 100 bytes"), std::string::npos) << what;
  }
  EXPECT_EQ(memory.current(MemCategory::kActivations), 0u);
  EXPECT_EQ(memory.peak_total(), 600u);
  TrackedBuffer<char> host(memory, MemCategory::kHostOffload, 5000);  // the host pool: no limit
  TrackedBuffer<char> fits(memory, MemCategory::kGrads, 400);         // exactly at the limit
  EXPECT_EQ(memory.peak_total(), 1000u);
}

// The CUDA backend's scratch is held outside the tracker's categories (set_device_limit's
// held_outside): it counts against the limit and is named in the refusal.
TEST(DeviceMemoryLimit, ScratchHeldOutsideTheTrackerCountsAgainstTheLimit) {
  MemoryTracker memory;
  memory.set_device_limit(1000, 300);
  TrackedBuffer<char> params(memory, MemCategory::kParams, 600);
  try {
    TrackedBuffer<char> grads(memory, MemCategory::kGrads, 200);
    FAIL() << "200 more bytes were admitted with 600 tracked and 300 of scratch under 1000";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("900 in use (params 600, backend scratch 300)"), std::string::npos) << what;
    EXPECT_NE(what.find("short by 100 bytes"), std::string::npos) << what;
  }
  TrackedBuffer<char> fits(memory, MemCategory::kGrads, 100);  // exactly at the limit
  EXPECT_EQ(memory.peak_total(), 700u);
}

// train's check before the engine allocates: the estimate's categories plus the backend's
// scratch against the limit, refused with both named.
TEST(DeviceMemoryLimit, TrainCheckAddsTheBackendScratch) {
  TrainOptions o;
  o.device_memory_limit_gib = 1;
  MemoryEstimate e;
  e.params = int64_t{600} << 20;
  e.activations = int64_t{300} << 20;
  EXPECT_NO_THROW(check_device_memory_limit(o, e, 2));
  EXPECT_NO_THROW(check_device_memory_limit(o, e, 2, size_t{124} << 20));  // exactly 1 GiB
  try {
    check_device_memory_limit(o, e, 2, (size_t{124} << 20) + 1);
    FAIL() << "a run one byte over the limit with the scratch was admitted";
  } catch (const AgreedError& err) {
    const std::string what = err.what();
    EXPECT_NE(
        what.find("the backend's scratch " + std::to_string((size_t{124} << 20) + 1) + " bytes"),
        std::string::npos)
        << what;
    EXPECT_NE(what.find("short by 1 bytes"), std::string::npos) << what;
  }
}

class MaxMicroBatch : public train_test::SampleDataSuite<MaxMicroBatch> {
 public:
  static constexpr const char* kDirPrefix = "zt_max_micro_batch_";
};

// One configuration: the world, the device memory in GiB (as typed), more train/estimate options.
struct LimitSetting {
  int world;
  std::string limit_gib, options;
  bool offloads() const { return options.find("offload") != std::string::npos; }
};

// One step of the small preset at `micro_batch` under the setting's limit (mpirun at world > 1).
train_test::RunResult train_under_limit(const LimitSetting& s, int stage, int64_t micro_batch,
                                        const std::string& out, const std::string& data) {
  const std::string launch = s.world > 1 ? mpirun_zerotrain(s.world) : std::string(ZT_BINARY) + " ";
  return run_command(launch + "train --backend cpu --preset small --seq-len 128 --steps 1 --data " +
                     data + " --out " + out + " --zero-stage " + std::to_string(stage) +
                     " --micro-batch " + std::to_string(micro_batch) + " --device-memory-limit " +
                     s.limit_gib + " --comm-timeout 60 " + s.options);
}

// Every stage, at world 1 (no checkpointing; CPU optimizer offload at stages 1-3) and world 2
// (full activation checkpointing): the predicted maximum trains, one more is refused up front.
TEST_F(MaxMicroBatch, PredictedMaximumTrainsAndOneMoreIsRefusedBeforeTraining) {
  const LimitSetting settings[] = {{1, "0.1", ""},
                                   {1, "0.1", "--offload-optimizer cpu"},
                                   {2, "0.06", "--activation-checkpointing full"}};
  for (const LimitSetting& s : settings) {
    if (s.world > 1 && !have_mpirun()) GTEST_SKIP() << "no mpirun";
    const auto estimate = run_zerotrain(
        "estimate --backend cpu --preset small --seq-len 128 --world " + std::to_string(s.world) +
        " --max-micro-batch --device-memory-gib " + s.limit_gib + " --json " + s.options +
        (s.offloads() ? " --zero-stage 1" : ""));  // the requested stage must allow offload
    ASSERT_EQ(estimate.exit_code, 0) << estimate.output;
    const nlohmann::json rows = nlohmann::json::parse(estimate.output)["max_micro_batch"];
    ASSERT_EQ(rows.size(), 4u);
    const double limit = std::stod(s.limit_gib) * (1 << 30);
    for (const auto& row : rows) {
      const int stage = row["stage"].get<int>();
      if (stage == 0 && s.offloads()) continue;  // optimizer offload needs stage >= 1
      const int64_t b = row["micro_batch"].get<int64_t>();
      const std::string what = "world " + std::to_string(s.world) + " stage " +
                               std::to_string(stage) + " " + s.options + ", micro-batch ";
      ASSERT_GE(b, 1) << what << "0 predicted";
      EXPECT_LE(row["device_total"].get<double>(), limit) << what << b;
      EXPECT_GT(row["next_device_total"].get<double>(), limit) << what << b + 1;
      const std::string name = "w" + std::to_string(s.world) + "s" + std::to_string(stage) +
                               (s.options.empty() ? "" : "x");
      const auto fits = train_under_limit(s, stage, b, path(name + "_fits"), path("sample.h5"));
      EXPECT_EQ(fits.exit_code, 0) << what << b << ":\n" << fits.output;
      const auto refused =
          train_under_limit(s, stage, b + 1, path(name + "_refused"), path("sample.h5"));
      EXPECT_NE(refused.exit_code, 0) << what << b + 1 << " was not refused";
      EXPECT_NE(refused.output.find("--device-memory-limit " + s.limit_gib), std::string::npos)
          << refused.output;
      EXPECT_NE(refused.output.find("(largest)"), std::string::npos) << refused.output;
      EXPECT_NE(refused.output.find("short by"), std::string::npos) << refused.output;
      EXPECT_EQ(refused.output.find("step 1/1"), std::string::npos)
          << what << b + 1 << " trained before the refusal:\n"
          << refused.output;
    }
  }
}

TEST_F(MaxMicroBatch, BadLimitsAreRefusedNamingTheOption) {
  const auto no_memory = run_zerotrain("estimate --preset small --max-micro-batch");
  EXPECT_NE(no_memory.exit_code, 0);
  EXPECT_NE(no_memory.output.find("--max-micro-batch needs --device-memory-gib"), std::string::npos)
      << no_memory.output;
  const auto zero =
      run_zerotrain("estimate --preset small --max-micro-batch --device-memory-gib 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.output.find("--device-memory-gib must be a number of GiB between"),
            std::string::npos)
      << zero.output;
  const auto old_name = run_zerotrain("estimate --preset small --device-memory 1e300");
  EXPECT_NE(old_name.exit_code, 0);
  EXPECT_NE(old_name.output.find("--device-memory must be"), std::string::npos) << old_name.output;
  // Negative, a limit that would round to 0 bytes (silently "no limit"), one past 2^63 bytes.
  for (const char* limit : {"-1", "1e-12", "1e300"}) {
    const auto bad = run_zerotrain("train --preset tiny --data " + path("sample.h5") + " --out " +
                                   path("bad_limit") + " --device-memory-limit " + limit);
    EXPECT_NE(bad.exit_code, 0) << limit;
    EXPECT_NE(bad.output.find("--device-memory-limit must be"), std::string::npos)
        << limit << ": " << bad.output;
  }
  // Model states alone past the limit: no micro-batch fits, and the estimate says why.
  const auto none =
      run_zerotrain("estimate --preset 1b --seq-len 128 --max-micro-batch --device-memory-gib 1");
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("stage 0: none (one sequence needs"), std::string::npos)
      << none.output;
}

// A train run's INI given to estimate: its sizes and engine keys plan that run (the same JSON as
// the same options typed), train's other keys are read past with a note naming them, the sizes
// the file leaves to the defaults are named where estimate's differ from train's, and a misspelt
// key is still refused, naming the file and train's key it may have meant.
TEST_F(MaxMicroBatch, EstimateReadsATrainConfigFile) {
  std::ofstream(path("run.ini")) << "preset = tiny\ndata = " << path("sample.h5")
                                 << "\nout = " << path("never")
                                 << "\nsteps = 3\nlr = 1e-4\nzero-stage = 2\n"
                                 << "seq-len = 64\nactivation-checkpointing = full\n";
  const auto from_file =
      run_command("{ " + std::string(ZT_BINARY) + " estimate --config " + path("run.ini") +
                  " --world 2 --json 2>" + path("notes.txt") + "; }");
  ASSERT_EQ(from_file.exit_code, 0) << from_file.output;
  const auto typed = run_zerotrain(
      "estimate --preset tiny --world 2 --zero-stage 2 --seq-len 64 --micro-batch 1 "
      "--activation-checkpointing full --json");
  ASSERT_EQ(typed.exit_code, 0) << typed.output;
  EXPECT_EQ(nlohmann::json::parse(from_file.output), nlohmann::json::parse(typed.output));
  std::stringstream notes;
  notes << std::ifstream(path("notes.txt")).rdbuf();
  EXPECT_NE(notes.str().find("read past train's keys data, out, steps, lr, which estimate does "
                             "not take"),
            std::string::npos)
      << notes.str();
  EXPECT_NE(notes.str().find("does not set --micro-batch, so this estimate takes estimate's "
                             "default, 1; train's is " +
                             std::to_string(TrainOptions{}.micro_batch)),
            std::string::npos)
      << notes.str();
  EXPECT_FALSE(std::filesystem::exists(path("never")));
  std::ofstream(path("typo.ini")) << "preset = tiny\nstepz = 3\n";
  const auto typo = run_zerotrain("estimate --config " + path("typo.ini"));
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE(typo.output.find("config file '" + path("typo.ini") +
                             "': unrecognised option 'stepz' (did you mean --steps?)"),
            std::string::npos)
      << typo.output;
  // train itself still refuses estimate's keys in its file.
  std::ofstream(path("world.ini")) << "world = 2\n";
  const auto world = run_zerotrain("train --preset tiny --data " + path("sample.h5") + " --out " +
                                   path("never") + " --config " + path("world.ini"));
  EXPECT_NE(world.exit_code, 0);
  EXPECT_NE(world.output.find("unrecognised option 'world'"), std::string::npos) << world.output;
}

}  // namespace
}  // namespace zt
