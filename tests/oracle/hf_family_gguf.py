"""The GGUF checks of test_hf_families.py: a trained model of each family through llama.cpp's
format as its converter (convert_hf_to_gguf.py) writes it and back, bit for bit, and the models
llama.cpp would compute otherwise refused (SmolLM3, OLMo 2, Granite, yarn, Gemma)."""
import json
import os
import shutil
import sys

from gemma3_reference import GEMMA3_KEYS
from oracle_harness import check, refused, require_venv_modules, run_tool

np, torch = require_venv_modules("numpy", "torch")

def converter_llama_permute(converter):
    """LlamaModel.permute of llama.cpp's convert_hf_to_gguf.py, which its SmolLM3Model inherits:
    the order in which llama.cpp's RoPE (adjacent pairs) reads q_proj's and k_proj's rows."""
    from gguf_reference import class_methods, python_classes
    check([b.id for b in python_classes(converter)["SmolLM3Model"].bases] == ["LlamaModel"],
          f"{converter}: SmolLM3Model is not a LlamaModel")
    return class_methods(converter, "LlamaModel", ("permute",), {})[0]


def gguf_imported_back(zt, path, final, work, name="gguf-imported"):
    """Imports the GGUF file at path into work/name, checks that its tensors are the model
    directory final's, bit for bit, and returns the import's config.json."""
    from gguf_reference import model_dir_tensors
    back = os.path.join(work, name)
    run_tool([zt, "import", path, "--out", back])
    a, b = model_dir_tensors(final), model_dir_tensors(back)
    check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
          "the GGUF import's tensors differ from the exported model's")
    with open(os.path.join(back, "config.json")) as f:
        return json.load(f)


def exported_gguf_is_converters(zt, work, final, exported, arch, config, permute=None):
    """Exports the trained model directory final as an f32 GGUF file and checks it is llama.cpp's
    `arch` (a gguf.MODEL_ARCH name) as its converter writes the safetensors export `exported`:
    the architecture, gguf's tensor names, each tensor's values (q_proj's and k_proj's rows
    through the converter's permute where given); then that it imports back bit for bit. Returns
    (the import's config.json, the tensor count, final's GGUF-ready copy)."""
    import gguf
    import safetensors.torch
    from gguf_reference import read_gguf
    final = gguf_ready_copy(final, work)  # a GGUF file carries its tokenizer
    path = os.path.join(work, "exported.gguf")
    run_tool([zt, "export", final, "--format", "gguf", "--gguf-type", "f32", "--out", path])
    reader = read_gguf(path)
    check(reader.fields["general.architecture"].contents() == arch,
          f"the GGUF export's architecture is not {arch}")
    # The pinned gguf (0.17.1) predates MODEL_ARCH.SMOLLM3, whose tensors llama.cpp names as
    # llama's (the same kinds, TOKEN_EMBD to FFN_UP).
    names = gguf.TensorNameMap(getattr(gguf.MODEL_ARCH, arch.upper(), gguf.MODEL_ARCH.LLAMA),
                               config.num_hidden_layers)
    stored = {t.name: np.array(t.data) for t in reader.tensors}
    hf = {}
    for name in sorted(os.listdir(exported)):
        if name.endswith(".safetensors"):
            hf.update(safetensors.torch.load_file(os.path.join(exported, name)))
    # llama3 rope scaling travels as one more tensor, rope_freqs.weight (its values: oracle_gguf).
    llama3 = (config.rope_scaling or {}).get("rope_type") == "llama3"
    check(("rope_freqs.weight" in stored) == llama3,
          f"the GGUF export's rope_freqs.weight is {'missing' if llama3 else 'there'}")
    check(len(stored) - llama3 == len(hf), f"the GGUF export has {len(stored)} tensors, the "
          f"safetensors export {len(hf)}")
    for hf_name, value in hf.items():
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        check(name in stored, f"the GGUF export has no {name} for {hf_name}")
        want = value.float()
        if permute and hf_name.endswith("q_proj.weight"):
            want = permute(want, config.num_attention_heads, config.num_attention_heads)
        elif permute and hf_name.endswith("k_proj.weight"):
            want = permute(want, config.num_attention_heads, config.num_key_value_heads)
        check(np.array_equal(stored[name].reshape(want.shape), want.numpy()),
              f"{name}: not {hf_name} as llama.cpp's converter writes it")
    return gguf_imported_back(zt, path, final, work), len(hf), final


