"""Charts the paper notebooks draw more than once: one function per chart shape, so each draws alike.

`speedup_chart` is Galaxy's "speedup over M-LM / SP" chart (Table IV, Figs. 8 and 9, the GPU environment,
Fig. 9's what-if): a wide frame with one column per series is melted and drawn as grouped bars (one bar per
series in each category) or as lines over a quantitative x, optionally faceted and with the paper's values
as black ticks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import altair as alt
import pandas as pd

from workbench.core.errors import WorkbenchError

SPEEDUP_SERIES = ("speedup_over_mlm", "speedup_over_sp")


def speedup_long(frame: pd.DataFrame, keys: Sequence[str], series: Sequence[str] = SPEEDUP_SERIES,
                 series_name: str = "baseline", value_name: str = "speedup") -> pd.DataFrame:
    """One row per (keys, series) with the series' value; rows without a value (an OOM cell) stay as NaN."""
    missing = [c for c in (*keys, *series) if c not in frame.columns]
    if missing:
        raise WorkbenchError(f"speedup chart: columns {missing} are not in the frame ({list(frame.columns)})")
    return frame.melt(id_vars=list(keys), value_vars=list(series), var_name=series_name, value_name=value_name)


def speedup_chart(frame: pd.DataFrame, keys: Sequence[str], x: str, title: str, *,
                  series: Sequence[str] = SPEEDUP_SERIES,
                  series_name: str = "baseline", color: str | None = None, facet: str | None = None,
                  line: bool = False, log_x: bool = False, x_title: str | None = None, sort: Sequence[str] | None = None,
                  y_title: str = "Galaxy speedup (x)", paper: pd.DataFrame | None = None,
                  width: int = 360) -> alt.TopLevelMixin:
    """Speedups of `frame` (columns `series`, rows keyed by `keys`) against `x`: grouped bars, or lines
    (`line`) with the series as dash patterns when `color` names another column. `paper`, keyed like the
    long frame (`keys` + `series_name`) with a `paper` column, adds the reported values as black ticks (and
    says so on the axis only when there is one to draw) and marks the cells without a modelled value; `facet`
    splits the chart into columns."""
    long = speedup_long(frame, keys, series, series_name)
    color = color or series_name
    tooltip = [*dict.fromkeys([*keys, series_name]), "speedup"]
    if line:
        x_enc = alt.X(f"{x}:Q", title=x_title or alt.Undefined, scale=alt.Scale(type="log") if log_x else alt.Undefined)
        enc = {"x": x_enc, "y": alt.Y("speedup:Q", title=y_title, scale=alt.Scale(zero=False)), "color": f"{color}:N"}
        if color != series_name:
            enc.update(strokeDash=alt.StrokeDash(f"{series_name}:N", legend=alt.Legend(symbolType="stroke",
                                                                                        symbolStrokeWidth=2)),
                       shape=f"{series_name}:N")
        chart = alt.Chart(long.dropna(subset=["speedup"])).mark_line(point=True).encode(**enc, tooltip=tooltip)
    else:
        chart = _bars(long, x, series_name, y_title, sort, tooltip, paper)
    chart = chart.properties(width=width)
    return (chart.facet(column=f"{facet}:N") if facet else chart).properties(title=title)


def _bars(long: pd.DataFrame, x: str, series_name: str, y_title: str, sort: Sequence[str] | None, tooltip: list,
          paper: pd.DataFrame | None) -> alt.LayerChart | alt.Chart:
    """Grouped bars of `long` (one per series in each `x` category), with the paper's ticks if given."""
    x_enc = alt.X(f"{x}:N", sort=list(sort) if sort is not None else alt.Undefined)
    if paper is None:
        return alt.Chart(long.dropna(subset=["speedup"])).mark_bar().encode(
            x=x_enc, y=alt.Y("speedup:Q", title=y_title), color=f"{series_name}:N", xOffset=f"{series_name}:N",
            tooltip=tooltip)
    keys = [c for c in paper.columns if c != "paper"]
    long = long.merge(paper, on=keys, how="left")
    long["empty"] = long["speedup"].isna().map({True: "OOM", False: ""})
    base = alt.Chart().encode(x=x_enc, xOffset=f"{series_name}:N")
    reported = bool(long["paper"].notna().any())  # the paper's ticks are drawn (and named) only where it reports
    bars = base.mark_bar().encode(
        y=alt.Y("speedup:Q", title=f"{y_title}: bars modelled, black ticks the paper" if reported else
                f"{y_title}: modelled (the paper reports none here)"),
        color=f"{series_name}:N", tooltip=[*tooltip, "paper"])
    ticks = [base.mark_tick(color="black", thickness=2).encode(y="paper:Q")] if reported else []
    return alt.layer(
        bars, *ticks,
        base.mark_text(baseline="bottom", dy=-2, fontSize=9, color="grey").encode(y=alt.datum(1.0), text="empty:N"),
        alt.Chart().mark_rule(strokeDash=[4, 3], color="grey").encode(y=alt.datum(1.0)), data=long)

def log_base(values: Sequence[float] | pd.Series) -> float:
    """Where bars on a log axis start: the largest power of ten below the smallest positive value (1 -> 0.1).

    A log axis has no 0, so a bar left to start at 0 has no length and the chart is blank; bars given
    ``x2=alt.datum(log_base(values))`` (or ``y2``) start at this decade instead."""
    positive = [float(v) for v in values if pd.notna(v) and float(v) > 0]
    if not positive:
        raise WorkbenchError("log_base needs at least one positive value (a log axis shows no other)")
    smallest = min(positive)
    base = 10.0 ** (math.ceil(math.log10(smallest)) - 1)
    return base / 10 if base >= smallest else base  # log10 rounding at an exact power of ten


def diagonal(x: str, y: str, values: Sequence[float] | pd.Series) -> alt.Chart:
    """The y = x line (dashed grey) across the range of `values`, on fields `x` and `y`: "exact" on a
    measured-vs-predicted chart; layer it over the points (it shares their axes, log or linear)."""
    finite = [float(v) for v in values if pd.notna(v) and float(v) > 0]
    if not finite:
        raise WorkbenchError("diagonal needs at least one positive value to span")
    ends = [min(finite), max(finite)]
    return alt.Chart(pd.DataFrame({x: ends, y: ends})).mark_line(color="grey", strokeDash=[4, 3]).encode(
        x=f"{x}:Q", y=f"{y}:Q")
