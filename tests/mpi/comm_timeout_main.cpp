// Run under mpirun -np 2 by tests/mpi/check_comm_timeout.cmake: rank 0 waits on an all_gather
// that rank 1 never issues. With a 1 s timeout, rank 0 must report and abort the whole job.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "runtime/mpi_runtime.h"

int main(int argc, char** argv) {
  zt::MpiRuntime runtime(&argc, &argv);
  zt::MpiCommunicator comm;
  if (comm.world_size() != 2) {
    std::fprintf(stderr, "zt_comm_timeout needs exactly 2 ranks, got %d\n", comm.world_size());
    return 2;
  }
  comm.set_timeout_seconds(1.0);
  comm.set_context(42, "skipped_by_rank_1");
  if (comm.rank() == 0) {
    std::vector<float> send(5, 1.0f);
    std::vector<float> recv(10, 0.0f);
    comm.all_gather(send.data(), recv.data(), send.size()).wait();
    std::fprintf(stderr, "rank 0: all_gather completed although rank 1 never joined it\n");
  } else {
    // Skip the collective; the abort from rank 0 ends this process long before the sleep does.
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  return 0;
}
