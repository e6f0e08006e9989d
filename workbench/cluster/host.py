"""What this machine adds around the network: its cores, the kernel's scheduler tick, the per-call dispatch.

The tick is 1 / CONFIG_HZ of the running kernel (read from /proc/config.gz or /boot/config-<release>);
the cores and the per-call dispatch of a compiled program come from the micro-benchmarked device preset
(`data/devices/this_machine_cpu.toml`). `workbench.cluster.fit` uses them for the oversubscription wait.
"""

from __future__ import annotations

import gzip
import platform
import re
from pathlib import Path

from workbench.cluster.fit import HostModel
from workbench.constants import Constant
from workbench.errors import WorkbenchError
from workbench.hardware import DeviceSpec

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


def host_model(device: DeviceSpec, constants: dict[str, Constant]) -> HostModel:
    """HostModel from the CPU preset (cores, program_dispatch) and the cluster constants (scheduler_tick)."""
    if "scheduler_tick" not in constants:
        raise WorkbenchError("the cluster constants have no scheduler_tick (run scripts/measure_collectives.py "
                             "--only fit)")
    dispatch = device.provenance.get("program_dispatch")
    return HostModel(int(device.cores), float(constants["scheduler_tick"].value),
                     float(dispatch.value) if dispatch is not None else 0.0)
