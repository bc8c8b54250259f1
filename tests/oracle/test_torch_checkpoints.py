#!/usr/bin/env python3
"""PyTorch checkpoints (pytorch_model.bin, adapter_model.bin) read without running their pickle
(CTest label "oracle", in the project venv).

1. transformers' save_pretrained(safe_serialization=False) of a small Llama, as one
   pytorch_model.bin (float32) and as shards under pytorch_model.bin.index.json (bf16): `import`
   gives every tensor as torch.load(weights_only=True) reads it, rounded to bf16, and the same
   HDF5 bytes as the import of the model's safetensors; `info` lists the PyTorch directory and
   one .bin file, and `info --verify` gives the bf16 shards the digests of their import.
2. Module.state_dict() (with the _metadata attribute torch pickles beside its items) as torch.save
   wrote it, with the layouts a state dict may hold: q, k and v as row views
   of one fused storage (storage offsets), gate_proj transposed in place (strides), the final
   norm expanded from one element (stride 0), a layer norm as every 2^17th element of a 32 MiB
   storage (a sparse view), up_proj in fp16, an nn.Parameter, RoPE's inv_freq
   buffer; and the same file repacked as ZIP64 (every size and offset in the extra field, as
   torch's writer does past 4 GiB, and 65,536 extra entries, past the classic directory's
   count), and in PyTorch 2's layout (archive/, a byteorder record): `import` reads each tensor
   as torch does.
3. PEFT's save_pretrained(safe_serialization=False), adapter_model.bin: `eval --adapter`,
   `export --merge-lora` and `train --lora-init-from` give what the adapter_model.safetensors of
   the same adapter gives, bit for bit.
4. Files that must be refused, naming the file, leaving no output: a pickle that calls
   os.system (the marker file it would write stays absent), the format before PyTorch 1.6,
   compressed entries, a truncated file, a storage shorter than its tensor, a view past its
   storage, a training checkpoint (a dict of dicts), a TorchScript archive, a big-endian file, a
   safetensors file under the .bin name. data.pkl cut short at every 64th byte (the unit test
   TorchPickle.EveryTruncationIsAnErrorNamingTheFile cuts its pickles at every byte) or with one
   byte changed (120 ways): `info` reads it or refuses it (exit 1 with an error), never crashes.

--mutation strides: the reference transposes gate_proj back before comparing, so the strided
tensor's check must fail (with --expect-mismatch, only it).

Exit status: 0 all checks passed, 1 a check failed, 2 the test could not run.
"""

import collections
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle_harness import (check, exit_status, last_json_line,  # noqa: E402
                            mutation_oracle_arguments, refused, run_tool)

torch = transformers = None
CONFIG = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def model_dir_bits(model_dir):
    """Every tensor of a zerotrain model directory, its bf16 values widened to float32."""
    from llama_reference import load_weights
    return load_weights(model_dir, torch.float32)


def bf16_bits(t):
    """torch's rounding of `t` to bf16, widened back to float32."""
    return t.detach().to(torch.bfloat16).float()


def import_model(zt, hf_dir, out):
    return run_tool([zt, "import", hf_dir, "--out", out])


def check_imported(zt, hf_dir, out, want, what):
    """`import` of hf_dir gives the tensors `want` (name -> torch tensor) rounded to bf16."""
    import_model(zt, hf_dir, out)
    got = model_dir_bits(out)
    check(set(got) == set(want) - {"model.layers.0.self_attn.rotary_emb.inv_freq"},
          f"{what}: imported tensors {sorted(set(got) ^ set(want))} differ from the file's")
    for name, bits in got.items():
        check(torch.equal(bits, bf16_bits(want[name]).reshape(bits.shape)),
              f"{what}: tensor {name} is not torch's value rounded to bf16")
    print(f"ok   {what}: {len(got)} tensors, each torch.load's rounded to bf16")
    return got


