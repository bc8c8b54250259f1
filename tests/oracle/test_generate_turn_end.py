#!/usr/bin/env python3
"""`generate --chat` ends the reply where the chat template closes the assistant's turn (CTest
label "oracle", in the project venv).

A generation_config.json may name EOS alone while the template closes a turn with another token:
CodeGemma-7b-it's lists <eos> (1) and its turns end with <end_of_turn> (107), which its config
does not even mark special; Phi-3-mini's tokenizer_config.json names <|endoftext|> as EOS and its
turns end with <|end|>. A reply that ran past that token would go on to write the next user turn.

Every published tests/data/hf_models/*/tokenizer_config.json (sources in SOURCES.md) is used as
test_tokenizer_configs.py uses it (its tokenizer.json made there), with the generation_config.json
published beside it where there is one (CodeGemma's, Llama 3.1's, Qwen3's); else transformers'
save_pretrained writes one from the model config, whose EOS is the tokenizer's. The model is a
transformers LlamaForCausalLM built so that greedy decoding follows a chain that depends on the
last token alone: after any token "O", after "O" "K", after "K" the token that closes the turn,
read off each template by hand (test_tokenizer_configs.TURN_CLOSING), then "O" again.

1. `generate --chat MESSAGE --json`: the prompt ids are apply_chat_template's (with the generation
   prompt); the new ids are greedy decoding over transformers' forward stopped at the first id of
   the generation config's EOS ids and the turn's closing token: "O", "K", the closing token;
   finish_reason "stop"; the text "OK", without the closing token (CodeGemma's would be printed
   by a decode that keeps non-special tokens).
2. With --ignore-eos (CodeGemma), all --max-new-tokens ids, past the closing token, as
   transformers' greedy decoding without a stop; finish_reason "length".
3. `--prompt` continues a text, not a turn: it stops at the EOS ids alone, as transformers'
   generate() does (CodeGemma and Phi-3, whose closing token is not EOS, run to the length).
4. A chat template that raises on an assistant turn (--chat-template-file, CodeGemma): the reply
   stops at the EOS ids alone, and a warning names the template's error.

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (argument_parser, check, exit_status, fresh_work_dir,  # noqa: E402
                            last_json_line, require_venv_modules, run_tool)
from test_tokenizer_configs import (LEGACY_SOURCE, TURN_CLOSING,  # noqa: E402
                                    copy_tokenizer_files, published_configs, reference_tokenizer,
                                    tokenizer_json)

torch, transformers = require_venv_modules("torch", "transformers")

MESSAGE = "Is the answer ready?"
REPLY = ["O", "K"]  # byte symbols: one token each in every tokenizer made here
MAX_NEW = 8
# Where the closing token is not EOS, a --prompt continuation must run past it (step 3).
PROMPT_CHECKED = ("resaved-unsloth--google--codegemma-7b-it", "microsoft--Phi-3-mini-4k-instruct")


def chain_model(directory, vocab_size, chain, eos):
    """A LlamaForCausalLM whose greedy choice depends on the last token alone: chain[i + 1] after
    chain[i] (i = 0, 1), chain[0] after any other token. Its layers add nothing to the residual
    stream (o_proj and down_proj are zero), so the last position's final hidden state is its
    token's embedding normalized: one of three unit vectors (the token's class) scaled by
    sqrt(hidden); lm_head maps each class to its successor."""
    config = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=8, intermediate_size=16,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=2, max_position_embeddings=4096,
                                      tie_word_embeddings=False, eos_token_id=eos)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embedding, head = model.model.embed_tokens.weight, model.lm_head.weight
        embedding.zero_()
        embedding[:, 0] = 1
        head.zero_()
        for token_class, token in enumerate(chain):  # class i is followed by chain[i]
            head[token, token_class] = 4
            if token_class < 2:  # chain[i] is in class i + 1; chain[2] in class 0
                embedding[token, 0] = 0
                embedding[token, token_class + 1] = 1
    model.save_pretrained(directory)
    return model


def greedy(model, ids, stops):
    """Greedy decoding over transformers' forward (the whole sequence each step; its generate()
    needs torch.distributed.fsdp, which Debian's torch cannot import), to a stop id or MAX_NEW."""
    new = []
    with torch.no_grad():
        while len(new) < MAX_NEW:
            logits = model(torch.tensor([ids + new])).logits[0, -1]
            new.append(int(logits.argmax()))
            if new[-1] in stops:
                break
    return new


def generated(zt, model_dir, extra):
    answer = last_json_line(run_tool([zt, "generate", "--model", model_dir, "--max-new-tokens",
                                      str(MAX_NEW), "--json"] + extra))
    return answer["prompt_tokens"], answer["new_tokens"], answer["text"], answer["finish_reason"]


