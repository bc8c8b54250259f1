// CPU-only checks of the fused attention's host side (backend/attention_choice.h; no GPU, no
// CUDA headers): --attention resolution, what cuDNN's SDPA accepts, the documents' ragged graphs
// and their fit to the workspace, the graph cache (its builds and their time), and the staging
// and scratch bytes.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "../support/error_text.h"
#include "backend/attention_choice.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

TEST(AttentionChoice, ParsesTheRequestAndNamesABadValue) {
  EXPECT_EQ(parse_attention_request("gemm"), AttentionRequest::kGemm);
  EXPECT_EQ(parse_attention_request("fused"), AttentionRequest::kFused);
  EXPECT_EQ(parse_attention_request("auto"), AttentionRequest::kAuto);
  for (AttentionRequest r :
       {AttentionRequest::kGemm, AttentionRequest::kFused, AttentionRequest::kAuto})
    EXPECT_EQ(parse_attention_request(attention_request_name(r)), r);
  const std::string e = error_of([] { parse_attention_request("flash"); });
  EXPECT_NE(e.find("'flash'"), std::string::npos) << e;
  EXPECT_NE(e.find("gemm, fused or auto"), std::string::npos) << e;
}

// cuDNN's answer when the probe builds the graphs: "" (both built) or its reason.
std::string cudnn_accepts() {
  return "";
}

// A 2 × 2048 micro-batch with the given heads.
AttentionShape heads(int64_t H, int64_t Hkv, int64_t hd) {
  return AttentionShape{2, 2048, H, Hkv, hd};
}

TEST(AttentionChoice, FusedSupportFollowsCudnnLimits) {
  EXPECT_EQ(fused_attention_unsupported(heads(32, 8, 128), 9),
            "");  // Llama-3-8B-like heads on H100
  EXPECT_EQ(fused_attention_unsupported(heads(16, 16, 64), 8), "");  // A100
  EXPECT_NE(fused_attention_unsupported(heads(16, 16, 64), 7).find("8.0 or newer"),
            std::string::npos);
  EXPECT_NE(fused_attention_unsupported(heads(16, 16, 256), 9).find("head_dim 256"),
            std::string::npos);
  EXPECT_NE(fused_attention_unsupported(heads(16, 16, 20), 9).find("head_dim 20"),
            std::string::npos);
  EXPECT_NE(fused_attention_unsupported(heads(12, 8, 64), 9).find("not a multiple"),
            std::string::npos);
  // Gemma 2's soft cap is no stage of SDPA; its scale alone is.
  EXPECT_NE(fused_attention_unsupported(AttentionShape{2, 2048, 16, 8, 128, {0.0625f, 50.0f}}, 9)
                .find("soft cap"),
            std::string::npos);
  EXPECT_EQ(fused_attention_unsupported(AttentionShape{2, 2048, 16, 8, 128, {0.0625f, 0.0f}}, 9),
            "");
  // A sliding window shorter than the sequence is not built on the fused path (auto keeps such a
  // run on the GEMM path, saying so); a window the sequence fits in is none
  // (ModelConfig::attention_scores), as Mistral-7B-v0.1's 4096 at 2048 positions.
  const AttentionShape windowed{2, 2048, 32, 8, 128, {0.0f, 0.0f, 1024}};
  EXPECT_NE(fused_attention_unsupported(windowed, 9).find("sliding window of 1024 tokens"),
            std::string::npos);
  const AttentionChoice auto_windowed =
      choose_attention(AttentionRequest::kAuto, true, 9, windowed, false, cudnn_accepts);
  EXPECT_EQ(auto_windowed.kernel, AttentionKernel::kGemm);
  EXPECT_NE(auto_windowed.why.find("sliding window"), std::string::npos) << auto_windowed.why;
  EXPECT_THROW(choose_attention(AttentionRequest::kFused, true, 9, windowed, false, cudnn_accepts),
               Error);
  // One position: cuDNN's backward refuses s_q = s_kv = 1; two run.
  EXPECT_NE(fused_attention_unsupported(AttentionShape{4, 1, 16, 16, 64}, 9).find("--seq-len"),
            std::string::npos);
  EXPECT_EQ(fused_attention_unsupported(AttentionShape{4, 2, 16, 16, 64}, 9), "");
  EXPECT_EQ(choose_attention(AttentionRequest::kAuto, true, 9, AttentionShape{4, 1, 16, 16, 64},
                             false, cudnn_accepts)
                .kernel,
            AttentionKernel::kGemm);
}

