"""The fixed time one small message costs on this machine's namespace / veth / bridge path, measured by a TCP
ping-pong that moves bytes the way distributed-llama does (`native/pingpong.c`), apart from any engine run.

distributed-llama's syncs are one-way messages whose replies wait on them (each sync's time is one trip), so the
per-message time is half a round trip. Each side reads the way the engine's process does at that version:

* v0.4.0: the root's `SocketPool::readMany` recv()s on blocking sockets (the pool never sets them non-blocking:
  `src/socket.cpp@v0.4.0`:105-127, 181-210; only `SocketPool::read`, unused in inference, would); the worker's
  `Socket::read` turns its socket non-blocking after the first bytes and spins on EAGAIN (:53-83). Both send with
  TCP_NODELAY (:31-35, 116).
* v0.16.4: root and worker both spin on non-blocking sockets (turbo on by default, `src/app.cpp`:46, 286-288,
  349-352; `src/nn/nn-network.cpp`:34-45, 84-128, 399-403), TCP_NODELAY (:52-56).

The result is stored as a measured constant (data/constants/netns_links.toml) by scripts/netns_pingpong.py and
read by the prediction (`message_overhead_s`); it is never fitted on the engine runs it is compared with.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.core.constants import load_constants
from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.core.io import project_root
from workbench.measure.cluster.netns import LinkShape, ShapedNetwork

SOURCE = Path(__file__).with_name("native") / "pingpong.c"
CONSTANTS = "constants/netns_links.toml"
PORT = 9977
# (root side, worker side) read mode of each version (module docstring)
MODES = {"v0.4.0": ("blocking", "spin"), "v0.16.4": ("spin", "spin")}


@dataclass(frozen=True)
class PingPong:
    """Half round trips (s) of `rounds` ping-pongs of `message_bytes` at `link_mbit`, root / worker read modes."""

    version: str
    message_bytes: int
    link_mbit: float
    rounds: int
    mean_s: float
    median_s: float
    p90_s: float

    def __post_init__(self) -> None:
        require_int("message_bytes", self.message_bytes, low=1)
        require_int("rounds", self.rounds, low=1)
        require_positive("mean_s", self.mean_s)


def build(cache: Path | None = None) -> Path:
    """Compile native/pingpong.c with gcc -O2 into build/engines/ (kept); return the binary."""
    out = (cache or project_root() / "build" / "engines") / "pingpong"
    if out.exists() and out.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out
    if shutil.which("gcc") is None:
        raise WorkbenchError("the ping-pong benchmark needs gcc on PATH")
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["gcc", "-O2", "-o", str(out), str(SOURCE)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise WorkbenchError(f"building the ping-pong benchmark failed: {proc.stderr.strip()[-300:]}")
    return out


def summarise(version: str, message_bytes: int, link_mbit: float, round_trips_ns: list[int]) -> PingPong:
    """Half-round-trip statistics of the client's per-round nanoseconds, the first tenth dropped (warm-up)."""
    kept = sorted(round_trips_ns[len(round_trips_ns) // 10:])
    if not kept:
        raise WorkbenchError("rounds must leave at least one round after the warm-up tenth")
    half = [t / 2e9 for t in kept]
    return PingPong(version, message_bytes, link_mbit, len(half), statistics.fmean(half), statistics.median(half),
                    half[int(0.9 * (len(half) - 1))])


def measure(version: str, message_bytes: int = 64, rounds: int = 4000, link_mbit: float = 1000.0,
            gap_us: int = 0) -> PingPong:
    """Ping-pong `rounds` messages between two namespaces on the bridge (root = client in namespace 0, worker =
    server in namespace 1, busy for `gap_us` before each reply, subtracted), read modes of `version`; everything
    torn down afterwards."""
    if version not in MODES:
        raise WorkbenchError(f"version must be one of {', '.join(MODES)}, got {version!r}")
    require_int("message_bytes", message_bytes, low=1, high=1 << 20)
    require_int("rounds", rounds, low=10, high=10**6)
    require_int("gap_us", gap_us, low=0, high=10**6)
    binary = build()
    root_mode, worker_mode = MODES[version]
    net = ShapedNetwork(2, LinkShape(link_mbit))
    procs: list[subprocess.Popen] = []
    try:
        net.setup()
        procs.append(subprocess.Popen(net.command_prefix(1) + [str(binary), "server", str(PORT), str(message_bytes),
                                                               str(rounds), worker_mode, str(gap_us)]))
        time.sleep(0.3)
        client = subprocess.run(net.command_prefix(0) + [str(binary), "client", net.address(1), str(PORT),
                                                         str(message_bytes), str(rounds), root_mode],
                                capture_output=True, text=True, timeout=120)
        if client.returncode != 0:
            raise WorkbenchError(f"ping-pong client exited {client.returncode}: {client.stderr.strip()[-300:]}")
        return summarise(version, message_bytes, link_mbit, [int(x) - gap_us * 1000 for x in client.stdout.split()])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
        net.teardown()


def message_overhead_s(version: str) -> float:
    """The measured per-message time of `version`'s read pattern on this machine's namespace path (seconds)."""
    if version not in MODES:
        raise WorkbenchError(f"version must be one of {', '.join(MODES)}, got {version!r}")
    key = "netns_message_overhead_" + version.replace(".", "_")
    return float(load_constants(CONSTANTS)[key].value)
