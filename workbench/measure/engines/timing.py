"""One timing run at a time on this shared machine: every engine timing run holds /tmp/engine-timing.lock (flock(2),
the same lock `flock /tmp/engine-timing.lock ...` takes) and starts only when no llama.cpp RPC worker
(`pgrep -f rpc_worker`) is running, so two engines' runs never time each other."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from workbench.core.errors import WorkbenchError, require_positive

LOCK = "/tmp/engine-timing.lock"
OTHER_ENGINE = "rpc_worker"


def other_engine_running() -> bool:
    """Whether another engine's timing processes (llama.cpp RPC workers) are alive."""
    return subprocess.run(["pgrep", "-f", OTHER_ENGINE], capture_output=True).returncode == 0


@contextmanager
def timing_slot(lock: str = LOCK, wait_s: float = 900.0) -> Iterator[float]:
    """Hold the timing lock with no RPC worker alive; yield the 1-minute load average at the start."""
    require_positive("wait_s", wait_s)
    deadline = time.monotonic() + wait_s
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            while other_engine_running():
                if time.monotonic() > deadline:
                    raise WorkbenchError(f"waited {wait_s:g} s for the other engine's processes ({OTHER_ENGINE}) "
                                         "to end")
                time.sleep(2.0)
            yield os.getloadavg()[0]
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
