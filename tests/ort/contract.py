"""The I/O contract every model.onnx written by `mobius build` must follow."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto

IR_VERSION = 11
OPSET = 24
PRODUCER = "mobius"

ELEM = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}

# Symbolic dimension names (dim_param), exactly as the graph must spell them.
# BATCH: batch size; SEQ: new tokens this call; PAST: cached tokens;
# MASK: attention_mask width (= PAST + SEQ); TOTAL: present length (= PAST + SEQ).
# MASK and TOTAL are the same quantity spelled two ways, on purpose.
DIM_PARAMS = {
    "BATCH": "batch",
    "SEQ": "sequence_len",
    "PAST": "past_sequence_len",
    "MASK": "past_seq_len + seq_len",
    "TOTAL": "past_sequence_len + sequence_len",
}


def io_names(layers: int) -> tuple[list[str], list[str]]:
    ins = ["input_ids", "attention_mask", "position_ids"]
    outs = ["logits"]
    for i in range(layers):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def expected_io(dims: dict, dtype: str) -> dict[str, tuple[int, list]]:
    """name -> (elem_type, shape); shape entries are ints or symbol names."""
    f = ELEM[dtype]
    kv, d = dims["kv_heads"], dims["head_dim"]
    exp = {
        "input_ids": (TensorProto.INT64, ["BATCH", "SEQ"]),
        "attention_mask": (TensorProto.INT64, ["BATCH", "MASK"]),
        "position_ids": (TensorProto.INT64, ["BATCH", "SEQ"]),
        "logits": (f, ["BATCH", "SEQ", dims["vocab"]]),
    }
    for i in range(dims["layers"]):
        for part in ("key", "value"):
            exp[f"past_key_values.{i}.{part}"] = (f, ["BATCH", kv, "PAST", d])
            exp[f"present.{i}.{part}"] = (f, ["BATCH", kv, "TOTAL", d])
    return exp


def _shape(vi: onnx.ValueInfoProto) -> list:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    out = []
    for dim in t.shape.dim:
        if dim.HasField("dim_value"):
            out.append(int(dim.dim_value))
        elif dim.HasField("dim_param") and dim.dim_param:
            out.append(str(dim.dim_param))
        else:
            out.append(None)  # unknown dimension: not allowed by the contract
    return out


def contract_errors(model: onnx.ModelProto, dims: dict, dtype: str) -> list[str]:
    """Every violation of the I/O contract, as readable strings (empty: OK)."""
    errs: list[str] = []
    if model.ir_version != IR_VERSION:
        errs.append(f"ir_version {model.ir_version} != {IR_VERSION}")
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    if opsets.get("ai.onnx") != OPSET:
        errs.append(f"default-domain opset {opsets.get('ai.onnx')} != {OPSET} (opset_import: {opsets})")
    if model.producer_name != PRODUCER:
        errs.append(f"producer_name {model.producer_name!r} != {PRODUCER!r}")

    g = model.graph
    init_names = {t.name for t in g.initializer}
    in_names = [v.name for v in g.input if v.name not in init_names]
    out_names = [v.name for v in g.output]
    exp_in, exp_out = io_names(dims["layers"])
    if in_names != exp_in:
        errs.append(f"graph inputs {in_names} != {exp_in}")
    if out_names != exp_out:
        errs.append(f"graph outputs {out_names} != {exp_out}")

    exp = expected_io(dims, dtype)
    for vi in list(g.input) + list(g.output):
        if vi.name not in exp:
            continue
        elem, shape = exp[vi.name]
        got_elem = vi.type.tensor_type.elem_type
        if got_elem != elem:
            errs.append(
                f"{vi.name}: elem_type {TensorProto.DataType.Name(got_elem)} != {TensorProto.DataType.Name(elem)}"
            )
        got = _shape(vi)
        if got is None or len(got) != len(shape):
            errs.append(f"{vi.name}: shape {got} does not have rank {len(shape)} (expected {shape})")
            continue
        for axis, (e, a) in enumerate(zip(shape, got)):
            if isinstance(e, int):
                if a != e:
                    errs.append(f"{vi.name}: dim {axis} is {a!r}, expected {e}")
            elif a != DIM_PARAMS[e]:
                errs.append(f"{vi.name}: dim {axis} is {a!r}, expected symbolic {DIM_PARAMS[e]!r} ({e})")
    return errs


def external_locations(model: onnx.ModelProto) -> set[str]:
    locs = set()
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            for kv in t.external_data:
                if kv.key == "location":
                    locs.add(kv.value)
    return locs


def check_model_file(path: Path) -> None:
    """onnx.checker full check, path based (external data stays on disk)."""
    onnx.checker.check_model(str(path), full_check=True)


def check_model_without_data(path: Path) -> str:
    """Full check of a model whose external weight files may be absent
    (`--no-weights`).  The checker only verifies that the files named by
    external_data exist; if any is missing, the model is checked from a scratch
    copy next to empty placeholder files.  Returns how it was checked."""
    proto = onnx.load(str(path), load_external_data=False)
    missing = sorted(loc for loc in external_locations(proto) if not (path.parent / loc).is_file())
    if not missing:
        check_model_file(path)
        return "in place"
    with tempfile.TemporaryDirectory() as td:
        tdp = Path(td)
        shutil.copy(path, tdp / path.name)
        for loc in missing:
            p = (tdp / loc).resolve()
            assert tdp.resolve() in p.parents, f"external location {loc!r} escapes the model folder"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()
        check_model_file(tdp / path.name)
    return f"placeholders for {missing}"
