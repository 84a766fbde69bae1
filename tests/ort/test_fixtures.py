"""Build every tests/fixtures/<name> checkpoint with `mobius build` and check the
result with onnx, onnxruntime and onnxruntime-genai against reference.json
(written by scripts/make_fixtures.py from the transformers model).

Every check runs for every build in BUILDS: the CLI default (no --ep flag) in
f32 and f16, and each built-in execution provider via `--ep EP` in the dtype it
is built for in practice.  Whatever an EP's graph looks like, it must keep the
I/O contract (read from the package's genai_config.json where that is the
source of truth) and run on onnxruntime CPU with reference numerics.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from ort_helpers import (
    DECODER_TASK,
    ENCODER_TASK,
    FIXTURES_DIR,
    HYBRID_TASK,
    MIN_FIXTURES,
    NP_DTYPES,
    PREQUANT_TASK,
    assert_close,
    cache_shapes,
    fixture_names,
    fixture_names_for,
    fixture_task,
    list_eps,
    load_config,
    load_reference,
    model_dims,
    run_mobius,
)
from contract import check_model_file, contract_errors

# Decoder fixtures only: encoder fixtures (reference.json "task": "feature-extraction")
# have no logits, cache or generation and are tested by test_encoders.py.
NAMES = fixture_names_for(DECODER_TASK)
DTYPES = ["f32", "f16"]
# max |logit - reference| allowed per build dtype
TOL = {"f32": 1e-4, "f16": 2e-2}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# (ep, dtype) of every build under test; ep None = no --ep flag (CLI default).
# GPU-class EPs are built in f16, the others in f32.
F32_EPS = ["default", "cpu", "onnx-standard", "mlx", "openvino", "qnn"]
F16_EPS = ["cuda", "dml", "webgpu", "trt-rtx"]
BUILDS = [(None, d) for d in DTYPES] + [(ep, "f32") for ep in F32_EPS] + [(ep, "f16") for ep in F16_EPS]


def _ids(builds):
    return [f"{ep or 'noflag'}-{dtype}" for ep, dtype in builds]


# Fixtures checked on the reduced build matrix only: the default and cpu builds in f32 and
# the cuda build in f16 (issue 32: every family on default/cpu/cuda-f16, the full EP matrix on
# a representative set). The causal LMs of encoder architectures (family bert_lm) are 14
# fixtures of one builder, the BART-style decoders (bart_lm) nine of another; bert-causal,
# roberta-causal and bart, their representatives, run on every build. onnxruntime-genai loads the reduced fixtures' default and cpu builds as written and
# their cuda build with providers cleared.
REDUCED_MATRIX = {"camembert", "xlm-roberta", "data2vec-text", "roberta-prelayernorm", "xlm-roberta-xl", "ernie",
                  "megatron-bert", "electra", "rembert", "bert-generation", "roformer", "roc_bert", "mbart", "plbart", "mvp", "blenderbot",
                  "blenderbot-small", "marian", "pegasus", "trocr"}
REDUCED_BUILDS = [("default", "f32"), ("cpu", "f32"), ("cuda", "f16")]


def builds_of(name: str) -> list:
    """The (ep, dtype) builds fixture `name` is checked on."""
    return REDUCED_BUILDS if name in REDUCED_MATRIX else BUILDS


def _named_ids(cases):
    return [f"{name}-{ep or 'noflag'}-{dtype}" for name, ep, dtype in cases]


def per_fixture_build(builds_for):
    """Parametrizes name, ep, dtype over every fixture and its builds (`builds_for(name)`)."""
    cases = [(name, ep, dtype) for name in NAMES for ep, dtype in builds_for(name)]
    return pytest.mark.parametrize("name,ep,dtype", cases, ids=_named_ids(cases))


per_build = per_fixture_build(builds_of)

# onnxruntime-genai (the CPU-only wheel) loads a package as written only when
# its provider_options list is empty: the no-flag build and default/cpu/
# onnx-standard.  It refuses every other EP's entry at load time on a CPU-only
# machine ("Cuda interface not available" for cuda and trt-rtx, "not been built
# with DML support", "WebGPU/OpenVINO execution provider is not supported in
# this build"; genai 0.18 does not know the provider name 'mlx' at all; the QNN
# backend library is absent).  So the genai checks load those as is, and the other
# f32 builds (mlx, openvino, qnn) only
# after og.Config.clear_providers(), which still exercises their graph and the
# rest of their genai_config.json.  Their provider entries are checked by
# test_genai_provider_options.  f16 builds run with providers cleared too
# (test_genai_greedy_f16): their agreement with the f32 reference is reported and
# must reach F16_GREEDY_MIN_EQUAL of 32 tokens.
GENAI_AS_IS = [None, "default", "cpu", "onnx-standard"]
GENAI_BUILDS = [(ep, "f32") for ep in GENAI_AS_IS] + [(ep, "f32") for ep in F32_EPS if ep not in GENAI_AS_IS]
per_genai_build = per_fixture_build(
    lambda name: [b for b in REDUCED_BUILDS if b[1] == "f32"] if name in REDUCED_MATRIX else GENAI_BUILDS
)

# genai_config.json model.decoder.session_options.provider_options per EP, as
# the spec (section 4, last paragraph, and 5.4) describes it: provider names
# mapped (trt-rtx -> NvTensorRtRtx, openvino -> OpenVINO, others unchanged),
# the EP's provider_options, plus graph capture as enableGraphCapture +
# validationMode (webgpu) or enable_cuda_graph (cuda, trt-rtx); [] for
# default/cpu/onnx-standard.
PROVIDER_OPTIONS = {
    None: [],
    "default": [],
    "cpu": [],
    "onnx-standard": [],
    "cuda": [{"cuda": {"enable_skip_layer_norm_strict_mode": "1", "enable_cuda_graph": "0"}}],
    "dml": [{"dml": {}}],
    "webgpu": [{"webgpu": {"enableGraphCapture": "1", "validationMode": "disabled"}}],
    "trt-rtx": [{"NvTensorRtRtx": {"enable_cuda_graph": "1"}}],
    "mlx": [{"mlx": {}}],
    "openvino": [{"OpenVINO": {"device_type": "NPU"}}],
    "qnn": [
        {
            "QNN": {
                "backend_path": "QnnHtp.dll",
                "htp_performance_mode": "burst",
                "htp_graph_finalization_optimization_mode": "3",
                "enable_htp_shared_memory_allocator": "1",
            }
        }
    ],
}


def dims_of(name: str) -> dict:
    return model_dims(load_config(FIXTURES_DIR / name))


def token_config(name: str) -> dict:
    """config.json's fields as transformers reads token ids: the outer config's over an image-text
    model's text_config."""
    cfg = load_config(FIXTURES_DIR / name)
    return {**cfg.get("text_config", {}), **cfg}


