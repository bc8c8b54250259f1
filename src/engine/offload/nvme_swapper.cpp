#include "engine/offload/nvme_swapper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>

#include "engine/offload/async_file_io.h"
#include "util/error.h"
#include "util/scratch_files.h"

namespace zt {

namespace {
constexpr int64_t kIoAlign = 4096;  // O_DIRECT: buffer address, length and offset
}  // namespace

int64_t nvme_record_bytes(int64_t count) {
  return (3 * count * 4 + kIoAlign - 1) / kIoAlign * kIoAlign;
}

int64_t nvme_swap_buffer_bytes(int64_t tile) {
  return std::max(kIoAlign, nvme_record_bytes(tile));
}

int64_t nvme_file_bytes(const std::vector<int64_t>& own_sizes, int64_t tile) {
  int64_t total = 0;
  for (const StateTile& t : plan_tiles(own_sizes, tile)) total += nvme_record_bytes(t.count);
  return total;
}

namespace {

class NvmeStateStore final : public OptimizerStateStore {
 public:
  NvmeStateStore(const std::vector<int64_t>& own_sizes, int64_t tile, int buffer_count,
                 std::string path, int fd, MemoryTracker& memory)
      : own_sizes_(own_sizes),
        tiles_(plan_tiles(own_sizes, tile)),
        path_(std::move(path)),
        fd_(fd),
        memory_(memory) {
    int64_t offset = 0;
    for (const StateTile& t : tiles_) {
      offsets_.push_back(offset);
      offset += nvme_record_bytes(t.count);
    }
    file_bytes_ = static_cast<uint64_t>(offset);
    memory_.on_alloc(MemCategory::kNvme, file_bytes_);
    register_scratch_file(path_);  // removed by an abort that skips this destructor
    buffer_bytes_ = static_cast<size_t>(nvme_swap_buffer_bytes(tile));
    try {
      for (int b = 0; b < buffer_count; ++b) {
        void* p = std::aligned_alloc(kIoAlign, buffer_bytes_);
        ZT_CHECK(p != nullptr, "out of host memory for nvme swap buffers");
        std::memset(p, 0, buffer_bytes_);
        buffers_.emplace_back(static_cast<char*>(p), &std::free);
        memory_.on_alloc(MemCategory::kHostOffload, buffer_bytes_);
      }
      io_ = make_async_file_io(fd_, path_, buffer_count);
    } catch (...) {
      release_file_and_counts();  // no destructor runs: the file must not outlive the failure
      throw;
    }
  }
  ~NvmeStateStore() override {
    io_.reset();  // waits for requests in flight
    release_file_and_counts();
  }
  // Closes and removes the swap file; uncounts it and the swap buffers (freed by buffers_).
  void release_file_and_counts() {
    ::close(fd_);
    ::unlink(path_.c_str());
    unregister_scratch_file(path_);
    memory_.on_free(MemCategory::kHostOffload, buffer_bytes_ * buffers_.size());
    memory_.on_free(MemCategory::kNvme, file_bytes_);
  }

  void initialize(int g, const float* master) override {
    for (size_t k = 0; k < tiles_.size(); ++k) {
      if (tiles_[k].group != g) continue;
      const StateTile t = view(k, 0);
      std::memset(buffers_[0].get(), 0, buffer_bytes_);
      std::memcpy(t.master, master + t.begin, static_cast<size_t>(t.count) * 4);
      transfer(true, k, 0);
    }
  }

  void update_tiles(const std::function<void(const StateTile&)>& fn) override {
    const int64_t K = static_cast<int64_t>(tiles_.size()), B = num_buffers();
    const int64_t ahead = std::max<int64_t>(1, B - 2);  // reads in flight beyond tile k
    int64_t next_read = 0;
    for (int64_t k = 0; k < K; ++k) {
      for (; next_read < K && next_read <= k + ahead; ++next_read) {
        const int b = static_cast<int>(next_read % B);
        io_->wait(b);  // the buffer's previous write-back
        start(false, static_cast<size_t>(next_read), b);
      }
      const int b = static_cast<int>(k % B);
      io_->wait(b);
      fn(view(static_cast<size_t>(k), b));
      start(true, static_cast<size_t>(k), b);
    }
    for (int b = 0; b < B; ++b) io_->wait(b);
  }

  OptimizerShard resident(int g) override {
    Staged& s = staged_[g];
    if (s.master.size() == 0) {
      const size_t n = static_cast<size_t>(own_sizes_[static_cast<size_t>(g)]);
      s.master = TrackedBuffer<float>(memory_, MemCategory::kHostOffload, n);
      s.m = TrackedBuffer<float>(memory_, MemCategory::kHostOffload, n);
      s.v = TrackedBuffer<float>(memory_, MemCategory::kHostOffload, n);
      for (size_t k = 0; k < tiles_.size(); ++k) {
        if (tiles_[k].group != g) continue;
        transfer(false, k, 0);
        copy_tile(view(k, 0), s, /*to_stage=*/true);
      }
    }
    return {s.master.data(), s.m.data(), s.v.data(), 0, static_cast<int64_t>(s.master.size())};
  }

  void release(int g, bool write_back) override {
    const auto it = staged_.find(g);
    if (it == staged_.end()) return;
    if (write_back) write_staged(g, it->second);
    staged_.erase(it);
  }

  void flush() override {
    for (auto& [g, s] : staged_) write_staged(g, s);
    staged_.clear();
  }

  uint64_t bytes_read() const override { return read_; }
  uint64_t bytes_written() const override { return written_; }
  uint64_t bytes_on_nvme() const override { return file_bytes_; }

