#!/usr/bin/env python3
"""SFT data (prepare-data --sft-jsonl) through eval and train, against transformers (label oracle).

The tokenizer is test_hf_tokenizer.py's byte-level BPE (a BOS template, bos/eos named in
tokenizer_config.json); the examples pair consecutive lines of inputs/data/sample.txt as
"question" and "answer" (custom field names, so --prompt-field/--response-field are exercised).
1. `prepare-data --sft-jsonl`: example by example, the tokens and mask TRL gives a
   prompt-completion pair: tokenizer(prompt + response)["input_ids"] + [eos], /loss_mask 0 over
   the first len(tokenizer(prompt)["input_ids"]) tokens (a prefix of them) and 1 over the rest.
   With --chat-template, the tokens and the mask equal transformers' apply_chat_template with
   return_assistant_tokens_mask (a template marking the assistant turn with {% generation %}).
   With --messages-field, multi-turn conversations with a system prompt, one reply opening with
   whitespace that the token before it takes in: the same comparison, every assistant turn
   counted. Tool calls (TRL's format, the tools column as a list or a JSON string, a line with
   the null keys an Arrow export writes): the same comparison, the calls counted, the tool
   results not. Alpaca's instruction and input (--prompt-field instruction,input), on the first
   30 records of LLaMA-Factory's alpaca_en_demo.json (tests/data/sft_datasets): the prompt is the
   two joined by a newline when the input is not empty, as LLaMA-Factory joins them, without and
   with the chat template; an unread 'input' beside --prompt-field instruction is noted with
   that option. (OpenAI's fine-tuning format and TRL's chat_template_kwargs: test_chat_formats.py.)
2. A random transformers LlamaForCausalLM, imported: `zerotrain eval` on the SFT data equals the
   loss transformers computes itself from labels with -100 where the mask is 0 (its shifted,
   ignore_index mean over the batch of windows), and differs from the unmasked loss by more than
   the bound (the mask is honoured).
3. `train` at 2 ranks, ZeRO-3, on the SFT data, `export`: transformers' masked loss of the export
   equals `zerotrain eval` of OUT/final; each step's metrics count the step's unmasked targets.
   `consolidate` of the last checkpoint writes final/'s tokenizer files and evaluates as final/. A
   step whose whole global batch is masked is trained without a loss gradient and warned about.
4. Bad input (sft_refusals.py): a line without its response field names the file, the line and
   the field; the SFT field options without --sft-jsonl, byte-level data for train and eval of a
   model that carries a tokenizer.json, a Hub id as the tokenizer (named, with the command that
   downloads it), two equal field names (also within --prompt-field's list), an empty name in
   the list, a first prompt field no line holds, --chat-template with a tokenizer that has no
   chat template, --messages-field or --tools-field without --chat-template, a
   conversation without an assistant turn or with an unknown role (a completion's message named
   by its own field and index), a reasoning_content the template does not render, a message key
   no role holds, a tool result answering no call, a call naming no function, a tools field that
   is not JSON and a --tools-field that names the messages field are refused; nothing is left.
   generate refuses a model without a tokenizer (naming it and --tokenizer), a zero temperature
   and a prompt longer than max_position_embeddings.
5. `generate` on the trained model: the greedy continuation of a prompt equals greedy decoding
   over transformers' forward token by token (a different choice is accepted only at a near tie of
   transformers' own logits, within the bound below, where the comparison ends), the text equals
   the tokenizer's decode, and sampling with top-k 1 gives the greedy tokens.

Bound of every loss comparison (fp32 logits on both sides): 10·u·sqrt(max(D, F, V))·(2L + 2)·
max(1, |loss|), u = 2^-24, as test_hf_families.py derives it.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fp32_model_bound,  # noqa: E402
                            fresh_work_dir, last_json_line, require_venv_modules, run_tool)
from test_hf_tokenizer import dataset, train_tokenizer  # noqa: E402
from sft_refusals import check_sft_refusals  # noqa: E402

h5py, np, torch, transformers = require_venv_modules("h5py", "numpy", "torch", "transformers")

# A chat template whose assistant turn (its content and the EOS closing it, rendered from the
# tokenizer's eos_token) is marked with {% generation %}, so transformers can say which tokens are
# the assistant's.
# Written for tool calls too: the tools are listed first, a tool result is its own turn, and an
# assistant turn's calls follow its content inside the turn's {% generation %} span.
# A `persona` keyword argument (TRL's chat_template_kwargs) opens the conversation.
CHAT_TEMPLATE = (
    "{% if persona %}<|system|>\n{{ persona }}\n{% endif %}"
    "{% if tools %}<|system|>\nTools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}"
    "\n{% endif %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>\n{{ m['content'] }}\n"
    "{% elif m['role'] == 'system' %}<|system|>\n{{ m['content'] }}\n"
    "{% elif m['role'] == 'tool' %}<|tool|>\n{{ m['content'] }}\n"
    "{% else %}<|assistant|>\n{% generation %}{{ m['content'] }}"
    "{% for c in m['tool_calls'] or [] %}<call>{{ c['function']['name'] }}"
    "{{ c['function']['arguments'] | tojson }}</call>{% endfor %}{{ eos_token }}{% endgeneration %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
SEQ_LEN, MICRO_BATCH, BATCHES = 32, 2, 2
SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128)


def add_chat_template(tokenizer_dir):
    """Writes CHAT_TEMPLATE into the directory's tokenizer_config.json."""
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config["chat_template"] = CHAT_TEMPLATE
    with open(path, "w") as f:
        json.dump(config, f)


