"""STI's two-stage planner (Sec. 5) and the baselines it is compared with (Sec. 7.1, Table 4).

Compute planning (Sec. 5.3): enumerate every n x m submodel (n of N layers, m of M shards per layer)
whose cost fits the target latency T; take the largest n*m, and among equals the deepest.

IO planning (Sec. 5.4) on the chosen n x m: AIB(0) starts at the IO time of the preload buffer
(bonus IO), AIB(k) = AIB(k-1) + compute(k-1) - IO of layer k (Definition 0). Pass 1 gives every shard
the highest uniform bitwidth that keeps all AIBs >= 0 (if not even the lowest fits, the lowest is kept
and allocation stops: the plan is invalid and the pipeline will stall). Pass 2 walks the shards in
importance order and raises each to the highest bitwidth its layer's and all later layers' AIBs can
pay for. Validity: every AIB >= 0.

Which m shards of a layer: the m most important of that layer (DynaBERT, the paper's base model,
rewires heads so the first m are the most important; our importance profile plays that role). The
baselines use the same choice, so only n, m and the bitwidths differ between methods.
The preload buffer holds a byte prefix of the layer-ordered shard stream (the last shard may be split):
then the bonus IO P / bandwidth is exact, and AIB >= 0 everywhere <=> no stall (the paper preloads
whole shards, which differs by at most one shard).

Baselines (all 12x12-style submodels chosen by the same n*m-then-deeper rule):
  * Load&Exec: load the submodel at 32 bits, then execute: n m io(32) + n compute(m) <= T.
  * StdPL-X: layerwise pipeline, every shard at X bits, no preload: pipeline makespan <= T.
  * PreloadModel-X: the whole N x M model is in memory at X bits, no IO: n compute(m) <= T.

The arena's planning evaluator ``sti_pipeline`` is registered here (planners sit above schemes;
`workbench.schemes.base.load_all` imports this module, listed in its PLANNING_EVALUATOR_MODULES), and costs
its plan with the schemes layer (`workbench.schemes.sti.evaluate_planned_pipeline`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from workbench.core.errors import (
    InfeasibleError,
    WorkbenchError,
    require_int,
    require_non_negative,
    require_positive,
)
from workbench.core.units import MIB
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, register
from workbench.schemes.sti import (
    PAPER,
    LatencyProfile,
    accumulated_io_budgets,
    arena_profile,
    evaluate_planned_pipeline,
    first_layer_preload_bytes,
    pipeline_makespan,
)
from workbench.schemes.sti_quantize import FULL_BITS

Layers = tuple[tuple[tuple[int, int], ...], ...]  # per layer: ((shard, bits), ...) sorted by shard


@dataclass(frozen=True)
class ShardPlan:
    """A planned submodel: its shards and bitwidths, what is preloaded, its AIBs and predicted timing."""

    method: str
    layers: Layers
    preload_bytes: float  # bytes held in the preload buffer (memory kept between engagements)
    aib_s: tuple[float, ...]  # final accumulated IO budget per layer
    valid: bool  # every AIB >= 0 (no stall)
    latency_s: float  # pipeline makespan (or IO + compute for Load&Exec)
    compute_s: float
    stall_s: float  # compute waiting for IO
    io_bytes: float  # bytes read from flash during the engagement
    resident_bytes: float  # parameter bytes in memory before the engagement (preload, or the whole model)
    target_s: float
    notes: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Layers of the submodel."""
        return len(self.layers)

    @property
    def m(self) -> int:
        """Shards per layer."""
        return len(self.layers[0]) if self.layers else 0

    @property
    def mean_bits(self) -> float:
        """Mean bitwidth over the submodel's shards."""
        bits = [b for layer in self.layers for _, b in layer]
        return float(np.mean(bits)) if bits else 0.0

    @property
    def meets_target(self) -> bool:
        """Predicted latency within the target (1 ns slack for rounding)."""
        return self.latency_s <= self.target_s + 1e-9

    def bits_histogram(self) -> dict[int, int]:
        """Number of shards at each bitwidth."""
        out: dict[int, int] = {}
        for layer in self.layers:
            for _, b in layer:
                out[b] = out.get(b, 0) + 1
        return dict(sorted(out.items()))

    def key(self) -> tuple:
        """Hashable identity of the executed submodel (shards and bits)."""
        return self.layers


