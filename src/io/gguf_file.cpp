#include "io/gguf_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;     // GGML_MAX_DIMS
constexpr int kMaxArrayNesting = 4;  // arrays of arrays: bounded, not recursive without end
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;

// Sequential reads of the header, each checked against the file's size first.
class HeaderCursor {
 public:
  HeaderCursor(int fd, uint64_t size, const std::string& path)
      : fd_(fd), size_(size), path_(path) {}

  uint64_t position() const { return pos_; }
  void need(uint64_t bytes, const std::string& what) const {
    ZT_CHECK(bytes <= size_ - pos_, path_ + ": truncated GGUF header: " + what + " at byte " +
                                        std::to_string(pos_) + " runs past the end of the file (" +
                                        std::to_string(size_) + " bytes)");
  }
  void read(void* out, uint64_t bytes, const std::string& what) {
    need(bytes, what);
    read_exact(fd_, pos_, out, static_cast<size_t>(bytes), path_);
    pos_ += bytes;
  }
  template <typename T>
  T scalar(const std::string& what) {
    T v;
    read(&v, sizeof v, what);
    return v;
  }
  std::string string(const std::string& what) {
    const auto n = scalar<uint64_t>(what + "'s length");
    ZT_CHECK(n <= kMaxStringBytes, path_ + ": " + what + " claims " + std::to_string(n) +
                                       " bytes, more than a GGUF string can be here (1 GiB)");
    std::string s(static_cast<size_t>(n), '\0');
    read(s.data(), n, what);
    return s;
  }

 private:
  int fd_;
  uint64_t size_, pos_ = 0;
  const std::string& path_;
};

nlohmann::json read_scalar(HeaderCursor& in, GgufValueType type, const std::string& what,
                           const std::string& path) {
  switch (type) {
    case GgufValueType::kUint8:
      return in.scalar<uint8_t>(what);
    case GgufValueType::kInt8:
      return in.scalar<int8_t>(what);
    case GgufValueType::kUint16:
      return in.scalar<uint16_t>(what);
    case GgufValueType::kInt16:
      return in.scalar<int16_t>(what);
    case GgufValueType::kUint32:
      return in.scalar<uint32_t>(what);
    case GgufValueType::kInt32:
      return in.scalar<int32_t>(what);
    case GgufValueType::kFloat32:
      return in.scalar<float>(what);
    case GgufValueType::kBool: {
      const auto b = in.scalar<uint8_t>(what);
      ZT_CHECK(b <= 1, path + ": " + what + " is a bool of value " + std::to_string(b));
      return b == 1;
    }
    case GgufValueType::kString:
      return in.string(what);
    case GgufValueType::kUint64:
      return in.scalar<uint64_t>(what);
    case GgufValueType::kInt64:
      return in.scalar<int64_t>(what);
    case GgufValueType::kFloat64:
      return in.scalar<double>(what);
    default:
      fail(path + ": " + what + " has unknown value type " +
           std::to_string(static_cast<uint32_t>(type)));
  }
}

// An array's body: element type, count, elements (a nested array's element is such a body).
nlohmann::json read_array(HeaderCursor& in, GgufValueType* element_type, const std::string& what,
                          const std::string& path, int depth) {
  ZT_CHECK(depth < kMaxArrayNesting, path + ": " + what + " nests arrays more than " +
                                         std::to_string(kMaxArrayNesting) + " deep");
  *element_type = static_cast<GgufValueType>(in.scalar<uint32_t>(what + "'s element type"));
  const auto count = in.scalar<uint64_t>(what + "'s length");
  // Every element takes at least one byte: a count beyond the rest of the file is a lie.
  in.need(count, what + " (" + std::to_string(count) + " elements)");
  nlohmann::json array = nlohmann::json::array();
  for (uint64_t i = 0; i < count; ++i) {
    if (*element_type == GgufValueType::kArray) {
      GgufValueType inner;
      array.push_back(
          read_array(in, &inner, what + "[" + std::to_string(i) + "]", path, depth + 1));
    } else {
      array.push_back(read_scalar(in, *element_type, what, path));
    }
  }
  return array;
}

