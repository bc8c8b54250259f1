#include "io/data_loader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "io/token_dataset.h"
#include "util/error.h"
#include "util/ignored_target.h"

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

WindowSchedule::WindowSchedule(int64_t n_tokens, int64_t seq_len, int64_t micro_batch,
                               int64_t grad_accum, int world_size, uint64_t seed)
    : T_(seq_len), B_(micro_batch), A_(grad_accum), N_(world_size), seed_(seed) {
  ZT_CHECK(T_ > 0 && B_ > 0 && A_ > 0 && N_ > 0,
           "data schedule: seq_len, micro_batch, grad_accum and world size must be positive");
  num_windows_ = n_tokens > 0 ? (n_tokens - 1) / T_ : 0;
}

void WindowSchedule::set_cursor(const DataCursor& c) {
  ZT_CHECK(c.epoch >= 0 && c.position >= 0 && c.position < num_windows_,
           "data cursor (epoch " + std::to_string(c.epoch) + ", position " +
               std::to_string(c.position) + ") is outside the dataset's " +
               std::to_string(num_windows_) + " windows");
  cursor_ = c;
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
  if (data.has_loss_mask())
    data.read_loss_mask(start + 1, seq_len, out);
  else
    std::fill(out, out + seq_len, uint8_t{1});
  if (!document_masks) return;
  const std::vector<int64_t>& starts = data.document_starts();
  // The document starts among the targets, tokens [start + 1, start + seq_len].
  for (auto it = std::upper_bound(starts.begin(), starts.end(), start);
       it != starts.end() && *it <= start + seq_len; ++it)
    out[*it - start - 1] = 0;
}

void window_document_starts(const TokenDataset& data, int64_t start, int64_t seq_len,
                            int32_t* row_doc_start) {
  ZT_CHECK(data.has_documents(), "token dataset '" + data.path() + "' has no document boundaries");
  const std::vector<int64_t>& starts = data.document_starts();
  auto next = std::upper_bound(starts.begin(), starts.end(), start);  // first start after `start`
  int32_t current = 0;
  for (int64_t t = 0; t < seq_len; ++t) {
    if (next != starts.end() && *next == start + t) {
      current = static_cast<int32_t>(t);
      ++next;
    }
    row_doc_start[t] = current;
  }
}

WindowSampler::WindowSampler(const TokenDataset& data, int64_t vocab_size, int64_t seq_len,
                             int64_t micro_batch, int64_t grad_accum, int world_size, int rank,
                             uint64_t seed, bool document_masks)
    : data_(data),
      schedule_(data.size(), seq_len, micro_batch, grad_accum, world_size, seed),
      rank_(rank),
      B_(micro_batch),
      T_(seq_len),
      document_masks_(document_masks) {
  ZT_CHECK(!document_masks || data.has_documents(),
           "token dataset '" + data.path() +
               "' records no document boundaries (/doc_starts) to mask: make it again with this "
               "prepare-data, or train with --document-masking off");
  const int64_t G = schedule_.global_batch_windows();
  ZT_CHECK(schedule_.num_windows() >= G,
           "token dataset '" + data.path() + "' has " + std::to_string(data.size()) +
               " tokens = " + std::to_string(schedule_.num_windows()) + " windows of " +
               std::to_string(seq_len + 1) + " tokens, fewer than one global batch of " +
               std::to_string(G) + " windows (micro-batch " + std::to_string(micro_batch) +
               " x grad-accum " + std::to_string(grad_accum) + " x world " +
               std::to_string(world_size) + ")");
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
    count_window_targets(data_, schedule_.window_start(global[p]), T_, document_masks_,
                         step_counts_.data() + p * static_cast<size_t>(T_));
  counted_targets_ = std::count(step_counts_.begin(), step_counts_.end(), uint8_t{1});
  const auto windows = schedule_.rank_windows(rank_);
  for (size_t m = 0; m < windows.size(); ++m) {
    for (size_t b = 0; b < windows[m].size(); ++b) {
      const int64_t start = schedule_.window_start(windows[m][b]);
      data_.read(start, T_ + 1, window_.data());
      const auto row = static_cast<std::ptrdiff_t>(b) * T_;
      std::copy(window_.begin(), window_.end() - 1, inputs_[m].begin() + row);
      std::copy(window_.begin() + 1, window_.end(), targets_[m].begin() + row);
      if (document_masks_) window_document_starts(data_, start, T_, doc_starts_[m].data() + row);
      const uint8_t* counts =
          step_counts_.data() +
          schedule_.step_position(rank_, static_cast<int64_t>(m), static_cast<int64_t>(b)) * T_;
      for (int64_t t = 0; t < T_; ++t)
        if (counts[t] == 0) targets_[m][static_cast<size_t>(row + t)] = kIgnoredTarget;
    }
  }
  schedule_.advance();
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
               (overflow ? std::string("more than 2^63") : std::to_string(needed)));
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
