"""The I/O contract every model.onnx written by `mobius build` must follow."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto

from ort_helpers import cache_shapes

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


# Non-KV decoder inputs, in graph order.  input_ids and attention_mask are
# always required; position_ids is dropped by the final dead-input pass when
# no node reads it (GQA EPs), so it is optional once genai_config.json
# is the source of truth (its model.decoder.inputs is introspected from the graph).
NON_KV_INPUTS = ["input_ids", "attention_mask", "position_ids"]
REQUIRED_INPUTS = ["input_ids", "attention_mask"]
# genai_config.json model.decoder.{inputs,outputs} entries that name the KV cache.
GENAI_KV_INPUTS = {"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"}
GENAI_OUTPUTS = {"logits": "logits", "present_key_names": "present.%d.key", "present_value_names": "present.%d.value"}


def genai_decoder_io(genai_config: dict) -> tuple[list[str], list[str]]:
    """(non-KV graph input names in contract order, errors) from a parsed
    genai_config.json.  Checks the KV name templates and the outputs too."""
    errs: list[str] = []
    dec = genai_config.get("model", {}).get("decoder", {})
    ins = dec.get("inputs")
    outs = dec.get("outputs")
    if not isinstance(ins, dict):
        return list(NON_KV_INPUTS), [f"genai_config model.decoder.inputs is {ins!r}, not an object"]
    for k, v in GENAI_KV_INPUTS.items():
        if ins.get(k) != v:
            errs.append(f"genai_config decoder.inputs.{k} is {ins.get(k)!r}, expected {v!r}")
    if outs != GENAI_OUTPUTS:
        errs.append(f"genai_config decoder.outputs {outs!r} != {GENAI_OUTPUTS!r}")
    listed = {k: v for k, v in ins.items() if k not in GENAI_KV_INPUTS}
    for k, v in listed.items():
        if k != v:
            errs.append(f"genai_config decoder.inputs.{k} names graph input {v!r}; expected the same name")
        if k not in NON_KV_INPUTS:
            errs.append(f"genai_config decoder.inputs lists {k!r}, which the decoder contract does not know")
    for k in REQUIRED_INPUTS:
        if k not in listed:
            errs.append(f"genai_config decoder.inputs lacks required {k!r}")
    return [n for n in NON_KV_INPUTS if n in listed or n in REQUIRED_INPUTS], errs


def io_names(layers: int, non_kv_inputs: list[str] | None = None) -> tuple[list[str], list[str]]:
    ins = list(NON_KV_INPUTS if non_kv_inputs is None else non_kv_inputs)
    outs = ["logits"]
    for i in range(layers):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def expected_io(dims: dict, dtype: str) -> dict[str, tuple[int, list]]:
    """name -> (elem_type, shape); shape entries are ints or symbol names."""
    f = ELEM[dtype]
    exp = {
        "input_ids": (TensorProto.INT64, ["BATCH", "SEQ"]),
        "attention_mask": (TensorProto.INT64, ["BATCH", "MASK"]),
        "position_ids": (TensorProto.INT64, ["BATCH", "SEQ"]),
        "logits": (f, ["BATCH", "SEQ", dims["vocab"]]),
    }
    for i, (kv, d) in enumerate(cache_shapes(dims)):
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


def contract_errors(
    model: onnx.ModelProto, dims: dict, dtype: str, genai_config: dict | None = None
) -> list[str]:
    """Every violation of the I/O contract, as readable strings (empty: OK).

    Without genai_config the graph must have exactly input_ids, attention_mask,
    position_ids, past_key_values.*.  With it (the parsed genai_config.json of
    the same package) the non-KV inputs are the ones its model.decoder.inputs
    lists -- which must include input_ids and attention_mask -- so EPs that
    drop position_ids stay within the contract as long as the package says so.
    """
    errs: list[str] = []
    non_kv = None
    if genai_config is not None:
        non_kv, gerrs = genai_decoder_io(genai_config)
        errs += gerrs
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
    exp_in, exp_out = io_names(dims["layers"], non_kv)
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
