// zerotrain eval: mean next-token cross-entropy (natural log) of a model directory on the first
// K·B non-overlapping windows of T+1 tokens of a token dataset (docs/ARCHITECTURE.md §3), or with
// --batches all on every whole window of it, printed as
// {"batches": K, "windows": W, "loss": L, "tokens": W·T, ...} on stdout.
//
// Under mpirun each rank holds the whole model (a stage-0 engine on its own single-rank
// communicator, every tensor frozen: the weights without gradients or optimizer state) and scores
// batches k ≡ rank (mod N); the per-batch loss sums are combined in batch order, so the printed
// loss is the same for every N. "peak_memory_bytes" is rank 0's, by category as train's metrics
// give it (every rank holds the same). With --adapter, the model carries a PEFT LoRA adapter
// directory's adapters unmerged, as PeftModel.from_pretrained(base, DIR) evaluates.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "app/engine_device.h"
#include "app/lora_options.h"
#include "app/run_setup.h"
#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_engine.h"
#include "io/data_loader.h"
#include "io/model_dir.h"
#include "io/peft_adapter_file.h"
#include "io/token_dataset.h"
#include "model/trainable.h"
#include "report/metrics_log.h"
#include "runtime/mpi_runtime.h"
#include "util/error.h"
#include "util/ignored_target.h"

