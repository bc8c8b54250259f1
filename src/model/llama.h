// Llama decoder forward and backward over one micro-batch [B, T], in terms of Backend ops.
// The model knows nothing of ranks: the engine hands it each parameter group's flat fp32 buffer
// (embedding, layer 0..L-1, head) just before it is used, in the static order
//   forward:  embed, layer 0, ..., layer L-1, head
//   backward: head, layer L-1, ..., layer 0, embed
// and receives that group's gradients (+=) right after its backward, so it can reduce or
// release them. All activations live in one arena sized up front (ActivationPlan).
//
// Activation storage (docs/ARCHITECTURE.md §2): the activations, their gradients and the logits
// are stored in the model's activation type, fp32 or bf16; the softmax and norm statistics (lse,
// rstd) and the per-token losses are always fp32. With bf16 every op rounds its output once
// (backend.h), so bf16 storage halves the arena; the math is that of a model whose activations are
// bf16 tensors and whose ops compute in fp32 and round where backend.h says (the oracle test's
// reference is written to those rounding points; PyTorch autograd rounds some gradients more).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "util/memory.h"
#include "util/tensor_view.h"

namespace zt {

// Activation checkpointing: a checkpointed layer keeps only its input (the residual stream) and
// is recomputed during backward. every = 0: none; every = 1: full; every = K: layers l % K == 0.
// on_host: the kept inputs of checkpointed layers go to the host pool (cpu_checkpointing).
// selective (with every = 0): every layer keeps its GEMM and attention outputs and recomputes
// only the cheap ops between them in its backward — the two RMSNorm outputs and the SwiGLU
// product, whose storage one scratch shares across layers (torchtitan's per-op policy).
// forward_only (eval; with no other policy): no backward will run, so nothing is kept
// for one: the residual stream lives in two buffers used in turn, every layer's activations in
// the one scratch, and no backward temporary is carved (LoRA's product buffer, which the forward
// writes, stays); a training forward and a backward are refused. The forward runs the same ops on
// the same inputs as a model that keeps everything.
struct ActivationCheckpointing {
  int every = 0;
  bool on_host = false;
  bool selective = false;
  bool forward_only = false;
  bool is_checkpointed(int64_t layer) const { return every > 0 && layer % every == 0; }
  bool any() const { return every > 0 || selective; }
};

// The head computes logits in chunks of rows, never all [B·T, V] at once. A chunk is
// kHeadChunkTargetRows rows where its logits take between kHeadChunkMinElements and
// kHeadChunkMaxElements values; more rows where fewer than the minimum would (small vocabularies),
// fewer where more than the maximum would (past V = 2^18), never fewer than
// kHeadChunkRowMultiple. Why that many rows: each chunk's weight gradient, dWh += dlogits_Rᵀ·xf_R,
// reads and writes all of the fp32 dWh (8·V·D bytes) for 2·R·V·D flops, R/4 flops a byte, which
// keeps a GPU's bf16 GEMM busy from R ≈ 1024 on (the ridge of an H100 or H200 is ≈ 200–300 flops
// a byte). Chunks of 128 rows at Llama-3's V = 128256 moved 64 times dWh per 8192 rows
// (≈ 270 GB at D = 4096). A chunk is a multiple of kHeadChunkRowMultiple, the CPU backend's GEMM
// row tile, so on the CPU a chunk's logits are bitwise the rows of one whole-batch product (a GPU
// GEMM may pick another algorithm for another row count; the chunking is fixed per run anyway). The
// rows per chunk depend only on (B·T, V), so every rank, stage and world size chunks alike.
constexpr int64_t kHeadChunkRowMultiple = 128;
constexpr int64_t kHeadChunkTargetRows = 1024;
constexpr int64_t kHeadChunkMinElements = int64_t{1} << 24;  // 32 MiB of bf16 logits
constexpr int64_t kHeadChunkMaxElements = int64_t{1} << 28;  // 512 MiB of bf16 logits
// min(B·T, max(kHeadChunkRowMultiple, E / V rounded down to that multiple)), where
// E = kHeadChunkTargetRows·V clamped to [kHeadChunkMinElements, kHeadChunkMaxElements].
int64_t head_rows_per_chunk(int64_t rows, int64_t vocab);

// Every tensor of the activation arena starts on this many bytes (a GPU's widest vector load).
constexpr int64_t kActivationAlignment = 256;

// Bytes of the activation arena, by what they hold; used by the model and by the estimator. Each
// tensor is rounded up to kActivationAlignment, exactly as the model carves the arena.
struct ActivationPlan {
  int64_t residual = 0;       // (L+1)·M·D, minus what goes to the host pool, plus ≤ 2 transits
                              // (forward_only: 2·M·D)
  int64_t host_residual = 0;  // inputs of checkpointed layers when on_host
  int64_t layer_saved = 0;    // per-layer saved activations × layers kept, + scratch if any ckpt
  int64_t head = 0;  // final-norm output, rstd, one chunk of logits/dlogits, per-token losses
  int64_t grad_scratch = 0;  // backward temporaries (forward_only: LoRA's product alone)
  int64_t token_bytes = 0;   // outside the arena: int32 inputs, targets, document starts and
                             // the embedding gradient's ids, and the loss gradient's scale
  int64_t device_bytes() const { return residual + layer_saved + head + grad_scratch; }
  // head_chunk_rows: rows of logits at a time (0: head_rows_per_chunk); storage: kFloat32 or
  // kBf16, the type of every activation except the statistics.
  static ActivationPlan make(const ModelConfig& c, int64_t B, int64_t T,
                             const ActivationCheckpointing& ac, int64_t head_chunk_rows = 0,
                             DType storage = DType::kFloat32);
};

// Σ of n per-token losses in double, in order: the one reduction every loss reader uses, so a
// training step's loss and an evaluation's agree bitwise.
double sum_token_losses(const float* losses, int64_t n);

// Where each activation of a micro-batch lives: carve_activation_arena lays them out, the model
// uses them and ActivationPlan::make counts them (the same function, so plan and arena agree).
struct ActivationTensors {
  std::vector<TensorView> resid;         // L+1 residual-stream buffers [M, D] (device; with
                                         // forward_only two, in turn)
  std::vector<TensorView> host_resid;    // cpu_checkpointing: host copies of kept inputs, else null
  std::vector<LayerActivations> layers;  // per layer; checkpointed layers share `scratch`
  LayerActivations scratch;
  TensorView final_norm_out, logits;  // logits: one chunk of rows
  float *final_rstd = nullptr, *losses = nullptr;
  // backward temporaries
  TensorView dresid, dxn, dq, dk, dv, datt, dgate, dup, dh;
  // LoRA: an adapter's product u·Bᵀ [M, out] before it is added, ∂L/∂(x·Aᵀ) [M, r], and with
  // dropout the dropped input [M, in] (also ∂L/∂ of it in the backward).
  TensorView lora_product, lora_du, lora_dropped;
  // DoRA: the product d(x)·Wᵀ of an adapter's outputs [M, out], the outputs' (m/n − 1)·dy in the
  // backward; and the adapted weight's row norms [out].
  TensorView dora_base;
  float* dora_norms = nullptr;
};

// Lays the activations out from `device_base` and `host_base` (null: only count) and returns
// what each part takes (ActivationPlan); head_chunk_rows > 0.
ActivationPlan carve_activation_arena(const ModelConfig& c, int64_t B, int64_t T,
                                      const ActivationCheckpointing& ac, int64_t head_chunk_rows,
                                      DType storage, std::byte* device_base, std::byte* host_base,
                                      ActivationTensors& out);

// The head's weight [V, D]: lm_head in the head group, or (tied) the embedding table in the
// embedding group's parameters (its gradient accumulates there too).
ConstTensorView head_weight(const ParamLayout& layout, ConstTensorView head_group,
                            ConstTensorView embedding);

class LlamaModel {
 public:
  // head_chunk_rows: rows of logits the head computes at a time (0: head_rows_per_chunk);
  // storage: the activations' type (kFloat32 or kBf16).
  LlamaModel(const ModelConfig& config, Backend& backend, MemoryTracker& memory,
             int64_t micro_batch, int64_t seq_len, ActivationCheckpointing ac = {},
             int64_t head_chunk_rows = 0, DType storage = DType::kFloat32);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  const ActivationCheckpointing& checkpointing() const { return ac_; }
  int64_t micro_batch() const { return B_; }
  int64_t seq_len() const { return T_; }
  int64_t tokens_per_micro_batch() const { return B_ * T_; }

