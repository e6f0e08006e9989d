"""The per-message time of the namespace path: the ping-pong's statistics, the stored measured constant and the
prediction charging it per message; the timing lock that keeps engine timing runs apart; and one short live
ping-pong (skipped with the reason without root, ip/tc or gcc)."""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import replace

import pytest

from workbench.core.constants import load_constants
from workbench.core.errors import WorkbenchError
from workbench.measure.cluster.netns import list_namespaces, shaping_unavailable
from workbench.measure.engines import dllama, pingpong, timing
from workbench.measure.engines.runs import read_runs

RUNS = dllama.project_root() / "data" / "engines" / "dllama_runs.csv"


def test_summary_drops_the_warm_up_tenth_and_halves_the_round_trip():
    got = pingpong.summarise("v0.4.0", 64, 1000.0, [9000] * 10 + [2000] * 80 + [4000] * 10)
    assert got.rounds == 90
    assert got.median_s == pytest.approx(1e-6)
    assert got.mean_s == pytest.approx((80 * 1e-6 + 10 * 2e-6) / 90)
    with pytest.raises(WorkbenchError, match="rounds must leave"):
        pingpong.summarise("v0.4.0", 64, 1000.0, [])


@pytest.mark.parametrize("version", pingpong.MODES)
def test_the_per_message_constant_is_measured_and_says_how(version):
    c = load_constants(pingpong.CONSTANTS)["netns_message_overhead_" + version.replace(".", "_")]
    assert c.kind == "measured" and c.unit == "s"
    assert "scripts/netns_pingpong.py" in c.source and "load" in c.source
    assert 0 < pingpong.message_overhead_s(version) < 1e-2
    with pytest.raises(WorkbenchError, match="version must be one of"):
        pingpong.message_overhead_s("v0.9.0")


def test_the_prediction_charges_the_measured_time_on_each_of_v04s_41_messages():
    o = pingpong.message_overhead_s("v0.4.0")
    pred = dllama.predict("v0.4.0", dllama.SHAPES["dense-512x4"], 2, 10.0, 20)
    # 4 layers x 10 syncs (6 attention, 4 FFN: sliced_syncs) + the position, one message each at n = 2
    assert pred.comm_link_latency_s == pytest.approx(41 * o)


def test_a_repredicted_row_keeps_what_was_measured():
    row = next(r for r in read_runs(RUNS) if r.engine_version == "v0.16.4" and r.phase == "decode")
    again = dllama.repredicted(replace(row, predicted_seconds_per_token=1.0, comm_share=0.01))
    assert again.seconds_per_token == row.seconds_per_token
    assert again.root_sent_bytes_per_token == row.root_sent_bytes_per_token
    assert again.predicted_seconds_per_token == pytest.approx(row.predicted_seconds_per_token)
    assert again.comm_share == pytest.approx(row.comm_share)


def test_the_timing_slot_holds_the_lock_and_waits_for_the_other_engine(tmp_path, monkeypatch):
    lock = tmp_path / "timing.lock"
    monkeypatch.setattr(timing, "other_engine_running", lambda: False)
    with timing.timing_slot(str(lock)) as load:
        assert load >= 0
        with open(lock) as f, pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock) as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
    monkeypatch.setattr(timing, "other_engine_running", lambda: True)
    monkeypatch.setattr(timing.time, "sleep", lambda s: None)
    with pytest.raises(WorkbenchError, match="rpc_worker"), timing.timing_slot(str(lock), wait_s=1e-3):
        pass


def test_live_ping_pong_between_two_namespaces_cleans_up():
    reason = shaping_unavailable() or (None if shutil.which("gcc") else "the ping-pong needs gcc")
    if reason:
        pytest.skip(reason)
    got = pingpong.measure("v0.4.0", 64, 50)
    assert got.rounds == 45 and got.mean_s > 0
    assert not [n for n in list_namespaces() if n.startswith(f"wb{os.getpid()}-")]
