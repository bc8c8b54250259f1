// The compute backend and the data-plane communicator a command runs the ZeRO engine on
// (--backend cpu|cuda|auto, backend/backend_choice.h):
//   cpu   the CPU backend; its device memory is host memory, so the host MPI communicator carries
//         device buffers too.
//   cuda  the CUDA backend on this rank's GPU (its index among the ranks on its host, by hostname,
//         modulo the visible GPUs), with one device arena per memory category reserved from the
//         memory estimate; collectives over NCCL, or over the host-staged MPI communicator when
//         ranks share a GPU (NCCL refuses that) or the build has no NCCL; attention by --attention
//         (gemm | fused | auto, backend/attention_choice.h).
// Host scalars and checkpoint metadata always go through the host MPI communicator.
#pragma once
#include <memory>
#include <string>

#include "backend/attention_choice.h"
#include "backend/backend.h"
#include "backend/backend_choice.h"
#include "backend/gemm_tuning.h"
#include "comm/mpi_communicator.h"
#include "engine/estimator.h"
#include "model/config.h"

namespace zt {

struct EngineDevice {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> device_comm;  // null: the host communicator carries everything
  std::string summary;                        // e.g. "cpu", "cuda:0 nvidia h100, nccl"
  // The attention kernel the backend runs, for the checkpoint (a resume on other arithmetic
  // warns) and run.json: "cpu" (the CPU backend's one), or "gemm" | "fused" on cuda (--attention
  // resolved).
  std::string attention_kernel = "cpu";

  Communicator& data_comm(Communicator& host) { return device_comm ? *device_comm : host; }
};

// Which backend `requested` resolves to on this build and host; zt::Error naming `command` for an
// unknown value or an unavailable CUDA backend. Not collective.
BackendKind resolve_engine_backend(BackendRequest requested, const std::string& command);

// --attention for this run: `fused` refused (naming `command`) when the backend resolves to the
// CPU, which has one attention. Not collective.
void check_attention_request(AttentionRequest request, BackendKind backend,
                             const std::string& command);

// --gemm-algorithms: `timed` refused (naming `command`) when the backend resolves to the CPU,
// which has no algorithms to choose from. Not collective.
void check_gemm_algorithms(GemmAlgorithms choice, BackendKind backend, const std::string& command);

// --deterministic false: refused (naming `command`) on the CPU backend, whose kernels are all
// deterministic, and with --world-invariant, which promises the same bits. Not collective.
void check_deterministic(bool deterministic, BackendKind backend, bool world_invariant,
                         const std::string& command);

// --activations (kFloat32, kBf16 or kFloat16): a 16-bit type is refused (naming `command`) unless
// it is the precision's working type. Not collective.
void check_activation_storage(DType storage, Precision precision, const std::string& command);

// The micro-batch's attention and what was asked for it; the CUDA backend resolves the request
// with choose_attention on its GPU, and sizes its own attention scratch for the shape
// (CudaBackendOptions::for_micro_batch).
struct AttentionSetup {
  AttentionRequest request = AttentionRequest::kGemm;
  AttentionShape shape;
  DType storage = DType::kFloat32;  // the activations' (--activations)
  bool fp32_run = false;            // --precision fp32: auto keeps the attention exact
  bool backward = true;             // training; eval runs the forward alone (no backward graph)
  bool document_masks = false;  // --document-masking resolved on: the fused path's ragged graphs
  bool deterministic = true;    // --deterministic: false lets the fused backward use atomics
};

// The attention of one micro-batch [B, T] of `config`.
AttentionShape attention_shape(const ModelConfig& config, int64_t B, int64_t T);

// Builds it: the GPU is placed among the ranks of `host` (collective over it: the hostname
// exchange; an all-gather of the GPUs' UUIDs, so that every rank takes the staged communicator
// when two ranks drive one GPU on any host; the agreement on the attention kernel); the
// data-plane communicator spans `data_group` (collective over it: NCCL setup) — host's own group
// for training, MPI_COMM_SELF for per-rank evaluation.
// gemm_algorithms: kTimed makes the CUDA backend time its GEMMs' algorithms (checked by
// check_gemm_algorithms before).
EngineDevice make_engine_device(BackendKind kind, MpiCommunicator& host, MPI_Comm data_group,
                                const MemoryEstimate& estimate, const AttentionSetup& attention,
                                GemmAlgorithms gemm_algorithms = GemmAlgorithms::kHeuristic);

}  // namespace zt
