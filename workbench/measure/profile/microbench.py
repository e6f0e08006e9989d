"""Micro-benchmarks of this machine's CPU, and what each table of them yields (one way to measure a machine).

`run_microbenchmarks(plan)` measures everything a device preset needs in one run, the calls of all benchmarks
interleaved round by round (`interleaved_min`: a burst of other users' load costs one call of each, not the
result), then the fixed costs; the campaign (`CAMPAIGN`, scripts/measure_collectives.py --only micro) and
`python -m workbench profile` (`PROFILE_PLANS`) differ only in their `Plan`. Rows: GEMM and GEMV rates per dtype
and size (int8 accumulates in int32), the best read-only streaming rate (a jitted sum, and a GEMV over a matrix
past any cache), chains of distinct GEMVs as a layer streams its weights (memory_efficiency), a GEMV chain
sweep across matrix sizes (small kernels the runtime does not split across the cores stream at one core's
rate: core_stream_bandwidth below small_kernel_bytes), skinny GEMMs of M rows (gemm_half_rows), and the
fixed costs (per-kernel launch inside a compiled program, per layer, per call, a decode step's host work,
numpy's per-op time). Best-of-N, because the machine is shared and the question is what the hardware and
runtime cost, not what a busy moment leaves. `workbench.measure.profile.device_toml` turns a table into a preset.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_int

GEMM_SIZES = (256, 512, 1024, 2048)
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

# Small kernels: the per-GEMV stream rate at several matrix sizes (`gemv_size_calls`), each the slope between
# two chain lengths whose distinct matrices (>= 64 MiB in the shorter chain, twice that in the longer) are past a
# 32 MiB last-level cache: with a shorter chain of 32 MiB the cache held part of it and the rate read high.
GEMV_SWEEP_BYTES = 128 * 2**20
GEMV_SWEEP_SIZES = (362, 512, 724, 1024, 1448, 2048)  # 0.5 to 16 MiB fp32 matrices
SMALL_KERNEL_STEP = 0.8  # small kernels must stream below this fraction of the large-kernel rate to count
DTYPES = ("fp32", "bf16", "int8")
FIXED_CHAIN_LENGTHS = (1, 17, 33, 65)  # kernels in one compiled program (the slope is the per-kernel cost)
FIXED_LAYER_COUNTS = (1, 3, 5, 9)  # tiny decoder layers in one compiled program (the slope is one layer)


@dataclass(frozen=True)
class Plan:
    """What one run of the micro-benchmarks measures: sizes, dtypes, calls per rate, fixed-cost batches."""

    gemm_sizes: tuple[int, ...] = GEMM_SIZES
    dtypes: tuple[str, ...] = ("fp32",)
    reps: int = 20
    stream_mib: int = 256
    chain_lengths: tuple[int, ...] = GEMV_CHAIN_LENGTHS
    sweep_sizes: tuple[int, ...] = ()
    gemm_rows: tuple[int, ...] = GEMM_ROWS
    fixed_calls: int = 50
    fixed_rounds: int = 30
    kernel_chain: tuple[int, ...] = FIXED_CHAIN_LENGTHS
    layer_counts: tuple[int, ...] = FIXED_LAYER_COUNTS
    numpy_gemm: bool = False

    def __post_init__(self) -> None:
        for name in ("reps", "fixed_calls", "fixed_rounds"):
            require_int(name, getattr(self, name), low=1)
        require_int("stream_mib", self.stream_mib, low=1, high=1 << 16)
        if not self.gemm_sizes or any(int(n) < 8 for n in (*self.gemm_sizes, *self.sweep_sizes)):
            raise WorkbenchError(f"gemm_sizes and sweep_sizes must be matrix sizes >= 8, got "
                                 f"{self.gemm_sizes} and {self.sweep_sizes}")
        if any(int(m) < 1 for m in self.gemm_rows):
            raise WorkbenchError(f"gemm_rows must be row counts >= 1, got {self.gemm_rows}")
        if "fp32" not in self.dtypes or not set(self.dtypes) <= set(DTYPES):
            raise WorkbenchError(f"dtypes must include fp32, each of {DTYPES}, got {self.dtypes}")
        for name in ("chain_lengths", "kernel_chain", "layer_counts"):
            if len(set(getattr(self, name))) < 2:
                raise WorkbenchError(f"{name} must hold two lengths or more (a slope), got {getattr(self, name)}")


# The campaign's plan (data/cluster/microbench.csv); the profile's full and quick plans add dtypes and numpy
# (the quick one runs in well under 30 s for the tests: fewer sizes, calls and fixed-cost points).
CAMPAIGN = Plan(sweep_sizes=GEMV_SWEEP_SIZES)
PROFILE_PLANS = {
    "full": Plan(dtypes=DTYPES, reps=10, sweep_sizes=(362, 512, 1024, 2048), numpy_gemm=True),
    "quick": Plan(gemm_sizes=(128, 256, 512), dtypes=DTYPES, reps=3, stream_mib=64, chain_lengths=(2, 4, 8),
                  sweep_sizes=(512, 2048), gemm_rows=(32, 512), fixed_calls=10, fixed_rounds=5,
                  kernel_chain=(1, 16), layer_counts=(1, 2), numpy_gemm=True),
}


def run_microbenchmarks(plan: Plan = CAMPAIGN) -> pd.DataFrame:
    """Every rate of `plan` (the calls of all benchmarks interleaved, best of `plan.reps`), then the fixed
    costs: one row per benchmark and size (benchmark, size, seconds, rate, unit, note)."""
    timed, not_run = matmul_calls(plan)
    timed.update(stream_calls(plan.stream_mib))
    timed.update(gemv_chain_calls(GEMV_CHAIN_N, plan.chain_lengths))
    timed.update(gemm_rows_calls(plan.gemm_rows))
    sweep = gemv_size_calls(plan.sweep_sizes)
    timed.update({("gemv_sweep", key): fn for key, fn in sweep.items()})
    best = interleaved_min(timed, calls=1, rounds=plan.reps)
    sweep_rows = gemv_size_rows({key: best.pop(("gemv_sweep", key)) for key in sweep})
    rows = [{"benchmark": k, "size": n, "seconds": s, "rate": rate_work(k, n) / s, "unit": rate_unit(k), "note": ""}
            for (k, n), s in best.items()]
    del timed, sweep
    fixed = run_fixed_cost_benchmarks(plan.fixed_calls, plan.fixed_rounds, plan.kernel_chain, plan.layer_counts)
    extra = numpy_gemm_rows(plan.gemm_sizes, plan.reps) if plan.numpy_gemm else []
    return pd.concat([pd.DataFrame(rows + not_run + sweep_rows + extra), fixed.assign(note="")], ignore_index=True)


def rate_work(benchmark: str, size: int) -> float:
    """The work one call of `benchmark` at `size` does: FLOPs (ops for int8) of a matmul, else bytes streamed."""
    kind, _, dtype = benchmark.rpartition("_")
    if kind in ("gemm", "numpy_gemm"):
        return 2.0 * size**3
    if kind == "gemv":
        return 2.0 * size**2
    return {"gemv_large": lambda n: 4.0 * n * n, "stream_scale": lambda n: 2.0 * n * 4,
            "stream_read": lambda n: 4.0 * n, "gemv_chain": lambda k: 4.0 * k * GEMV_CHAIN_N**2,
            "gemm_rows": gemm_rows_flops}[kind](size)


def rate_unit(benchmark: str) -> str:
    """The unit of `benchmark`'s rate: FLOP/s (op/s for int8) for matmuls, B/s for streaming."""
    if benchmark.rpartition("_")[0] in ("gemm", "gemv", "gemm_rows", "numpy_gemm"):
        return "op/s" if benchmark.endswith("int8") else "FLOP/s"
    return "B/s"