def examples(text_file, count):
    lines = [line.strip() for line in open(text_file, encoding="utf-8") if line.strip()]
    return [{"id": i, "question": lines[2 * i], "answer": lines[2 * i + 1]} for i in range(count)]


def trl_pairs(reference, eos, pairs):
    """(ids, mask) of TRL's prompt-completion encoding of the (prompt, response) pairs:
    tokenizer(prompt + response) and EOS, the prompt's tokens masked."""
    want_ids, want_mask = [], []
    for i, (question, answer) in enumerate(pairs):
        prompt = reference(question)["input_ids"]
        whole = reference(question + answer)["input_ids"] + [eos]
        check(whole[:len(prompt)] == prompt, f"sft: example {i}'s prompt tokens are not a "
              "prefix of its whole encoding: TRL's rule is ambiguous there")
        want_ids += whole
        want_mask += [0] * len(prompt) + [1] * (len(whole) - len(prompt))
    return want_ids, want_mask


def hf_masked_loss(model, tokens, mask, use_mask=True):
    """transformers' own loss over the first MICRO_BATCH·BATCHES windows of SEQ_LEN+1 tokens (as
    `zerotrain eval` reads them): labels are the window, -100 where the mask is 0; the model
    shifts them and averages over the labels that are not -100."""
    n = MICRO_BATCH * BATCHES * (SEQ_LEN + 1)
    ids = torch.from_numpy(tokens[:n].astype(np.int64)).reshape(-1, SEQ_LEN + 1)
    labels = ids.clone()
    if use_mask:
        labels[torch.from_numpy(mask[:n].reshape(-1, SEQ_LEN + 1)) == 0] = -100
    with torch.no_grad():
        return model(input_ids=ids, labels=labels).loss.item()


