// Checkpoint building blocks without MPI: CRC-32C (known vectors, hardware = software, files),
// the manifest (round trip, consistency checks, model and hyperparameter comparisons) and the
// metrics log's resume mode.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_compatibility.h"
#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_manifest.h"
#include "io/fs_util.h"
#include "report/metrics_log.h"
#include "test_manifest_support.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

uint32_t crc_of(const std::string& s) {
  return crc32c(s.data(), s.size());
}

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc_of("123456789"), 0xE3069283u);
  EXPECT_EQ(crc_of(""), 0u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x8A9136AAu);    // RFC 3720 B.4
  EXPECT_EQ(crc_of(std::string(32, '\xff')), 0x62A8AB43u);  // RFC 3720 B.4
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[static_cast<size_t>(i)] = static_cast<char>(i);
  EXPECT_EQ(crc_of(ascending), 0x46DD794Eu);  // RFC 3720 B.4
}

TEST(Crc32c, HardwareMatchesSoftwareAtAnyLengthAndSplit) {
  std::mt19937 rng(3);
  std::vector<uint8_t> data(4099);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t offset : {0u, 1u, 3u, 7u}) {
    for (size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4091u}) {
      const uint8_t* p = data.data() + offset;
      const uint32_t whole = crc32c(p, n);
      EXPECT_EQ(whole, crc32c_extend_software(0, p, n)) << offset << "+" << n;
      const size_t half = n / 3;
      EXPECT_EQ(whole, crc32c_extend(crc32c(p, half), p + half, n - half)) << offset << "+" << n;
    }
  }
  std::cout << "crc32c hardware path: " << (crc32c_hardware_available() ? "yes" : "no") << "\n";
}

TEST(Crc32c, FileChecksumNamesMissingFile) {
  const std::string path = fs::temp_directory_path() / ("zt_crc_" + std::to_string(getpid()));
  std::ofstream(path) << "123456789";
  const FileChecksum sum = crc32c_file(path);
  EXPECT_EQ(sum.crc32c, 0xE3069283u);
  EXPECT_EQ(sum.bytes, 9u);
  fs::remove(path);
  try {
    crc32c_file(path);
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

using testing::tiny_manifest;

TEST(CheckpointManifest, RoundTripsThroughJson) {
  const CheckpointManifest m = tiny_manifest(3);
  const CheckpointManifest back = CheckpointManifest::from_json(m.to_json(), "test");
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_EQ(back.progress.cursor, (DataCursor{1, 5}));
  EXPECT_EQ(back.hyper.optim.lr, 5e-3f);  // floats come back bit for bit
  EXPECT_EQ(back.hyper.optim.beta2, 0.95f);
  EXPECT_FALSE(back.hyper.world_invariant);
  CheckpointManifest invariant = tiny_manifest(3);
  invariant.hyper.world_invariant = true;
  EXPECT_TRUE(CheckpointManifest::from_json(invariant.to_json(), "test").hyper.world_invariant);
  EXPECT_EQ(back.files[2].crc32c, 0xdeadbef1u);
  EXPECT_EQ(checkpoint_step_dir_name(10), "step-00000010");
  EXPECT_EQ(checkpoint_rank_file_name(3), "rank-00003.h5");
  EXPECT_EQ(checkpoint_group_name(17), "group_017");
  // Ranges tile each group; the last rank's slice is the remainder.
  for (const CheckpointGroup& g : m.groups) {
    EXPECT_EQ(g.ranges[0].begin, 0);
    EXPECT_EQ(g.ranges[2].end(), g.numel);
    EXPECT_EQ(g.ranges[1].count, g.shard);
  }
}

// A wholly frozen group kept as a digest: the manifest says so and reads it back.
TEST(CheckpointManifest, FrozenValuesDigestRoundTrips) {
  const ParamLayout layout(preset_config("tiny"));
  std::vector<std::string> frozen;
  for (int t : layout.groups()[1].tensors)
    frozen.push_back(layout.tensors()[static_cast<size_t>(t)].name);
  CheckpointManifest m = tiny_manifest(2);
  m.tensors = checkpoint_tensors(layout, TrainableSet::from_frozen_names(layout, frozen));
  EXPECT_FALSE(keeps_frozen_digests(m));
  m.groups[1].frozen_values_digest = frozen_digest_text(0x0123456789abcdefull);
  EXPECT_EQ(m.groups[1].frozen_values_digest, "splitmix64-sum:0123456789abcdef");
  const CheckpointManifest back = CheckpointManifest::from_json(m.to_json(), "test");
  EXPECT_EQ(back.to_json(), m.to_json());
  EXPECT_EQ(back.groups[1].frozen_values_digest, "splitmix64-sum:0123456789abcdef");
  EXPECT_TRUE(back.groups[0].frozen_values_digest.empty());
  EXPECT_TRUE(keeps_frozen_digests(back));
  EXPECT_EQ(back.format_version, 3);
  // Without a digest a manifest is written as format 2, which earlier builds read.
  EXPECT_EQ(tiny_manifest(2).to_json()["format_version"], 2);
}

// A manifest of format 1 (no CRC of its own) is read; its layout is still checked.
TEST(CheckpointManifest, RejectsRangesThatDoNotTile) {
  nlohmann::json j = tiny_manifest(2).to_json();
  j.erase("manifest_crc32c");
  j["format_version"] = 1;
  EXPECT_NO_THROW(CheckpointManifest::from_json(j, "m.json"));
  j["groups"][1]["file_ranges"][1][0] = 5;
  try {
    CheckpointManifest::from_json(j, "m.json");
    FAIL() << "accepted a broken layout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group 1"), std::string::npos) << e.what();
  }
  j = tiny_manifest(2).to_json();
  j["format_version"] = 99;
  EXPECT_THROW(CheckpointManifest::from_json(j, "m.json"), Error);
}

