#include "io/meta_import.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
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

// The object params.json keeps the model's keys in: the file itself, or its "model" object where
// it nests them there (transformers' converter reads them from there).
const nlohmann::json& meta_model_keys(const nlohmann::json& params_json) {
  return params_json.is_object() && params_json.contains("model") &&
                 params_json["model"].is_object()
             ? params_json["model"]
             : params_json;
}

}  // namespace

bool is_meta_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / kMetaParamsFile, ec) &&
         fs::is_regular_file(d / kMetaWeightsFile, ec) && !fs::exists(d / "config.json", ec);
}

nlohmann::json meta_hf_config(const nlohmann::json& params_json, const std::string& llama_version,
                              int64_t stored_vocab, const std::string& source,
                              std::vector<std::string>& unknown_keys) {
  ZT_CHECK(params_json.is_object(), source + ": expected a JSON object");
  const nlohmann::json& params = meta_model_keys(params_json);
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
           source + ": ffn_dim_multiplier must lie in (0, 64), got " + quoted_json(multiplier));
  // Meta's FeedForward (and transformers' compute_intermediate_size): int(2 · 4·dim / 3), times
  // ffn_dim_multiplier truncated, rounded up to a multiple of multiple_of.
  const auto hidden = static_cast<int64_t>(multiplier * static_cast<double>(8 * dim / 3));
  const int64_t intermediate = multiple_of * ((hidden + multiple_of - 1) / multiple_of);
  const bool has_scaled =
      params.contains("use_scaled_rope") && !params["use_scaled_rope"].is_null();
  ZT_CHECK(!has_scaled || params["use_scaled_rope"].is_boolean(),
           source + ": key 'use_scaled_rope' must be true or false, got " +
               quoted_json(params["use_scaled_rope"]));
  const bool scaled = has_scaled && params["use_scaled_rope"].get<bool>();
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

// A Meta checkpoint's weight files, consolidated.00.pth to consolidated.NN.pth: one, or the
// model-parallel shards of a larger model (Llama 2 13B: 2, 70B: 8). Each shard holds a slice of
// every matrix, as Meta's fairscale layers cut them: ColumnParallelLinear by rows (wq, wk, wv,
// w1, w3, output), RowParallelLinear by columns (wo, w2), the embedding by columns in Llama 1 and
// 2 (ParallelEmbedding) and by rows in Llama 3 (VocabParallelEmbedding); and a copy of every
// norm, read from the first (as transformers' converter joins them; the copies must agree).
class MetaShards {
 public:
  enum class Split { kWhole, kRows, kColumns };
  explicit MetaShards(const std::string& dir);
  size_t count() const { return files_.size(); }
  const WeightFile& file(size_t i) const { return *files_.at(i); }
  // How Meta's layers cut the tensor `name` (Meta's) among shards at `llama_version`.
  Split split_of(const std::string& name, const std::string& llama_version) const;
  // Every shard holds `name` in a dtype import reads, its `split` slice of `shape` (the whole
  // tensor); refused naming the shard otherwise. Returns whether its values are rounded to bf16.
  bool check(const std::string& name, const std::vector<int64_t>& shape, Split split);
  // Row `row` of the whole [rows, cols] tensor `name`, joined from the shards.
  void read_row(const std::string& name, int64_t row, int64_t rows, int64_t cols, float* out) const;
  // The shard that holds element [row, col] of the whole [rows, cols] tensor `name`.
  const WeightFile& holder(const std::string& name, int64_t row, int64_t rows, int64_t col,
                           int64_t cols) const;

 private:
  std::vector<std::unique_ptr<WeightFile>> files_;
  std::map<std::string, Split> splits_;
};

