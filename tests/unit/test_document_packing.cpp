// --packing documents and bfd (io/window_packing.h, io/data_loader.h; docs/fine-tuning.md,
// "Packing and document masking"): the windows against their definition (whole documents, every
// target once; documents: a window closed only when the next document does not fit; bfd: a plain
// best-fit decreasing written here), the sampler's rows against the dataset's tokens, and how
// --packing resolves and refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "app/train_checkpointing.h"
#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_manifest.h"
#include "io/data_loader.h"
#include "io/token_dataset.h"
#include "test_io_support.h"
#include "test_manifest_support.h"
#include "test_token_data_support.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {

// gtest's message for a layout that differs: each window's pieces as [start, end).
void PrintTo(const WindowLayout& layout, std::ostream* out) {
  for (int64_t w = 0; w < layout.num_windows(); ++w) {
    *out << (w ? " | " : "");
    for (int64_t p = layout.first[static_cast<size_t>(w)];
         p < layout.first[static_cast<size_t>(w) + 1]; ++p) {
      const WindowSpan piece = layout.pieces[static_cast<size_t>(p)];
      *out << "[" << piece.start << ", " << piece.start + piece.length << ")";
    }
  }
}

namespace {

using testing::TempDir;

// Document starts for documents of lengths cycling through `lengths`, over n tokens.
std::vector<int64_t> cycling_starts(int64_t n, const std::vector<int64_t>& lengths) {
  std::vector<int64_t> starts;
  for (int64_t at = 0, i = 0; at < n; at += lengths[static_cast<size_t>(i++) % lengths.size()])
    starts.push_back(at);
  return starts;
}

struct Documents {
  std::vector<int64_t> starts;
  int64_t n;
  bool begins_one(int64_t p) const { return std::binary_search(starts.begin(), starts.end(), p); }
  // The document holding token p: [begin, end).
  int64_t begin_of(int64_t p) const {
    return *(std::upper_bound(starts.begin(), starts.end(), p) - 1);
  }
  int64_t end_of(int64_t p) const {
    const auto next = std::upper_bound(starts.begin(), starts.end(), p);
    return next == starts.end() ? n : *next;
  }
};

void expect_document_windows(const Documents& docs, int64_t T) {
  const std::vector<WindowSpan> spans = document_windows(docs.starts, docs.n, T);
  ASSERT_FALSE(spans.empty());
  std::vector<int> targeted(static_cast<size_t>(docs.n), 0);
  for (size_t w = 0; w < spans.size(); ++w) {
    const WindowSpan s = spans[w];
    ASSERT_GE(s.length, 2) << w;
    ASSERT_LE(s.length, T + 1) << w;
    ASSERT_LE(s.start + s.length, docs.n) << w;
    for (int64_t p = s.start + 1; p < s.start + s.length; ++p) ++targeted[static_cast<size_t>(p)];
    if (w == 0) continue;
    const WindowSpan before = spans[w - 1];
    if (docs.begins_one(s.start)) {
      // Closed only when this window's first document would not have fit the one before.
      EXPECT_GT(docs.end_of(s.start) - before.start, T + 1) << "window " << w << " at " << s.start;
    } else {
      // Inside a document longer than a window: the one before is full and shares its last token.
      EXPECT_GT(docs.end_of(s.start) - docs.begin_of(s.start), T + 1) << w;
      EXPECT_EQ(before.length, T + 1) << w;
      EXPECT_EQ(before.start + T, s.start) << w;
    }
  }
  // Every target that does not begin a document (the ones a loss counts) is in exactly one window:
  // none split off, none lost at the end.
  for (int64_t p = 1; p < docs.n; ++p) {
    if (docs.begins_one(p)) continue;
    EXPECT_EQ(targeted[static_cast<size_t>(p)], 1) << "token " << p;
  }
  // A document that fits a window is in one whole.
  for (size_t d = 0; d < docs.starts.size(); ++d) {
    const int64_t a = docs.starts[d], b = docs.end_of(a);
    if (b - a > T + 1 || b - a < 2) continue;
    EXPECT_TRUE(
        std::any_of(spans.begin(), spans.end(),
                    [&](const WindowSpan& s) { return s.start <= a && b <= s.start + s.length; }))
        << "document [" << a << ", " << b << ") at T " << T;
  }
}

TEST(DocumentPacking, WindowsHoldWholeDocumentsAndEveryTargetOnce) {
  const std::vector<std::vector<int64_t>> patterns = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23},
      {1, 1, 2},              // one-token documents count no target
      {50, 3, 100, 9},        // longer than every window below
      {17, 18, 16, 34, 35}};  // T + 1, T + 2, T, 2T + 2, 2T + 3 at T = 16
  for (const auto& lengths : patterns)
    for (const int64_t T : {8, 16, 33})
      for (const int64_t n : {300, 301, 317}) {
        SCOPED_TRACE("T " + std::to_string(T) + " n " + std::to_string(n));
        expect_document_windows({cycling_starts(n, lengths), n}, T);
      }
  // One document: its windows are wrapped windows, plus the remainder at the end.
  const std::vector<WindowSpan> one = document_windows({0}, 40, 16);
  EXPECT_EQ(one, (std::vector<WindowSpan>{{0, 17}, {16, 17}, {32, 8}}));
}

