"""TPI-LLM's cost model: star all-reduce tensor parallelism with the sliding-window memory scheduler.

One timeline (workbench.core.simulate) per run: for every token, each device computes its share of every
attention and FFN block, an all-reduce follows each block (one task on the network), the master
embeds before and runs the task head after. With the scheduler on, each device's loader thread reads
the next blocks from disk while the device computes and all-reduces; load k waits until block k - w
has been released (its compute ended), so at most w blocks are resident (TPI-LLM Sec. 3.3, Fig. 4).
Optionally one FFN block in every k is retained after the first token (Prop. 6). The master starts its
loader only after the prompt (Alg. 1 lines 2-3), the workers before it (Alg. 2), so TTFT includes the
master's first reads - with the scheduler off, of all its blocks, once (the released code loads them in
the first forward pass); see `build_tasks`.

Peak memory = gamma x (largest set of block weights resident at once, read off the timeline)
+ runtime overhead + KV cache with the scheduler (Prop. 5); resident weights + overhead + KV without.
A device runs out of memory when its peak exceeds DRAM + swap.

Registered evaluators: ``tpi_star_tp`` (TPI-LLM), ``tpi_star_tp_resident`` (its scheduler off) and
``tp_ring_allreduce`` (Sec. 4.3's Galaxy baseline: this timeline with ring collectives, no scheduler). The
single-device and layer-sequential baselines of Sec. 4.3-4.4 (``single_device_resident``,
``disk_offload_blocking``, ``layerwise_mp``) are no one paper's: `workbench.schemes.baselines`.

Compute follows `workbench.schemes.common`: the timeline's Table-4 blocks (TPI-LLM's scheduling units)
take one roofline each at the shared compute dtype and kernel shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from workbench.core.constants import paper_values
from workbench.core.errors import (
    InfeasibleError,
    WorkbenchError,
    require_choice,
    require_int,
    require_positive,
)
from workbench.core.simulate import Task, Timeline, schedule
from workbench.core.units import GIB
from workbench.machine.hardware import DeviceSpec
from workbench.machine.network import ALGORITHMS, collective_latency, on_topology, star_on_access_links
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, register
from workbench.schemes.partitions import one_device_is_local

PAPER = "tpi_llm"
# the schemes this module registers
STAR_TP, STAR_TP_RESIDENT, RING_TP = "tpi_star_tp", "tpi_star_tp_resident", "tp_ring_allreduce"
SPLITS = ("capability", "equal")


def paper_constants() -> Mapping:
    """Values of data/constants/tpi_llm.toml (gamma, runtime overhead, prompt length, windows...), read once."""
    return paper_values(PAPER)


@dataclass(frozen=True)
class TPIOptions:
    """Knobs of one TPI-LLM run; None fields take the values of data/constants/tpi_llm.toml."""

    scheduler: bool = True
    window: int | None = None  # None: the paper's default (2)
    retain_every: int | None = None  # Prop. 6: keep one FFN block in every `retain_every` (0: none)
    allreduce: str = "star"
    tree_depth: int | None = None
    split: str = "capability"
    gamma: float | None = None  # memory scaling factor of Prop. 5 (fitted)
    runtime_overhead_bytes: float | None = None  # libraries, buffers (fitted)
    context_tokens: int | None = None  # KV-cache length for the memory model
    decode_tokens: int = 3  # decode steps simulated after the prompt (steady state from the 2nd on)
    # the loader starts with the first forward pass (Alg. 1 lines 2-3; released code): the master's
    # blocks are read inside the first token, also with the scheduler off (then all of them, once)
    first_token_loads: bool = True

    def __post_init__(self) -> None:
        c = paper_constants()
        defaults = {"window": int(c["window_default"]), "retain_every": int(c["retain_every_default"]),
                    "gamma": float(c["gamma"]), "runtime_overhead_bytes": float(c["runtime_overhead"]) * GIB,
                    "context_tokens": int(c["context_tokens"])}
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        require_int("window", self.window, low=1)
        require_int("retain_every", self.retain_every, low=0)
        require_choice("allreduce", self.allreduce, ALGORITHMS)
        require_choice("split", self.split, SPLITS)
        require_positive("gamma", self.gamma)
        if self.runtime_overhead_bytes < 0:
            raise WorkbenchError(f"runtime_overhead_bytes must be >= 0, got {self.runtime_overhead_bytes}")
        require_int("context_tokens", self.context_tokens, low=1)
        require_int("decode_tokens", self.decode_tokens, low=2)


def default_options(**changes) -> TPIOptions:
    """TPIOptions at the paper's constants (window 2, fitted gamma and overhead), with `changes`."""
    return TPIOptions(**changes)


# ---- blocks (Table 4) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One unit the scheduler loads: pre(process), attn, ffn or post(process), with its parameters."""

    name: str
    kind: str
    layer: int
    params: float


