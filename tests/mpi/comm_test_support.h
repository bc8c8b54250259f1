// Shared helpers of the MPI communicator tests: a fixture owning an MpiCommunicator, exact
// rank-dependent sample data per element type and its locally computed sums.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/mpi_communicator.h"
#include "util/bf16.h"

namespace zt {

// A rank number no real rank has: its samples are the junk that collectives must overwrite.
constexpr int kJunkRank = 97;

// Value i of rank `rank`: exact in T, distinct across ranks, and small enough that sums over
// up to 8 ranks are exact in T (so expected sums do not depend on the reduction order).
template <typename T>
T sample(int rank, size_t i) {
  const int64_t k = static_cast<int64_t>(i % 997);
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(0.5 * static_cast<double>((rank + 1) * 1000 + k) - 300.0);
  } else if constexpr (std::is_same_v<T, uint16_t>) {  // bf16 bits
    return float_to_bf16(static_cast<float>(rank) - 0.125f * static_cast<float>(k % 64));
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return static_cast<uint8_t>((rank * 37 + k * 11) & 0x1f);
  } else {
    return static_cast<T>((static_cast<int64_t>(rank) + 1) * (int64_t{1} << 20) - 7 * k);
  }
}

template <typename T>
std::vector<T> samples(int rank, size_t first, size_t count) {
  std::vector<T> values(count);
  for (size_t j = 0; j < count; ++j) values[j] = sample<T>(rank, first + j);
  return values;
}

template <typename T>
std::vector<T> sum_over_ranks(int world, size_t first, size_t count) {
  std::vector<T> sums(count, T{});
  for (int r = 0; r < world; ++r) {
    for (size_t j = 0; j < count; ++j) sums[j] = static_cast<T>(sums[j] + sample<T>(r, first + j));
  }
  return sums;
}

template <typename T>
void append(std::vector<T>& to, const std::vector<T>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

// Test names by dtype ("float32", "bf16", ...).
struct DTypeNames {
  template <typename T>
  static std::string GetName(int) {
    return dtype_name(dtype_of<T>());
  }
};

class CommTest : public testing::Test {
 protected:
  void SetUp() override {
    comm_ = std::make_unique<MpiCommunicator>();
    // A broken test must fail quickly with a report rather than hang until the CTest timeout.
    comm_->set_timeout_seconds(60.0);
  }
  MpiCommunicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int world() const { return comm_->world_size(); }

 private:
  std::unique_ptr<MpiCommunicator> comm_;
};

}  // namespace zt
