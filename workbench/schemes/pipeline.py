"""Heterogeneous pipeline parallelism with layers offloaded to storage (llama.cpp RPC, prima.cpp's piped ring).

The mechanism (as llama.cpp's RPC backend splits a model by layers, ``--tensor-split``, and prima.cpp's
"piped ring" runs it, Li et al. 2025): the devices form a ring in cluster order, device 0 first (the master).
Device i holds a contiguous range of `a_i` layers; `o_i` of them are *offloaded*: not resident, read from the
device's storage every pass (prima.cpp maps weights with mmap and lets the page cache drop them). One token
(decode) or one prompt (prefill, one pass, no micro-batching) goes once round the ring:

* the master embeds the tokens (not costed, as everywhere in `workbench.schemes.common`);
* each device in turn computes its layers (`common.layer_time`) and hands the (tokens, d_model) activation to
  the next device that holds layers (`network.collective_latency` of one point-to-point message: wire hops and
  one per-message endpoint time); the last hands it back to the master. A device with no layers is skipped;
  with the master alone there is no hand-off;
* the master runs the output head (`common.lm_head_time`, the serial part; sampling is not costed).

Storage reads, and what overlaps (assumed, conservative): device i keeps one staging buffer of one layer in
memory whenever it offloads. prima.cpp prefetches offloaded layers while other devices compute; here only the
*first* offloaded layer is prefetched into that buffer, and only during the *immediately preceding* device's
layer compute in ring order (a skipped preceding device hides nothing, the head / hand-offs hide nothing, a
single device hides nothing). Every other offloaded layer is read blocking, one at a time through the buffer.
So device i's reads cost ``o_i r_i - h_i`` with ``h_i = min(r_i, a_prev c_prev)`` when ``o_i > 0``, where
``r_i`` is one layer's weights at the device's `storage_read_bytes_per_s` (a missing rate is an error naming
storage_read_mb_per_s; nothing is assumed) and ``c_prev`` the preceding device's seconds per layer.

Latency = sum_i (a_i c_i + o_i r_i - h_i) + hops x hand-off + head, linear in (a, o) apart from the min, which
the MILP (`workbench.schemes.planners.pipeline`) writes with epigraph variables, so its objective is this latency.

Memory of device i = (a_i - o_i) resident layers + one staging layer if o_i > 0 + the KV cache of all a_i
layers (at `Workload.cache_bits`, `Workload.attended` tokens: KV stays resident) + on the master the
embeddings and output head. Budget: the device's outermost memory (`DeviceSpec.memory_bytes`), no swap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from workbench.core.apportion import apportion_capped
from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.units import MIB
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import collective_latency
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, register

SCHEME = "pipeline_offload"
PAPER = "prima.cpp"


# ---- the plan -----------------------------------------------------------------------------------------
def _count_tuple(name: str, values) -> tuple[int, ...]:
    """`values` as a tuple of non-negative ints, else a one-line error naming `name`."""
    try:
        items = tuple(values)
    except TypeError:
        raise WorkbenchError(f"{name} must be a sequence of integers >= 0 (one per device), got {values!r}") from None
    for v in items:
        if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 0:
            raise WorkbenchError(f"{name} must be integers >= 0 (one per device), got {values!r}")
    return tuple(int(v) for v in items)


@dataclass(frozen=True)
class PipelinePlan:
    """Layers per device in ring order (cluster order, master first) and how many of them are offloaded."""

    layers: tuple[int, ...]
    offloaded: tuple[int, ...] | None = None  # None: nothing offloaded

    def __post_init__(self) -> None:
        layers = _count_tuple("layers", self.layers)
        offloaded = (0,) * len(layers) if self.offloaded is None else _count_tuple("offloaded", self.offloaded)
        if not layers:
            raise WorkbenchError("layers must name at least one device, got ()")
        if len(offloaded) != len(layers):
            raise WorkbenchError(f"offloaded must have one entry per device ({len(layers)}), got {len(offloaded)}")
        if sum(layers) < 1:
            raise WorkbenchError(f"layers must sum to the model's n_layers (>= 1), got {layers}")
        for i, (a, o) in enumerate(zip(layers, offloaded)):
            if o > a:
                raise WorkbenchError(f"offloaded[{i}] must be <= layers[{i}] ({a}), got {o}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "offloaded", offloaded)

    @property
    def n_devices(self) -> int:
        """Devices the plan is for."""
        return len(self.layers)

    @property
    def n_layers(self) -> int:
        """Layers the plan places."""
        return sum(self.layers)

    @property
    def resident(self) -> tuple[int, ...]:
        """Layers each device keeps in memory."""
        return tuple(a - o for a, o in zip(self.layers, self.offloaded))

    @property
    def participants(self) -> tuple[int, ...]:
        """Devices in the ring: the master, then every device holding layers, in ring order."""
        return tuple(i for i, a in enumerate(self.layers) if i == 0 or a > 0)

    @property
    def handoffs(self) -> int:
        """Point-to-point activation hand-offs per pass: one per ring member, none for the master alone."""
        m = len(self.participants)
        return m if m > 1 else 0

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """Each device's contiguous [start, end) layer range in ring order."""
        edges = np.cumsum((0,) + self.layers)
        return tuple((int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]))

    def check(self, model: TransformerConfig, cluster: Cluster) -> PipelinePlan:
        """Raise a one-line WorkbenchError unless the plan has one entry per device and places every layer."""
        if self.n_devices != cluster.n:
            raise WorkbenchError(f"plan layers must have one entry per device ({cluster.n}), got {self.n_devices}")
        if self.n_layers != model.n_layers:
            raise WorkbenchError(f"plan layers must sum to n_layers ({model.n_layers}) of {model.name!r}, "
                                 f"got {self.n_layers}")
        return self

    def label(self) -> str:
        """Short text: layers per device, offloaded ones in brackets."""
        return " / ".join(f"{a}" + (f" ({o} off)" if o else "") for a, o in zip(self.layers, self.offloaded))


