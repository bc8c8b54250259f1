// The cuDNN SDPA graphs of the fused attention (see cudnn_sdpa_graphs.h).
#include "backend/cuda/cudnn_sdpa_graphs.h"

#include <cudnn_frontend.h>
#include <cstdint>
#include <memory>
#include <string>

#include "util/error.h"

namespace zt::cuda {

namespace fe = cudnn_frontend;

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw Error(std::string(call) + " failed: " + cudnnGetErrorString(status));
}

namespace {

std::string frontend_failure(fe::error_t& status, const SdpaGraphKey& key, const char* step) {
  return "cuDNN fused attention (" + describe(key) + "): " + step +
         " failed: " + status.get_message() + " (use --attention gemm)";
}

// A step of building a graph (validate ... build_plans) that failed: the frontend's refusal of the
// graph as asked (GraphRefused), unless the code says a CUDA call, the handle or the device failed.
// The cuDNN backend's own refusals (NOT_SUPPORTED, BAD_PARAM at an operation's finalize) come as
// CUDNN_BACKEND_API_FAILED, so that code is a refusal here too. (ATTRIBUTE_NOT_SET and
// SHAPE_DEDUCTION_FAILED would mean a fault in how this file describes the graph: still a graph
// that does not build, and the run says so where no other graph does.)
void check_build_step(fe::error_t status, const SdpaGraphKey& key, const char* step) {
  if (status.is_good()) return;
  switch (status.get_code()) {
    case fe::error_code_t::CUDA_API_FAILED:
    case fe::error_code_t::INVALID_CUDA_DEVICE:
    case fe::error_code_t::HANDLE_ERROR:
      throw Error(frontend_failure(status, key, step));
    default:
      throw GraphRefused(frontend_failure(status, key, step));
  }
}

// Throws Error naming the key and the step unless status is good (running a graph, or its
// workspace query; the build steps throw GraphRefused for a refusal).
void check_frontend(fe::error_t status, const SdpaGraphKey& key, const char* step) {
  if (!status.is_good()) throw Error(frontend_failure(status, key, step));
}

}  // namespace

bool ragged(const SdpaGraphKey& key) {
  return key.ragged.sequences > 0;
}

namespace {

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The batch and sequence dimensions of the graph's tensors: B rows of T, or the documents'
// sequences of at most L tokens.
int64_t graph_batch(const SdpaGraphKey& key) {
  return ragged(key) ? key.ragged.sequences : key.shape.B;
}
int64_t graph_length(const SdpaGraphKey& key) {
  return ragged(key) ? key.ragged.length : key.shape.T;
}

// A [batch, heads, length, hd] view of our [B, T, heads, hd] rows; with the documents' ragged
// layout sequence n starts at element offsets[n] (its first token's row), the same strides inside.
void set_rows_layout(fe::graph::Tensor_attributes& t, const SdpaGraphKey& key, int64_t heads,
                     const TensorPtr& offsets) {
  const AttentionShape& s = key.shape;
  const int64_t L = graph_length(key);
  t.set_dim({graph_batch(key), heads, L, s.hd})
      .set_stride({L * heads * s.hd, s.hd, heads * s.hd, 1});
  if (offsets) t.set_ragged_offset(offsets);
}

TensorPtr rows_tensor(fe::graph::Graph& graph, const char* name, int64_t uid,
                      const SdpaGraphKey& key, int64_t heads, const TensorPtr& offsets) {
  auto t = graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid));
  set_rows_layout(*t, key, heads, offsets);
  return t;
}

void mark_rows_output(const TensorPtr& t, const char* name, int64_t uid, const SdpaGraphKey& key,
                      int64_t heads, const TensorPtr& offsets) {
  t->set_output(true).set_name(name).set_uid(uid);
  set_rows_layout(*t, key, heads, offsets);
}

// The fp32 statistics: [B,H,T,1] head-major for plain rows (the model's lse layout); token-major
// [tokens, H] with ragged offsets for the documents (cuDNN's packed layout, what it sizes its
// backward's buffers by the total token count from), transposed to and from the model's lse.
void set_stats_layout(fe::graph::Tensor_attributes& t, const SdpaGraphKey& key,
                      const TensorPtr& offsets) {
  const AttentionShape& s = key.shape;
  const int64_t L = graph_length(key);
  t.set_name("stats").set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
  t.set_dim({graph_batch(key), s.H, L, 1});
  if (offsets)
    t.set_stride({s.H * L, 1, s.H, 1}).set_ragged_offset(offsets);
  else
    t.set_stride({s.H * L, L, 1, 1});
}

float attention_scale(const AttentionShape& s) {
  return s.scores.scale_for(s.hd);
}

// A per-sequence tensor of the ragged layout, [n,1,1,1].
TensorPtr per_sequence(fe::graph::Graph& g, const char* name, int64_t uid, int64_t n,
                       fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({n, 1, 1, 1})
                      .set_stride({1, 1, 1, 1})
                      .set_data_type(type));
}

