#include "io/data_loader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <utility>

#include "io/token_dataset.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/ignored_target.h"
#include "util/word_choice.h"

namespace zt {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t bound) {
  // Reject the top partial copy of [0, bound) so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % bound;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  SplitMix64 rng(seed + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  return perm;
}

namespace {

constexpr WordChoice<Packing> kPackingWords[] = {{Packing::kAuto, "auto"},
                                                 {Packing::kWrapped, "wrapped"},
                                                 {Packing::kDocuments, "documents"},
                                                 {Packing::kBfd, "bfd"}};

}  // namespace

Packing parse_packing(const std::string& text) {
  return parse_word(text, kPackingWords, "--packing");
}

const char* packing_name(Packing packing) {
  return word_of(packing, kPackingWords);
}

Packing resolve_packing(Packing requested, const TokenDataset& data) {
  if (requested == Packing::kAuto)
    return data.has_loss_mask() && data.has_documents() ? Packing::kBfd : Packing::kWrapped;
  ZT_CHECK(requested == Packing::kWrapped || data.has_documents(),
           std::string("--packing ") + packing_name(requested) + ": token dataset '" + data.path() +
               "' records no document boundaries (/doc_starts); make it again with this "
               "version's prepare-data, or use --packing wrapped");
  return requested;
}

namespace {

// The windows of --packing documents or bfd over the dataset's documents.
WindowLayout packed_layout(const TokenDataset& data, Packing packing, int64_t seq_len) {
  const std::vector<int64_t>& starts = data.document_starts();
  return packing == Packing::kBfd ? best_fit_windows(starts, data.size(), seq_len)
                                  : WindowLayout(document_windows(starts, data.size(), seq_len));
}

}  // namespace

double PackingFigures::data_share(int64_t seq_len) const {
  return windows > 0 ? static_cast<double>(data_rows) /
                           (static_cast<double>(windows) * static_cast<double>(seq_len))
                     : 0;
}

PackingFigures packing_figures(const TokenDataset& data, Packing packing, int64_t seq_len) {
  // A schedule of one window a step: only its windows are asked for.
  return (packing == Packing::kWrapped
              ? WindowSchedule(data.size(), seq_len, 1, 1, 1, 0)
              : WindowSchedule(packed_layout(data, packing, seq_len), seq_len, 1, 1, 1, 0))
      .figures();
}

WindowSchedule::WindowSchedule(int64_t n_tokens, int64_t seq_len, int64_t micro_batch,
                               int64_t grad_accum, int world_size, uint64_t seed)
    : T_(seq_len), B_(micro_batch), A_(grad_accum), N_(world_size), seed_(seed) {
  ZT_CHECK(T_ > 0 && B_ > 0 && A_ > 0 && N_ > 0,
           "data schedule: seq_len, micro_batch, grad_accum and world size must be positive");
  num_windows_ = n_tokens > 0 ? (n_tokens - 1) / T_ : 0;
}

WindowSchedule::WindowSchedule(WindowLayout layout, int64_t seq_len, int64_t micro_batch,
                               int64_t grad_accum, int world_size, uint64_t seed)
    : WindowSchedule(0, seq_len, micro_batch, grad_accum, world_size, seed) {
  for (const WindowSpan& piece : layout.pieces)
    ZT_CHECK(piece.start >= 0 && piece.length >= 1,
             "data schedule: a piece of " + std::to_string(piece.length) + " tokens at " +
                 std::to_string(piece.start));
  for (int64_t w = 0; w < layout.num_windows(); ++w) {
    const int64_t length = layout.length(w);
    ZT_CHECK(length >= 2 && length <= T_ + 1,
             "data schedule: window " + std::to_string(w) + " of " + std::to_string(length) +
                 " tokens (windows hold 2 to " + std::to_string(T_ + 1) + ")");
  }
  wrapped_ = false;
  layout_ = std::move(layout);
  num_windows_ = layout_.num_windows();
}

PackingFigures WindowSchedule::figures() const {
  PackingFigures figures{num_windows_, 0};
  for (int64_t w = 0; w < num_windows_; ++w) figures.data_rows += window_length(w) - 1;
  return figures;
}

