#!/usr/bin/env python3
"""Export the tiny checkpoints of tests/fixtures with torch.onnx, as users do,
into tests/fixtures/exports/<family>-<kind>/ (model.onnx + reference.npz).

Developer tool only: needs torch, transformers, onnx and onnxruntime
(`/work/torchvenv/bin/python`); CI never runs it, the generated folders are
committed.  See tests/fixtures/exports/README.md for what each fixture is.

Usage:
    python scripts/make_export_fixtures.py [--out tests/fixtures/exports]
        [--only NAME ...] [--attn sdpa|eager] [--kinds KIND ...] --optimum-path DIR

Kinds (decoders: llama, qwen2, mistral, gpt2; encoder: bert):
    dynamo-cache    torch.onnx.export(dynamo=True, opset 18) of a wrapper that takes the
                    flat cache (past_key_values.N.key/value) and returns logits and
                    present.N.key/value; dims batch, seq, past dynamic
    dynamo          the same exporter without a cache: input_ids, attention_mask,
                    position_ids -> logits (BERT: + token_type_ids -> last_hidden_state)
    legacy-cache    torch.onnx.export(dynamo=False), the TorchScript exporter, of the
                    cache wrapper (BERT: `legacy`, no cache)
    optimum-cache   `optimum-cli export onnx --task text-generation-with-past` (optimum-onnx
                    0.1, the exporter most Hugging Face users run: TorchScript under
                    transformers < 4.58) of the checkpoint with its config.json in transformers-4
                    spelling; run in a subprocess whose PYTHONPATH is --optimum-path (optimum-onnx,
                    optimum 2.1 and transformers 4.57 installed there with `pip install --target
                    DIR --no-deps`, this interpreter's torch). Same I/O names and references as
                    legacy-cache (transformers 5's eager run of the same checkpoint)

reference.npz holds the inputs and transformers' own outputs (eager PyTorch, f32):
    prefill.<input name> / prefill.<output name>    batch 2 x seq 5, row 0 right-padded
                                                    (mask 1 1 1 0 0), row 1 unpadded;
                                                    cache kinds feed an empty past (length 0)
    decode.<input name> / decode.<output name>      cache kinds only: one token per row
                                                    after the prefill, past = the prefill's
                                                    presents, mask 1 1 1 0 0 1 / 1 1 1 1 1 1,
                                                    position ids 3 / 5
Positions of padded tokens carry no meaning: tests compare logits and presents only where
the attention mask is 1 (the reference still holds transformers' values there).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import transformers
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, DynamicCache

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
OPSET = 18
INLINE_LIMIT = 2 * 1024 * 1024  # weights inline below 2 MiB, else model.onnx.data
DECODERS = ["llama", "qwen2", "mistral", "gpt2"]
# Decoder families optimum-onnx 0.1 exports with a cache (text-generation-with-past) that have a
# checkpoint in tests/fixtures: the optimum-cache kind only. Left out, measured: `falcon` (the
# new decoder architecture: optimum-cli's own trace fails, its dummy past has the wrong head
# count), `deepseek_v3` (the export's layer-1 present has 1 head where transformers' has 4),
# `gemma2`, `gpt_oss`, `phi3` (the export, run by onnxruntime, differs from transformers 5's
# forward of the same checkpoint by 0.2-1.9 in the prefill logits).
OPTIMUM_DECODERS = [
    "arcee", "bloom", "codegen", "cohere", "falcon-alibi", "falcon-mq", "gemma", "gemma3_text", "glm",
    "gpt_bigcode", "gpt_neo", "gpt_neox", "gptj", "granite", "helium", "mpt", "nemotron", "olmo",
    "olmo2", "opt", "phi", "qwen3", "qwen3_moe", "smollm3", "stablelm",
]
ENCODERS = ["bert"]
BATCH, SEQ = 2, 5
PAD_ROW_LEN = 3  # row 0: 3 real tokens + 2 pads (right padding)
EXPORT_PAST = 3  # past length of the example inputs the exporters trace with


class CacheWrapper(torch.nn.Module):
    """Flat-tensor interface around a causal LM: (input_ids, attention_mask, position_ids,
    past_key_values.0.key, past_key_values.0.value, ...) -> (logits, present.0.key, ...).
    The cache is a plain DynamicCache of DynamicLayers (no sliding-window truncation), so
    present = concat(past, new) along the sequence axis for every layer."""

    def __init__(self, model, layers: int):
        super().__init__()
        self.model = model
        self.layers = layers

    def forward(self, input_ids, attention_mask, position_ids, *past):
        cache = DynamicCache(ddp_cache_data=[(past[2 * i], past[2 * i + 1]) for i in range(self.layers)])
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache, use_cache=True
        )
        flat = []
        for layer in out.cache.layers:
            flat += [layer.keys, layer.values]
        return (out.logits, *flat)


class NoCacheWrapper(torch.nn.Module):
    """(input_ids, attention_mask, position_ids) -> logits, without a cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).logits


