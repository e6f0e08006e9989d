"""`python -m workbench profile [--out FILE.toml] [--quick]`: measure the machine it runs on as a device TOML.

The micro-benchmarks of `workbench.measure.profile.microbench` (the campaign's, with bf16 and int8 GEMMs and numpy's
GEMM added: `PROFILE_PLANS`), then the read rate of a fresh file with the page cache bypassed
(`workbench.measure.profile.storage`), written through the one device builder (`device_toml.write_device_toml`, as
the campaign script writes data/devices/this_machine_cpu.toml). Every number says its kind, the date, the
machine and the method; the instruction-set features are read from /proc/cpuinfo (macOS: sysctl) into the
[meta] `isa`, with an `isa_source` saying where and when (`workbench.measure.profile.isa`). The file is a device preset
a deployment TOML names by path (`preset = "my_machine.toml"`). `--quick` runs in well under 30 s for the tests.

`python -m workbench profile network [--shape RATE]` measures the per-message endpoint time, the wire
latency and the bandwidth of a link class with the cluster launcher (`workbench.measure.profile.network`) and writes
the deployment's `[network]` table.

Arguments are checked in one place (`checked_arguments`) before anything is measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError, require_int

SUMMARY = ("peak_flops_fp32", "peak_flops_bf16", "peak_flops_int8", "mem_DRAM_bandwidth", "memory_efficiency",
           "gemm_half_rows", "core_stream_bandwidth", "small_kernel_bytes", "kernel_launch", "layer_overhead",
           "storage_read_bandwidth")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `python -m workbench profile`."""
    parser.add_argument("what", nargs="?", default="device", choices=("device", "network"),
                        help="device (default): this machine's compute, memory, fixed costs and storage; network: "
                             "a link class through the cluster launcher")
    parser.add_argument("--out", default=None, help="the TOML to write (default: my_device.toml / my_network.toml)")
    parser.add_argument("--quick", action="store_true", help="a short profile (seconds; used by the tests)")
    parser.add_argument("--storage-dir", default=None, help="folder on the disk to test (default: the temp folder)")
    parser.add_argument("--name", default=None, help="the device's name in the TOML (default: the machine)")
    parser.add_argument("--shape", type=float, default=None, metavar="MBIT",
                        help="network: shape the link to MBIT with tc tbf in namespaces (root only)")
    parser.add_argument("--processes", "-n", type=int, default=2,
                        help="network: co-located processes the deployment runs (2-16; the syncs are measured there)")
    parser.add_argument("--engine", default=None, choices=("llama.cpp",),
                        help="device: measure this engine's own kernel rates (MAC/s per format, decode and prefill), "
                             "fixed costs and streaming at --threads, written as measured constants "
                             "(workbench.measure.engines.profile; needs the engines extra)")
    parser.add_argument("--threads", type=int, default=None, help="--engine: threads the engine runs (default: all cores)")
    parser.add_argument("--based-on", default="this_machine_xeon",
                        help="--engine: the preset whose clock, peaks and isa the written TOML keeps")
    parser.add_argument("--phase", default="decoder", choices=("decoder", "decode", "prefill", "single-call"),
                        help="network: the syncs among a TP decoder layer's kernels (default), after one decode "
                             "step's GEMV or one prefill GEMM, inside a running program; or single psum calls")


@dataclass(frozen=True)
class Request:
    """A checked `profile` command: what to measure, where the TOML goes, the storage test's folder."""

    what: str
    out: Path
    quick: bool
    storage_dir: Path


def checked_arguments(args: argparse.Namespace) -> Request:
    """Every argument checked before any measuring: one line naming the bad one."""
    from workbench.core.io import writable_file

    out = Path(args.out or ("my_network.toml" if args.what == "network" else "my_device.toml"))
    writable_file(out, f"--out {str(out)!r}")  # before any measuring: a bad --out must not cost the run
    storage_dir = Path(args.storage_dir or tempfile.gettempdir())
    if args.what == "network":
        if args.shape is not None and not 0 < args.shape <= 1e5:
            raise WorkbenchError(f"--shape must be a rate in Mbit/s in (0, 100000], got {args.shape}")
        require_int("--processes", args.processes, low=2, high=16)
    elif not storage_dir.is_dir():
        raise WorkbenchError(f"--storage-dir {str(storage_dir)!r} is not a folder")
    return Request(args.what, out, bool(args.quick), storage_dir)


