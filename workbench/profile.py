"""`python -m workbench profile [--out FILE.toml] [--quick]`: measure the machine it runs on as a device TOML.

Matmul throughput across sizes and dtypes (GEMM and GEMV; fp32, bf16 and int8 where the backend runs
them) through JAX/XLA and numpy, the memory bandwidth and its efficiency for a GEMV, the streaming rate of
GEMV chains across matrix sizes (small kernels the runtime does not split across the cores stream at one
core's rate: core_stream_bandwidth below small_kernel_bytes), skinny GEMMs of M rows through a chain of
distinct matrices (the rows at which a GEMM runs at half the peak: gemm_half_rows), the fixed costs
(per-kernel launch inside a compiled program, per layer, per call; `workbench.cluster.microbench`), and
the read rate of a fresh file with the page cache bypassed (O_DIRECT where the OS allows it, else
POSIX_FADV_DONTNEED). Every number is written with kind = "measured", the date, the machine and the
method; the file is a device preset a deployment TOML names by path (`preset = "my_machine.toml"`).
Rates are the best of several interleaved calls (a shared machine's bursts cost one call, not the
result); `--quick` runs in well under 30 s for the tests.

`python -m workbench profile network [--shape RATE]` measures the per-message endpoint time, the wire
latency and the bandwidth of a link class with the cluster launcher (2-process psum over loopback, or
through tbf-shaped namespaces as root) and writes the deployment's `[network]` table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import mmap
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.constants import Constant
from workbench.errors import WorkbenchError, require_choice, require_int

DTYPES = ("fp32", "bf16", "int8")
SIZES = {"full": (256, 512, 1024, 2048), "quick": (128, 256, 512)}
# GEMV chain sweep (small-kernel streaming): n x n fp32 matrices, 0.25 to 16 MiB each (1 and 16 MiB quick)
SWEEP_SIZES = {"full": (362, 512, 1024, 2048), "quick": (512, 2048)}
# Skinny GEMMs (gemm_half_rows): M rows through a chain of distinct 1024 x 1024 fp32 matrices
GEMM_ROWS = {"full": (32, 128, 512), "quick": (32, 512)}
STORAGE_MIB = {"full": 512, "quick": 32}
BLOCK = 1 << 20  # read size for the storage test (1 MiB, a multiple of any sector size)


@dataclass(frozen=True)
class Settings:
    """How much to measure: matmul sizes, repetitions, the storage file's size and where it lives."""

    sizes: tuple[int, ...]
    reps: int
    storage_mib: int
    storage_dir: Path
    sweep_sizes: tuple[int, ...] = SWEEP_SIZES["quick"]
    gemm_rows: tuple[int, ...] = GEMM_ROWS["quick"]

    def __post_init__(self) -> None:
        require_int("reps", self.reps, low=1)
        require_int("storage_mib", self.storage_mib, low=1, high=1 << 16)
        if not self.sizes or any(int(n) < 8 for n in self.sizes):
            raise WorkbenchError(f"sizes must be matrix sizes >= 8, got {self.sizes}")
        if any(int(n) < 8 for n in self.sweep_sizes):
            raise WorkbenchError(f"sweep_sizes must be matrix sizes >= 8, got {self.sweep_sizes}")
        if any(int(m) < 1 for m in self.gemm_rows):
            raise WorkbenchError(f"gemm_rows must be row counts >= 1, got {self.gemm_rows}")
        if not Path(self.storage_dir).is_dir():
            raise WorkbenchError(f"--storage-dir {str(self.storage_dir)!r} is not a folder")


def settings(quick: bool, storage_dir: str | Path | None = None) -> Settings:
    """The full or the quick profile (a few seconds of matmuls, a 32 MiB file)."""
    mode = "quick" if quick else "full"
    return Settings(SIZES[mode], 3 if quick else 10, STORAGE_MIB[mode], Path(storage_dir or tempfile.gettempdir()),
                    SWEEP_SIZES[mode], GEMM_ROWS[mode])


