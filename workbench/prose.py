"""Sentences whose numbers come from the data they describe, shown as Markdown in a notebook.

Notebook markdown cells carry no typed results (tests/test_notebook_prose.py scans them); a number a
reader should see in prose is formatted here from a frame's value, so it changes when the data does.
"""

from __future__ import annotations

from typing import Any

from workbench.errors import WorkbenchError


def sentence(template: str, **values: Any) -> str:
    """The template with each `{name:format}` filled from `values` (str.format rules)."""
    return template.format(**values)


def say(template: str, **values: Any) -> None:
    """Display the filled template as Markdown (IPython); returns nothing, so a cell shows it once."""
    from IPython.display import Markdown, display

    display(Markdown(sentence(template, **values)))


def span(values: Any, fmt: str = ".2g", unit: str = "") -> str:
    """'lo-hi unit' of a column of numbers ('lo to hi' when signed; one value when they agree), for prose."""
    numbers = [float(v) for v in values]
    if not numbers:
        raise WorkbenchError("values: empty, expected at least one number")
    lo, hi = format(min(numbers), fmt), format(max(numbers), fmt)
    signed = lo[0] in "+-" or hi[0] in "+-"
    text = lo if lo == hi else f"{lo} to {hi}" if signed else f"{lo}-{hi}"
    return f"{text} {unit}".rstrip()
