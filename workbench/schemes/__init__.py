"""Partition schemes: who computes and who sends what, costed on the shared hardware/network core.

Each paper contributes `workbench/schemes/<paper>.py` with evaluator functions of the form
``evaluate_<scheme>(model, cluster, workload) -> SchemeResult`` and registers them in `SCHEMES`
(via `register`), so the arena runs every scheme through one cost model.
"""

from workbench.schemes.base import SCHEMES, Cluster, SchemeResult, Workload, load_all, register

__all__ = ["SCHEMES", "Cluster", "SchemeResult", "Workload", "load_all", "register"]
