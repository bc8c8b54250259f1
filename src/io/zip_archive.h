// A zip archive whose entries are stored, not compressed: what torch.save writes (docs/
// models.md "PyTorch checkpoints"). Reads the central directory (ZIP64 too, for the files of
// more than 4 GiB a 7B model's shards are) and each entry's local header, so that an entry's bytes
// can be read in place. Errors name the archive and the entry.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace zt {

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // where the entry's bytes start in the file
  uint64_t size = 0;
  int method = 0;  // 0: stored; another (8: deflated) cannot be read in place
};

class StoredZipArchive {
 public:
  // Reads the directory of `path`; refuses a file that is not a zip archive, a truncated or
  // inconsistent one (an entry past the end of the file, a local header that disagrees with the
  // directory), and encrypted entries. Compressed entries are listed, and refused when read
  // (check_stored).
  explicit StoredZipArchive(std::string path);

  const std::string& path() const { return path_; }
  const std::map<std::string, ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  // Refuses a compressed entry, naming it.
  void check_stored(const ZipEntry& entry) const;
  // A whole entry, for the small ones (a pickle, a version record); refuses one over `limit`.
  std::string read_entry(const ZipEntry& entry, uint64_t limit) const;

 private:
  std::string path_;
  uint64_t file_size_ = 0;
  std::map<std::string, ZipEntry> entries_;
};

// The four bytes a zip archive starts with (a local header's signature).
inline constexpr char kZipMagic[] = "PK\x03\x04";

// Whether the file starts as a zip archive does (kZipMagic).
bool starts_as_zip(const std::string& path);

}  // namespace zt
