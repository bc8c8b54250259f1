// Fused SDPA through the cuDNN frontend (see cudnn_attention.h for the contract).
//
//   forward   O = softmax(scale·Q·Kᵀ + causal mask)·V,  Stats = log Σ_j exp(scale·q·k_j)
//   backward  P = exp(scale·Q·Kᵀ − Stats);  dV = Pᵀ·dO;  dP = dO·Vᵀ;
//             dS = P∘(dP − rowsum(dO∘O))·scale;  dQ = dS·K;  dK = dSᵀ·Q
// cuDNN evaluates both without forming P; the backward runs its deterministic algorithm (dQ
// accumulated in a fixed order), so two runs give the same bits, as every other op does.
#include "backend/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <cudnn_frontend.h>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

namespace fe = cudnn_frontend;

// Tensor ids of the variant pack.
enum TensorUid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

void check_cudnn(cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw Error(std::string(call) + " failed: " + cudnnGetErrorString(status));
}

void check_frontend(fe::error_t status, const SdpaGraphKey& key, const char* step) {
  if (!status.is_good())
    throw Error("cuDNN fused attention (" + describe(key) + "): " + step +
                " failed: " + status.get_message() + " (use --attention gemm)");
}

// A [B, heads, T, hd] view of our [B, T, heads, hd] rows.
std::shared_ptr<fe::graph::Tensor_attributes> rows_tensor(fe::graph::Graph& graph, const char* name,
                                                          int64_t uid, const AttentionShape& s,
                                                          int64_t heads) {
  return graph.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim({s.B, heads, s.T, s.hd})
                          .set_stride({s.T * heads * s.hd, s.hd, heads * s.hd, 1}));
}

void mark_rows_output(const std::shared_ptr<fe::graph::Tensor_attributes>& t, const char* name,
                      int64_t uid, const AttentionShape& s, int64_t heads) {
  t->set_output(true)
      .set_name(name)
      .set_uid(uid)
      .set_dim({s.B, heads, s.T, s.hd})
      .set_stride({s.T * heads * s.hd, s.hd, heads * s.hd, 1});
}

std::vector<int64_t> stats_dims(const AttentionShape& s) {
  return {s.B, s.H, s.T, 1};
}
std::vector<int64_t> stats_strides(const AttentionShape& s) {
  return {s.H * s.T, s.T, 1, 1};
}

float attention_scale(const AttentionShape& s) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));
}

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

std::shared_ptr<fe::graph::Graph> new_bf16_graph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

void finish_build(BuiltGraph& built, cudnnHandle_t handle, const SdpaGraphKey& key) {
  check_frontend(built.graph->validate(), key, "validate");
  check_frontend(built.graph->build_operation_graph(handle), key, "build_operation_graph");
  check_frontend(built.graph->create_execution_plans({fe::HeurMode_t::A}), key,
                 "create_execution_plans");
  check_frontend(built.graph->check_support(handle), key, "check_support");
  check_frontend(built.graph->build_plans(handle), key, "build_plans");
  check_frontend(built.graph->get_workspace_size(built.workspace), key, "get_workspace_size");
}

std::shared_ptr<BuiltGraph> build_forward(cudnnHandle_t handle, const SdpaGraphKey& key) {
  const AttentionShape& s = key.shape;
  auto built = std::make_shared<BuiltGraph>();
  built->graph = new_bf16_graph();
  fe::graph::Graph& g = *built->graph;
  auto q = rows_tensor(g, "q", kQ, s, s.H);
  auto k = rows_tensor(g, "k", kK, s, s.Hkv);
  auto v = rows_tensor(g, "v", kV, s, s.Hkv);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  auto [o, stats] = g.sdpa(q, k, v, options);
  mark_rows_output(o, "o", kO, s, s.H);
  stats->set_output(true)
      .set_name("stats")
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dims(s))
      .set_stride(stats_strides(s));
  finish_build(*built, handle, key);
  return built;
}

std::shared_ptr<BuiltGraph> build_backward(cudnnHandle_t handle, const SdpaGraphKey& key) {
  const AttentionShape& s = key.shape;
  auto built = std::make_shared<BuiltGraph>();
  built->graph = new_bf16_graph();
  fe::graph::Graph& g = *built->graph;
  auto q = rows_tensor(g, "q", kQ, s, s.H);
  auto k = rows_tensor(g, "k", kK, s, s.Hkv);
  auto v = rows_tensor(g, "v", kV, s, s.Hkv);
  auto o = rows_tensor(g, "o", kO, s, s.H);
  auto dout = rows_tensor(g, "dO", kDO, s, s.H);
  auto stats = g.tensor(fe::graph::Tensor_attributes()
                            .set_name("stats")
                            .set_uid(kStats)
                            .set_data_type(fe::DataType_t::FLOAT)
                            .set_dim(stats_dims(s))
                            .set_stride(stats_strides(s)));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("sdpa_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s))
                     .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dout, stats, options);
  mark_rows_output(dq, "dQ", kDQ, s, s.H);
  mark_rows_output(dk, "dK", kDK, s, s.Hkv);
  mark_rows_output(dv, "dV", kDV, s, s.Hkv);
  finish_build(*built, handle, key);
  return built;
}

