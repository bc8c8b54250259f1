// Helpers shared by the io tests: unique temporary directories and running the real binary.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace zt::testing {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("zt_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `zerotrain ARGS` (ARGS already shell-quoted as needed) and captures its output.
inline RunResult run_zerotrain(const std::string& args) {
  static std::atomic<int> counter{0};
  const fs::path log = fs::temp_directory_path() / ("zt_io_run_" + std::to_string(::getpid()) +
                                                    "_" + std::to_string(counter++) + ".log");
  const std::string cmd = std::string(ZT_BINARY) + " " + args + " > '" + log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.output = read_file(log.string());
  std::error_code ec;
  fs::remove(log, ec);
  return r;
}

// True when `path` does not exist and no temporary sibling (PATH.tmp-*) was left behind.
inline bool no_output_left(const std::string& path) {
  const fs::path p(path);
  if (fs::exists(p)) return false;
  const std::string prefix = p.filename().string() + ".tmp-";
  for (const auto& entry : fs::directory_iterator(p.parent_path()))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) return false;
  return true;
}

// Asserts a failed run whose output mentions every one of `culprits`.
inline void expect_failure_naming(const RunResult& r, const std::vector<std::string>& culprits) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  for (const auto& c : culprits)
    EXPECT_NE(r.output.find(c), std::string::npos) << "expected '" << c << "' in: " << r.output;
}

// A path quoted for the shell command run_zerotrain runs.
inline std::string q(const std::string& s) {
  return "'" + s + "'";
}

}  // namespace zt::testing
