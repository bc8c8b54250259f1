// The memory plan of a ZeroEngine built for `spec` on `world` data-parallel ranks
// (engine/memory_plan.h): every buffer it allocates, each with the size rule written once. The
// engine allocates its own buffers by the plan, its parts (GradReducer, OffloadOptimizer, the
// model's ActivationPlan, the stage-3 residency) by the same rules, and the estimator sums it.
// The step's per-token losses and the world-invariant micro-batch tree are planned for
// spec.grad_accum micro-batches; a step of another count sizes them by its own.
#pragma once
#include "engine/engine_spec.h"
#include "engine/memory_plan.h"

namespace zt {

MemoryPlan plan_engine_memory(const EngineSpec& spec, int world);

}  // namespace zt
