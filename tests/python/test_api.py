"""The `mobius` package's API beyond the seed: the reference package's names, defaults and
exceptions, the package mapping, saving (atomic, interruptible, off the GIL), hostile input,
write_ort_genai_config and optimize/verify/cost against the CLI."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

import mobius
from conftest import FIXTURES, SEED_ID, assert_genai_greedy, assert_same_files, run_cli
from mobius.integrations.ort_genai import write_ort_genai_config

LLAMA = FIXTURES / "llama"

# mobius-onnx 0.1.0's EpCapabilities fields, in order, with their defaults.
REFERENCE_FIELDS = [
    ("name", dataclasses.MISSING),
    ("gqa_dtypes", frozenset()),
    ("qkv_pack_dtypes", frozenset()),
    ("supports_fused_rope", True),
    ("supports_skip_layer_norm", True),
    ("supports_fused_moe", True),
    ("supports_packed_multi_head_attention", False),
    ("supports_rank4_rmsnorm", True),
    ("supports_attention", True),
    ("supports_matmul_nbits", True),
    ("supports_rotary_embedding", True),
    ("supports_tensor_scatter", True),
    ("supports_range", True),
    ("default_int4_accuracy_level", 0),
    ("provider_options", {}),
    ("enable_graph_capture", False),
    ("supports_past_present_share_buffer", False),
    ("cap_kv_buffer_max_length", False),
    ("max_buffer_size", None),
    ("requires_graph_capture_rewrite", False),
]
# Of those, the ones that change nothing in a mobius build, with their defaults.
WITHOUT_EFFECT = {
    "supports_packed_multi_head_attention": False,
    "max_buffer_size": None,
    "requires_graph_capture_rewrite": False,
}


# ------------------------------------------------------------------ EpCapabilities + registry
def test_ep_capabilities_has_the_reference_fields_and_defaults():
    fields = dataclasses.fields(mobius.EpCapabilities)
    assert [f.name for f in fields[: len(REFERENCE_FIELDS)]] == [n for n, _ in REFERENCE_FIELDS]
    caps = mobius.EpCapabilities(name="defaults-only")
    for name, default in REFERENCE_FIELDS[1:]:
        assert getattr(caps, name) == default, name
    assert isinstance(caps.gqa_dtypes, frozenset)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.supports_attention = False  # type: ignore[misc]


def test_builtin_eps_round_trip_and_match_the_cli():
    listed = {e["name"]: e for e in json.loads(run_cli("list", "eps", "--json").stdout)}
    assert sorted(mobius.ep_registry) == sorted(listed)
    for name in listed:
        caps = mobius.get_ep(name)
        assert caps._to_json() and json.loads(caps._to_json())["gqa_dtypes"] == sorted(listed[name]["gqa_dtypes"])
        assert caps.provider_options == listed[name]["provider_options"]
        assert all(isinstance(d, ir.DataType) for d in caps.gqa_dtypes | caps.qkv_pack_dtypes)
        assert mobius.EpCapabilities(**{f.name: getattr(caps, f.name) for f in dataclasses.fields(caps)}) == caps


def test_registry_is_a_mapping_of_names():
    reg = mobius.ep_registry
    assert "cuda" in reg and "nope" not in reg and 3 not in reg
    assert len(reg) == len(list(reg)) == len(reg.names())
    assert reg.get("nope") is None
    sentinel = mobius.get_ep("cpu")
    assert reg.get("nope", sentinel) is sentinel
    with pytest.raises(ValueError, match=r"Unknown execution provider 'nope'. Registered: \['cpu'"):
        reg.require("nope")
    with pytest.raises(ValueError, match="Unknown execution provider"):
        mobius.get_ep("nope")


def test_register_refuses_a_taken_name_unless_overwrite():
    caps = mobius.EpCapabilities(name="api-ep", gqa_dtypes=frozenset({ir.DataType.FLOAT}))
    mobius.register_ep(caps)
    with pytest.raises(ValueError, match="already registered"):
        mobius.register_ep(caps)
    changed = dataclasses.replace(caps, supports_skip_layer_norm=False)
    mobius.register_ep(changed, overwrite=True)
    assert mobius.get_ep("api-ep") == changed
    with pytest.raises(ValueError, match="already registered"):
        mobius.ep_registry.register(mobius.EpCapabilities(name="cuda"))
    with pytest.raises(TypeError):
        mobius.register_ep({"name": "dict-ep"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"supports_fused_rope": False, "qkv_pack_dtypes": frozenset({ir.DataType.FLOAT16})}, ValueError, "qkv_pack_dtypes"),
        ({"cap_kv_buffer_max_length": True}, ValueError, "supports_past_present_share_buffer"),
        ({"default_int4_accuracy_level": 7}, ValueError, "default_int4_accuracy_level"),
        ({"gqa_dtypes": frozenset({ir.DataType.INT8})}, ValueError, "not a model dtype"),
        ({"gqa_dtypes": [ir.DataType.FLOAT16]}, TypeError, "frozenset"),
        ({"supports_attention": "yes"}, TypeError, "must be a bool"),
        ({"provider_options": {"enable_cuda_graph": "1"}}, ValueError, "enable_cuda_graph"),
        ({"provider_options": {"k": 1}}, TypeError, "str to str"),
        ({"cost": {"memory_bandwidth_gbps": -1.0}}, ValueError, "memory_bandwidth_gbps"),
        ({"cost": {"bandwidth": 1.0}}, ValueError, "unknown cost parameter `bandwidth`"),
        ({"unknown_field": True}, TypeError, "unknown_field"),
    ],
)
def test_invalid_capabilities_raise(kwargs, error, match):
    with pytest.raises(error, match=match):
        mobius.EpCapabilities(name="bad-ep", **kwargs)


def test_invalid_name_raises():
    with pytest.raises(ValueError, match="Bad Name"):
        mobius.EpCapabilities(name="Bad Name")


def test_ep_file_argument_agrees_with_the_cli(tmp_path):
    ep_file = tmp_path / "file-ep.toml"
    ep_file.write_text('name = "file-ep"\nbase = "cpu"\nsupports_skip_layer_norm = false\n')
    mobius.build(str(LLAMA), ep_file=str(ep_file)).save(tmp_path / "py")
    assert mobius.get_ep("file-ep").supports_skip_layer_norm is False
    run_cli("build", "--config", str(LLAMA), str(tmp_path / "cli"), "--ep", "file-ep", "--ep-file", str(ep_file))
    assert_same_files(tmp_path / "py", tmp_path / "cli")


# ------------------------------------------------------------------ build + ModelPackage
def test_package_is_a_mapping_with_an_onnx_ir_model(tmp_path):
    pkg = mobius.build(str(LLAMA), execution_provider="cpu")
    assert list(pkg) == list(pkg.keys()) == ["model"] and len(pkg) == 1 and "model" in pkg
    with pytest.raises(KeyError):
        pkg["decoder"]
    model = pkg["model"]
    assert isinstance(model, ir.Model) and pkg["model"] is model
    assert pkg.config.model_type == "llama" and pkg.config.hidden_size == 64 and pkg.config.num_hidden_layers == 2
    assert pkg.execution_provider == "cpu" and pkg.dtype == "f32"
    pkg.save(tmp_path / "out")
    saved = onnx.load(str(tmp_path / "out" / "model.onnx"), load_external_data=False)
    assert [n.op_type for n in model.graph] == [n.op_type for n in saved.graph.node]
    assert sorted(model.graph.initializers) == sorted(i.name for i in saved.graph.initializer)
    assert [i.name for i in model.graph.inputs] == [i.name for i in saved.graph.input]


@pytest.mark.parametrize(
    "kwargs,cli",
    [
        ({"dtype": ir.DataType.BFLOAT16, "execution_provider": "cuda"}, ["--dtype", "bf16", "--ep", "cuda"]),
        ({"load_weights": False}, ["--no-weights"]),
        ({"quant": "int4", "quant_block_size": 16, "execution_provider": "cpu"}, ["--quant", "int4", "--quant-block-size", "16", "--ep", "cpu"]),
        ({"features": ["prune-lm-head"]}, ["--features", "prune-lm-head"]),
        ({"features": ["static-cache"], "max_seq_len": 64}, ["--features", "static-cache", "--max-seq-len", "64"]),
    ],
    ids=["bf16-cuda", "no-weights", "int4", "prune-lm-head", "static-cache"],
)
def test_our_keyword_arguments_match_the_cli_flags(kwargs, cli, tmp_path):
    mobius.build(str(LLAMA), **kwargs).save(tmp_path / "py")
    run_cli("build", "--config", str(LLAMA), str(tmp_path / "cli"), *cli)
    assert_same_files(tmp_path / "py", tmp_path / "cli")


def test_save_refuses_a_non_empty_folder_and_leaves_it(tmp_path):
    pkg = mobius.build(str(LLAMA))
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OSError, match="not empty"):
        pkg.save(out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    pkg.save(out, overwrite=True)
    assert (out / "model.onnx").is_file() and not (out / "keep.txt").exists()
    with pytest.raises(ValueError, match="inside the checkpoint folder"):
        pkg.save(LLAMA / "inside")
    assert not (LLAMA / "inside").exists()
    with pytest.raises(ValueError, match="safetensors"):
        pkg.save(tmp_path / "st", external_data="safetensors")
    assert not (tmp_path / "st").exists()


# ------------------------------------------------------------------ hostile input
@pytest.mark.parametrize(
    "args,kwargs,error,match",
    [
        ((123,), {}, TypeError, "model_id must be a str"),
        ((str(LLAMA),), {"dtype": 16}, TypeError, "dtype must be"),
        ((str(LLAMA),), {"dtype": "f8"}, ValueError, "Unknown dtype 'f8'"),
        ((str(LLAMA),), {"execution_provider": "tpu"}, ValueError, r"Unknown execution provider 'tpu'. Registered: \["),
        ((str(LLAMA),), {"execution_provider": None}, TypeError, "execution_provider must be a str"),
        ((str(LLAMA),), {"load_weights": "no"}, TypeError, "load_weights must be a bool"),
        ((str(LLAMA),), {"task": "image-classification"}, ValueError, "Unknown task"),
        ((str(LLAMA),), {"task": "feature-extraction"}, ValueError, "builds it as a decoder"),
        ((str(LLAMA),), {"features": ["warp-drive"]}, ValueError, "unknown feature `warp-drive`"),
        ((str(LLAMA),), {"features": ["static-cache"]}, ValueError, "needs --max-seq-len"),
        ((str(LLAMA),), {"quant": "int3"}, ValueError, "Unknown quant"),
        ((str(LLAMA),), {"quant": "int4", "quant_block_size": 24}, ValueError, "quant_block_size 24"),
        ((str(LLAMA),), {"accuracy_level": 9}, ValueError, "accuracy_level"),
        (("/no/such/folder",), {}, OSError, "/no/such/folder"),
        (("org/not-cached",), {}, OSError, "org/not-cached"),
    ],
)
def test_bad_build_arguments_raise(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        mobius.build(*args, **kwargs)


def test_broken_checkpoints_raise_naming_the_file(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama", "hidden_size": "wide"')
    with pytest.raises(ValueError, match="config.json"):
        mobius.build(str(broken), load_weights=False)
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "config.json").write_text('{"model_type": "flux-capacitor"}')
    with pytest.raises(ValueError, match="unsupported model_type `flux-capacitor`"):
        mobius.build(str(unknown), load_weights=False)
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_bytes((LLAMA / "config.json").read_bytes())
    (truncated / "model.safetensors").write_bytes((LLAMA / "model.safetensors").read_bytes()[:100])
    with pytest.raises(ValueError, match="model.safetensors"):
        mobius.build(str(truncated))


# ------------------------------------------------------------------ GIL and Ctrl-C
def test_save_releases_the_gil(big_checkpoint, tmp_path):
    pkg = mobius.build(str(big_checkpoint), dtype="f16")
    ticks = 0
    worker = threading.Thread(target=pkg.save, args=(tmp_path / "out",))
    start = time.perf_counter()
    worker.start()
    while worker.is_alive():
        ticks += 1
        time.sleep(0.001)
    took = time.perf_counter() - start
    assert (tmp_path / "out" / "model.onnx.data").stat().st_size > 50_000_000
    # Held GIL: this thread would not run at all until the save returned.
    assert ticks >= 0.5 * took / 0.0011, (ticks, took)


INTERRUPT = r"""
import os, signal, sys, threading, time
import mobius
src, out = sys.argv[1], sys.argv[2]
parent, name = os.path.dirname(out), os.path.basename(out)
pkg = mobius.build(src, dtype="f16")
# Python raises KeyboardInterrupt on SIGINT only if it installed its handler, which it does not
# when started with SIGINT ignored (a background job of a non-interactive shell): install it.
signal.signal(signal.SIGINT, signal.default_int_handler)
def interrupt_once_staged():
    while not any(n.startswith("." + name + ".mobius-tmp-") for n in os.listdir(parent)):
        time.sleep(0.0005)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupt_once_staged, daemon=True).start()
