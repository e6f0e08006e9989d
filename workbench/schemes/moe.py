"""Mixtures of experts on the one cost core: the three ways edge engines (and one what-if) partition a MoE layer.

Every scheme costs its devices' layers through the operator table's MoE rows (`common.layer_operators`: attention
rows, an f32 `router` row, FFN rows computing `experts_per_token` experts and streaming the slices of the experts
the step touches, `common.experts_touched`), so one device, model and workload cost the same here as everywhere.
Each result's `detail` (`base.MoEParts`) splits the step into attention, router, expert streaming, expert misses
(what `io_stall_s` holds) and communication seconds; prefill and decode differ because a prompt of S tokens
touches the *union* of its tokens' experts (`routing.expected_distinct`), a decode token only its own k.

**dllama_allgather_tp** on a MoE model - distributed-llama v0.16 (b4rtaz/distributed-llama tag v0.16.4, commit e819dc6), TP inside
every expert. Each of N nodes holds the row slices of q, k, v and the column slice of wo (src/llm.cpp:168-171),
the row slices of every expert's w1, w3 and the column slice of its w2 (`ffDim = moeHiddenDim`, :154-157,
:173-175, loaded per expert :637-641), and the whole router gate in F32 (`moeGateSize = size2D(F_32, dim,
nExperts)`, :163, `loadAll("block_moe_gate")`, :636). Every node recomputes the router and its top-k (:432-449)
and runs its slices of the k active experts only: the expert matmul indexes the weights by the active expert
(src/nn/nn-cpu-ops.cpp:1166-1189), one GEMV per batch row and active expert (the llamafile GEMM path is skipped
for z = k > 1, :1120-1121), so a forward of S rows streams S k expert slices (decode: k). Per node and decode
token, the weight bytes it streams (w = bytes per weight, d = dim, q = qDim, v = kvDim, F = moeHiddenDim,
E experts, k active, L layers, V vocabulary):

    W_node = L [ (2 q + 2 v) d w / N  +  4 d E  +  3 k d F w / N ]  +  V d w / N     (classifier slice, :176)

The syncs are the dense graph's (a MoE block changes none): the root writes the 8-byte control packet to every
worker per forward (src/app.cpp:197-200, `LlmControlPacket`, src/app.hpp:46-49), sends x in F32 per row
(`SYNC_WITH_ROOT`, src/llm.cpp:256; src/nn/nn-network.cpp:541-566); after attention and after the MoE block
every node writes its d-wide partial in the sync format to each of the N-1 others and reads theirs
(`SYNC_NODE_SLICES`, src/llm.cpp:403, 554; nn-network.cpp:568-600: `sliceBytes = nBytes / nNodes` of the
`ZQ` pipe, size2D(syncType, nBatches, dim nNodes), src/llm.cpp:195); workers send their F32 logits slice to the root
(`SYNC_NODE_SLICES_EXCEPT_ROOT`, src/llm.cpp:599). Each sync runs once per batch row (nn-network.cpp:618).
With z = bytes of d values in the sync format (Q80: 34 d / 32, nn-core.cpp:21-23), per forward of S rows:

    root:   sent = (N-1) [ 8 + S (4 d + 2 L z) ]            received = (N-1) S [ 2 L z + 4 V / N ]
    worker: sent = S [ 2 L (N-1) z + 4 V / N ]              received = 8 + S [ 4 d + 2 L (N-1) z ]

(the 4 V / N terms are the logits; a step without the output head has none).

(`dllama_traffic`, from `engines.forward_syncs`; tests/test_moe_schemes.py holds both to these lines.) The
node counts it runs on: a power of two (README.md:48, "only on 1, 2, 4... 2^n nodes"), at most the KV heads
(src/app.cpp:236), dividing the heads, KV width, every expert's F and the vocabulary (the slicers' asserts,
src/nn/nn-core.cpp:213, 222, 234, 280). v0.16 converts Qwen3-MoE only (`QWEN3_MOE`, src/llm.cpp:156, 425); its
graph has no shared experts, dense layers or latent attention, so models with those are n/a; other routed-only
MoEs (Mixtral, OLMoE, gpt-oss) are costed as that graph would run them (said in the notes). Compute, merge
reads, root passes and the sync times are `engines`' (`merge_time`, `root_pass_time`, `comm_time`). A prompt is
one forward of S rows here; v0.16 evaluates it in chunks of `--nbatches` rows (32 by default, src/app.cpp:29),
re-streaming attention and router per chunk (not modelled: a lower bound on its prefill, as in `engines`).

**moe_layer_pipeline** - whole layers with all their experts per device (llama.cpp RPC `--split-mode layer`,
prima.cpp): layers in proportion to each device's memory less what only the master holds. A device keeps its
layers' attention, norms, router (f32) and shared experts resident, and an **expert cache** of C experts per MoE
layer in DRAM (`cache_experts`, default what its free memory allows, at most E); the other experts are read from
storage when needed at `offload_read_bytes_per_s` (else `storage_read_bytes_per_s`) - under mmap, llama.cpp's
`ggml_mul_mat_id` reads routed experts only (`reads="routed"`): expected misses per MoE layer are k (1 - h) for a
decode token (h = `hit_rate` of the cache, policy pinned or LRU) and `expected_misses` of the prompt's union in
prefill, each read blocking; prima.cpp's prefetch advises every weight of the next layer (`reads="prefetch"`:
all E - C non-resident experts of every layer, whatever the tokens), read while the layer before computes
(assumed: the stall is max(0, read - that layer's compute)). Hand-offs are `moe_traffic.pipeline_handoff_bytes`
through `pipeline.handoff_time`; the master runs the head.

**moe_expert_parallel** (a what-if; no edge engine does it): each MoE layer's E experts split evenly over the N
devices, a dispatch and a combine all-to-all per MoE layer (a mesh: every device exchanges with the N-1 others at
once, the busiest endpoint's bytes serialised: `network`'s mesh all-gather row sized to them), attention
`replicated` (every device holds it; the step's tokens are owned evenly, each owner attends for its tokens and
dispatches each (token, expert) pair whose expert lives elsewhere: d activations per pair; the KV exchange a
prompt split over owners needs is not costed) or `tp` (heads split, a mesh all-reduce of the T x d partials
after attention - in the dense first layers too - so dispatch is local and the combine is a mesh all-reduce).
The slowest device sets each layer's expert time; shared experts and dense FFNs are on every device, computed for
the tokens it owns (TP: 1/N of the tokens' shared experts). Its load (token-expert pairs) is the **expected
maximum over devices**: with pi_e the probability that a token picks expert e (sum k; uniform k/E; `popularity`
of the routing model), device j's pairs over T independent tokens have mean T mu_j = T sum_{e in j} pi_e and
variance T s_j^2, s_j^2 = sum_{e in j} pi_e (1 - pi_e) (E - k)/(E - 1) (the hypergeometric variance, exact for
uniform routing), and

    E[max_j load_j] ~= max_j min( T mu_j + sqrt(T) s_j sqrt(2 ln N),  T min(k, E_j) )

(the Gaussian bound on the expected maximum of N loads; never below the largest mean; above a Monte-Carlo of
uniform routing by at most 25 % for a decode token, 5 % for 16 tokens and more: tests/test_moe_schemes.py). A
device streams the experts its pairs touch from DRAM: sum_{e in j} 1 - (1 - pi_e)^T at its mean load, scaled by
its load bound over that mean (a decode token's pairs on one device are distinct experts), at most E_j.

The expert cache's hit rate and misses, and the experts' popularity, are the routing model's
(`workbench.model.routing.hit_rate`, `expected_misses`, `popularity`: uniform, skewed or traced routing, temporal
locality, pinned or LRU caches).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from workbench.core.apportion import apportion_capped, even_split
from workbench.core.errors import InfeasibleError, WorkbenchError, require_choice, require_int
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import on_topology
from workbench.model.models import TransformerConfig
from workbench.model.routing import (
    CACHE_POLICIES,
    EXPERT_READS,
    check_cache,
    expected_misses,
    hit_rate,
    popularity,
)
from workbench.schemes import common, engines, moe_traffic
from workbench.schemes.base import (
    Cluster,
    MoEParts,
    SchemeResult,
    Workload,
    costed,
    one_device_takes,
    register,
)
from workbench.schemes.pipeline import handoff_time

DLLAMA_SCHEME, PIPELINE_SCHEME, EP_SCHEME = "dllama_allgather_tp", "moe_layer_pipeline", "moe_expert_parallel"
PAPER_DLLAMA, PAPER_PIPELINE, PAPER_EP = "distributed_llama", "prima.cpp", "baseline"
READS = EXPERT_READS  # llama.cpp mmap reads routed experts only; prima.cpp prefetches whole tensors
EP_ATTENTION = ("replicated", "tp")
ATTENTION_ROWS, ROUTER_ROWS, EXPERT_ROWS = ("qkv", "attn", "out", "con"), ("router",), ("ffn1", "ffn2")
CONTROL_PACKET_BYTES = engines.CONTROL_PACKET_BYTES  # LlmControlPacket (src/app.hpp:46-49), 8 B




# ---- shared pieces ------------------------------------------------------------------------------------------
def require_moe(model: TransformerConfig, scheme: str) -> None:
    """One line unless `model` is a mixture of experts."""
    if not model.is_moe:
        raise WorkbenchError(f"{scheme} costs a mixture of experts; {model.name} is dense (n_experts = 0): the "
                             f"dense schemes cost it")


def expert_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one expert (gate, up, down) at the workload's weight bits."""
    return float(common.weight_bytes(model.expert_params(), workload.weight_bits))


