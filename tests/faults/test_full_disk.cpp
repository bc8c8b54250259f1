// Writes that fail never hang: a full disk while writing final/ or consolidating (at 1 and 2
// ranks, parallel HDF5) ends the job in bounded time with an error naming ENOSPC, leaves no
// temporary directory, and a later --resume auto writes the final model. Needs a small tmpfs,
// which the test mounts itself; skipped where mounting is not permitted.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_train_support.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class FullDisk : public SampleDataSuite<FullDisk> {
 public:
  static constexpr const char* kDirPrefix = "zt_full_disk_";

 protected:
  void SetUp() override {
    disk_ = path("disk");
    fs::create_directories(disk_);
    if (mount("tmpfs", disk_.c_str(), "tmpfs", 0, "size=3300k") != 0)
      GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << ")";
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) umount2(disk_.c_str(), MNT_DETACH);
  }
  // Fills the disk up to `leave` free bytes.
  void fill(size_t leave) {
    const fs::space_info s = fs::space(disk_);
    std::ofstream out(disk_ + "/fill", std::ios::binary);
    const std::string block(4096, '\0');
    for (size_t left = s.available - leave; left >= block.size(); left -= block.size())
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  static bool has_temp_dir(const std::string& dir) {
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.path().filename().string().find(".tmp") != std::string::npos) return true;
    return false;
  }
  static double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  std::string disk_;
  bool mounted_ = false;
};

TEST_F(FullDisk, FinalModelOnAFullDiskFailsNamingEnospcAndResumeWritesIt) {
  if (!have_mpirun()) GTEST_SKIP() << "no mpirun";
  // Two checkpoints of the tiny model fill most of the 3.3 MB; final/ does not fit.
  const std::string out = disk_ + "/run";
  const std::string args = "train --preset tiny --data " + path("sample.h5") + " --out " + out +
                           " --steps 4 --seq-len 16 --micro-batch 1 --save-every 2 --zero-stage 3 "
                           "--comm-timeout 30";
  auto t0 = Clock::now();
  RunResult r = run_command(mpirun_zerotrain(2) + args);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds_since(t0), 60) << r.output;
  EXPECT_NE(r.output.find("No space left on device (ENOSPC)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(out + "/final"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/final"));
  EXPECT_FALSE(has_temp_dir(out));
  EXPECT_TRUE(fs::exists(out + "/checkpoints/step-00000004/manifest.json"));
  // With room again, the same command resumes at the last step and ends the run: final/ and the
  // report, no step.
  fs::remove_all(out + "/checkpoints/step-00000002");
  r = run_command(mpirun_zerotrain(2) + args + " --resume auto");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("training is complete; finishing the run in " + out), std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(out + "/final/model.h5.index.json"));
  EXPECT_TRUE(fs::exists(out + "/report.json"));
}

