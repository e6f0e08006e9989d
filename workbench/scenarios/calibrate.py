"""`python -m workbench calibrate CONFIG.toml MEASURED.csv --fit NAME[,NAME...]`: fit constants on your rows.

The protocol the papers' notebooks follow, as a tool. MEASURED.csv has one measured latency per row:

    scheme, devices, phase, tokens, latency_s, role[, model][, options]

`scheme` is a registered arena scheme; `devices` the device count (the config's one [[devices]] entry is
repeated; omit the column to keep the file's devices); `phase` prefill (time to first token of a
`tokens`-token prompt) or decode (one token attending `tokens` positions); `role` calibration or
validation; `options` the scheme's options for that row ("version=0.7; syncs_per_layer=2", the keys of the
config's [schemes.<section>] tables, `workbench.schemes.options`), over the config's own. Only calibration rows fit the named constants (scipy least squares on log(model / measured)
with each constant's bounds); validation rows are reported with their error and never fitted. The result
is a copy of the config with the fitted values, each cited as fitted on those rows, and a CSV of every row
before and after.

It only claims what it fitted: before the fit it prints how much each calibration row moves with each
fittable constant (`sensitivities`) and refuses a named constant that moves none of them, saying why and
which constant would (`refuse_unmoved`); after it, a value on its bound or two constants the rows cannot
tell apart (`bound_caveats`, `correlation_caveats`) are not written as fitted without `--force`, and a
calibration row whose error grew is named (`worse_rows`). `--out` is checked before anything is read.

In place of MEASURED.csv it takes llama.cpp's `llama-bench` output (`workbench.scenarios.llamabench`): `-o json`,
`-o jsonl` or the default markdown table (a .json/.jsonl file or text starting with [ or {; a .md/.txt file
or text whose first line starts with |). Each ppN test becomes a prefill row of N tokens (latency N / t/s),
each tgN test a decode row (latency 1 / t/s, attending n_depth + (N + 1) // 2 positions), on the
one-device scheme `single_device_resident` with devices = 1 and the config's model; `--validation
tg128[,...]` makes the named tests validation rows (the rest are calibration). Combined (ppN+tgM) tests and
prompts after a filled context (ppN @ dD) are refused by name. A llama-bench model whose size or parameter
count is more than 10 % off the config's model, and rows run with different thread counts, get a warning line.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.scenarios import llamabench

# name -> (where in the TOML, lower bound, upper bound, start): every [[devices]] entry or the network.
FITTABLE = {
    "efficiency_gemm": ("devices", 1e-4, 1.0, 0.5), "efficiency_gemv": ("devices", 1e-4, 1.0, 0.5),
    "memory_efficiency": ("devices", 1e-3, 1.0, 0.8), "kernel_launch_us": ("devices", 0.0, 1e5, 10.0),
    "layer_overhead_us": ("devices", 0.0, 1e6, 100.0), "message_overhead_us": ("network", 0.0, 1e6, 50.0),
    "latency_ms": ("network", 0.0, 1e3, 0.5), "bandwidth_mbps": ("network", 1e-3, 1e6, 100.0),
}
COLUMNS = ("scheme", "devices", "phase", "tokens", "latency_s", "role")
ROLES = ("calibration", "validation")


# A constant is "not moved" by the calibration rows when no row's d log(latency) / d log(constant) reaches
# 1e-6: a 1 % change of it moves no row by 0.0001 % (to move a row by 1 % it would have to grow 10,000-fold).
# A constant outside a row's cost gives exactly 0 up to the finite difference's rounding (~1e-13 for 0.1 %
# steps of float64 latencies); the weakest real dependency in the example's rows is ~2e-4 (kernel launches in
# a 13-s prefill). A weak but real one is fitted, and if the rows cannot set it, it ends on a bound (caveat).
SENSITIVITY_FLOOR = 1e-6
SENSITIVITY_STEP = 1e-3
BOUND_TOLERANCE = 1e-3      # a fitted value within 0.1 % of a bound is on it
CORRELATION_LIMIT = 0.95    # |r| of two fitted estimates above this: the rows do not tell them apart
CONDITION_LIMIT = 1e6       # of the column-normalised Jacobian: beyond it the fit has no unique answer


@dataclass(frozen=True)
class Caveat:
    """Why some fitted values are not what the rows say (on a bound, or not separable): not written as fitted
    without --force."""

    names: tuple[str, ...]
    text: str

    def __post_init__(self) -> None:
        if not self.names or any(n not in FITTABLE for n in self.names):
            raise WorkbenchError(f"a caveat names fittable constants, got {self.names!r}")


@dataclass(frozen=True)
class Fit:
    """The fitted values, every row with its prediction before and after, the fitted document, the
    sensitivity table it started from (calibration rows x FITTABLE) and its caveats."""

    values: dict[str, float]
    rows: pd.DataFrame
    document: dict
    sensitivity: pd.DataFrame | None = None
    caveats: tuple[Caveat, ...] = ()


def read_measurements(path: str | Path, validation: tuple[str, ...] = ()) -> pd.DataFrame:
    """MEASURED.csv, checked cell by cell as written (a bad cell is named by its line, header = line 1, and its
    text), with a `line` column: the line each row is on, which the fitted TOML cites. llama-bench output
    (`llamabench.detect`) is read as its rows instead, `validation` naming its tests that are validation rows."""
    path = Path(path)
    if not path.is_file():
        raise WorkbenchError(f"measurements file {str(path)!r} does not exist")
    try:
        text = path.read_text()
    except UnicodeDecodeError as exc:
        raise WorkbenchError(f"{path.name}: not a readable text file: {exc.reason} at byte {exc.start}") from None
    if llamabench.detect(path, text):
        rows = llamabench.to_rows(llamabench.read_runs(path, text), validation)
        for row in rows.to_dict("records"):
            _check_row(path.name, int(row["line"]), {k: str(row[k]) for k in COLUMNS})
        return rows
    if validation:
        raise WorkbenchError(f"--validation names llama-bench tests; {path.name} is a CSV, whose role column says "
                             "which rows are validation rows")
    try:  # every cell as text: one bad cell must not turn its column's good cells into other values
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise WorkbenchError(f"{path.name}: not a readable CSV: {str(exc).splitlines()[0]}") from None
    required = [c for c in COLUMNS if c != "devices"]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        hint = ("; a llama-bench -o csv file? give its -o json, -o jsonl or markdown table instead"
                if {"n_prompt", "avg_ts"} <= set(frame.columns) else "")
        raise WorkbenchError(f"{path.name}: missing column {missing[0]}; needed: {', '.join(COLUMNS)} (devices "
                             f"optional, model optional, options optional){hint}")
    frame["line"] = np.arange(len(frame)) + 2  # blank lines are kept as empty rows until here, so this counts them
    frame = frame[(frame.drop(columns="line") != "").any(axis=1)]
    if frame.empty:
        raise WorkbenchError(f"{path.name}: no rows")
    for row in frame.to_dict("records"):
        _check_row(path.name, int(row["line"]), row)
    return _typed(frame).reset_index(drop=True)


def _typed(frame: pd.DataFrame) -> pd.DataFrame:
    """The checked text cells as numbers (latency_s float; tokens, devices int); an empty model cell as none."""
    out = frame.assign(latency_s=frame["latency_s"].astype(float), tokens=frame["tokens"].astype(float).astype(int))
    if "devices" in out.columns:
        out["devices"] = out["devices"].astype(float).astype(int)
    if "model" in out.columns:
        out["model"] = out["model"].replace("", np.nan)
    return out


def _number(text: str) -> float | None:
    """A cell's text as a number, None when it is not one (float() would also take '1_0'; a CSV reader does not)."""
    try:
        return None if "_" in text else float(text)
    except ValueError:
        return None


