"""Your own hardware, end to end, with this machine as the user's device.

The path a researcher takes with their own boards, run here on the stored measurements of this machine:
the profile (`python -m workbench profile` -> data/devices/this_machine_cpu.toml, every number measured),
a deployment TOML that names a device file by path, the arena's prediction of TPI-LLM's star tensor
parallelism on it (`tpi_star_tp_resident`: every weight resident, as the measured program runs), the same
model run for real across 2 and 4 processes (`python -m workbench cluster`, loopback and a 100 Mbit tbf
link; data/cluster/tpi_llm_e2e.csv), measured against predicted, and `calibrate` on the user's own rows.

The link is what a running program pays per sync: o and beta fitted on the star chains whose syncs follow
the work the phase's layers do (`sync_chain`, data/cluster/sync_chain.csv: the slope of 1, 8 and 32 steps in
one program, a small GEMM (prefill) or a GEMV streaming its own matrix (decode) then the star, less the same
steps alone), at the deployment's process count (`stored.deployed_link`), not on single
calls (a single call pays the program's dispatch and, on this VM, often a scheduler tick: data/cluster/
collectives.csv's fit absorbs those and charges them to every sync). On a shaped class the syncs of a chain
share one tbf bucket (its 2 KiB chains cost what loopback's do); the arena has no bucket, so the fitted
rate of its 64 KiB chains is what every message pays there.

The model has no scheduler: it predicts the fastest step (`latency_s`: the fastest TTFT over the repeats,
the median over repeats of each generation's fastest decode step). The typical step (`typical_s`, the
medians) is shown beside it with its own error: on this 2-core VM the difference is the scheduler's waits.

A process's device is its share of the machine (`workbench.measure.cluster.predict.shared_device`: the measured
share of one of n co-located processes, data/cluster/colocated.csv, of the compute and bandwidth; fixed costs
stretched when processes outnumber cores), written as its own device
file, so the deployment says exactly what the arena costs. Nothing here re-measures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_int
from workbench.core.io import DATA_DIR
from workbench.machine.hardware import DeviceSpec
from workbench.measure.cluster.collectives import LOOPBACK
from workbench.measure.cluster.predict import shared_device
from workbench.measure.profile.network import resolved_bandwidth_mbps
from workbench.report.results import RESULT_COLUMNS
from workbench.scenarios.calibrate import calibrate
from workbench.schemes.tpi_llm import STAR_TP_RESIDENT
from workbench.studies import cluster as stored

PAPER = "own_hardware"
SCHEME = STAR_TP_RESIDENT
PRESET = DATA_DIR / "devices" / "this_machine_cpu.toml"


def profile_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """The profiled preset (of a campaign's `data_dir`): every constant with its value, unit, kind and source."""
    device = stored.cpu_preset(data_dir)
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
                    "layer_overhead": (device.layer_overhead_s, "s"), "step_overhead": (device.step_overhead_s, "s"),
                    "cores": (device.cores, "1")})
    if device.gemm_half_rows:
        entries["gemm_half_rows"] = (device.gemm_half_rows, "rows")
    if device.small_kernel_bytes:  # the small-kernel streaming pair (on together)
        entries["small_kernel_bytes"] = (device.small_kernel_bytes, "B")
        entries["core_stream_bandwidth"] = (device.core_stream_bytes_per_s, "B/s")
    if device.storage_read_bytes_per_s:
        entries["storage_read_bandwidth"] = (device.storage_read_bytes_per_s, "B/s")
    lines = ["[meta]", f'name = "{device.name}"', f'memory_levels = ["{level.name}"]']
    for key, (value, unit) in entries.items():
        value = int(value) if key == "cores" else float(value)
        lines += ["", f"[{key}]", f"value = {value!r}", f'unit = "{unit}"', 'kind = "derived"', f'source = "{note}"']
    return "\n".join(lines) + "\n"


