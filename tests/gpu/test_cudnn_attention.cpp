// Fused attention (cuDNN SDPA, --attention fused) against the fp64 reference of
// attention_reference.h and against the GEMM path, forward and backward, in every storage type;
// determinism; --deterministic false; document masks; the graph cache; a scratch too small is an
// error before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attention_reference.h"
#include "backend/cuda/cuda_device_arena.h"
#include "backend/cuda/cuda_devices.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/device_arena_plan.h"
#include "gpu_test_util.h"
#include "util/bf16.h"
#include "util/error.h"

namespace zt::gpu_test {
namespace {

struct AttentionRun {
  std::vector<float> out, lse, dq, dk, dv;
};

// With `stored`: values that bf16 and fp16 storage both hold exactly (both_16bit).
std::vector<float> to_floats(const std::vector<double>& x, bool stored) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = static_cast<float>(x[i]);
  return stored ? both_16bit(std::move(out)) : out;
}

// The micro-batch's document masks on `backend` as the model gives them: the host copy first
// (Backend::set_document_layout), the device copy to each call; none when doc_start is empty.
struct Documents {
  Documents(Backend& backend, const std::vector<int32_t>& doc_start, const AttentionShape& s)
      : device(doc_start.empty() ? std::vector<int32_t>{0} : doc_start),
        starts(doc_start.empty() ? nullptr : device.get()) {
    backend.set_document_layout(doc_start.empty() ? nullptr : doc_start.data(), s.B, s.T);
  }
  DeviceBuffer<int32_t> device;
  const int32_t* starts;
};

// Floats after the forward's lse that must stay as DeviceBuffer poisoned them: the fused path
// writes the statistics in place, where nothing past B·H·T may be touched.
constexpr int64_t kLseTail = 64;

// One forward and one backward on `backend`; the backward gets the reference's output (rounded
// to bf16, tiny values zeroed: both_16bit) and lse. Both lse buffers start `lse_offset` floats
// into their allocations (1: a 4-byte boundary, which cuDNN cannot take as it is); the forward's
// is followed by kLseTail poisoned floats, which must stay so.
AttentionRun run(Backend& backend, const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, const std::vector<float>& dout, const Reference& ref,
                 const AttentionShape& s, const std::vector<int32_t>& doc_start = {},
                 int64_t lse_offset = 0) {
  const int64_t lse_n = s.B * s.H * s.T;
  DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_dout(dout), d_out(q.size()),
      d_lse(lse_offset + lse_n + kLseTail), d_dq(q.size()), d_dk(k.size()), d_dv(v.size());
  std::vector<float> ref_lse(static_cast<size_t>(lse_offset), 0.0f);
  for (float x : to_floats(ref.lse, false)) ref_lse.push_back(x);
  DeviceBuffer<float> d_ref_out(to_floats(ref.out, true)), d_ref_lse(ref_lse);
  const Documents docs(backend, doc_start, s);
  backend.attention_forward(d_out.get(), d_lse.get() + lse_offset, d_q.get(), d_k.get(), d_v.get(),
                            s.B, s.T, s.H, s.Hkv, s.hd, docs.starts);
  backend.attention_backward(d_dq.get(), d_dk.get(), d_dv.get(), d_dout.get(), d_q.get(), d_k.get(),
                             d_v.get(), d_ref_out.get(), d_ref_lse.get() + lse_offset, s.B, s.T,
                             s.H, s.Hkv, s.hd, docs.starts);
  std::vector<float> lse = d_lse.download();
  for (int64_t i = lse_offset + lse_n; i < lse_offset + lse_n + kLseTail; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &lse[static_cast<size_t>(i)], sizeof(bits));
    EXPECT_EQ(bits, 0xFFFFFFFFu) << "attention_forward wrote " << i - lse_offset - lse_n
                                 << " floats past the lse's B·H·T = " << lse_n;
  }
  lse.erase(lse.begin() + lse_offset + lse_n, lse.end());
  lse.erase(lse.begin(), lse.begin() + lse_offset);
  return {d_out.download(), lse, d_dq.download(), d_dk.download(), d_dv.download()};
}