// The manifest carries its own CRC: an edited step, data cursor or any other value is refused,
// as is a format-2 manifest without the CRC; the written one reads back.
TEST(CheckpointManifest, AnEditedManifestIsRefused) {
  const nlohmann::json good = tiny_manifest(2).to_json();
  EXPECT_NO_THROW(CheckpointManifest::from_json(good, "m.json"));
  for (const auto& edit : std::vector<std::function<void(nlohmann::json&)>>{
           [](nlohmann::json& j) { j["step"] = j["step"].get<int64_t>() + 1; },
           [](nlohmann::json& j) { j["data_cursor"]["position"] = 12345; },
           [](nlohmann::json& j) { j["hyperparameters"]["data_identity"] = "other"; },
           [](nlohmann::json& j) { j.erase("manifest_crc32c"); }}) {
    nlohmann::json j = good;
    edit(j);
    try {
      CheckpointManifest::from_json(j, "m.json");
      ADD_FAILURE() << "accepted an edited manifest: " << j.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("m.json: the manifest"), std::string::npos) << e.what();
    }
  }
}

// A manifest re-signed after an edit still has to be in range and in its step's directory.
TEST(CheckpointManifest, AResignedEditIsStillCheckedForRange) {
  auto signed_with = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = tiny_manifest(2).to_json();
    edit(j);
    j.erase("manifest_crc32c");
    const std::string text = j.dump();
    j["manifest_crc32c"] = "crc32c:" + crc32c_hex(crc32c(text.data(), text.size()));
    return j;
  };
  for (const auto& [edit, expected] :
       std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& j) { j["data_cursor"]["position"] = -5; }, "negative step"},
           {[](nlohmann::json& j) { j["tokens_seen"] = -1; }, "negative step"},
           {[](nlohmann::json& j) { j["zero_stage"] = 7; }, "zero_stage 7"},
           {[](nlohmann::json& j) { j["tensors"][0]["offset"] = int64_t{1} << 40; },
            "does not lie inside its group"},
           {[](nlohmann::json& j) { j["precision"] = "int3"; }, "precision 'int3' is not"},
           {[](nlohmann::json& j) { j["tensors"] = nlohmann::json::array(); }, "lists no tensors"},
           {[](nlohmann::json& j) { j["files"][0]["name"] = "../../data.h5"; },
            "'../../data.h5' is not a plain file name"},
           {[](nlohmann::json& j) { j["files"][0]["name"] = ".."; }, "'..' is not a plain"},
           {[](nlohmann::json& j) {
              j["format_version"] = 3;
              j["groups"][1]["frozen_values_digest"] = "splitmix64-sum:12";
            },
            "group 1's frozen_values_digest 'splitmix64-sum:12' is not"},
           {[](nlohmann::json& j) {
              j["format_version"] = 3;
              j["groups"][1]["frozen_values_digest"] = "splitmix64-sum:0123456789ABCDEF";
            },
            "is not splitmix64-sum: and 16 lowercase hex digits"},
           {[](nlohmann::json& j) {  // every tensor of tiny_manifest trains
              j["format_version"] = 3;
              j["groups"][1]["frozen_values_digest"] = "splitmix64-sum:0123456789abcdef";
            },
            "group 1 is kept as a digest of frozen values, but its tensor model.layers.0."},
           {[](nlohmann::json& j) {
              j["format_version"] = 2;
              j["groups"][1]["frozen_values_digest"] = "splitmix64-sum:0123456789abcdef";
            },
            "frozen_values_digest in a format-2 manifest"}}) {
    try {
      CheckpointManifest::from_json(signed_with(edit), "m.json");
      ADD_FAILURE() << "accepted: " << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  // A step that is not its directory's.
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("zt_manifest_" + std::to_string(getpid())) / "step-00000003";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/" + kCheckpointManifestFile) << tiny_manifest(2).to_json().dump();
  try {
    CheckpointManifest::read(dir);
    ADD_FAILURE() << "a step-7 manifest was accepted in step-00000003";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("says step 7 but its directory is step-00000003"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path());
}

TEST(CheckpointManifest, OtherModelIsRefusedNamingTheKey) {
  const CheckpointManifest m = tiny_manifest(1);
  const ModelConfig small = preset_config("small");
  try {
    check_checkpoint_model(m, small, ParamLayout(small), "ckpt");
    FAIL() << "accepted another model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_size: checkpoint 64, run 256"), std::string::npos)
        << e.what();
  }
  const ModelConfig tiny = preset_config("tiny");
  EXPECT_NO_THROW(check_checkpoint_model(m, tiny, ParamLayout(tiny), "ckpt"));
}

