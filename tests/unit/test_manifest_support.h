// Shared by the checkpoint and packing tests: a consistent manifest (the tiny preset's groups
// and tensors, made-up file CRCs) that CheckpointManifest::read accepts.
#pragma once
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_manifest.h"

namespace zt::testing {

inline CheckpointManifest tiny_manifest(int world) {
  const ModelConfig config = preset_config("tiny");
  const ParamLayout layout(config);
  CheckpointManifest m;
  m.progress = {7, 7 * 128, {1, 5}};
  m.hyper.optim.lr = 5e-3f;
  m.hyper.optim.beta2 = 0.95f;
  m.hyper.total_steps = 20;
  m.hyper.micro_batch = 2;
  m.hyper.grad_accum = 1;
  m.hyper.seq_len = 32;
  m.hyper.data_seed = 7;
  m.world_size = world;
  m.zero_stage = 2;
  m.precision = "bf16";
  m.model_config = config.to_hf_json();
  m.config_fingerprint = model_config_fingerprint(config);
  m.groups = checkpoint_groups(layout, world, /*shard_align=*/1);
  m.tensors = checkpoint_tensors(layout);
  for (int r = 0; r < world; ++r)
    m.files.push_back({checkpoint_rank_file_name(r), 0xdeadbeefu + static_cast<uint32_t>(r), 100});
  return m;
}

}  // namespace zt::testing
