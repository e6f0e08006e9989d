"""All-reduce latency vs message size, per-link latency and device count (TPI-LLM Fig. 3's point)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.core.errors import require_choice, require_non_negative, require_positive
from workbench.core.units import mbps_to_bytes_per_s
from workbench.machine.network import ALGORITHMS, PATH_HOPS, TOPOLOGY_KINDS, collective_latency

DEFAULT_SIZES = tuple(int(4 * 4**k) for k in range(13))  # 4 B .. 64 MiB


def allreduce_sweep(algorithms=ALGORITHMS, devices=(2, 4, 8, 16, 32, 64), message_bytes=DEFAULT_SIZES,
                    bandwidth_mbps: float = 300.0, latency_ms: float = 1.0, topology: str = "switch") -> pd.DataFrame:
    """Latency of each algorithm over a (devices x message size) grid, with the link-latency share."""
    _check_link(bandwidth_mbps, [latency_ms], topology)
    rows = []
    for algo in algorithms:
        n, m = np.meshgrid(np.asarray(devices, float), np.asarray(message_bytes, float), indexing="ij")
        link, data = collective_latency(algo, "all_reduce", n.ravel(), m.ravel(), mbps_to_bytes_per_s(bandwidth_mbps),
                                        latency_ms * 1e-3, PATH_HOPS[topology], breakdown=True)
        rows.append(pd.DataFrame({"algorithm": algo, "devices": n.ravel().astype(int), "message_bytes": m.ravel(),
                                  "link_latency_s": link, "data_s": data, "latency_s": link + data}))
    out = pd.concat(rows, ignore_index=True)
    out["link_latency_share"] = np.where(out.latency_s > 0, out.link_latency_s / out.latency_s.where(out.latency_s > 0, 1), 0)
    return out


def latency_sweep(algorithms=ALGORITHMS, devices: int = 8, message_bytes: float = 32 * 1024,
                  bandwidth_mbps: float = 300.0, latencies_ms=(0.01, 0.03, 0.1, 0.3, 1, 3, 10),
                  topology: str = "switch") -> pd.DataFrame:
    """Latency of each algorithm vs per-link latency at a fixed message size."""
    _check_link(bandwidth_mbps, latencies_ms, topology)
    rows = []
    for algo in algorithms:
        tau = np.asarray(latencies_ms, float)
        link, data = collective_latency(algo, "all_reduce", devices, message_bytes, mbps_to_bytes_per_s(bandwidth_mbps),
                                        tau * 1e-3, PATH_HOPS[topology], breakdown=True)
        rows.append(pd.DataFrame({"algorithm": algo, "link_latency_ms": tau, "latency_s": link + data,
                                  "link_latency_s": link, "data_s": np.broadcast_to(data, tau.shape)}))
    return pd.concat(rows, ignore_index=True)


def _check_link(bandwidth_mbps: float, latencies_ms, topology: str) -> None:
    """One-line errors in the notebook's own units (Mbps, ms) and the topologies it knows."""
    require_positive("bandwidth_mbps (Mbps)", bandwidth_mbps)
    for tau in latencies_ms:
        require_non_negative("latency_ms (ms)", tau)
    require_choice("topology", topology, TOPOLOGY_KINDS)


def fastest(sweep: pd.DataFrame, keys=("devices", "message_bytes")) -> pd.DataFrame:
    """The fastest algorithm at each grid point and its margin over the runner-up."""
    def best(g):
        g = g.sort_values("latency_s")
        return pd.Series({"fastest": g.algorithm.iloc[0], "latency_s": g.latency_s.iloc[0],
                          "speedup_vs_next": g.latency_s.iloc[1] / g.latency_s.iloc[0] if len(g) > 1 else 1.0})
    return sweep.groupby(list(keys)).apply(best, include_groups=False).reset_index()
