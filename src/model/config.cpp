#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <type_traits>

#include "model/layout.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

double ModelConfig::training_flops_per_token(int64_t seq_len) const {
  const double non_embedding = static_cast<double>(ParamLayout(*this).non_embedding_numel());
  return 6.0 * non_embedding + 12.0 * static_cast<double>(num_layers) *
                                   static_cast<double>(num_heads) *
                                   static_cast<double>(head_dim()) * static_cast<double>(seq_len);
}

namespace {

struct PresetRow {
  int64_t d, layers, heads, kv_heads, ffn, vocab;
};

const std::map<std::string, PresetRow>& presets() {
  static const std::map<std::string, PresetRow> table = {
      {"tiny", {64, 2, 4, 2, 192, 256}},        {"small", {256, 4, 8, 4, 688, 256}},
      {"125m", {768, 12, 12, 12, 2048, 32000}}, {"1b", {2048, 16, 16, 16, 5504, 32000}},
      {"6b", {4096, 28, 32, 32, 11008, 32000}}, {"7b", {4096, 32, 32, 32, 11008, 32000}},
  };
  return table;
}

template <typename T>
T required(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key)) fail(source + ": missing required key '" + key + "'");
  // A count must be an integer: 64.5 is refused, not truncated to 64.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    ZT_CHECK(j.at(key).is_number_integer(),
             source + ": key '" + key + "' must be an integer, got " + j.at(key).dump());
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(source + ": key '" + key + "' has the wrong type");
  }
}

// Keys of an HF config.json that do not change the model's mathematics (metadata, generation and
// initialisation settings): read past.
const std::vector<std::string>& ignored_hf_keys() {
  static const std::vector<std::string> keys = {
      "_name_or_path",        "architectures",  "bos_token_id",         "eos_token_id",
      "pad_token_id",         "torch_dtype",    "transformers_version", "use_cache",
      "initializer_range",    "pretraining_tp", "tokenizer_class",      "output_attentions",
      "output_hidden_states", "return_dict",    "model_type",           "max_window_layers"};
  return keys;
}

// The architectures zerotrain implements, by config.json model_type, and the class transformers
// loads each as.
const std::map<std::string, std::string>& hf_architectures() {
  static const std::map<std::string, std::string> table = {{"llama", "LlamaForCausalLM"},
                                                           {"mistral", "MistralForCausalLM"},
                                                           {"qwen2", "Qwen2ForCausalLM"},
                                                           {"qwen3", "Qwen3ForCausalLM"}};
  return table;
}

bool is_qwen(const std::string& type) {
  return type == "qwen2" || type == "qwen3";
}

// config.json's model_type ("llama" when absent), or "" when it is not one zerotrain implements.
std::string model_type_of(const nlohmann::json& j) {
  if (!j.contains("model_type")) return "llama";
  const auto& type = j.at("model_type");
  return type.is_string() && hf_architectures().count(type.get<std::string>())
             ? type.get<std::string>()
             : "";
}

// Keys that transformers reads but that do not change a family's model: Qwen's sliding window
// settings while use_sliding_window is false (refused otherwise), and Qwen2's attention_bias
// (its q/k/v projections have biases and its o projection none, whatever the key says).
std::vector<std::string> family_ignored_keys(const std::string& type) {
  if (type == "qwen2") return {"sliding_window", "attention_bias"};
  if (type == "qwen3") return {"sliding_window"};
  return {};
}

