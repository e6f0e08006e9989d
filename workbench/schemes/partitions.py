"""The generic partitions of a layer over devices, costed on the one operator table: local, Megatron TP, SP.

A partition says what each device computes of a layer (a slice: `Partition`'s heads, FFN columns and tokens per
device) and the syncs it needs (`layer_collectives`); every slice of a dense, MoE or MLA layer on every device is
costed by the one operator table (`common.kernel_times`, `common.attention_time`, `common.connective_time`, through
`hmp_block_times`), so a mixture of experts costs here as everywhere: an FFN slice is that slice of every expert (TP
inside each expert), its `router` row runs whole on each device holding columns (`ffn_rows`), and the router's
weights are kept whole there (`shared_weight_bytes`).

* ``local``: the whole layer on the cluster's first device (`common.step_time`).
* ``megatron_tp`` (M-LM): MHA and MLP split by heads/columns, the connective ops (residual, LayerNorm) replicated on
  the full sequence; a ring all-reduce of the (S, E) activations after MHA and after MLP.
* ``sp``: every device holds all weights and runs the whole layer on its `s_d` tokens; attention needs every key and
  value, so two ring all-gathers (K and V) per layer.

The hybrid of TP and SP with its reduce-scatters and all-gathers (``galaxy_hmp``) and its tile overlap are Galaxy's
(`workbench.schemes.galaxy`), built on the pieces here; layer pipelines and expert parallelism are
`schemes.baselines` / `schemes.pipeline` and `schemes.moe`. These three are the baselines Galaxy (Ye et al.)
compares against, so their rows keep its paper column (`PAPER`), and their conventions (memory per device,
collectives on the cluster's ring, fixed costs, the output head) are the ones `workbench.schemes.galaxy`'s docstring
states.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.core.apportion import even_split
from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import collective_latency
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import (
    Cluster,
    SchemeResult,
    Workload,
    costed,
    one_device_takes,
    over_budget_note,
    register,
)
from workbench.schemes.common import layer_overhead

PAPER = "galaxy"  # the paper whose baselines these are (their rows' paper column)
COLLECTIVE_SCHEMES = ("local", "megatron_tp", "sp", "galaxy_hmp", "galaxy_hmp_overlap")  # `layer_collectives`' schemes


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


# ---- per-device pieces: bytes per activation value, the connective block ----------------------
def act_bytes(workload: Workload) -> float:
    return workload.activation_bits / 8


def connective_latency(model: TransformerConfig, device: DeviceSpec, workload: Workload, tokens) -> np.ndarray:
    """L(CON, s, d): seconds for one connective block (residual + LayerNorm) on `tokens`, memory-bound."""
    return common.connective_time(model, device, workload, tokens)


# ---- memory -------------------------------------------------------------------------------------
def model_weight_bytes_per_head(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one query head's share of all layers' attention weights (Eq. 5's l * M_att / sum A)."""
    return model.n_layers * model.attention_params() / model.n_heads * workload.weight_bits / 8


