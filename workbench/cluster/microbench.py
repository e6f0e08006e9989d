"""Micro-benchmarks of this machine's CPU -> the `this_machine_cpu` device preset (kind = "measured").

peak_flops_fp32 = the best jitted float32 GEMM rate over a few square sizes (so efficiency_gemm = 1 by
construction); mem_DRAM_bandwidth = the best read-only streaming rate (a jitted sum over a 256 MiB
array, or a fp32 GEMV whose 256 MiB matrix fits in no cache: what streaming weights needs; the read +
write rate of a jitted scale is kept beside them in the CSV); memory_efficiency = that GEMV's
effective rate over the best read rate; gemm_half_rows = the rows M at which a skinny GEMM (an M-token
prompt's weight GEMM) runs at half the peak (`gemm_half_rows`, from chains of M x K by K x K GEMMs at a few M);
capacity and cores are read from the OS. Fixed costs (`run_fixed_cost_benchmarks`):
kernel_launch = the per-kernel slope of a jitted chain of tiny matmuls, layer_overhead = the per-layer
slope of jitted tiny decoder layers minus their KERNELS_PER_LAYER launches, plus the per-call dispatch of
a compiled program and numpy's per-op time (extra measured constants). Best-of-N, because the machine
is shared and the question is what the hardware and runtime cost, not what a busy moment leaves.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import pandas as pd

from workbench.constants import Constant

GEMM_SIZES = (256, 512, 1024, 2048)
GEMV_LARGE = 8192  # a 256 MiB fp32 matrix: larger than any last-level cache (EPYC L3 can hold 64 MiB)
# A decode layer streams its weights as several mid-size matrices, one GEMV kernel each: K distinct n x n
# fp32 matrices chained in one program (16 MiB each at n = 2048; 256 MiB in all at K = 16, past any cache).
GEMV_CHAIN_N = 2048
GEMV_CHAIN_LENGTHS = (4, 8, 16)
# Skinny GEMMs: an M-row activation through a chain of distinct K x K fp32 matrices (K = N = 1024, 4 MiB each),
# at several M; the rate against the square-GEMM peak gives `gemm_half_rows`.
GEMM_ROWS = (32, 128, 512)
GEMM_ROWS_N = 1024
GEMM_ROWS_CHAIN = 16
GEMM_ROWS_FLAT = 0.05  # every M within this fraction of the peak: no row loss (gemm_half_rows = 0)


def run_microbenchmarks(reps: int = 20, stream_mib: int = 256, gemm_sizes=GEMM_SIZES,
                        gemm_rows=GEMM_ROWS) -> pd.DataFrame:
    """GEMM, GEMV and streaming rates on JAX's CPU backend, then the fixed costs: one row per benchmark and
    size (under a minute). Each rate is the best of `reps` calls, the calls of all benchmarks interleaved
    round by round (`_interleaved_min`), so a burst of other users' load costs one call of each."""
    import jax
    import jax.numpy as jnp

    matmul = jax.jit(lambda a, b: a @ b)
    scale = jax.jit(lambda v: v * 1.0001)
    total = jax.jit(lambda v: jnp.sum(v))
    key0, key1 = jax.random.PRNGKey(0), jax.random.PRNGKey(1)
    elements = stream_mib * 2**20 // 4
    inputs = {("gemm_fp32", n): (matmul, jax.random.normal(key0, (n, n), jnp.float32),
                                 jax.random.normal(key1, (n, n), jnp.float32)) for n in gemm_sizes}
    inputs.update({("gemv_fp32", n): (matmul, jax.random.normal(key0, (n, n), jnp.float32),
                                      jax.random.normal(key1, (n,), jnp.float32)) for n in gemm_sizes})
    inputs[("gemv_large_fp32", GEMV_LARGE)] = (matmul, jnp.ones((GEMV_LARGE, GEMV_LARGE), jnp.float32),
                                               jnp.ones((GEMV_LARGE,), jnp.float32))
    v = jnp.ones((elements,), jnp.float32)
    inputs[("stream_scale_fp32", elements)] = (scale, v)
    inputs[("stream_read_fp32", elements)] = (total, v)
    timed = {k: (lambda f=f, a=a: f(*a).block_until_ready()) for k, (f, *a) in inputs.items()}
    timed.update(gemv_chain_calls(GEMV_CHAIN_N, GEMV_CHAIN_LENGTHS))
    timed.update(gemm_rows_calls(gemm_rows))
    sweep = gemv_size_calls(GEMV_SWEEP_SIZES)
    timed.update({("gemv_sweep", key): fn for key, fn in sweep.items()})
    best = _interleaved_min(timed, calls=1, rounds=reps)
    sweep_rows = gemv_size_rows({key: best.pop(("gemv_sweep", key)) for key in sweep})
    work = {"gemm_fp32": lambda n: 2.0 * n**3, "gemv_fp32": lambda n: 2.0 * n**2,
            "gemv_large_fp32": lambda n: 4.0 * n * n, "stream_scale_fp32": lambda n: 2.0 * n * 4,
            "stream_read_fp32": lambda n: 4.0 * n, "gemv_chain_fp32": lambda k: 4.0 * k * GEMV_CHAIN_N**2,
            "gemm_rows_fp32": gemm_rows_flops}
    unit = {"gemm_fp32": "FLOP/s", "gemv_fp32": "FLOP/s", "gemm_rows_fp32": "FLOP/s"}
    rows = [{"benchmark": k, "size": n, "seconds": s, "rate": work[k](n) / s, "unit": unit.get(k, "B/s")}
            for (k, n), s in best.items()]
    del inputs, v, timed, sweep
    sweep_frame = pd.DataFrame(sweep_rows).drop(columns=["note"])
    return pd.concat([pd.DataFrame(rows), sweep_frame, run_fixed_cost_benchmarks()], ignore_index=True)


