// Estimator arithmetic (engine/estimator.h): docs/ARCHITECTURE.md §4's theory rows on the 6b
// preset, the estimate's model states against them, and the "lowest stage that fits" decision tree.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device_arena_plan.h"
#include "engine/engine_memory_plan.h"
#include "engine/estimator.h"
#include "engine/memory_plan.h"
#include "model/layout.h"
#include "support/engine_spec_for.h"
#include "test_train_support.h"
#include "util/error.h"

namespace zt {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

class EstimatorSixB : public ::testing::Test {
 protected:
  const ModelConfig model_ = preset_config("6b");
  const int64_t psi_ = ParamLayout(model_).total_numel();
  MemoryEstimate estimate(int world, int stage, int ckpt_every = 0,
                          const OffloadConfig& offload = {}) const {
    ZeroConfig z;
    z.stage = stage;
    ActivationCheckpointing ac;
    ac.every = ckpt_every;
    EngineSpec spec = engine_spec_for(model_, z, 1, 2048);
    spec.ac = ac;
    spec.offload = offload;
    spec.validate(world);  // as a command resolves it: an offload the stage cannot do is refused
    return estimate_memory(spec, world);
  }
};

TEST_F(EstimatorSixB, TheoryRowsAreDesignFormulas) {
  const double p = static_cast<double>(psi_);
  EXPECT_DOUBLE_EQ(theory_model_states_bytes(psi_, 8, 0, Precision::kBf16), 18 * p);
  EXPECT_DOUBLE_EQ(theory_model_states_bytes(psi_, 8, 1, Precision::kBf16), 6 * p + 12 * p / 8);
  EXPECT_DOUBLE_EQ(theory_model_states_bytes(psi_, 8, 2, Precision::kBf16), 2 * p + 16 * p / 8);
  EXPECT_DOUBLE_EQ(theory_model_states_bytes(psi_, 8, 3, Precision::kBf16), 18 * p / 8);
  EXPECT_DOUBLE_EQ(theory_model_states_bytes(psi_, 8, 3, Precision::kFp32), 20 * p / 8);
}

TEST_F(EstimatorSixB, ModelStatesMatchTheoryWithinPadding) {
  for (int world : {1, 8, 64}) {
    for (int stage = 0; stage <= 2; ++stage) {
      const double theory = theory_model_states_bytes(psi_, world, stage, Precision::kBf16);
      const double got = static_cast<double>(estimate(world, stage).model_states());
      // Padding adds < N elements per group (30 groups): far below 1e-6 of Ψ.
      EXPECT_NEAR(got, theory, 1e-6 * theory) << "N " << world << " stage " << stage;
    }
    // Stage 3 also holds the gathered groups (the default bounds keep up to 1e9 elements live).
    const MemoryEstimate s3 = estimate(world, 3);
    const double theory3 = theory_model_states_bytes(psi_, world, 3, Precision::kBf16);
    EXPECT_NEAR(static_cast<double>(s3.model_states() - s3.stage3_gathered), theory3,
                1e-6 * theory3);
    EXPECT_GT(s3.stage3_gathered, 0);
    EXPECT_LE(s3.stage3_gathered,
              int64_t{2} * (1'000'000'000 + 131'072'000));  // live bound + one group
  }
}

// Offload modes against hand-computed bytes for the 6b preset at N = 8, stage 2 and 3.
TEST_F(EstimatorSixB, OffloadMovesStateOutOfTheDevicePool) {
  const int64_t own = (psi_ + 0) / 8;  // Σ own ranges (6b's groups divide by 8 exactly)
  OffloadConfig cpu;
  cpu.optimizer = OffloadDevice::kCpu;
  cpu.sub_group_size = 1'000'000;
  const MemoryEstimate on = estimate(8, 2), off = estimate(8, 2, 0, cpu);
  ASSERT_EQ(on.optimizer, 12 * own);
  // Optimizer offload: master, m, v (12 B) and the fp32 gradient shard (4 B) go to the host,
  // plus two bf16 staging tiles; the device keeps the bf16 params and fp32 grads.
  EXPECT_EQ(off.optimizer, 0);
  // The exact overlap keeps master, m and v once more (on: all of it), or under a limit the
  // whole groups that land first (the head's, then the last layer's, ...) while they fit, each
  // with its speculated bf16 working values (2 B).
  EXPECT_EQ(off.host, on.host + 30 * own + 2 * 2 * cpu.sub_group_size);
  OffloadConfig serial = cpu, limited = cpu, below = cpu;
  serial.overlap = false;
  const int64_t head_own = ParamLayout(model_).groups().back().numel / 8;
  limited.overlap_bytes = 14 * head_own + 12'345;  // the head's state, not the last layer's too
  below.overlap_bytes = 14 * head_own - 1;         // not even the head's: nothing kept
  const int64_t serial_host = on.host + 16 * own + 2 * 2 * cpu.sub_group_size;
  EXPECT_EQ(estimate(8, 2, 0, serial).host, serial_host);
  EXPECT_EQ(estimate(8, 2, 0, limited).host, serial_host + 14 * head_own);
  EXPECT_EQ(estimate(8, 2, 0, below).host, serial_host);
  EXPECT_EQ(off.params, on.params);
  EXPECT_EQ(off.grads, on.grads);
  EXPECT_EQ(off.nvme, 0);

  // NVMe: the 12 B live in the swap file (records of 4 KiB multiples), the host holds the
  // gradient shard, the staging tiles and buffer_count tile records.
  OffloadConfig nvme = cpu;
  nvme.optimizer = OffloadDevice::kNvme;
  nvme.nvme_path = "/unused";
  const MemoryEstimate nv = estimate(8, 2, 0, nvme);
  EXPECT_EQ(nv.optimizer, 0);
  EXPECT_GE(nv.nvme, 12 * own);
  EXPECT_LT(nv.nvme, 12 * own + 4096 * (own / cpu.sub_group_size + 31));
  const int64_t record = (12 * cpu.sub_group_size + 4095) / 4096 * 4096;
  EXPECT_EQ(nv.host, on.host + 4 * own + 2 * 2 * cpu.sub_group_size + nvme.buffer_count * record);

  // Param offload (stage 3): the bf16 shards (2 B of each own element) leave the device pool.
  OffloadConfig all = cpu;
  all.param = OffloadDevice::kCpu;
  const MemoryEstimate s3 = estimate(8, 3, 1, cpu), s3p = estimate(8, 3, 1, all);
  EXPECT_EQ(s3p.params, s3.params - 2 * own);
  EXPECT_EQ(s3p.host, s3.host + 2 * own);
  EXPECT_GT(s3p.buffers, s3.buffers);  // device copies of the shards being gathered
  EXPECT_LT(s3p.device_total(), s3.device_total());

  // Offload where the stage does not allow it is refused, naming the key.
  EXPECT_THROW(estimate(8, 0, 0, cpu), Error);
  EXPECT_THROW(estimate(8, 2, 0, all), Error);
}

TEST_F(EstimatorSixB, DeepSpeedOffloadFigures) {
  const double p = static_cast<double>(psi_);
  const OffloadFigure s2 = deepspeed_offload_figure(model_, 8, 2, 8);
  EXPECT_DOUBLE_EQ(s2.device_bytes, 2 * p);
  EXPECT_DOUBLE_EQ(s2.host_bytes_per_node, p * 32 * 1.5);
  const OffloadFigure s3 = deepspeed_offload_figure(model_, 1, 3, 1, /*params_on_cpu=*/true);
  EXPECT_DOUBLE_EQ(s3.host_bytes_per_node, p * 18 * 1.5);
  EXPECT_LT(s3.device_bytes, deepspeed_offload_figure(model_, 1, 3, 1).device_bytes);
}

TEST_F(EstimatorSixB, CheckpointingShrinksActivations) {
  const MemoryEstimate plain = estimate(8, 3), full = estimate(8, 3, 1), half = estimate(8, 3, 2);
  EXPECT_LT(full.activations, half.activations);
  EXPECT_LT(half.activations, plain.activations);
  EXPECT_EQ(full.model_states(), plain.model_states());
}

TEST_F(EstimatorSixB, RecommendsTheLowestStageThatFits) {
  auto pick = [&](double gib, int world) {
    ZeroConfig z;
    const FitRecommendation r = recommend_configuration(engine_spec_for(model_, z, 1, 2048), world,
                                                        static_cast<int64_t>(gib * kGiB));
    // The chosen candidate is the first that fits; everything before it does not.
    const size_t first = r.chosen < 0 ? r.candidates.size() : static_cast<size_t>(r.chosen);
    for (size_t i = 0; i < first; ++i) EXPECT_FALSE(r.candidates[i].fits) << i;
    if (r.chosen >= 0) {
      EXPECT_TRUE(r.candidates[first].fits);
    }
    return r.chosen < 0 ? std::string("none") : r.candidates[static_cast<size_t>(r.chosen)].label;
  };
  // 6b, N = 8, B = 1, T = 2048: activations without checkpointing are ~15 GiB per rank.
  EXPECT_EQ(pick(4096, 8), "stage 0");  // everything fits (~116 GiB)
  EXPECT_EQ(pick(80, 8), "stage 1");    // 6Ψ + 12Ψ/N ≈ 41 GiB + activations
  EXPECT_EQ(pick(48, 8), "stage 2");    // 2Ψ + 16Ψ/N ≈ 22 GiB + activations
  // Stage 2 needs ~39.2 GiB; selective checkpointing drops 2 [T, D] norm outputs and one [T, F]
  // SwiGLU product per layer but one (~3.9 GiB), full checkpointing ~12.7 GiB.
  EXPECT_EQ(pick(38, 8), "stage 2 + selective checkpointing");                // ~35.2 GiB
  EXPECT_EQ(pick(30, 8), "stage 2 + checkpointing");                          // ~26.5 GiB
  EXPECT_EQ(pick(20, 8), "stage 3 + checkpointing");                          // ~18.7 GiB
  EXPECT_EQ(pick(16, 8), "stage 3 + checkpointing + CPU optimizer offload");  // ~10.6 GiB
  EXPECT_EQ(pick(8, 8), "none");
  // With checkpointing requested, the plain rows use it and the "+ checkpointing" rows without
  // offload drop out; stage 0 is still tried first (it once dropped out with them).
  ZeroConfig z0;
  ActivationCheckpointing full;
  full.every = 1;
  EngineSpec with_full = engine_spec_for(model_, z0, 1, 2048);
  with_full.ac = full;
  const FitRecommendation ckpt = recommend_configuration(with_full, 8, int64_t{4096} * kGiB);
  const char* const labels[] = {"stage 0",
                                "stage 1",
                                "stage 2",
                                "stage 3",
                                "stage 3 + checkpointing + CPU optimizer offload",
                                "stage 3 + checkpointing + CPU optimizer and param offload"};
  ASSERT_EQ(ckpt.candidates.size(), std::size(labels));
  for (size_t i = 0; i < std::size(labels); ++i) {
    EXPECT_EQ(ckpt.candidates[i].label, labels[i]);
    EXPECT_EQ(ckpt.candidates[i].ac.every, 1) << labels[i];  // the requested policy, every row
  }
  EXPECT_EQ(ckpt.chosen, 0);
  // Without one requested, the plain rows have none, the "+ selective" rows selective and the
  // "+ checkpointing" rows full.
  const FitRecommendation plain =
      recommend_configuration(engine_spec_for(model_, z0, 1, 2048), 8, int64_t{4096} * kGiB);
  ASSERT_EQ(plain.candidates.size(), 10u);
  for (const FitCandidate& c : plain.candidates) {
    const bool selective = c.label.find("selective") != std::string::npos;
    EXPECT_EQ(c.ac.selective, selective) << c.label;
    EXPECT_EQ(c.ac.every, selective || c.label.find("checkpointing") == std::string::npos ? 0 : 1)
        << c.label;
  }
  // A selective policy requested: every row keeps it, as with full.
  ActivationCheckpointing selective;
  selective.selective = true;
  EngineSpec with_selective = engine_spec_for(model_, z0, 1, 2048);
  with_selective.ac = selective;
  const FitRecommendation kept = recommend_configuration(with_selective, 8, int64_t{4096} * kGiB);
  ASSERT_EQ(kept.candidates.size(), std::size(labels));
  for (const FitCandidate& c : kept.candidates) EXPECT_TRUE(c.ac.selective) << c.label;
  // Larger devices never need a higher rung.
  ZeroConfig z;
  int last = 1 << 30;
  for (double gib : {8.0, 16.0, 24.0, 40.0, 80.0, 141.0, 400.0}) {
    const FitRecommendation r = recommend_configuration(engine_spec_for(model_, z, 1, 2048), 8,
                                                        static_cast<int64_t>(gib * kGiB));
    const int rung = r.chosen < 0 ? 1 << 30 : r.chosen;
    EXPECT_LE(rung, last) << gib << " GiB";
    last = rung;
  }
  // Every candidate is estimated at the run's gradient accumulation: the step's per-token
  // losses (4 bytes each) stay on the device for all its micro-batches.
  EngineSpec accum = engine_spec_for(model_, z, 1, 2048);
  const FitRecommendation one = recommend_configuration(accum, 8, int64_t{80} * kGiB);
  accum.grad_accum = 64;
  const FitRecommendation many = recommend_configuration(accum, 8, int64_t{80} * kGiB);
  ASSERT_EQ(one.candidates.size(), many.candidates.size());
  for (size_t i = 0; i < one.candidates.size(); ++i)
    EXPECT_EQ(many.candidates[i].estimate.buffers - one.candidates[i].estimate.buffers,
              63 * 2048 * 4)
        << one.candidates[i].label;
}

// `zerotrain estimate` with offload flags: the JSON rows carry the host and nvme pools of the
// estimator, and an offload the requested stage cannot do is an error naming the key.
TEST(EstimateCommand, OffloadFlagsReachTheRowsAndBadStagesAreRefused) {
  const auto r = train_test::run_zerotrain(
      "estimate --preset tiny --world 2 --zero-stage 2 --offload-optimizer nvme "
      "--sub-group-size 5000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("offload_optimizer"), "nvme");
  OffloadConfig nvme;
  nvme.optimizer = OffloadDevice::kNvme;
  nvme.nvme_path = "/unused";
  nvme.sub_group_size = 5000;
  ZeroConfig z;
  z.stage = 2;
  EngineSpec spec = engine_spec_for(preset_config("tiny"), z, 1, 2048);
  spec.offload = nvme;
  const MemoryEstimate e = estimate_memory(spec, 2);
  const nlohmann::json& row = j.at("stages").at(2);
  EXPECT_EQ(row.at("nvme").get<int64_t>(), e.nvme);
  EXPECT_EQ(row.at("host").get<int64_t>(), e.host);
  EXPECT_EQ(row.at("optimizer").get<int64_t>(), 0);
  EXPECT_EQ(j.at("stages").at(0).at("offload_optimizer"), "none");  // stage 0 cannot offload

  // The offload modes side by side at the requested stage, each the estimator's own figures.
  const nlohmann::json& modes = j.at("offload_modes");
  ASSERT_EQ(modes.size(), 5u);
  OffloadConfig serial, overlap;
  serial.optimizer = overlap.optimizer = OffloadDevice::kCpu;
  serial.sub_group_size = overlap.sub_group_size = 5000;
  serial.overlap = false;
  spec.offload = serial;
  const MemoryEstimate s = estimate_memory(spec, 2);
  spec.offload = overlap;
  const MemoryEstimate v = estimate_memory(spec, 2);
  EXPECT_EQ(modes.at(0).at("mode"), "none");
  EXPECT_EQ(modes.at(0).at("host").get<int64_t>(), 0);
  EXPECT_EQ(modes.at(1).at("host").get<int64_t>(), s.host);
  EXPECT_EQ(modes.at(2).at("host").get<int64_t>(), v.host);
  EXPECT_GT(v.host, s.host);  // the overlap's kept copy
  EXPECT_EQ(modes.at(4).at("nvme").get<int64_t>(), e.nvme);
  EXPECT_EQ(modes.at(1).at("device_total").get<int64_t>(), s.device_total());
  // The delayed update: a second set of gradient shards, and for its warm-up steps (40 by
  // default) the overlap's kept copy; with every step delayed, no kept copy.
  OffloadConfig delayed = overlap;
  delayed.delay = 1;
  spec.offload = delayed;
  const MemoryEstimate d = estimate_memory(spec, 2);
  EXPECT_EQ(modes.at(3).at("mode"), "optimizer cpu, delayed update");
  EXPECT_EQ(modes.at(3).at("host").get<int64_t>(), d.host);
  EXPECT_GT(d.host, v.host);
  const auto from_step_one = train_test::run_zerotrain(
      "estimate --preset tiny --world 2 --zero-stage 2 --offload-optimizer cpu "
      "--sub-group-size 5000 --offload-optimizer-delay 1 --offload-optimizer-delay-after 0 --json");
  ASSERT_EQ(from_step_one.exit_code, 0) << from_step_one.output;
  delayed.delay_after = 0;
  spec.offload = delayed;
  const MemoryEstimate d0 = estimate_memory(spec, 2);
  EXPECT_EQ(nlohmann::json::parse(from_step_one.output)
                .at("offload_modes")
                .at(3)
                .at("host")
                .get<int64_t>(),
            d0.host);
  EXPECT_LT(d0.host, v.host);  // no kept copy

  const auto bad = train_test::run_zerotrain(
      "estimate --preset tiny --zero-stage 2 "
      "--offload-param cpu");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("offload_param"), std::string::npos) << bad.output;
  const auto typo = train_test::run_zerotrain("estimate --preset tiny --offload-optimizer disk");
  EXPECT_NE(typo.exit_code, 0);
  EXPECT_NE(typo.output.find("--offload-optimizer"), std::string::npos) << typo.output;
}

// --offload-gradient-copies in estimate: the offload rows and the fit advice's offload
// candidates count the copies their train command would make (auto: bf16 on the CUDA backend),
// an explicit bf16 with the "none" row beside it is accepted, and bf16 copies trade host bytes
// (2 per element of the shards instead of 4) for the device's two staging buffers.
TEST(EstimateCommand, GradientCopiesReachTheOffloadRowsAndTheAdvice) {
  std::map<std::string, nlohmann::json> out;
  for (const std::string copies : {"auto", "bf16", "fp32"}) {
    const auto r = train_test::run_zerotrain(
        "estimate --preset small --world 2 --zero-stage 2 --backend cuda --offload-optimizer cpu "
        "--device-memory 0.01 --json --offload-gradient-copies " +
        copies);
    ASSERT_EQ(r.exit_code, 0) << copies << ": " << r.output;
    out[copies] = nlohmann::json::parse(r.output);
  }
  EXPECT_EQ(out["auto"], out["bf16"]);
  const nlohmann::json &bf16 = out["bf16"].at("offload_modes"),
                       &fp32 = out["fp32"].at("offload_modes");
  ASSERT_EQ(bf16.size(), fp32.size());
  EXPECT_EQ(bf16.at(0), fp32.at(0));  // "none" copies nothing
  for (size_t i = 1; i < bf16.size(); ++i) {
    EXPECT_LT(bf16.at(i).at("host").get<int64_t>(), fp32.at(i).at("host").get<int64_t>()) << i;
    EXPECT_GT(bf16.at(i).at("device_total").get<int64_t>(),
              fp32.at(i).at("device_total").get<int64_t>())
        << i;
  }
  const nlohmann::json &advised = out["bf16"].at("candidates"),
                       &advised_fp32 = out["fp32"].at("candidates");
  ASSERT_EQ(advised.size(), advised_fp32.size());
  int offloading = 0;
  for (size_t i = 0; i < advised.size(); ++i) {
    const bool offloads = advised.at(i).at("offload_optimizer") != "none";
    offloading += offloads;
    if (offloads)
      EXPECT_GT(advised.at(i).at("device_total").get<int64_t>(),
                advised_fp32.at(i).at("device_total").get<int64_t>())
          << advised.at(i).dump();
    else
      EXPECT_EQ(advised.at(i), advised_fp32.at(i));
  }
  EXPECT_GT(offloading, 0);
  // The recommended command makes the copies its candidate was counted with. 6b on one 40 GiB
  // GPU: CPU optimizer offload fits with fp32 copies (39.0 GiB) and not with bf16 copies' two
  // staging buffers, whose advice moves on to parameter offload.
  const auto advice = [](const std::string& copies) {
    const auto r = train_test::run_zerotrain(
        "estimate --preset 6b --world 1 --backend cuda --device-memory 40 "
        "--offload-gradient-copies " +
        copies);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const size_t at = r.output.find("recommendation for");
    return at == std::string::npos ? r.output : r.output.substr(at);
  };
  const std::string fp32_advice = advice("fp32"), auto_advice = advice("auto");
  EXPECT_NE(fp32_advice.find("--offload-optimizer cpu --offload-gradient-copies fp32)"),
            std::string::npos)
      << fp32_advice;
  EXPECT_NE(auto_advice.find("--offload-optimizer cpu --offload-param cpu)"), std::string::npos)
      << auto_advice;
}

// World-invariant training's reduce-scatters sum in rank-tree order, whose partial sums take
// (N − 2) blocks of a call's per-rank count: each reduce slot has its own, for its largest shard,
// from 4 ranks on, in the buffers the estimate adds up (before, the communicator allocated them
// beside the plan: on a GPU, past the device memory the estimate promised).
TEST(EstimatorPlan, WorldInvariantReduceSlotsHoldTheRankTreesPartialSums) {
  const ModelConfig model = preset_config("6b");
  const ParamLayout layout(model);
  for (int world : {1, 2, 4, 8}) {
    for (bool invariant : {false, true}) {
      ZeroConfig z;
      z.stage = 2;
      z.world_invariant = invariant;
      const EngineSpec spec = engine_spec_for(model, z, 1, 2048);
      const MemoryPlan plan = plan_engine_memory(spec, world);
      const PlannedBuffer* receive = plan.find(BufferRole::kReduceReceive, 0);
      ASSERT_NE(receive, nullptr);
      const int64_t expected = invariant && world > 2 ? (world - 2) * receive->bytes : 0;
      const int slots = z.overlap_comm ? 2 : 1;
      EXPECT_EQ(plan.bytes_of(BufferRole::kReduceTreeScratch), slots * expected)
          << "world " << world << (invariant ? " invariant" : "");
      if (expected == 0) continue;
      EXPECT_EQ(plan.find(BufferRole::kReduceTreeScratch, 0)->category, MemCategory::kCommBuffers);
      // 6b at 4 ranks: a layer's gradient shard is ≈ 50 M elements, so 2 slots hold ≈ 0.8 GB.
      if (world == 4) {
        EXPECT_GT(plan.bytes_of(BufferRole::kReduceTreeScratch), int64_t{700} << 20);
      }
    }
  }
}

// `zerotrain estimate --plan`: the requested stage's buffers by role, which add up to that
// stage's row: per category, what is held for the run and from the first step, plus the larger
// of a pass's and the optimizer step's.
TEST(EstimateCommand, PlanListsTheBuffersOfTheRequestedStage) {
  // Params on the host with the device optimizer: the buffers category has a pass's staged
  // shards and the optimizer step's update tile, of which only the larger counts.
  const auto r = train_test::run_zerotrain(
      "estimate --preset small --world 2 --zero-stage 3 --offload-param cpu "
      "--activation-checkpointing full --plan --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  std::map<std::string, std::map<std::string, int64_t>> by_category;  // category → lifetime → B
  std::set<std::string> roles;
  for (const nlohmann::json& b : j.at("plan")) {
    by_category[b.at("category")][b.at("lifetime")] += b.at("bytes").get<int64_t>();
    EXPECT_TRUE(roles.insert(b.at("role").get<std::string>()).second) << b.dump();  // one row
  }
  const nlohmann::json& row = j.at("stages").at(3);
  for (const char* category :
       {"params", "grads", "optimizer", "activations", "buffers", "host", "nvme"}) {
    std::map<std::string, int64_t>& l = by_category[category];
    EXPECT_EQ(l["run"] + l["training"] + std::max(l["pass"], l["optimizer step"]),
              row.at(category).get<int64_t>())
        << category;
  }
  EXPECT_GT(by_category["params"]["pass"], 0);             // the stage-3 gathers
  EXPECT_GT(by_category["buffers"]["pass"], 0);            // the device copies of the host shards
  EXPECT_GT(by_category["buffers"]["optimizer step"], 0);  // the update tile
  EXPECT_GT(by_category["host"]["run"], 0);                // the working shards
  // Counts are of the buffers that hold bytes: with the head alone training, one group has
  // gradients and a master, and every group has working params.
  const auto frozen = train_test::run_zerotrain(
      "estimate --preset small --world 2 --zero-stage 2 --trainable '^lm_head\\.' --plan --json");
  ASSERT_EQ(frozen.exit_code, 0) << frozen.output;
  std::map<std::string, int> buffers;
  const nlohmann::json frozen_plan = nlohmann::json::parse(frozen.output).at("plan");
  for (const nlohmann::json& b : frozen_plan)
    buffers[b.at("role").get<std::string>()] = b.at("buffers").get<int>();
  EXPECT_EQ(buffers["gradients"], 1);
  EXPECT_EQ(buffers["fp32 master"], 1);
  EXPECT_EQ(buffers["working params"],
            static_cast<int>(ParamLayout(preset_config("small")).groups().size()));
  const auto text = train_test::run_zerotrain("estimate --preset small --zero-stage 3 --plan");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("memory plan at stage 3"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("gathered params"), std::string::npos) << text.output;
}

// Sizes whose byte counts would overflow are refused naming the option, not printed wrapped.
TEST(EstimateCommand, SizesBeyondTheTablesRangeAreRefused) {
  for (const auto& [args, culprit] : std::vector<std::pair<std::string, std::string>>{
           {"--micro-batch 2147483647 --seq-len 2048", "tokens per micro-batch is beyond 2^31 - 1"},
           {"--micro-batch 268435456 --seq-len 2048", "--micro-batch 268435456"},
           {"--world 2147483647", "--world 2147483647 is more than 2^24 ranks"},
           {"--ranks-per-node -1", "--ranks-per-node must be at least 1"},
           // As train refuses them (it printed negative GiB).
           {"--grad-accum 9000000000000000000", "--grad-accum must be at least 1"},
           {"--grad-accum 0", "--grad-accum must be at least 1"}}) {
    const auto r = train_test::run_zerotrain("estimate --preset 7b " + args);
    EXPECT_NE(r.exit_code, 0) << args << ": " << r.output;
    EXPECT_NE(r.output.find(culprit), std::string::npos) << args << ": " << r.output;
  }
  EXPECT_EQ(
      train_test::run_zerotrain("estimate --preset 7b --micro-batch 1024 --seq-len 2048").exit_code,
      0);
}

// `estimate --backend` plans a run on that backend (cuda is not checked against this machine) and
// so picks train's default activation storage there: bf16 on cuda under bf16, which the rows then
// count exactly as an explicit --activations bf16 does.
TEST(EstimateCommand, BackendPicksTrainsDefaultActivationStorage) {
  auto estimate = [](const std::string& extra) {
    const auto r = train_test::run_zerotrain(
        "estimate --preset tiny --micro-batch 2 --seq-len 64 --json " + extra);
    EXPECT_EQ(r.exit_code, 0) << extra << ": " << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json::object();
  };
  const nlohmann::json cuda = estimate("--backend cuda");
  EXPECT_EQ(cuda.value("activations", ""), "bf16");
  EXPECT_EQ(estimate("--backend cpu").value("activations", ""), "fp32");
  EXPECT_EQ(estimate("--backend cuda --precision fp32").value("activations", ""), "fp32");
  EXPECT_EQ(estimate("--backend cpu --precision fp16").value("activations", ""), "fp16");
  EXPECT_EQ(estimate("--backend cuda --activations fp32").value("activations", ""), "fp32");
  const nlohmann::json explicit_bf16 = estimate("--backend cpu --activations bf16");
  EXPECT_EQ(cuda.value("stages", nlohmann::json()),
            explicit_bf16.value("stages", nlohmann::json()));
  EXPECT_NE(cuda.value("stages", nlohmann::json()),
            estimate("--backend cpu").value("stages", nlohmann::json()));
  // The CUDA backend's scratch beside the rows (not in them), as the H100-checked prediction
  // gives it for the attention auto would pick; none on the CPU.
  const ModelConfig tiny = preset_config("tiny");
  const AttentionShape shape{2, 64, tiny.num_heads, tiny.num_kv_heads, tiny.head_dim()};
  const nlohmann::json scratch = cuda.value("backend_scratch", nlohmann::json::object());
  EXPECT_EQ(scratch.value("attention", ""),
            fused_attention_unsupported(shape, 8).empty() ? "fused" : "gemm");
  EXPECT_EQ(scratch.value("bytes", int64_t{0}),
            static_cast<int64_t>(cuda::cuda_backend_scratch_bytes(
                shape,
                scratch.value("attention", "") == "fused" ? AttentionKernel::kFused
                                                          : AttentionKernel::kGemm,
                DType::kBf16)));
  EXPECT_EQ(estimate("--backend cpu")["backend_scratch"]["bytes"], 0);
  EXPECT_EQ(estimate("--backend cuda --precision fp32")["backend_scratch"]["attention"], "gemm");
  EXPECT_EQ(estimate("--backend cuda --attention gemm")["backend_scratch"]["attention"], "gemm");
  // --max-micro-batch: each stage's row carries the scratch at its own micro-batch and at one
  // more, and the fit counts it: the found micro-batch's categories plus scratch fit the device.
  const nlohmann::json fit = estimate("--backend cuda --max-micro-batch --device-memory-gib 1");
  const AttentionKernel kernel = fit["backend_scratch"]["attention"] == "fused"
                                     ? AttentionKernel::kFused
                                     : AttentionKernel::kGemm;
  for (const nlohmann::json& row : fit.value("max_micro_batch", nlohmann::json::array())) {
    const int64_t b = row.at("micro_batch").get<int64_t>();
    const auto scratch_at = [&](int64_t n) {
      const AttentionShape at{n, 64, tiny.num_heads, tiny.num_kv_heads, tiny.head_dim()};
      return static_cast<int64_t>(cuda::cuda_backend_scratch_bytes(at, kernel, DType::kBf16));
    };
    EXPECT_EQ(row.at("backend_scratch_bytes").get<int64_t>(), scratch_at(std::max<int64_t>(1, b)));
    EXPECT_EQ(row.at("next_backend_scratch_bytes").get<int64_t>(), scratch_at(b + 1));
    if (b > 0) {
      EXPECT_LE(
          row.at("device_total").get<int64_t>() + row.at("backend_scratch_bytes").get<int64_t>(),
          int64_t{1} << 30)
          << row.dump();
    }
    EXPECT_GT(row.at("next_device_total").get<int64_t>() +
                  row.at("next_backend_scratch_bytes").get<int64_t>(),
              int64_t{1} << 30)
        << row.dump();
  }
  EXPECT_EQ(fit.value("max_micro_batch", nlohmann::json::array()).size(), 4u);
  EXPECT_NE(train_test::run_zerotrain("estimate --preset tiny --attention flash").exit_code, 0);
  EXPECT_NE(train_test::run_zerotrain("estimate --preset tiny --backend cpu --attention fused")
                .output.find("--attention fused needs --backend cuda"),
            std::string::npos);
  // --device-memory: the candidates fit in the device less the CUDA scratch. The tiny model's
  // categories are a few MiB; its scratch is over 0.5 GiB, so 0.3 GiB is enough on the CPU and
  // nothing on CUDA, 1 GiB enough on both.
  const nlohmann::json cpu_fit = estimate("--backend cpu --activations bf16 --device-memory 0.3");
  EXPECT_EQ(cpu_fit.value("recommendation", nlohmann::json()), "stage 0");
  EXPECT_EQ(cpu_fit.value("candidate_budget_bytes", int64_t{0}),
            cpu_fit.value("device_memory_bytes", int64_t{-1}));
  const nlohmann::json cuda_short = estimate("--backend cuda --device-memory 0.3");
  EXPECT_TRUE(cuda_short.value("recommendation", nlohmann::json(0)).is_null()) << cuda_short;
  const nlohmann::json cuda_fit = estimate("--backend cuda --device-memory 1");
  EXPECT_EQ(cuda_fit.value("recommendation", nlohmann::json()), "stage 0");
  EXPECT_EQ(cuda_fit.value("candidate_budget_bytes", int64_t{0}),
            (int64_t{1} << 30) - scratch.value("bytes", int64_t{0}));
  const auto short_text = train_test::run_zerotrain(
      "estimate --preset tiny --micro-batch 2 --seq-len 64 --backend cuda --device-memory 0.3");
  EXPECT_NE(short_text.output.find("the CUDA backend's scratch alone is"), std::string::npos)
      << short_text.output;
  const auto bad = train_test::run_zerotrain("estimate --preset tiny --backend gpu");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("gpu"), std::string::npos) << bad.output;
}

// --deterministic false plans the fused backward's atomic-dQ workspace (its fp32 accumulator in
// place of dP), puts the flag into the recommended train command, and is refused where it cannot
// mean anything (the CPU backend) or contradicts the run (--world-invariant), naming the options.
TEST(EstimateCommand, DeterministicFalseCountsTheAtomicBackwardsWorkspace) {
  const std::string run = "estimate --preset 125m --micro-batch 4 --seq-len 2048 --backend cuda ";
  auto json_of = [&](const std::string& extra) {
    const auto r = train_test::run_zerotrain(run + "--json " + extra);
    EXPECT_EQ(r.exit_code, 0) << extra << ": " << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json::object();
  };
  const nlohmann::json deterministic = json_of(""), atomic = json_of("--deterministic false");
  ASSERT_EQ(deterministic["backend_scratch"]["attention"], "fused");
  const ModelConfig c = preset_config("125m");
  const AttentionShape shape{4, 2048, c.num_heads, c.num_kv_heads, c.head_dim()};
  EXPECT_EQ(deterministic["backend_scratch"]["bytes"].get<int64_t>() -
                atomic["backend_scratch"]["bytes"].get<int64_t>(),
            static_cast<int64_t>(cuda::cudnn_attention_workspace_bytes(shape) -
                                 cuda::cudnn_attention_workspace_bytes(shape, false)));
  EXPECT_EQ(deterministic["stages"], atomic["stages"]);  // the categories do not change
  const auto text = train_test::run_zerotrain(run + "--device-memory 80 --deterministic false");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("--deterministic false)"), std::string::npos) << text.output;
  EXPECT_EQ(train_test::run_zerotrain(run + "--device-memory 80").output.find("--deterministic"),
            std::string::npos);
  const auto cpu = train_test::run_zerotrain(
      "estimate --preset tiny --backend cpu "
      "--deterministic false");
  EXPECT_NE(cpu.exit_code, 0);
  EXPECT_NE(cpu.output.find("--deterministic false needs the CUDA backend"), std::string::npos)
      << cpu.output;
  const auto invariant = train_test::run_zerotrain(run + "--world-invariant --deterministic false");
  EXPECT_NE(invariant.exit_code, 0);
  EXPECT_NE(invariant.output.find("--deterministic false and --world-invariant contradict"),
            std::string::npos)
      << invariant.output;
}

}  // namespace
}  // namespace zt
