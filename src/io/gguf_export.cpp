#include "io/gguf_export.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/fs_util.h"
#include "io/gguf_file.h"
#include "io/gguf_import.h"
#include "io/gguf_tokenizer.h"
#include "io/hf_import.h"
#include "io/model_dir.h"
#include "io/tokenizer_files.h"
#include "model/hf_checkpoint_tensors.h"
#include "model/layout.h"
#include "model/rope_freq_factors.h"
#include "util/bf16.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

// general.file_type values (llama.cpp's llama_ftype).
int32_t file_type(GgufOutType t) {
  switch (t) {
    case GgufOutType::kF32:
      return 0;
    case GgufOutType::kF16:
      return 1;
    case GgufOutType::kQ8_0:
      return 7;
    case GgufOutType::kBF16:
      return 32;
  }
  return 0;
}

GgmlType matrix_type(GgufOutType t, int64_t row_length) {
  switch (t) {
    case GgufOutType::kF32:
      return GgmlType::kF32;
    case GgufOutType::kF16:
      return GgmlType::kF16;
    case GgufOutType::kBF16:
      return GgmlType::kBF16;
    case GgufOutType::kQ8_0:
      return row_length % 32 == 0 ? GgmlType::kQ8_0 : GgmlType::kF16;
  }
  return GgmlType::kF32;
}

// llama.cpp's gemma3 reads the window and the global layers' base and linear scaling; it fixes the
// rest (gguf_import.cpp's read_gemma3) and has no soft caps: a Gemma 3 it would compute otherwise
// is not written.
void check_llama_cpp_gemma3(const ModelConfig& c, const std::string& dir, double scalar) {
  if (!c.is_gemma3()) return;
  ZT_CHECK(c.sliding_window_pattern == kLlamaCppGemma3Pattern &&
               c.local_rope_theta == kLlamaCppGemma3LocalRopeBase &&
               c.query_pre_attn_scalar == scalar && c.attn_logit_softcap == 0.0f &&
               c.final_logit_softcap == 0.0f,
           "export: model '" + dir + "' is a Gemma 3 whose sliding_window_pattern (" +
               std::to_string(c.sliding_window_pattern) + "), rope_local_base_freq (" +
               shortest_decimal(c.local_rope_theta) + "), query_pre_attn_scalar (" +
               shortest_decimal(c.query_pre_attn_scalar) +
               ") or soft caps llama.cpp's gemma3 would not compute (it takes every sixth layer "
               "global, a local base of 10000, a scalar of " +
               shortest_decimal(scalar) + " and no caps); export safetensors instead");
}

// llama.cpp runs yarn with the band's rotation counts of its context (32 and 1, which a file does
// not carry) and cos and sin times 0.1·ln(factor) + 1 (times rope.scaling.attn_factor, which
// zerotrain does not write: an import would read the product back rounded): a yarn it would
// compute otherwise is not written.
void check_llama_cpp_yarn(const ModelConfig& c, const std::string& dir) {
  const RopeScalingParams& r = c.rope_scaling;
  if (r.type != RopeScaling::kYarn || c.is_ministral3()) return;  // (mistral3_log_multiplier)
  const double llama_cpp_magnitude = yarn_attention_factor(r.factor);
  ZT_CHECK(r.beta_fast == 32.0 && r.beta_slow == 1.0 && r.attention_factor == llama_cpp_magnitude,
           "export: model '" + dir + "' has yarn rope scaling with beta_fast " +
               shortest_decimal(r.beta_fast) + ", beta_slow " + shortest_decimal(r.beta_slow) +
               " and attention_factor " + shortest_decimal(r.attention_factor) +
               "; llama.cpp runs yarn with 32, 1 and 0.1·ln(factor) + 1 (" +
               shortest_decimal(llama_cpp_magnitude) +
               ") unless told otherwise, and zerotrain writes that yarn only; export "
               "safetensors instead");
}

