// Training data order. The token dataset is cut into W windows of at most T+1 tokens (--packing):
//   - wrapped: W = (n_tokens − 1) / T windows of T+1 tokens; window w starts at token w·T
//     (consecutive windows share one token: the last target of window w is the first input of
//     window w+1), so a document runs on from one window into the next, and the last
//     (n_tokens − 1) mod T targets are in no window;
//   - documents: windows of whole documents, in the dataset's order (document_windows), each
//     padded to T+1 tokens with rows that count no target, so that every document is trained
//     with all of its beginning in view, and every target the loss counts is in some window;
//   - bfd: windows of whole documents packed best-fit decreasing (best_fit_windows), padded alike;
//     a window's documents are then pieces from anywhere in the dataset.
// Each epoch visits every window once, in an
// order given by a seeded Fisher–Yates shuffle (splitmix64, seed + epoch), so the order is a
// pure function of (seed, W) and reproducible on any platform.
//
// Windows are consumed through a global cursor: position p (p = 0, 1, 2, ...) is window
// perm_{p / W}[p % W], and step s (0-based) takes positions [s·G, (s+1)·G) with
// G = micro_batch · grad_accum · world (the global batch). Within a step, micro-batch m of
// rank r takes the B consecutive positions starting at (m·N + r)·B:
//
//     step positions:  | m=0: r0 r1 .. rN-1 | m=1: r0 r1 .. rN-1 | ... |   (each slot B windows)
//
// so the union over ranks and micro-batches is the same G windows for every world size N, and
// only the grouping into micro-batches changes. A batch may straddle an epoch boundary; it then
// continues with the next epoch's permutation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/window_packing.h"

namespace zt {

class TokenDataset;

// splitmix64: a small deterministic 64-bit generator (Steele et al.), identical everywhere.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  // Uniform integer in [0, bound) (bound > 0), by rejection so that there is no modulo bias.
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// The permutation of [0, n) used for `epoch` (Fisher–Yates driven by SplitMix64(seed + epoch)).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// Position in the data stream; saved in checkpoints.
struct DataCursor {
  int64_t epoch = 0;     // epoch of the next window to be consumed
  int64_t position = 0;  // index of that window within its epoch's permutation
  bool operator==(const DataCursor&) const = default;
};

// --packing: how training cuts the tokens into windows (auto: a request only, resolve_packing).
enum class Packing { kAuto, kWrapped, kDocuments, kBfd };
Packing parse_packing(const std::string& text);  // "auto" | "wrapped" | "documents" | "bfd"
const char* packing_name(Packing packing);
// auto: bfd for SFT data (a loss mask and document boundaries), the packing strategy TRL's
// SFTTrainer defaults to when it packs, which keeps each example whole; wrapped for the rest.
// documents or bfd on a dataset without /doc_starts fails naming the file.
Packing resolve_packing(Packing requested, const TokenDataset& data);

// What --packing `packing` (resolved) cuts `data` into at --seq-len T: its windows, and how many of
// their T rows each hold data rather than padding (a wrapped window all T). What train's epoch
// line and `info --seq-len` say.
struct PackingFigures {
  int64_t windows = 0, data_rows = 0;
  double data_share(int64_t seq_len) const;  // data_rows / (windows · T); 0 without windows
};
PackingFigures packing_figures(const TokenDataset& data, Packing packing, int64_t seq_len);

// A training window is its pieces (window_packing.h) one after another, L ≤ T + 1 tokens in all.
// Its inputs are the first L − 1 tokens and its targets the last L − 1; the rows past them are
// padding. The target at a piece's first token, other than the window's first, never counts.
using WindowPieces = std::vector<WindowSpan>;

// The steps that read `epochs` passes over `windows` windows, `per_step` a step: ceil(E·W/G),
// the last step taking up to G − 1 windows of the next pass (the order reads on across epochs),
// E·W/G within a few ulps of a whole number being that number (E is a decimal, seldom exact in
// binary),
// and at least 1. Fails saying so when E is not a finite positive number or the steps are beyond
// 2^62.
int64_t steps_for_epochs(double epochs, int64_t windows, int64_t per_step);

// Pure index arithmetic of the data order (no I/O): which windows a step gives to each rank.
class WindowSchedule {
 public:
  // n_tokens: dataset length; seq_len T; micro_batch B; grad_accum A; world N. Wrapped windows.
  WindowSchedule(int64_t n_tokens, int64_t seq_len, int64_t micro_batch, int64_t grad_accum,
                 int world_size, uint64_t seed);
  // The windows of `layout` (document_windows, best_fit_windows), in the same order.
  WindowSchedule(WindowLayout layout, int64_t seq_len, int64_t micro_batch, int64_t grad_accum,
                 int world_size, uint64_t seed);

