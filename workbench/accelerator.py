"""Roofline prediction of per-layer prefill and decode latency on one device, and its comparison with
measured reference-kernel runs.

Each Transformer block is split into its main operators (QKV projection, attention core, output
projection, FFN). An operator's time is max(FLOPs / (peak x efficiency), bytes moved / memory
bandwidth): the roofline. Bytes are the operator's weights plus its activations in and out (and the
KV cache it reads in decode); attention is assumed fused (the score matrix never leaves the chip),
which is optimistic for the unfused reference kernel. Each operator also pays the device's fixed
`kernel_launch_s` and streams at `memory_efficiency` of the bandwidth (the same conventions as
`workbench.schemes.common`). fp32 matmuls follow the framework's default precision: JAX runs them in
TF32 on Ampere and Hopper GPUs (`precision="default"`, the device lists a `tf32` peak) unless asked for
full precision (`precision="highest"`).

`measure_layer_latency` times one reference block (`workbench.kernels.reference.block_forward`)
under `jax.jit` on whatever backend JAX uses (CPU here; a GPU when one is lent), so the same code
compares a datasheet preset (data/devices/h100_sxm.toml) with a GPU run, or the micro-benchmarked
CPU preset (data/devices/this_machine_cpu.toml) with this machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from workbench.errors import require_choice, require_int, require_positive
from workbench.hardware import DeviceSpec
from workbench.models import TransformerConfig

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class Operator:
    """One operator of a block: FLOPs, bytes moved to/from memory, and its kernel kind."""

    name: str
    flops: float
    bytes: float
    kind: str = "gemm"


def block_operators(cfg: TransformerConfig, phase: str, seq_len: int, kv_len: int | None = None,
                    weight_bits: float = 32, activation_bits: float = 32) -> list[Operator]:
    """The operators of one block for a prefill of `seq_len` tokens or one decode step at `kv_len`."""
    require_choice("phase", phase, PHASES)
    require_int("seq_len", seq_len, low=1)
    require_positive("weight_bits", weight_bits)
    require_positive("activation_bits", activation_bits)
    s = seq_len if phase == "prefill" else 1
    t = seq_len if phase == "prefill" else require_int("kv_len", kv_len if kv_len is not None else seq_len, low=1)
    wb, ab = weight_bits / 8, activation_bits / 8
    kind = "gemm" if s > 1 else "gemv"
    e, pq, pkv, f = cfg.d_model, cfg.q_dim, cfg.kv_dim, cfg.d_ff
    qkv_w = e * (pq + 2 * pkv)
    ffn_mats = 3 if cfg.gated_ffn else 2
    return [
        Operator("qkv_proj", 2.0 * s * qkv_w, qkv_w * wb + s * (e + pq + 2 * pkv) * ab, kind),
        Operator("attention", cfg.attention_score_flops(s, t), (2 * s * pq + 2 * t * pkv) * ab, kind),
        Operator("out_proj", 2.0 * s * pq * e, pq * e * wb + s * (pq + e) * ab, kind),
        Operator("ffn", 2.0 * s * ffn_mats * e * f, ffn_mats * e * f * wb + s * (2 * e + (ffn_mats - 1) * f) * ab,
                 kind),
    ]


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
    from workbench.hardware import BITS

    bits = BITS[dtype]
    ops = block_operators(cfg, phase, seq_len, kv_len, weight_bits or bits, activation_bits or bits)
    arithmetic = matmul_dtype(device, dtype, precision)
    rows = []
    tokens = seq_len if phase == "prefill" else 1  # the rows every GEMM of the block multiplies
    for op in ops:
        compute_s = float(device.compute_time(op.flops, arithmetic, op.kind, rows=tokens))
        memory_s = float(device.stream_time(op.bytes, memory_level) if memory_level
                         else device.kernel_stream_time(op.bytes))
        launch_s = float(device.kernel_launch_s)
        rows.append({"operator": op.name, "flops": op.flops, "bytes": op.bytes, "kind": op.kind,
                     "intensity_flop_per_byte": op.flops / op.bytes, "compute_s": compute_s,
                     "memory_s": memory_s, "launch_s": launch_s, "latency_s": max(compute_s, memory_s) + launch_s,
                     "bound": "launch" if launch_s > max(compute_s, memory_s) else
                     ("compute" if compute_s >= memory_s else "memory")})
    return pd.DataFrame(rows)


def layer_latency(cfg: TransformerConfig, device: DeviceSpec, phase: str, seq_len: int,
                  kv_len: int | None = None, dtype: str = "fp32", precision: str = "default") -> float:
    """Roofline seconds of one block (sum over its operators) plus the device's per-layer overhead."""
    table = roofline(cfg, device, phase, seq_len, kv_len, dtype, precision=precision)
    return float(table["latency_s"].sum()) + device.layer_overhead_s


