"""The chart check: a blank chart (log bars from 0, an empty layer) or a title promise not drawn is an error,
a drawn chart passes; Recorder.chart refuses a blank chart by name; every `whatif` chart on every example passes."""

from __future__ import annotations

import re

import altair as alt
import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.papers.charts import diagonal, log_base, speedup_chart
from workbench.report.chartcheck import (
    _marks,
    chart_problems,
    check_chart,
    guide_labels,
    item_drawn,
    scenegraph,
    title_texts,
    vl_version,
)
from workbench.report.results import Recorder
from workbench.scenarios.arena import arena_for_config
from workbench.scenarios.arena_charts import figure_specs
from workbench.scenarios.userconfig import load_config

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.toml"))
LATENCY = pd.DataFrame({"model": ["a", "b", "c"], "latency_s": [0.004, 0.3, 2.5]})


def log_bars(x2: bool) -> alt.Chart:
    """Horizontal bars on a log axis, from 0 (blank) or from `log_base` (drawn)."""
    enc = {"x2": alt.datum(log_base(LATENCY.latency_s))} if x2 else {}
    return alt.Chart(LATENCY).mark_bar().encode(
        x=alt.X("latency_s:Q", scale=alt.Scale(type="log")), y="model:N", **enc)


def scatter(title: str, with_diagonal: bool) -> alt.TopLevelMixin:
    """Measured vs predicted points, with or without the y = x line."""
    frame = pd.DataFrame({"measured": [0.1, 0.2, 0.5], "predicted": [0.12, 0.18, 0.6]})
    points = alt.Chart(frame).mark_point().encode(x=alt.X("measured:Q", scale=alt.Scale(type="log")),
                                                  y=alt.Y("predicted:Q", scale=alt.Scale(type="log")))
    chart = alt.layer(points, diagonal("measured", "predicted", frame.stack())) if with_diagonal else points
    return chart.properties(title=title)


def test_log_bars_from_zero_are_blank_and_from_log_base_are_drawn():
    problems = chart_problems(log_bars(x2=False))
    assert len(problems) == 1 and "draws nothing" in problems[0] and "3 items" in problems[0]
    assert chart_problems(log_bars(x2=True)) == []


def test_an_empty_layer_is_blank_even_beside_a_drawn_one():
    frame = pd.DataFrame({"x": ["a", "b"], "y": [1.0, 2.0], "paper": [None, None]})
    base = alt.Chart(frame).encode(x="x:N")
    chart = alt.layer(base.mark_bar().encode(y="y:Q"), base.mark_point().encode(y="paper:Q"))
    problems = chart_problems(chart)
    assert len(problems) == 1 and "has no items" in problems[0]
    assert chart_problems(base.mark_bar().encode(y="y:Q")) == []


def test_a_diagonal_in_the_title_needs_a_line_across_both_axes():
    problems = chart_problems(scatter("measured vs predicted (diagonal = exact)", with_diagonal=False))
    assert len(problems) == 1 and "diagonal" in problems[0]
    assert chart_problems(scatter("measured vs predicted (diagonal = exact)", with_diagonal=True)) == []
    # a horizontal rule is not a diagonal
    frame = pd.DataFrame({"measured": [0.1, 0.5], "predicted": [0.1, 0.6]})
    flat = alt.layer(alt.Chart(frame).mark_point().encode(x="measured:Q", y="predicted:Q"),
                     alt.Chart().mark_rule().encode(y=alt.datum(0.3))).properties(title="diagonal = exact")
    assert any("diagonal" in p for p in chart_problems(flat))


def test_paper_ticks_in_a_title_need_a_drawn_tick():
    frame = pd.DataFrame({"x": ["a", "b"], "y": [1.0, 2.0], "paper": [1.5, None]})
    bars = alt.Chart(frame).mark_bar().encode(x="x:N", y="y:Q")
    assert any("paper's ticks" in p for p in chart_problems(bars.properties(title="modelled bars, paper ticks")))
    ticks = alt.Chart(frame).mark_tick().encode(x="x:N", y="paper:Q")
    assert chart_problems(alt.layer(bars, ticks).properties(title="modelled bars, paper ticks")) == []


