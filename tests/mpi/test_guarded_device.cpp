// The ZeRO engine on guarded device memory (tests/support/guarded_device.h), at the world size the
// binary is launched with (1, 2, 4). Device-pool buffers are unreadable from host code, the
// backend refuses host tensors and the data-plane communicator refuses host buffers, as on a GPU
// with NCCL. Training at every stage (bf16, and fp32 at stage 1), activation checkpointing (in
// device memory and cpu_checkpointing), every offload mode (bf16 gradient copies too), a
// checkpoint save and load in the middle, the fp32 master gather and the bf16 export must all run
// that way and give bitwise the losses, masters and exported weights of the plain CPU backend:
// what the CUDA backend needs of the engine, checked without a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"
#include "shared_dir_test.h"
#include "support/engine_spec_for.h"
#include "support/guarded_device.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kSeq = 16, kMicro = 2, kAccum = 2;
constexpr int kSteps = 4;  // a checkpoint after step 2, loaded into a fresh engine
constexpr int64_t kTile = 3000;

struct Outcome {
  std::vector<double> losses;
  engine_test::Masters masters;                         // rank 0
  std::map<std::string, std::vector<bf16_t>> exported;  // rank 0
  size_t device_buffers_left = 0;                       // guarded: live device buffers at the end
  uint64_t device_ordered_waits = 0;  // guarded: collectives the engine ordered on the device
};

struct RunSpec {
  int stage = 0;
  Precision precision = Precision::kBf16;
  OffloadConfig offload;
  std::string label;
  ActivationCheckpointing ac{};
  bool world_invariant = false;  // rank-tree reductions in the reduce slots' lent scratch
};

// Built member by member: brace-initialising RunSpec in place trips GCC 12's
// -Wmaybe-uninitialized on the OffloadConfig string.
RunSpec run_spec(int stage, Precision precision, const OffloadConfig& offload, std::string label,
                 ActivationCheckpointing ac = {}) {
  RunSpec spec;
  spec.stage = stage;
  spec.precision = precision;
  spec.offload = offload;
  spec.label = std::move(label);
  spec.ac = ac;
  return spec;
}

// Trains kSteps steps on the tiny preset, saving after step 2 and continuing in a new engine
// loaded from that checkpoint. guarded: the guarded backend and communicator over the plain ones
// (host scalars and checkpoint metadata on `world`).
Outcome train(MpiCommunicator& world, const RunSpec& spec, bool guarded, const fs::path& dir) {
  GuardedDeviceMemory device;  // outlives every buffer below
  auto cpu = make_cpu_backend();
  std::unique_ptr<Backend> guarded_backend;
  std::unique_ptr<Communicator> guarded_comm;
  Backend* backend = cpu.get();
  Communicator* data = &world;
  if (guarded) {
    guarded_backend = make_guarded_backend(*cpu, device);
    guarded_comm = make_guarded_communicator(world, device);
    backend = guarded_backend.get();
    data = guarded_comm.get();
  }
  const ModelConfig cfg = preset_config("tiny");
  ZeroConfig zero;
  zero.stage = spec.stage;
  zero.reduce_bucket_size = 20'000;     // packed reduce-scatter chunks
  zero.allgather_bucket_size = 20'000;  // chunked param all-gather (stages 1/2)
  zero.prefetch_bucket_size = 3 * 50'000;
  zero.param_persistence_threshold = 0;
  zero.world_invariant = spec.world_invariant;
  EngineSpec built = engine_spec_for(cfg, zero, kMicro, kSeq);
  built.precision = spec.precision;
  built.ac = spec.ac;
  built.offload = spec.offload;
  built.optim.lr = 2e-3f;
  built.optim.weight_decay = 0.1f;
  built.optim.clip = 0.5f;
  MemoryTracker memory(backend->device_memory());
  auto make = [&] { return std::make_unique<ZeroEngine>(built, *backend, *data, memory, &world); };
  Outcome out;
  TrainingProgress progress;
  auto run_steps = [&](ZeroEngine& engine, int first, int last) {
    for (int step = first; step <= last; ++step) {
      const engine_test::StepBatches batch(step, kAccum, kMicro, world.world_size(), world.rank(),
                                           kSeq, cfg.vocab_size);
      out.losses.push_back(
          engine.train_step(batch.input_ptrs, batch.target_ptrs, 1e-3f, step).loss);
      // A step returns with every device-ordered collective seen complete on the host.
      EXPECT_EQ(data->pending_device_waits(), 0u) << spec.label << " step " << step;
      progress.step = step;
      progress.tokens_seen += kAccum * kMicro * world.world_size() * kSeq;
    }
  };
  std::unique_ptr<ZeroEngine> engine = make();
  engine->init_from_seed(1234);
  run_steps(*engine, 1, kSteps / 2);
  const SavedCheckpoint saved = engine_test::save_test_checkpoint(
      *engine, progress, built.optim, kSteps, kMicro, kAccum, kSeq, dir.string());
  engine.reset();
  engine = make();
  load_checkpoint(*engine, saved.dir);
  run_steps(*engine, kSteps / 2 + 1, kSteps);
  out.masters = engine_test::rank0_masters(*engine);
  engine->for_each_full_tensor(false, [&](const TensorInfo& t, const void* values) {
    if (!values) return;
    const auto* v = static_cast<const bf16_t*>(values);
    out.exported[t.name].assign(v, v + t.numel);
  });
  engine.reset();
  out.device_buffers_left = device.live_buffers();
  out.device_ordered_waits = data->device_ordered_waits();
  return out;
}