def _check_row(name: str, line: int, row: dict) -> None:
    """One row's text cells: a role, a phase, a latency > 0 and integer token / device counts in range."""
    where = f"{name} line {line}"
    if row["role"] not in ROLES:
        raise WorkbenchError(f"{where}: role must be one of {', '.join(ROLES)}, got {row['role']!r}")
    if row["phase"] not in ("prefill", "decode"):
        raise WorkbenchError(f"{where}: phase must be prefill or decode, got {row['phase']!r}")
    latency = _number(row["latency_s"])
    if latency is None or not math.isfinite(latency) or latency <= 0:
        raise WorkbenchError(f"{where}: latency_s must be a finite number of seconds > 0, got {row['latency_s']!r}")
    for key, high in (("tokens", 1 << 20), ("devices", 1024)):
        if key not in row:
            continue
        value = _number(row[key])
        if value is None or not math.isfinite(value) or not value.is_integer() or not 1 <= value <= high:
            raise WorkbenchError(f"{where}: {key} must be an integer in [1, {high}], got {row[key]!r}")


def parse_fit_names(text: str) -> list[str]:
    """'kernel_launch_us,message_overhead_us' -> names, each a fittable constant."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise WorkbenchError(f"--fit needs at least one name; fittable: {', '.join(FITTABLE)}")
    for name in names:
        if name not in FITTABLE:
            raise WorkbenchError(f"--fit {name!r} is not fittable; fittable: {', '.join(FITTABLE)}")
    if len(set(names)) != len(names):
        raise WorkbenchError(f"--fit names a constant twice: {text!r}")
    return names


def with_values(document: dict, values: dict[str, float]) -> dict:
    """A copy of the deployment document with each constant set (on every [[devices]] entry, or the network)."""
    doc = copy.deepcopy(document)
    for name, value in values.items():
        if FITTABLE[name][0] == "network":
            doc.setdefault("network", {})[name] = float(value)
        else:
            for entry in doc.get("devices", []):
                entry[name] = float(value)
    return doc


PARTS = ("compute_s", "memory_s", "fixed_s", "serial_s", "comm_link_latency_s", "comm_bytes_s", "io_stall_s", "other_s")


def predict(document: dict, rows: pd.DataFrame, where: str, base_dir: Path | None) -> np.ndarray:
    """The arena's latency for every measured row under `document`."""
    return predict_parts(document, rows, where, base_dir)["latency_s"].to_numpy()


