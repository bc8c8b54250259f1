#include "io/meta_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "io/fs_util.h"
#include "io/gguf_import.h"
#include "io/hf_import.h"
#include "io/model_dir.h"
#include "io/tokenizer_files.h"
#include "io/weight_file.h"
#include "model/layout.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/json_text.h"

namespace zt {

namespace fs = std::filesystem;

namespace {

bool is_llama3(const std::string& version) {
  return version == "3" || version == "3.1" || version == "3.2" || version == "Guard-3";
}
// The versions whose RoPE transformers' converter scales as llama3 does.
bool scales_rope(const std::string& version) {
  return version == "3.1" || version == "3.2" || version == "Guard-3";
}
// transformers' CONTEXT_LENGTH_FOR_VERSION.
int64_t context_length(const std::string& version) {
  if (version == "1") return 2048;
  if (version == "2") return 4096;
  if (version == "3") return 8192;
  return 131072;
}

// Meta's name of a plain Llama's tensor, given by its Hugging Face name.
std::string meta_tensor_name(const std::string& hf_name) {
  static const std::pair<const char*, const char*> kModel[] = {
      {"model.embed_tokens.weight", "tok_embeddings.weight"},
      {"model.norm.weight", "norm.weight"},
      {"lm_head.weight", "output.weight"}};
  for (const auto& [hf, meta] : kModel)
    if (hf_name == hf) return meta;
  static const std::pair<const char*, const char*> kLayer[] = {
      {"self_attn.q_proj.weight", "attention.wq.weight"},
      {"self_attn.k_proj.weight", "attention.wk.weight"},
      {"self_attn.v_proj.weight", "attention.wv.weight"},
      {"self_attn.o_proj.weight", "attention.wo.weight"},
      {"mlp.gate_proj.weight", "feed_forward.w1.weight"},
      {"mlp.down_proj.weight", "feed_forward.w2.weight"},
      {"mlp.up_proj.weight", "feed_forward.w3.weight"},
      {"input_layernorm.weight", "attention_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"}};
  const std::string prefix = "model.layers.";
  const size_t dot = hf_name.find('.', prefix.size());
  if (hf_name.starts_with(prefix) && dot != std::string::npos) {
    const std::string rest = hf_name.substr(dot + 1);
    for (const auto& [hf, meta] : kLayer)
      if (rest == hf)
        return "layers." + hf_name.substr(prefix.size(), dot - prefix.size()) + "." + meta;
  }
  fail("import: a Meta checkpoint has no name for the tensor '" + hf_name + "'");
}

// The params.json keys the import reads, and those that only size Meta's inference caches.
const std::set<std::string> kReadKeys = {
    "dim",         "n_layers",           "n_heads",  "n_kv_heads", "vocab_size",
    "multiple_of", "ffn_dim_multiplier", "norm_eps", "rope_theta", "use_scaled_rope"};
const std::set<std::string> kInertKeys = {"max_batch_size", "max_seq_len"};
// Keys that make another model (quantized weights, LoRA layers, a vision model, experts), unless
// null or Meta's -1 for "none".
const std::set<std::string> kRefusedKeys = {"quantization_args",
                                            "lora_args",
                                            "vision_chunk_size",
                                            "vision_max_num_chunks",
                                            "vision_num_cross_attention_layers",
                                            "vision_model",
                                            "moe_args"};

}  // namespace

bool is_meta_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / kMetaParamsFile, ec) &&
         fs::is_regular_file(d / kMetaWeightsFile, ec) && !fs::exists(d / "config.json", ec);
}