std::vector<uint16_t> to_16bit(DType type, const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  round_16bit(type, x.data(), out.data(), x.size());
  return out;
}
std::vector<float> widened(DType type, const std::vector<uint16_t>& x) {
  std::vector<float> out(x.size());
  widen_16bit(type, x.data(), out.data(), x.size());
  return out;
}

// The same run with every tensor stored in `type`, bf16 (--activations bf16) or fp16 (--activations
// fp16); lse stays fp32. The inputs are values of both types already, so storing them is exact.
AttentionRun run_16bit_storage(Backend& backend, DType type, const std::vector<float>& q,
                               const std::vector<float>& k, const std::vector<float>& v,
                               const std::vector<float>& dout, const Reference& ref,
                               const AttentionShape& s, const std::vector<int32_t>& doc_start) {
  DeviceBuffer<uint16_t> d_q(to_16bit(type, q)), d_k(to_16bit(type, k)), d_v(to_16bit(type, v)),
      d_dout(to_16bit(type, dout)), d_out(q.size()), d_dq(q.size()), d_dk(k.size()), d_dv(v.size());
  DeviceBuffer<uint16_t> d_ref_out(to_16bit(type, to_floats(ref.out, true)));
  DeviceBuffer<float> d_lse(s.B * s.H * s.T), d_ref_lse(to_floats(ref.lse, false));
  auto view = [type](DeviceBuffer<uint16_t>& b) { return TensorView(b.get(), type); };
  const Documents docs(backend, doc_start, s);
  backend.attention_forward(view(d_out), d_lse.get(), view(d_q), view(d_k), view(d_v), s.B, s.T,
                            s.H, s.Hkv, s.hd, docs.starts);
  backend.attention_backward(view(d_dq), view(d_dk), view(d_dv), view(d_dout), view(d_q), view(d_k),
                             view(d_v), view(d_ref_out), d_ref_lse.get(), s.B, s.T, s.H, s.Hkv,
                             s.hd, docs.starts);
  return {widened(type, d_out.download()), d_lse.download(), widened(type, d_dq.download()),
          widened(type, d_dk.download()), widened(type, d_dv.download())};
}

// The results rounded once to `type` (the lse stays fp32).
AttentionRun rounded_to(DType type, AttentionRun r) {
  for (auto* t : {&r.out, &r.dq, &r.dk, &r.dv}) *t = widened(type, to_16bit(type, *t));
  return r;
}

void expect_bitwise(const AttentionRun& got, const AttentionRun& want) {
  EXPECT_TRUE(bitwise_equal(got.out, want.out, "out"));
  EXPECT_TRUE(bitwise_equal(got.lse, want.lse, "lse"));
  EXPECT_TRUE(bitwise_equal(got.dq, want.dq, "dq"));
  EXPECT_TRUE(bitwise_equal(got.dk, want.dk, "dk"));
  EXPECT_TRUE(bitwise_equal(got.dv, want.dv, "dv"));
}

// A backend whose attention scratch holds the staging of both storage types. deterministic: the
// fused backward's algorithm (CudaBackendOptions::deterministic).
std::unique_ptr<cuda::CudaBackend> backend_with(AttentionKernel kernel, const AttentionShape& s,
                                                bool deterministic = true) {
  cuda::CudaBackendOptions options = test_options(cuda::GemmCompute::kFp32);
  options.attention = kernel;
  options.deterministic = deterministic;
  size_t scratch = 0;
  for (DType type : {DType::kFloat32, DType::kBf16, DType::kFloat16})
    scratch =
        std::max(scratch, attention_scratch_bytes(s, kernel, type, options.attention_scratch_bytes,
                                                  cuda::kArenaAlignment));
  options.attention_scratch_bytes = scratch;
  return make_cuda_backend(0, options);
}

// q, k, v and dout of `s`: random values that bf16 and fp16 both hold exactly.
struct Inputs {
  explicit Inputs(const AttentionShape& s)
      : q(both_16bit(random_floats(s.B * s.T * s.H * s.hd, 51, 0.5f))),
        k(both_16bit(random_floats(s.B * s.T * s.Hkv * s.hd, 52, 0.5f))),
        v(both_16bit(random_floats(s.B * s.T * s.Hkv * s.hd, 53))),
        dout(both_16bit(random_floats(s.B * s.T * s.H * s.hd, 54))) {}
  std::vector<float> q, k, v, dout;
};

