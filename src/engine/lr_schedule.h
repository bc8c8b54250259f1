// Learning-rate schedules: zerotrain's own and DeepSpeed's three warmup schedulers.
//
// cosine (the default): step s (1-based) of a run of S steps gets
//   s ≤ W:  start + (lr − start)·s/W                       (linear warmup, W = warmup_steps)
//   s > W:  min_lr + (lr − min_lr)·½(1 + cos(π·(s−W)/(S−W)))   (min_lr at the last step)
// WarmupLR, WarmupDecayLR, WarmupCosineLR: DeepSpeed's formulas (deepspeed/runtime/lr_schedules.py)
// with step s taking the value at last_batch_iteration i = s − 1, the schedule once s − 1 steps
// have completed. Warmup spans W' = max(2, warmup_steps) iterations:
//   γ = ln(i+1)/ln(W') (log, DeepSpeed's default) or i/W' (linear);  lr = start + (lr − start)·γ
// then WarmupLR holds lr; WarmupDecayLR decays linearly to min_lr (its warmup_min_lr) at i = S;
// WarmupCosineLR follows min_lr + (lr − min_lr)·½(1 + cos(π·(i − W' + 1)/(S − W'))).
#pragma once
#include <string>

namespace zt {

enum class LrScheduleKind { kCosine, kWarmupLR, kWarmupDecayLR, kWarmupCosineLR };
enum class WarmupShape { kLinear, kLog };

// "cosine" | "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR"; `what` names the option in errors.
LrScheduleKind parse_lr_schedule(const std::string& s, const std::string& what);
const char* lr_schedule_name(LrScheduleKind k);
// "linear" | "log"
WarmupShape parse_warmup_shape(const std::string& s, const std::string& what);
const char* warmup_shape_name(WarmupShape w);

}  // namespace zt
