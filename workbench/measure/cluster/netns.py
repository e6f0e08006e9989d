"""Shaped links for local clusters: one network namespace per process, veth pairs to a bridge, `tc tbf`.

Layout for n processes (names carry the launcher's pid, so concurrent runs never collide)::

    ns wb<pid>-0 [veth 10.213.0.1/24] --tbf-- +
    ns wb<pid>-1 [veth 10.213.0.2/24] --tbf-- + bridge br0 in its own namespace wb<pid>-br
    ...                                       +

Each process's uplink (its veth) and downlink (the bridge port) are rate-limited with a token
bucket filter, so the network looks like a switch with rate-limited ports (2 hops between two
devices). `tc netem` is not available in this kernel: per-hop latency is not injected, it is what
the veth/bridge path costs and is measured. The bridge lives in its own namespace, so no packet
can reach any address outside these namespaces. Gloo binds to the address the hostname resolves
to, so every namespace gets an /etc/netns/<name>/hosts (which `ip netns exec` mounts over
/etc/hosts) mapping the hostname to that namespace's address.

Everything created is removed by `teardown()`, which is idempotent and runs on failure too
(`ShapedNetwork` is a context manager). Needs root, `ip` and `tc`; `shaping_unavailable()` says why not.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.core.units import mbps_to_bytes_per_s

NETNS_ETC = Path("/etc/netns")
SUBNET = "10.213.0"  # private, and only ever configured inside this run's namespaces
NAME_PATTERN = re.compile(r"^wb(\d+)-(\d+|br)$")


FRAME_BYTES = 1500 + 14  # the largest packet on these veths: 1500-byte MTU + Ethernet header
TIGHT_BURST_S = 100e-6  # the bucket's refill slack above one frame (see `tight_burst_bytes`)


def tight_burst_bytes(rate_mbit: float) -> int:
    """A token bucket that shapes each message, not only bulk traffic: one frame (tbf must hold the largest packet,
    else it drops it; a GSO packet larger than the bucket is segmented first: linux net/sched/sch_tbf.c
    tbf_enqueue / tbf_segment), or 100 us of traffic where that is more (at 1 Gbit one frame is 12 us, shorter
    than the timer slack of this VM). Measured here (data/engines/link_check.csv, workbench.measure.cluster.linkcheck): at
    100 Mbit a 10 KB message takes its wire bytes at the rate (x0.96-0.99), at 10 Mbit x1.13 (the first frame leaves
    at once from a full bucket), and 1 s of bulk runs within 5 % of it; the default bucket (64 KiB) lets a 10 KB
    message through 2.5-4x (100 Mbit) to 24-55x (10 Mbit) faster than the rate. At 1 Gbit this VM's python endpoints, not tbf,
    set the pace with either bucket."""
    require_positive("rate_mbit", rate_mbit)
    return max(FRAME_BYTES, int(mbps_to_bytes_per_s(rate_mbit) * TIGHT_BURST_S))


@dataclass(frozen=True)
class LinkShape:
    """A rate limit for every process's link (token bucket), in megabits per second."""

    rate_mbit: float
    burst_bytes: int = 0  # 0 -> max(64 KiB, 4 ms of traffic): tbf needs at least rate/HZ
    queue_ms: float = 200.0  # how long a packet may wait in the bucket's queue before being dropped

    def __post_init__(self) -> None:
        require_positive("rate_mbit", self.rate_mbit)
        require_int("burst_bytes", self.burst_bytes, low=0)
        if 0 < self.burst_bytes < FRAME_BYTES:
            raise WorkbenchError(f"burst_bytes must be 0 (the default) or >= {FRAME_BYTES} (one frame: tbf drops a "
                                 f"packet larger than its bucket), got {self.burst_bytes}")
        require_positive("queue_ms", self.queue_ms)
        if self.rate_mbit > 100_000:
            raise WorkbenchError(f"rate_mbit must be <= 100000 (100 Gbit), got {self.rate_mbit}")

    @property
    def burst(self) -> int:
        """Bucket size in bytes."""
        return self.burst_bytes or max(64 * 1024, int(mbps_to_bytes_per_s(self.rate_mbit) * 0.004))

    @property
    def link_class(self) -> str:
        """Name of this link class in data files, e.g. 'tbf_125mbit'."""
        return f"tbf_{self.rate_mbit:g}mbit"

    def tbf_args(self) -> list[str]:
        """Arguments after `tc qdisc add dev X root`."""
        return ["tbf", "rate", f"{self.rate_mbit:g}mbit", "burst", str(self.burst), "latency", f"{self.queue_ms:g}ms"]


