#include "io/gguf_sentencepiece.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

const char* const kSpaceMark = "\u2581";

// The byte length of the UTF-8 character that starts with `lead` (1 for a stray continuation
// byte, so that a malformed token still splits somewhere).
size_t utf8_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

}  // namespace

nlohmann::json sentencepiece_merges(const std::vector<std::string>& tokens,
                                    const std::vector<float>& scores) {
  std::unordered_map<std::string, float> score;
  for (size_t i = 0; i < tokens.size(); ++i) score[tokens[i]] = scores[i];
  struct Merge {
    std::string left, right;
    float score;
  };
  std::vector<Merge> merges;
  bool piece_has_space = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    std::vector<Merge> splits;
    for (size_t cut = token.empty() ? 0 : utf8_length(static_cast<unsigned char>(token[0]));
         cut < token.size(); cut += utf8_length(static_cast<unsigned char>(token[cut]))) {
      std::string left = token.substr(0, cut), right = token.substr(cut);
      if (score.count(left) && score.count(right))
        splits.push_back({std::move(left), std::move(right), scores[i]});
    }
    std::stable_sort(splits.begin(), splits.end(), [&](const Merge& a, const Merge& b) {
      return std::pair(score[a.left], score[a.right]) > std::pair(score[b.left], score[b.right]);
    });
    for (Merge& m : splits) {
      piece_has_space |=
          m.left.find(' ') != std::string::npos || m.right.find(' ') != std::string::npos;
      merges.push_back(std::move(m));
    }
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  nlohmann::json out = nlohmann::json::array();
  for (const Merge& m : merges)
    out.push_back(piece_has_space ? nlohmann::json::array({m.left, m.right})
                                  : nlohmann::json(m.left + " " + m.right));
  return out;
}

nlohmann::json sentencepiece_normalizer(bool add_space_prefix) {
  nlohmann::json normalizers = nlohmann::json::array();
  if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kSpaceMark}});
  normalizers.push_back(
      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpaceMark}});
  return {{"type", "Sequence"}, {"normalizers", normalizers}};
}

nlohmann::json sentencepiece_decoder(bool add_space_prefix) {
  nlohmann::json decoders = {
      {{"type", "Replace"}, {"pattern", {{"String", kSpaceMark}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}}};
  if (add_space_prefix)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", decoders}};
}

bool sentencepiece_space_prefix(const nlohmann::json& tok, const std::string& file) {
  const nlohmann::json pre = tok.value("pre_tokenizer", nlohmann::json());
  const nlohmann::json normalizer = tok.value("normalizer", nlohmann::json());
  if (pre.is_null() && normalizer.is_object()) {
    for (const bool prefix : {true, false})
      if (normalizer == sentencepiece_normalizer(prefix)) return prefix;
  }
  const bool metaspace = normalizer.is_null() && pre.is_object() &&
                         pre.value("type", "") == "Metaspace" &&
                         pre.value("replacement", "") == kSpaceMark && !pre.value("split", false);
  ZT_CHECK(metaspace, file + ": a byte-fallback BPE whose normalizer " + quoted_json(normalizer) +
                          " and pre_tokenizer " + quoted_json(pre) +
                          " are not a SentencePiece Llama tokenizer's; export --format gguf "
                          "cannot describe it to llama.cpp");
  // tokenizers 0.14+ writes prepend_scheme ("first": only before the text's first piece, which
  // llama.cpp's add_space_prefix approximates); older files write add_prefix_space.
  if (pre.contains("prepend_scheme")) return pre.value("prepend_scheme", "always") != "never";
  return pre.value("add_prefix_space", true);
}

bool is_byte_token(const std::string& token) {
  return token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
         std::isxdigit(static_cast<unsigned char>(token[3])) &&
         std::isxdigit(static_cast<unsigned char>(token[4]));
}

std::pair<std::string, std::string> merge_pair(const nlohmann::json& m, const std::string& file) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get<std::string>(), m[1].get<std::string>()};
  const size_t space =
      m.is_string() ? m.get_ref<const std::string&>().find(' ') : std::string::npos;
  ZT_CHECK(space != std::string::npos,
           file + ": merge " + quoted_json(m) + " is neither \"LEFT RIGHT\" nor [LEFT, RIGHT]");
  const std::string& text = m.get_ref<const std::string&>();
  return {text.substr(0, space), text.substr(space + 1)};
}

nlohmann::json sentencepiece_scores(const nlohmann::json& tokens, const nlohmann::json& types,
                                    const nlohmann::json& merges, const std::string& file) {
  std::unordered_map<std::string, size_t> made_by;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto [left, right] = merge_pair(merges[rank], file);
    made_by.emplace(left + right, rank);
  }
  const float below_every_merge = -static_cast<float>(merges.size()) - 1.0f;
  nlohmann::json scores = nlohmann::json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto it = made_by.find(tokens[i].get<std::string>());
    scores.push_back(it != made_by.end()       ? -static_cast<float>(it->second) - 1.0f
                     : types[i] == kGgufNormal ? below_every_merge
                                               : 0.0f);
  }
  return scores;
}

}  // namespace zt
