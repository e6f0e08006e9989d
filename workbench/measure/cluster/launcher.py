"""Start N worker processes on this machine, run one experiment across them, always tear them down.

`launch(ClusterSpec(...))` picks a free coordinator port (or checks the one given), starts every
worker in its own process group (optionally inside a shaped network namespace), watches them, and
returns process 0's gathered rows. Teardown runs on success, on a worker's death, on a timeout and
on Ctrl-C / SIGTERM: every process group gets SIGTERM, then SIGKILL, and is reaped; shaped
namespaces are removed. Workers also exit by themselves if the launcher vanishes.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.core.io import REPO_ROOT
from workbench.measure.cluster.netns import LinkShape, ShapedNetwork, shaping_unavailable

MAX_PROCESSES = 16
LOG_TAIL_LINES = 25
PORT_IN_USE_MARKERS = ("address already in use", "failed to add port", "could not bind", "eaddrinuse")


class ProcessDied(WorkbenchError):
    """A worker exited with a non-zero code (the message names it and shows its log tail)."""


@dataclass(frozen=True)
class ClusterSpec:
    """What to run: `processes` x `devices_per_process` devices, an experiment and its parameters."""

    processes: int
    experiment: str
    params: dict = field(default_factory=dict)
    devices_per_process: int = 1
    shape: LinkShape | None = None
    port: int | None = None
    timeout_s: float = 600.0
    init_timeout_s: int = 120
    # Placement experiments (both off by default). On this 2-core VM, pinning process i to core i mod cores
    # made every small 2-process psum wait a 4 ms tick (its XLA, gloo and Python threads then share one core),
    # where unpinned calls mostly did not; idle-class spinners did not remove the tick mode either.
    pin_cores: bool = False  # process i runs on core i mod cores (its XLA and gloo threads too)
    keep_cores_awake: bool = False  # one SCHED_IDLE spinner per core while the workers run (`core_wakers`)

    def __post_init__(self) -> None:
        from workbench.measure.cluster.experiments import check_parameters

        require_int("processes", self.processes, low=1, high=MAX_PROCESSES)
        require_int("devices_per_process", self.devices_per_process, low=1, high=8)
        if not isinstance(self.params, dict):
            raise WorkbenchError(f"params must be a dict, got {type(self.params).__name__}")
        check_parameters(self.experiment, self.params)
        try:
            json.dumps(self.params)
        except TypeError as exc:
            raise WorkbenchError(f"params must be JSON-serialisable: {exc}") from None
        if self.port is not None:
            require_int("port", self.port, low=1024, high=65535)
        require_positive("timeout_s", self.timeout_s)
        require_int("init_timeout_s", self.init_timeout_s, low=1)


@dataclass(frozen=True)
class ClusterRun:
    """The outcome: process 0's gathered rows, run metadata, wall time, and how links were set up."""

    rows: pd.DataFrame
    meta: dict
    wall_s: float
    link_class: str
    note: str = ""


