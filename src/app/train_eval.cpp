#include "app/train_eval.h"

#include <vector>

#include "io/data_loader.h"
#include "io/tokenizer_files.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace {

// A held-out set scored against a model trained on other token ids says nothing of the run: its
// tokenizer (name, vocabulary, stored files and their bos/eos ids) must be the training data's,
// apart from the chat templates, which do not change how text is encoded.
void check_same_tokenizer(const TokenDataset& held_out, const TokenDataset& training,
                          const TokenizerFiles& training_tokenizer) {
  const bool same_name = held_out.tokenizer() == training.tokenizer() &&
                         held_out.vocab_size() == training.vocab_size();
  const bool same_files =
      same_tokenizer_apart_from_chat_templates(held_out.tokenizer_files(), training_tokenizer);
  if (same_name && same_files) return;
  throw Error(std::string(kTrainCommand) + ": --eval-data '" + held_out.path() +
              "' was tokenized by " + held_out.tokenizer() + " (vocabulary " +
              std::to_string(held_out.vocab_size()) + "), --data '" + training.path() + "' by " +
              training.tokenizer() + " (vocabulary " + std::to_string(training.vocab_size()) +
              (same_name ? ", other tokenizer files" : "") +
              "): prepare both with the same tokenizer");
}

}  // namespace

TrainEvalSet open_eval_set(const TrainOptions& o, const TokenDataset& training_data,
                           const TokenizerFiles& training_tokenizer, bool training_document_masks,
                           const ModelConfig& model, int world) {
  TrainEvalSet set;
  set.data = &training_data;
  set.document_masks = training_document_masks;  // scored as the run trains
  if (!o.eval_data.empty()) {
    set.held_out = std::make_unique<TokenDataset>(o.eval_data);
    check_same_tokenizer(*set.held_out, training_data, training_tokenizer);
    set.held_out->check_max_token(model.vocab_size);
    ZT_CHECK(!training_document_masks || set.held_out->has_documents(),
             std::string(kTrainCommand) + ": --eval-data '" + o.eval_data +
                 "' has no document boundaries (/doc_starts), and the run trains with document "
                 "masks: prepare the held-out set as --data '" +
                 o.data +
                 "' was, so that it is "
                 "scored as training scores");
    set.data = set.held_out.get();
  }
  if (!o.evaluates()) return set;
  int64_t batches = kAllEvalBatches;  // K rounds of N batches
  ZT_CHECK(o.eval_batches == kAllEvalBatches ||
               !__builtin_mul_overflow(o.eval_batches, int64_t{world}, &batches),
           std::string(kTrainCommand) + ": --eval-batches " + std::to_string(o.eval_batches) +
               " at " + std::to_string(world) + " ranks is more batches than 2^63 hold");
  set.windows = eval_windows(*set.data, batches, o.micro_batch, o.seq_len);
  set.rounds = (set.windows.batches + world - 1) / world;
  check_some_eval_target_counts(*set.data, set.windows.windows, o.seq_len, set.document_masks);
  return set;
}

StepEval evaluate_windows(ZeroEngine& engine, const TrainEvalSet& set, const TrainOptions& o,
                          int rank, int world) {
  const Stopwatch clock;
  EvalBatch batch(o.micro_batch, o.seq_len, set.document_masks);
  double loss_sum = 0, counted = 0;           // counted targets: exact in a double below 2^53
  for (int64_t k = 0; k < set.rounds; ++k) {  // the same count on every rank: a collective each
    counted += static_cast<double>(batch.read(*set.data, set.windows, k * world + rank));
    loss_sum += engine.eval_loss_sum(batch.inputs().data(), batch.targets().data(),
                                     batch.doc_starts());  // all ranks'
  }
  engine.communicator().all_reduce_sum_blocking(&counted, 1);
  const auto loss_tokens = static_cast<int64_t>(counted);
  check_eval_targets_counted(*set.data, set.windows.windows, loss_tokens);
  return {loss_sum / counted, loss_tokens, clock.seconds()};
}

nlohmann::json eval_report_json(const StepEval& eval, const TrainEvalSet& set,
                                const TrainOptions& o, int world) {
  return {{"loss", eval.loss},
          {"tokens", set.windows.windows * o.seq_len},
          {"loss_tokens", eval.loss_tokens},
          {"batches", set.rounds},
          {"windows", set.windows.windows},
          {"micro_batch", o.micro_batch},                // per rank, as run.json's
          {"windows_per_round", world * o.micro_batch},  // every rank's micro-batch
          {"data", o.eval_data.empty() ? o.data : o.eval_data}};
}

}  // namespace zt
