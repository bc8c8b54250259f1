// Learning-rate schedules: zerotrain's own and DeepSpeed's three warmup schedulers.
//
// cosine (the default): step s (1-based) of a run of S steps gets
//   s ≤ W:  start + (lr − start)·s/W                       (linear warmup, W = warmup_steps)
//   s > W:  min_lr + (lr − min_lr)·½(1 + cos(π·(s−W)/(S−W)))   (min_lr at the last step)
// WarmupLR, WarmupDecayLR, WarmupCosineLR: the learning rates a DeepSpeed run trains with
// (deepspeed/runtime/lr_schedules.py, as of DeepSpeed 0.19.8; tests/oracle checks against it).
// DeepSpeed's engine steps the scheduler after each optimizer step, and the scheduler's
// constructor sets the rate of last_batch_iteration −1, so step s trains at iteration
// i = s − 2: step 1 at the constructor's rate (start for WarmupLR/WarmupDecayLR, 0 for
// WarmupCosineLR), step 2 at i = 0. Warmup spans W' = max(2, warmup_steps) iterations:
//   γ = ln(i+1)/ln(W') (log, DeepSpeed's default) or i/W' (linear);  lr = start + (lr − start)·γ
// then WarmupLR holds lr; WarmupDecayLR decays linearly to min_lr (its warmup_min_lr) at i = S;
// WarmupCosineLR follows min_lr + (lr − min_lr)·½(1 + cos(π·p)), p = min(1, (i − W' + 1)/(S − W')).
#pragma once
#include <cstdint>
#include <string>

#include "engine/adamw_config.h"

namespace zt {

// "cosine" | "WarmupLR" | "WarmupDecayLR" | "WarmupCosineLR"; `what` names the option in errors.
LrScheduleKind parse_lr_schedule(const std::string& s, const std::string& what);
const char* lr_schedule_name(LrScheduleKind k);
// "linear" | "log"
WarmupShape parse_warmup_shape(const std::string& s, const std::string& what);
const char* warmup_shape_name(WarmupShape w);

// The scheduled learning rate of 1-based `step` in a run of `total_steps` (above); the
// schedule spans c.schedule_steps when set, else total_steps.
float learning_rate_at(const AdamWConfig& c, int64_t step, int64_t total_steps);
// train's warning for a run of steps first..last (as the run counts them; `skipped`: fp16 steps
// skipped before, which do not advance the schedule) whose every step trains at a rate of 0, so
// that AdamW leaves the weights as they are (a DeepSpeed warmup's first two steps start at
// warmup_min_lr, often 0); "" when one does not.
std::string zero_learning_rate_warning(const AdamWConfig& c, int64_t first, int64_t last,
                                       int64_t skipped);
// Throws naming the option (`--lr-schedule`, ...) when the schedule settings contradict.
void validate_schedule(const AdamWConfig& c);

}  // namespace zt
