""":func:`optimize`, :func:`verify` and :func:`cost`: mobius' commands on existing .onnx files."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from mobius import _mobius
from mobius._optimizations import log_trace

__all__ = ["cost", "optimize", "verify"]


def _path(name: str, value: object) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, not {type(value).__name__}")
    return os.fspath(value)


def _dims(dims: Mapping[str, int] | None) -> dict[str, int]:
    if dims is None:
        return {}
    if not isinstance(dims, Mapping):
        raise TypeError("dims must be a dict of dim name to size")
    for k, v in dims.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"dims: {k!r}={v!r}: expected a name and a size >= 0")
    return dict(dims)


def optimize(
    model: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    execution_provider: str = "default",
    dtype: str | None = None,
    role: str = "decoder",
    overwrite: bool = False,
    kv_cache: str = "as-is",
    quant: str | None = None,
    quant_block_size: int = 32,
    quant_asymmetric: bool = False,
    quant_exclude: Iterable[str] = (),
    quant_embeddings: bool = False,
    accuracy_level: int | None = None,
    trace_optimization: bool = False,
    verify_rewrites: bool = False,
) -> dict[str, Any]:
    """Optimizes an existing .onnx model for an EP (``mobius optimize``), writing
    model.onnx + model.onnx.data into ``output_dir``.

    Args:
        model: The .onnx file (its external data is read from its folder).
        output_dir: The output folder (must not exist or be empty unless ``overwrite``).
        execution_provider: The target EP (a name in :data:`mobius.ep_registry`).
        dtype: Model dtype for dtype-gated rules; ``None``: the first float output's.
        role: ``"decoder"``, ``"encoder"`` or ``"vision"``.
        overwrite: Replace a non-empty output folder.
        kv_cache: ``"as-is"`` or ``"genai"`` (declare onnxruntime-genai's KV-cache contract;
            see ``mobius optimize --help``).
        quant, quant_block_size, quant_asymmetric, quant_exclude, quant_embeddings,
            accuracy_level: As for :func:`mobius.build`.
        trace_optimization: Log the ``[EP Trace]`` report on ``mobius._optimizations``.
        verify_rewrites: Check every rewrite on concrete values.

    Returns:
        ``{"execution_provider", "dtype", "role", "nodes_before", "nodes_after",
        "cost_before_us", "cost_after_us", "seconds", "quantization", "trace"}``.

    Raises:
        ValueError: Unknown EP or option, or a model mobius cannot read (names the file).
        OSError: A file cannot be read or written.
    """
    report = _mobius.optimize(
        _path("model", model),
        _path("output_dir", output_dir),
        execution_provider=execution_provider,
        dtype=dtype,
        role=role,
        overwrite=bool(overwrite),
        kv_cache=kv_cache,
        quant=quant,
        quant_block_size=quant_block_size,
        quant_asymmetric=bool(quant_asymmetric),
        quant_exclude=[quant_exclude] if isinstance(quant_exclude, str) else list(quant_exclude),
        quant_embeddings=bool(quant_embeddings),
        accuracy_level=accuracy_level,
        trace=bool(trace_optimization),
        verify_rewrites=bool(verify_rewrites),
    )
    if trace_optimization:
        log_trace(report["trace"])
    return report


def verify(
    reference: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    dims: Mapping[str, int] | None = None,
    samples: int = 3,
    seed: int = 0,
    random_mask: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
) -> dict[str, Any]:
    """Checks that two models compute the same thing (``mobius verify``): both run in mobius'
    reference interpreter on the same random inputs.

    Args:
        reference: The reference .onnx model.
        candidate: The model checked against it.
        dims: Sizes of symbolic dims (``{"batch": 1, "sequence_len": 7}``).
        samples: Random input sets (at least 1).
        seed: Random seed.
        random_mask: Random padded attention masks instead of all ones.
        atol: Absolute tolerance (default by output dtype: f32 1e-4, f16 2e-2, bf16 1e-1).
        rtol: Relative tolerance (default by dtype: f32 1e-5, f16 1e-2, bf16 5e-2).

    Returns:
        ``{"passed": bool, "outputs": [{"name", "max_abs", "max_rel", "nan_one_side",
        "atol", "rtol", "within"}, ...], "dims", "derived", "report"}`` (``report``: the
        CLI's text).

    Raises:
        ValueError: A model cannot be read or the two do not match in inputs/outputs.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an int >= 1, got {samples!r}")
    return _mobius.verify_models(
        _path("reference", reference),
        _path("candidate", candidate),
        dims=_dims(dims),
        samples=samples,
        seed=seed,
        random_mask=bool(random_mask),
        atol=atol,
        rtol=rtol,
    )


def cost(
    model: str | os.PathLike[str],
    *,
    execution_provider: str = "default",
    dims: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Estimates a model with an EP's cost model: the data of ``mobius cost --json``
    (nodes, op types, totals; infinite times as ``None``).

    Args:
        model: The .onnx file (its external data is not read).
        execution_provider: The EP whose cost model estimates it.
        dims: Sizes of symbolic dims in both workloads.

    Raises:
        ValueError: Unknown EP, or a model mobius cannot read.
    """
    return json.loads(
        _mobius.cost(_path("model", model), execution_provider=execution_provider, dims=_dims(dims))
    )