// llama.cpp's mistral3 (Ministral 3) reads yarn's band ends and its magnitude as
// get_mscale(factor, 1) / get_mscale(factor, yarn_log_multiplier): the multiplier that gives the
// model's attention_factor back exactly as an import reads its fp32 value (1 for Mistral AI's
// files). Its
// query scale divides by the yarn original length (n_ctx_orig_yarn); no window is written.
double mistral3_log_multiplier(const ModelConfig& c, const std::string& dir) {
  const RopeScalingParams& r = c.rope_scaling;
  const std::string what = "export: model '" + dir + "' is a Ministral 3 ";
  ZT_CHECK(c.sliding_window == 0, what +
                                      "with a sliding window, which zerotrain does not write "
                                      "to llama.cpp's mistral3; export safetensors instead");
  const int64_t divisor =
      r.type == RopeScaling::kYarn ? r.original_max_positions : c.max_position_embeddings;
  ZT_CHECK(c.llama4_scaling_beta == 0.0 || c.llama4_scaling_positions == divisor,
           what + "whose query scale divides by " + std::to_string(c.llama4_scaling_positions) +
               " positions, where llama.cpp's mistral3 divides by " + std::to_string(divisor) +
               "; export safetensors instead");
  if (r.type != RopeScaling::kYarn) return 0.0;
  const double ln = std::log(r.factor);
  const double wanted = (yarn_attention_factor(r.factor) / r.attention_factor - 1.0) / (0.1 * ln);
  const double stored = decimal_of_float(static_cast<float>(wanted));  // as an import reads it
  ZT_CHECK(
      wanted >= 0.0 && yarn_attention_factor(r.factor) / yarn_attention_factor(r.factor, stored) ==
                           r.attention_factor,
      what + "whose yarn attention_factor " + shortest_decimal(r.attention_factor) +
          " llama.cpp's mistral3 cannot be given exactly (its yarn_log_multiplier); export "
          "safetensors instead");
  return stored;
}

std::string architecture_of(const ModelConfig& c, const std::string& dir) {
  const std::string type = c.model_type();
  ZT_CHECK(type != "olmo3", "export: model '" + dir +
                                "' is an OLMo 3, which zerotrain does not write to GGUF yet; "
                                "export safetensors instead");
  if (type == "ministral3") {
    mistral3_log_multiplier(c, dir);  // (its checks)
    return "mistral3";
  }
  // llama.cpp reads GlmForCausalLM as its chatglm (other tensors). (Its glm4 reads no
  // rope_freqs.weight: llama3 scaling is refused by rope_freqs_to_write.)
  ZT_CHECK(type != "glm", "export: model '" + dir +
                              "' is a glm (GlmForCausalLM), which llama.cpp reads as its chatglm "
                              "and zerotrain does not write to GGUF; export safetensors instead");
  check_llama_cpp_yarn(c, dir);
  ZT_CHECK((type != "llama" && type != "granite") || !c.qkv_bias,
           "export: model '" + dir +
               "' is a llama or granite with attention biases, which is not written "
               "to GGUF yet");
  // llama.cpp's smollm3 takes no RoPE in every fourth layer, whatever the file says.
  ZT_CHECK(type != "smollm3" ||
               c.layers_without_rope == every_nth_layer(kSmolLM3NoRopeStep, c.num_layers),
           "export: model '" + dir + "' is a SmolLM3 whose layers without RoPE are " +
               nlohmann::json(c.layers_without_rope).dump() +
               "; llama.cpp's smollm3 takes none in every fourth layer (3, 7, ...) and RoPE in "
               "the others, so it is not written to GGUF (export safetensors instead)");
  // llama.cpp's gemma2 always caps, takes a window, and scales the scores by a rule of its own
  // (gguf_import.cpp's read_gemma2): a model it would compute otherwise is not written.
  const double llama_cpp_scalar = llama_cpp_gemma_query_scalar(c);
  check_llama_cpp_gemma3(c, dir, llama_cpp_scalar);
  ZT_CHECK(
      type != "gemma2" || (c.attn_logit_softcap > 0.0f && c.final_logit_softcap > 0.0f &&
                           c.sliding_window > 0 && c.query_pre_attn_scalar == llama_cpp_scalar),
      "export: model '" + dir + "' is a Gemma 2 whose query_pre_attn_scalar (" +
          std::to_string(c.query_pre_attn_scalar) +
          "), soft caps or window llama.cpp's gemma2 would not compute (it scales by head_dim, "
          "hidden/heads at 46 layers, " +
          std::to_string(llama_cpp_scalar) +
          ", and always caps and windows); export safetensors instead");
  // llama.cpp's olmo2 has no biases, heads of hidden / heads and an output tensor of its own.
  ZT_CHECK(type != "olmo2" || (!c.qkv_bias && c.explicit_head_dim == 0 && !c.tie_word_embeddings),
           "export: model '" + dir +
               "' is an OLMo 2 with attention biases, tied embeddings or a head_dim other than "
               "hidden_size / num_attention_heads, which llama.cpp's olmo2 does not compute; "
               "export safetensors instead");
  if (type == "gemma3_text") return "gemma3";
  return type == "mistral" ? "llama" : type;  // llama.cpp runs Mistral as llama
}

