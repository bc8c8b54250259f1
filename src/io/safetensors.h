// Hugging Face safetensors (docs/ARCHITECTURE.md §3 "Consolidated checkpoint": `export --format
// safetensors`). A file is
//
//   8 bytes     N, the header length, unsigned little-endian
//   N bytes     JSON {"<tensor>":{"dtype":"BF16","shape":[...],"data_offsets":[b,e]}, ...,
//               "__metadata__":{"format":"pt"}}, padded with spaces so that 8 + N is a
//               multiple of 8
//   data        every tensor's raw little-endian bytes at [b, e) of this section, contiguous,
//               in header order
//
// A model larger than the shard limit is split at tensor boundaries into
// model-0000k-of-0000K.safetensors plus model.safetensors.index.json
// ({"metadata":{"total_size":N},"weight_map":{tensor: file}}); otherwise it is one
// model.safetensors. config.json (HF LlamaConfig) sits next to them, as in a model directory.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/dtype.h"

namespace zt {

constexpr const char* kSafetensorsFile = "model.safetensors";
constexpr const char* kSafetensorsIndexFile = "model.safetensors.index.json";
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;  // as the reference library

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "BF16", "F32", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the start of the data section
};

// Bytes per element of a safetensors dtype name; 0 when unknown.
size_t safetensors_dtype_size(const std::string& dtype);
// Whether SafetensorsReader::read_range_f32 reads this dtype: BF16, F16, F32, and F64 (rounded
// to fp32 once: what PEFT writes for an adapter trained in float64).
bool is_readable_weight_dtype(const std::string& dtype);
inline constexpr const char* kReadableWeightDtypes = "BF16, F16, F32 or F64";
// `count` little-endian elements of a readable dtype as fp32: BF16 and F16 widened exactly, F64
// rounded to nearest (a finite value past fp32's range is refused, naming `what` and the element,
// counted from `first`); another dtype is refused naming `what`.
void widen_weights_to_f32(const std::string& dtype, const uint8_t* bytes, int64_t count, float* out,
                          const std::string& what, int64_t first);
// The safetensors dtype name of a stored dtype (bf16 "BF16", fp32 "F32"); others fail.
std::string safetensors_dtype_of(DType t);
// Elements of a tensor of this shape.
uint64_t safetensors_numel(const std::vector<int64_t>& shape);

// The 8-byte length prefix and the padded JSON header for these tensors, whose data_offsets it
// assigns (contiguous, in the given order).
std::string safetensors_header(std::vector<SafetensorsEntry>& tensors,
                               const nlohmann::json& metadata = {{"format", "pt"}});

// Writes one safetensors file: the header at construction, then the tensors' bytes in header
// order through append(), then finish() (checks every byte arrived, fsyncs, closes). Errors
// name the file. Without finish() the partial file is left for the caller to remove.
class SafetensorsFileWriter {
 public:
  SafetensorsFileWriter(std::string path, std::vector<SafetensorsEntry> tensors);
  ~SafetensorsFileWriter();
  SafetensorsFileWriter(const SafetensorsFileWriter&) = delete;
  SafetensorsFileWriter& operator=(const SafetensorsFileWriter&) = delete;

  void append(const void* data, size_t bytes);
  void finish();
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::vector<SafetensorsEntry> tensors_;
  int fd_ = -1;
  uint64_t data_bytes_ = 0, written_ = 0;
};

// Reads and validates one safetensors file's header (length, JSON, dtypes, shapes, offsets
// contiguous from 0 to the end of the file); reads tensors' raw bytes on request.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);

  const std::string& path() const { return path_; }
  uint64_t header_bytes() const { return header_bytes_; }  // 8 + N
  const nlohmann::json& metadata() const { return metadata_; }
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }  // offset order
  const SafetensorsEntry& tensor(const std::string& name) const;
  std::vector<uint8_t> read_bytes(const std::string& name) const;
  // Elements [begin, begin+count) of a BF16, F16 or F32 tensor, flattened, widened to fp32
  // (exact), or of an F64 tensor rounded to fp32 (to nearest; a finite value past fp32's range is
  // refused); another dtype or a range outside the tensor is a zt::Error naming the file and
  // tensor.
  void read_range_f32(const std::string& name, int64_t begin, int64_t count, float* out) const;

 private:
  std::string path_;
  uint64_t header_bytes_ = 0;
  nlohmann::json metadata_;
  std::vector<SafetensorsEntry> tensors_;
};

}  // namespace zt
