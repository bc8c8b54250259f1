// Document masks (docs/fine-tuning.md, "Packing and document masking"): /doc_starts written by
// prepare-data and checked when read, the windows' doc starts and counted targets, and the CPU
// attention and RoPE with masks against each document run alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "app/cli.h"
#include "backend/backend.h"
#include "io/data_loader.h"
#include "io/hdf5_util.h"
#include "io/token_dataset.h"
#include "test_cpu_backend_support.h"
#include "test_io_support.h"
#include "test_token_data_support.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {
namespace {

using test::random_normal;
using testing::TempDir;

// An llm.c GPT-2 shard: 256 int32 header (magic, version 1, count) then uint16 tokens.
std::string gpt2_shard(const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = kLlmcMagic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
  return bytes;
}

void expect_error_mentions(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(DocumentMasks, PrepareDataRecordsEachSourcesDocuments) {
  TempDir tmp;
  // Text: each file is a document.
  testing::write_file(tmp / "a.txt", "first");
  testing::write_file(tmp / "b.txt", "second one");
  testing::write_file(tmp / "c.txt", "3");
  prepare_token_dataset({tmp / "a.txt", tmp / "b.txt", tmp / "c.txt"}, TokenSource::kText,
                        tmp / "text.h5", {}, false);
  EXPECT_EQ(TokenDataset(tmp / "text.h5").document_starts(), (std::vector<int64_t>{0, 5, 15}));
  // llm.c: <|endoftext|> (50256) opens each document, which may continue into the next shard.
  testing::write_file(tmp / "s1.bin", gpt2_shard({50256, 1, 2, 50256, 3}));
  testing::write_file(tmp / "s2.bin", gpt2_shard({4, 5, 50256, 6}));
  prepare_token_dataset({tmp / "s1.bin", tmp / "s2.bin"}, TokenSource::kLlmcBin, tmp / "llmc.h5",
                        {}, false);
  const TokenDataset llmc(tmp / "llmc.h5");
  EXPECT_EQ(llmc.document_starts(), (std::vector<int64_t>{0, 3, 7}));
  EXPECT_EQ(llmc.document_start_of(6), 3);  // the document that crossed the shards
  EXPECT_EQ(llmc.document_start_of(8), 7);
  // nanoGPT's GPT-2 data: <|endoftext|> closes each document (a last one at the end adds none).
  const std::vector<uint16_t> nano = {1, 2, 50256, 3, 50256};
  testing::write_file(tmp / "n.bin",
                      std::string(reinterpret_cast<const char*>(nano.data()), nano.size() * 2));
  prepare_token_dataset({tmp / "n.bin"}, TokenSource::kNanoGptBin, tmp / "nano.h5",
                        {kGpt2VocabSize, "gpt2"}, false);
  EXPECT_EQ(TokenDataset(tmp / "nano.h5").document_starts(), (std::vector<int64_t>{0, 3}));
  // Character-level nanoGPT data has no separator: one stream, no /doc_starts.
  prepare_token_dataset({tmp / "n.bin"}, TokenSource::kNanoGptBin, tmp / "chars.h5",
                        {65536, "chars"}, false);
  EXPECT_FALSE(TokenDataset(tmp / "chars.h5").has_documents());
  // The boundaries are part of the identity.
  EXPECT_NE(TokenDataset(tmp / "text.h5").identity().find("documents 3 "), std::string::npos);
  EXPECT_EQ(TokenDataset(tmp / "chars.h5").identity().find("documents"), std::string::npos);
}

// A dataset of `n` tokens whose /doc_starts holds `starts` as `type`, written past the writer.
std::string with_doc_starts(const TempDir& tmp, const std::string& name, int64_t n,
                            const std::vector<int64_t>& starts, DType type) {
  return testing::token_dataset_with(tmp / name, n, "doc_starts", type, DType::kInt64,
                                     starts.data(), static_cast<int64_t>(starts.size()));
}

TEST(DocumentMasks, BadBoundariesAreRefusedNamingFileAndEntry) {
  TempDir tmp;
  EXPECT_EQ(
      TokenDataset(with_doc_starts(tmp, "ok.h5", 10, {0, 4, 9}, DType::kUint64)).document_starts(),
      (std::vector<int64_t>{0, 4, 9}));
  const std::string not_zero = with_doc_starts(tmp, "z.h5", 10, {2, 4}, DType::kUint64);
  expect_error_mentions([&] { TokenDataset d(not_zero); },
                        {"z.h5", "/doc_starts", "not at token 0"});
  const std::string repeated = with_doc_starts(tmp, "r.h5", 10, {0, 4, 4}, DType::kUint64);
  expect_error_mentions([&] { TokenDataset d(repeated); }, {"r.h5", "entry 2"});
  const std::string beyond = with_doc_starts(tmp, "b.h5", 10, {0, 10}, DType::kUint64);
  expect_error_mentions([&] { TokenDataset d(beyond); }, {"b.h5", "entry 1", "10 tokens"});
  const std::string signed_type = with_doc_starts(tmp, "s.h5", 10, {0, 4}, DType::kInt32);
  expect_error_mentions([&] { TokenDataset d(signed_type); }, {"s.h5", "int32", "uint64"});
  const std::string empty = with_doc_starts(tmp, "e.h5", 10, {}, DType::kUint64);
  expect_error_mentions([&] { TokenDataset d(empty); }, {"e.h5", "/doc_starts"});
}

TEST(DocumentMasks, WindowsGetDocStartsAndLeaveOutTargetsThatBeginADocument) {
  TempDir tmp;
  const int64_t n = 400, T = 16, B = 2, A = 2;
  // Documents of lengths 1, 2, ..., cycling to 23: short ones, and ones longer than a window.
  std::vector<int64_t> starts;
  for (int64_t at = 0, len = 1; at < n; at += len, len = len % 23 + 1) starts.push_back(at);
  const TokenDataset data(with_doc_starts(tmp, "d.h5", n, starts, DType::kUint64));
  auto starts_document = [&](int64_t p) {
    return std::find(starts.begin(), starts.end(), p) != starts.end();
  };
  auto doc_of = [&](int64_t p) { return *(std::upper_bound(starts.begin(), starts.end(), p) - 1); };
  WindowSchedule schedule(n, T, B, A, 2, 5);
  WindowSampler rank1(data, 256, T, B, A, 2, 1, 5, true),
      alone(data, 256, T, B, 2 * A, 1, 0, 5, true);
  for (int step = 0; step < 3; ++step) {
    int64_t expected = 0;
    for (int64_t w : schedule.global_windows())
      for (int64_t t = 1; t <= T; ++t) expected += starts_document(w * T + t) ? 0 : 1;
    const auto windows = testing::step_both_samplers(schedule, rank1, alone, expected);
    ASSERT_EQ(rank1.doc_starts().size(), static_cast<size_t>(A));
    for (size_t m = 0; m < windows.size(); ++m)
      for (size_t b = 0; b < windows[m].size(); ++b)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t start = windows[m][b] * T, i = static_cast<int64_t>(b) * T + t;
          EXPECT_EQ(rank1.doc_starts()[m][i], std::max(doc_of(start + t), start) - start);
          EXPECT_EQ(rank1.targets()[m][i] == kIgnoredTarget, starts_document(start + t + 1));
        }
  }
  // Eval windows follow the same rule; without masks every target counts and no starts are made.
  std::vector<int32_t> in(2 * T), tg(2 * T), ds(2 * T, -1);
  int64_t expected = 0;
  for (int64_t w = 1; w < 3; ++w)
    for (int64_t t = 1; t <= T; ++t) expected += starts_document(w * (T + 1) + t) ? 0 : 1;
  EXPECT_EQ(read_eval_windows(data, 1, 2, T, in.data(), tg.data(), ds.data()), expected);
  EXPECT_EQ(ds[T], std::max(doc_of(2 * (T + 1)), 2 * (T + 1)) - 2 * (T + 1));
  EXPECT_EQ(read_eval_windows(data, 1, 2, T, in.data(), tg.data()), 2 * T);
  WindowSampler plain(data, 256, T, B, A, 2, 0, 5);
  plain.next_step();
  EXPECT_TRUE(plain.doc_starts().empty());
  EXPECT_EQ(plain.counted_targets(), B * A * 2 * T);
  // Eval "all": 23 windows of 17 tokens, 12 batches of 2; the last batch's second window is
  // padding, one document (doc starts 0) with no counted target, after a batch of real documents.
  const EvalWindows all = eval_windows(data, kAllEvalBatches, B, T);
  ASSERT_EQ(all.windows, 23);
  ASSERT_EQ(all.batches, 12);
  EvalBatch batch(B, T, true);
  batch.read(data, all, 10);
  int64_t last = 0;
  for (int64_t t = 1; t <= T; ++t) last += starts_document(22 * (T + 1) + t) ? 0 : 1;
  EXPECT_EQ(batch.read(data, all, 11), last);
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_EQ(batch.doc_starts()[T + t], 0) << t;
    EXPECT_EQ(batch.targets()[static_cast<size_t>(T + t)], kIgnoredTarget) << t;
    EXPECT_EQ(batch.doc_starts()[t],
              std::max(doc_of(22 * (T + 1) + t), 22 * (T + 1)) - 22 * (T + 1));
  }
}

