#include "app/run_setup.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <vector>

#include "app/engine_device.h"
#include "io/tokenizer_files.h"
#include "io/tokenizer_vocabulary.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "runtime/mpi_runtime.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

void check_positive(double value, const std::string& option, const std::string& command) {
  if (value > 0) return;
  std::ostringstream v;
  v << value;
  fail(command + ": --" + option + " must be positive, got " + v.str());
}

void check_finite_at_least(double value, double minimum, const std::string& option,
                           const std::string& command) {
  ZT_CHECK(std::isfinite(value) && value >= minimum,
           command + ": --" + option + " must be a finite number >= " + shortest_decimal(minimum) +
               ", got " + shortest_decimal(value));
}

void check_count(int64_t value, int64_t minimum, const std::string& option,
                 const std::string& command) {
  ZT_CHECK(value >= minimum && value < kMaxCount,
           command + ": --" + option + " must be at least " + std::to_string(minimum) +
               " and below " + std::to_string(kMaxCount) + ", got " + std::to_string(value));
}

int64_t check_micro_batch_tokens(int64_t micro_batch, int64_t seq_len, const std::string& command) {
  int64_t tokens = 0;
  ZT_CHECK(!__builtin_mul_overflow(micro_batch, seq_len, &tokens) &&
               tokens <= std::numeric_limits<int32_t>::max(),
           command + ": --micro-batch " + std::to_string(micro_batch) + " × --seq-len " +
               std::to_string(seq_len) + " tokens per micro-batch is beyond 2^31 - 1");
  return tokens;
}

void check_run_tokens(int64_t micro_batch, int64_t seq_len, int64_t grad_accum, int64_t world,
                      int64_t steps, const std::string& run_length, const std::string& command) {
  const int64_t micro_tokens = check_micro_batch_tokens(micro_batch, seq_len, command);
  int64_t step_tokens = 0, run_tokens = 0;
  const bool fits = !__builtin_mul_overflow(micro_tokens, grad_accum, &step_tokens) &&
                    !__builtin_mul_overflow(step_tokens, world, &step_tokens) &&
                    !__builtin_mul_overflow(step_tokens, steps, &run_tokens) &&
                    run_tokens <= (int64_t{1} << 62);
  ZT_CHECK(fits, command + ": " + run_length + " × global batch (--micro-batch " +
                     std::to_string(micro_batch) + " × --grad-accum " + std::to_string(grad_accum) +
                     " × " + std::to_string(world) + " ranks) × seq-len " +
                     std::to_string(seq_len) + " tokens is beyond 2^62");
}

uint64_t shard_limit_bytes(double mib, const std::string& option, const std::string& command) {
  ZT_CHECK(std::isfinite(mib) && mib > 0 && mib <= 0x1p30,
           command + ": --" + option + " must be positive and at most 1073741824 (1 PiB), got " +
               shortest_decimal(mib));
  return static_cast<uint64_t>(std::max(1.0, mib * (1 << 20)));
}

void check_seq_len(const ModelConfig& config, int64_t seq_len, const std::string& model_source,
                   const std::string& command) {
  ZT_CHECK(seq_len <= config.max_positions(), command + ": --seq-len " + std::to_string(seq_len) +
                                                  " exceeds " + config.max_positions_text() +
                                                  " of " + model_source);
}

void add_zero_bucket_options(po::options_description& options, ZeroConfig& z) {
  auto add = options.add_options();
  add("overlap-comm", bool_flag(&z.overlap_comm, z.overlap_comm),
      "overlap collectives with compute (two reduce slots, stage-3 prefetch)");
  add("world-invariant", bool_flag(&z.world_invariant, z.world_invariant),
      "bitwise the same training at any power-of-two number of ranks and any ZeRO stage "
      "(rank-tree gradient sums; docs/reproducibility.md)");
  add("reduce-bucket-size", po::value(&z.reduce_bucket_size)->default_value(z.reduce_bucket_size),
      "elements per gradient bucket");
  add("allgather-bucket-size",
      po::value(&z.allgather_bucket_size)->default_value(z.allgather_bucket_size),
      "elements per parameter all-gather");
  add("prefetch-bucket-size",
      po::value(&z.prefetch_bucket_size)->default_value(z.prefetch_bucket_size),
      "stage 3 prefetch (elements)");
  add("param-persistence-threshold",
      po::value(&z.param_persistence_threshold)->default_value(z.param_persistence_threshold),
      "stage 3: groups below this many elements stay gathered");
  add("max-live-parameters",
      po::value(&z.max_live_parameters)->default_value(z.max_live_parameters),
      "stage 3: gathered elements at once");
  add("max-reuse-distance", po::value(&z.max_reuse_distance)->default_value(z.max_reuse_distance),
      "stage 3: reuse distance (elements)");
}

