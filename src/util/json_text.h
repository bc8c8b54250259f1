// JSON as zerotrain reads and quotes it. Every parse is bounded in depth: no configuration anyone
// writes nests 256 levels, and a hostile document nested 100,000 deep would overflow the stack of
// any recursive walk over it (dumping a value into an error message, say). A quoted value is
// compact, invalid UTF-8 replaced, and cut to a bounded length.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

struct JsonParseOptions {
  // Comments as hjson (which DeepSpeed reads its configs with) allows them: `#` and `//` to the
  // end of the line, `/* ... */`; and a comma before a closing `}` or `]`.
  bool hjson_comments = false;
  // A key twice in one object is refused (DeepSpeed's loader refuses it; JSON readers disagree
  // on which value wins).
  bool reject_duplicate_keys = false;
  int max_depth = 256;
};

// Parses `text`; errors (invalid JSON, too deep, a duplicate key) name `where`.
nlohmann::json parse_json(const std::string& text, const std::string& where,
                          const JsonParseOptions& options = {});

std::string quoted_json(const nlohmann::json& value);

}  // namespace zt
