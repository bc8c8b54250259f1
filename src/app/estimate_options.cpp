#include "app/estimate_options.h"

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/deepspeed_config.h"
#include "app/engine_device.h"
#include "app/lora_options.h"
#include "app/train_checkpointing.h"
#include "app/train_options.h"
#include "util/error.h"

namespace zt {

namespace {

const char* const kCommand = kEstimateCommand;

// --device-memory and its alias --device-memory-gib (`alias_gib`): one GiB figure between 1 KiB
// and 2^30 GiB, which --max-micro-batch needs.
void resolve_device_memory(const po::variables_map& vm, double alias_gib, EstimateOptions& o) {
  if (vm.count("device-memory-gib")) {
    ZT_CHECK(!vm.count("device-memory") || o.device_memory_gib == alias_gib,
             std::string(kCommand) + ": --device-memory and --device-memory-gib disagree");
    o.device_memory_gib = alias_gib;
  }
  const char* given = vm.count("device-memory-gib") ? "--device-memory-gib" : "--device-memory";
  ZT_CHECK(vm.count("device-memory") + vm.count("device-memory-gib") == 0 ||
               (std::isfinite(o.device_memory_gib) && o.device_memory_gib >= 1.0 / (1 << 20) &&
                o.device_memory_gib <= 0x1p30),
           std::string(kCommand) + ": " + given +
               " must be a number of GiB between 1 KiB and 2^30 GiB, got " +
               std::to_string(o.device_memory_gib));
  ZT_CHECK(!o.max_micro_batch || o.device_memory_gib > 0,
           std::string(kCommand) +
               ": --max-micro-batch needs --device-memory-gib G (the GiB of "
               "one device)");
}

// --world and --ranks-per-node; beyond these, the byte counts of the table would overflow int64.
void check_planned_world(const EstimateOptions& o) {
  check_positive(o.world, "world", kCommand);
  ZT_CHECK(o.world <= (1 << 24), std::string(kCommand) + ": --world " + std::to_string(o.world) +
                                     " is more than 2^24 ranks");
  ZT_CHECK(o.ranks_per_node >= 0, std::string(kCommand) +
                                      ": --ranks-per-node must be at least 1 (0: min(N, 8)), got " +
                                      std::to_string(o.ranks_per_node));
}

// With a --config INI (a train run's, most often): names the sizes the estimate takes from its
// own defaults where train's differ, so that a plan for that run is not silently another run's.
void note_defaults_unlike_train(const po::variables_map& vm, const EstimateOptions& o,
                                const TrainOptions& train) {
  std::vector<std::string> keys, ours, trains;
  const EstimateOptions defaults;
  const auto compare = [&](const char* key, int64_t own, int64_t default_value,
                           int64_t train_default) {
    // Set (a DeepSpeed batch rule may set the micro-batch alone), or the same either way.
    if (!vm[key].defaulted() || own != default_value || own == train_default) return;
    keys.push_back(std::string("--") + key);
    ours.push_back(std::to_string(own));
    trains.push_back(std::to_string(train_default));
  };
  compare("seq-len", o.seq_len, defaults.seq_len, train.seq_len);
  compare("micro-batch", o.micro_batch, defaults.micro_batch, train.micro_batch);
  if (keys.empty()) return;
  const auto joined = [](const std::vector<std::string>& words) {
    return words.size() == 1 ? words[0] : words[0] + " and " + words[1];
  };
  const bool two = keys.size() == 2;
  std::cerr << "zerotrain " << kCommand << ": note: config file '" << vm["config"].as<std::string>()
            << "' (nor the command line) does not set "
            << (two ? keys[0] + " or " + keys[1] : keys[0]) << ", so this estimate takes "
            << kCommand << "'s " << (two ? "defaults, " : "default, ") << joined(ours)
            << "; train's " << (two ? "are " : "is ") << joined(trains) << "\n";
}

}  // namespace

bool parse_estimate_options(int argc, char** argv, EstimateOptions& o, ModelConfig& model) {
  po::options_description opts("estimate options");
  const auto flag = bool_flag;
  auto add = opts.add_options();
  add("model", po::value(&o.model_dir), "model directory (its config.json), or --preset");
  add("preset", po::value(&o.preset), "preset: tiny, small, 125m, 1b, 6b, 7b");
  add("world", po::value(&o.world)->default_value(o.world), "data-parallel ranks N");
  add("zero-stage", po::value(&o.zero.stage)->default_value(o.zero.stage),
      "requested ZeRO stage (marked in the table)");
  add("micro-batch", po::value(&o.micro_batch)->default_value(o.micro_batch),
      "sequences per micro-batch per rank");
  add("grad-accum", po::value(&o.grad_accum)->default_value(o.grad_accum),
      "micro-batches per step (only for the DeepSpeed batch-size rule)");
  add("seq-len", po::value(&o.seq_len)->default_value(o.seq_len), "tokens per sequence");
  add("precision", precision_option(&o.precision), "bf16 | fp16 | fp32");
  add("backend", backend_option(&o.backend),
      "the backend the planned run will use: cpu | cuda (not checked against this machine) | "
      "auto (as train would resolve it here); picks the default --activations");
  add_attention_option(opts, &o.attention_request);
  add_deterministic_option(opts, &o.deterministic);
  add("document-masking",
      word_option<AutoSwitch>(
          &o.document_masking,
          [](const std::string& text) {
            ZT_CHECK(text == "on" || text == "off",
                     "--document-masking must be on or off (there is no dataset to resolve auto "
                     "with), got '" +
                         text + "'");
            return parse_auto_switch(text, "--document-masking");
          },
          auto_switch_name(o.document_masking)),
      "on | off: whether the planned run masks packed documents (train's default for data with "
      "more than one document, docs/fine-tuning.md); on the CUDA backend the plan is a Hopper "
      "GPU's, whose fused attention runs the masks (older GPUs run them on the GEMM path, with "
      "its larger scratch)");
  add_activations_option(opts, &o.activations);
  add("activation-checkpointing", activation_checkpointing_option(&o.activation_checkpointing),
      "none | selective | full | every:K");
  add("cpu-checkpointing", flag(&o.cpu_checkpointing, false),
      "checkpointed layer inputs in host memory");
  add("device-memory", po::value(&o.device_memory_gib),
      "GiB per device: recommend the lowest stage that fits");
  double device_memory_gib = 0;
  add("device-memory-gib", po::value(&device_memory_gib), "the same as --device-memory");
  add("max-micro-batch", flag(&o.max_micro_batch, false),
      "with --device-memory-gib: the largest micro-batch that fits at each stage (with this "
      "run's checkpointing and offload)");
  add("ranks-per-node", po::value(&o.ranks_per_node),
      "ranks sharing a node's host memory (DeepSpeed offload figure; default min(N, 8))");
  add("deepspeed", po::value(&o.deepspeed),
      "DeepSpeed JSON config (precedence: command line > --config INI > --deepspeed > "
      "defaults)");
  add("json", flag(&o.json, false), "print JSON instead of a table");
  add("plan", flag(&o.list_plan, false),
      "list the buffers the engine allocates at the requested stage (its memory plan), by role");
  add_trainable_options(opts, &o.trainable, &o.freeze);
  add_lora_options(opts, o.lora);
  add_checkpoint_frozen_option(opts, &o.checkpoint_frozen);
  // A train INI may be given as --config: its keys that do not change memory are read past.
  po::options_description train_opts;
  TrainOptions train_defaults;
  add_train_options(train_opts, train_defaults);
  const CommandSpec spec{kCommand, "Estimate per-rank memory of ZeRO stages 0-3.",
                         "zerotrain estimate (--preset NAME | --model DIR) [--world N] "
                         "[--zero-stage S] [--micro-batch B] [--seq-len T] [options]",
                         &train_opts, kTrainCommand};
  add_zero_bucket_options(opts, o.zero);
  add_offload_options(opts, o.offload);
  po::variables_map vm;
  if (!parse_command_line(spec, opts, nullptr, argc, argv, vm)) return false;
  note_lora_options_given(vm, o.lora);
  resolve_device_memory(vm, device_memory_gib, o);
  ZT_CHECK(vm.count("model") + vm.count("preset") == 1,
           std::string(kCommand) + ": give exactly one of --model DIR and --preset NAME");
  model = o.model_dir.empty() ? preset_config(o.preset)
                              : ModelConfig::from_hf_file(o.model_dir + "/config.json");
  parse_word(o.checkpoint_frozen, kFrozenInCheckpointWords,
             std::string(kCommand) + ": --checkpoint-frozen");
  check_planned_world(o);
  // ---- DeepSpeed JSON: fills what the command line / INI left unset ----
  AppliedDeepSpeedFile applied;
  if (!o.deepspeed.empty()) applied = apply_deepspeed_file(o.deepspeed, model, opts, vm);
  check_count(o.micro_batch, 1, "micro-batch", kCommand);
  check_count(o.grad_accum, 1, "grad-accum", kCommand);
  check_count(o.seq_len, 1, "seq-len", kCommand);
  // The batch rule runs for the planned --world (train's, once MPI gives the world size).
  apply_batch_size_rule(applied.batch_rule, o.world, o.micro_batch, o.grad_accum);
  if (vm.count("config")) note_defaults_unlike_train(vm, o, train_defaults);
  // A plan for a GPU job may be made anywhere: cuda is taken at its word.
  o.backend_kind = o.backend == BackendRequest::kCuda ? BackendKind::kCuda
                                                      : resolve_engine_backend(o.backend, kCommand);
  default_activations(vm, o.precision, o.backend_kind, &o.activations);
  // fused with the CPU backend is refused, as train refuses it.
  ZT_CHECK(o.attention_request != AttentionRequest::kFused || o.backend_kind == BackendKind::kCuda,
           std::string(kCommand) +
               ": --attention fused needs --backend cuda (the CPU backend "
               "has one attention)");
  check_deterministic(o.deterministic, o.backend_kind, o.zero.world_invariant, kCommand);
  return true;
}

}  // namespace zt
