// The memory estimator (engine/estimator.h) against what a ZeroEngine really allocates: tiny and
// small presets, stages 0-3, with and without activation checkpointing, at the world size the
// binary runs with, and every offload mode. Every category must be its measured peak exactly, in
// bytes; the device total, the sum of the categories' peaks, bounds the measured peak from above
// (the categories may peak at different times) and stays within 10% of it (over the engine's
// life, and during a training step).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/estimator.h"
#include "engine/zero_engine.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "support/engine_spec_for.h"

namespace zt {
namespace {

constexpr int64_t kMicro = 2, kSeq = 16;

struct Measured {
  size_t peak[kNumMemCategories] = {};
  size_t peak_total = 0;
  size_t step_peak_total = 0;  // during step 2 only
};

// The engine `spec` describes, trained two steps of spec.grad_accum micro-batches: its peaks.
Measured train_two_steps(Communicator& comm, const EngineSpec& spec) {
  auto backend = make_cpu_backend();
  MemoryTracker memory;
  ZeroEngine engine(spec, *backend, comm, memory);
  const ModelConfig& cfg = spec.model;
  const auto accum = static_cast<size_t>(spec.grad_accum);
  engine.init_from_seed(7);
  std::vector<int32_t> in(static_cast<size_t>(kMicro * kSeq)), tg(in.size());
  Measured m;
  for (int step = 1; step <= 2; ++step) {
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<int32_t>((i * 7 + static_cast<size_t>(step + comm.rank())) %
                                   static_cast<size_t>(cfg.vocab_size));
      tg[i] = static_cast<int32_t>((i * 7 + 3) % static_cast<size_t>(cfg.vocab_size));
    }
    if (step == 2) {
      for (int c = 0; c < kNumMemCategories; ++c)
        m.peak[c] = memory.peak(static_cast<MemCategory>(c));
      m.peak_total = memory.peak_total();
      memory.reset_peaks();
    }
    engine.train_step(std::vector<const int32_t*>(accum, in.data()),
                      std::vector<const int32_t*>(accum, tg.data()), 1e-3f, step);
  }
  for (int c = 0; c < kNumMemCategories; ++c)
    m.peak[c] = std::max(m.peak[c], memory.peak(static_cast<MemCategory>(c)));
  m.step_peak_total = memory.peak_total();
  m.peak_total = std::max(m.peak_total, m.step_peak_total);
  return m;
}

// A category's estimate is its measured peak, to the byte.
void expect_exact(int64_t estimated, size_t measured, const std::string& what) {
  EXPECT_EQ(estimated, static_cast<int64_t>(measured)) << what;
}

// Every category's estimate is its measured peak, to the byte.
void expect_every_category(const MemoryEstimate& e, const Measured& m, const std::string& what) {
  for (int c = 0; c < kNumMemCategories; ++c)
    expect_exact(e.of(static_cast<MemCategory>(c)), m.peak[c],
                 what + " " + mem_category_name(static_cast<MemCategory>(c)));
}

// The device total: an upper bound of the measured peak, within 10% of it.
void expect_total(int64_t estimated, size_t measured, const std::string& what) {
  const auto m = static_cast<int64_t>(measured);
  EXPECT_GE(estimated, m) << what;
  EXPECT_LE(estimated - m, m / 10) << what << ": estimated " << estimated << " measured " << m;
}

TEST(Estimator, MatchesMeasuredPeaks) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int N = comm.world_size();
  const bool root = comm.rank() == 0;
  if (root)
    std::printf("%-6s N stage ckpt zero   %10s %10s %10s %10s %10s %10s\n", "preset", "params",
                "grads", "optim", "activ", "buffers", "total");
  for (const std::string preset : {"tiny", "small"}) {
    const ModelConfig cfg = preset_config(preset);
    for (int stage = 0; stage <= 3; ++stage) {
      for (int ckpt : {0, 1}) {
        for (bool tight : {false, true}) {
          ZeroConfig zero;
          zero.stage = stage;
          if (tight) {  // small buckets and stage-3 bounds: packing, prefetch, release
            zero.overlap_comm = stage % 2 == 0;
            zero.reduce_bucket_size = 10'000;
            zero.prefetch_bucket_size = 2 * cfg.hidden_size * cfg.hidden_size;
            zero.param_persistence_threshold = 0;
            zero.max_reuse_distance = 0;
          }
          ActivationCheckpointing ac;
          ac.every = ckpt;
          EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
          spec.precision = tight ? Precision::kFp32 : Precision::kBf16;
          spec.ac = ac;
          const MemoryEstimate e = estimate_memory(spec, N);
          const Measured m = train_two_steps(comm, spec);
          const std::string what = preset + " N=" + std::to_string(N) + " stage " +
                                   std::to_string(stage) + " ckpt " + std::to_string(ckpt) +
                                   (tight ? " tight/fp32" : " default/bf16");
          auto peak = [&](MemCategory c) { return m.peak[static_cast<int>(c)]; };
          expect_every_category(e, m, what);
          expect_total(e.device_total(), m.peak_total, what + " total");
          expect_total(e.step_total(), m.step_peak_total, what + " step total");
          if (root)
            std::printf(
                "%-6s %d %5d %4d %-6s est %10lld %10lld %10lld %10lld %10lld %10lld\n"
                "%-6s %d %5d %4d %-6s got %10zu %10zu %10zu %10zu %10zu %10zu\n",
                preset.c_str(), N, stage, ckpt, tight ? "tight" : "dflt",
                static_cast<long long>(e.params), static_cast<long long>(e.grads),
                static_cast<long long>(e.optimizer), static_cast<long long>(e.activations),
                static_cast<long long>(e.buffers_peak()), static_cast<long long>(e.device_total()),
                preset.c_str(), N, stage, ckpt, tight ? "tight" : "dflt",
                peak(MemCategory::kParams), peak(MemCategory::kGrads),
                peak(MemCategory::kOptimizer), peak(MemCategory::kActivations),
                peak(MemCategory::kCommBuffers), m.peak_total);
        }
      }
    }
  }
}

