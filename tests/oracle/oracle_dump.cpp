// zt_oracle_dump: runs the engine's math on one micro-batch and writes everything the PyTorch
// oracle (tests/oracle/llama_reference.py) recomputes independently:
//
//   logits            [B·T, V] fp32  forward (training = false) through the engine's eval path
//   loss              [1]      fp64  mean next-token cross-entropy of that forward
//   loss_grad_pass    [1]      fp64  the same loss, from the separate gradient pass below
//   grad/<hf name>    shape    fp32  d(mean loss over the B·T tokens)/d(tensor), one micro-batch
//   losses_adamw      [steps]  fp64  losses of `steps` ZeroEngine::train_step calls on that batch
//   tokens            [B, T+1] int32 the window the batch came from (inputs | targets)
//   act/<l>/<name>    fp32     what the gradient pass's forward stored for layer l (x, xn1, q, k,
//                              v, att, x2, xn2, gate, up, h; q and k after RoPE), widened from
//                              the storage type; act/final/{x, xf}: the last residual and the
//                              final norm's output
//
// The batch is the first B non-overlapping windows of T+1 tokens of /tokens (inputs = first T,
// targets = last T), as `zerotrain eval` reads them; with a /loss_mask in the dataset the targets
// it excludes are ignored and every loss is the mean over the C counted ones (C = B·T without a
// mask). Gradients come from a LlamaModel of our own fed with the model directory's tensors
// (rounded to bf16 or fp16 in those modes, as the engine's working params are) and grad_scale =
// 1/C, accumulated into zeroed fp32 group buffers.
//
// AdamW of the training steps (the Python side mirrors it exactly; the values are also written
// as attributes of /losses_adamw): stage 0 on a world of one rank, fixed lr (--lr, no warmup or
// schedule), betas (0.9, 0.95), eps 1e-8, weight decay 0.1 (decoupled,
// master -= lr·wd·master with the pre-update master) on projections and the LM head only (not on
// norms or the embedding), clipping disabled. fp32 masters; in bf16 (fp16) mode the working
// params are the masters rounded to bf16 (fp16) after every update. fp16 trains with the default
// dynamic loss scale (2^16); a step skipped on overflow is an error here (the reference has none).
//
// --activations bf16 (with --precision bf16) or fp16 (with --precision fp16) stores the activations
// of both passes in that type (LlamaModel's storage type); the default fp32 keeps them in fp32.
//
// --document-masking on (the dataset records /doc_starts) reads the windows with document masks,
// as `zerotrain eval --document-masking on` does: every pass above attends within documents,
// restarts positions at each, and leaves out the targets that begin a document.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "comm/mpi_communicator.h"
#include "engine/zero_config.h"
#include "engine/zero_engine.h"
#include "io/data_loader.h"
#include "io/hdf5_util.h"
#include "io/model_dir.h"
#include "io/token_dataset.h"
#include "model/llama.h"
#include "runtime/mpi_runtime.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/memory.h"

namespace zt {
namespace {

constexpr float kBeta1 = 0.9f;
constexpr float kBeta2 = 0.95f;
constexpr float kEps = 1e-8f;
constexpr float kWeightDecay = 0.1f;

struct DumpOptions {
  std::string model_dir, tokens_path, out_path, precision, activations = "fp32";
  bool document_masks = false;
  int64_t micro_batch = 0, seq_len = 0, steps = 5;
  float lr = 1e-3f;
};

const char* const kUsage =
    "usage: zt_oracle_dump --model DIR --tokens FILE.h5 --out FILE.h5 --precision fp32|bf16|fp16 "
    "--micro-batch B --seq-len T [--steps 5] [--lr 1e-3] [--activations fp32|bf16] "
    "[--document-masking on|off]";

DumpOptions parse_options(int argc, char** argv) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; i += 2) {
    const std::string key = argv[i];
    ZT_CHECK(key.rfind("--", 0) == 0 && i + 1 < argc, "bad argument '" + key + "'\n" + kUsage);
    values[key.substr(2)] = argv[i + 1];
  }
  auto take = [&](const std::string& key, bool required) -> std::string {
    auto it = values.find(key);
    if (it == values.end()) {
      ZT_CHECK(!required, "missing --" + key + "\n" + kUsage);
      return {};
    }
    std::string v = it->second;
    values.erase(it);
    return v;
  };
  DumpOptions o;
  o.model_dir = take("model", true);
  o.tokens_path = take("tokens", true);
  o.out_path = take("out", true);
  o.precision = take("precision", true);
  o.micro_batch = std::stoll(take("micro-batch", true));
  o.seq_len = std::stoll(take("seq-len", true));
  if (std::string s = take("steps", false); !s.empty()) o.steps = std::stoll(s);
  if (std::string s = take("lr", false); !s.empty()) o.lr = std::stof(s);
  if (std::string s = take("activations", false); !s.empty()) o.activations = s;
  if (std::string s = take("document-masking", false); !s.empty()) {
    ZT_CHECK(s == "on" || s == "off", "--document-masking must be on or off");
    o.document_masks = s == "on";
  }
  ZT_CHECK(values.empty(),
           "unknown option --" + (values.empty() ? "" : values.begin()->first) + "\n" + kUsage);
  ZT_CHECK(o.micro_batch > 0 && o.seq_len > 0 && o.steps > 0 && o.lr > 0,
           "micro-batch, seq-len, steps and lr must be positive");
  parse_precision(o.precision);  // validates
  ZT_CHECK(o.activations == "fp32" || (o.activations == "bf16" && o.precision == "bf16") ||
               (o.activations == "fp16" && o.precision == "fp16"),
           "--activations must be fp32, or the precision's own type (bf16, fp16)");
  return o;
}

