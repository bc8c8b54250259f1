// LoRA (model/lora.h): the specification from options and from PEFT's adapter_config.json (its
// refusals naming the key), the adapter groups of the layout and their PEFT names and shapes, the
// initialisation (A inside PEFT's Kaiming-uniform bound, B zero), the compute units and the
// stage-3 pass over them, and which tensors train. The math against PEFT is
// tests/oracle/test_lora.py's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/stage3_residency.h"
#include "io/peft_adapter_file.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/lora.h"
#include "model/trainable.h"
#include "util/error.h"

namespace zt {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ModelConfig with_lora(ModelConfig c, const std::vector<std::string>& targets, int64_t rank = 4) {
  LoraSpec lora;
  lora.rank = rank;
  lora.set_targets(targets, "test");
  c.set_lora(lora);
  return c;
}

ModelConfig tiny_with_lora(const std::vector<std::string>& targets, int64_t rank = 4) {
  return with_lora(preset_config("tiny"), targets, rank);
}

TEST(Lora, ScaleIsAlphaOverRankOrOverItsRootWithRslora) {
  LoraSpec s;
  s.rank = 16;
  s.alpha = 32;
  EXPECT_EQ(s.scale(), 2.0f);
  s.use_rslora = true;
  EXPECT_EQ(s.scale(), 8.0f);
}

TEST(Lora, PeftConfigIsReadAndItsUnsupportedKeysAreRefusedByName) {
  const nlohmann::json config = {{"peft_type", "LORA"},
                                 {"r", 8},
                                 {"lora_alpha", 16},
                                 {"lora_dropout", 0.0},
                                 {"use_rslora", true},
                                 {"bias", "none"},
                                 {"task_type", "CAUSAL_LM"},
                                 {"modules_to_save", {"lm_head"}},
                                 {"target_modules", {"q_proj", "mlp.down_proj"}}};
  const LoraSpec s = LoraSpec::from_peft_json(config, "a.json");
  EXPECT_EQ(s.rank, 8);
  EXPECT_EQ(s.alpha, 16);
  EXPECT_TRUE(s.use_rslora);
  EXPECT_EQ(s.targets_text(), "q_proj,down_proj");
  EXPECT_EQ(s.modules_to_save, std::vector<std::string>{"lm_head"});
  // PEFT's own default targets for Llama-family models.
  EXPECT_EQ(LoraSpec::from_peft_json({{"r", 4}}, "b.json").targets_text(), "q_proj,v_proj");
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json j = config;
    j[key] = std::move(value);
    return error_of([&] { LoraSpec::from_peft_json(j, "c.json"); });
  };
  EXPECT_NE(with("use_dora", "yes").find("c.json: key 'use_dora' must be true or false"),
            std::string::npos);
  EXPECT_TRUE(LoraSpec::from_peft_json({{"r", 4}, {"use_dora", true}}, "d.json").use_dora);
  EXPECT_NE(with("layer_replication", {{0, 1}}).find("c.json: key 'layer_replication'"),
            std::string::npos);
  EXPECT_NE(with("bias", "some").find("key 'bias'"), std::string::npos);
  EXPECT_EQ(with("bias", "all"), "");                    // refused by the model's biases, below
  EXPECT_EQ(with("rank_pattern", {{"q_proj", 4}}), "");  // tests/unit/test_lora_layers.cpp
  EXPECT_NE(with("rank_pattern", {{"q_proj", 0}}).find("c.json: rank_pattern gives 'q_proj' 0"),
            std::string::npos);
  EXPECT_NE(with("peft_type", "IA3").find("only LoRA"), std::string::npos);
  EXPECT_NE(with("r", 0).find("rank must be a positive integer"), std::string::npos);
  EXPECT_NE(with("r", 4.5).find("key 'r' must be an integer"), std::string::npos);
  EXPECT_NE(with("target_modules", {"wq"}).find("'wq' is not a projection"), std::string::npos);
  EXPECT_EQ(with("target_modules", {"wq"}).find("regular expression"), std::string::npos);
  // LLaMA-Factory's 'all', and a regular expression in a list (PEFT reads a list as names):
  // each refusal says what to give instead.
  EXPECT_NE(with("target_modules", {"all"})
                .find("'all' (LLaMA-Factory's word for every linear "
                      "layer) is PEFT's 'all-linear' here"),
            std::string::npos);
  EXPECT_NE(with("target_modules", {".*_proj"})
                .find("a regular expression is read as PEFT reads one, from target_modules as a "
                      "string in --lora-config's file"),
            std::string::npos);
  EXPECT_NE(with("lora_dropout", 1.0).find("lora_dropout must be in [0, 1)"), std::string::npos);
  EXPECT_EQ(with("lora_dropout", 0.05), "");
  EXPECT_EQ(with("exclude_modules", {"down_proj"}), "");  // tests/unit/test_lora_layers.cpp
  EXPECT_NE(with("exclude_modules", 3).find("c.json: key 'exclude_modules' must be"),
            std::string::npos);
  // Newer PEFT's QALoRA and aLoRA change the products; at their defaults they are read past.
  EXPECT_NE(with("use_qalora", true).find("key 'use_qalora'"), std::string::npos);
  EXPECT_NE(with("alora_invocation_tokens", {128000, 9125}).find("key 'alora_invocation_tokens'"),
            std::string::npos);
  EXPECT_EQ(with("use_qalora", false), "");
  EXPECT_NE(with("alora_invocation_tokens", nlohmann::json::array())
                .find("key 'alora_invocation_tokens'"),
            std::string::npos);  // PEFT's use_alora tests `is not None`
  EXPECT_EQ(with("alora_invocation_tokens", nullptr), "");
  // ensure_weight_tying is read (what it changes is checked against the model where
  // modules_to_save is resolved, tests/unit/test_lora_modules_to_save.cpp).
  EXPECT_EQ(with("ensure_weight_tying", true), "");
  EXPECT_NE(with("ensure_weight_tying", "yes")
                .find("c.json: key 'ensure_weight_tying' must be "
                      "true or false"),
            std::string::npos);
  // Keys that describe the adapter, or that stay at their defaults, are read past.
  EXPECT_EQ(with("layers_to_transform", nullptr), "");
  EXPECT_EQ(with("megatron_core", "megatron.core"), "");
  // init_lora_weights: adapters to initialise take PEFT's default alone; trained ones any
  // initialisation that kept the base model's weights, not one that moved part of them into
  // the adapter (PiSSA, OLoRA, LoftQ, CorDA), nor one zerotrain does not know.
  auto trained = [&](nlohmann::json init) {
    nlohmann::json j = config;
    j["init_lora_weights"] = std::move(init);
    return error_of([&] { LoraSpec::from_peft_json(j, "c.json", LoraSpec::Use::kTrainedWeights); });
  };
  EXPECT_EQ(with("init_lora_weights", true), "");
  for (const nlohmann::json& kept :
       {nlohmann::json(true), nlohmann::json(false), nlohmann::json("gaussian"),
        nlohmann::json("Gaussian"), nlohmann::json("eva")}) {
    EXPECT_EQ(trained(kept), "") << kept;
    if (kept != true) {
      EXPECT_NE(with("init_lora_weights", kept).find("zerotrain initialises as PEFT's default"),
                std::string::npos)
          << kept;
    }
  }
  for (const char* moved : {"pissa", "pissa_niter_4", "olora", "OLoRA", "loftq", "corda"})
    EXPECT_NE(trained(moved).find("moved part of the base model's weights into the adapter"),
              std::string::npos)
        << moved;
  EXPECT_NE(trained("orthogonal").find("an initialisation zerotrain does not know"),
            std::string::npos);
}

