"""Links, topologies and collectives: latency, traffic and energy, counting hops.

Cost of a collective = (sequential path traversals) x (hops per path) x (per-hop latency tau)
                       + (bytes through the busiest link, serialised) / bandwidth.
This is the alpha-beta model with the alpha split into hops, so a physical topology (a switch: 2 hops
between devices; TPI-LLM's home-gateway tree: 4 hops; a direct MIPI link: 1 hop) changes the
latency term, which is what TPI-LLM's Sec. 3.2 and Appendix A.1 argue about.

Every function is vectorised over numpy arrays (devices, bytes, bandwidth, latency), so a sweep of
10^5 points is one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.errors import (
    WorkbenchError,
    require_choice,
    require_int,
    require_non_negative,
    require_positive,
)

ALGORITHMS = ("ring", "tree", "star", "hierarchical")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")
TOPOLOGY_KINDS = ("switch", "gateway_tree", "direct", "ring")
# Links between two devices on each physical topology (device -> switch -> device = 2, ...).
PATH_HOPS = {"switch": 2, "gateway_tree": 4, "direct": 1, "ring": 1}


@dataclass(frozen=True)
class Link:
    """A network link class: bandwidth (B/s), per-hop latency (s) and energy per byte (pJ/B)."""

    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    energy_pj_per_byte: float = 0.0
    name: str = "link"

    def __post_init__(self) -> None:
        require_positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        require_non_negative("latency_s", self.latency_s)
        require_non_negative("energy_pj_per_byte", self.energy_pj_per_byte)

    @classmethod
    def from_mbps(cls, mbps: float, latency_ms: float = 0.0, **kw) -> Link:
        """A link from megabits per second and milliseconds (how the papers state them)."""
        require_positive("bandwidth (Mbps)", mbps)
        require_non_negative("latency (ms)", latency_ms)
        return cls(mbps * 1e6 / 8, latency_ms * 1e-3, **kw)


@dataclass(frozen=True)
class Topology:
    """How `n_devices` are physically wired: the hop count between two devices and the link class."""

    kind: str
    n_devices: int
    link: Link
    max_devices: int | None = None
    group_size: int = 4  # for hierarchical collectives (the MCU paper's groups of four)

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


def traversals(algorithm: str, collective: str, n_devices, depth=None, group_size: int = 4):
    """Sequential path traversals (latency steps) of a collective; vectorised over n_devices.

    ring: reduce-scatter and all-gather take n-1 steps each (all-reduce 2(n-1)); broadcast/reduce
    pipeline along the ring (n-1). star (parameter server): one push to the master and one pull back.
    tree: `depth` levels up and down (default ceil(log2 n)). hierarchical: groups of `group_size`
    reduce to a leader, leaders recurse, then broadcast back down: ceil(log_g n) levels each way.
    """
    require_choice("algorithm", algorithm, ALGORITHMS)
    require_choice("collective", collective, COLLECTIVES)
    n = np.asarray(n_devices, dtype=float)
    if algorithm == "ring":
        steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1,
                 "broadcast": n - 1, "reduce": n - 1}[collective]
    elif algorithm == "star":
        steps = {"all_reduce": 2, "reduce_scatter": 2, "all_gather": 2, "broadcast": 1, "reduce": 1}[collective]
        steps = np.where(n > 1, steps, 0) * np.ones_like(n)
    else:
        d = tree_depth(n, group_size if algorithm == "hierarchical" else 2) if depth is None else np.asarray(depth)
        per = {"all_reduce": 2, "reduce_scatter": 2, "all_gather": 2, "broadcast": 1, "reduce": 1}[collective]
        steps = per * d * np.ones_like(n)
    return np.where(n > 1, steps, 0.0)


def bottleneck_bytes(algorithm: str, collective: str, n_devices, message_bytes, group_size: int = 4):
    """Bytes that cross the busiest device link, serialised, for a buffer of `message_bytes` per device.

    ring: (n-1)/n of the buffer per phase (bandwidth-optimal). star: the master receives (n-1)
    buffers and sends (n-1) back. tree (binary): each level's parent receives 2 buffers.
    hierarchical: each level's leader receives (g-1) buffers.
    For all_gather/reduce_scatter `message_bytes` is the full (gathered) buffer.
    """
    n = np.asarray(n_devices, dtype=float)
    m = np.asarray(message_bytes, dtype=float)
    frac = np.where(n > 1, (n - 1) / np.maximum(n, 1), 0.0)
    if algorithm == "ring":
        per = {"all_reduce": 2 * frac * m, "reduce_scatter": frac * m, "all_gather": frac * m,
               "broadcast": m * (n > 1), "reduce": m * (n > 1)}
    elif algorithm == "star":
        per = {"all_reduce": 2 * (n - 1) * m, "reduce_scatter": (n - 1) * m + frac * m,
               "all_gather": frac * m + (n - 1) * m, "broadcast": (n - 1) * m, "reduce": (n - 1) * m}
    else:
        fan = group_size if algorithm == "hierarchical" else 2
        d = tree_depth(n, fan)
        per_level = (fan - 1) * m if algorithm == "hierarchical" else 2 * m
        per = {"all_reduce": 2 * d * per_level, "reduce_scatter": 2 * d * per_level,
               "all_gather": 2 * d * per_level, "broadcast": d * per_level, "reduce": d * per_level}
    return np.where(n > 1, per[collective], 0.0)


def total_traffic(algorithm: str, collective: str, n_devices, message_bytes):
    """Total bytes injected into the network by all devices (for energy), per path (not per hop)."""
    n = np.asarray(n_devices, dtype=float)
    m = np.asarray(message_bytes, dtype=float)
    if algorithm == "ring":
        per_phase = (n - 1) * m  # each device sends (n-1) chunks of m/n
        out = {"all_reduce": 2 * per_phase, "reduce_scatter": per_phase, "all_gather": per_phase,
               "broadcast": (n - 1) * m, "reduce": (n - 1) * m}[collective]
    else:  # star, tree, hierarchical: every non-root sends once up and receives once down
        out = {"all_reduce": 2 * (n - 1) * m, "reduce_scatter": 2 * (n - 1) * m, "all_gather": 2 * (n - 1) * m,
               "broadcast": (n - 1) * m, "reduce": (n - 1) * m}[collective]
    return np.where(n > 1, out, 0.0)


def collective_latency(algorithm: str, collective: str, n_devices, message_bytes, bandwidth, latency,
                       path_hops=1, depth=None, group_size: int = 4, breakdown: bool = False):
    """Seconds for a collective (vectorised). With `breakdown`, returns (link_latency_s, data_s)."""
    n, m, b, t = _check_arrays(n_devices, message_bytes, bandwidth, latency)
    hops = np.asarray(path_hops, dtype=float)
    if np.any(hops < 1):
        raise WorkbenchError("path_hops must be >= 1")
    link_term = traversals(algorithm, collective, n, depth, group_size) * hops * t
    data_term = bottleneck_bytes(algorithm, collective, n, m, group_size) / b
    if breakdown:
        return link_term, data_term
    return link_term + data_term


def allreduce_latency(algorithm: str, n_devices, message_bytes, bandwidth, latency, path_hops=1, **kw):
    """Seconds for an all-reduce of `message_bytes` per device (vectorised)."""
    return collective_latency(algorithm, "all_reduce", n_devices, message_bytes, bandwidth, latency, path_hops, **kw)


def collective_energy(algorithm: str, collective: str, n_devices, message_bytes, energy_pj_per_byte, path_hops=1):
    """Joules spent moving a collective's traffic (bytes x hops x pJ/B)."""
    return total_traffic(algorithm, collective, n_devices, message_bytes) * np.asarray(path_hops) * \
        np.asarray(energy_pj_per_byte) * 1e-12


def on_topology(topology: Topology, algorithm: str, collective: str, message_bytes, depth=None,
                breakdown: bool = False):
    """A collective over `topology`'s devices, links and hop count."""
    return collective_latency(algorithm, collective, topology.n_devices, message_bytes,
                              topology.link.bandwidth_bytes_per_s, topology.link.latency_s,
                              topology.path_hops, depth, topology.group_size, breakdown)


def point_to_point(message_bytes, bandwidth, latency, path_hops=1):
    """Seconds to send one message between two devices."""
    return collective_latency("star", "broadcast", 2, message_bytes, bandwidth, latency, path_hops)
