"""Galaxy (Ye et al.): hybrid model parallelism (HMP) and its tile overlap, on the generic partitions.

The partitions Galaxy compares against (Local, Megatron TP, SP) and the pieces HMP shares with them (the
`Partition`, per-device memory, ring collectives, the operator-table block times, the output head) live in
`workbench.schemes.partitions` and are re-exported here; this module keeps Galaxy's own: HMP's reduce-scatter /
all-gather schedule, the tile-by-tile overlap and the profiler's L(T, x, d) its planner reads.

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
  as a timeline of tiles on each device's compute and egress link (`workbench.core.simulate`'s recurrence,
  run one ring step of all devices at a time as numpy vectors: `overlap_makespans`).

Compute time follows the shared conventions of `workbench.schemes.common` (operand dtype, GEMM/GEMV
efficiency, a roofline per kernel, memory-bound connective blocks, the device's per-layer overhead).
Collectives are ring collectives on the cluster's topology (`workbench.machine.network.collective_latency`);
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
endpoint's stack handles them (`workbench.machine.network.collective_latency`'s per-byte term;
`workbench.papers.galaxy.stack_sensitivity`).

The Galaxy evaluators here take their partition (the plan); Algorithm 1 and the planning evaluators the
arena registers (`galaxy_hmp`, `galaxy_hmp_overlap`) live a layer up in `workbench.schemes.planners.galaxy`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.simulate import Task, Timeline, schedule
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import point_to_point
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, with_streaming_split
from workbench.schemes.common import (  # noqa: F401  (re-exported: the planner and tests use these names)
    CONNECTIVE_PASSES,
    ffn_down_flops,
    ffn_up_flops,
    layer_overhead,
    out_proj_flops,
    qkv_flops,
    score_flops,
)
from workbench.schemes.partitions import (  # noqa: F401  (the generic partitions; re-exported for the planner, tests)
    ONE_DEVICE_NOTE,
    PAPER,
    Partition,
    act_bytes,
    budgets,
    check_partition,
    connective_latency,
    evaluate_local,
    evaluate_megatron_tp,
    evaluate_sp,
    ffn_block,
    first_overflow,
    fixed_layer_seconds,
    full_memory_bytes,
    head_cost,
    head_fixed,
    hmp_block_times,
    layer_collectives,
    layer_comm,
    layer_launches,
    megatron_tp_on,
    model_weight_bytes_per_column,
    model_weight_bytes_per_head,
    one_device_is_local,
    partition_result,
    shared_weight_bytes,
    sp_activation_bytes,
    sp_layer_compute,
    sp_on,
    stack_seconds,
    tp_activation_bytes,
    tp_gemm_times,
    tp_memory_bytes,
    uniform_partition,
)

_comm = layer_comm  # one release: the old private name some tests call

# Galaxy's schemes split over devices (each has a shard_map kernel, `workbench.kernels.galaxy`); the catalogue
# lists all of Galaxy's (`load_all().filter(family="galaxy")`, `local` first)
LOCAL, MEGATRON_TP, SP = "local", "megatron_tp", "sp"  # the schemes `workbench.schemes.partitions` registers
HMP, HMP_OVERLAP = "galaxy_hmp", "galaxy_hmp_overlap"  # registered by workbench.schemes.planners.galaxy (they plan)
PARALLEL_SCHEMES = (MEGATRON_TP, SP, HMP, HMP_OVERLAP)
# Timeline length for the overlap: two layers, extrapolated (layer 2 starts unsynchronised).
SIMULATED_LAYERS = 2


# ---- per-device latencies: the profiler's L(T, x, d) -------------------------------------------
# FLOPs, dtype, GEMM/GEMV efficiency, the per-kernel roofline and the connective block are the shared
# conventions of `workbench.schemes.common` (their names are re-exported here for the planner and tests).
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
    """L(MLP, b, d): seconds for the MLP block with `cols` FFN columns on all new tokens (a MoE model's: its
    operator table rows, the router and the slices of the experts the tokens touch: `ffn_block`)."""
    s = workload.new_tokens
    if model.is_moe:
        return ffn_block(common.kernel_times(model, device, workload, np.zeros_like(np.asarray(cols, float)), cols, s),
                         model)
    return gemm_time(device, workload, ffn_up_flops(model, cols, s) + ffn_down_flops(model, cols, s),
                     np.asarray(cols, float) * layer_weight_bytes_per_column(model, workload))


def capacity(model: TransformerConfig, device: DeviceSpec, workload: Workload) -> float:
    """Galaxy Eq. 6: V_d = 1 / (L(MHA, all heads, d) + L(MLP, all columns, d))."""
    return 1.0 / float(mha_latency(model, device, workload, model.n_heads)
                       + mlp_latency(model, device, workload, model.d_ff))


def _require_plan(scheme: str, partition) -> None:
    if partition is None:
        raise WorkbenchError(f"{scheme} needs its partition (the plan); workbench.schemes.planners.galaxy.evaluate plans "
                             f"it with Algorithm 1")


def evaluate_galaxy_hmp(model: TransformerConfig, cluster: Cluster, workload: Workload, partition: Partition,
                        notes: str = "") -> SchemeResult:
    """Galaxy's hybrid model parallelism on a given partition, without overlap: per layer 2 ring RS + 2 ring
    AG as barriers."""
    _require_plan("galaxy_hmp", partition)
    part = check_partition(model, cluster, workload, partition, partition)
    t = hmp_block_times(model, cluster, workload, part)
    per_layer = (np.max(t["qkv"] + t["attn"] + t["out"]) + np.max(ffn_block(t, model)) + 2 * np.max(t["con"])
                 + np.max(t["overhead"]))
    link, data = layer_comm("galaxy_hmp", model, cluster, workload, part)
    L = model.n_layers
    head, head_link, head_data = head_cost("galaxy_hmp", model, cluster, workload)
    memory = tp_memory_bytes(model, workload, part)
    fixed = L * float(np.max(fixed_layer_seconds("galaxy_hmp", model, cluster, workload, part))) \
        + head_fixed(model, cluster, workload)
    rows = common.busiest_breakdown(model, cluster.devices, workload, part.heads, part.mlp_cols,
                                    (workload.new_tokens,) * cluster.n, L, connective_tokens=part.seq)
    return partition_result("galaxy_hmp", workload, L * float(per_layer) + head, L * link + head_link, L * data + head_data,
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
        gemms = tp_gemm_times(model, d, workload, pairs[:, :1], pairs[:, 1:], seq_values)
        if model.is_moe:  # the router gates each gathered tile just before its experts' up GEMM: one fused stage
            gemms = {k: v for k, v in gemms.items() if k != "router"} | {"ffn1": gemms["router"] + gemms["ffn1"]}
        blocks.append(gemms)
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
    chunk_bytes = [float(s * model.d_model * act_bytes(workload)) for s in part.seq]
    stack = stack_seconds(cluster)
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
    chunk_bytes = np.array([float(s * model.d_model * act_bytes(workload)) for s in part.seq])
    stack = stack_seconds(cluster)
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

    The same recurrence as `workbench.core.simulate.schedule` on the same list of tasks (start = max(its
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
    part = check_partition(model, cluster, workload, partition, partition)
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
        return partition_result("galaxy_hmp_overlap", workload, unfused.compute_s + unfused.fixed_s + unfused.serial_s,
                                unfused.comm_link_latency_s, unfused.comm_bytes_s, memory, cluster, notes,
                                fixed=unfused.fixed_s, serial=unfused.serial_s, partition=part, hidden_comm_s=0.0,
                                fused_latency_s=total)
    mats, rows, cols = tile_classes(model, cluster, workload, part)
    t = hmp_block_times(model, cluster, workload, part)
    # each tile row summed as tile_times' n x n rows are (one row per class, the same reduction)
    per_device = sum(mats[k][:, cols].sum(axis=1)[rows] for k in mats) + t["attn"] + 2 * t["con"] + t["overhead"]
    compute = min(L * float(np.max(per_device)), total - head_link - head_data - head) + head
    link_all, data_all = layer_comm("galaxy_hmp", model, cluster, workload)
    exposed = total - compute - head_link - head_data
    share = link_all / (link_all + data_all) if link_all + data_all > 0 else 0.0
    fixed = L * float(np.max(fixed_layer_seconds("galaxy_hmp_overlap", model, cluster, workload, part))) \
        + head_fixed(model, cluster, workload)
    return partition_result("galaxy_hmp_overlap", workload, compute, exposed * share + head_link,
                            exposed * (1 - share) + head_data, memory, cluster, notes, fixed=fixed, partition=part,
                            hidden_comm_s=max(L * (link_all + data_all) - exposed, 0.0), fused_latency_s=total)


# The schemes on a given partition (Megatron-LM's and SP's split their compute_s as the registry's do).
EVALUATORS = {"local": evaluate_local, "megatron_tp": with_streaming_split(megatron_tp_on), "sp": with_streaming_split(sp_on),
              "galaxy_hmp": evaluate_galaxy_hmp, "galaxy_hmp_overlap": evaluate_galaxy_hmp_overlap}
PLANNED = ("galaxy_hmp", "galaxy_hmp_overlap")  # these take Algorithm 1's plan (workbench.schemes.planners.galaxy)


def evaluate(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
             partition: Partition | None = None) -> SchemeResult:
    """Evaluate one of Galaxy's schemes (`EVALUATORS`; a partition applies to the parallel schemes; Galaxy's two need one:
    `workbench.schemes.planners.galaxy.evaluate` plans it)."""
    if scheme not in EVALUATORS:
        raise WorkbenchError(f"unknown scheme {scheme!r}; allowed: {', '.join(EVALUATORS)}")
    if scheme == "local":
        return evaluate_local(model, cluster, workload)
    return EVALUATORS[scheme](model, cluster, workload, partition)


def latency_or_nan(result: SchemeResult) -> float:
    """The latency, or NaN when the scheme runs out of memory."""
    return math.nan if result.oom else result.latency_s
