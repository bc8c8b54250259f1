// End-to-end runs of the zerotrain binary: train on the tiny preset, reports, final model, eval,
// reproducibility, gradient accumulation and input errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_adam.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_manifest.h"
#include "engine/engine_spec_json.h"
#include "io/model_dir.h"
#include "model/layout.h"
#include "model/llama.h"
#include "test_io_support.h"
#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT

namespace fs = std::filesystem;

class TrainE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("zt_train_e2e_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    const RunResult r = prepare_sample_dataset(path("sample.h5"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // A dataset of 100 tokens: too short for most batches.
    std::ofstream(path("short.txt")) << std::string(100, 'a');
    const RunResult s =
        run_zerotrain("prepare-data --text " + path("short.txt") + " --out " + path("short.h5"));
    ASSERT_EQ(s.exit_code, 0) << s.output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }

  // Trains the tiny preset for `steps` into OUT=path(out) with extra options (--seed 7 and
  // --lr 5e-3 unless given), in the environment with `env` ("NAME=VALUE " settings) added.
  static RunResult train(const std::string& out, const std::string& extra, int steps = 6,
                         const std::string& env = "") {
    std::string args = "train --preset tiny --data " + path("sample.h5") + " --out " + path(out) +
                       " --steps " + std::to_string(steps) + " --seq-len 32 --log-every 0 " + extra;
    if (extra.find("--seed") == std::string::npos) args += " --seed 7";
    if (extra.find("--lr") == std::string::npos) args += " --lr 5e-3";
    return run_command(env + ZT_BINARY + " " + args);
  }

  static fs::path* dir_;
};
fs::path* TrainE2E::dir_ = nullptr;

TEST_F(TrainE2E, TinyRunWritesMetricsReportsAndFinalModel) {
  const RunResult r = train("run", "--micro-batch 4 --eval-batches 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = read_jsonl(path("run/metrics.jsonl"));
  ASSERT_EQ(lines.size(), 6u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto& j = lines[i];
    EXPECT_EQ(j["step"].get<int>(), static_cast<int>(i) + 1);
    EXPECT_TRUE(std::isfinite(j["loss"].get<double>()));
    EXPECT_EQ(j["tokens"].get<int>(), 4 * 32);
    EXPECT_EQ(j["tokens_seen"].get<int>(), 4 * 32 * (static_cast<int>(i) + 1));
    EXPECT_TRUE(j["mfu"].is_null());  // CPU backend: no meaningful peak
    EXPECT_GT(j["tflops_per_device"].get<double>(), 0);
    EXPECT_GT(j["peak_memory_bytes"]["params"].get<double>(), 0);
    EXPECT_EQ(j["backend_scratch_bytes"].get<int64_t>(), 0);  // the CPU backend has no scratch
    EXPECT_TRUE(j["comm_bytes"].contains("all_reduce"));
    EXPECT_TRUE(j["time"].contains("forward_s"));
  }
  // Byte-level text starts near ln(256) ≈ 5.55 and must come down within six steps.
  EXPECT_NEAR(lines.front()["loss"].get<double>(), std::log(256.0), 0.3);
  EXPECT_LT(lines.back()["loss"].get<double>(), lines.front()["loss"].get<double>() - 0.3);

  for (const char* f : {"run.json", "report.json", "report.md"})
    EXPECT_TRUE(fs::exists(path("run") + "/" + f)) << f;
  std::ifstream report_in(path("run/report.json"));
  const auto report = nlohmann::json::parse(report_in);
  EXPECT_EQ(report["steps"].get<int>(), 6);
  EXPECT_EQ(report["final_loss"], lines.back()["loss"]);
  EXPECT_EQ(report["peak_memory_bytes_per_rank"].size(), 1u);
  ASSERT_TRUE(report.contains("eval"));

  ModelDirReader final_model(path("run/final"));
  EXPECT_EQ(final_model.config().hidden_size, 64);
  EXPECT_EQ(final_model.stored_dtype("lm_head.weight"), DType::kBf16);

  // eval of the final model on the same windows reproduces the end-of-training eval.
  const RunResult e =
      run_zerotrain("eval --model " + path("run/final") + " --data " + path("sample.h5") +
                    " --batches 2 --micro-batch 4 --seq-len 32");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto result = nlohmann::json::parse(e.output);
  EXPECT_EQ(result["tokens"].get<int>(), 2 * 4 * 32);
  EXPECT_EQ(result["batches"].get<int>(), 2);
  EXPECT_NEAR(result["loss"].get<double>(), report["eval"]["loss"].get<double>(), 1e-3);
  // eval holds the weights (fp32, its default precision) and no training state.
  const auto& peak = result["peak_memory_bytes"];
  EXPECT_GE(peak["params"].get<int64_t>(), 4 * ParamLayout(final_model.config()).total_numel())
      << peak.dump();
  EXPECT_EQ(peak["grads"].get<int64_t>(), 0) << peak.dump();
  EXPECT_EQ(peak["optimizer"].get<int64_t>(), 0) << peak.dump();
  // ...and a forward-only model's activations: two residual buffers and one layer's, no more.
  ActivationCheckpointing forward_only;
  forward_only.forward_only = true;
  const ActivationPlan activations =
      ActivationPlan::make(final_model.config(), 4, 32, forward_only);
  EXPECT_EQ(peak["activations"].get<int64_t>(),
            activations.device_bytes() + activations.token_bytes)
      << peak.dump();

  // A second run into the same directory is refused without --overwrite.
  const RunResult again = train("run", "--micro-batch 4", 1);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("--overwrite"), std::string::npos) << again.output;
}

