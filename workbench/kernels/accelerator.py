"""Roofline prediction of per-layer prefill and decode latency on one device, and its comparison with
measured reference-kernel runs.

Each Transformer block is split into the operators the unfused reference kernel runs (`block_operators`:
projections, attention, FFN, and the elementwise norms, rotary, activation, residual and cache copy): the
schemes' operator table unfused (`common.layer_operators(fused=False)`), costed by the same `common.cost`. An
operator's time is max(FLOPs / (peak x efficiency), bytes moved / memory bandwidth): the roofline. Bytes
are the operator's weights plus its activations in and out, the KV cache it reads in decode, and the score
matrix's passes through memory (the reference attention is not fused). Each operator also pays the
device's fixed `kernel_launch_s` per kernel it launches and streams at `memory_efficiency` of the bandwidth
(the same conventions as `workbench.schemes.common`). fp32 matmuls follow the framework's default
precision: JAX runs them in TF32 on Ampere and Hopper GPUs (`precision="default"`, the device lists a `tf32`
peak) unless asked for full precision (`precision="highest"`).

`measure_layer_latency` times one reference block (`workbench.kernels.reference.block_forward`)
under `jax.jit` on whatever backend JAX uses (CPU here; a GPU when one is lent), so the same code
compares the measured H100 preset (data/devices/h100_sxm_measured.toml; the GPU lent on 2026-11-24,
`scripts/measure_accelerator.py`, data/accelerator/h100_sxm/) with a GPU run, or the micro-benchmarked
CPU preset (data/devices/this_machine_cpu.toml) with this machine.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice, require_int, require_positive
from workbench.machine.hardware import DeviceSpec
from workbench.model.models import TransformerConfig
from workbench.schemes.base import Workload
from workbench.schemes.common import Operator, cost, fixed_layer_time, layer_operators

PHASES = ("prefill", "decode")


def block_operators(cfg: TransformerConfig, phase: str, seq_len: int, kv_len: int | None = None,
                    weight_bits: float = 32, activation_bits: float = 32) -> list[Operator]:
    """The unfused operator table of one reference block (`common.layer_operators(fused=False)`, the same
    table the schemes cost fused) for a prefill of `seq_len` tokens or one decode step at `kv_len`."""
    require_choice("phase", phase, PHASES)
    require_int("seq_len", seq_len, low=1)
    require_positive("weight_bits", weight_bits)
    require_positive("activation_bits", activation_bits)
    kv = seq_len if phase == "prefill" else require_int("kv_len", kv_len if kv_len is not None else seq_len, low=1)
    workload = Workload(phase, seq_len, kv, weight_bits, activation_bits, output_head=False)
    return layer_operators(cfg, workload, fused=False)


PRECISIONS = ("default", "highest")


def matmul_dtype(device: DeviceSpec, dtype: str, precision: str = "default") -> str:
    """The arithmetic an fp32 matmul runs in: TF32 where the device has it and the precision is the
    framework default (JAX on Ampere/Hopper), else `dtype` itself."""
    require_choice("precision", precision, PRECISIONS)
    return "tf32" if dtype == "fp32" and precision == "default" and "tf32" in device.peak_flops else dtype


def roofline(cfg: TransformerConfig, device: DeviceSpec, phase: str, seq_len: int, kv_len: int | None = None,
             dtype: str = "fp32", weight_bits: float | None = None, activation_bits: float | None = None,
             memory_level: str | None = None, precision: str = "default") -> pd.DataFrame:
    """Per-operator roofline of one block: FLOPs, bytes, compute / memory time, launch, the bound, latency."""
    from workbench.machine.hardware import BITS

    bits = BITS[dtype]
    ops = block_operators(cfg, phase, seq_len, kv_len, weight_bits or bits, activation_bits or bits)
    arithmetic = matmul_dtype(device, dtype, precision)
    rows = []
    for c in cost(device, [replace(op, dtype=arithmetic) for op in ops], memory_level):
        op = c.operator
        rows.append({"operator": op.name, "flops": op.flops, "bytes": op.bytes, "kind": op.kind, "kernels": op.kernels,
                     "intensity_flop_per_byte": op.flops / op.bytes, "compute_s": float(c.compute_s),
                     "memory_s": float(c.memory_s), "launch_s": float(c.launch_s), "latency_s": float(c.time_s),
                     "bound": c.bound})
    return pd.DataFrame(rows)


def layer_latency(cfg: TransformerConfig, device: DeviceSpec, phase: str, seq_len: int,
                  kv_len: int | None = None, dtype: str = "fp32", precision: str = "default") -> float:
    """Roofline seconds of one block (sum over its unfused operators, each with its own launches) plus what is
    left of the layer's fixed time (`block_overhead`)."""
    table = roofline(cfg, device, phase, seq_len, kv_len, dtype, precision=precision)
    return float(table["latency_s"].sum()) + block_overhead(device, table)


