#include "io/tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace

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

void write_tokenizer_files(const TokenizerFiles& tokenizer, const std::string& dir) {
  for (const auto& [name, text] : tokenizer_files_to_write(tokenizer))
    write_whole_file(fs::path(dir) / name, text);
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
  return tokenizer;
}

}  // namespace zt
