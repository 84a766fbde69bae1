#!/usr/bin/env python3
"""Writes the golden files of tests/quant_goldens.rs: weights and onnxruntime's own block
quantization of them, in both of its formats.

Made with onnxruntime 1.32.0 (x86-64 CPU build), numpy and ml_dtypes (onnxruntime's quantizer
itself uses ml_dtypes for bf16). Run with the repository's ORT virtual environment:

    /work/main/.venv/bin/python scripts/make_quant_goldens.py

For each case `<name>` (listed, with its parameters, in tests/data/quant/manifest.json):
- `<name>.w.npy`: the [K, N] weight (f32 or f16; bf16 stored as its uint16 bits);
- `<name>.qop_b.npy`, `.qop_scales.npy`, `.qop_zp.npy` (asymmetric only): what
  `quantize_matmul_4bits` / `quantize_matmul_8bits` write for com.microsoft::MatMulNBits
  (packed [N, k_blocks, blob] u8, scales [N, k_blocks], zero points [N, ceil(k_blocks*bits/8)]);
- `<name>.qdq_b.npy`, `.qdq_scales.npy`, `.qdq_zp.npy` (4 bits only, zero points asymmetric
  only): what `quantize_qdq_matmul_4bits` writes for DequantizeLinear (packed [K*N] values,
  scales [k_blocks, N], packed [k_blocks*N] zero points).

Both are called exactly as onnxruntime.quantization.matmul_nbits_quantizer
(DefaultWeightOnlyQuantizer.qbits_block_quant) calls them: QOperator weights padded with zero
rows to a whole number of blocks, bf16 weights widened to f32 and the scales rounded back to
bf16 afterwards.
"""

import json
import pathlib