def check_transformers_files(zt, work):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    model.save_pretrained(work("single"), safe_serialization=False)
    model.to(torch.bfloat16).save_pretrained(work("sharded"), safe_serialization=False,
                                             max_shard_size="100KB")
    model.save_pretrained(work("safetensors"))
    check(os.path.exists(work("sharded", "pytorch_model.bin.index.json")),
          "transformers wrote no sharded checkpoint")
    single = torch.load(work("single", "pytorch_model.bin"), weights_only=True)
    check_imported(zt, work("single"), work("single_imported"), single,
                   "transformers' pytorch_model.bin (float32)")
    index = json.load(open(work("sharded", "pytorch_model.bin.index.json")))["weight_map"]
    sharded = {}
    for shard in sorted(set(index.values())):
        sharded.update(torch.load(work("sharded", shard), weights_only=True))
    got = check_imported(zt, work("sharded"), work("sharded_imported"), sharded,
                         f"transformers' {len(set(index.values()))} pytorch_model shards (bf16)")
    digests = [{t["name"]: t["values_sha256"] for t in
                json.loads(run_tool([zt, "info", d, "--verify", "--json"]))["tensors"]}
               for d in (work("sharded"), work("sharded_imported"))]
    check(digests[0] == digests[1] and len(digests[1]) == len(got),
          "info --verify: the bf16 shards' digests are not their import's")
    import_model(zt, work("safetensors"), work("safetensors_imported"))
    same = model_dir_bits(work("safetensors_imported"))
    check(all(torch.equal(same[n], got[n]) for n in got), "the .bin and safetensors imports differ")
    info = json.loads(run_tool([zt, "info", work("sharded"), "--json"]))
    check(info["kind"] == "pytorch" and len(info["tensors"]) == len(index),
          f"info of the sharded PyTorch directory: {info['kind']}, {len(info['tensors'])} tensors")
    one = json.loads(run_tool([zt, "info", work("single", "pytorch_model.bin"), "--json"]))
    check(one["kind"] == "pytorch" and len(one["tensors"]) == len(single)
          and {t["dtype"] for t in one["tensors"]} == {"F32"},
          f"info of one pytorch_model.bin: {one['kind']}, {len(one['tensors'])} tensors")
    print("ok   the sharded .bin import is the safetensors import's bytes; info lists the "
          "directory and one file")


def strided_state_dict():
    """A Llama state dict whose tensors are views torch.save keeps as views."""
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    sd = model.state_dict()  # torch.save(model.state_dict()): its _metadata pickled beside
    check(hasattr(sd, "_metadata"), "Module.state_dict() carries no _metadata")
    for layer in range(CONFIG["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        q, k, v = (sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv")
        fused = torch.cat([q, k, v])
        sd[p + "self_attn.q_proj.weight"] = fused[:q.shape[0]]
        sd[p + "self_attn.k_proj.weight"] = fused[q.shape[0]:q.shape[0] + k.shape[0]]
        sd[p + "self_attn.v_proj.weight"] = fused[q.shape[0] + k.shape[0]:]
        sd[p + "mlp.gate_proj.weight"] = sd[p + "mlp.gate_proj.weight"].t().contiguous().t()
        sd[p + "mlp.up_proj.weight"] = sd[p + "mlp.up_proj.weight"].half()
    sd["model.norm.weight"] = torch.full((1,), 0.75).expand(CONFIG["hidden_size"])
    # A sparse view: every 2^17th element of a 32 MiB storage (read element by element).
    sparse = torch.zeros(CONFIG["hidden_size"] << 17)
    sparse[::1 << 17] = 0.5 + torch.arange(CONFIG["hidden_size"]) / CONFIG["hidden_size"]
    sd["model.layers.0.input_layernorm.weight"] = sparse[::1 << 17]
    sd["lm_head.weight"] = torch.nn.Parameter(sd["lm_head.weight"])
    sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    check(not sd["model.layers.0.mlp.gate_proj.weight"].is_contiguous()
          and sd["model.layers.0.self_attn.k_proj.weight"].storage_offset() > 0
          and sd["model.layers.0.input_layernorm.weight"].stride() == (1 << 17,),
          "the strided state dict holds no strided views")
    return sd


def write_zip64(source, target, extra_entries=0):
    """The entries of `source` stored again, each central header's sizes and offset in a ZIP64
    extra field and the directory's end in ZIP64 records; `extra_entries` empty files added."""
    with zipfile.ZipFile(source) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    entries += [(f"padding/{i}", b"") for i in range(extra_entries)]
    out, central = io.BytesIO(), io.BytesIO()
    for name, data in entries:
        offset, raw = out.tell(), name.encode()
        crc = zipfile.crc32(data)
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034b50, 45, 0, 0, 0, 0, crc, len(data),
                              len(data), len(raw), 0) + raw + data)
        extra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), offset)
        central.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, 0, 0, 0, crc,
                                  0xffffffff, 0xffffffff, len(raw), len(extra), 0, 0, 0, 0,
                                  0xffffffff) + raw + extra)
    start, directory = out.tell(), central.getvalue()
    out.write(directory)
    record = out.tell()
    out.write(struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, len(entries),
                          len(entries), len(directory), start))
    out.write(struct.pack("<IIQI", 0x07064b50, 0, record, 1))
    out.write(struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xffff, 0xffff, 0xffffffff,
                          0xffffffff, 0))
    with open(target, "wb") as f:
        f.write(out.getvalue())