MetaShards::MetaShards(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> numbered;  // consolidated.NN.pth by NN
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("consolidated.") || !name.ends_with(".pth")) continue;
    const std::string digits = name.substr(13, name.size() - 17);
    ZT_CHECK(
        !digits.empty() && digits.size() <= 4 &&
            std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }),
        "import: '" + entry.path().string() +
            "' is not a shard name Meta writes (consolidated.NN.pth)");
    numbered.emplace_back(std::stoll(digits), name);
  }
  std::sort(numbered.begin(), numbered.end());
  ZT_CHECK(numbered.size() <= 128, "import: '" + dir + "' holds " +
                                       std::to_string(numbered.size()) +
                                       " consolidated.*.pth files; a Meta checkpoint has at most "
                                       "128");
  for (size_t i = 0; i < numbered.size(); ++i) {
    char expected[48];
    std::snprintf(expected, sizeof expected, "consolidated.%02zu.pth", i);
    const std::string& name = numbered[i].second;
    ZT_CHECK(name == expected, "import: '" + (fs::path(dir) / name).string() + "' is not " +
                                   expected +
                                   ": the model-parallel shards of a Meta checkpoint are "
                                   "consolidated.00.pth onwards, numbered without a gap");
    files_.push_back(std::make_unique<WeightFile>((fs::path(dir) / name).string()));
  }
}

MetaShards::Split MetaShards::split_of(const std::string& name,
                                       const std::string& llama_version) const {
  if (files_.size() == 1) return Split::kWhole;
  if (name == "tok_embeddings.weight")
    return llama_version == "1" || llama_version == "2" ? Split::kColumns : Split::kRows;
  if (name.ends_with("attention.wo.weight") || name.ends_with("feed_forward.w2.weight"))
    return Split::kColumns;
  if (name.ends_with("norm.weight")) return Split::kWhole;
  return Split::kRows;
}

bool MetaShards::check(const std::string& name, const std::vector<int64_t>& shape, Split split) {
  const auto n = static_cast<int64_t>(files_.size());
  std::vector<int64_t> slice = shape;  // what each shard holds
  const char* how = "";
  if (split != Split::kWhole) {
    const size_t dim = split == Split::kRows ? 0 : 1;
    ZT_CHECK(shape[dim] % n == 0, "import: tensor '" + name + "' of shape " +
                                      nlohmann::json(shape).dump() + " (params.json's) cannot be " +
                                      "cut into " + std::to_string(n) +
                                      " model-parallel shards as Meta's layers cut it");
    slice[dim] = shape[dim] / n;
    how = dim == 0 ? ", its rows cut among the model-parallel shards as Meta's layers cut them"
                   : ", its columns cut among the model-parallel shards as Meta's layers cut them";
  }
  bool rounded = false;
  std::vector<float> first, copy;
  for (const auto& file : files_) {
    ZT_CHECK(file->has(name), "import: '" + file->path() + "' has no tensor '" + name +
                                  "', which the model of params.json needs");
    rounded |= check_importable_tensor(
        *file, name, slice,
        std::string("params.json (as transformers' converter reads it") + how + ")");
    if (split == Split::kWhole && n > 1) {  // a norm's copies, which must be the same
      std::vector<float>& values = first.empty() ? first : copy;
      values.resize(static_cast<size_t>(safetensors_numel(slice)));
      file->read_range_f32(name, 0, static_cast<int64_t>(values.size()), values.data());
      ZT_CHECK(&values == &first ||
                   std::equal(first.begin(), first.end(), copy.begin(),
                              [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }),
               "import: '" + file->path() + "': tensor '" + name +
                   "' is not the copy consolidated.00.pth holds (each shard holds the same norm)");
    }
  }
  splits_[name] = split;
  return rounded;
}

void MetaShards::read_row(const std::string& name, int64_t row, int64_t rows, int64_t cols,
                          float* out) const {
  const auto n = static_cast<int64_t>(files_.size());
  switch (splits_.at(name)) {
    case Split::kWhole:
      return files_.front()->read_range_f32(name, row * cols, cols, out);
    case Split::kRows: {
      const int64_t per = rows / n;
      return files_[static_cast<size_t>(row / per)]->read_range_f32(name, (row % per) * cols, cols,
                                                                    out);
    }
    case Split::kColumns:
      for (int64_t s = 0; s < n; ++s)
        files_[static_cast<size_t>(s)]->read_range_f32(name, row * (cols / n), cols / n,
                                                       out + s * (cols / n));
      return;
  }
}

