// One value of a Hugging Face config.json, read for model/hf_config.cpp and its rope half: a
// missing key or a value of the wrong type is refused naming the file and the key.
#pragma once
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace zt {

template <typename T>
T required_key(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key)) fail(source + ": missing required key '" + key + "'");
  // A count must be an integer: 64.5 is refused, not truncated to 64.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    ZT_CHECK(j.at(key).is_number_integer(),
             source + ": key '" + key + "' must be an integer, got " + j.at(key).dump(-1));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(source + ": key '" + key + "' has the wrong type");
  }
}

}  // namespace zt
