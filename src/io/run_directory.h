// The run directory of `train` (--out): one run at a time, and --overwrite replaces a previous
// run's files rather than mixing the new run's with them.
#pragma once
#include <string>

namespace zt {

constexpr const char* kRunLockFile = ".zerotrain.lock";

// An exclusive lock on DIR/.zerotrain.lock (an fcntl record lock, which NFS and Lustre honour
// across nodes), held until destruction or the process ends. The file names the holder
// ("host H pid P"), so a second run on the same directory is refused naming the first.
// A run that fails before it writes anything there (keep() not called) leaves no trace: the lock
// file goes if this lock created it, and DIR too if this lock created it and it is empty.
class RunDirectoryLock {
 public:
  explicit RunDirectoryLock(const std::string& dir);  // creates DIR if needed
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

  // The run has begun writing into DIR: the lock file stays when the lock is released.
  void keep() { keep_ = true; }

 private:
  // The lock file and DIR, where this lock created them (a failed start leaves neither).
  void discard_what_was_created();

  int fd_ = -1;
  std::string dir_, path_;
  bool created_dir_ = false, created_file_ = false, keep_ = false;
};

// --overwrite: removes everything in `dir` but the lock file. Refuses a non-empty directory that
// holds no zerotrain run (none of run.json, metrics.jsonl, checkpoints/, final/), so a mistyped
// --out never deletes someone's files.
void clear_previous_run(const std::string& dir);

// Whether `dir` holds a zerotrain run: run.json, metrics.jsonl, checkpoints/ or final/ (what a
// job script writes beside them, its logs, is none).
bool holds_zerotrain_run(const std::string& dir);

// Whether `dir` holds nothing but (possibly) the lock file.
bool run_directory_is_empty(const std::string& dir);

}  // namespace zt
