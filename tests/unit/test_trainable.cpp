// Frozen parameters (model/trainable.h): the --trainable/--freeze patterns and their errors, the
// model's backward with frozen tensors (their products skipped, the trainable tensors' gradients
// bitwise those of a backward with nothing frozen), the stage-3 pass that stops at the lowest
// trainable group, and the estimate of a frozen model's states, including the 6b
// projection-only row (lm_head and the final norm trainable, bf16, one GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/estimator.h"
#include "engine/stage3_residency.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/trainable.h"
#include "support/engine_spec_for.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Trainable, PatternsAreSearchedAndFreezeAppliesAfterTrainable) {
  const ParamLayout layout(preset_config("tiny"));
  const TrainableSet all = TrainableSet::from_patterns(layout, {}, {});
  EXPECT_TRUE(all.all_train());
  EXPECT_EQ(all.trainable_numel(layout), layout.total_numel());

  const TrainableSet head =
      TrainableSet::from_patterns(layout, {"lm_head", "^model\\.norm\\."}, {});
  EXPECT_FALSE(head.all_train());
  EXPECT_TRUE(head.trains(layout.find("lm_head.weight")));
  EXPECT_TRUE(head.trains(layout.find("model.norm.weight")));
  EXPECT_FALSE(head.trains(layout.find("model.embed_tokens.weight")));
  EXPECT_FALSE(head.trains(layout.find("model.layers.1.input_layernorm.weight")));
  EXPECT_EQ(head.group(layout, layout.head_group()), GroupTraining::kAll);
  EXPECT_EQ(head.group(layout, 0), GroupTraining::kNone);
  EXPECT_EQ(head.lowest_backward_group(layout), layout.head_group());
  EXPECT_EQ(head.trainable_numel(layout),
            layout.tensor(TensorRole::kLmHead).numel + layout.tensor(TensorRole::kFinalNorm).numel);
  EXPECT_EQ(head.frozen_names(layout).size(), layout.tensors().size() - 2);

  // Freeze after trainable: layer 1 trains except its norms.
  const TrainableSet layer = TrainableSet::from_patterns(layout, {"layers\\.1\\."}, {"layernorm"});
  EXPECT_TRUE(layer.trains(layout.find("model.layers.1.mlp.up_proj.weight")));
  EXPECT_FALSE(layer.trains(layout.find("model.layers.1.input_layernorm.weight")));
  EXPECT_EQ(layer.group(layout, layout.layer_group(1)), GroupTraining::kSome);
  EXPECT_EQ(layer.lowest_backward_group(layout), layout.layer_group(1));
  // --freeze alone: everything else trains.
  const TrainableSet no_embedding = TrainableSet::from_patterns(layout, {}, {"embed_tokens"});
  EXPECT_EQ(no_embedding.lowest_backward_group(layout), 1);
  EXPECT_EQ(no_embedding.trainable_numel(layout),
            layout.total_numel() - layout.tensor(TensorRole::kEmbedding).numel);
  // By name, as a checkpoint records them.
  const TrainableSet again = TrainableSet::from_frozen_names(layout, layer.frozen_names(layout));
  EXPECT_EQ(again.frozen_flags(), layer.frozen_flags());
}

