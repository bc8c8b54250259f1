// OffloadConfig::validate: every refused combination names the DeepSpeed key and train's option,
// whichever of the two the user wrote; the valid ones pass.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "app/run_setup.h"
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

// --offload-optimizer-overlap: auto and on speculate (auto with a limit train sets), off does not,
// anything else is refused naming the option; NVMe and the delayed steps never speculate.
// The offload options as add_offload_options reads `args`.
OffloadOptions parsed_offload_options(std::vector<std::string> args) {
  po::options_description options;
  OffloadOptions o;
  add_offload_options(options, o);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  return o;
}

// --offload-gradient-copies: auto is bf16 where the copies cross a bus (a GPU backend) and the
// working params are 16-bit (bf16 or fp16), with optimizer offload; bf16 and fp32 are what they
// say; anything else, and bf16 without optimizer offload, is refused naming the option.
TEST(OffloadConfig, GradientCopies) {
  const auto bf16_copies = [](std::vector<std::string> args, BackendKind backend,
                              Precision precision) {
    return parsed_offload_options(std::move(args))
        .resolved(backend, precision)
        .bf16_gradient_copies;
  };
  const std::vector<std::string> cpu = {"--offload-optimizer", "cpu"};
  EXPECT_EQ(parsed_offload_options({}).gradient_copies, "auto");
  EXPECT_TRUE(bf16_copies(cpu, BackendKind::kCuda, Precision::kBf16));
  EXPECT_TRUE(bf16_copies(cpu, BackendKind::kCuda, Precision::kFp16));
  EXPECT_FALSE(bf16_copies(cpu, BackendKind::kCuda, Precision::kFp32));
  EXPECT_FALSE(bf16_copies(cpu, BackendKind::kCpu, Precision::kBf16));
  EXPECT_FALSE(bf16_copies({}, BackendKind::kCuda, Precision::kBf16));  // no optimizer offload
  EXPECT_TRUE(bf16_copies({"--offload-optimizer", "nvme", "--offload-gradient-copies", "bf16"},
                          BackendKind::kCpu, Precision::kFp16));
  EXPECT_FALSE(bf16_copies({"--offload-optimizer", "cpu", "--offload-gradient-copies", "fp32"},
                           BackendKind::kCuda, Precision::kBf16));
  // The error `run` throws names `message`.
  const auto expect_refused = [](const std::function<void()>& run, const std::string& message) {
    try {
      run();
      ADD_FAILURE() << "accepted; wanted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_refused(
      [&] {
        bf16_copies({"--offload-gradient-copies", "fp8"}, BackendKind::kCuda, Precision::kBf16);
      },
      "--offload-gradient-copies must be auto, bf16 or fp32, got 'fp8'");
  const OffloadConfig c = parsed_offload_options({"--offload-gradient-copies", "bf16"})
                              .resolved(BackendKind::kCuda, Precision::kBf16);
  EXPECT_TRUE(c.bf16_gradient_copies);
  expect_refused([&] { c.validate(2); },
                 "--offload-gradient-copies bf16 needs --offload-optimizer cpu or nvme");
}

TEST(OffloadConfig, OverlapModes) {
  EXPECT_EQ(parsed_offload_options({}).overlap, AutoSwitch::kAuto);
  for (const char* mode : {"auto", "on", "off"}) {
    const OffloadOptions o =
        parsed_offload_options({"--offload-optimizer", "cpu", "--offload-optimizer-overlap", mode});
    EXPECT_EQ(o.config.optimizer, OffloadDevice::kCpu);
    const OffloadConfig c = o.resolved(BackendKind::kCpu, Precision::kBf16);
    EXPECT_EQ(c.keeps_speculated_state(), std::string(mode) != "off") << mode;
    EXPECT_EQ(c.overlap_bytes, -1) << mode;
  }
  for (const auto& [option, message] : std::vector<std::pair<std::string, std::string>>{
           {"--offload-optimizer-overlap", "--offload-optimizer-overlap must be auto, on or off"},
           {"--offload-optimizer", "--offload-optimizer must be none, cpu or nvme"},
           {"--offload-param", "--offload-param must be none, cpu or nvme"}}) {
    try {
      parsed_offload_options({option, "yes"});
      ADD_FAILURE() << option << " yes was accepted";
    } catch (const po::error& e) {
      EXPECT_NE(std::string(e.what()).find(message + ", got 'yes'"), std::string::npos) << e.what();
    }
  }
  // Settings that would be read past are refused, naming what they need.
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--offload-optimizer-overlap", "on"},
            "needs --offload-optimizer cpu: the overlap runs the host's AdamW during the backward "
            "(the optimizer is 'none')"},
           {{"--offload-optimizer", "nvme", "--offload-optimizer-overlap", "on"},
            "(the optimizer is 'nvme')"},
           {{"--offload-optimizer", "cpu", "--offload-optimizer-delay-after", "3"},
            "--offload-optimizer-delay-after 3 applies to --offload-optimizer-delay 1 (the delay "
            "is 0)"}}) {
    try {
      parsed_offload_options(args).resolved(BackendKind::kCpu, Precision::kBf16);
      ADD_FAILURE() << args.back() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parsed_offload_options({"--offload-optimizer", "cpu", "--offload-optimizer-delay", "1",
                                    "--offload-optimizer-delay-after", "3"})
                .resolved(BackendKind::kCpu, Precision::kBf16)
                .delay_after,
            3);
  EXPECT_FALSE(parsed_offload_options({"--offload-optimizer-overlap", "off"})
                   .resolved(BackendKind::kCpu, Precision::kBf16)
                   .overlap);
  OffloadConfig nvme;
  nvme.optimizer = OffloadDevice::kNvme;
  EXPECT_FALSE(nvme.keeps_speculated_state());
  OffloadConfig delayed;
  delayed.optimizer = OffloadDevice::kCpu;
  delayed.delay = 1;
  delayed.delay_after = 3;
  EXPECT_TRUE(delayed.overlapped(3));
  EXPECT_FALSE(delayed.overlapped(4));
}

// auto's limit: half of what MemAvailable leaves beyond the planned host pool, per local rank.
TEST(OffloadConfig, AutoOverlapBytesLeaveHalfTheFreeHostMemory) {
  const int64_t all = auto_overlap_bytes(0, 1);
  EXPECT_GT(all, 0) << "this machine's /proc/meminfo has MemAvailable";
  EXPECT_EQ(auto_overlap_bytes(int64_t{1} << 60, 1), 0);  // a plan larger than the host
  // Two ranks on the host: each gets at most half (MemAvailable moves between the readings).
  EXPECT_LT(auto_overlap_bytes(0, 2), all);
  EXPECT_EQ(auto_overlap_bytes(0, 0), 0);
  // A delayed update from step 1 never overlaps: no state is kept for it.
  OffloadConfig every_step_delayed;
  every_step_delayed.optimizer = OffloadDevice::kCpu;
  every_step_delayed.delay = 1;
  every_step_delayed.delay_after = 0;
  EXPECT_FALSE(every_step_delayed.keeps_speculated_state());
}

}  // namespace
}  // namespace zt