GgufValue u32(int64_t v) {
  return {GgufValueType::kUint32, GgufValueType::kUint32, v};
}
GgufValue f32(double v) {
  return {GgufValueType::kFloat32, GgufValueType::kUint32, v};
}
GgufValue text(const std::string& v) {
  return {GgufValueType::kString, GgufValueType::kUint32, v};
}

std::vector<std::pair<std::string, GgufValue>> model_metadata(const ModelConfig& c,
                                                              const std::string& arch,
                                                              const std::string& name,
                                                              GgufOutType type) {
  std::vector<std::pair<std::string, GgufValue>> m = {
      {"general.architecture", text(arch)},
      {"general.type", text("model")},
      {"general.name", text(name)},
      {"general.file_type", u32(file_type(type))},
      {arch + ".context_length", u32(c.max_position_embeddings)},
      {arch + ".embedding_length", u32(c.hidden_size)},
      {arch + ".block_count", u32(c.num_layers)},
      {arch + ".feed_forward_length", u32(c.intermediate_size)},
      {arch + ".attention.head_count", u32(c.num_heads)},
      {arch + ".attention.head_count_kv", u32(c.num_kv_heads)},
      {arch + ".attention.key_length", u32(c.head_dim())},
      {arch + ".attention.value_length", u32(c.head_dim())},
      {arch + ".rope.dimension_count", u32(c.rotary_dims())},
      {arch + ".rope.freq_base", f32(c.rope_theta)},
      {arch + ".attention.layer_norm_rms_epsilon", f32(c.rms_norm_eps)},
      {arch + ".vocab_size", u32(c.vocab_size)}};
  if (type == GgufOutType::kQ8_0) m.push_back({"general.quantization_version", u32(2)});
  // Mistral's window, under the key llama.cpp gives the architectures it applies one to; its
  // llama architecture ignores it (GgufExport::sliding_window_ignored), an import reads it back.
  // Phi-3's as llama.cpp's converter writes it, 0 for none (llama.cpp's phi3 applies it).
  if (c.sliding_window > 0 || arch == "phi3")
    m.push_back({arch + ".attention.sliding_window", u32(c.sliding_window)});
  // Phi-3's original length, and longrope's factor on cos and sin, as the converter writes them
  // (the factors travel as tensors).
  if (arch == "phi3")
    m.push_back({arch + ".rope.scaling.original_context_length",
                 u32(c.rope_scaling.original_max_positions)});
  if (c.rope_scaling.type == RopeScaling::kLongrope)
    m.push_back({arch + ".rope.scaling.attn_factor", f32(c.rope_scaling.attention_factor)});
  if (arch == "granite") {  // its four scalars, as llama.cpp's converter names them
    m.push_back({arch + ".embedding_scale", f32(c.embedding_multiplier)});
    m.push_back({arch + ".attention.scale", f32(c.attention_multiplier)});
    m.push_back({arch + ".residual_scale", f32(c.residual_multiplier)});
    m.push_back({arch + ".logit_scale", f32(c.logits_scaling)});
  }
  if (arch == "gemma2") {  // as llama.cpp's converter writes them
    m.push_back({arch + ".attn_logit_softcapping", f32(c.attn_logit_softcap)});
    m.push_back({arch + ".final_logit_softcapping", f32(c.final_logit_softcap)});
  }
  if (c.rope_scaling.type == RopeScaling::kLinear || c.rope_scaling.type == RopeScaling::kYarn) {
    const bool yarn = c.rope_scaling.type == RopeScaling::kYarn;
    m.push_back({arch + ".rope.scaling.type", text(yarn ? "yarn" : "linear")});
    m.push_back({arch + ".rope.scaling.factor", f32(c.rope_scaling.factor)});
    if (yarn)  // as llama.cpp's converter writes Qwen2's (check_llama_cpp_yarn)
      m.push_back({arch + ".rope.scaling.original_context_length",
                   u32(c.rope_scaling.original_max_positions)});
  }
  if (arch == "mistral3") {  // as its converter's Ministral3Model writes them
    if (c.rope_scaling.type == RopeScaling::kYarn) {
      m.push_back({arch + ".rope.scaling.yarn_beta_fast", f32(c.rope_scaling.beta_fast)});
      m.push_back({arch + ".rope.scaling.yarn_beta_slow", f32(c.rope_scaling.beta_slow)});
      m.push_back(
          {arch + ".rope.scaling.yarn_log_multiplier", f32(mistral3_log_multiplier(c, ""))});
    }
    m.push_back({arch + ".attention.temperature_scale", f32(c.llama4_scaling_beta)});
  }
  return m;
}

