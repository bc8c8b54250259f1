#include "backend/cuda/cuda_gemm.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>

#include "backend/cuda/cublaslt_api.h"
#include "backend/cuda/cuda_kernels.h"
#include "util/cuda/cuda_check.h"
#include "util/error.h"

namespace zt::cuda {

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLAS's A (our B buffer)
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLAS's B (our A buffer)
  cublasLtMatrixLayout_t layout_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  int64_t calls = 0;
  double saved_ms_per_call = 0;  // timed and replaced: the heuristic's median − the chosen's

  ~Plan() {
    if (layout_c) cublaslt().matrix_layout_destroy(layout_c);
    if (layout_b) cublaslt().matrix_layout_destroy(layout_b);
    if (layout_a) cublaslt().matrix_layout_destroy(layout_a);
    if (desc) cublaslt().matmul_desc_destroy(desc);
  }
};

namespace {

// Largest power of two ≤ 256 dividing the address of every batch entry (elements of `type`).
int64_t alignment_bytes(const void* ptr, int64_t stride_elements, int64_t batch, DType type) {
  uint64_t bits = reinterpret_cast<uintptr_t>(ptr);
  if (batch > 1) bits |= static_cast<uint64_t>(stride_elements) * dtype_size(type);
  int64_t alignment = 256;
  while (alignment > static_cast<int64_t>(dtype_size(type)) &&
         (bits & static_cast<uint64_t>(alignment - 1)) != 0)
    alignment /= 2;
  return alignment;
}

cudaDataType_t cuda_type(DType type, const std::string& what) {
  if (type == DType::kFloat32) return CUDA_R_32F;
  if (type == DType::kBf16) return CUDA_R_16BF;
  if (type == DType::kFloat16) return CUDA_R_16F;
  throw Error(what + ": element type " + dtype_name(type) + " is not float32, bfloat16 or float16");
}

cublasLtMatrixLayout_t make_layout(DType type, int64_t rows, int64_t cols, int64_t ld,
                                   int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  ZT_CUBLAS_CHECK(cublaslt().matrix_layout_create(&layout, cuda_type(type, "gemm"),
                                                  static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    try {  // the layout is not yet the plan's, which frees the others
      const int32_t count = static_cast<int32_t>(batch);
      ZT_CUBLAS_CHECK(cublaslt().matrix_layout_set_attribute(
          layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      ZT_CUBLAS_CHECK(cublaslt().matrix_layout_set_attribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    } catch (...) {
      cublaslt().matrix_layout_destroy(layout);
      throw;
    }
  }
  return layout;
}

// The algorithm preferences of one GEMM: the workspace, the operands' alignments and, for a
// 16-bit output, only split-K reductions that sum the partials in fp32.
class Preference {
 public:
  Preference(size_t workspace_bytes, int64_t align_a, int64_t align_b, int64_t align_c,
             DType c_type) {
    ZT_CUBLAS_CHECK(cublaslt().preference_create(&handle_));
    try {
      const uint64_t workspace = workspace_bytes;
      ZT_CUBLAS_CHECK(cublaslt().preference_set_attribute(
          handle_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
      const uint32_t alignments[4] = {
          static_cast<uint32_t>(align_a), static_cast<uint32_t>(align_b),
          static_cast<uint32_t>(align_c), static_cast<uint32_t>(align_c)};
      const cublasLtMatmulPreferenceAttributes_t which[4] = {
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
      for (int i = 0; i < 4; ++i) {
        ZT_CUBLAS_CHECK(cublaslt().preference_set_attribute(handle_, which[i], &alignments[i],
                                                            sizeof(alignments[i])));
      }
      if (c_type != DType::kFloat32) {
        // A split-K reduction in the output type would round a bf16 result more than once; only
        // schemes that sum the partials in fp32 keep "computed in fp32, rounded once".
        const uint32_t schemes =
            CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        ZT_CUBLAS_CHECK(cublaslt().preference_set_attribute(
            handle_, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes)));
      }
    } catch (...) {
      cublaslt().preference_destroy(handle_);
      throw;
    }
  }
  ~Preference() { cublaslt().preference_destroy(handle_); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  cublasLtMatmulPreference_t get() const { return handle_; }

 private:
  cublasLtMatmulPreference_t handle_ = nullptr;
};

// Up to `count` algorithms cuBLASLt's heuristic offers for the plan, best first; none where it
// has none. NOT_SUPPORTED: no algorithm for this problem; for a batch, INVALID_VALUE too (a
// layout cuBLASLt refuses, such as a stride it does not take), so that the caller can fall back
// to single GEMMs.
std::vector<cublasLtMatmulAlgo_t> heuristic_algorithms(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t layout_a,
    cublasLtMatrixLayout_t layout_b, cublasLtMatrixLayout_t layout_c,
    cublasLtMatmulPreference_t preference, int count, bool batched) {
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int returned = 0;
  const cublasStatus_t status =
      cublaslt().algo_get_heuristic(handle, desc, layout_a, layout_b, layout_c, layout_c,
                                    preference, count, results.data(), &returned);
  const bool refused =
      status == CUBLAS_STATUS_NOT_SUPPORTED || (batched && status == CUBLAS_STATUS_INVALID_VALUE);
  if (!refused) ZT_CUBLAS_CHECK(status);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < (refused ? 0 : returned); ++i)
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      algos.push_back(results[static_cast<size_t>(i)].algo);
  return algos;
}

// The events around each timed run: run r lies between events[r] and events[r + 1].
struct TrialEvents {
  cudaEvent_t events[kGemmTimedRuns + 1] = {};
  TrialEvents() {
    for (cudaEvent_t& e : events) {
      const cudaError_t made = cudaEventCreate(&e);
      if (made != cudaSuccess) {
        release();
        ZT_CUDA_CHECK(made);  // throws
      }
    }
  }
  ~TrialEvents() { release(); }
  TrialEvents(const TrialEvents&) = delete;
  TrialEvents& operator=(const TrialEvents&) = delete;

 private:
  void release() {
    for (cudaEvent_t& e : events) {
      if (e) cudaEventDestroy(e);
      e = nullptr;
    }
  }
};

// One candidate's trial (backend/gemm_tuning.h): `run` enqueues it on `stream` (false: cuBLASLt
// refused it), `fingerprint` waits for the stream and reads the output's fingerprint. After the
// untimed run and its fingerprint, one more untimed run keeps the device busy while the host
// queues the timed ones behind it. A GEMM shorter than the host's launch time still leaves gaps
// between the timed runs, so its intervals measure the launches; every candidate's then do, and
// none beats the heuristic's choice in every run (short GEMMs keep it).
GemmCandidateTrial run_trial(cudaStream_t stream, const TrialEvents& events,
                             const std::function<bool()>& run,
                             const std::function<GemmFingerprint()>& fingerprint) {
  GemmCandidateTrial trial;
  if (!run()) return trial;
  trial.first = fingerprint();
  if (!run()) return GemmCandidateTrial{};
  ZT_CUDA_CHECK(cudaEventRecord(events.events[0], stream));
  for (int r = 0; r < kGemmTimedRuns; ++r) {
    if (!run()) return GemmCandidateTrial{};
    ZT_CUDA_CHECK(cudaEventRecord(events.events[r + 1], stream));
  }
  ZT_CUDA_CHECK(cudaEventSynchronize(events.events[kGemmTimedRuns]));
  for (int r = 0; r < kGemmTimedRuns; ++r) {
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, events.events[r], events.events[r + 1]));
    trial.times_ms.push_back(ms);
  }
  trial.last = fingerprint();
  trial.ran = true;
  return trial;
}

// How an algorithm splits the K sum: the number of splits and how their partials are reduced.
// Candidates are tried only when they split K as the heuristic's choice does: another split is
// another summation order (docs/gpu.md, "GEMM algorithms").
struct SplitOfK {
  int32_t splits = 1;
  uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  bool operator==(const SplitOfK& other) const {
    return splits == other.splits && reduction == other.reduction;
  }
};

SplitOfK split_of_k(const cublasLtMatmulAlgo_t& algo) {
  SplitOfK split;
  size_t written = 0;
  ZT_CUBLAS_CHECK(cublaslt().algo_config_get_attribute(
      &algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split.splits, sizeof(split.splits), &written));
  ZT_CUBLAS_CHECK(cublaslt().algo_config_get_attribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                       &split.reduction, sizeof(split.reduction),
                                                       &written));
  return split;
}

std::string describe(const RowMajorGemm& g) {
  return std::string("gemm ") + (g.transpose_a ? "Aᵀ" : "A") + "·" + (g.transpose_b ? "Bᵀ" : "B") +
         " rows=" + std::to_string(g.rows) + " cols=" + std::to_string(g.cols) +
         " inner=" + std::to_string(g.inner) + " batch=" + std::to_string(g.batch) + " (" +
         dtype_name(g.a_type) + "·" + dtype_name(g.b_type) + " → " + dtype_name(g.c_type) + ")";
}

}  // namespace

LtGemm::LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes, GemmCompute compute)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes), compute_(compute) {
  ZT_CUBLAS_CHECK(cublaslt().create(&handle_));
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (fingerprint_slot_) cudaFree(fingerprint_slot_);
  if (handle_) cublaslt().destroy(handle_);
}

void LtGemm::time_algorithms() {
  if (!fingerprint_slot_)
    ZT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&fingerprint_slot_),
                             kFingerprintWords * sizeof(*fingerprint_slot_)));
  timing_ = true;
}

