// Backend: the math a Llama layer needs, forward and backward side by side. The model calls only
// these; a backend knows nothing of layers or ranks. All tensors are row-major and contiguous.
// The CPU backend computes with OpenMP + OpenBLAS, the CUDA backend with its kernels and cuBLASLt
// GEMMs (bf16 tensor cores by default).
//
// Storage types (docs/ARCHITECTURE.md §2, "Activation storage"): activations, their gradients and
// working parameters are passed as views (util/tensor_view.h) stored in fp32 or bf16; statistics
// (rstd, lse, per-token losses), parameter gradients and optimizer state are always fp32 pointers.
// Every op reads its inputs widened to fp32, computes in fp32 and rounds each output once, to
// nearest even, when it stores it in bf16; an accumulating output (+=) is read, added to in fp32
// and rounded once. With every view fp32 nothing is rounded, as before views existed. A backend
// that cannot store a type in some op throws zt::Error naming the op and the type.
//
// Conventions: "=" overwrites the output, "+=" accumulates into it. Gradients of parameters are
// accumulated (+=) in fp32, so micro-batches add up without extra copies; the weight-gradient
// products may instead overwrite (GradWrite::kAssign), so that a micro-batch's first write needs
// no zeroed buffer. Every reduction
// is deterministic: the same inputs give bitwise-identical outputs on every call, whatever the
// number of threads. The one exception is opted into: a CUDA backend made with --deterministic
// false (CudaBackendOptions::deterministic) runs the fused attention's backward with atomics.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/attention_graph_report.h"
#include "backend/attention_scores.h"
#include "backend/gemm_tuning.h"
#include "backend/glu_activation.h"
#include "backend/kernel_profile.h"
#include "backend/phase_timeline.h"
#include "backend/rope.h"
#include "util/bf16.h"
#include "util/memory.h"
#include "util/tensor_view.h"

namespace zt {

// How a weight-gradient product meets its fp32 buffer: kAdd accumulates (dw += product), kAssign
// overwrites (dw = product; bitwise what kAdd gives on a zeroed buffer, except that an element
// whose product is −0 may stay −0 where the addition gives +0: equal values).
enum class GradWrite { kAdd, kAssign };

// One sum of squares a backend writes to device memory: *out = Σ x[i]², i < n (sum_squares_each).
struct SquaresSum {
  double* out;
  const float* x;
  int64_t n;
};

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: master -= lr * wd * master
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // gradient multiplier applied before the update (clipping)
};