TEST_F(TrainE2E, SameSeedGivesBitwiseIdenticalLosses) {
  ASSERT_EQ(train("seed_a", "--micro-batch 2").exit_code, 0);
  ASSERT_EQ(train("seed_b", "--micro-batch 2").exit_code, 0);
  const auto a = loss_strings(path("seed_a/metrics.jsonl"));
  EXPECT_EQ(a.size(), 6u);
  EXPECT_EQ(a, loss_strings(path("seed_b/metrics.jsonl")));
  ASSERT_EQ(train("seed_c", "--micro-batch 2 --seed 8").exit_code, 0);
  EXPECT_NE(a, loss_strings(path("seed_c/metrics.jsonl")));
}

// Two micro-batches of 4 sequences give the same step as one of 8. The CPU backend computes the
// linear layers' token rows in tiles of 128 rows (4 × 32 tokens here), so every token's forward
// pass is the same floats in both runs. At --lr 1e-30 the weights do not move (each update is
// below half an ulp of every weight), so each step's loss differs only in the association of its
// double sums: within (2·γ_255 + 2u)·loss over the 256 per-token terms, u = 2^-53,
// γ_k = k·u/(1 − k·u).
TEST_F(TrainE2E, GradAccumulationEqualsLargerMicroBatch) {
  const std::string frozen = "--precision fp32 --lr 1e-30 --min-lr 0 ";
  const RunResult a = train("accum", frozen + "--micro-batch 4 --grad-accum 2");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const RunResult b = train("single", frozen + "--micro-batch 8 --grad-accum 1");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto la = read_jsonl(path("accum/metrics.jsonl"));
  const auto lb = read_jsonl(path("single/metrics.jsonl"));
  ASSERT_EQ(la.size(), 6u);
  ASSERT_EQ(lb.size(), 6u);
  constexpr double u = 0x1p-53;
  const double bound = 2 * (255 * u / (1 - 255 * u)) + 2 * u;
  for (size_t i = 0; i < la.size(); ++i) {
    const double x = la[i]["loss"].get<double>(), y = lb[i]["loss"].get<double>();
    EXPECT_LE(std::abs(x - y), bound * std::abs(y)) << "step " << i + 1;
    EXPECT_EQ(la[i]["tokens"], lb[i]["tokens"]);
  }
  EXPECT_NE(la[0]["loss"], la[1]["loss"]);  // the steps saw different windows
}

// On one rank every stage writes the first micro-batch's gradient into its accumulator and adds
// each later one as one addition per element (the full buffer at stages 0/1, a shard fed from a
// bucket at 2/3), so with grad-accum 2 and chunked buckets every stage trains bit for bit the same.
TEST_F(TrainE2E, EveryZeroStageGivesTheSameLossesAtOneRank) {
  std::vector<std::string> reference;
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string out = "stage" + std::to_string(stage);
    const RunResult r = train(out,
                              "--precision fp32 --micro-batch 2 --grad-accum 2 --zero-stage " +
                                  std::to_string(stage) + " --reduce-bucket-size 5000",
                              3);
    ASSERT_EQ(r.exit_code, 0) << "stage " << stage << ": " << r.output;
    const std::vector<std::string> losses = loss_strings(path(out + "/metrics.jsonl"));
    ASSERT_EQ(losses.size(), 3u);
    if (stage == 0)
      reference = losses;
    else
      EXPECT_EQ(losses, reference) << "stage " << stage;
  }
  // Selective checkpointing from the command line: the same bits, and run.json names it.
  const RunResult selective = train("selective",
                                    "--precision fp32 --micro-batch 2 --grad-accum 2 --zero-stage "
                                    "3 --reduce-bucket-size 5000 --activation-checkpointing "
                                    "selective",
                                    3);
  ASSERT_EQ(selective.exit_code, 0) << selective.output;
  EXPECT_EQ(loss_strings(path("selective/metrics.jsonl")), reference);
  std::ifstream run_in(path("selective/run.json"));
  EXPECT_EQ(nlohmann::json::parse(run_in)["config"]["activation_checkpointing"], "selective");
}

