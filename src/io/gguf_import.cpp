#include "io/gguf_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/gguf_tokenizer.h"
#include "io/hf_import.h"
#include "io/model_dir.h"
#include "model/hf_checkpoint_tensors.h"
#include "model/layout.h"
#include "model/rope_freq_factors.h"
#include "util/bf16.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/sha256.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// One layer tensor's Hugging Face suffix and GGUF suffix.
struct LayerName {
  const char* hf;
  const char* gguf;
};

constexpr LayerName kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    // Gemma 2's norm before the MLP and its norm of the MLP's output (its norm of the attention's
    // output, post_attention_layernorm, is gguf_tensor_name's own case).
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    // Phi-3's fused projections (model/hf_checkpoint_tensors.h), as llama.cpp's phi3 names them
    // (and GLM-4's gate_up_proj, its glm4's).
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    // GLM-4's norms of the attention's and the MLP's outputs (its post_attention_layernorm is the
    // norm before the MLP, Llama's ffn_norm).
    {"post_self_attn_layernorm.weight", "post_attention_norm.weight"},
    {"post_mlp_layernorm.weight", "post_ffw_norm.weight"},
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// llama.cpp's mistral3 (Ministral 3, its converter's Ministral3Model): yarn's band ends from
// rope.scaling.yarn_beta_fast and _slow (32 and 1 when absent), and the factor on cos and sin
// get_mscale(factor, 1) / get_mscale(factor, yarn_log_multiplier), the config's mscale_all_dim
// (llama.cpp takes mscale as 1; 0: the default magnitude). A rope.scaling.attn_factor, or the
// yarn_attn_factor and yarn_ext_factor the converter writes for a config that gives them, is
// refused.
void read_mistral3_yarn(const GgufReader& g, const std::string& arch, RopeScalingParams& p) {
  for (const char* unread : {"attn_factor", "yarn_attn_factor", "yarn_ext_factor"}) {
    const std::string key = arch + ".rope.scaling." + unread;
    ZT_CHECK(!g.has(key), g.path() + ": metadata '" + key +
                              "' in a mistral3 file is not "
                              "implemented");
  }
  const auto number_or = [&](const char* name, double absent) {
    const std::string key = arch + ".rope.scaling." + name;
    return g.has(key) ? decimal_of_float(static_cast<float>(g.number(key))) : absent;
  };
  p.beta_fast = number_or("yarn_beta_fast", 32.0);
  p.beta_slow = number_or("yarn_beta_slow", 1.0);
  const double log_multiplier = number_or("yarn_log_multiplier", 0.0);
  ZT_CHECK(log_multiplier >= 0.0,
           g.path() + ": metadata '" + arch + ".rope.scaling.yarn_log_multiplier' is negative");
  p.attention_factor =
      yarn_attention_factor(p.factor) / yarn_attention_factor(p.factor, log_multiplier);
}

