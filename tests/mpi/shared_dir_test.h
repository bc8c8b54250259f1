// A GoogleTest fixture for MPI suites that write files: one temp directory for all ranks, named by
// rank 0's pid (so checkpoint and swap files of every rank meet there), with an nvme/
// subdirectory; created before each test and removed after it.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "comm/mpi_communicator.h"
#include "engine/offload/offload_config.h"

namespace zt::engine_test {

class SharedDirTest : public ::testing::Test {
 protected:
  // Directory name prefix of the suite, e.g. "zt_guarded_".
  virtual const char* dir_prefix() const = 0;

  void SetUp() override {
    int64_t pid = getpid();
    world_.broadcast_blocking(&pid, 1, 0);
    dir_ = std::filesystem::temp_directory_path() / (dir_prefix() + std::to_string(pid));
    world_.barrier();
    if (root()) std::filesystem::create_directories(dir_ / "nvme");
    world_.barrier();
  }
  void TearDown() override {
    world_.barrier();
    if (root()) std::filesystem::remove_all(dir_);
    world_.barrier();
  }
  bool root() const { return world_.rank() == 0; }

  // Optimizer offload to dir_/nvme in `buffers` swap buffers of `tile`-element tiles.
  OffloadConfig nvme_offload(int buffers, int64_t tile) const {
    OffloadConfig nvme;
    nvme.optimizer = OffloadDevice::kNvme;
    nvme.nvme_path = (dir_ / "nvme").string();
    nvme.buffer_count = buffers;
    nvme.sub_group_size = tile;
    return nvme;
  }

  MpiCommunicator world_{MPI_COMM_WORLD};
  std::filesystem::path dir_;
};

}  // namespace zt::engine_test
