#include "io/tokenizer_files.h"

#include <filesystem>
#include <fstream>
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

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.is_open(), "cannot open tokenizer file '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  ZT_CHECK(!in.bad(), "cannot read tokenizer file '" + path.string() + "'");
  return text.str();
}

constexpr std::string_view kJinja = ".jinja";

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

}  // namespace zt
