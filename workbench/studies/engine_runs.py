"""Distributed engines run here (data/engines/*_runs.csv, `workbench.measure.engines.runs.EngineRun` rows of every engine
that has stored runs: llama.cpp's RPC split, distributed-llama) beside the scheme that models each one on the same
deployment: seconds and link bytes per token, measured and predicted, for the own-hardware notebook."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from workbench.core.io import DATA_DIR
from workbench.measure.engines.runs import read_runs
from workbench.report.results import RESULT_COLUMNS

FRAME_BYTES = 14 + 20 + 32  # Ethernet + IPv4 + TCP-with-timestamps headers a packet (as workbench.schemes.edge_engines)
COMM_FLOOR = 0.5  # time is held to the model where communication is at least this share (issue 42)


def stored_runs(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Every stored run row of every engine (one frame, sorted by engine, deployment and phase); a `_wire.csv`
    companion adds the packet counts of the same run (same deployment, phase and date) so a row's RPC payload
    (wire bytes less each packet's headers) is known."""
    frames = []
    for path in sorted((data_dir / "engines").glob("*_runs.csv")):
        frame = pd.DataFrame([dataclasses.asdict(r) for r in read_runs(path)])
        wire = path.with_name(path.name.replace("_runs.csv", "_wire.csv"))
        if wire.exists() and not frame.empty:
            key = ["shape", "processes", "link_mbit", "phase", "date"]
            packets = pd.read_csv(wire)[[*key, "link_packets_per_token"]].astype({"link_mbit": float})
            frame = frame.merge(packets, on=key, how="left", validate="one_to_one")
        frames.append(frame)
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    if "link_packets_per_token" not in out:
        out["link_packets_per_token"] = float("nan")
    return out.sort_values(["engine", "shape", "processes", "link_mbit", "phase"]).reset_index(drop=True)


def _short_version(version: str) -> str:
    """The release a row's engine_version names ("llama-cpp-python 0.3.36" -> "0.3.36"; "v0.16.4" stays)."""
    return str(version).split()[-1]


def side_by_side(runs: pd.DataFrame) -> pd.DataFrame:
    """Measured and predicted per token, with errors (predicted / measured - 1). Bytes are compared as the model
    counts them: llama.cpp's RPC payload (link bytes less 66 B a packet) where packets were counted, else the
    link bytes; `time_held` marks the rows whose communication share is at least COMM_FLOOR on processes that had
    a vCPU each (`oversubscribed` rows, spinning processes sharing vCPUs, are timed by the scheduler, not the link:
    the model, one device per process, does not cost them)."""
    out = runs.copy()
    payload = out["link_bytes_per_token"] - FRAME_BYTES * out["link_packets_per_token"]
    counted = out["link_packets_per_token"].notna()
    out["measured_bytes"] = payload.where(counted, out["link_bytes_per_token"])
    out["bytes_as"] = ["RPC payload" if c else "on the wire" for c in counted]
    out["time_error"] = out["predicted_seconds_per_token"] / out["seconds_per_token"] - 1
    out["bytes_error"] = out["predicted_bytes_per_token"] / out["measured_bytes"] - 1
    out["oversubscribed"] = out["contention"].str.contains("oversubscribed", regex=False)
    out["time_held"] = (out["comm_share"] >= COMM_FLOOR) & ~out["oversubscribed"]
    out["engine_build"] = out["engine"] + " " + out["engine_version"].map(_short_version)
    out["case"] = (out["engine_build"] + " " + out["shape"] + ", " + out["processes"].astype(str) + " proc, "
                   + out["link_mbit"].map(lambda v: f"{v:g}") + " Mbit, tbf bucket "
                   + out["link_bucket_bytes"].map(lambda v: "n/a" if pd.isna(v) else f"{v:.0f} B"))
    return out


def result_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The side-by-side numbers as tidy result rows (paper `own_hardware`, artifact `engine runs`)."""
    run = table.groupby(["case", "phase"]).cumcount()  # the k-th stored run of one deployment and phase
    setting = table.assign(run=run).apply(
        lambda r: f"engine={r.engine_build},processes={r.processes},link_mbit={r.link_mbit:g},"
                  f"bucket_bytes={r.link_bucket_bytes:.0f},phase={r.phase},run={r.run}", axis=1)
    parts = []
    for column, unit in (("seconds_per_token", "s"), ("predicted_seconds_per_token", "s"), ("time_error", "1"),
                         ("measured_bytes", "B"), ("link_bytes_per_token", "B"), ("predicted_bytes_per_token", "B"),
                         ("bytes_error", "1"), ("comm_share", "1")):
        parts.append(pd.DataFrame({"artifact": "engine runs", "model": table["shape"], "setting": setting,
                                   "quantity": column, "value": table[column].astype(float), "unit": unit}))
    if not parts:
        return pd.DataFrame(columns=RESULT_COLUMNS)
    rows = pd.concat(parts, ignore_index=True).assign(paper="own_hardware")[RESULT_COLUMNS]
    return rows[rows.value.notna()].reset_index(drop=True)  # a quantity a run did not measure is no result row


def dllama_logged_bytes_equal(data_dir: Path = DATA_DIR) -> tuple[int, int]:
    """(rows whose root-logged Sent / Recv kB equal the scheme's, rows) over the stored distributed-llama runs
    (`dllama.logged_kb` against `dllama.predicted_kb`); (0, 0) when none are stored."""
    from workbench.measure.engines import dllama

    path = data_dir / "engines" / "dllama_runs.csv"
    rows = read_runs(path) if path.exists() else []
    return sum(dllama.logged_kb(r) == dllama.predicted_kb(r) for r in rows), len(rows)
