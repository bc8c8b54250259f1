// ZeRO engine equivalence, communication volume and partitioning, at the world size the test
// binary is launched with (1, 2, 4). Reference: the same global batches trained by stage 0 on a
// world of one rank (MPI_COMM_SELF), computed on every rank. With zero.world_invariant every
// stage must equal it bit for bit; the default mode is compared within the derived bounds of
// one_step_bound.h (bitwise where nothing but the stage changes on one rank).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"
#include "model/tensor_source.h"
#include "one_step_bound.h"

namespace zt {
namespace {

using engine_test::EngineOptions;
using engine_test::TestEngine;

constexpr int kSteps = 10;
constexpr int64_t kAccum = 2;  // micro-batches per rank and step
constexpr float kLr = 1e-3f;

struct RunResult {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> master;  // rank 0 only
  CommCounters last_step_counters;
  engine_test::OwnState own;  // this rank's optimizer range after the last step
  std::vector<StepStats> stats;
  std::vector<double> wall_s;  // host clock around each train_step
  size_t peak[kNumMemCategories] = {};
};

// Trains `steps` steps on `comm`. Rank r, micro-batch m takes global sequences
// [(m·N + r)·B, +B) where B is the per-rank micro-batch; the global batch is identical for any N.
RunResult run(Communicator& comm, const EngineOptions& o, int64_t accum = kAccum,
              int steps = kSteps) {
  TestEngine t(comm, o);
  t.init();
  RunResult result;
  for (int step = 1; step <= steps; ++step) {
    comm.reset_counters();
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats st = t.step(step, accum, kLr);
    result.wall_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    result.stats.push_back(st);
    result.losses.push_back(st.loss);
    result.last_step_counters = comm.counters();
  }
  for (int c = 0; c < kNumMemCategories; ++c)
    result.peak[c] = t.memory().peak(static_cast<MemCategory>(c));
  result.master = engine_test::rank0_masters(t.engine());
  result.own = t.own_state();
  return result;
}

class ZeroEngineTest : public ::testing::Test {
 protected:
  MpiCommunicator world_{MPI_COMM_WORLD};
  MpiCommunicator self_{MPI_COMM_SELF};
  int N() const { return world_.world_size(); }
};

// Every stage at N ranks against one rank at stage 0, one step from the same initial weights,
// within the bounds one_step_bound.h derives: the reference trains the same micro-batches of B
// sequences with grad-accum N·A (so every GEMM has the same shape), and the runs differ only in
// how the micro-batches' gradients, the losses and the norm are summed. Checked: the reduced
// gradient of every element each rank owns, the loss, the gradient norm, and every new master.
// This is the test of the default mode across world sizes (world-invariant runs are exact), with
// untied and tied embeddings (the one embedding parameter gets the head's gradient and the
// lookup's, is reduced once and updated once).
void expect_default_mode_within_derived_bounds(Communicator& world, Communicator& self, bool tied) {
  const EngineOptions defaults;
  const auto make_reference = [&](const AdamWConfig& optim) {
    EngineOptions o;
    o.optim = optim;
    o.tied = tied;
    auto t = std::make_unique<TestEngine>(self, o);
    t->init();
    return t;
  };
  const engine_test::OneStepReference ref(make_reference, defaults.optim, 1,
                                          kAccum * world.world_size(), kLr);
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      for (int ckpt : {0, 1}) {
        EngineOptions o;
        o.tied = tied;
        o.stage = stage;
        o.overlap = overlap;
        o.ckpt_every = ckpt;
        if (!overlap) {  // small buckets: chunked reduce-scatter / all-gather, no reuse
          o.bucket = 1000;
          o.reuse = 0;
        }
        const std::string what = std::string(tied ? "tied, " : "") + "stage " +
                                 std::to_string(stage) + " overlap " + std::to_string(overlap) +
                                 " ckpt " + std::to_string(ckpt);
        EngineOptions probe = o;
        probe.optim = engine_test::OneStepReference::gradient_probe(o.optim);
        TestEngine gradient(world, probe);
        gradient.init();
        gradient.step(1, kAccum, 0.0f);
        ref.expect_gradient(gradient.own_state(), what);
        TestEngine trained(world, o);
        trained.init();
        const StepStats stats = trained.step(1, kAccum, kLr);
        ref.expect_step(stats, trained.own_state(), what);
      }
    }
  }
}

TEST_F(ZeroEngineTest, DefaultModeMatchesOneRankStageZeroWithinDerivedBounds) {
  expect_default_mode_within_derived_bounds(world_, self_, false);
}