# ---- the linear coefficients every cost and the MILP use -----------------------------------------------
def layer_weight_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one layer's weights at the workload's weight bits."""
    return float(common.weight_bytes(model.block_params(), workload.weight_bits))


def layer_kv_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one layer's KV cache for the attended tokens, at the cache's width (`Workload.cache_bits`)."""
    return float(model.kv_cache_bytes_per_block(workload.attended, workload.cache_bits))


def master_weight_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of what only the master holds: embeddings, final norm and (untied) output head."""
    return float(common.weight_bytes(model.embedding_params() + model.head_params(), workload.weight_bits))


def handoff_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one hand-off: the (new tokens, d_model) activation at the activation precision."""
    return workload.new_tokens * model.d_model * workload.activation_bits / 8


def handoff_time(cluster: Cluster, n_bytes: float) -> tuple[float, float]:
    """(wire + endpoint seconds, bytes seconds) of one point-to-point message on the cluster's link
    (`network.point_to_point`, split into its two terms)."""
    topo = cluster.topology
    link_s, bytes_s = collective_latency("star", "broadcast", 2, n_bytes, topo.link.bandwidth_bytes_per_s,
                                         topo.link.latency_s, topo.path_hops, breakdown=True,
                                         message_overhead=topo.link.message_overhead_s)
    return float(link_s), float(bytes_s)


def read_time(device: DeviceSpec, n_bytes: float) -> float:
    """Seconds to read `n_bytes` from the device's storage; a device without a rate is an error."""
    if device.storage_read_bytes_per_s is None:
        raise WorkbenchError(f"device {device.name!r} has no storage_read_mb_per_s: offloading layers to storage "
                             f"needs it (a rate > 0 MB/s)")
    return n_bytes / device.storage_read_bytes_per_s