// The fp32 master weights and Adam moments of every group of the checkpoint directory `dir`, one
// after another, read through the checkpoint's own reader.
std::vector<float> checkpoint_optimizer_state(const std::string& dir) {
  const CheckpointManifest manifest = CheckpointManifest::read(dir);
  CheckpointRangeReader reader(dir, manifest);
  std::vector<float> state;
  for (int g = 0; g < static_cast<int>(manifest.groups.size()); ++g)
    for (OptimizerTensor kind : kOptimizerTensors) {
      const int64_t n = manifest.groups[static_cast<size_t>(g)].numel;
      std::vector<float> values(static_cast<size_t>(n));
      reader.read(g, kind, {0, n}, values.data());
      state.insert(state.end(), values.begin(), values.end());
    }
  return state;
}

// Every CPU AdamW path this CPU has (backend/cpu/cpu_adam.h: AVX2, AVX-512) trains the scalar
// path's run bit for bit, the backend's update and the offloaded optimizer's alike: the losses
// (each update but the last shows in the next step's loss) and the last checkpoint's fp32 master
// weights and moments. run.json names the path the offloaded optimizer ran. (./run.sh test's
// kernel variants rely on this test for the Adam paths.)
TEST_F(TrainE2E, EveryCpuAdamPathTrainsTheScalarPathsRunBitwise) {
  std::vector<cpu::AdamSimd> paths;
  for (cpu::AdamSimd p : {cpu::AdamSimd::kScalar, cpu::AdamSimd::kAvx2, cpu::AdamSimd::kAvx512})
    if (cpu::adam_simd_available(p)) paths.push_back(p);
  if (paths.size() < 2) GTEST_SKIP() << "this CPU has the scalar AdamW path alone";
  const std::string offloaded = "--zero-stage 2 --offload-optimizer cpu";
  for (const std::string& extra : {std::string(), offloaded}) {
    const std::string common = "--precision fp32 --micro-batch 2 --save-every 4 " + extra;
    const std::string tag = extra.empty() ? "adam_" : "adam_offloaded_";
    std::vector<float> scalar_state;
    std::vector<std::string> scalar_losses;
    for (cpu::AdamSimd p : paths) {
      const std::string name = cpu::adam_simd_name(p), out = tag + name;
      const RunResult r = train(out, common, 4, "ZT_CPU_ADAM_SIMD=" + name + " ");
      ASSERT_EQ(r.exit_code, 0) << r.output;
      if (!extra.empty()) {
        std::ifstream run_in(path(out + "/run.json"));
        EXPECT_EQ(nlohmann::json::parse(run_in)["config"]["host_adam"]["simd"], name);
      }
      const std::vector<float> state =
          checkpoint_optimizer_state(path(out + "/checkpoints/step-00000004"));
      const std::vector<std::string> losses = loss_strings(path(out + "/metrics.jsonl"));
      ASSERT_EQ(losses.size(), 4u);
      ASSERT_FALSE(state.empty());
      if (p == cpu::AdamSimd::kScalar) {
        scalar_losses = losses, scalar_state = state;
        continue;
      }
      EXPECT_EQ(losses, scalar_losses) << name << " " << extra;
      ASSERT_EQ(state.size(), scalar_state.size());
      EXPECT_EQ(std::memcmp(state.data(), scalar_state.data(), state.size() * 4), 0)
          << name << " " << extra << ": the master weights or moments differ from the scalar's";
    }
  }
}

