"""The fidelity scoreboard: every paper-reported number beside what the workbench models.

Reported numbers live once in ``data/reported/<paper>.csv`` with columns
``paper, artifact, model, setting, quantity, value, unit, source, fitted, tolerance, class``:
`source` says where in the paper (table/figure/section), `fitted` names the model constants fitted on
this row (``<file stem>.<key>``, comma-separated; a bare key is that paper's; empty: a validation row),
`tolerance` is the relative error the issue accepts (0 = exact match, structural rows only), and `class`
says what kind of number it is (`ROW_CLASSES`), so structure is never counted as timing:

* timing: latencies, TTFT, token latency, runtimes, load times, shares of time;
* speedup: ratios of times ('x'); also scored on the gain (speedup - 1);
* efficiency: scaling efficiencies (a fraction of linear scaling: no gain, so no gain error);
* memory: bytes, footprints, peak memory, storage;
* energy: energy per inference;
* structural: OOM / fits cells, counts, hop counts, FLOPs ratios, design rules.

Notebooks write ``figures/<notebook>/results.csv``; this module joins the two.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workbench.core.constants import Constant, load_constants
from workbench.core.errors import WorkbenchError
from workbench.core.io import DATA_DIR, write_csv_atomic, write_text_atomic
from workbench.report.results import KEY_COLUMNS, RESULT_COLUMNS, read_parameters

REPORTED_COLUMNS = RESULT_COLUMNS + ["source", "fitted", "tolerance", "class"]
ROW_CLASSES = ("timing", "speedup", "efficiency", "memory", "energy", "structural")


def _tolerance(raw: str) -> float:
    """A tolerance cell as a number (NaN when empty or not a number)."""
    try:
        return float(raw)
    except ValueError:
        return np.nan


def check_rows(df: pd.DataFrame, where: str) -> None:
    """Every row has a class in `ROW_CLASSES` and a tolerance in [0, 1) (0, an exact match, on structural rows only)."""
    rows = zip(df["quantity"], df["class"], df["tolerance"].astype(str).str.strip(), strict=True)
    for line, (quantity, klass, raw) in enumerate(rows, start=2):  # line 1 is the header
        at = f"{where} line {line} ({quantity})"
        if klass not in ROW_CLASSES:
            raise WorkbenchError(f"{at}: class must be one of {', '.join(ROW_CLASSES)}, got {klass!r}")
        tol = _tolerance(raw)
        if not 0 <= tol < 1:
            raise WorkbenchError(f"{at}: tolerance must be a relative error in [0, 1) (0 = exact match), got {raw!r}")
        if tol == 0 and klass != "structural":
            raise WorkbenchError(f"{at}: tolerance 0 (exact match) is for structural rows only, this row is {klass}")


def load_reported(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """All paper-reported numbers (one CSV per paper); duplicated keys are an error."""
    files = sorted((data_dir / "reported").glob("*.csv"))
    if not files:
        return pd.DataFrame(columns=REPORTED_COLUMNS)
    frames = []
    for f in files:
        df = pd.read_csv(f, dtype={"setting": str, "model": str, "fitted": str, "tolerance": str, "class": str},
                         keep_default_na=False)
        missing = [c for c in REPORTED_COLUMNS if c not in df.columns]
        if missing:
            raise WorkbenchError(f"{f.name}: missing columns {missing}")
        check_rows(df[REPORTED_COLUMNS], f.name)
        frames.append(df[REPORTED_COLUMNS])
    out = pd.concat(frames, ignore_index=True)
    out["value"] = pd.to_numeric(out["value"])
    out["tolerance"] = pd.to_numeric(out["tolerance"])
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


def load_modelled(figures_dir: Path, notebooks: list[str] | None = None) -> pd.DataFrame:
    """The results.csv files of `notebooks` (default: every notebook folder) under `figures_dir`, concatenated."""
    frames = [pd.read_csv(f, dtype={"setting": str, "model": str}, keep_default_na=False)
              for f in sorted(Path(figures_dir).glob("*/results.csv"))
              if notebooks is None or f.parent.name in notebooks]
    if not frames:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out["value"] = pd.to_numeric(out["value"], errors="coerce")
    return out.drop_duplicates(KEY_COLUMNS, keep="last")


def gain_error(modelled: pd.Series, reported: pd.Series) -> pd.Series:
    """Relative error of the gain, (modelled - 1) / (reported - 1) - 1 (NaN where the reported gain is 0)."""
    gain = reported - 1.0
    return (modelled - 1.0) / gain.where(gain != 0) - 1.0


def scoreboard(reported: pd.DataFrame, modelled: pd.DataFrame) -> pd.DataFrame:
    """Reported vs modelled per reported row; rows with no modelled value stay (modelled = NaN).

    Speedup rows also carry `gain_error`, the error of the gain (speedup - 1): a 1.3x reported as 1.2x is 8 %
    off on the ratio but 33 % on the gain. A frame without `class` (a hand-built one) scores as unclassified.
    """
    reported = reported if "class" in reported else reported.assign(**{"class": ""})
    merged = reported.merge(
        modelled[KEY_COLUMNS + ["value"]].rename(columns={"value": "modelled"}), on=KEY_COLUMNS, how="left"
    ).rename(columns={"value": "reported"})
    merged["relative_error"] = (merged["modelled"] - merged["reported"]) / merged["reported"].abs()
    merged["gain_error"] = gain_error(merged["modelled"], merged["reported"]).where(merged["class"] == "speedup")
    merged["role"] = np.where(merged["fitted"].astype(str).str.len() > 0, "calibration", "validation")
    within = merged["relative_error"].abs() <= merged["tolerance"]
    merged["within_tolerance"] = np.where(merged["modelled"].isna() | merged["tolerance"].isna(), "",
                                          np.where(within, "yes", "no"))
    # reported/modelled first (before the model-name column) so tools that pick columns by name find them
    cols = ["paper", "artifact", "reported", "modelled", "relative_error", "gain_error", "tolerance",
            "within_tolerance", "role", "class", "model", "setting", "quantity", "unit", "fitted", "source"]
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


SUMMARY_COLUMNS = ["paper", "class", "rows", "modelled", "calibration_rows", "calibration_within",
                   "validation_rows", "validation_within", "validation_median_abs_error",
                   "validation_median_abs_gain_error"]


def _median_abs(values: pd.Series) -> float:
    """Median of |values| over the non-missing ones (NaN if none)."""
    v = values.abs().dropna()
    return float(v.median()) if len(v) else np.nan


def _class_summary(g: pd.DataFrame) -> pd.Series:
    """One summary row: counts per role, rows within tolerance, median errors of the validation rows."""
    cal, val = g[g["role"] == "calibration"], g[g["role"] == "validation"]
    return pd.Series({
        "rows": len(g), "modelled": int(g["modelled"].notna().sum()),
        "calibration_rows": len(cal), "calibration_within": int((cal["within_tolerance"] == "yes").sum()),
        "validation_rows": len(val), "validation_within": int((val["within_tolerance"] == "yes").sum()),
        "validation_median_abs_error": _median_abs(val["relative_error"]),
        "validation_median_abs_gain_error": _median_abs(val["gain_error"]),
    })


def summary(board: pd.DataFrame, by_paper: bool = True) -> pd.DataFrame:
    """Per paper (or over all papers) and class: rows, calibration and validation rows within tolerance,
    and the validation rows' median |error| (and median |gain error| for speedups)."""
    if board.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    keys = ["paper", "class"] if by_paper else ["class"]
    out = board.groupby(keys, sort=True).apply(_class_summary, include_groups=False).reset_index()
    counts = SUMMARY_COLUMNS[2:8]
    out[counts] = out[counts].astype(int)
    if not by_paper:
        out.insert(0, "paper", "all")
    return out[SUMMARY_COLUMNS]


