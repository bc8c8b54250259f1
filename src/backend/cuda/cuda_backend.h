// CudaBackend: the Backend interface (backend.h) on one NVIDIA GPU. Same contract as the CPU
// backend, activations and working parameters fp32 or bf16 views (cuda_storage.h), but every
// pointer is DEVICE memory (cudaMalloc); the header includes no CUDA header, so host code can
// name it under `#if ZEROTRAIN_HAVE_CUDA`.
//
// Execution model: every op is enqueued on the backend's own stream (stream_handle()) and returns
// without waiting, except sum_squares (returns a host double, so it synchronises; sum_squares_to
// leaves its sum in device memory and does not). Ops run in
// issue order; synchronize() waits for all of them. Another stream (e.g. the NCCL stream) must
// wait on an event recorded on stream_handle() before it reads an op's output.
//
// Numerics (what tests/gpu checks against the CPU backend):
//   * GEMMs (linear layers, attention QKᵀ/PV and their gradients) go through cuBLASLt with fp32
//     accumulation. fp32 operands: by default CUBLAS_COMPUTE_32F_FAST_16BF (inputs rounded to
//     bf16 for the tensor cores, ≈1e-2 relative), or exact fp32 (GemmCompute::kFp32). bf16
//     operands (--activations bf16): bf16 products, a bf16 result rounded once (cuda_gemm.h).
//   * bf16 activations: every kernel reads them widened, computes in fp32 and rounds each output
//     once (cuda_storage.cuh), the CPU backend's rounding points. Checked against the CPU on an
//     H100 (tests/gpu, bench/results/2026-11-28-h100).
//   * Reductions (RMSNorm, softmax, cross-entropy, sum_squares, rmsnorm's dg, embedding backward)
//     use fixed trees / fixed block counts and no float atomics: bitwise reproducible.
//   * RoPE uses the CPU's fp32 table (cpu::make_rope_table), embedding forward/backward add in the
//     CPU's order and AdamW evaluates cpu_adam.h's formula with the same roundings: bitwise equal
//     to the CPU backend.
//   * Fused attention (--attention fused, cudnn_attention.h): cuDNN SDPA on bf16 q/k/v (copies
//     when stored in fp32), fp32 statistics; deterministic backward, unless
//     options.deterministic is false (--deterministic false: dQ accumulated with atomics, the
//     one kernel whose bits then vary from run to run). Checked on an H100 (tests/gpu).
//   * Kernels cannot throw: an out-of-range token id gives a NaN embedding row / NaN loss and
//     NaN dlogits row, which the engine's non-finite check reports; embedding_backward skips
//     negative ids.
//
// Scratch memory: a DeviceArena (cuda_device_arena.h) with one cudaMalloc per category (cuBLASLt
// workspace, attention score matrices, reduction partials), sized once from CudaBackendOptions.
// GEMM attention processes as many heads per pass as its scratch holds (device_arena_plan.h);
// fused attention (options.attention = kFused) stages its bf16 copies (and unaligned or ragged
// statistics) there, the GEMM attention its fp32 copies of bf16 tensors (attention_staging_bytes;
// cuDNN's workspace is CudnnAttention's own).
//
// ---------------------------------------------------------------------------------------------
// The ZeRO engine on this backend (app/engine_device.cpp wires it for --backend cuda):
//  * Memory: device_memory() is a CudaDeviceMemory (cuda_device_memory.h): the engine's
//    TrackedBuffers of the device-pool categories come from one arena per category, reserved
//    from the memory estimate; host code reaches them only through its copies. The CPU suite
//    GuardedDeviceTest runs the engine on memory the host cannot read to prove that.
//  * Streams: every op, copy and memset on this backend's stream; collectives on NCCL's comm
//    stream after an event on this one (NcclCommunicator::set_producer_stream); this stream waits
//    on a collective's completion event before it uses the result (Communicator::device_wait),
//    and the host catches up once per step (finish_device_waits). train_step ends with
//    synchronize().
//  * Phase times: CUDA events on this stream (timeline()), read after the step's synchronize.
//  * Offload: pinned host pool and a copy stream (CudaDeviceMemory's *_async copies).
//  * All of it ran on one H100 (bench/results/2026-11-28-h100); NCCL across several GPUs has not
//    run on hardware yet (its tests skip themselves with one GPU).
// ---------------------------------------------------------------------------------------------
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/attention_choice.h"
#include "backend/backend.h"
#include "backend/cuda/gemm_compute.h"
#include "backend/device_arena_plan.h"

