// Helpers of the train/eval end-to-end tests: run the zerotrain binary, read metrics.jsonl.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zt::train_test {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout and stderr together.
inline RunResult run_command(const std::string& cmd_line) {
  const std::string cmd = cmd_line + " 2>&1";
  RunResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The raw text of each "loss" value in metrics.jsonl (to compare runs bit for bit).
inline std::vector<std::string> loss_strings(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& j : read_jsonl(path)) out.push_back(j["loss"].dump());
  return out;
}

inline RunResult run_zerotrain(const std::string& args) {
  return run_command(std::string(ZT_BINARY) + " " + args);
}

// "mpirun ... -np N zerotrain " for Open MPI as root, oversubscribed, shared-memory transport
// only, one OpenMP thread per rank.
inline std::string mpirun_zerotrain(int np) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader "
         "OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1 mpirun --oversubscribe "
         "-np " +
         std::to_string(np) + " " + ZT_BINARY + " ";
}

// prepare-data on inputs/data/sample.txt (byte tokens) into `out`.
inline RunResult prepare_sample_dataset(const std::string& out) {
  return run_zerotrain("prepare-data --text " + std::string(ZT_SOURCE_DIR) +
                       "/inputs/data/sample.txt --out " + out);
}

// A test suite that owns a temporary directory holding sample.h5 (the bundled text, byte
// tokens) for all its tests. Suite names the directory through its kDirPrefix.
template <typename Suite>
class SampleDataSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     (std::string(Suite::kDirPrefix) + std::to_string(getpid())));
    std::filesystem::create_directories(*dir_);
    const RunResult r = prepare_sample_dataset(path("sample.h5"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string path(const std::string& name) { return (*dir_ / name).string(); }
  static bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

  static inline std::filesystem::path* dir_ = nullptr;
};

}  // namespace zt::train_test
