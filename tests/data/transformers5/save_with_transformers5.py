#!/usr/bin/env python3
"""Loads a tokenizer directory and saves it again with transformers 5, as a tokenizer a user
brings from a transformers 5 run is saved (tests/data/transformers5/SOURCES.md says how each
directory here was made). Run with an interpreter holding transformers 5 and tokenizers; torch is
not needed.

    save_with_transformers5.py SOURCE_DIR OUT_DIR [--qwen2-class]

--qwen2-class first rewrites the source's tokenizer_config.json (in a copy) to name
Qwen2Tokenizer and list <|im_start|> and <|im_end|> as additional_special_tokens, as Qwen2.5's
does, so that the save shows how transformers 5 writes a model-specific class and its extra
special tokens."""

import argparse
import json
import os
import shutil
import tempfile

os.environ.setdefault("USE_TORCH", "0")
import transformers  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("source")
parser.add_argument("out")
parser.add_argument("--qwen2-class", action="store_true")
args = parser.parse_args()
assert transformers.__version__.startswith("5."), transformers.__version__
with tempfile.TemporaryDirectory() as scratch:
    source = args.source
    if args.qwen2_class:
        source = os.path.join(scratch, "source")
        shutil.copytree(args.source, source)
        path = os.path.join(source, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config.update(tokenizer_class="Qwen2Tokenizer",
                      additional_special_tokens=["<|im_start|>", "<|im_end|>"])
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False)
    transformers.AutoTokenizer.from_pretrained(source).save_pretrained(args.out)
print(f"saved {args.out} with transformers {transformers.__version__}")
