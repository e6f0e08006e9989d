"""The llama.cpp RPC runner: run rows (schema, CSV round trip), accounting of link bytes, the stored runs held to
the llamacpp_rpc scheme, one short live run and the teardown on SIGINT."""

from __future__ import annotations

import dataclasses

import pytest

from workbench.engines.runs import COLUMNS, EngineRun, read_runs, runs_csv, write_runs
from workbench.errors import WorkbenchError

SCHEMA = (
    "engine, engine_version, commit, build, host, cpu, date, scheme, shape, n_layers, d_model, n_heads, n_kv_heads, "
    "d_head, d_ff, vocab_size, n_experts, n_active_experts, format, processes, threads, link_mbit, phase, tokens, "
    "seconds_per_token, root_sent_bytes_per_token, root_recv_bytes_per_token, link_bytes_per_token, "
    "predicted_seconds_per_token, predicted_bytes_per_token, comm_share, load_1min, contention, method")


def sample_run(**changes) -> EngineRun:
    """A valid run row; `changes` override fields."""
    base = dict(engine="llama.cpp", engine_version="0.3.36", commit="0c1e57098", build="GGML_RPC=ON", host="h",
                cpu="x86", date="2026-11-28T13:00:00Z", scheme="llamacpp_rpc", shape="tiny", n_layers=4,
                d_model=256, n_heads=4, n_kv_heads=2, d_head=64, d_ff=512, vocab_size=8192, n_experts=0,
                n_active_experts=0, format="F32", processes=2, threads=1, link_mbit=100.0, phase="decode", tokens=32,
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
