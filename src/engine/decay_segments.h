// The runs of a group's range [begin, begin+count) that share one weight-decay setting: each
// tensor's overlap with the range (its `weight_decay` flag), then the padding past the last
// tensor (no decay), adjacent runs of the same setting merged (a Llama layer's q, k, v and o
// projections are one run, its MLP's three another: four AdamW launches a layer, not nine).
// AdamW is elementwise, so updating segment by segment is the same math, whatever the cuts.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/layout.h"
#include "model/trainable.h"

namespace zt {

struct DecaySegment {
  int64_t begin = 0, end = 0;  // group coordinates
  bool decay = false;
};

// Frozen tensors (`trainable`, model/trainable.h) have no segment: the optimizer skips them.
inline std::vector<DecaySegment> decay_segments(const ParamLayout& layout, int g, int64_t begin,
                                                int64_t count, const TrainableSet& trainable = {}) {
  std::vector<DecaySegment> out;
  int64_t pos = begin;
  auto add = [&](int64_t lo, int64_t hi, bool decay) {
    if (lo >= hi) return;
    if (!out.empty() && out.back().end == lo && out.back().decay == decay)
      out.back().end = hi;
    else
      out.push_back({lo, hi, decay});
  };
  for (int ti : layout.groups()[static_cast<size_t>(g)].tensors) {
    const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
    const int64_t lo = std::max(pos, t.offset), hi = std::min(begin + count, t.offset + t.numel);
    if (trainable.trains(ti)) add(lo, hi, t.weight_decay);
    pos = std::max(pos, hi);
  }
  add(pos, begin + count, false);
  return out;
}

}  // namespace zt
