"""One builder: a micro-benchmark table -> a device preset TOML, every constant with its kind and source.

`write_device_toml` is the one function `python -m workbench profile` and the campaign script
(scripts/measure_collectives.py --only micro -> data/devices/this_machine_cpu.toml) write a device through.
Where the two former builders disagreed, one rule each, the one the stored campaign data were analysed with:
- mem_DRAM_bandwidth: the best read-only streaming rate of a jitted sum OR a GEMV over a matrix past any cache
  (a sum alone reads slower than the GEMV on this machine; what streaming weights reaches is the bound);
- efficiency_gemv = 1, kind "assumed": a GEMV is costed as memory-bound, its compute efficiency is not measured;
- peak_flops_<dtype> for every dtype whose GEMM ran (the campaign measures fp32 only);
- storage_read_bandwidth where a storage row was measured (the profile measures it, the campaign does not);
- jit_dispatch and program_dispatch always (both runs measure the fixed costs the same way);
- values rounded to 6 significant digits, constants sorted by name (`workbench.core.constants.constants_toml`);
- [meta] isa / isa_source: what the table recorded when it was measured (its isa and isa_source columns, read
  from /proc/cpuinfo by `workbench.measure.profile.isa.read_isa`), for a table without them the brand baseline of its
  machine label (`isa.BRAND_BASELINES`); core = "" with a core_note: the core's name is not detected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench.core.constants import Constant, constants_toml
from workbench.core.errors import WorkbenchError, require_int
from workbench.machine.hardware import ISA_FEATURES
from workbench.measure.profile.isa import IsaReading, baseline_reading
from workbench.measure.profile.microbench import (
    GEMM_ROWS_CHAIN,
    GEMM_ROWS_FLAT,
    GEMM_ROWS_N,
    GEMV_CHAIN_N,
    chain_stream_rate,
    fixed_costs,
    gemm_half_rows,
    gemm_rows_text,
    memory_total_bytes,
    small_kernel_stream,
)


@dataclass(frozen=True)
class Provenance:
    """How a micro-benchmark table was measured, as every constant's source says it: `where` (method, machine,
    date, file), the date, the calls behind each rate (`reps`) and the batches behind each fixed cost (`rounds`)."""

    where: str
    date: str
    reps: int
    rounds: int

    def __post_init__(self) -> None:
        if not self.where.strip() or not self.date.strip():
            raise WorkbenchError("provenance needs a non-empty where and date")
        require_int("reps", self.reps, low=1)
        require_int("rounds", self.rounds, low=1)

    @property
    def shared(self) -> str:
        """Why a fixed cost is a minimum, and over how many batches."""
        return f"a shared, busy machine: minimum over {self.rounds} interleaved batches"


def campaign_provenance(bench_file: str, machine: str, date: str, reps: int, rounds: int) -> Provenance:
    """The provenance of the campaign's stored table (scripts/measure_collectives.py --only micro)."""
    return Provenance(f"micro-benchmark on this machine ({machine}; {date}), {bench_file}", date, reps, rounds)


def profile_provenance(machine: str, date: str, reps: int, rounds: int) -> Provenance:
    """The provenance of a table `python -m workbench profile` measured just now."""
    return Provenance(f"python -m workbench profile on {machine}, {date}", date, reps, rounds)


def device_constants(bench: pd.DataFrame, source: Provenance) -> dict[str, Constant]:
    """The preset's constants from a micro-benchmark table (`microbench.run_microbenchmarks` rows)."""
    out = peak_constants(bench, source)
    peak = float(out["peak_flops_fp32"].value)
    out.update(memory_constants(bench, source))
    out.update(fixed_constants(bench, source))
    out.update(half_rows_constant(bench, source, peak))
    out.update(storage_constants(bench, source))
    out["efficiency_gemm"] = Constant("efficiency_gemm", 1.0, "1", "derived",
                                      "peak_flops_fp32 is itself the measured GEMM rate")
    out["efficiency_gemv"] = Constant("efficiency_gemv", 1.0, "1", "assumed",
                                      "a GEMV is costed as memory-bound through mem_DRAM_bandwidth x "
                                      "memory_efficiency (roofline); its compute efficiency is not measured")
    out["cores"] = Constant("cores", int(os.cpu_count() or 1), "1", "measured", "os.cpu_count() on this machine")
    out["mem_DRAM_capacity"] = Constant("mem_DRAM_capacity", memory_total_bytes(), "B", "measured",
                                        f"/proc/meminfo MemTotal on this machine ({source.date})")
    return out


