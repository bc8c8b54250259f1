// Synthetic training data for the ZeRO engine tests: the global batch of each step is a pure
// function of the step, and each rank takes its part of it, so runs at any world size (or split
// into pieces by a checkpoint) train on the same data. Also the checkpoint helpers the resume
// tests share: rank 0's fp32 masters by name, and a save with the test's hyperparameters.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "engine/estimator.h"
#include "engine/zero_config.h"
#include "engine/zero_engine.h"
#include "io/hdf5_util.h"
#include "model/config.h"
#include "model/trainable.h"
#include "support/engine_spec_for.h"

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
  OffloadConfig serial = cpu;
  serial.overlap = false;
  std::vector<std::pair<std::string, OffloadConfig>> modes = {
      {"cpu optimizer", cpu}, {"cpu optimizer, no overlap", serial}, {"nvme optimizer", nvme}};
  if (stage == 3) {
    OffloadConfig both = cpu;
    both.param = OffloadDevice::kCpu;
    modes.push_back({"cpu optimizer + cpu params", both});
  }
  return modes;
}

// This rank's own optimizer range of every group (stage 0: the whole group; stages 1-3 its shard,
// without the padding past the group's end), copied to the host: master, Adam m and v.
struct OwnState {
  std::vector<int64_t> begin;  // group coordinates of the range's first element
  std::vector<std::vector<float>> master, m, v;
};

inline OwnState own_state(ZeroEngine& engine) {
  OwnState out;
  for (int g = 0; g < static_cast<int>(engine.layout().groups().size()); ++g) {
    const OptimizerShard s = engine.optimizer_shard(g);
    const int64_t numel = engine.partition(g).numel;
    const size_t n = static_cast<size_t>(std::max<int64_t>(0, std::min(s.count, numel - s.begin)));
    out.begin.push_back(s.begin);
    out.master.emplace_back(s.master, s.master + n);
    out.m.emplace_back();  // a frozen group has no moments (empty)
    out.v.emplace_back();
    if (s.m) out.m.back().assign(s.m, s.m + n);
    if (s.v) out.v.back().assign(s.v, s.v + n);
    engine.release_optimizer_shard(g, false);
  }
  return out;
}

// Bitwise equality of this rank's own optimizer range (loaded) with the same elements of a full
// one-rank state.
inline void expect_same_range(const OwnState& got, const OwnState& full, const std::string& what) {
  for (size_t g = 0; g < got.master.size(); ++g) {
    const size_t b = static_cast<size_t>(got.begin[g]), n = got.master[g].size();
    if (n == 0) continue;  // a shard of padding only
    auto slice = [&](const std::vector<float>& v) {
      return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(b),
                                v.begin() + static_cast<std::ptrdiff_t>(b + n));
    };
    EXPECT_EQ(got.master[g], slice(full.master[g])) << what << ": group " << g << " master";
    EXPECT_EQ(got.m[g], slice(full.m[g])) << what << ": group " << g << " m";
    EXPECT_EQ(got.v[g], slice(full.v[g])) << what << ": group " << g << " v";
  }
}

// What a test engine is built with: the ZeRO knobs, the tiny preset, fp32 or bf16 working params,
// the tests' AdamW (clipping active, so the global norm across shards matters).
struct EngineOptions {
  int stage = 0;
  bool overlap = true;
  int ckpt_every = 0;
  bool ckpt_on_host = false;    // cpu_checkpointing
  bool ckpt_selective = false;  // --activation-checkpointing selective (with ckpt_every = 0)
  Precision precision = Precision::kFp32;
  int64_t bucket = 500'000'000;
  int64_t reuse = 1'000'000'000;
  int64_t persistence = 0;
  int64_t micro = 2;   // sequences per micro-batch of this rank
  int64_t accum = 1;   // micro-batches per step the spec plans for
  bool tied = false;   // the tiny preset with tie_word_embeddings
  bool fused = false;  // the tiny preset as a Phi-3 (fused qkv_proj, gate_up_proj adapters)
  bool world_invariant = false;                // zero.world_invariant (docs/ARCHITECTURE.md §4)
  std::vector<std::string> trainable, freeze;  // --trainable / --freeze (model/trainable.h)
  LoraSpec lora;                               // LoRA adapters (model/lora.h); rank 0: none
  OffloadConfig offload;
  DType activations = DType::kFloat32;  // activation storage (fp16: with Precision::kFp16)
  LossScaleConfig loss_scale;           // Precision::kFp16's loss scaler
  int64_t seq = 16;
  AdamWConfig optim = [] {
    AdamWConfig a;
    a.lr = 2e-3f;
    a.weight_decay = 0.1f;
    a.clip = 0.5f;
    return a;
  }();
};

