// zerotrain estimate: per-rank memory of every ZeRO stage for a model, world size, micro-batch
// and sequence length (engine/estimator.h), next to docs/ARCHITECTURE.md §4's theory figures; with
// --device-memory, the lowest stage (least communication) that fits, else checkpointing or
// offload. No MPI, no allocation: pure arithmetic.
#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>

#include "app/commands.h"
#include "app/engine_device.h"
#include "app/estimate_options.h"
#include "app/run_setup.h"
#include "app/train_checkpointing.h"
#include "backend/device_arena_plan.h"
#include "engine/engine_memory_plan.h"
#include "engine/estimator.h"
#include "engine/stage_traits.h"
#include "model/layout.h"
#include "model/trainable.h"
#include "util/error.h"

namespace zt {
namespace {

const char* const kCommand = kEstimateCommand;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The CUDA backend's scratch outside the estimate's categories (cuda_backend_scratch_bytes) for
// the planned run: its attention is --attention resolved as on an sm_80 or newer GPU of a build
// with cuDNN (choose_attention without cuDNN's own verdict; the choice does not depend on the
// micro-batch). None on the CPU.
struct PlannedScratch {
  bool cuda = false;
  AttentionKernel kernel = AttentionKernel::kGemm;
  AttentionShape one;  // the shape of one sequence: B = 1
  DType storage = DType::kFloat32;
  bool deterministic = true;  // --deterministic: the fused backward's cuDNN workspace

