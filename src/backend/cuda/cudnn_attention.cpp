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

#include "backend/cuda/cuda_attention_staging.h"
#include "backend/cuda/cuda_storage.h"
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

// A new 16-bit-in/out (the key's io: bf16 or fp16), fp32-compute graph with the q, k, v inputs
// both directions read.
struct GraphStart {
  std::shared_ptr<BuiltGraph> built = std::make_shared<BuiltGraph>();
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v;
  GraphStart(const AttentionShape& s, DType io) {
    built->graph = std::make_shared<fe::graph::Graph>();
    built->graph
        ->set_io_data_type(io == DType::kFloat16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    q = rows_tensor(*built->graph, "q", kQ, s, s.H);
    k = rows_tensor(*built->graph, "k", kK, s, s.Hkv);
    v = rows_tensor(*built->graph, "v", kV, s, s.Hkv);
  }
};

void finish_build(BuiltGraph& built, cudnnHandle_t handle, const SdpaGraphKey& key) {
  check_frontend(built.graph->validate(), key, "validate");
  check_frontend(built.graph->build_operation_graph(handle), key, "build_operation_graph");
  // Heuristic A's engines first; the fallback list after them, for shapes A has no engine for
  // (build_plans takes the first candidate that builds, so A's choice stands where it has one).
  check_frontend(built.graph->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
                 key, "create_execution_plans");
  check_frontend(built.graph->check_support(handle), key, "check_support");
  check_frontend(built.graph->build_plans(handle), key, "build_plans");
  check_frontend(built.graph->get_workspace_size(built.workspace), key, "get_workspace_size");
}

std::shared_ptr<BuiltGraph> build_forward(cudnnHandle_t handle, const SdpaGraphKey& key) {
  const AttentionShape& s = key.shape;
  GraphStart start(s, key.io);
  fe::graph::Graph& g = *start.built->graph;
  auto options = fe::graph::SDPA_attributes()
                     .set_name("sdpa_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  auto [o, stats] = g.sdpa(start.q, start.k, start.v, options);
  mark_rows_output(o, "o", kO, s, s.H);
  stats->set_output(true)
      .set_name("stats")
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(stats_dims(s))
      .set_stride(stats_strides(s));
  finish_build(*start.built, handle, key);
  return start.built;
}

std::shared_ptr<BuiltGraph> build_backward(cudnnHandle_t handle, const SdpaGraphKey& key) {
  const AttentionShape& s = key.shape;
  GraphStart start(s, key.io);
  fe::graph::Graph& g = *start.built->graph;
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
  auto [dq, dk, dv] = g.sdpa_backward(start.q, start.k, start.v, o, dout, stats, options);
  mark_rows_output(dq, "dQ", kDQ, s, s.H);
  mark_rows_output(dk, "dK", kDK, s, s.Hkv);
  mark_rows_output(dv, "dV", kDV, s, s.Hkv);
  finish_build(*start.built, handle, key);
  return start.built;
}

// The statistics [B,H,T] fp32 go through the (aligned) scratch too: the model's lse lives inside
// its activation arena at a 4-byte boundary, and cuDNN's kernels want 16.
float* stage_stats(DeviceArena& arena, const AttentionShape& s) {
  return arena.allocate<float>(ScratchCategory::kAttention, static_cast<size_t>(s.B * s.H * s.T));
}
void copy_stats(float* dst, const float* src, const AttentionShape& s, cudaStream_t stream) {
  ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(s.B * s.H * s.T) * sizeof(float),
                                cudaMemcpyDeviceToDevice, stream));
}

// What cuDNN's SDPA reads and writes for activations stored in `storage`: fp16 as they are, else
// bf16 (fp32 activations staged).
DType sdpa_io(DType storage) {
  return storage == DType::kFloat16 ? DType::kFloat16 : DType::kBf16;
}