  // Inputs and targets of the next micro-batch, B·T tokens each (copied). Tokens are validated
  // against the vocabulary size; a target may be kIgnoredTarget (util/ignored_target.h).
  // doc_start: the micro-batch's document masks ([B, T], backend.h), or null for plain causal
  // attention and positions 0..T−1.
  void set_batch(const int32_t* inputs, const int32_t* targets, const int32_t* doc_start = nullptr);
  // The loss gradient's scale of the training forwards to come (their grad_scale) into device
  // memory, where the head's backward reads it when it runs: an upload (a host copy) when it
  // changes, none otherwise. A training head forward calls it with its grad_scale; a caller that
  // records the passes (engine/micro_batch_graphs.h) calls it before them, so that none does.
  void set_loss_gradient_scale(float grad_scale);

  // Runs group g's forward. For the head group without training it computes the per-token
  // losses. Training fuses the head's linear and cross-entropy with their backward: the forward
  // stops at the final norm and backward_group(head) computes each chunk's logits once, its
  // losses and dlogits = (softmax − onehot)·grad_scale (grad_scale = 1/global tokens), and both
  // products; the losses of a training micro-batch can be read only after that backward.
  // params: the group's working parameters, fp32 or bf16 (a view: util/tensor_view.h).
  // Tied embeddings: the head group also needs `embedding`, the embedding group's working
  // parameters (null for every other group and for an untied model).
  // LoRA: a layer's forward and backward also take its adapter group (`adapters`, the group
  // layout().adapter_group(layer)) and accumulate the adapters' gradients into `adapter_grads`
  // (null when the adapters are frozen).
  void forward_group(int g, ConstTensorView params, bool training, float grad_scale,
                     ConstTensorView embedding = {}, ConstTensorView adapters = {});
  // Runs group g's backward, accumulating (+=) its parameter gradients into grads. Tied
  // embeddings: the head's weight gradient goes (+=) into `embedding_grads`, the embedding
  // group's gradient buffer (the engine passes the same buffer to the embedding's backward).
  // A frozen tensor's gradient is never computed (set_trainable): its product is skipped and its
  // range of grads is left as it is (kAdd); grads may be null when the whole group is frozen, and
  // embedding_grads when the embedding is.
  // write = kAssign: grads (or adapter_grads) need not be zeroed: every element of the group's
  // layout range [0, numel) is overwritten with this micro-batch's gradient (a frozen tensor's
  // range and every gradient no GEMM or norm backward assigns, biases, the embedding, with zeros
  // first),
  // bitwise what kAdd leaves in a zeroed buffer but for −0 (backend.h GradWrite); the padding past
  // numel is the caller's. embedding_grads is always added to.
  void backward_group(int g, ConstTensorView params, float* grads, ConstTensorView embedding = {},
                      float* embedding_grads = nullptr, ConstTensorView adapters = {},
                      float* adapter_grads = nullptr, GradWrite write = GradWrite::kAdd);