// Best-fit decreasing as a textbook states it, quadratic: the items (whole documents; a longer one
// cut into chunks of T + 1 tokens sharing one token, and its remainder; none of one token) longest
// first, each into the window with the least room that holds it, else a new window.
WindowLayout plain_best_fit(const Documents& docs, int64_t T) {
  std::vector<WindowSpan> items;
  for (int64_t a : docs.starts) {
    const int64_t b = docs.end_of(a);
    int64_t at = a;
    while (b - at > T + 1) {
      items.push_back({at, T + 1});
      at += T;
    }
    if (b - at >= 2) items.push_back({at, b - at});
  }
  std::vector<std::vector<WindowSpan>> windows;
  std::vector<int64_t> room;
  std::vector<bool> placed(items.size(), false);
  for (size_t round = 0; round < items.size(); ++round) {
    size_t longest = items.size();  // the first unplaced item of the greatest length
    for (size_t i = 0; i < items.size(); ++i)
      if (!placed[i] && (longest == items.size() || items[i].length > items[longest].length))
        longest = i;
    placed[longest] = true;
    const WindowSpan item = items[longest];
    size_t best = windows.size();
    for (size_t w = 0; w < windows.size(); ++w)
      if (room[w] >= item.length && (best == windows.size() || room[w] < room[best])) best = w;
    if (best == windows.size()) {
      windows.emplace_back();
      room.push_back(T + 1);
    }
    windows[best].push_back(item);
    room[best] -= item.length;
  }
  WindowLayout layout;
  for (const auto& window : windows) layout.add_window(window);
  return layout;
}

