#include "app/environment_report.h"

#include <cblas.h>
#include <unistd.h>

#include <boost/version.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "backend/cpu/cpu_adam.h"
#include "report/run_report.h"
#include "runtime/cpu_placement.h"
#include "zerotrain_commit.h"
#if ZEROTRAIN_HAVE_CUDA
#include "backend/cuda/cuda_environment.h"
#endif
#if ZEROTRAIN_HAVE_NCCL
#include "comm/cuda/nccl_communicator.h"
#endif

extern char** environ;

namespace zt {

namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The variables a rank's placement depends on: the launcher's rank and size, Slurm's job and
// step, the GPUs it may use, NCCL's, Open MPI's MCA and OpenMP/OpenBLAS threading, and our own.
nlohmann::json placement_variables() {
  static const char* const kPrefixes[] = {
      "SLURM_", "OMPI_COMM_WORLD_", "OMPI_MCA_", "PMI_", "PMIX_RANK", "NCCL_", "ZT_", "OPENBLAS_"};
  static const char* const kNames[] = {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LOCAL_RANK",
                                       "MASTER_ADDR", "MASTER_PORT"};
  std::map<std::string, std::string> found;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    bool keep = false;
    for (const char* p : kPrefixes) keep = keep || name.rfind(p, 0) == 0;
    for (const char* n : kNames) keep = keep || name == n;
    if (keep) found[name] = entry.substr(eq + 1);
  }
  return found;
}

// Who started this process, and the rank it was given.
nlohmann::json process_report(nlohmann::json& missing) {
  nlohmann::json out;
  char host[256] = {};
  out["hostname"] = gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  auto rank_from = [&](const char* launcher_name, const char* rank, const char* size,
                       const char* local_rank) {
    out["launcher"] = launcher_name;
    out["rank"] = env_or_empty(rank);
    out["world_size"] = env_or_empty(size);
    out["local_rank"] = env_or_empty(local_rank);
  };
  if (!env_or_empty("OMPI_COMM_WORLD_SIZE").empty()) {
    rank_from("mpirun (Open MPI)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
              "OMPI_COMM_WORLD_LOCAL_RANK");
  } else if (!env_or_empty("SLURM_STEP_ID").empty() && !env_or_empty("SLURM_PROCID").empty()) {
    rank_from("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  } else if (!env_or_empty("PMIX_RANK").empty()) {
    rank_from("a PMIx launcher", "PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK");
  } else {
    out["launcher"] = nullptr;
    missing.push_back("no launcher: no mpirun or srun rank variables (a world of one rank)");
  }
  out["slurm_job"] = env_or_empty("SLURM_JOB_ID").empty()
                         ? nlohmann::json(nullptr)
                         : nlohmann::json(env_or_empty("SLURM_JOB_ID"));
  out["variables"] = placement_variables();
  return out;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t value = line.find_first_not_of(" \t", colon + 1);
    if (value != std::string::npos) return line.substr(value);  // else an empty name
  }
  return "unknown";
}

nlohmann::json cpu_report(nlohmann::json& missing) {
  nlohmann::json out = {{"model", cpu_model_name()},
                        {"logical_cpus", std::thread::hardware_concurrency()},
                        // What a launcher's binding left this process, and the threads it runs.
                        {"affinity_cpus", affinity_cpu_count()},
                        {"openmp_threads", openmp_thread_count()},
                        {"features",
                         {{"avx2", static_cast<bool>(__builtin_cpu_supports("avx2"))},
                          {"fma", static_cast<bool>(__builtin_cpu_supports("fma"))},
                          {"avx512f", static_cast<bool>(__builtin_cpu_supports("avx512f"))}}}};
  try {
    out["adam_path"] = cpu::adam_simd_name(cpu::best_adam_simd());
  } catch (const std::exception& e) {
    out["adam_path"] = nullptr;
    missing.push_back(std::string("CPU Adam: ") + e.what());
  }
  return out;
}