// The rope scaling of the metadata: none, linear with its factor, or yarn as llama.cpp runs it
// (c's context length read): its factor, its original length (rope.scaling.original_context_length,
// else the context length), the band's rotation counts llama.cpp fixes (32 and 1), and the factor
// on cos and sin, 0.1·ln(factor) + 1 times rope.scaling.attn_factor (1 when absent).
// Without rope.scaling.type llama.cpp takes "linear": a factor (rope.scaling.factor, or the older
// rope.scale_linear) other than 0 and 1 scales. rope.scaling.attn_factor multiplies cos and sin
// whatever the type (Phi-3's longrope reads it in read_phi3_longrope).
RopeScalingParams gguf_rope_scaling(const GgufReader& g, const std::string& arch,
                                    const ModelConfig& c) {
  RopeScalingParams p;
  const std::string key = arch + ".rope.scaling.type";
  const std::string factor_key = g.has(arch + ".rope.scaling.factor")
                                     ? arch + ".rope.scaling.factor"
                                     : arch + ".rope.scale_linear";
  const double factor = g.has(factor_key) ? g.number(factor_key) : 0.0;
  const std::string type = g.has(key)                       ? g.string(key)
                           : factor != 0.0 && factor != 1.0 ? "linear"
                                                            : "none";
  const std::string magnitude = arch + ".rope.scaling.attn_factor";
  ZT_CHECK(type == "yarn" || arch == "phi3" || !g.has(magnitude) || g.number(magnitude) == 1.0,
           g.path() + ": metadata '" + magnitude + "' " + shortest_decimal(g.number(magnitude)) +
               " (llama.cpp's factor on cos and sin) with rope scaling \"" + type +
               "\" is not implemented");
  // llama.cpp's freq_scale of 1 (a factor of 0 or 1) scales nothing, whatever the type says.
  if (type == "none" || ((type == "linear" || type == "yarn") && (factor == 0.0 || factor == 1.0)))
    return p;
  ZT_CHECK(type == "linear" || type == "yarn",
           g.path() + ": metadata '" + key + "' is \"" + type +
               "\"; zerotrain implements linear and yarn rope scaling (and none)");
  p.type = type == "yarn" ? RopeScaling::kYarn : RopeScaling::kLinear;
  p.factor = decimal_of_float(static_cast<float>(factor));
  if (p.type == RopeScaling::kLinear) return p;
  const std::string original = arch + ".rope.scaling.original_context_length";
  p.original_max_positions = g.has(original) ? g.integer(original) : c.max_position_embeddings;
  const std::string log_multiplier = arch + ".rope.scaling.yarn_log_multiplier";
  if (arch == "mistral3") {
    read_mistral3_yarn(g, arch, p);
    return p;
  }
  ZT_CHECK(!g.has(log_multiplier), g.path() + ": metadata '" + log_multiplier +
                                       "' (DeepSeek's yarn magnitude) is not implemented");
  const double stored = g.has(magnitude) ? g.number(magnitude) : 1.0;
  p.attention_factor = stored * yarn_attention_factor(p.factor);
  return p;
}

// RoPE on the leading rope.dimension_count elements of each head: the whole head, or part of it in
// a phi3 or glm4 file (Phi-4-mini's and GLM-4's partial_rotary_factor, as llama.cpp's converter
// writes them), read back as the factor whose int(head_dim · factor) is that count.
void read_rotary_dims(const GgufReader& g, const std::string& arch, ModelConfig& c) {
  const std::string key = arch + ".rope.dimension_count";
  if (!g.has(key) || g.integer(key) == c.head_dim()) return;
  const int64_t dims = g.integer(key), head_dim = c.head_dim();
  const bool partial = arch == "phi3" || arch == "glm4";
  ZT_CHECK(partial && dims > 0 && dims < head_dim && dims % 2 == 0,
           g.path() + ": metadata '" + key + "' is " + std::to_string(dims) +
               ", not the head size " + std::to_string(head_dim) +
               (partial ? " nor an even count below it"
                        : ": RoPE on part of a head is read for phi3 and glm4 files only"));
  double factor = static_cast<double>(dims) / static_cast<double>(head_dim);
  if (static_cast<int64_t>(static_cast<double>(head_dim) * factor) != dims)
    factor = std::nextafter(factor, 1.0);
  c.partial_rotary_factor = factor;
}

