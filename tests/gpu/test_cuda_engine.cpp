// The ZeRO engine on the CUDA backend (label gpu; skipped without a GPU). Against the CPU backend:
//   * 10 steps of the small preset track the CPU losses within bf16 tolerance (the GEMMs use
//     bf16 tensor cores, the CPU fp32);
//   * two GPU runs give bitwise-identical losses (deterministic kernels, no float atomics);
//   * at world size 1 over NCCL, stages 1-3 give bitwise stage 0's losses (as on the CPU);
//   * optimizer offload to the CPU (pinned buffers, copy stream, CPU AdamW) and optimizer +
//     param offload give bitwise the losses without offload (the CUDA AdamW is the CPU formula);
//   * ranks sharing one GPU (the staged MPI communicator; run under mpirun -np 2): every stage
//     tracks one rank's stage 0 within fp32 reduction-order tolerance;
//   * one GPU per rank over NCCL (mpirun -np 2, skipped with fewer GPUs): the same;
//   * activation checkpointing (kept inputs on the device or the host) changes no bit, and the
//     phase times are device intervals inside the step;
//   * bf16 activation storage tracks the CPU's and is deterministic;
//   * device memory the GPU cannot hold is a fallback (an arena) or an error naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../mpi/engine_test_support.h"
#include "../support/family_shapes.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device_memory.h"
#include "backend/cuda/cuda_devices.h"
#include "comm/cuda/staged_device_communicator.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "util/bf16.h"
#include "util/error.h"
#if ZEROTRAIN_HAVE_NCCL
#include "comm/cuda/nccl_communicator.h"
#endif

namespace zt {
namespace {

constexpr int64_t kSeq = 64, kMicro = 2, kAccum = 2;

// `steps` steps of the small preset at `stage`, on `backend` with collectives on `data` (host
// scalars on `host`), `accum` micro-batches per rank and step; the host clock's seconds around
// each train_step go to `wall_s` when given. `probe`: a gradient probe instead (β1 = 0, no
// clipping, lr 0: Adam's m is the gradient), whose final own state goes to `probe`.
std::vector<StepStats> train_steps(Backend& backend, Communicator& data, Communicator& host,
                                   int stage, int steps, int64_t accum,
                                   const OffloadConfig& offload, const ActivationCheckpointing& ac,
                                   DType storage = DType::kFloat32,
                                   std::vector<double>* wall_s = nullptr,
                                   engine_test::OwnState* probe = nullptr,
                                   const ModelConfig* model = nullptr) {
  EngineSpec spec;
  spec.model = model ? *model : preset_config("small");
  const ModelConfig& cfg = spec.model;
  // What train gives it: with LoRA adapters they train and the base is frozen (model/trainable.h).
  spec.trainable = TrainableSet::from_patterns(ParamLayout(cfg), {}, {});
  spec.zero.stage = stage;
  spec.zero.reduce_bucket_size = 200'000;
  spec.zero.allgather_bucket_size = 200'000;
  spec.optim.lr = 1e-3f;
  spec.optim.weight_decay = 0.1f;
  spec.optim.clip = probe ? 0.0f : 1.0f;
  if (probe) spec.optim.beta1 = 0.0f;
  // fp16 activations go with fp16 working params (and the default dynamic loss scaler).
  spec.precision = storage == DType::kFloat16 ? Precision::kFp16 : Precision::kBf16;
  spec.activation_storage = storage;
  spec.micro_batch = kMicro;
  spec.seq_len = kSeq;
  spec.ac = ac;
  spec.offload = offload;
  MemoryTracker memory(backend.device_memory());
  ZeroEngine engine(spec, backend, data, memory, &host);
  engine.init_from_seed(42);
  std::vector<StepStats> stats;
  for (int step = 1; step <= steps; ++step) {
    const engine_test::StepBatches batch(step, accum, kMicro, data.world_size(), data.rank(), kSeq,
                                         cfg.vocab_size);
    const auto t0 = std::chrono::steady_clock::now();
    stats.push_back(
        engine.train_step(batch.input_ptrs, batch.target_ptrs, probe ? 0.0f : 1e-3f, step));
    if (wall_s)
      wall_s->push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (probe) *probe = engine_test::own_state(engine);
  return stats;
}

std::vector<double> train_losses(Backend& backend, Communicator& data, Communicator& host,
                                 int stage, int steps, int64_t accum = kAccum,
                                 const OffloadConfig& offload = {},
                                 const ActivationCheckpointing& ac = {},
                                 DType storage = DType::kFloat32) {
  std::vector<double> losses;
  for (const StepStats& s :
       train_steps(backend, data, host, stage, steps, accum, offload, ac, storage))
    losses.push_back(s.loss);
  return losses;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i])) << what << ", step " << i + 1;
}

