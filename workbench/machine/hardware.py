"""Devices: compute peaks, shape-dependent efficiency, memory hierarchies, power and storage.

One typed `DeviceSpec` per device; presets live in ``data/devices/<id>.toml`` where every number is a
provenance-carrying constant (see `workbench.core.constants`). A preset file looks like::

    [meta]
    name = "Siracusa MCU"
    memory_levels = ["L1", "L2", "L3"]       # innermost first
    [peak_flops_int8]  value = ... unit = "op/s" kind = "derived" source = "..."
    [mem_L2_capacity]  value = 2097152 unit = "B" ...
    [mem_L2_bandwidth] ...   [mem_L2_energy] (pJ/B, optional)

Compute time = FLOPs / (peak[dtype] x efficiency), where efficiency depends on the kernel's shape
(GEMM vs GEMV) and falls for small kernels: eff = base x w / (w + w_half), w = FLOPs of the kernel, and for
a skinny GEMM: x M / (M + `gemm_half_rows`), M = its rows (tokens; measured on XLA:CPU, a 32-row GEMM runs
at about half the square-GEMM rate whatever K and N; 0 = off).
Streaming time = bytes / (bandwidth x memory_efficiency); a kernel streaming fewer than `small_kernel_bytes`
is not split across the cores by the runtime and streams at most at `core_stream_bytes_per_s` (one core's
rate; `kernel_stream_time`; 0 = off).

Fixed costs (typed fields a preset or a user TOML sets; 0 = none): `kernel_launch_s` is paid by every
kernel a device launches (a CUDA launch, an XLA thunk, a PULP cluster fork/join and DMA set-up), whatever
its size, so splitting a kernel across devices does not split it; `layer_overhead_s` is paid once per
layer (framework / interpreter time: PyTorch's per-module Python, a graph runtime's barriers).

What a scheme reads of a device is a field, never a constant looked up in `provenance` (which says where
each value comes from): the clock, a host's program dispatch, STI's layer floor and decompression rate,
swap and offload rates, a device's own access link to the router (TPI-LLM's laptops; costed by
`workbench.machine.network.star_on_access_links`) and its network stack's CPU seconds per byte (a what-if, costed
in `workbench.machine.network.collective_latency`'s bytes term). An absent one means "not modelled" and each user
says what it does then (0 s, 0 B, the storage read rate, the topology's link).

Every user-facing field is declared once, on the dataclass: ``declared(FieldSpec(...), default)`` (from
`workbench.core.fields`, the package's bottom floor) gives its
help, SI unit, allowed range, preset constant and deployment-TOML key(s) with their scale to SI. The
range checks in ``__post_init__``, `device_from_table`, the deployment parser (`workbench.scenarios.userconfig`)
and the key table in docs/keys.md all derive from it, so a new field is one line here.

Dtypes (fail closed): a device runs a dtype it does not list at the nearest wider dtype it lists
(`WIDER`; a Cortex-A57 without fp16 arithmetic computes fp16 work at its fp32 rate), never at a narrower
one; a dtype with no listed rate at or above it is a one-line error (`DeviceSpec.rate_dtype`).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import MISSING, dataclass, field, replace
from pathlib import Path

import numpy as np

from workbench.core.constants import Constant, parse_constants
from workbench.core.errors import WorkbenchError, require_choice
from workbench.core.fields import (
    FieldSpec,
    TomlKey,
    check_declared,
    declared,
    declared_fields,
    fraction_field,
    number_field,
    rate_field,
)
from workbench.core.io import DATA_DIR
from workbench.core.units import GIB, KIB, MIB, mbps_to_bytes_per_s

DTYPES = ("fp32", "tf32", "fp16", "bf16", "int8", "int4")
KERNEL_KINDS = ("gemm", "gemv")
BITS = {"fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "int8": 8, "int4": 4}
# Where a device that does not list a dtype runs it: the listed dtypes tried in turn, each at least as
# wide (int4 codes unpack to int8 dot products; integer work on a device without integer dot products is
# dequantised to its half-precision or fp32 units). No narrower rate is ever borrowed: a dtype none of
# these covers is an error.
WIDER = {"fp32": (), "tf32": ("fp32",), "fp16": ("fp32",), "bf16": ("fp16", "fp32"),
         "int8": ("bf16", "fp16", "fp32"), "int4": ("int8", "bf16", "fp16", "fp32")}
# What kind of processor a device is: picks the typical memory_efficiency of a device that states none
# (data/constants/memory_efficiency.toml holds the classes that have a quoted typical value).
DEVICE_CLASSES = ("cpu", "gpu", "mcu", "npu", "accelerator")
# Instruction-set features a device's cores state (a preset's `[meta] isa`, with `isa_source`), the ones the engines'
# quantized kernels branch on (ggml-cpu's `__ARM_FEATURE_DOTPROD`, `__ARM_FEATURE_MATMUL_INT8`, `__AVX2__`,
# `__AVX512VNNI__`, ...): `workbench.kernels_cost` picks each format's kernel from them. Empty: not stated.
ISA_FEATURES = ("neon", "fp16", "dotprod", "i8mm", "sve", "sve2", "sse3", "ssse3", "avx", "f16c", "fma", "avx2",
                "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_int8", "cuda", "metal")
TYPICAL_EFFICIENCY_PATH = DATA_DIR / "constants" / "memory_efficiency.toml"
KERNEL_RATE_PREFIX = "kernel_rate_"  # a preset constant kernel_rate_<engine>_<format>_<shape>: measured MAC/s


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a device's memory: capacity, bandwidth to the compute side, energy per byte."""

    name: str = declared(FieldSpec("level name, unique per device (e.g. LLC, DRAM)", kind="text",
                                   toml=(TomlKey("name"),)))
    capacity_bytes: float = declared(FieldSpec(
        "capacity (exactly one of the three keys)", "B", 0.0, math.inf, low_open=True, file_high=2.0**40,
        file_floor=1.0, preset_key="capacity", toml=(TomlKey("capacity_kib", KIB, "KiB"),
                                                     TomlKey("capacity_mib", MIB, "MiB"),
                                                     TomlKey("capacity_gib", GIB, "GiB"))))
    bandwidth_bytes_per_s: float = declared(rate_field("bandwidth to the compute side", "B/s", 1e14, 1e3,
                                                  TomlKey("bandwidth_gb_per_s", 1e9, "GB/s"), "bandwidth"))
    energy_pj_per_byte: float = declared(number_field("energy per byte moved", "pJ/B", 0.0, math.inf, None, "energy"),
                                         0.0)

    def __post_init__(self) -> None:
        check_declared(self, f"{self.name} ")

    def transfer_time(self, n_bytes):
        """Seconds to move `n_bytes` through this level (vectorised)."""
        return np.asarray(n_bytes, dtype=float) / self.bandwidth_bytes_per_s

    def transfer_energy(self, n_bytes):
        """Joules to move `n_bytes` through this level."""
        return np.asarray(n_bytes, dtype=float) * self.energy_pj_per_byte * 1e-12