def check_smollm3_gguf(zt, work, final, exported, source_dir, config, no_rope_layers):
    """A trained SmolLM3 through GGUF as llama.cpp's smollm3 reads it: the export's architecture,
    gguf's tensor names, q_proj's and k_proj's rows permuted by the converter's own
    LlamaModel.permute (every layer, NoPE ones too), and the import gives back the model bit for
    bit (its no_rope_layers from llama.cpp's step of 4); a NoPE pattern llama.cpp cannot run is
    refused."""
    permute = converter_llama_permute(
        os.path.join(source_dir, ".deps/llama-cpp-vocab/convert_hf_to_gguf.py"))
    back_config, count, final = exported_gguf_is_converters(zt, work, final, exported, "smollm3",
                                                            config, permute)
    check(back_config.get("model_type") == "smollm3" and
          back_config.get("no_rope_layers") == no_rope_layers,
          f"the GGUF import reads {back_config.get('model_type')}, no_rope_layers "
          f"{back_config.get('no_rope_layers')}")
    print(f"the GGUF export is llama.cpp's smollm3 ({count} tensors as the converter writes "
          "them) and imports back bit for bit", flush=True)
    # A NoPE layer where llama.cpp's smollm3 rotates: refused, no file left.
    moved = os.path.join(work, "moved-nope")
    shutil.copytree(final, moved)
    with open(os.path.join(moved, "config.json")) as f:
        moved_config = json.load(f)
    moved_config["no_rope_layers"] = [1, 1, 0, 1]
    with open(os.path.join(moved, "config.json"), "w") as f:
        json.dump(moved_config, f)
    out = os.path.join(work, "moved.gguf")
    refused([zt, "export", moved, "--format", "gguf", "--out", out],
            "llama.cpp's smollm3 takes none in every fourth layer")
    check(not os.path.exists(out), "a refused GGUF export left its file")


def check_ministral3_gguf(zt, work, final, exported, source_dir, config):
    """A trained Ministral 3 through GGUF as llama.cpp's mistral3 reads it, with the keys its
    converter's Ministral3Model (conversion/mistral3.py at 32e9e04, a LlamaModel: q_proj's and
    k_proj's rows permuted) writes from rope_parameters: yarn's type, factor, original length,
    yarn_beta_fast and _slow, yarn_log_multiplier (mscale_all_dim: llama.cpp's magnitude
    get_mscale(factor, 1) / get_mscale(factor, it)) and attention.temperature_scale
    (llama_4_scaling_beta); imported back bit for bit with the same config."""
    from gguf_reference import read_gguf
    permute = converter_llama_permute(
        os.path.join(source_dir, ".deps/llama-cpp-vocab/convert_hf_to_gguf.py"))
    back_config, count, final = exported_gguf_is_converters(zt, work, final, exported, "mistral3",
                                                            config, permute)
    fields = read_gguf(os.path.join(work, "exported.gguf")).fields
    scaling = config.rope_scaling
    written = {key: fields["mistral3." + key].contents() for key in (
        "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
        "rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow",
        "rope.scaling.yarn_log_multiplier", "attention.temperature_scale",
        "attention.key_length")}
    want = {"rope.scaling.type": "yarn", "rope.scaling.factor": scaling["factor"],
            "rope.scaling.original_context_length": scaling["original_max_position_embeddings"],
            "rope.scaling.yarn_beta_fast": 32.0, "rope.scaling.yarn_beta_slow": 1.0,
            "rope.scaling.yarn_log_multiplier": 1.0,  # the reference's mscale_all_dim
            "attention.temperature_scale": float(np.float32(0.1)),  # its llama_4_scaling_beta
            "attention.key_length": config.head_dim}
    check(written == want, f"the GGUF export's mistral3 keys {written}, not the converter's {want}")
    with open(os.path.join(final, "config.json")) as f:
        final_config = json.load(f)
    check(back_config.get("model_type") == "ministral3" and
          back_config.get("rope_parameters") == final_config["rope_parameters"] and
          back_config.get("head_dim") == config.head_dim,
          f"the GGUF import reads {back_config}, not the model's {final_config}")
    print(f"the GGUF export is llama.cpp's mistral3 ({count} tensors as the converter writes "
          "them, its yarn and temperature keys) and imports back bit for bit", flush=True)
    # What the converter writes for a config with keys zerotrain does not read, and a window.
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails
    for key, details in (("rope.scaling.yarn_attn_factor", MetadataDetails(
            gguf.GGUFValueType.FLOAT32, 1.5)), ("attention.sliding_window", MetadataDetails(
            gguf.GGUFValueType.UINT32, 4096))):
        added_key_refused(zt, work, "mistral3", "mistral3." + key, details,
                          f"metadata 'mistral3.{key}'")
    print("a mistral3 file with yarn_attn_factor or a sliding window is refused naming the key",
          flush=True)