class AttributePickle:
    """A pickle module for torch.save whose Pickler writes ATTRIBUTED's tensor as PyTorch 2 writes
    a tensor that carries Python attributes: _rebuild_from_type_v2(_rebuild_tensor_v2,
    torch.Tensor, args, {attribute: value}) (PyTorch 1.13 drops the attributes)."""
    import pickle
    ATTRIBUTED = "model.layers.1.mlp.down_proj.weight"
    tensors = set()

    class Pickler(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, torch.Tensor) and id(obj) in AttributePickle.tensors:
                func, args = obj._reduce_ex_internal(2)
                return (torch._tensor._rebuild_from_type_v2,
                        (func, torch.Tensor, args, {"_is_hf_initialized": True}))
            return NotImplemented


def check_strided_views(zt, work, mutation):
    sd = strided_state_dict()
    shutil.copytree(work("single"), work("strided"), ignore=shutil.ignore_patterns("*.bin"))
    AttributePickle.tensors = {id(sd[AttributePickle.ATTRIBUTED])}
    torch.save(sd, work("strided", "pytorch_model.bin"), pickle_module=AttributePickle)
    with zipfile.ZipFile(work("strided", "pytorch_model.bin")) as z:
        check(b"_rebuild_from_type_v2" in z.read("pytorch_model/data.pkl"),
              "the attributed tensor is not pickled as PyTorch 2 pickles it")
    want = dict(sd)
    if mutation == "strides":
        for layer in range(CONFIG["num_hidden_layers"]):
            name = f"model.layers.{layer}.mlp.gate_proj.weight"
            want[name] = want[name].t()
    check_imported(zt, work("strided"), work("strided_imported"), want,
                   "torch.save's views (storage offsets, strides, stride 0, fp16, a Parameter, "
                   "a tensor with attributes)")
    shutil.copytree(work("single"), work("zip64"), ignore=shutil.ignore_patterns("*.bin"))
    write_zip64(work("strided", "pytorch_model.bin"), work("zip64", "pytorch_model.bin"),
                extra_entries=65536)
    check_imported(zt, work("zip64"), work("zip64_imported"), want,
                   "the same file repacked as ZIP64 with 65,536 more entries")
    # PyTorch 2's layout: the folder "archive/", a byteorder record and a serialization id.
    shutil.copytree(work("single"), work("torch2"), ignore=shutil.ignore_patterns("*.bin"))
    with zipfile.ZipFile(work("strided", "pytorch_model.bin")) as z:
        entries = [("archive/" + i.filename.split("/", 1)[1], z.read(i.filename))
                   for i in z.infolist()]
    with zipfile.ZipFile(work("torch2", "pytorch_model.bin"), "w") as z:
        for name, data in entries + [("archive/byteorder", b"little"),
                                     ("archive/.data/serialization_id", b"0123456789")]:
            z.writestr(name, data)
    check_imported(zt, work("torch2"), work("torch2_imported"), want,
                   "the same in PyTorch 2's layout (archive/, byteorder \"little\")")


