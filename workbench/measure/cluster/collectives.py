"""The cost model of the measured collectives, as gloo and XLA run them (its constants: `workbench.measure.cluster.fit`).

A program's time on n processes with a buffer of m bytes (`model_time`):

    dispatch                               calling the compiled program (measured: `program_dispatch`)
  + endpoint messages x sides x o         per-message software at the busiest endpoint (fitted, one for all links)
  + steps x L                              wire latency per traversal (loopback: none; shaped: fitted)
  + busiest bytes x beta                   per-byte cost of the link class (fitted)
  + oversubscription wait                  steps in which more processes must act than there are cores

with steps / endpoint messages / busiest bytes from `workbench.machine.network.collective_cost` for the algorithm
the runtime really runs (`PROGRAM_ALGORITHM`): psum = gloo's segmented ring all-reduce, all_gather = gloo's
ring all-gather in half blocks, psum_scatter = gloo's ReduceScatterHalvingDoubling, the ppermute star /
ring / tree = the TPI-LLM kernel's collective-permutes (`workbench.kernels.tpi_llm`).

Oversubscription: with more processes than cores, a process that must act in a step while it is off-core
waits for the scheduler, which switches at its tick (1 / CONFIG_HZ: 4 ms here). In a step where `a`
processes must act on C cores, a fraction max(0, a - C) / a of them is off-core and waits half a tick on
average; the ring and gloo steps need every process, a star step two, a tree level the pairs still in it.
No constant of this term is fitted: the tick is the kernel's, the cores are the machine's.

The fastest call of a point (`min_s`) is one the scheduler never delayed, so it is modelled without the
wait (`SCHEDULER_FREE`), but with what oversubscription costs every call: the endpoints' software (o) and,
on loopback, the kernel's copies (beta) are CPU work, and a step in which `a` processes act on C < a cores
takes a / C times as long (`cpu_share`). On this VM the median of a small message is decided by whether
more than half of its calls met a 4 ms tick, which changes from run to run (the cluster notebook shows
it); the fastest call is the reproducible statistic, as it is for the device micro-benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_int, require_non_negative, require_positive
from workbench.core.io import DATA_DIR
from workbench.machine.network import (
    Step,
    Transfer,
    collective_cost,
    gloo_segments_per_rank,
    token_bucket_time,
    tree_depth,
)

CORE_ALGORITHMS = ("ring", "tree", "star")
# (algorithm of workbench.machine.network, collective) each measured program runs on XLA's CPU gloo backend.
PROGRAM_ALGORITHM = {"psum": ("gloo_ring", "all_reduce"), "all_gather": ("gloo_ring", "all_gather"),
                     "psum_scatter": ("gloo_halving_doubling", "reduce_scatter"), "star": ("star", "all_reduce"),
                     "ring_ppermute": ("ring", "all_reduce"), "tree_ppermute": ("tree", "all_reduce"),
                     "star_after_compute": ("star", "all_reduce"), "star_after_streaming": ("star", "all_reduce"),
                     "star_in_decoder_layers": ("star", "all_reduce")}
# Derived sync kinds (`SYNC_AFTER`): syncs that follow every process's own work, so every process acts in them
SYNCS_AFTER_WORK = ("star_after_compute", "star_after_streaming", "star_in_decoder_layers")
MATCHED_ALGORITHM = {p: a for p, (a, _) in PROGRAM_ALGORITHM.items()}
# Sides of each message a process handles in turn, per message of the table: in a collective-permute of the
# ppermute ring every process sends to one neighbour and receives from the other, one after the other on
# its thread (2); a star or tree collective-permute gives each process one side (1); gloo's ring and
# halving-doubling keep two operations in flight, so a step's send and receive overlap (1). Of each round's
# two messages in gloo's ReduceScatterHalvingDoubling only the data is waited for in turn: the notification is
# sent after the round's reduction and its receive is waited for once, at the end of `run()`, long after it
# arrived (gloo/reduce_scatter.h), so the table's data + notification pair costs one message's time (0.5 each).
ENDPOINT_SIDES = {"ring_ppermute": 2, "psum_scatter": 0.5}
LOOPBACK = "loopback"
STATISTICS = ("mean_s", "median_s", "min_s", "p25_s")
SCHEDULER_FREE = ("min_s", "per_sync_s")  # statistics no scheduler tick delayed: no wait, CPU sharing only
WITH_BUCKET = ("min_s",)  # statistics of a call that starts with a full tbf bucket (one call, then idle)


@dataclass(frozen=True)
class LinkModel:
    """One link class: per-message endpoint software o (s), wire latency per traversal L (s), beta (s/B)."""

    link_class: str
    message_overhead_s: float
    latency_s: float
    byte_cost_s: float
    burst_bytes: float = 0.0  # tbf's bucket: this many bytes of a call pass at `burst_byte_cost_s`
    burst_byte_cost_s: float = 0.0

    def __post_init__(self) -> None:
        require_non_negative("message_overhead_s", self.message_overhead_s)
        require_non_negative("latency_s", self.latency_s)
        require_positive("byte_cost_s", self.byte_cost_s)
        require_non_negative("burst_bytes", self.burst_bytes)
        require_non_negative("burst_byte_cost_s", self.burst_byte_cost_s)

    def bytes_time(self, busiest_bytes: float) -> float:
        """Seconds for the busiest link's bytes of one call: the first `burst_bytes` pass at the bucket's
        line rate (a call that starts with a full bucket: one period of `network.token_bucket_time`), the rest at
        the shaped rate."""
        fast = min(float(busiest_bytes), self.burst_bytes)
        call = [Step(0.0, (Transfer(0, 1, float(busiest_bytes)),))]
        return token_bucket_time(call, self.bandwidth_bytes_per_s, self.burst_bytes, max_periods=1) + \
            fast * self.burst_byte_cost_s

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """1 / beta."""
        return 1.0 / self.byte_cost_s
# glibc's malloc serves a block of at least its mmap threshold with a fresh mmap and unmaps it on free; the
# threshold starts at 128 KiB and rises to the size of each freed mmapped block, up to this (malloc/malloc.c:
# DEFAULT_MMAP_THRESHOLD_MAX = 4 * 1024 * 1024 * sizeof(long), 32 MiB on 64-bit), so a buffer above it is new
# memory on every call and every page of it faults (and is zeroed by the kernel) when first written
GLIBC_MMAP_THRESHOLD_MAX = 32 * 2**20
PAGE_BYTES = 4096


@dataclass(frozen=True)
class HostModel:
    """What the machine adds around the network: its cores, the scheduler tick, the per-call dispatch, and
    what a fresh page costs (first touch of a page the allocator mapped for this call; 0: not modelled)."""

    cores: int
    scheduler_tick_s: float
    dispatch_s: float = 0.0
    fresh_page_s: float = 0.0
    mmap_threshold_bytes: float = GLIBC_MMAP_THRESHOLD_MAX

    def __post_init__(self) -> None:
        require_int("cores", self.cores, low=1)
        require_non_negative("scheduler_tick_s", self.scheduler_tick_s)
        require_non_negative("dispatch_s", self.dispatch_s)
        require_non_negative("fresh_page_s", self.fresh_page_s)
        require_positive("mmap_threshold_bytes", self.mmap_threshold_bytes)
XLA_BUFFERS_PATH = DATA_DIR / "cluster" / "xla_buffers.csv"
XLA_BUFFER_MESSAGE_BYTES = 64 * 2**20  # the size the table is compiled at (temp bytes grow linearly with it)


@cache
def xla_temp_table(path: Path = XLA_BUFFERS_PATH) -> dict[tuple[str, int], float]:
    """(program, processes) -> XLA's per-execution temp block / message bytes, as compiled
    (data/cluster/xla_buffers.csv, written by scripts/xla_buffers.py)."""
    if not path.exists():
        raise WorkbenchError(f"{path} does not exist: run scripts/xla_buffers.py")
    table = pd.read_csv(path)
    return {(str(r.program), int(r.processes)): float(r.temp_per_message_byte) for r in table.itertuples()}


def xla_temp_bytes(program: str, processes: int, message_bytes: float) -> float:
    """Bytes of the temp block XLA allocates per call of `program` (the sync kinds of `SYNC_AFTER` are star
    syncs); 0 for one process."""
    if int(processes) < 2:
        return 0.0
    table = xla_temp_table()
    measured = "star" if program in SYNCS_AFTER_WORK else program
    known = sorted({n for _, n in table})
    if (measured, int(processes)) not in table:
        raise WorkbenchError(f"processes must be in {known[0]}..{known[-1]} for {program!r} "
                             f"(data/cluster/xla_buffers.csv), got {processes}")
    return table[(measured, int(processes))] * float(message_bytes)


def fresh_buffers(program: str, processes: int, message_bytes: float) -> list[float]:
    """Bytes of each buffer one call of `program` allocates for itself. XLA's CPU client allocates every output
    per execution (xla/pjrt/cpu/cpu_client.cc, `AlignedMalloc`): the reduced, gathered or permuted buffer (a
    1/n slice for psum_scatter), and the compiled program's temp block (`xla_temp_bytes`: the star kernel keeps
    its 2(n-1) collective-permute outputs there). XLA's gloo reduce-scatter also copies its input into a
    temporary of the whole buffer, and gloo's ReduceScatterHalvingDoubling, built per call, holds two
    zero-filled vectors of it (`recvBuf_`, `recvBufDist_`, gloo/reduce_scatter.h). gloo's ring all-reduce
    keeps two segments (<= 2 MiB)."""
    if program not in PROGRAM_ALGORITHM:
        raise WorkbenchError(f"program must be one of {sorted(PROGRAM_ALGORITHM)}, got {program!r}")
    m = float(message_bytes)
    temp = xla_temp_bytes(program, processes, m)
    own = [m / max(int(processes), 1), m, m, m] if program == "psum_scatter" else [m]
    return own + ([temp] if temp > 0 else [])


def local_share(processes: int, cores: int) -> float:
    """How much longer work every process does at once takes when they outnumber the cores: max(1, n / C)."""
    require_int("processes", processes, low=1)
    require_int("cores", cores, low=1)
    return max(1.0, processes / cores)


def fresh_page_time(program: str, processes: int, message_bytes: float, host: HostModel) -> float:
    """Seconds one call spends faulting in the pages of its fresh buffers above the allocator's mmap threshold."""
    pages = sum(np.ceil(b / PAGE_BYTES) for b in fresh_buffers(program, processes, message_bytes)
                if b >= host.mmap_threshold_bytes)
    return float(pages) * host.fresh_page_s


