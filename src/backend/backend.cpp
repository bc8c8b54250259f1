// The Backend base class's unbatched defaults (linear layers of one input), its fp16
// conversions and the 16-bit dispatch (backend/backend.h).
#include "backend/backend.h"

#include "util/error.h"

namespace zt {

void Backend::matmul_forward_batch(const TensorView* ys, ConstTensorView x,
                                   const ConstTensorView* ws, int64_t count, int64_t M, int64_t N,
                                   int64_t K) {
  for (int64_t i = 0; i < count; ++i) matmul_forward(ys[i], x, ws[i], M, N, K);
}

void Backend::matmul_weight_grad_batch(float* const* dws, const ConstTensorView* dys,
                                       ConstTensorView x, int64_t count, int64_t M, int64_t N,
                                       int64_t K, GradWrite write) {
  for (int64_t i = 0; i < count; ++i)
    if (dws[i])
      matmul_backward(TensorView(), dws[i], dys[i], x, ConstTensorView(), M, N, K, false, write);
}

void Backend::to_fp16(uint16_t*, const float*, int64_t) {
  fail("the " + name() + " backend does not store fp16 (the CPU and CUDA backends do)");
}

void Backend::from_fp16(float*, const uint16_t*, int64_t) {
  fail("the " + name() + " backend does not store fp16 (the CPU and CUDA backends do)");
}

void Backend::rope_forward_qk(TensorView q, TensorView k, int64_t B, int64_t T, int64_t H,
                              int64_t Hkv, int64_t hd, const RopeSpec& rope,
                              const int32_t* doc_start) {
  rope_forward(q, B, T, H, hd, rope, doc_start);
  rope_forward(k, B, T, Hkv, hd, rope, doc_start);
}

void Backend::rope_backward_qk(TensorView dq, TensorView dk, int64_t B, int64_t T, int64_t H,
                               int64_t Hkv, int64_t hd, const RopeSpec& rope,
                               const int32_t* doc_start) {
  rope_backward(dq, B, T, H, hd, rope, doc_start);
  rope_backward(dk, B, T, Hkv, hd, rope, doc_start);
}

void Backend::rope_forward_after(TensorView, int64_t, int64_t, int64_t, int64_t, const RopeSpec&,
                                 int64_t) {
  fail("the " + name() + " backend has no incremental decoding (generate runs on the CPU backend)");
}

void Backend::attention_forward_after(TensorView, float*, ConstTensorView, ConstTensorView,
                                      ConstTensorView, int64_t, int64_t, int64_t, int64_t, int64_t,
                                      int64_t, const AttentionScores&) {
  fail("the " + name() + " backend has no incremental decoding (generate runs on the CPU backend)");
}

std::unique_ptr<KernelProfiler> Backend::make_kernel_profiler() {
  fail("--profile-steps: the " + name() +
       " backend has no kernel profiler (it records CUDA kernels through CUPTI: use --backend "
       "cuda, on a build that found CUPTI)");
}

std::unique_ptr<CapturedWork> Backend::capture(const std::function<void()>& /*work*/,
                                               std::string& why_not) {
  why_not = "the " + name() + " backend records no device work (CUDA graphs need --backend cuda)";
  return nullptr;
}

void Backend::round_to_16bit(DType dtype, uint16_t* out, const float* in, int64_t n) {
  ZT_CHECK(dtype == DType::kBf16 || dtype == DType::kFloat16,
           std::string("round_to_16bit: not a 16-bit float type: ") + dtype_name(dtype));
  if (dtype == DType::kBf16)
    to_bf16(out, in, n);
  else
    to_fp16(out, in, n);
}

void Backend::widen_from_16bit(DType dtype, float* out, const uint16_t* in, int64_t n) {
  ZT_CHECK(dtype == DType::kBf16 || dtype == DType::kFloat16,
           std::string("widen_from_16bit: not a 16-bit float type: ") + dtype_name(dtype));
  if (dtype == DType::kBf16)
    from_bf16(out, in, n);
  else
    from_fp16(out, in, n);
}

}  // namespace zt