// The arithmetic a run computed with (backend, attention kernel, activation storage) travels
// with the checkpoint; a resume on other arithmetic loads with a warning per change.
TEST(CheckpointManifest, ResumeOnOtherArithmeticWarnsNamingEachChange) {
  CheckpointManifest m = tiny_manifest(2);
  m.hyper.backend = "cuda", m.hyper.attention = "fused", m.hyper.activations = "bf16";
  const TrainingHyperparameters saved = TrainingHyperparameters::from_json(m.hyper.to_json());
  EXPECT_EQ(saved.backend, "cuda");
  EXPECT_EQ(saved.attention, "fused");
  EXPECT_EQ(saved.activations, "bf16");
  EXPECT_TRUE(check_resume_hyperparameters(m, saved, 2, "bf16", "c").empty());
  TrainingHyperparameters run = saved;
  run.attention = "gemm", run.activations = "fp32";
  const auto warnings = check_resume_hyperparameters(m, run, 2, "bf16", "c");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0],
            "attention: checkpoint fused, run gemm (the continuation will differ from an "
            "uninterrupted run)");
  EXPECT_NE(warnings[1].find("activations: checkpoint bf16, run fp32"), std::string::npos)
      << warnings[1];
  run.backend = "cpu", run.attention = "cpu";
  EXPECT_EQ(check_resume_hyperparameters(m, run, 2, "bf16", "c").size(), 3u);
  // A checkpoint from before these keys: nothing to compare, one warning naming this run's.
  nlohmann::json unrecorded = m.hyper.to_json();
  for (const char* key : {"backend", "attention", "activations"}) unrecorded.erase(key);
  CheckpointManifest older = m;
  older.hyper = TrainingHyperparameters::from_json(unrecorded);
  EXPECT_EQ(older.hyper.attention, "");
  const auto older_warnings = check_resume_hyperparameters(older, run, 2, "bf16", "c");
  ASSERT_EQ(older_warnings.size(), 1u);
  EXPECT_NE(older_warnings[0].find("does not record what computed it"), std::string::npos);
  EXPECT_NE(older_warnings[0].find("this run uses backend cpu, attention cpu, activations fp32"),
            std::string::npos)
      << older_warnings[0];
  // Another world size: a warning in the default mode, none where both are world-invariant.
  TrainingHyperparameters one_rank = saved;
  one_rank.grad_accum = 2;  // the same global batch at 1 rank
  const auto resized = check_resume_hyperparameters(m, one_rank, 1, "bf16", "c");
  ASSERT_EQ(resized.size(), 1u);
  EXPECT_EQ(resized[0],
            "world size: checkpoint 2, run 1, without --world-invariant (a step's gradient sums "
            "follow the ranks) (the continuation will differ from an uninterrupted run)");
  CheckpointManifest invariant = m;
  invariant.hyper.world_invariant = true;
  TrainingHyperparameters invariant_run = saved;
  invariant_run.world_invariant = true;
  invariant_run.micro_batch = 1;  // the same global batch at 4 ranks
  EXPECT_TRUE(check_resume_hyperparameters(invariant, invariant_run, 4, "bf16", "c").empty());
  // Neither side recorded (the engine tests' hyperparameters): nothing to say.
  EXPECT_TRUE(check_resume_hyperparameters(older, older.hyper, 2, "bf16", "c").empty());
  // Document masking: recorded, compared; a checkpoint from before it ran without masks.
  EXPECT_EQ(older.hyper.document_masking, "off");
  CheckpointManifest masked = m;
  masked.hyper.document_masking = "on";
  masked.hyper = TrainingHyperparameters::from_json(masked.hyper.to_json());
  EXPECT_EQ(masked.hyper.document_masking, "on");
  TrainingHyperparameters unmasked = masked.hyper;
  unmasked.document_masking = "off";
  const auto masking_warnings = check_resume_hyperparameters(masked, unmasked, 2, "bf16", "c");
  ASSERT_EQ(masking_warnings.size(), 1u);
  EXPECT_NE(masking_warnings[0].find("document_masking: checkpoint on, run off"), std::string::npos)
      << masking_warnings[0];
}

