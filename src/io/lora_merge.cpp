#include "io/lora_merge.h"

#include <filesystem>
#include <map>
#include <vector>

#include "io/model_dir.h"
#include "io/peft_adapter_file.h"
#include "io/tokenizer_files.h"
#include "util/error.h"

namespace zt {

uint64_t write_merged_model_dir(const std::string& base_dir, const std::string& adapter_dir,
                                const std::string& dir, bool overwrite) {
  ModelDirReader base(base_dir);
  ModelConfig with_adapters = base.config();
  with_adapters.lora = LoraSpec::from_peft_file(adapter_dir + "/" + kPeftConfigFile);
  PeftAdapterReader adapter(adapter_dir, with_adapters);
  const ParamLayout& adapted = adapter.layout();
  const float scale = adapter.config().lora.scale();
  const int64_t r = adapter.config().lora.rank;
  std::vector<float> a, b;  // the current projection's A [r, in] and B rows of the chunk
  auto values = [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
    const TensorInfo& at = adapted.tensors()[static_cast<size_t>(adapted.find(t.name))];
    if (adapter.holds(at)) {  // modules_to_save: the adapter's trained copy
      adapter.read_range_f32(at, begin, count, out);
      return;
    }
    base.read_range_f32(t, begin, count, out);
    const int target = t.layer >= 0 ? lora_target_of(t.role) : -1;
    const int ia = target < 0 ? -1 : adapted.lora_tensor(t.layer, target, false);
    if (ia < 0) return;
    const TensorInfo& ta = adapted.tensors()[static_cast<size_t>(ia)];
    const TensorInfo& tb =
        adapted.tensors()[static_cast<size_t>(adapted.lora_tensor(t.layer, target, true))];
    const int64_t in = t.shape[1], row0 = begin / in, rows = (begin + count - 1) / in - row0 + 1;
    a.resize(static_cast<size_t>(ta.numel));
    adapter.read_range_f32(ta, 0, ta.numel, a.data());
    b.resize(static_cast<size_t>(rows * r));
    adapter.read_range_f32(tb, row0 * r, rows * r, b.data());
    // W[i, j] += s · Σ_k B[i, k] · A[k, j], the sum in fp32 in k order.
#pragma omp parallel for schedule(static) if (count > (1 << 16))
    for (int64_t e = 0; e < count; ++e) {
      const int64_t i = (begin + e) / in - row0, j = (begin + e) % in;
      float delta = 0;
      for (int64_t k = 0; k < r; ++k)
        delta += b[static_cast<size_t>(i * r + k)] * a[static_cast<size_t>(k * in + j)];
      out[e] += delta * scale;
    }
  };
  TokenizerFiles tokenizer;
  for (const std::string& name : tokenizer_file_names()) {
    std::error_code ec;
    if (std::filesystem::exists(base_dir + "/" + name, ec)) {
      tokenizer = read_tokenizer_files(base_dir);
      break;
    }
  }
  return write_model_dir_streaming(dir, base.config(), values, kDefaultShardLimitBytes, overwrite,
                                   tokenizer.empty() ? std::map<std::string, std::string>{}
                                                     : tokenizer_files_to_write(tokenizer));
}

}  // namespace zt
