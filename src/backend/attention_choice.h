// --attention gemm|fused|auto: which causal attention the CUDA backend runs, and the host-side
// bookkeeping of the fused path (cuDNN SDPA, backend/cuda/cudnn_attention.*), free of CUDA so the
// CPU suite tests it: what the fused kernels accept, the key its graph cache is built on, and the
// scratch bytes it stages through.
//
//   gemm   today's path (backend/cuda/cuda_attention.*): the T×T scores as strided-batched
//          cuBLASLt GEMMs and row kernels; exact fp32 storage, 2× the causal FLOPs.
//   fused  cuDNN's flash-style SDPA forward and deterministic backward: no T×T score matrix in
//          the forward, bf16 inputs and outputs, fp32 statistics. (The deterministic backward's
//          cuDNN workspace holds dP, B·H·T² bf16: half the GEMM path's one T×T fp32 per head.)
//   auto   fused where this build has it, the shape is supported and the run is not fp32
//          (--precision fp32 keeps its attention exact), else gemm. The default of train and eval.
// auto asks cuDNN itself before it picks fused: the run's forward and backward graphs are built
// (not run) once at start-up, and a graph cuDNN refuses makes the run gemm, saying why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/attention_scores.h"
#include "util/dtype.h"
#include "util/stopwatch.h"