def shaping_unavailable() -> str | None:
    """Why shaped links cannot be set up here (None when they can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "shaped links need root (network namespaces, veth, tc); not running as root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"shaped links need {' and '.join(missing)} (iproute2), not found on PATH"
    return None


def _run(*args: str) -> None:
    """Run one ip/tc command; a failure raises WorkbenchError with the command and its stderr."""
    proc = subprocess.run(list(args), capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise WorkbenchError(f"shaped network: `{' '.join(args)}` failed: {proc.stderr.strip()}")


def list_namespaces() -> list[str]:
    """Names of the network namespaces on this machine."""
    proc = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_namespace(name: str) -> None:
    """Delete a namespace (its veth ends go with it) and its /etc/netns directory; no error if absent."""
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def cleanup_stale() -> list[str]:
    """Remove namespaces left by a launcher that was killed outright (its pid no longer exists)."""
    removed = []
    for name in list_namespaces():
        m = NAME_PATTERN.match(name)
        if m and not _pid_alive(int(m.group(1))):
            remove_namespace(name)
            removed.append(name)
    return removed


@dataclass
class ShapedNetwork:
    """n namespaces on a bridge with tbf-limited links; use as a context manager."""

    n_processes: int
    shape: LinkShape
    tag: str = field(default_factory=lambda: str(os.getpid()))
    hostname: str = field(default_factory=socket.gethostname)
    created: list[str] = field(default_factory=list)
    made_etc_dir: bool = False

    def __post_init__(self) -> None:
        require_int("n_processes", self.n_processes, low=1, high=200)
        if not self.tag.isdigit():
            raise WorkbenchError(f"tag must be digits (a pid), got {self.tag!r}")

    def namespace(self, i: int) -> str:
        """Namespace of process i."""
        return f"wb{self.tag}-{i}"

    @property
    def bridge_namespace(self) -> str:
        """Namespace holding the bridge."""
        return f"wb{self.tag}-br"

    def address(self, i: int) -> str:
        """IPv4 address of process i."""
        return f"{SUBNET}.{i + 1}"

    def command_prefix(self, i: int) -> list[str]:
        """Prefix that runs a command inside process i's namespace."""
        return ["ip", "netns", "exec", self.namespace(i)]

    def setup(self) -> ShapedNetwork:
        """Create namespaces, bridge, veth pairs, addresses, tbf qdiscs and hosts files."""
        reason = shaping_unavailable()
        if reason:
            raise WorkbenchError(reason)
        cleanup_stale()
        self.made_etc_dir = self.made_etc_dir or not NETNS_ETC.exists()
        try:
            br = self.bridge_namespace
            _run("ip", "netns", "add", br)
            self.created.append(br)
            _run("ip", "-n", br, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", br, "link", "set", "br0", "up")
            for i in range(self.n_processes):
                self._add_process(i)
        except BaseException:
            self.teardown()
            raise
        return self

    def _add_process(self, i: int) -> None:
        ns, br = self.namespace(i), self.bridge_namespace
        inner, outer = f"wb{self.tag}v{i}", f"wb{self.tag}p{i}"
        if len(inner) > 15:
            raise WorkbenchError(f"interface name {inner!r} too long (tag {self.tag!r})")
        _run("ip", "netns", "add", ns)
        self.created.append(ns)
        _run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
        try:
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "netns", br)
        except WorkbenchError:
            subprocess.run(["ip", "link", "del", inner], capture_output=True, timeout=30)
            raise
        _run("ip", "-n", br, "link", "set", outer, "master", "br0")
        _run("ip", "-n", br, "link", "set", outer, "up")
        _run("ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", inner)
        _run("ip", "-n", ns, "link", "set", inner, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("tc", "-n", ns, "qdisc", "add", "dev", inner, "root", *self.shape.tbf_args())
        _run("tc", "-n", br, "qdisc", "add", "dev", outer, "root", *self.shape.tbf_args())
        etc = NETNS_ETC / ns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{self.address(i)} {self.hostname}\n")

    def teardown(self) -> None:
        """Remove every namespace and hosts file this network created (idempotent)."""
        for name in reversed(self.created):
            remove_namespace(name)
        self.created.clear()
        if self.made_etc_dir:
            try:
                NETNS_ETC.rmdir()  # only if empty: another tool's namespaces keep theirs
            except OSError:
                pass

    def __enter__(self) -> ShapedNetwork:
        return self.setup()

    def __exit__(self, *exc) -> None:
        self.teardown()
