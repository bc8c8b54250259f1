#include "io/fs_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

std::string strip_trailing_slashes(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string dir_parent(const std::string& path) {
  return fs::path(strip_trailing_slashes(path)).parent_path().string();
}

std::string temp_sibling(const std::string& path) {
  return strip_trailing_slashes(path) + ".tmp-" + std::to_string(::getpid());
}

void check_output_dir_writable(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  ZT_CHECK(fs::is_directory(dir, ec), "output path '" + dir + "' exists and is not a directory");
  ZT_CHECK(overwrite || fs::is_empty(dir, ec),
           "output directory '" + dir + "' exists and is not empty (use --overwrite)");
}

void check_output_file_writable(const std::string& file, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  ZT_CHECK(!fs::is_directory(file, ec), "output path '" + file + "' is a directory");
  ZT_CHECK(overwrite, "output file '" + file + "' already exists (use --overwrite)");
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
  std::ifstream in(path);
  ZT_CHECK(in.good(), "cannot open '" + path + "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path + ": invalid JSON: " + e.what());
  }
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ZT_CHECK(fd >= 0, "cannot open '" + path + "' to fsync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  ZT_CHECK(rc == 0, "fsync failed on '" + path + "'");
}

void move_into_place(const std::string& tmp, const std::string& target, bool overwrite) {
  std::error_code ec;
  std::string old;
  if (fs::exists(target, ec)) {
    const bool empty_dir = fs::is_directory(target, ec) && fs::is_empty(target, ec);
    ZT_CHECK(overwrite || empty_dir,
             "output '" + target + "' appeared while writing; not replacing it");
    if (!empty_dir && fs::is_directory(target, ec)) {
      old = strip_trailing_slashes(target) + ".old-" + std::to_string(::getpid());
      fs::remove_all(old, ec);
      fs::rename(target, old, ec);
      ZT_CHECK(!ec, "cannot move old '" + target + "' aside: " + ec.message());
    } else if (empty_dir) {
      fs::remove(target, ec);
    }
  }
  fs::rename(tmp, target, ec);
  ZT_CHECK(!ec, "cannot rename '" + tmp + "' to '" + target + "': " + ec.message());
  const std::string parent = dir_parent(target);
  fsync_path(parent.empty() ? "." : parent);
  if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace zt
