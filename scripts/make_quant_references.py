#!/usr/bin/env python3
"""Reference outputs of the decoder fixtures' *quantized* models, for `mobius build --quant`.

Developer tool only (needs torch, transformers and onnxruntime); CI never runs it. The
output, `tests/fixtures/NAME/quant_reference.json`, is committed.

For each decoder fixture and each setting in SETTINGS, every weight that `mobius build
--quant` quantizes (the weight of every nn.Linear / GPT-2 Conv1D, the LM head included even
when it is tied to the embeddings) (and, for the `-embeddings` settings, the token-embedding table, row by row along the hidden
size, and Gemma 4's per-layer embedding table the same way) is quantized by onnxruntime's own MatMulNBits quantizer
(`quantize_matmul_4bits` / `quantize_matmul_8bits`: round to nearest, blocks along the input
dimension, what `onnxruntime.quantization.matmul_nbits_quantizer` runs by default), then
dequantized in f32 and put back (untying a tied head). transformers then computes, in f32,
the logits of the fixture's prompt and its greedy tokens: the "fake-quantized" reference an
accuracy_level 0 build must match (max abs error <= 1e-3).

quant_reference.json:
    {"onnxruntime_version": str, "torch_version": str, "transformers_version": str,
     "settings": {"int4-b32-sym": {"bits": 4, "block_size": 32, "symmetric": true,
                                   "logits": [[float]*vocab]*tokens,
                                   "greedy_tokens": [int]*32, "min_top2_gap": float,
                                   "top2_gaps": [float]*32 (top-1 minus top-2 logit before
                                                each greedy step)}, ...}}

Usage: python scripts/make_quant_references.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import torch
import transformers
from onnxruntime.capi._pybind_state import quantize_matmul_4bits, quantize_matmul_8bits
from transformers import AutoModelForCausalLM
from transformers.pytorch_utils import Conv1D

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
N_NEW = 32

# name: (bits, block size, symmetric, token embeddings too (--quant-embeddings), weight dtype
# quantized: f16 = the weights rounded to f16 first, quantized with f16 scales, as for an
# f16 build)
SETTINGS = {
    "int4-b32-sym": (4, 32, True, False, np.float32),
    "int4-b16-asym": (4, 16, False, False, np.float32),
    "int8-b32-sym": (8, 32, True, False, np.float32),
    "int4-b32-sym-embeddings": (4, 32, True, True, np.float32),
    "int4-b16-asym-embeddings": (4, 16, False, True, np.float32),
    "int4-b32-sym-f16": (4, 32, True, False, np.float16),
}


# Expert modules whose gate_up_proj / down_proj stacks are [E, in, out] without saying so.
IN_OUT_EXPERTS = {"Llama4TextExperts"}


def rnd(x: float) -> float:
    return float(f"{x:.9g}")


def fake_quantize(w_kn: np.ndarray, bits: int, block: int, symmetric: bool, dtype=np.float32) -> np.ndarray:
    """onnxruntime's RTN quantization of a [K, N] weight (as `dtype`), dequantized to f32."""
    w_kn = w_kn.astype(dtype)
    k, n = w_kn.shape
    blocks = (k + block - 1) // block
    per_byte = 8 // bits
    packed = np.zeros((n, blocks, block // per_byte), dtype=np.uint8)
    scales = np.zeros((n, blocks), dtype=dtype)
    zp = np.zeros((n, (blocks + per_byte - 1) // per_byte), dtype=np.uint8)
    padded = np.zeros((blocks * block, n), dtype=dtype)
    padded[:k] = w_kn
    quantize = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
    quantize(packed, np.ascontiguousarray(padded), scales, zp, block, n, blocks * block, symmetric)
    if bits == 4:
        values = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, blocks, block)
        zero = np.stack([zp & 0x0F, zp >> 4], axis=-1).reshape(n, -1)[:, :blocks]
    else:
        values = packed.reshape(n, blocks, block)
        zero = zp[:, :blocks]
    if symmetric:
        zero = np.full((n, blocks), 1 << (bits - 1), dtype=np.uint8)
    deq = (values.astype(np.float32) - zero[:, :, None].astype(np.float32)) * scales[:, :, None].astype(np.float32)
    return deq.reshape(n, blocks * block)[:, :k].T.copy()  # [K, N]


@torch.no_grad()
def quantized_model(path: Path, bits: int, block: int, symmetric: bool, embeddings: bool, dtype):
    # Image-text fixtures, and the text decoders whose config class the causal-LM auto mapping
    # does not list (Emu3TextConfig, MllamaTextConfig), load as their own class.
    arch = json.loads((path / "config.json").read_text())["architectures"][0]
    own = arch.endswith("ForConditionalGeneration") or arch in ("Emu3ForCausalLM", "MllamaForCausalLM")
    cls = getattr(transformers, arch) if own else AutoModelForCausalLM
    model = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    head = model.get_output_embeddings()
    if head is not None and head.weight is model.get_input_embeddings().weight:
        head.weight = torch.nn.Parameter(head.weight.detach().clone())  # untie
    count = 0
    if embeddings:
        # Rows quantized along the hidden size: the table's transpose [D, V] in blocks along D.
        tables = [model.get_input_embeddings()]
        # Gemma 4's per-layer input embeddings: a second table the token ids index (mobius
        # quantizes every table `Gather` reads by token id).
        per_layer = getattr(model.base_model, "embed_tokens_per_layer", None)
        if per_layer is not None:
            tables.append(per_layer)
        for table in tables:
            deq = fake_quantize(table.weight.detach().numpy().T, bits, block, symmetric, dtype).T.copy()
            table.weight.copy_(torch.from_numpy(deq))
            count += 1
    for name, module in model.named_modules():
        if "vision_tower" in name or "multi_modal_projector" in name:
            continue  # image-text fixtures: mobius builds the text decoder only
        if isinstance(module, torch.nn.Linear):
            w_kn = module.weight.detach().numpy().T  # [out, in] -> [K, N]
            module.weight.copy_(torch.from_numpy(fake_quantize(w_kn, bits, block, symmetric, dtype).T.copy()))
            count += 1
        elif isinstance(module, Conv1D):  # GPT-2: weight is [in, out] = [K, N] already
            w_kn = module.weight.detach().numpy()
            module.weight.copy_(torch.from_numpy(fake_quantize(w_kn, bits, block, symmetric, dtype)))
            count += 1
        elif type(module).__name__.lower().endswith("topkrouter") and hasattr(module, "weight"):
            # MoE router: a Linear's [E, H] weight (Ergo's router holds a Linear, quantized above)
            w_kn = module.weight.detach().numpy().T
            module.weight.copy_(torch.from_numpy(fake_quantize(w_kn, bits, block, symmetric, dtype).T.copy()))
            count += 1
        elif isinstance(getattr(module, "gate_up_proj", None), torch.nn.Parameter):
            # MoE experts, [E, out, in] stacks ([E, in, out] where the experts say
            # is_transposed, gpt-oss, or always, Llama 4): each expert's matrix quantized as its
            # Linear would be
            # (mobius' stacked [H, E*I] / [E*I, H] weights quantize to the same blocks when the
            # expert width is a multiple of the block size; columns quantize independently, so
            # gpt-oss' interleaved gate/up columns do too).
            transposed = getattr(module, "is_transposed", False) or type(module).__name__ in IN_OUT_EXPERTS
            for stack in (module.gate_up_proj, module.down_proj):
                for e in range(stack.shape[0]):
                    w_kn = stack[e].detach().numpy()
                    w_kn = w_kn if transposed else w_kn.T
                    deq = fake_quantize(w_kn, bits, block, symmetric, dtype)
                    stack[e].copy_(torch.from_numpy(deq if transposed else deq.T.copy()))
                    count += 1
        elif type(module).__name__ == "ErgoExperts":
            # Ergo's ungated experts, [E, in, out] stacks: each expert's matrix quantized as
            # its Linear would be.
            for stack in (module.up_proj, module.down_proj):
                for e in range(stack.shape[0]):
                    deq = fake_quantize(stack[e].detach().numpy(), bits, block, symmetric, dtype)
                    stack[e].copy_(torch.from_numpy(deq))
                    count += 1
        elif type(module).__name__ == "NemotronHExperts":
            # Nemotron-H's ungated experts, [E, out, in] stacks: each expert's matrix quantized
            # as its Linear would be.
            for stack in (module.up_proj, module.down_proj):
                for e in range(stack.shape[0]):
                    deq = fake_quantize(stack[e].detach().numpy().T, bits, block, symmetric, dtype)
                    stack[e].copy_(torch.from_numpy(deq.T.copy()))
                    count += 1
        elif type(module).__name__ == "JetMoeParallelExperts":
            # JetMoE's stacked experts (the MLP's and the attention's query/output experts),
            # [E, out, in]: each expert's matrix quantized as its Linear would be.
            for e in range(module.weight.shape[0]):
                w_kn = module.weight[e].detach().numpy().T
                module.weight[e].copy_(torch.from_numpy(fake_quantize(w_kn, bits, block, symmetric, dtype).T.copy()))
                count += 1
        elif type(module).__name__ == "DbrxExpertGLU":
            # DBRX's experts, flat [E*I, H]: w1 (gate) and v1 (up) rows are each expert's
            # [out, in]; w2 rows are each expert's down projection as [in, out] = [K, N].
            width = module.ffn_hidden_size
            for stack, kn in ((module.w1, False), (module.v1, False), (module.w2, True)):
                for e in range(module.moe_num_experts):
                    rows = stack[e * width:(e + 1) * width]
                    w_kn = rows.detach().numpy() if kn else rows.detach().numpy().T
                    deq = fake_quantize(w_kn, bits, block, symmetric, dtype)
                    rows.copy_(torch.from_numpy(deq if kn else deq.T.copy()))
                    count += 1
    return model, count


@torch.no_grad()
def greedy(model, input_ids: list[int]):
    # Families with learned or sinusoidal positions, and ALiBi models, have no rope_parameters.
    rope = getattr(model.config, "rope_parameters", None) or {}
    if rope.get("rope_type") == "dynamic":
        return cached_greedy(model, input_ids)
    ids = torch.tensor([input_ids])
    prompt_logits = model(ids).logits[0].float()
    new, gaps, cur = [], [], ids
    for _ in range(N_NEW):
        last = model(cur).logits[0, -1].float()
        top2 = torch.topk(last, 2).values
        gaps.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        new.append(nxt)
        cur = torch.cat([cur, torch.tensor([[nxt]])], dim=1)
    return prompt_logits, new, gaps


@torch.no_grad()
def cached_greedy(model, input_ids: list[int]):
    """Greedy decode through the KV cache, as the fixture's reference and onnxruntime-genai run
    it: with dynamic NTK RoPE, steps past the original context rotate their new keys with the
    base of their own length, which cache-free forwards of the whole sequence do not."""
    out = model(torch.tensor([input_ids]), use_cache=True)
    prompt_logits = out.logits[0].float()
    new, gaps = [], []
    for step in range(N_NEW):
        last = out.logits[0, -1].float()
        top2 = torch.topk(last, 2).values
        gaps.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        new.append(nxt)
        if step + 1 < N_NEW:
            out = model(torch.tensor([[nxt]]), cache=out.cache, use_cache=True)
    return prompt_logits, new, gaps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    names = sorted(
        d.name
        for d in FIXTURES.iterdir()
        if (d / "reference.json").exists()
        and "greedy_tokens" in json.loads((d / "reference.json").read_text())
        # Pre-quantized checkpoints (task "prequantized-text-generation") are not requantized here;
        # hybrid decoders (task "hybrid-text-generation", tests/ort/test_hybrid.py) are.
        and json.loads((d / "reference.json").read_text()).get("task", "text-generation")
        in ("text-generation", "hybrid-text-generation")
    )
    for name in names:
        if args.only and name not in args.only:
            continue
        ref = json.loads((FIXTURES / name / "reference.json").read_text())
        out = {
            "onnxruntime_version": onnxruntime.__version__,
            "torch_version": torch.__version__,
            "transformers_version": transformers.__version__,
            "settings": {},
        }
        for key, (bits, block, symmetric, embeddings, dtype) in SETTINGS.items():
            model, count = quantized_model(FIXTURES / name, bits, block, symmetric, embeddings, dtype)
            logits, tokens, gaps = greedy(model, ref["input_ids"])
            gap = min(gaps)
            out["settings"][key] = {
                "bits": bits,
                "block_size": block,
                "symmetric": symmetric,
                "embeddings": embeddings,
                "weight_dtype": np.dtype(dtype).name,
                "quantized_weights": count,
                "logits": [[rnd(v) for v in row] for row in logits.tolist()],
                "greedy_tokens": tokens,
                "min_top2_gap": rnd(gap),
                "top2_gaps": [rnd(g) for g in gaps],
            }
            print(f"{name} {key}: {count} weights, min top-2 gap {gap:.4g}")
        (FIXTURES / name / "quant_reference.json").write_text(json.dumps(out, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
