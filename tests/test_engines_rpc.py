"""The llama.cpp RPC runner: run rows (schema, CSV round trip), accounting of link bytes, the stored runs held to
the llamacpp_rpc scheme, one short live run and the teardown on SIGINT."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.measure.engines.rpc import (
    RUNS_CSV,
    WIRE_CSV,
    RpcConfig,
    offload,
    phase_bytes,
    predict,
    rows_from,
)
from workbench.measure.engines.rpc_worker import parse_net_dev
from workbench.measure.engines.runs import COLUMNS, EngineRun, read_runs, runs_csv, write_runs
from workbench.schemes.edge_engines import (
    FRAME_BYTES,
    SplitGraph,
    llamacpp_layers,
    output_device,
    split_graphs,
)

SCHEMA = (
    "engine, engine_version, commit, build, host, cpu, date, scheme, shape, n_layers, d_model, n_heads, n_kv_heads, "
    "d_head, d_ff, vocab_size, n_experts, n_active_experts, format, processes, threads, link_mbit, link_bucket_bytes, "
    "phase, tokens, "
    "seconds_per_token, root_sent_bytes_per_token, root_recv_bytes_per_token, link_bytes_per_token, "
    "predicted_seconds_per_token, predicted_bytes_per_token, comm_share, load_1min, contention, method")


def sample_run(**changes) -> EngineRun:
    """A valid run row; `changes` override fields."""
    base = dict(engine="llama.cpp", engine_version="0.3.36", commit="0c1e57098", build="GGML_RPC=ON", host="h",
                cpu="x86", date="2026-11-28T13:00:00Z", scheme="llamacpp_rpc", shape="tiny", n_layers=4,
                d_model=256, n_heads=4, n_kv_heads=2, d_head=64, d_ff=512, vocab_size=8192, n_experts=0,
                n_active_experts=0, format="F32", processes=2, threads=1, link_mbit=100.0, link_bucket_bytes=1514.0,
                phase="decode", tokens=32,
                seconds_per_token=0.01, root_sent_bytes_per_token=1000.0, root_recv_bytes_per_token=None,
                link_bytes_per_token=2000.0, predicted_seconds_per_token=0.011, predicted_bytes_per_token=1990.0,
                comm_share=0.5, load_1min=1.5, contention="2 processes x 1 thread on 2 vCPUs", method="netns")
    base.update(changes)
    return EngineRun(**base)


def test_columns_are_the_shared_schema():
    assert COLUMNS == tuple(name.strip() for name in SCHEMA.split(","))


def test_round_trip_keeps_rows_and_none(tmp_path):
    rows = [sample_run(phase="prefill"), sample_run(link_mbit=1000.0), sample_run()]
    path = write_runs(tmp_path / "runs.csv", rows)
    back = read_runs(path)
    assert sorted(back, key=str) == sorted(rows, key=str)
    assert back[0].root_recv_bytes_per_token is None


def test_write_is_deterministic_whatever_the_input_order(tmp_path):
    rows = [sample_run(phase="prefill"), sample_run(link_mbit=1000.0), sample_run(processes=3)]
    assert runs_csv(rows) == runs_csv(list(reversed(rows)))


@pytest.mark.parametrize("field, value", [("phase", "train"), ("tokens", 0), ("seconds_per_token", 0.0),
                                          ("comm_share", 1.5), ("link_bytes_per_token", -1.0), ("method", ""),
                                          ("n_kv_heads", 3), ("n_active_experts", 2)])
def test_bad_field_is_one_line_naming_it(field, value):
    with pytest.raises(WorkbenchError, match=field):
        sample_run(**{field: value})


def test_bad_header_is_refused(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text(runs_csv([sample_run()]).replace("engine_version", "version", 1))
    with pytest.raises(WorkbenchError, match="header"):
        read_runs(path)


def test_rows_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample_run().tokens = 3  # type: ignore[misc]


# ---- accounting --------------------------------------------------------------------------------------------



NET_DEV = """Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
wb12v0:  122368     144    0    0    0     0          0         0  2511610     304    0    0    0     0       0          0
"""


def test_net_dev_reads_bytes_and_packets_both_ways():
    assert parse_net_dev(NET_DEV)["wb12v0"] == (122368, 144, 2511610, 304)
    assert parse_net_dev(NET_DEV)["lo"] == (0, 0, 0, 0)


def llama_cpp_placement(n_layers: int, n_gpu_layers: int, split) -> list[int]:
    """Layers (and the output slot) per device as src/llama-model.cpp:1557-1614 places them, in float32: the CPU
    (client) first, then each RPC device."""
    cum = np.cumsum(np.asarray(split, dtype=np.float32), dtype=np.float32)
    cum = (cum / cum[-1]).astype(np.float32)
    start = max(n_layers + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layers + 1)
    counts = [0] * (len(split) + 1)
    for il in range(n_layers + 1):
        if il < start:
            counts[0] += 1
        else:
            counts[1 + int(np.searchsorted(cum, np.float32(il - start) / np.float32(act), side="right"))] += 1
    return counts


@pytest.mark.parametrize("n_layers, processes", [(4, 2), (4, 3), (8, 2), (8, 3), (22, 4)])
def test_offload_places_the_layers_the_scheme_costs(n_layers, processes):
    split = [1.0] * processes
    expected = list(llamacpp_layers(n_layers, split))
    expected[output_device(n_layers, split)] += 1
    n_gpu_layers, rpc_split = offload(n_layers, split)
    assert llama_cpp_placement(n_layers, n_gpu_layers, rpc_split) == expected


def test_phase_bytes_are_per_token_and_less_the_idle_rate():
    zero = [(0, 0, 0, 0), (0, 0, 0, 0)]
    idle = [zero, [(10, 1, 20, 2), (20, 2, 10, 1)]]  # over 1 s
    after = [(1010, 11, 2020, 22), (2020, 22, 1010, 11)]  # a 1 s window of 10 tokens
    counted = phase_bytes([[zero, after]], idle, 1.0, [1.0], 10)
    assert counted.root_sent == pytest.approx(200.0)
    assert counted.root_recv == pytest.approx(100.0)
    assert counted.link == pytest.approx(300.0)
    assert counted.link_packets == pytest.approx(3.0)
    assert counted.link_payload == pytest.approx(300.0 - FRAME_BYTES * 3)


def test_two_process_decode_payload_is_the_hand_count():
    """rpc-tiny (d 256, vocab 2048) on 2 processes: 7 SET_TENSORs (2 hidden states, positions, K and V indices, a
    256-cell F16 mask, output ids), a GRAPH_RECOMPUTE, a GET_TENSOR of the logits and its reply."""
    set_frame = 1 + 8 + 296 + 1 + 8
    sets = 7 * set_frame + 2 * 256 * 4 + 4 + 8 + 8 + 256 * 2 + 4
    recompute = 1 + 8 + 4
    get = 1 + 8 + 296 + 16
    reply = 8 + 2048 * 4
    traffic = predict(RpcConfig(shape="rpc-tiny", processes=2, link_mbit=100.0), "decode").extra["traffic"]
    assert traffic.sent_bytes == sets + recompute + get
    assert traffic.received_bytes == reply


def test_a_third_process_adds_one_hidden_state_each_way():
    """The middle server hands one hidden state up (GET_TENSOR) and the client hands it down (SET_TENSOR)."""
    two = predict(RpcConfig(shape="rpc-small", processes=2, link_mbit=100.0), "decode").extra["traffic"]
    three = predict(RpcConfig(shape="rpc-small", processes=3, link_mbit=100.0), "decode").extra["traffic"]
    hidden = 512 * 4
    graph_inputs = (1 + 8 + 296 + 1 + 8) * 4 + 4 + 8 + 8 + 256 * 2  # positions, indices, mask: per server
    extra = (1 + 8 + 296 + 1 + 8 + hidden) + (1 + 8 + 4) + (1 + 8 + 296 + 16) + graph_inputs
    assert three.sent_bytes - two.sent_bytes == extra
    assert three.received_bytes - two.received_bytes == 8 + hidden


GRAPHS_CSV = RUNS_CSV.parent / "llamacpp_rpc_graphs.csv"


def test_split_graphs_are_the_servers_logged_graphs():
    """Nodes and tensors of every server's GRAPH_COMPUTE, derived from the graph builder, equal what the server
    logged (GGML_RPC_DEBUG) for both shapes, 2 and 3 processes, decode (1 token) and prefill (32 tokens)."""
    logged = pd.read_csv(GRAPHS_CSV)
    assert len(logged) == 12
    for (shape, processes, phase), group in logged.groupby(["shape", "processes", "phase"]):
        model = RpcConfig(shape=shape).model
        split = [1.0] * processes
        graphs = split_graphs(llamacpp_layers(model.n_layers, split), output_device(model.n_layers, split),
                              1 if phase == "decode" else 32)
        got = [(g.nodes, g.tensors) for g in graphs]
        assert got == list(zip(group.sort_values("server").n_nodes, group.sort_values("server").n_tensors)), \
            (shape, processes, phase)


def test_prefill_sends_each_server_its_whole_graph_and_decode_does_not():
    """rpc-tiny on 2 processes: the server's split is the client's last ADD, one layer (31 nodes + 2 GET_ROWS) and
    the head (3): 37 nodes; with 11 leaves a layer, the head's 2 and its 7 inputs, 57 tensors; prefill's request
    is GRAPH_COMPUTE (12 + 8 x 37 + 296 x 57 bytes) where decode's is GRAPH_RECOMPUTE (4)."""
    config = RpcConfig(shape="rpc-tiny", processes=2, link_mbit=100.0)
    (graph,) = split_graphs((3, 1), 1, 32)
    assert (graph.hidden_in, graph.nodes, graph.tensors) == (2, 31 + 2 + 3 + 1, 37 + 11 + 2 + 7)
    assert graph.compute_body == 12 + 8 * 37 + 296 * 57
    n, set_frame = 32, 1 + 8 + 296 + 1 + 8
    sets = 7 * set_frame + 2 * n * 256 * 4 + 4 * n + 8 * n + 8 * n + 256 * n * 2 + 4
    get = 1 + 8 + 296 + 16
    prefill = predict(config, "prefill").extra["traffic"]
    assert prefill.sent_bytes == sets + (1 + 8 + graph.compute_body) + get
    assert predict(config, "decode").extra["traffic"].sent_bytes == sets - 2 * (n - 1) * 256 * 4 - (4 + 8 + 8) * (
        n - 1) - 256 * (n - 1) * 2 + (1 + 8 + 4) + get