// --document-masking: auto masks data with more than one document (with one, the masks are plain
// causal attention: the fused GPU path keeps running it); on needs boundaries; bad values named.
TEST(DocumentMasks, ModeResolution) {
  const AutoSwitch automatic = AutoSwitch::kAuto, on = AutoSwitch::kOn, off = AutoSwitch::kOff;
  EXPECT_FALSE(resolve_document_masking(automatic, 0, "d.h5", "train"));
  EXPECT_FALSE(resolve_document_masking(automatic, 1, "d.h5", "train"));
  EXPECT_TRUE(resolve_document_masking(automatic, 2, "d.h5", "train"));
  EXPECT_TRUE(resolve_document_masking(on, 1, "d.h5", "train"));
  EXPECT_FALSE(resolve_document_masking(off, 5, "d.h5", "train"));
  expect_error_mentions([&] { resolve_document_masking(on, 0, "d.h5", "eval"); },
                        {"eval", "--document-masking on", "d.h5", "/doc_starts"});
  for (const char* word : {"auto", "on", "off"})
    EXPECT_STREQ(auto_switch_name(parse_auto_switch(word, "--document-masking")), word);
  expect_error_mentions([] { parse_auto_switch("yes", "--document-masking"); },
                        {"--document-masking", "'yes'"});
}