nlohmann::json openblas_report() {
  const char* config = openblas_get_config();
  const char* core = openblas_get_corename();
  const int parallel = openblas_get_parallel();
  return {{"config", config ? config : "unknown"},
          {"core", core ? core : "unknown"},
          {"threads", openblas_get_num_threads()},
          {"threading", parallel == 0   ? "sequential"
                        : parallel == 1 ? "pthreads"
                                        : "OpenMP"}};
}

}  // namespace

nlohmann::json environment_report() {
  nlohmann::json missing = nlohmann::json::array();
  nlohmann::json libraries = library_versions();
  libraries.erase("zerotrain");
  libraries["openblas"] = openblas_report();
  std::string boost = BOOST_LIB_VERSION;  // "1_74"
  for (char& c : boost) c = c == '_' ? '.' : c;
  libraries["boost"] = boost;
  nlohmann::json backends = {"cpu"}, communicators = {"mpi"}, attention = {"gemm"};
  nlohmann::json gpu = nullptr;
#if ZEROTRAIN_HAVE_CUDA
  backends.push_back("cuda");
  communicators.push_back("staged-mpi (device buffers through host memory)");
  gpu = cuda::cuda_environment();
  for (const auto& m : gpu["missing"]) missing.push_back(m);
  gpu.erase("missing");
#else
  missing.push_back("built without the CUDA backend (no nvcc at configure time)");
#endif
#if ZEROTRAIN_HAVE_NCCL
  communicators.push_back("nccl");
  const int nccl = nccl_library_version();
  libraries["nccl"] = nccl > 0 ? nlohmann::json(std::to_string(nccl / 10000) + "." +
                                                std::to_string((nccl % 10000) / 100) + "." +
                                                std::to_string(nccl % 100))
                               : nlohmann::json(nullptr);
#else
  libraries["nccl"] = nullptr;
  missing.push_back("built without NCCL: GPU runs use the staged MPI communicator");
#endif
#if ZEROTRAIN_HAVE_CUDNN
  attention.push_back("fused (cuDNN)");
#endif
  if (!libraries.value("hdf5_parallel", false))
    missing.push_back(
        "HDF5 is serial (no MPI-IO): consolidated models are written by rank 0, one tensor at a "
        "time");
  nlohmann::json report = {
      {"zerotrain", {{"version", ZEROTRAIN_VERSION}, {"commit", ZEROTRAIN_COMMIT}}},
      {"compiled",
       {{"backends", backends}, {"communicators", communicators}, {"attention", attention}}},
      {"libraries", libraries},
      {"cpu", cpu_report(missing)},
      {"cuda", gpu},
      {"process", process_report(missing)}};
  report["missing"] = missing;
  return report;
}

namespace {

std::string scalar_text(const nlohmann::json& v) {
  if (v.is_null()) return "not found";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void print_tree(const nlohmann::json& j, std::ostream& os, const std::string& indent) {
  for (const auto& [key, value] : j.items()) {
    if (value.is_object() && !value.empty()) {
      os << indent << key << ":\n";
      print_tree(value, os, indent + "  ");
    } else if (value.is_array()) {
      if (value.empty()) {
        os << indent << key << ": none\n";
        continue;
      }
      os << indent << key << ":\n";
      for (const auto& item : value) {
        if (item.is_object()) {
          std::string line;
          for (const auto& [k, v] : item.items())
            line += (line.empty() ? "" : ", ") + k + " " + scalar_text(v);
          os << indent << "  - " << line << "\n";
        } else {
          os << indent << "  - " << scalar_text(item) << "\n";
        }
      }
    } else {
      os << indent << key << ": " << (value.is_object() ? "none" : scalar_text(value)) << "\n";
    }
  }
}

}  // namespace

void print_environment_report(const nlohmann::json& report, std::ostream& os) {
  nlohmann::json section;  // one top-level key at a time, in reading order
  for (const char* key :
       {"zerotrain", "compiled", "libraries", "cpu", "cuda", "process", "missing"})
    if (report.contains(key)) {
      section = nlohmann::json::object({{key, report.at(key)}});
      print_tree(section, os, "");
    }
}

}  // namespace zt
