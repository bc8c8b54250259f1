#!/usr/bin/env python3
"""Chat SFT's loss mask against TRL's training templates (CTest label "oracle", in the project
venv).

TRL ships, beside the chat templates of published models, "training" variants of them that wrap
what the assistant writes in {% generation %} markers, so that transformers'
return_assistant_tokens_mask gives SFTTrainer's assistant_only_loss mask
(tests/data/chat_templates/trl, sources in SOURCES.md). That mask, made by TRL's authors, is the
reference here: for Llama 3, Qwen2.5, Qwen3, Qwen3-2507, Qwen3.5, Phi-3, Phi-3.5, DeepSeek-V3
and Command R7B, conversations of two rounds (with and without a system message), agent traces
with tools (the Qwen templates) and replies with reasoning (Qwen3, Qwen3.5) go through
`prepare-data --chat-template`, with the model's own template where it renders the same ids as
its training variant (checked), else with the training variant. The same template given as a
file to a tokenizer without one (a base model's: `--chat-template-file`, as TRL's
chat_template_path) must make the same data, and the tokenizer files the dataset stores (which
`train` writes into OUT/final/) must load in transformers with that template. The ids must be
apply_chat_template's, and the counted tokens TRL's, except that zerotrain never counts what the
generation prompt writes (the model is given it): where TRL's marker opens inside the prompt
(Qwen2.5's newline after "<|im_start|>assistant", DeepSeek's "<｜Assistant｜>", Qwen3.5's
"<think>\\n"), the part of the marked run that the prompt covers, laid where the turn opens, is
left out of the reference.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules)
from test_chat_templates import tokenizer_dir  # noqa: E402
from test_tokenizer_configs import counted_runs  # noqa: E402

h5py, transformers = require_venv_modules("h5py", "transformers")

TEMPLATES = "tests/data/chat_templates/trl"
# name: (bos_token, eos_token, whether zerotrain is given the model's own template, which
# renders the same ids as the training variant, and the conversations)
CASES = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", True, ("rounds", "no_system")),
    "qwen2_5": (None, "<|im_end|>", True, ("rounds", "no_system", "agent")),
    "qwen3": (None, "<|im_end|>", False, ("rounds", "no_system", "agent", "reasoning")),
    "qwen3_instruct_2507": (None, "<|im_end|>", True, ("rounds", "no_system", "agent")),
    "qwen3_5_think": (None, "<|im_end|>", False, ("rounds", "no_system", "agent", "reasoning")),
    "phi3": (None, "<|endoftext|>", True, ("rounds", "no_system")),
    "phi3_5": (None, "<|endoftext|>", True, ("rounds", "no_system")),
    "deepseekv3": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", True,
                   ("rounds", "no_system")),
    "cohere2": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", True, ("rounds", "no_system")),
}
# The special tokens a template writes: every <|...|> and <｜...｜>, and the tags of reasoning and
# of tool calls, which the tokenizers of these models hold whole.
SPECIAL = re.compile(r"<\|[^|<>\s]+\|>|<｜[^｜]+｜>|</?(?:think|tool_call|tool_response)>")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city."}}, "required": ["city"]}}}
ROUNDS = [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."},
          {"role": "user", "content": "And 3 + 3?"}, {"role": "assistant", "content": "6."}]
CONVERSATIONS = {
    "rounds": {"messages": ROUNDS},
    "no_system": {"messages": ROUNDS[1:]},
    "agent": {"tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny in Paris."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You are welcome."}]},
    "reasoning": {"messages": [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "4.", "reasoning_content": "Two and two."},
        {"role": "user", "content": "And 3 + 3?"},
        {"role": "assistant", "content": "6.", "reasoning_content": "Three and three."}]},
}


def template_file(source_dir, name, variant):
    return os.path.join(source_dir, TEMPLATES, name + variant + ".jinja")


def tokenizer_for(work, source_dir, name, variant, base=False):
    """The model's tokenizer holding the template; with `base`, the same without one (a base
    model's, which --chat-template-file gives the template, as TRL's chat_template_path)."""
    bos, eos = CASES[name][:2]
    with open(template_file(source_dir, name, variant), encoding="utf-8") as f:
        template = f.read()
    specials = sorted(set(SPECIAL.findall(template)) | {t for t in (bos, eos) if t})
    return tokenizer_dir(work(name + variant + (".base" if base else "")),
                         None if base else template, bos, eos, specials)


def prepare(zt, directory, path, out, template):
    """prepare-data's tokens and loss mask: with the tokenizer's template (`template` None) or
    with --chat-template-file `template`."""
    cmd = [zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", path,
           "--messages-field", "messages", "--tools-field", "tools", "--out", out,
           "--python", sys.executable]
    cmd += ["--chat-template"] if template is None else ["--chat-template-file", template]
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.rstrip())
    check(proc.returncode == 0, f"{out}: prepare-data refused it")
    with h5py.File(out, "r") as f:
        return f["tokens"][:].tolist(), f["loss_mask"][:].tolist()


def check_stored_template(work, zt, out, template):
    """The tokenizer files a --chat-template-file dataset stores (which train writes into
    OUT/final/) load in transformers with that template and no other; `info` lists them and the
    one template."""
    directory = work(os.path.basename(out) + ".tokenizer")
    os.makedirs(directory, exist_ok=True)
    with open(template, encoding="utf-8") as f:
        text = f.read()
    with h5py.File(out, "r") as f:
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            with open(os.path.join(directory, name), "wb") as g:
                g.write(f[name][:].tobytes())
        check("additional_chat_templates" not in f, f"{out}: named templates stored")
        # What transformers versions that read chat_template.jinja first load.
        check(f["chat_template.jinja"][:].tobytes().decode("utf-8") == text,
              f"{out}: chat_template.jinja is not {template}'s text")
    info = json.loads(subprocess.run([zt, "info", out, "--json"], check=True,
                                     stdout=subprocess.PIPE, text=True).stdout)
    check(info["chat_templates"] == ["default"] and "chat_template.jinja" in info["tokenizer_files"]
          and "tokenizer_config.json" in info["tokenizer_files"],
          f"{out}: info lists {info['tokenizer_files']}, templates {info['chat_templates']}")
    loaded = transformers.AutoTokenizer.from_pretrained(directory).chat_template
    check(loaded == text, f"{out}: the stored tokenizer loads in transformers "
          f"{transformers.__version__} with another chat template than {template}")


def prompt_parts(tok, messages, tools):
    """For each assistant turn, the text the generation prompt writes before it: what the
    conversation before it, rendered with the prompt, has past the same rendering without (Phi-3
    ends a conversation with EOS, which the prompt replaces)."""
    parts = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            before = tok.apply_chat_template(messages[:i], tools=tools, tokenize=False)
            prompted = tok.apply_chat_template(messages[:i], tools=tools, tokenize=False,
                                               add_generation_prompt=True)
            parts.append(prompted[len(os.path.commonprefix([before, prompted])):])
    return parts


def marked_spans(mask):
    """The [start, end) token ranges of the runs of ones in `mask`."""
    spans, start = [], None
    for k, value in enumerate(mask + [0]):
        if value and start is None:
            start = k
        elif not value and start is not None:
            spans.append((start, k))
            start = None
    return spans


def without_prompt(tok, ids, span, prompt):
    """The tokens of a marked run but those the generation prompt writes: laid where the turn
    opens (after the longest start of the prompt that the text before the run ends with), the
    prompt covers the run's leading tokens while their text continues it."""
    start, end = span
    before = tok.decode(ids[:start])
    laid = max(j for j in range(len(prompt) + 1) if before.endswith(prompt[:j]))
    rest = prompt[laid:]
    k = start
    while k < end and rest.startswith(tok.decode(ids[start:k + 1])):
        k += 1
    return ids[k:end]


