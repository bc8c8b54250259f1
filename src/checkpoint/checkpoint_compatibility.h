// What a run checks against the checkpoint it resumes or reads (docs/ARCHITECTURE.md §3), before
// loading a byte: the same model and tensor layout, the same frozen set, and the settings a
// bitwise continuation needs; the manifest itself is checkpoint_manifest.h's.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/checkpoint_manifest.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/trainable.h"

namespace zt {

// Fails unless the checkpoint was trained with the same frozen tensors as `trainable` (its
// optimizer state exists for exactly those that train): the message names the tensors that
// differ.
void check_checkpoint_trainable(const CheckpointManifest& manifest, const ParamLayout& layout,
                                const TrainableSet& trainable, const std::string& checkpoint_dir);

// Fails unless the checkpoint holds this model: the message names the first differing key
// ("hidden_size: checkpoint 64, run 256"), then any difference in the tensor layout.
void check_checkpoint_model(const CheckpointManifest& manifest, const ModelConfig& config,
                            const ParamLayout& layout, const std::string& checkpoint_dir);

// Compares a resumed run's settings with the checkpoint's. Fails on what changes the data order
// or the update rule (seq_len, data seed, the dataset unless allow_data_change, betas, eps,
// weight decay, clip; micro-batch and grad-accum at the same world size). Returns warnings for the
// rest: learning-rate schedule, a global batch changed by a new world size, precision.
std::vector<std::string> check_resume_hyperparameters(const CheckpointManifest& manifest,
                                                      const TrainingHyperparameters& run,
                                                      int run_world_size,
                                                      const std::string& run_precision,
                                                      const std::string& checkpoint_dir,
                                                      bool allow_data_change = false);

}  // namespace zt
