"""The arena's three charts as plain Vega-Lite specs (dicts), rendered to SVG/PNG with vl-convert.

Why dicts and not altair objects: the `whatif` command must finish in under 2 s, and importing
altair and building its objects costs ~0.5 s of that; a Vega-Lite spec is just JSON. Notebooks and the
explorer get altair charts from the same specs (`as_altair`), so there is one definition per chart.
Every chart takes ONE dataset at the top level (sub-charts filter it by phase), so a spec can be redrawn
by swapping its rows (`with_data`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice
from workbench.core.io import write_atomic, write_csv_atomic, write_text_atomic
from workbench.core.units import bytes_per_s_to_mbps, format_seconds, short_number
from workbench.scenarios.arena import (
    COMPONENTS,
    METRIC,
    Arena,
    breakdown_frame,
    memory_frame,
    ranking_frame,
)

VEGA_LITE_VERSION = "6.4"  # the Vega-Lite minor version altair 6 writes; a test keeps the two in step
SCHEMA_URL = f"https://vega.github.io/schema/vega-lite/v{VEGA_LITE_VERSION}.json"
DATASET = "arena"
COMPONENT_COLORS = {"memory_s": "#72b7b2", "compute_s": "#4c78a8", "fixed_s": "#9ecae9", "serial_s": "#b279a2",
                    "comm_link_latency_s": "#f58518", "comm_bytes_s": "#e45756", "io_stall_s": "#54a24b",
                    "other_s": "#bab0ac"}  # one distinct colour per workbench.scenarios.arena.COMPONENTS key
SCALES = ("log", "linear")


# ---- human units (Python, for titles and readouts) -----------------------------------------------
def format_rate(mbps: float) -> str:
    """A link rate in Mbps as '1 Gbps', '250 Mbps', '64 kbps' or '12 bps'."""
    bps = mbps * 1e6
    for unit, size in (("Tbps", 1e12), ("Gbps", 1e9), ("Mbps", 1e6), ("kbps", 1e3)):
        if bps >= size * 0.9995:
            return f"{short_number(bps / size)} {unit}"
    return f"{short_number(bps)} bps"


def format_gib(gib: float) -> str:
    """A size in GiB as '1.0 MiB', '7.0 GiB', '128 GiB' or '512 KiB'."""
    n_bytes = gib * 2**30
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n_bytes >= size * 0.9995:
            v = n_bytes / size
            return f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"
    v = n_bytes / 2**10
    return f"{v:.1f} KiB" if v < 100 else f"{v:.0f} KiB"


def device_summary(cluster) -> str:
    """'32x Laptop A + 32x Laptop B': devices counted by name, in order of first appearance."""
    counts: dict[str, int] = {}
    for device in cluster.devices:
        counts[device.name] = counts.get(device.name, 0) + 1
    return " + ".join(f"{n}x {name}" for name, n in counts.items())


def setting_title(arena: Arena, extra: str = "") -> dict:
    """A chart title that names the setting: model and cluster, then link, prompt, bits and phase(s)."""
    link = arena.cluster.topology.link
    w = arena.workloads[0]
    phases = " + ".join(w.phase for w in arena.workloads)
    sub = (f"{arena.cluster.topology.kind}, {format_rate(bytes_per_s_to_mbps(link.bandwidth_bytes_per_s))}, "
           f"{format_seconds(link.latency_s)}/hop · S={w.seq_len} · {w.weight_bits:g}-bit · {phases}")
    return {"text": f"{arena.model.name} on {device_summary(arena.cluster)}", "subtitle": sub + extra}


# ---- human units (Vega expressions, for axis labels and tooltips) ----------------------------------
def seconds_expr(value: str = "datum.value") -> str:
    """A Vega expression formatting seconds as '0', '50 µs', '12 ms' or '3.4 s'."""
    v = value
    return (f"{v} == 0 ? '0' : {v} >= 0.9995 ? format({v}, '.3~r') + ' s' : {v} >= 0.0009995 ? "
            f"format({v} * 1000, '.3~g') + ' ms' : format({v} * 1000000, '.3~g') + ' µs'")


def gib_expr(value: str = "datum.value") -> str:
    """A Vega expression formatting GiB as '0', '512 KiB', '1 MiB' or '7 GiB'."""
    v = value
    return (f"{v} == 0 ? '0' : {v} >= 0.9995 ? format({v}, '.3~r') + ' GiB' : {v} * 1024 >= 0.9995 ? "
            f"format({v} * 1024, '.3~g') + ' MiB' : format({v} * 1048576, '.3~g') + ' KiB'")


def decade_labels(expr: str) -> str:
    """Label only the powers of ten of a log axis (the 2..9 ticks stay as grid lines: no colliding labels)."""
    exponent = "log(datum.value) / LN10"
    return f"abs({exponent} - round({exponent})) < 1e-6 ? ({expr}) : ''"


def time_axis(title: str, scale: str) -> dict:
    """An x axis in human time units; on a log scale only the decades are labelled."""
    expr = seconds_expr()
    return {"title": title, "labelExpr": decade_labels(expr) if scale == "log" else expr,
            "labelOverlap": "greedy", "labelSeparation": 4}


# ---- small builders ------------------------------------------------------------------------------
def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN / NA become null, numpy scalars become Python numbers."""
    out = []
    for row in frame.to_dict(orient="records"):
        out.append({k: (None if _is_missing(v) else v.item() if hasattr(v, "item") else v) for k, v in row.items()})
    return out


