"""llama.cpp's RPC layer split run here across shaped links: one network namespace per process
(`workbench.cluster.netns.ShapedNetwork`), an RPC server in each but the first, the client in the first
(`workbench.engines.rpc_worker`), the engine's timings and every veth's /proc/net/dev counters turned into
`EngineRun` rows beside the `llamacpp_rpc` scheme's prediction for the same deployment.

Per-token bytes are counted over the timed tokens only: the counters are read before and after a phase, and the
phase's first decode token (whose graph llama.cpp sends whole, `RPC_CMD_GRAPH_COMPUTE`) is run before the first
reading; an idle window with no tokens gives the background rate, subtracted. Wire bytes carry 66 bytes of
Ethernet + IPv4 + TCP headers a packet (`FRAME_BYTES`); the RPC payload is wire bytes less 66 per packet.
Everything started is ended, and every namespace removed, on success, failure or Ctrl-C (`RpcDeployment`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.cluster.netns import LinkShape, ShapedNetwork, shaping_unavailable
from workbench.engines.runs import EngineRun
from workbench.errors import WorkbenchError, require_int, require_positive
from workbench.io import DATA_DIR, write_csv_atomic
from workbench.models import TransformerConfig
from workbench.schemes.edge_engines import FRAME_BYTES, llamacpp_layers, output_device

ENGINE, ENGINE_VERSION, COMMIT = "llama.cpp", "llama-cpp-python 0.3.36", "0c1e57098"
BUILD = "GGML_RPC=ON, AVX2-class kernels (the engines extra's CMAKE_ARGS)"
RUNS_CSV = DATA_DIR / "engines" / "llamacpp_rpc_runs.csv"
WIRE_CSV = DATA_DIR / "engines" / "llamacpp_rpc_wire.csv"
PORT = 50052
PROFILE = "this_machine_llamacpp_t1"
# Llama-shaped random-weight models small enough that the link, not the cores, sets the pace at 100 Mbit
SHAPES = {
    "rpc-tiny": TransformerConfig("rpc-tiny", "llama", n_layers=4, d_model=256, n_heads=4, d_ff=512, vocab_size=2048,
                                  n_kv_heads=2, max_positions=512, tie_embeddings=False),
    "rpc-small": TransformerConfig("rpc-small", "llama", n_layers=8, d_model=512, n_heads=8, d_ff=1408,
                                   vocab_size=8192, n_kv_heads=4, max_positions=512, tie_embeddings=False),
}


@dataclass(frozen=True)
class RpcConfig:
    """One deployment to run: model shape, processes (client + servers), link rate, tokens, repeats."""

    shape: str = "rpc-small"
    processes: int = 2
    link_mbit: float = 1000.0
    prompt_tokens: int = 32
    decode_tokens: int = 32
    repeats: int = 3
    threads: int = 1
    idle_s: float = 2.0

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise WorkbenchError(f"shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")
        require_int("processes", self.processes, low=2, high=8)
        require_positive("link_mbit", self.link_mbit)
        require_int("prompt_tokens", self.prompt_tokens, low=1, high=256)
        require_int("decode_tokens", self.decode_tokens, low=1, high=200)
        require_int("repeats", self.repeats, low=1, high=100)
        require_int("threads", self.threads, low=1, high=64)
        require_positive("idle_s", self.idle_s)

    @property
    def model(self) -> TransformerConfig:
        """The shape's TransformerConfig."""
        return SHAPES[self.shape]

    @property
    def tensor_split(self) -> str:
        """The scheme's split: one equal share per process, the client's included."""
        return ",".join(["1"] * self.processes)


def offload(n_layers: int, split) -> tuple[int, tuple[float, ...]]:
    """(n_gpu_layers, RPC tensor_split) that make llama.cpp's `load_tensors` (src/llama-model.cpp:1589-1614:
    layers before i_gpu_start stay on the CPU, the rest go by cumulative split) place exactly the layers the
    scheme's rule gives (client first on the CPU, then each server; the output layer counted on its device)."""
    layers = list(llamacpp_layers(n_layers, split))
    layers[output_device(n_layers, split)] += 1
    on_client = layers[0]
    return n_layers + 1 - on_client, tuple(float(a) for a in layers[1:])


