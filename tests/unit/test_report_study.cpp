// Scaling-study aggregation (report/study_report.h) and the per-rank timeline
// (report/step_timeline.h) on hand-written run directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/engine_spec_json.h"
#include "engine/estimator.h"
#include "io/fs_util.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "report/run_report.h"
#include "report/step_timeline.h"
#include "report/study_report.h"
#include "test_io_support.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class ReportStudy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zt_report_study_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A run directory of `ranks` ranks at `stage` whose steps after the first run at tokens_per_s.
  // `extra`: more configuration keys (run.json "config").
  std::string make_run(const std::string& name, int stage, int ranks, double tokens_per_s,
                       const nlohmann::json& extra = nlohmann::json::object()) {
    const fs::path run = dir_ / name;
    fs::create_directories(run);
    const nlohmann::json model = {{"hidden_size", 64},
                                  {"intermediate_size", 192},
                                  {"num_hidden_layers", 2},
                                  {"num_attention_heads", 4},
                                  {"num_key_value_heads", 2},
                                  {"vocab_size", 256},
                                  {"rms_norm_eps", 1e-5},
                                  {"rope_theta", 10000.0},
                                  {"max_position_embeddings", 1024},
                                  {"tie_word_embeddings", false}};
    nlohmann::json config = {{"zero_stage", stage},       {"micro_batch", 2},
                             {"grad_accum", 1},           {"seq_len", 32},
                             {"precision", "bf16"},       {"activation_checkpointing", "none"},
                             {"cpu_checkpointing", false}};
    config.update(extra);
    std::ofstream(run / "run.json")
        << nlohmann::json{{"config", config}, {"world_size", ranks}, {"model", model}}.dump();
    std::ofstream metrics(run / "metrics.jsonl");
    for (int step = 1; step <= 3; ++step)
      metrics << nlohmann::json{{"step", step},
                                {"loss", 5.5 - 0.1 * step},
                                {"tokens_per_s", step == 1 ? 1.0 : tokens_per_s},
                                {"mfu", nullptr},
                                {"peak_memory_bytes", {{"params", 1000 * stage}, {"grads", 10}}},
                                {"comm_bytes", {{"all_gather", 100}, {"reduce_scatter", 50}}},
                                {"time", {{"forward_s", 0.1}, {"checkpoint_s", 0.0}}}}
                     .dump()
              << "\n";
    std::ofstream(run / "report.json") << nlohmann::json{
        {"peak_memory_bytes_per_rank",
         {{{"params", 1000 * stage}},
          {{"params", 1500 * stage}}}}}.dump();
    return run.string();
  }

  fs::path dir_;
};

TEST_F(ReportStudy, RowsCarryThroughputEfficiencyMemoryAndBytes) {
  std::vector<RunData> runs;
  runs.push_back(load_run_dir(make_run("s3x4", 3, 4, 300)));
  runs.push_back(load_run_dir(make_run("s3x1", 3, 1, 100)));
  runs.push_back(load_run_dir(make_run("s2x2", 2, 2, 150)));
  const auto rows = scaling_rows(runs);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].run, "s2x2");  // sorted by stage, then ranks
  EXPECT_EQ(rows[1].run, "s3x1");
  EXPECT_EQ(rows[2].run, "s3x4");
  EXPECT_DOUBLE_EQ(rows[2].tokens_per_s, 300);  // the first step is left out of the mean
  EXPECT_DOUBLE_EQ(rows[2].tokens_per_s_per_rank, 75);
  ASSERT_TRUE(rows[2].efficiency.has_value());
  EXPECT_DOUBLE_EQ(*rows[2].efficiency, 0.75);  // vs the 1-rank stage-3 run
  EXPECT_EQ(rows[2].baseline_ranks, 1);
  EXPECT_DOUBLE_EQ(*rows[0].efficiency, 1.0);  // its own stage's smallest run
  EXPECT_EQ(rows[0].baseline_ranks, 2);
  EXPECT_FALSE(rows[0].mfu.has_value());
  EXPECT_EQ(rows[2].measured_memory["params"].get<uint64_t>(), 4500u);  // max over ranks
  EXPECT_EQ(rows[2].comm_bytes_per_step, 150u);
  EXPECT_TRUE(rows[2].estimated_memory.is_object());
  EXPECT_GT(rows[2].estimated_memory["params"].get<int64_t>(), 0);

  const std::string csv = scaling_table_csv(rows);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  EXPECT_NE(csv.find("s3x4,3,4,2,1,32,none,300.000,75.000,0.7500,1,,150,"), std::string::npos)
      << csv;
  const std::string md = scaling_table_markdown(rows);
  EXPECT_NE(md.find("0.750 (vs 1 rank)"), std::string::npos) << md;

  const auto files = write_study_report(runs, (dir_ / "out").string());
  for (const char* f : {"scaling.md", "scaling.csv", "scaling.json", "throughput_vs_ranks.svg",
                        "memory_per_rank.svg", "loss_curves.svg"})
    EXPECT_TRUE(fs::exists(dir_ / "out" / f)) << f;
  EXPECT_EQ(files.size(), 6u);
}

