#include "io/gguf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "io/gguf_sentencepiece.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

nlohmann::json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

nlohmann::json split_then_bytes(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            byte_level(false)}}};
}

// The pre-tokenizers known both ways: tokenizer.ggml.pre's name, and the Hugging Face
// pre_tokenizer that splits as llama.cpp's regexes of that name do.
struct PreTokenizer {
  std::vector<std::string> gguf_names;  // the first is the one export writes
  nlohmann::json hf;
  // Whether llama.cpp takes a pre-token found whole in the vocabulary as one token (its llama3
  // pre-tokenizer does), the BPE model's ignore_merges.
  bool ignore_merges = false;
};

// Llama 3's split, which llama.cpp's llama3 (llama-bpe) and dbrx share.
constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      {{"gpt-2"}, byte_level(true)},
      // SmolLM's, and StarCoder's and Refact's (Granite 3's GGUF files), which llama.cpp splits
      // alike.
      {{"smollm", "refact", "starcoder"},
       {{"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}}},
      {{"llama-bpe", "llama3"}, split_then_bytes(kLlama3Split), true},
      // cl100k's vocabularies (DBRX's, OLMo 2's), whose merges llama.cpp follows.
      {{"dbrx"}, split_then_bytes(kLlama3Split), false},
      {{"qwen2"},
       split_then_bytes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")},
  };
  return table;
}

std::string known_pre_names() {
  std::string names;
  for (const PreTokenizer& p : pre_tokenizers())
    for (const std::string& n : p.gguf_names) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// The post-processor: a template adding BOS before (and EOS after) each sequence, or, when
// nothing is added, byte-level's own (none for SentencePiece).
nlohmann::json post_processor(const std::string* bos, int64_t bos_id, const std::string* eos,
                              int64_t eos_id, bool byte_level) {
  if (!bos && !eos && !byte_level) return nullptr;
  if (!bos && !eos)
    return {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", false},
            {"use_regex", true}};
  auto sequence = [&](const char* id, int type_id) {
    nlohmann::json pieces = nlohmann::json::array();
    if (bos) pieces.push_back({{"SpecialToken", {{"id", *bos}, {"type_id", type_id}}}});
    pieces.push_back({{"Sequence", {{"id", id}, {"type_id", type_id}}}});
    if (eos) pieces.push_back({{"SpecialToken", {{"id", *eos}, {"type_id", type_id}}}});
    return pieces;
  };
  nlohmann::json pair = sequence("A", 0);
  for (const nlohmann::json& piece : sequence("B", 1)) pair.push_back(piece);
  nlohmann::json specials = nlohmann::json::object();
  if (bos) specials[*bos] = {{"id", *bos}, {"ids", {bos_id}}, {"tokens", {*bos}}};
  if (eos) specials[*eos] = {{"id", *eos}, {"ids", {eos_id}}, {"tokens", {*eos}}};
  return {{"type", "TemplateProcessing"},
          {"single", sequence("A", 0)},
          {"pair", pair},
          {"special_tokens", specials}};
}

struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int> types;
  std::vector<std::string> merges;  // byte-level BPE ("gpt2")
  std::vector<float> scores;        // SentencePiece ("llama")
};

GgufVocab read_vocab(const GgufReader& gguf, bool sentencepiece) {
  const std::string& path = gguf.path();
  GgufVocab v;
  const nlohmann::json& tokens = gguf.value("tokenizer.ggml.tokens");
  ZT_CHECK(tokens.is_array() && !tokens.empty(),
           path + ": metadata 'tokenizer.ggml.tokens' must be a non-empty array of strings");
  for (const nlohmann::json& t : tokens) {
    ZT_CHECK(t.is_string(),
             path + ": metadata 'tokenizer.ggml.tokens' holds a non-string " + quoted_json(t));
    v.tokens.push_back(t.get<std::string>());
  }
  v.types.assign(v.tokens.size(), kGgufNormal);
  if (gguf.has("tokenizer.ggml.token_type")) {
    const nlohmann::json& types = gguf.value("tokenizer.ggml.token_type");
    ZT_CHECK(types.is_array() && types.size() == v.tokens.size(),
             path + ": metadata 'tokenizer.ggml.token_type' must have one entry per token (" +
                 std::to_string(v.tokens.size()) + ")");
    for (size_t i = 0; i < types.size(); ++i) {
      ZT_CHECK(types[i].is_number_integer() && types[i].get<int64_t>() >= kGgufNormal &&
                   types[i].get<int64_t>() <= kGgufByte,
               path + ": metadata 'tokenizer.ggml.token_type'[" + std::to_string(i) + "] is " +
                   quoted_json(types[i]) + ", not a token type (1 to 6)");
      v.types[i] = types[i].get<int>();
    }
  }
  if (sentencepiece) {
    ZT_CHECK(gguf.has("tokenizer.ggml.scores"),
             path +
                 ": no metadata 'tokenizer.ggml.scores' (a SentencePiece vocabulary ranks its "
                 "merges by them)");
    const nlohmann::json& scores = gguf.value("tokenizer.ggml.scores");
    ZT_CHECK(scores.is_array() && scores.size() == v.tokens.size(),
             path + ": metadata 'tokenizer.ggml.scores' must have one entry per token (" +
                 std::to_string(v.tokens.size()) + ")");
    for (size_t i = 0; i < scores.size(); ++i) {
      ZT_CHECK(scores[i].is_number() && std::isfinite(scores[i].get<double>()),
               path + ": metadata 'tokenizer.ggml.scores'[" + std::to_string(i) + "] is " +
                   quoted_json(scores[i]) + ", not a finite number");
      v.scores.push_back(scores[i].get<float>());
    }
    return v;
  }
  ZT_CHECK(gguf.has("tokenizer.ggml.merges"),
           path + ": no metadata 'tokenizer.ggml.merges' (a BPE vocabulary needs its merges)");
  for (const nlohmann::json& m : gguf.value("tokenizer.ggml.merges")) {
    ZT_CHECK(m.is_string() && m.get<std::string>().find(' ') != std::string::npos,
             path + ": metadata 'tokenizer.ggml.merges' holds " + quoted_json(m) +
                 ", not a merge \"LEFT RIGHT\"");
    v.merges.push_back(m.get<std::string>());
  }
  return v;
}

// A special token id from the metadata, or -1 when absent; it must name a token.
int64_t special_token_id(const GgufReader& gguf, const char* key, size_t vocab) {
  const std::string full = std::string("tokenizer.ggml.") + key;
  if (!gguf.has(full)) return -1;
  const int64_t id = gguf.integer(full);
  ZT_CHECK(id >= 0 && static_cast<size_t>(id) < vocab,
           gguf.path() + ": metadata '" + full + "' is " + std::to_string(id) +
               ", not a token of the " + std::to_string(vocab) + "-token vocabulary");
  return id;
}

// The parts of tokenizer.json that differ between the two kinds of vocabulary.
struct TokenizerPipeline {
  nlohmann::json normalizer, pre_tokenizer, decoder, model;
};

// Byte-level BPE ("gpt2"): bytes mapped to characters, split by the named pre-tokenizer.
TokenizerPipeline byte_level_pipeline(const GgufReader& gguf, const GgufVocab& v,
                                      const nlohmann::json& vocab) {
  const std::string& path = gguf.path();
  const std::string pre = gguf.has("tokenizer.ggml.pre") ? gguf.string("tokenizer.ggml.pre") : "";
  const PreTokenizer* pre_tokenizer = nullptr;
  for (const PreTokenizer& p : pre_tokenizers())
    for (const std::string& name : p.gguf_names)
      if (name == pre) pre_tokenizer = &p;
  ZT_CHECK(pre_tokenizer != nullptr,
           path + ": metadata 'tokenizer.ggml.pre' is \"" + pre +
               "\", a pre-tokenizer zerotrain does not rebuild (it knows " + known_pre_names() +
               "). Give the model's Hugging Face tokenizer directory with --tokenizer DIR");
  return {nullptr,
          pre_tokenizer->hf,
          {{"type", "ByteLevel"},
           {"add_prefix_space", true},
           {"trim_offsets", true},
           {"use_regex", true}},
          {{"type", "BPE"},
           {"dropout", nullptr},
           {"unk_token", nullptr},
           {"continuing_subword_prefix", nullptr},
           {"end_of_word_suffix", nullptr},
           {"fuse_unk", false},
           {"byte_fallback", false},
           {"ignore_merges", pre_tokenizer->ignore_merges},
           {"vocab", vocab},
           {"merges", v.merges}}};
}

// SentencePiece BPE ("llama": Llama 2, Mistral, TinyLlama, Phi-3), as Hugging Face writes it
// for these models: spaces become U+2581 with one prepended (unless
// tokenizer.ggml.add_space_prefix is false), characters outside the vocabulary fall back to
// their <0xNN> byte tokens, and decoding undoes both.
TokenizerPipeline sentencepiece_pipeline(const GgufReader& gguf, const GgufVocab& v,
                                         const nlohmann::json& vocab, int64_t unk) {
  const bool prefix = !gguf.has("tokenizer.ggml.add_space_prefix") ||
                      gguf.value("tokenizer.ggml.add_space_prefix") == true;
  return {sentencepiece_normalizer(prefix),
          nullptr,
          sentencepiece_decoder(prefix),
          {{"type", "BPE"},
           {"dropout", nullptr},
           {"unk_token", unk >= 0 ? nlohmann::json(v.tokens[static_cast<size_t>(unk)]) : nullptr},
           {"continuing_subword_prefix", nullptr},
           {"end_of_word_suffix", nullptr},
           {"fuse_unk", true},
           {"byte_fallback", true},
           {"ignore_merges", false},
           {"vocab", vocab},
           {"merges", sentencepiece_merges(v.tokens, v.scores)}}};
}

// The chat templates of a GGUF file as tokenizer_config.json holds them: tokenizer.chat_template's
// string alone, or, where the file has named ones (tokenizer.chat_template.NAME, as gguf-py writes
// a tokenizer's list form), the list form [{"name", "template"}]: "default" first, then the others
// in name order. Null where it has none.
nlohmann::json chat_template_of(const GgufReader& gguf) {
  const std::string prefix = "tokenizer.chat_template.";
  const bool has_default = gguf.has("tokenizer.chat_template");
  nlohmann::json list = nlohmann::json::array();
  if (has_default)
    list.push_back({{"name", "default"}, {"template", gguf.string("tokenizer.chat_template")}});
  for (const auto& entry : gguf.metadata()) {
    const std::string& key = entry.first;
    if (key.rfind(prefix, 0) != 0 || key.size() == prefix.size()) continue;
    ZT_CHECK(!(has_default && key == prefix + "default"),
             gguf.path() + ": both tokenizer.chat_template and " + key + " are given");
    list.push_back({{"name", key.substr(prefix.size())}, {"template", gguf.string(key)}});
  }
  if (list.empty()) return nlohmann::json();
  if (list.size() == 1 && has_default) return list[0]["template"];
  return list;
}

}  // namespace

TokenizerFiles tokenizer_files_from_gguf(const GgufReader& gguf, int64_t context_length) {
  const std::string& path = gguf.path();
  const std::string model = gguf.string("tokenizer.ggml.model");
  ZT_CHECK(model == "gpt2" || model == "llama",
           path + ": metadata 'tokenizer.ggml.model' is \"" + model +
               "\"; zerotrain rebuilds byte-level BPE (\"gpt2\": GPT-2, Llama 3, Qwen2, SmolLM) "
               "and SentencePiece BPE (\"llama\": Llama 2, Mistral, TinyLlama) vocabularies "
               "only. Give the model's Hugging Face tokenizer directory with --tokenizer DIR");
  const bool sentencepiece = model == "llama";
  const GgufVocab v = read_vocab(gguf, sentencepiece);
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  nlohmann::json decoder = nlohmann::json::object();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& token = v.tokens[id];
    ZT_CHECK(!vocab.contains(token),
             path + ": token " + quoted_json(token) + " appears twice (ids " +
                 std::to_string(vocab[token].get<int64_t>()) + " and " + std::to_string(id) + ")");
    vocab[token] = id;
    const int type = v.types[id];
    if (type != kGgufControl && type != kGgufUserDefined && type != kGgufUnknown) continue;
    const nlohmann::json entry = {{"content", token},     {"lstrip", false},
                                  {"normalized", false},  {"rstrip", false},
                                  {"single_word", false}, {"special", type != kGgufUserDefined}};
    nlohmann::json with_id = entry;
    with_id["id"] = id;
    added.push_back(with_id);
    decoder[std::to_string(id)] = entry;
  }
  const size_t n = v.tokens.size();
  const int64_t bos = special_token_id(gguf, "bos_token_id", n);
  const int64_t eos = special_token_id(gguf, "eos_token_id", n);
  const int64_t unk = special_token_id(gguf, "unknown_token_id", n);
  const int64_t pad = special_token_id(gguf, "padding_token_id", n);
  auto flag = [&](const char* key) {
    const std::string full = std::string("tokenizer.ggml.") + key;
    return gguf.has(full) && gguf.value(full) == true;
  };
  // Files older than the add_bos_token key: llama.cpp adds BOS to SentencePiece vocabularies.
  const bool bos_by_default = sentencepiece && !gguf.has("tokenizer.ggml.add_bos_token");
  const bool add_bos = (flag("add_bos_token") || bos_by_default) && bos >= 0,
             add_eos = flag("add_eos_token") && eos >= 0;
  const std::string* bos_token = add_bos ? &v.tokens[static_cast<size_t>(bos)] : nullptr;
  const std::string* eos_token = add_eos ? &v.tokens[static_cast<size_t>(eos)] : nullptr;
  const TokenizerPipeline pipeline = sentencepiece ? sentencepiece_pipeline(gguf, v, vocab, unk)
                                                   : byte_level_pipeline(gguf, v, vocab);
  const nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", pipeline.normalizer},
      {"pre_tokenizer", pipeline.pre_tokenizer},
      {"post_processor", post_processor(bos_token, bos, eos_token, eos, !sentencepiece)},
      {"decoder", pipeline.decoder},
      {"model", pipeline.model}};
  nlohmann::json config = {
      {"added_tokens_decoder", decoder},    {"add_bos_token", add_bos},
      {"add_eos_token", add_eos},           {"clean_up_tokenization_spaces", false},
      {"model_max_length", context_length}, {"tokenizer_class", "PreTrainedTokenizerFast"}};
  nlohmann::json specials = nlohmann::json::object();
  const std::pair<const char*, int64_t> named[] = {
      {"bos_token", bos}, {"eos_token", eos}, {"unk_token", unk}, {"pad_token", pad}};
  for (const auto& [key, id] : named)
    if (id >= 0) specials[key] = config[key] = v.tokens[static_cast<size_t>(id)];
  config["chat_template"] = chat_template_of(gguf);
  if (config["chat_template"].is_null()) config.erase("chat_template");
  TokenizerFiles files;
  files.files["tokenizer.json"] = tokenizer.dump(2) + "\n";
  files.files["tokenizer_config.json"] = config.dump(2) + "\n";
  files.files["special_tokens_map.json"] = specials.dump(2) + "\n";
  files.bos_token_id = bos;
  files.eos_token_id = eos;
  return files;
}

