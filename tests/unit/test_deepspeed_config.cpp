// DeepSpeed JSON mapping (app/deepspeed_config.h): the example configs, "auto" resolution,
// the batch-size rule, warnings and errors naming the key, and `train --deepspeed` end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/error_text.h"
#include "app/deepspeed_config.h"
#include "engine/loss_scaler.h"
#include "test_deepspeed_support.h"
#include "test_io_support.h"
#include "test_train_support.h"
#include "util/error.h"

namespace zt {
namespace {

using nlohmann::json;

std::string config_path(const std::string& name) {
  return std::string(ZT_SOURCE_DIR) + "/inputs/configs/" + name;
}

using deepspeed_test::contains;
using deepspeed_test::parse_error;

TEST(DeepSpeedConfig, ExampleConfigsParse) {
  const ModelConfig model = preset_config("small");
  const DeepSpeedConfig z2 = load_deepspeed_config(config_path("zero2.json"), model);
  EXPECT_EQ(z2.option("zero-stage"), "2");
  EXPECT_EQ(z2.option("reduce-bucket-size"), "500000000");
  EXPECT_EQ(z2.option("allgather-bucket-size"), "500000000");
  EXPECT_EQ(z2.option("overlap-comm"), "true");
  EXPECT_EQ(z2.option("precision"), "bf16");
  EXPECT_EQ(z2.option("beta2"), "0.95");
  EXPECT_EQ(z2.cos_min_ratio, 0.1);
  EXPECT_TRUE(z2.warnings.empty()) << z2.warnings.front();

  const DeepSpeedConfig z3 = load_deepspeed_config(config_path("zero3.json"), model);
  EXPECT_EQ(z3.option("zero-stage"), "3");
  EXPECT_EQ(z3.sub_group_size, 1'000'000'000);
  EXPECT_TRUE(z3.gather_16bit_weights_on_model_save);
  EXPECT_FALSE(z3.option("lr").has_value());  // "auto": the command line's value
  EXPECT_TRUE(z3.warnings.empty()) << z3.warnings.front();

  const DeepSpeedConfig off = load_deepspeed_config(config_path("zero3-offload.json"), model);
  EXPECT_EQ(off.offload_optimizer.device, "cpu");
  EXPECT_TRUE(off.offload_optimizer.pin_memory);
  EXPECT_EQ(off.offload_param.device, "cpu");
  EXPECT_EQ(off.option("activation-checkpointing"), "full");
  EXPECT_EQ(off.option("cpu-checkpointing"), "true");
  EXPECT_EQ(off.option("offload-optimizer"), "cpu");
}

TEST(DeepSpeedConfig, AutoSizesFollowTheHiddenSize) {
  const ModelConfig model = preset_config("small");  // d = 256
  const DeepSpeedConfig c = load_deepspeed_config(config_path("zero3.json"), model);
  EXPECT_EQ(c.option("reduce-bucket-size"), std::to_string(256 * 256));
  EXPECT_EQ(c.option("prefetch-bucket-size"), std::to_string(256 * 256 * 9 / 10));
  EXPECT_EQ(c.option("param-persistence-threshold"), std::to_string(10 * 256));
  EXPECT_EQ(c.option("max-live-parameters"), "1000000000");
}

TEST(DeepSpeedConfig, BatchSizeRule) {
  BatchSizeRule rule;
  rule.source = "ds.json";
  int64_t micro = 4, accum = 1;
  apply_batch_size_rule(rule, 2, micro, accum);  // no train_batch_size: unchanged
  EXPECT_EQ(micro, 4);
  EXPECT_EQ(accum, 1);

  rule.train_batch_size = 32;
  rule.micro_batch = 4;
  apply_batch_size_rule(rule, 2, micro, accum);
  EXPECT_EQ(accum, 4);
  rule.micro_batch.reset();
  rule.grad_accum = 2;
  apply_batch_size_rule(rule, 4, micro, accum);
  EXPECT_EQ(micro, 4);
  EXPECT_EQ(accum, 2);
  rule.grad_accum.reset();
  apply_batch_size_rule(rule, 8, micro, accum);
  EXPECT_EQ(micro, 4);
  EXPECT_EQ(accum, 1);

  rule.micro_batch = 4;
  rule.grad_accum = 2;
  try {
    apply_batch_size_rule(rule, 2, micro, accum);
    FAIL() << "contradiction accepted";
  } catch (const Error& e) {
    for (const char* n : {"ds.json", "32", "4", "2", "16"})
      EXPECT_TRUE(contains(e.what(), n)) << e.what();
  }
  rule.grad_accum.reset();
  rule.micro_batch = 5;
  try {
    apply_batch_size_rule(rule, 2, micro, accum);
    FAIL() << "indivisible batch accepted";
  } catch (const Error& e) {
    for (const char* n : {"32", "5", "10", "divisible"})
      EXPECT_TRUE(contains(e.what(), n)) << e.what();
  }
}

TEST(DeepSpeedConfig, BatchSizeRuleProductsDoNotOverflow) {
  BatchSizeRule rule;
  rule.source = "ds.json";
  rule.train_batch_size = 4;
  rule.micro_batch = INT64_MAX / 2;
  rule.grad_accum = 4;
  int64_t micro = 1, accum = 1;
  try {
    apply_batch_size_rule(rule, 2, micro, accum);
    FAIL() << "an overflowing product was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "more than 2^63")) << e.what();
  }
  rule.grad_accum.reset();
  EXPECT_THROW(apply_batch_size_rule(rule, 4, micro, accum), Error);
}

// A value the file set and validation refused names the file (the option alone would point at a
// command line that does not hold it).
TEST(DeepSpeedConfig, ValidationErrorsNameTheFileThatSetTheValue) {
  const std::vector<std::string> set = {"lr", "clip"};
  EXPECT_EQ(attributed_to_deepspeed_file("train: --lr must be positive", "ds.json", set),
            "train: --lr must be positive (the value comes from DeepSpeed config 'ds.json')");
  // --lr-schedule is another option: not attributed.
  EXPECT_EQ(attributed_to_deepspeed_file("train: --lr-schedule 'x'", "ds.json", set),
            "train: --lr-schedule 'x'");
  EXPECT_EQ(attributed_to_deepspeed_file("train: --steps must be >= 1", "ds.json", set),
            "train: --steps must be >= 1");
  // The loss scaler's refusals name the option beside the fp16 key, so they are attributed too.
  LossScaleConfig scaling;
  scaling.initial_scale_power = 1000;
  try {
    scaling.validate();
    FAIL() << "initial_scale_power 1000 was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(attributed_to_deepspeed_file(e.what(), "ds.json", {"initial-scale-power"}),
                         "(the value comes from DeepSpeed config 'ds.json')"))
        << e.what();
  }
}

TEST(DeepSpeedConfig, UnknownTopLevelKeysWarnWithTheirPath) {
  const json j = {
      {"zero_optimization", {{"stage", 1}}}, {"mystery", true}, {"bf16", {{"enabled", true}}}};
  const DeepSpeedConfig c = parse_deepspeed_config(j, "x.json", preset_config("tiny"));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_TRUE(contains(c.warnings[0], "'mystery'")) << c.warnings[0];
  EXPECT_EQ(c.option("zero-stage"), "1");
}

TEST(DeepSpeedConfig, BadValuesAreErrorsNamingTheKey) {
  EXPECT_TRUE(contains(parse_error({{"zero_optimization", {{"reduce_bucket_size", -5}}}}),
                       "zero_optimization.reduce_bucket_size"));
  EXPECT_TRUE(contains(parse_error({{"zero_optimization", {{"allgather_bucket_size", -5e8}}}}),
                       "zero_optimization.allgather_bucket_size"));
  const std::string stage = parse_error({{"zero_optimization", {{"stage", 4}}}});
  EXPECT_TRUE(contains(stage, "zero_optimization.stage") && contains(stage, "4")) << stage;
  const std::string both =
      parse_error({{"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}});
  EXPECT_TRUE(contains(both, "fp16.enabled") && contains(both, "bf16.enabled")) << both;
  const std::string fp16_masters =
      parse_error({{"fp16", {{"enabled", true}, {"fp16_master_weights_and_grads", true}}}});
  EXPECT_TRUE(contains(fp16_masters, "fp16.fp16_master_weights_and_grads")) << fp16_masters;
  EXPECT_TRUE(contains(parse_error({{"train_batch_size", 2.5}}), "train_batch_size"));
  EXPECT_TRUE(contains(parse_error({{"optimizer", {{"type", "Lamb"}}}}), "optimizer.type"));
  EXPECT_TRUE(contains(
      parse_error({{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_steps", 0}}}}}}),
      "scheduler.params.warmup_num_steps"));
  EXPECT_EQ(parse_error({{"fp16", {{"enabled", false}}}}), "");
}

// DeepSpeed reads its configs with hjson: comments (#, //, /* */) and trailing commas are
// accepted; a key twice in one object is refused (DeepSpeed's object_pairs_hook refuses it), as is
// a switch set to null, which DeepSpeed would read as false without a word.
TEST(DeepSpeedConfig, HjsonCommentsDuplicateKeysAndNullSwitches) {
  testing::TempDir tmp;
  const std::string file = tmp / "ds.json";
  auto write = [&](const std::string& text) { std::ofstream(file) << text; };
  write(R"({
  # ZeRO-3 for the 7B run
  "zero_optimization": {"stage": 3, /* the default bucket */ "overlap_comm": true,},
  // bf16 on the GPUs
  "bf16": {"enabled": true},
  "gradient_clipping": 1.0, "note": "a # and // inside a string stay"
})");
  const DeepSpeedConfig c = load_deepspeed_config(file, preset_config("tiny"));
  EXPECT_EQ(c.option("zero-stage"), "3");
  EXPECT_EQ(c.option("precision"), "bf16");
  write(R"({"zero_optimization": {"stage": 1, "stage": 3}})");
  std::string e = error_of([&] { load_deepspeed_config(file, preset_config("tiny")); });
  EXPECT_TRUE(contains(e, "key 'stage' appears twice") && contains(e, file)) << e;
  write(R"({"bf16": {"enabled": null}})");
  e = error_of([&] { load_deepspeed_config(file, preset_config("tiny")); });
  EXPECT_TRUE(contains(e, "bf16.enabled") && contains(e, "null")) << e;
  write("{\"a\": " + std::string(1000, '[') + std::string(1000, ']') + "}");
  e = error_of([&] { load_deepspeed_config(file, preset_config("tiny")); });
  EXPECT_TRUE(contains(e, "nested deeper") && contains(e, file)) << e;
}

TEST(DeepSpeedConfig, IntegralFloatsAndSchedulers) {
  const json bf16 = {{"enabled", true}};
  const json j = {
      {"bf16", bf16},
      {"zero_optimization", {{"reduce_bucket_size", 5e8}}},
      {"scheduler",
       {{"type", "WarmupLR"},
        {"params",
         {{"warmup_max_lr", 0.002}, {"warmup_num_steps", 50}, {"warmup_type", "linear"}}}}}};
  const DeepSpeedConfig c = parse_deepspeed_config(j, "s.json", preset_config("tiny"));
  EXPECT_EQ(c.option("reduce-bucket-size"), "500000000");
  EXPECT_EQ(c.option("lr"), "0.002");
  EXPECT_EQ(c.option("warmup-steps"), "50");
  EXPECT_EQ(c.option("lr-schedule"), "WarmupLR");
  EXPECT_EQ(c.option("warmup-type"), "linear");
  EXPECT_EQ(c.option("warmup-start-lr"), "0");  // DeepSpeed's default warmup_min_lr
  EXPECT_FALSE(c.cos_min_ratio);
  EXPECT_TRUE(c.warnings.empty());
  // WarmupDecayLR with DeepSpeed's defaults: log warmup over 1000 steps from 0, decay back to
  // warmup_min_lr; nothing is approximated any more.
  const json decay = {{"bf16", bf16},
                      {"scheduler",
                       {{"type", "WarmupDecayLR"},
                        {"params", {{"total_num_steps", 10}, {"warmup_min_lr", 1e-5}}}}}};
  const DeepSpeedConfig d = parse_deepspeed_config(decay, "d.json", preset_config("tiny"));
  EXPECT_EQ(d.option("lr-schedule"), "WarmupDecayLR");
  EXPECT_EQ(d.option("warmup-type"), "log");
  EXPECT_EQ(d.option("warmup-steps"), "1000");
  EXPECT_EQ(d.option("lr"), "0.001");
  EXPECT_EQ(d.option("warmup-start-lr"), "1e-05");
  EXPECT_EQ(d.option("min-lr"), "1e-05");
  EXPECT_EQ(d.option("schedule-steps"), "10");
  EXPECT_TRUE(d.warnings.empty()) << d.warnings.front();
  // WarmupCosineLR: ratios of the optimizer's lr, resolved once the final lr is known.
  const json cosine = {{"bf16", bf16},
                       {"scheduler",
                        {{"type", "WarmupCosineLR"},
                         {"params",
                          {{"total_num_steps", 10},
                           {"warmup_min_ratio", 0.1},
                           {"cos_min_ratio", 0.01},
                           {"warmup_type", "cubic"}}}}}};
  const DeepSpeedConfig k = parse_deepspeed_config(cosine, "k.json", preset_config("tiny"));
  EXPECT_EQ(k.option("lr-schedule"), "WarmupCosineLR");
  EXPECT_EQ(k.warmup_min_ratio, 0.1);
  EXPECT_EQ(k.cos_min_ratio, 0.01);
  EXPECT_EQ(k.option("warmup-type"), "log");  // DeepSpeed falls back to log, and says so
  ASSERT_EQ(k.warnings.size(), 1u);
  EXPECT_TRUE(contains(k.warnings[0], "scheduler.params.warmup_type")) << k.warnings[0];
  // The scheduler's warmup_max_lr is the peak over the optimizer's lr (once, not twice: a
  // repeated option would be refused); WarmupLR without one keeps the optimizer's.
  const json optimizer = {{"type", "AdamW"}, {"params", {{"lr", 6e-4}}}};
  const json both = {{"optimizer", optimizer},
                     {"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_max_lr", 2e-3}}}}}};
  const DeepSpeedConfig b = parse_deepspeed_config(both, "b.json", preset_config("tiny"));
  EXPECT_EQ(b.option("lr"), "0.002");
  EXPECT_EQ(std::count_if(b.options.begin(), b.options.end(),
                          [](const MappedOption& o) { return o.option == "lr"; }),
            1);
  const json keep = {{"optimizer", optimizer}, {"scheduler", {{"type", "WarmupLR"}}}};
  EXPECT_EQ(parse_deepspeed_config(keep, "k.json", preset_config("tiny")).option("lr"), "0.0006");
}

// ---- the binary ----

class DeepSpeedE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("zt_ds_e2e_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    const auto r = train_test::prepare_sample_dataset((dir_ / "sample.h5").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  train_test::RunResult train(const std::string& config, const std::string& extra) {
    return train_test::run_zerotrain(
        "train --deepspeed " + config_path(config) + " --preset tiny --data " +
        (dir_ / "sample.h5").string() + " --out " + (dir_ / "out").string() +
        " --steps 2 --seq-len 32 --micro-batch 2 --log-every 0 " + extra);
  }
  std::filesystem::path dir_;
};

TEST_F(DeepSpeedE2E, Zero2ConfigTrainsAndCommandLineWins) {
  const auto r = train("zero2.json", "--lr 0.001");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json run = json::parse(std::ifstream((dir_ / "out" / "run.json").string()));
  const std::string text = run.dump();
  EXPECT_TRUE(contains(text, "\"zero_stage\":2")) << text;
  EXPECT_TRUE(contains(text, "\"lr\":0.001")) << text;       // command line beats the file
  EXPECT_TRUE(contains(text, "\"min_lr\":0.0001")) << text;  // cos_min_ratio 0.1 × the final lr
  EXPECT_TRUE(contains(text, "\"beta2\":0.95")) << text;     // from the file
  EXPECT_TRUE(contains(text, "\"lr_schedule\":\"WarmupCosineLR\"")) << text;
  // As in a DeepSpeed run of this config: WarmupCosineLR's constructor sets the rate to 0 (step
  // 1), and iteration 0 of its warmup from warmup_min_ratio 0 is 0 too (step 2).
  std::ifstream metrics((dir_ / "out" / "metrics.jsonl").string());
  std::vector<double> lrs;
  for (std::string line; std::getline(metrics, line);) lrs.push_back(json::parse(line).at("lr"));
  EXPECT_EQ(lrs, (std::vector<double>{0.0, 0.0}));
}

TEST_F(DeepSpeedE2E, OffloadConfigTrainsWithCpuOffload) {
  // zero3-offload.json: optimizer and params offloaded to CPU, CPU-checkpointed activations.
  const auto r = train("zero3-offload.json", "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string text = json::parse(std::ifstream((dir_ / "out" / "run.json").string())).dump();
  EXPECT_TRUE(contains(text, "\"zero_stage\":3")) << text;
  EXPECT_TRUE(contains(text, "\"offload_optimizer\":\"cpu\"")) << text;
  EXPECT_TRUE(contains(text, "\"offload_param\":\"cpu\"")) << text;
  // What runs the CPU AdamW: its threads, SIMD path, and its rate measured at start-up.
  const json run = json::parse(std::ifstream((dir_ / "out" / "run.json").string()));
  const json& host_adam = run.at("config").at("host_adam");
  EXPECT_GE(host_adam.at("threads").get<int>(), 1) << text;
  const std::string simd = host_adam.at("simd").get<std::string>();
  EXPECT_TRUE(simd == "scalar" || simd == "avx2" || simd == "avx512") << text;
  EXPECT_EQ(host_adam.at("measured_elements").get<int64_t>(), int64_t{1} << 23) << text;
  // A floor far below any build's rate: a missing or zero measurement fails.
  EXPECT_GT(host_adam.at("measured_params_per_s").get<double>(), 1e6) << text;
  // Every step line reports the offload traffic and the state in the host pool, none on device,
  // and the CPU AdamW's rate over the elements it updated.
  const auto steps = train_test::read_jsonl((dir_ / "out" / "metrics.jsonl").string());
  ASSERT_FALSE(steps.empty());
  for (const json& m : steps) {
    const json& bytes = m.at("offload_bytes");
    EXPECT_GT(bytes.at("device_to_host").get<uint64_t>(), 0u) << m.dump();
    EXPECT_GT(bytes.at("host_to_device").get<uint64_t>(), 0u) << m.dump();
    EXPECT_EQ(bytes.at("nvme_read").get<uint64_t>(), 0u) << m.dump();
    EXPECT_EQ(m.at("peak_memory_bytes").at("optimizer").get<uint64_t>(), 0u) << m.dump();
    EXPECT_GT(m.at("peak_memory_bytes").at("host").get<uint64_t>(), 0u) << m.dump();
    const json& adam = m.at("host_adam");
    EXPECT_GT(adam.at("params").get<int64_t>(), 0) << m.dump();
    EXPECT_GT(adam.at("seconds").get<double>(), 0.0) << m.dump();
    EXPECT_NEAR(adam.at("params_per_s").get<double>(),
                adam.at("params").get<double>() / adam.at("seconds").get<double>(),
                1e-9 * adam.at("params_per_s").get<double>())
        << m.dump();
  }
  std::ifstream md((dir_ / "out" / "report.md").string());
  const std::string report((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(report, "Offload traffic per step")) << report;
  // report.json's rate: the elements and seconds of the steps after the first, summed.
  const json summary = json::parse(std::ifstream((dir_ / "out" / "report.json").string()));
  int64_t params = 0;
  double seconds = 0;
  for (size_t i = 1; i < steps.size(); ++i) {
    params += steps[i].at("host_adam").at("params").get<int64_t>();
    seconds += steps[i].at("host_adam").at("seconds").get<double>();
  }
  ASSERT_GT(steps.size(), 1u);
  const json& adam = summary.at("host_adam");
  EXPECT_EQ(adam.at("params").get<int64_t>(), params) << summary.dump();
  EXPECT_NEAR(adam.at("seconds").get<double>(), seconds, 1e-9 * seconds) << summary.dump();
  EXPECT_NEAR(adam.at("params_per_s").get<double>(), params / seconds, 1e-6 * params / seconds);
  EXPECT_TRUE(contains(report, "host CPU AdamW, rank 0 (million parameters/s")) << report;
}

// transformers' own ZeRO-3 test config (WarmupLR, warmup_num_steps "auto": 0) trains its first
// two steps at warmup_min_lr 0, as DeepSpeed does: a 2-step run would change nothing, and says
// so; a third step trains at the rate, and the warning is gone.
TEST_F(DeepSpeedE2E, AScheduleAtZeroForTheWholeRunIsWarnedOf) {
  const std::string cfg = std::string(ZT_SOURCE_DIR) +
                          "/tests/data/deepspeed_configs/"
                          "huggingface--transformers--tests__deepspeed__ds_config_zero3.json";
  const std::string run = "train --deepspeed " + cfg + " --preset tiny --data " +
                          (dir_ / "sample.h5").string() + " --out " + (dir_ / "zero_lr").string() +
                          " --seq-len 32 --micro-batch 2 --log-every 0 --lr 2e-4 --overwrite";
  auto r = train_test::run_zerotrain(run + " --steps 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "warning: the learning rate is 0 at every step of this run (steps 1-2, "
                       "--lr-schedule WarmupLR): the weights will not change"))
      << r.output;
  r = train_test::run_zerotrain(run + " --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "the learning rate is 0 at every step")) << r.output;
}

TEST_F(DeepSpeedE2E, ParamOffloadToNvmeIsRefusedNamingTheKey) {
  const std::string cfg = (dir_ / "nvme_param.json").string();
  std::ofstream(cfg) << R"({"zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/tmp"}}})";
  const auto r = train_test::run_zerotrain(
      "train --deepspeed " + cfg + " --preset tiny --data " + (dir_ / "sample.h5").string() +
      " --out " + (dir_ / "out2").string() + " --steps 1 --seq-len 32 --micro-batch 2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "offload")) << r.output;
  EXPECT_TRUE(contains(r.output, "nvme")) << r.output;
}

TEST_F(DeepSpeedE2E, BatchContradictionFailsNamingTheNumbers) {
  const std::string bad = (dir_ / "bad.json").string();
  std::ofstream(bad) << R"({"train_batch_size": 7, "gradient_accumulation_steps": 2})";
  const auto r = train_test::run_zerotrain(
      "train --deepspeed " + bad + " --preset tiny --data " + (dir_ / "sample.h5").string() +
      " --out " + (dir_ / "out").string() + " --steps 1 --seq-len 32 --micro-batch 2");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "train_batch_size 7")) << r.output;
}

}  // namespace
}  // namespace zt