  const char* attention() const { return cuda ? attention_kernel_name(kernel) : "cpu"; }
  int64_t bytes(int64_t micro_batch) const {
    if (!cuda) return 0;
    AttentionShape shape = one;
    shape.B = micro_batch;
    const size_t n = cuda::cuda_backend_scratch_bytes(shape, kernel, storage, deterministic);
    ZT_CHECK(n <= static_cast<size_t>(std::numeric_limits<int64_t>::max()),
             std::string(kCommand) + ": the CUDA scratch of " + describe(shape) + " overflows");
    return static_cast<int64_t>(n);
  }
};

PlannedScratch planned_scratch(const EstimateOptions& o, const EngineSpec& spec) {
  PlannedScratch p;
  p.cuda = o.backend_kind == BackendKind::kCuda;
  p.one = attention_shape(spec.model, 1, spec.seq_len);
  p.storage = spec.activation_storage;
  p.deterministic = o.deterministic;
  // The GPU planned for: one whose fused attention runs the run's attention (compute capability
  // 8.x without document masks, 9.x with them).
  const bool masks = o.document_masking == AutoSwitch::kOn;
  if (p.cuda)
    p.kernel = choose_attention(
                   o.attention_request, true, masks ? 9 : 8, p.one,
                   spec.precision == Precision::kFp32, [] { return std::string(); }, masks)
                   .kernel;
  return p;
}

std::string gib(double bytes, int digits = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, bytes / kGiB);
  return buf;
}

// "A GiB" on the CPU; "A GiB + S GiB scratch" (the categories, then the CUDA backend's scratch)
// on CUDA.
std::string with_scratch(const PlannedScratch& plan, double categories, int64_t scratch,
                         int digits) {
  std::string text = gib(categories, digits) + " GiB";
  if (plan.cuda) text += " + " + gib(static_cast<double>(scratch), digits) + " GiB scratch";
  return text;
}

nlohmann::json estimate_json(const MemoryEstimate& e) {
  return {{"params", e.params},
          {"stage3_gathered", e.stage3_gathered},
          {"grads", e.grads},
          {"optimizer", e.optimizer},
          {"model_states", e.model_states()},
          {"activations", e.activations},
          {"buffers", e.buffers},
          {"step_total", e.step_total()},
          {"device_total", e.device_total()},
          {"host", e.host},
          {"nvme", e.nvme}};
}

// The requested run at `stage`, its offload as it applies there: optimizer offload needs stage
// >= 1, param offload stage 3 (rows of other stages show what they would hold without it).
EngineSpec spec_at_stage(const EngineSpec& requested, int stage) {
  EngineSpec spec = requested;
  spec.zero.stage = stage;
  const StageTraits traits = StageTraits::of(stage);
  if (!traits.shard_optimizer) {
    spec.offload.optimizer = OffloadDevice::kNone;
    spec.offload.bf16_gradient_copies = false;  // no gradient crosses to the host
  }
  if (!traits.shard_parameters) spec.offload.param = OffloadDevice::kNone;
  return spec;
}

// "--offload-optimizer cpu --offload-param cpu" (empty when nothing is offloaded).
std::string offload_flags(const OffloadConfig& c) {
  std::string flags;
  if (c.optimizer_offloaded())
    flags += " --offload-optimizer " + std::string(offload_device_name(c.optimizer));
  if (c.param_offloaded()) flags += " --offload-param " + std::string(offload_device_name(c.param));
  return flags;
}

// The offload modes side by side at the requested stage (1-3): device total, host and NVMe per
// rank for no offload, CPU optimizer offload without and with the exact overlap (its whole kept
// copy; train's auto keeps what the host has room for), with the delayed update, NVMe, and (stage
// 3) parameters too; into out["offload_modes"]. Empty at stage 0, which offloads nothing.
std::string offload_modes_table(const EstimateOptions& o, const EngineSpec& spec,
                                nlohmann::json& out) {
  if (spec.zero.stage < 1) return "";
  const OffloadConfig& requested = spec.offload;
  // Each row is its mode alone: the delayed update only in its own row (it runs with neither
  // NVMe nor param offload), and NVMe with the buffers it needs.
  OffloadConfig plain = requested;
  plain.delay = 0;
  OffloadConfig none = plain, serial = plain, overlap = plain, delayed, nvme, params;
  none.optimizer = none.param = OffloadDevice::kNone;
  serial.optimizer = overlap.optimizer = OffloadDevice::kCpu;
  serial.param = overlap.param = OffloadDevice::kNone;
  serial.overlap = false;
  overlap.overlap = true;
  overlap.overlap_bytes = -1;
  // The delayed update's warm-up steps (delay_after) run with the overlap: its kept copy too,
  // unless every step is delayed.
  delayed = overlap;
  delayed.delay = 1;
  nvme = serial;
  nvme.optimizer = OffloadDevice::kNvme;
  if (nvme.buffer_count < 2) nvme.buffer_count = OffloadConfig{}.buffer_count;
  params = overlap;
  params.param = OffloadDevice::kCpu;
  std::vector<std::pair<std::string, OffloadConfig>> modes = {
      {"none", none},
      {"optimizer cpu, overlap off", serial},
      {"optimizer cpu, overlap on", overlap},
      {"optimizer cpu, delayed update", delayed},
      {"optimizer nvme", nvme}};
  if (spec.zero.stage == 3) modes.push_back({"optimizer + params cpu, overlap on", params});
  char line[160];
  std::snprintf(line, sizeof line, "%-36s %9s %9s %9s\n", "offload at the requested stage", "total",
                "host", "nvme");
  std::string table = line;
  out["offload_modes"] = nlohmann::json::array();
  for (const auto& [name, mode] : modes) {
    EngineSpec with_mode = spec;
    with_mode.offload = mode;
    // The gradient copies train would make in this mode (auto: bf16 on a GPU with bf16 params).
    with_mode.offload.bf16_gradient_copies =
        mode.optimizer_offloaded() &&
        o.offload.bf16_gradient_copies(true, o.backend_kind, o.precision);
    with_mode.validate(o.world);  // never a row that train would refuse
    const MemoryEstimate e = estimate_memory(with_mode, o.world);
    out["offload_modes"].push_back(
        {{"mode", name}, {"device_total", e.device_total()}, {"host", e.host}, {"nvme", e.nvme}});
    std::snprintf(line, sizeof line, "%-36s %9s %9s %9s\n", name.c_str(),
                  gib(static_cast<double>(e.device_total())).c_str(),
                  gib(static_cast<double>(e.host)).c_str(),
                  gib(static_cast<double>(e.nvme)).c_str());
    table += line;
  }
  return table;
}

// --max-micro-batch: for each stage, the largest micro-batch whose estimated device peak fits
// in o.device_memory_gib, into out["max_micro_batch"]; returns the table's lines.
std::string max_micro_batch_table(const EstimateOptions& o, const EngineSpec& spec,
                                  const PlannedScratch& plan, nlohmann::json& out) {
  const auto device_bytes = static_cast<int64_t>(o.device_memory_gib * kGiB);
  std::string table = "largest micro-batch per rank in " +
                      gib(static_cast<double>(device_bytes), 3) + " GiB per device (seq-len " +
                      std::to_string(spec.seq_len) + "):\n";
  out["max_micro_batch"] = nlohmann::json::array();
  for (int stage = 0; stage < StageTraits::kCount; ++stage) {
    const EngineSpec at_stage = spec_at_stage(spec, stage);
    // On CUDA the backend's scratch at each micro-batch counts against the device too.
    const auto scratch_at = [&](int64_t b) { return plan.bytes(b); };
    const MaxMicroBatch m = max_micro_batch(at_stage, o.world, device_bytes, scratch_at);
    const int64_t at_b = std::max<int64_t>(1, m.micro_batch);
    const int64_t scratch = scratch_at(at_b), next_scratch = scratch_at(m.micro_batch + 1);
    out["max_micro_batch"].push_back({{"stage", stage},
                                      {"micro_batch", m.micro_batch},
                                      {"device_total", m.at.device_total()},
                                      {"next_device_total", m.next.device_total()},
                                      {"backend_scratch_bytes", scratch},
                                      {"next_backend_scratch_bytes", next_scratch}});
    const auto need = [&](const MemoryEstimate& e, int64_t s) {
      return with_scratch(plan, static_cast<double>(e.device_total()), s, 3);
    };
    table += "  stage " + std::to_string(stage) + ": ";
    if (m.micro_batch == 0) {
      table +=
          "none (one sequence needs " + need(m.at, scratch) + ": " + device_breakdown(m.at) +
          (plan.cuda ? ", CUDA scratch " + gib(static_cast<double>(scratch), 3) + " GiB" : "") +
          ")\n";
    } else {
      table += std::to_string(m.micro_batch) + " (" + need(m.at, scratch) + "; " +
               std::to_string(m.micro_batch + 1) + " needs " + need(m.next, next_scratch) + ")\n";
    }
  }
  return table;
}

// LoRA: the same run as full fine-tuning (every tensor of the base trains), per stage, beside the
// adapters' figures: the saving `estimate` shows. Adds "lora" to the JSON; returns the text.
std::string lora_comparison(const EstimateOptions& o, const EngineSpec& spec, nlohmann::json& out) {
  const ModelConfig& model = spec.model;
  const ParamLayout layout(model);
  int64_t adapter_psi = 0;
  // Each adapter as resolved, by its module's path: its rank, alpha and scale.
  nlohmann::json modules = nlohmann::json::object();
  const auto adapters = model.lora.adapters(model.num_layers);
  for (int64_t l = 0; l < model.num_layers; ++l)
    for (const LoraTarget t : kLoraTargetsInLayerOrder)
      if (const LoraAdapter& a = adapters[static_cast<size_t>(l)][static_cast<size_t>(t)];
          a.present())
        modules[lora_module_path(l, t)] = {
            {"r", a.rank}, {"lora_alpha", a.alpha}, {"scale", model.lora.scale_of(a)}};
  for (const TensorInfo& t : layout.tensors()) adapter_psi += t.is_lora() ? t.numel : 0;
  nlohmann::json full = nlohmann::json::array();
  std::string text = "LoRA r " + std::to_string(model.lora.rank) + " on " +
                     model.lora.targets_text() + model.lora.layers_text() + ": " +
                     std::to_string(adapter_psi) +
                     " adapter parameters; full fine-tuning of the base per rank (GiB):\n";
  for (int stage = 0; stage < StageTraits::kCount; ++stage) {
    EngineSpec full_finetune = spec_at_stage(spec, stage);
    full_finetune.model = model.base();
    full_finetune.trainable = TrainableSet();
    const MemoryEstimate e = estimate_memory(full_finetune, o.world);
    const double lora_total = out["stages"][static_cast<size_t>(stage)]["device_total"];
    full.push_back(
        {{"stage", stage}, {"model_states", e.model_states()}, {"device_total", e.device_total()}});
    char line[160];
    std::snprintf(line, sizeof line, "%c %-5d states %9s total %9s  (LoRA: total %s, %.1f%%)\n",
                  stage == spec.zero.stage ? '*' : ' ', stage, gib(e.model_states()).c_str(),
                  gib(e.device_total()).c_str(), gib(lora_total).c_str(),
                  100.0 * lora_total / static_cast<double>(e.device_total()));
    text += line;
  }
  out["lora"] = {{"rank", model.lora.rank},
                 {"alpha", model.lora.alpha},
                 {"targets", model.lora.targets_text()},
                 {"adapter_psi", adapter_psi},
                 {"scale", model.lora.scale()},
                 {"adapter_config", model.lora.to_json()},  // as resolved, in PEFT's keys
                 {"modules", modules},
                 {"full_finetune", full}};
  return text;
}

// The run the options describe, resolved and checked as train resolves and checks it.
EngineSpec estimate_spec(const EstimateOptions& o, const ModelConfig& base_model) {
  check_run_tokens(o.micro_batch, o.seq_len, o.grad_accum, o.world, 1, "one step", kCommand);
  EngineSpec spec = resolve_engine_spec(o, parse_engine_choices(o, kCommand), base_model);
  check_seq_len(spec.model, o.seq_len,
                o.model_dir.empty() ? "preset '" + o.preset + "'" : o.model_dir, kCommand);
  // The estimate touches no disk: nvme needs no real path here.
  if (spec.offload.nvme_path.empty()) spec.offload.nvme_path = "(not needed by estimate)";
  spec.validate(o.world);  // errors name the option and the DeepSpeed key
  return spec;
}

// The ranks sharing a node's host memory: --ranks-per-node, else min(N, 8).
int ranks_per_node(const EstimateOptions& o) {
  return o.ranks_per_node > 0 ? o.ranks_per_node : std::min(o.world, 8);
}

// One row per stage: the estimate, docs/ARCHITECTURE.md §4's theory and (with optimizer offload)
// DeepSpeed's offload figure; into out["stages"]. Returns the table.
std::string stage_table(const EstimateOptions& o, const EngineSpec& spec, nlohmann::json& out) {
  const ParamLayout layout(spec.model);
  const int64_t psi = layout.total_numel();
  // State (gradients, master, moments) is kept per group: for every element of a group that trains.
  const int64_t psi_without_state = psi - spec.trainable.state_numel(layout);
  char line[256];
  std::snprintf(line, sizeof line, "%-7s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "stage",
                "params", "grads", "optim", "states", "theory", "activ", "buffers", "total", "host",
                "nvme");
  std::string table = line;
  for (int stage = 0; stage < StageTraits::kCount; ++stage) {
    const EngineSpec at_stage = spec_at_stage(spec, stage);
    const OffloadConfig& applied = at_stage.offload;
    const MemoryEstimate e = estimate_memory(at_stage, o.world);
    const double theory =
        theory_model_states_bytes(psi, o.world, stage, spec.precision, psi_without_state);
    nlohmann::json row = estimate_json(e);
    row["stage"] = stage;
    row["theory_model_states"] = theory;
    row["offload_optimizer"] = offload_device_name(applied.optimizer);
    row["offload_param"] = offload_device_name(applied.param);
    if (applied.optimizer_offloaded()) {
      const OffloadFigure f = deepspeed_offload_figure(
          spec.model, o.world, stage, ranks_per_node(o), applied.param_offloaded());
      row["deepspeed_offload"] = {{"device", f.device_bytes},
                                  {"host_per_node", f.host_bytes_per_node}};
    }
    out["stages"].push_back(row);
    std::snprintf(line, sizeof line, "%c %-5d %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n",
                  stage == spec.zero.stage ? '*' : ' ', stage, gib(e.params).c_str(),
                  gib(e.grads).c_str(), gib(e.optimizer).c_str(), gib(e.model_states()).c_str(),
                  gib(theory).c_str(), gib(e.activations).c_str(), gib(e.buffers_peak()).c_str(),
                  gib(e.device_total()).c_str(), gib(e.host).c_str(), gib(e.nvme).c_str());
    table += line;
  }
  return table;
}

// The train command that runs candidate `c`: "zerotrain train --zero-stage S ...".
std::string train_flags(const EstimateOptions& o, const EngineSpec& spec, const FitCandidate& c,
                        const PlannedScratch& plan) {
  const DType storage = spec.activation_storage;
  return "zerotrain train --zero-stage " + std::to_string(c.stage) +
         " --activation-checkpointing " + activation_checkpointing_name(c.ac) +
         (storage == DType::kBf16      ? " --activations bf16"
          : storage == DType::kFloat16 ? " --precision fp16 --activations fp16"
                                       : "") +
         (o.attention_request != AttentionRequest::kAuto
              ? std::string(" --attention ") + attention_request_name(o.attention_request)
              : "") +
         (plan.cuda ? std::string(" --document-masking ") + auto_switch_name(o.document_masking)
                    : "") +
         (o.deterministic ? "" : " --deterministic false") + offload_flags(c.offload) +
         // The copies the candidate was counted with, when not auto's.
         (c.offload.optimizer_offloaded() && o.offload.gradient_copies != "auto"
              ? " --offload-gradient-copies " + o.offload.gradient_copies
              : "");
}

// --device-memory: the candidates of the decision tree (engine/estimator.h) held against the
// device less the CUDA scratch at this micro-batch; into out. Returns the recommendation's text.
std::string fit_advice(const EstimateOptions& o, const EngineSpec& spec, const PlannedScratch& plan,
                       int64_t scratch, nlohmann::json& out) {
  const auto device_bytes = static_cast<int64_t>(o.device_memory_gib * kGiB);
  // The CUDA backend's scratch at this micro-batch is the same for every candidate: what is
  // left of the device after it is what the candidates' categories must fit in.
  const int64_t budget = std::max<int64_t>(0, device_bytes - scratch);
  // The offload rows' gradient copies as their train command would resolve them.
  const FitRecommendation rec = recommend_configuration(
      spec, o.world, budget, o.offload.bf16_gradient_copies(true, o.backend_kind, o.precision));
  nlohmann::json tried = nlohmann::json::array();
  for (const FitCandidate& c : rec.candidates)
    tried.push_back({{"label", c.label},
                     {"stage", c.stage},
                     {"activation_checkpointing", activation_checkpointing_name(c.ac)},
                     {"offload_optimizer", offload_device_name(c.offload.optimizer)},
                     {"offload_param", offload_device_name(c.offload.param)},
                     {"device_total", c.estimate.device_total()},
                     {"fits", c.fits}});
  out["device_memory_bytes"] = device_bytes;
  // What each candidate's device_total is held against: the device less the CUDA scratch.
  out["candidate_budget_bytes"] = budget;
  out["candidates"] = tried;
  out["recommendation"] = nullptr;
  const std::string device = gib(static_cast<double>(device_bytes)) + " GiB per device";
  if (rec.chosen >= 0) {
    const FitCandidate& c = rec.candidates[static_cast<size_t>(rec.chosen)];
    out["recommendation"] = c.label;
    return "recommendation for " + device + ": " + c.label + " (" +
           with_scratch(plan, static_cast<double>(c.estimate.device_total()), scratch, 2) +
           " per rank; " + train_flags(o, spec, c, plan) + ")\n";
  }
  if (scratch >= device_bytes)
    return "nothing fits in " + device + ": the CUDA backend's scratch alone is " +
           gib(static_cast<double>(scratch)) + " GiB at micro-batch " +
           std::to_string(o.micro_batch) + "; use a smaller micro-batch or sequence\n";
  const FitCandidate& last = rec.candidates.back();
  return "nothing fits in " + device + ", even " + last.label + " (" +
         with_scratch(plan, static_cast<double>(last.estimate.device_total()), scratch, 2) +
         "); use more ranks, a smaller micro-batch or a shorter sequence\n";
}

// --plan: the requested configuration's memory plan by role (engine/memory_plan.h), bytes per
// rank.
std::string plan_table(const EngineSpec& spec, int world, nlohmann::json& out) {
  std::ostringstream text;
  text << "memory plan at stage " << spec.zero.stage
       << ", per rank. Lifetimes: run (from the engine's construction), training (from the first "
          "step), pass (the most held at once in a micro-batch's pass), optimizer step (in it "
          "only). A category's peak in the table above is run + training + the larger of pass "
          "and optimizer step.\n";
  out["plan"] = nlohmann::json::array();
  for (const MemoryPlan::RoleTotal& t : plan_engine_memory(spec, world).by_role()) {
    out["plan"].push_back({{"role", buffer_role_name(t.role)},
                           {"category", mem_category_name(t.category)},
                           {"lifetime", buffer_lifetime_name(t.lifetime)},
                           {"buffers", t.buffers},
                           {"bytes", t.bytes}});
    text << "  " << std::left << std::setw(26) << buffer_role_name(t.role) << std::setw(12)
         << mem_category_name(t.category) << std::setw(15) << buffer_lifetime_name(t.lifetime)
         << std::right << std::setw(5) << t.buffers << (t.buffers == 1 ? " buffer " : " buffers")
         << std::setw(14) << gib(static_cast<double>(t.bytes) * 1024, 3) << " MiB\n";
  }
  return text.str();
}

// The text form: the run, the stage table, the CUDA scratch, DeepSpeed's offload figure.
void print_estimate(const EstimateOptions& o, const EngineSpec& spec, const PlannedScratch& plan,
                    int64_t scratch, const std::string& table) {
  const ParamLayout layout(spec.model);
  const OffloadConfig& offload = spec.offload;
  const ActivationCheckpointing& ac = spec.ac;
  std::cout
      << "model: " << (o.model_dir.empty() ? "preset " + o.preset : o.model_dir)
      << ", psi = " << layout.total_numel() << " parameters"
      << (spec.trainable.all_train()
              ? std::string()
              : " (" + std::to_string(spec.trainable.trainable_numel(layout)) + " trainable, " +
                    std::to_string(spec.trainable.frozen_names(layout).size()) + " tensors frozen)")
      << ", world " << o.world << ", micro-batch " << o.micro_batch << " x seq-len " << o.seq_len
      << ", " << precision_name(o.precision) << ", " << activation_storage_name(o.activations)
      << " activations, checkpointing " << activation_checkpointing_name(ac)
      << (ac.on_host ? " (host)" : "") << ", offload: optimizer "
      << offload_device_name(offload.optimizer) << ", params " << offload_device_name(offload.param)
      << "\nper-rank GiB (states = params + grads + optim; theory = docs/ARCHITECTURE.md §4 model "
         "states; total = device peak; host and nvme pools apart; "
         "* = requested stage)\n"
      << table;
  // GiB, or MiB below one GiB (a small model's checkpoint).
  const auto size = [](double bytes) {
    return bytes >= 1073741824.0 ? gib(bytes) + " GiB" : gib(bytes * 1024, 1) + " MiB";
  };
  const bool digests = frozen_as_digest(o.checkpoint_frozen, spec.model.lora.enabled());
  const double checkpoint = static_cast<double>(checkpoint_data_bytes(spec, digests));
  std::cout << "training checkpoint: " << size(checkpoint)
            << " of data per save (fp32 master and moments of every group with a trainable tensor"
            << (spec.trainable.state_numel(layout) == layout.total_numel() ? ""
                : digests ? std::string(", a wholly frozen group as a digest of its values")
                          : std::string(", a wholly frozen group's values in ") +
                                dtype_name(working_dtype(spec.precision)))
            << (o.world > 1 ? "; " + std::to_string(o.world) + " rank files, " +
                                  size(checkpoint / o.world) + " on average"
                            : "")
            << ")\n";
  if (plan.cuda) {
    std::cout << "CUDA backend scratch at micro-batch " << o.micro_batch
              << ", outside the totals above"
              << (o.device_memory_gib > 0 || o.max_micro_batch ? " (the fit figures below count it)"
                                                               : "")
              << ": " << gib(static_cast<double>(scratch)) << " GiB per rank (cuBLASLt workspace, "
              << plan.attention() << " attention scratch, reductions"
              << (plan.kernel == AttentionKernel::kFused ? ", cuDNN's workspace" : "") << ")\n";
  }
  if (offload.optimizer_offloaded()) {
    const OffloadFigure f = deepspeed_offload_figure(spec.model, o.world, spec.zero.stage,
                                                     ranks_per_node(o), offload.param_offloaded());
    std::cout << "DeepSpeed's offload figure (stage " << spec.zero.stage << "): device "
              << gib(f.device_bytes) << " GiB per rank, host " << gib(f.host_bytes_per_node)
              << " GiB per node (" << ranks_per_node(o) << " ranks per node)\n";
  }
}

int run_estimate(const EstimateOptions& o, const ModelConfig& base_model) {
  const EngineSpec spec = estimate_spec(o, base_model);
  const ParamLayout layout(spec.model);
  const PlannedScratch plan = planned_scratch(o, spec);
  const int64_t scratch = plan.bytes(o.micro_batch);  // at the requested micro-batch
  nlohmann::json out = {
      {"psi", layout.total_numel()},
      {"model_config", spec.model.to_hf_json()},
      {"training_flops_per_token", training_flops_per_token(spec.model, o.seq_len, spec.trainable)},
      {"trainable_psi", spec.trainable.trainable_numel(layout)},
      {"state_psi", spec.trainable.state_numel(layout)},
      {"checkpoint_bytes",
       checkpoint_data_bytes(spec,
                             frozen_as_digest(o.checkpoint_frozen, spec.model.lora.enabled()))},
      {"frozen_tensors", spec.trainable.frozen_names(layout)},
      {"world", o.world},
      {"requested_stage", spec.zero.stage},
      {"micro_batch", o.micro_batch},
      {"seq_len", o.seq_len},
      {"precision", precision_name(o.precision)},
      {"activations", activation_storage_name(o.activations)},
      {"backend", backend_kind_name(o.backend_kind)},
      {"backend_scratch", {{"bytes", scratch}, {"attention", plan.attention()}}},
      {"activation_checkpointing", activation_checkpointing_name(spec.ac)},
      {"cpu_checkpointing", spec.ac.on_host},
      {"offload_optimizer", offload_device_name(spec.offload.optimizer)},
      {"offload_param", offload_device_name(spec.offload.param)},
      {"stages", nlohmann::json::array()}};
  const std::string table = stage_table(o, spec, out);
  const std::string lora_text = spec.model.lora.enabled() ? lora_comparison(o, spec, out) : "";
  std::string advice;
  if (o.device_memory_gib > 0) advice = fit_advice(o, spec, plan, scratch, out);
  if (o.max_micro_batch) advice += max_micro_batch_table(o, spec, plan, out);
  const std::string modes = offload_modes_table(o, spec, out);
  if (o.list_plan) advice += plan_table(spec, o.world, out);
  if (o.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  print_estimate(o, spec, plan, scratch, table);
  std::cout << lora_text << modes << advice;
  return 0;
}

}  // namespace

int cmd_estimate(int argc, char** argv) {
  EstimateOptions options;
  ModelConfig model;
  if (!parse_estimate_options(argc, argv, options, model)) return 0;
  return run_estimate(options, model);
}

}  // namespace zt
