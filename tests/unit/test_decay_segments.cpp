// The weight-decay runs AdamW updates a group's range by (engine/decay_segments.h): each tensor's
// flag, adjacent runs of one flag merged, frozen tensors left out, on the real layout of the small
// preset (Llama: input norm, q k v o, post-attention norm, gate up down in each layer group).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/decay_segments.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"

namespace zt {
namespace {

const TensorInfo& tensor(const ParamLayout& layout, const std::string& name) {
  const int i = layout.find(name);
  EXPECT_GE(i, 0) << name;
  return layout.tensors()[static_cast<size_t>(i)];
}

// Every element of [begin, begin + count) that a trainable tensor holds is in exactly one segment
// with that tensor's flag, the padding past the tensors in one without decay, nothing else is,
// and no two touching segments share a flag (they would be one).
void expect_segments_cover(const ParamLayout& layout, int g, int64_t begin, int64_t count,
                           const TrainableSet& trainable, const std::vector<DecaySegment>& got) {
  std::vector<int> flag(static_cast<size_t>(count), -1);  // -1: no segment
  for (const DecaySegment& s : got) {
    ASSERT_TRUE(s.begin >= begin && s.begin < s.end && s.end <= begin + count);
    for (int64_t i = s.begin; i < s.end; ++i) {
      ASSERT_EQ(flag[static_cast<size_t>(i - begin)], -1) << "element " << i << " twice";
      flag[static_cast<size_t>(i - begin)] = s.decay ? 1 : 0;
    }
  }
  for (size_t k = 1; k < got.size(); ++k)
    EXPECT_FALSE(got[k - 1].end == got[k].begin && got[k - 1].decay == got[k].decay)
        << "segments " << k - 1 << " and " << k << " touch with one flag";
  int64_t tensors_end = 0;
  for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
    const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
    tensors_end = t.offset + t.numel;
    const int want = trainable.trains(ti) ? (t.weight_decay ? 1 : 0) : -1;
    for (int64_t i = std::max(begin, t.offset); i < std::min(begin + count, tensors_end); ++i)
      ASSERT_EQ(flag[static_cast<size_t>(i - begin)], want) << t.name << " element " << i;
  }
  for (int64_t i = std::max(begin, tensors_end); i < begin + count; ++i)
    ASSERT_EQ(flag[static_cast<size_t>(i - begin)], 0) << "padding element " << i;
}

TEST(DecaySegments, ALayerIsFourRunsAndItsPaddingAFifth) {
  const ParamLayout layout(preset_config("small"));
  const int g = layout.layer_group(3);
  const int64_t numel = layout.groups()[static_cast<size_t>(g)].numel;
  const std::vector<DecaySegment> whole = decay_segments(layout, g, 0, numel);
  ASSERT_EQ(whole.size(), 4u);
  const std::string p = "model.layers.3.";
  EXPECT_EQ(whole[1].begin, tensor(layout, p + "self_attn.q_proj.weight").offset);
  const TensorInfo& o = tensor(layout, p + "self_attn.o_proj.weight");
  EXPECT_EQ(whole[1].end, o.offset + o.numel);
  EXPECT_TRUE(whole[1].decay);
  EXPECT_FALSE(whole[2].decay);  // the post-attention norm
  expect_segments_cover(layout, g, 0, numel, {}, whole);
  const std::vector<DecaySegment> padded = decay_segments(layout, g, 0, numel + 100);
  ASSERT_EQ(padded.size(), 5u);
  EXPECT_FALSE(padded[4].decay);
  expect_segments_cover(layout, g, 0, numel + 100, {}, padded);
}

TEST(DecaySegments, AShardCutsRunsAndFrozenTensorsSplitThem) {
  const ParamLayout layout(preset_config("small"));
  const int g = layout.layer_group(0);
  const std::string p = "model.layers.0.";
  // A stage-3 shard from the middle of q_proj to the middle of gate_proj.
  const int64_t begin = tensor(layout, p + "self_attn.q_proj.weight").offset + 7;
  const int64_t end = tensor(layout, p + "mlp.gate_proj.weight").offset + 11;
  const std::vector<DecaySegment> shard = decay_segments(layout, g, begin, end - begin);
  ASSERT_EQ(shard.size(), 3u);
  EXPECT_EQ(shard[0].begin, begin);
  EXPECT_EQ(shard[2].end, end);
  expect_segments_cover(layout, g, begin, end - begin, {}, shard);
  // k_proj frozen: q stands alone, v and o are one run.
  const TrainableSet frozen_k =
      TrainableSet::from_patterns(layout, {}, {"model\\.layers\\.0\\.self_attn\\.k_proj\\.weight"});
  const int64_t numel = layout.groups()[static_cast<size_t>(g)].numel;
  const std::vector<DecaySegment> split = decay_segments(layout, g, 0, numel, frozen_k);
  ASSERT_EQ(split.size(), 5u);
  EXPECT_EQ(split[1].end, tensor(layout, p + "self_attn.k_proj.weight").offset);
  EXPECT_EQ(split[2].begin, tensor(layout, p + "self_attn.v_proj.weight").offset);
  expect_segments_cover(layout, g, 0, numel, frozen_k, split);
}

}  // namespace
}  // namespace zt
