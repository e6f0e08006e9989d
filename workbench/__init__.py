"""Edge-inference workbench: models, cost models, partitioned JAX kernels and paper reproductions."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

from workbench.errors import InfeasibleError, WorkbenchError

__all__ = ["WorkbenchError", "InfeasibleError", "LAYERS", "MOVED"]
__version__ = "0.1.0"

# The packages of workbench/, bottom to top: a module may import only from its own layer or the ones before it
# (tests/test_layers.py; docs/development.md's layout block is generated from their docstrings by
# scripts/layout_doc.py). "schemes.planners" is a layer inside schemes: no scheme module imports a planner.
LAYERS = ("core", "report", "model", "machine", "schemes", "schemes.planners", "kernels", "papers", "scenarios",
          "measure", "studies")

# regroup: old module -> new module (written by scripts/regroup.py; one release of import shims)
MOVED: dict[str, str] = {
}
# regroup: end


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module by its name before the regroup (a key of MOVED) as the module at its new place, warning."""

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for `fullname` when it, or a package above it, is an old name in MOVED; else None."""
        if not fullname.startswith("workbench."):
            return None
        for old, new in MOVED.items():
            if fullname == old or fullname.startswith(old + "."):
                return importlib.machinery.ModuleSpec(fullname, self, origin=new + fullname[len(old):])
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        """The module at its new place (imported once; both names then name the same object)."""
        warnings.warn(f"{spec.name} moved to {spec.origin}; the old name goes in the next release",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(spec.origin)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the alias spec: put it back after
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run (the new module was executed when it was imported): give it back its own spec."""
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModuleFinder())  # first: an old package's submodule must not load twice
