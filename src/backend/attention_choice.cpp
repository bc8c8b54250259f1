#include "backend/attention_choice.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "util/error.h"

namespace zt {
namespace {

// a + b, a zt::Error when it overflows size_t.
size_t add_bytes(size_t a, size_t b, const std::string& what) {
  ZT_CHECK(b <= std::numeric_limits<size_t>::max() - a, what + ": byte count overflows");
  return a + b;
}

// Bytes of `elements` values of `width` bytes, rounded up to `alignment` (a power of two).
size_t aligned_block(int64_t elements, size_t width, size_t alignment, const std::string& what) {
  ZT_CHECK(elements >= 0, what + ": negative element count");
  ZT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
           what + ": alignment " + std::to_string(alignment) + " is not a power of two");
  const auto n = static_cast<size_t>(elements);
  ZT_CHECK(n <= (std::numeric_limits<size_t>::max() - alignment) / width,
           what + ": byte count overflows");
  return (n * width + alignment - 1) & ~(alignment - 1);
}

void check_shape(const AttentionShape& s, const std::string& what) {
  ZT_CHECK(s.B > 0 && s.T > 0 && s.H > 0 && s.Hkv > 0 && s.hd > 0,
           what + ": every dimension must be positive, got " + describe(s));
  // B·T·H·hd, the largest element count below, must fit int64.
  const auto max = std::numeric_limits<int64_t>::max();
  ZT_CHECK(s.B <= max / s.T && s.B * s.T <= max / s.H && s.B * s.T * s.H <= max / s.hd,
           what + ": " + describe(s) + " has more elements than int64 holds");
}

}  // namespace

AttentionRequest parse_attention_request(const std::string& text) {
  if (text == "gemm") return AttentionRequest::kGemm;
  if (text == "fused") return AttentionRequest::kFused;
  if (text == "auto") return AttentionRequest::kAuto;
  throw Error("--attention: unknown value '" + text + "' (expected gemm, fused or auto)");
}

const char* attention_request_name(AttentionRequest request) {
  switch (request) {
    case AttentionRequest::kGemm:
      return "gemm";
    case AttentionRequest::kFused:
      return "fused";
    case AttentionRequest::kAuto:
      return "auto";
  }
  return "?";
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::kFused ? "fused" : "gemm";
}

std::string describe(const AttentionShape& s) {
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " Hkv=" + std::to_string(s.Hkv) + " hd=" + std::to_string(s.hd) +
         (s.scores.scale > 0 ? " scale=" + std::to_string(s.scores.scale) : "") +
         (s.scores.softcap > 0 ? " softcap=" + std::to_string(s.scores.softcap) : "") +
         (s.scores.window > 0 ? " window=" + std::to_string(s.scores.window) : "");
}

std::string fused_attention_unsupported(const AttentionShape& shape, int sm_major,
                                        bool document_masks) {
  const int64_t H = shape.H, Hkv = shape.Hkv, hd = shape.hd;
  if (sm_major < 8)
    return "cuDNN's bf16 SDPA needs compute capability 8.0 or newer, this GPU has " +
           std::to_string(sm_major) + ".x";
  if (document_masks && sm_major != 9)
    return "document masking runs the fused kernels on cuDNN's ragged (packed-document) layout, "
           "which its deterministic backward supports on Hopper (compute capability 9.x) only; "
           "this GPU has " +
           std::to_string(sm_major) + ".x";
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0)
    return std::to_string(H) + " query heads are not a multiple of " + std::to_string(Hkv) +
           " kv heads";
  if (hd % 8 != 0 || hd <= 0 || hd > 128)
    return "head_dim " + std::to_string(hd) +
           " is not supported by cuDNN's SDPA (a multiple of 8, at most 128)";
  if (shape.scores.softcap > 0)
    return "the attention scores' soft cap (attn_logit_softcapping " +
           std::to_string(shape.scores.softcap) + ") is not a stage of cuDNN's SDPA";
  if (shape.scores.window > 0)
    return "a sliding window of " + std::to_string(shape.scores.window) +
           " tokens, shorter than the sequence, is not implemented on the fused path";
  if (shape.T < 2)
    return "a sequence of " + std::to_string(shape.T) +
           " position(s) is not supported by cuDNN's SDPA backward (--seq-len of at least 2)";
  return "";
}