namespace zt {

enum class AttentionRequest { kGemm, kFused, kAuto };
enum class AttentionKernel { kGemm, kFused };

// "gemm" | "fused" | "auto"; anything else is a zt::Error naming the value.
AttentionRequest parse_attention_request(const std::string& text);
const char* attention_request_name(AttentionRequest request);
// "gemm" | "fused": what a checkpoint records as the run's attention.
const char* attention_kernel_name(AttentionKernel kernel);

// q[B,T,H,hd], k/v[B,T,Hkv,hd] (Backend::attention_forward's layout), and how the scores are
// formed (the model's scale, soft cap and the shortest of its layers' windows shorter than T).
struct AttentionShape {
  int64_t B = 0, T = 0, H = 0, Hkv = 0, hd = 0;
  AttentionScores scores{};
  friend bool operator==(const AttentionShape&, const AttentionShape&) = default;
};
std::string describe(const AttentionShape& shape);

// Why the fused kernels cannot run the attention `shape` on a GPU of compute capability
// major.minor ("" when they can): cuDNN's bf16 SDPA needs sm_80 or newer, a head dimension that is
// a multiple of 8 and at most 128 (forward and backward), H a multiple of Hkv, and at least two
// positions (its backward refuses s_q = s_kv = 1), and scores without a soft cap (Gemma 2's, which
// SDPA has no stage for; a scale of the model's own it takes) or a sliding window shorter than
// the sequence (not built on the fused path; a window the sequence fits in is none). With
// document_masks the documents run as cuDNN's ragged (packed, THD) sequences, which its kernels
// take on Hopper (sm_90) only (cuDNN refuses the deterministic ragged backward on sm_100); the
// graph build checks cuDNN's version.
std::string fused_attention_unsupported(const AttentionShape& shape, int sm_major,
                                        bool document_masks = false);

struct AttentionChoice {
  AttentionKernel kernel = AttentionKernel::kGemm;
  std::string why;  // one line for the run summary
};
// Resolves the request for the CUDA backend. fused_built: the build has cuDNN and its frontend;
// fp32_run: --precision fp32, whose attention auto keeps exact (gemm; fused is still allowed).
// cudnn_refusal is asked only when fused is wanted and the static rules above allow it: it builds
// the shape's graphs on the GPU and returns cuDNN's reason for refusing one ("" when both build).
// `--attention fused` that cannot run is a zt::Error naming the reason; auto falls back to gemm
// and says why. document_masks: the run packs documents with per-document masks
// (--document-masking): the fused path runs them as ragged sequences (RaggedDocuments), which
// cudnn_refusal must then build; auto keeps them on gemm until that path is validated on a GPU
// (docs/gpu.md), and `fused` runs them there.
AttentionChoice choose_attention(AttentionRequest request, bool fused_built, int sm_major,
                                 const AttentionShape& shape, bool fp32_run,
                                 const std::function<std::string()>& cudnn_refusal,
                                 bool document_masks = false);

// The documents of a micro-batch (Backend's doc_start, [B, T]) as the sequences of cuDNN's packed
// (ragged, THD) layout: one sequence per stretch of a row that one document covers, in token order,
// each attending causally within itself. A graph runs `sequences` of them of at most `length`
// tokens (RaggedGraphShape); a micro-batch takes several calls (RaggedDocuments), none of them with
// an empty sequence.
struct RaggedGraphShape {
  int64_t length = 0;     // L: a power of two at least the longest document (2 at least, T at most)
  int64_t sequences = 0;  // K: a power of two, K·L² ≤ B·T² (see ragged_graph_shape)
  friend bool operator==(const RaggedGraphShape&, const RaggedGraphShape&) = default;
};
// The graph for a micro-batch of `documents` documents, the longest `longest` tokens. cuDNN's
// deterministic backward keeps dP for sequences × L × L scores per head, so K is capped where
// K·L² reaches B·T², the plain causal graph's, and a micro-batch with more documents than K takes
// several calls. K is at most the document count (a power of two at most it). This is the first
// choice: cuDNN pads each sequence's scores to its tiles, so short sequences take more workspace
// than K·L² says, and CudnnAttention halves K further until the graph's workspace, as cuDNN
// reports it, fits the one prepared at start-up (regrouped).
RaggedGraphShape ragged_graph_shape(int64_t B, int64_t T, int64_t longest, int64_t documents);

// The calls of a micro-batch: as many full calls of graph.sequences (K) documents as there are,
// then the rest in calls of the powers of two of its binary expansion, largest first (13 left of
// K = 16: 8, 4, 1), each a graph of its own K. No sequence is empty: cuDNN before 9.25 does not
// take zero-length sequences (the cuDNN frontend's own tests of them require 9.25), and the
// H100's was 9.19.
struct RaggedDocuments {
  int64_t B = 0, T = 0;
  int64_t documents = 0;                  // the sequences
  std::vector<int32_t> document_lengths;  // [documents], in token order
  std::vector<int64_t> document_starts;   // [documents]: b·T + t of each first token
  RaggedGraphShape graph;                 // L, and the largest K of a call
  std::vector<int64_t> call_sequences;    // K of each call: graph.sequences, then smaller
  std::vector<int64_t> call_first;        // the first document of each call
  int64_t calls() const { return static_cast<int64_t>(call_sequences.size()); }
  // Call c's token offsets: its documents' first tokens, then the end of its last document.
  std::vector<int64_t> call_token_offsets(int64_t c) const;
};
// Throws a zt::Error naming the entry when doc_start breaks Backend's contract (0 ≤ doc_start[t] ≤
// t, staying or jumping to t along a row). B·T must fit int32 (cuDNN's sequence lengths).
RaggedDocuments ragged_documents(const int32_t* doc_start, int64_t B, int64_t T);
// The same documents in calls of at most `sequences` (a power of two, at most the graph's K; the
// length L stays).
RaggedDocuments regrouped(RaggedDocuments docs, int64_t sequences);
// The sequences per graph a micro-batch runs with: `first` (ragged_graph_shape's choice) halved
// until workspace_of(K), the bytes cuDNN asks for that graph, is at most `limit`; `first` when no
// limit was prepared (0). workspace_of(K) is nullopt where cuDNN refuses to build K's graphs: that
// K is passed over, and a smaller one may build. When no K down to 1 fits, the K that asks for
// the fewest bytes: the workspace must grow mid-run then, and grows the least (a mid-run
// allocation is what can fail). 0 when cuDNN refuses every K.
int64_t sequences_within_workspace(
    int64_t first, size_t limit, const std::function<std::optional<size_t>(int64_t)>& workspace_of);

// Everything a cuDNN SDPA graph is specialised on: a graph built for one key runs only that key.
// The scale (the model's, in shape.scores) and the causal mask follow from the shape.
struct SdpaGraphKey {
  AttentionShape shape;
  bool backward = false;
  // What the graph reads and writes: bf16 (fp32 activations are staged to it), or fp16 for
  // activations stored in fp16 (--precision fp16).
  DType io = DType::kBf16;
  // {0, 0}: plain causal attention over each of the B rows. Otherwise the documents' ragged layout
  // (RaggedDocuments::graph, with the call's own K).
  RaggedGraphShape ragged;
  // The backward's algorithm (true for every forward): cuDNN's deterministic one, which keeps dP
  // (B·H·T² bf16) in its workspace and forms dQ = dS·K as a product of its own, or (false,
  // --deterministic false) dQ accumulated in fp32 with atomics, whose order, and so whose low
  // bits, vary from run to run.
  bool deterministic = true;
  friend bool operator==(const SdpaGraphKey&, const SdpaGraphKey&) = default;
};
struct SdpaGraphKeyHash {
  size_t operator()(const SdpaGraphKey& key) const;
};
std::string describe(const SdpaGraphKey& key);

// Builds each value once per key and keeps it: get() calls build(key) only for a key it has not
// seen. builds() counts the calls (a training run builds 2 graphs: one forward, one backward), and
// build_seconds() is their wall time (steady clock), a build that threw included.
// get_unless_refused<Refusal>() is get() for a key the builder may refuse by throwing a Refusal:
// null then, the refusal's what() kept (refusal(key)) and the key not built again; any other
// exception propagates as from get().
template <typename Key, typename Value, typename Hash>
class BuildOnceCache {
 public:
  using Builder = std::function<std::shared_ptr<Value>(const Key&)>;
  Value& get(const Key& key, const Builder& build) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      std::shared_ptr<Value> value;
      {
        const AddElapsedSeconds timer{build_seconds_};
        value = build(key);
      }
      ++builds_;
      it = entries_.emplace(key, std::move(value)).first;
    }
    return *it->second;
  }
  template <typename Refusal>
  Value* get_unless_refused(const Key& key, const Builder& build) {
    if (refusals_.count(key)) return nullptr;
    try {
      return &get(key, build);
    } catch (const Refusal& e) {
      refusals_.emplace(key, e.what());
      return nullptr;
    }
  }
  // Why the builder refused `key` (get_unless_refused returned null for it).
  const std::string& refusal(const Key& key) const { return refusals_.at(key); }
  size_t size() const { return entries_.size(); }
  int64_t builds() const { return builds_; }
  double build_seconds() const { return build_seconds_; }

 private:
  std::unordered_map<Key, std::shared_ptr<Value>, Hash> entries_;
  std::unordered_map<Key, std::string, Hash> refusals_;
  int64_t builds_ = 0;
  double build_seconds_ = 0;
};