 private:
  struct Staged {
    TrackedBuffer<float> master, m, v;
  };
  int64_t num_buffers() const { return static_cast<int64_t>(buffers_.size()); }
  // Tile k's state inside buffer b (record layout master|m|v).
  StateTile view(size_t k, int b) {
    StateTile t = tiles_[k];
    auto* base = reinterpret_cast<float*>(buffers_[static_cast<size_t>(b)].get());
    t.master = base;
    t.m = base + t.count;
    t.v = base + 2 * t.count;
    return t;
  }
  void start(bool write, size_t k, int b) {
    const size_t bytes = static_cast<size_t>(nvme_record_bytes(tiles_[k].count));
    io_->submit(write, buffers_[static_cast<size_t>(b)].get(), bytes, offsets_[k], b);
    (write ? written_ : read_) += bytes;
  }
  void transfer(bool write, size_t k, int b) {
    io_->wait(b);
    start(write, k, b);
    io_->wait(b);
  }
  void write_staged(int g, Staged& s) {
    for (size_t k = 0; k < tiles_.size(); ++k) {
      if (tiles_[k].group != g) continue;
      std::memset(buffers_[0].get(), 0, buffer_bytes_);
      copy_tile(view(k, 0), s, /*to_stage=*/false);
      transfer(true, k, 0);
    }
  }
  static void copy_tile(const StateTile& t, Staged& s, bool to_stage) {
    const size_t bytes = static_cast<size_t>(t.count) * 4;
    float* staged[3] = {s.master.data() + t.begin, s.m.data() + t.begin, s.v.data() + t.begin};
    float* record[3] = {t.master, t.m, t.v};
    for (int i = 0; i < 3; ++i)
      std::memcpy(to_stage ? staged[i] : record[i], to_stage ? record[i] : staged[i], bytes);
  }

  std::vector<int64_t> own_sizes_;
  std::vector<StateTile> tiles_;
  std::vector<int64_t> offsets_;
  std::string path_;
  int fd_;
  MemoryTracker& memory_;
  size_t buffer_bytes_ = 0;
  uint64_t file_bytes_ = 0, read_ = 0, written_ = 0;
  std::vector<std::unique_ptr<char, decltype(&std::free)>> buffers_;
  std::unique_ptr<AsyncFileIo> io_;
  std::map<int, Staged> staged_;
};

std::string errno_text() {
  return std::strerror(errno);
}

// Opens this rank's swap file; returns the fd. O_DIRECT when the filesystem accepts it.
int open_swap_file(const std::string& dir, const std::string& file, int64_t needed) {
  struct stat st {};
  ZT_CHECK(::stat(dir.c_str(), &st) == 0,
           "nvme_path '" + dir + "': " + errno_text() + " (offload_optimizer.nvme_path)");
  ZT_CHECK(S_ISDIR(st.st_mode), "nvme_path '" + dir + "' is not a directory");
  struct statvfs vfs {};
  ZT_CHECK(::statvfs(dir.c_str(), &vfs) == 0, "nvme_path '" + dir + "': statvfs: " + errno_text());
  int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  // Fault injection for tests: pretend the filesystem has this many free bytes.
  if (const char* fake = std::getenv("ZT_NVME_FAKE_FREE_BYTES")) free_bytes = std::atoll(fake);
  ZT_CHECK(free_bytes >= needed, "nvme_path '" + dir + "' has " + std::to_string(free_bytes) +
                                     " bytes free; this rank's optimizer state needs " +
                                     std::to_string(needed));
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
  int fd = ::open(file.c_str(), flags | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {
    fd = ::open(file.c_str(), flags, 0600);
    if (fd >= 0)
      std::cerr << "warning: nvme_path '" << dir
                << "' does not support O_DIRECT; using buffered I/O (page cache)\n";
  }
  ZT_CHECK(fd >= 0, "cannot create nvme swap file '" + file + "': " + errno_text());
  // Full size from the start (sparse): a record never written reads as zeros instead of short,
  // e.g. when a checkpoint is loaded into an engine that was not initialised.
  if (::ftruncate(fd, static_cast<off_t>(needed)) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    ::unlink(file.c_str());
    fail("cannot size nvme swap file '" + file + "' to " + std::to_string(needed) +
         " bytes: " + why);
  }
  return fd;
}

}  // namespace

std::unique_ptr<OptimizerStateStore> make_nvme_state_store(const std::vector<int64_t>& own_sizes,
                                                           int64_t tile, int buffer_count,
                                                           const std::string& nvme_path,
                                                           Communicator& comm,
                                                           MemoryTracker& memory) {
  char name[64];
  std::snprintf(name, sizeof name, "/zerotrain-rank%05d-%ld.swp", comm.rank(),
                static_cast<long>(::getpid()));
  const std::string file = nvme_path + name;
  std::unique_ptr<OptimizerStateStore> store;
  std::string error;
  try {
    const int fd = open_swap_file(nvme_path, file, nvme_file_bytes(own_sizes, tile));
    try {
      store = std::make_unique<NvmeStateStore>(own_sizes, tile, buffer_count, file, fd, memory);
    } catch (...) {
      ::close(fd);
      ::unlink(file.c_str());
      throw;
    }
  } catch (const Error& e) {
    error = e.what();
  }
  double failed = error.empty() ? 0.0 : 1.0;
  comm.all_reduce_sum_blocking(&failed, 1);
  if (!error.empty()) fail(error);
  ZT_CHECK(failed == 0.0, "nvme offload: " + std::to_string(static_cast<int>(failed)) +
                              " other rank(s) could not set up a swap file under '" + nvme_path +
                              "' (see their errors)");
  return store;
}

}  // namespace zt
