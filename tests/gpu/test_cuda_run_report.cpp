// What a CUDA backend tallies for train's report.json and log (report/run_report.h's
// backend_tallies): `gemm_algorithms` only under --gemm-algorithms timed, `attention_graphs` only
// with the fused attention, each with the numbers the backend's own parts hold.
#include <gtest/gtest.h>

#include <optional>

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
  EXPECT_GT(graphs.build_seconds, 0.0);
  EXPECT_GT(graphs.workspace_bytes, 0);
  const BackendTallies tallies = backend_tallies(*backend);
  EXPECT_EQ(tallies.fields["attention_graphs"]["built"], 2);
  EXPECT_EQ(tallies.fields["attention_graphs"]["build_s"], graphs.build_seconds);
  EXPECT_EQ(tallies.fields["attention_graphs"]["workspace_bytes"], graphs.workspace_bytes);
  ASSERT_EQ(tallies.log_lines.size(), 1u);
  EXPECT_EQ(tallies.log_lines[0].rfind("cuDNN attention graphs: 2 built in ", 0), 0u)
      << tallies.log_lines[0];
}
#endif

}  // namespace
}  // namespace zt::gpu_test
