"""Hybrid decoders (reference.json task "hybrid-text-generation": LFM2's short-convolution
layers beside attention, Mamba2's selective state-space layers alone or beside attention, Mamba's and
FalconMamba's selective state-space layers) built by `mobius build` and run through onnxruntime and
onnxruntime-genai against transformers (scripts/make_fixtures.py).

A `conv` layer carries its conv state instead of a KV cache: graph input `past.{i}.conv` and
output `present.{i}.conv`, `[batch, hidden, conv_L_cache - 1]` in the model dtype
(onnxruntime-genai 0.18's names for lfm2; docs/recurrent.md). A Mamba2 layer carries its conv
state `past.{i}.conv` (`[batch, conv_dim, conv_kernel - 1]`) and its SSM state `past.{i}.ssm`
(`[batch, num_heads, head_dim, state_size]`); Bamba and Granite-4 (granitemoehybrid) mix
such Mamba2 layers with attention layers by layer index, each layer carrying its own kind of
state; a Mamba or FalconMamba layer carries its conv state (`[batch, expand * hidden_size,
conv_kernel - 1]`) and SSM state (`[batch, expand * hidden_size, state_size]`). Nemotron-H's
blocks are one mixer each: Mamba2 and attention layers carry their states as above, its MLP and
MoE blocks nothing. Jamba's Mamba-1 layers (`[batch, mamba_expand * hidden_size, ...]`) sit
beside attention layers by `attn_layer_period` / `attn_layer_offset`. A Qwen3-Next
`linear_attention` (Gated DeltaNet) layer carries its conv state (`[batch, 2 * linear_num_key_heads *
linear_key_head_dim + linear_num_value_heads * linear_value_head_dim, linear_conv_kernel_dim - 1]`)
and its recurrent state `past.{i}.recurrent` (`[batch, linear_num_value_heads,
linear_key_head_dim, linear_value_head_dim]`, onnxruntime-genai 0.18's name for qwen3_5);
Qwen3.5's text decoders (qwen3_5_text, qwen3_5_moe_text) the same. A RecurrentGemma `recurrent`
layer (Griffin's RG-LRU block) carries its conv state (`[batch, lru_width, conv1d_width - 1]`) and
its RG-LRU state `past.{i}.recurrent` (`[batch, lru_width]`); its local-attention layers their
whole KV cache (the window is a mask). A Falcon-H1 layer runs
attention and a Mamba2 mixer side by side (kind `hybrid`): it carries its KV cache, then the
mixer's conv and SSM states; so does a Zamba2 `hybrid` layer (a shared transformer block before
its Mamba2 mixer), beside its Mamba2 layers. DeepSeek Sparse Attention
(deepseek_v32, glm_moe_dsa, axk2): a layer running its own learned indexer (`indexed_attention`) carries
the indexer's keys `past_key_values.{i}.index_key` (`[batch, past_sequence_len, index_head_dim]`)
after its KV cache; a GLM-5 layer reusing an earlier layer's selection (`indexer_types`
`shared`) carries its KV cache alone; onnxruntime-genai 0.18's decoder carries no such cache, so
those packages have no genai_config.json either, and their attention (an additive index mask)
stays opset-24 Attention.
Qwen3.5's take `position_ids` `[3, batch, sequence]` (the multimodal RoPE's temporal, height and
width rows) as onnxruntime-genai 0.18 feeds its `qwen3_5_text` / `qwen3_5_moe_text` packages; text
tokens give three equal rows, and the fixture's `mrope` case three different ones.
onnxruntime-genai 0.18 runs no model type with an SSM state, nor qwen3_next or recurrent_gemma, so
those packages have no genai_config.json. Every build in BUILDS must give
transformers' prefill logits, then those of 8 decode steps fed one token at a time with the
returned state and KV cache, within TOL; onnxruntime-genai's greedy tokens must be
transformers'.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from ort_helpers import FIXTURES_DIR, HYBRID_TASK, NP_DTYPES, assert_close, fixture_names_for, load_config, load_reference
from contract import DIM_PARAMS, ELEM, _shape, check_model_file
from test_fixtures import (
    BUILDS,
    F16_EPS,
    F16_GREEDY_MIN_EQUAL,
    GENAI_BUILDS,
    TOL,
    genai_greedy,
    genai_model,
)

NAMES = fixture_names_for(HYBRID_TASK)
CASES = [(name, ep, dtype) for name in NAMES for ep, dtype in BUILDS]
per_build = pytest.mark.parametrize("name,ep,dtype", CASES, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in CASES])
# onnxruntime-genai model.type per HF model_type (the ones it runs as hybrids).
GENAI_TYPES = {"lfm2": "lfm2", "lfm2_moe": "lfm2_moe", "qwen3_5_text": "qwen3_5_text",
               "qwen3_5_moe_text": "qwen3_5_moe_text"}
# The model types whose position_ids are multimodal RoPE rows, `[3, batch, sequence]`.
MROPE_TYPES = {"qwen3_5_text", "qwen3_5_moe_text"}


# Layer kinds as the hybrids' configs spell them (Granite-4's legacy names included; Nemotron-H's
# `mlp` and `moe` blocks mix no tokens and carry nothing: `none`).
KINDS = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "full_attention",
    "full_attention": "full_attention",
    "mlp": "none",
    "moe": "none",
}


# The model types whose `linear_attention` layers are Gated DeltaNet (conv and recurrent
# states), beside `full_attention` layers.
GATED_DELTA_TYPES = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"}


# The state-space-only model types: every layer a selective-scan mixer (`mamba`) carrying a
# conv and an SSM state, no genai_config.json.
SSM_TYPES = {"mamba2", "mamba", "falcon_mamba"}


def config(name: str) -> dict:
    """config.json of fixture `name`, or its `text_config` where it is an image-text checkpoint
    (Qwen3_5ForConditionalGeneration: its text decoder is what mobius builds)."""
    cfg = load_config(FIXTURES_DIR / name)
    return cfg.get("text_config") or cfg
# DeepSeek Sparse Attention (A.X-K2's too): multi-head latent attention (its cache per head, q/k head size) with a
# learned indexer whose keys are cached per layer; no genai_config.json.
SPARSE_TYPES = {"deepseek_v32", "glm_moe_dsa", "axk2"}


def layer_types(name: str) -> list[str]:
    """Per layer, `conv` or `full_attention` as config.json says (LFM2), or `mamba` /
    `full_attention` (Mamba2, Mamba, FalconMamba: every layer; Bamba: `attn_layer_indices` attend; Granite-4:
    its `layer_types`)."""
    cfg = config(name)
    if cfg["model_type"] == "nemotron_h":
        return [KINDS[t] for t in cfg["layers_block_type"]]
    if cfg["model_type"] in SPARSE_TYPES:
        # A GLM-5 `shared` layer runs no indexer: its KV cache alone.
        owners = cfg.get("indexer_types") or ["full"] * cfg["num_hidden_layers"]
        return ["indexed_attention" if t == "full" else "full_attention" for t in owners]
    layers = cfg["num_hidden_layers"]
    if cfg["model_type"] in SSM_TYPES:
        return ["mamba"] * layers
    if cfg["model_type"] == "bamba":
        attn = set(cfg.get("attn_layer_indices") or [])
        return ["full_attention" if i in attn else "mamba" for i in range(layers)]
    if cfg["model_type"] == "granitemoehybrid":
        return [KINDS[t] for t in cfg["layer_types"]]
    if cfg["model_type"] == "falcon_h1":
        return ["hybrid"] * layers
    if cfg["model_type"] == "zamba2":
        return ["hybrid" if t == "hybrid" else "mamba" for t in cfg["layers_block_type"]]
    if cfg["model_type"] == "jamba":
        period, offset = cfg["attn_layer_period"], cfg["attn_layer_offset"]
        return ["full_attention" if i % period == offset else "mamba" for i in range(layers)]
    if cfg["model_type"] == "recurrent_gemma":
        # block_types cycled over the layers; the local attention carries a KV cache as
        # full_attention does.
        types = cfg.get("block_types") or ["recurrent", "recurrent", "attention"]
        return ["recurrent" if types[i % len(types)] == "recurrent" else "full_attention" for i in range(layers)]
    return cfg["layer_types"]


def is_ssm(name: str) -> bool:
    return config(name)["model_type"] in SSM_TYPES


def has_ssm(name: str) -> bool:
    """Whether a layer carries an SSM state (no onnxruntime-genai 0.18 model type does)."""
    return bool({"mamba", "hybrid"} & set(layer_types(name)))


def dims(name: str) -> dict:
    cfg = config(name)
    if cfg["model_type"] in ("mamba", "falcon_mamba"):
        inner = cfg["expand"] * cfg["hidden_size"]
        return {
            "conv": inner,
            "state": cfg["conv_kernel"] - 1,
            "ssm": [inner, cfg["state_size"]],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] == "jamba":
        inner = cfg["mamba_expand"] * cfg["hidden_size"]
        return {
            "conv": inner,
            "state": cfg["mamba_d_conv"] - 1,
            "ssm": [inner, cfg["mamba_d_state"]],
            "kv_heads": cfg["num_key_value_heads"],
            "head_dim": cfg["head_dim"],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] in GATED_DELTA_TYPES:
        return {
            "conv": 2 * cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
            + cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"],
            "state": cfg["linear_conv_kernel_dim"] - 1,
            "recurrent": [cfg["linear_num_value_heads"], cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]],
            "kv_heads": cfg["num_key_value_heads"],
            "head_dim": cfg["head_dim"],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] == "recurrent_gemma":
        width = cfg.get("lru_width") or cfg["hidden_size"]
        return {
            "conv": width,
            "state": cfg["conv1d_width"] - 1,
            "recurrent": [width],
            "kv_heads": cfg["num_key_value_heads"],
            "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] in SPARSE_TYPES:
        return {
            "kv_heads": cfg["num_attention_heads"],
            "head_dim": cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"],
            "index": cfg["index_head_dim"],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] == "mamba2":
        inner = cfg["num_heads"] * cfg["head_dim"]
        return {
            "conv": inner + 2 * cfg["n_groups"] * cfg["state_size"],
            "state": cfg["conv_kernel"] - 1,
            "ssm": [cfg["num_heads"], cfg["head_dim"], cfg["state_size"]],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] == "nemotron_h":
        inner = cfg["mamba_num_heads"] * cfg["mamba_head_dim"]
        return {
            "conv": inner + 2 * cfg["n_groups"] * cfg["ssm_state_size"],
            "state": cfg["conv_kernel"] - 1,
            "ssm": [cfg["mamba_num_heads"], cfg["mamba_head_dim"], cfg["ssm_state_size"]],
            "kv_heads": cfg["num_key_value_heads"],
            "head_dim": cfg["head_dim"],
            "vocab": cfg["vocab_size"],
        }
    if cfg["model_type"] == "zamba2":
        inner = cfg["n_mamba_heads"] * cfg["mamba_headdim"]
        return {
            "conv": inner + 2 * cfg["mamba_ngroups"] * cfg["mamba_d_state"],
            "state": cfg["mamba_d_conv"] - 1,
            "ssm": [cfg["n_mamba_heads"], cfg["mamba_headdim"], cfg["mamba_d_state"]],
            "kv_heads": cfg["num_key_value_heads"],
            "head_dim": cfg["attention_head_dim"],
            "vocab": cfg["vocab_size"],
        }
    heads = cfg["num_attention_heads"]
    d = {
        "conv": cfg["hidden_size"],
        "kv_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
        "state": cfg.get("conv_L_cache", 3) - 1,
        "vocab": cfg["vocab_size"],
    }
    if "mamba_n_heads" in cfg:
        inner = cfg["mamba_n_heads"] * cfg["mamba_d_head"]
        d["conv"] = inner + 2 * cfg["mamba_n_groups"] * cfg["mamba_d_state"]
        d["state"] = cfg["mamba_d_conv"] - 1
        d["ssm"] = [cfg["mamba_n_heads"], cfg["mamba_d_head"], cfg["mamba_d_state"]]
    return d


def state_shapes(name: str, batch, past, total) -> tuple[dict, dict]:
    """Per state input and output, its shape (`batch`, `past`, `total` the symbolic dims)."""
    d = dims(name)
    ins, outs = {}, {}
    for i, kind in enumerate(layer_types(name)):
        if kind in ("full_attention", "indexed_attention", "hybrid"):
            for part in ("key", "value"):
                ins[f"past_key_values.{i}.{part}"] = [batch, d["kv_heads"], past, d["head_dim"]]
                outs[f"present.{i}.{part}"] = [batch, d["kv_heads"], total, d["head_dim"]]
        if kind == "indexed_attention":
            ins[f"past_key_values.{i}.index_key"] = [batch, past, d["index"]]
            outs[f"present.{i}.index_key"] = [batch, total, d["index"]]
        if kind in ("conv", "mamba", "linear_attention", "recurrent", "hybrid"):
            ins[f"past.{i}.conv"] = outs[f"present.{i}.conv"] = [batch, d["conv"], d["state"]]
        if kind in ("mamba", "hybrid"):
            ins[f"past.{i}.ssm"] = outs[f"present.{i}.ssm"] = [batch, *d["ssm"]]
        if kind in ("linear_attention", "recurrent"):
            ins[f"past.{i}.recurrent"] = outs[f"present.{i}.recurrent"] = [batch, *d["recurrent"]]
    return ins, outs


def empty_state(name: str, dtype: str, batch: int) -> dict:
    """Zero conv and SSM states and empty KV caches: the state before the first call."""
    d, np_dtype = dims(name), NP_DTYPES[dtype]
    feed = {}
    for i, kind in enumerate(layer_types(name)):
        if kind in ("conv", "mamba", "linear_attention", "recurrent", "hybrid"):
            feed[f"past.{i}.conv"] = np.zeros((batch, d["conv"], d["state"]), np_dtype)
        if kind in ("mamba", "hybrid"):
            feed[f"past.{i}.ssm"] = np.zeros((batch, *d["ssm"]), np_dtype)
        if kind in ("linear_attention", "recurrent"):
            feed[f"past.{i}.recurrent"] = np.zeros((batch, *d["recurrent"]), np_dtype)
        if kind in ("full_attention", "indexed_attention", "hybrid"):
            kv = np.zeros((batch, d["kv_heads"], 0, d["head_dim"]), np_dtype)
            feed[f"past_key_values.{i}.key"] = kv
            feed[f"past_key_values.{i}.value"] = kv
        if kind == "indexed_attention":
            feed[f"past_key_values.{i}.index_key"] = np.zeros((batch, 0, d["index"]), np_dtype)
    return feed


def step(sess, ids, mask, pos, state: dict):
    """One call: (logits, the state to feed the next call)."""
    feed = {"input_ids": np.asarray(ids, np.int64), "attention_mask": np.asarray(mask, np.int64), **state}
    declared = {i.name: i for i in sess.get_inputs()}
    if "position_ids" in declared:
        pos = np.asarray(pos, np.int64)
        if len(declared["position_ids"].shape) == 3 and pos.ndim == 2:
            pos = np.broadcast_to(pos[None], (3, *pos.shape))  # text tokens: three equal rows
        feed["position_ids"] = pos
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(None, feed)))
    nxt = {}
    for k, v in outs.items():
        if k.startswith("present.") and k.endswith((".conv", ".ssm", ".recurrent")):
            nxt["past." + k[len("present."):]] = v
        elif k.startswith("present."):
            nxt["past_key_values." + k[len("present."):]] = v
    return outs["logits"], nxt


def test_hybrid_fixtures_exist():
    want = {"lfm2", "mamba2", "bamba", "mamba", "falcon_mamba", "nemotron_h", "jamba", "qwen3_next", "qwen3_5_text",
            "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe", "recurrent_gemma", "deepseek_v32", "glm_moe_dsa", "axk2",
            "falcon_h1", "zamba2"}
    assert want <= set(NAMES), NAMES


@pytest.mark.parametrize("name", NAMES)
def test_reference_is_consistent(name):
    ref = load_reference(name)
    steps = ref["decode_steps"]
    assert len(steps["input_ids"]) == len(steps["logits"]) == 8
    assert steps["input_ids"] == ref["greedy_tokens"][:8]
    assert [int(np.argmax(row)) for row in steps["logits"]] == ref["greedy_tokens"][1:9]
    assert int(np.argmax(ref["logits"][-1])) == ref["greedy_tokens"][0]
    model_type = config(name)["model_type"]
    mixer = {"lfm2": "conv", "lfm2_moe": "conv", "recurrent_gemma": "recurrent",
             **dict.fromkeys(GATED_DELTA_TYPES, "linear_attention")}.get(model_type, "mamba")
    kinds = {"mamba"} if is_ssm(name) else {mixer, "full_attention"}
    if model_type == "nemotron_h":
        kinds.add("none")
    if model_type in SPARSE_TYPES:
        # deepseek_v32, axk2: every layer its own indexer; the glm_moe_dsa fixture: layer 1 shares.
        kinds = {"indexed_attention"} | ({"full_attention"} if model_type == "glm_moe_dsa" else set())
        assert load_config(FIXTURES_DIR / name)["index_topk"] < len(ref["input_ids"])
    if model_type == "falcon_h1":
        kinds = {"hybrid"}
    if model_type == "zamba2":
        kinds = {"mamba", "hybrid"}
    assert set(layer_types(name)) == kinds, layer_types(name)


@per_build
def test_onnx_checker(built, name, ep, dtype):
    check_model_file(built("fixture", name, dtype, ep) / "model.onnx")


@per_build
def test_state_contract(built, name, ep, dtype):
    """Graph inputs and outputs per layer kind (names, dtypes, shapes), and genai_config.json
    naming them as onnxruntime-genai's own lfm2 builder does (none for Mamba2, Mamba and
    FalconMamba, which onnxruntime-genai 0.18 does not run)."""
    out = built("fixture", name, dtype, ep)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    d, elem = dims(name), ELEM[dtype]
    want_in, outs = state_shapes(name, "batch", DIM_PARAMS["PAST"], DIM_PARAMS["TOTAL"])
    want_out = {"logits": ["batch", "sequence_len", d["vocab"]], **outs}
    inputs = {v.name: v for v in model.graph.input if v.name not in {"input_ids", "attention_mask", "position_ids"}}
    outputs = {v.name: v for v in model.graph.output}
    assert list(inputs) == list(want_in), list(inputs)
    assert list(outputs) == list(want_out), list(outputs)
    for got, want in ((inputs, want_in), (outputs, want_out)):
        for k, shape in want.items():
            assert got[k].type.tensor_type.elem_type == elem, k
            assert _shape(got[k]) == shape, (k, _shape(got[k]), shape)

    model_type = config(name)["model_type"]
    positions = [v for v in model.graph.input if v.name == "position_ids"]
    if model_type in MROPE_TYPES:
        assert [_shape(v) for v in positions] == [[3, "batch", "sequence_len"]], positions
    if has_ssm(name) or model_type not in GENAI_TYPES:
        assert not (out / "genai_config.json").exists()
        return
    gc = json.loads((out / "genai_config.json").read_text())
    dec = gc["model"]["decoder"]
    assert gc["model"]["type"] == GENAI_TYPES[model_type]
    want_names = {
        "logits": "logits",
        "present_conv_names": "present.%d.conv",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    }
    if model_type in GATED_DELTA_TYPES:
        # onnxruntime-genai's qwen3_5 builder names both states and lists no layer types.
        assert "layer_types" not in dec and "conv_cache_size" not in dec, dec
        assert dec["inputs"]["past_recurrent_names"] == "past.%d.recurrent"
        want_names["present_recurrent_names"] = "present.%d.recurrent"
    else:
        assert dec["layer_types"] == layer_types(name)
        assert dec["conv_cache_size"] == d["state"]
    assert dec["inputs"]["past_conv_names"] == "past.%d.conv"
    assert dec["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert dec["outputs"] == want_names
    listed = {k for k in dec["inputs"] if not k.endswith("_names")}
    graph_inputs = {v.name for v in model.graph.input} - set(want_in)
    assert listed == graph_inputs, (listed, graph_inputs)
    # The conv states are never GroupQueryAttention outputs: past and present stay apart.
    assert gc["search"]["past_present_share_buffer"] is False


@per_build
def test_prefill_then_decode_steps(session_for, name, ep, dtype):
    """The prompt in one call, then 8 calls of one token each fed the returned conv states and
    KV caches: every call's logits within TOL of transformers' (with its cache)."""
    ref = load_reference(name)
    sess = session_for(name, dtype, ep)
    ids = ref["input_ids"]
    n = len(ids)
    logits, state = step(sess, [ids], np.ones((1, n)), np.arange(n)[None], empty_state(name, dtype, 1))
    assert logits.dtype == NP_DTYPES[dtype]
    assert_close(logits[0], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} prefill")
    d = dims(name)
    want_state = state_shapes(name, 1, n, n)[0]
    assert set(state) == set(want_state), (list(state), list(want_state))
    for k, v in state.items():
        assert v.shape == tuple(want_state[k]) and v.dtype == NP_DTYPES[dtype], (k, v.shape, v.dtype)
    steps = ref["decode_steps"]
    for j, (token, want) in enumerate(zip(steps["input_ids"], steps["logits"])):
        total = n + j + 1
        logits, state = step(sess, [[token]], np.ones((1, total)), [[total - 1]], state)
        assert logits.shape == (1, 1, d["vocab"]), logits.shape
        assert_close(logits[0, 0], want, TOL[dtype], f"{name} --ep {ep} {dtype} decode step {j}")


MROPE_CASES = [c for c in CASES if config(c[0])["model_type"] in MROPE_TYPES]


@pytest.mark.parametrize("name,ep,dtype", MROPE_CASES, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in MROPE_CASES])
def test_multimodal_rope_rows(session_for, name, ep, dtype):
    """Qwen3.5's prompt with temporal, height and width position rows that differ (as an
    image's tokens would): transformers' logits for the same rows (the reference asserts they
    differ from the text-only logits), so each frequency pair must turn by its own row."""
    ref = load_reference(name)
    case = ref["mrope"]
    ids = ref["input_ids"]
    n = len(ids)
    rows = np.asarray(case["position_ids"], np.int64)[:, None, :]
    assert rows.shape == (3, 1, n) and len({tuple(r) for r in rows[:, 0]}) == 3
    logits, _ = step(session_for(name, dtype, ep), [ids], np.ones((1, n)), rows, empty_state(name, dtype, 1))
    assert_close(logits[0], case["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} multimodal positions")


@per_build
def test_right_padded_batch(session_for, name, ep, dtype):
    """Batch 2: row 0 the prompt then 2 pad tokens, row 1 the prompt and 2 greedy tokens; the
    pads come after every real token of row 0, so its logits there are the reference's."""
    ref = load_reference(name)
    ids = ref["input_ids"]
    n = len(ids)
    pad = config(name).get("pad_token_id") or 0
    rows = np.array([ids + [pad] * 2, ids + ref["greedy_tokens"][:2]])
    mask = np.array([[1] * n + [0, 0], [1] * (n + 2)])
    pos = np.tile(np.arange(n + 2), (2, 1))
    logits, _ = step(session_for(name, dtype, ep), rows, mask, pos, empty_state(name, dtype, 2))
    assert_close(logits[0, :n], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} right-padded row")
    assert_close(logits[1, :n], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} unpadded row")


