#!/usr/bin/env python3
"""A bad-input sweep of the zerotrain binary, as an adversary and a new user would run it (an
audit tool, not a CTest: it prints counts and every case that is not a clear refusal or a
correct acceptance).

  sweep_bad_inputs.py --zerotrain build/zerotrain --source-dir . --work-dir /tmp/sweep

Each case runs the binary once (120 s limit) and is classed:
  crash        a signal, an abort, "terminate called", a sanitizer report
  hang         the time limit ran out
  traceback    a Python traceback in the output
  data loss    an input's bytes changed, or an input vanished
  leftover     a temporary (*.tmp-*) or half-written output left behind after a refusal
  silent       a wrong input accepted (the case expects a refusal and got exit 0)
  refused-legit a legitimate input refused
  unclear      refused, but the message names neither the option, the key nor the file
  clear        refused naming the culprit
  accepted     a legitimate input accepted
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys

BAD, LEGIT, ANY = "bad", "legit", "any"  # what a case expects


class Sweep:
    def __init__(self, zt, src, work):
        self.zt, self.src, self.work = zt, src, work
        self.results = []
        self.env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1",
                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    @staticmethod
    def digest(path):
        if os.path.isfile(path):
            return hashlib.sha256(open(path, "rb").read()).hexdigest()
        if os.path.isdir(path):
            h = hashlib.sha256()
            for root, dirs, files in sorted(os.walk(path)):
                dirs.sort()
                for f in sorted(files):
                    if f == ".zerotrain.lock":  # a run's lock, rewritten by whoever takes it
                        continue
                    p = os.path.join(root, f)
                    h.update(p.encode())
                    h.update(open(p, "rb").read() if os.path.isfile(p) else b"")
            return h.hexdigest()
        return None

    def case(self, category, args, expect, named, inputs=(), out=None):
        """Runs `zerotrain ARGS`; `named`: strings one of which a refusal must contain."""
        before = {p: self.digest(p) for p in inputs}
        cmd = [self.zt] + args
        try:
            proc = subprocess.run(cmd, cwd=self.work, env=self.env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=120)
            output, code = proc.stdout.decode("utf-8", "replace"), proc.returncode
        except subprocess.TimeoutExpired:
            output, code = "", None
        verdict = self.classify(code, output, expect, named, before, out)
        self.results.append({"category": category, "command": " ".join(cmd), "exit": code,
                             "verdict": verdict, "output": output.strip()[-400:]})

    def classify(self, code, output, expect, named, before, out):
        if code is None:
            return "hang"
        if code < 0 or code >= 128 or any(s in output for s in (
                "Segmentation fault", "terminate called", "Aborted", "AddressSanitizer",
                "runtime error:", "internal error")):
            return "crash"
        if "Traceback (most recent call last)" in output:
            return "traceback"
        for p, d in before.items():
            if d is not None and self.digest(p) != d:
                return "data loss"
        if code != 0 and out and any(".tmp-" in n for n in os.listdir(os.path.dirname(out) or ".")):
            return "leftover"
        if code == 0:
            return "silent" if expect == BAD else "accepted"
        if expect == LEGIT:
            return "refused-legit"
        return "clear" if any(n in output for n in named) else "unclear"


def make_inputs(s):
    """A tiny model, its data, a checkpoint, a Hugging Face export and a GGUF file."""
    zt, w = s.zt, s.path
    def run(*args):
        subprocess.run([zt, *args], cwd=s.work, env=s.env, check=True, stdout=subprocess.DEVNULL)
    run("prepare-data", "--text", os.path.join(s.src, "inputs/data/sample.txt"), "--out", w("data.h5"))
    run("init", "--preset", "tiny", "--seed", "1", "--out", w("model"))
    run("train", "--model", w("model"), "--data", w("data.h5"), "--out", w("run"), "--steps", "2",
        "--save-every", "2", "--seq-len", "16", "--micro-batch", "1", "--log-every", "0")
    run("export", w("run/final"), "--out", w("hf"))
    shutil.copy(os.path.join(s.src, ".deps/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"), w("sm.gguf"))
    run("import", w("sm.gguf"), "--out", w("sm"))
    with open(w("sm_text.txt"), "w") as f:  # held-out data of another tokenizer
        f.write("A few words for another tokenizer.\n" * 40)
    run("prepare-data", "--tokenizer", w("sm"), "--text", w("sm_text.txt"), "--out",
        w("sm_data.h5"))
    with open(w("ds.json"), "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2},
                   "bf16": {"enabled": True}}, f)


NUMERIC = ["0", "-1", "1e30", "9000000000000000000", "nan", "inf", "", "abc", "2147483648"]
LEGIT_VALUES = {"1e30": ANY, "2147483648": ANY, "9000000000000000000": ANY, "inf": ANY}


def option_cases(s):
    w = s.path
    train = ["train", "--model", w("model"), "--data", w("data.h5"), "--steps", "1",
             "--seq-len", "16", "--micro-batch", "1", "--log-every", "0", "--eval-batches", "0"]
    commands = {
        "train": (train, ["--steps", "--micro-batch", "--grad-accum", "--seq-len", "--lr",
                          "--min-lr", "--warmup-steps", "--weight-decay", "--clip", "--eps",
                          "--beta1", "--beta2", "--seed", "--save-every", "--keep-last",
                          "--log-every", "--eval-batches", "--zero-stage", "--reduce-bucket-size",
                          "--comm-timeout", "--device-memory-limit", "--schedule-steps",
                          "--warmup-start-lr", "--prefetch-bucket-size", "--max-live-parameters"]),
        "train-fp16": (train + ["--precision", "fp16"],
                       ["--loss-scale", "--initial-scale-power", "--loss-scale-window",
                        "--hysteresis", "--min-loss-scale"]),
        "estimate": (["estimate", "--preset", "tiny"],
                     ["--micro-batch", "--grad-accum", "--world", "--seq-len",
                      "--device-memory-gib", "--ranks-per-node", "--zero-stage"]),
        "eval": (["eval", "--model", w("model"), "--data", w("data.h5"), "--batches", "1",
                  "--micro-batch", "1", "--seq-len", "16"], ["--batches", "--micro-batch", "--seq-len"]),
        "generate": (["generate", "--model", w("model"), "--tokenizer", "byte", "--prompt", "And",
                      "--max-new-tokens", "2"],
                     ["--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed"]),
        "init": (["init", "--preset", "tiny", "--seed", "1"], ["--seed", "--shard-size-mb"]),
        "import": (["import", w("hf")], ["--shard-size-mb"]),
        "export": (["export", w("model")], ["--max-shard-size-mb"]),
        "consolidate": (["consolidate", w("run/checkpoints/step-00000002")],
                        ["--shard-size-mb", "--comm-timeout"]),
    }
    n = 0
    for name, (base, options) in commands.items():
        for option in options:
            for value in NUMERIC:
                n += 1
                args = [a for a in base]
                if option in args:  # replace the base's value
                    args[args.index(option) + 1] = value
                else:
                    args += [option, value]
                if name in ("train", "train-fp16", "init", "import", "export", "consolidate"):
                    args += ["--out", w(f"o{n}")]
                if name == "generate" and option == "--temperature":
                    args += ["--do-sample"]
                expect = LEGIT_VALUES.get(value, BAD)
                if option == "--clip" and value == "-1":
                    expect = ANY  # <= 0 disables clipping
                if option == "--comm-timeout" and value == "0":
                    expect = ANY  # 0 disables the timeout
                if value == "0" and option in ("--seed", "--warmup-steps", "--keep-last",
                                               "--log-every", "--eval-batches", "--save-every",
                                               "--zero-stage", "--clip", "--weight-decay",
                                               "--min-lr", "--warmup-start-lr", "--loss-scale",
                                               "--schedule-steps", "--device-memory-limit",
                                               "--beta1", "--beta2", "--temperature", "--top-k",
                                               "--initial-scale-power", "--ranks-per-node",
                                               "--prefetch-bucket-size",
                                               "--max-live-parameters"):
                    expect = ANY
                s.case(f"option {name} {option}", args, expect, [option, option.lstrip("-")],
                       inputs=[w("model"), w("data.h5")], out=w(f"o{n}"))


def mutate_file(s, category, good, mutant_path, mutants, command):
    """Writes each mutant of `good`'s bytes to mutant_path and runs command (a list using it)."""
    for i, data in enumerate(mutants):
        with open(mutant_path, "wb") as f:
            f.write(data)
        s.case(f"{category} #{i}", command, ANY, [mutant_path, os.path.basename(mutant_path)],
               inputs=[], out=s.path(f"m_{category.replace(' ', '_')}_{i}"))