TEST(CheckpointManifest, HyperparameterChangesFailOrWarn) {
  const CheckpointManifest m = tiny_manifest(2);
  TrainingHyperparameters run = m.hyper;
  EXPECT_TRUE(check_resume_hyperparameters(m, run, 2, "bf16", "c").empty());
  run.optim.lr = 1e-3f;  // schedule change: warning only
  run.total_steps = 40;
  const auto warnings = check_resume_hyperparameters(m, run, 2, "bf16", "c");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("lr: checkpoint 0.005, run 0.001"), std::string::npos) << warnings[0];
  // World-invariant training toggled: the state loads, the bits of the continuation change.
  TrainingHyperparameters toggled = m.hyper;
  toggled.world_invariant = !m.hyper.world_invariant;
  const auto toggle_warnings = check_resume_hyperparameters(m, toggled, 2, "bf16", "c");
  ASSERT_EQ(toggle_warnings.size(), 1u);
  EXPECT_NE(toggle_warnings[0].find("world_invariant: checkpoint false, run true"),
            std::string::npos)
      << toggle_warnings[0];
  // --deterministic toggled: recorded; compared where both runs have the fused attention, the one
  // kernel it changes; a checkpoint from before it was deterministic.
  TrainingHyperparameters atomic = m.hyper;
  atomic.deterministic = false;
  EXPECT_FALSE(TrainingHyperparameters::from_json(atomic.to_json()).deterministic);
  EXPECT_TRUE(check_resume_hyperparameters(m, atomic, 2, "bf16", "c").empty());  // not fused
  CheckpointManifest fused = m;
  fused.hyper.attention = "fused";
  atomic.attention = "fused";
  const auto atomic_warnings = check_resume_hyperparameters(fused, atomic, 2, "bf16", "c");
  ASSERT_EQ(atomic_warnings.size(), 1u);
  EXPECT_NE(atomic_warnings[0].find("deterministic: checkpoint true, run false"), std::string::npos)
      << atomic_warnings[0];
  nlohmann::json before_deterministic = m.hyper.to_json();
  before_deterministic.erase("deterministic");
  EXPECT_TRUE(TrainingHyperparameters::from_json(before_deterministic).deterministic);
  // A checkpoint from before the key existed: nothing to compare, no warning.
  nlohmann::json unrecorded = m.hyper.to_json();
  unrecorded.erase("world_invariant");
  CheckpointManifest older = m;
  older.hyper = TrainingHyperparameters::from_json(unrecorded);
  EXPECT_TRUE(check_resume_hyperparameters(older, toggled, 2, "bf16", "c").empty());
  run.micro_batch = 1;  // same world, other micro-batch: refused
  EXPECT_THROW(check_resume_hyperparameters(m, run, 2, "bf16", "c"), Error);
  // At another world size the micro-batch may change (a warning when the global batch does).
  EXPECT_NO_THROW(check_resume_hyperparameters(m, run, 4, "bf16", "c"));
  run = m.hyper;
  run.seq_len = 16;
  try {
    check_resume_hyperparameters(m, run, 2, "bf16", "c");
    FAIL() << "accepted another seq_len";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seq_len: checkpoint 32, run 16"), std::string::npos)
        << e.what();
  }
}