GemmTuningReport LtGemm::tuning_report() const {
  GemmTuningReport report = report_;
  for (const auto& [key, plan] : plans_)
    if (plan) report.saved_ms += plan->saved_ms_per_call * static_cast<double>(plan->calls);
  return report;
}

cublasStatus_t LtGemm::launch(const Plan& plan, const RowMajorGemm& g,
                              const cublasLtMatmulAlgo_t& algo) {
  const void* c_in = g.c_in != nullptr ? g.c_in : g.c;
  return cublaslt().matmul(handle_, plan.desc, &g.alpha, g.b, plan.layout_a, g.a, plan.layout_b,
                           &g.beta, c_in, plan.layout_c, g.c, plan.layout_c, &algo, workspace_,
                           workspace_bytes_, stream_);
}

GemmFingerprint LtGemm::output_fingerprint(const RowMajorGemm& g) {
  unsigned long long sums[kFingerprintWords] = {};
  ZT_CUDA_CHECK(cudaMemsetAsync(fingerprint_slot_, 0, sizeof(sums), stream_));
  // Tuned GEMMs write D from β = 0 or from C in its own buffer (c_in), the baseline.
  const void* baseline = g.beta != 0.0f ? g.c_in : nullptr;
  launch_fingerprint(fingerprint_slot_, g.c, baseline, g.c_type, g.rows, g.cols, g.ldc, g.batch,
                     g.stride_c, stream_);
  ZT_CUDA_CHECK(
      cudaMemcpyAsync(sums, fingerprint_slot_, sizeof(sums), cudaMemcpyDeviceToHost, stream_));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  GemmFingerprint out;
  out.hash = sums[0];
  out.finite_changed = sums[1];
  out.non_finite = sums[2];
  return out;
}

