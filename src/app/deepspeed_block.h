// One JSON object of a DeepSpeed config at a dotted path ("zero_optimization.offload_param."),
// read with typed getters whose errors name "FILE: path.key". Each block is opened with every key
// DeepSpeed itself accepts there; a key outside that list is refused, naming it and the closest
// valid key (DeepSpeed's pydantic blocks forbid extra keys and its optimizer and scheduler
// parameters are constructor keywords), or, for the blocks DeepSpeed reads leniently (the top
// level, activation_checkpointing), a warning. docs/deepspeed.md's table lists the mapping.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/deepspeed_mapping.h"

namespace zt {

enum class UnknownKeys { kRefuse, kWarn };

class DeepSpeedBlock {
 public:
  // Throws (kRefuse) or records warnings (kWarn) for keys of `object` outside `valid_keys`.
  DeepSpeedBlock(const nlohmann::json& object, std::string path, DeepSpeedConfig& out,
                 std::vector<std::string> valid_keys, UnknownKeys unknown);
  DeepSpeedBlock(const DeepSpeedBlock&) = delete;
  DeepSpeedBlock& operator=(const DeepSpeedBlock&) = delete;

  std::string dotted(const std::string& key) const { return path_ + key; }
  std::string where(const std::string& key) const { return out_.source + ": " + dotted(key); }
  const std::string& path() const { return path_; }
  DeepSpeedConfig& config() { return out_; }

  // The value, or nullptr when absent or null. `key` must be one of the block's valid keys.
  const nlohmann::json* get(const std::string& key) const;
  bool has(const std::string& key) const { return get(key) != nullptr; }
  bool is_auto(const std::string& key) const;
  // Accepts integers and integral floats (5e8); nullopt when absent or "auto".
  std::optional<int64_t> integer(const std::string& key) const;
  std::optional<int64_t> integer_at_least(const std::string& key, int64_t min) const;
  std::optional<double> number(const std::string& key) const;
  std::optional<bool> boolean(const std::string& key) const;
  std::optional<std::string> string(const std::string& key) const;

  // The first of `names` present (DeepSpeed's field name and its alias, e.g.
  // prefetch_bucket_size and stage3_prefetch_bucket_size); both present is an error.
  std::string either(std::initializer_list<const char*> names) const;

  // A key zerotrain does not implement whose value changes the training unless it equals
  // DeepSpeed's default: refused naming the key, the value and the default.
  void refuse_unless_default(const std::string& key, const nlohmann::json& deepspeed_default,
                             const std::string& why) const;
  // A key without effect here: a warning when its value differs from DeepSpeed's default.
  void warn_unless_default(const std::string& key, const nlohmann::json& deepspeed_default,
                           const std::string& why);
  void warn(const std::string& key, const std::string& what);

 private:
  const nlohmann::json& object_;
  std::string path_;
  DeepSpeedConfig& out_;
  std::vector<std::string> valid_keys_;
};

}  // namespace zt
