// What the DeepSpeed config tests share: the error text of a parse, and a substring check.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "app/deepspeed_config.h"
#include "model/config.h"
#include "util/error.h"

namespace zt::deepspeed_test {

// The zt::Error message of parsing `j` as "ds.json", or "" when it parses.
inline std::string parse_error(const nlohmann::json& j,
                               const ModelConfig& model = preset_config("tiny")) {
  try {
    parse_deepspeed_config(j, "ds.json", model);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace zt::deepspeed_test