def predict_parts(document: dict, rows: pd.DataFrame, where: str, base_dir: Path | None) -> pd.DataFrame:
    """The arena's latency and its breakdown (`PARTS`) for every measured row under `document`."""
    from workbench.scenarios.userconfig import parse_config
    from workbench.schemes.base import SCHEMES, Workload, load_all

    load_all()
    out = []
    configs: dict[int | None, object] = {}
    for row in rows.itertuples(index=False):
        devices = int(row.devices) if "devices" in rows.columns else None
        if devices not in configs:
            configs[devices] = parse_config(_with_devices(document, devices), where, base_dir)
        config = configs[devices]
        scheme = str(row.scheme)
        if scheme not in SCHEMES:
            raise WorkbenchError(f"{where}: unknown scheme {scheme!r}; registered: {', '.join(sorted(SCHEMES))}")
        evaluator = row_evaluator(config, scheme, getattr(row, "options", ""), where)
        model = config.model if "model" not in rows.columns or not isinstance(row.model, str) else \
            _model(row.model)
        tokens = int(row.tokens)
        workload = Workload(row.phase, seq_len=tokens, kv_len=tokens, weight_bits=config.weight_bits,
                            activation_bits=config.activation_bits, weight_format=config.weight_format,
                            engine=config.engine)
        result = evaluator(model, config.cluster, workload).row()
        out.append({part: float(result.get(part, 0.0)) for part in ("latency_s", *PARTS)})
    return pd.DataFrame(out, index=rows.index)


def row_evaluator(config, scheme: str, options_text, where: str):
    """`scheme`'s evaluator with the config's [schemes.*] options and the row's `options` cell applied (the cell's
    keys over the config's); one line naming the options when the row's version excludes its own scheme."""
    from workbench.schemes.base import SCHEMES
    from workbench.schemes.options import apply_options, parse_text

    row_options = parse_text(where, scheme, options_text)
    given = {type(o) for o in row_options}
    registry = apply_options(SCHEMES, tuple(o for o in config.scheme_options if type(o) not in given) + row_options)
    if scheme not in registry:
        raise WorkbenchError(f"{where}: options ({options_text or 'the config'}) leave out scheme {scheme!r}: its "
                             f"version runs another sync structure")
    return registry[scheme][1]