OffloadConfig OffloadOptions::resolved(BackendKind backend, Precision precision) const {
  ZT_CHECK(overlap != AutoSwitch::kOn || config.optimizer == OffloadDevice::kCpu,
           "--offload-optimizer-overlap on needs --offload-optimizer cpu: the overlap runs the "
           "host's AdamW during the backward (the optimizer is '" +
               std::string(offload_device_name(config.optimizer)) + "')");
  ZT_CHECK(config.delay != 0 || config.delay_after == OffloadConfig{}.delay_after,
           "--offload-optimizer-delay-after " + std::to_string(config.delay_after) +
               " applies to --offload-optimizer-delay 1 (the delay is 0)");
  OffloadConfig c = config;
  c.overlap = overlap != AutoSwitch::kOff;  // auto's limit: auto_overlap_bytes, set by train
  c.bf16_gradient_copies = bf16_gradient_copies(config.optimizer_offloaded(), backend, precision);
  return c;
}

bool OffloadOptions::bf16_gradient_copies(bool optimizer_offloaded, BackendKind backend,
                                          Precision precision) const {
  ZT_CHECK(gradient_copies == "auto" || gradient_copies == "bf16" || gradient_copies == "fp32",
           "--offload-gradient-copies must be auto, bf16 or fp32, got '" + gradient_copies + "'");
  // auto: 16 bits where the copies cross a bus and the working params are 16-bit; the CPU
  // backend's copies are host memcpys, which rounding would only slow down. bf16 under fp16 too:
  // an fp16 copy of a loss-scaled fp32 gradient could overflow where the fp32 one does not,
  // unseen by the overflow check; bf16 keeps fp32's range.
  return gradient_copies == "bf16" ||
         (gradient_copies == "auto" && optimizer_offloaded && backend != BackendKind::kCpu &&
          precision != Precision::kFp32);
}

namespace {

po::value_semantic* offload_device_option(OffloadDevice* target, const std::string& option) {
  return word_option<OffloadDevice>(
      target, [option](const std::string& text) { return parse_offload_device(text, option); },
      std::string(offload_device_name(*target)));
}

}  // namespace

po::value_semantic* activation_checkpointing_option(ActivationCheckpointing* target) {
  return word_option<ActivationCheckpointing>(
      target, [](const std::string& text) { return parse_activation_checkpointing(text, false); },
      activation_checkpointing_name(*target));
}

void add_offload_options(po::options_description& options, OffloadOptions& o) {
  auto add = options.add_options();
  add("offload-optimizer", offload_device_option(&o.config.optimizer, "--offload-optimizer"),
      "none | cpu | nvme: fp32 master and Adam moments in host memory or on NVMe (stage 1-3)");
  add("offload-param", offload_device_option(&o.config.param, "--offload-param"),
      "none | cpu: stage-3 parameter shards in host memory");
  add("nvme-path", po::value(&o.config.nvme_path), "directory for --offload-optimizer nvme");
  add("offload-buffer-count",
      po::value(&o.config.buffer_count)->default_value(o.config.buffer_count),
      "rotating host buffers for NVMe swapping (>= 2)");
  add("sub-group-size", po::value(&o.config.sub_group_size)->default_value(o.config.sub_group_size),
      "offloaded optimizer tile (elements)");
  add("offload-optimizer-delay", po::value(&o.config.delay)->default_value(o.config.delay),
      "0 | 1: delayed parameter update: each update is held back one step (with "
      "--offload-optimizer cpu it runs on the host while the next step computes), so a step's "
      "gradients come from the weights two updates back");
  add("offload-optimizer-overlap", auto_switch_option(&o.overlap, "--offload-optimizer-overlap"),
      "auto | on | off: with --offload-optimizer cpu, each group's CPU AdamW starts as soon as "
      "its gradients are on the host, during the backward, and is undone and redone when the "
      "gradient norm clips or skips the step: the same bits as off, host memory for a copy of "
      "the state it speculates on (on: all of it; auto: the groups that fit in half the host "
      "memory left; docs/offload.md)");
  add("offload-gradient-copies", po::value(&o.gradient_copies)->default_value(o.gradient_copies),
      "auto | bf16 | fp32: the dtype the reduced gradient shards cross to the host in with "
      "optimizer offload; bf16 halves the copies and the host's gradient buffers, and the host "
      "AdamW reads the rounded gradients (not bitwise the run without offload); auto: bf16 on a "
      "GPU backend with --precision bf16 or fp16, else fp32 (docs/offload.md)");
  add("offload-optimizer-delay-after",
      po::value(&o.config.delay_after)->default_value(o.config.delay_after),
      "warm-up: the updates of steps 1..N are not held back");
}

