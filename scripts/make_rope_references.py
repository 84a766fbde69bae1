#!/usr/bin/env python3
"""transformers' RoPE frequencies and cos/sin scale for scaled-RoPE configs, the reference of
tests/rope_transformers.rs (developer tool: needs torch and transformers; CI never runs it).

Each case is a Qwen2 config.json (spelled as config.json files spell it, v4 `rope_scaling` or v5
`rope_parameters`); transformers reads it with Qwen2Config.from_dict and computes the inverse
frequencies and attention scaling with its rope init function. Writes tests/data/rope/scaled.json:

    {"transformers_version": str, "torch_version": str,
     "cases": [{"name": str, "config": {...}, "inv_freq": [float32 as float],
                "attention_scaling": float}]}

Usage: python scripts/make_rope_references.py
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from transformers import Qwen2Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "rope" / "scaled.json"


def config(head_dim: int, max_pos: int, **extra) -> dict:
    heads = 4
    return {
        "model_type": "qwen2", "hidden_size": heads * head_dim, "intermediate_size": 128,
        "num_attention_heads": heads, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 300, "max_position_embeddings": max_pos, **extra,
    }


CASES = {
    # The qwen2-yarn fixture's rope.
    "fixture": config(16, 128, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 32}),
    # Qwen2.5's published spelling (v4).
    "qwen2.5_v4": config(128, 131072, rope_theta=1e6, rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}),
    # DeepSeek-V3 style: mscale and mscale_all_dim (equal: attention factor 1).
    "mscale_equal": config(64, 163840, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40, "original_max_position_embeddings": 4096,
        "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}),
    "mscale_differ": config(64, 163840, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 40, "original_max_position_embeddings": 4096,
        "mscale": 0.707, "mscale_all_dim": 1.0}),
    # gpt-oss style: no truncation of the correction range.
    "no_truncate": config(64, 131072, rope_parameters={
        "rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}),
    # factor null: max_position_embeddings / original; explicit attention factor; partial rotary.
    "factor_from_ratio": config(32, 8192, rope_parameters={
        "rope_type": "yarn", "rope_theta": 500000.0, "factor": None, "original_max_position_embeddings": 1024,
        "attention_factor": 0.8, "partial_rotary_factor": 0.5}),
    # An empty ramp (beta_fast == beta_slow, not truncated): transformers widens it by 0.001.
    "empty_ramp": config(16, 256, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 128,
        "beta_fast": 2.0, "beta_slow": 2.0, "truncate": False}),
    # The original context at top level wins over the nested one (v4 Phi-3 spelling).
    "top_level_original": config(16, 512, rope_theta=10000.0, original_max_position_embeddings=64, rope_scaling={
        "type": "yarn", "factor": 8.0, "original_max_position_embeddings": 16, "beta_fast": 16, "beta_slow": 2}),
    # Dynamic NTK within max_position_embeddings: the plain frequencies.
    "dynamic": config(16, 128, rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}),
}


def main() -> None:
    cases = []
    for name, cfg in CASES.items():
        hf = Qwen2Config.from_dict(cfg)
        kind = hf.rope_parameters["rope_type"]
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[kind](hf, None)
        assert inv_freq.dtype == torch.float32
        cases.append({"name": name, "config": cfg, "inv_freq": inv_freq.tolist(),
                      "attention_scaling": float(scaling)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"transformers_version": transformers.__version__,
                               "torch_version": torch.__version__, "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}")


if __name__ == "__main__":
    main()
