"""What a notebook shows: charts as static PNGs (no Vega from a CDN, works offline) and tables in human units.

`show_inline` displays a PNG that `Recorder.chart` wrote, only inside a Jupyter kernel (a plain Python run or
a test shows nothing). `display_table` returns a copy of a frame for display, each number as text in the unit
of its column's quantity, read from the column name's suffix (`COLUMN_QUANTITIES`: `tokens_per_s` a token rate,
`dram_peak_gb_s` a bandwidth, `latency_s` seconds, `weights_bytes` bytes, ...), 3 significant digits and
never an exponent. A column whose name names no quantity is a plain number (1.567599e+09 -> "1,570,000,000"):
a prefix is only ever written with its unit. A tidy results frame (`value` + `unit`) is formatted row by row by
its unit (`UNIT_QUANTITIES`). results.csv and the charts' CSVs keep full precision; this is only the view.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_SCALE = 2  # Recorder.chart writes PNGs at scale_factor 2: shown at half their pixel width, as the SVG
SI_UP = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))  # counts and rates: no milli-tokens
SI_PREFIXES = SI_UP + ((1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))  # physical units (W, J)
BYTE_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B"))
TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
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
    """About 3 significant digits in fixed notation, never an exponent (1234.5 -> '1230', 0.2377 -> '0.238',
    1.567599e9 -> '1,570,000,000')."""
    if value == 0:
        return "0"  # also -0.0 (a rounded tiny negative change)
    if not math.isfinite(value):
        return f"{value:g}"
    value = float(f"{value:.3g}")  # 19.999999999999996 (20e-6 / 1e-6) -> 20
    if value.is_integer():
        return str(int(value)) if abs(value) < 1e4 else f"{int(value):,}"
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def _missing(value: object) -> bool:
    """Whether a cell has no number (None, NaN)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _scaled(value: float, units: tuple[tuple[float, str], ...]) -> str:
    """`value` in the largest of `units` it reaches (the smallest for tiny values), 3 significant digits."""
    size, unit = next(((s, u) for s, u in units if abs(value) >= s), units[-1])
    return f"{sig3(value / size)} {unit}".rstrip()


def prefixed(unit: str, prefixes: tuple[tuple[float, str], ...] = SI_UP, attach: bool = True):
    """`unit` with each SI prefix ('MB/s' attached, 'k tokens/s' for a word), largest first, for `Quantity`."""
    return tuple((size, f"{p}{unit}" if attach else f"{p} {unit}".strip()) for size, p in prefixes)


@dataclass(frozen=True)
class Quantity:
    """What a number measures and how it is written: `units` from the largest down as (size in the base unit,
    symbol), none for a plain number; `scale` is one column unit in the base unit (a `_ms` column: 1e-3 s)."""

    name: str
    units: tuple[tuple[float, str], ...] = ()
    scale: float = 1.0
    suffix: str = ""  # written right after the number ("1.42x")

    def scaled(self, scale: float) -> Quantity:
        """The same quantity held in a column unit of `scale` base units (GiB: 2**30 bytes)."""
        return replace(self, scale=scale)

    def format(self, value: object) -> str:
        """One number of this quantity as text: 3 significant digits, in the largest unit it reaches."""
        if _missing(value):
            return MISSING
        number = float(value) * self.scale
        if not self.units:
            return sig3(number) + self.suffix
        if number == 0:  # zero in the base unit ("0 s", "0 B"), not in the smallest one
            return f"0 {next(u for s, u in self.units if s == 1)}"
        return _scaled(number, self.units)


PLAIN = Quantity("number")
SECONDS = Quantity("time", TIME_UNITS)
BYTES = Quantity("bytes", BYTE_UNITS)
BANDWIDTH = Quantity("bandwidth", prefixed("B/s"))
LINK_RATE = Quantity("link rate", prefixed("bit/s"))
TOKEN_RATE = Quantity("token rate", prefixed("tokens/s", attach=False))
RATE = Quantity("rate", prefixed("/s"))
FLOP_RATE = Quantity("FLOP rate", prefixed("FLOP/s"))
OP_RATE = Quantity("operation rate", prefixed("OP/s"))
POWER = Quantity("power", prefixed("W", SI_PREFIXES))
ENERGY = Quantity("energy", prefixed("J", SI_PREFIXES))
ENERGY_PER_TOKEN = Quantity("energy per token", prefixed("J/token", SI_PREFIXES))
TIME_PER_BYTE = Quantity("time per byte", prefixed("s/B", SI_PREFIXES))
PARAMS = Quantity("parameters", prefixed("params", attach=False))
RATIO = Quantity("ratio", suffix="x")

