"""Edge-inference workbench: models, cost models, partitioned JAX kernels and paper reproductions."""

from workbench.errors import InfeasibleError, WorkbenchError

__all__ = ["WorkbenchError", "InfeasibleError"]
__version__ = "0.1.0"
