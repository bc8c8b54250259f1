// config.json's RoPE keys (model/hf_config_rope.h): transformers 4.x's rope_theta and
// rope_scaling, 5.x's rope_parameters (Gemma 3's one object per layer type), Phi-3's original
// length and partial rotation, as transformers reads them (docs/models.md: the key policy).
#include "model/hf_config_rope.h"

#include <cmath>
#include <iterator>

#include "backend/rope.h"
#include "model/hf_config_keys.h"
#include "model/hf_config_value.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

// yarn's keys beside rope_type and factor, as transformers reads them (4.46, and 4.56 on).
constexpr const char* kYarnKeys[] = {"original_max_position_embeddings",
                                     "attention_factor",
                                     "beta_fast",
                                     "beta_slow",
                                     "mscale",
                                     "mscale_all_dim",
                                     "truncate"};

// A positive finite number, or `absent` where the key is missing, null or (with zero_is_absent,
// as Python's `value or default` reads it) 0.
double positive_or(const nlohmann::json& r, const char* key, double absent,
                   const std::string& where, bool zero_is_absent) {
  if (!r.contains(key) || r.at(key).is_null()) return absent;
  const nlohmann::json& v = r.at(key);
  ZT_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0.0 &&
               (zero_is_absent || v.get<double>() > 0.0),
           where + ": '" + key + "' must be a positive number, got " + quoted_json(v));
  return v.get<double>() == 0.0 ? absent : v.get<double>();
}

// yarn (p.factor read): its original length (0 when absent: max_position_embeddings, set by
// read_rope_lengths), the band's rotation counts (beta_fast 32, beta_slow 1 when absent, null or
// 0), and the factor on cos and sin: attention_factor, else get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are given, else 0.1·ln(factor) + 1. transformers
// since its fix of issue 38224, vLLM and llama.cpp read them so; 4.46 to 4.49 took the band from
// max_position_embeddings and read no mscale, and 4.54 took max_position_embeddings /
// original_max_position_embeddings for the factor (docs/models.md, "YaRN").
void read_yarn(const nlohmann::json& r, const std::string& where, RopeScalingParams& p) {
  if (r.contains("original_max_position_embeddings") &&
      !r.at("original_max_position_embeddings").is_null()) {
    p.original_max_positions = required_key<int64_t>(r, "original_max_position_embeddings", where);
    ZT_CHECK(p.original_max_positions > 0,
             where + ": 'original_max_position_embeddings' must be positive, got " +
                 std::to_string(p.original_max_positions));
  }
  p.beta_fast = positive_or(r, "beta_fast", 32.0, where, true);
  p.beta_slow = positive_or(r, "beta_slow", 1.0, where, true);
  // transformers reads rope_scaling.get("truncate", True): a null is falsy, an unrounded band.
  ZT_CHECK(!r.contains("truncate") || r.at("truncate") == true,
           where + ": 'truncate': " + quoted_json(r.at("truncate")) +
               " is not implemented (the band's ends are rounded outward, as every Llama-family "
               "yarn checkpoint has them)");
  const double mscale = positive_or(r, "mscale", 0.0, where, true);
  const double mscale_all_dim = positive_or(r, "mscale_all_dim", 0.0, where, true);
  p.attention_factor = mscale > 0.0 && mscale_all_dim > 0.0
                           ? yarn_attention_factor(p.factor, mscale) /
                                 yarn_attention_factor(p.factor, mscale_all_dim)
                           : yarn_attention_factor(p.factor);
  p.attention_factor = positive_or(r, "attention_factor", p.attention_factor, where, false);
}

// A longrope factor list (short_factor, long_factor): positive finite numbers.
std::vector<double> rope_factor_list(const nlohmann::json& r, const char* key,
                                     const std::string& where) {
  ZT_CHECK(r.contains(key), where + " has no '" + key + "'");
  const nlohmann::json& list = r.at(key);
  ZT_CHECK(list.is_array(), where + ": '" + key + "' must be a list of numbers");
  std::vector<double> out;
  for (const auto& v : list) {
    ZT_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0,
             where + ": '" + key + "' holds " + quoted_json(v) + ", not a positive number");
    out.push_back(v.get<double>());
  }
  return out;
}