# A column's quantity by its name's last `_`-separated words (case-insensitive), most specific first: a rate
# (`tokens_per_s`, `dram_peak_gb_s`) is matched before seconds (`_s`). A name matching none is a plain number.
COLUMN_QUANTITIES = (
    ("tokens_per_s", TOKEN_RATE), ("tok_per_s", TOKEN_RATE), ("token_per_s", TOKEN_RATE),
    ("j_per_token", ENERGY_PER_TOKEN),
    ("bytes_per_s", BANDWIDTH), ("b_per_s", BANDWIDTH), ("kb_per_s", BANDWIDTH.scaled(1e3)),
    ("mb_per_s", BANDWIDTH.scaled(1e6)), ("gb_per_s", BANDWIDTH.scaled(1e9)), ("tb_per_s", BANDWIDTH.scaled(1e12)),
    ("kb_s", BANDWIDTH.scaled(1e3)), ("mb_s", BANDWIDTH.scaled(1e6)), ("gb_s", BANDWIDTH.scaled(1e9)),
    ("tb_s", BANDWIDTH.scaled(1e12)), ("mbps", LINK_RATE.scaled(1e6)), ("gbps", LINK_RATE.scaled(1e9)),
    ("flops_per_s", FLOP_RATE), ("flop_per_s", FLOP_RATE), ("gflops", FLOP_RATE.scaled(1e9)),
    ("tflops", FLOP_RATE.scaled(1e12)), ("gops", OP_RATE.scaled(1e9)), ("tops", OP_RATE.scaled(1e12)),
    ("per_s", RATE), ("s_per_byte", TIME_PER_BYTE),
    ("ns", SECONDS.scaled(1e-9)), ("us", SECONDS.scaled(1e-6)), ("ms", SECONDS.scaled(1e-3)), ("s", SECONDS),
    ("sec", SECONDS), ("seconds", SECONDS), ("latency", SECONDS), ("time", SECONDS),
    ("kib", BYTES.scaled(2**10)), ("mib", BYTES.scaled(2**20)), ("gib", BYTES.scaled(2**30)),
    ("tib", BYTES.scaled(2**40)), ("bytes", BYTES), ("b", BYTES),
    ("w", POWER), ("j", ENERGY), ("params", PARAMS), ("speedup", RATIO),
)
# A tidy frame's `unit` (results.csv) -> its quantity; any other unit is written after an SI-prefixed number.
UNIT_QUANTITIES = {
    "": PLAIN, "1": PLAIN, "fraction": PLAIN, "x": RATIO,
    "s": SECONDS, "ms": SECONDS.scaled(1e-3), "us": SECONDS.scaled(1e-6), "µs": SECONDS.scaled(1e-6),
    "ns": SECONDS.scaled(1e-9), "B": BYTES, "bytes": BYTES, "KiB": BYTES.scaled(2**10), "MiB": BYTES.scaled(2**20),
    "GiB": BYTES.scaled(2**30), "TiB": BYTES.scaled(2**40), "B/s": BANDWIDTH, "kB/s": BANDWIDTH.scaled(1e3),
    "MB/s": BANDWIDTH.scaled(1e6), "GB/s": BANDWIDTH.scaled(1e9), "TB/s": BANDWIDTH.scaled(1e12),
    "Mbps": LINK_RATE.scaled(1e6), "Gbps": LINK_RATE.scaled(1e9), "tokens/s": TOKEN_RATE, "tok/s": TOKEN_RATE,
    "1/s": RATE, "FLOP/s": FLOP_RATE, "GFLOP/s": FLOP_RATE.scaled(1e9), "TFLOP/s": FLOP_RATE.scaled(1e12),
    "OP/s": OP_RATE, "GOP/s": OP_RATE.scaled(1e9), "W": POWER, "J": ENERGY, "J/token": ENERGY_PER_TOKEN,
    "s/B": TIME_PER_BYTE, "params": PARAMS,
}


def column_quantity(name: str) -> Quantity:
    """The quantity a column holds, from its name's suffix (`COLUMN_QUANTITIES`); `PLAIN` when none matches."""
    words = str(name).lower()  # a one-letter suffix only after a word: a column named "s" or "w" is no unit
    return next((q for suffix, q in COLUMN_QUANTITIES
                 if words.endswith(f"_{suffix}") or (words == suffix and len(suffix) > 1)), PLAIN)


def unit_quantity(unit: str) -> Quantity:
    """The quantity of a tidy row's `unit` (`UNIT_QUANTITIES`); another unit follows an SI-prefixed number."""
    return UNIT_QUANTITIES.get(unit) or Quantity(unit, prefixed(unit, attach=False))


def format_bytes(value: float) -> str:
    """Bytes in binary units with 3 significant digits: 3 * 2**30 -> '3 GiB'."""
    return BYTES.format(value)


def format_number(value: float) -> str:
    """A plain number, 3 significant digits, never an exponent nor a prefix without a unit: 1.5676e9 -> '1,570,000,000'."""
    return PLAIN.format(value)


def format_value(value: object, unit: str) -> str:
    """One number in its unit (see `unit_quantity`); a cell that is not a number as it is."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return MISSING if _missing(value) else str(value)
    return unit_quantity(str(unit)).format(value)


def _formatted(column: pd.Series, quantity: Quantity) -> bool:
    """Whether a column is shown as text in its quantity: every float column; an integer one with a unit."""
    numeric = pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)
    return numeric and (pd.api.types.is_float_dtype(column) or quantity is not PLAIN)


def display_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` for showing in a notebook, its numbers as text in their columns' units (module doc)."""
    shown = frame.copy()
    if {"value", "unit"} <= set(shown.columns):
        shown["value"] = [format_value(v, str(u)) for v, u in zip(frame["value"], frame["unit"])]
        shown = shown.drop(columns="unit")
    for column in shown.columns:
        quantity = column_quantity(str(column))
        if _formatted(shown[column], quantity):
            shown[column] = shown[column].map(quantity.format)
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
