"""The standard-ONNX bodies mobius attaches to saved models for the contrib ops they call
(derived from the inline rules in rewrites/inline/) compute what onnxruntime's contrib kernels
compute: every output the body declares, every input count the rules cover, epsilon set and
left at the op's default. onnxruntime keeps its kernel for a com.microsoft call, so the body
is run by moving the call and a copy of the function into a domain of their own, which
onnxruntime can only inline; and, for every input count, inlined by onnx's reference inliner
with trailing absent inputs dropped (as ONNX allows): onnxruntime 1.32 crashes on a node with
an explicitly empty optional input such as `LayerNormalization(x, w, "")`, which is what a
call without `beta` inlines to."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

OPSET = 24
IR_VERSION = 11
BODY_DOMAIN = "mobius.body"
HIDDEN = 8

# fixture -> contrib ops whose bodies its default build carries
BUILDS = {"llama": ["SkipSimplifiedLayerNormalization"], "gpt2": ["FastGelu", "SkipLayerNormalization"],
          "bert": ["BiasGelu", "SkipLayerNormalization"]}
# op -> the input counts the inline rules cover (calls with other counts get no body)
ARITIES = {"SkipSimplifiedLayerNormalization": [3], "SkipLayerNormalization": [3, 4], "BiasGelu": [2],
           "FastGelu": [2]}


def _functions(built) -> dict[str, onnx.FunctionProto]:
    found = {}
    for name, ops in BUILDS.items():
        model = onnx.load(str(built("fixture", name, "f32") / "model.onnx"), load_external_data=False)
        bodies = {f.name: f for f in model.functions if f.domain == "com.microsoft"}
        assert sorted(bodies) == sorted(ops), f"{name}: bodies {sorted(bodies)}, want {sorted(ops)}"
        found.update(bodies)
    return found


def _schema(op: str):
    from onnxruntime.capi import onnxruntime_pybind11_state as C
    return next(s for s in C.get_all_operator_schema() if s.domain == "com.microsoft" and s.name == op)


def _call_model(f: onnx.FunctionProto, domain: str, arity: int, attrs: dict) -> onnx.ModelProto:
    ins = [f"in{i}" for i in range(arity)]
    outs = [f"out{o}" for o in range(len(f.output))]
    node = helper.make_node(f.name, ins, outs, domain=domain, **attrs)
    graph = helper.make_graph(
        [node], "call", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ins],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outs])
    functions = []
    if domain == BODY_DOMAIN:
        body = onnx.FunctionProto()
        body.CopyFrom(f)
        body.domain = BODY_DOMAIN
        functions = [body]
    imports = [helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION, functions=functions)


def _inputs(op: str, arity: int, rng, scale: float) -> dict:
    shapes = [(2, 3, HIDDEN)] + [(2, 3, HIDDEN) if "Normalization" in op else (HIDDEN,)] + [(HIDDEN,)] * (arity - 2)
    return {f"in{i}": (rng.standard_normal(s) * scale).astype(np.float32) for i, s in enumerate(shapes[:arity])}


def _inlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its local functions inlined by onnx and trailing absent inputs dropped.
    onnx's inliner (1.23) ignores a function's attribute defaults, so the call is given them
    first where it leaves them unset (onnxruntime's own inlining checks the defaults)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    defaults = {(f.domain, f.name): f.attribute_proto for f in model.functions}
    for node in model.graph.node:
        for d in defaults.get((node.domain, node.op_type), []):
            if all(a.name != d.name for a in node.attribute):
                node.attribute.append(d)
    out = onnx.inliner.inline_local_functions(model)
    del out.functions[:]
    for node in out.graph.node:
        while node.input and node.input[-1] == "":
            node.input.pop()
    return out


def _run(model: onnx.ModelProto, feed: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


@pytest.mark.parametrize("op", sorted(ARITIES))
def test_contrib_function_bodies_match_onnxruntime_kernels(built, op):
    f = _functions(built)[op]
    # The default the body declares for an attribute is the op's default in onnxruntime's schema.
    schema = _schema(op)
    for a in f.attribute_proto:
        want = onnx.AttributeProto()
        want.ParseFromString(schema.attributes[a.name]._default_value)
        assert helper.get_attribute_value(a) == helper.get_attribute_value(want), f"{op}.{a.name}"
    settings = [{}, {"epsilon": 1e-5}, {"epsilon": 0.25}] if "epsilon" in schema.attributes else [{}]
    checked = 0
    for arity in ARITIES[op]:
        for attrs in settings:
            kernel = _call_model(f, "com.microsoft", arity, attrs)
            body = _call_model(f, BODY_DOMAIN, arity, attrs)
            for seed, scale in [(0, 1.0), (1, 3.0), (2, 1e-3)]:
                feed = _inputs(op, arity, np.random.default_rng(seed), scale)
                want = _run(kernel, feed)
                runs = {"inlined by onnx": _run(_inlined(body), feed)}
                if arity == len(f.input):
                    runs["inlined by onnxruntime"] = _run(body, feed)
                for how, got in runs.items():
                    assert len(got) == len(want) == len(f.output), how
                    for o, (w, g) in enumerate(zip(want, got)):
                        what = f"{op} with {arity} inputs, {attrs or 'default epsilon'}, scale {scale}, {how}: output {o}"
                        assert w.shape == g.shape and w.dtype == g.dtype, f"{what}: {g.dtype}{g.shape} != {w.dtype}{w.shape}"
                        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=what)
                        checked += 1
    full = sum(2 if arity == len(f.input) else 1 for arity in ARITIES[op])
    assert checked == full * len(settings) * 3 * len(f.output)


# MatMulNBits: the body is hand-written (src/rulebook/contrib_functions/matmul_nbits_body.rs), one
# for calls with zero points and one for calls without, taken from the int4 builds of llama
# (symmetric and asymmetric).
NBITS_BUILDS = {False: ("--quant", "int4"), True: ("--quant", "int4", "--quant-asymmetric")}


def _nbits_body(built, zero_points: bool) -> onnx.FunctionProto:
    model = onnx.load(str(built("fixture", "llama", "f32", "default", NBITS_BUILDS[zero_points]) / "model.onnx"),
                      load_external_data=False)
    bodies = [f for f in model.functions if (f.domain, f.name) == ("com.microsoft", "MatMulNBits")]
    assert len(bodies) == 1, [f.name for f in model.functions]
    return bodies[0]


def _nbits_call(f: onnx.FunctionProto, domain: str, bits: int, k: int, n: int, block: int, rank: int,
                zero_points: bool, bias: bool) -> onnx.ModelProto:
    blocks = -(-k // block)
    a_shape = [2, 3, k] if rank == 3 else [3, k]
    inputs = [("A", TensorProto.FLOAT, a_shape), ("B", TensorProto.UINT8, [n, blocks, block * bits // 8]),
              ("scales", TensorProto.FLOAT, [n * blocks])]
    names = ["A", "B", "scales"]
    if zero_points:
        inputs.append(("zero_points", TensorProto.UINT8, [n, -(-blocks * bits // 8)]))
        names.append("zero_points")
    if bias:
        inputs.append(("bias", TensorProto.FLOAT, [n]))
        names += [""] * (5 - len(names)) + ["bias"]
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=domain, K=k, N=n, bits=bits, block_size=block)
    graph = helper.make_graph([node], "call", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, a_shape[:-1] + [n])])
    functions = []
    if domain == BODY_DOMAIN:
        body = onnx.FunctionProto()
        body.CopyFrom(f)
        body.domain = BODY_DOMAIN
        functions = [body]
    imports = [helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION, functions=functions)


NBITS_CASES = [(bits, zp, bias, rank) for bits in (4, 8) for zp in (False, True) for bias in (False, True)
               for rank in (2, 3)]


@pytest.mark.parametrize("bits,zero_points,bias,rank", NBITS_CASES,
                         ids=[f"{b}bit-{'zp' if z else 'nozp'}-{'bias' if c else 'nobias'}-{r}d" for b, z, c, r in NBITS_CASES])
def test_matmul_nbits_body_matches_onnxruntimes_kernel(built, bits, zero_points, bias, rank):
    """The body of MatMulNBits against onnxruntime's kernel (accuracy_level 0) on random packed
    codes, scales, zero points and bias, K a multiple of the block and not (the padding rows of
    B hold random bytes, which both must ignore); inlined by onnx, and by onnxruntime where the
    call has no absent input in the middle."""
    f = _nbits_body(built, zero_points)
    assert [helper.get_attribute_value(a) for a in f.attribute_proto] == [4]  # bits, onnxruntime's default
    checked = 0
    for k, n, block in [(64, 6, 32), (40, 5, 16), (33, 7, 16)]:
        blocks = -(-k // block)
        kernel = _nbits_call(f, "com.microsoft", bits, k, n, block, rank, zero_points, bias)
        body = _nbits_call(f, BODY_DOMAIN, bits, k, n, block, rank, zero_points, bias)
        for seed in range(3):
            rng = np.random.default_rng(seed)
            feed = {"A": rng.standard_normal([2, 3, k] if rank == 3 else [3, k]).astype(np.float32),
                    "B": rng.integers(0, 256, [n, blocks, block * bits // 8], dtype=np.uint8),
                    "scales": (rng.standard_normal(n * blocks) / 2 ** (bits - 1)).astype(np.float32)}
            if zero_points:
                feed["zero_points"] = rng.integers(0, 256, [n, -(-blocks * bits // 8)], dtype=np.uint8)
            if bias:
                feed["bias"] = rng.standard_normal(n).astype(np.float32)
            want = _run(kernel, feed)[0]
            runs = {"inlined by onnx": _run(_inlined(body), feed)[0]}
            if zero_points or not bias:
                runs["inlined by onnxruntime"] = _run(body, feed)[0]
            for how, got in runs.items():
                what = f"bits {bits}, K {k}, N {n}, block {block}, zero points {zero_points}, bias {bias}, rank {rank}, {how}"
                assert got.shape == want.shape and got.dtype == want.dtype, what
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=what)
                checked += 1
    assert checked == 3 * 3 * (2 if zero_points or not bias else 1)
