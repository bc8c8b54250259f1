// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78; the checksum of iSCSI, ext4
// metadata and many storage formats). Hardware path: the SSE4.2 crc32 instruction, used when the
// CPU reports it at run time; otherwise a table-driven software path (slicing by 8). Both give
// identical results. crc32c("123456789") == 0xE3069283.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

// Extends `crc` (the value returned for the preceding bytes; 0 to start) over `size` bytes.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);
inline uint32_t crc32c(const void* data, size_t size) {
  return crc32c_extend(0, data, size);
}

// The software path alone (for tests that compare both paths).
uint32_t crc32c_extend_software(uint32_t crc, const void* data, size_t size);
// True when crc32c_extend uses the SSE4.2 instruction on this machine.
bool crc32c_hardware_available();

struct FileChecksum {
  uint32_t crc32c = 0;
  uint64_t bytes = 0;
};
// CRC-32C of a whole file's bytes and its size, read in 4 MiB blocks; errors name the file.
FileChecksum crc32c_file(const std::string& path);

// "e3069283": eight lower-case hex digits.
std::string crc32c_hex(uint32_t crc);

}  // namespace zt
