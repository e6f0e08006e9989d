"""Sentences whose numbers come from the data they describe, shown as Markdown in a notebook.

Notebook markdown cells carry no typed results (tests/test_notebook_prose.py scans them); a number a
reader should see in prose is formatted here from a frame's value, so it changes when the data does.
"""

from __future__ import annotations

from typing import Any

from workbench.core.errors import WorkbenchError


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


def listing(items: Any, conjunction: str = "and") -> str:
    """'a', 'a and b', 'a, b and c': the items as text, for a sentence ('' when there are none)."""
    words = [str(item) for item in items]
    return ", ".join(words[:-1]) + f" {conjunction} " + words[-1] if len(words) > 1 else "".join(words)


def trend(values: Any, fmt: str = ".2g", unit: str = "") -> str:
    """How a sequence moves from its first value to its last, as formatted: 'stays at 0.3', 'falls from 0.85 to
    0.05', 'rises from 0.1 to 0.4', else 'varies between lo and hi' (a sentence never says 'from 0.3 to 0.3')."""
    shown = [format(float(v), fmt) for v in values]
    if not shown:
        raise WorkbenchError("values: empty, expected at least one number")
    numbers = [float(v) for v in shown]
    tail = f" {unit}" if unit else ""
    if len(set(shown)) == 1:
        return f"stays at {shown[0]}{tail}"
    if all(a >= b for a, b in zip(numbers, numbers[1:])):
        return f"falls from {shown[0]} to {shown[-1]}{tail}"
    if all(a <= b for a, b in zip(numbers, numbers[1:])):
        return f"rises from {shown[0]} to {shown[-1]}{tail}"
    return f"varies between {format(min(numbers), fmt)} and {format(max(numbers), fmt)}{tail}"
