// A JSON value quoted in a message: compact, invalid UTF-8 replaced, and cut to a bounded length,
// since a value can be a whole nested document.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

std::string quoted_json(const nlohmann::json& value);

}  // namespace zt
