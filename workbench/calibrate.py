"""`python -m workbench calibrate CONFIG.toml MEASURED.csv --fit NAME[,NAME...]`: fit constants on your rows.

The protocol the papers' notebooks follow, as a tool. MEASURED.csv has one measured latency per row:

    scheme, devices, phase, tokens, latency_s, role[, model]

`scheme` is a registered arena scheme; `devices` the device count (the config's one [[devices]] entry is
repeated; omit the column to keep the file's devices); `phase` prefill (time to first token of a
`tokens`-token prompt) or decode (one token attending `tokens` positions); `role` calibration or
validation. Only calibration rows fit the named constants (scipy least squares on log(model / measured)
with each constant's bounds); validation rows are reported with their error and never fitted. The result
is a copy of the config with the fitted values, each cited as fitted on those rows, and a CSV of every row
before and after.
"""

from __future__ import annotations

import argparse
import copy
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError

# name -> (where in the TOML, lower bound, upper bound, start): every [[devices]] entry or the network.
FITTABLE = {
    "efficiency_gemm": ("devices", 1e-4, 1.0, 0.5), "efficiency_gemv": ("devices", 1e-4, 1.0, 0.5),
    "memory_efficiency": ("devices", 1e-3, 1.0, 0.8), "kernel_launch_us": ("devices", 0.0, 1e5, 10.0),
    "layer_overhead_us": ("devices", 0.0, 1e6, 100.0), "message_overhead_us": ("network", 0.0, 1e6, 50.0),
    "latency_ms": ("network", 0.0, 1e3, 0.5), "bandwidth_mbps": ("network", 1e-3, 1e6, 100.0),
}
COLUMNS = ("scheme", "devices", "phase", "tokens", "latency_s", "role")
ROLES = ("calibration", "validation")


@dataclass(frozen=True)
class Fit:
    """The fitted values, every row with its prediction before and after, and the fitted document."""

    values: dict[str, float]
    rows: pd.DataFrame
    document: dict


def read_measurements(path: str | Path) -> pd.DataFrame:
    """MEASURED.csv, checked: the columns, a role and a phase per row, positive latencies and token counts."""
    path = Path(path)
    if not path.is_file():
        raise WorkbenchError(f"measurements file {str(path)!r} does not exist")
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise WorkbenchError(f"{path.name}: not a readable CSV: {str(exc).splitlines()[0]}") from None
    required = [c for c in COLUMNS if c != "devices"]
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise WorkbenchError(f"{path.name}: missing column {missing[0]}; needed: {', '.join(COLUMNS)} (devices "
                             "optional, model optional)")
    if frame.empty:
        raise WorkbenchError(f"{path.name}: no rows")
    for i, row in enumerate(frame.itertuples(index=False), start=2):
        _check_row(path.name, i, row._asdict())
    return frame


def _check_row(name: str, line: int, row: dict) -> None:
    where = f"{name} line {line}"
    if row["role"] not in ROLES:
        raise WorkbenchError(f"{where}: role must be one of {', '.join(ROLES)}, got {row['role']!r}")
    if row["phase"] not in ("prefill", "decode"):
        raise WorkbenchError(f"{where}: phase must be prefill or decode, got {row['phase']!r}")
    latency = row["latency_s"]
    if not isinstance(latency, int | float) or not math.isfinite(latency) or latency <= 0:
        raise WorkbenchError(f"{where}: latency_s must be a finite number of seconds > 0, got {latency!r}")
    for key, high in (("tokens", 1 << 20), ("devices", 1024)):
        if key not in row:
            continue
        value = row[key]
        if not isinstance(value, int | float) or not float(value).is_integer() or not 1 <= value <= high:
            raise WorkbenchError(f"{where}: {key} must be an integer in [1, {high}], got {value!r}")


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
    from workbench.schemes.base import SCHEMES, Workload, load_all
    from workbench.userconfig import parse_config

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
        model = config.model if "model" not in rows.columns or not isinstance(row.model, str) else \
            _model(row.model)
        tokens = int(row.tokens)
        workload = Workload(row.phase, seq_len=tokens, kv_len=tokens, weight_bits=config.weight_bits,
                            activation_bits=config.activation_bits)
        result = SCHEMES[scheme][1](model, config.cluster, workload).row()
        out.append({part: float(result.get(part, 0.0)) for part in ("latency_s", *PARTS)})
    return pd.DataFrame(out, index=rows.index)


