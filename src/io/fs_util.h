// Filesystem helpers for writers that must never leave partial output: temporary sibling names,
// fsync, atomic move into place, small text/JSON files.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

// "a/b/" -> "a/b" (keeps "/" itself).
std::string strip_trailing_slashes(const std::string& path);
// The parent directory of `path`, or "" when it has none.
std::string dir_parent(const std::string& path);
// PATH.tmp-<pid>: where a writer builds its output before the final rename.
std::string temp_sibling(const std::string& path);

// Refuses an output directory that exists and is non-empty (or is not a directory) unless
// overwrite is set.
void check_output_dir_writable(const std::string& dir, bool overwrite);
// Refuses an output file that exists (or is a directory) unless overwrite is set.
void check_output_file_writable(const std::string& file, bool overwrite);

// Writes a text file and fsyncs it; throws zt::Error naming it.
void write_text_file(const std::string& path, const std::string& text);
// Parses a JSON file; errors name the file.
nlohmann::json read_json_file(const std::string& path);
// fsync(2) on a file or directory.
void fsync_path(const std::string& path);

// Renames `tmp` to `target` (file or directory). An existing target is replaced only when
// overwrite is set (or it is an empty directory); the old one is removed after the rename.
void move_into_place(const std::string& tmp, const std::string& target, bool overwrite);

}  // namespace zt