// Per-row doc starts of `starts` (each row's document starts, 0 first).
std::vector<int32_t> doc_start_rows(const std::vector<std::vector<int32_t>>& starts, int64_t T) {
  std::vector<int32_t> out;
  for (const auto& row : starts)
    for (int64_t t = 0; t < T; ++t)
      out.push_back(*(std::upper_bound(row.begin(), row.end(), static_cast<int32_t>(t)) - 1));
  return out;
}

// Rows [a, b) of batch row r of x[B, T, heads, hd], as a [1, b − a, heads, hd] tensor.
std::vector<float> rows_of(const std::vector<float>& x, int64_t r, int64_t T, int64_t width,
                           int64_t a, int64_t b) {
  return {x.begin() + (r * T + a) * width, x.begin() + (r * T + b) * width};
}

// The largest |got − want| over the rows [a, b) of batch row r, relative to max(1, |want|).
double worst_difference(const std::vector<float>& got, const std::vector<float>& part, int64_t r,
                        int64_t T, int64_t width, int64_t a) {
  double worst = 0;
  for (size_t i = 0; i < part.size(); ++i) {
    const double g = got[static_cast<size_t>((r * T + a) * width) + i];
    worst = std::max(worst, std::abs(g - part[i]) / std::max(1.0, std::abs(double{part[i]})));
  }
  return worst;
}