@dataclass(frozen=True)
class StageCoefficients:
    """Per-device seconds and bytes of one layer on one model/cluster/workload: the pipeline's linear model."""

    n_layers: int
    compute_s: tuple[float, ...]  # c_i: one whole layer on device i (common.layer_time)
    fixed_s: tuple[float, ...]  # of c_i, the size-independent launches + layer overhead
    read_s: tuple[float | None, ...]  # r_i: one layer's weights from storage (None: no storage rate)
    budget_bytes: tuple[float, ...]  # M_i: outermost memory
    fixed_bytes: tuple[float, ...]  # F_i: the master's embeddings + head, 0 elsewhere
    layer_bytes: float  # B: one layer's weights
    kv_bytes: float  # K: one layer's KV cache
    handoff_link_s: float  # per hand-off: wire hops + endpoint time
    handoff_bytes_s: float  # per hand-off: bytes / bandwidth
    head_s: float  # the master's output head (serial)
    names: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Devices."""
        return len(self.compute_s)

    @property
    def handoff_s(self) -> float:
        """Seconds of one hand-off."""
        return self.handoff_link_s + self.handoff_bytes_s

    def prev(self, i: int) -> int:
        """The device before i in ring order."""
        return (i - 1) % self.n

    def max_layers(self, i: int) -> int:
        """Most layers device i can host within its budget: all resident, or (with storage) all offloaded but
        one staging buffer; -1 when not even its fixed part fits."""
        room = self.budget_bytes[i] - self.fixed_bytes[i]
        if room < 0:
            return -1
        best = math.floor(room / (self.layer_bytes + self.kv_bytes))
        if self.read_s[i] is not None and room >= self.layer_bytes:
            best = max(best, math.floor((room - self.layer_bytes) / self.kv_bytes) if self.kv_bytes > 0
                       else self.n_layers)
        return min(best, self.n_layers)

    def min_offloaded(self, i: int, a: int) -> int | None:
        """Fewest offloaded layers that let device i host `a` layers (None: it cannot)."""
        room = self.budget_bytes[i] - self.fixed_bytes[i]
        if a * (self.layer_bytes + self.kv_bytes) <= room:
            return 0
        if self.read_s[i] is None or room - a * self.kv_bytes - self.layer_bytes < 0:
            return None
        return a - min(a, math.floor((room - a * self.kv_bytes - self.layer_bytes) / self.layer_bytes))


def coefficients(model: TransformerConfig, cluster: Cluster, workload: Workload) -> StageCoefficients:
    """The per-layer seconds and bytes of every device (common.layer_time, storage reads, one hand-off, head)."""
    layer_b = layer_weight_bytes(model, workload)
    link_s, bytes_s = handoff_time(cluster, handoff_bytes(model, workload))
    master = cluster.devices[0]
    head = common.lm_head_time(model, cluster.serial_device(master), workload) if workload.output_head else 0.0
    return StageCoefficients(
        n_layers=model.n_layers,
        compute_s=tuple(common.layer_time(model, d, workload) for d in cluster.devices),
        fixed_s=tuple(common.fixed_layer_time(d) for d in cluster.devices),
        read_s=tuple(None if d.storage_read_bytes_per_s is None else read_time(d, layer_b) for d in cluster.devices),
        budget_bytes=tuple(float(d.memory_bytes) for d in cluster.devices),
        fixed_bytes=(master_weight_bytes(model, workload),) + (0.0,) * (cluster.n - 1),
        layer_bytes=layer_b, kv_bytes=layer_kv_bytes(model, workload),
        handoff_link_s=link_s, handoff_bytes_s=bytes_s, head_s=float(head),
        names=tuple(d.name for d in cluster.devices))


def check_capacity(coef: StageCoefficients, model_name: str = "the model") -> None:
    """Raise InfeasibleError naming the binding constraint when no plan fits: the master's fixed part, or the
    total memory + storage capacity (the only constraints that couple devices: sum_i a_i = L)."""
    if coef.fixed_bytes[0] > coef.budget_bytes[0]:
        raise InfeasibleError(
            f"infeasible: memory of the master ({coef.names[0] if coef.names else 'device 0'}): embeddings and "
            f"output head need {coef.fixed_bytes[0] / MIB:.0f} MiB but it holds {coef.budget_bytes[0] / MIB:.0f} MiB")
    caps = [max(coef.max_layers(i), 0) for i in range(coef.n)]
    if sum(caps) < coef.n_layers:
        no_storage = sum(r is None for r in coef.read_s)
        raise InfeasibleError(
            f"infeasible: total memory + storage: the devices can host at most {sum(caps)} of the {coef.n_layers} "
            f"layers of {model_name} ({coef.layer_bytes / MIB:.0f} MiB weights + {coef.kv_bytes / MIB:.1f} MiB KV "
            f"per layer; an offloading device keeps its KV and a one-layer staging buffer; {no_storage} of "
            f"{coef.n} devices have no storage_read_mb_per_s)")


# ---- the cost of a plan ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PipelineCost:
    """One pass round the ring for a plan: per-device compute, reads, hidden reads, memory; hand-offs; head."""

    plan: PipelinePlan
    compute_s: tuple[float, ...]  # a_i c_i
    fixed_s: tuple[float, ...]  # of it, launches + layer overhead
    read_s: tuple[float, ...]  # o_i r_i
    hidden_s: tuple[float, ...]  # h_i: the prefetched first offloaded layer's read, hidden
    memory_bytes: tuple[float, ...]
    budget_bytes: tuple[float, ...]
    handoffs: int
    handoff_link_s: float  # all hand-offs
    handoff_bytes_s: float
    head_s: float

    @property
    def io_stall_s(self) -> float:
        """Seconds devices wait for storage (reads not hidden)."""
        return float(sum(self.read_s) - sum(self.hidden_s))

    @property
    def latency_s(self) -> float:
        """Seconds of the pass: every device's layers and unhidden reads, the hand-offs, the head."""
        return float(sum(self.compute_s) + self.io_stall_s + self.handoff_link_s + self.handoff_bytes_s + self.head_s)

    @property
    def oom(self) -> bool:
        """Whether some device needs more than its memory."""
        return any(m > b for m, b in zip(self.memory_bytes, self.budget_bytes))


