// fp16 loss scaling as DeepSpeed does it (deepspeed/runtime/fp16/loss_scaler.py, 0.19.8; the
// fp16 block's keys). The loss is multiplied by scale() before the backward; after the step's
// global overflow check (a NaN or an infinity in any rank's gradient shard) update() is called
// once per step:
//   static (loss_scale > 0): the scale never changes; an overflowing step is skipped all the same.
//   dynamic (loss_scale = 0): the scale starts at 2^initial_scale_power. On an overflow the step is
//     skipped and, once `hysteresis` overflows have been absorbed (cur_hysteresis reaches 1), the
//     scale halves, never below min_loss_scale; an overflow at min_loss_scale ends the run.
//     Otherwise cur_hysteresis is refilled at once when consecutive_hysteresis is set, and after
//     every loss_scale_window steps without overflow (counted from the last one) the scale doubles
//     (and cur_hysteresis is refilled).
// The state is four numbers, saved in checkpoints so that a resume continues the sequence.
//
// ZeroEngine drives it in fp16 runs (--precision fp16; docs/ARCHITECTURE.md §4, "fp16 and loss
// scaling"). Checked against DeepSpeed's own classes by oracle_deepspeed_loss_scaler (replayed
// sequences) and oracle_fp16_loss_scaling (the overflow sequence of real training runs).
#pragma once
#include <cstdint>
#include <string>

namespace zt {

struct LossScaleConfig {
  double loss_scale = 0;  // > 0: static scale; 0: dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  // Throws naming the key (fp16.loss_scale_window, ...) of a value DeepSpeed refuses, or of a
  // static scale beyond fp32's range (2^127), which would overflow every step.
  void validate() const;
  friend bool operator==(const LossScaleConfig&, const LossScaleConfig&) = default;
};

class LossScaler {
 public:
  struct State {
    double cur_scale = 1;
    int64_t cur_iter = 0;             // updates so far
    int64_t last_overflow_iter = -1;  // update index of the last overflow
    int cur_hysteresis = 1;
  };

  // `config` is validated (LossScaleConfig::validate; EngineSpec::validate calls it).
  explicit LossScaler(const LossScaleConfig& config);

  double scale() const { return state_.cur_scale; }
  const LossScaleConfig& config() const { return config_; }
  bool dynamic() const { return config_.loss_scale == 0; }
  // One step's outcome: `overflow` when any rank's gradients hold a NaN or an infinity (the step
  // is then skipped by the caller). Throws at the minimum scale, as DeepSpeed does; `step` names
  // the step in that message.
  void update(bool overflow, int64_t step);

  const State& state() const { return state_; }
  void restore(const State& s) { state_ = s; }

 private:
  LossScaleConfig config_;
  State state_;
};

}  // namespace zt