def gguf_export_refused(zt, work, final, message, what):
    """export --format gguf of final is refused with `message`, leaving no file."""
    out = os.path.join(work, "refused.gguf")
    refused([zt, "export", final, "--format", "gguf", "--out", out], message)
    check(not os.path.exists(out), "a refused GGUF export left its file")
    print(f"the GGUF export of {what} is refused", flush=True)


def check_olmo2_gguf(zt, work, final, exported, config):
    """A trained OLMo 2 through GGUF as llama.cpp's olmo2 reads it (its converter's Olmo2Model
    writes every tensor as it is: NeoX RoPE, no permutation; post_attention_norm, post_ffw_norm,
    attn_q_norm and attn_k_norm over whole projections), with the keys llama.cpp reads, and back
    bit for bit; a model llama.cpp's olmo2 cannot hold (attention biases, tied embeddings: it
    requires an output tensor) is refused, leaving no file."""
    if config.attention_bias or config.tie_word_embeddings:
        gguf_export_refused(zt, work, final, "which llama.cpp's olmo2 does not compute",
                            "an OLMo 2 with biases and a tied head")
        return
    back_config, count, _ = exported_gguf_is_converters(zt, work, final, exported, "olmo2",
                                                        config)
    from gguf_reference import read_gguf
    fields = read_gguf(os.path.join(work, "exported.gguf")).fields
    check(fields["olmo2.attention.layer_norm_rms_epsilon"].contents() ==
          np.float32(config.rms_norm_eps) and
          fields["olmo2.rope.freq_base"].contents() == config.rope_theta,
          "the GGUF export's rms epsilon or RoPE base is not the model's")
    check(back_config.get("model_type") == "olmo2", f"the GGUF import reads "
          f"{back_config.get('model_type')}")
    print(f"the GGUF export is llama.cpp's olmo2 ({count} tensors as the converter writes them) "
          "and imports back bit for bit", flush=True)
    check_olmo2_window_refused(zt, work)