def pad_id(name: str) -> int:
    cfg = token_config(name)
    p = cfg.get("pad_token_id")
    return 0 if p is None else int(p)


def genai_config(out) -> dict:
    return json.loads((out / "genai_config.json").read_text())


def all_nodes(model: onnx.ModelProto) -> list:
    return list(model.graph.node) + [n for f in model.functions for n in f.node]


def empty_past(dims: dict, dtype: str, batch: int) -> dict:
    feed = {}
    for i, (kv, d) in enumerate(cache_shapes(dims)):
        z = np.zeros((batch, kv, 0, d), dtype=NP_DTYPES[dtype])
        feed[f"past_key_values.{i}.key"] = z
        feed[f"past_key_values.{i}.value"] = z
    return feed


def run(sess, dims: dict, ids, mask, pos, past: dict):
    """One forward pass.  position_ids is fed only when the graph declares it
    (EPs whose attention derives positions from the mask drop that input; the
    contract test checks the package says so)."""
    feed = {
        "input_ids": np.asarray(ids, dtype=np.int64),
        "attention_mask": np.asarray(mask, dtype=np.int64),
        **past,
    }
    if any(i.name == "position_ids" for i in sess.get_inputs()):
        feed["position_ids"] = np.asarray(pos, dtype=np.int64)
    names = [o.name for o in sess.get_outputs()]
    outs = dict(zip(names, sess.run(None, feed)))
    presents = {}
    for i in range(dims["layers"]):
        presents[f"past_key_values.{i}.key"] = outs[f"present.{i}.key"]
        presents[f"past_key_values.{i}.value"] = outs[f"present.{i}.value"]
    return outs["logits"], presents


def test_enough_fixtures():
    assert len(NAMES) >= MIN_FIXTURES, (
        f"expected at least {MIN_FIXTURES} fixtures with reference.json under {FIXTURES_DIR}, found {NAMES}"
    )


def test_every_fixture_is_tested_by_its_task_module():
    """Each fixture is a decoder (tested here), an encoder (test_encoders.py), a pre-quantized
    checkpoint (test_prequantized.py) or a hybrid decoder (test_hybrid.py); none is left out."""
    tasks = {name: fixture_task(name) for name in fixture_names()}
    known = (DECODER_TASK, ENCODER_TASK, PREQUANT_TASK, HYBRID_TASK)
    unknown = {n: t for n, t in tasks.items() if t not in known}
    assert not unknown, f"fixtures with a task no test module covers: {unknown}"


def test_reference_files_are_consistent():
    for name in NAMES:
        ref = load_reference(name)
        dims = dims_of(name)
        assert ref["dtype"] in ("f32", "bf16"), name
        assert len(ref["logits"]) == len(ref["input_ids"]), name
        assert all(len(row) == dims["vocab"] for row in ref["logits"]), name
        assert len(ref["greedy_tokens"]) >= 24, name
        assert int(np.argmax(ref["logits"][-1])) == ref["greedy_tokens"][0], name


def test_build_matrix_covers_every_builtin_ep(ep_caps):
    """Every registered built-in EP is in BUILDS."""
    assert set(F32_EPS + F16_EPS) == set(ep_caps), sorted(ep_caps)
    assert set(PROVIDER_OPTIONS) - {None} == set(F32_EPS + F16_EPS)


# ---------------------------------------------------------------- structure
@per_build
def test_onnx_checker(built, name, ep, dtype):
    check_model_file(built("fixture", name, dtype, ep) / "model.onnx")


