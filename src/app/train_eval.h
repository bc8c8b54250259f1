// Evaluation inside `train` (docs/fine-tuning.md, "Validation during training"; the windows as
// docs/ARCHITECTURE.md §3 defines them): --eval-batches K rounds in which each of the N ranks
// scores B windows, taken from the start of --eval-data (a held-out token dataset) or, without it,
// of the training data; or, with --eval-batches all, every whole window of the set, in as many
// rounds as cover them. After every --eval-every steps (metrics.jsonl's eval_loss) and at the end
// (report.json's eval).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "app/train_options.h"
#include "engine/zero_engine.h"
#include "io/data_loader.h"
#include "io/token_dataset.h"
#include "io/tokenizer_files.h"
#include "model/config.h"
#include "report/metrics_log.h"

namespace zt {

// The windows a run evaluates: where they come from and how they are scored.
struct TrainEvalSet {
  std::unique_ptr<TokenDataset> held_out;  // --eval-data; null: the training data is scored
  const TokenDataset* data = nullptr;      // what is scored (held_out or the training data)
  bool document_masks = false;             // scored with document masks, as training is
  EvalWindows windows;  // batch k·N + r is rank r's in round k (none without --eval-batches)
  int64_t rounds = 0;   // of N batches: K, or with "all" as many as cover the windows
  // What the ranks agree on ("" without --eval-data): TokenDataset::identity() of held_out.
  std::string identity() const { return held_out ? held_out->identity() : std::string(); }
};

// Opens and checks the windows to evaluate before the first step (rank-local, inside the inputs'
// agreement): --eval-data must come from the training data's tokenizer (`training_tokenizer`, the
// files stored with it), fit the model's vocabulary and have document boundaries when the run
// trains with document masks; the set must hold K·N·B windows of --seq-len + 1 tokens (with
// "all", one) with a counted target among them. Each refusal names the file.
TrainEvalSet open_eval_set(const TrainOptions& o, const TokenDataset& training_data,
                           const TokenizerFiles& training_tokenizer, bool training_document_masks,
                           const ModelConfig& model, int world);

// Whether --eval-every evaluates after `step`.
inline bool eval_due(const TrainOptions& o, int64_t step) {
  return o.evaluates() && o.eval_every > 0 && step % o.eval_every == 0;
}

// Collective: the mean next-token loss of the current weights over the set's windows (rank r
// scores batch k·N + r of round k), with the counted targets and the seconds it took. The weights
// are not changed (but for a delayed update, which is applied first).
StepEval evaluate_windows(ZeroEngine& engine, const TrainEvalSet& set, const TrainOptions& o,
                          int rank, int world);

// report.json's `eval`: the figures of the end-of-training evaluation and what it scored.
nlohmann::json eval_report_json(const StepEval& eval, const TrainEvalSet& set,
                                const TrainOptions& o, int world);

}  // namespace zt
