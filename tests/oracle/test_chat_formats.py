#!/usr/bin/env python3
"""Chat data in the forms other tools write it, through chat SFT, against transformers (label
oracle): OpenAI's fine-tuning files, TRL's chat_template_kwargs column, ShareGPT, and system
prompts and earlier turns kept in columns of their own.

The tokenizer and its chat template are test_hf_sft.py's; the conversations its ten of a system
message and two rounds, made of consecutive lines of inputs/data/sample.txt.
1. OpenAI's fine-tuning format: an assistant "weight" of 0 leaves the turn out of the loss; 1,
   1.0 (a float column of Parquet) and none count it. The tokens and the mask equal transformers'
   apply_chat_template with return_assistant_tokens_mask given a copy of the template that marks
   an assistant turn with {% generation %} only when its weight is not 0.
2. TRL's chat_template_kwargs, which SFTTrainer hands apply_chat_template with each row: an
   object, a JSON string (as Parquet may keep it) and an object whose key holds null (read as
   absent); the template renders a `persona` argument as a system turn. The tokens and the mask
   equal apply_chat_template's given each row's arguments.
3. ShareGPT's conversations, as LLaMA-Factory's sharegpt format, axolotl and Unsloth write them:
   the first 20 records of LLaMA-Factory's glaive_toolcall_en_demo.json (tests/data/sft_datasets:
   from human, gpt, function_call and observation, the tools a JSON string of bare function
   schemas), read as its dataset_info.json reads them (--messages-field conversations,
   --tools-field tools); and records made here from system, user, assistant and tool, with a turn
   of weight 0, the weight null on every message (as OpenHermes-2.5 stores it), SlimOrca's
   weights (0.0 on the human turns) and a function_call of two parallel calls. The tokens and the
   mask equal apply_chat_template's of the conversations converted by the mapping LLaMA-Factory
   documents (human/user as user, gpt/assistant and function_call as assistant, the call's JSON
   as TRL's tool_calls, observation/tool as tool), written here and pinned on the file's first
   call, with each bare tool schema wrapped as {"type": "function", "function": schema}, as
   LLaMA-Factory's tool formats wrap them.
   Lines that keep other data's columns beside their conversation (chosen and rejected, as
   ultrafeedback_binarized's train_sft; KTO's label true; media columns holding nothing) give
   transformers' rendering of the conversations.
4. Refused, naming the file, the line and the message, leaving nothing: a weight of 0.5, a
   weight on a user turn, every assistant turn at weight 0; what OpenAI's format allows and the
   templates do not render (a developer message, a participant name, function_call), each with
   its reason; content as a list of text parts, which this template prints as Python prints a
   list; an image part; an empty list of parts; a text part with a key besides type and text;
   a chat_template_kwargs that is not an object, and one that sets apply_chat_template's own
   tools; what is not text SFT data (KTO's label false, a multimodal example's images, a
   preference pair without a reply to learn, which is named); a ShareGPT message from a speaker no tool maps, with a key besides from, value and
   weight, with no value, from a list, with a weight of 1 on a human turn, and a function_call
   whose value is not JSON, names no function or has no arguments.
5. System prompts and earlier turns in columns of their own (--system-field, --history-field):
   rows in OpenOrca's columns (system_prompt empty on one, null on another: no system message),
   LLaMA-Factory's alpaca records with a system and a history (a list of [prompt, response]
   pairs; a JSON string of it, null, two pairs) read with instruction,input, ShareGPT with its
   system column (a conversation opening with its own system turn keeps it), and TRL's
   conversational prompt-completion: the tokens and the mask equal apply_chat_template's of the
   conversations they stand for, the history's replies learned. Refused, naming the line and the
   field: a system prompt that is not a string, a history that is not JSON, not a list, or has a
   pair of one; a history beside a prompt of messages. Options refused: --system-field without
   --chat-template, --history-field with --messages-field, a field named twice, an empty name.
   Unread system and history fields are noted with the options that read them.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)
from test_hf_sft import (CHAT_TEMPLATE, add_chat_template, chat_template_check,  # noqa: E402
                         examples, system_conversations)
from test_hf_tokenizer import refused, train_tokenizer  # noqa: E402

(transformers,) = require_venv_modules("transformers")

# CHAT_TEMPLATE's rendering, the assistant turn marked only when its OpenAI weight is not 0.
_OPEN, _TURN, _CLOSE = (CHAT_TEMPLATE.split("{% generation %}")[0],
                        *CHAT_TEMPLATE.split("{% generation %}")[1].split("{% endgeneration %}"))
WEIGHTED_TEMPLATE = (_OPEN + "{% if m.get('weight', 1) != 0 %}{% generation %}" + _TURN +
                     "{% endgeneration %}{% else %}" + _TURN + "{% endif %}" + _CLOSE)


def write_lines(path, records):
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def weights(run, conversations):
    """Part 1."""
    weighted = [[dict(m, weight=(i + k // 4) % 2) if m["role"] == "assistant" else m
                 for k, m in enumerate(c)] for i, c in enumerate(conversations)]
    weighted[1][2].pop("weight")  # no weight: learned
    weighted[2][2]["weight"] = 1.0  # as a float column of Parquet holds it
    _, counted = run("unweighted", conversations, conversations)
    count, got = run("OpenAI weights", weighted, weighted, template=WEIGHTED_TEMPLATE)
    check(0 < got < counted, f"weights: {got} tokens counted, the conversations {counted}")
    print(f"ok   OpenAI weights: {count} tokens, {got} counted (the turns of weight 1 or none; "
          f"{counted} without weights), as transformers' mask of the turns marked by weight")


def template_arguments(run, conversations):
    """Part 2."""
    persona = [{"persona": "Answer as a poet."}, json.dumps({"persona": "Be terse."}),
               {"persona": None}, None]
    lines = [{"messages": c, "chat_template_kwargs": persona[i % 4]}
             for i, c in enumerate(conversations[:8])]
    count, got = run("chat_template_kwargs", lines, conversations[:8],
                     arguments=[json.loads(p) if isinstance(p, str) else (p or {})
                                for p in persona] * 2)
    print(f"ok   chat_template_kwargs: {count} tokens, {got} counted, as transformers' "
          "apply_chat_template given each row's arguments")


# The mapping LLaMA-Factory documents for its sharegpt format (and axolotl's and Unsloth's names).
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "function_call": "assistant", "observation": "tool", "tool": "tool",
                  "system": "system"}


def from_sharegpt(messages):
    """ShareGPT's messages as TRL's: a function_call's JSON (a call, or a list of calls) becomes
    the turn's tool_calls; a null weight is no weight, and so is a weight of 0 on a turn that is
    not the assistant's (SlimOrca's human turns), which is never learned."""
    converted = []
    for m in messages:
        turn = {"role": SHAREGPT_ROLES[m["from"]]}
        if m["from"] == "function_call":
            calls = json.loads(m["value"])
            turn["tool_calls"] = [{"type": "function", "function": c}
                                  for c in (calls if isinstance(calls, list) else [calls])]
        else:
            turn["content"] = m["value"]
        if m.get("weight") is not None and (turn["role"] == "assistant" or m["weight"] != 0):
            turn["weight"] = m["weight"]
        converted.append(turn)
    return converted


def wrapped(tools):
    """A record's tools as LLaMA-Factory's tool formats hand them to a model: each bare function
    schema inside {"type": "function", "function": ...}."""
    return [t if t.get("type") == "function" else {"type": "function", "function": t}
            for t in tools] or None


def sharegpt(run, conversations, data_dir):
    """Part 3."""
    path = os.path.join(data_dir, "sft_datasets",
                        "LLaMA-Factory--glaive_toolcall_en_demo.first20.json")
    with open(path) as f:
        glaive = json.load(f)
    # The mapping, pinned on the file's first call (so that it is not only this test's reading).
    check(from_sharegpt(glaive[3]["conversations"])[1:3] == [
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {
            "name": "calculate_area",
            "arguments": {"shape": "rectangle", "dimensions": [5, 3]}}}]},
        {"role": "tool", "content": '{"area": 15}'}], "glaive: the first call is read otherwise")
    count, got = run("glaive sharegpt", path, [from_sharegpt(r["conversations"]) for r in glaive],
                     field="conversations", tools=[wrapped(json.loads(r["tools"])) for r in glaive])
    calls = sum(m["from"] == "function_call" for r in glaive for m in r["conversations"])
    print(f"ok   LLaMA-Factory's glaive_toolcall_en_demo (ShareGPT, {calls} function calls): "
          f"{count} tokens, {got} counted, as transformers' rendering of the records converted "
          "(the bare tool schemas wrapped)")
    speakers = {"system": "system", "user": "human", "assistant": "gpt"}
    made = [[{"from": speakers[m["role"]], "value": m["content"], "weight": None} for m in c]
            for c in conversations[:6]]
    made[1] = [dict(m, **{"from": {"human": "user", "gpt": "assistant"}.get(m["from"], m["from"])})
               for m in made[1]]
    made[2][2]["weight"] = 0
    made[3][3:3] = [{"from": "function_call", "value": json.dumps(
                        [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {}}])},
                    {"from": "observation", "value": "1"}, {"from": "tool", "value": "2"},
                    {"from": "gpt", "value": "Both done."}]
    # SlimOrca's weights: null on the system turn, 0.0 on the human turns, 1.0 on the replies.
    made[4] = [dict(m, weight={"system": None, "human": 0.0, "gpt": 1.0}[m["from"]])
               for m in made[4]]
    tools = [None] * 3 + [[{"name": "f", "parameters": {}},
                           {"type": "function", "function": {"name": "g", "parameters": {}}}]] + \
        [None] * 2
    count, got = run("sharegpt speakers", [{"conversations": c, "tools": t}
                                           for c, t in zip(made, tools)],
                     [from_sharegpt(c) for c in made], field="conversations",
                     template=WEIGHTED_TEMPLATE, tools=[t and wrapped(t) for t in tools])
    print(f"ok   ShareGPT from system, human/user, gpt/assistant, function_call (two parallel "
          f"calls), observation/tool, a turn of weight 0, SlimOrca's weights: {count} tokens, "
          f"{got} counted")


def sft_beside_other_columns(run, conversations):
    """Part 3b: SFT lines that keep other data's columns (ultrafeedback_binarized's train_sft
    keeps chosen and rejected beside its messages; KTO's label true; media columns holding
    nothing, as an Arrow Image struct of nulls) are SFT examples."""
    columns = [{"chosen": [{"role": "assistant", "content": "c"}], "rejected": "r"},
               {"label": True}, {"images": [], "image": {"bytes": None, "path": None}}]
    lines = [dict(columns[i % 3], messages=c) for i, c in enumerate(conversations[:6])]
    count, got = run("other columns", lines, conversations[:6])
    print(f"ok   SFT lines beside chosen/rejected, a true KTO label and empty media columns: "
          f"{count} tokens, {got} counted, as transformers renders the conversations")


def system_and_history(check_lines, reference, conversations):
    """Part 5."""
    system, qa = [c[0] for c in conversations], [c[1:3] for c in conversations]
    # OpenOrca's columns (id, system_prompt, question, response); its t0 rows have an empty
    # system prompt, and a row may lack it (null).
    orca = [{"id": f"niv.{i}", "system_prompt": ["You are an AI assistant.", "", None][i % 3],
             "question": q["content"], "response": a["content"]} for i, (q, a) in enumerate(qa)]
    count, got = check_lines("openorca system_prompt", orca, [
        "--prompt-field", "question", "--response-field", "response",
        "--system-field", "system_prompt"],
        [([{"role": "system", "content": r["system_prompt"]}] if r["system_prompt"] else []) +
         list(pair) for r, pair in zip(orca, qa)])
    # LLaMA-Factory's alpaca columns: each conversation's second round as the instruction and
    # the output, its first as the history, its system message as the system. The history is a
    # JSON string on one line (as a Parquet column of strings may hold it), null on another,
    # and on another holds the first round twice.
    alpaca = [{"instruction": c[3]["content"], "input": "", "output": c[4]["content"],
               "system": c[0]["content"], "history": [[c[1]["content"], c[2]["content"]]]}
              for c in conversations]
    alpaca[1]["history"] = json.dumps(alpaca[1]["history"])
    alpaca[2].update(history=None, input="in")
    alpaca[3]["history"] *= 2
    want = [list(c) for c in conversations]
    want[2] = want[2][:1] + [dict(want[2][3], content=want[2][3]["content"] + "\nin"),
                             want[2][4]]
    want[3][1:1] = want[3][1:3]
    fields = ["--prompt-field", "instruction,input", "--response-field", "output",
              "--system-field", "system", "--history-field", "history"]
    count2, got2 = check_lines("alpaca history", alpaca, fields, want)
    # ShareGPT with LLaMA-Factory's system column; a conversation that opens with a system turn
    # keeps its own. TRL's conversational prompt-completion with a system column.
    speakers = {"system": "system", "user": "human", "assistant": "gpt"}
    shared = [{"conversations": [{"from": speakers[m["role"]], "value": m["content"]}
                                 for m in c[1 if i % 2 else 0:]], "system": f"Column {i}."}
              for i, c in enumerate(conversations[:4])]
    want = [([{"role": "system", "content": f"Column {i}."}] + c[1:]) if i % 2 else c
            for i, c in enumerate(conversations[:4])]
    count3, got3 = check_lines("sharegpt system column", shared, [
        "--messages-field", "conversations", "--system-field", "system"], want)
    pairs = [{"prompt": c[1:4], "completion": c[4:], "sys": s["content"]}
             for c, s in zip(conversations[:3], system)]
    check_lines("prompt-completion system", pairs, [
        "--prompt-field", "prompt", "--response-field", "completion", "--system-field", "sys"],
        conversations[:3], counted_from=[len(reference.apply_chat_template(c[:4], tokenize=True))
                                         for c in conversations[:3]])
    print(f"ok   system prompts and history: OpenOrca's system_prompt ({count} tokens, {got} "
          f"counted; empty and null add none), LLaMA-Factory's alpaca system and history "
          f"({count2}, {got2}: the history's replies learned), its sharegpt system column "
          f"({count3}, {got3}; a conversation's own system turn kept), and TRL's "
          "prompt-completion, as transformers renders the conversations")


def system_history_refusals(zt, work):
    """Part 5b: bad system and history fields, and options that cannot go together, refused
    naming the line and the field or the option; fields of LLaMA-Factory's left unread are noted
    with the option that reads them."""
    line = {"prompt": "q", "response": "a"}
    user, reply = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}
    fields = ["--prompt-field", "prompt", "--response-field", "response", "--system-field",
              "system", "--history-field", "history", "--chat-template"]
    for name, record, named in [
            ("system_list", dict(line, system=["x"]), ["'system' is not a string"]),
            ("history_text", dict(line, history="earlier"), ["'history' is a string that is not "
                                                             "JSON"]),
            ("history_object", dict(line, history={"q": "a"}),
             ["'history' is not a list of [prompt, response] pairs"]),
            ("history_single", dict(line, history=[["q", "a"], ["q"]]),
             ["'history'[1] is not a [prompt, response] pair of strings"]),
            ("history_messages", {"prompt": [user], "response": [reply], "history": [["q", "a"]]},
             ["'prompt' is a list of messages, which holds its own earlier turns"])]:
        write_lines(work(name + ".jsonl"), [line, record])
        refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
                 work(name + ".jsonl"), "--out", work("bad.h5"), "--python", sys.executable] +
                fields, [work(name + ".jsonl") + ":2"] + named, work("bad.h5"))
    write_lines(work("plain.jsonl"), [line])
    for options, named in [
            (["--system-field", "system"], ["--system-field needs --sft-jsonl and "
                                            "--chat-template"]),
            (["--messages-field", "m", "--history-field", "h", "--chat-template"],
             ["--history-field goes with --prompt-field"]),
            (["--system-field", "prompt", "--chat-template"],
             ["--system-field names 'prompt', a field another option reads"]),
            (["--history-field", "", "--chat-template"], ["--history-field must name"])]:
        refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
                 work("plain.jsonl"), "--out", work("bad.h5"), "--python", sys.executable] +
                options, named, work("bad.h5"))
    write_lines(work("alpaca_unread.jsonl"), [{"instruction": "q", "output": "a", "system": "s",
                                               "history": [["q", "a"]]}])
    out = run_tool([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
                    work("alpaca_unread.jsonl"), "--prompt-field", "instruction",
                    "--response-field", "output", "--chat-template", "--out",
                    work("alpaca_unread.h5"), "--python", sys.executable])
    for part in ("'history' may hold the turns before the prompt: --history-field history;",
                 "'system' may hold the system prompt: --system-field system"):
        check(part in out, f"the note of unread fields does not say {part!r}: {out}")
    print("ok   bad system and history fields and options refused, naming the line and the "
          "field; unread system and history noted with the options that read them")


def refusals(zt, work):
    """Part 4."""
    user, reply = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}
    for name, record, named in [
            ("half_weight", {"messages": [user, dict(reply, weight=0.5)]},
             ["'messages'[1]", "'weight' is 0.5", "allows 0"]),
            ("user_weight", {"messages": [dict(user, weight=1), reply]},
             ["'messages'[0]", "(weight: OpenAI's weight marks an assistant turn"]),
            ("zero_weights", {"messages": [user, dict(reply, weight=0), user,
                                           dict(reply, weight=0.0)]},
             ["every assistant message of 'messages' has weight 0"]),
            ("developer", {"messages": [{"role": "developer", "content": "d"}, user, reply]},
             ["'messages'[0]", "developer message", "system"]),
            ("participant", {"messages": [dict(user, name="alice"), reply]},
             ["'messages'[0]", "['name']", "participant name"]),
            ("content_parts", {"messages": [dict(user, content=[{"type": "text", "text": "q"}]),
                                            reply]},
             ["the chat template does not render the list of content parts of 'messages'[0] "
              "(user) as their text", "write the text as a string"]),
            ("image_part", {"messages": [dict(user, content=[
                {"type": "text", "text": "q"}, {"type": "image_url", "image_url": {"url": "x"}}]),
                reply]},
             ["'messages'[0]: content[1] is a part of type \"image_url\"", "text parts"]),
            ("no_parts", {"messages": [user, dict(reply, content=[])]},
             ["'messages'[1]: content is an empty list of parts"]),
            ("cached_part", {"messages": [dict(user, content=[
                {"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]), reply]},
             ["'messages'[0]: content[0] is a text part with keys ['cache_control'] besides "
              "type and text"]),
            ("function_call", {"messages": [user, {"role": "assistant", "content": None,
                                                   "function_call": {"name": "f"}}]},
             ["'messages'[1]", "['function_call']", "write it as tool_calls"]),
            ("kwargs_list", {"messages": [user, reply], "chat_template_kwargs": ["x"]},
             ["'chat_template_kwargs' is not an object of keyword arguments"]),
            ("kwargs_tools", {"messages": [user, reply], "chat_template_kwargs": {
                "tools": [], "enable_thinking": False}},
             ["'chat_template_kwargs' sets ['tools']", "--tools-field"]),
            ("sharegpt_speaker", {"messages": [{"from": "human", "value": "q"},
                                               {"from": "bot", "value": "a"}]},
             ["'messages'[1] is from \"bot\"", "human, user, gpt"]),
            ("sharegpt_key", {"messages": [{"from": "human", "value": "q", "lang": "en"}, reply]},
             ["'messages'[0] has keys ['lang']", "ShareGPT message holds from and value"]),
            ("sharegpt_value", {"messages": [{"from": "human"}, reply]},
             ["'messages'[0]", "ShareGPT message", "no 'value'"]),
            ("sharegpt_call_json", {"messages": [user, {"from": "function_call",
                                                        "value": "f(x=1)"}]},
             ["'messages'[1]: the value of a function_call is not JSON"]),
            ("sharegpt_call_name", {"messages": [user, {"from": "function_call",
                                                        "value": '{"arguments": {}}'}]},
             ["'messages'[1]: the value of a function_call is not a call"]),
            ("sharegpt_call_arguments", {"messages": [user, {"from": "function_call",
                                                             "value": '{"name": "f"}'}]},
             ["'messages'[1]: the value of a function_call is not a call"]),
            ("sharegpt_from_list", {"messages": [{"from": ["human"], "value": "q"}, reply]},
             ["'messages'[0] is from [\"human\"]", "human, user, gpt"]),
            ("kto_label", {"messages": [user, reply], "label": False},
             ["'label' is false, KTO's tag of an undesirable reply"]),
            ("dpo_pair", {"messages": [user], "chosen": [reply], "rejected": [reply]},
             ["'messages' has no assistant message to learn (the line holds 'chosen' and "
              "'rejected', a preference pair", "--messages-field chosen"]),
            ("llava_image", {"messages": [dict(user, content="<image>\nq"), reply],
                             "images": ["a.jpg"]},
             ["'images' holds media", "text-only"]),
            ("sharegpt_human_weight", {"messages": [{"from": "human", "value": "q", "weight": 1},
                                                    reply]},
             ["'messages'[0]", "(weight: OpenAI's weight marks an assistant turn"])]:
        write_lines(work(name + ".jsonl"), [{"messages": [user, reply]}, record])
        refused([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--sft-jsonl",
                 work(name + ".jsonl"), "--messages-field", "messages", "--chat-template",
                 "--out", work("bad.h5"), "--python", sys.executable],
                [work(name + ".jsonl") + ":2"] + named, work("bad.h5"))
    print("ok   bad weights, what OpenAI's format allows and templates do not render, and bad "
          "chat_template_kwargs are refused naming the line and the message")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)

    def checks():
        text_file = os.path.join(args.source_dir, "inputs/data/sample.txt")
        train_tokenizer(text_file, work("tok"))
        shutil.copytree(work("tok"), work("chat_tok"))
        add_chat_template(work("chat_tok"))
        reference = transformers.PreTrainedTokenizerFast.from_pretrained(work("chat_tok"))
        conversations = system_conversations(examples(text_file, 40))

        def run(what, lines, want, field="messages", **kwargs):
            """prepare-data of `lines` (records, or conversations in the field; or the path of a
            file of them) against transformers' rendering of the conversations `want`."""
            path = lines if isinstance(lines, str) else work(what.replace(" ", "_") + ".jsonl")
            if not isinstance(lines, str):
                write_lines(path, [line if isinstance(line, dict) else {field: line}
                                   for line in lines])
            options = ["--sft-jsonl", path, "--messages-field", field]
            return chat_template_check(args.zerotrain, work, reference, what, options,
                                       what.replace(" ", "_") + ".h5", want, **kwargs)

        weights(run, conversations)
        template_arguments(run, conversations)
        sharegpt(run, conversations, os.path.join(args.source_dir, "tests/data"))
        sft_beside_other_columns(run, conversations)

        def check_lines(what, lines, options, want, **kwargs):
            """prepare-data of the records `lines` read with `options` against transformers'
            rendering of the conversations `want`."""
            name = what.replace(" ", "_")
            write_lines(work(name + ".jsonl"), lines)
            return chat_template_check(args.zerotrain, work, reference, what,
                                       ["--sft-jsonl", work(name + ".jsonl")] + options,
                                       name + ".h5", want, **kwargs)

        system_and_history(check_lines, reference, conversations)
        system_history_refusals(args.zerotrain, work)
        refusals(args.zerotrain, work)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
