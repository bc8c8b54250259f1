// Micro-batch graphs on the CUDA backend (engine/micro_batch_graphs.h, `train --cuda-graphs on`;
// label gpu, skipped without a GPU). The CPU tests (tests/mpi/test_micro_batch_graphs.cpp) check
// the engine's side on a device model that records as a capture does; here the recordings are
// CUDA graphs of the backend's stream, and what only a GPU can show is checked: that cuBLASLt,
// cuDNN's attention, CUB's sort and every kernel of a micro-batch can be captured at all (the
// report must say the graphs are on and replayed), and that the replays give bitwise the losses,
// norms and fp32 masters of the same run op by op, with one and three micro-batches a step, a
// tied head, and loss masks that change the cross-entropy's factor from step to step. Each case
// prints the mean step time of both runs (steps 3 on), for reading, not asserted.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "../mpi/engine_test_support.h"
#include "backend/attention_choice.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "comm/cuda/staged_device_communicator.h"
#include "comm/mpi_communicator.h"
#include "engine/micro_batch_graphs.h"
#include "engine/zero_engine.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/trainable.h"
#include "util/ignored_target.h"

namespace zt {
namespace {

constexpr int64_t kSeq = 128, kMicro = 2;
constexpr int kSteps = 6;

struct GraphCase {
  std::string label;
  int64_t accum = 1;
  bool tied = false;
  bool loss_masks = false;  // odd and even steps count different targets
  AttentionKernel attention = AttentionKernel::kGemm;
};

struct Outcome {
  std::vector<double> losses, norms;
  engine_test::Masters masters;
  MicroBatchGraphs::Report report;
  double mean_step_s = 0;  // steps 3 on
};

Outcome train(const GraphCase& c, bool graphs) {
  MpiCommunicator self(MPI_COMM_SELF);
  ModelConfig cfg = preset_config("small");
  cfg.tie_word_embeddings = c.tied;
  const AttentionShape shape{kMicro, kSeq, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim()};
  auto gpu = make_cuda_backend(
      0, cuda::CudaBackendOptions::for_micro_batch(c.attention, shape, DType::kBf16));
  cuda::StagedDeviceCommunicator staged(MPI_COMM_SELF);
  EngineSpec spec;
  spec.model = cfg;
  spec.trainable = TrainableSet::from_patterns(ParamLayout(cfg), {}, {});
  spec.activation_storage = DType::kBf16;
  spec.micro_batch = kMicro;
  spec.seq_len = kSeq;
  spec.grad_accum = c.accum;
  spec.optim.lr = 1e-3f;
  spec.optim.weight_decay = 0.1f;
  spec.optim.clip = 1.0f;
  MemoryTracker memory(gpu->device_memory());
  ZeroEngine engine(spec, *gpu, staged, memory, &self);
  engine.init_from_seed(42);
  if (graphs) engine.use_cuda_graphs();
  Outcome out;
  double timed_s = 0;
  for (int step = 1; step <= kSteps; ++step) {
    engine_test::StepBatches batch(step, c.accum, kMicro, 1, 0, kSeq, cfg.vocab_size);
    int64_t counted = -1;
    if (c.loss_masks) {
      counted = 0;
      for (auto& targets : batch.targets)
        for (size_t i = 0; i < targets.size(); ++i) {
          if (static_cast<int64_t>(i) % kSeq >= 40 + step % 2)
            targets[i] = kIgnoredTarget;
          else
            ++counted;
        }
    }
    const float lr = 1e-3f * static_cast<float>(step) / kSteps;
    const auto t0 = std::chrono::steady_clock::now();
    const StepStats stats =
        engine.train_step(batch.input_ptrs, batch.target_ptrs, lr, step, counted);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step >= 3) timed_s += s;
    out.losses.push_back(stats.loss);
    out.norms.push_back(stats.grad_norm);
  }
  out.mean_step_s = timed_s / (kSteps - 2);
  out.masters = engine_test::rank0_masters(engine);
  if (const MicroBatchGraphs::Report* r = engine.cuda_graphs_report()) out.report = *r;
  return out;
}

void expect_graphs_replay_bitwise(const GraphCase& c) {
  const Outcome eager = train(c, false);
  const Outcome graphed = train(c, true);
  const MicroBatchGraphs::Report& r = graphed.report;
  EXPECT_EQ(r.off_reason, "") << c.label << ": the graphs turned off";
  EXPECT_GT(r.recorded, 0) << c.label;
  EXPECT_GT(r.replayed, 0) << c.label;
  // A recording that failed and ran op by op (retried, or not) passes the bits: it must not happen.
  EXPECT_EQ(r.failed, 0) << c.label << ": " << r.last_failure;
  for (size_t s = 0; s < eager.losses.size(); ++s) {
    EXPECT_EQ(graphed.losses[s], eager.losses[s]) << c.label << ": step " << s + 1 << "'s loss";
    EXPECT_EQ(graphed.norms[s], eager.norms[s]) << c.label << ": step " << s + 1 << "'s norm";
  }
  EXPECT_TRUE(graphed.masters == eager.masters) << c.label << ": the final fp32 masters differ";
  std::printf(
      "%s: op by op %.2f ms a step, graphs %.2f ms (%.3fx); %lld recorded, %lld micro-batches "
      "replayed, %lld op by op\n",
      c.label.c_str(), eager.mean_step_s * 1e3, graphed.mean_step_s * 1e3,
      eager.mean_step_s / graphed.mean_step_s, static_cast<long long>(r.recorded),
      static_cast<long long>(r.replayed), static_cast<long long>(r.eager));
}

TEST(CudaEngine, MicroBatchGraphsReplayTheEagerRunBitwise) {
  expect_graphs_replay_bitwise({"gemm attention, 1 micro-batch", 1});
  expect_graphs_replay_bitwise({"gemm attention, 3 micro-batches, tied", 3, true});
  expect_graphs_replay_bitwise({"gemm attention, loss masks", 1, false, true});
#if ZEROTRAIN_HAVE_CUDNN
  expect_graphs_replay_bitwise(
      {"fused attention, 1 micro-batch", 1, false, false, AttentionKernel::kFused});
  expect_graphs_replay_bitwise(
      {"fused attention, 3 micro-batches, loss masks", 3, false, true, AttentionKernel::kFused});
#endif
}

}  // namespace
}  // namespace zt
