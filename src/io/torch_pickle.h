// The pickle torch.save writes for a state dict (docs/models.md "PyTorch checkpoints"),
// read without running it. A pickle can call any Python function; this reader runs a small
// pickle machine that knows only the calls a state dict of tensors is made of
// (collections.OrderedDict, torch._utils._rebuild_tensor_v2, _rebuild_parameter and torch 2's
// _rebuild_from_type_v2 of a plain tensor or Parameter, torch's typed storage classes): a subset
// of what torch.load(weights_only=True) allows. Any other name is refused, naming it. Nothing in
// the file is executed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zt {

// A storage: the bytes of zip entry data/<key>, `numel` elements of `dtype`.
struct TorchStorage {
  std::string key;
  std::string dtype;  // a safetensors dtype name: "BF16", "F16", "F32", "F64", "I64", ...
  uint64_t numel = 0;
};

// A tensor: a strided view of a storage, as torch._utils._rebuild_tensor_v2 builds it.
struct TorchTensor {
  std::string name;
  std::string storage_key;
  std::string dtype;
  std::vector<int64_t> shape, stride;
  int64_t storage_offset = 0;  // in elements
};

struct TorchStateDict {
  std::vector<TorchTensor> tensors;              // in the file's order
  std::map<std::string, TorchStorage> storages;  // by key
};

// Reads a state dict, a dict of name -> tensor, from the bytes of data.pkl. Every view must lie
// inside its storage. Errors name `what` (the file) and, where one is known, the tensor's key.
TorchStateDict read_torch_state_dict(const std::string& pickle, const std::string& what);

}  // namespace zt