def _model(name: str):
    from workbench.models import get_model

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
              base_dir: Path | None = None) -> Fit:
    """Fit `names` on the calibration rows (least squares on log ratios, within bounds); report all rows."""
    from scipy.optimize import least_squares

    calibration = rows["role"] == "calibration"
    if calibration.sum() < len(names):
        raise WorkbenchError(f"fitting {len(names)} constant(s) needs at least as many calibration rows, "
                             f"got {int(calibration.sum())}")
    cal_rows = rows[calibration].reset_index(drop=True)
    measured = cal_rows["latency_s"].to_numpy(float)
    low = np.array([FITTABLE[n][1] for n in names])
    high = np.array([FITTABLE[n][2] for n in names])
    start = np.array([_current(document, n) for n in names])
    start = np.clip(np.where(np.isnan(start), [FITTABLE[n][3] for n in names], start), low, high)

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
    return Fit(values, report, fitted)


def _current(document: dict, name: str) -> float:
    """The constant's value in the document (the first device's for a device key), NaN when absent."""
    if FITTABLE[name][0] == "network":
        value = document.get("network", {}).get(name)
    else:
        entries = document.get("devices") or [{}]
        value = entries[0].get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def cite(document: dict, values: dict[str, float], measured_name: str, calibration_lines: list[int]) -> dict:
    """The fitted document with a `sources` entry per fitted key: kind fitted and the rows it was fitted on."""
    doc = copy.deepcopy(document)
    text = (f"kind = fitted; fitted_on = {measured_name} calibration rows (lines "
            f"{', '.join(map(str, calibration_lines))}) by python -m workbench calibrate")
    for name in values:
        tables = [doc.setdefault("network", {})] if FITTABLE[name][0] == "network" else doc.get("devices", [])
        for table in tables:
            table.setdefault("sources", {})[name] = text
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
    parser.add_argument("measured", metavar="MEASURED.csv", help="scheme, devices, phase, tokens, latency_s, role")
    parser.add_argument("--fit", required=True, metavar="NAME[,NAME...]",
                        help=f"constants to fit: {', '.join(FITTABLE)}")
    parser.add_argument("--out", default=None, help="the fitted TOML (default: CONFIG.calibrated.toml)")


def main(args: argparse.Namespace) -> int:
    """Fit, print every row before -> after, write the fitted TOML and the rows CSV; 0 on success."""
    from workbench.io import write_csv_atomic, write_text_atomic
    from workbench.userconfig import read_document

    config = Path(args.config)
    document = read_document(config)
    names = parse_fit_names(args.fit)
    rows = read_measurements(args.measured)
    fit = calibrate(document, rows, names, config.name, config.parent)
    lines = [i + 2 for i in np.flatnonzero(rows["role"].to_numpy() == "calibration")]
    out = Path(args.out) if args.out else config.with_name(config.stem + ".calibrated.toml")
    if out.is_dir():
        raise WorkbenchError(f"--out {str(out)!r} is a folder; give a .toml file")
    write_text_atomic(out, to_toml(cite(fit.document, fit.values, Path(args.measured).name, lines)))
    write_csv_atomic(out.with_suffix(".rows.csv"), fit.rows)
    for name, value in fit.values.items():
        print(f"{name} = {value:.6g} (fitted on {len(lines)} calibration rows)")
    shown = fit.rows.assign(error_before=fit.rows.error_before.map("{:+.1%}".format),
                            error_after=fit.rows.error_after.map("{:+.1%}".format))
    print(shown.to_string(index=False))
    val = fit.rows[fit.rows.role == "validation"]
    if len(val):
        print(f"validation: median |error| {val.error_before.abs().median():.1%} -> {val.error_after.abs().median():.1%}"
              f" over {len(val)} rows")
    print(f"wrote {out} and {out.with_suffix('.rows.csv')}")
    return 0