def _model(name: str):
    from workbench.model.models import get_model

    return get_model(name)


def _with_devices(document: dict, devices: int | None) -> dict:
    if devices is None:
        return document
    entries = document.get("devices")
    if not isinstance(entries, list) or len(entries) != 1:
        raise WorkbenchError("a devices column needs a config with exactly one [[devices]] entry")
    doc = copy.deepcopy(document)
    doc["devices"][0]["count"] = devices
    return doc


def calibrate(document: dict, rows: pd.DataFrame, names: list[str], where: str = "config",
              base_dir: Path | None = None, sensitivity: pd.DataFrame | None = None) -> Fit:
    """Fit `names` on the calibration rows (least squares on log ratios, within bounds); report all rows.
    A constant the calibration rows do not move is refused before fitting (`refuse_unmoved`); a value on its
    bound or two constants the rows cannot tell apart come back as `Fit.caveats`. `sensitivity`: the
    `starting_sensitivities` table of these rows when the caller already has it."""
    from scipy.optimize import least_squares

    calibration = rows["role"] == "calibration"
    if calibration.sum() < len(names):
        raise WorkbenchError(f"fitting {len(names)} constant(s) needs at least as many calibration rows, "
                             f"got {int(calibration.sum())}")
    cal_rows = rows[calibration].reset_index(drop=True)
    measured = cal_rows["latency_s"].to_numpy(float)
    low = np.array([FITTABLE[n][1] for n in names])
    high = np.array([FITTABLE[n][2] for n in names])
    start = np.array(list(starting_values(document, names).values()))
    table = starting_sensitivities(document, cal_rows, names, where, base_dir) if sensitivity is None else sensitivity
    refuse_unmoved(table, names, cal_rows, lambda: predict_parts(document, cal_rows, where, base_dir))

    def residual(x):
        return np.log(predict(with_values(document, dict(zip(names, x))), cal_rows, where, base_dir) / measured)

    result = least_squares(residual, start, bounds=(low, high), x_scale=np.maximum(np.abs(start), 1e-3),
                           diff_step=1e-3)
    values = {n: float(v) for n, v in zip(names, result.x)}
    fitted = with_values(document, values)
    report = rows.copy()
    report["before_s"] = predict(document, rows, where, base_dir)
    report["after_s"] = predict(fitted, rows, where, base_dir)
    report["error_before"] = report["before_s"] / report["latency_s"] - 1
    report["error_after"] = report["after_s"] / report["latency_s"] - 1
    caveats = bound_caveats(values) + correlation_caveats(names, result.jac)
    return Fit(values, report, fitted, table, tuple(caveats))


def starting_values(document: dict, names) -> dict[str, float]:
    """Each constant's value in the document, else its typical start; clipped into its bounds."""
    out = {}
    for name in names:
        value = _current(document, name)
        out[name] = float(np.clip(FITTABLE[name][3] if math.isnan(value) else value, *FITTABLE[name][1:3]))
    return out


def starting_sensitivities(document: dict, rows: pd.DataFrame, names: list[str], where: str = "config",
                           base_dir: Path | None = None) -> pd.DataFrame:
    """`sensitivities` of `rows` where the fit of `names` starts (those constants at their starting values)."""
    return sensitivities(with_values(document, starting_values(document, names)), rows, where, base_dir)


def sensitivities(document: dict, rows: pd.DataFrame, where: str = "config",
                  base_dir: Path | None = None) -> pd.DataFrame:
    """d log(row latency) / d log(constant) of every row for every FITTABLE constant, by a 0.1 % finite
    difference at the document's values (a constant at 0, e.g. an overhead, steps by 0.1 % of its typical
    start, and the column is d log(latency) / d(constant / typical start)): which constants the rows pin down."""
    columns = {}
    for name, value in starting_values(document, FITTABLE).items():
        scale = value if value > 0 else FITTABLE[name][3]
        step = SENSITIVITY_STEP * scale * (1 if value + SENSITIVITY_STEP * scale <= FITTABLE[name][2] else -1)
        at = np.log(predict(with_values(document, {name: value}), rows, where, base_dir))
        moved = np.log(predict(with_values(document, {name: value + step}), rows, where, base_dir))
        columns[name] = (moved - at) / (step / scale)
    return pd.DataFrame(columns, index=rows.index)


