// Checkpoints and resume through the zerotrain binary: a stopped-and-resumed run is bitwise the
// uninterrupted one; damaged or foreign checkpoints are refused naming the file or key; a failed
// or killed save leaves the previous checkpoint complete and `latest`; SIGUSR1 to one rank of a
// 4-rank job saves and exits 124; a rank that dies mid-step ends the job within the timeout.
// The mpirun cases are skipped when mpirun is not on PATH.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "io/fs_util.h"
#include "test_checkpoint_e2e_support.h"

namespace zt::checkpoint_e2e {
namespace {

using Clock = std::chrono::steady_clock;

// A shell command running in the background (its own process group, so that a test can end
// it and every process it started).
class BackgroundJob {
 public:
  explicit BackgroundJob(const std::string& cmd) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~BackgroundJob() {
    if (pid_ > 0 && exit_code_ == kRunning) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code, or -1 after `seconds` (the job keeps running) or when killed by a signal.
  int wait(double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (exit_code_ == kRunning && Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_)
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return exit_code_ == kRunning ? -1 : exit_code_;
  }
  bool running() {
    wait(0);
    return exit_code_ == kRunning;
  }

 private:
  static constexpr int kRunning = -1000;
  pid_t pid_ = -1;
  int exit_code_ = kRunning;
};

// Polls `ready` every 50 ms for up to `seconds`.
bool wait_until(double seconds, const std::function<bool()>& ready) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

// --keep-last 1 --keep-best: the newest checkpoint and the one of the lowest eval_loss stay. A high
// learning rate makes the loss climb after the first steps, so the best is not the newest.
TEST_F(CheckpointE2E, KeepBestKeepsTheCheckpointOfTheLowestEvalLoss) {
  const RunResult r = run_zerotrain(
      "train --preset tiny --data " + path("sample.h5") + " --out " + path("best") +
      " --steps 5 --seq-len 16 --micro-batch 2 --seed 7 --lr 0.2 --warmup-steps 0 --log-every 0 "
      "--save-every 1 --eval-every 1 --eval-batches 1 --keep-last 1 --keep-best");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int64_t best_step = 0;
  double best = INFINITY;
  for (const auto& line : read_jsonl(path("best/metrics.jsonl")))
    if (line["eval_loss"].get<double>() < best)
      best = line["eval_loss"].get<double>(), best_step = line["step"].get<int64_t>();
  ASSERT_LT(best_step, 5) << "the eval loss fell to the end: the test sees no best to keep";
  for (int64_t step = 1; step <= 5; ++step)
    EXPECT_EQ(fs::exists(checkpoint("best", step)), step == best_step || step == 5) << step;
  const nlohmann::json report = read_json_file(path("best/report.json"));
  EXPECT_EQ(report["eval_best"]["step"].get<int64_t>(), best_step) << report["eval_best"];
}

TEST_F(CheckpointE2E, StopAndResumeIsBitwiseTheUninterruptedRun) {
  const RunResult straight = train("straight", 20, "");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const RunResult first = train("pieces", 20, "--save-every 5 --keep-last 1 --stop-after-step 10");
  ASSERT_EQ(first.exit_code, 124) << first.output;
  EXPECT_EQ(latest("pieces"), "step-00000010");
  EXPECT_FALSE(fs::exists(checkpoint("pieces", 5))) << "--keep-last 1 kept step 5";
  EXPECT_EQ(count_lines(path("pieces/metrics.jsonl")), 10u);
  // The same command line again, as a requeued job gives it: resumed past step 10, it runs on.
  const RunResult second =
      train("pieces", 20, "--save-every 5 --keep-last 1 --stop-after-step 10 --resume auto");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  EXPECT_EQ(latest("pieces"), "step-00000020");
  EXPECT_FALSE(fs::exists(checkpoint("pieces", 10)));
  const auto want = loss_strings(path("straight/metrics.jsonl"));
  const auto got = loss_strings(path("pieces/metrics.jsonl"));
  ASSERT_EQ(want.size(), 20u);
  EXPECT_EQ(got, want);
  const auto lines = read_jsonl(path("pieces/metrics.jsonl"));
  EXPECT_EQ(lines.back()["tokens_seen"],
            read_jsonl(path("straight/metrics.jsonl")).back()["tokens_seen"]);
  EXPECT_TRUE(model_bits(path("pieces/final")) == model_bits(path("straight/final")))
      << "final weights differ";
  // Without --resume a non-empty --out is still refused.
  EXPECT_NE(train("pieces", 20, "").exit_code, 0);
}

// A resume from an older checkpoint continues that branch: `latest` names it at once (a kill
// before the next save resumes it again, not the abandoned run's newest), and --keep-last counts
// and removes only this branch's checkpoints, leaving the abandoned run's step 9 in place. A save
// removes what a killed one left of `latest`'s temporary file.
TEST_F(CheckpointE2E, ResumeFromAnOlderCheckpointKeepsToItsBranch) {
  ASSERT_EQ(train("branch", 12, "--save-every 3").exit_code, 0);
  const RunResult killed =
      train("branch", 12,
            "--save-every 2 --keep-last 1 --debug-kill-rank 0 --debug-kill-step 4 --resume " +
                checkpoint("branch", 3));
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  EXPECT_EQ(latest("branch"), "step-00000003");
  std::ofstream(path("branch/checkpoints/latest.tmp-1")) << "step-00000012\n";  // a kill's leftover
  const RunResult resumed = train("branch", 12, "--save-every 2 --keep-last 1 --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("step-00000003 at step 3"), std::string::npos) << resumed.output;
  for (int64_t step = 1; step <= 12; ++step)
    EXPECT_EQ(fs::exists(checkpoint("branch", step)), step == 9 || step == 12) << step;
  EXPECT_FALSE(fs::exists(path("branch/checkpoints/latest.tmp-1")));
  // Without `latest` (a kill between a save's rename and its `latest`), --resume auto takes the
  // newest complete checkpoint, saying so. Over a finished run without checkpoints it would
  // start afresh: refused, unless --overwrite.
  fs::remove(path("branch/checkpoints/latest"));
  const RunResult lost = train("branch", 12, "--resume auto");
  EXPECT_EQ(lost.exit_code, 0) << lost.output;
  EXPECT_NE(
      lost.output.find("resuming from the newest complete checkpoint, " + checkpoint("branch", 12)),
      std::string::npos)
      << lost.output;
  ASSERT_EQ(train("finished", 2, "").exit_code, 0);
  const RunResult finished = train("finished", 3, "--resume auto");
  EXPECT_NE(finished.exit_code, 0);
  EXPECT_NE(finished.output.find("holds a finished run (final/) that a new one would replace"),
            std::string::npos)
      << finished.output;
  ASSERT_EQ(train("finished", 3, "--resume auto --overwrite").exit_code, 0);
  EXPECT_EQ(count_lines(path("finished/metrics.jsonl")), 3u);
}

TEST_F(CheckpointE2E, CorruptedRankFileIsRefusedNamingIt) {
  const std::string copy = copy_of_base("corrupt");
  const std::string file = copy + "/rank-00000.h5";
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto size = static_cast<std::streamoff>(fs::file_size(file));
  f.seekg(size / 2);
  char byte = 0;
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x5a);
  f.seekp(size / 2);
  f.write(&byte, 1);
  f.close();
  const RunResult r = train("corrupt_out", 6, "--resume " + copy);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(file), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("corrupt"), std::string::npos) << r.output;
}

TEST_F(CheckpointE2E, TruncatedRankFileIsRefused) {
  const std::string copy = copy_of_base("truncated");
  const std::string file = copy + "/rank-00000.h5";
  fs::resize_file(file, fs::file_size(file) / 2);
  const RunResult r = train("truncated_out", 6, "--resume " + copy);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(file + "' has"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
}

// A save's temporary directory is not a checkpoint until its final rename, even when its files
// look complete: resume and consolidate refuse it (they loaded it).
TEST_F(CheckpointE2E, UnfinishedSaveDirectoryIsRefusedByResumeAndConsolidate) {
  const std::string unfinished = copy_of_base(".tmp-step-00000002");
  const std::string says = "is a checkpoint whose save did not finish";
  RunResult r = train("unfinished_out", 6, "--resume " + unfinished + "/");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  r = run_zerotrain("consolidate " + unfinished + "/. --out " + path("unfinished_model"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'" + unfinished), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(path("unfinished_model")));
}

TEST_F(CheckpointE2E, CheckpointOfAnotherModelIsRefusedNamingTheKey) {
  const std::string args = train_args("other_out", 6, "--resume " + base_checkpoint());
  const std::string small = args.substr(0, args.find("--preset tiny")) + "--preset small" +
                            args.substr(args.find("--preset tiny") + 13);
  const RunResult r = run_zerotrain(small);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("hidden_size: checkpoint 64, run 256"), std::string::npos) << r.output;
  // Settings that change the update rule are refused too, naming the setting.
  const RunResult wd = train("other_wd", 6, "--weight-decay 0.2 --resume " + base_checkpoint());
  EXPECT_EQ(wd.exit_code, 1) << wd.output;
  EXPECT_NE(wd.output.find("weight_decay: checkpoint 0.1, run 0.2"), std::string::npos)
      << wd.output;
}

// A resume whose LoRA options differ from the checkpoint's (forgotten, added or changed) is told
// which adapters the checkpoint trained and which options set them.
TEST_F(CheckpointE2E, ResumeWithOtherLoraOptionsNamesTheCheckpointsAdapters) {
  const RunResult r = train("other_lora", 6, "--lora-rank 4 --resume " + base_checkpoint());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("has no LoRA adapters, this run asks for {"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\"r\":4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resume with the adapter options it was trained with (--lora-rank"),
            std::string::npos)
      << r.output;
}

// The manifest records what computed the run; resuming on other arithmetic (here bf16
// activations after fp32) loads and trains, warning that the continuation will differ.
TEST_F(CheckpointE2E, ResumeWithOtherActivationStorageWarnsNamingIt) {
  const nlohmann::json hyper =
      nlohmann::json::parse(read_file(base_checkpoint() + "/manifest.json"))["hyperparameters"];
  EXPECT_EQ(hyper["backend"], "cpu") << hyper.dump();
  EXPECT_EQ(hyper["attention"], "cpu") << hyper.dump();
  EXPECT_EQ(hyper["activations"], "fp32") << hyper.dump();
  const RunResult r =
      train("other_activations", 4, "--activations bf16 --resume " + base_checkpoint());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("activations: checkpoint fp32, run bf16 (the continuation will differ"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("attention: checkpoint"), std::string::npos) << r.output;
}

TEST_F(CheckpointE2E, FailedWriteKeepsThePreviousCheckpoint) {
  ASSERT_EQ(train("failing", 6, "--save-every 2 --stop-after-step 2").exit_code, 124);
  const std::string manifest_before = read_file(checkpoint("failing", 2) + "/manifest.json");
  const RunResult r =
      train("failing", 6, "--save-every 2 --resume auto --debug-fail-checkpoint-write 0");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(path("failing/checkpoints/.tmp-step-00000004/rank-00000.h5")),
            std::string::npos)
      << r.output;
  EXPECT_EQ(latest("failing"), "step-00000002");
  EXPECT_FALSE(fs::exists(checkpoint("failing", 4)));
  EXPECT_FALSE(fs::exists(path("failing/checkpoints/.tmp-step-00000004")));
  EXPECT_EQ(read_file(checkpoint("failing", 2) + "/manifest.json"), manifest_before);
  // The previous checkpoint still verifies and resumes.
  const RunResult again = train("failing", 6, "--save-every 2 --resume auto");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(latest("failing"), "step-00000006");
}

TEST_F(CheckpointE2E, KillDuringStalledSaveKeepsLatestAndResumesBitwise) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string mpi2 = mpirun_zerotrain(2);
  const RunResult reference = run_command(mpi2 + train_args("kill_ref", 6, "--zero-stage 2"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const std::string args = "--zero-stage 2 --save-every 2 --comm-timeout 60 ";
  const RunResult first = run_command(mpi2 + train_args("kill", 6, args + "--stop-after-step 2"));
  ASSERT_EQ(first.exit_code, 124) << first.output;
  fs::create_directories(path("kill_pids"));
  BackgroundJob job("ZT_DEBUG_PID_DIR=" + path("kill_pids") + " " + mpi2 +
                    train_args("kill", 6, args + "--resume auto --debug-stall-checkpoint 60") +
                    " > " + path("kill.log") + " 2>&1");
  const std::string tmp = path("kill/checkpoints/.tmp-step-00000004");
  ASSERT_TRUE(wait_until(120, [&] {
    return (fs::exists(tmp + "/rank-00000.h5") && fs::exists(tmp + "/rank-00001.h5")) ||
           !job.running();
  }));
  ASSERT_TRUE(job.running()) << read_file(path("kill.log"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // well inside the stall
  const pid_t victim = std::stoi(read_file(path("kill_pids/rank-1.pid")));
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  EXPECT_NE(job.wait(90), 0) << read_file(path("kill.log"));
  EXPECT_EQ(latest("kill"), "step-00000002");
  EXPECT_FALSE(fs::exists(checkpoint("kill", 4)));
  const RunResult resumed = run_command(mpi2 + train_args("kill", 6, args + "--resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(loss_strings(path("kill/metrics.jsonl")), loss_strings(path("kill_ref/metrics.jsonl")));
}

// A checkpoint taken with the optimizer state on NVMe resumes without offload, and one taken
// without offload resumes onto NVMe; both continue like the uninterrupted run without offload.
TEST_F(CheckpointE2E, ResumesAcrossNvmeOffloadBitwise) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string mpi2 = mpirun_zerotrain(2);
  const std::string stage2 = "--zero-stage 2 --save-every 4 ";
  fs::create_directories(path("swap"));
  const std::string nvme = "--offload-optimizer nvme --nvme-path " + path("swap") +
                           " --offload-buffer-count 3 --sub-group-size 3000 ";
  const RunResult reference = run_command(mpi2 + train_args("nvme_ref", 8, "--zero-stage 2"));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto want = loss_strings(path("nvme_ref/metrics.jsonl"));
  ASSERT_EQ(want.size(), 8u);
  const std::pair<std::string, std::string> directions[] = {{nvme, ""}, {"", nvme}};
  for (const auto& [first_half, second_half] : directions) {
    const std::string out = first_half.empty() ? "to_nvme" : "from_nvme";
    const RunResult first =
        run_command(mpi2 + train_args(out, 8, stage2 + first_half + "--stop-after-step 4"));
    ASSERT_EQ(first.exit_code, 124) << first.output;
    EXPECT_EQ(latest(out), "step-00000004");
    const RunResult second =
        run_command(mpi2 + train_args(out, 8, stage2 + second_half + "--resume auto"));
    ASSERT_EQ(second.exit_code, 0) << second.output;
    EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
    EXPECT_EQ(loss_strings(path(out + "/metrics.jsonl")), want) << out;
    EXPECT_TRUE(model_bits(path(out + "/final")) == model_bits(path("nvme_ref/final")))
        << out << ": final weights differ";
  }
  EXPECT_TRUE(fs::is_empty(path("swap"))) << "swap files outlive their runs";
}

TEST_F(CheckpointE2E, SigusrToOneRankSavesExits124AndResumesBitwise) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string mpi4 = mpirun_zerotrain(4);
  const int steps = 150;  // far more than the steps a signal needs to arrive
  const std::string args = "--zero-stage 3 --comm-timeout 60 ";
  fs::create_directories(path("sig_pids"));
  BackgroundJob job("ZT_DEBUG_PID_DIR=" + path("sig_pids") + " " + mpi4 +
                    train_args("sig", steps, args) + " > " + path("sig.log") + " 2>&1");
  ASSERT_TRUE(wait_until(
      120, [&] { return count_lines(path("sig/metrics.jsonl")) >= 2 || !job.running(); }));
  ASSERT_TRUE(job.running()) << read_file(path("sig.log"));
  const pid_t victim = std::stoi(read_file(path("sig_pids/rank-2.pid")));
  ASSERT_EQ(kill(victim, SIGUSR1), 0);
  ASSERT_EQ(job.wait(120), 124) << read_file(path("sig.log"));
  const auto manifest =
      nlohmann::json::parse(read_file(path("sig/checkpoints/") + latest("sig") + "/manifest.json"));
  const int64_t step = manifest["step"].get<int64_t>();
  EXPECT_GE(step, 2);
  EXPECT_LT(step, steps) << "the signal arrived too late to test anything";
  EXPECT_EQ(static_cast<int64_t>(count_lines(path("sig/metrics.jsonl"))), step);
  const RunResult resumed = run_command(mpi4 + train_args("sig", steps, args + "--resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const RunResult reference = run_command(mpi4 + train_args("sig_ref", steps, args));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_EQ(loss_strings(path("sig/metrics.jsonl")), loss_strings(path("sig_ref/metrics.jsonl")));
  EXPECT_TRUE(model_bits(path("sig/final")) == model_bits(path("sig_ref/final")));
}

// Slurm's stop without the SIGUSR1 lead: SIGTERM to every rank, then the launcher's relay of its
// own a second later (mpirun's, by default), here while the stop's save is under way (stalled
// 3 s). The relay is the same request: the save completes, the job exits 124 and
// resumes bitwise (it once ended the ranks with 143 mid-save, no checkpoint written).
TEST_F(CheckpointE2E, ARelayedSigtermDuringTheStopSaveIsTheSameRequest) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string mpi2 = mpirun_zerotrain(2);
  const int steps = 150;
  const std::string args = "--zero-stage 2 --comm-timeout 60 ";
  fs::create_directories(path("term_pids"));
  BackgroundJob job("ZT_DEBUG_PID_DIR=" + path("term_pids") + " " + mpi2 +
                    train_args("term", steps, args + "--debug-stall-checkpoint 3") + " > " +
                    path("term.log") + " 2>&1");
  ASSERT_TRUE(wait_until(
      120, [&] { return count_lines(path("term/metrics.jsonl")) >= 2 || !job.running(); }));
  ASSERT_TRUE(job.running()) << read_file(path("term.log"));
  const pid_t ranks[] = {std::stoi(read_file(path("term_pids/rank-0.pid"))),
                         std::stoi(read_file(path("term_pids/rank-1.pid")))};
  for (pid_t rank : ranks) ASSERT_EQ(kill(rank, SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (pid_t rank : ranks) kill(rank, SIGTERM);  // the relay, inside the stalled save
  ASSERT_EQ(job.wait(120), 124) << read_file(path("term.log"));
  EXPECT_NE(read_file(path("term.log")).find("(SIGTERM); resume with --resume auto"),
            std::string::npos)
      << read_file(path("term.log"));
  const int64_t step = nlohmann::json::parse(read_file(path("term/checkpoints/") + latest("term") +
                                                       "/manifest.json"))["step"]
                           .get<int64_t>();
  EXPECT_LT(step, steps) << "the signal arrived too late to test anything";
  const RunResult resumed = run_command(mpi2 + train_args("term", steps, args + "--resume auto"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const RunResult reference = run_command(mpi2 + train_args("term_ref", steps, args));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_EQ(loss_strings(path("term/metrics.jsonl")), loss_strings(path("term_ref/metrics.jsonl")));
}

// `--resume auto` on a run that finished: nothing is trained. The same run (a requeue of a job
// that had finished) marks report.json current, which the Slurm script reads as success; another
// layout (a sweep row sent to a directory another row finished in) is warned of by name, and
// report.json is left as it was, so the script fails that row.
TEST_F(CheckpointE2E, AResumeThatFindsItsRunFinishedTrainsNothingAndSaysSo) {
  ASSERT_EQ(train("done", 4, "--save-every 2").exit_code, 0);
  const fs::path report = path("done/report.json");
  const auto back_then = fs::file_time_type::clock::now() - std::chrono::hours(1);
  fs::last_write_time(report, back_then);
  const RunResult again = train("done", 4, "--save-every 2 --resume auto");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("checkpoint is at step 4 of 4: nothing to train"), std::string::npos)
      << again.output;
  EXPECT_EQ(again.output.find("trained nothing"), std::string::npos) << again.output;
  EXPECT_GT(fs::last_write_time(report), back_then);
  fs::last_write_time(report, back_then);
  const RunResult other = train("done", 4, "--save-every 2 --resume auto --zero-stage 2");
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_NE(other.output.find("holds a finished run with zero_stage 0 (now 2): this invocation "
                              "trained nothing"),
            std::string::npos)
      << other.output;
  EXPECT_EQ(fs::last_write_time(report), back_then);
  EXPECT_EQ(count_lines(path("done/metrics.jsonl")), 4u);
}

TEST_F(CheckpointE2E, RankDeathEndsTheJobWithinTheTimeout) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const auto t0 = Clock::now();
  const RunResult r = run_command(
      mpirun_zerotrain(2) +
      train_args("death", 200, "--comm-timeout 20 --debug-kill-rank 1 --debug-kill-step 3"));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 20 + 40) << r.output;
  EXPECT_NE(r.output.find("SIGKILL at the start of step 3"), std::string::npos) << r.output;
  EXPECT_LT(count_lines(path("death/metrics.jsonl")), 3u);
}

}  // namespace
}  // namespace zt::checkpoint_e2e
