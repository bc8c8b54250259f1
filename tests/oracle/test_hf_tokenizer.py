#!/usr/bin/env python3
"""Hugging Face tokenizers through prepare-data, train and export (CTest label "oracle").

A byte-level BPE tokenizer is trained here with PyPI's `tokenizers` on inputs/data/sample.txt
(with a BOS template, a tokenizer_config.json naming bos/eos, and a truncation to 16 tokens
stored in tokenizer.json, which transformers does not apply unless asked). The reference is
transformers' PreTrainedTokenizerFast on the same files, called as a training script calls it:
1. `prepare-data --tokenizer DIR --text sample.txt`: the dataset's tokens equal
   tokenizer(text + eos_token)["input_ids"], TRL's text example (whole, not truncated), its
   vocabulary the tokenizer's, its label "hf:DIR"; with --document-eos off, tokenizer(text)'s.
2. `prepare-data --tokenizer DIR/tokenizer.json --jsonl docs.jsonl --text-field content`: the
   concatenation of each document's ids (with eos_token), in order, with a torch module that
   raises on import ahead on PYTHONPATH (the tokenizer step imports no torch). The file, and a
   JSON array of the records, given as --text are read as text, with a note naming --jsonl (no
   note for plain text).
3. A transformers LlamaForCausalLM with the tokenizer's vocabulary, saved with the tokenizer
   files, goes through `import` (which copies them), `train` (2 steps, its OUT/final/ gets them
   and generation_config.json) and `export`: AutoTokenizer.from_pretrained(export) encodes the
   documents as the dataset holds them and GenerationConfig has the tokenizer's bos/eos ids.
   The same tokens as a nanoGPT shard (no tokenizer in the data) train the model too, and its
   final/ and checkpoint carry the model's tokenizer.json.
4. Bad input: a JSON line without the field, a line that is not UTF-8, an empty input file,
   --document-eos on with a tokenizer that names no eos_token (auto notes it and adds none), and
   a model whose vocabulary is smaller than the tokenizer's, and data that another tokenizer
   made (trained on the lines reversed: ids read otherwise), are refused naming the file, the
   line (and byte), the field, both vocabularies or the ids that differ (the model's
   tokenizer.json saved otherwise, a special token renamed, trains); the
   refused dataset is not left behind, and a refused `train --overwrite` keeps the previous run.
5. The tokenizer step's text and its refusal pass through private files in $TMPDIR (the step as
   one argument would be bounded by Linux's 128 KiB per argument): none is left after a refusal
   or a run.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)

h5py, np, tokenizers, transformers = require_venv_modules("h5py", "numpy", "tokenizers",
                                                          "transformers")

DOCUMENTS = ["The first document.", "A second one, with more words in it.", "Third: last!"]


def train_tokenizer(text_file, out_dir):
    """A byte-level BPE of 320 tokens, <s> prepended to every sequence."""
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([text_file], trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.enable_truncation(max_length=16)  # stored in tokenizer.json; must not apply here
    os.makedirs(out_dir)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>",
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return tok


def dataset(path):
    with h5py.File(path, "r") as f:
        return (f["tokens"][:].astype(np.int64), int(f.attrs["vocab_size"]),
                f.attrs["tokenizer"].decode() if isinstance(f.attrs["tokenizer"], bytes)
                else str(f.attrs["tokenizer"]))


def refused(cmd, named, leaves_nothing):
    """cmd must fail, its output must contain every string of `named`, and `leaves_nothing` must
    not exist afterwards."""
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.rstrip())
    check(proc.returncode != 0, f"{cmd[1]} accepted bad input")
    for part in named:
        check(part in proc.stdout, f"the error does not name {part!r}")
    check(not os.path.exists(leaves_nothing), f"{leaves_nothing} was left behind")


class TokenizerOracle:
    """The check's parts, run in order by run(); each reads what the parts before it left on self
    (the tokenizer trained here, the text, the documents' ids, the imported model)."""

    def __init__(self, args, work):
        self.zt, self.work = args.zerotrain, work
        self.python = ["--python", sys.executable]
        self.text_file = os.path.join(args.source_dir, "inputs/data/sample.txt")
        self.tok = train_tokenizer(self.text_file, work("tok"))
        self.vocab = self.tok.get_vocab_size()
        self.reference = transformers.PreTrainedTokenizerFast.from_pretrained(work("tok"))

    def run(self):
        self.plain_text()
        self.json_lines()
        self.round_trip()
        self.bad_input()
        self.private_files()

    def plain_text(self):
        """Part 1: plain text, with and without EOS."""
        zt, work, python, text_file, tok, vocab, reference = (
            self.zt, self.work, self.python, self.text_file, self.tok, self.vocab, self.reference)
        # 1. Text: one document per file, ending with EOS as TRL ends a text example (its
        # eos_token appended to the text); --document-eos off: tokenizer(text) alone.
        out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--text", text_file,
                        "--out", work("text.h5")] + python)
        check("note:" not in out, f"text: a note about plain text: {out}")
        tokens, data_vocab, label = dataset(work("text.h5"))
        with open(text_file, encoding="utf-8", newline="") as f:
            text = f.read()
        want = reference(text + reference.eos_token)["input_ids"]
        check(want[-1] == tok.token_to_id("</s>") and reference(text)["input_ids"] == want[:-1],
              "text: TRL's rule (the text, then eos_token) is not the ids, then EOS, here")
        run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--text", text_file,
                  "--document-eos", "off", "--out", work("text_no_eos.h5")] + python)
        check(dataset(work("text_no_eos.h5"))[0].tolist() == reference(text)["input_ids"],
              "text, --document-eos off: the ids are not tokenizer(text)'s")
        check(len(want) > 16, "the reference truncated the text")
        check(tokens.tolist() == want, f"text: {len(tokens)} tokens differ from transformers' "
              f"{len(want)} (first difference at "
              f"{next((i for i, (a, b) in enumerate(zip(tokens, want)) if a != b), None)})")
        check(data_vocab == vocab and label == "hf:tok", f"text: vocab {data_vocab}, {label}")
        print(f"ok   text: {len(tokens)} tokens equal transformers' ids of the text and EOS (not "
              f"truncated), vocab {vocab}; without EOS under --document-eos off")
        # The same text saved on Windows (CRLF), one line end a lone CR: read as Python's open()
        # reads text (datasets' text loader too), the same ids, with a note counting both kinds.
        check(text.count("\n") >= 3, "the text has too few lines to test its line ends")
        windows = text.replace("\n", "\r", 1).replace("\n", "\r\n")
        with open(work("windows.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(windows)
        with open(work("windows.txt"), encoding="utf-8") as f:
            check(f.read() == text, "Python does not read the CRLF copy as the text")
        out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--text",
                        work("windows.txt"), "--out", work("windows.h5")] + python)
        check(dataset(work("windows.h5"))[0].tolist() == want,
              "text saved with CRLF: the ids are not those of the text Python reads")
        crlf = text.count("\n") - 1
        check(f"{crlf} \\r\\n and 1 lone \\r line ends read as \\n" in out,
              f"text saved with CRLF: no note of its line ends: {out}")
        print(f"ok   text saved with CRLF ({crlf}) and a lone CR: the same ids, and a note")
        self.text = text

    def json_lines(self):
        """Part 2: JSON lines, and JSON records given as --text."""
        zt, work, python, reference = self.zt, self.work, self.python, self.reference
        # 2. JSON lines, a named field. The tokenizer step imports no torch (a second of
        # start-up): here a torch module that raises shadows the real one, and the step runs.
        with open(work("docs.jsonl"), "w") as f:
            for i, doc in enumerate(DOCUMENTS):
                f.write(json.dumps({"id": i, "content": doc}) + "\n\n")
        os.makedirs(work("no_torch"))
        with open(work("no_torch", "torch.py"), "w") as f:
            f.write('raise RuntimeError("the tokenizer step imported torch")\n')
        cmd = [zt, "prepare-data", "--tokenizer", work("tok", "tokenizer.json"), "--jsonl",
               work("docs.jsonl"), "--text-field", "content", "--out", work("docs.h5")] + python
        print("+ PYTHONPATH=" + work("no_torch") + " " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=work("no_torch")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(proc.stdout.rstrip())
        check(proc.returncode == 0 and "imported torch" not in proc.stdout,
              "jsonl: the tokenizer step failed where torch cannot be imported")
        tokens, _, _ = dataset(work("docs.h5"))
        want = [i for doc in DOCUMENTS for i in reference(doc + reference.eos_token)["input_ids"]]
        check(tokens.tolist() == want, f"jsonl: {tokens.tolist()} != {want}")
        print(f"ok   jsonl: {len(DOCUMENTS)} documents, {len(tokens)} tokens as transformers "
              "gives them, with torch unimportable")
        # The same file, and a JSON array of the records, given as --text: read as text (their
        # tokens), with a note naming --jsonl.
        with open(work("docs.json"), "w") as f:
            json.dump([{"content": doc} for doc in DOCUMENTS], f, indent=2)
        for name, kind in (("docs.jsonl", "JSON lines"), ("docs.json", "a JSON array of records")):
            out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--text", work(name),
                            "--out", work(name + ".h5")] + python)
            check(f"note: {work(name)} holds {kind}: --text trains on its text" in out and
                  "--jsonl reads" in out, f"--text of {name}: no note naming --jsonl: {out}")
            with open(work(name), encoding="utf-8") as f:
                raw = f.read()
            check(dataset(work(name + ".h5"))[0].tolist() ==
                  reference(raw + reference.eos_token)["input_ids"],
                  f"--text of {name}: not the tokens of its text")
        print("ok   JSON records given as --text: their text's tokens, with a note naming --jsonl")
        self.want = want

    def round_trip(self):
        """Part 3: import, train and export keep the tokenizer."""
        zt, work, tok, vocab, want = self.zt, self.work, self.tok, self.vocab, self.want
        # 3. import -> train -> export keeps the tokenizer; transformers loads it.
        config = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"))
        transformers.LlamaForCausalLM(config).save_pretrained(work("hf"))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(work("tok", name), work("hf", name))
        run_tool([zt, "import", work("hf"), "--out", work("model")])
        check(os.path.isfile(work("model", "tokenizer.json")), "import did not copy the tokenizer")
        run_tool([zt, "train", "--model", work("model"), "--data", work("text.h5"), "--out",
                  work("run"), "--steps", "2", "--seq-len", "32", "--micro-batch", "2",
                  "--log-every", "0"])
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            check(os.path.isfile(work("run", "final", name)), f"train wrote no final/{name}")
        with open(work("run", "run.json")) as f:
            ignored = json.load(f).get("model_import", {}).get("ignored_config_keys", [])
        check("transformers_version" in ignored and "use_cache" in ignored,
              f"run.json lists {ignored} as the imported config's ignored keys")
        # The same tokens as nanoGPT's headerless shard, which carries no tokenizer: final/ and the
        # checkpoint carry the model's.
        dataset(work("text.h5"))[0].astype(np.uint16).tofile(work("text_nanogpt.bin"))
        run_tool([zt, "prepare-data", "--nanogpt-bin", work("text_nanogpt.bin"), "--vocab-size",
                  str(vocab), "--out", work("text_nanogpt.h5")])
        run_tool([zt, "train", "--model", work("model"), "--data", work("text_nanogpt.h5"),
                  "--out", work("run_shard"), "--steps", "2", "--seq-len", "32", "--micro-batch",
                  "2", "--log-every", "0", "--save-every", "2"])
        with open(work("model", "tokenizer.json"), encoding="utf-8") as f:
            model_tokenizer = f.read()
        saved = glob.glob(work("run_shard", "checkpoints", "step-*", ""))
        check(len(saved) == 1, f"shard data: checkpoints {saved}, not the one of step 2")
        for where in ["final", os.path.relpath(saved[0], work("run_shard"))]:
            path = work("run_shard", where, "tokenizer.json")
            check(os.path.isfile(path) and open(path, encoding="utf-8").read() == model_tokenizer,
                  f"shard data: {where}/ does not carry the model's tokenizer.json")
        run_tool([zt, "export", work("run", "final"), "--out", work("export")])
        loaded = transformers.AutoTokenizer.from_pretrained(work("export"))
        got = [i for doc in DOCUMENTS for i in loaded(doc + loaded.eos_token)["input_ids"]]
        check(got == want, f"AutoTokenizer on the export: {got} != {want}")
        generation = transformers.GenerationConfig.from_pretrained(work("export"))
        check((generation.bos_token_id, generation.eos_token_id) ==
              (tok.token_to_id("<s>"), tok.token_to_id("</s>")),
              f"generation_config bos/eos {generation.bos_token_id}/{generation.eos_token_id}")
        # config.json carries the same ids, which transformers reads where no generation config
        # is loaded (LlamaConfig's defaults, 1 and 2, are other tokens here).
        exported = transformers.AutoConfig.from_pretrained(work("export"))
        check((exported.bos_token_id, exported.eos_token_id) == (config.bos_token_id,
                                                                config.eos_token_id),
              f"the export's config.json bos/eos {exported.bos_token_id}/"
              f"{exported.eos_token_id}, the imported model's {config.bos_token_id}/"
              f"{config.eos_token_id}")
        print(f"ok   export: AutoTokenizer ({type(loaded).__name__}) encodes as the dataset, "
              f"generation_config bos {generation.bos_token_id} eos {generation.eos_token_id}")

    def bad_input(self):
        """Part 4."""
        zt, work, python, text_file, reference, text = (
            self.zt, self.work, self.python, self.text_file, self.reference, self.text)
        # 4. Bad input.
        with open(work("bad.jsonl"), "w") as f:
            f.write(json.dumps({"content": "fine"}) + "\n" + json.dumps({"text": "no"}) + "\n")
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--jsonl", work("bad.jsonl"),
                 "--text-field", "content", "--out", work("bad.h5")] + python,
                [work("bad.jsonl") + ":2", "'content'"], work("bad.h5"))
        # Bytes that are not UTF-8 on line 3 (past the first chunk the decoder reads), and an
        # empty file beside a good one.
        with open(work("latin1.jsonl"), "wb") as f:
            f.write(b'{"content": "fine"}\n' * 1000 + b'{"content": "x"}\n{"content": "caf\xe9"}\n')
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--jsonl", work("latin1.jsonl"),
                 "--text-field", "content", "--out", work("bad.h5")] + python,
                [work("latin1.jsonl") + ":1002: not UTF-8 text: byte 17 of the line is 0xe9"],
                work("bad.h5"))
        # Half a surrogate pair escaped in JSON (a whole pair, an emoji, is one character; half
        # of one in a field no document reads passes), and a pretty-printed JSON object: each
        # named, where the tokenizer or json alone say little.
        with open(work("halves.jsonl"), "w") as f:
            f.write('{"text": "\\ud83d\\ude00 whole", "url": "cut \\ud83d"}\n'
                    '{"text": "cut \\ud83d here"}\n')
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--jsonl", work("halves.jsonl"),
                 "--out", work("bad.h5")] + python,
                [work("halves.jsonl") + ":2: the text holds half of a UTF-16 surrogate pair"],
                work("bad.h5"))
        with open(work("object.json"), "w") as f:
            json.dump({"text": "one object"}, f, indent=2)
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--jsonl", work("object.json"),
                 "--out", work("bad.h5")] + python,
                [work("object.json") + ":1: not a JSON line", "one JSON object over several lines"],
                work("bad.h5"))
        open(work("empty.txt"), "w").close()
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--text", text_file, "--text",
                 work("empty.txt"), "--out", work("bad.h5")] + python,
                ["input file '" + work("empty.txt") + "' is empty"], work("bad.h5"))
        # A tokenizer that names no eos_token: --document-eos on is refused naming it; auto
        # says the documents end without one, and writes tokenizer(text)'s ids.
        shutil.copytree(work("tok"), work("tok_no_eos"))
        with open(work("tok_no_eos", "tokenizer_config.json")) as f:
            config = json.load(f)
        config.pop("eos_token")
        with open(work("tok_no_eos", "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
        refused([zt, "prepare-data", "--tokenizer", work("tok_no_eos"), "--text", text_file,
                 "--document-eos", "on", "--out", work("bad.h5")] + python,
                [work("tok_no_eos") + ": --document-eos on", "no eos_token"], work("bad.h5"))
        out = run_tool([zt, "prepare-data", "--tokenizer", work("tok_no_eos"), "--text",
                        text_file, "--out", work("no_eos.h5")] + python)
        check("note: the tokenizer names no eos_token: the documents end without one" in out and
              dataset(work("no_eos.h5"))[0].tolist() == reference(text)["input_ids"],
              "a tokenizer without eos_token: no note, or not tokenizer(text)'s ids")
        # Over the run of step 3 with --overwrite: refused before the old run is cleared, naming
        # the first id past the tiny preset's 256 rows.
        first_past = next(i for i, t in enumerate(dataset(work("text.h5"))[0]) if t >= 256)
        refused([zt, "train", "--preset", "tiny", "--data", work("text.h5"), "--out",
                 work("run"), "--overwrite", "--steps", "1", "--seq-len", "16"],
                [work("text.h5"), f"at index {first_past} is not below the vocab size 256"],
                work("no_such_output"))
        check(os.path.isfile(work("run", "run.json")) and
              os.path.isfile(work("run", "final", "tokenizer.json")),
              "a refused --overwrite run removed the previous run")
        # Data another tokenizer made (one trained on the lines reversed) for the model of step 3:
        # refused naming the ids that differ. The model's tokenizer.json saved otherwise, with a
        # special token renamed, reads ids alike: it trains.
        with open(text_file, encoding="utf-8") as f, open(work("reversed.txt"), "w") as out:
            out.writelines(line[::-1] for line in f)
        train_tokenizer(work("reversed.txt"), work("tok_other"))
        run_tool([zt, "prepare-data", "--tokenizer", work("tok_other"), "--text", text_file,
                  "--out", work("other.h5")] + python)
        refused([zt, "train", "--model", work("model"), "--data", work("other.h5"), "--out",
                 work("run_other"), "--steps", "1", "--seq-len", "16"],
                [work("other.h5"), "reads ids unlike the model's '" +
                 work("model", "tokenizer.json") + "'", "ids differ: id ",
                 "prepare the data with --tokenizer " + work("model")], work("run_other"))
        shutil.copytree(work("model"), work("model_resaved"))
        with open(work("model", "tokenizer.json"), encoding="utf-8") as f:
            resaved = json.load(f)
        for token in resaved["added_tokens"]:
            token["content"] = token["content"].replace("<s>", "<|begin|>")
        with open(work("model_resaved", "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(resaved, f, indent=4)
        run_tool([zt, "train", "--model", work("model_resaved"), "--data", work("text.h5"),
                  "--out", work("run_resaved"), "--steps", "1", "--seq-len", "16", "--log-every",
                  "0"])
        print("ok   bad inputs refused, naming the file, the line, the field, the vocabularies, "
              "the ids another tokenizer reads otherwise")

    def private_files(self):
        """Part 5."""
        zt, work, python, text_file = self.zt, self.work, self.python, self.text_file
        # 5. The step's text and its refusal travel through private files in $TMPDIR, removed
        # after a refusal and after a run.
        os.makedirs(work("tmp"))
        env = dict(os.environ, TMPDIR=work("tmp"))
        for inputs, ok in [(["--jsonl", work("bad.jsonl"), "--text-field", "content"], False), (["--text", text_file], True)]:
            proc = subprocess.run([zt, "prepare-data", "--tokenizer", work("tok"), "--out",
                                   work("tmp_check.h5"), "--overwrite"] + inputs + python,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            check((proc.returncode == 0) == ok and (ok or "bad.jsonl:2" in proc.stdout),
                  f"prepare-data with TMPDIR set: {proc.stdout}")
            left = os.listdir(work("tmp"))
            check(not left, f"the tokenizer step left {left} in $TMPDIR")
        print("ok   the step's files in $TMPDIR are removed after a refusal and after a run")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    args = parser.parse_args()
    work = fresh_work_dir(args.work_dir)
    return exit_status(lambda: TokenizerOracle(args, work).run())


if __name__ == "__main__":
    sys.exit(main())