def program_cost(program: str, processes: int, message_bytes: float):
    """`workbench.machine.network.CollectiveCost` of a measured program as the runtime runs it."""
    if program not in PROGRAM_ALGORITHM:
        raise WorkbenchError(f"program must be one of {sorted(PROGRAM_ALGORITHM)}, got {program!r}")
    algorithm, collective = PROGRAM_ALGORITHM[program]
    return collective_cost(algorithm, collective, processes, message_bytes)


def tiny_ring_hops(program: str, processes: int, message_bytes: float) -> int:
    """Sequential hops of a gloo ring all-reduce whose buffer fills fewer segments than there are ranks (0 for
    any other call): the few segments with data are reduced hop by hop round the ring (n - 1 hops), then passed
    on hop by hop (n - 1 more); each hop is one send and one receive between two processes, in turn
    (gloo/allreduce.cc skips the empty segments, so no other rank's step overlaps them)."""
    n = int(processes)
    if program != "psum" or n < 2:
        return 0
    with_data = float(gloo_segments_per_rank(n, message_bytes)) * n
    return 2 * (n - 1) if with_data < n else 0


def endpoint_work(program: str, processes: int, message_bytes: float) -> float:
    """Message sides the busiest process handles in turn: the table's endpoint messages x `ENDPOINT_SIDES`, or
    a tiny all-reduce's sequential hops (`tiny_ring_hops`)."""
    hops = tiny_ring_hops(program, processes, message_bytes)
    if hops:
        return float(hops)
    cost = program_cost(program, processes, message_bytes)
    return float(cost.endpoint_messages) * ENDPOINT_SIDES.get(program, 1)