def table4_block_params(model: TransformerConfig, share: float) -> dict[str, float]:
    """Parameters of TPI-LLM's blocks for a device handling `share` of the heads (Table 4)."""
    h, v = model.d_model, model.vocab_size
    return {"pre": h * v, "attn": model.attention_params() * share + h, "ffn": model.ffn_params() * share + h,
            "post": h * v + h}


def device_blocks(model: TransformerConfig, share: float, master: bool) -> list[Block]:
    """The device's blocks in execution order: [pre], attn 1, ffn 1, ..., attn L, ffn L, [post]."""
    size = table4_block_params(model, share)
    blocks = [Block("pre", "pre", 0, size["pre"])] if master else []
    for layer in range(1, model.n_layers + 1):
        blocks += [Block(f"attn{layer}", "attn", layer, size["attn"]), Block(f"ffn{layer}", "ffn", layer, size["ffn"])]
    if master:
        blocks.append(Block("post", "post", model.n_layers + 1, size["post"]))
    return blocks


def prop5_peak_params(model: TransformerConfig, share: float, window: int, master: bool) -> float:
    """Prop. 5 / eq. (7)-(8): parameters resident at the peak (multiply by gamma x bytes/param)."""
    require_int("window", window, low=1)
    h, v, a, b, s = model.d_model, model.vocab_size, model.n_heads, model.n_kv_heads, model.d_ff
    attn = 2 * (1 + b / a) * h * h * share + h
    ffn = 3 * h * s * share + h
    if not master:
        return (window // 2) * attn + ((window + 1) // 2) * ffn
    if window == 1:
        return h * v + h
    if window == 2:
        return 2 * h * v + h
    return 2 * h * v + h + ((window - 2) // 2) * attn + ((window - 1) // 2) * ffn


def window_peak_params(blocks: list[Block], window: int) -> float:
    """Largest sum of `window` consecutive blocks in the cyclic block order (tokens repeat)."""
    require_int("window", window, low=1)
    sizes = np.array([blk.params for blk in blocks], dtype=float)
    if window >= len(sizes):
        return float(sizes.sum())
    ring = np.concatenate([sizes, sizes[: window - 1]])
    sums = np.convolve(ring, np.ones(window), mode="valid")[: len(sizes)]
    return float(sums.max())


# ---- steady-state conditions (Prop. 3, 4, 6) --------------------------------------------------------
def loose_steady(t_attn: float, t_ffn: float, t_allreduce: float, tau_attn: float, tau_ffn: float,
                 n_layers: int, retain_every: int = 0) -> bool:
    """Prop. 3 (retain_every=0) or Prop. 6 (one FFN block kept in every T): loads never stall compute."""
    require_int("n_layers", n_layers, low=1)
    layers = np.arange(1, n_layers + 1, dtype=float)
    loaded_ffn = layers - (np.ceil(layers / retain_every) if retain_every else 0.0)
    if retain_every:  # eq. (9)-(10)
        c9 = layers * t_attn + layers * t_ffn + 2 * layers * t_allreduce >= loaded_ffn * tau_ffn + layers * tau_attn
        c10 = (layers * t_attn + (layers - 1) * t_ffn + (2 * layers - 1) * t_allreduce
               >= loaded_ffn * tau_ffn + (layers - 1) * tau_attn)
        return bool(np.all(c9) and np.all(c10))
    c4 = t_attn + t_ffn + 2 * t_allreduce >= tau_ffn + tau_attn
    c5 = layers * t_attn + (layers - 1) * t_ffn + (2 * layers - 1) * t_allreduce >= layers * tau_ffn + (layers - 1) * tau_attn
    c6 = (layers - 1) * t_attn + layers * t_ffn + (2 * layers - 1) * t_allreduce >= (layers - 1) * tau_ffn + layers * tau_attn
    return bool(c4 and (np.all(c5) or np.all(c6)))


def tight_steady(t_attn: float, t_ffn: float, t_allreduce: float, tau_attn: float, tau_ffn: float) -> bool:
    """Prop. 4: each block's compute + all-reduce covers the next block's load."""
    return bool(t_attn + t_allreduce >= tau_ffn and t_ffn + t_allreduce >= tau_attn)


def block_pipeline(t_attn: float, t_ffn: float, t_allreduce: float, tau_attn: float, tau_ffn: float,
                   n_layers: int, window: int | None = None, retain_every: int = 0) -> Timeline:
    """The setting of Prop. 3-6 on the timeline: one device, attn/ffn blocks of L layers plus the next
    layer's attention, an all-reduce after each block, one loader; load k waits for the compute of
    load k - w (window None: unlimited look-ahead, the proofs' assumption). Retained FFN blocks
    (layers 1, 1 + T, ...) are not loaded."""
    require_int("n_layers", n_layers, low=1)
    if window is not None:
        require_int("window", window, low=1)
    seq = [blk for layer in range(1, n_layers + 1) for blk in (("attn", layer), ("ffn", layer))]
    seq.append(("attn", n_layers + 1))
    tasks, loaded, prev = [], [], ()
    for k, (kind, layer) in enumerate(seq):
        name = f"{kind}{layer}"
        deps = list(prev)
        if not (kind == "ffn" and retain_every and (layer - 1) % retain_every == 0):
            j = len(loaded)
            load_deps = (loaded[j - window],) if window is not None and j - window >= 0 else ()
            tasks.append(Task(f"load:{name}", "disk", tau_attn if kind == "attn" else tau_ffn, load_deps, "io"))
            loaded.append(name)
            deps.append(f"load:{name}")
        tasks.append(Task(name, "cpu", t_attn if kind == "attn" else t_ffn, tuple(deps), "compute"))
        if k < len(seq) - 1:
            tasks.append(Task(f"ar:{name}", "net", t_allreduce, (name,), "communication"))
            prev = (f"ar:{name}",)
    return schedule(tasks)


def compute_stalls(timeline: Timeline) -> list[float]:
    """Seconds each compute block waited for its weights after its input was ready (block_pipeline order)."""
    frame = timeline.frame
    end = dict(zip(frame["name"], frame["end"]))
    computes = frame[frame["kind"] == "compute"]
    stalls, ready = [], 0.0
    for name, start in zip(computes["name"], computes["start"]):
        stalls.append(max(0.0, float(start) - ready))
        ready = end.get(f"ar:{name}", 0.0)
    return stalls


# ---- devices and network -------------------------------------------------------------------------
# The storage rates a baseline may read its weights back at: the DeviceSpec field and its deployment-TOML key.
STORAGE_RATES = {"swap": ("swap_read_bytes_per_s", "swap_mb_per_s"),
                 "offload": ("offload_read_bytes_per_s", "offload_read_mb_per_s")}


def storage_rate(device: DeviceSpec, rate: str, why: str) -> float:
    """A device's `rate` ("swap" or "offload", `STORAGE_RATES`), else its storage read rate; none is an error
    naming both keys, never an assumed rate."""
    require_choice("storage rate", rate, tuple(STORAGE_RATES))
    name, key = STORAGE_RATES[rate]
    value = getattr(device, name)
    if value is not None:
        return value
    if device.storage_read_bytes_per_s is None:
        raise WorkbenchError(f"device {device.name!r} has no storage_read_mb_per_s (nor {key}): {why} needs it")
    return device.storage_read_bytes_per_s


def memory_limit(device: DeviceSpec) -> float:
    """Bytes a device can hold before OOM: DRAM + swap (`DeviceSpec.swap_capacity_bytes`, 0: none)."""
    return device.memory_bytes + device.swap_capacity_bytes


def stream_bandwidth(device: DeviceSpec) -> float:
    """Achievable weight-streaming rate of the compute (the DRAM level's bandwidth)."""
    return device.memory[-1].bandwidth_bytes_per_s


def with_cores(device: DeviceSpec, cores: int) -> DeviceSpec:
    """The device limited to `cores` cores: peak and streaming rate scale per core (assumption)."""
    require_int("cores", cores, low=1)
    ratio = cores / device.cores
    memory = tuple(replace(m, bandwidth_bytes_per_s=m.bandwidth_bytes_per_s * ratio) if i == len(device.memory) - 1
                   else m for i, m in enumerate(device.memory))
    return device.with_changes(cores=cores, peak_flops={k: v * ratio for k, v in device.peak_flops.items()},
                               memory=memory)


def compute_time(device: DeviceSpec, flops: float, weight_bytes: float, dtype: str = "fp32",
                 kind: str = "gemm", rows: int | None = None) -> float:
    """Roofline of one block (`common.roofline_time`): max(FLOPs at peak[dtype] x efficiency(kind, rows),
    bytes at the streaming rate); `rows` = the tokens every device's slice multiplies (tensor parallelism
    splits columns, not rows)."""
    return float(common.roofline_time(device, flops, weight_bytes, dtype, kind, rows=rows))


def check_devices(model: TransformerConfig, n_devices: int) -> int:
    """Tensor parallelism over heads needs 1 <= devices <= heads; return n_devices."""
    if not isinstance(n_devices, int) or isinstance(n_devices, bool) or n_devices < 1:
        raise WorkbenchError(f"n_devices must be an integer >= 1, got {n_devices!r}")
    if n_devices > model.n_heads:
        raise WorkbenchError(f"n_devices must be <= n_heads ({model.n_heads}) of {model.name!r}: TPI-LLM splits "
                             f"attention heads, got {n_devices} devices")
    return n_devices


def capability(device: DeviceSpec) -> float:
    """Computing power used to split heads (TPI-LLM Step 1): weight-streaming rate (decode-bound)."""
    return stream_bandwidth(device)


def device_shares(cluster: Cluster, split: str = "capability") -> np.ndarray:
    """p_i: each device's fraction of heads and FFN columns (equal, or in proportion to capability)."""
    require_choice("split", split, SPLITS)
    w = np.ones(cluster.n) if split == "equal" else np.array([capability(d) for d in cluster.devices])
    return w / w.sum()


def access_links(cluster: Cluster) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-device (bandwidth B/s, one-way latency s) to the router when every preset gives them (Table 7)."""
    devs = cluster.devices
    if cluster.n > 1 and all(d.access_link_bytes_per_s is not None for d in devs):
        return (np.array([d.access_link_bytes_per_s for d in devs]), np.array([d.access_link_latency_s for d in devs]))
    return None


def collective_time(cluster: Cluster, algorithm: str, collective: str, message_bytes: float,
                    depth: int | None = None) -> tuple[float, float]:
    """(link-latency seconds, bytes seconds) of a collective among the cluster's devices (master = 0).

    Homogeneous: workbench.machine.network on the cluster's topology. Per-device access links (the laptops'
    Wi-Fi, Table 7; `DeviceSpec.access_link_bytes_per_s`): a star goes worker -> router -> master
    (`network.star_on_access_links`); ring/tree cross two access links per hop, each at the slowest.
    """
    if cluster.n == 1 or message_bytes == 0:
        return 0.0, 0.0
    links = access_links(cluster)
    if links is None:
        link_s, bytes_s = on_topology(cluster.topology, algorithm, collective, message_bytes, depth=depth, breakdown=True)
        return float(link_s), float(bytes_s)
    bw, lat = links
    if algorithm == "star":
        return star_on_access_links(collective, message_bytes, bw, lat)
    link_s, bytes_s = collective_latency(algorithm, collective, cluster.n, message_bytes, float(bw.min()),
                                         float(lat.max()),
                                         path_hops=2, depth=depth, breakdown=True)
    return float(link_s), float(bytes_s)


def p2p_time(cluster: Cluster, src: int, dst: int, message_bytes: float) -> float:
    """Seconds to send one message from device src to dst (model parallelism's hand-off)."""
    if src == dst or cluster.n == 1:
        return 0.0
    links = access_links(cluster)
    if links is None:
        topo = cluster.topology
        return float(collective_latency("star", "broadcast", 2, message_bytes, topo.link.bandwidth_bytes_per_s,
                                        topo.link.latency_s, topo.path_hops,
                                        message_overhead=topo.link.message_overhead_s))
    bw, lat = links
    link_s, bytes_s = star_on_access_links("broadcast", message_bytes, bw[[src, dst]], lat[[src, dst]])
    return link_s + bytes_s


# ---- the TPI-LLM timeline --------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceClass:
    """Devices that behave identically (same spec and share) are simulated once."""

    index: int  # first device of the class (0 = master)
    device: DeviceSpec
    share: float
    count: int
    master: bool


def device_classes(cluster: Cluster, shares: np.ndarray) -> list[DeviceClass]:
    """Master first, then one class per distinct (worker spec, share)."""
    classes = [DeviceClass(0, cluster.devices[0], float(shares[0]), 1, True)]
    for i in range(1, cluster.n):
        dev, share = cluster.devices[i], float(shares[i])
        for j, c in enumerate(classes):
            if not c.master and c.device == dev and abs(c.share - share) < 1e-12:
                classes[j] = replace(c, count=c.count + 1)
                break
        else:
            classes.append(DeviceClass(i, dev, share, 1, False))
    return classes


@dataclass
class TPIRun:
    """One simulated TPI-LLM run: TTFT, steady token latency, per-device peak memory, the timeline."""

    ttft_s: float
    token_latency_s: float
    peak_memory_bytes: tuple[float, ...]
    memory_limit_bytes: tuple[float, ...]
    oom: bool
    timeline: Timeline
    breakdown: dict = field(default_factory=dict)
    block_times: dict = field(default_factory=dict)


# Kernels each Table-4 block launches: the embedding gather; norm + Q/K/V + attention + output projection;
# norm + FFN up (gate) + FFN down; the final norm + LM head. attn + ffn = common.KERNELS_PER_LAYER.
BLOCK_KERNELS = {"pre": 1, "attn": 4, "ffn": 3, "post": 2}


def block_fixed_time(model: TransformerConfig, blk: Block, dev: DeviceSpec, workload: Workload) -> float:
    """Size-independent seconds of one block on a device: its kernels' launches (a MoE model's FFN block one more,
    its router: `common.kernels_per_layer`), and half the per-layer framework time for each of a layer's two
    blocks (the post block's head only in a generation step)."""
    if blk.kind == "post" and not workload.output_head:
        return 0.0
    half_layer = dev.layer_overhead_s / 2 if blk.kind in ("attn", "ffn") else 0.0
    router = 1 if blk.kind == "ffn" and model.is_moe else 0
    return float(dev.launch_time(BLOCK_KERNELS[blk.kind] + router)) + half_layer


def _block_compute(model: TransformerConfig, blk: Block, dev: DeviceSpec, share: float, tokens: int, kv_len: int,
                   workload: Workload) -> float:
    """Seconds of one Table-4 block on a device: its roofline plus its fixed launches (`block_fixed_time`)."""
    busy = _block_roofline(model, blk, dev.with_changes(kernel_launch_s=0.0), share, tokens, kv_len, workload)
    return busy + block_fixed_time(model, blk, dev, workload)


def _block_roofline(model: TransformerConfig, blk: Block, dev: DeviceSpec, share: float, tokens: int, kv_len: int,
                    workload: Workload) -> float:
    """Seconds of one Table-4 block on a device: one roofline per block (its weights and, for attention,
    its KV slice), at the shared compute dtype and kernel shape; the post block's LM head computes the
    next token's logits (`common.lm_head_flops`)."""
    bits = workload.weight_bits
    dtype, kind = common.workload_dtype(dev, workload), common.kernel_kind(tokens)
    if blk.kind == "pre":
        return compute_time(dev, 0.0, tokens * model.d_model * bits / 8, dtype, kind)
    if blk.kind == "post":  # the final norm and, in a generation step, the LM head and the step's host work
        if not workload.output_head:
            return 0.0
        head = compute_time(dev, common.lm_head_flops(model), blk.params * bits / 8, dtype, "gemv")
        return head + dev.step_overhead_s
    if blk.kind == "attn":
        flops = share * (model.attention_matmul_flops(tokens) + model.attention_score_flops(tokens, kv_len))
        kv_bytes = share * model.kv_cache_bytes_per_block(kv_len, bits)
        return compute_time(dev, flops, blk.params * bits / 8 + kv_bytes, dtype, kind, rows=tokens)
    if model.is_moe:  # the operator table's expert rows for the share p_i of every expert's columns
        return moe_ffn_time(model, dev, workload, share, tokens)
    return compute_time(dev, share * model.ffn_flops(tokens), blk.params * bits / 8, dtype, kind, rows=tokens)


def moe_ffn_time(model: TransformerConfig, dev: DeviceSpec, workload: Workload, share: float, tokens: int) -> float:
    """Seconds of a MoE FFN block holding the share `share` of every expert's columns: the operator table's router
    (whole), ffn1 and ffn2 rows (`common.layer_operators`: the tokens' k experts computed, the slices of the
    experts they touch streamed), not one roofline over every stored expert."""
    rows = common.cost(dev, common.layer_operators(model, workload, 0, share * model.d_ff, tokens))
    return float(sum(r.time_s for r in rows if r.operator.name in ("router", "ffn1", "ffn2")))


def _retained(blk: Block, retain_every: int) -> bool:
    return retain_every > 0 and blk.kind == "ffn" and (blk.layer - 1) % retain_every == 0


def attended(workload: Workload, token: int) -> int:
    """Keys token `token` attends: the prompt (token 0) its own seq_len; decode step t >= 1 kv_len + t (the cache
    the decode steps start from plus the steps' own keys; kv_len = seq_len unless the deployment says otherwise),
    so the prompt length enters only the first token, never a decode step's time."""
    return workload.seq_len if token == 0 else workload.kv_len + token


def build_tasks(model: TransformerConfig, cluster: Cluster, workload: Workload, options: TPIOptions,
                classes: list[DeviceClass]) -> tuple[list[Task], dict]:
    """Tasks of a prompt + `decode_tokens` decode steps (list order = each resource's order).

    With the scheduler, load k of a device (on its disk) waits for the compute of its load k - w:
    the window holds at most w blocks, and the loader runs ahead while the device computes and
    all-reduces. Retained FFN blocks (Prop. 6) are loaded in the first token only.

    When the loader starts (`options.first_token_loads`, TPI-LLM's order): the workers start theirs
    before the prompt arrives (Alg. 2 line 2), so their first w blocks are resident at t = 0; the master
    tokenizes the prompt and then starts its scheduler (Alg. 1 lines 2-3; `MemoryManager.start()` runs
    in the first forward pass of the released code), so its first blocks are read inside the first token.
    With the scheduler off, the same loader reads every block of the master once, without a window, in
    the first token ("the full weights are loaded into the memory at once", Sec. 4.1): TTFT is then
    bound by the master's disk as with the scheduler, and later tokens find every weight resident.
    Token t attends `attended(workload, t)` keys.
    """
    bits, act = workload.weight_bits, workload.activation_bits / 8
    prompt = workload.seq_len
    blocks = {c.index: device_blocks(model, c.share, c.master) for c in classes}
    tasks: list[Task] = []
    loaded: dict[int, list[str]] = {c.index: [] for c in classes}  # compute task of each loaded block, in order
    net_split: dict[str, tuple[float, float]] = {}
    fixed: dict[str, tuple[float, bool]] = {}  # compute task -> (its fixed seconds, runs on the master only)
    comm_cache: dict[tuple[str, int], tuple[float, float]] = {}
    compute_cache: dict[tuple, float] = {}  # the same block on the same device costs the same every token
    w = options.window

    def compute(c: DeviceClass, blk: Block, token: int, tokens: int, kv_len: int, deps: list[str]) -> str:
        name = f"t{token}.d{c.index}.{blk.name}"
        cold = options.first_token_loads and c.master  # the master's loader starts after the prompt
        windowed = options.scheduler and not (token > 0 and _retained(blk, options.retain_every))
        if windowed or (cold and token == 0):
            read = c.device.storage_read_bytes_per_s
            if read is None:
                raise WorkbenchError(f"device {c.device.name!r} has no storage read rate (storage_read_mb_per_s in a "
                                     "user TOML, storage_read_bandwidth in a preset): the loader needs it")
            k = len(loaded[c.index])
            load_deps = (loaded[c.index][k - w],) if windowed and k - w >= 0 else ()
            # workers start their loader before the prompt arrives (Alg. 2 line 2), so their first w
            # blocks are resident at t = 0; the master tokenizes the prompt first (Alg. 1 lines 2-3)
            seconds = 0.0 if (k < w and not cold) else blk.params * bits / 8 / read
            tasks.append(Task(f"load:{name}", f"disk{c.index}", seconds, load_deps, "io", c.device.name))
            loaded[c.index].append(name)
            deps = deps + [f"load:{name}"]
        serial = blk.kind in ("pre", "post")  # the master's alone, the workers waiting for it
        dev = cluster.serial_device(c.device) if serial else c.device
        key = (c.index, blk.kind, blk.params, tokens, kv_len)
        if key not in compute_cache:
            compute_cache[key] = _block_compute(model, blk, dev, c.share, tokens, kv_len, workload)
        tasks.append(Task(name, f"cpu{c.index}", compute_cache[key], tuple(deps), "compute", c.device.name))
        fixed[name] = (block_fixed_time(model, blk, dev, workload), serial)
        return name

    def network(name: str, collective: str, tokens: int, deps: list[str]) -> str:
        key = (collective, tokens)
        if key not in comm_cache:
            algo = "star" if collective == "broadcast" and options.allreduce == "star" else options.allreduce
            comm_cache[key] = collective_time(cluster, algo, collective, tokens * model.d_model * act,
                                              options.tree_depth)
        net_split[name] = comm_cache[key]
        tasks.append(Task(name, "net", sum(comm_cache[key]), tuple(deps), "communication", "network"))
        return name

    master = classes[0]
    prev_post: list[str] = []
    for token in range(options.decode_tokens + 1):
        tokens = prompt if token == 0 else 1
        kv_len = attended(workload, token)
        pre = compute(master, blocks[0][0], token, tokens, kv_len, prev_post)
        prev = network(f"t{token}.bcast", "broadcast", tokens, [pre])
        for layer in range(model.n_layers):
            for kind in (0, 1):
                names = [compute(c, blocks[c.index][2 * layer + kind + (1 if c.master else 0)], token, tokens,
                                 kv_len, [prev]) for c in classes]
                prev = network(f"t{token}.ar{layer + 1}.{'attn' if kind == 0 else 'ffn'}", "all_reduce", tokens, names)
        post = compute(master, blocks[0][-1], token, tokens, kv_len, [prev])
        prev_post = [post]
    return tasks, {"blocks": blocks, "net_split": net_split, "fixed": fixed}


def _window_peak_bytes(frame, c: DeviceClass, blocks: list[Block], bits: float, retain_every: int) -> float:
    """Largest sum of block weights resident at once on class c (load start -> compute end)."""
    sizes = {blk.name: blk.params * bits / 8 for blk in blocks}
    rows = frame[frame["resource"].isin([f"disk{c.index}", f"cpu{c.index}"])]
    ends = dict(zip(rows["name"], rows["end"]))
    events = []
    for name, start in zip(rows["name"], rows["start"]):
        if not name.startswith("load:"):
            continue
        compute_name = name[len("load:"):]
        blk_name = compute_name.split(".", 2)[2]
        retained = retain_every > 0 and blk_name.startswith("ffn") and (int(blk_name[3:]) - 1) % retain_every == 0
        events.append((start, sizes[blk_name]))
        if not retained:
            events.append((ends[compute_name], -sizes[blk_name]))
    events.sort(key=lambda e: (e[0], e[1]))  # release before load at equal times
    level = peak = 0.0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak


def resident_weight_bytes(model: TransformerConfig, share: float, master: bool, bits: float) -> float:
    """Bytes of every block a device holds when the scheduler is off."""
    return sum(blk.params for blk in device_blocks(model, share, master)) * bits / 8


def kv_bytes(model: TransformerConfig, share: float, tokens: int, bits: float) -> float:
    """The device's part of the distributed KV cache for `tokens` tokens."""
    return share * model.kv_cache_bytes(tokens, bits)


def _min_window_fits(model: TransformerConfig, cluster: Cluster, shares: np.ndarray, options: TPIOptions,
                     bits: float) -> None:
    """Raise InfeasibleError when some device cannot hold even a one-block window."""
    for i, dev in enumerate(cluster.devices):
        need = (options.gamma * window_peak_params(device_blocks(model, shares[i], i == 0), 1) * bits / 8
                + options.runtime_overhead_bytes + kv_bytes(model, shares[i], options.context_tokens, bits))
        if need > memory_limit(dev):
            raise InfeasibleError(
                f"infeasible: {model.name} needs {need / GIB:.2f} GiB on device {i} ({dev.name}) even with the "
                f"memory scheduler at window 1, but the device holds {memory_limit(dev) / GIB:.2f} GiB (DRAM + swap)")


def simulate_tpi(model: TransformerConfig, cluster: Cluster, workload: Workload, options: TPIOptions | None = None,
                 strict: bool = False) -> TPIRun:
    """Simulate TPI-LLM on `cluster`: prompt of workload.seq_len tokens, then decode steps.

    `strict`: raise InfeasibleError if the model cannot fit even with the scheduler at window 1.
    """
    options = options or default_options()
    check_devices(model, cluster.n)
    if model.family != "llama":
        raise WorkbenchError(f"TPI-LLM's cost model covers Llama-family decoders; got {model.family!r}")
    bits = workload.weight_bits
    shares = device_shares(cluster, options.split)
    if strict and options.scheduler:
        _min_window_fits(model, cluster, shares, options, bits)
    classes = device_classes(cluster, shares)
    tasks, meta = build_tasks(model, cluster, workload, options, classes)
    timeline = schedule(tasks)
    frame = timeline.frame
    post_end = [timeline.end_of(f"t{t}.d0.post") for t in range(options.decode_tokens + 1)]
    ttft = post_end[0]
    token_latency = post_end[-1] - post_end[-2]
    peaks, limits = [0.0] * cluster.n, [0.0] * cluster.n
    for c in classes:
        kv = kv_bytes(model, c.share, options.context_tokens, bits)
        if options.scheduler:
            window = _window_peak_bytes(frame, c, meta["blocks"][c.index], bits, options.retain_every)
            peak = options.gamma * window + options.runtime_overhead_bytes + kv
        else:
            peak = resident_weight_bytes(model, c.share, c.master, bits) + options.runtime_overhead_bytes + kv
        for i in range(cluster.n):
            same = i == c.index or (not c.master and i > 0 and cluster.devices[i] == c.device
                                    and abs(shares[i] - c.share) < 1e-12)
            if same:
                peaks[i], limits[i] = peak, memory_limit(cluster.devices[i])
    oom = any(p > lim for p, lim in zip(peaks, limits))
    breakdown = {"ttft": _breakdown(frame, 0.0, post_end[0], meta["net_split"], meta["fixed"]),
                 "token": _breakdown(frame, post_end[-2], post_end[-1], meta["net_split"], meta["fixed"])}
    return TPIRun(ttft, token_latency, tuple(peaks), tuple(limits), oom, timeline, breakdown,
                  _steady_block_times(frame, options.decode_tokens))


def _breakdown(frame, t0: float, t1: float, net_split: dict, fixed: dict | None = None) -> dict[str, float]:
    """Critical-path shares of [t0, t1]: master compute (of it: fixed launches, serial master-only blocks),
    communication (per-message / bytes), waiting (IO, stragglers)."""
    inside = frame[(frame["start"] >= t0 - 1e-12) & (frame["end"] <= t1 + 1e-12)]
    on_master = inside[inside["resource"] == "cpu0"]
    compute = float(on_master["duration"].sum())
    fixed = fixed or {}
    serial = float(sum(d for n, d in zip(on_master["name"], on_master["duration"]) if fixed.get(n, (0, False))[1]))
    fixed_s = float(sum(fixed[n][0] for n in on_master["name"] if n in fixed and not fixed[n][1]))
    nets = inside.loc[inside["resource"] == "net", "name"]
    link = sum(net_split[n][0] for n in nets)
    data = sum(net_split[n][1] for n in nets)
    wait = max(0.0, (t1 - t0) - compute - link - data)
    return {"compute_s": compute, "comm_link_latency_s": link, "comm_bytes_s": data, "wait_s": wait,
            "fixed_s": fixed_s, "serial_s": serial}


def _steady_block_times(frame, last_token: int) -> dict[str, float]:
    """Prop. 3/4 inputs measured on the master in the last token: t_attn, t_ffn, t_allreduce, tau_attn, tau_ffn."""
    tok = f"t{last_token}."

    def mean(mask) -> float:
        sel = frame.loc[mask, "duration"]
        return float(sel.mean()) if len(sel) else 0.0

    names = frame["name"]
    return {"t_attn": mean(names.str.startswith(tok + "d0.attn")),
            "t_ffn": mean(names.str.startswith(tok + "d0.ffn")),
            "t_allreduce": mean(names.str.startswith(tok + "ar")),
            "tau_attn": mean(names.str.startswith("load:" + tok + "d0.attn")),
            "tau_ffn": mean(names.str.startswith("load:" + tok + "d0.ffn"))}


def scheme_result(scheme: str, paper: str, workload: Workload, latency: float, breakdown: dict, peaks, limits,
                  notes: str = "", io_is_wait: bool = True, extra: dict | None = None,
                  operators: common.Breakdown | None = None) -> SchemeResult:
    """A SchemeResult from a breakdown dict (wait_s is IO stall, or other time when `io_is_wait` is False)."""
    wait = breakdown.get("wait_s", 0.0)
    return SchemeResult(scheme, paper, workload.phase, float(latency), compute_s=breakdown.get("compute_s", 0.0),
                        comm_link_latency_s=breakdown.get("comm_link_latency_s", 0.0),
                        comm_bytes_s=breakdown.get("comm_bytes_s", 0.0),
                        io_stall_s=wait if io_is_wait else breakdown.get("io_s", 0.0),
                        other_s=0.0 if io_is_wait else wait,
                        peak_memory_bytes=tuple(peaks), memory_budget_bytes=tuple(limits),
                        notes=notes, extra=extra or {}, operators=operators).carve(breakdown.get("fixed_s", 0.0),
                                                              breakdown.get("serial_s", 0.0))


def evaluate_tpi(model: TransformerConfig, cluster: Cluster, workload: Workload, options: TPIOptions | None = None,
                 scheme: str = "tpi_star_tp", paper: str = PAPER) -> SchemeResult:
    """TPI-LLM on the cost model: TTFT for a prefill workload, steady token latency for decode."""
    options = options or default_options()
    run = simulate_tpi(model, cluster, workload, options)
    key = "ttft" if workload.phase == "prefill" else "token"
    latency = run.ttft_s if key == "ttft" else run.token_latency_s
    note = f"{options.allreduce} all-reduce, " + (f"scheduler w={options.window}" if options.scheduler else "no scheduler")
    return scheme_result(scheme, paper, workload, latency, run.breakdown[key], run.peak_memory_bytes,
                   run.memory_limit_bytes, note,
                   io_is_wait=options.scheduler or (options.first_token_loads and key == "ttft"),
                   extra={"run": run, "block_times": run.block_times},
                   operators=_operators(model, cluster, workload, options))


def _operators(model: TransformerConfig, cluster: Cluster, workload: Workload,
               options: TPIOptions) -> common.Breakdown:
    """The busiest device's fused rows of one layer: its share p_i of the heads and FFN columns."""
    shares = device_shares(cluster, options.split)
    n = cluster.n
    return common.busiest_breakdown(model, cluster.devices, workload, shares * model.n_heads, shares * model.d_ff,
                                    (workload.new_tokens,) * n, model.n_layers)


@register("tpi_star_tp", PAPER, moe=True, origin="TPI-LLM (Li et al.): star all-reduce, sliding-window scheduler",
          partition="tp", single_token="TPI-LLM's simulated decode steps carry one token each (schemes/tpi_llm.py build_tasks)")
def evaluate_tpi_star_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """TPI-LLM: capability-proportional heads, star all-reduce, sliding-window scheduler (w = 2)."""
    return evaluate_tpi(model, cluster, workload, default_options())


@register("tpi_star_tp_resident", PAPER, moe=True, origin="TPI-LLM (Li et al.) with its memory scheduler off (Table 1)",
          partition="tp", single_token="TPI-LLM's simulated decode steps carry one token each (schemes/tpi_llm.py build_tasks)")
@one_device_is_local
def evaluate_tpi_star_resident(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """TPI-LLM with its memory scheduler off (Table 1's scheduler=off): every weight resident before the prompt,
    an even split of heads and FFN columns, TPI-LLM's star all-reduce (what `workbench.measure.cluster` runs)."""
    options = default_options(scheduler=False, allreduce="star", split="equal", first_token_loads=False)
    return evaluate_tpi(model, cluster, workload, options, scheme="tpi_star_tp_resident")


@register("tp_ring_allreduce", "baseline", moe=True, origin="Galaxy-style ring TP, TPI-LLM's Galaxy baseline", family=PAPER,
          partition="tp", single_token="costed on TPI-LLM's simulator, whose decode steps carry one token "
          "(schemes/tpi_llm.py build_tasks)")
@one_device_is_local
def evaluate_tp_ring(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Galaxy-style tensor parallelism (TPI-LLM's Galaxy baseline): ring collectives, all weights resident
    before the prompt (no TPI-LLM loader)."""
    options = default_options(scheduler=False, allreduce="ring", split="equal", first_token_loads=False)
    return evaluate_tpi(model, cluster, workload, options,
                        scheme="tp_ring_allreduce", paper="baseline")

