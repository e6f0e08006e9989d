"""Devices: compute peaks, shape-dependent efficiency, memory hierarchies, power and storage.

One typed `DeviceSpec` per device; presets live in ``data/devices/<id>.toml`` where every number is a
provenance-carrying constant (see `workbench.constants`). A preset file looks like::

    [meta]
    name = "Siracusa MCU"
    memory_levels = ["L1", "L2", "L3"]       # innermost first
    [peak_flops_int8]  value = ... unit = "op/s" kind = "derived" source = "..."
    [mem_L2_capacity]  value = 2097152 unit = "B" ...
    [mem_L2_bandwidth] ...   [mem_L2_energy] (pJ/B, optional)

Compute time = FLOPs / (peak[dtype] x efficiency), where efficiency depends on the kernel's shape
(GEMM vs GEMV) and falls for small kernels: eff = base x w / (w + w_half), w = FLOPs of the kernel.
Streaming time = bytes / (bandwidth x memory_efficiency).

Fixed costs (typed fields a preset or a user TOML sets; 0 = none): `kernel_launch_s` is paid by every
kernel a device launches (a CUDA launch, an XLA thunk, a PULP cluster fork/join and DMA set-up), whatever
its size, so splitting a kernel across devices does not split it; `layer_overhead_s` is paid once per
layer (framework / interpreter time: PyTorch's per-module Python, a graph runtime's barriers).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from workbench.constants import Constant, parse_constants
from workbench.errors import (
    WorkbenchError,
    require_choice,
    require_fraction,
    require_non_negative,
    require_positive,
)
from workbench.io import DATA_DIR

DTYPES = ("fp32", "tf32", "fp16", "bf16", "int8", "int4")
KERNEL_KINDS = ("gemm", "gemv")
BITS = {"fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "int8": 8, "int4": 4}


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a device's memory: capacity, bandwidth to the compute side, energy per byte."""

    name: str
    capacity_bytes: float
    bandwidth_bytes_per_s: float
    energy_pj_per_byte: float = 0.0

    def __post_init__(self) -> None:
        require_positive(f"{self.name} capacity_bytes", self.capacity_bytes)
        require_positive(f"{self.name} bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        require_non_negative(f"{self.name} energy_pj_per_byte", self.energy_pj_per_byte)

    def transfer_time(self, n_bytes):
        """Seconds to move `n_bytes` through this level (vectorised)."""
        return np.asarray(n_bytes, dtype=float) / self.bandwidth_bytes_per_s

    def transfer_energy(self, n_bytes):
        """Joules to move `n_bytes` through this level."""
        return np.asarray(n_bytes, dtype=float) * self.energy_pj_per_byte * 1e-12


@dataclass(frozen=True)
class DeviceSpec:
    """A device as the cost models see it. Memory levels are ordered innermost (fastest) first."""

    name: str
    peak_flops: dict[str, float]
    efficiency_gemm: float = 1.0
    efficiency_gemv: float = 1.0
    small_kernel_flops: float = 0.0  # kernel size at which efficiency is halved (0: no small-kernel loss)
    memory: tuple[MemoryLevel, ...] = ()
    power_w: float = 0.0
    idle_power_w: float = 0.0
    cores: int = 1
    storage_read_bytes_per_s: float | None = None
    kernel_launch_s: float = 0.0  # fixed seconds per kernel launched (launch / dispatch / set-up)
    layer_overhead_s: float = 0.0  # fixed seconds per layer (framework time outside the kernels)
    memory_efficiency: float = 1.0  # achieved fraction of each memory level's bandwidth when streaming
    provenance: dict[str, Constant] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        if not self.peak_flops:
            raise WorkbenchError(f"device {self.name!r}: peak_flops needs at least one dtype")
        for dtype, peak in self.peak_flops.items():
            require_choice("dtype", dtype, DTYPES)
            require_positive(f"{self.name} peak_flops[{dtype}]", peak)
        require_fraction("efficiency_gemm", self.efficiency_gemm)
        require_fraction("efficiency_gemv", self.efficiency_gemv)
        require_non_negative("small_kernel_flops", self.small_kernel_flops)
        require_non_negative("power_w", self.power_w)
        require_non_negative("idle_power_w", self.idle_power_w)
        require_non_negative("kernel_launch_s", self.kernel_launch_s)
        require_non_negative("layer_overhead_s", self.layer_overhead_s)
        if not 0 < self.memory_efficiency <= 1:
            raise WorkbenchError(f"memory_efficiency must be in (0, 1], got {self.memory_efficiency!r}")
        if self.storage_read_bytes_per_s is not None:
            require_positive("storage_read_bytes_per_s", self.storage_read_bytes_per_s)
        for inner, outer in zip(self.memory, self.memory[1:]):
            if inner.capacity_bytes > outer.capacity_bytes:
                raise WorkbenchError(
                    f"device {self.name!r}: memory level {inner.name} ({inner.capacity_bytes:.3g} B) is larger "
                    f"than its parent {outer.name} ({outer.capacity_bytes:.3g} B)"
                )

    # ---- compute ------------------------------------------------------------------------------
    def peak(self, dtype: str) -> float:
        """Peak op/s for `dtype`; falls back to the nearest wider dtype the device lists."""
        require_choice("dtype", dtype, DTYPES)
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        wider_dtypes = {"int8": ("bf16", "fp16", "fp32"), "int4": ("bf16", "fp16", "fp32"),
                        "tf32": ("fp32",)}.get(dtype, ("fp16", "fp32"))
        for wider in wider_dtypes:
            if wider in self.peak_flops:
                return self.peak_flops[wider]
        return next(iter(self.peak_flops.values()))

    def efficiency(self, kind: str = "gemm", kernel_flops=None):
        """Achievable fraction of peak for a kernel of `kind` and size `kernel_flops` (vectorised)."""
        require_choice("kernel kind", kind, KERNEL_KINDS)
        base = self.efficiency_gemm if kind == "gemm" else self.efficiency_gemv
        if kernel_flops is None or self.small_kernel_flops == 0:
            return base
        w = np.asarray(kernel_flops, dtype=float)
        return base * w / (w + self.small_kernel_flops)

    def compute_time(self, flops, dtype: str = "fp16", kind: str = "gemm", kernel_flops=None):
        """Seconds to execute `flops` of `kind` kernels (each of `kernel_flops`, default all in one)."""
        flops = np.asarray(flops, dtype=float)
        eff = self.efficiency(kind, flops if kernel_flops is None else kernel_flops)
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

    def with_memory(self, level: str, **changes) -> DeviceSpec:
        """A copy with one memory level's capacity/bandwidth/energy changed."""
        self.memory_level(level)
        memory = tuple(replace(m, **changes) if m.name == level else m for m in self.memory)
        return replace(self, memory=memory)


# ---- presets ----------------------------------------------------------------------------------
DEVICES_DIR = DATA_DIR / "devices"


def device_from_table(table: dict, where: str) -> DeviceSpec:
    """Build a DeviceSpec from a preset table (meta + provenance-carrying constants)."""
    table = dict(table)
    meta = table.pop("meta", {})
    consts = parse_constants(table, where)
    v = {k: c.value for k, c in consts.items()}
    peaks = {k.removeprefix("peak_flops_"): float(val) for k, val in v.items() if k.startswith("peak_flops_")}
    memory = []
    for level in meta.get("memory_levels", []):
        try:
            memory.append(MemoryLevel(level, float(v[f"mem_{level}_capacity"]), float(v[f"mem_{level}_bandwidth"]),
                                      float(v.get(f"mem_{level}_energy", 0.0))))
        except KeyError as exc:
            raise WorkbenchError(f"{where}: memory level {level} needs {exc.args[0]}") from None
    return DeviceSpec(
        name=meta.get("name", Path(where).stem),
        peak_flops=peaks,
        efficiency_gemm=float(v.get("efficiency_gemm", 1.0)),
        efficiency_gemv=float(v.get("efficiency_gemv", 1.0)),
        small_kernel_flops=float(v.get("small_kernel_flops", 0.0)),
        memory=tuple(memory),
        power_w=float(v.get("power_w", 0.0)),
        idle_power_w=float(v.get("idle_power_w", 0.0)),
        cores=int(v.get("cores", 1)),
        storage_read_bytes_per_s=float(v["storage_read_bandwidth"]) if "storage_read_bandwidth" in v else None,
        kernel_launch_s=float(v.get("kernel_launch", 0.0)),
        layer_overhead_s=float(v.get("layer_overhead", 0.0)),
        memory_efficiency=float(v.get("memory_efficiency", 1.0)),
        provenance=consts,
    )


def device_names() -> list[str]:
    """Ids of every preset in data/devices/."""
    return sorted(p.stem for p in DEVICES_DIR.glob("*.toml"))


def load_device(device_id: str) -> DeviceSpec:
    """Load the preset data/devices/<device_id>.toml."""
    path = DEVICES_DIR / f"{device_id}.toml"
    if not path.exists():
        raise WorkbenchError(f"unknown device {device_id!r}; presets: {', '.join(device_names())}")
    with open(path, "rb") as f:
        return device_from_table(tomllib.load(f), path.name)
