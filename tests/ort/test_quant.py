"""`mobius build --quant`: quantized builds of every decoder fixture, checked with
onnxruntime and onnxruntime-genai.

The truth is external:
- the quantized weights are bit-identical to what onnxruntime's own quantizer
  (`onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer`, default RTN)
  writes for the same float model, block size and symmetry;
- the logits match quant_reference.json (scripts/make_quant_references.py): transformers
  in f32 with every quantized weight replaced by onnxruntime's quantization of it,
  dequantized ("fake-quantized"): max abs error <= 1e-4 at accuracy_level 0, cosine
  similarity >= 0.999 per position at accuracy_level 4 (activations quantized to int8);
- onnxruntime-genai generates the reference's greedy tokens from the accuracy_level 0
  build, up to the first near-tie (the margin is printed when a token differs).

onnxruntime's CPU graph optimizer turns DequantizeLinear + MatMul into MatMulNBits with
accuracy_level 4 unless told otherwise; the exact comparisons set
`session.qdq_matmulnbits_accuracy_level` to 0 so that they measure the model as written.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from ort_helpers import (
    DECODER_TASK,
    FIXTURES_DIR,
    assert_close,
    fixture_names_for,
    load_config,
    load_reference,
    max_abs_diff,
    record_achieved,
)
from test_fixtures import F16_EPS, F32_EPS, dims_of, empty_past, genai_greedy, genai_model, run

NAMES = fixture_names_for(DECODER_TASK)
# Both sides compute in f32 on the same dequantized weights (a 4- or 8-bit code times an f32
# scale: exact on both sides), so they differ only by the order of f32 sums, as a float build
# and transformers do: the float builds' bound. Achieved: at most 4.8e-6 over every setting,
# fixture and EP (printed at the end of the run).
EXACT_TOL = 1e-4
# max |logit - reference| per build dtype at accuracy_level 0 (f16: the f16 builds' usual bound)
TOL = {"f32": EXACT_TOL, "f16": 2e-2}
MIN_COSINE = 0.999
EXACT_TABLE = "quantized builds at accuracy_level 0: max abs error to the fake-quantized reference"

# The int4 builds (fixture, EP, dtype, accuracy_level) that miss their bar in check_quality,
# each with the figure measured (worst cosine at level 4, max abs error at level 0). Each misses
# it by as much with onnxruntime's own quantizer on the same graph, which check_quality checks
# too. A miss not listed here fails, a listed build that does worse than its figure fails, and a
# listed build that meets the bar fails until it is removed. (docs/quantization.md, "Accuracy".)
ALLOWED_MISSES = {
    ("beam", "cpu", "f32", 4): 0.998962,
    ("deepseek_v2", "webgpu", "f16", 4): 0.992962,
    ("deepseek_v3", "cpu", "f32", 4): 0.998119,
    ("dots1", "cpu", "f32", 4): 0.954772,
    ("diffllama", "cpu", "f32", 4): 0.998847,
    ("ernie4_5", "cpu", "f32", 4): 0.997779,
    ("glm4_moe_lite", "cpu", "f32", 4): 0.998977,
    ("glm4_moe_lite", "webgpu", "f16", 4): 0.998935,
    ("ernie4_5", "webgpu", "f16", 4): 0.99688,
    ("gpt_neo", "cpu", "f32", 4): 0.997814,
    ("gpt_neo", "webgpu", "f16", 4): 0.997124,
    ("granitemoe", "cpu", "f32", 4): 0.970092,
    ("hunyuan_v1_dense", "cpu", "f32", 4): 0.998905,
    ("internlm3", "webgpu", "f16", 4): 0.998983,
    ("jetmoe", "webgpu", "f16", 4): 0.991253,
    ("laguna", "cpu", "f32", 4): 0.916762,
    ("llama", "webgpu", "f16", 4): 0.998478,
    ("minicpm5_moe", "webgpu", "f16", 4): 0.739209,
    ("olmoe", "webgpu", "f16", 4): 0.836406,
    ("phi3", "cpu", "f32", 4): 0.998419,
    ("phi3", "webgpu", "f16", 4): 0.994142,
    ("phimoe", "cpu", "f32", 4): 0.972479,
    ("qwen2_moe", "cpu", "f32", 4): 0.98471,
    ("sarvam_mla", "cpu", "f32", 4): 0.866606,
    ("smollm3", "cpu", "f32", 4): 0.997032,
    ("smollm3", "webgpu", "f16", 4): 0.997228,
    ("phi3", "cuda", "f16", 0): 0.0280496,
    ("phi3", "dml", "f16", 0): 0.0280496,
    ("phi3", "trt-rtx", "f16", 0): 0.0243875,
    ("gemma4_text", "cpu", "f32", 4): 0.998509,
    ("gemma4_text", "webgpu", "f16", 4): 0.998678,
    ("gemma4_unified_text", "cpu", "f32", 4): 0.994540,
    ("gemma4_unified_text", "webgpu", "f16", 4): 0.997021,
    ("gemma3n_text", "cpu", "f32", 4): 0.994498,
    ("gemma3n_text", "webgpu", "f16", 4): 0.995242,
}
# Token-embedding tables `--quant-embeddings` quantizes where a fixture has more than one
# (Gemma 4's and Gemma 3n's per-layer input embeddings).
EMBEDDING_TABLES = {"gemma4_text": 2, "gemma3n_text": 2}
# How far from its pinned figure a listed miss may be (the figures are pinned to 6 significant
# digits, as the end-of-run table prints them).
MISS_SLACK = 1e-6

# quant_reference.json setting -> mobius flags
SETTINGS = {
    "int4-b32-sym": ("--quant", "int4"),
    "int4-b16-asym": ("--quant", "int4", "--quant-block-size", "16", "--quant-asymmetric"),
    "int8-b32-sym": ("--quant", "int8"),
    "int4-b32-sym-embeddings": ("--quant", "int4", "--quant-embeddings"),
    "int4-b16-asym-embeddings": ("--quant", "int4", "--quant-block-size", "16", "--quant-asymmetric", "--quant-embeddings"),
}


def special_ids(name: str) -> set[int]:
    """The fixture's bos, eos and pad token ids."""
    cfg = load_config(FIXTURES_DIR / name)
    ids = set()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        v = cfg.get(key)
        ids.update(v if isinstance(v, list) else [] if v is None else [v])
    return ids