// The delayed update from the command line (docs/offload.md): with --offload-optimizer-delay-after
// 1, step 2's update is held back until the save at step 2 applies it, so steps 1-3 have the
// losses of the run without delay, and step 4 (on the weights two updates back) another; a run
// stopped after that save and resumed has the losses of the run that saved there without stopping.
TEST_F(TrainE2E, DelayedUpdateFromTheCommandLineResumesAsTheRunThatSavedThere) {
  const std::string common =
      "--precision fp32 --micro-batch 2 --zero-stage 2 --offload-optimizer cpu --save-every 2";
  const std::string delay = " --offload-optimizer-delay 1 --offload-optimizer-delay-after 1";
  ASSERT_EQ(train("delay_off", common, 4).exit_code, 0);
  const RunResult whole = train("delay_whole", common + delay, 4);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::vector<std::string> off = loss_strings(path("delay_off/metrics.jsonl"));
  const std::vector<std::string> delayed = loss_strings(path("delay_whole/metrics.jsonl"));
  ASSERT_EQ(off.size(), 4u);
  ASSERT_EQ(delayed.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(delayed.begin(), delayed.begin() + 3),
            std::vector<std::string>(off.begin(), off.begin() + 3));
  EXPECT_NE(delayed[3], off[3]) << "step 4 ran on the weights after update 3: no delay";
  std::ifstream run_in(path("delay_whole/run.json"));
  EXPECT_EQ(nlohmann::json::parse(run_in)["config"]["offload_optimizer_delay"], 1);
  const RunResult stopped = train("delay_split", common + delay + " --stop-after-step 2", 4);
  EXPECT_NE(stopped.exit_code, 0) << stopped.output;  // stopped after the save at step 2
  const RunResult resumed = train("delay_split", common + delay + " --resume auto", 4);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(loss_strings(path("delay_split/metrics.jsonl")), delayed);
  // An --eval-every evaluation applies the held-back update as a save does: evaluating after
  // step 2 instead of saving there gives the same losses (docs/fine-tuning.md).
  const std::string no_save = common.substr(0, common.find(" --save-every"));
  const RunResult evaluated =
      train("delay_eval", no_save + delay + " --eval-every 2 --eval-batches 1", 4);
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_EQ(loss_strings(path("delay_eval/metrics.jsonl")), delayed);
}

// --eval-every changes nothing the run computes (docs/fine-tuning.md): in fp16, whose loss scaler
// an evaluation must leave alone, with LoRA and its dropout on (its masks are a stateless hash of
// the step and token, so this guards the scaler and the LoRA state, not the masks), evaluating
// after every step leaves the losses and gradient norms bit for bit.
TEST_F(TrainE2E, EvaluatingEveryStepLeavesAnFp16LoraDropoutRunAsItWas) {
  const std::string common = "--precision fp16 --micro-batch 2 --lora-rank 4 --lora-dropout 0.1";
  const RunResult plain = train("eval_plain", common, 3);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const RunResult each = train("eval_each", common + " --eval-every 1 --eval-batches 1", 3);
  ASSERT_EQ(each.exit_code, 0) << each.output;
  const std::vector<nlohmann::json> without = read_jsonl(path("eval_plain/metrics.jsonl"));
  const std::vector<nlohmann::json> with = read_jsonl(path("eval_each/metrics.jsonl"));
  ASSERT_EQ(with.size(), 3u);
  ASSERT_EQ(without.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(with[i]["loss"].dump(), without[i]["loss"].dump()) << "step " << i + 1;
    EXPECT_EQ(with[i]["grad_norm"].dump(), without[i]["grad_norm"].dump()) << "step " << i + 1;
    EXPECT_EQ(with[i]["loss_scale"], without[i]["loss_scale"]) << "step " << i + 1;
    EXPECT_TRUE(with[i].contains("eval_loss")) << "step " << i + 1;
    EXPECT_FALSE(without[i].contains("eval_loss")) << "step " << i + 1;
  }
}

// The adapter's base_model_name_or_path (docs/lora.md): the one the --lora-config names, a Hub id
// PEFT's AutoPeftModelForCausalLM loads, kept; without one, the preset the run trained on.
TEST_F(TrainE2E, AdapterNamesTheBaseModelItsConfigNamed) {
  testing::write_file(path("named_adapter_config.json"),
                      R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                          "target_modules": ["q_proj", "v_proj"],
                          "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"})");
  const RunResult named =
      train("named_base", "--micro-batch 2 --lora-config " + path("named_adapter_config.json"), 1);
  ASSERT_EQ(named.exit_code, 0) << named.output;
  const RunResult preset = train("preset_base", "--micro-batch 2 --lora-rank 4", 1);
  ASSERT_EQ(preset.exit_code, 0) << preset.output;
  const auto base_of = [&](const std::string& run) {
    std::ifstream in(path(run + "/final/adapter_config.json"));
    return nlohmann::json::parse(in).value("base_model_name_or_path", "");
  };
  EXPECT_EQ(base_of("named_base"), "HuggingFaceTB/SmolLM2-135M-Instruct");
  EXPECT_EQ(base_of("preset_base"), "tiny");
}