def peak_constants(bench: pd.DataFrame, source: Provenance) -> dict[str, Constant]:
    """peak_flops_<dtype>: the best jitted GEMM rate of each dtype that ran (fp32 is required)."""
    out = {}
    for dtype in ("fp32", "bf16", "int8"):
        gemm = bench[(bench.benchmark == f"gemm_{dtype}") & bench.rate.notna()]
        if gemm.empty:
            continue
        best = gemm.loc[gemm.rate.idxmax()]
        out[f"peak_flops_{dtype}"] = Constant(
            f"peak_flops_{dtype}", float(best.rate), "op/s" if dtype == "int8" else "FLOP/s", "measured",
            f"{source.where}: best jitted {dtype} GEMM rate (n={int(best['size'])}, all cores; best of "
            f"{source.reps} interleaved calls)")
    if "peak_flops_fp32" not in out:
        raise WorkbenchError("no fp32 GEMM ran on this backend; nothing to build a device from")
    return out


def read_rate(bench: pd.DataFrame, source: Provenance) -> tuple[float, str]:
    """(B/s, how): the best read-only streaming rate, a jitted sum or a GEMV over a matrix past any cache."""
    read = bench[bench.benchmark == "stream_read_fp32"]
    gemv = bench[bench.benchmark == "gemv_large_fp32"]
    if read.empty:
        raise WorkbenchError("mem_DRAM_bandwidth needs a stream_read_fp32 row")
    how = f"a jitted sum over a {4 * int(read['size'].max()) / 2**20:g} MiB fp32 array"
    if not gemv.empty:
        how += f" or a jitted GEMV over a {4 * int(gemv['size'].max()) ** 2 / 2**20:g} MiB matrix"
    rate = max(float(read.rate.max()), float(gemv.rate.max()) if not gemv.empty else 0.0)
    return rate, (f"{source.where}: best read-only streaming rate: {how} (best of {source.reps} interleaved "
                  f"calls each)")


def memory_constants(bench: pd.DataFrame, source: Provenance) -> dict[str, Constant]:
    """mem_DRAM_bandwidth, memory_efficiency (a chain of layer-sized GEMVs), and the small-kernel pair."""
    rate, how = read_rate(bench, source)
    efficiency = min(chain_stream_rate(bench) / rate, 1.0)
    core_rate, split = small_kernel_stream(bench, rate * efficiency)
    chain = sorted(int(k) for k in bench.loc[bench.benchmark == "gemv_chain_fp32", "size"])
    sweep = bench[bench.benchmark == "gemv_size_fp32"].sort_values("size")
    swept = ", ".join(f"{s / 2**20:.2g} MiB {r / 1e9:.1f} GB/s" for s, r in zip(sweep["size"], sweep["rate"]))
    n, where, reps = GEMV_CHAIN_N, source.where, source.reps
    return {
        "mem_DRAM_bandwidth": Constant("mem_DRAM_bandwidth", rate, "B/s", "measured", how),
        "memory_efficiency": Constant(
            "memory_efficiency", efficiency, "1", "measured",
            f"{where}: streaming rate of layer-sized GEMVs, 4 n^2 B over the slope of one jitted program of K "
            f"dependent GEMVs over K distinct {n}x{n} fp32 matrices (K = {', '.join(map(str, chain))}; "
            f"{4 * n**2 // 2**20} MiB each, past any cache at the largest K), over the best read-only streaming "
            f"rate (best of {reps} interleaved calls each)"),
        "core_stream_bandwidth": Constant(
            "core_stream_bandwidth", core_rate, "B/s", "measured",
            f"{where}: GEMV chain sweep, per-GEMV slope between two chain lengths past the cache at each matrix "
            f"size (best of {reps} interleaved calls): {swept or 'no sizes'}; the median rate of the sizes below "
            f"the split (microbench.small_kernel_stream; 0: no split seen)"),
        "small_kernel_bytes": Constant(
            "small_kernel_bytes", split, "B", "measured",
            f"{where}: GEMV chain sweep (rates under core_stream_bandwidth): the smallest swept kernel streaming "
            f"at or past the midpoint of the small kernels' rate and bandwidth x memory_efficiency "
            f"(microbench.small_kernel_stream; 0: no split seen)"),
    }