TEST(MetricsLog, ResumeDropsLaterStepsAndAppends) {
  const std::string path = fs::temp_directory_path() / ("zt_metrics_" + std::to_string(getpid()));
  {
    MetricsLog log(path);
    StepRecord r;
    for (r.step = 1; r.step <= 5; ++r.step) log.append(r);
  }
  std::ofstream(path, std::ios::app) << "{\"step\": 6, \"lo";  // cut short by a crash
  {
    MetricsLog log(path, 3);
    StepRecord r;
    r.step = 4;
    log.append(r);
  }
  std::ifstream in(path);
  std::vector<int64_t> steps;
  std::string line;
  while (std::getline(in, line))
    steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4}));
  fs::remove(path);
}

// --keep-last K with --keep-best: the newest K and the one of the lowest eval_loss in its
// manifest's metrics line (the earliest of equal ones) stay; a directory without a manifest is
// not a complete checkpoint and is left alone; without --keep-best the newest K only; steps after
// the one published (a resume's abandoned ones) are left alone and not counted.
TEST(CheckpointPruning, KeepsTheNewestAndTheLowestEvalLoss) {
  const fs::path root = fs::temp_directory_path() / ("zt_prune_" + std::to_string(getpid()));
  auto make = [&](const double* losses, int n) {
    fs::remove_all(root);
    for (int step = 1; step <= n; ++step) {
      const fs::path dir = root / checkpoint_step_dir_name(step);
      fs::create_directories(dir);
      nlohmann::json line = {{"step", step}, {"loss", 9.0}};
      if (!std::isnan(losses[step - 1])) line["eval_loss"] = losses[step - 1];
      std::ofstream(dir / kCheckpointManifestFile) << nlohmann::json{{"metrics_line", line}};
    }
    fs::create_directories(root / checkpoint_step_dir_name(n + 1));  // half written: no manifest
  };
  auto kept = [&] {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(root))
      names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const double losses[] = {3.0, 2.0, 1.5, 1.5, 2.5, NAN, 2.6};
  make(losses, 7);
  prune_checkpoints(root.string(), 2, true, (root / checkpoint_step_dir_name(7)).string());
  EXPECT_EQ(kept(), (std::vector<std::string>{"step-00000003", "step-00000006", "step-00000007",
                                              "step-00000008"}));
  make(losses, 7);
  prune_checkpoints(root.string(), 2, false, (root / checkpoint_step_dir_name(7)).string());
  EXPECT_EQ(kept(), (std::vector<std::string>{"step-00000006", "step-00000007", "step-00000008"}));
  // The best among the newest: nothing more is kept.
  const double falling[] = {3.0, 2.0, 1.0};
  make(falling, 3);
  prune_checkpoints(root.string(), 1, true, (root / checkpoint_step_dir_name(3)).string());
  EXPECT_EQ(kept(), (std::vector<std::string>{"step-00000003", "step-00000004"}));
  // Resumed from step 2 and saved step 3 again: steps 4 and 5, abandoned after it, are not this
  // run's: neither step 4's figure nor either's place among the newest counts, and both stay. A
  // manifest that is not an object is no checkpoint of this run's, and stays too.
  const double resumed[] = {1.5, 2.0, 3.0, 1.0, 4.0};
  make(resumed, 5);
  std::ofstream(root / checkpoint_step_dir_name(1) / kCheckpointManifestFile) << "[1, 2]";
  prune_checkpoints(root.string(), 1, true, (root / checkpoint_step_dir_name(3)).string());
  EXPECT_EQ(kept(), (std::vector<std::string>{"step-00000001", "step-00000002", "step-00000003",
                                              "step-00000004", "step-00000005", "step-00000006"}));
  make(resumed, 5);
  prune_checkpoints(root.string(), 2, false, (root / checkpoint_step_dir_name(3)).string());
  EXPECT_EQ(kept(), (std::vector<std::string>{"step-00000002", "step-00000003", "step-00000004",
                                              "step-00000005", "step-00000006"}));
  fs::remove_all(root);
}