  // LoRA dropout (backend/dropout_hash.h): the seed of the masks, and the global index of the
  // next micro-batch's first token (its position in the run's data order, the same at every
  // world size), which keys them. Training forwards drop, evaluations do not.
  void set_lora_dropout_seed(uint64_t seed) { dropout_seed_ = seed; }
  // The type the engine keeps the working parameters in (bf16, fp16 or fp32), which the views an
  // op reads may widen to fp32: DoRA's norms are rounded to it, the magnitude's type.
  void set_parameter_type(DType t) { parameter_type_ = t; }
  void set_batch_position(int64_t first_token) { first_token_ = first_token; }

  // Which tensors have gradients (PyTorch's requires_grad); every tensor by default.
  void set_trainable(TrainableSet trainable) { trainable_ = std::move(trainable); }
  const TrainableSet& trainable() const { return trainable_; }

  // Σ of per-token losses of the last head pass (sum_token_losses of them): of the forward in
  // evaluation, of the backward in training (zt::Error between a training forward and it).
  double loss_sum() const;
  // Those per-token losses [B·T], in device memory (valid until the next head pass; the same
  // condition).
  const float* token_losses() const;
  // Logits [B·T, V] of the last head forward with training == false, copied to the host; only
  // when the head is one chunk (head_rows_per_chunk(B·T, V) ≥ B·T, or head_chunk_rows ≥ B·T).
  std::vector<float> logits() const;
  int64_t head_chunk_rows() const { return head_chunk_; }
  DType activation_storage() const { return storage_; }
  // Where the activations live (device memory), for tests that inspect what a pass stored.
  const ActivationTensors& activation_tensors() const { return t_; }

