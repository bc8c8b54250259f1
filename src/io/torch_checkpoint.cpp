#include "io/torch_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "io/fs_util.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace zt {

namespace {

constexpr uint64_t kMaxPickleBytes = uint64_t{64} << 20;

// The folder torch.save put everything in: transformers' pytorch_model.bin has
// "pytorch_model/", PyTorch 2 files often "archive/". One data.pkl at the top, no TorchScript.
std::string archive_prefix(const StoredZipArchive& zip) {
  std::string prefix;
  for (const auto& [name, entry] : zip.entries()) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos) continue;
    const std::string rest = name.substr(slash + 1);
    ZT_CHECK(rest != "constants.pkl" && rest.rfind("code/", 0) != 0,
             "'" + zip.path() +
                 "' is a TorchScript archive (torch.jit.save), not a state dict; "
                 "save the model's state_dict() with torch.save or save_pretrained");
    if (rest != "data.pkl") continue;
    ZT_CHECK(prefix.empty(), "'" + zip.path() + "' holds more than one data.pkl");
    prefix = name.substr(0, slash + 1);
  }
  ZT_CHECK(!prefix.empty(), "'" + zip.path() + "' is a zip archive without torch.save's data.pkl");
  return prefix;
}

// `path`, refused when it is a PyTorch file older than the zip format.
const std::string& zip_format(const std::string& path) {
  const std::string head = leading_bytes(path, 4);
  ZT_CHECK(head.empty() || head[0] != '\x80',
           "'" + path + "' is a PyTorch file in the format before PyTorch 1.6 (a bare pickle), " +
               "which zerotrain does not read; load it with torch 1.6 or later and save it " +
               "again, best as safetensors (save_pretrained(..., safe_serialization=True))");
  ZT_CHECK(head == kZipMagic, "'" + path + "' is not a PyTorch checkpoint (torch.save writes a " +
                                  "zip archive, which starts with \"PK\")");
  return path;
}

bool is_row_major(const TorchTensor& t) {
  int64_t expected = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.stride[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

}  // namespace

bool starts_as_pickle(const std::string& path) {
  return leading_bytes(path, 1) == "\x80";
}

TorchCheckpointReader::TorchCheckpointReader(const std::string& path) : zip_(zip_format(path)) {
  const std::string prefix = archive_prefix(zip_);
  const std::string what = "'" + path + "'";
  if (const ZipEntry* order = zip_.find(prefix + "byteorder")) {
    const std::string byteorder = zip_.read_entry(*order, 16);
    ZT_CHECK(byteorder == "little", what + " was saved on a " + byteorder +
                                        "-endian machine; zerotrain reads little-endian data");
  }
  dict_ = read_torch_state_dict(zip_.read_entry(*zip_.find(prefix + "data.pkl"), kMaxPickleBytes),
                                what);
  for (const auto& [key, storage] : dict_.storages) {
    const ZipEntry* entry = zip_.find(prefix + "data/" + key);
    ZT_CHECK(entry, what + " has no data/" + key + ", the bytes of a storage its pickle names");
    zip_.check_stored(*entry);
    const size_t size = safetensors_dtype_size(storage.dtype);
    ZT_CHECK(storage.numel <= entry->size / size,
             what + ": storage data/" + key + " holds " + std::to_string(entry->size) +
                 " bytes, fewer than its " + std::to_string(storage.numel) + " " + storage.dtype +
                 " elements need");
    storage_entries_.emplace(key, *entry);
  }
  for (size_t i = 0; i < dict_.tensors.size(); ++i) by_name_.emplace(dict_.tensors[i].name, i);
}

const TorchTensor& TorchCheckpointReader::tensor(const std::string& name) const {
  const auto it = by_name_.find(name);
  ZT_CHECK(it != by_name_.end(), "'" + path() + "' has no tensor '" + name + "'");
  return dict_.tensors[it->second];
}

void TorchCheckpointReader::read_range_f32(const std::string& name, int64_t begin, int64_t count,
                                           float* out) const {
  const TorchTensor& t = tensor(name);
  const std::string what = "'" + path() + "': tensor '" + name + "'";
  ZT_CHECK(is_readable_weight_dtype(t.dtype),
           what + " is " + t.dtype + "; zerotrain reads " + kReadableWeightDtypes + " weights");
  const auto numel = static_cast<int64_t>(safetensors_numel(t.shape));
  ZT_CHECK(begin >= 0 && count >= 0 && begin <= numel && count <= numel - begin,
           what + ": elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
               ") are outside its " + std::to_string(numel));
  if (count == 0) return;
  const size_t size = safetensors_dtype_size(t.dtype);
  const ZipEntry& entry = storage_entries_.at(t.storage_key);
  ReadOnlyFile file(path());
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * size);
  if (is_row_major(t)) {
    const uint64_t first = static_cast<uint64_t>(t.storage_offset + begin);
    read_exact(file.fd, entry.data_offset + first * size, bytes.data(), bytes.size(), path());
  } else {
    gather_view(file.fd, entry, t, begin, count, bytes.data());
  }
  widen_weights_to_f32(t.dtype, bytes.data(), count, out, what, begin);
}

void TorchCheckpointReader::gather_view(int fd, const ZipEntry& entry, const TorchTensor& t,
                                        int64_t begin, int64_t count, uint8_t* out) const {
  const size_t size = safetensors_dtype_size(t.dtype);
  int64_t span = 1;  // elements of the storage from the view's first to its last
  for (size_t d = 0; d < t.shape.size(); ++d) span += (t.shape[d] - 1) * t.stride[d];
  const auto first = entry.data_offset + static_cast<uint64_t>(t.storage_offset) * size;
  // Where the i-th element (row-major) of the view lies in its span.
  auto place = [&](int64_t i) {
    int64_t rest = begin + i, at = 0;
    for (size_t d = t.shape.size(); d-- > 0;) {
      at += (rest % t.shape[d]) * t.stride[d];
      rest /= t.shape[d];
    }
    return static_cast<uint64_t>(at) * size;
  };
  // A dense view (transposed, a slice): its span, read once and kept while the tensor is read.
  // A sparse one (a span past twice the tensor and 16 MiB, which only a hand-made stride
  // gives): each element read where it lies, so that no stride buys a buffer the file's size.
  const auto numel = static_cast<int64_t>(safetensors_numel(t.shape));
  if (span > std::max<int64_t>(2 * numel, (int64_t{16} << 20) / static_cast<int64_t>(size))) {
    for (int64_t i = 0; i < count; ++i)
      read_exact(fd, first + place(i), out + static_cast<size_t>(i) * size, size, path());
    return;
  }
  const std::lock_guard<std::mutex> lock(span_mutex_);
  if (!span_valid_ || span_tensor_ != t.name) {
    span_valid_ = false;
    span_.assign(static_cast<size_t>(span) * size, 0);
    read_exact(fd, first, span_.data(), span_.size(), path());
    span_tensor_ = t.name;
    span_valid_ = true;
  }
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(out + static_cast<size_t>(i) * size, span_.data() + place(i), size);
}

}  // namespace zt
