// Fuzzed inputs: seeded mutations of a checkpoint manifest, a model's config.json and a DeepSpeed
// JSON. Each mutant is read by the same functions the binary uses (a few hundred per input, in
// process), and a sample of them goes through the binary itself. Every outcome must be a clean
// load (or run) or a zt::Error naming the file: no other exception, no crash, no hang (ctest's
// timeout), and a manifest whose text changed is never accepted with a different content, so a
// changed step or data cursor cannot slip through. Mutants whose CRC the test recomputes (an
// edit made on purpose) may load, but only with values in range and the step of their directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/train_options.h"
#include "checkpoint/checkpoint_manifest.h"
#include "model/config.h"
#include "model/layout.h"
#include "test_train_support.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {
namespace {

using namespace train_test;  // NOLINT
namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kMutantsPerInput = 300;   // in process
constexpr int kBinaryRunsPerInput = 8;  // of them, through the zerotrain binary

// Seeded mutations of a JSON text: byte edits (flip, replace, cut, truncate, duplicate) and
// structured edits (a leaf replaced by an extreme or ill-typed value, a key removed or added).
class JsonMutator {
 public:
  explicit JsonMutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(const std::string& text) {
    switch (pick(6)) {
      case 0:
        return flip_bit(text);
      case 1:
        return replace_byte(text);
      case 2:
        return cut_span(text);
      case 3:
        return text.substr(0, pick(text.size()));
      case 4:
        return duplicate_span(text);
      default:
        return edit_value(text);
    }
  }

  // A structured edit: the text's JSON with one leaf changed, removed or a key added.
  std::string edit_value(const std::string& text) {
    json j = json::parse(text);
    std::vector<json::json_pointer> leaves;
    collect_leaves(j, json::json_pointer(), leaves);
    const json::json_pointer at = leaves[pick(leaves.size())];
    switch (pick(4)) {
      case 0:
        if (!at.empty()) {
          json& parent = j[at.parent_pointer()];
          if (parent.is_object())
            parent.erase(at.back());
          else
            parent.erase(static_cast<size_t>(std::stoul(at.back())));
        }
        break;
      case 1:
        if (j[at].is_number_integer())
          j[at] = j[at].get<int64_t>() + (pick(2) ? 1 : -1);
        else
          j[at] = extreme_value();
        break;
      case 2:
        j["fuzz_key_" + std::to_string(pick(1000))] = extreme_value();
        break;
      default:
        j[at] = extreme_value();
        break;
    }
    return j.dump(pick(2) ? -1 : 2);
  }

  size_t pick(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }

 private:
  static void collect_leaves(const json& j, const json::json_pointer& here,
                             std::vector<json::json_pointer>& out) {
    if (j.is_object() && !j.empty()) {
      for (const auto& [key, value] : j.items()) collect_leaves(value, here / key, out);
    } else if (j.is_array() && !j.empty()) {
      for (size_t i = 0; i < j.size(); ++i) collect_leaves(j[i], here / i, out);
    } else {
      out.push_back(here);
    }
  }

  json extreme_value() {
    static const std::vector<json> values = {0,
                                             -1,
                                             1,
                                             2,
                                             3,
                                             64.5,
                                             -0.0,
                                             1e-300,
                                             1e300,
                                             -1e300,
                                             2147483648LL,
                                             INT64_MAX,
                                             INT64_MIN,
                                             UINT64_MAX,
                                             "",
                                             "auto",
                                             "x",
                                             "nan",
                                             "inf",
                                             nullptr,
                                             true,
                                             false,
                                             json::array(),
                                             json::object(),
                                             json::array({1, 2}),
                                             std::string(1000, '9')};
    return values[pick(values.size())];
  }

  std::string flip_bit(std::string s) {
    if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
    return s;
  }
  std::string replace_byte(std::string s) {
    static const std::string bytes = std::string("0123456789-.eE+\"{}[],: \\n\x01", 27) + "\xff";
    if (!s.empty()) s[pick(s.size())] = bytes[pick(bytes.size())];
    return s;
  }
  std::string cut_span(std::string s) {
    const size_t at = pick(s.size());
    return s.erase(at, 1 + pick(16));
  }
  std::string duplicate_span(std::string s) {
    const size_t at = pick(s.size());
    return s.insert(at, s.substr(at, 1 + pick(32)));
  }

