"""distributed-llama itself, built here from its vendored source, run as root + workers in network namespaces over
shaped links (`workbench.measure.cluster.netns`), its per-token log parsed into `EngineRun` rows beside the matching
`dllama_*` scheme's prediction.

Versions (third_party/distributed-llama/README.md): v0.4.0 (commit e93d1e6, `dllama_root8_tp`) built with
`make main`, and v0.16.4 (commit e819dc6, `dllama_allgather_tp`, dense and Qwen3-MoE) built with
`make dllama`. Log lines, per decode token:

* v0.4.0 `src/main.cpp`:112: ``🔶 %4d G %4ld ms I %4ld ms T %4ld ms S %6ld kB R %6ld kB`` - position, generation,
  inference and transfer ms, and the root's sent / received bytes of that token floored to kB
  (`SocketPool::getStats` reads and zeroes the counters, `src/socket.cpp@v0.4.0`:211-216). Prompt tokens run one
  per forward too (`generate`, :80-96); lines with position < the prompt's token count are prefill.
* v0.16.4 `src/dllama.cpp`:90: ``🔶 Pred%5u ms Sync%5u ms | Sent%6zu kB Recv%6zu kB | piece`` per decode token,
  and :61 ``🔷️ Eval%5u ms Sync%5u ms | Sent%6zu kB Recv%6zu kB | (%d tokens)`` per prompt batch; its summary
  (:100-115) prints ``tokens/s: X (Y ms/tok)`` for evaluation and prediction. `NnNetwork::getStats` reads and
  zeroes the counters (`src/nn/nn-network.cpp`:524-539).

Time on tbf links (why v0.4.0 at 10 Mbit runs faster than the scheme): every v0.4.0 sync moves data one way
only - the root writes (`syncUnitBuffer`, `syncMissingSlicesOfSlicedBuffer`: `SocketPool::writeMany`,
`src/tasks.cpp@v0.4.0`:42-62, 90-115) or reads (`syncSliceOfSlicedBuffer`: `readMany`, :65-88), never both, and a
worker's reply is computed from what it just read (`src/llama2-tasks.cpp@v0.4.0`:30, 63-65, 138, 158, 195-242).
On a wire those transfers follow one another, so the scheme's sum of both directions (`sliced_syncs`, star
broadcasts then star reduces) is the mechanism and stays. v0.16.4's all-gather does send while it receives
(`syncNodeSlices`: every node `writeMany`s its slice, then `readMany`s the others', `src/nn/nn-network.cpp`:568-600),
and the scheme already charges it one direction ((n-1) m on the busiest link, `workbench.machine.network._mesh`). What is
not a wire is tbf: a message smaller than the bucket leaves at veth speed whenever the bucket has refilled, and each
direction's bucket refills while the other direction carries the reply, so tbf bounds only each direction's mean
rate (a v0.4.0 token at 10 Mbit: max(root sent, received) / rate, not their sum). No qdisc here paces single
packets like a wire (netem, fq and cake are not in this kernel; htb is a token bucket too), so those rows measure
tbf, and the error is stated against the wire the scheme models.

Each run holds the timing lock and waits for the llama.cpp-RPC helper's workers to end (`workbench.measure.engines.timing`);
its row states the 1-minute load before and after and what shared the vCPUs (v0.16.4's root and workers, and
v0.4.0's workers, spin on their sockets: a 2-process run keeps both vCPUs busy).

Per-message time: each message is charged the half round trip a ping-pong measured on this namespace path in the
version's read pattern (`workbench.measure.engines.pingpong`, data/constants/netns_links.toml), apart from these runs.

The log's kB are floored (`sentBytes / 1024`), so the scheme's bytes are held to them at that resolution: the
predicted bytes of a forward floored to kB must equal the logged kB on every forward (`logged_kb`, `predicted_kb`).
The log's ms are integers: seconds per token is the mean G over the forwards (v0.4.0; its first line also carries
the weights sent at load and is dropped, as is the first decode line) or the summary's ms/tok (v0.16.4, over every
token of the phase). Link bytes per token are every process's veth tx counter (/proc/<pid>/net/dev) between the
first and last decode lines, over the forwards between them: TCP/IP headers and ACKs included.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from workbench.core.errors import WorkbenchError, require_int, require_positive
from workbench.core.io import project_root
from workbench.core.units import mbps_to_bytes_per_s
from workbench.measure.cluster.netns import LinkShape, ShapedNetwork, shaping_unavailable
from workbench.measure.engines.dllama_model import VERSIONS, check_shape, write_files
from workbench.measure.engines.pingpong import message_overhead_s
from workbench.measure.engines.runs import EngineRun
from workbench.measure.engines.timing import LOCK, timing_slot
from workbench.model.models import TransformerConfig
from workbench.schemes.base import spec_of
from workbench.schemes.engines import scheme_for_version

ENGINE = "distributed-llama"
COMMITS = {"v0.4.0": "e93d1e6356a5d192f0b81f14dc18f7772affdaf4", "v0.16.4": "e819dc6c1427e1699ce7fbecdf6e1a7d9bcd63fc"}
TARGETS = {"v0.4.0": "main", "v0.16.4": "dllama"}  # the Makefile target building the one binary (root and worker)
PORT = 9998
PROMPT = "hello world"  # 12 tokens with v0.4.0's BOS and dummy-prefix space; 12 with v0.16.4's BOS
PREDICTION_DEVICE = "this_machine_xeon"  # the counted-kernel preset of this CPU (data/devices/)
WIRE_BITS = 8.5  # --buffer-float-type q80: partials travel as Q80
KV_BITS = 32.0  # the KV cache is F32 in both versions
V04_LINE = re.compile(r"🔶\s*(\d+) G\s*(\d+) ms I\s*(\d+) ms T\s*(\d+) ms S\s*(\d+) kB R\s*(\d+) kB")
V16_LINE = re.compile(r"(🔶|🔷️?) (Pred|Eval)\s*(\d+) ms Sync\s*(\d+) ms \| Sent\s*(\d+) kB Recv\s*(\d+) kB")
DECODE_MARK = {"v0.4.0": "🔶", "v0.16.4": "🔶 Pred"}
V16_SUMMARY = re.compile(r"^(Evaluation|Prediction)$|tokens/s: [0-9.]+ \(([0-9.]+) ms/tok\)")

# The stored runs' shapes: small enough that a 10 Mbit link dominates a token, Q40-aligned, n = 2 and 4 split them
SHAPES = {
    "dense-512x4": TransformerConfig(name="dense-512x4", family="llama", n_layers=4, d_model=512, n_heads=8,
                                     n_kv_heads=4, d_ff=1024, vocab_size=512),
    "qwen3moe-512x2": TransformerConfig(name="qwen3moe-512x2", family="llama", n_layers=2, d_model=512, n_heads=8,
                                        n_kv_heads=4, d_head=64, d_ff=256, vocab_size=512, n_experts=4,
                                        n_active_experts=2),
}


@dataclass(frozen=True)
class TokenLine:
    """One token line of the root's log: phase, ms computing and syncing (or transfer), root kB sent and received."""

    phase: str
    compute_ms: int
    sync_ms: int
    total_ms: int
    sent_kb: int
    recv_kb: int