TEST(CudaEngine, SmallPresetTracksTheCpuLossesAndIsDeterministic) {
  MpiCommunicator self(MPI_COMM_SELF);
  auto cpu = make_cpu_backend();
  const std::vector<double> reference = train_losses(*cpu, self, self, 2, 10);
  auto gpu = make_cuda_backend(0);
  cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
  const std::vector<double> first = train_losses(*gpu, staged, self, 2, 10);
  const std::vector<double> second = train_losses(*gpu, staged, self, 2, 10);
  expect_close(first, reference, 2e-2, "cuda vs cpu, stage 2");
  EXPECT_EQ(first, second) << "two GPU runs differ";
  for (size_t i = 0; i < first.size(); ++i)
    std::printf("step %2zu  cpu %.6f  cuda %.6f\n", i + 1, reference[i], first[i]);
}

// The families' own paths on the device, each against the CPU backend at stage 2 in bf16 and
// deterministic: Phi-4-mini's shape (fused projections with LoRA on them, longrope whose
// windows of 64 pass its original length of 32 and take the long factors, RoPE on 24 of each
// head's 32 elements, tied embeddings), SmolLM3's (every second layer without RoPE) and Gemma's
// ((1 + weight) norms, the embedding times sqrt(hidden), GeGLU, a head_dim of 64 ≠ 256 / 8), and
// Gemma 2's (Gemma's with sandwich norms, its own scale and soft caps small enough to bend these
// scores and logits: the GEMM attention path's capped softmax, the capped cross-entropy), and
// OLMo 2's (norms after the attention and the MLP only, q/k norms over rows of heads·head_dim),
// Granite's (its four scalars: the scaled branches and logits), and GLM-4's (RoPE in adjacent
// pairs on half of each head: the unchunked rotation; q/k/v biases, norms on the outputs).
TEST(CudaEngine, FamilyPathsTrackTheCpuLosses) {
  ModelConfig phi4 = preset_config("small");  // hidden 256, 8 heads of 32, 4 layers
  phi4.fused_projections = true;
  phi4.tie_word_embeddings = true;
  phi4.partial_rotary_factor = 0.75;
  RopeScalingParams& r = phi4.rope_scaling;
  r.type = RopeScaling::kLongrope;
  r.original_max_positions = kSeq / 2;
  r.short_factor = {1.0, 1.3, 2.1, 3.7, 5.3, 8.9, 11.0, 13.0, 17.0, 19.0, 23.0, 29.0};
  r.long_factor = {1.3, 2.9, 5.1, 9.7, 15.3, 27.1, 31.0, 37.0, 41.0, 43.0, 47.0, 53.0};
  phi4.max_position_embeddings = 4 * kSeq;
  r.attention_factor = longrope_attention_factor(phi4.max_position_embeddings, kSeq / 2);
  LoraSpec lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.set_targets({"all-linear"}, "test");
  (void)phi4.set_lora(lora);
  ModelConfig smollm3 = preset_config("small");
  smollm3.layers_without_rope = {1, 3};
  ModelConfig gemma = preset_config("small");  // (1 + weight) norms, scaled embedding, GeGLU
  gemma.use_gemma_math();
  gemma.tie_word_embeddings = true;
  gemma.explicit_head_dim = 64;  // ≠ hidden / heads, as gemma-7b's 256
  ModelConfig gemma2 = gemma;
  gemma2.sandwich_norms = true;
  gemma2.query_pre_attn_scalar = 48;
  gemma2.attn_logit_softcap = 2.0f;
  gemma2.final_logit_softcap = 3.0f;
  ModelConfig olmo2 = olmo2_from_llama_shape(preset_config("small"));
  ModelConfig olmo3 = olmo3_from_llama_shape(preset_config("small"), kSeq / 2);
  ModelConfig granite = granite_from_llama_shape(preset_config("small"));
  ModelConfig glm4 = glm4_from_llama_shape(preset_config("small"));
  for (const ModelConfig* model :
       {&phi4, &smollm3, &gemma, &gemma2, &olmo2, &olmo3, &granite, &glm4}) {
    model->validate();
    const std::string name = model->model_type();
    MpiCommunicator self(MPI_COMM_SELF);
    auto cpu = make_cpu_backend();
    auto losses = [&](Backend& backend, Communicator& data) {
      std::vector<double> out;
      for (const StepStats& s : train_steps(backend, data, self, 2, 6, kAccum, {}, {},
                                            DType::kFloat32, nullptr, nullptr, model))
        out.push_back(s.loss);
      return out;
    };
    const std::vector<double> reference = losses(*cpu, self);
    auto gpu = make_cuda_backend(0);
    cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
    const std::vector<double> first = losses(*gpu, staged);
    expect_close(first, reference, 2e-2, name + ": cuda vs cpu, stage 2");
    EXPECT_EQ(first, losses(*gpu, staged)) << name << ": two GPU runs differ";
    for (size_t i = 0; i < first.size(); ++i)
      std::printf("%s step %zu  cpu %.6f  cuda %.6f\n", name.c_str(), i + 1, reference[i],
                  first[i]);
  }
}

