"""STI (Guo et al.) on the shared cost model: one device streams weight shards from flash while it computes.

STI's partition is in time, not across devices: layer k's shards are read (and decompressed) while
layer k-1 computes. The cost model is STI's own offline profile (Sec. 5.2), built from a `DeviceSpec`:

* compute delay of one layer with m of M shards: ``max(floor, FLOPs x m/M / (peak x efficiency))``
  + decompression of m shards (`DeviceSpec.decompress_weights_per_s`; 0: not modelled). `floor`
  (`DeviceSpec.layer_time_floor_s`, GPU only; 0: none) is the fixed cost a GPU pays for any part of a layer
  (Sec. 7.3);
* IO delay of one shard at k bits: its on-disk record (``workbench.schemes.sti_shards.shard_record_bytes``) /
  the device's flash read rate (``storage_read_bandwidth``).

On that profile this module defines Definition 0's accumulated IO budgets and the pipeline recurrence
(IO runs back to back in layer order; layer k computes when its shards are in and layer k-1 is done).
With the preload buffer holding a byte prefix of the layer-ordered shard stream, the pipeline never
stalls iff every AIB is >= 0 (tests check the equivalence on random plans).

One arena scheme is registered here: ``single_device_streamed`` (the standard layerwise pipeline at the
workload's weight bits, StdPL-X). ``sti_pipeline`` (STI's planner on the whole model at the target latency
= its compute time, with the platform's preload buffer) plans, so it is registered one layer up, in
`workbench.schemes.planners.sti`; this module costs the plan it is given (`evaluate_planned_pipeline`) and never
imports a planner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from workbench.core.constants import paper_values
from workbench.core.errors import WorkbenchError, require_int, require_non_negative, require_positive
from workbench.machine.hardware import DeviceSpec
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, costed, register
from workbench.schemes.sti_quantize import FULL_BITS, check_bits
from workbench.schemes.sti_shards import n_shards, shard_record_bytes

PAPER = "sti"
STREAMED = "single_device_streamed"  # the scheme this module registers
PIPELINE = "sti_pipeline"  # registered by workbench.schemes.planners.sti (it plans)


def sti_constants() -> Mapping[str, Any]:
    """Values of data/constants/sti.toml (the one cached loader, `workbench.core.constants.paper_values`)."""
    return paper_values(PAPER)


def default_bitwidths() -> tuple[int, ...]:
    """The paper's shard versions: {2,3,4,5,6} bits + 32-bit."""
    return tuple(int(b) for b in sti_constants()["bitwidths"])


def read_bandwidth(device: DeviceSpec) -> float:
    """Flash read rate; STI needs one."""
    if device.storage_read_bytes_per_s is None:
        raise WorkbenchError(f"device {device.name!r} has no storage_read_bandwidth; STI streams weights from flash")
    return device.storage_read_bytes_per_s


# ---- the offline profile ----------------------------------------------------------------------
def shard_weights(model: TransformerConfig) -> int:
    """Weights of one shard: a block's weight matrices / M (= workbench.schemes.sti_shards.shard_weight_count for BERT).

    The cost model extends to decoders (GQA, SwiGLU) this way; STI itself targets BERT (Sec. 3.4).
    """
    mats = 3 if model.gated_ffn else 2
    matrices = 2 * model.d_model * model.q_dim + 2 * model.d_model * model.kv_dim + mats * model.d_model * model.d_ff
    return matrices // n_shards(model)


def layer_flops(model: TransformerConfig, m: int, seq_len: int, kv_len: int | None = None) -> float:
    """FLOPs of one layer with m of M shards (every term scales with the heads and neurons kept)."""
    require_int("shards per layer", m, low=1, high=n_shards(model))
    return model.block_flops(seq_len, kv_len) * m / n_shards(model)


