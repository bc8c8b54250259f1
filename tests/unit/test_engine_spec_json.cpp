// run.json's "engine" (engine/engine_spec_json.h): a spec with every field away from its default
// reads back as the same spec (its JSON, its memory plan), and a damaged one is refused naming
// the file and the key.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "engine/engine_spec_json.h"
#include "engine/estimator.h"
#include "model/layout.h"
#include "support/engine_spec_for.h"
#include "util/error.h"

namespace zt {
namespace {

// The tiny preset with LoRA adapters, everything else set away from its default.
EngineSpec unusual_spec() {
  ModelConfig model = preset_config("tiny");
  model.tie_word_embeddings = true;
  model.lora.rank = 4;
  model.lora.alpha = 16;
  model.lora.set_targets({"all-linear"}, "test");
  model.lora.fit_to_model({}, "llama");
  ZeroConfig zero;
  zero.stage = 3;
  zero.overlap_comm = false;
  zero.reduce_bucket_size = 1001;
  zero.allgather_bucket_size = 1002;
  zero.prefetch_bucket_size = 1003;
  zero.param_persistence_threshold = 1004;
  zero.max_live_parameters = 1005;
  zero.max_reuse_distance = 1006;
  zero.world_invariant = true;
  EngineSpec spec = engine_spec_for(model, zero, 3, 24);
  spec.precision = Precision::kFp16;
  spec.activation_storage = DType::kFloat16;
  spec.grad_accum = 4;
  spec.ac.every = 2;
  spec.ac.on_host = true;
  spec.offload.optimizer = OffloadDevice::kCpu;
  spec.offload.param = OffloadDevice::kCpu;
  spec.offload.nvme_path = "/scratch/nvme";
  spec.offload.buffer_count = 6;
  spec.offload.sub_group_size = 777;
  spec.offload.delay = 1;
  spec.offload.delay_after = 3;
  spec.offload.overlap = false;
  spec.offload.overlap_bytes = 4096;
  spec.offload.bf16_gradient_copies = true;
  spec.trainable = TrainableSet::from_patterns(ParamLayout(model), {"lora_", "^model\\.norm\\."},
                                               {"layers\\.1\\..*lora_A"});
  spec.optim.lr = 0.9e-3f;
  spec.optim.min_lr = 1.1e-5f;
  spec.optim.warmup_steps = 7;
  spec.optim.schedule = LrScheduleKind::kWarmupDecayLR;
  spec.optim.warmup_shape = WarmupShape::kLog;
  spec.optim.warmup_start_lr = 1e-7f;
  spec.optim.schedule_steps = 99;
  spec.optim.beta1 = 0.8f;
  spec.optim.beta2 = 0.97f;
  spec.optim.eps = 3e-7f;
  spec.optim.weight_decay = 0.05f;
  spec.optim.clip = 0.7f;
  spec.loss_scale.loss_scale = 0;
  spec.loss_scale.initial_scale_power = 12;
  spec.loss_scale.loss_scale_window = 50;
  spec.loss_scale.hysteresis = 3;
  spec.loss_scale.consecutive_hysteresis = true;
  spec.loss_scale.min_loss_scale = 0.5;
  return spec;
}

TEST(EngineSpecJson, EveryFieldReadsBack) {
  const EngineSpec spec = unusual_spec();
  const nlohmann::json j = engine_spec_to_json(spec);
  // Every block of the spec, and the frozen tensors by name.
  for (const char* key : {"model", "zero", "precision", "activation_storage", "micro_batch",
                          "seq_len", "grad_accum", "activation_checkpointing", "cpu_checkpointing",
                          "offload", "frozen_tensors", "optimizer", "loss_scale"})
    EXPECT_TRUE(j.contains(key)) << key;
  const EngineSpec back = engine_spec_from_json(nlohmann::json::parse(j.dump()), "run.json");
  EXPECT_EQ(engine_spec_to_json(back), j);
  // The values themselves (not only their JSON): a few of every kind, the floats bit for bit.
  EXPECT_EQ(back.model.lora.rank, 4);
  EXPECT_TRUE(back.model.tie_word_embeddings);
  EXPECT_EQ(back.zero.max_reuse_distance, 1006);
  EXPECT_EQ(back.precision, Precision::kFp16);
  EXPECT_EQ(back.activation_storage, DType::kFloat16);
  EXPECT_EQ(back.ac.every, 2);
  EXPECT_TRUE(back.ac.on_host);
  EXPECT_EQ(back.offload.overlap_bytes, 4096);
  EXPECT_TRUE(back.offload.bf16_gradient_copies);
  EXPECT_EQ(back.optim.lr, 0.9e-3f);
  EXPECT_EQ(back.optim.eps, 3e-7f);
  EXPECT_EQ(back.optim.schedule, LrScheduleKind::kWarmupDecayLR);
  EXPECT_TRUE(back.loss_scale == spec.loss_scale);
  const ParamLayout layout(spec.model);
  EXPECT_EQ(back.trainable.frozen_flags(), spec.trainable.frozen_flags());
  EXPECT_FALSE(spec.trainable.all_train());
  // The engine it describes: the same memory, category by category.
  const MemoryEstimate a = estimate_memory(spec, 2), b = estimate_memory(back, 2);
  EXPECT_EQ(a.params, b.params);
  EXPECT_EQ(a.grads, b.grads);
  EXPECT_EQ(a.buffers, b.buffers);
  EXPECT_EQ(a.host, b.host);
  // A spec at its defaults reads back at its defaults.
  const EngineSpec plain = engine_spec_for(preset_config("tiny"), ZeroConfig{}, 1, 8);
  const nlohmann::json p = engine_spec_to_json(plain);
  EXPECT_EQ(engine_spec_to_json(engine_spec_from_json(p, "run.json")), p);
  EXPECT_TRUE(engine_spec_from_json(p, "run.json").trainable.all_train());
  // A record from before bf16 gradient copies existed reads as the fp32 copies it ran with; a
  // value of the wrong type is still refused.
  nlohmann::json before = engine_spec_to_json(spec);
  before["offload"].erase("bf16_gradient_copies");
  EXPECT_FALSE(engine_spec_from_json(before, "run.json").offload.bf16_gradient_copies);
  before["offload"]["bf16_gradient_copies"] = "yes";
  EXPECT_THROW(engine_spec_from_json(before, "run.json"), Error);
}

std::string refusal(const nlohmann::json& j) {
  try {
    engine_spec_from_json(j, "out/run.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(EngineSpecJson, DamagedRecordsAreRefusedNamingTheKey) {
  const nlohmann::json good = engine_spec_to_json(unusual_spec());
  nlohmann::json missing = good, wrong_type = good, bad_name = good, bad_policy = good,
                 unknown_tensor = good, not_object = good, fractional = good, flag = good,
                 too_big = good, huge_float = good;
  missing["zero"].erase("stage");
  wrong_type["offload"]["buffer_count"] = "six";
  bad_name["precision"] = "fp8";
  bad_policy["activation_checkpointing"] = "sometimes";
  unknown_tensor["frozen_tensors"].push_back("model.layers.9.mlp.up_proj.weight");
  not_object["optimizer"] = 3;
  fractional["zero"]["stage"] = 2.5;                // a count is a whole number
  flag["offload"]["buffer_count"] = true;           // not 1
  too_big["loss_scale"]["hysteresis"] = 1LL << 40;  // an int
  huge_float["optimizer"]["lr"] = 1e39;             // a float
  EXPECT_NE(refusal(missing).find("out/run.json: engine.zero.stage is missing"), std::string::npos)
      << refusal(missing);
  EXPECT_NE(refusal(wrong_type).find("engine.offload.buffer_count has the wrong type"),
            std::string::npos)
      << refusal(wrong_type);
  EXPECT_NE(refusal(bad_name).find("engine.precision: unknown precision 'fp8'"), std::string::npos)
      << refusal(bad_name);
  EXPECT_NE(refusal(bad_policy).find("engine.activation_checkpointing"), std::string::npos)
      << refusal(bad_policy);
  EXPECT_NE(refusal(unknown_tensor).find("engine.frozen_tensors: "), std::string::npos)
      << refusal(unknown_tensor);
  EXPECT_NE(refusal(unknown_tensor).find("model.layers.9.mlp.up_proj.weight"), std::string::npos)
      << refusal(unknown_tensor);
  // Also as a file reads them (a parsed 2^40 is an unsigned number).
  for (const auto& [damaged, key] :
       {std::pair{fractional, "engine.zero.stage"}, std::pair{flag, "engine.offload.buffer_count"},
        std::pair{too_big, "engine.loss_scale.hysteresis"},
        std::pair{nlohmann::json::parse(too_big.dump()), "engine.loss_scale.hysteresis"}})
    EXPECT_NE(refusal(damaged).find(std::string(key) + " has the wrong type or range"),
              std::string::npos)
        << refusal(damaged);
  EXPECT_NE(refusal(huge_float).find("engine.optimizer.lr is beyond a float's range"),
            std::string::npos)
      << refusal(huge_float);
  EXPECT_NE(refusal(not_object).find("engine.optimizer: expected an object"), std::string::npos)
      << refusal(not_object);
}

}  // namespace
}  // namespace zt
