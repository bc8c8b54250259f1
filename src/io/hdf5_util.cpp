#include "io/hdf5_util.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/fs_util.h"
#include "util/error.h"

namespace zt::h5 {

Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Id::close(const std::string& where) {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  check(closer_(id), "HDF5 close failed", where);
}

void Id::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = H5I_INVALID_HID;
}

void silence_errors() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

namespace {

// H5Ewalk2 visitor: keeps the innermost entry's description (the walk goes upward, from where
// HDF5 detected the error to the API call) and the system's message of any entry that has one.
herr_t keep_cause(unsigned /*n*/, const H5E_error2_t* entry, void* data) {
  auto* cause = static_cast<std::pair<std::string, std::string>*>(data);
  const std::string desc = entry->desc ? entry->desc : "";
  if (cause->first.empty()) cause->first = desc;
  // The POSIX driver reports "..., errno = 28, error message = 'No space left on device', ...".
  const std::string key = "error message = '";
  if (const size_t at = desc.find(key); cause->second.empty() && at != std::string::npos) {
    const size_t from = at + key.size();
    cause->second = desc.substr(from, desc.find('\'', from) - from);
  }
  return 0;
}

}  // namespace

std::string error_cause() {
  std::pair<std::string, std::string> cause;  // innermost description, system message
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_cause, &cause) < 0) return "";
  return cause.second.empty() ? cause.first : cause.second;
}

namespace {

[[noreturn]] void fail_with_cause(const std::string& what, const std::string& where) {
  const std::string cause = error_cause();
  fail(what + ": " + where + (cause.empty() ? "" : " (" + cause + ")"));
}

}  // namespace

void check(herr_t rc, const std::string& what, const std::string& where) {
  if (rc < 0) fail_with_cause(what, where);
}

Id wrap(hid_t id, Id::Closer closer, const std::string& what, const std::string& where) {
  if (id < 0) fail_with_cause(what, where);
  return Id(id, closer);
}

namespace {

// A 16-bit little-endian float with `exponent_bits` and `mantissa_bits` (sign at bit 15). Start
// from IEEE float32 LE; move the fields into the low 16 bits, then shrink precision and size (HDF5
// refuses a size smaller than offset+precision, so this order matters).
Id float16_layout(size_t exponent_bits, size_t mantissa_bits, size_t bias, const char* name) {
  Id t = wrap(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "cannot copy float32 type", name);
  check(H5Tset_fields(t, 15, mantissa_bits, exponent_bits, 0, mantissa_bits),
        "H5Tset_fields failed", name);
  check(H5Tset_offset(t, 0), "H5Tset_offset failed", name);
  check(H5Tset_precision(t, 16), "H5Tset_precision failed", name);
  check(H5Tset_size(t, 2), "H5Tset_size failed", name);
  check(H5Tset_ebias(t, bias), "H5Tset_ebias failed", name);
  return t;
}

}  // namespace

Id bf16_type() {
  return float16_layout(8, 7, 127, "bf16 type");
}

Id fp16_type() {
  return float16_layout(5, 10, 15, "fp16 type");
}

Id type_for(DType t) {
  hid_t base = H5I_INVALID_HID;
  switch (t) {
    case DType::kBf16:
      return bf16_type();
    case DType::kFloat16:
      return fp16_type();
    case DType::kFloat32:
      base = H5T_IEEE_F32LE;
      break;
    case DType::kUint8:
      base = H5T_STD_U8LE;
      break;
    case DType::kUint16:
      base = H5T_STD_U16LE;
      break;
    case DType::kUint32:
      base = H5T_STD_U32LE;
      break;
    case DType::kUint64:
      base = H5T_STD_U64LE;
      break;
    case DType::kInt64:
      base = H5T_STD_I64LE;
      break;
    case DType::kInt32:
      base = H5T_STD_I32LE;
      break;
    default:
      fail("no HDF5 type for an unsupported element type");
  }
  return wrap(H5Tcopy(base), H5Tclose, "cannot copy HDF5 type", dtype_name(t));
}

DType classify(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  // A single byte has no byte order (writers label it either way).
  if (size > 1 && H5Tget_order(type) != H5T_ORDER_LE) return DType::kUnsupported;
  if (cls == H5T_FLOAT) {
    if (size == 4 && H5Tequal(type, H5T_IEEE_F32LE) > 0) return DType::kFloat32;
    Id bf16 = bf16_type();
    if (size == 2 && H5Tequal(type, bf16) > 0) return DType::kBf16;
    Id fp16 = fp16_type();
    if (size == 2 && H5Tequal(type, fp16) > 0) return DType::kFloat16;
    return DType::kUnsupported;
  }
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (!is_signed && size == 1) return DType::kUint8;
    if (!is_signed && size == 2) return DType::kUint16;
    if (!is_signed && size == 4) return DType::kUint32;
    if (!is_signed && size == 8) return DType::kUint64;
    if (is_signed && size == 4) return DType::kInt32;
    if (is_signed && size == 8) return DType::kInt64;
  }
  return DType::kUnsupported;
}

