"""llama.cpp's RPC layer split run here across shaped links: one network namespace per process
(`workbench.measure.cluster.netns.ShapedNetwork`), an RPC server in each but the first, the client in the first
(`workbench.measure.engines.rpc_worker`), the engine's timings and every veth's /proc/net/dev counters turned into
`EngineRun` rows beside the `llamacpp_rpc` scheme's prediction for the same deployment.

Per-token bytes are counted over the timed tokens only: the counters are read before and after a phase, and the
phase's first decode token (whose graph llama.cpp sends whole, `RPC_CMD_GRAPH_COMPUTE`) is run before the first
reading; an idle window with no tokens gives the background rate, subtracted. Wire bytes carry 66 bytes of
Ethernet + IPv4 + TCP headers a packet (`FRAME_BYTES`); the RPC payload is wire bytes less 66 per packet.
Everything started is ended, and every namespace removed, on success, failure or Ctrl-C (`RpcDeployment`).

Links: tbf at the rate with a one-frame bucket (`netns.tight_burst_bytes`), so each message, not only bulk
traffic, crosses at the rate (data/engines/link_check.csv); a token bucket still lets the first frame of a burst
through at the veth's speed, one frame time per burst faster than a wire of that rate. The prediction's link
takes ggml-rpc's endpoint time and the path's latency measured apart from these runs (`measure_link_times`,
data/constants/llamacpp_rpc.toml; `python -m workbench.measure.engines.rpc ping`).
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

from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.core.io import DATA_DIR, write_csv_atomic
from workbench.measure.cluster.netns import LinkShape, ShapedNetwork, shaping_unavailable, tight_burst_bytes
from workbench.measure.engines.runs import EngineRun
from workbench.model.models import TransformerConfig
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
    burst_bytes: int | None = None  # tbf's bucket; None: `tight_burst_bytes` (one frame at <= 121 Mbit)

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
        _ = self.shape_of_link  # validates burst_bytes (LinkShape: 0 or one frame at least)

    @property
    def shape_of_link(self) -> LinkShape:
        """Every process's link: the rate and the token bucket (`tight_burst_bytes` unless burst_bytes is given)."""
        burst = tight_burst_bytes(self.link_mbit) if self.burst_bytes is None else self.burst_bytes
        return LinkShape(self.link_mbit, burst_bytes=burst)

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


PING_CSV = DATA_DIR / "engines" / "llamacpp_rpc_ping.csv"
CONSTANTS = "constants/llamacpp_rpc.toml"


@dataclass(frozen=True)
class RpcLinkTimes:
    """ggml-rpc's measured times on this machine: per-message endpoint seconds and, per shaped rate, the wire
    latency of one traversal of the tight-bucket path (veth, tbf, bridge); `rpc_link_times` reads them."""

    message_overhead_s: float
    latency_s: dict[float, float]

    def latency(self, link_mbit: float) -> float | None:
        """Per-traversal latency at this rate; None where it was not measured."""
        return self.latency_s.get(float(link_mbit))


def rpc_link_times() -> RpcLinkTimes:
    """The measured constants of data/constants/llamacpp_rpc.toml (written by `measure_link_times`)."""
    from workbench.core.constants import load_constants

    table = load_constants(CONSTANTS)
    latency = {float(name.split("_")[1].removesuffix("mbit")): float(c.value) for name, c in table.items()
               if name.startswith("tight_") and name.endswith("_latency")}
    return RpcLinkTimes(float(table["rpc_message_overhead"].value), latency)


def predicted_link_line(config: RpcConfig) -> str:
    """How the prediction's link was set (for the row's method)."""
    times = rpc_link_times()
    latency = times.latency(config.link_mbit)
    wire = (f"wire latency {latency * 1e6:.1f} us a traversal (measured, tight bucket)" if latency is not None
            else f"wire latency 0 (none measured at {config.link_mbit:g} Mbit)")
    return (f"link at the tbf rate through {config.shape_of_link.burst} B buckets (`network.token_bucket_time`), "
            f"{wire}, ggml-rpc endpoint time {times.message_overhead_s * 1e6:.1f} us a message "
            f"(measured: {CONSTANTS})")


