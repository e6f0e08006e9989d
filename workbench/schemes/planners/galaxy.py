"""Galaxy's heterogeneity- and memory-aware workload planner (Sec. III-C, Algorithm 1) and an exact optimum.

Algorithm 1: (1) split the MHA heads and the MLP columns in proportion to each device's capacity
V_d = 1 / (L(MHA, all heads, d) + L(MLP, all columns, d)) (Eq. 6), the sequence equally; (2) move the
overflow of every device over its memory budget to the devices with spare memory, in proportion to
their capacity, MLP columns first (finer grain), then heads; a device that shed its overflow leaves
the candidate list. Devices still over budget -> `InfeasibleError` naming the device and the bytes.

`exact_plan` solves Eq. 5 (min max-MHA + max-MLP latency s.t. memory) exactly as a MILP with HiGHS;
`exhaustive_plan` enumerates every split (tiny instances only) and checks the MILP.

The planning evaluators live here, a layer above the schemes: `galaxy_hmp` and `galaxy_hmp_overlap`
(registered with the arena) plan with Algorithm 1 and hand the plan to the scheme evaluators of
`workbench.schemes.galaxy`, which take it (schemes never import planners). If Algorithm 1 fails, they
cost the capacity split and report the planner's message (and the overflow) as out of memory.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from workbench.core.apportion import apportion, even_split
from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes import galaxy as schemes
from workbench.schemes.base import Cluster, SchemeResult, Workload, register, with_streaming_split
from workbench.schemes.galaxy import (
    PAPER,
    Partition,
    budgets,
    capacity,
    connective_latency,
    first_overflow,
    mha_latency,
    mlp_latency,
    tp_memory_bytes,
)


@dataclass(frozen=True)
class Costs:
    """What the planner needs per device (the profiler's output): seconds per head / per column,
    memory bytes per head / per column, fixed bytes, budget, capacity V_d."""

    sec_per_group: np.ndarray
    sec_per_col: np.ndarray
    con_s: float
    bytes_per_group: float
    bytes_per_col: float
    base_bytes: np.ndarray
    budget: np.ndarray
    capacity: np.ndarray
    group: int
    n_groups: int
    n_cols: int


def profile(model: TransformerConfig, cluster: Cluster, workload: Workload) -> Costs:
    """Per-device latencies and memory coefficients from the shared cost model (the Galaxy Profiler)."""
    n, s = cluster.n, workload.new_tokens
    group = model.n_heads // model.n_kv_heads
    seq = even_split(s, n)
    zeros = (0,) * n
    base = tp_memory_bytes(model, workload, Partition(zeros, zeros, seq))
    one_group = tp_memory_bytes(model, workload, Partition((group,) * n, zeros, seq)) - base
    one_col = tp_memory_bytes(model, workload, Partition(zeros, (1,) * n, seq)) - base
    # per distinct device (a TOML's `count = N` repeats one spec), broadcast to its positions
    sec_per_group, sec_per_col, cap, con = np.zeros(n), np.zeros(n), np.zeros(n), 0.0
    seq_arr = np.asarray(seq, dtype=np.int64)
    for d, idx in common.distinct_devices(cluster.devices):
        sec_per_group[idx] = float(mha_latency(model, d, workload, group))
        sec_per_col[idx] = float(mlp_latency(model, d, workload, 1))
        cap[idx] = capacity(model, d, workload)
        con = max(con, float(np.max(connective_latency(model, d, workload, seq_arr[idx]))))
    return Costs(
        sec_per_group=sec_per_group, sec_per_col=sec_per_col,
        con_s=2 * con, bytes_per_group=float(one_group[0]), bytes_per_col=float(one_col[0]),
        base_bytes=np.asarray(base, dtype=float), budget=budgets(cluster), capacity=cap,
        group=group, n_groups=model.n_kv_heads, n_cols=model.d_ff)


def _need(costs: Costs, groups: np.ndarray, cols: np.ndarray) -> np.ndarray:
    return costs.base_bytes + groups * costs.bytes_per_group + cols * costs.bytes_per_col


def balanced_partition(total: int, capacity: np.ndarray) -> np.ndarray:
    """Algorithm 1, BalancedPartition: units in proportion to capacity (lines 1-8)."""
    return apportion(total, capacity)


def memory_aware_balancing(units: np.ndarray, unit_bytes: float, need: np.ndarray, budget: np.ndarray,
                           capacity: np.ndarray, candidates: list[int]) -> np.ndarray:
    """Algorithm 1, MemoryAwareBalancing (lines 9-19): shift each over-budget device's overflowing units
    to the candidates with spare memory in proportion to their capacity, drop it from the candidates,
    repeat until no candidate is over budget or none has spare memory. Mutates `candidates`."""
    units, need = units.copy(), need.astype(float).copy()
    while True:
        over = need - budget
        oom = [d for d in candidates if over[d] > 0]
        free = [d for d in candidates if over[d] < 0]
        if not oom or not free:
            return units
        for o in oom:
            shift = min(int(units[o]), math.ceil(over[o] / unit_bytes - 1e-9)) if unit_bytes > 0 else 0
            if shift > 0:
                moved = apportion(shift, capacity[free])
                units[free] += moved
                need[free] += moved * unit_bytes
                units[o] -= shift
                need[o] -= shift * unit_bytes
            candidates.remove(o)


def capacity_split(model: TransformerConfig, cluster: Cluster, workload: Workload,
                   costs: Costs | None = None) -> Partition:
    """Step 1 only: heads (in GQA groups) and columns in proportion to Eq. 6's capacity, equal sequence."""
    costs = costs or profile(model, cluster, workload)
    groups = balanced_partition(costs.n_groups, costs.capacity)
    cols = balanced_partition(costs.n_cols, costs.capacity)
    return Partition(tuple(int(g) * costs.group for g in groups), tuple(int(c) for c in cols),
                     even_split(workload.new_tokens, cluster.n))


def plan(model: TransformerConfig, cluster: Cluster, workload: Workload) -> Partition:
    """Algorithm 1: capacity-proportional split, then memory-aware redistribution (MLP, then MHA)."""
    costs = profile(model, cluster, workload)
    first = capacity_split(model, cluster, workload, costs)
    groups = np.array(first.heads) // costs.group
    cols = np.array(first.mlp_cols)
    # Lines 20-22: each stage starts from the full device list L (the pseudo-code passes L by value), so a
    # device that ran out of columns to shed can still shed heads.
    cols = memory_aware_balancing(cols, costs.bytes_per_col, _need(costs, groups, cols), costs.budget,
                                  costs.capacity, list(range(cluster.n)))
    groups = memory_aware_balancing(groups, costs.bytes_per_group, _need(costs, groups, cols), costs.budget,
                                    costs.capacity, list(range(cluster.n)))
    part = Partition(tuple(int(g) * costs.group for g in groups), tuple(int(c) for c in cols), first.seq)
    message = first_overflow(tp_memory_bytes(model, workload, part), cluster)
    if message:
        raise InfeasibleError(message)
    return part


def objective(costs: Costs, groups, cols) -> np.ndarray:
    """Eq. 5: max-device MHA + max-device MLP + connective seconds per layer (vectorised over rows)."""
    groups, cols = np.atleast_2d(groups), np.atleast_2d(cols)
    return (np.max(groups * costs.sec_per_group, axis=-1) + np.max(cols * costs.sec_per_col, axis=-1)
            + costs.con_s)


def partition_objective(model: TransformerConfig, cluster: Cluster, workload: Workload, part: Partition) -> float:
    """Eq. 5's per-layer seconds of a partition."""
    costs = profile(model, cluster, workload)
    return float(objective(costs, np.array(part.heads) // costs.group, np.array(part.mlp_cols))[0])


def exact_plan(model: TransformerConfig, cluster: Cluster, workload: Workload) -> Partition:
    """The optimum of Eq. 5 under the memory budgets, as a MILP (HiGHS): integer heads and columns.

    Seconds and bytes are rescaled to O(1) so HiGHS's absolute tolerances cannot hide a better split."""
    costs = profile(model, cluster, workload)
    n = cluster.n
    t_scale = float(costs.sec_per_group.max() * costs.n_groups + costs.sec_per_col.max() * costs.n_cols)
    b_scale = float(costs.budget.max())
    from workbench.schemes.planners.milp import MilpBuilder  # lazy: only the exact planner needs scipy

    m = MilpBuilder()
    m.add_variable("groups", n, ub=costs.n_groups, integer=True)
    m.add_variable("cols", n, ub=costs.n_cols, integer=True)
    m.add_variable("t_mha")
    m.add_variable("t_mlp")
    m.add_cost("t_mha", 1.0)
    m.add_cost("t_mlp", 1.0)
    for d in range(n):
        m.add_constraint([(("groups", d), costs.sec_per_group[d] / t_scale), ("t_mha", -1.0)], high=0.0)
        m.add_constraint([(("cols", d), costs.sec_per_col[d] / t_scale), ("t_mlp", -1.0)], high=0.0)
        m.add_constraint([(("groups", d), costs.bytes_per_group / b_scale), (("cols", d), costs.bytes_per_col / b_scale)],
                         high=(costs.budget[d] - costs.base_bytes[d]) / b_scale)
    m.add_constraint(m.sum_of("groups"), costs.n_groups, costs.n_groups)
    m.add_constraint(m.sum_of("cols"), costs.n_cols, costs.n_cols)
    res = m.build().solve(mip_rel_gap=0.0)
    if not res.found:
        spare = costs.budget - costs.base_bytes
        total = costs.n_groups * costs.bytes_per_group + costs.n_cols * costs.bytes_per_col
        d = int(np.argmin(spare))
        raise InfeasibleError(
            f"infeasible: no split of {model.name}'s {total:.4g} B of MHA/MLP weights fits the devices' "
            f"{max(spare.clip(0).sum(), 0):.4g} B of spare memory ({total - spare.clip(0).sum():.4g} B do not fit; "
            f"tightest: device {d} ({cluster.devices[d].name}) with {spare[d]:.4g} B spare)")
    groups, cols = np.round(res.value("groups")).astype(int), np.round(res.value("cols")).astype(int)
    return Partition(tuple(int(g) * costs.group for g in groups), tuple(int(v) for v in cols),
                     even_split(workload.new_tokens, n))


def _compositions(total: int, parts: int) -> np.ndarray:
    """Every way to write `total` as `parts` ordered non-negative integers, one per row."""
    rows = []
    for bars in itertools.combinations(range(total + parts - 1), parts - 1):
        edges = (-1,) + bars + (total + parts - 1,)
        rows.append([edges[i + 1] - edges[i] - 1 for i in range(parts)])
    return np.array(rows, dtype=int)


def exhaustive_plan(model: TransformerConfig, cluster: Cluster, workload: Workload,
                    max_candidates: int = 2_000_000) -> Partition:
    """Eq. 5's optimum by enumerating every head and column split (tiny instances; checks `exact_plan`)."""
    costs = profile(model, cluster, workload)
    n = cluster.n
    n_group_splits = math.comb(costs.n_groups + n - 1, n - 1)
    n_col_splits = math.comb(costs.n_cols + n - 1, n - 1)
    if n_group_splits * n_col_splits > max_candidates:
        raise WorkbenchError(f"exhaustive search over {n_group_splits} x {n_col_splits} splits exceeds "
                             f"max_candidates={max_candidates}; use exact_plan")
    groups, cols = _compositions(costs.n_groups, n), _compositions(costs.n_cols, n)
    t_groups = np.max(groups * costs.sec_per_group, axis=1)
    t_cols = np.max(cols * costs.sec_per_col, axis=1)
    spare = costs.budget - costs.base_bytes  # (n,)
    best = (np.inf, None, None)
    for gi in np.argsort(t_groups, kind="stable"):
        if t_groups[gi] + t_cols.min() >= best[0]:
            break
        room = spare - groups[gi] * costs.bytes_per_group
        fits = np.all(cols * costs.bytes_per_col <= room + 1e-6, axis=1)
        if fits.any():
            ci = np.flatnonzero(fits)[np.argmin(t_cols[fits])]
            if t_groups[gi] + t_cols[ci] < best[0]:
                best = (t_groups[gi] + t_cols[ci], gi, ci)
    if best[1] is None:
        raise InfeasibleError(f"infeasible: no split of {model.name} fits the budgets of {n} devices")
    return Partition(tuple(int(g) * costs.group for g in groups[best[1]]), tuple(int(c) for c in cols[best[2]]),
                     even_split(workload.new_tokens, n))


def optimality_gap(model: TransformerConfig, cluster: Cluster, workload: Workload) -> dict:
    """Algorithm 1 vs the exact optimum of Eq. 5: both objectives and the relative gap (NaN if one fails)."""
    costs = profile(model, cluster, workload)
    out = {"heuristic_s": math.nan, "exact_s": math.nan, "gap": math.nan, "heuristic_feasible": True,
           "exact_feasible": True}
    try:
        h = plan(model, cluster, workload)
        out["heuristic_s"] = float(objective(costs, np.array(h.heads) // costs.group, np.array(h.mlp_cols))[0])
    except InfeasibleError:
        out["heuristic_feasible"] = False
    try:
        e = exact_plan(model, cluster, workload)
        out["exact_s"] = float(objective(costs, np.array(e.heads) // costs.group, np.array(e.mlp_cols))[0])
    except InfeasibleError:
        out["exact_feasible"] = False
    out["gap"] = out["heuristic_s"] / out["exact_s"] - 1
    return out


# ---- the planning evaluators (what the arena registers for Galaxy) ---------------------------------------
def planned_partition(model: TransformerConfig, cluster: Cluster, workload: Workload) -> tuple[Partition, str]:
    """Algorithm 1's partition and '' ; if the planner fails, the capacity split and its message."""
    try:
        return plan(model, cluster, workload), ""
    except InfeasibleError as exc:
        return capacity_split(model, cluster, workload), str(exc)


def _planned(model: TransformerConfig, cluster: Cluster, workload: Workload, scheme: str,
             partition: Partition | None = None) -> SchemeResult:
    """One of Galaxy's two schemes on `partition`, or on Algorithm 1's when none is given."""
    failure = ""
    if partition is None:
        if not isinstance(model, TransformerConfig):
            raise WorkbenchError(f"model must be a TransformerConfig, got {type(model).__name__}")
        partition, failure = planned_partition(model, cluster, workload)
    return schemes.EVALUATORS[scheme](model, cluster, workload, partition, failure)


# `_planned` with its compute_s split as the registry splits it (what `evaluate` returns given a partition)
planned_on = with_streaming_split(_planned)


@register("galaxy_hmp", PAPER, moe=True, origin="Galaxy (Ye et al.): HMP on Algorithm 1's partition", partition="hybrid")
def evaluate_galaxy_hmp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Galaxy's HMP without overlap on Algorithm 1's partition (`evaluate` takes a given one)."""
    return _planned(model, cluster, workload, "galaxy_hmp")


@register("galaxy_hmp_overlap", PAPER, no_operators=common.TIMELINE_ROWS,
          moe=True, origin="Galaxy (Ye et al.): HMP with tile overlap on Algorithm 1's "
          "partition", partition="hybrid")
def evaluate_galaxy_hmp_overlap(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Galaxy's HMP with the tile-based overlap on Algorithm 1's partition (`evaluate` takes a given one)."""
    return _planned(model, cluster, workload, "galaxy_hmp_overlap")


PLANNING_EVALUATORS = {"galaxy_hmp": evaluate_galaxy_hmp, "galaxy_hmp_overlap": evaluate_galaxy_hmp_overlap}


def evaluate(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
             partition: Partition | None = None) -> SchemeResult:
    """Any of Galaxy's schemes (`load_all().filter(family="galaxy")`); Galaxy's own two plan with Algorithm 1
    unless given a partition."""
    if scheme in PLANNING_EVALUATORS:
        return planned_on(model, cluster, workload, scheme, partition)
    return schemes.evaluate(scheme, model, cluster, workload, partition)
