#!/usr/bin/env python3
"""Named chat templates through chat SFT, the directories zerotrain writes and GGUF (CTest label
"oracle", in the project venv).

A tokenizer may hold several chat templates by name: tokenizer_config.json's list form,
[{"name", "template"}, ...], as Hermes 3 and Command R ship it, which transformers 4.5x and later
save as chat_template.jinja ("default") and additional_chat_templates/NAME.jinja. The templates
here are Hermes-3-Llama-3.1-8B's "default" and "tool_use"
(tests/data/chat_templates/NousResearch-Hermes-3-Llama-3.1-8B.chat_template.json, sources in
SOURCES.md).

1. SFT (`prepare-data --chat-template`), on a tokenizer holding the list form: a conversation
   without tools gets transformers' apply_chat_template ids, which its "default" template
   renders, and one with tools those of "tool_use" (which differ); the counted runs are the
   replies as each template closes them, read off the templates by hand. The same tokenizer
   saved in transformers 5's layout gives the same tokens and loss mask. Templates named without
   a "default" refuse a conversation without tools, naming the names and leaving no file, and
   render one with tools.
2. Carried files: a dataset made with a tokenizer in transformers 5's layout holds its
   additional_chat_templates/ file, and `train` writes it, byte for byte, into OUT/final/ and into
   each checkpoint, from which `consolidate` carries it on.
   The same tokenizer as transformers 5.24.0 saved it (tests/data/transformers5: class
   "TokenizersBackend", which transformers 4 does not know, and "Qwen2Tokenizer" with
   extra_special_tokens) gives the same chat data and the same document tokens.
3. GGUF: a file whose tokenizer gguf's GGUFWriter wrote with the list form imports to a
   tokenizer_config.json whose templates transformers reads back by name; exported again, from
   the list form and from transformers 5's layout (with a third template, whose name has a
   space and a non-ASCII letter), it holds the chat template keys GGUFWriter writes for the same
   templates (tokenizer.chat_template, tokenizer.chat_template.NAME, tokenizer.chat_templates).
   `generate --chat` on the imported model renders its message as apply_chat_template does:
   with "default", with "tool_use" when given --tools, with the template --chat-template
   names, and with a template of one's own that --chat-template-file gives (written with CRLF
   newlines, read as Python reads text), an empty tools list as no tools; an unknown name, both
   template options at once, a missing template file and tools that are not a list of named
   functions are refused.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            last_json_line, require_venv_modules, run_tool)
from test_chat_templates import tokenizer_dir  # noqa: E402
from test_gguf import metadata, model_tensors, train_vocab, write_gguf  # noqa: E402
from test_hf_tokenizer import refused  # noqa: E402
from test_tokenizer_configs import counted_runs  # noqa: E402

gguf, h5py, np, transformers = require_venv_modules("gguf", "h5py", "numpy", "transformers")

TEMPLATES = "tests/data/chat_templates/NousResearch-Hermes-3-Llama-3.1-8B.chat_template.json"
SPECIALS = ["<|begin_of_text|>", "<|im_start|>", "<|im_end|>"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city."}}, "required": ["city"]}}}
ROUNDS = {"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And 3 + 3?"}, {"role": "assistant", "content": "6."}]}
AGENT = {"tools": [WEATHER], "messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny in Paris."}]}
# A "default" that renders reasoning (made here, for a pair whose templates differ in that).
REASONING_DEFAULT = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.reasoning_content %}"
                     "<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n"
                     "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# The replies as the templates render them after the generation prompt "<|im_start|>assistant\n"
# (read off the templates): "default" closes a turn with "<|im_end|>\n"; "tool_use" writes a
# turn's calls as "\n<tool_call>\n" + {"name": ..., "arguments": ...} + "\n</tool_call>" after
# "<|im_start|>assistant", the newline being the generation prompt's.
RUNS = {"rounds": ["4.<|im_end|>\n", "6.<|im_end|>\n"],
        "agent": ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                  '</tool_call><|im_end|>\n', "It is sunny in Paris.<|im_end|>\n"]}


def read_templates(source_dir):
    with open(os.path.join(source_dir, TEMPLATES), encoding="utf-8") as f:
        return json.load(f)


def saved_as_files(source, directory, named):
    """A copy of tokenizer directory `source` in transformers 5's layout: tokenizer_config.json
    without chat_template, chat_template.jinja and additional_chat_templates/NAME.jinja
    (`named`: name -> template)."""
    shutil.copytree(source, directory)
    config_path = os.path.join(directory, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    config.pop("chat_template", None)
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    os.makedirs(os.path.join(directory, "additional_chat_templates"))
    for name, template in named.items():
        path = (os.path.join(directory, "chat_template.jinja") if name == "default" else
                os.path.join(directory, "additional_chat_templates", name + ".jinja"))
        with open(path, "w", encoding="utf-8") as f:
            f.write(template)
    return directory


def succeeds(cmd, what):
    """Runs cmd, echoing it; its failure is a failed check (what the named templates broke)."""
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(proc.stdout.rstrip())
    check(proc.returncode == 0, f"{what} failed")


def sft_data(work, zt, tokenizer, name, record):
    """prepare-data --chat-template of one line; (tokens, loss mask)."""
    path = work(name + ".jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(record) + "\n")
    succeeds([zt, "prepare-data", "--tokenizer", tokenizer, "--sft-jsonl", path,
              "--messages-field", "messages", "--tools-field", "tools", "--chat-template",
              "--out", path + ".h5", "--python", sys.executable], f"{name}: prepare-data")
    with h5py.File(path + ".h5", "r") as f:
        return f["tokens"][:].tolist(), f["loss_mask"][:].tolist()


def check_sft(work, zt, source_dir):
    templates = read_templates(source_dir)
    listed = tokenizer_dir(work("hermes"), templates, "<|begin_of_text|>", "<|im_end|>", SPECIALS)
    reference = transformers.AutoTokenizer.from_pretrained(listed)
    by_name = {t["name"]: t["template"] for t in templates}
    check(reference.chat_template == by_name, "transformers does not read the list form by name")
    files = saved_as_files(listed, work("hermes-files"), by_name)
    made = {}
    for kind, record in (("rounds", ROUNDS), ("agent", AGENT)):
        tools = record.get("tools")
        ids, mask = sft_data(work, zt, listed, kind, record)
        want = reference.apply_chat_template(record["messages"], tools=tools, tokenize=True)
        check(ids == want, f"{kind}: the ids are not apply_chat_template's")
        chosen = "tool_use" if tools else "default"
        if tools:  # "tool_use" cannot render a conversation without tools
            check(ids != reference.apply_chat_template(record["messages"], tools=tools,
                                                       tokenize=True,
                                                       chat_template=by_name["default"]),
                  f"{kind}: both templates render the same ids; the choice is untested")
        runs = [reference.decode(r) for r in counted_runs(ids, mask)]
        check(runs == RUNS[kind], f"{kind}: the counted runs are {runs}, not {RUNS[kind]}")
        check(sft_data(work, zt, files, kind + "-files", record) == (ids, mask),
              f"{kind}: transformers 5's layout gives other data than the list form")
        made[kind] = (ids, mask)
        print(f"ok   {kind}: the '{chosen}' template's ids, the replies counted ({runs}); the "
              "same data from chat_template.jinja and additional_chat_templates/")

    # Named templates without a "default": a conversation without tools has none.
    no_default = tokenizer_dir(work("no-default"), [templates[1]], "<|begin_of_text|>",
                               "<|im_end|>", SPECIALS)
    path = work("no-default.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(ROUNDS) + "\n")
    refused([zt, "prepare-data", "--tokenizer", no_default, "--sft-jsonl", path,
             "--messages-field", "messages", "--chat-template", "--out", work("bad.h5"),
             "--python", sys.executable],
            [path + f":1: the chat templates of {no_default} are named tool_use, none 'default'",
             "renders a conversation without tools"], work("bad.h5"))
    ids, _ = sft_data(work, zt, no_default, "no-default-agent", AGENT)
    check(ids == reference.apply_chat_template(AGENT["messages"], tools=AGENT["tools"],
                                               tokenize=True),
          "templates without a default: the conversation with tools is not 'tool_use''s")
    print("ok   templates named without 'default': a conversation without tools is refused "
          "naming them, one with tools renders with 'tool_use'")

    # The template a conversation renders with is the one checked for what it renders: here
    # "default" writes the reasoning, Hermes' "tool_use" drops it, so a conversation with tools
    # and reasoning is refused.
    thinking = [{"name": "default", "template": REASONING_DEFAULT}, templates[1]]
    mixed = tokenizer_dir(work("mixed"), thinking, "<|begin_of_text|>", "<|im_end|>", SPECIALS)
    record = json.loads(json.dumps(AGENT))
    record["messages"][-1]["reasoning_content"] = "It said sunny."
    path = work("mixed.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(record) + "\n")
    refused([zt, "prepare-data", "--tokenizer", mixed, "--sft-jsonl", path, "--messages-field",
             "messages", "--tools-field", "tools", "--chat-template", "--out", work("bad.h5"),
             "--python", sys.executable],
            [path + ":1: 'messages'[3] has a reasoning_content, which the chat template does not "
             "render"], work("bad.h5"))
    print("ok   reasoning that 'tool_use' drops is refused though 'default' renders it")
    return listed, made


def check_transformers5(work, zt, source_dir, listed, made):
    """The tokenizer of check_sft as transformers 5.24.0 saved it (tests/data/transformers5), as
    "TokenizersBackend" and as "Qwen2Tokenizer" with extra_special_tokens: the same chat data as
    the list form gives, and the same documents (EOS appended)."""
    text = work("documents.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("Hello there. <|im_start|>user\nA special token inside a document.\n")
    want = None
    for name in ("list form", "tokenizers-backend", "qwen2-class"):
        directory = listed if name == "list form" else os.path.join(
            source_dir, "tests/data/transformers5", name)
        for kind, record in (("rounds", ROUNDS), ("agent", AGENT)):
            if name != "list form":
                check(sft_data(work, zt, directory, f"{name}-{kind}", record) == made[kind],
                      f"transformers 5's {name} save: {kind} gives other data than the list form")
        out = work(f"{name}-documents.h5")
        succeeds([zt, "prepare-data", "--tokenizer", directory, "--text", text, "--document-eos",
                  "on", "--out", out, "--python", sys.executable], f"{name}: prepare-data --text")
        with h5py.File(out, "r") as f:
            tokens = f["tokens"][:].tolist()
        want = tokens if want is None else want
        check(tokens == want, f"transformers 5's {name} save: the documents' tokens differ")
    print("ok   tokenizers saved by transformers 5.24.0 (TokenizersBackend; Qwen2Tokenizer with "
          "extra_special_tokens): the list form's chat data and document tokens")


def gguf_chat_keys(path):
    """The chat template keys of a GGUF file and their values."""
    fields = gguf.GGUFReader(path).fields
    out = {}
    for key, field in fields.items():
        if not key.startswith("tokenizer.chat_template"):
            continue
        values = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
        out[key] = sorted(values) if key == "tokenizer.chat_templates" else values[0]
    return out


def gguf_templates(work, templates):
    """A GGUF file that gguf's GGUFWriter gives `templates` (the list form) alone."""
    path = work(f"templates-{len(templates)}.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_chat_template(templates)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def check_gguf_edges(work, zt, vocab, templates, imported):
    """A file with named templates and no default imports them as the list form (which `generate
    --chat` refuses, naming them); one giving the default both as tokenizer.chat_template and
    tokenizer.chat_template.default is refused, and so is an export whose template names would
    share a key."""
    files = {}
    for name, extra, listed in (("gguf-no-default", {}, [templates[1]]),
                                ("two-defaults", {"tokenizer.chat_template.default":
                                                  ("string", "x")}, templates)):
        os.makedirs(work(name))
        files[name] = work(name, "model.gguf")
        write_gguf(files[name], "llama", dict(metadata("llama", len(vocab[0])), **extra),
                   model_tensors(np.random.default_rng(5), "llama", len(vocab[0])), vocab,
                   chat_template=listed)
    run_tool([zt, "import", files["gguf-no-default"], "--out", work("no-default-imported")])
    with open(work("no-default-imported", "tokenizer_config.json"), encoding="utf-8") as f:
        check(json.load(f)["chat_template"] == [templates[1]],
              "import: named templates without a default are not the list form")
    refused([zt, "generate", "--model", work("no-default-imported"), "--chat", "Hi",
             "--max-new-tokens", "1"],
            [work("no-default-imported") + ": the chat templates are named tool_use, none "
             "'default', which --chat renders a message with"], work("no-such-output"))
    refused([zt, "import", files["two-defaults"], "--out", work("two-defaults-imported")],
            [files["two-defaults"] + ": both tokenizer.chat_template and "
             "tokenizer.chat_template.default are given"], work("two-defaults-imported"))
    clash = saved_as_files(imported, work("clash"), {"default": "d", "a b": "x", "a_b": "y"})
    refused([zt, "export", clash, "--format", "gguf", "--gguf-type", "f32", "--out",
             work("clash.gguf")],
            ["the chat templates 'a b' and 'a_b' would both be written as "
             "tokenizer.chat_template.a_b"], work("clash.gguf"))
    print("ok   import of templates without a default; a default given twice, and names "
          "sharing a GGUF key, refused")


def generate_inputs(work):
    """The files generate --chat and --messages read here: the tools (one, and an empty list),
    two conversations that end where the assistant's next turn begins, and a template of one's
    own (written with CRLF); with the message and the turns they render."""
    message = "What is the weather in Paris?"
    tools_file = work("tools.json")
    with open(tools_file, "w", encoding="utf-8") as f:
        json.dump([WEATHER], f)
    empty_file = work("no-tools.json")
    with open(empty_file, "w", encoding="utf-8") as f:
        json.dump([], f)
    # Conversations that end where the next assistant turn begins: after a tool's result, and
    # after a user's turn that follows a system message and an earlier round.
    conversations = {}
    for label, messages in (("agent", AGENT["messages"][:-1]), ("rounds", ROUNDS["messages"][:-1])):
        conversations[label] = (work(f"{label}.json"), messages)
        with open(conversations[label][0], "w", encoding="utf-8") as f:
            json.dump(messages, f)
    user = [{"role": "user", "content": message}]
    system = [{"role": "system", "content": "Answer in French."}]
    # A template of one's own, as a base model is given one (CRLF, read as Python reads text).
    own_template = ("{% for m in messages %}<<{{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}"
                    "{% if add_generation_prompt %}<<assistant>>{% endif %}")
    own_file = work("own.jinja")
    with open(own_file, "w", encoding="utf-8", newline="\r\n") as f:
        f.write(own_template)
    return SimpleNamespace(message=message, tools_file=tools_file, empty_file=empty_file,
                           conversations=conversations, user=user, system=system,
                           own_template=own_template, own_file=own_file)



def check_generate_prompts(zt, imported, tok, given):
    """Each way to give the messages, tools and template: apply_chat_template's prompt ids."""
    message, user, system, conversations = (given.message, given.user, given.system,
                                            given.conversations)
    tools_file, empty_file, own_template, own_file = (given.tools_file, given.empty_file,
                                                      given.own_template, given.own_file)
    prompts = {}
    for label, extra, messages, tools, name in (
            ("no tools", ["--chat", message], user, None, None),
            ("an empty tools list (no tools, as chat SFT data reads it)",
             ["--chat", message, "--tools", empty_file], user, None, None),
            ("tools", ["--chat", message, "--tools", tools_file], user, [WEATHER], None),
            ("tools, --chat-template default", ["--chat", message, "--tools", tools_file,
                                                "--chat-template", "default"],
             user, [WEATHER], "default"),
            ("--system", ["--chat", message, "--system", system[0]["content"]], system + user,
             None, None),
            ("--chat-template-file", ["--chat", message, "--chat-template-file", own_file], user,
             None, own_template),
            ("--messages, a tool call and its result", ["--messages", conversations["agent"][0],
                                                        "--tools", tools_file],
             conversations["agent"][1], [WEATHER], None),
            ("--messages, a system message and a round before",
             ["--messages", conversations["rounds"][0]], conversations["rounds"][1], None,
             None)):
        answer = last_json_line(run_tool([zt, "generate", "--model", imported,
                                          "--max-new-tokens", "1", "--json"] + extra))
        want = tok.apply_chat_template(messages, tools=tools, chat_template=name,
                                       add_generation_prompt=True)
        check(answer["prompt_tokens"] == want, f"generate with {label}: prompt ids "
              f"{answer['prompt_tokens'][:12]}... differ from apply_chat_template's")
        prompts[label] = answer["prompt_tokens"]
    check(prompts["tools"] != prompts["no tools"] and
          prompts["tools"] != prompts["tools, --chat-template default"],
          "tool_use renders the message as default does: the check cannot tell them apart")
    check(prompts["--system"] != prompts["no tools"], "--system renders as no system message")
    check(prompts["--chat-template-file"] != prompts["no tools"],
          "--chat-template-file renders as the tokenizer's default template")


def check_empty_tools(work, zt, imported, tok, given):
    """--tools with an empty list, for a template that tells [] from none."""
    message, empty_file = given.message, given.empty_file
    # An empty list is no tools even for a template that tells [] from none (as Llama 3.1's
    # does): the model of one such template renders it as apply_chat_template(tools=None).
    # (transformers 4.46 does not read chat_template.jinja: the reference is given the template.)
    template = ("{% if tools is not none %}[tools]{% endif %}"
                "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    tells = saved_as_files(imported, work("generate", "tells-empty-from-none"),
                           {"default": template})
    answer = last_json_line(run_tool([zt, "generate", "--model", tells, "--chat", message,
                                      "--max-new-tokens", "1", "--json", "--tools", empty_file]))
    as_none, as_empty = (tok.apply_chat_template([{"role": "user", "content": message}],
                                                 tools=tools, chat_template=template,
                                                 add_generation_prompt=True)
                         for tools in (None, []))
    check(as_none != as_empty and answer["prompt_tokens"] == as_none,
          "generate --chat --tools with an empty list: not rendered as no tools")


def check_generate_refusals(work, zt, imported, given):
    """Unknown names, options that do not go together, bad messages and tools files."""
    tools_file, conversations, own_file = given.tools_file, given.conversations, given.own_file
    chat = [zt, "generate", "--model", imported, "--max-new-tokens", "1"]
    refused(chat + ["--chat", "Hi", "--chat-template", "rag"],
            [f"--chat-template: {imported} has no chat template named 'rag'; its templates are "
             "named default, tool_use"], work("no-such-output"))
    refused(chat + ["--chat", "Hi", "--chat-template", "default", "--chat-template-file",
                    own_file], ["give --chat-template", "not both"], work("no-such-output"))
    refused(chat + ["--chat", "Hi", "--chat-template-file", work("absent.jinja")],
            [f"chat template '{work('absent.jinja')}' does not exist"], work("no-such-output"))
    for option, value in (("--chat-template", "tool_use"), ("--tools", tools_file),
                          ("--chat-template-file", own_file)):
        refused(chat + ["--prompt", "Hi", option, value],
                [f"{option} goes with a --chat message or --messages"], work("no-such-output"))
    for extra in (["--prompt", "Hi"], ["--messages", conversations["rounds"][0]]):
        refused(chat + extra + ["--system", "Be brief."], ["--system goes with a --chat message"],
                work("no-such-output"))
    refused(chat + ["--chat", "Hi", "--messages", conversations["rounds"][0]],
            ["give exactly one of '--prompt', '--chat' or '--messages'"], work("no-such-output"))
    for n, (bad, says) in enumerate((
            (ROUNDS["messages"], "the conversation ends with an assistant message"),
            ({"role": "user", "content": "Hi"}, "not a non-empty list of messages"),
            ([], "not a non-empty list of messages"),
            ([{"content": "Hi"}], "not a non-empty list of messages"),
            ([{"role": 1, "content": "Hi"}], "not a non-empty list of messages"))):
        path = work(f"bad-messages{n}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(bad, f)
        refused(chat + ["--messages", path], [f"--messages: {path}: {says}"],
                work("no-such-output"))
    with open(work("bad-messages-latin1.json"), "wb") as f:
        f.write(b'[{"role": "user", "content": "caf\xe9"}]')
    refused(chat + ["--messages", work("bad-messages-latin1.json")],
            [f"--messages: {work('bad-messages-latin1.json')}: not a UTF-8 JSON file"],
            work("no-such-output"))
    refused(chat + ["--chat", "Hi", "--tools", ""], ["--tools '' is not a file"],
            work("no-such-output"))
    for n, bad in enumerate((WEATHER, [{"type": "function", "function": {}}], None)):
        path = work(f"bad-tools{n}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(bad, f)
        refused(chat + ["--chat", "Hi", "--tools", path],
                [f"--tools: {path}: not a list of tool schemas that each name a function"],
                work("no-such-output"))
    with open(work("bad-tools-latin1.json"), "wb") as f:
        f.write(b'[{"name": "caf\xe9"}]')
    refused(chat + ["--chat", "Hi", "--tools", work("bad-tools-latin1.json")],
            [f"--tools: {work('bad-tools-latin1.json')}: not a UTF-8 JSON file"],
            work("no-such-output"))


def check_generate(work, zt, vocab, templates):
    """`generate --chat` (after --system's message) and `generate --messages` render the
    messages with the template transformers picks (tool_use with --tools, else default) or the
    one --chat-template names, with the tools: the prompt ids are apply_chat_template's
    (tokenize=True, add_generation_prompt=True). The model's context holds tool_use's long system
    prompt."""
    os.makedirs(work("generate"))
    source, imported = work("generate", "model.gguf"), work("generate", "model")
    write_gguf(source, "llama", dict(metadata("llama", len(vocab[0])),
                                     **{"llama.context_length": ("uint32", 2048)}),
               model_tensors(np.random.default_rng(5), "llama", len(vocab[0])), vocab,
               chat_template=templates)
    run_tool([zt, "import", source, "--out", imported])
    tok = transformers.AutoTokenizer.from_pretrained(imported)
    given = generate_inputs(work)
    check_generate_prompts(zt, imported, tok, given)
    check_empty_tools(work, zt, imported, tok, given)
    check_generate_refusals(work, zt, imported, given)
    print("ok   generate --chat: default (with no tools or an empty list), tool_use with --tools, "
          "--chat-template default with them, --chat-template-file, --system, --messages with a tool call and its "
          "result and with a system message and an earlier round: apply_chat_template's prompt "
          "ids; an unknown name, either option with --prompt, --system without --chat, tools "
          "that are not a list of named functions and conversations that are not a list of "
          "messages or end with the assistant's refused")


def check_gguf(work, zt, source_dir, vocab):
    templates = read_templates(source_dir)
    by_name = {t["name"]: t["template"] for t in templates}
    os.makedirs(work("gguf"))
    source = work("gguf", "model.gguf")
    write_gguf(source, "llama", metadata("llama", len(vocab[0])),
               model_tensors(np.random.default_rng(5), "llama", len(vocab[0])), vocab,
               chat_template=templates)
    want = gguf_chat_keys(source)
    check(sorted(want) == ["tokenizer.chat_template", "tokenizer.chat_template.tool_use",
                           "tokenizer.chat_templates"], f"gguf wrote the keys {sorted(want)}")
    imported = work("imported")
    run_tool([zt, "import", source, "--out", imported])
    with open(os.path.join(imported, "tokenizer_config.json"), encoding="utf-8") as f:
        listed = json.load(f)["chat_template"]
    check(listed == templates, "import: tokenizer_config.json's chat_template is not the list "
          "form of the file's templates")
    check(transformers.AutoTokenizer.from_pretrained(imported).chat_template == by_name,
          "import: transformers does not read the templates back by name")
    print("ok   import: the GGUF file's named templates are tokenizer_config.json's list form")
    check_generate(work, zt, vocab, templates)
    check_gguf_edges(work, zt, vocab, templates, imported)
    # In transformers 5's layout, with a third template whose name gguf rewrites for its key.
    odd = {"name": "rag v2\u00e9", "template": "{{ documents }}"}
    files = saved_as_files(imported, work("imported-files"),
                           dict(by_name, **{odd["name"]: odd["template"]}))
    for n, (name, model, listed) in enumerate((("the list form", imported, templates),
                                               ("transformers 5's layout", files,
                                                templates + [odd]))):
        path = work(f"export{n}.gguf")
        run_tool([zt, "export", model, "--format", "gguf", "--gguf-type", "f32", "--out", path])
        got, want = gguf_chat_keys(path), gguf_chat_keys(gguf_templates(work, listed))
        check(got == want, f"export from {name}: chat template keys {sorted(got)} differ "
              f"from those gguf writes, {sorted(want)}")
        print(f"ok   export from {name}: the chat template keys gguf writes ({sorted(got)})")
    return files


def check_carried(work, zt, source_dir, model):
    """`model`: a model directory whose tokenizer is in transformers 5's layout."""
    named = ["chat_template.jinja"] + [
        os.path.join("additional_chat_templates", name)
        for name in sorted(os.listdir(os.path.join(model, "additional_chat_templates")))]
    texts = {}
    for name in named:
        with open(os.path.join(model, name), encoding="utf-8") as f:
            texts[name] = f.read()
    check(len(named) == 3, f"the model holds the templates {named}")
    data = work("carried.h5")
    run_tool([zt, "prepare-data", "--tokenizer", model, "--text",
              os.path.join(source_dir, "inputs/data/sample.txt"), "--out", data,
              "--python", sys.executable])
    with h5py.File(data, "r") as f:
        for name in named:
            check(bytes(f[name][:]).decode("utf-8") == texts[name],
                  f"prepare-data: the dataset does not hold {name}")
    run = work("run")
    succeeds([zt, "train", "--model", model, "--data", data, "--out", run, "--steps", "1",
              "--micro-batch", "1", "--seq-len", "32", "--eval-batches", "0", "--save-every", "1"],
             "train with a named template in its data")
    checkpoint = os.path.join(run, "checkpoints", "step-00000001")
    consolidated = work("consolidated")
    run_tool([zt, "consolidate", checkpoint, "--out", consolidated])
    for where in (os.path.join(run, "final"), checkpoint, consolidated):
        for name in named:
            path = os.path.join(where, name)
            check(os.path.isfile(path) and open(path, encoding="utf-8").read() == texts[name],
                  f"{where} does not hold {name} as the tokenizer has it")
    print(f"ok   the templates travel ({', '.join(named)}): dataset, OUT/final/, the "
          "checkpoint, consolidate")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)
    transformers.logging.set_verbosity_error()

    def checks():
        listed, made = check_sft(work, args.zerotrain, args.source_dir)
        check_transformers5(work, args.zerotrain, args.source_dir, listed, made)
        vocab = train_vocab(os.path.join(args.source_dir, "inputs/data/sample.txt"), work(""))
        model = check_gguf(work, args.zerotrain, args.source_dir, vocab)
        check_carried(work, args.zerotrain, args.source_dir, model)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