// With doc_start (not empty), every run has those document masks, the reference too; and the
// fused output must be outside the bound of the unmasked reference, so that the masks show.
void check_case(const AttentionShape& s, const std::vector<int32_t>& doc_start = {}) {
  SCOPED_TRACE(describe(s) + (doc_start.empty() ? "" : ", document masks"));
  const Inputs in(s);
  const std::vector<float>&q = in.q, &k = in.k, &v = in.v, &dout = in.dout;
  const Reference ref = reference(q, k, v, dout, s, doc_start);
  auto fused_backend = backend_with(AttentionKernel::kFused, s);
  auto gemm_backend = backend_with(AttentionKernel::kGemm, s);
  const AttentionRun fused = run(*fused_backend, q, k, v, dout, ref, s, doc_start);
  const AttentionRun gemm = run(*gemm_backend, q, k, v, dout, ref, s, doc_start);
  if (!doc_start.empty()) {
    const Reference plain = reference(q, k, v, dout, s);
    EXPECT_FALSE(within(fused.out, plain.out, plain.out_bound, "out against plain causal"));
  }
  for (const auto& [name, got] : {std::pair{"fused", &fused}, std::pair{"gemm fp32", &gemm}}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(within(got->out, ref.out, ref.out_bound, "out"));
    // lse is fp32 from the same bf16 inputs on both paths: only fp32 rounding differs.
    std::vector<double> lse_bound(ref.lse.size());
    for (size_t i = 0; i < lse_bound.size(); ++i) lse_bound[i] = 1e-5 * (1 + std::fabs(ref.lse[i]));
    EXPECT_TRUE(within(got->lse, ref.lse, lse_bound, "lse"));
    EXPECT_TRUE(within(got->dq, ref.dq, ref.dq_bound, "dq"));
    EXPECT_TRUE(within(got->dk, ref.dk, ref.dk_bound, "dk"));
    EXPECT_TRUE(within(got->dv, ref.dv, ref.dv_bound, "dv"));
  }
  // bf16 storage (--activations bf16): the fused path reads and writes the tensors in place and
  // gives the bits of the fp32-storage run, whose inputs were staged to bf16 exactly and whose
  // bf16 results were widened; the GEMM path widens, computes in fp32 and rounds its outputs
  // once, so it gives the fp32-storage run rounded once.
  {
    SCOPED_TRACE("fused, bf16 storage");
    expect_bitwise(
        run_16bit_storage(*fused_backend, DType::kBf16, q, k, v, dout, ref, s, doc_start), fused);
  }
  {
    SCOPED_TRACE("gemm, bf16 storage");
    expect_bitwise(run_16bit_storage(*gemm_backend, DType::kBf16, q, k, v, dout, ref, s, doc_start),
                   rounded_to(DType::kBf16, gemm));
  }
  // fp16 storage (--activations fp16): the GEMM path likewise gives the fp32-storage run rounded
  // once to fp16; the fused path runs cuDNN's fp16 graph (another SdpaGraphKey::io), whose results
  // stay within the reference's bounds (derived for bf16's coarser rounding) plus the absolute
  // error of fp16's subnormal range (header comment).
  {
    SCOPED_TRACE("gemm, fp16 storage");
    expect_bitwise(
        run_16bit_storage(*gemm_backend, DType::kFloat16, q, k, v, dout, ref, s, doc_start),
        rounded_to(DType::kFloat16, gemm));
  }
  {
    SCOPED_TRACE("fused, fp16 storage");
    const AttentionRun half =
        run_16bit_storage(*fused_backend, DType::kFloat16, q, k, v, dout, ref, s, doc_start);
    EXPECT_TRUE(within(half.out, ref.out, plus(ref.out_bound, ref.out_fp16), "out"));
    EXPECT_TRUE(within(half.dq, ref.dq, plus(ref.dq_bound, ref.dq_fp16), "dq"));
    EXPECT_TRUE(within(half.dk, ref.dk, plus(ref.dk_bound, ref.dk_fp16), "dk"));
    EXPECT_TRUE(within(half.dv, ref.dv, plus(ref.dv_bound, ref.dv_fp16), "dv"));
  }
  // The deterministic backward: a second run gives the same bits.
  const AttentionRun again = run(*fused_backend, q, k, v, dout, ref, s, doc_start);
  EXPECT_TRUE(bitwise_equal(again.out, fused.out, "out run 2"));
  EXPECT_TRUE(bitwise_equal(again.dq, fused.dq, "dq run 2"));
  EXPECT_TRUE(bitwise_equal(again.dk, fused.dk, "dk run 2"));
  EXPECT_TRUE(bitwise_equal(again.dv, fused.dv, "dv run 2"));
}

