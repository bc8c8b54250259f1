// The kernel profile of `train --profile-steps` (backend/kernel_profile.h), on the CPU:
//   - every kernel the CUDA build defines (read from libzt_cuda.a's device stubs with nm) and the
//     library kernels of tests/data/kernel_names (real names from public profiles) land in the
//     category the step's time is read by, none in "other";
//   - the window arithmetic: clipping, busy time as the union of overlapping intervals, idle,
//     per-category sums, the longest kernels first;
//   - --profile-steps parsing, and the CPU backend refusing it by name.
// The CUPTI recording itself needs a GPU (docs/gpu.md).
#include <cxxabi.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/kernel_profiling.h"
#include "backend/backend.h"
#include "backend/kernel_profile.h"
#include "util/error.h"

namespace zt {
namespace {

#ifdef ZT_CUDA_LIBRARY  // a build without CUDA has no kernels to read
// The demangled names of the kernels whose host stubs nvcc put into `library`:
// `_Z[L]<n>__device_stub__<kernel's mangled name without its leading '_'><stub params>`.
std::set<std::string> kernels_in(const std::string& library) {
  std::set<std::string> names;
  FILE* nm = popen(("nm --defined-only '" + library + "' 2>/dev/null").c_str(), "r");
  if (nm == nullptr) return names;
  char buffer[8192];
  const std::string marker = "__device_stub__";
  while (std::fgets(buffer, sizeof buffer, nm)) {
    const std::string line(buffer);
    // The stub's identifier is <n> characters long, "__device_stub__" + the kernel's name, in the
    // stub's own symbol (_Z<n>…, _ZL<n>… when the kernel is static) or its guard variables'.
    const size_t stub = line.find(marker);
    if (stub == std::string::npos) continue;
    size_t digits = stub;
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(line[digits - 1]))) --digits;
    if (digits == stub) continue;
    const size_t length = std::stoul(line.substr(digits, stub - digits));
    if (length <= marker.size()) continue;
    const std::string kernel = "_" + line.substr(stub + marker.size(), length - marker.size());
    int status = 0;
    char* plain = abi::__cxa_demangle(kernel.c_str(), nullptr, nullptr, &status);
    names.insert(status == 0 && plain ? plain : kernel);
    std::free(plain);
  }
  pclose(nm);
  return names;
}
#endif

TEST(KernelProfile, EveryZerotrainKernelHasANamedCategory) {
#ifndef ZT_CUDA_LIBRARY
  GTEST_SKIP() << "built without CUDA: no kernels to read";
#else
  const std::set<std::string> kernels = kernels_in(ZT_CUDA_LIBRARY);
  // The __global__ functions of src/**/cuda (17 names, the elementwise template several times).
  ASSERT_GE(kernels.size(), 17u) << "nm found too few kernels in " << ZT_CUDA_LIBRARY;
  std::map<std::string, KernelCategory> expected = {
      {"AdamWUpdate", KernelCategory::kOptimizer},  // elementwise_kernel<AdamWUpdate>
      {"sum_squares_partials_kernel", KernelCategory::kOptimizer},
      {"block_sum_squares_kernel", KernelCategory::kOptimizer},
      {"cross_entropy_kernel", KernelCategory::kCrossEntropy},
      {"attention_softmax_kernel", KernelCategory::kAttention},
      {"transpose_attention_stats_kernel", KernelCategory::kAttention},
      {"rmsnorm_forward_kernel", KernelCategory::kPointwise},
      {"embedding_backward_kernel", KernelCategory::kPointwise},
      {"embedding_backward_sorted_kernel", KernelCategory::kPointwise},
      {"embedding_positions_kernel", KernelCategory::kPointwise},
      {"DeviceRadixSortOnesweepKernel", KernelCategory::kPointwise},  // CUB: the embedding's sort
      {"column_sum_partials_kernel", KernelCategory::kPointwise},
      {"rank_tree_add_kernel", KernelCategory::kCommunication},
      {"gemm_fingerprint_kernel", KernelCategory::kGemm},  // --gemm-algorithms timed's trials
      {"ScaleBy", KernelCategory::kPointwise},
      {"SoftCap", KernelCategory::kPointwise},
      {"AddInPlace", KernelCategory::kPointwise}};
  std::set<std::string> seen;
  for (const std::string& k : kernels) {
    const KernelCategory c = classify_kernel(k);
    std::printf("%-13s %.150s\n", kernel_category_name(c), k.c_str());
    EXPECT_NE(c, KernelCategory::kOther) << k;
    for (const auto& [part, category] : expected)
      if (k.find(part) != std::string::npos) {
        EXPECT_EQ(kernel_category_name(c), std::string(kernel_category_name(category))) << k;
        seen.insert(part);
      }
  }
  for (const auto& [part, category] : expected) EXPECT_TRUE(seen.count(part)) << part;
#endif
}

