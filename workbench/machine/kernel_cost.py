"""What an engine's quantized matmul kernels cost on a device: the arithmetic time of a weight matmul row, by engine,
weight format, kernel shape and instruction set, so a layer costs what the engine that runs it computes, not its
bits at a read rate or its FLOPs at an fp32 rate.

One rule, two sources of the rate (`kernel_rate`):

* **Measured** (`DeviceSpec.kernel_rates`, a device TOML's `kernel_rate_<engine>_<format>_<kind>` constants written
  by `python -m workbench profile --engine llama.cpp`): multiply-accumulates per second of the engine's own kernel on
  that device at its thread count, timed on a cache-resident model so streaming does not bind it.
* **Counted** (`data/kernels/<engine>_kernels.csv`, read from the engine's source at a pinned commit, file:line per
  row): SIMD instructions per block of weights in the kernel's inner loop for the ISA class the device's features
  select (`isa_class`), the activation's quantization to the format's dot type included; divided by the core's
  SIMD issue rate (`data/constants/cores.toml`, from its optimisation guide) and multiplied out over the clock and
  the cores: MAC/s = clock x cores x pipes x block_weights / instructions per block.

A matmul row then takes max(streaming its bytes, this arithmetic) on an out-of-order core, whose loads are in
flight while the dot products issue (the roofline; `OVERLAP`), and their sum on an in-order core (Cortex-A53 /
A55: a load that misses stalls the pipeline). A format an engine has no kernel for on the device's ISA is a one-line
error, never a bits-only time (`require_kernel`).

Decode is a GEMV (one token: `gemv`); prefill a GEMM (`gemm`): llama.cpp's repacked GEMM (`repack.cpp`) or
llamafile's tinyBLAS (`sgemm.cpp`) where the ISA has them, else its per-pair `vec_dot` (one dot product per weight
row and token, the same instructions per MAC as decode). MoE rows are `mul_mat_id` over the routed rows: their
MACs are the routed tokens' only (`schemes.common._expert_rows`), so the same rate applies.
"""

from __future__ import annotations

import csv
import functools
import tomllib
from dataclasses import dataclass

from workbench.core.constants import parse_constants
from workbench.core.errors import WorkbenchError, require_choice
from workbench.core.io import DATA_DIR
from workbench.machine.hardware import DeviceSpec

# engine id (used in constant names and CSV files) -> the name users write and the schemes carry
ENGINES = {"llamacpp": "llama.cpp", "dllama": "distributed-llama"}
KERNEL_SHAPES = ("gemv", "gemm")
KERNELS_DIR = DATA_DIR / "kernels"
CORES_PATH = DATA_DIR / "constants" / "cores.toml"
# ISA classes from the most capable down; a device runs the first whose features it has all of (ggml-cpu compiles
# the branch of the highest `__ARM_FEATURE_*` / `__AVX*__` macro the build targets).
ISA_CLASSES = (
    ("neon_i8mm", ("neon", "dotprod", "i8mm")),
    ("neon_dotprod", ("neon", "dotprod")),
    ("neon", ("neon",)),
    ("avx512_vnni", ("avx512f", "avx512_vnni")),
    ("avx_vnni", ("avx2", "avx_vnni")),
    ("avx2", ("avx2", "fma", "f16c")),
)
# Kernel paths an engine takes for a shape, in the order it prefers them when its data has a row for the format and
# ISA (llama.cpp: a repacked buffer's gemv/gemm first, then llamafile's tinyBLAS for prompts, then vec_dot).
# (AMX tiles need an AMX build: the engines extra builds AVX2-class kernels, so they are not in the order.)
PATH_ORDER = {"gemv": ("repack_gemv", "vec_dot", "scalar"),
              "gemm": ("repack_gemm", "sgemm", "tiled", "vec_dot", "scalar")}
OVERLAP = "out-of-order cores overlap streaming with arithmetic (max); in-order cores add them (sum)"


class DeviceUndescribed(WorkbenchError):
    """The device states too little to count an engine's kernel on it (no isa, no known core, no clock): the
    operator table then costs the row at the device's dense rates and `whatif` says so (`undescribed_notices`); a
    format the engine has no kernel for on a known ISA is a plain WorkbenchError (n/a)."""