TEST(BestFitPacking, WindowsAreBestFitDecreasingOfWholeDocuments) {
  std::vector<std::vector<int64_t>> patterns = {
      {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23},
      {1, 1, 2},
      {50, 3, 100, 9},
      {17, 18, 16, 34, 35},
      {}};
  SplitMix64 lengths_of(7);  // 97 documents of 1 to 40 tokens
  for (int i = 0; i < 97; ++i)
    patterns.back().push_back(static_cast<int64_t>(lengths_of.below(40)) + 1);
  for (const auto& lengths : patterns)
    for (const int64_t T : {8, 16, 33})
      for (const int64_t n : {300, 301, 317, 2000}) {
        SCOPED_TRACE("T " + std::to_string(T) + " n " + std::to_string(n));
        const Documents docs{cycling_starts(n, lengths), n};
        const WindowLayout layout = best_fit_windows(docs.starts, n, T);
        EXPECT_EQ(layout, plain_best_fit(docs, T));
        // Every window holds 2 to T + 1 tokens; every target that does not begin a document is
        // in exactly one piece; a document that fits a window is one piece.
        std::vector<int> targeted(static_cast<size_t>(n), 0);
        for (int64_t w = 0; w < layout.num_windows(); ++w) {
          EXPECT_GE(layout.length(w), 2) << w;
          EXPECT_LE(layout.length(w), T + 1) << w;
        }
        for (const WindowSpan& piece : layout.pieces)
          for (int64_t p = piece.start + 1; p < piece.start + piece.length; ++p)
            ++targeted[static_cast<size_t>(p)];
        for (int64_t p = 1; p < n; ++p)
          EXPECT_EQ(targeted[static_cast<size_t>(p)], docs.begins_one(p) ? 0 : 1) << p;
        for (int64_t a : docs.starts) {
          const int64_t length = docs.end_of(a) - a;
          if (length < 2 || length > T + 1) continue;
          EXPECT_NE(std::find(layout.pieces.begin(), layout.pieces.end(), WindowSpan{a, length}),
                    layout.pieces.end())
              << "document at " << a;
        }
      }
  // Documents of 6, 5, 4, 3 and 2 tokens in windows of 10: bfd fills two windows, 6 + 4 and
  // 5 + 3 + 2, where documents packing needs three (6, 5 + 4, 3 + 2).
  const Documents five{{0, 6, 11, 15, 18}, 20};
  WindowLayout two;
  two.add_window({{0, 6}, {11, 4}});
  two.add_window({{6, 5}, {15, 3}, {18, 2}});
  EXPECT_EQ(best_fit_windows(five.starts, five.n, 9), two);
  EXPECT_EQ(document_windows(five.starts, five.n, 9),
            (std::vector<WindowSpan>{{0, 6}, {6, 9}, {15, 5}}));
  // 4, 4, 7 and 2 tokens: the 2 goes beside the two 4s, where it fits exactly, not beside the 7,
  // the first window that holds it (first-fit decreasing).
  WindowLayout best;
  best.add_window({{8, 7}});
  best.add_window({{0, 4}, {4, 4}, {15, 2}});
  EXPECT_EQ(best_fit_windows({0, 4, 8, 15}, 17, 9), best);
}

// SFT-like data: tokens (i·7 + 3) mod 256, a loss mask of 0 at every fifth token, and documents
// of 1 to 23 tokens plus one of 40.
std::string packed_dataset(const std::string& path, int64_t n, const Documents& docs) {
  TokenDatasetWriter w(path, 256, "byte");
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> mask;
  for (int64_t i = 0; i < n; ++i) {
    tokens.push_back(static_cast<uint32_t>((i * 7 + 3) % 256));
    mask.push_back(i % 5 == 0 ? 0 : 1);
  }
  for (int64_t s : docs.starts) w.add_document_start(s);
  w.append(tokens.data(), n, "test", mask.data());
  w.finish();
  return path;
}

// The data positions of window w's L tokens, pieces one after another, and whether each is the
// first of a piece after the window's first (the target there never counts).
struct WindowTokens {
  std::vector<int64_t> position;
  std::vector<bool> joins;
  std::vector<int64_t> piece_row;  // the window row where each token's piece begins
};
WindowTokens window_tokens(const WindowSchedule& schedule, int64_t w) {
  WindowTokens out;
  for (const WindowSpan& piece : schedule.window(w)) {
    const auto row = static_cast<int64_t>(out.position.size());
    for (int64_t i = 0; i < piece.length; ++i) {
      out.position.push_back(piece.start + i);
      out.joins.push_back(i == 0 && row > 0);
      out.piece_row.push_back(row);
    }
  }
  return out;
}