def chat_template_check(zt, work, chat_reference, what, options, out, conversations,
                        counted_from=None, tools=None, template=None, arguments=None):
    """prepare-data with the chat tokenizer (work("chat_tok")) and `options` gives the tokens and
    the mask that transformers' apply_chat_template (return_assistant_tokens_mask) gives the
    conversations (with counted_from, only from token counted_from[i] of conversation i on; with
    the tools of each, tools[i]; rendered by `template` instead of the tokenizer's; with the
    keyword arguments of each, arguments[i], but for those holding None). Returns (tokens,
    counted)."""
    run_tool([zt, "prepare-data", "--tokenizer", work("chat_tok"), "--chat-template", "--out",
              work(out), "--python", sys.executable] + options)
    got_tokens, _, _ = dataset(work(out))
    with h5py.File(work(out), "r") as f:
        got_mask = f["loss_mask"][:].astype(np.int64)
    want_ids, want_mask = [], []
    for i, c in enumerate(conversations):
        given = {k: v for k, v in (arguments[i] if arguments else {}).items() if v is not None}
        rendered = chat_reference.apply_chat_template(
            c, tools=tools[i] if tools else None, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True, chat_template=template, **given)
        want_ids += rendered["input_ids"]
        first = counted_from[i] if counted_from else 0
        want_mask += [0] * first + rendered["assistant_masks"][first:]
    check(got_tokens.tolist() == want_ids,
          f"{what}: the tokens differ from transformers' apply_chat_template")
    check(got_mask.tolist() == want_mask,
          f"{what}: the loss mask differs from transformers' assistant mask")
    return len(got_tokens), int(got_mask.sum())


def system_conversations(records):
    """Ten conversations of a system message and two rounds, from 20 question/answer records; the
    first reply opens with whitespace, which the pre-tokenizer joins to the newline before it
    (the token holding the reply's first character starts before the turn)."""
    conversations = [[{"role": "system", "content": "Answer in one line."},
                      {"role": "user", "content": records[i]["question"]},
                      {"role": "assistant", "content": records[i]["answer"]},
                      {"role": "user", "content": records[i + 1]["question"]},
                      {"role": "assistant", "content": records[i + 1]["answer"]}]
                     for i in range(0, 20, 2)]
    conversations[0][2]["content"] = "\n\n" + conversations[0][2]["content"]
    return conversations


def alpaca_input(zt, work, source_dir, reference, eos, check_against_chat_template):
    """Part 1g."""
    path = os.path.join(source_dir, "tests/data/sft_datasets",
                        "LLaMA-Factory--alpaca_en_demo.first30.json")
    with open(path, encoding="utf-8") as f:
        alpaca = json.load(f)
    # LLaMA-Factory's alpaca converter: the instruction and the input that are not empty,
    # joined by a newline.
    pairs = [("\n".join(t for t in (r["instruction"], r["input"]) if t), r["output"])
             for r in alpaca]
    inputs = sum(bool(r["input"]) for r in alpaca)
    fields = ["--prompt-field", "instruction,input", "--response-field", "output"]
    out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl", path,
                    "--out", work("alpaca_input.h5"), "--python", sys.executable] + fields)
    check("note:" not in out, f"instruction,input: a field was noted unread: {out}")
    tokens, _, _ = dataset(work("alpaca_input.h5"))
    with h5py.File(work("alpaca_input.h5"), "r") as f:
        mask = f["loss_mask"][:].astype(np.int64)
    want_ids, want_mask = trl_pairs(reference, eos, pairs)
    check(tokens.tolist() == want_ids, "instruction,input: the tokens differ from transformers' "
          "encoding of the joined prompt and the output")
    check(mask.tolist() == want_mask, "instruction,input: the loss mask differs")
    count, _ = check_against_chat_template(
        "instruction,input chat", ["--sft-jsonl", path] + fields, "alpaca_input_chat.h5",
        [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in pairs])
    # An input absent or null is no input; blanks around the comma are not part of the names.
    lines = [{"instruction": "Add the numbers.", "output": "4"},
             {"instruction": "Add.", "input": None, "output": "4"},
             {"instruction": "Add.", "input": "2 and 2", "output": "5"}]
    with open(work("alpaca_null.jsonl"), "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
                    work("alpaca_null.jsonl"), "--prompt-field", "instruction, input",
                    "--response-field", "output", "--out", work("alpaca_null.h5"), "--python",
                    sys.executable])
    tokens, _, _ = dataset(work("alpaca_null.h5"))
    check("note:" not in out and tokens.tolist() == trl_pairs(reference, eos, [
        ("Add the numbers.", "4"), ("Add.", "4"), ("Add.\n2 and 2", "5")])[0],
        f"'instruction, input' with an absent and a null input: other tokens ({out})")
    print(f"ok   LLaMA-Factory's alpaca_en_demo ({len(alpaca)} records, {inputs} with an input), "
          f"--prompt-field instruction,input: {len(tokens)} tokens as TRL encodes the joined "
          f"prompt, {count} with the chat template as transformers renders it; an absent and a "
          "null input, and 'instruction, input' with a blank")