TEST(CudnnAttention, MatchesReferenceAndGemmPath) {
  const AttentionShape cases[] = {
      {1, 2, 1, 1, 8},      // two tokens (cuDNN's backward refuses one: AttentionChoice)
      {2, 37, 4, 2, 16},    // ragged T, GQA group 2
      {1, 65, 6, 3, 32},    // ragged T, odd kv heads
      {2, 100, 4, 1, 64},   // multi-query
      {1, 128, 8, 8, 64},   // multi-head
      {1, 130, 4, 2, 128},  // the largest head dimension
  };
  for (const AttentionShape& s : cases) {
    try {  // a shape cuDNN refuses fails its own case, not the ones after it
      check_case(s);
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(s) << ": " << e.what();
    }
  }
}

// The fused path hands cuDNN the caller's lse where it starts at a 16-byte boundary and stages it
// through its scratch otherwise (cudnn_attention.cpp's stage_stats): both give the same bits.
TEST(CudnnAttention, AnLseAtAFourByteBoundaryGivesTheAlignedRunsBits) {
  const AttentionShape s{2, 37, 4, 2, 16};
  const Inputs in(s);
  const Reference ref = reference(in.q, in.k, in.v, in.dout, s);
  auto backend = backend_with(AttentionKernel::kFused, s);
  const AttentionRun aligned = run(*backend, in.q, in.k, in.v, in.dout, ref, s);
  const AttentionRun offset = run(*backend, in.q, in.k, in.v, in.dout, ref, s, {}, 1);
  expect_bitwise(offset, aligned);
  EXPECT_TRUE(within(aligned.out, ref.out, ref.out_bound, "out"));
}

// --deterministic false: cuDNN's backward accumulates dQ with fp32 atomics instead of keeping dP
// in its workspace. Only the order of dQ's fp32 sums changes, which the bound's 2T·e covers: the
// results stay within the reference's bounds, and the workspace is the fp32 accumulator's, less
// than half the deterministic one's at T = 512 (both printed beside
// cudnn_attention_workspace_bytes' predictions, which the estimate counts).
TEST(CudnnAttention, NondeterministicBackwardStaysWithinTheReference) {
  for (const AttentionShape& s :
       {AttentionShape{2, 37, 4, 2, 16}, AttentionShape{1, 512, 4, 2, 64}}) {
    SCOPED_TRACE(describe(s));
    const Inputs in(s);
    const Reference ref = reference(in.q, in.k, in.v, in.dout, s);
    auto atomic = backend_with(AttentionKernel::kFused, s, /*deterministic=*/false);
    auto deterministic = backend_with(AttentionKernel::kFused, s);
    const AttentionRun got = run(*atomic, in.q, in.k, in.v, in.dout, ref, s);
    EXPECT_TRUE(within(got.out, ref.out, ref.out_bound, "out"));
    EXPECT_TRUE(within(got.dq, ref.dq, ref.dq_bound, "dq"));
    EXPECT_TRUE(within(got.dk, ref.dk, ref.dk_bound, "dk"));
    EXPECT_TRUE(within(got.dv, ref.dv, ref.dv_bound, "dv"));
    run(*deterministic, in.q, in.k, in.v, in.dout, ref, s);
    const int64_t atomic_bytes = atomic->attention_graph_report().value().workspace_bytes,
                  deterministic_bytes =
                      deterministic->attention_graph_report().value().workspace_bytes;
    std::printf(
        "cuDNN workspace, %s: deterministic %lld bytes (predicted %zu), atomic dQ %lld "
        "(predicted %zu)\n",
        describe(s).c_str(), static_cast<long long>(deterministic_bytes),
        cuda::cudnn_attention_workspace_bytes(s), static_cast<long long>(atomic_bytes),
        cuda::cudnn_attention_workspace_bytes(s, false));
    // At T = 512 dP (2 MiB) is four times the accumulator (512 KiB): the flag reached cuDNN. (At
    // T = 37 the two are within a few KiB of each other, too close to tell.)
    if (s.T == 512) {
      EXPECT_LT(2 * atomic_bytes, deterministic_bytes);
    }
  }
}