// An adapter config's keys: one near a LoraConfig key is a misspelling, refused naming both (read
// past, lora_aplha would train at the default alpha); one that is no key PEFT 0.2 to 0.20 knows
// is a newer PEFT's, read past with a warning on rank 0 as PEFT 0.14 and later read past keys
// they do not know; the keys of other LoRA variants are refused unless at their defaults.
TEST(Lora, MisspeltKeysAreRefusedNewerOnesReadPastWithAWarning) {
  const std::string alpha = error_of([] {
    LoraSpec::from_peft_json({{"r", 8}, {"lora_aplha", 16}}, "typo.json");
  });
  EXPECT_NE(alpha.find("typo.json: unknown key 'lora_aplha'; did you mean 'lora_alpha'?"),
            std::string::npos)
      << alpha;
  EXPECT_NE(error_of([] {
              LoraSpec::from_peft_json({{"r", 8}, {"target_module", {"k_proj"}}}, "t.json");
            }).find("did you mean 'target_modules'?"),
            std::string::npos);
  const nlohmann::json newer = {
      {"r", 8}, {"peft_version", "0.20.0"}, {"kasa_config", nullptr}, {"future_knob", 3}};
  EXPECT_EQ(LoraSpec::from_peft_json(newer, "n.json").rank, 8);
  EXPECT_EQ(LoraSpec::unknown_peft_keys(newer), std::vector<std::string>{"future_knob"});
  const std::string path = ::testing::TempDir() + "zt_lora_newer_" +
                           std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                           ".json";
  std::ofstream(path) << newer.dump();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(read_peft_adapter_config(path, LoraSpec::Use::kInitialise).rank, 8);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(warned, "warning: " + path +
                        ": key 'future_knob' is no PEFT LoraConfig key zerotrain knows (PEFT 0.2 "
                        "to 0.20); read past, as PEFT 0.14 and later read past keys they do not "
                        "know\n");
  std::filesystem::remove(path);
  for (const char* variant : {"kasa_config", "velora_config", "arrow_config", "monteclora_config"})
    EXPECT_NE(error_of([&] {
                LoraSpec::from_peft_json({{"r", 8}, {variant, {{"x", 1}}}}, "v.json");
              }).find(std::string("v.json: key '") + variant + "' = {\"x\":1} is not supported"),
              std::string::npos)
        << variant;
  EXPECT_NE(error_of([] {
              LoraSpec::from_peft_json({{"r", 8}, {"use_bdlora", {{"nblocks", 2}}}}, "b.json");
            }).find("key 'use_bdlora' = {\"nblocks\":2} is not supported"),
            std::string::npos);
  // Another PEFT method's keys are no misspelt LoRA keys: its type is refused first.
  EXPECT_NE(
      error_of([] {
        LoraSpec::from_peft_json({{"peft_type", "LOHA"}, {"r", 8}, {"rank_dropout", 0}}, "h.json");
      }).find("only LoRA adapters"),
      std::string::npos);
}

