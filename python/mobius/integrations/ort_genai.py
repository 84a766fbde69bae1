"""onnxruntime-genai: genai_config.json and tokenizer files for a built package."""

from __future__ import annotations

import os

from mobius._execution_providers import ep_registry
from mobius._model_package import ModelPackage

__all__ = ["write_ort_genai_config"]


def write_ort_genai_config(
    pkg: ModelPackage,
    directory: str | os.PathLike[str],
    *,
    hf_model_id: str | None = None,
    ep: str = "cpu",
    context_length: int = 4096,
    local_config_dir: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """Writes what onnxruntime-genai needs beside a saved model: genai_config.json for the EP
    ``ep`` and the checkpoint's tokenizer files. The model files themselves are written by
    :meth:`ModelPackage.save`, before or after.

    genai_config.json is the one ``mobius build`` writes (for the package's own EP,
    byte for byte what :meth:`ModelPackage.save` already put there); an existing one is
    replaced.

    Args:
        pkg: A package from :func:`mobius.build`.
        directory: The output folder (created if missing).
        hf_model_id: Where the tokenizer files come from: a Hugging Face repo id (the cache
            first, offline-aware, as :func:`mobius.build`) or a local checkpoint folder.
        ep: The EP whose session provider options are written (``"default"`` and
            ``"onnx-standard"`` mean ``"cpu"``).
        context_length: Accepted for compatibility. The written ``context_length`` and
            ``max_length`` are the model's ``max_position_embeddings`` (capped as the EP
            needs): the rotary tables hold no more positions.
        local_config_dir: A local checkpoint folder to take the tokenizer files from when
            ``hf_model_id`` is ``None``. With neither, no tokenizer file is copied.

    Returns:
        ``{"genai_config": path, "tokenizer.json": path, ...}`` for each file written.

    Raises:
        TypeError: ``pkg`` is not a :class:`ModelPackage`.
        ValueError: Unknown ``ep``, or a bad ``context_length``.
        OSError: The tokenizer source cannot be read (or is not in the cache while offline).
    """
    if not isinstance(pkg, ModelPackage):
        raise TypeError(f"pkg must be a mobius.ModelPackage, not {type(pkg).__name__}")
    if not isinstance(ep, str):
        raise TypeError(f"ep must be a str, not {type(ep).__name__}")
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 1:
        raise ValueError(f"context_length must be a positive int, got {context_length!r}")
    if ep in ("default", "onnx-standard"):
        ep = "cpu"
    if ep not in ep_registry:
        raise ValueError(f"Unknown execution provider {ep!r}. Registered: {sorted(ep_registry.names())}")
    source = hf_model_id if hf_model_id is not None else local_config_dir
    if source is not None and not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"hf_model_id / local_config_dir must be a str, not {type(source).__name__}")
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    written = pkg._native.write_genai_files(
        directory, ep, None if source is None else os.fspath(source)
    )
    return {key: os.fspath(path) for key, path in written}
