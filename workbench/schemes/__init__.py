"""The schemes layer: who computes and who sends what (the papers' and the engines' schemes), costed on the model
and machine layers; planners/ is the layer above it inside this folder.

Each paper contributes `workbench/schemes/<paper>.py` with evaluator functions of the form
``evaluate_<scheme>(model, cluster, workload) -> SchemeResult`` and registers them with `register`, which files
a `SchemeSpec` in the one catalogue (`SCHEMES`, returned by `load_all`; `workbench.schemes.catalogue`), so the
arena runs every scheme through one cost model and callers ask the catalogue what each scheme is.
"""

from workbench.schemes.base import SCHEMES, Cluster, SchemeResult, Workload, load_all, register, spec_of
from workbench.schemes.catalogue import SchemeSpec

__all__ = ["SCHEMES", "Cluster", "SchemeResult", "SchemeSpec", "Workload", "load_all", "register", "spec_of"]