const WeightFile& MetaShards::holder(const std::string& name, int64_t row, int64_t rows,
                                     int64_t col, int64_t cols) const {
  const auto n = static_cast<int64_t>(files_.size());
  const auto it = splits_.find(name);
  if (it == splits_.end() || it->second == Split::kWhole) return *files_.front();
  return *files_[static_cast<size_t>(it->second == Split::kRows ? row / (rows / n)
                                                                : col / (cols / n))];
}

// Every tensor of the layout in the shards with its shape and a readable dtype; RoPE's stored
// frequencies and a tied model's head read past (into result.ignored_tensors), anything else
// refused.
void check_meta_tensors(MetaShards& shards, const ParamLayout& layout,
                        const std::string& llama_version, MetaImportResult& result) {
  std::set<std::string> expected;
  for (const TensorInfo& t : layout.tensors()) {
    const std::string name = meta_tensor_name(t.name);
    expected.insert(name);
    if (shards.check(name, t.shape, shards.split_of(name, llama_version))) ++result.rounded_tensors;
  }
  for (size_t i = 0; i < shards.count(); ++i) {
    for (const StoredTensor& s : shards.file(i).tensors()) {
      if (expected.count(s.name)) continue;
      if (s.name == "rope.freqs") {  // Llama 1 and 2 keep RoPE's frequencies, computed here
        if (i == 0) result.ignored_tensors.push_back(s.name);
      } else if (s.name == "output.weight" && result.config.tie_word_embeddings) {
        if (i == 0 && shards.count() == 1)
          result.ignored_tensors.push_back(
              tied_head_note(shards.file(0), s.name, shards.file(0), "tok_embeddings.weight",
                             layout.tensor(TensorRole::kEmbedding).shape));
        else if (i == 0)
          result.ignored_tensors.push_back(s.name + " (tie_word_embeddings: read past)");
      } else {
        fail("import: '" + shards.file(i).path() + "' has tensor '" + s.name +
             "', which the model of params.json does not have");
      }
    }
  }
}

// tok_embeddings' rows, for a params.json whose vocab_size is -1 (Llama 1 and 2): those of the
// first shard, times the shards where Meta's layers cut its rows (Llama 3's).
int64_t stored_vocab(const MetaShards& shards, const std::string& llama_version) {
  for (const StoredTensor& s : shards.file(0).tensors()) {
    if (s.name != "tok_embeddings.weight" || s.shape.size() != 2) continue;
    const bool by_rows = shards.split_of(s.name, llama_version) == MetaShards::Split::kRows;
    return by_rows ? s.shape[0] * static_cast<int64_t>(shards.count()) : s.shape[0];
  }
  return -1;
}