// The sampler's rows for `packing` against the windows its schedule defines: inputs and targets
// the pieces' tokens, a target counted where the mask counts it and it begins no piece (nor, with
// document masks, a document); with masks each row's document start the later of its document's
// and its piece's; padding rows token 0, uncounted (a document of their own); the epoch line train
// prints.
void expect_sampler_rows(Packing packing, bool document_masks) {
  TempDir tmp;
  const int64_t n = 400, T = 16, B = 2, A = 2;
  std::vector<int64_t> lengths = {40};
  for (int64_t l = 1; l <= 23; ++l) lengths.push_back(l);
  const Documents docs{cycling_starts(n, lengths), n};
  const TokenDataset data(packed_dataset(tmp / "sft.h5", n, docs));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  data.read(0, n, tokens.data());
  data.read_loss_mask(0, n, mask.data());
  WindowSchedule schedule(packing == Packing::kBfd
                              ? best_fit_windows(docs.starts, n, T)
                              : WindowLayout(document_windows(docs.starts, n, T)),
                          T, B, A, 2, 5);
  WindowSampler rank1(data, 256, T, B, A, 2, 1, 5, document_masks, packing),
      alone(data, 256, T, B, 2 * A, 1, 0, 5, document_masks, packing);
  ASSERT_EQ(rank1.doc_starts().empty(), !document_masks);
  ASSERT_EQ(rank1.schedule().num_windows(), schedule.num_windows());
  // The line train prints at its start: the epoch's windows, the share of their rows that are
  // data, a step's windows (2 ranks x 2 x 2), the epochs.
  int64_t data_rows = 0;
  for (int64_t w = 0; w < schedule.num_windows(); ++w)
    data_rows += static_cast<int64_t>(window_tokens(schedule, w).position.size()) - 1;
  char epochs[32], share[16];
  std::snprintf(epochs, sizeof epochs, "%.2f",
                10.0 * 8 / static_cast<double>(schedule.num_windows()));
  std::snprintf(
      share, sizeof share, "%.0f%%",
      100.0 * static_cast<double>(data_rows) / static_cast<double>(schedule.num_windows() * T));
  EXPECT_EQ(rank1.epoch_summary(10),
            std::to_string(schedule.num_windows()) + " windows of up to 17 tokens an epoch, " +
                share + " data (--packing " + packing_name(packing) + "; 400 tokens, " +
                std::to_string(docs.starts.size()) + " documents), 8 a step: 10 steps are " +
                epochs + " epochs");
  auto counts = [&](const WindowTokens& window, size_t i) {
    const int64_t p = window.position[i];
    return !window.joins[i] && mask[static_cast<size_t>(p)] == 1 &&
           !(document_masks && docs.begins_one(p));
  };
  const int64_t steps = schedule.num_windows() / (B * A * 2) + 2;  // into the second epoch
  for (int64_t step = 0; step < steps; ++step) {
    int64_t expected = 0;
    for (int64_t w : schedule.global_windows()) {
      const WindowTokens window = window_tokens(schedule, w);
      for (size_t i = 1; i < window.position.size(); ++i) expected += counts(window, i) ? 1 : 0;
    }
    const auto windows = testing::step_both_samplers(schedule, rank1, alone, expected);
    for (size_t m = 0; m < windows.size(); ++m)
      for (size_t b = 0; b < windows[m].size(); ++b) {
        const WindowTokens window = window_tokens(schedule, windows[m][b]);
        const auto L = static_cast<int64_t>(window.position.size());
        for (int64_t t = 0; t < T; ++t) {
          const auto i = static_cast<size_t>(static_cast<int64_t>(b) * T + t);
          const auto r = static_cast<size_t>(t);
          SCOPED_TRACE("window " + std::to_string(windows[m][b]) + " row " + std::to_string(t));
          if (t >= L - 1) {
            EXPECT_EQ(rank1.inputs()[m][i], 0);
            EXPECT_EQ(rank1.targets()[m][i], kIgnoredTarget);
            if (document_masks) {
              EXPECT_EQ(rank1.doc_starts()[m][i], L - 1);
            }
            continue;
          }
          const int64_t p = window.position[r], q = window.position[r + 1];
          EXPECT_EQ(rank1.inputs()[m][i], tokens[static_cast<size_t>(p)]);
          EXPECT_EQ(rank1.targets()[m][i],
                    counts(window, r + 1) ? tokens[static_cast<size_t>(q)] : kIgnoredTarget);
          if (document_masks) {
            EXPECT_EQ(rank1.doc_starts()[m][i],
                      std::max(docs.begin_of(p) - p + t, window.piece_row[r]));
          }
        }
      }
  }
}