bool is_hdf5_file(const std::string& path) {
  silence_errors();
  return H5Fis_hdf5(path.c_str()) > 0;
}

void require_readable_hdf5(const std::string& path, const std::string& what) {
  std::error_code ec;
  const std::string name = what + " '" + path + "'";
  ZT_CHECK(std::filesystem::exists(path, ec), name + " does not exist");
  if (::access(path.c_str(), R_OK) != 0) {
    const int e = errno;
    fail(name + " cannot be read: " + std::strerror(e) +
         (e == EACCES  ? " (EACCES)"
          : e == EPERM ? " (EPERM)"
                       : ""));
  }
  ZT_CHECK(is_hdf5_file(path), name + " is not an HDF5 file");
}

Id create_file(const std::string& path) {
  silence_errors();
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) {
    const std::string hdf5_cause = error_cause();
    const std::string cause = write_failure_cause(path);
    fail("cannot create HDF5 file '" + path + "'" +
         (cause.empty() && !hdf5_cause.empty() ? " (" + hdf5_cause + ")" : cause));
  }
  return Id(id, H5Fclose);
}

Id open_file(const std::string& path, bool writable) {
  silence_errors();
  const hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    // Say what can be said: missing, unreadable, not HDF5 — or HDF5 but damaged (a file cut
    // short by a crash or a failed copy is the usual case).
    require_readable_hdf5(path, "HDF5 file");
    std::error_code ec;
    fail("cannot open HDF5 file '" + path + "': it has an HDF5 signature but HDF5 cannot open it " +
         "(truncated or damaged? " + std::to_string(std::filesystem::file_size(path, ec)) +
         " bytes on disk)");
  }
  return Id(id, H5Fclose);
}

namespace {

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& v) {
  return std::vector<hsize_t>(v.begin(), v.end());
}

// Selects the box in the dataset's file space and transfers it to/from a dense memory buffer.
void transfer_box(hid_t dataset, DType mem_type, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& count, void* buffer, bool write,
                  const std::string& where, hid_t transfer = H5P_DEFAULT) {
  Id file_space = wrap(H5Dget_space(dataset), H5Sclose, "cannot get dataspace", where);
  const int rank = H5Sget_simple_extent_ndims(file_space);
  ZT_CHECK(rank == static_cast<int>(start.size()),
           "dataset rank " + std::to_string(rank) + " does not match the selection: " + where);
  const auto hstart = to_hsize(start), hcount = to_hsize(count);
  check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, hstart.data(), nullptr, hcount.data(),
                            nullptr),
        "invalid hyperslab " + shape_string(start) + "+" + shape_string(count), where);
  Id mem_space = wrap(H5Screate_simple(rank, hcount.data(), nullptr), H5Sclose,
                      "cannot create memory dataspace", where);
  Id type = type_for(mem_type);
  if (write) {
    check(H5Dwrite(dataset, type, mem_space, file_space, transfer, buffer), "HDF5 write failed",
          where);
  } else {
    check(H5Dread(dataset, type, mem_space, file_space, H5P_DEFAULT, buffer), "HDF5 read failed",
          where);
  }
}

}  // namespace

Id create_dataset(hid_t file, const std::string& name, DType type,
                  const std::vector<int64_t>& shape, const std::string& where, int64_t chunk) {
  const auto dims = to_hsize(shape);
  std::vector<hsize_t> max_dims = dims;
  Id dcpl = wrap(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "cannot create property list", where);
  if (chunk > 0) {
    ZT_CHECK(shape.size() == 1, "extendible datasets are 1-D: " + where);
    max_dims[0] = H5S_UNLIMITED;
    const hsize_t chunk_dims[1] = {static_cast<hsize_t>(chunk)};
    check(H5Pset_chunk(dcpl, 1, chunk_dims), "H5Pset_chunk failed", where);
  }
  check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time failed", where);
  Id space = wrap(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max_dims.data()),
                  H5Sclose, "cannot create dataspace", where);
  Id file_type = type_for(type);
  return wrap(H5Dcreate2(file, name.c_str(), file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
              H5Dclose, "cannot create dataset", where);
}

void create_group_once(hid_t file, const std::string& name, const std::string& where) {
  if (has_dataset(file, name)) return;
  Id g = wrap(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
              "cannot create group '" + name + "'", where);
}

Id open_dataset(hid_t file, const std::string& name, const std::string& where) {
  return wrap(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset", where);
}

bool has_dataset(hid_t file, const std::string& name) {
  silence_errors();
  return H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::string> member_names(hid_t file, const std::string& group,
                                      const std::string& where) {
  std::vector<std::string> names;
  if (!has_dataset(file, group)) return names;
  Id g = wrap(H5Gopen2(file, group.c_str(), H5P_DEFAULT), H5Gclose,
              "cannot open group '" + group + "'", where);
  auto add = [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
    return 0;
  };
  check(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, add, &names),
        "cannot list group '" + group + "'", where);
  return names;
}

std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& where) {
  Id space = wrap(H5Dget_space(dataset), H5Sclose, "cannot get dataspace", where);
  const int rank = H5Sget_simple_extent_ndims(space);
  ZT_CHECK(rank >= 0, "cannot read dataset rank: " + where);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "cannot read dataset shape", where);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