def matmul_calls(plan: Plan) -> tuple[dict, list[dict]]:
    """({("gemm_<dtype>" | "gemv_<dtype>", n): a call of a jitted matmul}, a "not run" row for each dtype and
    size the backend cannot run): seeded normal operands, cast to the dtype."""
    import jax
    import jax.numpy as jnp

    kinds = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "int8": jnp.int8}
    key0, key1 = jax.random.PRNGKey(0), jax.random.PRNGKey(1)
    calls, not_run = {}, []
    for dtype in plan.dtypes:
        out = jnp.int32 if dtype == "int8" else None
        fn = jax.jit(lambda a, b, out=out: jnp.matmul(a, b, preferred_element_type=out))
        for n in plan.gemm_sizes:
            a = jax.random.normal(key0, (n, n), jnp.float32).astype(kinds[dtype])
            for shape, b_shape in (("gemm", (n, n)), ("gemv", (n,))):
                b = jax.random.normal(key1, b_shape, jnp.float32).astype(kinds[dtype])
                def call(a=a, b=b, fn=fn):
                    return fn(a, b).block_until_ready()
                try:
                    call()
                except Exception as exc:  # noqa: BLE001 - a backend without this dtype: say so in the table
                    not_run.append({"benchmark": f"{shape}_{dtype}", "size": n, "seconds": np.nan, "rate": np.nan,
                                    "unit": rate_unit(f"{shape}_{dtype}"), "note": f"not run: {type(exc).__name__}"})
                    continue
                calls[(f"{shape}_{dtype}", n)] = call
    return calls, not_run