def device_memory(coef: StageCoefficients, plan: PipelinePlan) -> tuple[float, ...]:
    """Bytes each device holds: resident layers, a staging layer if it offloads, KV of its layers, fixed part."""
    return tuple(r * coef.layer_bytes + (coef.layer_bytes if o else 0.0) + a * coef.kv_bytes + f
                 for r, o, a, f in zip(plan.resident, plan.offloaded, plan.layers, coef.fixed_bytes))


def hidden_reads(coef: StageCoefficients, plan: PipelinePlan, reads: tuple[float | None, ...]) -> tuple[float, ...]:
    """h_i = min(r_i, a_prev c_prev) for a device that offloads (more than one device), else 0."""
    if coef.n == 1:
        return (0.0,) * coef.n
    return tuple(min(reads[i], plan.layers[coef.prev(i)] * coef.compute_s[coef.prev(i)]) if plan.offloaded[i] else 0.0
                 for i in range(coef.n))


def plan_cost(coef: StageCoefficients, plan: PipelinePlan) -> PipelineCost:
    """Cost a plan on precomputed coefficients (the brute force and the MILP check use this directly)."""
    if plan.n_devices != coef.n or plan.n_layers != coef.n_layers:
        raise WorkbenchError(f"plan layers must have {coef.n} entries summing to n_layers ({coef.n_layers}), "
                             f"got {plan.layers}")
    reads = []
    for i, o in enumerate(plan.offloaded):
        if o and coef.read_s[i] is None:
            raise WorkbenchError(f"device {i} ({coef.names[i] if coef.names else ''}) has no storage_read_mb_per_s: "
                                 f"the plan offloads {o} layers to its storage (offloaded[{i}] must be 0)")
        reads.append(coef.read_s[i])
    hops = plan.handoffs
    return PipelineCost(
        plan=plan,
        compute_s=tuple(a * c for a, c in zip(plan.layers, coef.compute_s)),
        fixed_s=tuple(a * f for a, f in zip(plan.layers, coef.fixed_s)),
        read_s=tuple(o * r if o else 0.0 for o, r in zip(plan.offloaded, reads)),
        hidden_s=hidden_reads(coef, plan, tuple(reads)),
        memory_bytes=device_memory(coef, plan), budget_bytes=coef.budget_bytes,
        handoffs=hops, handoff_link_s=hops * coef.handoff_link_s, handoff_bytes_s=hops * coef.handoff_bytes_s,
        head_s=coef.head_s)


