"""Writes the torch.onnx exports of single norms that tests/recognize.rs and
tests/ort/test_recognize.py optimize (developer tool: needs torch and transformers; CI never
runs it; the files are committed):

    python scripts/make_recognize_fixtures.py

tests/fixtures/recognize/
  rms_norm_dynamo.onnx         transformers' LlamaRMSNorm, f32, dynamo exporter (Pow, ReduceMean,
                               Add, Sqrt, Reciprocal, Mul x, Mul weight first)
  rms_norm_f16_legacy.onnx     the same in f16, TorchScript exporter (f32 Casts around the norm,
                               Constant nodes, rsqrt as Div(1, Sqrt))
  layer_norm_manual_dynamo.onnx  a LayerNorm written out by hand (mean, centre, variance, Div by
                               Sqrt, weight, bias), f32, dynamo exporter
All take x [batch, seq, 8] (batch and seq dynamic) and return y of the same shape, opset 18.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "recognize"
HIDDEN = 8


class RmsNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = LlamaRMSNorm(HIDDEN, eps=1e-6)
        self.norm.weight.data = torch.linspace(0.5, 2.0, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


class ManualLayerNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 2.0, HIDDEN))
        self.bias = torch.nn.Parameter(torch.linspace(-1.0, 1.0, HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        centred = x - mean
        var = centred.pow(2).mean(-1, keepdim=True)
        return centred / torch.sqrt(var + 1e-5) * self.weight + self.bias


def export(module: torch.nn.Module, dtype: torch.dtype, dynamo: bool, name: str) -> None:
    module = module.to(dtype).eval()
    x = torch.randn(2, 3, HIDDEN, dtype=dtype)
    path = OUT / name
    if dynamo:
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
        torch.onnx.export(module, (x,), str(path), dynamo=True, opset_version=18,
                          input_names=["x"], output_names=["y"],
                          dynamic_shapes={"x": {0: batch, 1: seq}}, external_data=False)
    else:
        torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=18,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})
    print("wrote", path)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    export(RmsNorm(), torch.float32, True, "rms_norm_dynamo.onnx")
    export(RmsNorm(), torch.float16, False, "rms_norm_f16_legacy.onnx")
    export(ManualLayerNorm(), torch.float32, True, "layer_norm_manual_dynamo.onnx")


if __name__ == "__main__":
    main()
