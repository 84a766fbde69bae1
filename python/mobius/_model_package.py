""":class:`ModelPackage`: what :func:`mobius.build` returns."""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import onnx_ir as ir

from mobius import _mobius

__all__ = ["ModelPackage"]


class ModelPackage(Mapping[str, ir.Model]):
    """A built model: a mapping from component name to ``onnx_ir.Model`` (``"model"`` for the
    single component mobius builds), plus the architecture in :attr:`config`.

    The graph lives in the Rust library; ``pkg["model"]`` converts it to an ``onnx_ir.Model``
    on first access (its weight initializers are declared as external data in
    ``model.onnx.data`` and are not readable until the package is saved). :meth:`save`
    streams the weights from the checkpoint in Rust, as ``mobius build`` does.

    Attributes:
        config: The normalised architecture (``model_type``, ``hidden_size``,
            ``num_hidden_layers``, ``vocab_size``, ``bos_token_id``, ``eos_token_id``, ...),
            read-only.
        execution_provider: The name of the EP the graph was optimized for.
        dtype: The model dtype (``"f32"``, ``"f16"`` or ``"bf16"``).
    """

    def __init__(self, native: Any) -> None:
        self._native = native
        info = native.info()
        self.execution_provider: str = info.pop("execution_provider")
        self.dtype: str = info.pop("dtype")
        self._counts = (info.pop("nodes"), info.pop("initializers"))
        self.config = types.SimpleNamespace(**info)
        self._model: ir.Model | None = None

    # Mapping ---------------------------------------------------------------------------------

    def __getitem__(self, name: str) -> ir.Model:
        if name != "model":
            raise KeyError(name)
        if self._model is None:
            import onnx

            proto = onnx.ModelProto.FromString(self._native.model_bytes())
            self._model = ir.serde.deserialize_model(proto)
        return self._model

    def __iter__(self) -> Iterator[str]:
        return iter(("model",))

    def __len__(self) -> int:
        return 1

    def __repr__(self) -> str:
        nodes, inits = self._counts
        return (
            f"ModelPackage({{'model'}}, execution_provider={self.execution_provider!r}, "
            f"dtype={self.dtype!r}, nodes={nodes}, initializers={inits})"
        )

    # Saving ----------------------------------------------------------------------------------

    def save(
        self,
        directory: str | os.PathLike[str],
        *,
        external_data: str = "onnx",
        max_shard_size_bytes: int | None = None,
        components: Callable[[str], bool] | None = None,
        progress_bar: bool = True,
        check_weights: bool = True,
        overwrite: bool = False,
    ) -> None:
        """Writes the package into ``directory``: exactly the files ``mobius build`` writes
        (model.onnx, model.onnx.data, genai_config.json for decoders, the checkpoint's
        tokenizer files), byte for byte.

        The weights are streamed from the checkpoint in Rust with the GIL released. The write
        is atomic: the files are staged beside ``directory`` and moved into place at the end,
        so a failed or interrupted save (Ctrl-C raises ``KeyboardInterrupt``) leaves nothing.

        Args:
            directory: The output folder; it may exist only if empty (or with ``overwrite``).
            external_data: ``"onnx"`` (weights in ``model.onnx.data``), the only layout
                mobius writes.
            max_shard_size_bytes: Accepted for compatibility; must be ``None`` (one data file).
            components: Optional predicate on component names; the single component
                ``"model"`` must be selected.
            progress_bar: Show a progress bar on stderr (only when it is a terminal).
            check_weights: Accepted for compatibility; a package built with
                ``load_weights=False`` is saved with a zero-filled placeholder data file,
                as ``mobius build --no-weights`` writes it.
            overwrite: Replace a non-empty output folder.

        Raises:
            ValueError: An unsupported ``external_data`` layout or sharding is asked for.
            OSError: The folder cannot be used (not empty, inside the checkpoint, ...) or
                writing failed; the message names the path.
            KeyboardInterrupt: Interrupted; nothing was written.
        """
        if external_data != "onnx":
            raise ValueError(
                f"Unknown external_data format {external_data!r}: mobius writes 'onnx' "
                "(weights in model.onnx.data)"
            )
        if max_shard_size_bytes is not None:
            raise ValueError("max_shard_size_bytes: mobius writes one model.onnx.data file")
        if components is not None and not components("model"):
            return
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a path, not {type(directory).__name__}")
        del check_weights
        self._native.save(os.fspath(directory), overwrite=bool(overwrite), progress=bool(progress_bar))