 private:
  using LayerActs = LayerActivations;
  // recompute: the backward's second forward of a checkpointed layer.
  void layer_forward(int layer, ConstTensorView params, bool recompute,
                     ConstTensorView adapters = {});
  void layer_backward(int layer, ConstTensorView params, float* grads, ConstTensorView adapters,
                      float* adapter_grads, GradWrite write);
  // layer_backward's parts (model/llama.cpp).
  float* layer_grad(TensorRole r, int layer, float* grads) const;
  // Each writes its norm's gradient by `write` (kAssign: the micro-batch's only writer of it).
  ConstTensorView branch_output_backward(int layer, TensorRole role, ConstTensorView g,
                                         ConstTensorView y, const float* rstd, float* grads,
                                         GradWrite write);
  void pre_norm_backward(int layer, TensorRole role, ConstTensorView g, ConstTensorView x,
                         const float* rstd, float* grads, GradWrite write);
  void mlp_backward(int layer, const LayerWeights& P, const LayerActivations& A, float* grads,
                    ConstTensorView adapters, float* adapter_grads, GradWrite write);
  // RoPE's backward on t_.dq and t_.dk, where the layer rotated them (not SmolLM3's NoPE layers).
  void rope_backward_qk(int layer, const int32_t* doc_start);
  // kAssign's first half: zeros in group g's gradient ranges that no weight-gradient GEMM or norm
  // backward of its backward assigns (gradients of other ops, frozen tensors, gaps).
  void zero_unassigned_grads(int g, float* grads);
  // LoRA on one projection y = x·Wᵀ of `layer` (model/llama_lora.cpp); nothing when `target` has
  // no adapter. Forward: y += s·(x·Aᵀ)·Bᵀ. Backward: dB += dyᵀ·u, dA += duᵀ·x, dx += du·A.
  // A fused target's outputs (ys, dys) are its parts', in order (q, k, v; gate, up).
  // With DoRA the outputs are rescaled (llama_lora.cpp), which reads the base weights P.
  void lora_forward(int layer, LoraTarget target, std::initializer_list<TensorView> ys,
                    ConstTensorView x, ConstTensorView adapters, const LayerWeights& P);
  void lora_backward(int layer, LoraTarget target, TensorView dx,
                     std::initializer_list<ConstTensorView> dys, ConstTensorView x,
                     ConstTensorView adapters, float* adapter_grads, GradWrite write,
                     const LayerWeights& P);
  // An adapter's tensors in the layout (a = null: none), its rank, input width and scale.
  struct AdapterTensors {
    const TensorInfo *a = nullptr, *b = nullptr;
    const TensorInfo* magnitude = nullptr;  // DoRA's, else null
    int64_t rank = 0, in = 0;
    float scale = 0;
  };
  AdapterTensors adapter_tensors(int layer, LoraTarget target) const;
  // DoRA (llama_lora.cpp): the row norms of W + s·B·A for `out` rows of B from b_row, into
  // t_.dora_norms + b_row; one output's backward (returns g⊙dy, keeps (g − 1)⊙dy in t_.dora_base,
  // adds to dm); and d(d(x)) += Σ_i ((g − 1)⊙dy_i)·W_i over the target's outputs.
  float* dora_row_norms(const AdapterTensors& t, ConstTensorView adapters, ConstTensorView w,
                        int64_t b_row, int64_t out);
  ConstTensorView dora_output_backward(const AdapterTensors& t, ConstTensorView dy,
                                       ConstTensorView xd, ConstTensorView adapters,
                                       ConstTensorView w, int64_t b_row, int64_t out, float* dm);
  void dora_base_backward(TensorView dxd, ConstTensorView x, LoraTarget target,
                          const LayerWeights& P, int64_t in);
  void embed_forward(ConstTensorView params);
  void embed_backward(float* grads);
  void head_forward(ConstTensorView params, ConstTensorView embedding, bool training,
                    float grad_scale);
  void head_backward(ConstTensorView params, float* grads, ConstTensorView embedding,
                     float* embedding_grads, GradWrite write);
  // logits of rows [r0, r0 + rows) into logits_ (one chunk).
  void head_logits(ConstTensorView head, int64_t r0, int64_t rows);
  int64_t head_chunks() const { return (M_ + head_chunk_ - 1) / head_chunk_; }
  void check_losses_written() const;
  // A layer's activations: its own, the shared scratch for a recomputed layer, or (selective)
  // its own with the recomputed tensors in the scratch.
  LayerActs acts_for(int layer) const;