def gemv_chain_calls(n: int, lengths) -> dict:
    """{("gemv_chain_fp32", K): a call of one jitted program of K dependent GEMVs over K distinct n x n fp32
    matrices}: how a layer's weights stream, kernel after kernel (`chain_stream_rate` takes the slope). The
    product is `v @ w` with w stored (in, out), as every kernel here multiplies activations by weights; on
    XLA's CPU backend it streams at a different rate than `w @ v`."""
    import jax
    import jax.numpy as jnp

    mats = _distinct_matrices(n, max(lengths), 0.01)
    x = jnp.ones((n,), jnp.float32)

    def chain(ws, v):
        for w in ws:
            v = jnp.tanh(v @ w)
        return v

    program = jax.jit(chain)
    return {("gemv_chain_fp32", k): (lambda ws=tuple(mats[:k]): program(ws, x).block_until_ready()) for k in lengths}


def _distinct_matrices(n: int, count: int, scale: float) -> list:
    """`count` distinct n x n fp32 JAX arrays of normal entries x `scale` (seeded: the same every run)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    return [jnp.asarray(rng.standard_normal((n, n), dtype=np.float32) * scale) for _ in range(count)]


def gemm_rows_flops(rows: int, n: int = GEMM_ROWS_N, length: int = GEMM_ROWS_CHAIN) -> float:
    """FLOPs of one `gemm_rows_calls` call: `length` (rows x n) @ (n x n) GEMMs."""
    return 2.0 * rows * n * n * length


def gemm_rows_calls(rows, n: int = GEMM_ROWS_N, length: int = GEMM_ROWS_CHAIN) -> dict:
    """{("gemm_rows_fp32", M): a call of one jitted program of `length` dependent (M x n) @ (n x n) fp32 GEMMs
    over distinct matrices} for each M in `rows`: a prompt's weight GEMMs, kernel after kernel, as
    `gemv_chain_calls` does for decode (weights scaled by 1 / sqrt(n), so activations keep their size with no
    non-linearity to time)."""
    import jax
    import jax.numpy as jnp

    mats = tuple(_distinct_matrices(n, length, 1.0 / np.sqrt(n)))

    def chain(ws, x):
        for w in ws:
            x = x @ w
        return x

    program = jax.jit(chain)
    inputs = {int(m): jnp.ones((int(m), n), jnp.float32) for m in rows}
    return {("gemm_rows_fp32", m): (lambda x=x: program(mats, x).block_until_ready()) for m, x in inputs.items()}


def gemm_half_rows(rows: pd.DataFrame, peak: float) -> float:
    """The rows h at which a GEMM runs at half of `peak` (FLOP/s), from "gemm_rows_fp32" rows (size = M, rate):
    least squares of log(eff) = log(M / (M + h)) over h >= 0, eff = rate / peak capped at 1; 0 (no row loss)
    when there are no rows or every M runs within `GEMM_ROWS_FLAT` of the peak."""
    from scipy.optimize import minimize_scalar

    from workbench.errors import WorkbenchError
    from workbench.hardware import DeviceSpec

    if not (math.isfinite(peak) and peak > 0):
        raise WorkbenchError(f"peak must be a finite rate > 0 FLOP/s, got {peak!r}")
    sweep = rows[(rows.benchmark == "gemm_rows_fp32") & (rows.rate > 0) & (rows["size"] > 0)]
    m = sweep["size"].to_numpy(dtype=float)
    eff = np.minimum(sweep["rate"].to_numpy(dtype=float) / peak, 1.0)
    if m.size == 0 or bool(np.all(eff >= 1.0 - GEMM_ROWS_FLAT)):
        return 0.0
    log_eff = np.log(eff)

    def loss(h: float) -> float:
        return float(np.sum((np.log(m / (m + h)) - log_eff) ** 2))

    high = DeviceSpec.__dataclass_fields__["gemm_half_rows"].metadata["spec"].file_high
    grid = np.concatenate(([0.0], np.geomspace(1e-3, high, 801)))
    i = int(np.argmin([loss(h) for h in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    fit = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10 * max(hi, 1.0)})
    return float(fit.x) if loss(fit.x) <= loss(grid[i]) else float(grid[i])


def gemm_rows_text(rows: pd.DataFrame) -> str:
    """'M=32 115.5, M=128 179.9 GFLOP/s' from "gemm_rows_fp32" rows, for a constant's source."""
    sweep = rows[rows.benchmark == "gemm_rows_fp32"].sort_values("size")
    rates = ", ".join(f"M={int(m)} {r / 1e9:.1f}" for m, r in zip(sweep["size"], sweep["rate"]))
    return f"{rates} GFLOP/s" if rates else "no rows measured"