// Run "a" saved steps 3, 6 and 9 (every 3); run "b", resumed from step 3, saves every 2 (its step
// 6 replaced a's). Publishing b's step 10: a's step 9, below it but abandoned, is not b's lineage:
// its low figure is not the best, it is not among the newest, and it stays. Checkpoints of an
// older build (no lineage) count as the history before the first run that recorded one.
TEST(CheckpointPruning, KeepsToThePublishedCheckpointsLineage) {
  const fs::path root = fs::temp_directory_path() / ("zt_lineage_" + std::to_string(getpid()));
  auto save = [&](int64_t step, double eval_loss, const nlohmann::json& lineage) {
    const fs::path dir = root / checkpoint_step_dir_name(step);
    fs::create_directories(dir);
    nlohmann::json manifest = {{"metrics_line", {{"step", step}, {"eval_loss", eval_loss}}}};
    if (!lineage.is_null()) manifest["lineage"] = lineage;
    std::ofstream(dir / kCheckpointManifestFile) << manifest;
  };
  auto kept = [&] {
    std::vector<int64_t> steps;
    for (const auto& entry : fs::directory_iterator(root))
      steps.push_back(checkpoint_step_of_dir_name(entry.path().filename().string()));
    std::sort(steps.begin(), steps.end());
    return steps;
  };
  const nlohmann::json a = {{{"run", "a"}, {"from_step", 0}}};
  const nlohmann::json b = {{{"run", "a"}, {"from_step", 0}}, {{"run", "b"}, {"from_step", 3}}};
  auto two_runs = [&] {
    fs::remove_all(root);
    save(3, 4.9, a);
    save(9, 1.0, a);
    for (int64_t step : {4, 6, 8, 10}) save(step, 5.0 + static_cast<double>(step) / 10, b);
  };
  const std::string published = (root / checkpoint_step_dir_name(10)).string();
  two_runs();
  prune_checkpoints(root.string(), 1, true, published);
  EXPECT_EQ(kept(), (std::vector<int64_t>{3, 9, 10}));
  two_runs();
  prune_checkpoints(root.string(), 2, false, published);
  EXPECT_EQ(kept(), (std::vector<int64_t>{8, 9, 10}));
  // Resumed from step 2 of an older build's run; its step 4, abandoned, has no lineage either.
  fs::remove_all(root);
  for (int64_t step : {1, 2, 4}) save(step, 1.0, nullptr);
  const nlohmann::json c = {{{"run", "c"}, {"from_step", 2}}};
  for (int64_t step : {3, 5}) save(step, 2.0, c);
  prune_checkpoints(root.string(), 3, false, (root / checkpoint_step_dir_name(5)).string());
  EXPECT_EQ(kept(), (std::vector<int64_t>{2, 3, 4, 5}));
  fs::remove_all(root);
}