// --offload-gradient-copies (docs/offload.md): bf16 copies move half the device→host bytes of
// fp32 ones each step, and run.json records the dtype the run used; auto is fp32 on the CPU
// backend. Bad values are refused in BadInputsFailNamingTheCulprit.
TEST_F(TrainE2E, GradientCopiesFromTheCommandLine) {
  const std::string common =
      "--precision bf16 --micro-batch 2 --zero-stage 2 --offload-optimizer cpu";
  std::map<std::string, std::vector<uint64_t>> d2h;
  for (const std::string copies : {"auto", "fp32", "bf16"}) {
    const RunResult r =
        train("copies_" + copies, common + " --offload-gradient-copies " + copies, 2);
    ASSERT_EQ(r.exit_code, 0) << copies << ": " << r.output;
    for (const nlohmann::json& line : read_jsonl(path("copies_" + copies + "/metrics.jsonl")))
      if (line.contains("offload_bytes"))
        d2h[copies].push_back(line["offload_bytes"]["device_to_host"].get<uint64_t>());
    std::ifstream run_in(path("copies_" + copies + "/run.json"));
    EXPECT_EQ(nlohmann::json::parse(run_in)["config"]["offload_gradient_copies"],
              copies == "bf16" ? "bf16" : "fp32")
        << copies;
  }
  ASSERT_EQ(d2h["fp32"].size(), 2u);
  EXPECT_GT(d2h["fp32"][0], 0u);
  EXPECT_EQ(d2h["auto"], d2h["fp32"]);
  ASSERT_EQ(d2h["bf16"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(2 * d2h["bf16"][i], d2h["fp32"][i]) << "step " << i + 1;
}

TEST_F(TrainE2E, NonFiniteLossStopsWithoutFinalModel) {
  const RunResult r = train("nan", "--micro-batch 2 --lr 1e30 --clip 0", 5);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("at step"), std::string::npos) << r.output;
  EXPECT_GE(read_jsonl(path("nan/metrics.jsonl")).size(), 1u);
  EXPECT_LT(read_jsonl(path("nan/metrics.jsonl")).size(), 5u);
  EXPECT_FALSE(fs::exists(path("nan/final")));
}

TEST_F(TrainE2E, BadInputsFailNamingTheCulprit) {
  struct Case {
    std::string args, culprit;
  };
  const std::string base = "--data " + path("sample.h5") + " --out " + path("bad");
  const std::vector<Case> cases = {
      {"--preset tiny " + base + " --lr 0", "--lr"},
      {"--preset tiny " + base + " --lr -1", "--lr"},
      {"--preset tiny " + base + " --lr inf", "--lr must be a finite number"},
      {"--preset tiny " + base + " --eps inf", "--eps must be a finite number"},
      {"--preset tiny " + base + " --clip nan", "--clip must be a finite number"},
      {"--preset tiny " + base + " --weight-decay nan", "--weight-decay"},
      {"--preset tiny " + base + " --min-lr 0.01", "--min-lr 0.01 is above --lr 0.0003"},
      {"--preset tiny " + base + " --seed -1", "--seed must be >= 0"},
      {"--preset tiny " + base + " --eval-batches 9000000000000000000", "--eval-batches"},
      {"--preset tiny " + base + " --eval-every -1", "--eval-every must be at least 0"},
      {"--preset tiny " + base + " --eval-batches some",
       "--eval-batches takes a count of batches (0 or more) or 'all', got 'some'"},
      {"--preset tiny " + base + " --eval-batches -1", "--eval-batches takes a count"},
      {"--preset tiny " + base + " --keep-best --eval-every 1 --eval-batches 1",
       "--keep-best needs --keep-last K > 0 and --save-every N > 0"},
      {"--preset tiny " + base + " --keep-best --keep-last 1 --save-every 2",
       "--keep-best needs --eval-every N"},
      {"--preset tiny " + base +
           " --keep-best --keep-last 1 --save-every 3 --eval-every 2 --eval-batches 1",
       "a --save-every that is a multiple of it"},
      {"--preset tiny " + base + " --eval-data " + path("sample.h5"),
       "--eval-data needs --eval-batches K > 0"},
      {"--preset tiny " + base + " --eval-batches 1 --eval-data " + path("missing.h5"),
       "missing.h5"},
      {"--preset tiny " + base + " --grad-accum 9000000000000000000", "--grad-accum"},
      {"--preset tiny " + base + " --comm-timeout -1", "--comm-timeout must be >= 0"},
      {"--preset tiny " + base + " --comm-timeout nan", "--comm-timeout must be >= 0"},
      {"--preset tiny " + base + " --steps 0", "--steps"},
      {"--preset tiny " + base + " --steps 4 --stop-after-step 4",
       "--stop-after-step 4 is not before the last step (--steps 4)"},
      {"--preset tiny " + base + " --steps 4 --stop-after-step 9",
       "--stop-after-step 9 is not before the last step (--steps 4)"},
      {"--preset tiny " + base + " --micro-batch 200000000 --seq-len 16",
       "tokens per micro-batch is beyond 2^31 - 1"},
      {"--preset tiny " + base +
           " --steps 2000000000 --micro-batch 1000000 --grad-accum 1000000 --seq-len 64",
       "--steps 2000000000 × global batch (--micro-batch 1000000 × --grad-accum 1000000 × 1 "
       "ranks) × seq-len 64 tokens is beyond 2^62"},
      {"--preset tiny " + base + " --micro-batch 0", "--micro-batch"},
      {"--preset tiny " + base + " --offload-gradient-copies fp8",
       "--offload-gradient-copies must be auto, bf16 or fp32, got 'fp8'"},
      {"--preset tiny " + base + " --zero-stage 2 --offload-gradient-copies bf16",
       "--offload-gradient-copies bf16 needs --offload-optimizer cpu or nvme"},
      {"--preset tiny " + base + " --gemm-algorithms fastest",
       "--gemm-algorithms must be heuristic or timed, got 'fastest'"},
      {"--preset tiny " + base + " --backend cpu --gemm-algorithms timed",
       "--gemm-algorithms timed needs the CUDA backend"},
      {"--preset tiny " + base + " --backend cpu --deterministic false",
       "--deterministic false needs the CUDA backend (this run uses the CPU backend, whose "
       "kernels are all deterministic)"},
      {"--preset tiny " + base + " --backend cpu --deterministic maybe", "--deterministic"},
      {"--preset tiny " + base + " --backend cpu --cuda-graphs on",
       "--cuda-graphs on needs the CUDA backend"},
      {"--preset tiny " + base + " --cuda-graphs yes",
       "--cuda-graphs must be off or on, got 'yes'"},
      {"--preset tiny " + base + " --grad-accum -2", "--grad-accum"},
      {"--preset tiny " + base + " --seq-len 0", "--seq-len"},
      {"--preset tiny " + base + " --seq-len 4096", "max_position_embeddings 2048"},
      {"--preset tiny " + base + " --zero-stage 4", "--zero-stage"},
      {"--preset tiny " + base + " --reduce-bucket-size -5", "--reduce-bucket-size"},
      {"--preset tiny " + base + " --allgather-bucket-size -1", "--allgather-bucket-size"},
      {"--preset tiny " + base + " --activation-checkpointing every:x", "every:x"},
      {"--preset tiny " + base + " --activation-checkpointing some", "some"},
      {"--preset tiny " + base + " --activation-checkpointing selective --cpu-checkpointing",
       "'selective' keeps none"},
      {"--preset tiny " + base + " --profile-steps 2:1", "--profile-steps: expected A or A:B"},
      {"--preset tiny " + base + " --profile-steps 1:2", "backend has no kernel profiler"},
      {"--preset tiny " + base + " --precision fp8", "fp8"},
      {"--preset tiny " + base + " --lr-schedule OneCycle", "--lr-schedule: unknown schedule"},
      {"--preset tiny " + base + " --warmup-type exp", "--warmup-type: unknown warmup type"},
      {"--preset tiny " + base + " --warmup-type log", "--warmup-type log needs"},
      {"--preset tiny " + base + " --lr 1e-3 --warmup-start-lr 2e-3", "--warmup-start-lr"},
      {"--preset huge " + base, "huge"},
      {base, "--preset"},
      {"--preset tiny --out " + path("bad"), "--data"},
      {"--preset tiny --data " + path("missing.h5") + " --out " + path("bad"), "missing.h5"},
      {"--preset tiny --data " + path("short.h5") + " --out " + path("bad") +
           " --seq-len 32 --micro-batch 4",
       "short.h5"},
      {"--preset tiny " + base + " --no-such-flag 1", "no-such-flag"},
  };
  for (const Case& c : cases) {
    const RunResult r = run_zerotrain("train " + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.culprit), std::string::npos)
        << "args: " << c.args << "\noutput: " << r.output;
  }
  EXPECT_FALSE(fs::exists(path("bad/final")));
}