// Documents crossing the CPU attention's 64-row query blocks, a one-token document, and a row
// that is one document: forward and backward equal each document's part run alone (B = 1, plain
// causal), up to fp32 sums in another order: 10·u·√T (u = 2^-24) of the largest term. RoPE with
// masks is bitwise RoPE of each part from position 0. Under a sliding window (`scores`) each part
// runs alone with the same window: a row's first key is the later of its document's and its
// window's.
void expect_documents_computed_alone(const AttentionScores& scores) {
  SCOPED_TRACE("window " + std::to_string(scores.window));
  const int64_t B = 3, T = 150, H = 4, Hkv = 2, hd = 8;
  const std::vector<std::vector<int32_t>> starts = {{0, 40, 70, 71, 130}, {0, 100}, {0}};
  const std::vector<int32_t> doc_start = doc_start_rows(starts, T);
  const int64_t qw = H * hd, kw = Hkv * hd;
  auto q = random_normal(B * T * qw, 1), k = random_normal(B * T * kw, 2),
       v = random_normal(B * T * kw, 3), dout = random_normal(B * T * qw, 4);
  auto be = make_cpu_backend();
  std::vector<float> out(q.size()), lse(B * H * T), dq(q.size()), dk(k.size()), dv(v.size());
  be->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), B, T, H, Hkv, hd,
                        doc_start.data(), scores);
  be->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(),
                         out.data(), lse.data(), B, T, H, Hkv, hd, doc_start.data(), scores);
  const double bound = 10 * std::ldexp(1.0, -24) * std::sqrt(static_cast<double>(T));
  const RopeSpec rope = RopeSpec::unscaled(10000.0f);
  auto roped = q;
  be->rope_forward(roped.data(), B, T, H, hd, rope, doc_start.data());
  for (int64_t r = 0; r < B; ++r) {
    for (size_t d = 0; d < starts[r].size(); ++d) {
      const int64_t a = starts[r][d], b = d + 1 < starts[r].size() ? starts[r][d + 1] : T;
      const int64_t n = b - a;
      auto pq = rows_of(q, r, T, qw, a, b), pk = rows_of(k, r, T, kw, a, b),
           pv = rows_of(v, r, T, kw, a, b), pdout = rows_of(dout, r, T, qw, a, b);
      std::vector<float> pout(pq.size()), plse(H * n), pdq(pq.size()), pdk(pk.size()),
          pdv(pv.size());
      be->attention_forward(pout.data(), plse.data(), pq.data(), pk.data(), pv.data(), 1, n, H, Hkv,
                            hd, nullptr, scores);
      be->attention_backward(pdq.data(), pdk.data(), pdv.data(), pdout.data(), pq.data(), pk.data(),
                             pv.data(), pout.data(), plse.data(), 1, n, H, Hkv, hd, nullptr,
                             scores);
      const std::string where = "row " + std::to_string(r) + " document " + std::to_string(d);
      EXPECT_LE(worst_difference(out, pout, r, T, qw, a), bound) << where << " out";
      EXPECT_LE(worst_difference(dq, pdq, r, T, qw, a), bound) << where << " dq";
      EXPECT_LE(worst_difference(dk, pdk, r, T, kw, a), bound) << where << " dk";
      EXPECT_LE(worst_difference(dv, pdv, r, T, kw, a), bound) << where << " dv";
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t)
          EXPECT_NEAR(lse[(r * H + h) * T + a + t], plse[h * n + t], bound) << where << " lse";
      be->rope_forward(pq.data(), 1, n, H, hd, rope);
      EXPECT_EQ(worst_difference(roped, pq, r, T, qw, a), 0.0) << where << " rope";
    }
  }
}

TEST(DocumentMasks, CpuAttentionAndRopeEqualEachDocumentAlone) {
  expect_documents_computed_alone({});
}

// A window of 50 keys: shorter than the documents of 59, 100 and 150 tokens (and than a block of
// 64 query rows), as long as the one of 50, longer than those of 40, 30, 20 and 1.
TEST(DocumentMasks, CpuAttentionInASlidingWindowEqualsEachDocumentAlone) {
  expect_documents_computed_alone({0.0f, 0.0f, 50});
}

// A row that is one document computes bitwise what no masks compute (the path every unmasked run
// takes), forward and backward.
TEST(DocumentMasks, OneDocumentRowsAreBitwiseTheUnmaskedPath) {
  const int64_t B = 2, T = 130, H = 2, Hkv = 1, hd = 8;
  const std::vector<int32_t> zeros(B * T, 0);
  auto q = random_normal(B * T * H * hd, 5), k = random_normal(B * T * Hkv * hd, 6),
       v = random_normal(B * T * Hkv * hd, 7), dout = random_normal(q.size(), 8);
  auto be = make_cpu_backend();
  std::vector<float> out[2], lse[2], dq[2], dk[2], dv[2];
  for (int masked = 0; masked < 2; ++masked) {
    const int32_t* ds = masked ? zeros.data() : nullptr;
    out[masked].resize(q.size()), lse[masked].resize(B * H * T), dq[masked].resize(q.size());
    dk[masked].resize(k.size()), dv[masked].resize(v.size());
    be->attention_forward(out[masked].data(), lse[masked].data(), q.data(), k.data(), v.data(), B,
                          T, H, Hkv, hd, ds);
    be->attention_backward(dq[masked].data(), dk[masked].data(), dv[masked].data(), dout.data(),
                           q.data(), k.data(), v.data(), out[masked].data(), lse[masked].data(), B,
                           T, H, Hkv, hd, ds);
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(lse[0], lse[1]);
  EXPECT_EQ(dq[0], dq[1]);
  EXPECT_EQ(dk[0], dk[1]);
  EXPECT_EQ(dv[0], dv[1]);
}

}  // namespace
}  // namespace zt
