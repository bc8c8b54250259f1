#!/usr/bin/env python3
"""Published chat templates whose turns render unlike the generation prompt, through chat SFT,
against transformers' assistant mask (label oracle).

The templates (tests/data/chat_templates, sources in SOURCES.md) are QwQ-32B's and
DeepSeek-R1-Distill-Llama-8B's, whose generation prompt goes on with "<think>\\n" that a turn
already written leaves out (QwQ also drops the reasoning of every turn but the last, DeepSeek of
every turn), and Mistral-Nemo-Instruct-2407's, Mistral-Small-3.1-24B-Instruct-2503's and
Mistral-Small-3.2-24B-Instruct-2506's, which
have no generation prompt, open a turn of calls with "[TOOL_CALLS]" and list the tools just
before the last user message, Phi-4-mini-instruct's, which closes a turn with "<|end|>" and
the conversation with its EOS (the last reply counts up to it), gemma-3-4b-it's, which writes
the system message into the first user turn and trims each part of a list, and SmolLM3-3B's, which writes
today's date into its system header and, given "/no_think", an empty <think> block that both its
generation prompt and its replies open with, and OLMo-2-1124-13B-Instruct's (Tülu 3's), whose
replies close with the EOS and a newline that the last one leaves out, and Olmo-3-7B-Instruct's and
-Think's, whose replies close with "<|im_end|>\n" inside a conversation and with the EOS at its
end (Think's generation prompt goes on with "<think>"), and GLM-4-0414's (as Xinference copied it),
which writes nothing after a reply: prepare-data appends the tokenizer's EOS after the last reply,
counted, and notes it, for it and for no other template here (test_chat_end_token.py checks the
option's other values). Each is given a tokenizer as test_tokenizer_configs.py makes one
(a byte-level BPE holding the model's special tokens). The reference is transformers'
apply_chat_template(return_assistant_tokens_mask=True) on a copy of the template in which the
assistant turns are marked with {% generation %} by hand (the marks in TEMPLATES: around what the
model writes after the generation prompt, up to and including the end of its turn; QwQ's last
turn opens with the "<think>\n" its generation prompt wrote, which is left out, and its turn of
calls is rewritten to open with the newline its prompt ends with); the copy renders the same
text.

For each template, conversations of two rounds with a system message (without, for Nemo), of two
rounds whose replies reason in <think> (QwQ, DeepSeek), of three whose first reply's reasoning was
cut before "</think>" (QwQ: its generation prompt is in that reply too; DeepSeek: that reply
keeps the "<think>\n" its generation prompt writes, and counts from after it), and agent traces with
tools (QwQ and Mistral: a turn of calls with and without content, the tool's result, the answer,
a later user turn and its answer; DeepSeek: a turn of calls whose content is null, OpenAI's form,
which its template renders only so), and for Mistral Small and Gemma 3 a conversation whose system message,
first user turn and replies are OpenAI's lists of text parts (handed to the template as lists, as
TRL hands them on; one part holds "image": null, as an Arrow export writes it) go through `prepare-data --sft-jsonl --messages-field messages --chat-template`: the ids
are apply_chat_template's and the loss mask is the marked copy's assistant mask. Nemo's template
leaves the system message out of a conversation that ends with a reply: such a conversation is
refused naming the message, leaving no data; so are a system message of two parts, of which
Mistral Small's and Gemma 3's templates read the first alone, and a tool result as parts, which it writes as
Python prints a list; so is a reply of two parts under Mistral Small 3.1's, which reads a
reply's first part alone (its user turns in parts are read whole, and tested). DeepSeek's turn of calls with an empty content gives
the data of one with null; with arguments that are not a string, which its template cannot
render, it is refused with the template's error. Nemotron-Nano-v2's plain replies count as its
template closes them, and its turn of calls, closed unlike at the end of a conversation, is
refused.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)
from test_hf_tokenizer import refused  # noqa: E402
from test_tokenizer_configs import counted_runs, tokenizer_json  # noqa: E402

h5py, transformers = require_venv_modules("h5py", "transformers")

MISTRAL = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
           "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]"]
# name: (bos_token, eos_token, the special tokens the template writes, the conversations, and
# the {% generation %} marks: (text of the template, the text marked), each found once).
TEMPLATES = {
    "Qwen-QwQ-32B": (None, "<|im_end|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                     ("system", "reasoning", "truncated", "tools"), [
        ("{{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n"
         "            {{- '\\n' + content }}\n        {%- endif %}",
         "{{- '<|im_start|>' + message.role + '\\n' }}{% generation %}"
         "{%- if message.content %}{{- content }}{%- endif %}"),
        ("{{- '\\n<tool_call>\\n{\"name\": \"' }}",
         "{%- if message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
         "{{- '<tool_call>\\n{\"name\": \"' }}"),
        ("{%- endfor %}\n        {{- '<|im_end|>\\n' }}",
         "{%- endfor %}\n        {{- '<|im_end|>\\n' }}{% endgeneration %}"),
        ("{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}",
         "{{- '<|im_start|>' + message.role + '\\n' }}"
         "{%- if content.startswith('<think>\\n') %}{{- '<think>\\n' }}"
         "{%- set content = content[8:] %}{%- endif %}{% generation %}"
         "{{- content + '<|im_end|>' + '\\n' }}{% endgeneration %}")]),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (
        "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
        ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"],
        ("system", "reasoning", "truncated", "null_calls"), [
            # (a reply whose reasoning was cut keeps its "<think>\n", which the generation
            # prompt writes: it counts from after it)
            ("{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}",
             "{{'<｜Assistant｜>'}}{%- if content.startswith('<think>\n') %}{{- '<think>\n' }}"
             "{%- set content = content[8:] %}{%- endif %}{% generation %}"
             "{{content + '<｜end▁of▁sentence｜>'}}{% endgeneration %}"),
            ("{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
             "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + "
             "tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}",
             "{{'<｜Assistant｜>'}}{% generation %}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + "
             "tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + "
             "'\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
             "{% endgeneration %}"),
            ("{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}",
             "{{'<｜tool▁outputs▁end｜>'}}{% generation %}{{message['content'] + "
             "'<｜end▁of▁sentence｜>'}}{% endgeneration %}")]),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>", MISTRAL, ("rounds", "tools"), [
        ('{{- "[TOOL_CALLS][" }}', '{% generation %}{{- "[TOOL_CALLS][" }}'),
        ('        {%- endfor %}\n    {%- elif message["role"] == "assistant" %}\n'
         '        {{- message["content"] + eos_token}}',
         '        {%- endfor %}{% endgeneration %}\n'
         '    {%- elif message["role"] == "assistant" %}\n'
         '        {% generation %}{{- message["content"] + eos_token}}{% endgeneration %}')]),
    "Mistral-Small-3.2-24B-Instruct-2506": (
        "<s>", "</s>", MISTRAL + ["[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[CALL_ID]", "[ARGS]",
                                  "[TOOL_CONTENT]", "[IMG]"], ("system", "tools", "parts"), [
            ("    {%- elif message['role'] == 'assistant' %}\n",
             "    {%- elif message['role'] == 'assistant' %}{% generation %}\n"),
            ("        {%- endif %}\n    {%- elif message['role'] == 'tool_results'",
             "        {%- endif %}{% endgeneration %}\n"
             "    {%- elif message['role'] == 'tool_results'")]),
    "mistralai-Mistral-Small-3.1-24B-Instruct-2503": (
        "<s>", "</s>", MISTRAL + ["[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]"],
        ("system", "tools", "user_parts"), [
            ('{{- "[TOOL_CALLS] [" }}', '{% generation %}{{- "[TOOL_CALLS] [" }}'),
            ("        {%- endfor %}\n    {%- elif message['role'] == 'assistant' %}\n",
             "        {%- endfor %}{% endgeneration %}\n"
             "    {%- elif message['role'] == 'assistant' %}{% generation %}\n"),
            ('        {%- endif %}\n    {%- elif message["role"] == "tool_results"',
             '        {%- endif %}{% endgeneration %}\n'
             '    {%- elif message["role"] == "tool_results"')]),
    # Phi-4-mini-instruct's: a turn is "<|role|>" + content + "<|end|>", and a conversation
    # without the generation prompt ends with the EOS. As for Phi-3 (docs/fine-tuning.md, Chat
    # data), the last reply counts up to that EOS, what closes the conversation after it, as TRL's
    # prompt-completion data counts it; an earlier reply up to its "<|end|>".
    "microsoft-Phi-4-mini-instruct": (
        "<|endoftext|>", "<|endoftext|>",
        ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool|>",
         "<|/tool|>"], ("system", "rounds"), [
            ("{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
             "{% endif %}",
             "{% else %}{{ '<|' + message['role'] + '|>' }}"
             "{% if message['role'] == 'assistant' %}{% generation %}"
             "{{ message['content'] + '<|end|>' }}{% endgeneration %}"
             "{% else %}{{ message['content'] + '<|end|>' }}{% endif %}{% endif %}"),
            ("{% else %}{{ eos_token }}{% endif %}",
             "{% elif messages[-1]['role'] == 'assistant' %}{% generation %}{{ eos_token }}"
             "{% endgeneration %}{% else %}{{ eos_token }}{% endif %}")]),
    # SmolLM3-3B's: ChatML whose system header it writes itself (today's date, the reasoning
    # mode), "/no_think" in the system message opening each reply with an empty <think> block
    # that its generation prompt writes too. Its own {% generation %} marks take the whole turn,
    # "<|im_start|>assistant\n" included (TRL's assistant_only_loss); zerotrain counts what the
    # model writes after the generation prompt, so the marks here are moved to that: the reply
    # and "<|im_end|>\n".
    "HuggingFaceTB-SmolLM3-3B": (
        None, "<|im_end|>", ["<|im_start|>", "<|im_end|>"],
        ("system", "rounds", "reasoning", "no_think"), [
            ("{% generation %}", ""),
            ("{% endgeneration %}", ""),
            ('{{ "<|im_start|>assistant\\n" + content.lstrip("\\n") + "<|im_end|>\\n" }}',
             '{{ "<|im_start|>assistant\\n" }}{% generation %}'
             '{{ content.lstrip("\\n") + "<|im_end|>\\n" }}{% endgeneration %}'),
            ('{{ "<|im_start|>assistant\\n" + "<think>\\n\\n</think>\\n" + '
             'content.lstrip("\\n") + "<|im_end|>\\n" }}',
             '{{ "<|im_start|>assistant\\n" + "<think>\\n\\n</think>\\n" }}{% generation %}'
             '{{ content.lstrip("\\n") + "<|im_end|>\\n" }}{% endgeneration %}')]),
    # Gemma's (gemma-7b-it's, here CodeGemma-7b-it's copy): "<start_of_turn>model\n", the reply
    # trimmed, "<end_of_turn>\n"; a system message is refused by the template itself.
    "google-codegemma-7b-it": (
        "<bos>", "<eos>", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], ("rounds",), [
            ("{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
             "'<end_of_turn>\n' }}",
             "{{ '<start_of_turn>' + role + '\n' }}{% if role == 'model' %}{% generation %}"
             "{{ message['content'] | trim + '<end_of_turn>\n' }}{% endgeneration %}"
             "{% else %}{{ message['content'] | trim + '<end_of_turn>\n' }}{% endif %}")]),
    # Gemma 3's (gemma-3-4b-it's): Gemma's turns, the system message written before the first
    # user turn's text, each part of a list trimmed ("<start_of_image>" for an image part). The
    # content and "<end_of_turn>\n" are captured as `body`, marked when the role is the model's.
    "google-gemma-3-4b-it": (
        "<bos>", "<eos>", ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
                           "<start_of_image>"], ("system", "rounds", "parts", "spaced_parts"), [
            ("    {%- if message['content'] is string -%}",
             "    {%- set body -%}{%- if message['content'] is string -%}"),
            ("    {{ '<end_of_turn>\n' }}\n{%- endfor -%}",
             "    {{ '<end_of_turn>\n' }}{%- endset -%}{%- if role == 'model' -%}"
             "{% generation %}{{ body }}{% endgeneration %}{%- else -%}{{ body }}{%- endif -%}\n"
             "{%- endfor -%}")]),
    # OLMo 2's (OLMo-2-1124-13B-Instruct's, Tülu 3's): the BOS, then "<|system|>\n",
    # "<|user|>\n" and "<|assistant|>\n" as plain text before each message, a reply closed by the
    # EOS, and a newline after it unless it is the conversation's last message (the newlines are
    # characters of the template's string literals, as the JSON file holds it).
    "allenai-OLMo-2-1124-13B-Instruct": (
        "<|endoftext|>", "<|endoftext|>", ["<|endoftext|>", "<|pad|>"], ("system", "rounds"), [
            ("{{ '<|assistant|>\n'  + message['content'] + eos_token + '\n' }}",
             "{{ '<|assistant|>\n' }}{% generation %}{{ message['content'] + eos_token }}"
             "{% endgeneration %}{{ '\n' }}"),
            ("{{ '<|assistant|>\n'  + message['content'] + eos_token }}",
             "{{ '<|assistant|>\n' }}{% generation %}{{ message['content'] + eos_token }}"
             "{% endgeneration %}")]),
    # OLMo 3's (Olmo-3-7B-Instruct's): ChatML with a default system message naming the functions
    # (the tools as JSON), calls written as name(key=value) in <function_calls>, tool results as
    # an "environment" turn, and a reply closed by "<|im_end|>\n" inside the conversation and by
    # the EOS at its end. The two closings share no token, so a reply inside the conversation
    # counts its content alone (zerotrain's rule, docs/fine-tuning.md "Chat data"; TRL with the
    # marker around "<|im_end|>\n" would count it too).
    "allenai-Olmo-3-7B-Instruct": (
        "<|endoftext|>", "<|endoftext|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"],
        ("system", "rounds", "tools"), [
            ("{{- '<|im_start|>assistant\n' -}}{%- if message.get('content', none) is not none -%}",
             "{{- '<|im_start|>assistant\n' -}}{% generation %}"
             "{%- if message.get('content', none) is not none -%}"),
            ("{%- if not loop.last -%}{{- '<|im_end|>' + '\n' -}}{%- else -%}{{- eos_token -}}"
             "{%- endif -%}",
             "{{- '' if not loop.last else eos_token -}}{% endgeneration %}"
             "{{- ('<|im_end|>' + '\n') if not loop.last else '' -}}")]),
    # Olmo-3-7B-Think's: the same turns with OLMo's own system message, and a generation prompt
    # that goes on with "<think>", which a reply already written holds only as its content does:
    # a plain reply counts from after "<|im_start|>assistant\n", the part of the prompt its
    # opening holds, and one that opens with "<think>" from after it, as the prompt writes it.
    "allenai-Olmo-3-7B-Think": (
        "<|endoftext|>", "<|endoftext|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"],
        ("system", "rounds", "reasoning"), [
            ("{{ '<|im_start|>assistant\n' }}{% if message.get('content', none) is not none %}"
             "{{ message['content'] }}{% endif %}",
             "{{ '<|im_start|>assistant\n' }}{% set c = message.get('content', none) or '' %}"
             "{% set t = '<think>' if c.startswith('<think>') else '' %}{{ t }}"
             "{% generation %}{{ c[t | length:] }}"),
            ("{% if not loop.last %}{{ '<|im_end|>' + '\n' }}{% else %}{{ eos_token }}{% endif %}",
             "{{ '' if not loop.last else eos_token }}{% endgeneration %}"
             "{{ ('<|im_end|>' + '\n') if not loop.last else '' }}")]),
    # GLM-4-0414's (GLM-4-9B-0414's and -32B-0414's, as Xinference copied it): "[gMASK]<sop>",
    # then each turn as <|role|>, a newline and its content, and nothing after a reply (its turn
    # ends where the next one opens); the generation prompt is "<|assistant|>" alone, so a reply
    # counts its newline and content; prepare-data appends the tokenizer's EOS, counted (UNCLOSED).
    "THUDM-GLM-4-0414": (
        None, "<|endoftext|>", ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>",
                                "<|assistant|>", "<|observation|>"],
        ("system", "rounds"), [
            ("<|assistant|>\n{{ content }}{%- elif role == 'assistant' and meta %}",
             "<|assistant|>{% generation %}{{ '\\n' + content }}{% endgeneration %}"
             "{%- elif role == 'assistant' and meta %}")]),
    # Granite 3.3's (its April 2025 release, granite-3.3-2b-instruct's and -8b-instruct's): every
    # message as <|start_of_role|>ROLE<|end_of_role|>CONTENT<|end_of_text|> and a newline, a
    # default system message with today's date, the generation prompt the assistant's opening.
    "ibm-granite-granite-3.3-instruct-2504": (
        "<|end_of_text|>", "<|end_of_text|>",
        ["<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"],
        ("system", "rounds"), [
            ("{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] "
             "+ '<|end_of_text|>\n' }}",
             "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' }}"
             "{%- if message['role'] == 'assistant' %}{% generation %}"
             "{{- message['content'] + '<|end_of_text|>\n' }}{% endgeneration %}"
             "{%- else %}{{- message['content'] + '<|end_of_text|>\n' }}{%- endif %}")]),
}

# The templates that write nothing after a conversation's last reply: prepare-data appends the
# tokenizer's EOS after the last reply, counted, and notes it (and only for them).
UNCLOSED = {"THUDM-GLM-4-0414"}

USER = ["Name three primes.", "And the next one?"]
ASSISTANT = ["Two, three and five.", "Seven comes next."]
THINKING = "<think>\nLet me count.\n</think>\n\n"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def parts(*texts):
    """Content as OpenAI's list of text parts."""
    return [{"type": "text", "text": t} for t in texts]