def half_rows_constant(bench: pd.DataFrame, source: Provenance, peak: float) -> dict[str, Constant]:
    """gemm_half_rows: the rows at which a skinny GEMM runs at half of `peak` (0: no rows or no loss)."""
    return {"gemm_half_rows": Constant(
        "gemm_half_rows", gemm_half_rows(bench, peak), "rows", "measured",
        f"{source.where}: GEMM rows sweep, one jitted program of {GEMM_ROWS_CHAIN} dependent (M x {GEMM_ROWS_N}) @ "
        f"({GEMM_ROWS_N} x {GEMM_ROWS_N}) fp32 GEMMs over distinct matrices at each M (best of {source.reps} "
        f"interleaved calls): {gemm_rows_text(bench)} against peak_flops_fp32 {peak / 1e9:.2f} GFLOP/s; least "
        f"squares of log(rate / peak) = log(M / (M + h)), h >= 0 (microbench.gemm_half_rows; 0: every M within "
        f"{GEMM_ROWS_FLAT:.0%} of the peak)")}


def fixed_constants(bench: pd.DataFrame, source: Provenance) -> dict[str, Constant]:
    """kernel_launch, layer_overhead, step_overhead, program_dispatch, jit_dispatch, numpy_op (`fixed_costs`)."""
    fixed = fixed_costs(bench)
    chain = ", ".join(str(int(k)) for k in sorted(bench.loc[bench.benchmark == "kernel_chain", "size"]))
    layers = ", ".join(str(int(k)) for k in sorted(bench.loc[bench.benchmark == "tiny_layers", "size"]))
    where, shared = source.where, source.shared
    texts = {
        "kernel_launch": f"slope over K of one jitted program of K dependent 8x8 matmuls (K = {chain}; one XLA "
                         f"CPU thunk each)",
        "layer_overhead": f"per-layer slope of one jitted program of L tiny decoder layers (d_model 64; L = "
                          f"{layers}; {fixed['per_layer'] * 1e6:.2f} us per layer) minus KERNELS_PER_LAYER x "
                          f"kernel_launch, floored at 0",
        "step_overhead": "one decode step's host work outside its compiled programs (embedding lookup and copy to "
                         "the host, input hand-over, output slice, argmax read back; microbench.host_step_call, "
                         "as workbench.measure.cluster.e2e.generate_timed runs it)",
        "program_dispatch": "intercept of the matmul-chain line, i.e. one call of a compiled program from Python "
                            "(dispatch, argument handling, thunk executor start, block_until_ready)",
        "jit_dispatch": "one call of a jitted scalar x + 1 incl. block_until_ready",
        "numpy_op": "one np.add of two 8-element float32 arrays",
    }
    value = {**fixed, "step_overhead": fixed["host_step"]}
    return {k: Constant(k, value[k], "s", "measured", f"{where}: {text}; {shared}") for k, text in texts.items()}


def storage_constants(bench: pd.DataFrame, source: Provenance) -> dict[str, Constant]:
    """storage_read_bandwidth where a storage row was measured (the campaign measures none)."""
    storage = bench[bench.benchmark == "storage_read"]
    if storage.empty:
        return {}
    row = storage.iloc[0]
    return {"storage_read_bandwidth": Constant(
        "storage_read_bandwidth", float(row.rate), "B/s", "measured",
        f"{source.where}: {row.note} of {int(row['size']) // 2**20} MiB")}