@dataclass(frozen=True)
class KernelRow:
    """One kernel of data/kernels: SIMD instructions per block of `block_weights` MACs (one weight block against one
    token) for a format, ISA class and path; `counted` False where the path exists but was not counted."""

    engine: str
    version: str
    fmt: str
    isa_class: str
    path: str
    block_weights: int
    simd_mul: float  # dot-product / multiply instructions (SDOT, VPMADDUBSW, VPDPBUSD, FMLA, VFMADD ...)
    simd_alu: float  # other vector arithmetic and shuffles
    simd_load: float  # vector loads
    scalar_ops: float  # scalar work for the scales (fp16 -> fp32, multiplies)
    counted: bool
    source: str

    def __post_init__(self) -> None:
        if self.block_weights < 1 or (self.counted and min(self.simd_mul, self.simd_alu, self.simd_load,
                                                            self.scalar_ops) < 0):
            raise WorkbenchError(f"kernel row {self.engine} {self.fmt} {self.isa_class} {self.path}: block_weights "
                                 f">= 1 and counts >= 0 needed")


# Issue widths the counts need beside the vector pipes, where data/constants/cores.toml states none (assumed: every
# core of the library has at least two load pipes and three scalar integer ALUs; the vector pipes bind first).
LOAD_PORTS, SCALAR_PORTS = 2.0, 3.0


@dataclass(frozen=True)
class Core:
    """A core's SIMD issue: vector pipes, dot products per cycle, in or out of order (`out_of_order` None: unstated)."""

    name: str
    simd_pipes: float
    dot_per_cycle: float
    out_of_order: bool | None
    source: str

    def __post_init__(self) -> None:
        if self.simd_pipes <= 0 or self.dot_per_cycle <= 0:
            raise WorkbenchError(f"core {self.name!r}: simd_pipes and dot_per_cycle must be > 0")

    def cycles_per_block(self, row: KernelRow) -> float:
        """Issue-bound cycles of one block: the busiest of the vector pipes, the dot-product pipes, the load pipes and
        the scalar ALUs (`LOAD_PORTS`, `SCALAR_PORTS`)."""
        return max((row.simd_mul + row.simd_alu) / self.simd_pipes, row.simd_mul / self.dot_per_cycle,
                   row.simd_load / LOAD_PORTS, row.scalar_ops / SCALAR_PORTS)


def isa_class(device: DeviceSpec) -> str:
    """The ISA class of the device's stated features (`ISA_CLASSES`), one line when it states none or no class fits."""
    if not device.isa:
        raise DeviceUndescribed(f"device {device.name!r} states no isa features: an engine's kernels cannot be chosen "
                             "(state [meta] isa, e.g. [\"neon\", \"dotprod\"] or [\"avx2\", \"fma\", \"f16c\"])")
    for name, needs in ISA_CLASSES:
        if set(needs) <= set(device.isa):
            return name
    raise DeviceUndescribed(f"device {device.name!r}: its isa {list(device.isa)} has no engine kernel class (needs one "
                         f"of {', '.join('+'.join(n) for _, n in ISA_CLASSES)})")


def engine_id(engine: str) -> str:
    """The engine's id (llamacpp, dllama) from its id or its name (llama.cpp, distributed-llama)."""
    for key, name in ENGINES.items():
        if engine in (key, name):
            return key
    raise WorkbenchError(f"engine must be one of {', '.join(ENGINES.values())}, got {engine!r}")


def rate_key(engine: str, fmt: str, shape: str) -> str:
    """The `DeviceSpec.kernel_rates` key (and `kernel_rate_<key>` constant) of a measured kernel rate."""
    require_choice("kernel shape", shape, KERNEL_SHAPES)
    return f"{engine_id(engine)}_{fmt}_{shape}"


def _count(text: str) -> float:
    """A count cell: a number, or NaN where the row was not counted."""
    return float(text) if text.strip() else float("nan")


@functools.cache
def kernel_rows(engine: str) -> tuple[KernelRow, ...]:
    """The kernels of `engine` (data/kernels/<id>_kernels.csv; see data/kernels/README.md for how they were counted)."""
    path = KERNELS_DIR / f"{engine_id(engine)}_kernels.csv"
    if not path.exists():
        return ()
    with open(path, newline="") as f:
        return tuple(KernelRow(r["engine"], r["version"], r["format"], r["isa_class"], r["path"],
                               int(r["block_weights"]), _count(r["simd_mul"]), _count(r["simd_alu"]),
                               _count(r["simd_load"]), _count(r["scalar_ops"] or "0"),
                               r["kind"] != "not_counted" and bool(r["simd_mul"].strip()), r["source"])
                     for r in csv.DictReader(f))


@functools.cache
def cores() -> dict[str, Core]:
    """Every core of data/constants/cores.toml: its vector pipes (`_vec_pipes`, else the wider of its dot-product and
    FMA issue), dot products per cycle and whether it is out of order."""
    if not CORES_PATH.exists():
        return {}
    with open(CORES_PATH, "rb") as f:
        table = tomllib.load(f)
    table.pop("meta", None)
    c = {k: v.value for k, v in parse_constants(table, CORES_PATH.name).items()}
    names = sorted({k.rsplit("_vec_", 1)[0] for k in c if "_vec_" in k})
    out = {}
    for n in names:
        dot = c.get(f"{n}_vec_int_dot_per_cycle", c.get(f"{n}_vec_fma_per_cycle"))
        pipes = c.get(f"{n}_vec_pipes", max(filter(None, (dot, c.get(f"{n}_vec_fma_per_cycle"))), default=None))
        if pipes is None or dot is None:
            continue
        ooo = c.get(f"{n}_out_of_order")
        out[n] = Core(n, float(pipes), float(dot), None if ooo is None else bool(ooo), CORES_PATH.name)
    return out