def row_seconds(device: DeviceSpec, rows) -> dict[str, float]:
    """Seconds (busy + launches) of each operator row on `device`."""
    return {r.operator.name: float(r.time_s) for r in common.cost(device, rows)}


def group_seconds(seconds: dict[str, float]) -> dict[str, float]:
    """A layer's row seconds summed into attention (with the connective blocks), router and experts."""
    return {"attention_s": sum(seconds.get(n, 0.0) for n in ATTENTION_ROWS),
            "router_s": sum(seconds.get(n, 0.0) for n in ROUTER_ROWS),
            "experts_s": sum(seconds.get(n, 0.0) for n in EXPERT_ROWS)}


def moe_breakdown(attention: float, router: float, experts: float, misses: float, comm: float,
                  **more) -> MoEParts:
    """The MoE step's parts in seconds (the result's `detail`), with `more` of the scheme's own fields."""
    return MoEParts(float(attention), float(router), float(experts), float(misses), float(comm), **more)


# ---- (a) distributed-llama v0.16: TP inside every expert -----------------------------------------------------
def dllama_allowed_counts(model: TransformerConfig) -> list[int]:
    """Node counts v0.16 splits `model` over: powers of two up to the KV heads dividing the heads, KV heads,
    expert width and vocabulary (README.md:48, src/app.cpp:236, src/nn/nn-core.cpp:213-280)."""
    counts, n = [], 1
    while n <= model.n_kv_heads:
        if not any(size % n for size in (model.n_heads, model.n_kv_heads, model.d_ff, model.vocab_size)):
            counts.append(n)
        n *= 2
    return counts