def repredicted(row: EngineRun) -> EngineRun:
    """A stored row with its prediction, comm share and the method's prediction line from the current model (what
    was measured kept)."""
    from dataclasses import replace

    if row.link_bucket_bytes is None:
        raise WorkbenchError(f"a run of {row.shape} at {row.link_mbit:g} Mbit has no link_bucket_bytes to predict with")
    config = RpcConfig(shape=row.shape, processes=row.processes, link_mbit=row.link_mbit,
                       burst_bytes=int(row.link_bucket_bytes))
    predicted = predict(config, row.phase)
    per_token = predicted.latency_s / (config.prompt_tokens if row.phase == "prefill" else 1)
    comm = (predicted.comm_link_latency_s + predicted.comm_bytes_s) / predicted.latency_s
    method = row.method.split("; predicted: ")[0] + f"; predicted: {predicted_link_line(config)}"
    return replace(row, predicted_seconds_per_token=per_token, comm_share=min(max(comm, 0.0), 1.0), method=method)


def predict(config: RpcConfig, phase: str, device=None):
    """The `llamacpp_rpc` result on this deployment: `config.processes` copies of this machine's llama.cpp
    profile (1 thread) on a switch whose ports are the shaped rate, with ggml-rpc's per-message endpoint time and
    the shaped path's per-traversal latency measured apart from the runs (`rpc_link_times`: tiny-command round trips
    on loopback and across the link; 0 latency for a rate not measured, stated in the row's method)."""
    from workbench.core.units import mbps_to_bytes_per_s
    from workbench.machine.hardware import load_device
    from workbench.machine.network import Link, Topology
    from workbench.schemes.base import Cluster
    from workbench.schemes.edge_engines import evaluate_llamacpp
    from workbench.schemes.workload import Workload

    device = load_device(PROFILE) if device is None else device
    times = rpc_link_times()
    latency = times.latency(config.link_mbit)
    link = Link(mbps_to_bytes_per_s(config.link_mbit), 0.0 if latency is None else latency,
                name=LinkShape(config.link_mbit).link_class, message_overhead_s=times.message_overhead_s,
                bucket_bytes=float(config.shape_of_link.burst))
    cluster = Cluster((device,) * config.processes, Topology("switch", config.processes, link))
    kv = config.prompt_tokens + config.decode_tokens // 2
    workload = Workload(phase, seq_len=config.prompt_tokens, kv_len=kv, weight_bits=16.0, activation_bits=32.0,
                        kv_bits=16.0, engine="llama.cpp", weight_format="f16")
    return evaluate_llamacpp(config.model, cluster, workload, config.tensor_split)


PING_GAP_S = 0.002  # between gapped round trips: a 1514 B bucket refills in 1.2 ms at 10 Mbit


