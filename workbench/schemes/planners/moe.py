"""Where a mixture of experts' layers and experts go on heterogeneous devices: a HiGHS MILP (`planners.milp`).

Given a model, a cluster and the routing frequencies (pi[l, e]: the probability a token picks expert e of MoE
layer l; each layer's sum k; default the routing model's `popularity`, uniform k / E), the planner decides how
many layers' attention blocks (each with its router, norms, shared experts and KV cache, resident) each device
runs, and which experts it holds. A device's expected time per decode token is

    T_j = a_j A_j + sum_e x_{e,j} pi_e X_j

with A_j one (mean) layer's attention and router rows, its always-on FFN (shared experts, dense first layers) and
the layer overhead on device j, and X_j one routed expert's rows for one token
(streaming its weights: `schemes.moe.ep_expert_rows`), both from the operator table. The MILP minimises
max_j T_j (the slowest device, an epigraph variable t) subject to

    sum_j a_j = L,   sum_j x_{e,j} = 1 for every expert,   a_j B + sum_e x_{e,j} W + F_j <= M_j,

B one layer's resident bytes and its KV, W one expert's bytes, F_j the master's embeddings and head (device 0),
M_j the device's outermost memory. Experts of near-equal frequency are interchangeable, so the program counts
them: the model's L_moe x E experts are sorted by pi and cut into at most `groups` equal quantile groups (one group
for uniform routing, exact), each carrying its members' mean frequency, and x_{g,j} is an integer count; the
assignment deals each group's experts (most frequent first) to the devices in order. Communication is not in
T_j (every placement of this kind moves the same activations per token: a dispatch and a combine per MoE layer).
No plan fits -> `InfeasibleError` naming the binding constraint: the master's fixed part, the total memory, or the
per-device budgets that no integral split satisfies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.apportion import even_split
from workbench.core.errors import InfeasibleError, WorkbenchError, require_int
from workbench.core.units import GIB
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes import moe as schemes_moe
from workbench.schemes.base import Cluster, Workload
from workbench.schemes.planners.milp import MilpBuilder

MAX_GROUPS = 16


@dataclass(frozen=True)
class PlacementCoefficients:
    """The planner's linear model: per-device seconds and bytes, the expert groups and their frequencies."""

    n_layers: int
    attention_s: tuple[float, ...]  # A_j
    expert_s: tuple[float, ...]  # X_j
    layer_bytes: float  # B
    expert_bytes: float  # W
    fixed_bytes: tuple[float, ...]  # F_j
    budget_bytes: tuple[float, ...]  # M_j
    group_sizes: tuple[int, ...]
    group_pi: tuple[float, ...]
    order: np.ndarray  # flat (layer * E + expert) indexes, most frequent first, cut into the groups in turn

    @property
    def n(self) -> int:
        """Devices."""
        return len(self.attention_s)


@dataclass(frozen=True)
class Placement:
    """Layers' attention blocks and experts per device, with each device's expected seconds per token and bytes."""

    layers: tuple[int, ...]
    experts: np.ndarray  # (groups, devices) counts
    owner: np.ndarray  # (MoE layers, E): the device holding each expert
    device_s: tuple[float, ...]
    memory_bytes: tuple[float, ...]
    budget_bytes: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.layers) != len(self.device_s) or self.experts.shape[1] != len(self.layers):
            raise WorkbenchError("placement: layers, experts and device times need one entry per device")

    @property
    def slowest_s(self) -> float:
        """The slowest device's expected seconds per token (the objective)."""
        return max(self.device_s)

    @property
    def fits(self) -> bool:
        """Whether every device holds its part within its memory."""
        return all(m <= b * (1 + 1e-9) for m, b in zip(self.memory_bytes, self.budget_bytes))


