"""The cluster notebook's experiments: stored measurements of this machine beside the core's models.

Everything here reads data/ (written by scripts/measure_collectives.py); nothing re-measures, so
reproduce and CI do not depend on this machine's load. Every function returns a tidy DataFrame.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.core.constants import load_constants
from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.core.io import DATA_DIR
from workbench.core.units import mbps_to_bytes_per_s
from workbench.kernels.accelerator import compare
from workbench.machine.hardware import device_from_table, load_device
from workbench.measure.cluster.collectives import HostModel, LinkModel, colocated_link, link_models
from workbench.measure.cluster.fit import (
    AFTER_COMPUTE_SYNC,
    AFTER_STREAM_SYNC,
    DECODER_SYNC,
    FIT_PROCESSES,
    IN_DECODER,
    chain_slopes,
    fit_all,
    fit_chains,
    fits_from_constants,
    is_calibration,
    legacy_predict,
    predict,
    predict_chains,
    star_vs_ring,
    statistic,
    sync_after_step,
    validation_summary,
)
from workbench.measure.cluster.host import host_model
from workbench.measure.cluster.predict import predict_generation
from workbench.measure.profile.colocated import colocated_shares
from workbench.model.models import get_model
from workbench.report.results import RESULT_COLUMNS

CLUSTER_DIR = DATA_DIR / "cluster"
PAPER = "workbench"
# The campaign before the fixed-costs issue (2026-11-22): the same VM image on another host (Intel Xeon; today
# it runs on AMD EPYC), load average 1-5. Kept beside this machine's campaign (2026-11-24, load average 4-17
# from other users' test suites) to show the model before -> after on a quieter machine too.
SECOND_CAMPAIGN = "collectives_2026-11-22_xeon.csv"


def _read_csv(name: str, data_dir: Path = DATA_DIR) -> pd.DataFrame:
    path = data_dir / "cluster" / name
    if not path.exists():
        raise WorkbenchError(f"{path} is missing; run scripts/measure_collectives.py to measure this machine")
    return pd.read_csv(path)


def machine_info(data_dir: Path = DATA_DIR) -> dict:
    """Date, machine description, load averages and caveats of the stored measurements."""
    return json.loads((data_dir / "cluster" / "machine.json").read_text())


def measurements(data_dir: Path = DATA_DIR, name: str = "collectives.csv") -> pd.DataFrame:
    """The stored collective measurements (one row per link class, processes, program, size)."""
    return _read_csv(name, data_dir)


def cluster_constants(data_dir: Path = DATA_DIR) -> dict:
    """data/constants/cluster.toml: o, L and beta per link class, the scheduler tick."""
    return load_constants(data_dir / "constants" / "cluster.toml")


def stored_fits(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """o, L and beta per link class from data/constants/cluster.toml."""
    return fits_from_constants(cluster_constants(data_dir))


def cpu_preset(data_dir: Path = DATA_DIR):
    """The micro-benchmarked this_machine_cpu preset."""
    if data_dir == DATA_DIR:
        return load_device("this_machine_cpu")
    with open(data_dir / "devices" / "this_machine_cpu.toml", "rb") as f:
        return device_from_table(tomllib.load(f), "this_machine_cpu.toml")


def host(data_dir: Path = DATA_DIR) -> HostModel:
    """Cores and per-call dispatch of the CPU preset, the kernel's scheduler tick, the cost of a fresh page."""
    return host_model(cpu_preset(data_dir), cluster_constants(data_dir))


def fit_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """The fit recomputed from the stored measurements, with the nominal tbf rate where shaped."""
    fits = fit_all(measurements(data_dir), host(data_dir))
    rate = fits["link_class"].str.extract(r"tbf_([0-9.]+)mbit")[0].astype(float)
    fits["nominal_bandwidth_bytes_per_s"] = mbps_to_bytes_per_s(rate)
    fits["fitted_over_nominal_bandwidth"] = fits["bandwidth_bytes_per_s"] / fits["nominal_bandwidth_bytes_per_s"]
    return fits


