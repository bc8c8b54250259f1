// One rule for every writing command (io/fs_util.h, check_output_apart_from_inputs): an output
// that is an input, holds one or replaces something inside one, directly or through a symlink, is
// refused with --overwrite too, naming both, and every input is left as it was. Before the rule,
// `consolidate RUN/checkpoints/step-N --out RUN/checkpoints --overwrite` deleted every checkpoint
// of the run, and `import D --out D --overwrite` the Hugging Face checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;

class OutputOverlap : public SampleDataSuite<OutputOverlap> {
 public:
  static constexpr const char* kDirPrefix = "zt_output_overlap_";
};

// Every regular file under `root` (or `root` itself) with its size and modification time.
std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> snapshot(const std::string& root) {
  std::map<std::string, std::pair<uintmax_t, fs::file_time_type>> files;
  if (fs::is_regular_file(root)) {
    files[root] = {fs::file_size(root), fs::last_write_time(root)};
    return files;
  }
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) files[e.path()] = {e.file_size(), e.last_write_time()};
  return files;
}

struct Case {
  std::string command;  // with --overwrite
  std::string input;    // what must survive
  std::string named;    // the input's path as the error must name it
};

TEST_F(OutputOverlap, EveryWritingCommandRefusesAnOutputThatOverlapsAnInput) {
  const std::string run = path("run"), model = path("model"), data = path("sample.h5");
  RunResult r = run_zerotrain("train --preset tiny --data " + data + " --out " + run +
                              " --steps 2 --save-every 2 --seq-len 16 --micro-batch 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_zerotrain("export " + run + "/final --out " + path("hf"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::copy(run + "/final", model, fs::copy_options::recursive);
  fs::create_symlink(model, path("model_link"));
  fs::copy_file(ZT_SOURCE_DIR "/inputs/data/sample.txt", path("sample.txt"));
  const std::string ckpt = run + "/checkpoints/step-00000002";
  const std::vector<Case> cases = {
      {"consolidate " + ckpt + " --out " + run + "/checkpoints", run + "/checkpoints", ckpt},
      {"consolidate " + ckpt + " --out " + ckpt, ckpt, ckpt},
      {"import " + path("hf") + " --out " + path("hf"), path("hf"), path("hf")},
      {"import " + path("hf") + " --out " + path("hf") + "/model.safetensors", path("hf"),
       path("hf")},
      {"export " + model + " --out " + model, model, model},
      {"export " + path("model_link") + " --out " + model, model, path("model_link")},
      {"export " + model + " --format gguf --out " + model, model, model},
      {"prepare-data --text " + path("sample.txt") + " --out " + path("sample.txt"),
       path("sample.txt"), path("sample.txt")},
      {"train --model " + model + " --data " + data + " --out " + path("") + " --steps 1", model,
       model},
      {"train --preset tiny --data " + data + " --out " + data + " --steps 1", data, data},
      {"init --config-json " + model + "/config.json --seed 1 --out " + model, model,
       model + "/config.json"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.command);
    const auto before = snapshot(c.input);
    ASSERT_FALSE(before.empty());
    r = run_zerotrain(c.command + " --overwrite");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("'" + c.named + "'"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("would destroy that input"), std::string::npos) << r.output;
    // An argument's error ends the command plainly, not by MPI_Abort (consolidate checked it
    // after starting MPI, and Open MPI's abort banner followed the message).
    EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
    EXPECT_EQ(snapshot(c.input), before) << "the input changed";
  }
  // Outputs beside the inputs are fine, and so is a new one inside an input directory.
  r = run_zerotrain("export " + model + " --format gguf --out " + model + "/model.gguf");
  EXPECT_EQ(r.exit_code, 1) << r.output;  // the tiny preset has no tokenizer; not the overlap rule
  EXPECT_EQ(r.output.find("would destroy"), std::string::npos) << r.output;
  r = run_zerotrain("consolidate " + ckpt + " --out " + path("consolidated"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_zerotrain("export " + path("model_link") + " --out " + path("model_export"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace zt