def machine_label() -> str:
    """'2 cores, <CPU model>, <OS release>': what every measured constant says it was measured on."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, {platform.system()} {platform.release()}"


# ---- matmuls ------------------------------------------------------------------------------------
def _best(fn, reps: int) -> float:
    """Smallest seconds of `reps` calls of `fn` (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _jax_operands(dtype: str, n: int, gemv: bool):
    import jax.numpy as jnp

    kind = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "int8": jnp.int8}[dtype]
    a = jnp.ones((n, n), kind)
    b = jnp.ones((n,) if gemv else (n, n), kind)
    return a, b


def matmul_rows(s: Settings, progress=None) -> list[dict]:
    """Best rate of a jitted GEMM / GEMV per dtype and size (int8 accumulates in int32), and numpy's fp32."""
    import jax
    import jax.numpy as jnp

    rows = []
    for dtype in DTYPES:
        out = jnp.int32 if dtype == "int8" else None
        fn = jax.jit(lambda a, b, out=out: jnp.matmul(a, b, preferred_element_type=out))
        for n in s.sizes:
            for shape in ("gemm", "gemv"):
                try:
                    a, b = _jax_operands(dtype, n, shape == "gemv")
                    seconds = _best(lambda a=a, b=b, fn=fn: fn(a, b).block_until_ready(), s.reps)
                except Exception as exc:  # noqa: BLE001 - a backend without this dtype: say so in the table
                    rows.append({"benchmark": f"jax_{shape}_{dtype}", "size": n, "seconds": np.nan, "rate": np.nan,
                                 "note": f"not run: {type(exc).__name__}"})
                    continue
                flops = 2.0 * n**3 if shape == "gemm" else 2.0 * n**2
                rows.append({"benchmark": f"jax_{shape}_{dtype}", "size": n, "seconds": seconds,
                             "rate": flops / seconds, "note": ""})
            if progress:
                progress(f"{dtype} n={n}")
    for n in s.sizes:
        a = np.ones((n, n), np.float32)
        seconds = _best(lambda a=a: a @ a, s.reps)
        rows.append({"benchmark": "numpy_gemm_fp32", "size": n, "seconds": seconds, "rate": 2.0 * n**3 / seconds,
                     "note": ""})
    return rows


