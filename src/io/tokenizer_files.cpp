#include "io/tokenizer_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// Whole, then renamed into place: a reader never sees half a tokenizer file.
void write_whole_file(const fs::path& path, const std::string& text) {
  const std::string tmp = temp_sibling(path.string());
  write_text_file(tmp, text);
  try {
    move_into_place(tmp, path.string(), /*overwrite=*/true);
  } catch (const Error&) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

// `what` names the file in errors: "tokenizer file", "chat template".
std::string read_whole_file(const fs::path& path, const std::string& what = "tokenizer file") {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.is_open(), "cannot open " + what + " '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  ZT_CHECK(!in.bad(), "cannot read " + what + " '" + path.string() + "'");
  return text.str();
}

constexpr std::string_view kJinja = ".jinja";

// Where a value lies in the text of a JSON document: [begin, end).
struct JsonSpan {
  size_t begin = 0, end = 0;
};

size_t skip_json_space(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  return i;
}

// s[i] opens a string: the index past its closing quote.
size_t skip_json_string(const std::string& s, size_t i) {
  for (++i; i < s.size() && s[i] != '"'; ++i)
    if (s[i] == '\\') ++i;
  return i + 1;
}

// s[i] opens a value: the index past it (a string, an object or array whole, or a scalar).
size_t skip_json_value(const std::string& s, size_t i) {
  if (s[i] == '"') return skip_json_string(s, i);
  if (s[i] != '{' && s[i] != '[') {
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' &&
           s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
      ++i;
    return i;
  }
  int depth = 0;
  while (i < s.size()) {
    if (s[i] == '"') {
      i = skip_json_string(s, i);
      continue;
    }
    if (s[i] == '{' || s[i] == '[') ++depth;
    if (s[i] == '}' || s[i] == ']') --depth;
    ++i;
    if (depth == 0) break;
  }
  return i;
}

// The value of `key` in the top-level object of `s` (valid JSON; the last one where the key is
// given twice, as Python's json keeps it), or none.
std::optional<JsonSpan> top_level_value(const std::string& s, const std::string& key) {
  std::optional<JsonSpan> found;
  size_t i = s.find('{') + 1;  // past the object's opening (a byte-order mark may precede it)
  while (true) {
    i = skip_json_space(s, i);
    if (i >= s.size() || s[i] == '}') return found;
    const size_t key_end = skip_json_string(s, i);
    const bool match = nlohmann::json::parse(s.substr(i, key_end - i)).get<std::string>() == key;
    i = skip_json_space(s, skip_json_space(s, key_end) + 1);  // past ':'
    const size_t value_end = skip_json_value(s, i);
    if (match) found = JsonSpan{i, value_end};
    i = skip_json_space(s, value_end);
    if (i < s.size() && s[i] == ',') ++i;
  }
}

bool json_object_is_empty(const std::string& s) {
  return s[skip_json_space(s, s.find('{') + 1)] == '}';
}

// tokenizer_config.json's "chat_template": a string ("default") or the list form.
std::map<std::string, std::string> config_chat_templates(const nlohmann::json& config,
                                                         const std::string& file) {
  const nlohmann::json value =
      config.is_object() ? config.value("chat_template", nlohmann::json()) : nlohmann::json();
  if (value.is_string()) return {{"default", value.get<std::string>()}};
  if (value.is_null()) return {};
  ZT_CHECK(value.is_array(), file +
                                 ": \"chat_template\" is neither a string nor a list of "
                                 "{\"name\", \"template\"}");
  std::map<std::string, std::string> templates;
  for (size_t i = 0; i < value.size(); ++i) {
    const nlohmann::json& entry = value[i];
    const std::string at = file + ": \"chat_template\"[" + std::to_string(i) + "]";
    ZT_CHECK(entry.is_object() && entry.value("name", nlohmann::json()).is_string() &&
                 entry.value("template", nlohmann::json()).is_string(),
             at + " is not {\"name\": string, \"template\": string}");
    const std::string name = entry.at("name").get<std::string>();
    ZT_CHECK(templates.emplace(name, entry.at("template").get<std::string>()).second,
             at + ": the name '" + name + "' is given twice");
  }
  return templates;
}

}  // namespace

const char* const kNamedChatTemplateDir = "additional_chat_templates";

std::string named_chat_template_file(const std::string& name) {
  // NAME + ".jinja" is a plain file name: never "." or "..".
  ZT_CHECK(!name.empty() && name.find('/') == std::string::npos,
           "'" + name + "' is not a chat template name (a file name's stem)");
  return std::string(kNamedChatTemplateDir) + "/" + name + std::string(kJinja);
}

