#include "io/zip_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt {

namespace {

// Signatures of the records read, and the value a field holds when ZIP64's extra field has it.
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64End = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kInZip64_32 = 0xffffffffu;
constexpr uint16_t kInZip64_16 = 0xffff;
constexpr size_t kEndOfDirectoryBytes = 22, kZip64LocatorBytes = 20, kZip64EndBytes = 56;
constexpr size_t kCentralHeaderBytes = 46, kLocalHeaderBytes = 30;
constexpr uint64_t kMaxDirectoryBytes = uint64_t{256} << 20;

// Little-endian fields of a record held in memory; reading past its end is an error.
struct Record {
  const uint8_t* bytes;
  size_t size;
  const std::string& what;
  uint64_t field(size_t offset, size_t width) const {
    ZT_CHECK(offset + width <= size, what + ": a record ends early (truncated or not a zip file)");
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i) v |= uint64_t{bytes[offset + i]} << (8 * i);
    return v;
  }
  uint16_t u16(size_t offset) const { return static_cast<uint16_t>(field(offset, 2)); }
  uint32_t u32(size_t offset) const { return static_cast<uint32_t>(field(offset, 4)); }
  uint64_t u64(size_t offset) const { return field(offset, 8); }
};

std::vector<uint8_t> read_bytes(int fd, uint64_t offset, uint64_t bytes, const std::string& path) {
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  if (bytes > 0) read_exact(fd, offset, out.data(), out.size(), path);
  return out;
}

struct DirectoryPlace {
  uint64_t offset = 0, bytes = 0, count = 0;
};

// The end-of-central-directory record (the last one in the file's final 64 KiB + 22 bytes) and,
// where its fields overflow, the ZIP64 record its locator points to.
DirectoryPlace find_directory(int fd, uint64_t file_size, const std::string& path) {
  const std::string what = "'" + path + "'";
  ZT_CHECK(file_size >= kEndOfDirectoryBytes, what + " is too short to be a zip archive");
  const uint64_t tail = std::min<uint64_t>(file_size, 65535 + kEndOfDirectoryBytes);
  const std::vector<uint8_t> end = read_bytes(fd, file_size - tail, tail, path);
  const Record all{end.data(), end.size(), what};
  size_t at = end.size() - kEndOfDirectoryBytes + 1;
  do {
    --at;
  } while (at > 0 && all.u32(at) != kEndOfDirectory);
  ZT_CHECK(all.u32(at) == kEndOfDirectory,
           what + " has no zip end-of-directory record (truncated, or not a zip archive)");
  const Record eocd{end.data() + at, end.size() - at, what};
  DirectoryPlace place{eocd.u32(16), eocd.u32(12), eocd.u16(10)};
  const bool zip64 =
      place.offset == kInZip64_32 || place.bytes == kInZip64_32 || place.count == kInZip64_16;
  if (!zip64) return place;
  const uint64_t eocd_at = file_size - tail + at;
  ZT_CHECK(eocd_at >= kZip64LocatorBytes, what + ": the ZIP64 locator is missing");
  const std::vector<uint8_t> locator_bytes =
      read_bytes(fd, eocd_at - kZip64LocatorBytes, kZip64LocatorBytes, path);
  const Record locator{locator_bytes.data(), locator_bytes.size(), what};
  ZT_CHECK(locator.u32(0) == kZip64Locator, what + ": the ZIP64 locator is missing");
  const uint64_t record_at = locator.u64(8);
  ZT_CHECK(file_size >= kZip64EndBytes && record_at <= file_size - kZip64EndBytes,
           what + ": the ZIP64 record is past the end");
  const std::vector<uint8_t> record_bytes = read_bytes(fd, record_at, kZip64EndBytes, path);
  const Record record{record_bytes.data(), record_bytes.size(), what};
  ZT_CHECK(record.u32(0) == kZip64End, what + ": no ZIP64 record where the locator points");
  return DirectoryPlace{record.u64(48), record.u64(40), record.u64(32)};
}

// The sizes and offset a central header holds, from its ZIP64 extra field where they overflow.
void read_zip64_extra(const Record& header, size_t extra_at, size_t extra_bytes, uint64_t& size,
                      uint64_t& compressed, uint64_t& local_offset) {
  size_t at = extra_at;
  while (at + 4 <= extra_at + extra_bytes) {
    const uint16_t id = header.u16(at), bytes = header.u16(at + 2);
    ZT_CHECK(at + 4 + bytes <= extra_at + extra_bytes,
             header.what + ": an extra field runs past its entry's");
    if (id == 0x0001) {
      size_t field = at + 4;
      for (uint64_t* value : {&size, &compressed, &local_offset}) {
        if (*value != kInZip64_32) continue;
        ZT_CHECK(field + 8 <= at + 4 + bytes, header.what + ": a ZIP64 extra field ends early");
        *value = header.u64(field);
        field += 8;
      }
      return;
    }
    at += 4 + bytes;
  }
}

}  // namespace