void read_attention_shape(const GgufReader& g, const std::string& arch, ModelConfig& c) {
  const std::string& path = g.path();
  const std::string key_length = arch + ".attention.key_length";
  const std::string value_length = arch + ".attention.value_length";
  int64_t head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  if (g.has(key_length)) head_dim = g.integer(key_length);
  ZT_CHECK(!g.has(value_length) || g.integer(value_length) == head_dim,
           path + ": metadata '" + value_length + "' differs from the key length " +
               std::to_string(head_dim) + "; zerotrain's heads have one size");
  c.explicit_head_dim = head_dim * c.num_heads == c.hidden_size ? 0 : head_dim;
  read_rotary_dims(g, arch, c);
  const bool biases = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  ZT_CHECK(arch == "qwen2" || arch == "glm4" || !biases,
           path +
               ": tensor 'blk.0.attn_q.bias': attention biases are read for qwen2 and glm4 files "
               "only");
  c.qkv_bias = arch == "qwen2" || (arch == "glm4" && biases);
  c.qk_norm = arch == "qwen3" || arch == "gemma3" || arch == "olmo2";
  c.fused_projections = arch == "phi3";
  // llama.cpp's olmo2: norms after the attention and the MLP only, q/k norms over whole
  // projections.
  c.sandwich_norms = c.qk_norm_spans_heads = arch == "olmo2";
  c.pre_norms = arch != "olmo2";
  // llama.cpp's glm4: GLM-4's model (its RoPE in adjacent pairs, its "norm" rope type; gate/up
  // one ffn_up; norms on the attention's and the MLP's outputs).
  if (arch == "glm4") c.interleaved_rope = c.fused_gate_up = c.sandwich_norms = true;
  // GLM-4V's language model (multimodal rotary sections) rotates otherwise.
  ZT_CHECK(!g.has(arch + ".rope.dimension_sections"),
           path + ": metadata '" + arch +
               ".rope.dimension_sections' (multimodal rotary positions, llama.cpp's mrope) is "
               "not implemented");
  // llama.cpp's smollm3 takes no RoPE in every fourth layer (its n_no_rope_layer_step, 4, which
  // the file does not carry), as SmolLM3-3B's no_rope_layers says.
  if (arch == "smollm3") c.layers_without_rope = every_nth_layer(kSmolLM3NoRopeStep, c.num_layers);
  if (arch == "gemma" || arch == "gemma2" || arch == "gemma3")
    c.use_gemma_math();  // llama.cpp's gemma, gemma2 and gemma3
}

// llama.cpp's gemma2: the sandwich norms; the caps and the window from the metadata, with
// llama.cpp's defaults (50, 30, 4096); the scale llama.cpp computes, which the file does not carry:
// 1/sqrt(hidden / heads) for the 46 layers of Gemma-2-27B, else 1/sqrt(head_dim), as the
// query_pre_attn_scalar of those models.
void read_gemma2(const GgufReader& g, ModelConfig& c) {
  c.sandwich_norms = true;
  c.query_pre_attn_scalar = llama_cpp_gemma_query_scalar(c);
  auto number = [&](const std::string& key, double absent) {
    return g.has(key) ? g.number(key) : absent;
  };
  c.attn_logit_softcap = static_cast<float>(number("gemma2.attn_logit_softcapping", 50.0));
  c.final_logit_softcap = static_cast<float>(number("gemma2.final_logit_softcapping", 30.0));
  c.sliding_window = g.has("gemma2.attention.sliding_window")
                         ? g.integer("gemma2.attention.sliding_window")
                         : 4096;
}

// llama.cpp's gemma3: Gemma 2's norms with q/k norms, no caps, and what llama.cpp fixes rather than
// reads: every sixth layer attends over every key, the others within the file's (required) window
// and rotate with a base of 10000, unscaled; the scale by the rule above (62 layers: Gemma-3-27B).
void read_gemma3(const GgufReader& g, ModelConfig& c) {
  c.sandwich_norms = true;
  c.query_pre_attn_scalar = llama_cpp_gemma_query_scalar(c);
  c.sliding_window_pattern = kLlamaCppGemma3Pattern;
  c.local_rope_theta = kLlamaCppGemma3LocalRopeBase;
  // Its global layers' base is rope.freq_base (no default that llama.cpp and Gemma 3 share); a
  // file that names the bases another way (Ollama's own gemma3 files write rope.global and
  // rope.local) is not implemented.
  ZT_CHECK(g.has("gemma3.rope.freq_base"),
           g.path() +
               ": no metadata 'gemma3.rope.freq_base' (the global layers' RoPE base; a file "
               "with rope.global.freq_base, as Ollama's own writes, is not implemented)");
  const std::string local = "gemma3.rope.freq_base_swa";
  ZT_CHECK(!g.has(local) || g.number(local) == kLlamaCppGemma3LocalRopeBase,
           g.path() + ": metadata '" + local + "' is " + shortest_decimal(g.number(local)) +
               "; zerotrain reads llama.cpp's gemma3 with the local layers' base of 10000");
  const std::string window = "gemma3.attention.sliding_window";
  ZT_CHECK(g.has(window), g.path() + ": no metadata '" + window + "', which llama.cpp requires");
  c.sliding_window = g.integer(window);
}

