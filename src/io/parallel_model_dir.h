// A model directory (docs/ARCHITECTURE.md §3) written by every rank of a communicator at once
// through parallel HDF5 (MPI-IO): each rank writes its own element ranges of the tensors straight
// into the shared bf16 shard files, so no rank ever holds a whole tensor, let alone the model.
//
// Protocol (the shard files and datasets are the same as ModelDirWriter's, same sharding rule):
//   constructor (collective)  rank 0 checks the output directory and creates the temporary
//                             sibling DIR.tmp-<pid of rank 0>; every rank opens every shard with
//                             the MPI-IO driver and creates every dataset in layout order (HDF5
//                             metadata operations are collective).
//   write (independent)       a flat element range of one tensor (HDF5 hyperslabs, independent
//                             MPI-IO transfers), any number of times, any rank, any order.
//   finish (collective)       every rank closes the datasets and files; the ranks agree that all
//                             writes succeeded; rank 0 writes config.json and the index, fsyncs
//                             and moves the directory into place.
// Before anything is written, rank 0 checks that the filesystem has room for the model and is
// writable (an ENOSPC or EACCES error names the directory). A failure on any rank makes every
// rank agree (run_collectively); rank 0 removes the temporary directory and every rank then
// throws, without the collective HDF5 close that a failed MPI-IO file can no longer complete
// (so the job ends, by MPI_Abort, instead of hanging). Every collective HDF5 call runs under a
// Deadline of the communicator's timeout.
//
// Only builds with parallel HDF5 (ZEROTRAIN_HDF5_PARALLEL) can construct one; available() says
// whether this one can.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "io/hdf5_util.h"
#include "io/model_dir.h"
#include "model/config.h"
#include "model/layout.h"
#include "util/bf16.h"

namespace zt {

class ParallelModelDirWriter {
 public:
  // True when HDF5 was built with MPI-IO support.
  static bool available();

  ParallelModelDirWriter(std::string dir, const ModelConfig& config, MpiCommunicator& comm,
                         uint64_t shard_limit_bytes = kDefaultShardLimitBytes,
                         bool overwrite = false);
  ~ParallelModelDirWriter();
  ParallelModelDirWriter(const ParallelModelDirWriter&) = delete;
  ParallelModelDirWriter& operator=(const ParallelModelDirWriter&) = delete;

  const ParamLayout& layout() const { return layout_; }

  // Writes elements [begin, begin+count) of tensor `t` (flat, row-major) as bf16. Independent:
  // only this rank takes part.
  void write(const TensorInfo& t, int64_t begin, int64_t count, const bf16_t* values);

  // Collective: runs fn (this rank's write() calls) and agrees on the outcome with every rank; a
  // failure anywhere abandons the files (see above) and throws on every rank.
  void write_on_every_rank(const std::function<void()>& fn);

  // Collective: closes the files, publishes the directory. Returns the tensor bytes written.
  uint64_t finish();

 private:
  void open_files();   // collective: every shard file and dataset
  void close_files();  // collective
  // After an agreed failure: forgets the HDF5 files without their collective close, removes the
  // temporary directory (rank 0) and throws `error` (plus what the filesystem says) on every rank.
  [[noreturn]] void abandon_after_failure(const std::string& error);
  void remove_temp_dir();  // rank 0
  std::string shard_path(int shard) const;

  std::string dir_, tmp_dir_;
  ModelConfig config_;
  ParamLayout layout_;
  MpiCommunicator& comm_;
  bool overwrite_;
  bool finished_ = false;
  std::vector<int> shard_of_;  // per layout tensor, 1-based
  int num_shards_ = 0;
  uint64_t total_bytes_ = 0;
  std::vector<h5::Id> files_;     // per shard
  std::vector<h5::Id> datasets_;  // per layout tensor
  h5::Id transfer_;               // dataset transfer property list (independent MPI-IO)
};

}  // namespace zt