// A bf16 copy of n fp32 values in the attention scratch (rounded to nearest even).
uint16_t* stage_in(DeviceArena& arena, const float* src, int64_t n, cudaStream_t stream) {
  auto* dst = arena.allocate<uint16_t>(ScratchCategory::kAttention, static_cast<size_t>(n));
  launch_to_bf16(dst, src, n, stream);
  return dst;
}

// Room for n bf16 results in the attention scratch.
uint16_t* stage_out(DeviceArena& arena, int64_t n) {
  return arena.allocate<uint16_t>(ScratchCategory::kAttention, static_cast<size_t>(n));
}

}  // namespace

struct CudnnAttention::Impl {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  BuildOnceCache<SdpaGraphKey, BuiltGraph, SdpaGraphKeyHash> graphs;

  BuiltGraph& graph(const SdpaGraphKey& key) {
    return graphs.get(key, [this](const SdpaGraphKey& k) {
      return k.backward ? build_backward(handle, k) : build_forward(handle, k);
    });
  }

  // Throws, before anything is enqueued, when staging + workspace do not fit in the scratch.
  static void check_fits(const DeviceArena& arena, const SdpaGraphKey& key,
                         const BuiltGraph& built) {
    const BumpRegion& region = arena.region(ScratchCategory::kAttention);
    const size_t staging = fused_attention_staging_bytes(key.shape, key.backward, kArenaAlignment);
    check_fused_attention_fits(key, staging, built.workspace, region.capacity() - region.used());
  }

  static void* allocate_workspace(DeviceArena& arena, const BuiltGraph& built) {
    if (built.workspace == 0) return nullptr;
    return arena.allocate_bytes(ScratchCategory::kAttention, static_cast<size_t>(built.workspace));
  }

  void execute(const SdpaGraphKey& key, BuiltGraph& built, std::unordered_map<int64_t, void*>& pack,
               void* workspace) {
    check_frontend(built.graph->execute(handle, pack, workspace), key, "execute");
  }
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  check_cudnn(cudnnCreate(&impl_->handle), "cudnnCreate");
  check_cudnn(cudnnSetStream(impl_->handle, stream), "cudnnSetStream");
}

CudnnAttention::~CudnnAttention() {
  if (impl_->handle) cudnnDestroy(impl_->handle);
}

int64_t CudnnAttention::graphs_built() const {
  return impl_->graphs.builds();
}

void CudnnAttention::forward(DeviceArena& arena, float* out, float* lse, const float* q,
                             const float* k, const float* v, const AttentionShape& s) {
  const SdpaGraphKey key{s, false};
  BuiltGraph& built = impl_->graph(key);
  Impl::check_fits(arena, key, built);
  const ArenaScope scope(arena);
  const int64_t q_n = s.B * s.T * s.H * s.hd, kv_n = s.B * s.T * s.Hkv * s.hd;
  cudaStream_t stream = impl_->stream;
  uint16_t *q16 = stage_in(arena, q, q_n, stream), *k16 = stage_in(arena, k, kv_n, stream),
           *v16 = stage_in(arena, v, kv_n, stream), *o16 = stage_out(arena, q_n);
  void* ws = Impl::allocate_workspace(arena, built);
  std::unordered_map<int64_t, void*> pack{
      {kQ, q16}, {kK, k16}, {kV, v16}, {kO, o16}, {kStats, lse}};
  impl_->execute(key, built, pack, ws);
  launch_from_bf16(out, o16, q_n, stream);
}

void CudnnAttention::backward(DeviceArena& arena, float* dq, float* dk, float* dv,
                              const float* dout, const float* q, const float* k, const float* v,
                              const float* out, const float* lse, const AttentionShape& s) {
  const SdpaGraphKey key{s, true};
  BuiltGraph& built = impl_->graph(key);
  Impl::check_fits(arena, key, built);
  const ArenaScope scope(arena);
  const int64_t q_n = s.B * s.T * s.H * s.hd, kv_n = s.B * s.T * s.Hkv * s.hd;
  cudaStream_t stream = impl_->stream;
  uint16_t *q16 = stage_in(arena, q, q_n, stream), *k16 = stage_in(arena, k, kv_n, stream),
           *v16 = stage_in(arena, v, kv_n, stream), *o16 = stage_in(arena, out, q_n, stream),
           *do16 = stage_in(arena, dout, q_n, stream), *dq16 = stage_out(arena, q_n),
           *dk16 = stage_out(arena, kv_n), *dv16 = stage_out(arena, kv_n);
  void* ws = Impl::allocate_workspace(arena, built);
  // The frontend's variant pack holds non-const pointers; cuDNN only reads the inputs.
  std::unordered_map<int64_t, void*> pack{
      {kQ, q16},   {kK, k16},   {kV, v16},
      {kO, o16},   {kDO, do16}, {kDQ, dq16},
      {kDK, dk16}, {kDV, dv16}, {kStats, const_cast<float*>(lse)}};
  impl_->execute(key, built, pack, ws);
  launch_from_bf16(dq, dq16, q_n, stream);
  launch_from_bf16(dk, dk16, kv_n, stream);
  launch_from_bf16(dv, dv16, kv_n, stream);
}

}  // namespace zt::cuda