// The training batch: row b of the dataset window is tokens[b·(T+1), (b+1)·(T+1)).
struct Batch {
  std::vector<int32_t> window, inputs, targets;
  std::vector<int32_t> doc_starts;  // [B·T] with document masks, else empty
  int64_t counted = 0;  // targets that count (all of them unless the dataset has a loss mask)
  const int32_t* doc_start() const { return doc_starts.empty() ? nullptr : doc_starts.data(); }
};

Batch read_batch(const std::string& path, int64_t B, int64_t T, int64_t vocab,
                 bool document_masks) {
  TokenDataset data(path);
  ZT_CHECK(data.size() >= B * (T + 1), "token dataset '" + path + "' has " +
                                           std::to_string(data.size()) + " tokens, need " +
                                           std::to_string(B * (T + 1)));
  Batch batch;
  batch.window.resize(static_cast<size_t>(B * (T + 1)));
  data.read(0, B * (T + 1), batch.window.data());
  for (int32_t token : batch.window)
    ZT_CHECK(token >= 0 && token < vocab, "token out of the model's vocabulary in '" + path + "'");
  // The engine's own reader: a target the loss mask excludes becomes kIgnoredTarget.
  batch.inputs.resize(static_cast<size_t>(B * T));
  batch.targets.resize(batch.inputs.size());
  if (document_masks) batch.doc_starts.resize(batch.inputs.size());
  batch.counted = read_eval_windows(data, 0, B, T, batch.inputs.data(), batch.targets.data(),
                                    document_masks ? batch.doc_starts.data() : nullptr);
  ZT_CHECK(batch.counted > 0, "the loss mask of '" + path + "' counts no target of the batch");
  return batch;
}

// Gradients of the mean loss for every tensor, by tensor index, from a LlamaModel of our own.
struct GradPass {
  std::vector<std::vector<float>> group_grads;  // flat fp32, one per parameter group
  double loss = 0.0;                            // mean loss of the pass
  // Stored forward activations, widened to fp32: name -> (shape, values).
  std::vector<std::pair<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>> acts;
};

