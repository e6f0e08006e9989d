"""What a notebook shows: charts as static PNGs (no Vega from a CDN, works offline) and tables in human units.

`show_inline` displays a PNG that `Recorder.chart` wrote, only inside a Jupyter kernel (a plain Python run or
a test shows nothing). `display_table` returns a copy of a frame for display, each number as text in its
column's unit: seconds as ns/us/ms/s, bytes as B/KiB/MiB/GiB, other numbers with 3 significant digits and an
SI prefix instead of an exponent (1.567599e+09 -> "1.57 G"). A tidy results frame (`value` + `unit`) is
formatted row by row by its unit. results.csv and the charts' CSVs keep full precision; this is only the view.
"""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path

import pandas as pd

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_SCALE = 2  # Recorder.chart writes PNGs at scale_factor 2: shown at half their pixel width, as the SVG
SI_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
BYTE_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B"))
TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
# Column names (or tidy `unit`s) that hold seconds or bytes.
SECONDS = re.compile(r"(^|_)(s|sec|seconds|latency|time)$")
BYTES = re.compile(r"(^|_)(B|bytes)$")
MISSING = "—"  # a cell without a number (an OOM cell, a value the paper does not report)


def in_kernel() -> bool:
    """Whether this code runs inside a Jupyter (IPython) kernel, where displayed outputs reach a notebook."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def png_width(data: bytes) -> int:
    """The pixel width written in a PNG's header (IHDR)."""
    if data[:8] != PNG_SIGNATURE:
        raise ValueError("not a PNG file")
    return struct.unpack(">I", data[16:20])[0]


def show_inline(png: Path, alt: str) -> None:
    """Display the PNG at `png` in the running notebook at its natural size, `alt` as its alternative text
    (nothing outside a kernel)."""
    if not in_kernel():
        return
    from IPython.display import Image, display

    data = Path(png).read_bytes()
    display(Image(data=data, format="png", width=max(1, png_width(data) // PNG_SCALE), alt=alt))


def sig3(value: float) -> str:
    """About 3 significant digits in fixed notation, never an exponent (1234.5 -> '1230', 0.2377 -> '0.238')."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    value = float(f"{value:.3g}")  # 19.999999999999996 (20e-6 / 1e-6) -> 20
    if value.is_integer() and abs(value) < 1e4:
        return str(int(value))
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    """`value` in the largest of `units` it reaches (the smallest for tiny values), 3 significant digits."""
    size, unit = next(((s, u) for s, u in units if abs(value) >= s), units[-1])
    return f"{sig3(value / size)} {unit}".rstrip()


def format_seconds(value: float) -> str:
    """Seconds as ns/µs/ms/s with 3 significant digits: 0.01234 -> '12.3 ms'."""
    return MISSING if _missing(value) else "0 s" if value == 0 else _scaled(float(value), TIME_UNITS)


def format_bytes(value: float) -> str:
    """Bytes in binary units with 3 significant digits: 3 * 2**30 -> '3 GiB'."""
    return MISSING if _missing(value) else _scaled(float(value), BYTE_UNITS)


def format_number(value: float) -> str:
    """3 significant digits, an SI prefix instead of an exponent: -0.2377283 -> '-0.238', 1.567599e9 -> '1.57 G'."""
    if _missing(value):
        return MISSING
    value = float(value)
    if value == 0 or 1e-3 <= abs(value) < 1e4 or not math.isfinite(value):
        return sig3(value)
    return _scaled(value, SI_PREFIXES)


def _missing(value: object) -> bool:
    """Whether a cell has no number (None, NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_value(value: object, unit: str) -> str:
    """One number in its unit ("s", "B", or anything else: the unit is appended)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return MISSING if _missing(value) else str(value)
    if SECONDS.search(unit):
        return format_seconds(value)
    if BYTES.search(unit):
        return format_bytes(value)
    text = format_number(value)
    return f"{text} {unit}" if unit and text != MISSING else text


def _column_formatter(name: str):
    """The formatter for a column, chosen by its name (`latency_s`, `message_bytes`, anything else)."""
    if SECONDS.search(name):
        return format_seconds
    if BYTES.search(name):
        return format_bytes
    return format_number


def display_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` for showing in a notebook, its float columns as text in human units (see module doc)."""
    shown = frame.copy()
    if {"value", "unit"} <= set(shown.columns):
        shown["value"] = [format_value(v, str(u)) for v, u in zip(frame["value"], frame["unit"])]
        shown = shown.drop(columns="unit")
    for column in shown.columns:
        if pd.api.types.is_float_dtype(shown[column]):
            shown[column] = shown[column].map(_column_formatter(str(column)))
    return shown


def _html(frame: pd.DataFrame) -> str:
    """The notebook's HTML for a frame, through `display_table` (pandas' own row and column truncation kept)."""
    return display_table(frame)._repr_html_()


def human_tables() -> None:
    """From now on, show every DataFrame this notebook displays through `display_table` (in a kernel only).

    Called once at the top of a notebook; the frames themselves (and results.csv) keep full precision."""
    if not in_kernel():
        return
    from IPython import get_ipython

    formatters = get_ipython().display_formatter.formatters
    formatters["text/html"].for_type(pd.DataFrame, _html)
    formatters["text/plain"].for_type(pd.DataFrame, lambda frame, printer, cycle: printer.text(
        display_table(frame).to_string(max_rows=60)))


def setup_notebook(interactive: bool) -> None:
    """Once at the top of a notebook: tables in human units (`human_tables`) and, when `interactive`, live
    charts (`alt.JupyterChart`) drawn by the Vega that vl-convert bundles instead of one loaded from a CDN
    (works offline; bundling takes a few seconds, so batch runs skip it). Nothing outside a kernel."""
    human_tables()
    if interactive and in_kernel():
        import altair as alt

        alt.JupyterChart.enable_offline()