  int64_t num_windows() const { return num_windows_; }
  int64_t global_batch_windows() const { return B_ * A_ * N_; }
  WindowPieces window(int64_t w) const;
  int64_t window_length(int64_t w) const { return wrapped_ ? T_ + 1 : layout_.length(w); }
  PackingFigures figures() const;  // the windows, and their rows that hold data

  const DataCursor& cursor() const { return cursor_; }
  // Validates position >= 0. A position past this dataset's W windows (a resume onto other data,
  // --allow-data-change) continues at the next epoch's start: the epoch had passed this data's
  // end. Returns whether it did.
  bool set_cursor(const DataCursor& c);
  int64_t windows_consumed() const { return cursor_.epoch * num_windows_ + cursor_.position; }

  // The position within a step of rank r's micro-batch m, element b: (m·N + r)·B + b.
  int64_t step_position(int rank, int64_t m, int64_t b) const { return (m * N_ + rank) * B_ + b; }
  // Window indices of the current step (not advancing), [micro][B] for rank `rank`.
  std::vector<std::vector<int64_t>> rank_windows(int rank);
  // All G window indices of the current step in position order.
  std::vector<int64_t> global_windows();
  // Moves the cursor past the current step's G windows.
  void advance();

 private:
  int64_t window_at(int64_t global_position);  // global_position counts from epoch 0
  int64_t T_, B_, A_, N_;
  uint64_t seed_;
  int64_t num_windows_;
  bool wrapped_ = true;
  WindowLayout layout_;  // the windows when not wrapped
  DataCursor cursor_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> perm_;
};

// Which targets of the window of T+1 tokens at `start` count in the loss: out[t] = 1 for target t
// (token start + t + 1) unless the loss mask (SFT data) is 0 there or, with document masks, the
// target is the first token of a document (the previous document's last token does not predict
// it). out holds T values.
void count_window_targets(const TokenDataset& data, int64_t start, int64_t seq_len,
                          bool document_masks, uint8_t* out);
// The same for a window of pieces: within each piece as above; the target at the first token of
// a piece after the window's first is 0 (the piece before it does not precede it in the data), and
// a window of L < T + 1 tokens counts no target from t = L − 1 on (its padding).
void count_window_targets(const TokenDataset& data, const WindowPieces& window, int64_t seq_len,
                          bool document_masks, uint8_t* out);
// The document masks of the inputs of the `rows` tokens at `start` (backend.h), written from row
// `offset` of a window: row_doc_start[offset + t] is the index within the window of the first
// token of input t's document, `offset` when the document began before `start` (its part is
// numbered from there). The dataset has boundaries.
void window_document_starts(const TokenDataset& data, int64_t start, int64_t rows,
                            int32_t* row_doc_start, int64_t offset = 0);

// Reads this rank's micro-batches of each step from a token dataset. A target that does not count
// (count_window_targets) is kIgnoredTarget (util/ignored_target.h), and the step's loss averages
// over the counted targets of the whole global batch: every rank counts the targets of all G
// windows once a step, so the count needs no collective and is the same at every world size.
// With document masks (the dataset has boundaries and the run masks them) each micro-batch also
// has its doc starts.
class WindowSampler {
 public:
  // Validates once that every token is < vocab_size, and that the dataset holds at least one
  // global batch of windows (the error names the file and the numbers). `packing` is resolved
  // (resolve_packing).
  WindowSampler(const TokenDataset& data, int64_t vocab_size, int64_t seq_len, int64_t micro_batch,
                int64_t grad_accum, int world_size, int rank, uint64_t seed,
                bool document_masks = false, Packing packing = Packing::kWrapped);

  // Fills the current step's micro-batches for this rank and advances the cursor.
  // inputs()[m] / targets()[m] then hold B·T tokens each.
  void next_step();
  const std::vector<const int32_t*>& inputs() const { return input_ptrs_; }
  const std::vector<const int32_t*>& targets() const { return target_ptrs_; }
  // doc_starts()[m]: micro-batch m's document masks, B·T values; empty without document masks.
  const std::vector<const int32_t*>& doc_starts() const { return doc_start_ptrs_; }
  bool document_masks() const { return document_masks_; }
  // Targets of the last step's global batch that count in its loss: G·T without a loss mask.
  int64_t counted_targets() const { return counted_targets_; }

