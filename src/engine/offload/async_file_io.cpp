#include "engine/offload/async_file_io.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "util/error.h"

#ifdef ZT_HAVE_LIBURING
#include <liburing.h>
#endif

namespace zt {
namespace {

struct Request {
  bool write = false;
  void* buffer = nullptr;
  size_t bytes = 0;
  int64_t offset = 0;
  bool busy = false, done = false;
  int64_t result = 0;  // bytes transferred, or -errno
};

void check_result(const std::string& path, const Request& r) {
  const char* op = r.write ? "write" : "read";
  ZT_CHECK(r.result >= 0, std::string("nvme swap file '") + path + "': " + op + " of " +
                              std::to_string(r.bytes) + " bytes at offset " +
                              std::to_string(r.offset) +
                              " failed: " + std::strerror(static_cast<int>(-r.result)));
  ZT_CHECK(static_cast<size_t>(r.result) == r.bytes,
           std::string("nvme swap file '") + path + "': short " + op + " (" +
               std::to_string(r.result) + " of " + std::to_string(r.bytes) + " bytes at offset " +
               std::to_string(r.offset) + "; disk full?)");
}

// pread/pwrite until done; returns the bytes moved or -errno.
int64_t transfer(int fd, const Request& r) {
  size_t done = 0;
  auto* p = static_cast<char*>(r.buffer);
  while (done < r.bytes) {
    const ssize_t n = r.write ? ::pwrite(fd, p + done, r.bytes - done, r.offset + done)
                              : ::pread(fd, p + done, r.bytes - done, r.offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<int64_t>(done);
}

class ThreadPoolIo final : public AsyncFileIo {
 public:
  ThreadPoolIo(int fd, std::string path, int tickets)
      : fd_(fd), path_(std::move(path)), requests_(static_cast<size_t>(tickets)) {
    for (int i = 0; i < 2; ++i) workers_.emplace_back([this] { run(); });
  }
  ~ThreadPoolIo() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  void submit(bool write, void* buffer, size_t bytes, int64_t offset, int ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    Request& r = requests_[static_cast<size_t>(ticket)];
    r = {write, buffer, bytes, offset, true, false, 0};
    queue_.push_back(ticket);
    cv_.notify_all();
  }
  void wait(int ticket) override {
    std::unique_lock<std::mutex> lock(mu_);
    Request& r = requests_[static_cast<size_t>(ticket)];
    if (!r.busy) return;
    done_cv_.wait(lock, [&] { return r.done; });
    r.busy = false;
    check_result(path_, r);
  }
  const char* engine_name() const override { return "thread pool"; }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const int ticket = queue_.front();
      queue_.pop_front();
      const Request r = requests_[static_cast<size_t>(ticket)];
      lock.unlock();
      const int64_t result = transfer(fd_, r);
      lock.lock();
      requests_[static_cast<size_t>(ticket)].result = result;
      requests_[static_cast<size_t>(ticket)].done = true;
      done_cv_.notify_all();
    }
  }
  int fd_;
  std::string path_;
  std::vector<Request> requests_;
  std::deque<int> queue_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

#ifdef ZT_HAVE_LIBURING
class UringIo final : public AsyncFileIo {
 public:
  UringIo(int fd, std::string path, int tickets)
      : fd_(fd), path_(std::move(path)), requests_(static_cast<size_t>(tickets)) {
    const int rc = io_uring_queue_init(static_cast<unsigned>(std::max(tickets, 2)), &ring_, 0);
    ZT_CHECK(rc == 0,
             "nvme swap file '" + path_ + "': io_uring_queue_init failed: " + std::strerror(-rc));
  }
  ~UringIo() override {
    for (size_t t = 0; t < requests_.size(); ++t) {
      try {
        wait(static_cast<int>(t));
      } catch (const Error&) {  // already failed; nothing left to do in a destructor
      }
    }
    io_uring_queue_exit(&ring_);
  }
  void submit(bool write, void* buffer, size_t bytes, int64_t offset, int ticket) override {
    Request& r = requests_[static_cast<size_t>(ticket)];
    r = {write, buffer, bytes, offset, true, false, 0};
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    ZT_CHECK(sqe != nullptr, "nvme swap file '" + path_ + "': io_uring submission queue full");
    if (write)
      io_uring_prep_write(sqe, fd_, buffer, static_cast<unsigned>(bytes),
                          static_cast<uint64_t>(offset));
    else
      io_uring_prep_read(sqe, fd_, buffer, static_cast<unsigned>(bytes),
                         static_cast<uint64_t>(offset));
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(ticket));
    const int rc = io_uring_submit(&ring_);
    ZT_CHECK(rc == 1, "nvme swap file '" + path_ +
                          "': io_uring_submit failed: " + std::strerror(rc < 0 ? -rc : EIO));
  }
  void wait(int ticket) override {
    Request& r = requests_[static_cast<size_t>(ticket)];
    if (!r.busy) return;
    while (!r.done) {
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      ZT_CHECK(rc == 0,
               "nvme swap file '" + path_ + "': io_uring_wait_cqe failed: " + std::strerror(-rc));
      Request& c = requests_[static_cast<size_t>(io_uring_cqe_get_data64(cqe))];
      c.result = cqe->res;
      c.done = true;
      io_uring_cqe_seen(&ring_, cqe);
    }
    r.busy = false;
    // A short transfer (no error) is finished synchronously, e.g. a partial write.
    if (r.result >= 0 && static_cast<size_t>(r.result) < r.bytes) {
      Request rest = r;
      rest.buffer = static_cast<char*>(r.buffer) + r.result;
      rest.bytes = r.bytes - static_cast<size_t>(r.result);
      rest.offset = r.offset + r.result;
      const int64_t more = transfer(fd_, rest);
      r.result = more < 0 ? more : r.result + more;
    }
    check_result(path_, r);
  }
  const char* engine_name() const override { return "io_uring"; }

 private:
  int fd_;
  std::string path_;
  std::vector<Request> requests_;
  io_uring ring_{};
};
#endif

}  // namespace

std::unique_ptr<AsyncFileIo> make_async_file_io(int fd, const std::string& path, int tickets) {
#ifdef ZT_HAVE_LIBURING
  const char* choice = std::getenv("ZT_NVME_IO");  // "threads" forces the fallback (tests)
  if (choice && std::string(choice) == "threads")
    return std::make_unique<ThreadPoolIo>(fd, path, tickets);
  return std::make_unique<UringIo>(fd, path, tickets);
#else
  return std::make_unique<ThreadPoolIo>(fd, path, tickets);
#endif
}

}  // namespace zt