// Keys zerotrain implements only at one value (the model it computes): anything else is refused,
// naming the key, instead of training a different model than the checkpoint's.
void check_fixed_hf_keys(const nlohmann::json& j, const std::string& source,
                         const std::string& type) {
  auto refuse = [&](const std::string& key, const std::string& why) {
    fail(source + ": '" + key + "': " + j.at(key).dump() + " " + why);
  };
  if (j.contains("architectures")) {
    const auto& archs = j.at("architectures");
    bool ok = archs.is_array();
    for (const auto& a : archs.is_array() ? archs : nlohmann::json::array())
      ok = ok && a == hf_architectures().at(type);
    if (!ok)
      refuse("architectures", "names another model than model_type \"" + type + "\" (" +
                                  hf_architectures().at(type) + ")");
  }
  auto must_be = [&](const char* key, const nlohmann::json& value, const std::string& why) {
    if (j.contains(key) && j.at(key) != value) refuse(key, why);
  };
  must_be("hidden_act", "silu", "is not implemented (zerotrain's MLP is SwiGLU with silu)");
  must_be("mlp_bias", false, "is not implemented (the MLP projections have no bias)");
  if (type == "mistral")
    must_be("attention_bias", false, "is not applied by transformers' Mistral (no biases)");
  must_be("use_mrope", false, "is not implemented (multimodal rotary positions of Qwen2-VL)");
  must_be("use_sliding_window", false,
          "is not implemented (Qwen's sliding window; Mistral's is read from sliding_window)");
  if (j.contains("attention_dropout") &&
      !(j.at("attention_dropout").is_number() && j.at("attention_dropout").get<double>() == 0.0))
    refuse("attention_dropout", "is not implemented (no dropout)");
  if (j.contains("layer_types")) {
    bool full = j.at("layer_types").is_array();
    for (const auto& t : full ? j.at("layer_types") : nlohmann::json::array())
      full = full && t == "full_attention";
    if (!full) refuse("layer_types", "is not implemented (every layer is \"full_attention\")");
  }
}

const std::vector<std::string>& read_hf_keys() {
  static const std::vector<std::string> keys = {"hidden_size",
                                                "intermediate_size",
                                                "num_hidden_layers",
                                                "num_attention_heads",
                                                "num_key_value_heads",
                                                "vocab_size",
                                                "max_position_embeddings",
                                                "rms_norm_eps",
                                                "rope_theta",
                                                "tie_word_embeddings",
                                                "hidden_act",
                                                "attention_bias",
                                                "mlp_bias",
                                                "rope_scaling",
                                                "sliding_window",
                                                "use_sliding_window",
                                                "attention_dropout",
                                                "head_dim",
                                                "layer_types",
                                                "use_mrope"};
  return keys;
}