namespace {

nlohmann::json parse_tokenizer_file(const TokenizerFiles& t, const std::string& name,
                                    const std::string& where) {
  const auto it = t.files.find(name);
  if (it == t.files.end()) return nlohmann::json::object();
  return parse_json(it->second, where + "/" + name);
}

// A pre_tokenizer without trim_offsets, which changes offsets only, never the ids.
nlohmann::json without_offsets(nlohmann::json j) {
  if (j.is_object()) {
    j.erase("trim_offsets");
    for (auto& [key, value] : j.items()) value = without_offsets(value);
  } else if (j.is_array()) {
    for (auto& value : j) value = without_offsets(value);
  }
  return j;
}

// A tokenizer_config.json special token: "TOKEN" or {"content": "TOKEN", ...}.
std::string special_token_text(const nlohmann::json& config, const char* key) {
  if (!config.contains(key)) return "";
  const nlohmann::json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string())
    return v.at("content").get<std::string>();
  return "";
}

// What a Hugging Face tokenizer.json becomes in GGUF: "gpt2" with a named pre-tokenizer for
// byte-level BPE; "llama" for SentencePiece BPE (byte fallback, U+2581 for spaces), either as
// transformers writes it for legacy Llama tokenizers (normalizer: Prepend U+2581, Replace " ")
// or for newer ones (a Metaspace pre-tokenizer, no normalizer).
struct GgufTokenizerKind {
  std::string model, pre;
  bool sentencepiece = false;
  bool add_space_prefix = false;
};