def _ping(network: ShapedNetwork, i: int, endpoint: str, count: int, gap_s: float) -> dict:
    """`rpc_worker ping` from process i's namespace, `gap_s` apart."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[3]),
                                                                   os.environ.get("PYTHONPATH")])))
    out = subprocess.run(network.command_prefix(i) + [sys.executable, "-m", "workbench.measure.engines.rpc_worker", "ping",
                                                      endpoint, str(count), str(gap_s)],
                         capture_output=True, text=True, timeout=300, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise WorkbenchError(f"rpc ping failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")


def measure_link_times(rates: list[float], count: int = 2000) -> list[dict]:
    """ggml-rpc round trips of its smallest waited command (`rpc_worker.ping`) on loopback inside the server's
    namespace (no wire: twice the endpoint time) and across the tight-bucket link from another namespace (two hops
    each way more), back to back (as a pass queues its commands) and PING_GAP_S apart (the bucket refilled, so
    what the link adds is latency, not its rate), one RPC server per rate."""
    rows = []
    for rate in rates:
        config = RpcConfig(processes=2, link_mbit=rate)
        with RpcDeployment(config) as deployment:
            deployment.start_servers()
            endpoint = f"{deployment.network.address(1)}:{PORT}"
            got = [(where, gap, _ping(deployment.network, i, endpoint, count, gap))
                   for gap in (0.0, PING_GAP_S) for where, i in (("loopback", 1), ("shaped", 0))]
        date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for where, gap, result in got:
            rows.append({"link_mbit": float(rate), "burst_bytes": config.shape_of_link.burst, "path": where,
                         "gap_s": gap, "round_trips": result["round_trips"], "median_s": result["median_s"],
                         "p10_s": result["p10_s"], "p90_s": result["p90_s"], "load_1min": round(os.getloadavg()[0], 2),
                         "date": date})
    return rows


def link_constants_toml(rows: list[dict]) -> str:
    """data/constants/llamacpp_rpc.toml from `measure_link_times` rows: the endpoint time is half the median
    back-to-back loopback round trip (one request, one reply; median over the rates), the latency of one traversal
    a quarter of what the link adds to the gapped round trip (two hops each way: `network.collective_latency`'s
    star broadcast on a switch; 0 where the difference is below 0, i.e. within the noise)."""
    def median(path: str, gap: float, rate: float | None = None) -> float:
        return statistics.median(r["median_s"] for r in rows if r["path"] == path and r["gap_s"] == gap
                                 and (rate is None or r["link_mbit"] == rate))

    loop = median("loopback", 0.0)
    dates = sorted({r["date"][:10] for r in rows})
    host = f"{platform.node()}, {len(os.sched_getaffinity(0))} vCPUs"
    out = ["# ggml-rpc's per-message time on this machine, measured apart from the engine runs it predicts",
           "# (python -m workbench.measure.engines.rpc ping; raw round trips in data/engines/llamacpp_rpc_ping.csv)", "",
           "[rpc_message_overhead]", f"value = {loop / 2:.6g}", 'unit = "s"', 'kind = "measured"',
           f'source = "half the median round trip of RPC_CMD_GET_DEVICE_MEMORY (4-byte request, 16-byte reply), back '
           f'to back over loopback in the server\'s namespace, llama-cpp-python 0.3.36 (llama.cpp 0c1e57098), '
           f'{host}, {", ".join(dates)}; median over the rates of data/engines/llamacpp_rpc_ping.csv"', ""]
    for rate in sorted({r["link_mbit"] for r in rows}):
        burst = next(r["burst_bytes"] for r in rows if r["link_mbit"] == rate)
        added = median("shaped", PING_GAP_S, rate) - median("loopback", PING_GAP_S, rate)
        out += [f"[tight_{rate:g}mbit_latency]", f"value = {max(added / 4, 0.0):.6g}", 'unit = "s"',
                'kind = "measured"',
                f'source = "one traversal (veth, tbf {rate:g} Mbit with a {burst} B bucket, bridge): what the link adds '
                f'to the round trip ({added * 1e6:.1f} us) / 4 (two hops each way), 0 if below 0; RPC_CMD_GET_DEVICE_'
                f'MEMORY medians {PING_GAP_S * 1e3:g} ms apart, data/engines/llamacpp_rpc_ping.csv, {host}"', ""]
    return "\n".join(out)


def ping_main(argv: list[str]) -> int:
    """`python -m workbench.measure.engines.rpc ping [--link-mbit 10,100,1000] [--count N]`: measure, write the CSV and
    the constants."""
    import argparse

    import pandas as pd

    from workbench.core.io import write_text_atomic

    parser = argparse.ArgumentParser(prog="python -m workbench.measure.engines.rpc ping")
    parser.add_argument("--link-mbit", default="10,100,1000")
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args(argv)
    require_int("count", args.count, low=10, high=100_000)
    rows = measure_link_times([float(x) for x in args.link_mbit.split(",")], args.count)
    write_csv_atomic(PING_CSV, pd.DataFrame(rows))
    write_text_atomic(DATA_DIR / CONSTANTS, link_constants_toml(rows))
    for row in rows:
        print(f"{row['link_mbit']:g} Mbit {row['path']}: {row['median_s'] * 1e6:.1f} us a round trip")
    return 0


class RpcDeployment:
    """The namespaces and processes of one run; `close()` ends every process it started and removes every
    namespace, whatever happened (a context manager; also on SIGTERM through `run`)."""

    def __init__(self, config: RpcConfig):
        self.config = config
        self.network = ShapedNetwork(config.processes, config.shape_of_link)
        self.servers: list[subprocess.Popen] = []
        self.client: subprocess.Popen | None = None

    def __enter__(self) -> RpcDeployment:
        reason = shaping_unavailable()
        if reason:
            raise WorkbenchError(reason)
        self.network.setup()
        return self

    def _spawn(self, i: int, args: list[str], **kw) -> subprocess.Popen:
        """Start `python -m workbench.measure.engines.rpc_worker ARGS` in process i's namespace, SIGINT at its default
        and in its own process group (Ctrl-C reaches the launcher, which ends it)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[3]),
                                                                       os.environ.get("PYTHONPATH")])))
        return subprocess.Popen(self.network.command_prefix(i) + [sys.executable, "-m",
                                                                  "workbench.measure.engines.rpc_worker", *args],
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


def other_load() -> str:
    """Runnable tasks and the 1-minute load from /proc/loadavg, read before a run starts its processes."""
    fields = Path("/proc/loadavg").read_text().split()
    return f"load {fields[0]} and {fields[3].split('/')[0]} runnable tasks before the run started"


def contention_line(processes: int, threads: int, before: str) -> str:
    """What shared this machine's CPUs during the run (`before`: `other_load()` at its start)."""
    return (f"{processes} processes x {threads} thread on {len(os.sched_getaffinity(0))} vCPUs (the pipeline runs one "
            f"split at a time); {before}; load_1min at the end")


def rows_from(config: RpcConfig, result: dict, link_mbit_class: str) -> tuple[list[EngineRun], list[dict]]:
    """The run rows (decode and prefill) and their wire-packet companions from the client's result."""
    from workbench.measure.engines.campaign import cpu_label

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
            scheme=predicted.scheme, shape=model.name, n_layers=model.n_layers, d_model=model.d_model,
            n_heads=model.n_heads, n_kv_heads=model.n_kv_heads, d_head=model.d_head, d_ff=model.d_ff,
            vocab_size=model.vocab_size, n_experts=model.n_experts, n_active_experts=model.n_active_experts,
            format="f16", processes=config.processes, threads=config.threads, link_mbit=float(config.link_mbit),
            link_bucket_bytes=float(config.shape_of_link.burst), phase=phase, tokens=tokens * len(windows), seconds_per_token=seconds,
            root_sent_bytes_per_token=counted.root_sent, root_recv_bytes_per_token=counted.root_recv,
            link_bytes_per_token=counted.link, predicted_seconds_per_token=per_token,
            predicted_bytes_per_token=payload, comm_share=min(max(comm, 0.0), 1.0), load_1min=load,
            contention=contention_line(config.processes, config.threads, result.get("load_before", "load not read")),
            method=(f"llama-bench's method through ctypes (workbench.measure.engines.rpc); {phase} "
                    + ("median over repeats of each repeat's median step, the first step after the prompt "
                       "(graph sent whole) not counted" if phase == "decode" else
                       f"median whole-prompt time / {config.prompt_tokens} tokens, the graph sent whole "
                       "(RPC_CMD_GRAPH_COMPUTE) included")
                    + "; bytes: /proc/net/dev of every veth (tx summed), idle rate subtracted, on the wire "
                      "(66 B headers a packet; RPC payload = link bytes - 66 x link packets, "
                      "llamacpp_rpc_wire.csv); predicted_bytes: llamacpp_rpc's RPC payload; comm_share: the "
                      f"model's; link {link_mbit_class}, tbf burst {config.shape_of_link.burst} B, tensor_split "
                      f"{config.tensor_split}; predicted: {predicted_link_line(config)}")))
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
    from workbench.measure.engines.gguf_model import write_gguf

    work.mkdir(parents=True, exist_ok=True)
    path = write_gguf(config.model, work / f"{config.shape}-f16.gguf")
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    before = other_load()
    try:
        with RpcDeployment(config) as deployment:
            deployment.start_servers()
            result = dict(deployment.run_client(path, timeout_s), load_before=before)
            return rows_from(config, result, deployment.network.shape.link_class)
    finally:
        signal.signal(signal.SIGTERM, previous)
        path.unlink(missing_ok=True)


WIRE_KEY = ["shape", "processes", "link_mbit", "phase", "date"]  # a run adds to the stored runs


def merge_wire(path: Path, rows: list[dict]) -> Path:
    """The packet companions of the run rows (each with its run's date) added to `path` (a row of the same
    deployment, phase and date replaced), sorted, atomically."""
    import pandas as pd

    new = pd.DataFrame(rows)
    if path.exists():
        new = pd.concat([pd.read_csv(path), new], ignore_index=True)
    new["link_mbit"] = new["link_mbit"].astype(float)
    new = new.drop_duplicates(WIRE_KEY, keep="last")
    frame = new.sort_values(WIRE_KEY, kind="stable").reset_index(drop=True)
    return write_csv_atomic(path, frame)


if __name__ == "__main__":
    if sys.argv[1:2] != ["ping"]:
        sys.exit("usage: python -m workbench.measure.engines.rpc ping [--link-mbit 10,100,1000] [--count N]")
    sys.exit(ping_main(sys.argv[2:]))
