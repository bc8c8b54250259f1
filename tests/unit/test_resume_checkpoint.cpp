// --resume's checkpoint (checkpoint/checkpoint.h): "auto" through OUT/checkpoints/latest, a named
// directory as written, and a run's directory, its checkpoints root or `latest` through the tag,
// as DeepSpeed's load_checkpoint and zero_to_fp32 read one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// --resume: "auto" follows `latest`, or without it takes the newest complete checkpoint (not a
// newer one missing its manifest) and says so; a named directory is taken as written, "step-N/."
// included, and one without a manifest is refused.
TEST(ResumeCheckpoint, AutoFollowsLatestOrTheNewestCompleteAndANamedOneIsNormalised) {
  const fs::path out = fs::temp_directory_path() / ("zt_resume_" + std::to_string(getpid()));
  const fs::path root = out / "checkpoints";
  fs::remove_all(out);
  std::string note;
  EXPECT_EQ(resolve_resume_checkpoint("auto", out.string(), &note), "");
  EXPECT_EQ(note, "");
  for (int64_t step : {2, 4, 6}) {
    fs::create_directories(root / checkpoint_step_dir_name(step));
    if (step != 6) std::ofstream(root / checkpoint_step_dir_name(step) / kCheckpointManifestFile);
  }
  const std::string step2 = (root / checkpoint_step_dir_name(2)).string();
  const std::string step4 = (root / checkpoint_step_dir_name(4)).string();
  EXPECT_EQ(resolve_resume_checkpoint("auto", out.string(), &note), step4);
  EXPECT_NE(note.find("is missing; resuming from the newest complete checkpoint"),
            std::string::npos)
      << note;
  point_latest_at(step2 + "/");
  note.clear();
  EXPECT_EQ(resolve_resume_checkpoint("auto", out.string(), &note), step2);
  EXPECT_EQ(note, "");
  EXPECT_EQ(resolve_resume_checkpoint(step4 + "/.", out.string()), step4);
  EXPECT_EQ(resolve_resume_checkpoint(step4 + "//", out.string()), step4);
  EXPECT_EQ(resolve_resume_checkpoint("none", out.string()), "");
  EXPECT_THROW(
      resolve_resume_checkpoint((root / checkpoint_step_dir_name(6)).string(), out.string()),
      Error);
  fs::remove_all(out);
}

// A path that is no checkpoint is followed through `latest`, as DeepSpeed's load_checkpoint and
// zero_to_fp32 read a checkpoints directory: the `latest` file itself, the checkpoints root
// holding it, and the run's output directory each name the checkpoint `latest` names (for
// --resume, consolidate and export); a checkpoint is itself, and any other path stays as given.
TEST(ResumeCheckpoint, ARunDirectoryItsCheckpointsRootAndLatestNameTheCheckpointLatestNames) {
  const fs::path out =
      fs::temp_directory_path() / ("zt_through_latest_" + std::to_string(getpid()));
  const fs::path root = out / "checkpoints";
  fs::remove_all(out);
  for (int64_t step : {2, 4}) {
    fs::create_directories(root / checkpoint_step_dir_name(step));
    std::ofstream(root / checkpoint_step_dir_name(step) / kCheckpointManifestFile);
  }
  const std::string step2 = (root / checkpoint_step_dir_name(2)).string();
  const std::string step4 = (root / checkpoint_step_dir_name(4)).string();
  EXPECT_EQ(checkpoint_dir_through_latest(out.string()), out.string());  // no latest yet
  point_latest_at(step2);
  for (const fs::path& given : {out, root, root / kLatestCheckpointFile})
    EXPECT_EQ(checkpoint_dir_through_latest(given.string()), step2) << given;
  EXPECT_EQ(resolve_resume_checkpoint(out.string() + "/", "elsewhere"), step2);
  EXPECT_EQ(resolve_resume_checkpoint((root / kLatestCheckpointFile).string(), "elsewhere"), step2);
  EXPECT_EQ(checkpoint_dir_through_latest(step4), step4);
  EXPECT_EQ(checkpoint_dir_through_latest((out / "absent").string()), (out / "absent").string());
  std::ofstream(root / kLatestCheckpointFile) << " " << checkpoint_step_dir_name(4) << "\r\n";
  EXPECT_EQ(checkpoint_dir_through_latest(root.string()), step4);  // blanks dropped, as DeepSpeed
  for (const char* bad : {"../../etc\n", "..\n", ".", "\n"}) {
    std::ofstream(root / kLatestCheckpointFile) << bad;
    EXPECT_THROW(checkpoint_dir_through_latest(root.string()), Error) << bad;
  }
  fs::remove_all(out);
}

}  // namespace
}  // namespace zt
