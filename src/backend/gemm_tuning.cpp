#include "backend/gemm_tuning.h"

#include <algorithm>
#include <cstring>

#include "util/decimal.h"
#include "util/error.h"
#include "util/median.h"
#include "util/word_choice.h"

namespace zt {
namespace {

constexpr WordChoice<GemmAlgorithms> kGemmAlgorithmWords[] = {
    {GemmAlgorithms::kHeuristic, "heuristic"}, {GemmAlgorithms::kTimed, "timed"}};

uint32_t element_bits(const unsigned char* bytes, size_t size, size_t index) {
  if (size == 2) {
    uint16_t half = 0;
    std::memcpy(&half, bytes + index * 2, 2);
    return half;
  }
  uint32_t bits = 0;
  std::memcpy(&bits, bytes + index * 4, 4);
  return bits;
}

}  // namespace

GemmAlgorithms parse_gemm_algorithms(const std::string& text) {
  return parse_word(text, kGemmAlgorithmWords, "--gemm-algorithms");
}

const char* gemm_algorithms_name(GemmAlgorithms value) {
  return word_of(value, kGemmAlgorithmWords);
}

GemmElementMasks gemm_element_masks(DType type) {
  if (type == DType::kFloat32) return {0x7F800000u, 0x7FFFFFFFu};
  if (type == DType::kBf16) return {0x7F80u, 0x7FFFu};
  if (type == DType::kFloat16) return {0x7C00u, 0x7FFFu};
  throw Error(std::string("GEMM fingerprint: element type ") + dtype_name(type) +
              " is not float32, bfloat16 or float16");
}

GemmFingerprint gemm_output_fingerprint(const void* data, const void* baseline, DType type,
                                        int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                        int64_t stride) {
  const GemmElementMasks masks = gemm_element_masks(type);
  const size_t size = dtype_size(type);
  GemmFingerprint out;
  uint64_t element = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c, ++element) {
        const auto index = static_cast<size_t>(b * stride + r * ld + c);
        const uint32_t bits = element_bits(static_cast<const unsigned char*>(data), size, index);
        uint32_t before = 0;
        if (baseline)
          before = element_bits(static_cast<const unsigned char*>(baseline), size, index);
        out.hash += gemm_fingerprint_term(element, bits);
        out.finite_changed += gemm_element_changed(bits, baseline ? &before : nullptr, masks);
        out.non_finite += (bits & masks.exponent) == masks.exponent;
      }
  return out;
}

int64_t gemm_evidence_needed(const GemmOutput& output) {
  const int64_t half = (output.elements + 1) / 2;
  if (output.type == DType::kFloat32) return std::max<int64_t>(half, 1024);
  if (output.adds_c) return -1;
  return std::max<int64_t>(half,
                           output.type == DType::kFloat16 ? int64_t{1} << 18 : int64_t{1} << 21);
}

namespace {

// It ran and gave its output's bits twice.
bool repeatable(const GemmCandidateTrial& trial) {
  return trial.ran && !trial.times_ms.empty() && trial.first.hash == trial.last.hash;
}

}  // namespace

bool gemm_reference_comparable(const GemmCandidateTrial& heuristic, const GemmOutput& output) {
  const int64_t needed = gemm_evidence_needed(output);
  return repeatable(heuristic) && heuristic.first.non_finite == 0 && needed >= 0 &&
         heuristic.first.finite_changed >= static_cast<uint64_t>(needed);
}

GemmShapeTuning choose_gemm_candidate(const std::vector<GemmCandidateTrial>& trials,
                                      const GemmOutput& output) {
  GemmShapeTuning out;
  if (trials.empty()) return out;
  const GemmCandidateTrial& heuristic = trials[0];
  if (!gemm_reference_comparable(heuristic, output)) {  // nothing to compare the others with
    out.outcome = repeatable(heuristic) ? GemmTuningOutcome::kUninformative
                                        : GemmTuningOutcome::kUnreproducible;
    return out;
  }
  out.candidates = static_cast<int64_t>(trials.size()) - 1;
  const uint64_t reference = heuristic.first.hash;
  const double fastest_heuristic_run =
      *std::min_element(heuristic.times_ms.begin(), heuristic.times_ms.end());
  out.heuristic_ms = median(heuristic.times_ms);
  out.chosen_ms = out.heuristic_ms;
  for (size_t i = 1; i < trials.size(); ++i) {
    const GemmCandidateTrial& t = trials[i];
    if (!t.ran || t.times_ms.empty()) {
      ++out.failed;
      continue;
    }
    if (t.first.hash != reference || t.last.hash != reference) {
      ++out.refused_bits;
      continue;
    }
    const double slowest_run = *std::max_element(t.times_ms.begin(), t.times_ms.end());
    const double typical = median(t.times_ms);
    if (slowest_run < fastest_heuristic_run && typical < out.chosen_ms) {
      out.chosen = i;
      out.chosen_ms = typical;
    }
  }
  out.outcome = out.chosen == 0 ? GemmTuningOutcome::kKept : GemmTuningOutcome::kReplaced;
  return out;
}

void GemmTuningReport::add(const GemmShapeTuning& shape) {
  ++shapes;
  switch (shape.outcome) {
    case GemmTuningOutcome::kReplaced:
      ++replaced;
      ++timed;
      break;
    case GemmTuningOutcome::kKept:
      ++timed;
      break;
    case GemmTuningOutcome::kInPlace:
      ++in_place;
      break;
    case GemmTuningOutcome::kSingleCandidate:
      ++single_candidate;
      break;
    case GemmTuningOutcome::kUnreproducible:
      ++unreproducible;
      break;
    case GemmTuningOutcome::kUninformative:
      ++uninformative;
      break;
  }
  candidates += shape.candidates;
  refused_bits += shape.refused_bits;
  failed += shape.failed;
}

std::string GemmTuningReport::summary() const {
  return std::to_string(shapes) + " GEMM shapes: " + std::to_string(timed) + " timed (" +
         std::to_string(replaced) + " on a faster algorithm with the same bits, " +
         std::to_string(refused_bits) + " of " + std::to_string(candidates) +
         " candidates refused for another summation, " + std::to_string(failed) + " not run), " +
         std::to_string(in_place) + " accumulating in place, " + std::to_string(single_candidate) +
         " with one algorithm, " + std::to_string(uninformative) +
         " whose product changed too few finite elements to compare and " +
         std::to_string(unreproducible) + " not repeatable kept on the heuristic's choice; " +
         shortest_decimal(saved_ms) + " ms saved over the run's calls";
}

}  // namespace zt