def quant_reference(name: str) -> dict:
    return json.loads((FIXTURES_DIR / name / "quant_reference.json").read_text())


def session(path, accuracy_level_for_qdq: int | None = 0):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if accuracy_level_for_qdq is not None:
        so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", str(accuracy_level_for_qdq))
    return ort.InferenceSession(str(path / "model.onnx"), so, providers=["CPUExecutionProvider"])


def prefill(sess, name: str, dtype: str) -> np.ndarray:
    ids = load_reference(name)["input_ids"]
    n = len(ids)
    logits, _ = run(sess, dims_of(name), [ids], np.ones((1, n)), np.arange(n)[None], empty_past(dims_of(name), dtype, 1))
    return logits[0].astype(np.float32)


def op_counts(path) -> dict[str, int]:
    model = onnx.load(str(path / "model.onnx"), load_external_data=False)
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_every_decoder_fixture_has_a_quant_reference():
    missing = [n for n in NAMES if not (FIXTURES_DIR / n / "quant_reference.json").is_file()]
    assert NAMES and not missing, f"run scripts/make_quant_references.py for {missing}"
    for name in NAMES:
        assert set(quant_reference(name)["settings"]) == set(SETTINGS) | {"int4-b32-sym-f16"}, name


# (setting, ep): accuracy_level 0 builds whose logits must match the fake-quantized reference.
EXACT = [
    ("int4-b32-sym", "cpu"),  # MatMulNBits, packed q/k/v
    ("int4-b32-sym", "onnx-standard"),  # DequantizeLinear + MatMul
    ("int4-b16-asym", "default"),  # MatMulNBits with zero points
    ("int4-b16-asym", "onnx-standard"),
    ("int8-b32-sym", "cpu"),
    ("int4-b32-sym-embeddings", "cpu"),  # GatherBlockQuantized
    ("int4-b32-sym-embeddings", "onnx-standard"),  # rows gathered, then dequantized
    ("int4-b16-asym-embeddings", "cpu"),
    ("int4-b16-asym-embeddings", "onnx-standard"),
]


@pytest.mark.parametrize("setting,ep", EXACT, ids=[f"{s}-{e}" for s, e in EXACT])
@pytest.mark.parametrize("name", NAMES)
def test_logits_match_the_fake_quantized_reference(built, name, setting, ep):
    out = built("fixture", name, "f32", ep, SETTINGS[setting] + ("--accuracy-level", "0"))
    want = np.asarray(quant_reference(name)["settings"][setting]["logits"], dtype=np.float32)
    got = prefill(session(out), name, "f32")
    err = assert_close(got, want, EXACT_TOL, f"{name} {setting} --ep {ep}")
    record_achieved(EXACT_TABLE, f"{name} {setting} --ep {ep}", err)
    counts = op_counts(out)
    embeddings = setting.endswith("-embeddings")
    if ep == "onnx-standard":
        assert counts.get("MatMulNBits", 0) == 0 and counts.get("DequantizeLinear", 0) > 0, counts
        assert counts.get("GatherBlockQuantized", 0) == 0, counts
    else:
        assert counts.get("MatMulNBits", 0) > 0 and counts.get("DequantizeLinear", 0) == 0, counts
        tables = EMBEDDING_TABLES.get(name, 1) if embeddings else 0
        assert counts.get("GatherBlockQuantized", 0) == tables, counts


@pytest.mark.parametrize("name", NAMES)
def test_accuracy_level_4_stays_close(built, name, tmp_path):
    """The cpu default (accuracy_level 4: onnxruntime quantizes the activations to int8 too)
    against the same reference: cosine similarity >= 0.999 per position. Where the tiny
    random fixture falls short, onnxruntime's own quantizer at level 4 on the same float graph
    must fall short by as much (the loss is the kernel's, not mobius'): both are printed."""
    out = built("fixture", name, "f32", "cpu", SETTINGS["int4-b32-sym"])
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    levels = {a.i for n in model.graph.node if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "accuracy_level"}
    assert levels == {4}, levels
    want = np.asarray(quant_reference(name)["settings"]["int4-b32-sym"]["logits"], dtype=np.float32)
    check_level_4(built, name, "f32", "cpu", out, prefill(session(out, None), name, "f32"), want, tmp_path)


