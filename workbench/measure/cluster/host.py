"""What this machine adds around the network: its cores, the kernel's scheduler tick, the per-call dispatch.

The tick is 1 / CONFIG_HZ of the running kernel (read from /proc/config.gz or /boot/config-<release>);
the cores and the per-call dispatch of a compiled program come from the micro-benchmarked device preset
(`data/devices/this_machine_cpu.toml`). `workbench.measure.cluster.fit` uses them for the oversubscription wait.
"""

from __future__ import annotations

import gzip
import platform
import re
from pathlib import Path

from workbench.core.constants import Constant
from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import DeviceSpec
from workbench.measure.cluster.collectives import HostModel

CONFIG_PATHS = (Path("/proc/config.gz"), Path("/boot") / f"config-{platform.release()}")


def kernel_hz(paths=CONFIG_PATHS) -> tuple[int, str]:
    """(CONFIG_HZ, the file it was read from) of the running kernel."""
    for path in paths:
        try:
            text = gzip.open(path, "rt").read() if path.suffix == ".gz" else path.read_text()
        except OSError:
            continue
        match = re.search(r"^CONFIG_HZ=(\d+)$", text, re.MULTILINE)
        if match:
            return int(match.group(1)), str(path)
    raise WorkbenchError(f"CONFIG_HZ not found in {', '.join(map(str, paths))}: the scheduler tick is unknown")


def tick_constant(date: str, machine: str, paths=CONFIG_PATHS) -> Constant:
    """`scheduler_tick` = 1 / CONFIG_HZ as a measured constant of this machine."""
    hz, path = kernel_hz(paths)
    return Constant("scheduler_tick", 1.0 / hz, "s", "measured",
                    f"1 / CONFIG_HZ (CONFIG_HZ={hz} in {path}) of the kernel on this machine ({machine}; read {date}): "
                    f"a woken process that finds every core busy runs at the next tick at the latest")


FRESH_REGION_BYTES = 64 * 2**20  # above glibc's largest mmap threshold (32 MiB), as the largest collectives


def fresh_page_seconds(region_bytes: int = FRESH_REGION_BYTES, reps: int = 5) -> float:
    """Seconds per page to map a fresh anonymous region, write each page once and unmap it (fastest of `reps`):
    what a buffer above the allocator's mmap threshold costs on every call (the kernel faults in and zeroes
    each page on first write; `workbench.measure.cluster.collectives.fresh_page_time`)."""
    import mmap
    import time

    import numpy as np

    from workbench.measure.cluster.collectives import PAGE_BYTES

    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        region = mmap.mmap(-1, region_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view = np.frombuffer(region, dtype=np.uint8)
        view[::PAGE_BYTES] = 1  # one write per page: the fault (and the kernel's zeroing) is the cost
        del view
        region.close()
        best = min(best, time.perf_counter() - start)
    return best / (region_bytes / PAGE_BYTES)


def fresh_page_constant(date: str, machine: str, reps: int = 5) -> Constant:
    """`fresh_page` (seconds per 4 KiB page of a fresh mapping, written once) as a measured constant."""
    seconds = fresh_page_seconds(reps=reps)
    return Constant("fresh_page", seconds, "s", "measured",
                    f"workbench.measure.cluster.host.fresh_page_seconds on this machine ({machine}; {date}): mmap a fresh "
                    f"{FRESH_REGION_BYTES // 2**20} MiB anonymous region, write one byte per 4 KiB page, munmap; "
                    f"fastest of {reps}, per page (transparent huge pages off for malloc's mappings: 'madvise')")


def host_model(device: DeviceSpec, constants: dict[str, Constant]) -> HostModel:
    """HostModel from the CPU preset (cores, program_dispatch) and the cluster constants (scheduler_tick, and
    fresh_page where measured)."""
    if "scheduler_tick" not in constants:
        raise WorkbenchError("the cluster constants have no scheduler_tick (run scripts/measure_collectives.py "
                             "--only fit)")
    fresh = constants.get("fresh_page")
    return HostModel(int(device.cores), float(constants["scheduler_tick"].value), device.program_dispatch_s,
                     float(fresh.value) if fresh is not None else 0.0)