@per_build
def test_graph_contract(built, name, ep, dtype):
    out = built("fixture", name, dtype, ep)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    errs = contract_errors(model, dims_of(name), dtype, genai_config(out))
    assert not errs, "\n".join(errs)


@pytest.mark.parametrize("name", NAMES)
def test_no_contrib_ops_for_standard_only_eps(built, ep_caps, name):
    """An EP that cannot run com.microsoft ops (supports_contrib_ops false in
    `mobius list eps --json`: onnx-standard, openvino) must get none: no such
    node, local-function node or opset import."""
    checked = []
    for ep, dtype in builds_of(name):
        if ep is None or ep_caps[ep]["supports_contrib_ops"]:
            continue
        model = onnx.load(str(built("fixture", name, dtype, ep) / "model.onnx"), load_external_data=False)
        bad = sorted({f"{n.domain}::{n.op_type}" for n in all_nodes(model) if n.domain == "com.microsoft"})
        assert not bad, f"--ep {ep} graph contains contrib ops {bad}"
        domains = {o.domain for o in model.opset_import}
        assert "com.microsoft" not in domains, f"--ep {ep} graph imports com.microsoft: {domains}"
        checked.append(ep)
    if name not in REDUCED_MATRIX:
        assert "onnx-standard" in checked, f"onnx-standard claims contrib-op support? checked only {checked}"


@per_build
def test_package_files(built, name, ep, dtype):
    out = built("fixture", name, dtype, ep)
    for f in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (out / f).is_file(), f"{f} missing from {out}: {sorted(p.name for p in out.iterdir())}"
    for f in TOKENIZER_FILES:
        if (FIXTURES_DIR / name / f).is_file():
            assert (out / f).is_file(), f"tokenizer file {f} not copied into {out}"
            assert (out / f).read_bytes() == (FIXTURES_DIR / name / f).read_bytes(), f"{f} differs from the fixture's"
    gc = genai_config(out)
    dims = dims_of(name)
    cfg = token_config(name)
    dec = gc["model"]["decoder"]
    assert dec["filename"] == "model.onnx"
    assert dec["num_hidden_layers"] == dims["layers"]
    assert dec["num_key_value_heads"] == dims["kv_heads"]
    assert dec["num_attention_heads"] == dims["heads"]
    assert dec["head_size"] == dims["head_dim"]
    assert dec["hidden_size"] == dims["hidden"]
    assert gc["model"]["vocab_size"] == dims["vocab"]
    eos = gc["model"]["eos_token_id"]
    assert cfg["eos_token_id"] in (eos if isinstance(eos, list) else [eos])


@per_build
def test_genai_provider_options(built, name, ep, dtype):
    so = genai_config(built("fixture", name, dtype, ep))["model"]["decoder"]["session_options"]
    assert so.get("log_id") == "onnxruntime-genai", so
    assert so.get("provider_options") == PROVIDER_OPTIONS[ep], (
        f"--ep {ep}: provider_options {so.get('provider_options')!r}, expected {PROVIDER_OPTIONS[ep]!r}"
    )


@per_build
def test_genai_search_matches_graph(built, ep_caps, name, ep, dtype):
    """Spec 5.4: past_present_share_buffer iff every present output is a
    com.microsoft::GroupQueryAttention's (any other attention concatenates its cache: a
    standard Attention in layers GQA cannot take, such as sliding-window ones, or attention
    spelled out in standard ops, such as sink attention without RoPE);
    max_length = min(context_length, 4096) when it shares on an EP with
    cap_kv_buffer_max_length, else context_length."""
    out = built("fixture", name, dtype, ep)
    gc = genai_config(out)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    gqa_outputs = {
        o for n in all_nodes(model) if n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft" for o in n.output
    }
    presents = [o.name for o in model.graph.output if o.name.startswith("present.")]
    shares = bool(presents) and all(p in gqa_outputs for p in presents)
    search = gc["search"]
    assert search["past_present_share_buffer"] is shares, (search["past_present_share_buffer"], shares)
    ctx = gc["model"]["context_length"]
    cap = shares and ep is not None and ep_caps[ep]["cap_kv_buffer_max_length"]
    assert search["max_length"] == (min(ctx, 4096) if cap else ctx), (search["max_length"], ctx, cap)


# ---------------------------------------------------------------- onnxruntime
BF16_CHECKPOINTS = [n for n in NAMES if load_config(FIXTURES_DIR / n).get("dtype", load_config(FIXTURES_DIR / n).get("torch_dtype")) == "bfloat16"]
# Builds without --dtype that onnxruntime's CPU provider runs: the EP's default dtype (f32),
# whatever the checkpoint stores; `extra` flags on top.
CPU_DEFAULT_BUILDS = [(None, ()), ("default", ()), ("cpu", ()), ("onnx-standard", ()), ("cpu", ("--quant", "int4"))]


def test_there_is_a_bf16_checkpoint_fixture():
    assert BF16_CHECKPOINTS, "no decoder fixture is stored in bf16"


