#include "util/dtype.h"

namespace zt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUint64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUint32:
      return 4;
    case DType::kBf16:
    case DType::kFloat16:
    case DType::kUint16:
      return 2;
    case DType::kUint8:
      return 1;
    case DType::kUnsupported:
      break;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kBf16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUint8:
      return "uint8";
    case DType::kUint16:
      return "uint16";
    case DType::kUint32:
      return "uint32";
    case DType::kUint64:
      return "uint64";
    case DType::kUnsupported:
      break;
  }
  return "unsupported";
}

}  // namespace zt
