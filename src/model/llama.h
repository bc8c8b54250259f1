// Llama decoder forward and backward over one micro-batch [B, T], in terms of Backend ops.
// The model knows nothing of ranks: the engine hands it each parameter group's flat fp32 buffer
// (embedding, layer 0..L-1, head) just before it is used, in the static order
//   forward:  embed, layer 0, ..., layer L-1, head
//   backward: head, layer L-1, ..., layer 0, embed
// and receives that group's gradients (+=) right after its backward, so it can reduce or
// release them. All activations live in one arena sized up front (ActivationPlan).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/layout.h"
#include "util/memory.h"

namespace zt {

// Activation checkpointing: a checkpointed layer keeps only its input (the residual stream) and
// is recomputed during backward. every = 0: none; every = 1: full; every = K: layers l % K == 0.
// on_host: the kept inputs of checkpointed layers go to the host pool (cpu_checkpointing).
struct ActivationCheckpointing {
  int every = 0;
  bool on_host = false;
  bool is_checkpointed(int64_t layer) const { return every > 0 && layer % every == 0; }
};

// The head computes logits in chunks of rows, never all [B·T, V] at once: at most
// kHeadChunkElements floats of logits (64 MiB) live at a time, unless V > 2^17, where a chunk is
// the floor of kHeadChunkRowMultiple rows. A chunk is a multiple of that, the CPU backend's GEMM
// row tile, so on the CPU a chunk's logits are bitwise the rows of one whole-batch product (a GPU
// GEMM may pick another algorithm for another row count; the chunking is fixed per run anyway). The
// rows per chunk depend only on (B·T, V), so every rank, stage and world size chunks alike.
constexpr int64_t kHeadChunkElements = int64_t{1} << 24;
constexpr int64_t kHeadChunkRowMultiple = 128;
// min(rows, max(kHeadChunkRowMultiple, kHeadChunkElements / V rounded down to that multiple)).
int64_t head_rows_per_chunk(int64_t rows, int64_t vocab);

// Element counts of the activation arena; used by the model and by the estimator.
struct ActivationPlan {
  int64_t residual = 0;       // (L+1)·M·D, minus what goes to the host pool, plus ≤ 2 transits
  int64_t host_residual = 0;  // inputs of checkpointed layers when on_host
  int64_t layer_saved = 0;    // per-layer saved activations × layers kept (+1 scratch if any ckpt)
  int64_t head = 0;  // final-norm output, rstd, one chunk of logits/dlogits, per-token losses
  int64_t grad_scratch = 0;  // backward temporaries
  int64_t device_elements() const { return residual + layer_saved + head + grad_scratch; }
  // head_chunk_rows: rows of logits at a time (0: head_rows_per_chunk).
  static ActivationPlan make(const ModelConfig& c, int64_t B, int64_t T,
                             const ActivationCheckpointing& ac, int64_t head_chunk_rows = 0);
  static int64_t per_layer_saved(const ModelConfig& c, int64_t B, int64_t T);
};

// Σ of n per-token losses in double, in order: the one reduction every loss reader uses, so a
// training step's loss and an evaluation's agree bitwise.
double sum_token_losses(const float* losses, int64_t n);

class LlamaModel {
 public:
  // head_chunk_rows: rows of logits the head computes at a time (0: head_rows_per_chunk).
  LlamaModel(const ModelConfig& config, Backend& backend, MemoryTracker& memory,
             int64_t micro_batch, int64_t seq_len, ActivationCheckpointing ac = {},
             int64_t head_chunk_rows = 0);

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t micro_batch() const { return B_; }
  int64_t seq_len() const { return T_; }
  int64_t tokens_per_micro_batch() const { return B_ * T_; }

  // Inputs and targets of the next micro-batch, B·T tokens each (copied). Tokens are validated
  // against the vocabulary size.
  void set_batch(const int32_t* inputs, const int32_t* targets);

  // Runs group g's forward. For the head group it computes per-token losses and, when training,
  // the loss gradient dlogits = (softmax − onehot)·grad_scale (grad_scale = 1/global tokens):
  // kept from the forward when the head is one chunk, recomputed chunk by chunk in the backward
  // otherwise (one more head GEMM instead of all the logits in memory).
  void forward_group(int g, const float* params, bool training, float grad_scale);
  // Runs group g's backward, accumulating (+=) its parameter gradients into grads.
  void backward_group(int g, const float* params, float* grads);

  // Σ of per-token losses of the last head forward (sum_token_losses of them).
  double loss_sum() const;
  // Those per-token losses [B·T], in device memory (valid until the next head forward).
  const float* token_losses() const { return losses_; }
  // Logits [B·T, V] of the last head forward with training == false, copied to the host; only
  // when the head is one chunk (head_rows_per_chunk(B·T, V) ≥ B·T, or head_chunk_rows ≥ B·T).
  std::vector<float> logits() const;
  int64_t head_chunk_rows() const { return head_chunk_; }

 private:
  struct LayerActs {  // pointers into the arena for one layer's saved activations
    float *xn1, *rstd1, *q, *k, *v, *att, *lse, *x2, *xn2, *rstd2, *gate, *up, *h;
  };
  struct LayerParams {
    const float *input_norm, *wq, *wk, *wv, *wo, *post_norm, *wgate, *wup, *wdown;
  };
  LayerParams layer_params(int layer, const float* group) const;
  LayerActs carve_layer(float*& cursor) const;
  // recompute: the backward's second forward of a checkpointed layer.
  void layer_forward(int layer, const float* params, bool recompute);
  void layer_backward(int layer, const float* params, float* grads);
  void embed_forward(const float* params);
  void embed_backward(float* grads);
  void head_forward(const float* params, bool training, float grad_scale);
  void head_backward(const float* params, float* grads);
  // logits of rows [r0, r0 + rows) into logits_ (one chunk).
  void head_logits(const float* head, int64_t r0, int64_t rows);
  int64_t head_chunks() const { return (M_ + head_chunk_ - 1) / head_chunk_; }
  LayerActs& acts_for(int layer);

  ModelConfig config_;
  ParamLayout layout_;
  Backend& be_;
  int64_t B_, T_, M_;
  ActivationCheckpointing ac_;
  int64_t head_chunk_;            // rows of logits at a time
  float head_grad_scale_ = 0.0f;  // of the last training head forward
  TrackedBuffer<float> arena_;
  TrackedBuffer<float> host_arena_;
  TrackedBuffer<int32_t> tokens_;      // inputs then targets, 2·M
  std::vector<float*> resid_;          // L+1 residual-stream buffers [M, D] (device)
  std::vector<float*> host_resid_;     // cpu_checkpointing: host copies of kept inputs, else null
  std::vector<LayerActs> layer_acts_;  // per layer; checkpointed layers share the scratch slot
  LayerActs scratch_acts_{};
  float *final_norm_out_ = nullptr, *final_rstd_ = nullptr, *logits_ = nullptr, *losses_ = nullptr;
  // backward temporaries
  float *dresid_ = nullptr, *dxn_ = nullptr, *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr,
        *datt_ = nullptr, *dgate_ = nullptr, *dup_ = nullptr, *dh_ = nullptr;
};

}  // namespace zt
