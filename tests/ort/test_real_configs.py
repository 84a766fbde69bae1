"""`mobius build --no-weights` on real published configs (tests/data/configs):
the graph must pass the onnx checker and follow the I/O contract.  Decoders are
built with the CLI default EP; encoders (bert, roberta) for every buildable
built-in EP, against the encoder contract."""

from __future__ import annotations

import json

import onnx
import pytest

from ort_helpers import CONFIGS_DIR, config_names_for_encoders, load_config, model_dims
from contract import check_model_without_data, contract_errors
from encoder_contract import encoder_contract_errors
from test_fixtures import BUILDS, _ids

NAMES = config_names_for_encoders(False)
ENCODER_NAMES = config_names_for_encoders(True)
DTYPES = ["f32", "f16"]
# A --no-weights package must not contain the weights.  Its data file may be a
# sparse placeholder of the full apparent size, so count allocated blocks.  The
# bound leaves room for computed tables (RoPE cos/sin caches: 131072 positions x
# 128 x f32 = 64 MiB) and stays far below the smallest real weights (~1 GB).
MAX_PACKAGE_BYTES = 256 * 1024 * 1024


def test_configs_present():
    assert len(NAMES) >= 5, f"expected the 5 real configs under {CONFIGS_DIR}, found {NAMES}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_real_config_no_weights(built, name, dtype):
    out = built("config", name, dtype)
    path = out / "model.onnx"
    check_model_without_data(path)
    model = onnx.load(str(path), load_external_data=False)
    dims = model_dims(load_config(CONFIGS_DIR / name))
    errs = contract_errors(model, dims, dtype)
    assert not errs, "\n".join(errs)
    used = sum(p.stat().st_blocks * 512 for p in out.rglob("*") if p.is_file())
    assert used <= MAX_PACKAGE_BYTES, f"--no-weights package uses {used} bytes on disk"


# Every buildable built-in EP in the dtype it is built for in practice (as test_fixtures.py).
EP_BUILDS = BUILDS[2:]


@pytest.mark.parametrize("ep,dtype", EP_BUILDS, ids=_ids(EP_BUILDS))
@pytest.mark.parametrize("name", NAMES)
def test_real_config_no_weights_per_ep(built, name, ep, dtype):
    out = built("config", name, dtype, ep)
    path = out / "model.onnx"
    check_model_without_data(path)
    model = onnx.load(str(path), load_external_data=False)
    genai = json.loads((out / "genai_config.json").read_text())
    errs = contract_errors(model, model_dims(load_config(CONFIGS_DIR / name)), dtype, genai)
    assert not errs, "\n".join(errs)


def test_encoder_configs_present():
    assert {"bert-base-uncased", "roberta-base"} <= set(ENCODER_NAMES), ENCODER_NAMES


@pytest.mark.parametrize("ep,dtype", BUILDS, ids=_ids(BUILDS))
@pytest.mark.parametrize("name", ENCODER_NAMES)
def test_real_encoder_config_no_weights(built, name, ep, dtype):
    out = built("config", name, dtype, ep)
    path = out / "model.onnx"
    check_model_without_data(path)
    model = onnx.load(str(path), load_external_data=False)
    errs = encoder_contract_errors(model, load_config(CONFIGS_DIR / name), dtype)
    assert not errs, "\n".join(errs)
    assert not (out / "genai_config.json").exists()
    used = sum(p.stat().st_blocks * 512 for p in out.rglob("*") if p.is_file())
    assert used <= MAX_PACKAGE_BYTES, f"--no-weights package uses {used} bytes on disk"