class GuardedDeviceTest : public engine_test::SharedDirTest {
 protected:
  const char* dir_prefix() const override { return "zt_guarded_"; }

  void expect_guarded_matches_plain(const RunSpec& spec) {
    const Outcome plain = train(world_, spec, false, dir_ / (spec.label + "_plain"));
    const Outcome guarded = train(world_, spec, true, dir_ / (spec.label + "_guarded"));
    ASSERT_EQ(plain.losses.size(), static_cast<size_t>(kSteps)) << spec.label;
    EXPECT_EQ(std::memcmp(plain.losses.data(), guarded.losses.data(),
                          plain.losses.size() * sizeof(double)),
              0)
        << spec.label << ": losses differ";
    EXPECT_EQ(guarded.device_buffers_left, 0u) << spec.label << ": device buffers leaked";
    // The engine orders its reductions and gathers on the device (no host wait inside a step);
    // the plain MPI communicator cannot, and waits on the host. (Stage 0 on one rank issues no
    // collective.)
    if (spec.stage > 0 || world_.world_size() > 1) {
      EXPECT_GT(guarded.device_ordered_waits, 0u) << spec.label;
    }
    EXPECT_EQ(plain.device_ordered_waits, 0u) << spec.label;
    if (!root()) return;
    ASSERT_FALSE(plain.masters.empty()) << spec.label;
    EXPECT_EQ(plain.masters, guarded.masters) << spec.label << ": fp32 masters differ";
    EXPECT_EQ(plain.exported, guarded.exported) << spec.label << ": exported bf16 weights differ";
  }
};

TEST_F(GuardedDeviceTest, EveryStageMatchesThePlainCpuBackendBitwise) {
  for (int stage = 0; stage <= 3; ++stage)
    expect_guarded_matches_plain(
        run_spec(stage, Precision::kBf16, OffloadConfig{}, "s" + std::to_string(stage)));
  expect_guarded_matches_plain(run_spec(1, Precision::kFp32, OffloadConfig{}, "s1_fp32"));
  // Activation checkpointing: full, and every other layer with the kept inputs in host memory
  // (cpu_checkpointing: device transit buffers, copies out and back).
  expect_guarded_matches_plain(
      run_spec(2, Precision::kBf16, OffloadConfig{}, "s2_ckpt_full", {1, false}));
  expect_guarded_matches_plain(
      run_spec(3, Precision::kBf16, OffloadConfig{}, "s3_ckpt_cpu", {1, true}));
  expect_guarded_matches_plain(
      run_spec(0, Precision::kBf16, OffloadConfig{}, "s0_ckpt2_cpu", {2, true}));
  // World-invariant: from 4 ranks on, the reduce-scatters sum in each slot's planned scratch,
  // which is the collective's (off limits to the engine) until the slot is drained.
  for (int stage : {1, 3}) {
    RunSpec invariant =
        run_spec(stage, Precision::kBf16, OffloadConfig{}, "s" + std::to_string(stage) + "_inv");
    invariant.world_invariant = true;
    expect_guarded_matches_plain(invariant);
  }
}

