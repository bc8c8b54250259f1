// --gemm-algorithms timed, its host half (backend/gemm_tuning.h): the output fingerprint, the rule
// that picks among the timed candidates, the run's tally and the option. The trials themselves
// run on a GPU (tests/gpu/test_cuda_gemm_tuning.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/gemm_tuning.h"
#include "report/run_report.h"
#include "train_options_support.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/tensor_view.h"

namespace zt {
namespace {

// splitmix64's published sequence from seed 0: its first outputs are the finalizer of the
// state after one and two additions of the golden gamma.
TEST(GemmFingerprint, TheMixIsSplitmix64) {
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64(0x9e3779b97f4a7c15ull), 0x6e789e6aa1b965f4ull);
}

std::vector<float> sample_matrix(size_t n) {
  std::vector<float> m(n);
  for (size_t i = 0; i < n; ++i) m[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  return m;
}

// The sum of the terms over the [batch, rows, cols] elements, padding (columns past `cols`
// within ld, rows past `rows` within the stride) left out; a one-bit change of any element, and
// a swap of two different elements, change it.
TEST(GemmFingerprint, EveryElementCountsByPositionAndThePaddingDoesNot) {
  const int64_t rows = 3, cols = 4, ld = 6, batch = 2, stride = 20;
  std::vector<float> m = sample_matrix(static_cast<size_t>(batch * stride));
  const auto fingerprint = [&] {
    return gemm_output_fingerprint(m.data(), nullptr, DType::kFloat32, rows, cols, ld, batch,
                                   stride)
        .hash;
  };
  uint64_t expected = 0, element = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint32_t bits = 0;
        std::memcpy(&bits, &m[static_cast<size_t>(b * stride + r * ld + c)], 4);
        expected += gemm_fingerprint_term(element++, bits);
      }
  const uint64_t base = fingerprint();
  EXPECT_EQ(base, expected);
  for (size_t i = 0; i < m.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i) / stride,
                  in_matrix = static_cast<int64_t>(i) % stride;
    const bool counted = in_matrix / ld < rows && in_matrix % ld < cols;
    uint32_t bits = 0;
    std::memcpy(&bits, &m[i], 4);
    bits ^= 1u;  // the last mantissa bit
    std::memcpy(&m[i], &bits, 4);
    EXPECT_EQ(fingerprint() != base, counted) << "element " << i << " of matrix " << b;
    bits ^= 1u;
    std::memcpy(&m[i], &bits, 4);
  }
  ASSERT_NE(m[0], m[1]);
  std::swap(m[0], m[1]);
  EXPECT_NE(fingerprint(), base);
}

// 16-bit outputs: the two bytes of each element (bf16 here), the element index as for fp32.
TEST(GemmFingerprint, SixteenBitElementsAndWrongTypes) {
  const std::vector<float> values = sample_matrix(6);
  std::vector<bf16_t> half(values.size());
  uint64_t expected = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    half[i] = float_to_bf16(values[i]);
    expected += gemm_fingerprint_term(i, half[i]);
  }
  EXPECT_EQ(gemm_output_fingerprint(half.data(), nullptr, DType::kBf16, 2, 3, 3, 1, 0).hash,
            expected);
  EXPECT_THROW(gemm_output_fingerprint(half.data(), nullptr, DType::kFloat64, 1, 1, 1, 1, 0),
               Error);
  EXPECT_THROW(gemm_output_fingerprint(half.data(), nullptr, DType::kInt32, 1, 1, 1, 1, 0), Error);
}

