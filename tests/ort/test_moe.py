"""Mixture-of-experts blocks as `com.microsoft::MoE` (rewrites/fusion/moe.rules).

The EPs whose capabilities run the kernel get the fused op for every MoE layer of the
mixtral, qwen2_moe, qwen3_moe, olmoe, granitemoe, gpt_oss, hunyuan_v1_moe and dbrx fixtures (their transformers parity, decode and
onnxruntime-genai greedy runs are test_fixtures.py's, on these same builds); onnx-standard
keeps the dense block of standard ops.  Here the two forms are compared with each other on
the prompt and transformers' greedy continuation (44 routed tokens per layer), and the
router's margin is measured: the kernel and TopK order equal probabilities differently (the
higher expert index first, the lower), so the forms agree exactly when no token's k-th and
(k+1)-th router probability are equal.  The margins are printed in the session summary.
phimoe's sparsemixer routing is not what the kernel computes, nor is the score-corrected routing
of ernie4_5_moe and minimax_m2 (the top-k picked on the scores plus a per-expert bias), nor are
DeepSeek's group-limited routers (deepseek_v2, deepseek_v3, sarvam_mla, glm4_moe, glm4_moe_lite,
dots1, sarvam_moe, param2moe, hy_v3, minicpm5_moe, axk1), whose margins are measured here too: their blocks stay standard ops.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from ort_helpers import FIXTURES_DIR, NP_DTYPES, assert_close, load_config, load_reference, model_dims

NAMES = ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe", "gpt_oss", "hunyuan_v1_moe", "dbrx"]
FUSED = [("cpu", "f32"), ("cpu", "f16"), ("cuda", "f16"), ("cuda", "f32"), (None, "f32"), ("webgpu", "f16")]
TOL = {"f32": 1e-4, "f16": 2e-2}


def moe_layers(name: str) -> int:
    """MoE layers of the fixture, as its family selects them."""
    cfg = load_config(FIXTURES_DIR / name)
    layers = model_dims(cfg)["layers"]
    if cfg["model_type"] in ("mixtral", "olmoe", "granitemoe", "gpt_oss", "hunyuan_v1_moe", "dbrx"):
        return layers
    step, dense = cfg.get("decoder_sparse_step", 1), set(cfg.get("mlp_only_layers", []))
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def ops(out) -> list[str]:
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    return [f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in model.graph.node]


def sequence(name: str) -> list[int]:
    ref = load_reference(name)
    return ref["input_ids"] + ref["greedy_tokens"]


def prefill(path, name: str, dtype: str, outputs=None):
    """Outputs of one prefill of the prompt and its greedy continuation on onnxruntime CPU."""
    dims = model_dims(load_config(FIXTURES_DIR / name))
    ids = np.array([sequence(name)], dtype=np.int64)
    n = ids.shape[1]
    z = np.zeros((1, dims["kv_heads"], 0, dims["head_dim"]), dtype=NP_DTYPES[dtype])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {"input_ids": ids, "attention_mask": np.ones((1, n), dtype=np.int64)}
    feed.update({f"past_key_values.{i}.{kv}": z for i in range(dims["layers"]) for kv in ("key", "value")})
    if any(i.name == "position_ids" for i in sess.get_inputs()):
        feed["position_ids"] = np.arange(n, dtype=np.int64)[None]
    names = outputs or [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feed)))


@pytest.mark.parametrize("ep,dtype", FUSED, ids=[f"{e or 'noflag'}-{d}" for e, d in FUSED])
@pytest.mark.parametrize("name", NAMES)
def test_moe_blocks_are_fused(built, ep_caps, name, ep, dtype):
    caps = ep_caps[ep or "default"]
    assert caps["supports_fused_moe"] and caps["supports_contrib_ops"], ep
    got = ops(built("fixture", name, dtype, ep))
    assert got.count("com.microsoft::MoE") == moe_layers(name), got
    assert "ai.onnx::TopK" not in got, got


@pytest.mark.parametrize("name", NAMES)
def test_onnx_standard_keeps_the_dense_block(built, name):
    got = ops(built("fixture", name, "f32", "onnx-standard"))
    assert got.count("ai.onnx::TopK") == moe_layers(name), got
    assert all(not o.startswith("com.microsoft::") for o in got), got


@pytest.mark.parametrize("fused_ep,dtype", [("cpu", "f32"), ("cuda", "f16")])
@pytest.mark.parametrize("name", NAMES)
def test_fused_and_dense_blocks_agree(built, name, fused_ep, dtype):
    fused = built("fixture", name, dtype, fused_ep)
    dense = built("fixture", name, dtype, "onnx-standard")
    a = prefill(fused / "model.onnx", name, dtype)["logits"].astype(np.float32)
    b = prefill(dense / "model.onnx", name, dtype)["logits"].astype(np.float32)
    assert_close(a, b, TOL[dtype], f"{name} --ep {fused_ep} {dtype}: fused vs dense")


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", NAMES)
def test_router_margin(built, record_moe_margin, tmp_path, name, dtype):
    """The smallest gap between a token's k-th and (k+1)-th router probability (gpt_oss: router
    logit, which its TopK ranks), over every MoE layer and token of the sequence (read from the
    dense build's TopK input): positive, so the kernel's tie order never applies."""
    out = built("fixture", name, dtype, "onnx-standard")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    probs = [n.input[0] for n in model.graph.node if n.op_type == "TopK"]
    assert len(probs) == moe_layers(name)
    # The softmax runs in f32; gpt_oss ranks its logits in the model dtype.
    ranked = onnx.TensorProto.FLOAT16 if name == "gpt_oss" and dtype == "f16" else onnx.TensorProto.FLOAT
    for p in probs:
        model.graph.output.append(onnx.helper.make_tensor_value_info(p, ranked, None))
    path = out / f"router-probs-{tmp_path.name}.onnx"
    onnx.save(model, str(path))
    try:
        got = prefill(path, name, dtype, probs)
    finally:
        path.unlink()
    cfg = load_config(FIXTURES_DIR / name)
    # hunyuan_v1_moe: `moe_topk`, one count or one per layer; dbrx: `ffn_config.moe_top_k`.
    k = cfg.get("num_experts_per_tok", cfg.get("moe_topk", (cfg.get("ffn_config") or {}).get("moe_top_k")))
    ks = k if isinstance(k, list) else [k] * len(probs)
    top = [-np.sort(-got[p].astype(np.float32), axis=-1) for p in probs]
    margin = min(float((t[..., k - 1] - t[..., k]).min()) for t, k in zip(top, ks))
    record_moe_margin(f"{name} {dtype}", margin)
    assert margin > 0, f"{name} {dtype}: a tie at the k-th router probability"


@pytest.mark.parametrize("name", NAMES)
def test_optimize_moves_between_the_forms(built, tmp_path, name):
    """`mobius optimize` of saved models: the default build's MoE calls for onnx-standard become
    the dense block (no contrib op left), and the onnx-standard build's dense blocks for cpu become
    MoE calls; both give the source's logits on the 44 tokens."""
    from ort_helpers import run_mobius

    for source_ep, target_ep, want_moe in [("default", "onnx-standard", 0), ("onnx-standard", "cpu", moe_layers(name))]:
        source = built("fixture", name, "f32", source_ep)
        out = tmp_path / f"{source_ep}-to-{target_ep}"
        run_mobius(["optimize", str(source / "model.onnx"), str(out), "--ep", target_ep])
        got = ops(out)
        assert got.count("com.microsoft::MoE") == want_moe, got
        if target_ep == "onnx-standard":
            assert all(not o.startswith("com.microsoft::") for o in got), got
        a = prefill(source / "model.onnx", name, "f32")["logits"]
        b = prefill(out / "model.onnx", name, "f32")["logits"]
        assert_close(b, a, TOL["f32"], f"{name} {source_ep} -> {target_ep}")


# phimoe routes by the sparsemixer; its blocks stay standard ops on every EP (below).
@pytest.mark.parametrize("ep,dtype", FUSED, ids=[f"{e or 'noflag'}-{d}" for e, d in FUSED])
def test_sparsemixer_blocks_stay_standard(built, ep, dtype):
    """Two TopK (one per pick) per phimoe layer and no MoE, where the kernel would run."""
    got = ops(built("fixture", "phimoe", dtype, ep))
    layers = load_config(FIXTURES_DIR / "phimoe")["num_hidden_layers"]
    assert "com.microsoft::MoE" not in got, got
    assert got.count("ai.onnx::TopK") == 2 * layers, got


# DeepSeek's group-limited routers (sigmoid or softmax scores, a correction bias, groups; also
# sarvam_mla's, glm4_moe's, glm4_moe_lite's, dots1's, sarvam_moe's, param2moe's, hy_v3's (one
# group), minicpm5_moe's and axk1's) are not what the kernel computes: their
# blocks stay standard ops on every EP.
GROUPED = ["deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite", "dots1", "sarvam_mla", "sarvam_moe",
           "param2moe", "hy_v3", "minicpm5_moe", "axk1"]


def grouped_moe_layers(name: str) -> int:
    """MoE layers of a fixture with DeepSeek's router: from first_k_dense_replace on, or those
    mlp_layer_types names sparse."""
    cfg = load_config(FIXTURES_DIR / name)
    if "mlp_layer_types" in cfg:
        return cfg["mlp_layer_types"].count("sparse")
    return cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]