  const WindowSchedule& schedule() const { return schedule_; }
  Packing packing() const { return packing_; }
  // "W windows of (up to) T+1 tokens an epoch, F% data (--packing P; N tokens, D documents), G a
  // step: S steps are E epochs", F the share of the windows' targets that are not padding.
  std::string epoch_summary(int64_t steps) const;
  const DataCursor& cursor() const { return schedule_.cursor(); }
  bool set_cursor(const DataCursor& c) { return schedule_.set_cursor(c); }

 private:
  const TokenDataset& data_;
  Packing packing_;
  WindowSchedule schedule_;
  int rank_;
  int64_t B_, T_;
  bool document_masks_;
  void read_window(int64_t w, int32_t* inputs, int32_t* targets, int32_t* doc_starts,
                   const uint8_t* counts);
  std::vector<int32_t> window_;       // one window of T+1 tokens
  std::vector<uint8_t> step_counts_;  // whether each target of the step counts, [G·T] by position
  std::vector<std::vector<int32_t>> inputs_, targets_, doc_starts_;  // [micro][B·T]
  std::vector<const int32_t*> input_ptrs_, target_ptrs_, doc_start_ptrs_;
  int64_t counted_targets_ = 0;
};

// Evaluation windows (docs/ARCHITECTURE.md §3): window j is tokens [j·(T+1), (j+1)·(T+1)) from the
// start of /tokens, non-overlapping and unshuffled; inputs are its first T tokens, targets its last
// T. Fails naming the file when the dataset holds fewer than num_windows windows.
void check_eval_windows(const TokenDataset& data, int64_t num_windows, int64_t seq_len);

// What --eval-batches (train) and --batches (eval) take for "all": every whole window of the set.
inline constexpr int64_t kAllEvalBatches = -1;

// The windows an evaluation scores: batch j holds windows [j·B, j·B + B) of the first `windows`,
// the last batch padded with windows that count no target when they do not fill it.
struct EvalWindows {
  int64_t batches = 0, windows = 0;
};
// `batches` batches of B windows, which `data` must hold (check_eval_windows); or, for
// kAllEvalBatches, every whole window of T + 1 tokens of `data` (at least one), in as many batches
// as cover them. Fails naming the file when the count overflows.
EvalWindows eval_windows(const TokenDataset& data, int64_t batches, int64_t micro_batch,
                         int64_t seq_len);
// Fails (AgreedError: callers pass a count every rank holds) when the evaluated windows hold no
// counted target, which leaves their mean loss undefined.
void check_eval_targets_counted(const TokenDataset& data, int64_t num_windows, int64_t counted);
// Fails as check_eval_targets_counted does, before anything is scored, when none of windows
// [0, num_windows) has a counted target. Reads only up to the first window with one.
void check_some_eval_target_counts(const TokenDataset& data, int64_t num_windows, int64_t seq_len,
                                   bool document_masks);
// Reads windows [first, first+count) into inputs/targets (count·T tokens each); a target that does
// not count (count_window_targets) is kIgnoredTarget. With doc_starts (count·T values; the dataset
// has boundaries) the windows are read with document masks, written there. Returns the number of
// counted targets (count·T without a loss mask or document masks).
int64_t read_eval_windows(const TokenDataset& data, int64_t first, int64_t count, int64_t seq_len,
                          int32_t* inputs, int32_t* targets, int32_t* doc_starts = nullptr);

// One micro-batch of B evaluation windows of T tokens, as ZeroEngine::eval_loss_sum takes it.
class EvalBatch {
 public:
  EvalBatch(int64_t micro_batch, int64_t seq_len, bool document_masks);
  // Reads batch j of `set` (read_eval_windows), a padding window past its last one (inputs 0, no
  // counted target, one document); returns the batch's counted targets.
  int64_t read(const TokenDataset& data, const EvalWindows& set, int64_t j);
  const std::vector<int32_t>& inputs() const { return inputs_; }
  const std::vector<int32_t>& targets() const { return targets_; }
  const int32_t* doc_starts() const { return doc_starts_.empty() ? nullptr : doc_starts_.data(); }

 private:
  int64_t B_, T_;
  std::vector<int32_t> inputs_, targets_, doc_starts_;  // doc_starts_: empty without masks
};

}  // namespace zt
