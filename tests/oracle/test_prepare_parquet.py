#!/usr/bin/env python3
"""prepare-data reads Parquet files, the Hugging Face Hub's format for datasets, against
transformers and against the same rows as JSON lines (label oracle).

The files are written by pyarrow, which Hugging Face datasets writes and reads Parquet with, as a
dataset pushed to the Hub is: conversations in TRL's format (a list of message structs, so a key
one message lacks is null in the file, as in every Hub dataset that mixes tool calls with plain
turns; the tools column as JSON strings, null where a row has none), prompt-completion pairs and
text documents, with an integer id column, in row groups of 7 rows; 600 pairs and documents, so
that reading crosses row groups and pyarrow's record batches (of 256 rows). The tokenizer and its chat template are test_hf_sft.py's.
1. Conversations, at 1 and 3 workers: the tokens and the loss mask are transformers'
   apply_chat_template with return_assistant_tokens_mask, given each row as pyarrow's to_pylist
   gives it (what datasets hands TRL); the file equals the one written from the same rows as
   JSON lines.
2. Prompt-completion pairs (--sft-jsonl) and text documents (--jsonl): the file equals the JSON
   lines one's; the documents' tokens are tokenizer(text)'s, in row order.
3. Refused, naming the file and the row counted from 0 (as Dataset[i] indexes it), leaving
   nothing: a null response (Parquet's missing value) on row 300, in the second record batch, at
   1 and 3 workers; a column no row has; a file cut short; a Parquet file given to --text; and,
   with a pyarrow that cannot be imported, the missing pyarrow.

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


def write_parquet(rows, path):
    """`rows` as one Parquet file of ROW_GROUP-row groups; returns the rows as pyarrow reads them
    back (every struct key on every element, null where the row had none)."""
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path, row_group_size=ROW_GROUP)
    return pyarrow.parquet.read_table(path).to_pylist()


def write_jsonl(rows, path):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)
    zt = args.zerotrain
    python = ["--python", sys.executable]

    def prepare(options, out, workers=1):
        run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--workers", str(workers),
                  "--out", work(out)] + options + python)
        return contents(work(out))

    def checks():
        text_file = os.path.join(args.source_dir, "inputs/data/sample.txt")
        train_tokenizer(text_file, work("tok"))
        add_chat_template(work("tok"))
        reference = transformers.AutoTokenizer.from_pretrained(work("tok"))
        records = examples(text_file, 600)

        # 1. Conversations: apply_chat_template of each row as read back, and the JSON lines'
        # file.
        rows = write_parquet([{"id": i, "messages": messages,
                               "tools": json.dumps(tools) if tools else None}
                              for i, (messages, tools)
                              in enumerate(conversations(records[:96]))],
                             work("chats.parquet"))
        check(any(m["tool_calls"] is None for m in rows[0]["messages"]),
              "the Parquet file does not hold null message keys, as a Hub dataset does")
        write_jsonl(rows, work("chats.jsonl"))
        chat = ["--messages-field", "messages", "--chat-template"]
        want_ids, want_mask = [], []
        for row in rows:
            tools = json.loads(row["tools"]) if row["tools"] else None
            rendered = reference.apply_chat_template(row["messages"], tools=tools, tokenize=True,
                                                     return_dict=True,
                                                     return_assistant_tokens_mask=True)
            want_ids += rendered["input_ids"]
            want_mask += rendered["assistant_masks"]
        from_jsonl = prepare(["--sft-jsonl", work("chats.jsonl")] + chat, "chats_jsonl.h5")
        for workers in (1, 3):
            out = f"chats_parquet{workers}.h5"
            from_parquet = prepare(["--sft-jsonl", work("chats.parquet")] + chat, out, workers)
            with h5py.File(work(out), "r") as f:
                ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
            check(ids == want_ids, f"--workers {workers}: the tokens are not apply_chat_template's")
            check(mask == want_mask,
                  f"--workers {workers}: the loss mask is not transformers' assistant mask")
            check(from_parquet == from_jsonl,
                  f"--workers {workers}: the Parquet file's dataset is not its JSON lines'")
        print(f"ok   {len(rows)} conversations from Parquet at 1 and 3 workers: {len(ids)} tokens, "
              f"{sum(mask)} counted, as apply_chat_template and its assistant mask; the file is "
              "the JSON lines' file")

        # 2. Prompt-completion pairs and text documents.
        pairs = write_parquet(records, work("pairs.parquet"))
        write_jsonl(pairs, work("pairs.jsonl"))
        pair = ["--prompt-field", "question", "--response-field", "answer"]
        check(prepare(["--sft-jsonl", work("pairs.parquet")] + pair, "pairs_parquet.h5") ==
              prepare(["--sft-jsonl", work("pairs.jsonl")] + pair, "pairs_jsonl.h5"),
              "prompt-completion pairs: the Parquet file's dataset is not its JSON lines'")
        docs = write_parquet([{"id": r["id"], "text": r["question"] + "\n" + r["answer"]}
                              for r in records], work("docs.parquet"))
        write_jsonl(docs, work("docs.jsonl"))
        from_parquet = prepare(["--jsonl", work("docs.parquet")], "docs_parquet.h5")
        with h5py.File(work("docs_parquet.h5"), "r") as f:
            ids = f["tokens"][:].tolist()
        check(ids == [t for d in docs for t in reference(d["text"])["input_ids"]],
              "Parquet documents: the tokens are not tokenizer(text)'s in row order")
        check(from_parquet == prepare(["--jsonl", work("docs.jsonl")], "docs_jsonl.h5"),
              "Parquet documents: the file is not the JSON lines' file")
        print(f"ok   {len(pairs)} prompt-completion pairs and {len(docs)} documents from Parquet: "
              "the JSON lines' files, the documents' tokens tokenizer(text)'s")

        # 3. Refused, naming the file and the row, leaving nothing.
        bad = work("bad.h5")
        write_parquet([dict(r, answer=None) if r["id"] == 300 else r for r in records],
                      work("null.parquet"))
        for workers in ("1", "3"):
            refused([zt, "prepare-data", "--tokenizer", work("tok"), "--workers", workers,
                     "--sft-jsonl", work("null.parquet"), "--out", bad] + pair + python,
                    [work("null.parquet") + ":row 300: no string field 'answer'"], bad)
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
                 work("chats.parquet"), "--messages-field", "conversation", "--chat-template",
                 "--out", bad] + python, [work("chats.parquet") + ":row 0:", "conversation"], bad)
        with open(work("chats.parquet"), "rb") as f:
            whole = f.read()
        with open(work("cut.parquet"), "wb") as f:
            f.write(whole[:len(whole) // 2])
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
                 work("cut.parquet"), "--out", bad] + chat + python,
                [work("cut.parquet") + ": not a readable Parquet file"], bad)
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--text", work("docs.parquet"),
                 "--out", bad] + python,
                [work("docs.parquet") + ": a Parquet file, not text: --jsonl reads its rows"], bad)
        os.makedirs(work("no_pyarrow/pyarrow"), exist_ok=True)
        with open(work("no_pyarrow/pyarrow/__init__.py"), "w") as f:
            f.write("raise ImportError('pyarrow is not installed (a test stand-in)')\n")
        cmd = [zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
               work("chats.parquet"), "--out", bad] + chat + python
        print("+ PYTHONPATH=" + work("no_pyarrow") + " " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=work("no_pyarrow")),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(proc.stdout.rstrip())
        check(proc.returncode != 0 and work("chats.parquet") + ": a Parquet file" in proc.stdout
              and "no pyarrow" in proc.stdout and not os.path.exists(bad),
              "without pyarrow, a Parquet file was not refused naming the file and pyarrow")
        print("ok   a null response, a missing column, a file cut short, Parquet as --text and a "
              "missing pyarrow are refused naming the file (and the row), leaving nothing")

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