def routing_frequencies(model: TransformerConfig, workload: Workload, frequencies=None) -> np.ndarray:
    """pi as (MoE layers, E): the given per-expert (E,) or per-layer (L_moe, E) frequencies, each row checked to
    sum to k, or the routing model's popularity for every layer."""
    if frequencies is None:
        rows = np.atleast_2d(schemes_moe.popularity(workload.routing, model.n_experts, model.n_active_experts))
        if len(rows) == 1:
            return np.tile(rows, (model.moe_layers, 1))
        if len(rows) != model.moe_layers:
            raise WorkbenchError(f"the routing model gives {len(rows)} layers' popularity; {model.name} has "
                                 f"{model.moe_layers} MoE layers (allowed: 1 or {model.moe_layers})")
        return np.array(rows, dtype=float)
    pi = np.asarray(frequencies, dtype=float)
    if pi.ndim == 1:
        return np.tile(schemes_moe.check_frequencies(pi, model), (model.moe_layers, 1))
    if pi.shape != (model.moe_layers, model.n_experts):
        raise WorkbenchError(f"frequencies must have shape ({model.n_experts},) or ({model.moe_layers}, "
                             f"{model.n_experts}) (MoE layers x experts), got {pi.shape}")
    return np.array([schemes_moe.check_frequencies(r, model) for r in pi])


def expert_group_cuts(pi: np.ndarray, groups: int) -> tuple[np.ndarray, tuple[int, ...], tuple[float, ...]]:
    """All experts ordered most frequent first (stable), cut into at most `groups` near-equal groups (one when
    every frequency is equal): (order, sizes, mean frequency of each group)."""
    flat = pi.ravel()
    order = np.argsort(-flat, kind="stable")
    g = 1 if np.allclose(flat, flat[0]) else min(groups, flat.size)
    sizes = even_split(flat.size, g)
    edges = np.cumsum((0,) + sizes)
    means = tuple(float(flat[order[a:b]].mean()) for a, b in zip(edges[:-1], edges[1:]))
    return order, sizes, means


def resident_ffn_seconds(model: TransformerConfig, device, step: Workload) -> float:
    """Seconds of a mean layer's always-computed FFN for one token: the shared experts of the MoE layers and the
    dense first layers' FFN, each weighted by its share of the layers."""
    shared = schemes_moe.ep_expert_rows(model, step, model.n_shared_experts, model.n_shared_experts) \
        if model.n_shared_experts else []
    dense = schemes_moe.dense_ffn_rows(model, step, 1) if model.n_dense_layers else []
    return (model.moe_layers * sum(schemes_moe.row_seconds(device, shared).values())
            + model.n_dense_layers * sum(schemes_moe.row_seconds(device, dense).values())) / model.n_layers


def coefficients(model: TransformerConfig, cluster: Cluster, workload: Workload, frequencies=None,
                 groups: int = MAX_GROUPS) -> PlacementCoefficients:
    """A_j, X_j, B, W, F_j, M_j and the expert groups for a decode step of `workload`'s attended length."""
    schemes_moe.require_moe(model, "the MoE placement planner")
    require_int("groups", groups, low=1)
    step = Workload(phase="decode", seq_len=workload.seq_len, kv_len=workload.kv_len, weight_bits=workload.weight_bits,
                    activation_bits=workload.activation_bits, kv_bits=workload.kv_bits, routing=workload.routing)
    table = {r.name: r for r in common.layer_operators(model, step)}
    attention, expert = [], []
    for device in cluster.devices:
        sec = schemes_moe.row_seconds(device, [table[n] for n in schemes_moe.ATTENTION_ROWS + ("router",)])
        attention.append(sum(sec.values()) + resident_ffn_seconds(model, device, step) + common.layer_overhead(device))
        expert.append(sum(schemes_moe.row_seconds(device, schemes_moe.ep_expert_rows(model, step, 1.0, 1.0)).values()))
    order, sizes, means = expert_group_cuts(routing_frequencies(model, step, frequencies), groups)
    return PlacementCoefficients(
        model.n_layers, tuple(attention), tuple(expert),
        schemes_moe.resident_layer_bytes(model, step) + model.kv_cache_bytes_per_block(step.attended, step.cache_bits),
        schemes_moe.expert_bytes(model, step),
        (schemes_moe.master_bytes(model, step),) + (0.0,) * (cluster.n - 1),
        tuple(float(d.memory_bytes) for d in cluster.devices), sizes, means, order)