TEST(AttentionChoice, ResolvesRequestsAgainstBuildAndShape) {
  // gemm is always gemm; fused and auto run fused where built and supported.
  EXPECT_EQ(
      choose_attention(AttentionRequest::kGemm, true, 9, heads(16, 16, 64), false, cudnn_accepts)
          .kernel,
      AttentionKernel::kGemm);
  EXPECT_EQ(
      choose_attention(AttentionRequest::kFused, true, 9, heads(16, 16, 64), false, cudnn_accepts)
          .kernel,
      AttentionKernel::kFused);
  EXPECT_EQ(
      choose_attention(AttentionRequest::kAuto, true, 9, heads(16, 16, 64), false, cudnn_accepts)
          .kernel,
      AttentionKernel::kFused);
  // auto falls back and says why; an explicit fused request that cannot run is an error.
  const AttentionChoice fallback =
      choose_attention(AttentionRequest::kAuto, false, 9, heads(16, 16, 64), false, cudnn_accepts);
  EXPECT_EQ(fallback.kernel, AttentionKernel::kGemm);
  EXPECT_NE(fallback.why.find("no cuDNN"), std::string::npos) << fallback.why;
  EXPECT_EQ(
      choose_attention(AttentionRequest::kAuto, true, 9, heads(16, 16, 192), false, cudnn_accepts)
          .kernel,
      AttentionKernel::kGemm);
  std::string e = error_of([] {
    choose_attention(AttentionRequest::kFused, false, 9, heads(16, 16, 64), false, cudnn_accepts);
  });
  EXPECT_NE(e.find("--attention fused: this build has no cuDNN"), std::string::npos) << e;
  e = error_of([] {
    choose_attention(AttentionRequest::kFused, true, 9, heads(16, 16, 192), false, cudnn_accepts);
  });
  EXPECT_NE(e.find("head_dim 192"), std::string::npos) << e;
}

