#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/fs_util.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this writer copies memory as is");

namespace {

constexpr const char* kMetadataKey = "__metadata__";

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
      {"I32", 4},  {"U32", 4}, {"F32", 4}, {"I64", 8}, {"U64", 8}, {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t safetensors_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string safetensors_dtype_of(DType t) {
  switch (t) {
    case DType::kBf16:
      return "BF16";
    case DType::kFloat32:
      return "F32";
    default:
      fail(std::string("no safetensors dtype for ") + dtype_name(t));
  }
}

std::string safetensors_header(std::vector<SafetensorsEntry>& tensors,
                               const nlohmann::json& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (SafetensorsEntry& t : tensors) {
    const size_t size = safetensors_dtype_size(t.dtype);
    ZT_CHECK(size > 0, "tensor '" + t.name + "': unknown safetensors dtype '" + t.dtype + "'");
    ZT_CHECK(t.name != kMetadataKey && !header.contains(t.name),
             "tensor name '" + t.name + "' is reserved or repeated");
    t.begin = offset;
    t.end = offset + safetensors_numel(t.shape) * size;
    offset = t.end;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  if (!metadata.is_null()) header[kMetadataKey] = nlohmann::ordered_json::parse(metadata.dump());
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // 8 + N stays a multiple of 8
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFileWriter

SafetensorsFileWriter::SafetensorsFileWriter(std::string path,
                                             std::vector<SafetensorsEntry> tensors)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  const std::string header = safetensors_header(tensors_);
  data_bytes_ = tensors_.empty() ? 0 : tensors_.back().end;
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ZT_CHECK(fd_ >= 0, "cannot create '" + path_ + "': " + errno_text());
  write_all(fd_, header.data(), header.size(), path_);
}

SafetensorsFileWriter::~SafetensorsFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFileWriter::append(const void* data, size_t bytes) {
  ZT_CHECK(fd_ >= 0, "'" + path_ + "' is already finished");
  ZT_CHECK(written_ + bytes <= data_bytes_, "'" + path_ + "': more tensor data than the header " +
                                                "announces (" + std::to_string(data_bytes_) +
                                                " bytes)");
  write_all(fd_, data, bytes, path_);
  written_ += bytes;
}

void SafetensorsFileWriter::finish() {
  ZT_CHECK(fd_ >= 0, "'" + path_ + "' finished twice");
  ZT_CHECK(written_ == data_bytes_, "'" + path_ + "': " + std::to_string(written_) + " of " +
                                        std::to_string(data_bytes_) + " tensor bytes written");
  ZT_CHECK(::fsync(fd_) == 0, "fsync failed on '" + path_ + "': " + errno_text());
  const int rc = ::close(fd_);
  fd_ = -1;
  ZT_CHECK(rc == 0, "cannot close '" + path_ + "': " + errno_text());
}

// ---------------------------------------------------------------------------------------------
// SafetensorsReader

namespace {

// One tensor's entry of a safetensors header: {"dtype": STRING, "shape": [UINT, ...],
// "data_offsets": [BEGIN, END]}, each field checked for its type, naming the tensor and the field.
SafetensorsEntry header_entry(const std::string& name, const nlohmann::json& value,
                              const std::string& path) {
  const std::string where = "'" + path + "': tensor '" + name + "'";
  ZT_CHECK(value.is_object(),
           where + " is not an object ({\"dtype\", \"shape\", \"data_offsets\"})");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    ZT_CHECK(value.contains(key), where + " has no '" + key + "'");
  const auto whole_numbers = [&](const char* key) {
    const nlohmann::json& v = value.at(key);
    ZT_CHECK(v.is_array(), where + ": '" + key + "' must be an array, got " + quoted_json(v));
    std::vector<uint64_t> out;
    for (const nlohmann::json& x : v) {
      ZT_CHECK(x.is_number_unsigned() || (x.is_number_integer() && x.get<int64_t>() >= 0),
               where + ": '" + key + "' holds " + quoted_json(x) + ", not a whole number >= 0");
      out.push_back(x.get<uint64_t>());
    }
    return out;
  };
  SafetensorsEntry t;
  t.name = name;
  ZT_CHECK(value.at("dtype").is_string(),
           where + ": 'dtype' must be a string, got " + quoted_json(value.at("dtype")));
  t.dtype = value.at("dtype").get<std::string>();
  uint64_t numel = 1;
  for (uint64_t dim : whole_numbers("shape")) {
    ZT_CHECK(dim <= (uint64_t{1} << 48) && !__builtin_mul_overflow(numel, dim, &numel) &&
                 numel <= (uint64_t{1} << 48),
             where + ": 'shape' is beyond what a tensor can be");
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  const std::vector<uint64_t> offsets = whole_numbers("data_offsets");
  ZT_CHECK(offsets.size() == 2, where + " needs data_offsets [begin, end]");
  t.begin = offsets[0];
  t.end = offsets[1];
  return t;
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  ZT_CHECK(fs::is_regular_file(path_, ec), "'" + path_ + "' is not a file");
  const uint64_t file_size = fs::file_size(path_, ec);
  ZT_CHECK(!ec && file_size >= 8, "'" + path_ + "' is too short for a safetensors file");
  ReadOnlyFile file(path_);
  uint8_t prefix[8];
  read_exact(file.fd, 0, prefix, 8, path_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  ZT_CHECK(n <= kMaxSafetensorsHeaderBytes && 8 + n <= file_size,
           "'" + path_ + "': header length " + std::to_string(n) + " does not fit the file (" +
               std::to_string(file_size) + " bytes)");
  header_bytes_ = 8 + n;
  std::string text(n, '\0');
  read_exact(file.fd, 8, text.data(), n, path_);
  const nlohmann::json header =
      parse_json(text, "'" + path_ + "': the header", {.reject_duplicate_keys = true});
  ZT_CHECK(header.is_object(), "'" + path_ + "': the header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      metadata_ = value;
      continue;
    }
    SafetensorsEntry t = header_entry(name, value, path_);
    const size_t size = safetensors_dtype_size(t.dtype);
    ZT_CHECK(size > 0, "'" + path_ + "': tensor '" + name + "' has unknown dtype " + t.dtype);
    for (int64_t s : t.shape)
      ZT_CHECK(s >= 0, "'" + path_ + "': tensor '" + name + "' has a negative dimension");
    ZT_CHECK(t.end >= t.begin && t.end - t.begin == safetensors_numel(t.shape) * size,
             "'" + path_ + "': tensor '" + name + "': data_offsets [" + std::to_string(t.begin) +
                 ", " + std::to_string(t.end) + ") do not match its dtype and shape");
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const SafetensorsEntry& t : tensors_) {
    ZT_CHECK(t.begin == expected, "'" + path_ + "': tensor '" + t.name + "' starts at " +
                                      std::to_string(t.begin) + ", expected " +
                                      std::to_string(expected) + " (offsets must be contiguous)");
    expected = t.end;
  }
  ZT_CHECK(header_bytes_ + expected == file_size,
           "'" + path_ + "': the tensors end at byte " + std::to_string(header_bytes_ + expected) +
               " but the file has " + std::to_string(file_size));
}

const SafetensorsEntry& SafetensorsReader::tensor(const std::string& name) const {
  for (const SafetensorsEntry& t : tensors_)
    if (t.name == name) return t;
  fail("'" + path_ + "' has no tensor '" + name + "'");
}

std::vector<uint8_t> SafetensorsReader::read_bytes(const std::string& name) const {
  const SafetensorsEntry& t = tensor(name);
  std::vector<uint8_t> bytes(t.end - t.begin);
  ReadOnlyFile file(path_);
  read_exact(file.fd, header_bytes_ + t.begin, bytes.data(), bytes.size(), path_);
  return bytes;
}

bool is_readable_weight_dtype(const std::string& dtype) {
  return dtype == "BF16" || dtype == "F16" || dtype == "F32" || dtype == "F64";
}

void SafetensorsReader::read_range_f32(const std::string& name, int64_t begin, int64_t count,
                                       float* out) const {
  const SafetensorsEntry& t = tensor(name);
  const std::string what = "'" + path_ + "': tensor '" + name + "'";
  ZT_CHECK(is_readable_weight_dtype(t.dtype),
           what + " is " + t.dtype + "; zerotrain reads " + kReadableWeightDtypes + " weights");
  const size_t size = safetensors_dtype_size(t.dtype);
  const auto numel = static_cast<int64_t>((t.end - t.begin) / size);
  ZT_CHECK(begin >= 0 && count >= 0 && begin <= numel && count <= numel - begin,
           what + ": elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
               ") are outside its " + std::to_string(numel));
  if (count == 0) return;
  ReadOnlyFile file(path_);
  const uint64_t offset = header_bytes_ + t.begin + static_cast<uint64_t>(begin) * size;
  if (t.dtype == "F32") {  // read in place
    read_exact(file.fd, offset, out, static_cast<size_t>(count) * 4, path_);
    return;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * size);
  read_exact(file.fd, offset, bytes.data(), bytes.size(), path_);
  widen_weights_to_f32(t.dtype, bytes.data(), count, out, what, begin);
}

void widen_weights_to_f32(const std::string& dtype, const uint8_t* bytes, int64_t count, float* out,
                          const std::string& what, int64_t first) {
  const auto n = static_cast<size_t>(count);
  if (dtype == "F32") {
    std::memcpy(out, bytes, n * 4);
  } else if (dtype == "F64") {  // rounded to nearest; a finite value past fp32's range is refused
    for (size_t i = 0; i < n; ++i) {
      double wide;
      std::memcpy(&wide, bytes + 8 * i, 8);
      out[i] = static_cast<float>(wide);
      if (std::isfinite(out[i]) || !std::isfinite(wide)) continue;
      char value[32];
      std::snprintf(value, sizeof value, "%.9g", wide);
      fail(what + ": element " + std::to_string(first + static_cast<int64_t>(i)) + " (" + value +
           ") is past fp32's range");
    }
  } else {
    ZT_CHECK(dtype == "BF16" || dtype == "F16",
             what + " is " + dtype + "; zerotrain reads " + kReadableWeightDtypes + " weights");
    std::vector<uint16_t> half(n);
    std::memcpy(half.data(), bytes, n * 2);
    if (dtype == "BF16") {
      bf16_to_floats(half.data(), out, n);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(half[i]);
    }
  }
}

}  // namespace zt
