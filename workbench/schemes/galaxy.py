"""Galaxy (Ye et al.) and its baselines on the shared cost model: Local, Megatron TP, SP, HMP (+ tile overlap).

One layer, per device d holding `a_d` heads, `b_d` FFN columns and `s_d` tokens (Galaxy Sec. III-B):

* ``megatron_tp`` (M-LM): MHA and MLP split by heads/columns, the connective ops (residual, LayerNorm)
  replicated on the full sequence; a ring all-reduce of the (S, E) activations after MHA and after MLP.
* ``sp``: every device holds all weights and runs the whole layer on its `s_d` tokens; attention needs
  every key and value, so two ring all-gathers (K and V) per layer.
* ``galaxy_hmp``: TP on MHA and MLP, SP on the connective blocks; each TP block ends with a
  reduce-scatter (to the sequence shards) and each connective block with an all-gather: per layer
  2 RS + 2 AG, the same bytes as M-LM's two all-reduces, but no replicated connective work.
* ``galaxy_hmp_overlap``: as HMP, with the all-gather fused into the first GEMM of the next TP block
  and the reduce-scatter fused into its last GEMM, tile by tile around the ring (Sec. III-D); costed
  as a timeline of tiles on each device's compute and egress link (`workbench.simulate`'s recurrence,
  run one ring step of all devices at a time as numpy vectors: `overlap_makespans`).

Compute time follows the shared conventions of `workbench.schemes.common` (operand dtype, GEMM/GEMV
efficiency, a roofline per kernel, memory-bound connective blocks, the device's per-layer overhead).
Collectives are ring collectives on the cluster's topology (`workbench.network.collective_latency`);
HMP's reduce-scatters and all-gathers run at the largest sequence shard (one ring step carries one
shard), and one tile transfer of the overlap is one point-to-point message.
Memory per device = its share of the weights (+ an equal share of the embeddings for TP-style
schemes, the Megatron vocab-parallel layout) + its activation working set; SP and Local hold all
weights. Latency covers the Transformer layers (the backbone) and, in a generation step of a decoder
(`Workload.output_head`, the arena's default), the next token's logits (`head_cost`): Local on its
device, SP on the device holding the last token, the TP schemes split by vocabulary rows like the
embeddings they hold. Galaxy itself times classifiers (QNLI), so its experiments set
`output_head=False` (`workbench.papers.galaxy.workload`).

Fixed costs (issue 17): every kernel a device launches pays the device's `kernel_launch_s`
(`common.roofline_time`), so each tile of the overlap is a launch on every device (n tiles of each fused
GEMM instead of one) and splitting a GEMM over devices does not split its launch; each layer pays the
device's `layer_overhead_s`; each message (a ring step, a collective's send and receive) pays the link's
`message_overhead_s` at both endpoints. `SchemeResult.fixed_s` shows the launches and layer overheads of
the device with the most of them (carved out of compute); `serial_s` the work on one device only (SP's
output head). What-if (default 0, not part of the model): each device's `DeviceSpec.stack_s_per_byte`, the CPU seconds
its network stack spends per byte it sends or receives - on a CPU-only device they are taken from the
GEMM tile that runs meanwhile, and a blocking collective cannot move bytes faster than its slowest
endpoint's stack handles them (`workbench.network.collective_latency`'s per-byte term;
`workbench.papers.galaxy.stack_sensitivity`).

The Galaxy evaluators here take their partition (the plan); Algorithm 1 and the planning evaluators the
arena registers (`galaxy_hmp`, `galaxy_hmp_overlap`) live a layer up in `workbench.planners.galaxy`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.apportion import even_split
from workbench.errors import WorkbenchError
from workbench.hardware import DeviceSpec
from workbench.models import TransformerConfig
from workbench.network import collective_latency, point_to_point
from workbench.schemes import common
from workbench.schemes.base import (
    Cluster,
    SchemeResult,
    Workload,
    one_device_takes,
    register,
    with_streaming_split,
)
from workbench.schemes.common import (  # noqa: F401  (re-exported: the planner and tests use these names)
    CONNECTIVE_PASSES,
    ffn_down_flops,
    ffn_up_flops,
    layer_overhead,
    out_proj_flops,
    qkv_flops,
    score_flops,
)
from workbench.simulate import Task, Timeline, schedule

PAPER = "galaxy"
# Galaxy's schemes split over devices (each has a shard_map kernel, `workbench.kernels.galaxy`); the catalogue
# lists all of Galaxy's (`load_all().filter(family="galaxy")`, `local` first)
LOCAL, MEGATRON_TP, SP = "local", "megatron_tp", "sp"  # the schemes this module registers
HMP, HMP_OVERLAP = "galaxy_hmp", "galaxy_hmp_overlap"  # registered by workbench.planners.galaxy (they plan)
PARALLEL_SCHEMES = (MEGATRON_TP, SP, HMP, HMP_OVERLAP)
# Timeline length for the overlap: two layers, extrapolated (layer 2 starts unsynchronised).
SIMULATED_LAYERS = 2


# ---- partitions ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Partition:
    """Per-device shares: attention heads (MHA), FFN columns (MLP) and tokens (connective block)."""

    heads: tuple[int, ...]
    mlp_cols: tuple[int, ...]
    seq: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("heads", "mlp_cols", "seq"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            if not values:
                raise WorkbenchError(f"partition {name} needs at least one device")
            if any(not isinstance(v, int | np.integer) or v < 0 for v in values):
                raise WorkbenchError(f"partition {name} must be integers >= 0, got {values}")
            object.__setattr__(self, name, tuple(int(v) for v in values))
        if not len(self.heads) == len(self.mlp_cols) == len(self.seq):
            raise WorkbenchError(f"partition lengths differ: heads {len(self.heads)}, mlp_cols "
                                 f"{len(self.mlp_cols)}, seq {len(self.seq)}")

    @property
    def n(self) -> int:
        """Number of devices."""
        return len(self.heads)

    def check(self, model: TransformerConfig, seq_len: int) -> Partition:
        """Raise unless the shares add up to the model's heads, FFN width and `seq_len`."""
        for name, total in (("heads", model.n_heads), ("mlp_cols", model.d_ff), ("seq", seq_len)):
            got = sum(getattr(self, name))
            if got != total:
                raise WorkbenchError(f"partition {name} must sum to {total}, got {got} ({getattr(self, name)})")
        group = model.n_heads // model.n_kv_heads
        if any(a % group for a in self.heads):
            raise WorkbenchError(f"partition heads must be multiples of the GQA group size {group}, got {self.heads}")
        return self