def model_weight_bytes_per_column(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one FFN column's share of all layers' MLP weights (Eq. 5's l * M_mlp / sum B); a MoE router is
    not split by columns (every device holding columns keeps it whole: `shared_weight_bytes`)."""
    sliced = model.ffn_params() - model.moe_layers * model.router_params() / model.n_layers
    return model.n_layers * sliced / model.d_ff * workload.weight_bits / 8


def shared_weight_bytes(model: TransformerConfig, workload: Workload, n: int) -> float:
    """Weights outside the MHA/MLP blocks each TP device holds: all norms + 1/n of the embeddings (+ every MoE
    layer's router, whole: it gates every token on each device, stored in f32, `common.ROUTER_BITS`)."""
    params = model.n_layers * model.norm_params() + (model.embedding_params() + model.head_params()) / n
    if model.is_moe:
        return params * workload.weight_bits / 8 + model.moe_layers * common.weight_bytes(model.router_params(),
                                                                                          common.ROUTER_BITS)
    return params * workload.weight_bits / 8


def tp_activation_bytes(model: TransformerConfig, workload: Workload, heads, cols, seq) -> np.ndarray:
    """Working set of a TP/HMP device: gathered input, own shard, its heads' Q/K/V and scores, its FFN slice
    (of each of a MoE token's `experts_per_token` experts)."""
    s, t = workload.new_tokens, workload.attended
    heads, cols, seq = (np.asarray(v, dtype=float) for v in (heads, cols, seq))
    kv_per_q = model.n_kv_heads / model.n_heads
    elements = (s * model.d_model + seq * model.d_model + s * heads * model.d_head * (1 + 2 * kv_per_q)
                + heads * s * t + s * cols * model.experts_per_token)
    cache = 0.0 if workload.phase == "prefill" else 2 * t * heads * kv_per_q * model.d_head * model.n_layers
    return (elements + cache) * act_bytes(workload)


def sp_activation_bytes(model: TransformerConfig, workload: Workload, seq) -> np.ndarray:
    """Working set of an SP device: its tokens' activations, Q for them, all K/V, scores, FFN hidden."""
    t = workload.attended
    seq = np.asarray(seq, dtype=float)
    elements = (2 * seq * model.d_model + seq * model.q_dim + 2 * t * model.kv_dim + model.n_heads * seq * t
                + seq * model.d_ff * (2 if model.gated_ffn else 1) * model.experts_per_token)
    n = max(seq.size, 1)
    cache = 0.0 if workload.phase == "prefill" else model.kv_cache_bytes(t, workload.activation_bits) / n
    return elements * act_bytes(workload) + cache


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
    """'' if every device fits its budget (`budgets`), else the over-budget note (`base.over_budget_note`)."""
    return over_budget_note(tuple(np.asarray(need, dtype=float)), tuple(budgets(cluster)),
                            tuple(d.name for d in cluster.devices))


# ---- collectives --------------------------------------------------------------------------------
def layer_collectives(scheme: str, model: TransformerConfig, workload: Workload) -> list[tuple[str, float]]:
    """(collective, message bytes) per layer; the message is the full (gathered / reduced) buffer."""
    b = act_bytes(workload)
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
    raise WorkbenchError(f"unknown scheme {scheme!r}; allowed: {', '.join(COLLECTIVE_SCHEMES)}")


def stack_seconds(cluster: Cluster) -> np.ndarray:
    """Per-device network-stack CPU seconds per byte (`DeviceSpec.stack_s_per_byte`; the what-if, 0 = free)."""
    return np.array([d.stack_s_per_byte for d in cluster.devices], dtype=float)


def ring_collective(cluster: Cluster, kind: str, message_bytes: float) -> tuple[float, float]:
    """(per-message seconds, bytes seconds) of one ring collective over the cluster: the wire hops plus the
    link's `message_overhead_s` at both endpoints of every ring step, and the busiest link's bytes at the
    bandwidth - or at the slowest endpoint's network stack, if that handles bytes slower (the what-if)."""
    topo = cluster.topology
    link, data = collective_latency("ring", kind, cluster.n, message_bytes, topo.link.bandwidth_bytes_per_s,
                                    topo.link.latency_s, topo.path_hops, breakdown=True,
                                    message_overhead=topo.link.message_overhead_s,
                                    stack_s_per_byte=float(np.max(stack_seconds(cluster))))
    return float(link), float(data)


def layer_comm(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
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
            message = cluster.n * max(partition.seq) * width * act_bytes(workload)
        parts.append(ring_collective(cluster, kind, message))
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def tp_gemm_times(model: TransformerConfig, device: DeviceSpec, workload: Workload, heads: int, cols: int,
               tokens) -> dict[str, np.ndarray]:
    """Seconds of the four TP GEMMs (qkv, out, ffn1, ffn2) for `tokens` rows with `heads` heads and
    `cols` FFN columns; each reads its full weight slice (so row tiles re-read the weights)."""
    return common.kernel_times(model, device, workload, heads, cols, tokens)


def ffn_rows(model: TransformerConfig) -> tuple[str, ...]:
    """The operator table's FFN rows in the order a layer adds them: ffn1, ffn2 (a MoE model's router first)."""
    return ("router", "ffn1", "ffn2") if model.is_moe else ("ffn1", "ffn2")


def ffn_block(t: dict[str, np.ndarray], model: TransformerConfig) -> np.ndarray:
    """Per-device seconds of the FFN block from a dict of operator-row seconds (`hmp_block_times`): its
    `ffn_rows` added in order (a dense model's ffn1 + ffn2, bit for bit as before the router existed)."""
    first, *rest = ffn_rows(model)
    total = t[first]
    for name in rest:
        total = total + t[name]
    return total


def hmp_block_times(model: TransformerConfig, cluster: Cluster, workload: Workload,
                    part: Partition) -> dict[str, np.ndarray]:
    """Per-device seconds of each HMP step (whole GEMMs): the operator table's rows (qkv, attn, out, ffn1, ffn2,
    con; a MoE model's router too, whole on every device holding FFN columns), overhead."""
    s = workload.new_tokens
    heads, cols, seq = (np.asarray(v, dtype=np.int64) for v in (part.heads, part.mlp_cols, part.seq))
    out = {k: np.zeros(cluster.n) for k in common.layer_operator_names(model) + ("overhead",)}
    for d, idx in common.distinct_devices(cluster.devices):  # one device class at a time, vectorised over it
        for k, v in tp_gemm_times(model, d, workload, heads[idx], cols[idx], s).items():
            out[k][idx] = v
        out["attn"][idx] = common.attention_time(model, d, workload, heads[idx])
        out["con"][idx] = connective_latency(model, d, workload, seq[idx])
        out["overhead"][idx] = layer_overhead(d)
    return out


def layer_launches(scheme: str, model: TransformerConfig, workload: Workload, part: Partition) -> np.ndarray:
    """Kernels each device launches per layer: the four weight GEMMs where it holds heads / columns (a MoE
    model's router too, with the columns; under the tile overlap, one per non-empty tile: n tiles each),
    attention, and the two connective blocks
    (on its tokens; M-LM replicates them on the whole sequence). Splitting a GEMM does not split these."""
    heads, cols = np.asarray(part.heads) > 0, np.asarray(part.mlp_cols) > 0
    tiles = float(sum(1 for t in part.seq if t > 0)) if scheme == "galaxy_hmp_overlap" else 1.0
    if scheme == "sp":
        return np.where(np.asarray(part.seq) > 0, float(common.kernels_per_layer(model)), 0.0)
    con = 2.0 * (np.ones(part.n) if scheme == "megatron_tp" else (np.asarray(part.seq) > 0))
    return heads * (2 * tiles + 1) + cols * len(ffn_rows(model)) * tiles + con


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
    before, after = sp_layer_arrays(model, device, workload, tokens)
    return float(before), float(after)


def sp_layer_arrays(model: TransformerConfig, device: DeviceSpec, workload: Workload, tokens):
    """`sp_layer_compute` vectorised over `tokens` (one device class)."""
    g = tp_gemm_times(model, device, workload, model.n_heads, model.d_ff, tokens)
    before = g["qkv"]
    after = g["out"]
    for name in ffn_rows(model):
        after = after + g[name]
    after = after + common.attention_time(model, device, workload, model.n_heads, tokens) \
        + 2 * connective_latency(model, device, workload, tokens) + layer_overhead(device)
    return before, after


# ---- evaluators ---------------------------------------------------------------------------------
def check_partition(model: TransformerConfig, cluster: Cluster, workload: Workload, partition: Partition | None,
                    default: Partition) -> Partition:
    if not isinstance(model, TransformerConfig):
        raise WorkbenchError(f"model must be a TransformerConfig, got {type(model).__name__}")
    partition = default if partition is None else partition
    if not isinstance(partition, Partition):
        raise WorkbenchError(f"partition must be a Partition, got {type(partition).__name__}")
    if partition.n != cluster.n:
        raise WorkbenchError(f"partition is for {partition.n} devices but the cluster has {cluster.n}")
    return partition.check(model, workload.new_tokens)


def partition_result(scheme, workload, compute, link, data, memory, cluster, notes="", fixed=0.0, serial=0.0,
                     operators: common.Breakdown | None = None, **extra) -> SchemeResult:
    """A SchemeResult with the fixed and serial seconds (counted in `compute`) carved out as components and the
    busiest device's operator rows (`operators`) when the scheme's layer is its devices' fused tables."""
    need = np.asarray(memory, dtype=float)
    result = costed(scheme, PAPER, workload.phase, compute + link + data, tuple(d.name for d in cluster.devices),
                    notes, compute_s=compute, comm_link_latency_s=link, comm_bytes_s=data,
                    peak_memory_bytes=tuple(float(m) for m in need),
                    memory_budget_bytes=tuple(float(b) for b in budgets(cluster)), extra=extra, operators=operators)
    serial = min(float(serial), compute)
    return result.carve(min(float(fixed), compute - serial), serial)


@register("local", PAPER, no_operators=common.WHOLE_STEP_ROWS,
          moe=True, origin="Galaxy (Ye et al.) Sec. III-B: the Local baseline, one device",
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
    return partition_result("local", workload, compute, 0.0, 0.0, memory, one, fixed=fixed)


ONE_DEVICE_NOTE = "one device: nothing to split, local's time"


# Decorator for a partition scheme's evaluator: on one device the scheme splits nothing, so it runs what `local`
# runs and its time (latency and every component) is `local`'s; its memory, OOM and notes stay its own. Without it
# a one-device sweep named a TP scheme the winner on its own step model's differences (Hepti's merged kernels, the
# MCU's tile pipeline, TPI-LLM's and distributed-llama's per-block sums).
one_device_is_local = one_device_takes(lambda: evaluate_local, ONE_DEVICE_NOTE)


def head_fixed(model: TransformerConfig, cluster: Cluster, workload: Workload) -> float:
    """The output head's launch (one kernel on each device that computes a share of it)."""
    if not (workload.output_head and model.is_decoder):
        return 0.0
    return max(float(d.launch_time(1)) for d, _ in common.distinct_devices(cluster.devices))


@register("megatron_tp", PAPER, moe=True, origin="Megatron-LM TP as Galaxy (Ye et al.) Sec. III-B costs it",
          partition="tp")
def evaluate_megatron_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Megatron-LM TP on equal shards (the arena's signature; `megatron_tp_on` takes a partition)."""
    return megatron_tp_on(model, cluster, workload)


def megatron_tp_on(model: TransformerConfig, cluster: Cluster, workload: Workload,
                   partition: Partition | None = None) -> SchemeResult:
    """Megatron-LM TP: equal heads/columns, replicated connective ops, two ring all-reduces per layer."""
    s = workload.new_tokens
    part = check_partition(model, cluster, workload, partition, uniform_partition(model, cluster.n, s))
    full = Partition(part.heads, part.mlp_cols, (s,) * cluster.n)  # connective work is replicated
    t = hmp_block_times(model, cluster, workload, full)
    per_layer = (np.max(t["qkv"] + t["attn"] + t["out"]) + np.max(ffn_block(t, model)) + 2 * np.max(t["con"])
                 + np.max(t["overhead"]))
    link, data = layer_comm("megatron_tp", model, cluster, workload)
    L = model.n_layers
    head, head_link, head_data = head_cost("megatron_tp", model, cluster, workload)
    fixed = L * float(np.max(fixed_layer_seconds("megatron_tp", model, cluster, workload, part))) \
        + head_fixed(model, cluster, workload)
    return partition_result("megatron_tp", workload, L * float(per_layer) + head, L * link + head_link, L * data + head_data,
                            tp_memory_bytes(model, workload, full), cluster, fixed=fixed, partition=part,
                            operators=common.busiest_breakdown(model, cluster.devices, workload, full.heads, full.mlp_cols,
                                                               full.seq, L))


@register("sp", PAPER, moe=True, origin="sequence parallelism as Galaxy (Ye et al.) Sec. III-B costs it",
          partition="sequence")
def evaluate_sp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Sequence parallelism on equal token shards (the arena's signature; `sp_on` takes a partition)."""
    return sp_on(model, cluster, workload)


def sp_on(model: TransformerConfig, cluster: Cluster, workload: Workload,
          partition: Partition | None = None) -> SchemeResult:
    """Sequence parallelism: equal token shards, full weights everywhere, K and V all-gathered per layer;
    the next token's logits on the device holding the last token (serial)."""
    part = check_partition(model, cluster, workload, partition, uniform_partition(model, cluster.n, workload.new_tokens))
    seq = np.asarray(part.seq, dtype=np.int64)
    before, after = np.zeros(cluster.n), np.zeros(cluster.n)
    for d, idx in common.distinct_devices(cluster.devices):  # per device class, vectorised over its shards
        before[idx], after[idx] = sp_layer_arrays(model, d, workload, seq[idx])
    compute = float(np.max(before)) + float(np.max(after))
    link, data = layer_comm("sp", model, cluster, workload, part)
    L = model.n_layers
    head = head_cost("sp", model, cluster, workload)[0]
    memory = full_memory_bytes(model, workload, np.asarray(part.seq))
    notes = "decode: the new token's shard does all the work" if workload.phase == "decode" else ""
    fixed = L * float(np.max(fixed_layer_seconds("sp", model, cluster, workload, part)))
    n = cluster.n
    return partition_result("sp", workload, L * compute + head, L * link, L * data, memory, cluster, notes, fixed=fixed,
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
        messages.append(cluster.n * model.d_model * act_bytes(workload))  # the last token's row, padded per shard
    parts = [ring_collective(cluster, "all_gather", m) for m in messages]
    return compute, sum(p[0] for p in parts), sum(p[1] for p in parts)