def check_peft_bin(zt, work):
    """adapter_model.bin and adapter_model.safetensors of one PEFT adapter act alike."""
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(2)
    base = transformers.LlamaForCausalLM.from_pretrained(work("safetensors"))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            modules_to_save=["lm_head"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.05)
    model.save_pretrained(work("adapter_st"))
    model.save_pretrained(work("adapter_bin"), safe_serialization=False)
    check(os.path.exists(work("adapter_bin", "adapter_model.bin"))
          and not os.path.exists(work("adapter_bin", "adapter_model.safetensors")),
          "PEFT wrote no adapter_model.bin alone")
    with open(work("text.txt"), "w") as f:
        f.write("A few words to score, again and again. " * 40)
    run_tool([zt, "prepare-data", "--text", work("text.txt"), "--out", work("tok.h5")])
    model_dir = work("safetensors_imported")
    evaluate = [zt, "eval", "--model", model_dir, "--data", work("tok.h5"), "--seq-len", "32",
                "--batches", "2", "--micro-batch", "2", "--adapter"]
    losses = [last_json_line(run_tool(evaluate + [work(d)]))["loss"]
              for d in ("adapter_st", "adapter_bin")]
    check(losses[0] == losses[1], f"eval --adapter: safetensors {losses[0]}, .bin {losses[1]}")
    merged = []
    for d in ("adapter_st", "adapter_bin"):
        run_tool([zt, "export", model_dir, "--merge-lora", work(d), "--out", work(d + "_merged")])
        with open(work(d + "_merged", "model.safetensors"), "rb") as f:
            merged.append(f.read())
    check(merged[0] == merged[1],
          "export --merge-lora of the .bin adapter differs from the safetensors one's")
    first = []
    for d in ("adapter_st", "adapter_bin"):
        run_tool([zt, "train", "--model", model_dir, "--data", work("tok.h5"), "--out",
                  work(d + "_run"), "--steps", "1", "--seq-len", "32", "--micro-batch", "2",
                  "--lora-init-from", work(d)])
        with open(work(d + "_run", "metrics.jsonl")) as f:
            first.append(json.loads(f.readline())["loss"])
    check(first[0] == first[1], f"train --lora-init-from: first loss {first[0]} vs {first[1]}")
    info = json.loads(run_tool([zt, "info", work("adapter_bin"), "--json"]))
    check(info["kind"] == "peft_adapter" and info["r"] == 4, f"info of the .bin adapter: {info}")
    print(f"ok   PEFT's adapter_model.bin: eval --adapter {losses[1]:.7f}, the merge and the "
          "first training loss as its safetensors copy's, bit for bit")


def repack(source, target, change=lambda name, data: data, add=(), compression=zipfile.ZIP_STORED):
    """`source`'s entries written again, each through change(name, bytes), and `add`'s."""
    with zipfile.ZipFile(source) as z:
        entries = [(i.filename, change(i.filename, z.read(i.filename))) for i in z.infolist()]
    with zipfile.ZipFile(target, "w", compression) as z:
        for name, data in list(entries) + list(add):
            z.writestr(name, data)