SPARSE_NAMES = [name for name in NAMES if config(name)["model_type"] in SPARSE_TYPES]
SPARSE_CASES = [(name, ep, dtype) for name in SPARSE_NAMES for ep, dtype in BUILDS]


@pytest.mark.parametrize("name,ep,dtype", SPARSE_CASES, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in SPARSE_CASES])
def test_sparse_attention_prompt_shorter_than_index_topk(session_for, name, ep, dtype):
    """A prompt of fewer tokens than index_topk: the indexer keeps every key (TopK of all of
    them), so the logits are the reference prompt's first rows (causal: they see the same keys)."""
    ref = load_reference(name)
    n = load_config(FIXTURES_DIR / name)["index_topk"] - 1
    ids = ref["input_ids"][:n]
    logits, state = step(session_for(name, dtype, ep), [ids], np.ones((1, n)), np.arange(n)[None],
                         empty_state(name, dtype, 1))
    assert_close(logits[0], ref["logits"][:n], TOL[dtype], f"{name} --ep {ep} {dtype} {n}-token prompt")
    assert all(v.shape[-2 if v.ndim == 4 else 1] == n for v in state.values()), {k: v.shape for k, v in state.items()}


@pytest.mark.parametrize("name,ep,dtype", SPARSE_CASES, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in SPARSE_CASES])
def test_sparse_attention_stays_attention(built, name, ep, dtype):
    """Every layer's attention reads its index mask (its own or, on a shared layer, the earlier
    layer's) as an additive mask, which GroupQueryAttention cannot take: every attention is
    opset-24 Attention (or, on an EP without it, standard ops: one Softmax per layer), none
    GroupQueryAttention."""
    model = onnx.load(str(built("fixture", name, dtype, ep) / "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert "GroupQueryAttention" not in ops and "MultiHeadAttention" not in ops, sorted(set(ops))
    kinds = layer_types(name)
    if "Attention" not in ops:
        assert ops.count("Softmax") == len(kinds), sorted(set(ops))
        return
    masks = [n.input[3] for n in model.graph.node if n.op_type == "Attention"]
    owners = [i if t == "indexed_attention" else max(j for j in range(i) if kinds[j] == "indexed_attention")
              for i, t in enumerate(kinds)]
    assert masks == [f"index_mask{o}" for o in owners], masks


# onnxruntime-genai 0.18 has no model type with an SSM state: those packages (Mamba2, Bamba,
# Granite-4 with Mamba2 layers) have no genai_config.json.
GENAI_NAMES = [
    name for name in NAMES if config(name)["model_type"] in GENAI_TYPES and not has_ssm(name)
]
GENAI_CASES = [(name, ep, dtype) for name in GENAI_NAMES for ep, dtype in GENAI_BUILDS]


@pytest.mark.parametrize("name,ep,dtype", GENAI_CASES, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in GENAI_CASES])
def test_genai_greedy(built, name, ep, dtype):
    """onnxruntime-genai runs the package (its lfm2 / qwen3_5_text model types, conv and
    recurrent states and KV caches as genai_config.json names them; Qwen3.5's 3-D position_ids
    computed by the runtime): 32 greedy tokens equal to transformers'."""
    ref = load_reference(name)
    want = ref["greedy_tokens"]
    model = genai_model(built("fixture", name, dtype, ep), ep)
    assert genai_greedy(model, ref["input_ids"], len(want)) == want


F16_CASES = [(name, ep, "f16") for name in GENAI_NAMES for ep in [None, *F16_EPS]]


@pytest.mark.parametrize("name,ep,dtype", F16_CASES, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in F16_CASES])
def test_genai_greedy_f16(built, name, ep, dtype, record_agreement):
    """f16 builds under onnxruntime-genai (providers cleared: CPU) against transformers' f32
    greedy tokens, as test_fixtures.test_genai_greedy_f16 checks the plain decoders."""
    import onnxruntime_genai as og

    ref = load_reference(name)
    ids, want = ref["input_ids"], ref["greedy_tokens"]
    config = og.Config(str(built("fixture", name, dtype, ep)))
    config.clear_providers()
    got = genai_greedy(og.Model(config), ids, len(want))
    prefix = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
    equal = sum(a == b for a, b in zip(got, want))
    record_agreement(f"{name} {ep or 'noflag'} f16", prefix, equal, len(want))
    assert equal >= F16_GREEDY_MIN_EQUAL, f"{name} --ep {ep} f16: {equal}/32 equal: {got} != {want}"