bool starts_as_zip(const std::string& path) {
  return leading_bytes(path, 4) == kZipMagic;
}

StoredZipArchive::StoredZipArchive(std::string path) : path_(std::move(path)) {
  ReadOnlyFile file(path_);
  struct stat st {};
  ZT_CHECK(::fstat(file.fd, &st) == 0, "cannot stat '" + path_ + "': " + errno_text(errno));
  file_size_ = static_cast<uint64_t>(st.st_size);
  const DirectoryPlace place = find_directory(file.fd, file_size_, path_);
  const std::string what = "'" + path_ + "'";
  ZT_CHECK(place.offset <= file_size_ && place.bytes <= file_size_ - place.offset,
           what + ": the zip directory lies past the end of the file (truncated?)");
  ZT_CHECK(place.bytes <= kMaxDirectoryBytes, what + ": the zip directory holds " +
                                                  std::to_string(place.bytes) +
                                                  " bytes, more than a PyTorch checkpoint's (" +
                                                  std::to_string(kMaxDirectoryBytes) + ")");
  const std::vector<uint8_t> dir = read_bytes(file.fd, place.offset, place.bytes, path_);
  size_t at = 0;
  for (uint64_t i = 0; i < place.count; ++i) {
    const Record h{dir.data() + at, dir.size() - at, what};
    ZT_CHECK(h.u32(0) == kCentralHeader,
             what + ": zip directory entry " + std::to_string(i) + " is damaged");
    const size_t name_bytes = h.u16(28), extra_bytes = h.u16(30), comment_bytes = h.u16(32);
    ZT_CHECK(kCentralHeaderBytes + name_bytes + extra_bytes + comment_bytes <= h.size,
             what + ": zip directory entry " + std::to_string(i) + " ends early");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(h.bytes + kCentralHeaderBytes), name_bytes);
    uint64_t compressed = h.u32(20), local_offset = h.u32(42);
    e.size = h.u32(24);
    read_zip64_extra(h, kCentralHeaderBytes + name_bytes, extra_bytes, e.size, compressed,
                     local_offset);
    const std::string entry = what + ": entry '" + e.name + "'";
    ZT_CHECK((h.u16(8) & 1) == 0, entry + " is encrypted");
    e.method = h.u16(10);
    ZT_CHECK(e.method != 0 || compressed == e.size,
             entry + " is stored with a size that differs from its compressed size");
    ZT_CHECK(local_offset <= file_size_ && file_size_ - local_offset >= kLocalHeaderBytes,
             entry + " lies past the end of the file (truncated?)");
    const std::vector<uint8_t> local_bytes =
        read_bytes(file.fd, local_offset, kLocalHeaderBytes, path_);
    const Record local{local_bytes.data(), local_bytes.size(), entry};
    ZT_CHECK(local.u32(0) == kLocalHeader && local.u16(26) == name_bytes,
             entry + ": its local header does not match the directory");
    e.data_offset = local_offset + kLocalHeaderBytes + name_bytes + local.u16(28);
    ZT_CHECK(e.data_offset <= file_size_ && compressed <= file_size_ - e.data_offset,
             entry + " (" + std::to_string(compressed) + " bytes) runs past the end of the file " +
                 "(truncated?)");
    ZT_CHECK(entries_.emplace(e.name, e).second, entry + " appears twice");
    at += kCentralHeaderBytes + name_bytes + extra_bytes + comment_bytes;
  }
}

const ZipEntry* StoredZipArchive::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

void StoredZipArchive::check_stored(const ZipEntry& entry) const {
  ZT_CHECK(entry.method == 0, "'" + path_ + "': entry '" + entry.name + "' is compressed (method " +
                                  std::to_string(entry.method) +
                                  "); torch.save stores its entries uncompressed, and zerotrain "
                                  "reads only such");
}

std::string StoredZipArchive::read_entry(const ZipEntry& entry, uint64_t limit) const {
  check_stored(entry);
  ZT_CHECK(entry.size <= limit, "'" + path_ + "': entry '" + entry.name + "' holds " +
                                    std::to_string(entry.size) + " bytes, more than the " +
                                    std::to_string(limit) + " expected");
  ReadOnlyFile file(path_);
  std::string out(static_cast<size_t>(entry.size), '\0');
  if (!out.empty()) read_exact(file.fd, entry.data_offset, out.data(), out.size(), path_);
  return out;
}

}  // namespace zt
