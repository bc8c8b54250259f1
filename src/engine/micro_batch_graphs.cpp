#include "engine/micro_batch_graphs.h"

#include <algorithm>
#include <utility>

namespace zt {

MicroBatchGraphs::MicroBatchGraphs(Backend& backend, std::string why_not)
    : be_(backend), moves_seen_(backend.own_buffers_moved()) {
  report_.off_reason = std::move(why_not);
}

void MicroBatchGraphs::drop_if_buffers_moved() {
  const uint64_t moves = be_.own_buffers_moved();
  if (moves == moves_seen_) return;
  moves_seen_ = moves;
  for (Pair& pair : pairs_) {
    if (!pair.forward) continue;
    pair.forward.reset();
    pair.backward.reset();
    ++report_.dropped;
  }
}

MicroBatchGraphs::Pair& MicroBatchGraphs::pair_for(const Key& key, bool& is_new) {
  const auto found =
      std::find_if(pairs_.begin(), pairs_.end(), [&](const Pair& p) { return p.key == key; });
  is_new = found == pairs_.end();
  if (!is_new) return *found;
  pairs_.push_back(Pair{key, nullptr, nullptr});
  return pairs_.back();
}

// Both passes or neither: a forward replay leaves the model's host state as the recording's
// forward left it, which only the recorded backward's host run matched.
bool MicroBatchGraphs::record(Pair& pair, const Pass& forward, const Pass& backward) {
  std::string why_not;
  std::unique_ptr<CapturedWork> f = be_.capture(forward, why_not);
  std::unique_ptr<CapturedWork> b = f ? be_.capture(backward, why_not) : nullptr;
  if (!f || !b) {
    ++report_.failed;
    report_.last_failure = why_not;
    if (pair.failed_last) {
      report_.off_reason = "recording a micro-batch failed twice in a row: " + why_not;
      pairs_.clear();  // `pair` with them
    } else {
      pair.failed_last = true;
    }
    return false;
  }
  pair.forward = std::move(f);
  pair.backward = std::move(b);
  pair.failed_last = false;
  ++report_.recorded;
  return true;
}

void MicroBatchGraphs::run(const Key& key, bool eager_only, const Pass& forward,
                           const Pass& backward, const TimedPass& timed) {
  Pair* pair = nullptr;
  if (on() && !eager_only) {
    drop_if_buffers_moved();
    bool is_new = false;
    pair = &pair_for(key, is_new);
    // A new key runs op by op first; an unrecorded one seen before is recorded now.
    if (is_new || (!pair->forward && !record(*pair, forward, backward))) pair = nullptr;
  }
  if (!pair) {
    ++report_.eager;
    timed(false, forward);
    timed(true, backward);
    return;
  }
  ++report_.replayed;
  timed(false, [&] { pair->forward->replay(); });
  timed(true, [&] { pair->backward->replay(); });
}

}  // namespace zt
