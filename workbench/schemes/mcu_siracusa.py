"""Head-wise tensor partitioning on a system of MCUs (Bochem et al., Siracusa): placement, runtime, energy.

Who holds what (see `workbench.kernels.mcu_siracusa` for the program): each of N chips keeps 1/N of
the heads (Q/K/V columns, W_O rows, its KV-cache slice) and 1/N of the FFN width; nothing is
replicated; two hierarchical all-reduces (groups of four, reduce to the root, broadcast back) per block.

Per chip the memory hierarchy has three roles, innermost first: a tile level (L1: GEMM tiles, double
buffered), a working level (L2: what a block runs from) and a backing level (L3: off-chip). A block's
*state* on one chip is its weight slice W plus its KV slice. Placement, as the paper narrates it:
  * all_on_chip      - every block's state and the activations fit in L2: no L3 traffic at all;
  * double_buffered  - two blocks' states and the activations fit: the block runs from L2 while the next
                       block's state is prefetched from L3 (overlap costed with `workbench.core.simulate`);
  * streamed         - otherwise the block's weights and intermediate tensors live in L3 and every L1
                       tile is fetched from L3 through L2 (the paper's 1-4 chip TinyLlama cases).
Runtime of one block = compute + kernel launches + root work + L2<->L1 transfers + L3 streaming +
chip-to-chip (additive, as the paper's Fig. 4 breakdown; the launches and the root work are what GVSoC
counts as computation); the next block's prefetch runs in the background.

Fixed costs (issue 17): every chip launches every kernel of its slice (`block_launches`: the matmuls
with work plus the non-matmul kernels of `other_kernels`), each paying `DeviceSpec.kernel_launch_s`
however small its slice; at each synchronisation the leaders accumulate the partial sums they receive
(`root_work`: one accumulation kernel per tree level, serial on the path to the root, reading every
partial and writing the sum through L2, or L3 while the block is streamed) and the root normalises (one
kernel), and every MIPI message costs the link's per-message endpoint time at its sender and at its
receiver (a leader handles its k-1 messages one after another: `network` star per level). Energy is the
paper's E_total = N_C2C E_C2C + sum_j (P T_comp,j + N_L3 E_L3 + N_L2 E_L2) over the kernels' computation,
plus the fixed time (launches, message handling) at the power of the one controlling core
(`control_power`), and the root work's bytes at the L2 (L3) energy per byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
import pandas as pd

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.simulate import Timeline, pipeline
from workbench.core.units import MIB
from workbench.machine import network
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, costed, register
from workbench.schemes.mcu_tree import GROUP_SIZE, check_partition, tree_steps
from workbench.schemes.partitions import one_device_is_local

PAPER = "mcu_siracusa"
SCHEME = "mcu_headwise_tp"
CASES = ("all_on_chip", "double_buffered", "streamed")
L1_TILE_FRACTION = 0.5  # half of L1 holds the tiles being computed, half the next ones (double buffer)


# ---- kernels of one block on one chip --------------------------------------------------------------
@dataclass(frozen=True)
class Matmul:
    """`batch` products (m x k) @ (k x n) on one chip; B is a weight slice when `weight`, else K/V."""

    name: str
    batch: int
    m: int
    k: int
    n: int
    weight: bool = True

    @property
    def flops(self) -> float:
        """2 x multiply-adds."""
        return 2.0 * self.batch * self.m * self.k * self.n

    @property
    def kind(self) -> str:
        """GEMV when one row is computed (autoregressive), GEMM otherwise."""
        return "gemv" if self.m == 1 else "gemm"


def block_matmuls(model: TransformerConfig, n_chips: int, new_tokens: int, attended: int) -> list[Matmul]:
    """The matrix products one chip runs for one block (its heads and its FFN slice)."""
    s, e, t = new_tokens, model.d_model, attended
    heads, kv_cols, q_cols, ff = model.n_heads // n_chips, model.kv_dim // n_chips, model.q_dim // n_chips, \
        model.d_ff // n_chips
    out = [Matmul("q_proj", 1, s, e, q_cols), Matmul("k_proj", 1, s, e, kv_cols), Matmul("v_proj", 1, s, e, kv_cols),
           Matmul("scores", heads, s, model.d_head, t, weight=False),
           Matmul("context", heads, s, t, model.d_head, weight=False),
           Matmul("o_proj", 1, s, q_cols, e)]
    if model.gated_ffn:
        out += [Matmul("gate_proj", 1, s, e, ff), Matmul("up_proj", 1, s, e, ff), Matmul("down_proj", 1, s, ff, e)]
    else:
        out += [Matmul("ffn_up", 1, s, e, ff), Matmul("ffn_down", 1, s, ff, e)]
    return out


def other_kernels(model: TransformerConfig) -> tuple[str, ...]:
    """The non-matmul kernels every chip launches on its own heads / FFN slice per block: the softmax, the
    rotary embedding of Q and K (Llama family) and the FFN activation (SwiGLU's SiLU x up, or GELU). Their
    work is folded into the fitted efficiencies; their launches are charged (`block_launches`)."""
    names = ["softmax"]
    if model.family == "llama":
        names.append("rope")
    names.append("swiglu" if model.gated_ffn else "gelu")
    return tuple(names)


def other_kernel_bytes(model: TransformerConfig, n_chips: int, new_tokens: int, attended: int,
                       activation_bits: float) -> float:
    """Bytes one chip's `other_kernels` move per block (each reads its inputs and writes its output once):
    softmax over its heads' scores (H/N x S x T, read + write), RoPE on its Q and K slices (read + write),
    SwiGLU (gate and up read, product written) or GELU (read + write) on its F/N columns. Like the matmuls'
    tiles they cross L2<->L1, and L3 too when the block is streamed."""
    s, a = new_tokens, activation_bits / 8
    total = 2 * model.n_heads // n_chips * s * attended
    if model.family == "llama":
        total += 2 * s * (model.q_dim + model.kv_dim) // n_chips
    total += (3 if model.gated_ffn else 2) * s * (model.d_ff // n_chips)
    return float(total * a)


def block_launches(model: TransformerConfig, kernels: list[Matmul]) -> int:
    """Kernels one chip launches per block: every matmul with work plus `other_kernels` (a split kernel is
    still one launch on each chip, so this count does not fall with the number of chips)."""
    return sum(1 for mm in kernels if mm.flops > 0) + len(other_kernels(model))


def small_kernel_size(mm: Matmul) -> float:
    """Kernel size for the device's small-kernel efficiency curve: the kernel's FLOPs, GEMM or GEMV alike
    (the shared convention of `workbench.schemes.common.matmul_time` since issue 17)."""
    return mm.flops


def matmul_time(device: DeviceSpec, mm: Matmul, dtype: str) -> float:
    """Seconds for one kernel on the cluster: FLOPs / (peak x DeviceSpec.efficiency(kind, size, rows)), a GEMM of
    `mm.m` rows losing what the device's `gemm_half_rows` says (none on Siracusa), as in every scheme: the
    compute column of its operator row (`common.cost`; its bytes move by the chips' L2/L3 DMA model below)."""
    row = common.Operator(mm.name, mm.flops, 0.0, 0, dtype, mm.kind, rows=mm.m if mm.kind == "gemm" else None)
    return float(common.cost(device, [row])[0].compute_s)


def _tile_sizes(dim: int) -> np.ndarray:
    """Candidate tile sizes along one dimension: powers of two below it and the full dimension."""
    return np.unique(np.concatenate([2 ** np.arange(int(math.log2(dim)) + 1), [dim]]))


@lru_cache(maxsize=4096)
def l1_tile_traffic(m: int, k: int, n: int, a_bytes: float, b_bytes: float, l1_budget: float) -> float:
    """Fewest bytes moved L2<->L1 for C(m,n) = A(m,k) B(k,n) with tiles fitting `l1_budget`.

    `a_bytes`/`b_bytes` are bytes per element of A (and C) and of B. Output-stationary tiling
    (mt, kt, nt): A is read once per column tile, B once per row tile, C is written once (plus
    read-modify-write when K is split). If everything fits, each operand moves exactly once.
    """
    a, b, c = m * k * a_bytes, k * n * b_bytes, m * n * a_bytes
    if a + b + c <= l1_budget:
        return float(a + b + c)
    mt, kt, nt = np.meshgrid(_tile_sizes(m), _tile_sizes(k), _tile_sizes(n), indexing="ij")
    fits = (mt * kt + mt * nt) * a_bytes + kt * nt * b_bytes <= l1_budget
    if not fits.any():
        raise WorkbenchError(f"L1 budget {l1_budget:.0f} B cannot hold even a 1x1x1 tile")
    traffic = a * np.ceil(n / nt) + b * np.ceil(m / mt) + c * (2 * np.ceil(k / kt) - 1)
    return float(traffic[fits].min())


# ---- memory roles and placement ---------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryRoles:
    """Which level of a device tiles (L1), runs a block (L2) and backs the model (L3); None if absent."""

    tile: MemoryLevel | None
    work: MemoryLevel
    backing: MemoryLevel | None


def memory_roles(device: DeviceSpec) -> MemoryRoles:
    """Tile/work/backing levels: [L1, L2, L3] on an MCU, [work, backing] or a single level elsewhere."""
    levels = device.memory
    if not levels:
        raise WorkbenchError(f"device {device.name!r} has no memory levels; head-wise placement needs at least one")
    if len(levels) >= 3:
        return MemoryRoles(levels[0], levels[-2], levels[-1])
    if len(levels) == 2:
        return MemoryRoles(None, levels[0], levels[1])
    return MemoryRoles(None, levels[0], None)


def root_only_params(model: TransformerConfig) -> int:
    """Parameters that act on the full (S, E) tensor and live on the root chip: norms, b_O, b_2."""
    return model.norm_params() + (2 * model.d_model if model.has_bias else 0)


@dataclass(frozen=True)
class Placement:
    """What one chip (the root, the fullest) holds in its working memory (L2) and off-chip (L3)."""

    n_chips: int
    case: str
    weight_slice_bytes: float  # one block's weights on this chip
    kv_slice_bytes: float  # one block's KV-cache slice on this chip
    activation_bytes: float  # the block's intermediate tensors on this chip
    work_capacity_bytes: float
    backing_capacity_bytes: float
    n_layers: int
    l1_tile_budget_bytes: float = 0.0
    notes: str = ""

    @property
    def state_bytes(self) -> float:
        """One block's weights + KV slice on this chip."""
        return self.weight_slice_bytes + self.kv_slice_bytes

    @property
    def footprint_bytes(self) -> float:
        """Everything this chip holds somewhere: every block's state and one block's activations."""
        return self.n_layers * self.state_bytes + self.activation_bytes

    def work_contents(self) -> dict[str, float]:
        """Bytes in L2 by role (the streamed case holds only tiles in flight)."""
        if self.case == "all_on_chip":
            return {"weights (all blocks)": self.n_layers * self.weight_slice_bytes,
                    "KV cache (all blocks)": self.n_layers * self.kv_slice_bytes, "activations": self.activation_bytes}
        if self.case == "double_buffered":
            return {"weights (current block)": self.weight_slice_bytes, "KV cache (current block)": self.kv_slice_bytes,
                    "weights (next block, prefetch)": self.weight_slice_bytes,
                    "KV cache (next block, prefetch)": self.kv_slice_bytes, "activations": self.activation_bytes}
        return {"tiles in flight (from L3)": min(self.work_capacity_bytes, self.l1_tile_budget_bytes * 2)}

    def backing_contents(self) -> dict[str, float]:
        """Bytes in L3 by role."""
        if self.case == "all_on_chip":
            return {}
        out = {"weights (all blocks)": self.n_layers * self.weight_slice_bytes,
               "KV cache (all blocks)": self.n_layers * self.kv_slice_bytes}
        if self.case == "streamed":
            out["activations"] = self.activation_bytes
        return out

    def table(self) -> pd.DataFrame:
        """One row per (level, content) with bytes and MiB."""
        rows = [("L2", k, v) for k, v in self.work_contents().items()]
        rows += [("L3", k, v) for k, v in self.backing_contents().items()]
        frame = pd.DataFrame(rows, columns=["level", "content", "bytes"])
        frame["MiB"] = frame["bytes"] / MIB
        frame.insert(0, "case", self.case)
        frame.insert(0, "chips", self.n_chips)
        return frame


def activation_bytes(model: TransformerConfig, n_chips: int, new_tokens: int, attended: int, bits: float) -> float:
    """One chip's intermediate tensors of a block (no liveness reuse: a conservative footprint).

    Input (S,E) + residual (S,E, root) + local Q,K,V (S,(P+2Pkv)/N) + local scores (H/N,S,T)
    + local attention output (S,P/N) + partial output (S,E) + local FFN hidden (S,F/N) [x2 gated].
    """
    s, e = new_tokens, model.d_model
    ffn = model.d_ff // n_chips * (2 if model.gated_ffn else 1)
    elements = (3 * s * e + s * (model.q_dim + 2 * model.kv_dim) // n_chips
                + model.n_heads // n_chips * s * attended + s * model.q_dim // n_chips + s * ffn)
    return elements * bits / 8


def chip_budget_bytes(device: DeviceSpec) -> float:
    """The most one chip holds: its working memory, or its off-chip memory where that is larger (a footprint over
    it is the infeasible placement `place` names)."""
    roles = memory_roles(device)
    return max(roles.work.capacity_bytes, roles.backing.capacity_bytes if roles.backing else 0.0)


def place(model: TransformerConfig, device: DeviceSpec, n_chips: int, workload: Workload,
          strict: bool = True) -> Placement:
    """Where one chip keeps its slice; raises InfeasibleError if it fits nowhere (unless not `strict`)."""
    check_partition(model, n_chips)
    roles = memory_roles(device)
    wbits, abits = workload.weight_bits, workload.activation_bits
    sharded = model.block_params() - root_only_params(model)
    weight_slice = common.weight_bytes(sharded / n_chips + root_only_params(model), wbits)
    kv_slice = (2 * workload.kv_len * model.kv_dim / n_chips * abits / 8
                if workload.phase == "decode" and model.is_decoder else 0.0)
    acts = activation_bytes(model, n_chips, workload.new_tokens, workload.attended, abits)
    work = roles.work.capacity_bytes
    backing = roles.backing.capacity_bytes if roles.backing else 0.0
    state = weight_slice + kv_slice
    budget = roles.tile.capacity_bytes * L1_TILE_FRACTION if roles.tile else 0.0
    if model.n_layers * state + acts <= work:
        case = "all_on_chip"
    elif 2 * state + acts <= work:
        case = "double_buffered"
    else:
        case = "streamed"
    placement = Placement(n_chips, case, weight_slice, kv_slice, acts, work, backing, model.n_layers, budget)
    if case != "all_on_chip" and placement.footprint_bytes > backing:
        message = (f"infeasible: {model.name} at {wbits:g}-bit weights needs "
                   f"{placement.footprint_bytes / MIB:.1f} MiB per chip on {n_chips} chip(s) but a "
                   f"{device.name} holds {work / MIB:.1f} MiB on chip"
                   + (f" and {backing / MIB:.1f} MiB off chip" if backing else " and has no off-chip memory")
                   + f"; use more chips (up to {model.n_kv_heads}) or fewer bits")
        if strict:
            raise InfeasibleError(message)
        placement = Placement(n_chips, case, weight_slice, kv_slice, acts, work, backing, model.n_layers, budget,
                              notes=message)
    return placement


# ---- chip-to-chip: the hierarchical reduce + broadcast ---------------------------------------------
@dataclass(frozen=True)
class SyncCost:
    """One synchronisation (reduce to the root + broadcast back) over the group tree."""

    link_latency_s: float  # wire hops + per-message endpoint time, serialised at the leaders
    data_s: float
    system_bytes: float  # bytes sent over all links (for energy)
    energy_j: float
    levels: tuple[int, ...]  # largest group at each level
    endpoint_s: float = 0.0  # per-message endpoint time summed over every sender and receiver (for energy)

    @property
    def seconds(self) -> float:
        """Latency + serialised bytes."""
        return self.link_latency_s + self.data_s


def tree_levels(n_chips: int, group_size: int = GROUP_SIZE) -> tuple[int, ...]:
    """Size of the largest group at each level of the tree (e.g. 8 chips, groups of 4: (4, 2))."""
    largest: dict[int, int] = {}
    for stride, j, _ in tree_steps(n_chips, group_size):
        largest[stride] = max(largest.get(stride, 1), j + 1)
    return tuple(largest[s] for s in sorted(largest))


def sync_cost(n_chips: int, message_bytes: float, topology: network.Topology) -> SyncCost:
    """A reduce to the root and a broadcast back, level by level, each level a star in its group.

    At each level the leader receives (k-1) partials serially and later sends (k-1) copies back, so a
    level costs `network.collective_latency('star', ...)` for its largest group k, including the link's
    per-message endpoint time for each of the leader's k-1 messages; every non-root chip sends its message
    once up and receives it once down.
    """
    link = topology.link
    levels = tree_levels(n_chips, topology.group_size)
    link_s = data_s = system = 0.0
    for k in levels:
        for collective in ("reduce", "broadcast"):
            lat, dat = network.collective_latency("star", collective, k, message_bytes, link.bandwidth_bytes_per_s,
                                                  link.latency_s, topology.path_hops, breakdown=True,
                                                  message_overhead=link.message_overhead_s)
            link_s, data_s = link_s + float(lat), data_s + float(dat)
    messages = 0
    for _, _, pairs in tree_steps(n_chips, topology.group_size):
        system += 2 * len(pairs) * message_bytes  # up once, down once
        messages += 2 * len(pairs)
    energy = system * topology.path_hops * link.energy_pj_per_byte * 1e-12
    endpoint = 2 * messages * link.message_overhead_s  # each message: its sender and its receiver
    return SyncCost(link_s, data_s, system, energy, levels, endpoint)


@dataclass(frozen=True)
class RootWork:
    """One synchronisation's serial work on the way to the root: accumulate the partial sums at each tree
    level (the residual added at the first), then normalise on the root. Seconds and bytes moved."""

    accumulate_s: float
    norm_s: float
    launches: int
    l2_bytes: float  # through L2<->L1
    l3_bytes: float = 0.0  # through L3 too when the block's intermediate tensors live off chip (streamed)

    @property
    def seconds(self) -> float:
        """Accumulation + norm, on the critical path."""
        return self.accumulate_s + self.norm_s


def root_work(device: DeviceSpec, n_chips: int, message_bytes: float, group_size: int = GROUP_SIZE,
              streamed: bool = False) -> RootWork:
    """The partial-sum accumulation and the norm of one synchronisation, on the leaders' critical path.

    Each tree level is one elementwise kernel on its leader (launch + reading its k partials, the residual
    too at the first level, and writing the sum through the L2<->L1 DMA); one chip has no tree but still
    adds the residual (one kernel reading two tensors). The norm is one kernel on the root (read + write).
    Element-wise work on 8 SIMD cores is far faster than the DMA, so each kernel is bound by its bytes.
    When the block is `streamed` its intermediate tensors live in L3 (Sec. V-B), so these bytes also
    cross L3 (time and energy), as every streamed kernel's tiles do.
    """
    roles = memory_roles(device)
    per_byte = float(device.stream_time(1.0, roles.work.name))
    if streamed and roles.backing is not None:
        per_byte += float(device.stream_time(1.0, roles.backing.name))
    levels = tree_levels(n_chips, group_size) or (1,)
    acc_bytes = sum((k + (1 if i == 0 else 0) + 1) * message_bytes for i, k in enumerate(levels))
    norm_bytes = 2 * message_bytes
    launch = float(device.kernel_launch_s)
    moved = acc_bytes + norm_bytes
    return RootWork(len(levels) * launch + acc_bytes * per_byte, launch + norm_bytes * per_byte,
                    len(levels) + 1, moved, moved if streamed and roles.backing is not None else 0.0)


# ---- one block --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockCost:
    """Runtime and energy of one Transformer block on the whole system (the paper's unit of report)."""

    n_chips: int
    placement: Placement
    compute_s: float
    l2_s: float  # L2<->L1 transfers (not overlapped)
    l3_s: float  # L3 streaming in the streamed case
    c2c_link_s: float  # wire hops + per-message endpoint time of both synchronisations
    c2c_data_s: float
    prefetch_s: float  # next block's state from L3 (background, double-buffered case)
    l2_bytes_per_chip: float
    l3_bytes_per_chip: float  # streamed traffic or the prefetch
    c2c_bytes: float
    compute_energy_j: float
    l2_energy_j: float
    l3_energy_j: float
    c2c_energy_j: float
    idle_energy_j: float = 0.0
    kernels: tuple[Matmul, ...] = field(default=(), repr=False)
    launch_s: float = 0.0  # fixed: the kernel launches of one chip's slice and its per-layer overhead (every chip)
    root_s: float = 0.0  # serial: partial-sum accumulation up the tree and the root's norm, both syncs
    launches_per_chip: int = 0
    root_launches: int = 0  # accumulation + norm kernels on the path to the root, both syncs
    fixed_energy_j: float = 0.0  # control-core power x (launches + endpoint time), all chips (in compute_energy_j)
    root_energy_j: float = 0.0  # control-core power x the root work's launches (in compute_energy_j)

    @property
    def c2c_s(self) -> float:
        """Chip-to-chip time of the block's two synchronisations."""
        return self.c2c_link_s + self.c2c_data_s

    @property
    def fixed_s(self) -> float:
        """Size-independent device time on the critical path: the launches of the slice's kernels."""
        return self.launch_s

    @property
    def serial_s(self) -> float:
        """Work on one chip only: the accumulation up the tree and the norm (their launches included)."""
        return self.root_s

    @property
    def runtime_s(self) -> float:
        """Single-block latency with its state on chip (the paper's metric; the prefetch is hidden)."""
        return self.compute_s + self.launch_s + self.root_s + self.l2_s + self.l3_s + self.c2c_s

    @property
    def energy_j(self) -> float:
        """The paper's E_total for one block over all chips."""
        return self.compute_energy_j + self.l2_energy_j + self.l3_energy_j + self.c2c_energy_j + self.idle_energy_j

    @property
    def prefetch_exposed_s(self) -> float:
        """Steady-state stall per block when the prefetch is slower than the block."""
        return max(0.0, self.prefetch_s - self.runtime_s) if self.placement.case == "double_buffered" else 0.0

    def breakdown(self) -> dict[str, float]:
        """Fig. 4 components (computation, chip-to-chip, L2, L3), with the computation's fixed part
        (kernel launches) and its serial part (accumulation + norm on the root's path) shown apart."""
        return {"computation": self.compute_s, "launch": self.launch_s, "accumulation": self.root_s,
                "chip-to-chip": self.c2c_s, "L2": self.l2_s, "L3": self.l3_s}

    def energy_breakdown(self) -> dict[str, float]:
        """E_total's terms: cores, L3, L2, chip-to-chip (J); the cores' fixed-time and root-work parts apart."""
        return {"cores": self.compute_energy_j + self.idle_energy_j, "L3": self.l3_energy_j,
                "L2": self.l2_energy_j, "chip-to-chip": self.c2c_energy_j,
                "cores_fixed": self.fixed_energy_j, "cores_root": self.root_energy_j}


def control_power(device: DeviceSpec) -> float:
    """Watts while a chip spends fixed time (kernel set-up, DMA programming and waits, message handling):
    one core's share of the cluster power (P / cores). Deeploy runs the tiling loop and its DMA control on
    the cluster's master core and forks the 8 cores only around each tile's kernel (`pi_cl_team_fork`
    inside the tiling loop: pulp-platform/Deeploy Targets/PULPOpen/Bindings.py, ForkTransformer); the
    other cores wait on the event unit in between."""
    return float(device.power_w) / max(int(device.cores), 1)


def dtype_for_bits(device: DeviceSpec, workload: Workload) -> str:
    """Peak-rate dtype of the block's matmuls: the shared `common.compute_dtype` of the weight and activation
    precision (W8A8 -> int8, 4.5-bit q4_0 weights with fp16 activations -> fp16, ...)."""
    return common.workload_dtype(device, workload)


@dataclass(frozen=True)
class ChipCost:
    """One chip's share of a block: its kernels' compute, launches, transfers and bytes."""

    placement: Placement
    kernels: tuple[Matmul, ...]
    compute_s: float
    launch_s: float
    launches: int
    l2_bytes: float
    l2_s: float
    l3_bytes: float
    l3_s: float
    prefetch_s: float

    @property
    def busy_s(self) -> float:
        """What sets the pace among chips: compute + launches + L2 + L3 time."""
        return self.compute_s + self.launch_s + self.l2_s + self.l3_s


def _chip_cost(model: TransformerConfig, device: DeviceSpec, n_chips: int, workload: Workload,
               strict: bool) -> ChipCost:
    """Per-chip compute, launches, transfer times and bytes for one block."""
    placement = place(model, device, n_chips, workload, strict=strict)
    roles = memory_roles(device)
    dtype = dtype_for_bits(device, workload)
    kernels = block_matmuls(model, n_chips, workload.new_tokens, workload.attended)
    a_bytes = workload.activation_bits / 8
    compute = sum(matmul_time(device, mm, dtype) for mm in kernels)
    launches = block_launches(model, kernels)
    traffic = 0.0
    for mm in kernels:
        b_bytes = workload.weight_bits / 8 if mm.weight else a_bytes
        if roles.tile is not None:
            traffic += mm.batch * l1_tile_traffic(mm.m, mm.k, mm.n, a_bytes, b_bytes, placement.l1_tile_budget_bytes)
        else:
            traffic += mm.batch * ((mm.m * mm.k + mm.m * mm.n) * a_bytes + mm.k * mm.n * b_bytes)
    traffic += other_kernel_bytes(model, n_chips, workload.new_tokens, workload.attended, workload.activation_bits)
    l2_s = float(device.stream_time(traffic, roles.work.name))  # bandwidth x memory_efficiency, as every scheme
    l3_s = l3_bytes = prefetch_s = 0.0
    if placement.case == "streamed" and roles.backing is not None:
        l3_bytes = traffic
        l3_s = float(device.stream_time(traffic, roles.backing.name))
    elif placement.case == "double_buffered" and roles.backing is not None:
        l3_bytes = placement.state_bytes
        prefetch_s = float(device.stream_time(l3_bytes, roles.backing.name))
    fixed = float(device.launch_time(launches)) + common.layer_overhead(device)  # as every scheme (0 on Siracusa)
    return ChipCost(placement, tuple(kernels), float(compute), fixed, launches,
                    traffic, l2_s, l3_bytes, l3_s, prefetch_s)


def block_cost(model: TransformerConfig, cluster: Cluster, workload: Workload, strict: bool = True) -> BlockCost:
    """Runtime and energy of one block on `cluster` (the slowest chip sets the pace; the root does the
    serial accumulation and norm)."""
    n = cluster.n
    per_device: dict[str, tuple[DeviceSpec, ChipCost]] = {}
    for device in cluster.devices:
        if device.name not in per_device:
            per_device[device.name] = (device, _chip_cost(model, device, n, workload, strict))
    device, chip = max(per_device.values(), key=lambda item: item[1].busy_s)
    message = workload.new_tokens * model.d_model * workload.activation_bits / 8
    sync = sync_cost(n, message, cluster.topology)
    root_device = cluster.devices[0]
    root = root_work(root_device, n, message, cluster.topology.group_size, chip.placement.case == "streamed")
    runtime = chip.compute_s + chip.launch_s + 2 * root.seconds + chip.l2_s + chip.l3_s + 2 * sync.seconds
    compute_j = l2_j = l3_j = idle_j = fixed_j = 0.0
    for dev in cluster.devices:
        c = per_device[dev.name][1]
        roles = memory_roles(dev)
        compute_j += dev.power_w * c.compute_s + dev.idle_power_w * max(runtime - c.compute_s, 0.0)
        fixed_j += control_power(dev) * c.launch_s
        l2_j += c.l2_bytes * roles.work.energy_pj_per_byte * 1e-12
        if roles.backing is not None:
            l3_j += c.l3_bytes * roles.backing.energy_pj_per_byte * 1e-12
    # fixed time runs on each chip's controlling core (launches, and the per-message endpoint time of both
    # syncs at every sender and receiver); the root work is DMA-bound element-wise kernels: its launches on
    # the controlling core, its bytes through L2<->L1 (like every kernel's transfers, not charged P x t)
    p_control = control_power(root_device)
    fixed_j += p_control * 2 * sync.endpoint_s
    root_j = p_control * 2 * root.launches * float(root_device.kernel_launch_s)
    compute_j += fixed_j + root_j
    root_roles = memory_roles(root_device)
    l2_j += 2 * root.l2_bytes * root_roles.work.energy_pj_per_byte * 1e-12
    if root_roles.backing is not None:
        l3_j += 2 * root.l3_bytes * root_roles.backing.energy_pj_per_byte * 1e-12
    return BlockCost(n, chip.placement, chip.compute_s, chip.l2_s, chip.l3_s, 2 * sync.link_latency_s,
                     2 * sync.data_s, chip.prefetch_s, chip.l2_bytes, chip.l3_bytes, 2 * sync.system_bytes,
                     compute_j, l2_j, l3_j, 2 * sync.energy_j, idle_j, chip.kernels, chip.launch_s,
                     2 * root.seconds, chip.launches, 2 * root.launches, fixed_j, root_j)


def model_timeline(block: BlockCost, n_layers: int) -> Timeline:
    """All blocks of one inference step: the block chain with the double-buffered L3 prefetch overlapped."""
    case = block.placement.case
    preloaded = 1 if case == "double_buffered" else n_layers
    return pipeline([block.prefetch_s] * n_layers, [block.runtime_s] * n_layers, buffer_slots=2,
                    preloaded=preloaded, io_resource="L3->L2 DMA", compute_resource="cluster + links")


@register(SCHEME, PAPER, no_operators=common.MCU_ROWS,
          origin="Bochem et al.: head-wise partitioning on Siracusa MCUs", partition="tp",
          no_moe="the MCU's L2 tile schedule (the paper's) has no experts",
          streaming=False)  # it times its L2 streaming itself (memory_s)
@one_device_is_local
def evaluate_mcu_headwise_tp(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """Head-wise TP, no replication, hierarchical reduce in groups of four, double-buffered L3 prefetch.

    In a generation step of a decoder (`Workload.output_head`) the chips also split the LM head by
    vocabulary rows, streamed from their outermost memory (`common.output_head_time`), and max-reduce
    the (logit, index) pairs in one more synchronisation; the paper measures blocks only, so its own
    experiments (`workbench.papers.mcu_siracusa`) cost blocks without it. Head energy is not modelled.
    """
    block = block_cost(model, cluster, workload, strict=False)
    layers = model.n_layers
    timeline = model_timeline(block, layers)
    head = common.output_head_time(model, cluster.devices, workload)
    head_sync = sync_cost(cluster.n, 8.0, cluster.topology) if head > 0 and cluster.n > 1 else None
    head_link = head_sync.link_latency_s if head_sync else 0.0
    head_data = head_sync.data_s if head_sync else 0.0
    latency = timeline.makespan + head + head_link + head_data
    stall = timeline.makespan - layers * block.runtime_s  # prefetch not hidden behind the blocks (0 if it is)
    stall = stall if stall > 1e-9 * latency else 0.0
    footprint = block.placement.footprint_bytes
    own = f"{block.placement.case}; L2<->L1 transfers in memory_s"
    result = costed(
        SCHEME, PAPER, workload.phase, latency, tuple(d.name for d in cluster.devices), own,
        compute_s=layers * (block.compute_s + block.launch_s + block.root_s) + head,
        comm_link_latency_s=layers * block.c2c_link_s + head_link,
        comm_bytes_s=layers * block.c2c_data_s + head_data, io_stall_s=layers * block.l3_s + stall,
        memory_s=layers * block.l2_s, peak_memory_bytes=tuple(footprint for _ in cluster.devices),
        memory_budget_bytes=tuple(chip_budget_bytes(d) for d in cluster.devices),
        extra={"block": block, "timeline": timeline, "energy_j": layers * block.energy_j})
    if block.placement.notes:  # the busiest chip's reason (more chips or fewer bits), after the over-budget note
        result = replace(result, notes=f"{result.notes}; {block.placement.notes.removeprefix('infeasible: ')}")
    # the launches of every chip's kernels are fixed time; the accumulation + norm on the root's path is
    # serial (the LM head split by vocabulary rows is parallel work, and stays in compute)
    head_launch = float(cluster.devices[0].kernel_launch_s) if head > 0 else 0.0
    return result.carve(fixed_s=layers * block.fixed_s + head_launch, serial_s=layers * block.serial_s)
