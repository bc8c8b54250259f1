// The compute backend and the data-plane communicator a command runs the ZeRO engine on
// (--backend cpu|cuda|auto, backend/backend_choice.h):
//   cpu   the CPU backend; its device memory is host memory, so the host MPI communicator carries
//         device buffers too.
//   cuda  the CUDA backend on this rank's GPU (its index among the ranks on its host, by hostname,
//         modulo the visible GPUs), with one device arena per memory category reserved from the
//         memory estimate; collectives over NCCL, or over the host-staged MPI communicator when
//         ranks share a GPU (NCCL refuses that) or the build has no NCCL.
// Host scalars and checkpoint metadata always go through the host MPI communicator.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/backend_choice.h"
#include "comm/mpi_communicator.h"
#include "engine/estimator.h"

namespace zt {

struct EngineDevice {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> device_comm;  // null: the host communicator carries everything
  std::string summary;                        // e.g. "cpu", "cuda:0 nvidia h100, nccl"

  Communicator& data_comm(Communicator& host) { return device_comm ? *device_comm : host; }
};

// Which backend `requested` resolves to on this build and host; zt::Error naming `command` for an
// unknown value or an unavailable CUDA backend. Not collective.
BackendKind resolve_engine_backend(const std::string& requested, const std::string& command);

// Builds it: the GPU is placed among the ranks of `host` (collective over it: hostname
// exchange); the data-plane communicator spans `data_group` (collective over it: NCCL setup) —
// host's own group for training, MPI_COMM_SELF for per-rank evaluation.
EngineDevice make_engine_device(const std::string& requested, MpiCommunicator& host,
                                MPI_Comm data_group, const MemoryEstimate& estimate,
                                const std::string& command);

}  // namespace zt
