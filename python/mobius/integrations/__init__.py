"""Integrations of mobius packages with runtimes (onnxruntime-genai)."""