// llama.cpp's granite: its four scalars, each required (llama.cpp refuses a file without one),
// as the shortest decimals of their fp32 values.
// llama.cpp's mistral3: Ministral 3's query scale, attention.temperature_scale (β, 0 when
// absent: none) over the yarn original length (its n_ctx_orig_yarn); a window, which the file
// would carry under attention.sliding_window, is not read.
void read_mistral3(const GgufReader& g, ModelConfig& c) {
  const std::string scale = "mistral3.attention.temperature_scale";
  c.llama4_scaling_beta =
      g.has(scale) ? decimal_of_float(static_cast<float>(g.number(scale))) : 0.0;
  c.llama4_scaling_positions = c.rope_scaling.type == RopeScaling::kYarn
                                   ? c.rope_scaling.original_max_positions
                                   : c.max_position_embeddings;
  ZT_CHECK(!g.has("mistral3.attention.sliding_window"),
           g.path() + ": metadata 'mistral3.attention.sliding_window' is not implemented");
}

void read_granite(const GgufReader& g, ModelConfig& c) {
  auto scalar = [&](const char* key) {
    const std::string name = std::string("granite.") + key;
    ZT_CHECK(g.has(name), g.path() + ": no metadata '" + name + "', which llama.cpp requires");
    return decimal_of_float(static_cast<float>(g.number(name)));
  };
  c.embedding_multiplier = scalar("embedding_scale");
  c.attention_multiplier = scalar("attention.scale");
  c.residual_multiplier = scalar("residual_scale");
  c.logits_scaling = scalar("logit_scale");
  ZT_CHECK(c.attention_multiplier > 0.0,
           g.path() +
               ": metadata 'granite.attention.scale' is 0, which llama.cpp reads as "
               "1/sqrt(head_dim) and transformers' Granite as no scale; not imported");
}

// One fp32 factor per rotary frequency, from a 1-D tensor of rotary_dims / 2 values.
std::vector<double> rope_factor_tensor(const GgufReader& g, const char* name, int64_t rotary_dims) {
  const GgufTensorInfo* t = g.find_tensor(name);
  const std::string tensor = g.path() + ": tensor '" + name + "'";
  ZT_CHECK(t != nullptr, g.path() + ": has one of '" + kRopeFactorsShortTensor + "' and '" +
                             kRopeFactorsLongTensor + "' without the other");
  ZT_CHECK(t->dims.size() == 1 && t->dims[0] == rotary_dims / 2,
           tensor + " has shape " + nlohmann::json(t->hf_shape()).dump() + ", not [" +
               std::to_string(rotary_dims / 2) + "] (one factor per rotary frequency)");
  std::vector<float> values(static_cast<size_t>(rotary_dims / 2));
  g.read_rows(*t, 0, 1, values.data());
  return {values.begin(), values.end()};
}

