// Synthetic training data for the ZeRO engine tests: the global batch of each step is a pure
// function of the step, and each rank takes its part of it, so runs at any world size (or split
// into pieces by a checkpoint) train on the same data. Also the checkpoint helpers the resume
// tests share: rank 0's fp32 masters by name, and a save with the test's hyperparameters.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/zero_engine.h"
#include "io/checkpoint.h"

namespace zt::engine_test {

// Token of global sequence `seq` at position t of step `step` (inputs: t < T, target: t + 1):
// a random start, then a fixed bigram chain, so the model has something to learn.
inline int32_t token_at(int64_t step, int64_t seq, int64_t t, int64_t vocab) {
  uint64_t x = static_cast<uint64_t>(step * 1'000'003 + seq * 7919) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  int64_t tok = static_cast<int64_t>(x % static_cast<uint64_t>(vocab));
  for (int64_t i = 0; i < t; ++i) tok = (tok * 5 + 3) % vocab;
  return static_cast<int32_t>(tok);
}

// One step's micro-batches for rank r of N: micro-batch m holds global sequences
// [(m·N + r)·B, +B) where B is the per-rank micro-batch, so the global batch is identical for
// any N. The pointer vectors are what ZeroEngine::train_step takes.
struct StepBatches {
  std::vector<std::vector<int32_t>> inputs, targets;
  std::vector<const int32_t*> input_ptrs, target_ptrs;

  StepBatches(int64_t step, int64_t accum, int64_t micro_per_rank, int world, int rank,
              int64_t seq_len, int64_t vocab)
      : inputs(static_cast<size_t>(accum)), targets(static_cast<size_t>(accum)) {
    for (int64_t m = 0; m < accum; ++m) {
      auto& in = inputs[static_cast<size_t>(m)];
      auto& tg = targets[static_cast<size_t>(m)];
      for (int64_t s = 0; s < micro_per_rank; ++s) {
        const int64_t seq = (m * world + rank) * micro_per_rank + s;
        for (int64_t t = 0; t < seq_len; ++t) {
          in.push_back(token_at(step, seq, t, vocab));
          tg.push_back(token_at(step, seq, t + 1, vocab));
        }
      }
      input_ptrs.push_back(in.data());
      target_ptrs.push_back(tg.data());
    }
  }
};

// The offload modes valid at `stage`, by name: the optimizer on cpu (tiles of `tile` elements),
// the given nvme configuration, and at stage 3 the optimizer and the params on cpu.
inline std::vector<std::pair<std::string, OffloadConfig>> offload_modes(int stage, int64_t tile,
                                                                        const OffloadConfig& nvme) {
  OffloadConfig cpu;
  cpu.optimizer = OffloadDevice::kCpu;
  cpu.sub_group_size = tile;
  std::vector<std::pair<std::string, OffloadConfig>> modes = {{"cpu optimizer", cpu},
                                                              {"nvme optimizer", nvme}};
  if (stage == 3) {
    OffloadConfig both = cpu;
    both.param = OffloadDevice::kCpu;
    modes.push_back({"cpu optimizer + cpu params", both});
  }
  return modes;
}

using Masters = std::map<std::string, std::vector<float>>;

// Every tensor's fp32 master on rank 0 (empty elsewhere). Collective.
inline Masters rank0_masters(ZeroEngine& engine) {
  Masters out;
  engine.for_each_full_tensor(true, [&](const TensorInfo& t, const void* data) {
    if (!data) return;
    const float* f = static_cast<const float*>(data);
    out[t.name].assign(f, f + t.numel);
  });
  return out;
}

// A training checkpoint of `engine` under `root` with the hyperparameters a test trains with.
inline SavedCheckpoint save_test_checkpoint(ZeroEngine& engine, const TrainingProgress& progress,
                                            const AdamWConfig& optim, int64_t total_steps,
                                            int64_t micro_batch, int64_t grad_accum,
                                            int64_t seq_len, const std::string& root) {
  TrainingHyperparameters hyper;
  hyper.optim = optim;
  hyper.total_steps = total_steps;
  hyper.micro_batch = micro_batch;
  hyper.grad_accum = grad_accum;
  hyper.seq_len = seq_len;
  CheckpointSaveOptions options;
  options.root = root;
  return save_checkpoint(engine, progress, hyper, options);
}

}  // namespace zt::engine_test