// Which elements are finite and changed by the product (nonzero, for an output written with
// β = 0), in each storage type: ±0 are zeros, the subnormals and the largest finite values count,
// ±inf and NaN are not finite.
TEST(GemmFingerprint, CountsFiniteNonzeroAndNonFiniteElements) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {0.0f,  -0.0f, 1.0f, -2.5f,        1e-40f,
                                     3e38f, inf,   -inf, std::nanf("")};
  const GemmFingerprint fp32 =
      gemm_output_fingerprint(values.data(), nullptr, DType::kFloat32, 1, 9, 9, 1, 0);
  EXPECT_EQ(fp32.finite_changed, 4u);  // 1, -2.5, the subnormal 1e-40, 3e38
  EXPECT_EQ(fp32.non_finite, 3u);
  // The same values stored in 16 bits, one 9-element row.
  const auto in_16_bits = [&](DType type) {
    std::vector<uint16_t> bits(values.size());
    round_16bit(type, values.data(), bits.data(), values.size());
    return gemm_output_fingerprint(bits.data(), nullptr, type, 1, 9, 9, 1, 0);
  };
  const GemmFingerprint b = in_16_bits(DType::kBf16);
  EXPECT_EQ(b.finite_changed, 4u);
  EXPECT_EQ(b.non_finite, 3u);
  const GemmFingerprint h = in_16_bits(DType::kFloat16);  // 1e-40 → +0, 3e38 → +inf
  EXPECT_EQ(h.finite_changed, 2u);
  EXPECT_EQ(h.non_finite, 4u);
  // Against a baseline C (y = C + x·wᵀ): only finite elements whose bits differ from C's count,
  // zeros included; the hash is the output's alone.
  std::vector<float> c = values;
  c[2] = 7.0f;   // 1 ≠ 7: changed
  c[0] = -0.0f;  // +0 ≠ -0 in bits: changed
  c[6] = 1.0f;   // inf: not finite, never counted
  const GemmFingerprint against =
      gemm_output_fingerprint(values.data(), c.data(), DType::kFloat32, 1, 9, 9, 1, 0);
  EXPECT_EQ(against.finite_changed, 2u);
  EXPECT_EQ(against.non_finite, 3u);
  EXPECT_EQ(against.hash, fp32.hash);
}

constexpr int64_t kElements = 4096;  // of every trial's output below: fp32, C not added
constexpr GemmOutput kOutput{kElements, DType::kFloat32, false};

// A trial whose outputs hash to `first` and `last`, all kElements of them finite and changed
// unless told otherwise.
GemmCandidateTrial trial(uint64_t first, uint64_t last, std::vector<double> times,
                         uint64_t finite_changed = kElements, uint64_t non_finite = 0) {
  GemmCandidateTrial t;
  t.ran = true;
  t.first = {first, finite_changed, non_finite};
  t.last = {last, finite_changed, non_finite};
  t.times_ms = std::move(times);
  return t;
}

GemmShapeTuning choose(const std::vector<GemmCandidateTrial>& trials) {
  return choose_gemm_candidate(trials, kOutput);
}

const std::vector<double> kHeuristicTimes = {1.00, 1.02, 0.98, 1.01, 0.99};

TEST(ChooseGemmCandidate, AFasterAlgorithmWithTheSameBitsReplacesTheHeuristicsChoice) {
  const GemmShapeTuning shape =
      choose({trial(7, 7, kHeuristicTimes), trial(7, 7, {0.80, 0.82, 0.79, 0.81, 0.90})});
  EXPECT_EQ(shape.outcome, GemmTuningOutcome::kReplaced);
  EXPECT_EQ(shape.chosen, 1u);
  EXPECT_DOUBLE_EQ(shape.heuristic_ms, 1.00);
  EXPECT_DOUBLE_EQ(shape.chosen_ms, 0.81);
  EXPECT_EQ(shape.candidates, 1);
}

TEST(ChooseGemmCandidate, OtherBitsAtEitherFingerprintAreRefusedHoweverFast) {
  const std::vector<double> fast = {0.5, 0.5, 0.5, 0.5, 0.5};
  const GemmShapeTuning shape = choose(
      {trial(7, 7, kHeuristicTimes), trial(8, 8, fast), trial(7, 8, fast), trial(8, 7, fast)});
  EXPECT_EQ(shape.outcome, GemmTuningOutcome::kKept);
  EXPECT_EQ(shape.chosen, 0u);
  EXPECT_EQ(shape.refused_bits, 3);
  EXPECT_DOUBLE_EQ(shape.chosen_ms, shape.heuristic_ms);
}

// Faster by its median, but one run no faster than the heuristic's fastest: not every run is
// faster, so the heuristic's choice stays.
TEST(ChooseGemmCandidate, EveryTimedRunMustBeatTheHeuristicsFastest) {
  EXPECT_EQ(
      choose({trial(7, 7, kHeuristicTimes), trial(7, 7, {0.70, 0.70, 0.70, 0.70, 0.98})}).outcome,
      GemmTuningOutcome::kKept);
  EXPECT_EQ(
      choose({trial(7, 7, kHeuristicTimes), trial(7, 7, {0.70, 0.70, 0.70, 0.70, 0.97})}).outcome,
      GemmTuningOutcome::kReplaced);
}

