"""Hepti's dynamic workload partitioning (Sec. 4.3): problem P2 as a MILP (scipy.optimize.milp / HiGHS).

P2 on a fixed device set N: choose split sizes a_{d,i} (integers, Eq. 1-2; lambda_{d,i} = a_{d,i} /
dim_d is Eq. 9-10's share) minimising T = layers x sum_b [max_i Tc_bi + Tx_b] (Eq. 5-7, the affine
cost of `workbench.schemes.hepti.linear_cost`, max_i by epigraph variables) subject to the memory
budgets r_i <= s_i (Eq. 3-4) and T <= D. By default head units are integer and the other shares are
the paper's continuous lambda, rounded afterwards (largest remainder keeps Eq. 1 exact);
``integrality="all"`` makes every a_i integer, ``"none"`` is the paper's pure linear approximation.

The algorithm (Sec. 4.3): with no secondary device available, run serially; otherwise pick the mode
(WS when every device can hold WS's replicated weights, else 1D-tiled below `threshold` devices and
2D-tiled from it on), solve, drop devices that got nothing (lambda_i = 0) and re-solve, round. The
2D mode solves the same problem twice, once per grid axis, on grid rows / columns as aggregate devices.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np

from workbench.core.apportion import largest_remainder
from workbench.core.errors import (
    InfeasibleError,
    WorkbenchError,
    require_choice,
    require_int,
    require_positive,
)
from workbench.core.units import MIB
from workbench.model.models import TransformerConfig
from workbench.schemes.base import Workload
from workbench.schemes.hepti import (
    COMM_MODELS,
    MODE_LABELS,
    MODES,
    BlockShape,
    Breakdown,
    DeviceProfile,
    LinearCost,
    LinearStage,
    Partition,
    evaluate_partition,
    linear_cost,
    linear_latency,
    proportional_split,
)
from workbench.schemes.planners.milp import MilpBuilder, MilpProgram

DEFAULT_THRESHOLD = 16  # data/constants/hepti.toml: mode_threshold_devices (quoted, Sec. 4.2-4.3)


# ---- one P2 solve -------------------------------------------------------------------------------
@dataclass(frozen=True)
class P2Solution:
    """Split sizes per dimension (one entry per device), the modelled T and solver statistics."""

    alloc: dict[str, np.ndarray]
    latency_s: float  # T of the rounded split
    objective_s: float  # the MILP's optimum (before rounding the continuous shares)
    solve_s: float
    nodes: int
    n_variables: int
    n_constraints: int


def _identical(a: DeviceProfile, b: DeviceProfile) -> bool:
    return (a.seconds_per_flop, a.free_memory_bytes, a.bandwidth_bytes_per_s, a.latency_s) == \
        (b.seconds_per_flop, b.free_memory_bytes, b.bandwidth_bytes_per_s, b.latency_s)


def _constant_latency(cost: LinearCost, profiles: list[DeviceProfile], comm_model: str) -> float:
    """The part of T that no split changes (shared link bytes' constants, message latency, primary head)."""
    zero = {d: np.zeros(len(profiles)) for d in cost.dims}
    stage_free = LinearCost(cost.mode, cost.dims, tuple(
        LinearStage(s.name, {}, s.link_const if comm_model == "shared" else 0.0, {}, s.collectives) for s in cost.stages),
        cost.mem_const, cost.mem_per_unit, cost.primary_mem, cost.primary_flops, cost.layers)
    return float(linear_latency(stage_free, profiles, zero, comm_model)["latency"])


TIME_SCALE = 1e3  # the MILP works in milliseconds: coefficients near 1 keep HiGHS's tolerances meaningful


def _heads_stage(cost: LinearCost) -> int | None:
    """The step whose compute depends on head units only (its time is one of alpha_i x k at the optimum)."""
    for b, st in enumerate(cost.stages):
        if set(st.flops_per_unit) == {"heads"} and st.flops_const == 0:
            return b
    return None


def head_breakpoints(cost: LinearCost, profiles: list[DeviceProfile]) -> np.ndarray:
    """Every value the head step's time can take: alpha_i x k ms for k = 1..U head units on device i."""
    b = _heads_stage(cost)
    alpha = cost.stages[b].flops_per_unit["heads"] * TIME_SCALE * np.array([p.seconds_per_flop for p in profiles])
    return np.unique(np.outer(alpha, np.arange(1, cost.dims["heads"] + 1)).reshape(-1))


def _p2_variables(m: MilpBuilder, cost: LinearCost, n: int, ring: bool, n_bp: int, integer_dims) -> None:
    """P2's columns, in this order: a_{d,i} per dimension d (named d), t_b, X_b (ring), y_j (breakpoints), one."""
    for d, total in cost.dims.items():
        m.add_variable(d, n, ub=total, integer=d in integer_dims)
    m.add_variable("t", len(cost.stages))
    if ring:
        m.add_variable("x", len(cost.stages))
    if n_bp:
        m.add_variable("y", n_bp, ub=1.0, integer=True)
    m.add_variable("one", lb=1.0, ub=1.0)  # fixed at 1: carries T's constant part


def _p2_objective(m: MilpBuilder, cost: LinearCost, profiles: list[DeviceProfile], comm_model: str, ring: bool,
                  bw: np.ndarray) -> None:
    """T in ms (Eq. 7): layers x (sum_b t_b + link time: X_b on a ring, bytes / BW on a shared medium) + constant."""
    L = cost.layers
    m.add_cost("t", L)
    if ring:
        m.add_cost("x", L)
    elif len(profiles) > 1:
        for st in cost.stages:
            for d, coef in st.link_per_unit.items():
                m.add_cost(d, L * coef / bw)
    m.add_cost("one", _constant_latency(cost, profiles, comm_model) * TIME_SCALE)


def _p2_stage_rows(m: MilpBuilder, cost: LinearCost, n: int, spf: np.ndarray, bw: np.ndarray, ring: bool) -> None:
    """t_b >= Tc_bi (Eq. 5, 7) and, on a ring, X_b >= c_bi / BW_i (Eq. 6, the busiest link)."""
    for b, st in enumerate(cost.stages):
        for i in range(n):
            m.add_constraint([(("t", b), 1.0)] + [((d, i), -coef * spf[i]) for d, coef in st.flops_per_unit.items()],
                             st.flops_const * spf[i])
        if ring:
            for i in range(n):
                m.add_constraint([(("x", b), 1.0)] + [((d, i), -coef / bw[i]) for d, coef in st.link_per_unit.items()],
                                 st.link_const / bw[i])


def _p2_memory_rows(m: MilpBuilder, cost: LinearCost, profiles: list[DeviceProfile]) -> None:
    """Eq. 3-4 in MiB, then symmetry breaking: identical devices are interchangeable, so order them."""
    for i, prof in enumerate(profiles):
        fixed = cost.mem_const + (cost.primary_mem if i == 0 else 0.0)
        m.add_constraint([((d, i), coef / MIB) for d, coef in cost.mem_per_unit.items()],
                         high=(prof.free_memory_bytes - fixed) / MIB)
    first = next(iter(cost.dims))
    for i in range(1, len(profiles) - 1):
        if _identical(profiles[i], profiles[i + 1]):
            m.add_constraint([((first, i), 1.0), ((first, i + 1), -1.0)], 0)


def _p2_breakpoint_rows(m: MilpBuilder, cost: LinearCost, spf: np.ndarray, breakpoints: np.ndarray) -> None:
    """The time-indexed head step: one y_j picks tau_j, t_b >= tau_j, device i holds <= floor(tau_j / alpha_i) heads."""
    b = _heads_stage(cost)
    alpha = cost.stages[b].flops_per_unit["heads"] * spf
    m.add_constraint(m.sum_of("y"), 1, 1)
    m.add_constraint([(("t", b), 1.0)] + [(("y", j), -tau) for j, tau in enumerate(breakpoints)], 0)
    for i in range(len(spf)):
        m.add_constraint([(("heads", i), 1.0)] + [(("y", j), -np.floor(tau / alpha[i] + 1e-9))
                                                  for j, tau in enumerate(breakpoints)], high=0)


def build_p2(cost: LinearCost, profiles: list[DeviceProfile], deadline: float | None, comm_model: str,
             integer_dims=(), breakpoints: np.ndarray | None = None) -> MilpProgram:
    """P2 as a MILP: split sizes (Eq. 1-2), max over devices by epigraph variables (Eq. 5-7), memory (Eq. 3-4), T <= D.

    The objective c x is T in ms (Eq. 7). With `breakpoints` the head step uses a time-indexed form:
    binaries y_j pick its time tau_j and cap every device at floor(tau_j / alpha_i) head units. It is
    exact for integer heads (the step's time is some alpha_i x k) and its LP relaxation is much tighter
    than t >= alpha_i h_i, which is what lets HiGHS solve 64-256 devices in milliseconds instead of seconds.
    """
    require_choice("comm_model", comm_model, COMM_MODELS)
    n = len(profiles)
    ring = comm_model == "ring" and n > 1
    n_bp = 0 if breakpoints is None else len(breakpoints)
    spf = TIME_SCALE * np.array([p.seconds_per_flop for p in profiles])
    bw = np.array([p.bandwidth_bytes_per_s for p in profiles]) / TIME_SCALE
    m = MilpBuilder()
    _p2_variables(m, cost, n, ring, n_bp, integer_dims)
    _p2_objective(m, cost, profiles, comm_model, ring, bw)
    for d, total in cost.dims.items():  # Eq. 1
        m.add_constraint(m.sum_of(d), total, total)
    _p2_stage_rows(m, cost, n, spf, bw, ring)
    _p2_memory_rows(m, cost, profiles)
    if n_bp:
        _p2_breakpoint_rows(m, cost, spf, breakpoints)
    if deadline is not None:  # T <= D
        m.add_constraint(m.objective_terms(), high=deadline * TIME_SCALE)
    return m.build()


INTEGRALITY = ("heads", "all", "none")


def _integer_dims(cost: LinearCost, integrality: str) -> set[str]:
    require_choice("integrality", integrality, INTEGRALITY)
    if integrality == "all":
        return set(cost.dims)
    return {"heads"} & set(cost.dims) if integrality == "heads" else set()


def _solve_time_indexed(cost, budgeted, deadline, comm_model, integer, mip_rel_gap, time_limit_s):
    """Exact P2 with integer heads via the time-indexed head step, on few breakpoints.

    Breakpoints above (T_0 - R) / layers cannot be optimal, where T_0 is any feasible T (here the
    optimum over breakpoints up to the rate-proportional split's head time) and R a lower bound on
    T minus the head step (the LP relaxation of the plain problem without that term); so the final
    solve is exact over a short list.
    """
    every = head_breakpoints(cost, budgeted)
    spf = np.array([p.seconds_per_flop for p in budgeted])
    alpha = cost.stages[_heads_stage(cost)].flops_per_unit["heads"] * TIME_SCALE * spf  # ms per head unit
    t_prop = float((np.array(proportional_split(cost.dims["heads"], 1.0 / spf)) * alpha).max())
    first = build_p2(cost, budgeted, deadline, comm_model, integer, every[every <= t_prop * (1 + 1e-9)])
    res = first.solve(mip_rel_gap, time_limit_s)
    if not res.found:
        final = build_p2(cost, budgeted, deadline, comm_model, integer, every)
        return final, final.solve(mip_rel_gap, time_limit_s)
    plain = build_p2(cost, budgeted, deadline, comm_model)  # LP relaxation of the full problem
    rest_cost = plain.c.copy()
    rest_cost[plain.column("t", _heads_stage(cost))] = 0.0
    rest = plain.solve(1e-6, 30.0, cost=rest_cost)
    limit = (res.objective - (rest.objective if rest.found else 0.0)) / cost.layers
    final = build_p2(cost, budgeted, deadline, comm_model, integer, every[every <= limit * (1 + 1e-9) + 1e-9])
    return final, final.solve(mip_rel_gap, time_limit_s)


def solve_p2(cost: LinearCost, profiles: list[DeviceProfile], deadline: float | None = None,
             comm_model: str = "shared", integrality: str = "heads", mip_rel_gap: float = 1e-6,
             time_limit_s: float = 30.0) -> P2Solution:
    """Solve P2 once on a fixed device set; raises InfeasibleError naming the binding constraint.

    integrality: "heads" (default) keeps head units integer - a head cannot be split, and rounding a
    share of a dozen heads would move a whole head - while the rows / FFN / d_model shares
    (hundreds to thousands of units) are the paper's continuous lambda (Eq. 9-10), rounded after the
    solve; their memory budgets keep one unit of slack per rounded dimension so rounding cannot
    break Eq. 4. "all": every a_i integer (the exact integer program, checked against brute force).
    "none": the paper's pure linear approximation.
    """
    if deadline is not None:
        require_positive("deadline", deadline)
    integer = _integer_dims(cost, integrality)
    rounded = [d for d in cost.dims if d not in integer]
    slack = sum(cost.mem_per_unit.get(d, 0.0) for d in rounded)
    budgeted = [p.with_changes(free_memory_bytes=max(p.free_memory_bytes - slack, 0.0)) for p in profiles]
    start = time.perf_counter()
    if "heads" in integer and _heads_stage(cost) is not None and len(profiles) > 1:
        program, res = _solve_time_indexed(cost, budgeted, deadline, comm_model, integer, mip_rel_gap, time_limit_s)
    else:
        program = build_p2(cost, budgeted, deadline, comm_model, integer)
        res = program.solve(mip_rel_gap, time_limit_s)
    elapsed = time.perf_counter() - start
    if not res.found:
        raise _diagnose(cost, budgeted, deadline, comm_model, integrality)
    alloc = {d: largest_remainder(np.maximum(res.value(d), 0.0), total) for d, total in cost.dims.items()}
    latency = float(linear_latency(cost, profiles, alloc, comm_model)["latency"])
    return P2Solution(alloc, latency, res.objective / TIME_SCALE, elapsed, res.nodes, program.n_variables,
                      program.n_constraints)


def _diagnose(cost: LinearCost, profiles: list[DeviceProfile], deadline, comm_model, integrality) -> InfeasibleError:
    """Name the binding constraint of an infeasible P2: a device's fixed memory, total memory, or D."""
    label = MODE_LABELS[cost.mode]
    for i, prof in enumerate(profiles):
        fixed = cost.mem_const + (cost.primary_mem if i == 0 else 0.0)
        if fixed > prof.free_memory_bytes:
            return InfeasibleError(
                f"infeasible: memory budget (Eq. 4) in mode {label}: device {i} ({prof.name}) has "
                f"{prof.free_memory_bytes / MIB:.0f} MiB free but its unsplittable part needs {fixed / MIB:.0f} MiB")
    if deadline is not None:
        try:
            best = solve_p2(cost, profiles, None, comm_model, integrality)
        except InfeasibleError:
            pass
        else:
            return InfeasibleError(
                f"infeasible: deadline (T <= D): D = {deadline:.4g} s but the fastest partition in mode {label} "
                f"on {len(profiles)} devices takes {best.latency_s:.4g} s")
    free = sum(p.free_memory_bytes for p in profiles)
    need = cost.mem_const * len(profiles) + cost.primary_mem + sum(
        coef * cost.dims[d] for d, coef in cost.mem_per_unit.items())
    return InfeasibleError(
        f"infeasible: memory budget (Eq. 4) in mode {label}: {len(profiles)} devices have {free / MIB:.0f} MiB "
        f"free in all; the split needs {need / MIB:.0f} MiB (or no split into whole units fits every budget)")


# ---- brute force (validation on small instances) -------------------------------------------------
def compositions(total: int, parts: int) -> np.ndarray:
    """Every way to write `total` as `parts` ordered non-negative integers: (K, parts)."""
    require_int("parts", parts, low=1)
    out = [np.diff([0, *cuts, total]) for cuts in itertools.combinations_with_replacement(range(total + 1), parts - 1)]
    return np.array(out, dtype=int).reshape(-1, parts)


def brute_force_p2(cost: LinearCost, profiles: list[DeviceProfile], deadline: float | None = None,
                   comm_model: str = "shared", max_candidates: int = 2_000_000) -> tuple[dict[str, np.ndarray], float]:
    """The optimum of P2 by enumerating every integer split (small instances only)."""
    n = len(profiles)
    options = [compositions(cost.dims[d], n) for d in cost.dims]
    count = int(np.prod([len(o) for o in options]))
    if count > max_candidates:
        raise WorkbenchError(f"brute force would try {count} splits; allowed up to {max_candidates}")
    grids = np.meshgrid(*[np.arange(len(o)) for o in options], indexing="ij")
    alloc = {d: options[k][grids[k].reshape(-1)] for k, d in enumerate(cost.dims)}
    r = linear_latency(cost, profiles, alloc, comm_model)
    ok = np.all(r["memory"] <= np.array([p.free_memory_bytes for p in profiles]), axis=-1)
    if deadline is not None:
        ok &= r["latency"] <= deadline
    if not ok.any():
        raise InfeasibleError("infeasible: no integer split satisfies the memory budgets and deadline")
    best = int(np.argmin(np.where(ok, r["latency"], np.inf)))
    return {d: a[best] for d, a in alloc.items()}, float(r["latency"][best])


# ---- plans: mode choice, drop lambda_i = 0 and re-solve, 2D per axis ------------------------------
@dataclass(frozen=True)
class Plan:
    """A partitioning decision pi: mode, participating devices (ring / row-major grid order) and splits."""

    mode: str  # "serial" | "ws" | "1d" | "2d"
    devices: tuple[int, ...]  # indices into the profiles the plan was made for
    partition: Partition
    breakdown: Breakdown  # the cost model's T and memory with those profiles
    solves: int = 0
    solve_s: float = 0.0
    dropped: tuple[int, ...] = ()

    @property
    def latency_s(self) -> float:
        """Modelled T (Eq. 7)."""
        return self.breakdown.latency_s

    @property
    def label(self) -> str:
        """Human name of the mode."""
        return MODE_LABELS[self.mode]

    def memory_by_device(self, n_devices: int) -> np.ndarray:
        """Bytes this plan needs on each of `n_devices` devices (0 where a device does not take part)."""
        out = np.zeros(n_devices)
        out[list(self.devices)] = self.breakdown.memory_bytes
        return out


def _check_profiles(profiles) -> list[DeviceProfile]:
    profiles = list(profiles)
    if not profiles:
        raise WorkbenchError("plan needs at least one device profile (the primary)")
    for p in profiles:
        if not isinstance(p, DeviceProfile):
            raise WorkbenchError(f"profiles must be DeviceProfile objects, got {type(p).__name__}")
    return profiles


def ws_fits(cfg: TransformerConfig, workload: Workload, profiles: list[DeviceProfile]) -> bool:
    """Sec. 4.2's test: can every device hold what WS replicates (Wo, W1/W2 of all layers + activations)?"""
    cost = linear_cost(cfg, workload, "ws")
    unit = min(cost.mem_per_unit.values())
    return all(p.free_memory_bytes >= cost.mem_const + unit + (cost.primary_mem if i == 0 else 0.0)
               for i, p in enumerate(profiles))


def _serial(cfg, workload, profiles, deadline, comm_model) -> Plan:
    part = Partition("ws", (cfg.n_kv_heads,), (workload.new_tokens,))
    bd = evaluate_partition(cfg, workload, part, profiles[:1], comm_model)
    if bd.memory_bytes[0] > profiles[0].free_memory_bytes:
        raise InfeasibleError(f"infeasible: memory budget (Eq. 4) in serial mode: the primary ({profiles[0].name}) has "
                              f"{profiles[0].free_memory_bytes / MIB:.0f} MiB free but the model needs "
                              f"{bd.memory_bytes[0] / MIB:.0f} MiB")
    if deadline is not None and bd.latency_s > deadline:
        raise InfeasibleError(f"infeasible: deadline (T <= D): D = {deadline:.4g} s but serial inference takes "
                              f"{bd.latency_s:.4g} s")
    return Plan("serial", (0,), part, bd)


def _plan_linear(cfg, workload, mode, profiles, devices, deadline, comm_model, integrality) -> Plan:
    """Solve P2 for WS or 1D-tiled WS, drop devices with lambda_i = 0 and re-solve (the primary stays)."""
    cost = linear_cost(cfg, workload, mode)
    devices, dropped, solves, solve_s = list(devices), [], 0, 0.0
    while True:
        sol = solve_p2(cost, [profiles[i] for i in devices], deadline, comm_model, integrality)
        solves, solve_s = solves + 1, solve_s + sol.solve_s
        share = sum(sol.alloc[d] for d in cost.dims)
        zero = [k for k in range(1, len(devices)) if share[k] == 0]
        if not zero:
            break
        dropped += [devices[k] for k in zero]
        devices = [i for k, i in enumerate(devices) if k not in zero]
    a = {d: tuple(int(v) for v in sol.alloc[d]) for d in cost.dims}
    part = Partition(mode, a["heads"], a["rows"], a.get("ffn", ()))
    bd = evaluate_partition(cfg, workload, part, [profiles[i] for i in devices], comm_model)
    return Plan(mode, tuple(devices), part, bd, solves, solve_s, tuple(dropped))


def _group(profiles: list[DeviceProfile], name: str) -> DeviceProfile:
    """A grid row or column as one aggregate device: summed FLOP rate, members x smallest memory, slowest link."""
    rate = sum(p.flops_per_s for p in profiles)
    return DeviceProfile(name, 1.0, 1.0 / rate, len(profiles) * min(p.free_memory_bytes for p in profiles),
                         min(p.bandwidth_bytes_per_s for p in profiles), max(p.latency_s for p in profiles))


def axis_costs(cfg: TransformerConfig, workload: Workload, rows: int, cols: int,
               comm_model: str) -> tuple[LinearCost, LinearCost]:
    """The two 1-D problems of 2D-tiled WS: heads + FFN over grid rows, d_model columns over grid columns.

    Link bytes per unit are the group's total (shared medium) or one member's (ring); constant
    communication and message latency do not change the split and are left out (the plan's T is
    evaluated exactly on the composed tiles).
    """
    sh = BlockShape.of(cfg, workload)
    m, e, ab, wb, L = sh.m, cfg.d_model, sh.ab, sh.wb, cfg.n_layers
    n_up = sh.nf - 1
    per_row = cols if comm_model == "shared" else 1  # members whose links are summed
    per_col = rows if comm_model == "shared" else 1
    small = L * sh.small_vector_bytes() + 2 * m * e * ab
    row_cost = LinearCost("2d", {"heads": cfg.n_kv_heads, "ffn": cfg.d_ff}, (
        LinearStage("attention", {"heads": sh.qkv_attention_flops_per_unit() + sh.out_proj_flops_per_unit()}, 0.0,
                    {"heads": per_row * (cols - 1) / cols * m * sh.qd * ab}),
        LinearStage("mlp", {"ffn": sh.ffn_col_flops()}, 0.0, {"ffn": per_row * 2 * (cols - 1) / cols * m * n_up * ab}),
    ), cols * small, {"heads": L * (sh.qkv_weight_bytes_per_unit() + sh.qd * e * wb) + sh.activation_bytes_per_unit(),
                      "ffn": L * sh.nf * e * wb + m * n_up * ab}, sh.primary_bytes(), sh.primary_flops(), L)
    col_cost = LinearCost("2d", {"cols": e}, (
        LinearStage("out_proj", {"cols": 2.0 * m * cfg.q_dim}, 0.0, {"cols": per_col * 2 * (rows - 1) / rows * m * ab}),
        LinearStage("mlp", {"cols": 2.0 * m * cfg.d_ff * sh.nf}, per_col * e * m * ab,
                    {"cols": per_col * (2 * (rows - 1) / rows * m - m) * ab}),
    ), rows * small, {"cols": L * (cfg.q_dim + sh.nf * cfg.d_ff) * wb + 2 * m * ab}, sh.primary_bytes(),
        sh.primary_flops(), L)
    return row_cost, col_cost


def _grid_order(profiles: list[DeviceProfile], devices: list[int]) -> list[int]:
    """Primary first, then the others fastest first (a grid row then holds devices of similar speed)."""
    rest = sorted(devices[1:], key=lambda i: -profiles[i].flops_per_s)
    return [devices[0], *rest]


def _plan_grid(cfg, workload, profiles, order, rows, cols, comm_model, integrality):
    """2D plan on one grid: the 1-D problem on grid rows, then on grid columns; drop empty rows/columns."""
    solves, solve_s, dropped = 0, 0.0, []
    while True:
        grid = np.array(order[:rows * cols]).reshape(rows, cols)
        row_cost, col_cost = axis_costs(cfg, workload, rows, cols, comm_model)
        row_sol = solve_p2(row_cost, [_group([profiles[i] for i in grid[r]], f"row{r}") for r in range(rows)],
                           None, comm_model, integrality)
        col_sol = solve_p2(col_cost, [_group([profiles[i] for i in grid[:, c]], f"col{c}") for c in range(cols)],
                           None, comm_model, integrality)
        solves, solve_s = solves + 2, solve_s + row_sol.solve_s + col_sol.solve_s
        empty_rows = [r for r in range(1, rows) if row_sol.alloc["heads"][r] + row_sol.alloc["ffn"][r] == 0]
        empty_cols = [c for c in range(1, cols) if col_sol.alloc["cols"][c] == 0]
        if not empty_rows and not empty_cols:
            break
        keep = [i for r in range(rows) for c in range(cols)
                if r not in empty_rows and c not in empty_cols for i in [grid[r, c]]]
        dropped += [int(i) for i in grid.reshape(-1) if i not in keep]
        order = keep
        rows, cols = rows - len(empty_rows), cols - len(empty_cols)
    grid = np.array(order[:rows * cols]).reshape(rows, cols)
    heads: tuple[int, ...] = ()
    for r in range(rows):
        rates = [profiles[i].flops_per_s for i in grid[r]]
        hr = int(row_sol.alloc["heads"][r])
        heads += proportional_split(hr, rates) if hr else (0,) * cols
    part = Partition("2d", heads, ffn=tuple(int(v) for v in row_sol.alloc["ffn"]),
                     cols=tuple(int(v) for v in col_sol.alloc["cols"]), grid=(rows, cols))
    devices = tuple(int(i) for i in grid.reshape(-1))
    bd = evaluate_partition(cfg, workload, part, [profiles[i] for i in devices], comm_model)
    return Plan("2d", devices, part, bd, solves, solve_s, tuple(dropped))


def grid_candidates(n: int) -> list[tuple[int, int]]:
    """Grids to try for n devices: every R x (n // R) with 2 <= R <= sqrt(n) (1 x n when n < 4)."""
    out = [(r, n // r) for r in range(2, int(np.sqrt(n)) + 1)]
    return out or [(1, n)]


def _plan_2d(cfg, workload, profiles, devices, deadline, comm_model, integrality) -> Plan:
    """Per-axis P2 on each candidate grid; the fastest plan that fits every device's memory and D."""
    order = _grid_order(profiles, list(devices))
    best, reason, solves, solve_s = None, "", 0, 0.0
    for rows, cols in grid_candidates(len(order)):
        plan = _plan_grid(cfg, workload, profiles, order, rows, cols, comm_model, integrality)
        solves, solve_s = solves + plan.solves, solve_s + plan.solve_s
        over = [(i, m) for i, m in zip(plan.devices, plan.breakdown.memory_bytes) if m > profiles[i].free_memory_bytes]
        if over:
            i, m = over[0]
            reason = (f"infeasible: memory budget (Eq. 4) in mode 2D-tiled WS: on the best {rows}x{cols} grid device {i} "
                      f"({profiles[i].name}) needs {m / MIB:.0f} MiB but has {profiles[i].free_memory_bytes / MIB:.0f} MiB")
            continue
        if deadline is not None and plan.latency_s > deadline:
            reason = reason or (f"infeasible: deadline (T <= D): D = {deadline:.4g} s but the fastest 2D-tiled WS plan "
                                f"takes {plan.latency_s:.4g} s")
            continue
        if best is None or plan.latency_s < best.latency_s:
            best = plan
    if best is None:
        raise InfeasibleError(reason)
    return Plan("2d", best.devices, best.partition, best.breakdown, solves, solve_s, best.dropped)


def plan(cfg: TransformerConfig, workload: Workload, profiles, deadline: float | None = None,
         mode: str | None = None, comm_model: str = "shared", threshold: int = DEFAULT_THRESHOLD,
         integrality: str = "heads") -> Plan:
    """Hepti's partitioning engine: pick the mode, solve P2, drop lambda_i = 0 devices, re-solve, round.

    `profiles[0]` is the primary. Secondaries with no free memory are unavailable; with none left the
    model runs serially. `mode` forces a mode (the notebook's per-mode sweeps); otherwise WS when every
    device can hold WS's replicated weights, else 1D-tiled below `threshold` devices, 2D-tiled from it.
    """
    profiles = _check_profiles(profiles)
    require_choice("comm_model", comm_model, COMM_MODELS)
    require_int("threshold", threshold, low=1)
    if deadline is not None:
        require_positive("deadline", deadline)
    if mode is not None:
        require_choice("mode", mode, MODES)
    devices = [0] + [i for i in range(1, len(profiles)) if profiles[i].free_memory_bytes > 0]
    if len(devices) == 1:
        return _serial(cfg, workload, profiles, deadline, comm_model)
    tiled = "1d" if len(devices) < threshold else "2d"
    chosen = mode or ("ws" if ws_fits(cfg, workload, [profiles[i] for i in devices]) else tiled)
    if chosen == "2d":
        return _plan_2d(cfg, workload, profiles, devices, deadline, comm_model, integrality)
    try:
        return _plan_linear(cfg, workload, chosen, profiles, devices, deadline, comm_model, integrality)
    except InfeasibleError as err:
        if mode is not None or chosen != "ws" or "memory" not in str(err):
            raise
    return plan(cfg, workload, profiles, deadline, tiled, comm_model, threshold, integrality)
