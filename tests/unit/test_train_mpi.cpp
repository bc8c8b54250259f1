// train and eval under mpirun: with the same global batch, 1, 2 and 4 ranks see the same data
// (with or without an SFT loss mask) and give the same losses (within the derived bound of the
// double sums' association); eval prints the same figure at any world size. Skipped when mpirun is
// not on PATH.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/token_dataset.h"
#include "runtime/cpu_placement.h"
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

 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 protected:
  fs::path dir_;
};

// With the same global batch, 1, 2 and 4 ranks train on the same windows at every step. Every run
// trains micro-batches of one sequence (the one-rank run with grad-accum 4), so each window's
// per-token losses are computed by the same GEMM shapes and are the same floats at any world size.
// At --lr 1e-30 the weights do not move: an update of at most ~1e-30 per element is below half an
// ulp of every weight (and were one to move, the loss would change by some 1e-27). Each step's
// loss then differs only in how the four windows' double sums are associated (over micro-batches,
// then over ranks), which moves it by at most (2·γ_3 + 2u)·loss, u = 2^-53, γ_k = k·u/(1 − k·u)
// (the last term: the division by the counted targets). Likewise the evaluation of four windows.
// Returns each run's metrics lines, the last one's report eval appended.
std::vector<std::vector<nlohmann::json>> expect_same_losses_at_any_world_size(
    const TrainMpi& t, const std::string& data, const std::string& name) {
  struct Run {
    int np, stage;
  };
  const std::vector<Run> runs = {{1, 0}, {2, 0}, {2, 2}, {4, 3}};
  constexpr double u = 0x1p-53;
  const double bound = 2 * (3 * u / (1 - 3 * u)) + 2 * u;
  std::vector<std::vector<nlohmann::json>> all;
  for (const Run& run : runs) {
    const std::string out =
        name + "_np" + std::to_string(run.np) + "_s" + std::to_string(run.stage);
    const std::string per_rank = std::to_string(4 / run.np);
    const RunResult r = run_command(
        mpirun_zerotrain(run.np) + "train --preset tiny --seed 5 --data " + data + " --out " +
        t.path(out) + " --steps 3 --seq-len 32 --lr 1e-30 --min-lr 0 --precision fp32" +
        " --log-every 0 --micro-batch 1 --grad-accum " + per_rank + " --zero-stage " +
        std::to_string(run.stage) + " --eval-batches " + per_rank + " --comm-timeout 60");
    EXPECT_EQ(r.exit_code, 0) << out << ": " << r.output;
    if (r.exit_code != 0) return {};
    auto lines = read_jsonl(t.path(out + "/metrics.jsonl"));
    EXPECT_EQ(lines.size(), 3u) << out;
    std::ifstream report_in(t.path(out + "/report.json"));
    const auto report = nlohmann::json::parse(report_in);
    EXPECT_EQ(report["peak_memory_bytes_per_rank"].size(), static_cast<size_t>(run.np));
    EXPECT_EQ(report["world_size"].get<int>(), run.np);
    EXPECT_TRUE(fs::exists(t.path(out + "/final/config.json")));
    // The eval's micro-batch is the rank's, as run.json's; a round scores every rank's.
    EXPECT_EQ(report["eval"]["micro_batch"], 1) << out;
    EXPECT_EQ(report["eval"]["windows_per_round"], run.np) << out;
    lines.push_back(report["eval"]);
    all.push_back(lines);
    const std::vector<nlohmann::json>& reference = all.front();
    if (all.size() == 1) continue;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      const double x = lines[i]["loss"].get<double>(), y = reference[i]["loss"].get<double>();
      EXPECT_LE(std::abs(x - y), bound * std::abs(y)) << out << " step " << i + 1;
      EXPECT_EQ(lines[i]["tokens"].get<int>(), 4 * 32);
      EXPECT_EQ(lines[i]["loss_tokens"], reference[i]["loss_tokens"]) << out << " step " << i + 1;
      double bytes = 0;
      for (const auto& [op, b] : lines[i]["comm_bytes"].items()) bytes += b.get<double>();
      EXPECT_GT(bytes, 0) << out << " step " << i + 1;  // np > 1 here: gradients must move
    }
    const double e = lines.back()["loss"].get<double>();
    const double e_ref = reference.back()["loss"].get<double>();
    EXPECT_LE(std::abs(e - e_ref), bound * std::abs(e_ref)) << out;
    EXPECT_EQ(lines.back()["loss_tokens"], reference.back()["loss_tokens"]) << out;
  }
  // The steps saw different windows (the cursor moved), not one batch three times.
  if (!all.empty()) {
    EXPECT_NE(all[0][0]["loss"], all[0][1]["loss"]);
  }
  return all;
}

