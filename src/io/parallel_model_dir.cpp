#include "io/parallel_model_dir.h"

#include <filesystem>

#include "comm/collective_outcome.h"
#include "io/fs_util.h"
#include "runtime/deadline.h"
#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// Rank 0's string on every rank.
std::string broadcast_string(Communicator& comm, const std::string& value) {
  int64_t size = static_cast<int64_t>(value.size());
  comm.broadcast_blocking(&size, 1, 0);
  std::vector<uint8_t> bytes(value.begin(), value.end());
  bytes.resize(static_cast<size_t>(size));
  if (size > 0) comm.broadcast_blocking(bytes.data(), bytes.size(), 0);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

#if ZEROTRAIN_HDF5_PARALLEL

bool ParallelModelDirWriter::available() {
  return true;
}

ParallelModelDirWriter::ParallelModelDirWriter(std::string dir, const ModelConfig& config,
                                               MpiCommunicator& comm, uint64_t shard_limit_bytes,
                                               bool overwrite)
    : dir_(strip_trailing_slashes(dir)),
      config_(config),
      layout_(config),
      comm_(comm),
      overwrite_(overwrite) {
  ZT_CHECK(shard_limit_bytes > 0, "shard size limit must be positive");
  std::vector<uint64_t> bytes;
  for (const TensorInfo& t : layout_.tensors()) {
    bytes.push_back(static_cast<uint64_t>(t.numel) * sizeof(bf16_t));
    total_bytes_ += bytes.back();
  }
  shard_of_ = plan_shards(bytes, shard_limit_bytes);
  num_shards_ = shard_of_.empty() ? 0 : shard_of_.back();
  std::string tmp;
  run_collectively(comm_, [&] {
    config_.validate();
    if (comm_.rank() != 0) return;
    check_output_dir_writable(dir_, overwrite_);
    check_room_to_write(dir_parent(dir_), model_dir_bytes(config_), "model '" + dir_ + "'");
    tmp = temp_sibling(dir_);
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!dir_parent(dir_).empty()) fs::create_directories(dir_parent(dir_), ec);
    fs::create_directory(tmp, ec);
    ZT_CHECK(!ec, "cannot create temporary directory '" + tmp + "': " + errno_text(ec.value()));
  });
  tmp_dir_ = broadcast_string(comm_, tmp);
  try {
    open_files();
  } catch (const std::exception& e) {
    abandon_after_failure(e.what());
  }
}

void ParallelModelDirWriter::open_files() {
  const Deadline deadline(comm_.timeout_seconds(),
                          "creating the parallel HDF5 files of '" + tmp_dir_ + "'", comm_.rank());
  run_collectively(comm_, [&] {
    h5::silence_errors();
    const std::string where = "parallel model directory '" + tmp_dir_ + "'";
    h5::Id access = h5::wrap(H5Pcreate(H5P_FILE_ACCESS), H5Pclose,
                             "cannot create file access property list", where);
    h5::check(H5Pset_fapl_mpio(access, comm_.comm(), MPI_INFO_NULL), "H5Pset_fapl_mpio failed",
              where);
    transfer_ = h5::wrap(H5Pcreate(H5P_DATASET_XFER), H5Pclose,
                         "cannot create dataset transfer property list", where);
    h5::check(H5Pset_dxpl_mpio(transfer_, H5FD_MPIO_INDEPENDENT), "H5Pset_dxpl_mpio failed", where);
    for (int s = 1; s <= num_shards_; ++s) {
      const std::string path = shard_path(s);
      files_.push_back(h5::wrap(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access),
                                H5Fclose, "cannot create HDF5 file (MPI-IO)", "'" + path + "'"));
    }
    // Collective metadata: every rank creates every dataset, in the same order.
    for (size_t i = 0; i < layout_.tensors().size(); ++i) {
      const TensorInfo& t = layout_.tensors()[i];
      const int s = shard_of_[i];
      datasets_.push_back(h5::create_dataset(files_[static_cast<size_t>(s - 1)], t.name,
                                             DType::kBf16, t.shape,
                                             "tensor '" + t.name + "' in '" + shard_path(s) + "'"));
    }
  });
}

ParallelModelDirWriter::~ParallelModelDirWriter() {
  if (finished_) return;
  // Left by an exception of the caller's (every rank's, agreed): close collectively, under the
  // deadline, and drop the temporary directory.
  {
    const Deadline deadline(comm_.timeout_seconds(),
                            "closing the parallel HDF5 files of '" + tmp_dir_ + "'", comm_.rank());
    datasets_.clear();
    files_.clear();
    transfer_.reset();
  }
  remove_temp_dir();
}

