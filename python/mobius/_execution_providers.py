"""Execution providers: :class:`EpCapabilities` and the process-wide registry.

The registry is the Rust library's own (the one ``mobius build --ep-file`` registers into), so
an EP registered here is what ``build(execution_provider=...)`` optimizes for, and the built-in
EPs are those ``mobius list eps`` prints.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import onnx_ir as ir

from mobius import _mobius

__all__ = ["EpCapabilities", "EpRegistry", "ep_registry", "get_ep", "register_ep"]

#: The model dtypes an EP's dtype sets may hold, and their short names in the library.
_DTYPE_NAMES: dict[ir.DataType, str] = {
    ir.DataType.FLOAT: "f32",
    ir.DataType.FLOAT16: "f16",
    ir.DataType.BFLOAT16: "bf16",
}
_DTYPES_BY_NAME = {name: dtype for dtype, name in _DTYPE_NAMES.items()}
# The fields that hold sets of model dtypes.
_DTYPE_SET_FIELDS = ("gqa_dtypes", "qkv_pack_dtypes", "dtypes")

#: ``mobius-onnx`` fields that change nothing in a mobius build (``PackedMultiHeadAttention`` is
#: never built, no buffer is split by size, no graph is rewritten for graph capture), with the
#: defaults they keep; another value is accepted with a warning and not passed to the library.
_FIELDS_WITHOUT_EFFECT: dict[str, Any] = {
    "supports_packed_multi_head_attention": False,
    "max_buffer_size": None,
    "requires_graph_capture_rewrite": False,
}

_BOOL_FIELDS = (
    "supports_fused_rope",
    "supports_skip_layer_norm",
    "supports_fused_moe",
    "supports_packed_multi_head_attention",
    "supports_rank4_rmsnorm",
    "supports_attention",
    "supports_matmul_nbits",
    "supports_rotary_embedding",
    "supports_tensor_scatter",
    "supports_range",
    "enable_graph_capture",
    "supports_past_present_share_buffer",
    "cap_kv_buffer_max_length",
    "requires_graph_capture_rewrite",
    "supports_contrib_ops",
    "supports_fp8_kv_cache",
)


@dataclasses.dataclass(frozen=True)
class EpCapabilities:
    """What one ONNX Runtime execution provider runs; the optimizer's only EP knowledge.

    The fields up to ``requires_graph_capture_rewrite`` are those of ``mobius-onnx`` 0.1.0,
    with its defaults; the last six are mobius' own. A ``supports_X`` flag set to ``False``
    makes the optimizer rewrite X into operators the EP runs.

    Attributes:
        name: The EP's name (lowercase letters, digits, ``-``, ``_``, ``.``).
        gqa_dtypes: Model dtypes (``onnx_ir.DataType``) for which attention is fused into
            ``com.microsoft::GroupQueryAttention``.
        qkv_pack_dtypes: Model dtypes for which Q, K and V are packed into one GQA input;
            must be empty when ``supports_fused_rope`` is ``False``.
        supports_fused_rope: GQA applies rotary embeddings itself (``False``: RoPE is
            separated again and QKV unpacked).
        supports_skip_layer_norm: ``SkipLayerNormalization`` / ``SkipSimplifiedLayerNormalization``
            (and ``BiasGelu``/``FastGelu``) are fused.
        supports_fused_moe: Mixture-of-experts blocks run as one ``com.microsoft::MoE``.
        supports_packed_multi_head_attention: Accepted for ``mobius-onnx`` compatibility;
            no effect (``PackedMultiHeadAttention`` is never built), a warning when ``True``.
        supports_rank4_rmsnorm: RMS normalization may run on rank-4 inputs.
        supports_attention: The opset-24 ``Attention`` op runs (``False``: decomposed).
        supports_matmul_nbits: ``com.microsoft::MatMulNBits`` runs (``False``: QDQ + MatMul).
        supports_rotary_embedding: ``RotaryEmbedding`` runs (``False``: decomposed).
        supports_tensor_scatter: ``TensorScatter`` runs (``False``: ``ScatterND``).
        supports_range: ``Range`` runs.
        default_int4_accuracy_level: ``accuracy_level`` of 4-bit ``MatMulNBits`` (0 to 4;
            0 leaves it unset).
        provider_options: Session provider options written to genai_config.json (strings;
            never the graph-capture keys, which ``enable_graph_capture`` sets).
        enable_graph_capture: Graph capture (CUDA graphs, WebGPU graph capture) is enabled.
        supports_past_present_share_buffer: Past and present KV caches may share one buffer
            (genai_config.json asks for it when the decoder's attention is GQA throughout).
        cap_kv_buffer_max_length: The shared buffer's ``max_length`` is capped at 4096 tokens
            (needs ``supports_past_present_share_buffer``).
        max_buffer_size: Accepted for ``mobius-onnx`` compatibility; no effect (no buffer is
            split by size), a warning when set.
        requires_graph_capture_rewrite: Accepted for ``mobius-onnx`` compatibility; no effect
            (``enable_graph_capture`` sets the provider options), a warning when ``True``.
        supports_contrib_ops: The EP runs ``com.microsoft`` ops at all (``False``: every
            contrib op is expanded into standard ONNX).
        supports_fp8_kv_cache: The KV cache may be stored as float8.
        dtypes: Model dtypes the EP's runtime executes: ``build`` refuses another
            (``ValueError``) before any work.
        default_dtype: The model dtype of a ``build`` that names none (one of ``dtypes``).
        cost: Roofline parameters of the cost model (``launch_overhead_us``,
            ``memory_bandwidth_gbps``, ``peak_tflops_f32``, ``peak_tflops_f16``,
            ``prefill_tokens``); ``None`` or missing keys: the ``default`` EP's.
        cost_ops: Per-op corrections of the roofline, ``{"MatMul": {"overhead_us": 2.0,
            "scale": 1.1}}``.

    Raises:
        TypeError: A field has the wrong type (or an unknown field is given).
        ValueError: The combination breaks a rule (the library's own check, naming the field).
    """

    name: str
    gqa_dtypes: frozenset[ir.DataType] = dataclasses.field(default_factory=frozenset)
    qkv_pack_dtypes: frozenset[ir.DataType] = dataclasses.field(default_factory=frozenset)
    supports_fused_rope: bool = True
    supports_skip_layer_norm: bool = True
    supports_fused_moe: bool = True
    supports_packed_multi_head_attention: bool = False
    supports_rank4_rmsnorm: bool = True
    supports_attention: bool = True
    supports_matmul_nbits: bool = True
    supports_rotary_embedding: bool = True
    supports_tensor_scatter: bool = True
    supports_range: bool = True
    default_int4_accuracy_level: int = 0
    provider_options: dict[str, str] = dataclasses.field(default_factory=dict)
    enable_graph_capture: bool = False
    supports_past_present_share_buffer: bool = False
    cap_kv_buffer_max_length: bool = False
    max_buffer_size: int | None = None
    requires_graph_capture_rewrite: bool = False
    supports_contrib_ops: bool = True
    supports_fp8_kv_cache: bool = False
    dtypes: frozenset[ir.DataType] = dataclasses.field(
        default_factory=lambda: frozenset(_DTYPE_NAMES)
    )
    default_dtype: ir.DataType = ir.DataType.FLOAT
    cost: Mapping[str, float] | None = None
    cost_ops: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise TypeError(f"EpCapabilities.name must be a str, not {type(self.name).__name__}")
        for field in _DTYPE_SET_FIELDS:
            value = getattr(self, field)
            if not isinstance(value, (set, frozenset)):
                raise TypeError(
                    f"EpCapabilities({self.name!r}).{field} must be a frozenset of "
                    f"onnx_ir.DataType, not {type(value).__name__}"
                )
            for dtype in value:
                if dtype not in _DTYPE_NAMES:
                    raise ValueError(
                        f"EpCapabilities({self.name!r}).{field}: {dtype!r} is not a model dtype; "
                        "expected onnx_ir.DataType.FLOAT, FLOAT16 or BFLOAT16"
                    )
            object.__setattr__(self, field, frozenset(ir.DataType(d) for d in value))
        if self.default_dtype not in _DTYPE_NAMES:
            raise ValueError(
                f"EpCapabilities({self.name!r}).default_dtype: {self.default_dtype!r} is not a "
                "model dtype; expected onnx_ir.DataType.FLOAT, FLOAT16 or BFLOAT16"
            )
        object.__setattr__(self, "default_dtype", ir.DataType(self.default_dtype))
        for field in _BOOL_FIELDS:
            if not isinstance(getattr(self, field), bool):
                raise TypeError(
                    f"EpCapabilities({self.name!r}).{field} must be a bool, "
                    f"not {type(getattr(self, field)).__name__}"
                )
        level = self.default_int4_accuracy_level
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(
                f"EpCapabilities({self.name!r}).default_int4_accuracy_level must be an int"
            )
        size = self.max_buffer_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
            raise TypeError(f"EpCapabilities({self.name!r}).max_buffer_size must be an int or None")
        if not isinstance(self.provider_options, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.provider_options.items()
        ):
            raise TypeError(
                f"EpCapabilities({self.name!r}).provider_options must be a dict of str to str"
            )
        if self.cost is not None and not isinstance(self.cost, Mapping):
            raise TypeError(f"EpCapabilities({self.name!r}).cost must be a dict or None")
        # As an EP file without `base`: parameters not given are the `default` EP's.
        cost = dict(json.loads(_mobius.ep_get("default") or "{}").get("cost", {}))
        cost.update(self.cost or {})
        object.__setattr__(self, "cost", cost)
        if not isinstance(self.cost_ops, Mapping):
            raise TypeError(f"EpCapabilities({self.name!r}).cost_ops must be a dict")
        for field, default in _FIELDS_WITHOUT_EFFECT.items():
            if getattr(self, field) != default:
                warnings.warn(
                    f"EpCapabilities({self.name!r}).{field} has no effect in mobius (accepted for "
                    "compatibility with mobius-onnx)",
                    UserWarning,
                    stacklevel=3,
                )
        _mobius.ep_check(self._to_json())

    def _to_json(self) -> str:
        """The fields as the library reads them (dtype sets by short name)."""
        fields: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in _FIELDS_WITHOUT_EFFECT
        }
        for field in _DTYPE_SET_FIELDS:
            fields[field] = sorted(_DTYPE_NAMES[d] for d in fields[field])
        fields["default_dtype"] = _DTYPE_NAMES[self.default_dtype]
        fields["provider_options"] = dict(self.provider_options)
        fields["cost"] = dict(self.cost or {})
        fields["cost_ops"] = {op: dict(c) for op, c in self.cost_ops.items()}
        try:
            return json.dumps(fields, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"EpCapabilities({self.name!r}): {e}") from None

    @classmethod
    def _from_json(cls, text: str) -> EpCapabilities:
        """The capabilities the library holds, from its JSON."""
        fields = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        for field in _DTYPE_SET_FIELDS:
            fields[field] = frozenset(_DTYPES_BY_NAME[n] for n in fields[field])
        fields["default_dtype"] = _DTYPES_BY_NAME[fields["default_dtype"]]
        fields.setdefault("cost_ops", {})
        return cls(**{k: v for k, v in fields.items() if k in names})


class EpRegistry:
    """The registered execution providers, by name: a read-only mapping-like view of the
    library's registry (built-ins first, then registrations in order)."""

    def register(self, caps: EpCapabilities, *, overwrite: bool = False) -> None:
        """Registers ``caps`` under ``caps.name``.

        Args:
            caps: The capabilities.
            overwrite: Replace an EP of that name (built-ins included).

        Raises:
            TypeError: ``caps`` is not an :class:`EpCapabilities`.
            ValueError: The name is registered and ``overwrite`` is ``False``.
        """
        if not isinstance(caps, EpCapabilities):
            raise TypeError(f"register() takes an EpCapabilities, not {type(caps).__name__}")
        _mobius.ep_register(caps._to_json(), bool(overwrite))

    def get(self, name: str, default: EpCapabilities | None = None) -> EpCapabilities | None:
        """The capabilities registered as ``name``, or ``default``."""
        if not isinstance(name, str):
            return default
        text = _mobius.ep_get(name)
        return default if text is None else EpCapabilities._from_json(text)

    def require(self, name: str) -> EpCapabilities:
        """The capabilities registered as ``name``.

        Raises:
            ValueError: No EP has that name (the message lists the registered ones).
        """
        caps = self.get(name)
        if caps is None:
            raise ValueError(
                f"Unknown execution provider {name!r}. Registered: {sorted(self.names())}"
            )
        return caps

    def names(self) -> frozenset[str]:
        """The registered names."""
        return frozenset(_mobius.ep_names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in _mobius.ep_names()

    def __iter__(self) -> Iterator[str]:
        return iter(_mobius.ep_names())

    def __len__(self) -> int:
        return len(_mobius.ep_names())

    def __repr__(self) -> str:
        return f"EpRegistry({_mobius.ep_names()!r})"


#: The process-wide registry (the Rust library's).
ep_registry = EpRegistry()


def register_ep(caps: EpCapabilities, *, overwrite: bool = False) -> None:
    """Registers ``caps`` in :data:`ep_registry` (see :meth:`EpRegistry.register`)."""
    ep_registry.register(caps, overwrite=overwrite)


def get_ep(name: str) -> EpCapabilities:
    """The capabilities registered as ``name``.

    Raises:
        ValueError: No EP has that name (the message lists the registered ones).
    """
    return ep_registry.require(name)
