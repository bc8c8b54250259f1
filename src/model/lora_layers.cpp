// Which layers carry which adapters, with which rank and alpha (model/lora.h): PEFT's
// layers_to_transform and layers_pattern, a target_modules pattern that selects by layer, and
// rank_pattern and alpha_pattern, resolved module by module as PEFT resolves them. Each is
// matched against the module's path in the model, model.layers.3.self_attn.q_proj.
#include <re2/re2.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "model/lora.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

std::unique_ptr<RE2> compiled(const std::string& regex, const std::string& what) {
  auto re = std::make_unique<RE2>(regex, RE2::Quiet);
  ZT_CHECK(re->ok(), what + " is a regular expression RE2 cannot read (" + re->error() +
                         "): zerotrain reads Python's syntax without look-around or "
                         "back-references");
  return re;
}

// The layer index PEFT reads from a module path for layers_to_transform: the digits after
// ".NAME." for the first of layers_pattern's names that matches, Python's
// re.match(rf".*\.{name}\.(\d+)\.", path) (the name inserted as written); with no name, after
// any (r".*\.[^.]*\.(\d+)\."). -1 where none matches.
class LayerIndexReader {
 public:
  LayerIndexReader(const std::vector<std::string>& names, const std::string& source)
      : names_(names), source_(source) {
    for (const std::string& name : names)
      patterns_.push_back(compiled("^(?:.*\\." + name + "\\.(\\d+)\\.)",
                                   source + ": layers_pattern " + quoted_json(name)));
    if (names.empty()) {
      names_ = {"[^.]*"};
      patterns_.push_back(compiled(R"(^(?:.*\.[^.]*\.(\d+)\.))", source));
    }
  }
  int64_t index(const std::string& path) const {
    for (size_t i = 0; i < patterns_.size(); ++i) {
      std::string digits;
      if (!RE2::PartialMatch(path, *patterns_[i], &digits)) continue;
      ZT_CHECK(!digits.empty() && digits.size() < 10 &&
                   std::all_of(digits.begin(), digits.end(),
                               [](unsigned char c) { return std::isdigit(c) != 0; }),
               source_ + ": layers_pattern " + quoted_json(names_[i]) + " reads '" + digits +
                   "' from '" + path +
                   "' as the layer index (its first group), which is no "
                   "layer number");
      return std::stoll(digits);
    }
    return -1;
  }

 private:
  std::vector<std::string> names_;
  std::string source_;
  std::vector<std::unique_ptr<RE2>> patterns_;
};

// rank_pattern or alpha_pattern, its keys matched against module paths as PEFT 0.15 and later
// match them, re.match(rf"(.*\.)?({key})$", path): the end of the path, whole components. (PEFT
// 0.13 and 0.14 match re.match(rf".*\.{key}$", path), and 0.13 looks the first key of either
// pattern up in both.)
template <typename Value>
class ModulePattern {
 public:
  ModulePattern(const std::map<std::string, Value>& pattern, const std::string& what)
      : pattern_(pattern), what_(what) {
    for (const auto& [key, value] : pattern)
      keys_.emplace_back(
          key, compiled("^(?:(.*\\.)?(" + key + ")$)", what + " key " + quoted_json(key)));
  }
  // The value for the module at `path`, or `fallback` where no key matches it. PEFT takes the
  // first key in the file's order, which a JSON object here does not keep: keys that match with
  // different values are refused.
  Value value(const std::string& path, Value fallback) const {
    std::set<Value> values;
    std::string keys;
    for (const auto& [key, re] : keys_)
      if (RE2::PartialMatch(path, *re)) {
        values.insert(pattern_.at(key));
        keys += (keys.empty() ? "'" : ", '") + key + "'";
      }
    ZT_CHECK(values.size() <= 1,
             what_ + ": keys " + keys + " match '" + path +
                 "' with different values; PEFT takes the first in the file's order, which "
                 "zerotrain does not read: give the module one key");
    return values.empty() ? fallback : *values.begin();
  }

 private:
  const std::map<std::string, Value>& pattern_;
  std::string what_;
  std::vector<std::pair<std::string, std::unique_ptr<RE2>>> keys_;
};

}  // namespace