TEST(KernelProfile, LibraryKernelsFromRealProfilesHaveTheirCategory) {
  const std::string path =
      std::string(ZT_SOURCE_DIR) + "/tests/data/kernel_names/library_kernels.tsv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string category, name;
    std::getline(fields, category, '\t');
    std::getline(fields, name, '\t');
    EXPECT_EQ(kernel_category_name(classify_kernel(name)), category) << name;
    ++rows;
  }
  EXPECT_GE(rows, 12);
  EXPECT_EQ(classify_kernel("some_new_library_kernel"), KernelCategory::kOther);
  // Our names are matched as names, not as fragments of other words ("rope" in "Property").
  EXPECT_EQ(classify_kernel("void lib::PropertyUpdateKernel<float>(float*)"),
            KernelCategory::kOther);
}

DeviceActivity kernel(const std::string& name, uint64_t start, uint64_t end) {
  DeviceActivity a;
  a.name = name;
  a.start_ns = start;
  a.end_ns = end;
  return a;
}

// Two windows (two steps), [1000, 2000] and [3000, 3500] ns: two GEMMs, an attention kernel
// overlapping the second on another stream, a collective inside that GEMM's interval, a copy, a
// kernel begun before the first window (clipped), one between the windows (a checkpoint save's
// copy: left out), one across the second window's start (clipped) and one after both (left out).
TEST(KernelProfile, BusyIsTheUnionWithinTheStepsAndIdleTheRest) {
  std::vector<DeviceActivity> a = {
      kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 1100, 1300),
      kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 1400, 1600),
      kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 1500, 1700),
      kernel("ncclDevKernel_AllGather_RING_LL", 1420, 1450),  // inside the second GEMM
      kernel("adamw_kernel", 900, 1050),                      // 50 ns inside
      kernel("cross_entropy_kernel", 2100, 2200),             // between the windows
      kernel("cross_entropy_kernel", 2900, 3100),             // 100 ns inside the second
      kernel("rmsnorm_forward_kernel", 3600, 3700)};          // after both
  DeviceActivity copy;
  copy.kind = DeviceActivity::Kind::kCopy;
  copy.name = "memcpy HtoD";
  copy.start_ns = 1800;
  copy.end_ns = 1900;
  copy.bytes = 4096;
  a.push_back(copy);
  copy.name = "memcpy DtoH";  // between the steps
  copy.start_ns = 2300;
  copy.end_ns = 2800;
  a.push_back(copy);
  const std::vector<ProfileWindow> windows = {{1000, 2000}, {3000, 3500}};
  const KernelProfile p = summarize_kernel_profile(a, windows, 2);
  EXPECT_EQ(p.window_ns, 1500u);
  // [1000,1050] + [1100,1300] + [1400,1700] + [1800,1900] + [3000,3100] = 50+200+300+100+100
  EXPECT_EQ(p.busy_ns, 750u);
  EXPECT_EQ(p.idle_ns(), 750u);
  auto total = [&](KernelCategory c) { return p.categories[static_cast<size_t>(c)].total_ns; };
  EXPECT_EQ(total(KernelCategory::kGemm), 400u);
  EXPECT_EQ(p.categories[static_cast<size_t>(KernelCategory::kGemm)].calls, 2);
  EXPECT_EQ(total(KernelCategory::kAttention), 200u);  // overlapping: summed, not unioned
  EXPECT_EQ(total(KernelCategory::kOptimizer), 50u);
  EXPECT_EQ(total(KernelCategory::kCopies), 100u);
  EXPECT_EQ(p.categories[static_cast<size_t>(KernelCategory::kCopies)].calls, 1);
  EXPECT_EQ(total(KernelCategory::kCommunication), 30u);
  EXPECT_EQ(total(KernelCategory::kCrossEntropy), 100u);
  EXPECT_EQ(p.categories[static_cast<size_t>(KernelCategory::kCrossEntropy)].calls, 1);
  EXPECT_EQ(total(KernelCategory::kPointwise), 0u);
  ASSERT_EQ(p.rows.size(), 6u);
  EXPECT_EQ(p.rows[0].category, KernelCategory::kGemm);
  EXPECT_EQ(p.rows[0].total_ns, 400u);
  EXPECT_EQ(p.rows[0].calls, 2);
  EXPECT_EQ(p.rows[5].name, "ncclDevKernel_AllGather_RING_LL");

  const nlohmann::json j = nlohmann::json::parse(kernel_profile_json(p, 4));
  EXPECT_EQ(j["steps"], 2);
  EXPECT_DOUBLE_EQ(j["per_step_ms"].get<double>(), 0.00075);
  EXPECT_DOUBLE_EQ(j["categories"]["gemm"]["share"].get<double>(), 400.0 / 1500.0);
  EXPECT_DOUBLE_EQ(j["categories"]["idle"]["ms"].get<double>(), 0.00075);
  EXPECT_EQ(j["kernels"].size(), 4u);  // the 4 longest of 6
  EXPECT_EQ(j["distinct_kernels"], 6);
  EXPECT_EQ(j["kernels"][0]["category"], "gemm");
  const std::string table = kernel_profile_table(p);
  EXPECT_NE(table.find("idle"), std::string::npos) << table;
  EXPECT_NE(table.find("nvjet_tst_128x256"), std::string::npos) << table;
  // Idle by where it falls: after the copy and the cross-entropy to their windows' ends, between
  // the GEMMs, after the attention kernel (which ended last, past the second GEMM) and after AdamW.
  ASSERT_EQ(p.idle_gaps.size(), 5u);
  uint64_t gaps = 0;
  for (const auto& g : p.idle_gaps) gaps += g.total_ns;
  EXPECT_EQ(gaps, p.idle_ns());
  EXPECT_EQ(p.idle_gaps[0].after, "cross_entropy_kernel");
  EXPECT_EQ(p.idle_gaps[0].before, "(step end)");
  EXPECT_EQ(p.idle_gaps[0].total_ns, 400u);
  EXPECT_EQ(p.idle_gaps[1].after, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop");
  EXPECT_EQ(p.idle_gaps[1].before, "memcpy HtoD");
  EXPECT_EQ(p.idle_gaps[1].total_ns, 100u);
  EXPECT_EQ(p.idle_gaps[4].after, "adamw_kernel");
  EXPECT_EQ(p.idle_gaps[4].before, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT");
  EXPECT_EQ(p.idle_gaps[4].total_ns, 50u);
  EXPECT_EQ(j["idle_gaps"].size(), 4u);
  EXPECT_EQ(j["idle_gaps"][0]["before"], "(step end)");
  EXPECT_DOUBLE_EQ(j["idle_gaps"][0]["ms"].get<double>(), 400e-6);
  EXPECT_NE(table.find("cross_entropy_kernel -> (step end)"), std::string::npos) << table;
  EXPECT_THROW(summarize_kernel_profile(a, {{2000, 1000}}, 1), Error);
  EXPECT_THROW(summarize_kernel_profile(a, {{1000, 2000}, {1500, 2500}}, 2), Error);
}

// A step whose first kernel starts late (the host prepared the batch first) in both windows, and
// one window that ends idle: the gaps add up over the windows, each pair once with its count.
TEST(KernelProfile, IdleGapsAddUpByTheActivitiesAroundThem) {
  const std::vector<DeviceActivity> a = {kernel("rope_kernel", 30, 60),
                                         kernel("adamw_kernel", 60, 100),
                                         kernel("rope_kernel", 250, 300)};
  const KernelProfile p = summarize_kernel_profile(a, {{0, 100}, {200, 300}}, 2);
  EXPECT_EQ(p.idle_ns(), 80u);
  ASSERT_EQ(p.idle_gaps.size(), 1u);
  EXPECT_EQ(p.idle_gaps[0].after, "(step start)");
  EXPECT_EQ(p.idle_gaps[0].before, "rope_kernel");
  EXPECT_EQ(p.idle_gaps[0].count, 2);
  EXPECT_EQ(p.idle_gaps[0].total_ns, 80u);
  const KernelProfile empty = summarize_kernel_profile({}, {{0, 100}}, 1);
  ASSERT_EQ(empty.idle_gaps.size(), 1u);
  EXPECT_EQ(empty.idle_gaps[0].after, "(step start)");
  EXPECT_EQ(empty.idle_gaps[0].before, "(step end)");
  EXPECT_EQ(empty.idle_gaps[0].total_ns, 100u);
}

// Gaps of 3, 5 (a bucket's lower bound counts in it), 50 and 500 µs, then 1437 µs to the window's
// end: one in each bucket of length.
TEST(KernelProfile, IdleGapsAreCountedByLength) {
  const std::vector<DeviceActivity> a = {kernel("k", 0, 1'000), kernel("k", 4'000, 5'000),
                                         kernel("k", 10'000, 11'000), kernel("k", 61'000, 62'000),
                                         kernel("k", 562'000, 563'000)};
  const KernelProfile p = summarize_kernel_profile(a, {{0, 2'000'000}}, 1);
  const uint64_t want_ns[] = {3'000, 5'000, 50'000, 500'000, 1'437'000};
  ASSERT_EQ(p.idle_gap_sizes.size(), 5u);
  for (size_t b = 0; b < 5; ++b) {
    EXPECT_EQ(p.idle_gap_sizes[b].calls, 1) << "bucket " << b;
    EXPECT_EQ(p.idle_gap_sizes[b].total_ns, want_ns[b]) << "bucket " << b;
  }
  const nlohmann::json j = nlohmann::json::parse(kernel_profile_json(p));
  EXPECT_DOUBLE_EQ(j["idle_gap_sizes"][1]["from_us"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(j["idle_gap_sizes"][1]["to_us"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(j["idle_gap_sizes"][2]["ms"].get<double>(), 0.05);
  EXPECT_TRUE(j["idle_gap_sizes"][4]["to_us"].is_null());
  const std::string table = kernel_profile_table(p);
  EXPECT_NE(table.find(">=1000us 1.437/1.0"), std::string::npos) << table;
}

// A profiler that records what StepProfiling asks of it; its clock moves 100 ns per now().
class FakeProfiler final : public KernelProfiler {
 public:
  explicit FakeProfiler(std::vector<std::string>& calls) : calls_(calls) {}
  void start() override { calls_.push_back("start"); }
  uint64_t now() override {
    clock_ += 100;
    calls_.push_back("now " + std::to_string(clock_));
    return clock_;
  }
  void discard() override { calls_.push_back("discard"); }
  Recording stop() override {
    calls_.push_back("stop");
    Recording r;
    r.activities = {kernel("adamw_kernel", 150, 180), kernel("adamw_kernel", 320, 390)};
    r.untimed_records = 3;
    return r;
  }

 private:
  std::vector<std::string>& calls_;
  uint64_t clock_ = 0;
};

class StepProfilingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "zt_step_profiling_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Runs steps from..to through a StepProfiling of `window`; returns the profiler's calls.
  std::vector<std::string> run(ProfileSteps window, int64_t from, int64_t to, bool records,
                               bool trace_from_first_step = false) {
    std::vector<std::string> calls;
    StepProfiling p(window, dir_, records, std::make_unique<FakeProfiler>(calls),
                    trace_from_first_step);
    for (int64_t step = from; step <= to; ++step) {
      calls.push_back("step " + std::to_string(step));
      p.before_step(step);
      p.after_step(step);
    }
    return calls;
  }
  std::string dir_;
};

TEST_F(StepProfilingTest, EachStepOfTheWindowIsOneWindowAndTheProfileIsWritten) {
  const std::vector<std::string> calls = run({2, 3}, 1, 4, true);
  const std::vector<std::string> want = {"step 1", "step 2",  "start",   "now 100", "now 200",
                                         "step 3", "now 300", "now 400", "stop",    "step 4"};
  EXPECT_EQ(calls, want);
  // Windows [100, 200] and [300, 400]: 30 + 70 ns of AdamW, 100 of the 200 ns idle.
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(dir_ + "/kernel_profile.json"));
  EXPECT_EQ(j["steps"], 2);
  EXPECT_DOUBLE_EQ(j["window_ms"].get<double>(), 200e-6);
  EXPECT_DOUBLE_EQ(j["categories"]["optimizer"]["ms"].get<double>(), 100e-6);
  EXPECT_DOUBLE_EQ(j["idle_ms"].get<double>(), 100e-6);
  EXPECT_EQ(j["untimed_records"], 3);
}

TEST_F(StepProfilingTest, ResumeInsideStartsThereAndOtherRanksOrLateResumesRecordNothing) {
  const std::vector<std::string> inside = run({2, 4}, 3, 5, true);
  const std::vector<std::string> want = {"step 3",  "start",   "now 100", "now 200", "step 4",
                                         "now 300", "now 400", "stop",    "step 5"};
  EXPECT_EQ(inside, want);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir_ + "/kernel_profile.json"))["steps"], 2);
  std::filesystem::remove(dir_ + "/kernel_profile.json");
  EXPECT_EQ(run({2, 4}, 1, 5, false).size(), 5u);  // a rank that does not record: steps only
  EXPECT_EQ(run({2, 4}, 5, 6, true).size(), 2u);   // resumed past the window
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/kernel_profile.json"));
  const std::vector<std::string> cut = run({2, 4}, 1, 3, true);  // the run ends inside
  EXPECT_EQ(cut.back(), "now 400");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/kernel_profile.json"));
}

// For CUDA graphs the profiler records from the first step on (a graph instantiated before tracing
// began may show no kernels): what it recorded before the window is dropped at each step, and the
// window is the same as without.
TEST_F(StepProfilingTest, TracingFromTheFirstStepDropsWhatCameBeforeTheWindow) {
  const std::vector<std::string> calls = run({3, 4}, 1, 5, true, /*trace_from_first_step=*/true);
  const std::vector<std::string> want = {"step 1",  "start",   "step 2",  "discard", "step 3",
                                         "discard", "now 100", "now 200", "step 4",  "now 300",
                                         "now 400", "stop",    "step 5"};
  EXPECT_EQ(calls, want);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir_ + "/kernel_profile.json"))["steps"], 2);
  // Resumed inside the window: it starts there, as without.
  const std::vector<std::string> inside = run({3, 4}, 4, 4, true, true);
  EXPECT_EQ(inside, (std::vector<std::string>{"step 4", "start", "now 100", "now 200", "stop"}));
  EXPECT_EQ(run({3, 4}, 1, 5, false, true).size(), 5u);  // a rank that does not record
}