def test_from_32_tokens_two_hidden_states_cross_between_servers():
    """llama-context.cpp pins a layer's norm below 32 tokens; from 32 the previous server runs it and hands both
    the norm and the residual on: one more GET_TENSOR and SET_TENSOR of n_tokens x d_model F32 each."""
    layers, last = (3, 3, 2), 2
    assert [g.hidden_in for g in split_graphs(layers, last, 31)] == [2, 1]
    assert [g.hidden_in for g in split_graphs(layers, last, 32)] == [2, 2]
    assert [g.nodes for g in split_graphs(layers, last, 32)] == [1 + 93 + 1, 62 + 2 + 3 - 1]
    with pytest.raises(WorkbenchError, match="hidden_in >= 1"):
        SplitGraph(0, 1, 1)


# ---- the shaped link ---------------------------------------------------------------------------------------
def test_engine_runs_shape_each_message_with_a_one_frame_bucket():
    from workbench.measure.cluster.netns import FRAME_BYTES as FRAME
    from workbench.measure.cluster.netns import LinkShape, tight_burst_bytes

    assert FRAME == 1514
    assert tight_burst_bytes(10) == tight_burst_bytes(100) == 1514  # 100 us of 100 Mbit is 1250 B: one frame
    assert tight_burst_bytes(1000) == 12500  # 100 us of traffic above 121 Mbit
    assert RpcConfig(link_mbit=100.0).shape_of_link.burst == 1514
    assert RpcConfig(link_mbit=100.0, burst_bytes=3028).shape_of_link.burst == 3028
    assert RpcConfig(link_mbit=100.0, burst_bytes=0).shape_of_link.burst == 64 * 1024  # netns' bulk default
    assert LinkShape(100).burst == 64 * 1024  # the jax cluster's default is unchanged
    with pytest.raises(WorkbenchError, match=r"burst_bytes must be 0 \(the default\) or >= 1514"):
        RpcConfig(link_mbit=100.0, burst_bytes=1000)