def parse_log(text: str, version: str, prompt_tokens: int = 0) -> tuple[list[TokenLine], dict[str, float]]:
    """The token lines of a root log of `version` and, for v0.16.4, the summary's ms per token by phase."""
    if version not in VERSIONS:
        raise WorkbenchError(f"version must be one of {', '.join(VERSIONS)}, got {version!r}")
    lines, summary, section = [], {}, ""
    for raw in text.splitlines():
        if version == "v0.4.0":
            m = V04_LINE.search(raw)
            if m:
                pos, g, i, t, s, r = map(int, m.groups())
                phase = "prefill" if pos < prompt_tokens else "decode"
                lines.append(TokenLine(phase, i, t, g, s, r))
            continue
        m = V16_LINE.search(raw)
        if m:
            pred, sync, s, r = (int(x) for x in m.groups()[2:])
            lines.append(TokenLine("decode" if m.group(2) == "Pred" else "prefill", pred, sync, pred + sync, s, r))
            continue
        m = V16_SUMMARY.search(raw.strip())
        if m and m.group(1):
            section = "prefill" if m.group(1) == "Evaluation" else "decode"
        elif m and section:
            summary[section] = float(m.group(2))
    return lines, summary


def prompt_token_count(version: str) -> int:
    """Tokens the engine encodes PROMPT into: v0.4.0 BOS + dummy-prefix space + one per character
    (`src/tokenizer.cpp@v0.4.0`:135-189); v0.16.4 BOS + one per character (`src/tokenizer.cpp`:322-345)."""
    return len(PROMPT) + (2 if version == "v0.4.0" else 1)