// Device work recorded once and replayed (a CUDA graph of the backend's stream, --cuda-graphs):
// a replay issues the recorded ops again on the same pointers with the same scalars, whatever the
// host's state is now. Whoever replays keeps every buffer the ops touch where it was.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- linear layer: y = x · Wᵀ (nn.Linear, W is [N, K] = [out, in]) ----
  // y[M,N] = x[M,K] · w[N,K]ᵀ
  virtual void matmul_forward(TensorView y, ConstTensorView x, ConstTensorView w, int64_t M,
                              int64_t N, int64_t K) = 0;
  // dx[M,K] (= or += per accumulate_dx) dy[M,N] · w[N,K];
  // dw[N,K] (+= or = per dw_write) dy[M,N]ᵀ · x[M,K]. dx or dw may be null to skip that product.
  virtual void matmul_backward(TensorView dx, float* dw, ConstTensorView dy, ConstTensorView x,
                               ConstTensorView w, int64_t M, int64_t N, int64_t K,
                               bool accumulate_dx, GradWrite dw_write) = 0;

  // ---- linear layer onto a residual: y = residual + x · Wᵀ (the o and down projections) ----
  // y[M,N] = residual[M,N] + x[M,K]·w[N,K]ᵀ: the product summed in fp32, the widened residual
  // added in fp32, the sum rounded once (with fp32 storage: bitwise matmul_forward then
  // add_inplace). y must not alias residual. The CUDA backend runs it as one cuBLASLt GEMM with
  // β = 1 (the residual as C, y as D), so the add costs no pass of its own.
  virtual void matmul_forward_add(TensorView y, ConstTensorView x, ConstTensorView w,
                                  ConstTensorView residual, int64_t M, int64_t N, int64_t K) = 0;

  // ---- several linear layers of one input and one shape (q/k/v, gate/up) ----
  // ys[i][M,N] = x[M,K] · ws[i][N,K]ᵀ for i < count, each rounded as matmul_forward rounds it.
  // The base class calls matmul_forward for each (so the CPU backend's results are bitwise the
  // unbatched ones). A device backend may issue them as one batched GEMM (the CUDA backend does
  // when the weights and the outputs are evenly spaced: backend/gemm_batch.h), whose algorithm
  // may sum in another order than a single GEMM's: equal within the GEMM tolerance, not bitwise,
  // and the same bits on every run.
  // (Arrays and a count, not std::span: nvcc compiles the CUDA sources as C++17.)
  virtual void matmul_forward_batch(const TensorView* ys, ConstTensorView x,
                                    const ConstTensorView* ws, int64_t count, int64_t M, int64_t N,
                                    int64_t K);
  // dws[i][N,K] (+= or = per write) dys[i][M,N]ᵀ · x[M,K] (fp32) for i < count whose dws[i] is
  // not null (a frozen weight): matmul_backward's dw product, batched like matmul_forward_batch.
  virtual void matmul_weight_grad_batch(float* const* dws, const ConstTensorView* dys,
                                        ConstTensorView x, int64_t count, int64_t M, int64_t N,
                                        int64_t K, GradWrite write);

  // ---- bias of a linear layer: y = x · Wᵀ + b (q/k/v/o biases of Qwen2 and attention_bias) ----
  // y[M,N] += b[N], read and added in fp32, rounded once (after matmul_forward's own rounding).
  virtual void bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N) = 0;
  // db[N] += Σ_m dy[m,n]: each column summed in double in a fixed order, added once.
  virtual void bias_backward(float* db, ConstTensorView dy, int64_t M, int64_t N) = 0;

  // ---- dropout (LoRA's, on an adapter's input; backend/dropout_hash.h) ----
  // y[i,j] = x[i,j]·(1/(1−p)) where element (first_row + i)·K + j of `stream` is kept
  // (dropout_uniform >= p), else 0; read widened, rounded once. y may be x.
  virtual void dropout_forward(TensorView y, ConstTensorView x, int64_t M, int64_t K, float p,
                               uint64_t stream, int64_t first_row) = 0;

  // ---- DoRA (PEFT's use_dora; model/llama_lora.cpp) ----
  // norms[n] = ‖w[n,:] + s·(b[n,:]·a)‖₂ for n < N (w [N,K], b [N,r], a [r,K]): each row of the
  // adapted weight, its elements formed in fp32 as PEFT forms W + s·(B·A) on an fp32 model,
  // their squares summed in double, the norm rounded to norm_type (the magnitude's storage type, as
  // PEFT rounds it to the weight's dtype: a 16-bit magnitude that starts at its base row's norm
  // then divides by exactly that value).
  virtual void dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b,
                                 ConstTensorView a, float s, int64_t N, int64_t r, int64_t K,
                                 DType norm_type) = 0;
  // y[m,n] (+= when accumulate, else =) (magnitude[n]/norms[n] + offset)·x[m,n], the factor in
  // fp32, read widened and rounded once. y must not alias x.
  virtual void dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                                  const float* norms, float offset, int64_t M, int64_t N,
                                  bool accumulate) = 0;
  // dm[n] += (Σ_m dy[m,n]·z[m,n]) / norms[n]: each column's sum in double in a fixed order,
  // rounded to fp32, then divided and added.
  virtual void dora_magnitude_grad(float* dm, ConstTensorView dy, ConstTensorView z,
                                   const float* norms, int64_t M, int64_t N) = 0;

  // ---- RMSNorm over the last dimension D of x[M,D] ----
  // rstd[m] = 1/sqrt(mean_d x² + eps);  y = x · rstd · (o + g), o = weight_offset: 0, or Gemma's
  // 1 (its norms scale by 1 + weight, the weight stored as trained).
  virtual void rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g,
                               int64_t M, int64_t D, float eps, float weight_offset = 0.0f) = 0;
  // dx[M,D] += rstd·(w·dy) − x·rstd³·mean_d(w·dy·x), w = o + g;   dg[D] += Σ_m dy·x·rstd
  // (dg_write kAssign: dg = Σ_m dy·x·rstd, whatever dg held). dx or dg may be null to skip that
  // part (dg: a frozen norm weight).
  virtual void rmsnorm_backward(TensorView dx, float* dg, ConstTensorView dy, ConstTensorView x,
                                ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                                float weight_offset = 0.0f,
                                GradWrite dg_write = GradWrite::kAdd) = 0;

  // ---- document masks (packed sequences) ----
  // doc_start[b·T + t] (int32, device memory, [B, T]) is the index in row b of the first token of
  // token t's document: 0 ≤ doc_start[t] ≤ t, and along a row it either stays or jumps to t (a
  // new document). null: the row is one document (doc_start ≡ 0), plain causal attention. The
  // ops below take it last; with null they compute exactly what they computed without it.

  // The host copy of the doc_start that the micro-batch's rope and attention calls will get (null:
  // none), given once per micro-batch before them. A backend whose kernels take the documents in
  // another form (the fused CUDA attention: ragged sequences, backend/attention_choice.h) derives
  // it here, and may refuse a doc_start that breaks the contract above (a zt::Error naming the
  // entry); the others ignore it.
  virtual void set_document_layout(const int32_t* host_doc_start, int64_t B, int64_t T) {
    (void)host_doc_start, (void)B, (void)T;
  }

  // ---- rotary position embedding, HF rotate-half convention, in place ----
  // x is [B, T, H, hd]; position of token t is p = t − doc_start[t] (t without document masks).
  // With c=a·cos(p·θ_i), s=a·sin(p·θ_i), θ_i = rope_inv_freq(rope, hd)_i (theta^(−2i/r), scaled;
  // backend/rope.h; a: longrope's attention factor, else 1), i < r/2, r = rope.rotated(hd):
  // x1' = x1·c − x2·s,  x2' = x2·c + x1·s  (x1 = x[:r/2], x2 = x[r/2:r]; x[r:] unchanged).
  virtual void rope_forward(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd,
                            const RopeSpec& rope, const int32_t* doc_start = nullptr) = 0;
  // The transpose (the inverse where a = 1) applied to the gradient, in place.
  virtual void rope_backward(TensorView dx, int64_t B, int64_t T, int64_t H, int64_t hd,
                             const RopeSpec& rope, const int32_t* doc_start = nullptr) = 0;
  // rope_forward (rope_backward) of a layer's q [B, T, H, hd] and k [B, T, Hkv, hd] with the same
  // rotation: by default the two calls; a backend may do both in one pass (the CUDA backend: one
  // launch instead of two), with the bits of the two calls.
  virtual void rope_forward_qk(TensorView q, TensorView k, int64_t B, int64_t T, int64_t H,
                               int64_t Hkv, int64_t hd, const RopeSpec& rope,
                               const int32_t* doc_start);
  virtual void rope_backward_qk(TensorView dq, TensorView dk, int64_t B, int64_t T, int64_t H,
                                int64_t Hkv, int64_t hd, const RopeSpec& rope,
                                const int32_t* doc_start);

  // ---- causal attention with grouped-query heads, block-causal with document masks ----
  // q[B,T,H,hd], k/v[B,T,Hkv,hd], out[B,T,H,hd]; head h uses kv head h/(H/Hkv). Query i sees the
  // keys j with doc_start[i] ≤ j ≤ i (j ≤ i without document masks):
  // out = softmax(s + mask)·v, softmax in fp32; lse[B,H,T] = log Σ exp(s), with the scores
  // s = q·kᵀ·scale, soft-capped where `scores` says (s ← c·tanh(s/c); attention_scores.h).
  virtual void attention_forward(TensorView out, float* lse, ConstTensorView q, ConstTensorView k,
                                 ConstTensorView v, int64_t B, int64_t T, int64_t H, int64_t Hkv,
                                 int64_t hd, const int32_t* doc_start = nullptr,
                                 const AttentionScores& scores = {}) = 0;
  // dq (=), dk (=), dv (=) from dout, recomputing probabilities from q, k and lse; a capped
  // score's gradient is multiplied by 1 − (s/c)².
  virtual void attention_backward(TensorView dq, TensorView dk, TensorView dv, ConstTensorView dout,
                                  ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                  ConstTensorView out, const float* lse, int64_t B, int64_t T,
                                  int64_t H, int64_t Hkv, int64_t hd,
                                  const int32_t* doc_start = nullptr,
                                  const AttentionScores& scores = {}) = 0;

  // ---- incremental decoding: new rows after cached ones (generate's key/value cache) ----
  // The CPU backend has them; others refuse (generate runs on the CPU).
  // rope_forward of x [B, T, H, hd] whose token t is at position past + t (no document masks).
  virtual void rope_forward_after(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd,
                                  const RopeSpec& rope, int64_t past);
  // attention_forward of T query rows q [B,T,H,hd] at positions past..past+T−1 over keys and
  // values k/v [B, past+T, Hkv, hd] (the cached rows, then the new ones): query i sees keys
  // j ≤ past + i. out [B,T,H,hd], lse [B,H,T]. With past = 0 it is attention_forward.
  virtual void attention_forward_after(TensorView out, float* lse, ConstTensorView q,
                                       ConstTensorView k, ConstTensorView v, int64_t B, int64_t T,
                                       int64_t past, int64_t H, int64_t Hkv, int64_t hd,
                                       const AttentionScores& scores = {});

  // ---- gated MLP activation, elementwise over n: h = act(gate) · up ----
  // kSilu (SwiGLU): act(a) = silu(a) = a·σ(a). kGeluTanh (Gemma's GeGLU, PyTorch's
  // gelu(approximate="tanh")): act(a) = a/2 · (1 + tanh(k·(a + 0.044715·a³))), k = sqrt(2/π).
  virtual void glu_forward(TensorView h, ConstTensorView gate, ConstTensorView up, int64_t n,
                           GluActivation act = GluActivation::kSilu) = 0;
  // dgate = dh·up·act'(a),  dup = dh·act(a)   (both =); silu'(a) = σ(a)·(1 + a·(1−σ(a))),
  // gelu'(a) = (1 + t)/2 + a/2 · (1 − t²) · k·(1 + 3·0.044715·a²), t = tanh(k·(a + 0.044715·a³)).
  virtual void glu_backward(TensorView dgate, TensorView dup, ConstTensorView dh,
                            ConstTensorView gate, ConstTensorView up, int64_t n,
                            GluActivation act = GluActivation::kSilu) = 0;

  // ---- token embedding: x[n,D] = table[tokens[n]] ----
  virtual void embedding_forward(TensorView x, const int32_t* tokens, ConstTensorView table,
                                 int64_t n, int64_t D) = 0;
  // dtable[v] += Σ_{i: tokens[i]=v} dx[i]: each row's sum formed first (from zero, positions in
  // order) and added once, so a call contributes one float per element of dtable. A negative id
  // adds nothing (the padding token, model/config.h).
  virtual void embedding_backward(float* dtable, ConstTensorView dx, const int32_t* tokens,
                                  int64_t n, int64_t D) = 0;

  // ---- fused softmax + cross-entropy over logits[M,V] ----
  // losses[m] = logsumexp(logits[m]) − logits[m, targets[m]] (natural log).
  // If dlogits is not null: dlogits[m] = (softmax(logits[m]) − onehot(targets[m])) · grad_scale.
  // dlogits may alias logits (computed in place, same storage type). A target kIgnoredTarget
  // (util/ignored_target.h) gives losses[m] = 0 and a zero dlogits row. softcap c > 0: the logits
  // are soft-capped ones, s = c·tanh(z/c) (softcap_inplace), and dlogits is the gradient with
  // respect to the raw z: each element times 1 − (s/c)². grad_scale_factor, where given: one
  // float in device memory that multiplies grad_scale (grad_scale·factor, rounded once), read
  // when the op runs, so that a replayed recording (capture) reads the value of its replay.
  virtual void cross_entropy(float* losses, TensorView dlogits, ConstTensorView logits,
                             const int32_t* targets, int64_t M, int64_t V, float grad_scale,
                             float softcap = 0.0f, const float* grad_scale_factor = nullptr) = 0;
  // y = c·tanh(y/c) elementwise, in place, read widened and rounded once (Gemma 2's
  // final_logit_softcapping on the logits).
  virtual void softcap_inplace(TensorView y, float c, int64_t n) = 0;

  // ---- optimizer ----
  // AdamW on fp32 master weights, n elements:
  //   g = grad·grad_scale; m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²
  //   master -= lr·(m/(1−β1^t)) / (sqrt(v/(1−β2^t)) + eps) + lr·wd·master
  // then writes the new master rounded to bf16 into param_bf16 (if not null) or copied into
  // param_f32 (if not null).
  virtual void adamw(float* master, float* m, float* v, const float* grad, bf16_t* param_bf16,
                     float* param_f32, int64_t n, const AdamWHyper& h) = 0;

  // Σ x² in double, deterministic (fixed blocking independent of thread count).
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // The same sum written to *out, one double of device memory, in issue order: a device backend
  // does not wait for it (the engine reads every group's sum with one copy).
  virtual void sum_squares_to(double* out, const float* x, int64_t n) {
    const double sum = sum_squares(x, n);
    device_memory().to_device(out, &sum, sizeof(double));
  }
  // sum_squares_to of each of `sums`, in issue order: by default one after another; a device
  // backend may enqueue them together (the CUDA backend: two launches for up to 64 sums instead
  // of two each), with the same bits.
  virtual void sum_squares_each(const std::vector<SquaresSum>& sums) {
    for (const SquaresSum& s : sums) sum_squares_to(s.out, s.x, s.n);
  }
  // Σ x² of each fixed block, in double: out[b] = Σ x_i² over i ∈ [b·block, min(n, (b+1)·block)),
  // one device double per block, in issue order. A block's sum depends on its elements only, not
  // on where the block sits in x: world-invariant gradient norms (docs/ARCHITECTURE.md §4) sum
  // blocks of the global flat index wherever the shard boundaries fall.
  virtual void block_sum_squares(double* out, const float* x, int64_t n, int64_t block) {
    for (int64_t b = 0; b * block < n; ++b)
      sum_squares_to(out + b, x + b * block, std::min(block, n - b * block));
  }

  // ---- elementwise helpers ----
  virtual void add_inplace(TensorView y, ConstTensorView x, int64_t n) = 0;  // y += x
  // y *= s, read widened and rounded once (fp32 gradients, LoRA's scaled products).
  virtual void scale_inplace(TensorView y, float s, int64_t n) = 0;
  // y = 0
  virtual void zero(TensorView y, int64_t n) { device_memory().zero(y.data, view_bytes(y, n)); }

  // ---- memory ----
  // Where every tensor pointer above lives (host memory for the CPU backend). Copies through it
  // are ordered with this backend's ops.
  virtual DeviceMemory& device_memory() { return host_device_memory(); }
  // Waits for every op issued so far (a device backend's queue; nothing to wait for on the CPU).
  virtual void synchronize() {}
  // Device scratch the backend holds for its own ops, outside every MemCategory: a GPU backend's
  // GEMM workspace, attention and reduction arenas and a library's workspace (small tables such
  // as RoPE's and the libraries' own handles are not counted). 0 on the CPU.
  virtual int64_t scratch_bytes() const { return 0; }
  // Records the device work `work` issues instead of running it, for replay. Null, with the
  // reason in `why_not`, where this backend cannot (the CPU backend), or where `work` did
  // something a recording cannot hold (a host wait, an allocation, a copy from pageable memory):
  // then none of its device work ran (its host code may have, up to where it failed), and the
  // caller runs it again.
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& work,
                                                std::string& why_not);
  // How many times this process moved or freed a buffer of a backend's own that its ops read or
  // write (a workspace, a table): captured work made before the count changed may point at
  // memory that is gone, and must be dropped. 0 where nothing is ever captured.
  virtual uint64_t own_buffers_moved() const { return 0; }
  // Marks in this backend's issue order, timed as the device passes them (host clock here).
  virtual PhaseTimeline& timeline() { return host_timeline_; }
  // A recorder of this backend's device activity (`train --profile-steps`); throws zt::Error
  // saying why where there is none (the CPU backend; a CUDA build without CUPTI).
  virtual std::unique_ptr<KernelProfiler> make_kernel_profiler();
  // --gemm-algorithms timed (backend/gemm_tuning.h): the tally of the GEMM shapes so far; none
  // where the backend has no GEMM algorithms to choose from or was not asked to time them.
  virtual std::optional<GemmTuningReport> gemm_tuning_report() const { return std::nullopt; }
  // The fused attention's graphs so far (their count, build seconds and workspace); none where
  // the backend runs no fused attention.
  virtual std::optional<AttentionGraphReport> attention_graph_report() const {
    return std::nullopt;
  }
  virtual void to_bf16(bf16_t* out, const float* in, int64_t n) = 0;  // round to nearest even
  virtual void from_bf16(float* out, const bf16_t* in, int64_t n) = 0;
  // IEEE fp16 (--precision fp16): round to nearest even, ±inf beyond 65504 (util/bf16.h's
  // float_to_fp16), and the exact widening back. A backend without fp16 storage throws.
  virtual void to_fp16(uint16_t* out, const float* in, int64_t n);
  virtual void from_fp16(float* out, const uint16_t* in, int64_t n);
  // The two above, or their bf16 twins, by `dtype` (kBf16 or kFloat16).
  void round_to_16bit(DType dtype, uint16_t* out, const float* in, int64_t n);
  void widen_from_16bit(DType dtype, float* out, const uint16_t* in, int64_t n);

 private:
  HostClockTimeline host_timeline_;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace zt
