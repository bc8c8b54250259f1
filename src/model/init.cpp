#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "util/error.h"
#include "util/lane_sum.h"
#include "util/splitmix64.h"

namespace zt {

namespace {

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Standard normal from a counter: Box-Muller on two 32-bit uniforms of one 64-bit hash.
float normal_at(uint64_t key, uint64_t index) {
  const uint64_t r = splitmix64(key ^ splitmix64(index));
  const double u1 = (static_cast<double>(r >> 32) + 1.0) / 4294967297.0;  // (0, 1]
  const double u2 = static_cast<double>(r & 0xffffffffull) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// Uniform on [-1, 1) from a counter.
float uniform_at(uint64_t key, uint64_t index) {
  const uint64_t r = splitmix64(key ^ splitmix64(index));
  return static_cast<float>(static_cast<double>(r >> 11) / 4503599627370496.0 - 1.0);
}

}  // namespace

void init_tensor_range(const ModelConfig& config, const TensorInfo& tensor, uint64_t seed,
                       int64_t begin, int64_t count, float* out) {
  ZT_CHECK(tensor.role != TensorRole::kLoraMagnitude,
           tensor.name + ": a DoRA magnitude starts from its base rows (init_start_range)");
  // LoRA (model/lora.h): B starts at zero, so the adapted model starts as the base; A as PEFT's
  // kaiming_uniform_(a=√5), which is U(−1/√in, 1/√in).
  if (tensor.role == TensorRole::kLoraB) {
    for (int64_t i = 0; i < count; ++i) out[i] = 0.0f;
    return;
  }
  if (tensor.role == TensorRole::kLoraA) {
    const uint64_t key = splitmix64(seed) ^ hash_name(tensor.name);
    const double bound = 1.0 / std::sqrt(static_cast<double>(tensor.shape[1]));
    for (int64_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(bound * uniform_at(key, static_cast<uint64_t>(begin + i)));
    return;
  }
  if (tensor.is_bias()) {  // nn.Linear biases start at zero, as Hugging Face initialises them
    for (int64_t i = 0; i < count; ++i) out[i] = 0.0f;
    return;
  }
  const bool is_norm = tensor.shape.size() == 1;
  if (is_norm) {  // a norm's scale starts at 1: Gemma's (1 + weight) at weight 0
    for (int64_t i = 0; i < count; ++i) out[i] = 1.0f - config.norm_weight_offset;
    return;
  }
  double std = 0.02;
  if (tensor.is_output_projection()) std /= std::sqrt(2.0 * static_cast<double>(config.num_layers));
  const uint64_t key = splitmix64(seed) ^ hash_name(tensor.name);
  const float scale = static_cast<float>(std);
#pragma omp parallel for schedule(static) if (count > (1 << 16))
  for (int64_t i = 0; i < count; ++i)
    out[i] = scale * normal_at(key, static_cast<uint64_t>(begin + i));
  // The padding token's embedding row starts at zero, as nn.Embedding(padding_idx=...) and
  // transformers' _init_weights leave it (a tied head shares that row).
  if (tensor.role == TensorRole::kEmbedding && config.padding_token >= 0) {
    const int64_t row_begin = config.padding_token * tensor.shape[1];
    const int64_t zero_begin = std::max(begin, row_begin);
    const int64_t zero_end = std::min(begin + count, row_begin + tensor.shape[1]);
    for (int64_t i = zero_begin; i < zero_end; ++i) out[i - begin] = 0.0f;
  }
}

void init_start_range(const ParamLayout& layout, const TensorInfo& tensor, uint64_t seed,
                      int64_t begin, int64_t count, const TensorRangeReader& read_base,
                      float* out) {
  if (tensor.role != TensorRole::kLoraMagnitude) {
    init_tensor_range(layout.config(), tensor, seed, begin, count, out);
    return;
  }
  const auto target = static_cast<LoraTarget>(tensor.lora_target);
  const std::vector<int64_t> rows = lora_output_rows(layout.config(), target);
  const std::vector<TensorRole> roles = lora_adapted_roles(target);
  const int64_t in = lora_projection_shape(layout.config(), target)[1];
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t o = begin; o < begin + count; ++o) {
    size_t part = 0;
    int64_t first = 0;  // the first of the part's rows
    while (o >= first + rows[part]) first += rows[part++];
    read_base(layout.tensor(roles[part], tensor.layer), (o - first) * in, in, row.data());
    // Summed as the CPU backend's dora_weight_norms sums a row with B zero: the forward's norm
    // of an unchanged row is this value, bit for bit.
    const double squares = lane_sum(in, [&](int64_t k) {
      return static_cast<double>(row[static_cast<size_t>(k)]) * row[static_cast<size_t>(k)];
    });
    out[o - begin] = static_cast<float>(std::sqrt(squares));
  }
}

}  // namespace zt
