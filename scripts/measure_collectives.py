#!/usr/bin/env python3
"""Re-measure this machine and rewrite data/cluster/ (+ the fitted constants and the CPU preset).

    .venv/bin/python scripts/measure_collectives.py                  # everything (about an hour; the collectives alone ~27 min)
    .venv/bin/python scripts/measure_collectives.py --only micro     # fixed costs + rates, about half a minute
    .venv/bin/python scripts/measure_collectives.py --only micro e2e # some parts
    .venv/bin/python scripts/measure_collectives.py --only preset    # the CPU preset from the stored table
    .venv/bin/python scripts/measure_collectives.py --quick          # a tiny campaign into /tmp (smoke test)

Parts: micro (CPU micro-benchmark -> data/cluster/microbench.csv -> data/devices/this_machine_cpu.toml), preset
(only rebuild data/devices/this_machine_cpu.toml from the stored microbench.csv, no measuring), colocated (1, 2 and 4 plain
processes running TinyLlama-42M's decode layers and GEMV chains at once -> data/cluster/colocated.csv: each
process's share of the machine), collectives (psum /
all_gather / psum_scatter / star / ppermute ring and tree on 2-8 processes, loopback and tbf-shaped
when root -> data/cluster/collectives.csv, then the fit), fit (only refit o / L / beta from the stored
CSV -> data/constants/cluster.toml), chains (1, 8 and 32 star all-reduces in one program on 2 and 4
processes, bare, each after a small GEMM and each after a GEMV streaming its own matrix, and the GEMMs and
GEMVs alone -> data/cluster/sync_chain.csv: the per-sync time inside a running program), e2e (TPI-LLM on 4 processes, loopback and 100 Mbit when root
-> data/cluster/tpi_llm_e2e.csv), layers (reference blocks on this CPU ->
data/cluster/layers_cpu.csv), stacks (Galaxy's partitioned stack and the MCU head-wise stack across 2 and 4
processes -> data/cluster/stacks.csv), bestofn (every collective program at 32 B on 8 loopback processes, 3000
calls each -> best_of_n.csv: the fastest of the first N calls; only with --only, about 10 minutes). The notebook only reads these files; nothing in CI re-measures.
The machine is shared: results carry the date, the machine and the load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.core.io import DATA_DIR, write_csv_atomic, write_text_atomic  # noqa: E402

PARTS = ("micro", "preset", "colocated", "collectives", "fit", "chains", "e2e", "layers", "stacks", "bestofn")
BEST_OF_N_PROCESSES, BEST_OF_N_BYTES = 8, 32  # the oversubscribed small-message corner (4 per core)
E2E_RUNS = (  # (model, prompt_len, n_new, repeats); 3 repeats until the second campaign of 2026-11-24
    ("tiny", 8, 8, 8),
    ("TinyLlama-42M", 32, 8, 8),
)
E2E_SHAPED_MBIT = (100.0,)  # shaped links of the end-to-end runs (root only; loopback always)
# 4 processes: TPI-LLM's setting; 2: one process per core on this 2-core machine (no oversubscription)
E2E_PROCESSES = (4, 2)
LAYER_POINTS = (  # (model, phase, seq_len, kv_len)
    ("TinyLlama-42M", "prefill", 128, 128), ("TinyLlama-42M", "decode", 1, 128),
    ("Llama 2-7B", "prefill", 32, 32), ("Llama 2-7B", "decode", 1, 128),
    ("BERT-base", "prefill", 128, 128), ("OPT-L", "decode", 1, 128),
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_for_quiet(max_load: float | None, max_wait_s: float) -> None:
    """Wait (bounded) until the 1-minute load average is below `max_load`; the machine is shared."""
    if max_load is None:
        return
    deadline = time.time() + max_wait_s
    while os.getloadavg()[0] > max_load and time.time() < deadline:
        time.sleep(10)
    log(f"load average {os.getloadavg()[0]:.1f} (asked for < {max_load:g})")


def measure_micro(out: Path, machine: str, date: str) -> None:
    """The campaign's micro-benchmarks -> data/cluster/microbench.csv, then the CPU preset from them."""
    from workbench.measure.profile.isa import read_isa
    from workbench.measure.profile.microbench import CAMPAIGN, run_microbenchmarks

    bench = run_microbenchmarks(CAMPAIGN)
    bench.insert(0, "date", date)
    bench["machine"] = machine
    isa = read_isa(machine, date)  # the preset's [meta] isa (device_toml.table_isa)
    bench["isa"], bench["isa_source"] = " ".join(isa.features), isa.source
    write_csv_atomic(out / "cluster" / "microbench.csv", bench)
    build_preset(out)
    log(f"micro: {bench[['benchmark', 'size', 'rate']].to_string(index=False)}")


