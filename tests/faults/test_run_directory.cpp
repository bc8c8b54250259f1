// The run directory is safe: one run at a time per --out, --overwrite replaces a previous run
// instead of mixing files, the metrics line of a checkpointed step survives a kill before it was
// written, and a resume on other data is refused unless asked for.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;

class RunDirectory : public SampleDataSuite<RunDirectory> {
 public:
  static constexpr const char* kDirPrefix = "zt_run_directory_";

 protected:
  static std::string train(const std::string& out, const std::string& extra) {
    return "train --preset tiny --data " + path("sample.h5") + " --out " + out +
           " --seq-len 16 --micro-batch 1 " + extra;
  }
  static std::string read_file(const std::string& file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(RunDirectory, ASecondRunOnTheSameOutIsRefusedNamingTheFirst) {
  const std::string out = path("busy"), pids = path("pids");
  fs::create_directories(pids);
  // The first run trains for long; its pid file says when it is up.
  const std::string first = "ZT_DEBUG_PID_DIR=" + pids + " " + ZT_BINARY + " " +
                            train(out, "--steps 1000000 --log-every 0") + " > " +
                            path("first.log") + " 2>&1 &";
  ASSERT_EQ(std::system(first.c_str()), 0);
  pid_t pid = 0;
  for (int i = 0; i < 200 && pid == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(pids + "/rank-0.pid");
    in >> pid;
  }
  ASSERT_GT(pid, 0) << read_file(path("first.log"));
  const RunResult second = run_zerotrain(train(out, "--steps 2 --overwrite"));
  kill(pid, SIGKILL);
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("is in use by another run (host "), std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("pid " + std::to_string(pid)), std::string::npos) << second.output;
  // Once the first is gone (its lock with it), the directory is free again.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const RunResult third = run_zerotrain(train(out, "--steps 2 --overwrite"));
  EXPECT_EQ(third.exit_code, 0) << third.output;
}

// A run refused before it writes anything leaves --out as it found it: a fresh --out is not
// created (a missing checkpoint to resume), and a directory of someone else's files gets no
// lock file (refused as not a run).
TEST_F(RunDirectory, ARunRefusedBeforeItStartsLeavesNoTrace) {
  const std::string fresh = path("fresh_out");
  fs::remove_all(fresh);
  const RunResult missing =
      run_zerotrain(train(fresh, "--steps 2 --resume " + path("no_such_checkpoint")));
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  EXPECT_FALSE(fs::exists(fresh)) << missing.output;

  const std::string theirs = path("their_files");
  fs::remove_all(theirs);
  fs::create_directories(theirs);
  std::ofstream(theirs + "/notes.txt") << "not a run\n";
  const RunResult refused = run_zerotrain(train(theirs, "--steps 2"));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("is not empty"), std::string::npos) << refused.output;
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(theirs))
    left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"notes.txt"}) << refused.output;
}

