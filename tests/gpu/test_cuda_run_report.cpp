// What a CUDA backend tallies for train's report.json and log (report/run_report.h's
// backend_tallies): `gemm_algorithms` only under --gemm-algorithms timed, `attention_graphs` only
// with the fused attention, each with the numbers the backend's own parts hold.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/attention_graph_report.h"
#include "gpu_test_util.h"
#include "report/run_report.h"

namespace zt::gpu_test {
namespace {

TEST(CudaRunReport, PlainBackendTalliesNothing) {
  auto backend = make_cuda_backend(0, test_options(cuda::GemmCompute::kBf16TensorCores));
  const BackendTallies tallies = backend_tallies(*backend);
  EXPECT_TRUE(tallies.fields.empty()) << tallies.fields.dump();
  EXPECT_TRUE(tallies.log_lines.empty());
}

TEST(CudaRunReport, TimedGemmsAreTallied) {
  auto backend = make_cuda_backend(0, test_options(cuda::GemmCompute::kBf16TensorCores));
  backend->time_gemm_algorithms();
  DeviceBuffer<float> x(std::vector<float>(64 * 32, 0.5f)), w(std::vector<float>(48 * 32, 0.25f)),
      y(64 * 48);
  backend->matmul_forward({y.get(), DType::kFloat32}, {x.get(), DType::kFloat32},
                          {w.get(), DType::kFloat32}, 64, 48, 32);
  backend->synchronize();
  const BackendTallies tallies = backend_tallies(*backend);
  ASSERT_TRUE(tallies.fields.contains("gemm_algorithms")) << tallies.fields.dump();
  EXPECT_EQ(tallies.fields["gemm_algorithms"]["shapes"], 1);
  EXPECT_FALSE(tallies.fields.contains("attention_graphs"));
  ASSERT_EQ(tallies.log_lines.size(), 1u);
  EXPECT_EQ(tallies.log_lines[0].rfind("GEMM algorithms: ", 0), 0u) << tallies.log_lines[0];
}

#if ZEROTRAIN_HAVE_CUDNN
// prepare_fused_attention (train's start-up) builds the forward and backward graphs: the report
// counts both, with their build time and the workspace they took.
TEST(CudaRunReport, FusedAttentionGraphsAreTallied) {
  const AttentionShape s{2, 40, 4, 2, 32};
  cuda::CudaBackendOptions options = test_options(cuda::GemmCompute::kBf16TensorCores);
  options.attention = AttentionKernel::kFused;
  auto backend = make_cuda_backend(0, options);
  ASSERT_TRUE(backend->attention_graph_report().has_value());
  EXPECT_EQ(backend->attention_graph_report()->graphs_built, 0);
  backend->prepare_fused_attention(s, DType::kBf16);
  const AttentionGraphReport graphs = backend->attention_graph_report().value();
  EXPECT_EQ(graphs.graphs_built, 2);
  EXPECT_EQ(graphs.built_at_start, 2);
  EXPECT_GT(graphs.build_seconds, 0.0);
  EXPECT_EQ(graphs.build_seconds_at_start, graphs.build_seconds);
  EXPECT_GT(graphs.workspace_bytes, 0);
  BackendTallies tallies = backend_tallies(*backend);
  ASSERT_TRUE(tallies.fields.contains("attention_graphs")) << tallies.fields.dump();
  EXPECT_EQ(tallies.fields["attention_graphs"]["built"], 2);
  EXPECT_EQ(tallies.fields["attention_graphs"]["built_in_steps"], 0);
  EXPECT_EQ(tallies.fields["attention_graphs"]["build_s"], graphs.build_seconds);
  EXPECT_EQ(tallies.fields["attention_graphs"]["workspace_bytes"], graphs.workspace_bytes);
  ASSERT_EQ(tallies.log_lines.size(), 1u);
  EXPECT_EQ(tallies.log_lines[0].rfind("cuDNN attention graphs: 2 built in ", 0), 0u)
      << tallies.log_lines[0];
  // A call of another shape after start-up (what a step meets): one graph built in steps.
  const AttentionShape later{1, 64, 4, 2, 32};
  const uint16_t one = 0x3f80;  // 1.0 in bf16
  DeviceBuffer<uint16_t> q(std::vector<uint16_t>(64 * 4 * 32, one)),
      kv(std::vector<uint16_t>(64 * 2 * 32, one)), out(q.size());
  DeviceBuffer<float> lse(4 * 64);
  backend->attention_forward({out.get(), DType::kBf16}, lse.get(), {q.get(), DType::kBf16},
                             {kv.get(), DType::kBf16}, {kv.get(), DType::kBf16}, later.B, later.T,
                             later.H, later.Hkv, later.hd);
  backend->synchronize();
  tallies = backend_tallies(*backend);
  ASSERT_TRUE(tallies.fields.contains("attention_graphs")) << tallies.fields.dump();
  EXPECT_EQ(tallies.fields["attention_graphs"]["built"], 3);
  EXPECT_EQ(tallies.fields["attention_graphs"]["built_in_steps"], 1);
  EXPECT_GT(tallies.fields["attention_graphs"]["build_s_in_steps"].get<double>(), 0.0);
}
#endif

}  // namespace
}  // namespace zt::gpu_test
