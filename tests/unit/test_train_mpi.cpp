// train and eval under mpirun: with the same global batch, 1, 2 and 4 ranks see the same data
// and give the same losses (fp32, reduction-order tolerance); eval prints the same figure at any
// world size. Skipped when mpirun is not on PATH.
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

TEST_F(TrainMpi, GlobalBatchGivesTheSameLossesAtAnyWorldSize) {
  struct Run {
    int np, micro_batch, stage;
  };
  // Global batch of 4 sequences of 32 tokens everywhere.
  const std::vector<Run> runs = {{1, 4, 0}, {2, 2, 0}, {2, 2, 2}, {4, 1, 3}};
  std::vector<nlohmann::json> reference;
  for (const Run& run : runs) {
    const std::string out = "np" + std::to_string(run.np) + "_s" + std::to_string(run.stage);
    const RunResult r = run_command(
        mpirun_zerotrain(run.np) + "train --preset tiny --seed 5 --data " + path("sample.h5") +
        " --out " + path(out) + " --steps 3 --seq-len 32 --lr 5e-3 --precision fp32 --log-every 0" +
        " --micro-batch " + std::to_string(run.micro_batch) + " --zero-stage " +
        std::to_string(run.stage) + " --eval-batches 1 --comm-timeout 60");
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
      EXPECT_NEAR(x, y, 1e-5 * std::abs(y)) << out << " step " << i + 1;
      EXPECT_EQ(lines[i]["tokens"].get<int>(), 4 * 32);
      double bytes = 0;
      for (const auto& [op, b] : lines[i]["comm_bytes"].items()) bytes += b.get<double>();
      EXPECT_GT(bytes, 0) << out << " step " << i + 1;  // np > 1 here: gradients must move
    }
    const double e = report["eval"]["loss"].get<double>();
    EXPECT_NEAR(e, reference.back()["loss"].get<double>(), 1e-5 * std::abs(e)) << out;
  }
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