// Document masks (the default for packed SFT data) on the fused path: cuDNN's ragged sequences
// against the reference that runs each document's keys alone and against the GEMM path's masks,
// in every storage, deterministic. Rows with documents of 5, 8 and 11 tokens (periodic_doc_starts,
// documents cut by the row ends; calls of several sizes: 13 documents as calls of 8, 4 and 1),
// a row of one document beside one-token documents (calls of a graph of 2 sequences).
TEST(CudnnAttention, DocumentMasksMatchReferenceAndGemmPath) {
  if (cuda_compute_capability_major(0) != 9) GTEST_SKIP() << "cuDNN's ragged layout: Hopper only";
  const AttentionShape cases[] = {{2, 37, 4, 2, 16}, {3, 64, 8, 8, 64}, {1, 130, 4, 2, 128}};
  for (const AttentionShape& s : cases) {
    try {
      check_case(s, periodic_doc_starts(s.B, s.T));
    } catch (const std::exception& e) {
      ADD_FAILURE() << describe(s) << ": " << e.what();
    }
  }
  const AttentionShape s{2, 24, 4, 2, 32};
  std::vector<int32_t> mixed(48, 0);  // row 0: one document; row 1: [0] [1] [2, 24)
  for (int t = 1; t < 24; ++t) mixed[static_cast<size_t>(24 + t)] = t < 3 ? t : 2;
  try {
    check_case(s, mixed);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "mixed: " << e.what();
  }
}

// Micro-batches of 2 rows of 64 whose documents change as a run's do: documents of 6 (22, L = 8),
// one long document beside 32 pairs (L = 64), 128 one-token documents, then the first two again.
struct DocumentRound {
  const char* name;
  std::vector<int32_t> doc_start;
};
std::vector<DocumentRound> changing_document_rounds() {
  std::vector<int32_t> sixes(128), long_and_pairs(128, 0), single_tokens(128);
  for (int i = 0; i < 128; ++i) {
    const int t = i % 64;
    sixes[static_cast<size_t>(i)] = t - t % 6;
    long_and_pairs[static_cast<size_t>(i)] = i < 64 ? 0 : t - t % 2;
    single_tokens[static_cast<size_t>(i)] = t;
  }
  return {{"documents of 6", sixes},
          {"one long beside pairs", long_and_pairs},
          {"one-token documents", single_tokens},
          {"documents of 6 again", sixes},
          {"one long beside pairs again", long_and_pairs}};
}

// The training run's case through the Backend interface: micro-batches whose documents differ,
// one after the other on one prepared fused backend (its CudnnAttention, document table and
// workspace carried from each to the next), each within the bounds of the fp64 reference of its
// own documents. Where DocumentsChangeFromMicroBatchToMicroBatch shows that a long-lived attention
// differs from a fresh one, this says which of the two is wrong.
TEST(CudnnAttention, ChangingDocumentsStayWithinTheReferenceOnOneBackend) {
  if (cuda_compute_capability_major(0) != 9) GTEST_SKIP() << "cuDNN's ragged layout: Hopper only";
  const AttentionShape s{2, 64, 4, 2, 32};
  const int64_t q_n = s.B * s.T * s.H * s.hd, kv_n = s.B * s.T * s.Hkv * s.hd;
  const auto q = both_16bit(random_floats(q_n, 81, 0.5f)),
             k = both_16bit(random_floats(kv_n, 82, 0.5f)), v = both_16bit(random_floats(kv_n, 83)),
             dout = both_16bit(random_floats(q_n, 84));
  auto backend = backend_with(AttentionKernel::kFused, s);
  backend->prepare_fused_attention(s, DType::kFloat32, true, /*document_masks=*/true);
  for (const auto& [name, docs] : changing_document_rounds()) {
    SCOPED_TRACE(name);
    const Reference ref = reference(q, k, v, dout, s, docs);
    const AttentionRun got = run(*backend, q, k, v, dout, ref, s, docs);
    EXPECT_TRUE(within(got.out, ref.out, ref.out_bound, "out"));
    EXPECT_TRUE(within(got.dq, ref.dq, ref.dq_bound, "dq"));
    EXPECT_TRUE(within(got.dk, ref.dk, ref.dk_bound, "dk"));
    EXPECT_TRUE(within(got.dv, ref.dv, ref.dv_bound, "dv"));
  }
}

