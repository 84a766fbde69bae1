"""Fixtures of the `mobius` Python package tests (scripts/python_tests.sh runs them).

The package under test is the installed wheel (`import mobius`); the CLI it must agree with is
$MOBIUS_BIN. Hub ids resolve offline in a Hugging Face cache laid out here, whose
`meta-llama/Llama-3.2-1B` snapshot holds the tiny llama fixture.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SEED_ID = "meta-llama/Llama-3.2-1B"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def mobius_bin() -> Path:
    path = Path(os.environ.get("MOBIUS_BIN", REPO / "target" / "debug" / "mobius"))
    if not path.is_file():
        raise AssertionError(f"the mobius CLI is not at {path}: build it or set MOBIUS_BIN")
    return path


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs the CLI; fails the test with its stderr when it exits non-zero."""
    done = subprocess.run(
        [str(mobius_bin()), "--quiet", *args], capture_output=True, text=True, timeout=300, env=env
    )
    if done.returncode != 0:
        raise AssertionError(f"mobius {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done


def assert_same_files(a: Path, b: Path) -> None:
    """The two folders hold the same file names with the same bytes."""
    names_a = sorted(p.name for p in a.iterdir())
    names_b = sorted(p.name for p in b.iterdir())
    assert names_a == names_b, f"{a}: {names_a} vs {b}: {names_b}"
    for name in names_a:
        left, right = (a / name).read_bytes(), (b / name).read_bytes()
        assert left == right, f"{name} differs: {a / name} ({len(left)} bytes) vs {b / name} ({len(right)} bytes)"


def assert_genai_greedy(folder: Path, fixture: Path) -> None:
    """onnxruntime-genai generates, from the package in `folder`, the greedy tokens transformers
    generated for `fixture`'s prompt (its reference.json)."""
    import json

    import numpy as np
    import onnxruntime_genai as og

    ref = json.loads((fixture / "reference.json").read_text())
    ids, want = ref["input_ids"], ref["greedy_tokens"]
    total = len(ids) + len(want)
    params = og.GeneratorParams(model := og.Model(str(folder)))
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(ids, dtype=np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    assert gen.get_sequence(0).tolist()[len(ids):] == want


def lay_out_cache(cache: Path, repo_id: str, fixture: Path) -> Path:
    """A Hugging Face cache entry for `repo_id` (ref main) whose snapshot is a copy of `fixture`."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(fixture, snapshot)
    return snapshot


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory) -> Path:
    """The offline Hugging Face cache holding meta-llama/Llama-3.2-1B (the tiny llama)."""
    cache = tmp_path_factory.mktemp("hf") / "hub"
    lay_out_cache(cache, SEED_ID, FIXTURES / "llama")
    return cache


@pytest.fixture(autouse=True)
def offline_hub(hub_cache, monkeypatch):
    """Every test runs offline against `hub_cache` (the Rust library reads these at each build)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file of zero-filled tensors `{name: (dtype, shape)}`, written sparse (the
    data is a hole), so a large checkpoint costs no time or disk to make."""
    import json
    import struct

    sizes = {"F32": 4, "F16": 2, "BF16": 2}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + offset)


@pytest.fixture(scope="session")
def big_checkpoint(tmp_path_factory) -> Path:
    """A llama checkpoint of ~130 MB (zero weights): long enough to save that a save can be
    interrupted, or watched from another thread, while it runs."""
    import json

    folder = tmp_path_factory.mktemp("big") / "llama-big"
    folder.mkdir()
    config = json.loads((FIXTURES / "llama" / "config.json").read_text())
    hidden, inter, layers, vocab, heads, kv = 512, 2048, 4, 16000, 8, 4
    head_dim = hidden // heads
    config.update(
        hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, vocab_size=vocab,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, tie_word_embeddings=False,
    )
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {"model.embed_tokens.weight": ("F32", [vocab, hidden]), "lm_head.weight": ("F32", [vocab, hidden]),
               "model.norm.weight": ("F32", [hidden])}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": ("F32", [hidden]),
            p + "post_attention_layernorm.weight": ("F32", [hidden]),
            p + "self_attn.q_proj.weight": ("F32", [heads * head_dim, hidden]),
            p + "self_attn.k_proj.weight": ("F32", [kv * head_dim, hidden]),
            p + "self_attn.v_proj.weight": ("F32", [kv * head_dim, hidden]),
            p + "self_attn.o_proj.weight": ("F32", [hidden, heads * head_dim]),
            p + "mlp.gate_proj.weight": ("F32", [inter, hidden]),
            p + "mlp.up_proj.weight": ("F32", [inter, hidden]),
            p + "mlp.down_proj.weight": ("F32", [hidden, inter]),
        }
    write_safetensors(folder / "model.safetensors", tensors)
    return folder