def build_preset(out: Path) -> None:
    """data/devices/this_machine_cpu.toml from the stored data/cluster/microbench.csv (no measuring), through
    the one device builder `python -m workbench profile` writes with (`device_toml.write_device_toml`)."""
    from workbench.measure.profile.device_toml import write_this_machine_cpu

    bench = pd.read_csv(out / "cluster" / "microbench.csv")
    write_this_machine_cpu(out / "devices" / "this_machine_cpu.toml", bench, "data/cluster/microbench.csv")


def measure_colocated(out: Path, quick: bool, machine: str, date: str) -> None:
    """1, 2 and 4 plain processes running the same programs at once (`colocated.run_colocated`)."""
    from workbench.measure.profile.colocated import colocated_shares, run_colocated

    table = run_colocated((1, 2) if quick else (1, 2, 4), reps=3 if quick else 15)
    table.insert(0, "date", date)
    table.insert(1, "machine", machine)
    table["load_1min"] = os.getloadavg()[0]
    write_csv_atomic(out / "cluster" / "colocated.csv", table)
    log(f"colocated:\n{colocated_shares(table).to_string(index=False)}")


def measure_collectives(out: Path, quick: bool, machine: str, date: str, skip_existing: bool = False,
                        max_load: float | None = None, max_wait_s: float = 300, protocol: str = "osu") -> None:
    from workbench.measure.cluster.measure import (
        PROTOCOLS,
        SUMMARY_COLUMNS,
        RepetitionProtocol,
        default_campaign,
        run_point,
    )

    reps = RepetitionProtocol("quick", 0.5, 5, 25, 25) if quick else PROTOCOLS[protocol]

    path = out / "cluster" / "collectives.csv"
    done = pd.read_csv(path) if path.exists() and not quick else pd.DataFrame(columns=SUMMARY_COLUMNS)
    fresh = []
    for point in default_campaign(quick):
        link = point.shape.link_class if point.shape else "loopback"
        if skip_existing and ((done.link_class == link) & (done.processes == point.processes)).any():
            log(f"collectives: {point.processes} processes, {link}: already measured, skipped")
            continue
        wait_for_quiet(max_load, max_wait_s)
        log(f"collectives: {point.processes} processes, rate {point.rate_mbit or 'loopback'}, "
            f"{len(point.sizes)} sizes")
        summary, note = run_point(point, announce=log, protocol=reps)
        if note:
            log(note)
        fresh.append(summary)
        keys = set(zip(summary.link_class, summary.processes))
        keep = done[[k not in keys for k in zip(done.link_class, done.processes)]]
        done = pd.concat([keep] + [summary], ignore_index=True)
        done = done.sort_values(["link_class", "processes", "program", "message_bytes"], kind="stable")
        write_csv_atomic(path, done[SUMMARY_COLUMNS])  # after every point: a crash loses one point only
    fit_collectives(out, machine, date)


def fit_collectives(out: Path, machine: str, date: str) -> None:
    """Fit o, L and beta per link class on the stored CSV and rewrite data/constants/cluster.toml (with the
    scheduler tick read from this kernel)."""
    import tomllib

    from workbench.core.constants import constants_toml
    from workbench.machine.hardware import device_from_table
    from workbench.measure.cluster.fit import fit_all, fit_constants
    from workbench.measure.cluster.host import fresh_page_constant, host_model, tick_constant

    done = pd.read_csv(out / "cluster" / "collectives.csv")
    measured_on = ", ".join(sorted(set(done["date"].astype(str))))
    with open(out / "devices" / "this_machine_cpu.toml", "rb") as f:
        device = device_from_table(tomllib.load(f), "this_machine_cpu.toml")
    tick = tick_constant(date, machine)
    fresh = fresh_page_constant(date, machine)
    fits = fit_all(done, host_model(device, {"scheduler_tick": tick, "fresh_page": fresh}))
    header = ("Per-message endpoint software time (o), wire latency (L) and per-byte cost (beta) per link class,\n"
              f"fitted by workbench.measure.cluster.fit on the 2-process psum of {_shown(out / 'cluster' / 'collectives.csv')}, the\n"
              "kernel's scheduler tick (for the oversubscription wait; not fitted) and the cost of a fresh page\n"
              "(buffers above malloc's mmap threshold, allocated per call; measured, not fitted).\n"
              "Calibration on this machine only (shared, 2 cores): not a property of any paper's hardware.")
    consts = fit_constants(fits, _shown(out / "cluster" / "collectives.csv"), machine, measured_on)
    consts["scheduler_tick"] = tick
    consts["fresh_page"] = fresh
    write_text_atomic(out / "constants" / "cluster.toml", constants_toml(consts, header))
    log(f"fit:\n{fits.to_string(index=False)}")