# (ep, whether the int4 weights run as MatMulNBits): accuracy_level 0 builds.
INT4 = [("cpu", True), ("onnx-standard", False)]


@pytest.mark.parametrize("ep,nbits", INT4, ids=[ep for ep, _ in INT4])
@pytest.mark.parametrize("name", NAMES)
def test_int4_quantizes_every_projection(built, name, ep, nbits):
    """`--quant int4` quantizes every 2-D MatMul weight, the short convolutions' and Mamba2
    mixers' in_proj and out_proj included (Mamba's x_proj and dt_proj too, Qwen3-Next's
    in_proj_qkvz, in_proj_ba and out_proj, Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a,
    RecurrentGemma's linear_x, linear_y and linear_out) (no 2-D float MatMul weight is left; the
    RG-LRU's block-diagonal gates are 3-D and stay float), and the prefill logits match the
    fake-quantized reference (scripts/make_quant_references.py) within 1e-4."""
    import onnxruntime as ort

    out = built("fixture", name, "f32", ep, ("--quant", "int4", "--accuracy-level", "0"))
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    inits = {t.name for t in model.graph.initializer if len(t.dims) == 2}
    float_weights = [n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    assert not float_weights, f"MatMul weights left in float: {float_weights}"
    ops = [n.op_type for n in model.graph.node]
    quantized = [n.input[1] for n in model.graph.node if n.op_type == ("MatMulNBits" if nbits else "DequantizeLinear")]
    model_type = config(name)["model_type"]
    mixer = {"lfm2": "conv", "lfm2_moe": "conv", "nemotron_h": "mixer", "recurrent_gemma": "temporal_block",
             **dict.fromkeys(GATED_DELTA_TYPES, "linear_attn")}.get(model_type, "mixer" if is_ssm(name) else "mamba")
    projs = ["in_proj", "out_proj"]
    if model_type in ("mamba", "falcon_mamba", "jamba"):
        projs += ["x_proj", "dt_proj"]
    if model_type == "qwen3_next":
        projs = ["in_proj_qkvz", "in_proj_ba", "out_proj"]
    if model_type in ("qwen3_5_text", "qwen3_5_moe_text"):
        projs = ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]
    if model_type == "recurrent_gemma":
        projs = ["linear_x", "linear_y", "linear_out"]
    if model_type in SPARSE_TYPES:
        mixer, projs = "self_attn.indexer", ["wq_b", "wk", "weights_proj"]
    for proj in (f"{mixer}.{p}" for p in projs):
        assert any(proj in w for w in quantized), (proj, quantized)
    assert ("MatMulNBits" in ops) == nbits, sorted(set(ops))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "0")
    sess = ort.InferenceSession(str(out / "model.onnx"), so, providers=["CPUExecutionProvider"])
    ids = load_reference(name)["input_ids"]
    n = len(ids)
    logits, _ = step(sess, [ids], np.ones((1, n)), np.arange(n)[None], empty_state(name, "f32", 1))
    want = json.loads((FIXTURES_DIR / name / "quant_reference.json").read_text())["settings"]["int4-b32-sym"]["logits"]
    assert_close(logits[0], want, 1e-4, f"{name} int4 --ep {ep}")
