"""The arena: every registered scheme on one model, one cluster and one cost model; `whatif FILE.toml`.

`run_arena` evaluates each evaluator in `workbench.schemes.base.SCHEMES` (prefill = time to first
token, decode = time per token) and keeps the `SchemeResult`s; `Arena.table()` is the tidy frame
(one row per scheme and phase, OOM marked, paper of origin), `Arena.memory()` the peak memory per
device against its budget. A scheme that does not apply (e.g. more devices than heads) raises
`WorkbenchError`; its row says "n/a" with the message. Any other exception is a bug and propagates.
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.errors import InfeasibleError, WorkbenchError, require_choice
from workbench.io import FIGURES_DIR, write_csv_atomic
from workbench.models import TransformerConfig
from workbench.schemes.base import PHASES, Cluster, Evaluator, SchemeResult, Workload, load_all

GIB = 2**30
METRIC = {"prefill": "TTFT", "decode": "time per token"}
COMPONENTS = {"compute_s": "compute", "comm_link_latency_s": "communication: link latency",
              "comm_bytes_s": "communication: bytes", "io_stall_s": "IO stall", "other_s": "other"}
STATUSES = ("ok", "OOM", "n/a")
Registry = Mapping[str, tuple[str, Evaluator]]


@dataclass(frozen=True)
class Entry:
    """One scheme on one phase: its result, or the WorkbenchError message when it does not apply."""

    scheme: str
    paper: str
    phase: str
    result: SchemeResult | None
    error: str = ""

    @property
    def status(self) -> str:
        """ok | OOM | n/a."""
        if self.result is None:
            return "n/a"
        return "OOM" if self.result.oom else "ok"


def cluster_label(cluster: Cluster) -> str:
    """'4x Raspberry Pi 5 + 1x TV': consecutive devices with one name grouped."""
    groups: list[list] = []
    for device in cluster.devices:
        if groups and groups[-1][0] == device.name:
            groups[-1][1] += 1
        else:
            groups.append([device.name, 1])
    return " + ".join(f"{count}x {name}" for name, count in groups)


def device_budgets(result: SchemeResult, cluster: Cluster) -> list[float]:
    """Memory budget per device: the scheme's own when it states one, else the outermost memory level."""
    if result.memory_budget_bytes:
        return [float(b) for b in result.memory_budget_bytes]
    return [float(d.memory_bytes) if d.memory else math.nan for d in cluster.devices]


