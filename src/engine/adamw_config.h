// The AdamW optimizer's settings (DeepSpeed's optimizer and scheduler blocks) and the backend
// arguments of one of its steps. The schedules themselves are engine/lr_schedule.h.
#pragma once
#include <cstdint>

#include "backend/backend.h"

namespace zt {

// The learning-rate schedules and warmup shapes of engine/lr_schedule.h.
enum class LrScheduleKind { kCosine, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupShape { kLinear, kLog };

struct AdamWConfig {
  float lr = 3e-4f;          // peak learning rate
  float min_lr = 3e-5f;      // floor of the decay (cosine, WarmupDecayLR, WarmupCosineLR)
  int64_t warmup_steps = 0;  // warmup length (lr_schedule.h)
  LrScheduleKind schedule = LrScheduleKind::kCosine;
  WarmupShape warmup_shape = WarmupShape::kLinear;  // log: DeepSpeed schedules only
  float warmup_start_lr = 0.0f;                     // the warmup starts here
  int64_t schedule_steps = 0;                       // the schedule's length S; 0: the run's --steps
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // not applied to norms and the embedding
  float clip = 1.0f;          // global-norm clipping; <= 0 disables
};

// The backend's AdamW arguments for one step: the configuration's betas and epsilon, the step's
// learning rate, the 1-based step (bias correction) and the clipping factor. Weight decay is set
// per segment by the caller (norms and the embedding are not decayed).
AdamWHyper adamw_hyper(const AdamWConfig& c, float lr, int64_t step, float grad_scale);

}  // namespace zt
