"""`python -m workbench whatif FILE.toml`: the arena on your own devices, network and model.

Prints the arena table and writes arena.csv, memory.csv, breakdown.csv and the breakdown / ranking /
memory charts as SVG (plus PNG with `--png`) to figures/whatif/<file stem>/. Kept light on purpose so
the command answers in under 2 s on a 2-core machine (benchmarks/bench_arena.py): no altair import
(the charts are plain Vega-Lite specs), and PNG rasterising (~0.3 s for three charts) only on request.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import math
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from workbench.arena import GIB, Arena, arena_for_config, cluster_label
from workbench.errors import WorkbenchError
from workbench.hardware import efficiency_notices
from workbench.io import FIGURES_DIR, writable_folder
from workbench.userconfig import check_key, parse_values, read_document, set_key

SHORT = {"memory_s": "memory", "compute_s": "compute", "fixed_s": "fixed", "serial_s": "serial", "comm_link_latency_s": "msg",
         "comm_bytes_s": "bytes", "io_stall_s": "IO", "other_s": "other"}


def breakdown_text(row) -> str:
    """'compute 61% fixed 4% msg 30% ...': where one step's time goes (components of 1 % or more)."""
    total = row.latency_s
    if math.isnan(total) or total <= 0:
        return ""
    parts = [(label, getattr(row, key) / total) for key, label in SHORT.items()]
    return " ".join(f"{label} {share:.0%}" for label, share in parts if share >= 0.005)


