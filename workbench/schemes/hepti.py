"""Hepti (Sec. 4.2-4.3): three weight-stationary modes and their linear cost model (Eq. 3-7).

Notation (the paper's, per Transformer block): m new tokens (rows), T attended tokens, E = d_model,
P = q_dim, F = d_ff, U head units (one KV group and its query heads; U = n_heads for MHA).
Split dimensions ("dims") the partition assigns per device: ``heads`` (units, R column-wise Q/K/V),
``rows`` (tokens, L row-wise), ``ffn`` (FFN columns, R column-wise / block-wise) and, in 2D-tiled
WS, ``cols`` (d_model columns of the output projection and MLP tiles).

Modes (what each device holds and which collectives run, per block):
  * ``ws``  - Q/K/V by heads, all-gather of the attention output, output GEMM + LN + MLP on its rows
    with full Wo/W1/W2 (replicated), all-gather of rows at the end.
  * ``1d``  - Q/K/V by heads, block-wise output GEMM (Wo rows of its heads) -> reduce-scatter +
    all-gather (rows), redundant LN, R column-wise W1 / block-wise W2 (its FFN columns) ->
    reduce-scatter + all-gather.
  * ``2d``  - devices on an R x C grid: Q/K/V by heads, all-gather of the attention output within a
    grid row, Wo/W1/W2 tiles split along both axes, all-reduces of partial sums, LN statistics
    all-reduced, final all-gather within the grid row.

Communication (Eq. 6): every collective is a ring over its group; the link of device i carries
c_b,i = (A - a_i) x unit bytes for an all-gather or reduce-scatter of a buffer of A units split a_i
(the paper's own example: (m - a_i) n 4 bytes for the WS row all-gather), 2 (g-1)/g of the buffer
for an all-reduce, and (g-1) messages of per-message latency. ``comm_model="shared"`` sums the
devices' link times (Eq. 6: a shared medium such as Wi-Fi serialises them); ``"ring"`` takes the
busiest link (full-duplex switched links in parallel; equals `workbench.machine.network`'s ring model for
even splits). Compute (Eq. 5): cycles_per_flop x FLOPs / frequency, linear in the split sizes. The
paper's planner and notebook use Eq. 5 as written; the arena's evaluators (`cluster_profiles(roofline=True)`)
take each step on each device as the slower of its FLOPs and the weights (and decode KV cache) it streams at
bandwidth x memory_efficiency, the roofline every other scheme is costed on (Eq. 5 alone made a memory-bound
decode step about twice as fast as the same work in any other scheme).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from workbench.core.apportion import apportion
from workbench.core.errors import WorkbenchError, require_choice, require_int, require_positive
from workbench.machine.hardware import DeviceSpec
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, register
from workbench.schemes.partitions import one_device_is_local

MODES = ("ws", "1d", "2d")
COMM_MODELS = ("shared", "ring")
MODE_LABELS = {"serial": "serial", "ws": "WS", "1d": "1D-tiled WS", "2d": "2D-tiled WS"}

HEPTI_WS, HEPTI_1D, HEPTI_2D = "hepti_ws", "hepti_1d", "hepti_2d"  # the schemes this module registers


# ---- partitions -------------------------------------------------------------------------------
def _check_split(name: str, sizes: tuple[int, ...], total: int) -> None:
    if any(not isinstance(s, int | np.integer) or s < 0 for s in sizes):
        raise WorkbenchError(f"{name} split sizes must be integers >= 0, got {sizes}")
    if sum(sizes) != total:
        raise WorkbenchError(f"{name} split sizes {sizes} must sum to {total} (Eq. 1), got {sum(sizes)}")


@dataclass(frozen=True)
class Partition:
    """How one block is split: per-device head units/rows/FFN columns, or per-axis tiles in 2D.

    ``heads`` is per device (2D: row-major grid order); ``rows`` per device (ws, 1d); ``ffn`` per
    device (1d) or per grid row (2d); ``cols`` per grid column (2d).
    """

    mode: str
    heads: tuple[int, ...]
    rows: tuple[int, ...] = ()
    ffn: tuple[int, ...] = ()
    cols: tuple[int, ...] = ()
    grid: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        require_choice("mode", self.mode, MODES)
        for name in ("heads", "rows", "ffn", "cols"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if not self.heads:
            raise WorkbenchError("a partition needs at least one device (heads is empty)")
        if self.mode == "2d":
            if self.grid is None:
                raise WorkbenchError("a 2d partition needs grid=(rows, cols)")
            r, c = self.grid
            require_int("grid rows", r, low=1)
            require_int("grid cols", c, low=1)
            if len(self.heads) != r * c or len(self.ffn) != r or len(self.cols) != c:
                raise WorkbenchError(f"2d partition on a {r}x{c} grid needs {r * c} heads, {r} ffn and {c} cols "
                                     f"entries, got {len(self.heads)}, {len(self.ffn)}, {len(self.cols)}")
        else:
            if self.grid is not None:
                raise WorkbenchError(f"mode {self.mode!r} takes no grid")
            if len(self.rows) != len(self.heads):
                raise WorkbenchError(f"rows ({len(self.rows)}) and heads ({len(self.heads)}) need one entry per device")
            if self.mode == "1d" and len(self.ffn) != len(self.heads):
                raise WorkbenchError(f"1d partition needs one ffn entry per device, got {len(self.ffn)}")

    @property
    def n(self) -> int:
        """Number of devices."""
        return len(self.heads)

    def check(self, cfg: TransformerConfig, seq_len: int) -> Partition:
        """Raise unless the split sizes cover the model's dimensions exactly (Eq. 1-2)."""
        _check_split("heads", self.heads, cfg.n_kv_heads)
        if self.mode in ("ws", "1d"):
            _check_split("rows", self.rows, seq_len)
        if self.mode in ("1d", "2d"):
            _check_split("ffn", self.ffn, cfg.d_ff)
        if self.mode == "2d":
            _check_split("cols", self.cols, cfg.d_model)
        return self

    def row_heads(self) -> tuple[int, ...]:
        """2D: head units held by each grid row."""
        r, c = self.grid
        return tuple(int(sum(self.heads[i * c:(i + 1) * c])) for i in range(r))