TEST_F(GuardedDeviceTest, EveryOffloadModeMatchesThePlainCpuBackendBitwise) {
  const OffloadConfig nvme = nvme_offload(3, kTile);
  for (int stage = 1; stage <= 3; ++stage) {
    int i = 0;
    for (const auto& [name, offload] : engine_test::offload_modes(stage, kTile, nvme))
      expect_guarded_matches_plain(
          run_spec(stage, Precision::kBf16, offload,
                   "s" + std::to_string(stage) + "_o" + std::to_string(i++)));
  }
  OffloadConfig params_only;  // device optimizer, host params
  params_only.param = OffloadDevice::kCpu;
  expect_guarded_matches_plain(run_spec(3, Precision::kBf16, params_only, "s3_params_only"));
  // bf16 gradient copies: rounded on the device into its staging buffers, copied from there.
  for (int stage : {1, 3}) {
    OffloadConfig bf16_copies;
    bf16_copies.optimizer = OffloadDevice::kCpu;
    bf16_copies.sub_group_size = kTile;
    bf16_copies.bf16_gradient_copies = true;
    expect_guarded_matches_plain(run_spec(stage, Precision::kBf16, bf16_copies,
                                          "s" + std::to_string(stage) + "_bf16_copies"));
  }
}

TEST_F(GuardedDeviceTest, CommunicatorRefusesHostBuffers) {
  GuardedDeviceMemory device;
  std::unique_ptr<Communicator> comm = make_guarded_communicator(world_, device);
  std::vector<float> host(4, 1.0f);
  try {
    comm->all_reduce_sum(host.data(), host.size()).wait();
    ADD_FAILURE() << "a host buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collective recv buffer"), std::string::npos) << e.what();
  }
  // A device buffer goes through, and the sum is right.
  auto* d =
      static_cast<float*>(device.allocate(host.size() * sizeof(float), MemCategory::kCommBuffers));
  device.to_device(d, host.data(), host.size() * sizeof(float));
  comm->all_reduce_sum(d, host.size()).wait();
  device.to_host(host.data(), d, host.size() * sizeof(float));
  EXPECT_EQ(host[3], static_cast<float>(world_.world_size()));
  device.release(d, host.size() * sizeof(float));
}

// A collective's buffers are off limits to device work until it is waited for, on the host or
// with device_wait; device_wait leaves it pending for the host until finish_device_waits().
TEST_F(GuardedDeviceTest, BuffersOfACollectiveInFlightAreOffLimitsUntilWaited) {
  GuardedDeviceMemory device;
  auto cpu = make_cpu_backend();
  auto backend = make_guarded_backend(*cpu, device);
  std::unique_ptr<Communicator> comm = make_guarded_communicator(world_, device);
  const size_t n = 8;
  auto* d = static_cast<float*>(device.allocate(n * sizeof(float), MemCategory::kCommBuffers));
  auto* other = static_cast<float*>(device.allocate(n * sizeof(float), MemCategory::kCommBuffers));
  const std::vector<float> ones(n, 1.0f);
  device.to_device(d, ones.data(), n * sizeof(float));
  CommHandle h = comm->all_reduce_sum(d, n);
  EXPECT_EQ(device.in_flight_buffers(), 1u);
  try {
    backend->add_inplace(other, d + 2, 4);
    ADD_FAILURE() << "a read of an in-flight recv buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_inplace x"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("all_reduce #0 recv"), std::string::npos) << e.what();
  }
  EXPECT_THROW(device.zero(d, sizeof(float)), Error);
  EXPECT_THROW(comm->all_reduce_sum(d + 4, 4), Error);  // another collective on the same bytes
  backend->add_inplace(other, other, n);                // untouched buffers stay usable
  comm->device_wait(h);
  EXPECT_TRUE(h.done());
  EXPECT_EQ(device.in_flight_buffers(), 0u);
  EXPECT_EQ(comm->pending_device_waits(), 1u);
  backend->scale_inplace(d, 0.5f, static_cast<int64_t>(n));  // ordered after the collective
  EXPECT_GE(comm->finish_device_waits(), 0.0);
  EXPECT_EQ(comm->pending_device_waits(), 0u);
  EXPECT_EQ(comm->device_ordered_waits(), 1u);
  std::vector<float> out(n);
  device.to_host(out.data(), d, n * sizeof(float));
  EXPECT_EQ(out[n - 1], 0.5f * static_cast<float>(world_.world_size()));
  // The plain MPI communicator has no device to order: device_wait is a host wait.
  std::vector<float> host(n, 1.0f);
  CommHandle mpi = world_.all_reduce_sum(host.data(), n);
  world_.device_wait(mpi);
  EXPECT_TRUE(mpi.done());
  EXPECT_EQ(world_.pending_device_waits(), 0u);
  EXPECT_EQ(host[0], static_cast<float>(world_.world_size()));
  device.release(d, n * sizeof(float));
  device.release(other, n * sizeof(float));
}

}  // namespace
}  // namespace zt