@pytest.mark.parametrize("ep,extra", CPU_DEFAULT_BUILDS, ids=[f"{ep or 'noflag'}{''.join(extra)}" for ep, extra in CPU_DEFAULT_BUILDS])
@pytest.mark.parametrize("name", BF16_CHECKPOINTS)
def test_bf16_checkpoint_without_dtype_builds_what_the_cpu_provider_runs(built, name, ep, extra, tmp_path):
    """A bf16 checkpoint built without --dtype for an EP that runs on onnxruntime's CPU provider
    is the f32 build, file for file (the weights converted while streaming), and it loads in
    onnxruntime and gives transformers' logits (a bf16 build would not load: no bf16 MatMul)."""
    import onnxruntime as ort

    out = tmp_path / "out"
    run_mobius(["build", "--config", str(FIXTURES_DIR / name), str(out), *(["--ep", ep] if ep else []), *extra])
    f32 = built("fixture", name, "f32", ep, extra)
    for f in ("model.onnx", "model.onnx.data", "genai_config.json"):
        assert (out / f).read_bytes() == (f32 / f).read_bytes(), f"{f} differs from the --dtype f32 build"
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(out / "model.onnx"), so, providers=["CPUExecutionProvider"])
    if extra:  # --quant int4: the weights run as MatMulNBits (test_quant.py checks their numbers)
        ops = {n.op_type for n in onnx.load(str(out / "model.onnx"), load_external_data=False).graph.node}
        assert "MatMulNBits" in ops and "DequantizeLinear" not in ops, sorted(ops)
    else:
        ref = load_reference(name)
        dims = dims_of(name)
        ids = np.array([ref["input_ids"]])
        n = ids.shape[1]
        logits, _ = run(sess, dims, ids, np.ones((1, n)), np.arange(n)[None], empty_past(dims, "f32", 1))
        assert logits.dtype == np.float32
        assert_close(logits[0], ref["logits"], TOL["f32"], f"{name} --ep {ep} without --dtype, prefill")


@per_build
def test_prefill_logits(session_for, name, ep, dtype):
    ref = load_reference(name)
    dims = dims_of(name)
    ids = np.array([ref["input_ids"]])
    n = ids.shape[1]
    logits, presents = run(
        session_for(name, dtype, ep), dims, ids, np.ones((1, n)), np.arange(n)[None], empty_past(dims, dtype, 1)
    )
    assert logits.dtype == NP_DTYPES[dtype]
    assert_close(logits[0], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} prefill")
    for k, v in presents.items():
        kv, d = cache_shapes(dims)[int(k.split(".")[1])]
        assert v.shape == (1, kv, n, d), (k, v.shape)
        assert v.dtype == NP_DTYPES[dtype], (k, v.dtype)


@per_build
def test_decode_step(session_for, name, ep, dtype):
    """Prefill n-1 tokens, then decode the last one from the returned cache."""
    ref = load_reference(name)
    dims = dims_of(name)
    sess = session_for(name, dtype, ep)
    ids = ref["input_ids"]
    n = len(ids)
    _, past = run(sess, dims, [ids[:-1]], np.ones((1, n - 1)), np.arange(n - 1)[None], empty_past(dims, dtype, 1))
    logits, presents = run(sess, dims, [[ids[-1]]], np.ones((1, n)), [[n - 1]], past)
    assert logits.shape == (1, 1, dims["vocab"]), logits.shape
    assert_close(logits[0, 0], ref["logits"][-1], TOL[dtype], f"{name} --ep {ep} {dtype} decode step")
    for k, v in presents.items():
        kv, d = cache_shapes(dims)[int(k.split(".")[1])]
        assert v.shape == (1, kv, n, d), (k, v.shape)


def left_padded_batch(ref: dict, pad: int, n_pad: int = 2):
    """Row 0: the prompt left-padded by n_pad; row 1: prompt + first n_pad greedy
    tokens (no padding).  Position ids as transformers computes them."""
    ids = ref["input_ids"]
    row0 = [pad] * n_pad + ids
    row1 = ids + ref["greedy_tokens"][:n_pad]
    mask = np.array([[0] * n_pad + [1] * len(ids), [1] * len(row1)], dtype=np.int64)
    pos = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    return np.array([row0, row1]), mask, pos


def uses_gqa(built, name: str, ep, dtype: str) -> bool:
    """Whether the build fused attention (of any layer) into com.microsoft GroupQueryAttention."""
    model = onnx.load(str(built("fixture", name, dtype, ep) / "model.onnx"), load_external_data=False)
    return any(n.op_type == "GroupQueryAttention" and n.domain == "com.microsoft" for n in all_nodes(model))


# model_types whose attention has sinks.
SINK_ATTENTION = {"gpt_oss", "granite_swa", "granitemoe_swa", "flint"}
# model_types whose attention is spelled out in standard ops that no rule fuses.
UNFUSED_ATTENTION = {"diffllama"}
# model_types whose attention adds an ALiBi bias (Falcon: where its config sets `alibi`):
# GroupQueryAttention takes none, so their attention stays Attention (or standard ops) on every
# EP.
ALIBI_ATTENTION = {"bloom", "mpt"}
# model_types whose attention adds a bias computed from the keys' values (Doge's dynamic mask):
# GroupQueryAttention takes none, so their attention stays Attention on every EP.
VALUE_BIASED_ATTENTION = {"doge"}
# model_types whose fixture's full-attention layer stays Attention: a chunked layer (llama4_text's
# first) keeps the padding mask GroupQueryAttention would replace, so on the one NoPE layer the
# fusion would add seqlens_k's ops without removing any, and the cost model keeps Attention.
CHUNKED_ATTENTION = {"llama4_text"}
# model_types whose key/value heads are reshaped after the rotation: MiMo-V2-Flash's v heads are
# widened to the q/k head size and its full layers' key/value heads doubled to the cache's count
# (Slice, Concat, Reshape between RotaryEmbedding and the cache), a form no fusion rule takes in,
# so its full layers stay Attention and its sink layers standard ops on every EP.
RESHAPED_KV_ATTENTION = {"mimo_v2_flash"}