def layer_exec_time(model: TransformerConfig, device: DeviceSpec, m: int, seq_len: int, kv_len: int | None = None) -> float:
    """Execution delay of one layer with m shards (no decompression): compute time plus the device's fixed
    per-layer launches and overhead (`common.fixed_layer_time`), at least the floor.

    STI dequantises every shard to fp32 before it computes (Sec. 3.1), so the shared compute dtype is that
    of fp32 operands whatever the stored bitwidth; STI's profile is one rate per layer (no roofline).
    """
    dtype = common.compute_dtype(device, FULL_BITS, FULL_BITS)
    layer = common.Operator("layer", layer_flops(model, m, seq_len, kv_len), 0.0, 0, dtype,
                            common.kernel_kind(seq_len))  # one rate per layer: no bytes, launches in fixed
    compute = float(common.cost(device, [layer])[0].compute_s)
    return max(device.layer_time_floor_s, compute + common.fixed_layer_time(device))


def decompress_time(model: TransformerConfig, device: DeviceSpec, m: int) -> float:
    """Seconds to substitute centroids for the indexes of m shards (0 if the device gives no rate)."""
    rate = device.decompress_weights_per_s
    return 0.0 if rate == 0 else m * shard_weights(model) / rate


@dataclass(frozen=True)
class LatencyProfile:
    """What STI measures offline: compute delay of a layer with m shards, IO delay of a shard per bitwidth."""

    name: str
    n_layers: int
    n_shards: int
    compute_s: tuple[float, ...]  # [m-1]: one layer with m shards, decompression included
    shard_bytes: tuple[tuple[int, float], ...]  # (bits, on-disk bytes of one shard), ascending bits
    read_bytes_per_s: float

    def __post_init__(self) -> None:
        require_int("n_layers", self.n_layers, low=1)
        require_int("n_shards", self.n_shards, low=1)
        if len(self.compute_s) != self.n_shards:
            raise WorkbenchError(f"compute_s needs one delay per m = 1..{self.n_shards}, got {len(self.compute_s)}")
        for t in self.compute_s:
            require_positive("layer compute delay", t)
        if not self.shard_bytes:
            raise WorkbenchError("a latency profile needs at least one bitwidth")
        object.__setattr__(self, "shard_bytes", tuple(sorted((check_bits(int(b)), float(n)) for b, n in self.shard_bytes)))
        for _, n in self.shard_bytes:
            require_positive("shard bytes", n)
        require_positive("read_bytes_per_s", self.read_bytes_per_s)

    @property
    def bitwidths(self) -> tuple[int, ...]:
        """Available shard versions, ascending."""
        return tuple(b for b, _ in self.shard_bytes)

    def t_comp(self, m: int) -> float:
        """Compute delay of one layer with m shards."""
        require_int("shards per layer", m, low=1, high=self.n_shards)
        return self.compute_s[m - 1]

    def bytes_of(self, bits: int) -> float:
        """On-disk bytes of one shard at `bits`."""
        for b, n in self.shard_bytes:
            if b == bits:
                return n
        raise WorkbenchError(f"bitwidth {bits} is not in the profile; available: {self.bitwidths}")

    def io_s(self, bits: int) -> float:
        """IO delay of one shard at `bits`."""
        return self.bytes_of(bits) / self.read_bytes_per_s

    def model_bytes(self, bits: int) -> float:
        """Bytes of all N x M shards at `bits` (the whole sharded model)."""
        return self.n_layers * self.n_shards * self.bytes_of(bits)


def latency_profile(model: TransformerConfig, device: DeviceSpec, seq_len: int | None = None,
                    bitwidths: Sequence[int] | None = None, outlier_fraction: float | None = None,
                    kv_len: int | None = None, name: str = "") -> LatencyProfile:
    """STI's profile of `model` on `device` at padded length `seq_len` (default from data/constants/sti.toml)."""
    consts = sti_constants()
    seq_len = int(consts["profile_seq_len"]) if seq_len is None else require_int("seq_len", seq_len, low=1)
    bitwidths = default_bitwidths() if bitwidths is None else tuple(check_bits(int(b)) for b in bitwidths)
    outlier_fraction = float(consts["outlier_fraction"]) if outlier_fraction is None else outlier_fraction
    if not 0 <= outlier_fraction < 1:
        raise WorkbenchError(f"outlier_fraction must be in [0, 1), got {outlier_fraction!r}")
    m_max = n_shards(model)
    s = shard_weights(model)
    compute = tuple(layer_exec_time(model, device, m, seq_len, kv_len) + decompress_time(model, device, m)
                    for m in range(1, m_max + 1))
    sizes = tuple((b, shard_record_bytes(s, b, 0 if b == FULL_BITS else outlier_fraction * s)) for b in bitwidths)
    return LatencyProfile(name or f"{model.name} on {device.name}", model.n_layers, m_max, compute, sizes,
                          read_bandwidth(device))