TEST(DocumentPacking, SamplerRowsAreTheWindowsTokensPaddedWithUncountedRows) {
  for (const bool masks : {true, false}) {
    SCOPED_TRACE(masks ? "document masks" : "no document masks");
    expect_sampler_rows(Packing::kDocuments, masks);
  }
}

TEST(BestFitPacking, SamplerRowsAreThePiecesTokensPaddedWithUncountedRows) {
  for (const bool masks : {true, false}) {
    SCOPED_TRACE(masks ? "document masks" : "no document masks");
    expect_sampler_rows(Packing::kBfd, masks);
  }
}

TEST(DocumentPacking, AutoPacksSftDataAndDocumentsNeedBoundaries) {
  TempDir tmp;
  EXPECT_EQ(parse_packing("documents"), Packing::kDocuments);
  EXPECT_EQ(parse_packing("wrapped"), Packing::kWrapped);
  EXPECT_EQ(parse_packing("bfd"), Packing::kBfd);
  EXPECT_STREQ(packing_name(Packing::kAuto), "auto");
  try {
    parse_packing("ffd");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--packing must be auto, wrapped, documents or bfd, got 'ffd'"),
        std::string::npos)
        << e.what();
  }
  // SFT data (a loss mask and boundaries): bfd.
  {
    TokenDatasetWriter w(tmp / "sft.h5", 256, "byte");
    const std::vector<uint32_t> tokens(64, 9);
    const std::vector<uint8_t> mask(64, 1);
    w.add_document_start(0);
    w.add_document_start(30);
    w.append(tokens.data(), 64, "test", mask.data());
    w.finish();
  }
  EXPECT_EQ(resolve_packing(Packing::kAuto, TokenDataset(tmp / "sft.h5")), Packing::kBfd);
  // Text documents without a loss mask: wrapped, as pre-training cuts its stream; documents on
  // request.
  {
    TokenDatasetWriter w(tmp / "text.h5", 256, "byte");
    const std::vector<uint32_t> tokens(64, 9);
    w.add_document_start(0);
    w.add_document_start(30);
    w.append(tokens.data(), 64, "test");
    w.finish();
  }
  const TokenDataset text(tmp / "text.h5");
  EXPECT_EQ(resolve_packing(Packing::kAuto, text), Packing::kWrapped);
  EXPECT_EQ(resolve_packing(Packing::kDocuments, text), Packing::kDocuments);
  EXPECT_EQ(resolve_packing(Packing::kBfd, text), Packing::kBfd);
  // No document boundaries: auto wraps, documents is refused naming the file.
  {
    TokenDatasetWriter w(tmp / "stream.h5", 256, "byte");
    const std::vector<uint32_t> tokens(64, 9);
    const std::vector<uint8_t> mask(64, 1);
    w.append(tokens.data(), 64, "test", mask.data());
    w.finish();
  }
  const TokenDataset stream(tmp / "stream.h5");
  EXPECT_EQ(resolve_packing(Packing::kAuto, stream), Packing::kWrapped);
  for (const Packing packing : {Packing::kDocuments, Packing::kBfd}) try {
      resolve_packing(packing, stream);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("--packing ") + packing_name(packing) + ": token dataset"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("stream.h5"), std::string::npos) << what;
      EXPECT_NE(what.find("--packing wrapped"), std::string::npos) << what;
    }
}

