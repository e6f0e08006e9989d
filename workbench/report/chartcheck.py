"""Is a chart drawn? Render a Vega-Lite spec to Vega's scenegraph (vl-convert, offline) and inspect its marks.

A chart can compile and save and still show nothing: a log-scale bar starts at 0, so every bar has no
length (Vega writes its x as null), and the PNG is axes and a legend. `chart_problems` lists, in words,

* every mark layer (a mark of the spec, counted over all facet cells) with no item drawn at a finite
  position with non-zero extent (a rect needs width and height, a rule a length, a symbol/line/text a
  finite position), and
* every promise a title makes that the marks do not keep: a title that names a "diagonal" needs a rule or
  line running across both axes; one that names the paper's "ticks" needs a tick mark with a drawn item.

`check_chart` raises one `WorkbenchError` naming the chart; `Recorder.chart` calls it before saving.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from workbench.core.errors import WorkbenchError

TITLE_ROLES = ("title-text", "title-subtitle", "axis-title", "legend-title")
# Marks Vega-Lite adds for interaction, not for data: never judged.
HELPER_SUFFIXES = ("_brush", "_voronoi")
DIAGONAL = re.compile(r"diagonal", re.IGNORECASE)
PAPER_TICKS = re.compile(r"paper('s)? ticks?|ticks?,? (are |= )?the paper|paper.{0,20}\bticks?\b", re.IGNORECASE)


@dataclass(frozen=True)
class MarkLayer:
    """One mark of the spec over every facet cell: its name, Vega mark type, items, and items actually drawn."""

    name: str
    marktype: str
    role_description: str
    items: int
    drawn: int
    diagonal: bool  # some drawn item runs across both axes (a rule or a line with extent in x and in y)

    def __post_init__(self) -> None:
        if not 0 <= self.drawn <= self.items:
            raise WorkbenchError(f"mark layer {self.name}: drawn={self.drawn} must be in [0, items={self.items}]")


def _finite(*values: object) -> bool:
    """Whether every value is a real, finite number (Vega writes null for a position it could not scale)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def _span(item: dict, axis: str) -> float:
    """The item's extent along `axis` ("x" or "y"): width/height, else |x2 - x|; NaN when not finite."""
    size = item.get("width" if axis == "x" else "height")
    if size is not None:
        return float(size) if _finite(size) else math.nan
    start, end = item.get(axis, 0), item.get(f"{axis}2", item.get(axis, 0))
    return abs(end - start) if _finite(start, end) else math.nan


def item_drawn(marktype: str, item: dict) -> bool:
    """Whether one scenegraph item shows on the chart: a rect with area, a rule with length, else a finite point."""
    if marktype == "rect":
        width, height = _span(item, "x"), _span(item, "y")
        return _finite(item.get("x", 0), item.get("y", 0)) and width > 0 and height > 0
    if marktype == "rule":
        spans = (_span(item, "x"), _span(item, "y"))
        return all(_finite(s) for s in spans) and max(spans) > 0
    if marktype == "arc":
        return _finite(item.get("x", 0), item.get("y", 0)) and item.get("endAngle", 0) != item.get("startAngle", 0)
    return _finite(item.get("x", 0), item.get("y", 0))


def _runs_diagonally(marktype: str, items: list[dict]) -> bool:
    """Whether the drawn items run across both axes: a rule with x- and y-extent, or a line whose points do."""
    if marktype == "rule":
        return any(item_drawn("rule", i) and _span(i, "x") > 0 and _span(i, "y") > 0 for i in items)
    if marktype == "line":
        points = [(i["x"], i["y"]) for i in items if _finite(i.get("x"), i.get("y"))]
        return len(points) >= 2 and len({x for x, _ in points}) > 1 and len({y for _, y in points}) > 1
    return False


def _marks(node: dict) -> Iterator[dict]:
    """Every mark (a node with a `marktype`) below `node`, depth first."""
    if "marktype" in node:
        yield node
    for item in node.get("items", []):
        if isinstance(item, dict) and "items" in item:
            yield from _marks(item)


def vl_version(spec: dict) -> str | None:
    """vl-convert's name ("v6_4") for the Vega-Lite version in the spec's $schema (None: vl-convert's latest)."""
    found = re.search(r"/v(\d+)\.(\d+)", str(spec.get("$schema", "")))
    return f"v{found.group(1)}_{found.group(2)}" if found else None