TEST_F(ZeroEngineTest, DefaultModeTiedEmbeddingsMatchOneRankStageZeroWithinDerivedBounds) {
  expect_default_mode_within_derived_bounds(world_, self_, true);
}

constexpr int kInvariantSteps = 4;

// World-invariant mode (docs/ARCHITECTURE.md §4): every stage at N ranks, with and without
// overlap (small buckets: chunked reductions) and activation checkpointing, trains kInvariantSteps
// steps bit for bit like one rank at stage 0 with grad-accum N·A over the same micro-batches:
// every loss and gradient norm, every fp32 master (rank 0's gather of the whole model), and this
// rank's own master/m/v range. tied: the model with tied embeddings (reference and runs alike).
// Returns the reference run.
RunResult expect_world_invariant_stages_equal_one_rank(Communicator& world, Communicator& self,
                                                       EngineOptions base,
                                                       int steps = kInvariantSteps) {
  base.world_invariant = true;
  const bool tied = base.tied;
  const RunResult ref = run(self, base, kAccum * world.world_size(), steps);
  const uint64_t unlent_before = world.counters().unlent_scratch_bytes;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      for (int ckpt : {0, 1}) {
        EngineOptions o = base;
        o.stage = stage;
        o.overlap = overlap;
        o.ckpt_every = ckpt;
        if (!overlap) {
          o.bucket = 1000;
          o.reuse = 0;
        }
        const std::string what = std::string(tied ? "tied, " : "") +
                                 "N=" + std::to_string(world.world_size()) + " stage " +
                                 std::to_string(stage) + " overlap " + std::to_string(overlap) +
                                 " ckpt " + std::to_string(ckpt);
        const RunResult got = run(world, o, kAccum, steps);
        EXPECT_EQ(got.losses, ref.losses) << what;
        for (size_t i = 0; i < got.stats.size(); ++i) {
          if (ref.stats[i].skipped)  // an fp16 overflow: the norm is not finite (inf or NaN)
            EXPECT_FALSE(std::isfinite(got.stats[i].grad_norm)) << what << " step " << i + 1;
          else
            EXPECT_EQ(got.stats[i].grad_norm, ref.stats[i].grad_norm) << what << " step " << i + 1;
          EXPECT_EQ(got.stats[i].loss_scale, ref.stats[i].loss_scale) << what << " step " << i + 1;
          EXPECT_EQ(got.stats[i].skipped, ref.stats[i].skipped) << what << " step " << i + 1;
        }
        if (world.rank() == 0) {
          EXPECT_TRUE(got.master == ref.master) << what << ": the masters differ";
        }
        engine_test::expect_same_range(got.own, ref.own, what);
      }
    }
  }
  // Every rank-tree reduction summed in the reduce slots' planned scratch, none in the
  // communicator's own (which the estimate would not count).
  EXPECT_EQ(world.counters().unlent_scratch_bytes, unlent_before);
  return ref;
}

TEST_F(ZeroEngineTest, WorldInvariantStagesEqualOneRankStageZeroBitwise) {
  EngineOptions base;
  base.precision = Precision::kBf16;
  expect_world_invariant_stages_equal_one_rank(world_, self_, base);
}

// Tied embeddings: the one embedding parameter gets the head's gradient and the lookup's, is
// reduced once and updated once, at every stage (stage 3 gathers it for the head as well).
TEST_F(ZeroEngineTest, TiedEmbeddingsEqualOneRankStageZeroBitwiseAtEveryStage) {
  EngineOptions base;
  base.tied = true;
  base.precision = Precision::kFp32;
  expect_world_invariant_stages_equal_one_rank(world_, self_, base);
}

// fp16 with fp16 activations, started at a loss scale the activation gradients cannot hold: the
// first steps overflow and are skipped, the scale comes down (hysteresis 2) and grows again
// after each window of 2 steps. Every stage at N ranks makes the same overflow decisions, scales
// and skips as one rank at stage 0, and trains bit for bit like it (world-invariant mode), so
// the agreed overflow check and the skip leave nothing rank- or stage-dependent behind. The
// reference must both skip and update, or the test could not fail.
// A model whose weights fp16 cannot hold: every value 0.01, but one element of layer 1's up
// projection is 70000 (fp16 rounds it to infinity).
class OutOfFp16RangeSource : public TensorSource {
 public:
  explicit OutOfFp16RangeSource(ModelConfig c) : config_(std::move(c)) {}
  const ModelConfig& config() const override { return config_; }
  std::string description() const override { return "a test source"; }
  void read_range_f32(const TensorInfo& t, int64_t begin, int64_t count, float* out) override {
    for (int64_t i = 0; i < count; ++i)
      out[i] = (t.name == "model.layers.1.mlp.up_proj.weight" && begin + i == 5) ? 70000.0f : 0.01f;
  }