TEST_F(FullDisk, ConsolidationThatFillsTheDiskMidWriteEndsWithoutHanging) {
  ASSERT_EQ(
      run_zerotrain("train --preset tiny --data " + path("sample.h5") + " --out " + path("ckpt") +
                    " --steps 1 --seq-len 16 --micro-batch 1 --save-every 1 --overwrite")
          .exit_code,
      0);
  const std::string checkpoint = path("ckpt") + "/checkpoints/step-00000001";
  fill(100 << 10);  // the model needs about 400 KB
  // Refused up front, naming ENOSPC, at 1 rank and at 2 (parallel HDF5).
  for (const std::string& launcher : {std::string(ZT_BINARY) + " ", mpirun_zerotrain(2)}) {
    if (launcher != std::string(ZT_BINARY) + " " && !have_mpirun()) continue;
    const RunResult r = run_command(launcher + "consolidate " + checkpoint + " --out " + disk_ +
                                    "/model --comm-timeout 30");
    EXPECT_EQ(r.exit_code, 1) << r.output;  // an error, not a crash
    EXPECT_NE(r.output.find("No space left on device (ENOSPC): "), std::string::npos) << r.output;
    EXPECT_FALSE(has_temp_dir(disk_)) << r.output;
  }
  // The space check skipped (ZT_DEBUG_SKIP_SPACE_CHECK): the disk fills up mid-write. The job
  // still ends in bounded time, naming ENOSPC and the file, without a temporary directory.
  for (const std::string& launcher : {std::string("ZT_DEBUG_SKIP_SPACE_CHECK=1 ") + ZT_BINARY + " ",
                                      "ZT_DEBUG_SKIP_SPACE_CHECK=1 " + mpirun_zerotrain(2)}) {
    if (launcher.find("mpirun") != std::string::npos && !have_mpirun()) continue;
    const auto t0 = Clock::now();
    const RunResult r = run_command(launcher + "consolidate " + checkpoint + " --out " + disk_ +
                                    "/model --comm-timeout 30");
    EXPECT_EQ(r.exit_code, 1) << r.output;  // an error, not a crash
    EXPECT_LT(seconds_since(t0), 60) << r.output;
    EXPECT_NE(r.output.find("No space left on device (ENOSPC)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("model-00001-of-00001.h5"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(disk_ + "/model"));
    EXPECT_FALSE(has_temp_dir(disk_)) << r.output;
  }
}

// The serial writers (init, import, consolidate --serial at 1 and 2 ranks) on a full disk: refused
// up front naming ENOSPC and the model, and, with that check skipped, failing mid-write with an
// error (exit 1, not a crash) that names the shard file and ENOSPC, leaving no output and no
// temporary directory.
TEST_F(FullDisk, SerialWritersOnAFullDiskFailNamingTheFileAndEnospc) {
  ASSERT_EQ(
      run_zerotrain("train --preset tiny --data " + path("sample.h5") + " --out " + path("serial") +
                    " --steps 1 --seq-len 16 --micro-batch 1 " + "--save-every 1 --overwrite")
          .exit_code,
      0);
  ASSERT_EQ(
      run_zerotrain("export " + path("serial/final") + " --out " + path("serial_hf")).exit_code, 0);
  const std::string checkpoint = path("serial") + "/checkpoints/step-00000001";
  fill(100 << 10);  // the tiny model needs about 400 KB
  std::vector<std::string> commands = {
      std::string(ZT_BINARY) + " init --preset tiny --seed 1 --out " + disk_ + "/model",
      std::string(ZT_BINARY) + " import " + path("serial_hf") + " --out " + disk_ + "/model",
      std::string(ZT_BINARY) + " consolidate " + checkpoint + " --serial --out " + disk_ +
          "/model"};
  if (have_mpirun())
    commands.push_back(mpirun_zerotrain(2) + "consolidate " + checkpoint +
                       " --serial --comm-timeout 30 --out " + disk_ + "/model");
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    RunResult r = run_command(command);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("No space left on device (ENOSPC): "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("model '" + disk_ + "/model'"), std::string::npos) << r.output;
    r = run_command("ZT_DEBUG_SKIP_SPACE_CHECK=1 " + command);
    EXPECT_EQ(r.exit_code, 1) << r.output;  // an error, not a crash
    EXPECT_NE(r.output.find("No space left on device (ENOSPC)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("/shard-1.h5'"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(disk_ + "/model"));
    EXPECT_FALSE(has_temp_dir(disk_)) << r.output;
  }
}

// A read-only output filesystem is named as such by every writer (train said "No such file or
// directory" about its lock file; prepare-data with a tokenizer, and export --format peft or
// consolidate of a LoRA checkpoint, reported an internal error).
TEST_F(FullDisk, ReadOnlyOutputIsNamedByEveryWriter) {
  const std::string data = path("sample.h5"), text = ZT_SOURCE_DIR "/inputs/data/sample.txt";
  const std::string base = path("ro_base"), lora = path("ro_lora");
  ASSERT_EQ(run_zerotrain("init --preset tiny --seed 1 --overwrite --out " + base).exit_code, 0);
  ASSERT_EQ(run_zerotrain("train --model " + base + " --data " + data + " --out " + lora +
                          " --steps 1 --seq-len 16 --micro-batch 1 --save-every 1 --lora-rank 2 "
                          "--overwrite")
                .exit_code,
            0);
  const std::string lora_checkpoint = lora + "/checkpoints/step-00000001";
  ASSERT_EQ(mount(nullptr, disk_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0)
      << std::strerror(errno);
  const std::vector<std::string> commands = {
      "train --preset tiny --data " + data + " --steps 1 --out " + disk_ + "/run",
      "prepare-data --text " + text + " --out " + disk_ + "/d.h5",
      "init --preset tiny --seed 1 --out " + disk_ + "/model",
      "export " + base + " --out " + disk_ + "/hf",
      "export " + lora_checkpoint + " --format peft --out " + disk_ + "/adapter",
      "consolidate " + lora_checkpoint + " --out " + disk_ + "/adapter",
      "export " + base + " --merge-lora " + lora + "/final --out " + disk_ + "/merged",
  };
  for (const std::string& command : commands) {
    const RunResult r = run_zerotrain(command);
    EXPECT_EQ(r.exit_code, 1) << command << ": " << r.output;
    EXPECT_NE(r.output.find("Read-only file system (EROFS)"), std::string::npos)
        << command << ": " << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << command << ": " << r.output;
  }
}

}  // namespace
}  // namespace zt