def check_glm_gguf(zt, work, final, exported, config):
    """A trained GLM-4 through GGUF as llama.cpp's glm4 reads it (its converter's Glm4Model writes
    every tensor as it is: GLM's adjacent-pair RoPE is llama.cpp's "norm" one, no permutation;
    gate_up_proj as ffn_up, the output norms as post_attention_norm and post_ffw_norm), with the
    keys its set_gguf_parameters writes (rope.dimension_count int(head_dim · partial_rotary_factor),
    yarn's type, factor and original length; linear as llama.cpp's generic keys, which its glm4
    reads and the converter does not write), and back bit for bit with the same rotation; llama3
    scaling, whose rope_freqs.weight llama.cpp's glm4 does not read, is refused."""
    scaling = config.rope_scaling or {}
    if scaling.get("rope_type") == "llama3":
        gguf_export_refused(zt, work, gguf_ready_copy(final, work),
                            "llama3 rope scaling in a glm4 model", "a GLM-4 with llama3 scaling")
        return
    back_config, count, _ = exported_gguf_is_converters(zt, work, final, exported, "glm4", config)
    from gguf_reference import read_gguf
    fields = read_gguf(os.path.join(work, "exported.gguf")).fields
    rope_dim = config.head_dim or config.hidden_size // config.num_attention_heads
    check(fields["glm4.rope.dimension_count"].contents() ==
          int(rope_dim * config.partial_rotary_factor),
          "the GGUF export's rope.dimension_count is not the converter's")
    if scaling.get("rope_type") == "yarn":
        back = back_config.get("rope_scaling") or {}
        check((back.get("rope_type"), back.get("factor"),
               back.get("original_max_position_embeddings")) ==
              ("yarn", scaling["factor"], scaling["original_max_position_embeddings"]),
              f"the GGUF import's rope_scaling is {back}, not {scaling}")
        check(fields["glm4.rope.scaling.type"].contents() == "yarn" and
              fields["glm4.rope.scaling.factor"].contents() == scaling["factor"] and
              fields["glm4.rope.scaling.original_context_length"].contents() ==
              scaling["original_max_position_embeddings"],
              "the GGUF export's yarn keys are not the converter's")
    elif scaling.get("rope_type") == "linear":  # llama.cpp's generic keys, which every arch reads
        back = back_config.get("rope_scaling") or {}
        check(fields["glm4.rope.scaling.type"].contents() == "linear" and
              fields["glm4.rope.scaling.factor"].contents() == scaling["factor"] and
              (back.get("rope_type"), back.get("factor")) == ("linear", scaling["factor"]),
              f"the GGUF export's linear scaling is not the model's (read back as {back})")
    else:
        check("glm4.rope.scaling.type" not in fields, "the GGUF export has a rope scaling")
    check(back_config.get("model_type") == "glm4" and
          back_config.get("attention_bias") == config.attention_bias and
          back_config.get("partial_rotary_factor") == config.partial_rotary_factor,
          f"the GGUF import reads {back_config}")
    print(f"the GGUF export is llama.cpp's glm4 ({count} tensors as the converter writes them) "
          "and imports back bit for bit", flush=True)
    # GLM-4V's language model as llama.cpp's glm4 holds it (multimodal rotary sections): refused,
    # not read as GLM-4's rotation.
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails
    added_key_refused(zt, work, "glm4", "glm4.rope.dimension_sections",
                      MetadataDetails(gguf.GGUFValueType.ARRAY, [2, 1, 1, 0],
                                      sub_type=gguf.GGUFValueType.INT32),
                      "'glm4.rope.dimension_sections' (multimodal rotary positions")
    print("a glm4 GGUF file with rotary sections (GLM-4V's) is refused", flush=True)


def added_key_refused(zt, work, arch, key, details, message):
    """The exported file copied with metadata `key` added (gguf's own gguf_new_metadata copy) is
    refused with `message`, and leaves no directory."""
    import gguf
    from gguf.scripts.gguf_new_metadata import copy_with_new_metadata
    reader = gguf.GGUFReader(os.path.join(work, "exported.gguf"))
    path = os.path.join(work, "added-key.gguf")
    writer = gguf.GGUFWriter(path, arch=arch)
    # (gguf's writer takes no empty array: those keys, the byte tokenizer's, are left out.)
    empty = [f.name for f in reader.fields.values()
             if f.types and f.types[0] == gguf.GGUFValueType.ARRAY and not f.data]
    copy_with_new_metadata(reader, writer, {key: details}, empty)
    out = os.path.join(work, "added-key")
    refused([zt, "import", path, "--out", out], message)
    check(not os.path.exists(out), "a refused GGUF import left its directory")


