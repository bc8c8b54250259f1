#!/usr/bin/env python3
"""prepare-data reads datasets as the Hugging Face Hub and text corpora ship them, Parquet files
and compressed JSON lines, against transformers and against the same records as plain JSON lines
(label oracle).

The Parquet files are written by pyarrow, which Hugging Face datasets writes and reads Parquet
with, as a dataset pushed to the Hub is: conversations in TRL's format (a list of message structs,
so a key one message lacks is null in the file, as in every Hub dataset that mixes tool calls with
plain turns; the tools column as JSON strings, null where a row has none), prompt-completion pairs
and text documents, with an integer id column, in row groups of 7 rows; 600 pairs and documents,
so that reading crosses row groups and pyarrow's record batches (of 256 rows). The compressed
files are written by the gzip, bzip2, xz and zstd tools, as C4's .json.gz and SlimPajama's
.jsonl.zst were. The tokenizer and its chat template are test_hf_sft.py's.
1. Conversations from Parquet, at 1 and 3 workers: the tokens and the loss mask are
   transformers' apply_chat_template with return_assistant_tokens_mask, given each row as
   pyarrow's to_pylist gives it (what datasets hands TRL); the file equals the one written from
   the same rows as JSON lines. Prompt-completion pairs (--sft-jsonl) and documents (--jsonl)
   from Parquet: the JSON lines' files (also beside a nanosecond timestamp column, which pyarrow
   cannot convert without pandas and no option reads); the documents' tokens are
   tokenizer(text + eos_token)'s, as TRL encodes a text example.
2. The conversations' JSON lines compressed by each tool (zstd at 3 workers; pzstd, which opens
   with a skippable frame), as several gzip members and several zstd frames, and as one gzipped
   JSON array; a text file gzipped (--text): each gives the uncompressed file's dataset. A text
   file opening with "PAR1" is text.
3. Refused, naming the file and the row (counted from 0, as Dataset[i] indexes it) or the line
   (counted in the decompressed text), leaving nothing: a null response (Parquet's missing value)
   on row 300, in the second record batch, at 1 and 3 workers; a column no row has; a Parquet
   file cut short; a Parquet file of no rows; a Parquet file given to --text; a bad message on
   line 20 of a .gz; bytes that are not UTF-8 on line 21 of an .xz; a .gz and a .zst cut short,
   and a .zst corrupted (its checksum); a gzipped empty file (as JSON lines and as text); a .gz
   and a pzstd file given to byte-level --text; and, with a pyarrow or a zstandard that cannot
   be imported, the missing module.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status,  # noqa: E402
                            fresh_work_dir, require_venv_modules, run_tool)
from test_hf_sft import add_chat_template, examples  # noqa: E402
from test_hf_tokenizer import refused, train_tokenizer  # noqa: E402
from test_tokenize_workers import contents, conversations  # noqa: E402

h5py, pyarrow, transformers = require_venv_modules("h5py", "pyarrow", "transformers")
import pyarrow.parquet  # noqa: E402

ROW_GROUP = 7
CHAT = ["--messages-field", "messages", "--chat-template"]
PAIR = ["--prompt-field", "question", "--response-field", "answer"]
BAD_MESSAGE = {"messages": [{"role": "function", "content": "x"}]}


def write_parquet(rows, path):
    """`rows` as one Parquet file of ROW_GROUP-row groups; returns the rows as pyarrow reads them
    back (every struct key on every element, null where the row had none)."""
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path, row_group_size=ROW_GROUP)
    return pyarrow.parquet.read_table(path).to_pylist()


def write_jsonl(rows, path):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def compressed(tool, source, target, *flags):
    """`source` compressed by the command-line `tool` into `target` (appended to it)."""
    with open(target, "ab") as out:
        subprocess.run([tool, *flags, "-c", source], stdout=out, check=True,
                       stderr=subprocess.DEVNULL)
    return target


class Session:
    """The work directory, zerotrain and the tokenizer of one run of the checks."""

    def __init__(self, args):
        self.work, self.zt = fresh_work_dir(args.work_dir), args.zerotrain
        self.python = ["--python", sys.executable]
        self.text_file = os.path.join(args.source_dir, "inputs/data/sample.txt")

    def prepare(self, options, out, workers=1):
        """The contents of the file prepare-data writes with `options`."""
        run_tool([self.zt, "prepare-data", "--tokenizer", self.work("tok"), "--workers",
                  str(workers), "--out", self.work(out)] + options + self.python)
        return contents(self.work(out))

    def refused(self, options, named, env=None, tokenizer=True):
        """prepare-data with `options` fails naming every string of `named`, leaving nothing."""
        cmd = ([self.zt, "prepare-data"] + (["--tokenizer", self.work("tok")] if tokenizer else [])
               + options + ["--out", self.work("bad.h5")] + self.python)
        if env is None:
            refused(cmd, named, self.work("bad.h5"))
            return
        print(f"+ PYTHONPATH={env} " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=env), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        print(proc.stdout.rstrip())
        check(proc.returncode != 0 and all(n in proc.stdout for n in named)
              and not os.path.exists(self.work("bad.h5")),
              f"{options} with PYTHONPATH={env} was not refused naming {named}")

    def without(self, module):
        """A PYTHONPATH directory where importing `module` fails, as where it is not installed."""
        os.makedirs(self.work(f"no_{module}/{module}"), exist_ok=True)
        with open(self.work(f"no_{module}/{module}/__init__.py"), "w") as f:
            f.write(f"raise ImportError('{module} is not installed (a test stand-in)')\n")
        return self.work(f"no_{module}")


def parquet_checks(s, records, reference):
    """Part 1; returns the JSON lines' chat dataset."""
    rows = write_parquet([{"id": i, "messages": messages,
                           "tools": json.dumps(tools) if tools else None}
                          for i, (messages, tools) in enumerate(conversations(records[:96]))],
                         s.work("chats.parquet"))
    check(any(m["tool_calls"] is None for m in rows[0]["messages"]),
          "the Parquet file does not hold null message keys, as a Hub dataset does")
    write_jsonl(rows, s.work("chats.jsonl"))
    want_ids, want_mask = [], []
    for row in rows:
        tools = json.loads(row["tools"]) if row["tools"] else None
        rendered = reference.apply_chat_template(row["messages"], tools=tools, tokenize=True,
                                                 return_dict=True,
                                                 return_assistant_tokens_mask=True)
        want_ids += rendered["input_ids"]
        want_mask += rendered["assistant_masks"]
    from_jsonl = s.prepare(["--sft-jsonl", s.work("chats.jsonl")] + CHAT, "chats_jsonl.h5")
    for workers in (1, 3):
        out = f"chats_parquet{workers}.h5"
        from_parquet = s.prepare(["--sft-jsonl", s.work("chats.parquet")] + CHAT, out, workers)
        with h5py.File(s.work(out), "r") as f:
            ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
        check(ids == want_ids, f"--workers {workers}: the tokens are not apply_chat_template's")
        check(mask == want_mask,
              f"--workers {workers}: the loss mask is not transformers' assistant mask")
        check(from_parquet == from_jsonl,
              f"--workers {workers}: the Parquet file's dataset is not its JSON lines'")
    print(f"ok   {len(rows)} conversations from Parquet at 1 and 3 workers: {len(ids)} tokens, "
          f"{sum(mask)} counted, as apply_chat_template and its assistant mask; the file is the "
          "JSON lines' file")

    pairs = write_parquet(records, s.work("pairs.parquet"))
    write_jsonl(pairs, s.work("pairs.jsonl"))
    from_parquet = s.prepare(["--sft-jsonl", s.work("pairs.parquet")] + PAIR, "pairs_parquet.h5")
    check(from_parquet == s.prepare(["--sft-jsonl", s.work("pairs.jsonl")] + PAIR,
                                    "pairs_jsonl.h5"),
          "prompt-completion pairs: the Parquet file's dataset is not its JSON lines'")
    # A column no option reads that pyarrow cannot convert without pandas (pandas writes
    # timestamps in nanoseconds) is not read.
    table = pyarrow.parquet.read_table(s.work("pairs.parquet"))
    stamps = pyarrow.array([1_700_000_000_000_000_001 + i for i in range(len(table))],
                           pyarrow.timestamp("ns"))
    pyarrow.parquet.write_table(table.append_column("created", stamps),
                                s.work("stamped.parquet"), row_group_size=ROW_GROUP)
    check(s.prepare(["--sft-jsonl", s.work("stamped.parquet")] + PAIR, "stamped.h5") ==
          from_parquet, "a column no option reads changed the Parquet file's dataset")
    docs = write_parquet([{"id": r["id"], "text": r["question"] + "\n" + r["answer"]}
                          for r in records], s.work("docs.parquet"))
    write_jsonl(docs, s.work("docs.jsonl"))
    from_parquet = s.prepare(["--jsonl", s.work("docs.parquet")], "docs_parquet.h5")
    with h5py.File(s.work("docs_parquet.h5"), "r") as f:
        ids = f["tokens"][:].tolist()
    check(ids == [t for d in docs for t in reference(d["text"] + reference.eos_token)["input_ids"]],
          "Parquet documents: the tokens are not tokenizer(text + eos_token)'s in row order")
    check(from_parquet == s.prepare(["--jsonl", s.work("docs.jsonl")], "docs_jsonl.h5"),
          "Parquet documents: the file is not the JSON lines' file")
    print(f"ok   {len(pairs)} prompt-completion pairs and {len(docs)} documents from Parquet: the "
          "JSON lines' files, the documents' tokens tokenizer(text)'s")
    return from_jsonl