def collective_comparison(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Every measured point with the model's prediction and parts, the core's ring / tree / star, the error."""
    return predict(measurements(data_dir), stored_fits(data_dir), host(data_dir))


def fastest_call_comparison(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Every measured point's fastest call beside the scheduler-free model (CPU sharing, the tbf bucket),
    refitted on the same calibration rows (`workbench.measure.cluster.collectives.SCHEDULER_FREE`)."""
    data, hm = measurements(data_dir), host(data_dir)
    return predict(data, fit_all(data, hm, "min_s"), hm, "min_s")


CALIBRATION_PROGRAMS = ("psum", "star")  # gloo's all-reduce (the stored fit) or the ppermute ping-pong


def calibration_choices(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """The fit on each calibration program (2 processes) and statistic, and the validation error it gives over
    the points both choices validate (link classes measured with both programs): how much the fitted o
    depends on which program's tick mode it absorbs."""
    data, hm = measurements(data_dir), host(data_dir)
    both = [k for k, g in data[data.processes == 2].groupby("link_class")
            if set(CALIBRATION_PROGRAMS) <= set(g["program"])]
    data = data[data["link_class"].isin(both)]
    rows = []
    for program in CALIBRATION_PROGRAMS:
        for stat in ("median_s", "mean_s", "min_s"):
            fits = fit_all(data, hm, stat, program)
            table = predict(data, fits, hm, stat, program)
            shared = table[~is_calibration(table, "psum") & ~is_calibration(table, "star")]
            summary = validation_summary(shared.assign(role="validation")).iloc[0]
            rows.append({"calibration_program": program, "statistic": stat,
                         "message_overhead_us": 1e6 * float(fits["message_overhead_s"].iloc[0]),
                         "validation_points": int(summary.points), "median_rel_error": summary.median_rel_error,
                         "within_20pct": summary.within_20pct})
    return pd.DataFrame(rows)


# Collective campaigns, oldest first: (name, data folder, CSV in its cluster/, label). The last one is the notebook's
# headline, each decided before it ran: 2026-11-25b with OSU's repetitions capped at ~3 s a point
# (`workbench.measure.cluster.measure.OSU_PROTOCOL`), then 2026-11-25d with them uncapped (`OSU_FULL_PROTOCOL`), after the
# best-of-N diagnostic showed the capped fastest call had not settled at 8 processes.
OSU_CAMPAIGN, OSU_FULL_CAMPAIGN = "2026-11-25b", "2026-11-25d"
COLLECTIVE_CAMPAIGNS = (
    ("2026-11-22 (xeon)", DATA_DIR, SECOND_CAMPAIGN, "before the issue, another host (Intel Xeon), quieter; 5-25 calls"),
    ("2026-11-24", DATA_DIR, "collectives.csv", "this machine; 5-25 calls"),
    (OSU_CAMPAIGN, CLUSTER_DIR / "campaigns" / OSU_CAMPAIGN, "collectives.csv",
     "this machine; OSU's repetitions: up to 1000 calls <= 8 KiB, 100 above"),
    (OSU_FULL_CAMPAIGN, CLUSTER_DIR / "campaigns" / OSU_FULL_CAMPAIGN, "collectives.csv",
     "this machine; OSU's repetitions uncapped: 1000 calls <= 8 KiB, 100 above"),
)


def collective_campaigns() -> list[tuple[str, Path, str, str]]:
    """The stored collective campaigns (`COLLECTIVE_CAMPAIGNS`) whose CSV is present."""
    return [c for c in COLLECTIVE_CAMPAIGNS if (c[1] / "cluster" / c[2]).exists()]


def latest_collectives_dir() -> Path:
    """The data folder of the newest stored collective campaign (the notebook's headline)."""
    return collective_campaigns()[-1][1]


# A diagnostic of the fastest-call statistic where it misses most (8 processes on 2 cores, small messages):
# every program at 32 B with 3000 calls (`scripts/measure_collectives.py --only bestofn`), declared before it ran
BEST_OF_N_DIR = CLUSTER_DIR / "campaigns" / "2026-11-25c-bestofn"


def best_of_n_table(folder: Path = BEST_OF_N_DIR, campaign: Path | None = None) -> pd.DataFrame:
    """Per program: the fastest of the first N calls (columns `fastest_<N>_ms`) beside the scheduler-free model
    and the fastest call of the collectives `campaign` (default: 2026-11-25b, the capped OSU campaign the
    diagnostic questioned) at the same point, with its calls."""
    runs = pd.read_csv(folder / "cluster" / "best_of_n.csv")
    campaign = campaign or CLUSTER_DIR / "campaigns" / OSU_CAMPAIGN
    model = fastest_call_comparison(campaign)
    out = runs.pivot_table(index=["link_class", "processes", "program", "message_bytes"], columns="calls",
                           values="fastest_s").mul(1e3)
    out.columns = [f"fastest_{n}_ms" for n in out.columns]
    out = out.reset_index()
    keys = ["link_class", "processes", "program", "message_bytes"]
    same = model.set_index(keys).reindex(pd.MultiIndex.from_frame(out[keys]))
    if same["pred_s"].isna().any():
        raise WorkbenchError(f"the campaign {campaign} has no point for some best-of-N rows")
    out["model_ms"] = 1e3 * same["pred_s"].to_numpy()
    out["campaign_fastest_ms"] = 1e3 * same["measured_s"].to_numpy()
    out["campaign_calls"] = same["reps"].to_numpy().astype(int)
    most = max(runs["calls"])
    out[f"fastest_{most}_over_model"] = out[f"fastest_{most}_ms"] / out["model_ms"]
    out["campaign_over_fastest"] = out["campaign_fastest_ms"] / out[f"fastest_{most}_ms"]
    return out


def before_after(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Validation error of the model before the fixed-costs issue (`legacy_predict`) and now, each refitted on
    the same calibration rows, per stored campaign and statistic (every validation point counts; the
    100 Mbit class has calibration rows only). Each campaign is costed with its own folder's host (the
    dispatch its micro-benchmarks measured); `data_dir` other than the repository's data/ names one folder."""
    rows = []
    campaigns = (collective_campaigns() if data_dir == DATA_DIR else
                 [("this folder", data_dir, "collectives.csv", "this folder")])
    for name, folder, csv, label in campaigns:
        hm = host(folder)
        data = measurements(folder, csv)
        stats = [statistic(data)] + [s for s in ("mean_s", "min_s") if s in data and data[s].notna().all()]
        for stat in stats:
            for model, table in (("before: alpha per traversal, ideal algorithms", legacy_predict(data, stat)),
                                 ("after: gloo/XLA algorithms, o + L + beta, dispatch, scheduler wait "
                                  "(fastest call: no wait, CPU sharing, tbf bucket)",
                                  predict(data, fit_all(data, hm, stat), hm, stat))):
                summary = validation_summary(table).iloc[0]
                dates = ", ".join(sorted(set(data["date"].astype(str))))
                shown = csv if folder == DATA_DIR else str((folder / "cluster" / csv).relative_to(CLUSTER_DIR))
                rows.append({"campaign": f"{shown} ({label}; measured {dates})", "campaign_name": name,
                             "median_calls": int(data["reps"].median()), "statistic": stat,
                             "model": model, "validation_points": int(summary.points),
                             "median_rel_error": summary.median_rel_error, "p90_rel_error": summary.p90_rel_error,
                             "within_20pct": summary.within_20pct})
    return pd.DataFrame(rows)


def comparison_long(table: pd.DataFrame) -> pd.DataFrame:
    """Measured and predicted latencies in long form for charts (series = measured | model | ring | tree | star)."""
    keys = ["link_class", "processes", "program", "message_bytes"]
    parts = [table[keys].assign(series="measured", latency_s=table["measured_s"]),
             table[keys].assign(series="workbench model", latency_s=table["pred_s"])]
    for algorithm in ("ring", "tree", "star"):
        parts.append(table[keys].assign(series=f"{algorithm} (core, link only)", latency_s=table[f"pred_{algorithm}_s"]))
    return pd.concat(parts, ignore_index=True)


def validation_tables(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Median relative error of validation points: overall, per link class, per program x processes."""
    return {"overall": validation_summary(table), "by_link": validation_summary(table, ("link_class",)),
            "by_program": validation_summary(table, ("program", "processes")),
            "by_size": validation_summary(table.assign(size_class=size_class(table.message_bytes)), ("size_class",))}


def size_class(message_bytes: pd.Series) -> pd.Series:
    """'small (<= 16 KiB)', 'medium' or 'large (>= 1 MiB)'."""
    return pd.Series(np.select([message_bytes <= 16384, message_bytes >= 2**20],
                               ["small (<= 16 KiB)", "large (>= 1 MiB)"], "medium"), index=message_bytes.index)


def model_gap_table(table: pd.DataFrame, cores: int) -> pd.DataFrame:
    """Validation points grouped by oversubscription (processes > cores), size and program:
    median measured / predicted (> 1: the model is too fast) and median relative error."""
    val = table[table["role"] == "validation"].copy()
    val["processes_vs_cores"] = np.where(val["processes"] > cores, f"> {cores} cores", f"<= {cores} cores")
    val["size_class"] = size_class(val["message_bytes"])
    val["measured_over_predicted"] = val["measured_s"] / val["pred_s"]
    return val.groupby(["processes_vs_cores", "size_class", "program"]).agg(
        points=("rel_error", "size"), median_measured_over_predicted=("measured_over_predicted", "median"),
        median_rel_error=("rel_error", "median")).reset_index()


def tick_table(table: pd.DataFrame, tick_s: float, max_bytes: int = 16384) -> pd.DataFrame:
    """Small messages per process count and program: the fastest call, the quartiles and the median in
    scheduler ticks beside the model's expected wait, and the spread that makes the median unstable."""
    small = table[table["message_bytes"] <= max_bytes]
    agg = small.groupby(["processes", "program"]).agg(
        points=("min_s", "size"), min_ms=("min_s", lambda s: 1e3 * s.median()),
        p25_ms=("p25_s", lambda s: 1e3 * s.median()), median_ms=("median_s", lambda s: 1e3 * s.median()),
        p75_ms=("p75_s", lambda s: 1e3 * s.median()), model_wait_ms=("wait_s", lambda s: 1e3 * s.median()),
        predicted_ms=("pred_s", lambda s: 1e3 * s.median())).reset_index()
    agg["p75_minus_p25_ticks"] = (agg["p75_ms"] - agg["p25_ms"]) / (1e3 * tick_s)
    if "mean_s" in small:
        agg["mean_ms"] = small.groupby(["processes", "program"])["mean_s"].median().to_numpy() * 1e3
    return agg


def star_ring_table(data_dir: Path = DATA_DIR, max_bytes: int = 2048, min_processes: int = 4) -> pd.DataFrame:
    """Measured star vs gloo's ring psum at small messages and 4+ processes, per link class."""
    return star_vs_ring(measurements(data_dir), max_bytes, min_processes)


def stack_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Galaxy's and the MCU paper's kernels measured across processes (`stacks.csv`) beside the arena's
    registered scheme on this machine's preset: the median call against the stored link constants (fitted on
    median calls), the fastest call against the same fit on the fastest calls (`fastest_call_comparison`)."""
    from workbench.measure.cluster.layer_runs import layer_model
    from workbench.measure.cluster.predict import predict_scheme
    from workbench.schemes.base import Workload

    runs = _read_csv("stacks.csv", data_dir)
    device, data, hm = cpu_preset(data_dir), measurements(data_dir), host(data_dir)
    typical, fastest = link_models(stored_fits(data_dir)), link_models(fit_all(data, hm, "min_s"))
    rows = []
    for r in runs.itertuples():
        if r.link_class not in typical:
            raise WorkbenchError(f"no fitted link class {r.link_class!r} for the stack runs")
        cfg = layer_model(r.model, int(r.n_layers))
        workload = Workload("prefill", seq_len=int(r.seq_len), weight_bits=32, activation_bits=32)
        pred = predict_scheme(r.scheme, cfg, device, typical[r.link_class], int(r.processes), workload)
        quick = predict_scheme(r.scheme, cfg, device, fastest[r.link_class], int(r.processes), workload)
        rows.append({"scheme": r.scheme, "model": r.model, "seq_len": int(r.seq_len), "link_class": r.link_class,
                     "processes": int(r.processes), "matches_reference": bool(r.matches_reference),
                     "measured_median_s": float(r.median_s), "predicted_s": pred["latency_s"],
                     "measured_min_s": float(r.min_s), "predicted_fastest_s": quick["latency_s"],
                     "predicted_compute_s": pred["compute_s"], "predicted_memory_s": pred["memory_s"],
                     "predicted_comm_s":
                         pred["comm_link_latency_s"] + pred["comm_bytes_s"]})
    out = pd.DataFrame(rows)
    out["median_over_predicted"] = out["measured_median_s"] / out["predicted_s"]
    out["min_over_predicted_fastest"] = out["measured_min_s"] / out["predicted_fastest_s"]
    return out


SHARE_PROGRAM = "decode_layers"  # the co-location program whose share a process of a decoder gets


def colocated_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Each co-location program's time alone and with 1 or 3 others, and the share of the machine each gets."""
    return colocated_shares(_read_csv("colocated.csv", data_dir))


def colocated_share(processes: int, data_dir: Path = DATA_DIR) -> float | None:
    """The measured share of this machine one of `processes` co-located decoder processes gets (None: not
    measured at that count, so `shared_device` takes 1/processes)."""
    table = colocated_table(data_dir)
    row = table[(table.program == SHARE_PROGRAM) & (table.processes == processes)]
    return None if row.empty or processes == 1 else float(row["share"].iloc[0])


SYNC_KINDS = {"bare": "star", "after compute": AFTER_COMPUTE_SYNC, "after streaming": AFTER_STREAM_SYNC,
              "in decoder layers": DECODER_SYNC}
# Which kind of sync a phase's layers end in, in a campaign without decoder chains: a decode step streams each
# layer's weights from memory between two syncs (one row per matrix), a 32-token prefill runs GEMMs on them
# (compute-bound on this CPU)
PHASE_SYNC = {"prefill": "after compute", "decode": "after streaming"}
# A campaign that measured the decoder chains (from 2026-11-25): both phases' syncs among a real TP decoder layer's
# kernels (decode: 1 token per step, prefill: 32), TPI-LLM's layer on a shape of its own. Chosen before its
# end-to-end error was seen: it is the instrument closest to the program the deployment runs.
DECODER_PHASE_SYNC = {"prefill": "in decoder layers", "decode": "in decoder layers"}


def _program_slopes(data_dir: Path) -> dict[str, pd.DataFrame]:
    """Per kind of sync (`SYNC_KINDS`) the campaign measured, the stored chains' per-sync slopes
    (data/cluster/sync_chain.csv)."""
    slopes = chain_slopes(_read_csv("sync_chain.csv", data_dir))
    kinds = {"bare": slopes[slopes.program == "star"], "after compute": sync_after_step(slopes, AFTER_COMPUTE_SYNC),
             "after streaming": sync_after_step(slopes, AFTER_STREAM_SYNC)}
    if (slopes.program == IN_DECODER).any():
        kinds["in decoder layers"] = sync_after_step(slopes, DECODER_SYNC)
    return kinds


def measured_sync_kinds(data_dir: Path = DATA_DIR) -> list[str]:
    """The kinds of sync (`SYNC_KINDS`) a campaign's chains measured."""
    return list(_program_slopes(data_dir))


def phase_sync_for(data_dir: Path = DATA_DIR) -> dict[str, str]:
    """The sync kind per phase a campaign's deployments use: `DECODER_PHASE_SYNC` where its decoder chains were
    measured, else `PHASE_SYNC`."""
    return DECODER_PHASE_SYNC if "in decoder layers" in measured_sync_kinds(data_dir) else PHASE_SYNC


def chain_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Per-sync seconds inside a running program (stored `sync_chain` slopes of the fastest calls; bare syncs,
    and syncs after a compute or a streaming step) beside the model's, each kind fitted on its own 2-process
    star rows."""
    cores = int(cpu_preset(data_dir).cores)
    parts = []
    for kind, slopes in _program_slopes(data_dir).items():
        parts.append(predict_chains(slopes, fit_chains(slopes, cores), cores).assign(syncs=kind))
    return pd.concat(parts, ignore_index=True)


def chain_process_counts(data_dir: Path = DATA_DIR) -> list[int]:
    """Process counts the stored chains were measured on."""
    return sorted(int(n) for n in set(_read_csv("sync_chain.csv", data_dir)["processes"]))


def program_links(data_dir: Path = DATA_DIR, kind: str = "after compute",
                  processes: int = FIT_PROCESSES) -> dict[str, LinkModel]:
    """The link classes a decoder's running program sees: o and beta (L on a shaped class) fitted on the star
    syncs of `kind` (`SYNC_KINDS`) on `processes` processes (data/cluster/sync_chain.csv), beside the
    single-call fits of data/constants/cluster.toml."""
    require_choice("kind", kind, tuple(SYNC_KINDS))
    measured = _program_slopes(data_dir)
    if kind not in measured:
        raise WorkbenchError(f"kind {kind!r} was not measured in {data_dir}; measured: {', '.join(measured)}")
    slopes = measured[kind]
    return link_models(fit_chains(slopes, int(cpu_preset(data_dir).cores), processes=processes))


def deployed_link(processes: int, link_class: str, phase: str = "prefill", data_dir: Path = DATA_DIR,
                  phase_sync: dict[str, str] | None = None, at_count: bool = True) -> LinkModel:
    """The link a `phase` step of `processes` co-located processes sees: fitted on the star chains whose syncs
    follow the work the phase's layers do (`phase_sync_for`), on the deployment's own process count when the chains
    were measured there (the network profiled as deployed), else on 2 processes; as co-located processes see it
    (`colocated_link`: the CPU work stretched by processes / cores, as the fit assumed). `phase_sync` and
    `at_count=False` (always the 2-process chains) are the alternatives the notebooks compare."""
    require_int("processes", processes, low=1, high=64)
    phase_sync = phase_sync_for(data_dir) if phase_sync is None else phase_sync
    require_choice("phase", phase, tuple(phase_sync))
    kind = phase_sync[phase]
    require_choice("sync kind", kind, tuple(SYNC_KINDS))
    at_count = at_count and processes in chain_process_counts(data_dir)
    links = program_links(data_dir, kind, processes if at_count else FIT_PROCESSES)
    if link_class not in links:
        raise WorkbenchError(f"unknown link class {link_class!r}; fitted: {', '.join(sorted(links))}")
    return colocated_link(links[link_class], SYNC_KINDS[kind], processes, int(cpu_preset(data_dir).cores))


def e2e_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """TPI-LLM on 2 and 4 processes: measured TTFT / per-token latency (median of repeats; and the fastest:
    TTFT's fastest repeat, the median of each repeat's fastest step) beside the arena's evaluation of its
    TPI-LLM scheme on this machine's preset with three links: fitted on median single calls, on fastest
    single calls (both with the even 1/n share of the machine), and on syncs inside a running program
    (`deployed_link`: per phase, fitted at the deployment's process count; with the measured co-located share
    `colocated_share`; held to the fastest runs)."""
    runs = _read_csv("tpi_llm_e2e.csv", data_dir)
    links = link_models(stored_fits(data_dir))
    fastest = link_models(fit_all(measurements(data_dir), host(data_dir), "min_s"))
    device = cpu_preset(data_dir)
    rows = []
    for (model, link, processes, prompt_len, n_new), group in runs.groupby(
            ["model", "link_class", "processes", "prompt_len", "n_new"], sort=False):
        if link not in links:
            raise WorkbenchError(f"no fitted link class {link!r} for the end-to-end runs")
        cfg = get_model(model) if model != "tiny-llama" else _tiny()
        pred = predict_generation(cfg, device, links[link], int(processes), int(prompt_len), int(n_new))
        quick = predict_generation(cfg, device, fastest[link], int(processes), int(prompt_len), int(n_new))
        share = colocated_share(int(processes), data_dir)
        prefill, decode = (predict_generation(cfg, device, deployed_link(int(processes), link, phase, data_dir),
                                              int(processes), int(prompt_len), int(n_new), share)
                           for phase in ("prefill", "decode"))
        program = {"ttft_s": prefill["ttft_s"], "per_token_s": decode["per_token_s"]}
        rows.append({"model": model, "link_class": link, "processes": int(processes), "prompt_len": int(prompt_len),
                     "n_new": int(n_new), "repeats": len(group),
                     "tokens_match_reference": bool(group["matches_reference"].all()),
                     "measured_ttft_s": float(group["ttft_s"].median()),
                     "predicted_ttft_s": pred["ttft_s"],
                     "measured_per_token_s": float(group["per_token_s"].median()),
                     "predicted_per_token_s": pred["per_token_s"],
                     "predicted_fastest_ttft_s": quick["ttft_s"], "predicted_fastest_per_token_s": quick["per_token_s"],
                     "measured_fastest_ttft_s": float(group["ttft_s"].min()),
                     "measured_fastest_per_token_s": float(group["per_token_min_s"].median()),
                     "predicted_program_ttft_s": program["ttft_s"],
                     "predicted_program_per_token_s": program["per_token_s"],
                     **{k: v for k, v in pred.items() if k not in ("ttft_s", "per_token_s")}})
    out = pd.DataFrame(rows)
    out["ttft_measured_over_predicted"] = out["measured_ttft_s"] / out["predicted_ttft_s"]
    out["per_token_measured_over_predicted"] = out["measured_per_token_s"] / out["predicted_per_token_s"]
    for key in ("ttft", "per_token"):
        out[f"{key}_program_error"] = out[f"predicted_program_{key}_s"] / out[f"measured_fastest_{key}_s"] - 1
        low = np.minimum(out[f"predicted_{key}_s"], out[f"predicted_fastest_{key}_s"])
        high = np.maximum(out[f"predicted_{key}_s"], out[f"predicted_fastest_{key}_s"])
        out[f"{key}_between_fastest_and_typical"] = (out[f"measured_{key}_s"] >= low) & (out[f"measured_{key}_s"] <= high)
    return out


def _tiny():
    from workbench.measure.cluster.e2e import e2e_model

    return e2e_model("tiny")


def accelerator_table(data_dir: Path = DATA_DIR) -> pd.DataFrame:
    """Per-layer latency of the reference kernels measured on this CPU vs the roofline of the CPU preset,
    and the H100 SXM datasheet preset's roofline for the same layers (a prediction; the lent GPU's own
    rows are `gpu_layer_table`)."""
    measured = _read_csv("layers_cpu.csv", data_dir)
    models = {m: get_model(m) for m in measured["model"].unique()}
    cpu = compare(measured, cpu_preset(data_dir), models)
    h100 = compare(measured.assign(measured_s=np.nan), load_device("h100_sxm"), models)
    cpu["h100_roofline_s"] = h100["predicted_s"].to_numpy()
    cpu["h100_bound"] = h100["bound"].to_numpy()
    return cpu


GPU_DIR = DATA_DIR / "accelerator" / "h100_sxm"
GPU_TOLERANCE = {"decode": 0.20, "prefill": 0.30}  # the fixed-costs issue's targets for the per-layer roofline
SMALL_LAYER_BYTES = 64 * 2**20  # weights per layer under which a layer is made of small kernels (see the note)


def gpu_layer_table(gpu_dir: Path = GPU_DIR) -> pd.DataFrame:
    """The reference block measured on the lent H100 (8 blocks of distinct weights per jitted call, calls
    issued back to back: a layer as it runs inside a model) beside the roofline of the measured preset
    (`h100_sxm_measured`: datasheet peaks and bandwidth, measured efficiencies and per-kernel cost) and of
    the pure datasheet preset, with the kernels the model counts (`gpu_kernel_samples` checks the count
    against compiled blocks)."""
    from workbench.kernels.accelerator import roofline
    from workbench.machine.hardware import BITS

    measured = pd.read_csv(gpu_dir / "layers.csv")
    device, datasheet = load_device("h100_sxm_measured"), load_device("h100_sxm")
    rows = []
    for r in measured.itertuples():
        cfg = get_model(r.model)
        kv = int(r.kv_len) if r.phase == "decode" else None
        table = roofline(cfg, device, r.phase, int(r.seq_len), kv, r.dtype)
        pure = roofline(cfg, datasheet, r.phase, int(r.seq_len), kv, r.dtype)
        predicted = float(table["latency_s"].sum())
        layer_bytes = cfg.block_weight_bytes(BITS[r.dtype])
        rows.append({"model": r.model, "phase": r.phase, "seq_len": int(r.seq_len), "kv_len": int(r.kv_len),
                     "dtype": r.dtype, "layer_weight_mib": layer_bytes / 2**20,
                     "size_class": "small" if layer_bytes < SMALL_LAYER_BYTES else "large",
                     "measured_s": float(r.pipelined_s), "predicted_s": predicted,
                     "datasheet_roofline_s": float(pure["latency_s"].sum()),
                     "measured_over_predicted": float(r.pipelined_s) / predicted,
                     "kernels_model": int(table["kernels"].sum()),
                     "launch_share": float(table["launch_s"].sum()) / predicted,
                     "bound": "memory" if table["memory_s"].sum() > table["compute_s"].sum() else "compute"})
    out = pd.DataFrame(rows)
    out["within_tolerance"] = (out["measured_over_predicted"] - 1).abs() <= out["phase"].map(GPU_TOLERANCE)
    return out


def gpu_kernel_samples(gpu_dir: Path = GPU_DIR) -> pd.DataFrame:
    """Kernels launched by the single reference blocks compiled on the lent H100 (`hlo_samples.tar.gz`,
    counted by `kernel_count`) beside the model's count for the same block."""
    import tarfile

    from workbench.kernels.accelerator import block_operators, kernel_count

    rows = []
    with tarfile.open(gpu_dir / "hlo_samples.tar.gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            model, phase, tokens, dtype = member.name.removesuffix(".hlo").rsplit("_", 3)
            cfg = get_model(model.replace("_", " "))
            tokens = int(tokens)
            ops = block_operators(cfg, phase, tokens if phase == "prefill" else 1, tokens)
            rows.append({"model": cfg.name, "phase": phase, "tokens": tokens, "dtype": dtype,
                         "kernels_compiled": kernel_count(tar.extractfile(member).read().decode()),
                         "kernels_model": sum(o.kernels for o in ops)})
    return pd.DataFrame(rows)


def gpu_layer_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median |measured / predicted - 1| and the share within the issue's tolerance, by phase and size class."""
    rows = []
    for phase in ("prefill", "decode"):
        for size in ("all", "large", "small"):
            part = table[(table.phase == phase) & ((table.size_class == size) | (size == "all"))]
            if not part.empty:
                rows.append(_gpu_summary_row(phase, size, part))
    return pd.DataFrame(rows)


def _gpu_summary_row(phase: str, size: str, part: pd.DataFrame) -> dict:
    """One summary row of `gpu_layer_summary`."""
    return {"phase": phase, "size_class": size, "rows": len(part), "tolerance": GPU_TOLERANCE[phase],
            "median_abs_error": float((part["measured_over_predicted"] - 1).abs().median()),
            "within_tolerance": float(part["within_tolerance"].mean()),
            "median_ratio_datasheet": float((part["measured_s"] / part["datasheet_roofline_s"]).median())}


def _rows(artifact: str, frame: pd.DataFrame, setting: pd.Series, quantities: dict[str, str],
          model: pd.Series | str = "") -> pd.DataFrame:
    parts = []
    for column, unit in quantities.items():
        parts.append(pd.DataFrame({"paper": PAPER, "artifact": artifact, "model": model, "setting": setting,
                                   "quantity": column, "value": frame[column].astype(float), "unit": unit}))
    return pd.concat(parts, ignore_index=True)[RESULT_COLUMNS]


@dataclass(frozen=True)
class ResultTable:
    """How one of the notebook's frames becomes result rows: its artifact, the `label=column` pairs of its setting
    (an empty label writes the value alone), its quantities (column -> unit, or a function of the frame for
    frames whose columns vary) and whether it has a `model` column."""

    artifact: str
    setting: tuple[tuple[str, str], ...]
    quantities: dict[str, str] | Callable[[pd.DataFrame], dict[str, str]]
    has_model: bool = False

    def rows(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The frame's tidy result rows."""
        setting = pd.Series([",".join(f"{label}={value}" if label else str(value) for label, value in
                                      zip([label for label, _ in self.setting], values))
                             for values in zip(*[frame[column] for _, column in self.setting])]
                            if self.setting else ["all validation points"] * len(frame), index=frame.index)
        quantities = self.quantities(frame) if callable(self.quantities) else self.quantities
        return _rows(self.artifact, frame, setting, quantities, frame["model"] if self.has_model else "")


_LINK_POINT = (("link", "link_class"), ("processes", "processes"))
_PROGRAM_POINT = (*_LINK_POINT, ("program", "program"), ("bytes", "message_bytes"))
_ROOFLINE = ("measured_s", "predicted_s")
# The notebook's frames in the order their rows are written (results.csv is compared byte for byte across runs).
RESULT_TABLES = {
    "comparison": ResultTable("collectives measured vs model", _PROGRAM_POINT, {
        "measured_s": "s", "pred_s": "s", "wait_s": "s", "pred_ring_s": "s", "pred_tree_s": "s",
        "pred_star_s": "s", "rel_error": "1"}),
    "fits": ResultTable("link fit", (("link", "link_class"),), {
        "message_overhead_s": "s", "latency_s": "s", "beta_s_per_byte": "s/B", "bandwidth_bytes_per_s": "B/s"}),
    "validation": ResultTable("validation", (), {"median_rel_error": "1", "p90_rel_error": "1", "points": "count"}),
    "star_ring": ResultTable("star vs ring (measured)", (*_LINK_POINT, ("bytes", "message_bytes")), {
        "star_s": "s", "psum_ring_s": "s", "ppermute_ring_s": "s", "star_over_psum_ring": "1",
        "star_over_ppermute_ring": "1"}),
    "e2e": ResultTable("tpi_llm end to end vs arena", (*_LINK_POINT, ("prompt", "prompt_len"), ("new", "n_new")), {
        **dict.fromkeys(("measured_ttft_s", "predicted_ttft_s", "measured_per_token_s", "predicted_per_token_s",
                         "predicted_fastest_ttft_s", "predicted_fastest_per_token_s", "measured_fastest_ttft_s",
                         "measured_fastest_per_token_s", "predicted_program_ttft_s",
                         "predicted_program_per_token_s"), "s"),
        "ttft_program_error": "1", "per_token_program_error": "1"}, has_model=True),
    "accel": ResultTable("per-layer roofline", (("phase", "phase"), ("seq", "seq_len"), ("kv", "kv_len")), {
        **dict.fromkeys(_ROOFLINE, "s"), "h100_roofline_s": "s"}, has_model=True),
    "gpu": ResultTable("per-layer roofline on the lent H100",
                       (("phase", "phase"), ("seq", "seq_len"), ("kv", "kv_len"), ("dtype", "dtype")), {
                           **dict.fromkeys(_ROOFLINE, "s"), "datasheet_roofline_s": "s",
                           "measured_over_predicted": "1", "kernels_model": "count", "launch_share": "1"},
                       has_model=True),
    "gpu_summary": ResultTable("per-layer roofline on the lent H100: summary",
                               (("phase", "phase"), ("size", "size_class")), {
                                   "rows": "count", "median_abs_error": "1", "within_tolerance": "1",
                                   "median_ratio_datasheet": "1"}),
    "gpu_kernels": ResultTable("kernels per compiled block on the lent H100",
                               (("phase", "phase"), ("tokens", "tokens"), ("dtype", "dtype")),
                               {"kernels_compiled": "count", "kernels_model": "count"}, has_model=True),
    "chains": ResultTable("syncs in a running program", (("syncs", "syncs"), *_LINK_POINT,
                                                         ("bytes", "message_bytes"), ("role", "role")),
                          {"per_sync_s": "s", "predicted_s": "s", "error": "1"}),
    "choices": ResultTable("calibration program and statistic",
                           (("calibrate", "calibration_program"), ("statistic", "statistic")),
                           {"message_overhead_us": "us", "median_rel_error": "1", "within_20pct": "1"}),
    "stacks": ResultTable("kernel stacks across processes vs arena",
                          (("scheme", "scheme"), *_LINK_POINT, ("seq", "seq_len")), {
                              "measured_median_s": "s", "predicted_s": "s", "measured_min_s": "s",
                              "predicted_fastest_s": "s"}, has_model=True),
    "latest": ResultTable("collectives fastest call vs model (latest campaign)", (*_PROGRAM_POINT, ("role", "role")),
                          {"reps": "count", "measured_s": "s", "pred_s": "s", "rel_error": "1"}),
    "best_of": ResultTable("fastest of N calls (measured) vs model", _PROGRAM_POINT, lambda frame: {
        **{c: "ms" for c in frame.columns if c.endswith("_ms")}, "campaign_calls": "count",
        **{c: "1" for c in frame.columns if c.endswith("_over_model")}, "campaign_over_fastest": "1"}),
    "before": ResultTable("validation before -> after", (("", "campaign"), ("statistic", "statistic"),
                                                          ("model", "model")),
                          {"median_rel_error": "1", "within_20pct": "1"}),
}


def result_rows(**frames: pd.DataFrame | None) -> pd.DataFrame:
    """Every number the cluster notebook shows, as tidy result rows: each frame given by its `RESULT_TABLES`
    name (`latest`: the newest collective campaign's fastest calls beside the model, `fastest_call_comparison`;
    `best_of`: `best_of_n_table`); a frame given as None, or not given, has no rows."""
    unknown = sorted(set(frames) - set(RESULT_TABLES))
    if unknown:
        raise WorkbenchError(f"result_rows: unknown frame {unknown[0]!r}; known: {', '.join(RESULT_TABLES)}")
    return pd.concat([table.rows(frames[name]) for name, table in RESULT_TABLES.items()
                      if frames.get(name) is not None], ignore_index=True)