  std::mt19937_64 rng_;
};

// What reading a mutant gave: "ok", or the error text. Any exception other than zt::Error is a
// test failure (the binary would call it an internal error).
struct Outcome {
  bool ok = false;
  std::string error;
};

template <typename Read>
Outcome outcome_of(Read read, const std::string& what) {
  Outcome o;
  try {
    read();
    o.ok = true;
  } catch (const Error& e) {
    o.error = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": escaped as a non-zerotrain exception: " << e.what();
    o.error = e.what();
  }
  return o;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A binary run ended as a clean run or a clear error: exit 0, or exit 1 with an "error" line
// that names `file` (a signal, an abort or "internal error" fail).
void expect_clean_or_clear(const RunResult& r, const std::string& file, const std::string& what) {
  if (r.exit_code == 0) return;
  EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << what << "\n" << r.output;
  EXPECT_NE(r.output.find(file), std::string::npos)
      << what << ": the error does not name " << file << "\n"
      << r.output;
}

class FuzzedInputs : public SampleDataSuite<FuzzedInputs> {
 public:
  static constexpr const char* kDirPrefix = "zt_fuzzed_inputs_";

 protected:
  static std::string train(const std::string& out, const std::string& extra) {
    return "train --data " + path("sample.h5") + " --out " + out + " --seq-len 16 --log-every 0 " +
           extra;
  }
};

std::string signed_manifest(json j) {
  j.erase("manifest_crc32c");
  const std::string text = j.dump();
  j["manifest_crc32c"] = "crc32c:" + crc32c_hex(crc32c(text.data(), text.size()));
  return j.dump(2);
}

TEST_F(FuzzedInputs, CheckpointManifests) {
  // The reference: 3 steps uninterrupted, and a run that stopped at its step-2 checkpoint.
  const std::string whole = path("manifest_whole"), base = path("manifest_base");
  ASSERT_EQ(
      run_zerotrain(train(whole, "--preset tiny --micro-batch 1 --steps 3 --schedule-steps 3"))
          .exit_code,
      0);
  const RunResult saved = run_zerotrain(
      train(base, "--preset tiny --micro-batch 1 --steps 2 --schedule-steps 3 --save-every 2"));
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  const std::string step_dir = base + "/checkpoints/step-00000002";
  const std::string original = read_text(step_dir + "/manifest.json");
  const json expected = CheckpointManifest::read(step_dir).to_json();

  const std::string dir = path("manifests/step-00000002");
  fs::create_directories(dir);
  const std::string file = dir + "/manifest.json";
  JsonMutator mutator(20261123);
  int accepted = 0, refused = 0, resigned_accepted = 0;
  std::vector<std::pair<std::string, bool>> for_the_binary;  // (mutant, signed by the test)
  for (int i = 0; i < kMutantsPerInput; ++i) {
    const bool resign = i % 4 == 3;
    std::string mutant = mutator.mutate(original);
    if (resign) {
      try {
        mutant = signed_manifest(json::parse(mutant));
      } catch (const json::exception&) {  // not JSON: stays as it is
      }
    }
    write_text(file, mutant);
    CheckpointManifest m;
    const Outcome o = outcome_of([&] { m = CheckpointManifest::read(dir); },
                                 "manifest mutant " + std::to_string(i));
    if (!o.ok) {
      ++refused;
      EXPECT_NE(o.error.find(file), std::string::npos) << "mutant " << i << ": " << o.error;
    } else if (!resign) {
      ++accepted;
      EXPECT_EQ(m.to_json(), expected) << "mutant " << i << " changed the manifest and was "
                                       << "accepted:\n"
                                       << mutant;
    } else {
      ++resigned_accepted;
      EXPECT_EQ(m.progress.step, 2) << mutant;
      EXPECT_GE(m.progress.tokens_seen, 0);
      EXPECT_GE(m.progress.cursor.epoch, 0);
      EXPECT_GE(m.progress.cursor.position, 0);
    }
    if (static_cast<int>(for_the_binary.size()) < kBinaryRunsPerInput && i % 7 == 0)
      for_the_binary.push_back({mutant, resign});
  }
  EXPECT_GT(refused, kMutantsPerInput / 2) << "the mutations hardly change anything";
  std::cout << "manifest mutants: " << refused << " refused, " << accepted
            << " accepted unchanged, " << resigned_accepted << " re-signed and accepted\n";

  // Through the binary: resume to step 3 from the mutated checkpoint.
  const std::vector<std::string> uninterrupted = loss_strings(whole + "/metrics.jsonl");
  for (size_t k = 0; k < for_the_binary.size(); ++k) {
    const std::string out = path("manifest_run_" + std::to_string(k));
    fs::copy(base, out, fs::copy_options::recursive);
    const std::string mutated = out + "/checkpoints/step-00000002/manifest.json";
    write_text(mutated, for_the_binary[k].first);
    const RunResult r = run_zerotrain(
        train(out, "--preset tiny --micro-batch 1 --steps 3 --schedule-steps 3 --resume auto"));
    expect_clean_or_clear(r, "manifest.json", "binary run " + std::to_string(k));
    if (r.exit_code == 0 && !for_the_binary[k].second) {
      EXPECT_EQ(loss_strings(out + "/metrics.jsonl"), uninterrupted) << r.output;
    }
  }
}

TEST_F(FuzzedInputs, ModelConfigJson) {
  const std::string model = path("model");
  const RunResult init = run_zerotrain("init --preset tiny --seed 1 --out " + model);
  ASSERT_EQ(init.exit_code, 0) << init.output;
  const std::string original = read_text(model + "/config.json");
  const std::string dir = path("configs");
  fs::create_directories(dir);
  const std::string file = dir + "/config.json";
  JsonMutator mutator(7);
  int refused = 0;
  std::vector<std::string> for_the_binary;
  for (int i = 0; i < kMutantsPerInput; ++i) {
    const std::string mutant = mutator.mutate(original);
    write_text(file, mutant);
    ModelConfig c;
    const Outcome o = outcome_of([&] { c = ModelConfig::from_hf_file(file); },
                                 "config.json mutant " + std::to_string(i));
    if (o.ok) {
      // What was accepted is what the file says: it round-trips through config.json.
      EXPECT_EQ(ModelConfig::from_hf_json(c.to_hf_json(), "round trip"), c) << mutant;
      EXPECT_TRUE(std::isfinite(training_flops_per_token(c, 16))) << mutant;
    } else {
      ++refused;
      EXPECT_NE(o.error.find(file), std::string::npos) << "mutant " << i << ": " << o.error;
    }
    if (static_cast<int>(for_the_binary.size()) < kBinaryRunsPerInput && i % 5 == 0)
      for_the_binary.push_back(mutant);
  }
  EXPECT_GT(refused, kMutantsPerInput / 4) << "the mutations hardly change anything";
  std::cout << "config.json mutants: " << refused << " refused, " << kMutantsPerInput - refused
            << " accepted\n";
  // Through the binary: one training step from the model with the mutated config.json. An
  // accepted config whose shapes differ from the weights is refused naming a tensor, which the
  // message ties to the model directory.
  for (size_t k = 0; k < for_the_binary.size(); ++k) {
    const std::string copy = path("model_" + std::to_string(k));
    fs::copy(model, copy, fs::copy_options::recursive);
    write_text(copy + "/config.json", for_the_binary[k]);
    const RunResult r = run_zerotrain(train(path("model_run_" + std::to_string(k)),
                                            "--model " + copy + " --micro-batch 1 --steps 1"));
    expect_clean_or_clear(r, copy, "binary run " + std::to_string(k));
  }
}

TEST_F(FuzzedInputs, DeepSpeedJson) {
  const std::string original = json::parse(R"({
    "train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0, "bf16": {"enabled": true},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupCosineLR",
                  "params": {"warmup_num_steps": 1, "total_num_steps": 2, "cos_min_ratio": 0.1,
                             "warmup_type": "linear"}},
    "zero_optimization": {"stage": 2, "overlap_comm": true, "reduce_bucket_size": "auto",
                          "allgather_bucket_size": 5e8, "contiguous_gradients": true,
                          "offload_optimizer": {"device": "none"}},
    "activation_checkpointing": {"cpu_checkpointing": false}})")
                                   .dump(2);
  const std::string file = path("ds.json");
  JsonMutator mutator(42);
  int refused = 0;
  std::vector<std::string> for_the_binary;
  for (int i = 0; i < kMutantsPerInput; ++i) {
    const std::string mutant = mutator.mutate(original);
    write_text(file, mutant);
    TrainOptions o;
    std::vector<std::string> args = {"train", "--preset", "tiny",        "--data", "data.h5",
                                     "--out", "out",      "--deepspeed", file};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    testing::internal::CaptureStderr();  // the file's warnings about unknown keys
    const Outcome outcome = outcome_of(
        [&] {
          parse_train_options(static_cast<int>(argv.size()), argv.data(), o);
          validate(o);
          apply_batch_size_rule(o.from_deepspeed.batch_rule, 1, o.micro_batch, o.grad_accum);
        },
        "DeepSpeed mutant " + std::to_string(i));
    testing::internal::GetCapturedStderr();
    if (!outcome.ok) {
      ++refused;
      EXPECT_NE(outcome.error.find(file), std::string::npos)
          << "mutant " << i << ": " << outcome.error << "\n"
          << mutant;
    }
    // Accepted ones only with a batch this machine can hold.
    const bool small = !outcome.ok || o.micro_batch * o.grad_accum <= 64;
    if (static_cast<int>(for_the_binary.size()) < kBinaryRunsPerInput && i % 9 == 0 && small)
      for_the_binary.push_back(mutant);
  }
  EXPECT_GT(refused, kMutantsPerInput / 4) << "the mutations hardly change anything";
  std::cout << "DeepSpeed mutants: " << refused << " refused, " << kMutantsPerInput - refused
            << " accepted\n";
  for (size_t k = 0; k < for_the_binary.size(); ++k) {
    const std::string ds = path("ds_" + std::to_string(k) + ".json");
    write_text(ds, for_the_binary[k]);
    const RunResult r = run_zerotrain(
        train(path("ds_run_" + std::to_string(k)), "--preset tiny --steps 2 --deepspeed " + ds));
    expect_clean_or_clear(r, ds, "binary run " + std::to_string(k));
  }
}

}  // namespace
}  // namespace zt