def format_table(arena: Arena) -> str:
    """The arena as a fixed-width text table (seconds in engineering units, OOM / n/a marked), with the
    decode step's breakdown per scheme and the reason for every n/a."""
    wide = arena.wide()
    long = arena.table().set_index(["scheme", "phase"])

    def cell(seconds, status):
        if status == "n/a" or math.isnan(seconds):
            return "n/a"
        text = f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
        return f"{text} OOM" if status == "OOM" else text

    rows = [{"scheme": r.scheme, "paper": r.paper,
             "TTFT": cell(getattr(r, "ttft_s", math.nan), getattr(r, "prefill_status", "n/a")),
             "time/token": cell(getattr(r, "time_per_token_s", math.nan), getattr(r, "decode_status", "n/a")),
             "peak mem/device": "" if math.isnan(r.peak_memory_gib) else f"{r.peak_memory_gib:.2f} GiB",
             "of budget": "" if math.isnan(r.memory_use) else f"{r.memory_use:.0%}",
             "bound by": _bound(long, r.scheme), "time/token breakdown": _detail(long, r.scheme)}
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


def _bound(long: pd.DataFrame, scheme: str) -> str:
    """What bounds the scheme's decode step (`SchemeResult.bound`), "" where it does not apply."""
    if (scheme, "decode") not in long.index or long.loc[(scheme, "decode")]["status"] == "n/a":
        return ""
    return str(long.loc[(scheme, "decode")]["bound"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench whatif`."""
    parser.add_argument("config", metavar="FILE.toml", help="devices, network and model (see examples/)")
    parser.add_argument("--out", default=None, help="chart folder (default: figures/whatif/<file stem>/)")
    parser.add_argument("--no-charts", action="store_true", help="print the table only")
    parser.add_argument("--png", action="store_true", help="also write each chart as PNG (2x; ~0.3 s more)")
    parser.add_argument("--seq-len", type=int, default=None, help="override workload.seq_len")
    parser.add_argument("--devices", default=None, metavar="N[,N...]",
                        help="sweep the device count (a config with one [[devices]] entry), e.g. 1,2,4,8")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=V[,V...]",
                        help="override a TOML key (dotted, e.g. network.bandwidth_mbps=100,1000 or "
                             "devices[0].kernel_launch_us=20); several values sweep it")


# ---- sweeps: --devices and --set ------------------------------------------------------------------
def parse_set(text: str) -> tuple[str, list]:
    """'network.bandwidth_mbps=100,1000' -> ('network.bandwidth_mbps', [100, 1000])."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip():
        raise WorkbenchError(f"--set must be KEY=VALUE[,VALUE...] (e.g. network.bandwidth_mbps=100), got {text!r}")
    return check_key("--set", key.strip()), parse_values(f"--set {key.strip()}", values)


def sweep_points(table: dict, devices: list | None, sets: list[tuple[str, list]]) -> list[tuple[dict, dict]]:
    """Every combination of the swept values: (label -> value, the TOML document with them applied)."""
    axes = ([("devices", devices)] if devices else []) + sets
    points = []
    for combo in itertools.product(*[values for _, values in axes]):
        doc = copy.deepcopy(table)
        label = {}
        for (key, _), value in zip(axes, combo):
            label[key] = value
            if key == "devices":
                entries = doc.get("devices")
                if not isinstance(entries, list) or len(entries) != 1:
                    raise WorkbenchError("--devices needs a config with exactly one [[devices]] entry (set counts "
                                         "of several with --set devices[i].count=...)")
                if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1024:
                    raise WorkbenchError(f"--devices values must be integers in [1, 1024], got {value!r}")
                entries[0]["count"] = value
            else:
                set_key(doc, key, value)
        points.append((label, doc))
    return points


def sweep_table(points: list[tuple[dict, dict]], where: str, base_dir: Path | None) -> pd.DataFrame:
    """One row per sweep point and scheme: TTFT, time per token, statuses and the decode breakdown."""
    from workbench.userconfig import parse_config

    rows = []
    for label, doc in points:
        config = parse_config(doc, where, base_dir)
        arena = arena_for_config(config)
        long = arena.table().set_index(["scheme", "phase"])
        for r in arena.wide().itertuples():
            rows.append({**label, "scheme": r.scheme, "paper": r.paper, "ttft_s": getattr(r, "ttft_s", math.nan),
                         "time_per_token_s": getattr(r, "time_per_token_s", math.nan),
                         "prefill_status": r.prefill_status, "decode_status": r.decode_status,
                         "time_per_token_breakdown": _detail(long, r.scheme)})
    return pd.DataFrame(rows)


def _run_sweep(args: argparse.Namespace, start: float) -> int:
    """`--devices` / `--set` with several values: the sweep table on stdout and in sweep.csv."""
    from workbench.io import write_csv_atomic

    path = Path(args.config)
    table = read_document(path)
    devices = parse_values("--devices", args.devices) if args.devices else None
    sets = [parse_set(text) for text in args.set]
    if args.seq_len is not None:
        sets.append(("workload.seq_len", [args.seq_len]))
    frame = sweep_table(sweep_points(table, devices, sets), path.name, path.parent)
    shown = frame.assign(ttft=frame.ttft_s.map(_seconds), per_token=frame.time_per_token_s.map(_seconds))
    keys = [c for c in frame.columns if c not in ("paper", "ttft_s", "time_per_token_s", "prefill_status",
                                                   "decode_status", "time_per_token_breakdown", "scheme")]
    print(shown[keys + ["scheme", "ttft", "per_token", "decode_status", "time_per_token_breakdown"]]
          .to_string(index=False))
    out = Path(args.out) if args.out else FIGURES_DIR / "whatif" / path.stem
    write_csv_atomic(_writable_dir(out) / "sweep.csv", frame)
    print(f"\nsweep table in {out / 'sweep.csv'}\n({time.perf_counter() - start:.2f} s)")
    return 0


def _seconds(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def _writable_dir(out: Path) -> Path:
    """`out` as a folder to write into (`workbench.io.writable_folder`, errors naming --out)."""
    return writable_folder(out, f"--out {str(out)!r}")


def main(args: argparse.Namespace) -> int:
    """Load the TOML deployment, print the arena table, write its charts; 0 on success."""
    from workbench.userconfig import load_config

    start = time.perf_counter()
    if args.devices or args.set:
        return _run_sweep(args, start)
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
    for line in efficiency_notices(config.cluster.devices):
        print(line)
    print(format_table(arena))
    if not args.no_charts:
        from workbench.arena_charts import write_figures

        out = _writable_dir(Path(args.out) if args.out else FIGURES_DIR / "whatif" / Path(args.config).stem)
        write_figures(arena, out, png=args.png)
        print(f"\ncharts and tables in {out}")
    print(f"({time.perf_counter() - start:.2f} s)")
    return 0