// A checkpoint written again at the same step replaces the directory in one step: the new files
// are there, nothing of the old one or a temporary is left; a replacement that fails (here: the
// new directory is missing) leaves the old one whole.
TEST(MoveIntoPlace, ReplacesADirectoryWholeAndAFailedReplacementKeepsTheOld) {
  const fs::path root = fs::temp_directory_path() / ("zt_move_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "step" / "old");
  fs::create_directories(root / ".tmp-step" / "new");
  move_into_place((root / ".tmp-step").string(), (root / "step").string(), /*overwrite=*/true);
  EXPECT_TRUE(fs::exists(root / "step" / "new"));
  EXPECT_FALSE(fs::exists(root / "step" / "old"));
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);
  EXPECT_THROW(move_into_place((root / ".tmp-gone").string(), (root / "step").string(), true),
               Error);
  EXPECT_TRUE(fs::exists(root / "step" / "new"));
  fs::create_directories(root / ".tmp-step");
  EXPECT_THROW(move_into_place((root / ".tmp-step").string(), (root / "step").string(), false),
               Error);
  EXPECT_TRUE(fs::exists(root / "step" / "new"));
  // Where the file system cannot exchange: moved aside and back when the rename fails.
  EXPECT_THROW(
      replace_directory_in_two_steps((root / ".tmp-gone").string(), (root / "step").string()),
      Error);
  EXPECT_TRUE(fs::exists(root / "step" / "new"));
  fs::create_directories(root / ".tmp-step" / "newer");
  replace_directory_in_two_steps((root / ".tmp-step").string(), (root / "step").string());
  EXPECT_TRUE(fs::exists(root / "step" / "newer"));
  EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);
  fs::remove_all(root);
}

// The lineage a manifest records: read back as written, absent in an older one, and refused,
// naming the file, when it is not a list of runs each starting after the one before.
// A std::filesystem error the environment caused reads as the others do ("... '/x': Read-only
// file system (EROFS)"); one from a defect (ENOTDIR, EINVAL) is not dressed up as one.
TEST(FilesystemErrorText, TheEnvironmentsErrorsAreNamedWithTheirSymbolAndPath) {
  namespace fs = std::filesystem;
  const fs::filesystem_error read_only("cannot create directories", fs::path("/ro/x"),
                                       std::make_error_code(std::errc::read_only_file_system));
  EXPECT_EQ(environment_filesystem_error_text(read_only),
            "cannot create directories '/ro/x': Read-only file system (EROFS)");
  const fs::filesystem_error full("cannot copy", fs::path("/a"), fs::path("/b"),
                                  std::make_error_code(std::errc::no_space_on_device));
  EXPECT_EQ(environment_filesystem_error_text(full),
            "cannot copy '/a' to '/b': No space left on device (ENOSPC)");
  EXPECT_EQ(environment_filesystem_error_text(
                fs::filesystem_error("x", std::make_error_code(std::errc::invalid_argument))),
            "");
  // A real one: a directory under a regular file is ENOTDIR, a path the program chose.
  const fs::path file = fs::temp_directory_path() / ("zt_fs_error_" + std::to_string(getpid()));
  std::ofstream(file).put('x');
  try {
    fs::create_directories(file / "sub");
    ADD_FAILURE() << "create_directories under a file succeeded";
  } catch (const fs::filesystem_error& e) {
    EXPECT_EQ(environment_filesystem_error_text(e), "") << e.what();
  }
  fs::remove(file);
}

TEST(CheckpointManifest, LineageRoundTripsAndMalformedOnesAreRefused) {
  CheckpointManifest m = tiny_manifest(2);
  EXPECT_FALSE(m.to_json().contains("lineage"));
  EXPECT_TRUE(CheckpointManifest::from_json(m.to_json(), "old").lineage.empty());
  m.lineage = {{"", 0}, {"5eed", 4}, {"cafe", 9}};
  const CheckpointManifest back = CheckpointManifest::from_json(m.to_json(), "test");
  ASSERT_EQ(back.lineage.size(), 3u);
  EXPECT_EQ(back.lineage[2].id, "cafe");
  EXPECT_EQ(back.lineage[2].from_step, 9);
  EXPECT_EQ(run_of_step(back.lineage, 4), "");
  EXPECT_EQ(run_of_step(back.lineage, 5), "5eed");
  EXPECT_EQ(run_of_step(back.lineage, 10), "cafe");
  EXPECT_EQ(run_of_step({}, 10), "");
  for (const char* bad :
       {R"({"lineage": []})", R"({"lineage": {"run": "a"}})",
        R"({"lineage": [{"run": 1, "from_step": 0}]})",
        R"({"lineage": [{"run": "a", "from_step": 2.5}]})",
        R"({"lineage": [{"run": "a", "from_step": 4}, {"run": "b", "from_step": 4}]})"}) {
    try {
      read_checkpoint_lineage(nlohmann::json::parse(bad), "x/manifest.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x/manifest.json: lineage"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace zt