TEST_F(TrainE2E, OptionsAreAcceptedFromConfigFile) {
  std::ofstream(path("train.ini")) << "weight-decay = -1\n";
  const RunResult bad = train("ini_bad", "--config " + path("train.ini"), 2);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--weight-decay"), std::string::npos) << bad.output;
  // A directory given as the file, and a value the option cannot take, name the file.
  fs::create_directories(path("ini_is_a_dir"));
  const RunResult dir = train("ini_dir", "--config " + path("ini_is_a_dir"), 2);
  EXPECT_NE(dir.exit_code, 0) << dir.output;
  EXPECT_NE(dir.output.find("'" + path("ini_is_a_dir") + "' (--config) is a directory"),
            std::string::npos)
      << dir.output;
  std::ofstream(path("train3.ini")) << "micro-batch = two\n";
  const RunResult typed = train("ini_typed", "--config " + path("train3.ini"), 2);
  EXPECT_NE(typed.exit_code, 0) << typed.output;
  EXPECT_NE(typed.output.find("config file '" + path("train3.ini") + "'"), std::string::npos)
      << typed.output;
  EXPECT_NE(typed.output.find("micro-batch"), std::string::npos) << typed.output;
  std::ofstream(path("train2.ini")) << "micro-batch = 2\ngrad-accum = 2\nzero-stage = 2\n"
                                    << "activation-checkpointing = every:2\nlr = 0\n";
  std::ofstream(path("train2.ini")) << "micro-batch = 2\ngrad-accum = 2\nzero-stage = 2\n"
                                    << "activation-checkpointing = every:2\n";
  const RunResult ok = train("ini_ok", "--backend cpu --config " + path("train2.ini"), 2);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  std::ifstream run_in(path("ini_ok/run.json"));
  const auto run = nlohmann::json::parse(run_in);
  EXPECT_EQ(run["config"]["micro_batch"].get<int>(), 2);
  EXPECT_EQ(run["config"]["grad_accum"].get<int>(), 2);
  EXPECT_EQ(run["config"]["zero_stage"].get<int>(), 2);
  EXPECT_EQ(run["config"]["activation_checkpointing"], "every:2");
  EXPECT_EQ(run["config"]["attention"], "auto");        // requested
  EXPECT_EQ(run["config"]["attention_kernel"], "cpu");  // what ran: the CPU backend's one
  EXPECT_EQ(run["config"]["deterministic"], true);      // --deterministic's default
  EXPECT_EQ(run["config"]["cuda_graphs"], "off");       // --cuda-graphs's default
  EXPECT_EQ(run["config"]["activations"], "fp32");      // the CPU backend's default
  EXPECT_EQ(run["config"]["lr"].get<double>(), 5e-3);   // command line wins over the file
  // The engine the run built (engine/engine_spec_json.h), as the report reads it back.
  const EngineSpec engine = engine_spec_from_json(run.at("engine"), "run.json");
  EXPECT_EQ(engine.micro_batch, 2);
  EXPECT_EQ(engine.grad_accum, 2);
  EXPECT_EQ(engine.zero.stage, 2);
  EXPECT_EQ(engine.ac.every, 2);
  EXPECT_EQ(engine.optim.lr, 5e-3f);
  EXPECT_EQ(engine.model.hidden_size, preset_config("tiny").hidden_size);
}