def check_dllama_moe(model: TransformerConfig, n: int) -> int:
    """Return n if distributed-llama v0.16's MoE graph runs `model` on n nodes, else one line saying why."""
    require_int("n_devices", n, low=1)
    require_moe(model, DLLAMA_SCHEME)
    missing = [f"{key} = {value}" for key, value in (("n_shared_experts", model.n_shared_experts),
               ("n_dense_layers", model.n_dense_layers), ("kv_lora_rank", model.kv_lora_rank)) if value]
    if missing:
        raise WorkbenchError(f"{DLLAMA_SCHEME}: distributed-llama v0.16's MoE graph (src/llm.cpp:425-499) has "
                             f"routed experts only; {model.name} has {', '.join(missing)} (allowed: 0)")
    allowed = dllama_allowed_counts(model)
    if n not in allowed:
        raise WorkbenchError(f"n_devices must be one of {', '.join(map(str, allowed))} for {DLLAMA_SCHEME} on "
                             f"{model.name} (a power of two dividing n_heads {model.n_heads}, n_kv_heads "
                             f"{model.n_kv_heads}, d_ff {model.d_ff} and vocab_size {model.vocab_size}); got {n}")
    return n


def dllama_traffic(model: TransformerConfig, n: int, rows: int, activation_bits: float,
                   output_head: bool = True) -> dict[str, float]:
    """Bytes the root and a worker send and receive in one forward of `rows` tokens: the engine's syncs
    (`engines.forward_syncs`, the same in a MoE graph) read per role (star: root <-> each worker; mesh: every
    node to and from the N-1 others)."""
    out = dict.fromkeys(("root_sent", "root_received", "worker_sent", "worker_received"), 0.0)
    for s in engines.forward_syncs(engines.ALLGATHER, model, n, rows, activation_bits, output_head):
        m = s.message_bytes * s.repeats * (model.n_layers if s.per_layer else 1)
        if (s.algorithm, s.collective) == ("star", "broadcast"):
            out["root_sent"] += (n - 1) * m
            out["worker_received"] += m
        elif (s.algorithm, s.collective) == ("star", "reduce"):
            out["worker_sent"] += m
            out["root_received"] += (n - 1) * m
        elif (s.algorithm, s.collective) == ("mesh", "all_reduce"):
            for key in out:
                out[key] += (n - 1) * m
        else:
            raise WorkbenchError(f"dllama_traffic: no per-role reading of a {s.algorithm} {s.collective} sync")
    return out


def dllama_layer_rows(model: TransformerConfig, workload: Workload, n: int) -> list[common.Operator]:
    """One node's operator rows of a layer: 1/n of the heads and of every expert's columns, the whole router; the
    experts' rows stream the engine's S k slice reads (one GEMV per row and active expert), not the union."""
    rows = common.layer_operators(model, workload, model.n_heads / n, model.d_ff / n)
    s = workload.new_tokens
    touched = float(common.experts_touched(model, workload, s))
    reads = s * model.n_active_experts / touched  # 1 for a decode token
    return [replace(r, bytes=r.bytes * reads, kind="gemv", rows=None) if r.name in EXPERT_ROWS and s > 1 else r
            for r in rows]


def dllama_stream_bytes(model: TransformerConfig, workload: Workload, n: int) -> float:
    """Weight bytes a node streams in one forward: its layers' rows (KV and activations aside) and classifier slice."""
    weights = sum(float(r.bytes) for r in dllama_layer_rows(model, workload, n) if r.name not in ("attn", "con"))
    head = common.weight_bytes(model.vocab_size * model.d_model, workload.weight_bits) / n \
        if workload.output_head and model.is_decoder else 0.0
    return model.n_layers * weights + float(head)


def dllama_forward(model: TransformerConfig, cluster: Cluster, workload: Workload) -> tuple[engines.Forward, dict]:
    """One forward of v0.16 on a MoE model: per layer the slowest node's attention half, a sync, its MoE half, a sync."""
    n, s, L = cluster.n, workload.new_tokens, model.n_layers
    table = dllama_layer_rows(model, workload, n)
    att, ffn, parts = [], [], []
    for device in cluster.devices:
        sec = row_seconds(device, table)
        merge = engines.merge_time(model, device, workload, n, s)
        att.append(sec["qkv"] + sec["attn"] + sec["out"] + sec["con"] / 2 + merge + common.layer_overhead(device))
        ffn.append(sec["router"] + sec["ffn1"] + sec["ffn2"] + sec["con"] / 2 + merge)
        parts.append(group_seconds(sec))
    head_on = workload.output_head and model.is_decoder
    head = common.output_head_time(model, cluster.devices, workload)
    root = cluster.serial_device(cluster.devices[0])
    serial = engines.root_pass_time(root, workload, s * model.d_model * engines.F32_BYTES)
    if head_on:
        serial += engines.root_pass_time(root, workload, model.vocab_size * engines.F32_BYTES)
    fixed = L * max(common.fixed_layer_time(d, common.kernels_per_layer(model)) for d in cluster.devices)
    if head_on:
        fixed += max(float(d.launch_time(1)) for d in cluster.devices)
    syncs = engines.forward_syncs(engines.ALLGATHER, model, n, s, workload.activation_bits, head_on)
    compute = L * (max(att) + max(ffn)) + head + serial
    link, data = engines.forward_comm(cluster, syncs, L, compute)
    slow = int(np.argmax(np.array(att) + np.array(ffn)))
    split = moe_breakdown(L * parts[slow]["attention_s"], L * parts[slow]["router_s"], L * parts[slow]["experts_s"],
                          0.0, link + data)
    return engines.Forward(compute, fixed, serial, link, data), \
        {"moe_breakdown": split, "busiest": slow, "rows": table}


