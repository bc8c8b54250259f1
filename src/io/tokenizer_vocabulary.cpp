#include "io/tokenizer_vocabulary.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

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
  // Only the vocabularies are kept (a tokenizer.json is megabytes, mostly merges).
  const nlohmann::json::parser_callback_t vocabularies_only =
      [](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event != nlohmann::json::parse_event_t::key || depth > 2) return true;
        const std::string key = parsed.get<std::string>();
        return depth == 1 ? key == "model" || key == "added_tokens" : key == "vocab";
      };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text, vocabularies_only);
  } catch (const nlohmann::json::exception& e) {
    ZT_CHECK(false, origin + ": not JSON: " + e.what());
  }
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
  VocabularyDifference difference;
  for (const auto& [id, token] : a.regular) {
    if (a.added.count(id) || b.added.count(id)) continue;  // an added token takes the id over
    const auto other = b.regular.find(id);
    if (other == b.regular.end() || other->second == token) continue;
    if (difference.first.size() < limit) difference.first.push_back({id, token, other->second});
    ++difference.count;
  }
  return difference;
}

}  // namespace zt