bool listed(const std::vector<std::string>& keys, const std::string& key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// config.json "rope_scaling": null, or {"rope_type" (or the older "type"): "linear", "factor"} or
// {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
// "original_max_position_embeddings"}. Other types (dynamic, yarn, longrope) and keys are refused.
RopeScalingParams rope_scaling_from_json(const nlohmann::json& j, const std::string& source) {
  RopeScalingParams p;
  if (!j.contains("rope_scaling") || j.at("rope_scaling").is_null()) return p;
  const nlohmann::json& r = j.at("rope_scaling");
  const std::string where = source + ": 'rope_scaling'";
  ZT_CHECK(r.is_object(), where + " must be null or an object, got " + r.dump());
  // transformers writes "rope_type" and keeps an older "type" beside it: they must agree.
  ZT_CHECK(r.contains("rope_type") || r.contains("type"), where + " has no 'rope_type'");
  const std::string type =
      required<std::string>(r, r.contains("rope_type") ? "rope_type" : "type", where);
  ZT_CHECK(!r.contains("type") || !r.contains("rope_type") || r.at("type") == r.at("rope_type"),
           where + ": 'type' " + r.at("type").dump() + " and 'rope_type' " +
               r.at("rope_type").dump() + " differ");
  std::vector<std::string> keys = {"rope_type", "type", "factor"};
  if (type == "linear") {
    p.type = RopeScaling::kLinear;
  } else if (type == "llama3") {
    p.type = RopeScaling::kLlama3;
    keys.insert(keys.end(),
                {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    p.low_freq_factor = required<double>(r, "low_freq_factor", where);
    p.high_freq_factor = required<double>(r, "high_freq_factor", where);
    p.original_max_positions = required<int64_t>(r, "original_max_position_embeddings", where);
  } else {
    fail(where + ": rope_type '" + type +
         "' is not implemented (linear and llama3 are; dynamic, yarn and longrope change the "
         "angles in other ways)");
  }
  p.factor = required<double>(r, "factor", where);
  for (const auto& [key, value] : r.items())
    if (!listed(keys, key))
      fail(where + ": unknown key '" + key + "' for rope_type '" + type + "'");
  return p;
}

nlohmann::json rope_scaling_to_json(const RopeScalingParams& p) {
  switch (p.type) {
    case RopeScaling::kNone:
      return nullptr;
    case RopeScaling::kLinear:
      return {{"rope_type", "linear"}, {"factor", p.factor}};
    case RopeScaling::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", p.factor},
              {"low_freq_factor", p.low_freq_factor},
              {"high_freq_factor", p.high_freq_factor},
              {"original_max_position_embeddings", p.original_max_positions}};
  }
  return nullptr;
}

// config.json "sliding_window": null (or absent outside Mistral) is none; Mistral's config
// defaults an absent key to 4096, as transformers' MistralConfig does.
// transformers' Llama ignores the key, so a window is refused outside Mistral; Mistral's rotary
// embedding (4.46) has no scaling, so rope_scaling is refused there.
int64_t sliding_window_from_json(const nlohmann::json& j, const std::string& source,
                                 const std::string& type) {
  if (is_qwen(type)) return 0;  // use_sliding_window is false (check_fixed_hf_keys)
  const bool mistral = type == "mistral";
  if (mistral && j.contains("rope_scaling") && !j.at("rope_scaling").is_null())
    fail(source +
         ": 'rope_scaling' is not applied by transformers' Mistral; refused rather than "
         "computing another model than transformers does");
  if (!j.contains("sliding_window")) return mistral ? 4096 : 0;
  if (j.at("sliding_window").is_null()) return 0;
  ZT_CHECK(mistral, source + ": 'sliding_window' " + j.at("sliding_window").dump() +
                        " outside a Mistral config (model_type \"mistral\") is not implemented");
  const auto w = required<int64_t>(j, "sliding_window", source);
  ZT_CHECK(w > 0, source + ": 'sliding_window' must be null or positive, got " + std::to_string(w));
  return w;
}

// The attention's shape by family: head_dim (Qwen3's default 128, else hidden_size /
// num_attention_heads), the projections' biases (Qwen2: q/k/v always; Llama and Qwen3:
// attention_bias, all four) and Qwen3's q/k norms. A head_dim equal to the quotient is kept
// implicit, so a config written with and without it is one model.
void read_attention_shape(const nlohmann::json& j, const std::string& source,
                          const std::string& type, ModelConfig& c) {
  const bool has_head_dim = j.contains("head_dim") && !j.at("head_dim").is_null();
  int64_t head_dim = has_head_dim ? required<int64_t>(j, "head_dim", source) : 0;
  if (!has_head_dim && type == "qwen3") head_dim = 128;  // transformers' Qwen3Config default
  ZT_CHECK(!has_head_dim || head_dim > 0,
           source + ": 'head_dim' must be positive, got " + std::to_string(head_dim));
  if (type == "qwen2" && has_head_dim && head_dim * c.num_heads != c.hidden_size)
    fail(source + ": 'head_dim': " + std::to_string(head_dim) +
         " differs from hidden_size / num_attention_heads = " +
         std::to_string(c.num_heads > 0 ? c.hidden_size / c.num_heads : 0) +
         ", which transformers' Qwen2 uses up to 4.46 (later releases read head_dim); refused "
         "rather than computing another model than some release");
  const bool quotient = c.num_heads > 0 && head_dim * c.num_heads == c.hidden_size;
  c.explicit_head_dim = quotient ? 0 : head_dim;
  // Mistral's attention_bias is refused by check_fixed_hf_keys; Qwen2's is ignored.
  const bool attention_bias = (type == "llama" || type == "qwen3") &&
                              j.contains("attention_bias") &&
                              required<bool>(j, "attention_bias", source);
  c.qkv_bias = type == "qwen2" || attention_bias;
  c.o_bias = type != "qwen2" && attention_bias;
  c.qk_norm = type == "qwen3";
}

}  // namespace

std::vector<std::string> hf_config_ignored_keys(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.is_object()) return out;
  const std::vector<std::string> family = family_ignored_keys(model_type_of(j));
  for (const auto& [key, value] : j.items())
    if (listed(ignored_hf_keys(), key) || listed(family, key)) out.push_back(key);
  return out;
}