std::string named_chat_template_name(const std::string& path) {
  const std::string dir = std::string(kNamedChatTemplateDir) + "/";
  if (path.rfind(dir, 0) != 0 || !path.ends_with(kJinja)) return "";
  const std::string name = path.substr(dir.size(), path.size() - dir.size() - kJinja.size());
  return name.empty() || name.find('/') != std::string::npos ? "" : name;
}

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {
      "tokenizer.json",         "tokenizer_config.json", "special_tokens_map.json",
      "generation_config.json", "chat_template.jinja",   "added_tokens.json",
      "tokenizer.model"};
  return names;
}

std::map<std::string, std::string> tokenizer_files_to_write(const TokenizerFiles& tokenizer) {
  std::map<std::string, std::string> files = tokenizer.files;
  if (files.count("generation_config.json")) return files;
  nlohmann::json generation = nlohmann::json::object();
  if (tokenizer.bos_token_id >= 0) generation["bos_token_id"] = tokenizer.bos_token_id;
  if (tokenizer.eos_token_id >= 0) generation["eos_token_id"] = tokenizer.eos_token_id;
  if (!generation.empty()) files["generation_config.json"] = generation.dump(2) + "\n";
  return files;
}

nlohmann::json generation_token_ids(const std::map<std::string, std::string>& files,
                                    const std::string& where) {
  nlohmann::json ids = nlohmann::json::object();
  const auto file = files.find("generation_config.json");
  if (file == files.end()) return ids;
  const nlohmann::json generation = nlohmann::json::parse(file->second, nullptr, false);
  ZT_CHECK(generation.is_object(),
           where + "/generation_config.json: not a JSON object (transformers cannot read it)");
  // (An id past the vocabulary is carried as transformers carries it: its config classes'
  // defaults give a small test model one, Phi3Config's 32000.)
  const auto is_id = [](const nlohmann::json& v) { return v.is_number_integer() && v >= 0; };
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    const auto it = generation.find(key);
    if (it == generation.end() || it->is_null()) continue;
    ZT_CHECK(is_id(*it) ||
                 (it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), is_id)),
             where + "/generation_config.json: '" + key + "' is " + it->dump() +
                 ", not a token id (or a list of them)");
    ids[key] = *it;
  }
  return ids;
}

void write_tokenizer_file(const std::string& dir, const std::string& name,
                          const std::string& text) {
  if (!named_chat_template_name(name).empty()) {
    const fs::path sub = fs::path(dir) / kNamedChatTemplateDir;
    std::error_code ec;
    if (fs::create_directories(sub, ec)) fsync_path(dir);  // the new directory's entry
    ZT_CHECK(!ec, "cannot create '" + sub.string() + "': " + ec.message());
    write_whole_file(fs::path(dir) / name, text);  // fsyncs `sub` (move_into_place)
    return;
  }
  ZT_CHECK(name.find('/') == std::string::npos, "'" + name + "' is not a tokenizer file name");
  write_whole_file(fs::path(dir) / name, text);
}

void write_tokenizer_files(const TokenizerFiles& tokenizer, const std::string& dir) {
  for (const auto& [name, text] : tokenizer_files_to_write(tokenizer))
    write_tokenizer_file(dir, name, text);
}

TokenizerFiles read_tokenizer_files(const std::string& path) {
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  TokenizerFiles tokenizer;
  for (const std::string& name : tokenizer_file_names()) {
    const fs::path file = !is_dir && name == "tokenizer.json" ? fs::path(path) : dir / name;
    if (fs::is_regular_file(file, ec)) tokenizer.files[name] = read_whole_file(file);
  }
  // The named templates, as transformers lists them: every *.jinja file of the directory.
  const fs::path named = dir / kNamedChatTemplateDir;
  if (fs::is_directory(named, ec)) {
    fs::directory_iterator entries(named, ec);
    ZT_CHECK(!ec, "cannot list '" + named.string() + "': " + ec.message());
    for (const fs::directory_entry& entry : entries) {
      const std::string file = entry.path().filename().string();
      if (!entry.is_regular_file(ec) || !file.ends_with(kJinja) || file == kJinja) continue;
      tokenizer.files[named_chat_template_file(file.substr(0, file.size() - kJinja.size()))] =
          read_whole_file(entry.path());
    }
  }
  return tokenizer;
}

