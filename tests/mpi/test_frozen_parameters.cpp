// Frozen parameters (--trainable / --freeze, model/trainable.h) at the world size the binary is
// launched with (1, 2, 4). The tiny preset has groups embed, layer.0, layer.1, head; the tests
// train lm_head, the final norm and layer 1's MLP, so the embedding and layer 0 are frozen
// groups, layer 1 is partly frozen and the backward stops at layer 1.
// - In world-invariant mode every stage (and every offload mode) equals one rank at stage 0 bit
//   for bit, and every frozen tensor ends bitwise equal to its initial value; also with tied
//   embeddings, the embedding trainable or frozen.
// - A frozen group has no gradient and no optimizer state: the peaks of those categories and the
//   reduction traffic are those of the trainable groups alone, counted.
// - A checkpoint of a frozen run resumes bitwise at another world size and stage, and a resume
//   with another trainable set is refused naming the tensors.
// The trainable tensors' values against PyTorch with requires_grad=False on the rest:
// tests/oracle/test_frozen.py.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
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
constexpr float kLr = 2e-3f;

EngineOptions frozen_options(int stage, Precision precision) {
  EngineOptions o;
  o.stage = stage;
  o.precision = precision;
  o.world_invariant = true;
  o.bucket = 20'000;  // several buckets
  o.trainable = {"^lm_head\\.", "^model\\.norm\\.", "layers\\.1\\.mlp\\."};
  return o;
}

// Steps [first, last] of `engine`, or of a fresh engine initialised from the seed.
Trained train(Communicator& comm, const EngineOptions& o, int first = 1, int last = kSteps,
              TestEngine* engine = nullptr) {
  return engine_test::train_steps(comm, o, kLeaves, kLr, first, last, engine);
}

class FrozenParametersTest : public engine_test::SharedDirTest {
 protected:
  const char* dir_prefix() const override { return "zt_frozen_"; }
  MpiCommunicator self_{MPI_COMM_SELF};
  int N() const { return world_.world_size(); }
};

// The modes of one stage: the device optimizer, then the offloads valid there (tiles that
// straddle frozen and trainable tensors; stage 3 also the params on the host, with the optimizer
// on the device and on the host).
std::vector<std::pair<std::string, OffloadConfig>> modes_at(int stage, const OffloadConfig& nvme) {
  std::vector<std::pair<std::string, OffloadConfig>> modes = {{"device optimizer", {}}};
  if (stage == 0) return modes;
  OffloadConfig cpu;
  cpu.optimizer = OffloadDevice::kCpu;
  cpu.sub_group_size = 3000;
  modes.push_back({"cpu optimizer", cpu});
  modes.push_back({"nvme optimizer", nvme});
  if (stage == 3) {
    OffloadConfig params;
    params.param = OffloadDevice::kCpu;
    modes.push_back({"cpu params", params});
    cpu.param = OffloadDevice::kCpu;
    modes.push_back({"cpu optimizer + params", cpu});
  }
  return modes;
}

TEST_F(FrozenParametersTest, FrozenTensorsStayBitwiseAndStagesEqualOneRankStageZero) {
  struct Setup {
    std::string name;
    Precision precision;
    bool tied;
    std::vector<std::string> trainable;
    int trained;  // tensors that train
  };
  const std::vector<std::string> head_and_mlp = frozen_options(0, Precision::kFp32).trainable;
  const std::vector<Setup> setups = {
      // lm_head, model.norm, layer 1's gate/up/down: embedding and layer 0 frozen groups.
      {"fp32", Precision::kFp32, false, head_and_mlp, 5},
      {"bf16", Precision::kBf16, false, head_and_mlp, 5},
      // Tied: the embedding trains through the head and the lookup, every other tensor frozen
      // (the backward runs through the frozen layers down to it).
      {"tied, embedding trains", Precision::kBf16, true, {"embed_tokens"}, 1},
      // Tied: the final norm trains, the embedding the head multiplies by is frozen.
      {"tied, embedding frozen", Precision::kBf16, true, {"^model\\.norm\\."}, 1},
  };
  for (const Setup& setup : setups) {
    auto options = [&](int stage) {
      EngineOptions o = frozen_options(stage, setup.precision);
      o.tied = setup.tied;
      o.trainable = setup.trainable;
      return o;
    };
    const Trained reference = train(self_, options(0));
    ModelConfig model = preset_config("tiny");
    model.tie_word_embeddings = setup.tied;
    const ParamLayout layout(model);
    const TrainableSet set = TrainableSet::from_patterns(layout, setup.trainable, {});
    int trained = 0;
    for (const TensorInfo& t : layout.tensors()) {
      const bool trains = set.trains(layout.index_of(t));
      const bool same = reference.final.at(t.name) == reference.initial.at(t.name);
      EXPECT_EQ(same, !trains) << setup.name << ": " << t.name
                               << (trains ? " trains but did not move" : " moved");
      trained += trains ? 1 : 0;
    }
    EXPECT_EQ(trained, setup.trained) << setup.name;
    for (int stage = 0; stage <= 3; ++stage) {
      for (const auto& [mode, offload] : modes_at(stage, nvme_offload(2, 3000))) {
        EngineOptions o = options(stage);
        o.offload = offload;
        const std::string what = setup.name + " stage " + std::to_string(stage) + " " + mode +
                                 " N=" + std::to_string(N());
        const Trained run = train(world_, o);
        EXPECT_EQ(run.losses, reference.losses) << what;
        if (root()) {
          EXPECT_TRUE(run.final == reference.final) << what << ": final masters differ";
        }
      }
    }
  }
}