def check_case(work, zt, source_dir, name):
    own = CASES[name][2]
    reference = transformers.AutoTokenizer.from_pretrained(
        tokenizer_for(work, source_dir, name, "_training"))
    directory = tokenizer_for(work, source_dir, name, "" if own else "_training")
    base = tokenizer_for(work, source_dir, name, "" if own else "_training", base=True)
    ours = transformers.AutoTokenizer.from_pretrained(directory)
    for kind in CASES[name][3]:
        record = CONVERSATIONS[kind]
        messages, tools = record["messages"], record.get("tools")
        path = work(f"{name}.{kind}.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(record) + "\n")
        ids, mask = prepare(zt, directory, path, path + ".h5", None)
        # A base model's tokenizer given the same template as a file makes the same data.
        given = template_file(source_dir, name, "" if own else "_training")
        check(prepare(zt, base, path, path + ".file.h5", given) == (ids, mask),
              f"{name}, {kind}: --chat-template-file {given} gives other data than the "
              "tokenizer holding that template")
        check_stored_template(work, zt, path + ".file.h5", given)
        marked = reference.apply_chat_template(messages, tools=tools, tokenize=True,
                                               return_dict=True,
                                               return_assistant_tokens_mask=True)
        check(ids == ours.apply_chat_template(messages, tools=tools, tokenize=True),
              f"{name}, {kind}: the ids are not apply_chat_template's")
        check(ids == marked["input_ids"], f"{name}, {kind}: TRL's training template renders "
              "other ids than the template given to zerotrain")
        spans = marked_spans(marked["assistant_masks"])
        prompts = prompt_parts(ours, messages, tools)
        check(len(spans) == len(prompts),
              f"{name}, {kind}: TRL marks {len(spans)} runs for {len(prompts)} turns")
        want = [reference.decode(without_prompt(reference, ids, span, prompt))
                for span, prompt in zip(spans, prompts)]
        got = [reference.decode(run) for run in counted_runs(ids, mask)]
        check(got == want, f"{name}, {kind}: zerotrain counts {got}, TRL's training template "
              f"{want} (its marked runs without the generation prompt's end)")
        print(f"ok   {name}, {kind} ({'its own template' if own else 'the training template'}"
              f", in the tokenizer and as --chat-template-file): the counted runs are TRL's: "
              f"{got}")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)
    transformers.logging.set_verbosity_error()

    def checks():
        for name in CASES:
            check_case(work, args.zerotrain, args.source_dir, name)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