GgufTokenizerKind gguf_tokenizer_kind(const nlohmann::json& tok, const std::string& file) {
  const nlohmann::json model = tok.value("model", nlohmann::json::object());
  ZT_CHECK(model.value("type", "") == "BPE",
           file + ": a " + quoted_json(model.value("type", "")) +
               " model; export --format gguf writes BPE vocabularies (byte-level or "
               "SentencePiece) only");
  const nlohmann::json pre_tokenizer = tok.value("pre_tokenizer", nlohmann::json());
  if (model.value("byte_fallback", false))
    return {"llama", "default", true, sentencepiece_space_prefix(tok, file)};
  // The name whose split and ignore_merges are the tokenizer's (Llama 3's and cl100k's split
  // alike), else the first whose split is.
  const nlohmann::json wanted = without_offsets(pre_tokenizer);
  const bool ignore_merges = model.value("ignore_merges", false);
  const PreTokenizer* found = nullptr;
  for (const PreTokenizer& p : pre_tokenizers()) {
    if (without_offsets(p.hf) != wanted) continue;
    if (p.ignore_merges == ignore_merges) return {"gpt2", p.gguf_names.front(), false, false};
    if (!found) found = &p;
  }
  if (found) return {"gpt2", found->gguf_names.front(), false, false};
  fail(file + ": its pre_tokenizer " + quoted_json(pre_tokenizer) +
       " is not one llama.cpp knows by name here (" + known_pre_names() + ")");
}