TEST(AttentionChoice, CudnnRefusingTheGraphMakesAutoGemmAndFusedAnError) {
  int asked = 0;
  const auto refuses = [&] {
    ++asked;
    return std::string("check_support failed: no engine for this graph");
  };
  // Asked only when fused is wanted and the static rules allow it.
  choose_attention(AttentionRequest::kGemm, true, 9, heads(16, 16, 64), false, refuses);
  choose_attention(AttentionRequest::kAuto, true, 9, heads(16, 16, 192), false, refuses);
  choose_attention(AttentionRequest::kAuto, false, 9, heads(16, 16, 64), false, refuses);
  EXPECT_EQ(asked, 0);
  const AttentionChoice fallback =
      choose_attention(AttentionRequest::kAuto, true, 9, heads(16, 16, 64), false, refuses);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(fallback.kernel, AttentionKernel::kGemm);
  EXPECT_NE(fallback.why.find("gemm (auto: cuDNN refused the graph: check_support failed"),
            std::string::npos)
      << fallback.why;
  const std::string e = error_of([&] {
    choose_attention(AttentionRequest::kFused, true, 9, heads(16, 16, 64), false, refuses);
  });
  EXPECT_NE(e.find("--attention fused: cuDNN refused the graph: check_support failed"),
            std::string::npos)
      << e;
  EXPECT_EQ(asked, 2);
  // An fp32 run: auto keeps the attention exact without asking cuDNN; fused is still allowed.
  const AttentionChoice fp32 =
      choose_attention(AttentionRequest::kAuto, true, 9, heads(16, 16, 64), true, refuses);
  EXPECT_EQ(fp32.kernel, AttentionKernel::kGemm);
  EXPECT_NE(fp32.why.find("--precision fp32"), std::string::npos) << fp32.why;
  EXPECT_EQ(asked, 2);
  EXPECT_EQ(
      choose_attention(AttentionRequest::kFused, true, 9, heads(16, 16, 64), true, cudnn_accepts)
          .kernel,
      AttentionKernel::kFused);
  EXPECT_STREQ(attention_kernel_name(AttentionKernel::kFused), "fused");
  EXPECT_STREQ(attention_kernel_name(AttentionKernel::kGemm), "gemm");
  // Document masks: the fused path runs them as ragged sequences on Hopper when asked for, asking
  // cuDNN for those graphs; auto keeps them on gemm there until the fused path is validated on a
  // GPU (docs/gpu.md), without asking; on other GPUs auto runs gemm and says why, and fused is
  // refused.
  const AttentionChoice masked =
      choose_attention(AttentionRequest::kAuto, true, 9, heads(16, 16, 64), false, refuses, true);
  EXPECT_EQ(masked.kernel, AttentionKernel::kGemm) << masked.why;
  EXPECT_NE(masked.why.find("not yet validated on a GPU"), std::string::npos) << masked.why;
  EXPECT_EQ(asked, 2);
  const AttentionChoice masked_fused = choose_attention(
      AttentionRequest::kFused, true, 9, heads(16, 16, 64), false, cudnn_accepts, true);
  EXPECT_EQ(masked_fused.kernel, AttentionKernel::kFused) << masked_fused.why;
  EXPECT_THROW(
      choose_attention(AttentionRequest::kFused, true, 9, heads(16, 16, 64), false, refuses, true),
      Error);
  EXPECT_EQ(asked, 3);
  for (int sm : {8, 10}) {
    const AttentionChoice elsewhere = choose_attention(AttentionRequest::kAuto, true, sm,
                                                       heads(16, 16, 64), false, refuses, true);
    EXPECT_EQ(elsewhere.kernel, AttentionKernel::kGemm);
    EXPECT_NE(elsewhere.why.find("document masking runs the fused kernels on cuDNN's ragged"),
              std::string::npos)
        << elsewhere.why;
    EXPECT_NE(elsewhere.why.find("this GPU has " + std::to_string(sm) + ".x"), std::string::npos)
        << elsewhere.why;
    try {
      choose_attention(AttentionRequest::kFused, true, sm, heads(16, 16, 64), false, cudnn_accepts,
                       true);
      ADD_FAILURE() << "--attention fused with document masks was accepted on sm " << sm;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Hopper"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(asked, 3);
}

// The ragged graph a micro-batch runs: L a power of two covering its longest document (at most
// T), K a power of two no more than its documents (no call has an empty sequence) and with K·L²
// within the plain graph's B·T².
TEST(AttentionChoice, RaggedGraphShapeKeepsTheScoresOfThePlainGraph) {
  EXPECT_EQ(ragged_graph_shape(4, 2048, 2048, 4), (RaggedGraphShape{2048, 4}));
  EXPECT_EQ(ragged_graph_shape(4, 2048, 800, 20), (RaggedGraphShape{1024, 16}));
  EXPECT_EQ(ragged_graph_shape(4, 2048, 800, 9), (RaggedGraphShape{1024, 8}));
  EXPECT_EQ(ragged_graph_shape(4, 2048, 300, 20), (RaggedGraphShape{512, 16}));
  EXPECT_EQ(ragged_graph_shape(4, 2048, 1, 8192), (RaggedGraphShape{2, 8192}));
  EXPECT_EQ(ragged_graph_shape(3, 37, 37, 3), (RaggedGraphShape{37, 2}));
  EXPECT_EQ(ragged_graph_shape(1, 2, 1, 2), (RaggedGraphShape{2, 1}));
  for (int64_t B : {1, 3, 4, 8})
    for (int64_t longest : {1, 5, 64, 100, 1024, 2048})
      for (int64_t documents : {int64_t{1}, B, 7 * B, 100 * B}) {
        const RaggedGraphShape g = ragged_graph_shape(B, 2048, longest, documents);
        EXPECT_LE(g.sequences * g.length * g.length, B * 2048 * 2048) << B << " " << longest;
        EXPECT_GE(g.length, longest);
        EXPECT_LE(g.sequences, documents);
      }
  const std::string e = error_of([] { ragged_graph_shape(2, 8, 9, 3); });
  EXPECT_NE(e.find("the longest 9 tokens, do not fit B=2 T=8"), std::string::npos) << e;
}

// clang-format off
// Rows of T = 6: row 0 holds documents [0,2) [2,3) [3,6); row 1 one document cut by the window.
// clang-format on
TEST(AttentionChoice, RaggedDocumentsFollowTheRows) {
  // The token offsets of every call, in order.
  const auto offsets_of = [](const RaggedDocuments& d) {
    std::vector<std::vector<int64_t>> out;
    for (int64_t c = 0; c < d.calls(); ++c) out.push_back(d.call_token_offsets(c));
    return out;
  };
  using Offsets = std::vector<std::vector<int64_t>>;
  const std::vector<int32_t> doc_start = {0, 0, 2, 3, 3, 3, /**/ 0, 0, 0, 0, 0, 0};
  const RaggedDocuments r = ragged_documents(doc_start.data(), 2, 6);
  EXPECT_EQ(r.documents, 4);
  EXPECT_EQ(r.graph, (RaggedGraphShape{6, 2}));  // L = T; K·L² ≤ 2·6²
  EXPECT_EQ(r.call_sequences, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r.document_lengths, (std::vector<int32_t>{2, 1, 3, 6}));
  EXPECT_EQ(offsets_of(r), (Offsets{{0, 2, 3}, {3, 6, 12}}));
  // Sixteen documents of 4 tokens in a row of 64: one call of 16 sequences of L = 4.
  std::vector<int32_t> short_docs(64);
  for (int t = 0; t < 64; ++t) short_docs[static_cast<size_t>(t)] = t - t % 4;
  const RaggedDocuments s = ragged_documents(short_docs.data(), 1, 64);
  EXPECT_EQ(s.graph, (RaggedGraphShape{4, 16}));
  EXPECT_EQ(s.call_sequences, (std::vector<int64_t>{16}));
  EXPECT_EQ(s.document_lengths, std::vector<int32_t>(16, 4));
  // Five documents, the longest 24 tokens: L = 32 allows K = 4 in a row of 64, so a call of four
  // and one of the fifth alone, no sequence empty.
  std::vector<int32_t> five(64);
  for (int t = 0; t < 64; ++t) five[static_cast<size_t>(t)] = t < 40 ? t - t % 10 : 40;
  const RaggedDocuments p = ragged_documents(five.data(), 1, 64);
  EXPECT_EQ(p.graph, (RaggedGraphShape{32, 4}));
  EXPECT_EQ(p.call_sequences, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(p.call_first, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(p.document_lengths, (std::vector<int32_t>{10, 10, 10, 10, 24}));
  EXPECT_EQ(offsets_of(p), (Offsets{{0, 10, 20, 30, 40}, {40, 64}}));
  // The same documents two to a call (CudnnAttention's fit to its prepared workspace), and one.
  const RaggedDocuments pairs = regrouped(p, 2);
  EXPECT_EQ(pairs.graph, (RaggedGraphShape{32, 2}));
  EXPECT_EQ(pairs.call_sequences, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(offsets_of(pairs), (Offsets{{0, 10, 20}, {20, 30, 40}, {40, 64}}));
  const RaggedDocuments single = regrouped(pairs, 1);
  EXPECT_EQ(single.call_sequences, (std::vector<int64_t>(5, 1)));
  EXPECT_EQ(offsets_of(single), (Offsets{{0, 10}, {10, 20}, {20, 30}, {30, 40}, {40, 64}}));
  EXPECT_EQ(offsets_of(regrouped(p, 4)), offsets_of(p));
  // 22 documents of at most 6 tokens in rows of 64: K = 16 (no more than there are), then the
  // rest in its binary expansion: 16, 4, 2.
  std::vector<int32_t> sixes(128);
  for (int i = 0; i < 128; ++i) sixes[static_cast<size_t>(i)] = i % 64 - i % 64 % 6;
  const RaggedDocuments m = ragged_documents(sixes.data(), 2, 64);
  EXPECT_EQ(m.graph, (RaggedGraphShape{8, 16}));
  EXPECT_EQ(m.call_sequences, (std::vector<int64_t>{16, 4, 2}));
  EXPECT_EQ(m.call_first, (std::vector<int64_t>{0, 16, 20}));
  EXPECT_EQ(offsets_of(m).back(), (std::vector<int64_t>{64 + 54, 64 + 60, 128}));
  // Every document in exactly one call, in order, whatever the count: calls of K while K are
  // left, then powers of two, each smaller than the one before, none empty.
  for (int period : {1, 2, 3, 5, 7, 13, 64}) {
    std::vector<int32_t> docs(256);
    for (int i = 0; i < 256; ++i) docs[static_cast<size_t>(i)] = i % 64 - i % 64 % period;
    for (const RaggedDocuments& d : {ragged_documents(docs.data(), 4, 64),
                                     regrouped(ragged_documents(docs.data(), 4, 64), 1)}) {
      int64_t next = 0;
      for (int64_t c = 0; c < d.calls(); ++c) {
        const int64_t K = d.call_sequences[static_cast<size_t>(c)];
        EXPECT_EQ(d.call_first[static_cast<size_t>(c)], next) << period;
        EXPECT_TRUE(K >= 1 && (K & (K - 1)) == 0 && K <= d.graph.sequences) << period;
        if (c > 0 && d.call_sequences[static_cast<size_t>(c - 1)] < d.graph.sequences) {
          EXPECT_LT(K, d.call_sequences[static_cast<size_t>(c - 1)]) << period;
        }
        next += K;
      }
      EXPECT_EQ(next, d.documents) << period;
      for (int32_t length : d.document_lengths) EXPECT_GT(length, 0) << period;
    }
  }
  for (int64_t bad : {0, 3, 8}) {
    const std::string e = error_of([&] { regrouped(p, bad); });
    EXPECT_NE(e.find(std::to_string(bad) + " sequences per graph is not a power of two within the "
                                           "first choice's 4"),
              std::string::npos)
        << e;
  }
  // A doc_start that breaks the contract names the entry.
  for (const auto& [bad, entry] :
       {std::pair{std::vector<int32_t>{1, 1, 2}, "doc_start[0,0] = 1"},
        std::pair{std::vector<int32_t>{0, 0, 1}, "doc_start[0,2] = 1"},
        std::pair{std::vector<int32_t>{0, -1, 2}, "doc_start[0,1] = -1"}}) {
    const std::string e = error_of([&] { ragged_documents(bad.data(), 1, 3); });
    EXPECT_NE(e.find(entry), std::string::npos) << e;
  }
}

// CudnnAttention's fit of a micro-batch's graph to the workspace prepared at start-up, with
// cuDNN's figures replaced by a table: K halved until its workspace fits; the first choice where
// nothing was prepared; where no K fits, the K that asks for the fewest bytes.
TEST(AttentionChoice, SequencesAreHalvedUntilTheWorkspaceFits) {
  std::vector<int64_t> asked;
  const auto tiles = [&](int64_t K) {  // one 128 × 128 tile of bf16 scores per sequence
    asked.push_back(K);
    return static_cast<size_t>(K) * 128 * 128 * 2;
  };
  EXPECT_EQ(sequences_within_workspace(128, 4 * 128 * 128 * 2, tiles), 4);
  EXPECT_EQ(asked, (std::vector<int64_t>{128, 64, 32, 16, 8, 4}));
  EXPECT_EQ(sequences_within_workspace(128, 5 * 128 * 128 * 2, tiles), 4);  // powers of two
  EXPECT_EQ(sequences_within_workspace(8, 8 * 128 * 128 * 2, tiles), 8);    // fits at once
  asked.clear();
  EXPECT_EQ(sequences_within_workspace(64, 0, tiles), 64);  // nothing prepared: not asked
  EXPECT_TRUE(asked.empty());
  EXPECT_EQ(sequences_within_workspace(64, 100, tiles), 1);  // none fits: 1 grows it least
  // cuDNN's figures need not shrink with K (its tiles pad each call): the least is taken.
  const std::map<int64_t, size_t> padded = {{8, 900}, {4, 500}, {2, 300}, {1, 400}};
  EXPECT_EQ(sequences_within_workspace(8, 200, [&](int64_t K) { return padded.at(K); }), 2);
  // A K whose graphs cuDNN refuses (nullopt) is passed over: a smaller one that fits is taken,
  // a refused one is never the least, and where every K is refused the answer is 0.
  const std::map<int64_t, std::optional<size_t>> refused_at_8 = {
      {8, std::nullopt}, {4, 100}, {2, 50}, {1, 25}};
  EXPECT_EQ(sequences_within_workspace(8, 200, [&](int64_t K) { return refused_at_8.at(K); }), 4);
  const std::map<int64_t, std::optional<size_t>> refused_small = {
      {8, 900}, {4, std::nullopt}, {2, 300}, {1, std::nullopt}};
  EXPECT_EQ(sequences_within_workspace(8, 200, [&](int64_t K) { return refused_small.at(K); }), 2);
  EXPECT_EQ(sequences_within_workspace(8, 200, [](int64_t) { return std::optional<size_t>(); }), 0);
}

TEST(AttentionChoice, GraphCacheBuildsOncePerShapeAndDirection) {
  BuildOnceCache<SdpaGraphKey, int, SdpaGraphKeyHash> cache;
  int built = 0;
  auto build = [&](const SdpaGraphKey& key) {
    ++built;
    return std::make_shared<int>(static_cast<int>(key.shape.T) * (key.backward ? -1 : 1));
  };
  const AttentionShape a{4, 2048, 16, 8, 128};
  AttentionShape b = a;
  b.T = 1024;
  for (int step = 0; step < 5; ++step) {
    EXPECT_EQ(cache.get({a, false, DType::kBf16, {}}, build), 2048);
    EXPECT_EQ(cache.get({a, true, DType::kBf16, {}}, build), -2048);
  }
  EXPECT_EQ(cache.builds(), 2);
  EXPECT_EQ(cache.get({b, false, DType::kBf16, {}}, build), 1024);
  EXPECT_EQ(cache.builds(), 3);
  EXPECT_EQ(built, 3);
  EXPECT_EQ(cache.size(), 3u);
  // Every field is part of the key: a change in any one is another graph.
  const SdpaGraphKeyHash hash;
  const SdpaGraphKey base{a, false, DType::kBf16, {}};
  for (int field = 0; field < 12; ++field) {
    SdpaGraphKey other = base;
    int64_t* dims[] = {&other.shape.B, &other.shape.T, &other.shape.H, &other.shape.Hkv,
                       &other.shape.hd};
    if (field < 5)
      *dims[field] += 1;
    else if (field == 5)
      other.backward = true;
    else if (field == 6)
      other.io = DType::kFloat16;  // fp16 activations: cuDNN's fp16 graph
    else if (field == 7)
      other.ragged = {1024, 8};  // document masks: the ragged graph of 8 sequences of 1024
    else if (field == 8)
      other.shape.scores.scale = 0.0625f;  // a model's own scale (query_pre_attn_scalar)
    else if (field == 9)
      other.shape.scores.softcap = 50.0f;
    else if (field == 10)
      other.shape.scores.window = 1024;
    else
      other.deterministic = false;  // --deterministic false: cuDNN's atomic dQ
    EXPECT_FALSE(other == base) << field;
    EXPECT_NE(hash(other), hash(base)) << field;
  }
  // Equal keys hash alike, −0 and +0 among them (operator== compares the floats' values).
  SdpaGraphKey negative_zero = base;
  negative_zero.shape.scores.scale = -0.0f;
  EXPECT_TRUE(negative_zero == base);
  EXPECT_EQ(hash(negative_zero), hash(base));
  EXPECT_EQ(describe(base), "forward B=4 T=2048 H=16 Hkv=8 hd=128 bfloat16");
  EXPECT_EQ(describe(SdpaGraphKey{a, true, DType::kBf16, {512, 16}}),
            "backward B=4 T=2048 H=16 Hkv=8 hd=128 bfloat16 ragged 16 × 512");
  EXPECT_EQ(describe(SdpaGraphKey{a, true, DType::kBf16, {}, false}),
            "backward B=4 T=2048 H=16 Hkv=8 hd=128 bfloat16 nondeterministic");
}

// build_seconds() holds the builds' time, a build that threw included, and nothing of the gets
// that found their key: a build that sleeps 20 ms adds at least that (sleep_for's guarantee on
// the steady clock), and a cached get leaves the sum as it was, to the bit.
TEST(AttentionChoice, GraphCacheTimesItsBuildsOnly) {
  BuildOnceCache<SdpaGraphKey, int, SdpaGraphKeyHash> cache;
  const auto sleeping = [](const SdpaGraphKey&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::make_shared<int>(1);
  };
  const SdpaGraphKey plain{{4, 2048, 16, 8, 128}, false, DType::kBf16, {}};
  EXPECT_EQ(cache.build_seconds(), 0.0);
  cache.get(plain, sleeping);
  const double one_build = cache.build_seconds();
  EXPECT_GE(one_build, 0.020);
  for (int call = 0; call < 3; ++call) cache.get(plain, sleeping);
  EXPECT_EQ(cache.build_seconds(), one_build);
  SdpaGraphKey refused = plain;
  refused.backward = true;
  const auto refusing = [&](const SdpaGraphKey& key) -> std::shared_ptr<int> {
    sleeping(key);
    throw Error("cuDNN refused the graph");
  };
  EXPECT_THROW(cache.get(refused, refusing), Error);
  EXPECT_GE(cache.build_seconds(), one_build + 0.020);
  EXPECT_EQ(cache.builds(), 1);  // the refused graph is not kept, nor counted as built
  EXPECT_EQ(cache.size(), 1u);
}

// get_unless_refused: a key whose build throws the refusal type gives null and keeps the reason,
// and is not built again; another key still builds; an exception of another type propagates and
// is not remembered (the next call builds again).
TEST(AttentionChoice, GraphCacheRemembersARefusalAndNothingElse) {
  struct Refused : Error {
    using Error::Error;
  };
  BuildOnceCache<SdpaGraphKey, int, SdpaGraphKeyHash> cache;
  std::map<int64_t, int> built;  // per T
  const auto build = [&](const SdpaGraphKey& key) {
    ++built[key.shape.T];
    if (key.shape.T == 64) throw Refused("no graph for T=64");
    if (key.shape.T == 32) throw Error("the device failed");
    return std::make_shared<int>(static_cast<int>(key.shape.T));
  };
  const auto key = [](int64_t T) { return SdpaGraphKey{{1, T, 4, 2, 16}, true, DType::kBf16, {}}; };
  for (int call = 0; call < 3; ++call) {
    EXPECT_EQ(cache.get_unless_refused<Refused>(key(64), build), nullptr);
    ASSERT_NE(cache.get_unless_refused<Refused>(key(128), build), nullptr);
    EXPECT_EQ(*cache.get_unless_refused<Refused>(key(128), build), 128);
    EXPECT_THROW(cache.get_unless_refused<Refused>(key(32), build), Error);
  }
  EXPECT_EQ(cache.refusal(key(64)), "no graph for T=64");
  EXPECT_EQ(built[64], 1);   // refused once, remembered
  EXPECT_EQ(built[128], 1);  // built once, kept
  EXPECT_EQ(built[32], 3);   // not a refusal: asked again each time
  EXPECT_EQ(cache.builds(), 1);
}

TEST(AttentionChoice, StagingAndScratchBytes) {
  constexpr auto kFused = AttentionKernel::kFused, kGemm = AttentionKernel::kGemm;
  constexpr auto kF32 = DType::kFloat32, kBf16 = DType::kBf16;
  // Fused with fp32 storage: forward q, out (B·T·H·hd bf16 each), k, v (B·T·Hkv·hd) and the
  // fp32 statistics (B·H·T); backward: twice the bf16 blocks, the same statistics.
  const AttentionShape s{4, 2048, 16, 8, 128};
  const size_t q_bytes = size_t{4} * 2048 * 16 * 128 * 2, kv_bytes = q_bytes / 2;
  const size_t stats_bytes = size_t{4} * 16 * 2048 * 4;
  EXPECT_EQ(attention_staging_bytes(s, kFused, kF32, false, 256),
            2 * q_bytes + 2 * kv_bytes + stats_bytes);
  EXPECT_EQ(attention_staging_bytes(s, kFused, kF32, true, 256),
            4 * q_bytes + 4 * kv_bytes + stats_bytes);
  // Fused with bf16 storage: cuDNN reads and writes the tensors in place; only the statistics.
  EXPECT_EQ(attention_staging_bytes(s, kFused, kBf16, false, 256), stats_bytes);
  EXPECT_EQ(attention_staging_bytes(s, kFused, kBf16, true, 256), stats_bytes);
  // GEMM with fp32 storage stages nothing; with bf16 storage, fp32 copies of the same tensors.
  EXPECT_EQ(attention_staging_bytes(s, kGemm, kF32, true, 256), 0u);
  EXPECT_EQ(attention_staging_bytes(s, kGemm, kBf16, false, 256), 2 * (2 * q_bytes + 2 * kv_bytes));
  EXPECT_EQ(attention_staging_bytes(s, kGemm, kBf16, true, 256), 2 * (4 * q_bytes + 4 * kv_bytes));
  // fp16 storage stages exactly as bf16 storage does (cuDNN's fp16 graph reads it in place).
  for (bool backward : {false, true})
    for (AttentionKernel kernel : {kFused, kGemm})
      EXPECT_EQ(attention_staging_bytes(s, kernel, DType::kFloat16, backward, 256),
                attention_staging_bytes(s, kernel, kBf16, backward, 256));
  // The scratch: fused takes the larger of the score bytes and its staging; gemm adds them.
  const size_t scores = size_t{512} << 20;
  EXPECT_EQ(attention_scratch_bytes(s, kFused, kF32, 0, 256),
            attention_staging_bytes(s, kFused, kF32, true, 256));
  EXPECT_EQ(attention_scratch_bytes(s, kFused, kBf16, scores, 256), scores);
  EXPECT_EQ(attention_scratch_bytes(s, kGemm, kF32, scores, 256), scores);
  EXPECT_EQ(attention_scratch_bytes(s, kGemm, kBf16, scores, 256),
            scores + attention_staging_bytes(s, kGemm, kBf16, true, 256));
  // Each block is aligned: one token, one head of 8 → 16 bytes (4 for the statistics), each
  // rounded up to 256.
  EXPECT_EQ(attention_staging_bytes({1, 1, 1, 1, 8}, kFused, kF32, false, 256), 5u * 256);
  // The 1b preset's micro-batch (B=4, T=2048, d=2048) stages less than the GEMM path's scratch
  // for its 16 heads' T×T fp32 probabilities and score gradients (16 × 2 × 16 MiB).
  EXPECT_LT(attention_staging_bytes({4, 2048, 16, 16, 128}, kFused, kF32, true, 256),
            size_t{16} * 2 * 2048 * 2048 * 4);
  EXPECT_THROW(attention_staging_bytes({0, 1, 1, 1, 8}, kFused, kF32, false, 256), Error);
  EXPECT_THROW(attention_staging_bytes({1, 1, 1, 1, 8}, kFused, kF32, false, 3), Error);
  EXPECT_THROW(attention_staging_bytes({1, 1, 1, 1, 8}, kGemm, DType::kInt32, false, 256), Error);
  const int64_t big = int64_t{1} << 40;
  EXPECT_THROW(attention_staging_bytes({big, big, 1, 1, 8}, kFused, kF32, false, 256), Error);
}

TEST(AttentionChoice, StagingThatDoesNotFitNamesTheBytesAndTheWayOut) {
  const SdpaGraphKey key{{1, 64, 4, 2, 32}, true, DType::kBf16, {}};
  check_fused_attention_fits(key, 1500, 1500);  // exactly full
  const std::string e = error_of([&] { check_fused_attention_fits(key, 1501, 1500); });
  EXPECT_NE(e.find("backward B=1 T=64"), std::string::npos) << e;
  EXPECT_NE(e.find("needs 1501 bytes of staging"), std::string::npos) << e;
  EXPECT_NE(e.find("has 1500 free"), std::string::npos) << e;
  EXPECT_NE(e.find("--attention gemm"), std::string::npos) << e;
}

}  // namespace
}  // namespace zt::cuda