TEST(ChooseGemmCandidate, TheSmallestMedianWinsAndTheEarliestOnATie) {
  const std::vector<double> a = {0.90, 0.60, 0.60, 0.60, 0.60};  // median 0.60
  const std::vector<double> b = {0.61, 0.61, 0.61, 0.61, 0.61};
  EXPECT_EQ(choose({trial(7, 7, kHeuristicTimes), trial(7, 7, b), trial(7, 7, a)}).chosen, 2u);
  EXPECT_EQ(choose({trial(7, 7, kHeuristicTimes), trial(7, 7, a), trial(7, 7, a)}).chosen, 1u);
}

TEST(ChooseGemmCandidate, FailedCandidatesAndAnUnreproducibleReference) {
  GemmCandidateTrial failed;
  GemmShapeTuning shape = choose({trial(7, 7, kHeuristicTimes), failed});
  EXPECT_EQ(shape.outcome, GemmTuningOutcome::kKept);
  EXPECT_EQ(shape.failed, 1);
  // The heuristic's own choice gave two fingerprints: nothing is compared, nothing replaced.
  shape = choose({trial(7, 9, kHeuristicTimes), trial(7, 7, {0.1, 0.1, 0.1})});
  EXPECT_EQ(shape.outcome, GemmTuningOutcome::kUnreproducible);
  EXPECT_EQ(shape.chosen, 0u);
  EXPECT_EQ(shape.candidates, 0);
}

// An output the product left mostly unchanged (zeros, or C: LoRA's B before its first update), or
// that holds an infinity or a NaN, is the same in every summation order: equal hashes there prove
// nothing, and a much faster candidate with those hashes is not taken. Half the elements changed
// is enough.
TEST(ChooseGemmCandidate, AMostlyZeroOrNonFiniteOutputComparesNothing) {
  const std::vector<double> fast = {0.1, 0.1, 0.1, 0.1, 0.1};
  for (const auto& [finite_changed, non_finite] :
       {std::pair<uint64_t, uint64_t>{0, 0}, {kElements / 2 - 1, 0}, {kElements - 1, 1}}) {
    const GemmShapeTuning shape = choose({trial(7, 7, kHeuristicTimes, finite_changed, non_finite),
                                          trial(7, 7, fast, finite_changed, non_finite)});
    EXPECT_EQ(shape.outcome, GemmTuningOutcome::kUninformative) << finite_changed;
    EXPECT_EQ(shape.chosen, 0u);
    GemmCandidateTrial reference = trial(7, 7, kHeuristicTimes, finite_changed, non_finite);
    EXPECT_FALSE(gemm_reference_comparable(reference, kOutput));
  }
  EXPECT_EQ(choose({trial(7, 7, kHeuristicTimes, kElements / 2), trial(7, 7, fast, 0)}).outcome,
            GemmTuningOutcome::kReplaced);
}

// The evidence a comparison needs, by output type: half the elements and 1024 in fp32; 2^21 in
// bf16 and 2^18 in fp16, where a reordered sum shows only where it crosses a rounding boundary;
// never in 16 bits with C added.
TEST(ChooseGemmCandidate, SixteenBitOutputsNeedMoreChangedElements) {
  EXPECT_EQ(gemm_evidence_needed({100, DType::kFloat32, false}), 1024);
  EXPECT_EQ(gemm_evidence_needed({4097, DType::kFloat32, true}), 2049);
  EXPECT_EQ(gemm_evidence_needed({1 << 20, DType::kBf16, false}), 1 << 21);
  EXPECT_EQ(gemm_evidence_needed({(1 << 23) + 1, DType::kBf16, false}), (1 << 22) + 1);
  EXPECT_EQ(gemm_evidence_needed({1 << 10, DType::kFloat16, false}), 1 << 18);
  EXPECT_EQ(gemm_evidence_needed({1 << 24, DType::kBf16, true}), -1);
  EXPECT_EQ(gemm_evidence_needed({1 << 24, DType::kFloat16, true}), -1);
  const std::vector<double> fast = {0.1, 0.1, 0.1, 0.1, 0.1};
  const auto outcome = [&](const GemmOutput& output, uint64_t changed) {
    return choose_gemm_candidate(
               {trial(7, 7, kHeuristicTimes, changed), trial(7, 7, fast, changed)}, output)
        .outcome;
  };
  const GemmOutput bf16{1 << 21, DType::kBf16, false};
  EXPECT_EQ(outcome(bf16, 1 << 21), GemmTuningOutcome::kReplaced);
  EXPECT_EQ(outcome(bf16, (1 << 21) - 1), GemmTuningOutcome::kUninformative);
  EXPECT_EQ(outcome({1 << 21, DType::kBf16, true}, 1 << 21), GemmTuningOutcome::kUninformative);
  EXPECT_EQ(outcome({1000, DType::kFloat32, false}, 1000), GemmTuningOutcome::kUninformative);
}