# Small kernels: the per-GEMV stream rate at several matrix sizes (`gemv_size_calls`), each the slope between
# two chain lengths whose distinct matrices (>= 64 MiB in the shorter chain, twice that in the longer) are past a
# 32 MiB last-level cache: with a shorter chain of 32 MiB the cache held part of it and the rate read high.
GEMV_SWEEP_BYTES = 128 * 2**20
GEMV_SWEEP_SIZES = (362, 512, 724, 1024, 1448, 2048)  # 0.5 to 16 MiB fp32 matrices
SMALL_KERNEL_STEP = 0.8  # small kernels must stream below this fraction of the large-kernel rate to count


def gemv_sweep_lengths(n: int, total_bytes: int = GEMV_SWEEP_BYTES) -> tuple[int, int]:
    """(short, long) chain lengths of n x n fp32 GEMVs: the long chain's matrices stream >= `total_bytes`, the
    short one's half as many, so both are past the cache and their slope is the streaming rate."""
    long = max(2, -(-total_bytes // (4 * n * n)))
    return long // 2, long


def gemv_size_calls(sizes) -> dict:
    """{(n, K): a call of one jitted chain of K distinct n x n fp32 GEMVs} for each size n at its two
    `gemv_sweep_lengths` (`gemv_chain_calls`: how a layer's kernels stream, one after another)."""
    calls = {}
    for n in sizes:
        calls.update({(int(n), k): fn for (_, k), fn in gemv_chain_calls(int(n), gemv_sweep_lengths(int(n))).items()})
    return calls


def gemv_size_rows(best: dict) -> list[dict]:
    """One "gemv_size_fp32" row per matrix size from {(n, K): best seconds}: size = one matrix's bytes, seconds =
    the per-GEMV slope between the two chain lengths (a call's fixed cost drops out), rate = bytes / seconds."""
    rows = []
    for n in sorted({n for n, _ in best}):
        (k0, t0), (k1, t1) = sorted((k, t) for (m, k), t in best.items() if m == n)[:2]
        per_gemv = (t1 - t0) / (k1 - k0)
        rows.append({"benchmark": "gemv_size_fp32", "size": 4 * n * n, "seconds": per_gemv,
                     "rate": 4.0 * n * n / per_gemv if per_gemv > 0 else np.nan, "unit": "B/s",
                     "note": f"per-GEMV slope between chains of {k0} and {k1} distinct {n}x{n} fp32 matrices"})
    return rows


def small_kernel_stream(rows: pd.DataFrame, bulk_rate: float) -> tuple[float, float]:
    """(core_stream_bandwidth B/s, small_kernel_bytes B) from "gemv_size_fp32" rows (size = one kernel's bytes,
    rate = its streaming rate) and the large-kernel rate `bulk_rate` (bandwidth x memory_efficiency): the split
    is the smallest size streaming at >= the midpoint of the smallest size's rate and `bulk_rate`, the core rate
    the median rate of the sizes below it; (0, 0), the mechanism off, when no size splits or the sizes below
    the split stream at more than `SMALL_KERNEL_STEP` of `bulk_rate` (a gap within a shared machine's noise)."""
    sweep = rows[(rows.benchmark == "gemv_size_fp32") & (rows.rate > 0)].sort_values("size")
    if len(sweep) < 2:
        return 0.0, 0.0
    fast = sweep[sweep.rate >= (float(sweep.rate.iloc[0]) + bulk_rate) / 2]
    below = sweep[sweep["size"] < float(fast["size"].iloc[0])] if not fast.empty else sweep.iloc[:0]
    if below.empty or float(below.rate.median()) > SMALL_KERNEL_STEP * bulk_rate:
        return 0.0, 0.0
    return float(below.rate.median()), float(fast["size"].iloc[0])


def chain_stream_rate(bench: pd.DataFrame) -> float:
    """Bytes per second of one more GEMV in a chain: 1 / the slope of seconds vs the bytes a call streams
    (rate x seconds of each gemv_chain_fp32 row), so a fixed cost per call drops out."""
    from workbench.errors import WorkbenchError

    chain = bench[bench.benchmark == "gemv_chain_fp32"]
    if len(chain) < 2:
        raise WorkbenchError("memory efficiency needs gemv_chain_fp32 rows at two chain lengths or more")
    slope, _ = _slope(chain["rate"] * chain["seconds"], chain["seconds"])
    if slope <= 0:
        raise WorkbenchError(f"gemv_chain_fp32 seconds do not grow with the chain (slope {slope:.3g} s/B): re-measure")
    return 1.0 / slope


def memory_total_bytes() -> float:
    """MemTotal from /proc/meminfo (bytes)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    raise OSError("MemTotal not found in /proc/meminfo")


def device_constants(bench: pd.DataFrame, bench_file: str, machine: str, date: str, reps: int = 20) -> dict[str, Constant]:
    """The preset's constants from a micro-benchmark table (every one says where it comes from)."""
    gemm = bench[bench.benchmark == "gemm_fp32"]
    read = bench[bench.benchmark == "stream_read_fp32"]
    gemv = bench[bench.benchmark == "gemv_large_fp32"]
    where = f"micro-benchmark on this machine ({machine}; {date}), {bench_file}"
    best = gemm.loc[gemm.rate.idxmax()]
    read_rate = max(float(read.rate.max()), float(gemv.rate.max()))  # the best read-only streaming rate seen
    chain_rate = chain_stream_rate(bench)
    fixed = fixed_costs(bench)
    core_rate, split = small_kernel_stream(bench, read_rate * min(chain_rate / read_rate, 1.0))
    half_rows = gemm_half_rows(bench, float(best.rate))
    sweep = bench[bench.benchmark == "gemv_size_fp32"].sort_values("size")
    swept = ", ".join(f"{s / 2**20:.2g} MiB {r / 1e9:.1f} GB/s" for s, r in zip(sweep["size"], sweep["rate"]))
    shared = "a shared, busy machine: minimum over 30 interleaved batches"
    return {
        "peak_flops_fp32": Constant("peak_flops_fp32", float(best.rate), "FLOP/s", "measured",
                                    f"{where}: best jitted fp32 GEMM rate (n={int(best['size'])}, all cores; best of {reps} "
                                    f"interleaved calls)"),
        "efficiency_gemm": Constant("efficiency_gemm", 1.0, "1", "derived",
                                    "peak_flops_fp32 is itself the measured GEMM rate"),
        "efficiency_gemv": Constant("efficiency_gemv", 1.0, "1", "assumed",
                                    "GEMV is modelled as memory-bound through mem_DRAM_bandwidth (roofline)"),
        "gemm_half_rows": Constant(
            "gemm_half_rows", half_rows, "rows", "measured",
            f"{where}: GEMM rows sweep, one jitted program of {GEMM_ROWS_CHAIN} dependent (M x {GEMM_ROWS_N}) @ "
            f"({GEMM_ROWS_N} x {GEMM_ROWS_N}) fp32 GEMMs over distinct matrices at each M (best of {reps} interleaved "
            f"calls): {gemm_rows_text(bench)} against peak_flops_fp32 {float(best.rate) / 1e9:.2f} GFLOP/s; least "
            f"squares of log(rate / peak) = log(M / (M + h)), h >= 0 (microbench.gemm_half_rows; 0: every M within "
            f"{GEMM_ROWS_FLAT:.0%} of the peak)"),
        "mem_DRAM_capacity": Constant("mem_DRAM_capacity", memory_total_bytes(), "B", "measured",
                                      f"/proc/meminfo MemTotal on this machine ({date})"),
        "mem_DRAM_bandwidth": Constant("mem_DRAM_bandwidth", read_rate, "B/s", "measured",
                                       f"{where}: best read-only streaming rate: a jitted sum over a 256 MiB fp32 array or a "
                                       f"jitted GEMV over a {4 * GEMV_LARGE**2 // 2**20} MiB matrix (best of {reps} interleaved calls each)"),
        "memory_efficiency": Constant(
            "memory_efficiency", min(chain_rate / read_rate, 1.0), "1", "measured",
            f"{where}: streaming rate of layer-sized GEMVs, 4 n^2 B over the slope of one jitted program of K "
            f"dependent GEMVs over K distinct {GEMV_CHAIN_N}x{GEMV_CHAIN_N} fp32 matrices (K = "
            f"{', '.join(map(str, GEMV_CHAIN_LENGTHS))}; {4 * GEMV_CHAIN_N**2 // 2**20} MiB each, past any cache at the "
            f"largest K), over the best read-only streaming rate (best of {reps} interleaved calls each). Before "
            f"2026-11-24 (second session) it was one {GEMV_LARGE}x{GEMV_LARGE} GEMV's rate, which streams as fast as "
            f"a plain read (1.0) where a layer's chain of mid-size kernels does not"),
        "kernel_launch": Constant(
            "kernel_launch", fixed["kernel_launch"], "s", "measured",
            f"{where}: slope over K of one jitted program of K dependent 8x8 matmuls (K = "
            f"{', '.join(map(str, FIXED_CHAIN_LENGTHS))}; one XLA CPU thunk each); {shared}"),
        "layer_overhead": Constant(
            "layer_overhead", fixed["layer_overhead"], "s", "measured",
            f"{where}: per-layer slope of one jitted program of L tiny decoder layers (d_model 64; L = "
            f"{', '.join(map(str, FIXED_LAYER_COUNTS))}; {fixed['per_layer'] * 1e6:.2f} us per layer) minus "
            f"KERNELS_PER_LAYER x kernel_launch, floored at 0; {shared}"),
        "step_overhead": Constant(
            "step_overhead", fixed["host_step"], "s", "measured",
            f"{where}: one decode step's host work outside its compiled programs (embedding lookup and copy to the "
            f"host, input hand-over, output slice, argmax read back; microbench.host_step_call, as "
            f"workbench.cluster.e2e.generate_timed runs it); {shared}"),
        "program_dispatch": Constant(
            "program_dispatch", fixed["program_dispatch"], "s", "measured",
            f"{where}: intercept of the matmul-chain line, i.e. one call of a compiled program from Python "
            f"(dispatch, argument handling, thunk executor start, block_until_ready); {shared}"),
        "jit_dispatch": Constant(
            "jit_dispatch", fixed["jit_dispatch"], "s", "measured",
            f"{where}: one call of a jitted scalar x + 1 incl. block_until_ready; {shared}"),
        "numpy_op": Constant("numpy_op", fixed["numpy_op"], "s", "measured",
                             f"{where}: one np.add of two 8-element float32 arrays; {shared}"),
        "cores": Constant("cores", int(os.cpu_count() or 1), "1", "measured", "os.cpu_count() on this machine"),
        "core_stream_bandwidth": Constant(
            "core_stream_bandwidth", core_rate, "B/s", "measured",
            f"{where}: GEMV chain sweep, per-GEMV slope between two chain lengths past the cache at each matrix "
            f"size (best of {reps} interleaved calls): {swept}; the median rate of the sizes below the split "
            f"(microbench.small_kernel_stream; 0: no split seen)"),
        "small_kernel_bytes": Constant(
            "small_kernel_bytes", split, "B", "measured",
            f"{where}: GEMV chain sweep (rates under core_stream_bandwidth): the smallest swept kernel streaming "
            f"at or past the midpoint of the small kernels' rate and bandwidth x memory_efficiency "
            f"(microbench.small_kernel_stream; 0: no split seen)"),
    }


def device_toml(constants: dict[str, Constant], machine: str, date: str) -> str:
    """data/devices/this_machine_cpu.toml text."""
    from workbench.cluster.fit import constants_toml

    header = (f"This machine's CPU as a device preset: compute and memory constants from a micro-benchmark\n"
              f"(scripts/measure_collectives.py --only micro, about half a minute), measured {date} on {machine}.\n"
              f"The machine is shared by several users and was busy: best-of-N rates and minimum fixed costs\n"
              f"over interleaved batches are kept.")
    body = constants_toml(constants, header)
    meta = '[meta]\nname = "this machine (CPU, micro-benchmarked)"\nmemory_levels = ["DRAM"]\n\n'
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{meta}{rest}" if rest else meta + body


def shared_device(device, processes: int, share: float | None = None):
    """Each process's share of `device` when `processes` processes compute at the same time on it.

    The preset's rates are for the whole machine (all cores, one process); tensor-parallel processes
    compute concurrently, so each gets `share` of the compute, of the memory bandwidth and of a small
    kernel's streaming rate: 1/processes unless a measured share is given (`colocated_shares`: on this
    machine two processes running the same decode layers each get 0.61 of one alone, four get 0.24; two
    running chains of 1 MiB GEMVs each get 0.55, so a small kernel's rate is shared too, not one core's
    each). The fixed costs (kernel launch, per-layer time) were measured in one process on one core; with
    more processes than cores each process runs on cores/processes of a core, so they stretch by
    processes/cores (`workbench.cluster.fit.local_share`)."""
    from workbench.cluster.fit import local_share
    from workbench.errors import WorkbenchError, require_int

    require_int("processes", processes, low=1)
    if processes == 1:
        return device
    share = 1.0 / processes if share is None else float(share)
    if not 0.0 < share <= 1.0:
        raise WorkbenchError(f"share must be a fraction of the machine in (0, 1], got {share!r}")
    stretch = local_share(processes, max(int(device.cores), 1))
    peaks = {k: v * share for k, v in device.peak_flops.items()}
    memory = tuple(level.__class__(level.name, level.capacity_bytes / processes, level.bandwidth_bytes_per_s * share,
                                   level.energy_pj_per_byte) for level in device.memory)
    return device.with_changes(name=f"{device.name} / {processes} processes", peak_flops=peaks, memory=memory,
                               kernel_launch_s=device.kernel_launch_s * stretch,
                               layer_overhead_s=device.layer_overhead_s * stretch,
                               step_overhead_s=device.step_overhead_s * stretch,
                               core_stream_bytes_per_s=device.core_stream_bytes_per_s * share)


def gemm_rate_table(bench: pd.DataFrame) -> pd.DataFrame:
    """Rates in GFLOP/s or GB/s for display."""
    out = bench.copy()
    out["rate_g"] = out["rate"] / 1e9
    return out[["benchmark", "size", "seconds", "rate_g", "unit"]].assign(
        unit=np.where(out.unit == "B/s", "GB/s", "GFLOP/s"))


# ---- fixed costs: per-call dispatch, per-kernel (thunk) cost, per-layer framework time, numpy per op ----
FIXED_CHAIN_LENGTHS = (1, 17, 33, 65)  # kernels in one compiled program (the slope is the per-kernel cost)
FIXED_LAYER_COUNTS = (1, 3, 5, 9)  # tiny decoder layers in one compiled program (the slope is one layer)


def _slope(xs, ys) -> tuple[float, float]:
    """(slope, intercept) of a least-squares line through (xs, ys)."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def _interleaved_min(fns: dict, calls: int, rounds: int) -> dict:
    """For each named callable: the smallest mean seconds per call over `rounds` batches of `calls` calls,
    the batches of all callables interleaved round by round (a burst of other users' load hits one
    batch of each, not every batch of one). Min-of-many: the question is what the call costs, not what
    a busy moment adds."""
    for fn in fns.values():
        fn()
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


def run_fixed_cost_benchmarks(calls: int = 50, rounds: int = 30, chain_lengths=FIXED_CHAIN_LENGTHS,
                              layer_counts=FIXED_LAYER_COUNTS) -> pd.DataFrame:
    """Fixed (size-independent) costs on JAX's CPU backend and numpy; one row per benchmark and size.

    jit_dispatch: one call of a jitted `x + 1` on a scalar (host dispatch, no real work);
    kernel_chain: one jitted program of K dependent 8x8 matmuls (one XLA CPU thunk each; the slope over K
    is the per-kernel cost inside a compiled program); tiny_layers: one jitted program of L decoder layers
    of the 64-wide test config (the slope is one layer: its kernels plus whatever else XLA runs per layer);
    numpy_op: one `np.add` of two 8-element arrays; host_step: a decode step's host work outside its compiled
    programs (`host_step_call`). Each is the minimum over `rounds` interleaved batches of the mean per call
    (the machine is shared and busy: the minimum is the cost without other users).
    """
    import jax
    import jax.numpy as jnp

    from workbench.kernels import reference as ref
    from workbench.models import tiny_config

    x0 = jnp.float32(1.0)
    inc = jax.jit(lambda x: x + 1)
    w = jnp.eye(8, dtype=jnp.float32) * 0.5
    v = jnp.ones((8, 8), jnp.float32)
    cfg = tiny_config("llama")
    block = ref.init_block_params(cfg, jax.random.PRNGKey(0))
    h = jnp.ones((1, cfg.d_model), jnp.float32)
    pos = jnp.zeros((1,), jnp.int32)
    a, b = np.ones(8, np.float32), np.ones(8, np.float32)

    def chain_fn(k: int):
        def chain(x, w):
            for _ in range(k):
                x = jax.lax.optimization_barrier(x @ w)
            return x
        fn = jax.jit(chain)
        return lambda: fn(v, w).block_until_ready()

    def layers_fn(n_layers: int):
        def layers(x, p):
            for _ in range(n_layers):
                x = jax.lax.optimization_barrier(ref.block_forward(cfg, p, x, pos)[0])
            return x
        fn = jax.jit(layers)
        return lambda: fn(h, block).block_until_ready()

    fns = {("jit_dispatch", 1): lambda: inc(x0).block_until_ready(), ("host_step", 1): host_step_call()}
    fns.update({("kernel_chain", k): chain_fn(k) for k in chain_lengths})
    fns.update({("tiny_layers", n): layers_fn(n) for n in layer_counts})
    best = _interleaved_min(fns, calls, rounds)
    best[("numpy_op", 8)] = _interleaved_min({"np": lambda: np.add(a, b)}, calls * 20, rounds)["np"]
    out = pd.DataFrame([{"benchmark": k, "size": n, "seconds": s} for (k, n), s in best.items()])
    out["rate"], out["unit"] = 1.0 / out["seconds"], "1/s"
    return out


HOST_STEP_VOCAB, HOST_STEP_WIDTH = 32000, 512  # TinyLlama's vocabulary and width (the work is dispatch, not bytes)


def host_step_call():
    """A call doing one decode step's host work around its compiled programs, as the cluster's generation loop
    (`workbench.cluster.e2e.generate_timed`) and most engines' token loops do: look up the new token's
    embedding and copy it to the host, hand the input to the runtime, slice the output row, pick the next
    token (argmax of the logits, read back): what vidur calls a step's CPU overhead."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    rng = np.random.default_rng(0)
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("x",)), P("x"))
    embed = jnp.asarray(rng.standard_normal((HOST_STEP_VOCAB, HOST_STEP_WIDTH), dtype=np.float32))
    hidden = jax.device_put(np.ones((1, 1, HOST_STEP_WIDTH), np.float32), sharding)
    logits = jnp.asarray(rng.standard_normal((1, HOST_STEP_VOCAB), dtype=np.float32))

    def step() -> int:
        rows = np.zeros((1, 1, HOST_STEP_WIDTH), np.float32)
        rows[0] = np.asarray(embed[jnp.asarray([5])])
        jax.make_array_from_process_local_data(sharding, rows, rows.shape).block_until_ready()
        hidden.addressable_shards[0].data[0].block_until_ready()
        return int(jnp.argmax(logits[-1]))

    step()
    return step