 private:
  ModelConfig config_;
};

TEST_F(ZeroEngineTest, Fp16RefusesWeightsBeyondItsRangeNamingTheTensor) {
  for (Precision precision : {Precision::kFp16, Precision::kBf16}) {
    EngineOptions o;
    o.precision = precision;
    TestEngine t(self_, o);
    OutOfFp16RangeSource source(t.engine().model().config());
    if (precision == Precision::kBf16) {  // bf16's range holds it
      EXPECT_NO_THROW(t.engine().load_from(source));
      continue;
    }
    try {
      t.engine().load_from(source);
      ADD_FAILURE() << "an fp16 run loaded a weight of 70000";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << what;
      EXPECT_NE(what.find("element 5"), std::string::npos) << what;
      EXPECT_NE(what.find("65504"), std::string::npos) << what;
    }
  }
}

TEST_F(ZeroEngineTest, Fp16OverflowSkipsAgreeAcrossStagesAndRanksBitwise) {
  const EngineOptions base = engine_test::overflowing_fp16_options();
  const RunResult ref = expect_world_invariant_stages_equal_one_rank(world_, self_, base, 10);
  int skipped = 0;
  for (const StepStats& s : ref.stats) skipped += s.skipped ? 1 : 0;
  EXPECT_GT(skipped, 0) << "no step overflowed: raise initial_scale_power";
  EXPECT_LT(skipped, static_cast<int>(ref.stats.size())) << "every step overflowed";
  EXPECT_EQ(ref.stats.front().loss_scale, std::ldexp(1.0, 22));
  // The skip with the optimizer (and at stage 3 the params) offloaded to the host: the gradient
  // copies already issued land unused, the host state stays as it was.
  for (int stage : {2, 3}) {
    EngineOptions o = base;
    o.world_invariant = true;
    o.stage = stage;
    o.offload.optimizer = OffloadDevice::kCpu;
    o.offload.sub_group_size = 20'000;  // several tiles per group
    if (stage == 3) o.offload.param = OffloadDevice::kCpu;
    const std::string what = "offload, stage " + std::to_string(stage);
    const RunResult got = run(world_, o, kAccum, 10);
    EXPECT_EQ(got.losses, ref.losses) << what;
    for (size_t i = 0; i < got.stats.size(); ++i)
      EXPECT_EQ(got.stats[i].skipped, ref.stats[i].skipped) << what << " step " << i + 1;
    if (world_.rank() == 0) {
      EXPECT_TRUE(got.master == ref.master) << what << ": the masters differ";
    }
  }
}

TEST_F(ZeroEngineTest, CheckpointingIsBitwiseIdentical) {
  for (int stage : {0, 3}) {
    EngineOptions o;
    o.stage = stage;
    o.precision = Precision::kBf16;
    const RunResult plain = run(world_, o);
    o.ckpt_every = 1;
    const RunResult full = run(world_, o);
    o.ckpt_every = 2;
    const RunResult every2 = run(world_, o);
    o.ckpt_on_host = true;  // kept inputs in host memory, through device transit buffers
    const RunResult every2_host = run(world_, o);
    o.ckpt_every = 1;
    const RunResult full_host = run(world_, o);
    o.ckpt_every = 0;
    o.ckpt_on_host = false;
    o.ckpt_selective = true;  // the norms and SwiGLU recomputed, the GEMM outputs kept
    const RunResult selective = run(world_, o);
    EXPECT_EQ(plain.losses, selective.losses) << "stage " << stage << ", selective";
    EXPECT_EQ(plain.master, selective.master) << "stage " << stage << ", selective";
    EXPECT_EQ(plain.losses, full.losses) << "stage " << stage;
    EXPECT_EQ(plain.losses, every2.losses) << "stage " << stage;
    EXPECT_EQ(plain.losses, every2_host.losses) << "stage " << stage << ", on host";
    EXPECT_EQ(plain.losses, full_host.losses) << "stage " << stage << ", on host";
    EXPECT_EQ(plain.master, full.master) << "stage " << stage;
    EXPECT_EQ(plain.master, full_host.master) << "stage " << stage << ", on host";
  }
  // Selective with tied embeddings, a frozen layer and fp16 storage under the loss scaler.
  EngineOptions o;
  o.stage = 2;
  o.tied = true;
  o.freeze = {"layers\\.0\\.mlp"};
  o.precision = Precision::kFp16;
  o.activations = DType::kFloat16;
  const RunResult plain = run(world_, o);
  o.ckpt_selective = true;
  const RunResult selective = run(world_, o);
  EXPECT_EQ(plain.losses, selective.losses) << "selective, tied, frozen, fp16";
  EXPECT_EQ(plain.master, selective.master) << "selective, tied, frozen, fp16";
}