// Llama 3.1-style rope scaling as llama.cpp's converter writes it: rope_freqs.weight, only for
// llama and granite files (its GraniteModel is a LlamaModel), and only parameters an import reads
// back the same (none for a factor of 1, which scales nothing). Empty when there is nothing to
// write.
std::vector<float> rope_freqs_to_write(const ModelConfig& c, const std::string& arch,
                                       const std::string& dir) {
  if (c.rope_scaling.type != RopeScaling::kLlama3) return {};
  const std::string what = "export: model '" + dir + "' has llama3 rope scaling";
  ZT_CHECK(arch == "llama" || arch == "granite",
           what + " in a " + arch +
               " model; llama.cpp reads rope_freqs.weight for llama and granite files only "
               "(export safetensors instead)");
  std::vector<float> factors = llama3_rope_freq_factors(c);
  RopeScalingParams back;
  try {
    back = llama3_scaling_from_freq_factors(factors, c.rope_theta, c.head_dim(), what);
  } catch (const Error&) {
    back.type = RopeScaling::kLinear;  // differs from the model's: refused below
  }
  if (back.type == RopeScaling::kNone) return {};
  ZT_CHECK(back == c.rope_scaling,
           what +
               " whose parameters the factors GGUF stores do not give back (an import reads "
               "low_freq_factor 1 and needs two frequencies between the bands); export "
               "safetensors instead");
  return factors;
}

// The bytes of a stored tensor in `type`: its parts' rows one after another (Phi-3's fused
// tensors), in GGUF's order (llama's q and k permuted).
void tensor_bytes(ModelDirReader& model, const HfCheckpointTensor& t, GgmlType type, bool permuted,
                  float norm_offset, int64_t head_dim, std::vector<uint8_t>& bytes) {
  const int64_t row_length = t.shape.size() == 2 ? t.shape[1] : t.shape[0];
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const int64_t numel = rows * row_length;
  std::vector<float> values(static_cast<size_t>(numel));
  int64_t filled = 0;
  for (int part : t.parts) {
    const TensorInfo& info = model.layout().tensors()[static_cast<size_t>(part)];
    model.read_tensor_f32(info.name, values.data() + filled);
    filled += info.numel;
  }
  if (norm_offset != 0.0f)  // a Gemma norm: 1 + w (gguf_stored_norm_offset); else −0 stays −0
    for (float& v : values) v += norm_offset;
  if (permuted) {
    std::vector<float> hf = values;
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(values.data() + gguf_permuted_row(r, head_dim) * row_length,
                  hf.data() + r * row_length, static_cast<size_t>(row_length) * sizeof(float));
  }
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(bytes.data(), values.data(), bytes.size());
      return;
    case GgmlType::kQ8_0:
      quantize_q8_0(values.data(), numel, bytes.data());
      return;
    default:
      break;
  }
  for (int64_t i = 0; i < numel; ++i) {
    uint16_t h;
    if (type == GgmlType::kBF16) {
      h = float_to_bf16(values[static_cast<size_t>(i)]);
    } else {
      h = float_to_fp16(values[static_cast<size_t>(i)]);
      ZT_CHECK(std::isfinite(fp16_to_float(h)),
               "export: tensor '" + t.name + "' holds " +
                   std::to_string(values[static_cast<size_t>(i)]) +
                   ", beyond F16's range: export with --gguf-type bf16 or f32");
    }
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
}

}  // namespace

GgufOutType parse_gguf_out_type(const std::string& name) {
  if (name == "f32") return GgufOutType::kF32;
  if (name == "f16") return GgufOutType::kF16;
  if (name == "bf16") return GgufOutType::kBF16;
  if (name == "q8_0") return GgufOutType::kQ8_0;
  fail("export: unknown --gguf-type '" + name + "' (f32, f16, bf16, q8_0)");
}

