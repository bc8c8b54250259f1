#include "engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace zt {

namespace {

struct ScheduleName {
  LrScheduleKind kind;
  const char* name;
};
constexpr ScheduleName kSchedules[] = {{LrScheduleKind::kCosine, "cosine"},
                                       {LrScheduleKind::kWarmupLR, "WarmupLR"},
                                       {LrScheduleKind::kWarmupDecayLR, "WarmupDecayLR"},
                                       {LrScheduleKind::kWarmupCosineLR, "WarmupCosineLR"}};

// from + (to − from)·t: the warmups (t from 0 to 1) and the decays (t from 1 to 0).
double between(double from, double to, double t) {
  return from + (to - from) * t;
}
// ½(1 + cos(π·p)): 1 at p = 0, 0 at p = 1.
double half_cosine(double p) {
  return 0.5 * (1.0 + std::cos(M_PI * p));
}

// zerotrain's cosine: 1-based steps, linear warmup reaching lr at step W.
double native_cosine(const AdamWConfig& c, int64_t step, int64_t total_steps) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps)
    return between(c.warmup_start_lr, c.lr,
                   static_cast<double>(step) / static_cast<double>(c.warmup_steps));
  const int64_t decay_steps = total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(decay_steps));
  return between(c.min_lr, c.lr, half_cosine(progress));
}

// DeepSpeed's schedulers at last_batch_iteration i = step − 2 (lr_schedule.h).
double deepspeed_schedule(const AdamWConfig& c, int64_t step, int64_t total_steps) {
  const double i = static_cast<double>(step - 2);
  if (i < 0) return c.schedule == LrScheduleKind::kWarmupCosineLR ? 0.0 : c.warmup_start_lr;
  const double W = static_cast<double>(std::max<int64_t>(2, c.warmup_steps));
  const double S = static_cast<double>(total_steps);
  if (i < W) {
    const double gamma =
        c.warmup_shape == WarmupShape::kLog ? std::log(i + 1.0) / std::log(W) : i / W;
    return between(c.warmup_start_lr, c.lr, gamma);
  }
  switch (c.schedule) {
    case LrScheduleKind::kWarmupDecayLR:
      return between(c.min_lr, c.lr, std::max(0.0, (S - i) / std::max(1.0, S - W)));
    case LrScheduleKind::kWarmupCosineLR: {
      // A schedule no longer than its warmup has nothing left to decay over: the floor.
      const double progress = std::min(1.0, (i - W + 1.0) / std::max(1.0, S - W));
      return std::max(0.0, between(c.min_lr, c.lr, half_cosine(progress)));
    }
    default:
      return c.lr;  // WarmupLR
  }
}

}  // namespace

LrScheduleKind parse_lr_schedule(const std::string& s, const std::string& what) {
  for (const ScheduleName& n : kSchedules)
    if (s == n.name) return n.kind;
  fail(what + ": unknown schedule '" + s +
       "' (expected cosine, WarmupLR, WarmupDecayLR or WarmupCosineLR)");
}

const char* lr_schedule_name(LrScheduleKind k) {
  for (const ScheduleName& n : kSchedules)
    if (k == n.kind) return n.name;
  return "?";
}

WarmupShape parse_warmup_shape(const std::string& s, const std::string& what) {
  if (s == "linear") return WarmupShape::kLinear;
  if (s == "log") return WarmupShape::kLog;
  fail(what + ": unknown warmup type '" + s + "' (expected linear or log)");
}

const char* warmup_shape_name(WarmupShape w) {
  return w == WarmupShape::kLog ? "log" : "linear";
}

float learning_rate_at(const AdamWConfig& c, int64_t step, int64_t run_steps) {
  const int64_t total_steps = c.schedule_steps > 0 ? c.schedule_steps : run_steps;
  const double lr = c.schedule == LrScheduleKind::kCosine
                        ? native_cosine(c, step, total_steps)
                        : deepspeed_schedule(c, step, total_steps);
  return static_cast<float>(lr);
}

std::string zero_learning_rate_warning(const AdamWConfig& c, int64_t first, int64_t last,
                                       int64_t skipped) {
  if (first > last) return "";
  for (int64_t step = first - skipped; step <= last - skipped; ++step)
    if (learning_rate_at(c, step, last) != 0.0f) return "";
  return "the learning rate is 0 at every step of this run (steps " + std::to_string(first) + "-" +
         std::to_string(last) + ", --lr-schedule " + lr_schedule_name(c.schedule) +
         "): the weights will not change. DeepSpeed's warmup schedules train their first two steps "
         "at their start rate (WarmupCosineLR's first at 0): give more --steps (docs/running.md, "
         "\"Learning-rate schedules\")";
}

void validate_schedule(const AdamWConfig& c) {
  ZT_CHECK(c.schedule_steps >= 0,
           "--schedule-steps must be >= 0 (0: --steps), got " + std::to_string(c.schedule_steps));
  ZT_CHECK(c.warmup_start_lr >= 0.0f && c.warmup_start_lr <= c.lr,
           "--warmup-start-lr must lie in [0, --lr], got " + std::to_string(c.warmup_start_lr));
  ZT_CHECK(c.warmup_shape == WarmupShape::kLinear || c.schedule != LrScheduleKind::kCosine,
           "--warmup-type log needs one of DeepSpeed's schedules (--lr-schedule WarmupLR, "
           "WarmupDecayLR or WarmupCosineLR); the cosine schedule warms up linearly");
}

}  // namespace zt
