"""The stored engine runs' time per token against today's model (issue 42's time criterion): predictions in
data/engines/*_runs.csv are the current model's, and where communication is at least half the time on a vCPU per
process the token-bucket link holds them (the wire model does not)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.measure.engines import dllama, rpc
from workbench.measure.engines.runs import read_runs
from workbench.studies import engine_runs as er

RUNS = {"distributed-llama": (dllama.project_root() / "data" / "engines" / "dllama_runs.csv", dllama.repredicted),
        "llama.cpp": (rpc.RUNS_CSV, rpc.repredicted)}


@pytest.mark.parametrize("engine", RUNS)
def test_stored_predictions_are_todays_model(engine):
    """scripts/repredict_runs.py was run after the last change to the model (what was measured is kept)."""
    path, again = RUNS[engine]
    for row in read_runs(path):
        now = again(replace(row, predicted_seconds_per_token=1.0))
        assert now.predicted_seconds_per_token == pytest.approx(row.predicted_seconds_per_token, rel=1e-6), row
        assert now.seconds_per_token == row.seconds_per_token and now.method == row.method


def held_rows():
    """The side-by-side rows the time criterion applies to."""
    table = er.side_by_side(er.stored_runs())
    return table[table.time_held]


@pytest.mark.parametrize("engine, share", [("distributed-llama", 0.9), ("llama.cpp", 0.8)])
def test_time_per_token_is_held_where_communication_is_half_and_each_process_has_a_vcpu(engine, share):
    """At least `share` of the held rows within 25 % and the median within 15 %: 42 of 44 distributed-llama rows
    and 33 of 39 llama.cpp rows were when this was written (the misses, two disturbed repeats and llama.cpp's
    prefill compute, are in the closing note of issue 42)."""
    rows = held_rows()
    rows = rows[rows.engine == engine]
    assert len(rows) >= 10
    error = rows.time_error.abs()
    assert (error <= 0.25).mean() >= share, rows[["case", "phase", "time_error"]]
    assert error.median() <= 0.15


def test_oversubscribed_rows_are_not_held_and_are_what_the_contention_says():
    table = er.side_by_side(er.stored_runs())
    crowded = table[table.oversubscribed]
    assert len(crowded) and not crowded.time_held.any()
    assert (crowded.processes > 2).all()


def test_the_wire_model_misses_the_rows_the_bucket_model_holds():
    """The same held distributed-llama rows predicted as if the link were a wire (no bucket): far fewer are within
    25 % (21 of 44 against 42 when this was written), so the criterion above rests on the token bucket, not on a
    loose tolerance."""
    rows = held_rows()
    rows = rows[rows.engine == "distributed-llama"]
    wire = [dllama.predicted_time(r.engine_version, dllama.row_model(r), r.processes, r.link_mbit, r.phase,
                                  r.tokens, 0.0)[0] / r.seconds_per_token - 1
            for r in (next(x for x in read_runs(RUNS["distributed-llama"][0]) if x.date == row.date
                           and x.shape == row.shape and x.processes == row.processes and x.link_mbit == row.link_mbit
                           and x.link_bucket_bytes == row.link_bucket_bytes and x.phase == row.phase
                           and x.seconds_per_token == row.seconds_per_token and x.engine_version == row.engine_version)
                      for row in rows.itertuples())]
    within = sum(abs(e) <= 0.25 for e in wire)
    bucket = int((rows.time_error.abs() <= 0.25).sum())
    assert within <= 0.6 * bucket, (within, bucket, wire)
