// Micro-batch graphs (engine/micro_batch_graphs.h, `train --cuda-graphs on`) without a GPU. The
// guarded device (tests/support/guarded_device.h) records what a capture would: each op of a
// recorded pass is kept with the arguments it was issued with, pointers and scalars, and a replay
// runs those again (reading device memory, such as the cross-entropy's factor, as it runs); a host
// copy, an allocation, a wait or a collective inside a recording fails it, as a CUDA stream capture
// refuses them. A pass that read anything at issue time that changes from one micro-batch to the
// next of the same key (a scalar, a pointer, the host's state) would replay the recording's value:
// each case below must give bitwise the losses, norms and fp32 masters of the same run op by op,
// and record, replay and drop what the key rule says. Each rank trains its own world of one
// (MPI_COMM_SELF); at several ranks, graphs must stay off.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/micro_batch_graphs.h"
#include "engine/zero_engine.h"
#include "engine_test_support.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/lora.h"
#include "model/trainable.h"
#include "support/engine_spec_for.h"
#include "support/guarded_device.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {
namespace {

constexpr int64_t kSeq = 16, kMicro = 2;
constexpr int kSteps = 6;

enum class Documents { kNone, kEveryStep, kEvenSteps };

struct Case {
  int64_t accum = 1;
  bool tied = false;
  Precision precision = Precision::kBf16;
  bool loss_masks = false;                 // odd and even steps count different targets
  Documents documents = Documents::kNone;  // two documents a row
  int stage = 0;
  bool lora = false;
  bool offload = false;  // the optimizer on the CPU (stage 1 and up)
  bool selective_checkpointing = false;
  bool eval_between_steps = false;   // an evaluation pass after every step
  int move_buffers_before_step = 0;  // the backend moves a buffer of its own before this step
  int recordings_allowed = -1;       // the device refuses the recordings after these (-1: none)
  int recordings_refused = -1;       // ... that many of them (-1: every one)
};

struct Outcome {
  std::vector<double> losses, norms;
  engine_test::Masters masters;
  MicroBatchGraphs::Report report;
};

// Step s's micro-batches of rank r of N: StepBatches' tokens, with a loss mask that keeps the
// first 5 + (s % 2) targets of each row (loss_masks), and two documents a row split at token 7.
struct CaseBatches {
  engine_test::StepBatches batch;
  std::vector<std::vector<int32_t>> doc_starts;
  std::vector<const int32_t*> doc_ptrs;
  int64_t counted = -1;