def block_overhead(device: DeviceSpec, table: pd.DataFrame) -> float:
    """The per-layer fixed seconds an unfused block adds to its own kernels' launches. `layer_overhead_s` is
    defined under the fused count (`common.KERNELS_PER_LAYER` launches + it = a layer's measured fixed time,
    `common.fixed_layer_time`), so a costing that launches another count keeps that total, never less than its
    own launches: max(0, fixed_layer_time - the block's launches)."""
    return max(0.0, fixed_layer_time(device) - float(table["launch_s"].sum()))


def ridge_point(device: DeviceSpec, dtype: str = "fp32", kind: str = "gemm") -> float:
    """FLOPs per byte above which an operator is compute-bound on `device`."""
    return device.peak(dtype) * device.efficiency(kind) / (device.memory[-1].bandwidth_bytes_per_s
                                                           * device.memory_efficiency)


# ---- measurement ------------------------------------------------------------------------------
JAX_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# Instructions of an optimised HLO module that launch no kernel of their own (views, plumbing, constants).
_NO_KERNEL = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all", "partition-id",
              "replica-id")


def _computations(hlo_text: str) -> dict[str, list[str]]:
    """The instruction lines of each computation of an HLO module's text, by name (ENTRY under "ENTRY")."""
    comps: dict[str, list[str]] = {}
    current = None
    for line in hlo_text.splitlines():
        head = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            current = "ENTRY" if head.group(1) else head.group(2)
            comps[current] = []
        elif current is not None and line.strip() == "}":
            current = None
        elif current is not None and "=" in line:
            comps[current].append(line.strip())
    return comps


def _opcode(line: str) -> str | None:
    """The opcode of one HLO instruction line (`%name = <type> opcode(...)`; a tuple type has spaces)."""
    _, sep, rest = line.partition("=")
    rest = rest.strip()
    if not sep or not rest:
        return None
    if rest.startswith("("):  # a tuple type: skip to its closing parenthesis
        depth = 0
        for i, ch in enumerate(rest):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                rest = rest[i + 1:]
                break
    else:
        rest = rest.partition(" ")[2]
    op = re.match(r"\s*([a-z][a-z0-9\-]*)\(", rest)
    return op.group(1) if op else None


def kernel_count(hlo_text: str) -> int:
    """Kernels one run of a compiled executable launches: the ENTRY computation's instructions except
    views and plumbing (`_NO_KERNEL`); a fusion is one kernel, a call (an XLA:GPU command buffer) counts
    the kernels of the computation it calls."""
    comps = _computations(hlo_text)
    if "ENTRY" not in comps:
        raise WorkbenchError("hlo_text: no ENTRY computation found (pass compiled HLO text)")

    def count(name: str, depth: int = 0) -> int:
        total = 0
        for line in comps.get(name, []):
            op = _opcode(line)
            if op is None or op in _NO_KERNEL:
                continue
            called = re.search(r"to_apply=%?([\w.\-]+)", line)
            if op == "call" and called and depth < 8:
                total += count(called.group(1), depth + 1)
            else:
                total += 1
        return total

    return count("ENTRY")


def _layer_sets(cfg: TransformerConfig, phase: str, kv_len: int, seed: int, dtype: str, count: int) -> list[dict]:
    """`count` distinct layers' weights (and, for decode, each its own K/V cache of `kv_len` slots, all but
    the last filled), in `dtype`; drawn by one jitted initialiser so that many sets cost one compile."""
    import jax
    import jax.numpy as jnp

    from workbench.kernels import reference as ref

    jdt = getattr(jnp, JAX_DTYPES[dtype])
    shape = (kv_len, cfg.n_kv_heads, cfg.d_head)

    def draw(key):
        k_params, k_k, k_v = jax.random.split(key, 3)
        layer = {"params": ref.init_block_params(cfg, k_params, dtype=jdt)}
        if phase == "decode":
            layer["cache"] = {"k": jax.random.normal(k_k, shape).astype(jdt),
                              "v": jax.random.normal(k_v, shape).astype(jdt), "length": jnp.int32(kv_len - 1)}
        return layer

    init = jax.jit(draw)
    return [init(jax.random.PRNGKey(seed + 10 * k)) for k in range(count)]