nlohmann::json meta_hf_config(const nlohmann::json& file, const std::string& llama_version,
                              int64_t stored_vocab, const std::string& source,
                              std::vector<std::string>& unknown_keys) {
  ZT_CHECK(file.is_object(), source + ": expected a JSON object");
  // transformers' converter reads the keys under "model" where a file nests them there.
  const nlohmann::json& params =
      file.contains("model") && file["model"].is_object() ? file["model"] : file;
  for (const auto& [key, value] : params.items()) {
    if (kReadKeys.count(key) || kInertKeys.count(key)) continue;
    if (kRefusedKeys.count(key)) {
      ZT_CHECK(value.is_null() || value == -1,
               source + ": key '" + key + "' is " + quoted_json(value) +
                   "; zerotrain imports Meta's plain text Llama (no quantized weights, LoRA "
                   "layers, vision model or experts)");
      continue;
    }
    unknown_keys.push_back(key);
  }
  auto integer = [&](const char* key) {
    ZT_CHECK(params.contains(key) && params[key].is_number_integer(),
             source + ": key '" + key + "' must be an integer" +
                 (params.contains(key) ? ", got " + quoted_json(params[key]) : " (missing)"));
    return params[key].get<int64_t>();
  };
  auto number = [&](const char* key, double fallback) {
    if (!params.contains(key) || params[key].is_null()) return fallback;
    ZT_CHECK(params[key].is_number(),
             source + ": key '" + key + "' must be a number, got " + quoted_json(params[key]));
    return params[key].get<double>();
  };
  const int64_t dim = integer("dim"), heads = integer("n_heads"), layers = integer("n_layers");
  const bool has_kv = params.contains("n_kv_heads") && !params["n_kv_heads"].is_null();
  const int64_t kv_heads = has_kv ? integer("n_kv_heads") : heads;
  const bool has_vocab = params.contains("vocab_size") && !params["vocab_size"].is_null();
  const int64_t vocab =
      has_vocab && integer("vocab_size") > 0 ? integer("vocab_size") : stored_vocab;
  const bool has_multiple = params.contains("multiple_of") && !params["multiple_of"].is_null();
  const int64_t multiple_of = has_multiple ? integer("multiple_of") : 256;
  ZT_CHECK(
      dim > 0 && dim <= (int64_t{1} << 24) && multiple_of > 0 && multiple_of <= (int64_t{1} << 24),
      source + ": dim and multiple_of must be positive (at most 2^24)");
  ZT_CHECK(params.contains("norm_eps"), source + ": missing key 'norm_eps'");
  const double multiplier = number("ffn_dim_multiplier", 1.0);
  ZT_CHECK(multiplier > 0 && multiplier < 64,
           source + ": ffn_dim_multiplier must lie in (0, 64), got " + std::to_string(multiplier));
  // Meta's FeedForward (and transformers' compute_intermediate_size): int(2 · 4·dim / 3), times
  // ffn_dim_multiplier truncated, rounded up to a multiple of multiple_of.
  const auto hidden = static_cast<int64_t>(multiplier * static_cast<double>(8 * dim / 3));
  const int64_t intermediate = multiple_of * ((hidden + multiple_of - 1) / multiple_of);
  const bool scaled = params.contains("use_scaled_rope") && params["use_scaled_rope"] == true;
  ZT_CHECK(scaled == scales_rope(llama_version),
           source +
               (scaled ? ": use_scaled_rope is true, which Llama 3.1, 3.2 and Guard-3 "
                         "have; --llama-version is "
                       : ": no use_scaled_rope, which Llama 3.1, 3.2 and Guard-3 set; "
                         "--llama-version is ") +
               llama_version +
               " (transformers' converter scales RoPE by the version: say the "
               "model's own)");
  const double theta = number("rope_theta", 10000.0);
  nlohmann::json hf = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", dim},
      {"intermediate_size", intermediate},
      {"num_attention_heads", heads},
      {"num_hidden_layers", layers},
      {"num_key_value_heads", kv_heads},
      {"vocab_size", vocab},
      {"rms_norm_eps", number("norm_eps", 0.0)},
      {"rope_theta", theta},
      {"max_position_embeddings",
       theta > 10000.0 && !is_llama3(llama_version) ? 16384 : context_length(llama_version)},
      {"tie_word_embeddings", llama_version == "3.2"},
      {"hidden_act", "silu"},
      {"bos_token_id", is_llama3(llama_version) ? 128000 : 1},
      {"eos_token_id", is_llama3(llama_version) ? 128001 : 2}};
  if (scaled)
    hf["rope_scaling"] = {{"factor", llama_version == "3.2" ? 32.0 : 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192},
                          {"rope_type", "llama3"}};
  return hf;
}

namespace {

// Every tensor of the layout in the file with its shape and a readable dtype; RoPE's stored
// frequencies and a tied model's head read past (into result.ignored_tensors), anything else
// refused.
void check_meta_tensors(const WeightFile& weights, const ParamLayout& layout,
                        MetaImportResult& result) {
  std::set<std::string> expected;
  for (const TensorInfo& t : layout.tensors()) {
    const std::string name = meta_tensor_name(t.name);
    expected.insert(name);
    const std::vector<StoredTensor>& all = weights.tensors();
    ZT_CHECK(
        std::any_of(all.begin(), all.end(), [&](const StoredTensor& s) { return s.name == name; }),
        "import: '" + weights.path() + "' has no tensor '" + name +
            "', which the model of params.json needs");
    if (check_importable_tensor(weights, name, t.shape,
                                "params.json (as transformers' converter reads it)"))
      ++result.rounded_tensors;
  }
  for (const StoredTensor& s : weights.tensors()) {
    if (expected.count(s.name)) continue;
    if (s.name == "rope.freqs") {  // Llama 1 and 2 keep RoPE's frequencies, computed again here
      result.ignored_tensors.push_back(s.name);
    } else if (s.name == "output.weight" && result.config.tie_word_embeddings) {
      result.ignored_tensors.push_back(tied_head_note(weights, s.name, weights,
                                                      "tok_embeddings.weight",
                                                      layout.tensor(TensorRole::kEmbedding).shape));
    } else {
      fail("import: '" + weights.path() + "' has tensor '" + s.name +
           "', which the model of params.json does not have");
    }
  }
}

}  // namespace