// The data cursor counts one packing's windows: a resume with another is refused, naming what
// continues it; on other data (--allow-data-change) it is a warning. A checkpoint written before
// --packing existed was wrapped. (--packing auto taking the checkpoint's:
// world_invariant_documents.)
TEST(DocumentPacking, ResumeWithAnotherPackingIsRefused) {
  CheckpointManifest m;
  m.world_size = 2;
  m.precision = "bf16";
  m.hyper.seq_len = 32;
  nlohmann::json before = m.hyper.to_json();
  before.erase("packing");
  m.hyper = TrainingHyperparameters::from_json(before);
  EXPECT_EQ(m.hyper.packing, "wrapped");
  TrainingHyperparameters run = m.hyper;
  EXPECT_TRUE(check_resume_hyperparameters(m, run, 2, "bf16", "c").empty());
  run.packing = "documents";
  try {
    check_resume_hyperparameters(m, run, 2, "bf16", "c");
    ADD_FAILURE() << "accepted another packing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("packing (--packing auto continues the checkpoint's): "
                                         "checkpoint wrapped, run documents"),
              std::string::npos)
        << e.what();
  }
  const auto on_other_data = check_resume_hyperparameters(m, run, 2, "bf16", "c", true);
  ASSERT_EQ(on_other_data.size(), 1u);
  EXPECT_NE(on_other_data[0].find("checkpoint wrapped, run documents"), std::string::npos)
      << on_other_data[0];
  nlohmann::json unknown = m.hyper.to_json();
  unknown["packing"] = "auto";  // a request, never what ran
  EXPECT_THROW(TrainingHyperparameters::from_json(unknown), Error);
}