GgufValue read_value(HeaderCursor& in, const std::string& what, const std::string& path) {
  GgufValue v;
  v.type = static_cast<GgufValueType>(in.scalar<uint32_t>(what + "'s type"));
  v.value = v.type == GgufValueType::kArray ? read_array(in, &v.element_type, what, path, 0)
                                            : read_scalar(in, v.type, what, path);
  return v;
}

uint64_t round_up(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;
}

}  // namespace

GgufReader::GgufReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  ZT_CHECK(fs::is_regular_file(path_, ec), "'" + path_ + "' is not a file");
  file_size_ = fs::file_size(path_, ec);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ZT_CHECK(fd_ >= 0, "cannot open '" + path_ + "': " + std::strerror(errno));
  try {
    HeaderCursor in(fd_, file_size_, path_);
    ZT_CHECK(in.scalar<uint32_t>("the magic") == kMagic,
             path_ + ": not a GGUF file (no 'GGUF' magic)");
    version_ = in.scalar<uint32_t>("the version");
    ZT_CHECK(version_ == 2 || version_ == 3,
             path_ + ": GGUF version " + std::to_string(version_) +
                 (version_ > 0xFFFF ? " (a big-endian file?)" : "") +
                 "; zerotrain reads little-endian versions 2 and 3");
    const auto tensor_count = in.scalar<uint64_t>("the tensor count");
    const auto kv_count = in.scalar<uint64_t>("the metadata count");
    // Each metadata pair and tensor info takes at least 12 bytes.
    in.need(kv_count / 12 + tensor_count / 12, "the metadata and tensor counts");
    for (uint64_t i = 0; i < kv_count; ++i) {
      const std::string key = in.string("metadata key " + std::to_string(i));
      ZT_CHECK(!metadata_.count(key), path_ + ": metadata key '" + key + "' appears twice");
      metadata_[key] = read_value(in, "metadata '" + key + "'", path_);
    }
    uint64_t alignment = kDefaultAlignment;
    if (has("general.alignment")) {
      const int64_t a = integer("general.alignment");
      ZT_CHECK(a > 0 && (a & (a - 1)) == 0 && a <= (1 << 20),
               path_ + ": general.alignment " + std::to_string(a) + " is not a power of two");
      alignment = static_cast<uint64_t>(a);
    }
    for (uint64_t i = 0; i < tensor_count; ++i) {
      GgufTensorInfo t;
      t.name = in.string("tensor name " + std::to_string(i));
      const std::string what = "tensor '" + t.name + "'";
      ZT_CHECK(!find_tensor(t.name), path_ + ": " + what + " appears twice");
      const auto n_dims = in.scalar<uint32_t>(what + "'s dimension count");
      ZT_CHECK(n_dims >= 1 && n_dims <= kMaxDims,
               path_ + ": " + what + " has " + std::to_string(n_dims) + " dimensions (1 to 4)");
      t.numel = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const auto dim = in.scalar<uint64_t>(what + "'s dimensions");
        ZT_CHECK(dim >= 1 && dim <= (uint64_t{1} << 40) &&
                     static_cast<uint64_t>(t.numel) <= (uint64_t{1} << 48) / dim,
                 path_ + ": " + what + " has dimension " + std::to_string(dim) +
                     ", beyond what a tensor can be");
        t.dims.push_back(static_cast<int64_t>(dim));
        t.numel *= static_cast<int64_t>(dim);
      }
      const auto type = in.scalar<uint32_t>(what + "'s type");
      ZT_CHECK(ggml_type_supported(type),
               path_ + ": " + what + " is stored as " + ggml_type_name(type) +
                   "; zerotrain reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, "
                   "Q4_K, Q5_K and Q6_K");
      t.type = static_cast<GgmlType>(type);
      ZT_CHECK(t.dims[0] % ggml_block_elements(t.type) == 0,
               path_ + ": " + what + "'s rows of " + std::to_string(t.dims[0]) +
                   " elements are not whole " + ggml_type_name(type) + " blocks");
      t.bytes = ggml_row_bytes(t.type, t.dims[0]) * t.rows();
      t.offset = in.scalar<uint64_t>(what + "'s offset");
      ZT_CHECK(t.offset % alignment == 0, path_ + ": " + what + "'s offset " +
                                              std::to_string(t.offset) + " is not aligned to " +
                                              std::to_string(alignment));
      tensors_.push_back(std::move(t));
    }
    const uint64_t data_start = round_up(in.position(), alignment);
    for (GgufTensorInfo& t : tensors_) {
      ZT_CHECK(t.offset <= file_size_ && data_start <= file_size_ - t.offset &&
                   static_cast<uint64_t>(t.bytes) <= file_size_ - data_start - t.offset,
               path_ + ": tensor '" + t.name + "' (" + std::to_string(t.bytes) +
                   " bytes at data offset " + std::to_string(t.offset) +
                   ") runs past the end of the file (" + std::to_string(file_size_) +
                   " bytes): truncated?");
      t.offset += data_start;
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

GgufReader::~GgufReader() {
  if (fd_ >= 0) ::close(fd_);
}

const nlohmann::json& GgufReader::value(const std::string& key) const {
  const auto it = metadata_.find(key);
  ZT_CHECK(it != metadata_.end(), path_ + ": no metadata '" + key + "'");
  return it->second.value;
}

int64_t GgufReader::integer(const std::string& key) const {
  const nlohmann::json& v = value(key);
  ZT_CHECK(
      v.is_number_integer() &&
          (v.is_number_unsigned()
               ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               : true),
      path_ + ": metadata '" + key + "' must be an integer, got " + v.dump());
  return v.get<int64_t>();
}

double GgufReader::number(const std::string& key) const {
  const nlohmann::json& v = value(key);
  ZT_CHECK(v.is_number(), path_ + ": metadata '" + key + "' must be a number, got " + v.dump());
  return v.get<double>();
}

std::string GgufReader::string(const std::string& key) const {
  const nlohmann::json& v = value(key);
  ZT_CHECK(v.is_string(), path_ + ": metadata '" + key + "' must be a string");
  return v.get<std::string>();
}

const GgufTensorInfo* GgufReader::find_tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void GgufReader::read_rows(const GgufTensorInfo& t, int64_t row, int64_t count, float* out) const {
  ZT_CHECK(row >= 0 && count >= 0 && row + count <= t.rows(),
           path_ + ": rows [" + std::to_string(row) + ", " + std::to_string(row + count) +
               ") of tensor '" + t.name + "', which has " + std::to_string(t.rows()));
  const int64_t row_bytes = ggml_row_bytes(t.type, t.row_length());
  std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * count));
  read_exact(fd_, t.offset + static_cast<uint64_t>(row * row_bytes), bytes.data(), bytes.size(),
             path_);
  ggml_dequantize(t.type, bytes.data(), t.row_length() * count, out);
}

