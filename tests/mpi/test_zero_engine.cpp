// ZeRO engine equivalence, communication volume and partitioning, at the world size the test
// binary is launched with (1, 2, 4). Reference: the same global batches trained by stage 0 on a
// world of one rank (MPI_COMM_SELF), computed on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"

namespace zt {
namespace {

constexpr int kSteps = 10;
constexpr int64_t kSeq = 16;
constexpr int64_t kMicro = 2;  // per rank

struct RunOptions {
  int stage = 0;
  bool overlap = true;
  int ckpt_every = 0;
  bool ckpt_on_host = false;  // cpu_checkpointing
  int64_t accum = 2;
  Precision precision = Precision::kFp32;
  int64_t bucket = 500'000'000;
  int64_t reuse = 1'000'000'000;
  int64_t persistence = 0;
};

struct RunResult {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> master;  // rank 0 only
  CommCounters last_step_counters;
  std::vector<StepStats> stats;
  std::vector<double> wall_s;  // host clock around each train_step
  size_t peak[kNumMemCategories] = {};
};

// Trains kSteps on `comm`. Rank r, micro-batch m takes global sequences
// [(m·N + r)·B, +B) where B is the per-rank micro-batch; the global batch is identical for any N.
RunResult run(Communicator& comm, const RunOptions& o, int64_t micro_per_rank) {
  const ModelConfig cfg = preset_config("tiny");
  auto backend = make_cpu_backend();
  MemoryTracker memory;
  ZeroConfig zero;
  zero.stage = o.stage;
  zero.overlap_comm = o.overlap;
  zero.reduce_bucket_size = o.bucket;
  zero.allgather_bucket_size = o.bucket;
  zero.prefetch_bucket_size = 3 * 50'000;
  zero.param_persistence_threshold = o.persistence;
  zero.max_reuse_distance = o.reuse;
  AdamWConfig adam;
  adam.lr = 2e-3f;
  adam.weight_decay = 0.1f;
  adam.clip = 0.5f;  // active: exercises the global norm across shards
  ActivationCheckpointing ac;
  ac.every = o.ckpt_every;
  ac.on_host = o.ckpt_on_host;
  ZeroEngine engine(cfg, zero, o.precision, adam, *backend, comm, memory, micro_per_rank, kSeq, ac);
  engine.init_from_seed(1234);
  const int N = comm.world_size(), r = comm.rank();
  RunResult result;
  for (int step = 1; step <= kSteps; ++step) {
    const engine_test::StepBatches batch(step, o.accum, micro_per_rank, N, r, kSeq, cfg.vocab_size);
    comm.reset_counters();
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats st = engine.train_step(batch.input_ptrs, batch.target_ptrs, 1e-3f, step);
    result.wall_s.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    result.stats.push_back(st);
    result.losses.push_back(st.loss);
    result.last_step_counters = comm.counters();
  }
  for (int c = 0; c < kNumMemCategories; ++c)
    result.peak[c] = memory.peak(static_cast<MemCategory>(c));
  engine.for_each_full_tensor(true, [&](const TensorInfo& t, const void* data) {
    if (!data) return;
    const float* f = static_cast<const float*>(data);
    result.master[t.name].assign(f, f + t.numel);
  });
  return result;
}

class ZeroEngineTest : public ::testing::Test {
 protected:
  MpiCommunicator world_{MPI_COMM_WORLD};
  MpiCommunicator self_{MPI_COMM_SELF};
  int N() const { return world_.world_size(); }
};

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  return diff;
}

// Adam moves each weight by up to ~lr per step (1e-3 × 10 steps here). fp32 reduction-order
// noise in a near-zero gradient can change an element's normalised update noticeably, so the
// weights are held to 1% of that total movement; losses are held to 2e-6 relative.
constexpr double kWeightTolerance = 1e-4;

void expect_close(const RunResult& got, const RunResult& ref, const std::string& what, bool root) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 2e-6 * std::fabs(ref.losses[i]))
        << what << " step " << i + 1;
  if (!root) return;
  ASSERT_EQ(got.master.size(), ref.master.size()) << what;
  for (const auto& [name, values] : ref.master)
    EXPECT_LT(max_abs_diff(got.master.at(name), values), kWeightTolerance)
        << what << " tensor " << name;
}