def check_level_4(built, name: str, dtype: str, ep: str, out, got: np.ndarray, want: np.ndarray, tmp_path) -> None:
    """accuracy_level 4 logits `got` of the build in `out` against the fake-quantized reference `want`."""
    check_quality(built, name, dtype, ep, 4, out, got, want, tmp_path)


def check_quality(built, name: str, dtype: str, ep: str, level: int, out, got, want, tmp_path) -> None:
    """Logits `got` of the int4 build in `out` (block 32, symmetric) at accuracy_level `level` against the
    fake-quantized reference `want`: max abs error <= TOL[dtype] at level 0, cosine similarity
    >= 0.999 per position at level 4. Where a tiny random fixture falls short, onnxruntime's own
    quantizer, run on the same float graph with the same level, must fall short by as much (the
    loss is the kernel's or the dtype's, not mobius'); both numbers are printed.

    "The same float graph" is mobius' float build for the EP with a tied LM head's Transpose
    folded into an initializer (onnxruntime's quantizer quantizes only initializer weights; the
    head is then quantized as mobius quantizes it, see `ort_int4_model`), and onnxruntime's
    model then gets the biases mobius moves into MatMulNBits' bias input: its quantizer keeps
    MatMulNBits + Add, which in f16 rounds the product before adding the bias where the fused
    kernel rounds once, so the two forms differ by roundings in either direction (on the glm
    fixture's earlier seed 4902, webgpu f16 at level 4: worst-position cosine 0.998993 fused vs
    0.999098 unfused, mean cosine 0.99965 vs 0.99960). That the two graphs are otherwise the
    same computation, bit for bit, is test_int4_is_onnxruntimes_quantizer_up_to_the_bias."""

    def score(logits):
        if level == 0:
            return max_abs_diff(logits, want)
        return float(cosines(logits, want).min())

    ours = score(got)
    key = (name, ep, dtype, level)
    record_achieved(f"int4 builds at their EP's accuracy_level: {'max abs error' if level == 0 else 'worst cosine'}",
                    f"{name} --ep {ep} {dtype} level {level}", ours)
    ok = ours <= TOL[dtype] if level == 0 else ours >= MIN_COSINE
    pinned = ALLOWED_MISSES.get(key)
    if ok:
        assert pinned is None, f"{key} meets its bar now ({ours:.6f}): remove it from ALLOWED_MISSES"
        return
    assert pinned is not None, (
        f"{name} --ep {ep} {dtype} accuracy_level {level}: {ours:.6f} misses the bar and is not in ALLOWED_MISSES"
    )
    # No worse than measured (the figures are deterministic: one thread, the pinned wheels).
    worse = ours > pinned + MISS_SLACK if level == 0 else ours < pinned - MISS_SLACK
    assert not worse, f"{key}: {ours:.6f}, worse than the pinned miss {pinned:.6f}"
    ours_model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    theirs_model = ort_int4_model(float_build(built, name, dtype, ep, tmp_path), level)
    fold_biases_as(theirs_model, ours_model)
    theirs_dir = tmp_path / "ort"
    theirs_dir.mkdir()
    onnx.save(theirs_model, str(theirs_dir / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    theirs = score(prefill(session(theirs_dir, None if level else 0), name, dtype))
    metric = "max abs error" if level == 0 else "cosine"
    print(f"{name} --ep {ep} {dtype} accuracy_level {level}: {metric} mobius {ours:.6f}, onnxruntime's quantizer {theirs:.6f}")
    if level == 0:
        assert ours <= theirs + 1e-4, f"{name} --ep {ep} {dtype}: {metric} {ours:.6f} > {TOL[dtype]} and worse than onnxruntime's quantizer ({theirs:.6f})"
    else:
        assert ours >= theirs - 1e-6, f"{name} --ep {ep} {dtype}: {metric} {ours:.6f} < {MIN_COSINE} and worse than onnxruntime's quantizer ({theirs:.6f})"


def float_build(built, name: str, dtype: str, ep: str, tmp_path):
    """The float build of `name` for `ep` whose MatMul weights are those `--quant` quantizes: as
    built, or where the EP fuses MoE blocks into com.microsoft::MoE (whose experts onnxruntime's
    quantizer leaves in float, while `--quant` quantizes them in the dense block), the same EP
    without the fusion (an EP file with supports_fused_moe = false)."""
    out = built("fixture", name, dtype, ep)
    if not any(n.op_type == "MoE" for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node):
        return out
    return built("fixture", name, dtype, None, dense_moe_ep(ep, tmp_path))


def dense_moe_ep(ep: str, tmp_path) -> tuple[str, str]:
    """The build flags of `ep` without the MoE fusions (an EP file with supports_fused_moe = false)."""
    spec = tmp_path / f"{ep}-dense-moe.toml"
    spec.write_text(f'name = "{ep}-dense-moe"\nbase = "{ep}"\nsupports_fused_moe = false\n')
    return ("--ep-file", str(spec))


def fold_head_transposes(model: onnx.ModelProto) -> None:
    """Replaces each Transpose (perm [1, 0]) of a 2-D initializer by an initializer holding the
    transpose: how a float build reads a tied LM head, and how onnxruntime-genai's builder writes
    one (its own weight). onnxruntime's quantizer quantizes only MatMul weights that are
    initializers; mobius quantizes the tied head too (the transpose of the table)."""
    inits = {t.name: t for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        perm = [list(a.ints) for a in node.attribute if a.name == "perm"]
        source = inits.get(node.input[0]) if node.op_type == "Transpose" else None
        if source is not None and len(source.dims) == 2 and perm in ([], [[1, 0]]):
            table = onnx.numpy_helper.to_array(source)
            model.graph.initializer.append(onnx.numpy_helper.from_array(np.ascontiguousarray(table.T), node.output[0]))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)


def ort_int4_model(float_dir, level: int | None) -> onnx.ModelProto:
    """onnxruntime's quantizer (int4, block 32, symmetric, accuracy_level `level`) on the float
    model in `float_dir`, its tied LM head read as an initializer (fold_head_transposes)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    model = onnx.load(str(float_dir / "model.onnx"))
    fold_head_transposes(model)
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=level or None)
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return quantizer.model.model


def nbits_biases(model: onnx.ModelProto) -> set[str]:
    """The bias inputs (input 5) of a model's MatMulNBits nodes."""
    return {n.input[5] for n in model.graph.node if n.op_type == "MatMulNBits" and len(n.input) > 5 and n.input[5]}


def move_biases_out(model: onnx.ModelProto) -> None:
    """Each MatMulNBits bias input becomes an Add after the node (onnxruntime's quantizer's form)."""
    nodes = []
    for node in model.graph.node:
        nodes.append(node)
        if node.op_type == "MatMulNBits" and len(node.input) > 5 and node.input[5]:
            bias, out = node.input[5], node.output[0]
            del node.input[3:]
            node.output[0] = f"{out}.without_bias"
            nodes.append(onnx.helper.make_node("Add", [node.output[0], bias], [out], name=f"{node.name}.bias"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def fold_biases_as(model: onnx.ModelProto, like: onnx.ModelProto) -> None:
    """Moves into MatMulNBits' bias input each `Add(MatMulNBits(...), b)` of `model` whose bias
    initializer `b` is a MatMulNBits bias in `like` (the MatMulNBits output read by that Add
    only): `model` then puts its biases where `like` does."""
    biases = nbits_biases(like)
    producer = {n.output[0]: n for n in model.graph.node if n.op_type == "MatMulNBits"}
    readers: dict[str, int] = {}
    for n in model.graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1

    def fold(add) -> bool:
        for x, b in (add.input, add.input[::-1]):
            nbits = producer.get(x)
            if nbits is not None and b in biases and readers[x] == 1 and len(nbits.input) <= 5:
                nbits.input.extend([""] * (5 - len(nbits.input)) + [b])
                nbits.output[0] = add.output[0]
                return True
        return False

    kept = [n for n in model.graph.node if not (n.op_type == "Add" and len(n.input) == 2 and fold(n))]
    del model.graph.node[:]
    model.graph.node.extend(kept)


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Cosine similarity of the logits, per position."""
    return (got * want).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))


QUANT_BUILDS = [(ep, "f32") for ep in F32_EPS] + [(ep, "f16") for ep in F16_EPS]


@pytest.mark.parametrize("ep,dtype", QUANT_BUILDS, ids=[f"{e}-{d}" for e, d in QUANT_BUILDS])
@pytest.mark.parametrize("name", NAMES)
def test_every_ep_builds_int4_and_runs(built, ep_caps, name, ep, dtype, tmp_path):
    """Every decoder fixture x every built-in EP, as a user builds it (`--quant int4`, the EP's
    accuracy_level): it loads and runs on onnxruntime CPU, with MatMulNBits where the EP has
    the kernel and DequantizeLinear elsewhere, no float MatMul weight left, and logits that
    match the fake-quantized reference of its weight dtype (f32, or the f16 weights an f16
    build quantizes): within the build dtype's tolerance at accuracy_level 0, by cosine at 4."""
    out = built("fixture", name, dtype, ep, SETTINGS["int4-b32-sym"])
    caps = ep_caps[ep]
    nbits = caps["supports_matmul_nbits"] and caps["supports_contrib_ops"]
    level = caps["default_int4_accuracy_level"] if nbits else 0
    got = prefill(session(out, None if level else 0), name, dtype)
    assert np.isfinite(got).all(), f"{name} --ep {ep}: non-finite logits"
    setting = "int4-b32-sym" if dtype == "f32" else "int4-b32-sym-f16"
    want = np.asarray(quant_reference(name)["settings"][setting]["logits"], dtype=np.float32)
    check_quality(built, name, dtype, ep, level, out, got, want, tmp_path)
    counts = op_counts(out)
    if nbits:
        assert counts.get("MatMulNBits", 0) > 0 and counts.get("DequantizeLinear", 0) == 0, counts
    else:
        assert counts.get("MatMulNBits", 0) == 0 and counts.get("DequantizeLinear", 0) > 0, counts
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    float_weights = [n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    assert not float_weights, f"{name} --ep {ep}: MatMul weights left in float: {float_weights}"


@pytest.mark.parametrize("name", NAMES)
def test_genai_greedy_from_int4(built, name):
    """onnxruntime-genai on the accuracy_level 0 int4 cpu build: the reference's greedy tokens.
    A token may differ only where the reference's top-2 margin is below the logits tolerance;
    from there on the sequences may diverge."""
    ref = quant_reference(name)["settings"]["int4-b32-sym"]
    out = built("fixture", name, "f32", "cpu", SETTINGS["int4-b32-sym"] + ("--accuracy-level", "0"))
    check_greedy(name, out, load_reference(name)["input_ids"], ref["greedy_tokens"], ref["top2_gaps"])


def check_greedy(name: str, out, ids: list[int], want: list[int], gaps: list[float]) -> None:
    """onnxruntime-genai on the cpu build `out` continues `ids` with `want`. A token may differ
    only where the reference's top-2 margin `gaps` is below twice the logits tolerance; from
    there on the sequences may diverge. genai's min_length keeps it from emitting a stop token,
    so the comparison ends where the reference emits one."""
    got = genai_greedy(genai_model(out, "cpu"), ids, len(want))
    stops = special_ids(name)
    end = next((i for i, t in enumerate(want) if t in stops), len(want))
    for step, (g, w) in enumerate(zip(got[:end], want[:end])):
        if g != w:
            assert gaps[step] < 2 * EXACT_TOL, (
                f"{name}: token {step} is {g}, reference {w}, with a top-2 margin of {gaps[step]:.3g} "
                f"(only a margin below {2 * EXACT_TOL} may flip)"
            )
            print(f"{name}: greedy tokens diverge at step {step} on a near-tie (margin {gaps[step]:.3g})")
            break


def checkpoint_dtype(name: str) -> str | None:
    cfg = load_config(FIXTURES_DIR / name)
    return cfg.get("dtype") or cfg.get("torch_dtype")


BF16_NAMES = [n for n in NAMES if checkpoint_dtype(n) == "bfloat16"]


@pytest.mark.parametrize("name", BF16_NAMES)
def test_bf16_tables_of_f32_quantized_builds_compute_as_f32_tables(built, name, tmp_path):
    """An f32 cpu build with --quant of a bf16 checkpoint keeps the embedding table in bf16 as
    the checkpoint holds it and casts the gathered rows to f32 (mobius::quant::narrow_tables):
    onnxruntime gives bit for bit the logits of the same model with the table widened to f32
    and no Cast."""
    assert BF16_NAMES, "no bf16 decoder fixture"
    out = built("fixture", name, "f32", "cpu", SETTINGS["int4-b32-sym"] + ("--accuracy-level", "0"))
    model = onnx.load(str(out / "model.onnx"))
    tables = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16]
    assert tables, f"{name}: no table kept in bf16"
    for table in tables:
        readers = [n for n in model.graph.node if table.name in n.input]
        assert readers and all(n.op_type == "Gather" and n.input[0] == table.name for n in readers), readers
        halves = np.frombuffer(table.raw_data, dtype="<u2")
        widened = onnx.numpy_helper.from_array(
            (halves.astype(np.uint32) << 16).view(np.float32).reshape(tuple(table.dims)), table.name
        )
        table.CopyFrom(widened)
        for gather in readers:
            (cast,) = [n for n in model.graph.node if gather.output[0] in n.input]
            assert cast.op_type == "Cast" and cast.attribute[0].i == onnx.TensorProto.FLOAT, cast
            gather.output[0] = cast.output[0]
            model.graph.node.remove(cast)
    wide_dir = tmp_path / "wide"
    wide_dir.mkdir()
    onnx.save(model, str(wide_dir / "model.onnx"), save_as_external_data=True, location="model.onnx.data")
    narrow = prefill(session(out), name, "f32")
    wide = prefill(session(wide_dir), name, "f32")
    assert np.array_equal(narrow.view(np.uint32), wide.view(np.uint32)), max_abs_diff(narrow, wide)


# The EPs whose int4 builds run at accuracy_level 4 by default, with their usual dtype.
LEVEL_4_BUILDS = [("cpu", "f32"), ("webgpu", "f16")]


@pytest.mark.parametrize("ep,dtype", LEVEL_4_BUILDS, ids=[f"{e}-{d}" for e, d in LEVEL_4_BUILDS])
@pytest.mark.parametrize("name", NAMES)
def test_int4_is_onnxruntimes_quantizer_up_to_the_bias(built, name, ep, dtype, tmp_path):
    """`mobius build --quant int4` computes what onnxruntime's quantizer makes of mobius' float
    build for the same EP (accuracy_level 4; a tied LM head read as an initializer, see
    fold_head_transposes): once the biases mobius moves into MatMulNBits' bias input are moved
    back out into Adds, the logits are equal bit for bit. With them in, f16 logits differ by the
    rounding of the bias (see check_quality), which this prints. MoE blocks that become
    com.microsoft::QMoE (whose packing test_qmoe_experts_are_onnxruntimes_quantizer_per_expert
    checks) are compared in their dense form, the same EP without the MoE fusions."""
    ours_dir = built("fixture", name, dtype, ep, SETTINGS["int4-b32-sym"])
    if op_counts(ours_dir).get("QMoE"):
        ours_dir = built("fixture", name, dtype, None, dense_moe_ep(ep, tmp_path) + SETTINGS["int4-b32-sym"])
    ours_model = onnx.load(str(ours_dir / "model.onnx"), load_external_data=False)
    biases = len(nbits_biases(ours_model))
    move_biases_out(ours_model)
    unfused = tmp_path / "unfused"
    unfused.mkdir()
    onnx.save(ours_model, str(unfused / "model.onnx"))
    shutil.copyfile(ours_dir / "model.onnx.data", unfused / "model.onnx.data")
    theirs = tmp_path / "ort"
    theirs.mkdir()
    onnx.save(ort_int4_model(float_build(built, name, dtype, ep, tmp_path), 4), str(theirs / "model.onnx"),
              save_as_external_data=True, location="model.onnx.data")
    assert op_counts(theirs).get("MatMulNBits") == op_counts(ours_dir).get("MatMulNBits"), (op_counts(theirs), op_counts(ours_dir))
    want = prefill(session(theirs, None), name, dtype)
    got = prefill(session(unfused, None), name, dtype)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (
        f"{name} --ep {ep} {dtype}: max abs difference {max_abs_diff(got, want):.3g} to onnxruntime's quantizer"
    )
    if biases:
        fused = prefill(session(ours_dir, None), name, dtype)
        print(f"{name} --ep {ep} {dtype}: {biases} biases in MatMulNBits, max abs difference "
              f"{max_abs_diff(fused, want):.3g} to onnxruntime's quantizer's MatMulNBits + Add")


def _ort_quantized(path, block: int, symmetric: bool) -> dict[str, np.ndarray]:
    """onnxruntime's quantizer run on a float model: its MatMulNBits initializers by name."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    model = onnx.load(str(path / "model.onnx"))
    fold_head_transposes(model)
    config = DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric)
    quantizer = MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return {t.name: onnx.numpy_helper.to_array(t) for t in quantizer.model.model.graph.initializer}


BIT_IDENTITY = [("f32", 32, True), ("f32", 128, True), ("f32", 32, False), ("f32", 128, False), ("f16", 32, True), ("f16", 32, False)]


@pytest.mark.parametrize("dtype,block,symmetric", BIT_IDENTITY, ids=[f"{d}-b{b}-{'sym' if s else 'asym'}" for d, b, s in BIT_IDENTITY])
@pytest.mark.parametrize("name", NAMES)
def test_weights_are_bit_identical_to_onnxruntimes_quantizer(built, name, dtype, block, symmetric, tmp_path):
    """The same float model quantized by onnxruntime and by `mobius build --quant int4` (on
    the default EP, which packs nothing; a tied LM head read as an initializer, see
    fold_head_transposes): every MatMulNBits weight, scale and zero point onnxruntime writes,
    mobius writes byte for byte (MoE experts included: see float_build)."""
    float_model = float_build(built, name, dtype, "default", tmp_path)
    flags = ("--quant", "int4", "--quant-block-size", str(block)) + (() if symmetric else ("--quant-asymmetric",))
    ours_dir = built("fixture", name, dtype, "default", flags)
    theirs = _ort_quantized(float_model, block, symmetric)
    ours_model = onnx.load(str(ours_dir / "model.onnx"))
    ours = {t.name: onnx.numpy_helper.to_array(t) for t in ours_model.graph.initializer}
    compared = 0
    for node in ours_model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        weight = node.input[1].removesuffix(".q4__nbits")
        assert f"{weight}_Q4" in theirs, f"{name}: onnxruntime's quantizer left {weight} in float"
        pairs = [(node.input[1], f"{weight}_Q4"), (node.input[2], f"{weight}_scales")]
        if not symmetric:
            pairs.append((node.input[3], f"{weight}_zero_points"))
        for mine, ort_name in pairs:
            a, b = ours[mine], theirs[ort_name]
            assert a.dtype == b.dtype and a.size == b.size, f"{name} {mine}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
            x = np.frombuffer(a.tobytes(), dtype=np.uint8)
            y = np.frombuffer(b.tobytes(), dtype=np.uint8)
            diff = np.flatnonzero(x != y)
            assert diff.size == 0, (
                f"{name} {mine} differs from onnxruntime's {ort_name} in {diff.size} bytes, "
                f"first at byte {diff[0]}: {x[diff[0]]:#04x} vs {y[diff[0]]:#04x}"
            )
        compared += 1
    assert compared >= 6, f"{name}: only {compared} MatMulNBits weights compared"


@pytest.mark.parametrize("ep", ["cpu", "onnx-standard"])
@pytest.mark.parametrize("name", NAMES)
def test_optimize_quantizes_a_float_model(built, name, ep, tmp_path):
    """`mobius optimize --quant int4` on a float model (the default EP's f32 build) gives the
    model `build --quant int4` gives: the fake-quantized reference's logits."""
    from ort_helpers import run_mobius

    float_model = built("fixture", name, "f32", "default") / "model.onnx"
    out = tmp_path / "out"
    run_mobius(["optimize", str(float_model), str(out), "--ep", ep, "--quant", "int4", "--accuracy-level", "0"])
    want = np.asarray(quant_reference(name)["settings"]["int4-b32-sym"]["logits"], dtype=np.float32)
    got = prefill(session(out), name, "f32")
    err = assert_close(got, want, EXACT_TOL, f"{name} optimize --ep {ep}")
    record_achieved(EXACT_TABLE, f"{name} optimize int4-b32-sym --ep {ep}", err)
    counts = op_counts(out)
    assert (counts.get("MatMulNBits", 0) > 0) == (ep == "cpu"), counts


def _nbits_initializers(path) -> dict[str, bytes]:
    """The raw bytes of every MatMulNBits B, scales and zero_points of a saved model, in node order."""
    model = onnx.load(str(path / "model.onnx"))
    inits = {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}
    return {f"{n.name}:{i}": inits[v] for n in model.graph.node if n.op_type == "MatMulNBits"
            for i, v in enumerate(n.input[1:4], 1) if v}


@pytest.mark.parametrize("flags", [SETTINGS["int4-b32-sym"], SETTINGS["int4-b16-asym"], SETTINGS["int8-b32-sym"]],
                         ids=["int4-sym", "int4-asym", "int8-sym"])
@pytest.mark.parametrize("name", NAMES)
def test_optimize_gives_matmul_nbits_models_to_eps_without_the_kernel(built, name, flags, tmp_path):
    """A model that already calls MatMulNBits (the default EP's build at accuracy_level 0; the
    cpu build also calls GroupQueryAttention, which has no standard form) optimized for EPs
    without the kernel (onnx-standard, qnn): DequantizeLinear + MatMul, no com.microsoft op on
    onnx-standard, and onnxruntime's logits equal the source's within 1e-4. Optimized back for
    the default EP, every MatMulNBits input is byte for byte the original."""
    from ort_helpers import run_mobius

    source = built("fixture", name, "f32", "default", flags + ("--accuracy-level", "0"))
    assert op_counts(source).get("MatMulNBits", 0) > 0
    want = prefill(session(source), name, "f32")
    for ep in ["onnx-standard", "qnn"]:
        out = tmp_path / ep
        run_mobius(["optimize", str(source / "model.onnx"), str(out), "--ep", ep])
        model = onnx.load(str(out / "model.onnx"), load_external_data=False)
        counts = op_counts(out)
        assert counts.get("MatMulNBits", 0) == 0 and counts.get("DequantizeLinear", 0) > 0, (ep, counts)
        if ep == "onnx-standard":
            assert all(n.domain in ("", "ai.onnx") for n in model.graph.node), ep
        got = prefill(session(out), name, "f32")
        assert_close(got, want, 1e-4, f"{name} {flags} --ep {ep} against the MatMulNBits build")
    back = tmp_path / "back"
    run_mobius(["optimize", str(tmp_path / "onnx-standard" / "model.onnx"), str(back), "--ep", "default",
                "--accuracy-level", "0"])
    before, after = _nbits_initializers(source), _nbits_initializers(back)
    assert len(before) == len(after) and sorted(before.values()) == sorted(after.values()), \
        f"{name} {flags}: the round trip changed MatMulNBits inputs"


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("name", NAMES)
def test_optimize_runs_onnxruntimes_matmul_nbits_quantization_as_standard_onnx(built, name, symmetric, tmp_path):
    """The default build quantized by onnxruntime's own MatMulNBitsQuantizer, then `mobius
    optimize --ep onnx-standard`: standard ONNX only, with the quantized model's logits."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    from ort_helpers import run_mobius

    float_dir = built("fixture", name, "f32", "default")
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=symmetric)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(float_dir / "model.onnx")), algo_config=config)
    quantizer.process()
    quantized = tmp_path / "quantized"
    quantized.mkdir()
    onnx.save(quantizer.model.model, str(quantized / "model.onnx"))
    assert op_counts(quantized).get("MatMulNBits", 0) > 0
    want = prefill(session(quantized), name, "f32")
    out = tmp_path / "standard"
    run_mobius(["optimize", str(quantized / "model.onnx"), str(out), "--ep", "onnx-standard"])
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node), op_counts(out)
    got = prefill(session(out), name, "f32")
    assert_close(got, want, 1e-4, f"{name} onnxruntime-quantized ({'sym' if symmetric else 'asym'}) --ep onnx-standard")


# The fixtures whose MoE blocks renormalise their top-k weights: int4 cpu builds run them as
# com.microsoft::QMoE (qwen2_moe and olmoe do not renormalise, onnxruntime's CPU QMoE always
# does; phimoe's sparsemixer, gpt_oss' clamped SwiGLU and the score-corrected routers of
# ernie4_5_moe and minimax_m2 are not the fused rule's block).
QMOE_NAMES = ["mixtral", "qwen3_moe", "granitemoe", "hunyuan_v1_moe", "dbrx", "cohere2_moe", "jetmoe"]


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", [n for n in NAMES if n.endswith("moe") or n in ("mixtral", "gpt_oss", "phimoe", "dbrx")])
def test_qmoe_experts_are_onnxruntimes_quantizer_per_expert(built, name, dtype, tmp_path):
    """The MoE blocks of an int4 cpu build are com.microsoft::QMoE exactly for QMOE_NAMES, and
    each expert's packed values and scales are what onnxruntime's MatMulNBits quantizer
    (`quantize_matmul_4bits`, symmetric, block 32) writes, byte for byte, for that expert's
    float weights in the same EP's dense build: fc1 the [H, 2*I] matrix of its gate and up
    columns interleaved (gate j in column 2j, up j in 2j+1: swiglu_fusion = 1), fc2 its down
    matrix [I, H]."""
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    out = built("fixture", name, dtype, "cpu", SETTINGS["int4-b32-sym"])
    model = onnx.load(str(out / "model.onnx"))
    nodes = [n for n in model.graph.node if n.op_type == "QMoE"]
    if name not in QMOE_NAMES:
        assert not nodes, f"{name}: QMoE although its routing is not the kernel's"
        return
    assert nodes and all(n.op_type != "MoE" for n in model.graph.node), op_counts(out)
    ours = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    dense = onnx.load(str(built("fixture", name, dtype, None, dense_moe_ep("cpu", tmp_path)) / "model.onnx"))
    floats = {t.name: onnx.numpy_helper.to_array(t) for t in dense.graph.initializer}
    block = 32

    def ort_packing(w):  # [K, N] -> packed [N, K/2], scales [N, K/block]
        k, n = w.shape
        packed = np.zeros((n, k // block, block // 2), dtype=np.uint8)
        scales = np.zeros((n, k // block), dtype=w.dtype)
        zp = np.zeros((n, (k // block + 1) // 2), dtype=np.uint8)
        quantize_matmul_4bits(packed, np.ascontiguousarray(w), scales, zp, block, n, k, True)
        return packed.reshape(n, k // 2), scales

    def same(a, b, what):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        diff = np.flatnonzero(a.view(np.uint8) != b.view(np.uint8))
        assert diff.size == 0, f"{what}: {diff.size} bytes differ from onnxruntime's quantizer"

    for node in nodes:
        fc1, fc1_scales, fc2, fc2_scales = (ours[node.input[i]] for i in (2, 3, 5, 6))
        gate, up = node.input[2].split(".q4__")[:2]
        down = node.input[5].removesuffix(".q4__qmoe_fc2")
        wg, wu, wd = floats[gate], floats[up], floats[down]
        experts, rows, _ = fc1.shape
        width = rows // 2
        assert wg.shape == wu.shape == (wd.shape[1], experts * width), (wg.shape, wd.shape, fc1.shape)
        for e in range(experts):
            cols = slice(e * width, (e + 1) * width)
            w1 = np.empty((wg.shape[0], rows), dtype=wg.dtype)
            w1[:, 0::2], w1[:, 1::2] = wg[:, cols], wu[:, cols]
            packed, scales = ort_packing(w1)
            same(fc1[e], packed, f"{name} {node.input[2]} expert {e}")
            same(fc1_scales[e], scales, f"{name} {node.input[3]} expert {e}")
            packed, scales = ort_packing(wd[cols])
            same(fc2[e], packed, f"{name} {node.input[5]} expert {e}")
            same(fc2_scales[e], scales, f"{name} {node.input[6]} expert {e}")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", QMOE_NAMES)
def test_optimize_moves_qmoe_between_the_forms(built, name, dtype, tmp_path):
    """`mobius optimize` of saved int4 models: the default build's QMoE calls for onnx-standard
    become the dense block over DequantizeLinear (qmoe-to-dense: no contrib op left), whose
    logits are the default build's (within 1e-5 in f32, the f16 tolerance in f16;
    accuracy_level 0 for the rest of the model); optimized for cpu, the QMoE experts' bytes
    come back exactly. (A cpu build's GroupQueryAttention has no standard form to go back to.)"""
    from ort_helpers import run_mobius

    source = built("fixture", name, dtype, "default", SETTINGS["int4-b32-sym"] + ("--accuracy-level", "0"))
    layers = op_counts(source).get("QMoE", 0)
    assert layers > 0, op_counts(source)
    standard = tmp_path / "standard"
    run_mobius(["optimize", str(source / "model.onnx"), str(standard), "--ep", "onnx-standard"])
    model = onnx.load(str(standard / "model.onnx"), load_external_data=False)
    contrib = sorted({n.op_type for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    assert not contrib, contrib
    a, b = prefill(session(source), name, dtype), prefill(session(standard), name, dtype)
    assert_close(b, a, 1e-5 if dtype == "f32" else TOL["f16"], f"{name} {dtype}")
    back = tmp_path / "back"
    run_mobius(["optimize", str(standard / "model.onnx"), str(back), "--ep", "cpu", "--accuracy-level", "0"])
    assert op_counts(back).get("QMoE") == layers, op_counts(back)

    def experts(path):
        model = onnx.load(str(path / "model.onnx"))
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
        return [[inits[n.input[i]] for i in (2, 3, 5, 6)] for n in model.graph.node if n.op_type == "QMoE"]

    for before, after in zip(experts(source), experts(back)):
        for x, y in zip(before, after):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
