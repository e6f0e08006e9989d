"""The collectives measurement campaign: which points to run, and per-call times -> one row per point.

A point's latency is, per timed call, the slowest process's time (a collective ends when its last
participant is done), then the median and the mean over calls; the 25th/75th percentiles show the
spread. With more processes than cores the per-call times are bimodal (a call either runs through or
waits for the 4 ms scheduler tick), so the median jumps between the modes while the mean is the
expected time, the statistic that adds up along a program (see `workbench.measure.cluster.fit`). The
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

from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.measure.cluster.launcher import ClusterRun, ClusterSpec, launch
from workbench.measure.cluster.netns import LinkShape

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


BEST_OF_N_CALLS = (25, 100, 300, 1000, 3000)


def best_of_n(rows: pd.DataFrame, link_class: str, processes: int, calls=BEST_OF_N_CALLS, date: str = "",
              machine: str = "") -> pd.DataFrame:
    """Per (program, size) and N in `calls`: the fastest of the first N calls (each call: its slowest process),
    to see how the fastest call, the model's scheduler-free statistic, depends on how many calls are timed."""
    needed = {"program", "message_bytes", "times_s", "process"}
    if not needed <= set(rows.columns):
        raise WorkbenchError(f"collectives rows need columns {sorted(needed)}, got {sorted(rows.columns)}")
    out = []
    for (program, size), group in rows.groupby(["program", "message_bytes"], sort=False):
        per_call = np.max(np.array(group["times_s"].tolist(), dtype=float), axis=0)
        for n in calls:
            require_int("calls", n, low=1, high=len(per_call))
            out.append({"date": date, "machine": machine, "link_class": link_class, "processes": int(processes),
                        "program": program, "message_bytes": int(size), "calls": int(n),
                        "fastest_s": float(per_call[:n].min()), "median_s": float(np.median(per_call[:n]))})
    return pd.DataFrame(out)


@dataclass(frozen=True)
class RepetitionProtocol:
    """How many calls a point times: about `target_seconds` of calls per program and size, at least `min_reps`,
    at most `max_reps` (`max_reps_large` above `large_bytes`)."""

    name: str
    target_seconds: float
    min_reps: int
    max_reps: int
    max_reps_large: int
    large_bytes: int = 8192

    def __post_init__(self) -> None:
        require_positive("target_seconds", self.target_seconds)
        require_int("min_reps", self.min_reps, low=1)
        require_int("max_reps", self.max_reps, low=self.min_reps)
        require_int("max_reps_large", self.max_reps_large, low=self.min_reps)
        require_int("large_bytes", self.large_bytes, low=1)

    def params(self) -> dict:
        """The `experiments.collectives` keyword arguments of this protocol."""
        return {"target_seconds": self.target_seconds, "min_reps": self.min_reps, "max_reps": self.max_reps,
                "max_reps_large": self.max_reps_large, "large_bytes": self.large_bytes}


# Until 2026-11-24: 5-25 calls, about a second per program and size
LEGACY_PROTOCOL = RepetitionProtocol("legacy", 1.0, 5, 25, 25)
# The OSU Micro-Benchmarks' collective repetitions (util/osu_util.h: COLL_LOOP_SMALL 1000, COLL_LOOP_LARGE 100,
# LARGE_MESSAGE_SIZE 8192), capped at about 3 s per program and size so a campaign stays under half an hour (27
# minutes on 2026-11-25). With more processes than cores the median of 25 calls sits in whichever tick mode most of
# them met, and their fastest often still met a tick; hundreds of calls settle the median and find a call nearer the
# scheduler-free one the model describes (`workbench.measure.cluster.collectives.SCHEDULER_FREE`; at 8 processes on 2 cores still
# not always: the cluster notebook).
OSU_PROTOCOL = RepetitionProtocol("osu", 3.0, 5, 1000, 100)
# OSU's repetitions without the time cap: every point 1000 calls <= 8 KiB, 100 above (about 70 minutes here). Since
# 2026-11-25d, after the best-of-N diagnostic showed the capped fastest call had not settled at 8 processes.
OSU_FULL_PROTOCOL = RepetitionProtocol("osu_full", 1e9, 100, 1000, 100)
PROTOCOLS = {p.name: p for p in (LEGACY_PROTOCOL, OSU_PROTOCOL, OSU_FULL_PROTOCOL)}


def run_point(point: CampaignPoint, target_seconds: float = 1.0, min_reps: int = 5, max_reps: int = 25,
              announce=None, protocol: RepetitionProtocol | None = None) -> tuple[pd.DataFrame, str]:
    """Run one campaign point on a fresh cluster; returns (summary rows, note). A `protocol` replaces the
    three repetition arguments."""
    reps = protocol.params() if protocol else {"target_seconds": target_seconds, "min_reps": min_reps,
                                                "max_reps": max_reps}
    params = {"programs": list(point.programs), "sizes": [int(s) for s in point.sizes], **reps}
    run = launch(ClusterSpec(point.processes, "collectives", params, shape=point.shape, timeout_s=3600),
                 announce=announce)
    date = dt.date.today().isoformat()
    summary = summarize(run.rows, run.link_class, point.processes, date, machine_label(), os.getloadavg()[0])
    return summary, run.note