def check_one(work, zt, source):
    name = os.path.basename(os.path.dirname(source))
    hf_dir, model_dir = work(name, "hf"), work(name, "model")
    os.makedirs(hf_dir)
    copy_tokenizer_files(source, hf_dir)
    config = json.load(open(source, encoding="utf-8"))
    tokenizer_json(config).save(os.path.join(hf_dir, "tokenizer.json"))
    tok = reference_tokenizer(hf_dir)
    closing_text = TURN_CLOSING.get(name, TURN_CLOSING[LEGACY_SOURCE]).strip()
    closing = tok.convert_tokens_to_ids(closing_text)
    chain = [tok.convert_tokens_to_ids(s) for s in REPLY] + [closing]
    check(len(set(chain)) == 3 and tok.unk_token_id not in chain,
          f"{name}: the chain {chain} is not three tokens of the vocabulary")
    model = chain_model(hf_dir, len(tok), chain, tok.eos_token_id)
    published = os.path.join(os.path.dirname(source), "generation_config.json")
    if os.path.exists(published):
        shutil.copy(published, os.path.join(hf_dir, "generation_config.json"))
    eos = transformers.GenerationConfig.from_pretrained(hf_dir).eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    run_tool([zt, "import", hf_dir, "--out", model_dir])

    # 1. A chat reply ends at the closing token.
    prompt, new, text, reason = generated(zt, model_dir, ["--chat", MESSAGE])
    want_prompt = tok.apply_chat_template([{"role": "user", "content": MESSAGE}],
                                          add_generation_prompt=True)
    check(prompt == want_prompt, f"{name}: the prompt ids differ from apply_chat_template's")
    want = greedy(model, want_prompt, eos | {closing})
    check(want == chain, f"{name}: the built model's greedy reply is {want}, not {chain}")
    check(new == want and reason == "stop",
          f"{name}: generate --chat wrote {new} ({reason}), transformers' greedy decoding "
          f"stopped at EOS {sorted(eos)} or the turn's closing {closing_text} ({closing}) {want}")
    check(text == "".join(REPLY), f"{name}: generate --chat printed {text!r}, not the reply "
          f"{''.join(REPLY)!r} without {closing_text}")
    print(f"ok   {name}: generate --chat stops at {closing_text} ({closing}; EOS "
          f"{sorted(eos)}), prints {text!r}")
    if name not in PROMPT_CHECKED:
        return
    check(closing not in eos, f"{name}: the closing token {closing_text} is EOS here")

    # 2. --ignore-eos: no stop.
    _, new, _, reason = generated(zt, model_dir, ["--chat", MESSAGE, "--ignore-eos"])
    want = greedy(model, want_prompt, set())
    check(new == want and len(new) == MAX_NEW and reason == "length",
          f"{name}: generate --chat --ignore-eos wrote {new} ({reason}), not {want}")
    # 3. A text continuation stops at EOS alone.
    prompt, new, _, reason = generated(zt, model_dir, ["--prompt", MESSAGE])
    check(prompt == tok(MESSAGE)["input_ids"], f"{name}: --prompt encoded {prompt}")
    want = greedy(model, prompt, eos)
    check(closing in new and new == want and reason == "length",
          f"{name}: generate --prompt wrote {new} ({reason}), not transformers' greedy "
          f"{want} stopped at EOS {sorted(eos)} alone")
    print(f"ok   {name}: --ignore-eos and --prompt run past {closing_text} to {MAX_NEW} tokens")
    # 4. A template that cannot render a closed assistant turn has no closing token to read.
    template = work(name, "no-replies.jinja")
    with open(template, "w", encoding="utf-8") as f:
        f.write("{% for m in messages %}{% if m['role'] == 'assistant' %}"
                "{{ raise_exception('no replies here') }}{% endif %}"
                "<<{{ m['role'] }}>>{{ m['content'] }}\n{% endfor %}"
                "{% if add_generation_prompt %}<<assistant>>{% endif %}")
    out = run_tool([zt, "generate", "--model", model_dir, "--max-new-tokens", str(MAX_NEW),
                    "--json", "--chat", MESSAGE, "--chat-template-file", template])
    answer = last_json_line(out)
    want = greedy(model, answer["prompt_tokens"], eos)
    check(answer["new_tokens"] == want and answer["finish_reason"] == "length",
          f"{name}: with a template that raises on a reply, generate wrote "
          f"{answer['new_tokens']} ({answer['finish_reason']}), not {want}")
    check("the chat template raised rendering a closed assistant turn" in out and
          "no replies here" in out, f"{name}: no warning naming the template's error: {out}")
    print(f"ok   {name}: a template that raises on a reply: EOS alone, the error named")


def check_all(work, zt, source_dir):
    configs = published_configs(source_dir)
    check(all(any(f"/{n}/" in c for c in configs) for n in PROMPT_CHECKED),
          f"{PROMPT_CHECKED} are not all under tests/data/hf_models")
    for source in configs:
        check_one(work, zt, source)


def main():
    args = argument_parser(__doc__.split("\n")[0]).parse_args()
    transformers.logging.set_verbosity_error()
    return exit_status(lambda: check_all(fresh_work_dir(args.work_dir), args.zerotrain,
                                         args.source_dir))


if __name__ == "__main__":
    sys.exit(main())
