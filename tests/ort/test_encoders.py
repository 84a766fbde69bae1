"""Encoder fixtures (reference.json "task": "feature-extraction": bert, roberta)
built with `mobius build` for the CLI default and every buildable built-in EP,
checked with onnx and onnxruntime against transformers' last_hidden_state
(scripts/make_fixtures.py): a batch-1 unpadded case and right- and left-padded
batches of 2, compared on the positions the attention mask marks valid.

Encoders have no onnxruntime-genai support (it runs generative models only), so
their packages carry no genai_config.json and there is no generation check.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from encoder_contract import encoder_contract_errors, encoder_inputs
from ort_helpers import (
    ENCODER_TASK,
    FIXTURES_DIR,
    NP_DTYPES,
    assert_close,
    fixture_names_for,
    load_config,
    load_reference,
)
from contract import check_model_file
from test_fixtures import BUILDS, TOL, TOKENIZER_FILES, _ids, all_nodes

NAMES = fixture_names_for(ENCODER_TASK)
per_build = pytest.mark.parametrize("ep,dtype", BUILDS, ids=_ids(BUILDS))
per_fixture = pytest.mark.parametrize("name", NAMES)


def test_encoder_fixtures_present():
    assert {"bert", "roberta"} <= set(NAMES), f"encoder fixtures under {FIXTURES_DIR}: {NAMES}"


def test_reference_cases_are_consistent():
    for name in NAMES:
        ref = load_reference(name)
        cfg = load_config(FIXTURES_DIR / name)
        assert [c["name"] for c in ref["cases"]] == ["single", "right_padded", "left_padded"], name
        for case in ref["cases"]:
            ids = np.array(case["input_ids"])
            hidden = np.array(case["last_hidden_state"])
            assert hidden.shape == ids.shape + (cfg["hidden_size"],), (name, case["name"])
            assert ("token_type_ids" in case) == ("token_type_ids" in encoder_inputs(cfg)), name
            assert np.array(case["attention_mask"]).shape == ids.shape, name


@per_build
@per_fixture
def test_onnx_checker(built, name, ep, dtype):
    check_model_file(built("fixture", name, dtype, ep) / "model.onnx")


@per_build
@per_fixture
def test_graph_contract(built, name, ep, dtype):
    model = onnx.load(str(built("fixture", name, dtype, ep) / "model.onnx"), load_external_data=False)
    errs = encoder_contract_errors(model, load_config(FIXTURES_DIR / name), dtype)
    assert not errs, "\n".join(errs)


@per_build
@per_fixture
def test_package_files(built, name, ep, dtype):
    out = built("fixture", name, dtype, ep)
    for f in ("model.onnx", "model.onnx.data"):
        assert (out / f).is_file(), f"{f} missing from {out}"
    assert not (out / "genai_config.json").exists(), "encoders get no genai_config.json"
    for f in TOKENIZER_FILES:
        if (FIXTURES_DIR / name / f).is_file():
            assert (out / f).read_bytes() == (FIXTURES_DIR / name / f).read_bytes(), f"{f} not copied"


@per_build
@per_fixture
def test_encoder_graph_ops(built, ep_caps, name, ep, dtype):
    """Encoders get no GroupQueryAttention; every residual Add + LayerNorm (and the embedding
    sum) becomes SkipLayerNormalization exactly where the EP supports it; EPs without
    contrib ops get none."""
    model = onnx.load(str(built("fixture", name, dtype, ep) / "model.onnx"), load_external_data=False)
    layers = load_config(FIXTURES_DIR / name)["num_hidden_layers"]
    ops = [f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model.graph.node]
    assert "com.microsoft::GroupQueryAttention" not in ops
    # qnn runs no Attention: DecomposeAttention lowers it to MatMul/Softmax.
    lowered = ep is not None and not ep_caps[ep]["supports_attention"]
    assert ops.count("Attention") == (0 if lowered else layers), ops
    assert ops.count("Softmax") == (layers if lowered else 0), ops
    skip = ops.count("com.microsoft::SkipLayerNormalization")
    fused = ep is None or ep_caps[ep]["supports_skip_layer_norm"]
    assert skip == (1 + 2 * layers if fused else 0), (ep, skip)
    assert ops.count("LayerNormalization") == (0 if fused else 1 + 2 * layers), ops
    if ep is not None and not ep_caps[ep]["supports_contrib_ops"]:
        assert not [n for n in all_nodes(model) if n.domain == "com.microsoft"]


@per_build
@per_fixture
@pytest.mark.parametrize("case", ["single", "right_padded", "left_padded"])
def test_last_hidden_state(session_for, name, case, ep, dtype):
    ref = next(c for c in load_reference(name)["cases"] if c["name"] == case)
    sess = session_for(name, dtype, ep)
    feed = {i.name: np.array(ref[i.name], dtype=np.int64) for i in sess.get_inputs()}
    (hidden,) = sess.run(None, feed)
    assert hidden.dtype == NP_DTYPES[dtype]
    want = np.array(ref["last_hidden_state"], dtype=np.float32)
    assert hidden.shape == want.shape, (hidden.shape, want.shape)
    valid = np.array(ref["attention_mask"], dtype=bool)
    assert_close(hidden[valid], want[valid], TOL[dtype], f"{name} --ep {ep} {dtype} {case}")
