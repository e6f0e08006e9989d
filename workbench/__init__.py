"""Edge-inference workbench: models, cost models, partitioned JAX kernels and paper reproductions."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

from workbench.core.errors import InfeasibleError, WorkbenchError

__all__ = ["WorkbenchError", "InfeasibleError", "LAYERS", "MOVED"]
__version__ = "0.1.0"

# The packages of workbench/, bottom to top: a module may import only from its own layer or the ones before it
# (tests/test_layers.py; docs/development.md's layout block is generated from their docstrings by
# scripts/layout_doc.py). "schemes.planners" is a layer inside schemes: no scheme module imports a planner.
LAYERS = ("core", "report", "model", "machine", "schemes", "schemes.planners", "kernels", "papers", "scenarios",
          "measure", "studies")

# regroup: old module -> new module (written by scripts/regroup.py; one release of import shims)
MOVED: dict[str, str] = {
    "workbench.errors": "workbench.core.errors",
    "workbench.units": "workbench.core.units",
    "workbench.fields": "workbench.core.fields",
    "workbench.io": "workbench.core.io",
    "workbench.constants": "workbench.core.constants",
    "workbench.simulate": "workbench.core.simulate",
    "workbench.apportion": "workbench.core.apportion",
    "workbench.results": "workbench.report.results",
    "workbench.display": "workbench.report.display",
    "workbench.chartcheck": "workbench.report.chartcheck",
    "workbench.livechart": "workbench.report.livechart",
    "workbench.prose": "workbench.report.prose",
    "workbench.fidelity": "workbench.report.fidelity",
    "workbench.runner": "workbench.report.runner",
    "workbench.models": "workbench.model.models",
    "workbench.formats": "workbench.model.formats",
    "workbench.routing": "workbench.model.routing",
    "workbench.modelfile": "workbench.model.modelfile",
    "workbench.hardware": "workbench.machine.hardware",
    "workbench.network": "workbench.machine.network",
    "workbench.kernel_cost": "workbench.machine.kernel_cost",
    "workbench.quantize": "workbench.schemes.sti_quantize",
    "workbench.shards": "workbench.schemes.sti_shards",
    "workbench.planners": "workbench.schemes.planners",
    "workbench.accelerator": "workbench.kernels.accelerator",
    "workbench.minilm": "workbench.papers.sti_minilm",
    "workbench.golden": "workbench.papers.golden",
    "workbench.userconfig": "workbench.scenarios.userconfig",
    "workbench.arena": "workbench.scenarios.arena",
    "workbench.arena_charts": "workbench.scenarios.arena_charts",
    "workbench.speculative": "workbench.scenarios.speculative",
    "workbench.moe_advice": "workbench.scenarios.moe_advice",
    "workbench.scaling": "workbench.scenarios.scaling",
    "workbench.regimes": "workbench.scenarios.regimes",
    "workbench.llamabench": "workbench.scenarios.llamabench",
    "workbench.calibrate": "workbench.scenarios.calibrate",
    "workbench.whatif": "workbench.scenarios.whatif",
    "workbench.explore": "workbench.scenarios.explore",
    "workbench.cluster": "workbench.measure.cluster",
    "workbench.engines": "workbench.measure.engines",
    "workbench.profile": "workbench.measure.profile",
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