// One CudnnAttention over micro-batches whose documents differ, as a run meets them: prepare()
// takes the workspace of the largest ragged graph and every other graph runs within it (K halved
// where cuDNN's tiles would need more: 128 one-token documents); the table of each micro-batch
// replaces the last one's (a recomputed forward reuses it); a micro-batch without documents runs
// the plain graph. Each output is checked against a fresh, prepared CudnnAttention given only
// that micro-batch, and again after the shared one's workspace was filled with 0xff bytes: no
// result may depend on what the workspace held.
TEST(CudnnAttention, DocumentsChangeFromMicroBatchToMicroBatch) {
  if (cuda_compute_capability_major(0) != 9) GTEST_SKIP() << "cuDNN's ragged layout: Hopper only";
  const AttentionShape s{2, 64, 4, 2, 32};
  const size_t q_n = 2 * 64 * 4 * 32, kv_n = q_n / 2;
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    const size_t scratch = attention_scratch_bytes(s, AttentionKernel::kFused, DType::kFloat32, 0,
                                                   cuda::kArenaAlignment);
    cuda::DeviceArena arena({0, scratch, 0});
    DeviceBuffer<float> q(random_floats(q_n, 71, 0.5f)), k(random_floats(kv_n, 72, 0.5f)),
        v(random_floats(kv_n, 73)), out(q_n), lse(2 * 4 * 64), dq(q_n), dk(kv_n), dv(kv_n);
    const auto pass = [&](cuda::CudnnAttention& a, const std::vector<int32_t>& docs) {
      a.set_documents(docs.empty() ? nullptr : docs.data(), s.B, s.T);
      a.forward(arena, out.get(), lse.get(), q.get(), k.get(), v.get(), s, !docs.empty());
      a.forward(arena, out.get(), lse.get(), q.get(), k.get(), v.get(), s, !docs.empty());
      a.backward(arena, dq.get(), dk.get(), dv.get(), q.get(), q.get(), k.get(), v.get(), out.get(),
                 lse.get(), s, !docs.empty());
      return std::vector<std::vector<float>>{out.download(), lse.download(), dq.download(),
                                             dk.download(), dv.download()};
    };
    const char* tensor_names[] = {"out", "lse", "dq", "dk", "dv"};
    const auto expect_same = [&](const std::vector<std::vector<float>>& got,
                                 const std::vector<std::vector<float>>& want) {
      for (size_t t = 0; t < got.size(); ++t)
        EXPECT_TRUE(bitwise_equal(got[t], want[t], tensor_names[t]));
    };
    cuda::CudnnAttention attention(stream);
    attention.prepare(s, DType::kFloat32, true, /*document_masks=*/true);
    const int64_t prepared = attention.workspace_bytes();
    EXPECT_EQ(attention.graphs_built(), 4);  // plain and largest ragged, both directions
    for (const auto& [name, docs] : changing_document_rounds()) {
      SCOPED_TRACE(name);
      const auto got = pass(attention, docs);
      cuda::CudnnAttention alone(stream);
      alone.prepare(s, DType::kFloat32, true, /*document_masks=*/true);
      {
        SCOPED_TRACE("against a fresh CudnnAttention");
        expect_same(got, pass(alone, docs));
      }
      attention.fill_workspace(0xff);
      {
        SCOPED_TRACE("after the workspace was filled with 0xff bytes");
        expect_same(pass(attention, docs), got);
      }
      EXPECT_EQ(attention.workspace_bytes(), prepared);
    }
    const int64_t built = attention.graphs_built();
    pass(attention, {});  // the plain graph, prepared already
    EXPECT_EQ(attention.graphs_built(), built);
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ZT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudnnAttention, BuildsEachGraphOnce) {
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    const AttentionShape a{2, 40, 4, 2, 32}, b{1, 64, 4, 2, 32};
    cuda::DeviceArena arena({0,
                             attention_scratch_bytes(a, AttentionKernel::kFused, DType::kFloat32, 0,
                                                     cuda::kArenaAlignment),
                             0});
    cuda::CudnnAttention attention(stream);
    DeviceBuffer<float> q(2 * 64 * 4 * 32), kv(2 * 64 * 2 * 32), out(q.size()), lse(2 * 4 * 64),
        dq(q.size()), dk(kv.size()), dv(kv.size());
    q.upload(random_floats(q.size(), 61)), kv.upload(random_floats(kv.size(), 62));
    // prepare (--attention auto's start-up probe) builds both graphs and takes the workspace;
    // the calls after it build and allocate nothing more.
    attention.prepare(a, DType::kFloat32);
    EXPECT_EQ(attention.graphs_built(), 2);
    const int64_t prepared_workspace = attention.workspace_bytes();
    const AttentionGraphReport prepared = attention.graph_report();
    EXPECT_EQ(prepared.graphs_built, 2);
    EXPECT_GT(prepared.build_seconds, 0.0);  // the report's build time: the builds' own
    for (int call = 0; call < 3; ++call) {
      attention.forward(arena, out.get(), lse.get(), q.get(), kv.get(), kv.get(), a);
      attention.backward(arena, dq.get(), dk.get(), dv.get(), q.get(), q.get(), kv.get(), kv.get(),
                         out.get(), lse.get(), a);
    }
    EXPECT_EQ(attention.graphs_built(), 2);
    EXPECT_EQ(attention.graph_report().build_seconds, prepared.build_seconds);  // calls: none
    // The deterministic backward keeps dP in cuDNN's workspace: held, and counted as scratch.
    EXPECT_GT(attention.workspace_bytes(), 0);
    EXPECT_EQ(attention.workspace_bytes(), prepared_workspace);
    EXPECT_EQ(attention.graph_report().workspace_bytes, prepared_workspace);
    attention.forward(arena, out.get(), lse.get(), q.get(), kv.get(), kv.get(), b);
    EXPECT_EQ(attention.graphs_built(), 3);
    EXPECT_GT(attention.graph_report().build_seconds, prepared.build_seconds);
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ZT_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudnnAttention, ScratchTooSmallIsAnErrorNamingTheBytes) {
  const AttentionShape s{1, 64, 4, 2, 32};
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    cuda::DeviceArena arena({0, 4096, 0});
    cuda::CudnnAttention attention(stream);
    DeviceBuffer<float> q(64 * 4 * 32), kv(64 * 2 * 32), out(q.size()), lse(4 * 64);
    try {
      attention.forward(arena, out.get(), lse.get(), q.get(), kv.get(), kv.get(), s);
      ADD_FAILURE() << "a 4 KiB scratch was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("attention scratch has 4096"), std::string::npos)
          << e.what();
    }
  }
  ZT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// What --attention auto asks before it picks fused (engine_device.cpp): both graphs of a