@pytest.mark.parametrize("reported", [True, False])
def test_speedup_chart_names_the_paper_ticks_only_where_there_are_some(reported):
    frame = pd.DataFrame({"model": ["a", "b"], "speedup_over_mlm": [1.3, 1.1], "speedup_over_sp": [1.2, None]})
    paper = pd.DataFrame({"model": ["a", "b"], "baseline": ["speedup_over_mlm"] * 2,
                          "paper": [1.35, 1.05] if reported else [None, None]})
    spec = speedup_chart(frame, ["model"], "model", "Table IV", paper=paper).to_dict()
    assert ("black ticks the paper" in str(spec)) is reported
    assert chart_problems(spec) == []


def test_log_base_is_the_decade_strictly_below_the_smallest_value():
    assert [log_base([v, 50]) for v in (1, 5, 0.31, 100, 1e-3)] == [0.1, 1.0, 0.1, 10.0, 1e-4]
    with pytest.raises(WorkbenchError, match="positive"):
        log_base([0.0, float("nan")])


def test_item_extent_rules():
    assert item_drawn("rect", {"x": 0, "y": 0, "width": 10, "height": 5})
    assert not item_drawn("rect", {"x": None, "y": 0, "width": None, "height": 5})
    assert not item_drawn("rect", {"x": 0, "y": 0, "width": 0, "height": 5})
    assert item_drawn("rule", {"x": 0, "y": 0, "x2": 0, "y2": 40})
    assert not item_drawn("rule", {"x": 0, "y": 0, "x2": 0, "y2": 0})
    assert item_drawn("symbol", {"x": 3, "y": 4}) and not item_drawn("symbol", {"x": float("nan"), "y": 4})


def test_vl_version_follows_the_specs_schema():
    assert vl_version({"$schema": "https://vega.github.io/schema/vega-lite/v6.4.1.json"}) == "v6_4"
    assert vl_version({}) is None


def test_recorder_refuses_a_blank_chart_by_name_and_writes_nothing(tmp_path):
    rec = Recorder("nb", tmp_path)
    with pytest.raises(WorkbenchError, match="chart 'nb/latency' .*draws nothing"):
        rec.chart(log_bars(x2=False), "latency")
    assert not (tmp_path / "nb" / "latency.png").exists() and rec.charts == []
    assert rec.chart(log_bars(x2=True), "latency") is None
    assert (tmp_path / "nb" / "latency.png").stat().st_size > 1000 and rec.charts == ["latency"]


def test_check_chart_raises_one_line():
    with pytest.raises(WorkbenchError) as caught:
        check_chart(scatter("diagonal = exact", with_diagonal=False), "own/mvp")
    assert "\n" not in str(caught.value) and "own/mvp" in str(caught.value)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_whatif_chart_is_drawn(path):
    arena = arena_for_config(load_config(path))
    specs = figure_specs(arena)
    assert set(specs) == {"breakdown", "ranking", "memory"}
    for name, spec in specs.items():
        assert chart_problems(spec) == [], name


# ---- the notebooks' charts draw what they promise -----------------------------------------------------------------
def test_guide_labels_read_every_axis_and_legend():
    chart = alt.Chart(LATENCY).mark_bar().encode(x=alt.X("latency_s:Q", title="latency"), y=alt.Y("model:N", title="m"),
                                                 color=alt.Color("model:N", title="which"))
    labels = guide_labels(scenegraph(chart.to_dict()))
    assert labels["m"] == ["a", "b", "c"] and "latency" in labels
    assert guide_labels(scenegraph(chart.to_dict()), "legend") == {"which": ["a", "b", "c"]}


def test_regime_chart_ticks_exactly_its_grid_values():
    """A log axis left to itself ticked 0.8, 3, 5, 7 beside the grid's 1, 2, 4, 8 devices (moe/regime_decode.png)."""
    from workbench.scenarios.regimes import regime_chart

    win = pd.DataFrame([{"n_devices": n, "memory_gib": m, "phase": "decode", "winner": "a" if n * m < 32 else "b",
                         "paper": "p", "latency_s": 0.1, "runner_up": "c", "margin": 1.5}
                        for n in (1, 2, 4, 8) for m in (2, 4, 8, 16, 32)])
    labels = guide_labels(scenegraph(regime_chart(win, "n_devices", "memory_gib", "decode").to_dict()))
    assert labels == {"devices": ["1", "2", "4", "8"], "memory per device (GiB)": ["2", "4", "8", "16", "32"]}


