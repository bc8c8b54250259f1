// LoRA adapters (model/lora.h) in the engine at the world size the binary is launched with (1, 2,
// 4): the tiny preset with r 4 adapters on every projection of both layers, the base frozen.
// - In world-invariant mode every stage, every offload mode, full and selective activation
//   checkpointing, bf16 and fp16 (DeepSpeed's loss scaler) equal one rank at stage 0 bit for bit;
//   every base tensor ends bitwise its initial value and every adapter tensor moved.
// - With dropout, every stage and world size drops the same elements (bitwise one rank).
// - Only the adapter groups carry gradients and optimizer state (the peaks count them alone).
// - A checkpoint resumes bitwise at another world size and stage; a resume with another rank is
//   refused.
// The adapters' values against PEFT: tests/oracle/test_lora.py.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "engine/memory_plan.h"
#include "engine/stage_traits.h"
#include "engine_test_support.h"
#include "model/layout.h"
#include "shared_dir_test.h"

namespace zt {
namespace {

using engine_test::EngineOptions;
using engine_test::Masters;
using engine_test::TestEngine;
using engine_test::Trained;

constexpr int kSteps = 4;
constexpr int64_t kLeaves = 4;  // micro-batches of B sequences per global batch
constexpr float kLr = 5e-3f;

LoraSpec adapters(int64_t rank = 4) {
  LoraSpec s;
  s.rank = rank;
  s.alpha = 8;
  s.set_targets({"all-linear"}, "test");  // fitted to the model by the test engine
  return s;
}

EngineOptions lora_options(int stage, Precision precision) {
  EngineOptions o;
  o.stage = stage;
  o.precision = precision;
  if (precision == Precision::kFp16) o.activations = DType::kFloat16;
  o.world_invariant = true;
  o.bucket = 5'000;  // several buckets
  o.lora = adapters();
  return o;
}

// Steps [first, last] of `engine`, or of a fresh engine initialised from the seed.
Trained train(Communicator& comm, const EngineOptions& o, int first = 1, int last = kSteps,
              TestEngine* engine = nullptr) {
  return engine_test::train_steps(comm, o, kLeaves, kLr, first, last, engine);
}

class LoraEngineTest : public engine_test::SharedDirTest {
 protected:
  const char* dir_prefix() const override { return "zt_lora_"; }
  MpiCommunicator self_{MPI_COMM_SELF};
  int N() const { return world_.world_size(); }
  // Every stage at N ranks, in each of its modes (modes_at, with options(stage)), trains as
  // `reference`: the same losses bit for bit, and on rank 0 the same final masters.
  void expect_every_mode_trains_as(const Trained& reference,
                                   const std::function<EngineOptions(int)>& options,
                                   const std::string& name);
};

// The modes of one stage: the device optimizer, the offloads valid there, and activation
// checkpointing (full, selective).
std::vector<std::pair<std::string, EngineOptions>> modes_at(const EngineOptions& base,
                                                            const OffloadConfig& nvme) {
  std::vector<std::pair<std::string, EngineOptions>> modes = {{"device optimizer", base}};
  EngineOptions full = base, selective = base;
  full.ckpt_every = 1;
  selective.ckpt_selective = true;
  modes.push_back({"full checkpointing", full});
  modes.push_back({"selective checkpointing", selective});
  if (base.stage == 0) return modes;
  EngineOptions cpu = base, disk = base;
  cpu.offload.optimizer = OffloadDevice::kCpu;
  cpu.offload.sub_group_size = 700;  // tiles inside and across the adapters
  disk.offload = nvme;
  modes.push_back({"cpu optimizer", cpu});
  modes.push_back({"nvme optimizer", disk});
  if (base.stage == 3) {
    EngineOptions params = base;
    params.offload.param = OffloadDevice::kCpu;
    modes.push_back({"cpu params", params});
  }
  return modes;
}

void LoraEngineTest::expect_every_mode_trains_as(const Trained& reference,
                                                 const std::function<EngineOptions(int)>& options,
                                                 const std::string& name) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (const auto& [mode, o] : modes_at(options(stage), nvme_offload(2, 700))) {
      const std::string what =
          name + " stage " + std::to_string(stage) + " " + mode + " N=" + std::to_string(N());
      const Trained run = train(world_, o);
      EXPECT_EQ(run.losses, reference.losses) << what;
      if (root()) {
        EXPECT_TRUE(run.final == reference.final) << what << ": final masters differ";
      }
    }
  }
}

