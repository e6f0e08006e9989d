"""Links, topologies and collectives: latency, traffic and energy, counting hops and messages.

Cost of a collective = (sequential path traversals) x (hops per path) x (per-hop latency tau)
                       + (messages handled in sequence at the endpoints) x (per-message software time o)
                       + (bytes through the busiest link, serialised) / bandwidth.
This is the alpha-beta model with the alpha split into wire hops and endpoint software (LogP's L and o),
so a physical topology (a switch: 2 hops between devices; TPI-LLM's home-gateway tree: 4 hops; a direct
MIPI link: 1 hop) changes the wire term, which is what TPI-LLM's Sec. 3.2 and Appendix A.1 argue about,
and an endpoint that handles many messages (a star's master: n-1 receives and n-1 sends) pays for each.
Each algorithm is defined once (`collective_cost`: steps, busiest-link bytes, injected bytes, endpoint
messages), as the kernels in `workbench.kernels` send it; the HLO traffic tests hold them to each other.

Every function is vectorised over numpy arrays (devices, bytes, bandwidth, latency), so a sweep of
10^5 points is one call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from workbench.core.constants import load_constants
from workbench.core.errors import (
    WorkbenchError,
    require_choice,
    require_int,
    require_non_negative,
    require_positive,
)
from workbench.core.fields import FieldSpec, TomlKey, declared, number_field, rate_field
from workbench.core.io import DATA_DIR
from workbench.core.units import mbps_to_bytes_per_s

ALGORITHMS = ("ring", "tree", "star", "hierarchical", "halving_doubling", "mesh", "gloo_ring",
              "gloo_halving_doubling")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
TOPOLOGY_KINDS = ("switch", "gateway_tree", "direct", "ring")
# Links between two devices on each physical topology (device -> switch -> device = 2, ...).
PATH_HOPS = {"switch": 2, "gateway_tree": 4, "direct": 1, "ring": 1}


@dataclass(frozen=True)
class Link:
    """A network link class: bandwidth (B/s), per-hop wire latency (s), energy per byte (pJ/B), the
    software time each endpoint spends per message it sends or receives (s: syscalls, protocol, runtime
    dispatch; separate from the wire, and serialised at an endpoint that handles many messages), and for a
    shaped link (tc tbf, a provider's rate limit) its token bucket in bytes, 0 for a wire."""

    bandwidth_bytes_per_s: float = declared(rate_field(
        "bandwidth of every link", "B/s", mbps_to_bytes_per_s(1e7), mbps_to_bytes_per_s(1e-3),
        TomlKey("bandwidth_mbps", mbps_to_bytes_per_s(1.0), "Mbit/s")))
    latency_s: float = declared(number_field("latency per hop", "s", 0.0, math.inf, TomlKey("latency_ms", 1e-3, "ms"),
                                             file_high=10.0), 0.0)
    energy_pj_per_byte: float = 0.0
    name: str = "link"
    message_overhead_s: float = declared(number_field(
        "software time per message at each endpoint (a fixed cost)", "s", 0.0, math.inf,
        TomlKey("message_overhead_us", 1e-6, "µs"), file_high=10.0), 0.0)
    bucket_bytes: float = 0.0  # a shaper's token bucket per port and direction (tc tbf; `token_bucket_time`); 0: a wire

    def __post_init__(self) -> None:
        require_positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        require_non_negative("bucket_bytes", self.bucket_bytes)
        require_non_negative("latency_s", self.latency_s)
        require_non_negative("energy_pj_per_byte", self.energy_pj_per_byte)
        require_non_negative("message_overhead_s", self.message_overhead_s)

    @classmethod
    def from_mbps(cls, mbps: float, latency_ms: float = 0.0, **kw) -> Link:
        """A link from megabits per second and milliseconds (how the papers state them)."""
        require_positive("bandwidth (Mbps)", mbps)
        require_non_negative("latency (ms)", latency_ms)
        return cls(mbps_to_bytes_per_s(mbps), latency_ms * 1e-3, **kw)


# Default link classes of edge deployments, each constant cited in data/constants/links.toml (`link_class`).
LINK_CLASSES_PATH = DATA_DIR / "constants" / "links.toml"
LINK_CLASSES = ("ethernet_1g", "ethernet_2_5g", "wifi5", "wifi6")


def link_class(name: str) -> Link:
    """The default `Link` of a link class (Ethernet 1G / 2.5G, Wi-Fi 5 / 6): its TCP bandwidth, wire latency per hop
    and per-message endpoint time, each a cited constant of data/constants/links.toml."""
    require_choice("link class", name, LINK_CLASSES)
    c = load_constants(LINK_CLASSES_PATH)
    return Link(float(c[f"{name}_bandwidth"].value), float(c[f"{name}_latency"].value), name=name,
                message_overhead_s=float(c[f"{name}_message_overhead"].value))


@dataclass(frozen=True)
class Topology:
    """How `n_devices` are physically wired: the hop count between two devices and the link class."""

    kind: str = declared(FieldSpec(f"one of {', '.join(TOPOLOGY_KINDS)}", kind="text", toml=(TomlKey("topology"),)))
    n_devices: int
    link: Link
    max_devices: int | None = None
    group_size: int = declared(FieldSpec(  # for hierarchical collectives (the MCU paper's groups of four)
        "devices per group (gateway_tree)", "devices", 2, math.inf, file_high=1024, kind="integer",
        toml=(TomlKey("group_size", 1.0, "devices"),)), 4)

    def __post_init__(self) -> None:
        require_choice("topology", self.kind, TOPOLOGY_KINDS)
        require_int("n_devices", self.n_devices, low=1, high=self.max_devices)
        require_int("group_size", self.group_size, low=2)

    @property
    def path_hops(self) -> int:
        """Links crossed between two devices (for a ring topology, between neighbours)."""
        return PATH_HOPS[self.kind]


def _check_arrays(n_devices, message_bytes, bandwidth, latency):
    n = np.asarray(n_devices, dtype=float)
    m = np.asarray(message_bytes, dtype=float)
    b = np.asarray(bandwidth, dtype=float)
    t = np.asarray(latency, dtype=float)
    if np.any(~np.isfinite(b)) or np.any(b <= 0):
        raise WorkbenchError("bandwidth must be finite and > 0 (B/s)")
    if np.any(~np.isfinite(t)) or np.any(t < 0):
        raise WorkbenchError("latency must be finite and >= 0 (s)")
    if np.any(~np.isfinite(m)) or np.any(m < 0):
        raise WorkbenchError("message_bytes must be finite and >= 0")
    if np.any(n < 1) or np.any(n != np.floor(n)):
        raise WorkbenchError("n_devices must be integers >= 1")
    return n, m, b, t


def tree_depth(n_devices, fan_in: int = 2):
    """Levels of a reduction tree with `fan_in` children per parent over n devices (ceil log)."""
    n = np.asarray(n_devices, dtype=float)
    return np.where(n > 1, np.ceil(np.log(np.maximum(n, 1)) / np.log(fan_in) - 1e-12), 0)


def _log2_steps(n):
    """Recursive halving/doubling rounds: ceil(log2 n), plus one fold in and one out when n is not 2^k."""
    n = np.maximum(np.asarray(n, dtype=float), 1)
    k = np.floor(np.log2(n) + 1e-12)
    return k + 2 * (n > 2 ** k)


class CollectiveCost(NamedTuple):
    """One collective under one algorithm, for a buffer of m bytes per device over n devices.

    steps: sequential wire traversals (each costs path_hops x the per-hop latency);
    busiest_bytes: bytes through the busiest device's link, serialised (the bandwidth term);
    injected_bytes: bytes all devices inject, per path (the energy term);
    endpoint_messages: messages the busiest endpoint handles one after another (its sends and receives
    in sequence: a star's master n-1 receives then n-1 sends); each costs the link's per-message software
    time. For the ppermute kernels it is the number of collective-permutes the compiled program runs.
    """

    steps: np.ndarray
    busiest_bytes: np.ndarray
    injected_bytes: np.ndarray
    endpoint_messages: np.ndarray


def _ring(c, n, m, fan):
    """Bandwidth-optimal ring (Patarasuk & Yuan 2009): reduce-scatter then all-gather of n chunks; every
    step each device sends one chunk to its neighbour and receives one. Broadcast/reduce pipeline the whole
    buffer along the ring (n-1 steps, m through each link)."""
    frac = (n - 1) / n
    one = {"all_reduce": (2 * (n - 1), 2 * frac * m, 2 * (n - 1) * m),
           "reduce_scatter": (n - 1, frac * m, (n - 1) * m), "all_gather": (n - 1, frac * m, (n - 1) * m),
           "broadcast": (n - 1, m, (n - 1) * m), "reduce": (n - 1, m, (n - 1) * m)}[c]
    return one[0], one[1], one[2], one[0]


def _star(c, n, m, fan):
    """Star through a master (parameter server, TPI-LLM's star, distributed-llama <= v0.10): every worker
    sends to the master, which handles the n-1 receives and the n-1 sends one after another (its one NIC
    and one thread); the wire latency is paid twice (up, down) as the sends pipeline on the wire."""
    frac = (n - 1) / n
    table = {"all_reduce": (2, 2 * (n - 1) * m, 2 * (n - 1) * m, 2 * (n - 1)),
             "reduce_scatter": (2, (n - 1) * m + frac * m, 2 * (n - 1) * m, 2 * (n - 1)),
             "all_gather": (2, frac * m + (n - 1) * m, 2 * (n - 1) * m, 2 * (n - 1)),
             "broadcast": (1, (n - 1) * m, (n - 1) * m, n - 1),
             "reduce": (1, (n - 1) * m, (n - 1) * m, n - 1)}
    return table[c]


def _tree(c, n, m, fan):
    """Reduction tree of fan-in `fan`, as the kernels send it: at each level a parent receives the whole
    buffer from each of its fan-1 children (binary: one buffer per level), up to the root, then the same
    levels back down. Every non-root sends once up and receives once down."""
    d = tree_depth(n, fan)
    per_level, msgs = (fan - 1) * m, fan - 1  # a parent receives (then sends) fan-1 buffers in turn
    one_way = (d, d * per_level, (n - 1) * m, d * msgs)
    both = (2 * d, 2 * d * per_level, 2 * (n - 1) * m, 2 * d * msgs)
    return one_way if c in ("broadcast", "reduce") else both


def _halving_doubling(c, n, m, fan):
    """Recursive halving reduce-scatter + recursive doubling all-gather (Thakur, Rabenseifner & Gropp 2005;
    gloo's ReduceScatterHalvingDoubling): ceil(log2 n) rounds each way, bytes of the ring; a non-power-of-two
    n folds the extra devices in and out (two more rounds of the whole buffer)."""
    frac = (n - 1) / n
    k = _log2_steps(n)
    extra = (k > np.floor(np.log2(np.maximum(n, 1)) + 1e-12)) * m
    table = {"all_reduce": (2 * k, 2 * frac * m + 2 * extra, 2 * (n - 1) * m),
             "reduce_scatter": (k, frac * m + extra, (n - 1) * m), "all_gather": (k, frac * m + extra, (n - 1) * m),
             "broadcast": (k, k * m, (n - 1) * m), "reduce": (k, k * m, (n - 1) * m)}[c]
    return table[0], table[1], table[2], table[0]


def _mesh(c, n, m, fan):
    """Direct exchange over a full mesh (a switch): every device sends its part to each of the n-1 others at
    once and receives theirs (distributed-llama >= v0.11 all-gathers full partial sums this way; XLA's
    all-to-all). One wire traversal; each endpoint handles n-1 sends and n-1 receives. The all-reduce is
    an all-gather of full-size partials, summed locally."""
    frac = (n - 1) / n
    table = {"all_reduce": ((n - 1) * m, n * (n - 1) * m, n - 1),
             "reduce_scatter": (frac * m, (n - 1) * m, n - 1),
             "all_gather": (frac * m, (n - 1) * m, n - 1),
             "broadcast": ((n - 1) * m, (n - 1) * m, n - 1), "reduce": ((n - 1) * m, (n - 1) * m, n - 1)}[c]
    return np.ones_like(n), table[0], table[1], table[2]


GLOO_MAX_SEGMENT_BYTES = 2**20  # gloo/allreduce.h kMaxSegmentSize


GLOO_ELEMENT_BYTES = 4  # float32, what the workbench's collectives reduce


def gloo_segments_per_rank(n, m):
    """Non-empty segments per rank of gloo's ring all-reduce (gloo/allreduce.cc): segments of
    min(ceil(m / 2n), 1 MiB) bytes rounded up to whole elements, their count rounded up to a multiple of n
    and at least 2n; a segment that lies past the end of a tiny buffer is not sent (so a 4-byte all-reduce
    sends one segment, not 2n)."""
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    m = np.asarray(m, dtype=float)
    e = GLOO_ELEMENT_BYTES
    seg = np.maximum(np.ceil(np.minimum(np.ceil(m / (2 * n)), GLOO_MAX_SEGMENT_BYTES) / e) * e, e)
    segments = np.ceil(np.maximum(np.ceil(m / seg), 2 * n) / n) * n
    nonempty = np.minimum(segments, np.maximum(np.ceil(m / seg), 1.0))
    return nonempty / n


def _gloo_ring(c, n, m, fan):
    """gloo's ring as XLA's CPU collectives run it (gloo/allreduce.cc, gloo/allgather.cc). All-reduce: the
    buffer is cut into n x s segments (s >= 2 per rank, at most 1 MiB each, empty ones past the end of a
    tiny buffer not sent); reduce-scatter and all-gather
    each issue (n-1) s sends (each beside a receive) per rank, two in flight (so (n-1) s / 2 wire latencies
    a phase), the ring's bytes; each send is its own message at the endpoint, so a small all-reduce
    handles 4(n-1) messages in turn, not the ideal ring's 2(n-1). All-gather: each rank's block goes round
    the ring in two halves (2(n-1) sends, two in flight). Other collectives: the plain ring."""
    if c == "all_reduce":
        k = (n - 1) * gloo_segments_per_rank(n, m)  # sends per rank per phase
        frac = (n - 1) / n
        return k, 2 * frac * m, 2 * (n - 1) * m, 2 * k
    if c == "all_gather":
        frac = (n - 1) / n
        return n - 1, frac * m, (n - 1) * m, 2 * (n - 1)
    return _ring(c, n, m, fan)


def _gloo_halving_doubling(c, n, m, fan):
    """gloo's ReduceScatterHalvingDoubling (what XLA's CPU psum_scatter runs): ceil(log2 n) halving rounds,
    each a data message and a notification message both ways (2 in turn at each endpoint), then a distribution
    round in which ranks whose bit-reversed index differs (n >= 4) swap their m/n result slice (data +
    notification). Non-powers of two are approximated by ceil(log2 n) rounds. Other collectives: gloo's
    ring (what XLA's CPU backend runs for them)."""
    if c != "reduce_scatter":
        return _gloo_ring(c, n, m, fan)
    k = np.ceil(np.log2(np.maximum(n, 1)) - 1e-12)
    dist = (n >= 4).astype(float) if isinstance(n, np.ndarray) else float(n >= 4)
    frac = (n - 1) / n
    return k + dist, frac * m + dist * m / n, (n - 1) * m + dist * m, 2 * k + 2 * dist


# One definition per algorithm: (collective, n, m, fan-in) -> (steps, busiest, injected, endpoint messages).
_ALGORITHM_COSTS = {"ring": _ring, "tree": _tree, "star": _star, "hierarchical": _tree,
                    "halving_doubling": _halving_doubling, "mesh": _mesh, "gloo_ring": _gloo_ring,
                    "gloo_halving_doubling": _gloo_halving_doubling}


def collective_cost(algorithm: str, collective: str, n_devices, message_bytes=0.0, depth=None,
                    group_size: int = 4) -> CollectiveCost:
    """Steps, busiest-link bytes, injected bytes and endpoint messages of a collective (vectorised).

    `message_bytes` is the buffer per device (for all_gather / reduce_scatter the full gathered buffer).
    tree: binary unless `depth` fixes the levels (then the fan-in is ceil(n^(1/depth))); hierarchical:
    groups of `group_size` (the MCU paper's four). One device costs nothing.
    """
    require_choice("algorithm", algorithm, ALGORITHMS)
    require_choice("collective", collective, COLLECTIVES)
    n = np.maximum(np.asarray(n_devices, dtype=float), 1.0)
    m = np.asarray(message_bytes, dtype=float)
    if algorithm == "hierarchical":
        fan = np.asarray(group_size, dtype=float)
    elif algorithm == "tree" and depth is not None:
        d = np.maximum(np.asarray(depth, dtype=float), 1.0)
        fan = np.maximum(np.ceil(n ** (1.0 / d) - 1e-9), 2.0)
    else:
        fan = np.asarray(2.0)
    parts = _ALGORITHM_COSTS[algorithm](collective, n, m, fan)
    if algorithm == "tree" and depth is not None:  # the paper's fixed depth sets the latency steps
        one_way = collective in ("broadcast", "reduce")
        d = np.asarray(depth, dtype=float)
        parts = ((1 if one_way else 2) * d, parts[1], parts[2], (1 if one_way else 2) * d * (fan - 1))
    many = np.asarray(n_devices, dtype=float) > 1
    shape = np.broadcast(n, m).shape
    return CollectiveCost(*(np.where(many, np.broadcast_to(np.asarray(p, dtype=float), shape), 0.0) for p in parts))


def traversals(algorithm: str, collective: str, n_devices, depth=None, group_size: int = 4):
    """Sequential path traversals (latency steps) of a collective; vectorised over n_devices."""
    return collective_cost(algorithm, collective, n_devices, 0.0, depth, group_size).steps


def bottleneck_bytes(algorithm: str, collective: str, n_devices, message_bytes, group_size: int = 4, depth=None):
    """Bytes that cross the busiest device link, serialised, for a buffer of `message_bytes` per device."""
    return collective_cost(algorithm, collective, n_devices, message_bytes, depth, group_size).busiest_bytes


def total_traffic(algorithm: str, collective: str, n_devices, message_bytes, group_size: int = 4):
    """Total bytes injected into the network by all devices (for energy), per path (not per hop)."""
    return collective_cost(algorithm, collective, n_devices, message_bytes, None, group_size).injected_bytes


def endpoint_messages(algorithm: str, collective: str, n_devices, depth=None, group_size: int = 4):
    """Messages the busiest endpoint of a collective handles one after another."""
    return collective_cost(algorithm, collective, n_devices, 0.0, depth, group_size).endpoint_messages


def collective_latency(algorithm: str, collective: str, n_devices, message_bytes, bandwidth, latency,
                       path_hops=1, depth=None, group_size: int = 4, breakdown: bool = False,
                       message_overhead=0.0, stack_s_per_byte=0.0):
    """Seconds for a collective (vectorised). With `breakdown`, returns (per-message s, bytes s): the
    wire hops plus the endpoints' per-message software time, and the bytes term: the busiest link's bytes
    at the bandwidth, or at the endpoints' network stack (`stack_s_per_byte`, CPU seconds per byte; 0 =
    free) if that handles bytes slower."""
    n, m, b, t = _check_arrays(n_devices, message_bytes, bandwidth, latency)
    hops = np.asarray(path_hops, dtype=float)
    o = np.asarray(message_overhead, dtype=float)
    if np.any(hops < 1):
        raise WorkbenchError("path_hops must be >= 1")
    if np.any(~np.isfinite(o)) or np.any(o < 0):
        raise WorkbenchError("message_overhead must be finite and >= 0 (s)")
    cost = collective_cost(algorithm, collective, n, m, depth, group_size)
    link_term = cost.steps * hops * t + cost.endpoint_messages * o
    data_term = cost.busiest_bytes / b
    stack = np.asarray(stack_s_per_byte, dtype=float)
    if np.any(~np.isfinite(stack)) or np.any(stack < 0):
        raise WorkbenchError(f"stack_s_per_byte must be finite and >= 0 (s/B), got {stack_s_per_byte!r}")
    if np.any(stack != 0):
        data_term = np.maximum(data_term, cost.busiest_bytes * stack)
    if breakdown:
        return link_term, data_term
    return link_term + data_term


def star_on_access_links(collective: str, message_bytes: float, bandwidths, latencies) -> tuple[float, float]:
    """(latency s, bytes s) of a star collective whose spokes are the devices' own access links (device 0 the
    master; laptops on one Wi-Fi router, TPI-LLM Table 7), from the star's row of `collective_cost`: each of
    its steps crosses a worker's link and the master's (latencies add, the slowest worker's path binds); its
    busiest bytes serialise on the master's link, and a worker's link carries its buffer once per step."""
    bw, lat = np.asarray(bandwidths, dtype=float), np.asarray(latencies, dtype=float)
    if bw.ndim != 1 or bw.shape != lat.shape or len(bw) < 2:
        raise WorkbenchError(f"access links need one bandwidth and one latency per device (>= 2), got {bw.shape} "
                             f"and {lat.shape}")
    if np.any(~np.isfinite(bw)) or np.any(bw <= 0) or np.any(~np.isfinite(lat)) or np.any(lat < 0):
        raise WorkbenchError("access link bandwidths must be finite and > 0 (B/s), latencies finite and >= 0 (s)")
    cost = collective_cost("star", collective, len(bw), message_bytes)
    path = float(np.max(lat[1:] + lat[0]))
    worker = float(np.max(float(cost.steps) * message_bytes / bw[1:]))
    return float(cost.steps) * path, max(float(cost.busiest_bytes / bw[0]), worker)


def allreduce_latency(algorithm: str, n_devices, message_bytes, bandwidth, latency, path_hops=1, **kw):
    """Seconds for an all-reduce of `message_bytes` per device (vectorised)."""
    return collective_latency(algorithm, "all_reduce", n_devices, message_bytes, bandwidth, latency, path_hops, **kw)


def collective_energy(algorithm: str, collective: str, n_devices, message_bytes, energy_pj_per_byte, path_hops=1):
    """Joules spent moving a collective's traffic (bytes x hops x pJ/B)."""
    return total_traffic(algorithm, collective, n_devices, message_bytes) * np.asarray(path_hops) * \
        np.asarray(energy_pj_per_byte) * 1e-12


def on_topology(topology: Topology, algorithm: str, collective: str, message_bytes, depth=None,
                breakdown: bool = False):
    """A collective over `topology`'s devices, links, hop count and per-message endpoint time."""
    return collective_latency(algorithm, collective, topology.n_devices, message_bytes,
                              topology.link.bandwidth_bytes_per_s, topology.link.latency_s,
                              topology.path_hops, depth, topology.group_size, breakdown,
                              topology.link.message_overhead_s)


def point_to_point(message_bytes, bandwidth, latency, path_hops=1, message_overhead=0.0):
    """Seconds to send one message between two devices (one send and one receive at the endpoints)."""
    return collective_latency("star", "broadcast", 2, message_bytes, bandwidth, latency, path_hops,
                              message_overhead=message_overhead)


# ---- shaped links: token buckets, message by message ------------------------------------------------------
@dataclass(frozen=True)
class Transfer:
    """One message on a shaped network: `n_bytes` from port `src` to port `dst`, ready `ready_s` after its step
    starts (its sender's software time before it enters the wire; queued sends overlap the wire this way)."""

    src: int
    dst: int
    n_bytes: float
    ready_s: float = 0.0

    def __post_init__(self) -> None:
        require_int("src", self.src, low=0)
        require_int("dst", self.dst, low=0)
        if self.src == self.dst:
            raise WorkbenchError(f"a transfer needs two ports, got src = dst = {self.src}")
        require_non_negative("n_bytes", self.n_bytes)
        require_non_negative("ready_s", self.ready_s)


@dataclass(frozen=True)
class Step:
    """What a synchronous protocol does next: `gap_s` without the link (compute, endpoint software; the buckets
    refill), then `transfers`, all started together; the step ends when the last one has crossed."""

    gap_s: float
    transfers: tuple[Transfer, ...] = ()

    def __post_init__(self) -> None:
        require_non_negative("gap_s", self.gap_s)
        if not all(isinstance(t, Transfer) for t in self.transfers):
            raise WorkbenchError("transfers must be Transfer records")


def token_bucket_time(steps, rate_bytes_per_s: float, bucket_bytes: float, max_periods: int = 100_000) -> float:
    """Seconds one period of `steps` takes on ports shaped by token buckets in the steady state: the buckets start
    full and the period repeats until it takes as long as the one before with the buckets as they were (a deep
    bucket drains over many periods first); `max_periods` of them at most.

    Every port has a bucket each way (tc tbf on both ends of a veth: the sender's egress, the receiver's ingress
    side of the bridge), `bucket_bytes` deep, refilled at the rate; a message leaves when both its buckets hold its
    bytes, each port's messages one after another (linux net/sched/sch_tbf.c: tokens are time, capped at the
    bucket). A message that finds `b` bytes of tokens waits (n_bytes - b) / rate, so after an idle gap a bucket
    passes a message no larger than itself at once, and both directions refill apart: the busier direction's bytes
    at the rate bound a long run, not both directions' bytes. With `bucket_bytes` 0 (a wire) every message takes
    its bytes at the rate. Gaps are included in the result."""
    require_positive("rate_bytes_per_s", rate_bytes_per_s)
    require_non_negative("bucket_bytes", bucket_bytes)
    require_int("max_periods", max_periods, low=1)
    steps = tuple(steps)
    if not all(isinstance(s, Step) for s in steps):
        raise WorkbenchError("steps must be Step records")
    tokens: dict[tuple[str, int], float] = {}  # bucket -> (bytes of tokens, at time)
    stamp: dict[tuple[str, int], float] = {}
    busy: dict[tuple[str, int], float] = {}
    now = 0.0
    last = (math.inf, None)
    for _ in range(max_periods):
        start = now
        state = {p: round(tokens[p] + rate_bytes_per_s * (now - stamp[p]), 6) for p in tokens}
        for step in steps:
            now += step.gap_s
            end = now
            for t in step.transfers:
                ports = (("out", t.src), ("in", t.dst))
                leave = max([now + t.ready_s] + [busy.get(p, 0.0) for p in ports])
                have = min(min(bucket_bytes, tokens.get(p, bucket_bytes) + rate_bytes_per_s * (leave - stamp.get(p, 0.0)))
                           for p in ports)
                done = leave + max(t.n_bytes - have, 0.0) / rate_bytes_per_s
                for p in ports:
                    level = min(bucket_bytes, tokens.get(p, bucket_bytes) + rate_bytes_per_s * (done - stamp.get(p, 0.0)))
                    tokens[p], stamp[p], busy[p] = max(level - t.n_bytes, 0.0), done, done
                end = max(end, done)
            now = end
        if math.isclose(now - start, last[0], rel_tol=1e-12, abs_tol=1e-15) and state == last[1]:
            break
        last = (now - start, state)
    return now - start