@dataclass(frozen=True)
class DeviceSpec:
    """A device as the cost models see it. Memory levels are ordered innermost (fastest) first."""

    name: str = declared(FieldSpec("device name", kind="text", toml=(TomlKey("name"),)))
    peak_flops: dict[str, float] = declared(rate_field(
        f"peak rate per dtype ({', '.join(DTYPES)}); a dtype not listed runs at the nearest wider one listed",
        "op/s", 1e16, 1e3, TomlKey("peak_gflops", 1e9, "GFLOP/s"), "peak_flops_", kind="per_dtype"))
    efficiency_gemm: float = declared(fraction_field("achieved fraction of peak on GEMMs (several tokens: prefill)",
                                                "efficiency_gemm"), 1.0)
    efficiency_gemv: float = declared(fraction_field("achieved fraction of peak on GEMVs (one token: decode)",
                                                "efficiency_gemv"), 1.0)
    small_kernel_flops: float = declared(number_field(
        "kernel size at which efficiency is halved (0: no small-kernel loss)", "FLOP", 0.0, math.inf,
        TomlKey("small_kernel_mflop", 1e6, "MFLOP"), "small_kernel_flops", file_high=1e12), 0.0)
    gemm_half_rows: float = declared(number_field(
        "GEMM rows (tokens) at which a GEMM's efficiency is halved: x M / (M + this) (0: no row loss)", "rows", 0.0,
        math.inf, TomlKey("gemm_half_rows", 1.0, "rows"), "gemm_half_rows", file_high=1e5), 0.0)
    memory: tuple[MemoryLevel, ...] = declared(FieldSpec(
        "memory levels, innermost first: [[devices.memory]] tables", kind="levels", toml=(TomlKey("memory"),)), ())
    power_w: float = declared(number_field("active power while computing", "W", 0.0, math.inf,
                                      TomlKey("power_w", 1.0, "W"), "power_w", file_high=1e4), 0.0)
    idle_power_w: float = declared(number_field("power while waiting", "W", 0.0, math.inf, None, "idle_power_w"), 0.0)
    cores: int = declared(number_field("cores the device computes on", "cores", 1, math.inf, None, "cores", kind="integer"),
                          1)
    storage_read_bytes_per_s: float | None = declared(rate_field(
        "read rate of local storage, to stream weights that do not fit (absent: cannot stream)", "B/s", 1e12, 1e3,
        TomlKey("storage_read_mb_per_s", 1e6, "MB/s"), "storage_read_bandwidth"), None)
    kernel_launch_s: float = declared(number_field(
        "fixed time per kernel launched (launch, dispatch, set-up), whatever its size", "s", 0.0, math.inf,
        TomlKey("kernel_launch_us", 1e-6, "µs"), "kernel_launch", file_high=1.0), 0.0)
    layer_overhead_s: float = declared(number_field(
        "fixed time per layer (framework time outside the kernels)", "s", 0.0, math.inf,
        TomlKey("layer_overhead_us", 1e-6, "µs"), "layer_overhead", file_high=10.0), 0.0)
    step_overhead_s: float = declared(number_field(
        "fixed host time per model step outside the kernels (input preparation, sampling, output processing)",
        "s", 0.0, math.inf, TomlKey("step_overhead_us", 1e-6, "µs"), "step_overhead", file_high=10.0), 0.0)
    memory_efficiency: float = declared(fraction_field(
        "achieved fraction of each memory level's bandwidth when streaming (a file that states none takes the "
        "typical value of its device_class)", "memory_efficiency"), 1.0)
    device_class: str = declared(FieldSpec(
        f"kind of processor ({', '.join(DEVICE_CLASSES)}): a device stating no memory_efficiency streams at its "
        "class's typical fraction (data/constants/memory_efficiency.toml)", kind="text",
        toml=(TomlKey("device_class"),)), "")
    small_kernel_bytes: float = declared(number_field(
        "kernel bytes below which a kernel is not split across the cores: it streams at the core rate (0: off)", "B",
        0.0, math.inf, TomlKey("small_kernel_mib", MIB, "MiB"), "small_kernel_bytes", file_high=2.0**40), 0.0)
    core_stream_bytes_per_s: float = declared(number_field(
        "streaming rate of a kernel below the small-kernel size (one core's; 0: off)", "B/s", 0.0, math.inf,
        TomlKey("core_stream_gb_per_s", 1e9, "GB/s"), "core_stream_bandwidth", file_high=1e14), 0.0)
    clock_hz: float = declared(number_field(
        "clock of the cores that compute (and run the network stack) (0: not stated; Hepti's profile then uses the "
        "peak rate, the stack what-if charges such a device no CPU)", "Hz", 0.0, math.inf,
        TomlKey("clock_mhz", 1e6, "MHz"), "clock_hz", file_high=1e11), 0.0)
    program_dispatch_s: float = declared(number_field(
        "fixed host time of one call of a compiled program from Python (a cluster host's dispatch; 0: not "
        "modelled)", "s", 0.0, math.inf, TomlKey("program_dispatch_us", 1e-6, "µs"), "program_dispatch",
        file_high=1.0), 0.0)
    layer_time_floor_s: float = declared(number_field(
        "least time of executing any part of a layer (a GPU's fixed cost per layer in STI's profile; 0: none)", "s",
        0.0, math.inf, TomlKey("layer_time_floor_ms", 1e-3, "ms"), "layer_time_floor", file_high=10.0), 0.0)
    decompress_weights_per_s: float = declared(number_field(
        "rate of substituting quantisation centroids for weight indexes (STI's decompression; 0: not modelled, "
        "free)", "weight/s", 0.0, math.inf, TomlKey("decompress_mweights_per_s", 1e6, "Mweight/s"),
        "decompress_weights_per_s", file_high=1e14), 0.0)
    swap_capacity_bytes: float = declared(number_field(
        "swap space beyond the outermost memory level (what a device holds before OOM; 0: none)", "B", 0.0,
        math.inf, TomlKey("swap_gib", GIB, "GiB"), "swap_capacity", file_high=2.0**44), 0.0)
    swap_read_bytes_per_s: float | None = declared(rate_field(
        "page-in rate when the weights exceed memory and the OS swaps (absent: the storage read rate)", "B/s",
        1e12, 1e3, TomlKey("swap_mb_per_s", 1e6, "MB/s"), "swap_bandwidth"), None)
    offload_read_bytes_per_s: float | None = declared(rate_field(
        "rate at which a blocking disk offload reads each layer's weights back (absent: the storage read rate)",
        "B/s", 1e12, 1e3, TomlKey("offload_read_mb_per_s", 1e6, "MB/s"), "offload_read_bandwidth"), None)
    access_link_bytes_per_s: float | None = declared(rate_field(
        "bandwidth of the device's own access link to the router (absent: the topology's link; set with "
        "access_link_latency_ms)", "B/s", 1e12, 1e3, TomlKey("access_link_mbps", mbps_to_bytes_per_s(1.0), "Mbit/s"),
        "link_bandwidth"), None)
    access_link_latency_s: float | None = declared(number_field(
        "one-way latency of the device's own access link to the router (absent: the topology's link; set with "
        "access_link_mbps)", "s", 0.0, math.inf, TomlKey("access_link_latency_ms", 1e-3, "ms"), "link_latency",
        file_high=10.0), None)
    stack_s_per_byte: float = declared(number_field(
        "CPU seconds the device's network stack spends per byte it sends or receives, on the cores that compute "
        "(a what-if; 0: free)", "s/B", 0.0, math.inf, TomlKey("stack_ns_per_byte", 1e-9, "ns/B"), "stack_s_per_byte",
        file_high=1e-3), 0.0)
    # instruction-set features of its cores (`ISA_FEATURES`; () = not stated) and the core's name in
    # data/constants/cores.toml (its vector issue rate; "" = not stated): what an engine's kernels run on. A preset
    # states both in [meta] with `isa_source` (where the features are read or quoted; for [] why none applies) and,
    # for core = "", a `core_note` saying why (tests/test_isa.py)
    isa: tuple[str, ...] = declared(FieldSpec(
        f"instruction-set features of its cores, each one of {', '.join(ISA_FEATURES)} (what an engine's quantized "
        "kernels branch on; absent: not stated)", kind="list", toml=(TomlKey("isa"),)), ())
    core: str = ""
    # measured multiply-accumulates per second of an engine's quantized kernels on this device, by
    # "<engine>_<format>_<gemv|gemm>" (a preset's `kernel_rate_<key>` constants; `workbench.machine.kernel_cost`)
    kernel_rates: dict[str, float] = field(default_factory=dict)
    # a board sold in several RAM sizes (GiB; its preset's `ram_variants`) and, once budgeted (`with_board_ram`), its
    # RAM and what its OS keeps: the outermost level's capacity is then board_ram_bytes - os_reserve_bytes
    ram_variants: tuple[float, ...] = ()
    board_ram_bytes: float = 0.0
    os_reserve_bytes: float = 0.0
    provenance: dict[str, Constant] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.isa, tuple) or any(f not in ISA_FEATURES for f in self.isa):
            bad = [f for f in self.isa if f not in ISA_FEATURES] if isinstance(self.isa, tuple) else self.isa
            raise WorkbenchError(f"device {self.name!r}: isa must be a tuple of features from "
                                 f"{', '.join(ISA_FEATURES)}, got {bad!r}")
        if not all(isinstance(r, int | float) and math.isfinite(r) and r > 0 for r in self.kernel_rates.values()):
            raise WorkbenchError(f"device {self.name!r}: kernel_rates must be finite MAC/s > 0, got {self.kernel_rates!r}")
        if not isinstance(self.core, str):
            raise WorkbenchError(f"device {self.name!r}: core must be a core name (text), got {self.core!r}")
        if not self.peak_flops:
            raise WorkbenchError(f"device {self.name!r}: peak_flops needs at least one dtype")
        spec = self.__dataclass_fields__["peak_flops"].metadata["spec"]
        for dtype, peak in self.peak_flops.items():
            require_choice("dtype", dtype, DTYPES)
            spec.check(f"{self.name} peak_flops[{dtype}]", peak)
        check_declared(self)
        if self.device_class:
            require_choice("device_class", self.device_class, DEVICE_CLASSES)
        if (self.small_kernel_bytes > 0) != (self.core_stream_bytes_per_s > 0):
            raise WorkbenchError(
                f"device {self.name!r}: small_kernel_bytes and core_stream_bytes_per_s must both be > 0 (small-kernel "
                f"streaming on) or both 0 (off), got {self.small_kernel_bytes!r} and {self.core_stream_bytes_per_s!r}")
        if (self.access_link_bytes_per_s is None) != (self.access_link_latency_s is None):
            raise WorkbenchError(
                f"device {self.name!r}: access_link_bytes_per_s and access_link_latency_s come together (a device's "
                f"own access link) or not at all, got {self.access_link_bytes_per_s!r} and {self.access_link_latency_s!r}")
        for inner, outer in zip(self.memory, self.memory[1:]):
            if inner.capacity_bytes > outer.capacity_bytes:
                raise WorkbenchError(
                    f"device {self.name!r}: memory level {inner.name} ({inner.capacity_bytes:.3g} B) is larger "
                    f"than its parent {outer.name} ({outer.capacity_bytes:.3g} B)"
                )

    # ---- compute ------------------------------------------------------------------------------
    def rate_dtype(self, dtype: str) -> str:
        """The listed dtype whose peak runs `dtype` work: itself, else the nearest wider listed one (`WIDER`);
        one line naming the device when it lists neither (fail closed: no narrower rate is borrowed)."""
        require_choice("dtype", dtype, DTYPES)
        for candidate in (dtype, *WIDER[dtype]):
            if candidate in self.peak_flops:
                return candidate
        raise WorkbenchError(f"device {self.name!r} has no rate for {dtype} work: it lists "
                             f"{', '.join(self.peak_flops)}, none of {', '.join((dtype, *WIDER[dtype]))}; "
                             f"give it a {dtype} peak (peak_flops_{dtype} / peak_gflops.{dtype})")

    def peak(self, dtype: str) -> float:
        """Peak op/s for `dtype` work: the rate of `rate_dtype(dtype)`."""
        return self.peak_flops[self.rate_dtype(dtype)]

    def efficiency(self, kind: str = "gemm", kernel_flops=None, rows=None):
        """Achievable fraction of peak for a kernel of `kind`, size `kernel_flops` and, for a GEMM, `rows` rows
        (vectorised): a skinny GEMM (few tokens) runs further from peak, x rows / (rows + gemm_half_rows)."""
        require_choice("kernel kind", kind, KERNEL_KINDS)
        eff = self.efficiency_gemm if kind == "gemm" else self.efficiency_gemv
        if kernel_flops is not None and self.small_kernel_flops != 0:
            w = np.asarray(kernel_flops, dtype=float)
            eff = eff * w / (w + self.small_kernel_flops)
        if rows is not None and kind == "gemm" and self.gemm_half_rows != 0:
            m = np.asarray(rows, dtype=float)
            eff = eff * (m / (m + self.gemm_half_rows))
        return eff

    def compute_time(self, flops, dtype: str = "fp16", kind: str = "gemm", kernel_flops=None, rows=None):
        """Seconds to execute `flops` of `kind` kernels (each of `kernel_flops`, default all in one; a GEMM's
        `rows` rows, default not row-limited)."""
        flops = np.asarray(flops, dtype=float)
        eff = self.efficiency(kind, flops if kernel_flops is None else kernel_flops, rows)
        return np.where(flops > 0, flops / np.maximum(self.peak(dtype) * eff, 1e-300), 0.0)

    def launch_time(self, kernels):
        """Fixed seconds of launching `kernels` kernels (vectorised; 0 when the preset gives no launch cost)."""
        return np.asarray(kernels, dtype=float) * self.kernel_launch_s

    # ---- memory -------------------------------------------------------------------------------
    def stream_time(self, n_bytes, level: str | None = None):
        """Seconds to stream `n_bytes` through a memory level (default the outermost) at its bandwidth x
        memory_efficiency; 0 for a device that lists no memory."""
        if not self.memory:
            return np.zeros_like(np.asarray(n_bytes, dtype=float))
        mem = self.memory_level(level) if level else self.memory[-1]
        return np.asarray(mem.transfer_time(n_bytes), dtype=float) / self.memory_efficiency

    def kernel_stream_time(self, n_bytes):
        """Seconds for kernels streaming `n_bytes` each from the outermost memory (vectorised): `stream_time`,
        except a kernel of 0 < bytes < small_kernel_bytes, which the runtime does not split across the cores,
        streams at min(bandwidth x memory_efficiency, core_stream_bytes_per_s)."""
        bulk = self.stream_time(n_bytes)
        if not self.memory or self.small_kernel_bytes == 0:
            return bulk
        b = np.asarray(n_bytes, dtype=float)
        rate = min(self.memory[-1].bandwidth_bytes_per_s * self.memory_efficiency, self.core_stream_bytes_per_s)
        return np.where((b > 0) & (b < self.small_kernel_bytes), b / rate, bulk)

    def memory_level(self, name: str) -> MemoryLevel:
        """The memory level called `name`."""
        for level in self.memory:
            if level.name == name:
                return level
        raise WorkbenchError(f"device {self.name!r} has no memory level {name!r}; levels: {[m.name for m in self.memory]}")

    @property
    def memory_bytes(self) -> float:
        """Capacity of the outermost memory level (what the device can hold in total)."""
        if not self.memory:
            raise WorkbenchError(f"device {self.name!r} has no memory levels")
        return self.memory[-1].capacity_bytes

    def energy(self, seconds, bytes_per_level: dict[str, float] | None = None):
        """Joules: active power x time + per-byte energy of each memory level's traffic."""
        e = np.asarray(seconds, dtype=float) * self.power_w
        for level, n_bytes in (bytes_per_level or {}).items():
            e = e + self.memory_level(level).transfer_energy(n_bytes)
        return e

    def with_changes(self, **changes) -> DeviceSpec:
        """A copy with fields changed (re-validated)."""
        return replace(self, **changes)

    def with_assumed(self, field_name: str, value: float, source: str) -> DeviceSpec:
        """A copy with one declared number set to `value`, its provenance an assumed constant citing `source`
        (a what-if that overrides a preset's value says so where the value comes from)."""
        spec = self.__dataclass_fields__[field_name].metadata["spec"]
        key = spec.preset_key or field_name
        provenance = {**self.provenance, key: Constant(key, value, spec.unit, "assumed", source)}
        return replace(self, provenance=provenance, **{field_name: value})

    def with_memory(self, level: str, **changes) -> DeviceSpec:
        """A copy with one memory level's capacity/bandwidth/energy changed."""
        self.memory_level(level)
        memory = tuple(replace(m, **changes) if m.name == level else m for m in self.memory)
        return replace(self, memory=memory)