// PEFT's bias "lora_only" trains the biases of the adapted projections, "all" every bias: on a
// model without them (Llama, Mistral) PEFT trains none, as zerotrain does; where the model has
// them (Qwen2's q/k/v, attention_bias's o) the config is refused naming the file and key.
TEST(Lora, ABiasSettingIsRefusedOnlyWhereTheModelHasBiasesItWouldTrain) {
  auto layout_error = [](bool qkv, bool o, const char* bias, std::vector<std::string> targets) {
    ModelConfig c = preset_config("tiny");
    c.qkv_bias = qkv;
    c.o_bias = o;
    c.lora =
        LoraSpec::from_peft_json({{"r", 4}, {"bias", bias}, {"target_modules", targets}}, "m.json");
    return error_of([&] { ParamLayout layout(c); });
  };
  EXPECT_EQ(layout_error(false, false, "lora_only", {"q_proj"}), "");
  EXPECT_EQ(layout_error(false, false, "all", {"q_proj"}), "");
  EXPECT_EQ(layout_error(true, false, "lora_only", {"gate_proj", "o_proj"}), "");
  const std::string qkv = layout_error(true, false, "lora_only", {"v_proj"});
  EXPECT_NE(qkv.find("m.json: key 'bias' = \"lora_only\" would train this model's q/k/v biases"),
            std::string::npos)
      << qkv;
  EXPECT_NE(layout_error(true, true, "all", {"gate_proj"}).find("q/k/v biases"), std::string::npos);
  // The setting travels with the model config (a checkpoint's, run.json's); where it was read
  // does not make two specs differ.
  const LoraSpec read = LoraSpec::from_peft_json({{"r", 4}, {"bias", "all"}}, "x.json");
  const LoraSpec again = LoraSpec::from_peft_json(read.to_json(), "y.json");
  EXPECT_EQ(again.bias, "all");
  EXPECT_TRUE(again == read);
  EXPECT_NE(layout_error(true, true, "lora_only", {"o_proj"}).find("o_proj biases"),
            std::string::npos);
}