// --gemm-algorithms timed: the heuristic's first choice tried on g's own operands, then, when its
// output can be compared (gemm_reference_comparable), its other answers (backend/gemm_tuning.h).
// Each trial reruns g into its own output, which only a GEMM that overwrites it from buffers it
// does not write can do (β = 0, or C read from another buffer); one that accumulates into its
// output keeps the heuristic's choice, untimed. The caller
// runs g once more afterwards, with the chosen algorithm, as every later call does.
void LtGemm::tune(Plan& plan, const RowMajorGemm& g, cublasLtMatmulPreference_t preference) {
  GemmShapeTuning shape;
  const bool reruns =
      (g.beta == 0.0f || (g.c_in != nullptr && g.c_in != g.c)) && g.c != g.a && g.c != g.b;
  std::vector<cublasLtMatmulAlgo_t> algos = {plan.algo};
  int64_t other_split = 0;  // candidates that split K otherwise: another summation, not tried
  if (reruns) {
    const SplitOfK reference = split_of_k(plan.algo);
    for (const cublasLtMatmulAlgo_t& other :
         heuristic_algorithms(handle_, plan.desc, plan.layout_a, plan.layout_b, plan.layout_c,
                              preference, kTimedCandidates, g.batch > 1)) {
      if (algos.size() == static_cast<size_t>(kTimedCandidates)) break;
      if (std::memcmp(&other, &plan.algo, sizeof(other)) == 0) continue;
      if (split_of_k(other) == reference) {
        algos.push_back(other);
      } else {
        ++other_split;
      }
    }
  }
  if (!reruns || algos.size() == 1) {
    shape.outcome = reruns ? GemmTuningOutcome::kSingleCandidate : GemmTuningOutcome::kInPlace;
    shape.candidates = shape.refused_bits = other_split;
    report_.add(shape);
    return;
  }
  const TrialEvents events;
  // The heuristic's own choice must run (its failure is an error); a candidate that does not
  // (any status: cuBLASLt may refuse one with an internal error, an exhausted workspace, ...) is
  // counted as failed, and the run keeps the heuristic's, unless the failure left the device in
  // an error (a sticky one: an illegal address), which the stream's synchronisation reports here.
  const auto trial = [&](const cublasLtMatmulAlgo_t& algo, bool heuristic) {
    const auto run = [&] {  // false: cuBLASLt does not take this algorithm here
      const cublasStatus_t status = launch(plan, g, algo);
      if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)
        return false;
      if (status != CUBLAS_STATUS_SUCCESS && !heuristic) {
        ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
        ZT_CUDA_CHECK(cudaGetLastError());
        return false;
      }
      ZT_CUBLAS_CHECK(status);
      return true;
    };
    return run_trial(stream_, events, run, [&] { return output_fingerprint(g); });
  };
  const GemmOutput output{g.rows * g.cols * g.batch, g.c_type, g.beta != 0.0f};
  std::vector<GemmCandidateTrial> trials = {trial(algos[0], true)};
  if (gemm_reference_comparable(trials[0], output))
    for (size_t i = 1; i < algos.size(); ++i) trials.push_back(trial(algos[i], false));
  shape = choose_gemm_candidate(trials, output);
  if (shape.outcome == GemmTuningOutcome::kReplaced) {
    plan.algo = algos[shape.chosen];
    plan.saved_ms_per_call = shape.heuristic_ms - shape.chosen_ms;
  }
  if (shape.outcome == GemmTuningOutcome::kKept || shape.outcome == GemmTuningOutcome::kReplaced) {
    shape.candidates += other_split;
    shape.refused_bits += other_split;
  }
  report_.add(shape);
}

