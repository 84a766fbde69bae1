"""The execution-provider registry as the CLI exposes it: `mobius list eps`,
unknown `--ep` names, and the EP that cannot be built yet (qnn)."""

from __future__ import annotations

import json
import re

import onnx
import pytest

from ort_helpers import (
    DECODER_TASK,
    FIXTURES_DIR,
    fixture_names_for,
    load_config,
    load_reference,
    run_mobius,
    run_mobius_unchecked,
)
from test_fixtures import alibi_attention, genai_greedy, genai_model

# The built-ins in registration order, with their non-default fields (but mobius-onnx's supports_packed_multi_head_attention, max_buffer_size and requires_graph_capture_rewrite,
# which change nothing in a mobius build: EP files may set them, with a warning).
BUILTIN_EPS = ["default", "openvino", "cpu", "cuda", "dml", "webgpu", "mlx", "trt-rtx", "qnn", "onnx-standard"]
DEFAULTS = {
    "dtypes": ["f32", "f16", "bf16"],
    "default_dtype": "f32",
    "gqa_dtypes": [],
    "qkv_pack_dtypes": [],
    "supports_fused_rope": True,
    "supports_skip_layer_norm": True,
    "supports_fused_moe": True,
    "supports_linear_attention": False,
    "supports_rank4_rmsnorm": True,
    "supports_attention": True,
    "supports_matmul_nbits": True,
    "supports_rotary_embedding": True,
    "supports_tensor_scatter": True,
    "supports_range": True,
    "supports_fp8_kv_cache": False,
    "default_int4_accuracy_level": 0,
    "provider_options": {},
    "enable_graph_capture": False,
    "supports_past_present_share_buffer": False,
    "cap_kv_buffer_max_length": False,
}
NON_DEFAULTS = {
    "default": {},
    "openvino": {"dtypes": ["f32", "f16"], "supports_skip_layer_norm": False, "provider_options": {"device_type": "NPU"}},
    "cpu": {
        "dtypes": ["f32", "f16"],
        "gqa_dtypes": ["f32"],
        "qkv_pack_dtypes": ["f32"],
        "default_int4_accuracy_level": 4,
        "supports_past_present_share_buffer": True,
        "supports_linear_attention": True,
    },
    "cuda": {
        "default_dtype": "f16",
        "gqa_dtypes": ["f16", "bf16"],
        "qkv_pack_dtypes": ["f32", "f16", "bf16"],
        "provider_options": {"enable_skip_layer_norm_strict_mode": "1"},
        "supports_past_present_share_buffer": True,
        "supports_fp8_kv_cache": True,
        "supports_linear_attention": True,
    },
    "dml": {
        "dtypes": ["f32", "f16"],
        "default_dtype": "f16",
        "gqa_dtypes": ["f16"],
        "supports_fused_rope": False,
        "supports_past_present_share_buffer": True,
    },
    "webgpu": {
        "dtypes": ["f32", "f16"],
        "default_dtype": "f16",
        "gqa_dtypes": ["f32", "f16"],
        "qkv_pack_dtypes": ["f32", "f16"],
        "default_int4_accuracy_level": 4,
        "enable_graph_capture": True,
        "supports_past_present_share_buffer": True,
        "cap_kv_buffer_max_length": True,
    },
    "mlx": {"default_dtype": "f16", "gqa_dtypes": ["f32", "f16", "bf16"], "supports_past_present_share_buffer": True},
    "trt-rtx": {
        "default_dtype": "f16",
        "gqa_dtypes": ["f16", "bf16"],
        "qkv_pack_dtypes": ["f32", "f16", "bf16"],
        "supports_skip_layer_norm": False,
        "enable_graph_capture": True,
        "supports_past_present_share_buffer": True,
    },
    "qnn": {
        "dtypes": ["f32", "f16"],
        "supports_fused_rope": False,
        "supports_skip_layer_norm": False,
        "provider_options": {
            "backend_path": "QnnHtp.dll",
            "htp_performance_mode": "burst",
            "htp_graph_finalization_optimization_mode": "3",
            "enable_htp_shared_memory_allocator": "1",
        },
        "supports_rank4_rmsnorm": False,
        "supports_attention": False,
        "supports_matmul_nbits": False,
        "supports_rotary_embedding": False,
        "supports_tensor_scatter": False,
        "supports_range": False,
    },
    "onnx-standard": {"supports_fused_rope": False, "supports_skip_layer_norm": False},
}
# Fields the Rust registry adds to the spec's: name -> type.
EXTRA_FIELDS = {"name": str, "supports_contrib_ops": bool, "cost": dict}
GRAPH_CAPTURE_KEYS = {"enableGraphCapture", "enable_cuda_graph", "validationMode"}


@pytest.fixture(scope="module")
def eps_json() -> list[dict]:
    return json.loads(run_mobius(["list", "eps", "--json"]).stdout)


def test_list_eps_json_has_the_ten_builtins_in_order(eps_json):
    assert [e["name"] for e in eps_json] == BUILTIN_EPS


