#include "engine/adamw_config.h"

namespace zt {

AdamWHyper adamw_hyper(const AdamWConfig& c, float lr, int64_t step, float grad_scale) {
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = c.beta1;
  h.beta2 = c.beta2;
  h.eps = c.eps;
  h.step = step;
  h.grad_scale = grad_scale;
  return h;
}

}  // namespace zt
