#include "io/fs_util.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace fs = std::filesystem;

std::string strip_trailing_slashes(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string normal_dir_path(const std::string& path) {
  return strip_trailing_slashes(fs::path(path).lexically_normal().string());
}

std::string dir_parent(const std::string& path) {
  return fs::path(strip_trailing_slashes(path)).parent_path().string();
}

std::string temp_sibling(const std::string& path) {
  return strip_trailing_slashes(path) + ".tmp-" + std::to_string(::getpid());
}

void check_output_dir_writable(const std::string& dir, bool overwrite) {
  ZT_CHECK(!dir.empty(), "the output path is empty (--out '')");
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  ZT_CHECK(fs::is_directory(dir, ec), "output path '" + dir + "' exists and is not a directory");
  ZT_CHECK(overwrite || fs::is_empty(dir, ec),
           "output directory '" + dir + "' exists and is not empty (use --overwrite)");
}

void check_output_file_writable(const std::string& file, bool overwrite) {
  ZT_CHECK(!file.empty(), "the output path is empty (--out '')");
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  ZT_CHECK(!fs::is_directory(file, ec), "output path '" + file + "' is a directory");
  ZT_CHECK(overwrite, "output file '" + file + "' already exists (use --overwrite)");
}

ReadOnlyFile::ReadOnlyFile(const std::string& path)
    : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
  ZT_CHECK(fd >= 0, "cannot open '" + path + "': " + errno_text(errno));
}

ReadOnlyFile::~ReadOnlyFile() {
  ::close(fd);
}

std::string leading_bytes(const std::string& path, size_t n) {
  const ReadOnlyFile file(path);
  std::string out(n, '\0');
  const ssize_t got = ::pread(file.fd, out.data(), n, 0);
  out.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return out;
}

std::string errno_text(int e) {
  const char* name = e == ENOSPC   ? "ENOSPC"
                     : e == EACCES ? "EACCES"
                     : e == EROFS  ? "EROFS"
                     : e == EDQUOT ? "EDQUOT"
                     : e == ENOENT ? "ENOENT"
                     : e == EPERM  ? "EPERM"
                                   : nullptr;
  return std::string(std::strerror(e)) + (name ? std::string(" (") + name + ")" : "");
}

std::string environment_filesystem_error_text(const std::filesystem::filesystem_error& e) {
  const std::error_code& code = e.code();
  if (code.category() != std::generic_category() && code.category() != std::system_category())
    return "";
  const std::string cause = errno_text(code.value());
  if (cause.find(" (E") == std::string::npos) return "";  // not one errno_text names
  // libstdc++: "filesystem error: OPERATION: MESSAGE [PATH1] [PATH2]".
  std::string operation = e.what();
  operation = operation.substr(0, operation.find(": " + code.message()));
  const std::string prefix = "filesystem error: ";
  if (operation.rfind(prefix, 0) == 0) operation.erase(0, prefix.size());
  if (!e.path1().empty()) operation += " '" + e.path1().string() + "'";
  if (!e.path2().empty()) operation += " to '" + e.path2().string() + "'";
  return operation + ": " + cause;
}