def compressed_checks(s, from_jsonl):
    """Part 2."""
    chats = s.work("chats.jsonl")
    for tool, suffix, workers in [("gzip", "gz", 1), ("bzip2", "bz2", 1), ("xz", "xz", 1),
                                  ("zstd", "zst", 3), ("pzstd", "pzst", 1)]:
        flags = ("-p", "2") if tool == "pzstd" else ()  # skippable frames between its frames
        path = compressed(tool, chats, s.work(f"chats.jsonl.{suffix}"), *flags)
        check(s.prepare(["--sft-jsonl", path] + CHAT, f"chats_{suffix}.h5", workers) == from_jsonl,
              f"{tool}: the compressed file's dataset is not the JSON lines'")
    with open(chats) as f:
        lines = f.readlines()
    with open(s.work("half1.jsonl"), "w") as f:
        f.writelines(lines[:50])
    with open(s.work("half2.jsonl"), "w") as f:
        f.writelines(lines[50:])
    for tool, suffix in [("gzip", "gz"), ("zstd", "zst")]:
        path = s.work(f"members.jsonl.{suffix}")  # two gzip members, two zstd frames
        for half in ("half1.jsonl", "half2.jsonl"):
            compressed(tool, s.work(half), path)
        check(s.prepare(["--sft-jsonl", path] + CHAT, f"members_{suffix}.h5") == from_jsonl,
              f"{tool}: a file of two compressed parts did not give the whole dataset")
    with open(s.work("chats.json"), "w") as f:
        json.dump([json.loads(line) for line in lines], f)
    path = compressed("gzip", s.work("chats.json"), s.work("chats.json.gz"))
    check(s.prepare(["--sft-jsonl", path] + CHAT, "array_gz.h5") == from_jsonl,
          "a gzipped JSON array did not give the JSON lines' dataset")
    path = compressed("gzip", s.text_file, s.work("sample.txt.gz"))
    check(s.prepare(["--text", path], "text_gz.h5") ==
          s.prepare(["--text", s.text_file], "text.h5"),
          "a gzipped text file did not give the text file's dataset")
    with open(s.work("par1.txt"), "w") as f:  # Parquet's magic number, and text
        f.write("PAR1 of the report is done.\n")
    s.prepare(["--text", s.work("par1.txt")], "par1.h5")
    print("ok   JSON lines compressed by gzip, bzip2, xz, zstd (at 3 workers) and pzstd, in two "
          "gzip members and two zstd frames, a gzipped JSON array and a gzipped text file give "
          "the uncompressed files' datasets; text opening with PAR1 is text")