// World-invariant training: shards padded to whole norm blocks, the micro-batch tree's log2(A) + 1
// shard buffers (grads), a reduce bucket and receive shard at every stage and the norm blocks
// (buffers), estimated to the byte like every other category.
TEST(Estimator, WorldInvariantBuffersMatchMeasuredPeaks) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int N = comm.world_size();
  for (const std::string preset : {"tiny", "small"}) {
    const ModelConfig cfg = preset_config(preset);
    for (int stage = 0; stage <= 3; ++stage) {
      for (int64_t accum : {1, 4}) {
        ZeroConfig zero;
        zero.stage = stage;
        zero.world_invariant = true;
        EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
        spec.grad_accum = accum;
        const MemoryEstimate e = estimate_memory(spec, N);
        const Measured m = train_two_steps(comm, spec);
        const std::string what = preset + " N=" + std::to_string(N) + " stage " +
                                 std::to_string(stage) + " accum " + std::to_string(accum);
        expect_every_category(e, m, what);
        expect_total(e.device_total(), m.peak_total, what + " total");
      }
    }
  }
}

// Frozen parameters (model/trainable.h) on the small preset: its head and layer 3's MLP (layer 3
// then keeps its whole group's state, the embedding and layers 0-2 have none), and its head alone
// (the reduce slots then shrink to the head's size, far below a layer's). Every category is the
// measured peak to the byte, at every stage, with and without offload.
TEST(Estimator, FrozenModelMatchesMeasuredPeaks) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int N = comm.world_size();
  const ModelConfig cfg = preset_config("small");
  const std::vector<std::vector<std::string>> sets = {
      {"^lm_head\\.", "^model\\.norm\\.", "layers\\.3\\.mlp\\."},
      {"^lm_head\\.", "^model\\.norm\\."}};
  for (const std::vector<std::string>& patterns : sets) {
    const TrainableSet trainable = TrainableSet::from_patterns(ParamLayout(cfg), patterns, {});
    for (int stage = 0; stage <= 3; ++stage) {
      for (bool offloaded : {false, true}) {
        if (offloaded && stage == 0) continue;
        ZeroConfig zero;
        zero.stage = stage;
        zero.reduce_bucket_size = 10'000;  // packing buckets
        OffloadConfig offload;
        if (offloaded) offload.optimizer = OffloadDevice::kCpu;
        if (offloaded && stage == 3) offload.param = OffloadDevice::kCpu;
        EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
        spec.offload = offload;
        spec.trainable = trainable;
        const MemoryEstimate e = estimate_memory(spec, N);
        const Measured m = train_two_steps(comm, spec);
        const std::string what = "frozen (" + std::to_string(patterns.size()) +
                                 " patterns) N=" + std::to_string(N) + " stage " +
                                 std::to_string(stage) + (offloaded ? " offload" : "");
        expect_every_category(e, m, what);
        expect_total(e.device_total(), m.peak_total, what + " total");
      }
    }
  }
}