def speedup_grid(low: float, high: float) -> pd.DataFrame:
    """A 4 x 5 alpha x gamma grid of speed-ups from `low` to `high` (geometric), two schemes."""
    import numpy as np

    cells = [(a, g) for a in (0.2, 0.4, 0.6, 0.8) for g in range(1, 6)]
    speedups = np.geomspace(low, high, len(cells))
    return pd.DataFrame([{"scheme": s, "alpha": a, "gamma": g, "latency_ms": g, "speedup": x}
                         for s in ("p", "q") for (a, g), x in zip(cells, speedups)])


@pytest.mark.parametrize("low, high", [(0.142, 1.917), (0.543, 10.7), (0.503, 1.47), (0.5, 0.9), (1.2, 3.0)])
@pytest.mark.parametrize("column", [None, "scheme"])
def test_speedup_heatmap_legend_spans_the_data_and_labels_above_1x(low, high, column):
    """The speculation heat maps' legends stopped at 1x over data up to 1.9x (their log ticks fell below it)."""
    from workbench.studies.speculative import speedup_heatmap

    chart = speedup_heatmap(speedup_grid(low, high), "gamma", "gamma", "t", column=column)
    labels = [float(text.removesuffix("x")) for text in guide_labels(scenegraph(chart.to_dict()), "legend")["speed-up"]]
    assert min(labels) <= low and max(labels) >= high
    assert 1.0 in labels and len(labels) == len(set(labels))
    assert any(x > 1 for x in labels) == (high > 1)


def test_parts_chart_marks_the_schemes_that_do_not_fit_and_says_so():
    from workbench.studies.speculative import OOM_CAPTION, parts_chart

    parts = pd.DataFrame({"scheme": ["a", "a", "b", "b"], "part": ["draft", "verify", "draft", "verify"],
                          "seconds": [0.1, 1.0, 0.2, 2.0], "gamma": [2, 2, 3, 3]})
    plain = pd.DataFrame({"scheme": ["a", "b"], "plain_s": [1.5, 2.5]})
    graph = scenegraph(parts_chart(parts, plain, ["a", "b"], {"b"}).to_dict())
    assert guide_labels(graph)[""] == ["a", "b (OOM)"]
    assert OOM_CAPTION in title_texts(graph)
    fitting = scenegraph(parts_chart(parts, plain, ["a", "b"], set()).to_dict())
    assert guide_labels(fitting)[""] == ["a", "b"] and OOM_CAPTION not in title_texts(fitting)


def cell_rows(graph: dict) -> list[tuple[dict[str, float], list[tuple[str, float]]]]:
    """Per facet cell: its y-axis labels' heights by text, and (constant, y) of each of its bars (rule marks that
    name a constant in their description)."""
    cells = []
    for cell in (item for mark in _marks(graph) if mark.get("name") == "cell" for item in mark["items"]):
        inner = list(_marks(cell))
        labels = {i["text"]: i["y"] for m in inner if m.get("role") == "axis-label" for i in m["items"]}
        bars = [(re.search(r"constant: (\w+)", i["description"]).group(1), i["y"]) for m in inner
                if m["marktype"] == "rule" and m.get("role") == "mark" for i in m["items"]
                if "constant: " in i.get("description", "")]
        cells.append((labels, bars))
    return cells


def test_sensitivity_bars_sit_on_their_own_labelled_rows():
    """Grouped inside each device's band, a constant only some devices have drew its bar between two devices."""
    from workbench.studies.devices import sensitivity_chart

    frame = pd.DataFrame({"device": ["d1", "d1", "d2", "d2", "d2"], "constant": ["gemm", "gemv", "gemm", "gemv", "mem"],
                          "value": [0.4] * 5, "low_change": [0.0, -0.4, 0.0, 0.0, -0.5],
                          "high_change": [0.0, 0.0, 0.0, 0.0, 0.2]})
    cells = cell_rows(scenegraph(sensitivity_chart(frame, ["d1", "d2"], "x", "t").to_dict()))
    assert [sorted(labels) for labels, _ in cells] == [["gemm", "gemv"], ["gemm", "gemv", "mem"]]
    for labels, bars in cells:
        assert sorted(c for c, _ in bars) == sorted(labels)
        assert all(y == pytest.approx(labels[constant], abs=1.0) for constant, y in bars)
