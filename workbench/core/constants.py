"""Model constants with provenance, loaded from TOML files in data/.

Every constant is a table::

    [mipi_bandwidth]
    value = 0.5e9
    unit = "B/s"
    kind = "quoted"      # quoted (paper) | datasheet | fitted | assumed | derived | measured
    source = "mcu_siracusa Sec. V-A: chips linked by MIPI at 0.5 GB/s"
    fitted_on = ""       # for kind = "fitted": which reported numbers (data/reported keys) it was fitted on

Fitted constants must say what they were fitted on; `check_provenance` enforces it (a test runs it
over every file).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType

from workbench.core.errors import WorkbenchError
from workbench.core.io import DATA_DIR

KINDS = ("quoted", "datasheet", "fitted", "assumed", "derived", "measured")


@dataclass(frozen=True)
class Constant:
    """One model constant and where it comes from."""

    name: str
    value: float | str | list
    unit: str
    kind: str
    source: str
    fitted_on: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WorkbenchError(f"constant {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if not self.source.strip():
            raise WorkbenchError(f"constant {self.name!r}: source (provenance) is empty")
        if self.kind == "fitted" and not self.fitted_on.strip():
            raise WorkbenchError(f"constant {self.name!r} is fitted but does not say what it was fitted on (fitted_on)")


def parse_constants(table: dict, where: str) -> dict[str, Constant]:
    """Turn {name: {value, unit, kind, source, fitted_on}} into Constants; errors name the file and key."""
    out = {}
    for name, entry in table.items():
        if not isinstance(entry, dict) or "value" not in entry:
            raise WorkbenchError(f"{where}: [{name}] must be a table with value, unit, kind, source")
        missing = [k for k in ("unit", "kind", "source") if k not in entry]
        if missing:
            raise WorkbenchError(f"{where}: [{name}] lacks provenance keys {missing}")
        out[name] = Constant(name, entry["value"], entry["unit"], entry["kind"], entry["source"],
                             entry.get("fitted_on", ""))
    return out


def load_constants(path: str | Path) -> dict[str, Constant]:
    """Load a constants TOML file (path relative to data/ or absolute)."""
    path = Path(path)
    if not path.is_absolute():
        path = DATA_DIR / path
    if not path.exists():
        raise WorkbenchError(f"constants file {path} does not exist")
    with open(path, "rb") as f:
        table = tomllib.load(f)
    table.pop("meta", None)
    return parse_constants(table, path.name)


def values(constants: Mapping[str, Constant]) -> dict[str, float]:
    """Just the values, for arithmetic."""
    return {k: c.value for k, c in constants.items()}


@cache
def paper_constants(paper: str) -> Mapping[str, Constant]:
    """data/constants/<paper>.toml with provenance, read once per process (read-only: every caller shares it)."""
    return MappingProxyType(load_constants(f"constants/{paper}.toml"))


@cache
def paper_values(paper: str) -> Mapping[str, float | str | list]:
    """The values of `paper_constants(paper)`, for arithmetic (one cached, read-only mapping per paper)."""
    return MappingProxyType(values(paper_constants(paper)))


def check_provenance(data_dir: Path = DATA_DIR) -> list[str]:
    """Load every constants and device file under data/; return the files checked (raises on a gap)."""
    checked = []
    for path in sorted(list((data_dir / "constants").glob("*.toml")) + list((data_dir / "devices").glob("*.toml"))):
        load_constants(path)
        checked.append(path.name)
    return checked


def constants_toml(constants: dict[str, Constant], header: str = "") -> str:
    """Render constants in the data/constants TOML format (deterministic)."""
    def q(text: str) -> str:
        return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"# {line}" for line in header.splitlines()] + ([""] if header else [])
    for name in sorted(constants):
        c = constants[name]
        value = float(f"{c.value:.6g}") if isinstance(c.value, float) else c.value
        lines += [f"[{name}]", f"value = {value!r}", f"unit = {q(c.unit)}", f"kind = {q(c.kind)}",
                  f"source = {q(c.source)}"]
        if c.fitted_on:
            lines.append(f"fitted_on = {q(c.fitted_on)}")
        lines.append("")
    return "\n".join(lines)
