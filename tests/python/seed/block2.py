import logging
import mobius

logging.basicConfig(level=logging.INFO)

pkg = mobius.build(
    "meta-llama/Llama-3.2-1B",
    execution_provider="cuda",
    dtype="f16",
    load_weights=False,       # skip download for diagnostics
    trace_optimization=True,
)