// One rope object: {"rope_type" (or the older "type"): "default" | "linear" | "llama3" | "yarn" |
// "longrope", its parameters}, as config.json's rope_scaling (transformers 4.x) or rope_parameters
// (5.x, which also holds rope_theta: `extra_keys`). "default" is no scaling. Other types and keys
// are refused.
RopeScalingParams rope_scaling_from_object(const nlohmann::json& r, const std::string& where,
                                           const std::vector<std::string>& extra_keys) {
  RopeScalingParams p;
  ZT_CHECK(r.is_object(), where + " must be null or an object, got " + quoted_json(r));
  // transformers writes "rope_type" and keeps an older "type" beside it: they must agree.
  ZT_CHECK(r.contains("rope_type") || r.contains("type"), where + " has no 'rope_type'");
  const std::string type =
      required_key<std::string>(r, r.contains("rope_type") ? "rope_type" : "type", where);
  ZT_CHECK(!r.contains("type") || !r.contains("rope_type") || r.at("type") == r.at("rope_type"),
           where + ": 'type' " + quoted_json(r.at("type")) + " and 'rope_type' " +
               quoted_json(r.at("rope_type")) + " differ");
  std::vector<std::string> keys = {"rope_type", "type"};
  keys.insert(keys.end(), extra_keys.begin(), extra_keys.end());
  if (type == "default") {
    p.type = RopeScaling::kNone;
  } else if (type == "linear") {
    p.type = RopeScaling::kLinear;
  } else if (type == "llama3") {
    p.type = RopeScaling::kLlama3;
    keys.insert(keys.end(),
                {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
    p.low_freq_factor = required_key<double>(r, "low_freq_factor", where);
    p.high_freq_factor = required_key<double>(r, "high_freq_factor", where);
    p.original_max_positions = required_key<int64_t>(r, "original_max_position_embeddings", where);
  } else if (type == "longrope") {
    p.type = RopeScaling::kLongrope;
    keys.insert(keys.end(), {"short_factor", "long_factor"});
    p.short_factor = rope_factor_list(r, "short_factor", where);
    p.long_factor = rope_factor_list(r, "long_factor", where);
  } else if (type == "yarn") {
    p.type = RopeScaling::kYarn;
    keys.insert(keys.end(), std::begin(kYarnKeys), std::end(kYarnKeys));
  } else {
    fail(where + ": rope_type '" + type +
         "' is not implemented (default, linear, llama3, yarn and Phi-3's longrope are; dynamic "
         "changes the angles with each forward's length" +
         (type == "su" ? "; \"su\" is longrope's older name: write \"longrope\")" : ")"));
  }
  if (p.type == RopeScaling::kLinear || p.type == RopeScaling::kLlama3 ||
      p.type == RopeScaling::kYarn) {
    keys.push_back("factor");
    p.factor = required_key<double>(r, "factor", where);
  }
  if (p.type == RopeScaling::kYarn) read_yarn(r, where, p);
  for (const auto& [key, value] : r.items())
    if (!listed(keys, key))
      fail(where + ": unknown key '" + key + "' for rope_type '" + type + "'");
  return p;
}

// rope_parameters of transformers 5's Gemma 3, one object per layer type: the full-attention
// layers' (rope_theta and the scaling, read as the rope object of other families) and the
// sliding ones' (their base, rope_local_base_freq, read with the layers in hf_config_gemma.cpp).
// Any other key is refused; so is the form outside Gemma 3.
const nlohmann::json& full_attention_rope(const nlohmann::json& r, const std::string& type,
                                          std::string& where) {
  if (!r.is_object() || !(r.contains("full_attention") || r.contains("sliding_attention")))
    return r;
  ZT_CHECK(type == "gemma3_text" || type == "olmo3",
           where +
               " holds one object per layer type, which zerotrain reads for Gemma 3 and OLMo 3 "
               "(model_type \"gemma3_text\", \"olmo3\") alone");
  for (const auto& [key, value] : r.items())
    ZT_CHECK(key == "full_attention" || key == "sliding_attention",
             where + ": unknown key '" + key + "' beside the layer types' objects");
  ZT_CHECK(r.contains("full_attention"), where + " has no 'full_attention' object");
  where += ".full_attention";
  return r.at("full_attention");
}

}  // namespace

// rope_theta and the scaling: from rope_parameters (transformers 5.x) or from rope_theta and
// rope_scaling (4.x; without rope_theta, absent_theta, the family's default). A config holding
// both spellings must say the same in each.
void read_rope(const nlohmann::json& j, const std::string& source, const std::string& type,
               double absent_theta, ModelConfig& c) {
  // Ministral 3's query scaling rides in its rope object, with the length it divides the
  // positions by whatever the rope type (read_llama4_scaling).
  std::vector<std::string> family_keys;
  if (type == "ministral3")
    family_keys = {"llama_4_scaling_beta", "max_position_embeddings",
                   "original_max_position_embeddings"};
  const bool legacy_scaling = j.contains("rope_scaling") && !j.at("rope_scaling").is_null();
  if (legacy_scaling)
    c.rope_scaling =
        rope_scaling_from_object(j.at("rope_scaling"), source + ": 'rope_scaling'", family_keys);
  c.rope_theta =
      j.contains("rope_theta") ? required_key<double>(j, "rope_theta", source) : absent_theta;
  const bool parameters = j.contains("rope_parameters") && !j.at("rope_parameters").is_null();
  // A family without a default (absent_theta 0: OLMo 3's, which transformers 4.57 reads as 10000
  // and 5.x as 500000) must give it.
  ZT_CHECK(absent_theta > 0.0 || j.contains("rope_theta") || parameters,
           source + ": has no 'rope_theta', whose default transformers releases' " +
               hf_family_defaults(type).config_class +
               " disagree on; refused rather than choosing one");
  if (!parameters) return;
  std::string where = source + ": 'rope_parameters'";
  const nlohmann::json& r = full_attention_rope(j.at("rope_parameters"), type, where);
  const bool per_layer_type = &r != &j.at("rope_parameters");
  family_keys.insert(family_keys.end(), {"rope_theta", "partial_rotary_factor"});
  const RopeScalingParams scaling = rope_scaling_from_object(r, where, family_keys);
  // (the top-level object's is read by partial_rotary_from_json; a layer type's is refused there)
  const char* partial = "partial_rotary_factor";
  ZT_CHECK(
      !per_layer_type || !r.contains(partial) || r.at(partial).is_null() || r.at(partial) == 1.0,
      where + ": '" + partial + "' " + quoted_json(r.value(partial, nlohmann::json(1.0))) +
          " is not implemented for " + hf_architectures().at(type) +
          ", whose attention rotates every element of a head");
  // Olmo3Config puts rope_scaling on the full-attention layers (4.57, vLLM, 5.x's per-layer-type
  // form); transformers 5.2 read one rope_parameters object as every layer's.
  ZT_CHECK(type != "olmo3" || per_layer_type || scaling.type == RopeScaling::kNone,
           where +
               " is one object with a scaling for every layer type, which transformers releases "
               "read differently for OLMo 3 (5.2 scales every layer; 4.57, vLLM and later 5.x "
               "releases the full-attention layers alone); write it as rope_scaling or as one "
               "object per layer type");
  const double theta = required_key<double>(r, "rope_theta", where);
  ZT_CHECK(!j.contains("rope_theta") || theta == c.rope_theta,
           where + ": rope_theta " + quoted_json(r.at("rope_theta")) +
               " differs from the top-level 'rope_theta' " + quoted_json(j.at("rope_theta")));
  ZT_CHECK(!legacy_scaling || scaling == c.rope_scaling,
           where + " and 'rope_scaling' describe different scalings");
  c.rope_theta = theta;
  c.rope_scaling = scaling;
}

// The sliding layers' object of transformers 5's per-layer-type rope_parameters (Gemma 3, OLMo 3):
// their base, unscaled, which must agree with rope_local_base_freq where the file has both (OLMo
// 3's with rope_theta, validate()).
void read_sliding_rope(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  if (!(c.is_gemma3() || c.is_olmo3()) || !j.contains("rope_parameters") ||
      !j.at("rope_parameters").is_object() ||
      !j.at("rope_parameters").contains("sliding_attention"))
    return;
  const std::string where = source + ": 'rope_parameters'.sliding_attention";
  const nlohmann::json& r = j.at("rope_parameters").at("sliding_attention");
  ZT_CHECK(rope_scaling_from_object(r, where, {"rope_theta"}).type == RopeScaling::kNone,
           where + ": a scaling of the sliding layers' RoPE is not " +
               (c.is_olmo3() ? "OLMo 3's" : "Gemma 3's") + " (rope_type \"default\")");
  const double theta = required_key<double>(r, "rope_theta", where);
  ZT_CHECK(!j.contains("rope_local_base_freq") || theta == c.local_rope_theta,
           where + ": rope_theta " + quoted_json(r.at("rope_theta")) +
               " differs from 'rope_local_base_freq' " + quoted_json(j.at("rope_local_base_freq")));
  ZT_CHECK(std::isfinite(theta) && static_cast<float>(theta) > 0.0f,
           where + ": rope_theta must be a positive finite number");
  c.local_rope_theta = theta;
}

// partial_rotary_factor, top-level (transformers 4.x) or in rope_parameters (5.x), which must
// agree: Phi-3's (Phi-4-mini's 0.75) is read, as transformers' Phi3 applies it from 4.49, and
// GLM's (GlmConfig's and Glm4Config's default 0.5; glm-edge's 1), as transformers' GLM applies it
// from 4.47 (4.46, the first with GLM, rotated half of each head whatever the key said). The
// other families' attention rotates every element of a head, so another value than 1 is refused.
double partial_rotary_from_json(const nlohmann::json& j, const std::string& source,
                                const std::string& type) {
  const char* key = "partial_rotary_factor";
  const bool inner = j.contains("rope_parameters") && j.at("rope_parameters").is_object() &&
                     j.at("rope_parameters").contains(key) &&
                     !j.at("rope_parameters").at(key).is_null();
  const bool top = j.contains(key) && !j.at(key).is_null();
  const double factor =
      top     ? required_key<double>(j, key, source)
      : inner ? required_key<double>(j.at("rope_parameters"), key, source + ": 'rope_parameters'")
      : is_glm_type(type) ? 0.5
                          : 1.0;
  // (5.x reads a null top-level one past the rope_parameters one; 4.x fails on it)
  ZT_CHECK(
      !is_glm_type(type) || !j.contains(key) || top || inner,
      source + ": '" + key + "' is null, which transformers' GLM cannot build (absent, it is 0.5)");
  ZT_CHECK(!top || !inner || j.at("rope_parameters").at(key) == j.at(key),
           source + ": 'rope_parameters' and the top level give different '" + key + "'");
  ZT_CHECK(factor == 1.0 || type == "phi3" || is_glm_type(type),
           source + ": '" + key + "': " + quoted_json(factor) + " is not implemented for " +
               hf_architectures().at(type) +
               ", whose attention rotates every element of a head (Phi-3's, as Phi-4-mini's, and "
               "GLM's are read)");
  return factor;
}

namespace {

bool given(const nlohmann::json& j, const char* key) {
  return j.contains(key) && !j.at(key).is_null();
}

}  // namespace

nlohmann::json with_family_rope_defaults(const nlohmann::json& j, const std::string& source,
                                         const std::string& type) {
  if (type != "ministral3" || given(j, "rope_parameters") || given(j, "rope_scaling")) return j;
  ZT_CHECK(!j.contains("rope_theta"),
           source +
               ": a Ministral 3 config with 'rope_theta' and no 'rope_parameters', whose "
               "default (yarn, with its own rope_theta) transformers releases may or may not "
               "combine with it; give rope_parameters");
  nlohmann::json with = j;
  with["rope_parameters"] = {{"rope_type", "yarn"},
                             {"rope_theta", 1000000.0},
                             {"factor", 16.0},
                             {"original_max_position_embeddings", 16384},
                             {"beta_fast", 32.0},
                             {"beta_slow", 1.0},
                             {"mscale_all_dim", 1.0},
                             {"mscale", 1.0},
                             {"llama_4_scaling_beta", 0.1}};
  return with;
}

void read_llama4_scaling(const nlohmann::json& j, const std::string& source,
                         const std::string& type, ModelConfig& c) {
  if (type != "ministral3") return;
  const char* key = given(j, "rope_parameters") ? "rope_parameters" : "rope_scaling";
  const std::string where = source + ": '" + key + "'";
  ZT_CHECK(given(j, key), source + ": a Ministral 3 config without 'rope_parameters'");
  const nlohmann::json& r = j.at(key);
  ZT_CHECK(given(r, "llama_4_scaling_beta"),
           where +
               " has no 'llama_4_scaling_beta', which transformers' Ministral 3 scales the "
               "queries by (0: no scaling)");
  c.llama4_scaling_beta = required_key<double>(r, "llama_4_scaling_beta", where);
  ZT_CHECK(c.llama4_scaling_beta >= 0.0 && std::isfinite(c.llama4_scaling_beta),
           where + ": 'llama_4_scaling_beta' must be a finite number ≥ 0, got " +
               quoted_json(r.at("llama_4_scaling_beta")));
  ZT_CHECK(!given(r, "max_position_embeddings") ||
               r.at("max_position_embeddings") == c.max_position_embeddings,
           where + ": 'max_position_embeddings' " + quoted_json(r.at("max_position_embeddings")) +
               " differs from the top-level one, " + std::to_string(c.max_position_embeddings));
  ZT_CHECK(given(r, "original_max_position_embeddings"),
           where +
               " has no 'original_max_position_embeddings', which transformers' Ministral 3 "
               "divides the positions by to scale the queries (even by a β of 0)");
  c.llama4_scaling_positions = required_key<int64_t>(r, "original_max_position_embeddings", where);
}

nlohmann::json ministral3_rope_parameters(const ModelConfig& c) {
  nlohmann::json r = rope_scaling_to_json(c.rope_scaling);
  if (r.is_null()) r = {{"rope_type", "default"}};
  r["rope_theta"] = c.rope_theta;
  r["llama_4_scaling_beta"] = c.llama4_scaling_beta;
  r["original_max_position_embeddings"] = c.llama4_scaling_positions;
  return r;
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
    case RopeScaling::kYarn: {
      nlohmann::json j = {{"rope_type", "yarn"},
                          {"factor", p.factor},
                          {"original_max_position_embeddings", p.original_max_positions},
                          {"beta_fast", p.beta_fast},
                          {"beta_slow", p.beta_slow}};
      // The factor on cos and sin written out when it is not the default, whichever keys gave
      // it (transformers 4.46 to 4.50 read no mscale key; vLLM reads neither it nor this one).
      if (p.attention_factor != yarn_attention_factor(p.factor))
        j["attention_factor"] = p.attention_factor;
      return j;
    }
    case RopeScaling::kLongrope:
      // The three keys transformers' Phi3Config (4.46) accepts, and no other.
      return {
          {"type", "longrope"}, {"short_factor", p.short_factor}, {"long_factor", p.long_factor}};
  }
  return nullptr;
}

void read_rope_lengths(const nlohmann::json& j, const std::string& source, const std::string& type,
                       ModelConfig& c) {
  RopeScalingParams& r = c.rope_scaling;
  if (r.type == RopeScaling::kYarn && r.original_max_positions == 0)
    r.original_max_positions = c.max_position_embeddings;
  // Phi-3 keeps its original length with or without longrope (GGUF files carry it too).
  if (type != "phi3" || (r.type != RopeScaling::kNone && r.type != RopeScaling::kLongrope)) return;
  r.original_max_positions =
      j.contains("original_max_position_embeddings")
          ? required_key<int64_t>(j, "original_max_position_embeddings", source)
          : kPhi3DefaultOriginalPositions;
  ZT_CHECK(r.original_max_positions > 1,
           source + ": 'original_max_position_embeddings' must be above 1, got " +
               std::to_string(r.original_max_positions));
  if (r.type != RopeScaling::kLongrope) return;
  r.attention_factor =
      longrope_attention_factor(c.max_position_embeddings, r.original_max_positions);
}

}  // namespace zt