def proportional_split(total: int, weights) -> tuple[int, ...]:
    """`total` units in proportion to `weights`, rounded by largest remainder (sums exactly; ties: lower index)."""
    return tuple(int(v) for v in apportion(total, weights))


# ---- device profiles (the paper's Table (a): f_i, rho_i, s_i, BW) ------------------------------
@dataclass(frozen=True)
class DeviceProfile:
    """What Hepti knows about one device: clock f_i, cycles per FLOP rho_i, free memory s_i, link bandwidth."""

    name: str
    frequency_hz: float
    cycles_per_flop: float
    free_memory_bytes: float
    bandwidth_bytes_per_s: float
    latency_s: float = 0.0  # per message on this device's link (path hops x per-hop latency)
    # Rate at which a step's kernels stream their weights (and a decode step its KV cache) from the device's
    # memory. inf is the paper's Eq. 5 (compute only); the arena sets the device's bandwidth x memory_efficiency
    # so a step takes the slower of its FLOPs and its bytes (a roofline), as every other scheme is costed.
    stream_bytes_per_s: float = math.inf

    def __post_init__(self) -> None:
        require_positive(f"{self.name} frequency_hz", self.frequency_hz)
        require_positive(f"{self.name} cycles_per_flop", self.cycles_per_flop)
        require_positive(f"{self.name} bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        if not self.stream_bytes_per_s > 0:  # inf allowed: the paper's compute-only Eq. 5
            raise WorkbenchError(f"{self.name} stream_bytes_per_s must be > 0 (inf: compute only), got "
                                 f"{self.stream_bytes_per_s!r}")
        if not np.isfinite(self.free_memory_bytes) or self.free_memory_bytes < 0:
            raise WorkbenchError(f"{self.name} free_memory_bytes must be finite and >= 0, got {self.free_memory_bytes}")
        if not np.isfinite(self.latency_s) or self.latency_s < 0:
            raise WorkbenchError(f"{self.name} latency_s must be finite and >= 0, got {self.latency_s}")

    @property
    def seconds_per_flop(self) -> float:
        """rho_i / f_i: the Eq. 5 time per FLOP."""
        return self.cycles_per_flop / self.frequency_hz

    @property
    def flops_per_s(self) -> float:
        """f_i / rho_i."""
        return self.frequency_hz / self.cycles_per_flop

    @property
    def seconds_per_byte(self) -> float:
        """1 / stream_bytes_per_s (0 for the paper's compute-only Eq. 5)."""
        return 1.0 / self.stream_bytes_per_s

    def with_changes(self, **changes) -> DeviceProfile:
        """A copy with fields changed (re-validated)."""
        return replace(self, **changes)


def profile_from_device(device: DeviceSpec, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                        bits: float = 32, free_memory_bytes: float | None = None,
                        activation_bits: float | None = None, kind: str = "gemm",
                        rows: int | None = None) -> DeviceProfile:
    """A profile from a device preset: f_i = its clock (or peak), rho_i = f_i / (peak x efficiency), with the
    shared compute dtype of `bits`-bit weights and `activation_bits` activations (default: `bits`) and the
    kernel shape `kind` (GEMM, or GEMV when decoding) and, given `rows`, a GEMM of that many rows' efficiency
    (`DeviceSpec.gemm_half_rows`). Eq. 5 is linear: no roofline, no small-kernel loss."""
    dtype = common.compute_dtype(device, bits, bits if activation_bits is None else activation_bits)
    rate = device.peak(dtype) * float(device.efficiency(kind, rows=rows))
    frequency = device.clock_hz if device.clock_hz > 0 else rate
    memory = device.memory_bytes if free_memory_bytes is None else free_memory_bytes
    return DeviceProfile(device.name, frequency, frequency / rate, float(memory), bandwidth_bytes_per_s, latency_s)


def stream_rate(device: DeviceSpec) -> float:
    """Bytes per second the device streams from its outermost memory (bandwidth x memory_efficiency; inf for
    a device that lists no memory, which the roofline of `workbench.schemes.common` does not charge either)."""
    if not device.memory:
        return math.inf
    return 1.0 / float(device.stream_time(1.0))  # the one streaming rule (`DeviceSpec.stream_time`)


def cluster_profiles(cluster: Cluster, workload: Workload, roofline: bool = True) -> list[DeviceProfile]:
    """Profiles of a cluster's devices on its topology's link: per message, the hops x per-hop latency
    plus the link's per-message endpoint time; with `roofline` (the arena's), each device's memory streaming
    rate (`stream_rate`) and the efficiency of a GEMM of the step's rows, as `workbench.schemes.common` costs
    them; without it the paper's compute-only Eq. 5."""
    link = cluster.topology.link
    lat = cluster.topology.path_hops * link.latency_s + link.message_overhead_s
    kind = common.kernel_kind(workload.new_tokens)
    return [replace(profile_from_device(d, link.bandwidth_bytes_per_s, lat, workload.weight_bits,
                                        activation_bits=workload.activation_bits, kind=kind,
                                        rows=workload.new_tokens if roofline else None),
                    stream_bytes_per_s=stream_rate(d) if roofline else math.inf) for d in cluster.devices]


# ---- block shape: FLOPs and bytes per unit of each split dimension ------------------------------
@dataclass(frozen=True)
class BlockShape:
    """Per-block sizes for one workload: m rows, T attended, unit widths, bytes per element."""

    cfg: TransformerConfig
    m: int
    t: int
    wb: float  # weight bytes per element
    ab: float  # activation bytes per element
    decode: bool
    output_head: bool = True  # the primary computes the next token's logits (Workload.output_head)
    cb: float | None = None  # KV-cache bytes per element (Workload.cache_bits / 8; None: the activations')

    @classmethod
    def of(cls, cfg: TransformerConfig, workload: Workload) -> BlockShape:
        """The shape of `workload` on `cfg`."""
        return cls(cfg, workload.new_tokens, workload.attended, workload.weight_bits / 8,
                   workload.activation_bits / 8, workload.phase == "decode", workload.output_head,
                   workload.cache_bits / 8)

    @property
    def qd(self) -> int:
        """Query columns per head unit (r x D)."""
        return self.cfg.n_heads // self.cfg.n_kv_heads * self.cfg.d_head

    @property
    def nf(self) -> int:
        """FFN matrices (2 GELU, 3 SwiGLU)."""
        return 3 if self.cfg.gated_ffn else 2

    # FLOPs (2 per multiply-add, as workbench.model.models)
    def qkv_attention_flops_per_unit(self) -> float:
        """Q/K/V projection and attention of one head unit."""
        e, d = self.cfg.d_model, self.cfg.d_head
        return 2.0 * self.m * e * (self.qd + 2 * d) + 4.0 * self.m * self.t * self.qd

    def out_proj_flops_per_unit(self) -> float:
        """Output projection rows of one head unit (block-wise Wo)."""
        return 2.0 * self.m * self.qd * self.cfg.d_model

    def row_flops(self) -> float:
        """Output projection + FFN of one row (L row-wise, WS)."""
        c = self.cfg
        return 2.0 * c.q_dim * c.d_model + 2.0 * self.nf * c.d_model * c.d_ff

    def ffn_col_flops(self) -> float:
        """All FFN matrices of one FFN column (1D)."""
        return 2.0 * self.m * self.cfg.d_model * self.nf

    # weight bytes (per layer)
    def qkv_weight_bytes_per_unit(self) -> float:
        """Q/K/V columns (+ biases) of one head unit."""
        width = self.qd + 2 * self.cfg.d_head
        return (self.cfg.d_model + (1 if self.cfg.has_bias else 0)) * width * self.wb

    def small_vector_bytes(self) -> float:
        """Norms and output biases every device keeps whole."""
        c = self.cfg
        return (c.norm_params() + (2 * c.d_model if c.has_bias else 0)) * self.wb

    def ws_replicated_bytes(self) -> float:
        """Wo, W1/W2 (+ FFN bias) that WS replicates on every device, per layer."""
        c = self.cfg
        return (c.q_dim * c.d_model + self.nf * c.d_model * c.d_ff + (c.d_ff if c.has_bias else 0)) * self.wb

    def activation_bytes_per_unit(self) -> float:
        """Q/K/V, scores and attention output of one head unit (one block), + its KV cache when decoding."""
        c = self.cfg
        heads = c.n_heads // c.n_kv_heads
        act = self.m * (2 * self.qd + 2 * c.d_head) + heads * self.m * self.t
        cache = c.n_layers * 2 * self.t * c.d_head if self.decode else 0
        return act * self.ab + cache * (self.ab if self.cb is None else self.cb)  # the cache at its own width

    def primary_bytes(self) -> float:
        """Embedding and output head held by the primary device."""
        return (self.cfg.embedding_params() + self.cfg.head_params()) * self.wb

    def primary_flops(self) -> float:
        """The primary's LM head for the next token (decoders, when the workload includes the head)."""
        return 2.0 * self.cfg.vocab_size * self.cfg.d_model if self.cfg.is_decoder and self.output_head else 0.0

    # bytes a step streams from memory (the roofline's other side; the paper's Eq. 5 has none)
    def kv_read_bytes_per_unit(self) -> float:
        """K and V of every attended token for one head unit (one KV head), read by a decode step."""
        cache = self.ab if self.cb is None else self.cb
        return 2.0 * self.t * self.cfg.d_head * cache if self.decode else 0.0

    def wo_rows_bytes_per_unit(self) -> float:
        """The output projection's rows of one head unit (block-wise Wo, 1D)."""
        return self.qd * self.cfg.d_model * self.wb

    def ffn_col_bytes(self) -> float:
        """All FFN matrices' weights of one FFN column (+ its bias)."""
        return (self.nf * self.cfg.d_model + (1 if self.cfg.has_bias else 0)) * self.wb

    def primary_stream_bytes(self) -> float:
        """The output matrix the primary's LM head streams for the next token (0 without the head)."""
        return self.cfg.vocab_size * self.cfg.d_model * self.wb if self.primary_flops() else 0.0


def head_time(sh: BlockShape, primary: DeviceProfile) -> float:
    """Seconds of the primary's LM head: the slower of its FLOPs and its streamed matrix (Eq. 5: FLOPs only)."""
    return max(sh.primary_flops() * primary.seconds_per_flop, sh.primary_stream_bytes() * primary.seconds_per_byte)


# ---- the linear cost model of WS and 1D-tiled WS (Eq. 3-7) --------------------------------------
@dataclass(frozen=True)
class LinearStage:
    """One synchronised step b: per-device FLOPs and link bytes, both affine in the split sizes a_{d,i}."""

    name: str
    flops_per_unit: dict[str, float]
    link_const: float = 0.0
    link_per_unit: dict[str, float] = field(default_factory=dict)
    collectives: int = 0  # ring collectives in this step; each costs (n - 1) messages per device
    flops_const: float = 0.0
    bytes_const: float = 0.0  # bytes the step streams on a device that has work in it (weights, KV cache)
    bytes_per_unit: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LinearCost:
    """A mode's cost on a fixed device set: T = layers x sum_b [max_i Tc_bi + Tx_b] + primary's head (Eq. 7)."""

    mode: str
    dims: dict[str, int]
    stages: tuple[LinearStage, ...]
    mem_const: float
    mem_per_unit: dict[str, float]
    primary_mem: float
    primary_flops: float
    layers: int
    shape: BlockShape | None = None  # for the primary's head on the roofline (`head_time`)


def linear_cost(cfg: TransformerConfig, workload: Workload, mode: str) -> LinearCost:
    """The cost model of `mode` ("ws" or "1d") as affine functions of the split sizes (one layer x layers)."""
    require_choice("mode", mode, ("ws", "1d"))
    sh = BlockShape.of(cfg, workload)
    e, m, L = cfg.d_model, sh.m, cfg.n_layers
    attn_flops = sh.qkv_attention_flops_per_unit()
    io = 2 * m * e * sh.ab  # block input and output
    unit_bytes = sh.qkv_weight_bytes_per_unit() + sh.kv_read_bytes_per_unit()
    if mode == "ws":
        stages = (
            LinearStage("attention", {"heads": attn_flops}, m * cfg.q_dim * sh.ab, {"heads": -m * sh.qd * sh.ab}, 1,
                        bytes_per_unit={"heads": unit_bytes}),
            LinearStage("rows", {"rows": sh.row_flops()}, m * e * sh.ab, {"rows": -e * sh.ab}, 1,
                        bytes_const=sh.ws_replicated_bytes()),
        )
        mem_const = L * (sh.ws_replicated_bytes() + sh.small_vector_bytes()) + io + m * cfg.q_dim * sh.ab
        mem_per_unit = {"heads": L * sh.qkv_weight_bytes_per_unit() + sh.activation_bytes_per_unit(),
                        "rows": (cfg.d_ff * (sh.nf - 1) + e) * sh.ab}
        dims = {"heads": cfg.n_kv_heads, "rows": m}
    else:
        mlp = LinearStage("mlp", {"ffn": sh.ffn_col_flops()}, 2 * m * e * sh.ab, {"rows": -2 * e * sh.ab}, 2,
                          bytes_per_unit={"ffn": sh.ffn_col_bytes()})
        ffn_bytes = L * (sh.nf * e + (1 if cfg.has_bias else 0)) * sh.wb
        mem_const = L * sh.small_vector_bytes() + io + m * e * sh.ab
        if cfg.is_moe:  # the operator table's expert rows: linear in the columns of every expert; the router whole
            flops, streamed, router_flops, router_bytes = moe_ffn_terms(cfg, workload)
            mlp = replace(mlp, flops_per_unit={"ffn": flops}, bytes_per_unit={"ffn": streamed},
                          flops_const=router_flops, bytes_const=router_bytes)
            router = cfg.moe_layers * cfg.router_params()
            ffn_bytes = (L * cfg.ffn_params() - router) / cfg.d_ff * sh.wb
            mem_const += float(common.weight_bytes(router, common.ROUTER_BITS))
        stages = (
            LinearStage("attention", {"heads": attn_flops + sh.out_proj_flops_per_unit()},
                        2 * m * e * sh.ab, {"rows": -2 * e * sh.ab}, 2,
                        bytes_per_unit={"heads": unit_bytes + sh.wo_rows_bytes_per_unit()}),
            mlp,
        )
        wo_rows = sh.qd * e * sh.wb
        mem_per_unit = {"heads": L * (sh.qkv_weight_bytes_per_unit() + wo_rows) + sh.activation_bytes_per_unit(),
                        "rows": e * sh.ab,
                        "ffn": ffn_bytes + m * (sh.nf - 1) * sh.ab * cfg.experts_per_token}
        dims = {"heads": cfg.n_kv_heads, "rows": m, "ffn": cfg.d_ff}
    return LinearCost(mode, dims, stages, mem_const, mem_per_unit, sh.primary_bytes(), sh.primary_flops(), L, sh)


def moe_ffn_terms(cfg: TransformerConfig, workload: Workload) -> tuple[float, float, float, float]:
    """A MoE layer's 1D FFN stage from the operator table (`common.layer_operators`, the mean layer): FLOPs and
    streamed bytes per FFN column of every expert (the tokens' k experts computed, the slices of the experts they
    touch read; both linear in the columns), and the router's FLOPs and f32 bytes, whole on each device."""
    rows = {op.name: op for op in common.layer_operators(cfg, workload, 0, 1, workload.new_tokens)}
    flops = float(rows["ffn1"].flops + rows["ffn2"].flops)
    streamed = float(rows["ffn1"].bytes + rows["ffn2"].bytes)
    return flops, streamed, float(rows["router"].flops), float(rows["router"].bytes)


def _affine(const: float, per_unit: dict[str, float], alloc: dict[str, np.ndarray]) -> np.ndarray:
    """const + sum_d coef_d a_d, broadcast over any leading batch axes of the (..., n) split arrays."""
    out = 0.0
    for dim, coef in per_unit.items():
        out = out + coef * alloc[dim]
    shape = np.broadcast_shapes(*(np.shape(a) for a in alloc.values()))
    return np.broadcast_to(out + float(const), shape).astype(float)


def device_memory(cost: LinearCost, alloc: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes each device needs (Eq. 3): stationary weights of every layer + one block's activations."""
    alloc = {d: np.asarray(alloc[d], dtype=float) for d in cost.dims}
    mem = _affine(cost.mem_const, cost.mem_per_unit, alloc).copy()
    mem[..., 0] += cost.primary_mem
    return mem


@dataclass(frozen=True)
class CommTerms:
    """Communication of one step: bytes / bandwidth and per-message latency (seconds)."""

    bytes_s: np.ndarray | float
    link_s: np.ndarray | float


def comm_terms(link_bytes, messages, profiles: list[DeviceProfile], comm_model: str) -> CommTerms:
    """Eq. 6 over per-device link bytes and message counts (last axis = devices): summed ("shared") or
    the busiest link ("ring")."""
    require_choice("comm_model", comm_model, COMM_MODELS)
    bw = np.array([p.bandwidth_bytes_per_s for p in profiles])
    lat = np.array([p.latency_s for p in profiles])
    times, links = np.asarray(link_bytes, float) / bw, np.asarray(messages, float) * lat
    if comm_model == "shared":
        return CommTerms(times.sum(-1), links.sum(-1))
    return CommTerms(times.max(-1, initial=0.0), links.max(-1, initial=0.0))


@dataclass(frozen=True)
class Breakdown:
    """Latency of a plan split into compute / bytes / link latency, per step and per device memory."""

    latency_s: float
    compute_s: float
    comm_bytes_s: float
    comm_link_s: float
    memory_bytes: tuple[float, ...]
    stages: dict[str, float]


def step_seconds(flops, n_bytes, seconds_per_flop, seconds_per_byte) -> np.ndarray:
    """Per device, the slower of a step's FLOPs and the bytes it streams; a device with no FLOPs in the step
    runs no kernel and streams nothing. With seconds_per_byte 0 this is Eq. 5."""
    flops = np.asarray(flops, dtype=float)
    stream = np.where(flops > 0, np.asarray(n_bytes, dtype=float) * seconds_per_byte, 0.0)
    return np.maximum(flops * seconds_per_flop, stream)


def linear_latency(cost: LinearCost, profiles: list[DeviceProfile], alloc: dict[str, np.ndarray],
                   comm_model: str = "shared") -> dict[str, np.ndarray]:
    """Eq. 5-7 for split sizes of shape (..., n) (a batch of candidate partitions at once).

    Returns arrays over the batch: latency, compute, comm_bytes, comm_link and per-stage seconds
    (all x layers, + the primary's head), and per-device memory (..., n).
    """
    n = len(profiles)
    spf = np.array([p.seconds_per_flop for p in profiles])
    spb = np.array([p.seconds_per_byte for p in profiles])
    alloc = {d: np.asarray(alloc[d], dtype=float) for d in cost.dims}
    L = cost.layers
    out = {"compute": 0.0, "comm_bytes": 0.0, "comm_link": 0.0}
    for st in cost.stages:
        t_c = np.max(step_seconds(_affine(st.flops_const, st.flops_per_unit, alloc),
                                  _affine(st.bytes_const, st.bytes_per_unit, alloc), spf, spb), axis=-1)
        if n > 1:
            link = _affine(st.link_const, st.link_per_unit, alloc)
            terms = comm_terms(link, np.full(n, st.collectives * (n - 1)), profiles, comm_model)
        else:
            terms = CommTerms(0.0, 0.0)
        out["compute"] = out["compute"] + L * t_c
        out["comm_bytes"] = out["comm_bytes"] + L * terms.bytes_s
        out["comm_link"] = out["comm_link"] + L * terms.link_s
        out[f"stage:{st.name}"] = L * (t_c + terms.bytes_s + terms.link_s)
    head = head_time(cost.shape, profiles[0]) if cost.shape is not None else cost.primary_flops * spf[0]
    out["compute"] = out["compute"] + head
    out["latency"] = out["compute"] + out["comm_bytes"] + out["comm_link"]
    out["memory"] = device_memory(cost, alloc)
    return out


def evaluate_linear(cost: LinearCost, profiles: list[DeviceProfile], alloc: dict[str, np.ndarray],
                    comm_model: str = "shared") -> Breakdown:
    """T of Eq. 7 for one partition's split sizes `alloc` on `profiles` (ring order, primary first)."""
    r = linear_latency(cost, profiles, alloc, comm_model)
    stages = {k.removeprefix("stage:"): float(v) for k, v in r.items() if k.startswith("stage:")}
    return Breakdown(float(r["latency"]), float(r["compute"]), float(r["comm_bytes"]), float(r["comm_link"]),
                     tuple(float(v) for v in r["memory"]), stages)


# ---- 2D-tiled WS: exact cost of a tiled partition (bilinear in the two axes' shares) -------------
def _ar_link(group: int, elements) -> np.ndarray:
    """Link bytes (in elements) of a ring all-reduce over `group` devices: 2 (g-1)/g of the buffer."""
    return 2.0 * (group - 1) / group * np.asarray(elements, dtype=float)


def _steps_2d(cfg: TransformerConfig, sh: BlockShape, part: Partition) -> list[tuple]:
    """(name, FLOPs, link elements, messages) per device for each synchronised step of a 2D block."""
    R, C = part.grid
    m, e = sh.m, cfg.d_model
    h = np.asarray(part.heads, float)
    h_row = np.repeat(np.asarray(part.row_heads(), float), C)  # H_r of each device's grid row
    f = np.repeat(np.asarray(part.ffn, float), C)  # F_r
    ec = np.tile(np.asarray(part.cols, float), R)  # e_c
    norms = 2 if cfg.family == "bert" else 1
    stats = 1 if cfg.family == "llama" else 2
    n_up = sh.nf - 1
    ones = np.ones(part.n)
    return [
        ("attention", h * sh.qkv_attention_flops_per_unit(), (h_row - h) * m * sh.qd, (C - 1) * ones),
        ("out_proj", 2.0 * m * h_row * sh.qd * ec, _ar_link(R, m * ec) + _ar_link(C, m * stats * ones),
         2 * (R - 1) + 2 * (C - 1) * ones),
        ("mlp_up", 2.0 * m * ec * f * n_up, _ar_link(C, m * f) * n_up, 2 * (C - 1) * n_up * ones),
        ("mlp_down", 2.0 * m * f * ec,
         _ar_link(R, m * ec) + (norms - 1) * _ar_link(C, m * stats * ones) + (e - ec) * m,
         (2 * (R - 1) + 2 * (C - 1) * (norms - 1) + (C - 1)) * ones),
    ]


def _streamed_2d(sh: BlockShape, part: Partition) -> dict[str, np.ndarray]:
    """Bytes each device streams in each step of `_steps_2d`: its weight tiles, and its heads' KV cache when
    decoding."""
    R, C = part.grid
    h = np.asarray(part.heads, float)
    h_row = np.repeat(np.asarray(part.row_heads(), float), C)
    f = np.repeat(np.asarray(part.ffn, float), C)
    ec = np.tile(np.asarray(part.cols, float), R)
    return {"attention": h * (sh.qkv_weight_bytes_per_unit() + sh.kv_read_bytes_per_unit()),
            "out_proj": h_row * sh.qd * ec * sh.wb, "mlp_up": (sh.nf - 1) * ec * f * sh.wb,
            "mlp_down": f * ec * sh.wb}


def evaluate_2d(cfg: TransformerConfig, workload: Workload, part: Partition, profiles: list[DeviceProfile],
                comm_model: str = "shared") -> Breakdown:
    """T (Eq. 7) and per-device memory of a 2D-tiled partition; `profiles` in row-major grid order."""
    sh = BlockShape.of(cfg, workload)
    part.check(cfg, sh.m)
    if part.mode != "2d" or len(profiles) != part.n:
        raise WorkbenchError(f"evaluate_2d needs a 2d partition and one profile per grid cell ({part.n})")
    R, C = part.grid
    m, e, ab, L = sh.m, cfg.d_model, sh.ab, cfg.n_layers
    h = np.asarray(part.heads, float)
    h_row = np.repeat(np.asarray(part.row_heads(), float), C)
    f = np.repeat(np.asarray(part.ffn, float), C)
    ec = np.tile(np.asarray(part.cols, float), R)
    n_up = sh.nf - 1
    spf = np.array([p.seconds_per_flop for p in profiles])
    spb = np.array([p.seconds_per_byte for p in profiles])
    steps, streamed = _steps_2d(cfg, sh, part), _streamed_2d(sh, part)
    compute = comm_b = comm_l = 0.0
    stages = {}
    for name, flops, link, msgs in steps:
        t_c = float(np.max(step_seconds(flops, streamed[name], spf, spb)))
        terms = comm_terms(link * ab, msgs, profiles, comm_model) if part.n > 1 else CommTerms(0.0, 0.0)
        terms = CommTerms(float(terms.bytes_s), float(terms.link_s))
        compute, comm_b, comm_l = compute + t_c, comm_b + terms.bytes_s, comm_l + terms.link_s
        stages[name] = L * (t_c + terms.bytes_s + terms.link_s)
    head = head_time(sh, profiles[0])
    weights = L * (h * sh.qkv_weight_bytes_per_unit()
                   + (h_row * sh.qd * ec + sh.nf * ec * f) * sh.wb
                   + ((2 * ec + f) * sh.wb if cfg.has_bias else 0) + sh.small_vector_bytes())
    act = (2 * m * e + m * h_row * sh.qd + 2 * m * ec + m * f * n_up) * ab + h * sh.activation_bytes_per_unit()
    memory = weights + act
    memory[0] += sh.primary_bytes()
    return Breakdown(float(L * (compute + comm_b + comm_l) + head), float(L * compute + head), float(L * comm_b),
                     float(L * comm_l), tuple(float(v) for v in memory), stages)


def evaluate_partition(cfg: TransformerConfig, workload: Workload, part: Partition,
                       profiles: list[DeviceProfile], comm_model: str = "shared") -> Breakdown:
    """The one cost model for any partition: linear (WS, 1D) or tiled (2D)."""
    if len(profiles) != part.n:
        raise WorkbenchError(f"partition has {part.n} devices but {len(profiles)} profiles were given")
    if part.mode == "2d":
        return evaluate_2d(cfg, workload, part, profiles, comm_model)
    part.check(cfg, workload.new_tokens)
    cost = linear_cost(cfg, workload, part.mode)
    alloc = {"heads": part.heads, "rows": part.rows, "ffn": part.ffn}
    return evaluate_linear(cost, profiles, {d: alloc[d] for d in cost.dims}, comm_model)


def link_bytes_per_device(cfg: TransformerConfig, workload: Workload, part: Partition) -> np.ndarray:
    """Bytes through each device's link per block (the c_b,i of Eq. 6 summed over the steps b)."""
    sh = BlockShape.of(cfg, workload)
    part.check(cfg, sh.m)
    if part.n == 1:
        return np.zeros(1)
    if part.mode == "2d":
        return sum(link for _, _, link, _ in _steps_2d(cfg, sh, part)) * sh.ab
    cost = linear_cost(cfg, workload, part.mode)
    alloc = {"heads": np.asarray(part.heads, float), "rows": np.asarray(part.rows, float),
             "ffn": np.asarray(part.ffn, float)}
    return sum(_affine(st.link_const, st.link_per_unit, {d: alloc[d] for d in cost.dims}) for st in cost.stages)


# ---- capability-proportional partitions (the arena's default; the MILP planner optimises them) ---
def grid_shape(n: int) -> tuple[int, int]:
    """The most square R x C grid with R x C = n (R <= C)."""
    require_int("devices", n, low=1)
    rows = max(r for r in range(1, int(np.sqrt(n)) + 1) if n % r == 0)
    return rows, n // rows


def proportional_partition(cfg: TransformerConfig, workload: Workload, mode: str,
                           profiles: list[DeviceProfile]) -> Partition:
    """Every split in proportion to the devices' FLOP rates (2D: per grid row / column sums)."""
    require_choice("mode", mode, MODES)
    rate = np.array([p.flops_per_s for p in profiles])
    heads = proportional_split(cfg.n_kv_heads, rate)
    if mode == "ws":
        return Partition("ws", heads, proportional_split(workload.new_tokens, rate))
    if mode == "1d":
        return Partition("1d", heads, proportional_split(workload.new_tokens, rate),
                         proportional_split(cfg.d_ff, rate))
    rows, cols = grid_shape(len(profiles))
    grid_rate = rate.reshape(rows, cols)
    row_heads = proportional_split(cfg.n_kv_heads, grid_rate.sum(1))
    heads = sum((proportional_split(hr, grid_rate[r]) if hr else (0,) * cols
                 for r, hr in enumerate(row_heads)), ())
    return Partition("2d", heads, ffn=proportional_split(cfg.d_ff, grid_rate.sum(1)),
                     cols=proportional_split(cfg.d_model, grid_rate.sum(0)), grid=(rows, cols))


def scheme_result(name: str, workload: Workload, bd: Breakdown, profiles: list[DeviceProfile],
                  notes: str = "", extra: dict | None = None) -> SchemeResult:
    """Wrap a breakdown as the arena's SchemeResult (OOM when a device needs more than its free memory)."""
    budget = tuple(p.free_memory_bytes for p in profiles)
    return SchemeResult(name, "hepti", workload.phase, float(bd.latency_s), compute_s=float(bd.compute_s),
                        comm_link_latency_s=float(bd.comm_link_s), comm_bytes_s=float(bd.comm_bytes_s),
                        peak_memory_bytes=bd.memory_bytes, memory_budget_bytes=budget, notes=notes,
                        extra={"stages": bd.stages, **(extra or {})})


def fixed_step_time(model: TransformerConfig, devices, workload: Workload) -> float:
    """Size-independent seconds of one step: every device launches each block's kernels (its slices of them;
    splitting a kernel does not split its launch) and pays its per-layer overhead, the slowest setting the
    syncs (`common.fixed_layer_time`), and the primary launches the head and does the step's host work."""
    kernels = common.kernels_per_layer(model)  # a MoE layer's router is one more
    layers = model.n_layers * max(common.fixed_layer_time(d, kernels) for d, _ in common.distinct_devices(devices))
    return layers + common.step_fixed_time(model, devices[0], workload, n_layers=0)


def _evaluate_mode(mode: str, model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    profiles = cluster_profiles(cluster, workload)
    part = proportional_partition(model, workload, mode, profiles)
    bd = evaluate_partition(model, workload, part, profiles, comm_model="ring")
    fixed = fixed_step_time(model, cluster.devices, workload)
    head = head_time(BlockShape.of(model, workload), profiles[0])  # on the primary only
    bd = replace(bd, latency_s=bd.latency_s + fixed, compute_s=bd.compute_s + fixed)
    return scheme_result(f"hepti_{mode}", workload, bd, profiles,
                         notes=f"{MODE_LABELS[mode]}, rate-proportional split, ring links",
                         extra={"partition": part}).carve(fixed, head)


@register("hepti_ws", "hepti", no_operators=common.HEPTI_ROWS,
          origin="Hepti Sec. 4.2: the WS mode (heads, then rows)", partition="hybrid",
          no_moe="each device streams the experts its own rows pick, not linear in the rows as Hepti's model needs")
@one_device_is_local
def evaluate_hepti_ws(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Hepti WS: heads for Q/K/V, rows for Wo + MLP with replicated weights, two all-gathers per block."""
    return _evaluate_mode("ws", model, cluster, workload)


@register("hepti_1d", "hepti", no_operators=common.HEPTI_ROWS,
          moe=True, origin="Hepti Sec. 4.2: the 1D-tiled mode", partition="tp")
@one_device_is_local
def evaluate_hepti_1d(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Hepti 1D-tiled WS: every weight split once, two reduce-scatter + all-gather pairs per block (a mixture of
    experts: FFN columns of every expert, `moe_ffn_terms`)."""
    return _evaluate_mode("1d", model, cluster, workload)


@register("hepti_2d", "hepti", no_operators=common.HEPTI_ROWS,
          origin="Hepti Sec. 4.2: the 2D-tiled mode", partition="tp",
          no_moe="the router needs the whole hidden dimension the 2D tiles split, and the paper places no router")
@one_device_is_local
def evaluate_hepti_2d(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Hepti 2D-tiled WS on the most square grid: tiles, all-reduces of partial sums within rows/columns."""
    return _evaluate_mode("2d", model, cluster, workload)


# ---- which weight slices each device holds (what a re-partition has to load) ----------------------
Rect = tuple[int, int, int, int]  # rows [r0, r1) x cols [c0, c1) in a matrix's own units


def _ranges(sizes) -> list[tuple[int, int]]:
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return [(int(a), int(b)) for a, b in zip(off[:-1], off[1:])]


def weight_slices(cfg: TransformerConfig, part: Partition) -> list[dict[str, Rect]]:
    """Per device (partition order), the rectangle it holds of each weight matrix of one layer.

    Units: "qkv" head units x 1; "wo" head units x d_model; "w_up" (W1, and the gate) d_model x
    FFN; "w_down" FFN x d_model. WS holds Wo and the FFN whole.
    """
    u, e, f = cfg.n_kv_heads, cfg.d_model, cfg.d_ff
    heads = _ranges(part.heads)
    out = []
    if part.mode == "2d":
        rows, cols = part.grid
        group = _ranges(part.row_heads())
        ffn, col = _ranges(part.ffn), _ranges(part.cols)
        for k, (h0, h1) in enumerate(heads):
            r, c = divmod(k, cols)
            (g0, g1), (f0, f1), (c0, c1) = group[r], ffn[r], col[c]
            out.append({"qkv": (h0, h1, 0, 1), "wo": (g0, g1, c0, c1), "w_up": (c0, c1, f0, f1),
                        "w_down": (f0, f1, c0, c1)})
        return out
    ffn = _ranges(part.ffn) if part.mode == "1d" else [(0, f)] * part.n
    for (h0, h1), (f0, f1) in zip(heads, ffn):
        wo = (0, u, 0, e) if part.mode == "ws" else (h0, h1, 0, e)
        out.append({"qkv": (h0, h1, 0, 1), "wo": wo, "w_up": (0, e, f0, f1), "w_down": (f0, f1, 0, e)})
    return out


def slice_cell_bytes(cfg: TransformerConfig, workload: Workload) -> dict[str, float]:
    """Bytes of one cell (unit x unit) of each matrix in `weight_slices`."""
    sh = BlockShape.of(cfg, workload)
    return {"qkv": sh.qkv_weight_bytes_per_unit(), "wo": sh.qd * sh.wb, "w_up": (sh.nf - 1) * sh.wb, "w_down": sh.wb}


def _area(r: Rect) -> int:
    return max(r[1] - r[0], 0) * max(r[3] - r[2], 0)


def _overlap(a: Rect, b: Rect) -> int:
    return _area((max(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), min(a[3], b[3])))


def new_slice_bytes(cfg: TransformerConfig, workload: Workload, old: dict[str, Rect] | None,
                    new: dict[str, Rect]) -> float:
    """Bytes per layer a device must load to go from holding `old` to `new` (None: holds nothing)."""
    cell = slice_cell_bytes(cfg, workload)
    return float(sum(cell[k] * (_area(r) - (_overlap(r, old[k]) if old else 0)) for k, r in new.items()))
