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

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
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

TEST(KernelProfile, EveryZerotrainKernelHasANamedCategory) {
#ifndef ZT_CUDA_LIBRARY
  GTEST_SKIP() << "built without CUDA: no kernels to read";
#else
  const std::set<std::string> kernels = kernels_in(ZT_CUDA_LIBRARY);
  // The __global__ functions of src/**/cuda (17 names, the elementwise template several times).
  ASSERT_GE(kernels.size(), 17u) << "nm found too few kernels in " << ZT_CUDA_LIBRARY;
  std::map<std::string, KernelCategory> expected = {
      {"adamw_kernel", KernelCategory::kOptimizer},
      {"sum_squares_partials_kernel", KernelCategory::kOptimizer},
      {"block_sum_squares_kernel", KernelCategory::kOptimizer},
      {"cross_entropy_kernel", KernelCategory::kCrossEntropy},
      {"attention_softmax_kernel", KernelCategory::kAttention},
      {"transpose_attention_stats_kernel", KernelCategory::kAttention},
      {"rmsnorm_forward_kernel", KernelCategory::kPointwise},
      {"embedding_backward_kernel", KernelCategory::kPointwise},
      {"column_sum_partials_kernel", KernelCategory::kPointwise},
      {"rank_tree_add_kernel", KernelCategory::kCommunication},
      {"ScaleInPlace", KernelCategory::kOptimizer},
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
}

DeviceActivity kernel(const std::string& name, uint64_t start, uint64_t end) {
  DeviceActivity a;
  a.name = name;
  a.start_ns = start;
  a.end_ns = end;
  return a;
}

// A window [1000, 2000] ns: two GEMMs, an attention kernel overlapping the second on another
// stream, a collective inside that GEMM's interval, a copy, a kernel begun before the window
// (clipped) and one after it (dropped).
TEST(KernelProfile, BusyIsTheUnionAndIdleTheRest) {
  std::vector<DeviceActivity> a = {
      kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 1100, 1300),
      kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 1400, 1600),
      kernel("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 1500, 1700),
      kernel("ncclDevKernel_AllGather_RING_LL", 1420, 1450),  // inside the second GEMM
      kernel("adamw_kernel", 900, 1050),                      // 50 ns inside
      kernel("cross_entropy_kernel", 2100, 2200)};
  DeviceActivity copy;
  copy.kind = DeviceActivity::Kind::kCopy;
  copy.name = "memcpy HtoD";
  copy.start_ns = 1800;
  copy.end_ns = 1900;
  copy.bytes = 4096;
  a.push_back(copy);
  const KernelProfile p = summarize_kernel_profile(a, 1000, 2000, 2);
  EXPECT_EQ(p.window_ns, 1000u);
  // [1000,1050] + [1100,1300] + [1400,1700] + [1800,1900] = 50 + 200 + 300 + 100
  EXPECT_EQ(p.busy_ns, 650u);
  EXPECT_EQ(p.idle_ns(), 350u);
  auto total = [&](KernelCategory c) { return p.categories[static_cast<size_t>(c)].total_ns; };
  EXPECT_EQ(total(KernelCategory::kGemm), 400u);
  EXPECT_EQ(p.categories[static_cast<size_t>(KernelCategory::kGemm)].calls, 2);
  EXPECT_EQ(total(KernelCategory::kAttention), 200u);  // overlapping: summed, not unioned
  EXPECT_EQ(total(KernelCategory::kOptimizer), 50u);
  EXPECT_EQ(total(KernelCategory::kCopies), 100u);
  EXPECT_EQ(total(KernelCategory::kCommunication), 30u);
  EXPECT_EQ(total(KernelCategory::kCrossEntropy), 0u);
  ASSERT_EQ(p.rows.size(), 5u);
  EXPECT_EQ(p.rows[0].category, KernelCategory::kGemm);
  EXPECT_EQ(p.rows[0].total_ns, 400u);
  EXPECT_EQ(p.rows[0].calls, 2);
  EXPECT_EQ(p.rows[3].name, "adamw_kernel");
  EXPECT_EQ(p.rows[4].name, "ncclDevKernel_AllGather_RING_LL");

  const nlohmann::json j = nlohmann::json::parse(kernel_profile_json(p));
  EXPECT_EQ(j["steps"], 2);
  EXPECT_DOUBLE_EQ(j["per_step_ms"].get<double>(), 0.0005);
  EXPECT_DOUBLE_EQ(j["categories"]["gemm"]["share"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(j["categories"]["idle"]["ms"].get<double>(), 0.00035);
  EXPECT_EQ(j["kernels"].size(), 5u);
  EXPECT_EQ(j["kernels"][0]["category"], "gemm");
  const std::string table = kernel_profile_table(p);
  EXPECT_NE(table.find("idle"), std::string::npos) << table;
  EXPECT_NE(table.find("nvjet_tst_128x256"), std::string::npos) << table;
  EXPECT_THROW(summarize_kernel_profile(a, 2000, 1000, 1), Error);
}

TEST(KernelProfile, ProfileStepsAreParsedAndTheCpuBackendRefusesThem) {
  const ProfileSteps off = parse_profile_steps("", 10);
  EXPECT_FALSE(off.on());
  const ProfileSteps one = parse_profile_steps("4", 10);
  EXPECT_EQ(one.first, 4);
  EXPECT_EQ(one.last, 4);
  const ProfileSteps range = parse_profile_steps("3:10", 10);
  EXPECT_EQ(range.first, 3);
  EXPECT_EQ(range.last, 10);
  for (const char* bad : {"0:2", "3:2", "1:11", "x", "1:", ":3", "-1:2", "+1:2", "2:3:4", "1.5"}) {
    try {
      parse_profile_steps(bad, 10);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--profile-steps"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  auto cpu = make_cpu_backend();
  try {
    StepProfiling profiling(*cpu, range, "/nonexistent", true);
    ADD_FAILURE() << "the CPU backend made a kernel profiler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-steps"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
  StepProfiling idle(*cpu, off, "/nonexistent", true);  // off: nothing asked of the backend
  idle.before_step(1);
  idle.after_step(1);
}

}  // namespace
}  // namespace zt
