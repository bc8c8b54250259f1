// The memory plan (engine/engine_memory_plan.h) against what a ZeroEngine really allocates, at the
// world size the binary runs with: every stage × offload mode (none, a delayed update, optimizer
// on cpu, on cpu with a delayed update and bf16 gradient copies, on nvme, params on cpu, optimizer
// and params on cpu with bf16 gradient copies) × activation checkpointing (none, full, every
// second layer, full to the host, selective) × precision and activation storage (fp32; bf16 with
// fp32 or bf16 activations; fp16 with fp16 activations) the engine suites run, on the tiny preset,
// alternately with tied embeddings, LoRA adapters and world-invariant training. Each category
// holds what the plan says once the engine is built (its kRun buffers), and peaks at what the plan
// says over two steps, to the byte.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/estimator.h"
#include "engine_test_support.h"
#include "shared_dir_test.h"

namespace zt {
namespace {

using engine_test::EngineOptions;
using engine_test::TestEngine;

class EstimatorMemoryPlan : public engine_test::SharedDirTest {
 protected:
  const char* dir_prefix() const override { return "zt_memory_plan_"; }
};

// The offload modes of a stage, by name (engine/offload/offload_config.h).
std::vector<std::pair<std::string, OffloadConfig>> offloads(int stage, const OffloadConfig& nvme) {
  OffloadConfig delayed, cpu, cpu_delayed, params, both;
  delayed.delay = 1;
  delayed.delay_after = 0;  // both steps held back
  cpu.optimizer = OffloadDevice::kCpu;
  cpu.sub_group_size = 700;  // several tiles per group
  cpu_delayed = cpu;
  cpu_delayed.delay = 1;
  cpu_delayed.delay_after = 1;              // step 1 overlapped (its kept state), step 2 held back
  cpu_delayed.bf16_gradient_copies = true;  // the device staging, bf16 host and pending shards
  params.param = OffloadDevice::kCpu;
  both = cpu;
  both.param = OffloadDevice::kCpu;
  both.bf16_gradient_copies = true;
  std::vector<std::pair<std::string, OffloadConfig>> modes = {{"no offload", {}},
                                                              {"delayed update", delayed}};
  if (stage == 0) return modes;
  modes.push_back({"cpu optimizer", cpu});
  modes.push_back({"cpu optimizer, delayed update, bf16 gradient copies", cpu_delayed});
  modes.push_back({"nvme optimizer", nvme});
  if (stage != 3) return modes;
  modes.push_back({"cpu params", params});  // the device AdamW's update tile
  modes.push_back({"cpu optimizer + params, bf16 gradient copies", both});
  return modes;
}

std::vector<std::pair<std::string, EngineOptions>> checkpointing(EngineOptions base) {
  EngineOptions full = base, every2 = base, host = base, selective = base;
  full.ckpt_every = host.ckpt_every = 1;
  every2.ckpt_every = 2;
  host.ckpt_on_host = true;
  selective.ckpt_selective = true;
  return {{"no checkpointing", base},
          {"full checkpointing", full},
          {"every:2 checkpointing", every2},
          {"checkpointing to host", host},
          {"selective checkpointing", selective}};
}

// Every category of `memory` against `plan`: `at_rest` (after construction) or the peaks.
void expect_categories(const MemoryPlan& plan, const MemoryTracker& memory, bool at_rest,
                       const std::string& what) {
  for (int c = 0; c < kNumMemCategories; ++c) {
    const auto category = static_cast<MemCategory>(c);
    const int64_t planned = at_rest ? plan.at_rest(category) : plan.peak(category);
    const auto held =
        static_cast<int64_t>(at_rest ? memory.current(category) : memory.peak(category));
    EXPECT_EQ(planned, held) << what << ": " << mem_category_name(category)
                             << (at_rest ? " once built" : " at its peak") << "; the plan:\n"
                             << plan.describe();
  }
}

TEST_F(EstimatorMemoryPlan, EveryCombinationAllocatesItsPlanExactly) {
  const int N = world_.world_size();
  int combination = 0, trained = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const auto& [precision, activations] :
         std::vector<std::pair<Precision, DType>>{{Precision::kFp32, DType::kFloat32},
                                                  {Precision::kBf16, DType::kFloat32},
                                                  {Precision::kBf16, DType::kBf16},
                                                  {Precision::kFp16, DType::kFloat16}}) {
      for (const auto& [offload_name, offload] : offloads(stage, nvme_offload(2, 700))) {
        EngineOptions o;
        o.stage = stage;
        o.precision = precision;
        o.activations = activations;
        o.offload = offload;
        o.bucket = 5'000;  // packing buckets, chunked param all-gathers
        o.overlap = stage % 2 == 0;
        for (auto [ckpt_name, c] : checkpointing(o)) {
          ++combination;
          c.tied = combination % 2 == 0;
          if (combination % 3 == 0) {
            c.lora.rank = 4;
            c.lora.alpha = 8;
            c.lora.set_targets({"all-linear"}, "test");
            c.lora.fit_to_model({}, "llama");
          }
          // World-invariant training: a micro-batch tree of two leaves (no offload there).
          c.world_invariant =
              combination % 5 == 0 && !offload.optimizer_offloaded() && offload.delay == 0;
          c.accum = c.world_invariant ? 2 : 1;
          const std::string what =
              "N=" + std::to_string(N) + " stage " + std::to_string(stage) + " " +
              precision_name(precision) + " (" + dtype_name(activations) + " activations), " +
              offload_name + ", " + ckpt_name + (c.tied ? ", tied" : "") +
              (c.lora.rank > 0 ? ", lora" : "") + (c.world_invariant ? ", world-invariant" : "");
          TestEngine t(world_, c);
          const MemoryPlan& plan = t.engine().memory_plan();
          expect_categories(plan, t.memory(), /*at_rest=*/true, what);
          t.init();
          for (int64_t step = 1; step <= 2; ++step) t.step(step, c.accum, 1e-3f);
          expect_categories(plan, t.memory(), /*at_rest=*/false, what);
          ++trained;
        }
      }
    }
  }
  // Offload modes 2 + 5 + 5 + 7, each at 4 precisions × 5 checkpointing policies.
  EXPECT_EQ(trained, (2 + 5 + 5 + 7) * 4 * 5);
}

}  // namespace
}  // namespace zt
