#!/usr/bin/env python3
"""Writes a random bf16 Llama (or Mixtral) checkpoint for `scripts/bench.sh weights` (numpy only).

    make_bench_checkpoint.py OUT_DIR [--shards N] [--layers L] [--moe]

OUT_DIR gets config.json and either model.safetensors (--shards 1, the default) or N shards
model-0000i-of-0000N.safetensors plus model.safetensors.index.json, as Hugging Face saves them.
The default shape (hidden 1024, 16 heads, 8 KV heads, intermediate 2816, 20 layers, vocab 32768,
untied head) has about 303M parameters: 606 MB of bf16. Weights are 0.02 * N(0, 1) (norms 1),
rounded to bf16 by truncation, from a fixed seed, so every run writes the same bytes.

With --moe the checkpoint is a Mixtral (the same attention, and in each layer a router over
8 experts of intermediate 3584, 2 picked per token, instead of the MLP); with --layers 4 it has
about 420M parameters: 0.84 GB of bf16, 0.70 GB of it expert weights that a build stacks.
"""

import argparse
import json
import os
import struct

import numpy as np

HIDDEN = 1024
HEADS = 16
KV_HEADS = 8
INTERMEDIATE = 2816
VOCAB = 32768
EXPERTS = 8
EXPERT_INTERMEDIATE = 3584


def tensors(layers, moe):
    """(name, shape) of every tensor, in the order Hugging Face lists them."""
    head_dim = HIDDEN // HEADS
    out = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (HIDDEN,)),
            (p + "self_attn.q_proj.weight", (HEADS * head_dim, HIDDEN)),
            (p + "self_attn.k_proj.weight", (KV_HEADS * head_dim, HIDDEN)),
            (p + "self_attn.v_proj.weight", (KV_HEADS * head_dim, HIDDEN)),
            (p + "self_attn.o_proj.weight", (HIDDEN, HEADS * head_dim)),
            (p + "post_attention_layernorm.weight", (HIDDEN,)),
        ]
        if moe:
            m = p + "block_sparse_moe."
            out.append((m + "gate.weight", (EXPERTS, HIDDEN)))
            for e in range(EXPERTS):
                out += [
                    (m + f"experts.{e}.w1.weight", (EXPERT_INTERMEDIATE, HIDDEN)),
                    (m + f"experts.{e}.w2.weight", (HIDDEN, EXPERT_INTERMEDIATE)),
                    (m + f"experts.{e}.w3.weight", (EXPERT_INTERMEDIATE, HIDDEN)),
                ]
        else:
            out += [
                (p + "mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN)),
                (p + "mlp.up_proj.weight", (INTERMEDIATE, HIDDEN)),
                (p + "mlp.down_proj.weight", (HIDDEN, INTERMEDIATE)),
            ]
    out += [("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (VOCAB, HIDDEN))]
    return out


def bf16_bytes(rng, name, shape):
    """Random bf16 values of a tensor (norm weights are ones), as little-endian bytes."""
    if len(shape) == 1:
        values = np.ones(shape, dtype=np.float32)
    else:
        values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    return (values.view(np.uint32) >> 16).astype("<u2").tobytes()


def write_safetensors(path, items, rng):
    """One safetensors file holding `items` ((name, shape) pairs), streamed tensor by tensor."""
    header, offset = {}, 0
    for name, shape in items:
        size = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in items:
            f.write(bf16_bytes(rng, name, shape))
    return offset


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--moe", action="store_true", help="a Mixtral: 8 experts per layer")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "dtype": "bfloat16",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": args.layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
        "tie_word_embeddings": False,
        "vocab_size": VOCAB,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    if args.moe:
        config.update(
            architectures=["MixtralForCausalLM"],
            model_type="mixtral",
            intermediate_size=EXPERT_INTERMEDIATE,
            num_local_experts=EXPERTS,
            num_experts_per_tok=2,
            sliding_window=None,
        )
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    rng = np.random.default_rng(13)
    items = tensors(args.layers, args.moe)
    if args.shards <= 1:
        write_safetensors(os.path.join(args.out, "model.safetensors"), items, rng)
        return
    per = -(-len(items) // args.shards)
    weight_map, total = {}, 0
    for s in range(args.shards):
        part = items[s * per : (s + 1) * per]
        name = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
        total += write_safetensors(os.path.join(args.out, name), part, rng)
        weight_map.update({n: name for n, _ in part})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    with open(os.path.join(args.out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)


if __name__ == "__main__":
    main()
