#!/usr/bin/env python3
"""Published tokenizer_config.json files through chat-template SFT (CTest label "oracle", in the
project venv).

Every tests/data/hf_models/*/tokenizer_config.json (sources in SOURCES.md) is used as published:
its added_tokens_decoder, special tokens, tokenizer class and chat template (or the
chat_template.jinja published beside it, SmolLM3-3B's). Beside it goes a
tokenizer.json made here (the published ones are megabytes): a byte-level BPE whose vocabulary
holds the 256 byte symbols and every added token at the id the config gives it. For each:

1. `prepare-data --sft-jsonl --messages-field messages --chat-template` on a two-round
   conversation (with a system turn where the template takes one) succeeds;
2. its ids equal transformers' AutoTokenizer.from_pretrained(DIR).apply_chat_template(tokenize=True);
3. its loss mask counts one run of tokens per assistant reply: the reply and only special tokens
   and whitespace after it (what closes the turn), and before it nothing but the empty
   reasoning block Qwen3 renders in its last turn. The first run, with its special tokens,
   reads the reply and what closes a turn as read off each template (TURN_CLOSING). Qwen3 also
   runs with the replies "d" and "end", pieces of its own "<|im_end|>", with reasoning in its
   first reply, which the template drops from a turn before the last user message, and with
   reasoning_content on both replies: the last one's counts in its <think> block, the first
   one's is dropped; and with TRL's chat_template_kwargs {"enable_thinking": false}, whose
   generation prompt writes the empty reasoning block: the ids are apply_chat_template's given
   it, and no counted run holds "<think>". (Phi-3 closes a conversation with EOS but a turn with
   <|end|>: its first reply counts up to <|end|>. Gemma's "<end_of_turn>" is not marked special
   in its config, and is read off as what closes the turn.)
The same conversation as LLaMA-Factory's alpaca record (--system-field system, its first round
in --history-field history) gives the same ids and mask, and with an empty system the ids of the
rounds alone (Qwen2.5's template writes its default system prompt), both replies counted.
Tool calls (TRL's format: an assistant turn with tool_calls, a tool result, the `tools` column)
go through every config as well. The templates written for them (Qwen2.5, Qwen3, Llama 3.1) give
apply_chat_template(messages, tools=...)'s ids, and count exactly two runs, which read (special
tokens included) the call and the answer, each with what closes its turn, as read off each
template by hand (TEMPLATE_TURNS); never the tool result; the same conversation in ShareGPT's
form (LLaMA-Factory's function_call and observation, the tools a string of bare function schemas,
wrapped as LLaMA-Factory wraps them) gives the same runs and apply_chat_template's ids. Llama 3.1 reads the messages
with the null keys an Arrow export writes; Qwen2.5 runs two calls in one turn; Qwen3 a tools column and
call arguments kept as JSON strings (as Parquet datasets store them), TRL's conversational
prompt-completion, and an agent's trace (reasoning before a call, two turns of calls in a row, a
later user turn) whose turns are located by the probes. The other templates are refused naming
the line and the calls they drop (with the name in the text around them; SmolLM2's also the
tools it leaves out), or with the template's own error, leaving no data.
Messages given as OpenAI's lists of text parts, which transformers renders unlike their text with
each of these templates, are refused naming the line and the first message, leaving no data.
And an eos_token that tokenizer.json lacks (transformers would add it as a new id beyond the
model's vocabulary without a word) is refused naming the token and the file, leaving no data.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)

h5py, tokenizers, transformers = require_venv_modules("h5py", "tokenizers", "transformers")

USER = ["Name three primes.", "And the next one?"]
ASSISTANT = ["Two, three and five.", "Seven comes next."]


def tokenizer_json(config):
    """A byte-level BPE without merges: the added tokens of the config at their ids, the 256
    byte symbols at the lowest free ids, unused ids filled with placeholder tokens."""
    from tokenizers import decoders, models, pre_tokenizers
    added = {int(i): entry["content"] for i, entry in config.get("added_tokens_decoder", {}).items()}
    vocab, next_id = {}, 0
    for symbol in sorted(pre_tokenizers.ByteLevel.alphabet()):
        while next_id in added:
            next_id += 1
        vocab[symbol] = next_id
        next_id += 1
    for i, content in added.items():
        vocab[content] = i
    used = set(vocab.values())
    for i in range(max(used) + 1):
        if i not in used:
            vocab[f"<placeholder_{i}>"] = i
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(c, special=True, normalized=False)
                            for i, c in sorted(added.items())
                            if config["added_tokens_decoder"][str(i)].get("special", True)])
    return tok


def conversation(tok, replies):
    """Two rounds, with a system turn when the template accepts one."""
    rounds = [m for u, a in zip(USER, replies)
              for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]
    with_system = [{"role": "system", "content": "Be brief."}] + rounds
    try:
        tok.apply_chat_template(with_system, tokenize=False)
        return with_system
    except Exception:  # Mistral's and Llama 2's templates refuse some system turns
        return rounds


def counted_runs(ids, mask):
    """The maximal runs of counted ids."""
    runs, run = [], []
    for i, m in zip(ids, mask):
        if m:
            run.append(i)
        elif run:
            runs.append(run)
            run = []
    return runs + ([run] if run else [])


# What closes an assistant turn that another turn follows, read off each template by hand, as
# the tokenizer encodes it (Phi-3's "<|end|>" is an rstrip token: the newline after it goes).
TURN_CLOSING = {
    "HuggingFaceTB--SmolLM2-135M-Instruct": "<|im_end|>\n",
    "Qwen--Qwen2-7B-Instruct": "<|im_end|>\n",
    "Qwen--Qwen2.5-0.5B-Instruct": "<|im_end|>\n",
    "Qwen--Qwen3-0.6B": "<|im_end|>\n",
    "meta-llama--Llama-3.1-8B-Instruct": "<|eot_id|>",
    "microsoft--Phi-3-mini-4k-instruct": "<|end|>",
    "mistralai--Mistral-7B-Instruct-v0.1": "</s>",
    "resaved-unsloth--google--codegemma-7b-it": "<end_of_turn>\n",
}
LEGACY_SOURCE = "HuggingFaceTB--SmolLM2-135M-Instruct"  # the first config, rewritten


def copy_tokenizer_files(source, directory):
    """The published tokenizer_config.json, and the chat_template.jinja published beside it where
    the template is kept in its own file (SmolLM3-3B's, as transformers 4.47 and later save it)."""
    shutil.copy(source, os.path.join(directory, "tokenizer_config.json"))
    template = os.path.join(os.path.dirname(source), "chat_template.jinja")
    if os.path.exists(template):
        shutil.copy(template, os.path.join(directory, "chat_template.jinja"))


def reference_tokenizer(directory):
    """transformers' AutoTokenizer of the directory, with its chat_template.jinja as transformers
    4.47 and later load it (4.46, pinned here, reads the config's template only)."""
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    template = os.path.join(directory, "chat_template.jinja")
    if os.path.exists(template):
        with open(template, encoding="utf-8") as f:
            tok.chat_template = f.read()
    return tok


def check_one(work, zt, source, replies=ASSISTANT, label="", rendered=None, arguments=None,
              unlearned=None):
    """`rendered`: the replies as the template renders them, when it changes them; `arguments`:
    the line's chat_template_kwargs (TRL's); `unlearned`: text no counted run may hold."""
    name = os.path.basename(os.path.dirname(source)) + label
    config = json.load(open(source, encoding="utf-8"))
    directory = work(name)
    os.makedirs(directory)
    copy_tokenizer_files(source, directory)
    tokenizer_json(config).save(os.path.join(directory, "tokenizer.json"))
    reference = reference_tokenizer(directory)
    messages = conversation(reference, replies)
    data = work(name + ".jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.write(json.dumps(dict({"messages": messages},
                                **({"chat_template_kwargs": arguments} if arguments else {})))
                + "\n")
    run_tool([zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", data,
              "--messages-field", "messages", "--chat-template", "--out", work(name + ".h5")])
    with h5py.File(work(name + ".h5"), "r") as f:
        ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
    want = reference.apply_chat_template(messages, tokenize=True, **(arguments or {}))
    check(ids == want, f"{name}: the ids differ from apply_chat_template's")
    # One counted run per reply: the reply, then only special tokens and whitespace (what closes
    # the turn); before it only the empty reasoning block Qwen3 gives its last turn.
    runs = counted_runs(ids, mask)
    check(len(runs) == len(replies), f"{name}: {len(runs)} counted runs for {len(replies)} replies")
    # The first reply's run, special tokens included, ends with what closes its turn and nothing
    # of the next one (Phi-3's next "<|user|>" starts like its "<|endoftext|>").
    base = os.path.basename(os.path.dirname(source))
    first = reference.decode(runs[0], clean_up_tokenization_spaces=False)
    want = (rendered or replies)[0] + TURN_CLOSING.get(base, TURN_CLOSING[LEGACY_SOURCE])
    check(first == want, f"{name}: the first counted run reads {first!r}, not {want!r}")
    # Gemma's "<end_of_turn>" is an added token its config does not mark special: what closes
    # the turn all the same, read off as such.
    closing = TURN_CLOSING.get(base, TURN_CLOSING[LEGACY_SOURCE]).strip()
    unmarked_closing = closing not in reference.all_special_tokens
    for run, reply in zip(runs, rendered or replies):
        text = reference.decode(run, skip_special_tokens=True)
        text = text.replace("<think>\n\n</think>\n\n", "", 1).strip()
        if unmarked_closing and text.endswith(closing):
            text = text[: -len(closing)].strip()
        check(text == reply, f"{name}: a counted run reads {text!r} without its special tokens, "
              f"not the reply {reply!r} ({reference.decode(run)!r})")
        check(not unlearned or unlearned not in reference.decode(run),
              f"{name}: a counted run holds {unlearned!r}: {reference.decode(run)!r}")
    if not label:
        check_alpaca_history(work, zt, directory, name, reference, messages, ids, mask)
    print(f"ok   {name}: {len(ids)} tokens as apply_chat_template gives them, {sum(mask)} "
          f"counted: each reply and what closes it, no other turn")