@pytest.mark.parametrize("ep", BUILTIN_EPS)
def test_list_eps_json_capabilities(eps_json, ep):
    rec = next(e for e in eps_json if e["name"] == ep)
    want = {**DEFAULTS, **NON_DEFAULTS[ep]}
    for field, value in want.items():
        assert field in rec, f"{ep}: field {field!r} missing from {sorted(rec)}"
        got = rec[field]
        if field.endswith("_dtypes"):
            got, value = sorted(got), sorted(value)
        assert got == value, f"{ep}.{field} = {rec[field]!r}, spec says {want[field]!r}"
    for field, ty in EXTRA_FIELDS.items():
        assert isinstance(rec.get(field), ty), f"{ep}.{field} = {rec.get(field)!r}, expected {ty.__name__}"
    unknown = set(rec) - set(want) - set(EXTRA_FIELDS)
    assert not unknown, f"{ep}: fields not covered by this test: {sorted(unknown)}"
    # the capability rules (EpCapabilities::validate), plus the provider_options rule
    if not rec["supports_fused_rope"]:
        assert rec["qkv_pack_dtypes"] == [], f"{ep}: packs QKV without fused RoPE"
    if rec["cap_kv_buffer_max_length"]:
        assert rec["supports_past_present_share_buffer"], f"{ep}: caps the KV buffer without sharing it"
    assert not (set(rec["provider_options"]) & GRAPH_CAPTURE_KEYS), f"{ep}: graph-capture key in provider_options"


def test_list_eps_table_names_every_builtin():
    out = run_mobius(["list", "eps"]).stdout
    first_words = [line.split()[0] for line in out.splitlines()[1:] if line.strip()]
    assert first_words == BUILTIN_EPS, out


@pytest.mark.parametrize("command", ["build", "optimize"])
def test_unknown_ep_is_refused_before_reading_the_input(tmp_path, command):
    """`--ep nope` fails on the EP name, not on the (nonexistent) input path,
    lists the registered EPs and writes nothing."""
    missing = tmp_path / "does-not-exist"
    out = tmp_path / "out"
    if command == "build":
        args = ["build", "--config", str(missing), str(out), "--ep", "nope"]
    else:
        args = ["optimize", str(missing / "model.onnx"), str(out), "--ep", "nope"]
    proc = run_mobius_unchecked(args)
    err = proc.stderr
    assert proc.returncode != 0, f"exited 0\n{proc.stdout}\n{err}"
    assert "nope" in err and "execution provider" in err, err
    assert str(missing) not in err and "does-not-exist" not in err, f"error is about the path, not the EP:\n{err}"
    m = re.search(r"registered:?\s*(.+)", err, re.IGNORECASE)
    assert m, f"registered EPs not listed:\n{err}"
    listed = re.findall(r"[A-Za-z0-9_-]+", m.group(1))
    assert set(BUILTIN_EPS) <= set(listed), f"registered EPs {listed} lack some of {BUILTIN_EPS}:\n{err}"
    assert not out.exists(), f"{out} was created"


# ---------------------------------------------------------------- qnn
QNN_FORBIDDEN = {"Attention", "RotaryEmbedding", "Range", "TensorScatter"}


# Decoder fixtures (encoders: test_encoders.py).
@pytest.mark.parametrize("name", fixture_names_for(DECODER_TASK))
def test_qnn_graph_is_decomposed(built, name):
    """qnn runs neither Attention, RotaryEmbedding, Range nor contrib ops: its build
    lowers them to standard ops, imports only the default domain and
    keeps position_ids (the decomposed rotary reads it; ALiBi models read positions from
    attention_mask and have none).  Numerics: test_fixtures.py."""
    out = built("fixture", name, "f32", "qnn")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    assert not ops & QNN_FORBIDDEN, sorted(ops & QNN_FORBIDDEN)
    assert all(n.domain == "" for n in model.graph.node), sorted({n.domain for n in model.graph.node})
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 24)}, model.opset_import
    assert {"Softmax", "MatMul", "Concat"} <= ops, sorted(ops)
    assert ("position_ids" in [i.name for i in model.graph.input]) != alibi_attention(name)


# ---------------------------------------------------------------- KV buffer
def test_an_ep_without_a_shared_kv_buffer_gets_separate_past_and_present(tmp_path):
    """`supports_past_present_share_buffer = false` on a GQA EP: genai_config.json asks
    onnxruntime-genai for separate past and present buffers (the cpu build shares them), and
    genai's greedy tokens are still transformers' (tests/build_cli.rs: the graph is the cpu
    build's)."""
    ep_file = tmp_path / "separate.toml"
    ep_file.write_text('name = "cpu-separate-kv"\nbase = "cpu"\nsupports_past_present_share_buffer = false\n')
    out = tmp_path / "out"
    run_mobius(["build", "--config", str(FIXTURES_DIR / "llama"), str(out), "--ep-file", str(ep_file)])
    config = json.loads((out / "genai_config.json").read_text())
    assert config["search"]["past_present_share_buffer"] is False, config["search"]
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert any(n.op_type == "GroupQueryAttention" for n in model.graph.node)
    ref = load_reference("llama")
    want = ref["greedy_tokens"]
    assert genai_greedy(genai_model(out, "cpu-separate-kv"), ref["input_ids"], len(want)) == want
