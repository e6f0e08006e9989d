"""Micro-benchmarks of this machine's CPU -> the `this_machine_cpu` device preset (kind = "measured").

peak_flops_fp32 = the best jitted float32 GEMM rate over a few square sizes (so efficiency_gemm = 1 by
construction); mem_DRAM_bandwidth = the best read-only streaming rate (a jitted sum over a 256 MiB
array, or a fp32 GEMV whose 256 MiB matrix fits in no cache: what streaming weights needs; the read +
write rate of a jitted scale is kept beside them in the CSV); memory_efficiency = that GEMV's
effective rate over the best read rate; capacity and cores are read from the OS. Fixed costs (`run_fixed_cost_benchmarks`):
kernel_launch = the per-kernel slope of a jitted chain of tiny matmuls, layer_overhead = the per-layer
slope of jitted tiny decoder layers minus their KERNELS_PER_LAYER launches, plus the per-call dispatch of
a compiled program and numpy's per-op time (extra measured constants). Best-of-N, because the machine
is shared and the question is what the hardware and runtime cost, not what a busy moment leaves.
"""

from __future__ import annotations

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


def run_microbenchmarks(reps: int = 20, stream_mib: int = 256, gemm_sizes=GEMM_SIZES) -> pd.DataFrame:
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
    best = _interleaved_min(timed, calls=1, rounds=reps)
    work = {"gemm_fp32": lambda n: 2.0 * n**3, "gemv_fp32": lambda n: 2.0 * n**2,
            "gemv_large_fp32": lambda n: 4.0 * n * n, "stream_scale_fp32": lambda n: 2.0 * n * 4,
            "stream_read_fp32": lambda n: 4.0 * n, "gemv_chain_fp32": lambda k: 4.0 * k * GEMV_CHAIN_N**2}
    unit = {"gemm_fp32": "FLOP/s", "gemv_fp32": "FLOP/s"}
    rows = [{"benchmark": k, "size": n, "seconds": s, "rate": work[k](n) / s, "unit": unit.get(k, "B/s")}
            for (k, n), s in best.items()]
    del inputs, v, timed
    return pd.concat([pd.DataFrame(rows), run_fixed_cost_benchmarks()], ignore_index=True)


def gemv_chain_calls(n: int, lengths) -> dict:
    """{("gemv_chain_fp32", K): a call of one jitted program of K dependent GEMVs over K distinct n x n fp32
    matrices}: how a layer's weights stream, kernel after kernel (`chain_stream_rate` takes the slope). The
    product is `v @ w` with w stored (in, out), as every kernel here multiplies activations by weights; on
    XLA's CPU backend it streams at a different rate than `w @ v`."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    mats = [jnp.asarray(rng.standard_normal((n, n), dtype=np.float32) * 0.01) for _ in range(max(lengths))]
    x = jnp.ones((n,), jnp.float32)

    def chain(ws, v):
        for w in ws:
            v = jnp.tanh(v @ w)
        return v

    program = jax.jit(chain)
    return {("gemv_chain_fp32", k): (lambda ws=tuple(mats[:k]): program(ws, x).block_until_ready()) for k in lengths}


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
    shared = "a shared, busy machine: minimum over 30 interleaved batches"
    return {
        "peak_flops_fp32": Constant("peak_flops_fp32", float(best.rate), "FLOP/s", "measured",
                                    f"{where}: best jitted fp32 GEMM rate (n={int(best['size'])}, all cores; best of {reps} "
                                    f"interleaved calls)"),
        "efficiency_gemm": Constant("efficiency_gemm", 1.0, "1", "derived",
                                    "peak_flops_fp32 is itself the measured GEMM rate"),
        "efficiency_gemv": Constant("efficiency_gemv", 1.0, "1", "assumed",
                                    "GEMV is modelled as memory-bound through mem_DRAM_bandwidth (roofline)"),
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


def shared_device(device, processes: int):
    """Each process's share of `device` when `processes` processes compute at the same time on it.

    The preset's rates are for the whole machine (all cores, one process); tensor-parallel processes
    compute concurrently, so each gets 1/processes of the compute and of the memory bandwidth (an
    even-share assumption: it ignores scheduling overhead and cache effects). The fixed costs
    (kernel launch, per-layer time) were measured in one process on one core; with more processes than
    cores each process runs on cores/processes of a core, so they stretch by processes/cores."""
    from workbench.errors import require_int

    require_int("processes", processes, low=1)
    if processes == 1:
        return device
    share = 1.0 / processes
    stretch = max(1.0, processes / max(int(device.cores), 1))
    peaks = {k: v * share for k, v in device.peak_flops.items()}
    memory = tuple(level.__class__(level.name, level.capacity_bytes / processes, level.bandwidth_bytes_per_s * share,
                                   level.energy_pj_per_byte) for level in device.memory)
    return device.with_changes(name=f"{device.name} / {processes} processes", peak_flops=peaks, memory=memory,
                               kernel_launch_s=device.kernel_launch_s * stretch,
                               layer_overhead_s=device.layer_overhead_s * stretch)


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
    numpy_op: one `np.add` of two 8-element arrays. Each is the minimum over `rounds` interleaved batches
    of the mean per call (the machine is shared and busy: the minimum is the cost without other users).
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

    fns = {("jit_dispatch", 1): lambda: inc(x0).block_until_ready()}
    fns.update({("kernel_chain", k): chain_fn(k) for k in chain_lengths})
    fns.update({("tiny_layers", n): layers_fn(n) for n in layer_counts})
    best = _interleaved_min(fns, calls, rounds)
    best[("numpy_op", 8)] = _interleaved_min({"np": lambda: np.add(a, b)}, calls * 20, rounds)["np"]
    out = pd.DataFrame([{"benchmark": k, "size": n, "seconds": s} for (k, n), s in best.items()])
    out["rate"], out["unit"] = 1.0 / out["seconds"], "1/s"
    return out


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
            "numpy_op": float(bench.loc[bench.benchmark == "numpy_op", "seconds"].iloc[0])}
