// Replays a sequence of step outcomes through zerotrain's LossScaler (engine/loss_scaler.h) for
// test_loss_scaler.py, which drives DeepSpeed's own scaler with the same sequence.
//   zt_loss_scaler_replay LOSS_SCALE INITIAL_SCALE_POWER WINDOW HYSTERESIS CONSECUTIVE MIN_SCALE
//                         OUTCOMES
// OUTCOMES is a string of 0 (a good step) and 1 (an overflow). Prints, per step, the scale the step
// ran with, then "end <scale>"; a refusal (an overflow at the minimum scale, a bad setting) prints
// "error step <s>: <message>" and exits 3.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/loss_scaler.h"
#include "util/error.h"

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s LOSS_SCALE INITIAL_SCALE_POWER WINDOW HYSTERESIS CONSECUTIVE "
                 "MIN_SCALE OUTCOMES\n",
                 argv[0]);
    return 2;
  }
  zt::LossScaleConfig c;
  c.loss_scale = std::strtod(argv[1], nullptr);
  c.initial_scale_power = std::atoi(argv[2]);
  c.loss_scale_window = std::atoll(argv[3]);
  c.hysteresis = std::atoi(argv[4]);
  c.consecutive_hysteresis = std::atoi(argv[5]) != 0;
  c.min_loss_scale = std::strtod(argv[6], nullptr);
  const std::string outcomes = argv[7];
  int64_t step = 0;
  try {
    c.validate();  // as a command validates its settings before an engine takes them
    zt::LossScaler scaler(c);
    for (char o : outcomes) {
      ++step;
      std::printf("%.17g\n", scaler.scale());
      scaler.update(o == '1', step);
    }
    std::printf("end %.17g\n", scaler.scale());
  } catch (const zt::Error& e) {
    std::printf("error step %lld: %s\n", static_cast<long long>(step), e.what());
    return 3;
  }
  return 0;
}