# What a profiled device's [meta] says of its core: the profile reads the instruction-set features, not the core's
# name (an id of data/constants/cores.toml, stated by hand).
CORE_NOTE = ("not detected: the profile reads the instruction-set features, not the core's name; state core = "
             "\"<id>\" by hand")


def device_toml(constants: dict[str, Constant], name: str, header: str, isa: IsaReading | None = None) -> str:
    """A device preset file: the `header` as comments, `[meta]` (name, class: a CPU, what the micro-benchmarks
    measure, one DRAM level; with `isa`, its features, their source and an undetected core), one table per
    constant."""
    body = constants_toml(constants, header)
    meta = f'[meta]\nname = {_quoted(name)}\ndevice_class = "cpu"\nmemory_levels = ["DRAM"]\n'
    if isa is not None:
        meta += (f"isa = [{', '.join(_quoted(f) for f in isa.features)}]\nisa_source = {_quoted(isa.source)}\n"
                 f'core = ""\ncore_note = {_quoted(CORE_NOTE)}\n')
    head, _, rest = body.partition("\n\n")
    return f"{head}\n\n{meta}\n{rest}" if header else f"{meta}\n{body}"


def table_isa(bench: pd.DataFrame, source: Provenance, label: str) -> IsaReading:
    """The features a micro-benchmark table recorded (its `isa` and `isa_source` columns, written when it was
    measured), or for a table without them the brand baseline of its machine `label` (`isa.baseline_reading`)."""
    if {"isa", "isa_source"} <= set(bench.columns):
        features, where = bench["isa"].iloc[0], str(bench["isa_source"].iloc[0])
        found = tuple(str(features).split()) if isinstance(features, str) else ()
        bad = sorted(set(found) - set(ISA_FEATURES))
        if bad:
            raise WorkbenchError(f"the table's isa column names unknown features {bad}; known: "
                                 f"{', '.join(ISA_FEATURES)}")
        return IsaReading(found, where)
    return baseline_reading(label, source.where)


def _quoted(text: str) -> str:
    """A TOML basic string."""
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_device_toml(out: str | Path, bench: pd.DataFrame, source: Provenance, name: str,
                      header: str) -> dict[str, Constant]:
    """Build the device preset from `bench` and write it to `out` atomically: the one way a device TOML is
    written (the profile command and the campaign script). Returns the constants."""
    from workbench.core.io import write_text_atomic

    constants = device_constants(bench, source)
    label = str(bench["machine"].iloc[0]) if "machine" in bench.columns else source.where
    write_text_atomic(Path(out), device_toml(constants, name, header, table_isa(bench, source, label)))
    return constants


THIS_MACHINE_NAME = "this machine (CPU, micro-benchmarked)"


def write_this_machine_cpu(out: str | Path, bench: pd.DataFrame, bench_file: str) -> dict[str, Constant]:
    """data/devices/this_machine_cpu.toml from the campaign's table (`microbench.CAMPAIGN`; its date and machine
    columns say when and where), through `write_device_toml`."""
    from workbench.measure.profile.microbench import CAMPAIGN

    if not {"date", "machine"} <= set(bench.columns):
        raise WorkbenchError(f"{bench_file} needs date and machine columns (the campaign script writes them)")
    machine, date = str(bench["machine"].iloc[0]), str(bench["date"].iloc[0])
    header = (f"This machine's CPU as a device preset: compute and memory constants from a micro-benchmark\n"
              f"(scripts/measure_collectives.py --only micro, about half a minute), measured {date} on {machine}.\n"
              f"The machine is shared by several users and was busy: best-of-N rates and minimum fixed costs\n"
              f"over interleaved batches are kept.")
    source = campaign_provenance(bench_file, machine, date, CAMPAIGN.reps, CAMPAIGN.fixed_rounds)
    return write_device_toml(out, bench, source, THIS_MACHINE_NAME, header)