def check_alpaca_history(work, zt, directory, name, reference, messages, ids, mask):
    """The conversation as LLaMA-Factory's alpaca record (its system column, its first round as
    the history) gives the conversation's ids and mask; with an empty system, the ids of the
    rounds alone (the template's default system prompt, Qwen2.5's), and both replies counted."""
    rounds = [m for m in messages if m["role"] != "system"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    record = {"instruction": rounds[2]["content"], "input": "", "output": rounds[3]["content"],
              "system": system, "history": [[rounds[0]["content"], rounds[1]["content"]]]}
    status, output, got_ids, got_mask = prepare(
        work, zt, directory, name + "-alpaca", [record, dict(record, system="")],
        ["--prompt-field", "instruction,input", "--response-field", "output", "--system-field",
         "system", "--history-field", "history"])
    check(status == 0, f"{name}-alpaca: refused: {output}")
    check(got_ids == ids + reference.apply_chat_template(rounds, tokenize=True),
          f"{name}-alpaca: the ids differ from apply_chat_template's of the conversations")
    status, output, _, rounds_mask = prepare(work, zt, directory, name + "-rounds",
                                             [{"messages": rounds}], ["--messages-field",
                                                                      "messages"])
    check(status == 0, f"{name}-rounds: refused: {output}")
    check(got_mask == mask + rounds_mask and len(counted_runs(got_ids[len(ids):],
                                                              rounds_mask)) == 2,
          f"{name}-alpaca: the history's reply or the output is not counted as in the conversation")


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
# What each template written for tool calls renders, read off the template by hand: the call
# get_weather(city="Paris"), what closes a turn, and what opens the text of the last one.
QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TEMPLATE_TURNS = {
    "Qwen--Qwen2.5-0.5B-Instruct": (QWEN_CALL, "<|im_end|>\n", ""),
    "Qwen--Qwen3-0.6B": (QWEN_CALL, "<|im_end|>\n", "<think>\n\n</think>\n\n"),
    "meta-llama--Llama-3.1-8B-Instruct": (
        '{"name": "get_weather", "parameters": {"city": "Paris"}}', "<|eot_id|>", ""),
}
ANSWER = "It is 18C and windy."


def call(city="Paris", as_string=False):
    arguments = {"city": city}
    return {"type": "function", "function": {
        "name": "get_weather", "arguments": json.dumps(arguments) if as_string else arguments}}


def tool_conversation(calls):
    """A question, a turn that only makes `calls` (no content, as TRL's example writes it), their
    results, the answer."""
    return ([{"role": "user", "content": "What is the weather in Paris?"},
             {"role": "assistant", "tool_calls": calls}] +
            [{"role": "tool", "name": "get_weather", "content": "18C and windy"} for _ in calls] +
            [{"role": "assistant", "content": ANSWER}])


def as_arrow_exports(messages):
    """Every message with every key of the column, null where it has none, as a dataset
    exported from Arrow or Parquet writes them."""
    keys = ("role", "content", "tool_calls", "name", "tool_call_id")
    return [{k: m.get(k) for k in keys} for m in messages]


def prepare(work, zt, directory, name, records, extra=()):
    """prepare-data on `records`; (exit status, output, ids, mask)."""
    import subprocess
    data = work(name + ".jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    out = work(name + ".h5")
    proc = subprocess.run([zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", data,
                           "--chat-template", "--out", out] + list(extra),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        check(not os.path.exists(out), f"{out} was left behind")
        return proc.returncode, proc.stdout, None, None
    with h5py.File(out, "r") as f:
        return 0, proc.stdout, f["tokens"][:].tolist(), f["loss_mask"][:].tolist()


def check_content_parts(work, zt, source):
    """Every message as OpenAI's list of two text parts, which transformers renders unlike the
    strings of both with every published template here (Llama 3.1's prints the lists as Python
    does, the others fail on them): the line is refused naming the first message, leaving no
    data."""
    name = os.path.basename(os.path.dirname(source))
    directory = work(name)  # check_one's
    reference = reference_tokenizer(directory)
    messages = conversation(reference, ASSISTANT)
    split = [dict(m, content=[{"type": "text", "text": m["content"][:5]},
                              {"type": "text", "text": m["content"][5:]}]) for m in messages]
    try:
        alike = (reference.apply_chat_template(split, tokenize=False) ==
                 reference.apply_chat_template(messages, tokenize=False))
    except Exception:
        alike = False
    check(not alike, f"{name}: transformers renders the parts as their text")
    status, output, _, _ = prepare(work, zt, directory, name + "-parts", [{"messages": split}],
                                   ["--messages-field", "messages"])
    check(status != 0 and work(name + "-parts.jsonl") + ":1: the chat template does not render "
          f"the list of content parts of 'messages'[0] ({messages[0]['role']}) as their text"
          in output, f"{name}: content as parts was not refused naming the message: {output}")
    print(f"ok   {name}: messages as lists of parts refused ({output.splitlines()[0]})")


def check_tool_refusals(work, zt, directory, name):
    """A template not written for tool calls: refused for the calls it drops (without a tools
    column; the function's name also in the user's text and the turn's content, where a search
    for it would find it), or by the template itself; SmolLM2's also for the tools it leaves
    out."""
    messages = tool_conversation([call()])
    messages[0]["content"] += " Use get_weather."
    messages[1]["content"] = "Calling get_weather."
    refusals = [("-tool-calls", {"messages": messages}, "tool_calls of 'messages'[1]")]
    if "SmolLM2" in name:
        refusals.append(("-tools", {"messages": messages, "tools": TOOLS}, "render the tools"))
    for label, record, reason in refusals:
        status, output, _, _ = prepare(work, zt, directory, name + label, [record],
                                       ["--messages-field", "messages"])
        check(status != 0, f"{name}: a template not written for tool calls was accepted")
        check(name + label + ".jsonl:1" in output and
              (reason in output or "chat template failed" in output),
              f"{name}: the refusal does not name the line and the {reason}: {output}")
        print(f"ok   {name}: tool calls refused ({output.splitlines()[0]})")


def check_tool_calls(work, zt, source):
    name = os.path.basename(os.path.dirname(source))
    directory = work(name + "-tools")
    os.makedirs(directory)
    copy_tokenizer_files(source, directory)
    tokenizer_json(json.load(open(source, encoding="utf-8"))).save(
        os.path.join(directory, "tokenizer.json"))
    if name not in TEMPLATE_TURNS:
        check_tool_refusals(work, zt, directory, name)
        return
    reference = reference_tokenizer(directory)
    call_text, close, last_opening = TEMPLATE_TURNS[name]

    def check_runs(label, records, extra, messages, runs_want, tools=TOOLS):
        """prepare-data on the records gives apply_chat_template's ids of `messages` (with
        `tools`), and its counted runs read `runs_want` with their special tokens."""
        status, output, ids, mask = prepare(work, zt, directory, name + label, records, extra)
        check(status == 0, f"{name}{label}: refused: {output}")
        # A turn that leaves its content out is rendered with an empty one (Qwen3's template
        # fails on a missing content).
        given = [dict(m, content=m.get("content") or "") for m in messages]
        want = reference.apply_chat_template(given, tools=tools, tokenize=True)
        check(ids == want, f"{name}{label}: the ids differ from apply_chat_template's")
        runs = [reference.decode(r, clean_up_tokenization_spaces=False)
                for r in counted_runs(ids, mask)]
        check(runs == runs_want, f"{name}{label}: the counted runs read {runs}, not {runs_want}")

    messages = tool_conversation([call()])
    runs = [call_text + close, last_opening + ANSWER + close]
    # Llama 3.1's template takes a "tool_calls" key for a call even when it is null.
    given = as_arrow_exports(messages) if name.startswith("meta-llama") else messages
    check_runs("-tools", [{"messages": given, "tools": TOOLS}], ["--messages-field", "messages"],
               messages, runs)
    # ShareGPT, as LLaMA-Factory's sharegpt format writes the call (a function_call holding its
    # JSON), the result (an observation, which names no function) and the tools (a string of bare
    # function schemas, which are wrapped as TOOLS are, as LLaMA-Factory wraps them).
    bare = [t["function"] for t in TOOLS]
    sharegpt = [{"from": "human", "value": messages[0]["content"]},
                {"from": "function_call", "value": json.dumps(call()["function"])},
                {"from": "observation", "value": messages[2]["content"]},
                {"from": "gpt", "value": ANSWER}]
    check_runs("-sharegpt", [{"conversations": sharegpt, "tools": json.dumps(bare)}],
               ["--messages-field", "conversations"],
               [{k: v for k, v in m.items() if k != "name"} for m in messages], runs)
    if name.startswith("Qwen--Qwen2.5"):
        two = tool_conversation([call(), call("Lyon")])
        check_runs("-two-calls", [{"messages": two, "tools": TOOLS}],
                   ["--messages-field", "messages"], two,
                   [call_text + "\n" + call_text.replace("Paris", "Lyon") + close, runs[1]])
    if name.startswith("Qwen--Qwen3"):
        # Parquet-style: the tools column and the arguments as JSON strings, under other names.
        strings = tool_conversation([call(as_string=True)])
        check_runs("-strings", [{"conversation": strings, "functions": json.dumps(TOOLS)}],
                   ["--messages-field", "conversation", "--tools-field", "functions"],
                   strings, runs)
        # TRL's conversational prompt-completion: the completion's turns count.
        check_runs("-prompt-completion",
                   [{"prompt": messages[:1], "completion": messages[1:], "tools": TOOLS}],
                   ["--prompt-field", "prompt", "--response-field", "completion"], messages, runs)
        # An agent's trace: reasoning before a call, two turns of calls in a row (the second
        # with a content that holds the generation prompt's text: its turn starts before it), a
        # later user turn. Once that turn follows, the template drops the reasoning and writes no reasoning
        # block before the earlier turns, so neither the turns before a call nor the turns
        # through it render as the start of the whole conversation.
        trace = [{"role": "user", "content": "Weather in Paris and Lyon?"},
                 {"role": "assistant", "content": "<think>\nParis first.\n</think>\n\n",
                  "tool_calls": [call()]},
                 {"role": "tool", "content": "18C"},
                 {"role": "assistant", "content": "Lyon: <|im_start|>assistant\n",
                  "tool_calls": [call("Lyon")]},
                 {"role": "tool", "content": "20C"},
                 {"role": "assistant", "content": "Paris 18C, Lyon 20C."},
                 {"role": "user", "content": "Thanks!"},
                 {"role": "assistant", "content": "You are welcome."}]
        check_runs("-trace", [{"messages": trace, "tools": TOOLS}],
                   ["--messages-field", "messages"], trace,
                   [call_text + close,
                    "Lyon: <|im_start|>assistant\n\n" + call_text.replace("Paris", "Lyon") + close,
                    "Paris 18C, Lyon 20C." + close, last_opening + "You are welcome." + close])
    print(f"ok   {name}: tool calls as apply_chat_template(tools=...) renders them; the calls "
          "and the answers count with what closes their turns, the tool results do not")


def check_reasoning_content(work, zt, source):
    """Qwen3's template reads an assistant turn's reasoning_content: the last turn's is rendered
    in its <think> block and counts, an earlier turn's is dropped (as transformers renders it)."""
    name = os.path.basename(os.path.dirname(source)) + "-reasoning-content"
    directory = work(name)
    os.makedirs(directory)
    copy_tokenizer_files(source, directory)
    tokenizer_json(json.load(open(source, encoding="utf-8"))).save(
        os.path.join(directory, "tokenizer.json"))
    reference = reference_tokenizer(directory)
    messages = [{"role": "user", "content": USER[0]},
                {"role": "assistant", "content": ASSISTANT[0], "reasoning_content": "Small."},
                {"role": "user", "content": USER[1]},
                {"role": "assistant", "content": ASSISTANT[1], "reasoning_content": "Seven."}]
    status, output, ids, mask = prepare(work, zt, directory, name, [{"messages": messages}],
                                        ["--messages-field", "messages"])
    check(status == 0, f"{name}: refused: {output}")
    check(ids == reference.apply_chat_template(messages, tokenize=True),
          f"{name}: the ids differ from apply_chat_template's")
    runs = [reference.decode(r, clean_up_tokenization_spaces=False)
            for r in counted_runs(ids, mask)]
    want = [ASSISTANT[0] + "<|im_end|>\n",
            "<think>\nSeven.\n</think>\n\n" + ASSISTANT[1] + "<|im_end|>\n"]
    check(runs == want, f"{name}: the counted runs read {runs}, not {want}")
    print(f"ok   {name}: the last turn's reasoning counts in its <think> block, the earlier "
          "one's is dropped, as apply_chat_template renders them")


def legacy_added_token_config(work, source):
    """The first corpus config with its special tokens written as the legacy AddedToken dicts
    older transformers releases saved ({"__type": "AddedToken", "content": ...})."""
    config = json.load(open(source, encoding="utf-8"))
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        if isinstance(config.get(key), str):
            config[key] = {"__type": "AddedToken", "content": config[key], "lstrip": False,
                           "normalized": False, "rstrip": False, "single_word": False}
    directory = work("tokenizer_configs_legacy", "legacy-added-tokens")
    os.makedirs(directory)
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return path


def check_missing_eos_is_refused(work, zt, source):
    import subprocess
    config = json.load(open(source, encoding="utf-8"))
    directory = work("missing_eos")
    os.makedirs(directory)
    tokenizer_json(config).save(os.path.join(directory, "tokenizer.json"))
    config["eos_token"] = "<|no such token|>"
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    data = work("missing_eos.jsonl")
    with open(data, "w", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": "a question", "response": "an answer"}) + "\n")
    out = work("missing_eos.h5")
    proc = subprocess.run([zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", data,
                           "--out", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.strip())
    check(proc.returncode != 0, "a tokenizer whose eos_token it lacks was accepted")
    check("<|no such token|>" in proc.stdout and "tokenizer.json" in proc.stdout,
          "the refusal does not name the token and the file")
    check(not os.path.exists(out), f"{out} was left behind")
    print("ok   an eos_token that tokenizer.json lacks is refused, naming it")


def published_configs(source_dir):
    """Every tests/data/hf_models/*/tokenizer_config.json, sorted (none is a failed check)."""
    configs = sorted(glob.glob(os.path.join(source_dir, "tests/data/hf_models/*",
                                            "tokenizer_config.json")))
    check(configs, "no tokenizer_config.json under tests/data/hf_models")
    return configs


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    transformers.logging.set_verbosity_error()
    work = fresh_work_dir(args.work_dir)

    def checks():
        configs = published_configs(args.source_dir)
        for source in configs + [legacy_added_token_config(work, configs[0])]:
            check_one(work, args.zerotrain, source)
        # Replies that are also pieces of the template's own text ("<|im_end|>").
        for source in configs:
            if "Qwen3" in source:
                check_one(work, args.zerotrain, source, ["d", "end"], "-short-replies")
                check_one(work, args.zerotrain, source,
                          ["<think>\nSmall primes.\n</think>\n\n" + ASSISTANT[0], ASSISTANT[1]],
                          "-earlier-reasoning", ASSISTANT)
                check_reasoning_content(work, args.zerotrain, source)
                # enable_thinking=False (TRL's chat_template_kwargs): the generation prompt
                # writes the empty reasoning block, which is then not learned; the earlier turn
                # renders without it.
                check_one(work, args.zerotrain, source, label="-no-thinking",
                          arguments={"enable_thinking": False}, unlearned="<think>")

        for source in configs:
            check_content_parts(work, args.zerotrain, source)
            check_tool_calls(work, args.zerotrain, source)
        check(all(any(n in c for c in configs) for n in TEMPLATE_TURNS),
              "a template written for tool calls is missing from tests/data/hf_models")
        check_missing_eos_is_refused(work, args.zerotrain, configs[0])

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