  ModelConfig config_;
  ParamLayout layout_;
  Backend& be_;
  int64_t B_, T_, M_;
  ActivationCheckpointing ac_;
  int64_t head_chunk_;           // rows of logits at a time
  DType storage_;                // of the activations
  bool head_pending_ = false;    // a training head forward whose backward has not run yet
  bool head_evaluated_ = false;  // the last head pass was an evaluation (its logits are kept)
  TrackedBuffer<std::byte> arena_;
  TrackedBuffer<std::byte> host_arena_;
  // inputs, targets, document starts, then the inputs the embedding's gradient adds (the
  // padding token as -1): 4·M; then one float, the loss gradient's scale
  // (set_loss_gradient_scale), which the cross-entropy reads from there when it runs.
  TrackedBuffer<int32_t> tokens_;
  const float* loss_gradient_scale() const {
    return reinterpret_cast<const float*>(tokens_.data() + 4 * M_);
  }
  uint32_t uploaded_scale_bits_ = 0;  // the scale's bits there (valid once scale_uploaded_)
  bool scale_uploaded_ = false;
  bool document_masks_ = false;  // whether the current micro-batch has document starts
  const int32_t* document_starts() const {
    return document_masks_ ? tokens_.data() + 2 * M_ : nullptr;
  }
  ActivationTensors t_;  // every tensor of the two arenas
  TrainableSet trainable_;
  bool training_ = false;  // of the last forward: LoRA dropout applies
  uint64_t dropout_seed_ = 0;
  DType parameter_type_ = DType::kFloat32;  // set_parameter_type
  int64_t first_token_ = 0;
  // LoRA dropout: x dropped into t_.lora_dropped for `target` of `layer`; x itself without it.
  ConstTensorView lora_input(int layer, LoraTarget target, ConstTensorView x, int64_t in);
};

}  // namespace zt