def alibi_attention(name: str) -> bool:
    """Whether fixture `name`'s attention adds an ALiBi bias."""
    cfg = load_config(FIXTURES_DIR / name)
    return cfg["model_type"] in ALIBI_ATTENTION or (cfg["model_type"] == "falcon" and cfg.get("alibi", False))


def gqa_expected(name: str, ep, dtype: str) -> bool:
    """Whether the EP's capabilities put GroupQueryAttention on this build (no --ep flag: the
    `default` EP). Attention with sinks (gpt_oss, the Granite SWAs) becomes GroupQueryAttention with head_sink
    only through the fused-rotary rule (sink-attention-to-gqa); elsewhere it stays in standard
    ops, as differential attention (diffllama) does everywhere. ALiBi attention (bloom, mpt,
    falcon with alibi) never becomes GroupQueryAttention, nor does the llama4_text fixture's
    (CHUNKED_ATTENTION)."""
    caps = list_eps()[ep or "default"]
    if alibi_attention(name):
        return False
    model_type = load_config(FIXTURES_DIR / name)["model_type"]
    if model_type in VALUE_BIASED_ATTENTION or model_type in RESHAPED_KV_ATTENTION:
        return False
    sinks = model_type in SINK_ATTENTION
    return (
        model_type not in UNFUSED_ATTENTION
        and model_type not in CHUNKED_ATTENTION
        and dtype in caps["gqa_dtypes"]
        and (not sinks or caps["supports_fused_rope"])
    )


# Left padding is outside GroupQueryAttention's contract (it reads each row's length from
# seqlens_k and expects the padding on the right, onnxruntime-genai's layout): the left-padded
# tests run on the builds without it and leave the others out at collection (not skipped; the
# right-padded tests cover them). test_left_padding_is_left_out_exactly_on_gqa_builds checks
# the builds agree and pins how many are left out.
LEFT_PADDED = [(name, ep, dtype) for name in NAMES for ep, dtype in builds_of(name) if not gqa_expected(name, ep, dtype)]
LEFT_OUT = [(name, ep, dtype) for name in NAMES for ep, dtype in builds_of(name) if gqa_expected(name, ep, dtype)]
# 245 builds x 2 left-padded tests: the 490 skips this replaced; 251 since the llama-dynamic
# fixture (6 more GroupQueryAttention builds); 287 with arcee, seed_oss, internlm3, exaone,
# hunyuan_v1_dense and cwm (6 each); 351 with vaultgemma, ministral3, granitemoeshared,
# flex_olmo, jais2, nanochat, bitnet, iquestcoder, hyperclovax (6 each) and the sink-attention
# granite_swa and granitemoe_swa (5 each: dml has no fused rotary); 357 with mellum (6); 399
# with gpt_bigcode, openai-gpt, gptj, codegen, opt, opt-350m and gpt_neo (6 each). A change of
# the EPs' gqa_dtypes or of the fixtures changes it: update it with the reason. 435 with
# the rotary falcon and falcon-mq fixtures, persimmon, ernie4_5_moe, minimax_m2 and
# hunyuan_v1_moe (6 each; falcon-alibi, as bloom and mpt, adds none). 483 with the bert_lm fixtures:
# bert-causal and roberta-causal on every build (6 GroupQueryAttention builds each), the 10 on
# the reduced matrix on cpu f32 and cuda f16 (2 each), and the bart_lm fixtures (bart on every
# build: 6; the other 5 on the reduced matrix: 2 each). 525 with deepseek_v2,
# deepseek_v3, minicpm3, glm4_moe, glm4_moe_lite, dots1 and sarvam_mla (6 each); 531 with dbrx (6).
# diffllama's attention, spelled out in standard ops, never fuses (531 still); 537 with
# solar_open (6); 567 with xglm, ctrl, biogpt, gpt-sw3 and gpt_neox_japanese (6 each);
# 575 with marian and pegasus, roformer and trocr (on the reduced matrix: 2 each); 581 with
# exaone_moe (6); 587 with cohere2_moe (6); 593 with youtu (6); 599 with apertus1p5_text (6).
# doge's dynamic mask never fuses (599 still); 605 with jetmoe (6); 611 with
# modernbert-decoder (6); 613 with roc_bert (on the reduced matrix: 2); 625 with sarvam_moe and
# param2moe (6 each); 631 with hy_v3 (6); 637 with minicpm5_moe (6); 643 with axk1 (6);
# llama4_text adds none (CHUNKED_ATTENTION); 649 with afmoe (6); 655 with aria_text (6); 661
# with kolibri1 (6); 666 with the sink-attention flint (5: dml has no fused rotary); 672 with
# cohere_compass_text (6); 678 with granitemoehybrid-attn (6: Granite-4's attention-only
# configuration, the one onnxruntime-genai's granitemoehybrid type runs); 684 with laguna (6);
# 690 with beam (6); mimo_v2_flash adds none (RESHAPED_KV_ATTENTION); 696 with ergo (6); 702
# with longcat_flash (6); 708 with gemma4_text (6); 714 with gemma4_unified_text (6);
# 720 with emu3 (6); 726 with mllama (6); 732 with gemma3n_text (6).
LEFT_OUT_COUNT = 732
per_left_padded_build = pytest.mark.parametrize(
    "name,ep,dtype", LEFT_PADDED, ids=[f"{n}-{e or 'noflag'}-{d}" for n, e, d in LEFT_PADDED]
)