// A target_modules string other than all-linear is PEFT's regular expression, matched whole
// against every module path: where it selects the same projections in every layer, a spec equal
// to the listed one, written back as the list; where it selects by layer, the regex itself;
// refused naming the file and the module where it selects a module that is no projection, or no
// projection of the model's layers. The cases against PEFT itself are
// tests/oracle/test_peft_adapter_configs.py's.
TEST(Lora, ATargetModulesRegexSelectsProjectionsLayerByLayer) {
  auto spec = [](const char* regex) {
    return LoraSpec::from_peft_json({{"r", 4}, {"target_modules", regex}}, "p.json");
  };
  auto layout_error = [&](const char* regex, int64_t layers) {
    ModelConfig c = preset_config("tiny");
    c.num_layers = layers;
    return error_of([&] {
      (void)c.set_lora(spec(regex));
      ParamLayout layout(c);
    });
  };
  const LoraSpec listed =
      LoraSpec::from_peft_json({{"r", 4}, {"target_modules", {"q_proj", "down_proj"}}}, "l.json");
  const LoraSpec matched = spec(R"(model\.layers\.\d+\.(self_attn\.q|mlp\.down)_proj)");
  EXPECT_EQ(matched.targets_text(), "q_proj,down_proj");
  EXPECT_TRUE(matched == listed);
  EXPECT_EQ(matched.to_json()["target_modules"], listed.to_json()["target_modules"]);
  EXPECT_EQ(layout_error(R"(model\.layers\.\d+\.(self_attn\.q|mlp\.down)_proj)", 12), "");
  // Whole, as Python's fullmatch: the bare alternative "v_proj" selects no module path.
  EXPECT_EQ(spec(R"(.*\.q_proj|v_proj)").targets_text(), "q_proj");
  // Layers 0 to 9 of twelve: v_proj there alone, the regex written back.
  ModelConfig twelve = preset_config("tiny");
  twelve.num_layers = 12;
  (void)twelve.set_lora(spec(R"(model\.layers\.[0-9]\.self_attn\.v_proj)"));
  EXPECT_TRUE(twelve.lora.target_pattern.per_layer);
  EXPECT_EQ(twelve.lora.to_json()["target_modules"], R"(model\.layers\.[0-9]\.self_attn\.v_proj)");
  const ParamLayout by_layer(twelve);
  for (int l = 0; l < 12; ++l)
    EXPECT_EQ(by_layer.lora_tensor(l, static_cast<int>(LoraTarget::kV), false) >= 0, l < 10) << l;
  EXPECT_FALSE(LoraSpec(twelve.lora) == spec(R"(.*\.v_proj)"));
  // Another by-layer pattern is another spec; the same one, read back, the same.
  ModelConfig other = twelve.base();
  (void)other.set_lora(spec(R"(model\.layers\.[0-8]\.self_attn\.v_proj)"));
  EXPECT_TRUE(other.lora.target_pattern.per_layer);
  EXPECT_FALSE(other.lora == twelve.lora);
  ModelConfig again = twelve.base();
  (void)again.set_lora(LoraSpec::from_peft_json(twelve.lora.to_json(), "r.json"));
  EXPECT_TRUE(again.lora == twelve.lora);
  EXPECT_EQ(layout_error(R"(model\.layers\.[0-9]\.self_attn\.v_proj)", 10), "");
  // Layer 5 alone: a projection of a model with six layers, none of one with two.
  EXPECT_EQ(layout_error(R"(model\.layers\.5\..*_proj)", 6), "");
  EXPECT_NE(layout_error(R"(model\.layers\.5\..*_proj)", 2)
                .find("selects no projection in the model's 2 layers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { spec(R"(model\.layers\.\d+\.mlp)"); }).find("selects no projection ("),
            std::string::npos);
  EXPECT_NE(layout_error(".*_proj|lm_head", 2).find("selects 'lm_head'"), std::string::npos);
  EXPECT_NE(layout_error(".*_proj|.*embed_tokens", 2).find("selects 'model.embed_tokens'"),
            std::string::npos);
  EXPECT_NE(layout_error(".*k_proj|.*layers\\.1\\.input_layernorm", 2)
                .find("selects 'model.layers.1.input_layernorm', which is no linear layer"),
            std::string::npos);
  // Qwen3's q/k norms sit beside the projections in self_attn; PEFT cannot adapt a norm.
  ModelConfig qwen3 = preset_config("tiny");
  qwen3.qk_norm = true;
  EXPECT_NE(error_of([&] {
              (void)qwen3.set_lora(spec(R"(.*\.self_attn\.[qk]_.*)"));
            }).find("selects 'model.layers.0.self_attn.q_norm', which is no linear layer"),
            std::string::npos);
  // OLMo 2 has no input_layernorm (PEFT sees none to refuse); its post_feedforward_layernorm is
  // no linear layer.
  ModelConfig olmo2 = preset_config("tiny");
  olmo2.sandwich_norms = olmo2.qk_norm = olmo2.qk_norm_spans_heads = true;
  olmo2.pre_norms = false;
  EXPECT_EQ(error_of([&] { (void)olmo2.set_lora(spec(R"(.*_proj|.*input_layernorm)")); }), "");
  EXPECT_NE(
      error_of([&] {
        (void)olmo2.set_lora(spec(R"(.*_proj|.*post_feedforward_layernorm)"));
      }).find("selects 'model.layers.0.post_feedforward_layernorm', which is no linear layer"),
      std::string::npos);
  // Every attention of transformers 4.46's Llama holds its rotary embedding (PEFT: unsupported).
  qwen3.qk_norm = false;
  EXPECT_NE(error_of([&] {
              (void)qwen3.set_lora(spec(R"(.*\.self_attn\..*)"));
            }).find("selects 'model.layers.0.self_attn.rotary_emb', which is no linear layer"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              (void)qwen3.set_lora(spec(R"(.*\.self_attn\..*_proj)"));
              ParamLayout layout(qwen3);
            }),
            "");
  // Python's x{,n} is x{0,n}; RE2 would read the characters: refused, saying so.
  EXPECT_NE(error_of([&] {
              spec(R"(.*q_proj|model\.layers\.\d{,2}\.mlp\..*)");
            }).find("repeats with '{,': Python reads x{,n} as x{0,n}"),
            std::string::npos);
  EXPECT_EQ(spec(R"(.*q_proj|x\{,)").targets_text(), "q_proj");  // an escaped brace
  // PEFT compares all-linear in any case.
  EXPECT_EQ(spec("ALL-LINEAR").targets_text(),
            LoraSpec::from_peft_json({{"r", 4}, {"target_modules", "all-linear"}}, "a.json")
                .targets_text());
  const std::string look = error_of([&] { spec("(?!k).*_proj"); });
  EXPECT_NE(look.find("p.json: target_modules \"(?!k).*_proj\" is a regular expression RE2 "
                      "cannot read"),
            std::string::npos)
      << look;
}

TEST(Lora, LayoutAddsOneAdapterGroupPerLayerWithPeftNamesAndShapes) {
  const ModelConfig c = tiny_with_lora({"q_proj", "down_proj"});
  const ParamLayout base(c.base()), layout(c);
  const int L = static_cast<int>(c.num_layers);
  ASSERT_EQ(layout.num_groups(), base.num_groups() + L);
  EXPECT_EQ(layout.head_group(), base.head_group());
  EXPECT_EQ(layout.num_compute_units(), L + 2);
  // The base tensors keep their groups and offsets: a model directory loads unchanged.
  for (const TensorInfo& t : base.tensors()) {
    const TensorInfo& same = layout.tensors()[static_cast<size_t>(layout.find(t.name))];
    EXPECT_EQ(same.group, t.group);
    EXPECT_EQ(same.offset, t.offset);
  }
  const int q_a = layout.find("model.layers.1.self_attn.q_proj.lora_A.weight");
  const int down_b = layout.find("model.layers.1.mlp.down_proj.lora_B.weight");
  ASSERT_GE(q_a, 0);
  ASSERT_GE(down_b, 0);
  EXPECT_EQ(layout.find("model.layers.1.self_attn.k_proj.lora_A.weight"), -1);
  EXPECT_EQ(layout.tensors()[static_cast<size_t>(q_a)].shape,
            (std::vector<int64_t>{4, c.hidden_size}));
  EXPECT_EQ(layout.tensors()[static_cast<size_t>(down_b)].shape,
            (std::vector<int64_t>{c.hidden_size, 4}));
  EXPECT_EQ(layout.tensors()[static_cast<size_t>(q_a)].group, layout.adapter_group(1));
  EXPECT_EQ(layout.compute_unit_of(layout.adapter_group(1)), layout.layer_group(1));
  EXPECT_EQ(layout.lora_tensor(1, static_cast<int>(LoraTarget::kQ), false), q_a);
  EXPECT_EQ(layout.lora_tensor(1, static_cast<int>(LoraTarget::kDown), true), down_b);
  EXPECT_EQ(layout.unit_groups(layout.layer_group(1)),
            (std::vector<int>{layout.layer_group(1), layout.adapter_group(1)}));
}

// Phi-3's fused adapters too: A on the shared input [r, hidden], B over the parts' rows.
TEST(Lora, AdaptersStartAsPeftDoes) {
  ModelConfig phi3 = preset_config("tiny");
  phi3.fused_projections = true;
  for (const ModelConfig& c : {tiny_with_lora({"all-linear"}), with_lora(phi3, {"all-linear"})}) {
    const ParamLayout layout(c);
    for (const TensorInfo& t : layout.tensors()) {
      if (!t.is_lora()) continue;
      std::vector<float> v(static_cast<size_t>(t.numel));
      init_tensor_range(c, t, 7, 0, t.numel, v.data());
      float largest = 0, lowest = 0, highest = 0;
      double sum = 0, sum_squares = 0;
      for (float x : v) {
        largest = std::max(largest, std::fabs(x));
        lowest = std::min(lowest, x);
        highest = std::max(highest, x);
        sum += x;
        sum_squares += static_cast<double>(x) * x;
      }
      if (t.role == TensorRole::kLoraB) {
        EXPECT_EQ(largest, 0.0f) << t.name;
        continue;
      }
      // U(−b, b), b = 1/√in: within the bound, reaching most of it on both sides (n ≥ 256
      // draws: each side misses 0.9·b with probability 0.95^n < 2e-6), with the mean and the mean
      // square of U(−b, b) within 5 standard deviations of their expected 0 and b²/3 (the
      // variances of one draw: b²/3 and Var(x²) = b⁴/5 − b⁴/9 = 4b⁴/45).
      const double b = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));
      const auto n = static_cast<double>(v.size());
      ASSERT_GE(n, 256) << t.name;
      EXPECT_LE(largest, static_cast<float>(b)) << t.name;
      EXPECT_LT(lowest, -0.9 * b) << t.name;
      EXPECT_GT(highest, 0.9 * b) << t.name;
      EXPECT_LT(std::fabs(sum / n), 5 * b / std::sqrt(3 * n)) << t.name;
      EXPECT_LT(std::fabs(sum_squares / n - b * b / 3), 5 * b * b * std::sqrt(4 / (45 * n)))
          << t.name;
    }
  }
}

