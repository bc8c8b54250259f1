"""A text checkpoint written as the multimodal checkpoint that holds it as its language model, for
test_hf_families.py: Gemma3ForConditionalGeneration (gemma-3-4b/12b/27b as published) and
Mistral3ForConditionalGeneration (Mistral-Small-3.1 and 3.2-24B). The wrapper's config.json keeps
the text model's under text_config, beside a vision_config and the image tokens' keys, as the
published files have them; the text model's tensors sit under transformers 4.50's
"language_model.model." (its head language_model.lm_head.weight) or 4.52's "model.language_model."
(its head lm_head.weight), beside two tensors of a vision tower and its projector."""
import json
import os

import torch

# The wrapper's own keys, as the published config.json files carry them (the vision towers'
# configs cut to what names them).
WRAPPERS = {
    "gemma3": {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
               "boi_token_index": 255999, "eoi_token_index": 256000,
               "image_token_index": 262144, "mm_tokens_per_image": 256,
               "initializer_range": 0.02, "torch_dtype": "bfloat16",
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8,
                                 "num_hidden_layers": 1, "patch_size": 14, "image_size": 28}},
    "mistral3": {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
                 "image_token_index": 10, "multimodal_projector_bias": False,
                 "projector_hidden_act": "gelu", "spatial_merge_size": 2,
                 "torch_dtype": "bfloat16", "vision_feature_layer": -1,
                 "vision_config": {"model_type": "pixtral", "hidden_size": 8,
                                   "num_hidden_layers": 1, "patch_size": 14, "image_size": 28}},
}
# A tensor of each wrapper's vision tower and of its projector (their names past the prefix).
VISION_TENSORS = {
    "gemma3": ("vision_model.embeddings.patch_embedding.weight", "mm_input_projection_weight"),
    "mistral3": ("patch_conv.weight", "linear_1.weight"),
}


def write_multimodal(text_dir, out_dir, prefix, wrapper="gemma3", store_tied_head=False):
    """text_dir's text checkpoint (model.safetensors) as a `wrapper` checkpoint in out_dir, the
    text model's tensors under `prefix`; with store_tied_head, a tied model's head stored anyway
    (a copy of the embedding under the head's name), as some re-saves write it."""
    import safetensors.torch
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(text_dir, "config.json")) as f:
        text = json.load(f)
    text.pop("architectures", None)
    config = dict(WRAPPERS[wrapper], text_config=text)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    v4_50 = prefix.startswith("language_model")
    head = "language_model.lm_head.weight" if v4_50 else "lm_head.weight"
    tensors = {}
    for name, value in safetensors.torch.load_file(
            os.path.join(text_dir, "model.safetensors")).items():
        tensors[head if name == "lm_head.weight" else prefix + name[len("model."):]] = value
    if store_tied_head and head not in tensors:
        tensors[head] = tensors[prefix + "embed_tokens.weight"].clone()
    outer = "" if v4_50 else "model."
    tower, projector = VISION_TENSORS[wrapper]
    tensors[outer + "vision_tower." + tower] = torch.ones(8, 3, 14, 14)
    tensors[outer + "multi_modal_projector." + projector] = torch.ones(8, 64)
    safetensors.torch.save_file(tensors, os.path.join(out_dir, "model.safetensors"),
                                metadata={"format": "pt"})