def damaged_file_cases(s):
    w, rng = s.path, random.Random(7)
    gguf = open(w("sm.gguf"), "rb").read()
    head = gguf[:200000]
    mutants = [gguf[:n] for n in (0, 3, 4, 8, 24, 100, 1000, 100000, len(gguf) // 2, len(gguf) - 1)]
    for _ in range(30):
        b = bytearray(head)
        for _ in range(8):
            b[rng.randrange(8, 4096)] = rng.randrange(256)
        mutants.append(bytes(b) + gguf[len(head):])
    mutants.append(gguf[:8] + struct.pack("<Q", 1 << 62) + gguf[16:])    # tensor count
    mutants.append(gguf[:16] + struct.pack("<Q", 1 << 62) + gguf[24:])   # metadata count
    mutate_file(s, "gguf", gguf, w("bad.gguf"), mutants,
                ["import", w("bad.gguf"), "--out", w("bad_gguf_out"), "--overwrite"])
    st = open(w("hf/model.safetensors"), "rb").read()
    n = struct.unpack("<Q", st[:8])[0]
    header = json.loads(st[8:8 + n])
    st_mutants = [st[:k] for k in (0, 7, 8, 20, 8 + n, len(st) - 1)]
    name = next(k for k in header if k != "__metadata__")
    for field, value in (("dtype", 5), ("dtype", "I9"), ("shape", "x"), ("shape", [-1]),
                         ("shape", [1 << 62, 1 << 62]), ("data_offsets", [0]),
                         ("data_offsets", [5, 1]), ("data_offsets", ["a", 1])):
        h = json.loads(json.dumps(header))
        h[name][field] = value
        text = json.dumps(h).encode()
        st_mutants.append(struct.pack("<Q", len(text)) + text + st[8 + n:])
    for k in range(12):
        b = bytearray(st)
        for _ in range(4):
            b[rng.randrange(8, 8 + n)] = rng.randrange(32, 127)
        st_mutants.append(bytes(b))
    shutil.copytree(w("hf"), w("hf_bad"))
    mutate_file(s, "safetensors", st, w("hf_bad/model.safetensors"), st_mutants,
                ["import", w("hf_bad"), "--out", w("st_out"), "--overwrite"])
    config = json.load(open(w("hf/config.json")))
    cfg_mutants = []
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_theta",
                "tie_word_embeddings", "rope_scaling", "model_type", "num_key_value_heads",
                "max_position_embeddings"):
        for value in (None, "x", -1, 0, 1e30, [1], {"a": 1}, True):
            c = dict(config)
            c[key] = value
            cfg_mutants.append(json.dumps(c).encode())
    cfg_mutants += [b"", b"{", b"[]", b"null", b"{\"a\": " + b"[" * 5000 + b"]" * 5000 + b"}"]
    shutil.copytree(w("hf"), w("hf_cfg"))
    mutate_file(s, "config.json", None, w("hf_cfg/config.json"), cfg_mutants,
                ["import", w("hf_cfg"), "--out", w("cfg_out"), "--overwrite"])
    ds_mutants = [json.dumps(m).encode() for m in (
        {"zero_optimization": {"stage": "3"}}, {"zero_optimization": {"stage": 9}},
        {"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2},
        {"bf16": {"enabled": "yes"}}, {"fp16": {"enabled": True, "loss_scale": -1}},
        {"optimizer": {"type": "SGD"}}, {"scheduler": {"type": "OneCycle"}},
        {"zero_optimization": {"offload_optimizer": {"device": "gpu"}}},
        {"gradient_clipping": "inf"}, {"zero_optimization": []}, [], "x")]
    ds_mutants += [b"{\"zero_optimization\": {\"stage\": 1, \"stage\": 2}}", b"{,}",
                   b"# comment only\n{}", b"{\"bf16\": {\"enabled\": true,},}"]
    mutate_file(s, "deepspeed", None, w("bad_ds.json"), ds_mutants,
                ["train", "--model", w("model"), "--data", w("data.h5"), "--out", w("ds_out"),
                 "--overwrite", "--steps", "1", "--seq-len", "16", "--micro-batch", "1",
                 "--deepspeed", w("bad_ds.json")])
    manifest = w("run/checkpoints/step-00000002/manifest.json")
    m = json.load(open(manifest))
    shutil.copytree(w("run"), w("run_bad"))
    bad_manifest = w("run_bad/checkpoints/step-00000002/manifest.json")
    man_mutants = []
    for key in list(m)[:14]:
        for value in (None, "x", -5, [], {}):
            mm = dict(m)
            mm[key] = value
            man_mutants.append(json.dumps(mm).encode())
    mutate_file(s, "manifest", None, bad_manifest, man_mutants,
                ["consolidate", w("run_bad/checkpoints/step-00000002"), "--out", w("man_out"),
                 "--overwrite"])


def eval_cases(s):
    """Evaluation inside train and in eval: the batch-count words, --eval-every, --eval-data."""
    w = s.path
    train = ["train", "--model", w("model"), "--data", w("data.h5"), "--steps", "2",
             "--seq-len", "16", "--micro-batch", "1", "--log-every", "0"]
    evaluate = ["eval", "--model", w("model"), "--data", w("data.h5"), "--micro-batch", "3",
                "--seq-len", "16"]
    open(w("evaltext"), "w").write("not HDF5")
    n = 0
    for word, expect in [("all", LEGIT), ("ALL", BAD), ("al", BAD), ("all ", BAD), (" 1", BAD),
                         ("+1", BAD), ("0x2", BAD), ("1.0", BAD), ("-0", BAD), ("1e3", BAD)]:
        for base, option in [(train, "--eval-batches"), (evaluate, "--batches")]:
            n += 1
            out = ["--out", w(f"e{n}")] if base is train else []
            s.case(f"eval {option} word", base + [option, word] + out, expect, [option],
                   inputs=[w("model"), w("data.h5")], out=w(f"e{n}"))
    for extra, expect, named in [
            (["--eval-batches", "all", "--eval-every", "1"], LEGIT, []),
            (["--eval-batches", "all", "--eval-every", "1", "--eval-data", w("data.h5")], LEGIT,
             []),
            (["--eval-every", "1"], BAD, ["--eval-every"]),
            (["--eval-batches", "all", "--eval-data", w("missing.h5")], BAD, ["missing.h5"]),
            (["--eval-batches", "all", "--eval-data", w("evaltext")], BAD, ["evaltext"]),
            (["--eval-batches", "all", "--eval-data", w("model")], BAD, ["model"]),
            (["--eval-batches", "1", "--eval-data", w("sm_data.h5")], BAD, ["sm_data.h5"])]:
        n += 1
        s.case("eval train options", train + extra + ["--out", w(f"e{n}")], expect, named,
               inputs=[w("model"), w("data.h5")], out=w(f"e{n}"))


def path_cases(s):
    w = s.path
    os.makedirs(w("adir"), exist_ok=True)
    open(w("afile"), "w").write("x")
    cases = [
        ["train", "--model", w("missing"), "--data", w("data.h5"), "--out", w("p1")],
        ["train", "--model", w("afile"), "--data", w("data.h5"), "--out", w("p2")],
        ["train", "--model", w("model"), "--data", w("adir"), "--out", w("p3")],
        ["train", "--model", w("model"), "--data", w("data.h5"), "--out", w("afile")],
        ["train", "--model", w("model"), "--data", w("data.h5"), "--out", ""],
        ["eval", "--model", w("hf"), "--data", w("data.h5"), "--batches", "1"],
        ["eval", "--model", w("model"), "--data", w("afile"), "--batches", "1"],
        ["info", w("missing")], ["info", w("afile")], ["info", w("adir")], ["info", ""],
        ["import", w("missing"), "--out", w("p4")], ["import", w("afile"), "--out", w("p5")],
        ["import", w("adir"), "--out", w("p6")], ["import", w("hf"), "--out", ""],
        ["export", w("missing"), "--out", w("p7")], ["export", w("model"), "--out", w("afile")],
        ["export", w("model"), "--format", "gguf", "--out", w("adir")],
        ["export", w("model"), "--format", "gguf", "--out", w("p8.gguf")],
        ["consolidate", w("missing"), "--out", w("p9")],
        ["consolidate", w("model"), "--out", w("p10")],
        ["prepare-data", "--text", w("missing"), "--out", w("p11.h5")],
        ["prepare-data", "--text", w("adir"), "--out", w("p12.h5")],
        ["prepare-data", "--text", w("afile"), "--out", w("adir")],
        ["prepare-data", "--tokenizer", w("missing"), "--text", w("afile"), "--out", w("p13.h5")],
        ["prepare-data", "--tokenizer", w("model"), "--text", w("afile"), "--out", w("p14.h5")],
        ["generate", "--model", w("model"), "--prompt", "x"],
        ["generate", "--model", w("model"), "--chat", "x"],
        ["generate", "--model", w("sm"), "--chat", ""],
        ["generate", "--model", w("sm"), "--prompt", "\udcff".encode("utf-8", "surrogateescape").decode("latin-1")],
        ["report", w("missing"), "--out", w("p15")], ["report", w("run"), "--out", w("afile")],
        ["report", "--out", w("p16")],
        ["init", "--config-json", w("missing"), "--seed", "1", "--out", w("p17")],
        ["init", "--config-json", w("adir"), "--seed", "1", "--out", w("p18")],
        ["estimate", "--model", w("missing")], ["estimate", "--model", w("afile")],
        ["train", "--preset", "tiny", "--data", w("data.h5"), "--out", w("p19"), "--trainable", "(("],
        ["train", "--preset", "tiny", "--data", w("data.h5"), "--out", w("p20"), "--freeze", ".*"],
        ["train", "--preset", "tiny", "--data", w("data.h5"), "--out", w("p21"), "--resume", w("afile")],
        ["train", "--preset", "tiny", "--data", w("data.h5"), "--out", w("run"), "--resume", "auto",
         "--steps", "3", "--seq-len", "32"],
        ["import", w("hf"), "--out", w("hf"), "--overwrite"],
        ["consolidate", w("run/checkpoints/step-00000002"), "--out", w("run/checkpoints"), "--overwrite"],
        ["prepare-data", "--text", w("afile"), "--out", w("afile"), "--overwrite"],
    ]
    # Legitimate: an empty chat message, a Latin-1 prompt, a continuation with other settings.
    legit = {i for i, a in enumerate(cases)
             if a[-2:] == ["--chat", ""] or (a[0] == "generate" and a[2] == w("sm") and "--prompt" in a)
             or ("--resume" in a and "auto" in a)}
    for i, args in enumerate(cases):
        s.case("paths", args, ANY if i in legit else BAD, [a for a in args if a.startswith(s.work)] + ["--out", "--model",
               "--data", "--tokenizer", "--chat", "--prompt", "--trainable", "--freeze"],
               inputs=[w("model"), w("data.h5"), w("hf"), w("run"), w("afile")])


def chat_cases(s):
    w = s.path
    lines = [
        {"messages": [{"role": "assistant", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "hi"}]},
        {"messages": [{"role": "tool", "content": "hi"}, {"role": "assistant", "content": "x"}]},
        {"messages": [{"role": "user", "content": 5}, {"role": "assistant", "content": "x"}]},
        {"messages": "hi"}, {"messages": []}, {"other": 1}, [1, 2],
        {"messages": [{"role": "user", "content": "hi", "name": "a"},
                      {"role": "assistant", "content": "x"}]},
        {"messages": [{"role": "user", "content": "\u0000"}, {"role": "assistant", "content": "x"}]},
    ]
    for i, line in enumerate(lines):
        path = w(f"chat{i}.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(line) + "\n")
        s.case("chat sft", ["prepare-data", "--tokenizer", w("sm"), "--sft-jsonl", path,
                            "--messages-field", "messages", "--chat-template", "--out",
                            w(f"chat{i}.h5")], ANY if i == 9 else BAD, [path, f"chat{i}.jsonl"],
               inputs=[w("sm")], out=w(f"chat{i}.h5"))
    with open(w("latin1.txt"), "wb") as f:
        f.write("caf\xe9".encode("latin-1"))
    s.case("non-utf8 text", ["prepare-data", "--tokenizer", w("sm"), "--text", w("latin1.txt"),
                             "--out", w("latin1.h5")], BAD, ["latin1.txt", "UTF-8"])


def document_cases(s):
    """--document-masking values, and datasets whose /doc_starts another writer damaged (h5py
    writes them: run the sweep with .venv/bin/python)."""
    import h5py
    import numpy as np
    w = s.path
    for i, path in enumerate(sorted(os.listdir(os.path.join(s.src, "docs")))[:6]):
        shutil.copy(os.path.join(s.src, "docs", path), w(f"doc{i}.txt"))
    docs = [w(f"doc{i}.txt") for i in range(6)]
    subprocess.run([s.zt, "prepare-data", "--text", *docs, "--out", w("docs.h5")], cwd=s.work,
                   env=s.env, check=True, stdout=subprocess.DEVNULL)
    for name, data in (("train", w("docs.h5")), ("eval", w("docs.h5")), ("train", w("data.h5"))):
        for value, expect in (("", BAD), ("yes", BAD), ("ON", BAD), ("auto", ANY), ("off", ANY),
                              ("on", ANY)):
            base = (["train", "--model", w("model"), "--steps", "1", "--out", w(f"dm{value}"),
                     "--overwrite", "--eval-batches", "0"] if name == "train" else
                    ["eval", "--model", w("model"), "--batches", "1"])
            s.case(f"document-masking {name}", base + ["--data", data, "--seq-len", "16",
                   "--micro-batch", "1", "--document-masking", value], expect,
                   ["--document-masking", "document-masking"], inputs=[w("model"), data],
                   out=w(f"dm{value}") if name == "train" else None)
    with h5py.File(w("docs.h5"), "r") as f:
        n = f["tokens"].shape[0]
    mutants = [np.array(v, dtype=np.uint64) for v in ([1, 5], [0, 0], [0, 9, 3], [0, n],
                                                      [0, 1 << 63], [])]
    mutants += [np.array([0, 4], dtype=np.int32), np.array([[0, 4]], dtype=np.uint64),
                np.array([0.0, 4.0])]
    for i, starts in enumerate(mutants):
        bad = w(f"docbad{i}.h5")
        shutil.copy(w("docs.h5"), bad)
        with h5py.File(bad, "r+") as f:
            del f["doc_starts"]
            f.create_dataset("doc_starts", data=starts)
        for command in (["train", "--model", w("model"), "--steps", "1", "--out", w(f"db{i}"),
                         "--eval-batches", "0"], ["eval", "--model", w("model"), "--batches", "1"],
                        ["info"]):
            args = command + ([bad] if command == ["info"] else
                              ["--data", bad, "--seq-len", "16", "--micro-batch", "1"])
            s.case(f"doc_starts #{i} {command[0]}", args, BAD, [f"docbad{i}.h5", "doc_starts"],
                   inputs=[bad], out=w(f"db{i}") if command[0] == "train" else None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--zerotrain", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    p.add_argument("--only", help="comma-separated case groups: options, files, paths, chat, "
                                  "documents, eval (default all)")
    args = p.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    s = Sweep(os.path.abspath(args.zerotrain), os.path.abspath(args.source_dir), args.work_dir)
    make_inputs(s)
    groups = {"options": option_cases, "files": damaged_file_cases, "paths": path_cases,
              "chat": chat_cases, "documents": document_cases, "eval": eval_cases}
    for name in (args.only.split(",") if args.only else groups):
        groups[name](s)
    counts = {}
    for r in s.results:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    with open(s.path("results.json"), "w") as f:
        json.dump(s.results, f, indent=1)
    print(f"{len(s.results)} cases: " + ", ".join(f"{v} {counts[v]}" for v in sorted(counts)))
    for r in s.results:
        if r["verdict"] not in ("clear", "accepted"):
            print(f"\n[{r['verdict']}] {r['category']}: {r['command']}\n  exit {r['exit']}: "
                  f"{r['output'][-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
