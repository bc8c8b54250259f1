#include "io/run_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

RunDirectoryLock::RunDirectoryLock(const std::string& dir)
    : dir_(dir), path_(dir + "/" + kRunLockFile) {
  std::error_code ec;
  created_dir_ = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  ZT_CHECK(!ec, "cannot create the run directory '" + dir + "' (--out): " + ec.message() +
                    write_failure_cause(dir));
  // Locked, and still the file at path_: a run that failed may unlink its lock file between our
  // open and our lock, which would leave us holding a file no later run can see.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    created_file_ = fd_ >= 0;
    if (fd_ < 0 && errno == EEXIST) fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_ < 0) {
      const std::string why = std::strerror(errno);
      discard_what_was_created();
      fail("cannot create the lock file '" + path_ + "': " + why);
    }
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (fcntl(fd_, F_SETLK, &lock) != 0) {
      const int error = errno;
      char holder[256] = {};
      const ssize_t n = pread(fd_, holder, sizeof holder - 1, 0);
      ::close(fd_);
      fd_ = -1;
      std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
      while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
      ZT_CHECK(error != EAGAIN && error != EACCES,
               "output directory '" + dir + "' is in use by another run (" +
                   (who.empty() ? std::string("holder unknown") : who) + "; lock file '" + path_ +
                   "'); wait for it to end or choose another --out");
      fail("cannot lock '" + path_ + "': " + std::strerror(error));
    }
    struct stat held {
    }, named{};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino)
      break;
    ::close(fd_);
    fd_ = -1;
    ZT_CHECK(attempt < 10, "cannot lock '" + path_ + "': the file keeps being replaced");
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string who = "host " + std::string(host) + " pid " + std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 ||
      pwrite(fd_, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const std::string why = std::strerror(errno);
    discard_what_was_created();
    ::close(fd_);
    fd_ = -1;
    fail("cannot write the lock file '" + path_ + "': " + why);
  }
}

void RunDirectoryLock::discard_what_was_created() {
  std::error_code ec;
  if (created_file_) fs::remove(path_, ec);
  if (created_dir_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ < 0) return;
  if (!keep_) discard_what_was_created();  // while still holding the lock: the file is ours
  ::close(fd_);                            // closing releases the lock
}

bool run_directory_is_empty(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename() != kRunLockFile) return false;
  return true;
}

bool holds_zerotrain_run(const std::string& dir) {
  std::error_code ec;
  for (const char* mark : {"run.json", "metrics.jsonl", "checkpoints", "final"})
    if (fs::exists(fs::path(dir) / mark, ec)) return true;
  return false;
}

void clear_previous_run(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || run_directory_is_empty(dir)) return;
  ZT_CHECK(holds_zerotrain_run(dir),
           "--overwrite: '" + dir +
               "' is not empty and holds no zerotrain run (no run.json, metrics.jsonl, "
               "checkpoints/ or final/); refusing to delete its files");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename() == kRunLockFile) continue;
    fs::remove_all(entry.path(), ec);
    ZT_CHECK(!ec, "--overwrite: cannot remove '" + entry.path().string() + "': " + ec.message());
  }
}

}  // namespace zt
