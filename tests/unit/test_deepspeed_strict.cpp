// DeepSpeed configs that behave as in DeepSpeed (app/deepspeed_config.h, app/deepspeed_block.h):
// fp32 without a precision block, unknown keys refused with the closest valid key where DeepSpeed
// refuses them, DeepSpeed's aliases and deprecated keys, keys that would change the training
// refused, and run.json's record of the file (its SHA-256 against coreutils' sha256sum).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/deepspeed_config.h"
#include "test_deepspeed_support.h"
#include "test_train_support.h"
#include "util/error.h"
#include "util/sha256.h"

namespace zt {
namespace {

using nlohmann::json;

DeepSpeedConfig parse(const json& j) {
  return parse_deepspeed_config(j, "ds.json", preset_config("tiny"));
}

using deepspeed_test::contains;
using deepspeed_test::parse_error;

TEST(Sha256, KnownAnswerVectors) {
  // FIPS 180-4 examples (one block, two blocks) and the empty message.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1'000'000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileDigestEqualsSha256sum) {
  const std::string path =
      std::filesystem::temp_directory_path() / ("zt_sha256_" + std::to_string(getpid()) + ".bin");
  std::string bytes;
  for (uint64_t i = 0; i < 3'000'000; ++i) bytes += static_cast<char>(i * 7919 % 251);
  std::ofstream(path, std::ios::binary) << bytes;
  const auto r = train_test::run_command("sha256sum " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(sha256_file_hex(path), r.output.substr(0, 64));
  std::filesystem::remove(path);
  EXPECT_THROW(sha256_file_hex(path), Error);
}

TEST(DeepSpeedPrecision, FollowsDeepSpeedsDefaultOfFp32) {
  const DeepSpeedConfig none = parse(json::object());
  EXPECT_EQ(none.option("precision"), "fp32");
  ASSERT_EQ(none.options.size(), 1u);
  EXPECT_EQ(none.options[0].key, kNoPrecisionBlock);
  EXPECT_EQ(parse({{"bf16", {{"enabled", false}}}}).option("precision"), "fp32");
  EXPECT_EQ(parse({{"bf16", json::object()}}).option("precision"), "fp32");
  EXPECT_EQ(parse({{"fp16", {{"enabled", false}}}}).option("precision"), "fp32");
  EXPECT_EQ(parse({{"bf16", {{"enabled", true}}}}).option("precision"), "bf16");
  EXPECT_EQ(parse({{"bfloat16", {{"enabled", true}}}}).option("precision"), "bf16");
  // "auto": the Trainer's flag, here --precision.
  const DeepSpeedConfig automatic = parse({{"bf16", {{"enabled", "auto"}}}});
  EXPECT_FALSE(automatic.option("precision").has_value());
  EXPECT_TRUE(automatic.warnings.empty());
  const std::string both =
      parse_error({{"bf16", {{"enabled", true}}}, {"bfloat16", {{"enabled", true}}}});
  EXPECT_TRUE(contains(both, "'bf16'") && contains(both, "'bfloat16'")) << both;
}

// The fp16 block: precision fp16, its loss-scaling keys onto the --loss-scale options (DeepSpeed's
// own defaults for the keys left out are the options' defaults, so nothing else is mapped).
TEST(DeepSpeedPrecision, Fp16BlockMapsOntoTheLossScaleOptions) {
  const DeepSpeedConfig c = parse({{"fp16",
                                    {{"enabled", true},
                                     {"loss_scale", 0},
                                     {"initial_scale_power", 12},
                                     {"loss_scale_window", 500},
                                     {"hysteresis", 3},
                                     {"consecutive_hysteresis", true},
                                     {"min_loss_scale", 2}}}});
  EXPECT_EQ(c.option("precision"), "fp16");
  EXPECT_EQ(c.option("loss-scale"), "0");
  EXPECT_EQ(c.option("initial-scale-power"), "12");
  EXPECT_EQ(c.option("loss-scale-window"), "500");
  EXPECT_EQ(c.option("hysteresis"), "3");
  EXPECT_EQ(c.option("consecutive-hysteresis"), "true");
  EXPECT_EQ(c.option("min-loss-scale"), "2");
  const std::string fractional =
      parse_error({{"fp16", {{"enabled", true}, {"min_loss_scale", 0.5}}}});
  EXPECT_TRUE(contains(fractional, "fp16.min_loss_scale")) << fractional;
  const DeepSpeedConfig fixed = parse({{"fp16", {{"enabled", true}, {"loss_scale", 128}}}});
  EXPECT_EQ(fixed.option("precision"), "fp16");
  EXPECT_EQ(fixed.option("loss-scale"), "128");
  EXPECT_FALSE(fixed.option("hysteresis").has_value());
  // Disabled: its keys are DeepSpeed's to ignore; "auto" follows --precision.
  const DeepSpeedConfig off = parse({{"fp16", {{"enabled", false}, {"loss_scale", 128}}}});
  EXPECT_EQ(off.option("precision"), "fp32");
  EXPECT_FALSE(off.option("loss-scale").has_value());
  const DeepSpeedConfig automatic = parse({{"fp16", {{"enabled", "auto"}, {"hysteresis", 4}}}});
  EXPECT_FALSE(automatic.option("precision").has_value());
  EXPECT_EQ(automatic.option("hysteresis"), "4");
}

// Each case: a config, the dotted key that must be named and the closest valid key suggested.
struct UnknownKeyCase {
  json config;
  std::string key, closest;
};

TEST(DeepSpeedStrictKeys, UnknownKeysAreRefusedNamingTheClosestValidKey) {
  const std::vector<UnknownKeyCase> cases = {
      {{{"zero_optimization", {{"stage", 2}, {"overlap_com", true}}}},
       "zero_optimization.overlap_com",
       "zero_optimization.overlap_comm"},
      {{{"zero_optimization", {{"stage3_prefetch_bucket_sise", 5}}}},
       "zero_optimization.stage3_prefetch_bucket_sise",
       "zero_optimization.stage3_prefetch_bucket_size"},
      {{{"zero_optimization", {{"offload_optimizer", {{"device", "cpu"}, {"pin_memmory", 1}}}}}},
       "zero_optimization.offload_optimizer.pin_memmory",
       "zero_optimization.offload_optimizer.pin_memory"},
      // offload_param has no fast_init: the key belongs to offload_optimizer only.
      {{{"zero_optimization", {{"offload_param", {{"device", "cpu"}, {"fast_init", true}}}}}},
       "zero_optimization.offload_param.fast_init",
       ""},
      {{{"optimizer", {{"type", "AdamW"}, {"parms", {{"lr", 1e-3}}}}}},
       "optimizer.parms",
       "optimizer.params"},
      {{{"optimizer", {{"type", "AdamW"}, {"params", {{"weight_decy", 0.1}}}}}},
       "optimizer.params.weight_decy",
       "optimizer.params.weight_decay"},
      // WarmupCosineLR's constructor has no warmup_max_lr: DeepSpeed fails with a TypeError.
      {{{"scheduler", {{"type", "WarmupCosineLR"}, {"params", {{"warmup_max_lr", 1e-3}}}}}},
       "scheduler.params.warmup_max_lr",
       ""},
      {{{"scheduler", {{"type", "WarmupLR"}, {"params", {{"warmup_num_step", 10}}}}}},
       "scheduler.params.warmup_num_step",
       "scheduler.params.warmup_num_steps"},
      {{{"bf16", {{"enabeld", true}}}}, "bf16.enabeld", "bf16.enabled"},
      {{{"fp16", {{"enabled", false}, {"loss_scal", 0}}}}, "fp16.loss_scal", "fp16.loss_scale"},
      // Two edits turn "wd" into "lr": no misspelling of it.
      {{{"optimizer", {{"type", "AdamW"}, {"params", {{"wd", 0.1}}}}}}, "optimizer.params.wd", ""},
  };
  for (const UnknownKeyCase& c : cases) {
    const std::string e = parse_error(c.config);
    EXPECT_TRUE(contains(e, "ds.json") && contains(e, "'" + c.key + "'")) << c.config << ": " << e;
    if (!c.closest.empty()) {
      EXPECT_TRUE(contains(e, "closest valid key is '" + c.closest + "'")) << e;
    } else {
      EXPECT_FALSE(contains(e, "closest")) << e;
    }
  }
}

TEST(DeepSpeedStrictKeys, TopLevelAndActivationCheckpointingKeysAreWarnings) {
  const DeepSpeedConfig c = parse({{"bf16", {{"enabled", true}}},
                                   {"zero_optimisation", {{"stage", 3}}},
                                   {"tensorboard", {{"enabled", true}}},
                                   {"activation_checkpointing", {{"cpu_checkpoint", true}}}});
  ASSERT_EQ(c.warnings.size(), 3u);
  EXPECT_TRUE(contains(c.warnings[0], "'zero_optimisation'") &&
              contains(c.warnings[0], "'zero_optimization'"))
      << c.warnings[0];
  EXPECT_TRUE(contains(c.warnings[1], "tensorboard") && contains(c.warnings[1], "not implemented"))
      << c.warnings[1];
  EXPECT_TRUE(contains(c.warnings[2], "activation_checkpointing.cpu_checkpoint") &&
              contains(c.warnings[2], "cpu_checkpointing"))
      << c.warnings[2];
  EXPECT_FALSE(c.option("zero-stage").has_value());  // the misspelt block did nothing
  // Another tool's key is no misspelling: no suggestion (LLaMA-Factory writes "_comment").
  const DeepSpeedConfig other = parse({{"_comment", "x"}, {"monitor_config", {{"enabled", true}}}});
  ASSERT_EQ(other.warnings.size(), 2u);
  for (const std::string& w : other.warnings)
    EXPECT_TRUE(contains(w, "unknown key") && !contains(w, "closest")) << w;
  // Ignored keys at DeepSpeed's own defaults, and blocks it switches off, ignore nothing: silent.
  const DeepSpeedConfig defaults =
      parse({{"prescale_gradients", false},
             {"gradient_predivide_factor", 1},
             {"tensorboard", {{"enabled", false}, {"output_path", "x"}}},
             {"wandb", {{"enabled", false}}}});
  EXPECT_TRUE(defaults.warnings.empty()) << defaults.warnings.front();
  const DeepSpeedConfig changed =
      parse({{"prescale_gradients", true}, {"gradient_predivide_factor", 2.0}});
  ASSERT_EQ(changed.warnings.size(), 2u);
  EXPECT_TRUE(contains(changed.warnings[0], "gradient_predivide_factor") &&
              contains(changed.warnings[0], "not implemented"))
      << changed.warnings[0];
}

TEST(DeepSpeedStrictKeys, DeepSpeedsAliasesAndDeprecatedKeysAreAccepted) {
  const DeepSpeedConfig c = parse(
      {{"bf16", {{"enabled", true}, {"immediate_grad_update", false}}},
       {"zero_optimization",
        {{"stage", 3},
         {"prefetch_bucket_size", 1000},
         {"param_persistence_threshold", 7},
         {"stage3_gather_fp16_weights_on_model_save", false},
         {"reduce_scatter", true},
         {"round_robin_gradients", true},
         {"zero_quantized_weights", false},
         {"cpu_offload", true}}},
       {"optimizer",
        {{"type", "Adam"}, {"params", {{"lr", 1e-3}, {"torch_adam", true}, {"amsgrad", false}}}}}});
  EXPECT_EQ(c.option("prefetch-bucket-size"), "1000");
  EXPECT_EQ(c.option("param-persistence-threshold"), "7");
  EXPECT_FALSE(c.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.option("offload-optimizer"), "cpu");  // cpu_offload: true
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  // 0, as axolotl's stage 3 configs give it (DeepSpeed's fields are >= 0): no prefetch, no
  // group kept for a reuse, the smallest sub-groups.
  const DeepSpeedConfig zeros = parse({{"zero_optimization",
                                        {{"stage", 3},
                                         {"max_live_parameters", 0},
                                         {"max_reuse_distance", 0},
                                         {"stage3_prefetch_bucket_size", 0},
                                         {"sub_group_size", 0}}}});
  EXPECT_EQ(zeros.option("max-live-parameters"), "0");
  // sub_group_size 0: a parameter per sub-group, so the largest, tiny's embedding (256 x 64).
  EXPECT_EQ(zeros.option("sub-group-size"), "16384");
  EXPECT_EQ(zeros.option("max-reuse-distance"), "0");
  EXPECT_EQ(zeros.option("prefetch-bucket-size"), "0");
  const std::string negative =
      parse_error({{"zero_optimization", {{"stage", 3}, {"max_live_parameters", -1}}}});
  EXPECT_TRUE(contains(negative, "zero_optimization.max_live_parameters must be >= 0")) << negative;
  const std::string twice = parse_error(
      {{"zero_optimization", {{"prefetch_bucket_size", 1}, {"stage3_prefetch_bucket_size", 2}}}});
  EXPECT_TRUE(contains(twice, "prefetch_bucket_size") && contains(twice, "same setting")) << twice;
}

// SuperOffload's speculative CPU AdamW is zerotrain's exact overlap, on by default with CPU
// optimizer offload; without it the key does nothing, and the CPU AdamW's core share is not read.
TEST(DeepSpeedStrictKeys, SuperOffloadIsTheDefaultOverlapAndItsCoreShareIsAWarning) {
  const DeepSpeedConfig cpu =
      parse({{"zero_optimization",
              {{"stage", 3},
               {"offload_optimizer",
                {{"device", "cpu"}, {"super_offload", true}, {"cpuadam_cores_perc", 0.5}}}}}});
  EXPECT_FALSE(cpu.option("offload-optimizer-overlap").has_value());  // auto: the overlap
  ASSERT_EQ(cpu.warnings.size(), 1u);
  EXPECT_TRUE(contains(cpu.warnings[0], "zero_optimization.offload_optimizer.cpuadam_cores_perc") &&
              contains(cpu.warnings[0], "(ignored)"))
      << cpu.warnings[0];
  const DeepSpeedConfig nvme =
      parse({{"zero_optimization",
              {{"stage", 3},
               {"offload_optimizer",
                {{"device", "nvme"}, {"nvme_path", "/tmp"}, {"super_offload", true}}}}}});
  ASSERT_EQ(nvme.warnings.size(), 1u);
  EXPECT_TRUE(contains(nvme.warnings[0], "offload_optimizer.super_offload") &&
              contains(nvme.warnings[0], "needs offload_optimizer.device cpu"))
      << nvme.warnings[0];
  const DeepSpeedConfig defaults =
      parse({{"zero_optimization",
              {{"stage", 3},
               {"offload_optimizer",
                {{"device", "none"}, {"super_offload", false}, {"cpuadam_cores_perc", 0.8}}}}}});
  EXPECT_TRUE(defaults.warnings.empty()) << defaults.warnings.front();
}

TEST(DeepSpeedStrictKeys, KeysThatWouldChangeTheTrainingAreRefused) {
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"zero_optimization", {{"zero_quantized_gradients", true}}}},
       "zero_optimization.zero_quantized_gradients"},
      {{{"zero_optimization", {{"zenflow", {{"topk_ratio", 0.1}}}}}}, "zero_optimization.zenflow"},
      {{{"bf16", {{"enabled", true}, {"bf16_master_weights_and_grads", true}}}},
       "bf16.bf16_master_weights_and_grads"},
      {{{"optimizer", {{"type", "AdamW"}, {"params", {{"amsgrad", true}}}}}},
       "optimizer.params.amsgrad"},
      {{{"optimizer", {{"type", "AdamW"}, {"params", {{"bias_correction", false}}}}}},
       "optimizer.params.bias_correction"},
      {{{"optimizer",
         {{"type", "Adam"}, {"params", {{"adam_w_mode", false}, {"weight_decay", 0.1}}}}}},
       "optimizer.params.adam_w_mode"},
      {{{"optimizer", {{"type", "AdamW"}, {"params", {{"max_grad_norm", 1.0}}}}}},
       "gradient_clipping"},
  };
  for (const auto& [config, named] : refused) {
    const std::string e = parse_error(config);
    EXPECT_TRUE(contains(e, named)) << config << ": " << e;
  }
  // L2 Adam without decay is AdamW; "AdamW" ignores adam_w_mode in DeepSpeed.
  EXPECT_EQ(parse_error({{"optimizer",
                          {{"type", "Adam"},
                           {"params", {{"adam_w_mode", false}, {"weight_decay", 0.0}}}}}}),
            "");
  EXPECT_EQ(parse_error({{"optimizer",
                          {{"type", "AdamW"},
                           {"params", {{"adam_w_mode", false}, {"weight_decay", 0.1}}}}}}),
            "");
  // Features without effect on the result are warnings when they differ from DeepSpeed's default.
  const DeepSpeedConfig hpz = parse(
      {{"bf16", {{"enabled", true}}}, {"zero_optimization", {{"zero_hpz_partition_size", 8}}}});
  ASSERT_EQ(hpz.warnings.size(), 1u);
  EXPECT_TRUE(contains(hpz.warnings[0], "zero_hpz_partition_size")) << hpz.warnings[0];
}

