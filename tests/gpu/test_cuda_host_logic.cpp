// CPU-only checks of the CUDA backend's host-side logic (no GPU, no CUDA headers): the scratch
// arena's bump regions and pass sizing, where an AdamW shard's 16-byte accesses start, --backend
// resolution and the backend's scratch prediction. The fused attention's host side is in
// test_attention_choice_host.cpp.
#include <gtest/gtest.h>

#include <string>

#include "backend/attention_choice.h"
#include "backend/backend_choice.h"
#include "backend/device_arena_plan.h"
#include "backend/vector_alignment.h"
#include "model/config.h"
#include "util/error.h"

namespace zt::cuda {
namespace {

// The elements an AdamW shard updates one by one before its 16-byte accesses: fp32 buffers one
// element in take 3; with a bf16 copy two bytes in, 7; fp32 two elements in and bf16 four bytes
// in, 6 (where both periods meet). Buffers misaligned to one another, or a count not under the
// limit, take none (all element by element).
TEST(VectorAlignment, ElementsToAlignment) {
  alignas(16) unsigned char buffer[256] = {};
  const unsigned char* at = buffer;
  EXPECT_EQ(elements_to_alignment({{at, 4}, {at + 64, 4}, {at + 128, 2}}, 8), 0);
  EXPECT_EQ(elements_to_alignment({{at + 4, 4}, {at + 68, 4}, {nullptr, 2}}, 8), 3);
  EXPECT_EQ(elements_to_alignment({{at + 4, 4}, {at + 130, 2}}, 8), 7);
  EXPECT_EQ(elements_to_alignment({{at + 8, 4}, {at + 132, 2}}, 8), 6);
  EXPECT_EQ(elements_to_alignment({{at + 4, 4}, {at + 72, 4}}, 8), 0);  // 1 and 2 elements in
  EXPECT_EQ(elements_to_alignment({{at + 4, 4}}, 3), 0);                // 3 is not under 3
}

TEST(DeviceArenaPlan, AlignUp) {
  EXPECT_EQ(align_up(0), 0u);
  EXPECT_EQ(align_up(1), 256u);
  EXPECT_EQ(align_up(256), 256u);
  EXPECT_EQ(align_up(257), 512u);
  EXPECT_EQ(align_up(5, 4), 8u);
  EXPECT_THROW(align_up(10, 3), Error);
  EXPECT_THROW(align_up(SIZE_MAX - 10), Error);
}

TEST(DeviceArenaPlan, BumpRegionAllocatesAlignedAndRollsBack) {
  BumpRegion region("attention", 1024);
  EXPECT_EQ(region.allocate(10), 0u);
  EXPECT_EQ(region.allocate(300), 256u);  // aligned start, 512 bytes used by it
  EXPECT_EQ(region.used(), 768u);
  const size_t mark = region.mark();
  EXPECT_EQ(region.allocate(256), 768u);
  EXPECT_EQ(region.used(), 1024u);
  region.release_to(mark);
  EXPECT_EQ(region.used(), 768u);
  EXPECT_EQ(region.peak(), 1024u);
  EXPECT_THROW(region.release_to(2000), Error);
}

TEST(DeviceArenaPlan, BumpRegionOverflowNamesTheRegion) {
  BumpRegion region("reduction", 512);
  region.allocate(300);
  try {
    region.allocate(300);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'reduction'"), std::string::npos) << what;
    EXPECT_NE(what.find("300 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("512 bytes in use"), std::string::npos) << what;
  }
  EXPECT_EQ(region.used(), 512u);  // the failed request allocated nothing
}

TEST(DeviceArenaPlan, FreeListReusesAndMergesReleasedBlocks) {
  FreeListRegion r("params", 4096 + 100);  // capacity rounds down to 16 alignment units
  EXPECT_EQ(r.capacity(), 4096u);
  const size_t a = *r.allocate(1000), b = *r.allocate(256), c = *r.allocate(1);
  EXPECT_EQ(a, 0u);     // 1000 → 1024
  EXPECT_EQ(b, 1024u);  // exact
  EXPECT_EQ(c, 1280u);  // 1 → 256
  EXPECT_EQ(r.used(), 1536u);
  EXPECT_FALSE(r.allocate(4096 - 1536 + 1).has_value());  // more than is free
  r.release(b);
  EXPECT_EQ(*r.allocate(200), b);  // first fit: the hole b left
  r.release(a);
  r.release(b);                                // merges with the free range before it
  EXPECT_EQ(r.largest_free(), 4096u - 1536u);  // the tail is still the largest
  r.release(c);                                // merges both sides: everything free again
  EXPECT_EQ(r.used(), 0u);
  EXPECT_EQ(r.largest_free(), 4096u);
  EXPECT_EQ(r.peak(), 1536u);
  EXPECT_EQ(*r.allocate(4096), 0u);
}

TEST(DeviceArenaPlan, FreeListReleaseOfAnUnknownOffsetNamesTheRegion) {
  FreeListRegion r("grads", 1024);
  const size_t a = *r.allocate(256);
  try {
    r.release(a + 256);
    FAIL() << "release of an unknown offset was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'grads'"), std::string::npos) << e.what();
  }
  r.release(a);
  EXPECT_THROW(r.release(a), Error);  // twice
}

TEST(DeviceArenaPlan, ArenaReservationAddsSlackOverTheEstimate) {
  EXPECT_EQ(arena_reservation_bytes(0), 0u);  // no arena
  const size_t mib = size_t{1} << 20;
  EXPECT_EQ(arena_reservation_bytes(100 * mib), 110 * mib + 16 * mib);
  const size_t odd = arena_reservation_bytes(1000);  // 1000 + 100 + 16 MiB, aligned
  EXPECT_EQ(odd % kArenaAlignment, 0u);
  EXPECT_GE(odd, 1100 + 16 * mib);
  EXPECT_LT(odd, 1100 + 16 * mib + kArenaAlignment);
  EXPECT_THROW(arena_reservation_bytes(-1), Error);
}

TEST(DeviceArenaPlan, AttentionHeadsPerPass) {
  // T = 37: one matrix is 37·37·4 = 5476 bytes, 5632 aligned.
  EXPECT_EQ(attention_heads_per_pass(3 * 2 * 5632, 37, 2, 8), 3);
  EXPECT_EQ(attention_heads_per_pass(3 * 2 * 5632 - 1, 37, 2, 8), 2);
  EXPECT_EQ(attention_heads_per_pass(3 * 2 * 5632, 37, 1, 8), 6);
  EXPECT_EQ(attention_heads_per_pass(size_t{1} << 30, 37, 2, 8), 8);  // capped at the heads
  EXPECT_THROW(attention_heads_per_pass(5632, 37, 2, 8), Error);
  // 7B-sized: T = 4096 backward needs 2 · 64 MiB per head; 512 MiB holds 4.
  EXPECT_EQ(attention_heads_per_pass(size_t{512} << 20, 4096, 2, 32), 4);
}

TEST(DeviceArenaPlan, ColumnSumChunks) {
  // Few rows: one chunk; many rows: at most kMaxColumnSumChunks chunks covering every row.
  EXPECT_EQ(column_sum_rows_per_chunk(10, 64, 1 << 20), 10);
  EXPECT_EQ(column_sum_rows_per_chunk(64, 64, 1 << 20), 32);
  const int64_t rows = 100000;
  const int64_t per = column_sum_rows_per_chunk(rows, 4096, size_t{8} << 20);
  EXPECT_LE((rows + per - 1) / per, kMaxColumnSumChunks);
  EXPECT_LE(((rows + per - 1) / per) * 4096 * 8, int64_t{8} << 20);
  // The scratch limits the chunk count: room for 2 chunks of 4096 doubles.
  EXPECT_EQ(column_sum_rows_per_chunk(1000, 4096, 2 * 4096 * 8), 500);
  EXPECT_THROW(column_sum_rows_per_chunk(10, 4096, 1000), Error);
}

TEST(BackendChoice, Resolution) {
  const BackendRequest cpu = BackendRequest::kCpu, cuda = BackendRequest::kCuda,
                       automatic = BackendRequest::kAuto;
  EXPECT_EQ(resolve_backend(cpu, true, 4, "train"), BackendKind::kCpu);
  EXPECT_EQ(resolve_backend(automatic, true, 1, "train"), BackendKind::kCuda);
  EXPECT_EQ(resolve_backend(automatic, true, 0, "train"), BackendKind::kCpu);
  EXPECT_EQ(resolve_backend(automatic, false, 0, "train"), BackendKind::kCpu);
  EXPECT_EQ(resolve_backend(cuda, true, 2, "train"), BackendKind::kCuda);
  for (const char* word : {"cpu", "cuda", "auto"})
    EXPECT_STREQ(backend_request_name(parse_backend_request(word)), word);
  EXPECT_THROW(parse_backend_request("tpu"), Error);
  try {
    resolve_backend(cuda, false, 0, "train");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without the CUDA backend"), std::string::npos);
  }
  try {
    resolve_backend(cuda, true, 0, "train");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos);
  }
  EXPECT_STREQ(backend_kind_name(BackendKind::kCuda), "cuda");
}

// The CUDA backend's scratch as predicted on the host, against what the H100 session measured
// (backend_scratch_bytes in bench/results/2026-11-27-h100/call1/evidence/runs/*/metrics.jsonl:
// one rank, micro-batch 4 × 2048, cuDNN 9 on sm_90).
TEST(DeviceArenaPlan, BackendScratchPredictionMatchesTheH100Measurements) {
  struct Measured {
    const char* preset;
    AttentionKernel kernel;
    DType storage;
    size_t bytes;
  };
  const Measured runs[] = {
      {"125m", AttentionKernel::kGemm, DType::kFloat32, 578813952},   // train_125m_s0
      {"125m", AttentionKernel::kFused, DType::kFloat32, 981860608},  // train_125m_s0_fused
      {"125m", AttentionKernel::kFused, DType::kBf16, 981860608},     // ..._fused_bf16
      {"125m", AttentionKernel::kGemm, DType::kFloat16, 780140544},   // train_125m_s0_fp16
      {"1b", AttentionKernel::kGemm, DType::kFloat32, 578813952},     // train_1b_s0
      {"1b", AttentionKernel::kFused, DType::kFloat32, 1116209408},   // train_1b_s0_fused
      {"1b", AttentionKernel::kFused, DType::kBf16, 1116209408},      // ..._fused_bf16
      {"1b", AttentionKernel::kGemm, DType::kFloat16, 1115684864},    // train_1b_s0_fp16
  };
  for (const Measured& m : runs) {
    const ModelConfig c = preset_config(m.preset);
    const AttentionShape shape{4, 2048, c.num_heads, c.num_kv_heads, c.head_dim()};
    EXPECT_EQ(cuda_backend_scratch_bytes(shape, m.kernel, m.storage), m.bytes)
        << m.preset << " " << attention_kernel_name(m.kernel) << " " << dtype_name(m.storage);
  }
  EXPECT_EQ(cudnn_attention_workspace_bytes({1, 2, 1, 1, 8}), 1u * 1 * 2 * (2 * 2 + 4) + 256);
  EXPECT_THROW(cudnn_attention_workspace_bytes({1, int64_t{1} << 40, 1 << 20, 1, 8}), Error);
  // --deterministic false: the fp32 dQ accumulator in place of dP, per query row 4·hd bytes
  // instead of 2·T (1b at 4 × 2048: 64 MiB + the rowsums instead of 512 MiB).
  EXPECT_EQ(cudnn_attention_workspace_bytes({1, 2, 1, 1, 8}, false),
            1u * 1 * 2 * (4 * 8 + 4) + 256);
  const ModelConfig one_b = preset_config("1b");
  const AttentionShape shape_1b{4, 2048, one_b.num_heads, one_b.num_kv_heads, one_b.head_dim()};
  EXPECT_EQ(cudnn_attention_workspace_bytes(shape_1b, false), 4u * 16 * 2048 * (4 * 128 + 4) + 256);
  EXPECT_EQ(cuda_backend_scratch_bytes(shape_1b, AttentionKernel::kFused, DType::kBf16, false),
            1116209408u - cudnn_attention_workspace_bytes(shape_1b) +
                cudnn_attention_workspace_bytes(shape_1b, false));
  EXPECT_THROW(cudnn_attention_workspace_bytes({1, 2, 1, 1, int64_t{1} << 62}, false), Error);
}

}  // namespace
}  // namespace zt::cuda