def fabricated(target, numel, size):
    """A zip holding a state dict of one float32 tensor `size` (row-major) over a storage of
    `numel`, as torch.save's pickle would be for a tensor outside its storage, or of too many
    dimensions."""
    import pickle

    class Storage:
        pass

    class Tensor:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2,
                    (Storage(), 0, size, tuple(int(torch.tensor(size[d + 1:]).prod())
                                               for d in range(len(size))),
                     False, collections.OrderedDict()))

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                return ("storage", torch.FloatStorage, "0", "cpu", numel)
            return None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({"model.norm.weight": Tensor()})
    with zipfile.ZipFile(target, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/data/0", b"\0" * (4 * numel))


class Marker:
    """What a hostile pickle holds: unpickling it runs `touch PATH`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, ("touch " + self.path,))


def bad_files(work, sd):
    """(case, how to write the bad pytorch_model.bin at `path`, what the refusal names)."""
    good = work("single", "pytorch_model.bin")
    prefix = "pytorch_model/"
    return [
        ("os_system", lambda p: torch.save({"lm_head.weight": Marker(work("marker"))}, p),
         "the pickle names 'posix.system'"),
        ("legacy", lambda p: torch.save(sd, p, _use_new_zipfile_serialization=False),
         "the format before PyTorch 1.6"),
        ("compressed", lambda p: repack(good, p, compression=zipfile.ZIP_DEFLATED),
         "is compressed"),
        ("truncated", lambda p: open(p, "wb").write(open(good, "rb").read()[:50000]),
         "pytorch_model.bin"),
        ("short_storage", lambda p: repack(
            good, p, lambda n, d: d[:len(d) // 2] if n == prefix + "data/0" else d),
         "fewer than"),
        ("view_past_storage", lambda p: fabricated(p, 4, (1, 64)),
         "tensor 'model.norm.weight' reaches element 63 of storage '0', which holds 4"),
        ("seventeen_dims", lambda p: fabricated(p, 1, (1,) * 17),
         "a tensor has 17 dimensions, more than 16"),
        ("complex", lambda p: torch.save({"lm_head.weight": torch.zeros(2, dtype=torch.cfloat)},
                                         p),
         "a tensor is stored as 'torch.ComplexFloatStorage', a type zerotrain does not read"),
        ("training_checkpoint", lambda p: torch.save({"model": sd, "step": 3}, p),
         "'model' is not a tensor but a dict (a training checkpoint?"),
        ("torchscript", lambda p: torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), p),
         "TorchScript archive"),
        ("big_endian", lambda p: repack(good, p, add=[(prefix + "byteorder", b"big")]),
         "big-endian"),
        ("safetensors_renamed", lambda p: shutil.copy(work("safetensors", "model.safetensors"),
                                                      p),
         "is not a PyTorch checkpoint"),
    ]


def check_refusals(zt, work):
    sd = torch.load(work("single", "pytorch_model.bin"), weights_only=True)
    for case, write, says in bad_files(work, sd):
        shutil.copytree(work("single"), work(case), ignore=shutil.ignore_patterns("*.bin"))
        write(work(case, "pytorch_model.bin"))
        out = work(case + "_imported")
        refused([zt, "import", work(case), "--out", out], says)
        check(not os.path.exists(out), f"{case}: a refused import left {out}")
        print(f"ok   {case}: refused, saying {says!r}")
    check(not os.path.exists(work("marker")), "the hostile pickle ran os.system")
    # The control: torch itself runs that pickle when allowed to.
    torch.load(work("os_system", "pytorch_model.bin"))
    check(os.path.exists(work("marker")), "torch.load did not run the hostile pickle")
    print("ok   the hostile pickle, which torch.load runs, ran nothing in zerotrain")


def check_fuzzed_pickles(zt, work):
    """data.pkl of transformers' file cut short at every 64th byte, and with 120 bytes changed one
    at a time: `info` reads each or refuses it with an error (exit 1), never crashing."""
    import random
    good = work("single", "pytorch_model.bin")
    with zipfile.ZipFile(good) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        pickle_bytes = z.read(name)
    rng = random.Random(5)
    variants = [pickle_bytes[:n] for n in range(0, len(pickle_bytes), 64)]
    for _ in range(120):
        at = rng.randrange(len(pickle_bytes))
        variants.append(pickle_bytes[:at] + bytes([rng.randrange(256)]) + pickle_bytes[at + 1:])
    shutil.copytree(work("single"), work("fuzzed"), ignore=shutil.ignore_patterns("*.bin"))
    outcomes = collections.Counter()
    for i, variant in enumerate(variants):
        repack(good, work("fuzzed", "pytorch_model.bin"),
               lambda n, d: variant if n == name else d)
        proc = subprocess.run([zt, "info", work("fuzzed"), "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60,
                              errors="replace")
        check(proc.returncode in (0, 1) and ("error:" in proc.stdout) == (proc.returncode == 1),
              f"fuzzed data.pkl {i}: exit {proc.returncode}: {proc.stdout[-400:]}")
        outcomes[proc.returncode] += 1
    print(f"ok   {len(variants)} damaged pickles: {outcomes[1]} refused with an error, "
          f"{outcomes[0]} still a readable state dict; none crashed")


def main():
    global torch, transformers
    args, work, torch = mutation_oracle_arguments(__doc__.split("\n")[0], ["strides"],
                                                  "transformers", "peft", "h5py")
    import transformers

    def checks():
        check_transformers_files(args.zerotrain, work)
        check_strided_views(args.zerotrain, work, args.mutation)
        check_peft_bin(args.zerotrain, work)
        check_refusals(args.zerotrain, work)
        check_fuzzed_pickles(args.zerotrain, work)

    return exit_status(checks, args.mutation if args.expect_mismatch else None,
                       "gate_proj.weight is not torch's value")


if __name__ == "__main__":
    sys.exit(main())