namespace zt {
namespace {

const char* const kCommand = "eval";

// Besides the engine's options that eval takes (RunEngineOptions, app/run_setup.h: the
// micro-batch's shape, --precision, --activations, --backend, --attention, --document-masking), at
// eval's defaults: one window per batch, fp32 weights. choices: their resolution, by
// parse_eval_options.
struct EvalOptions : RunEngineOptions {
  EvalOptions() {
    micro_batch = 1;
    precision = Precision::kFp32;
  }
  std::string model_dir, data;
  std::string adapter;  // --adapter: a PEFT LoRA adapter directory for the model
  int64_t batches = 1;
  double comm_timeout = Communicator::kDefaultTimeoutSeconds;
  EngineChoices choices;
};

bool parse_eval_options(int argc, char** argv, EvalOptions& o) {
  po::options_description opts("eval options");
  auto add = opts.add_options();
  add("model", po::value(&o.model_dir), "model directory");
  add("adapter", po::value(&o.adapter),
      "a PEFT LoRA adapter directory (a LoRA run's OUT/final, or one PEFT saved with "
      "safetensors) for --model, its adapters unmerged as PeftModel.from_pretrained loads them");
  add("data", po::value(&o.data), "token dataset (HDF5, /tokens)");
  add("batches", eval_batches_option(&o.batches, "--batches"),
      "K: number of batches (all: every whole window of the data, the last batch padded)");
  add("micro-batch", po::value(&o.micro_batch)->default_value(o.micro_batch),
      "B: windows per batch");
  add("seq-len", po::value(&o.seq_len)->default_value(o.seq_len), "T: tokens per window - 1");
  add("precision", precision_option(&o.precision),
      "working precision of the weights: fp32 (exact stored values), bf16 or fp16");
  add("backend", backend_option(&o.backend),
      "compute backend: cpu | cuda | auto (auto = cuda when built with CUDA and a GPU is "
      "visible, else cpu)");
  add_attention_option(opts, &o.attention_request);
  add_document_masking_option(opts, &o.document_masking);
  add_activations_option(opts, &o.activations);
  add_comm_timeout_option(opts, &o.comm_timeout);
  const CommandSpec spec{
      kCommand,
      "Mean next-token cross-entropy of a model on the first K*B windows of "
      "T+1 tokens of a dataset (--batches all: on every whole window).",
      "zerotrain eval --model DIR [--adapter DIR] --data FILE.h5 --batches K --micro-batch B "
      "--seq-len T"};
  po::variables_map vm;
  if (!parse_command_line(spec, opts, nullptr, argc, argv, vm)) return false;
  resolve_device_options(vm, o, kCommand);
  require_option(vm, "model", kCommand);
  require_option(vm, "data", kCommand);
  check_adapter_option(vm, o.adapter, kCommand);
  if (o.batches != kAllEvalBatches) check_count(o.batches, 1, "batches", kCommand);
  check_count(o.micro_batch, 1, "micro-batch", kCommand);
  check_count(o.seq_len, 1, "seq-len", kCommand);
  check_attention_request(o.attention_request, o.backend_kind, kCommand);
  o.choices = parse_engine_choices(o, kCommand);  // checks --activations against --precision
  check_comm_timeout(o.comm_timeout, kCommand);
  return true;
}

int run_eval(const EvalOptions& o) {
  MpiRuntime runtime;
  MpiCommunicator world;
  world.set_timeout_seconds(o.comm_timeout);
  MpiCommunicator self(MPI_COMM_SELF);
  const int64_t B = o.micro_batch, T = o.seq_len;

  // The inputs, opened by every rank and agreed on, so that a bad one is an error every rank
  // reports (then MPI_Finalize), not one rank's abort.
  std::unique_ptr<ModelDirReader> reader_ptr;
  std::unique_ptr<PeftAdapterReader> adapter;  // --adapter's, for the model with its LoraSpec
  std::unique_ptr<TokenDataset> data_ptr;
  bool document_masks = false;
  EvalWindows windows;  // batch k: windows [k·B, k·B + B)
  run_collectively(world, [&] {
    reader_ptr = std::make_unique<ModelDirReader>(o.model_dir);
    check_seq_len(reader_ptr->config(), T, "model '" + o.model_dir + "'", kCommand);
    if (!o.adapter.empty())
      adapter = std::make_unique<PeftAdapterReader>(
          o.adapter, adapter_model_config(o.adapter, reader_ptr->config()));
    data_ptr = std::make_unique<TokenDataset>(o.data);
    check_data_fits_model(*data_ptr, o.data, o.model_dir);
    windows = eval_windows(*data_ptr, o.batches, B, T);
    document_masks =
        resolve_document_masking(o.document_masking, data_ptr->num_documents(), o.data, kCommand);
  });
  ModelDirReader& reader = *reader_ptr;
  TokenDataset& data = *data_ptr;
  const ModelConfig& config = adapter ? adapter->config() : reader.config();

  // Each rank evaluates its batches alone: a stage-0 engine over MPI_COMM_SELF (eval sets no ZeRO,
  // checkpointing, offload or trainable option: their defaults), every tensor frozen, so
  // that it holds the weights alone: no gradient, fp32 master or Adam moments; and forward-only,
  // so that its activations are one layer's and two residual buffers, nothing kept for a
  // backward.
  EngineSpec spec = resolve_engine_spec(o, o.choices, config);
  spec.model.lora = config.lora;  // --adapter's (eval takes no LoRA option)
  spec.trainable = TrainableSet::all_frozen(ParamLayout(spec.model));
  spec.ac.forward_only = true;
  EngineDevice device =
      make_engine_device(o.backend_kind, world, MPI_COMM_SELF, estimate_memory(spec, 1),
                         {o.attention_request, attention_shape(config, B, T),
                          spec.activation_storage, spec.precision == Precision::kFp32,
                          /*backward=*/false, document_masks});
  MemoryTracker memory(device.backend->device_memory());
  std::unique_ptr<ZeroEngine> engine_ptr;  // its weights read from the model: agreed too
  run_collectively(world, [&] {
    engine_ptr =
        std::make_unique<ZeroEngine>(spec, *device.backend, device.data_comm(self), memory, &self);
    if (adapter) {
      LoraStartSource adapted(config, &reader, adapter.get(), /*seed=*/0);  // every tensor held
      engine_ptr->load_from(adapted);
    } else {
      engine_ptr->load_from(reader);
    }
  });
  ZeroEngine& engine = *engine_ptr;

  const int64_t K = windows.batches;
  EvalBatch batch(B, T, document_masks);
  // Per batch: its loss sum, then its counted targets (zeros add exactly; counts are exact).
  std::vector<double> batch_sums(static_cast<size_t>(2 * K), 0.0);
  auto check_vocab = [&](const std::vector<int32_t>& tokens, bool are_targets) {
    for (int32_t t : tokens)
      ZT_CHECK((t >= 0 && t < config.vocab_size) || (are_targets && t == kIgnoredTarget),
               "token " + std::to_string(t) + " in '" + o.data + "' is outside the vocabulary (" +
                   std::to_string(config.vocab_size) + ") of model '" + o.model_dir + "'");
  };
  run_collectively(world, [&] {
    for (int64_t k = world.rank(); k < K; k += world.world_size()) {
      batch_sums[static_cast<size_t>(K + k)] = static_cast<double>(batch.read(data, windows, k));
      check_vocab(batch.inputs(), false);
      check_vocab(batch.targets(), true);
      batch_sums[static_cast<size_t>(k)] =
          engine.eval_loss_sum(batch.inputs().data(), batch.targets().data(), batch.doc_starts());
    }
  });
  world.all_reduce_sum_blocking(batch_sums.data(), batch_sums.size());
  double loss_sum = 0, counted = 0;
  for (int64_t k = 0; k < K; ++k) {
    loss_sum += batch_sums[static_cast<size_t>(k)];
    counted += batch_sums[static_cast<size_t>(K + k)];
  }
  const int64_t tokens = windows.windows * T, loss_tokens = static_cast<int64_t>(counted);
  check_eval_targets_counted(data, windows.windows, loss_tokens);
  if (world.rank() == 0) {
    const nlohmann::json result = {{"loss", loss_sum / counted},
                                   {"tokens", tokens},
                                   {"loss_tokens", loss_tokens},
                                   {"batches", K},
                                   {"windows", windows.windows},
                                   {"document_masking", document_masks ? "on" : "off"},
                                   {"peak_memory_bytes", memory_json(memory_peaks(memory))}};
    std::cout << result.dump() << std::endl;
  }
  return 0;
}

}  // namespace

int cmd_eval(int argc, char** argv) {
  EvalOptions options;
  if (!parse_eval_options(argc, argv, options)) return 0;
  return run_eval(options);
}

}  // namespace zt