def check_no_gqa(built, name: str, ep, dtype: str) -> None:
    """The build has no GroupQueryAttention, as its EP's capabilities say: an unintended fusion
    fails here instead of passing unnoticed."""
    assert not uses_gqa(built, name, ep, dtype), (
        f"{name} --ep {ep} {dtype}: GroupQueryAttention present, but the EP's gqa_dtypes "
        f"{list_eps()[ep or 'default']['gqa_dtypes']} say it should not be"
    )


def test_left_padding_is_left_out_exactly_on_gqa_builds(built):
    """Every build the left-padded tests leave out has GroupQueryAttention (the ones they run on
    have none: check_no_gqa), and their number is pinned."""
    wrong = [b for b in LEFT_OUT if not uses_gqa(built, *b)]
    assert not wrong, f"left out of the left-padded tests, but without GroupQueryAttention: {wrong}"
    assert len(LEFT_OUT) == LEFT_OUT_COUNT, f"{len(LEFT_OUT)} builds left out, expected {LEFT_OUT_COUNT}"


@per_left_padded_build
def test_batch_left_padded(built, session_for, name, ep, dtype):
    check_no_gqa(built, name, ep, dtype)
    ref = load_reference(name)
    dims = dims_of(name)
    n = len(ref["input_ids"])
    ids, mask, pos = left_padded_batch(ref, pad_id(name))
    logits, _ = run(session_for(name, dtype, ep), dims, ids, mask, pos, empty_past(dims, dtype, 2))
    assert logits.shape == (2, n + 2, dims["vocab"]), logits.shape
    assert_close(logits[0, 2:], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} left-padded row")
    assert_close(logits[1, :n], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} unpadded row of padded batch")
    if dtype == "f32":
        assert int(np.argmax(logits[1, n])) == ref["greedy_tokens"][1]


@per_left_padded_build
def test_batch_left_padded_decode(built, session_for, name, ep, dtype):
    """Padded prefill of the prompt minus its last token, then one decode step."""
    check_no_gqa(built, name, ep, dtype)
    ref = load_reference(name)
    dims = dims_of(name)
    sess = session_for(name, dtype, ep)
    ids, mask, pos = left_padded_batch(ref, pad_id(name))
    # prefill everything but the last column, decode the last column
    _, past = run(sess, dims, ids[:, :-1], mask[:, :-1], pos[:, :-1], empty_past(dims, dtype, 2))
    logits, _ = run(sess, dims, ids[:, -1:], mask, pos[:, -1:], past)
    assert logits.shape == (2, 1, dims["vocab"]), logits.shape
    assert_close(logits[0, 0], ref["logits"][-1], TOL[dtype], f"{name} --ep {ep} {dtype} padded decode row")
    if dtype == "f32":
        assert int(np.argmax(logits[1, 0])) == ref["greedy_tokens"][2]


@per_build
def test_batch_right_padded(session_for, name, ep, dtype):
    """Row 0: the prompt followed by 2 pad tokens; row 1: prompt + 2 greedy tokens. Every
    build (Attention or GroupQueryAttention) must give row 0's real positions the reference
    logits."""
    ref = load_reference(name)
    dims = dims_of(name)
    ids = ref["input_ids"]
    n = len(ids)
    rows = np.array([ids + [pad_id(name)] * 2, ids + ref["greedy_tokens"][:2]])
    mask = np.array([[1] * n + [0, 0], [1] * (n + 2)], dtype=np.int64)
    pos = np.tile(np.arange(n + 2), (2, 1))
    logits, _ = run(session_for(name, dtype, ep), dims, rows, mask, pos, empty_past(dims, dtype, 2))
    assert_close(logits[0, :n], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} right-padded row")
    assert_close(logits[1, :n], ref["logits"], TOL[dtype], f"{name} --ep {ep} {dtype} unpadded row")


