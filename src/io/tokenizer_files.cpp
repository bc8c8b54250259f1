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

}  // namespace

const std::vector<std::string>& tokenizer_file_names() {
  static const std::vector<std::string> names = {"tokenizer.json", "tokenizer_config.json",
                                                 "special_tokens_map.json",
                                                 "generation_config.json"};
  return names;
}

void write_tokenizer_files(const TokenizerFiles& tokenizer, const std::string& dir) {
  for (const auto& [name, text] : tokenizer.files) write_whole_file(fs::path(dir) / name, text);
  if (tokenizer.files.count("generation_config.json")) return;
  nlohmann::json generation = nlohmann::json::object();
  if (tokenizer.bos_token_id >= 0) generation["bos_token_id"] = tokenizer.bos_token_id;
  if (tokenizer.eos_token_id >= 0) generation["eos_token_id"] = tokenizer.eos_token_id;
  if (!generation.empty())
    write_whole_file(fs::path(dir) / "generation_config.json", generation.dump(2) + "\n");
}

std::vector<std::string> copy_tokenizer_files(const std::string& from_dir,
                                              const std::string& to_dir) {
  std::vector<std::string> copied;
  for (const std::string& name : tokenizer_file_names()) {
    const fs::path from = fs::path(from_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(from, ec)) continue;
    std::ifstream in(from, std::ios::binary);
    ZT_CHECK(in.is_open(), "cannot open tokenizer file '" + from.string() + "'");
    std::ostringstream text;
    text << in.rdbuf();
    ZT_CHECK(!in.bad(), "cannot read tokenizer file '" + from.string() + "'");
    write_whole_file(fs::path(to_dir) / name, text.str());
    copied.push_back(name);
  }
  return copied;
}

}  // namespace zt