def main(args: argparse.Namespace) -> int:
    """Check the arguments, measure, write the TOML atomically, print a short summary; 0 on success."""
    request = checked_arguments(args)
    if request.what == "network":
        return profile_network(request, args.shape, args.processes, None if args.phase == "single-call" else args.phase)
    if args.engine:
        return profile_engine(request, args.threads, args.based_on, args.name)
    return profile_device(request, args.name)


def profile_engine(request: Request, threads: int | None, base: str, name: str | None) -> int:
    """Measure llama.cpp's kernels on this machine and write them into a device TOML based on preset `base`."""
    import os

    from workbench.core.io import write_text_atomic
    from workbench.machine.hardware import load_device
    from workbench.measure.engines.llamacpp import llama_cpp_module
    from workbench.measure.engines.profile import device_toml, measure

    threads = (os.cpu_count() or 1) if threads is None else require_int("--threads", threads, low=1, high=1024)
    load_device(base)  # an unknown base is one line before anything runs
    llama_cpp_module()
    profile = measure(threads, ("f16", "q8_0", "q4_0") if request.quick else None)
    write_text_atomic(request.out, device_toml(profile, base, name or f"llama.cpp on this machine, {threads} thread(s)"))
    for key, rate in sorted(profile.kernel_rates.items()):
        print(f"{key:32s} {rate / 1e9:8.2f} GMAC/s")
    print(f"layer overhead {profile.layer_overhead_s * 1e6:.1f} us, step overhead {profile.step_overhead_s * 1e6:.1f} us, "
          f"stream {profile.stream_bytes_per_s / 1e9:.1f} GB/s\nwrote {request.out}")
    return 0


def profile_network(request: Request, shape: float | None, processes: int, phase: str | None) -> int:
    """Measure a link class and write its `[network]` table and the measured rows."""
    from workbench.core.io import write_csv_atomic, write_text_atomic
    from workbench.measure.profile.network import network_table

    text, rows = network_table(shape, request.quick, processes, phase)
    write_text_atomic(request.out, text)
    write_csv_atomic(request.out.with_suffix(".csv"), rows)
    print(text + f"wrote {request.out} (+ the measured rows in {request.out.with_suffix('.csv')})")
    return 0


def profile_device(request: Request, name: str | None) -> int:
    """Measure this machine, write the device TOML through the one builder and every row beside it."""
    from workbench.core.io import write_csv_atomic
    from workbench.measure.cluster.measure import machine_label
    from workbench.measure.profile.device_toml import profile_provenance, write_device_toml
    from workbench.measure.profile.isa import read_isa
    from workbench.measure.profile.microbench import PROFILE_PLANS

    plan = PROFILE_PLANS["quick" if request.quick else "full"]
    machine, date = machine_label(), dt.date.today().isoformat()
    bench = measure(request, _progress_bar(3))
    isa = read_isa(machine, date)  # recorded beside the rows, as the campaign records its machine and date
    bench = bench.assign(isa=" ".join(isa.features), isa_source=isa.source)
    name = name or f"this machine ({machine})"
    header = (f"{name}: measured by `python -m workbench profile` on {machine}, {date}.\n"
              f"Rates are the best of several interleaved calls, fixed costs the minimum over interleaved batches.")
    constants = write_device_toml(request.out, bench, profile_provenance(machine, date, plan.reps, plan.fixed_rounds),
                                  name, header)
    write_csv_atomic(request.out.with_suffix(".csv"), bench)
    for key in SUMMARY:
        if key in constants:
            print(f"{key:24s} {constants[key].value:.4g} {constants[key].unit}")
    print(f"wrote {request.out} (+ every measured row in {request.out.with_suffix('.csv')})")
    return 0


def measure(request: Request, progress=None) -> pd.DataFrame:
    """Every benchmark's row: the micro-benchmarks of the full or quick plan, then the storage read."""
    from workbench.measure.profile.microbench import PROFILE_PLANS, run_microbenchmarks
    from workbench.measure.profile.storage import STORAGE_MIB, storage_row

    mode = "quick" if request.quick else "full"
    if progress:
        progress("micro-benchmarks")
    bench = run_microbenchmarks(PROFILE_PLANS[mode])
    if progress:
        progress("storage")
    bench = pd.concat([bench, pd.DataFrame([storage_row(STORAGE_MIB[mode], request.storage_dir)])], ignore_index=True)
    if progress:
        progress("done")
    return bench


def _progress_bar(total: int):
    """A tqdm bar on stderr advanced once per measured step."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc="profile", unit="step", leave=False)

    def step(label: str) -> None:
        bar.set_postfix_str(label)
        bar.update(1)
        if bar.n >= total:
            bar.close()
    return step
