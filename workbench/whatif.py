"""`python -m workbench whatif FILE.toml`: the arena on your own devices, network and model.

Prints the arena table and writes arena.csv, memory.csv, breakdown.csv and the breakdown / ranking /
memory charts as SVG (plus PNG with `--png`) to figures/whatif/<file stem>/. Kept light on purpose so
the command answers in under 2 s on a 2-core machine (benchmarks/bench_arena.py): no altair import
(the charts are plain Vega-Lite specs), and PNG rasterising (~0.3 s for three charts) only on request.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from workbench.arena import GIB, Arena, arena_for_config, cluster_label
from workbench.errors import WorkbenchError
from workbench.io import FIGURES_DIR


SHORT = {"compute_s": "compute", "fixed_s": "fixed", "serial_s": "serial", "comm_link_latency_s": "msg",
         "comm_bytes_s": "bytes", "io_stall_s": "IO", "other_s": "other"}


def breakdown_text(row) -> str:
    """'compute 61% fixed 4% msg 30% ...': where one step's time goes (components of 1 % or more)."""
    total = row.latency_s
    if total != total or total <= 0:
        return ""
    parts = [(label, getattr(row, key) / total) for key, label in SHORT.items()]
    return " ".join(f"{label} {share:.0%}" for label, share in parts if share >= 0.005)


def format_table(arena: Arena) -> str:
    """The arena as a fixed-width text table (seconds in engineering units, OOM / n/a marked), with the
    decode step's breakdown per scheme and the reason for every n/a."""
    wide = arena.wide()
    long = arena.table().set_index(["scheme", "phase"])

    def cell(seconds, status):
        if status == "n/a" or seconds != seconds:
            return "n/a"
        text = f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
        return f"{text} OOM" if status == "OOM" else text

    rows = [{"scheme": r.scheme, "paper": r.paper,
             "TTFT": cell(getattr(r, "ttft_s", math.nan), getattr(r, "prefill_status", "n/a")),
             "time/token": cell(getattr(r, "time_per_token_s", math.nan), getattr(r, "decode_status", "n/a")),
             "peak mem/device": "" if r.peak_memory_gib != r.peak_memory_gib else f"{r.peak_memory_gib:.2f} GiB",
             "of budget": "" if r.memory_use != r.memory_use else f"{r.memory_use:.0%}",
             "time/token breakdown": _detail(long, r.scheme)}
            for r in wide.itertuples()]
    return pd.DataFrame(rows).to_string(index=False)


def _detail(long: pd.DataFrame, scheme: str) -> str:
    """The decode breakdown, or why the scheme does not apply (its n/a reason, shortened to one line)."""
    if (scheme, "decode") not in long.index:
        return ""
    row = long.loc[(scheme, "decode")]
    if row["status"] == "n/a":
        reason = str(row["notes"]).splitlines()[0] if str(row["notes"]) else "does not apply"
        return f"n/a: {reason[:90]}"
    return breakdown_text(row)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench whatif`."""
    parser.add_argument("config", metavar="FILE.toml", help="devices, network and model (see examples/)")
    parser.add_argument("--out", default=None, help="chart folder (default: figures/whatif/<file stem>/)")
    parser.add_argument("--no-charts", action="store_true", help="print the table only")
    parser.add_argument("--png", action="store_true", help="also write each chart as PNG (2x; ~0.3 s more)")
    parser.add_argument("--seq-len", type=int, default=None, help="override workload.seq_len")


def main(args: argparse.Namespace) -> int:
    """Load the TOML deployment, print the arena table, write its charts; 0 on success."""
    from workbench.userconfig import load_config

    start = time.perf_counter()
    config = load_config(args.config)
    if args.seq_len is not None:
        if not 1 <= args.seq_len <= config.model.max_positions:
            raise WorkbenchError(f"--seq-len must be in [1, {config.model.max_positions}] for {config.model.name}, "
                                 f"got {args.seq_len}")
        config = replace(config, seq_len=args.seq_len, kv_len=args.seq_len)
    arena = arena_for_config(config).check_feasible()
    link = config.cluster.topology.link
    print(f"{config.name}\nmodel {config.model.name} at {config.weight_bits:g} bit "
          f"({config.model.weight_bytes(config.weight_bits) / GIB:.2f} GiB), prompt {config.seq_len} tokens; "
          f"{cluster_label(config.cluster)}; {config.cluster.topology.kind}, "
          f"{link.bandwidth_bytes_per_s * 8 / 1e6:g} Mbps, {link.latency_s * 1e3:g} ms per hop\n")
    print(format_table(arena))
    if not args.no_charts:
        from workbench.arena_charts import write_figures

        out = Path(args.out) if args.out else FIGURES_DIR / "whatif" / Path(args.config).stem
        write_figures(arena, out, png=args.png)
        print(f"\ncharts and tables in {out}")
    print(f"({time.perf_counter() - start:.2f} s)")
    return 0