std::string gguf_model_name(const std::string& model_dir) {
  std::error_code ec;
  // "." and "..", a trailing slash: the directory they name.
  fs::path dir = fs::absolute(fs::path(model_dir), ec).lexically_normal();
  if (ec) dir = fs::path(model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  if (fs::is_regular_file(dir / kImportRecordFile, ec)) {
    const nlohmann::json record = read_json_file((dir / kImportRecordFile).string());
    const auto name = record.find("name");
    if (name != record.end() && name->is_string() && !name->get<std::string>().empty())
      return name->get<std::string>();
  }
  if (dir.filename() == "final" && fs::is_regular_file(dir.parent_path() / "run.json", ec))
    return dir.parent_path().filename().string();
  return dir.filename().empty() ? "model" : dir.filename().string();
}

GgufExport export_gguf(const std::string& model_dir, const std::string& out_path, GgufOutType type,
                       bool overwrite, const std::string& name) {
  ZT_CHECK(!name.empty(), "export: the GGUF file's model name (--gguf-name) is empty");
  const Stopwatch clock;
  check_output_file_writable(out_path, overwrite);
  ModelDirReader model(model_dir);
  const ModelConfig& c = model.config();
  const std::string arch = architecture_of(c, model_dir);
  const TokenizerFiles tokenizer = read_tokenizer_files(model_dir);
  ZT_CHECK(tokenizer.files.count("tokenizer.json"),
           "export: model '" + model_dir +
               "' has no tokenizer.json beside it; a GGUF file "
               "carries the tokenizer llama.cpp runs with");
  auto metadata = model_metadata(c, arch, name, type);
  // llama.cpp's converter marks GLM-4's <|user|> as the end of a turn.
  for (auto& entry : gguf_tokenizer_metadata(tokenizer, c.vocab_size, model_dir,
                                             arch == "glm4" ? "<|user|>" : ""))
    metadata.push_back(std::move(entry));
  // The tensors as the family's checkpoint stores them (Phi-3's fused), then the rope factors.
  const std::vector<HfCheckpointTensor> stored = hf_checkpoint_tensors(model.layout());
  std::vector<GgufTensorToWrite> tensors;
  GgufExport result;
  result.sliding_window_ignored =
      arch == "phi3" || arch == "gemma2" || arch == "gemma3" ? 0 : c.sliding_window;
  for (const HfCheckpointTensor& t : stored) {
    const GgmlType ggml = t.shape.size() == 1 ? GgmlType::kF32 : matrix_type(type, t.shape[1]);
    tensors.push_back({gguf_tensor_name(t.name, gguf_post_attention_norm_follows_attention(c)),
                       {t.shape.rbegin(), t.shape.rend()},
                       ggml});
  }
  // Llama 3.1-style rope scaling travels as the factors llama.cpp's converter writes, and so
  // does Phi-3's longrope (long, then short, as the converter yields them).
  std::vector<std::pair<const char*, std::vector<float>>> rope_factors;
  if (std::vector<float> f = rope_freqs_to_write(c, arch, model_dir); !f.empty())
    rope_factors.emplace_back(kRopeFreqsTensor, std::move(f));
  if (c.rope_scaling.type == RopeScaling::kLongrope) {
    const RopeScalingParams& r = c.rope_scaling;
    rope_factors.emplace_back(kRopeFactorsLongTensor,
                              std::vector<float>(r.long_factor.begin(), r.long_factor.end()));
    rope_factors.emplace_back(kRopeFactorsShortTensor,
                              std::vector<float>(r.short_factor.begin(), r.short_factor.end()));
  }
  for (const auto& [name, values] : rope_factors)
    tensors.push_back({name, {static_cast<int64_t>(values.size())}, GgmlType::kF32});
  for (const GgufTensorToWrite& t : tensors)
    ++result.tensor_types[ggml_type_name(static_cast<uint32_t>(t.type))];
  check_room_to_write(dir_parent(out_path),
                      model.total_size() * (type == GgufOutType::kF32 ? 2 : 1), "export");
  write_gguf_file(out_path, metadata, tensors, [&](size_t i, std::vector<uint8_t>& bytes) {
    if (i >= stored.size()) {
      std::memcpy(bytes.data(), rope_factors[i - stored.size()].second.data(), bytes.size());
      return;
    }
    tensor_bytes(model, stored[i], tensors[i].type, gguf_permutes_rows(arch, stored[i].name),
                 gguf_stored_norm_offset(arch, stored[i].name), c.head_dim(), bytes);
  });
  result.path = out_path;
  result.bytes = fs::file_size(out_path);
  result.seconds = clock.seconds();
  return result;
}

}  // namespace zt