start = time.perf_counter()
try:
    pkg.save(out)
    print("saved")
except KeyboardInterrupt:
    print("interrupted")
stopped = time.perf_counter() - start
print(sorted(os.listdir(parent)))
start = time.perf_counter()
pkg.save(out)
print(stopped, time.perf_counter() - start)
"""


def test_ctrl_c_stops_a_save_and_leaves_nothing(big_checkpoint, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPT, str(big_checkpoint), str(out)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["interrupted", "[]"], done.stdout + done.stderr
    # The writer stops at the next initializer, not at the end of the save.
    stopped, whole = map(float, lines[2].split())
    assert stopped < 0.5 * whole, (stopped, whole)


# ------------------------------------------------------------------ ort_genai
def test_write_ort_genai_config_from_a_local_folder_and_genai_generates(tmp_path):
    pkg = mobius.build(str(LLAMA), execution_provider="cpu")
    out = tmp_path / "out"
    pkg.save(out)
    saved_config = (out / "genai_config.json").read_bytes()
    written = write_ort_genai_config(pkg, str(out), hf_model_id=str(LLAMA), ep="cpu")
    assert written["genai_config"] == str(out / "genai_config.json")
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(written)
    assert (out / "genai_config.json").read_bytes() == saved_config
    assert_genai_greedy(out, LLAMA)


def test_write_ort_genai_config_from_the_cache_and_for_another_ep(tmp_path):
    pkg = mobius.build(SEED_ID, execution_provider="cuda", dtype="f16", load_weights=False)
    written = write_ort_genai_config(pkg, tmp_path / "g", hf_model_id=SEED_ID, ep="cuda")
    assert "tokenizer.json" in written
    cli = tmp_path / "cli"
    run_cli("build", "--model", SEED_ID, str(cli), "--ep", "cuda", "--dtype", "f16", "--no-weights")
    assert (tmp_path / "g" / "genai_config.json").read_bytes() == (cli / "genai_config.json").read_bytes()
    written = write_ort_genai_config(pkg, tmp_path / "bare", ep="default")
    assert list(written) == ["genai_config"]
    providers = json.loads((tmp_path / "bare" / "genai_config.json").read_text())["model"]["decoder"]["session_options"]["provider_options"]
    assert providers == [], providers
    with pytest.raises(ValueError, match="Unknown execution provider"):
        write_ort_genai_config(pkg, tmp_path / "x", ep="tpu")
    with pytest.raises(TypeError):
        write_ort_genai_config("pkg", tmp_path / "x")  # type: ignore[arg-type]


# ------------------------------------------------------------------ optimize / verify / cost
def test_optimize_verify_cost_match_the_cli(tmp_path):
    src = tmp_path / "src"
    run_cli("build", "--config", str(LLAMA), str(src))
    report = mobius.optimize(src / "model.onnx", tmp_path / "py", execution_provider="cpu")
    run_cli("optimize", str(src / "model.onnx"), str(tmp_path / "cli"), "--ep", "cpu")
    assert_same_files(tmp_path / "py", tmp_path / "cli")
    assert report["execution_provider"] == "cpu" and report["nodes_after"] > 0
    cost = mobius.cost(src / "model.onnx", execution_provider="cuda", dims={"past_sequence_len": 64})
    cli_cost = json.loads(run_cli("cost", str(src / "model.onnx"), "--ep", "cuda", "--dims", "past_sequence_len=64", "--json").stdout)
    assert cost == cli_cost
    verdict = mobius.verify(src / "model.onnx", tmp_path / "py" / "model.onnx", samples=1)
    assert verdict["passed"] is True and verdict["outputs"] and all(o["within"] for o in verdict["outputs"])
    with pytest.raises(ValueError, match="samples"):
        mobius.verify(src / "model.onnx", src / "model.onnx", samples=0)
    with pytest.raises(FileNotFoundError):
        mobius.cost(tmp_path / "missing.onnx")


def test_task_names_the_role_the_model_has(tmp_path):
    assert mobius.build(str(LLAMA), task="text-generation", load_weights=False).config.role == "decoder"
    bert = mobius.build(str(FIXTURES / "bert"), task="feature-extraction")
    assert bert.config.role == "encoder"
    bert.save(tmp_path / "py")
    run_cli("build", "--config", str(FIXTURES / "bert"), str(tmp_path / "cli"))
    assert_same_files(tmp_path / "py", tmp_path / "cli")
    with pytest.raises(ValueError, match="builds it as an encoder"):
        mobius.build(str(FIXTURES / "bert"), task="text-generation", load_weights=False)


def test_builtin_eps_equal_the_reference_packages():
    """tests/python/data/reference_eps.json: every built-in EP of mobius-onnx 0.1.0, its fields
    (dtype sets as sorted names), dumped from that package with torch installed."""
    reference = json.loads((Path(__file__).parent / "data" / "reference_eps.json").read_text())
    builtins = [e["name"] for e in json.loads(run_cli("list", "eps", "--json").stdout)]
    assert sorted(builtins) == sorted(reference)
    for name, fields in reference.items():
        caps = mobius.get_ep(name)
        fields = {f: v for f, v in fields.items() if f not in WITHOUT_EFFECT}
        ours = {f: (sorted(str(d) for d in getattr(caps, f)) if f.endswith("dtypes") else getattr(caps, f)) for f in fields}
        assert ours == fields, name
        assert all(getattr(caps, f) == default for f, default in WITHOUT_EFFECT.items()), name


def test_fields_without_effect_are_accepted_with_a_warning(tmp_path):
    """mobius-onnx's fields that change nothing in a mobius build keep their place and
    defaults; another value warns that it has no effect, and the build is the base EP's."""
    for field, value in [
        ("max_buffer_size", 1 << 28),
        ("requires_graph_capture_rewrite", True),
        ("supports_packed_multi_head_attention", True),
    ]:
        with pytest.warns(UserWarning, match=f"{field} has no effect"):
            caps = dataclasses.replace(mobius.get_ep("cpu"), name=f"cpu-{field.replace('_', '-')}", **{field: value})
        assert getattr(caps, field) == value
        mobius.register_ep(caps)
        assert mobius.get_ep(caps.name) == dataclasses.replace(caps, **{field: WITHOUT_EFFECT[field]})
    mobius.build(str(LLAMA), execution_provider="cpu-max-buffer-size").save(tmp_path / "compat")
    mobius.build(str(LLAMA), execution_provider="cpu").save(tmp_path / "cpu")
    assert (tmp_path / "compat" / "model.onnx").read_bytes() == (tmp_path / "cpu" / "model.onnx").read_bytes()