@dataclass(frozen=True)
class Arena:
    """Every scheme's result on one model, cluster and workload pair (prefill, decode)."""

    model: TransformerConfig
    cluster: Cluster
    workloads: tuple[Workload, ...]
    entries: tuple[Entry, ...]

    def context(self) -> dict:
        """Columns that describe the setting (the same on every row)."""
        w = self.workloads[0]
        link = self.cluster.topology.link
        return {"model": self.model.name, "devices": cluster_label(self.cluster), "n_devices": self.cluster.n,
                "topology": self.cluster.topology.kind, "bandwidth_mbps": link.bandwidth_bytes_per_s * 8 / 1e6,
                "latency_ms": link.latency_s * 1e3, "seq_len": w.seq_len, "kv_len": w.kv_len,
                "weight_bits": w.weight_bits}

    def table(self) -> pd.DataFrame:
        """Tidy: one row per (scheme, phase) with latency, its breakdown, peak memory, OOM, rank and paper."""
        rows = []
        for e in self.entries:
            row = {"scheme": e.scheme, "paper": e.paper, "phase": e.phase, "metric": METRIC[e.phase],
                   "status": e.status, "latency_s": math.nan, **dict.fromkeys(COMPONENTS, math.nan),
                   "peak_memory_bytes": math.nan, "memory_budget_bytes": math.nan, "memory_use": math.nan,
                   "oom": False, "notes": e.error}
            if e.result is not None:
                r = e.result
                budgets = device_budgets(r, self.cluster)
                use = [p / b for p, b in zip(r.peak_memory_bytes, budgets) if b > 0]
                worst = max(range(len(use)), key=use.__getitem__) if use else None
                row.update({"latency_s": r.latency_s, **{c: getattr(r, c) for c in COMPONENTS},
                            "peak_memory_bytes": max(r.peak_memory_bytes, default=math.nan),
                            "memory_budget_bytes": budgets[worst] if worst is not None else math.nan,
                            "memory_use": use[worst] if worst is not None else math.nan,
                            "oom": bool(r.oom), "notes": r.notes})
            rows.append(row)
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        ok = frame["status"] == "ok"
        best = frame[ok].groupby("phase")["latency_s"].min()
        frame["vs_best"] = frame["latency_s"] / frame["phase"].map(best)
        frame["rank"] = frame[ok].groupby("phase")["latency_s"].rank(method="min").astype("Int64")
        for key, value in reversed(self.context().items()):
            frame.insert(0, key, value)
        return frame

    def memory(self) -> pd.DataFrame:
        """Tidy: peak memory of every device under every scheme and phase, against its budget."""
        rows = []
        for e in self.entries:
            if e.result is None:
                continue
            budgets = device_budgets(e.result, self.cluster)
            for i, peak in enumerate(e.result.peak_memory_bytes):
                budget = budgets[i] if i < len(budgets) else math.nan
                rows.append({"scheme": e.scheme, "paper": e.paper, "phase": e.phase, "device": i,
                             "device_name": self.cluster.devices[i].name if i < self.cluster.n else "?",
                             "peak_bytes": float(peak), "budget_bytes": budget,
                             "over_budget": bool(budget == budget and peak > budget)})
        return pd.DataFrame(rows, columns=["scheme", "paper", "phase", "device", "device_name", "peak_bytes",
                                           "budget_bytes", "over_budget"])

    def wide(self) -> pd.DataFrame:
        """One row per scheme (fitting ones first, fastest first): TTFT, time per token, peak memory, OOM, paper."""
        t = self.table()
        if t.empty:
            return pd.DataFrame(columns=["scheme", "paper"])
        out = t.pivot(index="scheme", columns="phase", values="latency_s").reindex(columns=list(PHASES))
        out.columns = [f"{METRIC[p].replace(' ', '_')}_s".lower() for p in out.columns]
        status = t.pivot(index="scheme", columns="phase", values="status").reindex(columns=list(PHASES))
        for p in PHASES:
            out[f"{p}_status"] = status[p].fillna("n/a")
        mem = t.groupby("scheme")[["peak_memory_bytes", "memory_use"]].max()
        out["peak_memory_gib"] = mem["peak_memory_bytes"] / GIB
        out["memory_use"] = mem["memory_use"]
        out.insert(0, "paper", t.groupby("scheme")["paper"].first())
        out = out.reset_index()
        phase = "prefill" if (out["prefill_status"] == "ok").any() else "decode"
        out["_order"] = out[f"{phase}_status"].map({"ok": 0, "OOM": 1}).fillna(2)
        sort_col = "ttft_s" if phase == "prefill" else "time_per_token_s"
        out = out.sort_values(["_order", sort_col, "scheme"], na_position="last").drop(columns="_order")
        return out.reset_index(drop=True)

    def feasible(self) -> bool:
        """Whether at least one scheme runs within memory in some phase."""
        return any(e.status == "ok" for e in self.entries)

    def check_feasible(self) -> Arena:
        """Raise InfeasibleError naming sizes when every scheme is out of memory or does not apply."""
        if not self.entries:
            raise WorkbenchError("no partition schemes are registered (workbench/schemes/<paper>.py)")
        if not self.feasible():
            w = self.workloads[0]
            largest = format_bytes(max(d.memory_bytes for d in self.cluster.devices))
            reasons = sorted({e.error.split(";")[0] for e in self.entries if e.error})
            why = f"; not applicable: {reasons[0]}" if reasons else ""
            raise InfeasibleError(
                f"infeasible: nothing fits: {self.model.name} ({self.model.weight_bytes(w.weight_bits) / GIB:.2f} GiB "
                f"at {w.weight_bits:g} bit) is out of memory under every scheme on {self.cluster.n} device(s) "
                f"(largest memory {largest}){why}")
        return self