void ParallelModelDirWriter::remove_temp_dir() {
  if (comm_.rank() != 0 || tmp_dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(tmp_dir_, ec);
}

void ParallelModelDirWriter::abandon_after_failure(const std::string& error) {
  const std::string cause = write_failure_cause(tmp_dir_ + "/x");
  for (h5::Id& d : datasets_) d.forget();
  for (h5::Id& f : files_) f.forget();
  transfer_.reset();
  remove_temp_dir();
  comm_.barrier();  // the temporary directory is gone before any rank ends the job
  finished_ = true;
  // Not an AgreedError: MPI-IO files are still open, so the job must end by MPI_Abort rather
  // than MPI_Finalize.
  fail(error + cause);
}

std::string ParallelModelDirWriter::shard_path(int shard) const {
  return tmp_dir_ + "/" + model_shard_file_name(shard, num_shards_);
}

void ParallelModelDirWriter::write(const TensorInfo& t, int64_t begin, int64_t count,
                                   const bf16_t* values) {
  ZT_CHECK(!finished_, "parallel model writer for '" + dir_ + "' is already finished");
  const int index = layout_.find(t.name);
  ZT_CHECK(index >= 0, "model '" + dir_ + "' has no tensor '" + t.name + "'");
  const TensorInfo& info = layout_.tensors()[static_cast<size_t>(index)];
  ZT_CHECK(begin >= 0 && count >= 0 && begin + count <= info.numel,
           "tensor '" + t.name + "': range [" + std::to_string(begin) + ", " +
               std::to_string(begin + count) + ") is outside its " + std::to_string(info.numel) +
               " elements");
  const std::string where =
      "tensor '" + t.name + "' in '" + shard_path(shard_of_[static_cast<size_t>(index)]) + "'";
  for (const h5::FlatBox& box : h5::flat_range_boxes(info.shape, begin, count))
    h5::write_box(datasets_[static_cast<size_t>(index)], DType::kBf16, box.start, box.count,
                  values + box.flat_offset, where, transfer_);
}

void ParallelModelDirWriter::write_on_every_rank(const std::function<void()>& fn) {
  try {
    run_collectively(comm_, fn);
  } catch (const std::exception& e) {
    abandon_after_failure(e.what());
  }
}

void ParallelModelDirWriter::close_files() {
  for (size_t i = 0; i < datasets_.size(); ++i)
    datasets_[i].close("tensor '" + layout_.tensors()[i].name + "'");
  for (size_t s = 0; s < files_.size(); ++s)
    files_[s].close("'" + shard_path(static_cast<int>(s) + 1) + "'");
  datasets_.clear();
  files_.clear();
  transfer_.reset();
}

uint64_t ParallelModelDirWriter::finish() {
  ZT_CHECK(!finished_, "parallel model writer for '" + dir_ + "' finished twice");
  try {
    const Deadline deadline(comm_.timeout_seconds(),
                            "closing the parallel HDF5 files of '" + tmp_dir_ + "'", comm_.rank());
    run_collectively(comm_, [&] { close_files(); });
  } catch (const std::exception& e) {
    abandon_after_failure(e.what());
  }
  run_collectively(comm_, [&] {
    if (comm_.rank() != 0) return;
    std::map<std::string, std::string> weight_map;
    for (size_t i = 0; i < shard_of_.size(); ++i)
      weight_map[layout_.tensors()[i].name] = model_shard_file_name(shard_of_[i], num_shards_);
    write_weight_index_file(tmp_dir_ + "/" + kModelIndexFile, weight_map, total_bytes_);
    write_model_config_file(tmp_dir_, config_);
    for (int s = 1; s <= num_shards_; ++s) fsync_path(shard_path(s));
    fsync_path(tmp_dir_);
    move_into_place(tmp_dir_, dir_, overwrite_);
  });
  finished_ = true;
  return total_bytes_;
}

#else  // serial HDF5: the class exists, but cannot be constructed.

bool ParallelModelDirWriter::available() {
  return false;
}

ParallelModelDirWriter::ParallelModelDirWriter(std::string dir, const ModelConfig& config,
                                               MpiCommunicator& comm, uint64_t, bool overwrite)
    : dir_(std::move(dir)), config_(config), layout_(config), comm_(comm), overwrite_(overwrite) {
  (void)broadcast_string;
  fail("cannot write '" + dir_ + "' with parallel HDF5: this build's HDF5 has no MPI-IO support");
}

ParallelModelDirWriter::~ParallelModelDirWriter() = default;

void ParallelModelDirWriter::open_files() {}

void ParallelModelDirWriter::remove_temp_dir() {}

void ParallelModelDirWriter::abandon_after_failure(const std::string& error) {
  fail(error);
}

void ParallelModelDirWriter::write(const TensorInfo&, int64_t, int64_t, const bf16_t*) {
  fail("parallel HDF5 is not available");
}

void ParallelModelDirWriter::write_on_every_rank(const std::function<void()>&) {
  fail("parallel HDF5 is not available");
}

uint64_t ParallelModelDirWriter::finish() {
  fail("parallel HDF5 is not available");
}

void ParallelModelDirWriter::close_files() {}

std::string ParallelModelDirWriter::shard_path(int) const {
  return "";
}

#endif

}  // namespace zt
