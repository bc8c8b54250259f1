// CudaBackend: the Backend ops as kernel launches and cuBLASLt GEMMs on one stream (see
// cuda_backend.h for the contract, cuda_gemm.h for the row-major mapping).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>  // the typed cudaMalloc/cudaMallocHost overloads

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backend/adam_constants.h"
#include "backend/backend_choice.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_attention.h"
#if ZEROTRAIN_HAVE_CUPTI
#include "backend/cuda/cupti_kernel_profiler.h"
#endif
#if ZEROTRAIN_HAVE_CUDNN
#include "backend/cuda/cudnn_attention.h"
#endif
#include "backend/cuda/cuda_device_arena.h"
#include "backend/cuda/cuda_device_memory.h"
#include "backend/cuda/cuda_devices.h"
#include "backend/cuda/cuda_event_timeline.h"
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_graph_capture.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/gemm_batch.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt {

std::unique_ptr<cuda::CudaBackend> make_cuda_backend(int device,
                                                     const cuda::CudaBackendOptions& options) {
  return std::make_unique<cuda::CudaBackend>(device, options);
}

namespace cuda {

// The RoPE table on the device: cpu::make_rope_table's fp32 values, uploaded once per
// (positions, head dim, RoPE parameters) and kept while later calls fit in it.
struct DeviceRopeTable {
  std::shared_ptr<const cpu::RopeTable> host;
  float* cos = nullptr;  // [max_positions, rope.rotated(head_dim)/2]
  float* sin = nullptr;

  ~DeviceRopeTable() {
    cudaFree(cos);
    cudaFree(sin);
  }
};

struct CudaBackend::State {
  int device = 0;
  CudaBackendOptions options;
  std::string name;
  cudaStream_t stream = nullptr;
  std::unique_ptr<DeviceArena> arena;
  std::unique_ptr<LtGemm> gemm;
  bool gemm_timed = false;  // --gemm-algorithms timed
#if ZEROTRAIN_HAVE_CUDNN
  std::unique_ptr<CudnnAttention> fused_attention;  // --attention fused
#endif
  std::vector<std::unique_ptr<DeviceRopeTable>> rope;  // cuda_backend.cpp's rope_table
  std::unique_ptr<CudaDeviceMemory> memory;            // the engine's buffers
  std::unique_ptr<CudaEventTimeline> timeline;
  double* sum_result_host = nullptr;  // pinned

  ~State() {
    if (stream) cudaStreamSynchronize(stream);  // queued kernels may still use the scratch
    memory.reset();
    timeline.reset();
    gemm.reset();
#if ZEROTRAIN_HAVE_CUDNN
    fused_attention.reset();
#endif
    rope.clear();
    arena.reset();
    if (sum_result_host) cudaFreeHost(sum_result_host);
    if (stream) cudaStreamDestroy(stream);
  }
};

CudaBackend::CudaBackend(int device, const CudaBackendOptions& options)
    : state_(std::make_unique<State>()) {
  const int count = cuda_device_count();
  ZT_CHECK(device >= 0 && device < count, "CUDA backend: device " + std::to_string(device) +
                                              " does not exist (" + std::to_string(count) +
                                              " visible)");
  State& s = *state_;
  s.device = device;
  s.options = options;
  ZT_CUDA_CHECK(cudaSetDevice(device));
  check_cuda_device_supported(device);
  cudaDeviceProp prop{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  s.name = "cuda:";
  for (const char* c = prop.name; *c; ++c)
    s.name += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  // A blocking stream: plain cudaMemcpy (legacy default stream) orders after its work.
  ZT_CUDA_CHECK(cudaStreamCreate(&s.stream));
  s.memory = std::make_unique<CudaDeviceMemory>(s.stream);
  s.timeline = std::make_unique<CudaEventTimeline>(s.stream);
  ZT_CUDA_CHECK(cudaMallocHost(&s.sum_result_host, sizeof(double)));
  // The reduction region holds at least one batch of sum_squares_each's partials.
  const size_t reduction_floor =
      size_t{kSumSquaresBatch} * kSumSquaresBlocks * sizeof(double) + 2 * kArenaAlignment;
  s.arena = std::make_unique<DeviceArena>(std::array<size_t, kNumScratchCategories>{
      options.gemm_workspace_bytes, options.attention_scratch_bytes,
      std::max(options.reduction_scratch_bytes, reduction_floor)});
  s.gemm = std::make_unique<LtGemm>(s.stream, s.arena->base(ScratchCategory::kGemmWorkspace),
                                    s.arena->region(ScratchCategory::kGemmWorkspace).capacity(),
                                    options.gemm_compute);
  if (options.attention == AttentionKernel::kFused) {
#if ZEROTRAIN_HAVE_CUDNN
    s.fused_attention = std::make_unique<CudnnAttention>(s.stream, options.deterministic);
#else
    throw Error("CUDA backend: fused attention requested, but this build has no cuDNN");
#endif
  }
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::name() const {
  return state_->name;
}
std::unique_ptr<CapturedWork> CudaBackend::capture(const std::function<void()>& work,
                                                   std::string& why_not) {
  return capture_stream_work(state_->stream, work, why_not);
}

uint64_t CudaBackend::own_buffers_moved() const {
  return own_buffer_moves();
}

void CudaBackend::synchronize() {
  ZT_CUDA_CHECK(cudaStreamSynchronize(state_->stream));
}

int64_t CudaBackend::scratch_bytes() const {
  size_t bytes = 0;
  for (const ScratchCategory c :
       {ScratchCategory::kGemmWorkspace, ScratchCategory::kAttention, ScratchCategory::kReduction})
    bytes += state_->arena->region(c).capacity();
  int64_t total = static_cast<int64_t>(bytes);
#if ZEROTRAIN_HAVE_CUDNN
  if (state_->fused_attention) total += state_->fused_attention->workspace_bytes();
#endif
  return total;
}
void CudaBackend::time_gemm_algorithms() {
  state_->gemm->time_algorithms();
  state_->gemm_timed = true;
}
std::optional<GemmTuningReport> CudaBackend::gemm_tuning_report() const {
  if (!state_->gemm_timed) return std::nullopt;
  return state_->gemm->tuning_report();
}
std::optional<AttentionGraphReport> CudaBackend::attention_graph_report() const {
#if ZEROTRAIN_HAVE_CUDNN
  if (state_->fused_attention) return state_->fused_attention->graph_report();
#endif
  return std::nullopt;
}
PhaseTimeline& CudaBackend::timeline() {
  return *state_->timeline;
}
std::unique_ptr<KernelProfiler> CudaBackend::make_kernel_profiler() {
#if ZEROTRAIN_HAVE_CUPTI
  return make_cupti_kernel_profiler();
#else
  return Backend::make_kernel_profiler();
#endif
}
DeviceArena& CudaBackend::scratch_arena() {
  return *state_->arena;
}
void* CudaBackend::stream_handle() const {
  return state_->stream;
}
int CudaBackend::device() const {
  return state_->device;
}
const CudaBackendOptions& CudaBackend::options() const {
  return state_->options;
}
void CudaBackend::prepare_fused_attention(const AttentionShape& shape, DType storage, bool backward,
                                          bool document_masks) {
#if ZEROTRAIN_HAVE_CUDNN
  if (state_->fused_attention)
    state_->fused_attention->prepare(shape, storage, backward, document_masks);
#else
  (void)shape, (void)storage, (void)backward, (void)document_masks;
#endif
}

void CudaBackend::set_document_layout(const int32_t* host_doc_start, int64_t B, int64_t T) {
#if ZEROTRAIN_HAVE_CUDNN
  if (state_->fused_attention) state_->fused_attention->set_documents(host_doc_start, B, T);
#else
  (void)host_doc_start, (void)B, (void)T;
#endif
}

namespace {
// The two GEMM operands of a product share one element type (cuda_gemm.h). The model passes bf16
// working parameters with bf16 activations (ZeroEngine), so a mixed pair is a wiring error.
void check_operands(const char* op, const char* a_name, ConstTensorView a, const char* b_name,
                    ConstTensorView b) {
  ZT_CHECK(!a || !b || a.dtype == b.dtype,
           std::string("CUDA backend: ") + op + " multiplies " + a_name + " (" +
               dtype_name(a.dtype) + ") by " + b_name + " (" + dtype_name(b.dtype) +
               "); its GEMMs take one operand type (bf16 activations need bf16 working "
               "parameters)");
}
}  // namespace

// ---- linear layer (row-major mapping: cuda_gemm.h) ----
namespace {
// The linear layer's two GEMMs over one matrix each; the batched ops set batch and strides.
// Forward: y[M,N] = x[M,K]·w[N,K]ᵀ.
RowMajorGemm forward_gemm(void* y, DType y_type, ConstTensorView x, ConstTensorView w, int64_t M,
                          int64_t N, int64_t K) {
  RowMajorGemm g;
  g.transpose_b = true;
  g.rows = M, g.cols = N, g.inner = K;
  g.a = x.data, g.lda = K, g.b = w.data, g.ldb = K, g.c = y, g.ldc = N;
  g.a_type = x.dtype, g.b_type = w.dtype, g.c_type = y_type;
  return g;
}

// Weight gradient: dw[N,K] += dy[M,N]ᵀ·x[M,K] (fp32), β = 1; or dw = (β = 0) with kAssign.
RowMajorGemm weight_grad_gemm(float* dw, ConstTensorView dy, ConstTensorView x, int64_t M,
                              int64_t N, int64_t K, GradWrite write) {
  RowMajorGemm g;
  g.transpose_a = true;
  g.rows = N, g.cols = K, g.inner = M;
  g.beta = write == GradWrite::kAdd ? 1.0f : 0.0f;
  g.a = dy.data, g.lda = N, g.b = x.data, g.ldb = K, g.c = dw, g.ldc = K;
  g.a_type = dy.dtype, g.b_type = x.dtype, g.c_type = DType::kFloat32;
  return g;
}

// The stride between evenly spaced views of one type (backend/gemm_batch.h), at least
// min_stride elements; nullopt when the types differ or the spacing does not fit one batch.
std::optional<int64_t> batch_stride(const std::vector<ConstTensorView>& views, int64_t min_stride) {
  std::vector<const void*> data;
  for (const ConstTensorView& v : views) {
    if (v.dtype != views.front().dtype) return std::nullopt;
    data.push_back(v.data);
  }
  return even_stride(data, dtype_size(views.front().dtype), min_stride);
}
}  // namespace

void CudaBackend::matmul_forward(TensorView y, ConstTensorView x, ConstTensorView w, int64_t M,
                                 int64_t N, int64_t K) {
  check_operands("matmul_forward", "x", x, "w", w);
  state_->gemm->run(forward_gemm(y.data, y.dtype, x, w, M, N, K));
}

// y[M,N] = residual + x·wᵀ: the forward's GEMM with β = 1, C = residual, D = y (one rounding).
void CudaBackend::matmul_forward_add(TensorView y, ConstTensorView x, ConstTensorView w,
                                     ConstTensorView residual, int64_t M, int64_t N, int64_t K) {
  check_operands("matmul_forward_add", "x", x, "w", w);
  ZT_CHECK(residual && y.data != residual.data && residual.dtype == y.dtype,
           std::string("CUDA backend: matmul_forward_add needs a residual apart from y, of its "
                       "type (") +
               dtype_name(y.dtype) + ")");
  RowMajorGemm g = forward_gemm(y.data, y.dtype, x, w, M, N, K);
  g.beta = 1.0f;
  g.c_in = residual.data;
  state_->gemm->run(g);
}

// dx[M,K] (= or +=) dy[M,N]·w[N,K];  dw[N,K] (+= or =) dy[M,N]ᵀ·x[M,K] (fp32)
void CudaBackend::matmul_backward(TensorView dx, float* dw, ConstTensorView dy, ConstTensorView x,
                                  ConstTensorView w, int64_t M, int64_t N, int64_t K,
                                  bool accumulate_dx, GradWrite dw_write) {
  if (dx) {
    check_operands("matmul_backward", "dy", dy, "w", w);
    RowMajorGemm g;
    g.rows = M, g.cols = K, g.inner = N, g.beta = accumulate_dx ? 1.0f : 0.0f;
    g.a = dy.data, g.lda = N, g.b = w.data, g.ldb = K, g.c = dx.data, g.ldc = K;
    g.a_type = dy.dtype, g.b_type = w.dtype, g.c_type = dx.dtype;
    state_->gemm->run(g);
  }
  if (dw) {
    check_operands("matmul_backward", "dy", dy, "x", x);
    state_->gemm->run(weight_grad_gemm(dw, dy, x, M, N, K, dw_write));
  }
}

// ---- batched linear layers of one input (backend.h; when one batch: backend/gemm_batch.h) ----
// ys[i] = x·ws[i]ᵀ: the forward's GEMM with batch = count, x at stride 0.
void CudaBackend::matmul_forward_batch(const TensorView* ys, ConstTensorView x,
                                       const ConstTensorView* ws, int64_t count, int64_t M,
                                       int64_t N, int64_t K) {
  if (count > 1) {
    const auto y_stride = batch_stride(std::vector<ConstTensorView>(ys, ys + count), M * N);
    const auto w_stride = batch_stride(std::vector<ConstTensorView>(ws, ws + count), 1);
    if (y_stride && w_stride) {
      check_operands("matmul_forward_batch", "x", x, "w", ws[0]);
      RowMajorGemm g = forward_gemm(ys[0].data, ys[0].dtype, x, ws[0], M, N, K);
      g.batch = count, g.stride_a = 0, g.stride_b = *w_stride, g.stride_c = *y_stride;
      if (state_->gemm->try_run(g)) return;
    }
  }
  Backend::matmul_forward_batch(ys, x, ws, count, M, N, K);
}

// dws[i] (+= or =) dys[i]ᵀ·x over the trainable i: the weight-gradient GEMM with batch = their
// count, x at stride 0.
void CudaBackend::matmul_weight_grad_batch(float* const* dws, const ConstTensorView* dys,
                                           ConstTensorView x, int64_t count, int64_t M, int64_t N,
                                           int64_t K, GradWrite write) {
  std::vector<ConstTensorView> trained_dws, trained_dys;
  float* first_dw = nullptr;
  for (int64_t i = 0; i < count; ++i) {
    if (dws[i] == nullptr) continue;
    if (first_dw == nullptr) first_dw = dws[i];
    trained_dws.emplace_back(dws[i]);
    trained_dys.push_back(dys[i]);
  }
  if (trained_dws.size() > 1) {
    const auto dw_stride = batch_stride(trained_dws, N * K);
    const auto dy_stride = batch_stride(trained_dys, 1);
    if (dw_stride && dy_stride) {
      check_operands("matmul_weight_grad_batch", "dy", trained_dys[0], "x", x);
      RowMajorGemm g = weight_grad_gemm(first_dw, trained_dys[0], x, M, N, K, write);
      g.batch = static_cast<int64_t>(trained_dws.size());
      g.stride_a = *dy_stride, g.stride_b = 0, g.stride_c = *dw_stride;
      if (state_->gemm->try_run(g)) return;
    }
  }
  Backend::matmul_weight_grad_batch(dws, dys, x, count, M, N, K, write);
}

// ---- RMSNorm ----
void CudaBackend::rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g,
                                  int64_t M, int64_t D, float eps, float weight_offset) {
  launch_rmsnorm_forward(y, rstd, x, g, M, D, eps, weight_offset, state_->stream);
}

void CudaBackend::rmsnorm_backward(TensorView dx, float* dg, ConstTensorView dy, ConstTensorView x,
                                   ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                                   float weight_offset, GradWrite dg_write) {
  if (dx) launch_rmsnorm_backward_dx(dx, dy, x, g, rstd, M, D, weight_offset, state_->stream);
  if (dg && M == 0 && dg_write == GradWrite::kAssign) zero(dg, D);  // sums over no rows
  if (dg && M > 0 && D > 0) {
    const ArenaScope scope(*state_->arena);
    const ColumnSumScratch scratch = column_sum_scratch(M, D);
    launch_rmsnorm_backward_dg(dg, scratch.partials, dy, x, rstd, M, D, scratch.rows_per_chunk,
                               dg_write == GradWrite::kAssign, state_->stream);
  }
}

CudaBackend::ColumnSumScratch CudaBackend::column_sum_scratch(int64_t M, int64_t N) {
  const BumpRegion& region = state_->arena->region(ScratchCategory::kReduction);
  ColumnSumScratch scratch;
  scratch.rows_per_chunk = column_sum_rows_per_chunk(M, N, region.capacity() - region.used());
  const int64_t chunks = (M + scratch.rows_per_chunk - 1) / scratch.rows_per_chunk;
  scratch.partials =
      state_->arena->allocate<double>(ScratchCategory::kReduction, static_cast<size_t>(chunks * N));
  return scratch;
}

// ---- linear-layer bias ----
void CudaBackend::bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N) {
  launch_bias_forward(y, b, M, N, state_->stream);
}

void CudaBackend::bias_backward(float* db, ConstTensorView dy, int64_t M, int64_t N) {
  if (M == 0 || N == 0) return;
  const ArenaScope scope(*state_->arena);
  const ColumnSumScratch scratch = column_sum_scratch(M, N);
  launch_bias_backward(db, scratch.partials, dy, M, N, scratch.rows_per_chunk, state_->stream);
}

// ---- RoPE: the CPU's table, rotated by +angle (forward) or −angle (backward) ----
namespace {

// One table per rotation, a few at once (Gemma 3's layers alternate two bases): the cached one of
// (hd, rope) when it covers T, else a new one in its place.
const DeviceRopeTable& rope_table(std::vector<std::unique_ptr<DeviceRopeTable>>& cache, int64_t T,
                                  int64_t hd, const RopeSpec& rope) {
  constexpr size_t kKeptTables = 4;
  (void)checked_rotated_dims(rope, hd);
  const auto cached = std::find_if(cache.begin(), cache.end(), [&](const auto& t) {
    return t->host->head_dim == hd && t->host->rope == rope;
  });
  if (cached != cache.end() && (*cached)->host->max_positions >= T) return **cached;
  auto table = std::make_unique<DeviceRopeTable>();
  table->host = cpu::make_rope_table(T, hd, rope);
  const size_t bytes = table->host->cos.size() * sizeof(float);
  if (bytes > 0) {
    ZT_CUDA_CHECK(cudaMalloc(&table->cos, bytes));
    ZT_CUDA_CHECK(cudaMalloc(&table->sin, bytes));
    // Synchronous copies (the upload happens once per table).
    ZT_CUDA_CHECK(cudaMemcpy(table->cos, table->host->cos.data(), bytes, cudaMemcpyHostToDevice));
    ZT_CUDA_CHECK(cudaMemcpy(table->sin, table->host->sin.data(), bytes, cudaMemcpyHostToDevice));
  }
  // A table replaced or evicted is freed only after the device is idle (queued kernels read it).
  const bool freeing = cached != cache.end() || cache.size() >= kKeptTables;
  if (freeing) ZT_CUDA_CHECK(cudaDeviceSynchronize());
  if (freeing) note_own_buffer_moved();
  if (cached != cache.end())
    cache.erase(cached);
  else if (cache.size() >= kKeptTables)
    cache.erase(cache.begin());
  cache.push_back(std::move(table));
  return *cache.back();
}

}  // namespace

// +angle forward, −angle backward (sin_sign), of one tensor or of q and k in one launch.
void CudaBackend::rotate(TensorView x, int64_t H, TensorView x2, int64_t H2, int64_t B, int64_t T,
                         int64_t hd, const RopeSpec& rope, float sin_sign,
                         const int32_t* doc_start) {
  const DeviceRopeTable& table = rope_table(state_->rope, T, hd, rope);
  const RopeRotation rotation{
      table.cos, table.sin, rope.rotated(hd), rope.pair_step(), rope.pair_partner(hd), sin_sign};
  launch_rope(x, H, x2, H2, B, T, hd, rotation, doc_start, state_->stream);
}

void CudaBackend::rope_forward(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd,
                               const RopeSpec& rope, const int32_t* doc_start) {
  rotate(x, H, TensorView(), 0, B, T, hd, rope, 1.0f, doc_start);
}

void CudaBackend::rope_backward(TensorView dx, int64_t B, int64_t T, int64_t H, int64_t hd,
                                const RopeSpec& rope, const int32_t* doc_start) {
  rotate(dx, H, TensorView(), 0, B, T, hd, rope, -1.0f, doc_start);
}

void CudaBackend::rope_forward_qk(TensorView q, TensorView k, int64_t B, int64_t T, int64_t H,
                                  int64_t Hkv, int64_t hd, const RopeSpec& rope,
                                  const int32_t* doc_start) {
  rotate(q, H, k, Hkv, B, T, hd, rope, 1.0f, doc_start);
}

void CudaBackend::rope_backward_qk(TensorView dq, TensorView dk, int64_t B, int64_t T, int64_t H,
                                   int64_t Hkv, int64_t hd, const RopeSpec& rope,
                                   const int32_t* doc_start) {
  rotate(dq, H, dk, Hkv, B, T, hd, rope, -1.0f, doc_start);
}

// ---- attention (cudnn_attention.cpp when fused, else cuda_attention.cpp) ----
// The fused path takes document masks as the ragged sequences set_document_layout gave it for the
// micro-batch; the GEMM path reads doc_start itself.
void CudaBackend::attention_forward(TensorView out, float* lse, ConstTensorView q,
                                    ConstTensorView k, ConstTensorView v, int64_t B, int64_t T,
                                    int64_t H, int64_t Hkv, int64_t hd, const int32_t* doc_start,
                                    const AttentionScores& scores) {
#if ZEROTRAIN_HAVE_CUDNN
  if (state_->fused_attention) {
    state_->fused_attention->forward(*state_->arena, out, lse, q, k, v, {B, T, H, Hkv, hd, scores},
                                     doc_start != nullptr);
    return;
  }
#endif
  cuda::attention_forward(*state_->gemm, *state_->arena, state_->stream, out, lse, q, k, v,
                          {B, T, H, Hkv, hd, scores}, doc_start);
}

void CudaBackend::attention_backward(TensorView dq, TensorView dk, TensorView dv,
                                     ConstTensorView dout, ConstTensorView q, ConstTensorView k,
                                     ConstTensorView v, ConstTensorView out, const float* lse,
                                     int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t hd,
                                     const int32_t* doc_start, const AttentionScores& scores) {
#if ZEROTRAIN_HAVE_CUDNN
  if (state_->fused_attention) {
    state_->fused_attention->backward(*state_->arena, dq, dk, dv, dout, q, k, v, out, lse,
                                      {B, T, H, Hkv, hd, scores}, doc_start != nullptr);
    return;
  }
#endif
  cuda::attention_backward(*state_->gemm, *state_->arena, state_->stream, dq, dk, dv, dout, q, k, v,
                           out, lse, {B, T, H, Hkv, hd, scores}, doc_start);
}

// ---- optimizer (cuda_optimizer.cu) ----
void CudaBackend::adamw(float* master, float* m, float* v, const float* grad, bf16_t* param_bf16,
                        float* param_f32, int64_t n, const AdamWHyper& h) {
  ZT_CHECK(h.step >= 1, "adamw: step " + std::to_string(h.step) + " is not 1-based");
  launch_adamw(master, m, v, grad, param_bf16, param_f32, n, adam_constants(h), state_->stream);
}

double CudaBackend::sum_squares(const float* x, int64_t n) {
  const ArenaScope scope(*state_->arena);
  double* scratch =
      state_->arena->allocate<double>(ScratchCategory::kReduction, kSumSquaresBlocks + 1);
  launch_sum_squares(scratch + kSumSquaresBlocks, scratch, x, n, state_->stream);
  ZT_CUDA_CHECK(cudaMemcpyAsync(state_->sum_result_host, scratch + kSumSquaresBlocks,
                                sizeof(double), cudaMemcpyDeviceToHost, state_->stream));
  synchronize();
  return *state_->sum_result_host;
}

void CudaBackend::sum_squares_to(double* out, const float* x, int64_t n) {
  const ArenaScope scope(*state_->arena);
  double* partials =
      state_->arena->allocate<double>(ScratchCategory::kReduction, kSumSquaresBlocks);
  launch_sum_squares(out, partials, x, n, state_->stream);
}

void CudaBackend::sum_squares_each(const std::vector<SquaresSum>& sums) {
  for (size_t first = 0; first < sums.size(); first += kSumSquaresBatch) {
    const ArenaScope scope(*state_->arena);
    SquaresSumBatch batch;
    for (size_t i = first; i < sums.size() && batch.count < kSumSquaresBatch; ++i, ++batch.count) {
      batch.x[batch.count] = sums[i].x;
      batch.n[batch.count] = sums[i].n;
      batch.out[batch.count] = sums[i].out;
    }
    double* partials = state_->arena->allocate<double>(
        ScratchCategory::kReduction, static_cast<size_t>(batch.count) * kSumSquaresBlocks);
    launch_sum_squares_batch(batch, partials, state_->stream);
  }
}

void CudaBackend::block_sum_squares(double* out, const float* x, int64_t n, int64_t block) {
  launch_block_sum_squares(out, x, n, block, state_->stream);
}

DeviceMemory& CudaBackend::device_memory() {
  return *state_->memory;
}

CudaDeviceMemory& CudaBackend::cuda_memory() {
  return *state_->memory;
}

}  // namespace cuda
}  // namespace zt