def refuse_unmoved(table: pd.DataFrame, names: list[str], rows: pd.DataFrame,
                   parts: Callable[[], pd.DataFrame]) -> None:
    """One line for the first named constant that moves no calibration row: which, why, and the FITTABLE
    constant that moves them most (what to fit instead). `parts`: the rows' cost breakdown, when asked."""
    moved = table.abs().max()
    for name in names:
        if moved[name] >= SENSITIVITY_FLOOR:
            continue
        best = moved.drop(name).idxmax()
        raise WorkbenchError(
            f"--fit {name}: {_unmoved_reason(name, rows, parts())}: {name} moves none of them (|d log latency / "
            f"d log {name}| < {SENSITIVITY_FLOOR:g} on all {len(table)} calibration rows); {best} would move "
            f"them (|sensitivity| up to {moved[best]:.3g})")


def _unmoved_reason(name: str, rows: pd.DataFrame, parts: pd.DataFrame) -> str:
    """Why the calibration rows cannot see `name`, in the rows' terms (their devices, phase, messages)."""
    decode = bool((rows["phase"] == "decode").all())
    prefill = bool((rows["phase"] == "prefill").all())
    if FITTABLE[name][0] == "network":
        if "devices" in rows.columns and bool((rows["devices"] == 1).all()):
            return "the calibration rows are one-device rows"
        if bool((parts[["comm_link_latency_s", "comm_bytes_s"]] == 0).all(axis=None)):
            return "the calibration rows send no messages"
    if name == "efficiency_gemv" and decode:
        return "the calibration rows are memory-bound decode steps"
    if name == "efficiency_gemv" and prefill:
        return "the calibration rows are prefill steps (GEMMs, not GEMVs)"
    if name == "efficiency_gemm" and decode:
        return "the calibration rows are decode steps (GEMVs, not GEMMs)"
    return "the calibration rows do not depend on it at the starting point"


def bound_caveats(values: dict[str, float]) -> list[Caveat]:
    """A value within 0.1 % of a bound (of the constant's typical start for a bound at 0): the bound set it."""
    out = []
    for name, value in values.items():
        for side, bound in (("lower", FITTABLE[name][1]), ("upper", FITTABLE[name][2])):
            near = abs(value - bound) <= BOUND_TOLERANCE * (abs(bound) if bound > 0 else FITTABLE[name][3])
            if near:
                out.append(Caveat((name,), f"{name} = {value:.3g} ended on its {side} bound {bound:g} (the "
                                           "bound, not the rows, set it)"))
    return out


def correlation_caveats(names: list[str], jacobian: np.ndarray) -> list[Caveat]:
    """Pairs of fitted constants the rows cannot tell apart: |correlation| of their estimates above
    CORRELATION_LIMIT (from the fit's Jacobian), or a Jacobian too ill-conditioned to invert."""
    if len(names) < 2:
        return []
    norms = np.linalg.norm(jacobian, axis=0)
    unit = jacobian / np.where(norms > 0, norms, 1.0)
    if (norms == 0).any() or np.linalg.cond(unit) > CONDITION_LIMIT:
        return [Caveat(tuple(names), f"the fit of {', '.join(names)} is ill-conditioned (condition number "
                                     f"{np.linalg.cond(unit):.3g} > {CONDITION_LIMIT:g})")]
    covariance = np.linalg.inv(unit.T @ unit)
    sd = np.sqrt(np.diag(covariance))
    correlation = covariance / np.outer(sd, sd)
    return [Caveat((names[i], names[j]), f"{names[i]} and {names[j]} are strongly correlated in the fit "
                                         f"(r = {correlation[i, j]:+.3f}; |r| > {CORRELATION_LIMIT}): the rows "
                                         "cannot tell them apart")
            for i in range(len(names)) for j in range(i + 1, len(names))
            if abs(correlation[i, j]) > CORRELATION_LIMIT]