// The values of layout tensor `t`, elements [begin, begin + count) (whole rows), joined from the
// shards; Meta's wq and wk rotate adjacent pairs, so each Hugging Face row of theirs is read from
// where transformers' converter takes it (the inverse of llama.cpp's permutation).
void read_meta_values(const MetaShards& shards, const TensorInfo& t, int64_t head_dim,
                      int64_t begin, int64_t count, float* out) {
  const std::string name = meta_tensor_name(t.name);
  const bool permuted = t.name.ends_with("q_proj.weight") || t.name.ends_with("k_proj.weight");
  if (t.shape.size() == 1 || (!permuted && shards.count() == 1)) {
    shards.file(0).read_range_f32(name, begin, count, out);
  } else {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    for (int64_t r = 0; r < count / cols; ++r) {
      const int64_t row = begin / cols + r;
      shards.read_row(name, permuted ? gguf_permuted_row(row, head_dim) : row, rows, cols,
                      out + r * cols);
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    if (std::isfinite(round_to_bf16(out[i]))) continue;
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : count, row = (begin + i) / cols;
    const int64_t stored_row = permuted ? gguf_permuted_row(row, head_dim) : row;
    const int64_t col = (begin + i) % cols;
    fail("import: '" + shards.holder(name, stored_row, t.shape[0], col, cols).path() +
         "': tensor '" + name + "' holds a value that is not finite in bf16, at " +
         (t.shape.size() == 2 ? "[" + std::to_string(stored_row) + ", " + std::to_string(col) +
                                    "] of the whole tensor"
                              : "element " + std::to_string(begin + i)));
  }
}

// The layers the first weight file holds (its distinct layers.N. prefixes).
int64_t stored_layers(const MetaShards& shards) {
  std::set<std::string> layers;
  for (const StoredTensor& s : shards.file(0).tensors())
    if (s.name.starts_with("layers.")) layers.insert(s.name.substr(0, s.name.find('.', 7)));
  return static_cast<int64_t>(layers.size());
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
  const std::string params_path = (fs::path(meta_dir) / kMetaParamsFile).string();
  const nlohmann::json params = read_json_file(params_path);
  MetaShards shards(meta_dir);
  // Checked before the layout is built, so that a params.json naming millions of layers costs
  // nothing; and a vocab_size of -1 needs the embedding to tell it.
  const nlohmann::json& model = meta_model_keys(params);
  const int64_t layers = stored_layers(shards);
  ZT_CHECK(!model.contains("n_layers") || !model["n_layers"].is_number_integer() ||
               model["n_layers"].get<int64_t>() == layers,
           "import: " + params_path + ": n_layers is " + quoted_json(model.value("n_layers", 0)) +
               ", but '" + shards.file(0).path() + "' holds " + std::to_string(layers) +
               " (distinct layers.N. names)");
  const int64_t vocab_rows = stored_vocab(shards, llama_version);
  ZT_CHECK(
      vocab_rows > 0 || (model.contains("vocab_size") && model["vocab_size"].is_number_integer() &&
                         model["vocab_size"].get<int64_t>() > 0),
      "import: '" + shards.file(0).path() +
          "' has no tok_embeddings.weight to tell the vocabulary size, which " + params_path +
          " leaves out or at -1");
  MetaImportResult result;
  for (size_t i = 0; i < shards.count(); ++i) result.weights_files.push_back(shards.file(i).path());
  const nlohmann::json hf =
      meta_hf_config(params, llama_version, vocab_rows, params_path, result.unknown_keys);
  ZT_CHECK(unknown == UnknownConfigKeys::kAccept || result.unknown_keys.empty(),
           "import: " + params_path + ": key '" +
               (result.unknown_keys.empty() ? "" : result.unknown_keys[0]) +
               "' is not one zerotrain reads or knows (--strict-config refuses it)");
  result.config = ModelConfig::from_hf_json(
      hf, params_path + " (as transformers' converter reads it for Llama " + llama_version + ")");
  const auto n = static_cast<int64_t>(shards.count());
  ZT_CHECK(result.config.num_heads % n == 0 && result.config.num_kv_heads % n == 0,
           "import: '" + meta_dir + "' holds " + std::to_string(n) +
               " model-parallel shards, which do not divide " + params_path + "'s " +
               std::to_string(result.config.num_heads) + " heads and " +
               std::to_string(result.config.num_kv_heads) +
               " key/value heads (Meta gives each shard whole heads)");
  const ParamLayout layout(result.config);
  check_meta_tensors(shards, layout, llama_version, result);

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
                                            {"source_files", result.weights_files},
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
        read_meta_values(shards, t, head_dim, begin, count, out);
      },
      shard_limit_bytes, overwrite, files);
  return result;
}

}  // namespace zt
