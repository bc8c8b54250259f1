#include "model/hf_config_gemma.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

constexpr const char* kTanhGelu = "gelu_pytorch_tanh";

// A positive finite number (with in_fp32, where the caps are applied, one that stays so in fp32),
// or 0 for null (Gemma2Config's None: no cap); `absent` when missing.
double optional_positive(const nlohmann::json& j, const char* key, double absent,
                         const std::string& source, bool in_fp32) {
  if (!j.contains(key)) return absent;
  const nlohmann::json& v = j.at(key);
  if (v.is_null()) return 0.0;
  const double d = v.is_number() ? v.get<double>() : 0.0;
  const double used = in_fp32 ? static_cast<double>(static_cast<float>(d)) : d;
  ZT_CHECK(v.is_number() && std::isfinite(used) && used > 0.0,
           source + ": '" + key + "' must be a positive number" +
               (in_fp32 ? " (finite in fp32)" : "") + " or null, got " + quoted_json(v));
  return d;
}

}  // namespace

// transformers 4.53 and later write layer_types; it wins over Gemma 3's pattern keys there.
int64_t layer_types_period(const nlohmann::json& j, const std::string& source) {
  if (!j.contains("layer_types") || !j.at("layer_types").is_array()) return 0;
  const nlohmann::json& types = j.at("layer_types");
  const auto first_full = std::find(types.begin(), types.end(), "full_attention");
  const int64_t period = std::distance(types.begin(), first_full) + 1;  // size + 1 when none
  for (size_t l = 0; l < types.size(); ++l) {
    const bool full = (static_cast<int64_t>(l) + 1) % period == 0;
    ZT_CHECK(types[l] == (full ? "full_attention" : "sliding_attention"),
             source + ": 'layer_types' " + quoted_json(types) +
                 " is not every n-th layer \"full_attention\" and the others "
                 "\"sliding_attention\", the pattern Gemma 2 and 3 and OLMo 3 compute");
  }
  return period;
}

namespace {

// Gemma 3's q/k norms, the RoPE base of its windowed layers (Gemma3TextConfig's default 10000)
// and which layers attend over every key: every sliding_window_pattern-th (default 6), or as
// layer_types lists them. transformers' Gemma 3 passes no attention cap to its attention (4.50):
// a file that sets one is refused rather than computed another way.
void read_gemma3_layers(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  c.qk_norm = true;
  ZT_CHECK(c.attn_logit_softcap == 0.0f,
           source + ": 'attn_logit_softcapping' " + quoted_json(j.at("attn_logit_softcapping")) +
               " is not applied by transformers' Gemma 3 (its attention takes no cap; Google's "
               "files say null); refused rather than computing another model");
  c.local_rope_theta = j.contains("rope_local_base_freq")
                           ? optional_positive(j, "rope_local_base_freq", 0.0, source, true)
                           : 10000.0;
  ZT_CHECK(c.local_rope_theta > 0.0, source +
                                         ": 'rope_local_base_freq' is null, which "
                                         "transformers' Gemma 3 cannot use (absent, it is "
                                         "10000)");
  // (transformers 4.53 and later also write `_sliding_window_pattern`, which they do not read.)
  const char* key = "sliding_window_pattern";
  c.sliding_window_pattern = 6;
  if (j.contains(key)) {
    const nlohmann::json& v = j.at(key);
    ZT_CHECK(v.is_number_integer() && v.get<int64_t>() > 0,
             source + ": '" + key + "' must be a positive integer, got " + quoted_json(v));
    c.sliding_window_pattern = v.get<int64_t>();
  }
  if (const int64_t period = layer_types_period(j, source); period > 0)
    c.sliding_window_pattern = period;
}

}  // namespace

bool is_gemma_type(const std::string& type) {
  return type == "gemma" || type == "gemma2" || type == "gemma3_text";
}

