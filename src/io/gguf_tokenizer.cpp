#include "io/gguf_tokenizer.h"

#include <map>
#include <set>

#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace {

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum TokenType : int {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

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
};

const std::vector<PreTokenizer>& pre_tokenizers() {
  static const std::vector<PreTokenizer> table = {
      {{"gpt-2"}, byte_level(true)},
      {{"smollm"},
       {{"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}}},
      {{"llama-bpe", "llama3"},
       split_then_bytes("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")},
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

// The post-processor: a template adding BOS before (and EOS after) each sequence, or
// byte-level's own when nothing is added.
nlohmann::json post_processor(const std::string* bos, int64_t bos_id, const std::string* eos,
                              int64_t eos_id) {
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
  std::vector<std::string> merges;
};

GgufVocab read_vocab(const GgufReader& gguf) {
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
  v.types.assign(v.tokens.size(), kNormal);
  if (gguf.has("tokenizer.ggml.token_type")) {
    const nlohmann::json& types = gguf.value("tokenizer.ggml.token_type");
    ZT_CHECK(types.is_array() && types.size() == v.tokens.size(),
             path + ": metadata 'tokenizer.ggml.token_type' must have one entry per token (" +
                 std::to_string(v.tokens.size()) + ")");
    for (size_t i = 0; i < types.size(); ++i) {
      ZT_CHECK(types[i].is_number_integer() && types[i].get<int64_t>() >= kNormal &&
                   types[i].get<int64_t>() <= kByte,
               path + ": metadata 'tokenizer.ggml.token_type'[" + std::to_string(i) + "] is " +
                   quoted_json(types[i]) + ", not a token type (1 to 6)");
      v.types[i] = types[i].get<int>();
    }
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

}  // namespace

TokenizerFiles tokenizer_files_from_gguf(const GgufReader& gguf, int64_t context_length) {
  const std::string& path = gguf.path();
  const std::string model = gguf.string("tokenizer.ggml.model");
  ZT_CHECK(model == "gpt2",
           path + ": metadata 'tokenizer.ggml.model' is \"" + model +
               "\"; zerotrain rebuilds byte-level BPE vocabularies (\"gpt2\": GPT-2, Llama 3, "
               "Qwen2, SmolLM) only. Give the model's Hugging Face tokenizer directory with "
               "--tokenizer DIR");
  const std::string pre = gguf.has("tokenizer.ggml.pre") ? gguf.string("tokenizer.ggml.pre") : "";
  const PreTokenizer* pre_tokenizer = nullptr;
  for (const PreTokenizer& p : pre_tokenizers())
    for (const std::string& name : p.gguf_names)
      if (name == pre) pre_tokenizer = &p;
  ZT_CHECK(pre_tokenizer != nullptr,
           path + ": metadata 'tokenizer.ggml.pre' is \"" + pre +
               "\", a pre-tokenizer zerotrain does not rebuild (it knows " + known_pre_names() +
               "). Give the model's Hugging Face tokenizer directory with --tokenizer DIR");
  const GgufVocab v = read_vocab(gguf);
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  nlohmann::json decoder = nlohmann::json::object();
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& token = v.tokens[id];
    ZT_CHECK(!vocab.contains(token),
             path + ": token " + quoted_json(token) + " appears twice (ids " +
                 std::to_string(vocab[token].get<int64_t>()) + " and " + std::to_string(id) + ")");
    vocab[token] = id;
    const int type = v.types[id];
    if (type != kControl && type != kUserDefined && type != kUnknown) continue;
    const nlohmann::json entry = {{"content", token},     {"lstrip", false},
                                  {"normalized", false},  {"rstrip", false},
                                  {"single_word", false}, {"special", type != kUserDefined}};
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
  const bool add_bos = flag("add_bos_token") && bos >= 0,
             add_eos = flag("add_eos_token") && eos >= 0;
  const std::string* bos_token = add_bos ? &v.tokens[static_cast<size_t>(bos)] : nullptr;
  const std::string* eos_token = add_eos ? &v.tokens[static_cast<size_t>(eos)] : nullptr;
  const nlohmann::json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer->hf},
      {"post_processor", post_processor(bos_token, bos, eos_token, eos)},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        // llama.cpp takes a Llama 3 pre-token found whole in the vocabulary as one token.
        {"ignore_merges", pre_tokenizer->gguf_names.front() == "llama-bpe"},
        {"vocab", vocab},
        {"merges", v.merges}}}};
  nlohmann::json config = {
      {"added_tokens_decoder", decoder},    {"add_bos_token", add_bos},
      {"add_eos_token", add_eos},           {"clean_up_tokenization_spaces", false},
      {"model_max_length", context_length}, {"tokenizer_class", "PreTrainedTokenizerFast"}};
  nlohmann::json specials = nlohmann::json::object();
  const std::pair<const char*, int64_t> named[] = {
      {"bos_token", bos}, {"eos_token", eos}, {"unk_token", unk}, {"pad_token", pad}};
  for (const auto& [key, id] : named)
    if (id >= 0) specials[key] = config[key] = v.tokens[static_cast<size_t>(id)];
  if (gguf.has("tokenizer.chat_template"))
    config["chat_template"] = gguf.string("tokenizer.chat_template");
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

GgufValue string_value(const std::string& s) {
  return {GgufValueType::kString, GgufValueType::kUint32, s};
}

// gguf_tokenizer_metadata, with nlohmann's exceptions for a file of the wrong shape.
std::vector<std::pair<std::string, GgufValue>> metadata_of_tokenizer_files(
    const TokenizerFiles& tokenizer, int64_t vocab_size, const std::string& where) {
  ZT_CHECK(tokenizer.files.count("tokenizer.json"),
           where + ": no tokenizer.json to write into the GGUF file");
  const nlohmann::json tok = parse_tokenizer_file(tokenizer, "tokenizer.json", where);
  const nlohmann::json config = parse_tokenizer_file(tokenizer, "tokenizer_config.json", where);
  const std::string file = where + "/tokenizer.json";
  const nlohmann::json model = tok.value("model", nlohmann::json::object());
  ZT_CHECK(model.value("type", "") == "BPE" && !model.value("byte_fallback", false),
           file + ": not a byte-level BPE tokenizer (model " +
               quoted_json(model.value("type", "")) +
               (model.value("byte_fallback", false) ? ", byte_fallback: a SentencePiece-style one"
                                                    : "") +
               "); export --format gguf writes byte-level BPE vocabularies only");
  std::string pre;
  const nlohmann::json wanted = without_offsets(tok.value("pre_tokenizer", nlohmann::json()));
  for (const PreTokenizer& p : pre_tokenizers())
    if (without_offsets(p.hf) == wanted) pre = p.gguf_names.front();
  ZT_CHECK(!pre.empty(), file + ": its pre_tokenizer " +
                             quoted_json(tok.value("pre_tokenizer", nlohmann::json())) +
                             " is not one llama.cpp knows by name here (" + known_pre_names() +
                             ")");
  std::map<int64_t, std::pair<std::string, int>> by_id;  // id -> token, type
  const nlohmann::json vocab = model.value("vocab", nlohmann::json::object());
  const nlohmann::json added = tok.value("added_tokens", nlohmann::json::array());
  const nlohmann::json model_merges = model.value("merges", nlohmann::json::array());
  for (const auto& [token, id] : vocab.items()) by_id[id.get<int64_t>()] = {token, kNormal};
  for (const nlohmann::json& a : added)
    by_id[a.at("id").get<int64_t>()] = {a.at("content").get<std::string>(),
                                        a.value("special", false) ? kControl : kUserDefined};
  ZT_CHECK(!by_id.empty() && by_id.begin()->first >= 0 && by_id.rbegin()->first < vocab_size,
           file + ": token ids reach " + std::to_string(by_id.empty() ? 0 : by_id.rbegin()->first) +
               ", beyond the model's vocabulary of " + std::to_string(vocab_size));
  nlohmann::json tokens = nlohmann::json::array(), types = nlohmann::json::array();
  std::map<std::string, int64_t> id_of;
  for (int64_t id = 0; id < vocab_size; ++id) {
    const auto it = by_id.find(id);
    // Embedding rows past the tokenizer's last token: padding, as llama.cpp's converter pads.
    const std::string token =
        it != by_id.end() ? it->second.first : "[PAD" + std::to_string(id) + "]";
    tokens.push_back(token);
    types.push_back(it != by_id.end() ? it->second.second : kUnused);
    id_of.emplace(token, id);
  }
  nlohmann::json merges = nlohmann::json::array();
  for (const nlohmann::json& m : model_merges)
    merges.push_back(m.is_array() ? m.at(0).get<std::string>() + " " + m.at(1).get<std::string>()
                                  : m.get<std::string>());
  std::vector<std::pair<std::string, GgufValue>> out = {
      {"tokenizer.ggml.model", string_value("gpt2")},
      {"tokenizer.ggml.pre", string_value(pre)},
      {"tokenizer.ggml.tokens", {GgufValueType::kArray, GgufValueType::kString, tokens}},
      {"tokenizer.ggml.token_type", {GgufValueType::kArray, GgufValueType::kInt32, types}},
      {"tokenizer.ggml.merges", {GgufValueType::kArray, GgufValueType::kString, merges}}};
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
  // What the post-processor adds around a sequence: a template's leading and trailing tokens.
  const nlohmann::json post = tok.value("post_processor", nlohmann::json());
  bool add_bos = false, add_eos = false;
  if (post.is_object() && post.value("type", "") == "TemplateProcessing") {
    const nlohmann::json& single = post.at("single");
    auto special_at = [&](const nlohmann::json& piece, const char* key) {
      return piece.contains("SpecialToken") && special_ids.count(key) &&
             piece["SpecialToken"]["id"] == special_token_text(config, key);
    };
    add_bos = !single.empty() && special_at(single.front(), "bos_token");
    add_eos = !single.empty() && special_at(single.back(), "eos_token");
  }
  out.push_back(
      {"tokenizer.ggml.add_bos_token", {GgufValueType::kBool, GgufValueType::kUint32, add_bos}});
  out.push_back(
      {"tokenizer.ggml.add_eos_token", {GgufValueType::kBool, GgufValueType::kUint32, add_eos}});
  std::string chat_template;
  if (tokenizer.files.count("chat_template.jinja"))
    chat_template = tokenizer.files.at("chat_template.jinja");
  else if (config.contains("chat_template") && config.at("chat_template").is_string())
    chat_template = config.at("chat_template").get<std::string>();
  if (!chat_template.empty())
    out.push_back({"tokenizer.chat_template", string_value(chat_template)});
  return out;
}

}  // namespace

std::vector<std::pair<std::string, GgufValue>> gguf_tokenizer_metadata(
    const TokenizerFiles& tokenizer, int64_t vocab_size, const std::string& where) {
  try {
    return metadata_of_tokenizer_files(tokenizer, vocab_size, where);
  } catch (const nlohmann::json::exception& e) {
    fail(where + ": the tokenizer files are not in the format transformers writes (" + e.what() +
         ")");
  }
}

}  // namespace zt
