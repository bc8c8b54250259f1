#include "model/hf_config_gemma.h"

#include <cmath>

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

bool is_gemma_type(const std::string& type) {
  return type == "gemma" || type == "gemma2";
}

// Gemma's MLP activation. transformers 4.46 (and back to 4.38) takes it from hidden_activation,
// null meaning the tanh form of GELU whatever hidden_act says (Google's configs say "gelu" there);
// 4.49 and later read hidden_act. zerotrain computes the tanh form (docs/fine-tuning.md, Gemma),
// the one every release computes for hidden_act "gelu_pytorch_tanh"; another hidden_activation, or
// a hidden_act no release reads as a GELU, is refused. Gemma 2's MLP takes hidden_activation
// alone, which cannot be null there (ACT2FN has no None).
void check_gemma_activation(const nlohmann::json& j, const std::string& source,
                            const std::string& type) {
  if (j.contains("hidden_activation") && !j.at("hidden_activation").is_null() &&
      j.at("hidden_activation") != kTanhGelu)
    fail(source + ": 'hidden_activation': " + quoted_json(j.at("hidden_activation")) +
         " is not implemented (Gemma's MLP is GeGLU with \"gelu_pytorch_tanh\")");
  if (type == "gemma2" && j.contains("hidden_activation") && j.at("hidden_activation").is_null())
    fail(source +
         ": 'hidden_activation' is null, which transformers' Gemma 2 cannot build "
         "(absent, it is \"gelu_pytorch_tanh\")");
  if (j.contains("hidden_act") && j.at("hidden_act") != kTanhGelu && j.at("hidden_act") != "gelu")
    fail(source + ": 'hidden_act': " + quoted_json(j.at("hidden_act")) +
         " is not implemented (Gemma's MLP is GeGLU with \"gelu_pytorch_tanh\")");
}

void read_gemma_family(const nlohmann::json& j, const std::string& source, const std::string& type,
                       ModelConfig& c) {
  if (!is_gemma_type(type)) return;
  c.use_gemma_math();
  if (type != "gemma2") return;
  c.sandwich_norms = true;
  c.query_pre_attn_scalar = optional_positive(j, "query_pre_attn_scalar", 224.0, source, false);
  ZT_CHECK(c.query_pre_attn_scalar > 0.0,
           source +
               ": 'query_pre_attn_scalar' is null, which transformers' Gemma 2 cannot use "
               "(absent, it is 224)");
  c.attn_logit_softcap =
      static_cast<float>(optional_positive(j, "attn_logit_softcapping", 50.0, source, true));
  c.final_logit_softcap =
      static_cast<float>(optional_positive(j, "final_logit_softcapping", 30.0, source, true));
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
}

}  // namespace zt