@dataclass(frozen=True)
class PhaseBytes:
    """Per-token bytes and packets of one phase: each process's veth (rx, tx) and the idle-corrected link sum."""

    root_sent: float
    root_recv: float
    link: float
    link_packets: float
    root_sent_packets: float
    root_recv_packets: float

    @property
    def link_payload(self) -> float:
        """RPC bytes every link carried per token: wire bytes less each packet's headers."""
        return self.link - FRAME_BYTES * self.link_packets


def phase_bytes(windows, idle, idle_s: float, seconds: list[float], tokens: int) -> PhaseBytes:
    """Per-token bytes from counter windows [[before, after], ...] (each a list of (rx B, rx pkts, tx B, tx pkts)
    per process), less the idle rate over each window's timed seconds; `tokens` per window."""
    def delta(a, b):
        return [[y - x for x, y in zip(p, q, strict=True)] for p, q in zip(a, b, strict=True)]

    rate = [[v / idle_s for v in proc] for proc in delta(*idle)]
    totals = [0.0] * 6
    for (before, after), secs in zip(windows, seconds, strict=True):
        d = delta(before, after)
        d = [[v - r * secs for v, r in zip(proc, rates)] for proc, rates in zip(d, rate)]
        totals[0] += d[0][2]
        totals[1] += d[0][0]
        totals[2] += sum(p[2] for p in d)
        totals[3] += sum(p[3] for p in d)
        totals[4] += d[0][3]
        totals[5] += d[0][1]
    n = tokens * len(windows)
    t = [max(v, 0.0) / n for v in totals]
    return PhaseBytes(t[0], t[1], t[2], t[3], t[4], t[5])


def predict(config: RpcConfig, phase: str, device=None):
    """The `llamacpp_rpc` result on this deployment: `config.processes` copies of this machine's llama.cpp
    profile (1 thread) on a switch whose ports are the shaped rate, with the wire latency fitted for that link class
    in data/constants/cluster.toml (0 for a rate it has no fit of: stated in the row's method)."""
    from workbench.hardware import load_device
    from workbench.network import Link, Topology
    from workbench.schemes.base import Cluster
    from workbench.schemes.edge_engines import evaluate_llamacpp
    from workbench.schemes.workload import Workload
    from workbench.studies.cluster import stored_fits
    from workbench.units import mbps_to_bytes_per_s

    device = load_device(PROFILE) if device is None else device
    fits = stored_fits().set_index("link_class")
    link_class = LinkShape(config.link_mbit).link_class
    latency = float(fits.loc[link_class, "latency_s"]) if link_class in fits.index else 0.0
    # per-message endpoint time: none (assumed): the fitted message_overhead (651 us) is jax.distributed + gloo's
    # dispatch, not ggml-rpc's raw socket writes, and this machine has no fit of the latter
    link = Link(mbps_to_bytes_per_s(config.link_mbit), latency, name=link_class, message_overhead_s=0.0)
    cluster = Cluster((device,) * config.processes, Topology("switch", config.processes, link))
    kv = config.prompt_tokens + config.decode_tokens // 2
    workload = Workload(phase, seq_len=config.prompt_tokens, kv_len=kv, weight_bits=16.0, activation_bits=32.0,
                        kv_bits=16.0, engine="llama.cpp", weight_format="f16")
    return evaluate_llamacpp(config.model, cluster, workload, config.tensor_split)