GgufValue string_value(const std::string& s) {
  return {GgufValueType::kString, GgufValueType::kUint32, s};
}

// The chat templates as gguf-py's add_chat_template writes them: "default" as
// tokenizer.chat_template, each other one as tokenizer.chat_template.NAME (a character of NAME
// other than an ASCII letter or digit as '_'), their names listed in tokenizer.chat_templates.
// Unlike gguf-py, an empty template is left out whole (gguf-py lists its name without a key),
// and two names sharing a key are refused (gguf-py keeps the last).
void add_chat_templates(std::vector<std::pair<std::string, GgufValue>>& out,
                        const std::map<std::string, std::string>& templates,
                        const std::string& where) {
  std::vector<std::pair<std::string, GgufValue>> named;
  nlohmann::json names = nlohmann::json::array();
  std::map<std::string, std::string> given_as;  // GGUF name -> the tokenizer's
  for (const auto& [name, text] : templates) {
    if (name.empty() || name == "default" || text.empty()) continue;  // gguf-py skips no name
    std::string key_name;  // one '_' per character (UTF-8 continuation bytes add none)
    for (const char c : name) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte < 128 && std::isalnum(byte))
        key_name += c;
      else if ((byte & 0xC0) != 0x80)
        key_name += '_';
    }
    const auto [it, fresh] = given_as.emplace(key_name, name);
    ZT_CHECK(fresh, where + ": the chat templates '" + it->second + "' and '" + name +
                        "' would both be written as tokenizer.chat_template." + key_name);
    names.push_back(key_name);
    named.push_back({"tokenizer.chat_template." + key_name, string_value(text)});
  }
  if (!names.empty()) {
    out.push_back(
        {"tokenizer.chat_templates", {GgufValueType::kArray, GgufValueType::kString, names}});
    out.insert(out.end(), named.begin(), named.end());
  }
  const auto fallback = templates.find("default");
  if (fallback != templates.end() && !fallback->second.empty())
    out.push_back({"tokenizer.chat_template", string_value(fallback->second)});
}

