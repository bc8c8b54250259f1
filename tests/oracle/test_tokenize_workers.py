#!/usr/bin/env python3
"""prepare-data --workers N (documents made by N forked processes) against transformers and one
process (label oracle).

The tokenizer and its chat template are test_hf_sft.py's (tool calls rendered), the examples its
pairs of lines of inputs/data/sample.txt.
1. 256 chat conversations of four shapes (a system prompt, two turns, a turn of tool calls with
   the tools listed and its results, a reply opening with blank lines) at --workers 3: the tokens
   and the loss mask are transformers' apply_chat_template with return_assistant_tokens_mask,
   and every dataset and attribute of the file equals --workers 1's. So do prompt-response SFT
   lines', JSON-lines documents', a JSON array of conversations' and text files'.
2. The first failure in input order is reported, whoever finds it, at 1 and at 3 workers: a bad
   message on line 20 (a job's error) before a line that is not JSON on line 35 (the reading's,
   which runs ahead of the jobs), and a bad message before an error the tokenizer raises in a
   job (a lone surrogate it refuses) or bytes that are not UTF-8 (which the decoder meets while reading
   ahead) in the same batch; each error alone is named by its line, in a file of CR-ended lines
   too; nothing is left. A record as deeply nested as one process reads, which cannot be pickled
   to a worker, is written as one process writes it. --workers 0, and --workers without --tokenizer, are refused.
3. A SIGTERM to prepare-data while its workers run, and a worker killed (as for memory):
   prepare-data reports the stop, or the worker's end naming --workers, and no worker, no output
   and no scratch file is left.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (SetupError, argument_parser, check, exit_status,  # noqa: E402
                            fresh_work_dir, require_venv_modules, run_tool)
from test_hf_sft import add_chat_template, examples  # noqa: E402
from test_hf_tokenizer import refused, train_tokenizer  # noqa: E402

h5py, np, transformers = require_venv_modules("h5py", "numpy", "transformers")


def contents(path):
    """Every dataset's bytes and every attribute (of the file, its groups and datasets) of an
    HDF5 file, by name."""
    items = {}

    def add(name, obj):
        items[name] = np.asarray(obj[()]).tobytes() if isinstance(obj, h5py.Dataset) else None
        items.update({f"{name}@{k}": repr(v) for k, v in obj.attrs.items()})

    with h5py.File(path, "r") as f:
        f.visititems(add)
        items.update({"@" + k: repr(v) for k, v in f.attrs.items()})
    return items


def conversations(records):
    """Four shapes in turn, with the tools each hands the template (or None)."""
    weather = {"type": "function", "function": {"name": "weather", "parameters": {}}}
    chats = []
    for i, r in enumerate(records):
        nxt = records[(i + 1) % len(records)]
        user, reply = {"role": "user", "content": r["question"]}, r["answer"]
        shape = i % 4
        if shape == 0:
            chats.append(([{"role": "system", "content": "Answer in one line."}, user,
                           {"role": "assistant", "content": reply}], None))
        elif shape == 1:
            chats.append(([user, {"role": "assistant", "content": reply},
                           {"role": "user", "content": nxt["question"]},
                           {"role": "assistant", "content": nxt["answer"]}], None))
        elif shape == 2:
            call = {"type": "function",
                    "function": {"name": "weather", "arguments": {"city": r["question"][:10]}}}
            chats.append(([user, {"role": "assistant", "content": "", "tool_calls": [call]},
                           {"role": "tool", "content": f"result {i}"},
                           {"role": "assistant", "content": reply}], [weather]))
        else:
            chats.append(([user, {"role": "assistant", "content": "\n\n" + reply}], None))
    return chats


def children(pid):
    """The processes whose parent is `pid` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry))
    return found


