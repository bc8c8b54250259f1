// Filesystem helpers for writers that must never leave partial output: temporary sibling names,
// fsync, atomic move into place, small text/JSON files.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace zt {

// "a/b/" -> "a/b" (keeps "/" itself).
std::string strip_trailing_slashes(const std::string& path);
// `path` with "." and ".." resolved lexically and no trailing slash: "a/b/." and "a/b/" are "a/b".
std::string normal_dir_path(const std::string& path);
// The parent directory of `path`, or "" when it has none.
std::string dir_parent(const std::string& path);
// PATH.tmp-<pid>: where a writer builds its output before the final rename.
std::string temp_sibling(const std::string& path);

// Refuses an output directory that exists and is non-empty (or is not a directory) unless
// overwrite is set.
void check_output_dir_writable(const std::string& dir, bool overwrite);
// Refuses an output file that exists (or is a directory) unless overwrite is set.
void check_output_file_writable(const std::string& file, bool overwrite);

// One rule for every command that writes: its output must be apart from every input. Refuses an
// output that is an input, holds one, or replaces something already inside one (both resolved,
// symlinks followed), since writing it, and --overwrite replacing what is there, would destroy
// the input. A new file or directory inside an input directory is allowed. Each input is
// (what it is, path), e.g. {"the checkpoint", "RUN/checkpoints/step-8"}; "" paths are skipped.
void check_output_apart_from_inputs(const std::string& command, const std::string& out,
                                    const std::vector<std::pair<std::string, std::string>>& inputs);

// Refuses to start writing `bytes` under `dir` (or its nearest existing ancestor; "" is ".") when
// its filesystem has less free space, or when the directory is not writable: "No space left on
// device (ENOSPC)", "Permission denied (EACCES)", "Read-only file system (EROFS)", naming
// `what` and the directory. The
// environment variable ZT_DEBUG_SKIP_SPACE_CHECK=1 skips the space check (fault tests: a disk
// that fills up mid-write).
void check_room_to_write(const std::string& dir, uint64_t bytes, const std::string& what);
// Why a write under `path` may have failed, as far as the filesystem tells: " (No space left on
// device (ENOSPC): N bytes free under DIR)", " (Permission denied (EACCES) on DIR)", or "".
std::string write_failure_cause(const std::string& path);

// "No space left on device (ENOSPC)": strerror(e) and, for the errors a writer meets, the symbol
// users search for.
std::string errno_text(int e);
// A std::filesystem error the environment caused (no space, a read-only or foreign file system,
// a permission, a missing path), as "cannot create directories '/x': Read-only file system
// (EROFS)"; "" for any other error, which is a defect to report as such.
std::string environment_filesystem_error_text(const std::filesystem::filesystem_error& e);

// Writes a text file and fsyncs it; throws zt::Error naming it.
void write_text_file(const std::string& path, const std::string& text);
// Parses a JSON file; errors name the file.
nlohmann::json read_json_file(const std::string& path);
// A file opened read-only, closed on scope exit; opening fails naming the file and the cause.
struct ReadOnlyFile {
  explicit ReadOnlyFile(const std::string& path);
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  int fd;
};

// The first `n` bytes of a file (fewer when it is shorter); opening fails naming the file.
std::string leading_bytes(const std::string& path, size_t n);

// pread(2) until `bytes` arrived at `offset`; errors (end of file included) name `path`.
void read_exact(int fd, uint64_t offset, void* out, size_t bytes, const std::string& path);
// write(2) until every byte is written (EINTR retried); errors name `path` and the cause.
void write_all(int fd, const void* data, size_t bytes, const std::string& path);

// fsync(2) on a file or directory.
void fsync_path(const std::string& path);

// Renames `tmp` to `target` (file or directory). An existing target is replaced only when
// overwrite is set (or it is an empty directory); the old one is removed after the rename. A
// non-empty directory is exchanged with `tmp` in one step where the file system can (else moved
// aside first, and moved back if the rename fails), so a reader never finds `target` missing.
void move_into_place(const std::string& tmp, const std::string& target, bool overwrite);

// move_into_place's way where the file system cannot exchange: the directory `target` is moved
// aside, `tmp` renamed into its place and the old one removed; if that rename fails, the old one
// is moved back (or the error names where it is left).
void replace_directory_in_two_steps(const std::string& tmp, const std::string& target);

}  // namespace zt