TEST(DeepSpeedStrictKeys, OptimizerParamsLeftOutTakeDeepSpeedsDefaults) {
  const DeepSpeedConfig c = parse({{"optimizer", {{"type", "ADAMW"}}}});
  EXPECT_EQ(c.option("lr"), "0.001");
  EXPECT_EQ(c.option("beta1"), "0.9");
  EXPECT_EQ(c.option("beta2"), "0.999");
  EXPECT_EQ(c.option("eps"), "1e-08");
  EXPECT_EQ(c.option("weight-decay"), "0");
  // "auto" keeps zerotrain's option: nothing is mapped.
  const DeepSpeedConfig automatic =
      parse({{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"betas", "auto"}}}}}});
  EXPECT_FALSE(automatic.option("lr").has_value());
  EXPECT_FALSE(automatic.option("beta2").has_value());
  // torch_adam builds torch.optim.AdamW, whose default decay is 0.01.
  EXPECT_EQ(parse({{"optimizer", {{"type", "AdamW"}, {"params", {{"torch_adam", true}}}}}})
                .option("weight-decay"),
            "0.01");
  // L2 Adam without a weight_decay key is Adam without decay, DeepSpeed's default.
  EXPECT_EQ(parse_error({{"optimizer", {{"type", "Adam"}, {"params", {{"adam_w_mode", false}}}}}}),
            "");
}

