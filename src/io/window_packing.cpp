#include "io/window_packing.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "util/error.h"

namespace zt {

WindowLayout::WindowLayout(const std::vector<WindowSpan>& one_piece_windows)
    : pieces(one_piece_windows), first(one_piece_windows.size() + 1) {
  std::iota(first.begin(), first.end(), int64_t{0});
}

int64_t WindowLayout::length(int64_t w) const {
  int64_t total = 0;
  for (int64_t p = first[static_cast<size_t>(w)]; p < first[static_cast<size_t>(w) + 1]; ++p)
    total += pieces[static_cast<size_t>(p)].length;
  return total;
}

void WindowLayout::add_window(const std::vector<WindowSpan>& window_pieces) {
  pieces.insert(pieces.end(), window_pieces.begin(), window_pieces.end());
  first.push_back(static_cast<int64_t>(pieces.size()));
}

std::vector<WindowSpan> document_windows(const std::vector<int64_t>& doc_starts, int64_t n_tokens,
                                         int64_t seq_len) {
  ZT_CHECK(seq_len > 0, "data schedule: seq_len must be positive");
  std::vector<WindowSpan> out;
  const int64_t capacity = seq_len + 1;
  int64_t begin = 0, end = 0;  // the open window, tokens [begin, end)
  auto close = [&] {
    if (end - begin >= 2) out.push_back({begin, end - begin});
  };
  for (size_t d = 0; d < doc_starts.size(); ++d) {
    const int64_t doc_begin = doc_starts[d];
    const int64_t doc_end = d + 1 < doc_starts.size() ? doc_starts[d + 1] : n_tokens;
    if (doc_end - begin > capacity) {  // the document does not fit whole in the open window
      close();
      begin = doc_begin;
    }
    // A document longer than a window: windows of its own, each sharing one token with the next.
    for (; doc_end - begin > capacity; begin += seq_len) out.push_back({begin, capacity});
    end = doc_end;
  }
  close();
  return out;
}

namespace {

// The items best_fit_windows packs, in dataset order: each document, or the chunks of T + 1 tokens
// and the remainder of one longer than that; none of one token.
std::vector<WindowSpan> packing_items(const std::vector<int64_t>& doc_starts, int64_t n_tokens,
                                      int64_t seq_len) {
  std::vector<WindowSpan> items;
  for (size_t d = 0; d < doc_starts.size(); ++d) {
    int64_t begin = doc_starts[d];
    const int64_t end = d + 1 < doc_starts.size() ? doc_starts[d + 1] : n_tokens;
    for (; end - begin > seq_len + 1; begin += seq_len) items.push_back({begin, seq_len + 1});
    if (end - begin >= 2) items.push_back({begin, end - begin});
  }
  return items;
}

}  // namespace

WindowLayout best_fit_windows(const std::vector<int64_t>& doc_starts, int64_t n_tokens,
                              int64_t seq_len) {
  ZT_CHECK(seq_len > 0, "data schedule: seq_len must be positive");
  std::vector<WindowSpan> items = packing_items(doc_starts, n_tokens, seq_len);
  std::stable_sort(items.begin(), items.end(),
                   [](const WindowSpan& a, const WindowSpan& b) { return a.length > b.length; });
  // The window each item goes into, and the open windows that can still take one (room ≥ 2
  // tokens) as (room, window): the first entry with room ≥ an item's length is the best fit, the
  // earliest window among equal rooms.
  std::vector<int64_t> window_of(items.size());
  int64_t windows = 0;
  std::set<std::pair<int64_t, int64_t>> open;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t length = items[i].length;
    auto fit = open.lower_bound({length, std::numeric_limits<int64_t>::min()});
    int64_t room = seq_len + 1, w = windows;
    if (fit == open.end()) {
      ++windows;
    } else {
      std::tie(room, w) = *fit;
      open.erase(fit);
    }
    window_of[i] = w;
    if (room - length >= 2) open.insert({room - length, w});
  }
  // The layout, flat: each window's pieces in the order they went in.
  WindowLayout layout;
  layout.first.assign(static_cast<size_t>(windows) + 1, 0);
  for (const int64_t w : window_of) ++layout.first[static_cast<size_t>(w) + 1];
  std::partial_sum(layout.first.begin(), layout.first.end(), layout.first.begin());
  std::vector<int64_t> next(layout.first.begin(), layout.first.end() - 1);
  layout.pieces.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    layout.pieces[static_cast<size_t>(next[static_cast<size_t>(window_of[i])]++)] = items[i];
  return layout;
}

}  // namespace zt