def uniform_partition(model: TransformerConfig, n: int, seq_len: int) -> Partition:
    """The homogeneous split M-LM and SP use: equal heads (in GQA groups), columns and tokens."""
    group = model.n_heads // model.n_kv_heads
    heads = tuple(g * group for g in even_split(model.n_kv_heads, n))
    return Partition(heads, even_split(model.d_ff, n), even_split(seq_len, n))


# ---- per-device latencies: the profiler's L(T, x, d) -------------------------------------------
# FLOPs, dtype, GEMM/GEMV efficiency, the per-kernel roofline and the connective block are the shared
# conventions of `workbench.schemes.common` (their names are re-exported here for the planner and tests).
def _act_bytes(workload: Workload) -> float:
    return workload.activation_bits / 8


def gemm_time(device: DeviceSpec, workload: Workload, flops, weight_bytes=0.0) -> np.ndarray:
    """Seconds for `flops` of matmul work reading `weight_bytes` of weights: the slower of compute and
    streaming the weights from the outermost memory (`common.roofline_time`; a GEMV when decoding)."""
    return common.roofline_time(device, flops, weight_bytes, common.workload_dtype(device, workload),
                                common.kernel_kind(workload.new_tokens))


def layer_weight_bytes_per_head(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one query head's attention weights in one layer."""
    return common.weight_bytes(model.attention_params() / model.n_heads, workload.weight_bits)


def layer_weight_bytes_per_column(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one FFN column's weights in one layer."""
    return common.weight_bytes(model.ffn_params() / model.d_ff, workload.weight_bits)


def mha_latency(model: TransformerConfig, device: DeviceSpec, workload: Workload, heads) -> np.ndarray:
    """L(MHA, a, d): seconds for the MHA block with `heads` heads on all new tokens."""
    s, t = workload.new_tokens, workload.attended
    flops = qkv_flops(model, heads, s) + score_flops(model, heads, s, t) + out_proj_flops(model, heads, s)
    return gemm_time(device, workload, flops, np.asarray(heads, float) * layer_weight_bytes_per_head(model, workload))


def mlp_latency(model: TransformerConfig, device: DeviceSpec, workload: Workload, cols) -> np.ndarray:
    """L(MLP, b, d): seconds for the MLP block with `cols` FFN columns on all new tokens."""
    s = workload.new_tokens
    return gemm_time(device, workload, ffn_up_flops(model, cols, s) + ffn_down_flops(model, cols, s),
                     np.asarray(cols, float) * layer_weight_bytes_per_column(model, workload))


def connective_latency(model: TransformerConfig, device: DeviceSpec, workload: Workload, tokens) -> np.ndarray:
    """L(CON, s, d): seconds for one connective block (residual + LayerNorm) on `tokens`, memory-bound."""
    return common.connective_time(model, device, workload, tokens)


def capacity(model: TransformerConfig, device: DeviceSpec, workload: Workload) -> float:
    """Galaxy Eq. 6: V_d = 1 / (L(MHA, all heads, d) + L(MLP, all columns, d))."""
    return 1.0 / float(mha_latency(model, device, workload, model.n_heads)
                       + mlp_latency(model, device, workload, model.d_ff))


# ---- memory -------------------------------------------------------------------------------------
def model_weight_bytes_per_head(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one query head's share of all layers' attention weights (Eq. 5's l * M_att / sum A)."""
    return model.n_layers * model.attention_params() / model.n_heads * workload.weight_bits / 8


def model_weight_bytes_per_column(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one FFN column's share of all layers' MLP weights (Eq. 5's l * M_mlp / sum B)."""
    return model.n_layers * model.ffn_params() / model.d_ff * workload.weight_bits / 8


def shared_weight_bytes(model: TransformerConfig, workload: Workload, n: int) -> float:
    """Weights outside the MHA/MLP blocks each TP device holds: all norms + 1/n of the embeddings."""
    params = model.n_layers * model.norm_params() + (model.embedding_params() + model.head_params()) / n
    return params * workload.weight_bits / 8


def tp_activation_bytes(model: TransformerConfig, workload: Workload, heads, cols, seq) -> np.ndarray:
    """Working set of a TP/HMP device: gathered input, own shard, its heads' Q/K/V and scores, its FFN slice."""
    s, t = workload.new_tokens, workload.attended
    heads, cols, seq = (np.asarray(v, dtype=float) for v in (heads, cols, seq))
    kv_per_q = model.n_kv_heads / model.n_heads
    elements = (s * model.d_model + seq * model.d_model + s * heads * model.d_head * (1 + 2 * kv_per_q)
                + heads * s * t + s * cols)
    cache = 0.0 if workload.phase == "prefill" else 2 * t * heads * kv_per_q * model.d_head * model.n_layers
    return (elements + cache) * _act_bytes(workload)


def sp_activation_bytes(model: TransformerConfig, workload: Workload, seq) -> np.ndarray:
    """Working set of an SP device: its tokens' activations, Q for them, all K/V, scores, FFN hidden."""
    t = workload.attended
    seq = np.asarray(seq, dtype=float)
    elements = (2 * seq * model.d_model + seq * model.q_dim + 2 * t * model.kv_dim + model.n_heads * seq * t
                + seq * model.d_ff * (2 if model.gated_ffn else 1))
    n = max(seq.size, 1)
    cache = 0.0 if workload.phase == "prefill" else model.kv_cache_bytes(t, workload.activation_bits) / n
    return elements * _act_bytes(workload) + cache


def tp_memory_bytes(model: TransformerConfig, workload: Workload, partition: Partition) -> np.ndarray:
    """Per-device bytes under a TP-style split (M-LM, HMP): weight shares + shared weights + activations."""
    heads, cols = np.asarray(partition.heads, float), np.asarray(partition.mlp_cols, float)
    weights = heads * model_weight_bytes_per_head(model, workload) + cols * model_weight_bytes_per_column(model, workload)
    return weights + shared_weight_bytes(model, workload, partition.n) + \
        tp_activation_bytes(model, workload, heads, cols, partition.seq)


def full_memory_bytes(model: TransformerConfig, workload: Workload, seq) -> np.ndarray:
    """Per-device bytes when every device holds all weights (SP, Local)."""
    return model.weight_bytes(workload.weight_bits) + sp_activation_bytes(model, workload, seq)


def budgets(cluster: Cluster) -> np.ndarray:
    """Each device's memory budget: the capacity of its outermost memory level."""
    return np.array([d.memory_bytes for d in cluster.devices], dtype=float)


def first_overflow(need: np.ndarray, cluster: Cluster) -> str:
    """'' if every device fits, else an 'infeasible: ...' message naming the worst device and bytes."""
    over = need - budgets(cluster)
    if not np.any(over > 0):
        return ""
    d = int(np.argmax(over))
    return (f"infeasible: device {d} ({cluster.devices[d].name}) needs {need[d]:.4g} B but its budget is "
            f"{budgets(cluster)[d]:.4g} B ({over[d]:.4g} B do not fit)")


# ---- collectives --------------------------------------------------------------------------------
def layer_collectives(scheme: str, model: TransformerConfig, workload: Workload) -> list[tuple[str, float]]:
    """(collective, message bytes) per layer; the message is the full (gathered / reduced) buffer."""
    b = _act_bytes(workload)
    s = workload.new_tokens
    act = s * model.d_model * b
    if scheme == "megatron_tp":
        return [("all_reduce", act), ("all_reduce", act)]
    if scheme == "sp":
        kv = s * model.kv_dim * b
        return [("all_gather", kv), ("all_gather", kv)]
    if scheme in ("galaxy_hmp", "galaxy_hmp_overlap"):
        return [("reduce_scatter", act), ("all_gather", act), ("reduce_scatter", act), ("all_gather", act)]
    if scheme == "local":
        return []
    raise WorkbenchError(f"unknown scheme {scheme!r}; allowed: {', '.join(EVALUATORS)}")


def _stack(cluster: Cluster) -> np.ndarray:
    """Per-device network-stack CPU seconds per byte (`DeviceSpec.stack_s_per_byte`; the what-if, 0 = free)."""
    return np.array([d.stack_s_per_byte for d in cluster.devices], dtype=float)


def _collective(cluster: Cluster, kind: str, message_bytes: float) -> tuple[float, float]:
    """(per-message seconds, bytes seconds) of one ring collective over the cluster: the wire hops plus the
    link's `message_overhead_s` at both endpoints of every ring step, and the busiest link's bytes at the
    bandwidth - or at the slowest endpoint's network stack, if that handles bytes slower (the what-if)."""
    topo = cluster.topology
    link, data = collective_latency("ring", kind, cluster.n, message_bytes, topo.link.bandwidth_bytes_per_s,
                                    topo.link.latency_s, topo.path_hops, breakdown=True,
                                    message_overhead=topo.link.message_overhead_s,
                                    stack_s_per_byte=float(np.max(_stack(cluster))))
    return float(link), float(data)


def _comm(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
          partition: Partition | None = None) -> tuple[float, float]:
    """Per-layer (per-message, bytes) seconds of a scheme's non-overlapped collectives.

    With a `partition` (HMP, SP), each reduce-scatter / all-gather step carries a whole sequence shard,
    so the ring runs at its largest shard: the buffer is padded to n x max(seq) rows (as the kernels pad
    it, and as the tile-overlap timeline sends it) of d_model (HMP) or the K/V width (SP). A split into
    equal shards pads nothing.
    """
    width = model.kv_dim if scheme == "sp" else model.d_model
    parts = []
    for kind, message in layer_collectives(scheme, model, workload):
        if partition is not None and kind in ("reduce_scatter", "all_gather"):
            message = cluster.n * max(partition.seq) * width * _act_bytes(workload)
        parts.append(_collective(cluster, kind, message))
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def tp_gemm_times(model: TransformerConfig, device: DeviceSpec, workload: Workload, heads: int, cols: int,
               tokens) -> dict[str, np.ndarray]:
    """Seconds of the four TP GEMMs (qkv, out, ffn1, ffn2) for `tokens` rows with `heads` heads and
    `cols` FFN columns; each reads its full weight slice (so row tiles re-read the weights)."""
    return common.kernel_times(model, device, workload, heads, cols, tokens)


def hmp_block_times(model: TransformerConfig, cluster: Cluster, workload: Workload,
                    part: Partition) -> dict[str, np.ndarray]:
    """Per-device seconds of each HMP step (whole GEMMs): qkv, attn, out, ffn1, ffn2, con, overhead."""
    s = workload.new_tokens
    heads, cols, seq = (np.asarray(v, dtype=np.int64) for v in (part.heads, part.mlp_cols, part.seq))
    out = {k: np.zeros(cluster.n) for k in ("qkv", "attn", "out", "ffn1", "ffn2", "con", "overhead")}
    for d, idx in common.distinct_devices(cluster.devices):  # one device class at a time, vectorised over it
        for k, v in tp_gemm_times(model, d, workload, heads[idx], cols[idx], s).items():
            out[k][idx] = v
        out["attn"][idx] = common.attention_time(model, d, workload, heads[idx])
        out["con"][idx] = connective_latency(model, d, workload, seq[idx])
        out["overhead"][idx] = layer_overhead(d)
    return out


def layer_launches(scheme: str, model: TransformerConfig, workload: Workload, part: Partition) -> np.ndarray:
    """Kernels each device launches per layer: the four weight GEMMs where it holds heads / columns (under
    the tile overlap, one per non-empty tile: n tiles each), attention, and the two connective blocks
    (on its tokens; M-LM replicates them on the whole sequence). Splitting a GEMM does not split these."""
    heads, cols = np.asarray(part.heads) > 0, np.asarray(part.mlp_cols) > 0
    tiles = float(sum(1 for t in part.seq if t > 0)) if scheme == "galaxy_hmp_overlap" else 1.0
    if scheme == "sp":
        return np.where(np.asarray(part.seq) > 0, 7.0, 0.0)
    con = 2.0 * (np.ones(part.n) if scheme == "megatron_tp" else (np.asarray(part.seq) > 0))
    return heads * (2 * tiles + 1) + cols * 2 * tiles + con


def fixed_layer_seconds(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
                        part: Partition) -> np.ndarray:
    """Per device, the size-independent seconds of one layer: its launches x `kernel_launch_s` + its
    `layer_overhead_s`."""
    launches = np.asarray(layer_launches(scheme, model, workload, part), dtype=float)
    out = np.zeros(cluster.n)
    for d, idx in common.distinct_devices(cluster.devices):
        out[idx] = d.launch_time(launches[idx]) + layer_overhead(d)
    return out


def sp_layer_compute(model: TransformerConfig, device: DeviceSpec, workload: Workload, tokens: int) -> tuple[float, float]:
    """(before the K/V all-gather, after it) seconds of one SP layer on `tokens` of the sequence."""
    before, after = _sp_layer_arrays(model, device, workload, tokens)
    return float(before), float(after)


def _sp_layer_arrays(model: TransformerConfig, device: DeviceSpec, workload: Workload, tokens):
    """`sp_layer_compute` vectorised over `tokens` (one device class)."""
    g = tp_gemm_times(model, device, workload, model.n_heads, model.d_ff, tokens)
    before = g["qkv"]
    after = g["out"] + g["ffn1"] + g["ffn2"] + common.attention_time(model, device, workload, model.n_heads, tokens) \
        + 2 * connective_latency(model, device, workload, tokens) + layer_overhead(device)
    return before, after


# ---- evaluators ---------------------------------------------------------------------------------
def _check(model: TransformerConfig, cluster: Cluster, workload: Workload, partition: Partition | None,
           default: Partition) -> Partition:
    if not isinstance(model, TransformerConfig):
        raise WorkbenchError(f"model must be a TransformerConfig, got {type(model).__name__}")
    partition = default if partition is None else partition
    if not isinstance(partition, Partition):
        raise WorkbenchError(f"partition must be a Partition, got {type(partition).__name__}")
    if partition.n != cluster.n:
        raise WorkbenchError(f"partition is for {partition.n} devices but the cluster has {cluster.n}")
    return partition.check(model, workload.new_tokens)


def _result(scheme, workload, compute, link, data, memory, cluster, notes="", fixed=0.0, serial=0.0,
            operators: common.Breakdown | None = None, **extra) -> SchemeResult:
    """A SchemeResult with the fixed and serial seconds (counted in `compute`) carved out as components and the
    busiest device's operator rows (`operators`) when the scheme's layer is its devices' fused tables."""
    need = np.asarray(memory, dtype=float)
    message = first_overflow(need, cluster)
    result = SchemeResult(scheme=scheme, paper=PAPER, phase=workload.phase, latency_s=compute + link + data,
                          compute_s=compute, comm_link_latency_s=link, comm_bytes_s=data,
                          peak_memory_bytes=tuple(float(m) for m in need),
                          memory_budget_bytes=tuple(float(b) for b in budgets(cluster)), oom=bool(message),
                          notes="; ".join(x for x in (notes, message) if x), extra=extra,
                          operators=operators)
    serial = min(float(serial), compute)
    return result.carve(min(float(fixed), compute - serial), serial)


@register("local", PAPER, origin="Galaxy (Ye et al.) Sec. III-B: the Local baseline, one device",
          partition="one")
def evaluate_local(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Local inference on the cluster's first device (Galaxy's single-device baseline): every layer of
    `common.step_time` (the LM head when the workload includes it). Fixed: 7 launches + the layer overhead
    per layer (and the head's launch)."""
    one = Cluster(cluster.devices[:1], type(cluster.topology)(cluster.topology.kind, 1, cluster.topology.link))
    device = one.devices[0]
    compute = common.step_time(model, device, workload)
    fixed = common.step_fixed_time(model, device, workload)
    memory = [float(full_memory_bytes(model, workload, workload.new_tokens))]
    return _result("local", workload, compute, 0.0, 0.0, memory, one, fixed=fixed)


ONE_DEVICE_NOTE = "one device: nothing to split, local's time"


# Decorator for a partition scheme's evaluator: on one device the scheme splits nothing, so it runs what `local`
# runs and its time (latency and every component) is `local`'s; its memory, OOM and notes stay its own. Without it
# a one-device sweep named a TP scheme the winner on its own step model's differences (Hepti's merged kernels, the
# MCU's tile pipeline, TPI-LLM's and distributed-llama's per-block sums).
one_device_is_local = one_device_takes(lambda: evaluate_local, ONE_DEVICE_NOTE)


def _head_fixed(model: TransformerConfig, cluster: Cluster, workload: Workload) -> float:
    """The output head's launch (one kernel on each device that computes a share of it)."""
    if not (workload.output_head and model.is_decoder):
        return 0.0
    return max(float(d.launch_time(1)) for d, _ in common.distinct_devices(cluster.devices))


@register("megatron_tp", PAPER, origin="Megatron-LM TP as Galaxy (Ye et al.) Sec. III-B costs it",
          partition="tp")
def evaluate_megatron_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Megatron-LM TP on equal shards (the arena's signature; `megatron_tp_on` takes a partition)."""
    return megatron_tp_on(model, cluster, workload)


def megatron_tp_on(model: TransformerConfig, cluster: Cluster, workload: Workload,
                   partition: Partition | None = None) -> SchemeResult:
    """Megatron-LM TP: equal heads/columns, replicated connective ops, two ring all-reduces per layer."""
    s = workload.new_tokens
    part = _check(model, cluster, workload, partition, uniform_partition(model, cluster.n, s))
    full = Partition(part.heads, part.mlp_cols, (s,) * cluster.n)  # connective work is replicated
    t = hmp_block_times(model, cluster, workload, full)
    per_layer = (np.max(t["qkv"] + t["attn"] + t["out"]) + np.max(t["ffn1"] + t["ffn2"]) + 2 * np.max(t["con"])
                 + np.max(t["overhead"]))
    link, data = _comm("megatron_tp", model, cluster, workload)
    L = model.n_layers
    head, head_link, head_data = head_cost("megatron_tp", model, cluster, workload)
    fixed = L * float(np.max(fixed_layer_seconds("megatron_tp", model, cluster, workload, part))) \
        + _head_fixed(model, cluster, workload)
    return _result("megatron_tp", workload, L * float(per_layer) + head, L * link + head_link, L * data + head_data,
                   tp_memory_bytes(model, workload, full), cluster, fixed=fixed, partition=part,
                   operators=common.busiest_breakdown(model, cluster.devices, workload, full.heads, full.mlp_cols,
                                                      full.seq, L))


@register("sp", PAPER, origin="sequence parallelism as Galaxy (Ye et al.) Sec. III-B costs it",
          partition="sequence")
def evaluate_sp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Sequence parallelism on equal token shards (the arena's signature; `sp_on` takes a partition)."""
    return sp_on(model, cluster, workload)


def sp_on(model: TransformerConfig, cluster: Cluster, workload: Workload,
          partition: Partition | None = None) -> SchemeResult:
    """Sequence parallelism: equal token shards, full weights everywhere, K and V all-gathered per layer;
    the next token's logits on the device holding the last token (serial)."""
    part = _check(model, cluster, workload, partition, uniform_partition(model, cluster.n, workload.new_tokens))
    seq = np.asarray(part.seq, dtype=np.int64)
    before, after = np.zeros(cluster.n), np.zeros(cluster.n)
    for d, idx in common.distinct_devices(cluster.devices):  # per device class, vectorised over its shards
        before[idx], after[idx] = _sp_layer_arrays(model, d, workload, seq[idx])
    compute = float(np.max(before)) + float(np.max(after))
    link, data = _comm("sp", model, cluster, workload, part)
    L = model.n_layers
    head = head_cost("sp", model, cluster, workload)[0]
    memory = full_memory_bytes(model, workload, np.asarray(part.seq))
    notes = "decode: the new token's shard does all the work" if workload.phase == "decode" else ""
    fixed = L * float(np.max(fixed_layer_seconds("sp", model, cluster, workload, part)))
    n = cluster.n
    return _result("sp", workload, L * compute + head, L * link, L * data, memory, cluster, notes, fixed=fixed,
                   serial=head, partition=part,
                   operators=common.busiest_breakdown(model, cluster.devices, workload, (model.n_heads,) * n,
                                                      (model.d_ff,) * n, part.seq, L))


def head_cost(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload) -> tuple[float, float, float]:
    """(compute, per-message, bytes) seconds of a decoder's next-token logits for the parallel schemes
    (0s for an encoder or a backbone-only workload; Local gets its head from `common.step_time`). SP: on
    the device holding the last token; M-LM and HMP: each device computes 1/n of the vocabulary (it holds
    1/n of the embeddings, `tp_memory_bytes`) and the n partial (max logit, index) pairs are all-gathered;
    HMP first all-gathers the last token's hidden state, which only its sequence shard holds."""
    if not (workload.output_head and model.is_decoder):
        return 0.0, 0.0, 0.0
    if scheme == "sp":
        return common.lm_head_time(model, cluster.serial_device(cluster.devices[-1]), workload), 0.0, 0.0
    compute = common.output_head_time(model, cluster.devices, workload)
    if cluster.n == 1:
        return compute, 0.0, 0.0
    messages = [cluster.n * 8.0]  # (fp32 max logit, int32 index) per device
    if scheme != "megatron_tp":
        messages.append(cluster.n * model.d_model * _act_bytes(workload))  # the last token's row, padded per shard
    parts = [_collective(cluster, "all_gather", m) for m in messages]
    return compute, sum(p[0] for p in parts), sum(p[1] for p in parts)


def _require_plan(scheme: str, partition) -> None:
    if partition is None:
        raise WorkbenchError(f"{scheme} needs its partition (the plan); workbench.planners.galaxy.evaluate plans "
                             f"it with Algorithm 1")


def evaluate_galaxy_hmp(model: TransformerConfig, cluster: Cluster, workload: Workload, partition: Partition,
                        notes: str = "") -> SchemeResult:
    """Galaxy's hybrid model parallelism on a given partition, without overlap: per layer 2 ring RS + 2 ring
    AG as barriers."""
    _require_plan("galaxy_hmp", partition)
    part = _check(model, cluster, workload, partition, partition)
    t = hmp_block_times(model, cluster, workload, part)
    per_layer = (np.max(t["qkv"] + t["attn"] + t["out"]) + np.max(t["ffn1"] + t["ffn2"]) + 2 * np.max(t["con"])
                 + np.max(t["overhead"]))
    link, data = _comm("galaxy_hmp", model, cluster, workload, part)
    L = model.n_layers
    head, head_link, head_data = head_cost("galaxy_hmp", model, cluster, workload)
    memory = tp_memory_bytes(model, workload, part)
    fixed = L * float(np.max(fixed_layer_seconds("galaxy_hmp", model, cluster, workload, part))) \
        + _head_fixed(model, cluster, workload)
    rows = common.busiest_breakdown(model, cluster.devices, workload, part.heads, part.mlp_cols,
                                    (workload.new_tokens,) * cluster.n, L, connective_tokens=part.seq)
    return _result("galaxy_hmp", workload, L * float(per_layer) + head, L * link + head_link, L * data + head_data,
                   memory, cluster, notes, fixed=fixed, partition=part, operators=rows)


# ---- the tile-based overlap as a timeline ---------------------------------------------------------
def _ring_step_s(cluster: Cluster, n_bytes: float) -> float:
    """Seconds of one ring step: `n_bytes` from a device to its successor, one message (the link's
    per-message software time at the sending and at the receiving endpoint, the wire hops, the bytes)."""
    topo = cluster.topology
    return float(point_to_point(n_bytes, topo.link.bandwidth_bytes_per_s, topo.link.latency_s, topo.path_hops,
                                topo.link.message_overhead_s))


def _ag_gemm_tasks(tag: str, gemm_s: np.ndarray, chunk_bytes: Sequence[float], cluster: Cluster,
                   ready: Sequence[str], stack: np.ndarray) -> list[Task]:
    """Ring all-gather fused with a GEMM (Sec. III-D1, Fig. 6): at step k device i multiplies the chunk
    of device i-k while forwarding it to device i+1 (no send at the last step). `gemm_s[i, j]` = seconds
    on device i for chunk j; `ready[i]` = the task after which device i's own chunk exists; `stack[i]` =
    device i's network-stack seconds per byte, taken from the tile it computes while sending and receiving."""
    n, tasks = cluster.n, []
    for k in range(n):
        for i in range(n):
            j = (i - k) % n
            deps = ((ready[i],) if ready[i] else ()) if k == 0 else (f"{tag}.s{(i - 1) % n}.{k - 1}",)
            stolen = 0.0
            if k < n - 1:
                tasks.append(Task(f"{tag}.s{i}.{k}", f"link{i}", _ring_step_s(cluster, chunk_bytes[j]), deps,
                                  kind="communication", device=str(i)))
                stolen = stack[i] * max(chunk_bytes[j], chunk_bytes[(j - 1) % n])
            tasks.append(Task(f"{tag}.c{i}.{k}", f"cpu{i}", float(gemm_s[i, j]) + stolen, deps, device=str(i)))
    return tasks


def _gemm_rs_tasks(tag: str, gemm_s: np.ndarray, chunk_bytes: Sequence[float],
                   cluster: Cluster, stack: np.ndarray) -> tuple[list[Task], list[tuple[str, ...]]]:
    """A GEMM fused with a ring reduce-scatter (Sec. III-D2, Fig. 7): at step k device i computes its
    partial of chunk r = i-1-k, adds the partial received from device i-1 and forwards the sum; at
    k = n-1 the chunk is its own, fully reduced. The send of step k-1 overlaps the tile of step k (which
    pays the stack's seconds of that send and receive). Returns the tasks and what each device's result
    waits on."""
    n, tasks = cluster.n, []
    for k in range(n):
        for i in range(n):
            r = (i - 1 - k) % n
            prev = (r + 1) % n  # the chunk sent (and received) in the step before
            stolen = stack[i] * max(chunk_bytes[prev], chunk_bytes[r]) if k > 0 else 0.0
            tasks.append(Task(f"{tag}.c{i}.{k}", f"cpu{i}", float(gemm_s[i, r]) + stolen, device=str(i)))
            if k < n - 1:
                recv = () if k == 0 else (f"{tag}.s{(i - 1) % n}.{k - 1}",)
                tasks.append(Task(f"{tag}.s{i}.{k}", f"link{i}", _ring_step_s(cluster, chunk_bytes[r]),
                                  (f"{tag}.c{i}.{k}",) + recv, kind="communication", device=str(i)))
    done = [(f"{tag}.c{i}.{n - 1}",) + ((f"{tag}.s{(i - 1) % n}.{n - 2}",) if n > 1 else ()) for i in range(n)]
    return tasks, done


def tile_times(model: TransformerConfig, cluster: Cluster, workload: Workload, part: Partition) -> dict[str, np.ndarray]:
    """Seconds of each fused GEMM's tiles: `[gemm][i, j]` = device i on the rows of device j's chunk. Each
    non-empty tile is its own kernel, so it pays the device's launch (`common.roofline_time`)."""
    mats, rows, cols = tile_classes(model, cluster, workload, part)
    return {k: m[rows][:, cols] for k, m in mats.items()}


def tile_classes(model: TransformerConfig, cluster: Cluster, workload: Workload,
                 part: Partition) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """`tile_times` without the n x n repetition: `(mats, rows, cols)` with `tile_times(...)[gemm][i, j] ==
    mats[gemm][rows[i], cols[j]]`; a row per distinct (device, heads, columns), a column per distinct
    sequence share (a tile's seconds depend on nothing else), each computed once."""
    heads, mlp = np.asarray(part.heads, dtype=np.int64), np.asarray(part.mlp_cols, dtype=np.int64)
    seq_values, cols = np.unique(np.asarray(part.seq, dtype=float), return_inverse=True)
    rows = np.zeros(cluster.n, dtype=int)
    blocks: list[dict[str, np.ndarray]] = []
    offset = 0
    for d, idx in common.distinct_devices(cluster.devices):  # one device class at a time
        pairs, inverse = np.unique(np.stack([heads[idx], mlp[idx]], axis=1), axis=0, return_inverse=True)
        blocks.append(tp_gemm_times(model, d, workload, pairs[:, :1], pairs[:, 1:], seq_values))
        rows[idx] = offset + inverse.reshape(-1)
        offset += len(pairs)
    mats = {k: np.concatenate([np.broadcast_to(b[k], (len(b[k]), seq_values.size)) for b in blocks])
            for k in ("qkv", "out", "ffn1", "ffn2")}
    return mats, rows, np.asarray(cols, dtype=int).reshape(-1)


def overlap_timeline(model: TransformerConfig, cluster: Cluster, workload: Workload, part: Partition,
                     n_layers: int = SIMULATED_LAYERS) -> Timeline:
    """Tiles of `n_layers` HMP layers with every AG/RS ring step fused into a GEMM, on per-device
    compute (`cpu{i}`) and egress-link (`link{i}`) resources."""
    n = cluster.n
    t = hmp_block_times(model, cluster, workload, part)
    tiles = tile_times(model, cluster, workload, part)
    chunk_bytes = [float(s * model.d_model * _act_bytes(workload)) for s in part.seq]
    stack = _stack(cluster)
    tasks: list[Task] = []
    ready = [""] * n
    for layer in range(n_layers):
        p = f"L{layer}"
        tasks += [Task(f"{p}.overhead{i}", f"cpu{i}", float(t["overhead"][i]), device=str(i)) for i in range(n)]
        tasks += _ag_gemm_tasks(f"{p}.qkv", tiles["qkv"], chunk_bytes, cluster, ready, stack)
        tasks += [Task(f"{p}.attn{i}", f"cpu{i}", float(t["attn"][i]), device=str(i)) for i in range(n)]
        rs, done = _gemm_rs_tasks(f"{p}.out", tiles["out"], chunk_bytes, cluster, stack)
        tasks += rs + [Task(f"{p}.con1.{i}", f"cpu{i}", float(t["con"][i]), done[i], device=str(i)) for i in range(n)]
        tasks += _ag_gemm_tasks(f"{p}.ffn1", tiles["ffn1"], chunk_bytes, cluster, [f"{p}.con1.{i}" for i in range(n)],
                                stack)
        rs, done = _gemm_rs_tasks(f"{p}.ffn2", tiles["ffn2"], chunk_bytes, cluster, stack)
        tasks += rs + [Task(f"{p}.con2.{i}", f"cpu{i}", float(t["con"][i]), done[i], device=str(i)) for i in range(n)]
        ready = [f"{p}.con2.{i}" for i in range(n)]
    return schedule(tasks)


def _ring_steps(cluster: Cluster, chunk_bytes: np.ndarray) -> np.ndarray:
    """`_ring_step_s` of each chunk, computed once per distinct size (the scalar call, so bit-equal)."""
    seen: dict[float, float] = {}
    for b in chunk_bytes.tolist():
        if b not in seen:
            seen[b] = _ring_step_s(cluster, b)
    return np.array([seen[b] for b in chunk_bytes.tolist()], dtype=float)


@dataclass(frozen=True)
class _RingSteps:
    """One layer's AG/RS rings as [step, device] arrays: each fused GEMM's tile seconds and each step's send
    seconds (`prev` = the device each one receives from)."""

    gemm: dict[str, np.ndarray]
    send_ag: np.ndarray
    send_rs: np.ndarray
    prev: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.prev)
        if any(a.shape != (n, n) for a in (self.send_ag, self.send_rs, *self.gemm.values())):
            raise WorkbenchError(f"ring steps must be ({n}, {n}) arrays (steps x devices)")


def _ring_step_arrays(model: TransformerConfig, cluster: Cluster, workload: Workload, part: Partition,
                      ) -> tuple[_RingSteps, list[np.ndarray]]:
    """The rings' [step, device] arrays, and every duration they are gathered from (or, with the stack
    what-if, summed into), for the NaN / negative check."""
    n = cluster.n
    mats, rows, cols = tile_classes(model, cluster, workload, part)
    chunk_bytes = np.array([float(s * model.d_model * _act_bytes(workload)) for s in part.seq])
    stack = _stack(cluster)
    ring = _ring_steps(cluster, chunk_bytes)
    ar = np.arange(n)
    steps = ar[:, None]
    # AG at step k, device i: chunk j = i - k; sends while k < n - 1 (stolen: the stack's share of that send
    # and of the receive of chunk j - 1)
    j_ag = (ar[None, :] - steps) % n
    # RS at step k, device i: chunk r = i - 1 - k, the chunk of the step before r + 1 (no stolen at k = 0)
    r_rs = (ar[None, :] - 1 - steps) % n
    width = mats["qkv"].shape[1]
    flat_ag, flat_rs = rows[None, :] * width + cols[j_ag], rows[None, :] * width + cols[r_rs]
    dur = {k: np.ascontiguousarray(m).ravel().take(flat_ag if k in ("qkv", "ffn1") else flat_rs)
           for k, m in mats.items()}
    durations = list(mats.values()) + [ring]
    if np.any(stack != 0):  # (x + 0.0 is x: without the what-if there is nothing to add)
        stolen_ag = stack[None, :] * np.maximum(chunk_bytes[j_ag], chunk_bytes[(j_ag - 1) % n])
        stolen_ag[n - 1] = 0.0
        stolen_rs = stack[None, :] * np.maximum(chunk_bytes[(r_rs + 1) % n], chunk_bytes[r_rs])
        stolen_rs[0] = 0.0
        dur = {k: v + (stolen_ag if k in ("qkv", "ffn1") else stolen_rs) for k, v in dur.items()}
        durations += list(dur.values())
    return _RingSteps(dur, ring[j_ag], ring[r_rs], (ar - 1) % n), durations


def _allgather(gemm: np.ndarray, ring: _RingSteps, ready: np.ndarray, cpu: np.ndarray, link: np.ndarray):
    """One AG-overlapped GEMM, step by step: (cpu, link) free times after it."""
    n, sent = len(ring.prev), None
    for k in range(n):
        deps = ready if k == 0 else sent.take(ring.prev)
        if k < n - 1:
            sent = np.maximum(deps, link) + ring.send_ag[k]
            link = sent
        cpu = np.maximum(deps, cpu) + gemm[k]
    return cpu, link


def _reduce_scatter(gemm: np.ndarray, ring: _RingSteps, cpu: np.ndarray, link: np.ndarray):
    """One RS-overlapped GEMM, step by step: (when each device's reduced chunk is done, cpu, link)."""
    n, sent = len(ring.prev), None
    for k in range(n):
        cpu = cpu + gemm[k]
        if k < n - 1:
            deps = cpu if k == 0 else np.maximum(cpu, sent.take(ring.prev))
            sent = np.maximum(deps, link) + ring.send_rs[k]
            link = sent
    done = cpu if n == 1 else np.maximum(cpu, sent[ring.prev])
    return done, cpu, link


def _layer_makespans(t: dict, ring: _RingSteps, n_layers: int) -> list[float]:
    """The makespan after each of `n_layers` layers (the latest free time over all resources: each only grows)."""
    n = len(ring.prev)
    cpu, link, ready = np.zeros(n), np.zeros(n), np.zeros(n)
    out = []
    for _ in range(n_layers):
        cpu = cpu + t["overhead"]
        cpu, link = _allgather(ring.gemm["qkv"], ring, ready, cpu, link)
        cpu = cpu + t["attn"]
        done, cpu, link = _reduce_scatter(ring.gemm["out"], ring, cpu, link)
        cpu = np.maximum(done, cpu) + t["con"]
        cpu, link = _allgather(ring.gemm["ffn1"], ring, cpu, cpu, link)
        done, cpu, link = _reduce_scatter(ring.gemm["ffn2"], ring, cpu, link)
        cpu = np.maximum(done, cpu) + t["con"]
        ready = cpu
        out.append(float(max(np.max(cpu), np.max(link))))
    return out


def overlap_makespans(model: TransformerConfig, cluster: Cluster, workload: Workload, part: Partition,
                      n_layers: int = SIMULATED_LAYERS) -> list[float]:
    """`overlap_timeline(..., layers).makespan` for layers = 1 .. `n_layers`, without building the tasks.

    The same recurrence as `workbench.simulate.schedule` on the same list of tasks (start = max(its
    resource free, its dependencies' ends), end = start + duration), but one ring step of all n devices
    at a time as numpy vectors instead of n^2 tasks per fused GEMM: every step's tasks depend only on
    the step before, so this is the list order's schedule, with the same additions and maxima on the same
    floats (bit-equal; `tests/test_scale.py` holds it to the task timeline). The makespan after a layer is
    the latest free time over all resources (each resource's free time only grows)."""
    t = hmp_block_times(model, cluster, workload, part)
    ring, gathered = _ring_step_arrays(model, cluster, workload, part)
    # every duration is one of these values (gathered) or, with the what-if, a sum of them
    durations = [t[k] for k in ("overhead", "attn", "con")] + gathered
    if any(np.any(np.isnan(x)) or np.any(x < 0) for x in durations):
        # NaN (Python's max and np.maximum treat it differently) or negative (simulate.Task rejects it): the
        # task timeline itself (inf adds and compares alike in both, so it stays on the fast path)
        return [overlap_timeline(model, cluster, workload, part, k).makespan
                for k in range(1, n_layers + 1)]
    return _layer_makespans(t, ring, n_layers)


def evaluate_galaxy_hmp_overlap(model: TransformerConfig, cluster: Cluster, workload: Workload,
                                partition: Partition, notes: str = "") -> SchemeResult:
    """Galaxy with the tile-based AG/RS overlap on a given partition; per-layer time from a one- and a
    two-layer timeline.

    Fusing is a choice of the runtime: where the tiled schedule would be slower than the plain HMP
    schedule of the same partition (e.g. memory-bound GEMMs whose row tiles each re-read the weights, or
    n launches per GEMM instead of one), it runs unfused, so the overlap is never slower than `galaxy_hmp`
    on the same partition.
    """
    _require_plan("galaxy_hmp_overlap", partition)
    part = _check(model, cluster, workload, partition, partition)
    L = model.n_layers
    one, two = overlap_makespans(model, cluster, workload, part, 2)
    total = one + (L - 1) * (two - one) if L > 1 else one
    head, head_link, head_data = head_cost("galaxy_hmp_overlap", model, cluster, workload)  # after the layers
    total += head + head_link + head_data
    unfused = evaluate_galaxy_hmp(model, cluster, workload, part)
    memory = tp_memory_bytes(model, workload, part)
    if total > unfused.latency_s:
        notes = "; ".join(x for x in (notes, "tile fusion would be slower than the plain HMP schedule here: "
                                             "runs unfused") if x)
        return _result("galaxy_hmp_overlap", workload, unfused.compute_s + unfused.fixed_s + unfused.serial_s,
                       unfused.comm_link_latency_s, unfused.comm_bytes_s, memory, cluster, notes,
                       fixed=unfused.fixed_s, serial=unfused.serial_s, partition=part, hidden_comm_s=0.0,
                       fused_latency_s=total)
    mats, rows, cols = tile_classes(model, cluster, workload, part)
    t = hmp_block_times(model, cluster, workload, part)
    # each tile row summed as tile_times' n x n rows are (one row per class, the same reduction)
    per_device = sum(mats[k][:, cols].sum(axis=1)[rows] for k in mats) + t["attn"] + 2 * t["con"] + t["overhead"]
    compute = min(L * float(np.max(per_device)), total - head_link - head_data - head) + head
    link_all, data_all = _comm("galaxy_hmp", model, cluster, workload)
    exposed = total - compute - head_link - head_data
    share = link_all / (link_all + data_all) if link_all + data_all > 0 else 0.0
    fixed = L * float(np.max(fixed_layer_seconds("galaxy_hmp_overlap", model, cluster, workload, part))) \
        + _head_fixed(model, cluster, workload)
    return _result("galaxy_hmp_overlap", workload, compute, exposed * share + head_link,
                   exposed * (1 - share) + head_data, memory, cluster, notes, fixed=fixed, partition=part,
                   hidden_comm_s=max(L * (link_all + data_all) - exposed, 0.0), fused_latency_s=total)


# Galaxy's schemes costed on a given partition (Megatron-LM's and SP's split their compute_s as the registered ones
# do): the cost bodies the planners call with their own plan, not a registry (the catalogue holds the registered ones)
EVALUATORS = {"local": evaluate_local, "megatron_tp": with_streaming_split(megatron_tp_on), "sp": with_streaming_split(sp_on),
              "galaxy_hmp": evaluate_galaxy_hmp, "galaxy_hmp_overlap": evaluate_galaxy_hmp_overlap}
PLANNED = ("galaxy_hmp", "galaxy_hmp_overlap")  # these take Algorithm 1's plan (workbench.planners.galaxy)


def evaluate(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
             partition: Partition | None = None) -> SchemeResult:
    """Evaluate one of Galaxy's schemes (`EVALUATORS`; a partition applies to the parallel schemes; Galaxy's two need one:
    `workbench.planners.galaxy.evaluate` plans it)."""
    if scheme not in EVALUATORS:
        raise WorkbenchError(f"unknown scheme {scheme!r}; allowed: {', '.join(EVALUATORS)}")
    if scheme == "local":
        return evaluate_local(model, cluster, workload)
    return EVALUATORS[scheme](model, cluster, workload, partition)


def latency_or_nan(result: SchemeResult) -> float:
    """The latency, or NaN when the scheme runs out of memory."""
    return math.nan if result.oom else result.latency_s