@per_build
def test_batch_right_padded_decode(session_for, name, ep, dtype):
    """Right-padded prefill (row 0: prompt minus its last token + 2 pads; row 1: prompt + 1
    greedy token), then one decode step; row 0's new token sees its n-1 real keys."""
    ref = load_reference(name)
    dims = dims_of(name)
    sess = session_for(name, dtype, ep)
    ids = ref["input_ids"]
    n = len(ids)
    pad = pad_id(name)
    prefill = np.array([ids[:-1] + [pad, pad], ids + ref["greedy_tokens"][:1]])
    mask = np.array([[1] * (n - 1) + [0, 0], [1] * (n + 1)], dtype=np.int64)
    pos = np.tile(np.arange(n + 1), (2, 1))
    _, past = run(sess, dims, prefill, mask, pos, empty_past(dims, dtype, 2))
    step = np.array([[ids[-1]], [ref["greedy_tokens"][1]]])
    step_mask = np.array([[1] * (n - 1) + [0, 0] + [1], [1] * (n + 2)], dtype=np.int64)
    logits, _ = run(sess, dims, step, step_mask, np.array([[n - 1], [n + 1]]), past)
    assert_close(logits[0, 0], ref["logits"][-1], TOL[dtype], f"{name} --ep {ep} {dtype} right-padded decode row")
    if dtype == "f32":
        assert int(np.argmax(logits[1, 0])) == ref["greedy_tokens"][2]


# ---------------------------------------------------------------- onnxruntime-genai
def genai_greedy(model, ids: list[int], count: int) -> list[int]:
    """onnxruntime-genai's greedy continuation of `ids` by exactly `count` tokens (min_length
    keeps it from stopping early, so it never emits a stop token)."""
    import onnxruntime_genai as og

    total = len(ids) + count
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=total, min_length=total)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(ids, dtype=np.int32))
    steps = 0
    while not gen.is_done():
        gen.generate_next_token()
        steps += 1
        assert steps <= count, "generator did not stop at max_length"
    seq = gen.get_sequence(0).tolist()
    assert seq[: len(ids)] == ids
    return seq[len(ids):]


def genai_model(out, ep):
    import onnxruntime_genai as og

    if ep in GENAI_AS_IS:
        return og.Model(str(out))
    config = og.Config(str(out))
    config.clear_providers()  # see GENAI_AS_IS
    return og.Model(config)


@per_genai_build
def test_genai_tokenizer(built, name, ep, dtype):
    import onnxruntime_genai as og

    ref = load_reference(name)
    model = genai_model(built("fixture", name, dtype, ep), ep)
    tok = og.Tokenizer(model)
    assert tok.encode(ref["prompt"]).tolist() == ref["input_ids"]


@per_genai_build
def test_genai_greedy(built, name, ep, dtype):
    ref = load_reference(name)
    want = ref["greedy_tokens"]
    model = genai_model(built("fixture", name, dtype, ep), ep)
    assert genai_greedy(model, ref["input_ids"], len(want)) == want


F16_GENAI_BUILDS = [(None, "f16")] + [(ep, "f16") for ep in F16_EPS]
# Greedy tokens (of 32) an f16 build must share with transformers' f32 run: one near-tie
# flipped by f16 rounding costs at most the tokens after it, so 30 allows a flip in the last
# two steps and catches any earlier divergence.
F16_GREEDY_MIN_EQUAL = 30


@per_fixture_build(lambda name: [b for b in REDUCED_BUILDS if b[1] == "f16"] if name in REDUCED_MATRIX else F16_GENAI_BUILDS)
def test_genai_greedy_f16(built, name, ep, dtype, record_agreement):
    """f16 builds under onnxruntime-genai (providers cleared: CPU): greedy tokens against
    transformers' f32 ones.  f16 rounding may flip a near-tie late in the sequence, so the
    agreement (common prefix, equal tokens) is reported in the session summary, and the test
    requires F16_GREEDY_MIN_EQUAL of the tokens to be equal.  Measured with onnxruntime-genai
    on CPU: every f16 build (14 fixtures x 5 builds) matched 32/32, so no build is exempt."""
    import onnxruntime_genai as og

    ref = load_reference(name)
    ids, want = ref["input_ids"], ref["greedy_tokens"]
    config = og.Config(str(built("fixture", name, dtype, ep)))
    config.clear_providers()
    got = genai_greedy(og.Model(config), ids, len(want))
    prefix = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
    equal = sum(a == b for a, b in zip(got, want))
    record_agreement(f"{name} {ep or 'noflag'} f16", prefix, equal, len(want))
    assert len(want) == 32, f"{name}: reference.json holds {len(want)} greedy tokens, not 32"
    assert equal >= F16_GREEDY_MIN_EQUAL, (
        f"{name} --ep {ep} f16: {equal}/32 greedy tokens equal to transformers' (common prefix {prefix}), "
        f"fewer than {F16_GREEDY_MIN_EQUAL}: {got} != {want}")


# HF model_type -> onnxruntime-genai model.type where they differ; gpt2 uses genai's
# generic decoder class, whose cache layout (separate key/value per layer) is ours.
GENAI_TYPES = {"gpt2": "decoder", "qwen3": "qwen2", "gemma2": "gemma", "olmo2": "olmo", "ministral": "mistral",
               "helium": "decoder", "starcoder2": "decoder", "gemma3": "gemma3_text", "mistral3": "mistral",
               "mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen2", "stablelm": "decoder",
               "gpt_neox": "decoder", "cohere": "decoder", "glm": "decoder", "glm4": "decoder",
               "olmo3": "olmo", "exaone4": "decoder", "cohere2": "decoder",
               "apertus": "decoder", "bloom": "decoder", "mpt": "decoder",
               "falcon": "decoder", "persimmon": "decoder", "ernie4_5_moe": "decoder",
               "minimax_m2": "decoder", "hunyuan_v1_moe": "decoder", "dbrx": "decoder"}
