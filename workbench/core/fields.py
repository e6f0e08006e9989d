"""One declaration per user-facing field: `FieldSpec` (help, SI unit, allowed range, preset constant and
deployment-TOML keys with their scale to SI) carried in a dataclass field's metadata by `declared`.

The bottom floor of the package (it imports only `workbench.core.errors`), so every layer declares its own fields
here once: a device's and a memory level's (`workbench.machine.hardware`), a link's and a topology's
(`workbench.machine.network`), a workload's (`workbench.schemes.base`) and a model's dimensions (`workbench.model.models`).
The range checks, the preset loader, the deployment parser (`workbench.scenarios.userconfig`) and the key table in docs/keys.md
all derive from these declarations.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from workbench.core.errors import WorkbenchError, require_choice

FIELD_KINDS = ("number", "integer", "text", "per_dtype", "levels", "list")  # list: of text (a device's isa)


class TomlKey(NamedTuple):
    """A deployment-TOML key for a field: its name, the factor to SI, and the unit it is written in."""

    key: str
    scale: float = 1.0
    unit: str = ""


@dataclass(frozen=True)
class FieldSpec:
    """A user-facing field declared once: help, SI unit, allowed range, preset constant, deployment-TOML keys.

    [low, high] (open at low when `low_open`, at high when `high_open`) is the invariant every instance meets;
    a value read from a hand-written file must also lie under `file_high` and reach `file_floor` (generous
    physical bounds that catch unit slips, and keep 1e-320 from turning into "inf s"), both in SI."""

    help: str
    unit: str = ""
    low: float = 0.0
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False  # high itself is not allowed (a probability that must stay below 1)
    file_high: float = math.inf
    file_floor: float | None = None
    kind: str = "number"
    preset_key: str | None = None  # constant name in data/devices/*.toml (SI); a memory level's is a suffix
    toml: tuple[TomlKey, ...] = ()  # deployment-TOML keys (alternatives when several; exactly one is given)

    def __post_init__(self) -> None:
        require_choice("field kind", self.kind, FIELD_KINDS)
        if not self.low <= min(self.high, self.file_high):
            raise WorkbenchError(f"field range must have low <= high, got [{self.low!r}, {self.high!r}]")

    def bounds(self, from_file: bool = False) -> tuple[float, float, float | None]:
        """(low, high, floor) in SI: the invariant, or with `from_file` the tighter bounds a file must meet."""
        if from_file:
            return self.low, min(self.high, self.file_high), self.file_floor
        return self.low, self.high, None

    def range_text(self, scale: float = 1.0, from_file: bool = False) -> str:
        """The allowed range in one phrase, in units of SI / `scale` (a TOML key's units)."""
        low, high, floor = self.bounds(from_file)
        if self.kind == "integer":
            return f"an integer in [{int(low)}, {int(high)}]" if math.isfinite(high) else f"an integer >= {int(low)}"
        op = ">" if self.low_open else ">="
        at_least = "" if floor is None else f" (at least {floor / scale:g})"
        if not math.isfinite(high):
            return f"a finite number {op} {low / scale:g}{at_least}"
        below = "<" if self._open_at(high) else "<="
        return f"a number {op} {low / scale:g} and {below} {high / scale:g}{at_least}"

    def admits(self, si_value, from_file: bool = False) -> bool:
        """Whether an SI value is of the right type and lies in the range."""
        low, high, floor = self.bounds(from_file)
        if self.kind == "integer":
            is_int = isinstance(si_value, int | np.integer) and not isinstance(si_value, bool)
            return is_int and low <= si_value <= high
        if not is_number(si_value) or not math.isfinite(si_value):
            return False
        above = si_value > low if self.low_open else si_value >= low
        below = si_value < high if self._open_at(high) else si_value <= high
        return above and below and (floor is None or si_value >= floor)

    def _open_at(self, high: float) -> bool:
        """Whether the upper bound `high` (the invariant's or a file's) excludes itself: only the invariant's
        own `high` with `high_open` (a tighter file_high is inclusive)."""
        return self.high_open and high == self.high

    def check(self, name: str, value, scale: float = 1.0, from_file: bool = False):
        """`value` x `scale` (SI) if it is in range, else a one-line error naming `name` and the range (in the
        units `value` is written in)."""
        si = float(value) * scale if self.kind != "integer" and is_number(value) else value
        if not self.admits(si, from_file):
            raise WorkbenchError(f"{name} must be {self.range_text(scale, from_file)}, got {value!r}")
        return si


def is_number(value) -> bool:
    """A real number (not a bool)."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)


def declared(spec: FieldSpec, default: Any = MISSING, **kw) -> Any:
    """A dataclass field carrying its `FieldSpec` in metadata (the one declaration the rest derives from)."""
    return field(default=default, metadata={"spec": spec}, **kw)


def declared_fields(cls) -> tuple[tuple[Field, FieldSpec], ...]:
    """(field, spec) of every declared field of a dataclass, in declaration order."""
    return tuple((f, f.metadata["spec"]) for f in fields(cls) if "spec" in f.metadata)


def check_declared(obj, prefix: str = "") -> None:
    """Check every declared number of a dataclass instance against its range (None allowed when default)."""
    for f, spec in declared_fields(type(obj)):
        value = getattr(obj, f.name)
        if spec.kind in ("number", "integer") and not (value is None and f.default is None):
            spec.check(f"{prefix}{f.name}", value)


def number_field(help: str, unit: str, low: float, high: float, toml: TomlKey | None = None, preset: str | None = None,
            **kw) -> FieldSpec:
    """A numeric FieldSpec with at most one deployment-TOML key (the common case, one line per field)."""
    return FieldSpec(help, unit, low, high, preset_key=preset, toml=() if toml is None else (toml,), **kw)


def rate_field(help: str, unit: str, file_high: float, file_floor: float | None, toml: TomlKey | None = None,
          preset: str | None = None, **kw) -> FieldSpec:
    """A positive rate or size: any finite value > 0, a file's also in [file_floor, file_high]."""
    return number_field(help, unit, 0.0, math.inf, toml, preset, low_open=True, file_high=file_high,
                   file_floor=file_floor, **kw)


def fraction_field(help: str, key: str) -> FieldSpec:
    """An achieved fraction in (0, 1], written under the same key in a preset and a deployment TOML."""
    return number_field(help, "1", 0.0, 1.0, TomlKey(key), key, low_open=True)
