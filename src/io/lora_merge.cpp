#include "io/lora_merge.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "io/tokenizer_files.h"
#include "util/error.h"

namespace zt {

LoraMergedSource::LoraMergedSource(const std::string& base_dir, const std::string& adapter_dir)
    : base_(base_dir),
      adapter_dir_(adapter_dir),
      adapter_(adapter_dir, adapter_model_config(adapter_dir, base_.config())) {}

std::string LoraMergedSource::description() const {
  return base_.description() + " with PEFT adapter '" + adapter_dir_ + "' merged in";
}

void LoraMergedSource::read_range_f32(const TensorInfo& t, int64_t begin, int64_t count,
                                      float* out) {
  const ParamLayout& adapted = adapter_.layout();
  const TensorInfo& at = adapted.tensors()[static_cast<size_t>(adapted.find(t.name))];
  if (adapter_.holds(at)) {  // modules_to_save: the adapter's trained copy
    adapter_.read_range_f32(at, begin, count, out);
    return;
  }
  // The projection's rows of B: all of it, or its part of a fused adapter's (Phi-3's qkv_proj).
  const ProjectionLora lora =
      t.layer >= 0 ? projection_lora(adapted, t.role, t.layer) : ProjectionLora{};
  if (lora.a < 0 || count == 0) {
    base_.read_range_f32(t, begin, count, out);
    return;
  }
  const TensorInfo& ta = adapted.tensors()[static_cast<size_t>(lora.a)];
  const TensorInfo& tb = adapted.tensors()[static_cast<size_t>(lora.b)];
  const float scale = lora.scale;
  const int64_t r = lora.rank;
  const int64_t in = t.shape[1], row0 = begin / in, rows = (begin + count - 1) / in - row0 + 1;
  // The whole rows the range touches (DoRA scales a row by its norm).
  rows_.resize(static_cast<size_t>(rows * in));
  base_.read_range_f32(t, row0 * in, rows * in, rows_.data());
  a_.resize(static_cast<size_t>(ta.numel));
  adapter_.read_range_f32(ta, 0, ta.numel, a_.data());
  b_.resize(static_cast<size_t>(rows * r));
  adapter_.read_range_f32(tb, (lora.b_first_row + row0) * r, rows * r, b_.data());
  // W[i, j] += s · Σ_k B[i, k] · A[k, j], the sum in fp32 in k order.
  const float* a = a_.data();
  const float* b = b_.data();
  float* w = rows_.data();
#pragma omp parallel for schedule(static) if (rows * in > (1 << 16))
  for (int64_t e = 0; e < rows * in; ++e) {
    const int64_t i = e / in, j = e % in;
    float delta = 0;
    for (int64_t k = 0; k < r; ++k) delta += b[i * r + k] * a[k * in + j];
    w[e] += delta * scale;
  }
  if (lora.magnitude >= 0) {  // DoRA: each row times m / ‖row‖ (PEFT's merge)
    std::vector<float> m(static_cast<size_t>(rows));
    adapter_.read_range_f32(adapted.tensors()[static_cast<size_t>(lora.magnitude)],
                            lora.b_first_row + row0, rows, m.data());
    for (int64_t i = 0; i < rows; ++i) {
      double squares = 0;
      for (int64_t j = 0; j < in; ++j)
        squares += static_cast<double>(w[i * in + j]) * w[i * in + j];
      const float factor = m[static_cast<size_t>(i)] / static_cast<float>(std::sqrt(squares));
      for (int64_t j = 0; j < in; ++j) w[i * in + j] *= factor;
    }
  }
  std::copy(w + (begin - row0 * in), w + (begin - row0 * in) + count, out);
}

std::string merged_model_tokenizer_dir(const std::string& base_dir,
                                       const std::string& adapter_dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(adapter_dir + "/tokenizer.json", ec) ? adapter_dir
                                                                               : base_dir;
}

std::string merged_model_generation_config_dir(const std::string& base_dir,
                                               const std::string& adapter_dir) {
  const std::string tokenizer_dir = merged_model_tokenizer_dir(base_dir, adapter_dir);
  std::error_code ec;
  return std::filesystem::is_regular_file(tokenizer_dir + "/generation_config.json", ec)
             ? tokenizer_dir
             : base_dir;
}

uint64_t write_merged_model_dir(const std::string& base_dir, const std::string& adapter_dir,
                                const std::string& dir, bool overwrite) {
  LoraMergedSource merged(base_dir, adapter_dir);
  auto values = [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
    merged.read_range_f32(t, begin, count, out);
  };
  const std::string tokenizer_dir = merged_model_tokenizer_dir(base_dir, adapter_dir);
  TokenizerFiles tokenizer = read_tokenizer_files(tokenizer_dir);  // none: empty
  if (tokenizer_dir != base_dir) {
    const TokenizerFiles base = read_tokenizer_files(base_dir);
    // merged_model_generation_config_dir's rule, on the files already read.
    const auto generation = base.files.find("generation_config.json");
    if (!tokenizer.files.count("generation_config.json") && generation != base.files.end())
      tokenizer.files.insert(*generation);
    if (!base.empty() && !same_tokenizer_apart_from_chat_templates(tokenizer, base))
      std::cerr << "warning: the tokenizer of adapter '" << adapter_dir << "' differs from base '"
                << base_dir << "''s beyond the chat template; the merged model gets the "
                << "adapter's\n";
  }
  return write_model_dir_streaming(dir, merged.config(), values, kDefaultShardLimitBytes, overwrite,
                                   tokenizer.empty() ? std::map<std::string, std::string>{}
                                                     : tokenizer_files_to_write(tokenizer));
}

}  // namespace zt