# ---- importance ---------------------------------------------------------------------------------
def importance_order(scores) -> list[tuple[int, int]]:
    """(layer, shard) pairs, most important first: higher score first, ties by (layer, shard)."""
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or s.size == 0 or not np.isfinite(s).all():
        raise WorkbenchError(f"importance scores must be a finite (N layers, M shards) array, got shape {s.shape}")
    flat = np.lexsort((np.arange(s.size), -s.ravel()))
    return [(int(i // s.shape[1]), int(i % s.shape[1])) for i in flat]


def _scores(profile: LatencyProfile, importance) -> np.ndarray:
    """Importance scores (N, M); None -> all equal (shard order)."""
    if importance is None:
        return np.zeros((profile.n_layers, profile.n_shards))
    s = np.asarray(importance, dtype=float)
    if s.shape != (profile.n_layers, profile.n_shards):
        raise WorkbenchError(f"importance must have shape ({profile.n_layers}, {profile.n_shards}), got {s.shape}")
    importance_order(s)  # validates finiteness
    return s


def chosen_shards(scores: np.ndarray, n: int, m: int) -> list[list[int]]:
    """The m most important shards of each of the first n layers (sorted by index)."""
    out = []
    for layer in range(n):
        order = np.lexsort((np.arange(scores.shape[1]), -scores[layer]))
        out.append(sorted(int(i) for i in order[:m]))
    return out


# ---- compute planning ---------------------------------------------------------------------------
def _check_target(target_s: float) -> float:
    return require_positive("target_latency (s)", float(target_s))


def largest_submodel(profile: LatencyProfile, target_s: float, cost: Callable[[int, int], float],
                     what: str = "compute") -> tuple[int, int]:
    """Largest n*m (then deepest) with cost(n, m) <= target; InfeasibleError naming the fastest one."""
    _check_target(target_s)
    best, best_key, fastest = None, (-1, -1), np.inf
    for n in range(1, profile.n_layers + 1):
        for m in range(1, profile.n_shards + 1):
            c = cost(n, m)
            fastest = min(fastest, c)
            if c <= target_s + 1e-12 and (n * m, n) > best_key:
                best, best_key = (n, m), (n * m, n)
    if best is None:
        raise InfeasibleError(
            f"infeasible: target_latency {target_s * 1e3:.4g} ms is below the fastest submodel's {what} time "
            f"({fastest * 1e3:.4g} ms for 1 layer x 1 shard on {profile.name}); allowed: target_latency >= "
            f"{fastest * 1e3:.4g} ms")
    return best


def compute_plan(profile: LatencyProfile, target_s: float) -> tuple[int, int]:
    """STI's compute planning: largest, then deepest n x m with n * compute(m) <= T."""
    return largest_submodel(profile, target_s, lambda n, m: n * profile.t_comp(m))


# ---- IO planning --------------------------------------------------------------------------------
def _check_bitwidths(profile: LatencyProfile, bitwidths: Sequence[int] | None) -> tuple[int, ...]:
    if bitwidths is None:
        return profile.bitwidths
    bits = tuple(sorted({int(b) for b in bitwidths}))
    missing = [b for b in bits if b not in profile.bitwidths]
    if not bits or missing:
        raise WorkbenchError(f"bitwidths {list(bitwidths)} must be a non-empty subset of the profile's {profile.bitwidths}")
    return bits


def _layer_io(profile: LatencyProfile, bits_nm: np.ndarray) -> np.ndarray:
    io_of = {b: profile.io_s(b) for b in np.unique(bits_nm)}
    return np.array([sum(io_of[b] for b in row) for row in bits_nm])


def _finish(method: str, profile: LatencyProfile, shards: list[list[int]], bits_nm: np.ndarray, preload_request: float,
            target_s: float, resident_bytes: float | None = None, notes: tuple[str, ...] = (),
            serial: bool = False, slack_s: float = 0.0) -> ShardPlan:
    """Build the ShardPlan: actual preload prefix, exact AIBs (+ `slack_s` for STI+slack), pipeline timing."""
    n, m = bits_nm.shape
    layer_bytes = np.array([sum(profile.bytes_of(int(b)) for b in row) for row in bits_nm])
    total = float(layer_bytes.sum())
    preload = min(preload_request, total)
    comp = np.full(n, profile.t_comp(m))
    io = layer_bytes / profile.read_bytes_per_s
    bonus = preload / profile.read_bytes_per_s
    aib = accumulated_io_budgets(comp, io, bonus + slack_s)
    if serial:  # Load&Exec: all IO first, then all compute
        io_s = float(io.sum()) - bonus
        latency, stall = io_s + float(comp.sum()), io_s
    else:
        latency, stall = pipeline_makespan(io, comp, bonus)
    layers = tuple(tuple((int(i), int(b)) for i, b in zip(shards[k], bits_nm[k])) for k in range(n))
    resident = preload if resident_bytes is None else resident_bytes
    return ShardPlan(method, layers, preload, tuple(float(a) for a in aib), bool(aib.min() >= -1e-12), latency,
                     float(comp.sum()), max(stall, 0.0), total - preload, resident, target_s, notes)


def plan_from_bits(profile: LatencyProfile, shards: Sequence[Sequence[int]], bits, preload_bytes: float = 0.0,
                   target_s: float = np.inf, method: str = "given") -> ShardPlan:
    """Cost a given assignment: `shards[k]` of layer k at `bits[k][j]` (n, m), with a preload buffer."""
    bits_nm = np.asarray(bits, dtype=int)
    if bits_nm.ndim != 2 or bits_nm.shape[0] != len(shards) or any(len(s) != bits_nm.shape[1] for s in shards):
        raise WorkbenchError(f"bits must be (n layers, m shards) matching shards, got {bits_nm.shape}")
    for b in np.unique(bits_nm):
        profile.bytes_of(int(b))
    require_non_negative("preload_buffer (bytes)", float(preload_bytes))
    return _finish(method, profile, [list(map(int, s)) for s in shards], bits_nm, float(preload_bytes), target_s)


def io_plan(profile: LatencyProfile, n: int, m: int, preload_bytes: float, importance=None,
            bitwidths: Sequence[int] | None = None, target_s: float | None = None, slack_s: float = 0.0) -> ShardPlan:
    """STI's IO planning on an n x m submodel: AIBs from the preload bonus, pass 1 uniform, pass 2 by importance.

    `slack_s` (not in the paper; 0 by default) adds unused target time as IO budget of layer 0.
    """
    require_int("n (layers)", n, low=1, high=profile.n_layers)
    require_int("m (shards per layer)", m, low=1, high=profile.n_shards)
    require_non_negative("preload_buffer (bytes)", float(preload_bytes))
    require_non_negative("slack (s)", float(slack_s))
    bits = _check_bitwidths(profile, bitwidths)
    scores = _scores(profile, importance)
    shards = chosen_shards(scores, n, m)
    comp = np.full(n, profile.t_comp(m))
    bonus = preload_bytes / profile.read_bytes_per_s + slack_s
    notes: list[str] = []
    full = n * m * profile.bytes_of(bits[-1])
    if preload_bytes >= full:
        notes.append(f"preload buffer ({preload_bytes / MIB:.3g} MiB) holds the whole {n}x{m} submodel at "
                     f"{bits[-1]} bits ({full / MIB:.3g} MiB); {(preload_bytes - full) / MIB:.3g} MiB stay unused")
    # Pass 1: the highest uniform bitwidth with every AIB >= 0.
    uniform = None
    for b in bits:
        if accumulated_io_budgets(comp, np.full(n, m * profile.io_s(b)), bonus).min() >= -1e-12:
            uniform = b
    bits_nm = np.full((n, m), bits[0] if uniform is None else uniform, dtype=int)
    if uniform is None:
        notes.append(f"AIBs cannot pay even for {bits[0]}-bit shards (preload buffer or target too small): "
                     f"kept at {bits[0]} bits, no upgrades, the pipeline stalls")
    else:
        # Pass 2: importance-ordered upgrades to the highest affordable bitwidth.
        aib = accumulated_io_budgets(comp, _layer_io(profile, bits_nm), bonus)
        position = {(layer, s): j for layer in range(n) for j, s in enumerate(shards[layer])}
        io_of = {b: profile.io_s(b) for b in bits}
        suffix_min = np.minimum.accumulate(aib[::-1])[::-1]
        for layer, shard in importance_order(scores):
            j = position.get((layer, shard))
            if j is None:
                continue
            current = int(bits_nm[layer, j])
            for b in reversed(bits):
                if b <= current:
                    break
                delta = io_of[b] - io_of[current]
                if suffix_min[layer] >= delta - 1e-15:
                    bits_nm[layer, j] = b
                    aib[layer:] -= delta
                    suffix_min = np.minimum.accumulate(aib[::-1])[::-1]
                    break
    return _finish("STI", profile, shards, bits_nm, preload_bytes, target_s if target_s is not None else np.inf,
                   notes=tuple(notes), slack_s=slack_s)


def plan_sti(profile: LatencyProfile, target_s: float, preload_bytes: float, importance=None,
             bitwidths: Sequence[int] | None = None, use_slack: bool = False) -> ShardPlan:
    """STI: compute planning, then IO planning with the preload buffer as bonus IO.

    `use_slack=True` is a what-if beyond the paper ("STI+slack"): the target time the chosen submodel's
    compute leaves unused (T - n compute(m)) also becomes layer 0's IO budget, i.e. execution may start
    later to load higher bitwidths and still finish by T.
    """
    n, m = compute_plan(profile, target_s)
    slack = max(target_s - n * profile.t_comp(m), 0.0) if use_slack else 0.0
    plan = io_plan(profile, n, m, preload_bytes, importance, bitwidths, target_s, slack)
    method = ("STI" if preload_bytes > 0 else "STI-0MB") + ("+slack" if use_slack else "")
    return ShardPlan(**{**plan.__dict__, "method": method})


@register("sti_pipeline", PAPER, no_operators=common.STI_ROWS,
          origin="STI (Guo et al.) Sec. 5: the two-stage planner's pipeline",
          no_moe="STI's shards and importance profile are a dense BERT's FFN columns",
          partition="pipeline", streaming=False, single_token="STI's profile times a decode step of one token (schemes/sti.py:227)")
def evaluate_sti_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """The arena's `sti_pipeline`: STI's planner on the whole model, target = its compute time (bitwidths fill
    the IO the compute hides), costed by `workbench.schemes.sti.evaluate_planned_pipeline`.

    The preload buffer defaults to the first layer's shards at the lowest bitwidth (Sec. 7.2).
    """
    profile = arena_profile(model, cluster, workload)
    plan = plan_sti(profile, model.n_layers * profile.t_comp(profile.n_shards), first_layer_preload_bytes(profile))
    return evaluate_planned_pipeline(model, cluster, workload, plan)


# ---- baselines ----------------------------------------------------------------------------------
def plan_load_exec(profile: LatencyProfile, target_s: float, importance=None) -> ShardPlan:
    """Load&Exec: load the submodel at 32 bits, then execute; IO + compute <= T."""
    n, m = largest_submodel(profile, target_s, lambda n, m: n * m * profile.io_s(FULL_BITS) + n * profile.t_comp(m),
                            "load + compute")
    shards = chosen_shards(_scores(profile, importance), n, m)
    return _finish("Load&Exec", profile, shards, np.full((n, m), FULL_BITS), 0.0, target_s, serial=True)


def _label(bits: int) -> str:
    return "full" if bits == FULL_BITS else f"{bits}bit"


def plan_stdpl(profile: LatencyProfile, target_s: float, bits: int, importance=None) -> ShardPlan:
    """StdPL-X: layerwise pipeline with every shard at X bits and no preload; makespan <= T."""
    profile.bytes_of(bits)

    def makespan(n, m):
        return pipeline_makespan(np.full(n, m * profile.io_s(bits)), np.full(n, profile.t_comp(m)))[0]

    n, m = largest_submodel(profile, target_s, makespan, "pipeline")
    shards = chosen_shards(_scores(profile, importance), n, m)
    return _finish(f"StdPL-{_label(bits)}", profile, shards, np.full((n, m), bits), 0.0, target_s)


def plan_preload_model(profile: LatencyProfile, target_s: float, bits: int, importance=None) -> ShardPlan:
    """PreloadModel-X: the whole model is in memory at X bits (no IO); n compute(m) <= T."""
    whole = profile.model_bytes(bits)
    n, m = compute_plan(profile, target_s)
    shards = chosen_shards(_scores(profile, importance), n, m)
    bits_nm = np.full((n, m), bits)
    plan = _finish(f"PreloadModel-{_label(bits)}", profile, shards, bits_nm, np.inf, target_s, resident_bytes=whole)
    return ShardPlan(**{**plan.__dict__, "io_bytes": 0.0, "preload_bytes": whole})


def plan_method(method: str, profile: LatencyProfile, target_s: float, preload_bytes: float = 0.0, importance=None,
                bitwidths: Sequence[int] | None = None) -> ShardPlan:
    """Any method by its paper name: STI, STI-0MB, Load&Exec, StdPL-{full,2bit,6bit...}, PreloadModel-{...}
    (and the what-if STI+slack)."""
    if method == "STI":
        return plan_sti(profile, target_s, preload_bytes, importance, bitwidths)
    if method == "STI-0MB":
        return plan_sti(profile, target_s, 0.0, importance, bitwidths)
    if method == "STI+slack":
        return plan_sti(profile, target_s, preload_bytes, importance, bitwidths, use_slack=True)
    if method == "Load&Exec":
        return plan_load_exec(profile, target_s, importance)
    for prefix, fn in (("StdPL-", plan_stdpl), ("PreloadModel-", plan_preload_model)):
        if method.startswith(prefix):
            label = method.removeprefix(prefix)
            bits = FULL_BITS if label == "full" else int(label.removesuffix("bit")) if label.endswith("bit") and \
                label.removesuffix("bit").isdigit() else None
            if bits is not None and bits in profile.bitwidths:
                return fn(profile, target_s, bits, importance)
    raise WorkbenchError(f"unknown method {method!r}; allowed: STI, STI-0MB, STI+slack, Load&Exec, StdPL-X, PreloadModel-X "
                         f"with X in {[_label(b) for b in profile.bitwidths]}")


# ---- the Table 7 differential experiment ----------------------------------------------------------
def upgrade_in_order(layers: Layers, order: Sequence[tuple[int, int]], n_upgrades: int, bits: int) -> Layers:
    """Raise the first `n_upgrades` shards of `order` that are in the submodel and below `bits` to `bits`."""
    require_int("n_upgrades", n_upgrades, low=0)
    present = {(k, s): j for k, layer in enumerate(layers) for j, (s, _) in enumerate(layer)}
    out = [list(layer) for layer in layers]
    done = 0
    for layer, shard in order:
        if done == n_upgrades:
            break
        j = present.get((layer, shard))
        if j is not None and out[layer][j][1] < bits:
            out[layer][j] = (shard, bits)
            done += 1
    if done < n_upgrades:
        raise WorkbenchError(f"only {done} shards of the submodel can be raised to {bits} bits, asked for {n_upgrades}")
    return tuple(tuple(layer) for layer in out)