// --epochs E: the run is ceil(E · windows an epoch / windows a step) steps, the same run as
// --steps of that many, bit for bit; run.json records both; a length that is not one, and both
// options, are refused.
TEST_F(TrainE2E, EpochsGiveTheStepsThatReadThem) {
  // 1000 tokens: 31 windows of 33 at --seq-len 32 (each shares its last token with the next);
  // 4 a step, so 0.5 epochs are 4 steps (3.875).
  std::ifstream sample(std::string(ZT_SOURCE_DIR) + "/inputs/data/sample.txt", std::ios::binary);
  std::string text(1000, '\0');
  ASSERT_TRUE(sample.read(text.data(), 1000));
  std::ofstream(path("thousand.txt"), std::ios::binary) << text;
  const RunResult data = run_zerotrain("prepare-data --text " + path("thousand.txt") + " --out " +
                                       path("thousand.h5"));
  ASSERT_EQ(data.exit_code, 0) << data.output;
  const std::string run = std::string(ZT_BINARY) + " train --preset tiny --seed 7 --data " +
                          path("thousand.h5") +
                          " --seq-len 32 --micro-batch 4 --log-every 0 --out ";
  const RunResult epochs = run_command(run + path("epochs") + " --epochs 0.5");
  ASSERT_EQ(epochs.exit_code, 0) << epochs.output;
  EXPECT_NE(epochs.output.find("31 windows of 33 tokens an epoch"), std::string::npos)
      << epochs.output;
  const RunResult steps = run_command(run + path("steps") + " --steps 4");
  ASSERT_EQ(steps.exit_code, 0) << steps.output;
  const auto losses = loss_strings(path("epochs/metrics.jsonl"));
  EXPECT_EQ(losses.size(), 4u);
  EXPECT_EQ(losses, loss_strings(path("steps/metrics.jsonl")));
  std::ifstream run_in(path("epochs/run.json"));
  const auto config = nlohmann::json::parse(run_in).at("config");
  EXPECT_EQ(config.at("steps"), 4);
  EXPECT_EQ(config.at("epochs"), 0.5);
  for (const auto& [extra, says] :
       {std::pair<std::string, std::string>{"--epochs 1 --steps 4", "give --steps or --epochs"},
        {"--epochs 0", "--epochs must be a positive number, got 0"},
        {"--epochs inf", "--epochs must be a positive number, got inf"},
        {"--epochs 1e9", " (7750000000 steps) is too long: a run has below 2147483648 steps"},
        {"--epochs 0.01 --stop-after-step 2",
         "--stop-after-step 2 is not before the last step (--epochs 0.01 (1 step))"}}) {
    const RunResult bad = run_command(run + path("epochs_bad") + " " + extra);
    EXPECT_NE(bad.exit_code, 0) << extra;
    EXPECT_NE(bad.output.find(says), std::string::npos) << bad.output;
  }
}