def dllama_memory_bytes(model: TransformerConfig, cluster: Cluster, workload: Workload) -> np.ndarray:
    """Per node: its slices of attention, of every expert and of the classifier, the whole F32 router and norms,
    1/n of the KV cache; the root also the F32 embedding table."""
    n, wb = cluster.n, workload.weight_bits
    sliced = model.n_layers * (model.attention_params() + model.n_experts * model.expert_params()) / n
    whole = model.n_layers * (model.router_params() + model.norm_params()) * engines.F32_BYTES
    per = np.full(n, float(common.weight_bytes(sliced + model.vocab_size * model.d_model / n, wb)) + whole
                  + model.kv_cache_bytes(workload.attended, workload.cache_bits) / n)
    per[0] += model.vocab_size * model.d_model * engines.F32_BYTES
    return per


def evaluate_dllama_moe(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.16 on a MoE model: a prefill is one forward of S rows."""
    check_dllama_moe(model, cluster.n)
    f, info = dllama_forward(model, cluster, workload)
    need = dllama_memory_bytes(model, cluster, workload)
    arch = "" if model.name.startswith("Qwen3") else "; v0.16 converts Qwen3-MoE only: costed as its graph would run it"
    busiest = cluster.devices[info["busiest"]]
    rows = common.Breakdown(info["busiest"], model.n_layers, tuple(common.cost(busiest, info["rows"])))
    traffic = dllama_traffic(model, cluster.n, workload.new_tokens, workload.activation_bits, workload.output_head)
    result = costed(DLLAMA_SCHEME, PAPER_DLLAMA, workload.phase, f.compute + f.link + f.data,
                    tuple(d.name for d in cluster.devices), f"TP inside every expert, F32 router on every node{arch}",
                    compute_s=f.compute, comm_link_latency_s=f.link, comm_bytes_s=f.data,
                    peak_memory_bytes=tuple(map(float, need)),
                    memory_budget_bytes=tuple(float(d.memory_bytes) for d in cluster.devices),
                    detail=replace(info["moe_breakdown"], traffic=traffic), operators=rows)
    return result.carve(f.fixed, f.serial)


def _layerwise_mp():
    """The whole model on one device, layer by layer (`baselines.evaluate_layerwise_mp`; imported late)."""
    from workbench.schemes.baselines import evaluate_layerwise_mp

    return evaluate_layerwise_mp


# On one device a MoE partition splits nothing: it runs the whole model as one device does (every layer, the
# operator table's rows), so its time is that (`layerwise_mp`'s, what distributed-llama's MoE rows on one node
# gave before `local` costed experts; kept so those rows do not move).
one_device_is_whole = one_device_takes(_layerwise_mp, "one device: nothing to split, the whole model's time")


@one_device_is_whole
def evaluate_dllama_moe_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.16: every node streams its slices of attention and of the active experts, the F32 router."""
    return evaluate_dllama_moe(model, cluster, workload)


@register(DLLAMA_SCHEME, PAPER_DLLAMA, origin=engines.origin(DLLAMA_SCHEME), family="distributed-llama", partition="tp",
          moe=True, engine="distributed-llama", options=engines.DllamaOptions)
def evaluate_dllama_allgather_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.12-v0.16, one scheme whatever the model (v0.16's one graph): a dense model's layers
    split by heads and FFN columns (`engines.evaluate_dllama_allgather_tp`, one device: `local`'s time), a mixture
    of experts' TP inside every expert (`evaluate_dllama_moe_tp`, one device: the whole model's time)."""
    if model.is_moe:
        return evaluate_dllama_moe_tp(model, cluster, workload)
    return engines.evaluate_dllama_allgather_tp(model, cluster, workload)


# ---- (b) whole layers per device, an expert cache, misses from storage -----------------------------------------
def resident_layer_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes of one (mean) layer a pipeline device keeps resident whatever its cache: attention, norms, shared
    experts, dense FFNs, and the router in f32 (`common.ROUTER_BITS`); every routed expert is cacheable."""
    routed = model.moe_layers * model.n_experts * model.expert_params() / model.n_layers
    router = model.moe_layers * model.router_params() / model.n_layers
    rest = model.block_params() - routed - router
    return float(common.weight_bytes(rest, workload.weight_bits) + router * common.ROUTER_BITS / 8)


def master_bytes(model: TransformerConfig, workload: Workload) -> float:
    """Bytes only the master holds: embeddings, final norm and (untied) output head."""
    return float(common.weight_bytes(model.embedding_params() + model.head_params(), workload.weight_bits))


def moe_layers_in(model: TransformerConfig, start: int, end: int) -> int:
    """MoE layers among layers [start, end) (the dense ones come first)."""
    return max(0, end - max(start, model.n_dense_layers))


def pipeline_split(model: TransformerConfig, cluster: Cluster, workload: Workload) -> tuple[int, ...]:
    """Layers per device in ring order, in proportion to memory less the master's part (llama.cpp's split), no
    device above what its resident part and KV hold with every routed expert on storage."""
    per_layer = resident_layer_bytes(model, workload) + model.kv_cache_bytes_per_block(workload.attended,
                                                                                        workload.cache_bits)
    room = [d.memory_bytes - (master_bytes(model, workload) if i == 0 else 0.0) for i, d in enumerate(cluster.devices)]
    caps = [max(0, math.floor(r / per_layer)) for r in room]
    if sum(caps) < model.n_layers:
        raise InfeasibleError(f"infeasible: memory: the devices hold the resident part of {sum(caps)} of the "
                              f"{model.n_layers} layers of {model.name} ({per_layer / 2**20:.0f} MiB each with its KV, "
                              f"every routed expert on storage)")
    return apportion_capped(model.n_layers, [max(r, 0.0) for r in room], caps)


def default_cache(model: TransformerConfig, device: DeviceSpec, workload: Workload, layers: int, moe_layers: int,
                  fixed_bytes: float) -> int:
    """Experts per MoE layer a device's free memory caches (at most E; 0 when nothing is free)."""
    if moe_layers == 0:
        return model.n_experts
    kv = model.kv_cache_bytes_per_block(workload.attended, workload.cache_bits)
    free = device.memory_bytes - fixed_bytes - layers * (resident_layer_bytes(model, workload) + kv)
    return int(min(model.n_experts, max(0, math.floor(free / (moe_layers * expert_bytes(model, workload))))))


def misses_per_layer(model: TransformerConfig, workload: Workload, cache: int, reads: str, policy: str) -> float:
    """Expected experts of one MoE layer read from storage in one step: routed reads miss k (1 - h) per decode
    token and the non-resident part of a prompt's union; a whole-tensor prefetch reads all E - C."""
    require_choice("reads", reads, READS)
    require_choice("cache policy", policy, CACHE_POLICIES)
    n, k = model.n_experts, model.n_active_experts
    if reads == "prefetch":
        return float(n - cache)
    if workload.new_tokens == 1:
        return k * (1.0 - hit_rate(workload.routing, n, k, cache, policy))
    return float(expected_misses(workload.routing, n, k, cache, workload.new_tokens, policy))


def read_rate(device: DeviceSpec) -> float:
    """Bytes/s a device reads non-resident experts at: its offload read rate, else its storage read rate."""
    rate = device.offload_read_bytes_per_s or device.storage_read_bytes_per_s
    if rate is None:
        raise WorkbenchError(f"device {device.name!r} has no storage_read_mb_per_s (nor offload_read_mb_per_s): "
                             f"experts outside its cache are read from storage (a rate > 0 MB/s)")
    return float(rate)


def stage_cost(model: TransformerConfig, device: DeviceSpec, workload: Workload, layers: int, moe_layers: int,
               cache: int, reads: str, policy: str) -> dict[str, float]:
    """One device's layers in one step: row groups, fixed time, expert misses (stall) and memory."""
    table = common.layer_operators(model, workload)
    sec = row_seconds(device, table)
    layer_s = sum(sec.values()) + common.layer_overhead(device)
    streamed = sum(float(r.bytes) for r in table if r.name in EXPERT_ROWS)
    missed = misses_per_layer(model, workload, cache, reads, policy) if moe_layers else 0.0
    read_s = missed * expert_bytes(model, workload) / read_rate(device) if missed > 0 else 0.0
    stall = read_s if reads == "routed" else max(0.0, read_s - layer_s)
    kv = model.kv_cache_bytes_per_block(workload.attended, workload.cache_bits)
    groups = group_seconds(sec)
    return {**{key: layers * v for key, v in groups.items()}, "compute_s": layers * layer_s,
            "fixed_s": layers * common.fixed_layer_time(device, common.kernels_per_layer(model)),
            "misses_s": moe_layers * stall, "misses": moe_layers * missed, "expert_bytes": layers * streamed,
            "memory_bytes": layers * (resident_layer_bytes(model, workload) + kv)
            + moe_layers * cache * expert_bytes(model, workload)}


def per_device(values) -> str:
    """'12 / 12 / 12' for up to 8 devices, else 'min..max (N devices)'."""
    if len(values) <= 8:
        return " / ".join(map(str, values))
    return f"{min(values)}..{max(values)} ({len(values)} devices)"


def pipeline_stages(model: TransformerConfig, cluster: Cluster, workload: Workload, cache_experts: int | None,
                    reads: str, policy: str) -> list[dict[str, float]]:
    """Every device's `stage_cost` for llama.cpp's split and its cache (given, else what its memory allows)."""
    split = pipeline_split(model, cluster, workload)
    edges = np.cumsum((0,) + split)
    stages = []
    for i, (device, layers) in enumerate(zip(cluster.devices, split)):
        moe_layers = moe_layers_in(model, int(edges[i]), int(edges[i + 1]))
        fixed = master_bytes(model, workload) if i == 0 else 0.0
        cache = cache_experts if cache_experts is not None else \
            default_cache(model, device, workload, layers, moe_layers, fixed)
        stage = stage_cost(model, device, workload, layers, moe_layers, cache, reads, policy)
        stage.update(layers=layers, moe_layers=moe_layers, cache=cache, memory_bytes=stage["memory_bytes"] + fixed)
        stages.append(stage)
    return stages


def evaluate_layer_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload,
                            cache_experts: int | None = None, reads: str = "routed",
                            policy: str = "pinned") -> SchemeResult:
    """One pass round the ring: every device's layers and expert misses, the hand-offs, the master's head."""
    require_moe(model, PIPELINE_SCHEME)
    if cache_experts is not None:
        check_cache(cache_experts, model.n_experts)
    stages = pipeline_stages(model, cluster, workload, cache_experts, reads, policy)
    hops = sum(1 for i, s in enumerate(stages) if i == 0 or s["layers"] > 0)
    hops = hops if hops > 1 else 0
    link_s, bytes_s = handoff_time(cluster, moe_traffic.pipeline_handoff_bytes(model.d_model, workload.new_tokens,
                                                                               workload.activation_bits))
    master = cluster.serial_device(cluster.devices[0])
    head = common.lm_head_time(model, master, workload) if workload.output_head else 0.0
    total = {key: sum(s[key] for s in stages) for key in ("attention_s", "router_s", "experts_s", "compute_s",
                                                          "fixed_s", "misses_s", "misses", "expert_bytes")}
    need = tuple(float(s["memory_bytes"]) for s in stages)
    comm = hops * (link_s + bytes_s)
    result = costed(
        PIPELINE_SCHEME, PAPER_PIPELINE, workload.phase, total["compute_s"] + head + total["misses_s"] + comm,
        tuple(d.name for d in cluster.devices),
        f"layers {per_device([s['layers'] for s in stages])}, expert cache "
        f"{per_device([s['cache'] for s in stages])} of {model.n_experts}, {reads} reads",
        compute_s=total["compute_s"] + head, comm_link_latency_s=hops * link_s, comm_bytes_s=hops * bytes_s,
        io_stall_s=total["misses_s"], peak_memory_bytes=need,
        memory_budget_bytes=tuple(float(d.memory_bytes) for d in cluster.devices),
        detail=moe_breakdown(total["attention_s"], total["router_s"], total["experts_s"], total["misses_s"], comm,
                             stages=tuple(stages), misses_per_step=float(total["misses"]),
                             expert_bytes_per_step=float(total["expert_bytes"])))
    busy = {side: sum(s["layers"] * common.layer_time(model, d, workload, bound=side)
                      for s, d in zip(stages, cluster.devices)) for side in common.BOUNDS}
    return result.carve(fixed_s=total["fixed_s"], serial_s=head).split_streaming(
        common.streaming_share(busy["memory"], busy["compute"]))


@register(PIPELINE_SCHEME, PAPER_PIPELINE, no_operators=common.PIPELINE_ROWS,
          origin="llama.cpp RPC / prima.cpp: whole MoE layers per device",
          family="moe", partition="pipeline", moe=True, dense=False, engine="llama.cpp",
          draft_placements=("root", "own", "ring"))
def evaluate_moe_layer_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """llama.cpp RPC / prima.cpp: whole layers per device, an expert cache in free memory (or the workload's
    `expert_cache`: experts per layer, policy, reads), misses read from storage."""
    cache = workload.expert_cache
    if cache is None:
        return evaluate_layer_pipeline(model, cluster, workload)
    return evaluate_layer_pipeline(model, cluster, workload, cache.experts, cache.reads, cache.policy)


# ---- (c) expert parallelism with all-to-all (a what-if) ------------------------------------------------------
def expert_groups(n_experts: int, n: int) -> list[np.ndarray]:
    """Each device's experts of a layer: contiguous, as even as the counts allow (the first get one more)."""
    edges = np.cumsum((0,) + even_split(n_experts, n))
    return [np.arange(a, b) for a, b in zip(edges[:-1], edges[1:])]


def expected_max_load(pi: np.ndarray, groups: list[np.ndarray], k: int, tokens: int) -> np.ndarray:
    """Each device's load bound (token-expert pairs) whose maximum is the expected slowest load: T mu_j +
    sqrt(T) s_j sqrt(2 ln N), capped at T min(k, E_j), never below T mu_j (the module docstring's formula)."""
    n_experts, n = len(pi), len(groups)
    correction = (n_experts - k) / (n_experts - 1) if n_experts > 1 else 0.0
    mean = np.array([tokens * pi[g].sum() for g in groups])
    sd = np.array([math.sqrt(tokens * float(np.sum(pi[g] * (1 - pi[g]))) * correction) for g in groups])
    cap = np.array([tokens * min(k, len(g)) for g in groups], dtype=float)
    return np.maximum(np.minimum(mean + sd * math.sqrt(2 * math.log(n)), cap), mean)


def touched_experts(pi: np.ndarray, groups: list[np.ndarray], tokens: int) -> np.ndarray:
    """Expected distinct experts of each device that `tokens` independent tokens touch."""
    return np.array([float(np.sum(1.0 - (1.0 - pi[g]) ** tokens)) for g in groups])


def ep_expert_rows(model: TransformerConfig, workload: Workload, pairs: float, touched: float) -> list[common.Operator]:
    """A device's expert rows for one MoE layer: `pairs` token-expert products, streaming `touched` experts."""
    dtype = common.operand_dtype(workload.weight_bits, workload.activation_bits)
    kind = common.kernel_kind(workload.new_tokens)
    wb = expert_bytes(model, workload) / 3  # one of the expert's three matrices
    rows = max(pairs / max(touched, 1e-300), 1.0)
    return [common.Operator("ffn1", pairs * common.ffn_up_flops(model, model.d_ff, 1), 2 * touched * wb, 1, dtype,
                            kind, rows),
            common.Operator("ffn2", pairs * common.ffn_down_flops(model, model.d_ff, 1), touched * wb, 1, dtype,
                            kind, rows)]


def dense_ffn_rows(model: TransformerConfig, workload: Workload, tokens: int) -> list[common.Operator]:
    """A MoE model's dense first layers' FFN (width d_dense_ff) on `tokens` tokens, resident on the device."""
    dtype = common.operand_dtype(workload.weight_bits, workload.activation_bits)
    kind, f = common.kernel_kind(workload.new_tokens), model.d_dense_ff
    w = float(common.weight_bytes(model.d_model * f, workload.weight_bits))
    return [common.Operator("ffn1", common.ffn_up_flops(model, f, tokens), 2 * w, 1, dtype, kind, tokens),
            common.Operator("ffn2", common.ffn_down_flops(model, f, tokens), w, 1, dtype, kind, tokens)]


def all_to_all_time(cluster: Cluster, busiest_bytes: float) -> tuple[float, float]:
    """(per-message, bytes) seconds of an all-to-all whose busiest endpoint moves `busiest_bytes`: the mesh
    all-gather row (one traversal, N-1 messages per endpoint) with that endpoint's bytes."""
    n = cluster.n
    if n == 1 or busiest_bytes <= 0:
        return 0.0, 0.0
    a, b = on_topology(cluster.topology, "mesh", "all_gather", busiest_bytes * n / (n - 1), breakdown=True)
    return float(a), float(b)


def ep_loads(model: TransformerConfig, workload: Workload, n: int, attention: str,
             pi: np.ndarray) -> dict[str, np.ndarray | float]:
    """Each device's expected-maximum pairs (routed and its shared experts' share) and the experts they touch, the
    mean pairs, and the busiest owner's remote pairs (those whose expert lives on another device)."""
    t, k = workload.new_tokens, model.n_active_experts
    owned = math.ceil(t / n) if attention == "replicated" else t
    groups = expert_groups(model.n_experts, n)
    shared = model.n_shared_experts * (owned if attention == "replicated" else t / n)
    mean = np.array([t * pi[g].sum() for g in groups])
    routed = expected_max_load(pi, groups, k, t)
    sizes = np.array([len(g) for g in groups], dtype=float)  # a heavier load touches more of the device's experts
    touched = np.minimum(touched_experts(pi, groups, t) * routed / np.maximum(mean, 1e-300), sizes)
    remote = owned * (k - float(np.min(mean)) / t)
    return {"pairs": routed + shared, "touched": touched + model.n_shared_experts, "owned": owned,
            "mean": float(t * k / n + shared), "exchanged": max(remote, float(np.max(routed)))}


def ep_comm(model: TransformerConfig, cluster: Cluster, workload: Workload, attention: str,
            exchanged: float) -> dict[str, tuple[float, float]]:
    """(per-message, bytes) seconds of a layer's syncs: replicated attention - a dispatch and a combine all-to-all
    of the busiest endpoint's `exchanged` pairs of d activations; TP attention - a mesh all-reduce of the T x d
    partials after attention and one as the combine (dispatch local)."""
    act = workload.activation_bits / 8
    if attention == "replicated":
        swap = all_to_all_time(cluster, exchanged * model.d_model * act)
        return {"attention": (0.0, 0.0), "dispatch": swap, "combine": swap}
    partials = workload.new_tokens * model.d_model * act
    reduce = tuple(float(x) for x in on_topology(cluster.topology, "mesh", "all_reduce", partials, breakdown=True)) \
        if cluster.n > 1 else (0.0, 0.0)
    return {"attention": reduce, "dispatch": (0.0, 0.0), "combine": reduce}


def ep_layer(model: TransformerConfig, cluster: Cluster, workload: Workload, attention: str,
             pi: np.ndarray) -> dict[str, float]:
    """Seconds of one MoE layer and of one dense layer under expert parallelism: the slowest device's attention
    and router, the syncs, the slowest device's experts (or its dense FFN)."""
    n = cluster.n
    load = ep_loads(model, workload, n, attention, pi)
    heads = model.n_heads if attention == "replicated" else model.n_heads / n
    table = {r.name: r for r in common.layer_operators(model, workload, heads, model.d_ff, load["owned"])}
    sparse = model.moe_layers / model.n_layers
    router = replace(table["router"], flops=table["router"].flops / sparse, bytes=table["router"].bytes / sparse)
    att, rt, exp, dense = [], [], [], []
    for j, device in enumerate(cluster.devices):
        sec = row_seconds(device, [table[name] for name in ATTENTION_ROWS] + [router])
        att.append(sum(sec[name] for name in ATTENTION_ROWS) + common.layer_overhead(device))
        rt.append(sec["router"])
        exp.append(sum(row_seconds(device, ep_expert_rows(model, workload, load["pairs"][j], load["touched"][j]))
                       .values()))
        dense.append(sum(row_seconds(device, dense_ffn_rows(model, workload, load["owned"])).values()))
    comm = ep_comm(model, cluster, workload, attention, load["exchanged"])
    slow = int(np.argmax(np.array(att) + np.array(rt) + np.array(exp)))
    return {"moe_s": max(a + r for a, r in zip(att, rt)) + max(exp), "dense_s": max(a + d for a, d in zip(att, dense)),
            "link_s": sum(c[0] for c in comm.values()), "data_s": sum(c[1] for c in comm.values()),
            "dense_link_s": comm["attention"][0], "dense_data_s": comm["attention"][1],
            "attention_s": att[slow], "router_s": rt[slow], "experts_s": exp[slow],
            "slowest_pairs": float(np.max(load["pairs"])), "mean_pairs": load["mean"]}


def ep_mean_layer(model: TransformerConfig, cluster: Cluster, workload: Workload, attention: str,
                  rows: np.ndarray) -> dict[str, float]:
    """`ep_layer` averaged over the routing model's per-layer popularity rows (one row: that layer)."""
    layers = [ep_layer(model, cluster, workload, attention, pi) for pi in rows]
    return {key: float(np.mean([layer[key] for layer in layers])) for key in layers[0]}


def ep_memory_bytes(model: TransformerConfig, cluster: Cluster, workload: Workload, attention: str) -> np.ndarray:
    """Per device: attention (whole or 1/N) and its KV, the f32 router, shared and dense FFNs, its experts of every
    MoE layer; the master also the embeddings and head."""
    n, wb = cluster.n, workload.weight_bits
    share = 1.0 if attention == "replicated" else 1.0 / n
    attn = model.n_layers * (model.attention_params() * share + model.norm_params())
    ffn = model.n_dense_layers * model.dense_ffn_params(model.d_dense_ff) + \
        model.moe_layers * model.n_shared_experts * model.expert_params()
    router = model.moe_layers * model.router_params() * common.ROUTER_BITS / 8
    kv = model.kv_cache_bytes(workload.attended, workload.cache_bits) * share
    base = float(common.weight_bytes(attn + ffn, wb)) + router + kv
    per = np.array([base + model.moe_layers * len(g) * expert_bytes(model, workload)
                    for g in expert_groups(model.n_experts, n)])
    per[0] += master_bytes(model, workload)
    return per


def evaluate_expert_parallel(model: TransformerConfig, cluster: Cluster, workload: Workload,
                             attention: str = "replicated", frequencies=None) -> SchemeResult:
    """Expert parallelism: every MoE layer's experts split over the devices, all-to-all dispatch and combine, the
    slowest device's expected load (the mean over the routing model's per-layer popularity rows); `frequencies`
    (per expert, summing to k) overrides the routing model's."""
    require_moe(model, EP_SCHEME)
    require_choice("attention", attention, EP_ATTENTION)
    if cluster.n > model.n_experts:
        raise WorkbenchError(f"n_devices must be at most n_experts ({model.n_experts}) of {model.name} for "
                             f"{EP_SCHEME}, got {cluster.n}")
    rows = popularity(workload.routing, model.n_experts, model.n_active_experts) if frequencies is None else \
        check_frequencies(frequencies, model)[None, :]
    layer = ep_mean_layer(model, cluster, workload, attention, np.atleast_2d(rows))
    L, moe_l, dense_l = model.n_layers, model.moe_layers, model.n_dense_layers
    master = cluster.serial_device(cluster.devices[0])
    head = common.lm_head_time(model, master, workload) if workload.output_head else 0.0
    compute = moe_l * layer["moe_s"] + dense_l * layer["dense_s"] + head
    link = moe_l * layer["link_s"] + dense_l * layer["dense_link_s"]
    data = moe_l * layer["data_s"] + dense_l * layer["dense_data_s"]
    need = ep_memory_bytes(model, cluster, workload, attention)
    fixed = L * max(common.fixed_layer_time(d, common.kernels_per_layer(model)) for d in cluster.devices)
    result = costed(
        EP_SCHEME, PAPER_EP, workload.phase, compute + link + data, tuple(d.name for d in cluster.devices),
        f"what-if: experts split over {cluster.n}, attention {attention}, slowest {layer['slowest_pairs']:.3g} "
        f"expert-token pairs per layer (mean {layer['mean_pairs']:.3g})",
        compute_s=compute, comm_link_latency_s=link, comm_bytes_s=data, peak_memory_bytes=tuple(map(float, need)),
        memory_budget_bytes=tuple(float(d.memory_bytes) for d in cluster.devices),
        detail=moe_breakdown(L * layer["attention_s"], moe_l * layer["router_s"], moe_l * layer["experts_s"], 0.0,
                             link + data, slowest_pairs=float(layer["slowest_pairs"]),
                             mean_pairs=float(layer["mean_pairs"])))
    return result.carve(fixed_s=min(fixed, compute - head), serial_s=head)


def check_frequencies(frequencies, model: TransformerConfig) -> np.ndarray:
    """`frequencies` as E probabilities in [0, 1] summing to k (each token picks k experts), else one line."""
    pi = np.asarray(frequencies, dtype=float)
    k = model.n_active_experts
    if pi.shape != (model.n_experts,) or np.any(~np.isfinite(pi)) or np.any(pi < 0) or np.any(pi > 1) \
            or not math.isclose(float(pi.sum()), k, rel_tol=1e-6):
        raise WorkbenchError(f"frequencies must be {model.n_experts} probabilities in [0, 1] summing to "
                             f"n_active_experts ({k}), got shape {pi.shape}, sum {float(np.sum(pi)):.4g}")
    return pi


@register(EP_SCHEME, PAPER_EP, no_operators=common.ROUTED_ROWS,
          origin="expert parallelism, a what-if no edge engine runs", family="moe",
          partition="expert", moe=True, dense=False)
@one_device_is_whole
def evaluate_moe_expert_parallel(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """What-if: experts split over the devices, all-to-all per MoE layer, attention replicated on the token's owner."""
    return evaluate_expert_parallel(model, cluster, workload)