// Phi-3's longrope as llama.cpp writes it: the factor tensors, the original context length and
// the attention factor it computed, which must be the one transformers computes from the lengths.
void read_phi3_longrope(const GgufReader& g, const std::string& arch, ModelConfig& c) {
  const bool factors =
      g.find_tensor(kRopeFactorsShortTensor) || g.find_tensor(kRopeFactorsLongTensor);
  ZT_CHECK(arch == "phi3" || !factors, g.path() + ": longrope factor tensors in a " + arch +
                                           " file; they are read for phi3 files only");
  if (arch != "phi3") return;
  // Phi-3's original length, kept with or without longrope (Phi3Config's default when absent).
  RopeScalingParams& r = c.rope_scaling;
  const std::string original = arch + ".rope.scaling.original_context_length";
  r.original_max_positions = g.has(original) ? g.integer(original) : kPhi3DefaultOriginalPositions;
  ZT_CHECK(r.original_max_positions > 1,
           g.path() + ": metadata '" + original + "' must be above 1");
  if (!factors) return;
  ZT_CHECK(g.has(original), g.path() + ": longrope factors without metadata '" + original + "'");
  r.type = RopeScaling::kLongrope;
  r.short_factor = rope_factor_tensor(g, kRopeFactorsShortTensor, c.rotary_dims());
  r.long_factor = rope_factor_tensor(g, kRopeFactorsLongTensor, c.rotary_dims());
  r.attention_factor =
      longrope_attention_factor(c.max_position_embeddings, r.original_max_positions);
  const std::string stored = arch + ".rope.scaling.attn_factor";
  ZT_CHECK(!g.has(stored) ||
               static_cast<float>(g.number(stored)) == static_cast<float>(r.attention_factor),
           g.path() + ": metadata '" + stored + "' is " + std::to_string(g.number(stored)) +
               ", not longrope's sqrt(1 + ln(context / original) / ln(original)) = " +
               std::to_string(r.attention_factor));
}

// Llama 3.1-style rope scaling: the rope_freqs.weight tensor llama.cpp's converter writes for it.
void read_llama3_rope_factors(const GgufReader& g, const std::string& arch, ModelConfig& c) {
  const GgufTensorInfo* t = g.find_tensor(kRopeFreqsTensor);
  if (!t) return;
  const std::string tensor = g.path() + ": tensor '" + kRopeFreqsTensor + "'";
  ZT_CHECK(arch == "llama" || arch == "granite",
           tensor + " in a " + arch + " file; it is read for llama and granite files only");
  ZT_CHECK(c.rope_scaling.type == RopeScaling::kNone,
           tensor + " beside metadata '" + arch + ".rope.scaling.type': two rope scalings");
  ZT_CHECK(t->dims.size() == 1 && t->dims[0] == c.head_dim() / 2,
           tensor + " has shape " + nlohmann::json(t->hf_shape()).dump() + ", not [" +
               std::to_string(c.head_dim() / 2) + "] (one factor per rotary frequency)");
  std::vector<float> factors(static_cast<size_t>(t->dims[0]));
  g.read_rows(*t, 0, 1, factors.data());
  c.rope_scaling = llama3_scaling_from_freq_factors(factors, c.rope_theta, c.head_dim(), tensor);
}

}  // namespace

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