LtGemm::Plan* LtGemm::plan_for(const RowMajorGemm& g) {
  ZT_CHECK(g.a_type == g.b_type, describe(g) + ": A and B must have one element type");
  const int64_t align_a = alignment_bytes(g.b, g.stride_b, g.batch, g.b_type);  // cuBLAS's A
  const int64_t align_b = alignment_bytes(g.a, g.stride_a, g.batch, g.a_type);
  const int64_t align_c =
      std::min(alignment_bytes(g.c, g.stride_c, g.batch, g.c_type),
               g.c_in ? alignment_bytes(g.c_in, g.stride_c, g.batch, g.c_type) : int64_t{256});
  std::vector<int64_t> key = {g.transpose_a,
                              g.transpose_b,
                              g.rows,
                              g.cols,
                              g.inner,
                              g.lda,
                              g.ldb,
                              g.ldc,
                              g.stride_a,
                              g.stride_b,
                              g.stride_c,
                              g.batch,
                              g.beta != 0,
                              g.c_in != nullptr && g.c_in != g.c,  // C read from its own buffer
                              align_a,
                              align_b,
                              align_c,
                              static_cast<int64_t>(g.a_type),
                              static_cast<int64_t>(g.c_type)};
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second.get();

  auto plan = std::make_unique<Plan>();
  // 16-bit operands (bf16, fp16): 16-bit products, fp32 accumulation. fp32 operands: the
  // backend's choice.
  const cublasComputeType_t compute = g.a_type != DType::kFloat32 || compute_ == GemmCompute::kFp32
                                          ? CUBLAS_COMPUTE_32F
                                          : CUBLAS_COMPUTE_32F_FAST_16BF;
  ZT_CUBLAS_CHECK(cublaslt().matmul_desc_create(&plan->desc, compute, CUDA_R_32F));
  const cublasOperation_t op_a = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZT_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &op_a, sizeof(op_a)));
  ZT_CUBLAS_CHECK(cublaslt().matmul_desc_set_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &op_b, sizeof(op_b)));
  // Stored (column-major) shapes: cuBLAS A is m×k (N) or k×m (T); cuBLAS B is k×n (N) or n×k (T).
  const int64_t m = g.cols, n = g.rows, k = g.inner;
  plan->layout_a = g.transpose_b ? make_layout(g.b_type, k, m, g.ldb, g.batch, g.stride_b)
                                 : make_layout(g.b_type, m, k, g.ldb, g.batch, g.stride_b);
  plan->layout_b = g.transpose_a ? make_layout(g.a_type, n, k, g.lda, g.batch, g.stride_a)
                                 : make_layout(g.a_type, k, n, g.lda, g.batch, g.stride_a);
  plan->layout_c = make_layout(g.c_type, m, n, g.ldc, g.batch, g.stride_c);

  const Preference preference(workspace_bytes_, align_a, align_b, align_c, g.c_type);
  // What heuristic mode runs: the heuristic's first answer for one result asked.
  const std::vector<cublasLtMatmulAlgo_t> first =
      heuristic_algorithms(handle_, plan->desc, plan->layout_a, plan->layout_b, plan->layout_c,
                           preference.get(), 1, g.batch > 1);
  if (first.empty()) {
    plan.reset();
  } else {
    plan->algo = first[0];
    if (timing_) tune(*plan, g, preference.get());
  }
  return plans_.emplace(std::move(key), std::move(plan)).first->second.get();
}

