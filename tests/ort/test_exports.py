"""`mobius optimize` on graphs exported by torch.onnx and optimum-onnx (tests/fixtures/exports, made by
scripts/make_export_fixtures.py): every export x EP is optimized once, run on onnxruntime CPU
and compared with transformers' own outputs stored beside the export (reference.npz).

Each fixture is first checked on its own (the export as written, in onnxruntime, against
transformers), so an export problem is not blamed on mobius.  Compared, in f32 with max abs
error <= 1e-4:
  prefill  batch 2 x seq 5 (row 0 right-padded): logits / last_hidden_state and the presents
           at the positions whose attention_mask is 1 (padded positions carry no meaning);
  decode   cache exports only: one token per row fed with the model's OWN prefill presents as
           past; logits of both rows and the presents at the positions whose mask is 1.

`--kv-cache genai` (decoder cache exports, genai.npz from scripts/make_genai_references.py): the
optimized export runs in onnxruntime-genai's layout (a right-padded prompt, then decode steps
that write each row's new token after its own valid keys, the mask 1 over them, position_ids
the row's length) and its logits at every valid position match transformers run on each row
alone (f32, <= 1e-4); the export itself, fed the same, does not (which is why the flag is
opt-in); onnxruntime-genai's greedy tokens on it match transformers'.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from contract import check_model_file
from ort_helpers import FIXTURES_DIR, max_abs_diff, run_mobius, run_mobius_unchecked

EXPORTS_DIR = FIXTURES_DIR / "exports"
EPS = ["default", "cpu", "cuda", "onnx-standard", "qnn"]
TOL = 1e-4
# outputs compared per token: [batch, seq, ...]; every other output is a present [batch, heads, seq, dim]
TOKEN_OUTPUTS = {"logits", "last_hidden_state"}
ENCODER_OUTPUT = "last_hidden_state"


def export_names() -> list[str]:
    if not EXPORTS_DIR.is_dir():
        return []
    return sorted(p.name for p in EXPORTS_DIR.iterdir() if (p / "model.onnx").is_file() and (p / "reference.npz").is_file())


NAMES = export_names()


# The decoder families whose checkpoints optimum-onnx 0.1 exports with a cache (optimum-cache only;
# scripts/make_export_fixtures.py's OPTIMUM_DECODERS).
OPTIMUM_FAMILIES = {
    "arcee", "bloom", "codegen", "cohere", "falcon-alibi", "falcon-mq", "gemma", "gemma3_text", "glm", "gpt_bigcode",
    "gpt_neo", "gpt_neox", "gptj", "granite", "helium", "mpt", "nemotron", "olmo", "olmo2", "opt", "phi", "qwen3",
    "qwen3_moe", "smollm3", "stablelm",
}


def test_export_fixtures_present():
    """The fixture set this suite is parametrized over: 4 decoder families x 5 kinds, BERT x 2,
    and an optimum-onnx export of every other decoder family both optimum-onnx and mobius take."""
    families = {"llama", "qwen2", "mistral", "gpt2"}
    kinds = ("dynamo-cache", "dynamo-noopt-cache", "dynamo", "legacy-cache", "optimum-cache")
    want = {f"{f}-{k}" for f in families for k in kinds}
    want |= {"bert-dynamo", "bert-legacy"}
    want |= {f"{f}-optimum-cache" for f in OPTIMUM_FAMILIES}
    assert set(NAMES) == want, f"missing {sorted(want - set(NAMES))}, unexpected {sorted(set(NAMES) - want)}"


def expectation(name: str) -> dict:
    """tests/fixtures/exports/<name>/expect.json: what `mobius optimize` is held to on the export.
      genai      the attention op every layer becomes under --kv-cache genai (the one `mobius
                 build --ep cpu` of the checkpoint uses), or "unread" (the flag then changes
                 nothing) with `why_unread`
      gaps       known gaps, {check: why}: "onnxruntime" (not fewer nodes than onnxruntime's
                 transformers optimizer), "build_ratio" (over 1.25x a build with the flag); each an
                 xfail that must fail
    A cache export without the file is held to {"genai": "GroupQueryAttention", "gaps": {}}."""
    path = EXPORTS_DIR / name / "expect.json"
    want = {"genai": "GroupQueryAttention", "gaps": {}}
    if path.is_file():
        want.update(json.loads(path.read_text()))
    assert want["genai"] != "unread" or want.get("why_unread"), f"{path}: unread without why_unread"
    return want


def with_gap(name: str, check: str):
    """`name`, as an xfail(strict) where expect.json records a known gap for `check`."""
    why = expectation(name)["gaps"].get(check)
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=why)) if why else name


def reference(name: str) -> dict[str, dict[str, np.ndarray]]:
    """stage ("prefill" / "decode") -> {tensor name: array}, inputs and outputs together."""
    stages: dict[str, dict[str, np.ndarray]] = {}
    with np.load(EXPORTS_DIR / name / "reference.npz") as npz:
        for key in npz.files:
            stage, tensor = key.split(".", 1)
            stages.setdefault(stage, {})[tensor] = npz[key]
    return stages


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # No onnxruntime graph optimizations: the graph runs as written.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def run(sess, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [i.name for i in sess.get_inputs()]
    missing = [n for n in names if n not in feeds]
    assert not missing, f"graph inputs without a reference value: {missing}"
    outs = sess.run(None, {n: feeds[n] for n in names})
    return dict(zip((o.name for o in sess.get_outputs()), outs))


def max_err(name: str, got: np.ndarray, want: np.ndarray, mask: np.ndarray) -> float:
    """Max abs error over the positions where mask [batch, tokens] is 1."""
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    keep = mask.astype(bool)
    if name in TOKEN_OUTPUTS:  # [batch, seq, ...]: the last seq positions of the mask
        sel_got, sel_want = got[keep[:, -got.shape[1]:]], want[keep[:, -want.shape[1]:]]
    else:  # present [batch, heads, total, dim]
        sel_got, sel_want = got.transpose(0, 2, 1, 3)[keep], want.transpose(0, 2, 1, 3)[keep]
    return max_abs_diff(sel_got, sel_want)


def compare(sess, name: str, label: str) -> list[str]:
    """Runs prefill (and decode with the session's own presents) and returns the failures."""
    ref = reference(name)
    failures = []
    outputs = [o.name for o in sess.get_outputs()]
    pre = ref["prefill"]
    got = run(sess, pre)
    mask = pre["attention_mask"]
    for out in outputs:
        err = max_err(out, got[out], pre[out], mask)
        if not err <= TOL:
            failures.append(f"{label} prefill {out}: max abs error {err:.3g} > {TOL}")
    if "decode" in ref:
        dec = dict(ref["decode"])
        for past in [n for n in dec if n.startswith("past_key_values.")]:
            dec[past] = got[past.replace("past_key_values.", "present.")]
        got = run(sess, dec)
        mask = dec["attention_mask"]
        for out in outputs:
            err = max_err(out, got[out], ref["decode"][out], mask)
            if not err <= TOL:
                failures.append(f"{label} decode {out}: max abs error {err:.3g} > {TOL}")
    return failures


@pytest.fixture(scope="module")
def optimized(tmp_path_factory):
    """optimized(name, ep[, kv_cache]) -> folder of `mobius optimize --ep ep [--kv-cache
    kv_cache]` of the export (cached; a failure is cached too and re-raised for the test that
    asks)."""
    root = tmp_path_factory.mktemp("exports")
    cache: dict[tuple[str, str, str], Path | AssertionError] = {}

    def get(name: str, ep: str, kv_cache: str = "as-is") -> Path:
        key = (name, ep, kv_cache)
        if key not in cache:
            out = root / f"{name}-{ep}-{kv_cache}"
            role = "encoder" if name.startswith("bert-") else "decoder"
            flags = [] if kv_cache == "as-is" else ["--kv-cache", kv_cache]
            try:
                run_mobius(["optimize", str(EXPORTS_DIR / name / "model.onnx"), str(out), "--ep", ep, "--role", role, "-q", *flags])
                cache[key] = out
            except (AssertionError, subprocess.TimeoutExpired) as e:
                cache[key] = AssertionError(str(e))
        v = cache[key]
        if isinstance(v, AssertionError):
            raise v
        return v

    return get


@pytest.mark.parametrize("name", NAMES)
def test_export_matches_transformers(name):
    """The fixture itself: the export, run as written by onnxruntime, matches transformers."""
    ref = reference(name)
    assert "prefill" in ref and ("decode" in ref) == name.endswith("-cache"), sorted(ref)
    failures = compare(session(EXPORTS_DIR / name / "model.onnx"), name, f"{name} (export)")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("name", NAMES)
def test_optimized_matches_transformers(optimized, name, ep):
    out = optimized(name, ep)
    path = out / "model.onnx"
    check_model_file(path)
    before = onnx.load(str(EXPORTS_DIR / name / "model.onnx"), load_external_data=False)
    after = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in after.graph.initializer}
    assert [i.name for i in after.graph.input if i.name not in inits] == [i.name for i in before.graph.input]
    assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]
    failures = compare(session(path), name, f"{name} --ep {ep}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- dims named by the exporter
# torch.onnx's dynamic_axes name each input and output dim as its caller chose: `total` where
# the graph computes `past + seq`, or a name of its own on every axis. onnxruntime runs such
# files; `mobius optimize` takes them too, keeps the declared names, and reads a name the
# outputs promise (`total` = past + seq) wherever the inputs declare it.
CACHE_EXPORTS = [n for n in NAMES if n.endswith("-cache")]
NAMINGS = ["total", "independent"]


def renamed(name: str, naming: str, folder: Path) -> Path:
    """The export with its input and output dims renamed: `total` for every sum (the mask's
    length and the presents'), or `<value>_dim_<axis>` for every symbolic dim (independent)."""
    model = onnx.load(str(EXPORTS_DIR / name / "model.onnx"), load_external_data=False)
    for v in [*model.graph.input, *model.graph.output]:
        for axis, d in enumerate(v.type.tensor_type.shape.dim):
            if d.dim_param:
                d.dim_param = f"{v.name}_dim_{axis}" if naming == "independent" else ("total" if "+" in d.dim_param else d.dim_param)
    folder.mkdir(parents=True)
    onnx.save(model, str(folder / "model.onnx"))
    return folder / "model.onnx"


def declared_dims(model: onnx.ModelProto) -> dict[str, list]:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*model.graph.input, *model.graph.output]}