def scheme_for(version: str, model: TransformerConfig) -> str:
    """The registered scheme that models `version` running `model` (the one place the runs take it from): the
    catalogue's scheme of that release (`schemes.engines.scheme_for_version`; v0.16's one graph costs dense and MoE)."""
    scheme = scheme_for_version(version)
    if model.is_moe and not spec_of(scheme).moe:
        raise WorkbenchError(f"version {version} runs no mixture of experts here ({scheme}: {spec_of(scheme).no_moe})")
    return scheme


def predicted_root_bytes(version: str, model: TransformerConfig, n: int, rows: int = 1) -> tuple[float, float]:
    """(sent, received) bytes of the root in one forward of `rows` tokens, from the scheme's own traffic functions
    (v0.4.0 runs one token per forward: rows must be 1)."""
    from workbench.schemes import engines, moe

    if n == 1:
        return 0.0, 0.0
    if version == "v0.4.0":
        require_int("rows", rows, low=1, high=1)
        b = engines.node_bytes_per_token(scheme_for_version(version), model, n, WIRE_BITS)
        return b["root_sends"], b["root_receives"]
    t = moe.dllama_traffic(model, n, rows, WIRE_BITS)
    return t["root_sent"], t["root_received"]


def predicted_link_bytes(version: str, model: TransformerConfig, n: int, rows: int = 1) -> float:
    """Payload bytes of one forward of `rows` tokens summed over every process's sends (each byte crosses one
    uplink once)."""
    from workbench.schemes import engines, moe

    if n == 1:
        return 0.0
    if version == "v0.4.0":  # a star through the root: the workers send only to the root
        b = engines.node_bytes_per_token(scheme_for_version(version), model, n, WIRE_BITS)
        return b["root_sends"] + b["root_receives"]
    t = moe.dllama_traffic(model, n, rows, WIRE_BITS)
    return t["root_sent"] + (n - 1) * t["worker_sent"]


def forward_rows(row: EngineRun) -> int:
    """Tokens per logged forward of a row: v0.16.4's prefill is one batch of the row's tokens, else 1."""
    return row.tokens if (row.engine_version, row.phase) == ("v0.16.4", "prefill") else 1


def logged_kb(row: EngineRun) -> tuple[int, int]:
    """The (sent, received) kB the root logged per forward, recovered from a row's per-token bytes."""
    rows = forward_rows(row)
    return round(row.root_sent_bytes_per_token * rows / 1024), round(row.root_recv_bytes_per_token * rows / 1024)


def predicted_kb(row: EngineRun) -> tuple[int, int]:
    """The scheme's (sent, received) root bytes per forward of the row's deployment, floored to kB as logged."""
    sent, recv = predicted_root_bytes(row.engine_version, row_model(row), row.processes, forward_rows(row))
    return int(sent) // 1024, int(recv) // 1024


def row_model(row: EngineRun) -> TransformerConfig:
    """The TransformerConfig a stored row ran."""
    return TransformerConfig(name=row.shape, family="llama", n_layers=row.n_layers, d_model=row.d_model,
                             n_heads=row.n_heads, n_kv_heads=row.n_kv_heads, d_head=row.d_head, d_ff=row.d_ff,
                             vocab_size=row.vocab_size, n_experts=row.n_experts,
                             n_active_experts=row.n_active_experts)


