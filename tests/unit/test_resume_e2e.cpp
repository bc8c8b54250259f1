// Resume beyond the bitwise continuation (test_checkpoint_e2e.cpp): how a resume ends a run
// stopped after its last save, refuses one past --steps or another run's checkpoint into an
// occupied --out, says how a stage change or smaller data goes on, and names the checkpoint to use
// when the one `latest` names is damaged.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_checkpoint_e2e_support.h"

namespace zt::checkpoint_e2e {
namespace {

// A kill after the last step's save (during the final evaluation, or final/ on a full disk)
// left the checkpoint at --steps without final/ or the report: the resume ends the run as the
// uninterrupted one ended, its evaluation and report included (the Slurm scripts read report.json
// as the job's success).
TEST_F(CheckpointE2E, AResumeAtTheLastStepWithoutTheRunsEndFinishesIt) {
  const std::string args = "--save-every 2 --eval-batches 2";
  ASSERT_EQ(train("end_ref", 4, args).exit_code, 0);
  ASSERT_EQ(train("end", 4, args).exit_code, 0);
  for (const char* name : {"final", "report.json", "report.md"})
    fs::remove_all(path("end/") + name);
  const RunResult resumed = train("end", 4, args + " --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("checkpoint is at step 4 of 4: training is complete; finishing"),
            std::string::npos)
      << resumed.output;
  ASSERT_TRUE(fs::exists(path("end/report.json"))) << resumed.output;
  const auto report = nlohmann::json::parse(read_file(path("end/report.json")));
  const auto reference = nlohmann::json::parse(read_file(path("end_ref/report.json")));
  EXPECT_EQ(report.at("eval").dump(), reference.at("eval").dump());
  EXPECT_EQ(report.at("final_loss").dump(), reference.at("final_loss").dump());
  EXPECT_EQ(model_bits(path("end/final")), model_bits(path("end_ref/final")));
  EXPECT_EQ(count_lines(path("end/metrics.jsonl")), 4u);
  // A checkpoint past --steps is refused, naming what would go on from it.
  const RunResult shorter = train("end", 3, args + " --resume auto");
  EXPECT_NE(shorter.exit_code, 0);
  EXPECT_NE(shorter.output.find("is at step 4, past --steps 3: give --steps 4 or more"),
            std::string::npos)
      << shorter.output;
}

// --resume of another run's checkpoint starts OUT afresh: refused where OUT holds a run of its own
// (the two would mix in metrics.jsonl, and its checkpoints would stay outside the new lineage),
// unless --overwrite, which replaces it.
TEST_F(CheckpointE2E, AnotherRunsCheckpointDoesNotContinueIntoAnOccupiedOut) {
  ASSERT_EQ(train("mine", 4, "--save-every 2").exit_code, 0);
  const std::string theirs = base_checkpoint();
  const RunResult mixed = train("mine", 6, "--save-every 2 --resume " + theirs);
  EXPECT_NE(mixed.exit_code, 0);
  EXPECT_NE(mixed.output.find("'" + path("mine") + "' holds a run of its own"), std::string::npos)
      << mixed.output;
  EXPECT_TRUE(fs::exists(checkpoint("mine", 4)));
  const RunResult replaced = train("mine", 6, "--save-every 2 --overwrite --resume " + theirs);
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  ASSERT_EQ(train("base_ref", 6, "--save-every 2").exit_code, 0);
  std::vector<std::string> want = loss_strings(path("base_ref/metrics.jsonl"));
  want.erase(want.begin());  // step 1 is the other run's: OUT's metrics go on from its step 2
  EXPECT_EQ(loss_strings(path("mine/metrics.jsonl")), want);
}

// At several ranks each ZeRO stage sums a step's gradients (and their norm) in an order of its
// own: a resume at another stage is warned of, as a new world size is. Onto smaller data
// (--allow-data-change), a data position past its end goes on at the next epoch's start.
TEST_F(CheckpointE2E, AResumeAtAnotherStageOrOntoSmallerDataSaysHowItGoesOn) {
  const std::string text = read_file(std::string(ZT_SOURCE_DIR) + "/inputs/data/sample.txt");
  std::ofstream(path("head.txt")) << text.substr(0, 500);  // 29 windows of 17 tokens
  ASSERT_EQ(run_zerotrain("prepare-data --text " + path("head.txt") + " --out " + path("small.h5"))
                .exit_code,
            0);
  const RunResult first = train("onto_small", 40, "--save-every 35 --stop-after-step 35");
  ASSERT_EQ(first.exit_code, 124) << first.output;
  std::string args = train_args("onto_small", 40, "--resume auto --allow-data-change");
  args.replace(args.find(path("sample.h5")), path("sample.h5").size(), path("small.h5"));
  const RunResult resumed = run_zerotrain(args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("data position 70 is past this dataset's end: the run continues "
                                "at epoch 1's start"),
            std::string::npos)
      << resumed.output;
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  const std::string mpi2 = mpirun_zerotrain(2);
  ASSERT_EQ(
      run_command(mpi2 + train_args("stage", 4, "--save-every 2 --stop-after-step 2")).exit_code,
      124);
  const RunResult staged =
      run_command(mpi2 + train_args("stage", 4, "--save-every 2 --resume auto --zero-stage 2"));
  ASSERT_EQ(staged.exit_code, 0) << staged.output;
  EXPECT_NE(staged.output.find("zero_stage: checkpoint 0, run 2 at 2 ranks without "
                               "--world-invariant"),
            std::string::npos)
      << staged.output;
}

// --resume auto on a checkpoint `latest` names that is damaged or gone: the refusal names the
// newest other complete checkpoint, which --resume PATH continues from.
TEST_F(CheckpointE2E, ADamagedLatestCheckpointIsRefusedNamingTheOneBeforeIt) {
  ASSERT_EQ(train("damaged", 6, "--save-every 2 --stop-after-step 4").exit_code, 124);
  const std::string hint = "--resume " + path("damaged/checkpoints") +
                           "/step-00000002, the newest other complete one, continues from there";
  for (const auto& file : fs::directory_iterator(checkpoint("damaged", 4)))  // rank files, halved
    if (file.path().filename() != "manifest.json")
      fs::resize_file(file.path(), fs::file_size(file.path()) / 2);
  RunResult r = train("damaged", 6, "--save-every 2 --resume auto");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(hint), std::string::npos) << r.output;
  fs::remove_all(checkpoint("damaged", 4));
  r = train("damaged", 6, "--save-every 2 --resume auto");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(hint), std::string::npos) << r.output;
  r = train("damaged", 6, "--save-every 2 --resume " + checkpoint("damaged", 2));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// OUT/checkpoints linked to scratch storage holds OUT's own checkpoints: --resume auto and
// --resume of one of them by its real path continue the run. A directory holding only what a job
// script wrote (its environment) holds no run: another run's checkpoint starts there.
TEST_F(CheckpointE2E, CheckpointsLinkedElsewhereAreOutsOwn) {
  ASSERT_EQ(train("linked", 6, "--save-every 2 --stop-after-step 4").exit_code, 124);
  fs::rename(path("linked/checkpoints"), path("scratch_checkpoints"));
  fs::create_directory_symlink(path("scratch_checkpoints"), path("linked/checkpoints"));
  RunResult r = train("linked", 6, "--save-every 2 --resume auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  r = train("linked", 8, "--save-every 2 --resume " + path("scratch_checkpoints/step-00000002"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(path("linked/previous-1/final")));
  fs::create_directories(path("job"));
  std::ofstream(path("job/slurm-env.attempt-0.txt")) << "SLURM_JOB_ID=1\n";
  r = train("job", 4, "--save-every 2 --resume " + base_checkpoint());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace zt::checkpoint_e2e