def worse_rows(report: pd.DataFrame) -> pd.DataFrame:
    """The calibration rows whose |error| grew in the fit (by more than float noise)."""
    grew = report["error_after"].abs() > report["error_before"].abs() + 1e-9
    return report[(report["role"] == "calibration") & grew]


def _current(document: dict, name: str) -> float:
    """The constant's value in the document (the first device's for a device key), NaN when absent."""
    if FITTABLE[name][0] == "network":
        value = document.get("network", {}).get(name)
    else:
        entries = document.get("devices") or [{}]
        value = entries[0].get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def cite(document: dict, values: dict[str, float], measured_name: str, calibration_lines: list[int],
         caveats: tuple[Caveat, ...] = ()) -> dict:
    """The fitted document with a `sources` entry per fitted key: kind fitted, the rows it was fitted on, and
    the caveats it was written despite (--force)."""
    doc = copy.deepcopy(document)
    text = (f"kind = fitted; fitted_on = {measured_name} calibration rows (lines "
            f"{', '.join(map(str, calibration_lines))}) by python -m workbench calibrate")
    for name in values:
        forced = [c.text for c in caveats if name in c.names]
        cited = text + (f"; written with --force although {'; '.join(forced)}" if forced else "")
        tables = [doc.setdefault("network", {})] if FITTABLE[name][0] == "network" else doc.get("devices", [])
        for table in tables:
            table.setdefault("sources", {})[name] = cited
    return doc


def to_toml(document: dict) -> str:
    """A parsed deployment document written back as TOML (tables, arrays of tables, sources)."""
    lines: list[str] = []
    _emit(lines, document, [])
    return "\n".join(lines).strip() + "\n"


