#include "engine/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "util/decimal.h"
#include "util/error.h"

namespace zt {

void LossScaleConfig::validate() const {
  ZT_CHECK(std::isfinite(loss_scale) && loss_scale >= 0,
           "fp16.loss_scale (--loss-scale) must be a finite number >= 0 (0 enables dynamic loss "
           "scaling), got " +
               shortest_decimal(loss_scale));
  ZT_CHECK(loss_scale <= std::ldexp(1.0, 127),
           "fp16.loss_scale (--loss-scale) " + shortest_decimal(loss_scale) +
               " is beyond 2^127: the scaled fp32 gradients would overflow on every step");
  // A static scale below 1 shrinks the fp16 gradients towards underflow instead of away from it:
  // 1e-30 trained nothing (every gradient 0) and exited 0.
  ZT_CHECK(loss_scale == 0 || loss_scale >= 1,
           "fp16.loss_scale (--loss-scale) " + shortest_decimal(loss_scale) +
               " is below 1: a static scale shrinks the fp16 gradients towards underflow; give a "
               "scale >= 1, or 0 for dynamic loss scaling");
  if (loss_scale > 0)
    return;  // the dynamic keys take no effect (DeepSpeed validates them only then)
  ZT_CHECK(loss_scale_window > 0,
           "fp16.loss_scale_window (--loss-scale-window) must be > 0 when dynamic loss scaling is "
           "enabled "
           "(loss_scale=0), got " +
               std::to_string(loss_scale_window));
  ZT_CHECK(std::isfinite(min_loss_scale) && min_loss_scale > 0,
           "fp16.min_loss_scale (--min-loss-scale) must be > 0 when dynamic loss scaling is "
           "enabled (loss_scale=0), "
           "got " +
               std::to_string(min_loss_scale));
  ZT_CHECK(hysteresis >= 1,
           "fp16.hysteresis (--hysteresis) must be >= 1, got " + std::to_string(hysteresis));
  // 2^initial_scale_power must be a finite float32 scale.
  ZT_CHECK(initial_scale_power >= 0 && initial_scale_power <= 127,
           "fp16.initial_scale_power (--initial-scale-power) must be between 0 and 127, got " +
               std::to_string(initial_scale_power));
}

LossScaler::LossScaler(const LossScaleConfig& config) : config_(config) {
  state_.cur_scale = dynamic() ? std::ldexp(1.0, config_.initial_scale_power) : config_.loss_scale;
  state_.cur_hysteresis = config_.hysteresis;
}

void LossScaler::update(bool overflow, int64_t step) {
  if (!dynamic()) return;  // DeepSpeed's static LossScaler keeps its scale
  State& s = state_;
  if (overflow) {
    if (config_.hysteresis == 1 || s.cur_hysteresis == 1) {
      ZT_CHECK(s.cur_scale != config_.min_loss_scale,
               "step " + std::to_string(step) +
                   ": the gradients overflowed at the minimum loss scale (fp16.min_loss_scale " +
                   shortest_decimal(config_.min_loss_scale) +
                   "); the loss scale cannot decrease further, stopping as DeepSpeed does");
      s.cur_scale = std::max(s.cur_scale / 2.0, config_.min_loss_scale);
    } else {
      s.cur_hysteresis -= 1;
    }
    s.last_overflow_iter = s.cur_iter;
  } else {
    if (config_.consecutive_hysteresis) s.cur_hysteresis = config_.hysteresis;
    const int64_t stable_interval = s.cur_iter - s.last_overflow_iter - 1;
    if (stable_interval > 0 && stable_interval % config_.loss_scale_window == 0) {
      if (!config_.consecutive_hysteresis) s.cur_hysteresis = config_.hysteresis;
      s.cur_scale *= 2.0;
    }
  }
  s.cur_iter += 1;
}

}  // namespace zt
