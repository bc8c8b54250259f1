// The published config.json files of tests/data/hf_models (sources in its SOURCES.md), read as
// `import --strict-config` reads them, and the error a file gets with one key changed: shared by
// the families' config tests.
#pragma once
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "support/error_text.h"

namespace zt {

// tests/data/hf_models/<directory>/config.json.
inline nlohmann::json published_config(const std::string& directory) {
  std::ifstream in(std::string(ZT_SOURCE_DIR) + "/tests/data/hf_models/" + directory +
                   "/config.json");
  return nlohmann::json::parse(in);
}

inline ModelConfig read_strict(const nlohmann::json& j, const std::string& source) {
  return ModelConfig::from_hf_json(j, source, UnknownConfigKeys::kRefuse);
}

// The message read_strict throws for `file` with `key` set to `value` ("" when it reads).
inline std::string error_with_key(nlohmann::json file, const std::string& key,
                                  const nlohmann::json& value, const std::string& source) {
  file[key] = value;
  return error_of([&] { read_strict(file, source); });
}

}  // namespace zt
