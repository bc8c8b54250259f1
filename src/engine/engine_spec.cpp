#include "engine/engine_spec.h"

#include <string>

#include "model/layout.h"
#include "util/error.h"
#include "util/word_choice.h"

namespace zt {

namespace {

constexpr WordChoice<DType> kActivationStorageWords[] = {
    {DType::kFloat32, "fp32"}, {DType::kBf16, "bf16"}, {DType::kFloat16, "fp16"}};

}  // namespace

DType parse_activation_storage(const std::string& text, const std::string& what) {
  return parse_word(text, kActivationStorageWords, what);
}

const char* activation_storage_name(DType storage) {
  return word_of(storage, kActivationStorageWords);
}

void EngineSpec::validate(int world) const {
  ZT_CHECK(world >= 1, "the world size must be at least 1, got " + std::to_string(world));
  ZT_CHECK(micro_batch > 0 && seq_len > 0 && grad_accum > 0,
           "--micro-batch, --seq-len and --grad-accum must be positive, got " +
               std::to_string(micro_batch) + ", " + std::to_string(seq_len) + " and " +
               std::to_string(grad_accum));
  zero.validate();
  offload.validate(zero.stage);
  if (zero.world_invariant) check_world_invariant_shape(world, grad_accum);
  if (precision == Precision::kFp16) loss_scale.validate();
  ZT_CHECK(trainable.all_train() ||
               trainable.frozen_flags().size() == ParamLayout(model).tensors().size(),
           "the trainable set was made for another model (" +
               std::to_string(trainable.frozen_flags().size()) + " tensors, this one has " +
               std::to_string(ParamLayout(model).tensors().size()) + ")");
}

}  // namespace zt