def started_at(pid):
    """The start time (clock ticks since boot) of process `pid`, None when it has ended (a
    zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def running(pid):
    return started_at(pid) is not None


def interrupted(zt, options, kill, started):
    """Runs prepare-data with `options` (2 workers), calls kill(its pid, the workers' pids) once
    both workers run, and waits for it to end. Returns (exit code, its output, the pids of the
    step and its workers), which are also added to `started`."""
    with tempfile.TemporaryFile("w+") as log:
        zt_proc = subprocess.Popen([zt, "prepare-data"] + options, stdout=log,
                                   stderr=subprocess.STDOUT)
        try:
            steps, workers, deadline = [], [], time.monotonic() + 120
            while len(workers) < 2 and zt_proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
                steps = children(zt_proc.pid)
                workers = children(steps[0]) if steps else []
            started.extend((p, started_at(p)) for p in workers + steps)
            check(len(workers) == 2, f"prepare-data --workers 2 started {len(workers)} workers")
            kill(zt_proc.pid, workers)
            code = zt_proc.wait(timeout=120)
        finally:
            if zt_proc.poll() is None:  # a failed check: not to outlive the test
                zt_proc.kill()
                zt_proc.wait()
        log.seek(0)
        said = log.read()
    print(said.rstrip())
    return code, said, workers + steps


class WorkersOracle:
    """The check's parts, run in order by run(); each reads what the parts before it left on self
    (the tokenizer with its chat template, the records, the conversations and their lines).
    left_running collects the processes a part started, for main() to stop after a failure."""

    def __init__(self, args, work):
        self.zt, self.work, self.left_running = args.zerotrain, work, []
        self.python = ["--python", sys.executable]
        self.text_file = os.path.join(args.source_dir, "inputs/data/sample.txt")
        train_tokenizer(self.text_file, work("tok"))
        add_chat_template(work("tok"))
        self.reference = transformers.AutoTokenizer.from_pretrained(work("tok"))
        self.records = examples(self.text_file, 256)  # 32 batches of 8 conversations

    def run(self):
        self.chat_sft()
        self.other_inputs()
        self.first_failure()
        self.deepest_record()
        self.interrupted_runs()

    def prepare(self, options, out, workers):
        run_tool([self.zt, "prepare-data", "--tokenizer", self.work("tok"), "--workers",
                  str(workers), "--out", self.work(out)] + options + self.python)
        return contents(self.work(out))

    def chat_sft(self):
        """Part 1: chat SFT at 3 workers against transformers and against 1 worker."""
        work, reference, records, prepare = self.work, self.reference, self.records, self.prepare
        # 1. The same dataset from 3 workers as from one, transformers' ids and mask.
        chats = conversations(records)
        with open(work("chats.jsonl"), "w") as f:
            for messages, tools in chats:
                f.write(json.dumps({"messages": messages, **({"tools": tools} if tools else {})})
                        + "\n")
        chat_options = ["--sft-jsonl", work("chats.jsonl"), "--messages-field", "messages",
                        "--chat-template"]
        parallel = prepare(chat_options, "chats3.h5", 3)
        want_ids, want_mask = [], []
        for messages, tools in chats:
            rendered = reference.apply_chat_template(messages, tools=tools, tokenize=True,
                                                     return_dict=True,
                                                     return_assistant_tokens_mask=True)
            want_ids += rendered["input_ids"]
            want_mask += rendered["assistant_masks"]
        with h5py.File(work("chats3.h5"), "r") as f:
            ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
        check(ids == want_ids, "--workers 3: the tokens are not apply_chat_template's")
        check(mask == want_mask, "--workers 3: the loss mask is not transformers' assistant mask")
        check(parallel == prepare(chat_options, "chats1.h5", 1),
              "--workers 3 and --workers 1 wrote different chat datasets")
        print(f"ok   chat SFT at --workers 3: {len(chats)} conversations, {len(ids)} tokens, "
              f"{sum(mask)} counted, as transformers' apply_chat_template; the file as one "
              "process writes it")
        self.chats, self.chat_options = chats, chat_options

    def other_inputs(self):
        """Part 1, the other inputs: 3 workers write what one writes."""
        work, records, chats, prepare = self.work, self.records, self.chats, self.prepare
        with open(work("pairs.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        with open(work("docs.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps({"text": r["question"] + "\n" + r["answer"]}) + "\n")
        with open(work("chats.json"), "w") as f:  # one JSON array, read whole before the fork
            json.dump([{"messages": messages} for messages, _ in chats[:64]], f)
        text_files = [work(f"doc{i}.txt") for i in range(20)]  # 3 batches
        for path, r in zip(text_files, records):
            with open(path, "w") as f:
                f.write(r["question"] + "\n" + r["answer"] + "\n")
        for what, options in [
                ("prompt-response SFT", ["--sft-jsonl", work("pairs.jsonl"), "--prompt-field",
                                         "question", "--response-field", "answer"]),
                ("JSON-lines documents", ["--jsonl", work("docs.jsonl")]),
                ("a JSON array of conversations", ["--sft-jsonl", work("chats.json"),
                                                   "--messages-field", "messages",
                                                   "--chat-template"]),
                ("text files", ["--text"] + text_files)]:
            name = what.split()[-1]
            check(prepare(options, name + "3.h5", 3) == prepare(options, name + "1.h5", 1),
                  f"{what}: --workers 3 and --workers 1 wrote different datasets")
            print(f"ok   {what} at --workers 3: the file as one process writes it")

    def first_failure(self):
        """Part 2: the first failure in input order is the one reported."""
        zt, work, python, text_file, chats, chat_options = (
            self.zt, self.work, self.python, self.text_file, self.chats, self.chat_options)
        # 2. The first failure in input order, whoever finds it, at 1 and 3 workers: a bad
        # message (a job's error) before a line that is not JSON (the reading's, which runs
        # ahead) or before an error the tokenizer raises in a job (a lone surrogate, which it
        # refuses with a TypeError, said as such) in the same batch; either alone, named by its
        # line.
        lines = [json.dumps({"messages": m}) for m, _ in chats[:40]]
        bad_message = json.dumps({"messages": [{"role": "function", "content": "x"}]})
        surrogate = json.dumps({"messages": [{"role": "user", "content": "\ud800"},
                                             {"role": "assistant", "content": "a"}]})
        latin1 = "caf\xe9".encode("latin-1")
        for name, bad_lines, named, end in [
                ("job_then_read", {20: bad_message, 35: "{not json"},
                 [":20: 'messages'[0]", "role"], b"\n"),
                ("job_then_unforeseen", {17: bad_message, 20: surrogate},
                 [":17: 'messages'[0]", "role"], b"\n"),
                ("unforeseen", {20: surrogate},
                 [":20: the text holds half of a UTF-16 surrogate pair"], b"\n"),
                ("nested_too_deep", {20: "[" * 100000}, [":20: not a JSON line"], b"\n"),
                ("job_then_bytes", {20: bad_message, 21: latin1}, [":20: 'messages'[0]", "role"],
                 b"\n"),
                ("bytes", {21: latin1}, [":21: not UTF-8 text: byte 4 of the line is 0xe9"],
                 b"\n"),
                ("bytes_cr", {21: latin1}, [":21: not UTF-8 text: byte 4 of the line is 0xe9"],
                 b"\r")]:  # lines ended by CR alone, as JSON lines may be
            path = work(name + ".jsonl")
            with open(path, "wb") as f:
                for n, line in enumerate(lines, 1):
                    line = bad_lines.get(n, line)
                    f.write((line if isinstance(line, bytes) else line.encode()) + end)
            for count in ("1", "3"):
                refused([zt, "prepare-data", "--tokenizer", work("tok"), "--workers", count,
                         "--out", work("bad.h5")] + chat_options[:1] + [path] + chat_options[2:]
                        + python, [path + named[0]] + named[1:], work("bad.h5"))
        refused([zt, "prepare-data", "--tokenizer", work("tok"), "--workers", "0", "--jsonl",
                 work("docs.jsonl"), "--out", work("bad.h5")] + python,
                ["--workers", "from 1"], work("bad.h5"))
        refused([zt, "prepare-data", "--workers", "2", "--text", text_file, "--out",
                 work("bad.h5")], ["--workers", "--tokenizer"], work("bad.h5"))
        print("ok   the first failure in input order is reported, whichever process finds it")
        self.lines = lines

    def deepest_record(self):
        """Part 2: the deepest record one process reads, at 3 workers."""
        zt, work, python, chats, chat_options, lines = (
            self.zt, self.work, self.python, self.chats, self.chat_options, self.lines)
        # A record as deeply nested as one process reads (in a field no option reads) cannot be
        # pickled to a worker: the batch is made by the main process, as --workers 1 makes it.
        def deep(depth, count):
            """Whether prepare-data at `count` workers takes line 21 nested `depth` deep."""
            path = work(f"deep{depth}.jsonl")
            with open(path, "w") as f:
                f.write("\n".join(lines[:20] + ['{"messages": %s, "meta": %s%s}' % (
                    json.dumps(chats[0][0]), "[" * depth, "]" * depth)] + lines[20:]) + "\n")
            return subprocess.run(
                [zt, "prepare-data", "--tokenizer", work("tok"), "--workers", count, "--out",
                 work(f"deep{depth}_{count}.h5")] + chat_options[:1] + [path] + chat_options[2:]
                + python, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0

        low, high = 900, 1000
        if not deep(low, "1") or deep(high, "1"):
            raise SetupError(f"one process should read a record nested {low} deep and refuse "
                             f"one nested {high} deep")
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if deep(middle, "1") else (low, middle)
        check(deep(low, "3") and contents(work(f"deep{low}_3.h5")) ==
              contents(work(f"deep{low}_1.h5")),
              f"--workers 3 did not write what one process writes of a record nested {low} deep")
        print(f"ok   a record nested {low} deep, the deepest one process reads: --workers 3 "
              "writes what one process writes")

    def interrupted_runs(self):
        """Part 3."""
        zt, work, python, chat_options, lines, left_running = (
            self.zt, self.work, self.python, self.chat_options, self.lines, self.left_running)
        # 3. Stopped, or a worker killed, while the workers run: nothing is left running or
        # written.
        with open(work("many.jsonl"), "w") as f:
            for _ in range(300):
                f.write("\n".join(lines) + "\n")
        for what, kill, said_part in [
                ("SIGTERM to prepare-data", lambda zt_pid, workers: os.kill(zt_pid, signal.SIGTERM),
                 "stopped by SIGTERM"),
                ("SIGKILL to a worker", lambda zt_pid, workers: os.kill(workers[0], signal.SIGKILL),
                 "give fewer --workers")]:
            code, said, processes = interrupted(zt, ["--tokenizer", work("tok"), "--workers", "2",
                                                     "--out", work("many.h5")] + chat_options[:1]
                                                + [work("many.jsonl")] + chat_options[2:] + python,
                                                kill, left_running)
            check(code != 0 and said_part in said, f"{what}: prepare-data exited with {code}")
            deadline = time.monotonic() + 30
            while any(running(p) for p in processes) and time.monotonic() < deadline:
                time.sleep(0.05)
            still = [p for p in processes if running(p)]
            check(not still, f"{what}: processes {still} of the step are still running")
            leftovers = [n for n in os.listdir(work()) if n.startswith("many.h5")]
            check(not leftovers, f"{what}: prepare-data left {leftovers}")
            print(f"ok   {what} while 2 workers ran: prepare-data said so, and no process or "
                  "file is left")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)
    oracle = None

    def checks():
        nonlocal oracle
        oracle = WorkersOracle(args, work)
        oracle.run()

    try:
        return exit_status(checks)
    finally:
        for pid, start in oracle.left_running if oracle else []:
            if start is not None and started_at(pid) == start:  # not a reused pid
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
