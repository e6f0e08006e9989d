"""The pipeline planner: layers per device and offloaded layers per device as a MILP (scipy.optimize.milp / HiGHS).

In the manner of prima.cpp's layer-to-device assignment for its piped ring (which prima.cpp solves with its
own scheduler, Halda; nothing of it is used here), on the cost model of `workbench.schemes.pipeline`. Per device i
(ring order, master = 0) the integer variables a_i (layers) and o_i (offloaded layers), binaries z_i (it
offloads: one staging buffer) and u_i (it is in the ring), one binary w (some worker is in the ring) and a
continuous h_i (its hidden read). With the coefficients of `pipeline.coefficients` (c_i, r_i, B, K, F_i, M_i):

    min  sum_i (c_i a_i + r_i o_i - h_i) + p (sum_{i>0} u_i + w) + head
    s.t. sum_i a_i = L;  o_i <= a_i;  z_i <= o_i <= L z_i;  o_i = 0 without a storage rate
         (a_i - o_i) B + z_i B + a_i K <= M_i - F_i                         (memory)
         u_i <= a_i <= L u_i,  u_i <= w <= sum u  (i > 0)                    (ring members, hand-offs)
         h_i <= r_i z_i,  h_i <= c_prev(i) a_prev(i)  (h_i = 0 on one device) (prefetch of one layer)

At the optimum h_i = min(r_i z_i, c_prev a_prev) and the hand-off count is the ring's, so the objective is
the evaluator's latency of the returned plan (checked in the tests to 1e-9 relative). Infeasible requests
are diagnosed before the solve (`pipeline.check_capacity`): the master's fixed part, or total memory + storage.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace

import numpy as np

from workbench.core.errors import InfeasibleError, WorkbenchError, require_positive
from workbench.core.units import MIB
from workbench.model.models import TransformerConfig
from workbench.schemes.base import Cluster, SchemeResult, Workload
from workbench.schemes.pipeline import (
    PipelinePlan,
    StageCoefficients,
    check_capacity,
    coefficients,
    evaluate_pipeline,
    plan_cost,
)
from workbench.schemes.planners.milp import MilpBuilder, MilpProgram

TIME_SCALE = 1e3  # the MILP works in milliseconds and MiB: coefficients near 1 keep HiGHS's tolerances meaningful


def _variables(m: MilpBuilder, coef: StageCoefficients) -> None:
    """a, o, z, u (integers), h (continuous), w (binary) with their bounds: the columns, in this order."""
    n, L, ms = coef.n, coef.n_layers, TIME_SCALE
    m.add_variable("a", n, ub=L, integer=True)
    m.add_variable("o", n, ub=[L if rate is not None else 0 for rate in coef.read_s], integer=True)
    m.add_variable("z", n, ub=[1 if rate is not None else 0 for rate in coef.read_s], integer=True)
    m.add_variable("u", n, ub=[0] + [1] * (n - 1), integer=True)  # u_0: the master is always in the ring
    m.add_variable("h", n, ub=[(rate or 0.0) * ms if n > 1 else 0.0 for rate in coef.read_s])
    m.add_variable("w", ub=1 if n > 1 else 0, integer=True)


def _objective(m: MilpBuilder, coef: StageCoefficients) -> None:
    """sum_i (c_i a_i + r_i o_i - h_i) + p (sum_{i>0} u_i + w), in ms (the head is added after the solve)."""
    n, ms = coef.n, TIME_SCALE
    m.add_cost("a", np.array(coef.compute_s) * ms)
    m.add_cost("o", np.array([r or 0.0 for r in coef.read_s]) * ms)
    m.add_cost("h", -1.0)
    m.add_cost("u", [0.0] + [coef.handoff_s * ms] * (n - 1))
    m.add_cost("w", coef.handoff_s * ms)


def _device_rows(m: MilpBuilder, coef: StageCoefficients, i: int) -> None:
    """Device i's offload, memory, prefetch and ring-membership constraints (see the module docstring)."""
    n, L, ms = coef.n, coef.n_layers, TIME_SCALE
    B, K = coef.layer_bytes / MIB, coef.kv_bytes / MIB
    a, o, z, u, h = (("a", i), ("o", i), ("z", i), ("u", i), ("h", i))
    m.add_constraint([(o, 1.0), (a, -1.0)], high=0)  # o_i <= a_i
    m.add_constraint([(o, 1.0), (z, -float(L))], high=0)  # o_i <= L z_i
    m.add_constraint([(z, 1.0), (o, -1.0)], high=0)  # z_i <= o_i
    m.add_constraint([(a, B + K), (o, -B), (z, B)], high=(coef.budget_bytes[i] - coef.fixed_bytes[i]) / MIB)
    if coef.read_s[i] is not None:
        m.add_constraint([(h, 1.0), (z, -coef.read_s[i] * ms)], high=0)  # h_i <= r_i z_i
    p = coef.prev(i)
    if n > 1:
        m.add_constraint([(h, 1.0), (("a", p), -coef.compute_s[p] * ms)], high=0)  # h_i <= c_prev a_prev
    if i > 0:
        m.add_constraint([(a, 1.0), (u, -float(L))], high=0)  # a_i <= L u_i
        m.add_constraint([(u, 1.0), (a, -1.0)], high=0)  # u_i <= a_i
        m.add_constraint([(u, 1.0), ("w", -1.0)], high=0)  # u_i <= w


