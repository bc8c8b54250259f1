#include "util/crc32c.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "util/error.h"

namespace zt {

namespace {

constexpr uint32_t kReflectedPolynomial = 0x82F63B78u;

// tables[0] is the classic byte-at-a-time table; tables[k][b] is the CRC of byte b followed by
// k zero bytes, so eight input bytes are folded with eight lookups (slicing by 8).
using SliceTables = std::array<std::array<uint32_t, 256>, 8>;

SliceTables make_tables() {
  SliceTables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kReflectedPolynomial : 0u);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b)
    for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  return t;
}

const SliceTables& tables() {
  static const SliceTables t = make_tables();
  return t;
}

uint64_t load_le64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;  // x86-64 and AArch64 Linux are little-endian
}

// The raw (non-inverted) register update of both paths.
uint32_t software_update(uint32_t c, const uint8_t* p, size_t n) {
  const SliceTables& t = tables();
  while (n >= 8) {
    const uint64_t word = load_le64(p) ^ c;
    c = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
        t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
        t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t hardware_update(uint32_t c, const uint8_t* p, size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    c64 = _mm_crc32_u64(c64, load_le64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool detect_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

}  // namespace

bool crc32c_hardware_available() {
#if defined(__x86_64__)
  static const bool available = detect_sse42();
  return available;
#else
  return false;
#endif
}

uint32_t crc32c_extend_software(uint32_t crc, const void* data, size_t size) {
  return ~software_update(~crc, static_cast<const uint8_t*>(data), size);
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  if (crc32c_hardware_available())
    return ~hardware_update(~crc, static_cast<const uint8_t*>(data), size);
#endif
  return crc32c_extend_software(crc, data, size);
}

FileChecksum crc32c_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ZT_CHECK(fd >= 0, "cannot open '" + path + "' to checksum it: " + std::strerror(errno));
  std::vector<uint8_t> block(4u << 20);
  FileChecksum sum;
  for (;;) {
    const ssize_t got = ::read(fd, block.data(), block.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const std::string reason = std::strerror(errno);
      ::close(fd);
      fail("cannot read '" + path + "' to checksum it: " + reason);
    }
    if (got == 0) break;
    sum.crc32c = crc32c_extend(sum.crc32c, block.data(), static_cast<size_t>(got));
    sum.bytes += static_cast<uint64_t>(got);
  }
  ZT_CHECK(::close(fd) == 0, "cannot close '" + path + "': " + std::strerror(errno));
  return sum;
}

std::string crc32c_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

}  // namespace zt