# ---- presets ----------------------------------------------------------------------------------
DEVICES_DIR = DATA_DIR / "devices"


def _preset_values(cls, values: dict, prefix: str = "") -> dict:
    """Constructor arguments of `cls` from a preset's constants: each declared number at prefix + its key."""
    out = {}
    for f, spec in declared_fields(cls):
        if spec.kind in ("number", "integer") and spec.preset_key and prefix + spec.preset_key in values:
            value = values[prefix + spec.preset_key]
            out[f.name] = int(value) if spec.kind == "integer" else float(value)
    return out


def typical_memory_efficiency(device_class: str, name: str, where: str) -> Constant:
    """The typical memory_efficiency of a device class (a quoted constant of data/constants/memory_efficiency.toml)
    for a device `name` that states none; one line naming the key when the class has no typical value."""
    if device_class and device_class not in DEVICE_CLASSES:
        raise WorkbenchError(f"{where}: device_class must be one of {', '.join(DEVICE_CLASSES)}, got {device_class!r}")
    with open(TYPICAL_EFFICIENCY_PATH, "rb") as f:
        typical = parse_constants(tomllib.load(f), TYPICAL_EFFICIENCY_PATH.name)
    known = sorted(k.removeprefix("typical_") for k in typical)
    constant = typical.get(f"typical_{device_class}")
    if constant is None:
        raise WorkbenchError(
            f"{where}: device {name!r} states no memory_efficiency; state it (the achieved fraction of the memory "
            f"bandwidth, in (0, 1]) or a device_class with a typical value ({', '.join(known)})"
            + (f"; {device_class} has none" if device_class else ""))
    return constant


