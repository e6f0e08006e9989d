"""The speculative notebook's charts: speed-up heat maps whose legend spans the data on both sides of 1x, and the
per-token parts at the quoted alpha with the schemes that do not fit memory marked.

A log colour scale diverging at 1 (red: speculation loses, blue: it pays) left to Vega ticks its legend at powers
of ten and their 2 and 5 multiples inside the domain, so a grid whose best speed-up is 1.9x shows labels up to 1x
only. `speedup_color` fixes the domain to the data (widened to reach 1) and labels its two ends and 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import altair as alt
import pandas as pd

from workbench.core.errors import WorkbenchError

OOM_MARK = " (OOM)"
OOM_CAPTION = "(OOM): the scheme's plan does not fit the devices' memory; its bars are its time if it did"
NICE = (1.0, 2.0, 5.0)  # a log legend's inner labels: 1, 2 and 5 times a power of ten


def rounded(value: float, up: bool) -> float:
    """`value` rounded to 2 significant digits, up or down (so a domain's ends still hold the data)."""
    step = 10.0 ** (math.floor(math.log10(value)) - 1)
    return float(f"{(math.ceil if up else math.floor)(round(value / step, 9)) * step:.2g}")


def legend_values(values: Iterable[float], crowd: float = 1.3) -> list[float]:
    """Labels for a log speed-up legend: the data's least (rounded down) and greatest (rounded up, 2 significant
    digits), 1, and the 1-2-5 values between them that are not within a factor `crowd` of a label already there."""
    finite = [float(v) for v in values if pd.notna(v) and float(v) > 0 and math.isfinite(float(v))]
    if not finite:
        raise WorkbenchError("speed-up legend: no positive, finite value to span")
    lo, hi = rounded(min(min(finite), 1.0), up=False), rounded(max(max(finite), 1.0), up=True)
    ends = sorted({lo, 1.0, hi}) if lo < hi else [0.5, 1.0, 2.0]  # every value 1x: a legend around it
    inner = [m * 10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in NICE]
    labels = list(ends)
    for value in sorted(v for v in inner if lo < v < hi):
        if all(max(value / x, x / value) >= crowd for x in labels):
            labels.append(value)
    return sorted(labels)


def speedup_color(values: Sequence[float], field: str = "speedup", title: str = "speed-up") -> alt.Color:
    """A log colour scale diverging at 1x (red loses, blue pays) over the data's whole range (1 included), its
    legend labelled at both ends, at 1x and between (`legend_values`)."""
    labels = legend_values(values)
    return alt.Color(f"{field}:Q", title=title,
                     scale=alt.Scale(type="log", scheme="redblue", domainMid=1.0, domain=[labels[0], labels[-1]]),
                     legend=alt.Legend(values=labels, labelExpr="format(datum.value, '.2~g') + 'x'"))


def speedup_heatmap(frame: pd.DataFrame, x: str, x_title: str, title: str, column: str | None = None,
                    width: int = 380, height: int = 300) -> alt.Chart:
    """Speed-up tiles over `x` (ordinal) and alpha (descending), one panel per `column` value when given."""
    tooltip = [c for c in ("scheme", "target", x, "alpha", "gamma", "speedup", "losing_part") if c in frame.columns]
    encoding = {"x": alt.X(f"{x}:O", title=x_title), "y": alt.Y("alpha:O", sort="descending"),
                "color": speedup_color(frame["speedup"]), "tooltip": list(dict.fromkeys(tooltip))}
    if column is not None:
        encoding["column"] = alt.Column(f"{column}:N")
    return alt.Chart(frame).mark_rect().encode(**encoding).properties(title=title, width=width, height=height)


def oom_labels(schemes: Iterable[str], oom: Iterable[str]) -> list[str]:
    """Each scheme's name, with ' (OOM)' after those in `oom` (plans that do not fit memory)."""
    out_of_memory = set(oom)
    return [f"{s}{OOM_MARK}" if s in out_of_memory else s for s in schemes]


def parts_chart(parts: pd.DataFrame, plain: pd.DataFrame, order: Sequence[str], oom: Iterable[str],
                width: int = 420) -> alt.LayerChart:
    """Stacked per-token parts (`parts`: scheme, part, seconds, gamma) with plain decode's time as a black tick
    (`plain`: scheme, plain_s), one row per scheme in `order`, the schemes in `oom` marked '(OOM)' in the row
    label and the caption saying what the mark means."""
    oom = set(oom)
    label = dict(zip(order, oom_labels(order, oom)))
    rows = [label[s] for s in order]
    bars = alt.Chart(parts.assign(row=parts.scheme.map(label))).mark_bar().encode(
        y=alt.Y("row:N", sort=rows, title=None), x=alt.X("seconds:Q", title="seconds per token (speculative)"),
        color=alt.Color("part:N"), tooltip=["scheme", "part", "seconds", "gamma"])
    ticks = alt.Chart(plain.assign(row=plain.scheme.map(label))).mark_tick(color="black", thickness=3, size=18).encode(
        y=alt.Y("row:N", sort=rows), x="plain_s:Q", tooltip=["scheme", "plain_s"])
    return (bars + ticks).properties(width=width, title=alt.TitleParams(
        "Per-token parts at the quoted alpha (tick: plain decode)", subtitle=[OOM_CAPTION] if oom & set(order) else []))
