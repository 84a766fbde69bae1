"""`mobius build --features static-cache --max-seq-len N`: a KV cache of N slots.

A reference loop drives each static-cache build (prefill of the fixture's prompt, then 8 decode
steps on transformers' greedy tokens) next to the dynamic build of the same EP: the logits must
agree at every step (f32, <= 1e-4; the prefill also against transformers' own logits) and the
greedy token of every step must be transformers'. Forms: default (TensorScatter + Attention),
cpu (the same, where the dynamic build runs GroupQueryAttention) and qnn (ScatterND and the
decomposed attention), all run by onnxruntime; the reference interpreter (`mobius run`) runs the
default and qnn forms' prefill and first decode step. Fixtures: llama and qwen3 (GroupQueryAttention
in their dynamic cpu builds), gemma2 (sliding window 5 < the sequence, soft-capping) and phi3
(LongRoPE: Attention on every EP).

Also: a right-padded batch of two prompts of different lengths (the row-wise write indices), the
graph contract, the absent genai_config.json (onnxruntime-genai 0.18 cannot feed the static
inputs: pinned below), and onnxruntime and the interpreter refusing the same out-of-range writes.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ort_helpers import FIXTURES_DIR, load_config, load_reference, model_dims, run_mobius, run_mobius_unchecked

NAMES = ["llama", "qwen3", "gemma2", "phi3"]
EPS = ["default", "cpu", "qnn"]
SLOTS = 64
STEPS = 8
TOL = 1e-4


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    cache = {}

    def get(name: str, ep: str, static: bool):
        key = (name, ep, static)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{name}-{ep}-{'static' if static else 'dynamic'}")
            args = ["build", "--config", str(FIXTURES_DIR / name), str(out), "--dtype", "f32", "-q",
                    "--overwrite", "--ep", ep]
            if static:
                args += ["--features", "static-cache", "--max-seq-len", str(SLOTS)]
            run_mobius(args)
            cache[key] = out
        return cache[key]

    return get


def session(out):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(out / "model.onnx"), so, providers=["CPUExecutionProvider"])


def input_names(sess) -> set[str]:
    return {i.name for i in sess.get_inputs()}


class Dynamic:
    """The growing-cache contract: attention_mask, past_key_values.*/present.*."""

    def __init__(self, sess, dims, batch):
        self.sess, self.dims = sess, dims
        z = np.zeros((batch, dims["kv_heads"], 0, dims["head_dim"]), np.float32)
        self.past = {f"past_key_values.{i}.{kv}": z for i in range(dims["layers"]) for kv in ("key", "value")}
        self.length = 0

    def step(self, ids):
        ids = np.asarray(ids, np.int64)
        s = ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((ids.shape[0], self.length + s), np.int64), **self.past}
        if "position_ids" in input_names(self.sess):
            feed["position_ids"] = np.tile(np.arange(self.length, self.length + s), (ids.shape[0], 1))
        outs = dict(zip([o.name for o in self.sess.get_outputs()], self.sess.run(None, feed)))
        self.past = {k: outs[k.replace("past_key_values", "present")] for k in self.past}
        self.length += s
        return outs["logits"]


class Static:
    """The static-cache contract, one write index per row: the reference loop."""

    def __init__(self, sess, dims, batch):
        self.sess, self.dims = sess, dims
        width = dims["kv_heads"] * dims["head_dim"]
        z = np.zeros((batch, SLOTS, width), np.float32)
        self.cache = {f"{kv}_cache.{i}": z for i in range(dims["layers"]) for kv in ("key", "value")}
        self.written = np.zeros(batch, np.int64)

    def feed(self, ids):
        ids = np.asarray(ids, np.int64)
        s = ids.shape[1]
        feed = {"input_ids": ids, "write_indices": self.written, "nonpad_kv_seqlen": self.written + s, **self.cache}
        if "position_ids" in input_names(self.sess):
            feed["position_ids"] = self.written[:, None] + np.arange(s)[None, :]
        return feed

    def step(self, ids, valid=None):
        """One call; `valid[b]` new tokens of row b are real (the rest right padding)."""
        outs = dict(zip([o.name for o in self.sess.get_outputs()], self.sess.run(None, self.feed(ids))))
        self.cache = {k: outs[f"updated_{k}"] for k in self.cache}
        self.written = self.written + (np.asarray(valid) if valid is not None else np.asarray(ids).shape[1])
        return outs["logits"]


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("name", NAMES)
def test_static_cache_reproduces_the_dynamic_build(build, name, ep):
    dims = model_dims(load_config(FIXTURES_DIR / name))
    ref = load_reference(name)
    dyn = Dynamic(session(build(name, ep, False)), dims, 1)
    sta = Static(session(build(name, ep, True)), dims, 1)
    ids = [ref["input_ids"]]
    want, got = dyn.step(ids), sta.step(ids)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=f"{name} --ep {ep} prefill")
    np.testing.assert_allclose(got[0], np.asarray(ref["logits"]), rtol=0, atol=TOL,
                               err_msg=f"{name} --ep {ep} prefill vs transformers")
    for step in range(STEPS):
        token = ref["greedy_tokens"][step]
        assert int(np.argmax(got[0, -1])) == token, f"{name} --ep {ep} step {step}"
        want, got = dyn.step([[token]]), sta.step([[token]])
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=f"{name} --ep {ep} decode {step}")
    assert int(np.argmax(got[0, -1])) == ref["greedy_tokens"][STEPS]


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_right_padded_batch_writes_each_row_from_its_length(build, name):
    """Two prompts of different lengths in one prefill (the short one right-padded), then decode
    steps where each row writes from its own length: every row's logits are its own run's."""
    dims = model_dims(load_config(FIXTURES_DIR / name))
    ref = load_reference(name)
    long_ids, short_ids = ref["input_ids"], ref["input_ids"][3:]
    sta = Static(session(build(name, "default", True)), dims, 2)
    rows = {0: Dynamic(session(build(name, "default", False)), dims, 1),
            1: Dynamic(session(build(name, "default", False)), dims, 1)}
    pad = len(long_ids) - len(short_ids)
    got = sta.step([long_ids, short_ids + [0] * pad], valid=[len(long_ids), len(short_ids)])
    want = [rows[0].step([long_ids]), rows[1].step([short_ids])]
    np.testing.assert_allclose(got[0], want[0][0], rtol=0, atol=TOL)
    np.testing.assert_allclose(got[1, :len(short_ids)], want[1][0], rtol=0, atol=TOL)
    for step in range(3):
        tokens = [ref["greedy_tokens"][step], 7 + step]
        got = sta.step([[t] for t in tokens])
        for b in (0, 1):
            np.testing.assert_allclose(got[b], rows[b].step([[tokens[b]]])[0], rtol=0, atol=TOL,
                                       err_msg=f"{name} row {b} decode {step}")


def declared(out) -> onnx.ModelProto:
    return onnx.load(str(out / "model.onnx"), load_external_data=False)


@pytest.mark.parametrize("ep", EPS)
def test_contract_and_checker(build, ep):
    out = build("llama", ep, True)
    model = onnx.load(str(out / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    dims = model_dims(load_config(FIXTURES_DIR / "llama"))
    shape = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]  # noqa: E731
    width = dims["kv_heads"] * dims["head_dim"]
    caches = [f"{kv}_cache.{i}" for i in range(dims["layers"]) for kv in ("key", "value")]
    ins = {v.name: shape(v) for v in model.graph.input}
    assert list(ins) == ["input_ids", "position_ids", *caches, "write_indices", "nonpad_kv_seqlen"]
    assert all(ins[c] == ["batch", SLOTS, width] for c in caches)
    assert ins["write_indices"] == ins["nonpad_kv_seqlen"] == ["batch"]
    outs = {v.name: shape(v) for v in model.graph.output}
    assert list(outs) == ["logits", *(f"updated_{c}" for c in caches)]
    assert all(outs[f"updated_{c}"] == ["batch", SLOTS, width] for c in caches)
    ops = {n.op_type for n in model.graph.node}
    assert "GroupQueryAttention" not in ops
    if ep == "qnn":
        assert "ScatterND" in ops and not ops & {"TensorScatter", "Attention"}
    else:
        assert {"TensorScatter", "Attention"} <= ops
    assert not (out / "genai_config.json").exists()


def test_genai_cannot_feed_a_static_cache(build, tmp_path):
    """Why static-cache builds get no genai_config.json: onnxruntime-genai 0.18 allocates its
    caches itself as 4-D [batch, kv_heads, length, head_dim] tensors and has no input kind for
    write_indices or nonpad_kv_seqlen. A config naming the static caches is refused at the first
    step. (When a later onnxruntime-genai accepts this, write the config.)"""
    import shutil

    import onnxruntime_genai as og

    out = tmp_path / "pkg"
    shutil.copytree(build("llama", "default", True), out)
    dyn_config = json.loads((build("llama", "default", False) / "genai_config.json").read_text())
    decoder = dyn_config["model"]["decoder"]
    decoder["inputs"] = {"input_ids": "input_ids", "position_ids": "position_ids",
                         "past_key_names": "key_cache.%d", "past_value_names": "value_cache.%d"}
    decoder["outputs"] = {"logits": "logits", "present_key_names": "updated_key_cache.%d",
                          "present_value_names": "updated_value_cache.%d"}
    dyn_config["search"].update(past_present_share_buffer=True, max_length=SLOTS)
    (out / "genai_config.json").write_text(json.dumps(dyn_config))
    model = og.Model(str(out))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=20)
    gen = og.Generator(model, params)
    with pytest.raises(Exception, match="key_cache.0"):
        gen.append_tokens(np.array(load_reference("llama")["input_ids"], dtype=np.int32))
        gen.generate_next_token()


def interp_outputs(model_path, feed, work):
    args = ["run", str(model_path), "--output-dir", str(work / "out"), "--overwrite"]
    for name, a in feed.items():
        f = work / f"{name}.npy"
        np.save(f, a)
        args += ["--input", f"{name}={f}"]
    run_mobius(args)
    return {f.stem: np.load(f) for f in (work / "out").glob("*.npy")}


@pytest.mark.parametrize("ep", ["default", "qnn"])
def test_interpreter_runs_the_static_forms(build, ep, tmp_path):
    """`mobius run` (TensorScatter / ScatterND and the attention with nonpad_kv_seqlen) gives
    onnxruntime's logits and updated caches for the prefill and a decode step."""
    name = "gemma2"
    dims = model_dims(load_config(FIXTURES_DIR / name))
    ref = load_reference(name)
    out = build(name, ep, True)
    sta = Static(session(out), dims, 1)
    for ids in ([ref["input_ids"]], [[ref["greedy_tokens"][0]]]):
        feed = sta.feed(ids)
        want = dict(zip([o.name for o in sta.sess.get_outputs()], sta.sess.run(None, feed)))
        got = interp_outputs(out / "model.onnx", feed, tmp_path)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=0, atol=1e-5, err_msg=f"--ep {ep} {k}")
        sta.step(ids)


