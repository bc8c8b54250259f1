// Training that diverges stops before the update that would poison the weights, exits non-zero
// on every rank, and leaves the last good checkpoint as `latest` and no final model.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;

class Divergence : public SampleDataSuite<Divergence> {
 public:
  static constexpr const char* kDirPrefix = "zt_divergence_";
};

std::string latest_of(const std::string& out) {
  std::ifstream in(out + "/checkpoints/latest");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST_F(Divergence, StopsBeforeTheUpdateAndKeepsTheLastGoodCheckpoint) {
  // --lr 1e3: the gradients of step 4 are NaN on this data (the loss of step 3 is finite).
  const std::string args = "train --preset tiny --data " + path("sample.h5") +
                           " --steps 8 --seq-len 16 --micro-batch 2 --lr 1e3 --save-every 2 "
                           "--keep-last 1 --comm-timeout 60 --out ";
  for (int np : {1, 2}) {
    if (np > 1 && !have_mpirun()) continue;
    const std::string out = path("diverged_np" + std::to_string(np));
    const auto t0 = std::chrono::steady_clock::now();
    const RunResult r = np == 1
                            ? run_zerotrain(args + out)
                            : run_command(mpirun_zerotrain(np) + args + out + " --zero-stage 3");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(seconds, 30) << r.output;
    EXPECT_NE(r.output.find("the gradient norm is"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("at step 4: the first non-finite gradient is in "), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("the previous update's learning rate was "), std::string::npos)
        << r.output;
    EXPECT_EQ(latest_of(out), "step-00000002") << r.output;
    EXPECT_TRUE(fs::exists(out + "/checkpoints/step-00000002/manifest.json"));
    EXPECT_FALSE(fs::exists(out + "/final"));
    EXPECT_EQ(read_jsonl(out + "/metrics.jsonl").size(), 3u);  // steps 1-3
  }
}

// In fp16 a learning rate far too high ends at the minimum loss scale; the stop names the rate,
// as the bf16 divergence above does (it said only that the scale could not decrease).
TEST_F(Divergence, AnFp16StopAtTheMinimumScaleNamesTheLearningRate) {
  const RunResult r = run_zerotrain("train --preset tiny --data " + path("sample.h5") + " --out " +
                                    path("fp16_lr") +
                                    " --steps 40 --seq-len 16 --micro-batch 2 --precision fp16 "
                                    "--lr 1e30 --log-every 0");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("overflowed at the minimum loss scale"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the previous update's learning rate was "), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace zt
