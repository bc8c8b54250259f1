// --packing documents (io/data_loader.h; docs/fine-tuning.md, "Packing and document masking"):
// the windows against their definition (whole documents, every target once, a window closed only
// when the next document does not fit), the sampler's rows against the dataset's tokens, and how
// --packing resolves and refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_manifest.h"
#include "io/data_loader.h"
#include "io/token_dataset.h"
#include "test_io_support.h"
#include "test_token_data_support.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {
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

TEST(DocumentPacking, SamplerRowsAreTheWindowsTokensPaddedWithUncountedRows) {
  TempDir tmp;
  const int64_t n = 400, T = 16, B = 2, A = 2;
  std::vector<int64_t> lengths = {40};
  for (int64_t l = 1; l <= 23; ++l) lengths.push_back(l);
  const Documents docs{cycling_starts(n, lengths), n};
  const TokenDataset data(packed_dataset(tmp / "sft.h5", n, docs));
  ASSERT_EQ(resolve_packing(Packing::kAuto, data), Packing::kDocuments);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  data.read(0, n, tokens.data());
  data.read_loss_mask(0, n, mask.data());
  WindowSchedule schedule(document_windows(docs.starts, n, T), T, B, A, 2, 5);
  WindowSampler rank1(data, 256, T, B, A, 2, 1, 5, true, Packing::kDocuments),
      alone(data, 256, T, B, 2 * A, 1, 0, 5, true, Packing::kDocuments);
  ASSERT_EQ(rank1.schedule().num_windows(), schedule.num_windows());
  // The line train prints at its start: the epoch's windows, the share of their rows that are
  // data, a step's windows (2 ranks x 2 x 2), the epochs.
  int64_t data_rows = 0;
  for (int64_t w = 0; w < schedule.num_windows(); ++w) data_rows += schedule.window(w).length - 1;
  char epochs[32], share[16];
  std::snprintf(epochs, sizeof epochs, "%.2f",
                10.0 * 8 / static_cast<double>(schedule.num_windows()));
  std::snprintf(
      share, sizeof share, "%.0f%%",
      100.0 * static_cast<double>(data_rows) / static_cast<double>(schedule.num_windows() * T));
  EXPECT_EQ(rank1.epoch_summary(10),
            std::to_string(schedule.num_windows()) + " windows of up to 17 tokens an epoch, " +
                share + " data (--packing documents; 400 tokens, " +
                std::to_string(docs.starts.size()) + " documents), 8 a step: 10 steps are " +
                epochs + " epochs");
  auto counts = [&](int64_t p) { return mask[static_cast<size_t>(p)] == 1 && !docs.begins_one(p); };
  const int64_t steps = schedule.num_windows() / (B * A * 2) + 2;  // into the second epoch
  for (int64_t step = 0; step < steps; ++step) {
    int64_t expected = 0;
    for (int64_t w : schedule.global_windows()) {
      const WindowSpan s = schedule.window(w);
      for (int64_t p = s.start + 1; p < s.start + s.length; ++p) expected += counts(p) ? 1 : 0;
    }
    const auto windows = testing::step_both_samplers(schedule, rank1, alone, expected);
    for (size_t m = 0; m < windows.size(); ++m)
      for (size_t b = 0; b < windows[m].size(); ++b) {
        const WindowSpan s = schedule.window(windows[m][b]);
        for (int64_t t = 0; t < T; ++t) {
          const auto i = static_cast<size_t>(static_cast<int64_t>(b) * T + t);
          const bool real = t < s.length - 1;
          const int64_t p = s.start + t;
          EXPECT_EQ(rank1.inputs()[m][i], real ? tokens[static_cast<size_t>(p)] : 0) << t;
          EXPECT_EQ(rank1.targets()[m][i],
                    real && counts(p + 1) ? tokens[static_cast<size_t>(p + 1)] : kIgnoredTarget)
              << "window at " << s.start << " row " << t;
          EXPECT_EQ(rank1.doc_starts()[m][i],
                    real ? std::max(docs.begin_of(p), s.start) - s.start : s.length - 1)
              << "window at " << s.start << " row " << t;
        }
      }
  }
}

TEST(DocumentPacking, AutoPacksSftDataAndDocumentsNeedBoundaries) {
  TempDir tmp;
  EXPECT_EQ(parse_packing("documents"), Packing::kDocuments);
  EXPECT_EQ(parse_packing("wrapped"), Packing::kWrapped);
  EXPECT_STREQ(packing_name(Packing::kAuto), "auto");
  try {
    parse_packing("bfd");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--packing must be auto, wrapped or documents, got 'bfd'"),
              std::string::npos)
        << e.what();
  }
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
  try {
    resolve_packing(Packing::kDocuments, stream);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
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

}  // namespace
}  // namespace zt