def _links(quick: bool) -> list:
    """Loopback (None), then a `LinkShape` for each rate of E2E_SHAPED_MBIT when this user may shape links
    (root; not in a --quick or --loopback-only run)."""
    from workbench.measure.cluster.netns import LinkShape, shaping_unavailable

    shaped = [] if quick or not E2E_SHAPED_MBIT or shaping_unavailable() else list(E2E_SHAPED_MBIT)
    return [None] + [LinkShape(rate) for rate in shaped]


def _shown(path: Path) -> str:
    """`path` as the repository names it (data/...), or as given when it lies elsewhere."""
    root = DATA_DIR.parent
    return str(path.resolve().relative_to(root)) if path.resolve().is_relative_to(root) else str(path)


def measure_e2e(out: Path, quick: bool, machine: str, date: str) -> None:
    from workbench.measure.cluster.launcher import ClusterSpec, launch

    rows = []
    links = _links(quick)
    for processes, shape in [(p, shape) for p in E2E_PROCESSES for shape in links]:
        for model, prompt_len, n_new, repeats in (E2E_RUNS[:1] if quick else E2E_RUNS):
            params = {"model": model, "prompt_len": prompt_len, "n_new": n_new, "repeats": repeats}
            run = launch(ClusterSpec(processes, "tpi_llm", params, shape=shape, timeout_s=1800), announce=log)
            master = run.rows[run.rows.process == 0]
            fastest = _fastest_steps(run.rows)
            for r in master.itertuples():
                rows.append({"date": date, "machine": machine, "link_class": run.link_class, "processes": processes,
                             "model": r.model, "allreduce": r.allreduce, "prompt_len": r.prompt_len,
                             "n_new": r.n_new, "repeat": r.repeat, "ttft_s": r.ttft_s, "per_token_s": r.per_token_s,
                             "per_token_min_s": fastest[r.repeat],
                             "tokens": " ".join(map(str, r.tokens)), "matches_reference": bool(r.matches_reference),
                             "load_1min": os.getloadavg()[0]})
            log(f"e2e {model} ({processes} processes, {run.link_class}): ttft {master.ttft_s.median():.4f} s, per token "
                f"{master.per_token_s.median():.4f} s, matches reference: {bool(master.matches_reference.all())}")
    write_csv_atomic(out / "cluster" / "tpi_llm_e2e.csv", pd.DataFrame(rows))


def _fastest_steps(rows: pd.DataFrame) -> dict[int, float]:
    """Per repeat, the fastest decode step (a step ends when its slowest process is done): the time without
    the scheduler's waits, the statistic the collectives' `min_s` is (see workbench.measure.cluster.fit)."""
    import numpy as np

    out = {}
    for repeat, group in rows.groupby("repeat"):
        steps = np.max(np.stack([np.asarray(t, float) for t in group["step_times_s"]]), axis=0)
        out[repeat] = float(steps[1:].min()) if steps.size > 1 else float("nan")
    return out


CHAIN_SIZES = (2048, 65536)  # a decode step's hidden state of TinyLlama-42M (512 fp32), and 32 tokens of it
CHAIN_LENGTHS = (1, 8, 32)
DECODER_TOKENS = (1, 32)  # the decoder chains' tokens per step: a decode step and a 32-token prefill
DECODER_LENGTHS = (1, 4, 16)  # decoder layers per chain


