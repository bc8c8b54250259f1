#include <gtest/gtest.h>

#include <limits>

#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/lora.h"
#include "model/trainable.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt {

TEST(Presets, ParameterCounts) {
  // 6b: 28 layers of (4·d² + 3·d·f + 2d) + 2·V·d + d.
  const ModelConfig c = preset_config("6b");
  const ParamLayout layout(c);
  const int64_t d = 4096, f = 11008, V = 32000, L = 28;
  EXPECT_EQ(layout.total_numel(), L * (4 * d * d + 3 * d * f + 2 * d) + 2 * V * d + d);
  EXPECT_NEAR(static_cast<double>(layout.total_numel()) / 1e9, 5.9, 0.1);
  EXPECT_EQ(layout.num_groups(), L + 2);
  EXPECT_THROW(preset_config("13b"), Error);
}

TEST(Layout, GroupsAreContiguousAndOrdered) {
  const ParamLayout layout(preset_config("tiny"));
  for (const auto& g : layout.groups()) {
    int64_t off = 0;
    for (int ti : g.tensors) {
      EXPECT_EQ(layout.tensors()[static_cast<size_t>(ti)].offset, off);
      off += layout.tensors()[static_cast<size_t>(ti)].numel;
    }
    EXPECT_EQ(off, g.numel);
  }
  EXPECT_EQ(layout.tensor(TensorRole::kDownProj, 1).name, "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(layout.tensor(TensorRole::kKProj, 0).shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(layout.tensor(TensorRole::kLmHead).name, "lm_head.weight");
  EXPECT_FALSE(layout.tensor(TensorRole::kInputNorm, 0).weight_decay);
  EXPECT_FALSE(layout.tensor(TensorRole::kEmbedding).weight_decay);
  EXPECT_TRUE(layout.tensor(TensorRole::kQProj, 0).weight_decay);
}

TEST(Config, HfJsonRoundTripAndMissingKey) {
  const ModelConfig c = preset_config("small");
  EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "x"), c);
  auto j = c.to_hf_json();
  j.erase("intermediate_size");
  try {
    ModelConfig::from_hf_json(j, "cfg.json");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate_size"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos);
  }
}

TEST(Config, SizesBeyondWhatCanBeAddressedAreRefused) {
  auto refused = [](const char* key, nlohmann::json value, const char* expected) {
    auto j = preset_config("tiny").to_hf_json();
    j[key] = value;
    try {
      ModelConfig::from_hf_json(j, "cfg.json");
      ADD_FAILURE() << key << " = " << value.dump() << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos) << e.what();
    }
  };
  refused("vocab_size", int64_t{1} << 40, "vocab_size must be positive and below 2^31");
  refused("num_hidden_layers", int64_t{1} << 31, "cfg.json: num_hidden_layers must be 1 to 65536");
  refused("num_hidden_layers", 0, "cfg.json: num_hidden_layers must be 1 to 65536");
  refused("num_hidden_layers", kMaxLayers + 1,
          "num_hidden_layers must be 1 to 65536 (the deepest published models have 126 layers), "
          "got 65537");
  refused("intermediate_size", INT64_MAX, "intermediate_size must be positive and below 2^31");
  refused("max_position_embeddings", int64_t{1} << 40, "max_position_embeddings");
  // Every size below 2^31, but a 2^20 × 2^21 embedding: beyond 2^40 elements per matrix.
  auto j = preset_config("tiny").to_hf_json();
  j["hidden_size"] = int64_t{1} << 20;
  j["vocab_size"] = int64_t{1} << 21;
  try {
    ModelConfig::from_hf_json(j, "cfg.json");
    ADD_FAILURE() << "a 2^41-element embedding was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("beyond what zerotrain can address"), std::string::npos)
        << e.what();
  }
  refused("rope_theta", std::numeric_limits<double>::infinity(), "rope_theta");
  refused("rms_norm_eps", std::numeric_limits<double>::infinity(), "rms_norm_eps");
  // The largest preset is far inside the bound.
  EXPECT_NO_THROW(ModelConfig::from_hf_json(preset_config("7b").to_hf_json(), "7b"));
}