def format_bytes(n_bytes: float) -> str:
    """'1.50 GiB', '12.0 MiB' or '512 KiB'."""
    for unit, size in (("GiB", GIB), ("MiB", 2**20)):
        if n_bytes >= size:
            return f"{n_bytes / size:.3g} {unit}"
    return f"{n_bytes / 2**10:.3g} KiB"


def evaluate(name: str, paper: str, fn: Evaluator, model: TransformerConfig, cluster: Cluster,
             workload: Workload) -> Entry:
    """Run one evaluator; a WorkbenchError (the scheme does not apply) becomes an n/a entry."""
    try:
        return Entry(name, paper, workload.phase, fn(model, cluster, workload))
    except WorkbenchError as exc:
        return Entry(name, paper, workload.phase, None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def run_arena(model: TransformerConfig, cluster: Cluster, seq_len: int = 128, kv_len: int | None = None,
              weight_bits: float = 16, activation_bits: float = 16, phases: tuple[str, ...] = PHASES,
              schemes: list[str] | None = None, registry: Registry | None = None) -> Arena:
    """Evaluate every registered scheme (or `schemes`) on `model` and `cluster` for each phase."""
    registry = load_all() if registry is None else registry
    names = sorted(registry) if schemes is None else list(schemes)
    for name in names:
        require_choice("scheme", name, sorted(registry))
    workloads = tuple(Workload(phase=require_choice("phase", p, PHASES), seq_len=seq_len,
                               kv_len=seq_len if kv_len is None else kv_len, weight_bits=weight_bits,
                               activation_bits=activation_bits) for p in phases)
    entries = tuple(evaluate(n, registry[n][0], registry[n][1], model, cluster, w) for w in workloads for n in names)
    return Arena(model, cluster, workloads, entries)


def arena_for_config(config, phases: tuple[str, ...] = PHASES, schemes: list[str] | None = None,
                     registry: Registry | None = None) -> Arena:
    """The arena for a `workbench.userconfig.UserConfig` (a TOML deployment)."""
    return run_arena(config.model, config.cluster, config.seq_len, config.kv_len, config.weight_bits,
                     config.activation_bits, phases, schemes, registry)


# ---- charts (altair) -----------------------------------------------------------------------------
# Every chart takes ONE frame at the top level (subcharts filter it by phase), so a chart built once
# can be redrawn by swapping its dataset (see `with_data`): altair's encode() costs ~50 ms a chart.
def _labelled(table: pd.DataFrame) -> pd.DataFrame:
    """Rows that ran (OOM included), with 'scheme (OOM)' labels and 'x1.23 of best' texts."""
    t = table[table["status"] != "n/a"].copy() if len(table) else table.copy()
    t["label"] = t["scheme"] + t["status"].map({"OOM": " (OOM)"}).fillna("")
    t["text"] = [f"{v:.2f}x" if s == "ok" else "OOM" for v, s in zip(t["vs_best"], t["status"])]
    return t


def breakdown_frame(arena: Arena) -> pd.DataFrame:
    """Long: seconds per latency component per scheme and phase (n/a schemes left out)."""
    columns = ["scheme", "label", "paper", "phase", "metric", "component", "seconds", "latency_s"]
    t = arena.table()
    if t.empty:
        return pd.DataFrame(columns=columns)
    long = _labelled(t).melt(id_vars=["scheme", "label", "paper", "phase", "metric", "latency_s"],
                             value_vars=list(COMPONENTS), var_name="component", value_name="seconds")
    long["component"] = long["component"].map(COMPONENTS)
    return long[columns]


def ranking_frame(arena: Arena) -> pd.DataFrame:
    """Rows for the ranking chart: scheme, paper, phase, latency, status, label, 'x of best' text."""
    t = arena.table()
    if t.empty:
        return pd.DataFrame(columns=["scheme", "label", "paper", "phase", "status", "latency_s", "text", "notes"])
    return _labelled(t)[["scheme", "label", "paper", "phase", "status", "latency_s", "vs_best", "text", "notes"]]


def memory_frame(arena: Arena, phase: str = "decode") -> pd.DataFrame:
    """Rows for the memory chart: peak and budget (GiB) of each device under each scheme in `phase`."""
    m = arena.memory()
    m = m[m["phase"] == phase].copy()
    m["peak_gib"], m["budget_gib"] = m["peak_bytes"] / GIB, m["budget_bytes"] / GIB
    m["device_label"] = m["device"].astype(str) + ": " + m["device_name"]
    return m


def _phases(arena: Arena) -> list[str]:
    return [w.phase for w in arena.workloads]


def breakdown_chart(arena: Arena, width: int = 380, title: str | None = None, composition: bool = True):
    """Stacked bars per scheme: compute / link latency / bytes / IO stall; a black tick = end-to-end latency;
    with `composition`, beside it the same stack normalised to shares."""
    import altair as alt

    colors = alt.Scale(domain=list(COMPONENTS.values()), range=["#4c78a8", "#e45756", "#f58518", "#72b7b2", "#bab0ac"])
    sort = alt.EncodingSortField(field="latency_s", op="min")
    charts = []
    for phase in _phases(arena):
        base = alt.Chart().transform_filter(alt.datum.phase == phase).encode(y=alt.Y("label:N", sort=sort, title=None))
        bars = base.mark_bar().encode(
            x=alt.X("sum(seconds):Q", title=f"{METRIC[phase]} components (s; busy time, overlap hides some)"),
            color=alt.Color("component:N", scale=colors, title="component"),
            tooltip=["scheme", "paper", "component", alt.Tooltip("seconds:Q", format=".4g")])
        ticks = base.transform_filter(alt.datum.component == "compute").mark_tick(
            color="black", thickness=2, size=18).encode(x="latency_s:Q", tooltip=["scheme", "latency_s"])
        share = base.mark_bar().encode(
            x=alt.X("sum(seconds):Q", stack="normalize", title="share of busy time", axis=alt.Axis(format="%")),
            color=alt.Color("component:N", scale=colors, title="component"),
            tooltip=["scheme", "component", alt.Tooltip("seconds:Q", format=".4g")])
        absolute = alt.layer(bars, ticks).properties(title=f"Latency breakdown: {METRIC[phase]} ({phase})",
                                                     width=width)
        charts.append(alt.hconcat(absolute, share.properties(title="composition", width=width // 2))
                      if composition else absolute)
    title = f"{arena.model.name} on {cluster_label(arena.cluster)}" if title is None else title
    return alt.vconcat(*charts, data=breakdown_frame(arena)).properties(title=title)


def ranking_chart(arena: Arena, width: int = 380):
    """Latency per scheme (dots, log scale), best first, coloured by paper; OOM faded and labelled."""
    import altair as alt

    sort = alt.EncodingSortField(field="latency_s", op="min")
    charts = []
    for phase in _phases(arena):
        base = alt.Chart().transform_filter(alt.datum.phase == phase).encode(y=alt.Y("label:N", sort=sort, title=None))
        dots = base.mark_point(filled=True, size=90).encode(
            x=alt.X("latency_s:Q", scale=alt.Scale(type="log"), title=f"{METRIC[phase]} (s, log)"),
            color=alt.Color("paper:N"), opacity=alt.condition(alt.datum.status == "ok", alt.value(1.0), alt.value(0.3)),
            tooltip=["scheme", "paper", "status", alt.Tooltip("latency_s:Q", format=".4g"), "notes"])
        text = base.mark_text(align="left", dx=7).encode(x="latency_s:Q", text="text:N")
        charts.append(alt.layer(dots, text).properties(title=f"Ranking: {METRIC[phase]} (x of best)", width=width))
    return alt.vconcat(*charts, data=ranking_frame(arena))


def memory_chart(arena: Arena, phase: str = "decode", width: int = 380):
    """Peak memory of each device (points) per scheme against the budget (red tick)."""
    import altair as alt

    base = alt.Chart(memory_frame(arena, phase)).encode(y=alt.Y("scheme:N", title=None))
    points = base.mark_point(filled=True, size=60).encode(
        x=alt.X("peak_gib:Q", title="peak memory per device (GiB)"), color=alt.Color("device_label:N", title="device"),
        shape=alt.Shape("over_budget:N", title="over budget"),
        tooltip=["scheme", "device_label", alt.Tooltip("peak_gib:Q", format=".3f"),
                 alt.Tooltip("budget_gib:Q", format=".3f")])
    budget = base.mark_tick(color="red", thickness=2, size=16).encode(x="min(budget_gib):Q")
    return alt.layer(points, budget).properties(title=f"Peak memory per device vs budget (red), {phase}", width=width)


def with_data(spec: dict, frame: pd.DataFrame) -> dict:
    """A copy of a one-dataset Vega-Lite spec (from the chart builders above) with its rows replaced."""
    from altair.utils.core import sanitize_pandas_dataframe

    datasets = spec.get("datasets", {})
    if len(datasets) != 1:
        raise WorkbenchError(f"with_data needs a spec with exactly one dataset, got {len(datasets)}")
    name = next(iter(datasets))
    return {**spec, "datasets": {name: sanitize_pandas_dataframe(frame).to_dict(orient="records")}}


def _vl_version() -> str:
    from altair.utils._importers import vl_version_for_vl_convert

    return vl_version_for_vl_convert()


def warm_chart_renderer() -> threading.Thread:
    """Start vl-convert's JavaScript engine in a background thread (~0.4 s) while the caller evaluates."""
    def warm():
        import vl_convert

        vl_convert.vegalite_to_svg({"mark": "point", "data": {"values": [{}]}})

    thread = threading.Thread(target=warm, name="vl-convert warm-up", daemon=True)
    thread.start()
    return thread


def render_svg(spec: dict) -> str:
    """One Vega-Lite spec to SVG text (vl-convert releases the GIL, so renders can run in threads)."""
    import vl_convert

    return vl_convert.vegalite_to_svg(spec, vl_version=_vl_version())


def render_svg_png(spec: dict) -> tuple[str, bytes]:
    """One Vega-Lite spec to SVG text and a PNG (2x) rasterised from that SVG."""
    import vl_convert

    svg = render_svg(spec)
    return svg, vl_convert.svg_to_png(svg, scale=2)


def save_chart(chart, out_dir: Path, name: str, data: pd.DataFrame | None = None,
               rendered: tuple[str, bytes] | None = None) -> list[Path]:
    """Write <name>.svg and <name>.png (rendered once, PNG rasterised from the SVG) and <name>.csv."""
    from workbench.io import write_atomic, write_text_atomic

    svg, png = render_svg_png(chart.to_dict(validate=False)) if rendered is None else rendered
    paths = [write_text_atomic(out_dir / f"{name}.svg", svg),
             write_atomic(out_dir / f"{name}.png", lambda p: p.write_bytes(png))]
    if data is not None:
        paths.append(write_csv_atomic(out_dir / f"{name}.csv", data))
    return paths


def write_figures(arena: Arena, out_dir: Path) -> list[Path]:
    """The arena table, memory table and the three charts under `out_dir` (charts rendered in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    charts = {"breakdown": (breakdown_chart(arena), breakdown_frame(arena)), "ranking": (ranking_chart(arena), None),
              "memory": (memory_chart(arena), None)}
    specs = {name: chart.to_dict(validate=False) for name, (chart, _) in charts.items()}
    with ThreadPoolExecutor(max_workers=len(specs)) as pool:  # vl-convert releases the GIL
        rendered = dict(zip(specs, pool.map(render_svg_png, specs.values())))
    paths = [write_csv_atomic(out_dir / "arena.csv", arena.table()),
             write_csv_atomic(out_dir / "memory.csv", arena.memory())]
    for name, (chart, data) in charts.items():
        paths += save_chart(chart, out_dir, name, data, rendered=rendered[name])
    return paths


# ---- the `whatif` command ------------------------------------------------------------------------
def format_table(arena: Arena) -> str:
    """The arena as a fixed-width text table (seconds in engineering units, OOM / n/a marked)."""
    wide = arena.wide()

    def cell(seconds, status):
        if status == "n/a" or seconds != seconds:
            return "n/a"
        text = f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"
        return f"{text} OOM" if status == "OOM" else text

    rows = [{"scheme": r.scheme, "paper": r.paper,
             "TTFT": cell(getattr(r, "ttft_s", math.nan), getattr(r, "prefill_status", "n/a")),
             "time/token": cell(getattr(r, "time_per_token_s", math.nan), getattr(r, "decode_status", "n/a")),
             "peak mem/device": "" if r.peak_memory_gib != r.peak_memory_gib else f"{r.peak_memory_gib:.2f} GiB",
             "of budget": "" if r.memory_use != r.memory_use else f"{r.memory_use:.0%}"}
            for r in wide.itertuples()]
    return pd.DataFrame(rows).to_string(index=False)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench whatif`."""
    parser.add_argument("config", metavar="FILE.toml", help="devices, network and model (see examples/)")
    parser.add_argument("--out", default=None, help="chart folder (default: figures/whatif/<file stem>/)")
    parser.add_argument("--no-charts", action="store_true", help="print the table only")
    parser.add_argument("--seq-len", type=int, default=None, help="override workload.seq_len")


def main(args: argparse.Namespace) -> int:
    """Load the TOML deployment, print the arena table, write its charts; 0 on success."""
    from workbench.userconfig import load_config

    start = time.perf_counter()
    # A command-line run needs neither of two optional imports altair triggers: jsonschema builds an
    # Earley parser for the "iri" format when rfc3987_syntax is importable (~0.9 s; Vega-Lite's schema
    # has no "iri" format), and altair.jupyter loads anywidget for JupyterChart (~0.4 s).
    if "altair" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)
        sys.modules.setdefault("anywidget", None)
    warm = None if args.no_charts else warm_chart_renderer()
    config = load_config(args.config)
    if args.seq_len is not None:
        from dataclasses import replace

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
    if warm is not None:
        warm.join()
        out = Path(args.out) if args.out else FIGURES_DIR / "whatif" / Path(args.config).stem
        write_figures(arena, out)
        print(f"\ncharts and tables in {out}")
    print(f"({time.perf_counter() - start:.2f} s)")
    return 0


def arena_result_rows(arena: Arena, artifact: str = "arena") -> pd.DataFrame:
    """Tidy result rows (workbench.results columns): each scheme's latency per phase and peak memory."""
    from workbench.results import RESULT_COLUMNS

    c = arena.context()
    setting = (f"{c['devices']},{c['topology']},{c['bandwidth_mbps']:g}Mbps,{c['latency_ms']:g}ms,"
               f"S={c['seq_len']},{c['weight_bits']:g}bit")
    rows = []
    for r in arena.table().itertuples():
        if r.status == "n/a":
            continue
        rows.append(("workbench", artifact, c["model"], setting, f"{r.scheme}_{r.phase}_latency", r.latency_s, "s"))
        rows.append(("workbench", artifact, c["model"], setting, f"{r.scheme}_{r.phase}_peak_memory",
                     r.peak_memory_bytes / GIB, "GiB"))
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)