def core_of(device: DeviceSpec) -> Core:
    """The device's core (`DeviceSpec.core`), one line when it states none or an unknown one."""
    known = cores()
    if device.core not in known:
        raise DeviceUndescribed(f"device {device.name!r}: core {device.core!r} is not in {CORES_PATH.name} "
                             f"(known: {', '.join(sorted(known)) or 'none'}); state [meta] core")
    return known[device.core]


def _version_key(version: str) -> tuple:
    """A sortable key of a version text (v0.16.4 -> (0, 16, 4); other texts sort first)."""
    import re

    return tuple(int(n) for n in re.findall(r"\d+", version.split("(")[0]))


def newest_version(engine: str) -> str:
    """The newest version of `engine` data/kernels counts: the one its schemes are costed with (distributed-llama's
    older tags' counts are kept beside it for reading)."""
    versions = {r.version for r in kernel_rows(engine)}
    return max(versions, key=_version_key) if versions else ""


def counted_row(device: DeviceSpec, engine: str, fmt: str, shape: str) -> KernelRow:
    """The kernel the engine runs for `fmt` and `shape` on the device's ISA class (`PATH_ORDER`), or one line."""
    isa = isa_class(device)
    version = newest_version(engine)
    rows = {r.path: r for r in kernel_rows(engine) if r.fmt == fmt and r.isa_class == isa and r.version == version}
    if "unsupported" in rows:
        raise WorkbenchError(f"no kernel: {ENGINES[engine_id(engine)]} {version} has no {fmt} kernel on {isa} "
                             f"({rows['unsupported'].source})")
    for path in PATH_ORDER[shape]:
        if path in rows and not rows[path].counted:
            raise WorkbenchError(f"no counted kernel: {ENGINES[engine_id(engine)]} runs {fmt} {shape} on {isa} through "
                                 f"its {path} path, whose instructions are not counted ({rows[path].source})")
        if path in rows:
            return rows[path]
    raise WorkbenchError(f"no kernel: {ENGINES[engine_id(engine)]} has no {fmt} {shape} kernel on {isa} "
                         f"(device {device.name!r})")


def kernel_rate(device: DeviceSpec, engine: str, fmt: str, shape: str) -> float:
    """MAC/s of the engine's `fmt` kernel of `shape` on the whole device: measured if its TOML states it, else
    counted instructions over the core's issue rate x clock x cores."""
    measured = device.kernel_rates.get(rate_key(engine, fmt, shape))
    if measured is not None:
        return measured
    row = counted_row(device, engine, fmt, shape)
    if device.clock_hz <= 0:
        raise DeviceUndescribed(f"device {device.name!r} states no clock_hz: its {fmt} kernel rate cannot be counted")
    return device.clock_hz * device.cores * row.block_weights / core_of(device).cycles_per_block(row)


def require_kernel(device: DeviceSpec, engine: str, fmt: str, shape: str) -> None:
    """One line unless the engine has a kernel (measured or counted) for `fmt` and `shape` on the device."""
    kernel_rate(device, engine, fmt, shape)


def kernel_time(device: DeviceSpec, engine: str, fmt: str, shape: str, macs):
    """Seconds of `macs` multiply-accumulates in the engine's `fmt` kernel of `shape` on the device (vectorised)."""
    import numpy as np

    return np.asarray(macs, dtype=float) / kernel_rate(device, engine, fmt, shape)


def overlaps(device: DeviceSpec) -> bool:
    """Whether the device's core streams while it computes (`OVERLAP`): its core's out-of-order flag; a core the
    library does not state runs the roofline (max), as every table row does without an engine."""
    known = cores().get(device.core)
    return True if known is None or known.out_of_order is None else known.out_of_order


# ---- which format each matmul row of a layer runs: a block format everywhere, or a recipe's per-tensor mix ----
# operator-table row -> the GGUF tensor classes whose weights it multiplies (`formats.TENSOR_CLASSES`)
ROW_TENSORS = {"qkv": ("attn_q", "attn_k", "attn_v", "attn_qkv"), "out": ("attn_output",),
               "ffn1": ("ffn_gate", "ffn_up", "ffn_gate_exps", "ffn_up_exps", "ffn_gate_shexp", "ffn_up_shexp"),
               "ffn2": ("ffn_down", "ffn_down_exps", "ffn_down_shexp"), "head": ("output",),
               "router": ("ffn_gate_inp",)}
