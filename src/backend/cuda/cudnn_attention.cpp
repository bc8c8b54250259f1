// Fused SDPA through the cuDNN frontend (see cudnn_attention.h for the contract).
//
//   forward   O = softmax(scale·Q·Kᵀ + causal mask)·V,  Stats = log Σ_j exp(scale·q·k_j)
//   backward  P = exp(scale·Q·Kᵀ − Stats);  dV = Pᵀ·dO;  dP = dO·Vᵀ;
//             dS = P∘(dP − rowsum(dO∘O))·scale;  dQ = dS·K;  dK = dSᵀ·Q
// cuDNN evaluates both without forming P; the backward runs its deterministic algorithm (dP kept
// in the workspace, dQ = dS·K a product of its own), so two runs give the same bits, as every
// other op does; with --deterministic false (SdpaGraphKey::deterministic) it accumulates dQ in
// fp32 with atomics, in an order that varies from run to run.
#include "backend/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_attention_staging.h"
#include "backend/cuda/cuda_graph_capture.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_storage.h"
#include "backend/cuda/cudnn_sdpa_graphs.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

// The statistics [B,H,T] fp32: cuDNN reads and writes the caller's lse itself where it starts at a
// 16-byte boundary (the model's activation arena aligns every tensor to 256), the layout the plain
// graph declares. Otherwise they go through the (aligned) scratch: an lse at a 4-byte boundary,
// and the documents' graphs, for which the scratch holds them token-major (set_stats_layout) and
// the copy transposes.
float* stage_stats(DeviceArena& arena, const SdpaGraphKey& key, float* lse) {
  if (!ragged(key) && reinterpret_cast<std::uintptr_t>(lse) % 16 == 0) return lse;
  const AttentionShape& s = key.shape;
  return arena.allocate<float>(ScratchCategory::kAttention, static_cast<size_t>(s.B * s.H * s.T));
}
// to_model: lse ← scratch; else scratch ← lse. Nothing where the graph takes lse itself.
void copy_stats(float* dst, const float* src, const SdpaGraphKey& key, bool to_model,
                cudaStream_t stream) {
  if (dst == src) return;
  const AttentionShape& s = key.shape;
  if (ragged(key)) {
    launch_transpose_attention_stats(dst, src, s.B, s.T, s.H, to_model, stream);
    return;
  }
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

// The documents' per-sequence inputs in device memory, for each call (RaggedDocuments, K its own):
// int64 element offsets of the q-like, kv-like and statistics tensors ([K + 1] each) and the int32
// lengths ([K]), every array starting at a 16-byte boundary (cuDNN's default tensor alignment). One
// block, uploaded once per micro-batch and attention shape.
class RaggedTable {
 public:
  ~RaggedTable() { cudaFree(device_); }
  // Uploads the table of `docs` for the attention `s` on `stream` (once until invalidate() or the
  // shape changes). The host copy stays a member: the copy from pageable memory is staged at the
  // call.
  void upload(const RaggedDocuments& docs, const AttentionShape& s, cudaStream_t stream) {
    if (uploaded_ && uploaded_for_ == s) return;
    calls_.clear();
    size_t bytes = 0;
    for (int64_t c = 0; c < docs.calls(); ++c) {
      const int64_t K = docs.call_sequences[static_cast<size_t>(c)];
      const int64_t offsets_stride = (K + 2) / 2 * 2;  // K + 1 int64, rounded up to 16 bytes
      const int64_t lengths_stride = (K + 3) / 4 * 4;  // K int32, likewise
      calls_.push_back({bytes, offsets_stride});
      bytes +=
          static_cast<size_t>(3 * offsets_stride) * 8 + static_cast<size_t>(lengths_stride) * 4;
    }
    host_.assign(bytes, 0);
    for (int64_t c = 0; c < docs.calls(); ++c) {
      const CallBlock& block = calls_[static_cast<size_t>(c)];
      auto* offsets = reinterpret_cast<int64_t*>(host_.data() + block.offset);
      auto* lengths = reinterpret_cast<int32_t*>(offsets + 3 * block.offsets_stride);
      const std::vector<int64_t> tokens = docs.call_token_offsets(c);
      const auto first = static_cast<size_t>(docs.call_first[static_cast<size_t>(c)]);
      for (size_t k = 0; k < tokens.size(); ++k) {
        offsets[k] = tokens[k] * s.H * s.hd;
        offsets[block.offsets_stride + static_cast<int64_t>(k)] = tokens[k] * s.Hkv * s.hd;
        offsets[2 * block.offsets_stride + static_cast<int64_t>(k)] = tokens[k] * s.H;
        if (k + 1 < tokens.size()) lengths[k] = docs.document_lengths[first + k];
      }
    }
    if (host_.size() > capacity_) {
      ZT_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued graphs may still read the old one
      note_own_buffer_moved();
      ZT_CUDA_CHECK(cudaFree(device_));
      device_ = nullptr, capacity_ = 0;
      ZT_CUDA_CHECK(cudaMalloc(&device_, host_.size()));
      capacity_ = host_.size();
    }
    ZT_CUDA_CHECK(
        cudaMemcpyAsync(device_, host_.data(), host_.size(), cudaMemcpyHostToDevice, stream));
    uploaded_ = true, uploaded_for_ = s;
  }
  void invalidate() { uploaded_ = false; }
  // The ragged graph's extra inputs for call `c`.
  void add_to(std::unordered_map<int64_t, void*>& pack, int64_t c) const {
    const CallBlock& block = calls_.at(static_cast<size_t>(c));
    auto* offsets = reinterpret_cast<int64_t*>(static_cast<unsigned char*>(device_) + block.offset);
    pack[kQOffsets] = offsets;
    pack[kKvOffsets] = offsets + block.offsets_stride;
    pack[kStatsOffsets] = offsets + 2 * block.offsets_stride;
    pack[kSeqLenQ] = pack[kSeqLenKv] = offsets + 3 * block.offsets_stride;
  }

 private:
  struct CallBlock {
    size_t offset;           // bytes from the table's start (a multiple of 16)
    int64_t offsets_stride;  // elements of each offsets array
  };
  void* device_ = nullptr;  // cudaMalloc: 256-byte aligned
  size_t capacity_ = 0;
  std::vector<CallBlock> calls_;
  std::vector<unsigned char> host_;
  bool uploaded_ = false;
  AttentionShape uploaded_for_;
};

}  // namespace