def active_steps(program: str, processes: int, message_bytes: float = 4096.0) -> list[tuple[int, float]]:
    """(processes that must act, share of a step) for each sequential step of `program`: all of them in a
    ring or gloo step (a tiny gloo buffer makes only a fraction of a step), the master and one worker in a
    star step, the pairs still in the tree at each level (up, then down)."""
    require_int("processes", processes, low=1)
    steps = float(program_cost(program, processes, message_bytes).steps)
    hops = tiny_ring_hops(program, processes, message_bytes)
    if hops:  # one sender and one receiver at each hop
        return [(2, 1.0)] * hops
    if program == "star":
        return [(2, 1.0)] * int(round(steps))
    if program in SYNCS_AFTER_WORK:  # every process has just worked: all act
        return [(processes, 1.0)] * int(round(steps))
    if program == "tree_ppermute":
        levels = [(max(processes // 2**level, 2), 1.0) for level in range(int(tree_depth(processes)))]
        return levels + levels[::-1]
    whole, part = divmod(steps, 1.0)
    return [(processes, 1.0)] * int(whole) + ([(processes, part)] if part > 1e-12 else [])


def oversubscription_wait(program: str, processes: int, cores: int, tick_s: float,
                          message_bytes: float = 4096.0) -> float:
    """Expected seconds `program` waits for the scheduler: per step, the off-core fraction of the processes
    that must act, times half a tick."""
    require_int("cores", cores, low=1)
    return float(sum(share * tick_s / 2 * max(0, a - cores) / a
                     for a, share in active_steps(program, processes, message_bytes)))


def cpu_share(program: str, processes: int, cores: int, message_bytes: float = 4096.0) -> float:
    """How much longer CPU work in a step takes when more processes act than there are cores: the
    step-weighted mean of max(1, acting / cores) over `active_steps` (1 when every process has a core)."""
    require_int("cores", cores, low=1)
    steps = active_steps(program, processes, message_bytes)
    total = sum(share for _, share in steps)
    if total == 0:
        return 1.0
    return float(sum(share * max(1.0, a / cores) for a, share in steps) / total)


def model_time(program: str, processes: int, message_bytes: float, link: LinkModel, host: HostModel,
               stat: str = "median_s") -> dict:
    """Seconds of one call of `program`, broken down (dispatch, fresh pages, per-message, wire, bytes, wait).

    For a scheduler-free statistic (`SCHEDULER_FREE`) there is no wait, and the CPU work is stretched: o (and
    beta on loopback) by `cpu_share`, the fresh pages every process faults at once by `local_share`; otherwise
    the expected wait is added (`oversubscription_wait`)."""
    cost = program_cost(program, processes, message_bytes)
    free = stat in SCHEDULER_FREE
    share = cpu_share(program, processes, host.cores, message_bytes) if free else 1.0
    copies = share if link.link_class == LOOPBACK else 1.0
    parts = {"dispatch_s": host.dispatch_s,
             "alloc_s": fresh_page_time(program, processes, message_bytes, host)
             * (local_share(processes, host.cores) if free else 1.0),
             "message_s": endpoint_work(program, processes, message_bytes) * link.message_overhead_s * share,
             "wire_s": float(tiny_ring_hops(program, processes, message_bytes) or cost.steps) * link.latency_s,
             "bytes_s": link.bytes_time(cost.busiest_bytes) * copies,
             "wait_s": 0.0 if free else oversubscription_wait(program, processes, host.cores, host.scheduler_tick_s,
                                                                message_bytes)}
    return {**parts, "pred_s": sum(parts.values())}


def colocated_link(link: LinkModel, program: str, processes: int, cores: int) -> LinkModel:
    """`link` as `processes` co-located processes on `cores` cores see it in `program`: its CPU work (o, and on
    loopback the copies' beta) stretched by `cpu_share`, for a cost model that has no notion of cores."""
    share = cpu_share(program, processes, cores)
    copies = share if link.link_class == LOOPBACK else 1.0
    return LinkModel(link.link_class, link.message_overhead_s * share, link.latency_s, link.byte_cost_s * copies,
                     link.burst_bytes, link.burst_byte_cost_s * copies)


def link_models(fits: pd.DataFrame) -> dict[str, LinkModel]:
    """LinkModel per link class from a fits table (a stored table without burst columns has no bucket)."""
    def col(row, name: str) -> float:
        value = getattr(row, name, 0.0)
        return 0.0 if value is None or pd.isna(value) else float(value)

    return {r.link_class: LinkModel(r.link_class, float(r.message_overhead_s), float(r.latency_s),
                                    float(r.beta_s_per_byte), col(r, "burst_bytes"), col(r, "burst_byte_cost_s"))
            for r in fits.itertuples()}