def measure_chains(out: Path, quick: bool, machine: str, date: str) -> None:
    """K star all-reduces in one program (`sync_chain`): per call the slowest process, then min / median / mean."""
    from workbench.measure.cluster.launcher import ClusterSpec, launch
    from workbench.measure.cluster.measure import chain_summary

    rows = []
    links = _links(quick)
    for processes, shape in [(p, shape) for p in E2E_PROCESSES for shape in links]:
        params = {"programs": ["star", "star_after_gemm", "gemm_only", "star_after_stream", "stream_only",
                               "star_in_decoder", "decoder_only"],
                  "sizes": list(CHAIN_SIZES[:1] if quick else CHAIN_SIZES),
                  "lengths": list(CHAIN_LENGTHS), "reps": 3 if quick else 15,
                  "decoder_tokens": list(DECODER_TOKENS[:1] if quick else DECODER_TOKENS),
                  "decoder_lengths": list(DECODER_LENGTHS)}
        run = launch(ClusterSpec(processes, "sync_chain", params, shape=shape, timeout_s=1800), announce=log)
        rows += chain_summary(run, processes, date, machine).to_dict("records")
        log(f"chains ({processes} processes, {run.link_class}): {len(rows)} rows")
    write_csv_atomic(out / "cluster" / "sync_chain.csv", pd.DataFrame(rows))


STACK_RUNS = (  # (experiment, parameters): one prefill of one block, as the arena's scheme costs it
    ("galaxy_stack", {"scheme": "galaxy_hmp", "model": "BERT-base", "seq_len": 128}),
    ("galaxy_stack", {"scheme": "megatron_tp", "model": "BERT-base", "seq_len": 128}),
    ("galaxy_stack", {"scheme": "sp", "model": "BERT-base", "seq_len": 128}),
    ("mcu_stack", {"model": "TinyLlama-42M", "seq_len": 16}),
)
STACK_REPS = 15


def measure_bestofn(out: Path, quick: bool, machine: str, date: str) -> None:
    """The fastest of the first N calls (N up to 3000) of every program at 32 B on 8 loopback processes."""
    from workbench.measure.cluster.launcher import ClusterSpec, launch
    from workbench.measure.cluster.measure import BEST_OF_N_CALLS, best_of_n
    from workbench.measure.cluster.programs import PROGRAMS

    calls = (5, 25) if quick else BEST_OF_N_CALLS
    processes = 2 if quick else BEST_OF_N_PROCESSES
    programs = list(PROGRAMS)
    params = {"programs": programs, "sizes": [BEST_OF_N_BYTES], "min_reps": max(calls), "max_reps": max(calls),
              "target_seconds": 1.0, "rounds": 1}
    run = launch(ClusterSpec(processes, "collectives", params, timeout_s=3600), announce=log)
    table = best_of_n(run.rows, run.link_class, processes, calls, date, machine)
    path = write_csv_atomic(out / "cluster" / "best_of_n.csv", table)
    log(f"bestofn: {len(table)} rows -> {_shown(path)}")


def measure_stacks(out: Path, quick: bool, machine: str, date: str) -> None:
    """Other papers' kernels across processes: per call the slowest process, then min / median / mean."""
    import numpy as np

    from workbench.measure.cluster.launcher import ClusterSpec, launch

    rows = []
    links = _links(quick)
    for processes, shape in [(p, shape) for p in E2E_PROCESSES for shape in links]:
        for experiment, params in (STACK_RUNS[:1] if quick else STACK_RUNS):
            params = {**params, "n_layers": 1, "reps": 3 if quick else STACK_REPS}
            run = launch(ClusterSpec(processes, experiment, params, shape=shape, timeout_s=1800), announce=log)
            per_call = np.max(np.stack([np.asarray(t, float) for t in run.rows["times_s"]]), axis=0)
            first = run.rows.iloc[0]
            rows.append({"date": date, "machine": machine, "link_class": run.link_class, "processes": processes,
                         "kernel": first["kernel"], "scheme": first["scheme"], "model": first["model"],
                         "n_layers": int(first["n_layers"]), "seq_len": int(first["seq_len"]), "reps": len(per_call),
                         "min_s": float(per_call.min()), "median_s": float(np.median(per_call)),
                         "mean_s": float(per_call.mean()), "matches_reference": bool(run.rows["matches_reference"].all()),
                         "max_abs_error": float(run.rows["max_abs_error"].max()), "load_1min": os.getloadavg()[0]})
            log(f"stack {first['scheme']} ({processes} processes, {run.link_class}): min {per_call.min() * 1e3:.2f} ms, "
                f"median {np.median(per_call) * 1e3:.2f} ms, matches reference: {rows[-1]['matches_reference']}")
    write_csv_atomic(out / "cluster" / "stacks.csv", pd.DataFrame(rows))