def is_typical_efficiency(device: DeviceSpec) -> bool:
    """Whether a device's memory_efficiency is its class's typical value (it stated none of its own)."""
    constant = device.provenance.get("memory_efficiency")
    return constant is not None and constant.name.startswith("typical_")


def efficiency_notices(devices) -> list[str]:
    """One line per distinct device (by name) whose memory_efficiency is its class's typical value: what it
    streams at, from which source (whatif prints these, so an estimate never passes for a stated number)."""
    lines, seen = [], set()
    for device in devices:
        if device.name in seen or not is_typical_efficiency(device):
            continue
        seen.add(device.name)
        constant = device.provenance["memory_efficiency"]
        cite = constant.source.split(":")[0]
        lines.append(f"notice: {device.name} states no memory_efficiency; using {device.memory_efficiency:g}, the typical for "
                     f"{device.device_class} ({TYPICAL_EFFICIENCY_PATH.name} {constant.name}: {cite})")
    return lines


def device_from_table(table: dict, where: str) -> DeviceSpec:
    """Build a DeviceSpec from a preset table (meta + provenance-carrying constants); a preset with memory levels
    that states no memory_efficiency takes the typical value of its meta device_class (`typical_memory_efficiency`)."""
    table = with_base(dict(table))
    meta = table.pop("meta", {})
    consts = parse_constants(table, where)
    v = {k: c.value for k, c in consts.items()}
    prefix = DeviceSpec.__dataclass_fields__["peak_flops"].metadata["spec"].preset_key
    peaks = {k.removeprefix(prefix): float(val) for k, val in v.items() if k.startswith(prefix)}
    memory = []
    for level in meta.get("memory_levels", []):
        for f, spec in declared_fields(MemoryLevel):
            if f.default is MISSING and spec.preset_key and f"mem_{level}_{spec.preset_key}" not in v:
                raise WorkbenchError(f"{where}: memory level {level} needs mem_{level}_{spec.preset_key}")
        memory.append(MemoryLevel(level, **_preset_values(MemoryLevel, v, f"mem_{level}_")))
    name = meta.get("name", Path(where).stem)
    if memory and "memory_efficiency" not in consts:  # no silent 1.0 for a device that streams from memory
        consts["memory_efficiency"] = typical_memory_efficiency(meta.get("device_class", ""), name, where)
        v["memory_efficiency"] = consts["memory_efficiency"].value
    rates = {k.removeprefix(KERNEL_RATE_PREFIX): float(val) for k, val in v.items() if k.startswith(KERNEL_RATE_PREFIX)}
    variants = v.get(RAM_VARIANTS_KEY, [])
    spec = DeviceSpec(name=name, peak_flops=peaks, memory=tuple(memory), device_class=meta.get("device_class", ""),
                      isa=parse_isa(f"{where}: meta.isa", meta.get("isa", [])), core=meta.get("core", ""),
                      kernel_rates=rates, provenance=consts,
                      ram_variants=tuple(float(x) for x in (variants if isinstance(variants, list) else [variants])),
                      **_preset_values(DeviceSpec, v))
    if OS_RESERVE_KEY in v and memory:
        return with_board_ram(spec, reserve_bytes=float(v[OS_RESERVE_KEY]), where=where)
    return spec


