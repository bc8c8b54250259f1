// Where parameter values come from when the engine loads a model: any store that reads a flat
// range of one tensor as fp32 (the model directory of io/model_dir.h, a test double). The engine
// knows this interface only, not the formats behind it (docs/ARCHITECTURE.md).
#pragma once
#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/layout.h"

namespace zt {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The model configuration the stored tensors belong to.
  virtual const ModelConfig& config() const = 0;
  // What the source is, for error messages ("model directory 'DIR'").
  virtual std::string description() const = 0;
  // Whether the source stores tensor t: a model's own tensors, not LoRA adapters (which start
  // from their initialisation unless a source holds them; a DoRA magnitude from the base's rows:
  // ZeroEngine::load_from).
  virtual bool holds(const TensorInfo& t) const { return !t.is_lora(); }
  // Elements [begin, begin+count) of tensor t, flattened, as fp32.
  virtual void read_range_f32(const TensorInfo& t, int64_t begin, int64_t count, float* out) = 0;
};

}  // namespace zt