TEST(KernelProfile, ProfileStepsAreParsedAndTheCpuBackendRefusesThem) {
  // Parsed as the option is read, then held against --steps (10 here) by validate().
  const auto parsed = [](const std::string& text) {
    const ProfileSteps p = parse_profile_steps(text);
    check_profile_steps(p, 10);
    return p;
  };
  const ProfileSteps off = parsed("");
  EXPECT_FALSE(off.on());
  const ProfileSteps one = parsed("4");
  EXPECT_EQ(one.first, 4);
  EXPECT_EQ(one.last, 4);
  const ProfileSteps range = parsed("3:10");
  EXPECT_EQ(range.first, 3);
  EXPECT_EQ(range.last, 10);
  for (const char* word : {"", "4", "3:10"}) EXPECT_EQ(profile_steps_name(parsed(word)), word);
  for (const char* bad : {"0:2", "3:2", "1:11", "x", "1:", ":3", "-1:2", "+1:2", "2:3:4", "1.5"}) {
    try {
      parsed(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--profile-steps"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  auto cpu = make_cpu_backend();
  try {
    cpu->make_kernel_profiler();
    ADD_FAILURE() << "the CPU backend made a kernel profiler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-steps"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
  EXPECT_THROW(StepProfiling(range, "/nonexistent", true, nullptr), Error);
  StepProfiling idle(off, "/nonexistent", true, nullptr);  // off: no profiler needed
  idle.before_step(1);
  idle.after_step(1);
}

}  // namespace
}  // namespace zt
