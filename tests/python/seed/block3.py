from mobius import ep_registry, get_ep

# List all registered EP names
print(sorted(ep_registry))
# ['cpu', 'cuda', 'default', 'dml', 'onnx-standard', 'trt-rtx', 'webgpu']

# Inspect an EP's capabilities
caps = get_ep("cuda")
print(caps.gqa_dtypes)          # frozenset({FLOAT16, BFLOAT16})
print(caps.qkv_pack_dtypes)     # frozenset({FLOAT, FLOAT16, BFLOAT16})
print(caps.supports_fused_rope) # True
print(caps.provider_options)    # {'enable_cuda_graph': '0', ...}