// Whether a tokenizer puts its BOS before and its EOS after an encoded text, as llama.cpp's
// converter (gguf-py's SpecialVocab) reads it for tokenizer.ggml.add_bos_token/add_eos_token: the
// post-processor's template (alone or inside a Sequence, as Llama 3's sits after its ByteLevel;
// RobertaProcessing adds both), a template's leading special token being the BOS (or CLS) and its
// trailing one the EOS, and then tokenizer_config.json's add_bos_token and add_eos_token, which
// win where they are booleans (Phi-3's false over a template that writes <s>).
std::pair<bool, bool> specials_around_a_sequence(const nlohmann::json& tok,
                                                 const nlohmann::json& config,
                                                 const std::map<std::string, int64_t>& ids) {
  bool add_bos = false, add_eos = false;
  const nlohmann::json post = tok.value("post_processor", nlohmann::json());
  const bool sequence = post.is_object() && post.value("type", "") == "Sequence";
  const nlohmann::json processors =
      sequence ? post.value("processors", nlohmann::json::array()) : nlohmann::json::array({post});
  auto special = [](const nlohmann::json& piece) {
    return piece.is_object() && piece.contains("SpecialToken")
               ? piece["SpecialToken"].value("id", std::string())
               : std::string();
  };
  for (const nlohmann::json& p : processors) {
    if (!p.is_object()) continue;
    const std::string type = p.value("type", "");
    if (type == "RobertaProcessing") add_bos = add_eos = true;
    const nlohmann::json single = p.value("single", nlohmann::json::array());
    if (type != "TemplateProcessing" || !single.is_array() || single.size() < 2) continue;
    const std::string first = special(single.front()), last = special(single.back());
    if (!first.empty())
      add_bos = first == special_token_text(config, "bos_token") ||
                first == special_token_text(config, "cls_token");
    if (!last.empty()) add_eos = last == special_token_text(config, "eos_token");
  }
  if (config.contains("add_bos_token") && config.at("add_bos_token").is_boolean())
    add_bos = config.at("add_bos_token").get<bool>();
  if (config.contains("add_eos_token") && config.at("add_eos_token").is_boolean())
    add_eos = config.at("add_eos_token").get<bool>();
  // A flag without its token in the vocabulary adds nothing.
  return {add_bos && ids.count("bos_token") > 0, add_eos && ids.count("eos_token") > 0};
}