def build_program(coef: StageCoefficients) -> MilpProgram:
    """The pipeline MILP for these coefficients (see the module docstring); columns a, o, z, u, h, w."""
    m = MilpBuilder()
    _variables(m, coef)
    _objective(m, coef)
    m.add_constraint(m.sum_of("a"), coef.n_layers, coef.n_layers)
    for i in range(coef.n):
        _device_rows(m, coef, i)
    if coef.n > 1:
        m.add_constraint([("w", 1.0)] + m.sum_of("u", -1.0, range(1, coef.n)), high=0)  # w <= sum u
    return m.build()


@dataclass(frozen=True)
class PipelineSolution:
    """The MILP's plan, its objective (the modelled latency, s) and solver statistics."""

    plan: PipelinePlan
    objective_s: float
    solve_s: float
    n_variables: int
    n_constraints: int


def plan_from_coefficients(coef: StageCoefficients, mip_rel_gap: float = 1e-9, time_limit_s: float = 30.0,
                           model_name: str = "the model") -> PipelineSolution:
    """Solve the pipeline MILP on precomputed coefficients; InfeasibleError names the binding constraint."""
    require_positive("mip_rel_gap", mip_rel_gap)
    require_positive("time_limit_s", time_limit_s)
    check_capacity(coef, model_name)
    program = build_program(coef)
    start = time.perf_counter()
    res = program.solve(mip_rel_gap, time_limit_s)
    elapsed = time.perf_counter() - start
    if not res.found:  # check_capacity passed, so only a solver limit gets here
        raise InfeasibleError(f"infeasible: HiGHS found no plan within time_limit_s = {time_limit_s:g} s "
                              f"({res.message})")
    plan = PipelinePlan(tuple(int(v) for v in np.rint(res.value("a")).astype(int)),
                        tuple(int(v) for v in np.rint(res.value("o")).astype(int)))
    return PipelineSolution(plan, res.objective / TIME_SCALE + coef.head_s, elapsed,
                            program.n_variables, program.n_constraints)


def plan_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload, mip_rel_gap: float = 1e-9,
                  time_limit_s: float = 30.0) -> PipelineSolution:
    """The latency-optimal pipeline plan for `workload` (decode: time per token) on the cluster."""
    return plan_from_coefficients(coefficients(model, cluster, workload), mip_rel_gap, time_limit_s, model.name)


def evaluate_planned(model: TransformerConfig, cluster: Cluster, workload: Workload,
                     plan_workload: Workload | None = None) -> SchemeResult:
    """The pipeline scheme on the MILP's plan (made for `plan_workload`, default the decode step of `workload`)."""
    if plan_workload is None:
        plan_workload = replace(workload, phase="decode")
    solution = plan_pipeline(model, cluster, plan_workload)
    return evaluate_pipeline(model, cluster, workload, solution.plan, scheme="pipeline_offload_milp")


# ---- brute force (validation on small instances) --------------------------------------------------
def compositions(total: int, parts: int):
    """Every way to write `total` as `parts` ordered non-negative integers."""
    for cuts in itertools.combinations_with_replacement(range(total + 1), parts - 1):
        yield tuple(int(v) for v in np.diff([0, *cuts, total]))


def brute_force(coef: StageCoefficients, max_candidates: int = 1_000_000) -> tuple[PipelinePlan, float]:
    """The best plan by enumerating every split and every offload count that fits memory (small instances)."""
    plans = []
    for layers in compositions(coef.n_layers, coef.n):
        ranges = [range(a + 1) if coef.read_s[i] is not None else range(1) for i, a in enumerate(layers)]
        for off in itertools.product(*ranges):
            plans.append(PipelinePlan(layers, off))
            if len(plans) > max_candidates:
                raise WorkbenchError(f"brute force would try more than {max_candidates} plans; allowed up to "
                                     f"max_candidates = {max_candidates}")
    best, best_s = None, np.inf
    for candidate in plans:
        cost = plan_cost(coef, candidate)
        if not cost.oom and cost.latency_s < best_s:
            best, best_s = candidate, cost.latency_s
    if best is None:
        raise InfeasibleError("infeasible: no plan fits every device's memory")
    return best, float(best_s)