class RpcDeployment:
    """The namespaces and processes of one run; `close()` ends every process it started and removes every
    namespace, whatever happened (a context manager; also on SIGTERM through `run`)."""

    def __init__(self, config: RpcConfig):
        self.config = config
        self.network = ShapedNetwork(config.processes, LinkShape(config.link_mbit))
        self.servers: list[subprocess.Popen] = []
        self.client: subprocess.Popen | None = None

    def __enter__(self) -> RpcDeployment:
        reason = shaping_unavailable()
        if reason:
            raise WorkbenchError(reason)
        self.network.setup()
        return self

    def _spawn(self, i: int, args: list[str], **kw) -> subprocess.Popen:
        """Start `python -m workbench.engines.rpc_worker ARGS` in process i's namespace, SIGINT at its default
        and in its own process group (Ctrl-C reaches the launcher, which ends it)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                       os.environ.get("PYTHONPATH")])))
        return subprocess.Popen(self.network.command_prefix(i) + [sys.executable, "-m",
                                                                  "workbench.engines.rpc_worker", *args],
                                env=env, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)

    def start_servers(self) -> None:
        """One RPC server per process but the first, each waited for until it listens."""
        for i in range(1, self.config.processes):
            proc = self._spawn(i, ["serve", f"{self.network.address(i)}:{PORT}", str(self.config.threads)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.servers.append(proc)
            line = proc.stdout.readline()
            if not line.startswith("serving"):
                raise WorkbenchError(f"RPC server {i} did not start (exit {proc.poll()})")
        time.sleep(0.5)  # start_server binds after printing its banner

    def run_client(self, model_path: Path, timeout_s: float) -> dict:
        """The client's measurements (see rpc_worker.client)."""
        c = self.config
        n_gpu_layers, rpc_split = offload(c.model.n_layers, [1.0] * c.processes)
        tag = self.network.tag
        config = {"servers": [f"{self.network.address(i)}:{PORT}" for i in range(1, c.processes)],
                  "rpc_split": list(rpc_split), "n_gpu_layers": n_gpu_layers, "model": str(model_path),
                  "prompt_tokens": c.prompt_tokens, "decode_tokens": c.decode_tokens, "threads": c.threads,
                  "namespaces": [self.network.namespace(i) for i in range(c.processes)],
                  "interfaces": [f"wb{tag}v{i}" for i in range(c.processes)], "idle_s": c.idle_s,
                  "repeats": c.repeats}
        self.client = self._spawn(0, ["client", json.dumps(config)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            out, err = self.client.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise WorkbenchError(f"the llama.cpp RPC client did not finish in {timeout_s:g} s") from None
        for line in out.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise WorkbenchError(f"the llama.cpp RPC client failed (exit {self.client.returncode}): "
                             f"{err.strip().splitlines()[-1] if err.strip() else 'no output'}")

    def close(self) -> None:
        """End every process started (SIGTERM, then SIGKILL after 5 s) and remove the namespaces."""
        procs = [p for p in [self.client, *self.servers] if p is not None]
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        self.network.teardown()

    def __exit__(self, *exc) -> None:
        self.close()


def contention_line(processes: int, threads: int) -> str:
    """What shared this machine's CPUs during the run."""
    return (f"{processes} processes x {threads} thread on {len(os.sched_getaffinity(0))} vCPUs (the pipeline runs one "
            f"split at a time); other helpers' niced tests may run (load_1min says how busy)")


def rows_from(config: RpcConfig, result: dict, link_mbit_class: str) -> tuple[list[EngineRun], list[dict]]:
    """The run rows (decode and prefill) and their wire-packet companions from the client's result."""
    from workbench.engines.campaign import cpu_label

    model = config.model
    rows, wire = [], []
    load = round(os.getloadavg()[0], 2)
    for phase in ("decode", "prefill"):
        if phase == "decode":
            steps = [statistics.median(r) for r in result["decode_s"]]
            seconds = statistics.median(steps)
            windows, window_s = result["decode_counters"], [sum(r) for r in result["decode_s"]]
            tokens = config.decode_tokens
        else:
            seconds = statistics.median(result["prefill_s"]) / config.prompt_tokens
            windows, window_s = result["prefill_counters"], result["prefill_s"]
            tokens = config.prompt_tokens
        counted = phase_bytes(windows, result["idle_counters"], config.idle_s, window_s, tokens)
        predicted = predict(config, phase)
        per_token = predicted.latency_s / (config.prompt_tokens if phase == "prefill" else 1)
        traffic = predicted.extra["traffic"]
        payload = traffic.payload_bytes / (config.prompt_tokens if phase == "prefill" else 1)
        comm = (predicted.comm_link_latency_s + predicted.comm_bytes_s) / predicted.latency_s
        rows.append(EngineRun(
            engine=ENGINE, engine_version=ENGINE_VERSION, commit=COMMIT, build=BUILD, host=platform.node(),
            cpu=cpu_label(), date=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            scheme="llamacpp_rpc", shape=model.name, n_layers=model.n_layers, d_model=model.d_model,
            n_heads=model.n_heads, n_kv_heads=model.n_kv_heads, d_head=model.d_head, d_ff=model.d_ff,
            vocab_size=model.vocab_size, n_experts=model.n_experts, n_active_experts=model.n_active_experts,
            format="f16", processes=config.processes, threads=config.threads, link_mbit=float(config.link_mbit),
            phase=phase, tokens=tokens * len(windows), seconds_per_token=seconds,
            root_sent_bytes_per_token=counted.root_sent, root_recv_bytes_per_token=counted.root_recv,
            link_bytes_per_token=counted.link, predicted_seconds_per_token=per_token,
            predicted_bytes_per_token=payload, comm_share=min(max(comm, 0.0), 1.0), load_1min=load,
            contention=contention_line(config.processes, config.threads),
            method=(f"llama-bench's method through ctypes (workbench.engines.rpc); {phase} "
                    + ("median over repeats of each repeat's median step, the first step after the prompt "
                       "(graph sent whole) not counted" if phase == "decode" else
                       f"median whole-prompt time / {config.prompt_tokens} tokens, the graph sent whole "
                       "(RPC_CMD_GRAPH_COMPUTE) included")
                    + "; bytes: /proc/net/dev of every veth (tx summed), idle rate subtracted, on the wire "
                      "(66 B headers a packet; RPC payload = link bytes - 66 x link packets, "
                      "llamacpp_rpc_wire.csv); predicted_bytes: llamacpp_rpc's RPC payload; comm_share: the "
                      f"model's; link {link_mbit_class}, tensor_split {config.tensor_split}")))
        wire.append({"shape": model.name, "processes": config.processes, "link_mbit": float(config.link_mbit),
                     "phase": phase, "date": rows[-1].date, "tokens": tokens * len(windows),
                     "link_packets_per_token": counted.link_packets,
                     "root_sent_packets_per_token": counted.root_sent_packets,
                     "root_recv_packets_per_token": counted.root_recv_packets,
                     "link_payload_bytes_per_token": counted.link_payload,
                     "predicted_payload_bytes_per_token": payload,
                     "predicted_wire_bytes_per_token": (traffic.sent_wire_bytes + traffic.received_wire_bytes)
                     / (config.prompt_tokens if phase == "prefill" else 1)})
    return rows, wire


def run_llamacpp_rpc(config: RpcConfig, work: Path, timeout_s: float = 600.0) -> tuple[list[EngineRun], list[dict]]:
    """Write the model, start the servers and the client in their namespaces, return the rows; every process and
    namespace is gone when this returns or raises (Ctrl-C included)."""
    from workbench.engines.gguf_model import write_gguf

    work.mkdir(parents=True, exist_ok=True)
    path = write_gguf(config.model, work / f"{config.shape}-f16.gguf")
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        with RpcDeployment(config) as deployment:
            deployment.start_servers()
            result = deployment.run_client(path, timeout_s)
            return rows_from(config, result, deployment.network.shape.link_class)
    finally:
        signal.signal(signal.SIGTERM, previous)
        path.unlink(missing_ok=True)


WIRE_KEY = ["shape", "processes", "link_mbit", "phase"]


def merge_wire(path: Path, rows: list[dict]) -> Path:
    """The packet companions of the run rows (each with its run's date) merged into `path` (same deployment and
    phase replaced by the newer), sorted, atomically."""
    import pandas as pd

    new = pd.DataFrame(rows)
    if path.exists():
        new = pd.concat([pd.read_csv(path), new], ignore_index=True)
    new["link_mbit"] = new["link_mbit"].astype(float)
    new = new.drop_duplicates(WIRE_KEY, keep="last")
    frame = new.sort_values(WIRE_KEY, kind="stable").reset_index(drop=True)
    return write_csv_atomic(path, frame)