// gguf_tokenizer_metadata, with nlohmann's exceptions for a file of the wrong shape.
std::vector<std::pair<std::string, GgufValue>> metadata_of_tokenizer_files(
    const TokenizerFiles& tokenizer, int64_t vocab_size, const std::string& where,
    const std::string& end_of_turn) {
  ZT_CHECK(tokenizer.files.count("tokenizer.json"),
           where + ": no tokenizer.json to write into the GGUF file");
  const nlohmann::json tok = parse_tokenizer_file(tokenizer, "tokenizer.json", where);
  const nlohmann::json config = parse_tokenizer_file(tokenizer, "tokenizer_config.json", where);
  const std::string file = where + "/tokenizer.json";
  const nlohmann::json model = tok.value("model", nlohmann::json::object());
  const GgufTokenizerKind kind = gguf_tokenizer_kind(tok, file);
  std::map<int64_t, std::pair<std::string, int>> by_id;  // id -> token, type
  const nlohmann::json vocab = model.value("vocab", nlohmann::json::object());
  const nlohmann::json added = tok.value("added_tokens", nlohmann::json::array());
  const nlohmann::json model_merges = model.value("merges", nlohmann::json::array());
  const std::string unk_token = model.value("unk_token", nlohmann::json()).is_string()
                                    ? model.at("unk_token").get<std::string>()
                                    : "";
  for (const auto& [token, id] : vocab.items())
    by_id[id.get<int64_t>()] = {token, !kind.sentencepiece    ? kGgufNormal
                                       : token == unk_token   ? kGgufUnknown
                                       : is_byte_token(token) ? kGgufByte
                                                              : kGgufNormal};
  for (const nlohmann::json& a : added) {
    const std::string content = a.at("content").get<std::string>();
    by_id[a.at("id").get<int64_t>()] = {content, content == unk_token && kind.sentencepiece
                                                     ? kGgufUnknown
                                                 : a.value("special", false) ? kGgufControl
                                                                             : kGgufUserDefined};
  }
  ZT_CHECK(!by_id.empty() && by_id.begin()->first >= 0 && by_id.rbegin()->first < vocab_size,
           file + ": token ids reach " + std::to_string(by_id.empty() ? 0 : by_id.rbegin()->first) +
               ", beyond the model's vocabulary of " + std::to_string(vocab_size));
  nlohmann::json tokens = nlohmann::json::array(), types = nlohmann::json::array();
  std::map<std::string, int64_t> id_of;
  for (int64_t id = 0; id < vocab_size; ++id) {
    const auto it = by_id.find(id);
    // Embedding rows no token has (past the last token, or a gap): padding, as llama.cpp's
    // converter pads.
    const std::string token =
        it != by_id.end() ? it->second.first : "[PAD" + std::to_string(id) + "]";
    tokens.push_back(token);
    types.push_back(it != by_id.end() ? it->second.second : kGgufUnused);
    id_of.emplace(token, id);
  }
  std::vector<std::pair<std::string, GgufValue>> out = {
      {"tokenizer.ggml.model", string_value(kind.model)},
      {"tokenizer.ggml.pre", string_value(kind.pre)},
      {"tokenizer.ggml.tokens", {GgufValueType::kArray, GgufValueType::kString, tokens}},
      {"tokenizer.ggml.token_type", {GgufValueType::kArray, GgufValueType::kInt32, types}}};
  if (kind.sentencepiece) {
    out.push_back({"tokenizer.ggml.scores",
                   {GgufValueType::kArray, GgufValueType::kFloat32,
                    sentencepiece_scores(tokens, types, model_merges, file)}});
    out.push_back({"tokenizer.ggml.add_space_prefix",
                   {GgufValueType::kBool, GgufValueType::kUint32, kind.add_space_prefix}});
  } else {
    nlohmann::json merges = nlohmann::json::array();
    for (const nlohmann::json& m : model_merges) {
      const auto [left, right] = merge_pair(m, file);
      merges.push_back(left + " " + right);
    }
    out.push_back(
        {"tokenizer.ggml.merges", {GgufValueType::kArray, GgufValueType::kString, merges}});
  }
  const std::pair<const char*, const char*> specials[] = {{"bos_token", "bos_token_id"},
                                                          {"eos_token", "eos_token_id"},
                                                          {"unk_token", "unknown_token_id"},
                                                          {"pad_token", "padding_token_id"}};
  std::map<std::string, int64_t> special_ids;
  for (const auto& [key, gguf_key] : specials) {
    const auto it = id_of.find(special_token_text(config, key));
    if (it == id_of.end()) continue;
    special_ids[key] = it->second;
    out.push_back({std::string("tokenizer.ggml.") + gguf_key,
                   {GgufValueType::kUint32, GgufValueType::kUint32, it->second}});
  }
  if (const auto it = id_of.find(end_of_turn); !end_of_turn.empty() && it != id_of.end())
    out.push_back({"tokenizer.ggml.eot_token_id",
                   {GgufValueType::kUint32, GgufValueType::kUint32, it->second}});
  const auto [add_bos, add_eos] = specials_around_a_sequence(tok, config, special_ids);
  out.push_back(
      {"tokenizer.ggml.add_bos_token", {GgufValueType::kBool, GgufValueType::kUint32, add_bos}});
  out.push_back(
      {"tokenizer.ggml.add_eos_token", {GgufValueType::kBool, GgufValueType::kUint32, add_eos}});
  add_chat_templates(out, chat_templates(tokenizer, config, where + "/tokenizer_config.json"),
                     where);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(
    const TokenizerFiles& tokenizer, int64_t vocab_size, const std::string& where,
    const std::string& end_of_turn) {
  try {
    return metadata_of_tokenizer_files(tokenizer, vocab_size, where, end_of_turn);
  } catch (const nlohmann::json::exception& e) {
    fail(where + ": the tokenizer files are not in the format transformers writes (" + e.what() +
         ")");
  }
}

}  // namespace zt