  CaseBatches(const Case& c, int step, int64_t vocab, int world, int rank)
      : batch(step, c.accum, kMicro, world, rank, kSeq, vocab) {
    if (c.loss_masks) {
      counted = 0;  // this rank's; every rank counts alike
      for (auto& targets : batch.targets)
        for (int64_t i = 0; i < kMicro * kSeq; ++i) {
          if (i % kSeq >= 5 + step % 2)
            targets[static_cast<size_t>(i)] = kIgnoredTarget;
          else
            ++counted;
        }
      counted *= world;
    }
    if (c.documents == Documents::kNone || (c.documents == Documents::kEvenSteps && step % 2))
      return;
    for (int64_t m = 0; m < c.accum; ++m) {
      std::vector<int32_t> starts;
      for (int64_t i = 0; i < kMicro * kSeq; ++i) starts.push_back(i % kSeq < 7 ? 0 : 7);
      doc_starts.push_back(std::move(starts));
    }
    for (const auto& starts : doc_starts) doc_ptrs.push_back(starts.data());
  }
};

EngineSpec spec_for(const Case& c) {
  ModelConfig cfg = preset_config("tiny");
  cfg.tie_word_embeddings = c.tied;
  if (c.lora) {
    LoraSpec lora;
    lora.rank = 4;
    lora.set_targets({"all-linear"}, "test");
    (void)cfg.set_lora(lora);  // fitted: all-linear is the model's projections
  }
  ZeroConfig zero;
  zero.stage = c.stage;
  zero.reduce_bucket_size = 20'000;  // several reductions a group
  EngineSpec spec = engine_spec_for(cfg, zero, kMicro, kSeq);
  spec.precision = c.precision;
  spec.grad_accum = c.accum;
  spec.ac.selective = c.selective_checkpointing;
  if (c.offload) spec.offload.optimizer = OffloadDevice::kCpu;
  spec.trainable = TrainableSet::from_patterns(ParamLayout(cfg), {}, {});
  spec.optim.lr = 2e-3f;
  spec.optim.weight_decay = 0.1f;
  spec.optim.clip = 0.5f;
  return spec;
}

// kSteps steps of case `c` on the guarded device over the ranks of `host`, op by op or with
// graphs asked for.
Outcome train(const Case& c, bool graphs, Communicator& host) {
  GuardedDeviceMemory device;  // outlives every buffer below
  auto cpu = make_cpu_backend();
  std::unique_ptr<Backend> backend = make_guarded_backend(*cpu, device);
  std::unique_ptr<Communicator> data = make_guarded_communicator(host, device);
  device.refuse_recordings_after(c.recordings_allowed, c.recordings_refused);
  const EngineSpec spec = spec_for(c);
  MemoryTracker memory(backend->device_memory());
  ZeroEngine engine(spec, *backend, *data, memory, &host);
  engine.init_from_seed(7);
  if (graphs) engine.use_cuda_graphs();
  Outcome out;
  for (int step = 1; step <= kSteps; ++step) {
    if (step == c.move_buffers_before_step) device.move_own_buffer();
    const CaseBatches b(c, step, spec.model.vocab_size, host.world_size(), host.rank());
    const float lr = 1e-3f * static_cast<float>(step) / kSteps;  // a warmup: lr changes each step
    const StepStats stats =
        engine.train_step(b.batch.input_ptrs, b.batch.target_ptrs, lr, step, b.counted, b.doc_ptrs);
    out.losses.push_back(stats.loss);
    out.norms.push_back(stats.grad_norm);
    if (c.eval_between_steps) {  // a forward of its own, op by op, between replays
      // A training step keeps no logits, replayed or not (the last evaluation's are gone).
      EXPECT_THROW(engine.model().logits(), Error) << "logits after training step " << step;
      out.losses.push_back(engine.eval_loss_sum(b.batch.input_ptrs[0], b.batch.target_ptrs[0]));
    }
  }
  out.masters = engine_test::rank0_masters(engine);
  if (const MicroBatchGraphs::Report* report = engine.cuda_graphs_report()) out.report = *report;
  return out;
}

class MicroBatchGraphsTest : public ::testing::Test {
 protected:
  // Case `c` with graphs asked for must give bitwise the run without them, on each rank's world
  // of one or over `comm`'s ranks; returns the graphed run.
  Outcome same_bits(const Case& c, const std::string& label, Communicator* comm = nullptr) {
    Communicator& host = comm ? *comm : self_;
    const Outcome eager = train(c, false, host);
    const Outcome graphed = train(c, true, host);
    EXPECT_EQ(graphed.losses.size(), eager.losses.size()) << label;
    for (size_t s = 0; s < eager.losses.size() && s < graphed.losses.size(); ++s)
      EXPECT_EQ(graphed.losses[s], eager.losses[s]) << label << ": loss " << s + 1;
    for (size_t s = 0; s < eager.norms.size() && s < graphed.norms.size(); ++s)
      EXPECT_EQ(graphed.norms[s], eager.norms[s]) << label << ": step " << s + 1 << "'s norm";
    EXPECT_TRUE(graphed.masters == eager.masters) << label << ": the final fp32 masters differ";
    return graphed;
  }
  static void expect_counts(const MicroBatchGraphs::Report& r, int64_t recorded, int64_t replayed,
                            int64_t eager, int64_t dropped, const std::string& label) {
    EXPECT_EQ(r.off_reason, "") << label;
    EXPECT_EQ(r.recorded, recorded) << label << ": pairs recorded";
    EXPECT_EQ(r.replayed, replayed) << label << ": micro-batches replayed";
    EXPECT_EQ(r.eager, eager) << label << ": micro-batches op by op";
    EXPECT_EQ(r.dropped, dropped) << label << ": pairs dropped";
  }
  // Graphs on with the one key of a plain run: recorded at step 2, replayed from then on.
  void expect_one_key(const Case& c, const std::string& label) {
    expect_counts(same_bits(c, label).report, 1, kSteps - 1, 1, 0, label);
  }
  MpiCommunicator self_{MPI_COMM_SELF};
};

// One key: its first sighting op by op, then recorded at the second and replayed from then on.
TEST_F(MicroBatchGraphsTest, OneMicroBatchAStepReplaysFromTheSecondStepBitwise) {
  expect_one_key(Case{}, "bf16");
  Case tied;
  tied.tied = true;
  tied.precision = Precision::kFp32;
  expect_one_key(tied, "tied, fp32");
  Case selective;
  selective.selective_checkpointing = true;
  expect_one_key(selective, "selective checkpointing");
  Case eval;
  eval.eval_between_steps = true;  // the model's host state after an evaluation, then a replay
  expect_one_key(eval, "evaluations");
}

// The first micro-batch of a step overwrites the gradients, later ones add: two keys.
TEST_F(MicroBatchGraphsTest, AStepsFirstMicroBatchIsAKeyOfItsOwn) {
  Case c;
  c.accum = 3;
  c.tied = true;  // the embedding's gradient: copied at the first micro-batch, added after
  // Step 1: the first key op by op, the second op by op then recorded at its second sighting;
  // step 2: the first key recorded; every later micro-batch replayed.
  expect_counts(same_bits(c, "3 micro-batches").report, 2, 3 * kSteps - 2, 2, 0, "3 micro-batches");
}

// Loss masks change the cross-entropy's factor (1/counted targets) from step to step: a replay
// reads the step's own from device memory (LlamaModel::set_loss_gradient_scale), one key.
TEST_F(MicroBatchGraphsTest, TheCrossEntropyFactorIsReadWhenTheReplayRuns) {
  Case c;
  c.loss_masks = true;  // odd steps count 12 targets, even ones 10
  expect_one_key(c, "loss masks");
  Case fp16;
  fp16.precision = Precision::kFp16;  // the loss scale is in the factor too (constant here)
  expect_one_key(fp16, "fp16");
}

TEST_F(MicroBatchGraphsTest, DocumentMasksRunOpByOp) {
  Case c;
  c.documents = Documents::kEveryStep;
  c.accum = 2;
  expect_counts(same_bits(c, "document masks").report, 0, 0, 2 * kSteps, 0, "document masks");
  // Masked steps between plain ones: a plain key's recording outlives them.
  Case even;
  even.documents = Documents::kEvenSteps;
  expect_counts(same_bits(even, "masks on even steps").report, 1, 2, 4, 0, "masks on even steps");
}

// A backend that moved a buffer of its own: every recording is dropped and made again (the
// guarded device moves nothing, so only the counts can tell).
TEST_F(MicroBatchGraphsTest, RecordingsAreDroppedWhenTheBackendMovesItsBuffers) {
  Case c;
  c.move_buffers_before_step = 4;
  expect_counts(same_bits(c, "moved").report, 2, kSteps - 1, 1, 1, "moved");
}

// A recording that fails runs its micro-batch op by op and is made again at the key's next
// sighting; a second failure in a row turns graphs off for the run. The device refuses the
// forward's recording (1 recording used by the attempt) or the backward's after the forward's
// was made (2, the forward's dropped unreplayed).
TEST_F(MicroBatchGraphsTest, AFailedRecordingIsMadeAgainOnceThenGraphsTurnOff) {
  for (const int allowed : {0, 1}) {
    Case c;
    c.recordings_allowed = allowed;
    const std::string label = "recordings refused after " + std::to_string(allowed);
    const MicroBatchGraphs::Report r = same_bits(c, label).report;
    EXPECT_NE(r.off_reason.find("recording a micro-batch failed twice in a row"), std::string::npos)
        << label << ": " << r.off_reason;
    EXPECT_EQ(r.failed, 2) << label;  // steps 2 and 3
    EXPECT_EQ(r.recorded, 0) << label;
    EXPECT_EQ(r.replayed, 0) << label;
    EXPECT_EQ(r.eager, kSteps) << label;
    // One refusal only: step 2 runs op by op, step 3 records, and steps 3-6 replay.
    c.recordings_refused = 1;
    const std::string once = label + ", once";
    const MicroBatchGraphs::Report retried = same_bits(c, once).report;
    expect_counts(retried, 1, kSteps - 2, 2, 0, once);
    EXPECT_EQ(retried.failed, 1) << once;
    EXPECT_NE(retried.last_failure.find("refuses the recording"), std::string::npos)
        << once << ": " << retried.last_failure;
  }
}

// What the engine does not record, and says why; asking changes nothing of the run (its
// reductions, an offloaded optimizer's gradients, the adapters' groups), at every world size.
TEST_F(MicroBatchGraphsTest, EnginesThatCannotRecordSayWhyAndRunAsWithout) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const bool one = world.world_size() == 1;
  Case stage1;
  stage1.stage = 1;
  stage1.offload = true;
  stage1.accum = 2;
  Case lora;
  lora.lora = true;
  lora.accum = 2;
  for (const auto& [c, words] : {std::pair{stage1, "stage 0"}, std::pair{lora, "LoRA"}}) {
    const MicroBatchGraphs::Report r = same_bits(c, words, &world).report;
    EXPECT_NE(r.off_reason.find(one ? words : "one rank"), std::string::npos) << r.off_reason;
    EXPECT_EQ(r.eager, 2 * kSteps) << words;
    EXPECT_EQ(r.recorded, 0) << words;
  }
  if (one) return;
  const MicroBatchGraphs::Report r = same_bits(Case{}, "stage 0 at several ranks", &world).report;
  EXPECT_NE(r.off_reason.find("one rank"), std::string::npos) << r.off_reason;
  EXPECT_EQ(r.eager, kSteps);
}

}  // namespace
}  // namespace zt
