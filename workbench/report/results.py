"""Recording what a notebook models: tidy results rows, charts as PNG + SVG + CSV, atomically.

Every notebook does::

    rec = Recorder("galaxy", figures_dir)        # figures/<notebook>/
    rec.add(df)                                   # rows with the RESULT_COLUMNS
    rec.chart(chart, "fig8_bandwidth", data=df)   # checked (chartcheck), fig8_bandwidth.png/.svg/.csv, shown inline
    rec.write()                                   # figures/<notebook>/results.csv

The join key with the paper-reported numbers in data/reported/ is
(paper, artifact, model, setting, quantity).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import altair as alt
import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.io import atomic_path, project_root, write_csv_atomic, write_text_atomic
from workbench.report.chartcheck import check_chart
from workbench.report.display import show_inline

RESULT_COLUMNS = ["paper", "artifact", "model", "setting", "quantity", "value", "unit"]
KEY_COLUMNS = ["paper", "artifact", "model", "setting", "quantity"]
# Written by the runner into figures/<notebook>/: the parameters that run changed from the notebook's defaults.
PARAMETERS_FILE = "parameters.json"


def result_row(paper: str, artifact: str, model: str, setting: str, quantity: str, value: float, unit: str) -> dict:
    """One tidy result row (value as float), for the numbers an experiment computes one at a time."""
    return dict(zip(RESULT_COLUMNS, (paper, artifact, model, setting, quantity, float(value), unit), strict=True))


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """`result_row`s as a frame with exactly the RESULT_COLUMNS (an empty list gives an empty frame)."""
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def result_rows(paper: str, artifact: str, frame: pd.DataFrame, quantities: dict[str, str],
                model: str | pd.Series = "", setting: str | pd.Series = "", dropna: bool = False) -> pd.DataFrame:
    """Melt a wide frame into tidy result rows.

    `quantities` maps column -> unit; `model` and `setting` are a constant or a per-row Series
    (e.g. ``df.apply(lambda r: f"chips={r.chips}", axis=1)``); `dropna` leaves out rows without a value
    (an OOM cell has no latency).
    """
    missing = [c for c in quantities if c not in frame.columns]
    if missing:
        raise WorkbenchError(f"quantities {missing} are not columns of the frame ({list(frame.columns)})")
    base = pd.DataFrame({"model": model, "setting": setting}, index=frame.index)
    parts = []
    for column, unit in quantities.items():
        part = base.copy()
        part["quantity"] = column
        part["value"] = frame[column].astype(float)
        part["unit"] = unit
        parts.append(part.dropna(subset=["value"]) if dropna else part)
    out = pd.concat(parts, ignore_index=True)
    out["paper"], out["artifact"] = paper, artifact
    return out[RESULT_COLUMNS]


def resolve_figures_dir(figures_dir: str | os.PathLike | None) -> Path:
    """`None` -> figures/ of the project the working directory is in (`io.project_root`: a notebook opened from
    one checkout writes there, not into the checkout the package was installed from); a relative path is taken
    from that project's root; an absolute path is itself."""
    if figures_dir is None or str(figures_dir) == "":
        return project_root() / "figures"
    path = Path(figures_dir)
    return path if path.is_absolute() else project_root() / path


class Recorder:
    """Collects one notebook's result rows and charts under figures/<notebook>/."""

    def __init__(self, notebook: str, figures_dir: str | os.PathLike | None = None):
        self.notebook = notebook
        self.out_dir = resolve_figures_dir(figures_dir) / notebook
        self.rows: list[pd.DataFrame] = []
        self.charts: list[str] = []

    def add(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Add tidy rows (RESULT_COLUMNS); returns them for display."""
        missing = [c for c in RESULT_COLUMNS if c not in rows.columns]
        if missing:
            raise WorkbenchError(f"result rows lack columns {missing}; need {RESULT_COLUMNS}")
        self.rows.append(rows[RESULT_COLUMNS].copy())
        return rows

    def table(self) -> pd.DataFrame:
        """All rows added so far, in a stable order."""
        if not self.rows:
            return pd.DataFrame(columns=RESULT_COLUMNS)
        out = pd.concat(self.rows, ignore_index=True)
        out["setting"] = out["setting"].fillna("").astype(str)
        out["model"] = out["model"].fillna("").astype(str)
        return out

    def chart(self, chart: alt.TopLevelMixin, name: str, data: pd.DataFrame | None = None) -> None:
        """Check that `chart` draws every layer (`chartcheck`), save it as <name>.png and <name>.svg (vl-convert)
        and `data` as <name>.csv, atomically, and show the PNG inline when running in a notebook.

        Returns nothing, so a `rec.chart(...)` ending a cell does not also display the chart through
        altair's renderer (which loads Vega from a CDN)."""
        check_chart(chart, f"{self.notebook}/{name}")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for fmt in ("png", "svg"):
            with atomic_path(self.out_dir / f"{name}.{fmt}") as tmp:
                chart.save(str(tmp), format=fmt, **({"scale_factor": 2} if fmt == "png" else {}))
        if data is not None:
            write_csv_atomic(self.out_dir / f"{name}.csv", data)
        self.charts.append(name)
        show_inline(self.out_dir / f"{name}.png", alt=f"chart {self.notebook}/{name}")

    def write(self) -> Path:
        """Write figures/<notebook>/results.csv atomically and return its path."""
        return write_csv_atomic(self.out_dir / "results.csv", self.table())


def write_parameters(folder: str | os.PathLike, params: dict) -> Path:
    """Write `params` (the non-default ones of a run) as <folder>/parameters.json, atomically, keys sorted."""
    text = json.dumps(params, sort_keys=True, indent=1, default=repr) + "\n"
    return write_text_atomic(Path(folder) / PARAMETERS_FILE, text)


def read_parameters(folder: str | os.PathLike) -> dict | None:
    """The parameters recorded in <folder>/parameters.json (None when the folder has none)."""
    path = Path(folder) / PARAMETERS_FILE
    return json.loads(path.read_text()) if path.is_file() else None