// supported shape build for every activation storage, and a head dimension cuDNN cannot lay out
// (20 bf16 values: rows not 16-byte aligned) is a reason, not a crash.
TEST(CudnnAttention, RefusalProbeBuildsSupportedShapesAndNamesARefusal) {
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreate(&stream));
  // prepare() on a fresh CudnnAttention: "" when both graphs build, else cuDNN's reason.
  const auto refusal = [&](const AttentionShape& shape, DType storage) -> std::string {
    try {
      cuda::CudnnAttention(stream).prepare(shape, storage);
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  };
  const AttentionShape supported{2, 40, 4, 2, 32};
  for (DType storage : {DType::kFloat32, DType::kBf16, DType::kFloat16})
    EXPECT_EQ(refusal(supported, storage), "") << dtype_name(storage);
  {  // eval's check: the forward graph alone
    cuda::CudnnAttention forward_only(stream);
    forward_only.prepare(supported, DType::kBf16, /*with_backward=*/false);
    EXPECT_EQ(forward_only.graphs_built(), 1);
  }
  const std::string refused = refusal({1, 16, 2, 2, 20}, DType::kBf16);
  EXPECT_NE(refused.find("cuDNN fused attention (forward B=1 T=16"), std::string::npos) << refused;
  ZT_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace zt::gpu_test