TEST_F(TrainE2E, EvalPrintsJsonAndRejectsShortDataset) {
  const RunResult init = run_zerotrain("init --preset tiny --seed 3 --out " + path("init_model"));
  ASSERT_EQ(init.exit_code, 0) << init.output;
  const RunResult e =
      run_zerotrain("eval --model " + path("init_model") + " --data " + path("sample.h5") +
                    " --batches 3 --micro-batch 2 --seq-len 16");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto j = nlohmann::json::parse(e.output);
  EXPECT_EQ(j["tokens"].get<int>(), 3 * 2 * 16);
  EXPECT_EQ(j["batches"].get<int>(), 3);
  EXPECT_NEAR(j["loss"].get<double>(), std::log(256.0), 0.2);  // a fresh model is near uniform

  // 100 tokens hold 5 windows of 17 tokens; 3·2 = 6 windows are too many.
  const RunResult s = run_zerotrain("eval --model " + path("init_model") + " --data " +
                                    path("short.h5") + " --batches 3 --micro-batch 2 --seq-len 16");
  EXPECT_NE(s.exit_code, 0);
  EXPECT_NE(s.output.find("short.h5"), std::string::npos) << s.output;
  EXPECT_NE(s.output.find("102"), std::string::npos) << s.output;  // tokens needed: 6·17
  // An input error every rank finds ends through MPI_Finalize, not Open MPI's abort banner.
  EXPECT_EQ(s.output.find("MPI_ABORT"), std::string::npos) << s.output;
  const RunResult fits =
      run_zerotrain("eval --model " + path("init_model") + " --data " + path("short.h5") +
                    " --batches 5 --micro-batch 1 --seq-len 16");
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
  const RunResult long_seq = run_zerotrain("eval --model " + path("init_model") + " --data " +
                                           path("sample.h5") + " --seq-len 5000");
  EXPECT_NE(long_seq.exit_code, 0);
  EXPECT_NE(long_seq.output.find("max_position_embeddings"), std::string::npos);
}

}  // namespace
}  // namespace zt
