"""The small random configs test_hf_families.py checks, one per family, and how each family's
reference is built, run and written (transformers 4.46 or 4.49, written as a checkpoint of its
own, loaded with overrides)."""

# Small random configs, one per family: (transformers config class, model class, kwargs).
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rms_norm_eps=1e-5, initializer_range=0.1)
GEMMA3_COMMON = dict(
    head_dim=32, pad_token_id=32, query_pre_attn_scalar=24, attn_logit_softcapping=None,
    final_logit_softcapping=None, sliding_window=12, num_hidden_layers=4, rope_theta=1000000.0,
    sliding_window_pattern=3, rope_local_base_freq=100.0, rope_scaling=None)
FAMILIES = {
    # Llama 2/3 shape: grouped-query heads and a Llama-3 rope_theta. pad_token_id is the space
    # (byte 32, frequent in the data): transformers' embedding takes it as padding_idx, whose row
    # gets no gradient from its inputs.
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=500000.0, pad_token_id=32)),
    # Llama 3.1/3.2's rope_scaling: with hd = 16 and θ = 500000 the wavelengths 2π/inv_i are
    # 6.3, 32, 167, ...: one in each of the three bands of an original context of 64 (kept below
    # 64/4, interpolated up to 64/1, divided by 8 above), on windows of 33 positions.
    "llama3-rope": ("LlamaConfig", "LlamaForCausalLM",
                    dict(rope_theta=500000.0, rope_scaling={
                        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Llama 3.2 1B/3B's shape: tied embeddings (no lm_head tensor in the checkpoint) with the
    # llama3 rope_scaling; a pad_token_id (as SmolLM2's) whose row only the head's gradient reaches.
    "llama3.2-tied": ("LlamaConfig", "LlamaForCausalLM",
                      dict(rope_theta=500000.0, tie_word_embeddings=True, pad_token_id=32,
                           rope_scaling={
                          "rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # Linear position interpolation (the older "type" key, as older checkpoints write it).
    "llama-linear-rope": ("LlamaConfig", "LlamaForCausalLM",
                          dict(rope_scaling={"type": "linear", "factor": 4.0})),
    # YaRN as Qwen documents it for Qwen2.5 and Qwen3 past 32,768 tokens (factor 4, the original
    # length the file's max_position_embeddings, here 128): with hd = 16 and θ = 10000 the band
    # runs over pairs 0-3 (kept below, blended, divided by 4 above), cos and sin times
    # 0.1·ln 4 + 1.
    "qwen2-yarn": ("Qwen2Config", "Qwen2ForCausalLM",
                   dict(rope_theta=10000.0, use_sliding_window=False, sliding_window=4096,
                        rope_scaling={"type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 128})),
    # YaRN with max_position_embeddings (128) past the original length (64), a factor (3) other
    # than their ratio, the band's ends and the factor on cos and sin given. Read as vLLM,
    # llama.cpp and transformers since its fix of issue 38224 read it: the band from the
    # original length, which transformers 4.46 takes from max_position_embeddings, so the
    # reference loads with that set to 64 (REFERENCE_OVERRIDES).
    "llama-yarn-extended": ("LlamaConfig", "LlamaForCausalLM", dict(rope_scaling={
        "rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 64,
        "beta_fast": 4.0, "beta_slow": 0.25, "attention_factor": 1.25})),
    # Qwen's setting on Qwen3 (its documented use past 32,768 tokens) and on SmolLM3, whose
    # NoPE layers take no rotation, so no yarn magnitude either.
    "qwen3-yarn": ("LlamaConfig", "LlamaForCausalLM", dict(
        head_dim=32, rope_theta=1000000.0, rope_scaling={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128})),
    "smollm3-yarn": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_hidden_layers=4, rope_theta=10000.0, tie_word_embeddings=True, pad_token_id=32,
        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 128})),
    # Ministral 3 (ministral3_reference.py: written as Ministral3Config writes it, rope_parameters
    # alone, as Mistral AI's files give them: yarn with factor 16, beta 32 and 1, mscale and
    # mscale_all_dim 1, llama_4_scaling_beta 0.1), on windows below the original length (64)
    # where its query scale is 1, and a head_dim other than D/H as the 3B's 128 (not 3072 / 32).
    # With θ = 1e6 and hd = 32, pairs 0-2 turn 10, 4.3 and 1.8 times over 64 positions (blended),
    # the others less than once (divided by 16).
    "ministral3": ("LlamaConfig", "LlamaForCausalLM", dict(
        head_dim=32, rope_theta=1000000.0, max_position_embeddings=64, pad_token_id=32,
        rope_scaling={"rope_type": "yarn", "factor": 16.0,
                      "original_max_position_embeddings": 64, "attention_factor": 1.0})),
    # Mistral without a sliding window.
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=None,
                                                             rope_theta=1000000.0)),
    # Mistral-Nemo's shape: a head_dim other than hidden_size / heads (its 128, not 5120 / 32),
    # which MistralConfig reads, and no window (exported as a Llama with that head_dim).
    "mistral-nemo": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=None, head_dim=32,
                                                                  rope_theta=1000000.0)),
    # Mistral with a window of 12 keys, shorter than the sequences here (32 positions) and than
    # the prompt generate starts from (24 tokens): the keys slide.
    "mistral-window": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=12)),
    # Qwen2/2.5: q/k/v biases (no o bias), a large rope_theta, the sliding-window keys of every
    # Qwen2 config.json with use_sliding_window false, tied embeddings as Qwen2.5-0.5B.
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                   sliding_window=4096, max_window_layers=2)),
    # Llama's attention_bias (all four projections) with a head_dim other than D/H.
    "llama-attention-bias": ("LlamaConfig", "LlamaForCausalLM",
                             dict(attention_bias=True, head_dim=32)),
    # Qwen3: q/k norms and head_dim 32 ≠ D/H (built as described above).
    "qwen3": ("LlamaConfig", "LlamaForCausalLM", dict(head_dim=32, rope_theta=1000000.0)),
    # Phi-3 (mini-4k, medium-4k): Llama's model with q/k/v stored as one qkv_proj and gate/up as
    # one gate_up_proj; grouped-query heads (COMMON) put k and v at offsets other than q's size.
    # Phi3Config's pad_token_id (32000) is outside this vocabulary: the space, as for Llama.
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(sliding_window=None, pad_token_id=32)),
    # Phi-3 mini-4k's config names a sliding window (2047 there, half its 4096 positions); here
    # one of 12 keys, shorter than every sequence.
    "phi3-window": ("Phi3Config", "Phi3ForCausalLM", dict(sliding_window=12, pad_token_id=32,
                                                          rope_theta=500000.0)),
    # Phi-3.5-mini's longrope on windows of original_max_position_embeddings (32) tokens: the
    # short factors divide the frequencies (spread here so that each matters) and cos and sin are
    # scaled by sqrt(1 + ln(128/32)/ln 32) ≈ 1.18. Longer windows would take the long factors.
    "phi3-longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        sliding_window=None, pad_token_id=32, original_max_position_embeddings=32,
        rope_scaling={"type": "longrope",
                      "short_factor": [1.0, 1.08, 2.02, 3.3, 4.1, 6.07, 8.3, 10.1],
                      "long_factor": [20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0]})),
    # Phi-3-mini-128k and Phi-3.5-mini fine-tuned beyond their original length: windows of 32
    # tokens past original_max_position_embeddings 16 take the long factors (transformers 4.46
    # chooses by the forward's sequence length), cos and sin scaled by sqrt(1 + ln 8 / ln 16).
    "phi3-longrope-long": ("Phi3Config", "Phi3ForCausalLM", dict(
        sliding_window=None, pad_token_id=32, original_max_position_embeddings=16,
        rope_scaling={"type": "longrope",
                      "short_factor": [1.0, 1.08, 2.02, 3.3, 4.1, 6.07, 8.3, 10.1],
                      "long_factor": [1.3, 2.7, 4.9, 7.3, 11.9, 17.1, 23.7, 31.3]})),
    # Phi-4-mini: RoPE on the leading int(head_dim · partial_rotary_factor) elements of each head
    # (12 of 16 here, as its 96 of 128), which transformers' Phi3 applies from 4.49 (the families
    # of PARTIAL_ROTARY run under .venv/transformers-4.49); first without scaling.
    "phi3-partial-rotary": ("Phi3Config", "Phi3ForCausalLM", dict(
        sliding_window=None, pad_token_id=32, partial_rotary_factor=0.75)),
    # Phi-4-mini's whole shape: partial rotation with longrope (6 factors, one per rotated pair)
    # and tied embeddings, on windows within the original length (the short factors), then past
    # it (the long ones).
    "phi4-mini-longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        sliding_window=None, pad_token_id=32, partial_rotary_factor=0.75, tie_word_embeddings=True,
        original_max_position_embeddings=32,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.3, 2.1, 3.7, 5.3, 8.9],
                      "long_factor": [20.0, 21.0, 22.0, 23.0, 24.0, 25.0]})),
    "phi4-mini-longrope-long": ("Phi3Config", "Phi3ForCausalLM", dict(
        sliding_window=None, pad_token_id=32, partial_rotary_factor=0.75, tie_word_embeddings=True,
        original_max_position_embeddings=16,
        rope_scaling={"type": "longrope", "short_factor": [1.0, 1.3, 2.1, 3.7, 5.3, 8.9],
                      "long_factor": [1.3, 2.9, 5.1, 9.7, 15.3, 27.1]})),
    # SmolLM3 (newer than any transformers that runs here): Llama whose every fourth layer takes
    # no RoPE (NoPE), tied embeddings; built as described in the docstring. rope_theta is Llama's
    # 10000, not SmolLM3-3B's 5e6, so that a layer rotated or not moves the loss well past the
    # bound.
    "smollm3": ("LlamaConfig", "LlamaForCausalLM", dict(
        num_hidden_layers=4, rope_theta=10000.0, tie_word_embeddings=True, pad_token_id=32)),
    # Gemma (1, CodeGemma): norms scaling by (1 + weight), the embedding's output times
    # sqrt(hidden_size), GeGLU with GELU's tanh form, tied embeddings, head_dim 32 ≠ D/H as
    # gemma-7b's 256 ≠ 3072/16. hidden_act "gelu" with no hidden_activation, as google/gemma-2b's
    # first config.json: transformers 4.46 computes the tanh form for it.
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(
        head_dim=32, pad_token_id=32, hidden_act="gelu", hidden_activation=None)),
    # Gemma 2: Gemma's model with a norm on the attention's and the MLP's outputs before each
    # residual add, scores scaled by query_pre_attn_scalar^-1/2 (24 ≠ head_dim 32) and soft-capped,
    # and soft-capped logits. The caps are small (2 and 3, Google's are 50 and 30) so that these
    # random weights' scores and logits bend well past the bound. The window (every other layer's,
    # from the first) is 12 keys, shorter than every sequence here.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=32, pad_token_id=32, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, sliding_window=12)),
    # Gemma 3's text model (gemma3_reference.py: built on 4.46's Gemma 2, as 4.50 computes it):
    # q/k norms, no caps, the window (12 keys) on every layer but each third (layer 2 attends over
    # every key; Google's models: each sixth), whose RoPE base is rope_theta (1e6), the windowed
    # layers' rope_local_base_freq (100; Google's 10000, far enough from 1e6 on their head_dim of
    # 256, not on 32).
    "gemma3": ("Gemma2Config", "Gemma2ForCausalLM", dict(GEMMA3_COMMON)),
    # ... and gemma-3-4b's text model's linear rope scaling, on the full-attention layers alone.
    "gemma3-linear": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        GEMMA3_COMMON, rope_scaling={"rope_type": "linear", "factor": 4.0})),
    # OLMo 2 (transformers 4.47 and later: run under .venv/transformers-4.49): no norm before the
    # attention or the MLP, one on each one's output before the residual add, and q/k norms over
    # a token's whole projection (weights [H·hd], [Hkv·hd]) before the heads are split; grouped
    # heads, untied, OLMo 2's rope_theta.
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(pad_token_id=32, rope_theta=500000.0)),
    # ... with attention_bias (all four projections), tied embeddings and linear rope scaling
    # (Olmo2Config takes {"type": "linear" or "dynamic", "factor"} and no other).
    "olmo2-bias-linear": ("Olmo2Config", "Olmo2ForCausalLM", dict(
        pad_token_id=None, attention_bias=True, tie_word_embeddings=True,
        rope_scaling={"type": "linear", "factor": 4.0})),
    # OLMo 3 (olmo3_reference.py: built on 4.49's OLMo 2, as 4.57 computes it): OLMo 2's model
    # with a window of 12 keys on all but every fourth layer (Olmo3Config's default layer_types,
    # written out as 4.57 writes them), the windowed layers rotating unscaled and the full ones
    # with yarn, as AllenAI's files give it (factor 4 here, 8 there; an attention_factor that is
    # not 0.1·ln(factor) + 1; the original length the file's max_position_embeddings, see
    # olmo3_reference.py); grouped heads, untied, OLMo's rope_theta.
    "olmo3-yarn": ("Olmo2Config", "Olmo2ForCausalLM", dict(
        num_hidden_layers=4, pad_token_id=32, rope_theta=500000.0, sliding_window=12,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                      "attention_factor": 1.2079441541679836, "beta_fast": 32.0,
                      "beta_slow": 1.0})),
    # ... with attention_bias (all four projections), tied embeddings, no scaling and a window on
    # every other layer (layer_types listing a period of 2).
    "olmo3-bias-tied": ("Olmo2Config", "Olmo2ForCausalLM", dict(
        num_hidden_layers=4, pad_token_id=None, attention_bias=True, tie_word_embeddings=True,
        sliding_window=12, layer_types=["sliding_attention", "full_attention"] * 2)),
    # Granite (transformers 4.46's own GraniteForCausalLM): the embedding's output times 12, the
    # scores times 0.05 (not 1/sqrt(16)), each branch's output times 0.22 before its residual add
    # (granite-3's 12 and 0.22), and the logits divided by 3 (granite-3's are 8 and 16: a divisor
    # that is no power of two rounds 1/s once, within the bound); grouped heads, untied.
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(
        pad_token_id=32, embedding_multiplier=12.0, attention_multiplier=0.05,
        residual_multiplier=0.22, logits_scaling=3.0)),
    # ... with attention_bias (all four projections), tied embeddings (granite-3's) and llama3
    # rope scaling, which its rotary embedding (Llama's) applies.
    "granite-bias-llama3": ("GraniteConfig", "GraniteForCausalLM", dict(
        pad_token_id=None, embedding_multiplier=12.0, attention_multiplier=0.0625,
        residual_multiplier=0.22, logits_scaling=8.0, attention_bias=True,
        tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    # ... tied and with llama3 rope scaling but no biases: the GGUF export llama.cpp's granite
    # reads (rope_freqs.weight, no output tensor); bands that hold two of head_dim 16's eight
    # frequencies, which GGUF's per-frequency factors need to give the parameters back.
    "granite-tied-llama3": ("GraniteConfig", "GraniteForCausalLM", dict(
        pad_token_id=None, embedding_multiplier=12.0, attention_multiplier=0.0625,
        residual_multiplier=0.22, logits_scaling=8.0, tie_word_embeddings=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 8.0, "original_max_position_embeddings": 256})),
    # GLM (transformers 4.49's GlmForCausalLM, as GLM-4-9B-Chat's GlmForCausalLM form): RoPE on
    # the leading half of each head (8 of 16) in adjacent pairs, gate/up stored as one
    # gate_up_proj, q/k/v biases (attention_bias), grouped heads, untied.
    "glm": ("GlmConfig", "GlmForCausalLM", dict(
        head_dim=16, partial_rotary_factor=0.5, attention_bias=True, pad_token_id=32)),
    # ... glm-edge's: the whole head rotated in adjacent pairs, no biases, tied embeddings.
    "glm-edge-tied": ("GlmConfig", "GlmForCausalLM", dict(
        head_dim=16, partial_rotary_factor=1.0, attention_bias=False, tie_word_embeddings=True,
        pad_token_id=None)),
    # GLM-4 with linear rope scaling (factor 4) on the rotated half.
    "glm4-linear": ("GlmConfig", "GlmForCausalLM", dict(
        head_dim=16, partial_rotary_factor=0.5, attention_bias=True, pad_token_id=32,
        rope_scaling={"rope_type": "linear", "factor": 4.0})),
    # GLM-4 with llama3 rope scaling, which transformers applies to the rotated half: of its four
    # frequencies (θ = 10000 over 8 elements: wavelengths 6.3, 63, 628, 6283) one kept, one
    # blended and two divided by 8 in an original context of 64.
    "glm4-llama3": ("GlmConfig", "GlmForCausalLM", dict(
        head_dim=16, partial_rotary_factor=0.5, attention_bias=True, pad_token_id=32,
        rope_theta=10000.0, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    # GLM-4 (glm4_reference.py: built on 4.49's GLM, as 4.57 computes it): GLM's model with norms
    # on the attention's and the MLP's outputs; head_dim 32 ≠ D/H (16 of it rotated), biases.
    "glm4": ("GlmConfig", "GlmForCausalLM", dict(
        head_dim=32, partial_rotary_factor=0.5, attention_bias=True, pad_token_id=32)),
    # ... without biases (GLM-4-32B-0414's), tied, with yarn (Glm4Config takes any rope_scaling)
    # on 12 of each head's 16 elements (partial_rotary_factor 0.75), the original length the
    # file's max_position_embeddings (4.49 takes yarn's band from it).
    "glm4-yarn": ("GlmConfig", "GlmForCausalLM", dict(
        head_dim=16, partial_rotary_factor=0.75, attention_bias=False, pad_token_id=None,
        tie_word_embeddings=True,
        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 128})),
}
# SmolLM3's layers without RoPE (no_rope_layers' zeros: SmolLM3Config's default interval of 4).
SMOLLM3_NO_ROPE_LAYERS = [1, 1, 1, 0]
# The families whose reference is transformers 4.49 (partial_rotary_factor in Phi3; Olmo2, which
# 4.46 does not have).
PARTIAL_ROTARY = {"phi3-partial-rotary", "phi4-mini-longrope", "phi4-mini-longrope-long"}
OLMO3 = {"olmo3-yarn", "olmo3-bias-tied"}
GLM4 = {"glm4", "glm4-yarn", "glm4-llama3", "glm4-linear"}
GLM = GLM4 | {"glm", "glm-edge-tied"}
TRANSFORMERS_449 = PARTIAL_ROTARY | OLMO3 | GLM | {"olmo2", "olmo2-bias-linear"}
MINISTRAL3 = {"ministral3"}
# Families the reference builds on transformers' Llama and writes as their own checkpoints.
WRITTEN_AS = {"qwen3", "qwen3-yarn", "smollm3", "smollm3-yarn", "gemma3",
              "gemma3-linear"} | OLMO3 | GLM4 | MINISTRAL3
# Config attributes the reference loads with in place of its config.json's: transformers 4.46's
# yarn takes its band from max_position_embeddings, later releases (and zerotrain) from the
# original length.
REFERENCE_OVERRIDES = {"llama-yarn-extended": dict(max_position_embeddings=64)}
# The model_type each family's config.json says.
MODEL_TYPES = {"gemma3": "gemma3_text", "gemma3-linear": "gemma3_text", "qwen3-yarn": "qwen3",
               "smollm3-yarn": "smollm3", "olmo3-yarn": "olmo3", "olmo3-bias-tied": "olmo3",
               "glm4": "glm4", "glm4-yarn": "glm4", "glm4-llama3": "glm4", "glm4-linear": "glm4",
               "ministral3": "ministral3"}
QWEN3_KEYS = dict(use_sliding_window=False, sliding_window=None, max_window_layers=2,
                  attention_bias=False)
