"""onnxruntime CPU latency of a torch.onnx export optimized by `mobius optimize --ep cpu` (with
and without `--kv-cache genai`), against `mobius build --ep cpu` of the same checkpoint, the
export itself and onnxruntime's transformers optimizer (issue 12's benchmark).

A random Llama of realistic layer shapes (hidden 512, 8 heads, 4 KV heads, 8 layers, vocab 32000,
f32, ~58M parameters; made with transformers, no download) is exported with torch.onnx
(dynamo, opset 18, KV cache, transformers' default sdpa attention; the wrapper of
scripts/make_export_fixtures.py). Each model runs in one onnxruntime CPU session (2 intra-op
threads, graph optimizations at their default level, as users run them): a prefill of 128 tokens
and one decode step after 128, batch 1, medians of --runs after 3 warm-ups, interleaved between
models. Ratios are against the `mobius build` model measured in the same run.

    /work/torchvenv/bin/python scripts/bench_exports.py --bin target/release/mobius --work DIR

Needs torch, transformers, onnx, onnxscript and onnxruntime (not part of CI).
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_export_fixtures import CacheWrapper, dyn_decoder, dyn_decoder_outputs, export, past_names  # noqa: E402

PREFILL, BATCH = 128, 1


def make_checkpoint(folder: Path) -> LlamaConfig:
    cfg = LlamaConfig(
        hidden_size=512,
        intermediate_size=1536,
        num_attention_heads=8,
        num_key_value_heads=4,
        num_hidden_layers=8,
        vocab_size=32000,
        max_position_embeddings=1024,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(folder)
    return cfg


def export_model(folder: Path, out: Path, cfg: LlamaConfig) -> None:
    model = LlamaForCausalLM.from_pretrained(folder, attn_implementation="sdpa", dtype=torch.float32).eval()
    layers, kv, hd = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    names_in = ["input_ids", "attention_mask", "position_ids", *past_names(layers, "past_key_values")]
    names_out = ["logits", *past_names(layers, "present")]
    past = 3
    args = (
        torch.randint(3, cfg.vocab_size, (2, 5)),
        torch.ones(2, past + 5, dtype=torch.int64),
        torch.arange(past, past + 5).repeat(2, 1),
        *[torch.randn(2, kv, past, hd) for _ in range(2 * layers)],
    )
    export(CacheWrapper(model, layers), args, out / "model.onnx", names_in, names_out,
           dyn_decoder(names_in, True), True, dyn_decoder_outputs(names_out))


def run(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def ort_optimized(src: Path, out: Path, cfg: LlamaConfig) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    m = optimize_model(str(src), model_type="gpt2", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size)
    out.mkdir(parents=True, exist_ok=True)
    m.save_model_to_file(str(out / "model.onnx"), use_external_data_format=True)


def feeds(session: ort.InferenceSession, cfg: LlamaConfig, seq: int, past: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    hd = cfg.hidden_size // cfg.num_attention_heads
    out = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            out[i.name] = rng.integers(3, cfg.vocab_size, (BATCH, seq)).astype(np.int64)
        elif i.name == "attention_mask":
            out[i.name] = np.ones((BATCH, past + seq), dtype=np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.arange(past, past + seq, dtype=np.int64)[None].repeat(BATCH, 0)
        elif i.name.startswith("past_key_values"):
            out[i.name] = rng.standard_normal((BATCH, cfg.num_key_value_heads, past, hd)).astype(np.float32)
        else:
            raise SystemExit(f"unexpected input {i.name}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, required=True, help="the mobius binary")
    ap.add_argument("--work", type=Path, required=True, help="folder for the checkpoint and models")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    work = args.work.resolve()
    ckpt, exported = work / "checkpoint", work / "export"
    if not (ckpt / "config.json").exists():
        cfg = make_checkpoint(ckpt)
    else:
        cfg = LlamaConfig.from_pretrained(ckpt)
    if not (exported / "model.onnx").exists():
        export_model(ckpt, exported, cfg)
    models = {"export": exported / "model.onnx"}
    for name, cmd in [
        ("mobius optimize --ep cpu", [str(args.bin), "optimize", str(exported / "model.onnx"), str(work / "optimized"), "--ep", "cpu", "--overwrite", "-q"]),
        ("mobius optimize --ep cpu --kv-cache genai", [str(args.bin), "optimize", str(exported / "model.onnx"), str(work / "optimized-genai"), "--ep", "cpu", "--kv-cache", "genai", "--overwrite", "-q"]),
        ("mobius build --ep cpu", [str(args.bin), "build", "--config", str(ckpt), str(work / "built"), "--ep", "cpu", "--overwrite", "-q"]),
    ]:
        took = run(cmd)
        print(f"{name}: {took:.2f} s", file=sys.stderr)
    models["mobius optimize"] = work / "optimized" / "model.onnx"
    models["mobius optimize --kv-cache genai"] = work / "optimized-genai" / "model.onnx"
    models["mobius build"] = work / "built" / "model.onnx"
    start = time.perf_counter()
    ort_optimized(exported / "model.onnx", work / "ort-optimized", cfg)
    print(f"onnxruntime transformers optimizer: {time.perf_counter() - start:.2f} s", file=sys.stderr)
    models["onnxruntime transformers optimizer"] = work / "ort-optimized" / "model.onnx"

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sessions = {k: ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]) for k, p in models.items()}
    cases = {"prefill 128": (PREFILL, 0), "decode after 128": (1, PREFILL)}
    times = {(m, c): [] for m in sessions for c in cases}
    data = {(m, c): feeds(s, cfg, *cases[c]) for m, s in sessions.items() for c in cases}
    for _ in range(3):
        for (m, c), f in data.items():
            sessions[m].run(None, f)
    for _ in range(args.runs):
        for (m, c), f in data.items():
            start = time.perf_counter()
            sessions[m].run(None, f)
            times[(m, c)].append(time.perf_counter() - start)
    base = "mobius build"
    print(f"| model | nodes | {' | '.join(cases)} |")
    print("| --- | ---: |" + " ---: |" * len(cases))
    for m, p in models.items():
        nodes = len(onnx.load(str(p), load_external_data=False).graph.node)
        cells = []
        for c in cases:
            med = statistics.median(times[(m, c)]) * 1e3
            ratio = med / (statistics.median(times[(base, c)]) * 1e3)
            cells.append(f"{med:.2f} ms ({ratio:.2f}×)")
        print(f"| {m} | {nodes} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
