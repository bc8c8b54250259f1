// Applying a parsed DeepSpeed config to a command's options (app/deepspeed_config.h): the
// batch-size rule, the precedence over defaults, the run.json record, and error attribution.
#include "app/deepspeed_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <tuple>

#include "engine/zero_config.h"
#include "runtime/mpi_runtime.h"
#include "util/decimal.h"
#include "util/error.h"

namespace zt {

namespace po = boost::program_options;
using nlohmann::json;

void apply_batch_size_rule(const BatchSizeRule& rule, int world, int64_t& micro, int64_t& accum) {
  if (!rule.train_batch_size) return;
  const int64_t total = *rule.train_batch_size, n = world;
  const std::string tbs = rule.source + ": train_batch_size " + std::to_string(total);
  // Products past int64 exceed any train_batch_size: they are "not divisible" / "!=" too.
  auto times = [](int64_t a, int64_t b) {
    int64_t p = 0;
    return __builtin_mul_overflow(a, b, &p) ? std::optional<int64_t>() : std::optional(p);
  };
  auto text = [](std::optional<int64_t> v) {
    return v ? std::to_string(*v) : std::string("more than 2^63");
  };
  auto divide = [&](std::optional<int64_t> by, const std::string& what) {
    ZT_CHECK(by && *by > 0 && total % *by == 0,
             tbs + " is not divisible by " + what + " = " + text(by));
    return total / *by;
  };
  if (rule.micro_batch && rule.grad_accum) {
    const std::optional<int64_t> micro_accum = times(*rule.micro_batch, *rule.grad_accum);
    const std::optional<int64_t> product = micro_accum ? times(*micro_accum, n) : micro_accum;
    ZT_CHECK(product == total, tbs + " != micro-batch " + std::to_string(*rule.micro_batch) +
                                   " × gradient_accumulation_steps " +
                                   std::to_string(*rule.grad_accum) + " × world size " +
                                   std::to_string(n) + " = " + text(product));
  } else if (rule.micro_batch) {
    accum = divide(times(*rule.micro_batch, n), "micro-batch " + std::to_string(*rule.micro_batch) +
                                                    " × world size " + std::to_string(n));
  } else if (rule.grad_accum) {
    micro = divide(times(*rule.grad_accum, n), "gradient_accumulation_steps " +
                                                   std::to_string(*rule.grad_accum) +
                                                   " × world size " + std::to_string(n));
  } else {
    micro = divide(n, "world size " + std::to_string(n));
    accum = 1;
  }
  if (rule.micro_batch) micro = *rule.micro_batch;
  if (rule.grad_accum) accum = *rule.grad_accum;
}

AppliedDeepSpeedFile apply_deepspeed_file(const std::string& path, const ModelConfig& model,
                                          const po::options_description& desc,
                                          po::variables_map& vm) {
  DeepSpeedConfig c = load_deepspeed_config(path, model);
  // Offload devices the engine does not implement yet: every such key in one error.
  std::string not_implemented;
  auto refuse = [&](const std::string& key, const OffloadSettings& o) {
    if (!o.enabled()) return;
    not_implemented += (not_implemented.empty() ? "" : "; ") + std::string("zero_optimization.") +
                       key + ".device '" + o.device + "'";
  };
  if (desc.find_nothrow("offload-param", false) == nullptr)
    refuse("offload_param", c.offload_param);
  if (desc.find_nothrow("offload-optimizer", false) == nullptr)
    refuse("offload_optimizer", c.offload_optimizer);
  ZT_CHECK(not_implemented.empty(),
           path + ": " + not_implemented + ": not implemented yet (set \"device\": \"none\")");
  auto unset = [&](const std::string& name) {
    return desc.find_nothrow(name, false) && (!vm.count(name) || vm[name].defaulted());
  };
  AppliedDeepSpeedFile applied;
  json mapping = json::array();
  auto store = [&](const std::vector<MappedOption>& options) {
    std::vector<std::string> args;
    for (const MappedOption& o : options) {
      const bool applies = unset(o.option);
      mapping.push_back(
          {{"key", o.key}, {"option", o.option}, {"value", o.value}, {"applied", applies}});
      if (!applies) continue;
      args.push_back("--" + o.option + "=" + o.value);
      applied.options_set.push_back(o.option);
    }
    try {
      po::store(po::command_line_parser(args).options(desc).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      fail(path + ": " + e.what());
    }
  };
  store(c.options);
  // Values that depend on the final peak learning rate / step count.
  for (const auto& [option, key, ratio] :
       {std::tuple{"min-lr", "scheduler.params.cos_min_ratio", c.cos_min_ratio},
        std::tuple{"warmup-start-lr", "scheduler.params.warmup_min_ratio", c.warmup_min_ratio}})
    if (ratio && vm.count("lr"))
      store({{key, option, shortest_decimal(static_cast<float>(*ratio * vm["lr"].as<float>()))}});
  if (is_rank_zero_of_launch()) {
    for (const std::string& w : c.warnings) std::cerr << "warning: " << w << "\n";
    if (vm.count("precision")) {
      const bool implied_fp32 = std::any_of(mapping.begin(), mapping.end(), [](const json& m) {
        return m["key"] == kNoPrecisionBlock && m["applied"] == true;
      });
      std::cerr << "DeepSpeed config " << path << ": training precision "
                << precision_name(vm["precision"].as<Precision>())
                << (implied_fp32 ? " (the file enables neither fp16 nor bf16: DeepSpeed trains "
                                   "fp32; add \"bf16\": {\"enabled\": true} for bf16)"
                                 : "")
                << "\n";
    }
  }
  applied.record = {
      {"file", path}, {"sha256", c.sha256}, {"mapping", mapping}, {"warnings", c.warnings}};
  if (c.train_batch_size) applied.record["train_batch_size"] = *c.train_batch_size;
  BatchSizeRule& rule = applied.batch_rule;
  rule.source = path;
  rule.train_batch_size = c.train_batch_size;
  auto given = [&](const char* name) -> std::optional<int64_t> {
    if (!vm.count(name) || vm[name].defaulted()) return std::nullopt;
    return vm[name].as<int64_t>();
  };
  rule.micro_batch = given("micro-batch");
  rule.grad_accum = given("grad-accum");
  // With train_batch_size, micro-batch and grad-accum may be derived from the file's numbers.
  if (rule.train_batch_size)
    for (const char* derived : {"micro-batch", "grad-accum"})
      applied.options_set.push_back(derived);
  return applied;
}

std::string attributed_to_deepspeed_file(const std::string& what, const std::string& path,
                                         const std::vector<std::string>& options_set) {
  for (const std::string& name : options_set) {
    const std::string flag = "--" + name;
    for (size_t at = what.find(flag); at != std::string::npos; at = what.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole = end == what.size() ||
                         !(std::isalnum(static_cast<unsigned char>(what[end])) || what[end] == '-');
      if (whole) return what + " (the value comes from DeepSpeed config '" + path + "')";
    }
  }
  return what;
}

}  // namespace zt
