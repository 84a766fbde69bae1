"""The I/O contract of an encoder model.onnx written by `mobius build` (docs/families.md, "Encoders"):
inputs input_ids, attention_mask and -- when the config has more than one token
type -- token_type_ids, all INT64 [batch, sequence_len]; one output
last_hidden_state [batch, sequence_len, hidden_size] in the model dtype."""

from __future__ import annotations

import onnx
from onnx import TensorProto

from contract import DIM_PARAMS, ELEM, IR_VERSION, OPSET, PRODUCER, _shape


def encoder_inputs(cfg: dict) -> list[str]:
    """Graph inputs, in order, for an HF config.json (transformers' default type_vocab_size is 2)."""
    names = ["input_ids", "attention_mask"]
    if cfg.get("type_vocab_size", 2) > 1:
        names.append("token_type_ids")
    return names


def encoder_contract_errors(model: onnx.ModelProto, cfg: dict, dtype: str) -> list[str]:
    """Every violation of the encoder I/O contract (empty: OK)."""
    errs: list[str] = []
    if model.ir_version != IR_VERSION:
        errs.append(f"ir_version {model.ir_version} != {IR_VERSION}")
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    if opsets.get("ai.onnx") != OPSET:
        errs.append(f"default-domain opset {opsets.get('ai.onnx')} != {OPSET} (opset_import: {opsets})")
    if model.producer_name != PRODUCER:
        errs.append(f"producer_name {model.producer_name!r} != {PRODUCER!r}")
    g = model.graph
    inits = {t.name for t in g.initializer}
    ins = [v for v in g.input if v.name not in inits]
    want_in = encoder_inputs(cfg)
    if [v.name for v in ins] != want_in:
        errs.append(f"graph inputs {[v.name for v in ins]} != {want_in}")
    if [v.name for v in g.output] != ["last_hidden_state"]:
        errs.append(f"graph outputs {[v.name for v in g.output]} != ['last_hidden_state']")
    tokens = [DIM_PARAMS["BATCH"], DIM_PARAMS["SEQ"]]
    expected = {n: (TensorProto.INT64, tokens) for n in want_in}
    expected["last_hidden_state"] = (ELEM[dtype], tokens + [cfg["hidden_size"]])
    for vi in list(ins) + list(g.output):
        if vi.name not in expected:
            continue
        elem, shape = expected[vi.name]
        if vi.type.tensor_type.elem_type != elem:
            errs.append(f"{vi.name}: elem_type {vi.type.tensor_type.elem_type} != {elem}")
        if _shape(vi) != shape:
            errs.append(f"{vi.name}: shape {_shape(vi)} != {shape}")
    return errs
