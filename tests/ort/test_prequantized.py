"""Pre-quantized checkpoints (reference.json "task": "prequantized-text-generation":
tests/fixtures/llama-gptq, llama-awq, llama-fp8, made by scripts/make_prequantized_fixtures.py)
built by mobius and run by onnxruntime and onnxruntime-genai.

The truth is external: reference.json holds transformers' f32 logits and greedy tokens of the
float model whose projections carry the checkpoint's *dequantized* weights.
- GPTQ / AWQ: the packed 4-bit weights become DequantizeLinear(values, scales, zero points)
  with the checkpoint's group size, fused into MatMulNBits on the cpu EP and kept as
  DequantizeLinear + MatMul on onnx-standard; at accuracy_level 0 the logits match the
  reference to 1e-4 (test_quant.EXACT_TOL), and onnxruntime-genai generates its greedy tokens (a token may differ
  only at a near-tie, as in test_quant.py).
- FP8: the float8 blocks are dequantized when saved (a float model, same checks), and
  `--quant int4` then quantizes them byte for byte as onnxruntime's quantizer does.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from ort_helpers import FIXTURES_DIR, PREQUANT_TASK, assert_close, fixture_names_for, load_reference, record_achieved
from test_quant import EXACT_TABLE, EXACT_TOL, _ort_quantized, check_greedy, op_counts, prefill, session

NAMES = fixture_names_for(PREQUANT_TASK)
PACKED = [n for n in NAMES if load_reference(n)["quantization"]["quant_method"] in ("gptq", "awq")]
EPS = ["cpu", "onnx-standard"]


def test_the_three_formats_have_fixtures():
    methods = sorted(load_reference(n)["quantization"]["quant_method"] for n in NAMES)
    assert methods == ["awq", "fp8", "gptq"], NAMES


def block_sizes(path) -> set[int]:
    model = onnx.load(str(path / "model.onnx"), load_external_data=False)
    sizes = set()
    for node in model.graph.node:
        for a in node.attribute:
            if a.name == "block_size" and node.op_type in ("MatMulNBits", "DequantizeLinear"):
                sizes.add(a.i)
    return sizes


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("name", NAMES)
def test_logits_match_the_dequantized_reference(built, name, ep):
    ref = load_reference(name)
    out = built("fixture", name, "f32", ep, ("--accuracy-level", "0"))
    got = prefill(session(out), name, "f32")
    want = np.asarray(ref["logits"], dtype=np.float32)
    err = assert_close(got, want, EXACT_TOL, f"{name} --ep {ep}")
    record_achieved(EXACT_TABLE, f"{name} (pre-quantized) --ep {ep}", err)
    counts = op_counts(out)
    assert not any(n in counts for n in ("MatMulNBits", "DequantizeLinear")) or name in PACKED, counts
    if name not in PACKED:
        return
    q = ref["quantization"]
    projections = ref["quantized_weights"]
    if ep == "onnx-standard":
        assert counts.get("MatMulNBits", 0) == 0 and counts.get("DequantizeLinear", 0) == projections, counts
        model = onnx.load(str(out / "model.onnx"), load_external_data=False)
        assert all(n.domain in ("", "ai.onnx") for n in model.graph.node), "contrib ops on onnx-standard"
    else:
        assert counts.get("MatMulNBits", 0) > 0 and counts.get("DequantizeLinear", 0) == 0, counts
    assert block_sizes(out) == {q["group_size"]}, (name, ep, block_sizes(out))


@pytest.mark.parametrize("name", NAMES)
def test_genai_greedy(built, name):
    ref = load_reference(name)
    out = built("fixture", name, "f32", "cpu", ("--accuracy-level", "0"))
    check_greedy(name, out, ref["input_ids"], ref["greedy_tokens"], ref["top2_gaps"])


def test_fp8_weights_are_requantized_as_onnxruntime_would(built):
    """`--quant int4` on the FP8 checkpoint quantizes its dequantized projections like float
    weights: byte for byte what onnxruntime's quantizer writes for the float build of the same
    checkpoint (the dequantized weights), on the default EP."""
    name = next(n for n in NAMES if load_reference(n)["quantization"]["quant_method"] == "fp8")
    theirs = _ort_quantized(built("fixture", name, "f32", "default"), 32, True)
    ours_dir = built("fixture", name, "f32", "default", ("--quant", "int4"))
    ours_model = onnx.load(str(ours_dir / "model.onnx"))
    ours = {t.name: onnx.numpy_helper.to_array(t) for t in ours_model.graph.initializer}
    compared = 0
    for node in ours_model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        weight = node.input[1].removesuffix(".q4__nbits")
        assert f"{weight}_Q4" in theirs, f"{name}: onnxruntime's quantizer left {weight} in float"
        for mine, ort_name in [(node.input[1], f"{weight}_Q4"), (node.input[2], f"{weight}_scales")]:
            assert ours[mine].tobytes() == theirs[ort_name].tobytes(), f"{name} {mine} differs from {ort_name}"
        compared += 1
    # The checkpoint's quantized projections, and the tied LM head (which _ort_quantized reads
    # as an initializer, as mobius quantizes it).
    tied = json.loads((FIXTURES_DIR / name / "config.json").read_text()).get("tie_word_embeddings", False)
    assert compared == load_reference(name)["quantized_weights"] + int(tied), compared


def test_a_packed_checkpoint_with_quant_keeps_its_own_quantization(built):
    """`--quant int4` leaves the checkpoint's packed weights as they are: every MatMulNBits of
    the build without --quant is in the --quant build, its packed values, scales and zero
    points byte for byte (the checkpoint's group size), and the one MatMulNBits added is the
    tied LM head, the only weight still float (int4 block 32, symmetric)."""
    name = next(n for n in NAMES if load_reference(n)["quantization"]["quant_method"] == "awq")
    plain = built("fixture", name, "f32", "cpu", ("--accuracy-level", "0"))
    out = built("fixture", name, "f32", "cpu", ("--quant", "int4", "--accuracy-level", "0"))
    assert block_sizes(out) == {load_reference(name)["quantization"]["group_size"], 32}, block_sizes(out)

    def nbits(path) -> dict[str, tuple]:
        model = onnx.load(str(path / "model.onnx"))
        inits = {t.name: t for t in model.graph.initializer}
        floats = [n.name for n in model.graph.node if n.op_type == "MatMul"]
        return {n.name: tuple(onnx.numpy_helper.to_array(inits[i]).tobytes() if i else b"" for i in [*n.input[1:4], "", ""][:3])
                for n in model.graph.node if n.op_type == "MatMulNBits"}, floats

    (before, before_floats), (after, after_floats) = nbits(plain), nbits(out)
    assert before and before_floats, (len(before), before_floats)  # the checkpoint's, and the float head
    changed = [n for n in before if after.get(n) != before[n]]
    assert not changed, f"{name}: --quant int4 changed the checkpoint's MatMulNBits {changed}"
    added = sorted(set(after) - set(before))
    assert len(added) == 1 and not after_floats, (added, after_floats)
    assert after[added[0]][2] == b"", f"{name}: the head {added[0]} is quantized asymmetrically"
    assert np.isfinite(prefill(session(out), name, "f32")).all()
