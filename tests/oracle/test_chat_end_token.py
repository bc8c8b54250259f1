#!/usr/bin/env python3
"""The token chat SFT appends after a reply the chat template leaves unclosed
(`prepare-data --chat-end-token`), against transformers' apply_chat_template and assistant mask
(label oracle).

GLM-4-0414's template (tests/data/chat_templates, as Xinference copied it) writes nothing after a
reply: a turn ends where the next one opens. oracle_chat_templates checks the default (auto: the
tokenizer's EOS appended after the last reply and counted, as LLaMA-Factory's efficient_eos
appends it). Here, through the same tokenizer (a byte-level BPE holding GLM's special tokens,
test_chat_templates.tokenizer_dir) and the same marked copy of the template:
- `off`: the ids are apply_chat_template's and the mask the marked copy's, with a note that no
  counted token teaches the model to stop;
- `<|user|>` (the token THUDM's fine-tuning script and LLaMA-Factory's glm4 stop words name): the
  ids are apply_chat_template's and that token's id, counted;
- a tokenizer that names no eos_token, under auto: nothing appended, and a note that says why;
- a conversation whose last reply has OpenAI's weight 0: nothing appended (it is not learned);
- a prompt/response line rendered by the template: its EOS appended and counted;
- an Alpaca-style template, written here, that closes a reply with a blank line alone (no EOS):
  the EOS follows the last reply's blank line, counted; the earlier reply counts its text and its
  blank line;
- refused, leaving no data: a token the vocabulary does not hold, a token named for a template
  that closes its replies (Granite 3.3's), an empty value, and the option without a chat template.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            require_venv_modules, run_tool)
from test_chat_templates import (ASSISTANT, TEMPLATES, conversations, marked,  # noqa: E402
                                 tokenizer_dir)
from test_hf_tokenizer import refused  # noqa: E402
from test_tokenizer_configs import counted_runs  # noqa: E402

h5py, transformers = require_venv_modules("h5py", "transformers")

GLM = "THUDM-GLM-4-0414"
# An Alpaca-style template whose replies close with a blank line and no EOS.
ALPACA = ("{% for m in messages %}{% if m['role'] == 'user' %}"
          "{{ '### Instruction:\\n' + m['content'] + '\\n\\n### Response:\\n' }}"
          "{% elif m['role'] == 'assistant' %}{{ m['content'] + '\\n\\n' }}{% endif %}"
          "{% endfor %}")


def prepare(zt, tokenizer, path, record, *extra, field="messages"):
    """(ids, mask, output) of prepare-data --chat-template on a file holding `record`."""
    with open(path, "w") as f:
        f.write(json.dumps(record) + "\n")
    fields = ["--messages-field", field] if field else []
    output = run_tool([zt, "prepare-data", "--tokenizer", tokenizer, "--sft-jsonl", path,
                       *fields, "--chat-template", "--out", path + ".h5",
                       "--python", sys.executable, *extra])
    with h5py.File(path + ".h5", "r") as f:
        return f["tokens"][:].tolist(), f["loss_mask"][:].tolist(), output


def glm_tokenizers(work, source_dir):
    """(the GLM tokenizer directory, the same without an eos_token, the marked copy as
    transformers loads it)."""
    bos, eos, specials, _, marks = TEMPLATES[GLM]
    with open(os.path.join(source_dir, "tests/data/chat_templates", GLM + ".jinja"),
              encoding="utf-8") as f:
        template = f.read()
    directory = tokenizer_dir(work(GLM), template, bos, eos, specials)
    no_eos = tokenizer_dir(work(GLM + "-no-eos"), template, bos, None, specials)
    marked_tok = transformers.AutoTokenizer.from_pretrained(
        tokenizer_dir(work(GLM + "-marked"), marked(template, marks, GLM), bos, eos, specials))
    return directory, no_eos, marked_tok


def check_glm(work, zt, source_dir):
    directory, no_eos, marked_tok = glm_tokenizers(work, source_dir)
    record = conversations("system")[0]
    rendered = marked_tok.apply_chat_template(record["messages"], tokenize=True,
                                              return_dict=True, return_assistant_tokens_mask=True)
    want, want_mask = rendered["input_ids"], rendered["assistant_masks"]
    user_id = marked_tok.convert_tokens_to_ids("<|user|>")
    for name, tokenizer, extra, end, note in (
            ("off", directory, ["--chat-end-token", "off"], [], "as --chat-end-token off"),
            ("<|user|>", directory, ["--chat-end-token", "<|user|>"], [user_id],
             "'<|user|>' is appended after each conversation's last reply and counted"),
            ("auto without an eos_token", no_eos, [], [], "the tokenizer names no eos_token")):
        ids, mask, output = prepare(zt, tokenizer, work(f"glm-{len(end)}{len(extra)}.jsonl"),
                                    record, *extra)
        check(ids == want + end, f"GLM, {name}: the ids are not apply_chat_template's"
              + (f" and {end}" if end else ""))
        check(mask == want_mask + [1] * len(end), f"GLM, {name}: the counted runs are "
              f"{[marked_tok.decode(r) for r in counted_runs(ids, mask)]}")
        check(note in output, f"GLM, {name}: the note does not say {note!r}")
        print(f"ok   GLM, {name}: apply_chat_template's ids{' and ' + str(end) if end else ''}, "
              "the marked copy's mask" + (" and the appended token counted" if end else ""))

    unweighted = json.loads(json.dumps(record))
    unweighted["messages"][-1]["weight"] = 0
    ids, mask, _ = prepare(zt, directory, work("glm-weight0.jsonl"), unweighted)
    check(ids == want and mask[-1] == 0,
          "GLM: an EOS follows a last reply of weight 0, which is not learned")
    print("ok   GLM: nothing follows a last reply of weight 0")

    pair = {"prompt": "Name three primes.", "response": ASSISTANT[0]}
    ids, mask, _ = prepare(zt, directory, work("glm-pair.jsonl"), pair, field=None)
    messages = [{"role": "user", "content": pair["prompt"]},
                {"role": "assistant", "content": pair["response"]}]
    rendered = marked_tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask=True)
    check(ids == rendered["input_ids"] + [marked_tok.eos_token_id] and
          mask == rendered["assistant_masks"] + [1],
          "GLM: a prompt/response line does not end with its counted EOS")
    print("ok   GLM: a prompt/response line ends with the EOS, counted")
    return directory


def check_alpaca(work, zt):
    directory = tokenizer_dir(work("alpaca"), ALPACA, None, "</s>", ["</s>"])
    reference = transformers.AutoTokenizer.from_pretrained(directory)
    record = conversations("rounds")[0]
    ids, mask, output = prepare(zt, directory, work("alpaca.jsonl"), record)
    want = reference.apply_chat_template(record["messages"], tokenize=True)
    check(ids == want + [reference.eos_token_id],
          "Alpaca: the ids are not apply_chat_template's and the EOS")
    runs = [reference.decode(r) for r in counted_runs(ids, mask)]
    check(runs == [ASSISTANT[0] + "\n\n", ASSISTANT[1] + "\n\n</s>"],
          f"Alpaca: the counted runs are {runs}")
    check("writes nothing but whitespace after" in output, "Alpaca: no note on the blank line")
    print(f"ok   Alpaca-style, a blank line after each reply: counted {runs}")


def check_refusals(work, zt, source_dir, glm_dir):
    path = work("glm-bad.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps(conversations("rounds")[0]) + "\n")
    base = [zt, "prepare-data", "--sft-jsonl", path, "--messages-field", "messages",
            "--out", work("bad.h5"), "--python", sys.executable]
    granite = "ibm-granite-granite-3.3-instruct-2504"
    bos, eos, specials, _, _ = TEMPLATES[granite]
    with open(os.path.join(source_dir, "tests/data/chat_templates", granite + ".jinja"),
              encoding="utf-8") as f:
        granite_dir = tokenizer_dir(work(granite), f.read(), bos, eos, specials)
    for tokenizer, extra, named in (
            (glm_dir, ["--chat-template", "--chat-end-token", "<|nope|>"],
             ["--chat-end-token '<|nope|>' is not a token of"]),
            (granite_dir, ["--chat-template", "--chat-end-token", "<|end_of_text|>"],
             ["--chat-end-token '<|end_of_text|>': the chat template closes a reply with "
              "'<|end_of_text|>\\n'"]),
            (glm_dir, ["--chat-template", "--chat-end-token", ""],
             ["--chat-end-token must be auto, off or a token"]),
            (glm_dir, ["--chat-end-token", "off"],
             ["--chat-end-token needs --sft-jsonl and --chat-template"])):
        refused(base + ["--tokenizer", tokenizer] + extra, named, work("bad.h5"))
    print("ok   refused, no data left: a token not in the vocabulary, a token for a template "
          "that closes its replies, an empty value, the option without a chat template")


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    work = fresh_work_dir(args.work_dir)

    def checks():
        glm_dir = check_glm(work, args.zerotrain, args.source_dir)
        check_alpaca(work, args.zerotrain)
        check_refusals(work, args.zerotrain, args.source_dir, glm_dir)

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