class SftOracle:
    """The check's parts, run in order by run(); each reads what the parts before it left on self
    (the tokenizer, the records and their dataset, the conversations, the trained model)."""

    def __init__(self, args, work):
        self.args, self.work, self.zt, self.seq_len = args, work, args.zerotrain, SEQ_LEN
        self.python = ["--python", sys.executable]
        self.text_file = os.path.join(args.source_dir, "inputs/data/sample.txt")
        self.tok = train_tokenizer(self.text_file, work("tok"))
        self.reference = transformers.PreTrainedTokenizerFast.from_pretrained(work("tok"))
        self.eos = self.tok.token_to_id("</s>")

    def run(self):
        self.sft_dataset()
        self.chat_template()
        self.tool_calls()
        self.unread_fields()
        self.eval_imported()
        self.train_export()
        self.masked_steps()
        self.generate()
        check_sft_refusals(self)

    def check_against_chat_template(self, what, options, out, conversations, **kwargs):
        return chat_template_check(self.zt, self.work, self.chat_reference, what, options, out,
                                   conversations, **kwargs)

    # The reference is transformers on the packed windows: plain causal attention across the
    # examples (--document-masking off). Per-example masks: oracle_document_masking.
    def zt_eval(self, model_dir):
        out = run_tool([self.zt, "eval", "--model", model_dir, "--data", self.work("sft.h5"),
                        "--batches", str(BATCHES), "--micro-batch", str(MICRO_BATCH),
                        "--seq-len", str(SEQ_LEN), "--precision", "fp32",
                        "--document-masking", "off"])
        return last_json_line(out)

    def bound(self, value):
        widest = max(SIZES["hidden_size"], SIZES["intermediate_size"], self.tok.get_vocab_size())
        return fp32_model_bound(widest, SIZES["num_hidden_layers"], value)

    def compare(self, what, got, want):
        diff = abs(got - want)
        print(f"{what}: zerotrain {got:.9f} transformers {want:.9f} |diff| {diff:.3e} "
              f"bound {self.bound(want):.3e}", flush=True)
        check(diff <= self.bound(want),
              f"{what}: |{got} - {want}| = {diff} > {self.bound(want)}")

    def sft_dataset(self):
        """Part 1: prompt-response pairs, as TRL encodes them."""
        zt, work, python, text_file, reference, eos = (
            self.zt, self.work, self.python, self.text_file, self.reference, self.eos)
        # 1. The SFT dataset, example by example.
        records = examples(text_file, 40)
        with open(work("sft.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl", work("sft.jsonl"),
                  "--prompt-field", "question", "--response-field", "answer",
                  "--out", work("sft.h5")] + python)
        tokens, _, label = dataset(work("sft.h5"))
        with h5py.File(work("sft.h5"), "r") as f:
            mask = f["loss_mask"][:].astype(np.int64)
        want_ids, want_mask = trl_pairs(reference, eos, [(r["question"], r["answer"])
                                                         for r in records])
        check(tokens.tolist() == want_ids, "sft: the tokens differ from transformers' "
              f"(first difference at {next((i for i, (a, b) in enumerate(zip(tokens, want_ids)) if a != b), None)}, "
              f"{len(tokens)} vs {len(want_ids)} tokens)")
        check(mask.tolist() == want_mask, "sft: the loss mask differs from prompt 0 / response 1")
        check(label == "hf:tok", f"sft: label {label}")
        print(f"ok   sft: {len(records)} examples, {len(tokens)} tokens, {int(mask.sum())} "
              "counted: transformers' ids, the prompts masked")
        self.records, self.tokens, self.mask = records, tokens, mask

    def chat_template(self):
        """Parts 1b to 1d: single turns, conversations, prompt-completion."""
        work, records, check_against_chat_template = (
            self.work, self.records, self.check_against_chat_template)
        # 1b. --chat-template: transformers renders each example; its own assistant mask (the
        # template's {% generation %} span, return_assistant_tokens_mask) is the reference.
        shutil.copytree(work("tok"), work("chat_tok"))
        add_chat_template(work("chat_tok"))
        chat_reference = transformers.PreTrainedTokenizerFast.from_pretrained(work("chat_tok"))
        self.chat_reference = chat_reference

        pairs = [[{"role": "user", "content": r["question"]},
                  {"role": "assistant", "content": r["answer"]}] for r in records]
        count, _ = check_against_chat_template(
            "chat template", ["--sft-jsonl", work("sft.jsonl"), "--prompt-field", "question",
                              "--response-field", "answer"], "chat.h5", pairs)
        print(f"ok   chat template: {count} tokens and the mask of the assistant turns "
              "as transformers' apply_chat_template gives them")

        # 1c. --messages-field: multi-turn conversations with a system prompt (TRL's
        # conversational format); every assistant turn counts, as transformers' mask says.
        conversations = system_conversations(records)
        with open(work("chats.jsonl"), "w") as f:
            for c in conversations:
                f.write(json.dumps({"messages": c}) + "\n")
        count, counted = check_against_chat_template(
            "messages", ["--sft-jsonl", work("chats.jsonl"), "--messages-field", "messages"],
            "chats.h5", conversations)
        print(f"ok   messages: {len(conversations)} conversations (system, 2 turns each), "
              f"{count} tokens, {counted} counted, as transformers' assistant mask")

        # 1d. TRL's conversational prompt-completion: "prompt" a list of messages (an earlier
        # reply among them), "completion" the reply to learn. The tokens are the whole
        # conversation's; only the completion counts (TRL's completion-only loss), so the
        # reference is transformers' assistant mask less the prompt's rendering.
        with open(work("prompt_completion.jsonl"), "w") as f:
            for c in conversations:
                f.write(json.dumps({"prompt": c[:4], "completion": c[4:]}) + "\n")
        got_count, got_counted = check_against_chat_template(
            "conversational prompt-completion",
            ["--sft-jsonl", work("prompt_completion.jsonl"), "--prompt-field", "prompt",
             "--response-field", "completion"], "prompt_completion.h5", conversations,
            counted_from=[len(chat_reference.apply_chat_template(c[:4], tokenize=True))
                          for c in conversations])
        check(0 < got_counted < counted, f"prompt-completion counted {got_counted} tokens, the "
              f"whole conversations {counted}")
        print(f"ok   conversational prompt-completion: {got_count} tokens, {got_counted} counted "
              "(the completions alone), as transformers' assistant mask past the prompt")
        self.conversations = conversations

    def tool_calls(self):
        """Part 1e."""
        work, records, check_against_chat_template = (
            self.work, self.records, self.check_against_chat_template)
        # 1e. Tool calls (TRL's format): a turn that only calls tools (no content), the results
        # (one call answered, then two at once), the answer; the tools column on some lines, as
        # a JSON string on one; one line with null keys, as Arrow exports it. The calls count,
        # the results do not, as transformers' mask says.
        weather = {"type": "function", "function": {"name": "weather", "parameters": {}}}
        clock = {"type": "function", "function": {"name": "clock", "parameters": {}}}

        def calling(name, **arguments):
            return {"type": "function", "function": {"name": name, "arguments": arguments}}

        tool_chats, tool_lists = [], []
        for i in range(6):
            calls = [calling("weather", city=records[i]["question"][:12])]
            if i % 2:
                calls.append(calling("clock", zone="UTC"))
            tool_chats.append([{"role": "user", "content": records[i]["question"]},
                               {"role": "assistant", "tool_calls": calls}] +
                              [{"role": "tool", "content": f"result {k}"} for k in range(len(calls))] +
                              [{"role": "assistant", "content": records[i]["answer"]}])
            tool_lists.append([weather, clock] if i % 3 else None)
        with open(work("tool_chats.jsonl"), "w") as f:
            for i, (c, tools) in enumerate(zip(tool_chats, tool_lists)):
                line = {"messages": c}
                if i == 2:  # as Arrow exports them: every key on every message, null if unused
                    line["messages"] = [{k: m.get(k) for k in ("role", "content", "tool_calls",
                                                               "name", "tool_call_id")}
                                        for m in c]
                if tools:
                    line["tools"] = json.dumps(tools) if i == 1 else tools
                f.write(json.dumps(line) + "\n")
        count, counted = check_against_chat_template(
            "tool calls", ["--sft-jsonl", work("tool_chats.jsonl"), "--messages-field", "messages"],
            "tool_chats.h5", [[dict(m, content=m.get("content", "")) for m in c] for c in tool_chats],
            tools=tool_lists)
        print(f"ok   tool calls: {len(tool_chats)} conversations, {count} tokens, {counted} counted "
              "(the calls and the answers), as transformers' assistant mask")

    def unread_fields(self):
        """Parts 1f and 1g: the fields no option reads, Alpaca's input."""
        zt, work, python, args, reference, eos, check_against_chat_template = (
            self.zt, self.work, self.python, self.args, self.reference, self.eos,
            self.check_against_chat_template)
        # 1f. Fields no option reads (Alpaca's "input" beside its instruction) are named once a
        # file, with the first line holding each; the fields read are not named.
        with open(work("alpaca.jsonl"), "w") as f:
            f.write(json.dumps({"instruction": "Add the numbers.", "output": "4"}) + "\n")
            f.write(json.dumps({"instruction": "Add.", "input": "2 and 2", "output": "4",
                                "id": 7}) + "\n")
        out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
                        work("alpaca.jsonl"), "--prompt-field", "instruction", "--response-field",
                        "output", "--out", work("alpaca.h5")] + python)
        noted = [line for line in out.splitlines() if line.startswith("note:")]
        at = work("alpaca.jsonl") + ":2"
        check(len(noted) == 1 and f"'id' ({at}), 'input' ({at})" in noted[0] and
              "'output'" not in noted[0] and "'instruction'" not in noted[0] and
              "--prompt-field instruction,input" in noted[0],
              f"the unread fields were not named once: {noted}")
        print(f"ok   unread fields named: {noted[0]}")
        # The same records as one JSON array (Stanford Alpaca's alpaca_data.json), saved with a
        # byte-order mark: the same tokens and mask; the note names the array's elements.
        with open(work("alpaca.jsonl")) as f:
            alpaca = [json.loads(line) for line in f]
        with open(work("alpaca.json"), "w", encoding="utf-8-sig") as f:
            json.dump(alpaca, f, indent=2)
        out = run_tool([zt, "prepare-data", "--tokenizer", work("tok"), "--sft-jsonl",
                        work("alpaca.json"), "--prompt-field", "instruction", "--response-field",
                        "output", "--out", work("alpaca_array.h5")] + python)
        with h5py.File(work("alpaca.h5"), "r") as a, h5py.File(work("alpaca_array.h5"), "r") as b:
            same = all(np.array_equal(a[k][:], b[k][:]) for k in ("tokens", "loss_mask",
                                                                   "doc_starts"))
        check(same, "a JSON array of the records gives other tokens than their JSON lines")
        check(f"'input' ({work('alpaca.json')}:element 2)" in out,
              f"the note does not name the array's element: {out}")
        print("ok   a JSON array with a byte-order mark: the JSON lines' tokens and mask")
        alpaca_input(zt, work, args.source_dir, reference, eos, check_against_chat_template)

    def eval_imported(self):
        """Part 2."""
        zt, work, tok, eos, tokens, mask, zt_eval, bound, compare = (
            self.zt, self.work, self.tok, self.eos, self.tokens, self.mask, self.zt_eval,
            self.bound, self.compare)
        # 2. Eval of an imported model: transformers' own ignore_index loss.
        config = transformers.LlamaConfig(vocab_size=tok.get_vocab_size(), **SIZES,
                                          bos_token_id=tok.token_to_id("<s>"), eos_token_id=eos)
        torch.manual_seed(0)
        transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(work("hf"))
        # The reference reads the bf16 files back in fp32 (the weights zerotrain imports).
        model = transformers.AutoModelForCausalLM.from_pretrained(
            work("hf"), torch_dtype=torch.float32).eval()
        run_tool([zt, "import", work("hf"), "--out", work("model")])
        result = zt_eval(work("model"))
        n = MICRO_BATCH * BATCHES * (SEQ_LEN + 1)
        counted = int(mask[:n].reshape(-1, SEQ_LEN + 1)[:, 1:].sum())
        check(result["loss_tokens"] == counted,
              f"eval averaged over {result['loss_tokens']} targets, the mask counts {counted}")
        compare("imported, masked loss", result["loss"], hf_masked_loss(model, tokens, mask))
        unmasked = hf_masked_loss(model, tokens, mask, use_mask=False)
        check(abs(result["loss"] - unmasked) > bound(unmasked),
              f"the masked loss {result['loss']} is the unmasked one {unmasked}")

    def train_export(self):
        """Parts 3 and 3a: train, export, consolidate."""
        zt, work, args, tokens, mask, reference, zt_eval, compare = (
            self.zt, self.work, self.args, self.tokens, self.mask, self.reference, self.zt_eval,
            self.compare)
        # 3. Train at 2 ranks, ZeRO-3, export, transformers' masked loss of the export.
        run_tool([args.mpirun, "-n", "2", zt, "train", "--model", work("model"), "--data",
                  work("sft.h5"), "--out", work("run"), "--steps", "3", "--micro-batch",
                  str(MICRO_BATCH), "--seq-len", str(SEQ_LEN), "--zero-stage", "3", "--lr",
                  "1e-3", "--warmup-steps", "0", "--eval-batches", "0", "--comm-timeout", "60",
                  "--document-masking", "off", "--save-every", "3"])
        with open(work("run", "metrics.jsonl")) as f:
            steps = [json.loads(line) for line in f]
        check(all(0 < s["loss_tokens"] < s["tokens"] for s in steps),
              f"metrics loss_tokens {[s['loss_tokens'] for s in steps]} of "
              f"{[s['tokens'] for s in steps]} tokens")
        run_tool([zt, "export", work("run", "final"), "--format", "safetensors", "--out",
                  work("export")])
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(
            work("export"), torch_dtype=torch.float32).eval()
        compare("trained, masked loss", zt_eval(work("run", "final"))["loss"],
                hf_masked_loss(reloaded, tokens, mask))
        # The last checkpoint consolidated: the model of final/ with its tokenizer files, which
        # transformers loads (what --keep-best's best checkpoint becomes).
        run_tool([zt, "consolidate", work("run", "checkpoints", "step-00000003"), "--out",
                  work("consolidated")])
        for name in sorted(os.listdir(work("run", "final"))):
            if name.startswith("tokenizer") or name.endswith("_config.json"):
                with open(work("run", "final", name), "rb") as a, \
                        open(work("consolidated", name), "rb") as b:
                    check(a.read() == b.read(), f"consolidate's {name} differs from final/'s")
        check(zt_eval(work("consolidated")) == zt_eval(work("run", "final")),
              "consolidate of the last checkpoint does not evaluate as final/")
        consolidated_tok = transformers.AutoTokenizer.from_pretrained(work("consolidated"))
        check(consolidated_tok("a b")["input_ids"] == reference("a b")["input_ids"],
              "the consolidated model's tokenizer encodes otherwise than the data's")
        self.reloaded = reloaded

    def masked_steps(self):
        """Part 3b."""
        zt, work, args = self.zt, self.work, self.args
        # 3b. A step whose whole global batch is masked trains with no loss gradient, and says
        # so; the others do not warn. The mask keeps only the targets of the first 10 windows of
        # T+1 tokens (about 11 of the wrapped windows, pinned so that they are every T tokens), so
        # some of the (shuffled) steps see one and the others none.
        shutil.copy(work("sft.h5"), work("blind.h5"))
        with h5py.File(work("blind.h5"), "r+") as f:
            f["loss_mask"][10 * (SEQ_LEN + 1):] = 0
        out = run_tool([args.mpirun, "-n", "2", zt, "train", "--model", work("model"), "--data",
                        work("blind.h5"), "--out", work("blind_run"), "--steps", "6",
                        "--packing", "wrapped",
                        "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN),
                        "--zero-stage", "3", "--eval-batches", "0", "--comm-timeout", "60"])
        with open(work("blind_run", "metrics.jsonl")) as f:
            counted = [json.loads(line)["loss_tokens"] for line in f]
        check(0 in counted and any(counted), f"metrics loss_tokens {counted}: the steps should "
              "include masked and counted ones")
        for step, n in enumerate(counted, 1):
            warned = f"warning: step {step}: no target of the global batch counts" in out
            check(warned == (n == 0), f"step {step}: {n} counted targets, warned: {warned}")
        print(f"ok   steps without a counted target are trained without a loss gradient and "
              f"warned about (loss_tokens {counted})")

    def generate(self):
        """Part 5."""
        zt, work, python, records, reference, reloaded, eos, bound = (
            self.zt, self.work, self.python, self.records, self.reference, self.reloaded, self.eos,
            self.bound)
        # 5. generate on the trained model: greedy against transformers' generate(), the text
        # against its tokenizer's decode; sampling with top-k 1 is greedy again.
        prompt = records[0]["question"]
        ours = last_json_line(run_tool([zt, "generate", "--model", work("run", "final"),
                                        "--prompt", prompt, "--max-new-tokens", "12", "--json"]
                                       + python))
        ids = torch.tensor([reference(prompt)["input_ids"]])
        check(ours["prompt_tokens"] == ids[0].tolist(),
              f"generate encoded the prompt as {ours['prompt_tokens']}, transformers as "
              f"{ids[0].tolist()}")
        # Greedy decoding over transformers' forward, as generate(do_sample=False) decodes (its
        # generate() itself needs torch.distributed.fsdp, which Debian's torch 1.13 cannot import
        # under Python 3.11).
        hf_new, hf_scores, context = [], [], ids
        with torch.no_grad():
            while len(hf_new) < 12:
                scores = reloaded(input_ids=context).logits[0, -1]
                hf_scores.append(scores)
                hf_new.append(int(scores.argmax()))
                context = torch.cat([context, torch.tensor([[hf_new[-1]]])], dim=1)
                if hf_new[-1] == eos:
                    break
        for i, (a, b) in enumerate(zip(ours["new_tokens"], hf_new)):
            if a == b:
                continue
            # Only a near tie may go another way: then the contexts part and the rest is moot.
            scores = hf_scores[i].double()
            gap = abs(scores[a].item() - scores[b].item())
            check(gap <= bound(scores.abs().max().item()),
                  f"generate token {i}: zerotrain {a}, transformers {b}, logit gap {gap}")
            print(f"generate: a near tie at token {i} (gap {gap:.2e}); compared up to it")
            break
        else:
            check(len(ours["new_tokens"]) == len(hf_new),
                  f"generate: {len(ours['new_tokens'])} new tokens, transformers {len(hf_new)}")
        check(ours["text"] == reference.decode(ours["new_tokens"], skip_special_tokens=True),
              f"generate decoded {ours['text']!r}")
        top1 = last_json_line(run_tool([zt, "generate", "--model", work("run", "final"),
                                        "--prompt", prompt, "--max-new-tokens", "12", "--json",
                                        "--do-sample", "--top-k", "1", "--seed", "9"] + python))
        check(top1["new_tokens"] == ours["new_tokens"], "sampling with top-k 1 is not greedy")
        print(f"ok   generate: greedy {ours['new_tokens']} as transformers' greedy decoding, "
              f"text {ours['text']!r} as its decode")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    work = fresh_work_dir(args.work_dir)
    return exit_status(lambda: SftOracle(args, work).run())


if __name__ == "__main__":
    sys.exit(main())