def port_is_free(port: int) -> bool:
    """True if nothing listens on `port` on any address (stricter than the coordinator, which binds only
    the address its processes use: a port taken on any interface is not offered)."""
    for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((addr, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            if family == socket.AF_INET6:  # no IPv6 here: the IPv4 check decides
                continue
            raise
    return True


def free_port() -> int:
    """A port the kernel just handed out and that is free on all addresses."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port_is_free(port):
            return port
    raise WorkbenchError("could not find a free TCP port for the coordinator")


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def terminate_groups(procs: list[subprocess.Popen], grace_s: float = 3.0) -> None:
    """SIGTERM every live worker's process group, SIGKILL what is left after `grace_s`, reap all."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(0.02)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        # groups may hold grandchildren (none expected): make sure the group is gone
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@contextmanager
def _signals_raise_interrupt():
    """While launching, SIGINT/SIGTERM/SIGHUP raise KeyboardInterrupt once (later ones are ignored,
    so a second Ctrl-C cannot cut the teardown short)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = []

    def handler(signum, frame):
        if not raised:
            raised.append(signum)
            raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


# Runs at SCHED_IDLE on one core: any normal thread preempts it at once, and the core never idles.
# On a virtual machine an idle vCPU halts, and waking it again waits for the host (a 4 ms tick here),
# which is what a 2-process psum of 32 B to 2 KiB showed without it; a bare-metal device has no such wait.
# It exits when its launcher is gone.
SPINNER = ("import os, sys\ncore, parent = int(sys.argv[1]), int(sys.argv[2])\nos.sched_setaffinity(0, {core})\n"
           "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile os.getppid() == parent:\n"
           "    for _ in range(100000):\n        pass\n")


def usable_cores() -> list[int]:
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def core_wakers(cores: list[int]) -> list[subprocess.Popen]:
    """One SCHED_IDLE spinner per core (see SPINNER): keeps idle cores from halting while workers run."""
    return [subprocess.Popen([sys.executable, "-c", SPINNER, str(core), str(os.getpid())], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for core in cores]


def placement_label(spec: ClusterSpec) -> str:
    """How the processes were placed, for the data files: 'pinned+awake', 'pinned', 'awake' or 'free'."""
    parts = [name for name, on in (("pinned", spec.pin_cores), ("awake", spec.keep_cores_awake)) if on]
    return "+".join(parts) or "free"


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "_proxy" not in k.lower()}
    env.update(JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="1")
    env.pop("XLA_FLAGS", None)  # the parent's forced host-device count must not leak into workers
    src = str(REPO_ROOT)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _worker_command(spec: ClusterSpec, i: int, coordinator: str, result: Path, link_class: str,
                    cores: list[int]) -> list[str]:
    pin = ["--cpu", str(cores[i % len(cores)])] if spec.pin_cores else []
    return [sys.executable, "-m", "workbench.measure.cluster.worker", "--process-id", str(i),
            "--num-processes", str(spec.processes), "--coordinator", coordinator, "--coordinator-bind", coordinator,
            "--devices-per-process", str(spec.devices_per_process), "--experiment", spec.experiment,
            "--params", json.dumps(spec.params), "--result", str(result), "--link-class", link_class,
            "--parent-pid", str(os.getpid()), "--init-timeout", str(spec.init_timeout_s)] + pin


def _watch(procs: list[subprocess.Popen], logs: list[Path], port: int, timeout_s: float) -> None:
    """Return when every worker exited 0; raise naming the first that failed or on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            i, code = failed[0]
            tail = _log_tail(logs[i])
            if any(m in tail.lower() for m in PORT_IN_USE_MARKERS):
                raise WorkbenchError(f"coordinator port {port} is already in use (process {i} could not bind it); "
                                     f"pass another --port or leave it out to pick a free one.\n{tail}")
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise ProcessDied(f"process {i} (pid {procs[i].pid}) {how}; the other processes were stopped. "
                              f"Last lines of its log:\n{tail}")
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            raise WorkbenchError(f"cluster run timed out after {timeout_s:g} s (timeout_s); processes stopped")
        time.sleep(0.05)


def launch(spec: ClusterSpec, announce=None) -> ClusterRun:
    """Run `spec` on this machine and return process 0's rows; never leaves a process or namespace behind.

    `announce(message)` receives progress lines (default: stderr), including the worker pids.
    """
    announce = announce or (lambda msg: print(f"cluster: {msg}", file=sys.stderr, flush=True))
    note, network = "", None
    if spec.shape is not None:
        reason = shaping_unavailable()
        if reason:
            note = f"{reason}; running on loopback instead"
            announce(note)
        else:
            network = ShapedNetwork(spec.processes, spec.shape)
    link_class = spec.shape.link_class if network else "loopback"
    if spec.port is not None and network is None and not port_is_free(spec.port):
        raise WorkbenchError(f"coordinator port {spec.port} is already in use; pass another --port "
                             f"or leave it out to pick a free one")
    port = spec.port or free_port()
    coordinator = f"{network.address(0) if network else '127.0.0.1'}:{port}"
    procs: list[subprocess.Popen] = []
    started = time.perf_counter()
    with _signals_raise_interrupt(), ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wb-cluster-")))
        if network is not None:
            stack.enter_context(network)
        stack.callback(terminate_groups, procs)  # runs before the namespaces and workdir go
        result = workdir / "result.json"
        logs = [workdir / f"process{i}.log" for i in range(spec.processes)]
        env = _worker_env()
        cores = usable_cores()
        if spec.keep_cores_awake:
            wakers = core_wakers(cores)
            stack.callback(terminate_groups, wakers)
        for i in range(spec.processes):
            prefix = network.command_prefix(i) if network else []
            with open(logs[i], "wb") as log:
                procs.append(subprocess.Popen(prefix + _worker_command(spec, i, coordinator, result, link_class, cores),
                                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              start_new_session=True, cwd=REPO_ROOT, env=env))
        announce(f"started {spec.processes} processes ({link_class}, coordinator {coordinator}): "
                 f"pids {[p.pid for p in procs]}")
        _watch(procs, logs, port, spec.timeout_s)
        if not result.exists():
            raise WorkbenchError(f"process 0 exited cleanly but wrote no result; its log:\n{_log_tail(logs[0])}")
        payload = json.loads(result.read_text())
    meta = {**payload["meta"], "placement": placement_label(spec)}
    return ClusterRun(pd.DataFrame(payload["rows"]), meta, time.perf_counter() - started, link_class, note)


def run_cluster(experiment: str, processes: int, params: dict | None = None, **kw) -> ClusterRun:
    """Shorthand: `launch(ClusterSpec(processes, experiment, params or {}, **kw))`."""
    return launch(ClusterSpec(processes, experiment, params or {}, **kw))