TEST_F(ZeroEngineTest, AllStagesMatchOneRankStageZero) {
  RunOptions ref_opts;
  const RunResult ref = run(self_, ref_opts, kMicro * N());
  EXPECT_LT(ref.losses.back(), ref.losses.front());  // it trains
  const bool root = world_.rank() == 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      for (int ckpt : {0, 1}) {
        RunOptions o;
        o.stage = stage;
        o.overlap = overlap;
        o.ckpt_every = ckpt;
        if (!overlap) {  // small buckets: chunked reduce-scatter / all-gather, no reuse
          o.bucket = 1000;
          o.reuse = 0;
        }
        const std::string what = "stage " + std::to_string(stage) + " overlap " +
                                 std::to_string(overlap) + " ckpt " + std::to_string(ckpt);
        expect_close(run(world_, o, kMicro), ref, what, root);
      }
    }
  }
}

TEST_F(ZeroEngineTest, CheckpointingIsBitwiseIdentical) {
  for (int stage : {0, 3}) {
    RunOptions o;
    o.stage = stage;
    o.precision = Precision::kBf16;
    const RunResult plain = run(world_, o, kMicro);
    o.ckpt_every = 1;
    const RunResult full = run(world_, o, kMicro);
    o.ckpt_every = 2;
    const RunResult every2 = run(world_, o, kMicro);
    o.ckpt_on_host = true;  // kept inputs in host memory, through device transit buffers
    const RunResult every2_host = run(world_, o, kMicro);
    o.ckpt_every = 1;
    const RunResult full_host = run(world_, o, kMicro);
    EXPECT_EQ(plain.losses, full.losses) << "stage " << stage;
    EXPECT_EQ(plain.losses, every2.losses) << "stage " << stage;
    EXPECT_EQ(plain.losses, every2_host.losses) << "stage " << stage << ", on host";
    EXPECT_EQ(plain.losses, full_host.losses) << "stage " << stage << ", on host";
    EXPECT_EQ(plain.master, full.master) << "stage " << stage;
    EXPECT_EQ(plain.master, full_host.master) << "stage " << stage << ", on host";
  }
}

TEST_F(ZeroEngineTest, SingleRankStagesAreBitwiseIdentical) {
  // One rank, one micro-batch: no reduction order changes, so every stage gives the same bits.
  RunOptions o;
  o.accum = 1;
  o.precision = Precision::kBf16;
  const RunResult ref = run(self_, o, kMicro);
  for (int stage = 1; stage <= 3; ++stage) {
    o.stage = stage;
    const RunResult got = run(self_, o, kMicro);
    EXPECT_EQ(got.losses, ref.losses) << "stage " << stage;
    EXPECT_EQ(got.master, ref.master) << "stage " << stage;
  }
}

TEST_F(ZeroEngineTest, CommunicationVolumeMatchesTheory) {
  const ParamLayout layout(preset_config("tiny"));
  const uint64_t n = static_cast<uint64_t>(N());
  uint64_t padded = 0;  // Ψ padded to a multiple of N per group
  for (const auto& g : layout.groups()) padded += (static_cast<uint64_t>(g.numel) + n - 1) / n * n;
  RunOptions o;
  o.accum = 1;
  o.precision = Precision::kBf16;
  o.reuse = 0;
  using Op = CollectiveOp;
  for (int stage = 0; stage <= 3; ++stage) {
    o.stage = stage;
    const CommCounters c = run(world_, o, kMicro).last_step_counters;
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

// The step's phase times are intervals of the backend's timeline (the host clock on the CPU):
// forward, backward and optimizer are disjoint parts of the step, and collective waits lie
// inside forward/backward or after the optimizer (stage 1/2 parameter all-gathers), so neither
// sum can exceed the step's wall time.
TEST_F(ZeroEngineTest, PhaseTimesAreDisjointPartsOfTheStep) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool overlap : {true, false}) {
      RunOptions o;
      o.stage = stage;
      o.overlap = overlap;
      o.precision = Precision::kBf16;
      const RunResult r = run(world_, o, kMicro);
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
  RunOptions o;
  o.precision = Precision::kBf16;
  o.reuse = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    o.stage = stage;
    const RunResult r = run(world_, o, kMicro);
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