// bf16 activation storage (--activations bf16, bf16 working params read as stored): tracks the
// CPU backend's implementation of the same contract within the fp32-storage tolerance (the
// GEMMs' summation order differs, the rounding points do not), is deterministic, and stage 3
// and activation checkpointing give stage 0's bits; the fp32-storage run differs (it took effect).
TEST(CudaEngine, Bf16ActivationStorageTracksTheCpuAndIsDeterministic) {
  MpiCommunicator self(MPI_COMM_SELF);
  const DType bf16 = DType::kBf16;
  auto cpu = make_cpu_backend();
  const std::vector<double> reference = train_losses(*cpu, self, self, 0, 10, kAccum, {}, {}, bf16);
  auto gpu = make_cuda_backend(0);
  cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
  const std::vector<double> first = train_losses(*gpu, staged, self, 0, 10, kAccum, {}, {}, bf16);
  expect_close(first, reference, 2e-2, "cuda vs cpu, bf16 activations");
  EXPECT_EQ(train_losses(*gpu, staged, self, 0, 10, kAccum, {}, {}, bf16), first)
      << "two GPU runs differ";
  EXPECT_EQ(train_losses(*gpu, staged, self, 3, 10, kAccum, {}, {}, bf16), first) << "stage 3";
  ActivationCheckpointing ac;
  ac.every = 1;
  EXPECT_EQ(train_losses(*gpu, staged, self, 0, 10, kAccum, {}, ac, bf16), first)
      << "checkpointing";
  ActivationCheckpointing selective;
  selective.selective = true;  // the norms and SwiGLU recomputed by the same kernels
  EXPECT_EQ(train_losses(*gpu, staged, self, 3, 10, kAccum, {}, selective, bf16), first)
      << "selective checkpointing at stage 3";
  EXPECT_NE(train_losses(*gpu, staged, self, 0, 10), first) << "fp32 storage gave the same bits";
  for (size_t i = 0; i < first.size(); ++i)
    std::printf("step %2zu  cpu bf16-act %.6f  cuda bf16-act %.6f\n", i + 1, reference[i],
                first[i]);
}

// fp16 (--precision fp16 --activations fp16): tracks the CPU backend's fp16 contract within the
// bf16 test's tolerance (fp16 rounds 8× finer), makes the same loss-scale and skip decisions,
// is deterministic, and stage 3 gives stage 0's bits.
TEST(CudaEngine, Fp16TracksTheCpuWithTheSameLossScalesAndIsDeterministic) {
  MpiCommunicator self(MPI_COMM_SELF);
  const DType fp16 = DType::kFloat16;
  auto cpu = make_cpu_backend();
  const std::vector<StepStats> reference =
      train_steps(*cpu, self, self, 0, 10, kAccum, {}, {}, fp16);
  auto gpu = make_cuda_backend(0);
  cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
  const std::vector<StepStats> first = train_steps(*gpu, staged, self, 0, 10, kAccum, {}, {}, fp16);
  std::vector<double> want, got;
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_EQ(first[i].loss_scale, reference[i].loss_scale) << "step " << i + 1;
    EXPECT_EQ(first[i].skipped, reference[i].skipped) << "step " << i + 1;
    want.push_back(reference[i].loss);
    got.push_back(first[i].loss);
    std::printf("step %2zu  cpu fp16 %.6f  cuda fp16 %.6f  scale %g%s\n", i + 1, want.back(),
                got.back(), first[i].loss_scale, first[i].skipped ? "  skipped" : "");
  }
  expect_close(got, want, 2e-2, "cuda vs cpu, fp16");
  EXPECT_EQ(train_losses(*gpu, staged, self, 0, 10, kAccum, {}, {}, fp16), got)
      << "two GPU runs differ";
  EXPECT_EQ(train_losses(*gpu, staged, self, 3, 10, kAccum, {}, {}, fp16), got) << "stage 3";
}