// Bytes one attention call stages through the backend's attention scratch before its own work,
// for activations stored in `storage` (float32 or bfloat16), each block aligned to `alignment`:
//   fused, fp32 storage  bf16 copies of the tensors (forward q, k, v, out; backward also dout, dq,
//                        dk, dv) and the fp32 statistics [B,H,T] (aligned for cuDNN)
//   fused, bf16 storage  the statistics only: cuDNN reads and writes the tensors where they are
//   gemm,  fp32 storage  nothing
//   gemm,  bf16 storage  fp32 copies of the same tensors: the GEMM path computes in fp32 and
//                        rounds its outputs once (the backend contract), so it stays the reference
// The GEMM path's T×T matrices come after the staging; cuDNN's own workspace is not in the scratch
// (CudnnAttention holds it).
size_t attention_staging_bytes(const AttentionShape& shape, AttentionKernel kernel, DType storage,
                               bool backward, size_t alignment);

// The attention scratch a micro-batch needs: the backward's staging, plus `score_bytes` for the
// GEMM path's T×T matrices (the fused path needs at least score_bytes too: its historic size).
size_t attention_scratch_bytes(const AttentionShape& shape, AttentionKernel kernel, DType storage,
                               size_t score_bytes, size_t alignment);

// Throws a zt::Error naming the pass, the shape and the bytes when the staging does not fit in
// `available` scratch bytes.
void check_fused_attention_fits(const SdpaGraphKey& key, size_t staging, size_t available);

}  // namespace zt