// Runs of other batch shapes are other comparisons: each row's efficiency is against the run of
// the fewest ranks of its own (the old rule took the stage's first run, giving the micro-batch-4
// runs 2x against a micro-batch-2 run); two runs named "run" are told apart by their parents.
TEST_F(ReportStudy, EfficiencyComparesRunsOfTheSameShapeOnly) {
  std::vector<RunData> runs;
  runs.push_back(load_run_dir(make_run("s3x1", 3, 1, 100)));
  runs.push_back(load_run_dir(make_run("s3x2", 3, 2, 180)));
  runs.push_back(load_run_dir(make_run("a/run", 3, 2, 400, {{"micro_batch", 4}})));
  runs.push_back(load_run_dir(make_run("b/run", 3, 1, 250, {{"micro_batch", 4}})));
  const auto rows = scaling_rows(runs);
  ASSERT_EQ(rows.size(), 4u);
  std::map<std::string, double> efficiency;
  for (const auto& r : rows) efficiency[r.run] = r.efficiency.value_or(-1);
  EXPECT_DOUBLE_EQ(efficiency["s3x1"], 1.0);
  EXPECT_DOUBLE_EQ(efficiency["s3x2"], 0.9);
  EXPECT_DOUBLE_EQ(efficiency["b/run"], 1.0);
  EXPECT_DOUBLE_EQ(efficiency["a/run"], 0.8);
  const std::string md = scaling_table_markdown(rows);
  EXPECT_NE(md.find("The runs are 2 comparisons"), std::string::npos) << md;
  EXPECT_EQ(scaling_table_markdown({rows[0], rows[1]}).find("comparisons:"), std::string::npos);
  write_study_report(runs, (dir_ / "out").string());
  const nlohmann::json table = nlohmann::json::parse(std::ifstream(dir_ / "out" / "scaling.json"));
  ASSERT_EQ(table.size(), 4u);
  for (const char* key :
       {"dir", "model", "seq_len", "checkpointing", "precision", "baseline_ranks", "final_loss"})
    EXPECT_TRUE(table[0].contains(key)) << key;
  EXPECT_EQ(table[0]["model"], "d64 L2 H4/2 V256");
  std::ifstream svg(dir_ / "out" / "loss_curves.svg");
  const std::string curves{std::istreambuf_iterator<char>(svg), {}};
  EXPECT_NE(curves.find("a/run"), std::string::npos);  // the loss curves' legend too
  EXPECT_NE(curves.find("b/run"), std::string::npos);
}

// A sweep task preempted or killed before its end (no report.json, or short of its --steps) is
// marked, named in a note with its last step, and so flagged in the CSV and JSON: its row once
// looked like any finished run's.
TEST_F(ReportStudy, UnfinishedRunsAreMarkedAndNamed) {
  const nlohmann::json eight = {{"steps", 8}};
  const std::string killed = make_run("killed", 2, 2, 100, eight);
  fs::remove(fs::path(killed) / "report.json");
  const nlohmann::json three = {{"steps", 3}};
  std::vector<RunData> runs = {load_run_dir(make_run("done", 2, 1, 60, three)),
                               load_run_dir(killed)};
  const auto rows = scaling_rows(runs);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].finished);
  EXPECT_FALSE(rows[1].finished);
  EXPECT_EQ(rows[1].last_step, 3);
  EXPECT_EQ(rows[1].planned_steps, 8);
  const std::string md = scaling_table_markdown(rows);
  EXPECT_NE(md.find("| killed (unfinished) |"), std::string::npos) << md;
  EXPECT_EQ(md.find("done (unfinished)"), std::string::npos) << md;
  EXPECT_NE(md.find("**Unfinished runs:** killed (step 3 of 8):"), std::string::npos) << md;
  EXPECT_EQ(scaling_table_markdown({rows[0]}).find("Unfinished"), std::string::npos);
  const std::string csv = scaling_table_csv(rows);
  EXPECT_NE(csv.find(",dir,last_step,planned_steps,finished\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",3,8,false\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",3,3,true\n"), std::string::npos) << csv;
  // A run that wrote report.json and ran its steps, but was given more on a resume that was
  // then killed, is unfinished too, with its report.json.
  const std::string extended = make_run("extended", 2, 1, 60, eight);
  const auto more = scaling_rows({load_run_dir(extended)});
  EXPECT_FALSE(more[0].finished);
  write_study_report(runs, (dir_ / "out").string());
  const nlohmann::json table = read_json_file((dir_ / "out" / "scaling.json").string());
  EXPECT_EQ(table[1]["finished"], false) << table.dump();
  EXPECT_EQ(table[1]["last_step"], 3) << table.dump();
}

