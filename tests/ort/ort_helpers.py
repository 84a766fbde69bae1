"""Paths, fixture discovery and the `mobius` runner for the tests in tests/ort.

The binary under test comes from $MOBIUS_BIN (default: target/debug/mobius,
relative to the repository root).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
FIXTURES_DIR = REPO / "tests" / "fixtures"
CONFIGS_DIR = REPO / "tests" / "data" / "configs"
MIN_FIXTURES = 4
BUILD_TIMEOUT_S = 300

# dtype flag -> numpy dtype of the model's float tensors
NP_DTYPES = {"f32": np.float32, "f16": np.float16}


def fixture_names() -> list[str]:
    if not FIXTURES_DIR.is_dir():
        return []
    return sorted(p.name for p in FIXTURES_DIR.iterdir() if (p / "reference.json").is_file())


def config_names() -> list[str]:
    if not CONFIGS_DIR.is_dir():
        return []
    return sorted(p.name for p in CONFIGS_DIR.iterdir() if (p / "config.json").is_file())


def mobius_bin() -> Path:
    raw = os.environ.get("MOBIUS_BIN", "target/debug/mobius")
    p = Path(raw)
    if not p.is_absolute():
        p = REPO / p
    return p


def load_reference(name: str) -> dict:
    return json.loads((FIXTURES_DIR / name / "reference.json").read_text())


def load_config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())


SIZE_SPELLINGS = {
    "num_attention_heads": ("n_head", "num_heads", "attention_heads", "n_heads"),
    "hidden_size": ("n_embd", "d_model"),
    "num_hidden_layers": ("n_layer", "num_layers", "n_layers"),
}


def model_dims(cfg: dict) -> dict:
    """Dimensions the exported graph must expose, from an HF config.json."""
    if "text_config" in cfg:  # an image-text model: the graph is its text decoder
        cfg = cfg["text_config"]
    if "decoder_attention_heads" in cfg:  # BART-style decoders (bart_lm): the decoder's sizes
        cfg = {**cfg, "num_attention_heads": cfg["decoder_attention_heads"], "hidden_size": cfg["d_model"],
               "num_hidden_layers": cfg["decoder_layers"]}
    # Other spellings of the sizes (transformers' attribute maps: GPT-2-like n_* (BLOOM too),
    # GPT-Neo's, XGLM's, EXAONE 3's, MPT's and DBRX's), read where the generic name is absent.
    for generic, spellings in SIZE_SPELLINGS.items():
        if generic not in cfg:
            cfg = {**cfg, generic: next(cfg[s] for s in spellings if s in cfg)}
    if cfg.get("model_type") == "longcat_flash":
        # LongCat-Flash: two attention sublayers per layer, one cache each (transformers'
        # num_hidden_layers is 2 * num_layers).
        cfg = {**cfg, "num_hidden_layers": 2 * cfg["num_layers"]}
    if cfg.get("model_type") == "mllama_text_model":
        # Mllama on text alone: the cross-attention layers are skipped, one cache per
        # self-attention layer.
        cross = cfg.get("cross_attention_layers") or [3, 8, 13, 18, 23, 28, 33, 38]
        cfg = {**cfg, "num_hidden_layers": sum(i not in cross for i in range(cfg["num_hidden_layers"]))}
    if cfg.get("model_type") == "dbrx":  # the key/value heads in attn_config
        cfg = {**cfg, "num_key_value_heads": (cfg.get("attn_config") or {}).get("kv_n_heads", 1)}
    if cfg.get("model_type") == "mimo_v2_flash" and "sliding_attention" in (cfg.get("layer_types") or []):
        # MiMo-V2-Flash's sliding layers have twice the key/value heads: every layer caches as
        # many (the full layers' heads stored twice) and v widened to the q/k head size.
        cfg = {**cfg, "num_key_value_heads": 2 * cfg["num_key_value_heads"]}
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    if cfg.get("model_type") in ("gemma4_text", "gemma4_unified_text", "gemma3n_text"):
        return {**gemma4_cache(cfg), "heads": heads, "hidden": cfg["hidden_size"], "vocab": cfg["vocab_size"]}
    if "kv_lora_rank" in cfg:
        # Multi-head latent attention: every head caches k of the q/k head size (config.json's
        # head_dim is the RoPE width) and v widened to it.
        head_dim = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    return {
        "layers": cfg["num_hidden_layers"],
        "heads": heads,
        "kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "hidden": cfg["hidden_size"],
        # The logits' width: Apertus 1.5's head may be pruned to output_vocab_size ids.
        "vocab": cfg.get("output_vocab_size") or cfg["vocab_size"],
    }


def gemma4_cache(cfg: dict) -> dict:
    """Gemma 4's (and Gemma 3n's) caches: one per layer before the last num_kv_shared_layers (those reuse an
    earlier layer's keys and values), each of its layer's own shape (full layers: the heads
    per_layer_config gives them); `kv_heads` and `head_dim` are the config's (genai_config's)."""
    kv, d = cfg["num_key_value_heads"], cfg["head_dim"]
    cached = cfg["num_hidden_layers"] - (cfg.get("num_kv_shared_layers") or 0)
    overrides = {int(k): v for k, v in (cfg.get("per_layer_config") or {}).items()}
    caches = [
        (overrides.get(i, {}).get("num_key_value_heads", kv), overrides.get(i, {}).get("head_dim", d))
        for i in range(cached)
    ]
    return {"layers": cached, "kv_heads": kv, "head_dim": d, "caches": caches}


def cache_shapes(dims: dict) -> list[tuple[int, int]]:
    """Each cached layer's (key/value heads, head size): `dims["caches"]` where the layers
    differ, else the one shape of every layer."""
    return dims.get("caches") or [(dims["kv_heads"], dims["head_dim"])] * dims["layers"]


def run_mobius_unchecked(args: list[str]) -> subprocess.CompletedProcess:
    """Run the binary and return the finished process, whatever its exit status."""
    exe = mobius_bin()
    if not exe.is_file():
        raise AssertionError(f"mobius binary not found at {exe} (set MOBIUS_BIN or run `cargo build`)")
    cmd = [str(exe), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


def list_eps() -> dict[str, dict]:
    """name -> capability record, from `mobius list eps --json` (registration order; read once)."""
    global _EPS
    if _EPS is None:
        _EPS = {e["name"]: e for e in json.loads(run_mobius(["list", "eps", "--json"]).stdout)}
    return _EPS


_EPS: dict[str, dict] | None = None


def run_mobius(args: list[str]) -> subprocess.CompletedProcess:
    proc = run_mobius_unchecked(args)
    cmd = proc.args
    if proc.returncode != 0:
        raise AssertionError(
            f"`{' '.join(cmd)}` exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc


# Fixture tasks, from reference.json "task" (decoder fixtures predate the key).
DECODER_TASK = "text-generation"
ENCODER_TASK = "feature-extraction"
# Pre-quantized checkpoints (GPTQ, AWQ, FP8) of a float fixture: tests/ort/test_prequantized.py.
PREQUANT_TASK = "prequantized-text-generation"
# Hybrid decoders (conv or recurrent state beside the KV cache): tests/ort/test_hybrid.py.
HYBRID_TASK = "hybrid-text-generation"
# HF model_types mobius builds as encoders (feature extraction, no genai_config.json).
ENCODER_MODEL_TYPES = {"bert", "roberta"}


def fixture_task(name: str) -> str:
    return load_reference(name).get("task", DECODER_TASK)


def fixture_names_for(task: str) -> list[str]:
    return [n for n in fixture_names() if fixture_task(n) == task]


def config_names_for_encoders(encoders: bool) -> list[str]:
    """Published configs (tests/data/configs) of encoders, or of decoders."""
    return [n for n in config_names() if (load_config(CONFIGS_DIR / n)["model_type"] in ENCODER_MODEL_TYPES) == encoders]


# The one comparison of numbers in tests/ort (the Rust tests' tests/common/compare.rs follows the
# same rule; docs/testing.md): shapes must be equal; a finite pair is equal when
# |got - want| <= atol + rtol * |want|; a non-finite value (NaN, +-inf) equals only the same
# non-finite value at the same position, so NaN or an infinity on one side only always fails.
# np.testing.assert_allclose (equal_nan=True) and assert_array_equal follow the same rule and
# may be used as they are.


def _diff(got, want, atol: float, rtol: float):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape}, expected {want.shape}")
    finite = np.isfinite(got) & np.isfinite(want)
    same_special = ~finite & ((got == want) | (np.isnan(got) & np.isnan(want)))
    mismatch = ~finite & ~same_special
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, or beyond f64 range
        diff = np.where(finite, np.abs(got - want), 0.0)
    diff[mismatch] = np.inf
    excess = np.where(finite, diff - (atol + rtol * np.abs(np.where(finite, want, 0.0))), -np.inf)
    excess[mismatch] = np.inf
    return got, want, diff, excess


def max_abs_diff(got, want) -> float:
    """Largest |got - want| of two arrays of one shape: inf when NaN or an infinity meets a
    different value (for checks that two results differ, and for messages)."""
    _, _, diff, _ = _diff(got, want, 0.0, 0.0)
    return float(diff.max()) if diff.size else 0.0


def assert_close(got, want, atol: float, what: str, rtol: float = 0.0) -> float:
    """Raises AssertionError naming `what`, the count of failing elements and the worst one
    unless `got` equals `want` under the rule above; returns the largest |got - want|."""
    try:
        got, want, diff, excess = _diff(got, want, atol, rtol)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None
    failed = int((excess > 0).sum())
    if failed:
        i = np.unravel_index(int(np.argmax(excess)), excess.shape)
        raise AssertionError(
            f"{what}: {failed} of {excess.size} elements out of tolerance (atol {atol:g}, rtol {rtol:g}); "
            f"worst at {tuple(int(j) for j in i)}: got {float(got[i])!r}, expected {float(want[i])!r} "
            f"(|difference| {float(diff[i]):.3g})"
        )
    return float(diff.max()) if diff.size else 0.0


# Achieved figures (max abs errors, cosines) the tests record; conftest prints them at the end
# of the run, one table each, so the margin to each bound is visible, not only pass or fail.
ACHIEVED: dict[str, list[tuple[str, float]]] = {}


def record_achieved(table: str, build: str, figure: float) -> None:
    """Adds (build, figure) to the end-of-run table `table`."""
    ACHIEVED.setdefault(table, []).append((build, figure))