void ModelConfig::validate() const {
  // Each size is a GEMM or index dimension: 32-bit for the BLAS and CUDA libraries.
  auto positive = [](int64_t v, const char* name) {
    ZT_CHECK(v > 0 && v <= std::numeric_limits<int32_t>::max(),
             std::string("model config: ") + name + " must be positive and below 2^31, got " +
                 std::to_string(v));
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (explicit_head_dim == 0) {
    ZT_CHECK(hidden_size % num_heads == 0,
             "model config: hidden_size must be a multiple of num_attention_heads (or head_dim "
             "given)");
  } else {
    positive(explicit_head_dim, "head_dim");
  }
  ZT_CHECK(num_heads % num_kv_heads == 0,
           "model config: num_attention_heads must be a multiple of num_key_value_heads");
  ZT_CHECK(head_dim() % 2 == 0, "model config: head_dim must be even for RoPE");
  ZT_CHECK(rms_norm_eps > 0 && std::isfinite(rms_norm_eps),
           "model config: rms_norm_eps must be a positive finite number");
  ZT_CHECK(rope_theta > 0 && std::isfinite(rope_theta),
           "model config: rope_theta must be a positive finite number");
  if (rope_scaling.type != RopeScaling::kNone) {
    const RopeScalingParams& r = rope_scaling;
    ZT_CHECK(r.factor >= 1 && std::isfinite(r.factor),
             "model config: rope_scaling.factor must be a finite number >= 1, got " +
                 shortest_decimal(r.factor));
    if (r.type == RopeScaling::kLlama3) {
      ZT_CHECK(r.low_freq_factor > 0 && r.low_freq_factor < r.high_freq_factor &&
                   std::isfinite(r.high_freq_factor),
               "model config: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got " +
                   shortest_decimal(r.low_freq_factor) + " and " +
                   shortest_decimal(r.high_freq_factor));
      ZT_CHECK(r.original_max_positions > 0,
               "model config: rope_scaling.original_max_position_embeddings must be positive");
    }
  }
  ZT_CHECK(sliding_window >= 0, "model config: sliding_window must be >= 0 (0: none)");
  // Only the combinations a Hugging Face architecture computes (model_type()).
  ZT_CHECK(qkv_bias || !o_bias,
           "model config: an o_proj bias without q/k/v biases is not a "
           "Hugging Face architecture");
  ZT_CHECK(!qk_norm || qkv_bias == o_bias,
           "model config: q/k norms (Qwen3) take attention_bias for all four projections or none");
  ZT_CHECK(sliding_window == 0 || (!qkv_bias && !qk_norm),
           "model config: a sliding window (Mistral) with attention biases or q/k norms is not "
           "implemented");
  ZT_CHECK(!(qkv_bias && !o_bias && !qk_norm) || explicit_head_dim == 0 ||
               explicit_head_dim * num_heads == hidden_size,
           "model config: Qwen2 (q/k/v biases) computes head_dim as hidden_size / "
           "num_attention_heads; another head_dim is not implemented");
  ZT_CHECK(sliding_window == 0 || rope_scaling.type == RopeScaling::kNone,
           "model config: a sliding window (Mistral) with rope_scaling is not implemented");
  // Element offsets, byte counts and FLOP counts are int64/double products of these sizes; a
  // bound far above any real model (2^48 parameters, 2^40 per matrix) keeps them exact.
  const double d = static_cast<double>(hidden_size), ff = static_cast<double>(intermediate_size);
  const double v = static_cast<double>(vocab_size), layers = static_cast<double>(num_layers);
  const double qd = static_cast<double>(q_dim());
  const double largest_matrix = std::max({d * qd, d * ff, d * v});
  const double params = layers * (2 * d * qd + 2 * d * kv_dim() + 3 * d * ff + 4 * d + 2 * qd) +
                        (tie_word_embeddings ? 1 : 2) * d * v + d;
  ZT_CHECK(largest_matrix <= 0x1p40 && params <= 0x1p48,
           "model config: " + shortest_decimal(params) +
               " parameters (hidden_size, intermediate_size, vocab_size, num_hidden_layers) "
               "are beyond what zerotrain can address (2^48 parameters, 2^40 per matrix)");
}

std::string ModelConfig::model_type() const {
  if (qk_norm) return "qwen3";
  if (qkv_bias && !o_bias) return "qwen2";
  return sliding_window > 0 ? "mistral" : "llama";
}

nlohmann::json ModelConfig::to_hf_json() const {
  const std::string type = model_type();
  nlohmann::json j{{"architectures", {hf_architectures().at(type)}},
                   {"model_type", type},
                   {"hidden_size", hidden_size},
                   {"intermediate_size", intermediate_size},
                   {"num_hidden_layers", num_layers},
                   {"num_attention_heads", num_heads},
                   {"num_key_value_heads", num_kv_heads},
                   {"vocab_size", vocab_size},
                   {"max_position_embeddings", max_position_embeddings},
                   {"rms_norm_eps", rms_norm_eps},
                   {"rope_theta", rope_theta},
                   {"tie_word_embeddings", tie_word_embeddings},
                   {"hidden_act", "silu"},
                   {"torch_dtype", "bfloat16"}};
  // Written only when set: the manifest's model fingerprint hashes this object, and checkpoints
  // written before rope_scaling (or head_dim) existed must keep matching it.
  if (rope_scaling.type != RopeScaling::kNone)
    j["rope_scaling"] = rope_scaling_to_json(rope_scaling);
  if (explicit_head_dim > 0 || type == "qwen3") j["head_dim"] = head_dim();
  if (type == "mistral") {
    j["sliding_window"] = sliding_window;
  } else if (type == "llama") {
    j["attention_bias"] = qkv_bias;
    j["mlp_bias"] = false;
  } else {
    j["use_sliding_window"] = false;
    if (type == "qwen3") j["attention_bias"] = qkv_bias;
  }
  return j;
}

ModelConfig ModelConfig::from_hf_json(const nlohmann::json& j, const std::string& source) {
  ZT_CHECK(j.is_object(), source + ": expected a JSON object");
  const std::string type = model_type_of(j);
  if (type.empty())
    fail(source + ": 'model_type': " + j.at("model_type").dump() +
         " is not an architecture zerotrain implements (llama, mistral, qwen2, qwen3)");
  ModelConfig c;
  c.hidden_size = required<int64_t>(j, "hidden_size", source);
  c.intermediate_size = required<int64_t>(j, "intermediate_size", source);
  c.num_layers = required<int64_t>(j, "num_hidden_layers", source);
  c.num_heads = required<int64_t>(j, "num_attention_heads", source);
  c.num_kv_heads = j.contains("num_key_value_heads")
                       ? required<int64_t>(j, "num_key_value_heads", source)
                       : c.num_heads;
  c.vocab_size = required<int64_t>(j, "vocab_size", source);
  c.max_position_embeddings = required<int64_t>(j, "max_position_embeddings", source);
  c.rms_norm_eps = required<double>(j, "rms_norm_eps", source);
  c.rope_theta = j.contains("rope_theta") ? required<double>(j, "rope_theta", source) : 10000.0;
  c.rope_scaling = rope_scaling_from_json(j, source);
  c.sliding_window = sliding_window_from_json(j, source, type);
  c.tie_word_embeddings =
      j.contains("tie_word_embeddings") ? required<bool>(j, "tie_word_embeddings", source) : false;
  read_attention_shape(j, source, type, c);
  try {
    c.validate();
  } catch (const Error& e) {
    fail(source + ": " + e.what());
  }
  check_fixed_hf_keys(j, source, type);
  // A key neither read nor known to be harmless might change the model: refused, named.
  const std::vector<std::string> family_ignored = family_ignored_keys(type);
  for (const auto& [key, value] : j.items()) {
    if (!listed(read_hf_keys(), key) && !listed(ignored_hf_keys(), key) &&
        !listed(family_ignored, key))
      fail(source + ": unknown key '" + key +
           "': zerotrain cannot tell whether it changes the model (the README lists the keys it "
           "reads and the ones it ignores)");
  }
  return c;
}

ModelConfig ModelConfig::from_hf_file(const std::string& path) {
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot open model config '" + path + "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": invalid JSON: " + e.what());
  }
  return from_hf_json(j, path);
}

ModelConfig preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown preset '" + name + "' (known: " + known + ")");
  }
  const PresetRow& p = it->second;
  ModelConfig c;
  c.hidden_size = p.d;
  c.num_layers = p.layers;
  c.num_heads = p.heads;
  c.num_kv_heads = p.kv_heads;
  c.intermediate_size = p.ffn;
  c.vocab_size = p.vocab;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.validate();
  return c;
}

std::vector<std::string> preset_names() {
  return {"tiny", "small", "125m", "1b", "6b", "7b"};
}

}  // namespace zt