TEST(Init, DeterministicPieceIndependentAndScaled) {
  const ModelConfig c = preset_config("small");
  const ParamLayout layout(c);
  const TensorInfo& q = layout.tensor(TensorRole::kQProj, 0);
  std::vector<float> full(static_cast<size_t>(q.numel)), piece(100);
  init_tensor_range(c, q, 7, 0, q.numel, full.data());
  init_tensor_range(c, q, 7, 1000, 100, piece.data());
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(piece[static_cast<size_t>(i)], full[1000 + static_cast<size_t>(i)]);
  double s = 0, s2 = 0;
  for (float x : full) s += x, s2 += double(x) * x;
  const double n = static_cast<double>(full.size());
  EXPECT_NEAR(s / n, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(s2 / n), 0.02, 1e-3);
  std::vector<float> other(100);
  init_tensor_range(c, q, 8, 1000, 100, other.data());
  EXPECT_NE(other, piece);
  const TensorInfo& o = layout.tensor(TensorRole::kOProj, 0);
  std::vector<float> ov(static_cast<size_t>(o.numel));
  init_tensor_range(c, o, 7, 0, o.numel, ov.data());
  s2 = 0;
  for (float x : ov) s2 += double(x) * x;
  EXPECT_NEAR(std::sqrt(s2 / static_cast<double>(ov.size())), 0.02 / std::sqrt(8.0), 5e-4);
}