# ---- memory, fixed costs --------------------------------------------------------------------------
def memory_rows(s: Settings) -> list[dict]:
    """Best read-only streaming rate (a jitted sum), a GEMV's rate over a matrix larger than the caches, and a
    chain of distinct GEMVs as a layer streams them (`microbench.gemv_chain_calls`; memory_efficiency)."""
    import jax
    import jax.numpy as jnp

    from workbench.cluster.microbench import GEMV_CHAIN_LENGTHS, GEMV_CHAIN_N, gemv_chain_calls

    mib = 64 if s.reps <= 3 else 256
    v = jnp.ones((mib * 2**20 // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    read = _best(lambda: total(v).block_until_ready(), s.reps)
    n = int(np.sqrt(mib * 2**20 // 4))
    a, x = jnp.ones((n, n), jnp.float32), jnp.ones((n,), jnp.float32)
    gemv = jax.jit(lambda a, x: a @ x)
    seconds = _best(lambda: gemv(a, x).block_until_ready(), s.reps)
    chain_n, lengths = (1024, (2, 4, 8)) if s.reps <= 3 else (GEMV_CHAIN_N, GEMV_CHAIN_LENGTHS)
    chain = [{"benchmark": "gemv_chain_fp32", "size": k, "seconds": t, "rate": 4.0 * k * chain_n**2 / t,
              "note": f"{k} distinct {chain_n}x{chain_n} fp32 GEMVs in one program"}
             for (_, k), fn in gemv_chain_calls(chain_n, lengths).items() for t in [_best(fn, s.reps)]]
    return [{"benchmark": "stream_read_fp32", "size": v.size, "seconds": read, "rate": v.size * 4 / read, "note": ""},
            {"benchmark": "gemv_stream_fp32", "size": n, "seconds": seconds, "rate": 4.0 * n * n / seconds,
             "note": ""}] + chain


def sweep_rows(s: Settings) -> list[dict]:
    """Per-GEMV streaming rate of chains of distinct n x n fp32 matrices at each sweep size (the slope between
    two chain lengths past the cache; `microbench.gemv_size_calls`), the calls of all sizes interleaved: a
    kernel too small for the runtime to split across the cores streams at one core's rate."""
    from workbench.cluster.microbench import _interleaved_min, gemv_size_calls, gemv_size_rows

    if not s.sweep_sizes:
        return []
    best = _interleaved_min(gemv_size_calls(s.sweep_sizes), calls=1, rounds=s.reps)
    return [{k: v for k, v in row.items() if k != "unit"} for row in gemv_size_rows(best)]


def gemm_rows_rows(s: Settings) -> list[dict]:
    """Rate of one jitted chain of distinct (M x K) @ (K x K) fp32 GEMMs at each M of `s.gemm_rows`, the calls
    of all M interleaved (`microbench.gemm_rows_calls`): a prompt of M tokens runs its weight GEMMs so."""
    from workbench.cluster.microbench import (
        GEMM_ROWS_CHAIN,
        GEMM_ROWS_N,
        _interleaved_min,
        gemm_rows_calls,
        gemm_rows_flops,
    )

    if not s.gemm_rows:
        return []
    best = _interleaved_min(gemm_rows_calls(s.gemm_rows), calls=1, rounds=s.reps)
    note = f"{GEMM_ROWS_CHAIN} dependent (M x {GEMM_ROWS_N}) @ ({GEMM_ROWS_N} x {GEMM_ROWS_N}) fp32 GEMMs in one program"
    return [{"benchmark": bench, "size": m, "seconds": t, "rate": gemm_rows_flops(m) / t, "note": note}
            for (bench, m), t in best.items()]


def fixed_rows(quick: bool) -> list[dict]:
    """The fixed costs of `workbench.cluster.microbench` (launch, per layer, dispatch, numpy op)."""
    from workbench.cluster.microbench import run_fixed_cost_benchmarks

    if quick:  # fewer, shorter programs to compile: two points per line
        frame = run_fixed_cost_benchmarks(calls=10, rounds=5, chain_lengths=(1, 16), layer_counts=(1, 2))
    else:
        frame = run_fixed_cost_benchmarks()
    return [dict(r, note="") for r in frame.to_dict("records")]


# ---- storage ----------------------------------------------------------------------------------------
def storage_row(s: Settings) -> dict:
    """Read rate of a fresh file written for the test, bypassing the page cache: O_DIRECT where the file
    system allows it, else the pages dropped with POSIX_FADV_DONTNEED before reading."""
    fd, name = tempfile.mkstemp(prefix="workbench-profile-", dir=s.storage_dir)
    path = Path(name)
    try:
        chunk = os.urandom(BLOCK)
        with os.fdopen(fd, "wb") as f:
            for _ in range(s.storage_mib):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        seconds, method = _read_direct(path)
        return {"benchmark": "storage_read", "size": s.storage_mib * BLOCK, "seconds": seconds,
                "rate": s.storage_mib * BLOCK / seconds, "note": method}
    finally:
        path.unlink(missing_ok=True)


def _read_direct(path: Path) -> tuple[float, str]:
    """Seconds to read `path` once and the method that kept the page cache out."""
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        method = "O_DIRECT read of a fresh file"
    except OSError:
        fd, method = None, ""
    if fd is None or not hasattr(os, "O_DIRECT"):
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            method = "read after POSIX_FADV_DONTNEED of a fresh, fsynced file"
        else:
            method = "plain read of a fresh, fsynced file (the page cache may serve it: an upper bound)"
    try:
        start = time.perf_counter()
        try:
            while os.readv(fd, [buf]) > 0:
                pass
        except OSError:  # the file system refused O_DIRECT after all
            os.close(fd)
            fd = os.open(path, os.O_RDONLY)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            method = "read after POSIX_FADV_DONTNEED of a fresh, fsynced file (O_DIRECT refused)"
            start = time.perf_counter()
            while os.readv(fd, [buf]) > 0:
                pass
        return time.perf_counter() - start, method
    finally:
        os.close(fd)
        buf.close()


# ---- the device TOML ----------------------------------------------------------------------------------
def measure(s: Settings, quick: bool, progress=None) -> pd.DataFrame:
    """Every benchmark's row: matmuls, memory, fixed costs and storage."""
    rows = matmul_rows(s, progress)
    rows += memory_rows(s)
    rows += sweep_rows(s)
    rows += gemm_rows_rows(s)
    if progress:
        progress("memory")
    rows += fixed_rows(quick)
    if progress:
        progress("fixed costs")
    rows.append(storage_row(s))
    if progress:
        progress("storage")
    return pd.DataFrame(rows)


def device_constants(bench: pd.DataFrame, machine: str, date: str) -> dict[str, Constant]:
    """The preset's constants from the benchmark rows, each measured, dated and saying how."""
    from workbench.cluster.microbench import (
        GEMM_ROWS_FLAT,
        GEMV_SWEEP_BYTES,
        chain_stream_rate,
        fixed_costs,
        gemm_half_rows,
        gemm_rows_text,
        memory_total_bytes,
        small_kernel_stream,
    )

    where = f"python -m workbench profile on {machine}, {date}"
    out: dict[str, Constant] = {}
    for dtype in DTYPES:
        gemm = bench[(bench.benchmark == f"jax_gemm_{dtype}") & bench.rate.notna()]
        if gemm.empty:
            continue
        best = gemm.loc[gemm.rate.idxmax()]
        out[f"peak_flops_{dtype}"] = Constant(
            f"peak_flops_{dtype}", float(best.rate), "op/s" if dtype == "int8" else "FLOP/s", "measured",
            f"{where}: best jitted {dtype} GEMM (n={int(best['size'])}, best of the calls)")
    if "peak_flops_fp32" not in out:
        raise WorkbenchError("profile: no fp32 GEMM ran on this backend; nothing to build a device from")
    read = bench[bench.benchmark == "stream_read_fp32"].rate.max()
    chain = chain_stream_rate(bench)
    fixed = fixed_costs(bench)
    storage = bench[bench.benchmark == "storage_read"].iloc[0]
    efficiency = float(min(chain / read, 1.0))
    sweep = bench[bench.benchmark == "gemv_size_fp32"]
    core_rate, split = small_kernel_stream(bench, float(read) * efficiency)
    rates = ", ".join(f"{b / 2**20:g} MiB {r / 1e9:.1f} GB/s" for b, r in zip(sweep["size"], sweep.rate))
    how = (f"{where}: GEMV chain sweep, per-GEMV slope between two chain lengths of distinct n x n fp32 matrices "
           f"(>= {GEMV_SWEEP_BYTES // 2**20} MiB in the longer, past the cache), best of interleaved calls; "
           f"{rates or 'no sizes'}; "
           f"large-kernel rate mem_DRAM_bandwidth x memory_efficiency {float(read) * efficiency / 1e9:.1f} GB/s")
    off = "" if split else " (no size split: small-kernel streaming off)"
    peak = out["peak_flops_fp32"].value
    half_rows = gemm_half_rows(bench, peak)
    out.update({
        "efficiency_gemm": Constant("efficiency_gemm", 1.0, "1", "derived", "the peaks are themselves measured GEMM rates"),
        "efficiency_gemv": Constant("efficiency_gemv", 1.0, "1", "derived",
                                    "a GEMV is costed as memory-bound through mem_DRAM_bandwidth x memory_efficiency"),
        "gemm_half_rows": Constant(
            "gemm_half_rows", half_rows, "rows", "measured",
            f"{where}: GEMM rows sweep, one jitted program of dependent (M x K) @ (K x K) fp32 GEMMs over distinct "
            f"matrices at each M, best of interleaved calls: {gemm_rows_text(bench)} against peak_flops_fp32 "
            f"{peak / 1e9:.2f} GFLOP/s; least squares of log(rate / peak) = log(M / (M + h)), h >= 0 "
            f"(microbench.gemm_half_rows; 0: no rows, or every M within {GEMM_ROWS_FLAT:.0%} of the peak)"),
        "mem_DRAM_capacity": Constant("mem_DRAM_capacity", memory_total_bytes(), "B", "measured",
                                      f"{where}: MemTotal in /proc/meminfo"),
        "mem_DRAM_bandwidth": Constant("mem_DRAM_bandwidth", float(read), "B/s", "measured",
                                       f"{where}: best read-only streaming rate (a jitted sum over a large fp32 array)"),
        "memory_efficiency": Constant("memory_efficiency", efficiency, "1", "measured",
                                      f"{where}: streaming rate of a chain of distinct fp32 GEMVs in one program "
                                      f"(1 / the slope of seconds vs bytes), how a layer streams its weights, over "
                                      f"the best streaming rate"),
        "core_stream_bandwidth": Constant(
            "core_stream_bandwidth", core_rate, "B/s", "measured",
            f"{how}: the median rate of the sizes below small_kernel_bytes (one core's){off}"),
        "small_kernel_bytes": Constant(
            "small_kernel_bytes", split, "B", "measured",
            f"{how}: the smallest size streaming at >= the midpoint of the smallest size's rate and the "
            f"large-kernel rate (the runtime splits it across the cores){off}"),
        "kernel_launch": Constant("kernel_launch", fixed["kernel_launch"], "s", "measured",
                                  f"{where}: slope over K of one jitted program of K dependent 8x8 matmuls"),
        "layer_overhead": Constant("layer_overhead", fixed["layer_overhead"], "s", "measured",
                                   f"{where}: per-layer slope of tiny decoder layers minus KERNELS_PER_LAYER launches"),
        "step_overhead": Constant("step_overhead", fixed["host_step"], "s", "measured",
                                  f"{where}: one decode step's host work outside its programs (microbench.host_step_call)"),
        "program_dispatch": Constant("program_dispatch", fixed["program_dispatch"], "s", "measured",
                                     f"{where}: intercept of the matmul-chain line (one call of a compiled program)"),
        "numpy_op": Constant("numpy_op", fixed["numpy_op"], "s", "measured", f"{where}: one np.add of 8 floats"),
        "storage_read_bandwidth": Constant("storage_read_bandwidth", float(storage.rate), "B/s", "measured",
                                           f"{where}: {storage.note} of {int(storage['size']) // 2**20} MiB"),
        "cores": Constant("cores", int(os.cpu_count() or 1), "1", "measured", f"{where}: os.cpu_count()"),
    })
    return out


def device_toml(constants: dict[str, Constant], machine: str, date: str, name: str) -> str:
    """A device preset file (`[meta]` + one table per constant with value, unit, kind, source)."""
    lines = [f"# {name}: measured by `python -m workbench profile` on {machine}, {date}.",
             "# Every number is kind = \"measured\"; rates are the best of several calls on a possibly shared machine.",
             "", "[meta]", f"name = {_q(name)}", 'memory_levels = ["DRAM"]']
    for key, c in constants.items():
        value = int(c.value) if key == "cores" else float(c.value)
        lines += ["", f"[{key}]", f"value = {value!r}", f"unit = {_q(c.unit)}", f'kind = "{c.kind}"',
                  f"source = {_q(c.source)}"]
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


# ---- network ------------------------------------------------------------------------------------------
# --phase -> the derived sync kind of `workbench.cluster.fit.SYNC_AFTER` (its chain with syncs, and without)
PHASE_KIND = {"decoder": "star_in_decoder_layers", "decode": "star_after_streaming", "prefill": "star_after_compute"}
PHASE_WORK = {"decoder": "among a TP decoder layer's kernels (1 and 32 tokens)", "decode": "after a decode step",
              "prefill": "after a prefill step"}


def network_table(rate_mbit: float | None, quick: bool, processes: int = 2, phase: str | None = "decoder") \
        -> tuple[str, pd.DataFrame]:
    """The `[network]` table of one link class, as `processes` co-located processes see it: star syncs inside
    one running program (`sync_chain`), by default among TPI-LLM's TP decoder layers (`decoder`: the layers with
    their two syncs less the same layers without them; what the own_hardware notebook verifies), or after one
    decode step's streaming GEMV (`decode`) or a prefill's GEMM (`prefill`), less the same steps alone, fitted
    at that process count; or, with `phase=None`, single calls of a 2-process psum. Returns the TOML text and
    the measured rows."""
    from workbench.cluster.fit import (
        SYNC_AFTER,
        HostModel,
        chain_slopes,
        colocated_link,
        fit_all,
        fit_chains,
        sync_after_step,
    )
    from workbench.cluster.host import kernel_hz

    require_int("processes", processes, low=2, high=16)
    where = f"python -m workbench profile network on {machine_label()}, {dt.date.today().isoformat()}"
    cores = int(os.cpu_count() or 1)
    if phase is None:
        from workbench.cluster.measure import CampaignPoint, run_point

        sizes = (4, 4096, 1 << 18) if quick else (4, 64, 4096, 1 << 16, 1 << 20, 1 << 22)
        rows, _ = run_point(CampaignPoint(2, sizes, rate_mbit, programs=("psum",)),
                            target_seconds=0.3 if quick else 1.0, min_reps=3 if quick else 5,
                            max_reps=8 if quick else 25)
        hz, _ = kernel_hz()
        fit = fit_all(rows, HostModel(cores, 1.0 / hz)).iloc[0]
        what = "single calls of a 2-process psum"
        bandwidth, latency, overhead = (float(fit["bandwidth_bytes_per_s"]), float(fit["latency_s"]),
                                        float(fit["message_overhead_s"]))
    else:
        from workbench.cluster.launcher import ClusterSpec, launch
        from workbench.cluster.measure import chain_summary
        from workbench.cluster.netns import LinkShape

        require_choice("phase", phase, tuple(PHASE_KIND))
        kind = PHASE_KIND[phase]
        with_syncs, alone = SYNC_AFTER[kind]
        params = {"programs": [with_syncs, alone], "sizes": [2048, 65536],
                  "lengths": [1, 8] if quick else [1, 8, 32], "reps": 3 if quick else 15}
        if phase == "decoder":
            params = {"programs": [with_syncs, alone], "decoder_tokens": [1, 8] if quick else [1, 32],
                      "decoder_lengths": [1, 4] if quick else [1, 4, 16], "reps": 3 if quick else 15}
        shape = LinkShape(rate_mbit) if rate_mbit else None
        run = launch(ClusterSpec(processes, "sync_chain", params, shape=shape, timeout_s=1800),
                     announce=lambda message: None)
        rows = chain_summary(run, processes, dt.date.today().isoformat(), machine_label())
        slopes = sync_after_step(chain_slopes(rows), kind)
        longest = max(params.get("lengths", params.get("decoder_lengths")))
        fit = fit_chains(slopes, cores, longest, processes)
        link = colocated_link(_link(fit.iloc[0]), kind, processes, cores)
        what = (f"star syncs {PHASE_WORK[phase]} inside one program on {processes} co-located processes "
                f"(sync_chain: {with_syncs} less {alone}, fitted at that count)")
        bandwidth, latency, overhead = link.bandwidth_bytes_per_s, link.latency_s, link.message_overhead_s
    mbps, what_bandwidth = resolved_bandwidth_mbps(bandwidth, what)
    text = "\n".join([
        "[network]", 'topology = "switch"',
        f"bandwidth_mbps = {mbps!r}",
        f"latency_ms = {latency * 1e3 / 2!r}  # per hop: a switch has two",
        f"message_overhead_us = {overhead * 1e6!r}",
        "[network.sources]",
        f"bandwidth_mbps = {_q(f'kind = measured: {what_bandwidth} ({where})')}",
        f"latency_ms = {_q(f'kind = measured: wire latency of {what}, half per hop ({where})')}",
        f"message_overhead_us = {_q(f'kind = measured: per-message endpoint time of {what} ({where})')}",
    ]) + "\n"
    return text, rows


def resolved_bandwidth_mbps(bandwidth_bytes_per_s: float, what: str) -> tuple[float, str]:
    """The fitted bandwidth in Mbit/s and its provenance text; a per-byte cost the measured sizes could not
    resolve (the larger syncs cost no more than the small ones, so the fit drives it to ~0) is written as the
    largest bandwidth a deployment accepts, and says so, so the file `profile` writes is one `whatif` reads."""
    from workbench.userconfig import NETWORK_FIELDS

    mbps = bandwidth_bytes_per_s * 8 / 1e6
    ceiling = float(NETWORK_FIELDS["bandwidth_mbps"].high)
    if np.isfinite(mbps) and mbps <= ceiling:
        return float(mbps), f"1 / per-byte cost of {what}"
    return ceiling, (f"per-byte cost of {what} not resolved (the larger syncs cost no more than the small "
                     f"ones within the noise; fitted {mbps:.3g} Mbit/s): the largest bandwidth a deployment "
                     f"accepts; re-run without --quick")


def _link(row):
    """A fit row as a LinkModel."""
    from workbench.cluster.fit import link_models

    return link_models(pd.DataFrame([row]))[row["link_class"]]


# ---- the command ------------------------------------------------------------------------------------------
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
    parser.add_argument("--phase", default="decoder", choices=("decoder", "decode", "prefill", "single-call"),
                        help="network: the syncs among a TP decoder layer's kernels (default), after one decode "
                             "step's GEMV or one prefill GEMM, inside a running program; or single psum calls")


def main(args: argparse.Namespace) -> int:
    """Measure, write the TOML atomically, print a short summary; 0 on success."""
    from workbench.io import writable_file, write_csv_atomic, write_text_atomic

    out = Path(args.out or ("my_network.toml" if args.what == "network" else "my_device.toml"))
    writable_file(out, f"--out {str(out)!r}")  # before any measuring: a bad --out must not cost the run
    if args.what == "network":
        if args.shape is not None and not 0 < args.shape <= 1e5:
            raise WorkbenchError(f"--shape must be a rate in Mbit/s in (0, 100000], got {args.shape}")
        require_int("--processes", args.processes, low=2, high=16)
        text, rows = network_table(args.shape, args.quick, args.processes,
                                   None if args.phase == "single-call" else args.phase)
        write_text_atomic(out, text)
        write_csv_atomic(out.with_suffix(".csv"), rows)
        print(text + f"wrote {out} (+ the measured rows in {out.with_suffix('.csv')})")
        return 0
    s = settings(args.quick, args.storage_dir)
    machine, date = machine_label(), dt.date.today().isoformat()
    bench = measure(s, args.quick, _progress_bar(len(DTYPES) * len(s.sizes) + 3))
    constants = device_constants(bench, machine, date)
    write_text_atomic(out, device_toml(constants, machine, date, args.name or f"this machine ({machine})"))
    write_csv_atomic(out.with_suffix(".csv"), bench)
    for key in ("peak_flops_fp32", "peak_flops_bf16", "peak_flops_int8", "mem_DRAM_bandwidth", "memory_efficiency",
                "gemm_half_rows", "core_stream_bandwidth", "small_kernel_bytes", "kernel_launch", "layer_overhead",
                "storage_read_bandwidth"):
        if key in constants:
            print(f"{key:24s} {constants[key].value:.4g} {constants[key].unit}")
    print(f"wrote {out} (+ every measured row in {out.with_suffix('.csv')})")
    return 0


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