// One rank: the first micro-batch's gradient is written into the accumulator, every later one
// enters it as one addition per element, whether the accumulator is the full buffer (stages 0/1)
// or a shard fed from a bucket (stages 2/3), so every stage adds the same floats in the same order
// and gives the same bits. Over steps, a gradient left from the step before (no buffer is zeroed)
// would show; also with tied embeddings (stages 0/1 collect the embedding's gradient in a buffer
// of their own) and a group partly frozen (its frozen range).
TEST_F(ZeroEngineTest, SingleRankStagesAreBitwiseIdentical) {
  for (const bool tied : {false, true}) {
    for (const bool partly_frozen : {false, true}) {
      EngineOptions o;
      o.precision = Precision::kBf16;
      o.tied = tied;
      if (partly_frozen) o.freeze = {"layers\\.0\\.self_attn\\.q_proj", "model\\.norm"};
      const std::string what =
          std::string(tied ? "tied, " : "") + (partly_frozen ? "partly frozen, " : "") + "stage ";
      const RunResult ref = run(self_, o);
      for (int stage = 1; stage <= 3; ++stage) {
        o.stage = stage;
        const RunResult got = run(self_, o);
        EXPECT_EQ(got.losses, ref.losses) << what << stage;
        EXPECT_EQ(got.master, ref.master) << what << stage;
      }
    }
  }
}

TEST_F(ZeroEngineTest, CommunicationVolumeMatchesTheory) {
  const ParamLayout layout(preset_config("tiny"));
  const uint64_t n = static_cast<uint64_t>(N());
  uint64_t padded = 0;  // Ψ padded to a multiple of N per group
  for (const auto& g : layout.groups()) padded += (static_cast<uint64_t>(g.numel) + n - 1) / n * n;
  EngineOptions o;
  o.precision = Precision::kBf16;
  o.reuse = 0;
  using Op = CollectiveOp;
  for (int stage = 0; stage <= 3; ++stage) {
    o.stage = stage;
    const CommCounters c = run(world_, o, 1).last_step_counters;
    const std::string what = "stage " + std::to_string(stage);
    // The loss and the gradient norm add two scalar all-reduces (stage 0: loss only).
    const uint64_t scalars = stage == 0 ? 1 : 2;
    if (stage == 0) {
      EXPECT_EQ(c[Op::kAllReduce].elements, padded + scalars) << what;
      EXPECT_EQ(c[Op::kReduceScatter].elements, 0u) << what;
      EXPECT_EQ(c[Op::kAllGather].elements, 0u) << what;
    } else {
      EXPECT_EQ(c[Op::kAllReduce].elements, scalars) << what;
      EXPECT_EQ(c[Op::kReduceScatter].elements, padded) << what;
      // Stages 1/2 gather once after the update; stage 3 gathers before forward and backward.
      EXPECT_EQ(c[Op::kAllGather].elements, (stage == 3 ? 2 : 1) * padded) << what;
      // Bytes: fp32 gradients reduce-scattered, bf16 params gathered, (N-1)/N of each.
      EXPECT_EQ(c[Op::kReduceScatter].bytes_sent, padded / n * (n - 1) * 4) << what;
      EXPECT_EQ(c[Op::kAllGather].bytes_sent, (stage == 3 ? 2 : 1) * padded / n * (n - 1) * 2)
          << what;
    }
  }
}