# ---- Definition 0 and the pipeline ------------------------------------------------------------
def accumulated_io_budgets(layer_compute_s, layer_io_s, bonus_io_s: float = 0.0) -> np.ndarray:
    """AIB(k) = bonus + sum_{j<k} compute_j - sum_{j<=k} io_j (Definition 0; bonus = preload as IO time)."""
    comp = np.asarray(layer_compute_s, dtype=float)
    io = np.asarray(layer_io_s, dtype=float)
    if comp.shape != io.shape or comp.ndim != 1:
        raise WorkbenchError(f"per-layer compute and IO must be 1-D of the same length, got {comp.shape}, {io.shape}")
    require_non_negative("bonus IO time", float(bonus_io_s))
    earlier_compute = np.concatenate([[0.0], np.cumsum(comp)[:-1]])
    return bonus_io_s + earlier_compute - np.cumsum(io)


def remaining_io(layer_io_s, preloaded_io_s: float) -> np.ndarray:
    """Per-layer IO left after a preload buffer holding the first `preloaded_io_s` of the layer-ordered stream."""
    io = np.asarray(layer_io_s, dtype=float)
    cum = np.cumsum(io)
    done = np.minimum(cum, preloaded_io_s)
    return np.maximum(io - np.diff(np.concatenate([[0.0], done])), 0.0)


def pipeline_times(layer_io_s, layer_compute_s, preloaded_io_s: float = 0.0) -> dict[str, np.ndarray]:
    """IO/compute pipeline: IO back to back in layer order; compute k after its IO and compute k-1.

    The same recurrence as `workbench.core.simulate.pipeline` (which papers/sti.py uses for the timeline).
    """
    io = remaining_io(layer_io_s, preloaded_io_s)
    comp = np.asarray(layer_compute_s, dtype=float)
    load_end = np.cumsum(io)
    start, end = np.empty_like(comp), np.empty_like(comp)
    prev = 0.0
    for k in range(comp.size):
        start[k] = max(prev, load_end[k])
        end[k] = prev = start[k] + comp[k]
    return {"load_end": load_end, "compute_start": start, "compute_end": end}


def pipeline_makespan(layer_io_s, layer_compute_s, preloaded_io_s: float = 0.0) -> tuple[float, float]:
    """(makespan, compute stall) of the pipeline; stall = makespan - total compute."""
    t = pipeline_times(layer_io_s, layer_compute_s, preloaded_io_s)
    makespan = float(t["compute_end"][-1]) if t["compute_end"].size else 0.0
    return makespan, makespan - float(np.sum(layer_compute_s))


# ---- memory -----------------------------------------------------------------------------------
def working_buffer_bytes(model: TransformerConfig, workload: Workload, m: int | None = None) -> float:
    """One decompressed fp32 layer (m shards + its resident biases/norms) and its activations (Sec. 3.1)."""
    m = n_shards(model) if m is None else m
    weights = m * shard_weights(model) * 4.0 + (model.block_params() - n_shards(model) * shard_weights(model)) * 4.0
    return weights + model.activation_bytes(workload.new_tokens, workload.attended, bits=32)


# ---- arena evaluators ---------------------------------------------------------------------------
def _arena_device(cluster: Cluster) -> tuple[DeviceSpec, str]:
    note = "" if cluster.n == 1 else f"single-device scheme: runs on device 0 of {cluster.n}"
    return cluster.devices[0], note


def _arena_seq(workload: Workload) -> tuple[int, int | None]:
    return (workload.seq_len, None) if workload.phase == "prefill" else (1, workload.kv_len)


def _shard_bytes_at(model: TransformerConfig, bits: float) -> float:
    """On-disk bytes of one shard at `bits`: the dictionary format for 1..8 bits, raw otherwise."""
    s = shard_weights(model)
    if float(bits).is_integer() and 1 <= bits <= 8:
        return shard_record_bytes(s, int(bits), float(sti_constants()["outlier_fraction"]) * s)
    return s * bits / 8


