"""Run the workbench's SPMD programs on a real multi-process cluster on this machine.

`python -m workbench cluster --processes N [--devices-per-process K] [--shape 125mbit] EXPERIMENT -p k=v`
starts N processes, initialises `jax.distributed` with gloo CPU collectives (real sockets, JAX's own
runtime), runs the experiment, gathers the rows on process 0 and always tears everything down.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.measure.cluster.experiments import EXPERIMENTS
from workbench.measure.cluster.netns import LinkShape, ShapedNetwork, shaping_unavailable

__all__ = ["ClusterRun", "ClusterSpec", "LinkShape", "ProcessDied", "ShapedNetwork", "add_arguments", "launch",
           "main", "parse_rate", "run_cluster", "shaping_unavailable", "tidy_rows"]
# The launcher (pandas) is imported on first use: every worker process imports this package, and on
# a loaded 2-core machine each avoidable import is seconds of start-up across 8 processes.
_LAZY = {"ClusterRun", "ClusterSpec", "ProcessDied", "launch", "run_cluster", "tidy_rows"}


def __getattr__(name: str):
    if name in _LAZY:
        module = "workbench.measure.cluster.measure" if name == "tidy_rows" else "workbench.measure.cluster.launcher"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'workbench.measure.cluster' has no attribute {name!r}")


def parse_rate(text: str) -> float:
    """'125mbit' / '1gbit' / '300' (Mbit) -> megabits per second."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(kbit|mbit|gbit)?\s*", str(text).lower())
    if not m:
        raise WorkbenchError(f"--shape must look like 125mbit, 1gbit or 300 (Mbit), got {text!r}")
    value = float(m.group(1)) * {"kbit": 1e-3, "mbit": 1.0, "gbit": 1e3, None: 1.0}[m.group(2)]
    LinkShape(value)  # validates the range
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """CLI arguments of `python -m workbench cluster`."""
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS), help="what every process runs")
    parser.add_argument("--processes", "-n", type=int, required=True, help="number of processes (1-16)")
    parser.add_argument("--devices-per-process", "-k", type=int, default=1, help="CPU devices per process")
    parser.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                        help="experiment parameter (Python literal or string); repeatable")
    parser.add_argument("--shape", metavar="RATE", default=None,
                        help="root only: one network namespace per process, links limited to RATE "
                             "(e.g. 125mbit, 1gbit) with tc tbf; without root it runs on loopback")
    parser.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the run is stopped")
    parser.add_argument("--pin-cores", action="store_true",
                        help="run process i on core i mod cores (placement experiment; see ClusterSpec)")
    parser.add_argument("--keep-cores-awake", action="store_true",
                        help="one idle-class spinner per core while the processes run (placement experiment)")
    parser.add_argument("--output", default=None,
                        help="write the table to this CSV file: one row per point, latency as median_s / p25_s / "
                             "p75_s in seconds (collectives: the slowest process per call, as data/cluster/)")


def main(args: argparse.Namespace) -> int:
    """Run the experiment; print one row per point (latency median / p25 / p75) and write it as CSV with
    --output (`tidy_rows`). Exit 130 on Ctrl-C (after tearing down)."""
    from workbench.core.io import write_csv_atomic
    from workbench.measure.cluster.launcher import ClusterSpec, launch
    from workbench.measure.cluster.measure import tidy_rows
    from workbench.report.runner import parse_parameters

    if args.output and Path(args.output).is_dir():
        raise WorkbenchError(f"--output must be a CSV file path, got the directory {args.output!r}")
    spec = ClusterSpec(args.processes, args.experiment, parse_parameters(args.param), args.devices_per_process,
                       LinkShape(parse_rate(args.shape)) if args.shape else None, args.port, args.timeout,
                       pin_cores=args.pin_cores, keep_cores_awake=args.keep_cores_awake)
    try:
        run = launch(spec)
    except KeyboardInterrupt:
        print("cluster: interrupted; every process was stopped", file=sys.stderr)
        return 130
    print(f"cluster: {args.experiment} on {args.processes} processes ({run.link_class}) took {run.wall_s:.1f} s",
          file=sys.stderr)
    table = tidy_rows(run)
    if args.output:
        write_csv_atomic(args.output, table)
    print(format_table(table))
    return 0


LATENCY_SUFFIXES = ("median_s", "p25_s", "p75_s", "ttft_s")
HIDDEN = ("link_class", "processes", "date", "machine", "load_1min", "mean_s", "min_s", "max_s", "requested_bytes")


def format_table(table) -> str:
    """The tidy table for the terminal: latencies (median / p25 / p75, TTFT) in milliseconds; run-wide
    columns (in the header line already) and the spread beyond the quartiles are left to the CSV."""
    if table.empty:
        return "(no rows)"
    shown = table.drop(columns=[c for c in HIDDEN if c in table.columns])
    renamed = {c: c[:-2] + "_ms" for c in shown.columns
               if c.endswith(LATENCY_SUFFIXES) and shown[c].dtype.kind in "fi"}
    shown = shown.rename(columns=renamed)
    for c in renamed.values():
        shown[c] = shown[c] * 1e3
    return shown.to_string(index=False, float_format=lambda v: f"{v:.3f}")
