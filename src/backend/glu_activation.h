// The activation of the gated MLP, h = act(gate) · up (backend.h's glu_forward): SwiGLU's silu, or
// the GELU in its tanh form of Gemma's GeGLU (transformers' "gelu_pytorch_tanh").
#pragma once

namespace zt {

enum class GluActivation { kSilu, kGeluTanh };

}  // namespace zt