TEST(DeepSpeedStrictKeys, EnabledTopLevelFeaturesThatChangeTheTrainingAreRefused) {
  for (const json& config :
       {json{{"amp", {{"enabled", true}}}}, json{{"elasticity", {{"enabled", true}}}},
        json{{"progressive_layer_drop", {{"enabled", true}}}},
        json{{"compression_training",
              {{"weight_quantization", {{"shared_parameters", {{"enabled", true}}}}}}}},
        json{{"sparse_attention", {{"mode", "fixed"}}}}}) {
    const std::string e = parse_error(config);
    EXPECT_TRUE(contains(e, config.begin().key()) && contains(e, "not implemented")) << e;
  }
  // "auto" (the HF Trainer's Apex amp, which zerotrain lacks: off) or all techniques disabled: a
  // warning each; a block switched off at its top ("enabled": false) ignores nothing: silent.
  const DeepSpeedConfig off =
      parse({{"amp", {{"enabled", "auto"}, {"opt_level", "auto"}}},
             {"elasticity", {{"enabled", false}}},
             {"compression_training",
              {{"weight_quantization", {{"shared_parameters", {{"enabled", false}}}}}}},
             {"bf16", {{"enabled", true}}}});
  ASSERT_EQ(off.warnings.size(), 2u);
  EXPECT_TRUE(contains(off.warnings[0], "amp")) << off.warnings[0];
  EXPECT_TRUE(contains(off.warnings[1], "compression_training")) << off.warnings[1];
  const std::string huge = parse_error({{"train_batch_size", json(uint64_t{1} << 63)}});
  EXPECT_TRUE(contains(huge, "train_batch_size") && contains(huge, "too large")) << huge;
}

