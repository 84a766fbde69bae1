"""Type stubs of the public API (the modules themselves are annotated too)."""

from mobius import integrations as integrations
from mobius._builder import build as build
from mobius._execution_providers import EpCapabilities as EpCapabilities
from mobius._execution_providers import EpRegistry as EpRegistry
from mobius._execution_providers import ep_registry as ep_registry
from mobius._execution_providers import get_ep as get_ep
from mobius._execution_providers import register_ep as register_ep
from mobius._model_package import ModelPackage as ModelPackage
from mobius._tools import cost as cost
from mobius._tools import optimize as optimize
from mobius._tools import verify as verify

__version__: str
__all__: list[str]