// `zerotrain report SWEEP_DIR`: a directory that holds run directories (a sweep's outputs/) is
// read as all of them, in natural name order; one that holds none is refused naming what it lacks.
TEST_F(ReportStudy, ADirectoryOfRunsIsReadAsThem) {
  make_run("sweep/task_10", 1, 1, 180);  // the same stage and ranks: rows in the order read
  make_run("sweep/task_9", 1, 1, 100);
  fs::create_directories(dir_ / "sweep" / "data");  // not a run: left alone
  const auto r = testing::run_zerotrain("report " + (dir_ / "sweep").string() + " --out " +
                                        (dir_ / "study").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("holds 2 run directories"), std::string::npos) << r.output;
  const nlohmann::json table = read_json_file((dir_ / "study" / "scaling.json").string());
  ASSERT_EQ(table.size(), 2u) << table.dump();
  EXPECT_EQ(table[0]["run"], "task_9");  // natural order, as ls -v gives
  EXPECT_EQ(table[1]["run"], "task_10");
  EXPECT_DOUBLE_EQ(table[1]["scaling_efficiency"].get<double>(), 1.8);
  testing::expect_failure_naming(
      testing::run_zerotrain("report " + (dir_ / "sweep" / "data").string() + " --out " +
                             (dir_ / "study2").string()),
      {"is empty (not a zerotrain run directory)"});
}

// The mean leaves out each process's first step (a resume at the same layout starts a process at
// step 4), and falls back to every step when each is some process's first.
TEST_F(ReportStudy, TokensPerSecondLeaveOutEachProcesssFirstStep) {
  const fs::path run = make_run("twice", 0, 1, 0.0);
  const auto write = [&](const std::vector<int>& firsts) {
    std::ofstream metrics(run / "metrics.jsonl", std::ios::trunc);
    for (int step = 1; step <= 6; ++step) {
      nlohmann::json line = {{"step", step},
                             {"loss", 5.0},
                             {"tokens_per_s", step == 4 ? 1000.0 : 10.0 * step},
                             {"world_size", 1},
                             {"zero_stage", 0}};
      if (std::find(firsts.begin(), firsts.end(), step) != firsts.end())
        line["first_of_process"] = true;
      metrics << line.dump() << "\n";
    }
  };
  write({1, 4});
  EXPECT_DOUBLE_EQ(scaling_rows({load_run_dir(run.string())})[0].tokens_per_s,
                   (20.0 + 30.0 + 50.0 + 60.0) / 4);
  write({1, 2, 3, 4, 5, 6});  // six 1-step processes
  EXPECT_DOUBLE_EQ(scaling_rows({load_run_dir(run.string())})[0].tokens_per_s,
                   (10.0 + 20.0 + 30.0 + 1000.0 + 50.0 + 60.0) / 6);
}