def router_selections(name: str) -> int:
    """Selections per MoE layer: the kept groups (where fewer than all are kept), the experts."""
    cfg = load_config(FIXTURES_DIR / name)
    limited = cfg.get("topk_method", "group_limited_greedy") == "group_limited_greedy"
    return 1 + int(limited and cfg.get("topk_group", 1) < cfg.get("n_group", 1))


@pytest.mark.parametrize("ep,dtype", FUSED, ids=[f"{e or 'noflag'}-{d}" for e, d in FUSED])
@pytest.mark.parametrize("name", GROUPED)
def test_grouped_router_blocks_stay_standard(built, name, ep, dtype):
    """No MoE where the kernel would run: the dense block's TopK selections in every MoE layer."""
    got = ops(built("fixture", name, dtype, ep))
    assert "com.microsoft::MoE" not in got and "com.microsoft::QMoE" not in got, got
    assert got.count("ai.onnx::TopK") >= router_selections(name) * grouped_moe_layers(name), got


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", GROUPED)
def test_grouped_router_margin(built, record_moe_margin, tmp_path, name, dtype):
    """The smallest gap, over every MoE layer and token of the sequence, between the k-th and
    (k+1)-th entry of each selection the router makes (the kept groups by their worth, then the
    top-k experts of the kept groups by their choice scores; read from the dense build's TopK
    inputs, computed in f32): positive, so no pick is a tie."""
    out = built("fixture", name, dtype, "onnx-standard")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    consts = {i.name: i for i in model.graph.initializer}
    picks = [
        (n.input[0], int(onnx.numpy_helper.to_array(consts[n.input[1]])[0]))
        for n in model.graph.node
        if n.op_type == "TopK"
    ]
    for p, _ in picks:
        model.graph.output.append(onnx.helper.make_tensor_value_info(p, onnx.TensorProto.FLOAT, None))
    path = out / f"router-scores-{tmp_path.name}.onnx"
    onnx.save(model, str(path))
    try:
        got = prefill(path, name, dtype, [p for p, _ in picks])
    finally:
        path.unlink()
    # The 4-D inputs are the top two per group of DeepSeek-V3's router, whose sum does not
    # depend on ties.
    gaps = [
        float((t[..., k - 1] - t[..., k]).min())
        for t, k in ((-np.sort(-got[p], axis=-1), k) for p, k in picks)
        if t.ndim == 3
    ]
    assert len(gaps) == router_selections(name) * grouped_moe_layers(name), gaps
    record_moe_margin(f"{name} {dtype}", min(gaps))
    assert min(gaps) > 0, f"{name} {dtype}: a tie in a router selection"