def _block_call(cfg: TransformerConfig, phase: str, seq_len: int, kv_len: int, seed: int, dtype: str,
                weight_sets: int = 1, layers: int = 1):
    """A jitted run of `layers` reference blocks in turn (each its own weights, as in a model) and
    `weight_sets` argument tuples (distinct weights and caches, so calls in turn stream from memory, not
    from a cache that holds one set), every array in `dtype`."""
    import jax
    import jax.numpy as jnp

    from workbench.kernels import reference as ref

    jdt = getattr(jnp, JAX_DTYPES[dtype])
    s = seq_len if phase == "prefill" else 1
    x_se = jax.random.normal(jax.random.PRNGKey(seed + 1), (s, cfg.d_model)).astype(jdt)
    positions_s = jnp.arange(seq_len) if phase == "prefill" else jnp.array([kv_len - 1])
    drawn = _layer_sets(cfg, phase, kv_len, seed, dtype, weight_sets * layers)
    sets = [(drawn[k * layers:(k + 1) * layers], x_se, positions_s) for k in range(weight_sets)]

    def run(stack, x, pos):
        for layer in stack:
            x = ref.block_forward(cfg, layer["params"], x, pos, layer.get("cache"))[0]
        return x

    return jax.jit(run), sets


def time_calls(fn, arg_sets: list[tuple], reps: int, pipelined: bool = True) -> tuple[list[float], float]:
    """Seconds of `reps` calls of `fn`, each waited for (arguments rotating over `arg_sets`, each set run
    once first), and, with `pipelined`, the mean seconds per call of `reps` calls issued back to back and
    waited for once (NaN without)."""
    for args in arg_sets:
        fn(*args).block_until_ready()
    times = []
    for i in range(reps):
        start = time.perf_counter()
        fn(*arg_sets[i % len(arg_sets)]).block_until_ready()
        times.append(time.perf_counter() - start)
    if not pipelined:
        return times, float("nan")
    start = time.perf_counter()
    outs = [fn(*arg_sets[i % len(arg_sets)]) for i in range(reps)]
    outs[-1].block_until_ready()
    return times, (time.perf_counter() - start) / reps


def measure_layer_latency(cfg: TransformerConfig, phase: str, seq_len: int, kv_len: int | None = None,
                          reps: int = 10, seed: int = 0, dtype: str = "fp32", pipelined: bool = False,
                          rotate_bytes: float = 0.0, layers: int = 1) -> dict:
    """Median seconds per block of one jitted run of `layers` reference blocks on JAX's default backend (compile excluded), each call
    waited for; with `pipelined`, also the mean of `reps` calls issued back to back and waited for once
    (dispatch overlapped with the device's work, as a model's layers run) and the kernels it launches.
    Calls rotate over enough weight sets to stream at least `rotate_bytes` (a layer's weights in a cache
    larger than them would otherwise be read from the cache; each real layer has its own)."""
    import jax

    require_choice("phase", phase, PHASES)
    require_choice("dtype", dtype, tuple(JAX_DTYPES))
    require_int("reps", reps, low=1)
    require_int("layers", layers, low=1)
    kv_len = (kv_len or seq_len) if phase == "decode" else seq_len
    from workbench.machine.hardware import BITS

    layer_bytes = cfg.block_weight_bytes(BITS[dtype])
    weight_sets = max(1, min(64, int(np.ceil(rotate_bytes / (layer_bytes * layers)))))
    jitted, sets = _block_call(cfg, phase, seq_len, kv_len, seed, dtype, weight_sets, layers)
    fn = jitted.lower(*sets[0]).compile()
    times, pipelined_s = time_calls(fn, sets, reps, pipelined)
    row = {"model": cfg.name, "phase": phase, "seq_len": seq_len, "kv_len": kv_len, "dtype": dtype,
           "layers": layers, "measured_s": float(np.median(times)) / layers, "min_s": float(np.min(times)) / layers,
           "reps": reps, "weight_sets": weight_sets, "backend": jax.default_backend(),
           "device_kind": jax.devices()[0].device_kind}
    if pipelined:
        row["pipelined_s"] = pipelined_s / layers
        row["kernels"] = kernel_count(fn.as_text()) / layers
    return row


def compare(measured: pd.DataFrame, device: DeviceSpec, models: dict[str, TransformerConfig],
            dtype: str = "fp32", precision: str = "default") -> pd.DataFrame:
    """Measured per-layer latencies beside the roofline prediction, with ratio and the bound."""
    rows = []
    for row in measured.itertuples():
        cfg = models[row.model]
        kv = int(row.kv_len) if row.phase == "decode" else None
        table = roofline(cfg, device, row.phase, int(row.seq_len), kv, dtype, precision=precision)
        predicted = float(table["latency_s"].sum()) + block_overhead(device, table)
        bound = "memory" if table["memory_s"].sum() > table["compute_s"].sum() else "compute"
        rows.append({"model": row.model, "phase": row.phase, "seq_len": int(row.seq_len), "kv_len": int(row.kv_len),
                     "measured_s": float(row.measured_s), "predicted_s": predicted,
                     "measured_over_predicted": float(row.measured_s) / predicted, "bound": bound,
                     "device": device.name})
    return pd.DataFrame(rows)