def measure_layers(out: Path, quick: bool, machine: str, date: str) -> None:
    from workbench.kernels.accelerator import measure_layer_latency
    from workbench.model.models import get_model

    rows = []
    for model, phase, seq_len, kv_len in (LAYER_POINTS[:2] if quick else LAYER_POINTS):
        r = measure_layer_latency(get_model(model), phase, seq_len, kv_len, reps=10)
        rows.append({"date": date, "machine": machine, **r, "load_1min": os.getloadavg()[0]})
        log(f"layer {model} {phase}: {r['measured_s'] * 1e3:.2f} ms")
    write_csv_atomic(out / "cluster" / "layers_cpu.csv", pd.DataFrame(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=PARTS, default=[p for p in PARTS if p != "bestofn"])
    parser.add_argument("--quick", action="store_true", help="tiny campaign written under /tmp, not data/")
    parser.add_argument("--skip-existing", action="store_true",
                        help="collectives: keep (link class, processes) points already in the CSV")
    parser.add_argument("--max-load", type=float, default=None,
                        help="before each part / collectives point wait until the 1-min load average is below this")
    parser.add_argument("--max-wait", type=float, default=5.0, help="minutes to wait for --max-load per point")
    parser.add_argument("--protocol", choices=("osu", "osu_full", "legacy"), default="osu",
                        help="collectives: OSU's repetitions (1000 calls <= 8 KiB, 100 above, ~3 s cap; since "
                             "2026-11-25), the same without the cap (osu_full, ~70 min) or the earlier 5-25 calls "
                             "in ~1 s")
    parser.add_argument("--loopback-only", action="store_true",
                        help="chains, e2e, stacks: loopback links only (no 100 Mbit shaping)")
    parser.add_argument("--out", default=None, help="data directory to write (default data/, --quick: a temp dir)")
    args = parser.parse_args(argv)
    if args.loopback_only:
        globals()["E2E_SHAPED_MBIT"] = ()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from workbench.measure.cluster.measure import machine_label

    out = Path(args.out) if args.out else (Path("/tmp/wb-measure-quick") if args.quick else DATA_DIR)
    machine, date = machine_label(), dt.date.today().isoformat()
    started = time.time()
    runs = {}
    for part in PARTS:
        if part in args.only:
            log(f"part {part} ...")
            if part in ("micro", "colocated", "chains", "e2e", "layers", "stacks", "bestofn"):
                wait_for_quiet(args.max_load, args.max_wait * 60)
            part_start, load_before = time.time(), os.getloadavg()
            if part == "micro":
                measure_micro(out, machine, date)
            elif part == "collectives":
                measure_collectives(out, args.quick, machine, date, args.skip_existing, args.max_load,
                                    args.max_wait * 60, args.protocol)
            elif part == "fit":
                if "collectives" not in args.only:  # (collectives refits by itself)
                    fit_collectives(out, machine, date)
                continue
            elif part == "preset":
                if "micro" not in args.only:  # (micro rebuilds it by itself)
                    build_preset(out)
                continue
            else:
                globals()[f"measure_{part}"](out, args.quick, machine, date)
            runs[part] = {"date": date, "load_avg_before": [round(v, 2) for v in load_before],
                          "load_avg_after": [round(v, 2) for v in os.getloadavg()],
                          "minutes": round((time.time() - part_start) / 60, 1)}
    meta_path = out / "cluster" / "machine.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    import jax

    meta.update({"machine": machine, "python": platform.python_version(), "jax": jax.__version__,
                 "kernel": platform.release(), "cpu_count": os.cpu_count()})
    meta.setdefault("runs", {}).update(runs)
    meta["caveat"] = ("2 cores shared with other users while measuring; medians of bounded repetitions; with more "
                      "processes than cores the OS scheduler adds latency that no network model contains")
    write_text_atomic(meta_path, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    log(f"done in {(time.time() - started) / 60:.1f} min -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