MetaImportResult import_meta_model(const std::string& meta_dir, const std::string& out_dir,
                                   uint64_t shard_limit_bytes, bool overwrite,
                                   const std::string& llama_version,
                                   const std::string& tokenizer_dir, UnknownConfigKeys unknown) {
  ZT_CHECK(!llama_version.empty(),
           "import: '" + meta_dir +
               "' is a Meta checkpoint (params.json, consolidated.00.pth): say which Llama it is "
               "with --llama-version 1, 2, 3, 3.1, 3.2 or Guard-3, as transformers' "
               "convert_llama_weights_to_hf.py is told (params.json gives neither the context "
               "length, nor Llama 3.1's and 3.2's RoPE scaling, nor 3.2's tied head)");
  ZT_CHECK(
      std::find(kMetaLlamaVersions.begin(), kMetaLlamaVersions.end(), llama_version) !=
          kMetaLlamaVersions.end(),
      "import: --llama-version must be 1, 2, 3, 3.1, 3.2 or Guard-3, got '" + llama_version + "'");
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(meta_dir, ec)) {
    const std::string name = entry.path().filename().string();
    ZT_CHECK(
        !name.starts_with("consolidated.") || !name.ends_with(".pth") || name == kMetaWeightsFile,
        "import: '" + entry.path().string() +
            "' is a model-parallel shard of a Meta checkpoint; zerotrain reads a single "
            "consolidated.00.pth (Llama 2 7B, Llama 3 and 3.1 8B, Llama 3.2): join the "
            "shards with transformers' convert_llama_weights_to_hf.py and import its output");
  }
  const std::string params_path = (fs::path(meta_dir) / kMetaParamsFile).string();
  const WeightFile weights((fs::path(meta_dir) / kMetaWeightsFile).string());
  const nlohmann::json params = read_json_file(params_path);
  int64_t stored_vocab = -1;
  for (const StoredTensor& s : weights.tensors())
    if (s.name == "tok_embeddings.weight" && s.shape.size() == 2) stored_vocab = s.shape[0];
  MetaImportResult result;
  result.weights_file = weights.path();
  const nlohmann::json hf =
      meta_hf_config(params, llama_version, stored_vocab, params_path, result.unknown_keys);
  ZT_CHECK(unknown == UnknownConfigKeys::kAccept || result.unknown_keys.empty(),
           "import: " + params_path + ": key '" +
               (result.unknown_keys.empty() ? "" : result.unknown_keys[0]) +
               "' is not one zerotrain reads or knows (--strict-config refuses it)");
  result.config = ModelConfig::from_hf_json(
      hf, params_path + " (as transformers' converter reads it for Llama " + llama_version + ")");
  const ParamLayout layout(result.config);
  check_meta_tensors(weights, layout, result);

  TokenizerFiles tokenizer;
  if (!tokenizer_dir.empty()) {
    tokenizer = read_tokenizer_files(tokenizer_dir);
    ZT_CHECK(tokenizer.files.count("tokenizer.json"),
             "import: --tokenizer '" + tokenizer_dir + "' holds no tokenizer.json");
  }
  std::map<std::string, std::string> files = tokenizer_files_to_write(tokenizer);
  for (const auto& [name, text] : files) result.tokenizer_files.push_back(name);
  files[kImportRecordFile] = nlohmann::json{{"meta_dir", fs::absolute(meta_dir).string()},
                                            {"llama_version", llama_version},
                                            {"source_files", {result.weights_file}},
                                            {"hf_config", hf},
                                            {"unknown_config_keys", result.unknown_keys},
                                            {"ignored_tensors", result.ignored_tensors},
                                            {"rounded_tensors", result.rounded_tensors},
                                            {"tokenizer_files", result.tokenizer_files}}
                                 .dump(2) +
                             "\n";
  const int64_t head_dim = result.config.head_dim();
  result.bytes_written = write_model_dir_streaming(
      out_dir, result.config,
      [&](const TensorInfo& t, int64_t begin, int64_t count, float* out) {
        const std::string name = meta_tensor_name(t.name);
        // Meta's wq and wk rotate adjacent pairs: each Hugging Face row is read from where
        // transformers' converter takes it (the inverse of llama.cpp's permutation).
        if (t.name.ends_with("q_proj.weight") || t.name.ends_with("k_proj.weight")) {
          const int64_t cols = t.shape[1];
          for (int64_t r = 0; r < count / cols; ++r)
            weights.read_range_f32(name, gguf_permuted_row(begin / cols + r, head_dim) * cols, cols,
                                   out + r * cols);
        } else {
          weights.read_range_f32(name, begin, count, out);
        }
        for (int64_t i = 0; i < count; ++i)
          ZT_CHECK(std::isfinite(round_to_bf16(out[i])),
                   "import: '" + weights.path() + "': tensor '" + name +
                       "' holds a value that is not finite in bf16 (element " +
                       std::to_string(begin + i) + " of its Hugging Face order)");
      },
      shard_limit_bytes, overwrite, files);
  return result;
}

}  // namespace zt