namespace {

// `path` itself when it exists, else its nearest existing ancestor ("." for a relative path).
std::string existing_ancestor(const std::string& path) {
  std::error_code ec;
  fs::path p = path.empty() ? fs::path(".") : fs::path(path);
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  return p.empty() ? "." : p.string();
}

// Free bytes for an unprivileged writer under `dir`; 0 when statvfs fails.
uint64_t free_bytes(const std::string& dir) {
  struct statvfs s;
  if (statvfs(dir.c_str(), &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

}  // namespace

void check_room_to_write(const std::string& dir, uint64_t bytes, const std::string& what) {
  const std::string base = existing_ancestor(dir);
  ZT_CHECK(access(base.c_str(), W_OK) == 0,
           "cannot write " + what + ": " + errno_text(errno) + " on '" + base + "'");
  // Fault injection for tests: write until the disk is really full (ENOSPC mid-write).
  const char* skip = std::getenv("ZT_DEBUG_SKIP_SPACE_CHECK");
  if (skip && std::string(skip) == "1") return;
  const uint64_t available = free_bytes(base);
  ZT_CHECK(available >= bytes,
           "cannot write " + what + ": No space left on device (ENOSPC): " + std::to_string(bytes) +
               " bytes needed, " + std::to_string(available) + " free under '" + base + "'");
}

std::string write_failure_cause(const std::string& path) {
  const std::string base = existing_ancestor(dir_parent(path));
  if (access(base.c_str(), W_OK) != 0) return " (" + errno_text(errno) + " on '" + base + "')";
  const uint64_t available = free_bytes(base);
  if (available < (uint64_t{1} << 20))
    return " (No space left on device (ENOSPC): " + std::to_string(available) +
           " bytes free under '" + base + "')";
  return "";
}

void write_text_file(const std::string& path, const std::string& text) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ZT_CHECK(out.good(), "cannot create '" + path + "'");
    out << text;
    out.close();
    ZT_CHECK(!out.fail(), "cannot write '" + path + "'");
  }
  fsync_path(path);
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open '" + path + "'");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  ZT_CHECK(!in.bad(), "cannot read '" + path + "'");
  return parse_json(text, path);
}

void read_exact(int fd, uint64_t offset, void* out, size_t bytes, const std::string& path) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    ZT_CHECK(n > 0, "cannot read '" + path + "': " +
                        (n == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    ZT_CHECK(n > 0,
             "cannot write '" + path + "': " + std::strerror(errno) + write_failure_cause(path));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

namespace {

// The path with symlinks resolved as far as it exists, absolute and normalised.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

// Whether `inner` is `outer` or lies below it, component by component.
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

void check_output_apart_from_inputs(
    const std::string& command, const std::string& out,
    const std::vector<std::pair<std::string, std::string>>& inputs) {
  if (out.empty()) return;
  const fs::path output = resolved(out);
  for (const auto& [what, path] : inputs) {
    if (path.empty()) continue;
    const fs::path input = resolved(path);
    // A new file or directory inside an input directory harms nothing; replacing one that is
    // already there may.
    std::error_code ec;
    const bool replaces = fs::exists(output, ec);
    const char* relation = output == input                        ? "is"
                           : is_within(input, output)             ? "holds"
                           : is_within(output, input) && replaces ? "lies inside"
                                                                  : nullptr;
    if (relation)
      fail(command + ": the output '" + out + "' " + relation + " " + what + " '" + path +
           "': writing it would destroy that input; give an output apart from every input");
  }
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "cannot open '" + path + "' to fsync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  ZT_CHECK(rc == 0, "fsync failed on '" + path + "'");
}

namespace {

// Swaps the directories `tmp` and `target` in one step (renameat2's RENAME_EXCHANGE): `target`
// never stops existing. False where the file system cannot (EINVAL, ENOSYS, ENOTSUP).
bool exchange_directories(const std::string& tmp, const std::string& target) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0)
    return true;
  const int e = errno;
  ZT_CHECK(e == EINVAL || e == ENOSYS || e == ENOTSUP,
           "cannot exchange '" + tmp + "' with '" + target + "': " + std::strerror(e));
  return false;
}

}  // namespace

void replace_directory_in_two_steps(const std::string& tmp, const std::string& target) {
  const std::string old = strip_trailing_slashes(target) + ".old-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(old, ec);
  fs::rename(target, old, ec);
  ZT_CHECK(!ec, "cannot move old '" + target + "' aside: " + ec.message());
  fs::rename(tmp, target, ec);
  if (ec) {  // put the old one back: a failed replacement loses nothing
    std::error_code restored;
    fs::rename(old, target, restored);
    fail("cannot rename '" + tmp + "' to '" + target + "': " + ec.message() +
         (restored ? "; the old one is left at '" + old + "'" : ""));
  }
  fs::remove_all(old, ec);
}

void move_into_place(const std::string& tmp, const std::string& target, bool overwrite) {
  std::error_code ec;
  const std::string parent = dir_parent(target);
  bool placed = false;
  if (fs::exists(target, ec)) {
    const bool empty_dir = fs::is_directory(target, ec) && fs::is_empty(target, ec);
    ZT_CHECK(overwrite || empty_dir,
             "output '" + target + "' appeared while writing; not replacing it");
    if (!empty_dir && fs::is_directory(target, ec)) {
      placed = true;
      if (exchange_directories(tmp, target))  // `tmp` now holds the old one
        fs::remove_all(tmp, ec);
      else
        replace_directory_in_two_steps(tmp, target);
    } else if (empty_dir) {
      fs::remove(target, ec);
    }
  }
  if (!placed) {
    fs::rename(tmp, target, ec);
    ZT_CHECK(!ec, "cannot rename '" + tmp + "' to '" + target + "': " + ec.message());
  }
  fsync_path(parent.empty() ? "." : parent);
}

}  // namespace zt