void LtGemm::run(const RowMajorGemm& g) {
  ZT_CHECK(try_run(g), "cuBLASLt has no algorithm for " + describe(g));
}

bool LtGemm::try_run(const RowMajorGemm& g) {
  if (g.rows == 0 || g.cols == 0 || g.batch == 0) return true;
  if (g.inner == 0) {
    ZT_CHECK(g.beta == 0.0f || g.beta == 1.0f,
             describe(g) + ": an empty product with beta other than 0 or 1");
    const size_t element = dtype_size(g.c_type);
    const size_t pitch = static_cast<size_t>(g.ldc) * element;
    const size_t width = static_cast<size_t>(g.cols) * element;
    for (int64_t b = 0; b < g.batch; ++b) {
      const size_t offset = static_cast<size_t>(b * g.stride_c) * element;
      auto* out = static_cast<std::byte*>(g.c) + offset;
      if (g.beta == 0.0f) {  // D = 0
        ZT_CUDA_CHECK(
            cudaMemset2DAsync(out, pitch, 0, width, static_cast<size_t>(g.rows), stream_));
      } else if (g.c_in != nullptr && g.c_in != g.c) {  // D = C
        ZT_CUDA_CHECK(cudaMemcpy2DAsync(out, pitch, static_cast<const std::byte*>(g.c_in) + offset,
                                        pitch, width, static_cast<size_t>(g.rows),
                                        cudaMemcpyDeviceToDevice, stream_));
      }
    }
    return true;
  }
  Plan* plan = plan_for(g);
  if (plan == nullptr) return false;
  ZT_CUBLAS_CHECK(launch(*plan, g, plan->algo));
  ++plan->calls;
  return true;
}

}  // namespace zt::cuda
