// Element types, one enum for the whole program: what a collective moves (comm), what an HDF5
// dataset or a safetensors file stores (io). Not every room accepts every type; each says which.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zt {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kBf16,     // bfloat16 (bit patterns in uint16_t where C++ sees them)
  kFloat16,  // IEEE binary16 (bit patterns in uint16_t, util/bf16.h converts)
  kInt32,
  kInt64,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kUnsupported,  // a stored type zerotrain does not read (an HDF5 dataset's, say)
};

// Bytes per element; 0 for kUnsupported.
size_t dtype_size(DType dtype);
// "float32", "float64", "bfloat16", "float16", "int32", "int64", "uint8", "uint16", "uint32",
// "uint64", "unsupported".
const char* dtype_name(DType dtype);

}  // namespace zt
