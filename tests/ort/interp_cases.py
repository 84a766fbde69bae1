"""Single-op ONNX models for cross-checking `mobius run` (the reference interpreter)
against onnxruntime; used by test_interp_ops.py.

Every case is one node (opset 24 / IR 11 unless said otherwise; com.microsoft ops also
import com.microsoft 1) with deterministic random inputs: the seed is derived from the
case id, so adding a case never changes another one's data.

Data inputs are graph inputs (fed as .npy to both runtimes); "parameter" inputs such as
shapes, axes, repeats or weights are initializers, so both the input and the initializer
paths of the interpreter are exercised.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 24
IR_VERSION = 11
MS = "com.microsoft"

F32, F16, I64, I32, BOOL = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64,
                            TensorProto.INT32, TensorProto.BOOL)
I64_MAX = np.iinfo(np.int64).max
I64_MIN = np.iinfo(np.int64).min

# A region selects the elements of one output that are compared (the rest is left
# undefined by onnxruntime); it maps the full output array to a 1-D array.
Region = Callable[[np.ndarray], np.ndarray]


@dataclass
class Case:
    op: str
    name: str
    node: object  # onnx NodeProto
    inputs: dict[str, np.ndarray]  # graph inputs, in node order
    inits: dict[str, np.ndarray]
    outputs: list[tuple[str, int]]  # graph outputs: name, ONNX element type
    opset: int = OPSET
    regions: dict[str, Region] = field(default_factory=dict)
    label: str = ""  # id prefix when it differs from op (com.microsoft ops sharing an ONNX name)

    @property
    def id(self) -> str:
        return f"{self.label or self.op}-{self.name}"

    def model(self):
        """The model; graph output shapes are filled in by ONNX shape inference where it
        knows the op (test_interp_ops fills the others from onnxruntime's results)."""
        g = helper.make_graph(
            [self.node],
            f"{self.op}_{self.name}",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in self.inputs.items()],
            [helper.make_tensor_value_info(n, t, None) for n, t in self.outputs],
            [numpy_helper.from_array(a, n) for n, a in self.inits.items()],
        )
        opsets = [helper.make_opsetid("", self.opset)]
        if self.node.domain == MS:
            opsets.append(helper.make_opsetid(MS, 1))
        elif self.node.domain == "ai.onnx.ml":
            opsets.append(helper.make_opsetid("ai.onnx.ml", 3))
        m = helper.make_model(g, opset_imports=opsets, ir_version=IR_VERSION,
                              producer_name="mobius-interp-tests")
        return onnx.shape_inference.infer_shapes(m)


CASES: list[Case] = []


def rng_for(op: str, name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(f"{op}-{name}".encode()))


def _np_type(a) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else np.asarray(a)


def add(op: str, name: str, ins: list, outs: list[tuple[str, int]], *, domain: str = "",
        opset: int = OPSET, regions: dict | None = None, label: str = "", **attrs) -> Case:
    """ins: (name, array, is_initializer) triples, or None for an absent optional input
    (or a bare array: graph input named in0, in1, ...)."""
    names, inputs, inits = [], {}, {}
    for i, spec in enumerate(ins):
        if spec is None:
            names.append("")
            continue
        if isinstance(spec, tuple):
            n, a, is_init = spec if len(spec) == 3 else (*spec, False)
        else:
            n, a, is_init = f"in{i}", spec, False
        a = _np_type(a)
        names.append(n)
        (inits if is_init else inputs)[n] = a
    node = helper.make_node(op, names, [n for n, _ in outs], name=f"{op}_node", domain=domain or None,
                            **attrs)
    c = Case(op, name, node, inputs, inits, [(n, t) for n, t in outs if n], opset, regions or {}, label)
    assert c.id not in {x.id for x in CASES}, c.id
    CASES.append(c)
    return c


def init(name: str, a) -> tuple:
    return (name, _np_type(a), True)


def inp(name: str, a) -> tuple:
    return (name, _np_type(a), False)


def randn(r, *shape, dtype=np.float32, scale=1.0):
    return (r.standard_normal(shape) * scale).astype(dtype)


def unif(r, lo, hi, *shape, dtype=np.float32):
    return r.uniform(lo, hi, shape).astype(dtype)


def ints(r, lo, hi, *shape, dtype=np.int64):
    return r.integers(lo, hi, shape, endpoint=True).astype(dtype)


def nonzero_ints(r, lo, hi, *shape):
    v = ints(r, lo, hi, *shape)
    v[v == 0] = 1
    return v


# --------------------------------------------------------------------------- elementwise
def _binary():
    for op in ["Add", "Sub", "Mul", "Div"]:
        div = op == "Div"

        def rhs(r, *shape, dtype=np.float32):
            if not div:
                return randn(r, *shape, dtype=dtype)
            return (unif(r, 0.5, 2.0, *shape) * np.where(r.random(shape) < 0.5, -1, 1)).astype(dtype)

        r = rng_for(op, "f32_same")
        add(op, "f32_same", [randn(r, 3, 4), rhs(r, 3, 4)], [("y", F32)])
        r = rng_for(op, "f32_bcast_row")
        add(op, "f32_bcast_row", [randn(r, 2, 3, 4), rhs(r, 4)], [("y", F32)])
        r = rng_for(op, "f32_bcast_both")
        add(op, "f32_bcast_both", [randn(r, 2, 1, 4), rhs(r, 3, 1)], [("y", F32)])
        r = rng_for(op, "f32_scalar")
        add(op, "f32_scalar", [randn(r, 2, 3), rhs(r)], [("y", F32)])
        r = rng_for(op, "i64_bcast")
        # Div on negative integers: onnxruntime truncates toward zero
        add(op, "i64_bcast", [ints(r, -20, 20, 2, 5), nonzero_ints(r, -7, 7, 5)], [("y", I64)])
    # IEEE special values: x/0 = +-inf, 0/0 = NaN
    add("Div", "f32_by_zero", [np.array([1.0, -2.0, 0.0, np.inf], np.float32), np.array([0.0, 0.0, 0.0, 2.0], np.float32)],
        [("y", F32)])
    r = rng_for("Add", "f32_both_scalar")
    add("Add", "f32_both_scalar", [randn(r), randn(r)], [("y", F32)])
    r = rng_for("Add", "f16_bcast")
    add("Add", "f16_bcast", [randn(r, 4, 8, dtype=np.float16), randn(r, 8, dtype=np.float16)], [("y", F16)])

    # Pow
    r = rng_for("Pow", "f32_pos_base")
    add("Pow", "f32_pos_base", [unif(r, 0.1, 3.0, 3, 4), unif(r, -2, 2, 3, 4)], [("y", F32)])
    r = rng_for("Pow", "f32_neg_base_int_exp")
    add("Pow", "f32_neg_base_int_exp", [randn(r, 2, 5), np.array(3.0, np.float32)], [("y", F32)])
    r = rng_for("Pow", "f32_bcast_exp")
    add("Pow", "f32_bcast_exp", [randn(r, 2, 3, 4), np.array([0.0, 1.0, 2.0, -1.0], np.float32)], [("y", F32)])
    r = rng_for("Pow", "f32_i64_exp")
    add("Pow", "f32_i64_exp", [randn(r, 2, 3), np.array([0, 2, 3], np.int64)], [("y", F32)])


def _unary():
    specs = {
        "Neg": [("f32", lambda r: randn(r, 3, 4)), ("i64", lambda r: ints(r, -50, 50, 2, 3, 2)),
                ("f32_scalar", lambda r: randn(r))],
        "Abs": [("f32", lambda r: randn(r, 3, 4)), ("i64", lambda r: ints(r, -50, 50, 2, 3, 2))],
        "Sqrt": [("f32", lambda r: unif(r, 0, 10, 3, 4)), ("f32_3d", lambda r: unif(r, 1e-4, 100, 2, 3, 5))],
        "Reciprocal": [("f32", lambda r: unif(r, 0.1, 10, 3, 4)), ("f32_3d", lambda r: randn(r, 2, 3, 5))],
        "Exp": [("f32", lambda r: unif(r, -5, 5, 3, 4)), ("f32_3d", lambda r: unif(r, -20, 3, 2, 3, 5))],
        "Log": [("f32", lambda r: unif(r, 1e-3, 100, 3, 4)), ("f32_3d", lambda r: unif(r, 0.5, 2, 2, 3, 5))],
        "Erf": [("f32", lambda r: unif(r, -3, 3, 3, 4)), ("f32_3d", lambda r: randn(r, 2, 3, 5, scale=0.5))],
        "Floor": [("f32", lambda r: unif(r, -20, 20, 3, 4)), ("f32_3d", lambda r: randn(r, 2, 3, 5, scale=3.0))],
        "Tanh": [("f32", lambda r: unif(r, -6, 6, 3, 4)), ("f32_3d", lambda r: randn(r, 2, 3, 5, scale=0.3))],
        "Sigmoid": [("f32", lambda r: unif(r, -20, 20, 3, 4)), ("f32_3d", lambda r: randn(r, 2, 3, 5))],
        # RoPE angles: position × frequency, up to a few thousand radians
        "Cos": [("f32", lambda r: unif(r, -7, 7, 3, 4)), ("f32_3d", lambda r: unif(r, -4000, 4000, 2, 3, 5))],
        "Sin": [("f32", lambda r: unif(r, -7, 7, 3, 4)), ("f32_3d", lambda r: unif(r, -4000, 4000, 2, 3, 5))],
        "Relu": [("f32", lambda r: np.where(r.random((3, 4)) < 0.2, 0, randn(r, 3, 4)).astype(np.float32)),
                 ("f32_3d", lambda r: randn(r, 2, 3, 5))],
    }
    # IEEE special values (onnxruntime follows IEEE: overflow to inf, NaN in, NaN out)
    nan, inf = np.nan, np.inf
    specials = {
        "Exp": [-200.0, -104.0, 100.0, 88.8, 88.7, -inf, inf, nan],
        "Log": [0.0, -1.0, 1.0, inf, nan, 1e-30],
        "Sqrt": [-1.0, 0.0, 4.0, inf, nan],
        "Reciprocal": [0.0, -0.0, inf, -inf, nan, 3.0],
        "Tanh": [-20.0, 20.0, nan, -inf, inf, 1e-8],
        "Sigmoid": [-100.0, 100.0, nan, -inf, inf],
        "Cos": [0.0, -0.0, nan, -inf, inf, 1e-8, 3.1415927, 1e6, -12345.678],
        "Sin": [0.0, -0.0, nan, -inf, inf, 1e-8, 3.1415927, 1e6, -12345.678],
        "Relu": [nan, -inf, inf, -0.0],
        "Abs": [-inf, nan, -0.0],
        "Erf": [-inf, inf, nan, 10.0, -10.0],
        "Floor": [-0.0, 0.5, -0.5, 2.0, -inf, inf, nan, 1e30],
    }
    for op, vals in specials.items():
        specs[op].append(("special_values", lambda r, v=vals: np.array(v, np.float32)))
    for op, cases in specs.items():
        for name, gen in cases:
            x = gen(rng_for(op, name))
            add(op, name, [x], [("y", helper.np_dtype_to_tensor_dtype(x.dtype))])


# --------------------------------------------------------------------------- matmul
def _matmul():
    shapes = {
        "2d": ((3, 5), (5, 4)),
        "batched": ((2, 3, 5), (2, 5, 4)),
        "bcast_batch": ((2, 1, 3, 5), (3, 5, 4)),
        "bcast_batch_rhs_2d": ((2, 3, 3, 5), (5, 4)),
        "1d_lhs": ((5,), (2, 5, 4)),
        "1d_rhs": ((2, 3, 5), (5,)),
        "1d_both": ((7,), (7,)),
    }
    for name, (sa, sb) in shapes.items():
        r = rng_for("MatMul", name)
        add("MatMul", name, [randn(r, *sa), randn(r, *sb)], [("y", F32)])
    r = rng_for("MatMul", "f16_batched")
    add("MatMul", "f16_batched", [randn(r, 2, 4, 16, dtype=np.float16), randn(r, 16, 6, dtype=np.float16)],
        [("y", F16)])

    # Gemm: Y = alpha * A' B' + beta * C
    def gemm(name, ta, tb, c_shape, **attrs):
        r = rng_for("Gemm", name)
        m, k, n = 3, 5, 4
        a = randn(r, *((k, m) if ta else (m, k)))
        b = randn(r, *((n, k) if tb else (k, n)))
        ins = [inp("A", a), init("B", b)]
        if c_shape is not None:
            ins.append(init("C", randn(r, *c_shape)))
        if ta:
            attrs["transA"] = 1
        if tb:
            attrs["transB"] = 1
        add("Gemm", name, ins, [("y", F32)], **attrs)

    gemm("plain_no_c", False, False, None)
    gemm("transA", True, False, (4,))
    gemm("transB_alpha_beta", False, True, (3, 4), alpha=0.5, beta=2.0)
    gemm("transA_transB_c_col", True, True, (3, 1), alpha=-1.5)
    gemm("c_scalar_beta0", False, False, (), beta=0.0)