float LoraSpec::scale_of(const LoraAdapter& a) const {
  const double r = static_cast<double>(a.rank);
  return static_cast<float>(use_rslora ? a.alpha / std::sqrt(r) : a.alpha / r);
}

int64_t LoraSpec::max_rank() const {
  int64_t most = rank;
  for (const auto& [key, r] : rank_pattern) most = std::max(most, r);
  return most;
}

bool LoraSpec::varies_by_layer() const {
  return !layers_to_transform.empty() || target_pattern.per_layer || !rank_pattern.empty() ||
         !alpha_pattern.empty();
}

std::vector<std::array<LoraAdapter, kLoraTargets>> LoraSpec::adapters(int64_t num_layers) const {
  std::vector<std::array<LoraAdapter, kLoraTargets>> table(static_cast<size_t>(num_layers));
  if (!enabled()) return table;
  const std::string& src = layers_source.text;
  std::unique_ptr<RE2> regex;
  if (!target_pattern.regex.empty())
    regex = compiled(target_pattern.regex, target_pattern.source + ": target_modules");
  const LayerIndexReader layer_index(layers_pattern, src);
  const ModulePattern<int64_t> ranks(rank_pattern, src + ": rank_pattern");
  const ModulePattern<double> alphas(alpha_pattern, src + ": alpha_pattern");
  for (int64_t l = 0; l < num_layers; ++l)
    for (const LoraTarget t : kLoraTargetsInLayerOrder) {
      const std::string path = lora_module_path(l, t);
      const bool chosen =
          has(t) && (regex ? RE2::FullMatch(path, *regex)
                           : layers_to_transform.empty() ||
                                 std::count(layers_to_transform.begin(), layers_to_transform.end(),
                                            layer_index.index(path)) > 0);
      if (!chosen) continue;
      table[static_cast<size_t>(l)][static_cast<size_t>(t)] = {ranks.value(path, rank),
                                                               alphas.value(path, alpha)};
    }
  return table;
}

void LoraSpec::fit_to_layers(int64_t num_layers) {
  if (!enabled()) return;
  if (!target_pattern.regex.empty()) {
    const auto re = compiled(target_pattern.regex, target_pattern.source + ": target_modules");
    target_pattern.per_layer = false;
    for (const LoraTarget t : kLoraTargetsInLayerOrder) {
      int64_t selected = 0;
      for (int64_t l = 0; l < num_layers; ++l)
        selected += RE2::FullMatch(lora_module_path(l, t), *re) ? 1 : 0;
      auto& target = targets[static_cast<size_t>(t)];  // fitted to the model's projections
      target = target && selected > 0;
      if (target && selected < num_layers) target_pattern.per_layer = true;
    }
    ZT_CHECK(targets_any(),
             target_pattern.source + ": target_modules " + quoted_json(target_pattern.regex) +
                 " selects no projection in the model's " + std::to_string(num_layers) +
                 " layers (PEFT matches it whole "
                 "against module paths such as " +
                 lora_module_path(0, LoraTarget::kQ) + ")");
  }
  check_layers(num_layers);
}

void LoraSpec::check_layers(int64_t num_layers) const {
  if (!enabled()) return;
  for (int64_t l : layers_to_transform)
    ZT_CHECK(l >= 0 && l < num_layers,
             layers_source.text + ": layers_to_transform names layer " + std::to_string(l) +
                 ", which the model does not have (its layers: 0 to " +
                 std::to_string(num_layers - 1) + "): an adapter config of another model?");
  for (const auto& layer : adapters(num_layers))
    for (const LoraAdapter& a : layer)
      if (a.present()) return;
  fail(layers_source.text + ": layers_pattern " + quoted_json(nlohmann::json(layers_pattern)) +
       " finds no layer index in the model's module paths (" + lora_module_path(0, LoraTarget::kQ) +
       ", ...): PEFT would adapt no module");
}