ModelConfig gguf_model_config(const GgufReader& g) {
  const std::string& path = g.path();
  const std::string arch = g.string("general.architecture");
  ZT_CHECK(arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "phi3" ||
               arch == "smollm3" || arch == "gemma" || arch == "gemma2" || arch == "gemma3" ||
               arch == "olmo2" || arch == "granite" || arch == "glm4" || arch == "mistral3",
           path + ": metadata 'general.architecture' is \"" + arch +
               "\"; zerotrain imports llama (Llama, Mistral, SmolLM, TinyLlama), qwen2, qwen3, "
               "phi3, smollm3, gemma, gemma2, gemma3, olmo2, granite, glm4 and mistral3 "
               "(Ministral 3)");
  auto key = [&](const char* k) { return arch + "." + k; };
  ModelConfig c;
  c.hidden_size = g.integer(key("embedding_length"));
  c.num_layers = g.integer(key("block_count"));
  check_layer_count(c.num_layers, g.path() + " (" + key("block_count") + ")");
  c.intermediate_size = g.integer(key("feed_forward_length"));
  c.num_heads = g.integer(key("attention.head_count"));
  c.num_kv_heads = g.has(key("attention.head_count_kv")) ? g.integer(key("attention.head_count_kv"))
                                                         : c.num_heads;
  c.max_position_embeddings = g.integer(key("context_length"));
  c.rms_norm_eps =
      decimal_of_float(static_cast<float>(g.number(key("attention.layer_norm_rms_epsilon"))));
  c.rope_theta = g.has(key("rope.freq_base"))
                     ? decimal_of_float(static_cast<float>(g.number(key("rope.freq_base"))))
                     : 10000.0;
  // llama.cpp's phi3 has no rope scaling type: its longrope is the factor tensors.
  ZT_CHECK(arch != "phi3" || !g.has(key("rope.scaling.type")),
           path + ": metadata '" + key("rope.scaling.type") +
               "' in a phi3 file; its rope scaling is longrope's factor tensors alone");
  c.rope_scaling = gguf_rope_scaling(g, arch, c);
  const GgufTensorInfo* embedding = g.find_tensor("token_embd.weight");
  ZT_CHECK(embedding && embedding->dims.size() == 2,
           path + ": no 2-D tensor 'token_embd.weight' (the token embedding)");
  c.vocab_size = embedding->dims[1];
  ZT_CHECK(!g.has(key("vocab_size")) || g.integer(key("vocab_size")) == c.vocab_size,
           path + ": metadata '" + key("vocab_size") + "' differs from token_embd.weight's " +
               std::to_string(c.vocab_size) + " rows");
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  // transformers' GGUF loader makes the tokenizer's padding token the config's pad_token_id
  // (the embedding's padding_idx, ModelConfig::padding_token).
  if (g.has("tokenizer.ggml.padding_token_id")) {
    c.padding_token = g.integer("tokenizer.ggml.padding_token_id");
    ZT_CHECK(c.padding_token >= 0 && c.padding_token < c.vocab_size,
             path + ": metadata 'tokenizer.ggml.padding_token_id' is " +
                 std::to_string(c.padding_token) + ", not a row of token_embd.weight (" +
                 std::to_string(c.vocab_size) + ")");
  }
  // OLMo 3's layout (llama.cpp's olmo2 with a window) is not read yet: refused, not read as OLMo 2.
  ZT_CHECK(arch != "olmo2" || !g.has(key("attention.sliding_window")),
           path + ": metadata '" + key("attention.sliding_window") +
               "' in an olmo2 file: OLMo 3's windowed layers, which zerotrain does not read from "
               "GGUF yet (import the Hugging Face checkpoint instead)");
  // Export's, for Mistral; llama.cpp's for Phi-3 (0: none, its Phi-4 files).
  if ((arch == "llama" || arch == "phi3") && g.has(key("attention.sliding_window")))
    c.sliding_window = g.integer(key("attention.sliding_window"));
  read_attention_shape(g, arch, c);
  if (arch == "gemma2") read_gemma2(g, c);
  if (arch == "gemma3") read_gemma3(g, c);
  if (arch == "granite") read_granite(g, c);
  if (arch == "mistral3") read_mistral3(g, c);
  read_llama3_rope_factors(g, arch, c);
  read_phi3_longrope(g, arch, c);
  try {
    c.validate();
  } catch (const Error& e) {
    fail(path + ": " + e.what());
  }
  return c;
}

bool gguf_post_attention_norm_follows_attention(const ModelConfig& c) {
  return c.sandwich_norms && !c.is_glm();
}