// A run resumed at another layout (steps 1-3 at 2 ranks, ZeRO-3; steps 4-6 at 1 rank, stage 1, as
// its run.json says): its row's throughput, bytes and memory are those of steps 4-6, the mean
// without step 4, that process's first.
TEST_F(ReportStudy, ARunResumedAtAnotherLayoutIsRowedByItsLastLayoutsSteps) {
  const fs::path run = make_run("resumed", 1, 1, 0.0);
  std::ofstream metrics(run / "metrics.jsonl", std::ios::trunc);
  for (int step = 1; step <= 6; ++step) {
    const bool earlier = step <= 3;
    nlohmann::json line = {{"step", step},
                           {"loss", 5.5 - 0.1 * step},
                           {"tokens_per_s", earlier     ? 1000.0
                                            : step == 4 ? 1.0
                                                        : 40.0 + step},
                           {"mfu", nullptr},
                           {"peak_memory_bytes", {{"params", earlier ? 9000 : 700}}},
                           {"comm_bytes", {{"all_gather", earlier ? 5000 : 0}}},
                           {"world_size", earlier ? 2 : 1},
                           {"zero_stage", earlier ? 3 : 1}};
    if (step == 1 || step == 4) line["first_of_process"] = true;
    metrics << line.dump() << "\n";
  }
  metrics.close();
  std::ofstream(run / "report.json")
      << nlohmann::json{{"peak_memory_bytes_per_rank", {{{"params", 800}}}}}.dump();
  const auto rows = scaling_rows({load_run_dir(run.string())});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s, (45.0 + 46.0) / 2);
  EXPECT_EQ(rows[0].comm_bytes_per_step, 0u);
  EXPECT_EQ(rows[0].measured_memory["params"].get<uint64_t>(), 800u);
}

// Each row carries its end-of-training eval loss and the windows it scored (tokens / T); the table
// warns when the rows scored different windows, whose losses are then not comparable.
TEST_F(ReportStudy, RowsCarryTheEvalLossAndWarnWhenItsWindowsDiffer) {
  auto with_eval = [&](const std::string& name, int ranks, int64_t windows) {
    const std::string run = make_run(name, 3, ranks, 100);
    nlohmann::json report = read_json_file(run + "/report.json");
    report["eval"] = {{"loss", 4.25 + ranks}, {"tokens", windows * 32}, {"data", "held.h5"}};
    std::ofstream(run + "/report.json") << report.dump();
    return load_run_dir(run);
  };
  std::vector<RunData> runs = {with_eval("all_x1", 1, 13), with_eval("all_x2", 2, 13),
                               load_run_dir(make_run("none_x4", 3, 4, 100))};
  std::vector<ScalingRow> rows = scaling_rows(runs);
  ASSERT_TRUE(rows[0].eval_loss.has_value());
  EXPECT_DOUBLE_EQ(*rows[1].eval_loss, 6.25);
  EXPECT_EQ(rows[1].eval_windows, 13);
  EXPECT_EQ(rows[1].eval_data, "held.h5");
  EXPECT_FALSE(rows[2].eval_loss.has_value());
  const std::string csv = scaling_table_csv(rows);
  EXPECT_NE(csv.find(",final_loss,eval_loss,eval_windows,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",5.200000,6.250000,13,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",5.200000,,,"), std::string::npos) << csv;  // none_x4: no evaluation
  std::string md = scaling_table_markdown(rows);
  EXPECT_NE(md.find("| 6.2500 (13) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| n/a |"), std::string::npos) << md;
  EXPECT_EQ(md.find("not comparable"), std::string::npos) << md;  // the same 13 windows
  runs.push_back(with_eval("k_x4", 4, 16));  // --eval-batches K at 4 ranks: other windows
  md = scaling_table_markdown(scaling_rows(runs));
  EXPECT_NE(md.find("The eval losses are not comparable"), std::string::npos) << md;
  write_study_report(runs, (dir_ / "out").string());
  const nlohmann::json table = read_json_file((dir_ / "out" / "scaling.json").string());
  EXPECT_EQ(table[1]["eval"]["windows"].get<int64_t>(), 13) << table.dump();
  EXPECT_TRUE(table[2]["eval"].is_null()) << table.dump();
}

// The estimate beside a world-invariant run counts the mode's buffers (the micro-batch tree, the
// norm blocks, the per-micro-batch reduce slots): it differs from the same run's without it.
TEST_F(ReportStudy, EstimateFollowsTheWorldInvariantMode) {
  const nlohmann::json accum = {{"grad_accum", 4}};
  nlohmann::json invariant = accum;
  invariant["world_invariant"] = true;
  const RunData plain = load_run_dir(make_run("plain", 1, 2, 100, accum));
  const RunData inv = load_run_dir(make_run("invariant", 1, 2, 100, invariant));
  const auto rows = scaling_rows({plain, inv});
  ASSERT_EQ(rows.size(), 2u);
  const nlohmann::json& a =
      rows[0].run == "plain" ? rows[0].estimated_memory : rows[1].estimated_memory;
  const nlohmann::json& b =
      rows[0].run == "plain" ? rows[1].estimated_memory : rows[0].estimated_memory;
  ASSERT_TRUE(a.is_object() && b.is_object());
  EXPECT_NE(a["grads"].get<int64_t>(), b["grads"].get<int64_t>());
  EXPECT_GT(b["buffers"].get<int64_t>(), a["buffers"].get<int64_t>());
}

