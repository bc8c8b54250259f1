// A job whose ranks do not all succeed stops, says why, and in bounded time: one rank given a
// truncated shard or a different dataset, ranks given different options. Every rank gets its own
// arguments through mpirun's MPMD form ("-np 1 A : -np 1 B").
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class RankFailures : public SampleDataSuite<RankFailures> {
 public:
  static constexpr const char* kDirPrefix = "zt_rank_failures_";

 protected:
  void SetUp() override {
    if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  }
  // mpirun with rank 0 running `args0` and rank 1 `args1` (each after "zerotrain train").
  static RunResult run_two(const std::string& args0, const std::string& args1, double* seconds) {
    const std::string mpirun = mpirun_zerotrain(1);  // "... -np 1 BINARY "
    const auto t0 = Clock::now();
    const RunResult r =
        run_command(mpirun + "train " + args0 + " : -np 1 " + ZT_BINARY + " train " + args1);
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  }
  // train's arguments: a short run, with `changed` ({"--seq-len", "32"}, ...) in place of the
  // defaults of those options.
  static std::string train(const std::string& model, const std::string& data,
                           const std::string& out,
                           std::map<std::string, std::string> changed = {}) {
    std::map<std::string, std::string> options = {
        {"--steps", "2"}, {"--seq-len", "16"}, {"--micro-batch", "1"}, {"--comm-timeout", "60"}};
    for (const auto& [option, value] : changed) options[option] = value;
    std::string args = model + " --data " + data + " --out " + out;
    for (const auto& [option, value] : options) args += " " + option + " " + value;
    return args;
  }
};

