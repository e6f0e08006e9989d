"""The tensor parallelism today's edge engines run: distributed-llama's two sync structures, on the core.

Both split every layer evenly over n nodes: query/KV heads (Q, K, V row slices, wo column slices) and FFN
columns (w1/w3 row slices, w2 column slices), so each node's attention output and FFN output is a full-d
*partial* sum that must be added across nodes twice per layer. Sources: b4rtaz/distributed-llama, tag by
tag (`shared/notes/fixed-costs-references.md` Sec. 4):

* ``dllama_allgather_tp`` - v0.12-v0.16 (the nn rewrite; v0.11 the same pattern), `src/llm.cpp`
  (`buildLlmNet`) and `src/nn/nn-network.cpp` (`syncWithRoot`, `syncNodeSlices`,
  `NnNetworkNodeSynchronizer::sync`). Per forward: the root writes an 8-byte control packet (position,
  batch size) to every worker (`RootLlmInference::forward`, `writeAll`), embeds the tokens and sends x
  (F32, d per row) to every worker (`SYNC_WITH_ROOT`). Per layer, after wo and after w2, every node
  writes its full-d partial in the sync format (Q80 when the buffer type is q80) to all n-1 peers and sums
  the n partials locally (`SYNC_NODE_SLICES` + `OP_MERGE_ADD`): the `mesh` all-reduce. Norms run on every
  node. The classifier is split by vocabulary rows (`wclsSlice = sliceRowMatmul(..., vocabSize)`); each
  worker sends its F32 logits slice to the root (`SYNC_NODE_SLICES_EXCEPT_ROOT`: a gather to the root,
  the same messages and bytes as the table's star `reduce` of one slice). Each sync runs once per batch
  row (`for batchIndex < batchSize`), so a prompt of S rows sends S messages per peer per sync.
* ``dllama_root_tp`` - v0.8-v0.10, `src/llama2-tasks.cpp` (`buildLlamaArch`) and `src/tasks.cpp`
  (`sendPos`, `syncUnitBuffer`, `syncSliceOfSlicedBuffer`). Per token the root sends the position
  (`pos_t`, 2 bytes) to every worker; per layer, k = 2 times: the root norms x and sends x_norm to every
  worker (star broadcast), every node computes its slice, every worker sends its full-d partial back (star
  reduce: the root receives n-1 messages), and the root dequantises and adds the n partials. The root
  alone embeds, norms, merges, runs the whole classifier (`llamaFinalize`) and samples. Prompts are
  evaluated one token per forward (`Inference::infer(token, pos)`), so prefill is S single-token steps.

* ``dllama_root6_tp`` - v0.5.0-v0.7.0 (v0.7.1 already has v0.8's four syncs), `src/llama2-tasks.cpp@v0.5.0`
  (`buildLlama2Arch`, worker syncs at lines 287-302) and `src/tasks.cpp@v0.5.0` (`syncUnitBuffer` :42,
  `syncSliceOfSlicedBuffer` :65, `syncMissingSlicesOfSlicedBuffer` :90, `sendPos` :163). Per layer six
  transfers: the root broadcasts x_norm (d values); each node runs its heads' attention on its own KV slice
  (`llamaMultiheadAtt` :54) and its wo rows, and sends its full-d partial to the root (`llamaSyncAtt`, the
  `TB_SLICED_XBV` buffer of d x n values, `src/transformer.cpp@v0.5.0`:296); the root merges and broadcasts
  the FFN's x_norm (d); each node sends its d_ff/n slice of the hidden (`llamaSyncFfnA`); the root sends every
  worker the n-1 slices it lacks (`llamaSyncFfnB`: n-1 messages of d_ff/n); each node computes d/n rows of w2
  and sends them (`llamaSyncFfn2`). With w = wire bytes per value (`wire_bytes_per_value`), per token and
  layer a worker sends (d + d_ff/n + d/n) w and receives (2 d + (n-1) d_ff/n) w; the root receives and sends
  n-1 times that, in (n-1)(n+4) messages; plus the 2-byte position per token.
* ``dllama_root8_tp`` - v0.1.0-v0.4.0, `src/llama2-tasks.cpp@v0.4.0` (`buildLlama2Arch`, worker syncs at
  lines 332-348; v0.1.0 `src/transformer-tasks.cpp`:489-511 the same eight) and `src/tasks.cpp@v0.4.0` (the
  same three sync functions at :42, :65, :90). Per layer eight transfers: x_norm broadcast (d); each node's
  slice of q, k and v to the root (`llamaSyncQkv`, three messages of d/n, kv/n, kv/n values, kv = n_kv_heads
  x d_head; `src/transformer.cpp@v0.4.0`:213-218); the root alone runs every head's attention over the whole
  KV cache (`llamaMultiheadAttJoin` :87) and broadcasts its output (d); each node's d/n rows of wo back to the
  root; then the FFN as in v0.5 (x_norm, hidden slices up, the n-1 missing slices down, d/n rows of w2 up).
  Per token and layer a worker sends ((3 d + 2 kv + d_ff) / n) w and receives (3 d + (n-1) d_ff/n) w; the
  root n-1 times that, in (n-1)(n+8) messages; plus the 2-byte position.

Both older structures send one token per forward and hold the whole classifier on the root, as v0.8.

Costs, all on the core: per-device compute from `workbench.schemes.common` (the four weight GEMMs, the
local heads' attention, the connective blocks, the per-layer overhead, the output head), communication
from `workbench.machine.network.on_topology` (the `mesh` and `star` rows of the collective table, with the link's
per-message endpoint time). Syncs are blocking, so nothing overlaps. The merge-add of n partials reads the
n-1 partials beyond the one the connective block's residual add already reads (a memory-bound pass,
`common.stream_time`). Root-only work is `serial_s` (all-gather TP: embedding lookup of the F32 table and
one pass over the F32 logits to sample; root TP: also every norm, every merge and the whole head);
launches and per-layer overheads that every node pays are `fixed_s` (`SchemeResult.carve`).

The all-gather TP's head is costed as the workbench's one-row GEMV split by vocabulary
(`common.output_head_time`); v0.12+ computes and gathers the logits of every batch row (the gather here
carries all S rows, as the engine sends them; on a memory-bound node S rows stream the same weights).

What is not modelled: distributed-llama v0.12+ evaluates a prompt in chunks of `--nbatches` rows (default
32, `src/app.cpp`), re-streaming the weights per chunk; here the prompt is one forward of S rows (a lower
bound on its prefill). Its ops per layer (~25 graph nodes) are charged as the workbench's
`KERNELS_PER_LAYER` launches. Its socket layer splits messages into 4 KiB chunks and spreads sockets over
threads; the table's per-message counts are used as they are. In v0.1-v0.4 the root's slice of q, k, v is
not quantised before the root's attention (`quantizeSlicedBuffer(..., false, ...)`); the cost model takes
every slice at the wire width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.core.fields import FieldSpec, TomlKey, check_declared, declared
from workbench.machine.network import Step, Transfer, collective_cost, on_topology, token_bucket_time
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import (
    Cluster,
    SchemeResult,
    Workload,
    costed,
    load_all,
    register,
    with_streaming_split,
)
from workbench.schemes.partitions import one_device_is_local

PAPER = "distributed_llama"
ALLGATHER = "dllama_allgather_tp"  # v0.11-v0.16's sync structure
# the engine's tags each structure covers (quoted: b4rtaz/distributed-llama tags, src/llama2-tasks.cpp at each)
VERSIONS = {"dllama_root8_tp": ("0.1", "0.4"), "dllama_root6_tp": ("0.5", "0.7"), "dllama_root_tp": ("0.8", "0.10"),
            "dllama_allgather_tp": ("0.11", "0.16")}
FIRST_ALLGATHER_MINOR = 11  # v0.11 replaced the star through the root by the mesh all-gather
# the releases before it: star through the root, one token a forward (derived from VERSIONS)
ROOT_SCHEMES = tuple(s for s, (first, _) in VERSIONS.items() if int(first.split(".")[1]) < FIRST_ALLGATHER_MINOR)


def origin(scheme: str) -> str:
    """The catalogue's origin of one of the engine's sync structures: the releases it covers (`VERSIONS`)."""
    first, last = VERSIONS[scheme]
    return f"distributed-llama v{first}-v{last} (src/llama2-tasks.cpp at each tag)"
# Q80 = BlockQ80 / NnBlockQ80: an fp16 scale + 32 int8 codes per 32 values = 34 B / 32 values
# (quoted: distributed-llama src/quants.hpp, v0.16.4 src/nn/nn-quants.hpp).
Q80_BYTES_PER_VALUE = 34 / 32
Q80_MAX_ACTIVATION_BITS = 8.5  # activations this narrow travel as Q80 (the q80 buffer type's 8.5 bits/value)
F32_BYTES = 4  # X, LG pipes, the token embedding table and the logits (quoted: v0.16.4 src/llm.cpp, F_32)
CONTROL_PACKET_BYTES = 8  # LlmControlPacket {NnUint position, batchSize} (quoted: v0.16.4 src/app.hpp)
POSITION_BYTES = 2  # pos_t = unsigned short (quoted: v0.8.0 src/transformer.hpp)
ROOT_SYNCS_V08 = 2  # v0.8-v0.10: reduce-to-root + broadcast after attention and after the FFN (llama2-tasks.cpp)
WORKER_KERNELS_ROOT_TP = common.KERNELS_PER_LAYER - 2  # root TP workers skip both connective blocks


# ---- options a deployment sets ([schemes.dllama] in the TOML, workbench.schemes.options) ----------------
def scheme_for_version(version: str) -> str:
    """The sync structure a distributed-llama release runs: "0.7" / "0.7.0" -> dllama_root6_tp, "0.7.1" (already
    v0.8's four syncs, src/llama2-tasks.cpp@v0.7.1) -> dllama_root_tp, "0.12.3" -> dllama_allgather_tp."""
    parts = str(version).removeprefix("v").split(".")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts) or parts[0] != "0":
        raise WorkbenchError(f"version must be a distributed-llama release 0.1 ... 0.16 (e.g. \"0.7\" or \"0.10.2\"), "
                             f"got {version!r}")
    minor, patch = int(parts[1]), int(parts[2]) if len(parts) == 3 else 0
    if not 1 <= minor <= 16:
        raise WorkbenchError(f"version must be a distributed-llama release 0.1 ... 0.16, got {version!r}")
    if minor == 7 and patch >= 1:
        return "dllama_root_tp"
    for scheme, (first, last) in VERSIONS.items():
        if int(first.split(".")[1]) <= minor <= int(last.split(".")[1]):
            return scheme
    raise AssertionError(minor)  # VERSIONS covers 0.1-0.16