void LoraSpec::read_layer_keys(const nlohmann::json& j, const std::string& source) {
  layers_source.text = source;
  const bool string_targets = j.contains("target_modules") && j["target_modules"].is_string();
  auto given = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto refuse_beside_string = [&](const char* key) {
    ZT_CHECK(!string_targets, source + ": key '" + key + "' beside target_modules " +
                                  quoted_json(j["target_modules"]) +
                                  ", a string: PEFT refuses the two together (list the modules "
                                  "to choose layers)");
  };
  if (given("layers_to_transform")) {
    const nlohmann::json& v = j["layers_to_transform"];
    if (v.is_number_integer()) {
      layers_to_transform = {v.get<int64_t>()};
    } else {
      ZT_CHECK(v.is_array(), source +
                                 ": key 'layers_to_transform' must be a layer index or a "
                                 "list of them, got " +
                                 quoted_json(v));
      for (const auto& l : v) {
        ZT_CHECK(l.is_number_integer(),
                 source + ": layers_to_transform holds " + quoted_json(l) + ", no layer index");
        layers_to_transform.push_back(l.get<int64_t>());
      }
    }
    if (!layers_to_transform.empty()) refuse_beside_string("layers_to_transform");
  }
  if (given("layers_pattern")) {
    const nlohmann::json& v = j["layers_pattern"];
    ZT_CHECK(
        v.is_string() || v.is_array(),
        source + ": key 'layers_pattern' must be a name or a list of names, got " + quoted_json(v));
    for (const auto& name : v.is_string() ? nlohmann::json::array({v}) : v) {
      ZT_CHECK(name.is_string(), source + ": layers_pattern holds " + quoted_json(name));
      if (!name.get<std::string>().empty()) layers_pattern.push_back(name.get<std::string>());
    }
    if (!layers_pattern.empty()) refuse_beside_string("layers_pattern");
  }
  auto read_pattern = [&](const char* key, auto& out, auto valid, const char* what) {
    if (!given(key)) return;
    ZT_CHECK(j[key].is_object(), source + ": key '" + key +
                                     "' must be an object of module patterns, got " +
                                     quoted_json(j[key]));
    for (const auto& item : j[key].items()) {
      ZT_CHECK(valid(item.value()), source + ": " + key + " gives '" + item.key() + "' " +
                                        quoted_json(item.value()) + ", which is no " + what);
      out[item.key()] = item.value();
    }
  };
  read_pattern(
      "rank_pattern", rank_pattern,
      [](const nlohmann::json& v) { return v.is_number_integer() && v.get<int64_t>() > 0; },
      "positive rank");
  read_pattern(
      "alpha_pattern", alpha_pattern,
      [](const nlohmann::json& v) {
        return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
      },
      "positive lora_alpha");
}

void LoraSpec::write_layer_keys(nlohmann::json& j) const {
  if (!layers_to_transform.empty()) j["layers_to_transform"] = layers_to_transform;
  if (layers_pattern.size() == 1) j["layers_pattern"] = layers_pattern.front();
  if (layers_pattern.size() > 1) j["layers_pattern"] = layers_pattern;
  if (!rank_pattern.empty()) j["rank_pattern"] = rank_pattern;
  if (!alpha_pattern.empty()) j["alpha_pattern"] = alpha_pattern;
  if (target_pattern.per_layer) j["target_modules"] = target_pattern.regex;
}

std::string LoraSpec::layers_text() const {
  std::string s;
  if (!layers_to_transform.empty()) {
    s += " in layer" + std::string(layers_to_transform.size() > 1 ? "s " : " ");
    for (size_t i = 0; i < layers_to_transform.size(); ++i)
      s += (i ? ", " : "") + std::to_string(layers_to_transform[i]);
  }
  if (target_pattern.per_layer) s += " (by layer: target_modules " + target_pattern.regex + ")";
  if (!rank_pattern.empty() || !alpha_pattern.empty())
    s += std::string(" with ") + (rank_pattern.empty() ? "" : "rank_pattern") +
         (rank_pattern.empty() || alpha_pattern.empty() ? "" : " and ") +
         (alpha_pattern.empty() ? "" : "alpha_pattern");
  return s;
}

}  // namespace zt