def test_burst_bytes_reaches_the_run_and_its_method():
    from workbench.measure.engines.rpc import predicted_link_line

    args = _engines_args("run", "llama.cpp", "--link-mbit", "100", "--burst-bytes", "3028")
    assert args.burst_bytes == 3028 and _engines_args("run", "llama.cpp").burst_bytes is None
    config = RpcConfig(shape="rpc-tiny", link_mbit=100.0, burst_bytes=3028)
    assert "ggml-rpc endpoint time" in predicted_link_line(config)
    result = {"decode_s": [[0.002] * 4], "prefill_s": [0.02], "idle_counters": [[(0, 0, 0, 0)] * 2] * 2,
              "decode_counters": [[[(0, 0, 0, 0)] * 2, [(10, 1, 10, 1)] * 2]],
              "prefill_counters": [[[(0, 0, 0, 0)] * 2, [(10, 1, 10, 1)] * 2]]}
    rows, _ = rows_from(config, result, config.shape_of_link.link_class)
    assert all("tbf burst 3028 B" in r.method for r in rows)


def test_prediction_uses_the_measured_endpoint_time_and_latency():
    from workbench.measure.engines.rpc import rpc_link_times

    times = rpc_link_times()
    assert 0 < times.message_overhead_s < 1e-3  # ggml-rpc's raw sockets: microseconds, not gloo's 651 us
    assert times.latency(100.0) is not None and times.latency(123.0) is None
    traffic = predict(RpcConfig(shape="rpc-tiny", processes=2, link_mbit=100.0), "decode")
    queued, waited = 8, 1  # 7 SET_TENSORs and GRAPH_RECOMPUTE; one GET_TENSOR
    one_way = 2 * times.latency(100.0) + times.message_overhead_s
    assert traffic.comm_link_latency_s == pytest.approx(queued * times.message_overhead_s + waited * 2 * one_way)