DType dataset_dtype(hid_t dataset, const std::string& where) {
  Id type = wrap(H5Dget_type(dataset), H5Tclose, "cannot get dataset type", where);
  return classify(type);
}

void set_extent(hid_t dataset, int64_t size0, const std::string& where) {
  const hsize_t dims[1] = {static_cast<hsize_t>(size0)};
  check(H5Dset_extent(dataset, dims), "cannot extend dataset", where);
}

void read_box(hid_t dataset, DType mem_type, const std::vector<int64_t>& start,
              const std::vector<int64_t>& count, void* out, const std::string& where) {
  transfer_box(dataset, mem_type, start, count, out, /*write=*/false, where);
}

void write_box(hid_t dataset, DType mem_type, const std::vector<int64_t>& start,
               const std::vector<int64_t>& count, const void* data, const std::string& where,
               hid_t transfer) {
  transfer_box(dataset, mem_type, start, count, const_cast<void*>(data), /*write=*/true, where,
               transfer);
}

void write_attr_int64(hid_t object, const std::string& name, int64_t value,
                      const std::string& where) {
  const std::string at = where + ", attribute '" + name + "'";
  Id space = wrap(H5Screate(H5S_SCALAR), H5Sclose, "cannot create dataspace", at);
  Id attr = wrap(H5Acreate2(object, name.c_str(), H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT),
                 H5Aclose, "cannot create attribute", at);
  check(H5Awrite(attr, H5T_NATIVE_INT64, &value), "cannot write attribute", at);
}

void write_attr_string(hid_t object, const std::string& name, const std::string& value,
                       const std::string& where) {
  const std::string at = where + ", attribute '" + name + "'";
  Id type = wrap(H5Tcopy(H5T_C_S1), H5Tclose, "cannot copy string type", at);
  check(H5Tset_size(type, std::max<size_t>(1, value.size())), "H5Tset_size failed", at);
  Id space = wrap(H5Screate(H5S_SCALAR), H5Sclose, "cannot create dataspace", at);
  Id attr = wrap(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                 "cannot create attribute", at);
  std::string padded = value;
  padded.resize(std::max<size_t>(1, value.size()), '\0');
  check(H5Awrite(attr, type, padded.data()), "cannot write attribute", at);
}

namespace {

Id open_attr(hid_t object, const std::string& name, const std::string& at) {
  silence_errors();
  ZT_CHECK(H5Aexists(object, name.c_str()) > 0, "missing attribute: " + at);
  return wrap(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "cannot open attribute", at);
}

}  // namespace

int64_t read_attr_int64(hid_t object, const std::string& name, const std::string& where) {
  const std::string at = where + ", attribute '" + name + "'";
  Id attr = open_attr(object, name, at);
  int64_t value = 0;
  check(H5Aread(attr, H5T_NATIVE_INT64, &value), "cannot read integer attribute", at);
  return value;
}

std::string read_attr_string(hid_t object, const std::string& name, const std::string& where) {
  const std::string at = where + ", attribute '" + name + "'";
  Id attr = open_attr(object, name, at);
  Id type = wrap(H5Aget_type(attr), H5Tclose, "cannot get attribute type", at);
  ZT_CHECK(H5Tget_class(type) == H5T_STRING, "attribute is not a string: " + at);
  if (H5Tis_variable_str(type) > 0) {
    char* raw = nullptr;
    check(H5Aread(attr, type, &raw), "cannot read string attribute", at);
    std::string value = raw ? raw : "";
    H5free_memory(raw);
    return value;
  }
  std::string value(H5Tget_size(type), '\0');
  check(H5Aread(attr, type, value.data()), "cannot read string attribute", at);
  value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  return value;
}

std::vector<FlatBox> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin,
                                      int64_t count) {
  ZT_CHECK(shape.size() == 1 || shape.size() == 2,
           "flat range reads need a 1-D or 2-D tensor, got shape " + shape_string(shape));
  std::vector<FlatBox> boxes;
  if (count <= 0) return boxes;
  if (shape.size() == 1) {
    boxes.push_back({{begin}, {count}, 0, count});
    return boxes;
  }
  const int64_t cols = shape[1];
  int64_t pos = begin;
  const int64_t end = begin + count;
  while (pos < end) {
    const int64_t row = pos / cols, col = pos % cols;
    FlatBox box;
    box.flat_offset = pos - begin;
    if (col != 0 || end - pos < cols) {  // part of one row
      const int64_t n = std::min(cols - col, end - pos);
      box.start = {row, col};
      box.count = {1, n};
      box.numel = n;
    } else {  // whole rows
      const int64_t rows = (end - pos) / cols;
      box.start = {row, 0};
      box.count = {rows, cols};
      box.numel = rows * cols;
    }
    pos += box.numel;
    boxes.push_back(std::move(box));
  }
  return boxes;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace zt::h5