TEST_F(RankFailures, ATruncatedShardOnOneRankStopsTheJobWithThatRanksMessage) {
  ASSERT_EQ(run_zerotrain("init --preset tiny --seed 1 --out " + path("good")).exit_code, 0);
  fs::remove_all(path("bad"));
  fs::copy(path("good"), path("bad"));
  for (const auto& f : fs::directory_iterator(path("bad")))
    if (f.path().extension() == ".h5") fs::resize_file(f.path(), fs::file_size(f.path()) / 3);
  double seconds = 0;
  const RunResult r =
      run_two(train("--model " + path("good"), path("sample.h5"), path("out_shard")),
              train("--model " + path("bad"), path("sample.h5"), path("out_shard")), &seconds);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 30) << r.output;
  EXPECT_NE(r.output.find("error (rank 1 of 2): "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad/model-00001-of-00001.h5"), std::string::npos) << r.output;
  // Rank 0 says who failed and why, instead of waiting or timing out.
  EXPECT_NE(r.output.find("error (rank 0 of 2): rank 1 failed: "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("COMMUNICATION TIMEOUT"), std::string::npos) << r.output;
}

// A failure of one rank alone in the middle of training (ZT_DEBUG_FAIL_AT: rank 1 throws as step
// 3 begins, while rank 0 goes on into that step's collectives): the job stops at once with rank
// 1's message, reported before its engine and device are torn down, and no timeout report.
TEST_F(RankFailures, ARankFailingAloneMidTrainingStopsTheJobWithItsMessage) {
  double seconds = 0;
  const std::string args =
      train("--preset tiny", path("sample.h5"), path("out_mid"), {{"--steps", "5"}});
  const std::string mpirun = mpirun_zerotrain(1);
  const auto t0 = Clock::now();
  const RunResult r = run_command(mpirun + "train " + args + " : -np 1 -x ZT_DEBUG_FAIL_AT=1:3 " +
                                  ZT_BINARY + " train " + args);
  seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 30) << r.output;
  EXPECT_NE(r.output.find("error (rank 1 of 2): injected failure at step 3"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("COMMUNICATION TIMEOUT"), std::string::npos) << r.output;
  // Steps 1 and 2 ran on both ranks: rank 0's metrics has them, and not step 3's.
  std::ifstream metrics(path("out_mid") + "/metrics.jsonl");
  int64_t lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 2) << r.output;

  // With the optimizer state swapped to NVMe, the failing rank's swap file does not outlive it
  // (the abort skips the engine's destructor; the scratch-file registry removes it).
  const std::string swap = path("swap_mid");
  fs::remove_all(swap);
  fs::create_directories(swap);
  const std::string nvme_args = train("--preset tiny", path("sample.h5"), path("out_mid_nvme"),
                                      {{"--steps", "5"}, {"--zero-stage", "2"}}) +
                                " --offload-optimizer nvme --nvme-path " + swap;
  const RunResult nvme =
      run_command(mpirun + "train " + nvme_args + " : -np 1 -x ZT_DEBUG_FAIL_AT=1:3 " + ZT_BINARY +
                  " train " + nvme_args);
  EXPECT_NE(nvme.output.find("error (rank 1 of 2): injected failure at step 3"), std::string::npos)
      << nvme.output;
  for (const auto& entry : fs::directory_iterator(swap))
    EXPECT_EQ(entry.path().filename().string().find("zerotrain-rank00001-"), std::string::npos)
        << "the failing rank's swap file was left: " << entry.path();
}

// The two other startup failures the fault audit saw hang or time out: rank 1 alone given
// tokens beyond the model's vocabulary, or a model whose index misses a layer's tensor.
TEST_F(RankFailures, OneRankGivenBadDataOrAModelMissingALayerStopsTheJobAtOnce) {
  ASSERT_EQ(run_zerotrain("init --preset tiny --seed 1 --out " + path("whole")).exit_code, 0);
  // An llm.c shard (header: magic, version, count) whose GPT-2 tokens exceed tiny's 256.
  {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520, header[1] = 1, header[2] = 4096;
    std::vector<uint16_t> tokens(4096);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 1000);
    std::ofstream bin(path("gpt2.bin"), std::ios::binary);
    bin.write(reinterpret_cast<const char*>(header.data()), 1024);
    bin.write(reinterpret_cast<const char*>(tokens.data()), 8192);
  }
  ASSERT_EQ(run_zerotrain("prepare-data --bin " + path("gpt2.bin") + " --out " + path("gpt2.h5"))
                .exit_code,
            0);
  // The same model with a layer's tensor missing from its index.
  fs::remove_all(path("holed"));
  fs::copy(path("whole"), path("holed"));
  {
    const std::string index = path("holed") + "/model.h5.index.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(index));
    ASSERT_EQ(j["weight_map"].erase("model.layers.1.mlp.down_proj.weight"), 1u);
    std::ofstream(index) << j.dump();
  }
  const std::string model = "--model " + path("whole");
  for (const auto& [rank1, expected] : std::vector<std::pair<std::string, std::string>>{
           {train(model, path("gpt2.h5"), path("out_vocab")), "gpt2.h5"},
           {train("--model " + path("holed"), path("sample.h5"), path("out_holed")),
            "model.layers.1.mlp.down_proj.weight"}}) {
    double seconds = 0;
    const RunResult r =
        run_two(train(model, path("sample.h5"), path("out_rank0")), rank1, &seconds);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(seconds, 30) << r.output;
    EXPECT_NE(r.output.find("error (rank 1 of 2): "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("error (rank 0 of 2): rank 1 failed: "), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("COMMUNICATION TIMEOUT"), std::string::npos) << r.output;
  }
}

TEST_F(RankFailures, RanksThatDisagreeOnTheRunAreRefusedNamingTheSetting) {
  struct Case {
    std::string args0, args1, setting, value0, value1;
  };
  const std::string data = path("sample.h5");
  ASSERT_EQ(prepare_sample_dataset(path("other.h5")).exit_code, 0);
  ASSERT_EQ(run_zerotrain("prepare-data --text " + std::string(ZT_SOURCE_DIR) +
                          "/README.md --out " + path("readme.h5"))
                .exit_code,
            0);
  const std::string tiny = "--preset tiny";
  const Case cases[] = {
      {train(tiny, data, path("d1")), train(tiny, data, path("d1"), {{"--seq-len", "32"}}),
       "--seq-len", "'16'", "'32'"},
      {train(tiny, data, path("d2")), train(tiny, data, path("d2"), {{"--zero-stage", "2"}}),
       "--zero-stage", "'0'", "'2'"},
      {train(tiny, data, path("d3")), train(tiny, data, path("d3"), {{"--grad-accum", "3"}}),
       "--grad-accum", "'1'", "'3'"},
      {train(tiny, data, path("d4")), train(tiny, data, path("d4"), {{"--lr", "0.001"}}), "--lr",
       "'0.0003'", "'0.001'"},
      {train(tiny, data, path("d5")), train("--preset small", data, path("d5")), "--preset",
       "'tiny'", "'small'"},
      // The same data under another path is the same run; other data is not.
      {train(tiny, data, path("d6")), train(tiny, path("readme.h5"), path("d6")), "dataset", "",
       ""},
  };
  for (const Case& c : cases) {
    double seconds = 0;
    const RunResult r = run_two(c.args0, c.args1, &seconds);
    EXPECT_NE(r.exit_code, 0) << c.setting << ": " << r.output;
    EXPECT_LT(seconds, 30) << r.output;
    const std::string expected = c.setting + ": rank 0 " + c.value0;
    EXPECT_NE(r.output.find("the ranks disagree on the run: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(c.value0.empty() ? c.setting + ":" : expected), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("rank 1 " + c.value1), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(path("d1/final")));
  }
  double seconds = 0;
  const RunResult same = run_two(train(tiny, data, path("same")),
                                 train(tiny, path("other.h5"), path("same")), &seconds);
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

}  // namespace
}  // namespace zt
