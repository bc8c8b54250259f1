// --gemm-algorithms timed: each cuBLASLt GEMM shape of the run picks, the first time it runs, the
// fastest of the algorithms cuBLASLt's heuristic offers that computes the same bits as the
// heuristic's own first choice, measured on the run's own operands (docs/gpu.md, "GEMM
// algorithms"). The CUDA GEMM (backend/cuda/cuda_gemm.h) runs the trials; what to make of them,
// the output fingerprint and the run's tally are here, host code the CPU tests check.
//
// Why "the same bits": a GEMM algorithm fixes the order in which each output element's products
// are summed, and another order rounds differently. Choosing among algorithms by speed alone
// would let the timing noise of one run pick another summation than the next run's, and the
// same config and seed would no longer give the same losses. A candidate is eligible only when
// its output, on the GEMM's own operands, fingerprints equal to the heuristic's (after its first
// and its last timed run): the run then computes what --gemm-algorithms heuristic computes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "util/dtype.h"
#include "util/splitmix64.h"

namespace zt {

enum class GemmAlgorithms { kHeuristic, kTimed };
GemmAlgorithms parse_gemm_algorithms(const std::string& text);  // zt::Error naming the option
const char* gemm_algorithms_name(GemmAlgorithms value);

// The fingerprint of a GEMM's output: the sum modulo 2^64 of gemm_fingerprint_term over its
// elements, `element` its index in the row-major [batch, rows, cols] order and `bits` its stored
// bits (2 or 4 bytes). A sum does not depend on the order a device adds the terms, so a kernel
// with atomics computes it reproducibly; outputs that differ in any element differ in it but for
// a chance of about 2^-64.
ZT_HOST_DEVICE inline uint64_t gemm_fingerprint_term(uint64_t element, uint32_t bits) {
  return splitmix64(splitmix64(element) ^ bits);
}

// The bits of an element's exponent and magnitude in its storage type: an element is finite when
// its exponent bits are not all ones, and nonzero when its magnitude bits are not all zeros.
struct GemmElementMasks {
  uint32_t exponent = 0;
  uint32_t magnitude = 0;
};
GemmElementMasks gemm_element_masks(DType type);  // fp32, bf16 or fp16; zt::Error otherwise

// Whether an output element tells something of the product: finite, and other than what the GEMM
// would write without it — zero (±0) where β = 0, the bits of C where C is added (`baseline`).
ZT_HOST_DEVICE inline bool gemm_element_changed(uint32_t bits, const uint32_t* baseline,
                                                GemmElementMasks masks) {
  const bool finite = (bits & masks.exponent) != masks.exponent;
  return finite && (baseline ? bits != *baseline : (bits & masks.magnitude) != 0);
}

// What comparing two outputs can show: equal hashes of an output that the product left mostly
// unchanged, or that holds infinities or NaNs, say little about the order its sums were taken in
// (a zero weight, such as LoRA's B before its first update, gives the same zeros, or the same C,
// in every order; an overflow, infinities).
struct GemmFingerprint {
  uint64_t hash = 0;
  uint64_t finite_changed = 0;  // elements for which gemm_element_changed holds
  uint64_t non_finite = 0;
};

// The fingerprint of a row-major matrix batch in host memory: `batch` matrices of rows×cols
// elements of `type` (fp32, bf16 or fp16), rows `ld` elements apart, matrices `stride` apart;
// `baseline`, when given, C in the same type and layout.
GemmFingerprint gemm_output_fingerprint(const void* data, const void* baseline, DType type,
                                        int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                        int64_t stride);

// One candidate algorithm tried on a GEMM's operands: an untimed run (whose output `first`
// fingerprints), then kGemmTimedRuns timed ones (`last`: the output after them). ran: every run
// was accepted.
constexpr int kGemmTimedRuns = 5;
struct GemmCandidateTrial {
  bool ran = false;
  GemmFingerprint first;
  GemmFingerprint last;
  std::vector<double> times_ms;
};

// The output the trials compare: its elements, its type, and whether C is added from a buffer of
// its own (matmul_forward_add's residual).
struct GemmOutput {
  int64_t elements = 0;
  DType type = DType::kFloat32;
  bool adds_c = false;
};

// How many finite elements the product must change before equal bits are evidence that two
// algorithms sum in the same order; -1: never. A reordered sum of K products differs in its last
// fp32 bits in a good fraction of the elements (say p ≥ 1/4 for random signs), so an fp32 output
// needs 1024 elements ((3/4)^1024 ≈ 1e-128 to miss). Rounded to 16 bits the difference shows only
// where it crosses a rounding boundary: about 2^-16 of the elements in bf16 (8 of fp32's 24
// significant bits kept), 2^-13 in fp16, so 2^21 and 2^18 elements expect 32 crossings (e^-32 to
// miss). With C added in 16 bits the product's share of each element is unknown: never. And at
// least half the elements, whatever the type.
int64_t gemm_evidence_needed(const GemmOutput& output);

// Whether the other candidates can be compared with the heuristic's choice, given its trial:
// it ran, its two fingerprints are equal (it is repeatable), every element is finite and the
// product changed at least gemm_evidence_needed of them.
bool gemm_reference_comparable(const GemmCandidateTrial& heuristic, const GemmOutput& output);

enum class GemmTuningOutcome {
  kKept,      // timed; no eligible candidate was faster in every run
  kReplaced,  // timed; a faster algorithm with the same bits replaced the heuristic's
  kInPlace,   // not timed: the GEMM accumulates into its output or writes an input (a rerun would
              // change what it reads)
  kSingleCandidate,  // not timed: the heuristic offered one algorithm
  kUnreproducible,   // the heuristic's own choice gave two fingerprints (or did not run): kept
  kUninformative,    // the product changed too few finite elements to compare (evidence): kept
};

struct GemmShapeTuning {
  GemmTuningOutcome outcome = GemmTuningOutcome::kKept;
  size_t chosen = 0;         // index into the trials; 0 unless replaced
  int64_t candidates = 0;    // trials besides the heuristic's choice
  int64_t refused_bits = 0;  // candidates with another summation: another split of K, other bits
  int64_t failed = 0;        // candidates cuBLASLt would not run
  double heuristic_ms = 0;   // median of the heuristic's choice's timed runs
  double chosen_ms = 0;      // median of the chosen one's
};

// trials[0] is the heuristic's first choice (what --gemm-algorithms heuristic runs); the others
// are only looked at when it is comparable on `output` (above). Another
// candidate replaces it only when it ran, its two fingerprints equal the heuristic's first one,
// and every one of its timed runs was faster than the heuristic's fastest: a rule that an equally
// fast algorithm passes by chance once in C(10, 5) = 252 (harmlessly: its bits are the same).
// Among those, the smallest median; the earliest on a tie.
GemmShapeTuning choose_gemm_candidate(const std::vector<GemmCandidateTrial>& trials,
                                      const GemmOutput& output);

// The run's tally over its GEMM shapes, for the run's report and log.
struct GemmTuningReport {
  int64_t shapes = 0;  // each shape (and alignment) the GEMM planned
  int64_t timed = 0;
  int64_t replaced = 0;
  int64_t in_place = 0;
  int64_t single_candidate = 0;
  int64_t unreproducible = 0;
  int64_t uninformative = 0;
  int64_t candidates = 0;
  int64_t refused_bits = 0;
  int64_t failed = 0;
  double saved_ms = 0;  // Σ over replaced shapes of (heuristic − chosen median) × their calls

  void add(const GemmShapeTuning& shape);
  std::string summary() const;  // one line
};

}  // namespace zt