def _result(scheme: str, model, device, workload, latency, compute, stall, memory, note, **extra) -> SchemeResult:
    """The result, plus a decoder's next-token logits in a generation step (`Workload.output_head`): the
    output matrix stays resident (its bytes join the peak memory) and its GEMV runs after the last layer.
    STI's paper runs classifiers, so its own experiments never reach this."""
    head = common.lm_head_time(model, device, workload) if workload.output_head else 0.0
    if head > 0:
        latency, compute = latency + head, compute + head
        memory += common.weight_bytes(model.vocab_size * model.d_model, workload.weight_bits)
    budget = device.memory_bytes if device.memory else float("inf")
    result = costed(scheme, PAPER, workload.phase, latency, (device.name,), note, compute_s=compute,
                    io_stall_s=stall, peak_memory_bytes=(memory,), memory_budget_bytes=(budget,), extra=extra)
    fixed = model.n_layers * common.fixed_layer_time(device) + (device.kernel_launch_s if head > 0 else 0.0)
    return result.carve(min(fixed, compute))


@register("single_device_streamed", PAPER, no_operators=common.STI_ROWS,
          origin="STI (Guo et al.): the standard layerwise pipeline (StdPL-X)",
          no_moe="STI's shards and importance profile are a dense BERT's FFN columns",
          partition="one", streaming=False, single_token="STI's profile times a decode step of one token (schemes/sti.py:227)")
def evaluate_single_device_streamed(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Standard layerwise pipeline (StdPL-X): every shard at the workload's weight bits, no preload."""
    device, note = _arena_device(cluster)
    seq, kv = _arena_seq(workload)
    m = n_shards(model)
    comp = layer_exec_time(model, device, m, seq, kv)
    if workload.weight_bits < FULL_BITS:
        comp += decompress_time(model, device, m)
    layer_io = m * _shard_bytes_at(model, workload.weight_bits) / read_bandwidth(device)
    computes, ios = np.full(model.n_layers, comp), np.full(model.n_layers, layer_io)
    makespan, stall = pipeline_makespan(ios, computes)
    memory = working_buffer_bytes(model, workload) + m * _shard_bytes_at(model, workload.weight_bits)
    return _result("single_device_streamed", model, device, workload, makespan, float(computes.sum()), stall, memory,
                   note, io_s=float(ios.sum()))


class PipelinePlan(Protocol):
    """What costing a planned pipeline needs of a plan (`workbench.schemes.planners.sti.ShardPlan` has it)."""

    preload_bytes: float
    valid: bool
    latency_s: float
    compute_s: float
    stall_s: float
    notes: tuple[str, ...]

    @property
    def mean_bits(self) -> float:
        """Mean bitwidth over the plan's shards."""
        ...


def arena_profile(model: TransformerConfig, cluster: Cluster, workload: Workload) -> LatencyProfile:
    """STI's profile on the arena's device (device 0) for the workload's phase (a step attends to the cache)."""
    device, _ = _arena_device(cluster)
    seq, kv = _arena_seq(workload)
    return latency_profile(model, device, seq_len=seq, kv_len=kv)


def first_layer_preload_bytes(profile: LatencyProfile) -> float:
    """The default preload buffer: the first layer's shards at the lowest bitwidth (Sec. 7.2 sizes it to
    "hold shards of the first model layer", which warms up the pipeline without a stall)."""
    return profile.n_shards * profile.bytes_of(profile.bitwidths[0])


def evaluate_planned_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload,
                              plan: PipelinePlan) -> SchemeResult:
    """STI's pipeline costed for a plan chosen above (the arena's `sti_pipeline` plans in workbench.schemes.planners.sti).

    Memory: the preload buffer, the working buffer and one layer's shards at full precision.
    """
    device, note = _arena_device(cluster)
    full_layer = n_shards(model) * shard_record_bytes(shard_weights(model), FULL_BITS, 0)
    memory = plan.preload_bytes + working_buffer_bytes(model, workload) + full_layer
    notes = "; ".join(x for x in (note, *plan.notes) if x)
    return _result("sti_pipeline", model, device, workload, plan.latency_s, plan.compute_s, plan.stall_s, memory,
                   notes, mean_bits=plan.mean_bits, preload_bytes=plan.preload_bytes, valid=plan.valid)
