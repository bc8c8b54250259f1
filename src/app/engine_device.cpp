#include "app/engine_device.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "backend/backend_choice.h"
#include "runtime/mpi_runtime.h"
#include "util/error.h"
#if ZEROTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device_memory.h"
#include "backend/cuda/cuda_devices.h"
#include "backend/device_arena_plan.h"
#include "comm/collective_outcome.h"
#include "comm/cuda/staged_device_communicator.h"
#endif
#if ZEROTRAIN_HAVE_NCCL
#include "comm/cuda/nccl_communicator.h"
#endif

namespace zt {

BackendKind resolve_engine_backend(BackendRequest requested, const std::string& command) {
#if ZEROTRAIN_HAVE_CUDA
  return resolve_backend(requested, true, cuda_device_count(), command);
#else
  return resolve_backend(requested, false, 0, command);
#endif
}

void check_attention_request(AttentionRequest request, BackendKind backend,
                             const std::string& command) {
  ZT_CHECK(request != AttentionRequest::kFused || backend == BackendKind::kCuda,
           command +
               ": --attention fused needs the CUDA backend (this run uses the CPU backend, "
               "which has one attention)");
}

void check_gemm_algorithms(GemmAlgorithms choice, BackendKind backend, const std::string& command) {
  ZT_CHECK(choice != GemmAlgorithms::kTimed || backend == BackendKind::kCuda,
           command +
               ": --gemm-algorithms timed needs the CUDA backend (this run uses the CPU backend, "
               "whose GEMMs are OpenBLAS's, with no algorithms to choose from)");
}

void check_deterministic(bool deterministic, BackendKind backend, bool world_invariant,
                         const std::string& command) {
  if (deterministic) return;
  ZT_CHECK(backend == BackendKind::kCuda,
           command +
               ": --deterministic false needs the CUDA backend (this run uses the CPU backend, "
               "whose kernels are all deterministic)");
  ZT_CHECK(!world_invariant,
           command +
               ": --deterministic false and --world-invariant contradict each other: "
               "--world-invariant promises the same bits at every world size, --deterministic "
               "false gives up the same bits from one run to the next");
}

void check_activation_storage(DType storage, Precision precision, const std::string& command) {
  // 16-bit activations are stored in the working params' own type.
  ZT_CHECK(storage == DType::kFloat32 || working_dtype(precision) == storage,
           command + ": --activations " + activation_storage_name(storage) + " needs --precision " +
               activation_storage_name(storage) + " (this run's precision is " +
               precision_name(precision) + ")");
}

AttentionShape attention_shape(const ModelConfig& config, int64_t B, int64_t T) {
  // Layer 0 has the model's window where any layer has one (Gemma 2's first layer slides).
  return {B,
          T,
          config.num_heads,
          config.num_kv_heads,
          config.head_dim(),
          config.attention_scores(0, T)};
}

#if ZEROTRAIN_HAVE_CUDA
namespace {

// The backend on `device` for --attention resolved there, then agreed over `host` (collective):
// under auto, one rank whose GPU cannot run the fused attention takes every rank to gemm, so that
// all ranks compute alike. (A refused explicit fused request is an AgreedError on every rank,
// naming the rank and cuDNN's reason.) cuDNN is asked by building the fused backend and its graphs
// for the run's shape: the run keeps them when fused is agreed, and only a fallback builds a second
// backend.
std::unique_ptr<cuda::CudaBackend> agreed_backend(MpiCommunicator& host, int device,
                                                  const AttentionSetup& attention,
                                                  AttentionChoice& choice) {
#if ZEROTRAIN_HAVE_CUDNN
  const bool fused_built = true;
#else
  const bool fused_built = false;
#endif
  std::unique_ptr<cuda::CudaBackend> fused;
  const auto cudnn_refusal = [&]() -> std::string {
    try {
      fused = make_cuda_backend(device, cuda::CudaBackendOptions::for_micro_batch(
                                            AttentionKernel::kFused, attention.shape,
                                            attention.storage, attention.deterministic));
      fused->prepare_fused_attention(attention.shape, attention.storage, attention.backward,
                                     attention.document_masks);
      return "";
    } catch (const std::exception& e) {  // a handle cuDNN cannot create, a graph it refuses
      fused.reset();
      // cuDNN has no deterministic fused backward on Blackwell (sm_100; the frontend's refusal
      // says "not supported on blackwell"): the way there.
      const std::string reason = e.what();
      return reason + (reason.find("not supported on blackwell") != std::string::npos
                           ? " (on Blackwell, cuDNN's fused attention backward runs only without "
                             "its deterministic algorithm: --deterministic false)"
                           : "");
    }
  };
  // An explicit fused request that this rank's GPU or cuDNN refuses fails every rank, naming it.
  run_collectively(host, [&] {
    choice = choose_attention(attention.request, fused_built, cuda_compute_capability_major(device),
                              attention.shape, attention.fp32_run, cudnn_refusal,
                              attention.document_masks);
  });
  double gemm_ranks = choice.kernel == AttentionKernel::kGemm ? 1.0 : 0.0;
  host.all_reduce_sum_blocking(&gemm_ranks, 1);
  if (choice.kernel == AttentionKernel::kFused && gemm_ranks > 0)
    choice = {AttentionKernel::kGemm,
              "gemm (auto: " + std::to_string(static_cast<int>(gemm_ranks)) +
                  " other rank(s) cannot run the fused attention)"};
  if (choice.kernel == AttentionKernel::kFused) {
    if (!attention.deterministic && attention.backward) choice.why += ", nondeterministic backward";
    return fused;
  }
  // The GEMM attention is deterministic either way.
  if (!attention.deterministic)
    choice.why += " (--deterministic false: only the fused attention has a faster backward)";
  fused.reset();  // its device memory goes before the gemm backend takes its own
  return make_cuda_backend(device, cuda::CudaBackendOptions::for_micro_batch(
                                       AttentionKernel::kGemm, attention.shape, attention.storage));
}

// An arena per device-pool category, sized from its estimated peak (arena_reservation_bytes);
// an overflow falls back to cudaMalloc. The arenas add up to the categories' peaks, each with
// slack, more than the run holds at once (the categories peak at different times): a GPU that
// cannot hold them all gets none, with a warning, and every category takes cudaMalloc per
// allocation, so that a run whose actual peak fits still runs (slower).
void reserve_arenas(cuda::CudaDeviceMemory& memory, const MemoryEstimate& e, int rank) {
  const std::pair<MemCategory, int64_t> planned[] = {{MemCategory::kParams, e.params},
                                                     {MemCategory::kGrads, e.grads},
                                                     {MemCategory::kOptimizer, e.optimizer},
                                                     {MemCategory::kActivations, e.activations},
                                                     {MemCategory::kCommBuffers, e.buffers_peak()}};
  size_t total = 0;
  for (const auto& [category, bytes] : planned) {
    const size_t reserve = cuda::arena_reservation_bytes(bytes);
    total += reserve;
    if (reserve == 0 || memory.reserve(category, reserve)) continue;
    memory.release_arenas();
    std::cerr << "zerotrain: warning: rank " << rank
              << ": the GPU cannot hold the device arenas planned from the memory estimate ("
              << mem_category_name(category) << "'s " << reserve << " bytes did not fit after "
              << total - reserve
              << " bytes of the others); every category takes cudaMalloc per allocation instead "
                 "(slower)\n";
    return;
  }
}

EngineDevice make_cuda_device(MpiCommunicator& host, MPI_Comm data_group,
                              const MemoryEstimate& estimate, const AttentionSetup& attention,
                              GemmAlgorithms gemm_algorithms) {
  const LocalRank local = local_rank_by_hostname(host.comm());
  const int gpus = cuda_device_count();
  const int device = device_for_local_rank(local, gpus);
  // NCCL's set-up is collective over the data group, so every rank takes the same communicator:
  // two ranks driving one GPU, on any host, put the whole job on the staged one. The GPUs are
  // told apart by UUID, not by counting ranks against the devices a rank sees: a scheduler that
  // binds one GPU per task shows each rank a single device 0, each a different GPU.
  // A rank that cannot read it, or whose GPU the backend cannot run on, fails every rank, before
  // the gather.
  std::string uuid;
  run_collectively(host, [&] {
    uuid = cuda_device_uuid(device);
    check_cuda_device_supported(device);
  });
  const std::vector<int> sharing = ranks_sharing_device(all_gather_strings(host.comm(), uuid, 64));
  const int share_mine = sharing[static_cast<size_t>(host.rank())];
  const bool shares_gpu = *std::max_element(sharing.begin(), sharing.end()) > 1;
  AttentionChoice choice;
  std::unique_ptr<cuda::CudaBackend> backend = agreed_backend(host, device, attention, choice);
  if (gemm_algorithms == GemmAlgorithms::kTimed) backend->time_gemm_algorithms();
  EngineDevice out;
  out.summary = backend->name() + " (device " + std::to_string(device) + ")";
  // The communicator before the arenas: what NCCL takes at its set-up is taken before the arenas
  // planned from the estimate fill the GPU. (The buffers of connections NCCL makes at the first
  // collective of each kind, its default since 2.22, come later and are not planned.)
#if ZEROTRAIN_HAVE_NCCL
  if (!shares_gpu) {
    auto nccl = std::make_unique<NcclCommunicator>(data_group, device);
    nccl->set_producer_stream(backend->stream_handle());  // collectives follow the compute
    out.device_comm = std::move(nccl);
  }
#endif
  if (!out.device_comm)
    out.device_comm = std::make_unique<cuda::StagedDeviceCommunicator>(data_group);
  reserve_arenas(backend->cuda_memory(), estimate, host.rank());
  out.device_comm->set_timeout_seconds(host.timeout_seconds());
  out.summary += std::string(", ") + out.device_comm->backend_name() +
                 (share_mine > 1 ? " (" + std::to_string(share_mine) + " ranks share device " +
                                       std::to_string(device) + " on " + local.hostname + ")"
                  : shares_gpu ? " (ranks share a GPU on another host)"
                               : "") +
                 ", attention " + choice.why +
                 (gemm_algorithms == GemmAlgorithms::kTimed ? ", GEMM algorithms timed" : "");
  out.attention_kernel = attention_kernel_name(choice.kernel);
  out.backend = std::move(backend);
  return out;
}

}  // namespace
#endif

EngineDevice make_engine_device(BackendKind kind, MpiCommunicator& host, MPI_Comm data_group,
                                const MemoryEstimate& estimate, const AttentionSetup& attention,
                                GemmAlgorithms gemm_algorithms) {
#if ZEROTRAIN_HAVE_CUDA
  if (kind == BackendKind::kCuda)
    return make_cuda_device(host, data_group, estimate, attention, gemm_algorithms);
#else
  (void)kind;
  (void)data_group;
  (void)estimate;
  (void)attention;  // check_attention_request refused `fused` for the CPU backend
#endif
  (void)gemm_algorithms;  // check_gemm_algorithms refused `timed` for the CPU backend
  EngineDevice out;
  out.backend = make_cpu_backend();
  out.summary = "cpu";
  return out;
}

}  // namespace zt