def _is_missing(value) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def field(name: str, kind: str = "nominal", **extra) -> dict:
    """An encoding channel on column `name` ('nominal' or 'quantitative')."""
    return {"field": name, "type": kind, **extra}


def phase_filter(phase: str) -> dict:
    """A transform keeping the rows of one phase."""
    return {"filter": f"(datum.phase === '{phase}')"}


def top_level(spec: dict, frame: pd.DataFrame) -> dict:
    """`spec` as a top-level chart with `frame` as its single named dataset."""
    return {"$schema": SCHEMA_URL, "config": {"view": {"continuousWidth": 300, "continuousHeight": 300}},
            **spec, "data": {"name": DATASET}, "datasets": {DATASET: records(frame)}}


def _phases(arena: Arena) -> list[str]:
    return [w.phase for w in arena.workloads]


def _label_axis() -> dict:
    return {"y": field("label", sort={"field": "latency_s", "op": "min"}, title=None)}


def stack_transforms() -> list[dict]:
    """Vega-Lite transforms stacking the components of each bar in COMPONENTS order into [start, end]
    (seconds), plus [start_log, end_log]: the same, clipped below at a floor one decade under the
    fastest bar's decade, so a log axis shows every bar from the same start (winners stay readable)."""
    names = json.dumps(list(COMPONENTS.values()))
    return [{"calculate": f"indexof({names}, datum.component)", "as": "order"},
            {"calculate": "datum.seconds > 0 ? datum.seconds : 0", "as": "part"},
            {"window": [{"op": "sum", "field": "part", "as": "end"}], "groupby": ["label", "phase"],
             "sort": [{"field": "order"}], "frame": [None, 0]},
            {"calculate": "datum.end - datum.part", "as": "start"},
            {"joinaggregate": [{"op": "min", "field": "latency_s", "as": "fastest"}], "groupby": ["phase"]},
            {"calculate": "pow(10, floor(log(datum.fastest) / LN10) - 1)", "as": "floor"},
            {"calculate": "max(datum.start, datum.floor)", "as": "start_log"},
            {"calculate": "max(datum.end, datum.floor)", "as": "end_log"},
            {"calculate": seconds_expr("datum.seconds"), "as": "time"}]


