"""mobius: Hugging Face checkpoints to ONNX models tuned for an ONNX Runtime execution provider.

The Python API of ``mobius-onnx`` 0.1.0 (:func:`build`, :class:`ModelPackage`,
:data:`ep_registry`, :func:`get_ep`, :func:`register_ep`, :class:`EpCapabilities`,
:func:`mobius.integrations.ort_genai.write_ort_genai_config`) over the mobius Rust library,
plus :func:`optimize`, :func:`verify` and :func:`cost`. See docs/python.md.
"""

from __future__ import annotations

from mobius import integrations
from mobius._builder import build
from mobius._execution_providers import EpCapabilities, EpRegistry, ep_registry, get_ep, register_ep
from mobius._mobius import __version__
from mobius._model_package import ModelPackage
from mobius._tools import cost, optimize, verify

__all__ = [
    "EpCapabilities",
    "EpRegistry",
    "ModelPackage",
    "build",
    "cost",
    "ep_registry",
    "get_ep",
    "integrations",
    "optimize",
    "register_ep",
    "verify",
]
