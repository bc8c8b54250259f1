#include "checkpoint/peft_adapter.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "comm/collective_outcome.h"
#include "io/fs_util.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace zt {

namespace {

// What the adapter file holds: every adapter tensor and every base tensor that trains.
bool in_adapter(const ParamLayout& layout, const TrainableSet& trainable, const TensorInfo& t) {
  return t.is_lora() || (!trainable.all_train() && trainable.trains(layout.index_of(t)));
}

// adapter_config.json's modules_to_save: the full names of the modules whose base tensors the
// file holds (PEFT selects a module by the end of its name, and a full name selects only itself),
// so that PEFT and --lora-init-from train them again; null when there are none.
nlohmann::json saved_modules(const ParamLayout& layout, const TrainableSet& trainable) {
  std::vector<std::string> modules;
  for (const TensorInfo& t : layout.tensors()) {
    if (t.is_lora() || !in_adapter(layout, trainable, t)) continue;
    const std::string module = t.name.substr(0, t.name.rfind('.'));
    if (std::find(modules.begin(), modules.end(), module) == modules.end())
      modules.push_back(module);
  }
  return modules.empty() ? nlohmann::json() : nlohmann::json(modules);
}

}  // namespace

uint64_t write_peft_adapter_dir(const std::string& dir, const ParamLayout& layout,
                                const TrainableSet& trainable, const std::string& base_model,
                                const TensorValuesFn& values, bool overwrite) {
  const LoraSpec& spec = layout.config().lora;
  ZT_CHECK(spec.enabled(), "write_peft_adapter_dir: the model has no LoRA adapters");
  check_output_dir_writable(dir, overwrite);
  std::vector<SafetensorsEntry> entries;
  std::vector<const TensorInfo*> tensors;
  uint64_t weight_bytes = 0;
  for (const TensorInfo& t : layout.tensors())
    if (in_adapter(layout, trainable, t)) {
      entries.push_back({kPeftNamePrefix + t.name, "F32", t.shape});
      tensors.push_back(&t);
      weight_bytes += static_cast<uint64_t>(t.numel) * sizeof(float);
    }
  const std::string tmp = temp_sibling(strip_trailing_slashes(dir));
  check_room_to_write(dir_parent(tmp), weight_bytes, "adapter '" + dir + "'");
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  try {
    SafetensorsFileWriter writer(tmp + "/" + kPeftWeightsFile, entries);
    std::vector<float> buffer;
    for (const TensorInfo* t : tensors) {
      buffer.resize(static_cast<size_t>(t->numel));
      values(*t, 0, t->numel, buffer.data());
      writer.append(buffer.data(), buffer.size() * sizeof(float));
    }
    writer.finish();
    const uint64_t bytes = writer.tensors().empty() ? 0 : writer.tensors().back().end;
    nlohmann::json config = spec.to_peft_json(base_model);
    config["modules_to_save"] = saved_modules(layout, trainable);
    // A tied embedding trained in full is the head too: PEFT keeps the tie only when told.
    config.erase("ensure_weight_tying");
    const TensorInfo& embedding = layout.tensor(TensorRole::kEmbedding);
    if (layout.tied_embeddings() && in_adapter(layout, trainable, embedding))
      config["ensure_weight_tying"] = true;
    write_text_file(tmp + "/" + kPeftConfigFile, config.dump(2) + "\n");
    fsync_path(tmp);
    move_into_place(tmp, dir, overwrite);
    return bytes;
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
}

void write_peft_adapter(ZeroEngine& engine, const std::string& dir, MpiCommunicator& comm,
                        const std::string& base_model) {
  const ParamLayout& layout = engine.model().layout();
  const TrainableSet& trainable = engine.model().trainable();
  engine.apply_delayed_update();  // the held-back update belongs to what is saved
  const std::string poisoned = engine.non_finite_master_tensor();
  if (!poisoned.empty())
    throw AgreedError("adapter '" + dir + "' not written: the master weights of " + poisoned +
                      " are not finite (NaN or infinity); training diverged");
  std::vector<bool> group_wanted(static_cast<size_t>(layout.num_groups()), false);
  for (const TensorInfo& t : layout.tensors())
    if (in_adapter(layout, trainable, t)) group_wanted[static_cast<size_t>(t.group)] = true;
  // Every rank gathers; rank 0 keeps the adapter's tensors (small beside the model).
  std::map<std::string, std::vector<float>> kept;
  engine.for_each_full_tensor(
      /*master=*/true,
      [&](const TensorInfo& t, const void* values) {
        if (!values || !in_adapter(layout, trainable, t)) return;
        const auto* f = static_cast<const float*>(values);
        kept[t.name].assign(f, f + t.numel);
      },
      [&](int g) { return group_wanted[static_cast<size_t>(g)]; });
  run_collectively(comm, [&] {
    if (comm.rank() != 0) return;
    write_peft_adapter_dir(
        dir, layout, trainable, base_model,
        [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
          const std::vector<float>& v = kept.at(t.name);
          std::copy(v.begin() + begin, v.begin() + begin + count, out);
        },
        /*overwrite=*/true);
  });
}

}  // namespace zt
