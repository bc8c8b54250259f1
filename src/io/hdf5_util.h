// Thin RAII layer over the HDF5 C API. Every call is checked; a failure throws zt::Error with a
// message naming the file and dataset (`where`). HDF5's own error-stack printing is silenced.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/dtype.h"

namespace zt::h5 {

// Owns one HDF5 identifier (file, dataset, dataspace, datatype, attribute, property list) and
// closes it with the matching H5*close function. Move-only.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: lets an Id be passed to H5* calls
  bool valid() const { return id_ >= 0; }
  // Closes now; throws zt::Error naming `where` if HDF5 reports a failure (e.g. on flush).
  void close(const std::string& where);
  void reset();  // closes, ignoring errors (destructor path)
  // Forgets the identifier without closing it: for MPI-IO files after a failed collective, where
  // a close would wait for ranks that will not join it.
  void forget() { id_ = H5I_INVALID_HID; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Element types zerotrain stores.

// Turns off HDF5's automatic error-stack printing (idempotent; called by every opener).
void silence_errors();

// Throws zt::Error("<what>: <where> (<cause>)") when rc < 0. The cause is what HDF5 recorded
// of the failed call: the system's message when a file operation failed ("No space left on
// device"), else the innermost description of its error stack.
void check(herr_t rc, const std::string& what, const std::string& where);
// The cause of the HDF5 call that failed last on this thread ("" if none is recorded).
std::string error_cause();
// Wraps a freshly returned identifier, throwing when it is invalid.
Id wrap(hid_t id, Id::Closer closer, const std::string& what, const std::string& where);

// The bfloat16 floating-point type of docs/ARCHITECTURE.md §3 (a caller-owned copy).
Id bf16_type();
// IEEE binary16 in the same way (1 sign, 5 exponent bits with bias 15, 10 mantissa bits), which
// h5py reads as numpy's float16.
Id fp16_type();
// An HDF5 type (file or memory, both little-endian here) for one of our element types.
Id type_for(DType t);
// Classifies a dataset's stored type.
DType classify(hid_t type);

// True if `path` is a readable HDF5 file.
bool is_hdf5_file(const std::string& path);
// Fails "<what> '<path>' <why>" unless `path` can be read as an HDF5 file: it does not exist, it
// cannot be read (the system's reason: "Permission denied (EACCES)"), or it is not an HDF5 file.
void require_readable_hdf5(const std::string& path, const std::string& what);
Id create_file(const std::string& path);  // truncates
Id open_file(const std::string& path, bool writable = false);

// Creates a dataset of `shape` (contiguous, no fill writes) or, when `chunk` > 0, a 1-D chunked
// dataset extendible to unlimited size starting at shape[0] elements.
Id create_dataset(hid_t file, const std::string& name, DType type,
                  const std::vector<int64_t>& shape, const std::string& where, int64_t chunk = 0);
Id open_dataset(hid_t file, const std::string& name, const std::string& where);
bool has_dataset(hid_t file, const std::string& name);
// Creates group `name` of the file where it has none.
void create_group_once(hid_t file, const std::string& name, const std::string& where);
// The names in group `group` of the file, in name order; none where it has no such group.
std::vector<std::string> member_names(hid_t file, const std::string& group,
                                      const std::string& where);
std::vector<int64_t> dataset_shape(hid_t dataset, const std::string& where);
DType dataset_dtype(hid_t dataset, const std::string& where);
// Resizes an extendible dataset's first dimension.
void set_extent(hid_t dataset, int64_t size0, const std::string& where);

// Reads/writes the box [start, start+count) (one entry per dimension) of a dataset, the memory
// side being a dense buffer of `mem_type` elements.
void read_box(hid_t dataset, DType mem_type, const std::vector<int64_t>& start,
              const std::vector<int64_t>& count, void* out, const std::string& where);
// `transfer` is a dataset transfer property list (parallel HDF5: independent or collective).
void write_box(hid_t dataset, DType mem_type, const std::vector<int64_t>& start,
               const std::vector<int64_t>& count, const void* data, const std::string& where,
               hid_t transfer = H5P_DEFAULT);

// Scalar attributes on an object (file or dataset).
void write_attr_int64(hid_t object, const std::string& name, int64_t value,
                      const std::string& where);
void write_attr_string(hid_t object, const std::string& name, const std::string& value,
                       const std::string& where);
int64_t read_attr_int64(hid_t object, const std::string& name, const std::string& where);
std::string read_attr_string(hid_t object, const std::string& name, const std::string& where);

// A flat element range [begin, begin+count) of a row-major tensor of `shape` (rank 1 or 2)
// decomposed into at most three boxes (partial first row, whole rows, partial last row), each
// contiguous in flat order; `flat_offset` is the box's first element relative to begin.
struct FlatBox {
  std::vector<int64_t> start, count;
  int64_t flat_offset = 0;
  int64_t numel = 0;
};
std::vector<FlatBox> flat_range_boxes(const std::vector<int64_t>& shape, int64_t begin,
                                      int64_t count);

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace zt::h5