TEST_F(TrainMpi, GlobalBatchGivesTheSameLossesAtAnyWorldSize) {
  const auto runs = expect_same_losses_at_any_world_size(*this, path("sample.h5"), "plain");
  ASSERT_FALSE(runs.empty());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(runs[0][i]["loss_tokens"].get<int>(), 4 * 32);
}

// SFT data: the sample text with a loss mask that leaves out blocks of tokens. Every world size
// and stage averages over the same counted targets of the global batch, and the loss differs from
// the unmasked one: the mask is honoured, not ignored.
TEST_F(TrainMpi, LossMaskedDataGivesTheSameMeanOverCountedTargetsAtAnyWorldSize) {
  const TokenDataset sample(path("sample.h5"));
  std::vector<int32_t> tokens(static_cast<size_t>(sample.size()));
  sample.read(0, sample.size(), tokens.data());
  std::vector<uint32_t> unsigned_tokens(tokens.begin(), tokens.end());
  std::vector<uint8_t> mask(tokens.size());
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i / 7) % 3 == 0 ? 0 : 1;
  {
    TokenDatasetWriter w(path("sft.h5"), sample.vocab_size(), sample.tokenizer());
    w.append(unsigned_tokens.data(), static_cast<int64_t>(unsigned_tokens.size()), "sample",
             mask.data());
    w.finish();
  }
  const auto masked = expect_same_losses_at_any_world_size(*this, path("sft.h5"), "sft");
  ASSERT_FALSE(masked.empty());
  for (size_t i = 0; i < 3; ++i) {
    const int counted = masked[0][i]["loss_tokens"].get<int>();
    EXPECT_GT(counted, 0);
    EXPECT_LT(counted, 4 * 32);
  }
  // The same run on the unmasked data: same windows, same weights, a different mean.
  const RunResult r = run_zerotrain(
      "train --preset tiny --seed 5 --data " + path("sample.h5") + " --out " + path("unmasked") +
      " --steps 1 --seq-len 32 --lr 1e-30 --min-lr 0 --precision fp32 --log-every 0 "
      "--micro-batch 1 --grad-accum 4 --comm-timeout 60");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto plain = read_jsonl(path("unmasked/metrics.jsonl"));
  EXPECT_NE(plain[0]["loss"], masked[0][0]["loss"]);
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

// Open MPI's default binding (one core per rank when it starts two or fewer) under more OpenMP
// threads than that core: every rank so bound says so, naming itself and the way out; unbound,
// the same run is silent. The CPU optimizer of the first GPU session crawled this way. Bound to
// one hardware thread (a core may hold two), the mask is one CPU wherever this runs.
TEST_F(TrainMpi, RankBoundToFewerCpusThanItsThreadsIsWarned) {
  if (affinity_cpu_count() < 2 ||
      affinity_cpu_count() < static_cast<int>(std::thread::hardware_concurrency()))
    GTEST_SKIP() << "this process's own mask is one CPU or narrower than the host";
  const std::string launch =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
      "OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=2 mpirun -np 1 --bind-to ";
  const std::string train = std::string(ZT_BINARY) + " train --preset tiny --data " +
                            path("sample.h5") + " --steps 1 --seq-len 16 --micro-batch 1 " +
                            "--log-every 0 --eval-batches 0 --comm-timeout 60 --out ";
  const RunResult bound = run_command(launch + "hwthread " + train + path("bound"));
  ASSERT_EQ(bound.exit_code, 0) << bound.output;
  EXPECT_NE(bound.output.find("warning: rank 0 runs 2 OpenMP threads on 1 CPU"), std::string::npos)
      << bound.output;
  EXPECT_NE(bound.output.find("mpirun --bind-to none"), std::string::npos) << bound.output;
  const RunResult unbound = run_command(launch + "none " + train + path("unbound"));
  ASSERT_EQ(unbound.exit_code, 0) << unbound.output;
  EXPECT_EQ(unbound.output.find("OpenMP threads on"), std::string::npos) << unbound.output;
}

}  // namespace
}  // namespace zt
