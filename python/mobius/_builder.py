""":func:`build`: a Hugging Face checkpoint to a :class:`ModelPackage`."""

from __future__ import annotations

import os
from collections.abc import Iterable

import onnx_ir as ir

from mobius import _mobius
from mobius._execution_providers import ep_registry
from mobius._model_package import ModelPackage
from mobius._optimizations import log_trace

__all__ = ["build"]

_DTYPES = {
    "f32": "f32",
    "float32": "f32",
    "float": "f32",
    "f16": "f16",
    "float16": "f16",
    "half": "f16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}
_IR_DTYPES = {ir.DataType.FLOAT: "f32", ir.DataType.FLOAT16: "f16", ir.DataType.BFLOAT16: "bf16"}
_TASKS = (None, "text-generation", "feature-extraction")
_TASK_ROLES = {"text-generation": "decoder", "feature-extraction": "encoder"}
_ROLE_TASKS = {"decoder": "text-generation", "encoder": "feature-extraction", "vision": "image-feature-extraction"}


def _dtype_name(dtype: str | ir.DataType | None) -> str | None:
    if dtype is None:
        return None
    if isinstance(dtype, ir.DataType):
        if dtype not in _IR_DTYPES:
            raise ValueError(f"dtype {dtype!r} is not a model dtype; expected FLOAT, FLOAT16 or BFLOAT16")
        return _IR_DTYPES[dtype]
    if isinstance(dtype, str):
        name = _DTYPES.get(dtype.lower())
        if name is None:
            raise ValueError(f"Unknown dtype {dtype!r}; expected 'f32', 'f16' or 'bf16'")
        return name
    raise TypeError(f"dtype must be a str or onnx_ir.DataType, not {type(dtype).__name__}")


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def _check_int(name: str, value: object, *, optional: bool = True) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def build(
    model_id: str | os.PathLike[str],
    task: str | None = None,
    *,
    dtype: str | ir.DataType | None = None,
    load_weights: bool = True,
    trust_remote_code: bool = False,
    execution_provider: str = "default",
    trace_optimization: bool = False,
    text_only: bool = False,
    revision: str | None = None,
    quant: str | None = None,
    quant_block_size: int = 32,
    quant_asymmetric: bool = False,
    quant_exclude: Iterable[str] = (),
    quant_embeddings: bool = False,
    accuracy_level: int | None = None,
    features: Iterable[str] = (),
    max_seq_len: int | None = None,
    kv_cache_scale_file: str | os.PathLike[str] | None = None,
    ep_file: str | os.PathLike[str] | None = None,
    assume_llama: bool = False,
    verify_rewrites: bool = False,
) -> ModelPackage:
    """Builds an ONNX model package from a checkpoint, optimized for one execution provider.

    The same pipeline as ``mobius build``, with the same arguments giving the same files:
    config.json is read, the portable graph built and optimized for the EP; weights are
    located and checked but only read by :meth:`ModelPackage.save`. The work runs in Rust with
    the GIL released; Ctrl-C raises ``KeyboardInterrupt`` and stops it.

    Args:
        model_id: A Hugging Face repo id (``"meta-llama/Llama-3.2-1B"``), looked up in the
            Hugging Face cache first (``HF_HUB_CACHE``, ``HF_HOME``) and downloaded
            otherwise (``HF_HUB_OFFLINE=1`` forbids it); or a local folder holding
            config.json and safetensors weights.
        task: ``None`` (the model's own task), ``"text-generation"`` for decoders or
            ``"feature-extraction"`` for encoders; any other value raises ``ValueError``.
        dtype: Model dtype: ``"f32"``, ``"f16"``, ``"bf16"`` (or their long names, or
            ``onnx_ir.DataType.FLOAT``/``FLOAT16``/``BFLOAT16``). ``None``: the
            checkpoint's (f32 when config.json does not say).
        load_weights: ``False`` builds the graph only (nothing but config.json is read or
            downloaded); :meth:`ModelPackage.save` then writes a zero-filled data file.
        trust_remote_code: Accepted for compatibility: mobius never runs checkpoint code,
            so ``True`` changes nothing.
        execution_provider: The EP the graph is optimized for: a name in
            :data:`mobius.ep_registry` (``"default"``, ``"cpu"``, ``"cuda"``, ``"dml"``,
            ``"webgpu"``, ``"trt-rtx"``, ``"onnx-standard"``, ...) or one registered with
            :func:`mobius.register_ep`. An unknown name raises ``ValueError`` before any work.
        trace_optimization: Log what each optimizer stage and rule group changed, as INFO
            ``[EP Trace]`` records on the ``mobius._optimizations`` logger.
        text_only: Accepted for compatibility: the models mobius builds are text-only
            already; ``True`` changes nothing.
        revision: Hub revision (branch, tag or commit) of a repo id.
        quant: ``"int4"`` or ``"int8"``: quantize the MatMul weights in blocks
            (``mobius build --quant``).
        quant_block_size: Rows per quantization block: 16, 32, 64, 128 or 256.
        quant_asymmetric: Unsigned values with a zero point per block.
        quant_exclude: Name patterns of weights kept in float (``*`` matches anything).
        quant_embeddings: Quantize the token-embedding tables too.
        accuracy_level: ``accuracy_level`` of ``MatMulNBits`` (0 to 4); ``None``: the EP's.
        features: Build features: ``"prune-lm-head"``, ``"static-cache"`` (with
            ``max_seq_len``), ``"fp8-kv-cache"``.
        max_seq_len: Cache slots of a ``"static-cache"`` build.
        kv_cache_scale_file: Per-layer scales (JSON) of an ``"fp8-kv-cache"`` build.
        ep_file: A TOML file describing a custom EP (``--ep-file``); it is registered and
            becomes the target unless ``execution_provider`` names another.
        assume_llama: Build an unregistered ``*ForCausalLM`` as llama when its config and
            tensors match the Llama layout exactly.
        verify_rewrites: Check every rewrite on concrete values while optimizing (slow).

    Returns:
        The :class:`ModelPackage` (one component, ``"model"``).

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: Unknown EP, dtype, task, quantization or feature; a config.json or
            checkpoint mobius cannot build (the message names the file and field).
        FileNotFoundError, OSError: The folder or a file is missing, or the model is not in
            the cache while offline.
        KeyboardInterrupt: Interrupted.
    """
    if not isinstance(model_id, (str, os.PathLike)):
        raise TypeError(f"model_id must be a str (repo id or folder), not {type(model_id).__name__}")
    model_id = os.fspath(model_id)
    if not model_id:
        raise ValueError("model_id is empty")
    if task is not None and not isinstance(task, str):
        raise TypeError(f"task must be a str or None, not {type(task).__name__}")
    if task not in _TASKS:
        raise ValueError(f"Unknown task {task!r}; mobius builds 'text-generation' and 'feature-extraction' models")
    dtype_name = _dtype_name(dtype)
    for name, value in (
        ("load_weights", load_weights),
        ("trust_remote_code", trust_remote_code),
        ("trace_optimization", trace_optimization),
        ("text_only", text_only),
        ("quant_asymmetric", quant_asymmetric),
        ("quant_embeddings", quant_embeddings),
        ("assume_llama", assume_llama),
        ("verify_rewrites", verify_rewrites),
    ):
        _check_bool(name, value)
    if not isinstance(execution_provider, str):
        raise TypeError(f"execution_provider must be a str, not {type(execution_provider).__name__}")
    if ep_file is None and execution_provider not in ep_registry:
        raise ValueError(
            f"Unknown execution provider {execution_provider!r}. "
            f"Registered: {sorted(ep_registry.names())}"
        )
    if quant is not None and quant not in ("int4", "int8"):
        raise ValueError(f"Unknown quant {quant!r}; expected 'int4' or 'int8'")
    if isinstance(features, str):
        features = [features]
    features = list(features)
    if not all(isinstance(f, str) for f in features):
        raise TypeError("features must be an iterable of str")
    quant_exclude = list(quant_exclude) if not isinstance(quant_exclude, str) else [quant_exclude]
    if not all(isinstance(p, str) for p in quant_exclude):
        raise TypeError("quant_exclude must be an iterable of str")
    if accuracy_level is not None and _check_int("accuracy_level", accuracy_level) > 4:
        raise ValueError(f"accuracy_level must be 0, 1, 2, 3 or 4, got {accuracy_level}")
    if max_seq_len is not None and _check_int("max_seq_len", max_seq_len) < 1:
        raise ValueError("max_seq_len must be at least 1")
    native = _mobius.build(
        model_id,
        revision=revision,
        dtype=dtype_name,
        load_weights=load_weights,
        execution_provider=execution_provider if ep_file is None or execution_provider != "default" else None,
        ep_file=None if ep_file is None else os.fspath(ep_file),
        trace=trace_optimization,
        quant=quant,
        quant_block_size=_check_int("quant_block_size", quant_block_size, optional=False),
        quant_asymmetric=quant_asymmetric,
        quant_exclude=quant_exclude,
        quant_embeddings=quant_embeddings,
        accuracy_level=_check_int("accuracy_level", accuracy_level),
        features=features,
        max_seq_len=_check_int("max_seq_len", max_seq_len),
        kv_cache_scale_file=None if kv_cache_scale_file is None else os.fspath(kv_cache_scale_file),
        assume_llama=assume_llama,
        verify_rewrites=verify_rewrites,
    )
    pkg = ModelPackage(native)
    role = pkg.config.role
    if task is not None and _TASK_ROLES[task] != role:
        article = "an" if role[0] in "aeiou" else "a"
        raise ValueError(
            f"task {task!r} does not fit {model_id}: mobius builds it as {article} {role} ({_ROLE_TASKS[role]!r})"
        )
    if trace_optimization:
        log_trace(native.trace())
    return pkg