def test_link_constants_are_half_the_loopback_round_trip_and_a_quarter_of_what_the_link_adds():
    import tomllib

    from workbench.core.constants import parse_constants
    from workbench.measure.engines.rpc import PING_GAP_S, link_constants_toml

    def row(rate, path, gap, median):
        return {"link_mbit": rate, "burst_bytes": 1514, "path": path, "gap_s": gap, "median_s": median,
                "date": "2026-11-28T15:00:00Z"}

    rows = [row(100.0, "loopback", 0.0, 30e-6), row(100.0, "shaped", 0.0, 40e-6),
            row(100.0, "loopback", PING_GAP_S, 100e-6), row(100.0, "shaped", PING_GAP_S, 120e-6),
            row(10.0, "loopback", 0.0, 34e-6), row(10.0, "shaped", 0.0, 200e-6),
            row(10.0, "loopback", PING_GAP_S, 110e-6), row(10.0, "shaped", PING_GAP_S, 100e-6)]
    table = parse_constants(tomllib.loads(link_constants_toml(rows)), "t.toml")
    assert table["rpc_message_overhead"].value == pytest.approx(32e-6 / 2)
    assert table["tight_100mbit_latency"].value == pytest.approx(20e-6 / 4)
    assert table["tight_10mbit_latency"].value == 0.0  # below the loopback: noise, not a negative latency
    assert {c.kind for c in table.values()} == {"measured"}


# ---- the stored runs ---------------------------------------------------------------------------------------
def stored():
    """The stored run rows joined to their packet counts."""
    if not RUNS_CSV.exists():
        pytest.skip(f"no stored runs at {RUNS_CSV}")
    runs = pd.DataFrame([dataclasses.asdict(r) for r in read_runs(RUNS_CSV)])
    wire = pd.read_csv(WIRE_CSV).astype({"link_mbit": float})
    return runs.merge(wire, on=["shape", "processes", "link_mbit", "phase", "date"], how="inner",
                      validate="one_to_one")


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_stored_payload_is_within_two_percent_of_llamacpp_rpc(phase):
    table = stored()
    rows = table[table["phase"] == phase]
    assert len(rows) == len(read_runs(RUNS_CSV)) // 2  # every run has its packet counts
    assert set(rows["processes"]) >= {2, 3} and set(rows["link_mbit"]) >= {100.0, 1000.0}
    payload = rows["link_bytes_per_token"] - FRAME_BYTES * rows["link_packets_per_token"]
    error = (payload / rows["predicted_bytes_per_token"] - 1).abs()
    assert error.max() < 0.02, rows.assign(error=error)[["shape", "processes", "link_mbit", "error"]]


def test_stored_predictions_are_the_scheme_today():
    table = stored()
    for row in table.itertuples():
        config = RpcConfig(shape=row.shape, processes=row.processes, link_mbit=row.link_mbit)
        tokens = RpcConfig().prompt_tokens if row.phase == "prefill" else 1
        payload = predict(config, row.phase).extra["traffic"].payload_bytes / tokens
        assert payload == pytest.approx(row.predicted_bytes_per_token, rel=1e-9)


