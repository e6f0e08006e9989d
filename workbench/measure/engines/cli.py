"""`python -m workbench engines campaign | compare | run`: run llama.cpp here and hold the workbench to it.

* `campaign` times every shape x format x thread count of `workbench.measure.engines.campaign` (several minutes on 2 cores;
  `--shapes` / `--formats` for a part) and writes the measured rows to data/engines/llamacpp_campaign.csv.
* `compare` prints predicted / measured for each stored row, from each device named by `--device` (a preset id or a
  device TOML; one per thread count via `T=...`, e.g. `--device profile 1=this_machine_llamacpp_t1
  2=this_machine_llamacpp_t2`), with the median and worst error per phase.
* `run ENGINE` runs a distributed engine across shaped links (one network namespace per process, `tc tbf`):
  `llama.cpp` (its RPC layer split, `workbench.measure.engines.rpc`) or `distributed-llama` (`workbench.measure.engines.dllama`),
  and merges its `EngineRun` rows into the engine's runs CSV (data/engines/<engine>_runs.csv); every process and
  namespace it started is gone when it ends, Ctrl-C included. Needs root, `ip` and `tc`.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice
from workbench.measure.cluster.netns import tight_burst_bytes
from workbench.measure.engines import campaign

RUN_ENGINES = ("llama.cpp", "distributed-llama")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench engines`."""
    parser.add_argument("what", choices=("campaign", "compare", "run"),
                        help="campaign: run and store; compare: model vs run; run ENGINE: a distributed engine")
    parser.add_argument("engine", nargs="?", default=None, help=f"run: one of {', '.join(RUN_ENGINES)}")
    parser.add_argument("--out", default=None, help="the CSV written or read (default: campaign's, or the engine's "
                                                    "runs CSV for run)")
    parser.add_argument("--processes", type=int, default=2, help="run: processes (client + servers), 2..8")
    parser.add_argument("--link-mbit", type=float, default=1000.0, help="run: every process's link rate, Mbit/s")
    parser.add_argument("--burst-bytes", type=int, default=None,
                        help="run: tbf's bucket, bytes (>= 1514; 0: netns' bulk default of max(64 KiB, 4 ms); "
                             "default: one frame, or 100 us of traffic above 121 Mbit, so each message is shaped)")
    parser.add_argument("--shape", default=None, help="run: the model shape (engine's default if not given)")
    parser.add_argument("--prompt-tokens", type=int, default=32, help="run: prompt tokens (prefill)")
    parser.add_argument("--decode-tokens", type=int, default=32, help="run: decode tokens timed per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="run: repeats")
    parser.add_argument("--engine-version", default=None, help="run distributed-llama: its version (v0.16.4)")
    parser.add_argument("--work", default=None, help="run: folder for the model file (default: a temporary one)")
    parser.add_argument("--shapes", default=None, help=f"comma-separated shapes ({', '.join(campaign.SHAPES)})")
    parser.add_argument("--formats", default=None, help="comma-separated formats (default: all llama.cpp makes)")
    parser.add_argument("--no-moe", action="store_true", help="leave out the MoE shape")
    parser.add_argument("--device", nargs="+", action="append", default=[], metavar="LABEL [T=]DEVICE",
                        help="compare: a label, then one device (a preset id or TOML path) or one per thread count")


def _load(name: str):
    """A device from a preset id or a device TOML path."""
    from workbench.machine.hardware import device_from_table, load_device

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


def merge_runs(path: Path, rows) -> list:
    """The runs stored at `path` with `rows` added (a stored row of the same deployment, phase and date replaced:
    repeats of a deployment accumulate), written back."""
    from workbench.measure.engines.runs import read_runs, write_runs

    def key(run):
        return (run.engine, run.engine_version, run.shape, run.format, run.processes, run.threads, run.link_mbit,
                run.link_bucket_bytes, run.phase, run.date)

    new = {key(r) for r in rows}
    kept = [r for r in (read_runs(path) if path.exists() else []) if key(r) not in new]
    merged = kept + list(rows)
    write_runs(path, merged)
    return merged


def run_engine(args: argparse.Namespace) -> int:
    """`engines run ENGINE`: run it across shaped links and merge its rows into the runs CSV."""
    import shutil
    import tempfile

    require_choice("engine", args.engine, RUN_ENGINES)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="wb-engines-"))
    try:
        return _run_engine(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _run_engine(args: argparse.Namespace, work: Path) -> int:
    """`run_engine` in the folder `work`."""
    if args.engine == "distributed-llama":
        try:
            dllama = importlib.import_module("workbench.measure.engines.dllama")
        except ImportError as exc:
            if exc.name != "workbench.measure.engines.dllama":
                raise
            raise WorkbenchError("distributed-llama's runner (workbench.measure.engines.dllama) is not in this checkout") \
                from None
        version = args.engine_version or "v0.16.4"
        require_choice("--engine-version", version, tuple(dllama.COMMITS))
        name = args.shape or next(iter(dllama.SHAPES))
        require_choice("--shape", name, tuple(dllama.SHAPES))
        burst = tight_burst_bytes(args.link_mbit) if args.burst_bytes is None else args.burst_bytes
        rows = dllama.run_dllama(version, dllama.SHAPES[name], args.processes, args.link_mbit, args.decode_tokens,
                                 work, burst_bytes=burst)
        out = Path(args.out) if args.out else campaign.CAMPAIGN_CSV.parent / "dllama_runs.csv"
    else:
        from workbench.measure.engines import rpc

        config = rpc.RpcConfig(shape=args.shape or "rpc-small", processes=args.processes, link_mbit=args.link_mbit,
                               prompt_tokens=args.prompt_tokens, decode_tokens=args.decode_tokens,
                               repeats=args.repeats, burst_bytes=args.burst_bytes)
        rows, wire = rpc.run_llamacpp_rpc(config, work)
        out = Path(args.out) if args.out else rpc.RUNS_CSV
        wire_path = out.with_name(out.name.replace("_runs", "_wire")) if "_runs" in out.name else \
            out.with_suffix(".wire.csv")
        rpc.merge_wire(wire_path, wire)
    merge_runs(out, rows)
    for run in rows:
        print(f"{run.engine} {run.shape} {run.processes}p {run.link_mbit:g} Mbit {run.phase}: "
              f"{run.seconds_per_token * 1e3:.3f} ms/token (predicted {run.predicted_seconds_per_token * 1e3:.3f}), "
              f"link {'n/a (not counted in this phase)' if run.link_bytes_per_token is None else f'{run.link_bytes_per_token:.0f} B/token'}")
    print(f"{len(rows)} rows -> {out}")
    return 0


def main(args: argparse.Namespace) -> int:
    """Run the campaign, print the comparison, or run a distributed engine."""
    if args.what == "run":
        return run_engine(args)
    if args.engine is not None:
        raise WorkbenchError(f"an engine name goes with `run` only, got {args.what} {args.engine!r}")
    out = Path(args.out) if args.out else campaign.CAMPAIGN_CSV
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