def fixed_costs(bench: pd.DataFrame) -> dict[str, float]:
    """kernel_launch (slope of the matmul chain), program_dispatch (its intercept), layer_overhead (slope of
    the tiny layers minus KERNELS_PER_LAYER launches), jit_dispatch and numpy_op seconds from
    `run_fixed_cost_benchmarks` rows."""
    from workbench.errors import WorkbenchError
    from workbench.schemes.common import KERNELS_PER_LAYER

    need = {"jit_dispatch", "kernel_chain", "tiny_layers", "numpy_op"}
    if not need <= set(bench["benchmark"]):
        raise WorkbenchError(f"fixed-cost rows need benchmarks {sorted(need)}, got {sorted(set(bench['benchmark']))}")
    chain = bench[bench.benchmark == "kernel_chain"]
    layers = bench[bench.benchmark == "tiny_layers"]
    launch, intercept = _slope(chain["size"], chain["seconds"])
    per_layer, _ = _slope(layers["size"], layers["seconds"])
    return {"kernel_launch": max(launch, 0.0), "layer_overhead": max(per_layer - KERNELS_PER_LAYER * launch, 0.0),
            "per_layer": per_layer, "program_dispatch": max(intercept, 0.0),
            "jit_dispatch": float(bench.loc[bench.benchmark == "jit_dispatch", "seconds"].iloc[0]),
            "host_step": float(bench.loc[bench.benchmark == "host_step", "seconds"].iloc[0])
            if (bench.benchmark == "host_step").any() else 0.0,
            "numpy_op": float(bench.loc[bench.benchmark == "numpy_op", "seconds"].iloc[0])}