def test_cpu_moe_ignores_use_sparse_mixer():
    """Why phimoe is not fused: onnxruntime's CPU MoE gives the same output with and without
    `use_sparse_mixer`, the softmax → top-k routing's (when this fails, the kernel has changed:
    check it against transformers' sparsemixer before fusing phimoe)."""
    from onnx import TensorProto, helper, numpy_helper

    r = np.random.default_rng(15)
    e, h, i, t = 4, 8, 4, 6
    fc1 = r.standard_normal((e, 2 * i, h)).astype(np.float32)
    fc2 = r.standard_normal((e, h, i)).astype(np.float32)
    x = r.standard_normal((t, h)).astype(np.float32)
    # close logits, so that the sparsemixer's masks keep several experts
    logits = (1.0 + 0.05 * r.standard_normal((t, e))).astype(np.float32)

    def run(sparse_mixer: int) -> np.ndarray:
        node = helper.make_node(
            "MoE", ["x", "logits", "fc1", "", "fc2"], ["y"], domain="com.microsoft", k=2,
            activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=0,
            use_sparse_mixer=sparse_mixer)
        graph = helper.make_graph(
            [node], "moe",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [t, h]),
             helper.make_tensor_value_info("logits", TensorProto.FLOAT, [t, e])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(fc1, "fc1"), numpy_helper.from_array(fc2, "fc2")])
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": x, "logits": logits})[0]

    def expert(j: int, v: np.ndarray) -> np.ndarray:
        a = fc1[j] @ v
        gate, up = a[0::2], a[1::2]
        return fc2[j] @ (gate / (1 + np.exp(-gate)) * up)

    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    top = np.argsort(-p, axis=-1, kind="stable")[:, :2]
    softmax_top2 = np.stack([sum(p[n, j] * expert(j, x[n]) for j in top[n]) for n in range(t)])
    plain, mixer = run(0), run(1)
    assert_close(plain, softmax_top2, 1e-4, "softmax top-2 block")
    assert np.array_equal(mixer, plain)


