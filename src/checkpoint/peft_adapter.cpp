#include "checkpoint/peft_adapter.h"

#include <filesystem>
#include <vector>

#include "comm/collective_outcome.h"
#include "io/fs_util.h"
#include "io/safetensors.h"
#include "util/error.h"

namespace zt {

namespace {

// What the adapter file holds: every adapter tensor and every base tensor that trains.
bool in_adapter(const ZeroEngine& engine, const TensorInfo& t) {
  return t.is_lora() || engine.model().trainable().trains(engine.model().layout().index_of(t));
}

}  // namespace

void write_peft_adapter(ZeroEngine& engine, const std::string& dir, MpiCommunicator& comm,
                        const std::string& base_model) {
  const ParamLayout& layout = engine.model().layout();
  const LoraSpec& spec = engine.model().config().lora;
  ZT_CHECK(spec.enabled(), "write_peft_adapter: the model has no LoRA adapters");
  std::vector<bool> group_wanted(static_cast<size_t>(layout.num_groups()), false);
  std::vector<SafetensorsEntry> entries;
  for (const TensorInfo& t : layout.tensors())
    if (in_adapter(engine, t)) {
      group_wanted[static_cast<size_t>(t.group)] = true;
      entries.push_back({kPeftNamePrefix + t.name, "F32", t.shape});
    }
  const bool root = comm.rank() == 0;
  const std::string tmp = temp_sibling(strip_trailing_slashes(dir));
  std::unique_ptr<SafetensorsFileWriter> writer;
  run_collectively(comm, [&] {
    if (!root) return;
    std::filesystem::remove_all(tmp);
    std::filesystem::create_directories(tmp);
    writer = std::make_unique<SafetensorsFileWriter>(tmp + "/" + kPeftWeightsFile, entries);
  });
  // Every rank gathers; rank 0 appends in layout order, which is the header's order.
  std::string failure;
  engine.for_each_full_tensor(
      /*master=*/true,
      [&](const TensorInfo& t, const void* values) {
        if (!root || !in_adapter(engine, t) || !failure.empty()) return;
        try {
          writer->append(values, static_cast<size_t>(t.numel) * sizeof(float));
        } catch (const Error& e) {
          failure = e.what();
        }
      },
      [&](int g) { return group_wanted[static_cast<size_t>(g)]; });
  run_collectively(comm, [&] {
    if (!root) return;
    ZT_CHECK(failure.empty(), failure);
    writer->finish();
    write_text_file(tmp + "/" + kPeftConfigFile, spec.to_peft_json(base_model).dump(2) + "\n");
    fsync_path(tmp);
    move_into_place(tmp, dir, /*overwrite=*/true);
  });
}

}  // namespace zt
