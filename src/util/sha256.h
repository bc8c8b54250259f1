// SHA-256 (FIPS 180-4): the digest run.json records for an input file (the DeepSpeed config), the
// same figure `sha256sum FILE` prints. sha256_hex("abc") ==
// "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace zt {

// Incremental hashing: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  std::array<uint8_t, 32> digest();
  std::string hex_digest();  // digest() in lower-case hex

 private:
  void compress(const uint8_t* block);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lower-case hex of the digest of `bytes`.
std::string sha256_hex(const std::string& bytes);
// Lower-case hex of the digest of a whole file, read in blocks; errors name the file.
std::string sha256_file_hex(const std::string& path);

}  // namespace zt
