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
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

from workbench.errors import InfeasibleError, WorkbenchError, require_positive
from workbench.models import TransformerConfig
from workbench.schemes.base import Cluster, SchemeResult, Workload
from workbench.schemes.pipeline import (
    PipelinePlan,
    StageCoefficients,
    check_capacity,
    coefficients,
    evaluate_pipeline,
    plan_cost,
)

TIME_SCALE = 1e3  # the MILP works in milliseconds and MiB: coefficients near 1 keep HiGHS's tolerances meaningful
MIB = 2.0**20


@dataclass(frozen=True)
class PipelineProgram:
    """The MILP in HiGHS form: min c x s.t. lo <= A x <= hi, lb <= x <= ub; x = [a, o, z, u, h, w]."""

    c: np.ndarray
    A: csr_matrix
    lo: np.ndarray
    hi: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray
    n: int
    constant_s: float  # the objective's part no variable carries (the head), in seconds

    def columns(self, name: str) -> slice:
        """The columns of variable group `name` (a, o, z, u, h; w is the last column)."""
        k = "aozuh".index(name)
        return slice(k * self.n, (k + 1) * self.n)


def build_program(coef: StageCoefficients) -> PipelineProgram:
    """The pipeline MILP for these coefficients (see the module docstring)."""
    n, L = coef.n, coef.n_layers
    A_, O_, Z_, U_, H_ = (k * n for k in range(5))
    W_ = 5 * n
    n_var = W_ + 1
    c = np.zeros(n_var)
    ms = TIME_SCALE
    c[A_:A_ + n] = np.array(coef.compute_s) * ms
    c[O_:O_ + n] = np.array([r or 0.0 for r in coef.read_s]) * ms
    c[H_:H_ + n] = -1.0
    c[U_ + 1:U_ + n] = coef.handoff_s * ms
    c[W_] = coef.handoff_s * ms
    rows: list[tuple[int, int, float]] = []
    lo: list[float] = []
    hi: list[float] = []

    def add(terms, low, high):
        r = len(lo)
        rows.extend((r, j, v) for j, v in terms if v != 0)
        lo.append(low)
        hi.append(high)

    add([(A_ + i, 1.0) for i in range(n)], L, L)
    B, K = coef.layer_bytes / MIB, coef.kv_bytes / MIB
    for i in range(n):
        add([(O_ + i, 1.0), (A_ + i, -1.0)], -np.inf, 0)  # o_i <= a_i
        add([(O_ + i, 1.0), (Z_ + i, -float(L))], -np.inf, 0)  # o_i <= L z_i
        add([(Z_ + i, 1.0), (O_ + i, -1.0)], -np.inf, 0)  # z_i <= o_i
        add([(A_ + i, B + K), (O_ + i, -B), (Z_ + i, B)], -np.inf, (coef.budget_bytes[i] - coef.fixed_bytes[i]) / MIB)
        if coef.read_s[i] is not None:
            add([(H_ + i, 1.0), (Z_ + i, -coef.read_s[i] * ms)], -np.inf, 0)  # h_i <= r_i z_i
        p = coef.prev(i)
        if n > 1:
            add([(H_ + i, 1.0), (A_ + p, -coef.compute_s[p] * ms)], -np.inf, 0)  # h_i <= c_prev a_prev
        if i > 0:
            add([(A_ + i, 1.0), (U_ + i, -float(L))], -np.inf, 0)  # a_i <= L u_i
            add([(U_ + i, 1.0), (A_ + i, -1.0)], -np.inf, 0)  # u_i <= a_i
            add([(U_ + i, 1.0), (W_, -1.0)], -np.inf, 0)  # u_i <= w
    if n > 1:
        add([(W_, 1.0)] + [(U_ + i, -1.0) for i in range(1, n)], -np.inf, 0)  # w <= sum u
    r, j, v = zip(*rows)
    A = csr_matrix((v, (r, j)), shape=(len(lo), n_var))
    lb, ub = np.zeros(n_var), np.zeros(n_var)
    ub[A_:A_ + n] = L
    ub[O_:O_ + n] = [L if rate is not None else 0 for rate in coef.read_s]
    ub[Z_:Z_ + n] = [1 if rate is not None else 0 for rate in coef.read_s]
    ub[U_ + 1:U_ + n] = 1
    ub[H_:H_ + n] = [(rate or 0.0) * ms if n > 1 else 0.0 for rate in coef.read_s]
    ub[W_] = 1 if n > 1 else 0
    integrality = np.ones(n_var)
    integrality[H_:H_ + n] = 0
    return PipelineProgram(c, A, np.array(lo), np.array(hi), lb, ub, integrality, n, coef.head_s)


@dataclass(frozen=True)
class PipelineSolution:
    """The MILP's plan, its objective (the modelled latency, s) and solver statistics."""

    plan: PipelinePlan
    objective_s: float
    solve_s: float
    n_variables: int
    n_constraints: int


def solve_program(program: PipelineProgram, mip_rel_gap: float = 1e-9, time_limit_s: float = 30.0):
    """Run HiGHS on the program; the scipy result."""
    return milp(program.c, integrality=program.integrality, bounds=Bounds(program.lb, program.ub),
                constraints=LinearConstraint(program.A, program.lo, program.hi),
                options={"mip_rel_gap": mip_rel_gap, "time_limit": time_limit_s})


def plan_from_coefficients(coef: StageCoefficients, mip_rel_gap: float = 1e-9, time_limit_s: float = 30.0,
                           model_name: str = "the model") -> PipelineSolution:
    """Solve the pipeline MILP on precomputed coefficients; InfeasibleError names the binding constraint."""
    require_positive("mip_rel_gap", mip_rel_gap)
    require_positive("time_limit_s", time_limit_s)
    check_capacity(coef, model_name)
    program = build_program(coef)
    start = time.perf_counter()
    res = solve_program(program, mip_rel_gap, time_limit_s)
    elapsed = time.perf_counter() - start
    if res.x is None:  # check_capacity passed, so only a solver limit gets here
        raise InfeasibleError(f"infeasible: HiGHS found no plan within time_limit_s = {time_limit_s:g} s "
                              f"({res.message})")
    x = np.rint(res.x).astype(int)
    plan = PipelinePlan(tuple(int(v) for v in x[program.columns("a")]),
                        tuple(int(v) for v in x[program.columns("o")]))
    return PipelineSolution(plan, float(res.fun) / TIME_SCALE + program.constant_s, elapsed,
                            len(program.c), program.A.shape[0])


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