TEST(Init, PaddingTokenRowStartsAtZeroInEveryPiece) {
  // transformers zeroes the padding_idx row of the embedding (nn.Embedding, _init_weights).
  ModelConfig c = preset_config("small");
  c.padding_token = 3;
  const ParamLayout layout(c);
  const TensorInfo& e = layout.tensor(TensorRole::kEmbedding, -1);
  const int64_t d = e.shape[1];
  std::vector<float> full(static_cast<size_t>(e.numel));
  init_tensor_range(c, e, 7, 0, e.numel, full.data());
  for (int64_t j = 0; j < d; ++j) EXPECT_EQ(full[static_cast<size_t>(3 * d + j)], 0.0f) << j;
  int64_t nonzero_neighbours = 0;
  for (int64_t j = 0; j < d; ++j)
    nonzero_neighbours += (full[static_cast<size_t>(2 * d + j)] != 0.0f) +
                          (full[static_cast<size_t>(4 * d + j)] != 0.0f);
  EXPECT_EQ(nonzero_neighbours, 2 * d);
  // A piece that straddles the row's start agrees with the whole tensor.
  std::vector<float> piece(static_cast<size_t>(d));
  init_tensor_range(c, e, 7, 3 * d - d / 2, d, piece.data());
  for (int64_t j = 0; j < d; ++j)
    EXPECT_EQ(piece[static_cast<size_t>(j)], full[static_cast<size_t>(3 * d - d / 2 + j)]) << j;
  // A piece that starts inside the row is zero up to the row's end only.
  init_tensor_range(c, e, 7, 3 * d + d / 2, d, piece.data());
  for (int64_t j = 0; j < d; ++j)
    EXPECT_EQ(piece[static_cast<size_t>(j)],
              j < d - d / 2 ? 0.0f : full[static_cast<size_t>(3 * d + d / 2 + j)])
        << j;
  // An untied head keeps its row: padding_idx is the embedding's.
  ASSERT_FALSE(c.tie_word_embeddings);
  const TensorInfo& head = layout.tensor(TensorRole::kLmHead, -1);
  init_tensor_range(c, head, 7, 3 * d, d, piece.data());
  EXPECT_NE(piece[0], 0.0f);
  // Without a padding token no row is zero.
  c.padding_token = -1;
  init_tensor_range(c, e, 7, 3 * d, d, piece.data());
  EXPECT_NE(piece[0], 0.0f);
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1+2^-7: ties to even -> 1.
  EXPECT_EQ(float_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: ties to even -> up.
  EXPECT_EQ(float_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

// torchtitan's useful FLOPs per token, 6·Ψ_non-embedding + 12·L·H·head_dim·T, for the 1b preset
// at T = 2048, the parameter count written out from the shapes: each of 16 layers has q, k, v, o
// (4·2048²), gate, up, down (3·2048·5504) and two norms (2·2048); then the final norm and the
// untied LM head (2048 + 2048·32000). The embedding table is not counted.
TEST(ModelConfig, TrainingFlopsPerTokenIsTorchtitansFormula) {
  const double per_layer = 4.0 * 2048 * 2048 + 3.0 * 2048 * 5504 + 2.0 * 2048;
  const double non_embedding = 16 * per_layer + 2048 + 2048.0 * 32000;
  const double expected = 6 * non_embedding + 12.0 * 16 * 16 * 128 * 2048;
  EXPECT_EQ(training_flops_per_token(preset_config("1b"), 2048), expected);
  EXPECT_EQ(expected, 6055931904.0);
}

// A frozen or LoRA run is counted for the work it does (model/trainable.h): 2 per element forward
// everywhere; from the lowest unit that trains up, 2 for the input gradient and 2 more for a
// tensor that trains; attention 4·H·head_dim·T per layer forward, 8 more in a layer that runs its
// backward. The same 1b shapes, written out.
TEST(ModelConfig, TrainingFlopsPerTokenCountWhatAFrozenOrLoraRunRuns) {
  const ModelConfig config = preset_config("1b");
  const ParamLayout layout(config);
  const double per_layer = 4.0 * 2048 * 2048 + 3.0 * 2048 * 5504 + 2.0 * 2048;
  const double non_embedding = 16 * per_layer + 2048 + 2048.0 * 32000;
  const double attention_forward = 4.0 * 16 * 128 * 2048;  // per layer
  // Every tensor trainable: torchtitan's formula.
  EXPECT_EQ(training_flops_per_token(config, 2048, TrainableSet()),
            training_flops_per_token(config, 2048));
  // Only the LM head: the whole forward, and the head's backward alone (the final norm frozen:
  // its input gradient only).
  const TrainableSet head = TrainableSet::from_patterns(layout, {"^lm_head\\."}, {});
  EXPECT_EQ(training_flops_per_token(config, 2048, head),
            2 * non_embedding + 16 * attention_forward + 4 * 2048.0 * 32000 + 2 * 2048.0);
  // LoRA r 8 on q_proj and v_proj (A [8, 2048], B [2048, 8] each): the base frozen everywhere,
  // every layer runs its backward (layer 0's adapters train).
  ModelConfig lora = config;
  lora.lora.rank = 8;
  lora.lora.targets = LoraSpec::parse_targets({"q_proj", "v_proj"}, "test");
  const ParamLayout lora_layout(lora);
  const double adapters = 16 * 2 * (8.0 * 2048 + 2048.0 * 8);
  const TrainableSet adapters_only = TrainableSet::from_patterns(lora_layout, {}, {});
  EXPECT_EQ(training_flops_per_token(lora, 2048, adapters_only),
            4 * non_embedding + 6 * adapters + 16 * 3 * attention_forward);
  // DoRA: each adapted projection's product with the input once more forward and twice more
  // backward (6 per element of q_proj and v_proj, [2048, 2048] each); the magnitudes are
  // elementwise.
  ModelConfig dora = lora;
  dora.lora.use_dora = true;
  const TrainableSet dora_adapters = TrainableSet::from_patterns(ParamLayout(dora), {}, {});
  EXPECT_EQ(
      training_flops_per_token(dora, 2048, dora_adapters),
      4 * non_embedding + 6 * adapters + 16 * 3 * attention_forward + 16 * 6 * (2 * 2048.0 * 2048));
}

}  // namespace zt