def ridge_point(device: DeviceSpec, dtype: str = "fp32", kind: str = "gemm") -> float:
    """FLOPs per byte above which an operator is compute-bound on `device`."""
    return device.peak(dtype) * device.efficiency(kind) / (device.memory[-1].bandwidth_bytes_per_s
                                                           * device.memory_efficiency)


# ---- measurement ------------------------------------------------------------------------------
def measure_layer_latency(cfg: TransformerConfig, phase: str, seq_len: int, kv_len: int | None = None,
                          reps: int = 10, seed: int = 0) -> dict:
    """Median seconds of one jitted reference block on JAX's default backend (compile excluded)."""
    import jax
    import jax.numpy as jnp

    from workbench.kernels import reference as ref

    require_choice("phase", phase, PHASES)
    require_int("reps", reps, low=1)
    params = ref.init_block_params(cfg, jax.random.PRNGKey(seed))
    e = cfg.d_model
    if phase == "prefill":
        x_se = jax.random.normal(jax.random.PRNGKey(seed + 1), (seq_len, e))
        positions_s = jnp.arange(seq_len)
        fn = jax.jit(lambda p, x, pos: ref.block_forward(cfg, p, x, pos)[0])
        args = (params, x_se, positions_s)
    else:
        kv_len = kv_len or seq_len
        shape = (kv_len, cfg.n_kv_heads, cfg.d_head)
        cache = {"k": jax.random.normal(jax.random.PRNGKey(seed + 2), shape),
                 "v": jax.random.normal(jax.random.PRNGKey(seed + 3), shape), "length": jnp.int32(kv_len - 1)}
        x_se = jax.random.normal(jax.random.PRNGKey(seed + 1), (1, e))
        fn = jax.jit(lambda p, x, pos, c: ref.block_forward(cfg, p, x, pos, c)[0])
        args = (params, x_se, jnp.array([kv_len - 1]), cache)
    fn(*args).block_until_ready()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - start)
    return {"model": cfg.name, "phase": phase, "seq_len": seq_len, "kv_len": kv_len if phase == "decode" else seq_len,
            "measured_s": float(np.median(times)), "min_s": float(np.min(times)), "reps": reps,
            "backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind}


def compare(measured: pd.DataFrame, device: DeviceSpec, models: dict[str, TransformerConfig],
            dtype: str = "fp32", precision: str = "default") -> pd.DataFrame:
    """Measured per-layer latencies beside the roofline prediction, with ratio and the bound."""
    rows = []
    for row in measured.itertuples():
        cfg = models[row.model]
        kv = int(row.kv_len) if row.phase == "decode" else None
        table = roofline(cfg, device, row.phase, int(row.seq_len), kv, dtype, precision=precision)
        predicted = float(table["latency_s"].sum()) + device.layer_overhead_s
        bound = "memory" if table["memory_s"].sum() > table["compute_s"].sum() else "compute"
        rows.append({"model": row.model, "phase": row.phase, "seq_len": int(row.seq_len), "kv_len": int(row.kv_len),
                     "measured_s": float(row.measured_s), "predicted_s": predicted,
                     "measured_over_predicted": float(row.measured_s) / predicted, "bound": bound,
                     "device": device.name})
    return pd.DataFrame(rows)
