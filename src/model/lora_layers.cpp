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
#include "util/decimal.h"
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
// match them, re.match(rf"(.*\.)?({key})$", path): the end of the path, whole components; or,
// `earlier`, as PEFT 0.13 and 0.14 do, re.match(rf".*\.{key}$", path) (after a dot).
template <typename Value>
class ModulePattern {
 public:
  ModulePattern(const std::map<std::string, Value>& pattern, const std::string& what,
                bool earlier = false)
      : pattern_(pattern), what_(what) {
    for (const auto& [key, value] : pattern)
      keys_.emplace_back(
          key, compiled(earlier ? "^(?:.*\\." + key + "$)" : "^(?:(.*\\.)?(" + key + ")$)",
                        what + " key " + quoted_json(key)));
  }
  std::vector<std::string> keys_matching(const std::string& path) const {
    std::vector<std::string> keys;
    for (const auto& [key, re] : keys_)
      if (RE2::PartialMatch(path, *re)) keys.push_back(key);
    return keys;
  }
  const std::map<std::string, Value>& values() const { return pattern_; }
  // The value for the module at `path`, or `fallback` where no key matches it. PEFT takes the
  // first key in the file's order, which a JSON object here does not keep: keys that match with
  // different values are refused.
  Value value(const std::string& path, Value fallback) const {
    std::set<Value> values;
    std::string keys;
    for (const std::string& key : keys_matching(path)) {
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

// exclude_modules as the file gave it: the pattern, or the list of names.
nlohmann::json exclude_modules_json(const LoraSpec& s) {
  return s.exclude_pattern ? nlohmann::json(s.exclude_modules.front())
                           : nlohmann::json(s.exclude_modules);
}

using Reading = std::pair<int64_t, double>;  // a module's r and lora_alpha

// What PEFT 0.14 and 0.13 can give the module at `path`, whatever the order of the keys that match
// it (`ranks`, `alphas`: matched as they match them, after a dot). A key that matches none falls
// back to the path itself, looked up as a key (so a key that is a whole path applies). 0.14 looks
// each pattern up apart; 0.13 looks the first matching key, of rank_pattern then alpha_pattern,
// up in both.
std::array<std::set<Reading>, 2> earlier_readings(const LoraSpec& s,
                                                  const ModulePattern<int64_t>& ranks,
                                                  const ModulePattern<double>& alphas,
                                                  const std::string& path) {
  auto or_path = [&](std::vector<std::string> keys) {
    if (keys.empty()) keys.push_back(path);
    return keys;
  };
  auto reading = [&](const std::string& rank_key, const std::string& alpha_key) {
    const auto r = s.rank_pattern.find(rank_key);
    const auto a = s.alpha_pattern.find(alpha_key);
    return Reading{r == s.rank_pattern.end() ? s.rank : r->second,
                   a == s.alpha_pattern.end() ? s.alpha : a->second};
  };
  const auto rk = ranks.keys_matching(path), ak = alphas.keys_matching(path);
  std::array<std::set<Reading>, 2> out;  // 0.14's, 0.13's
  for (const std::string& r : or_path(rk))
    for (const std::string& a : or_path(ak)) out[0].insert(reading(r, a));
  for (const std::string& k : or_path(rk.empty() ? ak : rk)) out[1].insert(reading(k, k));
  return out;
}

// Where PEFT 0.14 or 0.13 would give an adapted module another r or lora_alpha than `table` (PEFT
// 0.15's reading, zerotrain's) in every order of its keys: a note naming the first such module
// and the count, or "".
std::string earlier_peft_note(const LoraSpec& s,
                              const std::vector<std::array<LoraAdapter, kLoraTargets>>& table) {
  if (s.rank_pattern.empty() && s.alpha_pattern.empty()) return "";
  const std::string& src = s.layers_source.text;
  const ModulePattern<int64_t> ranks(s.rank_pattern, src + ": rank_pattern", true);
  const ModulePattern<double> alphas(s.alpha_pattern, src + ": alpha_pattern", true);
  auto text = [](const Reading& r) {
    return "r " + std::to_string(r.first) + ", lora_alpha " + shortest_decimal(r.second);
  };
  int64_t differing = 0;
  std::string first;
  for (size_t l = 0; l < table.size(); ++l)
    for (const LoraTarget t : kLoraTargetsInLayerOrder) {
      const LoraAdapter& a = table[l][static_cast<size_t>(t)];
      if (!a.present()) continue;
      const std::string path = lora_module_path(static_cast<int64_t>(l), t);
      const Reading here{a.rank, a.alpha};
      const auto [peft014, peft013] = earlier_readings(s, ranks, alphas, path);
      if (peft014.count(here) && peft013.count(here)) continue;
      if (differing++ == 0)
        first = "'" + path + "': " + text(here) + " as PEFT 0.15 reads it; 0.14 " +
                text(*peft014.begin()) + ", 0.13 " + text(*peft013.begin());
    }
  if (differing == 0) return "";
  return src + ": rank_pattern and alpha_pattern give " + std::to_string(differing) +
         " module(s) another r or lora_alpha in PEFT 0.13 or 0.14 than in 0.15 and later, which "
         "zerotrain follows (" +
         first + "); an adapter trained with an older PEFT trained with those";
}

}  // namespace

float LoraSpec::scale_of(const LoraAdapter& a) const {
  const double r = static_cast<double>(a.rank);
  return static_cast<float>(use_rslora ? a.alpha / std::sqrt(r) : a.alpha / r);
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
  std::unique_ptr<RE2> excluded_by;
  if (exclude_pattern)
    excluded_by = compiled(exclude_modules.front(),
                           src + ": exclude_modules " + quoted_json(exclude_modules.front()));
  // PEFT's _check_for_modules_to_exclude: the pattern whole, or a name that is the path or ends it.
  auto excluded = [&](const std::string& path) {
    if (excluded_by) return RE2::FullMatch(path, *excluded_by);
    return std::any_of(exclude_modules.begin(), exclude_modules.end(), [&](const std::string& e) {
      return path == e ||
             (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0 &&
              path[path.size() - e.size() - 1] == '.');
    });
  };
  for (int64_t l = 0; l < num_layers; ++l)
    for (const LoraTarget t : kLoraTargetsInLayerOrder) {
      const std::string path = lora_module_path(l, t);
      const bool chosen =
          has(t) && !excluded(path) &&
          (regex ? RE2::FullMatch(path, *regex)
                 : layers_to_transform.empty() ||
                       std::count(layers_to_transform.begin(), layers_to_transform.end(),
                                  layer_index.index(path)) > 0);
      if (!chosen) continue;
      table[static_cast<size_t>(l)][static_cast<size_t>(t)] = {ranks.value(path, rank),
                                                               alphas.value(path, alpha)};
    }
  return table;
}

std::string LoraSpec::fit_to_layers(int64_t num_layers) {
  if (!enabled()) return "";
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
  const auto table = adapters(num_layers);
  refuse_none_adapted(table);
  std::string notes;
  for (int64_t l : layers_to_transform)  // PEFT matches no module of a layer the model lacks
    if (l < 0 || l >= num_layers)
      notes += std::string(notes.empty() ? "" : ", ") + std::to_string(l);
  if (!notes.empty())
    notes = layers_source.text + ": layers_to_transform names layer(s) " + notes +
            ", which the model does not have (its layers: 0 to " + std::to_string(num_layers - 1) +
            "); as PEFT does, zerotrain adapts the others";
  auto add = [&](const std::string& note) {
    notes += (notes.empty() || note.empty() ? "" : "\nwarning: ") + note;
  };
  add(earlier_peft_note(*this, table));
  if (!exclude_modules.empty()) {  // PEFT warns when the key excluded nothing (a misspelling?)
    LoraSpec without = *this;
    without.exclude_modules.clear();
    without.exclude_pattern = false;
    if (without.adapters(num_layers) == table)
      add(layers_source.text + ": exclude_modules " + quoted_json(exclude_modules_json(*this)) +
          " excludes no module the other keys choose (PEFT warns so too): a misspelt name?");
  }
  return notes;
}

void LoraSpec::check_layers(int64_t num_layers) const {
  if (enabled()) refuse_none_adapted(adapters(num_layers));
}

void LoraSpec::refuse_none_adapted(
    const std::vector<std::array<LoraAdapter, kLoraTargets>>& table) const {
  const auto num_layers = static_cast<int64_t>(table.size());
  for (const auto& layer : table)
    for (const LoraAdapter& a : layer)
      if (a.present()) return;
  // Nothing adapted: the keys that chose nothing.
  std::string why;
  if (!layers_to_transform.empty())
    why += "layers_to_transform " + quoted_json(nlohmann::json(layers_to_transform)) +
           " (the model's layers: 0 to " + std::to_string(num_layers - 1) + ")";
  if (!layers_pattern.empty())
    why += ", layers_pattern " + quoted_json(nlohmann::json(layers_pattern)) +
           " (PEFT reads the layer index after it, in paths such as " +
           lora_module_path(0, LoraTarget::kQ) + ")";
  if (!exclude_modules.empty())
    why += std::string(why.empty() ? "" : ", ") + "exclude_modules " +
           quoted_json(exclude_modules_json(*this)) + " (PEFT: \"All modules were excluded\")";
  fail(layers_source.text + ": no module of the model is adapted: " + why);
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
    // PEFT asks whether a layer is in the list: [3, 1, 3] chooses what [1, 3] does, and is it.
    std::sort(layers_to_transform.begin(), layers_to_transform.end());
    layers_to_transform.erase(std::unique(layers_to_transform.begin(), layers_to_transform.end()),
                              layers_to_transform.end());
    refuse_beside_string("layers_to_transform");  // PEFT: "is not None", even []
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
    refuse_beside_string("layers_pattern");
    // PEFT tests `not layers_to_transform`: an empty list, and the index 0 given as a number.
    const bool layers_falsy = layers_to_transform.empty() || j["layers_to_transform"] == 0;
    ZT_CHECK(layers_pattern.empty() || !layers_falsy,
             source +
                 ": key 'layers_pattern' without layers_to_transform: PEFT 0.14 and later "
                 "refuse it (0.17 also beside an empty list; 0.13 reads past it); give the "
                 "layers, or leave the key out");
  }
  if (given("exclude_modules")) {
    const nlohmann::json& v = j["exclude_modules"];
    ZT_CHECK(v.is_string() || v.is_array(),
             source +
                 ": key 'exclude_modules' must be a regular expression or a list of module "
                 "names, got " +
                 quoted_json(v));
    exclude_pattern = v.is_string();
    for (const auto& name : exclude_pattern ? nlohmann::json::array({v}) : v) {
      ZT_CHECK(name.is_string(), source + ": exclude_modules holds " + quoted_json(name));
      exclude_modules.push_back(name.get<std::string>());
    }
    if (exclude_pattern && exclude_modules.front().empty()) exclude_modules.clear();  // PEFT: falsy
    if (exclude_modules.empty()) exclude_pattern = false;
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
  if (!layers_to_transform.empty() && layers_pattern.size() == 1)  // PEFT 0.14: only beside it
    j["layers_pattern"] = layers_pattern.front();
  if (!layers_to_transform.empty() && layers_pattern.size() > 1)
    j["layers_pattern"] = layers_pattern;
  if (!rank_pattern.empty()) j["rank_pattern"] = rank_pattern;
  if (!alpha_pattern.empty()) j["alpha_pattern"] = alpha_pattern;
  if (!exclude_modules.empty()) j["exclude_modules"] = exclude_modules_json(*this);
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
  if (!exclude_modules.empty())
    s += " excluding " +
         (exclude_pattern ? exclude_modules.front() : nlohmann::json(exclude_modules).dump());
  if (!rank_pattern.empty() || !alpha_pattern.empty())
    s += std::string(" with ") + (rank_pattern.empty() ? "" : "rank_pattern") +
         (rank_pattern.empty() || alpha_pattern.empty() ? "" : " and ") +
         (alpha_pattern.empty() ? "" : "alpha_pattern");
  return s;
}

}  // namespace zt