TEST_F(LoraEngineTest, BaseStaysBitwiseAndEveryStageEqualsOneRankStageZero) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    const std::string name = precision_name(precision);
    const Trained reference = train(self_, lora_options(0, precision));
    ModelConfig model = preset_config("tiny");
    (void)model.set_lora(adapters());
    const ParamLayout layout(model);
    int moved = 0;
    for (const TensorInfo& t : layout.tensors()) {
      const bool same = reference.final.at(t.name) == reference.initial.at(t.name);
      EXPECT_EQ(same, !t.is_lora())
          << name << ": " << t.name << (t.is_lora() ? " did not move" : " (base) moved");
      moved += same ? 0 : 1;
    }
    EXPECT_EQ(moved, 2 * 2 * 7) << name;  // A and B of 7 projections in 2 layers
    expect_every_mode_trains_as(
        reference, [&](int stage) { return lora_options(stage, precision); }, name);
  }
}

// Phi-3's fused adapters (one A for q, k and v, one B over their rows; gate and up likewise): every
// stage and mode trains as one rank at stage 0, bit for bit (the math against PEFT is
// oracle_lora_phi3's).
TEST_F(LoraEngineTest, Phi3FusedAdaptersTrainAtEveryStageAsOneRankStageZero) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto options = [&](int stage) {
      EngineOptions o = lora_options(stage, precision);
      o.fused = true;
      o.lora.dropout = 0.1;
      return o;
    };
    const Trained reference = train(self_, options(0));
    int adapters = 0;
    for (const auto& [name, values] : reference.final) {
      const bool fused = name.find("qkv_proj.lora") != std::string::npos ||
                         name.find("gate_up_proj.lora") != std::string::npos;
      adapters += fused && values != reference.initial.at(name) ? 1 : 0;
    }
    EXPECT_EQ(adapters, 2 * 2 * 2);  // A and B of qkv_proj and gate_up_proj in 2 layers
    expect_every_mode_trains_as(reference, options,
                                std::string(precision_name(precision)) + " Phi-3");
  }
}

// DoRA (use_dora) on Phi-3's fused projections with dropout: one magnitude over each fused
// module's rows, each part's rows normalised by its own weight's norms. Every stage and mode trains
// as one rank at stage 0, bit for bit, the magnitudes among the tensors that move (the math
// against PEFT is oracle_lora_dora's).
TEST_F(LoraEngineTest, DoraTrainsAtEveryStageAsOneRankStageZero) {
  auto options = [&](int stage) {
    EngineOptions o = lora_options(stage, Precision::kBf16);
    o.fused = true;
    o.lora.dropout = 0.1;
    o.lora.use_dora = true;
    return o;
  };
  const Trained reference = train(self_, options(0));
  // B starts at zero and each magnitude at its row's norm in the working type, the norm the
  // forward divides by: g = 1 exactly, so the first step's loss is plain LoRA's, the base's.
  for (Precision precision : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    EngineOptions dora = options(0), plain = options(0);
    dora.precision = plain.precision = precision;
    dora.activations = plain.activations =
        precision == Precision::kFp16 ? DType::kFloat16 : DType::kFloat32;
    plain.lora.use_dora = false;
    EXPECT_EQ(train(self_, dora).losses.front(), train(self_, plain).losses.front())
        << precision_name(precision);
  }
  int magnitudes = 0;
  for (const auto& [name, values] : reference.final) {
    const bool magnitude = name.find(".lora_magnitude_vector") != std::string::npos;
    magnitudes += magnitude && values != reference.initial.at(name) ? 1 : 0;
  }
  EXPECT_EQ(magnitudes, 2 * 4);  // qkv_proj, o_proj, gate_up_proj and down_proj in 2 layers
  expect_every_mode_trains_as(reference, options, "bf16 Phi-3 DoRA dropout 0.1");
}

