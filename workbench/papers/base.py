"""The shape every paper module shares, so that a new paper copies one template (docs/development.md, "Adding a paper").

Each `workbench/papers/<paper>.py` exposes the same public names:

* `PAPER`: its key, the stem of data/constants/<paper>.toml and data/reported/<paper>.csv;
* `constants()`: the values of its constants (`paper_values`, read once per process);
* `Setting`: a frozen dataclass of the paper's defaults, `Setting.from_constants(**overrides)` (a subclass of
  `PaperSetting`; None keeps the paper's value, an unknown name is an error);
* its experiments, each returning a DataFrame, and `<artifact>_rows(...)` turning one into result rows
  (`result_row` / `rows_frame` one number at a time, `result_rows` for a wide frame);
* `reported()` and `reported_value(artifact, model, setting, quantity)`: its rows of data/reported/<paper>.csv
  and one number as the paper reports it (fits read their targets here, never from a literal);
* `pattern_checks()` and `pattern_rows(checks)` where the paper's text makes claims the model is checked
  against.

`tests/toy_paper/` is the template (docs/development.md, "Adding a paper"); `tests/test_paper_shape.py` checks every paper
module, and the template copied under a new name, against this list.

This module sits above `workbench.core.constants`, `workbench.report.results` and `workbench.report.fidelity` and below every
paper module; schemes and planners never import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar, Self

import pandas as pd

from workbench.core.constants import paper_constants, paper_values
from workbench.core.errors import WorkbenchError
from workbench.report import fidelity
from workbench.report.results import RESULT_COLUMNS, result_row, result_rows, rows_frame

__all__ = ["PaperSetting", "RESULT_COLUMNS", "paper_constants", "paper_values", "reported", "reported_value",
           "result_row", "result_rows", "rows_frame"]


@dataclass(frozen=True)
class PaperSetting:
    """Base of every paper's `Setting`: fields named like their constant unless `KEYS` maps them."""

    PAPER: ClassVar[str] = ""
    KEYS: ClassVar[Mapping[str, str]] = {}  # field -> constant key, where the names differ

    @classmethod
    def from_constants(cls, **overrides: Any) -> Self:
        """The paper's setting from data/constants/<PAPER>.toml with `overrides` (None keeps the paper's value)."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(overrides) - set(names))
        if unknown:
            raise WorkbenchError(f"unknown {cls.PAPER} setting(s) {unknown}; known: {names}")
        values = paper_values(cls.PAPER)
        base = {}
        for f in fields(cls):
            key = cls.KEYS.get(f.name, f.name)
            if key in values:
                base[f.name] = values[key]
            elif f.default is MISSING and f.default_factory is MISSING:
                raise WorkbenchError(f"{cls.__name__}.{f.name}: data/constants/{cls.PAPER}.toml has no [{key}]")
        return cls(**{**base, **{k: v for k, v in overrides.items() if v is not None}})


def reported(paper: str) -> pd.DataFrame:
    """The paper's reported numbers (data/reported/<paper>.csv), read now (tests may replace the file's rows)."""
    frame = fidelity.load_reported()
    return frame[frame["paper"] == paper].reset_index(drop=True)


def reported_value(paper: str, artifact: str, model: str, setting: str, quantity: str) -> float:
    """One number as `paper` reports it (data/reported/<paper>.csv); a key it does not report is an error."""
    return fidelity.reported_value(fidelity.load_reported(), paper, artifact, model, setting, quantity)
