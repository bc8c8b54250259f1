// `zerotrain info --env` (docs/troubleshooting.md), the counterpart of DeepSpeed's
// ds_report: what this build holds and what this rank sees. zerotrain's version and commit; the
// compiled-in backends, communicators and attention paths; the MPI, HDF5, OpenBLAS, Boost, CUDA,
// cuBLASLt, cuDNN and NCCL versions; the CPU and the features the CPU Adam uses; the visible GPUs;
// the launcher and the Slurm, MPI, NCCL and zerotrain variables in the environment. It needs no
// MPI_Init, so every rank of `mpirun -np N zerotrain info --env` reports for itself. A missing
// piece is a sentence under "missing", never an error.
#pragma once
#include <ostream>

#include <nlohmann/json.hpp>

namespace zt {

nlohmann::json environment_report();

// The report as indented "key: value" lines (null prints as "not found").
void print_environment_report(const nlohmann::json& report, std::ostream& os);

}  // namespace zt