# ---- co-located processes: how much of the machine each of k processes running at once gets ----------------
COLOCATED_PROGRAMS = ("decode_layers", "gemv_1mib", "gemv_16mib")


def colocated_calls(model: str = "TinyLlama-42M") -> dict:
    """{program: a call} for the co-location benchmark: one token through every layer of `model` (distinct
    weights per layer, the reference block), and chains of distinct 1 MiB and 16 MiB fp32 GEMVs (64 MiB and
    256 MiB in all: past the cache)."""
    import jax
    import jax.numpy as jnp

    from workbench.kernels import reference as ref
    from workbench.models import get_model

    cfg = get_model(model)
    blocks = [ref.init_block_params(cfg, jax.random.PRNGKey(i)) for i in range(cfg.n_layers)]
    h = jnp.ones((1, cfg.d_model), jnp.float32)
    pos = jnp.zeros((1,), jnp.int32)

    def layers(x, ps):
        for p in ps:
            x = ref.block_forward(cfg, p, x, pos)[0]
        return x

    forward = jax.jit(layers)
    calls = {"decode_layers": lambda: forward(h, blocks).block_until_ready()}
    calls["gemv_1mib"] = gemv_chain_calls(512, (64,))[("gemv_chain_fp32", 64)]
    calls["gemv_16mib"] = gemv_chain_calls(2048, (16,))[("gemv_chain_fp32", 16)]
    return calls


