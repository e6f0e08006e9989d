"""The collectives measurement campaign: which points to run, and per-call times -> one row per point.

A point's latency is, per timed call, the slowest process's time (a collective ends when its last
participant is done), then the median and the mean over calls; the 25th/75th percentiles show the
spread. With more processes than cores the per-call times are bimodal (a call either runs through or
waits for the 4 ms scheduler tick), so the median jumps between the modes while the mean is the
expected time, the statistic that adds up along a program (see `workbench.cluster.fit`). The
machine is shared, so every row carries the 1-minute load average seen when the point finished
(it includes the cluster's own processes, so 8-process points read higher).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.cluster.launcher import ClusterSpec, launch
from workbench.cluster.netns import LinkShape
from workbench.errors import WorkbenchError, require_int

SIZES_FULL = tuple(4 * 8**k for k in range(9))  # 4 B, 32 B, ..., 64 MiB
SUMMARY_COLUMNS = ["link_class", "processes", "program", "message_bytes", "reps", "median_s", "mean_s", "p25_s",
                   "p75_s", "min_s", "max_s", "wrong_results", "load_1min", "date", "machine"]


@dataclass(frozen=True)
class CampaignPoint:
    """One cluster run: a link class (None = loopback), a process count and the message sizes."""

    processes: int
    sizes: tuple[int, ...] = SIZES_FULL
    rate_mbit: float | None = None
    programs: tuple[str, ...] = ("psum", "all_gather", "psum_scatter", "star", "ring_ppermute", "tree_ppermute")

    def __post_init__(self) -> None:
        require_int("processes", self.processes, low=2, high=16)
        if not self.sizes or any(int(s) < 1 for s in self.sizes):
            raise WorkbenchError(f"sizes must be a non-empty list of byte counts >= 1, got {self.sizes}")

    @property
    def shape(self) -> LinkShape | None:
        """The tbf shape of this point's links (None: loopback)."""
        return None if self.rate_mbit is None else LinkShape(self.rate_mbit)


def default_campaign(quick: bool = False) -> list[CampaignPoint]:
    """Loopback at 2/4/8 processes up to 64 MiB; tbf 125 Mbit up to 1 MiB and 1 Gbit up to 8 MiB; the
    2-process psum at 100 Mbit (calibration of the link class the end-to-end run uses).

    Shaped sizes stop early because a star all-reduce of 64 MiB at 125 Mbit over 8 processes takes a
    minute per call; the machine is shared, so the campaign stays modest.
    """
    if quick:
        return [CampaignPoint(2, (4, 4096, 1 << 20)), CampaignPoint(4, (4, 4096, 1 << 20))]
    points = [CampaignPoint(n) for n in (2, 4, 8)]
    points += [CampaignPoint(n, SIZES_FULL[:7], 125.0) for n in (2, 4, 8)]
    points += [CampaignPoint(n, SIZES_FULL[:8], 1000.0) for n in (2, 4, 8)]
    points.append(CampaignPoint(2, SIZES_FULL[:7], 100.0, programs=("psum",)))
    return points


def machine_label() -> str:
    """A short description of this machine: cores, CPU model, kernel."""
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    virtual = ""
    try:
        if "firecracker" in open("/proc/cmdline").read():
            virtual = ", Firecracker microVM"
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, Linux {platform.release()}{virtual}"


def summarize(rows: pd.DataFrame, link_class: str, processes: int, date: str = "", machine: str = "",
              load_1min: float = float("nan")) -> pd.DataFrame:
    """Per (program, size): the slowest process per call, then median / quartiles over calls."""
    needed = {"program", "message_bytes", "times_s", "process"}
    if not needed <= set(rows.columns):
        raise WorkbenchError(f"collectives rows need columns {sorted(needed)}, got {sorted(rows.columns)}")
    out = []
    for (program, size), group in rows.groupby(["program", "message_bytes"], sort=False):
        per_call = np.max(np.array(group["times_s"].tolist(), dtype=float), axis=0)  # (reps,)
        out.append({"link_class": link_class, "processes": processes, "program": program,
                    "message_bytes": int(size), "reps": len(per_call), "median_s": float(np.median(per_call)),
                    "mean_s": float(np.mean(per_call)),
                    "p25_s": float(np.percentile(per_call, 25)), "p75_s": float(np.percentile(per_call, 75)),
                    "min_s": float(per_call.min()), "max_s": float(per_call.max()),
                    "wrong_results": int(group["wrong_results"].max()) if "wrong_results" in group else 0,
                    "load_1min": load_1min,
                    "date": date, "machine": machine})
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


def run_point(point: CampaignPoint, target_seconds: float = 1.0, min_reps: int = 5, max_reps: int = 25,
              announce=None) -> tuple[pd.DataFrame, str]:
    """Run one campaign point on a fresh cluster; returns (summary rows, note)."""
    params = {"programs": list(point.programs), "sizes": [int(s) for s in point.sizes],
              "target_seconds": target_seconds, "min_reps": min_reps, "max_reps": max_reps}
    run = launch(ClusterSpec(point.processes, "collectives", params, shape=point.shape, timeout_s=1800),
                 announce=announce)
    date = dt.date.today().isoformat()
    summary = summarize(run.rows, run.link_class, point.processes, date, machine_label(), os.getloadavg()[0])
    return summary, run.note
