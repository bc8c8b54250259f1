// zerotrain info: summarises a model directory, a token dataset or a training checkpoint.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "app/environment_report.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_files.h"
#include "io/data_loader.h"
#include "io/fs_util.h"
#include "io/meta_import.h"
#include "io/model_dir.h"
#include "io/peft_adapter_file.h"
#include "io/token_dataset.h"
#include "io/tokenizer_files.h"
#include "io/weight_file.h"
#include "model/lora.h"
#include "util/error.h"
#include "util/sha256.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

// 5933109248 -> "5,933,109,248".
std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// 5933109248 -> "5.93 B", 1.2e6 -> "1.20 M".
std::string short_count(uint64_t n) {
  const double v = static_cast<double>(n);
  char buf[32];
  if (v >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f B", v / 1e9);
  } else if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.2f M", v / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f K", v / 1e3);
  }
  return buf;
}

// Reads every tensor in bounded chunks so NaN/Inf values and unreadable data are reported.
// Returns each one's SHA-256 of its values as little-endian fp32 (TensorValues' digest: a bf16
// model imported from bf16 weights has the digests `info --verify` gives for those weights).
std::map<std::string, std::string> verify_model_values(ModelDirReader& reader) {
  constexpr int64_t kChunk = int64_t{4} << 20;
  std::vector<float> buf(kChunk);
  std::map<std::string, std::string> digests;
  for (const auto& t : reader.layout().tensors()) {
    Sha256 sha;
    for (int64_t off = 0; off < t.numel; off += kChunk) {
      const int64_t n = std::min(kChunk, t.numel - off);
      reader.read_tensor_range_f32(t.name, off, n, buf.data());
      sha.update(buf.data(), static_cast<size_t>(n) * sizeof(float));
    }
    digests[t.name] = sha.hex_digest();
  }
  return digests;
}