std::map<std::string, std::string> chat_templates(const TokenizerFiles& tokenizer,
                                                  const nlohmann::json& config,
                                                  const std::string& config_file) {
  std::map<std::string, std::string> templates;
  const auto jinja = tokenizer.files.find("chat_template.jinja");
  if (jinja != tokenizer.files.end()) templates["default"] = jinja->second;
  for (const auto& [path, text] : tokenizer.files) {  // after it: a file "default.jinja" wins
    const std::string name = named_chat_template_name(path);
    if (!name.empty()) templates[name] = text;
  }
  return templates.empty() ? config_chat_templates(config, config_file) : templates;
}

std::string read_chat_template_file(const std::string& path) {
  ZT_CHECK(!path.empty(), "--chat-template-file: no path given");
  std::error_code ec;
  ZT_CHECK(fs::exists(path, ec), "chat template '" + path + "' does not exist");
  ZT_CHECK(!fs::is_directory(path, ec),
           "chat template '" + path +
               "' is a directory: give the Jinja file itself (a tokenizer directory's template is "
               "its chat_template.jinja, or the \"chat_template\" of its tokenizer_config.json)");
  ZT_CHECK(fs::is_regular_file(path, ec), "chat template '" + path + "' is not a file");
  // Read as Python reads a text file (TRL's open(path, encoding="utf-8")): "\r\n" and a lone
  // "\r" are newlines, "\n"; a byte-order mark stays.
  std::string text;
  const std::string bytes = read_whole_file(path, "chat template");
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\r') {
      text += bytes[i];
      continue;
    }
    text += '\n';
    if (i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
  }
  ZT_CHECK(text.find_first_not_of(" \t\n") != std::string::npos,
           "chat template '" + path + "' is empty (" + std::to_string(bytes.size()) +
               " bytes of whitespace)");
  try {
    (void)nlohmann::json(text).dump();  // dump() refuses a string that is not UTF-8
  } catch (const nlohmann::json::exception& e) {
    throw Error("chat template '" + path + "' is not UTF-8 text (" + e.what() + ")");
  }
  const nlohmann::json as_json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ZT_CHECK(!as_json.is_object(),
           "chat template '" + path +
               "' is a JSON object, not a Jinja template: give the template's text, as "
               "chat_template.jinja holds it (a tokenizer_config.json holds it as its "
               "\"chat_template\")");
  return text;
}

void replace_chat_template(TokenizerFiles& files, const std::string& text,
                           const std::string& tokenizer) {
  std::erase_if(files.files,
                [](const auto& entry) { return !named_chat_template_name(entry.first).empty(); });
  files.files["chat_template.jinja"] = text;
  const auto config = files.files.find("tokenizer_config.json");
  if (config == files.files.end()) return;
  std::string& json = config->second;
  ZT_CHECK(nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false).is_object(),
           tokenizer + ": tokenizer_config.json is not a JSON object");
  // The value is spliced into the text, so every other byte of the config stays (a number such
  // as model_max_length 1000000000000000019884624838656 would not survive a parse and a dump).
  const std::string value = nlohmann::json(text).dump();
  const std::optional<JsonSpan> held = top_level_value(json, "chat_template");
  if (held) {
    json.replace(held->begin, held->end - held->begin, value);
    return;
  }
  const std::string entry =
      "\"chat_template\": " + value + (json_object_is_empty(json) ? "" : ", ");
  json.insert(json.find('{') + 1, entry);
}

namespace {

// The files that decide the encoding: every file but the chat templates, tokenizer_config.json
// without its "chat_template" (parsed, so its formatting does not count either).
std::map<std::string, std::string> encoding_files(const TokenizerFiles& tokenizer) {
  std::map<std::string, std::string> files;
  for (const auto& [name, text] : tokenizer.files) {
    if (name == "chat_template.jinja" || !named_chat_template_name(name).empty()) continue;
    nlohmann::json config = name == "tokenizer_config.json"
                                ? nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false)
                                : nlohmann::json();
    if (config.is_object()) config.erase("chat_template");
    files[name] = config.is_object() ? config.dump() : text;
  }
  return files;
}

}  // namespace

bool same_tokenizer_apart_from_chat_templates(const TokenizerFiles& a, const TokenizerFiles& b) {
  return a.bos_token_id == b.bos_token_id && a.eos_token_id == b.eos_token_id &&
         encoding_files(a) == encoding_files(b);
}

}  // namespace zt