WindowPieces WindowSchedule::window(int64_t w) const {
  if (wrapped_) return {WindowSpan{w * T_, T_ + 1}};
  const auto begin = layout_.pieces.begin();
  return WindowPieces(begin + layout_.first[static_cast<size_t>(w)],
                      begin + layout_.first[static_cast<size_t>(w) + 1]);
}

bool WindowSchedule::set_cursor(const DataCursor& c) {
  ZT_CHECK(c.epoch >= 0 && c.position >= 0, "data cursor (epoch " + std::to_string(c.epoch) +
                                                ", position " + std::to_string(c.position) +
                                                ") is negative");
  const bool past_end = c.position >= num_windows_;
  cursor_ = past_end ? DataCursor{c.epoch + 1, 0} : c;
  return past_end;
}

int64_t WindowSchedule::window_at(int64_t global_position) {
  const int64_t epoch = global_position / num_windows_;
  if (epoch != cached_epoch_) {
    perm_ = epoch_permutation(num_windows_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return perm_[static_cast<size_t>(global_position % num_windows_)];
}

std::vector<std::vector<int64_t>> WindowSchedule::rank_windows(int rank) {
  ZT_CHECK(rank >= 0 && rank < N_, "data schedule: rank " + std::to_string(rank) +
                                       " outside world of " + std::to_string(N_));
  const int64_t start = windows_consumed();
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(A_));
  for (int64_t m = 0; m < A_; ++m)
    for (int64_t b = 0; b < B_; ++b)
      out[static_cast<size_t>(m)].push_back(window_at(start + step_position(rank, m, b)));
  return out;
}

std::vector<int64_t> WindowSchedule::global_windows() {
  const int64_t start = windows_consumed();
  std::vector<int64_t> out;
  for (int64_t p = 0; p < global_batch_windows(); ++p) out.push_back(window_at(start + p));
  return out;
}

void WindowSchedule::advance() {
  const int64_t next = windows_consumed() + global_batch_windows();
  cursor_ = DataCursor{next / num_windows_, next % num_windows_};
}

void count_window_targets(const TokenDataset& data, int64_t start, int64_t seq_len,
                          bool document_masks, uint8_t* out) {
  count_window_targets(data, WindowPieces{{start, seq_len + 1}}, seq_len, document_masks, out);
}

void count_window_targets(const TokenDataset& data, const WindowPieces& window, int64_t seq_len,
                          bool document_masks, uint8_t* out) {
  std::fill(out, out + seq_len, uint8_t{0});  // padding, and the target at each later piece
  int64_t offset = 0;                         // the piece's first row in the window
  for (const WindowSpan& piece : window) {
    // Rows [offset, offset + targets) predict the piece's tokens [start + 1, start + length).
    const int64_t start = piece.start, targets = piece.length - 1;
    uint8_t* counts = out + offset;
    if (data.has_loss_mask())
      data.read_loss_mask(start + 1, targets, counts);
    else
      std::fill(counts, counts + targets, uint8_t{1});
    offset += piece.length;
    if (!document_masks) continue;
    const std::vector<int64_t>& starts = data.document_starts();
    for (auto it = std::upper_bound(starts.begin(), starts.end(), start);
         it != starts.end() && *it <= start + targets; ++it)
      counts[*it - start - 1] = 0;
  }
}

void window_document_starts(const TokenDataset& data, int64_t start, int64_t rows,
                            int32_t* row_doc_start, int64_t offset) {
  ZT_CHECK(data.has_documents(), "token dataset '" + data.path() + "' has no document boundaries");
  const std::vector<int64_t>& starts = data.document_starts();
  auto next = std::upper_bound(starts.begin(), starts.end(), start);  // first start after `start`
  auto current = static_cast<int32_t>(offset);
  for (int64_t t = 0; t < rows; ++t) {
    if (next != starts.end() && *next == start + t) {
      current = static_cast<int32_t>(offset + t);
      ++next;
    }
    row_doc_start[offset + t] = current;
  }
}

WindowSampler::WindowSampler(const TokenDataset& data, int64_t vocab_size, int64_t seq_len,
                             int64_t micro_batch, int64_t grad_accum, int world_size, int rank,
                             uint64_t seed, bool document_masks, Packing packing)
    : data_(data),
      packing_(packing),
      schedule_(
          packing == Packing::kWrapped
              ? WindowSchedule(data.size(), seq_len, micro_batch, grad_accum, world_size, seed)
              : WindowSchedule(packed_layout(data, packing, seq_len), seq_len, micro_batch,
                               grad_accum, world_size, seed)),
      rank_(rank),
      B_(micro_batch),
      T_(seq_len),
      document_masks_(document_masks) {
  ZT_CHECK(!document_masks || data.has_documents(),
           "token dataset '" + data.path() +
               "' records no document boundaries (/doc_starts) to mask: make it again with this "
               "prepare-data, or train with --document-masking off");
  ZT_CHECK(packing != Packing::kAuto, "WindowSampler: --packing must be resolved");
  const int64_t G = schedule_.global_batch_windows();
  ZT_CHECK(
      schedule_.num_windows() >= G,
      "token dataset '" + data.path() + "' has " + std::to_string(data.size()) +
          " tokens = " + std::to_string(schedule_.num_windows()) +
          (packing == Packing::kWrapped ? std::string(" windows of ")
                                        : std::string(" windows of whole documents (--packing ") +
                                              packing_name(packing) + ") of up to ") +
          std::to_string(seq_len + 1) + " tokens, fewer than one global batch of " +
          std::to_string(G) + " windows (micro-batch " + std::to_string(micro_batch) +
          " x grad-accum " + std::to_string(grad_accum) + " x world " + std::to_string(world_size) +
          "): a step takes whole windows, so lower one of those, or --seq-len, until a step fits");
  data.check_max_token(vocab_size);
  // A loss mask is read whole once (every value 0 or 1) and must count something to train on.
  ZT_CHECK(!data.has_loss_mask() || data.counted_tokens() > 0,
           "token dataset '" + data.path() +
               "': its loss mask is 0 at every token (no target "
               "to train on)");
  window_.resize(static_cast<size_t>(T_ + 1));
  inputs_.assign(static_cast<size_t>(grad_accum),
                 std::vector<int32_t>(static_cast<size_t>(B_ * T_)));
  targets_.assign(static_cast<size_t>(grad_accum),
                  std::vector<int32_t>(static_cast<size_t>(B_ * T_)));
  for (int64_t m = 0; m < grad_accum; ++m) {
    input_ptrs_.push_back(inputs_[static_cast<size_t>(m)].data());
    target_ptrs_.push_back(targets_[static_cast<size_t>(m)].data());
  }
  if (!document_masks_) return;
  doc_starts_ = inputs_;  // same shape
  for (auto& starts : doc_starts_) doc_start_ptrs_.push_back(starts.data());
}

void WindowSampler::next_step() {
  // Whether each target of every window of the step counts, in position order, found once: it
  // gives the global count, and this rank's windows (a subset) their ignored targets.
  const std::vector<int64_t> global = schedule_.global_windows();
  step_counts_.resize(global.size() * static_cast<size_t>(T_));
  for (size_t p = 0; p < global.size(); ++p)
    count_window_targets(data_, schedule_.window(global[p]), T_, document_masks_,
                         step_counts_.data() + p * static_cast<size_t>(T_));
  counted_targets_ = std::count(step_counts_.begin(), step_counts_.end(), uint8_t{1});
  const auto windows = schedule_.rank_windows(rank_);
  for (size_t m = 0; m < windows.size(); ++m)
    for (size_t b = 0; b < windows[m].size(); ++b) {
      const auto row = static_cast<int64_t>(b) * T_;
      const int64_t position =
          schedule_.step_position(rank_, static_cast<int64_t>(m), static_cast<int64_t>(b));
      read_window(windows[m][b], inputs_[m].data() + row, targets_[m].data() + row,
                  document_masks_ ? doc_starts_[m].data() + row : nullptr,
                  step_counts_.data() + position * T_);
    }
  schedule_.advance();
}

void WindowSampler::read_window(int64_t w, int32_t* inputs, int32_t* targets, int32_t* doc_starts,
                                const uint8_t* counts) {
  // The window's L tokens, its pieces one after another, then zeros.
  int64_t length = 0;
  for (const WindowSpan& piece : schedule_.window(w)) {
    data_.read(piece.start, piece.length, window_.data() + length);
    // Each piece's inputs attend within it (a piece after the first begins a document or is the
    // remainder of a long one).
    if (doc_starts)
      window_document_starts(data_, piece.start, std::min(piece.length, T_ - length), doc_starts,
                             length);
    length += piece.length;
  }
  std::fill(window_.begin() + length, window_.end(), 0);
  std::copy(window_.begin(), window_.end() - 1, inputs);
  std::copy(window_.begin() + 1, window_.end(), targets);
  // The padding rows, from the one the window's last token would be the input of: token 0, a
  // document of their own after the window's last input.
  std::fill(inputs + length - 1, inputs + T_, 0);
  if (doc_starts)
    std::fill(doc_starts + length - 1, doc_starts + T_, static_cast<int32_t>(length - 1));
  for (int64_t t = 0; t < T_; ++t)
    if (counts[t] == 0) targets[t] = kIgnoredTarget;
}

int64_t steps_for_epochs(double epochs, int64_t windows, int64_t per_step) {
  ZT_CHECK(std::isfinite(epochs) && epochs > 0 && windows > 0 && per_step > 0,
           "--epochs " + shortest_decimal(epochs) + " over " + std::to_string(windows) +
               " windows, " + std::to_string(per_step) + " a step: not a run length");
  const double exact = epochs * static_cast<double>(windows) / static_cast<double>(per_step);
  ZT_CHECK(exact <= 0x1p62, "--epochs " + shortest_decimal(epochs) + " of " +
                                std::to_string(windows) + " windows, " + std::to_string(per_step) +
                                " a step, is beyond 2^62 steps");
  // A decimal E is seldom exact in binary (0.14 · 50 windows / 1 a step is 7.000000000000001):
  // a product within the rounding of its two operations (a few ulps) of a whole number of steps
  // is that number. A true fraction of a step is at least 1/(G·10^digits), far above it.
  const double whole = std::round(exact);
  const double rounding = 8 * std::numeric_limits<double>::epsilon() * std::max(1.0, exact);
  const double steps = std::abs(exact - whole) <= rounding ? whole : std::ceil(exact);
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

std::string WindowSampler::epoch_summary(int64_t steps) const {
  const int64_t windows = schedule_.num_windows(), per_step = schedule_.global_batch_windows();
  const PackingFigures epoch = schedule_.figures();
  const int64_t documents = std::max<int64_t>(data_.num_documents(), 1);
  char figures[64];
  std::snprintf(figures, sizeof figures, "%.0f%%", 100.0 * epoch.data_share(T_));
  std::string text = std::to_string(windows) + " windows of " +
                     (packing_ == Packing::kWrapped ? "" : "up to ") + std::to_string(T_ + 1) +
                     " tokens an epoch, " + figures + " data (--packing " + packing_name(packing_) +
                     "; " + std::to_string(data_.size()) + " tokens, " + std::to_string(documents) +
                     (documents == 1 ? " document), " : " documents), ") +
                     std::to_string(per_step) + " a step: ";
  std::snprintf(
      figures, sizeof figures, "%.2f",
      static_cast<double>(steps) * static_cast<double>(per_step) / static_cast<double>(windows));
  return text + std::to_string(steps) + (steps == 1 ? " step is " : " steps are ") + figures +
         " epochs";
}

void check_eval_windows(const TokenDataset& data, int64_t num_windows, int64_t seq_len) {
  // Compared in windows, so that a huge request cannot overflow a token count.
  const int64_t available = data.size() / (seq_len + 1);
  int64_t needed = 0;
  const bool overflow = __builtin_mul_overflow(num_windows, seq_len + 1, &needed);
  ZT_CHECK(num_windows <= available,
           "token dataset '" + data.path() + "' has " + std::to_string(data.size()) +
               " tokens; evaluating " + std::to_string(num_windows) + " windows of " +
               std::to_string(seq_len + 1) + " tokens needs " +
               (overflow ? std::string("more than 2^63") : std::to_string(needed)) +
               (available > 0 ? "; ask for fewer batches (all: the " + std::to_string(available) +
                                    " whole windows it holds)"
                              : "; a shorter --seq-len fits it"));
}

void check_eval_targets_counted(const TokenDataset& data, int64_t num_windows, int64_t counted) {
  if (counted > 0) return;
  throw AgreedError("token dataset '" + data.path() + "': no target of the " +
                    std::to_string(num_windows) +
                    " evaluated windows counts (the loss mask is 0 there, or each begins a "
                    "document), so there is no loss to average (evaluate more windows, or data "
                    "whose responses fall inside them)");
}

void check_some_eval_target_counts(const TokenDataset& data, int64_t num_windows, int64_t seq_len,
                                   bool document_masks) {
  std::vector<uint8_t> counts(static_cast<size_t>(seq_len));
  for (int64_t w = 0; w < num_windows; ++w) {
    count_window_targets(data, w * (seq_len + 1), seq_len, document_masks, counts.data());
    if (std::find(counts.begin(), counts.end(), uint8_t{1}) != counts.end()) return;
  }
  check_eval_targets_counted(data, num_windows, 0);
}

EvalBatch::EvalBatch(int64_t micro_batch, int64_t seq_len, bool document_masks)
    : B_(micro_batch),
      T_(seq_len),
      inputs_(static_cast<size_t>(micro_batch * seq_len)),
      targets_(inputs_.size()),
      doc_starts_(document_masks ? inputs_.size() : 0) {}

EvalWindows eval_windows(const TokenDataset& data, int64_t batches, int64_t micro_batch,
                         int64_t seq_len) {
  EvalWindows set{batches, 0};
  if (batches == kAllEvalBatches) {
    set.windows = data.size() / (seq_len + 1);
    check_eval_windows(data, std::max<int64_t>(set.windows, 1), seq_len);  // names the length
    set.batches = (set.windows + micro_batch - 1) / micro_batch;
    return set;
  }
  ZT_CHECK(!__builtin_mul_overflow(batches, micro_batch, &set.windows),
           "token dataset '" + data.path() + "': evaluating " + std::to_string(batches) +
               " batches of " + std::to_string(micro_batch) +
               " windows is more windows than 2^63 hold");
  check_eval_windows(data, set.windows, seq_len);
  return set;
}

int64_t EvalBatch::read(const TokenDataset& data, const EvalWindows& set, int64_t j) {
  const int64_t first = j * B_, count = std::clamp<int64_t>(set.windows - first, 0, B_);
  const auto padding = static_cast<size_t>(count * T_);
  std::fill(inputs_.begin() + padding, inputs_.end(), 0);
  std::fill(targets_.begin() + padding, targets_.end(), kIgnoredTarget);
  if (!doc_starts_.empty()) std::fill(doc_starts_.begin() + padding, doc_starts_.end(), 0);
  return read_eval_windows(data, first, count, T_, inputs_.data(), targets_.data(),
                           doc_starts_.empty() ? nullptr : doc_starts_.data());
}

int64_t read_eval_windows(const TokenDataset& data, int64_t first, int64_t count, int64_t seq_len,
                          int32_t* inputs, int32_t* targets, int32_t* doc_starts) {
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  std::vector<uint8_t> counts(static_cast<size_t>(seq_len));
  int64_t counted = 0;
  for (int64_t w = 0; w < count; ++w) {
    const int64_t start = (first + w) * (seq_len + 1);
    data.read(start, seq_len + 1, window.data());
    count_window_targets(data, start, seq_len, doc_starts != nullptr, counts.data());
    if (doc_starts) window_document_starts(data, start, seq_len, doc_starts + w * seq_len);
    std::copy(window.begin(), window.end() - 1, inputs + w * seq_len);
    for (int64_t t = 0; t < seq_len; ++t) {
      const bool counts_here = counts[static_cast<size_t>(t)] == 1;
      targets[w * seq_len + t] = counts_here ? window[static_cast<size_t>(t + 1)] : kIgnoredTarget;
      counted += counts_here ? 1 : 0;
    }
  }
  return counted;
}

}  // namespace zt
