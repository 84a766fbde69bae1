#!/usr/bin/env python3
"""Writes the generated seed corpora of the fuzz targets `npy`, `ep_toml` and `onnx_run`.

    python3 fuzz/make_seeds.py        # needs numpy and onnx (pip install numpy onnx)

- seeds/npy/: small .npy files of every dtype mobius reads (f32, f16, f64, i64, i32, i8, u8,
  bool), scalars, empty and 1-3-D arrays, format versions 1.0 and 2.0;
- seeds/ep_toml/: copies of tests/data/eps/*.toml and examples/custom_ep.toml;
- seeds/onnx_run/: tiny ONNX models (inline weights, a few KiB each) that mobius's interpreter
  runs: element-wise ops, MatMul/Gemm/norms, shape ops, integer/boolean ops, a one-layer
  llama-like decoder (opset 23 Attention, RotaryEmbedding, RMSNormalization) and a
  com.microsoft GroupQueryAttention / SkipSimplifiedLayerNormalization block.

The output is deterministic (fixed RNG seed), so rerunning it changes no file.
"""

import io
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FUZZ = Path(__file__).resolve().parent
ROOT = FUZZ.parent
SEEDS = FUZZ / "seeds"
RNG = np.random.default_rng(20240610)


def npy_bytes(array, version=None):
    buf = io.BytesIO()
    if version is None:
        np.save(buf, array)
    else:
        np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


def write_npy_seeds():
    out = SEEDS / "npy"
    arrays = {
        "f32-2x3": RNG.standard_normal((2, 3)).astype(np.float32),
        "f16-4": RNG.standard_normal(4).astype(np.float16),
        "f64-scalar": np.array(3.5, dtype=np.float64),
        "i64-1x5": RNG.integers(-100, 100, (1, 5)).astype(np.int64),
        "i32-2x2x2": RNG.integers(-100, 100, (2, 2, 2)).astype(np.int32),
        "i8-3": np.array([-128, 0, 127], dtype=np.int8),
        "u8-2x2": np.array([[0, 1], [254, 255]], dtype=np.uint8),
        "bool-3x1": np.array([[True], [False], [True]]),
        "f32-empty-0x4": np.zeros((0, 4), dtype=np.float32),
        "f32-special": np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32),
    }
    for name, array in arrays.items():
        (out / f"{name}.npy").write_bytes(npy_bytes(array))
    (out / "f32-2x3-v2.npy").write_bytes(npy_bytes(arrays["f32-2x3"], version=(2, 0)))


def write_ep_seeds():
    out = SEEDS / "ep_toml"
    for src in sorted((ROOT / "tests" / "data" / "eps").glob("*.toml")):
        shutil.copyfile(src, out / src.name)
    shutil.copyfile(ROOT / "examples" / "custom_ep.toml", out / "custom_ep.toml")


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def weights(name, shape, scale=0.5):
    return init(name, (RNG.standard_normal(shape) * scale).astype(np.float32))


def value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save_model(name, nodes, inputs, outputs, initializers, opset=23, ms=False):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    opsets = [helper.make_opsetid("", opset)]
    if ms:
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="make_seeds.py")
    model.ir_version = 10
    (SEEDS / "onnx_run" / f"{name}.onnx").write_bytes(model.SerializeToString())


def elementwise():
    n = helper.make_node
    nodes = [
        n("Add", ["x", "y"], ["add"]),
        n("Mul", ["add", "x"], ["mul"]),
        n("Sub", ["mul", "y"], ["sub"]),
        n("Abs", ["sub"], ["abs"]),
        n("Add", ["abs", "one"], ["abs1"]),
        n("Div", ["x", "abs1"], ["div"]),
        n("Pow", ["abs1", "two"], ["pow"]),
        n("Sqrt", ["pow"], ["sqrt"]),
        n("Log", ["sqrt"], ["log"]),
        n("Exp", ["div"], ["exp"]),
        n("Tanh", ["exp"], ["tanh"]),
        n("Sigmoid", ["log"], ["sig"]),
        n("Relu", ["sub"], ["relu"]),
        n("Erf", ["relu"], ["erf"]),
        n("Neg", ["erf"], ["neg"]),
        n("Greater", ["x", "y"], ["gt"]),
        n("Less", ["x", "y"], ["lt"]),
        n("Or", ["gt", "lt"], ["or"]),
        n("Not", ["or"], ["not"]),
        n("Where", ["not", "tanh", "neg"], ["where"]),
        n("Softmax", ["where"], ["softmax"], axis=-1),
        n("Cast", ["softmax"], ["half"], to=TensorProto.FLOAT16),
        n("Gelu", ["sig"], ["gelu"]),
    ]
    save_model(
        "elementwise",
        nodes,
        [value("x", TensorProto.FLOAT, ["batch", 3])],
        [value("half", TensorProto.FLOAT16, ["batch", 3]), value("gelu", TensorProto.FLOAT, ["batch", 3])],
        [weights("y", [3]), init("one", np.float32(1.0)), init("two", np.float32(2.0))],
    )


