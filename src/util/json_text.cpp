#include "util/json_text.h"

namespace zt {

std::string quoted_json(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 200;
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

}  // namespace zt