std::string gguf_tensor_name(const std::string& hf, bool sandwich_norms) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  ZT_CHECK(hf.rfind(prefix, 0) == 0, "no GGUF name for tensor '" + hf + "'");
  const size_t dot = hf.find('.', prefix.size());
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  // Gemma 2's post_attention_layernorm follows the attention; Llama's precedes the MLP.
  if (sandwich_norms &&
      hf.compare(dot + 1, std::string::npos, "post_attention_layernorm.weight") == 0)
    return "blk." + layer + ".post_attention_norm.weight";
  for (const LayerName& n : kLayerNames)
    if (hf.compare(dot + 1, std::string::npos, n.hf) == 0) return "blk." + layer + "." + n.gguf;
  fail("no GGUF name for tensor '" + hf + "'");
}

double llama_cpp_gemma_query_scalar(const ModelConfig& c) {
  // Gemma-2-27B's 46 layers, Gemma-3-27B's 62: the 27B models llama.cpp knows by their depth.
  const int64_t layers_27b = c.is_gemma3() ? 62 : 46;
  return static_cast<double>(c.num_layers == layers_27b ? c.hidden_size / c.num_heads
                                                        : c.head_dim());
}

bool gguf_permutes_rows(const std::string& architecture, const std::string& hf_name) {
  // llama.cpp's converter permutes them for llama, smollm3, granite and mistral3 (its
  // SmolLM3Model, GraniteModel and Ministral3Model are LlamaModels), whose RoPE pairs adjacent
  // elements.
  return (architecture == "llama" || architecture == "smollm3" || architecture == "granite" ||
          architecture == "mistral3") &&
         (ends_with(hf_name, "self_attn.q_proj.weight") ||
          ends_with(hf_name, "self_attn.k_proj.weight"));
}

float gguf_stored_norm_offset(const std::string& architecture, const std::string& hf_name) {
  return (architecture == "gemma" || architecture == "gemma2" || architecture == "gemma3") &&
                 ends_with(hf_name, "norm.weight")
             ? 1.0f
             : 0.0f;
}

int64_t gguf_permuted_row(int64_t row, int64_t head_dim) {
  const int64_t half = head_dim / 2, within = row % head_dim;
  return row - within + 2 * (within % half) + within / half;
}

namespace {

// Elements [begin, begin + count) of a Hugging Face tensor (whole rows) from its GGUF tensor,
// each row read from where llama.cpp's permutation put it.
void read_hf_range(const GgufReader& g, const GgufTensorInfo& t, bool permuted, int64_t head_dim,
                   int64_t begin, int64_t count, float* out) {
  const int64_t row_length = t.row_length();
  if (t.dims.size() == 1) {  // one row: the whole vector
    std::vector<float> row(static_cast<size_t>(row_length));
    g.read_rows(t, 0, 1, row.data());
    std::copy(row.begin() + begin, row.begin() + begin + count, out);
    return;
  }
  const int64_t first = begin / row_length, rows = count / row_length;
  if (!permuted) return g.read_rows(t, first, rows, out);
  for (int64_t r = 0; r < rows; ++r)
    g.read_rows(t, gguf_permuted_row(first + r, head_dim), 1, out + r * row_length);
}

// Every tensor of the layout present with its shape (Phi-3's fused ones as such), and nothing
// else in the file.
void check_tensors(const GgufReader& g, const ParamLayout& layout, const ModelConfig& c) {
  std::vector<std::string> expected;
  for (const HfCheckpointTensor& t : hf_checkpoint_tensors(layout)) {
    const std::string name =
        gguf_tensor_name(t.name, gguf_post_attention_norm_follows_attention(c));
    expected.push_back(name);
    const GgufTensorInfo* stored = g.find_tensor(name);
    ZT_CHECK(stored != nullptr, g.path() + ": no tensor '" + name + "' (" + t.name +
                                    "), which the model its metadata describes needs");
    ZT_CHECK(stored->hf_shape() == t.shape, g.path() + ": tensor '" + name + "' has shape " +
                                                nlohmann::json(stored->hf_shape()).dump() +
                                                " (outermost first), the model needs " +
                                                nlohmann::json(t.shape).dump());
  }
  // Read and checked with the config (read_llama3_rope_factors), also when all factors are 1.
  if (g.find_tensor(kRopeFreqsTensor)) expected.push_back(kRopeFreqsTensor);
  if (c.rope_scaling.type == RopeScaling::kLongrope)  // read_phi3_longrope
    expected.insert(expected.end(), {kRopeFactorsShortTensor, kRopeFactorsLongTensor});
  for (const GgufTensorInfo& t : g.tensors())
    ZT_CHECK(
        std::find(expected.begin(), expected.end(), t.name) != expected.end(),
        g.path() + ": tensor '" + t.name + "' is not part of the model its metadata describes");
}

}  // namespace