# ---- one run as tidy rows (the `cluster` command's table and --output) ----------------------------------
def chain_summary(run: ClusterRun, processes: int, date: str = "", machine: str = "") -> pd.DataFrame:
    """One row per (program, size, length) of a `sync_chain` run: per call the slowest process, then the fastest,
    median and mean call (what `workbench.measure.cluster.fit.chain_slopes` reads)."""
    rows = []
    for (program, size, length), group in run.rows.groupby(["program", "message_bytes", "length"], sort=False):
        per_call = np.max(np.stack([np.asarray(t, float) for t in group["times_s"]]), axis=0)
        rows.append({"date": date, "machine": machine, "link_class": run.link_class, "processes": int(processes),
                     "program": program, "message_bytes": int(size), "length": int(length), "reps": len(per_call),
                     "min_s": float(per_call.min()), "median_s": float(np.median(per_call)),
                     "mean_s": float(per_call.mean()), "load_1min": os.getloadavg()[0]})
    return pd.DataFrame(rows)


def _quartiles(values) -> tuple[float, float, float]:
    """(median, p25, p75) of `values`; NaN when there are none."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return (float("nan"),) * 3
    return float(np.median(a)), float(np.percentile(a, 25)), float(np.percentile(a, 75))


def _is_list(value) -> bool:
    return isinstance(value, list | tuple)


def _tidy_tpi_llm(rows: pd.DataFrame, processes: int) -> pd.DataFrame:
    """One row per generation (repeat): a step ends when its slowest process is done, so the step times are
    the max over processes; TTFT is the first step, the per-token latency the quartiles of the others."""
    import numpy as np

    out = []
    for repeat, group in rows.groupby("repeat", sort=True):
        group = group.sort_values("process") if "process" in group else group
        steps = np.max(np.array(group["step_times_s"].tolist(), dtype=float), axis=0)
        median, p25, p75 = _quartiles(steps[1:])
        first = group.iloc[0]
        root = group[group["process"] == 0].iloc[0] if "process" in group and (group["process"] == 0).any() else first
        row = {"repeat": int(repeat), "model": first["model"], "allreduce": first["allreduce"],
               "prompt_len": int(first["prompt_len"]), "n_new": int(first["n_new"]),
               "n_devices": int(first["n_devices"]), "processes": processes, "ttft_s": float(steps[0]),
               "median_s": median, "p25_s": p25, "p75_s": p75, "tokens": " ".join(str(t) for t in root["tokens"])}
        if "matches_reference" in group and root.get("matches_reference") is not None:
            row["matches_reference"] = bool(root["matches_reference"])
        out.append(row)
    return pd.DataFrame(out)


def _tidy_generic(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows as they are, each list replaced: a list of numbers by its median / p25 / p75 (`<name>_median`,
    ...; a list called `times_s` gives `median_s`, `p25_s`, `p75_s`), any other list by its items joined."""
    out = []
    for record in rows.to_dict("records"):
        row = {}
        for key, value in record.items():
            if not _is_list(value):
                row[key] = value
            elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
                stem, unit = (key[:-2], "_s") if key.endswith("_s") else (key, "")
                names = [f"{stat}{unit}" if stem == "times" else f"{stem}_{stat}{unit}"
                         for stat in ("median", "p25", "p75")]
                row.update(zip(names, _quartiles(value)))
            else:
                row[key] = " ".join(str(v) for v in value)
        out.append(row)
    return pd.DataFrame(out)


def tidy_rows(run: ClusterRun) -> pd.DataFrame:
    """One row per measured point, numbers only (no lists), latency as median / p25 / p75 in seconds.

    collectives: one row per (program, message size) as in `data/cluster/collectives.csv` (the slowest
    process per call, then quartiles over calls: `workbench.measure.cluster.measure.summarize`); tpi_llm: one row
    per generation; other experiments: their rows with each list summarised (see `_tidy_generic`).
    """
    experiment = run.meta.get("experiment")
    processes = int(run.meta.get("processes", 0))
    if run.rows.empty:
        return run.rows.copy()
    if experiment == "collectives":
        return summarize(run.rows, run.link_class, processes, dt.date.today().isoformat(), machine_label(),
                         os.getloadavg()[0])
    if experiment == "tpi_llm" and "step_times_s" in run.rows:
        return _tidy_tpi_llm(run.rows, processes)
    return _tidy_generic(run.rows)