# a model with tied embeddings has no output tensor: llama.cpp multiplies the logits by token_embd, which a file type
# then quantizes as the output (llama-quant.cpp's `!qs.has_output` rule, `formats._rule`)
TIED_HEAD = ("token_embd",)


PLAIN_NAMES = {"fp16": "f16", "fp32": "f32"}  # the workbench's plain format names -> ggml's type names


@functools.cache
def _recipe_shares(model, recipe: str) -> dict[str, tuple[tuple[str, float], ...]]:
    """Row -> ((format, share of the row's weights), ...) of `model`'s tensors under a llama.cpp file type."""
    from workbench.model.formats import model_tensors, tensor_formats

    formats, tensors = tensor_formats(model, recipe), model_tensors(model)
    tied = not any(t.kind == "output" for t in tensors)
    out = {}
    for row, kinds in ROW_TENSORS.items():
        if row == "head" and tied:
            kinds = TIED_HEAD
        weights: dict[str, float] = {}
        for t in tensors:
            if t.kind in kinds:
                weights[formats[t.name].name] = weights.get(formats[t.name].name, 0.0) + t.params
        total = sum(weights.values())
        out[row] = tuple((f, w / total) for f, w in sorted(weights.items())) if total else ()
    return out


def row_formats(model, weight_format: str, row: str) -> tuple[tuple[str, float], ...]:
    """((format, share), ...) that operator row `row` runs: the router in f32 (never quantized), every other row in
    `weight_format` when it is a block format (q4_k), or a recipe's per-tensor mix (Q4_K_M: q4_k and q6_k)."""
    from workbench.model.formats import RECIPE_DEFAULTS, weight_formats

    weight_format = PLAIN_NAMES.get(weight_format, weight_format)
    if row == "router":
        return (("f32", 1.0),)
    if weight_format in RECIPE_DEFAULTS:
        return _recipe_shares(model, weight_format)[row]
    if weight_format in weight_formats():
        return ((weight_format, 1.0),)
    raise WorkbenchError(f"an engine's kernels need a weight_format (a block format {', '.join(weight_formats())} "
                         f"or a file type {', '.join(RECIPE_DEFAULTS)}), got {weight_format!r}")


def mixed_kernel_time(device: DeviceSpec, engine: str, formats: tuple[tuple[str, float], ...], shape: str, macs):
    """Seconds of `macs` split over formats by their shares, each in the engine's own kernel (`kernel_time`)."""
    if not formats:
        raise WorkbenchError("a kernel row needs at least one (format, share)")
    return sum(share * kernel_time(device, engine, fmt, shape, macs) for fmt, share in formats)


def format_for_bits(engine: str, bits: float) -> str:
    """The weight format a width given as bits alone means for `engine`: a plain float width (16 -> f16, 32 -> f32),
    else the one format of that width the engine has kernels for (distributed-llama's 4.5 bits are its Q40 = q4_0);
    one line where none or several are (llama.cpp's 4.5 bits are q4_0, q4_k or iq4_nl)."""
    from workbench.model.formats import format_bits

    plain = {16.0: "f16", 32.0: "f32"}.get(float(bits))
    known = sorted({r.fmt for r in kernel_rows(engine) if r.path != "unsupported"})
    if plain in known:
        return plain
    same = [f for f in known if abs(format_bits(f) - float(bits)) < 1e-9]
    if len(same) == 1:
        return same[0]
    name = ENGINES[engine_id(engine)]
    raise WorkbenchError(f"{name} runs its kernels by weight format and {float(bits):g} bits are "
                         + (f"any of {', '.join(same)}" if same else f"none of its formats ({', '.join(known)})")
                         + ": give weight_format")


def described(device: DeviceSpec, engine: str, fmt: str, shape: str) -> bool:
    """Whether the engine's kernel rate on the device is known (measured, or countable from what it states)."""
    try:
        kernel_rate(device, engine, fmt, shape)
    except DeviceUndescribed:
        return False
    return True


def undescribed_notices(devices, engine: str = "llama.cpp", fmt: str = "q4_0") -> list[str]:
    """One line per distinct device whose engine kernels cannot be counted (what it lacks): its engine schemes' matmuls
    are then costed at its dense rates, said where the table is printed."""
    lines, seen = [], set()
    for device in devices:
        if device.name in seen:
            continue
        seen.add(device.name)
        try:
            kernel_rate(device, engine, fmt, "gemv")
        except DeviceUndescribed as exc:
            lines.append(f"notice: {exc}; the engines' schemes cost its matmuls at its dense rates instead")
        except WorkbenchError:
            pass
    return lines