def op_counts(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        counts[f"{n.domain}::{n.op_type}"] = counts.get(f"{n.domain}::{n.op_type}", 0) + 1
    return counts


@pytest.mark.parametrize("naming", NAMINGS)
@pytest.mark.parametrize("name", CACHE_EXPORTS)
def test_dims_named_by_the_exporter(optimized, tmp_path, name, naming):
    """The renamed export runs in onnxruntime as written (so it is valid); `mobius optimize
    --ep cpu` takes it, the result keeps every declared name on its inputs and outputs and
    matches transformers, prefill and decode. Named `total`, the promise total = past + seq
    lets every rule fire that fires on the export as torch wrote it: the same ops."""
    src = renamed(name, naming, tmp_path / "export")
    assert not compare(session(src), name, f"{name} renamed ({naming})")
    out = tmp_path / "optimized"
    run_mobius(["optimize", str(src), str(out), "--ep", "cpu", "-q"])
    after = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert declared_dims(after) == declared_dims(onnx.load(str(src), load_external_data=False))
    failures = compare(session(out / "model.onnx"), name, f"{name} renamed ({naming}) --ep cpu")
    assert not failures, "\n".join(failures)
    if naming == "total":
        assert op_counts(out / "model.onnx") == op_counts(optimized(name, "cpu") / "model.onnx")


def test_a_declared_dim_that_can_never_hold_is_refused(tmp_path):
    """Two different sizes (a present declared with 3 heads where the graph computes 2) are a
    contradiction, not a name: refused, naming the output, and nothing is written."""
    model = onnx.load(str(EXPORTS_DIR / "llama-legacy-cache" / "model.onnx"), load_external_data=False)
    model.graph.output[1].type.tensor_type.shape.dim[1].dim_value = 3
    (tmp_path / "export").mkdir()
    onnx.save(model, str(tmp_path / "export" / "model.onnx"))
    out = tmp_path / "out"
    r = run_mobius_unchecked(["optimize", str(tmp_path / "export" / "model.onnx"), str(out), "--ep", "cpu"])
    assert r.returncode == 1, r
    assert f"output `{model.graph.output[1].name}` is declared" in r.stderr and "dim 1 can never be 3" in r.stderr, r.stderr
    assert not out.exists()


# ---------------------------------------------------------------- --kv-cache genai
# EPs whose gqa_dtypes hold f32 (the exports' dtype): the export's attention becomes
# GroupQueryAttention there. Run on onnxruntime CPU, as every graph here.
GENAI_EPS = ["cpu", "webgpu"]
PAD_ROW_LEN, SEQ = 3, 5  # reference.npz's prompt rows (scripts/make_export_fixtures.py)
GENAI_NAMES = [n for n in NAMES if (EXPORTS_DIR / n / "genai.npz").is_file()]
# Exports whose attention the --kv-cache genai rules fuse (expect.json's `genai`): torch.onnx
# dynamo's mask, the legacy TorchScript exporter's and optimum-onnx's (TorchScript under
# transformers 4.57). Exports whose expect.json says "unread" (with why), and the exports without
# a cache (nothing for genai's cache contract to read), are left as they were.
GENAI_READ = [n for n in GENAI_NAMES if expectation(n)["genai"] != "unread"]
GENAI_UNREAD = [n for n in GENAI_NAMES if n not in GENAI_READ]
GENAI_LEFT_ALONE = GENAI_UNREAD + [n for n in NAMES if not n.endswith("-cache")]


def test_genai_references_present():
    """Every decoder cache export has its genai.npz (scripts/make_genai_references.py)."""
    want = {n for n in NAMES if n.endswith("-cache")}
    assert set(GENAI_NAMES) == want, sorted(want - set(GENAI_NAMES))
    assert GENAI_READ, "no dynamo cache export"


def genai_reference(name: str) -> dict[str, np.ndarray]:
    with np.load(EXPORTS_DIR / name / "genai.npz") as npz:
        return {k: npz[k] for k in npz.files}


def genai_layout_errors(sess, name: str, append: bool = False) -> list[tuple[str, float]]:
    """Runs the two rows of genai.npz batched in onnxruntime-genai's layout — the prompts
    right-padded (row 0: PAD_ROW_LEN tokens + pads), then one token per row per step, written
    after the row's own valid keys (mask 1 over them, 0 after; position_ids the row's length),
    past = the session's own presents — and returns (position, max abs error of the logits
    against transformers' unpadded forward of the row) for every valid position.
    `append`: the layout onnxruntime-genai gives a graph whose attention is ONNX Attention (its
    cache concatenated, `past_present_share_buffer` false as `mobius build` declares it): each
    step's mask is the previous one with a 1 appended (genai's UpdateAttentionMask without a
    static buffer), the new key written after the row's padding."""
    ref = genai_reference(name)
    pre = reference(name)["prefill"]
    rows = [ref["row0.input_ids"], ref["row1.input_ids"]]
    lengths = [PAD_ROW_LEN, SEQ]
    ids = pre["input_ids"].copy()
    assert ids[0, :PAD_ROW_LEN].tolist() == rows[0][:PAD_ROW_LEN].tolist()
    assert ids[1].tolist() == rows[1][:SEQ].tolist()
    past = {n: v for n, v in pre.items() if n.startswith("past_key_values.")}
    feeds = {"input_ids": ids, "attention_mask": pre["attention_mask"], "position_ids": pre["position_ids"], **past}
    errors = []
    got = run(sess, feeds)
    for b in range(2):
        err = max_abs_diff(got["logits"][b, : lengths[b]], ref[f"row{b}.logits"][: lengths[b]])
        errors.append((f"prefill row {b}", err))
    steps = len(rows[0]) - PAD_ROW_LEN
    for step in range(steps):
        total = SEQ + step + 1
        if append:
            mask = np.concatenate([feeds["attention_mask"], np.ones((2, 1), dtype=np.int64)], axis=1)
        else:
            mask = np.zeros((2, total), dtype=np.int64)
            for b in range(2):
                mask[b, : lengths[b] + 1] = 1
        feeds = {
            "input_ids": np.array([[rows[0][lengths[0]]], [rows[1][lengths[1]]]], dtype=np.int64),
            "attention_mask": mask,
            "position_ids": np.array([[lengths[0]], [lengths[1]]], dtype=np.int64),
            **{n: got[n.replace("past_key_values.", "present.")] for n in past},
        }
        got = run(sess, feeds)
        for b in range(2):
            err = max_abs_diff(got["logits"][b, 0], ref[f"row{b}.logits"][lengths[b]])
            errors.append((f"step {step} row {b}", err))
        lengths = [n + 1 for n in lengths]
    return errors


@pytest.mark.parametrize("ep", GENAI_EPS)
@pytest.mark.parametrize("name", GENAI_READ)
def test_genai_contract_matches_transformers(optimized, name, ep):
    """`--kv-cache genai`: expect.json's attention op in every layer, the export's I/O, and the
    logits of a right-padded prompt and 3 decode steps in genai's layout equal transformers'
    at every valid position; the export itself, fed the same, differs on the padded row."""
    out = optimized(name, ep, "genai")
    path = out / "model.onnx"
    check_model_file(path)
    before = onnx.load(str(EXPORTS_DIR / name / "model.onnx"), load_external_data=False)
    after = onnx.load(str(path), load_external_data=False)
    layers = sum(1 for i in before.graph.input if i.name.endswith(".key"))
    ops = [n.op_type for n in after.graph.node]
    op = expectation(name)["genai"]
    others = {"GroupQueryAttention", "Attention", "MultiHeadAttention"} - {op}
    assert ops.count(op) == layers and not others & set(ops), sorted(set(ops))
    inits = {t.name for t in after.graph.initializer}
    assert [(i.name, i.type) for i in after.graph.input if i.name not in inits] == [(i.name, i.type) for i in before.graph.input]
    assert [(o.name, o.type) for o in after.graph.output] == [(o.name, o.type) for o in before.graph.output]
    # ONNX Attention reads the mask by cache index, GroupQueryAttention by row length
    # (Σmask − 1): genai's append layout for the one, the row's valid keys first for the other.
    append = op == "Attention"
    errors = genai_layout_errors(session(path), name, append)
    bad = [f"{where}: {err:.3g}" for where, err in errors if not err <= TOL]
    assert not bad, f"{name} --ep {ep} --kv-cache genai vs transformers: " + ", ".join(bad)
    if append:
        return
    # The export's own contract differs: its first decode step writes row 0's new key at
    # cache index SEQ and reads the stale key at index PAD_ROW_LEN.
    export_errors = dict(genai_layout_errors(session(EXPORTS_DIR / name / "model.onnx"), name))
    assert export_errors["prefill row 0"] <= TOL
    assert export_errors["step 0 row 0"] > 1e-2, export_errors


class Int32Mask:
    """A session whose graph takes `attention_mask` as int32: the int64 feeds cast to it."""

    def __init__(self, sess):
        self.sess = sess

    def get_inputs(self):
        return self.sess.get_inputs()

    def get_outputs(self):
        return self.sess.get_outputs()

    def run(self, names, feeds):
        cast = {n: v.astype(np.int32) if n == "attention_mask" else v for n, v in feeds.items()}
        return self.sess.run(names, cast)


@pytest.mark.parametrize("name", ["llama-optimum-cache", "mpt-optimum-cache"])
def test_genai_flag_takes_an_int32_attention_mask(tmp_path, name):
    """An export whose attention_mask is int32 (valid: its mask ops take any integer type)
    becomes its build's attention op under --kv-cache genai in a model onnxruntime loads
    (GroupQueryAttention's lengths and the ALiBi bias's positions counted in int64 from the
    int32 mask), exact in genai's layout."""
    m = onnx.load(EXPORTS_DIR / name / "model.onnx")
    [mask] = [i for i in m.graph.input if i.name == "attention_mask"]
    mask.type.tensor_type.elem_type = onnx.TensorProto.INT32
    onnx.save(m, tmp_path / "model.onnx")
    out = tmp_path / "out"
    run_mobius(["optimize", str(tmp_path / "model.onnx"), str(out), "--ep", "cpu", "--kv-cache", "genai", "-q"])
    check_model_file(out / "model.onnx")
    layers = sum(1 for i in m.graph.input if i.name.endswith(".key"))
    ops = [n.op_type for n in onnx.load(out / "model.onnx", load_external_data=False).graph.node]
    op = expectation(name)["genai"]
    others = {"GroupQueryAttention", "Attention"} - {op}
    assert ops.count(op) == layers and not others & set(ops), sorted(set(ops))
    errors = genai_layout_errors(Int32Mask(session(out / "model.onnx")), name, op == "Attention")
    bad = [f"{where}: {err:.3g}" for where, err in errors if not err <= TOL]
    assert not bad, f"{name} with an int32 attention_mask vs transformers: " + ", ".join(bad)


@pytest.mark.parametrize("name", GENAI_LEFT_ALONE)
def test_genai_flag_leaves_unread_masks_alone(optimized, name):
    """Where no attention fuses (the exports without a cache, the exports expect.json marks
    "unread"), --kv-cache genai changes nothing: the same bytes as without it."""
    for ep in GENAI_EPS:
        a, b = optimized(name, ep), optimized(name, ep, "genai")
        for f in ("model.onnx", "model.onnx.data"):
            assert (a / f).read_bytes() == (b / f).read_bytes(), f"{name} --ep {ep}: {f} differs"


def checkpoint_of(name: str) -> str:
    """The tests/fixtures checkpoint an export fixture was made of: the longest fixture
    directory `name` starts with, then "-" (falcon-alibi-optimum-cache: falcon-alibi, not falcon)."""
    return max((d.name for d in FIXTURES_DIR.iterdir() if name.startswith(d.name + "-")), key=len)


def genai_config_for(name: str, out: Path, tmp: Path) -> Path:
    """A package for onnxruntime-genai: the optimized export (model.onnx) with the
    genai_config.json `mobius build --ep cpu` writes for the same checkpoint, its decoder
    inputs naming the export's position_ids too, the cache not shared (the export declares
    presents of past + seq)."""
    family = checkpoint_of(name)
    build = tmp / f"build-{family}"
    if not build.exists():
        run_mobius(["build", "--config", str(FIXTURES_DIR / family), str(build), "--ep", "cpu", "-q"])
    pkg = tmp / f"genai-{name}"
    shutil.copytree(out, pkg)
    cfg = json.loads((build / "genai_config.json").read_text())
    cfg["model"]["decoder"]["inputs"]["position_ids"] = "position_ids"
    cfg["search"]["past_present_share_buffer"] = False
    (pkg / "genai_config.json").write_text(json.dumps(cfg, indent=2))
    return pkg


@pytest.mark.parametrize("name", GENAI_READ)
def test_genai_greedy_on_optimized_export(optimized, tmp_path_factory, name):
    """onnxruntime-genai runs the `--kv-cache genai` export (its I/O names are genai's
    defaults) and its greedy tokens are transformers'."""
    import onnxruntime_genai as og

    ref = genai_reference(name)
    pkg = genai_config_for(name, optimized(name, "cpu", "genai"), tmp_path_factory.mktemp("genai"))
    config = og.Config(str(pkg))
    config.clear_providers()
    model = og.Model(config)
    prompt = ref["greedy.prompt"].tolist()
    count = len(ref["greedy.tokens"])
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + count, min_length=len(prompt) + count)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(prompt, dtype=np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    got = gen.get_sequence(0).tolist()[len(prompt):]
    assert got == ref["greedy.tokens"].tolist(), (got, ref["greedy.tokens"].tolist(), ref["greedy.margins"].tolist())


# ---------------------------------------------------------------- node counts
OPTIMUM_NAMES = [n for n in NAMES if n.endswith("-optimum-cache")]


def nodes(path: Path) -> int:
    return len(onnx.load(str(path), load_external_data=False).graph.node)


def onnxruntime_optimizer_nodes(name: str, tmp: Path) -> int:
    """Nodes onnxruntime's transformers optimizer leaves in the export: `optimize_model` with
    model_type gpt2 (its default opt_level 1), the heads and width of the checkpoint's
    config.json. Its level-1 step (an onnxruntime CPU session at ORT_ENABLE_BASIC, ConstantSharing
    disabled, saving the optimized graph) runs here, as optimize_model would run it, because
    optimize_model imports torch for it; then its fusions (opt_level 0)."""
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_model

    family = name.rsplit("-optimum-cache", 1)[0]
    cfg = json.loads((FIXTURES_DIR / family / "config.json").read_text())
    heads = cfg.get("num_attention_heads") or cfg.get("n_head") or cfg.get("n_heads") or cfg["num_heads"]
    hidden = cfg.get("hidden_size") or cfg.get("n_embd") or cfg["d_model"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp / "basic.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(str(EXPORTS_DIR / name / "model.onnx"), so, providers=["CPUExecutionProvider"], disabled_optimizers=["ConstantSharing"])
    model = optimize_model(str(tmp / "basic.onnx"), model_type="gpt2", num_heads=heads, hidden_size=hidden, opt_level=0)
    return len(model.model.graph.node)


@pytest.mark.parametrize("name", [with_gap(n, "onnxruntime") for n in OPTIMUM_NAMES])
def test_fewer_nodes_than_onnxruntime_optimizer(optimized, tmp_path, name):
    """`mobius optimize --ep cpu` (no flag) leaves fewer nodes in the optimum-onnx export than
    onnxruntime's transformers optimizer does."""
    ours = nodes(optimized(name, "cpu") / "model.onnx")
    theirs = onnxruntime_optimizer_nodes(name, tmp_path)
    assert ours < theirs, f"{name}: mobius optimize {ours} nodes, onnxruntime's optimizer {theirs}"


@pytest.mark.parametrize("name", [with_gap(n, "build_ratio") for n in OPTIMUM_NAMES if n in GENAI_READ])
def test_genai_optimized_export_near_a_build(optimized, tmp_path_factory, name):
    """`optimize --ep cpu --kv-cache genai` of the optimum-onnx export is at most 1.25x the
    nodes of `mobius build --ep cpu` of the same checkpoint."""
    family = name.rsplit("-optimum-cache", 1)[0]
    build = tmp_path_factory.mktemp("build") / family
    run_mobius(["build", "--config", str(FIXTURES_DIR / family), str(build), "--dtype", "f32", "--ep", "cpu", "-q"])
    ours, built = nodes(optimized(name, "cpu", "genai") / "model.onnx"), nodes(build / "model.onnx")
    assert ours <= 1.25 * built, f"{name}: optimize --kv-cache genai {ours} nodes, build {built} ({ours / built:.2f}x)"