def scatter_model(path, cache_shape, update_shape):
    node = helper.make_node("TensorScatter", ["c", "u", "w"], ["o"], axis=1)
    vi = helper.make_tensor_value_info
    g = helper.make_graph([node], "g", [vi("c", TensorProto.FLOAT, cache_shape), vi("u", TensorProto.FLOAT, update_shape),
                                        vi("w", TensorProto.INT64, [cache_shape[0]])],
                          [vi("o", TensorProto.FLOAT, cache_shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 24)], ir_version=11)
    onnx.save(m, str(path))


@pytest.mark.parametrize("write", [[4, 0], [-1, 0], [0, 5]])
def test_out_of_range_writes_are_refused_by_both(tmp_path, write):
    """A write past the last slot (or before the first) is an error in onnxruntime and in the
    interpreter alike, never a silent wrap."""
    path = tmp_path / "m.onnx"
    scatter_model(path, [2, 6, 4], [2, 3, 4])
    feed = {"c": np.zeros((2, 6, 4), np.float32), "u": np.ones((2, 3, 4), np.float32), "w": np.array(write, np.int64)}
    so = ort.SessionOptions()
    so.log_severity_level = 4
    with pytest.raises(Exception, match="write_indices"):
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feed)
    args = ["run", str(path), "--output-dir", str(tmp_path / "out")]
    for name, a in feed.items():
        np.save(tmp_path / f"{name}.npy", a)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    proc = run_mobius_unchecked(args)
    assert proc.returncode == 1, proc.stderr
    assert "write_indices" in proc.stderr and "TensorScatter" in proc.stderr