def scenegraph(spec: dict) -> dict:
    """Vega's scenegraph of a Vega-Lite spec (vl-convert, no browser, no network)."""
    import vl_convert

    try:
        return vl_convert.vegalite_to_scenegraph(spec, vl_version=vl_version(spec))["scenegraph"]
    except ValueError as exc:
        raise WorkbenchError(f"chart does not compile: {str(exc).splitlines()[0]}") from exc


def mark_layers(graph: dict) -> list[MarkLayer]:
    """The data marks of a scenegraph, one per mark name (facet cells pooled), in drawing order."""
    pooled: dict[str, tuple[str, str, list[dict]]] = {}
    for mark in _marks(graph):
        name = mark.get("name") or ""
        if mark.get("role") != "mark" or mark["marktype"] == "group" or name.endswith(HELPER_SUFFIXES):
            continue
        items = mark.get("items", [])
        kind = next((i.get("ariaRoleDescription", "") for i in items), "")
        _, old_kind, old_items = pooled.get(name, (mark["marktype"], kind, []))
        pooled[name] = (mark["marktype"], old_kind or kind, old_items + items)
    return [MarkLayer(name, marktype, kind, len(items), sum(item_drawn(marktype, i) for i in items),
                      _runs_diagonally(marktype, items))
            for name, (marktype, kind, items) in pooled.items()]


def title_texts(graph: dict) -> list[str]:
    """Every title, subtitle, axis title and legend title the chart shows, as one line each."""
    texts = []
    for mark in _marks(graph):
        if mark["marktype"] == "text" and mark.get("role") in TITLE_ROLES:
            for item in mark.get("items", []):
                text = item.get("text", "")
                texts.append(" ".join(map(str, text)) if isinstance(text, list) else str(text))
    return texts


def _texts(mark: dict) -> list[str]:
    """The text of every item of a text mark, one line each (a multi-line text joined by spaces)."""
    return [" ".join(map(str, t)) if isinstance(t, list) else str(t) for t in (i.get("text", "") for i in mark["items"])]


def guide_labels(graph: dict, guide: str = "axis") -> dict[str, list[str]]:
    """The non-empty labels of every axis (`guide` "axis") or legend ("legend") the chart draws, by the guide's
    title ("" when untitled; the guides of facet cells sharing a title are pooled), in drawing order."""
    found: dict[str, list[str]] = {}
    for node in _marks(graph):
        if node["marktype"] != "group" or node.get("role") != guide:
            continue
        inner = [m for m in _marks(node) if m is not node and m["marktype"] == "text"]
        title = " ".join(t for m in inner if m.get("role") == f"{guide}-title" for t in _texts(m))
        labels = [t for m in inner if m.get("role") == f"{guide}-label" for t in _texts(m) if t]
        found.setdefault(title, []).extend(labels)
    return found


def promise_problems(titles: list[str], layers: list[MarkLayer]) -> list[str]:
    """What the titles promise that no layer draws: a diagonal, the paper's ticks."""
    problems = []
    for title in titles:
        if DIAGONAL.search(title) and not any(layer.diagonal for layer in layers):
            problems.append(f"title {title!r} promises a diagonal, but no rule or line runs across both axes")
        if PAPER_TICKS.search(title) and not any(layer.role_description == "tick" and layer.drawn for layer in layers):
            problems.append(f"title {title!r} promises the paper's ticks, but no tick is drawn")
    return problems


def spec_problems(spec: dict) -> list[str]:
    """Everything wrong with how a Vega-Lite spec draws (empty list: every layer shows and every promise is kept)."""
    graph = scenegraph(spec)
    layers = mark_layers(graph)
    problems = [] if layers else ["the chart has no mark layer"]
    problems += [f"mark layer {layer.name!r} ({layer.role_description or layer.marktype}) draws nothing: "
                 + (f"all {layer.items} items have no finite extent" if layer.items else "it has no items")
                 for layer in layers if not layer.drawn]
    return problems + promise_problems(title_texts(graph), layers)


def chart_problems(chart) -> list[str]:
    """`spec_problems` of an altair chart or of a Vega-Lite spec (dict)."""
    return spec_problems(chart if isinstance(chart, dict) else chart.to_dict())


def check_chart(chart, name: str) -> None:
    """Raise a one-line WorkbenchError naming chart `name` if it is blank anywhere or breaks a title's promise."""
    problems = chart_problems(chart)
    if problems:
        raise WorkbenchError(f"chart {name!r} is not drawn as titled: " + "; ".join(problems))