TEST(Lora, OnlyAdaptersAndNamedEndTensorsTrainAndThePassStopsAtLayerZero) {
  const ModelConfig c = tiny_with_lora({"v_proj"});
  const ParamLayout layout(c);
  const TrainableSet adapters_only = TrainableSet::from_patterns(layout, {}, {});
  for (size_t t = 0; t < layout.tensors().size(); ++t)
    EXPECT_EQ(adapters_only.trains(static_cast<int>(t)), layout.tensors()[t].is_lora())
        << layout.tensors()[t].name;
  EXPECT_EQ(adapters_only.lowest_backward_group(layout), layout.layer_group(0));
  const TrainableSet with_head =
      TrainableSet::from_patterns(layout, {"(^|\\.)lm_head\\.weight$"}, {});
  EXPECT_TRUE(with_head.trains(layout.index_of(layout.tensor(TensorRole::kLmHead))));
  EXPECT_NE(error_of([&] {
              TrainableSet::from_patterns(layout, {"layers\\.0\\.mlp"}, {});
            }).find("with LoRA a decoder layer's own tensors stay frozen"),
            std::string::npos);
  // Forward over every unit, each layer with its adapters; backward down to layer 0.
  const std::vector<int> uses = Stage3Residency::flatten(
      Stage3Residency::unit_pass(layout, adapters_only.lowest_backward_group(layout)));
  const int L = static_cast<int>(c.num_layers), head = layout.head_group();
  std::vector<int> want = {0};
  for (int l = 0; l < L; ++l) want.insert(want.end(), {1 + l, layout.adapter_group(l)});
  want.push_back(head);
  want.push_back(head);
  for (int l = L - 1; l >= 0; --l) want.insert(want.end(), {1 + l, layout.adapter_group(l)});
  EXPECT_EQ(uses, want);
}

}  // namespace
}  // namespace zt