// Gemma's MLP activation. transformers 4.46 (and back to 4.38) takes it from hidden_activation,
// null meaning the tanh form of GELU whatever hidden_act says (Google's configs say "gelu" there);
// 4.49 and later read hidden_act. zerotrain computes the tanh form (docs/models.md, Gemma),
// the one every release computes for hidden_act "gelu_pytorch_tanh"; another hidden_activation, or
// a hidden_act no release reads as a GELU, is refused. Gemma 2's MLP takes hidden_activation
// alone, which cannot be null there (ACT2FN has no None).
void check_gemma_activation(const nlohmann::json& j, const std::string& source,
                            const std::string& type) {
  if (j.contains("hidden_activation") && !j.at("hidden_activation").is_null() &&
      j.at("hidden_activation") != kTanhGelu)
    fail(source + ": 'hidden_activation': " + quoted_json(j.at("hidden_activation")) +
         " is not implemented (Gemma's MLP is GeGLU with \"gelu_pytorch_tanh\")");
  if (type != "gemma" && j.contains("hidden_activation") && j.at("hidden_activation").is_null())
    fail(source + ": 'hidden_activation' is null, which transformers' " +
         (type == "gemma2" ? "Gemma 2" : "Gemma 3") +
         " cannot build (absent, it is \"gelu_pytorch_tanh\")");
  if (j.contains("hidden_act") && j.at("hidden_act") != kTanhGelu && j.at("hidden_act") != "gelu")
    fail(source + ": 'hidden_act': " + quoted_json(j.at("hidden_act")) +
         " is not implemented (Gemma's MLP is GeGLU with \"gelu_pytorch_tanh\")");
}

void read_gemma_family(const nlohmann::json& j, const std::string& source, const std::string& type,
                       ModelConfig& c) {
  if (!is_gemma_type(type)) return;
  c.use_gemma_math();
  if (type == "gemma") return;
  // Gemma2Config's defaults, or Gemma3TextConfig's: scalar 256 and no caps.
  const bool gemma3 = type == "gemma3_text";
  c.sandwich_norms = true;
  c.query_pre_attn_scalar =
      optional_positive(j, "query_pre_attn_scalar", gemma3 ? 256.0 : 224.0, source, false);
  ZT_CHECK(c.query_pre_attn_scalar > 0.0,
           source + ": 'query_pre_attn_scalar' is null, which transformers' " +
               (gemma3 ? "Gemma 3 cannot use (absent, it is 256)"
                       : "Gemma 2 cannot use (absent, it is 224)"));
  c.attn_logit_softcap = static_cast<float>(
      optional_positive(j, "attn_logit_softcapping", gemma3 ? 0.0 : 50.0, source, true));
  c.final_logit_softcap = static_cast<float>(
      optional_positive(j, "final_logit_softcapping", gemma3 ? 0.0 : 30.0, source, true));
  if (gemma3) {
    read_gemma3_layers(j, source, c);
    return;
  }
  const int64_t period = layer_types_period(j, source);
  ZT_CHECK(period == 0 || period == 2,
           source + ": 'layer_types' " + quoted_json(j.value("layer_types", nlohmann::json())) +
               " is not Gemma 2's (the even layers \"sliding_attention\", the odd ones "
               "\"full_attention\"), the layers zerotrain slides");
}

void write_gemma_keys(const ModelConfig& c, nlohmann::json& j) {
  // hidden_activation for transformers 4.46 (and back to 4.38), hidden_act for 4.49 and later.
  j["hidden_activation"] = kTanhGelu;
  j["attention_bias"] = c.qkv_bias;
  // Written when none, too: GemmaConfig and Gemma2Config would read its absence as 0.
  if (c.padding_token < 0) j["pad_token_id"] = nullptr;
  if (!c.sandwich_norms) return;
  auto or_null = [](double v) { return v > 0.0 ? nlohmann::json(v) : nlohmann::json(); };
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
  j["attn_logit_softcapping"] = or_null(c.attn_logit_softcap);
  j["final_logit_softcapping"] = or_null(c.final_logit_softcap);
  // Written when none, too: Gemma2Config would read its absence as 4096.
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json();
  if (!c.is_gemma3()) return;
  // transformers 4.50 to 4.52 read sliding_window_pattern; later releases derive layer_types from
  // it when the file has none.
  j["sliding_window_pattern"] = c.sliding_window_pattern;
  j["rope_local_base_freq"] = c.local_rope_theta;
}

}  // namespace zt
