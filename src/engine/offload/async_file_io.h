// Asynchronous positional reads/writes on one file: io_uring when built with liburing, else a
// small pread/pwrite thread pool (also with ZT_NVME_IO=threads). Each request carries a ticket (the
// caller's buffer slot, at most one request in flight per ticket); wait(ticket) returns once it
// completed in full and throws zt::Error naming the file on an error or a short transfer (e.g. a
// full disk).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zt {

class AsyncFileIo {
 public:
  virtual ~AsyncFileIo() = default;
  virtual void submit(bool write, void* buffer, size_t bytes, int64_t offset, int ticket) = 0;
  virtual void wait(int ticket) = 0;
  virtual const char* engine_name() const = 0;  // "io_uring" | "thread pool"
};

// fd stays owned by the caller; `tickets` bounds the ticket ids (0..tickets-1).
std::unique_ptr<AsyncFileIo> make_async_file_io(int fd, const std::string& path, int tickets);

}  // namespace zt
