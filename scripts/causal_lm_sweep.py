#!/usr/bin/env python3
"""Build every transformers causal-LM model type from a tiny random checkpoint and check the
logits against transformers': the coverage figure of the README.

Developer tool (CI never runs it): it needs torch, transformers, onnxruntime and numpy, and a
mobius binary. For each model type of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` it
makes a tiny config (2 layers, hidden 64, 4 heads of 16, 2 KV heads, vocab 1000, small MoE and
latent-attention sizes where the config has them; the extra fields of ``SIZE_OVERRIDES`` for
the types whose default config is inconsistent once shrunk), a random model with every
parameter that transformers initialises to a constant (norm weights, biases) perturbed, saves
it as safetensors, runs ``mobius build --ep cpu --dtype f32`` and onnxruntime (CPU) on an 8-token
prompt with an empty KV cache, and compares the logits with transformers' f32 forward.

Each type runs in its own process (a crash or a hang is that type's result). Statuses:

    pass        logits within --atol (1e-4) of transformers'
    mismatch    built and ran, logits differ (the max abs difference is given)
    refused     mobius build exited non-zero (its first error line is given)
    ort-error   onnxruntime could not load or run the model
    no-tiny     transformers itself could not make or run a tiny model of the type
    timeout     the type took longer than --timeout seconds

Usage:
    python scripts/causal_lm_sweep.py [--mobius target/release/mobius] [--only llama opt ...]
        [--json sweep.json] [--markdown sweep.md] [--timeout 300]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Canonical sizes, set on every config (and sub-config) that has the attribute (directly or
# through its attribute_map).
TINY = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
    # mixture of experts
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 64,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    # Mamba2 mixers of the hybrids (Bamba, Granite-4, Falcon-H1): heads × head dim = the
    # mixer's width, 2 × hidden (Falcon-H1's mamba_d_ssm)
    "mamba_n_heads": 8,
    "mamba_d_head": 16,
    "mamba_d_ssm": 128,
    "mamba_n_groups": 2,
    "mamba_d_state": 16,
    # multi-head latent attention
    "kv_lora_rank": 32,
    "q_lora_rank": 48,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    # seq2seq decoders (BART-likes) and their encoders
    "decoder_attention_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_ffn_dim": 128,
    "encoder_ffn_dim": 128,
    "decoder_layers": 2,
    "encoder_layers": 2,
    "decoder_vocab_size": 1000,
    # vision / audio towers of multimodal types, when they share these names
    "image_size": 32,
    "patch_size": 8,
}
# Set only where the default is not None (None means "off" for these).
TINY_IF_SET = {"sliding_window": 16, "attention_window": 16, "local_window_size": 16}
# Per-type sizing overrides: extra config fields for the types whose default config TINY alone
# leaves inconsistent (transformers refuses or cannot run it tiny). Set last, on the config of
# that model_type (a sub-config included); a dict value is merged into the sub-config of that
# name. Each entry says what it fixes; none changes what the type computes beyond its size.
SIZE_OVERRIDES: dict[str, dict] = {
    # Mamba-2: hidden * expand (128) must equal num_heads * head_dim (16); 2 groups of B/C.
    "mamba2": {"num_heads": 8, "n_groups": 2, "state_size": 16, "chunk_size": 8},
    # Zamba2: its default layers_block_type has 54 entries; one Mamba2 and one hybrid layer,
    # 8 SSM heads of 16 in 2 groups, state 16, adapters of rank 8; the sizes its config derives
    # from the hidden size (the stale defaults' would win), the attention 2 x 64 wide.
    "zamba2": {
        "layers_block_type": ["mamba", "hybrid"],
        "hybrid_layer_ids": [1],
        "attention_hidden_size": 128,
        "attention_head_dim": 32,
        "mamba_headdim": 16,
        "kv_channels": 16,
        "n_mamba_heads": 8,
        "mamba_ngroups": 2,
        "mamba_d_state": 16,
        "chunk_size": 8,
        "adapter_rank": 8,
    },
    # DBRX: its attention sub-config carries no rope_theta by default (DbrxAttention reads it)
    # and clip_qkv None fails torch.clamp; 2 KV heads, 4 experts of 32, top-2.
    "dbrx": {
        "attn_config": {"rope_theta": 10000.0, "kv_n_heads": 2, "clip_qkv": 8.0},
        "ffn_config": {"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2},
    },
    # Cohere Compass text: RoPE parameters are read per layer type (the default is one flat
    # dict), M-RoPE sections sized to the half head of 8; one sliding and one full layer.
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            t: {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]}
            for t in ("sliding_attention", "full_attention")
        },
    },
    # Gemma 4 text: full-attention layers are 32 wide (global_head_dim, per-layer config) and a
    # small per-layer-input table; one sliding and one full layer.
    "gemma4_text": {
        "global_head_dim": 32,
        "vocab_size_per_layer_input": 1000,
        "hidden_size_per_layer_input": 16,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    # Gemma 3n text: KV sharing needs both layer types before its shared layers (the default
    # shares 15 of 35); one sliding and one full layer, no sharing, small per-layer inputs.
    "gemma3n_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "num_kv_shared_layers": 0,
        "vocab_size_per_layer_input": 1000,
        "hidden_size_per_layer_input": 16,
    },
    # Inkling 2: the embedding is saved cut to unpadded_vocab_size (200058 by default) and
    # padded back to vocab_size on load; the tiny vocabulary is unpadded.
    "inkling2_text": {"unpadded_vocab_size": 1000},
    "inkling2_loop_text": {"unpadded_vocab_size": 1000},
    # Types mobius refuses (recurrent layers, other attention): sized so that the sweep
    # reports what mobius does with them rather than that transformers cannot make them.
    # Mamba heads: 8 of 16 = hidden * expand.
    "bamba": {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 8},
    "granitemoehybrid": {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 16, "mamba_chunk_size": 8},
    # Nemotron-H: its default blocks (Mamba2, MoE, attention, MLP) with 8 Mamba heads of 16 and
    # 4 experts 32 wide.
    "nemotron_h": {
        "mamba_num_heads": 8,
        "mamba_head_dim": 16,
        "ssm_state_size": 16,
        "n_groups": 2,
        "chunk_size": 8,
        "n_routed_experts": 4,
        "moe_intermediate_size": 32,
        "moe_shared_expert_intermediate_size": 32,
    },
    # Jamba: a Mamba layer with experts, then an attention layer with the MLP.
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "num_experts": 4, "expert_layer_offset": 0},
    # xLSTM: the embedding is hidden_size wide.
    "xlstm": {"embedding_dim": 64},
    # Reformer: axial position embeddings sum to hidden 64 over a 16 x 32 grid (512 positions).
    "reformer": {"axial_pos_embds_dim": [32, 32], "axial_pos_shape": [16, 32]},
    # LFM2-MoE: one short-convolution layer, one attention layer; one dense, one MoE.
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    # Dory: its config.json counts attention and MLP blocks apart (twice the layers): one
    # input, one recurrent, one output layer.
    "dory": {
        "num_hidden_layers": 6,
        "layer_types": ["sliding_attention", "mlp", "sliding_attention", "mlp", "full_attention", "mlp"],
        "n_input_layers": 2,
        "n_recurrent_layers": 2,
        "n_output_layers": 2,
    },
    # Kolibri 1.1: one sliding layer and one indexed layer (its own indexer and K/V), the
    # indexer within the tiny heads and prompt.
    "kolibri1_1": {
        "layer_types": ["sliding_attention", "indexed_attention"],
        "index_layers": None,
        "kv_source_layers": None,
        "mlp_only_layers": [0],
        "index_num_heads": 2,
        "index_topk": 4,
        "index_num_local_tokens": 2,
        "index_num_sink_tokens": 1,
    },
    # Heads of d_model / n_head.
    "xlnet": {"d_head": 16},
    # ZAYA routes each token to one expert only.
    "zaya": {"num_experts_per_tok": 1},
    # The query/key head is nope + rope wide (the default keeps the full size's 192).
    "longcat_flash": {"qk_head_dim": 24},
}
# Token ids kept inside the tiny vocabulary.
TOKEN_ID_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id")
SEQ = 8
SEED = 0


def tiny_config(model_type: str):
    """A tiny config of `model_type`, derived fields (per-layer lists) recomputed."""
    from transformers import AutoConfig

    def shrink(cfg):
        d = cfg.to_dict()
        amap = getattr(cfg, "attribute_map", {}) or {}
        old_layers = getattr(cfg, "num_hidden_layers", None)
        for key, value in TINY.items():
            target = amap.get(key, key)
            if target in d:
                d[target] = value
        if "qk_rope_head_dim" in d and "head_dim" in d:
            d["head_dim"] = d["qk_rope_head_dim"]  # latent attention: head_dim names the RoPE part
        if "kv_lora_rank" in d and "num_key_value_heads" in d:
            d["num_key_value_heads"] = d["num_attention_heads"]  # latent attention: a K/V per head
        if d.get("rotary_dim") is not None:
            d["rotary_dim"] = TINY["head_dim"] // 2  # GPT-J, CodeGen: within the tiny head
        if "attention_types" in d:  # GPT-Neo: one global and one local layer
            d["attention_types"] = [[["global", "local"], 1]]
            d.pop("attention_layers", None)
        for key, value in TINY_IF_SET.items():
            if d.get(key) is not None:
                d[key] = value
        # Per-layer lists sized for the default depth are recomputed from the new one.
        for key, value in list(d.items()):
            if isinstance(value, list) and old_layers and len(value) == old_layers and old_layers != 2:
                del d[key]
        d.pop("per_layer_config", None)  # keyed by the default depth's layer indices
        for key in TOKEN_ID_KEYS:
            v = d.get(key)
            if isinstance(v, int) and v >= TINY["vocab_size"]:
                d[key] = TINY["vocab_size"] - 1 - TOKEN_ID_KEYS.index(key)
            elif isinstance(v, list):
                d[key] = [t if t < TINY["vocab_size"] else TINY["vocab_size"] - 1 for t in v]
        for key, value in list(d.items()):
            try:
                sub = getattr(cfg, key, None)
            except Exception:  # noqa: BLE001 - per-layer attributes refuse global reads
                sub = None
            if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
                d[key] = shrink(sub).to_dict()
        for key, value in SIZE_OVERRIDES.get(cfg.model_type, {}).items():
            if isinstance(value, dict) and isinstance(d.get(key), dict) and key != "rope_parameters":
                d[key] = {**d[key], **value}
            else:
                d[key] = value
        d.pop("model_type", None)
        d.pop("transformers_version", None)
        return type(cfg)(**d)

    cfg = shrink(AutoConfig.for_model(model_type))
    # Causal LMs of encoder architectures are saved with `is_decoder` true (transformers'
    # *LMHeadModel classes expect it, its *ForCausalLM decoders set it); without it a BERT-like
    # attends both ways.
    if "is_decoder" in cfg.to_dict():
        cfg.is_decoder = True
    return cfg


def perturb(model, generator) -> None:
    """Adds noise to every parameter transformers initialises to one constant (norm weights,
    biases), so a missed bias or a wrong norm convention shows in the logits."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            if p.numel() and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * 0.1)