def colocated_worker(start_at: float, reps: int = 15) -> dict[str, list[float]]:
    """In one of k processes started together: compile, wait for the common start time, then `reps` rounds
    of one call of each co-location program: {program: seconds per call}."""
    calls = colocated_calls()
    for fn in calls.values():
        fn()
    while time.time() < start_at:
        time.sleep(0.005)
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(reps):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def run_colocated(process_counts=(1, 2, 4), reps: int = 15, warmup_s: float = 25.0) -> pd.DataFrame:
    """Each program's best time in each of k plain processes (no jax.distributed) running it at the same time,
    for every k: a process's share of the machine is (time alone) / (time with k - 1 others)."""
    import json
    import subprocess
    import sys

    rows = []
    for k in process_counts:
        start_at = time.time() + warmup_s
        code = ("import json, sys; from workbench.cluster.microbench import colocated_worker; "
                f"print(json.dumps(colocated_worker({start_at!r}, {int(reps)})))")
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "JAX_PLATFORMS": "cpu"}) for _ in range(k)]
        for i, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"co-located process {i} of {k} failed (exit {proc.returncode})")
            for program, seconds in json.loads(out.strip().splitlines()[-1]).items():
                rows.append({"processes": k, "process": i, "program": program, "best_s": min(seconds),
                             "median_s": float(np.median(seconds))})
    return pd.DataFrame(rows)


COLOCATED_STATISTIC = "median_s"  # calls while the others run too (a best call may find the others idle)


def colocated_shares(table: pd.DataFrame, stat: str = COLOCATED_STATISTIC) -> pd.DataFrame:
    """Per program and process count: the slowest process's time (`stat` over its calls), and each process's
    share of the machine, time alone / that time (1 / k when k processes split the machine evenly)."""
    from workbench.errors import WorkbenchError

    if stat not in table or not (table.processes == 1).any():
        raise WorkbenchError(f"co-location rows need a {stat} column and a 1-process run")
    slowest = table.groupby(["program", "processes"], as_index=False)[stat].max()
    alone = slowest[slowest.processes == 1].set_index("program")[stat]
    slowest["share"] = slowest["program"].map(alone) / slowest[stat]
    slowest["even_share"] = 1.0 / slowest["processes"]
    return slowest
