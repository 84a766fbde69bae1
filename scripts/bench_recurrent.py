#!/usr/bin/env python3
"""Decode latency of a hybrid (Gated DeltaNet) decoder against a dense one on onnxruntime's CPU
provider, after a short and a long context (docs/performance.md, "Recurrent decoders").

    bench_recurrent.py WORK_DIR [--mobius target/release/mobius] [--contexts 128 2048]
                       [--steps 3] [--rounds 5] [--threads 2]

WORK_DIR gets two random checkpoints (config.json + model.safetensors in bf16, written with
numpy, about 0.5B parameters each, from a fixed seed):

- `qwen3_5`: a Qwen3.5-shaped text decoder (`qwen3_5_text`): hidden 1024, 24 layers, three
  Gated DeltaNet layers (16 key and 16 value heads of 128) to one gated full-attention layer
  (8 heads, 2 KV heads of 256, a quarter of each rotated), MLP 3584, vocab 32768, tied;
- `qwen3`: a dense Qwen3 of about the same size: hidden 1024, 28 layers, 16 heads, 8 KV heads
  of 128, MLP 3584, vocab 32768, tied.

Each is built with `mobius build --dtype f32`: the hybrid twice, `--ep cpu` (its recurrence
fused into `com.microsoft::LinearAttention`) and an EP file based on cpu with
`supports_linear_attention = false` (the standard `Scan` form), the dense one for `--ep cpu`.
Existing checkpoints and builds are reused.

One onnxruntime session per build (CPU provider, graph optimizations on, `--threads` intra-op
threads; the three held at once) runs decode steps of one token after a state of N tokens: KV
caches of N positions, conv and recurrent states, all random (a step's cost does not depend on
the values), the attention mask N + 1 ones, position N. In each of `--rounds` rounds every
build and every N get one warm-up step, then `--steps` timed steps, each feeding the returned
caches and states back (the context grows by one per step): builds and contexts interleaved,
so a change of load hits them alike. The median over the rounds is reported, with the ratio of
the long context's to the short one's. The hybrid's two forms are also run on the same inputs
and their logits compared, and one layer's recurrence is timed alone, in both forms, for one
decode step and a 128-token prefill.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

VOCAB = 32768
HIDDEN = 1024
INTERMEDIATE = 3584


def hybrid_config() -> dict:
    layers = 24
    return {
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "dtype": "bfloat16",
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 32768,
        "num_attention_heads": 8,
        "num_hidden_layers": layers,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"partial_rotary_factor": 0.25, "rope_theta": 10000000.0, "rope_type": "default"},
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": VOCAB,
    }


def dense_config() -> dict:
    layers = 28
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "dtype": "bfloat16",
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "layer_types": ["full_attention"] * layers,
        "max_position_embeddings": 32768,
        "max_window_layers": layers,
        "num_attention_heads": 16,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": True,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


def tensors(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every checkpoint tensor of `cfg` (Hugging Face's names)."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    out = [("model.embed_tokens.weight", (cfg["vocab_size"], h)), ("model.norm.weight", (h,))]
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
        ]
        if kind == "linear_attention":
            la = p + "linear_attn."
            hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
            dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
            conv = 2 * hk * dk + hv * dv
            out += [
                (la + "A_log", (hv,)),
                (la + "dt_bias", (hv,)),
                (la + "conv1d.weight", (conv, 1, cfg["linear_conv_kernel_dim"])),
                (la + "in_proj_qkv.weight", (conv, h)),
                (la + "in_proj_z.weight", (hv * dv, h)),
                (la + "in_proj_b.weight", (hv, h)),
                (la + "in_proj_a.weight", (hv, h)),
                (la + "norm.weight", (dv,)),
                (la + "out_proj.weight", (h, hv * dv)),
            ]
        else:
            at = p + "self_attn."
            d, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
            gate = 2 if cfg["model_type"] == "qwen3_5_text" else 1
            out += [
                (at + "q_proj.weight", (gate * nh * d, h)),
                (at + "k_proj.weight", (nkv * d, h)),
                (at + "v_proj.weight", (nkv * d, h)),
                (at + "o_proj.weight", (h, nh * d)),
                (at + "q_norm.weight", (d,)),
                (at + "k_norm.weight", (d,)),
            ]
    return out


def write_checkpoint(out_dir: str, cfg: dict, seed: int) -> int:
    """config.json and a bf16 model.safetensors of random weights; returns the parameter count."""
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    specs = tensors(cfg)
    header, offset = {}, 0
    for name, shape in specs:
        size = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name, shape in specs:
            if name.endswith("A_log"):
                x = np.log(rng.uniform(1.0, 16.0, shape))
            elif name.endswith(("norm.weight", "dt_bias")):
                x = 1.0 + 0.1 * rng.standard_normal(shape)
            else:
                x = 0.02 * rng.standard_normal(shape)
            bits = x.astype(np.float32).view(np.uint32)
            f.write((bits >> 16).astype(np.uint16).tobytes())  # bf16 by truncation
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    return sum(int(np.prod(s)) for _, s in specs)


def build(mobius: str, ckpt: str, out: str, ep_args: list[str]) -> None:
    if os.path.exists(os.path.join(out, "model.onnx")):
        return
    cmd = [mobius, "build", "--config", ckpt, "--dtype", "f32", *ep_args, out]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def feeds_for(sess, context: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One decode step's inputs after `context` tokens: random caches and states."""
    dims = {"batch": 1, "sequence_len": 1, "past_sequence_len": context, "past_seq_len + seq_len": context + 1}
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims[d] for d in i.shape]
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(3, VOCAB, shape, dtype=np.int64)
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones(shape, np.int64)
        elif i.name == "position_ids":
            feeds[i.name] = np.full(shape, context, np.int64)
        else:
            feeds[i.name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return feeds


def next_feeds(sess, feeds: dict, outputs: list, rng: np.random.Generator) -> dict:
    """The following step's inputs: the returned caches and states, one more mask column."""
    named = dict(zip([o.name for o in sess.get_outputs()], outputs))
    nxt = {}
    for name, value in feeds.items():
        if name == "input_ids":
            nxt[name] = rng.integers(3, VOCAB, value.shape, dtype=np.int64)
        elif name == "attention_mask":
            nxt[name] = np.ones((value.shape[0], value.shape[1] + 1), np.int64)
        elif name == "position_ids":
            nxt[name] = value + 1
        else:
            present = name.replace("past_key_values.", "present.").replace("past.", "present.")
            nxt[name] = named[present]
    return nxt


def session(model: str | bytes, threads: int):
    """An onnxruntime CPU session of `model` (a path or the serialized model)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def decode_latency(sess, context: int, steps: int, seed: int) -> list[float]:
    """`steps` timed decode steps after `context` tokens (one warm-up step before them)."""
    rng = np.random.default_rng(seed)
    feeds = feeds_for(sess, context, rng)
    times = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        outputs = sess.run(None, feeds)
        if i >= 1:
            times.append((time.perf_counter() - t0) * 1e3)
        feeds = next_feeds(sess, feeds, outputs, rng)
    return times


def recurrence_alone(threads: int, heads: int = 16, dk: int = 128, dv: int = 128) -> None:
    """One layer's recurrence alone (a Qwen3.5 layer's 16 value heads of 128 × 128): the
    standard `Scan` (the body `src/models/components/gated_delta.rs` writes) against
    `com.microsoft::LinearAttention`, one decode step and a 128-token prefill from a random state,
    medians of 50 and 5 runs, outputs compared."""
    from onnx import TensorProto, helper as oh

    def vi(n, s):
        return oh.make_tensor_value_info(n, TensorProto.FLOAT, s)

    step = oh.make_graph([
        oh.make_node("Mul", ["s", "d"], ["kept"]),
        oh.make_node("MatMul", ["k", "kept"], ["rec"]),
        oh.make_node("Sub", ["v", "rec"], ["err"]),
        oh.make_node("Mul", ["err", "b"], ["delta"]),
        oh.make_node("Transpose", ["k"], ["kc"], perm=[0, 1, 3, 2]),
        oh.make_node("MatMul", ["kc", "delta"], ["upd"]),
        oh.make_node("Add", ["kept", "upd"], ["s2"]),
        oh.make_node("MatMul", ["q", "s2"], ["o"]),
    ], "step", [vi("s", ["B", heads, dk, dv]), vi("d", ["B", heads, 1, 1]), vi("b", ["B", heads, 1, 1]),
                vi("q", ["B", heads, 1, dk]), vi("k", ["B", heads, 1, dk]), vi("v", ["B", heads, 1, dv])],
        [vi("s2", ["B", heads, dk, dv]), vi("o", ["B", heads, 1, dv])])
    scan = oh.make_graph(
        [oh.make_node("Scan", ["past", "d", "b", "q", "k", "v"], ["state", "o"], body=step, num_scan_inputs=5,
                      scan_input_axes=[1] * 5, scan_output_axes=[1])], "scan",
        [vi("past", ["B", heads, dk, dv]), vi("d", ["B", "S", heads, 1, 1]), vi("b", ["B", "S", heads, 1, 1]),
         vi("q", ["B", "S", heads, 1, dk]), vi("k", ["B", "S", heads, 1, dk]), vi("v", ["B", "S", heads, 1, dv])],
        [vi("state", None), vi("o", None)])
    fused = oh.make_graph(
        [oh.make_node("LinearAttention", ["q", "k", "v", "past", "g", "b"], ["o", "state"], domain="com.microsoft",
                      q_num_heads=heads, kv_num_heads=heads, scale=1.0, update_rule="gated_delta")], "fused",
        [vi("q", ["B", "S", heads * dk]), vi("k", ["B", "S", heads * dk]), vi("v", ["B", "S", heads * dv]),
         vi("past", ["B", heads, dk, dv]), vi("g", ["B", "S", heads]), vi("b", ["B", "S", heads])],
        [vi("o", None), vi("state", None)])
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    sessions = {}
    for name, g in (("Scan", scan), ("LinearAttention", fused)):
        m = oh.make_model(g, opset_imports=opsets, ir_version=10)
        sessions[name] = session(m.SerializeToString(), threads)
    rng = np.random.default_rng(0)
    for s, runs in ((1, 50), (128, 5)):
        g = -rng.random((1, s, heads)).astype(np.float32)
        b = rng.random((1, s, heads)).astype(np.float32)
        q, k = (0.1 * rng.standard_normal((1, s, heads, 1, dk))).astype(np.float32), \
            (0.1 * rng.standard_normal((1, s, heads, 1, dk))).astype(np.float32)
        v = rng.standard_normal((1, s, heads, 1, dv)).astype(np.float32)
        past = (0.1 * rng.standard_normal((1, heads, dk, dv))).astype(np.float32)
        feeds = {
            "Scan": dict(past=past, d=np.exp(g)[..., None, None], b=b[..., None, None], q=q, k=k, v=v),
            "LinearAttention": dict(q=q.reshape(1, s, -1), k=k.reshape(1, s, -1), v=v.reshape(1, s, -1),
                                    past=past, g=g, b=b),
        }
        medians, outs = {}, {}
        for name, sess in sessions.items():
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                outs[name] = dict(zip(["state", "o"] if name == "Scan" else ["o", "state"],
                                      sess.run(None, feeds[name])))
                times.append((time.perf_counter() - t0) * 1e3)
            medians[name] = statistics.median(times)
        diff = max(float(np.max(np.abs(outs["Scan"][n].reshape(outs["LinearAttention"][n].shape)
                                       - outs["LinearAttention"][n]))) for n in ("o", "state"))
        print(f"one layer's recurrence, {s} token(s): Scan {medians['Scan']:.3f} ms, LinearAttention "
              f"{medians['LinearAttention']:.3f} ms ({medians['LinearAttention'] / medians['Scan']:.2f}x); "
              f"max |diff| {diff:.1e}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work")
    ap.add_argument("--mobius", default="target/release/mobius")
    ap.add_argument("--contexts", type=int, nargs="+", default=[128, 2048])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per build, context and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    work = os.path.abspath(args.work)
    ckpts = {"qwen3_5": hybrid_config(), "qwen3": dense_config()}
    for name, cfg in ckpts.items():
        d = os.path.join(work, "ckpt", name)
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            n = write_checkpoint(d, cfg, seed=len(name))
            print(f"wrote {d}: {n / 1e6:.0f}M parameters", flush=True)
    ep_file = os.path.join(work, "cpu-scan.toml")
    with open(ep_file, "w") as f:
        f.write('name = "cpu-scan"\nbase = "cpu"\nsupports_linear_attention = false\n')
    builds = {
        "qwen3_5 fused (LinearAttention)": ("qwen3_5", "qwen3_5-cpu", ["--ep", "cpu"]),
        "qwen3_5 standard (Scan)": ("qwen3_5", "qwen3_5-scan", ["--ep-file", ep_file]),
        "qwen3 dense": ("qwen3", "qwen3-cpu", ["--ep", "cpu"]),
    }
    for ckpt, out, ep_args in builds.values():
        build(args.mobius, os.path.join(work, "ckpt", ckpt), os.path.join(work, out), ep_args)

    recurrence_alone(args.threads)

    # The hybrid's two forms on the same inputs.
    fused, scan = (session(os.path.join(work, b, "model.onnx"), args.threads) for b in ("qwen3_5-cpu", "qwen3_5-scan"))
    feeds = feeds_for(fused, args.contexts[0], np.random.default_rng(0))
    diff = float(np.max(np.abs(fused.run(["logits"], feeds)[0] - scan.run(["logits"], feeds)[0])))
    print(f"qwen3_5 fused vs standard, one step after {args.contexts[0]} tokens: max |logits diff| = {diff:.2e}")
    del fused, scan

    # Every build and context once per round (interleaved, so load drifts hit them alike).
    sessions = {label: session(os.path.join(work, out, "model.onnx"), args.threads)
                for label, (_, out, _) in builds.items()}
    times = {(label, c): [] for label in builds for c in args.contexts}
    for r in range(args.rounds):
        for label, sess in sessions.items():
            for c in args.contexts:
                times[label, c] += decode_latency(sess, c, args.steps, seed=r * 10000 + c)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    rows = []
    for label in builds:
        medians = []
        for c in args.contexts:
            t = times[label, c]
            medians.append(statistics.median(t))
            print(f"{label}: after {c} tokens: median {medians[-1]:.1f} ms/token "
                  f"(quartiles {np.percentile(t, 25):.1f}-{np.percentile(t, 75):.1f}, {len(t)} steps)")
        rows.append((label, medians))
    print()
    head = " | ".join(f"after {c}" for c in args.contexts)
    print(f"| build | {head} | ratio {args.contexts[-1]}/{args.contexts[0]} |")
    print("|---|" + "---|" * (len(args.contexts) + 1))
    for label, medians in rows:
        cells = " | ".join(f"{m:.1f} ms" for m in medians)
        print(f"| {label} | {cells} | {medians[-1] / medians[0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
