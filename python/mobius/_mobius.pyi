"""Type stubs of the native module (python/src/lib.rs); the public API is in the Python modules."""

from os import PathLike
from typing import Any

__version__: str

def ep_get(name: str) -> str | None: ...
def ep_names() -> list[str]: ...
def ep_check(fields: str) -> None: ...
def ep_register(fields: str, overwrite: bool) -> None: ...
def ep_register_file(path: str | PathLike[str]) -> str: ...

class Package:
    def save(
        self, out: str | PathLike[str], *, overwrite: bool = False, progress: bool = False
    ) -> dict[str, int]: ...
    def model_bytes(self) -> bytes: ...
    def trace(self) -> str: ...
    def info(self) -> dict[str, Any]: ...
    def write_genai_files(
        self, out: str | PathLike[str], ep: str, tokenizer_from: str | None = None
    ) -> list[tuple[str, str]]: ...

def build(
    model_id: str,
    *,
    revision: str | None = None,
    dtype: str | None = None,
    load_weights: bool = True,
    execution_provider: str | None = None,
    ep_file: str | PathLike[str] | None = None,
    trace: bool = False,
    quant: str | None = None,
    quant_block_size: int = 32,
    quant_asymmetric: bool = False,
    quant_exclude: list[str] = ...,
    quant_embeddings: bool = False,
    accuracy_level: int | None = None,
    features: list[str] = ...,
    max_seq_len: int | None = None,
    kv_cache_scale_file: str | PathLike[str] | None = None,
    assume_llama: bool = False,
    verify_rewrites: bool = False,
) -> Package: ...
def optimize(
    input: str | PathLike[str],
    out: str | PathLike[str],
    *,
    execution_provider: str = "default",
    dtype: str | None = None,
    role: str = "decoder",
    overwrite: bool = False,
    kv_cache: str = "as-is",
    quant: str | None = None,
    quant_block_size: int = 32,
    quant_asymmetric: bool = False,
    quant_exclude: list[str] = ...,
    quant_embeddings: bool = False,
    accuracy_level: int | None = None,
    trace: bool = False,
    verify_rewrites: bool = False,
) -> dict[str, Any]: ...
def verify_models(
    reference: str | PathLike[str],
    candidate: str | PathLike[str],
    *,
    dims: dict[str, int] = ...,
    samples: int = 3,
    seed: int = 0,
    random_mask: bool = False,
    atol: float | None = None,
    rtol: float | None = None,
) -> dict[str, Any]: ...
def cost(
    model: str | PathLike[str], *, execution_provider: str = "default", dims: dict[str, int] = ...
) -> str: ...