GradPass compute_gradients(ModelDirReader& reader, Backend& backend, const Batch& batch, int64_t B,
                           int64_t T, DType work, DType storage) {
  const ModelConfig& config = reader.config();
  MemoryTracker memory;
  LlamaModel model(config, backend, memory, B, T, {}, 0, storage);
  const ParamLayout& layout = model.layout();
  const int G = layout.num_groups();

  // Full fp32 group buffers of the stored values (bf16-rounded in bf16 mode).
  std::vector<std::vector<float>> params(static_cast<size_t>(G));
  GradPass pass;
  pass.group_grads.resize(static_cast<size_t>(G));
  for (int g = 0; g < G; ++g) {
    const GroupInfo& group = layout.groups()[static_cast<size_t>(g)];
    params[static_cast<size_t>(g)].assign(static_cast<size_t>(group.numel), 0.0f);
    pass.group_grads[static_cast<size_t>(g)].assign(static_cast<size_t>(group.numel), 0.0f);
    for (int ti : group.tensors) {
      const TensorInfo& t = layout.tensors()[static_cast<size_t>(ti)];
      float* dst = params[static_cast<size_t>(g)].data() + t.offset;
      reader.read_tensor_f32(t.name, dst);
      if (work == DType::kBf16)
        for (int64_t i = 0; i < t.numel; ++i) dst[i] = round_to_bf16(dst[i]);
      if (work == DType::kFloat16)
        for (int64_t i = 0; i < t.numel; ++i) dst[i] = round_to_fp16(dst[i]);
    }
  }

  const float grad_scale = 1.0f / static_cast<float>(batch.counted);
  model.set_batch(batch.inputs.data(), batch.targets.data(), batch.doc_start());
  // Tied embeddings: the head also multiplies by (and accumulates into) the embedding group.
  const bool tied = layout.tied_embeddings();
  auto tied_to = [&](int g) { return tied && g == layout.head_group(); };
  for (int g = 0; g < G; ++g)
    model.forward_group(g, params[static_cast<size_t>(g)].data(), true, grad_scale,
                        tied_to(g) ? ConstTensorView(params[0].data()) : ConstTensorView());
  for (int g = G - 1; g >= 0; --g)
    model.backward_group(g, params[static_cast<size_t>(g)].data(),
                         pass.group_grads[static_cast<size_t>(g)].data(),
                         tied_to(g) ? ConstTensorView(params[0].data()) : ConstTensorView(),
                         tied_to(g) ? pass.group_grads[0].data() : nullptr);
  // The head's backward wrote the losses (the fused linear + cross-entropy).
  pass.loss = model.loss_sum() / static_cast<double>(batch.counted);
  // The backward reads the saved activations and writes only its own temporaries.
  const ActivationTensors& t = model.activation_tensors();
  const int64_t M = B * T, D = config.hidden_size, KV = config.kv_dim(), QD = config.q_dim();
  const int64_t F = config.intermediate_size;
  auto keep = [&](const std::string& name, ConstTensorView v, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    pass.acts.push_back({name, {shape, widened_to_host(backend.device_memory(), v, n)}});
  };
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const LayerActivations& a = t.layers[static_cast<size_t>(l)];
    const std::string p = "act/" + std::to_string(l) + "/";
    keep(p + "x", t.resid[static_cast<size_t>(l)], {M, D});
    for (auto [name, v, width] : {std::tuple{"xn1", a.xn1, D},
                                  {"q", a.q, QD},
                                  {"k", a.k, KV},
                                  {"v", a.v, KV},
                                  {"att", a.att, QD},
                                  {"x2", a.x2, D},
                                  {"xn2", a.xn2, D},
                                  {"gate", a.gate, F},
                                  {"up", a.up, F},
                                  {"h", a.h, F}})
      if (v) keep(p + name, v, {M, width});  // OLMo 2 has no xn1 or xn2
  }
  keep("act/final/x", t.resid.back(), {M, D});
  keep("act/final/xf", t.final_norm_out, {M, D});
  return pass;
}

void write_f32(hid_t file, const std::string& name, const std::vector<int64_t>& shape,
               const float* data, const std::string& where) {
  h5::Id ds = h5::create_dataset(file, name, DType::kFloat32, shape, where + ":" + name);
  h5::write_box(ds, DType::kFloat32, std::vector<int64_t>(shape.size(), 0), shape, data,
                where + ":" + name);
  ds.close(where + ":" + name);
}