# ---- live --------------------------------------------------------------------------------------------------
def live_unavailable() -> str | None:
    """Why a live RPC run cannot happen here (None when it can)."""
    from workbench.measure.cluster.netns import shaping_unavailable

    reason = shaping_unavailable()
    if reason:
        return reason
    try:
        import gguf  # noqa: F401
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return f"the engines extra is not installed ({exc.name}): pip install '.[engines]'"
    return None


@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_a_live_two_process_run_carries_the_predicted_payload(tmp_path):
    from workbench.measure.engines.rpc import run_llamacpp_rpc

    config = RpcConfig(shape="rpc-tiny", processes=2, link_mbit=1000.0, prompt_tokens=16, decode_tokens=16,
                       repeats=1, idle_s=0.5)
    start = time.monotonic()
    rows, wire = run_llamacpp_rpc(config, tmp_path)
    assert time.monotonic() - start < 60
    decode = next(r for r in rows if r.phase == "decode")
    packets = next(w for w in wire if w["phase"] == "decode")["link_packets_per_token"]
    payload = decode.link_bytes_per_token - FRAME_BYTES * packets
    assert abs(payload / decode.predicted_bytes_per_token - 1) < 0.02
    assert not [n for n in _namespaces() if n.startswith(f"wb{os.getpid()}-")]


@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_the_tight_bucket_shapes_a_10_kb_message_and_the_default_does_not():
    from workbench.measure.cluster.linkcheck import check_link
    from workbench.measure.cluster.netns import LinkShape, tight_burst_bytes

    tight = check_link(LinkShape(100.0, burst_bytes=tight_burst_bytes(100.0)), bulk_s=0.3)
    assert 0.8 < tight["message_over_rate"] < 1.25 and 0.8 < tight["bulk_over_rate"] < 1.1
    assert check_link(LinkShape(100.0), bulk_s=0.3)["message_over_rate"] > 2.0


