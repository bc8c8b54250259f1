// Consolidated bf16 models through the zerotrain binary: `consolidate` of a training checkpoint
// (singleton and mpirun -np 2/3, parallel HDF5 and --serial) gives the same model directory —
// same config.json and index, every tensor bit for bit — as the gathered bf16 weights of the
// live engine (OUT/final, OUT/consolidated/step-N); `eval --model` on it gives the end-of-run
// eval loss; it loads in `train --model`; a damaged checkpoint is refused naming the file. The
// mpirun cases are skipped when mpirun is not on PATH.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "io/model_dir.h"
#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Same config.json and index (hence the same shards) and every tensor bf16 and bit-identical.
// (The HDF5 files themselves differ in object timestamps and, with MPI-IO, in layout.)
void expect_same_model(const std::string& got, const std::string& want) {
  SCOPED_TRACE(got + " vs " + want);
  EXPECT_EQ(read_text(got + "/config.json"), read_text(want + "/config.json"));
  EXPECT_EQ(read_text(got + "/model.h5.index.json"), read_text(want + "/model.h5.index.json"));
  ModelDirReader a(got), b(want);
  for (const TensorInfo& t : b.layout().tensors()) {
    ASSERT_EQ(a.stored_dtype(t.name), DType::kBf16) << t.name;
    std::vector<bf16_t> x(static_cast<size_t>(t.numel)), y(x.size());
    a.read_tensor_bf16(t.name, x.data());
    b.read_tensor_bf16(t.name, y.data());
    EXPECT_TRUE(x == y) << "tensor " << t.name << " differs";
  }
}

class ConsolidateE2E : public SampleDataSuite<ConsolidateE2E> {
 public:
  static constexpr const char* kDirPrefix = "zt_consolidate_e2e_";

 protected:
  // Tiny preset, 4 steps of micro-batch 2 × seq-len 16, checkpoints and consolidated models at
  // steps 2 and 4, eval of 2 batches at the end. `launcher` is "" or mpirun_zerotrain(N).
  static RunResult train(const std::string& out, const std::string& launcher,
                         const std::string& extra) {
    const std::string args = "train --preset tiny --data " + path("sample.h5") + " --out " +
                             path(out) +
                             " --steps 4 --seq-len 16 --micro-batch 2 --seed 7 --lr 5e-3 "
                             "--warmup-steps 1 --log-every 0 --save-every 2 "
                             "--save-consolidated-every 2 --eval-batches 2 " +
                             extra;
    return launcher.empty() ? run_zerotrain(args) : run_command(launcher + args);
  }
  static std::string step_dir(const std::string& out, const char* kind, int step) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08d", step);
    return path(out) + "/" + kind + "/" + name;
  }
  static RunResult consolidate(const std::string& launcher, const std::string& checkpoint,
                               const std::string& out, const std::string& extra = "") {
    const std::string args = "consolidate " + checkpoint + " --out " + path(out) + " " + extra;
    return launcher.empty() ? run_zerotrain(args) : run_command(launcher + args);
  }
};

TEST_F(ConsolidateE2E, SingletonParallelAndSerialMatchTheLiveEngine) {
  const RunResult t = train("run", "", "");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string last = step_dir("run", "checkpoints", 4);
  RunResult r = consolidate("", last, "parallel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const bool parallel_hdf5 = r.output.find("\"parallel_hdf5\":true") != std::string::npos;
  std::printf("consolidate used parallel HDF5: %s\n", parallel_hdf5 ? "yes" : "no");
  r = consolidate("", last, "serial", "--serial");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"parallel_hdf5\":false"), std::string::npos) << r.output;
  expect_same_model(path("parallel"), path("run/final"));
  expect_same_model(path("serial"), path("run/final"));
  expect_same_model(step_dir("run", "consolidated", 4), path("run/final"));
  // An earlier checkpoint: the same as the model the engine consolidated at that step.
  r = consolidate("", step_dir("run", "checkpoints", 2), "step2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_model(path("step2"), step_dir("run", "consolidated", 2));
  // Several shards: both writers apply the same sharding rule.
  ASSERT_EQ(consolidate("", last, "sharded_p", "--shard-size-mb 0.04").exit_code, 0);
  ASSERT_EQ(consolidate("", last, "sharded_s", "--shard-size-mb 0.04 --serial").exit_code, 0);
  EXPECT_GT(ModelDirReader(path("sharded_p")).shard_files().size(), 2u);
  expect_same_model(path("sharded_p"), path("sharded_s"));
  // An existing output is refused without --overwrite and replaced with it.
  r = consolidate("", last, "parallel");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  EXPECT_EQ(consolidate("", step_dir("run", "checkpoints", 2), "parallel", "--overwrite").exit_code,
            0);
  expect_same_model(path("parallel"), path("step2"));
}