GgufImportResult import_gguf_model(const std::string& gguf_path, const std::string& out_dir,
                                   uint64_t shard_limit_bytes, bool overwrite,
                                   const std::string& tokenizer_dir) {
  const GgufReader g(gguf_path);
  GgufImportResult result;
  result.config = gguf_model_config(g);
  result.architecture = g.string("general.architecture");
  const ParamLayout layout(result.config);
  check_tensors(g, layout, result.config);
  for (const GgufTensorInfo& t : g.tensors())
    ++result.tensor_types[ggml_type_name(static_cast<uint32_t>(t.type))];
  TokenizerFiles tokenizer;
  if (tokenizer_dir.empty()) {
    tokenizer = tokenizer_files_from_gguf(g, result.config.max_positions());
    result.tokenizer_source = "the GGUF vocabulary";
  } else {
    tokenizer = read_tokenizer_files(tokenizer_dir);
    ZT_CHECK(tokenizer.files.count("tokenizer.json"),
             "import: --tokenizer '" + tokenizer_dir + "' holds no tokenizer.json");
    result.tokenizer_source = tokenizer_dir;
  }
  std::map<std::string, std::string> files = tokenizer_files_to_write(tokenizer);
  for (const auto& [name, text] : files) result.tokenizer_files.push_back(name);
  nlohmann::json record = {{"gguf_file", fs::absolute(gguf_path).string()},
                           {"gguf_sha256", sha256_file_hex(gguf_path)},
                           {"architecture", result.architecture},
                           {"name", g.has("general.name") && g.value("general.name").is_string()
                                        ? g.string("general.name")
                                        : ""},
                           {"tensor_types", result.tensor_types},
                           {"tokenizer", result.tokenizer_source},
                           {"tokenizer_files", result.tokenizer_files}};
  files[kImportRecordFile] = record.dump(2) + "\n";
  const int64_t head_dim = result.config.head_dim();
  // A layout tensor is read from its place (Phi-3's fused tensors hold several, whole rows each).
  const std::map<std::string, HfCheckpointPlace> places = hf_checkpoint_places_by_name(layout);
  result.bytes_written = write_model_dir_streaming(
      out_dir, result.config,
      [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
        const HfCheckpointPlace& place = places.at(t.name);
        const GgufTensorInfo& stored = *g.find_tensor(gguf_tensor_name(
            place.name, gguf_post_attention_norm_follows_attention(result.config)));
        const int64_t first = place.element_offset + begin;
        read_hf_range(g, stored, gguf_permutes_rows(result.architecture, t.name), head_dim, first,
                      count, out);
        const float offset = gguf_stored_norm_offset(result.architecture, t.name);
        for (int64_t i = 0; offset != 0.0f && i < count; ++i) out[i] -= offset;
        for (int64_t i = 0; i < count; ++i)
          ZT_CHECK(std::isfinite(round_to_bf16(out[i])),
                   g.path() + ": tensor '" + stored.name +
                       "' holds a value that is not finite in "
                       "bf16 at element " +
                       std::to_string(first + i));
      },
      shard_limit_bytes, overwrite, files);
  return result;
}

}  // namespace zt