namespace zt {
namespace cuda {

class CudaDeviceMemory;  // cuda_device_memory.h
class DeviceArena;       // cuda_device_arena.h

struct CudaBackendOptions {
  GemmCompute gemm_compute = GemmCompute::kBf16TensorCores;
  // kFused: cuDNN SDPA (cudnn_attention.h), which this build must have (ZEROTRAIN_HAVE_CUDNN);
  // the app resolves --attention to it with choose_attention (attention_choice.h).
  AttentionKernel attention = AttentionKernel::kGemm;
  size_t gemm_workspace_bytes = kGemmWorkspaceBytes;  // cuBLASLt workspace
  // gemm: score/probability matrices (after fp32 copies of bf16 tensors); fused: the bf16 and
  // statistics staging (attention_scratch_bytes sizes it for a micro-batch and storage type).
  size_t attention_scratch_bytes = kAttentionScoreScratchBytes;
  size_t reduction_scratch_bytes = kReductionScratchBytes;  // rmsnorm dg / sum_squares partials
  // false (--deterministic false): kernels whose bits may vary from run to run where they are
  // faster; today the fused attention's backward (SdpaGraphKey::deterministic).
  bool deterministic = true;

  // The options of a backend that runs `kernel` on micro-batches of `shape` with activations in
  // `storage`: its attention scratch sized for them (what cuda_backend_scratch_bytes counts).
  static CudaBackendOptions for_micro_batch(AttentionKernel kernel, const AttentionShape& shape,
                                            DType storage, bool deterministic = true) {
    CudaBackendOptions options;
    options.attention = kernel;
    options.deterministic = deterministic;
    options.attention_scratch_bytes = zt::attention_scratch_bytes(
        shape, kernel, storage, options.attention_scratch_bytes, kArenaAlignment);
    return options;
  }
};

class CudaBackend final : public Backend {
 public:
  // Selects `device` (cudaSetDevice), creates the stream, cuBLASLt handle and scratch arena.
  CudaBackend(int device, const CudaBackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // "cuda:<device name, lower case>" (cmd_train derives the bf16 peak from it).
  std::string name() const override;

  void matmul_forward(TensorView y, ConstTensorView x, ConstTensorView w, int64_t M, int64_t N,
                      int64_t K) override;
  void matmul_forward_add(TensorView y, ConstTensorView x, ConstTensorView w,
                          ConstTensorView residual, int64_t M, int64_t N, int64_t K) override;
  void matmul_backward(TensorView dx, float* dw, ConstTensorView dy, ConstTensorView x,
                       ConstTensorView w, int64_t M, int64_t N, int64_t K, bool accumulate_dx,
                       GradWrite dw_write) override;
  // One strided-batched GEMM (the shared input at stride 0) where backend/gemm_batch.h allows
  // it and cuBLASLt has an algorithm; otherwise one GEMM each, as the base class does.
  void matmul_forward_batch(const TensorView* ys, ConstTensorView x, const ConstTensorView* ws,
                            int64_t count, int64_t M, int64_t N, int64_t K) override;
  void matmul_weight_grad_batch(float* const* dws, const ConstTensorView* dys, ConstTensorView x,
                                int64_t count, int64_t M, int64_t N, int64_t K,
                                GradWrite write) override;

  void rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g, int64_t M,
                       int64_t D, float eps, float weight_offset = 0.0f) override;
  void bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N) override;
  void bias_backward(float* db, ConstTensorView dy, int64_t M, int64_t N) override;
  void rmsnorm_backward(TensorView dx, float* dg, ConstTensorView dy, ConstTensorView x,
                        ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                        float weight_offset = 0.0f, GradWrite dg_write = GradWrite::kAdd) override;

  void rope_forward(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd, const RopeSpec& rope,
                    const int32_t* doc_start = nullptr) override;
  void rope_backward(TensorView dx, int64_t B, int64_t T, int64_t H, int64_t hd,
                     const RopeSpec& rope, const int32_t* doc_start = nullptr) override;
  void rope_forward_qk(TensorView q, TensorView k, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                       int64_t hd, const RopeSpec& rope, const int32_t* doc_start) override;
  void rope_backward_qk(TensorView dq, TensorView dk, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                        int64_t hd, const RopeSpec& rope, const int32_t* doc_start) override;

  void attention_forward(TensorView out, float* lse, ConstTensorView q, ConstTensorView k,
                         ConstTensorView v, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                         int64_t hd, const int32_t* doc_start = nullptr,
                         const AttentionScores& scores = {}) override;
  void attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                          ConstTensorView q, ConstTensorView k, ConstTensorView v,
                          ConstTensorView out, const float* lse, int64_t B, int64_t T, int64_t H,
                          int64_t Hkv, int64_t hd, const int32_t* doc_start = nullptr,
                          const AttentionScores& scores = {}) override;

  void glu_forward(TensorView h, ConstTensorView gate, ConstTensorView up, int64_t n,
                   GluActivation act = GluActivation::kSilu) override;
  void glu_backward(TensorView dgate, TensorView dup, ConstTensorView dh, ConstTensorView gate,
                    ConstTensorView up, int64_t n,
                    GluActivation act = GluActivation::kSilu) override;