// bf16 activations read the bf16 working params as they are stored: the engine keeps no fp32
// upcast of the group being computed. The buffers shrink by exactly that upcast, measured and
// estimated alike, and every category is the estimate to the byte.
TEST(Estimator, Bf16ActivationsNeedNoParamUpcastBuffer) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const ModelConfig cfg = preset_config("small");
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroConfig zero;
    zero.stage = stage;
    const std::string what = "stage " + std::to_string(stage);
    const EngineSpec fp32 = engine_spec_for(cfg, zero, kMicro, kSeq);
    EngineSpec bf16 = fp32;
    bf16.activation_storage = DType::kBf16;
    const MemoryEstimate e32 = estimate_memory(fp32, comm.world_size());
    const MemoryEstimate e16 = estimate_memory(bf16, comm.world_size());
    const Measured m32 = train_two_steps(comm, fp32);
    const Measured m16 = train_two_steps(comm, bf16);
    const auto buffers = static_cast<int>(MemCategory::kCommBuffers);
    // The largest group's padded size, in fp32: the upcast buffer.
    const int64_t upcast = e32.buffers - e16.buffers;
    EXPECT_GT(upcast, 0) << what;
    EXPECT_EQ(static_cast<int64_t>(m32.peak[buffers]) - static_cast<int64_t>(m16.peak[buffers]),
              upcast)
        << what;
    expect_every_category(e16, m16, what);
    expect_total(e16.device_total(), m16.peak_total, what + " total");
  }
}

TEST(Estimator, CpuCheckpointingGoesToTheHostPool) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const ModelConfig cfg = preset_config("small");
  ZeroConfig zero;
  zero.stage = 2;
  ActivationCheckpointing ac;
  ac.every = 2;
  ac.on_host = true;
  EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
  spec.ac = ac;
  const MemoryEstimate e = estimate_memory(spec, comm.world_size());
  const Measured m = train_two_steps(comm, spec);
  EXPECT_GT(e.host, 0);
  expect_every_category(e, m, "cpu checkpointing");
  expect_total(e.device_total(), m.peak_total, "total");
}

// Offload modes: the host and nvme pools and the device categories the offload shrinks, against
// the measured peaks. Small tiles so that the NVMe store has several records per group.
TEST(Estimator, OffloadModesMatchMeasuredPeaks) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int N = comm.world_size();
  const ModelConfig cfg = preset_config("small");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("zt_estimator_nvme_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Mode {
    const char* name;
    OffloadDevice optimizer, param;
    int min_stage;
  };
  const Mode modes[] = {{"cpu optimizer", OffloadDevice::kCpu, OffloadDevice::kNone, 1},
                        {"nvme optimizer", OffloadDevice::kNvme, OffloadDevice::kNone, 1},
                        {"cpu optimizer+params", OffloadDevice::kCpu, OffloadDevice::kCpu, 3}};
  for (const Mode& mode : modes) {
    for (int stage = mode.min_stage; stage <= 3; ++stage) {
      ZeroConfig zero;
      zero.stage = stage;
      zero.prefetch_bucket_size = 2 * cfg.hidden_size * cfg.hidden_size;
      zero.param_persistence_threshold = 0;
      OffloadConfig offload;
      offload.optimizer = mode.optimizer;
      offload.param = mode.param;
      offload.nvme_path = dir.string();
      offload.sub_group_size = 20'000;
      EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
      spec.offload = offload;
      const MemoryEstimate e = estimate_memory(spec, N);
      const Measured m = train_two_steps(comm, spec);
      const std::string what =
          std::string(mode.name) + " N=" + std::to_string(N) + " stage " + std::to_string(stage);
      auto peak = [&](MemCategory c) { return m.peak[static_cast<int>(c)]; };
      EXPECT_EQ(peak(MemCategory::kOptimizer), 0u) << what;
      EXPECT_EQ(e.optimizer, 0) << what;
      expect_every_category(e, m, what);
      expect_total(e.device_total(), m.peak_total, what + " total");
      expect_total(e.step_total(), m.step_peak_total, what + " step total");
      if (comm.rank() == 0)
        std::printf(
            "%-22s stage %d host est %10lld got %10zu  nvme est %10lld got %10zu  "
            "device est %10lld got %10zu\n",
            mode.name, stage, static_cast<long long>(e.host), peak(MemCategory::kHostOffload),
            static_cast<long long>(e.nvme), peak(MemCategory::kNvme),
            static_cast<long long>(e.device_total()), m.peak_total);
    }
  }
  // Each rank made its own directory (its pid's): each removes its own.
  comm.barrier();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zt
