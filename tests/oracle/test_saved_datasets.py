#!/usr/bin/env python3
"""prepare-data reads datasets as the Hugging Face datasets library saves them: save_to_disk
directories, its cached Arrow files and its Parquet files, against the same rows as JSON lines
(label oracle).

The datasets are tests/data/saved_datasets/, written from its source.jsonl by datasets 5.2.0 and
3.6.0 themselves (make_saved_datasets.py): datasets 5 stores the messages, whose keys differ from
message to message, as JSON text (its Json feature, Arrow's arrow.json type), datasets 3 as
structs with the keys a message lacks null. The tokenizer and its chat template are
test_hf_sft.py's. For each version:
1. chats/ (save_to_disk in 3 shards, with a nanosecond timestamp column no option reads),
   chats.parquet (to_parquet) and cache/json-train.arrow (load_dataset's cache) give, as
   conversations (at 1 and 3 workers), prompt-completion pairs and documents, the file the same
   options give source.jsonl; the columns no option reads are named once, at the directory's
   row 0. shuffled/ (shuffled, saved with its indices flattened) gives the rows in the order
   load_from_disk gave them; chats_dict/train and chats_dict/test, given in turn, give
   source.jsonl's file. A Feather (Arrow IPC) file of the rows gives it too, and so does an Arrow stream of the
   conversations whose messages are arrow.json text and whose tools are structs holding it.
   source.jsonl's two-round conversations carry OpenAI's weights (0, then 1).
2. Refused, naming the file and the row (counted through the shards, as Dataset[i] indexes it),
   leaving nothing: a DatasetDict's directory (naming its splits and the directory of one); a
   directory save_to_disk did not write; a shard missing; a shard cut short (naming the row, and
   the shard); a saved dataset of no rows; a null answer in
   the second shard's second row (row 9); an Arrow file given to --text, with and without
   --tokenizer; a directory given to --text.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import argument_parser, check, exit_status, run_tool  # noqa: E402
from test_hf_sft import add_chat_template  # noqa: E402
from test_hf_tokenizer import train_tokenizer  # noqa: E402
from test_prepare_files import CHAT, PAIR, Session, write_jsonl  # noqa: E402

import pyarrow  # noqa: E402  (test_prepare_files requires it)
import pyarrow.feather  # noqa: E402
import pyarrow.ipc  # noqa: E402

VERSIONS = ("datasets-5.2.0", "datasets-3.6.0")
DOCS = ["--text-field", "answer"]


MODES = (("chats", "--sft-jsonl", CHAT), ("pairs", "--sft-jsonl", PAIR),
         ("docs", "--jsonl", DOCS))


# The files prepare-data writes from JSON lines, by (flag, the lines' bytes, options): each is
# written once (a prepare-data call starts Python with transformers, ~1.3 s).
JSONL_FILES = {}


def jsonl_file(s, flag, source, options):
    """The file prepare-data writes from the JSON lines `source` with `flag` and `options`."""
    with open(source, "rb") as f:
        key = (flag, hashlib.sha256(f.read()).hexdigest(), tuple(options))
    if key not in JSONL_FILES:
        JSONL_FILES[key] = s.prepare([flag, source] + options, f"jsonl_{len(JSONL_FILES)}.h5")
    return JSONL_FILES[key]


def same_files(s, saved, source, what, modes=MODES):
    """Each mode (conversations, pairs, documents) gives `saved` the file it gives `source`."""
    for name, flag, options in modes:
        got = s.prepare([flag, *saved] + options, f"{what}_{name}.h5")
        check(got == jsonl_file(s, flag, source, options),
              f"{what}: the {name} file is not the JSON lines' file")


def read_back_checks(s, data, version, source):
    """Part 1 for one version."""
    root = os.path.join(data, version)
    chats = os.path.join(root, "chats")
    same_files(s, [chats], source, f"{version} save_to_disk")
    check(s.prepare(["--sft-jsonl", chats] + CHAT, f"{version}_chats3.h5", workers=3) ==
          jsonl_file(s, "--sft-jsonl", source, CHAT),
          f"{version}: save_to_disk at 3 workers is not the JSON lines' file")
    out = run_tool([s.zt, "prepare-data", "--tokenizer", s.work("tok"), "--sft-jsonl", chats,
                    "--out", s.work(f"{version}_noted.h5")] + PAIR + s.python)
    noted = [line for line in out.splitlines() if line.startswith("note:")]
    check(len(noted) == 1 and f"'created' ({chats}:row 0)" in noted[0] and
          f"'messages' ({chats}:row 0)" in noted[0] and "'answer'" not in noted[0],
          f"{version}: the unread columns were not named once, at row 0: {noted}")
    same_files(s, [os.path.join(root, "chats.parquet")], source, f"{version} to_parquet")
    same_files(s, [os.path.join(root, "cache", "json-train.arrow")], source, f"{version} cache")
    splits = [os.path.join(root, "chats_dict", split) for split in ("train", "test")]
    same_files(s, splits, source, f"{version} DatasetDict splits")
    with open(os.path.join(root, "shuffled_ids.json")) as f:
        order = json.load(f)
    with open(source) as f:
        rows = [json.loads(line) for line in f]
    write_jsonl([rows[i] for i in order], s.work("shuffled.jsonl"))
    same_files(s, [os.path.join(root, "shuffled")], s.work("shuffled.jsonl"),
               f"{version} shuffled")
    print(f"ok   {version}: save_to_disk (3 shards, at 1 and 3 workers), to_parquet, the "
          "load_dataset cache, a DatasetDict's splits and a shuffled dataset give the JSON "
          "lines' files (conversations, pairs, documents); the unread columns are named once")


def refusals(s, data):
    """Part 2."""
    root = os.path.join(data, VERSIONS[0])
    s.refused(["--sft-jsonl", os.path.join(root, "chats_dict")] + CHAT,
              [os.path.join(root, "chats_dict") + ": a DatasetDict", "train, test",
               os.path.join(root, "chats_dict", "train")])
    s.refused(["--sft-jsonl", root] + CHAT,
              [root + ": a directory, and not one that datasets' save_to_disk wrote"])
    # A directory of JSON lines (load_dataset("json", data_dir=...) reads one): named as such.
    os.makedirs(s.work("lines"))
    for name in ("b.jsonl", "a.jsonl", "notes.txt"):
        with open(s.work("lines", name), "w") as f:
            f.write('{"prompt": "Hi", "response": "Hello"}\n')
    s.refused(["--sft-jsonl", s.work("lines")] + CHAT,
              [s.work("lines") + ": a directory, and not one that datasets' save_to_disk wrote "
               "(it holds no state.json); to read its files, give them: " +
               os.path.join(s.work("lines"), "*.jsonl")])
    shutil.copytree(os.path.join(root, "chats"), s.work("missing"))
    os.remove(s.work("missing", "data-00001-of-00003.arrow"))
    s.refused(["--sft-jsonl", s.work("missing")] + CHAT,
              [s.work("missing", "state.json") + ": lists data-00001-of-00003.arrow"])
    shutil.copytree(os.path.join(root, "chats"), s.work("cut"))
    shard = s.work("cut", "data-00002-of-00003.arrow")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    s.refused(["--sft-jsonl", s.work("cut")] + CHAT,
              [s.work("cut") + ": the rows from row 16 on cannot be read (in "
               "data-00002-of-00003.arrow)"])
    for version in VERSIONS:  # 5.2.0 and 3.6.0 save a dataset of no rows as one empty shard
        empty = os.path.join(data, version, "empty")
        s.refused(["--sft-jsonl", empty] + CHAT, [empty + ": no records in the file"])
    # A null answer in the second shard, rewritten as datasets writes a shard (an Arrow stream).
    shutil.copytree(os.path.join(root, "chats"), s.work("null"))
    shard = s.work("null", "data-00001-of-00003.arrow")
    with open(shard, "rb") as f:  # read whole: the file is rewritten below
        table = pyarrow.ipc.open_stream(f.read()).read_all()
    answers = table.column("answer").to_pylist()
    answers[1] = None
    table = table.set_column(table.schema.get_field_index("answer"), "answer",
                             pyarrow.array(answers, pyarrow.string()))
    with pyarrow.ipc.new_stream(shard, table.schema) as writer:
        writer.write_table(table)
    for workers in ("1", "3"):
        s.refused(["--workers", workers, "--sft-jsonl", s.work("null")] + PAIR,
                  [s.work("null") + ":row 9: no string field 'answer'"])
    cache = os.path.join(root, "cache", "json-train.arrow")
    s.refused(["--text", cache], [cache + ": an Arrow file, not text: --jsonl reads its rows"])
    s.refused(["--text", cache], [cache, "an Arrow file", "--tokenizer with --jsonl"],
              tokenizer=False)
    s.refused(["--text", os.path.join(root, "chats")],
              [os.path.join(root, "chats") + "' is not a file"])
    print("ok   a DatasetDict's directory, a directory save_to_disk did not write, a shard "
          "missing or cut short, a null answer at row 9 (at 1 and 3 workers), an Arrow file as "
          "--text and a directory as --text are refused naming the file and the row")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    s = Session(args)
    data = os.path.join(args.source_dir, "tests", "data", "saved_datasets")
    source = os.path.join(data, "source.jsonl")

    def checks():
        train_tokenizer(s.text_file, s.work("tok"))
        add_chat_template(s.work("tok"))
        for version in VERSIONS:
            read_back_checks(s, data, version, source)
        with open(source) as f:
            rows = [json.loads(line) for line in f]
        pyarrow.feather.write_feather(pyarrow.Table.from_pylist(rows), s.work("chats.feather"))
        same_files(s, [s.work("chats.feather")], source, "Feather")
        same_files(s, [os.path.join(data, VERSIONS[0], "nested.arrow")], source, "nested JSON",
                   MODES[:1])
        print("ok   a Feather (Arrow IPC) file gives the JSON lines' files; so do messages and "
              "tools as arrow.json text inside lists and structs")
        refusals(s, data)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