# ---- calibration flags vs the constants' provenance ----------------------------------------------------
def provenance_constants(data_dir: Path = DATA_DIR) -> dict[str, Constant]:
    """Every constant under data/constants and data/devices, keyed '<file stem>.<key>'."""
    files = sorted((data_dir / "constants").glob("*.toml")) + sorted((data_dir / "devices").glob("*.toml"))
    return {f"{f.stem}.{k}": c for f in files for k, c in load_constants(f).items()}


def fitted_on_paper(fitted_on: str) -> str:
    """The paper a `fitted_on` names first ('galaxy,Table I,...' or 'tpi_llm Table 2 ...' -> the id)."""
    return fitted_on.strip().replace(",", " ").split(" ", 1)[0] if fitted_on.strip() else ""


def fitted_names(cell: str) -> list[str]:
    """The constants a `fitted` cell names (comma-separated)."""
    return [n.strip() for n in str(cell).split(",") if n.strip()]


def resolve_fitted(name: str, paper: str, constants: dict[str, Constant]) -> str | None:
    """The '<stem>.<key>' a `fitted` entry means: as written if qualified; a bare key is the one fitted
    constant of that key whose `fitted_on` is about `paper` (None when there is not exactly one)."""
    if "." in name:
        return name if name in constants else None
    hits = [k for k, c in constants.items() if k.split(".", 1)[1] == name and c.kind == "fitted"
            and fitted_on_paper(c.fitted_on) == paper]
    return hits[0] if len(hits) == 1 else None


