#include "util/json_text.h"

#include <set>
#include <vector>

#include "util/error.h"

namespace zt {

namespace {

// hjson's comments and trailing commas blanked out (replaced by spaces, so that the parser's
// byte offsets still point into the original text); strings are left alone.
std::string without_hjson_extras(const std::string& text) {
  std::string out = text;
  bool in_string = false;
  size_t last_comma = std::string::npos;  // a comma with only blanks after it so far
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '#' || (c == '/' && i + 1 < out.size() && out[i + 1] == '/')) {
      while (i < out.size() && out[i] != '\n') out[i++] = ' ';
      continue;
    }
    if (c == '/' && i + 1 < out.size() && out[i + 1] == '*') {
      const size_t end = out.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? out.size() : end + 2;
      for (; i < stop; ++i)
        if (out[i] != '\n') out[i] = ' ';
      --i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      last_comma = std::string::npos;
    } else if (c == ',') {
      last_comma = i;
    } else if ((c == '}' || c == ']') && last_comma != std::string::npos) {
      out[last_comma] = ' ';
      last_comma = std::string::npos;
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      last_comma = std::string::npos;
    }
  }
  return out;
}

}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& where,
                          const JsonParseOptions& options) {
  std::vector<std::set<std::string>> keys;  // the keys of each open object
  const auto check = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (depth > options.max_depth)
      fail(where + ": JSON nested deeper than " + std::to_string(options.max_depth) + " levels");
    if (!options.reject_duplicate_keys) return true;
    if (event == Event::object_start) keys.emplace_back();
    if (event == Event::object_end && !keys.empty()) keys.pop_back();
    if (event == Event::key && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second)
      fail(where + ": key '" + parsed.get<std::string>() +
           "' appears twice in one object (which one counts is ambiguous)");
    return true;
  };
  try {
    return nlohmann::json::parse(options.hjson_comments ? without_hjson_extras(text) : text, check,
                                 /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    fail(where + ": invalid JSON: " + e.what());
  }
}

std::string quoted_json(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 200;
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

}  // namespace zt