def stream_calls(stream_mib: int) -> dict:
    """{benchmark: a call} of the streaming rates over `stream_mib` MiB: a jitted sum (read only), a jitted
    scale (read + write), and a GEMV whose matrix is that large (past any cache: what streaming weights needs)."""
    import jax
    import jax.numpy as jnp

    elements = stream_mib * 2**20 // 4
    n = int(math.isqrt(elements))
    v = jnp.ones((elements,), jnp.float32)
    a, x = jnp.ones((n, n), jnp.float32), jnp.ones((n,), jnp.float32)
    scale, total, gemv = jax.jit(lambda v: v * 1.0001), jax.jit(jnp.sum), jax.jit(lambda a, b: a @ b)
    return {("gemv_large_fp32", n): lambda: gemv(a, x).block_until_ready(),
            ("stream_scale_fp32", elements): lambda: scale(v).block_until_ready(),
            ("stream_read_fp32", elements): lambda: total(v).block_until_ready()}


def numpy_gemm_rows(sizes, reps: int) -> list[dict]:
    """numpy's fp32 GEMM rate at each size (best of `reps` interleaved calls): what a numpy-only runtime gets."""
    mats = {int(n): np.ones((int(n), int(n)), np.float32) for n in sizes}
    best = interleaved_min({n: (lambda a=a: a @ a) for n, a in mats.items()}, calls=1, rounds=reps)
    return [{"benchmark": "numpy_gemm_fp32", "size": n, "seconds": s, "rate": 2.0 * n**3 / s, "unit": "FLOP/s",
             "note": ""} for n, s in best.items()]


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

    from workbench.machine.hardware import DeviceSpec

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
    chain = bench[bench.benchmark == "gemv_chain_fp32"]
    if len(chain) < 2:
        raise WorkbenchError("memory efficiency needs gemv_chain_fp32 rows at two chain lengths or more")
    streamed = chain["rate"] * chain["seconds"]
    slope, _ = _slope(streamed, chain["seconds"])
    if not grows(slope, float(streamed.max() - streamed.min()), float(chain["seconds"].abs().max())):
        raise WorkbenchError(f"gemv_chain_fp32 seconds do not grow with the chain (slope {slope:.3g} s/B): re-measure")
    return 1.0 / slope


def memory_total_bytes() -> float:
    """MemTotal from /proc/meminfo (bytes)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    raise OSError("MemTotal not found in /proc/meminfo")




# A fitted rise below this share of the largest time is rounding, not growth: a least-squares slope through equal
# times comes out as +-1e-28 s/B or so on some BLAS builds, never exactly 0 (float64's epsilon is 2.2e-16).
FLAT_RISE_SHARE = 1e-9


def grows(slope: float, span: float, largest: float) -> bool:
    """Whether a fitted line rises over `span` by more than float rounding of values up to `largest`."""
    return slope * span > FLAT_RISE_SHARE * largest


def _slope(xs, ys) -> tuple[float, float]:
    """(slope, intercept) of a least-squares line through (xs, ys)."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def interleaved_min(fns: dict, calls: int, rounds: int) -> dict:
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
    from workbench.model.models import tiny_config

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
    best = interleaved_min(fns, calls, rounds)
    best[("numpy_op", 8)] = interleaved_min({"np": lambda: np.add(a, b)}, calls * 20, rounds)["np"]
    out = pd.DataFrame([{"benchmark": k, "size": n, "seconds": s} for (k, n), s in best.items()])
    out["rate"], out["unit"] = 1.0 / out["seconds"], "1/s"
    return out


HOST_STEP_VOCAB, HOST_STEP_WIDTH = 32000, 512  # TinyLlama's vocabulary and width (the work is dispatch, not bytes)


def host_step_call():
    """A call doing one decode step's host work around its compiled programs, as the cluster's generation loop
    (`workbench.measure.cluster.e2e.generate_timed`) and most engines' token loops do: look up the new token's
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