def parquet_refusals(s, records):
    """Part 3, Parquet."""
    write_parquet([dict(r, answer=None) if r["id"] == 300 else r for r in records],
                  s.work("null.parquet"))
    for workers in ("1", "3"):
        s.refused(["--workers", workers, "--sft-jsonl", s.work("null.parquet")] + PAIR,
                  [s.work("null.parquet") + ":row 300: no string field 'answer'"])
    s.refused(["--sft-jsonl", s.work("chats.parquet"), "--messages-field", "conversation",
               "--chat-template"], [s.work("chats.parquet") + ":row 0:", "conversation"])
    # TRL's conversational lines read as prompt-response pairs: the hint names the options.
    with open(s.work("messages.jsonl"), "w") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                         {"role": "assistant", "content": "Hello"}]}) + "\n")
    s.refused(["--sft-jsonl", s.work("messages.jsonl")],
              [s.work("messages.jsonl") + ":1: no string field 'prompt' (the line has a "
               "'messages' list, TRL's conversational format: --messages-field messages "
               "--chat-template)"])
    # A plain-text dataset ({"text": ...}, which TRL's SFTTrainer learns whole) named for --jsonl;
    # a file saved as UTF-16 (Windows' "Unicode") named as such.
    with open(s.work("texts.jsonl"), "w") as f:
        f.write(json.dumps({"text": "Hello there"}) + "\n")
    s.refused(["--sft-jsonl", s.work("texts.jsonl")],
              [s.work("texts.jsonl") + ":1: no string field 'prompt' (the line has a 'text' "
               "field, plain text, which TRL's SFTTrainer learns whole: --jsonl reads it)"])
    with open(s.work("utf16.jsonl"), "w", encoding="utf-16") as f:
        f.write(json.dumps({"prompt": "Hi", "response": "Hello"}) + "\n")
    s.refused(["--sft-jsonl", s.work("utf16.jsonl")],
              [s.work("utf16.jsonl") + ":1: UTF-16 text (its byte-order mark is 0xff 0xfe), not "
               "UTF-8: convert it first (iconv -f UTF-16 -t UTF-8)"])
    with open(s.work("chats.parquet"), "rb") as f:
        whole = f.read()
    with open(s.work("cut.parquet"), "wb") as f:
        f.write(whole[:len(whole) // 2])
    s.refused(["--sft-jsonl", s.work("cut.parquet")] + CHAT,
              [s.work("cut.parquet") + ": not a readable Parquet file"])
    s.refused(["--text", s.work("docs.parquet")],
              [s.work("docs.parquet") + ": a Parquet file, not text: --jsonl reads its rows"])
    s.refused(["--sft-jsonl", s.work("chats.parquet")] + CHAT,
              [s.work("chats.parquet") + ": a Parquet file", "no pyarrow"], s.without("pyarrow"))
    write_parquet([], s.work("none.parquet"))
    s.refused(["--sft-jsonl", s.work("none.parquet")] + PAIR,
              [s.work("none.parquet") + ": no records in the file"])


def compressed_refusals(s):
    """Part 3, compressed files."""
    with open(s.work("chats.jsonl")) as f:
        lines = f.readlines()
    with open(s.work("bad_message.jsonl"), "w") as f:
        f.writelines(lines[:19] + [json.dumps(BAD_MESSAGE) + "\n"] + lines[19:])
    path = compressed("gzip", s.work("bad_message.jsonl"), s.work("bad_message.jsonl.gz"))
    s.refused(["--sft-jsonl", path] + CHAT, [path + ":20: 'messages'[0]", "role"])
    with open(s.work("latin1.jsonl"), "wb") as f:
        f.write("".join(lines[:20]).encode() + b'{"messages": "caf\xe9"}\n')
    path = compressed("xz", s.work("latin1.jsonl"), s.work("latin1.jsonl.xz"))
    s.refused(["--sft-jsonl", path] + CHAT,
              [path + ":21: not UTF-8 text: byte 18 of the line is 0xe9"])
    for suffix, damage, named in [
            ("gz", "cut", "EOFError"), ("zst", "cut", "EOFError: the zstd data ends inside a frame"),
            ("zst", "flipped", "ZstdError")]:
        with open(s.work(f"chats.jsonl.{suffix}"), "rb") as f:
            data = bytearray(f.read())
        if damage == "cut":
            data = data[:len(data) // 2]
        else:
            data[len(data) // 2] ^= 0xFF  # zstd writes a checksum of each frame
        path = s.work(f"{damage}.jsonl.{suffix}")
        with open(path, "wb") as f:
            f.write(data)
        s.refused(["--sft-jsonl", path] + CHAT,
                  [path + ":", "the file cannot be read on from here", named])
    for path, format in [(s.work("sample.txt.gz"), "gzip-compressed"),
                         (s.work("chats.jsonl.pzst"), "zstd-compressed")]:
        s.refused(["--text", path], [path, format], tokenizer=False)
    open(s.work("empty.txt"), "w").close()
    path = compressed("gzip", s.work("empty.txt"), s.work("empty.jsonl.gz"))
    s.refused(["--sft-jsonl", path] + CHAT, [path + ": no records in the file"])
    s.refused(["--text", path], [path + ": empty once decompressed"])
    path = s.work("chats.jsonl.zst")
    s.refused(["--sft-jsonl", path] + CHAT, [path + ": zstd-compressed", "no zstandard"],
              s.without("zstandard"))


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    s = Session(args)

    def checks():
        train_tokenizer(s.text_file, s.work("tok"))
        add_chat_template(s.work("tok"))
        reference = transformers.AutoTokenizer.from_pretrained(s.work("tok"))
        records = examples(s.text_file, 600)
        from_jsonl = parquet_checks(s, records, reference)
        compressed_checks(s, from_jsonl)
        parquet_refusals(s, records)
        compressed_refusals(s)
        print("ok   a null response, a missing column, Parquet cut short, of no rows or given as "
              "--text, a bad message and bytes not UTF-8 in compressed files, compressed files "
              "cut short, corrupt or empty, compressed files as byte-level text, and a missing "
              "pyarrow or zstandard are refused naming the file (and the row or line), leaving "
              "nothing")

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