def check_capacity(coef: PlacementCoefficients) -> None:
    """InfeasibleError naming the binding constraint when no placement can fit: the master's fixed part, or the
    total memory against the model's bytes."""
    if coef.fixed_bytes[0] > coef.budget_bytes[0]:
        raise InfeasibleError(f"infeasible: memory of the master (device 0): embeddings and head need "
                              f"{coef.fixed_bytes[0] / GIB:.2f} GiB, it holds {coef.budget_bytes[0] / GIB:.2f} GiB")
    need = coef.n_layers * coef.layer_bytes + sum(coef.group_sizes) * coef.expert_bytes + sum(coef.fixed_bytes)
    have = sum(coef.budget_bytes)
    if need > have:
        raise InfeasibleError(f"infeasible: total memory: the model needs {need / GIB:.2f} GiB (layers, every "
                              f"expert, embeddings), the {coef.n} devices hold {have / GIB:.2f} GiB")


def placement_of(coef: PlacementCoefficients, layers, experts, moe_layers: int, n_experts: int) -> Placement:
    """The `Placement` of layer counts and (groups, devices) expert counts: each device's time, bytes, owners."""
    layers = tuple(int(a) for a in layers)
    x = np.asarray(experts, dtype=int)
    pi = np.asarray(coef.group_pi)
    device_s = tuple(float(a * ta + (x[:, j] * pi).sum() * te)
                     for j, (a, ta, te) in enumerate(zip(layers, coef.attention_s, coef.expert_s)))
    memory = tuple(float(a * coef.layer_bytes + x[:, j].sum() * coef.expert_bytes + f)
                   for j, (a, f) in enumerate(zip(layers, coef.fixed_bytes)))
    owner = np.empty(moe_layers * n_experts, dtype=int)
    start = 0
    for g, size in enumerate(coef.group_sizes):  # deal each group's experts to the devices in order
        owner[coef.order[start:start + size]] = np.repeat(np.arange(coef.n), x[g])
        start += size
    return Placement(layers, x, owner.reshape(moe_layers, n_experts), device_s, memory, coef.budget_bytes)


def even_placement(model: TransformerConfig, coef: PlacementCoefficients) -> Placement:
    """The naive split: layers and every group's experts dealt evenly over the devices, whatever they are."""
    x = np.array([even_split(size, coef.n) for size in coef.group_sizes])
    return placement_of(coef, even_split(coef.n_layers, coef.n), x, model.moe_layers, model.n_experts)


def plan_placement(model: TransformerConfig, cluster: Cluster, workload: Workload, frequencies=None,
                   groups: int = MAX_GROUPS, time_limit_s: float = 10.0) -> Placement:
    """The placement that minimises the slowest device's expected seconds per decode token within memory."""
    coef = coefficients(model, cluster, workload, frequencies, groups)
    check_capacity(coef)
    n, g = coef.n, len(coef.group_sizes)
    m = MilpBuilder()
    m.add_variable("a", n, ub=coef.n_layers, integer=True)
    m.add_variable("x", g * n, ub=np.repeat(coef.group_sizes, n), integer=True)
    m.add_variable("t")
    m.add_constraint(m.sum_of("a"), low=coef.n_layers, high=coef.n_layers)
    for i, size in enumerate(coef.group_sizes):
        m.add_constraint(m.sum_of("x", indices=range(i * n, (i + 1) * n)), low=size, high=size)
    for j in range(n):
        held = [(("x", i * n + j), coef.expert_bytes) for i in range(g)]
        m.add_constraint([(("a", j), coef.layer_bytes)] + held, high=coef.budget_bytes[j] - coef.fixed_bytes[j])
        work = [(("x", i * n + j), coef.group_pi[i] * coef.expert_s[j]) for i in range(g)]
        m.add_constraint([(("a", j), coef.attention_s[j])] + work + [("t", -1.0)], high=0.0)
    m.add_cost("t", 1.0)
    solution = m.build().solve(mip_rel_gap=1e-3, time_limit_s=time_limit_s)
    if not solution.found:
        raise InfeasibleError(f"infeasible: per-device memory: no integral split of the {coef.n_layers} layers and "
                              f"{sum(coef.group_sizes)} experts fits every device's budget ({solution.message})")
    a = np.round(solution.value("a")).astype(int)
    x = np.round(solution.value("x")).astype(int).reshape(g, n)
    return placement_of(coef, a, x, model.moe_layers, model.n_experts)
