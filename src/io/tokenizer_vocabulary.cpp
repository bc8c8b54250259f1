#include "io/tokenizer_vocabulary.h"

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

// id -> token of model.vocab: an object token -> id, or Unigram's list of [piece, score].
std::map<int64_t, std::string> model_vocabulary(const nlohmann::json& vocab,
                                                const std::string& origin) {
  std::map<int64_t, std::string> tokens;
  if (vocab.is_object()) {
    for (const auto& [token, id] : vocab.items()) {
      ZT_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0,
               origin + ": model.vocab gives '" + token + "' an id that is not a whole number");
      tokens[id.get<int64_t>()] = token;
    }
    return tokens;
  }
  ZT_CHECK(vocab.is_array(), origin + ": model.vocab is neither an object nor a list");
  for (size_t i = 0; i < vocab.size(); ++i) {
    const nlohmann::json& entry = vocab[i];
    ZT_CHECK(entry.is_array() && !entry.empty() && entry[0].is_string(),
             origin + ": model.vocab[" + std::to_string(i) + "] is not a [piece, score] pair");
    tokens[static_cast<int64_t>(i)] = entry[0].get<std::string>();
  }
  return tokens;
}

}  // namespace

TokenizerVocabulary read_tokenizer_vocabulary(const std::string& json_text,
                                              const std::string& origin) {
  const nlohmann::json j = parse_json(json_text, origin);
  ZT_CHECK(j.is_object() && j.contains("model") && j["model"].is_object() &&
               j["model"].contains("vocab"),
           origin + ": not a tokenizer.json (no model.vocab)");
  TokenizerVocabulary v;
  v.regular = model_vocabulary(j["model"]["vocab"], origin);
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const nlohmann::json& t : j["added_tokens"]) {
      ZT_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                   t.contains("content") && t["content"].is_string(),
               origin + ": an entry of added_tokens has no whole-number id and string content");
      v.added[t["id"].get<int64_t>()] = t["content"].get<std::string>();
    }
  }
  return v;
}

VocabularyDifference regular_token_differences(const TokenizerVocabulary& a,
                                               const TokenizerVocabulary& b, size_t limit) {
  // An added token takes its id over the model's entry, as tokenizers decodes it.
  auto merged = [](const TokenizerVocabulary& v) {
    std::map<int64_t, std::string> all = v.regular;
    for (const auto& [id, token] : v.added) all[id] = token;
    return all;
  };
  const std::map<int64_t, std::string> in_a = merged(a), in_b = merged(b);
  VocabularyDifference difference;
  for (const auto& [id, token] : in_a) {
    const auto other = in_b.find(id);
    if (other == in_b.end() || other->second == token) continue;
    if (a.added.count(id) && b.added.count(id)) continue;  // both special: renamed, not moved
    if (difference.first.size() < limit) difference.first.push_back({id, token, other->second});
    ++difference.count;
  }
  return difference;
}

}  // namespace zt