def test_the_dtype_is_the_eps_default_and_one_its_runtime_runs(tmp_path):
    """EpCapabilities carries the model dtypes an EP's runtime runs and its default (issue 29):
    a build without dtype takes the EP's default, whatever the checkpoint stores; a dtype the
    EP cannot run raises ValueError before any work; a custom EP's fields steer its builds."""
    cpu, cuda = mobius.get_ep("cpu"), mobius.get_ep("cuda")
    assert cpu.dtypes == frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})
    assert cpu.default_dtype == ir.DataType.FLOAT
    assert cuda.default_dtype == ir.DataType.FLOAT16 and ir.DataType.BFLOAT16 in cuda.dtypes
    bf16 = FIXTURES / "llama-bf16-sharded"
    assert mobius.build(str(bf16), execution_provider="cpu").dtype == "f32"
    assert mobius.build(str(bf16), execution_provider="cuda", load_weights=False).dtype == "f16"
    with pytest.raises(ValueError, match="`cpu` does not run bf16 models; its dtypes are f32, f16"):
        mobius.build(str(bf16), execution_provider="cpu", dtype="bf16")
    mobius.register_ep(
        mobius.EpCapabilities(
            name="half-only", dtypes=frozenset({ir.DataType.FLOAT16}), default_dtype=ir.DataType.FLOAT16
        )
    )
    assert mobius.get_ep("half-only").dtypes == frozenset({ir.DataType.FLOAT16})
    mobius.build(str(LLAMA), execution_provider="half-only").save(tmp_path / "py")
    (tmp_path / "half-only.toml").write_text('name = "half-only"\ndtypes = ["f16"]\ndefault_dtype = "f16"\n')
    run_cli("build", "--config", str(LLAMA), str(tmp_path / "cli"), "--ep-file", str(tmp_path / "half-only.toml"))
    assert_same_files(tmp_path / "py", tmp_path / "cli")
    with pytest.raises(ValueError, match="default_dtype"):
        mobius.EpCapabilities(name="bad-default", dtypes=frozenset({ir.DataType.FLOAT16}))
