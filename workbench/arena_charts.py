"""The arena's three charts as plain Vega-Lite specs (dicts), rendered to SVG/PNG with vl-convert.

Why dicts and not altair objects: the `whatif` command must finish in under 2 s, and importing
altair and building its objects costs ~0.5 s of that; a Vega-Lite spec is just JSON. Notebooks and the
explorer get altair charts from the same specs (`as_altair`), so there is one definition per chart.
Every chart takes ONE dataset at the top level (sub-charts filter it by phase), so a spec can be redrawn
by swapping its rows (`with_data`).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from workbench.arena import (
    COMPONENTS,
    METRIC,
    Arena,
    breakdown_frame,
    cluster_label,
    memory_frame,
    ranking_frame,
)
from workbench.errors import WorkbenchError
from workbench.io import write_atomic, write_csv_atomic, write_text_atomic

VEGA_LITE_VERSION = "6.4"  # the Vega-Lite minor version altair 6 writes; a test keeps the two in step
SCHEMA_URL = f"https://vega.github.io/schema/vega-lite/v{VEGA_LITE_VERSION}.json"
DATASET = "arena"
COMPONENT_COLORS = ["#4c78a8", "#9ecae9", "#54a24b", "#e45756", "#f58518", "#72b7b2", "#bab0ac"]  # in COMPONENTS order


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


# ---- the three charts ----------------------------------------------------------------------------
def breakdown_spec(arena: Arena, width: int = 380, title: str | None = None, composition: bool = True) -> dict:
    """Stacked bars per scheme: compute / link latency / bytes / IO stall; a black tick = end-to-end latency;
    with `composition`, beside it the same stack normalised to shares."""
    color = field("component", scale={"domain": list(COMPONENTS.values()), "range": COMPONENT_COLORS},
                  title="component")
    seconds_tip = field("seconds", "quantitative", format=".4g")
    rows = []
    for phase in _phases(arena):
        bars = {"mark": {"type": "bar"}, "encoding": {
            **_label_axis(), "color": color,
            "x": field("seconds", "quantitative", aggregate="sum",
                       title=f"{METRIC[phase]} components (s; busy time, overlap hides some)"),
            "tooltip": [field("scheme"), field("paper"), field("component"), seconds_tip]},
            "transform": [phase_filter(phase)]}
        ticks = {"mark": {"type": "tick", "color": "black", "thickness": 2, "size": 18}, "encoding": {
            **_label_axis(), "x": field("latency_s", "quantitative"),
            "tooltip": [field("scheme"), field("latency_s", "quantitative")]},
            "transform": [phase_filter(phase), {"filter": "(datum.component === 'compute')"}]}
        absolute = {"layer": [bars, ticks], "title": f"Latency breakdown: {METRIC[phase]} ({phase})", "width": width}
        if composition:
            share = {"mark": {"type": "bar"}, "encoding": {
                **_label_axis(), "color": color,
                "x": field("seconds", "quantitative", aggregate="sum", stack="normalize",
                           title="share of busy time", axis={"format": "%"}),
                "tooltip": [field("scheme"), field("component"), seconds_tip]},
                "transform": [phase_filter(phase)], "title": "composition", "width": width // 2}
            rows.append({"hconcat": [absolute, share]})
        else:
            rows.append(absolute)
    title = f"{arena.model.name} on {cluster_label(arena.cluster)}" if title is None else title
    return top_level({"vconcat": rows, "title": title}, breakdown_frame(arena))


def ranking_spec(arena: Arena, width: int = 380) -> dict:
    """Latency per scheme (dots, log scale), best first, coloured by paper; OOM faded and labelled."""
    rows = []
    for phase in _phases(arena):
        dots = {"mark": {"type": "point", "filled": True, "size": 90}, "encoding": {
            **_label_axis(),
            "x": field("latency_s", "quantitative", scale={"type": "log"}, title=f"{METRIC[phase]} (s, log)"),
            "color": field("paper"),
            "opacity": {"condition": {"test": "(datum.status === 'ok')", "value": 1.0}, "value": 0.3},
            "tooltip": [field("scheme"), field("paper"), field("status"),
                        field("latency_s", "quantitative", format=".4g"), field("notes")]},
            "transform": [phase_filter(phase)]}
        text = {"mark": {"type": "text", "align": "left", "dx": 7}, "encoding": {
            **_label_axis(), "x": field("latency_s", "quantitative"), "text": field("text")},
            "transform": [phase_filter(phase)]}
        rows.append({"layer": [dots, text], "title": f"Ranking: {METRIC[phase]} (x of best)", "width": width})
    return top_level({"vconcat": rows}, ranking_frame(arena))


def memory_spec(arena: Arena, phase: str = "decode", width: int = 380) -> dict:
    """Peak memory of each device (points) per scheme against the budget (red tick)."""
    y = {"y": field("scheme", title=None)}
    points = {"mark": {"type": "point", "filled": True, "size": 60}, "encoding": {
        **y, "x": field("peak_gib", "quantitative", title="peak memory per device (GiB)"),
        "color": field("device_label", title="device"), "shape": field("over_budget", title="over budget"),
        "tooltip": [field("scheme"), field("device_label"), field("peak_gib", "quantitative", format=".3f"),
                    field("budget_gib", "quantitative", format=".3f")]}}
    budget = {"mark": {"type": "tick", "color": "red", "thickness": 2, "size": 16},
              "encoding": {**y, "x": field("budget_gib", "quantitative", aggregate="min")}}
    return top_level({"layer": [points, budget], "width": width,
                      "title": f"Peak memory per device vs budget (red), {phase}"}, memory_frame(arena, phase))


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


def breakdown_chart(arena: Arena, width: int = 380, title: str | None = None, composition: bool = True):
    """`breakdown_spec` as an altair chart."""
    return as_altair(breakdown_spec(arena, width, title, composition))


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


def write_figures(arena: Arena, out_dir: Path, png: bool = True) -> list[Path]:
    """arena.csv, memory.csv and the three charts (<name>.svg, .png with `png`, and the breakdown's .csv)."""
    specs = {"breakdown": breakdown_spec(arena), "ranking": ranking_spec(arena), "memory": memory_spec(arena)}
    paths = [write_csv_atomic(out_dir / "arena.csv", arena.table()),
             write_csv_atomic(out_dir / "memory.csv", arena.memory()),
             write_csv_atomic(out_dir / "breakdown.csv", breakdown_frame(arena))]
    for name, spec in specs.items():
        svg = render_svg(spec)
        paths.append(write_text_atomic(out_dir / f"{name}.svg", svg))
        if png:
            data = render_png(svg)
            paths.append(write_atomic(out_dir / f"{name}.png", lambda p, data=data: p.write_bytes(data)))
    return paths
