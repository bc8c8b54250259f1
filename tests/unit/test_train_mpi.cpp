// train and eval under mpirun: with the same global batch, 1, 2 and 4 ranks see the same data
// and give the same losses (within the derived bound of the double sums' association); eval
// prints the same figure at any world size. Skipped when mpirun is not on PATH.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT

namespace fs = std::filesystem;

class TrainMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
    dir_ = fs::temp_directory_path() / ("zt_train_mpi_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    const RunResult r = prepare_sample_dataset(path("sample.h5"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// With the same global batch, 1, 2 and 4 ranks train on the same windows at every step. Every run
// trains micro-batches of one sequence (the one-rank run with grad-accum 4), so each window's
// per-token losses are computed by the same GEMM shapes and are the same floats at any world size.
// At --lr 1e-30 the weights do not move: an update of at most ~1e-30 per element is below half an
// ulp of every weight (and were one to move, the loss would change by some 1e-27). Each step's
// loss then differs only in how the four windows' double sums are associated (over micro-batches,
// then over ranks), which moves it by at most (2·γ_3 + 2u)·loss, u = 2^-53, γ_k = k·u/(1 − k·u)
// (the last term: the division by the token count). Likewise the evaluation of four windows.
TEST_F(TrainMpi, GlobalBatchGivesTheSameLossesAtAnyWorldSize) {
  struct Run {
    int np, stage;
  };
  const std::vector<Run> runs = {{1, 0}, {2, 0}, {2, 2}, {4, 3}};
  constexpr double u = 0x1p-53;
  const double bound = 2 * (3 * u / (1 - 3 * u)) + 2 * u;
  std::vector<nlohmann::json> reference;
  for (const Run& run : runs) {
    const std::string out = "np" + std::to_string(run.np) + "_s" + std::to_string(run.stage);
    const std::string per_rank = std::to_string(4 / run.np);
    const RunResult r = run_command(
        mpirun_zerotrain(run.np) + "train --preset tiny --seed 5 --data " + path("sample.h5") +
        " --out " + path(out) + " --steps 3 --seq-len 32 --lr 1e-30 --min-lr 0 --precision fp32" +
        " --log-every 0 --micro-batch 1 --grad-accum " + per_rank + " --zero-stage " +
        std::to_string(run.stage) + " --eval-batches " + per_rank + " --comm-timeout 60");
    ASSERT_EQ(r.exit_code, 0) << out << ": " << r.output;
    const auto lines = read_jsonl(path(out + "/metrics.jsonl"));
    ASSERT_EQ(lines.size(), 3u) << out;
    std::ifstream report_in(path(out + "/report.json"));
    const auto report = nlohmann::json::parse(report_in);
    EXPECT_EQ(report["peak_memory_bytes_per_rank"].size(), static_cast<size_t>(run.np));
    EXPECT_EQ(report["world_size"].get<int>(), run.np);
    EXPECT_TRUE(fs::exists(path(out + "/final/config.json")));
    if (reference.empty()) {
      reference = lines;
      reference.push_back(report["eval"]);
      continue;
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      const double x = lines[i]["loss"].get<double>(), y = reference[i]["loss"].get<double>();
      EXPECT_LE(std::abs(x - y), bound * std::abs(y)) << out << " step " << i + 1;
      EXPECT_EQ(lines[i]["tokens"].get<int>(), 4 * 32);
      double bytes = 0;
      for (const auto& [op, b] : lines[i]["comm_bytes"].items()) bytes += b.get<double>();
      EXPECT_GT(bytes, 0) << out << " step " << i + 1;  // np > 1 here: gradients must move
    }
    const double e = report["eval"]["loss"].get<double>();
    const double e_ref = reference.back()["loss"].get<double>();
    EXPECT_LE(std::abs(e - e_ref), bound * std::abs(e_ref)) << out;
  }
  // The steps saw different windows (the cursor moved), not one batch three times.
  EXPECT_NE(reference[0]["loss"], reference[1]["loss"]);
}

TEST_F(TrainMpi, EvalIsIndependentOfWorldSize) {
  ASSERT_EQ(run_zerotrain("init --preset tiny --seed 2 --out " + path("model")).exit_code, 0);
  const std::string args = "eval --model " + path("model") + " --data " + path("sample.h5") +
                           " --batches 3 --micro-batch 2 --seq-len 16";
  const RunResult one = run_zerotrain(args);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const RunResult three = run_command(mpirun_zerotrain(3) + args);
  ASSERT_EQ(three.exit_code, 0) << three.output;
  // One JSON line from rank 0 only, bitwise the same figure.
  EXPECT_EQ(nlohmann::json::parse(three.output), nlohmann::json::parse(one.output));
}

}  // namespace
}  // namespace zt