  void embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table, int64_t n,
                         int64_t D) override;
  void embedding_backward(float* dtable, ConstTensorView dx, const int32_t* tokens, int64_t n,
                          int64_t D) override;

  void cross_entropy(float* losses, TensorView dlogits, ConstTensorView logits,
                     const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                     float softcap = 0.0f, const float* grad_scale_factor = nullptr) override;
  void softcap_inplace(TensorView y, float c, int64_t n) override;

  void adamw(float* master, float* m, float* v, const float* grad, bf16_t* param_bf16,
             float* param_f32, int64_t n, const AdamWHyper& h) override;
  double sum_squares(const float* x, int64_t n) override;
  void sum_squares_to(double* out, const float* x, int64_t n) override;  // does not wait
  void sum_squares_each(const std::vector<SquaresSum>& sums) override;   // 2 launches per 64
  void block_sum_squares(double* out, const float* x, int64_t n, int64_t block) override;

  void add_inplace(TensorView y, ConstTensorView x, int64_t n) override;
  void scale_inplace(TensorView y, float s, int64_t n) override;
  void dropout_forward(TensorView y, ConstTensorView x, int64_t M, int64_t K, float p,
                       uint64_t stream, int64_t first_row) override;
  // DoRA (cuda_backend_dora.cpp)
  void dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b, ConstTensorView a,
                         float s, int64_t N, int64_t r, int64_t K, DType norm_type) override;
  void dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                          const float* norms, float offset, int64_t M, int64_t N,
                          bool accumulate) override;
  void dora_magnitude_grad(float* dm, ConstTensorView dy, ConstTensorView z, const float* norms,
                           int64_t M, int64_t N) override;
  void zero(TensorView y, int64_t n) override;
  DeviceMemory& device_memory() override;
  // The same object, for reserving its per-category arenas before the engine allocates.
  CudaDeviceMemory& cuda_memory();
  void to_bf16(bf16_t* out, const float* in, int64_t n) override;
  void from_bf16(float* out, const bf16_t* in, int64_t n) override;
  void to_fp16(uint16_t* out, const float* in, int64_t n) override;
  void from_fp16(float* out, const uint16_t* in, int64_t n) override;

  // Waits for every op issued so far.
  void synchronize() override;
  // The arena's three regions plus cuDNN's workspace (taken by prepare_fused_attention, or at a
  // fused attention's first call without it).
  int64_t scratch_bytes() const override;
  // A CUDA graph of what `work` issues on the stream (cuda_graph_capture.h).
  std::unique_ptr<CapturedWork> capture(const std::function<void()>& work,
                                        std::string& why_not) override;
  uint64_t own_buffers_moved() const override;
  // CUDA events on the stream (cuda_event_timeline.h).
  PhaseTimeline& timeline() override;
  // CUPTI's activity records (cupti_kernel_profiler.h); refused on a build without CUPTI.
  std::unique_ptr<KernelProfiler> make_kernel_profiler() override;
  // --gemm-algorithms timed: from now on each new GEMM shape times cuBLASLt's candidates on its
  // first call (LtGemm::time_algorithms); gemm_tuning_report() then has their tally.
  void time_gemm_algorithms();
  std::optional<GemmTuningReport> gemm_tuning_report() const override;
  std::optional<AttentionGraphReport> attention_graph_report() const override;
  // The cudaStream_t every op runs on (as void*, to keep CUDA headers out of this header).
  void* stream_handle() const;
  int device() const;
  const CudaBackendOptions& options() const;
  // With the fused attention: builds its forward graph for `shape` and activations in `storage`,
  // and the backward one `backward` (training), and takes their workspace now
  // (CudnnAttention::prepare; a zt::Error when cuDNN refuses one), so that the first step finds
  // them ready. Nothing otherwise.
  // document_masks: the documents' ragged graphs (CudnnAttention::prepare).
  void prepare_fused_attention(const AttentionShape& shape, DType storage, bool backward = true,
                               bool document_masks = false);
  // With the fused attention, its documents for the micro-batch (CudnnAttention::set_documents).
  void set_document_layout(const int32_t* host_doc_start, int64_t B, int64_t T) override;

 private:
  // Device scratch of a column sum over M rows of N columns (cuda_column_sum.cuh), from the
  // arena's reduction region; valid inside the caller's ArenaScope.
  struct ColumnSumScratch {
    double* partials = nullptr;
    int64_t rows_per_chunk = 0;
  };
  ColumnSumScratch column_sum_scratch(int64_t M, int64_t N);
  // RoPE of x[B,T,H,hd] (and of x2[B,T,H2,hd] in the same launch, where given) by sin_sign·angle.
  void rotate(TensorView x, int64_t H, TensorView x2, int64_t H2, int64_t B, int64_t T, int64_t hd,
              const RopeSpec& rope, float sin_sign, const int32_t* doc_start);
  // The device scratch arena, for ops defined outside cuda_backend.cpp (cuda_backend_dora.cpp,
  // cuda_backend_pointwise.cpp).
  DeviceArena& scratch_arena();

  struct State;  // stream, cuBLASLt, arena, RoPE table (cuda_backend.cpp)
  std::unique_ptr<State> state_;
};

}  // namespace cuda

std::unique_ptr<cuda::CudaBackend> make_cuda_backend(int device,
                                                     const cuda::CudaBackendOptions& options = {});

}  // namespace zt