def deployment(processes: int, link_class: str, folder: Path, model: str = "TinyLlama-42M",
               phase: str = "prefill", phase_sync: dict[str, str] | None = None, at_count: bool = True,
               shared_machine: bool = True, data_dir: Path = DATA_DIR) -> dict:
    """A deployment document for `processes` processes of this machine on a measured link class, with the link
    a `phase` step sees (`stored.deployed_link`), the processes co-located on this machine (`[cluster]
    shared_machine`: the master's serial work runs on all of it while the others wait); writes the per-process device file into `folder` and names it by
    path (as a user names a shared board file). `data_dir` holds the campaign's profile, chains and
    co-location shares (default: the stored data/)."""
    require_int("processes", processes, low=1, high=64)
    link = stored.deployed_link(processes, link_class, phase, data_dir, phase_sync=phase_sync, at_count=at_count)
    share = shared_device(stored.cpu_preset(data_dir), processes, stored.colocated_share(processes, data_dir))
    # a per-byte cost the chains could not resolve is the largest bandwidth a deployment accepts (one rule with
    # `profile network`); the per-byte time it leaves is nil either way
    bandwidth_mbps, _ = resolved_bandwidth_mbps(link.bandwidth_bytes_per_s, f"the {link_class} chains")
    folder.mkdir(parents=True, exist_ok=True)
    device_path = folder / f"this_machine_{processes}p.toml"
    device_path.write_text(device_file_text(share, f"data/devices/this_machine_cpu.toml shared by {processes} "
                                                    "processes (workbench.measure.cluster.predict.shared_device)"))
    doc = {"meta": {"name": f"this machine, {processes} processes, {link_class}"},
            "model": {"name": model, "weight_bits": 32, "activation_bits": 32},
            "network": {"topology": "direct", "bandwidth_mbps": bandwidth_mbps,
                        "latency_ms": link.latency_s * 1e3, "message_overhead_us": link.message_overhead_s * 1e6},
            "devices": [{"preset": str(device_path), "count": processes}]}
    if shared_machine:
        doc["cluster"] = {"shared_machine": str(data_dir / "devices" / PRESET.name)}
    return doc