// fp64 1-D dataset (no project helper for doubles: plain HDF5 C API, every call checked).
void write_f64(hid_t file, const std::string& name, const std::vector<double>& values,
               const std::string& where) {
  const std::string at = where + ":" + name;
  const hsize_t dims[1] = {static_cast<hsize_t>(values.size())};
  h5::Id space = h5::wrap(H5Screate_simple(1, dims, nullptr), H5Sclose, "H5Screate_simple", at);
  h5::Id ds = h5::wrap(
      H5Dcreate2(file, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose, "cannot create dataset", at);
  h5::check(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
            "H5Dwrite", at);
  ds.close(at);
}

int run(int argc, char** argv) {
  const DumpOptions o = parse_options(argc, argv);
  MpiRuntime runtime(&argc, &argv);
  MpiCommunicator world;
  ZT_CHECK(world.world_size() == 1, "zt_oracle_dump runs on one rank");
  const int64_t B = o.micro_batch, T = o.seq_len;
  const Precision precision = parse_precision(o.precision);
  const DType storage = o.activations == "fp32" ? DType::kFloat32 : working_dtype(precision);

  ModelDirReader reader(o.model_dir);
  const ModelConfig& config = reader.config();
  const Batch batch = read_batch(o.tokens_path, B, T, config.vocab_size, o.document_masks);
  std::unique_ptr<Backend> backend = make_cpu_backend();

  // 1. Gradients of one micro-batch.
  const GradPass grads =
      compute_gradients(reader, *backend, batch, B, T, working_dtype(precision), storage);

  // 2. Eval forward and 3. AdamW steps through a stage-0 engine.
  MemoryTracker memory;
  EngineSpec spec;  // stage 0
  spec.model = config;
  spec.precision = precision;
  spec.activation_storage = storage;
  spec.micro_batch = B;
  spec.seq_len = T;
  AdamWConfig& adam = spec.optim;
  adam.lr = o.lr;
  adam.min_lr = o.lr;
  adam.warmup_steps = 0;
  adam.beta1 = kBeta1;
  adam.beta2 = kBeta2;
  adam.eps = kEps;
  adam.weight_decay = kWeightDecay;
  adam.clip = 0.0f;  // disabled
  ZeroEngine engine(spec, *backend, world, memory);
  engine.load_from(reader);
  const double eval_loss =
      engine.eval_loss_sum(batch.inputs.data(), batch.targets.data(), batch.doc_start()) /
      static_cast<double>(batch.counted);
  const std::vector<float> logits_copy = engine.model().logits();

  std::vector<double> losses;
  for (int64_t step = 1; step <= o.steps; ++step) {
    std::vector<const int32_t*> doc_starts;
    if (batch.doc_start()) doc_starts.push_back(batch.doc_start());
    const StepStats st = engine.train_step({batch.inputs.data()}, {batch.targets.data()}, o.lr,
                                           step, batch.counted, doc_starts);
    ZT_CHECK(!st.skipped,
             "step " + std::to_string(step) +
                 " overflowed in fp16 and was skipped: the reference has no such step");
    losses.push_back(st.loss);
  }

  // Output file.
  const std::string where = o.out_path;
  h5::Id file = h5::create_file(o.out_path);
  write_f32(file, "logits", {B * T, config.vocab_size}, logits_copy.data(), where);
  write_f64(file, "loss", {eval_loss}, where);
  write_f64(file, "loss_grad_pass", {grads.loss}, where);
  write_f64(file, "losses_adamw", losses, where);
  {
    h5::Id ds = h5::create_dataset(file, "tokens", DType::kInt32, {B, T + 1}, where + ":tokens");
    h5::write_box(ds, DType::kInt32, {0, 0}, {B, T + 1}, batch.window.data(), where + ":tokens");
    ds.close(where + ":tokens");
  }
  {
    h5::Id ds = h5::open_dataset(file, "losses_adamw", where);
    h5::write_attr_string(ds, "lr", std::to_string(o.lr), where);
    h5::write_attr_string(ds, "betas", "0.9,0.95", where);
    h5::write_attr_string(ds, "eps", "1e-8", where);
    h5::write_attr_string(ds, "weight_decay", "0.1 (projections, lm_head; not norms, embedding)",
                          where);
    h5::write_attr_string(ds, "clip", "disabled", where);
    h5::write_attr_string(ds, "precision", o.precision, where);
    h5::write_attr_string(ds, "activations", o.activations, where);
    ds.close(where + ":losses_adamw");
  }
  {
    h5::Id grad_group = h5::wrap(H5Gcreate2(file, "grad", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                 H5Gclose, "cannot create group 'grad'", where);
    grad_group.close(where + ":grad");
  }
  for (const char* group : {"act", "act/final"}) {
    h5::Id g = h5::wrap(H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                        std::string("cannot create group '") + group + "'", where);
    g.close(where + ":" + group);
  }
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const std::string name = "act/" + std::to_string(l);
    h5::Id g = h5::wrap(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                        H5Gclose, "cannot create group '" + name + "'", where);
    g.close(where + ":" + name);
  }
  for (const auto& [name, act] : grads.acts)
    write_f32(file, name, act.first, act.second.data(), where);
  const ParamLayout& layout = engine.layout();
  for (const TensorInfo& t : layout.tensors())
    write_f32(file, "grad/" + t.name, t.shape,
              grads.group_grads[static_cast<size_t>(t.group)].data() + t.offset, where);
  file.close(where);
  std::printf("zt_oracle_dump: %s precision=%s B=%lld T=%lld loss=%.9f steps=%lld -> %s\n",
              o.model_dir.c_str(), o.precision.c_str(), static_cast<long long>(B),
              static_cast<long long>(T), eval_loss, static_cast<long long>(o.steps),
              o.out_path.c_str());
  return 0;
}

}  // namespace
}  // namespace zt

int main(int argc, char** argv) {
  try {
    return zt::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_oracle_dump: error: %s\n", e.what());
    return 1;
  }
}
