// A PyTorch checkpoint file as torch.save writes it since PyTorch 1.6, and as transformers' and
// PEFT's save_pretrained(safe_serialization=False) write pytorch_model.bin and adapter_model.bin
// (docs/models.md "PyTorch checkpoints"): a zip archive of <prefix>/data.pkl, the state
// dict's pickle, and <prefix>/data/<key>, each storage's little-endian bytes. The pickle is read
// by torch_pickle.h's machine, which runs none of it. The format before 1.6 (a bare pickle) and
// TorchScript archives are refused, saying how to re-save.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "io/torch_pickle.h"
#include "io/zip_archive.h"

namespace zt {

class TorchCheckpointReader {
 public:
  // Reads the archive's directory and pickle; every storage's bytes must be in the archive and
  // every tensor inside its storage. Errors name the file and the tensor.
  explicit TorchCheckpointReader(const std::string& path);

  const std::string& path() const { return zip_.path(); }
  const std::vector<TorchTensor>& tensors() const { return dict_.tensors; }  // the file's order
  const TorchTensor& tensor(const std::string& name) const;
  // Elements [begin, begin+count) of a BF16, F16, F32 or F64 tensor in row-major order, as
  // SafetensorsReader::read_range_f32 reads them; a view that is not contiguous (a transposed
  // tensor, torch.save keeping its strides) is gathered from the span of its storage it covers,
  // read once and kept until another such view of this file is read (a sparse view, whose span
  // is past twice its size, element by element).
  void read_range_f32(const std::string& name, int64_t begin, int64_t count, float* out) const;

 private:
  StoredZipArchive zip_;
  TorchStateDict dict_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, ZipEntry> storage_entries_;  // storage key -> its bytes
  // Copies the bytes of `count` elements of the non-contiguous view t, from element `begin` in
  // row-major order, to out.
  void gather_view(int fd, const ZipEntry& entry, const TorchTensor& t, int64_t begin,
                   int64_t count, uint8_t* out) const;

  mutable std::mutex span_mutex_;
  mutable bool span_valid_ = false;
  mutable std::string span_tensor_;  // whose span span_ holds, when span_valid_
  mutable std::vector<uint8_t> span_;
};

// Whether `path` starts as a pickle does (torch.save's format before PyTorch 1.6).
bool starts_as_pickle(const std::string& path);

}  // namespace zt