def ort_logits(model_path: Path, ids) -> "np.ndarray":
    """onnxruntime CPU's logits of `ids` (batch 1) with an empty KV cache."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    feeds = {}
    n = len(ids)
    for inp in sess.get_inputs():
        if inp.name == "input_ids":
            feeds[inp.name] = np.array([ids], dtype=types[inp.type])
        elif inp.name == "attention_mask":
            feeds[inp.name] = np.ones((1, n), dtype=types[inp.type])
        elif inp.name == "position_ids":
            feeds[inp.name] = np.arange(n, dtype=types[inp.type])[None, :]
        else:
            shape = []
            for dim in inp.shape:
                if isinstance(dim, int):
                    shape.append(dim)
                elif "batch" in str(dim):
                    shape.append(1)
                else:
                    shape.append(0)
            feeds[inp.name] = np.zeros(shape, dtype=types[inp.type])
    out = sess.run(["logits"], feeds)[0]
    return np.asarray(out, dtype=np.float32)


def check(model_type: str, mobius: str, atol: float, queue) -> None:
    """Runs one type; puts its result record on `queue`."""
    import numpy as np
    import torch

    rec: dict = {"type": model_type}
    try:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(SEED)
        cfg = tiny_config(model_type)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        gen = torch.Generator().manual_seed(SEED + 1)
        perturb(model, gen)
        rec["params"] = sum(p.numel() for p in model.parameters())
        rec["class"] = type(model).__name__
        vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else 1000
        ids = torch.randint(3, min(vocab, 1000), (1, SEQ), generator=gen)
        with torch.no_grad():
            want = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).logits[0].float().numpy()
    except Exception as e:  # noqa: BLE001 - any failure is this type's result
        rec.update(status="no-tiny", detail=f"{type(e).__name__}: {e}".splitlines()[0][:200])
        queue.put(rec)
        return
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "ckpt", Path(tmp) / "out"
        model.save_pretrained(src, safe_serialization=True)
        proc = subprocess.run(
            [mobius, "build", "-q", "--config", str(src), str(out), "--ep", "cpu", "--dtype", "f32"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            rec.update(status="refused", detail=(lines[0] if lines else f"exit {proc.returncode}")[:200])
            queue.put(rec)
            return
        try:
            got = ort_logits(out / "model.onnx", ids[0].tolist())[0]
        except Exception as e:  # noqa: BLE001
            rec.update(status="ort-error", detail=f"{type(e).__name__}: {e}".splitlines()[0][:200])
            queue.put(rec)
            return
    if got.shape != want.shape:
        rec.update(status="mismatch", detail=f"logits shape {list(got.shape)} != {list(want.shape)}")
    else:
        finite = bool(np.isfinite(got).all() and np.isfinite(want).all())
        diff = float(np.abs(got.astype(np.float64) - want).max()) if finite else float("inf")
        rec["max_abs_diff"] = diff
        rec.update(status="pass" if finite and diff <= atol else "mismatch", detail=f"max abs diff {diff:.3g}")
    queue.put(rec)


def main() -> int:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mobius", default=str(ROOT / "target" / "release" / "mobius"))
    ap.add_argument("--only", nargs="*", help="model types to sweep (default: all)")
    ap.add_argument("--json", type=Path, help="write the records here")
    ap.add_argument("--markdown", type=Path, help="write the table here")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per type")
    args = ap.parse_args()
    import transformers

    types = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    if args.only:
        unknown = sorted(set(args.only) - set(types))
        if unknown:
            print(f"not causal-LM types of transformers {transformers.__version__}: {unknown}", file=sys.stderr)
            return 2
        types = [t for t in types if t in args.only]
    ctx = mp.get_context("spawn")
    records = []
    for t in types:
        queue = ctx.Queue()
        start = time.time()
        proc = ctx.Process(target=check, args=(t, args.mobius, args.atol, queue))
        proc.start()
        proc.join(args.timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            rec = {"type": t, "status": "timeout", "detail": f"over {args.timeout:.0f} s"}
        elif queue.empty():
            rec = {"type": t, "status": "no-tiny", "detail": f"process died (exit {proc.exitcode})"}
        else:
            rec = queue.get()
        rec["seconds"] = round(time.time() - start, 1)
        records.append(rec)
        print(f"{t:32s} {rec['status']:10s} {rec.get('detail', '')}", flush=True)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    runnable = len(records) - counts.get("no-tiny", 0)
    summary = (
        f"transformers {transformers.__version__}: {counts.get('pass', 0)} of {runnable} causal-LM types "
        f"transformers can make tiny ({len(records)} swept) build with its logits (cpu f32, atol {args.atol:g}); "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    print(summary)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "records": records}, indent=1) + "\n")
    if args.markdown:
        rows = ["| type | status | detail |", "|---|---|---|"]
        rows += [f"| {r['type']} | {r['status']} | {r.get('detail', '').replace('|', '/')} |" for r in records]
        args.markdown.write_text(summary + "\n\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
