// OffloadConfig::validate: every refused combination names the DeepSpeed key and train's option,
// whichever of the two the user wrote; the valid ones pass.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/offload/offload_config.h"
#include "util/error.h"

namespace zt {
namespace {

struct RefusedCase {
  const char* what;
  OffloadConfig config;
  int stage;
  std::vector<std::string> named;  // substrings the message must hold
};

TEST(OffloadConfig, RefusalsNameTheDeepSpeedKeyAndTheOption) {
  OffloadConfig cpu_optimizer, cpu_param, nvme_param, nvme_no_path, nvme_one_buffer, no_tiles;
  cpu_optimizer.optimizer = OffloadDevice::kCpu;
  cpu_param.param = OffloadDevice::kCpu;
  nvme_param.param = OffloadDevice::kNvme;
  nvme_no_path.optimizer = OffloadDevice::kNvme;
  nvme_one_buffer = nvme_no_path;
  nvme_one_buffer.nvme_path = "/tmp";
  nvme_one_buffer.buffer_count = 1;
  no_tiles.sub_group_size = 0;
  OffloadConfig delay_two = cpu_optimizer, delay_negative_warmup = cpu_optimizer;
  delay_two.delay = 2;
  delay_negative_warmup.delay = 1;
  delay_negative_warmup.delay_after = -1;
  OffloadConfig delay_nvme = nvme_one_buffer, delay_param = cpu_param;
  delay_nvme.buffer_count = 2;
  delay_nvme.delay = 1;
  delay_param.delay = 1;
  const std::vector<RefusedCase> cases = {
      {"optimizer offload at stage 0",
       cpu_optimizer,
       0,
       {"zero_optimization.offload_optimizer.device", "--offload-optimizer", "stage is 0"}},
      {"param offload at stage 2",
       cpu_param,
       2,
       {"zero_optimization.offload_param.device", "--offload-param", "needs ZeRO stage 3"}},
      {"param offload to nvme", nvme_param, 3, {"--offload-param", "'nvme' is not implemented"}},
      {"nvme without a path", nvme_no_path, 2, {"nvme_path", "--nvme-path"}},
      {"one nvme buffer", nvme_one_buffer, 2, {"buffer_count", "--offload-buffer-count", "got 1"}},
      {"no optimizer tile", no_tiles, 1, {"sub_group_size", "--sub-group-size", "got 0"}},
      {"a delay of 2", delay_two, 1, {"--offload-optimizer-delay", "0 or 1", "got 2"}},
      {"a negative warm-up", delay_negative_warmup, 1, {"--offload-optimizer-delay-after", "-1"}},
      {"delay with nvme", delay_nvme, 2, {"--offload-optimizer-delay", "cpu or none"}},
      {"delay with param offload",
       delay_param,
       3,
       {"--offload-optimizer-delay", "--offload-param"}},
  };
  for (const RefusedCase& c : cases) {
    try {
      c.config.validate(c.stage);
      ADD_FAILURE() << c.what << ": accepted";
    } catch (const Error& e) {
      for (const std::string& part : c.named)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << c.what << ": " << e.what() << " does not name " << part;
    }
  }
  EXPECT_NO_THROW(cpu_optimizer.validate(1));
  EXPECT_NO_THROW(cpu_param.validate(3));
  OffloadConfig nvme = nvme_one_buffer;
  nvme.buffer_count = 2;
  EXPECT_NO_THROW(nvme.validate(3));
  OffloadConfig delayed = cpu_optimizer, delayed_without_offload;
  delayed.delay = delayed_without_offload.delay = 1;
  EXPECT_NO_THROW(delayed.validate(1));
  EXPECT_NO_THROW(delayed_without_offload.validate(0));
}

}  // namespace
}  // namespace zt