// ---------------------------------------------------------------------------------------------
// Writing

namespace {

class GgufOutput {
 public:
  GgufOutput(int fd, const std::string& path) : fd_(fd), path_(path) {}
  void bytes(const void* p, size_t n) {
    write_all(fd_, p, n, path_);
    written_ += n;
  }
  template <typename T>
  void scalar(T v) {
    bytes(&v, sizeof v);
  }
  void string(const std::string& s) {
    scalar<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const uint8_t zeros[64] = {};
    uint64_t n = round_up(written_, alignment) - written_;
    while (n > 0) {
      const uint64_t k = std::min<uint64_t>(n, sizeof zeros);
      bytes(zeros, k);
      n -= k;
    }
  }

 private:
  int fd_;
  const std::string& path_;
  uint64_t written_ = 0;
};

void write_scalar(GgufOutput& out, GgufValueType type, const nlohmann::json& v) {
  switch (type) {
    case GgufValueType::kUint8:
      return out.scalar(v.get<uint8_t>());
    case GgufValueType::kInt8:
      return out.scalar(v.get<int8_t>());
    case GgufValueType::kUint16:
      return out.scalar(v.get<uint16_t>());
    case GgufValueType::kInt16:
      return out.scalar(v.get<int16_t>());
    case GgufValueType::kUint32:
      return out.scalar(v.get<uint32_t>());
    case GgufValueType::kInt32:
      return out.scalar(v.get<int32_t>());
    case GgufValueType::kFloat32:
      return out.scalar(v.get<float>());
    case GgufValueType::kBool:
      return out.scalar<uint8_t>(v.get<bool>() ? 1 : 0);
    case GgufValueType::kString:
      return out.string(v.get<std::string>());
    case GgufValueType::kUint64:
      return out.scalar(v.get<uint64_t>());
    case GgufValueType::kInt64:
      return out.scalar(v.get<int64_t>());
    case GgufValueType::kFloat64:
      return out.scalar(v.get<double>());
    default:
      fail("GGUF writer: no nested arrays");
  }
}

}  // namespace