def _namespaces() -> list[str]:
    """Network namespace names on this machine."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc/*/stat parent ids)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _cmdline(pid: int) -> bytes:
    """The NUL-separated command line of `pid` (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    """Whether `pid` is a process that still runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(live_unavailable() is not None, reason=str(live_unavailable()))
def test_ctrl_c_mid_run_leaves_no_process_and_no_namespace(tmp_path):
    from tests.sigint import restore_default_sigint

    command = [sys.executable, "-m", "workbench", "engines", "run", "llama.cpp", "--processes", "2", "--link-mbit",
               "1000", "--shape", "rpc-tiny", "--decode-tokens", "200", "--repeats", "50",
               "--out", str(tmp_path / "x_runs.csv")]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen(command, env=env, preexec_fn=restore_default_sigint, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    prefix = f"wb{proc.pid}-"
    children: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:  # until the client runs in the first namespace
        children |= _descendants(proc.pid)
        if any(b"rpc_worker\x00client" in _cmdline(pid) for pid in children):
            break
        time.sleep(0.2)
    assert proc.poll() is None, f"the run ended before Ctrl-C: {proc.stderr.read()[-500:]}"
    time.sleep(2)  # the client is loading the model over the server or decoding
    children |= _descendants(proc.pid)
    assert len(children) >= 2 and proc.poll() is None
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert not [n for n in _namespaces() if n.startswith(prefix)]
    assert not [pid for pid in children if _alive(pid)]
    assert not (tmp_path / "x_runs.csv").exists()


# ---- the own-hardware notebook's table ---------------------------------------------------------------------
def test_side_by_side_compares_payload_where_packets_were_counted(tmp_path):
    from workbench.measure.engines.rpc import merge_wire
    from workbench.studies.engine_runs import result_rows, side_by_side, stored_runs

    (tmp_path / "engines").mkdir()
    write_runs(tmp_path / "engines" / "llamacpp_rpc_runs.csv", [sample_run(), sample_run(phase="prefill")])
    write_runs(tmp_path / "engines" / "dllama_runs.csv", [sample_run(engine="distributed-llama")])
    merge_wire(tmp_path / "engines" / "llamacpp_rpc_wire.csv",
               [{"shape": "tiny", "processes": 2, "link_mbit": 100.0, "phase": p, "date": sample_run().date,
                 "link_packets_per_token": 3.0} for p in ("decode", "prefill")])
    table = side_by_side(stored_runs(tmp_path))
    assert len(table) == 3
    rpc = table[table.engine == "llama.cpp"].iloc[0]
    assert rpc.measured_bytes == pytest.approx(2000.0 - FRAME_BYTES * 3)
    assert rpc.bytes_error == pytest.approx(1990.0 / (2000.0 - FRAME_BYTES * 3) - 1)
    other = table[table.engine == "distributed-llama"].iloc[0]
    assert other.measured_bytes == pytest.approx(2000.0) and other.bytes_as == "on the wire"
    assert rpc.time_error == pytest.approx(0.011 / 0.01 - 1)
    rows = result_rows(table)
    assert set(rows.quantity) >= {"time_error", "bytes_error"} and rows.value.notna().any()


# ---- the command ------------------------------------------------------------------------------------------
def _engines_args(*argv: str):
    """`python -m workbench engines ARGV` parsed."""
    import argparse

    from workbench.measure.engines.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_run_names_the_engines_it_knows():
    from workbench.measure.engines.cli import main

    with pytest.raises(WorkbenchError, match="engine 'foo'; allowed: llama.cpp, distributed-llama"):
        main(_engines_args("run", "foo"))
    with pytest.raises(WorkbenchError, match="processes must be an integer >= 2"):
        main(_engines_args("run", "llama.cpp", "--processes", "1"))


def test_distributed_llama_says_in_one_line_when_its_runner_is_absent():
    import importlib.util

    from workbench.measure.engines.cli import main

    if importlib.util.find_spec("workbench.measure.engines.dllama") is not None:
        pytest.skip("workbench.measure.engines.dllama is present: the dispatch runs it")
    with pytest.raises(WorkbenchError, match=r"^distributed-llama's runner \(workbench.measure.engines.dllama\) is not in"):
        main(_engines_args("run", "distributed-llama"))


def test_a_new_run_adds_to_the_stored_repeats_and_replaces_only_its_own_date(tmp_path):
    from workbench.measure.engines.cli import merge_runs
    from workbench.measure.engines.rpc import merge_wire

    path = tmp_path / "x_runs.csv"
    first, again = sample_run(), sample_run(date="2026-11-28T14:00:00Z", seconds_per_token=0.02)
    merge_runs(path, [first])
    merge_runs(path, [again])
    assert sorted(r.seconds_per_token for r in read_runs(path)) == [0.01, 0.02]
    merge_runs(path, [sample_run(seconds_per_token=0.03)])  # the same run (date) measured again replaces it
    assert sorted(r.seconds_per_token for r in read_runs(path)) == [0.02, 0.03]
    merge_runs(path, [sample_run(link_bucket_bytes=65536.0)])  # another bucket is another deployment
    assert len(read_runs(path)) == 3
    wire = tmp_path / "x_wire.csv"
    row = {"shape": "tiny", "processes": 2, "link_mbit": 100.0, "phase": "decode", "link_packets_per_token": 3.0}
    merge_wire(wire, [dict(row, date=first.date)])
    merge_wire(wire, [dict(row, date=again.date)])
    assert len(pd.read_csv(wire)) == 2


def test_distributed_llama_runs_through_the_command_with_a_one_frame_bucket_and_says_na(tmp_path, monkeypatch, capsys):
    """`engines run distributed-llama` hands run_dllama the tight bucket by default (or --burst-bytes), and a
    phase whose link bytes were not counted prints n/a, not a crash."""
    from workbench.measure.engines import dllama
    from workbench.measure.engines.cli import main

    seen = {}

    def fake(version, shape, processes, link_mbit, tokens, work, burst_bytes=0, **kw):
        seen["burst"] = burst_bytes
        return [sample_run(engine="distributed-llama", phase="prefill", link_bytes_per_token=None)]

    monkeypatch.setattr(dllama, "run_dllama", fake)
    out = tmp_path / "d_runs.csv"
    assert main(_engines_args("run", "distributed-llama", "--link-mbit", "10", "--out", str(out))) == 0
    assert seen["burst"] == 1514 and "n/a" in capsys.readouterr().out
    main(_engines_args("run", "distributed-llama", "--burst-bytes", "6144", "--out", str(out)))
    assert seen["burst"] == 6144
