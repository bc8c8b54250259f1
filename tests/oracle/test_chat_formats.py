#!/usr/bin/env python3
"""Chat data in the forms other tools write it, through chat SFT, against transformers (label
oracle): OpenAI's fine-tuning files and TRL's chat_template_kwargs column.

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
3. Refused, naming the file, the line and the message, leaving nothing: a weight of 0.5, a
   weight on a user turn, every assistant turn at weight 0; what OpenAI's format allows and the
   templates do not render (a developer message, a participant name, function_call), each with
   its reason; content as a list of text parts, which this template prints as Python prints a
   list; an image part; an empty list of parts; a text part with a key besides type and text;
   a chat_template_kwargs that is not an object, and one that sets apply_chat_template's own
   tools.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules)
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


def refusals(zt, work):
    """Part 3."""
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
             ["'chat_template_kwargs' sets ['tools']", "--tools-field"])]:
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

        def run(what, lines, want, **kwargs):
            """prepare-data of `lines` ({"messages"} records, or conversations) against
            transformers' rendering of the conversations `want`."""
            path = work(what.replace(" ", "_") + ".jsonl")
            write_lines(path, [line if isinstance(line, dict) else {"messages": line}
                               for line in lines])
            return chat_template_check(args.zerotrain, work, reference, what,
                                       ["--sft-jsonl", path, "--messages-field", "messages"],
                                       what.replace(" ", "_") + ".h5", want, **kwargs)

        weights(run, conversations)
        template_arguments(run, conversations)
        refusals(args.zerotrain, work)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