TEST(CudaEngine, OffloadMatchesNoOffloadBitwise) {
  MpiCommunicator self(MPI_COMM_SELF);
  auto gpu = make_cuda_backend(0);
  cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
  OffloadConfig cpu;
  cpu.optimizer = OffloadDevice::kCpu;
  cpu.sub_group_size = 100'000;  // several tiles per group
  for (int stage : {1, 2, 3}) {
    const std::vector<double> plain = train_losses(*gpu, staged, self, stage, 4);
    EXPECT_EQ(train_losses(*gpu, staged, self, stage, 4, kAccum, cpu), plain)
        << "optimizer offload, stage " << stage;
  }
  OffloadConfig both = cpu;
  both.param = OffloadDevice::kCpu;
  EXPECT_EQ(train_losses(*gpu, staged, self, 3, 4, kAccum, both),
            train_losses(*gpu, staged, self, 3, 4))
      << "optimizer + param offload, stage 3";
}

// bf16 gradient copies (docs/offload.md): the device rounds each shard into a staging buffer the
// copy stream reads. Each step moves half the device→host bytes of fp32 copies; the overlap is
// bitwise the run without it; the run tracks the CPU backend's run with the same copies within
// the fp32-storage tolerance; and a gradient probe reads on the host exactly the bf16 rounding of
// the gradient the GPU reduces without offload.
TEST(CudaEngine, Bf16GradientCopiesHalveTheBytesAndTrackTheCpu) {
  MpiCommunicator self(MPI_COMM_SELF);
  auto gpu = make_cuda_backend(0);
  auto cpu = make_cpu_backend();
  cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
  OffloadConfig fp32_copies;
  fp32_copies.optimizer = OffloadDevice::kCpu;
  fp32_copies.sub_group_size = 100'000;
  fp32_copies.overlap = false;
  OffloadConfig bf16_copies = fp32_copies;
  bf16_copies.bf16_gradient_copies = true;
  OffloadConfig overlapped = bf16_copies;
  overlapped.overlap = true;
  const auto losses = [](const std::vector<StepStats>& stats) {
    std::vector<double> out;
    for (const StepStats& s : stats) out.push_back(s.loss);
    return out;
  };
  for (int stage : {1, 3}) {
    const std::string at = "stage " + std::to_string(stage);
    const std::vector<StepStats> f =
        train_steps(*gpu, staged, self, stage, 4, kAccum, fp32_copies, {});
    const std::vector<StepStats> b =
        train_steps(*gpu, staged, self, stage, 4, kAccum, bf16_copies, {});
    for (size_t i = 0; i < f.size(); ++i) {
      EXPECT_GT(f[i].offload_d2h_bytes, 0u) << at;
      EXPECT_EQ(2 * b[i].offload_d2h_bytes, f[i].offload_d2h_bytes) << at << ", step " << i + 1;
    }
    EXPECT_EQ(train_losses(*gpu, staged, self, stage, 4, kAccum, overlapped), losses(b))
        << at << ": overlap on against off, bf16 copies";
    expect_close(losses(b), train_losses(*cpu, self, self, stage, 4, kAccum, bf16_copies), 2e-2,
                 at + ": cuda vs cpu, bf16 copies");
    // What the host read, element by element: the bf16 rounding of the gradient the same GPU
    // reduces without offload (a staging buffer rewritten before its copy would not be).
    engine_test::OwnState reduced, read;
    train_steps(*gpu, staged, self, stage, 1, kAccum, {}, {}, DType::kFloat32, nullptr, &reduced);
    train_steps(*gpu, staged, self, stage, 1, kAccum, overlapped, {}, DType::kFloat32, nullptr,
                &read);
    ASSERT_EQ(read.m.size(), reduced.m.size()) << at;
    for (size_t g = 0; g < reduced.m.size(); ++g) {
      ASSERT_EQ(read.m[g].size(), reduced.m[g].size()) << at << ", group " << g;
      for (size_t e = 0; e < reduced.m[g].size(); ++e)
        ASSERT_EQ(read.m[g][e], bf16_to_float(float_to_bf16(reduced.m[g][e])))
            << at << ", group " << g << ", element " << e;
    }
  }
}