class EncoderWrapper(torch.nn.Module):
    """(input_ids, attention_mask, token_type_ids) -> last_hidden_state."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state


def load(family: str, attn: str):
    src = FIXTURES / family
    cfg = AutoConfig.from_pretrained(src)
    auto = AutoModel if family in ENCODERS else AutoModelForCausalLM
    try:
        model = auto.from_pretrained(src, attn_implementation=attn, dtype=torch.float32)
    except ValueError:  # no SDPA in transformers 5 for this family (bloom, gemma2): eager
        model = auto.from_pretrained(src, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    return cfg, model


def dims(cfg, model) -> dict:
    """Layers and the cache's [kv_heads, head_dim], read from the cache of a one-token forward
    (every family's own arithmetic: multi-query, partial head dims, ...)."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([[3]]), use_cache=True)
    layer = out.past_key_values.layers[0]
    _, kv_heads, _, head_dim = layer.keys.shape
    return {
        "layers": len(out.past_key_values.layers),
        "kv_heads": int(kv_heads),
        "head_dim": int(head_dim),
        "value_dim": int(layer.values.shape[-1]),  # MLA (deepseek_v3): narrower than the keys
        "vocab": cfg.get_text_config().vocab_size,
    }


def past_names(layers: int, prefix: str) -> list[str]:
    return [f"{prefix}.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def prefill_inputs(cfg, seed: int) -> dict[str, np.ndarray]:
    """Batch 2 x seq 5: row 0 has PAD_ROW_LEN tokens then pads, row 1 is full."""
    rng = np.random.default_rng(seed)
    vocab = cfg.get_text_config().vocab_size
    ids = rng.integers(3, vocab, size=(BATCH, SEQ)).astype(np.int64)
    mask = np.ones((BATCH, SEQ), dtype=np.int64)
    mask[0, PAD_ROW_LEN:] = 0
    pad = cfg.get_text_config().pad_token_id
    ids[0, PAD_ROW_LEN:] = pad if pad is not None else 0
    pos = np.tile(np.arange(SEQ, dtype=np.int64), (BATCH, 1))
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos}


def decode_inputs(cfg, prefill: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """One new token per row after the prefill; row 0's position continues its real tokens."""
    rng = np.random.default_rng(seed + 1)
    vocab = cfg.get_text_config().vocab_size
    ids = rng.integers(3, vocab, size=(BATCH, 1)).astype(np.int64)
    mask = np.concatenate([prefill["attention_mask"], np.ones((BATCH, 1), dtype=np.int64)], axis=1)
    pos = np.array([[PAD_ROW_LEN], [SEQ]], dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos}


def torch_run(module, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*[torch.from_numpy(v) for v in feeds.values()])
    if isinstance(out, torch.Tensor):
        out = (out,)
    return [o.detach().numpy().astype(np.float32) for o in out]


def export(module, args: tuple, path: Path, input_names, output_names, dynamic: dict, dynamo: bool, output_dynamic: dict | None = None, optimize: bool = True) -> None:
    """dynamo: the dims of `dynamic` (input name -> {axis: name}) are named and torch.export
    derives the outputs' dims; TorchScript: `dynamic` and `output_dynamic` become dynamic_axes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if dynamo:
        # string dims: torch.onnx turns them into Dim.AUTO and names the graph's dims after them
        # *past is one varargs entry in torch.export's view of the signature
        shapes = tuple(dynamic[n] for n in input_names[:3])
        if len(input_names) > 3:
            shapes += (tuple(dynamic[n] for n in input_names[3:]),)
        prog = torch.onnx.export(
            module,
            args,
            dynamo=True,
            opset_version=OPSET,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=shapes,
            optimize=optimize,
            verify=False,
        )
        model = prog.model_proto
    else:
        tmp = path.with_suffix(".tmp.onnx")
        torch.onnx.export(
            module,
            args,
            str(tmp),
            dynamo=False,
            opset_version=OPSET,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes={**{k: v for k, v in dynamic.items() if v}, **(output_dynamic or {})},
            do_constant_folding=True,
        )
        model = onnx.load(str(tmp))
        for p in tmp.parent.glob(tmp.name + "*"):
            p.unlink()
    save(model, path)


def save(model: onnx.ModelProto, path: Path) -> None:
    # The dynamo exporter records each node's module path and FX node as metadata_props (about
    # half of the file for these tiny models); they carry no semantics and are dropped.
    for node in model.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    for p in path.parent.glob("model.onnx*"):
        p.unlink()
    weights = sum(t.ByteSize() for t in model.graph.initializer)
    if weights < INLINE_LIMIT:
        onnx.save(model, str(path))
    else:
        onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    onnx.checker.check_model(str(path), full_check=True)


def dyn_decoder(names_in, with_past: bool) -> dict:
    total = "past + seq" if with_past else "seq"
    d = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: total}, "position_ids": {0: "batch", 1: "seq"}}
    for n in names_in[3:]:
        d[n] = {0: "batch", 2: "past"}
    return d


def dyn_decoder_outputs(output_names) -> dict:
    d = {"logits": {0: "batch", 1: "seq"}}
    for n in output_names[1:]:
        d[n] = {0: "batch", 2: "past + seq"}
    return d


def write_reference(folder: Path, arrays: dict[str, np.ndarray], meta: dict) -> None:
    np.savez_compressed(folder / "reference.npz", **arrays)
    (folder / "export.json").write_text(json.dumps(meta, indent=2) + "\n")


def make_decoder(family: str, out: Path, attn: str, kinds: list[str], optimum_path: str = "") -> None:
    cfg, model = load(family, attn)
    _, ref_model = load(family, "eager")  # the reference: eager PyTorch
    d = dims(cfg, ref_model)
    seed = sum(map(ord, family))
    prefill = prefill_inputs(cfg, seed)
    decode = decode_inputs(cfg, prefill, seed)
    layers = d["layers"]
    pin, pout = past_names(layers, "past_key_values"), past_names(layers, "present")
    width = {"key": d["head_dim"], "value": d["value_dim"]}
    empty = {n: np.zeros((BATCH, d["kv_heads"], 0, width[n.rsplit(".", 1)[1]]), dtype=np.float32) for n in pin}

    ref_cache = CacheWrapper(ref_model, layers)
    pre_out = torch_run(ref_cache, {**prefill, **empty})
    presents = dict(zip(pout, pre_out[1:]))
    dec_feeds = {**decode, **{pn: presents[po] for pn, po in zip(pin, pout)}}
    dec_out = torch_run(ref_cache, dec_feeds)
    # the no-cache forward must agree with the cache forward on the prefill
    nocache_logits = torch_run(NoCacheWrapper(ref_model), prefill)[0]
    real = prefill["attention_mask"].astype(bool)
    assert np.abs(nocache_logits[real] - pre_out[0][real]).max() < 1e-5

    # example inputs for tracing: past length EXPORT_PAST, seq SEQ, batch 2 (no 0/1 dims)
    rng = np.random.default_rng(seed + 2)
    ex_past = {n: rng.standard_normal((BATCH, d["kv_heads"], EXPORT_PAST, width[n.rsplit(".", 1)[1]])).astype(np.float32) for n in pin}
    ex_mask = np.ones((BATCH, EXPORT_PAST + SEQ), dtype=np.int64)
    ex_pos = np.tile(np.arange(EXPORT_PAST, EXPORT_PAST + SEQ, dtype=np.int64), (BATCH, 1))
    ex = {"input_ids": prefill["input_ids"], "attention_mask": ex_mask, "position_ids": ex_pos, **ex_past}
    ex_t = tuple(torch.from_numpy(v) for v in ex.values())
    names_in = list(ex)

    meta_base = {
        "family": family,
        "checkpoint": f"tests/fixtures/{family}",
        "attn_implementation": attn,
        "opset": OPSET,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "onnx_version": onnx.__version__,
    }
    for kind in kinds:
        folder = out / f"{family}-{kind}"
        if kind in ("dynamo-cache", "dynamo-noopt-cache", "legacy-cache", "optimum-cache"):
            if kind == "optimum-cache":
                export_optimum(family, folder / "model.onnx", optimum_path)
                if "position_ids" not in {i.name for i in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.input}:
                    # optimum-onnx exports some families (gemma, nemotron, ...) without position_ids:
                    # the graph numbers the new tokens from the past length, so the decode step's
                    # reference is transformers' at position SEQ in both rows (the prefill's 0..SEQ-1
                    # are what the export computes too).
                    dec_feeds = {**dec_feeds, "position_ids": np.full((BATCH, 1), SEQ, dtype=np.int64)}
                    dec_out = torch_run(ref_cache, dec_feeds)
            else:
                export(CacheWrapper(model, layers), ex_t, folder / "model.onnx", names_in, ["logits", *pout], dyn_decoder(names_in, True), kind.startswith("dynamo"), dyn_decoder_outputs(["logits", *pout]), optimize=kind != "dynamo-noopt-cache")
            arrays = {f"prefill.{k}": v for k, v in {**prefill, **empty}.items()}
            arrays.update({f"prefill.{k}": v for k, v in zip(["logits", *pout], pre_out)})
            arrays.update({f"decode.{k}": v for k, v in dec_feeds.items()})
            arrays.update({f"decode.{k}": v for k, v in zip(["logits", *pout], dec_out)})
        elif kind == "dynamo":
            nin = ["input_ids", "attention_mask", "position_ids"]
            export(NoCacheWrapper(model), tuple(torch.from_numpy(prefill[n]) for n in nin), folder / "model.onnx", nin, ["logits"], dyn_decoder(nin, False), True)
            arrays = {f"prefill.{k}": v for k, v in prefill.items()}
            arrays["prefill.logits"] = pre_out[0]
        else:
            raise ValueError(kind)
        exporter = {"dynamo": "dynamo", "optimum": "optimum-onnx 0.1 (torchscript, transformers 4.57)"}.get(kind.split("-")[0], "torchscript")
        write_reference(folder, arrays, {**meta_base, "kind": kind, "exporter": exporter})
        print(f"wrote {folder}")


def export_optimum(family: str, path: Path, optimum_path: str) -> None:
    """`optimum-cli export onnx --task text-generation-with-past` of tests/fixtures/<family>,
    its config.json rewritten in transformers-4 spelling (what transformers 4.57 reads: a v5
    `rope_parameters` would be ignored, and the export would rotate with another theta)."""
    import shutil
    import subprocess
    import tempfile

    sys.path.insert(0, str(REPO / "scripts"))
    from make_fixtures import rewrite_config_v4

    with tempfile.TemporaryDirectory() as tmp:
        ckpt, exported = Path(tmp) / "ckpt", Path(tmp) / "onnx"
        shutil.copytree(FIXTURES / family, ckpt, ignore=shutil.ignore_patterns("*.json.bak", "reference.json", "quant_reference.json"))
        rewrite_config_v4(ckpt / "config.json")
        cmd = [sys.executable, "-m", "optimum.commands.optimum_cli", "export", "onnx", "--model", str(ckpt),
               "--task", "text-generation-with-past", "--opset", str(OPSET), str(exported)]
        env = {**__import__("os").environ, "PYTHONPATH": optimum_path}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"optimum-cli failed on {family}:\n" + "\n".join(proc.stderr.strip().splitlines()[-15:]))
        path.parent.mkdir(parents=True, exist_ok=True)
        save(onnx.load(str(exported / "model.onnx")), path)


def make_encoder(family: str, out: Path, attn: str, kinds: list[str]) -> None:
    cfg, model = load(family, attn)
    _, ref_model = load(family, "eager")
    seed = sum(map(ord, family))
    feeds = prefill_inputs(cfg, seed)
    del feeds["position_ids"]
    feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
    feeds["token_type_ids"][1, 2:] = 1
    want = torch_run(EncoderWrapper(ref_model), feeds)[0]
    names_in = list(feeds)
    dyn = {n: {0: "batch", 1: "seq"} for n in names_in}
    meta_base = {
        "family": family,
        "checkpoint": f"tests/fixtures/{family}",
        "attn_implementation": attn,
        "opset": OPSET,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "onnx_version": onnx.__version__,
    }
    for kind in kinds:
        folder = out / f"{family}-{kind}"
        export(EncoderWrapper(model), tuple(torch.from_numpy(feeds[n]) for n in names_in), folder / "model.onnx", names_in, ["last_hidden_state"], dyn, kind == "dynamo", {"last_hidden_state": {0: "batch", 1: "seq"}})
        arrays = {f"prefill.{k}": v for k, v in feeds.items()}
        arrays["prefill.last_hidden_state"] = want
        write_reference(folder, arrays, {**meta_base, "kind": kind, "exporter": "dynamo" if kind == "dynamo" else "torchscript"})
        print(f"wrote {folder}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=FIXTURES / "exports")
    ap.add_argument("--only", nargs="*", help="families (llama, qwen2, mistral, gpt2, bert)")
    ap.add_argument("--kinds", nargs="*", help="kinds to export (default: all of the family)")
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"], help="attn_implementation of the exported model")
    ap.add_argument("--optimum-path", default="", help="the folder optimum-onnx 0.1, optimum 2.1 and transformers 4.57 are installed in (pip install --target DIR --no-deps ...), for the optimum-cache kind")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    for family in args.only or DECODERS + ENCODERS:
        if family in DECODERS + OPTIMUM_DECODERS:
            kinds = args.kinds or (["dynamo-cache", "dynamo", "legacy-cache", "optimum-cache"] if family in DECODERS else ["optimum-cache"])
            if "optimum-cache" in kinds and not args.optimum_path:
                raise SystemExit("the optimum-cache kind needs --optimum-path (see the kinds above)")
            make_decoder(family, args.out, args.attn, kinds, args.optimum_path)
        elif family in ENCODERS:
            make_encoder(family, args.out, args.attn, args.kinds or ["dynamo", "legacy"])
        else:
            raise SystemExit(f"unknown family {family!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