def pipeline_cost(model: TransformerConfig, cluster: Cluster, workload: Workload, plan: PipelinePlan) -> PipelineCost:
    """Cost one pass (a decode token or a prompt) of `plan` on the cluster."""
    plan.check(model, cluster)
    return plan_cost(coefficients(model, cluster, workload), plan)


# ---- the default plan: llama.cpp's split by memory ------------------------------------------------------
def default_plan(model: TransformerConfig, cluster: Cluster, workload: Workload) -> PipelinePlan:
    """llama.cpp's default split (layers in proportion to each device's free memory, here its budget less
    its fixed part), capped at what each device can host; a device offloads the fewest layers it must."""
    coef = coefficients(model, cluster, workload)
    check_capacity(coef, model.name)
    caps = [max(coef.max_layers(i), 0) for i in range(coef.n)]
    room = [max(b - f, 0.0) for b, f in zip(coef.budget_bytes, coef.fixed_bytes)]
    layers = apportion_capped(model.n_layers, room, caps)
    offloaded = [coef.min_offloaded(i, a) for i, a in enumerate(layers)]
    if None in offloaded:  # cannot happen below the caps; say so rather than return an OOM plan
        i = offloaded.index(None)
        raise InfeasibleError(f"infeasible: memory of device {i}: its {layers[i]} layers do not fit")
    return PipelinePlan(layers, tuple(offloaded))


# ---- the arena's evaluator --------------------------------------------------------------------------
def evaluate_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload,
                      plan: PipelinePlan | None = None, scheme: str = SCHEME) -> SchemeResult:
    """Pipeline parallelism with offloading for `plan` (default: `default_plan`): one pass round the ring."""
    plan = default_plan(model, cluster, workload) if plan is None else plan.check(model, cluster)
    cost = plan_cost(coefficients(model, cluster, workload), plan)
    compute = sum(cost.compute_s) + cost.head_s
    result = SchemeResult(scheme, PAPER, workload.phase, cost.latency_s, compute_s=compute,
                          comm_link_latency_s=cost.handoff_link_s, comm_bytes_s=cost.handoff_bytes_s,
                          io_stall_s=cost.io_stall_s, peak_memory_bytes=cost.memory_bytes,
                          memory_budget_bytes=cost.budget_bytes,
                          notes=f"piped ring, layers {plan.label()}", extra={"plan": plan, "cost": cost})
    busy = {side: sum(a * common.layer_time(model, d, workload, bound=side) for a, d in zip(plan.layers,
                                                                                            cluster.devices))
            for side in common.BOUNDS}  # each device's own layers' table rows (the head is serial)
    return result.carve(fixed_s=sum(cost.fixed_s), serial_s=cost.head_s).split_streaming(
        common.streaming_share(busy["memory"], busy["compute"]))


@register(SCHEME, PAPER, no_operators=common.PIPELINE_ROWS,
          origin="prima.cpp (Li et al. 2025): the piped ring on llama.cpp's RPC layer split",
          partition="pipeline", moe=True, engine="llama.cpp", draft_placements=("root", "own", "ring"))
def evaluate_pipeline_offload(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """llama.cpp RPC / prima.cpp pipeline: layers split by memory, what does not fit offloaded to storage."""
    return evaluate_pipeline(model, cluster, workload)
