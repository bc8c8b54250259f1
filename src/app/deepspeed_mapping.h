// What a DeepSpeed JSON config (`--deepspeed FILE`) maps onto: the keys' values as zerotrain
// option values, and the settings that have no option of their own. app/deepspeed_config.h reads
// a file into it; app/deepspeed_block.h is the typed reader of one block of the file.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zt {

// zero_optimization.offload_optimizer / offload_param.
struct OffloadSettings {
  std::string device = "none";  // none | cpu | nvme
  std::string nvme_path;
  bool pin_memory = false;
  int64_t buffer_count = 0;  // 0: not given
  bool fast_init = false;
  bool enabled() const { return device != "none"; }
};

// One JSON key's value given to one zerotrain option.
struct MappedOption {
  std::string key;     // dotted JSON path, "optimizer.params.lr"
  std::string option;  // long option name, "lr"
  std::string value;
};

struct DeepSpeedConfig {
  std::string source;
  std::string sha256;  // of the file's bytes (load_deepspeed_config)
  // In file order; "auto" values already resolved or left out.
  std::vector<MappedOption> options;
  std::optional<int64_t> train_batch_size;
  std::optional<double> cos_min_ratio;     // WarmupCosineLR: min-lr = ratio × lr
  std::optional<double> warmup_min_ratio;  // WarmupCosineLR: warmup-start-lr = ratio × lr
  OffloadSettings offload_optimizer, offload_param;
  bool contiguous_gradients = true;                // accepted; buckets are always contiguous
  bool gather_16bit_weights_on_model_save = true;  // accepted; the final model is always bf16
  int64_t sub_group_size = 0;                      // accepted; the optimizer steps per group
  std::vector<std::string> warnings;  // unknown top-level keys, inexact mappings, the precision

  // The value mapped onto `option`, if any (the last one mapped).
  std::optional<std::string> option(const std::string& name) const {
    std::optional<std::string> value;
    for (const MappedOption& o : options)
      if (o.option == name) value = o.value;
    return value;
  }
};

}  // namespace zt