def prediction_cluster(n: int, link_mbit: float, version: str, bucket_bytes: float = 0.0):
    """n single-thread processes of this CPU's preset on a switch whose ports run at the shaped rate through tbf's
    `bucket_bytes` bucket (0: a wire), each message charged the per-message time measured for `version`'s read
    pattern on this namespace path (`pingpong.message_overhead_s`, data/constants/netns_links.toml; measured apart,
    not fitted on these runs)."""
    from workbench.machine.hardware import load_device
    from workbench.machine.network import Link, Topology
    from workbench.measure.engines.campaign import with_threads
    from workbench.schemes.base import Cluster

    device = with_threads(load_device(PREDICTION_DEVICE), 1)
    link = Link(mbps_to_bytes_per_s(link_mbit), 0.0, name=f"tbf_{link_mbit:g}mbit",
                message_overhead_s=message_overhead_s(version), bucket_bytes=float(bucket_bytes))
    return Cluster((device,) * n, Topology("switch", n, link), shared_machine=device)


def _scheme_result(version: str, model: TransformerConfig, n: int, link_mbit: float, phase: str, tokens: int,
                   bucket_bytes: float):
    """The version's scheme on the prediction cluster for a `phase` of `tokens` rows (decode: the cache length)."""
    from workbench.schemes.base import Workload, load_all

    workload = Workload(phase, seq_len=tokens, kv_len=tokens, weight_bits=4.5, activation_bits=WIRE_BITS,
                        kv_bits=KV_BITS, engine=ENGINE, weight_format="q4_0")
    cluster = prediction_cluster(n, link_mbit, version, bucket_bytes)
    return load_all()[scheme_for(version, model)][1](model, cluster, workload)


def predict(version: str, model: TransformerConfig, n: int, link_mbit: float, kv_len: int,
            bucket_bytes: float = 0.0):
    """The scheme's SchemeResult for one decode token at `kv_len` on the prediction cluster."""
    return _scheme_result(version, model, n, link_mbit, "decode", kv_len, bucket_bytes)


def predict_prefill(version: str, model: TransformerConfig, n: int, link_mbit: float, tokens: int,
                    bucket_bytes: float = 0.0):
    """The scheme's SchemeResult for a prompt of `tokens` rows (v0.4.0: that many one-token forwards)."""
    return _scheme_result(version, model, n, link_mbit, "prefill", tokens, bucket_bytes)