void write_gguf_file(
    const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
    const std::vector<GgufTensorToWrite>& tensors,
    const std::function<void(size_t tensor, std::vector<uint8_t>& bytes)>& write_tensor) {
  const std::string tmp = temp_sibling(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZT_CHECK(fd >= 0,
           "cannot create '" + tmp + "': " + std::strerror(errno) + write_failure_cause(tmp));
  try {
    GgufOutput out(fd, tmp);
    out.scalar(kMagic);
    out.scalar<uint32_t>(3);
    out.scalar<uint64_t>(tensors.size());
    out.scalar<uint64_t>(metadata.size());
    for (const auto& [key, v] : metadata) {
      out.string(key);
      out.scalar(static_cast<uint32_t>(v.type));
      if (v.type != GgufValueType::kArray) {
        write_scalar(out, v.type, v.value);
        continue;
      }
      out.scalar(static_cast<uint32_t>(v.element_type));
      out.scalar<uint64_t>(v.value.size());
      for (const nlohmann::json& e : v.value) write_scalar(out, v.element_type, e);
    }
    std::vector<int64_t> sizes;
    uint64_t offset = 0;
    for (const GgufTensorToWrite& t : tensors) {
      int64_t numel = 1;
      for (int64_t d : t.dims) numel *= d;
      sizes.push_back(ggml_row_bytes(t.type, t.dims[0]) * (numel / t.dims[0]));
      out.string(t.name);
      out.scalar<uint32_t>(static_cast<uint32_t>(t.dims.size()));
      for (int64_t d : t.dims) out.scalar<uint64_t>(static_cast<uint64_t>(d));
      out.scalar(static_cast<uint32_t>(t.type));
      out.scalar<uint64_t>(offset);
      offset = round_up(offset + static_cast<uint64_t>(sizes.back()), kDefaultAlignment);
    }
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.pad_to(kDefaultAlignment);
      bytes.assign(static_cast<size_t>(sizes[i]), 0);
      write_tensor(i, bytes);
      ZT_CHECK(bytes.size() == static_cast<size_t>(sizes[i]),
               "GGUF writer: tensor '" + tensors[i].name + "' got " + std::to_string(bytes.size()) +
                   " bytes, its type and shape take " + std::to_string(sizes[i]));
      out.bytes(bytes.data(), bytes.size());
    }
    ZT_CHECK(::fsync(fd) == 0, "fsync failed on '" + tmp + "': " + std::strerror(errno));
    const int rc = ::close(fd);
    fd = -1;
    ZT_CHECK(rc == 0,
             "cannot close '" + tmp + "': " + std::strerror(errno) + write_failure_cause(tmp));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  move_into_place(tmp, path, /*overwrite=*/true);
}

}  // namespace zt
