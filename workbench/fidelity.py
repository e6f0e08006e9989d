"""The fidelity scoreboard: every paper-reported number beside what the workbench models.

Reported numbers live once in ``data/reported/<paper>.csv`` with columns
``paper, artifact, model, setting, quantity, value, unit, source, fitted, tolerance``:
`source` says where in the paper (table/figure/section), `fitted` names the model constant that was
fitted on this row (empty: a validation row), `tolerance` is the relative error the issue accepts.
Notebooks write ``figures/<notebook>/results.csv``; this module joins the two.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.io import DATA_DIR, write_csv_atomic, write_text_atomic
from workbench.results import KEY_COLUMNS, RESULT_COLUMNS

REPORTED_COLUMNS = RESULT_COLUMNS + ["source", "fitted", "tolerance"]


def load_reported(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """All paper-reported numbers (one CSV per paper); duplicated keys are an error."""
    files = sorted((data_dir / "reported").glob("*.csv"))
    if not files:
        return pd.DataFrame(columns=REPORTED_COLUMNS)
    frames = []
    for f in files:
        df = pd.read_csv(f, dtype={"setting": str, "model": str, "fitted": str}, keep_default_na=False)
        missing = [c for c in REPORTED_COLUMNS if c not in df.columns]
        if missing:
            raise WorkbenchError(f"{f.name}: missing columns {missing}")
        frames.append(df[REPORTED_COLUMNS])
    out = pd.concat(frames, ignore_index=True)
    out["value"] = pd.to_numeric(out["value"])
    out["tolerance"] = pd.to_numeric(out["tolerance"].replace("", np.nan))
    dup = out.duplicated(KEY_COLUMNS, keep=False)
    if dup.any():
        raise WorkbenchError(f"reported numbers with duplicated keys:\n{out[dup][KEY_COLUMNS]}")
    return out


def reported_value(frame: pd.DataFrame, paper: str, artifact: str, model: str, setting: str, quantity: str) -> float:
    """The one reported number with this key in `frame` (from `load_reported`); a missing key is an error."""
    hit = frame[(frame.paper == paper) & (frame.artifact == artifact) & (frame.model == model)
                & (frame.setting == setting) & (frame.quantity == quantity)]
    if len(hit) != 1:
        raise WorkbenchError(f"no reported {paper} value for {artifact} / {model} / {setting} / {quantity}")
    return float(hit["value"].iloc[0])


def load_modelled(figures_dir: Path) -> pd.DataFrame:
    """All notebooks' results.csv files under `figures_dir`, concatenated."""
    frames = [pd.read_csv(f, dtype={"setting": str, "model": str}, keep_default_na=False)
              for f in sorted(Path(figures_dir).glob("*/results.csv"))]
    if not frames:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    return out.drop_duplicates(KEY_COLUMNS, keep="last")


def scoreboard(reported: pd.DataFrame, modelled: pd.DataFrame) -> pd.DataFrame:
    """Reported vs modelled per reported row; rows with no modelled value stay (modelled = NaN)."""
    merged = reported.merge(
        modelled[KEY_COLUMNS + ["value"]].rename(columns={"value": "modelled"}), on=KEY_COLUMNS, how="left"
    ).rename(columns={"value": "reported"})
    merged["relative_error"] = (merged["modelled"] - merged["reported"]) / merged["reported"].abs()
    merged["role"] = np.where(merged["fitted"].astype(str).str.len() > 0, "calibration", "validation")
    within = merged["relative_error"].abs() <= merged["tolerance"]
    merged["within_tolerance"] = np.where(merged["modelled"].isna() | merged["tolerance"].isna(), "",
                                          np.where(within, "yes", "no"))
    # reported/modelled first (before the model-name column) so tools that pick columns by name find them
    cols = ["paper", "artifact", "reported", "modelled", "relative_error", "tolerance", "within_tolerance", "role",
            "model", "setting", "quantity", "unit", "fitted", "source"]
    return merged[cols]


def _markdown_table(df: pd.DataFrame) -> str:
    """A plain GitHub-markdown table (no extra dependency)."""
    def cell(v):
        if isinstance(v, float):
            return "" if np.isnan(v) else f"{v:.4g}"
        return str(v).replace("|", "\\|")
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def summary(board: pd.DataFrame) -> pd.DataFrame:
    """Per paper and role: rows, rows modelled, median |error|, rows within tolerance."""
    def agg(g):
        err = g["relative_error"].abs().dropna()
        return pd.Series({
            "rows": len(g),
            "modelled": int(g["modelled"].notna().sum()),
            "median_abs_error": float(err.median()) if len(err) else np.nan,
            "within_tolerance": int((g["within_tolerance"] == "yes").sum()),
        })
    if board.empty:
        return pd.DataFrame(columns=["paper", "role", "rows", "modelled", "median_abs_error", "within_tolerance"])
    return board.groupby(["paper", "role"], sort=True).apply(agg, include_groups=False).reset_index()


def write_report(figures_dir: Path, data_dir: Path = DATA_DIR, failures: dict[str, str] | None = None) -> pd.DataFrame:
    """Join reported and modelled numbers into figures/fidelity.csv and figures/REPORT.md."""
    board = scoreboard(load_reported(data_dir), load_modelled(figures_dir))
    write_csv_atomic(Path(figures_dir) / "fidelity.csv", board)
    parts = ["# Fidelity report", "",
             "Every number the papers report that the workbench reproduces, beside the modelled value. "
             "`calibration` rows were used to fit a model constant (named in `fitted`); `validation` rows "
             "were not. A row with no modelled value is shown empty, not dropped.", ""]
    if failures:
        parts += ["## Notebooks that failed", ""] + [f"- **{k}**: {v}" for k, v in failures.items()] + [""]
    parts += ["## Summary", "", _markdown_table(summary(board)), "", "## All rows", "", _markdown_table(board), ""]
    write_text_atomic(Path(figures_dir) / "REPORT.md", "\n".join(parts))
    return board
