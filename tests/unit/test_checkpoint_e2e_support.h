// The checkpoint tests' suite (test_checkpoint_e2e.cpp, test_resume_e2e.cpp): the tiny preset
// trained through the zerotrain binary on sample.h5 in the suite's directory, and what the tests
// read back (files, metrics lines, a model directory's bits).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/model_dir.h"
#include "test_train_support.h"

namespace zt::checkpoint_e2e {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline size_t count_lines(const std::string& path) {
  return read_jsonl(path).size();
}

// Every tensor of a model directory as raw bf16 bits, in layout order.
inline std::vector<std::vector<bf16_t>> model_bits(const std::string& dir) {
  ModelDirReader reader(dir);
  std::vector<std::vector<bf16_t>> out;
  for (const TensorInfo& t : reader.layout().tensors()) {
    out.emplace_back(static_cast<size_t>(t.numel));
    reader.read_tensor_bf16(t.name, out.back().data());
  }
  return out;
}

class CheckpointE2E : public SampleDataSuite<CheckpointE2E> {
 public:
  static constexpr const char* kDirPrefix = "zt_ckpt_e2e_";

 protected:
  // The tiny preset on sample.h5 into OUT=path(out): seq-len 16, micro-batch 2, seed 7.
  static std::string train_args(const std::string& out, int steps, const std::string& extra) {
    return "train --preset tiny --data " + path("sample.h5") + " --out " + path(out) + " --steps " +
           std::to_string(steps) +
           " --seq-len 16 --micro-batch 2 --seed 7 --lr 5e-3 --warmup-steps 2 --log-every 0 " +
           extra;
  }
  static RunResult train(const std::string& out, int steps, const std::string& extra) {
    return run_zerotrain(train_args(out, steps, extra));
  }
  static std::string latest(const std::string& out) {
    std::string name = read_file(path(out) + "/checkpoints/latest");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    return name;
  }
  static std::string checkpoint(const std::string& out, int64_t step) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
    return path(out) + "/checkpoints/" + name;
  }
  // A run stopped after step 2 with a checkpoint there (shared by the refusal tests).
  static std::string base_checkpoint() {
    if (!fs::exists(checkpoint("base", 2))) {
      const RunResult r = train("base", 6, "--save-every 2 --stop-after-step 2");
      EXPECT_EQ(r.exit_code, 124) << r.output;
    }
    return checkpoint("base", 2);
  }
  // A copy of the base checkpoint to damage.
  static std::string copy_of_base(const std::string& name) {
    const std::string copy = path(name);
    fs::remove_all(copy);
    fs::copy(base_checkpoint(), copy, fs::copy_options::recursive);
    return copy;
  }
};

}  // namespace zt::checkpoint_e2e