// The variant pack takes void*; cuDNN only reads the inputs.
void* io_input(DeviceArena& arena, ConstTensorView src, DType io, int64_t n, cudaStream_t stream) {
  return const_cast<void*>(staged_input(arena, src, io, n, stream));
}

}  // namespace

struct CudnnAttention::Impl {
  cudaStream_t stream = nullptr;
  cudnnHandle_t handle = nullptr;
  BuildOnceCache<SdpaGraphKey, BuiltGraph, SdpaGraphKeyHash> graphs;
  // cuDNN's workspace, sized for the largest graph prepared or run so far: allocated by prepare
  // (or at a graph's first call) and grown when a new graph needs more. The deterministic
  // backward's is large: it keeps dP as B·H·T² bf16.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  void* workspace_for(const SdpaGraphKey& key, const BuiltGraph& built) {
    ZT_CHECK(built.workspace >= 0,
             "fused attention " + describe(key) + ": cuDNN reported a negative workspace size");
    const auto need = static_cast<size_t>(built.workspace);
    if (need > workspace_bytes) {
      ZT_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued graphs may still use the old one
      ZT_CUDA_CHECK(cudaFree(workspace));
      workspace = nullptr, workspace_bytes = 0;
      const cudaError_t status = cudaMalloc(&workspace, need);
      if (status != cudaSuccess) {
        cudaGetLastError();
        throw Error("fused attention " + describe(key) + ": cannot allocate " +
                    std::to_string(need) + " bytes of cuDNN workspace (" +
                    cudaGetErrorString(status) +
                    "); use a smaller --micro-batch or --seq-len, or --attention gemm");
      }
      workspace_bytes = need;
    }
    return need > 0 ? workspace : nullptr;
  }

  BuiltGraph& graph(const SdpaGraphKey& key) {
    return graphs.get(key, [this](const SdpaGraphKey& k) {
      return k.backward ? build_backward(handle, k) : build_forward(handle, k);
    });
  }

  // Throws, before anything is enqueued, when the staging does not fit in the scratch.
  static void check_fits(const DeviceArena& arena, const SdpaGraphKey& key, DType storage) {
    const BumpRegion& region = arena.region(ScratchCategory::kAttention);
    const size_t staging = attention_staging_bytes(key.shape, AttentionKernel::kFused, storage,
                                                   key.backward, kArenaAlignment);
    check_fused_attention_fits(key, staging, region.capacity() - region.used());
  }

  // One call: the graph (built on first use), the fit check and cuDNN's workspace before
  // anything is enqueued, then the staging in the scratch (returned when the call ends) with the
  // statistics' block.
  struct Call {
    Call(Impl& impl, DeviceArena& arena, const SdpaGraphKey& key, DType storage)
        : impl(impl),
          key(key),
          built(impl.graph(key)),
          workspace((check_fits(arena, key, storage), impl.workspace_for(key, built))),
          scope(arena),
          q_n(key.shape.B * key.shape.T * key.shape.H * key.shape.hd),
          kv_n(key.shape.B * key.shape.T * key.shape.Hkv * key.shape.hd),
          stats(stage_stats(arena, key.shape)) {}
    // Runs the graph on the staged tensors of `pack` (the statistics added here).
    void execute(std::unordered_map<int64_t, void*> pack) {
      pack[kStats] = stats;
      check_frontend(built.graph->execute(impl.handle, pack, workspace), key, "execute");
    }
    Impl& impl;
    const SdpaGraphKey key;
    BuiltGraph& built;
    void* workspace;
    const ArenaScope scope;
    const int64_t q_n, kv_n;
    float* stats;
  };
};

CudnnAttention::CudnnAttention(cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  check_cudnn(cudnnCreate(&impl_->handle), "cudnnCreate");
  const cudnnStatus_t status = cudnnSetStream(impl_->handle, stream);
  if (status != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(impl_->handle);
    check_cudnn(status, "cudnnSetStream");
  }
}

