"""Micro-benchmarks of this machine's CPU -> the `this_machine_cpu` device preset (kind = "measured").

peak_flops_fp32 = the best jitted float32 GEMM rate over a few square sizes (so efficiency_gemm = 1 by
construction); the DRAM bandwidth = the best rate of a jitted scale over a 256 MiB array (read +
write); capacity and cores are read from the OS. Best-of-N, because the machine is shared and the
question is what the hardware can do, not what a busy moment leaves.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd

from workbench.constants import Constant

GEMM_SIZES = (256, 512, 1024, 2048)


def _best_seconds(fn, *args, reps: int) -> float:
    fn(*args).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return best


def run_microbenchmarks(reps: int = 5, stream_mib: int = 256, gemm_sizes=GEMM_SIZES) -> pd.DataFrame:
    """GEMM, GEMV and streaming-scale rates on JAX's CPU backend: one row per benchmark and size."""
    import jax
    import jax.numpy as jnp

    rows = []
    matmul = jax.jit(lambda a, b: a @ b)
    for n in gemm_sizes:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
        b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
        s = _best_seconds(matmul, a, b, reps=reps)
        rows.append({"benchmark": "gemm_fp32", "size": n, "seconds": s, "rate": 2.0 * n**3 / s, "unit": "FLOP/s"})
    for n in gemm_sizes:
        a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
        x = jax.random.normal(jax.random.PRNGKey(1), (n,), jnp.float32)
        s = _best_seconds(matmul, a, x, reps=reps)
        rows.append({"benchmark": "gemv_fp32", "size": n, "seconds": s, "rate": 2.0 * n**2 / s, "unit": "FLOP/s"})
    elements = stream_mib * 2**20 // 4
    scale = jax.jit(lambda v: v * 1.0001)
    v = jnp.ones((elements,), jnp.float32)
    s = _best_seconds(scale, v, reps=reps)
    rows.append({"benchmark": "stream_scale_fp32", "size": elements, "seconds": s, "rate": 2.0 * elements * 4 / s,
                 "unit": "B/s"})
    return pd.DataFrame(rows)


def memory_total_bytes() -> float:
    """MemTotal from /proc/meminfo (bytes)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    raise OSError("MemTotal not found in /proc/meminfo")


def device_constants(bench: pd.DataFrame, bench_file: str, machine: str, date: str) -> dict[str, Constant]:
    """The preset's constants from a micro-benchmark table (every one says where it comes from)."""
    gemm = bench[bench.benchmark == "gemm_fp32"]
    stream = bench[bench.benchmark == "stream_scale_fp32"]
    where = f"micro-benchmark on this machine ({machine}; {date}), {bench_file}"
    best = gemm.loc[gemm.rate.idxmax()]
    return {
        "peak_flops_fp32": Constant("peak_flops_fp32", float(best.rate), "FLOP/s", "measured",
                                    f"{where}: best jitted fp32 GEMM rate (n={int(best['size'])}, all cores)"),
        "efficiency_gemm": Constant("efficiency_gemm", 1.0, "1", "derived",
                                    "peak_flops_fp32 is itself the measured GEMM rate"),
        "efficiency_gemv": Constant("efficiency_gemv", 1.0, "1", "assumed",
                                    "GEMV is modelled as memory-bound through mem_DRAM_bandwidth (roofline)"),
        "mem_DRAM_capacity": Constant("mem_DRAM_capacity", memory_total_bytes(), "B", "measured",
                                      f"/proc/meminfo MemTotal on this machine ({date})"),
        "mem_DRAM_bandwidth": Constant("mem_DRAM_bandwidth", float(stream.rate.max()), "B/s", "measured",
                                       f"{where}: jitted scale of a 256 MiB fp32 array, read + write bytes"),
        "cores": Constant("cores", int(os.cpu_count() or 1), "1", "measured", "os.cpu_count() on this machine"),
    }


def device_toml(constants: dict[str, Constant], machine: str, date: str) -> str:
    """data/devices/this_machine_cpu.toml text."""
    from workbench.cluster.fit import constants_toml

    header = (f"This machine's CPU as a device preset: compute and memory constants from a micro-benchmark\n"
              f"(scripts/measure_collectives.py --only micro), measured {date} on {machine}.\n"
              f"The machine is shared by several users; best-of-N rates are kept.")
    body = constants_toml(constants, header)
    meta = '[meta]\nname = "this machine (CPU, micro-benchmarked)"\nmemory_levels = ["DRAM"]\n\n'
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{meta}{rest}" if rest else meta + body


def shared_device(device, processes: int):
    """Each process's share of `device` when `processes` processes compute at the same time on it.

    The preset's rates are for the whole machine (all cores, one process); tensor-parallel processes
    compute concurrently, so each gets 1/processes of the compute and of the memory bandwidth (an
    even-share assumption: it ignores scheduling overhead and cache effects)."""
    from workbench.errors import require_int

    require_int("processes", processes, low=1)
    if processes == 1:
        return device
    share = 1.0 / processes
    peaks = {k: v * share for k, v in device.peak_flops.items()}
    memory = tuple(level.__class__(level.name, level.capacity_bytes / processes, level.bandwidth_bytes_per_s * share,
                                   level.energy_pj_per_byte) for level in device.memory)
    return device.with_changes(name=f"{device.name} / {processes} processes", peak_flops=peaks, memory=memory)


def gemm_rate_table(bench: pd.DataFrame) -> pd.DataFrame:
    """Rates in GFLOP/s or GB/s for display."""
    out = bench.copy()
    out["rate_g"] = out["rate"] / 1e9
    return out[["benchmark", "size", "seconds", "rate_g", "unit"]].assign(
        unit=np.where(out.unit == "B/s", "GB/s", "GFLOP/s"))