def parse_isa(where: str, value: object) -> tuple[str, ...]:
    """A list of instruction-set features (a preset's meta.isa, a deployment's `isa`) as a tuple; one line
    naming `where` and listing the allowed features when it is not a list of known ones."""
    if not isinstance(value, list) or not all(isinstance(f, str) for f in value):
        raise WorkbenchError(f"{where} must be a list of features ({', '.join(ISA_FEATURES)}), got {value!r}")
    unknown = [f for f in value if f not in ISA_FEATURES]
    if unknown:
        raise WorkbenchError(f"{where}: unknown feature {unknown[0]!r}; allowed: {', '.join(ISA_FEATURES)}")
    return tuple(value)


# ---- boards sold in several RAM sizes, less what the operating system keeps ------------------------------------
# A preset's outermost memory level is the board's RAM; `RAM_VARIANTS_KEY` lists the sizes (GiB) the board is sold
# in and `OS_RESERVE_KEY` the bytes its operating system keeps, so the memory a model may use is RAM - reserve.
RAM_VARIANTS_KEY = "ram_variants"
OS_RESERVE_KEY = "os_reserve"


def with_board_ram(device: DeviceSpec, ram_bytes: float | None = None, reserve_bytes: float | None = None,
                   where: str = "", source: str = "") -> DeviceSpec:
    """`device` with its outermost memory level = board RAM (`ram_bytes`, default its board's, else that level's
    capacity) less the OS reserve (`reserve_bytes`, default its own, else 0), the budget a model may use; the RAM and
    the reserve a deployment gives are recorded as assumed constants citing `source`."""
    if not device.memory:
        raise WorkbenchError(f"{where}: device {device.name!r} lists no memory levels to budget")
    level = device.memory[-1]
    ram = ram_bytes if ram_bytes is not None else device.board_ram_bytes or level.capacity_bytes
    reserve = reserve_bytes if reserve_bytes is not None else device.os_reserve_bytes
    if not 0 <= reserve < ram:
        raise WorkbenchError(f"{where}: the OS reserve of {device.name!r} ({reserve / GIB:g} GiB) must be >= 0 and "
                             f"below its RAM ({ram / GIB:g} GiB)")
    provenance = dict(device.provenance)
    ram_key = f"mem_{level.name}_capacity"
    if ram_bytes is not None:
        variants = [v for v in device.ram_variants if math.isclose(v * GIB, ram_bytes)]
        cite = f"the {ram_bytes / GIB:g} GiB variant of {RAM_VARIANTS_KEY}" if variants else source or "assumed"
        provenance[ram_key] = Constant(ram_key, ram_bytes, "B", "datasheet" if variants else "assumed", cite)
    if reserve_bytes is not None and source:
        provenance[OS_RESERVE_KEY] = Constant(OS_RESERVE_KEY, reserve_bytes, "B", "assumed", source)
    memory = (*device.memory[:-1], replace(level, capacity_bytes=ram - reserve))
    try:
        return replace(device, memory=memory, board_ram_bytes=ram, os_reserve_bytes=reserve, provenance=provenance)
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: {exc}") from None