int64_t auto_overlap_bytes(int64_t planned_host_bytes, int local_size) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = -1;
  while (meminfo >> key) {
    if (key == "MemAvailable:") {
      meminfo >> kib >> unit;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  if (kib < 0 || local_size < 1) return 0;
  const int64_t per_rank = kib * 1024 / local_size;
  return std::max<int64_t>(0, per_rank - planned_host_bytes) / 2;
}

void resolve_device_options(const po::variables_map& vm, RunEngineOptions& o,
                            const std::string& command) {
  o.backend_kind = resolve_engine_backend(o.backend, command);
  default_activations(vm, o.precision, o.backend_kind, &o.activations);
}

EngineChoices parse_engine_choices(const RunEngineOptions& o, const std::string& command) {
  EngineChoices c;
  check_activation_storage(o.activations, o.precision, command);
  c.ac = with_inputs_on_host(o.activation_checkpointing, o.cpu_checkpointing);
  c.offload = o.offload.resolved(o.backend_kind, o.precision);
  c.lora = resolve_lora_spec(o.lora, &c.lora_named_base_model);
  return c;
}

EngineSpec resolve_engine_spec(const RunEngineOptions& o, const EngineChoices& choices,
                               const ModelConfig& model) {
  EngineSpec spec;
  spec.model = model;
  const std::string warning = spec.model.set_lora(choices.lora);
  if (!warning.empty() && is_rank_zero_of_launch()) std::cerr << "warning: " << warning << "\n";
  const ParamLayout layout(spec.model);
  std::vector<std::string> trainable = o.trainable;
  for (const std::string& p :
       modules_to_save_patterns(spec.model.lora, layout, lora_spec_source(o.lora)))
    trainable.push_back(p);
  spec.trainable = TrainableSet::from_patterns(layout, trainable, o.freeze);
  spec.zero = o.zero;
  spec.precision = o.precision;
  spec.activation_storage = o.activations;
  spec.micro_batch = o.micro_batch;
  spec.seq_len = o.seq_len;
  spec.grad_accum = o.grad_accum;
  spec.ac = choices.ac;
  spec.offload = choices.offload;
  return spec;
}

namespace {

// The data's tokenizer.json and the model's read ids alike: no id is a regular token of both
// under other names (regular_token_differences). A model without one, or data without one, is
// not compared.
void check_same_tokenizer(const TokenDataset& data, const std::string& data_path,
                          const std::string& model_dir) {
  std::error_code ec;
  if (model_dir.empty() || !std::filesystem::exists(model_dir + "/tokenizer.json", ec)) return;
  const TokenizerFiles data_files = data.tokenizer_files();
  const auto data_json = data_files.files.find("tokenizer.json");
  if (data_json == data_files.files.end()) return;
  const TokenizerFiles model_files = read_tokenizer_files(model_dir);
  const auto model_found = model_files.files.find("tokenizer.json");
  if (model_found == model_files.files.end() || model_found->second == data_json->second) return;
  const std::string& model_json = model_found->second;
  const std::string model_file = model_dir + "/tokenizer.json";
  const VocabularyDifference difference = regular_token_differences(
      read_tokenizer_vocabulary(data_json->second,
                                "the tokenizer.json of --data '" + data_path + "'"),
      read_tokenizer_vocabulary(model_json, model_file), 3);
  if (difference.count == 0) return;
  std::string examples;
  for (const DifferingToken& t : difference.first)
    examples += (examples.empty() ? "" : "; ") + std::string("id ") + std::to_string(t.id) +
                " is " + quoted_json(t.in_a) + " in the data's, " + quoted_json(t.in_b) +
                " in the model's";
  ZT_CHECK(false, "--data '" + data_path + "' was tokenized by " + data.tokenizer() +
                      ", whose tokenizer.json reads ids unlike the model's '" + model_file + "' (" +
                      std::to_string(difference.count) + " ids differ: " + examples +
                      "): prepare the data with --tokenizer " + model_dir);
}

}  // namespace

void check_data_fits_model(const TokenDataset& data, const std::string& data_path,
                           const std::string& model_dir) {
  std::error_code ec;
  const bool model_tokenizer =
      !model_dir.empty() && std::filesystem::exists(model_dir + "/tokenizer.json", ec);
  ZT_CHECK(!model_tokenizer || data.tokenizer() != "byte",
           "--data '" + data_path +
               "' holds bytes (prepare-data --text without --tokenizer), "
               "and the model '" +
               model_dir +
               "' carries its own tokenizer.json, which would read "
               "them as its token ids: prepare the data with --tokenizer " +
               model_dir);
  check_same_tokenizer(data, data_path, model_dir);
}

}  // namespace zt