# --------------------------------------------------------------------------- shape ops
def _shape_ops():
    # Transpose
    r = rng_for("Transpose", "default_perm")
    add("Transpose", "default_perm", [randn(r, 2, 3, 4)], [("y", F32)])
    r = rng_for("Transpose", "2d")
    add("Transpose", "2d", [randn(r, 3, 5)], [("y", F32)], perm=[1, 0])
    r = rng_for("Transpose", "4d_0213")
    add("Transpose", "4d_0213", [randn(r, 2, 3, 4, 5)], [("y", F32)], perm=[0, 2, 1, 3])
    r = rng_for("Transpose", "i64_201")
    add("Transpose", "i64_201", [ints(r, -9, 9, 2, 3, 4)], [("y", I64)], perm=[2, 0, 1])

    # Reshape
    for name, shape, dt in [("zero_minus1", [0, -1], F32), ("minus1_first", [-1, 2, 2], F32),
                            ("zeros_keep", [0, 0, 2, 2], F32), ("zero_last", [3, -1, 0], F32),
                            ("i64_flat", [-1], I64)]:
        r = rng_for("Reshape", name)
        x = ints(r, -9, 9, 2, 3, 4) if dt == I64 else randn(r, 2, 3, 4)
        add("Reshape", name, [inp("x", x), init("shape", np.array(shape, np.int64))], [("y", dt)])
    add("Reshape", "allowzero_empty", [inp("x", np.zeros((0, 3), np.float32)), init("shape", np.array([3, 0], np.int64))],
        [("y", F32)], allowzero=1)

    # Flatten
    for name, shape, axis in [("default", (2, 3, 4), None), ("axis0", (2, 3, 4), 0),
                              ("axis_neg1", (2, 3, 4), -1), ("axis3_4d", (2, 3, 4, 5), 3)]:
        r = rng_for("Flatten", name)
        kw = {} if axis is None else {"axis": axis}
        add("Flatten", name, [randn(r, *shape)], [("y", F32)], **kw)

    # Concat
    r = rng_for("Concat", "axis0")
    add("Concat", "axis0", [randn(r, 2, 3), randn(r, 1, 3)], [("y", F32)], axis=0)
    r = rng_for("Concat", "axis_neg1_three")
    add("Concat", "axis_neg1_three", [randn(r, 2, 3, 1), randn(r, 2, 3, 4), randn(r, 2, 3, 2)], [("y", F32)],
        axis=-1)
    r = rng_for("Concat", "with_empty")
    add("Concat", "with_empty", [randn(r, 0, 3), randn(r, 2, 3)], [("y", F32)], axis=0)
    r = rng_for("Concat", "i64_axis1")
    add("Concat", "i64_axis1", [ints(r, -9, 9, 2, 2), ints(r, -9, 9, 2, 3)], [("y", I64)], axis=1)

    # Split (opset 18+: num_outputs attribute or split input)
    r = rng_for("Split", "num_outputs_even")
    add("Split", "num_outputs_even", [randn(r, 6, 3)], [("y0", F32), ("y1", F32), ("y2", F32)], num_outputs=3)
    r = rng_for("Split", "num_outputs_uneven")
    add("Split", "num_outputs_uneven", [randn(r, 2, 7)], [("y0", F32), ("y1", F32), ("y2", F32)],
        num_outputs=3, axis=1)
    r = rng_for("Split", "split_input_neg_axis")
    add("Split", "split_input_neg_axis", [inp("x", randn(r, 2, 3, 7)), init("split", np.array([2, 5], np.int64))],
        [("y0", F32), ("y1", F32)], axis=-1)
    # Opsets 13-17 without a split input: equal parts, one per output (ONNX's
    # test_split_equal_parts_*_opset13); opset 11: the sizes as an attribute.
    r = rng_for("Split", "equal_parts_1d_opset13")
    add("Split", "equal_parts_1d_opset13", [randn(r, 6)], [("y0", F32), ("y1", F32), ("y2", F32)],
        opset=13)
    r = rng_for("Split", "equal_parts_2d_opset13")
    add("Split", "equal_parts_2d_opset13", [randn(r, 2, 6)], [("y0", F32), ("y1", F32)], opset=13,
        axis=1)
    r = rng_for("Split", "equal_parts_default_axis_opset17")
    add("Split", "equal_parts_default_axis_opset17", [ints(r, -9, 9, 4, 3)], [("y0", I64), ("y1", I64)],
        opset=17)
    r = rng_for("Split", "split_attribute_opset11")
    add("Split", "split_attribute_opset11", [randn(r, 2, 7)], [("y0", F32), ("y1", F32)], opset=11,
        axis=-1, split=[3, 4])
    r = rng_for("Split", "split_input_i64")
    add("Split", "split_input_i64", [inp("x", ints(r, -9, 9, 4, 2)), init("split", np.array([1, 1, 2], np.int64))],
        [("y0", I64), ("y1", I64), ("y2", I64)], axis=0)

    # Slice (starts, ends, axes, steps are initializers)
    def sl(name, x, starts, ends, axes=None, steps=None, dt=F32):
        ins = [inp("x", x), init("starts", np.array(starts, np.int64)), init("ends", np.array(ends, np.int64))]
        if axes is not None:
            ins.append(init("axes", np.array(axes, np.int64)))
        elif steps is not None:
            ins.append(None)
        if steps is not None:
            ins.append(init("steps", np.array(steps, np.int64)))
        add("Slice", name, ins, [("y", dt)])

    r = rng_for("Slice", "basic")
    sl("basic", randn(r, 5, 6, 7), [1], [4], axes=[1])
    sl("reverse_full", randn(r, 5, 6), [-1], [I64_MIN], axes=[0], steps=[-1])
    sl("neg_steps_clamped", randn(r, 5, 6, 7), [5, 10], [0, -100], axes=[1, 2], steps=[-2, -3])
    sl("clamp_no_axes", randn(r, 5, 6, 7), [-100, 2], [100, 1000])
    sl("neg_axis_step2", randn(r, 5, 6, 7), [1], [-1], axes=[-1], steps=[2])
    sl("i64_step3_no_axes", ints(r, -9, 9, 10), [0], [I64_MAX], steps=[3], dt=I64)
    sl("empty_result", randn(r, 5, 6), [4], [2], axes=[0])

    # Gather
    r = rng_for("Gather", "axis0_negative")
    add("Gather", "axis0_negative", [inp("x", randn(r, 5, 3)), inp("idx", np.array([-1, 0, -5, 2], np.int64))],
        [("y", F32)])
    r = rng_for("Gather", "axis1_2d_indices")
    add("Gather", "axis1_2d_indices",
        [inp("x", randn(r, 2, 4, 3)), inp("idx", np.array([[0, -1], [2, 1], [3, 3]], np.int64))],
        [("y", F32)], axis=1)
    r = rng_for("Gather", "scalar_index")
    add("Gather", "scalar_index", [inp("x", randn(r, 4, 5)), inp("idx", np.array(-2, np.int64))], [("y", F32)])
    r = rng_for("GatherND", "pairs")
    x = randn(r, 3, 4)
    x[0, 1], x[2, 0] = np.nan, -np.inf  # gathered as they are
    add("GatherND", "pairs", [inp("x", x),
                              inp("idx", np.array([[[0, 1], [-1, 3]], [[2, -4], [1, 0]]], np.int64))], [("y", F32)])
    r = rng_for("GatherND", "rows_bool")
    add("GatherND", "rows_bool", [inp("x", r.random((3, 2, 4)) < 0.5), inp("idx", np.array([[2], [0], [-2]], np.int64))],
        [("y", BOOL)])
    r = rng_for("GatherND", "batch_dims1")
    add("GatherND", "batch_dims1", [inp("x", ints(r, -9, 9, 2, 3, 4)), inp("idx", np.array([[[1, 2], [0, 0]], [[2, 3], [1, -1]]], np.int64))],
        [("y", I64)], batch_dims=1)
    r = rng_for("Gather", "i64_data_i32_idx_axis_neg1")
    add("Gather", "i64_data_i32_idx_axis_neg1",
        [inp("x", ints(r, -9, 9, 3, 4)), inp("idx", np.array([3, -4, 1], np.int32))], [("y", I64)], axis=-1)

    # Shape / Size
    r = rng_for("Shape", "data")
    x = randn(r, 2, 3, 4, 5)
    for name, kw in [("full", {}), ("start1", {"start": 1}), ("end_neg1", {"end": -1}),
                     ("start_neg3_end3", {"start": -3, "end": 3}), ("start_clamped_empty", {"start": 10})]:
        add("Shape", name, [x], [("y", I64)], **kw)
    add("Size", "3d", [x[0]], [("y", I64)])
    add("Size", "scalar", [np.array(1.5, np.float32)], [("y", I64)])

    # Cast / CastLike
    r = rng_for("Cast", "data")
    fx = (unif(r, -10, 10, 3, 4)).astype(np.float32)
    fx[0, :3] = [0.0, -0.0, 0.5]
    bx = r.random((3, 4)) < 0.5
    ix = ints(r, -1000, 1000, 3, 4)
    ix[0, 0] = 0
    for name, x, to, dt in [("f32_to_i64", fx, I64, I64), ("f32_to_i32", fx, I32, I32),
                            ("f32_to_bool", fx, BOOL, BOOL), ("bool_to_f32", bx, F32, F32),
                            ("bool_to_i64", bx, I64, I64), ("i64_to_f32", ix, F32, F32),
                            ("i64_to_bool", ix, BOOL, BOOL), ("f32_to_f16", fx * 3.3, F16, F16),
                            ("f16_to_f32", (fx * 3.3).astype(np.float16), F32, F32),
                            ("f32_to_f32", fx, F32, F32),
                            ("f32_to_f16_overflow",
                             np.array([7e4, -1e6, 65519.0, 65520.0, 1e-8, -1e-5, np.inf, np.nan], np.float32), F16, F16),
                            ("f32_nan_inf_to_bool", np.array([np.nan, np.inf, -0.0, 1e-30], np.float32), BOOL, BOOL)]:
        add("Cast", name, [x], [("y", dt)], to=to)
    for name, x, like, dt in [("f32_like_i64", fx, np.array([1], np.int64), I64),
                              ("i64_like_f32", ix, np.array([1.0], np.float32), F32),
                              ("f32_like_f16", fx, np.array([1.0], np.float16), F16),
                              ("bool_like_f32", bx, np.array([1.0], np.float32), F32)]:
        add("CastLike", name, [inp("x", x), init("like", like)], [("y", dt)])

    # Unsqueeze / Squeeze (axes input)
    r = rng_for("Unsqueeze", "data")
    for name, x, axes in [("axis0", randn(r, 3, 4), [0]), ("axis_neg1", randn(r, 3, 4), [-1]),
                          ("axes_1_3", randn(r, 3, 4), [1, 3]), ("scalar", np.array(2.0, np.float32), [0]),
                          ("unsorted_neg", randn(r, 3, 4), [-1, 0])]:
        add("Unsqueeze", name, [inp("x", x), init("axes", np.array(axes, np.int64))], [("y", F32)])
    r = rng_for("Squeeze", "data")
    add("Squeeze", "axis1", [inp("x", randn(r, 3, 1, 4)), init("axes", np.array([1], np.int64))], [("y", F32)])
    add("Squeeze", "no_axes", [inp("x", randn(r, 1, 3, 1, 4, 1))], [("y", F32)])
    add("Squeeze", "neg_axes_i64", [inp("x", ints(r, -9, 9, 1, 3, 1)), init("axes", np.array([-1, 0], np.int64))],
        [("y", I64)])

    # Expand / Tile
    r = rng_for("Expand", "data")
    for name, x, shape, dt in [("col_to_3d", randn(r, 3, 1), [2, 3, 4], F32), ("row", randn(r, 4), [3, 4], F32),
                               ("shape_lower_rank", randn(r, 2, 3, 4), [3, 1], F32),
                               ("shape_ones_bidirectional", randn(r, 3, 4), [2, 1, 1], F32),
                               ("i64", ints(r, -9, 9, 1, 2), [3, 2], I64)]:
        add("Expand", name, [inp("x", x), init("shape", np.array(shape, np.int64))], [("y", dt)])
    r = rng_for("Tile", "data")
    for name, x, reps, dt in [("2d", randn(r, 2, 3), [2, 1], F32), ("3d", randn(r, 2, 3, 4), [1, 2, 3], F32),
                              ("i64_1d", ints(r, -9, 9, 3), [4], I64)]:
        add("Tile", name, [inp("x", x), init("repeats", np.array(reps, np.int64))], [("y", dt)])

    # Where and comparisons / logic
    r = rng_for("Where", "data")
    add("Where", "bcast_y", [r.random((3, 4)) < 0.5, randn(r, 3, 4), randn(r, 4)], [("y", F32)])
    add("Where", "bcast_all", [r.random((2, 1, 4)) < 0.5, np.array(1.5, np.float32), randn(r, 3, 1)], [("y", F32)])
    add("Where", "i64", [r.random((3,)) < 0.5, ints(r, -9, 9, 2, 3), ints(r, -9, 9, 3)], [("y", I64)])
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        r = rng_for(op, "data")
        # small integers as floats so that ties occur
        add(op, "f32", [ints(r, -2, 2, 3, 4).astype(np.float32), ints(r, -2, 2, 3, 4).astype(np.float32)],
            [("y", BOOL)])
        add(op, "i64_bcast", [ints(r, -2, 2, 2, 3, 1), ints(r, -2, 2, 4)], [("y", BOOL)])
    add("Equal", "f32_nan_inf", [np.array([np.nan, np.inf, -np.inf, 0.0], np.float32),
                                 np.array([np.nan, np.inf, np.inf, -0.0], np.float32)], [("y", BOOL)])
    add("Less", "f32_nan_inf", [np.array([np.nan, -np.inf, 1.0, 0.0], np.float32),
                                np.array([1.0, np.inf, np.nan, -0.0], np.float32)], [("y", BOOL)])
    for op in ["LessOrEqual", "GreaterOrEqual"]:
        add(op, "f32_nan_inf", [np.array([np.nan, -np.inf, 1.0, 0.0, np.inf], np.float32),
                                np.array([1.0, np.inf, np.nan, -0.0, np.inf], np.float32)], [("y", BOOL)])
    r = rng_for("Equal", "bool")
    add("Equal", "bool", [r.random((3, 4)) < 0.5, r.random((4,)) < 0.5], [("y", BOOL)])
    r = rng_for("And", "data")
    add("And", "same", [r.random((3, 4)) < 0.5, r.random((3, 4)) < 0.5], [("y", BOOL)])
    add("And", "bcast", [r.random((2, 1, 4)) < 0.5, r.random((3, 1)) < 0.5], [("y", BOOL)])
    r = rng_for("Not", "data")
    add("Not", "2d", [r.random((3, 4)) < 0.5], [("y", BOOL)])
    add("Not", "scalar", [np.array(True)], [("y", BOOL)])
    add("IsNaN", "f32", [np.array([[np.nan, np.inf, -np.inf], [0.0, -0.0, 1.5]], np.float32)], [("y", BOOL)])
    add("IsNaN", "f16_scalar", [np.array(np.nan, np.float16)], [("y", BOOL)])

    # Range (0-d graph inputs)
    for name, (s, l, d), dt in [("f32_half", (0.0, 5.0, 0.5), np.float32),
                                ("f32_neg_delta", (1.5, -2.0, -0.75), np.float32),
                                ("i64_neg_delta", (10, -3, -3), np.int64), ("i64", (0, 7, 2), np.int64),
                                ("i64_empty", (5, 1, 1), np.int64)]:
        add("Range", name, [inp("start", np.array(s, dt)), inp("limit", np.array(l, dt)),
                            inp("delta", np.array(d, dt))],
            [("y", helper.np_dtype_to_tensor_dtype(np.dtype(dt)))])

    # ConstantOfShape (shape is a graph input)
    for name, shape, value, dt in [("f32_value", [2, 3], np.array([2.5], np.float32), F32),
                                   ("default_zero", [3, 1, 2], None, F32),
                                   ("i64_value", [4], np.array([7], np.int64), I64),
                                   ("bool_value", [2, 2], np.array([True]), BOOL),
                                   ("empty_dim", [2, 0], np.array([1.0], np.float32), F32)]:
        kw = {} if value is None else {"value": numpy_helper.from_array(value, "value")}
        add("ConstantOfShape", name, [inp("shape", np.array(shape, np.int64))], [("y", dt)], **kw)

    # Constant (no inputs)
    r = rng_for("Constant", "data")
    for name, kw, dt in [("value_f32", {"value": numpy_helper.from_array(randn(r, 2, 3), "v")}, F32),
                         ("value_i64", {"value": numpy_helper.from_array(ints(r, -9, 9, 4), "v")}, I64),
                         ("value_f16", {"value": numpy_helper.from_array(randn(r, 3, dtype=np.float16), "v")}, F16),
                         ("value_float", {"value_float": 1.25}, F32),
                         ("value_floats", {"value_floats": [1.0, -2.5, 3.0]}, F32),
                         ("value_int", {"value_int": -7}, I64),
                         ("value_ints", {"value_ints": [3, 0, -1]}, I64)]:
        add("Constant", name, [], [("y", dt)], **kw)

    # Identity
    r = rng_for("Identity", "data")
    add("Identity", "f32", [randn(r, 2, 3)], [("y", F32)])
    add("Identity", "i64", [ints(r, -9, 9, 4)], [("y", I64)])
    add("Identity", "bool", [r.random((2, 2)) < 0.5], [("y", BOOL)])


# --------------------------------------------------------------------------- reductions
def _red(op, name, x, axes, dt=F32, axes_input=False, **kw):
    """One reduction case: `x`, reduced over `axes` (an initializer, or a graph input)."""
    ins = [inp("x", x)]
    if axes is not None:
        ins.append((inp if axes_input else init)("axes", np.array(axes, np.int64)))
    add(op, name, ins, [("y", dt)], **kw)


def _reduce():
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]:
        r = rng_for(op, "data")
        x = randn(r, 3, 4, 5)
        _red(op, "axis1_keepdims", x, [1])
        _red(op, "axes_neg1_0_no_keepdims", x, [-1, 0], keepdims=0)
        _red(op, "all_keepdims", x, None)
        _red(op, "all_no_keepdims", x, None, keepdims=0)
        _red(op, "empty_axes_noop", x, None, noop_with_empty_axes=1)
        if op != "ReduceMean":
            _red(op, "i64_axis0", ints(r, -50, 50, 3, 4), [0], dt=I64)

    r = rng_for("Softmax", "data")
    add("Softmax", "default_axis", [randn(r, 2, 3, 5)], [("y", F32)])
    add("Softmax", "axis1", [randn(r, 2, 3, 5)], [("y", F32)], axis=1)
    add("Softmax", "axis0", [randn(r, 4, 3)], [("y", F32)], axis=0)
    add("Softmax", "large_values", [randn(r, 3, 8, scale=50.0)], [("y", F32)])
    sm = randn(r, 3, 5)
    sm[0, :2] = -np.inf
    sm[1, 1:] = -np.inf
    add("Softmax", "neg_inf_entries", [sm], [("y", F32)])
    # NaN and infinity: a NaN anywhere in a slice makes the whole slice NaN (not a masked
    # score), as do +inf and a slice that is all -inf
    nan, inf = np.nan, np.inf
    add("Softmax", "nan_inf_rows", [np.array([[nan] * 4, [nan, 1, 2, 3], [1, 2, 3, nan], [-inf] * 4,
                                              [1, inf, 2, 3], [-inf, -inf, nan, -inf], [1, 2, 3, 4]],
                                             np.float32)], [("y", F32)])
    sm = randn(r, 3, 4, 20)
    sm[0, 1, 7] = nan
    sm[2, :, 0] = nan
    add("Softmax", "nan_axis1", [sm], [("y", F32)], axis=1)
    r = rng_for("TopK", "data")
    k2, k3 = init("k", np.array([2], np.int64)), init("k", np.array([3], np.int64))
    outs = [("values", F32), ("indices", I64)]
    add("TopK", "default_axis", [randn(r, 2, 3, 5), k2], outs)
    add("TopK", "axis1_smallest", [randn(r, 2, 4, 3), k3], outs, axis=1, largest=0)
    # ties (few distinct values): equal values come out in index order, largest and smallest
    ties = ints(r, 0, 3, 4, 8).astype(np.float32)
    add("TopK", "ties", [ties, k3], outs)
    add("TopK", "ties_smallest", [ties, k3], outs, largest=0)
    add("TopK", "k_equals_axis", [randn(r, 3, 4), init("k", np.array([4], np.int64))], outs, axis=-1)
    add("TopK", "f16", [randn(r, 2, 6, dtype=np.float16), k2], [("values", F16), ("indices", I64)])
    add("TopK", "i64_axis0", [ints(r, -9, 9, 5, 3), k2], [("values", I64), ("indices", I64)], axis=0)
    for op in ["ReduceMax"]:
        # a NaN propagates only when it comes first in its group (onnxruntime's Eigen reduction
        # also drops the lane of a NaN that starts one, e.g. [1, NaN, 2, 3] -> 2: such rows
        # are not reproduced and left out)
        x = np.array([[nan, 1, 2, 3], [4, 3, nan, 1], [1, 2, 3, nan], [nan] * 4, [-inf] * 4, [1, inf, nan, -inf]],
                     np.float32)
        _red(op, "nan_inf_rows", x, [1])
        x = randn(r, 5, 3, 4)
        x[0, 1, :] = nan
        x[2, 2, 3] = nan
        _red(op, "nan_axis0", x, [0])



# --------------------------------------------------------------------------- scans
def _scan():
    def cumsum(name, x, axis, dt, axis_1d=False, axis_input=False, **kw):
        a = np.array([axis] if axis_1d else axis, np.int64)
        ax = inp("axis", a) if axis_input else init("axis", a)
        add("CumSum", name, [inp("x", x), ax], [("y", dt)], **kw)

    r = rng_for("CumSum", "data")
    x = randn(r, 3, 4, 5)
    cumsum("f32_axis0", x, 0, F32)
    cumsum("f32_axis_neg1_exclusive", x, -1, F32, exclusive=1)
    cumsum("f32_axis1_reverse", x, 1, F32, axis_1d=True, reverse=1)
    cumsum("f32_reverse_exclusive", x, 2, F32, reverse=1, exclusive=1)
    cumsum("i64_ones_1d", np.ones(7, np.int64), 0, I64, axis_1d=True)
    cumsum("i64_axis_input", ints(r, -9, 9, 2, 6), 1, I64, axis_input=True)
    cumsum("i32_exclusive", ints(r, -9, 9, 4, 3, dtype=np.int32), 0, I32, exclusive=1)
    cumsum("i64_mask_axis1", ints(r, 0, 2, 3, 7), 1, I64)
    add("CumSum", "f32_axis0_i32", [inp("x", randn(r, 4, 3)), init("axis", np.array([0], np.int32))], [("y", F32)])


# --------------------------------------------------------------------------- norms / gelu
def _norms():
    for name, kw, dt in [("none", {}, np.float32), ("none_attr", {"approximate": "none"}, np.float32),
                         ("tanh", {"approximate": "tanh"}, np.float32)]:
        r = rng_for("Gelu", name)
        add("Gelu", name, [unif(r, -6, 6, 3, 8).astype(dt)], [("y", F32)], **kw)

    # LayerNormalization: Y, Mean, InvStdDev (stash_type 1 = float)
    r = rng_for("LayerNormalization", "last_axis_all_outputs")
    add("LayerNormalization", "last_axis_all_outputs",
        [inp("x", randn(r, 2, 3, 8, scale=2.0) + 1.0), init("scale", randn(r, 8)), init("bias", randn(r, 8))],
        [("y", F32), ("mean", F32), ("inv_std", F32)])
    r = rng_for("LayerNormalization", "axis1_eps")
    add("LayerNormalization", "axis1_eps",
        [inp("x", randn(r, 2, 3, 4)), init("scale", randn(r, 3, 4)), init("bias", randn(r, 3, 4))],
        [("y", F32), ("mean", F32), ("inv_std", F32)], axis=1, epsilon=1e-3)
    r = rng_for("LayerNormalization", "no_bias")
    add("LayerNormalization", "no_bias", [inp("x", randn(r, 4, 16)), init("scale", randn(r, 16))], [("y", F32)])

    r = rng_for("LayerNormalization", "f16")
    add("LayerNormalization", "f16",
        [inp("x", randn(r, 3, 16, dtype=np.float16)), init("scale", randn(r, 16, dtype=np.float16)),
         init("bias", randn(r, 16, dtype=np.float16))], [("y", F16)])
    r = rng_for("RMSNormalization", "last_axis")
    add("RMSNormalization", "last_axis", [inp("x", randn(r, 2, 3, 8)), init("scale", randn(r, 8))], [("y", F32)])
    r = rng_for("RMSNormalization", "axis1_eps")
    add("RMSNormalization", "axis1_eps", [inp("x", randn(r, 2, 3, 4)), init("scale", randn(r, 3, 4))],
        [("y", F32)], axis=1, epsilon=1e-3)
    r = rng_for("RMSNormalization", "f16")
    add("RMSNormalization", "f16",
        [inp("x", randn(r, 2, 16, dtype=np.float16)), init("scale", randn(r, 16, dtype=np.float16))], [("y", F16)])

    # com.microsoft skip norms: output, mean, inv_std_var, input_skip_bias_sum
    for op, has_beta in [("SkipLayerNormalization", True), ("SkipSimplifiedLayerNormalization", False)]:
        variants = [("bias", True, True), ("no_bias", True, False)]
        if has_beta:
            variants = [("beta_bias", True, True), ("no_beta_no_bias", False, False), ("beta_no_bias", True, False)]
        for name, beta, bias in variants:
            r = rng_for(op, name)
            hidden = 16
            ins = [inp("x", randn(r, 2, 3, hidden)), inp("skip", randn(r, 2, 3, hidden)),
                   init("gamma", randn(r, hidden))]
            if has_beta:
                ins.append(init("beta", randn(r, hidden)) if beta else None)
            if bias:
                ins.append(init("bias", randn(r, hidden)))
            if has_beta:
                outs = [("y", F32), ("mean", F32), ("inv_std_var", F32), ("sum", F32)]
            else:
                # the simplified (RMS) norm has no mean: onnxruntime only fills output 1
                # with zeros, so it is left unnamed (not compared)
                outs = [("y", F32), ("", 0), ("inv_std_var", F32), ("sum", F32)]
            add(op, name, ins, outs, domain=MS, epsilon=1e-5)
    r = rng_for("SkipLayerNormalization", "skip_2d")
    add("SkipLayerNormalization", "skip_2d",
        [inp("x", randn(r, 2, 3, 8)), inp("skip", randn(r, 3, 8)), init("gamma", randn(r, 8)),
         init("beta", randn(r, 8))], [("y", F32)], domain=MS)

    r = rng_for("BiasGelu", "3d")
    add("BiasGelu", "3d", [inp("x", randn(r, 2, 3, 8, scale=2.0)), init("bias", randn(r, 8))], [("y", F32)],
        domain=MS)
    r = rng_for("BiasGelu", "2d")
    add("BiasGelu", "2d", [inp("x", unif(r, -6, 6, 4, 5)), init("bias", randn(r, 5))], [("y", F32)], domain=MS)
    r = rng_for("FastGelu", "bias")
    add("FastGelu", "bias", [inp("x", randn(r, 2, 3, 8, scale=2.0)), init("bias", randn(r, 8))], [("y", F32)],
        domain=MS)
    r = rng_for("FastGelu", "no_bias")
    add("FastGelu", "no_bias", [inp("x", unif(r, -6, 6, 4, 5))], [("y", F32)], domain=MS)


# --------------------------------------------------------------------------- rotary
def _caches(r, max_pos, half, dtype=np.float32):
    theta = r.uniform(0, 2 * np.pi, (max_pos, half))
    return np.cos(theta).astype(dtype), np.sin(theta).astype(dtype)