TEST(GemmTuningReport, TalliesOutcomesAndReadsBackAsJson) {
  GemmTuningReport report;
  GemmShapeTuning replaced;
  replaced.outcome = GemmTuningOutcome::kReplaced;
  replaced.candidates = 7;
  replaced.refused_bits = 3;
  replaced.failed = 1;
  GemmShapeTuning in_place;
  in_place.outcome = GemmTuningOutcome::kInPlace;
  report.add(replaced);
  report.add(in_place);
  report.add(GemmShapeTuning{});  // kept
  for (const GemmTuningOutcome untimed :
       {GemmTuningOutcome::kSingleCandidate, GemmTuningOutcome::kUnreproducible,
        GemmTuningOutcome::kUninformative, GemmTuningOutcome::kUninformative}) {
    GemmShapeTuning shape;
    shape.outcome = untimed;
    report.add(shape);
  }
  report.saved_ms = 1.5;
  EXPECT_EQ(report.shapes, 7);
  EXPECT_EQ(report.timed, 2);
  EXPECT_EQ(report.replaced, 1);
  EXPECT_EQ(report.in_place, 1);
  EXPECT_EQ(report.single_candidate, 1);
  EXPECT_EQ(report.unreproducible, 1);
  EXPECT_EQ(report.uninformative, 2);
  EXPECT_EQ(report.candidates, 7);
  const std::string line = report.summary();
  EXPECT_NE(line.find("7 GEMM shapes: 2 timed (1 on a faster algorithm"), std::string::npos)
      << line;
  EXPECT_NE(line.find("1 with one algorithm, 2 whose product changed too few finite elements to "
                      "compare and 1 not repeatable"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("3 of 7 candidates refused for another summation, 1 not run"),
            std::string::npos)
      << line;
  const nlohmann::json j = gemm_tuning_json(report);
  EXPECT_EQ(j["replaced"], 1);
  EXPECT_EQ(j["accumulating_in_place"], 1);
  EXPECT_EQ(j["refused_other_summation"], 3);
  EXPECT_EQ(j["uninformative"], 2);
  EXPECT_DOUBLE_EQ(j["saved_ms"].get<double>(), 1.5);
  nlohmann::json run_report = {{"steps", 1},
                               {"comm_bytes_per_step", nlohmann::json::object()},
                               {"peak_memory_bytes_per_rank", nlohmann::json::array()},
                               {"gemm_algorithms", j}};
  for (const char* key : {"first_loss", "final_loss", "mean_tokens_per_s", "mean_tflops_per_device",
                          "train_time_s", "total_time_s"})
    run_report[key] = nullptr;
  const std::string md = report_markdown(run_report);
  EXPECT_NE(md.find("| GEMM algorithms timed, rank 0 (shapes replaced of timed; ms saved) | 1 of "
                    "2; 1.50 |"),
            std::string::npos)
      << md;
}

std::string refusal_of(const std::vector<std::string>& extra) {
  try {
    parsed_train_options(extra);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

// heuristic by default and recorded in run.json's config; timed refused on the CPU backend and a
// misspelt word refused, each naming the option.
TEST(TrainOptionsGemmAlgorithms, DefaultRecordedAndRefusals) {
  EXPECT_EQ(parsed_train_options({}).gemm_algorithms, GemmAlgorithms::kHeuristic);
  EXPECT_EQ(parsed_train_options({"--backend", "cpu"}).to_json()["gemm_algorithms"], "heuristic");
  EXPECT_EQ(parse_gemm_algorithms("timed"), GemmAlgorithms::kTimed);
  EXPECT_STREQ(gemm_algorithms_name(GemmAlgorithms::kTimed), "timed");
  EXPECT_NE(refusal_of({"--backend", "cpu", "--gemm-algorithms", "timed"})
                .find("--gemm-algorithms timed needs the CUDA backend"),
            std::string::npos);
  const std::string misspelt = refusal_of({"--gemm-algorithms", "fastest"});
  EXPECT_NE(misspelt.find("--gemm-algorithms"), std::string::npos) << misspelt;
  EXPECT_NE(misspelt.find("fastest"), std::string::npos) << misspelt;
}

}  // namespace
}  // namespace zt