TEST(DeepSpeedRunRecord, RunJsonRecordsTheFileItsDigestTheMappingAndTheWarnings) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("zt_ds_record_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto data = train_test::prepare_sample_dataset((dir / "sample.h5").string());
  ASSERT_EQ(data.exit_code, 0) << data.output;
  const std::string config = (dir / "ds.json").string();
  std::ofstream(config) << R"({"train_micro_batch_size_per_gpu": 2, "wandb": {"enabled": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "eps": 1e-6}}})";
  const auto r = train_test::run_zerotrain(
      "train --deepspeed " + config + " --preset tiny --data " + (dir / "sample.h5").string() +
      " --out " + (dir / "out").string() + " --steps 1 --seq-len 16 --lr 0.001 --log-every 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "training precision fp32")) << r.output;
  const json run = json::parse(std::ifstream((dir / "out" / "run.json").string()));
  EXPECT_EQ(run.at("config").at("precision"), "fp32");
  const json& record = run.at("deepspeed");
  EXPECT_EQ(record.at("file"), config);
  const auto digest = train_test::run_command("sha256sum " + config);
  EXPECT_EQ(record.at("sha256"), digest.output.substr(0, 64));
  auto entry = [&](const std::string& key) {
    for (const json& m : record.at("mapping"))
      if (m.at("key") == key) return m;
    return json();
  };
  EXPECT_EQ(entry("optimizer.params.eps"), (json{{"key", "optimizer.params.eps"},
                                                 {"option", "eps"},
                                                 {"value", "1e-06"},
                                                 {"applied", true}}));
  EXPECT_EQ(entry("optimizer.params.lr").at("applied"), false);  // --lr 0.001 wins
  EXPECT_EQ(entry(kNoPrecisionBlock).at("value"), "fp32");
  // Left out of the optimizer's params: DeepSpeed's (FusedAdam's) default, marked as such.
  EXPECT_EQ(entry("optimizer.params.weight_decay (absent: DeepSpeed's default)").at("value"), "0");
  EXPECT_EQ(run.at("config").at("weight_decay"), 0.0);
  EXPECT_NEAR(run.at("config").at("beta2").get<double>(), 0.999, 1e-7);
  ASSERT_EQ(record.at("warnings").size(), 1u) << record.dump();
  EXPECT_TRUE(contains(record.at("warnings").dump(), "wandb")) << record.dump();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zt