// A ZeroEngine on `comm` with its own backend and memory tracker, trained on StepBatches.
class TestEngine {
 public:
  TestEngine(Communicator& comm, const EngineOptions& o)
      : comm_(comm), options_(o), backend_(make_cpu_backend()) {
    ZeroConfig zero;
    zero.stage = o.stage;
    zero.overlap_comm = o.overlap;
    zero.reduce_bucket_size = o.bucket;
    zero.allgather_bucket_size = o.bucket;
    zero.prefetch_bucket_size = 3 * 50'000;
    zero.param_persistence_threshold = o.persistence;
    zero.max_reuse_distance = o.reuse;
    zero.world_invariant = o.world_invariant;
    ModelConfig model = preset_config("tiny");
    model.tie_word_embeddings = o.tied;
    model.fused_projections = o.fused;
    (void)model.set_lora(o.lora);  // fitted: all-linear is the model's projections
    EngineSpec spec = engine_spec_for(model, zero, o.micro, o.seq);
    spec.grad_accum = o.accum;
    spec.precision = o.precision;
    spec.activation_storage = o.activations;
    spec.ac.every = o.ckpt_every;
    spec.ac.on_host = o.ckpt_on_host;
    spec.ac.selective = o.ckpt_selective;
    spec.offload = o.offload;
    spec.trainable = TrainableSet::from_patterns(ParamLayout(model), o.trainable, o.freeze);
    spec.optim = o.optim;
    spec.loss_scale = o.loss_scale;
    spec.validate(comm.world_size());
    spec_ = spec;
    engine_ = std::make_unique<ZeroEngine>(spec, *backend_, comm, memory_);
  }

  ZeroEngine& engine() { return *engine_; }
  const EngineSpec& spec() const { return spec_; }
  MemoryTracker& memory() { return memory_; }
  void init() { engine_->init_from_seed(1234); }

  // One step over `accum` micro-batches of this rank of the communicator's world.
  StepStats step(int64_t step, int64_t accum, float lr) {
    return run(StepBatches(step, accum, options_.micro, comm_.world_size(), comm_.rank(),
                           options_.seq, vocab()),
               step, lr);
  }
  // One step of micro-batch `leaf` of a global batch of `leaves` micro-batches, alone: the global
  // sequences [leaf·B, (leaf+1)·B) that rank r's micro-batch m holds when leaf = m·N + r.
  StepStats leaf_step(int64_t step, int64_t leaf, int64_t leaves, float lr) {
    return run(StepBatches(step, 1, options_.micro, static_cast<int>(leaves),
                           static_cast<int>(leaf), options_.seq, vocab()),
               step, lr);
  }
  // The reduced gradient of one step over `accum` micro-batches, read through the gradient probe
  // (one_step_bound.h): m after a step at lr 0 with β1 = 0 and no clipping. Per group, full.
  std::vector<std::vector<float>> probe_gradient(int64_t step, int64_t accum) {
    this->step(step, accum, 0.0f);
    return own_state().m;
  }
  OwnState own_state() { return engine_test::own_state(*engine_); }
  // Σ per-token loss of the first micro-batch of `step`'s batch, forward only, all ranks: what
  // the working params compute now.
  double eval_loss(int64_t step) {
    const StepBatches batch(step, 1, options_.micro, comm_.world_size(), comm_.rank(), options_.seq,
                            vocab());
    return engine_->eval_loss_sum(batch.input_ptrs[0], batch.target_ptrs[0]);
  }

 private:
  int64_t vocab() const { return engine_->model().config().vocab_size; }
  StepStats run(const StepBatches& batch, int64_t step, float lr) {
    return engine_->train_step(batch.input_ptrs, batch.target_ptrs, lr, step);
  }

  Communicator& comm_;
  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  MemoryTracker memory_;
  EngineSpec spec_;
  std::unique_ptr<ZeroEngine> engine_;
};