def conversations(kind):
    """The records of one kind: a list of {"messages"[, "tools"]}."""
    rounds = [m for u, a in zip(USER, ASSISTANT)
              for m in ({"role": "user", "content": u}, {"role": "assistant", "content": a})]
    if kind == "system":
        return [{"messages": [{"role": "system", "content": "Be brief."}] + rounds}]
    if kind == "parts":  # a system message of one part, a user turn and a reply of two
        split = [dict(m, content=parts(m["content"][:9], m["content"][9:])) for m in rounds[:2]]
        split[0]["content"][1]["image"] = None  # as an Arrow export of parts writes the key
        return [{"messages": [{"role": "system", "content": parts("Be brief.")}] + split
                 + [rounds[2], dict(rounds[3], content=parts(rounds[3]["content"]))]}]
    if kind == "spaced_parts":  # parts split at a space, which a template trimming each drops
        split = [dict(m, content=parts(*m["content"].split(" ", 1))) for m in rounds[:2]]
        split[0]["content"][0]["text"] += " "
        return [{"messages": split + rounds[2:]}]
    if kind == "user_parts":  # Mistral Small 3.1 reads a user turn's parts, a reply's first
        split = [dict(m, content=parts(m["content"][:9], m["content"][9:]))
                 if m["role"] == "user" else m for m in rounds]
        split[0]["content"][1]["image"] = None
        split[3] = dict(split[3], content=parts(split[3]["content"]))  # one part
        return [{"messages": [{"role": "system", "content": parts("Be brief.")}] + split}]
    if kind == "rounds":
        return [{"messages": rounds}]
    if kind == "no_think":  # SmolLM3's flag in the system message
        return [{"messages": [{"role": "system", "content": "Be brief. /no_think"}] + rounds}]
    if kind == "reasoning":
        return [{"messages": [dict(m, content=THINKING + m["content"])
                              if m["role"] == "assistant" else m for m in rounds]}]
    if kind == "truncated":  # the first reply's reasoning was cut, its "<think>" left open
        return [{"messages": rounds[:1] + [{"role": "assistant", "content": "<think>\nI was cut"},
                                           {"role": "user", "content": "Start again."}]
                 + rounds[1:]}]
    if kind == "null_calls":  # OpenAI's form: no content, the arguments a JSON string
        call = {"type": "function", "function": {"name": "get_weather",
                                                 "arguments": '{"city": "Paris"}'}}
        return [{"messages": [  # no tools: DeepSeek-R1's template does not render them
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "content": "18C and windy"},
            {"role": "assistant", "content": "It is 18C and windy."},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "assistant", "content": "I cannot tell."}]}]
    records = []
    for said in ("", "Let me check."):  # Mistral's templates drop the content of a call turn
        call = {"type": "function", "id": "call00001",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
        records.append({"tools": TOOLS, "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": said, "tool_calls": [call]},
            {"role": "tool", "name": "get_weather", "tool_call_id": "call00001",
             "content": "18C and windy"},
            {"role": "assistant", "content": "It is 18C and windy."},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "assistant", "content": "I cannot tell."}]})
    return records