TEST_F(FrozenParametersTest, FrozenGroupsHaveNoStateAndMoveNoReductionBytes) {
  const ParamLayout layout(preset_config("tiny"));
  const uint64_t n = static_cast<uint64_t>(N());
  const int head = layout.head_group();
  const GroupPartition p = GroupPartition::of(layout.groups()[static_cast<size_t>(head)].numel,
                                              static_cast<int64_t>(n), 1);
  uint64_t all_padded = 0;
  for (const GroupInfo& g : layout.groups())
    all_padded +=
        static_cast<uint64_t>(GroupPartition::of(g.numel, static_cast<int64_t>(n), 1).padded);
  const auto head_padded = static_cast<uint64_t>(p.padded);
  constexpr int64_t kAccum = 2;
  for (int stage = 0; stage <= 3; ++stage) {
    EngineOptions o;
    o.stage = stage;
    o.precision = Precision::kBf16;
    o.reuse = 0;                                        // stage 3 gathers every use
    o.trainable = {"^lm_head\\.", "^model\\.norm\\."};  // the head group alone
    const std::string what = "stage " + std::to_string(stage) + " N=" + std::to_string(N());
    TestEngine t(world_, o);
    t.init();
    t.step(1, kAccum, kLr);
    world_.reset_counters();
    t.step(2, kAccum, kLr);
    const CommCounters c = world_.counters();
    const StageTraits traits = StageTraits::of(stage);
    const auto own = static_cast<size_t>(traits.shard_optimizer ? p.shard : p.numel);
    EXPECT_EQ(t.memory().peak(MemCategory::kOptimizer), 12 * own) << what;
    EXPECT_EQ(t.memory().peak(MemCategory::kGrads),
              4 * static_cast<size_t>(traits.shard_gradients ? p.shard : p.padded))
        << what;
    using Op = CollectiveOp;
    const uint64_t accum = kAccum;
    // The head's gradient alone is reduced: all-reduced once (stage 0), reduce-scattered once
    // (stage 1) or every micro-batch (stages 2/3); stages 1/2 gather the updated head alone;
    // stage 3 gathers every group for the forward and the head alone for the backward.
    const uint64_t scattered = stage == 0 ? 0 : stage == 1 ? head_padded : accum * head_padded;
    EXPECT_EQ(c[Op::kReduceScatter].elements, n > 1 ? scattered : c[Op::kReduceScatter].elements)
        << what;
    if (n > 1) {
      EXPECT_EQ(c[Op::kReduceScatter].bytes_sent, scattered / n * (n - 1) * 4) << what;
      const uint64_t gathered = stage == 3   ? accum * (all_padded + head_padded)
                                : stage == 0 ? 0
                                             : head_padded;
      EXPECT_EQ(c[Op::kAllGather].bytes_sent, gathered / n * (n - 1) * 2) << what;
    }
    // Stage 0's all-reduce: the head's gradient and the loss; stages 1-3: the loss and the norm.
    EXPECT_EQ(c[Op::kAllReduce].elements, stage == 0 ? head_padded + 1 : 2) << what;
  }
}

// Into one rank at stage 3 − s, bitwise, in bf16 (the frozen groups stored as bf16 values) and fp32
// (kept as digests: the base reloaded from the seed and verified); another trainable set is
// refused on every rank, naming a tensor that changed.
TEST_F(FrozenParametersTest, CheckpointResumesBitwiseAndRefusesAnotherTrainableSet) {
  for (const Precision precision : {Precision::kBf16, Precision::kFp32}) {
    const std::string name = precision == Precision::kBf16 ? "bf16" : "fp32";
    SCOPED_TRACE(name);
    engine_test::ResumeCase c;
    c.options = [precision](int stage) { return frozen_options(stage, precision); };
    c.other = [](EngineOptions& o) { o.trainable.push_back("layers\\.0\\.self_attn\\.q_proj"); };
    c.refusal = "model.layers.0.self_attn.q_proj.weight";
    c.steps = kSteps;
    c.leaves = kLeaves;
    c.lr = kLr;
    c.frozen_as_digest = precision == Precision::kFp32;  // --checkpoint-frozen digest
    engine_test::expect_resumes_bitwise_and_refuses_another(world_, self_, (dir_ / name).string(),
                                                            c);
  }
}

}  // namespace
}  // namespace zt