// fp16 working params and activations with a loss scale that starts high enough to overflow
// and doubles after every 2 good steps, so that overflows (skipped steps) come back.
inline EngineOptions overflowing_fp16_options() {
  EngineOptions o;
  o.precision = Precision::kFp16;
  o.activations = DType::kFloat16;
  o.loss_scale.initial_scale_power = 22;
  o.loss_scale.loss_scale_window = 2;
  return o;
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

// Losses of a run of steps, and rank 0's masters before and after them.
struct Trained {
  std::vector<double> losses;
  Masters initial, final;  // rank 0 only
};

// Steps [first, last] at learning rate lr, each over `leaves` micro-batches of the global batch
// (leaves / world per rank), of `engine`, or of a fresh engine initialised from the seed.
inline Trained train_steps(Communicator& comm, const EngineOptions& o, int64_t leaves, float lr,
                           int first, int last, TestEngine* engine = nullptr) {
  std::unique_ptr<TestEngine> fresh;
  if (!engine) {
    fresh = std::make_unique<TestEngine>(comm, o);
    fresh->init();
  }
  TestEngine& t = engine ? *engine : *fresh;
  Trained out;
  out.initial = rank0_masters(t.engine());
  const int64_t accum = leaves / comm.world_size();
  for (int step = first; step <= last; ++step) out.losses.push_back(t.step(step, accum, lr).loss);
  out.final = rank0_masters(t.engine());
  return out;
}

// A training checkpoint of `engine` under `root` with the hyperparameters a test trains with.
inline SavedCheckpoint save_test_checkpoint(ZeroEngine& engine, const TrainingProgress& progress,
                                            const AdamWConfig& optim, int64_t total_steps,
                                            int64_t micro_batch, int64_t grad_accum,
                                            int64_t seq_len, const std::string& root,
                                            bool frozen_as_digest = false) {
  TrainingHyperparameters hyper;
  hyper.optim = optim;
  hyper.total_steps = total_steps;
  hyper.micro_batch = micro_batch;
  hyper.grad_accum = grad_accum;
  hyper.seq_len = seq_len;
  CheckpointSaveOptions options;
  options.root = root;
  options.frozen_as_digest = frozen_as_digest;
  return save_checkpoint(engine, progress, hyper, options);
}

// Rank `rank`'s file of the checkpoint at `dir`, against its manifest. With `digests` every wholly
// frozen group (each of its tensors frozen) is kept as a digest in the manifest and absent from
// the file; without, no group has a digest, a frozen group holds its values in the working dtype
// of `precision` (half the bytes of float32 under bf16 or fp16) and every other group float32.
// Returns the wholly frozen groups; adds the bytes the file's datasets store to *data_bytes.
inline int expect_frozen_groups_as_saved(const std::string& dir, int rank, Precision precision,
                                         bool digests, int64_t* data_bytes) {
  const CheckpointManifest manifest = CheckpointManifest::read(dir);
  const std::string path = dir + "/" + checkpoint_rank_file_name(rank);
  h5::Id file = h5::open_file(path);
  int frozen = 0;
  for (size_t g = 0; g < manifest.groups.size(); ++g) {
    bool wholly_frozen = true;
    for (const CheckpointTensor& t : manifest.tensors)
      wholly_frozen = wholly_frozen && (static_cast<size_t>(t.group) != g || t.frozen);
    frozen += wholly_frozen ? 1 : 0;
    const std::string group = "/" + checkpoint_group_name(static_cast<int>(g));
    const std::string what = path + " " + group;
    EXPECT_EQ(manifest.groups[g].frozen_values_digest.empty(), !(digests && wholly_frozen)) << what;
    if (digests && wholly_frozen) {
      EXPECT_FALSE(h5::has_dataset(file, group)) << what << ": kept as a digest, yet stored";
      continue;
    }
    const bool has_moments = h5::has_dataset(file, group + "/m");
    EXPECT_EQ(has_moments, !wholly_frozen) << what;
    h5::Id ds = h5::open_dataset(file, group + "/master", path);
    *data_bytes += static_cast<int64_t>(H5Dget_storage_size(ds));
    for (const char* moment : {"/m", "/v"})
      if (has_moments)
        *data_bytes +=
            static_cast<int64_t>(H5Dget_storage_size(h5::open_dataset(file, group + moment, path)));
    EXPECT_STREQ(dtype_name(h5::dataset_dtype(ds, path)),
                 dtype_name(has_moments ? DType::kFloat32 : working_dtype(precision)))
        << what;
  }
  return frozen;
}

// A resume test of a run whose options change per stage: what it trains with, and the change that
// makes a checkpoint another model's (another trainable set, other adapters).
struct ResumeCase {
  std::function<EngineOptions(int stage)> options;
  std::function<void(EngineOptions&)> other;  // applied to options(stage): the refused run
  std::string refusal;                        // a part of the refusal's message
  // Checkpoints keep wholly frozen groups as digests: the resumed engine loads the base from the
  // seed first, and one loaded from another seed is refused.
  bool frozen_as_digest = false;
  int steps = 4;
  int64_t leaves = 4;  // micro-batches of the global batch
  float lr = 2e-3f;
};

// At every stage s: half the steps at `world`'s N ranks, a checkpoint under dir/s<s>, the rest on
// one rank (`self`) at stage 3 − s: the losses and the final masters are those of the
// uninterrupted one-rank stage-0 run, bitwise. Then the run with c.other is refused on every rank,
// its message containing c.refusal.
inline void expect_resumes_bitwise_and_refuses_another(Communicator& world, Communicator& self,
                                                       const std::string& dir,
                                                       const ResumeCase& c) {
  const int half = c.steps / 2;
  auto train = [&](Communicator& comm, const EngineOptions& o, int first, int last,
                   TestEngine* engine) {
    return train_steps(comm, o, c.leaves, c.lr, first, last, engine);
  };
  const Trained whole = train(self, c.options(0), 1, c.steps, nullptr);
  const int n = world.world_size();
  for (int stage = 0; stage <= 3; ++stage) {
    const std::string what = "N=" + std::to_string(n) + " stage " + std::to_string(stage);
    TestEngine writer(world, c.options(stage));
    writer.init();
    const Trained first = train(world, c.options(stage), 1, half, &writer);
    const EngineOptions defaults;
    const std::string saved =
        save_test_checkpoint(writer.engine(), {half, 0, {}}, defaults.optim, c.steps,
                             defaults.micro, c.leaves / n, defaults.seq,
                             dir + "/s" + std::to_string(stage), c.frozen_as_digest)
            .dir;
    if (world.rank() == 0) {  // every rank's file; their data is what `estimate` predicts
      int64_t data_bytes = 0;
      for (int r = 0; r < n; ++r) {
        EXPECT_GT(expect_frozen_groups_as_saved(saved, r, c.options(stage).precision,
                                                c.frozen_as_digest, &data_bytes),
                  0)
            << what << ": the checkpoint has no frozen group";
      }
      EXPECT_EQ(data_bytes, checkpoint_data_bytes(writer.spec(), c.frozen_as_digest)) << what;
    }
    TestEngine alone(self, c.options(3 - stage));
    if (c.frozen_as_digest) {  // the base comes from the seed again; another seed's is refused
      TestEngine other_base(self, c.options(3 - stage));
      other_base.engine().init_from_seed(4321);
      try {
        load_checkpoint(other_base.engine(), saved);
        ADD_FAILURE() << what << ": a resume on another base was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("resumes on another base model"), std::string::npos)
            << e.what();
      }
      alone.init();
      // At N ranks too (each digests its own slice of the groups at stage 3 − s): it loads.
      TestEngine again(world, c.options(3 - stage));
      again.init();
      EXPECT_NO_THROW(load_checkpoint(again.engine(), saved)) << what;
    }
    load_checkpoint(alone.engine(), saved);
    const Trained rest = train(self, c.options(3 - stage), half + 1, c.steps, &alone);
    std::vector<double> losses = first.losses;
    losses.insert(losses.end(), rest.losses.begin(), rest.losses.end());
    EXPECT_EQ(losses, whole.losses) << what;
    EXPECT_TRUE(rest.final == whole.final) << what << ": final masters differ";
    EngineOptions other = c.options(stage);
    c.other(other);
    TestEngine refused(world, other);
    try {
      load_checkpoint(refused.engine(), saved);
      ADD_FAILURE() << what << ": a resume of another model was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.refusal), std::string::npos) << e.what();
    }
  }
}

}  // namespace zt::engine_test