#if ZEROTRAIN_HAVE_NCCL
TEST(CudaEngine, NcclWorldOfOneEveryStageMatchesStageZeroBitwise) {
  MpiCommunicator self(MPI_COMM_SELF);
  auto gpu = make_cuda_backend(0);
  NcclCommunicator nccl(MPI_COMM_SELF, 0);
  nccl.set_producer_stream(gpu->stream_handle());
  const std::vector<double> stage0 = train_losses(*gpu, nccl, self, 0, 4);
  for (int stage = 1; stage <= 3; ++stage)
    EXPECT_EQ(train_losses(*gpu, nccl, self, stage, 4), stage0) << "stage " << stage;
  // The engine ordered its collectives on the compute stream instead of waiting on the host.
  EXPECT_GT(nccl.device_ordered_waits(), 0u);
  EXPECT_EQ(nccl.pending_device_waits(), 0u);
}

// Activation checkpointing recomputes the same kernels on the same inputs: bitwise the losses
// without it, also when the kept inputs travel to pinned host memory and back on the compute
// stream (cpu_checkpointing's queued copies) behind NCCL's device-ordered waits.
TEST(CudaEngine, CheckpointingOnDeviceAndHostIsBitwiseIdentical) {
  MpiCommunicator self(MPI_COMM_SELF);
  auto gpu = make_cuda_backend(0);
  NcclCommunicator nccl(MPI_COMM_SELF, 0);
  nccl.set_producer_stream(gpu->stream_handle());
  for (int stage : {0, 3}) {
    const std::vector<double> plain = train_losses(*gpu, nccl, self, stage, 3);
    for (bool on_host : {false, true}) {
      ActivationCheckpointing ac;
      ac.every = 1;
      ac.on_host = on_host;
      EXPECT_EQ(train_losses(*gpu, nccl, self, stage, 3, kAccum, {}, ac), plain)
          << "stage " << stage << (on_host ? ", cpu_checkpointing" : ", on the device");
    }
  }
}

// Phase times come from CUDA events on the compute stream: the device's forward, backward and
// optimizer are disjoint parts of the step, so they add up to no more than the host's wall time
// around train_step (which ends with a synchronize); each is a real interval.
TEST(CudaEngine, PhaseTimesAreDeviceIntervalsWithinTheStep) {
  MpiCommunicator self(MPI_COMM_SELF);
  auto gpu = make_cuda_backend(0);
  NcclCommunicator nccl(MPI_COMM_SELF, 0);
  nccl.set_producer_stream(gpu->stream_handle());
  for (int stage : {0, 2, 3}) {
    std::vector<double> wall;
    const std::vector<StepStats> stats =
        train_steps(*gpu, nccl, self, stage, 4, kAccum, {}, {}, DType::kFloat32, &wall);
    for (size_t i = 0; i < stats.size(); ++i) {
      const StepStats& s = stats[i];
      const std::string what = "stage " + std::to_string(stage) + " step " + std::to_string(i + 1);
      EXPECT_GT(s.forward_s, 0.0) << what;
      EXPECT_GT(s.backward_s, 0.0) << what;
      EXPECT_GT(s.optimizer_s, 0.0) << what;
      EXPECT_GE(s.comm_wait_s, 0.0) << what;
      EXPECT_LE(s.forward_s + s.backward_s + s.optimizer_s, wall[i]) << what;
      std::printf(
          "[ phases ] %s: forward %.3f ms, backward %.3f ms, optimizer %.3f ms, comm wait "
          "%.3f ms, wall %.3f ms\n",
          what.c_str(), s.forward_s * 1e3, s.backward_s * 1e3, s.optimizer_s * 1e3,
          s.comm_wait_s * 1e3, wall[i] * 1e3);
    }
  }
}
#endif

