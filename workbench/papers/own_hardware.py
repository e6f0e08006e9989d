"""Your own hardware, end to end, with this machine as the user's device.

The path a researcher takes with their own boards, run here on the stored measurements of this machine:
the profile (`python -m workbench profile` -> data/devices/this_machine_cpu.toml, every number measured),
a deployment TOML that names a device file by path, the arena's prediction of TPI-LLM's star tensor
parallelism on it (`tpi_star_tp_resident`: every weight resident, as the measured program runs), the same
model run for real across 2 and 4 processes (`python -m workbench cluster`, loopback and a 100 Mbit tbf
link; data/cluster/tpi_llm_e2e.csv), measured against predicted, and `calibrate` on the user's own rows.

A process's device is its share of the machine (`workbench.cluster.microbench.shared_device`: 1/n of the
compute and bandwidth; fixed costs stretched when processes outnumber cores), written as its own device
file, so the deployment says exactly what the arena costs. Nothing here re-measures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workbench.calibrate import calibrate
from workbench.cluster.fit import link_models
from workbench.cluster.microbench import shared_device
from workbench.errors import WorkbenchError, require_int
from workbench.hardware import DeviceSpec, load_device
from workbench.io import DATA_DIR
from workbench.papers import cluster as stored
from workbench.results import RESULT_COLUMNS

PAPER = "own_hardware"
SCHEME = "tpi_star_tp_resident"
PRESET = DATA_DIR / "devices" / "this_machine_cpu.toml"


def profile_table() -> pd.DataFrame:
    """The profiled preset: every constant with its value, unit, kind and source."""
    device = load_device("this_machine_cpu")
    return pd.DataFrame([{"constant": c.name, "value": float(c.value), "unit": c.unit, "kind": c.kind,
                          "source": c.source} for c in device.provenance.values()])


def device_file_text(device: DeviceSpec, note: str) -> str:
    """A device preset file for `device` (what a deployment's `preset = "<path>"` reads)."""
    entries = {f"peak_flops_{k}": (v, "FLOP/s") for k, v in device.peak_flops.items()}
    level = device.memory[-1]
    entries.update({f"mem_{level.name}_capacity": (level.capacity_bytes, "B"),
                    f"mem_{level.name}_bandwidth": (level.bandwidth_bytes_per_s, "B/s"),
                    "efficiency_gemm": (device.efficiency_gemm, "1"), "efficiency_gemv": (device.efficiency_gemv, "1"),
                    "memory_efficiency": (device.memory_efficiency, "1"), "kernel_launch": (device.kernel_launch_s, "s"),
                    "layer_overhead": (device.layer_overhead_s, "s"), "cores": (device.cores, "1")})
    if device.storage_read_bytes_per_s:
        entries["storage_read_bandwidth"] = (device.storage_read_bytes_per_s, "B/s")
    lines = ["[meta]", f'name = "{device.name}"', f'memory_levels = ["{level.name}"]']
    for key, (value, unit) in entries.items():
        value = int(value) if key == "cores" else float(value)
        lines += ["", f"[{key}]", f"value = {value!r}", f'unit = "{unit}"', 'kind = "derived"', f'source = "{note}"']
    return "\n".join(lines) + "\n"


def deployment(processes: int, link_class: str, folder: Path, model: str = "TinyLlama-42M") -> dict:
    """A deployment document for `processes` processes of this machine on a fitted link class; writes the
    per-process device file into `folder` and names it by path (as a user names a shared board file)."""
    require_int("processes", processes, low=1, high=64)
    links = link_models(stored.stored_fits())
    if link_class not in links:
        raise WorkbenchError(f"unknown link class {link_class!r}; fitted: {', '.join(sorted(links))}")
    link = links[link_class]
    share = shared_device(load_device("this_machine_cpu"), processes)
    folder.mkdir(parents=True, exist_ok=True)
    device_path = folder / f"this_machine_{processes}p.toml"
    device_path.write_text(device_file_text(share, f"data/devices/this_machine_cpu.toml shared by {processes} "
                                                    "processes (workbench.cluster.microbench.shared_device)"))
    return {"meta": {"name": f"this machine, {processes} processes, {link_class}"},
            "model": {"name": model, "weight_bits": 32, "activation_bits": 32},
            "network": {"topology": "direct", "bandwidth_mbps": link.bandwidth_bytes_per_s * 8 / 1e6,
                        "latency_ms": link.latency_s * 1e3, "message_overhead_us": link.message_overhead_s * 1e6},
            "devices": [{"preset": str(device_path), "count": processes}]}


def measured_rows(model: str = "TinyLlama-42M") -> pd.DataFrame:
    """The stored end-to-end runs as calibrate rows: TTFT = prefill of the prompt, per token = a decode step
    attending the prompt plus half the new tokens (the median step); medians over the repeats."""
    runs = stored._read_csv("tpi_llm_e2e.csv")
    runs = runs[runs["model"] == model]
    if runs.empty:
        raise WorkbenchError(f"no stored end-to-end runs of {model!r}")
    rows = []
    for (link, processes, prompt, new), group in runs.groupby(["link_class", "processes", "prompt_len", "n_new"]):
        for phase, tokens, column in (("prefill", prompt, "ttft_s"), ("decode", prompt + max(new // 2, 2), "per_token_s")):
            rows.append({"link_class": link, "scheme": SCHEME, "devices": int(processes), "phase": phase,
                         "tokens": int(tokens), "latency_s": float(group[column].median()), "repeats": len(group)})
    return pd.DataFrame(rows)


def verify(folder: Path, model: str = "TinyLlama-42M") -> pd.DataFrame:
    """Every stored run beside the arena's prediction on its deployment (one per link class and count)."""
    from workbench.calibrate import predict

    rows = measured_rows(model)
    parts = []
    for (link, processes), group in rows.groupby(["link_class", "devices"]):
        doc = deployment(int(processes), link, folder, model)
        predicted = predict(doc, group.drop(columns=["devices"]), f"{link}-{processes}p", folder)
        parts.append(group.assign(predicted_s=predicted))
    out = pd.concat(parts, ignore_index=True)
    out["error"] = out["predicted_s"] / out["latency_s"] - 1
    return out


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median |error| over all points and per process count (the issue's target is <= 15 %)."""
    groups = [("all", table)] + [(f"{n} processes", g) for n, g in table.groupby("devices")]
    return pd.DataFrame([{"points": name, "n": len(g), "median_abs_error": float(np.median(np.abs(g["error"])))}
                         for name, g in groups])


def calibration(folder: Path, model: str = "TinyLlama-42M") -> pd.DataFrame:
    """`calibrate` as a user runs it: the 2-process loopback TTFT row fits message_overhead_us, the
    2-process loopback per-token row is validation (the other runs use other deployments)."""
    rows = measured_rows(model)
    rows = rows[(rows.link_class == "loopback") & (rows.devices == 2)].drop(columns=["devices", "link_class"])
    if len(rows) < 2:
        raise WorkbenchError("calibration needs the 2-process loopback TTFT and per-token rows")
    rows = rows.assign(role=np.where(rows.phase == "prefill", "calibration", "validation")).reset_index(drop=True)
    fit = calibrate(deployment(2, "loopback", folder, model), rows, ["message_overhead_us"], "own_hardware", folder)
    return fit.rows.assign(fitted_message_overhead_us=fit.values["message_overhead_us"])


def result_rows(profile: pd.DataFrame, checked: pd.DataFrame, summary: pd.DataFrame,
                calibrated: pd.DataFrame) -> pd.DataFrame:
    """Every number the notebook shows, as tidy result rows (measured wall times are stored data)."""
    setting = checked.apply(lambda r: f"link={r.link_class},processes={r.devices},phase={r.phase},tokens={r.tokens}",
                            axis=1)
    parts = [pd.DataFrame({"artifact": "profile", "model": "", "setting": profile["constant"],
                           "quantity": "value", "value": profile["value"], "unit": profile["unit"]})]
    for column, unit in (("latency_s", "s"), ("predicted_s", "s"), ("error", "1")):
        parts.append(pd.DataFrame({"artifact": "measured vs predicted", "model": "TinyLlama-42M", "setting": setting,
                                   "quantity": column, "value": checked[column], "unit": unit}))
    parts.append(pd.DataFrame({"artifact": "median error", "model": "TinyLlama-42M", "setting": summary["points"],
                               "quantity": "median_abs_error", "value": summary["median_abs_error"], "unit": "1"}))
    cal_setting = calibrated["phase"] + ",role=" + calibrated["role"]
    for column, unit in (("before_s", "s"), ("after_s", "s"), ("error_before", "1"), ("error_after", "1"),
                         ("fitted_message_overhead_us", "us")):
        parts.append(pd.DataFrame({"artifact": "calibrate", "model": "TinyLlama-42M", "setting": cal_setting,
                                   "quantity": column, "value": calibrated[column], "unit": unit}))
    out = pd.concat(parts, ignore_index=True).assign(paper=PAPER)
    return out[RESULT_COLUMNS]
