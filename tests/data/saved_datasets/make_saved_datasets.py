#!/usr/bin/env python3
"""Writes the datasets of this directory with the Hugging Face datasets library, as its users save
them (see SOURCES.md): python make_saved_datasets.py OUT_DIR, in an environment with datasets.

From source.jsonl, read as load_dataset("json") reads it (the rows a user downloads), with a
"created" column of nanosecond timestamps added (a column no prepare-data option reads):
- chats/: Dataset.save_to_disk in 3 shards;
- chats_dict/: a DatasetDict of splits train (rows 0-15) and test (16-23), save_to_disk;
- shuffled/: the dataset shuffled (seed 0), save_to_disk; shuffled_ids.json: the ids in the
  order load_from_disk gives its rows;
- chats.parquet: Dataset.to_parquet (as push_to_hub writes a split);
- cache/json-train.arrow: the file load_dataset caches the rows in (without "created");
- empty/: the dataset filtered to no row, save_to_disk;
- nested.arrow: the messages and tools of the rows as an Arrow stream written by pyarrow, each
  message as arrow.json text, each tool a struct whose "function" is arrow.json text (JSON text
  inside a struct, as datasets' Json feature nests it).
"""

import datetime
import glob
import json
import os
import shutil
import sys
import tempfile

import datasets


def main():
    out = sys.argv[1]
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "source.jsonl")
    with tempfile.TemporaryDirectory() as cache:
        rows = datasets.load_dataset("json", data_files=source, split="train", cache_dir=cache)
        cached = glob.glob(os.path.join(cache, "**", "*.arrow"), recursive=True)
        assert len(cached) == 1, cached
        os.makedirs(os.path.join(out, "cache"), exist_ok=True)
        shutil.copy(cached[0], os.path.join(out, "cache", "json-train.arrow"))
    start = datetime.datetime(2026, 1, 1)
    stamps = [start + datetime.timedelta(microseconds=i) for i in range(len(rows))]
    rows = rows.add_column("created", stamps,
                           feature=datasets.Value("timestamp[ns]"))
    rows.save_to_disk(os.path.join(out, "chats"), num_shards=3)
    rows.to_parquet(os.path.join(out, "chats.parquet"))
    datasets.DatasetDict({"train": rows.select(range(16)),
                          "test": rows.select(range(16, len(rows)))}).save_to_disk(
        os.path.join(out, "chats_dict"))
    rows.shuffle(seed=0).save_to_disk(os.path.join(out, "shuffled"))
    shuffled = datasets.load_from_disk(os.path.join(out, "shuffled"))
    with open(os.path.join(out, "shuffled_ids.json"), "w") as f:
        json.dump([row["id"] for row in shuffled], f)
    rows.filter(lambda row: False).save_to_disk(os.path.join(out, "empty"))
    write_nested(source, os.path.join(out, "nested.arrow"))
    print(f"wrote {out} with datasets {datasets.__version__}")


def write_nested(source, path):
    import pyarrow.ipc
    json_type = pyarrow.json_()
    tool_type = pyarrow.struct([("type", pyarrow.string()), ("function", json_type)])
    with open(source) as f:
        rows = [json.loads(line) for line in f]
    messages = pyarrow.array([[json.dumps(m) for m in row["messages"]] for row in rows],
                             pyarrow.list_(pyarrow.string())).cast(pyarrow.list_(json_type))
    tools = pyarrow.array([[{"type": t["type"], "function": json.dumps(t["function"])}
                            for t in json.loads(row["tools"])] if row["tools"] else None
                           for row in rows], pyarrow.list_(
        pyarrow.struct([("type", pyarrow.string()), ("function", pyarrow.string())])))
    table = pyarrow.table({"messages": messages, "tools": tools.cast(pyarrow.list_(tool_type))})
    with pyarrow.ipc.new_stream(path, table.schema) as writer:
        writer.write_table(table)


if __name__ == "__main__":
    main()