@dataclass(frozen=True)
class DllamaOptions:
    """distributed-llama's options in a deployment ([schemes.dllama]): the release it runs (the arena then
    shows that release's one sync structure) and v0.8-v0.10's root syncs per layer."""

    SECTION: ClassVar[str] = "dllama"  # its [schemes.dllama] table

    version: str = declared(FieldSpec("distributed-llama release the cluster runs (0.1 ... 0.16; the arena shows "
                                      "only its sync structure); empty: all four", kind="text",
                                      toml=(TomlKey("version"),)), default="")
    syncs_per_layer: int = declared(FieldSpec("dllama_root_tp's reduce-to-root + broadcast syncs per layer "
                                              "(v0.8-v0.10 run 2)", "syncs", 1, 16, kind="integer",
                                              toml=(TomlKey("syncs_per_layer"),)), default=2)

    def __post_init__(self) -> None:
        check_declared(self, "schemes.dllama.")
        if self.version:
            scheme_for_version(self.version)

    def check(self, n_devices: int) -> None:
        """Nothing to check against a cluster: every release splits the devices the model divides (`check_split`,
        per scheme)."""

    def schemes(self) -> tuple[str, ...]:
        """The engine's schemes the arena shows: the version's one, or all four."""
        return (scheme_for_version(self.version),) if self.version else load_all().filter(options=DllamaOptions)

    def evaluator(self, scheme: str):
        """`scheme`'s evaluator with these options (registered form: streaming split, one device = local), None
        where the registered one already is it."""
        if scheme != "dllama_root_tp" or self.syncs_per_layer == ROOT_SYNCS_V08:
            return None
        k = self.syncs_per_layer

        def evaluate(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
            return evaluate_root_tp(model, cluster, workload, k)
        return with_streaming_split(one_device_is_local(evaluate))


# ---- the wire -----------------------------------------------------------------------------------------
def wire_bytes_per_value(activation_bits: float) -> float:
    """Bytes per value of a partial on the wire: Q80 (1.0625) for activations of <= 8.5 bits, else the bits."""
    bits = common.require_bits("activation_bits", activation_bits)
    return Q80_BYTES_PER_VALUE if bits <= Q80_MAX_ACTIVATION_BITS else bits / 8


@dataclass(frozen=True)
class Sync:
    """One collective of a forward: `repeats` times (one per batch row) a buffer of `message_bytes` per
    device under (algorithm, collective) of the table; `per_layer` ones run once in every layer."""

    name: str
    algorithm: str
    collective: str
    message_bytes: float
    repeats: int = 1
    per_layer: bool = False


def check_split(model: TransformerConfig, n: int, scheme: str = "distributed-llama") -> int:
    """Return n if the engine can split `model` evenly over n nodes (Llama family; n divides the KV heads,
    the FFN width and the vocabulary, as its slicers assert), else raise naming n_devices."""
    require_int("n_devices", n, low=1)
    if model.family != "llama":
        raise WorkbenchError(f"{scheme} runs Llama-family decoders (RMSNorm, SwiGLU); got family {model.family!r}")
    for name, size in (("n_kv_heads", model.n_kv_heads), ("n_heads", model.n_heads), ("d_ff", model.d_ff),
                       ("vocab_size", model.vocab_size)):
        if size % n:
            allowed = [k for k in range(1, model.n_kv_heads + 1) if not (model.n_kv_heads % k or model.d_ff % k
                                                                      or model.vocab_size % k)]
            raise WorkbenchError(f"n_devices must divide {name} ({size}) of {model.name!r} for {scheme}'s even "
                                 f"split; allowed: {', '.join(map(str, allowed))}; got {n}")
    return n


def forward_syncs(scheme: str, model: TransformerConfig, n: int, rows: int, activation_bits: float,
                  output_head: bool = True, syncs_per_layer: int = ROOT_SYNCS_V08) -> tuple[Sync, ...]:
    """Every collective of one forward of `rows` new tokens over n nodes (the kernels send exactly these)."""
    require_choice("scheme", scheme, tuple(VERSIONS))
    require_int("rows", rows, low=1)
    require_int("syncs_per_layer", syncs_per_layer, low=1)
    if n == 1:
        return ()
    partial = model.d_model * wire_bytes_per_value(activation_bits)
    if scheme == "dllama_allgather_tp":
        out = [Sync("control", "star", "broadcast", CONTROL_PACKET_BYTES),
               Sync("x", "star", "broadcast", model.d_model * F32_BYTES, rows),
               Sync("attn_partials", "mesh", "all_reduce", partial, rows, True),
               Sync("ffn_partials", "mesh", "all_reduce", partial, rows, True)]
        if output_head:
            out.append(Sync("logits", "star", "reduce", model.vocab_size // n * F32_BYTES, rows))
        return tuple(out)
    out = [Sync("position", "star", "broadcast", POSITION_BYTES)]  # once per forward (sendPos)
    if scheme != "dllama_root_tp":
        return tuple(out) + sliced_syncs(scheme, model, n, rows, wire_bytes_per_value(activation_bits))
    for i in range(syncs_per_layer):
        out += [Sync(f"x_norm{i}", "star", "broadcast", partial, rows, True),
                Sync(f"partials{i}", "star", "reduce", partial, rows, True)]
    return tuple(out)


def sliced_syncs(scheme: str, model: TransformerConfig, n: int, rows: int, wire: float) -> tuple[Sync, ...]:
    """The per-layer transfers of v0.1-v0.4 (`dllama_root8_tp`) and v0.5-v0.7 (`dllama_root6_tp`), `wire`
    bytes per value: a "reduce" of a slice is each worker's slice to the root (a gather: n-1 messages at the
    root), the FFN's missing slices are n-1 broadcasts of one d_ff/n slice."""
    d, kv, f = model.d_model, model.n_kv_heads * model.d_head, model.d_ff
    def star(name, collective, values, repeats=1):
        return Sync(name, "star", collective, values * wire, rows * repeats, True)
    if scheme == "dllama_root8_tp":
        attention = [star("x_norm_att", "broadcast", d), star("q_slices", "reduce", d / n),
                     star("k_slices", "reduce", kv / n), star("v_slices", "reduce", kv / n),
                     star("attention_out", "broadcast", d), star("wo_slices", "reduce", d / n)]
    else:
        attention = [star("x_norm_att", "broadcast", d), star("attention_partials", "reduce", d)]
    ffn = [star("x_norm_ffn", "broadcast", d), star("hidden_slices_up", "reduce", f / n),
           star("hidden_slices_down", "broadcast", f / n, n - 1), star("w2_slices", "reduce", d / n)]
    return tuple(attention + ffn)


def node_bytes_per_token(scheme: str, model: TransformerConfig, n: int, activation_bits: float) -> dict[str, float]:
    """The docstring's closed form for a root scheme: bytes a worker sends and receives per token (one-token
    forward, every layer), and the root's (n-1 times a worker's, the other way round)."""
    require_choice("scheme", scheme, ROOT_SCHEMES)
    w, d, f = wire_bytes_per_value(activation_bits), model.d_model, model.d_ff
    kv = model.n_kv_heads * model.d_head
    if scheme == "dllama_root8_tp":
        sends, receives = (3 * d + 2 * kv + f) / n * w, (3 * d + (n - 1) * f / n) * w
    elif scheme == "dllama_root6_tp":
        sends, receives = (d + f / n + d / n) * w, (2 * d + (n - 1) * f / n) * w
    else:
        sends, receives = ROOT_SYNCS_V08 * d * w, ROOT_SYNCS_V08 * d * w
    L = model.n_layers
    worker = {"sends": L * sends, "receives": L * receives + POSITION_BYTES}
    return {"worker_sends": worker["sends"], "worker_receives": worker["receives"],
            "root_sends": (n - 1) * worker["receives"], "root_receives": (n - 1) * worker["sends"]}


def root_messages_per_layer(scheme: str, n: int, syncs_per_layer: int = ROOT_SYNCS_V08) -> int:
    """Messages the root sends and receives per layer and token: (n-1)(n+8), (n-1)(n+4), 2k(n-1)."""
    require_choice("scheme", scheme, ROOT_SCHEMES)
    extra = {"dllama_root8_tp": n + 8, "dllama_root6_tp": n + 4, "dllama_root_tp": 2 * syncs_per_layer}[scheme]
    return (n - 1) * extra


def sync_traffic(syncs, n: int, n_layers: int = 1) -> dict[str, float]:
    """Endpoint messages and busiest-link bytes of `syncs` (per-layer ones `n_layers` times), from the table."""
    messages = busiest = 0.0
    for s in syncs:
        cost = collective_cost(s.algorithm, s.collective, n, s.message_bytes)
        times = s.repeats * (n_layers if s.per_layer else 1)
        messages += times * float(cost.endpoint_messages)
        busiest += times * float(cost.busiest_bytes)
    return {"messages": messages, "bytes": busiest}


def comm_time(cluster: Cluster, syncs, n_layers: int) -> tuple[float, float]:
    """(per-message, bytes) seconds of `syncs` on the cluster's topology, per-layer ones `n_layers` times."""
    link = data = 0.0
    for s in syncs:
        a, b = on_topology(cluster.topology, s.algorithm, s.collective, s.message_bytes, breakdown=True)
        times = s.repeats * (n_layers if s.per_layer else 1)
        link, data = link + times * float(a), data + times * float(b)
    return link, data


def sync_transfers(sync: Sync, n: int) -> tuple[Transfer, ...]:
    """The messages of one sync among n nodes, node 0 the root, each of its `repeats` buffers at once: a star
    broadcast sends the root's buffer to every worker, a star reduce every worker's to the root, a mesh all-reduce
    every node's to every other (`collective_cost`'s star and mesh rows, message by message)."""
    m = sync.message_bytes * sync.repeats
    if sync.algorithm == "star" and sync.collective == "broadcast":
        return tuple(Transfer(0, w, m) for w in range(1, n))
    if sync.algorithm == "star" and sync.collective == "reduce":
        return tuple(Transfer(w, 0, m) for w in range(1, n))
    if sync.algorithm == "mesh" and sync.collective == "all_reduce":
        return tuple(Transfer(i, j, m) for i in range(n) for j in range(n) if i != j)
    raise WorkbenchError(f"sync {sync.name!r}: no message pattern for {sync.algorithm} {sync.collective} "
                         f"(star broadcast / reduce, mesh all_reduce)")


def shaped_comm_time(cluster: Cluster, syncs, n_layers: int, compute_s: float) -> tuple[float, float]:
    """(per-message, bytes) seconds of `syncs` on a shaped link (`Link.bucket_bytes` > 0): the per-message terms
    as `comm_time`'s (each sync's, in forward order); the bytes term from the forward's message timeline on token buckets (`token_bucket_time`),
    the forward's compute spread evenly between its per-layer syncs and each sync's per-message time before it
    (the buckets refill meanwhile), less those gaps."""
    n, link = cluster.n, cluster.topology.link
    per_message = [float(on_topology(cluster.topology, s.algorithm, s.collective, s.message_bytes,
                                     breakdown=True)[0]) * s.repeats for s in syncs]
    layer = [i for i, s in enumerate(syncs) if s.per_layer]
    gap = compute_s / (n_layers * len(layer)) if layer else 0.0
    order = [i for i in range(len(syncs)) if not layer or i < layer[0]] + layer * n_layers + \
        [i for i in range(len(syncs)) if layer and i > layer[-1] and not syncs[i].per_layer]
    steps = [Step(per_message[i] + (gap if syncs[i].per_layer else 0.0), sync_transfers(syncs[i], n)) for i in order]
    if not layer:
        steps.append(Step(compute_s))
    total = token_bucket_time(steps, link.bandwidth_bytes_per_s, link.bucket_bytes)
    return sum(per_message[i] for i in order), max(total - sum(step.gap_s for step in steps), 0.0)


def forward_comm(cluster: Cluster, syncs, n_layers: int, compute_s: float) -> tuple[float, float]:
    """(per-message, bytes) seconds of a forward's syncs: `comm_time` on a wire, `shaped_comm_time` on a shaped
    link."""
    if cluster.topology.link.bucket_bytes > 0:
        return shaped_comm_time(cluster, syncs, n_layers, compute_s)
    return comm_time(cluster, syncs, n_layers)


# ---- compute --------------------------------------------------------------------------------------------
def merge_time(model: TransformerConfig, device, workload: Workload, n: int, rows: int) -> float:
    """Seconds of the merge-add's extra reads: the n-1 partials (wire format) beyond the residual add's one."""
    extra = (n - 1) * rows * model.d_model * wire_bytes_per_value(workload.activation_bits)
    reads = common.Operator("merge_extra_reads", 0.0, extra, 0, kind="elementwise", core_limited=False)
    return float(common.cost(device, [reads])[0].memory_s)  # part of the residual add's kernel: no launch


def root_pass_time(device, workload: Workload, n_bytes: float) -> float:
    """Seconds of one memory-bound root-only kernel over `n_bytes` (embedding rows, logits for sampling)."""
    return float(common.roofline_time(device, 0.0, n_bytes, common.workload_dtype(device, workload)))


def shard_times(model: TransformerConfig, cluster: Cluster, workload: Workload) -> dict[str, np.ndarray]:
    """Per-device seconds of each node's slice of one layer: attention block (qkv + attn + out) and of it
    the attention, FFN (ffn1 + ffn2), one connective block, the layer overhead."""
    n, rows = cluster.n, workload.new_tokens
    heads, cols = model.n_heads // n, model.d_ff // n
    out: dict[str, list] = {"attn_block": [], "attn": [], "ffn_block": [], "con": [], "overhead": []}
    for d in cluster.devices:
        k = common.kernel_times(model, d, workload, heads, cols, rows)
        attn = float(common.attention_time(model, d, workload, heads))
        out["attn"].append(attn)
        out["attn_block"].append(float(k["qkv"] + attn + k["out"]))
        out["ffn_block"].append(float(k["ffn1"] + k["ffn2"]))
        out["con"].append(float(common.connective_time(model, d, workload, rows)))
        out["overhead"].append(common.layer_overhead(d))
    return {key: np.array(v) for key, v in out.items()}


@dataclass(frozen=True)
class Forward:
    """Seconds of one forward: compute on the critical path (of it: fixed, serial) and communication."""

    compute: float
    fixed: float
    serial: float
    link: float
    data: float

    def __add__(self, other: Forward) -> Forward:
        return Forward(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def astuple(self) -> tuple[float, ...]:
        """(compute, fixed, serial, link, data)."""
        return (self.compute, self.fixed, self.serial, self.link, self.data)


def _head_on(model: TransformerConfig, workload: Workload) -> bool:
    return workload.output_head and model.is_decoder


def allgather_forward(model: TransformerConfig, cluster: Cluster, workload: Workload) -> Forward:
    """One forward of distributed-llama >= v0.11 (all-gather of partials; norms on every node)."""
    n, rows, L = cluster.n, workload.new_tokens, model.n_layers
    t = shard_times(model, cluster, workload)
    merge = np.array([merge_time(model, d, workload, n, rows) for d in cluster.devices])
    layer = float(np.max(t["con"] + merge + t["attn_block"] + t["overhead"]) + np.max(t["con"] + merge + t["ffn_block"]))
    head = common.output_head_time(model, cluster.devices, workload)
    root = cluster.serial_device(cluster.devices[0])  # the others wait for the root's passes
    serial = root_pass_time(root, workload, rows * model.d_model * F32_BYTES)
    if _head_on(model, workload):
        serial += root_pass_time(root, workload, model.vocab_size * F32_BYTES)
    fixed = L * max(common.fixed_layer_time(d) for d in cluster.devices)
    if _head_on(model, workload):
        fixed += max(float(d.launch_time(1)) for d in cluster.devices)
    compute = L * layer + head + serial
    link, data = forward_comm(cluster, forward_syncs("dllama_allgather_tp", model, n, rows, workload.activation_bits,
                                                     _head_on(model, workload)), L, compute)
    return Forward(compute, fixed, serial, link, data)


def root_layer_times(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload,
                     syncs_per_layer: int = ROOT_SYNCS_V08) -> tuple[float, float]:
    """(parallel, serial) seconds of one layer of a root scheme: the slowest node's slices, then the root's own
    work (norms and merges; v0.1-v0.4 also every head's attention over the whole cache)."""
    n, rows = cluster.n, workload.new_tokens
    t = shard_times(model, cluster, workload)
    root = cluster.serial_device(cluster.devices[0])
    con, merge = float(t["con"][0]), merge_time(model, root, workload, n, rows)
    attention = t["attn_block"]
    if scheme == "dllama_root8_tp":  # attention on the root alone; the nodes run their q/k/v and wo slices
        attention = attention - t["attn"]
        serial = 2 * con + float(common.attention_time(model, root, workload, model.n_heads))
    elif scheme == "dllama_root6_tp":  # n full-d attention partials merged; the FFN's d/n slices just add
        serial = 2 * con + merge
    else:
        serial = syncs_per_layer * (con + merge)
    return float(np.max(attention) + np.max(t["ffn_block"]) + np.max(t["overhead"])), serial


def root_forward(model: TransformerConfig, cluster: Cluster, workload: Workload,
                 syncs_per_layer: int = ROOT_SYNCS_V08, sample: bool = True,
                 scheme: str = "dllama_root_tp") -> Forward:
    """One forward of distributed-llama v0.1-v0.10 (`scheme` one of ROOT_SCHEMES; v0.8-v0.10: k reduce-to-root +
    broadcast syncs per layer; norms, merges, the head and, if `sample`, sampling on the root)."""
    require_choice("scheme", scheme, ROOT_SCHEMES)
    n, rows, L = cluster.n, workload.new_tokens, model.n_layers
    root = cluster.serial_device(cluster.devices[0])  # the others wait for the root's merges, head and sampling
    parallel_layer, serial_layer = root_layer_times(scheme, model, cluster, workload, syncs_per_layer)
    serial = L * serial_layer + root_pass_time(root, workload, rows * model.d_model * F32_BYTES)
    if _head_on(model, workload):
        serial += common.lm_head_time(model, root, workload)  # every forward runs the classifier (llamaFinalize)
        if sample:
            serial += root_pass_time(root, workload, model.vocab_size * F32_BYTES)
    fixed = L * max(common.fixed_layer_time(d, WORKER_KERNELS_ROOT_TP) for d in cluster.devices)
    compute = L * parallel_layer + serial
    link, data = forward_comm(cluster, forward_syncs(scheme, model, n, rows, workload.activation_bits,
                                                     _head_on(model, workload), syncs_per_layer), L, compute)
    return Forward(compute, fixed, serial, link, data)


def _attention_by_position(scheme: str, model: TransformerConfig, cluster: Cluster, first: Workload,
                           positions: range) -> tuple[float, float]:
    """(critical-path, serial) seconds the attention adds over positions `positions` beyond position 1's:
    on the nodes' slowest head slice, or for v0.1-v0.4 on the root over every head."""
    if scheme == "dllama_root8_tp":
        root = cluster.serial_device(cluster.devices[0])
        base = float(common.attention_time(model, root, first, model.n_heads))
        extra = sum(float(common.attention_time(model, root, replace(first, kv_len=p), model.n_heads)) - base
                    for p in positions)
        return extra, extra
    t1 = shard_times(model, cluster, first)
    rest, heads = t1["attn_block"] - t1["attn"], model.n_heads // cluster.n
    kinds = {id(d): d for d in cluster.devices}
    extra = 0.0
    for p in positions:
        step = replace(first, kv_len=p)
        at = {key: float(common.attention_time(model, d, step, heads)) for key, d in kinds.items()}
        extra += float(np.max(rest + np.array([at[id(d)] for d in cluster.devices]))) - float(np.max(t1["attn_block"]))
    return extra, 0.0


def root_prefill(model: TransformerConfig, cluster: Cluster, workload: Workload,
                 syncs_per_layer: int = ROOT_SYNCS_V08, scheme: str = "dllama_root_tp") -> Forward:
    """S single-token forwards at positions 1..S, sampling after the last: only the attention changes from
    one to the next (over p keys), so the first forward is costed whole and each later one adds its
    attention's difference."""
    first = replace(workload, phase="decode", kv_len=1)
    f1 = root_forward(model, cluster, first, syncs_per_layer, sample=False, scheme=scheme)
    s = workload.seq_len
    extra, extra_serial = _attention_by_position(scheme, model, cluster, first, range(2, s + 1))
    delta, delta_serial = model.n_layers * extra, model.n_layers * extra_serial
    sample = root_pass_time(cluster.devices[0], workload, model.vocab_size * F32_BYTES) if _head_on(model, workload) \
        else 0.0
    return Forward(s * f1.compute + delta + sample, s * f1.fixed, s * f1.serial + delta_serial + sample,
                   s * f1.link, s * f1.data)


# ---- memory ----------------------------------------------------------------------------------------------
def node_memory_bytes(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload) -> np.ndarray:
    """Per-node bytes: its slice of every layer's weights, the norms, its classifier rows (all of them on
    the root TP's root), the F32 embedding table on the root, its slice of the KV cache (activation
    buffers, a few rows of d and V, are not counted)."""
    n = cluster.n
    bits = workload.weight_bits
    layers = model.n_layers * ((model.attention_params() + model.ffn_params()) / n + model.norm_params())
    head = model.vocab_size * model.d_model
    kv = model.kv_cache_bytes(workload.attended, workload.cache_bits)
    per = np.full(n, float(common.weight_bytes(layers + model.d_model, bits)) + kv / n)
    if scheme == "dllama_root8_tp":  # v0.1-v0.4: the whole cache on the root, which runs every head
        per += np.where(np.arange(n) == 0, kv - kv / n, -kv / n)
    if scheme == "dllama_allgather_tp":
        per += float(common.weight_bytes(head / n, bits))
    else:
        per[0] += float(common.weight_bytes(head, bits))
    per[0] += model.vocab_size * model.d_model * F32_BYTES
    return per


# ---- evaluators ------------------------------------------------------------------------------------------
def _result(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload, f: Forward,
            notes: str) -> SchemeResult:
    need = node_memory_bytes(scheme, model, cluster, workload)
    rows = _operators(scheme, model, cluster, workload)
    res = costed(scheme, PAPER, workload.phase, f.compute + f.link + f.data, tuple(d.name for d in cluster.devices),
                 notes, compute_s=f.compute, comm_link_latency_s=f.link, comm_bytes_s=f.data,
                 peak_memory_bytes=tuple(map(float, need)),
                 memory_budget_bytes=tuple(float(d.memory_bytes) for d in cluster.devices),
                 operators=rows, no_operators="" if rows is not None else ROOT_PREFILL_ROWS)
    return res.carve(f.fixed, f.serial)


ROOT_PREFILL_ROWS = "the root engine's prefill is S one-token forwards at growing positions: no one layer table"


def _operators(scheme: str, model: TransformerConfig, cluster: Cluster, workload: Workload) -> common.Breakdown | None:
    """The busiest node's fused rows of one layer (1/n of the heads and FFN columns on the forward's rows); None
    for the root engine's prefill, S one-token forwards at growing positions (no one layer table)."""
    if scheme in ROOT_SCHEMES and workload.phase == "prefill":
        return None
    n = cluster.n
    return common.busiest_breakdown(model, cluster.devices, workload, (model.n_heads / n,) * n,
                                    (model.d_ff / n,) * n, (workload.new_tokens,) * n, model.n_layers)


def evaluate_allgather_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama >= v0.11 on the cost model: a prefill is one forward of S rows."""
    check_split(model, cluster.n, "dllama_allgather_tp")
    return _result("dllama_allgather_tp", model, cluster, workload, allgather_forward(model, cluster, workload),
                   f"mesh all-gather of partials, wire {wire_bytes_per_value(workload.activation_bits):g} B/value")


def evaluate_root_tp(model: TransformerConfig, cluster: Cluster, workload: Workload,
                     syncs_per_layer: int = ROOT_SYNCS_V08, scheme: str = "dllama_root_tp") -> SchemeResult:
    """distributed-llama v0.1-v0.10 on the cost model (`scheme` one of ROOT_SCHEMES; v0.8-v0.10 with
    `syncs_per_layer` root syncs a layer); a prefill is S single-token forwards at positions 1..S (attention
    over p keys at the p-th)."""
    require_choice("scheme", scheme, ROOT_SCHEMES)
    check_split(model, cluster.n, scheme)
    require_int("syncs_per_layer", syncs_per_layer, low=1)
    if workload.phase == "decode":
        f = root_forward(model, cluster, workload, syncs_per_layer, scheme=scheme)
    else:
        f = root_prefill(model, cluster, workload, syncs_per_layer, scheme)
    first, last = VERSIONS[scheme]
    what = f"{syncs_per_layer} syncs/layer" if scheme == "dllama_root_tp" else \
        f"{root_messages_per_layer(scheme, cluster.n)} root messages/layer"
    return _result(scheme, model, cluster, workload, f,
                   f"v{first}-v{last}: star through the root, {what}, one token per forward")


@one_device_is_local
def evaluate_dllama_allgather_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.12-v0.16 on a dense model: TP, each node sends its full-d partial to every peer twice a
    layer (registered, with the MoE graph of the same release, by `schemes.moe.evaluate_dllama_allgather_tp`)."""
    return evaluate_allgather_tp(model, cluster, workload)


@register("dllama_root_tp", PAPER, origin=origin("dllama_root_tp"), no_moe="v0.1-v0.10 ran Mixtral and Grok-1, but that MoE graph is not modelled from its source (dropped in v0.11, b4rtaz/distributed-llama#132)",
          family="distributed-llama", partition="tp",
          engine="distributed-llama", options=DllamaOptions)
@one_device_is_local
def evaluate_dllama_root_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.8-v0.10: TP through the root, 2 reduce-to-root + broadcast syncs a layer (another
    count: [schemes.dllama] syncs_per_layer, `DllamaOptions.evaluator`)."""
    return evaluate_root_tp(model, cluster, workload, ROOT_SYNCS_V08)


@register("dllama_root6_tp", PAPER, origin=origin("dllama_root6_tp"), no_moe="v0.1-v0.10 ran Mixtral and Grok-1, but that MoE graph is not modelled from its source (dropped in v0.11, b4rtaz/distributed-llama#132)",
          family="distributed-llama", partition="tp",
          engine="distributed-llama", options=DllamaOptions)
@one_device_is_local
def evaluate_dllama_root6_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.5-v0.7: TP through the root, six transfers a layer (the FFN's hidden re-sent)."""
    return evaluate_root_tp(model, cluster, workload, scheme="dllama_root6_tp")


@register("dllama_root8_tp", PAPER, origin=origin("dllama_root8_tp"), no_moe="v0.1-v0.10 ran Mixtral and Grok-1, but that MoE graph is not modelled from its source (dropped in v0.11, b4rtaz/distributed-llama#132)",
          family="distributed-llama", partition="tp",
          engine="distributed-llama", options=DllamaOptions)
@one_device_is_local
def evaluate_dllama_root8_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """distributed-llama v0.1-v0.4: TP through the root, eight transfers a layer, every head's attention on the root."""
    return evaluate_root_tp(model, cluster, workload, scheme="dllama_root8_tp")