TEST(Trainable, BadPatternsAreRefusedNamingThem) {
  const ParamLayout layout(preset_config("tiny"));
  struct Case {
    std::vector<std::string> trainable, freeze;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"lm_head", "q_porj"}, {}, "--trainable 'q_porj' matches no tensor"},
      {{}, {"vision"}, "--freeze 'vision' matches no tensor"},
      {{"(unclosed"}, {}, "--trainable '(unclosed' is not a valid regular expression"},
      {{}, {"."}, "leave no tensor to train"},
      {{""}, {}, "empty pattern"},
  };
  for (const Case& c : cases) {
    const std::string error =
        error_of([&] { TrainableSet::from_patterns(layout, c.trainable, c.freeze); });
    EXPECT_NE(error.find(c.message), std::string::npos) << error;
  }
  // A model whose head is the embedding: lm_head names no tensor, and the refusal says what to
  // name; no model with a head of its own gets that hint.
  ModelConfig tied_config = preset_config("tiny");
  tied_config.tie_word_embeddings = true;
  const std::string tied =
      error_of([&] { TrainableSet::from_patterns(ParamLayout(tied_config), {"lm_head"}, {}); });
  EXPECT_NE(tied.find("--trainable 'lm_head' matches no tensor of the model (this model ties "
                      "lm_head to model.embed_tokens.weight, which 'embed_tokens' names"),
            std::string::npos)
      << tied;
  const std::string own_head = error_of([&] {
    TrainableSet::from_patterns(layout, {"lm_head", "q_porj"}, {});
  });
  EXPECT_EQ(own_head.find("ties"), std::string::npos) << own_head;
  const std::string unknown =
      error_of([&] { TrainableSet::from_frozen_names(layout, {"lm_head.bias"}); });
  EXPECT_NE(unknown.find("'lm_head.bias' is not a tensor of the model"), std::string::npos)
      << unknown;
}

// One forward and backward of the tiny model with the seed's weights; grads per group, every
// element first set to `fill` (a frozen tensor's range must keep it).
std::vector<std::vector<float>> gradients(const TrainableSet& trainable, float fill,
                                          int lowest_backward) {
  const ModelConfig c = preset_config("tiny");
  auto be = make_cpu_backend();
  MemoryTracker memory;
  const int64_t B = 2, T = 12;
  LlamaModel model(c, *be, memory, B, T);
  model.set_trainable(trainable);
  const ParamLayout& layout = model.layout();
  std::vector<std::vector<float>> params(static_cast<size_t>(layout.num_groups())), grads;
  for (int g = 0; g < layout.num_groups(); ++g) {
    params[g].assign(static_cast<size_t>(layout.groups()[g].numel), 0.0f);
    for (int t : layout.groups()[g].tensors) {
      const TensorInfo& info = layout.tensors()[static_cast<size_t>(t)];
      init_tensor_range(c, info, 7, 0, info.numel, params[g].data() + info.offset);
    }
    grads.emplace_back(params[g].size(), fill);
  }
  std::vector<int32_t> tokens(2 * B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 256);
  model.set_batch(tokens.data(), tokens.data() + B * T);
  for (int g = 0; g < layout.num_groups(); ++g)
    model.forward_group(g, params[g].data(), true, 1.0f / static_cast<float>(B * T));
  for (int g = layout.num_groups() - 1; g >= lowest_backward; --g)
    model.backward_group(g, params[g].data(),
                         trainable.group_trains(layout, g) ? grads[g].data() : nullptr);
  return grads;
}

TEST(Trainable, FrozenTensorsGetNoGradientAndTheOthersTheSameBits) {
  const ParamLayout layout(preset_config("tiny"));
  const std::vector<std::vector<float>> full = gradients({}, 0.0f, 0);
  for (const std::vector<std::string>& patterns : std::vector<std::vector<std::string>>{
           {"lm_head"}, {"layers\\.1\\.mlp", "norm"}, {"self_attn\\.(q|v)_proj", "embed"}}) {
    const TrainableSet set = TrainableSet::from_patterns(layout, patterns, {});
    const int lowest = set.lowest_backward_group(layout);
    // From zero: a trainable tensor's gradient is bitwise the one with nothing frozen. From a
    // sentinel: a frozen tensor's range is never written.
    const std::vector<std::vector<float>> from_zero = gradients(set, 0.0f, lowest);
    const float kSentinel = -7.0f;
    const std::vector<std::vector<float>> from_sentinel = gradients(set, kSentinel, lowest);
    int trained = 0;
    for (const TensorInfo& t : layout.tensors()) {
      if (!set.group_trains(layout, t.group)) continue;  // no buffer at all in the engine
      const auto g = static_cast<size_t>(t.group);
      const auto at = static_cast<std::ptrdiff_t>(t.offset), end = at + t.numel;
      if (set.trains(layout.index_of(t))) {
        ++trained;
        EXPECT_TRUE(
            std::equal(from_zero[g].begin() + at, from_zero[g].begin() + end, full[g].begin() + at))
            << t.name << " with " << patterns[0] << " trainable";
        EXPECT_TRUE(std::any_of(full[g].begin() + at, full[g].begin() + end,
                                [](float x) { return x != 0.0f; }))
            << t.name << ": a zero gradient cannot tell";
      } else {
        EXPECT_TRUE(std::all_of(from_sentinel[g].begin() + at, from_sentinel[g].begin() + end,
                                [&](float x) { return x == kSentinel; }))
            << t.name << " is frozen but got a gradient";
      }
    }
    EXPECT_GT(trained, 0);
  }
}

