// bf16 activation storage (backend.h's storage contract, LlamaModel's storage type) on the CPU:
//   - every op given bf16 views stores exactly its fp32 result on the widened inputs rounded
//     once to nearest even; an accumulating output (+=) is widened, added to and rounded once.
//     The fp32 result is the same kernel's on fp32 views, so the comparison is bitwise;
//   - a bf16 model's arena is what the plan and the estimate say, about half of fp32's, with the
//     statistics still fp32; its training is deterministic.
// The rounding points themselves are checked against PyTorch by the oracle test (bf16-act).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_math.h"
#include "engine/activation_checkpointing.h"
#include "engine/estimator.h"
#include "model/config.h"
#include "model/init.h"
#include "model/layout.h"
#include "model/llama.h"
#include "model/lora.h"
#include "support/engine_spec_for.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/ignored_target.h"
#include "util/memory.h"

namespace zt {
namespace {

// n bf16-representable values in [-scale, scale], as fp32 and as bf16.
struct Values {
  std::vector<float> f32;
  std::vector<bf16_t> bf16;
};
Values values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Values v;
  for (int64_t i = 0; i < n; ++i) {
    v.bf16.push_back(float_to_bf16(dist(gen)));
    v.f32.push_back(bf16_to_float(v.bf16.back()));
  }
  return v;
}

// The bf16 output must be the fp32 output rounded once, element for element.
void expect_rounded(const std::vector<bf16_t>& got, const std::vector<float>& fp32,
                    const std::string& what) {
  ASSERT_EQ(got.size(), fp32.size()) << what;
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != float_to_bf16(fp32[i]) ? 1 : 0;
  EXPECT_EQ(wrong, 0) << what << ": elements not equal to the rounded fp32 result";
}

TEST(ActivationStorage, EveryOpRoundsItsOutputOnce) {
  auto be = make_cpu_backend();
  const int64_t B = 2, T = 8, H = 4, Hkv = 2, hd = 8, M = B * T, D = H * hd, KV = Hkv * hd;
  const int64_t N = 24, V = 40;
  Values x = values(M * D, 1), w = values(N * D, 2, 0.2f), dy = values(M * N, 3);
  Values dx0 = values(M * D, 4), g = values(D, 5);

  {  // matmul forward and backward (dx accumulated)
    std::vector<float> y32(M * N), dx32 = dx0.f32, dw32(N * D, 0.0f), dwb(N * D, 0.0f);
    std::vector<bf16_t> yb(M * N), dxb = dx0.bf16;
    be->matmul_forward(y32.data(), x.f32.data(), w.f32.data(), M, N, D);
    be->matmul_forward(yb.data(), x.bf16.data(), w.f32.data(), M, N, D);
    expect_rounded(yb, y32, "matmul_forward y");
    be->matmul_backward(dx32.data(), dw32.data(), dy.f32.data(), x.f32.data(), w.f32.data(), M, N,
                        D, true, GradWrite::kAdd);
    be->matmul_backward(dxb.data(), dwb.data(), dy.bf16.data(), x.bf16.data(), w.f32.data(), M, N,
                        D, true, GradWrite::kAdd);
    expect_rounded(dxb, dx32, "matmul_backward dx (+=)");
    EXPECT_EQ(dwb, dw32) << "matmul_backward dw (fp32)";
  }
  {  // RMSNorm
    std::vector<float> y32(M * D), r32(M), rb(M), dx32 = dx0.f32, dg32(D, 0.0f), dgb(D, 0.0f);
    std::vector<bf16_t> yb(M * D), dxb = dx0.bf16;
    Values dyn = values(M * D, 6);
    be->rmsnorm_forward(y32.data(), r32.data(), x.f32.data(), g.f32.data(), M, D, 1e-5f);
    be->rmsnorm_forward(yb.data(), rb.data(), x.bf16.data(), g.f32.data(), M, D, 1e-5f);
    expect_rounded(yb, y32, "rmsnorm_forward y");
    EXPECT_EQ(rb, r32) << "rmsnorm_forward rstd (fp32)";
    be->rmsnorm_backward(dx32.data(), dg32.data(), dyn.f32.data(), x.f32.data(), g.f32.data(),
                         r32.data(), M, D);
    be->rmsnorm_backward(dxb.data(), dgb.data(), dyn.bf16.data(), x.bf16.data(), g.f32.data(),
                         rb.data(), M, D);
    expect_rounded(dxb, dx32, "rmsnorm_backward dx (+=)");
    EXPECT_EQ(dgb, dg32) << "rmsnorm_backward dg (fp32)";
  }
  {  // RoPE in place, both directions
    std::vector<float> r32 = x.f32;
    std::vector<bf16_t> rb = x.bf16;
    be->rope_forward(r32.data(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
    be->rope_forward(rb.data(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
    expect_rounded(rb, r32, "rope_forward");
    r32 = x.f32, rb = x.bf16;
    be->rope_backward(r32.data(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
    be->rope_backward(rb.data(), B, T, H, hd, RopeSpec::unscaled(10000.0f));
    expect_rounded(rb, r32, "rope_backward");
  }
  {  // attention: outputs rounded, lse fp32; the backward reads the stored out
    Values k = values(M * KV, 7), v = values(M * KV, 8), dout = values(M * D, 9);
    std::vector<float> o32(M * D), l32(B * H * T), lb(B * H * T);
    std::vector<bf16_t> ob(M * D);
    be->attention_forward(o32.data(), l32.data(), x.f32.data(), k.f32.data(), v.f32.data(), B, T, H,
                          Hkv, hd);
    be->attention_forward(ob.data(), lb.data(), x.bf16.data(), k.bf16.data(), v.bf16.data(), B, T,
                          H, Hkv, hd);
    expect_rounded(ob, o32, "attention_forward out");
    EXPECT_EQ(lb, l32) << "attention_forward lse (fp32)";
    std::vector<float> o_stored(M * D);
    for (int64_t i = 0; i < M * D; ++i) o_stored[i] = bf16_to_float(ob[i]);
    std::vector<float> dq32(M * D), dk32(M * KV), dv32(M * KV);
    std::vector<bf16_t> dqb(M * D), dkb(M * KV), dvb(M * KV);
    be->attention_backward(dq32.data(), dk32.data(), dv32.data(), dout.f32.data(), x.f32.data(),
                           k.f32.data(), v.f32.data(), o_stored.data(), lb.data(), B, T, H, Hkv,
                           hd);
    be->attention_backward(dqb.data(), dkb.data(), dvb.data(), dout.bf16.data(), x.bf16.data(),
                           k.bf16.data(), v.bf16.data(), ob.data(), lb.data(), B, T, H, Hkv, hd);
    expect_rounded(dqb, dq32, "attention_backward dq");
    expect_rounded(dkb, dk32, "attention_backward dk");
    expect_rounded(dvb, dv32, "attention_backward dv");
  }
  {  // SwiGLU and the residual add
    Values up = values(M * D, 10);
    std::vector<float> h32(M * D), dg32(M * D), du32(M * D), y32 = dx0.f32;
    std::vector<bf16_t> hb(M * D), dgb(M * D), dub(M * D), yb = dx0.bf16;
    be->glu_forward(h32.data(), x.f32.data(), up.f32.data(), M * D);
    be->glu_forward(hb.data(), x.bf16.data(), up.bf16.data(), M * D);
    expect_rounded(hb, h32, "glu_forward h");
    be->glu_backward(dg32.data(), du32.data(), dx0.f32.data(), x.f32.data(), up.f32.data(), M * D);
    be->glu_backward(dgb.data(), dub.data(), dx0.bf16.data(), x.bf16.data(), up.bf16.data(), M * D);
    expect_rounded(dgb, dg32, "glu_backward dgate");
    expect_rounded(dub, du32, "glu_backward dup");
    be->add_inplace(y32.data(), x.f32.data(), M * D);
    be->add_inplace(yb.data(), x.bf16.data(), M * D);
    expect_rounded(yb, y32, "add_inplace y (+=)");
  }
  {  // embedding rows (fp32 table into bf16 rows) and its fp32 gradient
    Values table = values(V * D, 11);
    std::vector<int32_t> tokens(M);
    for (int64_t i = 0; i < M; ++i) tokens[i] = static_cast<int32_t>((i * 7) % V);
    std::vector<float> e32(M * D), t32(V * D, 0.0f), tb(V * D, 0.0f);
    std::vector<bf16_t> eb(M * D);
    be->embedding_forward(e32.data(), tokens.data(), table.f32.data(), M, D);
    be->embedding_forward(eb.data(), tokens.data(), table.f32.data(), M, D);
    expect_rounded(eb, e32, "embedding_forward x");
    be->embedding_backward(t32.data(), dx0.f32.data(), tokens.data(), M, D);
    be->embedding_backward(tb.data(), dx0.bf16.data(), tokens.data(), M, D);
    EXPECT_EQ(tb, t32) << "embedding_backward dtable (fp32)";
    // Cross-entropy in place on bf16 logits (dlogits aliases logits).
    Values logits = values(M * V, 12, 4.0f);
    std::vector<float> c32 = logits.f32, loss32(M), lossb(M);
    std::vector<bf16_t> cb = logits.bf16;
    be->cross_entropy(loss32.data(), c32.data(), c32.data(), tokens.data(), M, V, 0.25f);
    be->cross_entropy(lossb.data(), cb.data(), cb.data(), tokens.data(), M, V, 0.25f);
    expect_rounded(cb, c32, "cross_entropy dlogits (in place)");
    EXPECT_EQ(lossb, loss32) << "cross_entropy losses (fp32)";
  }
}

// Cross-entropy widens and rounds a row at a time in each thread's own rows: at a size its threads
// share (M·V past the CPU backend's parallel threshold) and with ignored targets, every way the
// head calls it on bf16 logits (in place, loss only) and the others (a separate bf16 dlogits, fp32
// dlogits) gives the fp32 kernel's losses and its dlogits rounded once.
TEST(ActivationStorage, CrossEntropyOnBf16RowsGivesTheFp32ResultRoundedOnce) {
  auto be = make_cpu_backend();
  constexpr int64_t M = 48, V = 1000;
  static_assert(M * V > cpu::kParallelMinElements, "the rows must be shared among threads");
  Values logits = values(M * V, 21, 6.0f);
  std::vector<int32_t> targets(M);
  for (int64_t m = 0; m < M; ++m)
    targets[m] = m % 7 == 3 ? kIgnoredTarget : static_cast<int32_t>((m * 131) % V);
  std::vector<float> d32 = logits.f32, loss32(M), lossb(M);
  be->cross_entropy(loss32.data(), d32.data(), d32.data(), targets.data(), M, V, 0.5f);

  std::vector<bf16_t> in_place = logits.bf16;
  be->cross_entropy(lossb.data(), in_place.data(), in_place.data(), targets.data(), M, V, 0.5f);
  expect_rounded(in_place, d32, "in place");
  EXPECT_EQ(lossb, loss32) << "in place";

  std::vector<float> loss_only(M);
  be->cross_entropy(loss_only.data(), TensorView(), logits.bf16.data(), targets.data(), M, V, 0.5f);
  EXPECT_EQ(loss_only, loss32) << "loss only";

  std::vector<bf16_t> separate(M * V);
  std::vector<float> d_wide(M * V);
  be->cross_entropy(lossb.data(), separate.data(), logits.bf16.data(), targets.data(), M, V, 0.5f);
  expect_rounded(separate, d32, "separate bf16 dlogits");
  be->cross_entropy(lossb.data(), d_wide.data(), logits.bf16.data(), targets.data(), M, V, 0.5f);
  EXPECT_EQ(d_wide, d32) << "fp32 dlogits of bf16 logits";
  EXPECT_EQ(lossb, loss32);
  // dlogits a row past the logits would overwrite rows before they are read: refused.
  std::vector<bf16_t> shifted = logits.bf16;
  shifted.resize(static_cast<size_t>((M + 1) * V));
  EXPECT_THROW(be->cross_entropy(lossb.data(), shifted.data() + V, shifted.data(), targets.data(),
                                 M, V, 0.5f),
               Error);
}

struct StorageRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // per group; none for an evaluation
  std::vector<float> logits;              // an evaluation's
  int64_t activation_bytes = 0;
};

// bf16_params: the working params passed as bf16 views (the engine with bf16 activations)
// instead of their exact fp32 widening. training = false: an evaluation's forward alone.
StorageRun train_one(const ModelConfig& c, int64_t B, int64_t T, DType storage,
                     ActivationCheckpointing ac = {}, bool bf16_params = false,
                     bool training = true) {
  auto be = make_cpu_backend();
  MemoryTracker memory;
  LlamaModel model(c, *be, memory, B, T, ac, 0, storage);
  const ParamLayout& layout = model.layout();
  std::vector<std::vector<float>> params(layout.num_groups());
  for (int g = 0; g < layout.num_groups(); ++g) {
    params[g].assign(layout.groups()[g].numel, 0.0f);
    for (int ti : layout.groups()[g].tensors) {
      const TensorInfo& t = layout.tensors()[ti];
      init_tensor_range(c, t, 7, 0, t.numel, params[g].data() + t.offset);
      // LoRA's B starts at zero (PEFT's): give it values, so that the adapters change the output.
      if (t.is_lora() && t.name.find("lora_B") != std::string::npos)
        for (int64_t i = 0; i < t.numel; ++i)
          params[g][t.offset + i] = 0.01f * static_cast<float>((i * 7) % 13 - 6);
    }
    for (float& p : params[g]) p = round_to_bf16(p);
  }
  std::vector<std::vector<bf16_t>> params_bf16(layout.num_groups());
  for (int g = 0; g < layout.num_groups(); ++g) {
    params_bf16[g].resize(params[g].size());
    floats_to_bf16(params[g].data(), params_bf16[g].data(), params[g].size());
  }
  auto group_params = [&](int g) -> ConstTensorView {
    if (bf16_params) return params_bf16[g].data();
    return params[g].data();
  };
  std::vector<int32_t> tokens(2 * B * T);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>((i * 31 + 3) % c.vocab_size);
  model.set_batch(tokens.data(), tokens.data() + B * T);
  // Each compute unit with a layer's adapter group (LoRA), which trains alone here.
  auto adapters = [&](int u) -> ConstTensorView {
    const int a = u >= 1 && u < layout.head_group() ? layout.adapter_group(u - 1) : -1;
    return a < 0 ? ConstTensorView() : group_params(a);
  };
  for (int u = 0; u < layout.num_compute_units(); ++u)
    model.forward_group(u, group_params(u), training, 1.0f / static_cast<float>(B * T), {},
                        adapters(u));
  std::vector<std::vector<float>> grads(training ? layout.num_groups() : 0);
  for (int u = training ? layout.num_compute_units() - 1 : -1; u >= 0; --u) {
    grads[u].assign(params[u].size(), 0.0f);
    model.backward_group(u, group_params(u), grads[u].data());
  }
  StorageRun run;
  run.losses.assign(model.token_losses(), model.token_losses() + B * T);
  run.grads = grads;
  if (!training) run.logits = model.logits();
  run.activation_bytes = static_cast<int64_t>(memory.current(MemCategory::kActivations));
  return run;
}

TEST(ActivationStorage, Bf16ArenaIsWhatThePlanAndTheEstimateSay) {
  const ModelConfig c = preset_config("small");
  const int64_t B = 2, T = 64;
  const ActivationPlan f32 = ActivationPlan::make(c, B, T, {}, 0, DType::kFloat32);
  const ActivationPlan bf16 = ActivationPlan::make(c, B, T, {}, 0, DType::kBf16);
  // Everything but rstd, lse and the losses halves; those are a few percent here.
  EXPECT_LT(bf16.device_bytes(), f32.device_bytes() * 53 / 100);
  EXPECT_GT(bf16.device_bytes(), f32.device_bytes() / 2);
  const StorageRun a = train_one(c, B, T, DType::kBf16);
  // inputs, targets, document starts, grad ids, and the loss gradient's scale
  const int64_t tokens_bytes = (4 * B * T + 1) * 4;
  EXPECT_EQ(a.activation_bytes, bf16.device_bytes() + tokens_bytes);
  EngineSpec bf16_activations = engine_spec_for(c, ZeroConfig{}, B, T);
  bf16_activations.activation_storage = DType::kBf16;
  const MemoryEstimate e = estimate_memory(bf16_activations, 1);
  EXPECT_EQ(e.activations, a.activation_bytes);
}

TEST(ActivationStorage, Bf16TrainingIsDeterministicAndNearFp32) {
  const ModelConfig c = preset_config("tiny");
  const StorageRun a = train_one(c, 2, 16, DType::kBf16);
  const StorageRun b = train_one(c, 2, 16, DType::kBf16);
  EXPECT_EQ(a.losses, b.losses) << "bf16 storage must be deterministic";
  EXPECT_EQ(a.grads, b.grads) << "bf16 storage's backward must be deterministic";
  const StorageRun f = train_one(c, 2, 16, DType::kFloat32);
  double sa = 0, sf = 0;
  for (size_t i = 0; i < a.losses.size(); ++i) sa += a.losses[i], sf += f.losses[i];
  // Guards gross mistakes only: the oracle test measures the real agreement (about 1e-5).
  EXPECT_NEAR(sa / sf, 1.0, 1e-2);
  EXPECT_NE(a.losses, f.losses) << "bf16 storage rounded nothing";
}

// The engine hands bf16 activations the bf16 working params as stored (no fp32 upcast): every op
// widens them exactly, so the losses and gradients are the bits of the fp32-widened params.
TEST(ActivationStorage, Bf16ParamsReadAsStoredGiveTheUpcastBits) {
  const ModelConfig c = preset_config("tiny");
  const StorageRun upcast = train_one(c, 2, 16, DType::kBf16);
  const StorageRun as_stored = train_one(c, 2, 16, DType::kBf16, {}, /*bf16_params=*/true);
  EXPECT_EQ(as_stored.losses, upcast.losses);
  EXPECT_EQ(as_stored.grads, upcast.grads);
}

// Checkpointed layers recompute their bf16 activations from the kept (bf16) input: the same
// ops on the same stored values, so the same bits, whether the input stays on the device or goes
// to the host pool and back.
TEST(ActivationStorage, Bf16CheckpointingRecomputesTheSameBits) {
  const ModelConfig c = preset_config("tiny");
  const StorageRun plain = train_one(c, 2, 16, DType::kBf16);
  for (const ActivationCheckpointing ac :
       {ActivationCheckpointing{1, false}, ActivationCheckpointing{1, true},
        ActivationCheckpointing{2, true}, ActivationCheckpointing{0, false, true}}) {
    const StorageRun ckpt = train_one(c, 2, 16, DType::kBf16, ac);
    const std::string what = activation_checkpointing_name(ac) + (ac.on_host ? " on host" : "");
    EXPECT_EQ(ckpt.losses, plain.losses) << what;
    EXPECT_EQ(ckpt.grads, plain.grads) << what;
  }
}

// Selective checkpointing keeps each layer's activations but the two norm outputs [M, D] and
// the SwiGLU product [M, F], which one scratch holds for all layers: L − 1 layers' worth of them
// less, counted from the model's shapes (not from the arena code), at either storage.
TEST(ActivationStorage, SelectivePlanDropsTheRecomputedTensorsOfAllButOneLayer) {
  for (const char* preset : {"tiny", "125m", "1b"}) {
    const ModelConfig c = preset_config(preset);
    for (DType storage : {DType::kFloat32, DType::kBf16}) {
      const int64_t B = 2, T = 64, M = B * T;
      auto aligned = [&](int64_t elements) {
        const int64_t bytes = elements * static_cast<int64_t>(dtype_size(storage));
        return (bytes + kActivationAlignment - 1) / kActivationAlignment * kActivationAlignment;
      };
      const int64_t recomputed = 2 * aligned(M * c.hidden_size) + aligned(M * c.intermediate_size);
      ActivationCheckpointing selective;
      selective.selective = true;
      const ActivationPlan none = ActivationPlan::make(c, B, T, {}, 0, storage);
      const ActivationPlan sel = ActivationPlan::make(c, B, T, selective, 0, storage);
      EXPECT_EQ(none.layer_saved - sel.layer_saved, (c.num_layers - 1) * recomputed)
          << preset << " " << dtype_name(storage);
      EXPECT_EQ(sel.residual, none.residual);
      EXPECT_EQ(sel.head, none.head);
      EXPECT_EQ(sel.grad_scratch, none.grad_scratch);
      EXPECT_LT(ActivationPlan::make(c, B, T, {1, false}, 0, storage).device_bytes(),
                sel.device_bytes());
    }
  }
}

int64_t aligned_bytes(int64_t bytes) {
  return (bytes + kActivationAlignment - 1) / kActivationAlignment * kActivationAlignment;
}

// A forward-only model (eval) keeps two residual buffers [M, D], one layer's
// activations (what full checkpointing's scratch holds) and the head's, no backward temporary
// (with LoRA adapters, their product's buffer alone), and gives the bits of a model that keeps
// everything: the same losses and logits. A training forward, a backward and a checkpointing
// policy are refused.
TEST(ActivationStorage, ForwardOnlyKeepsOneLayerAndTwoResidualBuffersForTheSameBits) {
  const ModelConfig c = preset_config("tiny");
  const int64_t B = 2, T = 16, M = B * T;
  ActivationCheckpointing forward_only;
  forward_only.forward_only = true;
  ModelConfig adapted = c;  // adapters on every projection, the widest product the MLP's
  LoraSpec lora;
  lora.rank = 4;
  lora.set_targets({"all-linear"}, "test");
  adapted.set_lora(lora);
  for (DType storage : {DType::kFloat32, DType::kBf16}) {
    const std::string what = dtype_name(storage);
    const auto element = static_cast<int64_t>(dtype_size(storage));
    const ActivationPlan all = ActivationPlan::make(c, B, T, {}, 0, storage);
    const ActivationPlan plan = ActivationPlan::make(c, B, T, forward_only, 0, storage);
    EXPECT_EQ(plan.residual, 2 * aligned_bytes(M * c.hidden_size * element)) << what;
    EXPECT_EQ(plan.layer_saved, ActivationPlan::make(c, B, T, {1, false}, 0, storage).layer_saved)
        << what;
    EXPECT_EQ(plan.head, all.head) << what;
    EXPECT_EQ(plan.grad_scratch, 0) << what;
    EXPECT_EQ(ActivationPlan::make(adapted, B, T, forward_only, 0, storage).grad_scratch,
              aligned_bytes(M * c.intermediate_size * element))
        << what;
    const StorageRun plain = train_one(c, B, T, storage, {}, false, /*training=*/false);
    for (const ModelConfig& config : {c, adapted}) {
      const std::string which = what + (config.lora.enabled() ? " with LoRA" : "");
      const StorageRun kept = train_one(config, B, T, storage, {}, false, /*training=*/false);
      const StorageRun alone = train_one(config, B, T, storage, forward_only, false, false);
      EXPECT_EQ(alone.losses, kept.losses) << which;
      EXPECT_EQ(alone.logits, kept.logits) << which;
      const ActivationPlan counted = ActivationPlan::make(config, B, T, forward_only, 0, storage);
      EXPECT_EQ(alone.activation_bytes, counted.device_bytes() + counted.token_bytes) << which;
      // The adapters count: their output is not the base model's.
      EXPECT_EQ(alone.losses == plain.losses, !config.lora.enabled()) << which;
    }
  }
  // What a forward-only model cannot do, it refuses.
  auto be = make_cpu_backend();
  MemoryTracker memory;
  LlamaModel model(c, *be, memory, B, T, forward_only);
  const int g = model.layout().embed_group();
  std::vector<float> embedding(static_cast<size_t>(model.layout().groups()[g].numel), 0.0f);
  EXPECT_THROW(model.forward_group(g, embedding.data(), true, 1.0f), Error);
  EXPECT_THROW(model.backward_group(g, embedding.data(), embedding.data()), Error);
  ActivationCheckpointing both = forward_only;
  both.every = 1;
  EXPECT_THROW(ActivationPlan::make(c, B, T, both), Error);
}

}  // namespace
}  // namespace zt