def _emit(lines: list[str], table: dict, path: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict | list) or
               (isinstance(v, list) and not any(isinstance(x, dict) for x in v))}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in table.items() if isinstance(v, list) and any(isinstance(x, dict) for x in v)}
    for key, value in scalars.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables.items():
        if all(not isinstance(v, dict | list) for v in value.values()):
            lines.append(f"{_key(key)} = {{ {', '.join(f'{_key(k)} = {_value(v)}' for k, v in value.items())} }}")
        else:
            lines += ["", f"[{'.'.join(map(_key, path + [key]))}]"]
            _emit(lines, value, path + [key])
    for key, items in arrays.items():
        for item in items:
            lines += ["", f"[[{'.'.join(map(_key, path + [key]))}]]"]
            _emit(lines, item, path + [key])


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else f'"{key}"'


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise WorkbenchError(f"cannot write {type(value).__name__} values to TOML")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench calibrate`."""
    parser.add_argument("config", metavar="CONFIG.toml", help="the deployment (see examples/)")
    parser.add_argument("measured", metavar="MEASURED.csv",
                        help="scheme, devices, phase, tokens, latency_s, role; or llama-bench output (-o json, "
                             "-o jsonl, or its markdown table)")
    parser.add_argument("--fit", required=True, metavar="NAME[,NAME...]",
                        help=f"constants to fit: {', '.join(FITTABLE)}")
    parser.add_argument("--validation", default=None, metavar="TEST[,TEST...]",
                        help="llama-bench input: its tests (as its table names them: tg128, 'tg128 @ d512') whose "
                             "rows are validation rows; the others are calibration rows")
    parser.add_argument("--out", default=None, help="the fitted TOML (default: CONFIG.calibrated.toml)")
    parser.add_argument("--force", action="store_true",
                        help="write values that ended on a bound or that the rows cannot tell apart as fitted "
                             "(their sources say so)")


def main(args: argparse.Namespace) -> int:
    """Check --out, print the sensitivities, fit, print every row before -> after and the warnings, write the
    fitted TOML and the rows CSV (not when a value is on a bound or not separable, unless --force); 0 on success."""
    from workbench.core.io import writable_file, write_csv_atomic, write_text_atomic
    from workbench.scenarios.userconfig import read_document

    config = Path(args.config)
    out = Path(args.out) if args.out else config.with_name(config.stem + ".calibrated.toml")
    writable_file(out, f"--out {str(out)!r}")  # before any reading or fitting
    document = read_document(config)
    names = parse_fit_names(args.fit)
    rows = read_measurements(args.measured, llamabench.parse_validation(getattr(args, "validation", None)))
    for line in _llama_warnings(document, rows, config):
        print(line)
    cal_rows = rows[rows["role"] == "calibration"].reset_index(drop=True)
    table = starting_sensitivities(document, cal_rows, names, config.name, config.parent) if len(cal_rows) else None
    if table is not None:
        print(sensitivity_text(table, cal_rows, names))
    fit = calibrate(document, rows, names, config.name, config.parent, sensitivity=table)
    lines = [int(n) for n in (cal_rows["line"] if "line" in cal_rows.columns else cal_rows.index + 2)]
    print(report_text(fit, len(lines)))
    if fit.caveats and not args.force:
        raise WorkbenchError(f"not written as fitted: {'; '.join(c.text for c in fit.caveats)}; fit other "
                             "constants or rows, or pass --force to write them anyway")
    write_text_atomic(out, to_toml(cite(fit.document, fit.values, Path(args.measured).name, lines, fit.caveats)))
    write_csv_atomic(out.with_suffix(".rows.csv"), fit.rows)
    print(f"wrote {out} and {out.with_suffix('.rows.csv')}")
    return 0


def _llama_warnings(document: dict, rows: pd.DataFrame, config: Path) -> list[str]:
    """`llamabench.mismatch_warnings` of llama-bench rows against the config's model; [] for a CSV's rows."""
    if "llama_model" not in rows.columns:
        return []
    from workbench.scenarios.userconfig import parse_config

    parsed = parse_config(document, config.name, config.parent)
    return llamabench.mismatch_warnings(rows, parsed.model.total_params(), parsed.model.weight_bytes(parsed.weight_bits),
                                        parsed.model.name)


def sensitivity_text(table: pd.DataFrame, cal_rows: pd.DataFrame, names: list[str]) -> str:
    """The sensitivity table as printed before the fit: one line per calibration row, fitted constants marked *."""
    keys = [c for c in ("line", "llama_test", "scheme", "devices", "phase", "tokens") if c in cal_rows.columns]
    shown = cal_rows[keys].join(table.rename(columns={n: f"{n}*" for n in names}).map("{:+.3g}".format))
    return ("sensitivity of each calibration row to each fittable constant at the start (d log latency / d log "
            "constant; for a constant at 0, per its typical value; * = fitted):\n" + shown.to_string(index=False))


def report_text(fit: Fit, calibration_rows: int) -> str:
    """The fitted values, every row before -> after, the validation summary and a warning per calibration row
    that got worse and per caveat."""
    out = [f"{name} = {value:.6g} (fitted on {calibration_rows} calibration rows)" for name, value in fit.values.items()]
    shown = fit.rows.drop(columns=[c for c in fit.rows.columns if c.startswith("llama_") and c != "llama_test"])
    shown = shown.assign(error_before=fit.rows.error_before.map("{:+.1%}".format),
                         error_after=fit.rows.error_after.map("{:+.1%}".format))
    out.append(shown.to_string(index=False))
    val = fit.rows[fit.rows.role == "validation"]
    if len(val):
        out.append(f"validation: median |error| {val.error_before.abs().median():.1%} -> "
                   f"{val.error_after.abs().median():.1%} over {len(val)} rows")
    for i, row in worse_rows(fit.rows).iterrows():
        where = f"line {int(row['line'])}" if "line" in fit.rows.columns else f"row {i + 1}"
        out.append(f"warning: calibration row {where} ({row['scheme']}, {row['phase']}, {int(row['tokens'])} tokens) "
                   f"got worse in the fit: error {row['error_before']:+.1%} -> {row['error_after']:+.1%}")
    out += [f"warning: {c.text}" for c in fit.caveats]
    return "\n".join(out)