def predicted_time(version: str, model: TransformerConfig, n: int, link_mbit: float, phase: str,
                   tokens: int, bucket_bytes: float = 0.0) -> tuple[float, float]:
    """(seconds per token, communication share) the scheme predicts for a phase of `tokens` tokens: decode at the
    mean cache length of `tokens` forwards after the prompt, prefill of `tokens` prompt rows."""
    prompt = prompt_token_count(version)
    if phase == "decode":
        pred = predict(version, model, n, link_mbit, prompt + tokens // 2, bucket_bytes)
        seconds = float(pred.latency_s)
    else:
        pred = predict_prefill(version, model, n, link_mbit, tokens, bucket_bytes)
        seconds = float(pred.latency_s) / tokens
    return seconds, float((pred.comm_bytes_s + pred.comm_link_latency_s) / pred.latency_s)


def repredicted(row: EngineRun) -> EngineRun:
    """A stored row with its prediction (and, for v0.16.4, the model's comm share) from the current model."""
    from dataclasses import replace

    seconds, comm = predicted_time(row.engine_version, row_model(row), row.processes, row.link_mbit, row.phase,
                                   row.tokens, row.link_bucket_bytes or 0.0)
    method = re.sub(r"a switch at the shaped rate(?: through tbf's \d+ B buckets \(`network.token_bucket_time`\))?, ",
                    f"a switch at the shaped rate through tbf's {int(row.link_bucket_bytes or 0)} B buckets "
                    "(`network.token_bucket_time`), ", row.method)
    return replace(row, predicted_seconds_per_token=seconds, method=method,
                   comm_share=row.comm_share if row.engine_version == "v0.4.0" else min(comm, 1.0))


def build(version: str, cache: Path | None = None, jobs: int = 1) -> Path:
    """Build `version` from its vendored tarball with its own Makefile into build/engines/dllama-<tag>/ (kept
    between runs); return the binary."""
    if version not in VERSIONS:
        raise WorkbenchError(f"version must be one of {', '.join(VERSIONS)}, got {version!r}")
    root = project_root()
    folder = (cache or root / "build" / "engines") / f"dllama-{version}"
    binary = folder / TARGETS[version]
    if binary.exists():
        return binary
    if shutil.which("make") is None or shutil.which("g++") is None:
        raise WorkbenchError("building distributed-llama needs make and g++ on PATH")
    tarball = root / "third_party" / "distributed-llama" / f"{version}.tar.gz"
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as archive:
        for member in archive.getmembers():
            member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
        archive.extractall(folder, members=[m for m in archive.getmembers() if m.name], filter="data")
    proc = subprocess.run(["nice", "-n", "19", "make", f"-j{jobs}", TARGETS[version]], cwd=folder,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise WorkbenchError(f"building distributed-llama {version} failed: {proc.stderr.strip()[-400:]}")
    return binary


def _kill(procs) -> None:
    """Stop the processes this run started (their own pids), then reap them."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _commands(version: str, binary: Path, files, n: int, net: ShapedNetwork, tokens: int) -> tuple[list, list]:
    """(worker commands, root command) of one run, each inside its namespace, 1 thread each."""
    workers = [net.command_prefix(i) + [str(binary), "worker", "--port", str(PORT), "--nthreads", "1"]
               for i in range(1, n)]
    steps = prompt_token_count(version) + tokens
    root = [str(binary), "inference", "--model", str(files.model), "--tokenizer", str(files.tokenizer),
            "--buffer-float-type", "q80", "--prompt", PROMPT, "--steps", str(steps), "--nthreads", "1",
            "--temperature", "0", "--seed", "1"]
    if version == "v0.4.0":
        root += ["--weights-float-type", "q40"]
    if n > 1:
        root += ["--workers", *[f"{net.address(i)}:{PORT}" for i in range(1, n)]]
    return workers, net.command_prefix(0) + root


def _tx_bytes(pids: list[int], tag: str) -> int:
    """Bytes sent so far over every process's veth, read from /proc/<pid>/net/dev (each pid sees its own
    namespace's devices; a plain file read, so the snapshot lands at the token line it follows)."""
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
            name, _, counters = line.partition(":")
            if name.strip().startswith(f"wb{tag}v"):
                total += int(counters.split()[8])  # receive has 8 columns, then transmit bytes
    return total


def run_once(version: str, model: TransformerConfig, processes: int, shape: LinkShape, tokens: int,
             out_dir: Path, binary: Path, timeout_s: float = 300.0) -> str:
    """Run root + workers once over shaped links; return the root's log (also written to out_dir)."""
    files = write_files(out_dir, model, version, seq_len=256)
    procs: list[subprocess.Popen] = []
    net = ShapedNetwork(processes, shape)
    try:
        net.setup()
        workers, root = _commands(version, binary, files, processes, net, tokens)
        for w in workers:
            procs.append(subprocess.Popen(w, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1.0)  # the workers bind their port
        root_proc = subprocess.Popen(root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(root_proc)
        out, seen, first, last = [], 0, None, None
        pids = [p.pid for p in procs]
        deadline = time.monotonic() + timeout_s
        for line in root_proc.stdout:  # counters at each decode line: the load is over by the first
            out.append(line)
            if DECODE_MARK[version] in line:
                seen += 1
                try:
                    last = (seen, _tx_bytes(pids, net.tag))
                except OSError:  # a worker gone at the end
                    pass
                first = first or last
            if time.monotonic() > deadline:
                raise WorkbenchError(f"distributed-llama {version} root ran past {timeout_s:g} s")
        root_proc.wait(timeout=30)
        out = "".join(out)
        if root_proc.returncode != 0:
            raise WorkbenchError(f"distributed-llama {version} root exited {root_proc.returncode}: {out[-400:]}")
        if first is not None and last[0] > first[0]:
            out += f"\n#veth_tx_bytes {last[1] - first[1]} over {last[0] - first[0]} forwards\n"
        (out_dir / f"{model.name}-{version}-n{processes}-{shape.rate_mbit:g}mbit-b{shape.burst}.log").write_text(out)
        return out
    finally:
        _kill(procs)
        net.teardown()


def host_cpu() -> tuple[str, str]:
    """(host, cpu) as the run rows state them."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({os.cpu_count()} vCPUs, Linux {platform.release()})", cpu


def _same_kb(lines: list[TokenLine], version: str, phase: str) -> tuple[int, int]:
    """The one (sent, received) kB every line of a phase logged; lines that differ are a one-line error."""
    kb = {(t.sent_kb, t.recv_kb) for t in lines}
    if len(kb) != 1:
        raise WorkbenchError(f"distributed-llama {version}: {phase} forwards logged different kB: {sorted(kb)}")
    return kb.pop()


def rows_from_log(log: str, version: str, model: TransformerConfig, processes: int, link: LinkShape,
                  load: float | None, contention: str) -> list[EngineRun]:
    """The decode and prefill rows of one run: measured per-token seconds and bytes beside the scheme's prediction."""
    prompt = prompt_token_count(version)
    lines, summary = parse_log(log, version, prompt)
    decode = [t for t in lines if t.phase == "decode"][1:]  # the first decode token is dropped (warm-up)
    prefill = [t for t in lines if t.phase == "prefill"]
    if version == "v0.4.0":
        prefill = prefill[1:]  # v0.4.0's first forward's line also counts the weights sent at load
    if not decode or not prefill:
        raise WorkbenchError(f"distributed-llama {version}: no decode or prefill lines in the root's log")
    veth = re.search(r"#veth_tx_bytes (\d+) over (\d+) forwards", log)
    forwards = int(veth.group(2)) if veth else 0
    measured_link = int(veth.group(1)) / forwards if veth and processes > 1 else None
    host, cpu = host_cpu()
    base = dict(engine=ENGINE, engine_version=version, commit=COMMITS[version],
                build=f"make {TARGETS[version]} (its Makefile: g++ -O3 -march=native, from "
                      "third_party/distributed-llama)",
                host=host, cpu=cpu, date=datetime.now(UTC).strftime("%Y-%m-%d"),
                scheme=scheme_for(version, model), shape=model.name, n_layers=model.n_layers, d_model=model.d_model,
                n_heads=model.n_heads, n_kv_heads=model.n_kv_heads, d_head=model.d_head, d_ff=model.d_ff,
                vocab_size=model.vocab_size, n_experts=model.n_experts, n_active_experts=model.n_active_experts,
                format="q40", processes=processes, threads=1, link_mbit=float(link.rate_mbit),
                link_bucket_bytes=float(link.burst), load_1min=load,
                contention=contention)
    where = (f"tbf {link.rate_mbit:g} Mbit, burst {link.burst} B per port; root log, {prompt} prompt tokens; "
             f"predicted: {scheme_for(version, model)} on {PREDICTION_DEVICE} x {processes} (1 thread each), a switch "
             f"at the shaped rate through tbf's {link.burst} B buckets (`network.token_bucket_time`), "
             f"{message_overhead_s(version) * 1e6:.1f} us per message (measured ping-pong, "
             "data/constants/netns_links.toml), no wire latency")
    out = []
    for phase, got in (("decode", decode), ("prefill", prefill)):
        sent_kb, recv_kb = _same_kb(got, version, phase)
        batched = version == "v0.16.4" and phase == "prefill"
        tokens = prompt - 1 if batched else len(got)  # v0.16.4 evaluates the prompt but its last token as 1 batch
        if version == "v0.16.4" and phase in summary:
            seconds = summary[phase] / 1000
            how = f"the summary's {'Evaluation' if batched else 'Prediction'} ms/tok (src/dllama.cpp:100-115)"
        else:
            seconds = sum(t.total_ms for t in got) / len(got) / 1000
            how = "the mean of the logged per-token G ms (src/main.cpp@v0.4.0:112)"
        pred_s, model_comm = predicted_time(version, model, processes, link.rate_mbit, phase, tokens, link.burst)
        if version == "v0.4.0":  # T: the root's transfer ms of the forward (src/main.cpp@v0.4.0:82-83)
            comm = sum(t.sync_ms for t in got) / max(sum(t.total_ms for t in got), 1)
            comm_how = "logged T / G ms"
        else:  # integer Sync ms, 0 on most decode tokens here: the model's share
            comm = model_comm
            comm_how = "the model's (v0.16.4 logs integer Sync ms)"
        per = tokens if batched else 1
        link_how = (f"every process's veth tx (TCP/IP headers and ACKs included, /proc/<pid>/net/dev) between the "
                    f"first and last decode lines over the {forwards} forwards between them" if phase == "decode"
                    else "n/a: the veth counters are read at decode lines only")
        out.append(EngineRun(
            **base, phase=phase, tokens=tokens, seconds_per_token=max(seconds, 1e-4),
            root_sent_bytes_per_token=sent_kb * 1024 / per, root_recv_bytes_per_token=recv_kb * 1024 / per,
            link_bytes_per_token=measured_link if phase == "decode" else None, predicted_seconds_per_token=pred_s,
            predicted_bytes_per_token=predicted_link_bytes(version, model, processes, per) / per,
            comm_share=min(comm, 1.0),
            method=f"{where}; {phase}: {len(got)} forward(s) of {per} token(s)"
                   f"{', the first decode dropped' if phase == 'decode' else ''}; time: {how}; root bytes: the "
                   f"logged kB x 1024 / tokens per forward (the engine floors to kB); link bytes: {link_how}; "
                   f"comm_share: {comm_how}"))
    return out


def run_dllama(version: str, shape: TransformerConfig, processes: int = 2, link_mbit: float = 1000.0,
               tokens: int = 16, out_dir: str | Path = "build/engines/dllama-runs",
               contention: str = "", burst_bytes: int = 0) -> list[EngineRun]:
    """Build (or find) `version`, write a random-weight `shape`, run root + workers in namespaces over links
    shaped to `link_mbit`, and return the decode row; everything is torn down on success, failure or Ctrl-C."""
    check_shape(shape, version)
    require_int("processes", processes, low=1, high=8)
    if processes & (processes - 1):
        raise WorkbenchError(f"processes must be a power of two (distributed-llama's node count), got {processes}")
    require_positive("link_mbit", link_mbit)
    require_int("tokens", tokens, low=2, high=200)
    reason = shaping_unavailable()
    if reason:
        raise WorkbenchError(reason)
    binary = build(version)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    link = LinkShape(link_mbit, burst_bytes)
    with timing_slot() as load_before:
        log = run_once(version, shape, processes, link, tokens, out, binary)
        load = max(load_before, os.getloadavg()[0])
    spin = ("v0.16.4: root and workers spin on non-blocking sockets (src/app.cpp:46, 286-288)" if version == "v0.16.4"
            else "v0.4.0: the workers spin on reads, the root blocks (src/socket.cpp@v0.4.0:53-83, 181-210)")
    over = "oversubscribed" if processes > (os.cpu_count() or 1) else "one vCPU each"
    return rows_from_log(log, version, shape, processes, link, load,
                         f"{processes} processes x 1 thread on {os.cpu_count()} vCPUs ({over}; {spin}); "
                         f"{contention or 'other helpers not paused'}; 1-min load {load_before:.2f} before, "
                         f"{os.getloadavg()[0]:.2f} after; timing lock {LOCK} held")
