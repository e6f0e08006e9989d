"""Conventions every scheme evaluator shares, so one device, model and workload cost the same everywhere.

JAX-free and cheap to import. The conventions (each scheme module builds on these, none re-derives them):

* **Compute dtype** (`compute_dtype`): a matmul runs in the narrowest arithmetic class that holds both
  operands' codes (a block format's scale share is not a code bit: q8_0 = 8.5 bits is int8 arithmetic):
  more than 16 bits -> fp32, more than 8 -> fp16, more than 4 -> int8, else int4. So W8A16 and
  q4_0 (4.5 bits) weights with fp16 activations compute in fp16, W8A8 in int8, fp32 activations in fp32.
  A device without that arithmetic runs it at the nearest wider dtype it lists (`DeviceSpec.rate_dtype`,
  the one rule): a Cortex-A57 without fp16 arithmetic computes fp16 work at its fp32 rate; a device that
  lists no rate at or above the class is a one-line error, never a narrower rate. A paper that computes in
  another precision says so through the operands it passes (Galaxy's CPU runs exchange fp32 activations,
  `activation_bits_cpu` in data/constants/galaxy.toml; STI dequantises its shards to fp32 before the GEMM).
* **Kernel shape** (`kernel_kind`): one new token (decode) is a GEMV, more are a GEMM; the efficiency is
  the device's for that shape (`DeviceSpec.efficiency`), falling for small kernels of either shape, and for
  a weight GEMM of few rows (`kernel_times` passes its tokens: `DeviceSpec.gemm_half_rows`).
* **Roofline per kernel** (`roofline_time`): max(FLOPs at that rate, bytes the kernel streams from the
  device's outermost memory at its bandwidth x `memory_efficiency`, or at one core's rate for a kernel too
  small to be split across the cores: `DeviceSpec.kernel_stream_time`), plus the device's fixed
  `kernel_launch_s` for every kernel that runs (a split kernel is still one launch on each device, so the
  fixed cost does not shrink with the split). A weight read by several kernels (row tiles) is streamed by
  each. The small-kernel loss applies to GEMMs and GEMVs alike, at each kernel's FLOPs.
* **Streaming is not compute** (`roofline_time(bound=...)`, `memory_share`): each kernel's busy time goes
  whole to the side of its roofline that binds it (streaming strictly slower: memory; else compute; the
  connective blocks are all streaming). The registry (`schemes.base.register`) splits every roofline
  scheme's compute_s by the memory-bound share of the step on its devices into memory_s and compute_s,
  summing to the roofline time bit for bit: exact for one device, the devices' busy-time-weighted share
  where a scheme splits the step across several. A scheme that runs whole layers on each device in turn
  (`layerwise_mp`, `pipeline_offload`) splits exactly itself: its devices' own layers' table rows
  (`streaming_share`).
* **Bytes** (`weight_bytes`): parameters x bits / 8 for any bits > 0, so 4.5-bit block formats
  (q4_0: 4-bit codes + an fp16 scale per 32) cost 0.5625 B per weight.
* **One layer on one device: the operator table** (`layer_operators`, `cost`): a layer is a list of typed
  `Operator` rows (FLOPs, bytes streamed, kernels launched, operand dtype, GEMM/GEMV/elementwise, a GEMM's
  rows), for any slice of heads, FFN columns and tokens (arrays: one slice per device); `cost(device, rows)`
  is the one roofline every layer is costed by: per row its compute, memory and launch seconds and what binds
  it (`OperatorCost.bound`). Fused (the schemes'): Q/K/V, output and FFN GEMMs each reading their weights;
  attention (QK^T and softmax(QK^T)V) reading the KV cache of the attended tokens in decode (in prefill K and
  V are produced by the Q/K/V GEMM and consumed at once); two connective blocks (residual add + norm:
  `CONNECTIVE_PASSES` passes of the new tokens' activations through the outermost memory at the bulk rate,
  memory-bound, one launch each). `kernel_times`, `attention_time`, `connective_time`, `layer_parts` and
  `layer_time` (the rows' sum + the device's fixed per-layer framework time, `DeviceSpec.layer_overhead_s`)
  are views of it, and `roofline_time` is a one-row table. Unfused (`fused=False`): the accelerator study's
  12-17 kernels of the JAX reference block (`unfused_operators`).
* **The kernel count, decided once** (`KERNELS_PER_LAYER` = 7, the fused table's): every scheme charges 7
  launches per layer, and the measured presets' `layer_overhead` is calibrated under that count (the per-layer
  slope of the micro-benchmark's tiny layers minus 7 launches: `profile.microbench.fixed_costs`). The
  accelerator study charges its unfused rows' own launches (checked against compiled HLO on the lent H100,
  `studies.cluster.gpu_kernel_samples`) plus what is left of the layer's fixed time defined under 7
  (`accelerator.block_overhead`: max(0, 7 launches + layer_overhead - its own launches)), so no costing charges
  a layer more fixed time than was measured for it (the CPU preset's 16 unfused launches already exceed it: 0).
* **Mixtures of experts** (`TransformerConfig.is_moe`): the FFN rows are the experts a token computes. A slice
  of `cols` of `d_ff` columns is that slice of *every* expert (tensor parallelism inside each expert, as
  distributed-llama v0.16 and exo's tensor mode split them); FFN up / down compute the token's k routed and its
  shared experts (`experts_per_token`) and stream the slices of the experts the step's `tokens` touch: the
  expected distinct experts of the routing model (`routing.expected_distinct`, `Workload.routing`: k for one
  token, nearly all for a long prompt) plus the shared ones, from the outermost memory (misses from storage are a
  scheme's: `schemes.moe`). A `router` row (the d_model x n_experts gate, stored in f32 by both llama.cpp's GGUF
  files and distributed-llama: `ROUTER_BITS`) runs whole on every device that holds FFN columns, one more kernel
  (`kernels_per_layer`: 8). A model with dense first layers (DeepSeek-V2-Lite) costs the mean layer: its FFN rows
  blend the dense and MoE layers' FLOPs and bytes by their counts. Schemes whose FFN cost does not come from this
  table register with `moe=False` and are n/a for a MoE model (`schemes.base.register`).
* **Latent attention** (`is_mla`): Q/K/V and output rows stream a slice of `qkv_weight_params` /
  `out_weight_params` in proportion to their heads; decode attention reads the whole latent cache
  (`kv_elements_per_token` per token) on every device that holds a head.
* **Output head** (`lm_head_time`): a decoder's next-token logits (one token's d_model x vocab GEMV, the
  tied or untied output matrix); an encoder has none. Every scheme costs it in a generation step
  (`Workload.output_head`, the arena's default) where its paper places it: on the master / primary
  (TPI-LLM, Hepti, the single-device schemes) or split by vocabulary rows with the embeddings
  (`output_head_time`: Galaxy's TP schemes, the MCU chips). A paper that times the backbone only
  (Galaxy's classifiers) sets `output_head=False`. The embedding lookup (a gather of S rows) is not
  costed.

`step_time` adds the layers and, when the scheme's scope includes it, the head: the per-device compute
time any single-device evaluator reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.machine import kernel_cost
from workbench.machine.hardware import DeviceSpec
from workbench.model.models import TransformerConfig
from workbench.model.routing import expected_distinct
from workbench.schemes.workload import Workload

# Passes of (tokens, E) activations through memory in one connective block: residual add (read two,
# write one) + norm (read for the statistics, read and write to normalise). Dropout is the identity.
CONNECTIVE_PASSES = 6
# Kernels one device launches per layer: Q/K/V, attention, output projection, FFN up, FFN down and two
# connective blocks (each residual add + norm fused into one): the fused operator table's count, the one every
# scheme charges and the measured `layer_overhead` is calibrated under (see the module docstring).
KERNELS_PER_LAYER = 7
# Bits per router weight: llama.cpp keeps `ffn_gate_inp.weight` unquantised (src/llama-quant.cpp, "do not
# quantize expert gating tensors") and distributed-llama stores the gate in F32 (src/llm.cpp:163).
ROUTER_BITS = 32.0
# Arithmetic classes from the narrowest up: (widest operand bits the class holds, dtype).
_DTYPE_CLASSES = ((4, "int4"), (8, "int8"), (16, "fp16"), (32, "fp32"))
# The two sides of a kernel's roofline: the part of a step's busy time that streaming binds, and the part the
# arithmetic binds (`roofline_time(bound=...)`; the breakdown's memory_s and compute_s).
BOUNDS = ("memory", "compute")


# ---- precision ------------------------------------------------------------------------------------
def require_bits(name: str, bits: float) -> float:
    """Return `bits` as a float if it is a finite number > 0 (fractional allowed, e.g. 4.5), else raise."""
    if not isinstance(bits, int | float | np.integer | np.floating) or isinstance(bits, bool) \
            or not math.isfinite(float(bits)) or bits <= 0:
        raise WorkbenchError(f"{name} must be a finite number of bits > 0 (e.g. 4.5 for q4_0), got {bits!r}")
    return float(bits)


def weight_bytes(params, bits: float):
    """Bytes of `params` weights at `bits` per weight (any bits > 0; vectorised over `params`)."""
    return params * require_bits("weight_bits", bits) / 8


def code_bits(bits: float) -> float:
    """The bits of an element's code: a block format's fractional share (q4_0's 4.5 = 4-bit codes + an fp16
    scale per 32; q8_0's 8.5) is its per-block scale, applied outside the multiply-accumulate."""
    return float(math.floor(bits)) if bits >= 1 and not float(bits).is_integer() else float(bits)


def operand_dtype(weight_bits: float, activation_bits: float) -> str:
    """The arithmetic class that holds both operands' codes: > 16 bits fp32, > 8 fp16, > 4 int8, else int4
    (so q4_0 weights x q8_0 activations run as int8 dot products, as llama.cpp-family engines do)."""
    widest = max(code_bits(require_bits("weight_bits", weight_bits)),
                 code_bits(require_bits("activation_bits", activation_bits)))
    for bits, dtype in _DTYPE_CLASSES:
        if widest <= bits:
            return dtype
    raise WorkbenchError(f"operands of {widest:g} bits are wider than fp32 (32 bits); no arithmetic for them")


def compute_dtype(device: DeviceSpec, weight_bits: float, activation_bits: float) -> str:
    """The dtype whose peak the device runs a matmul of these operands at: `DeviceSpec.rate_dtype` of their
    class (the nearest wider listed one; an error when the device lists none)."""
    return device.rate_dtype(operand_dtype(weight_bits, activation_bits))


def workload_dtype(device: DeviceSpec, workload: Workload) -> str:
    """`compute_dtype` for a workload's weight and activation precision."""
    return compute_dtype(device, workload.weight_bits, workload.activation_bits)


# ---- kernels ----------------------------------------------------------------------------------------
def kernel_kind(new_tokens: int) -> str:
    """GEMV when a kernel computes one row (one new token, decode), GEMM otherwise."""
    return "gemv" if new_tokens == 1 else "gemm"


def matmul_time(device: DeviceSpec, flops, dtype: str, kind: str = "gemm", kernel_flops=None, rows=None):
    """Seconds for `flops` at peak[dtype] x efficiency(kind, size, rows); size = `kernel_flops` (default: the
    FLOPs themselves), `rows` a GEMM's row count (default: not row-limited). Vectorised; 0 FLOPs take 0 s.
    No launch cost (see `roofline_time`). One rule with `DeviceSpec.compute_time`, which it calls."""
    return device.compute_time(flops, dtype, kind, kernel_flops, rows)


def stream_time(device: DeviceSpec, n_bytes):
    """Seconds to stream `n_bytes` from the device's outermost memory (0 if it lists no memory)."""
    return device.stream_time(n_bytes)


def launched(device: DeviceSpec, work) -> np.ndarray:
    """The fixed launch seconds of one kernel wherever it has `work` (> 0), 0 where it has none."""
    return np.where(np.asarray(work, dtype=float) > 0, device.kernel_launch_s, 0.0)


def bound_part(busy, arithmetic, streaming, bound: str):
    """The part of kernels' `busy` seconds that `bound` binds (vectorised): "memory" where streaming is the
    slower (strictly), "compute" where the arithmetic is (ties go to compute, as GenZ's `bound` column)."""
    require_bound(bound)
    memory_bound = np.asarray(streaming, dtype=float) > np.asarray(arithmetic, dtype=float)
    return np.where(memory_bound if bound == "memory" else ~memory_bound, busy, 0.0)


def require_bound(bound: str | None) -> None:
    """One line unless `bound` is None (whole time), "memory" or "compute"."""
    if bound is not None and bound not in BOUNDS:
        raise WorkbenchError(f"bound must be None, {' or '.join(map(repr, BOUNDS))}, got {bound!r}")


def roofline_time(device: DeviceSpec, flops, n_bytes, dtype: str, kind: str = "gemm", kernel_flops=None,
                  rows=None, bound: str | None = None):
    """Seconds of one kernel: its launch plus the slower of its compute (a GEMM of `rows` rows when given)
    and streaming its `n_bytes` (vectorised; a kernel with no FLOPs and no bytes is not launched). With
    `bound` ("memory" / "compute"), only the busy seconds of the kernels that side binds, no launch. A
    one-row operator table (`cost`)."""
    require_bound(bound)
    (row,) = cost(device, [Operator("kernel", flops, n_bytes, 1, dtype, kind, rows, kernel_flops)])
    return row.time_s if bound is None else row.part(bound)


# ---- FLOPs of one layer's kernels (per heads / FFN columns / tokens, vectorised) ----------------------
def qkv_flops(model: TransformerConfig, heads, tokens):
    """FLOPs of the Q/K/V projections for `heads` query heads (and their KV heads) over `tokens`."""
    kv_per_q = model.n_kv_heads / model.n_heads
    width = np.asarray(heads, dtype=float) * model.d_head * (1 + 2 * kv_per_q)
    return 2.0 * np.asarray(tokens, dtype=float) * model.d_model * width


def score_flops(model: TransformerConfig, heads, queries, keys):
    """FLOPs of QK^T and softmax(QK^T)V for `heads` heads, `queries` x `keys` (MLA: QK^T over the key head
    size, PV over the value head size)."""
    if model.is_mla:
        return 2.0 * np.asarray(queries, dtype=float) * np.asarray(keys, dtype=float) * \
            np.asarray(heads, dtype=float) * (model.d_head + model.v_head_dim)
    return 4.0 * np.asarray(queries, dtype=float) * np.asarray(keys, dtype=float) * \
        np.asarray(heads, dtype=float) * model.d_head


def out_proj_flops(model: TransformerConfig, heads, tokens):
    """FLOPs of the attention output projection for `heads` heads over `tokens`."""
    return 2.0 * np.asarray(tokens, dtype=float) * np.asarray(heads, dtype=float) * model.d_head * model.d_model


def ffn_up_flops(model: TransformerConfig, cols, tokens):
    """FLOPs of the FFN's first GEMM (SwiGLU: gate and up) for `cols` columns over `tokens`."""
    mats = 2 if model.gated_ffn else 1
    return 2.0 * np.asarray(tokens, dtype=float) * model.d_model * np.asarray(cols, dtype=float) * mats


def ffn_down_flops(model: TransformerConfig, cols, tokens):
    """FLOPs of the FFN's second GEMM for `cols` columns over `tokens`."""
    return 2.0 * np.asarray(tokens, dtype=float) * model.d_model * np.asarray(cols, dtype=float)


# ---- the operator table: one layer's rows and their cost ----------------------------------------------
OPERATOR_KINDS = ("gemm", "gemv", "elementwise")
# The fused table's rows (`layer_operators`, fused=True), in the order a layer's time adds them: the four weight
# GEMMs, attention and the two connective blocks (one row of 2 kernels).
FUSED_OPERATORS = ("qkv", "attn", "out", "ffn1", "ffn2", "con")
WEIGHT_GEMMS = ("qkv", "out", "ffn1", "ffn2")
MOE_OPERATORS = ("qkv", "attn", "out", "router", "ffn1", "ffn2", "con")  # a MoE layer's rows


def kernels_per_layer(model: TransformerConfig) -> int:
    """Kernels one device launches per layer: `KERNELS_PER_LAYER`, one more (the router) for a MoE model."""
    return KERNELS_PER_LAYER + (1 if model.is_moe else 0)


def layer_operator_names(model: TransformerConfig) -> tuple[str, ...]:
    """The fused table's row names for `model` (`FUSED_OPERATORS`; `MOE_OPERATORS` for a mixture of experts)."""
    return MOE_OPERATORS if model.is_moe else FUSED_OPERATORS


@dataclass(frozen=True, eq=False)
class Operator:
    """One row of a layer's operator table (GenZ's rows): the FLOPs it computes, the bytes it streams from the
    outermost memory, the kernels it launches, its operand dtype and kernel kind, and a GEMM's rows (None: not
    row-limited). Numbers may be arrays: one row then costs a slice on each of several devices at once."""

    name: str
    flops: Any
    bytes: Any
    kernels: int = 1
    dtype: str = "fp32"
    kind: str = "gemm"
    rows: Any = None
    kernel_flops: Any = None  # the size its efficiency falls with (default: its FLOPs; a tile passes its own)
    core_limited: bool = True  # a kernel under small_kernel_bytes streams at one core's rate (False: bulk rate)
    # an engine's quantized kernel (`workbench.machine.kernel_cost`): the engine and ((format, share of the weights), ...);
    # "" = the framework's dense kernel at the device's peak[dtype] x efficiency
    engine: str = ""
    formats: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        require_int("kernels", self.kernels, low=0)
        if bool(self.engine) != bool(self.formats):
            raise WorkbenchError(f"operator {self.name!r}: an engine kernel needs its formats and formats their engine, "
                                 f"got engine {self.engine!r}, formats {self.formats!r}")
        require_choice("operator kind", self.kind, OPERATOR_KINDS)
        if _any_negative(self.flops) or _any_negative(self.bytes):
            raise WorkbenchError(f"operator {self.name!r}: flops and bytes must be >= 0, got {self.flops!r}, "
                                 f"{self.bytes!r}")
        if self.kind == "elementwise" and np.any(np.asarray(self.flops, dtype=float) != 0):
            raise WorkbenchError(f"operator {self.name!r}: an elementwise operator has no FLOPs, got {self.flops!r}")


def _any_negative(value) -> bool:
    """Whether a number, or any element of an array, is below 0 (a plain float checked without numpy)."""
    return value < 0 if isinstance(value, float | int) else bool(np.any(np.asarray(value, dtype=float) < 0))


@dataclass(frozen=True, eq=False)
class OperatorCost:
    """What one operator costs on one device (vidur's typed execution time): seconds of arithmetic at its
    efficiency, of streaming its bytes, of its kernels' launches; the busy time is the slower side."""

    operator: Operator
    compute_s: Any
    memory_s: Any
    launch_s: Any
    serial: bool = False  # an in-order core's engine kernel: streaming and arithmetic add (`kernel_cost.OVERLAP`)

    @property
    def busy_s(self):
        """The slower side of the roofline (launches aside); both sides added on an in-order core (`serial`)."""
        if self.serial:
            return np.asarray(self.compute_s, dtype=float) + np.asarray(self.memory_s, dtype=float)
        return np.maximum(self.compute_s, self.memory_s)

    @property
    def time_s(self):
        """Busy seconds plus the launches: the operator's share of a layer's time."""
        return self.busy_s + self.launch_s

    @property
    def bound(self) -> str:
        """What binds a (scalar) row: "launch" when its launches outlast its busy time, else "memory" when
        streaming is strictly slower than the arithmetic, else "compute" (GenZ's `bound` column)."""
        if float(self.launch_s) > float(self.busy_s):
            return "launch"
        return "memory" if float(self.memory_s) > float(self.compute_s) else "compute"

    def part(self, bound: str):
        """The busy seconds on the `bound` side of the roofline ("memory" / "compute"), launches aside."""
        return bound_part(self.busy_s, self.compute_s, self.memory_s, bound)


def _operator_cost(device: DeviceSpec, op: Operator, memory_level: str | None = None) -> OperatorCost:
    """One row's cost: arithmetic at peak[dtype] x efficiency(kind, size, rows); streaming its bytes split
    evenly over its kernels (each a kernel: `DeviceSpec.kernel_stream_time`, or the bulk rate when not
    `core_limited`; through `memory_level` when named); each kernel's launch wherever it has work."""
    flops = np.asarray(op.flops, dtype=float)
    if op.kind == "elementwise":
        compute = np.zeros_like(flops)
    elif op.engine and all(kernel_cost.described(device, op.engine, f, op.kind) for f, _ in op.formats):
        compute = np.asarray(kernel_cost.mixed_kernel_time(device, op.engine, op.formats, op.kind, flops / 2),
                             dtype=float)
    else:  # no engine, or a device that states too little to count its kernels (`kernel_cost.DeviceUndescribed`)
        compute = matmul_time(device, flops, op.dtype, op.kind, op.kernel_flops, op.rows)
    k = max(op.kernels, 1)
    if memory_level is not None:
        memory = device.stream_time(op.bytes, memory_level)
    elif op.core_limited:
        memory = device.kernel_stream_time(np.asarray(op.bytes, dtype=float) / k) * k
    else:
        memory = device.stream_time(np.asarray(op.bytes, dtype=float) / k) * k
    work = flops + np.asarray(op.bytes, dtype=float)
    launch = np.where(work > 0, op.kernels * device.kernel_launch_s, 0.0)
    serial = bool(op.engine) and op.kind != "elementwise" and not kernel_cost.overlaps(device)
    return OperatorCost(op, compute, np.asarray(memory, dtype=float), launch, serial)


def cost(device: DeviceSpec, rows, memory_level: str | None = None) -> list[OperatorCost]:
    """Each operator's compute, memory and launch seconds on `device` and what binds it: the one roofline
    every layer in the workbench is costed by (the schemes' fused table and the accelerator study alike)."""
    return [_operator_cost(device, op, memory_level) for op in rows]


@dataclass(frozen=True, eq=False)
class Breakdown:
    """The busiest device's (largest layer time) operator rows for one layer, costed on its roofline, with the
    index of that device and the number of layers it runs: what binds a scheme, row by row (`SchemeResult`)."""

    device: int
    layers: int
    rows: tuple[OperatorCost, ...]

    def __post_init__(self) -> None:
        require_int("breakdown device", self.device, low=0)
        require_int("breakdown layers", self.layers, low=0)
        if not self.rows or not all(isinstance(r, OperatorCost) for r in self.rows):
            raise WorkbenchError("a breakdown needs at least one OperatorCost row")

    def part(self, side: str) -> float:
        """Busy seconds of all its layers on the `side` ("memory" / "compute") of each row's roofline."""
        require_choice("breakdown side", side, BOUNDS)
        return self.layers * float(sum(float(r.part(side)) for r in self.rows))

    @property
    def memory_share(self) -> float:
        """The fraction of its rows' busy time that memory streaming binds (`streaming_share`)."""
        return streaming_share(self.part("memory"), self.part("compute"))


def busiest_breakdown(model: TransformerConfig, devices, workload: Workload, heads, cols, tokens,
                      layers: int, connective_tokens=None) -> Breakdown:
    """The `Breakdown` of the device whose slice (`heads`, `cols`, `tokens` per device: its fused operator
    table, `layer_operators`; its connective blocks on `connective_tokens` when given, Galaxy's sequence shard)
    takes longest per layer, rows + layer overhead; the first of equals."""
    devices = tuple(devices)
    con = tokens if connective_tokens is None else connective_tokens
    if not (len(heads) == len(cols) == len(tokens) == len(con) == len(devices)):
        raise WorkbenchError(f"breakdown: heads, cols, tokens and connective_tokens need one entry per device "
                             f"({len(devices)})")
    tables = [tuple(cost(d, layer_operators(model, workload, h, c, t)[:-1] + [_connective_row(model, workload, k, 2)]))
              for d, h, c, t, k in zip(devices, heads, cols, tokens, con)]
    times = [float(sum(float(r.time_s) for r in rows)) + layer_overhead(d) for d, rows in zip(devices, tables)]
    i = times.index(max(times))
    return Breakdown(i, layers, tables[i])


def _weight_gemm_rows(model: TransformerConfig, workload: Workload, heads, cols, tokens) -> list[Operator]:
    """The four weight GEMMs (qkv, out, ffn1, ffn2) for `tokens` rows with `heads` query heads and `cols`
    FFN columns; each streams its whole weight slice (an empty tile reads nothing) and is a GEMM of `tokens`
    rows for its efficiency (`DeviceSpec.gemm_half_rows`). A MoE model's FFN rows: `_expert_rows`."""
    dtype, kind = operand_dtype(workload.weight_bits, workload.activation_bits), kernel_kind(workload.new_tokens)
    wb = (workload.weight_bits / 8) * (np.asarray(tokens, dtype=float) > 0)
    if model.is_mla:
        share = np.asarray(heads, dtype=float) / model.n_heads
        attention = [Operator("qkv", 2.0 * np.asarray(tokens, dtype=float) * share * model.qkv_weight_params(),
                              share * model.qkv_weight_params() * wb, 1, dtype, kind, tokens,
                              **engine_kernel(model, workload, "qkv")),
                     Operator("out", 2.0 * np.asarray(tokens, dtype=float) * share * model.out_weight_params(),
                              share * model.out_weight_params() * wb, 1, dtype, kind, tokens,
                              **engine_kernel(model, workload, "out"))]
    else:
        kv_per_q = model.n_kv_heads / model.n_heads
        head_w = heads * model.d_head * model.d_model * wb
        attention = [Operator("qkv", qkv_flops(model, heads, tokens), head_w * (1 + 2 * kv_per_q), 1, dtype, kind,
                              tokens, **engine_kernel(model, workload, "qkv")),
                     Operator("out", out_proj_flops(model, heads, tokens), head_w, 1, dtype, kind, tokens,
                              **engine_kernel(model, workload, "out"))]
    if model.is_moe:
        return attention + _expert_rows(model, workload, cols, tokens, wb)
    col_w = cols * model.d_model * wb
    return attention + [
        Operator("ffn1", ffn_up_flops(model, cols, tokens), col_w * (2 if model.gated_ffn else 1), 1, dtype, kind,
                 tokens, **engine_kernel(model, workload, "ffn1")),
        Operator("ffn2", ffn_down_flops(model, cols, tokens), col_w, 1, dtype, kind, tokens,
                 **engine_kernel(model, workload, "ffn2")),
    ]


def engine_kernel(model: TransformerConfig, workload: Workload, row: str) -> dict:
    """An `Operator`'s engine and formats for weight matmul `row` when the workload names an engine (its quantized
    kernels cost the row: `workbench.machine.kernel_cost`), else nothing (the framework's dense kernel)."""
    if not workload.engine:
        return {}
    return {"engine": workload.engine, "formats": kernel_cost.row_formats(model, workload.weight_format, row)}


def experts_touched(model: TransformerConfig, workload: Workload, tokens):
    """Expected experts one MoE layer streams for `tokens` tokens: the distinct routed experts they touch under
    the workload's routing model, plus the shared experts (vectorised; 0 tokens touch none)."""
    t = np.asarray(tokens, dtype=float)
    routed = expected_distinct(workload.routing, model.n_experts, model.n_active_experts, t)
    return routed + model.n_shared_experts * (t > 0)


def _expert_rows(model: TransformerConfig, workload: Workload, cols, tokens, wb) -> list[Operator]:
    """A MoE model's FFN rows for a slice of `cols` of every expert's `d_ff` columns: each token computes its
    `experts_per_token` experts; the rows stream the slices of `experts_touched`; each expert's GEMM has the
    rows routed to it. Dense first layers blend in by their share of the layers (the mean layer)."""
    dtype, kind = operand_dtype(workload.weight_bits, workload.activation_bits), kernel_kind(workload.new_tokens)
    t = np.asarray(tokens, dtype=float)
    dense, sparse = model.n_dense_layers / model.n_layers, model.moe_layers / model.n_layers
    dense_cols = np.asarray(cols, dtype=float) * (model.d_dense_ff / model.d_ff)
    touched = experts_touched(model, workload, t)
    rows = np.where(touched > 0, t * model.experts_per_token / np.maximum(touched, 1e-300), 0.0)
    up_mats = 2 if model.gated_ffn else 1
    read = (dense * dense_cols + sparse * touched * np.asarray(cols, dtype=float)) * model.d_model * wb
    router_flops = sparse * 2.0 * t * model.router_params() * (np.asarray(cols, dtype=float) > 0)
    router_bytes = sparse * model.router_params() * (ROUTER_BITS / 8) * (t > 0) * (np.asarray(cols, dtype=float) > 0)
    return [
        Operator("router", router_flops, router_bytes, 1, operand_dtype(ROUTER_BITS, workload.activation_bits), kind,
                 tokens, **engine_kernel(model, workload, "router")),
        Operator("ffn1", dense * ffn_up_flops(model, dense_cols, t) + sparse * model.experts_per_token *
                 ffn_up_flops(model, cols, t), read * up_mats, 1, dtype, kind, rows,
                 **engine_kernel(model, workload, "ffn1")),
        Operator("ffn2", dense * ffn_down_flops(model, dense_cols, t) + sparse * model.experts_per_token *
                 ffn_down_flops(model, cols, t), read, 1, dtype, kind, rows, **engine_kernel(model, workload, "ffn2")),
    ]


def _attention_row(model: TransformerConfig, workload: Workload, heads, queries) -> Operator:
    """QK^T and softmax(QK^T)V for `heads` heads over `queries`, reading the attended KV cache in decode."""
    kv_bytes = kv_read_bytes(model, workload, heads) * (np.asarray(queries, dtype=float) > 0)  # no query, no read
    return Operator("attn", score_flops(model, heads, queries, workload.attended), kv_bytes, 1,
                    operand_dtype(workload.weight_bits, workload.activation_bits), kernel_kind(workload.new_tokens))


def _connective_row(model: TransformerConfig, workload: Workload, tokens, blocks: int = 1) -> Operator:
    """`blocks` connective blocks (residual add + norm, one kernel each) on `tokens`: `CONNECTIVE_PASSES`
    passes of the activations each, streamed at the bulk rate (memory-bound, no FLOPs)."""
    n_bytes = CONNECTIVE_PASSES * np.asarray(tokens, dtype=float) * model.d_model * (workload.activation_bits / 8)
    return Operator("con", 0.0, n_bytes * blocks, blocks, operand_dtype(workload.weight_bits,
                    workload.activation_bits), "elementwise", core_limited=False)


def layer_operators(model: TransformerConfig, workload: Workload, heads=None, cols=None, tokens=None,
                    fused: bool = True) -> list[Operator]:
    """One layer's operator table for a slice of `heads` query heads, `cols` FFN columns and `tokens` rows
    (default: the whole layer, the workload's new tokens). Fused (the schemes'): `FUSED_OPERATORS`, 7 kernels
    (`KERNELS_PER_LAYER`: Q/K/V, attention, out, FFN up, FFN down, and a residual add + norm fused into one
    kernel twice). Unfused (`fused=False`, the accelerator study): the whole layer as the unfused reference
    kernel runs it, 12 to 17 kernels (`unfused_operators`)."""
    heads = model.n_heads if heads is None else heads
    cols = model.d_ff if cols is None else cols
    tokens = workload.new_tokens if tokens is None else tokens
    if not fused:
        if not (np.isscalar(heads) and heads == model.n_heads and np.isscalar(cols) and cols == model.d_ff
                and np.isscalar(tokens) and tokens == workload.new_tokens):
            raise WorkbenchError("fused=False costs the whole layer: leave heads, cols and tokens at their defaults")
        return unfused_operators(model, workload)
    gemms = {op.name: op for op in _weight_gemm_rows(model, workload, heads, cols, tokens)}
    gemms["attn"] = _attention_row(model, workload, heads, tokens)
    gemms["con"] = _connective_row(model, workload, tokens, blocks=2)
    return [gemms[name] for name in layer_operator_names(model)]


def unfused_operators(model: TransformerConfig, workload: Workload) -> list[Operator]:
    """The operators of one reference block (`workbench.kernels.reference.block_forward`) as the unfused
    kernel runs them: one kernel per weight matrix (q, k, v, o, the FFN's two or three), three for attention
    (scores, softmax, P.V: the score matrix is written, read and written by the softmax, and read again, in
    the activation dtype), one per norm (residual add fused), per rotary application (Llama's q and k), for
    the FFN's activation and the last residual add; a decode step also copies its K/V cache (not donated) to
    write the new entry. Bytes include each operator's activations in and out; every matmul is a GEMM of the
    new tokens' rows. Elementwise operators carry no FLOPs (their arithmetic is negligible beside their bytes)."""
    s, t = workload.new_tokens, workload.attended
    wb, ab = workload.weight_bits / 8, workload.activation_bits / 8
    dtype, kind = operand_dtype(workload.weight_bits, workload.activation_bits), kernel_kind(s)
    e, pq, pkv, f = model.d_model, model.q_dim, model.kv_dim, model.d_ff
    qkv_w = e * (pq + 2 * pkv)
    ffn_mats = 3 if model.gated_ffn else 2
    scores = model.n_heads * s * t

    def matmul(name, flops, n_bytes, kernels=1):
        return Operator(name, flops, n_bytes, kernels, dtype, kind, rows=s)

    def elementwise(name, n_bytes, kernels=1):
        return Operator(name, 0.0, n_bytes, kernels, dtype, "elementwise", rows=s)

    ops = [
        matmul("qkv_proj", 2.0 * s * qkv_w, qkv_w * wb + s * (e + pq + 2 * pkv) * ab, kernels=3),
        matmul("attention", model.attention_score_flops(s, t), (2 * s * pq + 2 * t * pkv + 4 * scores) * ab, 3),
        matmul("out_proj", 2.0 * s * pq * e, pq * e * wb + s * (pq + e) * ab),
        matmul("ffn", 2.0 * s * ffn_mats * e * f, ffn_mats * e * f * wb + s * (2 * e + (ffn_mats - 1) * f) * ab,
               kernels=ffn_mats),
        elementwise("norms", 2 * 3 * s * e * ab, kernels=2),
        elementwise("activation", (3 if model.gated_ffn else 2) * s * f * ab),
    ]
    if model.family == "llama":
        ops.append(elementwise("rotary", 2 * s * (pq + pkv) * ab, kernels=2))
    if model.family != "bert":
        ops.append(elementwise("residual", 3 * s * e * ab))
    if workload.phase == "decode":
        ops.append(elementwise("cache_copy", 2 * 2 * t * pkv * ab))
    return ops


# ---- one layer on one device ------------------------------------------------------------------------
def kernel_times(model: TransformerConfig, device: DeviceSpec, workload: Workload, heads, cols,
                 tokens, bound: str | None = None) -> dict[str, np.ndarray]:
    """Seconds of the four weight GEMMs (qkv, out, ffn1, ffn2) of the operator table for `tokens` rows with
    `heads` query heads and `cols` FFN columns (`_weight_gemm_rows`, costed by `cost`); `bound` as in
    `roofline_time`."""
    require_bound(bound)
    rows = cost(device, _weight_gemm_rows(model, workload, heads, cols, tokens))
    return {c.operator.name: c.time_s if bound is None else c.part(bound) for c in rows}


def kv_read_bytes(model: TransformerConfig, workload: Workload, heads) -> np.ndarray:
    """Bytes of the KV cache attention reads for `heads` query heads: K and V of every attended token in
    decode (at the cache's width, `Workload.cache_bits`); none in prefill, where K/V come straight from the Q/K/V GEMM."""
    if workload.phase == "prefill":
        return np.zeros_like(np.asarray(heads, dtype=float))
    if model.is_mla:  # every head reads the whole latent cache
        return workload.attended * model.kv_elements_per_token * (workload.cache_bits / 8) * \
            (np.asarray(heads, dtype=float) > 0)
    kv_heads = np.asarray(heads, dtype=float) * model.n_kv_heads / model.n_heads
    return 2.0 * workload.attended * kv_heads * model.d_head * (workload.cache_bits / 8)


def attention_time(model: TransformerConfig, device: DeviceSpec, workload: Workload, heads, queries=None,
                   bound: str | None = None):
    """Seconds of the operator table's attention row (QK^T and softmax(QK^T)V) for `heads` heads over
    `queries` (default: the new tokens); `bound` as in `roofline_time`."""
    require_bound(bound)
    queries = workload.new_tokens if queries is None else queries
    (row,) = cost(device, [_attention_row(model, workload, heads, queries)])
    return row.time_s if bound is None else row.part(bound)


def connective_time(model: TransformerConfig, device: DeviceSpec, workload: Workload, tokens,
                    bound: str | None = None) -> np.ndarray:
    """Seconds of one connective block (residual + norm) on `tokens`: memory-bound passes of activations (all
    of its busy time is streaming: `bound` "memory" gives it without the launch, "compute" none)."""
    require_bound(bound)
    (row,) = cost(device, [_connective_row(model, workload, tokens)])
    return row.time_s if bound is None else row.part(bound)


def layer_overhead(device: DeviceSpec) -> float:
    """Fixed per-layer framework seconds of a device (`DeviceSpec.layer_overhead_s`); 0 if none."""
    return float(device.layer_overhead_s)


def fixed_layer_time(device: DeviceSpec, kernels: float = KERNELS_PER_LAYER) -> float:
    """The size-independent seconds of one layer on a device: its kernels' launches + the layer overhead."""
    return float(device.launch_time(kernels)) + layer_overhead(device)


def distinct_devices(devices) -> list[tuple[DeviceSpec, np.ndarray]]:
    """The distinct device objects of `devices` (by identity: a TOML's `count = N` repeats one spec) with the
    indices where each sits, in order of first appearance: per-device work computed once per class."""
    groups: dict[int, tuple[DeviceSpec, list[int]]] = {}
    for i, d in enumerate(devices):
        entry = groups.get(id(d))
        if entry is None:
            groups[id(d)] = (d, [i])
        else:
            entry[1].append(i)
    return [(d, np.asarray(idx, dtype=int)) for d, idx in groups.values()]


# Memo of `layer_parts` (a pipeline or model-parallel scheme asks it for each of up to 1,024 identical devices):
# keyed by the identity of the (immutable) model and device and by the workload's value; the entry keeps the
# objects so an id cannot be reused while it is stored.
_LAYER_PARTS: dict[tuple, tuple[TransformerConfig, DeviceSpec, dict[str, float]]] = {}
_LAYER_PARTS_MAX = 256


def layer_parts(model: TransformerConfig, device: DeviceSpec, workload: Workload,
                bound: str | None = None) -> dict[str, float]:
    """Seconds of each step of one layer on a device that holds all of it: qkv, attn, out, ffn1, ffn2, con
    (one connective block; a layer has two), overhead; with `bound`, each kernel's busy seconds on that side
    of its roofline (`roofline_time`) and no overhead."""
    key = (id(model), id(device), workload, bound)
    hit = _LAYER_PARTS.get(key)
    if hit is not None and hit[0] is model and hit[1] is device:
        return dict(hit[2])
    parts = _layer_parts(model, device, workload, bound)
    if len(_LAYER_PARTS) >= _LAYER_PARTS_MAX:
        _LAYER_PARTS.clear()
    _LAYER_PARTS[key] = (model, device, dict(parts))
    return parts


def _layer_parts(model: TransformerConfig, device: DeviceSpec, workload: Workload,
                 bound: str | None = None) -> dict[str, float]:
    require_bound(bound)
    parts = {}
    for row in cost(device, layer_operators(model, workload)):
        seconds = row.time_s if bound is None else row.part(bound)
        parts[row.operator.name] = float(seconds / row.operator.kernels if row.operator.name == "con" else seconds)
    parts["overhead"] = layer_overhead(device) if bound is None else 0.0
    return parts


def layer_time(model: TransformerConfig, device: DeviceSpec, workload: Workload, bound: str | None = None) -> float:
    """Seconds of one whole layer on one device: the sum of its fused operator table's rows (GEMMs, attention,
    two connective blocks) + overhead (with `bound`, the busy seconds that side binds: `layer_parts`)."""
    t = layer_parts(model, device, workload, bound)
    return float(sum(2 * t[name] if name == "con" else t[name] for name in layer_operator_names(model))
                 + t["overhead"])


# ---- the output head and a whole step -----------------------------------------------------------------
def lm_head_flops(model: TransformerConfig) -> float:
    """FLOPs of a decoder's next-token logits (one token x d_model x vocab); 0 for an encoder."""
    return 2.0 * model.d_model * model.vocab_size if model.is_decoder else 0.0


def lm_head_time(model: TransformerConfig, device: DeviceSpec, workload: Workload, bound: str | None = None) -> float:
    """Seconds of the next-token logits on one device: a GEMV streaming the output matrix (a GEMM of
    `head_tokens` rows in a speculative verify step; 0 for encoders);
    `bound` as in `roofline_time`."""
    if not model.is_decoder:
        return 0.0
    params = model.vocab_size * model.d_model
    rows = head_tokens(workload)
    require_bound(bound)
    (row,) = cost(device, [Operator("head", lm_head_flops(model) * rows, weight_bytes(params, workload.weight_bits), 1,
                                    workload_dtype(device, workload), kernel_kind(rows), rows,
                                    **engine_kernel(model, workload, "head"))])
    return float(row.time_s if bound is None else row.part(bound))


def head_tokens(workload: Workload) -> int:
    """Tokens whose next-token logits a step computes: the last prompt token in prefill, each of a speculative
    verify step's gamma + 1 tokens in decode (`Workload.verify_tokens`: 1 in plain decode, and always 1 in prefill)."""
    return workload.verify_tokens


def output_head_time(model: TransformerConfig, devices, workload: Workload) -> float:
    """Seconds of the next-token logits split by vocabulary rows over `devices` (each computes 1/n of the
    head; the slowest sets the time; one device = the whole head). 0 for an encoder, or when the workload
    times the backbone only (`Workload.output_head` False). Gathering the n partial (max, index) pairs is
    the scheme's collective to add."""
    devices = tuple(devices)
    if not (workload.output_head and model.is_decoder) or not devices:
        return 0.0
    return max(lm_head_time(model, d, workload) for d, _ in distinct_devices(devices)) / len(devices)


def step_fixed_time(model: TransformerConfig, device: DeviceSpec, workload: Workload, n_layers: int | None = None,
                    lm_head: bool = True) -> float:
    """The size-independent part of `step_time`: every layer's launches and overhead, and with the head its
    launch and the step's host work (`DeviceSpec.step_overhead_s`: input preparation, sampling)."""
    layers = model.n_layers if n_layers is None else n_layers
    head = device.kernel_launch_s + device.step_overhead_s if lm_head and workload.output_head and model.is_decoder \
        else 0.0
    return layers * fixed_layer_time(device, kernels_per_layer(model)) + head


def step_time(model: TransformerConfig, device: DeviceSpec, workload: Workload, n_layers: int | None = None,
              lm_head: bool = True, bound: str | None = None) -> float:
    """Seconds of `n_layers` (default all) whole layers on one device, plus the decoder's head if `lm_head`
    and the workload includes it (`Workload.output_head`); with `bound`, the busy seconds that side binds."""
    layers = model.n_layers if n_layers is None else n_layers
    head = lm_head_time(model, device, workload, bound) if lm_head and workload.output_head else 0.0
    return layers * layer_time(model, device, workload, bound) + head


def memory_share(model: TransformerConfig, devices, workload: Workload) -> float:
    """The fraction of a step's roofline busy time (launches and overheads aside) that memory streaming binds,
    kernel by kernel (`roofline_time`'s `bound`), over `devices` each holding the whole step: how a scheme's
    compute_s splits into memory streaming and arithmetic (`SchemeResult.split_streaming`). 0 when no busy time."""
    memory = arithmetic = 0.0
    for device, idx in distinct_devices(tuple(devices)):
        memory += len(idx) * step_time(model, device, workload, bound="memory")
        arithmetic += len(idx) * step_time(model, device, workload, bound="compute")
    return streaming_share(memory, arithmetic)


def streaming_share(memory: float, arithmetic: float) -> float:
    """The fraction of busy seconds that memory streaming binds, memory / (memory + arithmetic) (0 with no busy
    time): a scheme that sums its own slices' table rows on each device passes it to `split_streaming` (exact)."""
    return memory / (memory + arithmetic) if memory + arithmetic > 0 else 0.0


# Why a scheme's results carry no operator rows (`SchemeResult.no_operators`), one line per way of costing a layer that
# keeps no rows: every such scheme registers one of these (`base.register(no_operators=...)`).
WHOLE_STEP_ROWS = ("whole layers on one device summed by `common.step_time`; its rows are not kept (keeping them "
                   "would move the dense rows' streaming split)")
PIPELINE_ROWS = ("a layer pipeline: each stage is whole layers summed by `common.step_time` on its device, not one "
                 "busiest layer's rows")
TIMELINE_ROWS = "a simulated tile timeline (`simulate.schedule`) overlaps the rows; their sum is not its time"
HEPTI_ROWS = "Hepti's per-mode closed form (Sec. 4.2) costs FLOPs and traffic per block, not operator rows"
MCU_ROWS = "the MCU's L2 tile schedule times its transfers and kernels itself (no roofline rows)"
STI_ROWS = "STI's per-layer profile of shards at their bitwidths has no roofline rows"
ROUTED_ROWS = ("each device's routed experts differ by layer under routing, so no one busiest layer's rows are kept")
