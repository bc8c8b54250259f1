// HDF5 failures name their cause (io/hdf5_util.h): a write that the system refuses says why, so
// that a checkpoint lost to a full disk reads "No space left on device", not only "write failed".
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <string>
#include <vector>

#include "io/hdf5_util.h"
#include "util/error.h"

namespace zt {
namespace {

using ::testing::HasSubstr;

// Writes 1 MiB through HDF5 into `path` and closes it; returns the error it threw ("" if none).
std::string error_of_writing_into(const std::string& path) {
  try {
    h5::Id file = h5::create_file(path);
    const std::vector<float> values(1 << 18, 1.5f);
    h5::Id dataset = h5::create_dataset(file, "x", DType::kFloat32,
                                        {static_cast<int64_t>(values.size())}, path + " /x");
    h5::write_box(dataset, DType::kFloat32, {0}, {static_cast<int64_t>(values.size())},
                  values.data(), path + " /x");
    dataset.close(path + " /x");
    file.close(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// /dev/full opens like a file and refuses every write with ENOSPC, as a full disk does.
TEST(Hdf5Errors, AFullDiskIsNamedAsTheCauseOfTheFailedWrite) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no writable /dev/full";
  const std::string error = error_of_writing_into("/dev/full");
  EXPECT_THAT(error, HasSubstr("/dev/full"));
  EXPECT_THAT(error, HasSubstr("(No space left on device)"));
}

// In a child process (the limit is the process's own): writes under a 64 KiB file-size limit and
// prints the error.
[[noreturn]] void write_under_a_file_size_limit(const std::string& path) {
  std::signal(SIGXFSZ, SIG_IGN);  // the write then fails with EFBIG instead of a signal
  const rlimit limit{64 << 10, 64 << 10};
  if (setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(3);
  std::fprintf(stderr, "%s\n", error_of_writing_into(path).c_str());
  std::_Exit(0);
}

// A file-size limit lets the file's creation succeed and makes the dataset's write fail, as a disk
// that fills during a checkpoint does: the write's error carries the system's reason.
TEST(Hdf5Errors, AWriteThatTheSystemRefusesNamesTheSystemsReason) {
  const std::string path =
      ::testing::TempDir() + "zt_hdf5_errors_fsize." + std::to_string(getpid()) + ".h5";
  EXPECT_EXIT(write_under_a_file_size_limit(path), ::testing::ExitedWithCode(0),
              "HDF5 write failed: .*zt_hdf5_errors_fsize\\.[0-9]+\\.h5 /x \\(File too large\\)");
  std::remove(path.c_str());
}

TEST(Hdf5Errors, AMissingDatasetNamesHdf5sReason) {
  const std::string path =
      ::testing::TempDir() + "zt_hdf5_errors." + std::to_string(getpid()) + ".h5";
  EXPECT_EQ(error_of_writing_into(path), "");
  {
    h5::Id file = h5::open_file(path);
    try {
      h5::open_dataset(file, "missing", path + " /missing");
      ADD_FAILURE() << "a missing dataset opened";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(path + " /missing ("));
      EXPECT_EQ(h5::error_cause().empty(), false);
    }
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zt