# Score-corrected routers (components::moe::Router::Corrected) pick the top-k on the scores plus a
# per-expert bias, which the kernel does not take: their blocks stay standard ops on every EP.
CORRECTED = ["ernie4_5_moe", "minimax_m2"]


def corrected_routing(name: str) -> tuple[int, int]:
    """(k, MoE layers) of a score-corrected fixture, as its family reads them."""
    cfg = load_config(FIXTURES_DIR / name)
    layers = cfg["num_hidden_layers"]
    if cfg["model_type"] == "minimax_m2":
        return cfg["num_experts_per_tok"], layers
    start, end = cfg.get("moe_layer_start_index", 1), cfg.get("moe_layer_end_index", -1)
    end = layers - 1 if end == -1 else end
    interval = cfg.get("moe_layer_interval", 1)
    moe = sum(1 for i in range(layers) if (i + 1) % interval == 0 and start <= i <= end)
    return cfg["moe_k"], moe


@pytest.mark.parametrize("ep,dtype", FUSED, ids=[f"{e or 'noflag'}-{d}" for e, d in FUSED])
@pytest.mark.parametrize("name", CORRECTED)
def test_score_corrected_blocks_stay_standard(built, name, ep, dtype):
    """One TopK (on the corrected scores) per MoE layer and no MoE, where the kernel would run."""
    got = ops(built("fixture", name, dtype, ep))
    assert "com.microsoft::MoE" not in got, got
    assert got.count("ai.onnx::TopK") == corrected_routing(name)[1], got


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("name", CORRECTED)
def test_corrected_router_margin(built, record_moe_margin, tmp_path, name, dtype):
    """The smallest gap between a token's k-th and (k+1)-th corrected score (the TopK input, in
    f32) over every MoE layer and token of the sequence: positive, no tie decides a pick."""
    k, layers = corrected_routing(name)
    out = built("fixture", name, dtype, "onnx-standard")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    scores = [n.input[0] for n in model.graph.node if n.op_type == "TopK"]
    assert len(scores) == layers
    for p in scores:
        model.graph.output.append(onnx.helper.make_tensor_value_info(p, onnx.TensorProto.FLOAT, None))
    path = out / f"router-scores-{tmp_path.name}.onnx"
    onnx.save(model, str(path))
    try:
        got = prefill(path, name, dtype, scores)
    finally:
        path.unlink()
    top = [-np.sort(-got[p], axis=-1) for p in scores]
    margin = min(float((t[..., k - 1] - t[..., k]).min()) for t in top)
    record_moe_margin(f"{name} {dtype}", margin)
    assert margin > 0, f"{name} {dtype}: a tie at the k-th corrected score"