import ml_dtypes
import numpy as np
import onnxruntime
from onnxruntime.capi._pybind_state import (
    quantize_matmul_4bits,
    quantize_matmul_8bits,
    quantize_qdq_matmul_4bits,
)

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "quant"
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def qoperator(w, bits, block, symmetric):
    """MatMulNBits layout, as qbits_block_quant's QOperator branch computes it."""
    k, n = w.shape
    k_blocks = (k + block - 1) // block
    kpack = 8 // bits
    blob = (block + kpack - 1) // kpack
    padded = np.pad(w, ((0, k_blocks * block - k), (0, 0)), "constant")
    packed = np.zeros((n, k_blocks, blob), dtype=np.uint8)
    zero_points = np.zeros((n, (k_blocks + kpack - 1) // kpack), dtype=np.uint8)
    scales = np.zeros((n, k_blocks), dtype=w.dtype)
    quantize = quantize_matmul_4bits if bits == 4 else quantize_matmul_8bits
    quantize(packed, padded, scales, zero_points, block, n, k, symmetric)
    return packed, scales, zero_points


def qdq(w, block, symmetric):
    """DequantizeLinear layout (4 bits), as qbits_block_quant's QDQ branch computes it."""
    k, n = w.shape
    k_blocks = (k + block - 1) // block
    packed = np.zeros((k * n + 1) // 2, dtype=np.uint8)
    zero_points = np.zeros((n * k_blocks + 1) // 2, dtype=np.uint8)
    scales = np.zeros((k_blocks, n), dtype=w.dtype)
    quantize_qdq_matmul_4bits(packed, w, scales, zero_points, block, n, k, symmetric)
    return packed, scales, zero_points


def bits_of(a):
    """bf16 arrays are saved as their uint16 bits (numpy has no bf16)."""
    return a.view(np.uint16) if a.dtype == ml_dtypes.bfloat16 else a


def write_case(manifest, name, w, dtype, bits, block, symmetric):
    k, n = w.shape
    bf16 = dtype == "bf16"
    work = w.astype(np.float32) if bf16 else w
    files = {"w": bits_of(w)}
    packed, scales, zero_points = qoperator(work, bits, block, symmetric)
    files["qop_b"] = packed
    files["qop_scales"] = bits_of(scales.astype(ml_dtypes.bfloat16) if bf16 else scales)
    if not symmetric:
        files["qop_zp"] = zero_points
    if bits == 4:
        packed, scales, zero_points = qdq(work, block, symmetric)
        files["qdq_b"] = packed
        files["qdq_scales"] = bits_of(scales.astype(ml_dtypes.bfloat16) if bf16 else scales)
        if not symmetric:
            files["qdq_zp"] = zero_points
    for part, array in files.items():
        np.save(OUT / f"{name}.{part}.npy", np.ascontiguousarray(array))
    manifest.append(
        {
            "name": name,
            "dtype": dtype,
            "bits": bits,
            "block_size": block,
            "symmetric": symmetric,
            "k": k,
            "n": n,
        }
    )


def random_weight(rng, k, n, dtype):
    """Normal values, each column scaled by its own power of two (2^-10 .. 2^4 for f16,
    2^-30 .. 2^30 otherwise), and about 1% outliers a hundred times larger."""
    low, high = (-10.0, 4.0) if dtype == "f16" else (-30.0, 30.0)
    w = rng.standard_normal((k, n)) * np.exp2(rng.uniform(low, high, (1, n)))
    outliers = rng.random((k, n)) < 0.01
    w = np.where(outliers, w * 100.0, w)
    return w.astype(DTYPES[dtype])


def edge_weight(dtype, bits):
    """[32, N]: two blocks of 16 rows per column; each column one pattern, the second block
    its negation."""
    np_dtype = DTYPES[dtype]
    info = ml_dtypes.finfo(np_dtype)
    tiny = float(info.smallest_subnormal)
    huge = float(info.max)
    step = 1.0 if bits == 4 else 1.0 / 16.0  # the scale of the tie patterns
    top = 2**bits - 1
    ramp = np.linspace(-1.0, 1.0, 16)
    halves = (np.arange(-7, 8) + 0.5) * step  # every half step inside the range
    patterns = [
        np.zeros(16),
        np.full(16, -0.0),
        np.full(16, 3.0),
        np.full(16, -3.0),
        np.concatenate([[-6.0, 5.0], ramp[2:] * 4]),  # larger magnitude negative
        np.concatenate([[6.0, -5.0], ramp[2:] * 4]),  # larger magnitude positive
        np.concatenate([[-4.0, 4.0], ramp[2:] * 3]),  # equal magnitudes
        np.concatenate([[-8.0], halves]),  # symmetric ties (4 bits; 8 bits below)
        # asymmetric ties: range [-8, top * step - 8] gives scale `step`, zero point 8 / step
        np.concatenate([[-8.0, top * step - 8.0], halves[:14]]),
        # zero point tie: -lo / scale = 2.5 (rounds to 3 away from zero, to 2 to even)
        np.concatenate([[-2.5 * step, (top - 2.5) * step], ramp[2:] * step]),
        np.arange(-8, 8) * tiny,  # smallest subnormals
        np.concatenate([[1e-39, -3e-40], ramp[2:] * 1e-39])
        if dtype != "f16"
        else np.concatenate([[2e-6, -7e-7], ramp[2:] * 2e-6]),  # scale below the normals
        np.concatenate([[huge, -huge], ramp[2:] * huge]),  # range overflows f32 (f16: not)
        np.concatenate([[0.0] * 9, [2.75], [0.0] * 6]),  # one value
    ]
    if bits == 8:
        # 8-bit ties: the largest magnitude -8 gives scale 1/16; half steps of 1/16.
        patterns[7] = np.concatenate([[-8.0], (np.arange(-120, 120, 16) + 0.5) / 16.0])
    columns = [np.concatenate([p, -p]) for p in patterns]
    with np.errstate(over="ignore"):
        return np.stack(columns, axis=1).astype(np_dtype)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for old in list(OUT.glob("*.npy")) + list(OUT.glob("manifest.json")):
        old.unlink()
    rng = np.random.default_rng(20240611)
    manifest = []
    shapes = [(64, 6, 16), (80, 7, 32), (256, 5, 128), (200, 8, 128), (96, 9, 32), (48, 4, 16)]

    def random_case(dtype, bits, symmetric, k, n, block, prefix="rand"):
        name = f"{prefix}_{dtype}_{bits}_{'sym' if symmetric else 'asym'}_{k}x{n}_b{block}"
        write_case(manifest, name, random_weight(rng, k, n, dtype), dtype, bits, block, symmetric)

    index = 0
    for dtype in DTYPES:
        for bits in (4, 8):
            for symmetric in (True, False):
                for _ in range(2):
                    k, n, block = shapes[index % len(shapes)]
                    index += 1
                    random_case(dtype, bits, symmetric, k, n, block)
                name = f"edge_{dtype}_{bits}_{'sym' if symmetric else 'asym'}"
                edges = edge_weight(dtype, bits)
                write_case(manifest, name, edges, dtype, bits, 16, symmetric)
    # Block 256 once per bit width; more than 128 columns (QDQ works in 128-column units).
    random_case("f32", 4, True, 512, 3, 256)
    random_case("bf16", 8, False, 300, 2, 256)
    random_case("f16", 4, False, 32, 131, 16)
    random_case("f32", 4, True, 32, 130, 32)
    # Odd K: the last row's byte is half empty in the 4-bit layout.
    for k in (17, 33, 49):
        for symmetric in (True, False):
            for dtype in ("f32", "f16"):
                random_case(dtype, 4, symmetric, k, 5, 16, prefix="oddk")
    random_case("f32", 8, False, 33, 3, 16, prefix="oddk")
    (OUT / "manifest.json").write_text(
        json.dumps({"onnxruntime": onnxruntime.__version__, "cases": manifest}, indent=1) + "\n"
    )
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{len(manifest)} cases, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()
