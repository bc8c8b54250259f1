// The scratch-file registry (util/scratch_files.h): what an abort removes, and only that.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/scratch_files.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(ScratchFiles, AnAbortRemovesTheRegisteredFilesOnly) {
  const fs::path dir = fs::temp_directory_path() / ("zt_scratch_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string kept = (dir / "kept.swp").string(), swap = (dir / "rank.swp").string(),
                    released = (dir / "released.swp").string();
  for (const std::string& f : {kept, swap, released}) std::ofstream(f) << "state";
  register_scratch_file(swap);
  register_scratch_file(released);
  unregister_scratch_file(released);  // its owner removed it (here: kept it) itself
  remove_scratch_files();
  EXPECT_FALSE(fs::exists(swap));
  EXPECT_TRUE(fs::exists(kept));
  EXPECT_TRUE(fs::exists(released));
  std::ofstream(swap) << "again";
  remove_scratch_files();  // the registry was emptied: nothing more is removed
  EXPECT_TRUE(fs::exists(swap));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