# ---- the three charts ----------------------------------------------------------------------------
def breakdown_spec(arena: Arena, width: int = 380, title: str | dict | None = None, composition: bool = True,
                   scale: str = "log") -> dict:
    """Stacked bars per scheme over every component of COMPONENTS (own colour each) on a log or linear
    axis; a black tick = end-to-end latency; with `composition`, beside it the same stack as shares."""
    require_choice("breakdown scale", scale, SCALES)
    color = field("component", scale={"domain": list(COMPONENTS.values()),
                                      "range": [COMPONENT_COLORS[c] for c in COMPONENTS]},
                  title="component", legend={"labelLimit": 320})
    suffix = "_log" if scale == "log" else ""
    time_tip = field("time", title="seconds")
    rows = []
    for phase in _phases(arena):
        axis = time_axis(f"{METRIC[phase]} components ({scale} axis; busy time, overlap hides some)", scale)
        x_scale = {"type": "log"} if scale == "log" else {"type": "linear", "zero": True}
        bars = {"mark": {"type": "bar"}, "encoding": {
            **_label_axis(), "color": color,
            "x": field(f"start{suffix}", "quantitative", scale=x_scale, axis=axis),
            "x2": {"field": f"end{suffix}"},
            "tooltip": [field("scheme"), field("paper"), field("component"), time_tip]},
            "transform": [phase_filter(phase), *stack_transforms()]}
        ticks = {"mark": {"type": "tick", "color": "black", "thickness": 2, "size": 18}, "encoding": {
            **_label_axis(), "x": field("latency_s", "quantitative"),
            "tooltip": [field("scheme"), field("total", title="end-to-end")]},
            "transform": [phase_filter(phase), {"filter": f"(datum.component === {json.dumps(COMPONENTS['compute_s'])})"},
                          {"calculate": seconds_expr("datum.latency_s"), "as": "total"}]}
        absolute = {"layer": [bars, ticks], "title": f"Latency breakdown: {METRIC[phase]} ({phase})", "width": width}
        if composition:
            share = {"mark": {"type": "bar"}, "encoding": {
                **_label_axis(), "color": color,
                "x": field("seconds", "quantitative", aggregate="sum", stack="normalize",
                           title="share of busy time",
                           axis={"format": "%", "values": [0, 0.25, 0.5, 0.75, 1], "labelOverlap": "greedy"}),
                "tooltip": [field("scheme"), field("component"), time_tip]},
                "transform": [phase_filter(phase), {"calculate": seconds_expr("datum.seconds"), "as": "time"}],
                "title": "composition", "width": width // 2}
            rows.append({"hconcat": [absolute, share]})
        else:
            rows.append(absolute)
    title = setting_title(arena) if title is None else title
    return top_level({"vconcat": rows, "title": title}, breakdown_frame(arena))


def ranking_spec(arena: Arena, width: int = 380, title: str | dict | None = None) -> dict:
    """Latency per scheme (dots, log scale, decades labelled), best first, coloured by paper; OOM faded and
    labelled."""
    rows = []
    for phase in _phases(arena):
        dots = {"mark": {"type": "point", "filled": True, "size": 90}, "encoding": {
            **_label_axis(),
            "x": field("latency_s", "quantitative", scale={"type": "log"},
                       axis=time_axis(f"{METRIC[phase]} (log axis)", "log")),
            "color": field("paper"),
            "opacity": {"condition": {"test": "(datum.status === 'ok')", "value": 1.0}, "value": 0.3},
            "tooltip": [field("scheme"), field("paper"), field("status"), field("time", title=METRIC[phase]),
                        field("notes")]},
            "transform": [phase_filter(phase), {"calculate": seconds_expr("datum.latency_s"), "as": "time"}]}
        text = {"mark": {"type": "text", "align": "left", "dx": 7}, "encoding": {
            **_label_axis(), "x": field("latency_s", "quantitative"), "text": field("text")},
            "transform": [phase_filter(phase)]}
        rows.append({"layer": [dots, text], "title": f"Ranking: {METRIC[phase]} (x of best)", "width": width})
    title = setting_title(arena) if title is None else title
    return top_level({"vconcat": rows, "title": title}, ranking_frame(arena))


def memory_spec(arena: Arena, phase: str = "decode", width: int = 380, title: str | dict | None = None) -> dict:
    """Peak memory of each device (points, coloured by device kind) per scheme against the budget (red tick)."""
    y = {"y": field("scheme", title=None)}
    axis = {"title": "peak memory per device", "labelExpr": gib_expr(), "labelOverlap": "greedy"}
    points = {"mark": {"type": "point", "filled": True, "size": 60}, "encoding": {
        **y, "x": field("peak_gib", "quantitative", axis=axis),
        "color": field("device_name", title="device kind"), "shape": field("over_budget", title="over budget"),
        "tooltip": [field("scheme"), field("device", "quantitative", title="first device index"),
                    field("devices", "quantitative", title="devices at this point"), field("device_name"),
                    field("peak", title="peak"), field("budget", title="budget")]},
        "transform": [{"calculate": gib_expr("datum.peak_gib"), "as": "peak"},
                      {"calculate": gib_expr("datum.budget_gib"), "as": "budget"}]}
    budget = {"mark": {"type": "tick", "color": "red", "thickness": 2, "size": 16},
              "encoding": {**y, "x": field("budget_gib", "quantitative", aggregate="min")}}
    inner = {"layer": [points, budget], "width": width, "title": f"Peak memory per device vs budget (red), {phase}"}
    title = setting_title(arena) if title is None else title
    return top_level({"vconcat": [inner], "title": title}, memory_points(memory_frame(arena, phase)))


def memory_points(frame: pd.DataFrame) -> pd.DataFrame:
    """One point per distinct (scheme, device kind, peak, budget): identical devices draw once, with their
    count (1,024 identical boards are one point, not 1,024); memory.csv keeps every device."""
    if frame.empty:
        return frame.assign(devices=pd.Series(dtype=int))
    keys = ["scheme", "device_name", "peak_gib", "budget_gib", "over_budget"]
    grouped = frame.groupby(keys, sort=False, dropna=False)
    return grouped.first().reset_index().assign(devices=grouped.size().to_numpy())


def with_data(spec: dict, frame: pd.DataFrame) -> dict:
    """A copy of a one-dataset spec (from the builders above) with its rows replaced by `frame`'s."""
    datasets = spec.get("datasets", {})
    if len(datasets) != 1:
        raise WorkbenchError(f"with_data needs a spec with exactly one dataset, got {len(datasets)}")
    return {**spec, "datasets": {next(iter(datasets)): records(frame)}}


# ---- altair and rendering ------------------------------------------------------------------------
def as_altair(spec: dict, validate: bool = False):
    """The spec as an altair chart (for notebooks, `alt.JupyterChart` and `Recorder.chart`)."""
    import altair as alt

    kind = next((k for k in ("vconcat", "hconcat", "layer") if k in spec), None)
    cls = {"vconcat": alt.VConcatChart, "hconcat": alt.HConcatChart, "layer": alt.LayerChart}.get(kind, alt.Chart)
    return cls.from_dict(spec, validate=validate)


def breakdown_chart(arena: Arena, width: int = 380, title: str | dict | None = None, composition: bool = True,
                    scale: str = "log"):
    """`breakdown_spec` as an altair chart."""
    return as_altair(breakdown_spec(arena, width, title, composition, scale))


def ranking_chart(arena: Arena, width: int = 380):
    """`ranking_spec` as an altair chart."""
    return as_altair(ranking_spec(arena, width))


def memory_chart(arena: Arena, phase: str = "decode", width: int = 380):
    """`memory_spec` as an altair chart."""
    return as_altair(memory_spec(arena, phase, width))


def render_svg(spec: dict) -> str:
    """One Vega-Lite spec to SVG text."""
    import vl_convert

    return vl_convert.vegalite_to_svg(spec, vl_version=VEGA_LITE_VERSION)


def render_png(svg: str) -> bytes:
    """A PNG (2x) rasterised from rendered SVG text (no second Vega run)."""
    import vl_convert

    return vl_convert.svg_to_png(svg, scale=2)


def write_tables(arena: Arena, out_dir: Path) -> list[Path]:
    """arena.csv, memory.csv and breakdown.csv (the charts' data; `whatif --no-charts --out` writes only these)."""
    return [write_csv_atomic(out_dir / "arena.csv", arena.table()),
            write_csv_atomic(out_dir / "memory.csv", arena.memory()),
            write_csv_atomic(out_dir / "breakdown.csv", breakdown_frame(arena))]


def figure_specs(arena: Arena) -> dict[str, dict]:
    """The three charts `write_figures` draws, by file name (what tests render through `chartcheck`)."""
    return {"breakdown": breakdown_spec(arena), "ranking": ranking_spec(arena), "memory": memory_spec(arena)}


def write_figures(arena: Arena, out_dir: Path, png: bool = True) -> list[Path]:
    """arena.csv, memory.csv and the three charts (<name>.svg, .png with `png`, and the breakdown's .csv)."""
    specs = figure_specs(arena)
    paths = write_tables(arena, out_dir)
    for name, spec in specs.items():
        svg = render_svg(spec)
        paths.append(write_text_atomic(out_dir / f"{name}.svg", svg))
        if png:
            data = render_png(svg)
            paths.append(write_atomic(out_dir / f"{name}.png", lambda p, data=data: p.write_bytes(data)))
    return paths
