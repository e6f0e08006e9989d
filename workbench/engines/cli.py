"""`python -m workbench engines campaign | compare`: run llama.cpp here and hold the workbench to it.

* `campaign` times every shape x format x thread count of `workbench.engines.campaign` (several minutes on 2 cores;
  `--shapes` / `--formats` for a part) and writes the measured rows to data/engines/llamacpp_campaign.csv.
* `compare` prints predicted / measured for each stored row, from each device named by `--device` (a preset id or a
  device TOML; one per thread count via `T=...`, e.g. `--device profile 1=this_machine_llamacpp_t1
  2=this_machine_llamacpp_t2`), with the median and worst error per phase.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from workbench.engines import campaign
from workbench.errors import WorkbenchError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench engines`."""
    parser.add_argument("what", choices=("campaign", "compare"), help="campaign: run and store; compare: model vs run")
    parser.add_argument("--out", default=str(campaign.CAMPAIGN_CSV), help="campaign CSV (written or read)")
    parser.add_argument("--shapes", default=None, help=f"comma-separated shapes ({', '.join(campaign.SHAPES)})")
    parser.add_argument("--formats", default=None, help="comma-separated formats (default: all llama.cpp makes)")
    parser.add_argument("--no-moe", action="store_true", help="leave out the MoE shape")
    parser.add_argument("--device", nargs="+", action="append", default=[], metavar="LABEL [T=]DEVICE",
                        help="compare: a label, then one device (a preset id or TOML path) or one per thread count")


def _load(name: str):
    """A device from a preset id or a device TOML path."""
    from workbench.hardware import device_from_table, load_device

    if name.endswith(".toml"):
        import tomllib

        with open(name, "rb") as f:
            return device_from_table(tomllib.load(f), name)
    return load_device(name)


def devices_by_threads(specs: list[str]) -> dict[int | None, object]:
    """{threads: device} from ["T=DEVICE", ...], or {None: device} for one device at every thread count."""
    if len(specs) == 1 and "=" not in specs[0]:
        return {None: _load(specs[0])}
    out = {}
    for spec in specs:
        threads, sep, name = spec.partition("=")
        if not sep or not threads.isdigit():
            raise WorkbenchError(f"--device entries must be T=DEVICE (threads=preset or TOML), got {spec!r}")
        out[int(threads)] = _load(name)
    return out


def compare(rows: pd.DataFrame, devices: dict[str, dict], engine: dict[str, bool] | None = None) -> pd.DataFrame:
    """Rows with predicted seconds and error per device label (error = predicted / measured - 1; NaN where the
    model says n/a, e.g. an uncounted kernel path); `engine[label]` False costs that label without engine kernels."""
    out = rows.copy()
    for label, by_threads in devices.items():
        predicted = []
        for _, row in rows.iterrows():
            device = by_threads.get(int(row["threads"]), by_threads.get(None))
            try:
                predicted.append(campaign.predict(row, device, (engine or {}).get(label, True))
                                 if device is not None else float("nan"))
            except WorkbenchError:
                predicted.append(float("nan"))
        out[f"predicted_{label}_s"] = predicted
        out[f"error_{label}"] = out[f"predicted_{label}_s"] / out["seconds"] - 1
    return out


def summary(table: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """Median and worst |error| per label, phase and dense/MoE, over the rows each label could cost."""
    table = table.assign(kind=["moe" if e else "dense" for e in table["n_experts"]])
    rows = []
    for label in labels:
        for (kind, phase), group in table.groupby(["kind", "phase"]):
            err = group[f"error_{label}"].abs().dropna()
            rows.append({"device": label, "model": kind, "phase": phase, "rows": len(err), "of": len(group),
                         "median_abs_error": err.median() if len(err) else float("nan"),
                         "worst_abs_error": err.max() if len(err) else float("nan")})
    return pd.DataFrame(rows)


def main(args: argparse.Namespace) -> int:
    """Run the campaign or print the comparison."""
    out = Path(args.out)
    if args.what == "campaign":
        frame = campaign.run_campaign(out, args.shapes.split(",") if args.shapes else None,
                                      args.formats.split(",") if args.formats else None, moe=not args.no_moe)
        print(f"{len(frame)} rows -> {out}")
        return 0
    if not args.device:
        raise WorkbenchError("compare needs --device LABEL DEVICE (or LABEL T=DEVICE ...)")
    devices = {spec[0]: devices_by_threads(spec[1:]) for spec in args.device}
    table = compare(pd.read_csv(out), devices)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        cols = ["shape", "format", "threads", "phase", "seconds"] + [c for c in table if c.startswith("error_")]
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
        print(summary(table, list(devices)).to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0