def matmul_norms():
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w"], ["mm"]),
        n("Gemm", ["mm", "g", "gb"], ["gemm"], transB=1, alpha=0.5),
        n("LayerNormalization", ["gemm", "ln_scale", "ln_bias"], ["ln"], axis=-1, epsilon=1e-5),
        n("RMSNormalization", ["ln", "ln_scale"], ["rms"], axis=-1, epsilon=1e-6),
        n("ReduceMean", ["rms", "axes"], ["mean"], keepdims=1),
        n("ReduceSum", ["rms", "axes"], ["sum"], keepdims=0),
        n("ReduceMax", ["rms", "axes"], ["max"], keepdims=1),
    ]
    save_model(
        "matmul_norms",
        nodes,
        [value("x", TensorProto.FLOAT, [2, 4])],
        [
            value("mean", TensorProto.FLOAT, [2, 1]),
            value("sum", TensorProto.FLOAT, [2]),
            value("max", TensorProto.FLOAT, [2, 1]),
        ],
        [
            weights("w", [4, 3]),
            weights("g", [5, 3]),
            weights("gb", [5]),
            weights("ln_scale", [5]),
            weights("ln_bias", [5]),
            init("axes", np.array([-1], dtype=np.int64)),
        ],
    )


def shape_ops():
    n = helper.make_node
    i64 = lambda name, v: init(name, np.array(v, dtype=np.int64))  # noqa: E731
    nodes = [
        n("Shape", ["x"], ["shape"]),
        n("Gather", ["shape", "zero"], ["batch"], axis=0),
        n("Unsqueeze", ["batch", "zero_1d"], ["batch_1d"]),
        n("Concat", ["batch_1d", "minus_one"], ["new_shape"], axis=0),
        n("Reshape", ["x", "new_shape"], ["flat"]),
        n("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        n("Slice", ["xt", "starts", "ends", "slice_axes"], ["sliced"]),
        n("Unsqueeze", ["sliced", "zero_1d"], ["unsq"]),
        n("Squeeze", ["unsq", "zero_1d"], ["sq"]),
        n("Expand", ["one_row", "shape"], ["expanded"]),
        n("Tile", ["flat", "reps"], ["tiled"]),
        n("Flatten", ["x"], ["flattened"], axis=1),
        n("Split", ["flattened", "split"], ["left", "right"], axis=1),
        n("Range", ["r_start", "r_limit", "r_delta"], ["range"]),
        n("ConstantOfShape", ["shape"], ["zeros"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        n("CumSum", ["range", "zero"], ["cumsum"]),
        n("Size", ["x"], ["size"]),
        n("Constant", [], ["const"], value=helper.make_tensor("c", TensorProto.INT64, [2], [1, 2])),
        n("Add", ["expanded", "zeros"], ["sum"]),
        n("Identity", ["sum"], ["sum_id"]),
    ]
    ranks = {"flat": 2, "sq": 3, "tiled": 2, "left": 2, "right": 2, "sum_id": 3, "cumsum": 1, "size": 0}
    outs = [
        value(o, TensorProto.INT64 if o in ("cumsum", "size") else TensorProto.FLOAT, [f"{o}_{i}" for i in range(r)])
        for o, r in ranks.items()
    ]
    save_model(
        "shape_ops",
        nodes,
        [value("x", TensorProto.FLOAT, ["batch", "sequence_len", 4])],
        outs + [value("const", TensorProto.INT64, [2])],
        [
            i64("zero", 0),
            i64("zero_1d", [0]),
            i64("minus_one", [-1]),
            i64("starts", [1]),
            i64("ends", [3]),
            i64("slice_axes", [1]),
            weights("one_row", [4]),
            i64("reps", [1, 2]),
            i64("split", [3, 5]),
            i64("r_start", 0),
            i64("r_limit", 6),
            i64("r_delta", 2),
        ],
    )


def ints_bools():
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["emb"], axis=0),
        n("Cast", ["mask"], ["mask_b"], to=TensorProto.BOOL),
        n("Equal", ["ids", "two"], ["is_two"]),
        n("And", ["mask_b", "is_two"], ["both"]),
        n("Not", ["both"], ["neither"]),
        n("Cast", ["neither"], ["neither_f"], to=TensorProto.FLOAT),
        n("Unsqueeze", ["neither_f", "minus_one"], ["weight"]),
        n("Mul", ["emb", "weight"], ["weighted"]),
        n("CastLike", ["ids", "weighted"], ["ids_f"]),
        n("Mul", ["ids", "ids"], ["ids_sq"]),
    ]
    save_model(
        "ints_bools",
        nodes,
        [value("ids", TensorProto.INT64, ["batch", "sequence_len"]), value("mask", TensorProto.INT64, ["batch", "sequence_len"])],
        [
            value("weighted", TensorProto.FLOAT, ["batch", "sequence_len", 3]),
            value("ids_f", TensorProto.FLOAT, ["batch", "sequence_len"]),
            value("ids_sq", TensorProto.INT64, ["batch", "sequence_len"]),
        ],
        [weights("table", [5, 3]), init("two", np.array(2, dtype=np.int64)), init("minus_one", np.array([-1], dtype=np.int64))],
    )


def rope_tables(positions, half):
    inv = 1.0 / (10000 ** (np.arange(half) / half))
    angles = np.outer(np.arange(positions), inv)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def decoder():
    """One llama layer as mobius writes it for the default EP: hidden 8, 2 query heads, 1 kv
    head of size 4, vocabulary 16, 8 positions."""
    n = helper.make_node
    cos, sin = rope_tables(8, 2)
    nodes = [
        n("Gather", ["embed", "input_ids"], ["h0"], axis=0),
        n("Cast", ["attention_mask"], ["mask_b"], to=TensorProto.BOOL),
        n("Unsqueeze", ["mask_b", "axes_1_2"], ["mask4"]),
        n("Gather", ["cos_cache", "position_ids"], ["cos"], axis=0),
        n("Gather", ["sin_cache", "position_ids"], ["sin"], axis=0),
        n("RMSNormalization", ["h0", "norm1"], ["x1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["x1", "wq"], ["q"]),
        n("MatMul", ["x1", "wk"], ["k"]),
        n("MatMul", ["x1", "wv"], ["v"]),
        n("RotaryEmbedding", ["q", "cos", "sin"], ["q_rot"], num_heads=2),
        n("RotaryEmbedding", ["k", "cos", "sin"], ["k_rot"], num_heads=1),
        n(
            "Attention",
            ["q_rot", "k_rot", "v", "mask4", "past_key", "past_value"],
            ["attn", "present_key", "present_value"],
            is_causal=1,
            q_num_heads=2,
            kv_num_heads=1,
            scale=0.5,
        ),
        n("MatMul", ["attn", "wo"], ["o"]),
        n("Add", ["h0", "o"], ["h1"]),
        n("RMSNormalization", ["h1", "norm2"], ["x2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["x2", "wg"], ["g"]),
        n("Sigmoid", ["g"], ["g_sig"]),
        n("Mul", ["g", "g_sig"], ["silu"]),
        n("MatMul", ["x2", "wu"], ["u"]),
        n("Mul", ["silu", "u"], ["gu"]),
        n("MatMul", ["gu", "wd"], ["d"]),
        n("Add", ["h1", "d"], ["h2"]),
        n("Transpose", ["embed"], ["lm_head"], perm=[1, 0]),
        n("MatMul", ["h2", "lm_head"], ["logits"]),
    ]
    kv = ["batch", 1, "past_sequence_len", 4]
    save_model(
        "decoder",
        nodes,
        [
            value("input_ids", TensorProto.INT64, ["batch", "sequence_len"]),
            value("attention_mask", TensorProto.INT64, ["batch", "past_sequence_len + sequence_len"]),
            value("position_ids", TensorProto.INT64, ["batch", "sequence_len"]),
            value("past_key", TensorProto.FLOAT, kv),
            value("past_value", TensorProto.FLOAT, kv),
        ],
        [
            value("logits", TensorProto.FLOAT, ["batch", "sequence_len", 16]),
            value("present_key", TensorProto.FLOAT, ["batch", 1, "total_sequence_len", 4]),
            value("present_value", TensorProto.FLOAT, ["batch", 1, "total_sequence_len", 4]),
        ],
        [
            weights("embed", [16, 8]),
            init("cos_cache", cos),
            init("sin_cache", sin),
            init("axes_1_2", np.array([1, 2], dtype=np.int64)),
            weights("norm1", [8], 1.0),
            weights("norm2", [8], 1.0),
            weights("wq", [8, 8]),
            weights("wk", [8, 4]),
            weights("wv", [8, 4]),
            weights("wo", [8, 8]),
            weights("wg", [8, 6]),
            weights("wu", [8, 6]),
            weights("wd", [6, 8]),
        ],
    )


def contrib():
    """A GroupQueryAttention block as mobius writes it for onnxruntime EPs: packed rotary,
    SkipSimplifiedLayerNormalization, com.microsoft RotaryEmbedding and FastGelu."""
    n = helper.make_node
    ms = "com.microsoft"
    cos, sin = rope_tables(8, 2)
    nodes = [
        # seqlens_k and total_sequence_length from the mask, as mobius computes them.
        n("Cast", ["attention_mask"], ["mask_b"], to=TensorProto.BOOL),
        n("Cast", ["mask_b"], ["mask01"], to=TensorProto.INT64),
        n("ReduceSum", ["mask01", "axis_1"], ["lengths"], keepdims=0),
        n("Sub", ["lengths", "one"], ["lengths_1"]),
        n("Cast", ["lengths_1"], ["seqlens_k"], to=TensorProto.INT32),
        n("Shape", ["attention_mask"], ["mask_shape"]),
        n("Gather", ["mask_shape", "one"], ["total"], axis=0),
        n("Cast", ["total"], ["total_sequence_length"], to=TensorProto.INT32),
        n("SkipSimplifiedLayerNormalization", ["x", "skip", "norm"], ["normed", "", "", "residual"], domain=ms, epsilon=1e-5),
        n("MatMul", ["normed", "wq"], ["q"]),
        n("MatMul", ["normed", "wk"], ["k"]),
        n("MatMul", ["normed", "wv"], ["v"]),
        n("RotaryEmbedding", ["q", "position_ids", "cos_cache", "sin_cache"], ["q_rot"], domain=ms, num_heads=2),
        n(
            "GroupQueryAttention",
            ["q_rot", "k", "v", "past_key", "past_value", "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache"],
            ["attn", "present_key", "present_value"],
            domain=ms,
            num_heads=2,
            kv_num_heads=1,
            do_rotary=1,
        ),
        n("SkipLayerNormalization", ["attn", "residual", "norm", "ln_bias"], ["ln"], domain=ms, epsilon=1e-5),
        n("FastGelu", ["ln"], ["fast"], domain=ms),
        n("BiasGelu", ["ln", "ln_bias"], ["bias_gelu"], domain=ms),
        n("Add", ["fast", "bias_gelu"], ["out"]),
    ]
    kv = ["batch", 1, "past_sequence_len", 4]
    save_model(
        "contrib",
        nodes,
        [
            value("x", TensorProto.FLOAT, ["batch", "sequence_len", 8]),
            value("skip", TensorProto.FLOAT, ["batch", "sequence_len", 8]),
            value("position_ids", TensorProto.INT64, ["batch", "sequence_len"]),
            value("past_key", TensorProto.FLOAT, kv),
            value("past_value", TensorProto.FLOAT, kv),
            value("attention_mask", TensorProto.INT64, ["batch", "past_sequence_len + sequence_len"]),
        ],
        [
            value("out", TensorProto.FLOAT, ["batch", "sequence_len", 8]),
            value("q_rot", TensorProto.FLOAT, ["batch", "sequence_len", 8]),
            value("present_key", TensorProto.FLOAT, ["batch", 1, "total_sequence_len", 4]),
            value("present_value", TensorProto.FLOAT, ["batch", 1, "total_sequence_len", 4]),
        ],
        [
            weights("norm", [8], 1.0),
            weights("ln_bias", [8], 0.1),
            weights("wq", [8, 8]),
            weights("wk", [8, 4]),
            weights("wv", [8, 4]),
            init("cos_cache", cos),
            init("sin_cache", sin),
            init("axis_1", np.array([1], dtype=np.int64)),
            init("one", np.array(1, dtype=np.int64)),
        ],
        ms=True,
    )


def main():
    for name in ("npy", "ep_toml", "onnx_run"):
        (SEEDS / name).mkdir(parents=True, exist_ok=True)
    write_npy_seeds()
    write_ep_seeds()
    for make in (elementwise, matmul_norms, shape_ops, ints_bools, decoder, contrib):
        make()
    for path in sorted((SEEDS / "onnx_run").glob("*.onnx")):
        onnx.checker.check_model(onnx.load(path))


if __name__ == "__main__":
    main()