TEST_F(RunDirectory, OverwriteReplacesThePreviousRun) {
  const std::string out = path("replaced");
  ASSERT_EQ(run_zerotrain(train(out, "--steps 3 --save-every 1")).exit_code, 0);
  ASSERT_TRUE(fs::exists(out + "/checkpoints/step-00000003"));
  const RunResult r = run_zerotrain(train(out, "--steps 1 --overwrite"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out + "/checkpoints")) << "the old run's checkpoints were left";
  EXPECT_EQ(read_jsonl(out + "/metrics.jsonl").size(), 1u);
  EXPECT_TRUE(fs::exists(out + "/final/config.json"));
  // A directory that holds no run is not emptied by --overwrite.
  const std::string mine = path("not_a_run");
  fs::create_directories(mine);
  std::ofstream(mine + "/thesis.tex") << "keep me";
  const RunResult refused = run_zerotrain(train(mine, "--steps 1 --overwrite"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("holds no zerotrain run"), std::string::npos) << refused.output;
  EXPECT_EQ(read_file(mine + "/thesis.tex"), "keep me");
}

TEST_F(RunDirectory, TheMetricsLineOfACheckpointedStepIsNeverLost) {
  const std::string out = path("metrics");
  const RunResult stopped =
      run_zerotrain(train(out, "--steps 6 --save-every 2 --stop-after-step 4"));
  ASSERT_EQ(stopped.exit_code, 124) << stopped.output;
  std::vector<nlohmann::json> lines = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  // A kill between the checkpoint's commit and the line's write: step 4's line is missing.
  {
    std::ofstream rewrite(out + "/metrics.jsonl", std::ios::trunc);
    for (size_t i = 0; i < 3; ++i) rewrite << lines[i].dump() << "\n";
  }
  const RunResult resumed = run_zerotrain(train(out, "--steps 6 --save-every 2 --resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::vector<nlohmann::json> after = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(after.size(), 6u);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i]["step"], i + 1);
  EXPECT_EQ(after[3]["loss"].dump(), lines[3]["loss"].dump());
  EXPECT_EQ(after[3]["grad_norm"].dump(), lines[3]["grad_norm"].dump());
}

TEST_F(RunDirectory, ResumingOnOtherDataIsRefusedUnlessAllowed) {
  const std::string out = path("data_change");
  ASSERT_EQ(run_zerotrain(train(out, "--steps 4 --save-every 2 --stop-after-step 2")).exit_code,
            124);
  ASSERT_EQ(run_zerotrain("prepare-data --text " + std::string(ZT_SOURCE_DIR) +
                          "/README.md --out " + path("other.h5"))
                .exit_code,
            0);
  const std::string other = "train --preset tiny --data " + path("other.h5") + " --out " + out +
                            " --seq-len 16 --micro-batch 1 --steps 4 --save-every 2 --resume auto";
  const RunResult refused = run_zerotrain(other);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("dataset (use --allow-data-change to resume on other data)"),
            std::string::npos)
      << refused.output;
  const RunResult allowed = run_zerotrain(other + " --allow-data-change");
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
}

// A resumed run's report.json covers the whole run, as the uninterrupted run's does; a
// metrics.jsonl cut short before the checkpoint is resumed is named, not left as a silent gap.
TEST_F(RunDirectory, AResumedRunReportsTheWholeRunAndNamesAMetricsGap) {
  const std::string whole = path("report_whole"), split = path("report_split");
  const std::string args = " --steps 6 --save-every 2 --log-every 0 --eval-batches 0";
  ASSERT_EQ(run_zerotrain(train(whole, args)).exit_code, 0);
  run_zerotrain(train(split, args + " --stop-after-step 4"));  // stops (exit 124) after a save
  RunResult r = run_zerotrain(train(split, args + " --resume auto"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto a = nlohmann::json::parse(read_file(whole + "/report.json"));
  const auto b = nlohmann::json::parse(read_file(split + "/report.json"));
  for (const char* key : {"steps", "first_loss", "final_loss", "tokens_seen", "comm_bytes_total"})
    EXPECT_EQ(a.at(key), b.at(key)) << key;
  EXPECT_EQ(b.at("resumed_after_step"), 4);
  EXPECT_TRUE(b.at("steps_missing_from_metrics").empty());
  EXPECT_EQ(b.at("steps_in_figures"), 6);
  EXPECT_FALSE(b.contains("steps_at_other_layouts"));
  // The means leave out each process's first step: steps 1 and 5 here.
  const std::vector<nlohmann::json> lines = read_jsonl(split + "/metrics.jsonl");
  double sum = 0;
  for (const nlohmann::json& line : lines)
    if (line["step"] != 1 && line["step"] != 5) sum += line["tokens_per_s"].get<double>();
  EXPECT_EQ(lines[4].value("first_of_process", false), true);
  EXPECT_DOUBLE_EQ(b.at("mean_tokens_per_s").get<double>(), sum / 4);
  // The log cut to its first line before a resume from step 4: steps 2-3 are named as missing.
  const std::string gap = path("report_gap");
  run_zerotrain(train(gap, args + " --stop-after-step 4"));
  const std::string first_line =
      read_file(gap + "/metrics.jsonl").substr(0, read_file(gap + "/metrics.jsonl").find('\n') + 1);
  std::ofstream(gap + "/metrics.jsonl", std::ios::trunc) << first_line;
  r = run_zerotrain(train(gap, args + " --resume auto"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl lacks steps 2-3"), std::string::npos) << r.output;
  const auto c = nlohmann::json::parse(read_file(gap + "/report.json"));
  EXPECT_EQ(c.at("steps_missing_from_metrics"), nlohmann::json::array({"2-3"}));
  EXPECT_EQ(c.at("steps"), 4);  // the 4 steps the log holds
}

// A resume at another world size and stage: the report's losses cover the whole run, its
// throughput, time and traffic only the steps at the resumed run's layout (the 2-rank ZeRO-3 steps'
// all-gathers and reduce-scatters stay out of the 1-rank figures), and it names the others.
TEST_F(RunDirectory, AResumeAtAnotherLayoutKeepsTheEarlierStepsOutOfItsFigures) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string out = path("report_layouts");
  const std::string args = " --steps 6 --save-every 3 --log-every 0 --eval-batches 0";
  const RunResult first = run_command(mpirun_zerotrain(2) + train(out, args) +
                                      " --zero-stage 3 --stop-after-step 3 --comm-timeout 60");
  ASSERT_EQ(first.exit_code, 124) << first.output;
  const RunResult second = run_zerotrain(train(out, args + " --zero-stage 1 --resume auto"));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const std::vector<nlohmann::json> lines = read_jsonl(out + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  uint64_t earlier_bytes = 0, later_bytes = 0;
  double later_time = 0;
  for (const nlohmann::json& line : lines) {
    const bool earlier = line["step"] <= 3;
    EXPECT_EQ(line["world_size"], earlier ? 2 : 1) << line;
    EXPECT_EQ(line["zero_stage"], earlier ? 3 : 1) << line;
    EXPECT_EQ(line.value("first_of_process", false), line["step"] == 1 || line["step"] == 4);
    uint64_t bytes = 0;
    for (const auto& [op, b] : line["comm_bytes"].items()) bytes += b.get<uint64_t>();
    (earlier ? earlier_bytes : later_bytes) += bytes;
    if (!earlier) later_time += line["step_time_s"].get<double>();
  }
  ASSERT_GT(earlier_bytes, 0u);
  const auto report = nlohmann::json::parse(read_file(out + "/report.json"));
  EXPECT_EQ(report.at("steps"), 6);
  EXPECT_EQ(report.at("first_loss"), lines[0]["loss"]);
  EXPECT_EQ(report.at("steps_in_figures"), 3);
  uint64_t reported = 0;
  for (const auto& [op, b] : report.at("comm_bytes_total").items()) reported += b.get<uint64_t>();
  EXPECT_EQ(reported, later_bytes);
  EXPECT_DOUBLE_EQ(report.at("train_time_s").get<double>(), later_time);
  EXPECT_DOUBLE_EQ(
      report.at("mean_tokens_per_s").get<double>(),
      (lines[4]["tokens_per_s"].get<double>() + lines[5]["tokens_per_s"].get<double>()) / 2);
  EXPECT_EQ(report.at("steps_at_other_layouts"),
            nlohmann::json::parse(
                R"([{"first_step": 1, "last_step": 3, "world_size": 2, "zero_stage": 3}])"));
  EXPECT_NE(read_file(out + "/report.md")
                .find("Resumed at another layout: steps 1-3 ran at world size 2, ZeRO stage 3."),
            std::string::npos);
}

// A continuation with other settings than the finished run's (more steps here) moves that run's
// final/ and run.json to previous-1/ before writing its own, so that run.json always describes
// the final/ beside it; an identical resume keeps them.
TEST_F(RunDirectory, ADivergingContinuationKeepsThePreviousFinalApart) {
  const std::string out = path("diverge");
  ASSERT_EQ(run_zerotrain(train(out, "--steps 4 --save-every 2 --log-every 0")).exit_code, 0);
  const std::string before = read_file(out + "/run.json");
  RunResult r = run_zerotrain(train(out, "--steps 4 --save-every 2 --log-every 0 --resume auto"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(out + "/previous-1"));
  // The warm-up of a delayed update that is off (which older releases recorded as given) does
  // not change what the run computes: the continuation below does not name it.
  nlohmann::json record = nlohmann::json::parse(before);
  record["config"]["offload_optimizer_delay_after"] = 3;
  const std::string edited = record.dump(2) + "\n";
  std::ofstream(out + "/run.json") << edited;
  r = run_zerotrain(train(out, "--steps 6 --save-every 2 --log-every 0 --resume auto"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("changes schedule_steps, steps from"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(out + "/previous-1/run.json"), edited);
  EXPECT_TRUE(fs::exists(out + "/previous-1/final/model.h5.index.json"));
  EXPECT_TRUE(fs::exists(out + "/final/model.h5.index.json"));
  EXPECT_EQ(nlohmann::json::parse(read_file(out + "/run.json"))["config"]["steps"], 6);
  // Back to step 2 at another learning rate: the abandoned run's metrics past step 2, which the
  // continuation's log drops, go along with its final/, and so does its report.
  const std::string metrics = read_file(out + "/metrics.jsonl");
  const std::string report = read_file(out + "/report.json");
  r = run_zerotrain(train(out, "--steps 6 --save-every 2 --log-every 0 --lr 1e-3 --resume " + out +
                                   "/checkpoints/step-00000002"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("that model, its run.json, metrics and report moved to " + out +
                          "/previous-2/"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(read_file(out + "/previous-2/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(out + "/previous-2/report.json"), report);
  EXPECT_NE(read_file(out + "/metrics.jsonl"), metrics);
}

// A resume of another model, or with adapters its checkpoint lacks, is refused before the engine
// is built: under a 6 GB address-space limit, where the 1b preset's buffers (about 18 GB) could
// not be allocated, the refusal names the checkpoint and the difference.
TEST_F(RunDirectory, AResumeOfAnotherModelIsRefusedBeforeTheEngineIsBuilt) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit allows";
#endif
  const std::string out = path("other_model");
  ASSERT_EQ(run_zerotrain(train(out, "--steps 2 --save-every 2 --log-every 0")).exit_code, 0);
  const std::string limited = "ulimit -v 6000000 && " + std::string(ZT_BINARY) + " ";
  // A host whose libraries reserve more address space at start cannot run this check.
  const RunResult control = run_command(limited + train(out, "--steps 2 --resume auto"));
  if (control.exit_code != 0) GTEST_SKIP() << "a legitimate resume fails under the limit here";
  RunResult r = run_command(limited + "train --preset 1b --data " + path("sample.h5") + " --out " +
                            out + " --seq-len 16 --steps 4 --resume auto");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("step-00000002' holds a different model (hidden_size: checkpoint 64, "
                          "run 2048"),
            std::string::npos)
      << r.output;
  r = run_command(limited + train(out, "--steps 4 --resume auto --lora-rank 4"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("step-00000002' has no LoRA adapters, this run asks for"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace zt