AttentionChoice choose_attention(AttentionRequest request, bool fused_built, int sm_major,
                                 const AttentionShape& shape, bool fp32_run,
                                 const std::function<std::string()>& cudnn_refusal,
                                 bool document_masks) {
  if (request == AttentionRequest::kGemm) return {AttentionKernel::kGemm, "gemm (requested)"};
  if (request == AttentionRequest::kAuto && fp32_run)
    return {AttentionKernel::kGemm,
            "gemm (auto: --precision fp32 keeps the attention in fp32; the fused kernels "
            "compute on bf16 inputs)"};
  std::string reason = fused_built ? fused_attention_unsupported(shape, sm_major, document_masks)
                                   : "this build has no cuDNN fused attention (no cuDNN or "
                                     "cuDNN frontend headers at build time; ./run.sh fetches "
                                     "the headers)";
  // Not a limit of the hardware but of our evidence (docs/gpu.md, "with document masks").
  if (reason.empty() && request == AttentionRequest::kAuto && document_masks)
    return {AttentionKernel::kGemm,
            "gemm (auto: document masks on the fused path are not yet validated on a GPU: on an "
            "H100 one attention fed micro-batches with other documents gave other gradients than "
            "a fresh one, see docs/gpu.md; --attention fused runs them there)"};
  if (reason.empty()) {
    const std::string refused = cudnn_refusal();
    if (!refused.empty()) reason = "cuDNN refused the graph: " + refused;
  }
  if (reason.empty()) {
    return {AttentionKernel::kFused, request == AttentionRequest::kAuto
                                         ? "fused cuDNN SDPA (auto)"
                                         : "fused cuDNN SDPA (requested)"};
  }
  ZT_CHECK(request == AttentionRequest::kAuto, "--attention fused: " + reason);
  return {AttentionKernel::kGemm, "gemm (auto: " + reason + ")"};
}

namespace {
int64_t power_of_two_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
}  // namespace

RaggedGraphShape ragged_graph_shape(int64_t B, int64_t T, int64_t longest, int64_t documents) {
  ZT_CHECK(B > 0 && T > 0 && B <= std::numeric_limits<int32_t>::max() / T,
           "ragged graph: B=" + std::to_string(B) + " T=" + std::to_string(T) +
               " is out of range (B·T must fit int32)");
  ZT_CHECK(longest >= 1 && longest <= T && documents >= 1 && documents <= B * T,
           "ragged graph: " + std::to_string(documents) + " documents, the longest " +
               std::to_string(longest) + " tokens, do not fit B=" + std::to_string(B) +
               " T=" + std::to_string(T));
  RaggedGraphShape g;
  g.length = std::min(T, power_of_two_at_least(std::max<int64_t>(longest, 2)));
  // The plain graph's scores per head, B·T², in units of one sequence's L² (B·T < 2³¹, L ≤ T).
  const int64_t budget = B * T / g.length * T / g.length;
  g.sequences = 1;
  while (g.sequences * 2 <= documents && g.sequences * 2 <= budget) g.sequences *= 2;
  return g;
}

RaggedDocuments ragged_documents(const int32_t* doc_start, int64_t B, int64_t T) {
  ZT_CHECK(doc_start != nullptr, "ragged documents: no document starts");
  ZT_CHECK(B > 0 && T > 0 && B <= std::numeric_limits<int32_t>::max() / T,
           "ragged documents: B=" + std::to_string(B) + " T=" + std::to_string(T) +
               " is out of range (B·T must be positive and fit int32)");
  std::vector<int32_t> lengths;
  std::vector<int64_t> starts;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = b * T + t, start = doc_start[i];
      const bool stays = t > 0 && start == doc_start[i - 1];
      ZT_CHECK(start == t || stays,
               "ragged documents: doc_start[" + std::to_string(b) + "," + std::to_string(t) +
                   "] = " + std::to_string(start) + " neither continues the document of position " +
                   std::to_string(t - 1) + " nor starts one at " + std::to_string(t));
      if (stays) {
        ++lengths.back();
      } else {
        starts.push_back(i);
        lengths.push_back(1);
      }
    }
  }
  RaggedDocuments r;
  r.B = B, r.T = T;
  r.documents = static_cast<int64_t>(lengths.size());
  r.graph =
      ragged_graph_shape(B, T, *std::max_element(lengths.begin(), lengths.end()), r.documents);
  r.document_lengths = std::move(lengths);
  r.document_starts = std::move(starts);
  const int64_t first_choice = r.graph.sequences;
  return regrouped(std::move(r), first_choice);
}

RaggedDocuments regrouped(RaggedDocuments r, int64_t K) {
  ZT_CHECK(K >= 1 && (K & (K - 1)) == 0 && K <= r.graph.sequences,
           "ragged documents: " + std::to_string(K) +
               " sequences per graph is not a power of two "
               "within the first choice's " +
               std::to_string(r.graph.sequences));
  r.graph.sequences = K;
  r.call_sequences.clear(), r.call_first.clear();
  int64_t first = 0;
  const auto call = [&](int64_t sequences) {
    r.call_sequences.push_back(sequences);
    r.call_first.push_back(first);
    first += sequences;
  };
  while (r.documents - first >= K) call(K);
  for (int64_t k = K / 2; k >= 1; k /= 2)  // the rest, less than K: its binary expansion
    if (r.documents - first >= k) call(k);
  return r;
}