def budget_notices(devices) -> list[str]:
    """One line per distinct device (by name) whose memory is budgeted: board RAM - OS reserve = what the model may
    use, and where the reserve comes from (whatif prints these)."""
    lines, seen = [], set()
    for device in devices:
        budgeted = device.board_ram_bytes and math.isclose(device.memory_bytes,
                                                           device.board_ram_bytes - device.os_reserve_bytes)
        if device.name in seen or not budgeted:  # not budgeted, or its memory changed since (a what-if's)
            continue
        seen.add(device.name)
        reserve = device.provenance.get(OS_RESERVE_KEY)
        cite = f" (os_reserve {reserve.kind}: {reserve.source.split('. ')[0]})" if reserve is not None else ""
        lines.append(f"memory budget: {device.name}: {device.board_ram_bytes / GIB:g} GiB board RAM - "
                     f"{device.os_reserve_bytes / GIB:g} GiB OS reserve = {device.memory_bytes / GIB:g} GiB for the "
                     f"model{cite}")
    return lines


def device_names() -> list[str]:
    """Ids of every preset in data/devices/."""
    return sorted(p.stem for p in DEVICES_DIR.glob("*.toml"))


def with_base(table: dict, _seen: tuple[str, ...] = ()) -> dict:
    """`table` over the preset its meta names as `based_on` (a device TOML written by `profile --engine` states only
    what it measured); itself when it names none."""
    base_id = table.get("meta", {}).get("based_on")
    if base_id is None:
        return table
    base = preset_table(base_id, _seen)
    meta = {**base.get("meta", {}), **table["meta"]}
    meta.pop("based_on")
    return {**base, **table, "meta": meta}


def preset_table(device_id: str, _seen: tuple[str, ...] = ()) -> dict:
    """The table of preset data/devices/<device_id>.toml; a preset whose meta names `based_on = "<id>"`
    takes every constant of that preset it does not set itself (a measured variant of a datasheet preset
    states only what it measured)."""
    path = DEVICES_DIR / f"{device_id}.toml"
    if not path.exists():
        raise WorkbenchError(f"unknown device {device_id!r}; presets: {', '.join(device_names())}")
    if device_id in _seen:
        raise WorkbenchError(f"device presets based on each other in a circle: {' -> '.join((*_seen, device_id))}")
    with open(path, "rb") as f:
        table = tomllib.load(f)
    return with_base(table, (*_seen, device_id))


def load_device(device_id: str) -> DeviceSpec:
    """Load the preset data/devices/<device_id>.toml (with the preset it is based on, if any)."""
    return device_from_table(preset_table(device_id), f"{device_id}.toml")