// Dropout on the adapters' inputs: its masks are keyed by the global token, so every stage and
// world size drops the same elements, and the losses are those of one rank at stage 0; they
// differ from the run without dropout (the masks are applied).
TEST_F(LoraEngineTest, DropoutMasksAreTheSameAtEveryStageAndWorldSize) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto options = [&](int stage) {
      EngineOptions o = lora_options(stage, precision);
      o.lora.dropout = 0.25;
      return o;
    };
    const std::string name = std::string(precision_name(precision)) + " dropout 0.25";
    const Trained reference = train(self_, options(0));
    EXPECT_NE(reference.losses, train(self_, lora_options(0, precision)).losses) << name;
    expect_every_mode_trains_as(reference, options, name);
  }
}

TEST_F(LoraEngineTest, OnlyTheAdaptersCarryGradientsAndOptimizerState) {
  ModelConfig model = preset_config("tiny");
  (void)model.set_lora(adapters());
  const ParamLayout layout(model);
  for (int stage = 0; stage <= 3; ++stage) {
    EngineOptions o = lora_options(stage, Precision::kBf16);
    o.world_invariant = false;
    TestEngine t(world_, o);
    t.init();
    t.step(1, 2, kLr);
    const StageTraits traits = StageTraits::of(stage);
    size_t own = 0, grads = 0;
    for (int l = 0; l < model.num_layers; ++l) {
      const GroupInfo& g = layout.groups()[static_cast<size_t>(layout.adapter_group(l))];
      const GroupPartition p = GroupPartition::of(g.numel, N(), 1);
      own += static_cast<size_t>(traits.shard_optimizer ? p.shard : p.numel);
      grads += static_cast<size_t>(traits.shard_gradients ? p.shard : p.padded);
    }
    const std::string what = "stage " + std::to_string(stage) + " N=" + std::to_string(N());
    EXPECT_EQ(t.memory().peak(MemCategory::kOptimizer), 12 * own) << what;
    EXPECT_EQ(t.memory().peak(MemCategory::kGrads), 4 * grads) << what;
    // The frozen base's layers: no gradient, and at stage 3 still sharded (each rank holds its
    // shard of bf16 working params, gathered for the passes), whole at stages 0-2. The engine
    // allocates its plan (tests/mpi/test_memory_plan.cpp).
    const MemoryPlan& plan = t.engine().memory_plan();
    for (int l = 0; l < model.num_layers; ++l) {
      const int g = layout.layer_group(l);
      const GroupPartition p =
          GroupPartition::of(layout.groups()[static_cast<size_t>(g)].numel, N(), 1);
      const PlannedBuffer* work = plan.find(BufferRole::kWorkingParams, g);
      ASSERT_NE(work, nullptr) << what;
      EXPECT_EQ(work->bytes, 2 * (stage == 3 ? p.shard : p.padded)) << what << ", layer " << l;
      EXPECT_EQ(plan.find(BufferRole::kGradients, g), nullptr) << what << ", layer " << l;
    }
  }
}

// Into one rank at stage 3 − s, bitwise; adapters of another rank are refused on every rank,
// naming the manifest's LoRA specification. With dropout, the steps after the resume drop the
// elements the uninterrupted run drops (the masks are keyed by the global token, not by a state
// the checkpoint would have to carry).
TEST_F(LoraEngineTest, CheckpointResumesBitwiseAndRefusesAnotherRank) {
  // bf16 with and without dropout (the frozen base kept as digests: reloaded from the seed and
  // verified); fp16 (the frozen base stored as fp16 values, its loss scaler resumed).
  const std::vector<std::pair<double, Precision>> cases = {
      {0.0, Precision::kBf16}, {0.25, Precision::kBf16}, {0.0, Precision::kFp16}};
  for (const auto& [dropout, precision] : cases) {
    engine_test::ResumeCase c;
    c.options = [dropout = dropout, precision = precision](int stage) {
      EngineOptions o = lora_options(stage, precision);
      o.lora.dropout = dropout;
      return o;
    };
    c.other = [](EngineOptions& o) { o.lora = adapters(8); };
    c.refusal = "zerotrain_lora";
    c.steps = kSteps;
    c.leaves = kLeaves;
    c.lr = kLr;
    c.frozen_as_digest = precision == Precision::kBf16;  // train's default with LoRA; fp16 values
    const std::string name = std::string(precision == Precision::kFp16 ? "fp16" : "bf16") +
                             (dropout > 0 ? "-dropout" : "-plain");
    SCOPED_TRACE(name);
    engine_test::expect_resumes_bitwise_and_refuses_another(world_, self_, (dir_ / name).string(),
                                                            c);
  }
}

}  // namespace
}  // namespace zt
