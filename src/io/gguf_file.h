// GGUF files (llama.cpp's format, versions 2 and 3, little-endian): the header, the metadata
// key-value pairs, the tensor infos and the tensor data, read and written.
//
//   "GGUF", version:u32, tensor count:u64, metadata count:u64
//   metadata: key:string, value type:u32, value (strings are u64 length + bytes; an array is
//             element type:u32, count:u64, elements)
//   tensor infos: name:string, n_dims:u32, dims:u64[n_dims] (innermost first), type:u32,
//                 offset:u64 (from the data section's start, aligned)
//   padding to general.alignment (32 by default), then the data section.
//
// A tensor of Hugging Face shape [out, in] is stored with dims [in, out]: its rows are the same
// bytes in the same order. Reading checks every count, length and offset against the file's size
// before using it, so a damaged or hostile file is an error naming it, never a crash.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf_quants.h"

namespace zt {

// GGUF's metadata value types.
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value: its GGUF type (an array's element type in `element_type`) and the value
// as JSON (numbers, booleans, strings, arrays of them).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint32;
  GgufValueType element_type = GgufValueType::kUint32;  // for arrays
  nlohmann::json value;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // innermost first: dims[0] is a row's length
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // in the file
  int64_t numel = 0;
  int64_t bytes = 0;
  int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  int64_t rows() const { return numel / row_length(); }
  // The shape as Hugging Face writes it (outermost first).
  std::vector<int64_t> hf_shape() const { return {dims.rbegin(), dims.rend()}; }
};

class GgufReader {
 public:
  explicit GgufReader(std::string path);
  ~GgufReader();
  GgufReader(const GgufReader&) = delete;
  GgufReader& operator=(const GgufReader&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool has(const std::string& key) const { return metadata_.count(key) > 0; }
  // A metadata value, checked to be of one of the JSON kinds asked for; errors name the file and
  // the key.
  const nlohmann::json& value(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  std::string string(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;

  // Rows [row, row + count) of a tensor, dequantized to fp32.
  void read_rows(const GgufTensorInfo& t, int64_t row, int64_t count, float* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

// Writes a GGUF version 3 file: the metadata in the order given, then the tensor infos, then each
// tensor's bytes from `write_tensor`, which fills a buffer of exactly the tensor's bytes. Written
// under a temporary name, fsynced and renamed into place: the file appears only when whole.
struct GgufTensorToWrite {
  std::string name;
  std::vector<int64_t> dims;  // innermost first
  GgmlType type;
};
void write_gguf_file(
    const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
    const std::vector<GgufTensorToWrite>& tensors,
    const std::function<void(size_t tensor, std::vector<uint8_t>& bytes)>& write_tensor);

}  // namespace zt
