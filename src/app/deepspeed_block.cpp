#include "app/deepspeed_block.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "util/closest_name.h"
#include "util/error.h"

namespace zt {

using nlohmann::json;

DeepSpeedBlock::DeepSpeedBlock(const json& object, std::string path, DeepSpeedConfig& out,
                               std::vector<std::string> valid_keys, UnknownKeys unknown)
    : object_(object), path_(std::move(path)), out_(out), valid_keys_(std::move(valid_keys)) {
  const std::string name = path_.empty() ? "the config" : path_.substr(0, path_.size() - 1);
  ZT_CHECK(object_.is_object(),
           out_.source + ": " + name + " must be a JSON object, got " + object_.dump());
  std::string refused;
  for (const auto& [key, value] : object_.items()) {
    if (std::find(valid_keys_.begin(), valid_keys_.end(), key) != valid_keys_.end()) continue;
    const std::string closest = closest_name(key, valid_keys_);
    const std::string hint =
        closest.empty() ? "" : "; the closest valid key is '" + dotted(closest) + "'";
    if (unknown == UnknownKeys::kWarn) {
      out_.warnings.push_back(out_.source + ": unknown key '" + dotted(key) + "' (ignored" + hint +
                              ")");
    } else {
      refused +=
          (refused.empty() ? "" : "; ") + std::string("unknown key '") + dotted(key) + "'" + hint;
    }
  }
  ZT_CHECK(refused.empty(),
           out_.source + ": " + refused + " (DeepSpeed refuses unknown keys in " + name + ")");
}

const json* DeepSpeedBlock::get(const std::string& key) const {
  ZT_CHECK(std::find(valid_keys_.begin(), valid_keys_.end(), key) != valid_keys_.end(),
           "internal error: '" + dotted(key) + "' is read but not listed as a valid key");
  auto it = object_.find(key);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

bool DeepSpeedBlock::is_auto(const std::string& key) const {
  const json* v = get(key);
  return v && v->is_string() && v->get<std::string>() == "auto";
}

std::optional<int64_t> DeepSpeedBlock::integer(const std::string& key) const {
  const json* v = get(key);
  if (!v || is_auto(key)) return std::nullopt;
  if (v->is_number_unsigned())
    ZT_CHECK(v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX),
             where(key) + " is too large, got " + v->dump());
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) {
    const double d = v->get<double>();
    ZT_CHECK(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18,
             where(key) + " must be an integer, got " + v->dump());
    return static_cast<int64_t>(d);
  }
  fail(where(key) + " must be an integer or \"auto\", got " + v->dump());
}

std::optional<int64_t> DeepSpeedBlock::integer_at_least(const std::string& key, int64_t min) const {
  const std::optional<int64_t> v = integer(key);
  if (v)
    ZT_CHECK(*v >= min, where(key) + (min == 1 ? " must be positive" : " must be >= 0") + ", got " +
                            std::to_string(*v));
  return v;
}

std::optional<double> DeepSpeedBlock::number(const std::string& key) const {
  const json* v = get(key);
  if (!v || is_auto(key)) return std::nullopt;
  ZT_CHECK(v->is_number(), where(key) + " must be a number or \"auto\", got " + v->dump());
  return v->get<double>();
}

std::optional<bool> DeepSpeedBlock::boolean(const std::string& key) const {
  const json* v = get(key);
  // null is neither: DeepSpeed would read it as false, which a switch should not be silently.
  const auto present = object_.find(key);
  ZT_CHECK(present == object_.end() || !present->is_null(),
           where(key) + " must be true or false, got null");
  if (!v || is_auto(key)) return std::nullopt;
  ZT_CHECK(v->is_boolean(), where(key) + " must be true or false, got " + v->dump());
  return v->get<bool>();
}

std::optional<std::string> DeepSpeedBlock::string(const std::string& key) const {
  const json* v = get(key);
  if (!v) return std::nullopt;
  ZT_CHECK(v->is_string(), where(key) + " must be a string, got " + v->dump());
  return v->get<std::string>();
}

std::string DeepSpeedBlock::either(std::initializer_list<const char*> names) const {
  std::string found;
  for (const char* name : names) {
    if (!has(name)) continue;
    ZT_CHECK(found.empty(), out_.source + ": both '" + dotted(found) + "' and '" + dotted(name) +
                                "' are given; they are the same setting");
    found = name;
  }
  return found.empty() ? *names.begin() : found;
}

void DeepSpeedBlock::refuse_unless_default(const std::string& key, const json& deepspeed_default,
                                           const std::string& why) const {
  const json* v = get(key);
  ZT_CHECK(!v || *v == deepspeed_default, where(key) + " = " + (v ? v->dump() : "") + ": " + why +
                                              " is not implemented (only DeepSpeed's default " +
                                              deepspeed_default.dump() + " is accepted)");
}

void DeepSpeedBlock::warn_unless_default(const std::string& key, const json& deepspeed_default,
                                         const std::string& why) {
  const json* v = get(key);
  if (v && *v != deepspeed_default) warn(key, v->dump() + " has no effect: " + why + " (ignored)");
}

void DeepSpeedBlock::warn(const std::string& key, const std::string& what) {
  out_.warnings.push_back(where(key) + ": " + what);
}

}  // namespace zt
