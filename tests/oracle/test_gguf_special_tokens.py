#!/usr/bin/env python3
"""Whether a GGUF export asks llama.cpp to add BOS and EOS, against llama.cpp's own converter
(CTest label "oracle", in the project venv).

A GGUF file's tokenizer.ggml.add_bos_token and add_eos_token decide whether llama.cpp puts the
BOS before a prompt and the EOS after it. llama.cpp's convert_hf_to_gguf.py reads them from a
Hugging Face tokenizer with gguf-py's SpecialVocab: the post-processor's template (alone or inside
a Sequence, as Llama 3's sits after its ByteLevel), then tokenizer_config.json's add_bos_token and
add_eos_token, which win where they are booleans (Phi-3's false over a template writing <s>).
The reference here is that class itself, from the vocab.py of the llama.cpp that the pinned
llama-cpp-python sdist vendors (.deps/llama-cpp-vocab/vocab.py, ./run.sh deps), run on each
tokenizer directory.

A tiny transformers Llama (vocabulary 259: the 256 byte symbols, <s>, </s>, <cls>) is saved with
a tokenizer for every combination of: a post-processor (none, ByteLevel, templates with the BOS
first, the EOS last or both, the CLS first, a Sequence holding ByteLevel and a template, Roberta's)
and tokenizer_config.json's add_bos_token and add_eos_token (absent, true, false). Each is imported
and exported as GGUF; the export's flags must be SpecialVocab's, and false where SpecialVocab sets
none (no template adds the token and the config says nothing: transformers adds none either).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)

gguf, torch, transformers = require_venv_modules("gguf", "torch", "transformers")
from gguf_reference import python_classes, read_gguf, run_definitions  # noqa: E402
from test_tokenizer_configs import tokenizer_json  # noqa: E402

BOS, EOS, CLS = "<s>", "</s>", "<cls>"
SPECIALS = {256: BOS, 257: EOS, 258: CLS}


def special_vocab_class(vocab_py):
    """gguf-py's SpecialVocab, its source taken from llama.cpp's vocab.py (the module itself
    imports the whole gguf package of that llama.cpp, newer than the pinned one)."""
    cls = python_classes(vocab_py).get("SpecialVocab")
    check(cls is not None, f"{vocab_py}: no SpecialVocab class")
    import logging
    import re
    from pathlib import Path
    from typing import Any, Iterable, Mapping, Sequence
    scope = {"json": json, "os": os, "re": re, "Path": Path, "Any": Any, "Iterable": Iterable,
             "Mapping": Mapping, "Sequence": Sequence, "logger": logging.getLogger("vocab"),
             "gguf": gguf, "GGUFWriter": object}
    return run_definitions(vocab_py, [cls], scope)["SpecialVocab"]


def template(*pieces):
    """A TemplateProcessing whose single sequence is `pieces` ("$A" for the text)."""
    single = [{"Sequence": {"id": "A", "type_id": 0}} if p == "$A" else
              {"SpecialToken": {"id": p, "type_id": 0}} for p in pieces]
    specials = {p: {"id": p, "ids": [next(i for i, t in SPECIALS.items() if t == p)],
                    "tokens": [p]} for p in pieces if p != "$A"}
    return {"type": "TemplateProcessing", "single": single, "pair": single,
            "special_tokens": specials}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
              "use_regex": False}
POST_PROCESSORS = {
    "none": None,
    "byte-level": BYTE_LEVEL,
    "bos-template": template(BOS, "$A"),
    "eos-template": template("$A", EOS),
    "bos-eos-template": template(BOS, "$A", EOS),
    "cls-template": template(CLS, "$A"),
    "llama3-sequence": {"type": "Sequence", "processors": [BYTE_LEVEL, template(BOS, "$A")]},
    "roberta": {"type": "RobertaProcessing", "sep": [EOS, 257], "cls": [BOS, 256],
                "trim_offsets": False, "add_prefix_space": False},
}


def hf_model(directory):
    config = transformers.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=64,
                                      bos_token_id=256, eos_token_id=257, pad_token_id=None)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(
        directory, safe_serialization=True)


def tokenizer_files(directory, post, add_bos, add_eos):
    config = {"added_tokens_decoder": {
        str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                 "single_word": False, "special": True} for i, t in SPECIALS.items()},
        "bos_token": BOS, "eos_token": EOS, "cls_token": CLS,
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 64}
    for key, value in (("add_bos_token", add_bos), ("add_eos_token", add_eos)):
        if value is not None:
            config[key] = value
    tok = json.loads(tokenizer_json(config).to_str())
    tok["post_processor"] = post
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)
    zt = args.zerotrain
    special_vocab = special_vocab_class(
        os.path.join(args.source_dir, ".deps/llama-cpp-vocab/vocab.py"))

    def checks():
        hf = work("hf")
        hf_model(hf)
        cases = list(itertools.product(POST_PROCESSORS, (None, True, False), (None, True, False)))
        decided = 0
        for n, (post, add_bos, add_eos) in enumerate(cases):
            name = f"{post}, add_bos_token {add_bos}, add_eos_token {add_eos}"
            tokenizer_files(hf, POST_PROCESSORS[post], add_bos, add_eos)
            reference = special_vocab(hf, n_vocab=259).add_special_token
            decided += len(reference)
            imported, path = work(f"imported{n}"), work(f"export{n}.gguf")
            run_tool([zt, "import", hf, "--out", imported])
            run_tool([zt, "export", imported, "--format", "gguf", "--gguf-type", "f32",
                      "--out", path])
            fields = read_gguf(path).fields
            for typ, key in (("bos", "tokenizer.ggml.add_bos_token"),
                             ("eos", "tokenizer.ggml.add_eos_token")):
                got = bool(fields[key].contents()) if key in fields else None
                want = reference.get(typ, False)
                check(got == want, f"{name}: the export's {key} is {got}, llama.cpp's converter "
                      f"{'sets ' + str(want) if typ in reference else 'sets none (false)'}")
            print(f"ok   {name}: add_bos {reference.get('bos', False)}, add_eos "
                  f"{reference.get('eos', False)}", flush=True)
        check(decided > len(cases), "the converter decided almost nothing: the cases test nothing")
        print(f"{len(cases)} tokenizers: the export's BOS/EOS flags are llama.cpp's converter's")

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
