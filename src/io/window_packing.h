// What each training window holds under --packing documents and bfd (docs/fine-tuning.md,
// "Packing and document masking"): pure index arithmetic over the dataset's document starts, no
// I/O. A window is one or more pieces, each a run of consecutive tokens of the dataset, placed one
// after another; at most T + 1 tokens in all.
#pragma once
#include <cstdint>
#include <vector>

namespace zt {

// Tokens [start, start + length) of the dataset.
struct WindowSpan {
  int64_t start = 0, length = 0;
  bool operator==(const WindowSpan&) const = default;
};

// Every window's pieces, flat: window w is pieces [first[w], first[w + 1]).
struct WindowLayout {
  std::vector<WindowSpan> pieces;
  std::vector<int64_t> first = {0};

  WindowLayout() = default;
  explicit WindowLayout(const std::vector<WindowSpan>& one_piece_windows);  // a piece each
  int64_t num_windows() const { return static_cast<int64_t>(first.size()) - 1; }
  int64_t length(int64_t w) const;  // the window's tokens, all pieces
  // Appends a window of these pieces.
  void add_window(const std::vector<WindowSpan>& window_pieces);
  bool operator==(const WindowLayout&) const = default;
};

// --packing documents: whole documents in the dataset's order, one piece a window. Each document
// joins the open window when the window still holds it whole (at most T + 1 tokens), else it opens
// the next one. A document longer than T + 1 tokens fills windows of its own of T + 1 tokens, each
// starting at the last token of the one before (as wrapped windows do), and its remainder stays
// open for the next documents. A window of one token (no target) is left out.
std::vector<WindowSpan> document_windows(const std::vector<int64_t>& doc_starts, int64_t n_tokens,
                                         int64_t seq_len);

// --packing bfd: best-fit decreasing, as TRL's SFTTrainer packs (a long document is split, as its
// "bfd_split" does, but into chunks that share a token, so that no target is lost). The items are
// the documents, a document longer than T + 1 tokens cut as document_windows cuts it (chunks of T +
// 1 tokens sharing one token, then the remainder); an item of one token (no target) is left out.
// Taken longest first (ties: dataset order), each goes into the open window with the least room
// that holds it (ties: the earliest window), else opens a window. Windows are numbered as they
// open; a window's pieces are in the order they went in. Every piece but a window's first begins a
// document, or is a remainder whose first token is the last target of the chunk before it, so the
// target at a piece's start never counts (data_loader.h).
WindowLayout best_fit_windows(const std::vector<int64_t>& doc_starts, int64_t n_tokens,
                              int64_t seq_len);

}  // namespace zt