std::vector<int64_t> RaggedDocuments::call_token_offsets(int64_t c) const {
  ZT_CHECK(c >= 0 && c < calls(), "ragged documents: no call " + std::to_string(c));
  const auto first = static_cast<size_t>(call_first[static_cast<size_t>(c)]);
  const auto K = static_cast<size_t>(call_sequences[static_cast<size_t>(c)]);
  std::vector<int64_t> offsets(document_starts.begin() + static_cast<std::ptrdiff_t>(first),
                               document_starts.begin() + static_cast<std::ptrdiff_t>(first + K));
  offsets.push_back(document_starts[first + K - 1] + document_lengths[first + K - 1]);
  return offsets;
}

int64_t sequences_within_workspace(
    int64_t first, size_t limit,
    const std::function<std::optional<size_t>(int64_t)>& workspace_of) {
  if (limit == 0) return first;
  int64_t least = 0;  // where none fits: the K whose workspace grows the least (0: none built)
  size_t least_bytes = std::numeric_limits<size_t>::max();
  for (int64_t K = first; K >= 1; K /= 2) {
    const std::optional<size_t> bytes = workspace_of(K);
    if (!bytes) continue;  // cuDNN refused K's graphs
    if (*bytes <= limit) return K;
    if (least == 0 || *bytes < least_bytes) least = K, least_bytes = *bytes;
  }
  return least;
}

size_t SdpaGraphKeyHash::operator()(const SdpaGraphKey& key) const {
  size_t h = (key.backward ? 1 : 0) + (key.deterministic ? 2 : 0);
  // The scores as operator== compares them (+ 0.0f: −0 and +0 are equal, and hash alike).
  const AttentionScores& scores = key.shape.scores;
  for (int64_t v :
       {key.shape.B, key.shape.T, key.shape.H, key.shape.Hkv, key.shape.hd,
        static_cast<int64_t>(key.io), key.ragged.length, key.ragged.sequences,
        static_cast<int64_t>(std::bit_cast<uint32_t>(scores.scale + 0.0f)),
        static_cast<int64_t>(std::bit_cast<uint32_t>(scores.softcap + 0.0f)), scores.window})
    h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

std::string describe(const SdpaGraphKey& key) {
  return std::string(key.backward ? "backward" : "forward") + " " + describe(key.shape) + " " +
         dtype_name(key.io) + (key.deterministic ? "" : " nondeterministic") +
         (key.ragged.sequences > 0 ? " ragged " + std::to_string(key.ragged.sequences) + " × " +
                                         std::to_string(key.ragged.length)
                                   : "");
}

size_t attention_staging_bytes(const AttentionShape& s, AttentionKernel kernel, DType storage,
                               bool backward, size_t alignment) {
  const std::string what = std::string(kernel == AttentionKernel::kFused ? "fused" : "gemm") +
                           " attention staging (" + describe(s) + ", " + dtype_name(storage) + ")";
  check_shape(s, what);
  ZT_CHECK(storage == DType::kFloat32 || storage == DType::kBf16 || storage == DType::kFloat16,
           what + ": activations are stored in float32, bfloat16 or float16");
  const bool tensors_staged = (kernel == AttentionKernel::kFused) == (storage == DType::kFloat32);
  const int64_t q_like = s.B * s.T * s.H * s.hd, kv_like = s.B * s.T * s.Hkv * s.hd;
  // The staged copies have the type the kernels compute in: bf16 for cuDNN, fp32 for the GEMMs.
  const size_t element = kernel == AttentionKernel::kFused ? 2 : 4;
  const size_t q_block = aligned_block(q_like, element, alignment, what);
  const size_t kv_block = aligned_block(kv_like, element, alignment, what);
  const size_t stats_block =
      kernel == AttentionKernel::kFused ? aligned_block(s.B * s.H * s.T, 4, alignment, what) : 0;
  // forward: q, out (q-like) and k, v; backward adds dout, dq (q-like) and dk, dv.
  const size_t q_blocks = tensors_staged ? (backward ? 4 : 2) : 0;
  const size_t kv_blocks = q_blocks;
  ZT_CHECK(q_block <= std::numeric_limits<size_t>::max() / 8 &&
               kv_block <= std::numeric_limits<size_t>::max() / 8,
           what + ": byte count overflows");
  return add_bytes(add_bytes(q_blocks * q_block, kv_blocks * kv_block, what), stats_block, what);
}

size_t attention_scratch_bytes(const AttentionShape& s, AttentionKernel kernel, DType storage,
                               size_t score_bytes, size_t alignment) {
  const size_t staging = attention_staging_bytes(s, kernel, storage, true, alignment);
  if (kernel == AttentionKernel::kFused) return std::max(score_bytes, staging);
  return add_bytes(staging, score_bytes, "gemm attention scratch (" + describe(s) + ")");
}

void check_fused_attention_fits(const SdpaGraphKey& key, size_t staging, size_t available) {
  ZT_CHECK(staging <= available,
           "fused attention " + describe(key) + " needs " + std::to_string(staging) +
               " bytes of staging; the attention scratch has " + std::to_string(available) +
               " free (it is sized for the run's --micro-batch and --seq-len; a smaller one, or "
               "--attention gemm, avoids this)");
}

}  // namespace zt