def tokenizer_dir(directory, template, bos, eos, specials):
    """A tokenizer directory for `template`, its specials at ids from 300 on."""
    os.makedirs(directory, exist_ok=True)
    config = {"added_tokens_decoder": {
        str(300 + i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                       "single_word": False, "special": True} for i, c in enumerate(specials)},
        "bos_token": bos, "eos_token": eos, "chat_template": template,
        "clean_up_tokenization_spaces": False, "model_max_length": 32768,
        "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    tokenizer_json(config).save(os.path.join(directory, "tokenizer.json"))
    return directory


def marked(template, marks, name):
    for old, new in marks:
        if template.count(old) != 1:
            raise SystemExit(f"{name}: the text to mark is in the template "
                             f"{template.count(old)} times: {old!r}")
        template = template.replace(old, new)
    return template


def check_template(work, zt, source_dir, name):
    bos, eos, specials, kinds, marks = TEMPLATES[name]
    with open(os.path.join(source_dir, "tests/data/chat_templates", name + ".jinja"),
              encoding="utf-8") as f:
        template = f.read()
    directory = tokenizer_dir(work(name), template, bos, eos, specials)
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    marked_tok = transformers.AutoTokenizer.from_pretrained(
        tokenizer_dir(work(name + "-marked"), marked(template, marks, name), bos, eos, specials))
    for kind in kinds:
        for n, record in enumerate(conversations(kind)):
            path = work(f"{name}.{kind}{n}.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps(record) + "\n")
            cmd = [zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", path,
                   "--messages-field", "messages", "--chat-template", "--out", path + ".h5",
                   "--python", sys.executable]
            print("+ " + " ".join(cmd), flush=True)
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
            print(proc.stdout.rstrip())
            check(proc.returncode == 0, f"{name}, {kind} {n}: prepare-data refused it")
            check(("writes nothing after a conversation's last reply" in proc.stdout and
                   "is appended after each conversation's last reply" in proc.stdout) ==
                  (name in UNCLOSED), f"{name}, {kind} {n}: the note on a reply the template "
                  f"closes with nothing is {'missing' if name in UNCLOSED else 'printed'}")
            with h5py.File(path + ".h5", "r") as f:
                ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
            tools = record.get("tools")
            want = reference.apply_chat_template(record["messages"], tools=tools, tokenize=True)
            rendered = marked_tok.apply_chat_template(record["messages"], tools=tools,
                                                      tokenize=True, return_dict=True,
                                                      return_assistant_tokens_mask=True)
            check(rendered["input_ids"] == want, f"{name}: the marked copy renders other ids")
            # After a reply the template leaves unclosed, the tokenizer's EOS, counted.
            end = [reference.eos_token_id] if name in UNCLOSED else []
            check(ids == want + end, f"{name}, {kind} {n}: the ids are not apply_chat_template's"
                  + (" and its EOS" if end else ""))
            runs = [reference.decode(r) for r in counted_runs(ids, mask)]
            want_mask = rendered["assistant_masks"] + [1] * len(end)
            want_runs = [reference.decode(r) for r in counted_runs(want + end, want_mask)]
            check(mask == want_mask,
                  f"{name}, {kind} {n}: zerotrain counts {runs}, transformers' assistant mask "
                  f"of the marked template {want_runs}")
            print(f"ok   {name}, {kind} {n}: the ids are apply_chat_template's, the counted "
                  f"runs transformers' assistant mask's: {runs}")


def check_nemotron(work, zt, source_dir):
    """Nemotron-Nano-v2's template writes "<think>\n" after the last turn's opening and closes a
    turn with "\n<SPECIAL_12>\n"; at the end of a conversation it closes a turn of calls with
    "</TOOLCALL><SPECIAL_12>\n\n", inside one with "</TOOLCALL>\n<SPECIAL_12>\n". Its plain
    replies count as a reader of the template counts them (the reply and its closing, not the
    "<think>\n" the generation prompt writes); where a turn of calls ends cannot be told, so the
    line is refused naming the message."""
    name = "NVIDIA-Nemotron-Nano-v2"
    with open(os.path.join(source_dir, "tests/data/chat_templates", name + ".jinja"),
              encoding="utf-8") as f:
        template = f.read()
    specials = ["<s>", "</s>", "<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<TOOLCALL>",
                "</TOOLCALL>", "<think>", "</think>", "<TOOL_RESPONSE>", "</TOOL_RESPONSE>",
                "<AVAILABLE_TOOLS>", "</AVAILABLE_TOOLS>"]
    directory = tokenizer_dir(work(name), template, "<s>", "<SPECIAL_12>", specials)
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    record = conversations("rounds")[0]
    path = work(name + ".rounds.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(record) + "\n")
    run_tool([zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", path,
              "--messages-field", "messages", "--chat-template", "--out", path + ".h5",
              "--python", sys.executable])
    with h5py.File(path + ".h5", "r") as f:
        ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
    check(ids == reference.apply_chat_template(record["messages"], tokenize=True),
          f"{name}: the ids are not apply_chat_template's")
    runs = [reference.decode(r) for r in counted_runs(ids, mask)]
    check(runs == [a + "\n<SPECIAL_12>\n" for a in ASSISTANT],
          f"{name}: the counted runs are {runs}")
    path = work(name + ".tools.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(conversations("tools")[1]) + "\n")
    refused([zt, "prepare-data", "--tokenizer", directory, "--sft-jsonl", path,
             "--messages-field", "messages", "--chat-template", "--out", work("bad.h5"),
             "--python", sys.executable],
            [path + ":1: the chat template renders 'messages'[1] (assistant)",
             "cannot be located"], work("bad.h5"))
    print(f"ok   {name}: the replies count as its template closes them ({runs}); a turn of "
          "calls, which it closes unlike at the end of a conversation, is refused")

def refuse_record(work, zt, file, record, tokenizer, message, *named):
    """prepare-data of a file holding `record` (as --messages-field messages, --chat-template) is
    refused with `message` after the line number, and the `named` parts, leaving no data."""
    path = work(file)
    with open(path, "w") as f:
        f.write(json.dumps(record) + "\n")
    refused([zt, "prepare-data", "--tokenizer", work(tokenizer), "--sft-jsonl", path,
             "--messages-field", "messages", "--chat-template", "--out", work("bad.h5"),
             "--python", sys.executable], [path + ":1:" + message, *named], work("bad.h5"))


def check_refused_renderings(work, zt):
    """Templates that drop or garble a message: the line is refused naming the message (or with
    the template's own error), not trained on what the template wrote."""
    refuse_record(work, zt, "nemo-system.jsonl", conversations("system")[0],
                  "mistralai-Mistral-Nemo-Instruct-2407",
                  " the chat template leaves 'messages'[0] (system) out")
    print("ok   Mistral Nemo's template, which leaves the system message out: refused naming "
          "it, no data left")

    # Granite 3.3's template writes a message's content alone: a turn of calls is refused
    # naming it rather than trained as an empty reply.
    refuse_record(work, zt, "granite-calls.jsonl", conversations("tools")[1],
                  "ibm-granite-granite-3.3-instruct-2504",
                  " the chat template does not render the tool_calls of 'messages'[1]")
    print("ok   Granite 3.3's template, which writes no tool_calls: a turn of calls is "
          "refused naming it, no data left")

    # Gemma's template refuses a system message itself: the line is refused with its error.
    refuse_record(work, zt, "gemma-system.jsonl", conversations("system")[0],
                  "google-codegemma-7b-it", "", "System role not supported")
    print("ok   Gemma's template, which refuses a system message: refused with its error, no "
          "data left")

    # Mistral Small's template reads a system message's first part alone, and prints a tool
    # result's list as Python prints it: each is refused naming the message.
    system = conversations("parts")[0]
    system["messages"][0]["content"] = parts("Be ", "brief.")
    tool = conversations("tools")[1]
    tool["messages"][2]["content"] = parts("18C and windy")
    for what, record, message in (("system", system, "'messages'[0] (system)"),
                                  ("tool", tool, "'messages'[2] (tool)")):
        refuse_record(work, zt, f"small-{what}-parts.jsonl", record,
                      "Mistral-Small-3.2-24B-Instruct-2506",
                      f" the chat template does not render the list of content parts of "
                      f"{message} as their text")
    print("ok   Mistral Small's template, which reads a system message's first part alone and "
          "prints a tool result's list: refused naming the message, no data left")

    # Gemma 3's template reads a system message's first part alone too.
    record = conversations("parts")[0]
    record["messages"][0]["content"] = parts("Be ", "brief.")
    refuse_record(work, zt, "gemma3-system-parts.jsonl", record, "google-gemma-3-4b-it",
                  " the chat template does not render the list of content parts of "
                  "'messages'[0] (system) as their text")
    print("ok   Gemma 3's template, which reads a system message's first part alone: refused "
          "naming the message, no data left")

    # Mistral Small 3.1's template reads a reply's first part alone: a reply of two parts is
    # refused naming it.
    record = conversations("user_parts")[0]
    record["messages"][2]["content"] = parts("Two, three ", "and five.")
    refuse_record(work, zt, "small31-reply-parts.jsonl", record,
                  "mistralai-Mistral-Small-3.1-24B-Instruct-2503",
                  " the chat template does not render the list of content parts of "
                  "'messages'[2] (assistant) as their text")
    print("ok   Mistral Small 3.1's template, which reads a reply's first part alone: a reply "
          "of two parts is refused naming it, no data left")


def check_deepseek_calls(work, zt):
    """DeepSeek-R1's template and a turn of calls: content none, empty, and dict arguments."""
    # DeepSeek-R1's template renders a turn's calls only when its content is none: a turn of
    # calls with an empty content is rendered so too (as without one); with arguments that
    # are not a string it fails, and is refused with its error.
    name = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"
    record, first = conversations("null_calls")[0], None
    for n, (said, arguments) in enumerate(((None, None), ("", None), (None, {"city": "P"}))):
        record["messages"][1]["content"] = said
        if arguments:
            record["messages"][1]["tool_calls"][0]["function"]["arguments"] = arguments
        path = work(f"r1-calls{n}.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(record) + "\n")
        cmd = [zt, "prepare-data", "--tokenizer", work(name), "--sft-jsonl", path,
               "--messages-field", "messages", "--chat-template", "--out", path + ".h5",
               "--python", sys.executable]
        if arguments:
            refused(cmd, [path + ":1: the chat template does not render the tool_calls of "
                          "'messages'[1]", "not written for tool calls; given a null content "
                          "instead, it fails: TypeError"], path + ".h5")
            continue
        run_tool(cmd)
        with h5py.File(path + ".h5", "r") as f:
            got = (f["tokens"][:].tolist(), f["loss_mask"][:].tolist())
        check(n == 0 or got == first, "DeepSeek-R1: a turn of calls with an empty content "
              "is not rendered as one with none")
        first = got
    print("ok   DeepSeek-R1's template: a turn of calls with an empty content is rendered as "
          "with none; dict arguments, which it cannot render, are refused with its error")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)

    def checks():
        for name in TEMPLATES:
            check_template(work, args.zerotrain, args.source_dir, name)
        check_refused_renderings(work, args.zerotrain)
        check_deepseek_calls(work, args.zerotrain)
        check_nemotron(work, args.zerotrain, args.source_dir)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