def _rope():
    B, S, N, H = 2, 3, 2, 8
    op = "RotaryEmbedding"

    def onnx_rope(name, x, rot=H, pos=True, gathered=False, **attrs):
        r = rng_for(op, name)
        if gathered:
            cos, sin = _caches(r, B * S, rot // 2)
            cos, sin = cos.reshape(B, S, rot // 2), sin.reshape(B, S, rot // 2)
        else:
            cos, sin = _caches(r, 16, rot // 2)
        ins = [inp("x", x), init("cos", cos), init("sin", sin)]
        if pos:
            ins.append(inp("pos", ints(r, 0, 15, B, S)))
        if rot != H:
            attrs["rotary_embedding_dim"] = rot
        add(op, name, ins, [("y", F32)], opset=23, **attrs)

    r = rng_for(op, "x")
    onnx_rope("3d_num_heads_pos_ids", randn(r, B, S, N * H), num_heads=N)
    onnx_rope("4d_pos_ids", randn(r, B, N, S, H))
    onnx_rope("4d_gathered_caches", randn(r, B, N, S, H), pos=False, gathered=True)
    onnx_rope("3d_gathered_caches", randn(r, B, S, N * H), pos=False, gathered=True, num_heads=N)
    onnx_rope("4d_partial_dim", randn(r, B, N, S, H), rot=4)
    onnx_rope("3d_interleaved", randn(r, B, S, N * H), num_heads=N, interleaved=1)
    onnx_rope("3d_interleaved_partial_gathered", randn(r, B, S, N * H), rot=4, pos=False, gathered=True,
              num_heads=N, interleaved=1)

    # com.microsoft RotaryEmbedding: input, position_ids, cos_cache, sin_cache
    def ms_rope(name, x, pos, rot=H, **attrs):
        r = rng_for("ms.RotaryEmbedding", name)
        cos, sin = _caches(r, 16, rot // 2)
        if rot != H:
            attrs["rotary_embedding_dim"] = rot
        add(op, name, [inp("x", x), inp("pos", pos), init("cos", cos), init("sin", sin)], [("y", F32)],
            domain=MS, label="ms.RotaryEmbedding", **attrs)

    r = rng_for("ms.RotaryEmbedding", "x")
    ms_rope("3d_pos_ids", randn(r, B, S, N * H), ints(r, 0, 12, B, S))
    ms_rope("3d_pos_offset_interleaved", randn(r, B, S, N * H), np.array([5], np.int64), interleaved=1)
    ms_rope("4d_pos_ids", randn(r, B, N, S, H), ints(r, 0, 12, B, S))
    ms_rope("3d_partial_dim", randn(r, B, S, N * H), ints(r, 0, 12, B, S), rot=4, num_heads=N)


# --------------------------------------------------------------------------- attention
def _attention():
    op = "Attention"

    def att(name, *, B=2, Hq=2, Hkv=2, S=3, L=None, P=0, D=8, Dv=None, three_d=False, mask=None,
            dtype=np.float32, opset=24, qk=False, nonpad=None, **attrs):
        r = rng_for(op, name)
        L = S if L is None else L
        Dv = D if Dv is None else Dv
        et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        q, k, v = randn(r, B, Hq, S, D, dtype=dtype), randn(r, B, Hkv, L, D, dtype=dtype), \
            randn(r, B, Hkv, L, Dv, dtype=dtype)
        if three_d:
            q = q.transpose(0, 2, 1, 3).reshape(B, S, Hq * D)
            k = k.transpose(0, 2, 1, 3).reshape(B, L, Hkv * D)
            v = v.transpose(0, 2, 1, 3).reshape(B, L, Hkv * Dv)
            attrs.update(q_num_heads=Hq, kv_num_heads=Hkv)
        ins = [inp("q", q), inp("k", k), inp("v", v)]
        T = P + L
        if mask == "bool":
            m = r.random((B, 1, S, T)) < 0.7
            m[..., 0] = True  # no fully masked row
            ins.append(inp("mask", m))
        elif mask == "bool2d":
            m = r.random((S, T)) < 0.6
            m[:, -1] = True
            ins.append(inp("mask", m))
        elif mask == "float":
            m = randn(r, B, Hq, S, T, dtype=dtype)
            m[r.random(m.shape) < 0.3] = -np.inf if dtype == np.float32 else np.float16(-10000)
            m[..., 0] = 0
            ins.append(inp("mask", m.astype(dtype)))
        elif P:
            ins.append(None)
        outputs = [("y", et)]
        if nonpad is not None:  # opset 24: valid kv length per batch (no past allowed)
            ins += [None] * (6 - len(ins)) + [inp("nonpad_kv_seqlen", np.array(nonpad, np.int64))]
        if P:
            ins += [inp("past_key", randn(r, B, Hkv, P, D, dtype=dtype)),
                    inp("past_value", randn(r, B, Hkv, P, Dv, dtype=dtype))]
            outputs += [("present_key", et), ("present_value", et)]
        if qk:
            outputs += [("", 0)] * (3 - len(outputs)) + [("qk", et)]
        add(op, name, ins, outputs, opset=opset, **attrs)

    att("4d_basic", opset=23)
    att("4d_cross_len_dv", S=3, L=5, Dv=6)
    att("3d_heads", three_d=True, Hq=2, Hkv=2, opset=23)
    att("3d_gqa", three_d=True, Hq=4, Hkv=2, S=4)
    att("4d_gqa", Hq=6, Hkv=2, S=2, L=4)
    att("past_kv", P=4, S=2, Hq=4, Hkv=2)
    att("past_kv_3d_opset23", P=3, S=1, three_d=True, Hq=4, Hkv=1, opset=23)
    att("bool_mask", mask="bool", S=3, L=5)
    att("bool_mask_2d_past", mask="bool2d", P=2, S=3)
    att("float_mask", mask="float", S=4, L=4, Hq=2)
    att("causal", S=5, is_causal=1)
    att("causal_with_past", S=3, P=4, is_causal=1, Hq=4, Hkv=2)
    att("causal_past_bool_mask", S=2, P=3, is_causal=1, mask="bool")
    att("causal_kv_longer_no_past", S=2, L=5, is_causal=1)
    att("softcap_scale", S=4, softcap=2.0, scale=0.7)
    att("softcap_float_mask", S=3, L=4, softcap=1.5, mask="float")
    # Gemma 2 decode: soft-capped, causal, bool (window) mask over a past, grouped heads
    att("softcap_causal_past_bool_mask_3d_gqa", S=2, P=3, three_d=True, Hq=4, Hkv=2, is_causal=1,
        mask="bool", softcap=2.0, scale=0.3)
    att("f16_softcap_causal_past_bool_mask", dtype=np.float16, S=2, P=3, Hq=4, Hkv=2, is_causal=1,
        mask="bool", softcap=3.0)
    att("scale_causal_3d_gqa", S=3, three_d=True, Hq=4, Hkv=2, scale=0.25, is_causal=1)
    att("qk_matmul_output", S=3, L=4, qk=True)
    att("nonpad_kv_seqlen", S=3, L=6, nonpad=[6, 2])
    att("nonpad_kv_seqlen_bool_mask_gqa", S=2, L=5, Hq=4, Hkv=2, nonpad=[3, 5], mask="bool")
    att("f16_basic", dtype=np.float16, S=4)
    att("f16_float_mask", dtype=np.float16, S=3, L=5, mask="float")
    att("f16_past_causal_gqa", dtype=np.float16, S=2, P=3, Hq=4, Hkv=2, is_causal=1)
    # the 4th output by qk_matmul_output_mode; sliding windows (opset 26); a narrow mask
    att("qk_mode1_softcap", S=3, L=4, qk=True, softcap=2.0, qk_matmul_output_mode=1)
    # (a float mask, added as is: where a bool or causal mask hides a key, onnxruntime writes
    # the lowest float in this output, ONNX's reference and conformance cases -inf, which the
    # interpreter follows)
    att("qk_mode2_float_mask_past", S=2, P=3, mask="float", qk=True, qk_matmul_output_mode=2, softcap=1.5)
    att("qk_mode3_float_mask_gqa", Hq=4, Hkv=2, S=3, L=5, mask="float", qk=True, qk_matmul_output_mode=3)
    att("left_window_causal", S=6, is_causal=1, left_window_size=2, opset=26)
    att("bidirectional_window", S=5, left_window_size=1, right_window_size=2, opset=26)
    att("window_causal_past_gqa", S=2, P=4, Hq=4, Hkv=2, is_causal=1, left_window_size=2, opset=26)
    att("window_nonpad", S=2, L=6, nonpad=[6, 4], is_causal=1, left_window_size=2, opset=26)

    # NaN and infinity (4-D, B=1, one head, S=3 queries over T=4 keys)
    def att_nan(name, *, q_nan=None, k_nan=None, v_nan=None, mask=None, nonpad=None, **attrs):
        r = rng_for(op, name)
        q, k, v = randn(r, 1, 1, 3, 8), randn(r, 1, 1, 4, 8), randn(r, 1, 1, 4, 8)
        for a, at in ((q, q_nan), (k, k_nan), (v, v_nan)):
            if at is not None:  # (row, column) set to NaN, or (row, column, value)
                a[0, 0, at[0], at[1]] = at[2] if len(at) == 3 else np.nan
        ins = [inp("q", q), inp("k", k), inp("v", v)]
        if mask is not None:
            ins.append(inp("mask", mask))
        if nonpad is not None:
            ins += [None] * (6 - len(ins)) + [inp("nonpad_kv_seqlen", np.array(nonpad, np.int64))]
        add(op, name, ins, [("y", F32)], **attrs)

    nan, inf, lowest = np.nan, np.inf, np.finfo(np.float32).min
    att_nan("nan_query_row", q_nan=(1, 2))
    att_nan("inf_query_row", q_nan=(1, 0, inf))
    att_nan("nan_key_causal", k_nan=(2, 0), is_causal=1)  # the causal mask is added: NaN stays
    att_nan("nan_value_masked_key", v_nan=(2, 0), is_causal=1)  # 0 * NaN
    m = np.zeros((3, 4), np.float32)
    m[1, 1] = nan
    m[2, 3] = inf
    att_nan("nan_and_inf_in_float_mask", mask=m)
    # rows 1 and 2 fully masked (-inf, lowest): zeros whatever the scores, even NaN ones;
    # row 0 holds a NaN score under a -inf mask value: NaN
    m = np.full((3, 4), -inf, np.float32)
    m[0, :2] = 0
    m[2, :] = lowest
    att_nan("fully_masked_rows_nan_key", mask=m, k_nan=(2, 0))
    mb = np.zeros((3, 4), bool)
    mb[0, 0] = True
    att_nan("bool_fully_masked_rows_nan_value", mask=mb, v_nan=(3, 1))
    att_nan("nonpad_hides_nan_key", k_nan=(3, 0), nonpad=[2])  # overwritten, not added
    att_nan("nonpad_zero_nan_value", v_nan=(3, 0), nonpad=[0])
    att_nan("inf_key_element", k_nan=(1, 2, inf))
    att_nan("neg_inf_value_causal", v_nan=(3, 1, -inf), is_causal=1)  # key 3 is read by the last row only
    # every row fully masked: zeros (a float mask of -inf, a bool mask of False)
    att_nan("all_rows_masked_float", mask=np.full((3, 4), -inf, np.float32))
    att_nan("all_rows_masked_bool", mask=np.zeros((1, 1, 3, 4), bool))
    att_nan("all_rows_masked_causal_bool", mask=np.zeros((3, 4), bool), is_causal=1)

    # ---- com.microsoft GroupQueryAttention (BSNH inputs, BNSH caches)
    op_g = "GroupQueryAttention"

    def with_sink(ins, sink):
        """ins with the head_sink input (slot 11) when sink is given."""
        if sink is None:
            return ins
        return ins + [None] * (11 - len(ins)) + [inp("head_sink", np.asarray(sink, np.float32))]

    def gqa(name, *, B=1, S=4, P=0, N=4, Nkv=2, D=8, packed=False, rotary=False, seqlens=None, interleaved=0,
            present_valid=None, out_valid=None, sink=None, **attrs):
        """seqlens: per-batch total lengths (defaults to P + S for all); present_valid and
        out_valid: per-batch numbers of defined present / output positions; sink: head_sink
        values (one per query head)."""
        r = rng_for(op_g, name)
        total = P + S
        seqlens = [total] * B if seqlens is None else seqlens
        q = randn(r, B, S, N * D)
        k = randn(r, B, S, Nkv * D)
        v = randn(r, B, S, Nkv * D)
        if packed:
            ins = [inp("qkv", np.concatenate([q, k, v], axis=-1)), None, None]
        else:
            ins = [inp("q", q), inp("k", k), inp("v", v)]
        ins += [inp("past_key", randn(r, B, Nkv, P, D)), inp("past_value", randn(r, B, Nkv, P, D)),
                inp("seqlens_k", np.array(seqlens, np.int32) - 1),
                inp("total_sequence_length", np.array(max(seqlens), np.int32))]
        if rotary:
            cos, sin = _caches(r, 32, D // 2)
            ins += [init("cos", cos), init("sin", sin)]
            attrs.update(do_rotary=1, rotary_interleaved=interleaved)
        ins = with_sink(ins, sink)
        regions = {}
        if out_valid is not None:
            regions["y"] = lambda a, ov=out_valid: np.concatenate([a[b, :n].ravel() for b, n in enumerate(ov)])
        if present_valid is not None:
            for o in ("present_key", "present_value"):
                regions[o] = lambda a, pv=present_valid: np.concatenate(
                    [a[b, :, :n].ravel() for b, n in enumerate(pv)])
        add(op_g, name, ins, [("y", F32), ("present_key", F32), ("present_value", F32)], domain=MS,
            regions=regions, num_heads=N, kv_num_heads=Nkv, **attrs)

    gqa("prompt_empty_past", S=5)
    gqa("decode_past", S=1, P=5, B=2)
    gqa("prompt_packed", S=4, packed=True)
    gqa("decode_packed_rotary", S=1, P=6, D=16, packed=True, rotary=True)
    gqa("prompt_rotary", S=5, D=16, rotary=True, B=2)
    gqa("decode_rotary_interleaved", S=1, P=4, D=16, rotary=True, interleaved=1)
    # padding: batch 1 holds 3 of the 6 cache slots; past positions beyond a batch's
    # length and the present slots after its new token are left undefined by onnxruntime
    gqa("decode_padded_batch2", B=2, S=1, P=5, seqlens=[6, 4], present_valid=[6, 4])
    gqa("decode_padded_batch2_rotary", B=2, S=1, P=5, seqlens=[6, 2], D=16, rotary=True, present_valid=[6, 2])
    # right-padded prompt: padded query rows are not compared (ORT's values there are
    # not part of the op's contract), nor present slots past each batch's length
    gqa("prompt_padded_batch2", B=2, S=5, seqlens=[5, 3], out_valid=[5, 3], present_valid=[5, 3])
    gqa("prompt_local_window", S=6, local_window_size=3)
    gqa("decode_local_window", S=1, P=7, local_window_size=4)
    gqa("prompt_softcap_scale", S=4, softcap=3.0, scale=0.5)
    gqa("decode_smooth_softmax", S=1, P=3, smooth_softmax=1)
    gqa("decode_padded_local_window", B=2, S=1, P=6, seqlens=[7, 4], present_valid=[7, 4], local_window_size=2)
    # a chunk of 3 new tokens after 4 cached ones (onnxruntime allows this for batch 1 only)
    gqa("continuation_chunk", S=3, P=4, N=2, Nkv=1)
    # head_sink (gpt-oss's attention sinks): a logit per query head joins every softmax
    sinks = [1.5, -0.5, 0.0, 3.0]
    gqa("prompt_head_sink", S=5, sink=sinks)
    gqa("decode_head_sink", S=1, P=5, B=2, sink=sinks)
    gqa("prompt_head_sink_rotary_window", S=6, D=16, rotary=True, local_window_size=3, sink=sinks)
    gqa("decode_head_sink_local_window", S=1, P=7, local_window_size=4, sink=sinks)
    gqa("decode_head_sink_over_smooth_softmax", S=1, P=3, smooth_softmax=1, sink=sinks)
    gqa("prompt_head_sink_padded_batch2", B=2, S=5, seqlens=[5, 3], out_valid=[5, 3], present_valid=[5, 3],
        sink=sinks)
    gqa("decode_head_sink_dominant", S=1, P=4, sink=[40.0, -40.0, 0.0, 10.0])

    # NaN and infinity. Decoding: a NaN score in the attended window makes the row NaN, an
    # all-NaN query too; a NaN value under any key of the valid length reaches every output
    # (0 * NaN), beyond it none. (onnxruntime's prompt kernel drops a NaN on the diagonal of
    # every row but the last, depending on its tiling: prompt cases keep NaN off it.)
    def gqa_nan(name, *, S=1, P=5, B=1, seqlens=None, q_nan=None, k_nan=None, v_nan=None, pk_nan=None,
                pv_nan=None, present_valid=None, y_regions=None, fill=np.nan, sink=None, **attrs):
        r = rng_for(op_g, name)
        N, Nkv, D = 2, 1, 8
        total = P + S
        seqlens = [total] * B if seqlens is None else seqlens
        q, k, v = randn(r, B, S, N * D), randn(r, B, S, Nkv * D), randn(r, B, S, Nkv * D)
        pk, pv = randn(r, B, Nkv, P, D), randn(r, B, Nkv, P, D)
        for a, at in ((q, q_nan), (k, k_nan), (v, v_nan), (pk, pk_nan), (pv, pv_nan)):
            if at is not None:
                a[at] = fill
        ins = [inp("q", q), inp("k", k), inp("v", v), inp("past_key", pk), inp("past_value", pv),
               inp("seqlens_k", np.array(seqlens, np.int32) - 1),
               inp("total_sequence_length", np.array(max(seqlens), np.int32))]
        ins = with_sink(ins, sink)
        regions = {} if y_regions is None else {"y": y_regions}
        if present_valid is not None:
            for o in ("present_key", "present_value"):
                regions[o] = lambda a, pv=present_valid: np.concatenate(
                    [a[b, :, :n].ravel() for b, n in enumerate(pv)])
        add(op_g, name, ins, [("y", F32), ("present_key", F32), ("present_value", F32)], domain=MS,
            regions=regions, num_heads=N, kv_num_heads=Nkv, **attrs)

    gqa_nan("decode_nan_query_head", q_nan=(0, 0, slice(8, 16)))
    gqa_nan("decode_nan_past_key", pk_nan=(0, 0, 2, 3))
    gqa_nan("decode_nan_past_key_outside_window", pk_nan=(0, 0, 0, 3), local_window_size=2)
    gqa_nan("decode_nan_past_value_outside_window", pv_nan=(0, 0, 0, 3), local_window_size=2)
    gqa_nan("decode_nan_softcap_smooth", pk_nan=(0, 0, 4, 0), softcap=2.0, smooth_softmax=1)
    # batch 1 holds 3 of 6 slots: NaN past beyond its length is never read
    gqa_nan("decode_padded_nan_beyond_length", B=2, seqlens=[6, 3], pk_nan=(1, 0, 3, 0), pv_nan=(1, 0, 4, 1),
            present_valid=[6, 3])
    # rows 2 and 3 read the NaN key off their diagonal, row 0 does not read it (row 1, on the
    # diagonal, is not compared)
    gqa_nan("prompt_nan_key_off_diagonal", S=4, P=0, k_nan=(0, 1, 0),
            y_regions=lambda a: a[:, [0, 2, 3]].ravel())
    gqa_nan("prompt_nan_value", S=4, P=0, v_nan=(0, 2, 5))
    # infinity: an infinite query element gives +-inf scores (a row of them is NaN: inf - inf
    # in the softmax), an infinite past value inf or NaN (inf * 0) in every output that reads it
    gqa_nan("decode_inf_query_element", q_nan=(0, 0, 3), fill=np.inf)
    gqa_nan("decode_neg_inf_past_key", pk_nan=(0, 0, 1, 2), fill=-np.inf)
    gqa_nan("decode_inf_past_value", pv_nan=(0, 0, 2, 4), fill=np.inf)
    gqa_nan("decode_inf_past_key_outside_window", pk_nan=(0, 0, 0, 3), fill=np.inf, local_window_size=2)
    gqa_nan("prompt_inf_value", S=4, P=0, v_nan=(0, 1, 2), fill=-np.inf)
    # head_sink: a NaN or +inf sink makes its head's rows NaN, a -inf sink is no sink; with
    # every score -inf (an -inf query element against keys of both signs is not that: use
    # +-inf keys) the sink takes the whole weight
    gqa_nan("decode_nan_head_sink", sink=[np.nan, 0.5])
    gqa_nan("decode_inf_head_sink", sink=[0.5, np.inf])
    gqa_nan("decode_neg_inf_head_sink", sink=[-np.inf, 0.5])
    gqa_nan("decode_nan_past_key_head_sink", pk_nan=(0, 0, 2, 3), sink=[1.0, -1.0])
    gqa_nan("decode_inf_query_element_head_sink", q_nan=(0, 0, 3), fill=np.inf, sink=[1.0, -1.0])


_binary()
_unary()
_matmul()
_shape_ops()
_reduce()
_scan()
_norms()
_rope()
_attention()


# --------------------------------------------------------------------------- scatter
def _scatter():
    """TensorScatter (opset 24, the static KV-cache update) and ScatterND (its lowering)."""
    op = "TensorScatter"

    def ts(name, *, shape=(2, 6, 4), S=3, w=(0, 2), axis=None, dtype=np.float32, mode=None,
           special=False):
        r = rng_for(op, name)
        cache = randn(r, *shape, dtype=dtype)
        ax = (axis if axis is not None else -2) % len(shape)
        upd_shape = list(shape)
        upd_shape[ax] = S
        update = randn(r, *upd_shape, dtype=dtype)
        if special:  # NaN/inf written from the update, and kept in the cache where not written
            update.flat[0], update.flat[-1] = np.nan, np.inf
            cache.flat[-1], cache.flat[1] = -np.inf, np.nan
        ins = [inp("past_cache", cache), inp("update", update)]
        if w is not None:
            ins.append(inp("write_indices", np.array(w, np.int64)))
        attrs = {k: v for k, v in (("axis", axis), ("mode", mode)) if v is not None}
        add(op, name, ins, [("present_cache", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))], **attrs)

    ts("axis1_3d", axis=1)
    ts("default_axis_3d")
    ts("default_axis_4d", shape=(2, 3, 5, 4), S=2, w=(3, 0))
    ts("axis2_4d_one_step", shape=(2, 3, 5, 4), S=1, w=(4, 1), axis=2)
    ts("without_write_indices", w=None)
    ts("full_length", S=6, w=(0, 0), axis=1)
    ts("circular_wraps", S=3, w=(4, 5), mode="circular")
    ts("circular_beyond_length", S=2, w=(13, 6), mode="circular")
    ts("linear_mode_named", S=2, w=(4, 1), mode="linear")
    ts("f16", dtype=np.float16, w=(1, 3))
    ts("nan_inf", special=True, w=(0, 1))
    ts("batch1_decode", shape=(1, 8, 6), S=1, w=(5,), axis=1)

    op = "ScatterND"

    def snd(name, data, idx, updates):
        add(op, name, [inp("data", data), inp("indices", np.array(idx, np.int64)), inp("updates", updates)],
            [("output", helper.np_dtype_to_tensor_dtype(data.dtype))])

    r = rng_for(op, "rows")
    snd("rows", randn(r, 4, 3), [[2], [0]], randn(r, 2, 3))
    snd("negative_index", randn(r, 4, 3), [[-1], [1]], randn(r, 2, 3))
    snd("elements", randn(r, 2, 3, 4), [[0, 1, 2], [1, 2, 3], [1, 0, 0]], randn(r, 3))
    # the TensorScatter lowering's form: (b, slot) pairs [B, S, 2] into [B, N, W]
    idx = [[[0, 2], [0, 3]], [[1, 0], [1, 1]]]
    snd("cache_slots", randn(r, 2, 5, 4), idx, randn(r, 2, 2, 4))
    snd("int64", ints(r, -9, 9, 3, 4), [[1], [2]], ints(r, -9, 9, 2, 4))
    snd("f16", randn(r, 4, 3, dtype=np.float16), [[3], [1]], randn(r, 2, 3, dtype=np.float16))
    data, upd = randn(r, 4, 3), randn(r, 2, 3)
    data[0, 1], data[3, 0], upd[0, 2], upd[1, 0] = np.nan, np.inf, -np.inf, np.nan
    snd("nan_inf", data, [[1], [3]], upd)


_scatter()


# --------------------------------------------------------------------------- Max / Min / ReduceMin
def _extrema():
    nan, inf = np.nan, np.inf
    for op in ["Max", "Min"]:
        r = rng_for(op, "data")
        add(op, "f32_same", [randn(r, 3, 4), randn(r, 3, 4)], [("y", F32)])
        add(op, "f32_one_input", [randn(r, 2, 5)], [("y", F32)])
        add(op, "f32_three_bcast", [randn(r, 2, 1, 4), randn(r, 3, 1), randn(r)], [("y", F32)])
        add(op, "f16_bcast", [randn(r, 4, 8, dtype=np.float16), randn(r, 8, dtype=np.float16)], [("y", F16)])
        add(op, "i64_bcast", [ints(r, -20, 20, 2, 5), ints(r, -20, 20, 5), np.array(I64_MAX - 1, np.int64)],
            [("y", I64)])
        add(op, "i32_same", [ints(r, -9, 9, 3, 4, dtype=np.int32), ints(r, -9, 9, 3, 4, dtype=np.int32)],
            [("y", I32)])
        # a NaN in any input makes the element NaN, whichever input holds it; infinities compare
        # as usual (no -0.0 / 0.0 ties: which zero wins depends on onnxruntime's tiling)
        a = np.array([nan, 1, nan, 2, -inf, inf, nan, 5, -inf, 3], np.float32)
        b = np.array([1, nan, nan, inf, 3, -inf, -inf, -inf, inf, 2], np.float32)
        add(op, "nan_inf_first_second", [a, b], [("y", F32)])
        add(op, "nan_inf_second_first", [b, a], [("y", F32)])
        add(op, "f16_nan_inf", [a.astype(np.float16), b.astype(np.float16)], [("y", F16)])
        # long rows (vectorized body and scalar tail), NaN scattered over three inputs
        x, y, z = randn(r, 3, 37), randn(r, 3, 37), randn(r, 37)
        x[0, [0, 5, 17, 36]] = nan
        y[1, [1, 8, 33]] = nan
        y[2, 9] = inf
        z[[2, 20]] = nan
        add(op, "nan_three_long", [x, y, z], [("y", F32)])
        # a NaN in a broadcast column fills its row, a NaN scalar everything
        add(op, "nan_bcast_column", [randn(r, 1, 5), np.array([[nan], [0.5], [-inf]], np.float32)], [("y", F32)])
        add(op, "nan_scalar", [randn(r, 2, 3), np.array(nan, np.float32)], [("y", F32)])

    # ReduceMin beyond the cases every reduction has (_reduce)
    op = "ReduceMin"
    r = rng_for(op, "extra")

    def red(name, x, axes, dt=F32, **kw):
        _red(op, name, x, axes, dt, **kw)

    red("axes_graph_input", randn(r, 3, 4, 5), [2], axes_input=True)
    red("i32_axis1", ints(r, -50, 50, 3, 4, dtype=np.int32), [1], dt=I32)
    red("f16_axis1", randn(r, 3, 6, dtype=np.float16), [1], dt=F16)
    # an empty group gives the dtype's highest value
    red("f32_empty_axis", np.zeros((2, 0), np.float32), [1])
    red("i64_empty_axis", np.zeros((2, 0), np.int64), [1], dt=I64)
    # a NaN propagates only when it comes first in its group, as in ReduceMax. (In a contiguous
    # group of 4 or more, onnxruntime's vectorized reduction also loses, after a NaN at
    # position p in 1..7, the later elements of the group's first 4k at positions congruent to
    # p modulo the power of two above p: [3, NaN, 1, 0] -> 1, [2, NaN, 0, -1, 5] -> 0. Such
    # rows are left out.)
    x = np.array([[nan, 1, 2, 3], [4, 3, nan, 1], [1, 2, 3, nan], [nan] * 4, [inf] * 4, [-inf] * 4,
                  [1, -inf, nan, inf]], np.float32)
    red("nan_inf_rows", x, [1])
    red("nan_inf_rows_f16", x.astype(np.float16), [1], dt=F16)
    red("nan_rows_5", np.array([[2, 0, nan, -1, 5], [nan, 0, 1, 2, 3], [3, 4, nan, nan, 1], [2, 0, 3, 1, nan]],
                               np.float32), [1])
    x = randn(r, 5, 3, 4)
    x[0, 1, :] = nan
    x[2, 2, 3] = nan
    x[3, 0, 0] = -inf
    red("nan_axis0", x, [0])
    # every axis, one contiguous group of 60: a leading NaN wins; later NaNs (from position 8
    # on, clear of the quirk above) are skipped
    x = x.copy()
    x[0, 0, 0] = nan
    red("nan_all_axes_leading", x, None, keepdims=0)
    x = randn(r, 5, 3, 4)
    x[1, 0, :] = nan
    x[2, 2, 3] = nan
    x[4, 1, 2] = -inf
    red("nan_all_axes_later", x, None, keepdims=0)


_extrema()


# --------------------------------------------------------------------------- special values
# NaN, +inf, -inf (and fully masked rows) for every op family that computes on floats; the
# data-movement ops copy values and have their own cases above.
def _special_values():
    nan, inf = np.nan, np.inf

    # arithmetic: every pairing of NaN, +-inf, zero and a finite value
    vals = np.array([nan, inf, -inf, 0.0, -0.0, 2.0, -3.0], np.float32)
    a, b = np.meshgrid(vals, vals, indexing="ij")
    a, b = a.ravel().copy(), b.ravel().copy()
    for op in ["Add", "Sub", "Mul", "Div", "Pow"]:
        add(op, "special_pairs", [a, b], [("y", F32)])
        add(op, "special_pairs_f16", [a.astype(np.float16), b.astype(np.float16)], [("y", F16)])
    # f16 overflow to infinity (computed in f32, rounded at the op boundary)
    big = np.array([60000, -60000, 65504, 40000], np.float16)
    for op in ["Add", "Sub", "Mul"]:
        add(op, "f16_overflow", [big, np.array([60000, 60000, 1, 2], np.float16)], [("y", F16)])
    # Pow of negative bases and fractional, infinite or NaN exponents, broadcast
    add("Pow", "special_bcast", [np.array([[-8.0], [-1.0], [1.0], [0.0], [-inf], [nan]], np.float32),
                                  np.array([1 / 3, 0.0, -1.0, 2.0, inf, -inf, nan, 3.0], np.float32)],
        [("y", F32)])

    # MatMul / Gemm: a NaN in A fills its row, an infinite B element its column (NaN where it
    # meets an infinity of the other sign or a zero); Gemm's C adds on top
    r = rng_for("MatMul", "special")
    x, w = randn(r, 4, 6), randn(r, 6, 5)
    x[0, 2] = nan
    x[1, 3] = inf
    x[2, :] = 0.0
    w[1, 4] = -inf
    w[3, 1] = inf
    add("MatMul", "nan_inf", [x, w], [("y", F32)])
    add("MatMul", "nan_inf_f16", [x.astype(np.float16), w.astype(np.float16)], [("y", F16)])
    xb = randn(r, 2, 3, 6)
    xb[1, 2, 0] = -inf
    add("MatMul", "nan_inf_batched", [xb, w], [("y", F32)])
    c = randn(r, 4, 5)
    c[3, 0], c[2, 2] = nan, -inf
    add("Gemm", "nan_inf_c", [inp("A", x), init("B", w), init("C", c)], [("y", F32)], alpha=0.5, beta=2.0)
    add("Gemm", "nan_inf_transB_c_row", [inp("A", x), init("B", np.ascontiguousarray(w.T)),
                                           init("C", np.array([inf, 0, nan, 1, -1], np.float32))],
        [("y", F32)], transB=1)
    # beta 0: C is not read (a NaN or infinite C does not reach the output)
    add("Gemm", "nan_c_beta0", [inp("A", randn(r, 3, 6)), init("B", randn(r, 6, 5)), init("C", c[:3])],
        [("y", F32)], beta=0.0)

    # reductions: NaN anywhere and inf + -inf make NaN; an infinity otherwise stays
    x = np.array([[nan, 1, 2, 3], [1, inf, 2, 3], [-inf, 1, 2, -inf], [inf, -inf, 0, 1], [1, 2, 3, nan],
                  [-inf] * 4], np.float32)
    for op in ["ReduceSum", "ReduceMean"]:
        _red(op, "nan_inf_rows", x, [1])
        _red(op, "nan_inf_rows_f16", x.astype(np.float16), [1], dt=F16)
        _red(op, "nan_inf_axis0", x, [0], keepdims=0)
    x3 = randn(rng_for("ReduceMax", "special"), 3, 4, 5)
    x3[0, 1, 2], x3[2, 0, 0], x3[1, 3, 4] = inf, -inf, nan
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]:
        # a NaN in a strided (non-contiguous) group, leading or not
        _red(op, "nan_inf_axis1_of_3", x3, [1])

    # Softmax: a row entirely -inf (NaN, as onnxruntime computes exp(-inf - -inf)), on the
    # last axis and on an inner one, in f32 and f16
    sm = randn(rng_for("Softmax", "special"), 2, 3, 4)
    sm[0, 1, :] = -inf
    sm[1, :, 2] = -inf
    sm[1, 0, 0] = inf
    add("Softmax", "neg_inf_row_last_axis", [sm], [("y", F32)])
    add("Softmax", "neg_inf_row_axis1", [sm], [("y", F32)], axis=1)
    add("Softmax", "neg_inf_row_f16", [sm.astype(np.float16)], [("y", F16)])

    # CumSum: a NaN or infinity reaches every later partial sum (inf + -inf: NaN); exclusive
    # and reverse scans move where it starts
    x = np.array([[1, nan, 2, 3, 4], [1, inf, 2, -inf, 4], [-inf, 1, 2, 3, 4], [1, 2, 3, 4, inf]], np.float32)
    for name, kw in [("nan_inf", {}), ("nan_inf_exclusive", {"exclusive": 1}),
                     ("nan_inf_reverse", {"reverse": 1}),
                     ("nan_inf_reverse_exclusive", {"reverse": 1, "exclusive": 1})]:
        add("CumSum", name, [inp("x", x), init("axis", np.array(1, np.int64))], [("y", F32)], **kw)
    add("CumSum", "nan_inf_axis0_f16", [inp("x", x.astype(np.float16)), init("axis", np.array(0, np.int64))],
        [("y", F16)])

    # comparisons, Where, logic
    p = np.array([nan, nan, inf, -inf, inf, 0.0, -0.0, 1.0, -inf], np.float32)
    q = np.array([nan, 1.0, inf, -inf, -inf, -0.0, 0.0, nan, 1.0], np.float32)
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        add(op, "nan_inf_pairs", [p, q], [("y", BOOL)])
        add(op, "nan_inf_pairs_f16", [p.astype(np.float16), q.astype(np.float16)], [("y", BOOL)])
    add("Where", "nan_inf", [np.array([True, False, True, False, True, False, True, False, True]), p, q],
        [("y", F32)])
    add("Where", "nan_inf_bcast_f16", [np.array([[True], [False]]), p.astype(np.float16),
                                        np.array(-inf, np.float16)], [("y", F16)])
    r = rng_for("Or", "data")
    add("Or", "same", [r.random((3, 4)) < 0.5, r.random((3, 4)) < 0.5], [("y", BOOL)])
    add("Or", "bcast", [r.random((2, 1, 4)) < 0.5, r.random((3, 1)) < 0.5], [("y", BOOL)])
    add("Or", "all_pairs", [np.array([False, False, True, True]), np.array([False, True, False, True])],
        [("y", BOOL)])
    add("Or", "scalar", [np.array(False), r.random((2, 3)) < 0.5], [("y", BOOL)])

    # unary ops not in _unary's special values
    add("Neg", "special_values", [np.array([nan, inf, -inf, 0.0, -0.0], np.float32)], [("y", F32)])

    # GELU family: +-inf and NaN (x * Phi(x): -inf * 0)
    g = np.array([nan, inf, -inf, -30.0, 30.0, 0.0, -0.0, 1.0], np.float32)
    for name, kw in [("special_values", {}), ("special_values_tanh", {"approximate": "tanh"})]:
        add("Gelu", name, [g], [("y", F32)], **kw)
    add("Gelu", "special_values_f16", [g.astype(np.float16)], [("y", F16)])
    gb = np.array([0.0, 0.0, 1.0, nan, inf, -inf, 0.5, 0.0], np.float32)
    add("BiasGelu", "special_values", [inp("x", np.stack([g, g[::-1]])), init("bias", gb)], [("y", F32)],
        domain=MS)
    add("FastGelu", "special_values_bias", [inp("x", np.stack([g, g[::-1]])), init("bias", gb)], [("y", F32)],
        domain=MS)
    add("FastGelu", "special_values", [inp("x", g)], [("y", F32)], domain=MS)

    # normalizations: a NaN or infinity in a row makes the row (and its statistics) NaN; an
    # infinite scale or bias element its column; other rows stay finite
    r = rng_for("LayerNormalization", "special")
    x = randn(r, 4, 8)
    x[0, 3] = nan
    x[1, 5] = inf
    x[2, 0] = -inf
    scale, bias = randn(r, 8), randn(r, 8)
    scale[6] = inf
    bias[7] = nan
    add("LayerNormalization", "nan_inf", [inp("x", x), init("scale", scale), init("bias", bias)],
        [("y", F32), ("mean", F32), ("inv_std", F32)])
    add("LayerNormalization", "nan_inf_f16", [inp("x", x.astype(np.float16)), init("scale", scale.astype(np.float16)),
                                              init("bias", bias.astype(np.float16))], [("y", F16)])
    add("RMSNormalization", "nan_inf", [inp("x", x), init("scale", scale)], [("y", F32)])
    add("RMSNormalization", "nan_inf_f16", [inp("x", x.astype(np.float16)), init("scale", scale.astype(np.float16))],
        [("y", F16)])
    xs, sk = randn(r, 2, 3, 8), randn(r, 2, 3, 8)
    xs[0, 0, 1] = nan
    sk[0, 1, 2] = inf
    xs[1, 2, 0], sk[1, 2, 0] = inf, -inf  # inf + -inf in the sum
    sb = randn(r, 8)
    sb[4] = -inf
    add("SkipLayerNormalization", "nan_inf",
        [inp("x", xs), inp("skip", sk), init("gamma", scale), init("beta", randn(r, 8)), init("bias", randn(r, 8))],
        [("y", F32), ("mean", F32), ("inv_std_var", F32), ("sum", F32)], domain=MS, epsilon=1e-5)
    add("SkipLayerNormalization", "inf_bias",
        [inp("x", randn(r, 2, 3, 8)), inp("skip", randn(r, 2, 3, 8)), init("gamma", randn(r, 8)),
         init("beta", randn(r, 8)), init("bias", sb)],
        [("y", F32), ("mean", F32), ("inv_std_var", F32), ("sum", F32)], domain=MS, epsilon=1e-5)
    add("SkipSimplifiedLayerNormalization", "nan_inf",
        [inp("x", xs), inp("skip", sk), init("gamma", scale), init("bias", sb)],
        [("y", F32), ("", 0), ("inv_std_var", F32), ("sum", F32)], domain=MS, epsilon=1e-5)
    # onnxruntime's Skip* statistics follow a running mean: an infinity before a row's end
    # makes its mean NaN, at its end inf. (It accumulates in f32, the interpreter in f64:
    # elements whose squares pass f32's range, |x| >= 1.8e19, are left out.)
    rows = np.array([[inf, 0, 0, 0], [0, 0, 0, inf], [1, 1, 1, inf], [inf] * 4, [-inf, 1, 2, 3], [0, 1, -inf, 1],
                     [1e18, -1e18, 1e18, 3], [1, 2, 3, 4]], np.float32)
    for op, extra, outs in [("SkipLayerNormalization", [init("beta", np.zeros(4, np.float32))],
                             [("y", F32), ("mean", F32), ("inv_std_var", F32), ("sum", F32)]),
                            ("SkipSimplifiedLayerNormalization", [],
                             [("y", F32), ("mean", F32), ("inv_std_var", F32), ("sum", F32)])]:
        add(op, "inf_rows", [inp("x", rows), inp("skip", np.zeros_like(rows)),
                                          init("gamma", np.ones(4, np.float32)), *extra],
            outs, domain=MS, epsilon=1e-5)

    # rotary embeddings: a NaN or infinity in x reaches its rotation partner (inf * 0 = NaN
    # where the angle's sine or cosine is 0); an infinite cache entry too
    B, S, N, H = 1, 3, 2, 8
    r = rng_for("RotaryEmbedding", "special")
    x = randn(r, B, S, N * H)
    x[0, 0, 1] = nan
    x[0, 1, 2] = inf
    x[0, 2, 8 + 5] = -inf
    x[0, 2, 0] = inf  # a position whose angle is 0: sin = 0, so inf * 0 meets the partner
    cos, sin = _caches(r, 8, H // 2)
    cos[0], sin[0] = 1.0, 0.0
    cos[3, 1] = inf
    pos = np.array([[1, 2, 0]], np.int64)
    add("RotaryEmbedding", "nan_inf", [inp("x", x), init("cos", cos), init("sin", sin), inp("pos", pos)],
        [("y", F32)], opset=23, num_heads=N)
    add("RotaryEmbedding", "nan_inf_interleaved", [inp("x", x), init("cos", cos), init("sin", sin),
                                                   inp("pos", np.array([[3, 2, 0]], np.int64))],
        [("y", F32)], opset=23, num_heads=N, interleaved=1)
    add("RotaryEmbedding", "nan_inf", [inp("x", x), inp("pos", pos), init("cos", cos), init("sin", sin)],
        [("y", F32)], domain=MS, label="ms.RotaryEmbedding")
    add("RotaryEmbedding", "nan_inf_interleaved_cache_inf",
        [inp("x", x), inp("pos", np.array([[3, 2, 0]], np.int64)), init("cos", cos), init("sin", sin)],
        [("y", F32)], domain=MS, label="ms.RotaryEmbedding", interleaved=1)


_special_values()


# --------------------------------------------------------------------------- quantized ops
def _pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """Packs the last axis of integer values into uint8, `8 // bits` per byte, lowest bits
    first (the last axis must be a multiple of `8 // bits` long)."""
    per = 8 // bits
    q = q.astype(np.uint8).reshape(*q.shape[:-1], q.shape[-1] // per, per)
    return sum(q[..., i] << (i * bits) for i in range(per)).astype(np.uint8)


def _quant():
    import ml_dtypes

    i4, u4 = ml_dtypes.int4, ml_dtypes.uint4
    op = "DequantizeLinear"
    ranges = {np.int8: (-128, 127), np.uint8: (0, 255), i4: (-8, 7), u4: (0, 15), np.int32: (-2**30, 2**30)}

    def q(r, dt, *shape):
        lo, hi = ranges[dt]
        return ints(r, lo, hi, *shape).astype(dt)

    def dq(name, x, scale, zp=None, out=F32, x_is_input=False, **attrs):
        ins = [inp("x", x) if x_is_input else init("x", x), init("x_scale", scale)]
        if zp is not None:
            ins.append(init("x_zero_point", zp))
        add(op, name, ins, [("y", out)], **attrs)

    r = rng_for(op, "per_tensor")
    dq("i8_per_tensor_input", q(r, np.int8, 3, 5), np.float32(0.05), np.int8(-3), x_is_input=True)
    dq("u8_per_tensor_1elem_scale", q(r, np.uint8, 2, 7), np.array([0.02], np.float32),
       np.array([128], np.uint8), x_is_input=True)
    dq("i32_per_tensor", q(r, np.int32, 4, 3), np.float32(1e-3), x_is_input=True)
    dq("i4_per_tensor_no_zp", q(r, i4, 3, 5), np.float32(0.5))
    dq("u4_per_tensor_f16", q(r, u4, 4, 3), np.float16(0.25), u4(8), out=F16)
    r = rng_for(op, "per_axis")
    dq("i8_axis0", q(r, np.int8, 4, 6), unif(r, 0.01, 0.1, 4), q(r, np.int8, 4), axis=0)
    dq("u4_axis1_3d", q(r, u4, 2, 5, 3), unif(r, 0.01, 0.1, 5), q(r, u4, 5), axis=1)
    dq("i4_axis_last_f16", q(r, i4, 3, 6), unif(r, 0.01, 0.1, 6, dtype=np.float16), axis=-1, out=F16)
    r = rng_for(op, "blocked")
    # blocked along axis 0 (the layout of quantized MatMul weights [K, N]), K a multiple of the
    # block and not
    for dt, dn in [(i4, "i4"), (u4, "u4"), (np.int8, "i8"), (np.uint8, "u8")]:
        for k in (32, 40):
            dq(f"{dn}_blocked_axis0_k{k}", q(r, dt, k, 6), unif(r, 0.01, 0.2, -(-k // 16), 6),
               q(r, dt, -(-k // 16), 6), axis=0, block_size=16)
    dq("i4_blocked_axis0_no_zp_f16", q(r, i4, 33, 4), unif(r, 0.01, 0.2, 3, 4, dtype=np.float16),
       axis=0, block_size=16, out=F16)
    dq("u4_blocked_axis1_3d", q(r, u4, 2, 3, 10), unif(r, 0.01, 0.2, 2, 3, 3), q(r, u4, 2, 3, 3),
       axis=2, block_size=4)
    dq("i8_blocked_output_dtype", q(r, np.int8, 8, 3), unif(r, 0.01, 0.2, 2, 3), axis=0, block_size=4,
       output_dtype=F32)
    # NaN / infinite scales: (x - zp) * scale, so NaN where x == zp and +-inf elsewhere
    x = np.array([[-8, -1, 0, 1, 7], [3, 3, 3, 3, 3]]).astype(i4)
    dq("i4_nan_inf_scales", x, np.array([[np.inf, -np.inf, np.nan, 1.0, 2.0]] * 1 + [[np.inf] * 5], np.float32),
       np.array([[0, 0, 0, 0, 0], [3, 3, 3, 0, 0]]).astype(i4), axis=1, block_size=1)

    # ---- com.microsoft MatMulNBits
    op = "MatMulNBits"

    def nbits(name, a, k, n, bits, block, zp=False, bias=False, dtype=np.float32, scales_1d=False,
              out_t=F32, scale_values=None):
        r = rng_for(op, name)
        kb = -(-k // block)
        # values of the padded rows (past K) are random too: they must be ignored
        qv = ints(r, 0, (1 << bits) - 1, n, kb, block)
        b = _pack_bits(qv, bits)
        scales = unif(r, 0.005, 0.05, n, kb).astype(dtype) if scale_values is None else scale_values
        if scales_1d:
            scales = scales.reshape(-1)
        ins = [inp("A", a.astype(dtype)), init("B", b), init("scales", scales)]
        if zp:
            zq = ints(r, 0, (1 << bits) - 1, n, -(-kb * bits // 8) * (8 // bits))
            ins.append(init("zero_points", _pack_bits(zq, bits)))
        elif bias:
            ins.append(None)
        if bias:
            ins += [None, init("bias", randn(r, n, dtype=dtype))]
        add(op, name, ins, [("Y", out_t)], domain=MS, K=k, N=n, bits=bits, block_size=block,
            accuracy_level=0)

    r = rng_for(op, "inputs")
    nbits("b4_k64_2d", randn(r, 3, 64), 64, 8, 4, 32)
    nbits("b4_k72_zp_bias_3d", randn(r, 2, 3, 72), 72, 10, 4, 32, zp=True, bias=True)
    nbits("b4_k40_zp_block16_scales_1d", randn(r, 5, 40), 40, 6, 4, 16, zp=True, scales_1d=True)
    nbits("b8_k64_3d", randn(r, 2, 2, 64), 64, 5, 8, 16)
    nbits("b8_k50_zp_bias", randn(r, 4, 50), 50, 7, 8, 32, zp=True, bias=True)
    nbits("b2_k48_zp", randn(r, 3, 48), 48, 4, 2, 16, zp=True)
    nbits("b4_f16_3d_zp_bias", randn(r, 2, 3, 40), 40, 6, 4, 16, zp=True, bias=True, dtype=np.float16, out_t=F16)
    nbits("b8_f16_k32", randn(r, 4, 32), 32, 3, 8, 32, dtype=np.float16, out_t=F16)
    # NaN and infinity: a NaN in A fills its row, an infinite scale gives +-inf or NaN
    a = randn(r, 3, 32)
    a[1, 5] = np.nan
    a[2, 0] = np.inf
    s = unif(r, 0.01, 0.05, 4, 2)
    s[1, 0], s[3, 1] = np.inf, np.nan
    nbits("b4_nan_inf", a, 32, 4, 4, 16, scale_values=s)

    # ---- com.microsoft GatherBlockQuantized (embedding tables [V, D] quantized along D)
    op = "GatherBlockQuantized"

    def gbq(name, data, idx, scales, zp=None, out_t=F32, **attrs):
        ins = [init("data", data), inp("indices", idx), init("scales", scales)]
        if zp is not None:
            ins.append(init("zero_points", zp))
        add(op, name, ins, [("output", out_t)], domain=MS, **attrs)

    r = rng_for(op, "tables")
    v, d = 7, 48
    idx2 = np.array([[0, 6, 3], [-1, 2, 2]], np.int64)
    for bits in (4, 8):
        qv = ints(r, 0, (1 << bits) - 1, v, d)
        sc = unif(r, 0.01, 0.1, v, 3)
        zq = ints(r, 0, (1 << bits) - 1, v, 4 if bits == 4 else 3)[:, : (2 if bits == 4 else 3) * (8 // bits)]
        gbq(f"u8_b{bits}_no_zp", _pack_bits(qv, bits), idx2, sc, bits=bits, block_size=16)
        gbq(f"u8_b{bits}_zp_i32_idx", _pack_bits(qv, bits), idx2.astype(np.int32), sc, _pack_bits(zq, bits),
            bits=bits, block_size=16, quantize_axis=1)
    qv = ints(r, 0, 15, v, 40)  # 40 values: the last block is short
    gbq("u8_b4_short_block_f16", _pack_bits(qv, 4), np.array([5, 0], np.int64),
        unif(r, 0.01, 0.1, v, 3, dtype=np.float16), out_t=F16, bits=4, block_size=16)
    for dt, dn in [(i4, "i4"), (u4, "u4")]:
        qv = q(r, dt, v, d)
        sc = unif(r, 0.01, 0.1, v, 3)
        gbq(f"{dn}_no_zp", qv, idx2, sc, block_size=16, quantize_axis=1)
        gbq(f"{dn}_zp", qv, idx2.astype(np.int32), sc, q(r, dt, v, 3), block_size=16, quantize_axis=-1)
    # int4 data allows any axes: gather along 1, quantized along 0
    gbq("i4_gather1_quant0", q(r, i4, 32, 5), np.array([4, 0, -2], np.int64), unif(r, 0.01, 0.1, 2, 5),
        q(r, i4, 2, 5), gather_axis=1, quantize_axis=0, block_size=16)
    # out-of-range indices give zeros (onnxruntime 1.32); an infinite scale +-inf or NaN
    sc = unif(r, 0.01, 0.1, v, 3)
    sc[2, 1] = np.inf
    sc[3, 0] = np.nan
    gbq("u4_out_of_range_and_inf", q(r, u4, v, d), np.array([2, 7, -8, 3, 100], np.int64), sc,
        q(r, u4, v, 3), block_size=16)


_quant()


# --------------------------------------------------------------------------- com.microsoft MoE
def _moe():
    """com.microsoft MoE as onnxruntime's CPU kernel takes it: interleaved SwiGLU experts
    (swiglu_fusion = 1), fc1 [E, 2*I, H] (gate row 2i, up row 2i+1), fc2 [E, H, I]."""
    op = "MoE"

    def moe(name, *, T=6, H=8, I=4, E=4, k=2, dtype=np.float32, three_d=False, bias=False,
            logits=None, x=None, **attrs):
        r = rng_for(op, name)
        x = randn(r, T, H, dtype=dtype) if x is None else x.astype(dtype)
        if three_d:
            x = x.reshape(2, T // 2, H)
        lg = randn(r, T, E, dtype=dtype) if logits is None else logits.astype(dtype)
        ins = [inp("input", x), inp("router_probs", lg),
               init("fc1", randn(r, E, 2 * I, H, dtype=dtype, scale=0.5)),
               init("fc1_bias", randn(r, E, 2 * I, dtype=dtype, scale=0.1)) if bias else None,
               init("fc2", randn(r, E, H, I, dtype=dtype, scale=0.5))]
        if bias:
            ins.append(init("fc2_bias", randn(r, E, H, dtype=dtype, scale=0.1)))
        out = F16 if dtype == np.float16 else F32
        attrs = {"activation_type": "swiglu", "swiglu_fusion": 1, **attrs}
        add(op, name, ins, [("y", out)], domain=MS, k=k, **attrs)

    moe("top2_normalized", normalize_routing_weights=1)
    moe("top2_unnormalized", normalize_routing_weights=0)
    moe("top1", k=1, normalize_routing_weights=1)
    moe("top_all", k=4, normalize_routing_weights=0)
    moe("three_d_input", three_d=True, normalize_routing_weights=1)
    moe("many_experts", E=16, k=4, T=5, normalize_routing_weights=1)
    moe("biases_alpha_beta_limit", bias=True, normalize_routing_weights=0,
        activation_alpha=1.702, activation_beta=1.0, swiglu_limit=0.8)
    moe("f16_normalized", dtype=np.float16, normalize_routing_weights=1)
    moe("f16_unnormalized_bias", dtype=np.float16, bias=True, normalize_routing_weights=0)
    # equal probabilities: onnxruntime picks the higher expert index first
    ties = np.zeros((6, 4), np.float32)
    ties[1] = [1, 1, 1, 0]
    ties[2] = [0, 2, 2, 2]
    ties[3] = [5, 0, 5, 0]
    ties[4] = [3, 3, 3, 3]
    moe("tied_logits", logits=ties, normalize_routing_weights=1)
    moe("tied_logits_top1", logits=ties, k=1, normalize_routing_weights=0)
    # a NaN or +inf logit, or all -inf: every probability NaN, the token's output 0; a -inf
    # logit among finite ones: probability 0; a non-finite input: NaN/inf through the experts
    r = rng_for(op, "special")
    lg = randn(r, 6, 4)
    lg[0, 1] = np.nan
    lg[1, 2] = np.inf
    lg[2, 0] = -np.inf
    lg[3, :] = -np.inf
    lg[5, 0] = np.nan
    x = randn(r, 6, 8)
    x[4, 3] = np.inf
    moe("nan_inf_normalized", logits=lg, x=x, normalize_routing_weights=1)
    moe("nan_inf_unnormalized", logits=lg, x=x, normalize_routing_weights=0)
    # a probability that underflows to 0 within the top k: skipped
    lg = randn(r, 6, 4)
    lg[:, 1] = 200.0
    moe("underflowed_pick", logits=lg, x=x, k=2, normalize_routing_weights=1)


_moe()


# --------------------------------------------------------------------------- com.microsoft QMoE
def _qmoe():
    """com.microsoft QMoE with integer experts as onnxruntime's CPU kernel takes it: MoE's
    interleaved SwiGLU layout, fc1 uint8 [E, 2*I, H*bits/8], fc2 uint8 [E, H, I*bits/8] (each
    row packed lowest bits first), scales [E, N] or, with block_size, [E, N, K/block_size],
    optional packed zero points (absent: 2^(bits-1)); accuracy_level 0. Every case
    renormalises the top-k weights (onnxruntime 1.32's CPU QMoE does so whatever
    normalize_routing_weights says; the interpreter refuses 0), and 8-bit experts are
    column-wise (block-wise, the kernel quantizes the activations to int8)."""
    op = "QMoE"

    def qmoe(name, *, T=6, H=32, I=16, E=4, k=2, bits=4, block=16, zp=False, bias=False,
             dtype=np.float32, three_d=False, logits=None, x=None, s1=None, **attrs):
        r = rng_for(op, name)
        x = randn(r, T, H, dtype=dtype) if x is None else x.astype(dtype)
        if three_d:
            x = x.reshape(2, T // 2, H)
        lg = randn(r, T, E, dtype=dtype) if logits is None else logits.astype(dtype)
        top = (1 << bits) - 1

        def proj(n, kk, scales=None):
            q = ints(r, 0, top, E, n, kk)
            groups = kk // block if block else None
            shape = (E, n, groups) if block else (E, n)
            sc = unif(r, 0.01, 0.1, *shape, dtype=dtype) if scales is None else scales.astype(dtype)
            z = None
            if zp:
                if block:
                    per = 8 // bits
                    zv = ints(r, 0, top, E, n, -(-groups // per) * per)
                    z = _pack_bits(zv, bits)
                else:
                    zv = ints(r, 0, top, E, n)
                    z = _pack_bits(zv, bits)
            return _pack_bits(q, bits), sc, z

        w1, sc1, z1 = proj(2 * I, H, s1)
        w2, sc2, z2 = proj(H, I)
        ins = [inp("input", x), inp("router_probs", lg), init("fc1", w1), init("fc1_scales", sc1),
               init("fc1_bias", randn(r, E, 2 * I, dtype=dtype, scale=0.1)) if bias else None,
               init("fc2", w2), init("fc2_scales", sc2),
               init("fc2_bias", randn(r, E, H, dtype=dtype, scale=0.1)) if bias else None]
        if zp:
            ins += [None, None, None, init("fc1_zp", z1), init("fc2_zp", z2)]
        out = F16 if dtype == np.float16 else F32
        attrs = {"activation_type": "swiglu", "swiglu_fusion": 1, "expert_weight_bits": bits,
                 "accuracy_level": 0, **attrs}
        if block:
            attrs["block_size"] = block
        add(op, name, ins, [("y", out)], domain=MS, k=k, **attrs)

    qmoe("b4_block16_top2", normalize_routing_weights=1)
    qmoe("b4_block32_top1", block=32, H=64, I=32, k=1, normalize_routing_weights=1)
    qmoe("b4_columnwise", block=None, normalize_routing_weights=1)
    qmoe("b4_block16_zero_points", zp=True, normalize_routing_weights=1)
    qmoe("b4_columnwise_zero_points", block=None, zp=True, normalize_routing_weights=1)
    qmoe("b8_columnwise_bias", bits=8, block=None, bias=True, normalize_routing_weights=1)
    qmoe("b8_columnwise_zero_points", bits=8, block=None, zp=True, normalize_routing_weights=1)
    qmoe("b4_three_d_alpha_beta_limit", three_d=True, normalize_routing_weights=1,
         activation_alpha=1.702, activation_beta=1.0, swiglu_limit=0.8)
    qmoe("b4_f16_block16", dtype=np.float16, normalize_routing_weights=1)
    qmoe("b4_f16_columnwise_bias", dtype=np.float16, block=None, bias=True, normalize_routing_weights=1)
    # every expert picked: the renormalisation divides by 1
    qmoe("b4_top_all", k=4, normalize_routing_weights=1)
    # a NaN or +inf logit: the token's output 0; an infinite input and an infinite or NaN
    # scale: NaN / inf through the picked experts
    r = rng_for(op, "special")
    lg = randn(r, 6, 4)
    lg[0, 1] = np.nan
    lg[1, 2] = np.inf
    lg[3, :] = -np.inf
    x = randn(r, 6, 32)
    x[4, 3] = np.inf
    s1 = unif(r, 0.01, 0.1, 4, 32, 2)
    s1[2, 5, 1] = np.inf
    s1[1, 0, 0] = np.nan
    qmoe("b4_nan_inf", logits=lg, x=x, s1=s1, normalize_routing_weights=1)


_qmoe()


# --------------------------------------------------------------------------- math (src/ops/math.rs)
def _math():
    """The elementwise math no decoder build emits: each op on random values in its domain and
    on IEEE special values (NaN, ±inf, ±0), integer ops on negative operands and edge values."""
    nan, inf = np.nan, np.inf
    specials = [nan, inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e30]
    domains = {
        "Acos": (-1, 1), "Asin": (-1, 1), "Atan": (-10, 10), "Acosh": (1, 10), "Asinh": (-10, 10),
        "Atanh": (-0.99, 0.99), "Cosh": (-5, 5), "Sinh": (-5, 5), "Tan": (-1.5, 1.5),
        "Ceil": (-20, 20), "Sign": (-3, 3), "Softsign": (-10, 10), "Softplus": (-30, 30),
        "Mish": (-10, 10), "HardSwish": (-5, 5), "Elu": (-5, 5), "Celu": (-5, 5), "Selu": (-5, 5),
        "LeakyRelu": (-5, 5), "ThresholdedRelu": (-3, 3), "HardSigmoid": (-5, 5),
    }
    attrs = {"Elu": {"alpha": 0.7}, "Celu": {"alpha": 1.5}, "Selu": {"alpha": 1.2, "gamma": 0.9},
             "LeakyRelu": {"alpha": 0.2}, "ThresholdedRelu": {"alpha": 0.4},
             "HardSigmoid": {"alpha": 0.3, "beta": 0.4}}
    for op, (lo, hi) in domains.items():
        r = rng_for(op, "f32")
        add(op, "f32", [unif(r, lo, hi, 3, 4)], [("y", F32)])
        add(op, "special_values", [np.array(specials, np.float32)], [("y", F32)])
        if op in attrs:
            r = rng_for(op, "f32_attrs")
            add(op, "f32_attrs", [unif(r, lo, hi, 3, 4)], [("y", F32)], **attrs[op])
    r = rng_for("Elu", "f16")
    add("Elu", "f16", [unif(r, -5, 5, 4, 8, dtype=np.float16)], [("y", F16)])
    # Round: halves go to the even neighbour
    add("Round", "halves", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6, nan, inf, -0.0],
                                     np.float32)], [("y", F32)])
    r = rng_for("Sign", "i64")
    add("Sign", "i64", [ints(r, -5, 5, 3, 4)], [("y", I64)])
    add("IsInf", "both", [np.array(specials, np.float32)], [("y", BOOL)])
    add("IsInf", "positive_only", [np.array(specials, np.float32)], [("y", BOOL)], detect_negative=0)
    add("IsInf", "negative_only", [np.array(specials, np.float32)], [("y", BOOL)], detect_positive=0)
    # Mod: Python's sign (fmod 0) on integers, C's fmod (fmod 1) on integers and floats
    r = rng_for("Mod", "i64_python")
    add("Mod", "i64_python", [ints(r, -20, 20, 3, 4), nonzero_ints(r, -7, 7, 4)], [("y", I64)])
    r = rng_for("Mod", "i32_fmod")
    add("Mod", "i32_fmod", [ints(r, -20, 20, 3, 4, dtype=np.int32), nonzero_ints(r, -7, 7, 4).astype(np.int32)],
        [("y", I32)], fmod=1)
    r = rng_for("Mod", "f32_fmod")
    add("Mod", "f32_fmod", [randn(r, 3, 4, scale=5.0), unif(r, 0.5, 3, 4) * np.array([1, -1, 1, -1], np.float32)],
        [("y", F32)], fmod=1)
    add("Mod", "f32_fmod_special", [np.array([5.0, -5.0, inf, nan, 3.0, -0.0], np.float32),
                                    np.array([0.0, inf, 2.0, 2.0, -inf, 3.0], np.float32)], [("y", F32)], fmod=1)
    # the bitwise ops: int32 with negative values, uint8 and int8 edges
    for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]:
        r = rng_for(op, "i32")
        add(op, "i32", [ints(r, -1000, 1000, 3, 4, dtype=np.int32), ints(r, -1000, 1000, 4, dtype=np.int32)],
            [("y", I32)])
        add(op, "u8", [np.array([0, 255, 170, 15], np.uint8), np.array([255, 255, 85, 240], np.uint8)],
            [("y", TensorProto.UINT8)])
    add("BitwiseNot", "i8", [np.array([0, -1, 127, -128, 5], np.int8)], [("y", TensorProto.INT8)])
    add("BitwiseNot", "u8", [np.array([0, 255, 170, 15], np.uint8)], [("y", TensorProto.UINT8)])
    for direction in ["LEFT", "RIGHT"]:
        add("BitShift", f"u8_{direction.lower()}", [np.array([1, 255, 16, 200, 7], np.uint8),
                                                   np.array([1, 3, 4, 7, 0], np.uint8)],
            [("y", TensorProto.UINT8)], direction=direction)
    # Xor on booleans, broadcast
    add("Xor", "bcast", [np.array([[True, False], [False, True]]), np.array([True, False])], [("y", BOOL)])


_math()


# ------------------------------------------------- more reductions, picks (src/ops/reduce.rs, arg.rs)
def _reduce_more():
    nan, inf = np.nan, np.inf
    for op in ["ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd", "ReduceSumSquare"]:
        r = rng_for(op, "data")
        x = unif(r, 0.1, 2, 3, 4, 5) if op == "ReduceLogSum" else randn(r, 3, 4, 5)
        _red(op, "axis1_keepdims", x, [1])
        _red(op, "axes_neg1_0_no_keepdims", x, [-1, 0], keepdims=0)
        _red(op, "all_keepdims", x, None)
        _red(op, "special_rows", np.array([[nan, 1, 2], [inf, 1, 2], [-inf, 1, 2], [-inf, -inf, -inf],
                                           [0, 0, 0]], np.float32), [1])
        if op in ("ReduceL1", "ReduceProd", "ReduceSumSquare"):
            _red(op, "i64_axis0", ints(r, -5, 5, 3, 4), [0], dt=I64)
    r = rng_for("LogSoftmax", "data")
    add("LogSoftmax", "default_axis", [randn(r, 2, 3, 5)], [("y", F32)])
    add("LogSoftmax", "axis0_large", [randn(r, 4, 3, scale=50.0)], [("y", F32)], axis=0)
    add("LogSoftmax", "nan_inf_rows", [np.array([[nan, 1, 2, 3], [-inf, 1, 2, 3], [-inf] * 4, [1, inf, 2, 3]],
                                                np.float32)], [("y", F32)])
    for op in ["ArgMax", "ArgMin"]:
        r = rng_for(op, "data")
        add(op, "axis1_keepdims", [randn(r, 3, 4, 5)], [("y", I64)], axis=1)
        add(op, "axis_neg1_no_keepdims", [randn(r, 3, 4, 5)], [("y", I64)], axis=-1, keepdims=0)
        ties = ints(r, 0, 2, 4, 6).astype(np.float32)
        add(op, "ties_first", [ties], [("y", I64)], axis=1)
        add(op, "ties_last", [ties], [("y", I64)], axis=1, select_last_index=1)
        add(op, "i64", [ints(r, -9, 9, 3, 5)], [("y", I64)], axis=0)
        add(op, "nan_inf_rows", [np.array([[1, nan, 2], [nan, nan, 1], [-inf, 1, inf], [3, 3, 3]], np.float32)],
            [("y", I64)], axis=1)
    r = rng_for("Hardmax", "data")
    add("Hardmax", "default_axis", [randn(r, 2, 3, 5)], [("y", F32)])
    add("Hardmax", "ties_axis0", [ints(r, 0, 1, 4, 3).astype(np.float32)], [("y", F32)], axis=0)
    r = rng_for("Trilu", "data")
    x = randn(r, 2, 4, 5)
    add("Trilu", "upper", [inp("x", x)], [("y", F32)])
    add("Trilu", "lower_k1", [inp("x", x), init("k", np.array(1, np.int64))], [("y", F32)], upper=0)
    add("Trilu", "upper_k_neg2", [inp("x", x), init("k", np.array(-2, np.int64))], [("y", F32)])
    add("Trilu", "i64_lower", [inp("x", ints(r, -9, 9, 5, 3))], [("y", I64)], upper=0)


_reduce_more()


def _cumprod():
    """CumProd (opset 26 in onnxruntime 1.32)."""
    r = rng_for("CumProd", "data")
    x = unif(r, 0.5, 1.5, 3, 4, 5) * np.where(r.random((3, 4, 5)) < 0.3, -1, 1).astype(np.float32)
    for name, axis, kw in [("f32_axis0", 0, {}), ("f32_axis_neg1_exclusive", -1, {"exclusive": 1}),
                           ("f32_axis1_reverse", 1, {"reverse": 1})]:
        add("CumProd", name, [inp("x", x), init("axis", np.array(axis, np.int64))], [("y", F32)], opset=26, **kw)
    add("CumProd", "i64_reverse_exclusive", [inp("x", ints(r, -3, 3, 2, 5)), init("axis", np.array(1, np.int64))],
        [("y", I64)], opset=26, reverse=1, exclusive=1)
    add("CumProd", "special", [inp("x", np.array([2, np.inf, 0, np.nan, -1], np.float32)),
                               init("axis", np.array(0, np.int64))], [("y", F32)], opset=26)


_cumprod()


def _losses_and_elements():
    """The losses (src/ops/loss.rs), GatherElements and ScatterElements, ScatterND's reductions."""
    r = rng_for("NegativeLogLikelihoodLoss", "data")
    x = randn(r, 3, 5, 2)
    t = ints(r, 0, 4, 3, 2)
    t[1, 0] = -1
    w = unif(r, 0.2, 2.0, 5)
    for reduction in ["none", "sum", "mean"]:
        add("NegativeLogLikelihoodLoss", f"{reduction}_weights_ignore", [inp("x", x), inp("t", t), inp("w", w)],
            [("y", F32)], reduction=reduction, ignore_index=-1)
        add("SoftmaxCrossEntropyLoss", f"{reduction}_weights_ignore", [inp("x", x), inp("t", t), inp("w", w)],
            [("y", F32), ("logp", F32)], reduction=reduction, ignore_index=-1)
    add("NegativeLogLikelihoodLoss", "nc_mean", [inp("x", randn(r, 4, 3)), inp("t", ints(r, 0, 2, 4))], [("y", F32)])
    add("SoftmaxCrossEntropyLoss", "nc_mean_nan", [inp("x", np.array([[1, np.nan, 2], [0, 1, 2]], np.float32)),
                                                   inp("t", np.array([0, 2]))], [("y", F32), ("logp", F32)])
    r = rng_for("GatherElements", "data")
    add("GatherElements", "axis1", [inp("x", randn(r, 3, 4)), inp("i", ints(r, -4, 3, 3, 2))], [("y", F32)], axis=1)
    add("GatherElements", "axis0_i64", [inp("x", ints(r, -9, 9, 3, 4)), inp("i", ints(r, 0, 2, 2, 4))], [("y", I64)])
    r = rng_for("ScatterElements", "data")
    for reduction in ["none", "add", "mul", "max", "min"]:
        idx = np.array([[0, 2], [1, 3], [3, 0]]) if reduction == "none" else ints(r, -4, 3, 3, 2)
        add("ScatterElements", reduction, [inp("x", randn(r, 3, 4)), inp("i", idx), inp("u", randn(r, 3, 2))],
            [("y", F32)], axis=1, reduction=reduction)
    r = rng_for("ScatterND", "reductions")
    for reduction in ["add", "mul", "max", "min"]:
        add("ScatterND", f"reduction_{reduction}", [inp("x", randn(r, 4, 3)), inp("i", np.array([[1], [3], [1]])),
                                                    inp("u", randn(r, 3, 3))], [("y", F32)], reduction=reduction)


_losses_and_elements()


def _arrange_and_more():
    """Clip, Sum, Mean, Swish, Shrink, PRelu, Dropout (src/ops/math.rs); Pad, DepthToSpace,
    SpaceToDepth, Compress, OneHot, EyeLike (src/ops/shape)."""
    nan, inf = np.nan, np.inf
    r = rng_for("Clip", "data")
    sp = np.array([nan, inf, -inf, -3, 0.2, 5], np.float32)
    add("Clip", "both", [inp("x", randn(r, 3, 4, scale=3.0)), init("lo", np.array(-1, np.float32)),
                         init("hi", np.array(1.5, np.float32))], [("y", F32)])
    add("Clip", "min_only_special", [inp("x", sp), init("lo", np.array(-1, np.float32))], [("y", F32)])
    add("Clip", "max_only", [inp("x", randn(r, 3, 4)), None, init("hi", np.array(0.1, np.float32))], [("y", F32)])
    add("Clip", "i64", [inp("x", ints(r, -9, 9, 3, 4)), init("lo", np.array(-2)), init("hi", np.array(3))], [("y", I64)])
    add("Clip", "no_bounds", [inp("x", sp)], [("y", F32)])
    add("Clip", "min_above_max", [inp("x", sp), init("lo", np.array(2, np.float32)), init("hi", np.array(1, np.float32))],
        [("y", F32)])
    add("Clip", "no_bounds_f16", [inp("x", sp.astype(np.float16))], [("y", F16)])
    for op in ["Sum", "Mean"]:
        r = rng_for(op, "data")
        add(op, "three_bcast", [inp("a", randn(r, 3, 4)), inp("b", randn(r, 4)), inp("c", randn(r, 3, 1))], [("y", F32)])
        add(op, "one", [inp("a", sp)], [("y", F32)])
    r = rng_for("Swish", "data")
    add("Swish", "alpha", [inp("x", np.concatenate([randn(r, 8, scale=3.0), sp]))], [("y", F32)], alpha=0.7, opset=24)
    add("Shrink", "lambd_bias", [inp("x", np.concatenate([randn(r, 8), sp]))], [("y", F32)], lambd=0.4, bias=0.2)
    add("PRelu", "channel_slope", [inp("x", randn(r, 2, 3, 4)), inp("s", randn(r, 3, 1))], [("y", F32)])
    add("PRelu", "special", [inp("x", sp), inp("s", np.array([0.5], np.float32))], [("y", F32)])
    add("Dropout", "inference", [inp("x", randn(r, 3, 4))], [("y", F32), ("mask", BOOL)])
    add("Dropout", "ratio_not_training", [inp("x", randn(r, 3, 4)), init("ratio", np.array(0.5, np.float32))],
        [("y", F32), ("mask", BOOL)])
    x = randn(r, 2, 3, 4)
    for mode in ["constant", "reflect", "edge", "wrap"]:
        add("Pad", mode, [inp("x", x), init("pads", np.array([0, 1, 2, 0, 2, 1]))], [("y", F32)], mode=mode)
    add("Pad", "constant_value_axes_crop", [inp("x", x), init("pads", np.array([2, -1, 1, 1])),
                                            init("v", np.array(7.5, np.float32)), init("axes", np.array([-1, 1]))],
        [("y", F32)])
    add("Pad", "i64", [inp("x", ints(r, -9, 9, 3, 3)), init("pads", np.array([1, 0, 0, 2]))], [("y", I64)])
    y = randn(r, 2, 8, 3, 2)
    add("DepthToSpace", "dcr", [inp("x", y)], [("y", F32)], blocksize=2)
    add("DepthToSpace", "crd", [inp("x", y)], [("y", F32)], blocksize=2, mode="CRD")
    add("SpaceToDepth", "dcr", [inp("x", randn(r, 2, 3, 4, 6))], [("y", F32)], blocksize=2)
    add("Compress", "axis1", [inp("x", randn(r, 3, 4)), inp("c", np.array([True, False, True]))], [("y", F32)], axis=1)
    add("Compress", "flat", [inp("x", ints(r, -9, 9, 3, 4)), inp("c", np.array([False, True, True, False, True]))],
        [("y", I64)])
    add("OneHot", "axis1_negative_indices", [inp("i", np.array([[0, -1], [2, 5]])), init("d", np.array(4)),
                                             init("v", np.array([0.5, 2.0], np.float32))], [("y", F32)], axis=1)
    add("OneHot", "default_axis", [inp("i", np.array([1, 3, 0])), init("d", np.array([4])),
                                   init("v", np.array([0, 1]))], [("y", I64)])
    add("EyeLike", "k1_int", [inp("x", randn(r, 3, 5))], [("y", I64)], k=1, dtype=TensorProto.INT64)
    add("EyeLike", "k_neg1", [inp("x", randn(r, 4, 3))], [("y", F32)], k=-1)


_arrange_and_more()


def _small_ints():
    """16-bit and unsigned 32-bit integers: arithmetic wraps, casts truncate, comparisons and
    extremes use the type's range."""
    I16, U16, U32 = TensorProto.INT16, TensorProto.UINT16, TensorProto.UINT32
    r = rng_for("small_ints", "data")
    a16, b16 = ints(r, -30000, 30000, 3, 4, dtype=np.int16), ints(r, -30000, 30000, 4, dtype=np.int16)
    u16 = np.array([0, 1, 65535, 40000], np.uint16)
    u32 = np.array([0, 1, 4294967295, 3000000000], np.uint32)
    add("Add", "i16_wraps", [inp("a", a16), inp("b", b16)], [("y", I16)])
    add("Mul", "u16_wraps", [inp("a", u16), inp("b", np.array([3, 7, 2, 5], np.uint16))], [("y", U16)])
    add("Sub", "u32_wraps", [inp("a", u32), inp("b", np.array([1, 2, 3, 4], np.uint32))], [("y", U32)])
    add("Div", "u32", [inp("a", u32), inp("b", np.array([1, 2, 3, 7], np.uint32))], [("y", U32)])
    add("Max", "u32", [inp("a", u32), inp("b", np.array([5, 0, 7, 4000000000], np.uint32))], [("y", U32)])
    add("Less", "u16", [inp("a", u16), inp("b", np.array([1, 0, 65534, 40000], np.uint16))], [("y", BOOL)])
    add("Cast", "f32_to_i16", [inp("x", np.array([1.7, -2.9, 300.5, -32768.0], np.float32))], [("y", I16)], to=I16)
    add("Cast", "f32_to_u32", [inp("x", np.array([1.7, 3e9, 12345.9, 0.0], np.float32))], [("y", U32)], to=U32)
    add("Cast", "u32_to_f32", [inp("x", u32)], [("y", F32)], to=F32)
    add("Cast", "i16_to_u16", [inp("x", a16)], [("y", U16)], to=U16)
    add("BitShift", "u16_left", [inp("a", u16), inp("b", np.array([1, 15, 1, 0], np.uint16))], [("y", U16)],
        direction="LEFT")
    add("BitShift", "u32_right", [inp("a", u32), inp("b", np.array([1, 31, 4, 0], np.uint32))], [("y", U32)],
        direction="RIGHT")
    add("Mod", "u16", [inp("a", u16), inp("b", np.array([3, 7, 2, 65535], np.uint16))], [("y", U16)])


_small_ints()


def _conv_pool():
    """Conv and the pools (src/ops/conv.rs): 1-D to 3-D, groups, strides, dilations, pads and
    auto_pad, ceil_mode, count_include_pad, MaxPool's indices."""
    nan, inf = np.nan, np.inf
    r = rng_for("Conv", "data")
    x2 = randn(r, 2, 4, 6, 5)
    add("Conv", "2d_bias_pads_strides", [inp("x", x2), init("w", randn(r, 6, 4, 3, 3)), init("b", randn(r, 6))],
        [("y", F32)], pads=[1, 0, 1, 2], strides=[2, 1])
    add("Conv", "2d_groups_dilations", [inp("x", x2), init("w", randn(r, 4, 2, 2, 2))], [("y", F32)], group=2,
        dilations=[2, 1])
    add("Conv", "1d_depthwise_same_upper", [inp("x", randn(r, 1, 3, 7)), init("w", randn(r, 3, 1, 3))], [("y", F32)],
        group=3, auto_pad="SAME_UPPER", strides=[2])
    add("Conv", "1d_same_lower", [inp("x", randn(r, 1, 2, 6)), init("w", randn(r, 2, 2, 4))], [("y", F32)],
        auto_pad="SAME_LOWER")
    add("Conv", "3d", [inp("x", randn(r, 1, 2, 4, 3, 3)), init("w", randn(r, 2, 2, 2, 2, 2))], [("y", F32)])
    xs = randn(r, 1, 1, 4, 4)
    xs[0, 0, 1, 2], xs[0, 0, 3, 0] = nan, inf
    add("Conv", "special", [inp("x", xs), init("w", randn(r, 1, 1, 2, 2))], [("y", F32)])
    add("Conv", "f16", [inp("x", randn(r, 1, 2, 5, 5, dtype=np.float16)), init("w", randn(r, 3, 2, 3, 3, dtype=np.float16))],
        [("y", F16)])
    r = rng_for("pools", "data")
    x = randn(r, 2, 3, 7, 6)
    for op in ["MaxPool", "AveragePool", "LpPool"]:
        add(op, "2d_pads_strides", [inp("x", x)], [("y", F32)], kernel_shape=[3, 2], pads=[1, 1, 1, 0], strides=[2, 2])
        add(op, "1d_same_upper", [inp("x", randn(r, 1, 2, 9))], [("y", F32)], kernel_shape=[4], auto_pad="SAME_UPPER",
            strides=[2])
    add("MaxPool", "ceil_dilations", [inp("x", x)], [("y", F32)], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
        dilations=[2, 1])
    add("MaxPool", "indices", [inp("x", x)], [("y", F32), ("i", I64)], kernel_shape=[2, 3], strides=[1, 2])
    add("MaxPool", "indices_column_major", [inp("x", x)], [("y", F32), ("i", I64)], kernel_shape=[2, 2],
        storage_order=1)
    add("MaxPool", "u8", [inp("x", ints(r, 0, 255, 1, 2, 5, 5).astype(np.uint8))], [("y", TensorProto.UINT8)],
        kernel_shape=[2, 2])
    xs = x.copy()
    xs[0, 0, 0, :2] = nan
    xs[1, 2, 3, 3] = inf
    add("MaxPool", "special", [inp("x", xs)], [("y", F32)], kernel_shape=[2, 2])
    add("AveragePool", "ceil_count_include_pad", [inp("x", x)], [("y", F32)], kernel_shape=[3, 3], strides=[2, 2],
        pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1)
    add("AveragePool", "3d", [inp("x", randn(r, 1, 2, 4, 4, 3))], [("y", F32)], kernel_shape=[2, 2, 2])
    add("LpPool", "p1", [inp("x", x)], [("y", F32)], kernel_shape=[2, 2], p=1)
    add("GlobalMaxPool", "2d", [inp("x", x)], [("y", F32)])
    add("GlobalMaxPool", "special", [inp("x", xs)], [("y", F32)])
    add("GlobalAveragePool", "3d", [inp("x", randn(r, 2, 3, 2, 3, 4))], [("y", F32)])


_conv_pool()


def _resize():
    """Resize (src/ops/resize.rs): each mode, coordinate transformation, antialias, axes."""
    r = rng_for("Resize", "data")
    x = randn(r, 1, 2, 4, 5)
    empty = init("roi", np.array([], np.float32))

    def rs(name, scales=None, sizes=None, roi=None, dt=F32, data=x, **attrs):
        ins = [inp("x", data), roi if roi is not None else empty]
        ins.append(init("scales", np.array(scales, np.float32)) if scales is not None else None)
        if sizes is not None:
            ins.append(init("sizes", np.array(sizes, np.int64)))
        add("Resize", name, ins, [("y", dt)], **attrs)

    rs("nearest_up", scales=[1, 1, 2, 1.5])
    rs("nearest_down_ceil_asymmetric", scales=[1, 1, 0.6, 0.5], nearest_mode="ceil",
       coordinate_transformation_mode="asymmetric")
    rs("linear_sizes_half_pixel", sizes=[1, 2, 7, 3], mode="linear")
    rs("linear_align_corners", scales=[1, 1, 1.5, 2], mode="linear", coordinate_transformation_mode="align_corners")
    rs("linear_pytorch_half_pixel_down", sizes=[1, 2, 3, 1], mode="linear",
       coordinate_transformation_mode="pytorch_half_pixel")
    rs("cubic_up", scales=[1, 1, 1.7, 1.3], mode="cubic")
    rs("cubic_exclude_outside_a", scales=[1, 1, 2, 2], mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5)
    rs("linear_antialias_down", sizes=[1, 2, 2, 3], mode="linear", antialias=1)
    rs("cubic_antialias_down", scales=[1, 1, 0.5, 0.6], mode="cubic", antialias=1)
    rs("tf_crop_and_resize", sizes=[1, 2, 3, 3], mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
       roi=init("roi", np.array([0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3], np.float32)), extrapolation_value=7.0)
    rs("axes_not_larger", sizes=[6, 8], axes=[2, 3], keep_aspect_ratio_policy="not_larger", mode="linear")
    rs("half_pixel_symmetric", scales=[1, 1, 1.5, 0.7], mode="linear",
       coordinate_transformation_mode="half_pixel_symmetric")
    rs("u8_linear", scales=[1, 1, 2, 2], mode="linear", dt=TensorProto.UINT8,
       data=ints(r, 0, 255, 1, 1, 3, 3).astype(np.uint8))


_resize()


def _conv_transpose():
    """ConvTranspose (src/ops/conv.rs): strides, pads, dilations, groups, output_padding,
    output_shape, auto_pad, 1-D to 3-D."""
    r = rng_for("ConvTranspose", "data")
    x2 = randn(r, 2, 4, 3, 4)
    add("ConvTranspose", "2d_strides_pads_bias", [inp("x", x2), init("w", randn(r, 4, 3, 3, 3)), init("b", randn(r, 3))],
        [("y", F32)], strides=[2, 1], pads=[1, 0, 0, 1])
    add("ConvTranspose", "2d_groups_dilations_output_padding", [inp("x", x2), init("w", randn(r, 4, 1, 2, 2))],
        [("y", F32)], group=2, dilations=[2, 1], strides=[2, 2], output_padding=[1, 0])
    add("ConvTranspose", "1d_output_shape", [inp("x", randn(r, 1, 2, 5)), init("w", randn(r, 2, 3, 3))], [("y", F32)],
        strides=[2], output_shape=[12])
    add("ConvTranspose", "1d_same_upper", [inp("x", randn(r, 1, 2, 5)), init("w", randn(r, 2, 2, 4))], [("y", F32)],
        strides=[2], auto_pad="SAME_UPPER")
    add("ConvTranspose", "3d", [inp("x", randn(r, 1, 2, 2, 3, 2)), init("w", randn(r, 2, 2, 2, 2, 2))], [("y", F32)])
    xs = randn(r, 1, 1, 3, 3)
    xs[0, 0, 1, 1] = np.nan
    xs[0, 0, 2, 0] = np.inf
    add("ConvTranspose", "special", [inp("x", xs), init("w", randn(r, 1, 1, 2, 2))], [("y", F32)])


_conv_transpose()


def _channel_norms():
    """BatchNormalization, InstanceNormalization, GroupNormalization, LpNormalization, LRN
    (src/ops/channel_norm.rs)."""
    r = rng_for("channel_norms", "data")
    x = randn(r, 2, 4, 3, 5)
    c = lambda: randn(r, 4)
    add("BatchNormalization", "inference", [inp("x", x), init("s", c()), init("b", c()), init("m", c()),
                                            init("v", unif(r, 0.5, 2, 4))], [("y", F32)], epsilon=1e-3)
    add("InstanceNormalization", "eps", [inp("x", x), init("s", c()), init("b", c())], [("y", F32)], epsilon=1e-4)
    add("GroupNormalization", "two_groups", [inp("x", x), init("s", c()), init("b", c())], [("y", F32)],
        num_groups=2, opset=21)
    xs = x.copy()
    xs[0, 1, 0, 0] = np.nan
    xs[1, 3, 2, 4] = np.inf
    add("InstanceNormalization", "special", [inp("x", xs), init("s", c()), init("b", c())], [("y", F32)])
    add("LpNormalization", "l2_last", [inp("x", x)], [("y", F32)])
    add("LpNormalization", "l1_axis1_zero_line", [inp("x", np.concatenate([x, np.zeros((1, 4, 3, 5), np.float32)]))],
        [("y", F32)], axis=1, p=1)
    add("LRN", "size3", [inp("x", x)], [("y", F32)], size=3, alpha=0.01, beta=0.6, bias=1.5)
    add("LRN", "size5_default", [inp("x", x)], [("y", F32)], size=5)


_channel_norms()


def _quantize_linear():
    """QuantizeLinear (src/ops/quant.rs): per tensor, per axis, blocked; uint8, int8, int16,
    uint16; halves to even, saturation, NaN and infinities."""
    r = rng_for("QuantizeLinear", "data")
    x = randn(r, 3, 8, scale=20.0)
    x[0, :6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1e9]
    x[1, :3] = [-1e9, np.inf, -np.inf]
    add("QuantizeLinear", "u8_per_tensor", [inp("x", x), init("s", np.array(0.5, np.float32)),
                                            init("z", np.array(128, np.uint8))], [("y", TensorProto.UINT8)])
    add("QuantizeLinear", "u8_no_zero_point", [inp("x", x), init("s", np.array(1.0, np.float32))],
        [("y", TensorProto.UINT8)])
    add("QuantizeLinear", "i8_per_axis", [inp("x", x), init("s", unif(r, 0.1, 1, 8)),
                                          init("z", ints(r, -5, 5, 8).astype(np.int8))], [("y", TensorProto.INT8)])
    add("QuantizeLinear", "i16_blocked", [inp("x", x), init("s", unif(r, 0.01, 0.1, 3, 2)),
                                          init("z", ints(r, -9, 9, 3, 2).astype(np.int16))],
        [("y", TensorProto.INT16)], axis=1, block_size=4)
    add("QuantizeLinear", "u16_axis0", [inp("x", x), init("s", unif(r, 0.01, 0.1, 3)),
                                        init("z", np.array([0, 100, 65535], np.uint16))], [("y", TensorProto.UINT16)],
        axis=0)
    add("DequantizeLinear", "i16_per_axis", [inp("x", ints(r, -30000, 30000, 3, 4).astype(np.int16)),
                                             init("s", unif(r, 0.01, 0.1, 4)), init("z", ints(r, -9, 9, 4).astype(np.int16))],
        [("y", F32)])


_quantize_linear()


def _dynamic_quantize_linear():
    r = rng_for("DynamicQuantizeLinear", "data")
    outs = [("y", TensorProto.UINT8), ("s", F32), ("z", TensorProto.UINT8)]
    add("DynamicQuantizeLinear", "mixed_signs", [inp("x", randn(r, 3, 5, scale=4.0))], outs)
    add("DynamicQuantizeLinear", "positive", [inp("x", unif(r, 0.5, 9, 4, 4))], outs)
    add("DynamicQuantizeLinear", "zeros", [inp("x", np.zeros((2, 3), np.float32))], outs)


_dynamic_quantize_linear()


def _windows():
    """HannWindow, HammingWindow, BlackmanWindow (src/ops/shape/make.rs), periodic and
    symmetric, float and double."""
    for op in ["HannWindow", "HammingWindow", "BlackmanWindow"]:
        add(op, "periodic", [init("n", np.array(10, np.int64))], [("y", F32)])
        add(op, "symmetric_f64", [init("n", np.array(7, np.int32))], [("y", TensorProto.DOUBLE)], periodic=0,
            output_datatype=TensorProto.DOUBLE)


_windows()


def _control_flow():
    """If, Loop, Scan (src/ops/control.rs): subgraphs reading a graph input of the enclosing
    graph, a Loop that a condition stops before its trip count, Scan in reverse with an output
    axis, Scan-8's batched form; NaN and infinities pass through."""
    r = rng_for("control", "flow")
    x = randn(r, 2, 3)
    x[0, 0], x[1, 1], x[1, 2] = np.nan, np.inf, -np.inf
    vi = helper.make_tensor_value_info

    def captured(case):
        """`x` is a graph input the subgraphs read, not an input of the node."""
        kept = [n for n in case.node.input if n != "x"]
        del case.node.input[:]
        case.node.input.extend(kept)

    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x"], [out])], f"b_{op}", [], [vi(out, F32, [2, 3])])

    for cond in (True, False):
        captured(add("If", f"cond_{str(cond).lower()}", [inp("c", np.array(cond)), inp("x", x)], [("y", F32)],
                     then_branch=branch("Neg", "t"), else_branch=branch("Exp", "e")))

    body = helper.make_graph(
        [
            helper.make_node("Mul", ["v", "x"], ["v_out"]),
            helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2, np.int64))),
            helper.make_node("Less", ["i", "two"], ["go"]),
            helper.make_node("ReduceMax", ["v_out"], ["peak"], keepdims=0),
        ],
        "loop_body",
        [vi("i", I64, []), vi("c_in", BOOL, []), vi("v", F32, [2, 3])],
        [vi("go", BOOL, []), vi("v_out", F32, [2, 3]), vi("peak", F32, [])],
    )
    for trips in (1, 5):
        captured(add("Loop", f"until_false_trips{trips}",
                     [init("m", np.array(trips, np.int64)), inp("c", np.array(True)), inp("v0", randn(r, 2, 3)),
                      inp("x", x)],
                     [("v_final", F32), ("peaks", F32)], body=body))

    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s", "row"], ["s_out"]), helper.make_node("Mul", ["s_out", "row"], ["y_row"])],
        "scan_body",
        [vi("s", F32, [3]), vi("row", F32, [3])],
        [vi("s_out", F32, [3]), vi("y_row", F32, [3])],
    )
    add("Scan", "reverse_output_axis1", [inp("s0", randn(r, 3)), inp("x", x)], [("s_final", F32), ("ys", F32)],
        body=scan_body, num_scan_inputs=1, scan_input_directions=[1], scan_output_axes=[1])
    add("Scan", "input_axis1", [inp("s0", randn(r, 2)), inp("xt", randn(r, 2, 4))], [("s_final", F32), ("ys", F32)],
        body=helper.make_graph(
            [helper.make_node("Add", ["s", "col"], ["s_out"]), helper.make_node("Neg", ["col"], ["y_col"])],
            "scan_cols", [vi("s", F32, [2]), vi("col", F32, [2])], [vi("s_out", F32, [2]), vi("y_col", F32, [2])]),
        num_scan_inputs=1, scan_input_axes=[1])
    batched = np.stack([x, randn(r, 2, 3)])
    add("Scan", "opset8_batched", [None, inp("s0", randn(r, 2, 3)), inp("xs", batched)],
        [("s_final", F32), ("ys", F32)], opset=8, body=scan_body, num_scan_inputs=1, directions=[1])


_control_flow()


def _recurrent():
    """LinearAttention and CausalConvWithState (opset 27, src/ops/recurrent.rs), and
    com.microsoft::LinearAttention: every update rule, grouped KV heads, per-key-dim decay, a
    shared beta, with and without a past state, float16, and NaN / infinity in the inputs."""
    r = rng_for("recurrent", "ops")
    b, t, hq, hkv, dk, dv = 2, 3, 4, 2, 4, 3

    def qkv(dtype=np.float32):
        return (randn(r, b, t, hq * dk, dtype=dtype), randn(r, b, t, hkv * dk, dtype=dtype),
                randn(r, b, t, hkv * dv, dtype=dtype))

    outs = [("output", F32), ("present_state", F32)]
    for rule in ["linear", "gated", "delta", "gated_delta"]:
        q, k, v = qkv()
        ins = [inp("q", q), inp("k", k), inp("v", v), inp("past", randn(r, b, hkv, dk, dv))]
        ins.append(inp("decay", unif(r, -1.0, 0.0, b, t, hkv)) if rule.startswith("gated") else None)
        ins.append(inp("beta", unif(r, 0.0, 1.0, b, t, hkv)) if "delta" in rule else None)
        while ins[-1] is None:
            ins.pop()
        add("LinearAttention", rule, ins, outs, opset=27, q_num_heads=hq, kv_num_heads=hkv, update_rule=rule)
    q, k, v = qkv()
    add("LinearAttention", "per_key_decay_shared_beta_no_past_scale",
        [inp("q", q), inp("k", k), inp("v", v), None, inp("decay", unif(r, -1.0, 0.0, b, t, hkv * dk)),
         inp("beta", unif(r, 0.0, 1.0, b, t, 1))], outs, opset=27, q_num_heads=hq, kv_num_heads=hkv, scale=0.3)
    q, k, v = qkv()
    q[0, 1, 2], k[1, 0, 0], v[1, 2, 1] = np.nan, np.inf, -np.inf
    add("LinearAttention", "nan_inf", [inp("q", q), inp("k", k), inp("v", v)], outs, opset=27,
        q_num_heads=hq, kv_num_heads=hkv, update_rule="linear")
    q, k, v = qkv(np.float16)
    add("LinearAttention", "float16",
        [inp("q", q), inp("k", k), inp("v", v), inp("past", randn(r, b, hkv, dk, dv, dtype=np.float16)),
         inp("decay", unif(r, -1.0, 0.0, b, t, hkv).astype(np.float16)),
         inp("beta", unif(r, 0.0, 1.0, b, t, hkv).astype(np.float16))],
        [("output", F16), ("present_state", F16)], opset=27, q_num_heads=hq, kv_num_heads=hkv)

    # onnxruntime's contrib LinearAttention (its CPU kernel; the Gated DeltaNet fusion's target):
    # the same cases in the com.microsoft domain, NaN and infinities through the gated delta rule.
    for rule in ["linear", "gated", "delta", "gated_delta"]:
        q, k, v = qkv()
        ins = [inp("q", q), inp("k", k), inp("v", v), inp("past", randn(r, b, hkv, dk, dv))]
        ins.append(inp("decay", unif(r, -1.0, 0.0, b, t, hkv)) if rule.startswith("gated") else None)
        ins.append(inp("beta", unif(r, 0.0, 1.0, b, t, hkv)) if "delta" in rule else None)
        while ins[-1] is None:
            ins.pop()
        add("LinearAttention", f"ms_{rule}", ins, outs, domain=MS, q_num_heads=hq, kv_num_heads=hkv,
            update_rule=rule)
    q, k, v = qkv()
    add("LinearAttention", "ms_per_key_decay_shared_beta_no_past_scale",
        [inp("q", q), inp("k", k), inp("v", v), None, inp("decay", unif(r, -1.0, 0.0, b, t, hkv * dk)),
         inp("beta", unif(r, 0.0, 1.0, b, t, 1))], outs, domain=MS, q_num_heads=hq, kv_num_heads=hkv,
        scale=0.3)
    q, k, v = qkv()
    q[0, 1, 2], k[1, 0, 0], v[1, 2, 1] = np.nan, np.inf, -np.inf
    decay, beta = unif(r, -1.0, 0.0, b, t, hkv), unif(r, 0.0, 1.0, b, t, hkv)
    decay[0, 2, 1], beta[1, 1, 0] = -np.inf, np.nan
    add("LinearAttention", "ms_gated_delta_nan_inf",
        [inp("q", q), inp("k", k), inp("v", v), inp("past", randn(r, b, hkv, dk, dv)), inp("decay", decay),
         inp("beta", beta)], outs, domain=MS, q_num_heads=hq, kv_num_heads=hkv, scale=1.0)
    q, k, v = qkv(np.float16)
    add("LinearAttention", "ms_float16",
        [inp("q", q), inp("k", k), inp("v", v), inp("past", randn(r, b, hkv, dk, dv, dtype=np.float16)),
         inp("decay", unif(r, -1.0, 0.0, b, t, hkv).astype(np.float16)),
         inp("beta", unif(r, 0.0, 1.0, b, t, hkv).astype(np.float16))],
        [("output", F16), ("present_state", F16)], domain=MS, q_num_heads=hq, kv_num_heads=hkv)

    c, l, kk = 5, 4, 3
    conv_outs = [("output", F32), ("present_state", F32)]
    x = randn(r, b, c, l)
    x[0, 1, 2], x[1, 3, 0] = np.nan, np.inf
    add("CausalConvWithState", "silu_bias_past",
        [inp("x", x), init("w", randn(r, c, 1, kk)), init("bias", randn(r, c)), inp("past", randn(r, b, c, kk - 1))],
        conv_outs, opset=27, activation="silu")
    add("CausalConvWithState", "no_bias_no_past", [inp("x", randn(r, b, c, l)), init("w", randn(r, c, 1, kk))],
        conv_outs, opset=27)
    add("CausalConvWithState", "kernel_one_swish", [inp("x", randn(r, b, c, l)), init("w", randn(r, c, 1, 1))],
        conv_outs, opset=27, activation="swish")
    add("CausalConvWithState", "float16_past",
        [inp("x", randn(r, b, c, l, dtype=np.float16)), init("w", randn(r, c, 1, kk, dtype=np.float16)), None,
         inp("past", randn(r, b, c, kk - 1, dtype=np.float16))],
        [("output", F16), ("present_state", F16)], opset=27, activation="silu")


_recurrent()


def _more_ops():
    """ReverseSequence, NonZero, Scatter (src/ops/shape/arrange.rs, mod.rs), Det, MatMulInteger
    (src/ops/linalg.rs), MeanVarianceNormalization (src/ops/channel_norm.rs), NaN included."""
    r = rng_for("more", "ops")
    x = randn(r, 4, 3, 2)
    x[1, 0, 1] = np.nan
    add("ReverseSequence", "time_major", [inp("x", x), init("lens", np.array([4, 1, 2], np.int64))], [("y", F32)],
        batch_axis=1, time_axis=0)
    add("ReverseSequence", "batch_major_int", [inp("x", ints(r, -9, 9, 2, 5, 3)),
        init("lens", np.array([3, 5], np.int64))], [("y", I64)], batch_axis=0, time_axis=1)
    z = randn(r, 3, 4)
    z[r.random(z.shape) < 0.4] = 0
    z[0, 1] = np.nan
    add("NonZero", "float_nan", [inp("x", z)], [("y", I64)])
    add("NonZero", "bool_3d", [inp("x", r.random((2, 3, 2)) < 0.5)], [("y", I64)])
    add("Scatter", "axis1", [inp("data", randn(r, 3, 4)), init("idx", np.array([[1, 3], [0, 2], [3, 1]], np.int64)),
        inp("upd", randn(r, 3, 2))], [("y", F32)], opset=10, axis=1)
    m = randn(r, 2, 3, 3)
    m[1, 2, 2] = np.nan
    add("Det", "batched_nan", [inp("x", m)], [("y", F32)])
    add("Det", "singular", [inp("x", np.array([[1, 2], [2, 4]], np.float32))], [("y", F32)])
    add("MatMulInteger", "uint8_zero_points", [inp("a", ints(r, 0, 255, 3, 4).astype(np.uint8)),
        init("b", ints(r, 0, 255, 4, 2).astype(np.uint8)), init("za", np.array(12, np.uint8)),
        init("zb", np.array([3, 200], np.uint8))], [("y", TensorProto.INT32)])
    add("MatMulInteger", "int8_no_zero_points", [inp("a", ints(r, -128, 127, 2, 3).astype(np.int8)),
        init("b", ints(r, -128, 127, 3, 3).astype(np.int8))], [("y", TensorProto.INT32)])
    v = randn(r, 2, 3, 2, 2)
    v[0, 1, 0, 0] = np.nan
    add("MeanVarianceNormalization", "default_axes_nan", [inp("x", v)], [("y", F32)])
    add("MeanVarianceNormalization", "last_axis", [inp("x", randn(r, 3, 5))], [("y", F32)], axes=[1])


_more_ops()


def _rnn_layers():
    """RNN, GRU and LSTM (src/ops/rnn.rs): every direction, both layouts, sequence lengths
    with a zero-length sequence, initial states, biases, peepholes, linear_before_reset,
    input_forget, clip, activations with α/β, NaN and infinities."""
    r = rng_for("rnn", "layers")
    seq, batch, inp_w, hid = 4, 3, 5, 3
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}

    def layer(op, name, *, dirs=1, layout=0, lens=None, init_h=False, init_c=False, peep=False,
              bias=True, x=None, outs=None, **attrs):
        g = gates[op]
        xs = (batch, seq, inp_w) if layout else (seq, batch, inp_w)
        st = (batch, dirs, hid) if layout else (dirs, batch, hid)
        ins = [inp("x", randn(r, *xs) if x is None else x), init("w", randn(r, dirs, g * hid, inp_w, scale=0.5)),
               init("r", randn(r, dirs, g * hid, hid, scale=0.5))]
        ins.append(init("b", randn(r, dirs, 2 * g * hid, scale=0.5)) if bias else None)
        ins.append(init("lens", np.array(lens, np.int32)) if lens is not None else None)
        ins.append(inp("h0", randn(r, *st)) if init_h else None)
        if op == "LSTM":
            ins.append(inp("c0", randn(r, *st)) if init_c else None)
            ins.append(init("p", randn(r, dirs, 3 * hid, scale=0.5)) if peep else None)
        while ins[-1] is None:
            ins.pop()
        names = ["y", "y_h", "y_c"][: (3 if op == "LSTM" else 2)]
        add(op, name, ins, outs or [(n, F32) for n in names], hidden_size=hid, layout=layout,
            direction={1: "forward", 2: "bidirectional"}[dirs] if "direction" not in attrs else attrs.pop("direction"),
            **attrs)

    for op in ["RNN", "GRU", "LSTM"]:
        layer(op, "forward_defaults", bias=False)
        layer(op, "reverse_init", direction="reverse", init_h=True, init_c=op == "LSTM")
        layer(op, "bidirectional_lens", dirs=2, lens=[4, 2, 0], init_h=True)
        layer(op, "bidirectional_lens_init_c", dirs=2, lens=[1, 4, 3], init_h=True,
              init_c=op == "LSTM")
        layer(op, "clip", clip=0.4, init_h=True)
        x = randn(r, seq, batch, inp_w)
        x[2, 1, 0], x[0, 2, 4] = np.inf, -np.inf
        if op == "RNN":
            x[1, 0, 2] = np.nan
        # onnxruntime's GRU and LSTM kernels clamp a gate's pre-activation before their
        # sigmoid/tanh, so a NaN there comes out a number; the spec's functions (and the
        # interpreter) keep it NaN. Infinities agree. (layout 1 onnxruntime refuses: ONNX's
        # conformance cases check it.)
        layer(op, "nan_inf" if op == "RNN" else "inf", x=x)
    layer("RNN", "relu_affine_bidirectional", dirs=2, activations=["Relu", "Affine"],
          activation_alpha=[0.7], activation_beta=[0.2])
    layer("RNN", "leaky_thresholded", dirs=2, activations=["LeakyRelu", "ThresholdedRelu"],
          activation_alpha=[0.3, 0.1])
    layer("GRU", "linear_before_reset", linear_before_reset=1, init_h=True)
    layer("GRU", "hardsigmoid_softsign", activations=["HardSigmoid", "Softsign"],
          activation_alpha=[0.3], activation_beta=[0.4])
    layer("GRU", "scaledtanh_elu_reverse_lbr", direction="reverse", linear_before_reset=1,
          activations=["ScaledTanh", "Elu"], activation_alpha=[0.9, 0.5], activation_beta=[1.1])
    layer("LSTM", "peepholes_init", init_h=True, init_c=True, peep=True, lens=[3, 4, 1])
    layer("LSTM", "input_forget_peepholes", input_forget=1, peep=True, init_c=True)
    layer("LSTM", "softplus_relu_tanh", activations=["Sigmoid", "Softplus", "Relu"])
    layer("LSTM", "y_h_only", outs=[("", F32), ("y_h", F32)], init_h=True)


_rnn_layers()


def _uint64():
    """uint64 (held as i64 bits): values past 2^63 in arithmetic, division, remainder,
    comparisons, extrema, shifts, TopK, reductions and casts."""
    U64 = TensorProto.UINT64
    big = np.array([2**64 - 1, 2**63, 2**63 - 1, 5, 0, 2**63 + 12345], np.uint64)
    small = np.array([3, 2**63 + 1, 7, 5, 9, 2], np.uint64)
    for op in ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "BitwiseAnd", "BitwiseXor"]:
        add(op, "uint64_past_i64", [inp("a", big), inp("b", small)], [("y", U64)])
    for op in ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]:
        add(op, "uint64_past_i64", [inp("a", big), inp("b", small)], [("y", BOOL)])
    add("BitShift", "uint64_right", [inp("a", big), inp("b", np.array([1, 63, 3, 0, 2, 4], np.uint64))],
        [("y", U64)], direction="RIGHT")
    add("BitShift", "uint64_left", [inp("a", big), inp("b", np.array([1, 63, 3, 0, 2, 4], np.uint64))],
        [("y", U64)], direction="LEFT")
    # onnxruntime has no uint64 TopK, ReduceMax/Min or Pow: ONNX's conformance cases check
    # TopK and Pow, src/ops/reduce.rs's tests the reductions.
    add("Cast", "uint64_to_float", [inp("x", big)], [("y", F32)], to=TensorProto.FLOAT)
    add("Cast", "float_to_uint64", [inp("x", np.array([0.5, 3e9, 1.5e19, 9.3e18, 7.0], np.float32))],
        [("y", U64)], to=U64)
    add("Cast", "int64_to_uint64", [inp("x", np.array([-1, 5, I64_MIN], np.int64))], [("y", U64)], to=U64)


_uint64()


def _small_ops():
    """MelWeightMatrix, Upsample (opset 9), OptionalHasElement / OptionalGetElement on
    tensors, ai.onnx.ml's Binarizer and ArrayFeatureExtractor, an empty bool ReduceMax."""
    r = rng_for("small", "ops")
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    add("MelWeightMatrix", "speech", [init("bins", i64(8)), init("dft", i64(64)), init("rate", i64(16000)),
        init("lo", np.array(20.0, np.float32)), init("hi", np.array(7000.0, np.float32))], [("y", F32)])
    add("MelWeightMatrix", "narrow_f64", [init("bins", i64(3)), init("dft", i64(17)), init("rate", i64(100)),
        init("lo", np.array(0.0, np.float32)), init("hi", np.array(40.0, np.float32))],
        [("y", TensorProto.DOUBLE)], output_datatype=TensorProto.DOUBLE)
    x = randn(r, 1, 2, 2, 3)
    x[0, 1, 0, 2] = np.nan
    add("Upsample", "nearest", [inp("x", x), init("s", np.array([1, 1, 2, 1.5], np.float32))], [("y", F32)],
        opset=9)
    add("Upsample", "linear", [inp("x", randn(r, 1, 1, 3, 2)), init("s", np.array([1, 1, 2, 3], np.float32))],
        [("y", F32)], opset=9, mode="linear")
    add("OptionalHasElement", "tensor", [inp("x", randn(r, 2))], [("y", BOOL)], opset=18)
    add("OptionalHasElement", "absent", [None], [("y", BOOL)], opset=18)
    add("OptionalGetElement", "tensor", [inp("x", ints(r, -5, 5, 3))], [("y", I64)], opset=18)
    b = randn(r, 3, 4)
    # onnxruntime refuses a NaN input (the interpreter, as ONNX's reference, gives 0).
    b[1, 1], b[2, 2], b[0, 3] = np.inf, 0.25, -np.inf
    add("Binarizer", "threshold_inf", [inp("x", b)], [("y", F32)], domain="ai.onnx.ml", threshold=0.25)
    add("ArrayFeatureExtractor", "rows", [inp("x", randn(r, 2, 3, 5)), init("i", i64([4, 0, 4]))],
        [("y", F32)], domain="ai.onnx.ml")
    add("ArrayFeatureExtractor", "vector_int", [inp("x", ints(r, -9, 9, 6)), init("i", i64([[1, 5]]))],
        [("y", I64)], domain="ai.onnx.ml")
    # An empty bool ReduceMax/Min onnxruntime refuses; ONNX's conformance case checks it.


_small_ops()
def _grid_sample():
    """GridSample (src/ops/sample.rs): every mode and padding mode, align_corners, 4-D and
    5-D, grids reaching past the edges, NaN and infinities in the input, f16."""
    r = rng_for("GridSample", "data")
    x = randn(r, 2, 3, 4, 5)
    x[0, 1, 2, 3] = np.nan
    x[1, 0, 0, 0] = np.inf
    grid = unif(r, -1.4, 1.4, 2, 3, 6, 2)
    grid[0, 0, 0] = [1.0, -1.0]
    grid[0, 0, 1] = [0.0, 0.5]
    for mode in ["linear", "nearest", "cubic"]:
        for padding in ["zeros", "border", "reflection"]:
            for align in [0, 1]:
                add("GridSample", f"{mode}_{padding}_align{align}", [inp("x", x), inp("grid", grid)], [("y", F32)],
                    mode=mode, padding_mode=padding, align_corners=align)
    x5 = randn(r, 1, 2, 3, 4, 3)
    g5 = unif(r, -1.3, 1.3, 1, 2, 3, 2, 3)
    for mode in ["linear", "nearest"]:
        for padding in ["zeros", "reflection"]:
            add("GridSample", f"5d_{mode}_{padding}", [inp("x", x5), inp("grid", g5)], [("y", F32)],
                mode=mode, padding_mode=padding)
    add("GridSample", "opset16_bicubic_border", [inp("x", x), inp("grid", grid)], [("y", F32)], opset=16,
        mode="bicubic", padding_mode="border")
    add("GridSample", "f16_bilinear", [inp("x", randn(r, 1, 2, 3, 3, dtype=np.float16)),
        inp("grid", unif(r, -1.1, 1.1, 1, 2, 4, 2, dtype=np.float16))], [("y", F16)], opset=16)


_grid_sample()


def _non_max_suppression():
    """NonMaxSuppression (src/ops/detect.rs): corner boxes in either order, center boxes,
    thresholds given or not, several batches and classes, tied scores."""
    r = rng_for("NonMaxSuppression", "data")
    corners = unif(r, 0, 10, 2, 8, 4)
    corners[0, 3] = corners[0, 1][[2, 3, 0, 1]]  # the same box, corners flipped
    scores = unif(r, 0, 1, 2, 3, 8)
    scores[1, 2, 4] = scores[1, 2, 5]  # a tie
    scalars = [init("max_out", np.array([3], np.int64)), init("iou", np.array([0.3], np.float32)),
               init("score", np.array([0.2], np.float32))]
    add("NonMaxSuppression", "corners_all_thresholds", [inp("boxes", corners), inp("scores", scores), *scalars],
        [("sel", I64)])
    add("NonMaxSuppression", "corners_no_score_threshold", [inp("boxes", corners), inp("scores", scores),
        init("max_out", np.array(5, np.int64)), init("iou", np.array(0.1, np.float32))], [("sel", I64)])
    add("NonMaxSuppression", "no_max_output", [inp("boxes", corners), inp("scores", scores)], [("sel", I64)])
    centers = np.concatenate([unif(r, 0, 10, 1, 10, 2), unif(r, 0.5, 4, 1, 10, 2)], axis=2)
    add("NonMaxSuppression", "center_point_box", [inp("boxes", centers), inp("scores", unif(r, 0, 1, 1, 2, 10)),
        *scalars], [("sel", I64)], center_point_box=1)


_non_max_suppression()


def _bitcast():
    """BitCast (src/ops/bitcast.rs): floats to integers of the same width and back, NaN and
    infinities, sign bits (onnxruntime has no bool kernel: the conformance cases check it)."""
    r = rng_for("BitCast", "data")
    f = randn(r, 2, 5)
    f[0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    add("BitCast", "f32_to_i32", [inp("x", f)], [("y", TensorProto.INT32)], opset=26, to=TensorProto.INT32)
    add("BitCast", "i32_to_f32", [inp("x", np.array([0, 1065353216, -1082130432, 2139095040, -8388608], np.int32))],
        [("y", F32)], opset=26, to=TensorProto.FLOAT)
    h = randn(r, 6, dtype=np.float16)
    h[:2] = [np.inf, -0.0]
    add("BitCast", "f16_to_i16", [inp("x", h)], [("y", TensorProto.INT16)], opset=26, to=TensorProto.INT16)
    add("BitCast", "u16_to_f16", [inp("x", np.array([0, 15360, 48128, 31744, 1], np.uint16))], [("y", F16)], opset=26,
        to=TensorProto.FLOAT16)
    add("BitCast", "i8_to_u8", [inp("x", np.array([-128, -1, 0, 5, 127], np.int8))], [("y", TensorProto.UINT8)],
        opset=26, to=TensorProto.UINT8)
    add("BitCast", "u32_to_i32", [inp("x", np.array([0, 1, 2**31, 2**32 - 1], np.uint32))],
        [("y", TensorProto.INT32)], opset=26, to=TensorProto.INT32)


_bitcast()


def _spectral():
    """DFT and STFT (src/ops/spectral.rs): real and complex signals, forward and inverse,
    one-sided, dft_length padding and truncating, the axis as attribute (opset 17) and input
    (opset 20), windows, NaN."""
    r = rng_for("DFT", "data")
    real = randn(r, 2, 6, 3, 1)
    cplx = randn(r, 2, 5, 2)
    axis1 = init("axis", np.array(1, np.int64))
    add("DFT", "real_axis_input", [inp("x", real), None, axis1], [("y", F32)], opset=20)
    add("DFT", "real_onesided_default_axis", [inp("x", real)], [("y", F32)], opset=20, onesided=1)
    add("DFT", "complex_inverse_len8", [inp("x", cplx), init("n", np.array(8, np.int64))], [("y", F32)], opset=20,
        inverse=1)
    add("DFT", "complex_truncate_opset17", [inp("x", cplx), init("n", np.array(3, np.int64))], [("y", F32)],
        opset=17, axis=1)
    add("DFT", "real_axis2_opset17", [inp("x", real)], [("y", F32)], opset=17, axis=2)
    nan = randn(r, 1, 4, 1)
    nan[0, 2, 0] = np.nan
    add("DFT", "nan", [inp("x", nan)], [("y", F32)], opset=20)
    sig = randn(r, 2, 20, 1)
    add("STFT", "frame_length", [inp("x", sig), init("step", np.array(4, np.int64)), None,
        init("len", np.array(8, np.int64))], [("y", F32)], opset=17)
    add("STFT", "hann_window_twosided", [inp("x", sig), init("step", np.array(3, np.int64)),
        init("w", np.hanning(6).astype(np.float32))], [("y", F32)], opset=17, onesided=0)
    add("STFT", "complex_signal", [inp("x", randn(r, 1, 12, 2)), init("step", np.array(5, np.int64)), None,
        init("len", np.array(4, np.int64))], [("y", F32)], opset=17, onesided=0)


_spectral()


def _qlinear():
    """ConvInteger, QLinearConv, QLinearMatMul (src/ops/qlinear.rs): uint8 and int8, zero
    points per tensor (onnxruntime runs no per-channel ConvInteger) and per column of B, per-channel
    scales, f16 scales, saturation, bias,
    strides and padding, batched products."""
    r = rng_for("QLinear", "data")
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    x = ints(r, 0, 255, 1, 2, 5, 5).astype(np.uint8)
    w = ints(r, 0, 255, 3, 2, 3, 3).astype(np.uint8)
    add("ConvInteger", "u8_zero_points_pads", [inp("x", x), init("w", w), init("xz", np.array(120, np.uint8)),
        init("wz", np.array(100, np.uint8))], [("y", TensorProto.INT32)], pads=[1, 1, 1, 1], strides=[2, 1])
    add("ConvInteger", "u8_no_zero_points", [inp("x", x), init("w", w[:, :, :2, :2])], [("y", TensorProto.INT32)])
    xs, ws, ys = (init("xs", np.array(0.02, np.float32)), init("ws", np.array([0.01, 0.03, 0.002], np.float32)),
                  init("ys", np.array(0.05, np.float32)))
    add("QLinearConv", "u8_per_channel_bias", [inp("x", x), xs, init("xz", np.array(128, np.uint8)), init("w", w), ws,
        init("wz", np.array(120, np.uint8)), ys, init("yz", np.array(100, np.uint8)),
        init("b", ints(r, -2000, 2000, 3).astype(np.int32))], [("y", U8)], pads=[0, 1, 0, 1], group=1)
    xi = ints(r, -128, 127, 1, 4, 4, 4).astype(np.int8)
    add("QLinearConv", "i8_groups_saturating", [inp("x", xi), init("xs", np.array(0.1, np.float32)),
        init("xz", np.array(-3, np.int8)), init("w", ints(r, -128, 127, 2, 2, 2, 2).astype(np.int8)),
        init("ws", np.array(0.05, np.float32)), init("wz", np.array(0, np.int8)), init("ys", np.array(0.2, np.float32)),
        init("yz", np.array(5, np.int8))], [("y", I8)], group=2, strides=[2, 2])
    for dt, np_dt, lo, hi in [(U8, np.uint8, 0, 255), (I8, np.int8, -128, 127)]:
        a = ints(r, lo, hi, 2, 3, 4).astype(np_dt)
        b = ints(r, lo, hi, 4, 5).astype(np_dt)
        for sdt in [np.float32, np.float16]:
            name = f"{np.dtype(np_dt).name}_{np.dtype(sdt).name}"
            add("QLinearMatMul", f"3d_{name}", [inp("a", a), init("as", np.array(0.03, sdt)),
                init("az", np.array(lo + 7, np_dt)), inp("b", b), init("bs", np.array(0.02, sdt)),
                init("bz", np.array(hi - 9, np_dt)), init("ys", np.array(0.4, sdt)), init("yz", np.array(lo + 100, np_dt))],
                [("y", dt)], opset=21)
        add("QLinearMatMul", f"2d_per_column_{np.dtype(np_dt).name}", [inp("a", a[0]), init("as", np.array(0.03, np.float32)),
            init("az", np.array(lo + 7, np_dt)), inp("b", b), init("bs", unif(r, 0.01, 0.05, 5)),
            init("bz", ints(r, lo, hi, 5).astype(np_dt)), init("ys", np.array(0.1, np.float32)),
            init("yz", np.array(lo + 60, np_dt))], [("y", dt)], opset=21)


_qlinear()


def _einsum_unique():
    """Einsum (src/ops/einsum.rs): products, contractions, diagonals, ellipses with
    broadcasting, implicit outputs, integers; Unique (src/ops/unique.rs): flattened and along
    an axis, sorted or not, repeated values, integers."""
    r = rng_for("Einsum", "data")
    a, b = randn(r, 2, 3, 4), randn(r, 2, 4, 5)
    add("Einsum", "batch_matmul", [inp("a", a), inp("b", b)], [("y", F32)], equation="bij,bjk->bik")
    add("Einsum", "ellipsis_broadcast", [inp("a", randn(r, 2, 1, 3, 4)), inp("b", randn(r, 2, 5, 4, 2))], [("y", F32)],
        equation="...ij,...jk->...ik")
    add("Einsum", "diagonal_sum", [inp("a", randn(r, 3, 3, 2))], [("y", F32)], equation="iij->j")
    add("Einsum", "implicit_outer", [inp("a", randn(r, 3)), inp("b", randn(r, 4))], [("y", F32)], equation="i,j")
    add("Einsum", "three_operands", [inp("a", randn(r, 2, 3)), inp("b", randn(r, 3, 4)), inp("c", randn(r, 4))],
        [("y", F32)], equation="ij,jk,k->i")
    add("Einsum", "i64_transpose_sum", [inp("a", ints(r, -9, 9, 2, 3, 4))], [("y", I64)], equation="abc->cb")
    r = rng_for("Unique", "data")
    x = ints(r, 0, 4, 3, 4).astype(np.float32)
    x[0, 0] = np.inf
    outs = [("y", F32), ("indices", I64), ("inverse", I64), ("counts", I64)]
    add("Unique", "flat_sorted", [inp("x", x)], outs)
    add("Unique", "flat_unsorted", [inp("x", x)], outs, sorted=0)
    rows = np.array([[1, 2, 1], [0, 5, 0], [1, 2, 1], [0, 5, 0]], np.float32)
    add("Unique", "axis0_sorted", [inp("x", rows)], outs, axis=0)
    add("Unique", "axis_neg1_unsorted", [inp("x", rows)], outs, axis=-1, sorted=0)
    add("Unique", "i64", [inp("x", ints(r, -3, 3, 10))], [("y", I64), ("indices", I64), ("inverse", I64),
        ("counts", I64)])


_einsum_unique()


def _image():
    """AffineGrid (src/ops/sample.rs), CenterCropPad and Col2Im (src/ops/image.rs): 2-D and
    3-D grids with and without align_corners, crops and pads of odd and even differences on
    chosen axes, Col2Im with strides, pads and dilations, NaN."""
    r = rng_for("Image", "data")
    add("AffineGrid", "2d", [inp("theta", randn(r, 2, 2, 3)), init("size", np.array([2, 3, 4, 5], np.int64))],
        [("grid", F32)])
    add("AffineGrid", "3d_align_corners", [inp("theta", randn(r, 1, 3, 4)),
        init("size", np.array([1, 1, 2, 3, 4], np.int64))], [("grid", F32)], align_corners=1)
    x = randn(r, 3, 6, 5)
    x[0, 2, 2] = np.nan
    add("CenterCropPad", "crop_and_pad", [inp("x", x), init("shape", np.array([4, 3, 8], np.int64))], [("y", F32)])
    add("CenterCropPad", "axes_odd", [inp("x", x), init("shape", np.array([3, 2], np.int64))], [("y", F32)],
        axes=[-1, 1])
    add("CenterCropPad", "i64", [inp("x", ints(r, -9, 9, 5, 4)), init("shape", np.array([2, 7], np.int64))],
        [("y", I64)])
    add("Col2Im", "strides_pads_dilations", [inp("x", randn(r, 2, 2 * 4, 9)), init("image", np.array([5, 6], np.int64)),
        init("block", np.array([2, 2], np.int64))], [("y", F32)], strides=[2, 2], pads=[1, 0, 1, 1], dilations=[1, 2])
    add("Col2Im", "plain", [inp("x", randn(r, 1, 3 * 6, 4)), init("image", np.array([3, 4], np.int64)),
        init("block", np.array([2, 3], np.int64))], [("y", F32)])


_image()


def _tfidf():
    """TfIdfVectorizer (src/ops/text.rs): 1- to 3-grams, skips, each mode with and without
    weights, int32 and int64 tokens, one row and a batch."""
    pool = dict(pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5], ngram_counts=[0, 4, 10],
                ngram_indexes=[0, 1, 2, 3, 4, 5, 6, 7])
    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int32)
    x1 = np.array([2, 3, 5, 4, 4, 5, 6, 7, 8, 6, 7, 2, 3, 5], np.int64)
    for mode in ["TF", "IDF", "TFIDF"]:
        add("TfIdfVectorizer", f"{mode}_uni_bigrams_skip", [inp("x", x1)], [("y", F32)], mode=mode, min_gram_length=1,
            max_gram_length=2, max_skip_count=2, **pool)
        add("TfIdfVectorizer", f"{mode}_weights_batch", [inp("x", x)], [("y", F32)], mode=mode, min_gram_length=2,
            max_gram_length=3, max_skip_count=1, weights=[0.5, 1.5, 2, 3, 4, 5, 6, 7], **pool)


_tfidf()


def _unpool_roi():
    """MaxUnpool (src/ops/image.rs): MaxPool's indices unpooled, 2-D with strides and pads (the
    conformance cases check output_shape, where onnxruntime reads the indices differently);
    RoiAlign (src/ops/detect.rs): avg and max, both coordinate modes, sampling ratios, several
    batches, regions reaching past the edges."""
    r = rng_for("MaxUnpool", "data")
    x = randn(r, 2, 2, 2, 3)
    idx = np.array([[[[0, 3, 4], [13, 10, 17]], [[18, 22, 20], [31, 27, 35]]],
                    [[[36, 38, 41], [49, 45, 53]], [[54, 57, 59], [67, 64, 71]]]], np.int64)
    add("MaxUnpool", "2d_strides", [inp("x", x), init("i", idx)], [("y", F32)], kernel_shape=[2, 2], strides=[2, 2])
    add("MaxUnpool", "2d_pads", [inp("x", x), init("i", (np.arange(24, dtype=np.int64) * 2 + 1).reshape(2, 2, 2, 3))], [("y", F32)], kernel_shape=[3, 3],
        strides=[2, 2], pads=[1, 1, 1, 1])
    r = rng_for("RoiAlign", "data")
    feats = randn(r, 2, 3, 6, 7)
    rois = np.array([[0.5, 0.5, 4.2, 3.7], [1.0, 2.0, 6.9, 5.8], [-1.0, -0.5, 2.0, 8.0], [2.0, 2.0, 2.5, 2.2]], np.float32)
    batch = np.array([0, 1, 1, 0], np.int64)
    for mode in ["avg", "max"]:
        for ctm in ["half_pixel", "output_half_pixel"]:
            add("RoiAlign", f"{mode}_{ctm}", [inp("x", feats), init("rois", rois), init("b", batch)], [("y", F32)],
                opset=16, mode=mode, coordinate_transformation_mode=ctm, output_height=3, output_width=2, sampling_ratio=2,
                spatial_scale=0.9)
    add("RoiAlign", "adaptive_sampling", [inp("x", feats), init("rois", rois * 2), init("b", batch)], [("y", F32)],
        opset=16, output_height=2, output_width=3, spatial_scale=0.5)


_unpool_roi()


def _deform_conv():
    """DeformConv (src/ops/deform.rs): offsets moving taps between and beyond pixels, masks,
    bias, groups and offset groups, strides, pads and dilations."""
    r = rng_for("DeformConv", "data")
    x = randn(r, 2, 4, 5, 6)
    add("DeformConv", "offsets_only", [inp("x", x), init("w", randn(r, 3, 4, 2, 2)),
        inp("off", randn(r, 2, 8, 4, 5, scale=1.5))], [("y", F32)], opset=19, kernel_shape=[2, 2])
    add("DeformConv", "mask_bias_groups", [inp("x", x), init("w", randn(r, 4, 2, 3, 3)),
        inp("off", randn(r, 2, 2 * 18, 3, 2, scale=2.0)), init("b", randn(r, 4)),
        inp("mask", unif(r, 0, 1, 2, 2 * 9, 3, 2))], [("y", F32)], opset=19, group=2, offset_group=2,
        pads=[1, 0, 1, 1], strides=[2, 2], dilations=[1, 2])


_deform_conv()