CudnnAttention::~CudnnAttention() {
  cudaStreamSynchronize(impl_->stream);  // queued graphs may still use the workspace
  impl_->graphs = {};                    // the plans before the handle they were built on
  if (impl_->handle) cudnnDestroy(impl_->handle);
  cudaFree(impl_->workspace);
}

void CudnnAttention::prepare(const AttentionShape& shape, DType storage, bool with_backward) {
  const DType io = sdpa_io(storage);
  const SdpaGraphKey forward{shape, false, io}, backward{shape, true, io};
  BuiltGraph& forward_graph = impl_->graph(forward);
  // The workspace too, now, before the engine's buffers take the device: the run's scratch is
  // complete at start-up (scratch_bytes), and a workspace that cannot be had is a refusal here
  // rather than an error at the first step.
  if (!with_backward) {
    impl_->workspace_for(forward, forward_graph);
    return;
  }
  BuiltGraph& backward_graph = impl_->graph(backward);  // the cache holds values by pointer
  if (forward_graph.workspace > backward_graph.workspace)
    impl_->workspace_for(forward, forward_graph);
  else
    impl_->workspace_for(backward, backward_graph);
}

int64_t CudnnAttention::graphs_built() const {
  return impl_->graphs.builds();
}

int64_t CudnnAttention::workspace_bytes() const {
  return static_cast<int64_t>(impl_->workspace_bytes);
}

void CudnnAttention::forward(DeviceArena& arena, TensorView out, float* lse, ConstTensorView q,
                             ConstTensorView k, ConstTensorView v, const AttentionShape& s) {
  const DType storage = shared_storage("attention_forward", {out, q, k, v});
  const DType io = sdpa_io(storage);
  Impl::Call call(*impl_, arena, {s, false, io}, storage);
  cudaStream_t stream = impl_->stream;
  const int64_t q_n = call.q_n, kv_n = call.kv_n;
  void *q16 = io_input(arena, q, io, q_n, stream), *k16 = io_input(arena, k, io, kv_n, stream),
       *v16 = io_input(arena, v, io, kv_n, stream), *o16 = staged_output(arena, out, io, q_n);
  call.execute({{kQ, q16}, {kK, k16}, {kV, v16}, {kO, o16}});
  commit_output(out, o16, io, q_n, stream);
  copy_stats(lse, call.stats, s, stream);
}

void CudnnAttention::backward(DeviceArena& arena, TensorView dq, TensorView dk, TensorView dv,
                              ConstTensorView dout, ConstTensorView q, ConstTensorView k,
                              ConstTensorView v, ConstTensorView out, const float* lse,
                              const AttentionShape& s) {
  const DType storage = shared_storage("attention_backward", {dq, dk, dv, dout, q, k, v, out});
  const DType io = sdpa_io(storage);
  Impl::Call call(*impl_, arena, {s, true, io}, storage);
  cudaStream_t stream = impl_->stream;
  const int64_t q_n = call.q_n, kv_n = call.kv_n;
  void *q16 = io_input(arena, q, io, q_n, stream), *k16 = io_input(arena, k, io, kv_n, stream),
       *v16 = io_input(arena, v, io, kv_n, stream), *o16 = io_input(arena, out, io, q_n, stream),
       *do16 = io_input(arena, dout, io, q_n, stream);
  void *dq16 = staged_output(arena, dq, io, q_n), *dk16 = staged_output(arena, dk, io, kv_n),
       *dv16 = staged_output(arena, dv, io, kv_n);
  copy_stats(call.stats, lse, s, stream);
  call.execute({{kQ, q16},
                {kK, k16},
                {kV, v16},
                {kO, o16},
                {kDO, do16},
                {kDQ, dq16},
                {kDK, dk16},
                {kDV, dv16}});
  commit_output(dq, dq16, io, q_n, stream);
  commit_output(dk, dk16, io, kv_n, stream);
  commit_output(dv, dv16, io, kv_n, stream);
}

size_t cudnn_library_version() {
  return cudnnGetVersion();
}

}  // namespace zt::cuda
