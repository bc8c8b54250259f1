// init / prepare-data / info through the real binary: good paths and every bad input. Each bad
// input must exit non-zero, name the culprit, and leave no partial output.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "app/cli.h"
#include "app/train_options.h"
#include "io/model_dir.h"
#include "io/token_dataset.h"
#include "test_io_support.h"
#include "train_options_support.h"
#include "util/error.h"

namespace zt {
namespace {

using testing::no_output_left;
using testing::run_zerotrain;
using testing::TempDir;

using testing::expect_failure_naming;
using testing::q;

// A tiny model directory with several shards, written by the binary.
std::string make_tiny_model(const TempDir& tmp, const std::string& name = "m") {
  const auto r =
      run_zerotrain("init --preset tiny --seed 3 --shard-size-mb 1 --out " + q(tmp / name));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return tmp / name;
}

// Replaces a tensor's dataset in its shard by one of `dtype` and `shape` holding `value`.
void replace_dataset(const std::string& dir, const std::string& tensor, DType dtype,
                     const std::vector<int64_t>& shape, float value) {
  const std::string shard = dir + "/" + ModelDirReader(dir).shard_of(tensor);
  h5::Id f = h5::open_file(shard, /*writable=*/true);
  h5::check(H5Ldelete(f, tensor.c_str(), H5P_DEFAULT), "H5Ldelete", shard);
  h5::Id ds = h5::create_dataset(f, tensor, dtype, shape, shard);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> values(static_cast<size_t>(n), value);
  std::vector<int64_t> start(shape.size(), 0);
  if (dtype == DType::kInt32) {
    std::vector<int32_t> ints(values.size(), 1);
    h5::write_box(ds, DType::kInt32, start, shape, ints.data(), shard);
  } else {
    h5::write_box(ds, DType::kFloat32, start, shape, values.data(), shard);
  }
}

TEST(IoCli, InitInfoAndPrepareDataWork) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  auto r = run_zerotrain("info " + q(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("parameters: 131,392"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.layers.1.mlp.down_proj.weight"), std::string::npos);
  EXPECT_NE(r.output.find("bfloat16"), std::string::npos);
  r = run_zerotrain("info --json --verify " + q(dir));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["parameters"], 131392);
  EXPECT_EQ(j["tensors"].size(), 3u + 2u * 9u);  // embed, norm, head + 2 layers

  const std::string sample = std::string(ZT_SOURCE_DIR) + "/inputs/data/sample.txt";
  r = run_zerotrain("prepare-data --text " + q(sample) + " --out " + q(tmp / "t.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_zerotrain("info --json " + q(tmp / "t.h5"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto t = nlohmann::json::parse(r.output);
  EXPECT_EQ(t["tokens"], std::filesystem::file_size(sample));
  EXPECT_EQ(t["tokenizer"], "byte");
  EXPECT_EQ(t["vocab_size"], 256);
  EXPECT_LE(t["max_token"].get<int>(), 127);
  EXPECT_EQ(t["packing"], "wrapped");  // text, no loss mask: train's auto cuts it as a stream

  std::filesystem::create_directories(tmp / "ckpt");
  // Both spellings of the stage key, so the check holds whichever one info prints.
  testing::write_file(tmp / "ckpt/manifest.json",
                      R"({"step": 12, "world_size": 4, "stage": 3, "zero_stage": 3})");
  r = run_zerotrain("info " + q(tmp / "ckpt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step: 12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("world_size: 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stage: 3"), std::string::npos) << r.output;
  // A checkpoints directory is read through its `latest`; a run's OUT is refused, naming what
  // describes it.
  const std::string run = tmp / "run", step = run + "/checkpoints/step-00000012";
  std::filesystem::create_directories(run + "/checkpoints");
  std::filesystem::rename(tmp / "ckpt", step);
  testing::write_file(run + "/checkpoints/latest", "step-00000012\n");
  testing::write_file(run + "/run.json", "{}");
  r = run_zerotrain("info " + q(run + "/checkpoints"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step: 12"), std::string::npos) << r.output;
  r = run_zerotrain("info " + q(run));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(
      r.output.find("'" + run + "' is a training run's output directory: `zerotrain report " + run +
                    "` summarizes the run, `zerotrain info " + step + "` its latest checkpoint"),
      std::string::npos)
      << r.output;
}

TEST(IoCli, InitFromConfigJsonAndConfigIni) {
  TempDir tmp;
  testing::write_file(tmp / "config.json", preset_config("tiny").to_hf_json().dump());
  testing::write_file(tmp / "init.ini", "seed = 9\nout = " + (tmp / "m") + "\n");
  auto r = run_zerotrain("init --config-json " + q(tmp / "config.json") + " --config " +
                         q(tmp / "init.ini"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ModelDirReader(tmp / "m").config(), preset_config("tiny"));
}

TEST(IoCli, MissingAndUnknownOptions) {
  TempDir tmp;
  auto r = run_zerotrain("init --preset tiny --out " + q(tmp / "m"));
  expect_failure_naming(r, {"--seed"});
  EXPECT_TRUE(no_output_left(tmp / "m"));
  r = run_zerotrain("init --preset tiny --seed 1 --out " + q(tmp / "m") + " --bogus-flag 3");
  expect_failure_naming(r, {"bogus-flag"});
  EXPECT_TRUE(no_output_left(tmp / "m"));
  // Boost reads "-1" into an unsigned as 2^64 - 1; these are refused instead.
  r = run_zerotrain("init --preset tiny --seed -1 --out " + q(tmp / "m"));
  expect_failure_naming(r, {"--seed must be >= 0"});
  r = run_zerotrain("init --preset tiny --seed 1 --shard-size-mb -1 --out " + q(tmp / "m"));
  expect_failure_naming(r, {"--shard-size-mb"});
  EXPECT_TRUE(no_output_left(tmp / "m"));
  r = run_zerotrain("init --preset huge --seed 1 --out " + q(tmp / "m"));
  expect_failure_naming(r, {"huge"});
  EXPECT_TRUE(no_output_left(tmp / "m"));
  r = run_zerotrain("prepare-data --text " + q(tmp / "a.txt"));
  expect_failure_naming(r, {"--out"});
  r = run_zerotrain("info");
  expect_failure_naming(r, {"path"});
}

// Options are taken by their full names only: an abbreviation that worked until a longer option
// was added (--warmup, once --warmup-steps alone) is refused with the names it may mean, and a
// near miss with the closest name, a Hugging Face TrainingArguments name (learning_rate) with
// the option it is here. --help prints float defaults as short decimals and keeps the
// fault-injection options in a group of their own.
TEST(IoCli, FullOptionNamesOnlyWithSuggestions) {
  TempDir tmp;
  const std::string base = "train --preset tiny --data x.h5 --out " + q(tmp / "o");
  auto r = run_zerotrain(base + " --warmup 3");
  expect_failure_naming(
      r, {"'--warmup'", "did you mean --warmup-steps", "--warmup-type", "--warmup-start-lr"});
  r = run_zerotrain(base + " --weight-decy 0.1");
  expect_failure_naming(r, {"did you mean --weight-decay?"});
  // Hugging Face's names of settings spelt otherwise here name the option.
  r = run_zerotrain(base + " --learning_rate 2e-4");
  expect_failure_naming(r, {"(Hugging Face's --learning_rate is --lr here)"});
  r = run_zerotrain(base + " --per-device-train-batch-size 4");
  expect_failure_naming(r,
                        {"(Hugging Face's --per-device-train-batch-size is --micro-batch here)"});
  r = run_zerotrain(base + " --bf16");
  expect_failure_naming(r, {"(Hugging Face's --bf16 is --precision bf16 here)"});
  r = run_zerotrain(base + " --qqqqqqq 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.find("did you mean"), std::string::npos) << r.output;
  r = run_zerotrain("train --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--lr arg (=0.0003)"), std::string::npos) << r.output;
  EXPECT_FALSE(std::regex_search(r.output, std::regex(R"(\(=[0-9]*\.[0-9]{7,}\))")))
      << r.output;  // no float noise such as (=0.899999976)
  const size_t testing = r.output.find("testing (fault injection):");
  ASSERT_NE(testing, std::string::npos) << r.output;
  EXPECT_GT(r.output.find("--debug-kill-rank"), testing);
}

TEST(IoCli, MissingAndNonHdf5Files) {
  TempDir tmp;
  auto r = run_zerotrain("info " + q(tmp / "nope.h5"));
  expect_failure_naming(r, {tmp / "nope.h5", "does not exist"});
  testing::write_file(tmp / "plain.h5", "just some text, not HDF5\n");
  r = run_zerotrain("info " + q(tmp / "plain.h5"));
  expect_failure_naming(r, {tmp / "plain.h5", "not an HDF5 file"});
  std::filesystem::create_directories(tmp / "empty");
  r = run_zerotrain("info " + q(tmp / "empty"));
  expect_failure_naming(r, {"is not a model directory, token dataset or checkpoint"});
  r = run_zerotrain("prepare-data --text " + q(tmp / "missing.txt") + " --out " + q(tmp / "o.h5"));
  expect_failure_naming(r, {tmp / "missing.txt"});
  EXPECT_TRUE(no_output_left(tmp / "o.h5"));
}

TEST(IoCli, ShardListedInIndexButMissing) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  const std::string shard = ModelDirReader(dir).shard_of("lm_head.weight");
  std::filesystem::remove(dir + "/" + shard);
  const auto r = run_zerotrain("info " + q(dir));
  expect_failure_naming(r, {shard, "lm_head.weight", "does not exist"});
}

// A shard cut short (a crash mid-copy) is named as an HDF5 file HDF5 cannot open, with its size.
TEST(IoCli, TruncatedShardIsNamedAsDamaged) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  const std::string shard = dir + "/" + ModelDirReader(dir).shard_of("lm_head.weight");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 3);
  const auto r = run_zerotrain("info --verify " + q(dir));
  expect_failure_naming(r, {shard, "truncated or damaged?"});
}

TEST(IoCli, TensorWithWrongShape) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  replace_dataset(dir, "model.layers.0.self_attn.k_proj.weight", DType::kFloat32, {64, 64}, 0.5f);
  const auto r = run_zerotrain("info " + q(dir));
  expect_failure_naming(r, {"model.layers.0.self_attn.k_proj.weight", "[64, 64]", "[32, 64]"});
}

TEST(IoCli, TensorWithWrongDtype) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  replace_dataset(dir, "model.norm.weight", DType::kInt32, {64}, 1.0f);
  const auto r = run_zerotrain("info " + q(dir));
  expect_failure_naming(r, {"model.norm.weight", "int32"});
}

TEST(IoCli, NanInTensorIsRejected) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  replace_dataset(dir, "model.layers.1.post_attention_layernorm.weight", DType::kFloat32, {64},
                  std::numeric_limits<float>::quiet_NaN());
  auto r = run_zerotrain("info --verify " + q(dir));
  expect_failure_naming(r, {"model.layers.1.post_attention_layernorm.weight", "NaN"});
  std::vector<float> out(64);
  EXPECT_THROW(ModelDirReader(dir).read_tensor_f32("model.layers.1.post_attention_layernorm.weight",
                                                   out.data()),
               Error);
  ModelDirReader unchecked(dir, /*check_finite=*/false);
  unchecked.read_tensor_f32("model.layers.1.post_attention_layernorm.weight", out.data());
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(IoCli, ConfigJsonMissingAKey) {
  TempDir tmp;
  const std::string dir = make_tiny_model(tmp);
  auto config = preset_config("tiny").to_hf_json();
  config.erase("intermediate_size");
  testing::write_file(dir + "/config.json", config.dump());
  auto r = run_zerotrain("info " + q(dir));
  expect_failure_naming(r, {"intermediate_size", "config.json"});
  r = run_zerotrain("init --config-json " + q(dir + "/config.json") + " --seed 1 --out " +
                    q(tmp / "m2"));
  expect_failure_naming(r, {"intermediate_size"});
  EXPECT_TRUE(no_output_left(tmp / "m2"));
  // A count that is not an integer is refused, not truncated.
  config = preset_config("tiny").to_hf_json();
  config["hidden_size"] = 64.5;
  testing::write_file(dir + "/config.json", config.dump());
  r = run_zerotrain("init --config-json " + q(dir + "/config.json") + " --seed 1 --out " +
                    q(tmp / "m2"));
  expect_failure_naming(r, {"'hidden_size' must be an integer, got 64.5"});
  EXPECT_TRUE(no_output_left(tmp / "m2"));
}

TEST(IoCli, BadLlmcBinFiles) {
  TempDir tmp;
  std::vector<int32_t> header(256, 0);
  header[0] = 12345;  // bad magic
  header[1] = 1;
  header[2] = 4;
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes += std::string(8, '\0');
  testing::write_file(tmp / "magic.bin", bytes);
  auto r =
      run_zerotrain("prepare-data --bin " + q(tmp / "magic.bin") + " --out " + q(tmp / "o.h5"));
  expect_failure_naming(r, {tmp / "magic.bin", "magic"});
  EXPECT_TRUE(no_output_left(tmp / "o.h5"));

  header[0] = kLlmcMagic;
  header[1] = 2;
  testing::write_file(
      tmp / "version.bin",
      std::string(reinterpret_cast<const char*>(header.data()), 1024) + std::string(8, '\0'));
  r = run_zerotrain("prepare-data --bin " + q(tmp / "version.bin") + " --out " + q(tmp / "o.h5"));
  expect_failure_naming(r, {tmp / "version.bin", "version"});
  EXPECT_TRUE(no_output_left(tmp / "o.h5"));

  header[1] = 1;
  header[2] = 1000;  // claims 1000 tokens, holds 4
  testing::write_file(
      tmp / "good.bin",
      std::string(reinterpret_cast<const char*>(header.data()), 1024) + std::string(2000, '\1'));
  testing::write_file(
      tmp / "short.bin",
      std::string(reinterpret_cast<const char*>(header.data()), 1024) + std::string(8, '\0'));
  r = run_zerotrain("prepare-data --bin " + q(tmp / "good.bin") + " " + q(tmp / "short.bin") +
                    " --out " + q(tmp / "o.h5"));
  expect_failure_naming(r, {tmp / "short.bin", "truncated"});
  EXPECT_TRUE(no_output_left(tmp / "o.h5"));
}

TEST(IoCli, EmptyTextFile) {
  TempDir tmp;
  testing::write_file(tmp / "full.txt", "some text");
  testing::write_file(tmp / "empty.txt", "");
  const auto r = run_zerotrain("prepare-data --text " + q(tmp / "full.txt") + " " +
                               q(tmp / "empty.txt") + " --out " + q(tmp / "o.h5"));
  expect_failure_naming(r, {tmp / "empty.txt", "empty"});
  EXPECT_TRUE(no_output_left(tmp / "o.h5"));
}

TEST(IoCli, NonEmptyOutputDirNeedsOverwrite) {
  TempDir tmp;
  std::filesystem::create_directories(tmp / "m");
  testing::write_file(tmp / "m/precious.txt", "keep me");
  auto r = run_zerotrain("init --preset tiny --seed 1 --out " + q(tmp / "m"));
  expect_failure_naming(r, {tmp / "m", "--overwrite"});
  EXPECT_EQ(testing::read_file(tmp / "m/precious.txt"), "keep me");
  // No temporary sibling of m was left behind.
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
  r = run_zerotrain("init --preset tiny --seed 1 --overwrite --out " + q(tmp / "m"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(tmp / "m/precious.txt"));
}

// An empty --out, or one that is a file, is named as such by every writing command, report
// included (which once failed with a bare filesystem error).
TEST(IoCli, AnEmptyOrFileOutputPathIsNamed) {
  TempDir tmp;
  const std::string sample = std::string(ZT_SOURCE_DIR) + "/inputs/data/sample.txt";
  ASSERT_EQ(
      run_zerotrain("prepare-data --text " + q(sample) + " --out " + q(tmp / "d.h5")).exit_code, 0);
  for (const std::string& command :
       {std::string("init --preset tiny --seed 1"), "prepare-data --text " + q(sample)})
    expect_failure_naming(run_zerotrain(command + " --out ''"), {"output path is empty", "--out"});
  expect_failure_naming(run_zerotrain("train --backend cpu --preset tiny --steps 1 --seq-len 16 "
                                      "--micro-batch 1 --data " +
                                      q(tmp / "d.h5") + " --out ''"),
                        {"output path is empty", "--out"});
  const auto trained = run_zerotrain(
      "train --backend cpu --preset tiny --steps 1 --seq-len 16 "
      "--micro-batch 1 --data " +
      q(tmp / "d.h5") + " --out " + q(tmp / "run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  expect_failure_naming(run_zerotrain("report " + q(tmp / "run") + " --out ''"),
                        {"output path is empty", "--out"});
  expect_failure_naming(run_zerotrain("report " + q(tmp / "run") + " --out " + q(tmp / "d.h5")),
                        {tmp / "d.h5", "(--out) exists and is not a directory"});
  EXPECT_EQ(run_zerotrain("report " + q(tmp / "run") + " --out " + q(tmp / "study")).exit_code, 0);
}

// A shard size too large for a byte count is refused naming the option, not read as 0.
TEST(IoCli, ShardSizesBeyondAPebibyteAreRefusedNamingTheOption) {
  TempDir tmp;
  const std::string model = make_tiny_model(tmp);
  for (const char* size : {"1e15", "9223372036854775807", "0", "-1", "nan"})
    expect_failure_naming(run_zerotrain("export --model " + q(model) + " --out " + q(tmp / "hf") +
                                        " --max-shard-size-mb " + size),
                          {"--max-shard-size-mb", "at most 1073741824"});
  EXPECT_FALSE(std::filesystem::exists(tmp / "hf"));
}

// generate --tokenizer byte: a prompt's bytes are its tokens, 0..255, UTF-8 above 127 included
// (once read as signed char: "token -61 is outside the vocabulary").
TEST(IoCli, GenerateByteTokenizerTakesEveryByteOfThePrompt) {
  TempDir tmp;
  const std::string model = make_tiny_model(tmp);
  const auto r =
      run_zerotrain("generate --model " + q(model) +
                    " --tokenizer byte --prompt 'caf\xc3\xa9' --max-new-tokens 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"prompt_tokens\":[99,97,102,195,169]"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// A lower --lr alone (fine-tuning) is not refused for the default floor: that keeps its ratio.
TEST(TrainOptionsMinLr, ALowerLrAloneLowersTheDefaultFloor) {
  EXPECT_FLOAT_EQ(parsed_train_options({}).optim.min_lr, 3e-5f);
  EXPECT_FLOAT_EQ(parsed_train_options({"--lr", "1e-5"}).optim.min_lr, 1e-6f);
  EXPECT_FLOAT_EQ(parsed_train_options({"--lr", "1e-3"}).optim.min_lr, 3e-5f);
  EXPECT_FLOAT_EQ(parsed_train_options({"--lr", "1e-5", "--min-lr", "0"}).optim.min_lr, 0.0f);
  EXPECT_THROW(parsed_train_options({"--lr", "1e-5", "--min-lr", "2e-5"}), Error);
}

// Each option word is parsed into the typed value the run reads as the option is read, and
// validate() resolves what depends on several of them (the engine's choices, the profile window):
// nothing after it parses a word again.
TEST(TrainOptionsChoices, ValidateParsesEachWordIntoTheValueTheRunReads) {
  const TrainOptions o = parsed_train_options({"--backend",
                                               "cpu",
                                               "--precision",
                                               "fp16",
                                               "--attention",
                                               "gemm",
                                               "--zero-stage",
                                               "2",
                                               "--activation-checkpointing",
                                               "every:2",
                                               "--cpu-checkpointing",
                                               "--offload-optimizer",
                                               "cpu",
                                               "--offload-optimizer-overlap",
                                               "off",
                                               "--lr-schedule",
                                               "WarmupDecayLR",
                                               "--warmup-type",
                                               "log",
                                               "--document-masking",
                                               "on",
                                               "--profile-steps",
                                               "2:3",
                                               "--steps",
                                               "5",
                                               "--lora-rank",
                                               "4",
                                               "--lora-targets",
                                               "q_proj,down_proj"});
  EXPECT_EQ(o.backend, BackendRequest::kCpu);
  EXPECT_EQ(o.backend_kind, BackendKind::kCpu);
  EXPECT_EQ(o.attention_request, AttentionRequest::kGemm);
  EXPECT_EQ(o.document_masking, AutoSwitch::kOn);
  EXPECT_EQ(o.optim.schedule, LrScheduleKind::kWarmupDecayLR);
  EXPECT_EQ(o.optim.warmup_shape, WarmupShape::kLog);
  EXPECT_EQ(o.profile.first, 2);
  EXPECT_EQ(o.profile.last, 3);
  EXPECT_EQ(o.activations, DType::kFloat16);  // fp16's default
  EXPECT_EQ(o.activation_checkpointing.every, 2);
  EXPECT_EQ(o.offload.config.optimizer, OffloadDevice::kCpu);
  EXPECT_EQ(o.offload.config.param, OffloadDevice::kNone);
  EXPECT_EQ(o.offload.overlap, AutoSwitch::kOff);
  EXPECT_EQ(o.choices.ac.every, 2);
  EXPECT_TRUE(o.choices.ac.on_host);
  EXPECT_EQ(o.choices.offload.optimizer, OffloadDevice::kCpu);
  EXPECT_FALSE(o.choices.offload.overlap);
  EXPECT_EQ(o.choices.lora.rank, 4);
  EXPECT_EQ(o.choices.lora.targets_text(), "q_proj,down_proj");
  // The engine spec is built from them.
  const EngineSpec spec = engine_spec(o, preset_config("tiny"));
  EXPECT_EQ(spec.activation_storage, DType::kFloat16);
  EXPECT_EQ(spec.ac.every, 2);
  EXPECT_TRUE(spec.ac.on_host);
  EXPECT_EQ(spec.offload.optimizer, OffloadDevice::kCpu);
  EXPECT_EQ(spec.optim.schedule, LrScheduleKind::kWarmupDecayLR);
  EXPECT_EQ(spec.model.lora.rank, 4);
  // run.json records each value as the word that was given.
  const nlohmann::json j = o.to_json();
  for (const auto& [key, word] :
       std::vector<std::pair<std::string, std::string>>{{"backend", "cpu"},
                                                        {"attention", "gemm"},
                                                        {"precision", "fp16"},
                                                        {"activations", "fp16"},
                                                        {"activation_checkpointing", "every:2"},
                                                        {"offload_optimizer", "cpu"},
                                                        {"offload_param", "none"},
                                                        {"offload_optimizer_overlap", "off"},
                                                        {"lr_schedule", "WarmupDecayLR"},
                                                        {"warmup_type", "log"},
                                                        {"document_masking", "on"}})
    EXPECT_EQ(j.at(key), word) << key;
}

// The same words from a --config INI file are parsed alike, and a bad one is refused as it is
// read, naming the file and the option.
TEST(TrainOptionsChoices, WordsFromAConfigFileAreParsedAsTheyAreRead) {
  const std::string ini = "/tmp/zt_words_" + std::to_string(getpid()) + ".ini";
  struct RemovedAtEnd {
    std::string path;
    ~RemovedAtEnd() { std::remove(path.c_str()); }
  } removed{ini};
  {
    std::ofstream f(ini);
    f << "offload-param = cpu\noffload-optimizer = cpu\nzero-stage = 3\nbackend = cpu\n"
         "activation-checkpointing = full\n";
  }
  const TrainOptions o = parsed_train_options({"--config", ini});
  EXPECT_EQ(o.offload.config.param, OffloadDevice::kCpu);
  EXPECT_EQ(o.activation_checkpointing.every, 1);
  EXPECT_EQ(o.to_json().at("offload_param"), "cpu");
  {
    std::ofstream f(ini);
    f << "offload-param = gpu\n";
  }
  try {
    parsed_train_options({"--config", ini});
    ADD_FAILURE() << "offload-param = gpu was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(ini), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--offload-param must be none, cpu or nvme, got 'gpu'"),
              std::string::npos)
        << e.what();
  }
}

// What the ranks agree on before the first collective whose shape depends on the options: each
// option as run.json records it (but the paths a node may hold its own copy under), and the
// backend --backend resolved to on the rank's host, since auto may resolve to cuda on one node and
// cpu on another.
TEST(TrainOptionsAgreement, TheRanksAgreeOnTheBackendTheirHostResolved) {
  const TrainOptions o = parsed_train_options({"--backend", "auto", "--steps", "7"});
  const RunSettings settings =
      o.agreed_settings(preset_config("tiny"), "dataset-id", "eval-id", "");
  const auto value = [&](const std::string& name) -> std::string {
    for (const auto& [key, text] : settings)
      if (key == name) return text;
    return "(absent)";
  };
  EXPECT_EQ(value("--backend"), "auto");
  EXPECT_EQ(value("backend resolved on this host"), backend_kind_name(o.backend_kind));
  EXPECT_EQ(value("--steps"), "7");
  EXPECT_EQ(value("dataset"), "dataset-id");
  EXPECT_EQ(value("eval dataset"), "eval-id");
  EXPECT_EQ(value("checkpoint resumed"), "none");
  EXPECT_EQ(value("model configuration"), preset_config("tiny").to_hf_json().dump());
  for (const char* per_node : {"--model", "--data", "--eval-data", "--nvme-path"})
    EXPECT_EQ(value(per_node), "(absent)") << per_node;
}

// --attention: the default is auto, run.json records it, a bad value or fused on the CPU backend
// is refused naming the option (the CUDA backend's resolution: zt_cuda_host_tests).
TEST(TrainOptionsAttention, DefaultRecordedAndBadValuesRefused) {
  EXPECT_EQ(parsed_train_options({}).attention_request, AttentionRequest::kAuto);
  EXPECT_EQ(parsed_train_options({}).to_json()["attention"], "auto");
  EXPECT_EQ(parsed_train_options({"--attention", "gemm"}).to_json()["attention"], "gemm");
  try {
    parsed_train_options({"--attention", "flash"});
    ADD_FAILURE() << "--attention flash was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--attention: unknown value 'flash'"), std::string::npos)
        << e.what();
  }
  try {
    parsed_train_options({"--backend", "cpu", "--attention", "fused"});
    ADD_FAILURE() << "--attention fused was accepted on the CPU backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--attention fused needs the CUDA backend"),
              std::string::npos)
        << e.what();
  }
}

TEST(TrainOptionsActivations, DefaultRecordedAndBadValuesRefused) {
  EXPECT_EQ(parsed_train_options({"--backend", "cpu"}).to_json()["activations"], "fp32");
  EXPECT_EQ(parsed_train_options({"--backend", "cpu", "--activations", "bf16"}).activations,
            DType::kBf16);
  const TrainOptions fp16 = parsed_train_options(
      {"--backend", "cpu", "--precision", "fp16", "--activations", "fp16", "--loss-scale", "0",
       "--initial-scale-power", "12", "--hysteresis", "3", "--consecutive-hysteresis"});
  EXPECT_EQ(fp16.activations, DType::kFloat16);
  EXPECT_EQ(fp16.loss_scale.initial_scale_power, 12);
  EXPECT_EQ(fp16.loss_scale.hysteresis, 3);
  EXPECT_TRUE(fp16.loss_scale.consecutive_hysteresis);
  EXPECT_EQ(fp16.to_json()["loss_scaling"]["initial_scale_power"], 12);
  EXPECT_TRUE(parsed_train_options({"--backend", "cpu"}).to_json()["loss_scaling"].is_null());
  // The rule itself: bf16 activations by default on the CUDA backend only (its fast path; the
  // CPU's fp32 activations are the reference arithmetic), fp16 ones under fp16 everywhere.
  EXPECT_EQ(default_activation_storage(Precision::kBf16, BackendKind::kCuda), DType::kBf16);
  EXPECT_EQ(default_activation_storage(Precision::kBf16, BackendKind::kCpu), DType::kFloat32);
  EXPECT_EQ(default_activation_storage(Precision::kFp32, BackendKind::kCuda), DType::kFloat32);
  EXPECT_EQ(default_activation_storage(Precision::kFp16, BackendKind::kCuda), DType::kFloat16);
  EXPECT_EQ(default_activation_storage(Precision::kFp16, BackendKind::kCpu), DType::kFloat16);
  // fp16 stores its activations in fp16 unless told otherwise.
  EXPECT_EQ(parsed_train_options({"--backend", "cpu", "--precision", "fp16"}).activations,
            DType::kFloat16);
  EXPECT_EQ(
      parsed_train_options({"--backend", "cpu", "--precision", "fp16", "--activations", "fp32"})
          .activations,
      DType::kFloat32);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--activations", "fp8"}, "--activations must be fp32, bf16 or fp16, got 'fp8'"},
      {{"--backend", "cpu", "--activations", "fp16"}, "--activations fp16 needs --precision fp16"},
      {{"--backend", "cpu", "--precision", "fp16", "--activations", "bf16"},
       "--activations bf16 needs --precision bf16"},
      {{"--backend", "cpu", "--precision", "bf16", "--loss-scale", "128"},
       "apply to --precision fp16 only"},
      {{"--backend", "cpu", "--precision", "fp16", "--loss-scale-window", "0"},
       "fp16.loss_scale_window (--loss-scale-window) must be > 0"},
      {{"--backend", "cpu", "--precision", "fp16", "--initial-scale-power", "200"},
       "fp16.initial_scale_power (--initial-scale-power) must be between 0 and 127"},
      {{"--backend", "cpu", "--precision", "fp32", "--activations", "bf16"},
       "--activations bf16 needs --precision bf16"},
  };
  for (const auto& [args, message] : refused) {
    try {
      parsed_train_options(args);
      ADD_FAILURE() << args.back() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zt