// World-invariant mode: every micro-batch's gradient is reduce-scattered at every stage (the
// rank-tree order, sending the ring's bytes), so at grad-accum 1 each stage moves the ZeRO
// theory's gradient and parameter volume (stage 0: reduce-scatter + all-gather = all-reduce) and
// at grad-accum A the reduce-scatter repeats A times. Besides: the loss as one double per
// micro-batch (all-gathered) and, at stages 1-3, one double per 8192-element norm block
// (all-reduced). Groups are padded to N·8192 elements.
TEST_F(ZeroEngineTest, WorldInvariantCommunicationMatchesTheory) {
  const ParamLayout layout(preset_config("tiny"));
  const uint64_t n = static_cast<uint64_t>(N()), align = n * ZeroConfig::kInvariantNormBlock;
  uint64_t padded = 0;
  for (const auto& g : layout.groups())
    padded += (static_cast<uint64_t>(g.numel) + align - 1) / align * align;
  const uint64_t blocks = padded / ZeroConfig::kInvariantNormBlock;
  EngineOptions o;
  o.precision = Precision::kBf16;
  o.reuse = 0;
  o.world_invariant = true;
  using Op = CollectiveOp;
  for (uint64_t accum : {1u, 2u}) {
    for (int stage = 0; stage <= 3; ++stage) {
      o.stage = stage;
      const CommCounters c = run(world_, o, static_cast<int64_t>(accum), 1).last_step_counters;
      const std::string what = "stage " + std::to_string(stage) + " accum " + std::to_string(accum);
      const uint64_t losses = accum * n;  // the gathered per-micro-batch loss sums
      EXPECT_EQ(c[Op::kReduceScatter].elements, accum * padded) << what;
      EXPECT_EQ(c[Op::kReduceScatter].bytes_sent, accum * padded / n * (n - 1) * 4) << what;
      EXPECT_EQ(c[Op::kAllReduce].elements, stage == 0 ? 0 : blocks) << what;
      // Stage 0 gathers the fp32 gradient, stages 1/2 the bf16 params after the update, stage 3
      // the bf16 params before every micro-batch's forward and backward (no reuse).
      const uint64_t gathered = stage == 3 ? 2 * accum * padded : padded;
      const uint64_t gathered_bytes = stage == 0 ? 4 : 2;
      EXPECT_EQ(c[Op::kAllGather].elements, gathered + losses) << what;
      EXPECT_EQ(c[Op::kAllGather].bytes_sent, (gathered / n * gathered_bytes + accum * 8) * (n - 1))
          << what;
    }
  }
}

// The step's phase times are intervals of the backend's timeline (the host clock on the CPU):
// forward, backward and optimizer are disjoint parts of the step, and collective waits lie
// inside forward/backward or after the optimizer (stage 1/2 parameter all-gathers), so neither
// sum can exceed the step's wall time.
TEST_F(ZeroEngineTest, PhaseTimesAreDisjointPartsOfTheStep) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      EngineOptions o;
      o.stage = stage;
      o.overlap = overlap;
      o.precision = Precision::kBf16;
      const RunResult r = run(world_, o);
      for (size_t i = 0; i < r.stats.size(); ++i) {
        const StepStats& st = r.stats[i];
        const std::string what = "stage " + std::to_string(stage) + " overlap " +
                                 std::to_string(overlap) + " step " + std::to_string(i + 1);
        EXPECT_GT(st.forward_s, 0.0) << what;
        EXPECT_GT(st.backward_s, 0.0) << what;
        EXPECT_GT(st.optimizer_s, 0.0) << what;
        EXPECT_GE(st.comm_wait_s, 0.0) << what;
        EXPECT_LE(st.forward_s + st.backward_s + st.optimizer_s, r.wall_s[i]) << what;
        EXPECT_LE(st.optimizer_s + st.comm_wait_s, r.wall_s[i]) << what;
      }
    }
  }
}

TEST_F(ZeroEngineTest, PartitionedStateScalesWithWorldSize) {
  const ParamLayout layout(preset_config("tiny"));
  const int64_t n = N();
  int64_t shard = 0, padded = 0, largest = 0;
  for (const auto& g : layout.groups()) {
    shard += (g.numel + n - 1) / n;
    padded += (g.numel + n - 1) / n * n;
    largest = std::max(largest, (g.numel + n - 1) / n * n);
  }
  const int64_t psi = layout.total_numel();
  EngineOptions o;
  o.precision = Precision::kBf16;
  o.reuse = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    o.stage = stage;
    const RunResult r = run(world_, o);
    auto peak = [&](MemCategory c) { return static_cast<int64_t>(r.peak[static_cast<int>(c)]); };
    const std::string what = "stage " + std::to_string(stage);
    EXPECT_EQ(peak(MemCategory::kOptimizer), 12 * (stage == 0 ? psi : shard)) << what;
    EXPECT_EQ(peak(MemCategory::kGrads), 4 * (stage <= 1 ? padded : shard)) << what;
    if (stage < 3) {
      EXPECT_EQ(peak(MemCategory::kParams), 2 * padded) << what;
    } else {
      // Own shards plus at most the live gathered groups (prefetch bound: 3 groups of 50k).
      EXPECT_GE(peak(MemCategory::kParams), 2 * (shard + largest)) << what;
      EXPECT_LE(peak(MemCategory::kParams), 2 * (shard + 4 * largest)) << what;
    }
  }
}

}  // namespace
}  // namespace zt
