"""Does every number a notebook table shows carry its column's unit? A reading of column names written apart
from `workbench.report.display` (so a wrong suffix rule there cannot also pass here), and a reader of the HTML
tables an executed notebook shows.

The rules, on cells that are one number with at most one unit word after it:

* no cell ends in a bare SI prefix (`56.4 µ`, `118 M`): a prefix is written with its unit;
* a rate column (`*_per_s`, `*_gb_s`, `*_mbps`) shows a rate (`/s`), never seconds (`5.82 s`);
* a time column (`*_s`, `*_ms`, `latency`, `time`) shows seconds (`s`, `ms`, `µs`, `ns`);
* a byte column (`*_bytes`, `*_gib`, `*_mib`) shows bytes (`B`, `KiB`, `MiB`, `GiB`, `TiB`);
* a column whose name says no quantity shows no unit (`0.250`, `1,570,000,000`; a text such as `2 processes`
  is not a number display.py wrote, and passes).

A tidy frame's `value` column is written in each row's own unit (its `unit` column, dropped from the view),
so its cells are judged by the first rule only.
"""

from __future__ import annotations

import html
import re

RATE = re.compile(r"(^|_)(per_s|[kmgt]?b_s|[kmg]?bps|[gt]ops|[gt]flops)$")
TIME = re.compile(r"(^|_)(s|ms|us|ns|sec|seconds|latency|time)$")
BYTES = re.compile(r"(^|_)(bytes|b|kib|mib|gib|tib)$")
OTHER = re.compile(r"(^|_)(w|j|params|speedup|j_per_token|s_per_byte)$")  # a unit display.py writes, not judged here
NUMBER_CELL = re.compile(r"^[-+]?\d[\d,]*(\.\d+)?(x| \S+)?$")  # not 1d, 6x11, 2026-11-24a
TIME_TEXT = re.compile(r"\d (s|ms|µs|ns)$")
BYTES_TEXT = re.compile(r"\d (B|KiB|MiB|GiB|TiB)$")
BARE_PREFIX = re.compile(r"\d [kMGTPmµun]$")
# The units display.py writes: a column that names no quantity must show none of them.
UNIT_TEXT = re.compile(r"(\dx| [kMGTmµn]?(s|B|W|J|params)|/s|/B|/token| [KMGT]iB)$")


def column_kind(column: str) -> str:
    """What a column's name says it holds: rate, time, bytes, other (a unit not judged here) or plain."""
    name = column.strip().lower()
    if RATE.search(name):
        return "rate"
    for kind, pattern in (("time", TIME), ("bytes", BYTES), ("other", OTHER)):
        if pattern.search(name):
            return kind
    return "plain"


def unit_problems(column: str, text: str) -> list[str]:
    """What is wrong with the unit of one shown cell of `column` ([] for a cell that is not one number)."""
    text = text.strip()
    if not NUMBER_CELL.match(text):
        return []
    where = f"{column!r}: {text!r}"
    problems = [f"{where} ends in an SI prefix with no unit"] if BARE_PREFIX.search(text) else []
    kind = "tidy" if column == "value" else column_kind(column)
    if kind == "rate" and (TIME_TEXT.search(text) or "/s" not in text):
        problems.append(f"{where} is a rate shown without '/s'")
    elif kind == "time" and not TIME_TEXT.search(text):
        problems.append(f"{where} is a time shown without s/ms/µs/ns")
    elif kind == "bytes" and not BYTES_TEXT.search(text):
        problems.append(f"{where} is a size shown without B/KiB/MiB/GiB")
    elif kind == "plain" and UNIT_TEXT.search(text):
        problems.append(f"{where} names no quantity but is shown with a unit or prefix")
    return problems


def _cells(row: str) -> list[str]:
    """The text of every th/td cell of one HTML table row."""
    return [html.unescape(re.sub(r"<.*?>", "", cell)).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]


def html_table_cells(table: str) -> list[tuple[str, str]]:
    """(column name, cell text) of every body cell of one pandas HTML table (the index cells left out)."""
    return [pair for row in html_table_rows(table) for pair in row.items()]


def table_problems(table: str) -> list[str]:
    """Every cell of one pandas HTML table whose unit does not match its column's name."""
    return [problem for column, text in html_table_cells(table) for problem in unit_problems(column, text)]


def html_table_rows(table: str) -> list[dict[str, str]]:
    """Every body row of one pandas HTML table as {column name: cell text} (the index cells left out)."""
    head = re.search(r"<thead>(.*?)</thead>", table, re.S)
    body = re.search(r"<tbody>(.*?)</tbody>", table, re.S)
    if head is None or body is None:
        return []
    columns = _cells(re.findall(r"<tr[^>]*>(.*?)</tr>", head.group(1), re.S)[0])[1:]
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body.group(1), re.S):
        values = [html.unescape(re.sub(r"<.*?>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        rows.append(dict(zip(columns[-len(values):] if values else [], values)))
    return rows
