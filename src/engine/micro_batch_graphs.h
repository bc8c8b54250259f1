// CUDA graphs of a micro-batch (`train --cuda-graphs on`, docs/gpu.md "CUDA graphs"). The
// forward and the backward of one micro-batch are each recorded once (Backend::capture) and
// replayed at the later micro-batches of the same key: the host issues one launch per pass
// instead of one per op, and the device no longer waits between ops for the host to issue them.
//
// A replay computes what the pass would compute op by op, bit for bit, only where every op gets
// the same pointers and scalars. The engine uses graphs only where nothing but the tokens (which
// it uploads before the pass, to the same buffer) changes from one micro-batch to the next
// (ZeroEngine's why_no_graphs: one rank at stage 0, no offload, no LoRA, ...). The cross-entropy's
// factor (loss scale over the step's counted targets, which loss masks and fp16's scale change)
// is such a value: the model uploads it beside the tokens and the kernel reads it there
// (LlamaModel::set_loss_gradient_scale). Here each pair of recordings is keyed by what does
// change: whether the micro-batch is its step's first (which overwrites the gradients; later ones
// add to them). A micro-batch with document masks runs op by op (its attention calls depend on
// the documents). Every recording is dropped when a backend moves a buffer of its own
// (Backend::own_buffers_moved).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace zt {

class MicroBatchGraphs {
 public:
  struct Key {
    bool first = false;  // the step's first micro-batch: GradWrite::kAssign
    bool operator==(const Key&) const = default;
  };

  // What the run did (run.json's "cuda_graphs").
  struct Report {
    std::string off_reason;    // why graphs are not used (empty while they are)
    int64_t recorded = 0;      // pairs of recordings made
    int64_t replayed = 0;      // micro-batches replayed
    int64_t eager = 0;         // micro-batches run op by op
    int64_t dropped = 0;       // pairs dropped because a backend moved a buffer of its own
    int64_t failed = 0;        // recordings that failed (each micro-batch then ran op by op)
    std::string last_failure;  // why the latest one failed
  };

  // `why_not`: empty when this engine's micro-batches can be recorded; otherwise every
  // micro-batch runs op by op and the report says why.
  MicroBatchGraphs(Backend& backend, std::string why_not);

  using Pass = std::function<void()>;
  // Runs `pass` (the forward, or the backward when `backward`) between the caller's phase marks.
  using TimedPass = std::function<void(bool backward, const Pass& pass)>;
  // One micro-batch of `key`: forward, then backward, each through `timed`. A key seen for the
  // first time runs op by op (its first run makes the backend's plans, tables and workspaces);
  // at its second sighting both passes are recorded and replayed, and replayed from then on.
  // When `eager_only` (document masks), op by op. If a recording fails, the micro-batch runs op by
  // op (nothing of a failed recording ran) and the key is recorded again at its next sighting:
  // the op-by-op run between may have made what the recording lacked (first-use work, such as a
  // larger workspace, that a recording cannot hold). A key's second failure in a row turns graphs
  // off for the run, and the report says why.
  void run(const Key& key, bool eager_only, const Pass& forward, const Pass& backward,
           const TimedPass& timed);
  bool on() const { return report_.off_reason.empty(); }
  const Report& report() const { return report_; }

 private:
  struct Pair {
    Key key;
    std::unique_ptr<CapturedWork> forward, backward;  // null until recorded
    bool failed_last = false;  // the key's last recording failed: a second failure turns off
  };
  // The key's pair, made if new.
  Pair& pair_for(const Key& key, bool& is_new);
  bool record(Pair& pair, const Pass& forward, const Pass& backward);
  void drop_if_buffers_moved();

  Backend& be_;
  Report report_;
  std::vector<Pair> pairs_;  // in order of first sighting
  uint64_t moves_seen_ = 0;
};

}  // namespace zt