GENAI_TYPES.update({"olmoe": "olmo", "granitemoe": "granite"})
GENAI_TYPES.update({"gpt_oss": "gptoss"})
GENAI_TYPES.update({"arcee": "decoder", "seed_oss": "decoder", "internlm3": "llama", "exaone": "llama",
                    "hunyuan_v1_dense": "decoder", "cwm": "decoder"})
GENAI_TYPES.update({"vaultgemma": "decoder", "ministral3": "mistral", "granite_swa": "decoder",
                    "granitemoeshared": "granite", "granitemoe_swa": "decoder", "flex_olmo": "olmo",
                    "jais2": "decoder", "nanochat": "decoder", "bitnet": "decoder", "iquestcoder": "llama",
                    "hyperclovax": "decoder", "mellum": "decoder"})
GENAI_TYPES.update({"gpt_bigcode": "decoder", "openai-gpt": "decoder", "gptj": "decoder", "codegen": "decoder"})
GENAI_TYPES.update({"opt": "decoder", "gpt_neo": "decoder", "xglm": "decoder", "ctrl": "decoder",
                    "biogpt": "decoder", "gpt-sw3": "decoder", "gpt_neox_japanese": "decoder"})
# Causal LMs of encoder architectures (bert_lm): onnxruntime-genai's generic decoder.
GENAI_TYPES.update({t: "decoder" for t in ("bert", "roberta", "camembert", "xlm-roberta", "data2vec-text",
                                           "roberta-prelayernorm", "xlm-roberta-xl", "ernie", "megatron-bert",
                                           "electra", "rembert", "bert-generation", "roformer", "roc_bert", "bart", "mbart", "plbart", "mvp",
                                           "blenderbot", "blenderbot-small", "marian", "pegasus", "trocr")})
GENAI_TYPES.update({"deepseek_v2": "decoder", "deepseek_v3": "decoder", "minicpm3": "decoder"})
GENAI_TYPES.update({"youtu": "decoder", "apertus1p5_text": "decoder"})
GENAI_TYPES.update({"llama4_text": "decoder", "afmoe": "decoder", "aria_text": "decoder", "kolibri1": "decoder", "flint": "decoder"})
GENAI_TYPES.update({"glm4_moe": "decoder", "glm4_moe_lite": "decoder", "dots1": "decoder"})
GENAI_TYPES.update({"sarvam_mla": "decoder", "sarvam_moe": "decoder", "param2moe": "decoder"})
GENAI_TYPES.update({"hy_v3": "decoder", "minicpm5_moe": "decoder", "axk1": "decoder"})
GENAI_TYPES.update({"diffllama": "decoder", "solar_open": "decoder"})
GENAI_TYPES.update({"exaone_moe": "decoder", "cohere2_moe": "decoder"})
GENAI_TYPES.update({"doge": "decoder", "jetmoe": "decoder", "modernbert-decoder": "decoder"})
GENAI_TYPES.update({"gemma4_unified_text": "gemma4_text"})
GENAI_TYPES.update({"cohere_compass_text": "decoder"})
GENAI_TYPES.update({"laguna": "decoder", "beam": "decoder", "mimo_v2_flash": "decoder", "ergo": "decoder"})
GENAI_TYPES.update({"longcat_flash": "decoder"})
GENAI_TYPES.update({"emu3_text_model": "decoder", "mllama_text_model": "decoder"})
# Gemma 3n: onnxruntime-genai 0.18 has no type of its own; the generic decoder takes its uniform
# caches (the KV-sharing layers carry none).
GENAI_TYPES.update({"gemma3n_text": "decoder"})


@pytest.mark.parametrize("name", NAMES)
def test_genai_model_type(built, name):
    mt = load_config(FIXTURES_DIR / name)["model_type"]
    got = genai_config(built("fixture", name, "f32", None))["model"]["type"]
    assert got == GENAI_TYPES.get(mt, mt), (name, got)


@pytest.mark.parametrize("ep,dtype", [("cpu", "f32"), ("cuda", "f16")])
def test_gpt2_fuses_skip_layer_norm_and_fast_gelu(built, ep, dtype):
    """GPT-2 is where SkipLayerNormalization and FastGelu fire: every
    LayerNorm but none is fused with its residual Add (the first with the embedding sum), and
    every tanh GELU with its bias; the graph still loads and matches (test_prefill_logits)."""
    if "gpt2" not in NAMES:
        pytest.fail("the gpt2 fixture is missing from tests/fixtures")
    model = onnx.load(str(built("fixture", "gpt2", dtype, ep) / "model.onnx"), load_external_data=False)
    ops = [f"{n.domain}::{n.op_type}" for n in model.graph.node]
    layers = dims_of("gpt2")["layers"]
    assert ops.count("com.microsoft::SkipLayerNormalization") == 2 * layers + 1, ops
    assert ops.count("com.microsoft::FastGelu") == layers, ops
    assert "::Gelu" not in ops and "::LayerNormalization" not in ops, ops