// A new 16-bit-in/out (the key's io: bf16 or fp16), fp32-compute graph with the q, k, v inputs
// both directions read; for the documents also their lengths and element offsets (int64, as
// cuDNN 9.6+ takes them), one offset tensor shared by the q-like tensors (q, out, dout, dq), one
// by the kv-like ones and one by the statistics.
struct GraphStart {
  std::shared_ptr<BuiltGraph> built = std::make_shared<BuiltGraph>();
  TensorPtr q, k, v, seq_len_q, seq_len_kv, q_offsets, kv_offsets, stats_offsets;
  explicit GraphStart(const SdpaGraphKey& key) {
    const AttentionShape& s = key.shape;
    built->graph = std::make_shared<fe::graph::Graph>();
    fe::graph::Graph& g = *built->graph;
    g.set_io_data_type(key.io == DType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    if (ragged(key)) {
      if (cudnnGetVersion() < 90600)
        throw GraphRefused(
            "cuDNN " + std::to_string(cudnnGetVersion()) +
            " is older than 9.6.0, the first whose ragged attention takes grouped-query "
            "heads and ragged statistics (document masking on the fused path)");
      const int64_t n = key.ragged.sequences;
      seq_len_q = per_sequence(g, "seq_len_q", kSeqLenQ, n, fe::DataType_t::INT32);
      seq_len_kv = per_sequence(g, "seq_len_kv", kSeqLenKv, n, fe::DataType_t::INT32);
      q_offsets = per_sequence(g, "q_offsets", kQOffsets, n + 1, fe::DataType_t::INT64);
      kv_offsets = per_sequence(g, "kv_offsets", kKvOffsets, n + 1, fe::DataType_t::INT64);
      stats_offsets = per_sequence(g, "stats_offsets", kStatsOffsets, n + 1, fe::DataType_t::INT64);
    }
    q = rows_tensor(g, "q", kQ, key, s.H, q_offsets);
    k = rows_tensor(g, "k", kK, key, s.Hkv, kv_offsets);
    v = rows_tensor(g, "v", kV, key, s.Hkv, kv_offsets);
  }
  // Per-sequence causal attention for the documents: the padding mask with their lengths (the
  // causal mask is top-left aligned, and each sequence's queries and keys are the same tokens).
  template <typename Options>
  void mask_documents(Options& options) const {
    if (seq_len_q)
      options.set_padding_mask(true).set_seq_len_q(seq_len_q).set_seq_len_kv(seq_len_kv);
  }
};

void finish_build(BuiltGraph& built, cudnnHandle_t handle, const SdpaGraphKey& key) {
  check_build_step(built.graph->validate(), key, "validate");
  check_build_step(built.graph->build_operation_graph(handle), key, "build_operation_graph");
  // Heuristic A's engines first; the fallback list after them, for shapes A has no engine for
  // (build_plans takes the first candidate that builds, so A's choice stands where it has one).
  check_build_step(
      built.graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), key,
      "create_execution_plans");
  check_build_step(built.graph->check_support(handle), key, "check_support");
  check_build_step(built.graph->build_plans(handle), key, "build_plans");
  check_frontend(built.graph->get_workspace_size(built.workspace), key, "get_workspace_size");
}

}  // namespace

std::shared_ptr<BuiltGraph> build_forward(cudnnHandle_t handle, const SdpaGraphKey& key) {
  const AttentionShape& s = key.shape;
  GraphStart start(key);
  fe::graph::Graph& g = *start.built->graph;
  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  start.mask_documents(options);
  auto [o, stats] = g.sdpa(start.q, start.k, start.v, options);
  mark_rows_output(o, "o", kO, key, s.H, start.q_offsets);
  stats->set_output(true);
  set_stats_layout(*stats, key, start.stats_offsets);
  finish_build(*start.built, handle, key);
  return start.built;
}

std::shared_ptr<BuiltGraph> build_backward(cudnnHandle_t handle, const SdpaGraphKey& key) {
  const AttentionShape& s = key.shape;
  GraphStart start(key);
  fe::graph::Graph& g = *start.built->graph;
  auto o = rows_tensor(g, "o", kO, key, s.H, start.q_offsets);
  auto dout = rows_tensor(g, "dO", kDO, key, s.H, start.q_offsets);
  auto stats = g.tensor(fe::graph::Tensor_attributes());
  set_stats_layout(*stats, key, start.stats_offsets);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("sdpa_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s))
                     .set_deterministic_algorithm(key.deterministic);
  start.mask_documents(options);
  // The ragged graph's own buffers (softmax sums, dK/dV of grouped heads) sized by the tokens
  // there are, not by sequences × L.
  if (ragged(key)) options.set_max_total_seq_len_q(s.B * s.T).set_max_total_seq_len_kv(s.B * s.T);
  auto [dq, dk, dv] = g.sdpa_backward(start.q, start.k, start.v, o, dout, stats, options);
  mark_rows_output(dq, "dQ", kDQ, key, s.H, start.q_offsets);
  mark_rows_output(dk, "dK", kDK, key, s.Hkv, start.kv_offsets);
  mark_rows_output(dv, "dV", kDV, key, s.Hkv, start.kv_offsets);
  finish_build(*start.built, handle, key);
  return start.built;
}

void execute_graph(const BuiltGraph& built, cudnnHandle_t handle, const SdpaGraphKey& key,
                   std::unordered_map<int64_t, void*>& pack, void* workspace) {
  check_frontend(built.graph->execute(handle, pack, workspace), key, "execute");
}

}  // namespace zt::cuda