TEST_F(ConsolidateE2E, MpirunAnyWorldSizeMatchesTheLiveEngine) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not on PATH";
  const RunResult t = train("run2", mpirun_zerotrain(2), "--zero-stage 3");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string last = step_dir("run2", "checkpoints", 4);
  for (const auto& [np, extra, out] :
       {std::tuple{2, "", "np2_parallel"}, std::tuple{2, "--serial", "np2_serial"},
        std::tuple{3, "", "np3_parallel"}}) {
    const RunResult r = consolidate(mpirun_zerotrain(np), last, out, extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_same_model(path(out), path("run2/final"));
  }
  ASSERT_EQ(consolidate("", last, "singleton").exit_code, 0);
  expect_same_model(path("singleton"), path("run2/final"));
  expect_same_model(step_dir("run2", "consolidated", 4), path("run2/final"));
  ASSERT_EQ(consolidate("", step_dir("run2", "checkpoints", 2), "s2").exit_code, 0);
  expect_same_model(path("s2"), step_dir("run2", "consolidated", 2));
}

TEST_F(ConsolidateE2E, EvalOfTheConsolidatedModelIsTheEndOfRunEval) {
  const RunResult t = train("evalrun", "", "");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  RunResult r = consolidate("", step_dir("evalrun", "checkpoints", 4), "evalmodel");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json report = nlohmann::json::parse(read_text(path("evalrun/report.json")));
  const double want = report.at("eval").at("loss").get<double>();
  // The end-of-run eval scores batches of N·B = 2 windows of 16 tokens; eval prints JSON.
  r = run_zerotrain("eval --model " + path("evalmodel") + " --data " + path("sample.h5") +
                    " --batches 2 --micro-batch 2 --seq-len 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t line = r.output.rfind("\n{\"");  // eval's JSON line, after any note
  const size_t brace = line == std::string::npos ? 0 : line + 1;
  ASSERT_EQ(r.output.compare(brace, 2, "{\""), 0) << r.output;
  const double got = nlohmann::json::parse(r.output.substr(brace)).at("loss").get<double>();
  EXPECT_NEAR(got, want, 1e-6 * want) << r.output;
  // The consolidated directory is a model directory that training starts from.
  r = run_zerotrain("train --model " + path("evalmodel") + " --data " + path("sample.h5") +
                    " --out " + path("continued") +
                    " --steps 1 --seq-len 16 --micro-batch 2 --log-every 0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(ConsolidateE2E, DamagedCheckpointIsRefusedNamingTheFile) {
  const RunResult t = train("damaged_run", "", "");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::string copy = path("damaged");
  fs::copy(step_dir("damaged_run", "checkpoints", 4), copy, fs::copy_options::recursive);
  const std::string file = copy + "/rank-00000.h5";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = static_cast<std::streamoff>(fs::file_size(file));
  char byte = 0;
  f.seekg(size / 2);
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  f.seekp(size / 2);
  f.write(&byte, 1);
  f.close();
  for (const char* extra : {"", "--serial"}) {
    const RunResult r = consolidate("", copy, "from_damaged", extra);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(file), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(path("from_damaged"))) << extra;
  }
  if (have_mpirun()) {
    const RunResult r = consolidate(mpirun_zerotrain(2), copy, "from_damaged");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(file), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(path("from_damaged")));
  }
  // The run's directory names the checkpoint its latest tag names, as zero_to_fp32 reads a
  // checkpoints directory; its final model is no checkpoint at all.
  const RunResult from_run = consolidate("", path("damaged_run"), "from_run_dir");
  EXPECT_EQ(from_run.exit_code, 0) << from_run.output;
  EXPECT_NE(from_run.output.find("damaged_run/checkpoints/step-"), std::string::npos)
      << from_run.output;
  const RunResult r = consolidate("", path("damaged_run") + "/final", "from_final");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is not a training checkpoint (no manifest.json)"), std::string::npos)
      << r.output;
  // export and eval of the run's directory name what it holds: the checkpoint and final/.
  const RunResult exported =
      run_zerotrain("export " + path("damaged_run") + " --out " + path("exported"));
  EXPECT_EQ(exported.exit_code, 1) << exported.output;
  EXPECT_NE(exported.output.find("names the training checkpoint '" + path("damaged_run") +
                                 "/checkpoints/step-"),
            std::string::npos)
      << exported.output;
  EXPECT_NE(exported.output.find("the run's final model is '" + path("damaged_run") + "/final'"),
            std::string::npos)
      << exported.output;
  const RunResult generated = run_zerotrain("generate --model " + path("damaged_run") +
                                            " --prompt x --tokenizer byte --max-new-tokens 1");
  EXPECT_NE(generated.output.find("has no config.json (a training run's output: its model is '" +
                                  path("damaged_run") + "/final')"),
            std::string::npos)
      << generated.output;
}

}  // namespace
}  // namespace zt