struct CudnnAttention::Impl {
  cudaStream_t stream = nullptr;
  bool deterministic = true;  // the backward's algorithm (SdpaGraphKey::deterministic)
  cudnnHandle_t handle = nullptr;
  BuildOnceCache<SdpaGraphKey, BuiltGraph, SdpaGraphKeyHash> graphs;
  // cuDNN's workspace, sized for the largest graph prepared or run so far: allocated by prepare
  // (or at a graph's first call) and grown when a new graph needs more. The deterministic
  // backward's is large: it keeps dP as B·H·T² bf16.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // The workspace prepare() allocated (0: none prepared) and whether it planned the backward.
  size_t prepared_workspace = 0;
  bool prepared_backward = false;
  // The graph cache's builds and seconds as the last prepare() left them (the run's start-up).
  int64_t prepared_builds = 0;
  double prepared_build_seconds = 0;
  // The micro-batch's documents (set_documents), whether their K was fitted to the prepared
  // workspace (fit_documents), and their device table.
  std::optional<RaggedDocuments> documents;
  bool documents_fitted = false;
  RaggedTable table;

  // The key of a graph of this attention (a forward has one algorithm: deterministic).
  SdpaGraphKey graph_key(const AttentionShape& s, bool backward, DType io,
                         RaggedGraphShape ragged = {}) const {
    return {s, backward, io, ragged, deterministic || !backward};
  }

