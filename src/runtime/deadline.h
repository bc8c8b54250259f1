// A deadline for a blocking call that no communicator timeout covers (parallel HDF5's collective
// file operations run their own MPI calls). While a Deadline lives, a watcher thread waits; if
// the deadline passes first, it prints a report naming the rank and the operation and ends the
// process at once with exit code 1, which makes the launcher stop the whole job. A Deadline of
// 0 or infinite seconds never fires. Only this thread and the watcher are involved: no MPI call.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace zt {

class Deadline {
 public:
  Deadline(double seconds, std::string operation, int rank);
  ~Deadline();  // disarms and joins the watcher
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

 private:
  std::string operation_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watcher_;
};

}  // namespace zt