def calibration_mismatches(reported: pd.DataFrame, constants: dict[str, Constant]) -> list[str]:
    """Where the reported rows' `fitted` column and the constants' kind / `fitted_on` disagree (both ways).

    A row's constant must exist, be kind 'fitted' and name the row (paper, artifact, quantity) in `fitted_on`;
    every fitted constant whose `fitted_on` names a reported paper must be named by a row of that paper; only
    fitted constants may carry `fitted_on` (a 'derived' one fitted on a row is 'fitted').
    """
    problems, named = [], set()
    for row in reported[reported["fitted"].astype(str).str.len() > 0].itertuples(index=False):
        where = f"{row.paper} {row.artifact} / {row.model} / {row.setting} / {row.quantity}"
        for name in fitted_names(row.fitted):
            key = resolve_fitted(name, row.paper, constants)
            if key is None:
                problems.append(f"{where}: fitted names {name!r}, which is no fitted constant of {row.paper}")
                continue
            named.add(key)
            c = constants[key]
            if c.kind != "fitted":
                problems.append(f"{where}: fitted names {key}, whose kind is {c.kind!r}, not 'fitted'")
            elif not all(part in c.fitted_on for part in (row.paper, row.artifact, row.quantity)):
                problems.append(f"{where}: {key}'s fitted_on does not name this row: {c.fitted_on!r}")
    papers = set(reported["paper"])
    for key, c in sorted(constants.items()):
        if c.fitted_on.strip() and c.kind != "fitted":
            problems.append(f"{key}: kind {c.kind!r} but it says fitted_on {c.fitted_on!r} (make it 'fitted')")
        if c.kind == "fitted" and fitted_on_paper(c.fitted_on) in papers and key not in named:
            problems.append(f"{key}: fitted on {c.fitted_on!r}, but no reported row names it in `fitted`")
    return problems


def run_parameters(figures_dir: Path, notebooks: list[str] | None = None) -> dict[str, dict | None]:
    """Per notebook folder with a results.csv (of `notebooks`, default all): the non-default parameters its run
    recorded (None: not recorded)."""
    return {f.parent.name: read_parameters(f.parent) for f in sorted(Path(figures_dir).glob("*/results.csv"))
            if notebooks is None or f.parent.name in notebooks}


def covered_rows(reported: pd.DataFrame, modelled: pd.DataFrame, notebooks: list[str] | None) -> pd.DataFrame:
    """The reported rows a run covers: all (`notebooks` None), else those of the papers whose notebooks ran
    or that those notebooks modelled, so a partial run shows no 'modelled 0' rows for papers that did not run."""
    if notebooks is None:
        return reported
    matched = modelled[KEY_COLUMNS].merge(reported[KEY_COLUMNS], on=KEY_COLUMNS)
    papers = set(notebooks) | set(matched["paper"])
    return reported[reported["paper"].isin(papers)].reset_index(drop=True)


def parameters_line(notebook: str, params: dict | None) -> str:
    """One markdown bullet: the parameters a notebook's outputs were made with, where they differ from its defaults."""
    if params is None:
        return f"- **{notebook}**: not recorded (not written by `python -m workbench reproduce`)"
    if not params:
        return f"- **{notebook}**: defaults"
    return f"- **{notebook}**: " + ", ".join(f"`{k}={v!r}`" for k, v in sorted(params.items()))


def write_report(figures_dir: Path, data_dir: Path = DATA_DIR, failures: dict[str, str] | None = None,
                 notebooks: list[str] | None = None) -> pd.DataFrame:
    """Join reported numbers with the results under `figures_dir` into its fidelity.csv and REPORT.md; with
    `notebooks` (the ones a run ran), only their results and the papers they cover."""
    modelled = load_modelled(figures_dir, notebooks)
    board = scoreboard(covered_rows(load_reported(data_dir), modelled, notebooks), modelled)
    write_csv_atomic(Path(figures_dir) / "fidelity.csv", board)
    ran = "" if notebooks is None else f"This run covers the notebooks {', '.join(notebooks)} only. "
    parts = ["# Fidelity report", "", ran +
             "Every number the papers report that the workbench reproduces, beside the modelled value. "
             "`calibration` rows were used to fit a model constant (named in `fitted`); `validation` rows "
             "were not. A row with no modelled value is shown empty, not dropped.", "",
             "Each row has a class, summarised separately so that structure is not counted as timing: "
             "`timing` (latencies, TTFT, token latency, runtimes, load times, shares of time), `speedup` "
             "(ratios of times), `efficiency` (scaling efficiencies, fractions of linear scaling), `memory` (bytes, "
             "footprints, peak memory), `energy`, "
             "`structural` (OOM / fits cells, counts, hop counts, FLOPs ratios, design rules; tolerance 0 is an "
             "exact match). Speedup rows (only they) are also scored on the gain: `gain_error` = "
             "(modelled - 1) / (reported - 1) - 1. Medians are over the modelled validation rows.", ""]
    if failures:
        parts += ["## Notebooks that failed", ""] + [f"- **{k}**: {v}" for k, v in failures.items()] + [""]
    runs = run_parameters(figures_dir, notebooks)
    if runs:
        parts += ["## Parameters per notebook", "",
                  "The parameters each notebook's results were made with where they differ from the notebook's "
                  "defaults (the papers' settings); the runner also sets `figures_dir` and `interactive=False`.", ""]
        parts += [parameters_line(k, v) for k, v in runs.items()] + [""]
    parts += ["## Summary per paper and class", "", _markdown_table(summary(board)), "",
              "## Summary per class, all papers", "", _markdown_table(summary(board, by_paper=False)), "",
              "## All rows", "", _markdown_table(board), ""]
    write_text_atomic(Path(figures_dir) / "REPORT.md", "\n".join(parts))
    return board