// A run.json that records its engine (train writes "engine", engine/engine_spec_json.h): the
// estimate beside it is that engine's, here with its head alone training, which the options'
// reconstruction (stage, batch, precision, ...) cannot see.
TEST_F(ReportStudy, EstimateReadsTheRecordedEngine) {
  const std::string dir = make_run("frozen", 2, 2, 100);
  nlohmann::json run = read_json_file(dir + "/run.json");
  EngineSpec spec;
  spec.model = ModelConfig::from_hf_json(run.at("model"), "test");
  spec.zero.stage = 2;
  spec.micro_batch = 2;
  spec.seq_len = 32;
  spec.trainable = TrainableSet::from_patterns(ParamLayout(spec.model), {"^lm_head\\."}, {});
  run["engine"] = engine_spec_to_json(spec);
  std::ofstream(dir + "/run.json") << run.dump();
  const auto rows = scaling_rows({load_run_dir(dir), load_run_dir(make_run("older", 2, 2, 100))});
  ASSERT_EQ(rows.size(), 2u);
  const nlohmann::json& frozen =
      rows[0].run == "frozen" ? rows[0].estimated_memory : rows[1].estimated_memory;
  const nlohmann::json& older =
      rows[0].run == "frozen" ? rows[1].estimated_memory : rows[0].estimated_memory;
  const MemoryEstimate e = estimate_memory(spec, 2);
  ASSERT_TRUE(frozen.is_object() && older.is_object());
  EXPECT_EQ(frozen["grads"].get<int64_t>(), e.grads);
  EXPECT_EQ(frozen["optimizer"].get<int64_t>(), e.optimizer);
  EXPECT_EQ(frozen["buffers"].get<int64_t>(), e.buffers);
  // The older record (no "engine") trains every tensor: more gradient and optimizer state.
  EXPECT_GT(older["optimizer"].get<int64_t>(), e.optimizer);
}

TEST_F(ReportStudy, EmptyOrForeignDirectoriesAreRejectedByName) {
  fs::create_directories(dir_ / "empty");
  fs::create_directories(dir_ / "foreign");
  std::ofstream(dir_ / "foreign" / "notes.txt") << "hello";
  for (const char* name : {"empty", "foreign", "missing"}) {
    try {
      load_run_dir((dir_ / name).string());
      ADD_FAILURE() << name << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find((dir_ / name).string()), std::string::npos) << e.what();
    }
  }
}

TEST(StepTimeline, ChromeTraceAndSkewFromPerRankPhases) {
  std::vector<std::vector<StepPhases>> per_rank(3);
  for (int r = 0; r < 3; ++r)
    for (int step = 1; step <= 4; ++step)
      per_rank[static_cast<size_t>(r)].push_back({step, step * 1.0, r == 2 ? 0.5 : 0.25, 0.01, 0.1,
                                                  0.1, 0.04, 0.02, step == 2 ? 0.2 : 0,
                                                  step == 2 ? 0.3 : 0});
  const nlohmann::json trace = chrome_trace(per_rank);
  int spans = 0, checkpoints = 0, evals = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++spans;
    EXPECT_GT(e["dur"].get<int64_t>(), 0);
    if (e["name"] == "checkpoint") {
      ++checkpoints;  // after step 2's eval: starts at 2 s + the step + 0.2 s
      const double step_s = e["pid"] == 2 ? 0.5 : 0.25;
      EXPECT_EQ(e["ts"].get<int64_t>(), std::llround((2.0 + step_s + 0.2) * 1e6));
    }
    if (e["name"] == "eval") {
      ++evals;
      EXPECT_EQ(e["dur"].get<int64_t>(), 200000);
    }
  }
  // step, data, fwd, bwd, opt, comm per step + 3 evals + 3 checkpoints
  EXPECT_EQ(spans, 3 * 4 * 6 + 3 + 3);
  EXPECT_EQ(checkpoints, 3);
  EXPECT_EQ(evals, 3);
  const nlohmann::json skew = rank_skew(per_rank);
  EXPECT_DOUBLE_EQ(skew["mean_slowest_over_median"].get<double>(), 2.0);
  EXPECT_EQ(skew["most_often_slowest_rank"].get<int>(), 2);
  EXPECT_NE(rank_skew_markdown(skew).find("rank 2 (4 of 4 steps)"), std::string::npos);
}