def check_olmo2_window_refused(zt, work):
    """The exported olmo2 file with `olmo2.attention.sliding_window` added (llama.cpp's layout of
    OLMo 3) is refused naming the key, not imported as an OLMo 2 without windows."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails
    added_key_refused(zt, work, "olmo2", "olmo2.attention.sliding_window",
                      MetadataDetails(gguf.GGUFValueType.UINT32, 4096),
                      "'olmo2.attention.sliding_window' in an olmo2 file")
    print("an olmo2 GGUF file with a sliding window (OLMo 3's) is refused", flush=True)


def check_granite_gguf(zt, work, final, exported, source_dir, config):
    """A trained Granite through GGUF as llama.cpp's granite reads it (its converter's
    GraniteModel is a LlamaModel: q_proj's and k_proj's rows permuted by LlamaModel.permute), its
    four scalars under the keys the converter writes them, and back bit for bit with the same
    scalars; a Granite with attention biases is refused, leaving no file."""
    if config.attention_bias:
        gguf_export_refused(zt, work, final, "granite with attention biases",
                            "a Granite with biases")
        return
    permute = converter_llama_permute(
        os.path.join(source_dir, ".deps/llama-cpp-vocab/convert_hf_to_gguf.py"))
    back_config, count, _ = exported_gguf_is_converters(zt, work, final, exported, "granite",
                                                        config, permute)
    from gguf_reference import read_gguf
    fields = read_gguf(os.path.join(work, "exported.gguf")).fields
    for key, name in (("embedding_multiplier", "granite.embedding_scale"),
                      ("attention_multiplier", "granite.attention.scale"),
                      ("residual_multiplier", "granite.residual_scale"),
                      ("logits_scaling", "granite.logit_scale")):
        want = getattr(config, key)
        check(fields[name].contents() == np.float32(want), f"the GGUF export's {name} is "
              f"{fields[name].contents()}, the model's {key} {want}")
        check(back_config.get(key) == want, f"the GGUF import's {key} is "
              f"{back_config.get(key)}, the model's {want}")
    scaling = (back_config.get("rope_scaling") or {}).get("rope_type")
    check(scaling == (config.rope_scaling or {}).get("rope_type"),
          f"the GGUF import's rope scaling is {scaling}, the model's {config.rope_scaling}")
    print(f"the GGUF export is llama.cpp's granite ({count} tensors as the converter writes "
          "them, its four scalars) and imports back bit for bit", flush=True)


def check_yarn_gguf(zt, work, final, exported, config):
    """A trained yarn model through GGUF: Qwen's setting is written as llama.cpp's converter
    writes it (Qwen2Model.set_gguf_parameters: rope.scaling.type yarn, its factor and
    original_context_length, from the export's rope_scaling) and imports back with the same
    config.json scaling and the same tensors, bit for bit; a yarn llama.cpp would compute
    otherwise (its band's ends, or factor on cos and sin, not llama.cpp's) is refused."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gguf_reference import read_gguf
    final = gguf_ready_copy(final, work)
    path = os.path.join(work, "exported.gguf")
    command = [zt, "export", final, "--format", "gguf", "--gguf-type", "f32", "--out", path]
    with open(os.path.join(exported, "config.json")) as f:
        scaling = json.load(f)["rope_scaling"]
    if scaling.get("beta_fast") != 32.0 or scaling.get("attention_factor") == 1.25:
        refused(command, "llama.cpp runs yarn with 32, 1 and 0.1·ln(factor) + 1")
        check(not os.path.exists(path), "a refused GGUF export left a file")
        return
    run_tool(command)
    arch = config.model_type
    fields = read_gguf(path).fields
    written = {key: fields[f"{arch}.rope.scaling.{key}"].contents()
               for key in ("type", "factor", "original_context_length")}
    want = {"type": "yarn", "factor": scaling["factor"],
            "original_context_length": scaling["original_max_position_embeddings"]}
    check(written == want, f"the GGUF export's yarn metadata {written}, not {want}")
    back_scaling = gguf_imported_back(zt, path, final, work)["rope_scaling"]
    with open(os.path.join(final, "config.json")) as f:
        final_config = json.load(f)
    check(back_scaling == final_config["rope_scaling"],
          f"the GGUF import's rope_scaling {back_scaling}, not the model's "
          f"{final_config['rope_scaling']}")
    # The same model with max_position_embeddings raised to factor × original (a common recipe):
    # the file's context length then differs from its original_context_length, which the
    # import reads back.
    raised = os.path.join(work, "raised-context")
    shutil.copytree(final, raised)
    final_config["max_position_embeddings"] = 4 * want["original_context_length"]
    with open(os.path.join(raised, "config.json"), "w") as f:
        json.dump(final_config, f)
    raised_path = os.path.join(work, "raised.gguf")
    run_tool([zt, "export", raised, "--format", "gguf", "--gguf-type", "f32", "--out",
              raised_path])
    raised_back = gguf_imported_back(zt, raised_path, raised, work, "raised-imported")
    check(raised_back["rope_scaling"] == final_config["rope_scaling"] and
          raised_back["max_position_embeddings"] == final_config["max_position_embeddings"],
          f"the GGUF import of a raised context reads {raised_back['rope_scaling']}")
    print(f"the GGUF export carries yarn as llama.cpp's converter writes it ({written}) and "
          "imports back bit for bit", flush=True)


def gguf_ready_copy(final, work):
    """The trained model directory with a tokenizer a GGUF file can carry: a byte-level BPE over
    the 256 ids of this vocabulary."""
    from test_tokenizer_configs import tokenizer_json
    with_tokenizer = os.path.join(work, "final-with-tokenizer")
    shutil.copytree(final, with_tokenizer)
    tokenizer_config = {"added_tokens_decoder": {}, "eos_token": None, "bos_token": None,
                        "tokenizer_class": "PreTrainedTokenizerFast"}
    tokenizer_json(tokenizer_config).save(os.path.join(with_tokenizer, "tokenizer.json"))
    with open(os.path.join(with_tokenizer, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f)
    return with_tokenizer


def gemma_gguf_ready(zt, final, exported, work, config, arch):
    """llama.cpp's gemma2 and gemma3 scale the scores by 1/sqrt(head_dim) (hidden/heads for the 27B
    models) and read no query_pre_attn_scalar; gemma3 takes every sixth layer global and a local
    RoPE base of 10000 whatever the file says: export refuses the trained model (24 ≠ head_dim;
    Gemma 3's pattern 3 and base 100), naming it. The format is then checked on the same weights
    with the values llama.cpp computes, written into copies of the trained model and of its export
    (another model, one llama.cpp computes)."""
    refused([zt, "export", gguf_ready_copy(final, work), "--format", "gguf", "--out",
             os.path.join(work, "refused.gguf")], f"llama.cpp's {arch} would not compute")
    shutil.rmtree(os.path.join(work, "final-with-tokenizer"))
    copies = []
    for directory, name in ((final, "final-head-dim-scale"), (exported, "exported-head-dim-scale")):
        copy = os.path.join(work, name)
        shutil.copytree(directory, copy)
        with open(os.path.join(copy, "config.json")) as f:
            saved = json.load(f)
        saved["query_pre_attn_scalar"] = config.head_dim
        if arch == "gemma3":
            saved.update(sliding_window_pattern=6, rope_local_base_freq=10000.0)
        with open(os.path.join(copy, "config.json"), "w") as f:
            json.dump(saved, f)
        copies.append(copy)
    return copies


def check_gemma_gguf(zt, work, final, exported, source_dir, config, arch):
    """A trained Gemma (Gemma 2, Gemma 3) through GGUF as llama.cpp's gemma (gemma2, gemma3) reads
    it: the export's architecture, each tensor as the converter's own GemmaModel.modify_tensors
    (Gemma2Model's, Gemma3Model's) writes it (a norm as 1 + weight, q/k norms too, no lm_head, no
    row permutation; the norm after the attention as post_attention_norm), Gemma 2's caps and
    the window as its set_gguf_parameters writes them, and the import gives back the model bit
    for bit."""
    import logging
    import typing
    import gguf
    import safetensors.torch
    from gguf_reference import class_constant, class_methods, read_gguf
    converter = os.path.join(source_dir, ".deps/llama-cpp-vocab/convert_hf_to_gguf.py")
    model_class, model_arch = {"gemma": ("GemmaModel", gguf.MODEL_ARCH.GEMMA),
                               "gemma2": ("Gemma2Model", gguf.MODEL_ARCH.GEMMA2),
                               "gemma3": ("Gemma3Model", gguf.MODEL_ARCH.GEMMA3)}[arch]
    modify_tensors = class_methods(converter, model_class, ("modify_tensors",), {
        "Tensor": torch.Tensor, "Iterable": typing.Iterable, "logger": logging.getLogger()})[0]
    if arch in ("gemma2", "gemma3"):
        final, exported = gemma_gguf_ready(zt, final, exported, work, config, arch)

    class Named:  # the converter's map_tensor_name, gguf's own table
        names = gguf.TensorNameMap(model_arch, config.num_hidden_layers)

        def map_tensor_name(self, name):
            return self.names.get_name(name, try_suffixes=(".weight",))

        if arch == "gemma3":  # Gemma3Model's shift of a stored norm weight
            norm_shift = class_constant(converter, model_class, "norm_shift")

        def _create_vocab_sentencepiece(self):  # Gemma3Model's, to trim out-of-vocabulary rows
            return [b"t%d" % i for i in range(config.vocab_size)], None, None

    final = gguf_ready_copy(final, work)
    path = os.path.join(work, "exported.gguf")
    run_tool([zt, "export", final, "--format", "gguf", "--gguf-type", "f32", "--out", path])
    reader = read_gguf(path)
    check(reader.fields["general.architecture"].contents() == arch,
          f"the GGUF export's architecture is not {arch}")
    if arch in ("gemma2", "gemma3"):  # set_gguf_parameters: the config's values
        written = [("attention.sliding_window", config.sliding_window),
                   ("attention.key_length", config.head_dim)]
        if arch == "gemma2":
            written += [("attn_logit_softcapping", config.attn_logit_softcapping),
                        ("final_logit_softcapping", config.final_logit_softcapping)]
        else:
            check(f"{arch}.attn_logit_softcapping" not in reader.fields,
                  "a gemma3 GGUF export carries a soft cap, which its converter never writes")
        for key, want in written:
            got = reader.fields[f"{arch}.{key}"].contents()
            check(got == want, f"the GGUF export's {arch}.{key} is {got}, the converter's {want}")
    stored = {t.name: np.array(t.data) for t in reader.tensors}
    hf = {}
    for name in sorted(os.listdir(exported)):
        if name.endswith(".safetensors"):
            hf.update(safetensors.torch.load_file(os.path.join(exported, name)))
    want = {}
    for hf_name, value in hf.items():
        want.update(dict(modify_tensors(Named(), value.float(), hf_name, None)))
    check(sorted(want) == sorted(stored),
          f"the GGUF export holds {sorted(stored)}, the converter writes {sorted(want)}")
    for name, value in want.items():
        check(np.array_equal(stored[name].reshape(value.shape), value.numpy()),
              f"{name}: not as llama.cpp's converter writes it")
    got = gguf_imported_back(zt, path, final, work)
    model_type = {"gemma3": "gemma3_text"}.get(arch, arch)  # llama.cpp's name for Gemma 3's
    check(got.get("model_type") == model_type, f"the GGUF import is not a {arch}")
    if arch in ("gemma2", "gemma3"):
        with open(os.path.join(final, "config.json")) as g:
            want_config = json.load(g)
        for key in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                    "sliding_window") + (GEMMA3_KEYS if arch == "gemma3" else ()):
            check(got[key] == want_config[key], f"the GGUF import's {key} is {got[key]}, the "
                  f"exported model's {want_config[key]}")
    print(f"the GGUF export is llama.cpp's {arch} ({len(want)} tensors as the converter writes "
          "them) and imports back bit for bit", flush=True)
