// CPU backend: fp32 arithmetic on fp32 or bf16 storage (cpu_staging.h), OpenMP over independent
// rows / heads / column blocks, OpenBLAS for the linear layers. Determinism: every output element
// (or fixed-size block of a reduction) is produced by exactly one thread in a fixed summation
// order, so results are bitwise identical on every call and for any OMP_NUM_THREADS.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace zt::cpu {

// cos(t·θ_i) and sin(t·θ_i) for t < T, i < r/2 (r = rope.rotated(hd)), rounded exactly as Hugging
// Face's LlamaRotaryEmbedding computes them in fp32 (see make_rope_table).
struct RopeTable {
  int64_t max_positions = 0;
  int64_t head_dim = 0;
  RopeSpec rope;
  std::vector<float> cos;  // [max_positions, rope.rotated(head_dim)/2]
  std::vector<float> sin;
};
std::shared_ptr<const RopeTable> make_rope_table(int64_t max_positions, int64_t head_dim,
                                                 const RopeSpec& rope);

// OpenBLAS's thread count is process-wide: sgemm sets it to 1 (its own OpenMP loop over fixed
// tiles is the parallelism). A caller that runs sgemm inside an OpenMP parallel region calls this
// first, outside the region.
void use_single_threaded_blas();

// C[rows, cols] = alpha · op(A) · op(B) + beta · C, row-major with explicit leading dimensions
// (cblas_sgemm over fixed tiles of C, so every element's rounding is a function of the shape
// alone, not of the thread count); `inner` is the contracted dimension. rows or cols of 0 do
// nothing; inner = 0 scales C by beta.
void sgemm(bool transpose_a, bool transpose_b, int64_t rows, int64_t cols, int64_t inner,
           float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
           float* c, int64_t ldc);

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  void matmul_forward(TensorView y, ConstTensorView x, ConstTensorView w, int64_t M, int64_t N,
                      int64_t K) override;
  void matmul_forward_add(TensorView y, ConstTensorView x, ConstTensorView w,
                          ConstTensorView residual, int64_t M, int64_t N, int64_t K) override;
  void matmul_backward(TensorView dx, float* dw, ConstTensorView dy, ConstTensorView x,
                       ConstTensorView w, int64_t M, int64_t N, int64_t K, bool accumulate_dx,
                       GradWrite dw_write) override;

  void bias_forward(TensorView y, ConstTensorView b, int64_t M, int64_t N) override;
  void bias_backward(float* db, ConstTensorView dy, int64_t M, int64_t N) override;

  void rmsnorm_forward(TensorView y, float* rstd, ConstTensorView x, ConstTensorView g, int64_t M,
                       int64_t D, float eps, float weight_offset = 0.0f) override;
  void rmsnorm_backward(TensorView dx, float* dg, ConstTensorView dy, ConstTensorView x,
                        ConstTensorView g, const float* rstd, int64_t M, int64_t D,
                        float weight_offset = 0.0f, GradWrite dg_write = GradWrite::kAdd) override;

  void rope_forward_after(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd,
                          const RopeSpec& rope, int64_t past) override;
  void attention_forward_after(TensorView out, float* lse, ConstTensorView q, ConstTensorView k,
                               ConstTensorView v, int64_t B, int64_t T, int64_t past, int64_t H,
                               int64_t Hkv, int64_t hd,
                               const AttentionScores& scores = {}) override;
  void rope_forward(TensorView x, int64_t B, int64_t T, int64_t H, int64_t hd, const RopeSpec& rope,
                    const int32_t* doc_start = nullptr) override;
  void rope_backward(TensorView dx, int64_t B, int64_t T, int64_t H, int64_t hd,
                     const RopeSpec& rope, const int32_t* doc_start = nullptr) override;

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
  void block_sum_squares(double* out, const float* x, int64_t n, int64_t block) override;

  void add_inplace(TensorView y, ConstTensorView x, int64_t n) override;
  void scale_inplace(TensorView y, float s, int64_t n) override;
  // DoRA (cpu_dora.cpp)
  void dora_weight_norms(float* norms, ConstTensorView w, ConstTensorView b, ConstTensorView a,
                         float s, int64_t N, int64_t r, int64_t K, DType norm_type) override;
  void dora_scale_columns(TensorView y, ConstTensorView x, ConstTensorView magnitude,
                          const float* norms, float offset, int64_t M, int64_t N,
                          bool accumulate) override;
  void dora_magnitude_grad(float* dm, ConstTensorView dy, ConstTensorView z, const float* norms,
                           int64_t M, int64_t N) override;
  void dropout_forward(TensorView y, ConstTensorView x, int64_t M, int64_t K, float p,
                       uint64_t stream, int64_t first_row) override;
  void to_bf16(bf16_t* out, const float* in, int64_t n) override;
  void from_bf16(float* out, const bf16_t* in, int64_t n) override;
  void to_fp16(uint16_t* out, const float* in, int64_t n) override;
  void from_fp16(float* out, const uint16_t* in, int64_t n) override;

 private:
  // Rotates x[B,T,H,hd] by +angle (forward) or −angle (backward, sin_sign = −1); token t is at
  // position past + t − doc_start[t].
  void rope_apply(float* x, int64_t B, int64_t T, int64_t H, int64_t hd, const RopeSpec& rope,
                  float sin_sign, const int32_t* doc_start, int64_t past = 0);
  // The cached table of (hd, rope) if it covers T, else a new one (kept for the next call). One
  // table per rotation, a few at once: Gemma 3's layers alternate two bases, and a model's layers
  // would otherwise rebuild the table at each switch.
  std::shared_ptr<const RopeTable> rope_table(int64_t T, int64_t hd, const RopeSpec& rope);

  std::mutex rope_mutex_;
  std::vector<std::shared_ptr<const RopeTable>> rope_cache_;  // most recently built last
};

}  // namespace zt::cpu