// --eval-every's figures (docs/fine-tuning.md): a metrics line's evaluation reads back as written
// (a resumed run's earlier steps), the summary lists it in report.json's eval_history, and
// report.md's Evaluation table shows it beside the end-of-training figure; a step without one
// writes no eval field.
TEST(RunSummary, EvaluationsReadBackIntoTheHistoryAndTheReportTable) {
  StepRecord plain;
  plain.step = 1;
  plain.stats.loss = 3.5;
  StepRecord evaluated;
  evaluated.step = 2;
  evaluated.stats.loss = 3.0;
  evaluated.eval = StepEval{2.5, 64, 0.125};
  EXPECT_FALSE(plain.to_json().contains("eval_loss"));
  EXPECT_FALSE(plain.to_json()["time"].contains("eval_s"));
  const nlohmann::json line = evaluated.to_json();
  EXPECT_EQ(line["eval_loss"].get<double>(), 2.5);
  EXPECT_EQ(line["eval_loss_tokens"].get<int64_t>(), 64);
  EXPECT_EQ(line["time"]["eval_s"].get<double>(), 0.125);
  RunSummary summary;
  summary.add(StepRecord::from_json(plain.to_json()));
  summary.add(StepRecord::from_json(line));
  nlohmann::json report = summary.to_json({}, 1.0);
  ASSERT_EQ(report["eval_history"].size(), 1u);
  EXPECT_EQ(report["eval_history"][0]["step"].get<int64_t>(), 2);
  EXPECT_EQ(report["eval_history"][0]["loss"].get<double>(), 2.5);
  EXPECT_EQ(report["eval_history"][0]["loss_tokens"].get<int64_t>(), 64);
  report["eval"] = {{"loss", 2.25}};
  const std::string md = report_markdown(report);
  EXPECT_NE(md.find("| 2 | 2.5000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| end of training | 2.2500 |"), std::string::npos) << md;
  EXPECT_EQ(report_markdown(RunSummary().to_json({}, 1.0)).find("Evaluation"), std::string::npos);
}

// report.json's eval_best: the lowest eval_loss of the history, the earliest of equal ones.
TEST(RunSummary, TheLowestEvaluationIsNamedWithItsStep) {
  RunSummary summary;
  const double losses[] = {3.0, 2.0, 2.5, 2.0, NAN};
  for (int64_t step = 1; step <= 5; ++step) {
    StepRecord r;
    r.step = step;
    r.stats.loss = 4.0;
    r.eval = StepEval{losses[step - 1], 64, 0.1};
    summary.add(r);
  }
  const nlohmann::json report = summary.to_json({}, 1.0);
  EXPECT_EQ(report["eval_best"]["step"].get<int64_t>(), 2) << report["eval_best"].dump();
  EXPECT_EQ(report["eval_best"]["loss"].get<double>(), 2.0);
  EXPECT_NE(report_markdown(report).find("Lowest: after step 2 (2.0000)."), std::string::npos)
      << report_markdown(report);
  EXPECT_FALSE(RunSummary().to_json({}, 1.0).contains("eval_best"));
}

// The fused attention's tally as report.json and report.md give it (CudaRunReport.* checks a CUDA
// backend's own figures); a CPU backend tallies nothing, so its report has neither row.
TEST(RunSummary, AttentionGraphsReadBackIntoTheReportTable) {
  const nlohmann::json graphs = attention_graphs_json({6, 1.25, 4, 0.875, 3 << 20});
  EXPECT_EQ(graphs, nlohmann::json({{"built", 6},
                                    {"build_s", 1.25},
                                    {"built_in_steps", 2},
                                    {"build_s_in_steps", 0.375},
                                    {"workspace_bytes", 3 << 20}}));
  nlohmann::json report = RunSummary().to_json({}, 1.0);
  EXPECT_EQ(report_markdown(report).find("attention graphs"), std::string::npos);
  report["attention_graphs"] = graphs;
  const std::string md = report_markdown(report);
  EXPECT_NE(md.find("| cuDNN attention graphs, rank 0 (built; build seconds; those in steps) | "
                    "6; 1.25; 2 in 0.38 s |"),
            std::string::npos)
      << md;
  const BackendTallies cpu = backend_tallies(*make_cpu_backend());
  EXPECT_TRUE(cpu.fields.empty()) << cpu.fields.dump();
  EXPECT_TRUE(cpu.log_lines.empty());
}

}  // namespace
}  // namespace zt