// info DATA.h5 --seq-len T: what each packing cuts the dataset into (the layouts' windows and
// the share of their rows that hold data), train's default first; refused on a directory and for
// a length that is not positive.
TEST(BestFitPacking, InfoSaysWhatEachPackingCutsTheDatasetInto) {
  TempDir tmp;
  const int64_t n = 400, T = 16;
  std::vector<int64_t> lengths = {40};
  for (int64_t l = 1; l <= 23; ++l) lengths.push_back(l);
  const Documents docs{cycling_starts(n, lengths), n};
  const std::string path = packed_dataset(tmp / "sft.h5", n, docs);
  testing::RunResult r = testing::run_zerotrain("info --json --seq-len 16 '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["seq_len"], T);
  const WindowLayout bfd = best_fit_windows(docs.starts, n, T);
  const std::vector<WindowSpan> in_order = document_windows(docs.starts, n, T);
  int64_t bfd_rows = 0, in_order_rows = 0;
  for (int64_t w = 0; w < bfd.num_windows(); ++w) bfd_rows += bfd.length(w) - 1;
  for (const WindowSpan& s : in_order) in_order_rows += s.length - 1;
  const auto windows_in_order = static_cast<int64_t>(in_order.size());
  EXPECT_EQ(j["packings"]["bfd"]["windows"], bfd.num_windows());
  EXPECT_DOUBLE_EQ(j["packings"]["bfd"]["data_share"].get<double>(),
                   static_cast<double>(bfd_rows) / static_cast<double>(bfd.num_windows() * T));
  EXPECT_EQ(j["packings"]["documents"]["windows"], windows_in_order);
  EXPECT_DOUBLE_EQ(j["packings"]["documents"]["data_share"].get<double>(),
                   static_cast<double>(in_order_rows) / static_cast<double>(windows_in_order * T));
  EXPECT_EQ(j["packings"]["wrapped"]["windows"], (n - 1) / T);
  EXPECT_EQ(j["packings"]["wrapped"]["data_share"], 1.0);
  EXPECT_EQ(j["packings"]["wrapped"]["targets_in_no_window"], (n - 1) % T);
  EXPECT_LT(bfd.num_windows(), windows_in_order);
  r = testing::run_zerotrain("info --seq-len 16 '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto percent = [](double share) {
    char text[16];
    std::snprintf(text, sizeof text, "%.0f%%", 100.0 * share);
    return std::string(text);
  };
  EXPECT_NE(
      r.output.find("at --seq-len 16 (train --packing), an epoch is:\n  bfd: " +
                    std::to_string(bfd.num_windows()) + " windows of up to 17 tokens, " +
                    percent(j["packings"]["bfd"]["data_share"].get<double>()) +
                    " data (the default)\n  documents: " + std::to_string(windows_in_order) +
                    " windows of up to 17 tokens, " +
                    percent(j["packings"]["documents"]["data_share"].get<double>()) + " data\n"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("  wrapped: 24 windows of 17 tokens, 100% data; the last 15 targets in "
                          "no window\n"),
            std::string::npos)
      << r.output;
  // Text with boundaries but no loss mask: wrapped is the default, listed first; without
  // boundaries only wrapped applies.
  for (const bool boundaries : {true, false}) {
    const std::string text = tmp / (boundaries ? "text.h5" : "stream.h5");
    {
      TokenDatasetWriter w(text, 256, "byte");
      const std::vector<uint32_t> tokens(65, 9);
      if (boundaries) {
        w.add_document_start(0);
        w.add_document_start(30);
      }
      w.append(tokens.data(), 65, "test");
      w.finish();
    }
    r = testing::run_zerotrain("info --json --seq-len 16 '" + text + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto t = nlohmann::json::parse(r.output);
    EXPECT_EQ(t["packing"], "wrapped");
    EXPECT_EQ(t["packings"].size(), boundaries ? 3u : 1u);
    EXPECT_EQ(t["packings"]["wrapped"]["targets_in_no_window"], 0);
    r = testing::run_zerotrain("info --seq-len 16 '" + text + "'");
    EXPECT_NE(r.output.find("an epoch is:\n  wrapped: 4 windows of 17 tokens, 100% data (the "
                            "default)\n"),
              std::string::npos)
        << r.output;
  }
  for (const char* bad : {"--env --seq-len 16", "--env --seq-len 0"}) {
    r = testing::run_zerotrain(std::string("info ") + bad);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("info --seq-len describes a token dataset, not --env"),
              std::string::npos)
        << r.output;
  }
  r = testing::run_zerotrain("info --seq-len 9223372036854775807 '" + path + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("at most 2147483648, got 9223372036854775807"), std::string::npos)
      << r.output;
  r = testing::run_zerotrain("info --seq-len 0 '" + path + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("info --seq-len must be a positive number of tokens, at most "),
            std::string::npos)
      << r.output;
  std::filesystem::create_directories(tmp / "model");
  r = testing::run_zerotrain("info --seq-len 16 '" + tmp / "model" + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("info --seq-len describes a token dataset's windows"), std::string::npos)
      << r.output;
}

// --packing auto on a resume takes the checkpoint's packing: an earlier version's SFT run
// (documents) continues with documents, though auto starts SFT data with bfd.
TEST(DocumentPacking, AutoResumeContinuesTheCheckpointsPacking) {
  TempDir tmp;
  const int64_t n = 200;
  const TokenDataset data(packed_dataset(tmp / "sft.h5", n, {cycling_starts(n, {9, 30}), n}));
  const std::string dir = tmp / "run/checkpoints/step-00000007";
  std::filesystem::create_directories(dir);
  CheckpointFlags resume;
  resume.resume = dir;
  auto packing_resumed_from = [&](const std::string& saved, const TokenDataset& on) {
    CheckpointManifest m = testing::tiny_manifest(1);
    m.hyper.packing = saved;
    std::ofstream(dir + "/" + kCheckpointManifestFile) << m.to_json().dump();
    return packing_for_run(Packing::kAuto, resume, tmp / "run", on);
  };
  EXPECT_EQ(packing_for_run(Packing::kAuto, CheckpointFlags{}, tmp / "run", data), Packing::kBfd);
  EXPECT_EQ(packing_resumed_from("documents", data), Packing::kDocuments);
  EXPECT_EQ(packing_resumed_from("bfd", data), Packing::kBfd);
  EXPECT_EQ(packing_resumed_from("wrapped", data), Packing::kWrapped);
  // On other data (--allow-data-change) without boundaries, auto cannot continue bfd: refused,
  // naming the checkpoint, its packing and the dataset.
  {
    TokenDatasetWriter w(tmp / "stream.h5", 256, "byte");
    const std::vector<uint32_t> tokens(64, 9);
    w.append(tokens.data(), 64, "test");
    w.finish();
  }
  const TokenDataset stream(tmp / "stream.h5");
  try {
    packing_resumed_from("bfd", stream);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const std::string& part :
         {dir, std::string("', bfd, but token dataset"), std::string(tmp / "stream.h5"),
          std::string("--packing wrapped")})
      EXPECT_NE(what.find(part), std::string::npos) << part << " in " << what;
  }
}

}  // namespace
}  // namespace zt