  void* workspace_for(const SdpaGraphKey& key, const BuiltGraph& built) {
    ZT_CHECK(built.workspace >= 0,
             "fused attention " + describe(key) + ": cuDNN reported a negative workspace size");
    const auto need = static_cast<size_t>(built.workspace);
    if (need > workspace_bytes) {
      ZT_CUDA_CHECK(cudaStreamSynchronize(stream));  // queued graphs may still use the old one
      note_own_buffer_moved();
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

  std::shared_ptr<BuiltGraph> build(const SdpaGraphKey& key) const {
    return key.backward ? build_backward(handle, key) : build_forward(handle, key);
  }
  BuiltGraph& graph(const SdpaGraphKey& key) {
    return graphs.get(key, [this](const SdpaGraphKey& k) { return build(k); });
  }

  // Once per micro-batch: halves the documents' K (ragged_graph_shape's first choice) until the
  // graphs of every call the grouping makes (K and the smaller powers of two of the rest; forward,
  // and backward in training, whose workspace is the larger) fit the workspace prepare()
  // allocated, as cuDNN reports it; so that a micro-batch of many short documents (whose scores
  // cuDNN pads to its tiles) runs more calls instead of growing the workspace mid-run. A K with a
  // graph cuDNN refuses is passed over for a smaller one. Without a prepared workspace, the first
  // choice stays and the workspace grows at the call; where no K fits, the K that asks for the
  // least grows it; where cuDNN refuses every K, a zt::Error names its first reason.
  void fit_documents(const AttentionShape& s, DType io, bool backward) {
    if (documents_fitted) return;
    const int directions = backward || prepared_backward ? 2 : 1;  // forward, then backward
    std::string first_refusal;
    const auto most_workspace = [&](int64_t K) -> std::optional<size_t> {
      size_t most = 0;
      for (int64_t sequences : regrouped(*documents, K).call_sequences)
        for (int direction = 0; direction < directions; ++direction) {
          const SdpaGraphKey probe =
              graph_key(s, direction == 1, io, {documents->graph.length, sequences});
          const BuiltGraph* built = graphs.get_unless_refused<GraphRefused>(
              probe, [this](const SdpaGraphKey& k) { return build(k); });
          if (built == nullptr) {
            if (first_refusal.empty()) first_refusal = graphs.refusal(probe);
            return std::nullopt;
          }
          most = std::max(most, static_cast<size_t>(std::max<int64_t>(built->workspace, 0)));
        }
      return most;
    };
    const int64_t K =
        sequences_within_workspace(documents->graph.sequences, prepared_workspace, most_workspace);
    ZT_CHECK(K > 0, "fused attention with document masks: cuDNN refuses the ragged graphs of " +
                        std::to_string(documents->documents) + " documents at every call size " +
                        "from " + std::to_string(documents->graph.sequences) +
                        " sequences down to 1: " + first_refusal);
    if (K != documents->graph.sequences) documents = regrouped(std::move(*documents), K);
    documents_fitted = true;  // only once every probe was built
  }

  // The graph key of a call: the documents' ragged layout when the call has document masks.
  SdpaGraphKey key_for(const AttentionShape& s, bool backward, DType io, bool with_documents) {
    ZT_CHECK(s.scores.softcap <= 0.0f && s.scores.window == 0,
             "fused attention: " + describe(s) +
                 ": a soft cap or a sliding window is not implemented on the fused path "
                 "(choose_attention keeps such a model on the GEMM path)");
    if (!with_documents) return graph_key(s, backward, io);
    ZT_CHECK(documents.has_value(),
             "fused attention with document masks: no documents were set for the micro-batch "
             "(Backend::set_document_layout)");
    ZT_CHECK(documents->B == s.B && documents->T == s.T,
             "fused attention with document masks: the documents were set for B=" +
                 std::to_string(documents->B) + " T=" + std::to_string(documents->T) +
                 ", the call has " + describe(s));
    fit_documents(s, io, backward);
    table.upload(*documents, s, stream);
    return graph_key(s, backward, io, documents->graph);
  }

  // Throws, before anything is enqueued, when the staging does not fit in the scratch.
  static void check_fits(const DeviceArena& arena, const SdpaGraphKey& key, DType storage) {
    const BumpRegion& region = arena.region(ScratchCategory::kAttention);
    const size_t staging = attention_staging_bytes(key.shape, AttentionKernel::kFused, storage,
                                                   key.backward, kArenaAlignment);
    check_fused_attention_fits(key, staging, region.capacity() - region.used());
  }

  // The key of call `c` of the documents' calls: the call's own K.
  SdpaGraphKey call_key(const SdpaGraphKey& key, int64_t c) const {
    SdpaGraphKey k = key;
    k.ragged.sequences = documents->call_sequences[static_cast<size_t>(c)];
    return k;
  }
  // Every graph the call of `key` runs (one, or one per K of the documents' calls), each built on
  // first use and within cuDNN's workspace, before anything is enqueued; the workspace.
  void* prepare_graphs(const SdpaGraphKey& key) {
    if (!ragged(key)) {
      workspace_for(key, graph(key));
    } else {
      for (int64_t c = 0; c < documents->calls(); ++c) {
        const SdpaGraphKey k = call_key(key, c);
        workspace_for(k, graph(k));
      }
    }
    return workspace;
  }

  // One call: the graphs (built on first use), the fit check and cuDNN's workspace before
  // anything is enqueued, then the staging in the scratch (returned when the call ends) with the
  // statistics' block where the caller's lse cannot serve (stage_stats).
  struct Call {
    Call(Impl& impl, DeviceArena& arena, const SdpaGraphKey& key, DType storage, float* lse)
        : impl(impl),
          key(key),
          workspace((check_fits(arena, key, storage), impl.prepare_graphs(key))),
          scope(arena),
          q_n(key.shape.B * key.shape.T * key.shape.H * key.shape.hd),
          kv_n(key.shape.B * key.shape.T * key.shape.Hkv * key.shape.hd),
          stats(stage_stats(arena, key, lse)) {}
    // Runs the graph on the staged tensors of `pack` (the statistics, and the documents' table
    // for a ragged graph, added here): once, or once per call of the documents' sequences.
    void execute(std::unordered_map<int64_t, void*> pack) {
      pack[kStats] = stats;
      const int64_t calls = ragged(key) ? impl.documents->calls() : 1;
      for (int64_t c = 0; c < calls; ++c) {
        const SdpaGraphKey k = ragged(key) ? impl.call_key(key, c) : key;
        if (ragged(key)) impl.table.add_to(pack, c);
        execute_graph(impl.graph(k), impl.handle, k, pack, workspace);
      }
    }
    Impl& impl;
    const SdpaGraphKey key;
    void* workspace;
    const ArenaScope scope;
    const int64_t q_n, kv_n;
    float* stats;
  };
};

CudnnAttention::CudnnAttention(cudaStream_t stream, bool deterministic)
    : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->deterministic = deterministic;
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

void CudnnAttention::set_documents(const int32_t* host_doc_start, int64_t B, int64_t T) {
  impl_->table.invalidate();
  impl_->documents_fitted = false;
  if (host_doc_start == nullptr) {
    impl_->documents.reset();
    return;
  }
  impl_->documents = ragged_documents(host_doc_start, B, T);
}

void CudnnAttention::prepare(const AttentionShape& shape, DType storage, bool with_backward,
                             bool document_masks) {
  const DType io = sdpa_io(storage);
  std::vector<SdpaGraphKey> keys = {impl_->graph_key(shape, false, io)};
  // The documents' graph with the largest workspace a micro-batch can ask for (sequences of the
  // whole window: the plain graph's scores, ragged_graph_shape), so that the workspace is
  // complete now; the graphs for other document counts and lengths are built at their first
  // micro-batch and fit in it.
  if (document_masks)
    keys.push_back(
        impl_->graph_key(shape, false, io, ragged_graph_shape(shape.B, shape.T, shape.T, shape.B)));
  if (with_backward)
    for (size_t i = 0, n = keys.size(); i < n; ++i)
      keys.push_back(impl_->graph_key(keys[i].shape, true, io, keys[i].ragged));
  // The workspace too, now, before the engine's buffers take the device: the run's scratch is
  // complete at start-up (scratch_bytes), and a workspace that cannot be had is a refusal here
  // rather than an error at the first step.
  for (const SdpaGraphKey& key : keys) impl_->workspace_for(key, impl_->graph(key));
  impl_->prepared_workspace = impl_->workspace_bytes;
  impl_->prepared_backward = impl_->prepared_backward || with_backward;
  impl_->prepared_builds = impl_->graphs.builds();
  impl_->prepared_build_seconds = impl_->graphs.build_seconds();
}

void CudnnAttention::fill_workspace(unsigned char byte) {
  if (impl_->workspace_bytes > 0)
    ZT_CUDA_CHECK(cudaMemsetAsync(impl_->workspace, byte, impl_->workspace_bytes, impl_->stream));
}

int64_t CudnnAttention::graphs_built() const {
  return impl_->graphs.builds();
}

AttentionGraphReport CudnnAttention::graph_report() const {
  return {impl_->graphs.builds(), impl_->graphs.build_seconds(), impl_->prepared_builds,
          impl_->prepared_build_seconds, workspace_bytes()};
}

int64_t CudnnAttention::workspace_bytes() const {
  return static_cast<int64_t>(impl_->workspace_bytes);
}

void CudnnAttention::forward(DeviceArena& arena, TensorView out, float* lse, ConstTensorView q,
                             ConstTensorView k, ConstTensorView v, const AttentionShape& s,
                             bool with_documents) {
  const DType storage = shared_storage("attention_forward", {out, q, k, v});
  const DType io = sdpa_io(storage);
  Impl::Call call(*impl_, arena, impl_->key_for(s, false, io, with_documents), storage, lse);
  cudaStream_t stream = impl_->stream;
  const int64_t q_n = call.q_n, kv_n = call.kv_n;
  void *q16 = io_input(arena, q, io, q_n, stream), *k16 = io_input(arena, k, io, kv_n, stream),
       *v16 = io_input(arena, v, io, kv_n, stream), *o16 = staged_output(arena, out, io, q_n);
  call.execute({{kQ, q16}, {kK, k16}, {kV, v16}, {kO, o16}});
  commit_output(out, o16, io, q_n, stream);
  copy_stats(lse, call.stats, call.key, true, stream);
}

void CudnnAttention::backward(DeviceArena& arena, TensorView dq, TensorView dk, TensorView dv,
                              ConstTensorView dout, ConstTensorView q, ConstTensorView k,
                              ConstTensorView v, ConstTensorView out, const float* lse,
                              const AttentionShape& s, bool with_documents) {
  const DType storage = shared_storage("attention_backward", {dq, dk, dv, dout, q, k, v, out});
  const DType io = sdpa_io(storage);
  // cuDNN only reads the statistics in the backward.
  Impl::Call call(*impl_, arena, impl_->key_for(s, true, io, with_documents), storage,
                  const_cast<float*>(lse));
  cudaStream_t stream = impl_->stream;
  const int64_t q_n = call.q_n, kv_n = call.kv_n;
  void *q16 = io_input(arena, q, io, q_n, stream), *k16 = io_input(arena, k, io, kv_n, stream),
       *v16 = io_input(arena, v, io, kv_n, stream), *o16 = io_input(arena, out, io, q_n, stream),
       *do16 = io_input(arena, dout, io, q_n, stream);
  void *dq16 = staged_output(arena, dq, io, q_n), *dk16 = staged_output(arena, dk, io, kv_n),
       *dv16 = staged_output(arena, dv, io, kv_n);
  copy_stats(call.stats, lse, call.key, false, stream);
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
