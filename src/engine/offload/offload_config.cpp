#include "engine/offload/offload_config.h"

#include "engine/stage_traits.h"
#include "util/error.h"
#include "util/word_choice.h"

namespace zt {

namespace {

constexpr WordChoice<OffloadDevice> kOffloadDeviceWords[] = {
    {OffloadDevice::kNone, "none"}, {OffloadDevice::kCpu, "cpu"}, {OffloadDevice::kNvme, "nvme"}};

}  // namespace

OffloadDevice parse_offload_device(const std::string& s, const std::string& what) {
  return parse_word(s, kOffloadDeviceWords, what);
}

const char* offload_device_name(OffloadDevice d) {
  return word_of(d, kOffloadDeviceWords);
}

void OffloadConfig::validate(int stage) const {
  const StageTraits traits = StageTraits::of(stage);
  // Named as both: the command-line option and the DeepSpeed key it maps.
  const std::string opt = "--offload-optimizer (zero_optimization.offload_optimizer.device)";
  const std::string par = "--offload-param (zero_optimization.offload_param.device)";
  // The offloaded optimizer updates a shard; offloaded parameters are gathered shards.
  ZT_CHECK(!optimizer_offloaded() || traits.shard_optimizer,
           opt + " '" + offload_device_name(optimizer) + "' needs ZeRO stage 1, 2 or 3 (stage is " +
               std::to_string(stage) + ")");
  ZT_CHECK(!param_offloaded() || traits.shard_parameters, par + " '" + offload_device_name(param) +
                                                              "' needs ZeRO stage 3 (stage is " +
                                                              std::to_string(stage) + ")");
  ZT_CHECK(param != OffloadDevice::kNvme,
           par + " 'nvme' is not implemented (parameters offload to cpu only)");
  ZT_CHECK(sub_group_size >= 1,
           "--sub-group-size (zero_optimization.sub_group_size) must be >= 1, got " +
               std::to_string(sub_group_size));
  const std::string delay_opt = "--offload-optimizer-delay";
  ZT_CHECK(delay == 0 || delay == 1,
           delay_opt + " must be 0 or 1 (steps the update lags), got " + std::to_string(delay));
  ZT_CHECK(delay_after >= 0,
           "--offload-optimizer-delay-after must be >= 0, got " + std::to_string(delay_after));
  ZT_CHECK(delay == 0 || (optimizer != OffloadDevice::kNvme && !param_offloaded()),
           delay_opt + " 1 runs with --offload-optimizer cpu or none, without --offload-param");
  ZT_CHECK(!bf16_gradient_copies || optimizer_offloaded(),
           "--offload-gradient-copies bf16 needs --offload-optimizer cpu or nvme: it is the dtype "
           "the gradient shards cross to the host in");
  if (optimizer == OffloadDevice::kNvme) {
    ZT_CHECK(!nvme_path.empty(),
             opt + " 'nvme' needs --nvme-path (zero_optimization.offload_optimizer.nvme_path)");
    ZT_CHECK(buffer_count >= 2,
             "--offload-buffer-count (zero_optimization.offload_optimizer.buffer_count) must be "
             ">= 2 for nvme, got " +
                 std::to_string(buffer_count));
  }
}

}  // namespace zt
