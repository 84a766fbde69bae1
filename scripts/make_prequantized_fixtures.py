#!/usr/bin/env python3
"""Pre-quantized checkpoint fixtures (GPTQ, AWQ, FP8) made from the float `llama` fixture.

Developer tool only (needs torch, transformers, numpy, safetensors); CI never runs it. The
folders it writes are committed: tests/fixtures/llama-gptq, llama-awq, llama-fp8.

Each projection weight of the decoder layers (q/k/v/o, gate/up/down; the tied embeddings / LM
head stay float, as quantizers leave them) is quantized here in numpy, round to nearest, with
the format's conventions, and packed in the format's layout:

- llama-gptq: quant_method "gptq", bits 4, group_size 32, sym false, desc_act false,
  checkpoint_format "gptq" (v1). qweight int32 [K/8, N] (8 rows of K per word, low nibble
  first), qzeros int32 [K/32, N/8] (8 columns per word) holding zero - 1 (the v1 convention;
  zero points are kept in 1..15 so that zero - 1 fits), scales f16 [K/32, N], g_idx int32 [K]
  = k // 32.
- llama-awq: quant_method "awq", version "gemm", bits 4, group_size 64, zero_point true.
  qweight int32 [K, N/8] and qzeros int32 [K/64, N/8]: nibble j of word c holds column
  8c + [0, 2, 4, 6, 1, 3, 5, 7][j]; scales f16 [K/64, N].
- llama-fp8: quant_method "fp8", fmt e4m3, weight_block_size [32, 48] (a partial block along
  K): X.weight F8_E4M3 [N, K] and X.weight_scale_inv f32 [ceil(N/32), ceil(K/48)], the weight
  being weight * scale_inv[n // 32, k // 48].

Every packed checkpoint is checked by unpacking it with a second, independent implementation
(torch, written after the dequantization transformers' integrations run: gptqmodel's v1→v2
zero shift and unpacking, AutoAWQ's unpack + reverse order, finegrained FP8's block
expansion), which must give the numpy dequantization exactly. transformers then computes, in
f32, the fixture prompt's logits and 32 greedy tokens of the model whose projections hold the
*dequantized float* weights: reference.json, with the schema of the float fixtures plus
"task": "prequantized-text-generation" (so the float suites, which run `task`
"text-generation", leave these fixtures to tests/ort/test_prequantized.py and
tests/prequantized.rs), "quantization" (the quantization_config) and "top2_gaps".

Usage: /work/torchvenv/bin/python scripts/make_prequantized_fixtures.py
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_quant_references import greedy  # noqa: E402  (the same greedy reference loop)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
BASE = "llama"
N_NEW = 32
TASK = "prequantized-text-generation"
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]

CONFIGS = {
    "llama-gptq": {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 32,
        "desc_act": False,
        "sym": False,
        "checkpoint_format": "gptq",
        "true_sequential": True,
        "damp_percent": 0.01,
    },
    "llama-awq": {
        "quant_method": "awq",
        "bits": 4,
        "group_size": 64,
        "version": "gemm",
        "zero_point": True,
        "modules_to_not_convert": None,
    },
    "llama-fp8": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [32, 48],
        "modules_to_not_convert": None,
    },
}


def rnd(x: float) -> float:
    return float(f"{x:.9g}")


# ---------------------------------------------------------------- quantization (numpy) ---


def rtn_asymmetric(w_kn: np.ndarray, group: int, min_zero: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round-to-nearest 4-bit quantization of [K, N] in groups of `group` rows: values q [K, N],
    zero points z [K/group, N] in min_zero..15, f16 scales s [K/group, N]; w ≈ s·(q − z)."""
    k, n = w_kn.shape
    g = w_kn.reshape(k // group, group, n)
    lo = np.minimum(g.min(axis=1), 0.0)
    hi = np.maximum(g.max(axis=1), 0.0)
    scale = ((hi - lo) / 15.0).astype(np.float16)
    scale = np.where(scale == 0, np.float16(1.0), scale)
    s32 = scale.astype(np.float32)
    zero = np.clip(np.round(-lo / s32), min_zero, 15).astype(np.int64)
    q = np.clip(np.round(g / s32[:, None, :]) + zero[:, None, :], 0, 15).astype(np.int64)
    return q.reshape(k, n), zero, scale


def dequantize(q: np.ndarray, zero: np.ndarray, scale: np.ndarray, group: int) -> np.ndarray:
    """s·(q − z) in f32, [K, N]."""
    z = np.repeat(zero, group, axis=0).astype(np.float32)
    s = np.repeat(scale.astype(np.float32), group, axis=0)
    return ((q.astype(np.float32) - z) * s).astype(np.float32)


def pack_rows(q: np.ndarray) -> np.ndarray:
    """[K, N] nibbles → int32 [K/8, N], 8 rows of K per word, low nibble first."""
    k, n = q.shape
    words = np.zeros((k // 8, n), dtype=np.uint32)
    for j in range(8):
        words |= q[j::8].astype(np.uint32) << np.uint32(4 * j)
    return words.view(np.int32)


def pack_columns(q: np.ndarray, order: list[int]) -> np.ndarray:
    """[R, N] nibbles → int32 [R, N/8]: nibble j of word c holds column 8c + order[j]."""
    r, n = q.shape
    words = np.zeros((r, n // 8), dtype=np.uint32)
    for j, col in enumerate(order):
        words |= q[:, col::8].astype(np.uint32) << np.uint32(4 * j)
    return words.view(np.int32)


def fp8_blocks(w_nk: np.ndarray, block: list[int]) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Block-scaled e4m3 quantization of [N, K]: (fp8 values, f32 scales [⌈N/bn⌉, ⌈K/bk⌉],
    the dequantized f32 weight)."""
    n, k = w_nk.shape
    bn, bk = block
    rows, cols = -(-n // bn), -(-k // bk)
    scales = np.zeros((rows, cols), dtype=np.float32)
    expanded = np.zeros_like(w_nk)
    for r in range(rows):
        for c in range(cols):
            blk = w_nk[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk]
            scales[r, c] = np.float32(np.abs(blk).max() / 448.0)
            expanded[r * bn:(r + 1) * bn, c * bk:(c + 1) * bk] = scales[r, c]
    values = torch.from_numpy(w_nk / expanded).to(torch.float8_e4m3fn)
    deq = (values.to(torch.float32).numpy() * expanded).astype(np.float32)
    return values, scales, deq


# ------------------------------------------- independent unpacking (torch, as transformers) ---


def gptq_v1_dequantize_torch(qweight, qzeros, scales, g_idx) -> torch.Tensor:
    """Dequantization of a GPTQ v1 module as gptqmodel runs it: qzeros shifted to v2 (+1 per
    nibble), then scales[g_idx] · (q − z[g_idx]). Returns [K, N] f32."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    q = torch.bitwise_right_shift(qweight.unsqueeze(1).expand(-1, 8, -1), shifts.view(1, 8, 1))
    q = torch.bitwise_and(q, 15).reshape(-1, qweight.shape[1])
    z = torch.bitwise_right_shift(qzeros.unsqueeze(2).expand(-1, -1, 8), shifts.view(1, 1, 8))
    z = torch.bitwise_and(z, 15).reshape(qzeros.shape[0], -1) + 1
    gi = g_idx.long()
    return scales.float()[gi] * (q.float() - z.float()[gi])


def awq_dequantize_torch(qweight, qzeros, scales, group: int) -> torch.Tensor:
    """AutoAWQ's unpack + reverse order + (q − z) · s. Returns [K, N] f32."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    reverse = [0, 4, 1, 5, 2, 6, 3, 7]

    def unpack(t):
        v = torch.bitwise_right_shift(t[:, :, None], shifts[None, None, :]).reshape(t.shape[0], -1)
        idx = torch.arange(v.shape[1]).view(-1, 8)[:, reverse].reshape(-1)
        return torch.bitwise_and(v[:, idx], 15)

    q, z = unpack(qweight), unpack(qzeros)
    z = z.repeat_interleave(group, dim=0)
    s = scales.float().repeat_interleave(group, dim=0)
    return (q.float() - z.float()) * s


def fp8_dequantize_torch(weight, scale_inv, block) -> torch.Tensor:
    """finegrained FP8: weight · scale_inv expanded over [bn, bk] blocks. Returns [N, K] f32."""
    n, k = weight.shape
    s = scale_inv.repeat_interleave(block[0], 0)[:n].repeat_interleave(block[1], 1)[:, :k]
    return weight.to(torch.float32) * s


# ------------------------------------------------------------------------------ fixtures ---


def quantize_module(name: str, key: str, w_nk: np.ndarray, tensors: dict) -> np.ndarray:
    """Stores the quantized form of module `key`'s weight [N, K] in `tensors`; returns the
    dequantized f32 weight [N, K]."""
    cfg = CONFIGS[name]
    if cfg["quant_method"] == "fp8":
        values, scales, deq = fp8_blocks(w_nk, cfg["weight_block_size"])
        check = fp8_dequantize_torch(values, torch.from_numpy(scales), cfg["weight_block_size"])
        assert np.array_equal(check.numpy(), deq), key
        tensors[f"{key}.weight"] = values
        tensors[f"{key}.weight_scale_inv"] = torch.from_numpy(scales)
        return deq
    group = cfg["group_size"]
    w_kn = np.ascontiguousarray(w_nk.T)
    if cfg["quant_method"] == "gptq":
        q, zero, scale = rtn_asymmetric(w_kn, group, min_zero=1)
        qweight = pack_rows(q)
        qzeros = pack_columns(zero - 1, list(range(8)))
        g_idx = (np.arange(w_kn.shape[0]) // group).astype(np.int32)
        deq = dequantize(q, zero, scale, group)
        check = gptq_v1_dequantize_torch(
            torch.from_numpy(qweight), torch.from_numpy(qzeros), torch.from_numpy(scale), torch.from_numpy(g_idx)
        )
        tensors[f"{key}.g_idx"] = torch.from_numpy(g_idx)
    else:
        q, zero, scale = rtn_asymmetric(w_kn, group, min_zero=0)
        qweight = pack_columns(q, AWQ_ORDER)
        qzeros = pack_columns(zero, AWQ_ORDER)
        deq = dequantize(q, zero, scale, group)
        check = awq_dequantize_torch(torch.from_numpy(qweight), torch.from_numpy(qzeros), torch.from_numpy(scale), group)
    assert np.array_equal(check.numpy(), deq), key
    tensors[f"{key}.qweight"] = torch.from_numpy(qweight)
    tensors[f"{key}.qzeros"] = torch.from_numpy(qzeros)
    tensors[f"{key}.scales"] = torch.from_numpy(scale)
    return np.ascontiguousarray(deq.T)


def make(name: str) -> None:
    base = FIXTURES / BASE
    ref = json.loads((base / "reference.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    float_tensors = load_file(base / "model.safetensors")
    tensors: dict[str, torch.Tensor] = {}
    quantized = 0
    with torch.no_grad():
        for key, module in model.named_modules():
            if not (isinstance(module, torch.nn.Linear) and key.split(".")[-1] in PROJECTIONS):
                continue
            deq = quantize_module(name, key, module.weight.detach().numpy().copy(), tensors)
            module.weight.copy_(torch.from_numpy(deq))
            float_tensors.pop(f"{key}.weight")
            quantized += 1
    tensors.update(float_tensors)
    logits, tokens, gaps = greedy(model, ref["input_ids"])
    gen = model.generate(
        torch.tensor([ref["input_ids"]]),
        attention_mask=torch.ones(1, len(ref["input_ids"]), dtype=torch.long),
        do_sample=False,
        max_new_tokens=N_NEW,
        min_new_tokens=N_NEW,
        pad_token_id=0,
    )[0, len(ref["input_ids"]):].tolist()
    assert gen == tokens, (name, gen, tokens)

    out = FIXTURES / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((base / "config.json").read_text())
    config["quantization_config"] = CONFIGS[name]
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(base / f, out / f)
    reference = {
        "task": TASK,
        "base_fixture": BASE,
        "quantization": CONFIGS[name],
        "quantized_weights": quantized,
        "prompt": ref["prompt"],
        "input_ids": ref["input_ids"],
        "logits": [[rnd(v) for v in row] for row in logits.tolist()],
        "greedy_tokens": tokens,
        "dtype": "f32",
        "seed": ref["seed"],
        "min_top2_gap": rnd(min(gaps)),
        "top2_gaps": [rnd(g) for g in gaps],
        "vocab_size": ref["vocab_size"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    assert size < 1_000_000, (name, size)
    print(f"{name}: {quantized} weights, min top-2 gap {min(gaps):.4g}, {size} bytes")


def main() -> int:
    for name in CONFIGS:
        make(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
