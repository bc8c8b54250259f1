// The fp16 loss scaler's settings and state (engine/loss_scaler.h); its scale sequences are
// checked against DeepSpeed's own class by oracle_deepspeed_loss_scaler.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/loss_scaler.h"
#include "util/error.h"

namespace zt {
namespace {

TEST(LossScaler, BadSettingsAreRefusedNamingTheKey) {
  struct Case {
    LossScaleConfig config;
    std::string key;
  };
  std::vector<Case> cases(7);
  cases[0].config.loss_scale = -1;
  cases[0].key = "fp16.loss_scale";
  cases[1].config.loss_scale_window = 0;
  cases[1].key = "fp16.loss_scale_window";
  cases[2].config.min_loss_scale = 0;
  cases[2].key = "fp16.min_loss_scale";
  cases[3].config.hysteresis = 0;
  cases[3].key = "fp16.hysteresis";
  cases[4].config.initial_scale_power = 128;
  cases[4].key = "fp16.initial_scale_power";
  // A static scale below 1 pushes the fp16 gradients into underflow (1e-30 trained nothing).
  cases[5].config.loss_scale = 1e-30;
  cases[5].key = "fp16.loss_scale";
  cases[6].config.loss_scale = 0.5;
  cases[6].key = "fp16.loss_scale";
  for (const Case& c : cases) {
    try {
      c.config.validate();
      ADD_FAILURE() << c.key << ": accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(c.key, 0), 0u) << e.what();
    }
  }
  // A static scale ignores the dynamic keys, as DeepSpeed's validation does.
  LossScaleConfig fixed;
  fixed.loss_scale = 1024;
  fixed.loss_scale_window = 0;
  EXPECT_NO_THROW(fixed.validate());
  LossScaler scaler(fixed);
  scaler.update(true, 1);
  EXPECT_EQ(scaler.scale(), 1024.0);
  fixed.loss_scale = 1;
  EXPECT_NO_THROW(fixed.validate());
}

// A scaler restored from another's state continues its sequence exactly (a checkpoint resume).
TEST(LossScaler, RestoredStateContinuesTheSequence) {
  LossScaleConfig c;
  c.initial_scale_power = 10;
  c.loss_scale_window = 2;
  const std::vector<bool> outcomes = {true, true, false, false, false, true, false, false, false};
  LossScaler whole(c), first(c);
  std::vector<double> want, got;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    want.push_back(whole.scale());
    whole.update(outcomes[i], static_cast<int64_t>(i) + 1);
  }
  for (size_t i = 0; i < 4; ++i) {
    got.push_back(first.scale());
    first.update(outcomes[i], static_cast<int64_t>(i) + 1);
  }
  LossScaler resumed(c);
  resumed.restore(first.state());
  for (size_t i = 4; i < outcomes.size(); ++i) {
    got.push_back(resumed.scale());
    resumed.update(outcomes[i], static_cast<int64_t>(i) + 1);
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(want.front(), 1024.0);
}

}  // namespace
}  // namespace zt