def measured_rows(model: str = "TinyLlama-42M", data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """The stored end-to-end runs as calibrate rows: TTFT = prefill of the prompt, per token = a decode step
    attending the prompt plus half the new tokens. `latency_s` is the fastest (TTFT: the fastest repeat;
    per token: the median over repeats of each one's fastest step), `typical_s` the medians."""
    runs = stored._read_csv("tpi_llm_e2e.csv", data_dir)
    runs = runs[runs["model"] == model]
    if runs.empty:
        raise WorkbenchError(f"no stored end-to-end runs of {model!r}")
    rows = []
    for (link, processes, prompt, new), group in runs.groupby(["link_class", "processes", "prompt_len", "n_new"]):
        ttft = group["ttft_s"]
        fastest = {"prefill": float(ttft.min()), "decode": float(group["per_token_min_s"].median())}
        typical = {"prefill": float(ttft.median()), "decode": float(group["per_token_s"].median())}
        for phase, tokens in (("prefill", prompt), ("decode", prompt + max(new // 2, 2))):
            rows.append({"link_class": link, "scheme": SCHEME, "devices": int(processes), "phase": phase,
                         "tokens": int(tokens), "latency_s": fastest[phase], "typical_s": typical[phase],
                         "repeats": len(group)})
    return pd.DataFrame(rows)


def verify(folder: Path, model: str = "TinyLlama-42M", phase_sync: dict[str, str] | None = None,
           at_count: bool = True, shared_machine: bool = True, data_dir: Path = DATA_DIR,
           runs_dir: Path | None = None) -> pd.DataFrame:
    """Every stored run beside the arena's prediction on its deployment (one per link class, count and phase),
    with the prediction's breakdown and what it leaves unexplained (measured - predicted). The profile, chains
    and shares come from `data_dir`, the runs from `runs_dir` (default: the same campaign)."""
    from workbench.scenarios.calibrate import predict_parts

    rows = measured_rows(model, data_dir if runs_dir is None else runs_dir)
    parts = []
    for (link, processes, phase), group in rows.groupby(["link_class", "devices", "phase"], sort=False):
        doc = deployment(int(processes), link, folder, model, phase, phase_sync, at_count, shared_machine, data_dir)
        predicted = predict_parts(doc, group.drop(columns=["devices"]), f"{link}-{processes}p-{phase}", folder)
        parts.append(pd.concat([group, predicted.rename(columns={"latency_s": "predicted_s"})], axis=1))
    out = pd.concat(parts, ignore_index=True)
    out["unexplained_s"] = out["latency_s"] - out["predicted_s"]
    out["error"] = out["predicted_s"] / out["latency_s"] - 1
    out["error_typical"] = out["predicted_s"] / out["typical_s"] - 1
    return out


def error_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median |error| over all points and per process count, against the fastest and the typical runs (the
    issue's target is <= 15 %)."""
    groups = [("all", table)] + [(f"{n} processes", g) for n, g in table.groupby("devices")]
    return pd.DataFrame([{"points": name, "n": len(g), "median_abs_error": float(np.median(np.abs(g["error"]))),
                          "median_abs_error_typical": float(np.median(np.abs(g["error_typical"])))}
                         for name, g in groups])


# Co-temporal campaigns: each a profile (micro-benchmarks), co-location shares, sync chains and end-to-end runs
# measured back to back on this VM, whose speed drifts between campaigns (2026-11-24: the DRAM streaming rate
# fell to 0.63x of the morning's within two hours, on an idle machine). The stored data/ is the first; the
# second repeats it with 8 runs per point instead of 3 (scripts/measure_collectives.py --only micro colocated
# chains e2e --out data/cluster/campaigns/<name>).
# The third (2026-11-25) adds the decoder chains (`workbench.measure.cluster.experiments.decoder_chain`): the syncs among a
# real TP decoder layer's kernels, which its deployments use (`stored.phase_sync_for`).
CAMPAIGNS = {"2026-11-24a": DATA_DIR, "2026-11-24b": DATA_DIR / "cluster" / "campaigns" / "2026-11-24b",
             "2026-11-25a": DATA_DIR / "cluster" / "campaigns" / "2026-11-25a"}
LATEST = "2026-11-25a"


def campaign_table(folder: Path, model: str = "TinyLlama-42M") -> pd.DataFrame:
    """Median |error| of every campaign's runs against every campaign's profile: the diagonal is the protocol
    (profile and runs back to back), the off-diagonal what a stale profile costs on a drifting machine."""
    rows = []
    for profiled, profile_dir in CAMPAIGNS.items():
        for measured, runs_dir in CAMPAIGNS.items():
            table = verify(folder / f"{profiled}-{measured}", model, data_dir=profile_dir, runs_dir=runs_dir)
            rows.append({"profile": profiled, "runs": measured, "same_campaign": profiled == measured,
                         "points": len(table), "median_abs_error": float(np.median(np.abs(table["error"]))),
                         "median_abs_error_typical": float(np.median(np.abs(table["error_typical"]))),
                         "median_signed_error": float(np.median(table["error"]))})
    return pd.DataFrame(rows)


# Drift study (2026-11-25, after the third campaign): three more co-temporal repeats, back to back, loopback only, 2 and
# 4 processes (`--only micro colocated chains e2e --loopback-only --out data/cluster/campaigns/2026-11-25-drift<k>`),
# to measure how far one campaign's error moves from run to run; the headline stays `LATEST`.
DRIFT_CAMPAIGNS = {f"2026-11-25-drift{k}": DATA_DIR / "cluster" / "campaigns" / f"2026-11-25-drift{k}"
                   for k in (1, 2, 3)}


def drift_table(folder: Path, model: str = "TinyLlama-42M") -> pd.DataFrame:
    """Every loopback point of the latest campaign and of each stored drift repeat, each verified on its own
    profile (`verify`): the spread over repeats is the machine's run-to-run drift, not a model error."""
    campaigns = {LATEST: CAMPAIGNS[LATEST], **DRIFT_CAMPAIGNS}
    parts = [verify(folder / name, model, data_dir=path).assign(campaign=name) for name, path in campaigns.items()
             if (path / "cluster" / "tpi_llm_e2e.csv").exists()]
    table = pd.concat(parts, ignore_index=True)
    return table[table["link_class"] == LOOPBACK][
        ["campaign", "devices", "phase", "latency_s", "typical_s", "predicted_s", "error", "error_typical"]]


def drift_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per process count and phase (`drift_table`): the repeats, the error's range and median, how many are
    within 25 % (the fixed-costs issue's end-to-end target), and the measured time's range over repeats."""
    return table.groupby(["devices", "phase"]).agg(
        repeats=("error", "size"), error_min=("error", "min"), error_median=("error", "median"),
        error_max=("error", "max"), within_25pct=("error", lambda e: int((e.abs() <= 0.25).sum())),
        measured_min_s=("latency_s", "min"), measured_max_s=("latency_s", "max")).reset_index()


COMPUTE_ONLY = {"prefill": "after compute", "decode": "after compute"}
LINK_CHOICES = (  # (name, sync kind per phase, fitted at the deployed count, serial work on the whole machine)
    ("after compute, 2-process chains, serial on the share (last session)", COMPUTE_ONLY, False, False),
    ("per phase, 2-process chains, serial on the share", stored.PHASE_SYNC, False, False),
    ("after compute, deployed count, serial on the share", COMPUTE_ONLY, True, False),
    ("after streaming, deployed count, serial on the share",
     {"prefill": "after streaming", "decode": "after streaming"}, True, False),
    ("per phase, deployed count, serial on the share", stored.PHASE_SYNC,
     True, False),
    ("per phase, deployed count, serial on the machine (used without decoder chains)",
     stored.PHASE_SYNC, True, True),
    ("in decoder layers, deployed count, serial on the machine (used where measured)",
     stored.DECODER_PHASE_SYNC, True, True),
)


def link_choice_table(folder: Path, model: str = "TinyLlama-42M", data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """The median |error| (fastest and typical) and each point's error under every way of choosing the link
    and the serial work's machine (`LINK_CHOICES`): which chains' syncs, fitted at which process count, and
    whether the master's serial work runs on its share or on the whole machine. None is fitted on an
    end-to-end row."""
    rows = []
    measured = set(stored.measured_sync_kinds(data_dir))
    for name, phase_sync, at_count, shared in LINK_CHOICES:
        if not set(phase_sync.values()) <= measured:
            continue
        table = verify(folder, model, phase_sync, at_count, shared, data_dir)
        points = {f"{r.link_class}, {r.devices} proc, {r.phase}": r.error for r in table.itertuples()}
        rows.append({"link": name, "median_abs_error": float(np.median(np.abs(table["error"]))),
                     "median_abs_error_typical": float(np.median(np.abs(table["error_typical"]))), **points})
    return pd.DataFrame(rows)


def calibration(folder: Path, model: str = "TinyLlama-42M", data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """`calibrate` as a user runs it: the 2-process loopback TTFT row fits message_overhead_us, the
    2-process loopback per-token row is validation (the other runs use other deployments)."""
    rows = measured_rows(model, data_dir)
    rows = rows[(rows.link_class == "loopback") & (rows.devices == 2)].drop(columns=["devices", "link_class",
                                                                                    "typical_s"])
    if len(rows) < 2:
        raise WorkbenchError("calibration needs the 2-process loopback TTFT and per-token rows")
    rows = rows.assign(role=np.where(rows.phase == "prefill", "calibration", "validation")).reset_index(drop=True)
    fit = calibrate(deployment(2, "loopback", folder, model, data_dir=data_dir), rows, ["message_overhead_us"],
                    "own_hardware", folder)
    return fit.rows.assign(fitted_message_overhead_us=fit.values["message_overhead_us"])


def result_rows(profile: pd.DataFrame, checked: pd.DataFrame, summary: pd.DataFrame,
                calibrated: pd.DataFrame, chains: pd.DataFrame | None = None,
                choices: pd.DataFrame | None = None, campaigns: pd.DataFrame | None = None,
                drift: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every number the notebook shows, as tidy result rows (measured wall times are stored data)."""
    setting = checked.apply(lambda r: f"link={r.link_class},processes={r.devices},phase={r.phase},tokens={r.tokens}",
                            axis=1)
    parts = [pd.DataFrame({"artifact": "profile", "model": "", "setting": profile["constant"],
                           "quantity": "value", "value": profile["value"], "unit": profile["unit"]})]
    for column, unit in (("latency_s", "s"), ("typical_s", "s"), ("predicted_s", "s"), ("error", "1"),
                         ("error_typical", "1"), ("compute_s", "s"), ("memory_s", "s"), ("serial_s", "s"), ("comm_link_latency_s", "s"),
                         ("comm_bytes_s", "s"), ("fixed_s", "s"), ("unexplained_s", "s")):
        parts.append(pd.DataFrame({"artifact": "measured vs predicted", "model": "TinyLlama-42M", "setting": setting,
                                   "quantity": column, "value": checked[column], "unit": unit}))
    parts.append(pd.DataFrame({"artifact": "median error", "model": "TinyLlama-42M", "setting": summary["points"],
                               "quantity": "median_abs_error", "value": summary["median_abs_error"], "unit": "1"}))
    parts.append(pd.DataFrame({"artifact": "median error", "model": "TinyLlama-42M", "setting": summary["points"],
                               "quantity": "median_abs_error_typical", "value": summary["median_abs_error_typical"],
                               "unit": "1"}))
    if chains is not None:
        chain_setting = chains.apply(lambda r: f"syncs={r.syncs},link={r.link_class},processes={r.processes},"
                                               f"bytes={r.message_bytes},role={r.role}", axis=1)
        for column in ("per_sync_s", "predicted_s", "error"):
            parts.append(pd.DataFrame({"artifact": "sync chain", "model": "", "setting": chain_setting,
                                       "quantity": column, "value": chains[column],
                                       "unit": "1" if column == "error" else "s"}))
    if choices is not None:
        for column in [c for c in choices.columns if c != "link"]:
            parts.append(pd.DataFrame({"artifact": "link choice", "model": "TinyLlama-42M",
                                       "setting": "link=" + choices["link"] + ",point=" + column,
                                       "quantity": "error" if "," in column else column,
                                       "value": choices[column], "unit": "1"}))
    if campaigns is not None:
        setting = "profile=" + campaigns["profile"] + ",runs=" + campaigns["runs"]
        for column in ("median_abs_error", "median_abs_error_typical", "median_signed_error"):
            parts.append(pd.DataFrame({"artifact": "campaigns", "model": "TinyLlama-42M", "setting": setting,
                                       "quantity": column, "value": campaigns[column], "unit": "1"}))
    if drift is not None:
        setting = drift.apply(lambda r: f"campaign={r.campaign},link=loopback,processes={r.devices},phase={r.phase}",
                              axis=1)
        for column, unit in (("latency_s", "s"), ("typical_s", "s"), ("predicted_s", "s"), ("error", "1"),
                             ("error_typical", "1")):
            parts.append(pd.DataFrame({"artifact": "drift repeats", "model": "TinyLlama-42M", "setting": setting,
                                       "quantity": column, "value": drift[column], "unit": unit}))
    cal_setting = calibrated["phase"] + ",role=" + calibrated["role"]
    for column, unit in (("before_s", "s"), ("after_s", "s"), ("error_before", "1"), ("error_after", "1"),
                         ("fitted_message_overhead_us", "us")):
        parts.append(pd.DataFrame({"artifact": "calibrate", "model": "TinyLlama-42M", "setting": cal_setting,
                                   "quantity": column, "value": calibrated[column], "unit": unit}))
    out = pd.concat(parts, ignore_index=True).assign(paper=PAPER)
    return out[RESULT_COLUMNS]