// Under mpirun -np 2 (gpu_engine_shared_np2): both ranks on GPU 0 through the staged
// communicator, against one rank's stage 0 computed by every rank alone.
TEST(CudaEngineShared, EveryStageTracksOneRankStageZero) {
  MpiCommunicator world(MPI_COMM_WORLD), self(MPI_COMM_SELF);
  auto gpu = make_cuda_backend(0);
  cuda::StagedDeviceCommunicator alone(MPI_COMM_SELF), shared(MPI_COMM_WORLD);
  // One rank with world_size times the micro-batches sees the same global batch (StepBatches),
  // so the losses agree up to fp32 reduction order.
  const int world_size = world.world_size();
  const std::vector<double> one_rank = train_losses(*gpu, alone, self, 0, 4, kAccum * world_size);
  for (int stage = 0; stage <= 3; ++stage) {
    const std::vector<double> got = train_losses(*gpu, shared, world, stage, 4);
    if (world_size == 1)
      EXPECT_EQ(got, one_rank) << "stage " << stage;
    else
      expect_close(
          got, one_rank, 1e-3,
          "stage " + std::to_string(stage) + " on " + std::to_string(world_size) + " ranks");
  }
}

#if ZEROTRAIN_HAVE_NCCL
// Under mpirun -np 2 (gpu_engine_nccl_np2): one GPU per rank over NCCL, every stage against one
// rank's stage 0; skipped where fewer GPUs than ranks are visible (NCCL cannot share a GPU).
TEST(CudaEngineNccl, EveryStageOnSeveralGpusTracksOneRankStageZero) {
  MpiCommunicator world(MPI_COMM_WORLD), self(MPI_COMM_SELF);
  const int world_size = world.world_size();
  if (cuda_device_count() < world_size)
    GTEST_SKIP() << world_size << " ranks need as many GPUs; " << cuda_device_count() << " visible";
  auto gpu = make_cuda_backend(world.rank());
  cuda::StagedDeviceCommunicator alone(MPI_COMM_SELF);
  NcclCommunicator nccl(MPI_COMM_WORLD, world.rank());
  nccl.set_producer_stream(gpu->stream_handle());
  const std::vector<double> one_rank = train_losses(*gpu, alone, self, 0, 4, kAccum * world_size);
  for (int stage = 0; stage <= 3; ++stage)
    expect_close(
        train_losses(*gpu, nccl, world, stage, 4), one_rank, 1e-3,
        "NCCL stage " + std::to_string(stage) + " on " + std::to_string(world_size) + " GPUs");
}
#endif

// What the GPU cannot hold (engine_device.cpp's arenas): an arena is not reserved and its
// category takes cudaMalloc per allocation; an allocation is an error naming the category, the
// bytes and the GPU's free memory, after which the memory still serves what fits.
TEST(CudaDeviceMemory, WhatTheGpuCannotHoldIsAFallbackOrAnErrorNamingIt) {
  auto gpu = make_cuda_backend(0);
  cuda::CudaDeviceMemory& memory = gpu->cuda_memory();
  constexpr size_t kPetabyte = size_t{1} << 50;
  EXPECT_FALSE(memory.reserve(MemCategory::kActivations, kPetabyte));
  EXPECT_EQ(memory.reserved(MemCategory::kActivations), 0u);
  EXPECT_TRUE(memory.reserve(MemCategory::kParams, size_t{1} << 20));
  EXPECT_GE(memory.reserved(MemCategory::kParams), size_t{1} << 20);
  try {
    memory.allocate(kPetabyte, MemCategory::kActivations);
    ADD_FAILURE() << "a petabyte of device memory was allocated";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(kPetabyte) + " more bytes of 'activations' do not fit"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("bytes free"), std::string::npos) << what;
  }
  void* block = memory.allocate(4096, MemCategory::kActivations);  // cudaMalloc, and it works
  std::vector<float> back(1024, 1.0f);
  memory.to_host(back.data(), block, 4096);
  EXPECT_EQ(back[0], 0.0f);  // allocations are zero-filled
  memory.release_arenas();   // what reserve_arenas does after a refusal: no arena left
  EXPECT_EQ(memory.reserved(MemCategory::kParams), 0u);
  void* param = memory.allocate(256, MemCategory::kParams);  // cudaMalloc now
  memory.release(param, 256);
  memory.release(block, 4096);
  gpu->synchronize();
}

}  // namespace
}  // namespace zt