void info_model(const std::string& dir, bool json, bool verify) {
  ModelDirReader reader(dir);
  nlohmann::json tensors = nlohmann::json::array();
  uint64_t bytes = 0;
  for (const auto& t : reader.layout().tensors()) {
    const DType dtype = reader.stored_dtype(t.name);
    bytes += static_cast<uint64_t>(t.numel) * dtype_size(dtype);
    tensors.push_back({{"name", t.name},
                       {"shape", t.shape},
                       {"dtype", dtype_name(dtype)},
                       {"file", reader.shard_of(t.name)}});
  }
  if (verify) {
    const std::map<std::string, std::string> digests = verify_model_values(reader);
    for (nlohmann::json& t : tensors) t["values_sha256"] = digests.at(t["name"]);
  }
  const auto params = static_cast<uint64_t>(reader.layout().total_numel());
  if (json) {
    std::cout << nlohmann::json{{"kind", "model"},
                                {"path", dir},
                                {"config", reader.config().to_hf_json()},
                                {"tensors", tensors},
                                {"parameters", params},
                                {"bytes", bytes},
                                {"shards", reader.shard_files()},
                                {"verified", verify}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "model directory: " << dir << "\nconfig:\n";
  const nlohmann::json config = reader.config().to_hf_json();
  for (auto it = config.begin(); it != config.end(); ++it)
    std::cout << "  " << it.key() << ": " << it.value().dump() << "\n";
  std::cout << "tensors:\n";
  for (const auto& t : tensors) {
    const std::string shape = h5::shape_string(t["shape"].get<std::vector<int64_t>>());
    std::printf("  %-48s %-16s %-9s %s\n", t["name"].get<std::string>().c_str(), shape.c_str(),
                t["dtype"].get<std::string>().c_str(), t["file"].get<std::string>().c_str());
  }
  std::fflush(stdout);
  std::cout << "shards: " << reader.shard_files().size() << "\n"
            << "parameters: " << with_commas(params) << " (" << short_count(params) << ")\n"
            << "bytes: " << with_commas(bytes) << " (" << static_cast<double>(bytes) / (1ull << 30)
            << " GiB)\n";
  if (verify) std::cout << "values: all finite\n";
}

// What each --packing that applies cuts `data` into at --seq-len T (packing_figures), the default
// first: into j["packings"], and printed unless `json`.
void describe_packings(const TokenDataset& data, int64_t seq_len, Packing default_packing,
                       bool json, nlohmann::json& j) {
  std::vector<Packing> packings = {default_packing};
  for (const Packing p : {Packing::kBfd, Packing::kDocuments, Packing::kWrapped})
    if (p != default_packing && (p == Packing::kWrapped || data.has_documents()))
      packings.push_back(p);
  j["seq_len"] = seq_len;
  j["packings"] = nlohmann::json::object();
  if (!json) std::cout << "at --seq-len " << seq_len << " (train --packing), an epoch is:\n";
  for (const Packing p : packings) {
    const PackingFigures figures = packing_figures(data, p, seq_len);
    nlohmann::json& entry = j["packings"][packing_name(p)];
    entry = {{"windows", figures.windows}, {"data_share", figures.data_share(seq_len)}};
    // A wrapped epoch leaves out the last (tokens − 1) mod T targets.
    const int64_t left_out =
        p == Packing::kWrapped ? std::max<int64_t>(data.size() - 1, 0) % seq_len : 0;
    if (p == Packing::kWrapped) entry["targets_in_no_window"] = left_out;
    if (json) continue;
    char share[16];
    std::snprintf(share, sizeof share, "%.0f%%", 100.0 * figures.data_share(seq_len));
    std::string tail = left_out == 0
                           ? ""
                           : "; the last " + std::to_string(left_out) +
                                 (left_out == 1 ? " target" : " targets") + " in no window";
    if (figures.windows == 0) tail = "; train refuses it";
    std::cout << "  " << packing_name(p) << ": "
              << with_commas(static_cast<uint64_t>(figures.windows))
              << (figures.windows == 1 ? " window of " : " windows of ")
              << (p == Packing::kWrapped ? "" : "up to ") << seq_len + 1 << " tokens, " << share
              << " data" << tail << (p == default_packing ? " (the default)" : "") << "\n";
  }
}

// The Hugging Face tokenizer files a dataset stores (train writes them into OUT/final/) and the
// names of the chat templates among them, into `j`; "" and nothing for byte-level data.
std::string describe_tokenizer_files(const TokenDataset& data, nlohmann::json& j) {
  const TokenizerFiles tokenizer = data.tokenizer_files();
  if (tokenizer.empty()) return "";
  std::vector<std::string> files, templates;
  for (const auto& entry : tokenizer.files) files.push_back(entry.first);
  const auto config = tokenizer.files.find("tokenizer_config.json");
  const nlohmann::json parsed =
      config == tokenizer.files.end()
          ? nlohmann::json::object()
          : nlohmann::json::parse(config->second, nullptr, /*allow_exceptions=*/false);
  std::string unreadable;  // a template list info cannot read is reported, not fatal
  try {
    for (const auto& entry :
         chat_templates(tokenizer, parsed, data.path() + ": tokenizer_config.json"))
      templates.push_back(entry.first);
  } catch (const Error& e) {
    unreadable = e.what();
  }
  j["tokenizer_files"] = files;
  j["chat_templates"] = unreadable.empty() ? nlohmann::json(templates) : nlohmann::json(nullptr);
  if (!unreadable.empty()) j["chat_templates_error"] = unreadable;
  const auto joined = [](const std::vector<std::string>& items) {
    std::string out;
    for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
  };
  if (!unreadable.empty())
    return "tokenizer_files: " + joined(files) + " (chat templates unreadable: " + unreadable +
           ")\n";
  return "tokenizer_files: " + joined(files) +
         (templates.empty() ? " (no chat template)"
                            : std::string(" (chat template") + (templates.size() > 1 ? "s" : "") +
                                  ": " + joined(templates) + ")") +
         "\n";
}

void info_tokens(const std::string& path, bool json, int64_t seq_len) {
  const TokenDataset data(path);
  int32_t lo = 0, hi = 0;
  data.min_max(&lo, &hi);
  nlohmann::json j = {{"kind", "tokens"},
                      {"path", path},
                      {"tokens", data.size()},
                      {"vocab_size", data.vocab_size()},
                      {"tokenizer", data.tokenizer()},
                      {"dtype", dtype_name(data.dtype())},
                      {"min_token", lo},
                      {"max_token", hi}};
  // SFT data: how many tokens the loss counts (the whole mask is read and checked).
  const int64_t counted = data.has_loss_mask() ? data.counted_tokens() : -1;
  if (counted >= 0) j["loss_mask_counted_tokens"] = counted;
  // Document boundaries: train and eval mask each document's attention by default.
  const int64_t documents = data.num_documents();
  const bool masked = resolve_document_masking(AutoSwitch::kAuto, documents, path, "info");
  j["documents"] = data.has_documents() ? nlohmann::json(documents) : nlohmann::json(nullptr);
  j["document_masking"] = masked ? "on" : "off";
  const Packing packing = resolve_packing(Packing::kAuto, data);  // train's default
  j["packing"] = packing_name(packing);
  const std::string tokenizer_line = describe_tokenizer_files(data, j);
  if (json) {
    if (seq_len > 0) describe_packings(data, seq_len, packing, true, j);
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "token dataset: " << path << "\n"
            << "tokens: " << with_commas(static_cast<uint64_t>(data.size())) << "\n"
            << "vocab_size: " << data.vocab_size() << "\n"
            << "tokenizer: " << data.tokenizer() << "\n"
            << tokenizer_line << "dtype: " << dtype_name(data.dtype()) << "\n"
            << "min_token: " << lo << "\nmax_token: " << hi << "\n";
  if (counted >= 0)
    std::cout << "loss_mask: " << with_commas(static_cast<uint64_t>(counted))
              << " tokens counted in the loss\n";
  if (masked)
    std::cout << "documents: " << with_commas(static_cast<uint64_t>(documents))
              << " (document masking: on by default; --document-masking off attends across "
                 "them)\n";
  else
    std::cout << "documents: " << (data.has_documents() ? "1" : "not recorded")
              << " (one stream; document masking: off, nothing to mask)\n";
  std::cout << "packing: " << packing_name(packing)
            << (packing == Packing::kBfd
                    ? " by default (whole documents packed best-fit decreasing; --packing wrapped "
                      "cuts a window every --seq-len tokens)\n"
                    : " by default (a window every --seq-len tokens)\n");
  if (seq_len > 0) describe_packings(data, seq_len, packing, false, j);
  if (hi >= data.vocab_size())
    std::cout << "warning: max token " << hi << " is not below vocab_size\n";
}

// A summary `j` ({"kind", "path", ...}) as JSON, or as "TITLE: PATH" and a line per other key.
void print_summary(const nlohmann::json& j, bool json, const std::string& title) {
  if (json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << title << ": " << j.at("path").get<std::string>() << "\n";
  for (const auto& [key, value] : j.items())
    if (key != "kind" && key != "path") std::cout << key << ": " << value.dump() << "\n";
}

void info_checkpoint(const std::string& dir, bool json, bool verify) {
  const nlohmann::json manifest = read_json_file(dir + "/" + kCheckpointManifestFile);
  nlohmann::json j = {{"kind", "checkpoint"}, {"path", dir}};
  for (const char* key :
       {"step", "tokens_seen", "world_size", "zero_stage", "precision", "config_fingerprint"})
    if (manifest.contains(key)) j[key] = manifest[key];
  if (verify) {  // every rank file's size and CRC-32C against the manifest
    const CheckpointManifest m = CheckpointManifest::from_json(manifest, dir);
    for (const CheckpointFile& f : m.files) verify_checkpoint_file(dir, f);
    j["verified_files"] = m.files.size();
  }
  print_summary(j, json, "training checkpoint");
}

// info --verify of weight files: every value of each tensor (a pair of its file and name) read,
// each tensor's digest returned by name (TensorValues::sha256; null for a dtype that is not read,
// named in `unread_dtypes`). A value that is not finite fails once all are read, naming the
// file, the tensors and their first such element (import refuses such a value too).
std::map<std::string, nlohmann::json> verify_weight_values(
    const std::vector<std::pair<const WeightFile*, std::string>>& tensors,
    std::set<std::string>& unread_dtypes) {
  std::map<std::string, nlohmann::json> digests;
  std::string bad;
  int64_t bad_tensors = 0;
  for (const auto& [file, name] : tensors) {
    const std::string& dtype = file->tensor(name).dtype;
    if (!is_readable_weight_dtype(dtype)) {
      unread_dtypes.insert(dtype);
      digests[name] = nullptr;
      continue;
    }
    const TensorValues values = read_tensor_values(*file, name);
    digests[name] = values.sha256;
    if (values.non_finite > 0 && ++bad_tensors <= 4)
      bad += "\n  '" + file->path() + "': tensor '" + name +
             "': " + std::to_string(values.non_finite) + " value(s), the first at element " +
             std::to_string(values.first_non_finite);
  }
  if (bad_tensors > 0)
    fail("info --verify: " + std::to_string(bad_tensors) +
         " tensor(s) hold values that are not finite (NaN or infinity):" + bad +
         (bad_tensors > 4 ? "\n  and " + std::to_string(bad_tensors - 4) + " more" : ""));
  return digests;
}

// What verify_weight_values read (`digests`), as the summary's "values:" line.
void print_verified(const std::map<std::string, nlohmann::json>& digests,
                    const std::set<std::string>& unread_dtypes) {
  std::string unread;
  for (const std::string& d : unread_dtypes) unread += (unread.empty() ? "" : ", ") + d;
  const auto read = std::count_if(digests.begin(), digests.end(),
                                  [](const auto& d) { return !d.second.is_null(); });
  std::cout << "values: all finite in the " << read
            << " tensor(s) read (each one's SHA-256 of its values as fp32 in --json)"
            << (unread.empty() ? "" : "; tensors of " + unread + " not read") << "\n";
}

// A Hugging Face directory (one `export` wrote, or a PyTorch checkpoint's), or one of its weight
// files: every weight file's header (or pickle) is validated; with `verify`, every value read.
void info_hf_weights(const std::string& path, bool json, bool verify) {
  std::error_code ec;
  const bool one_file = !fs::is_directory(path, ec);
  const std::string dir = one_file ? fs::path(path).parent_path().string() : path;
  HfWeights weights;
  if (one_file) {
    const std::string name = fs::path(path).filename().string();
    const auto& file = weights.files[name] = std::make_unique<WeightFile>(path);
    for (const StoredTensor& t : file->tensors()) weights.weight_map[t.name] = name;
  } else {
    weights = open_hf_weights(dir);
  }
  const std::map<std::string, std::string>& weight_map = weights.weight_map;
  const bool pytorch = !weight_map.empty() && !weight_map.begin()->second.ends_with(".safetensors");
  std::map<std::string, StoredTensor> entries;
  std::set<std::string> files;
  for (const auto& [file, reader] : weights.files) {
    files.insert(file);
    for (const StoredTensor& e : reader->tensors()) entries[e.name] = e;
  }
  nlohmann::json tensors = nlohmann::json::array();
  uint64_t params = 0, bytes = 0;
  std::vector<std::pair<const WeightFile*, std::string>> to_verify;
  for (const auto& [name, file] : weight_map) {
    ZT_CHECK(entries.count(name),
             "'" + (fs::path(dir) / file).string() + "' has no tensor '" + name + "'");
    const StoredTensor& e = entries.at(name);
    params += safetensors_numel(e.shape);
    bytes += safetensors_numel(e.shape) * safetensors_dtype_size(e.dtype);
    tensors.push_back({{"name", name}, {"shape", e.shape}, {"dtype", e.dtype}, {"file", file}});
    to_verify.emplace_back(weights.files.at(file).get(), name);
  }
  std::set<std::string> unread_dtypes;
  std::map<std::string, nlohmann::json> digests;
  if (verify) {
    digests = verify_weight_values(to_verify, unread_dtypes);
    for (nlohmann::json& t : tensors) t["values_sha256"] = digests.at(t["name"]);
  }
  if (json) {
    std::cout << nlohmann::json{{"kind", pytorch ? "pytorch" : "safetensors"},
                                {"path", path},
                                {"tensors", tensors},
                                {"parameters", params},
                                {"bytes", bytes},
                                {"files", files},
                                {"verified", verify}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "Hugging Face " << (pytorch ? "PyTorch checkpoint" : "safetensors")
            << (one_file ? " file: " : " directory: ") << path << "\ntensors:\n";
  for (const auto& t : tensors) {
    const std::string shape = h5::shape_string(t["shape"].get<std::vector<int64_t>>());
    std::printf("  %-48s %-16s %-5s %s\n", t["name"].get<std::string>().c_str(), shape.c_str(),
                t["dtype"].get<std::string>().c_str(), t["file"].get<std::string>().c_str());
  }
  std::fflush(stdout);
  std::cout << "files: " << files.size() << "\nparameters: " << with_commas(params) << " ("
            << short_count(params) << ")\nbytes: " << with_commas(bytes) << "\n";
  if (verify) print_verified(digests, unread_dtypes);
}

// A PEFT LoRA adapter directory (a LoRA run's OUT/final, or PEFT's save_pretrained): its
// adapter_config.json read as eval and generate --adapter read it, and its tensors' headers.
// The projections the adapter's weights adapt, in a layer's order (PEFT saves lora_A and lora_B
// for each module its targets found in the model); the targets as the file gives them when its
// weights hold none.
std::string adapted_projections(const LoraSpec& spec, const WeightFile& weights) {
  std::set<std::string> modules;
  for (const StoredTensor& e : weights.tensors()) {
    const size_t at = e.name.rfind(".lora_A.");
    const size_t dot = at == std::string::npos || at == 0 ? at : e.name.rfind('.', at - 1);
    if (dot != std::string::npos) modules.insert(e.name.substr(dot + 1, at - dot - 1));
  }
  std::string text;
  for (LoraTarget t : kLoraTargetsInLayerOrder)
    if (modules.count(lora_target_name(t)) > 0)
      text += std::string(text.empty() ? "" : ",") + lora_target_name(t);
  return text.empty() ? spec.targets_as_given() : text;
}

void info_peft_adapter(const std::string& dir, bool json, bool verify) {
  nlohmann::json config;
  const LoraSpec spec = read_peft_adapter_config(dir + "/" + kPeftConfigFile,
                                                 LoraSpec::Use::kTrainedWeights, &config);
  const WeightFile reader(peft_weights_path(dir));
  uint64_t params = 0, bytes = 0;
  std::set<std::string> dtypes;
  for (const StoredTensor& e : reader.tensors()) {
    params += safetensors_numel(e.shape);
    bytes += safetensors_numel(e.shape) * safetensors_dtype_size(e.dtype);
    dtypes.insert(e.dtype);
  }
  const auto base = config.find("base_model_name_or_path");
  nlohmann::json j = {{"kind", "peft_adapter"},
                      {"path", dir},
                      {"r", spec.rank},
                      {"lora_alpha", spec.alpha},
                      {"scale", spec.scale()},
                      {"use_rslora", spec.use_rslora},
                      {"use_dora", spec.use_dora},
                      {"lora_dropout", spec.dropout},
                      {"target_modules", adapted_projections(spec, reader)},
                      {"modules_to_save", spec.modules_to_save},
                      {"base_model_name_or_path", base != config.end() ? *base : nlohmann::json()},
                      {"tensors", reader.tensors().size()},
                      {"parameters", params},
                      {"bytes", bytes},
                      {"dtypes", dtypes}};
  nlohmann::json layer_keys;  // layers_to_transform, rank_pattern, ...: those given
  spec.write_layer_keys(layer_keys);
  if (!layer_keys.is_null()) j.update(layer_keys);
  std::set<std::string> unread_dtypes;
  std::map<std::string, nlohmann::json> digests;
  if (verify) {
    std::vector<std::pair<const WeightFile*, std::string>> to_verify;
    for (const StoredTensor& e : reader.tensors()) to_verify.emplace_back(&reader, e.name);
    digests = verify_weight_values(to_verify, unread_dtypes);
    if (json) j["values_sha256"] = digests;
  }
  if (json) j["verified"] = verify;
  print_summary(j, json, "PEFT LoRA adapter");
  if (verify && !json) print_verified(digests, unread_dtypes);
  if (!json)
    std::cout << "use it on its base with eval/generate --adapter, train --lora-init-from or "
                 "export --merge-lora\n";
}

// A training run's output directory (run.json beside checkpoints/ and final/) describes no one
// thing: the refusal names what does, those that exist (the run's report, its final model, the
// checkpoint its `latest` names).
[[noreturn]] void refuse_run_directory(const std::string& dir) {
  std::string offer = "`zerotrain report " + dir + "` summarizes the run";
  std::error_code ec;
  const fs::path final_dir = fs::path(dir) / "final";
  if (fs::is_directory(final_dir, ec))
    offer += ", `zerotrain info " + final_dir.string() + "` describes its final model";
  std::string latest = dir;
  try {
    latest = checkpoint_dir_through_latest(dir);
  } catch (const Error&) {  // a `latest` that names nothing: the rest of the offer stands
  }
  if (latest != dir) offer += ", `zerotrain info " + latest + "` its latest checkpoint";
  fail("'" + dir + "' is a training run's output directory: " + offer);
}

}  // namespace

int cmd_info(int argc, char** argv) {
  const CommandSpec spec{
      "info",
      "Summarise a model directory, a token dataset (.h5), a training checkpoint directory, a "
      "PEFT LoRA adapter directory, or a Hugging Face checkpoint directory or weight file "
      "(safetensors, PyTorch .bin); or, with --env, this installation and what this rank sees "
      "(like DeepSpeed's ds_report).",
      "zerotrain info PATH [--json] [--verify]\n  zerotrain info DATA.h5 [--seq-len T] [--json]\n"
      "  zerotrain info --env [--json]"};
  po::options_description options("info options");
  options.add_options()("path", po::value<std::string>(), "what to describe")(
      "json", po::bool_switch(), "print machine-readable JSON")(
      "env", po::bool_switch(),
      "report zerotrain's build, its libraries, the CPU and GPUs, and the launcher and rank "
      "variables this process sees (no PATH)")(
      "verify", po::bool_switch(),
      "model directory, Hugging Face weights or PEFT adapter: read every tensor and check it is "
      "finite (with each tensor's SHA-256 of its values as fp32 in --json); checkpoint: check "
      "every file's CRC-32C")(
      "seq-len", po::value<int64_t>(),
      "token dataset: the windows each train --packing cuts it into at this --seq-len, and the "
      "share of their rows that hold data rather than padding");
  po::positional_options_description positional;
  positional.add("path", 1);
  po::variables_map vm;
  if (!parse_command_line(spec, options, &positional, argc, argv, vm)) return 0;
  const int64_t seq_len = vm.count("seq-len") ? vm["seq-len"].as<int64_t>() : 0;
  ZT_CHECK(!vm.count("seq-len") || !vm["env"].as<bool>(),
           "info --seq-len describes a token dataset, not --env");
  // Windows of up to T + 1 tokens: T is bounded so that no count of them overflows.
  constexpr int64_t kMostSeqLen = int64_t{1} << 31;
  ZT_CHECK(!vm.count("seq-len") || (seq_len > 0 && seq_len <= kMostSeqLen),
           "info --seq-len must be a positive number of tokens, at most " +
               std::to_string(kMostSeqLen) + ", got " + std::to_string(seq_len));
  if (vm["env"].as<bool>()) {
    ZT_CHECK(!vm.count("path"), "info --env describes this installation and takes no PATH (got '" +
                                    vm["path"].as<std::string>() + "')");
    const nlohmann::json report = environment_report();
    if (vm["json"].as<bool>())
      std::cout << report.dump(2) << std::endl;
    else
      print_environment_report(report, std::cout);
    return 0;
  }
  require_option(vm, "path", spec.name);
  const std::string path = vm["path"].as<std::string>();
  const bool json = vm["json"].as<bool>();
  std::error_code ec;
  ZT_CHECK(fs::exists(path, ec), "'" + path + "' does not exist");
  const std::string what = "'" + path + "' is not a model directory, token dataset or checkpoint";
  if (fs::is_directory(path, ec)) {
    ZT_CHECK(!vm.count("seq-len"),
             "info --seq-len describes a token dataset's windows; '" + path + "' is a directory");
    if (is_hf_checkpoint_dir(path) || fs::exists(path + "/" + kSafetensorsFile) ||
        fs::exists(path + "/" + kSafetensorsIndexFile)) {
      info_hf_weights(path, json, vm["verify"].as<bool>());
    } else if (fs::exists(path + "/" + kModelConfigFile) ||
               fs::exists(path + "/" + kModelIndexFile)) {
      info_model(path, json, vm["verify"].as<bool>());
    } else if (fs::exists(path + "/" + kCheckpointManifestFile)) {
      info_checkpoint(path, json, vm["verify"].as<bool>());
    } else if (fs::exists(path + "/run.json")) {
      refuse_run_directory(path);
    } else if (fs::exists(path + "/" + kLatestCheckpointFile)) {
      // A checkpoints root, read through its `latest` as consolidate and DeepSpeed's zero_to_fp32
      // read one.
      info_checkpoint(checkpoint_dir_through_latest(path), json, vm["verify"].as<bool>());
    } else if (fs::exists(path + "/" + kPeftConfigFile)) {
      info_peft_adapter(path, json, vm["verify"].as<bool>());
    } else if (is_meta_checkpoint_dir(path)) {
      fail("'" + path + "' is a Llama checkpoint in Meta's layout: `info " +
           (fs::path(path) / kMetaWeightsFile).string() +
           "` lists its tensors, and `zerotrain import " + path +
           " --llama-version V` makes a model directory of it (docs/models.md)");
    } else {
      fail(what);
    }
    return 0;
  }
  // A weight file as Hugging Face tools write them (an llm.c .bin token file is no zip).
  if (path.ends_with(".safetensors") ||
      ((path.ends_with(".bin") || path.ends_with(".pt") || path.ends_with(".pth")) &&
       (starts_as_zip(path) || starts_as_pickle(path)))) {
    ZT_CHECK(!vm.count("seq-len"),
             "info --seq-len describes a token dataset's windows; '" + path + "' is a weight file");
    info_hf_weights(path, json, vm["verify"].as<bool>());
    return 0;
  }
  h5::require_readable_hdf5(path, "expected a model directory, token dataset or checkpoint, but");
  {
    const h5::Id file = h5::open_file(path);
    ZT_CHECK(h5::has_dataset(file, "tokens"), what + " (HDF5 file without a /tokens dataset)");
  }
  info_tokens(path, json, seq_len);
  return 0;
}

}  // namespace zt