TEST(Trainable, StageThreePassStopsAtTheLowestTrainableGroup) {
  EXPECT_EQ(Stage3Residency::training_pass(4, false, 2), (std::vector<int>{0, 1, 2, 3, 3, 2}));
  EXPECT_EQ(Stage3Residency::training_pass(4, true, 3), (std::vector<int>{0, 1, 2, 3, 0, 3, 0}));
  EXPECT_EQ(Stage3Residency::training_pass(4, false, 4), (std::vector<int>{0, 1, 2, 3}));
}

// The 6B analysis's projection-only case: the 6b preset on one GPU in bf16 with only lm_head and
// the final norm trainable. Model states: 2Ψ of bf16 working params, and 4 + 12 bytes of
// gradient and optimizer state per trainable element (ZeRO's mixed-precision Adam, fp32
// accumulation), against 18Ψ with everything trainable.
TEST(Trainable, EstimateOfTheSixBProjectionOnlyCase) {
  const ModelConfig c = preset_config("6b");
  const ParamLayout layout(c);
  const TrainableSet head =
      TrainableSet::from_patterns(layout, {"^lm_head\\.", "^model\\.norm\\."}, {});
  const int64_t psi = layout.total_numel();
  const int64_t trained = c.vocab_size * c.hidden_size + c.hidden_size;
  ASSERT_EQ(head.trainable_numel(layout), trained);
  ZeroConfig zero;
  EngineSpec spec = engine_spec_for(c, zero, 1, 2048);
  spec.trainable = head;
  const MemoryEstimate e = estimate_memory(spec, 1);
  EXPECT_EQ(e.params, 2 * psi);
  EXPECT_EQ(e.grads, 4 * trained);
  EXPECT_EQ(e.optimizer, 12 * trained);
  EXPECT_DOUBLE_EQ(theory_model_states_bytes(psi, 1, 0, Precision::kBf16, psi - trained),
                   static_cast<double>(2 * psi + 16 * trained));
  const MemoryEstimate everything = estimate_memory(engine_spec_for(c, zero, 1, 2048), 1);
  EXPECT_EQ(everything.model_states(), 18 * psi);
  // At 4 ranks and stage 3: every state sharded, the frozen params included.
  spec.zero.stage = 3;
  const MemoryEstimate s3 = estimate_memory(spec, 4);
  int64_t shards = 0;
  for (const GroupInfo& g : layout.groups()) shards += GroupPartition::of(g.numel, 4, 1).shard;
  const int64_t head_shard =
      GroupPartition::of(layout.groups()[static_cast<size_t>(layout.head_group())].numel, 4, 1)
          .shard;
  EXPECT_EQ(s3.params - s3.stage3_gathered, 2 * shards);
  EXPECT_EQ(s3.grads, 4 * head_shard);
  EXPECT_EQ(s3.optimizer, 12 * head_shard);
}

}  // namespace
}  // namespace zt
