"""Tests that kill mutmut survivors in `workbench/scenarios/scaling.py` (see docs/mutation.md, "Speculative decoding,
GGUF formats, MoE advice, scaling").

The rows are hand-made arena rows (`devices`, `status`, `latency_s`, `notes` and the components), so every
expected count, cause and line is read off the rows themselves. Pure pandas; the file runs in about a second but
for the one device sweep (two counts of the Pi example, as tests/test_scaling.py runs it).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.scenarios import scaling as sc


def row(devices, status="ok", notes="", **parts) -> dict:
    """An arena row: the components given (others 0), latency their sum (NaN for n/a)."""
    r = {"devices": devices, "status": status, "notes": notes, **dict.fromkeys(sc.CAUSES, 0.0), **parts}
    r["latency_s"] = math.nan if status == "n/a" else sum(r[c] for c in sc.CAUSES)
    return r


# ---- StopHelping ------------------------------------------------------------------------------------------------
def test_a_bad_cause_lists_the_allowed():
    with pytest.raises(WorkbenchError, match=r"^cause must be one of comm_link_latency_s, comm_bytes_s, .*, oom, "
                                             r"flat, got 'heat'$"):
        sc.StopHelping("s", 2, 1.0, 4, "heat", 0.0)
    assert sc.StopHelping("s", 2, 1.0, 4, "", 0.0).cause == ""  # no cause is fine


@pytest.mark.parametrize(("best", "after"), [(4, 4), (4, 2), (None, 2)])
def test_the_next_count_must_exceed_the_best(best, after):
    with pytest.raises(WorkbenchError, match=rf"^next device count must exceed the best \({best}\), got {after}$"):
        sc.StopHelping("s", best, 1.0, after, "flat", 0.0)


def test_the_next_count_one_above_the_best_is_fine():
    assert sc.StopHelping("s", 4, 1.0, 5, "flat", 0.0).next == 5


@pytest.mark.parametrize(("answer", "line"), [
    (sc.StopHelping("s", None, math.nan, None, "", 0.0, ((1, "n/a: no"),), applies=False),
     "s: does not apply at any device count tried: n/a: no"),
    (sc.StopHelping("s", None, math.nan, None, "", 0.0), "s: fits within memory at no device count tried"),
    (sc.StopHelping("s", 1, 0.25, None, "", 0.0), "s: still falling at 1 device (250 ms/token)"),
    (sc.StopHelping("s", 8, 1.5, None, "", 0.0), "s: still falling at 8 devices (1.5 s/token)"),
    (sc.StopHelping("s", 2, 0.999, None, "", 0.0), "s: still falling at 2 devices (999 ms/token)"),
    (sc.StopHelping("s", 2, 0.0123, 4, "flat", 0.0),
     "s: more devices do not help (12.3 ms/token at every count that runs)"),
    (sc.StopHelping("s", 2, 0.0123, 4, "oom", math.nan),
     "s: stops helping at 2 devices (12.3 ms/token); at 4 a memory level falling out (the next count does not fit: "
     "OOM) grows"),
    (sc.StopHelping("s", 1, 1.0, 2, "comm_bytes_s", 0.004),
     "s: stops helping at 1 device (1 s/token); at 2 bytes on the busiest link grows (+4 ms)"),
    (sc.StopHelping("s", 2, 0.5, 4, "serial_s", 2.0, ((8, "n/a: eight"), (16, "n/a: sixteen"))),
     "s: stops helping at 2 devices (500 ms/token); at 4 serial work on one device (root) grows (+2 s); cannot "
     "split the model at 8, 16: n/a: eight"),
])
def test_each_answer_is_one_line(answer, line):
    assert answer.line() == line


def test_still_falling_needs_a_best_and_no_next():
    assert sc.StopHelping("s", 2, 1.0, None, "", 0.0).still_falling
    assert not sc.StopHelping("s", 2, 1.0, 4, "flat", 0.0).still_falling
    assert not sc.StopHelping("s", None, math.nan, None, "", 0.0).still_falling


# ---- the rows ----------------------------------------------------------------------------------------------------
def test_rows_are_sorted_by_count_from_a_frame_or_a_list():
    rows = [row(4, memory_s=1.0), row(1, memory_s=3.0), row(2, memory_s=2.0)]
    assert [r["devices"] for r in sc._records(rows)] == [1, 2, 4]
    assert [r["devices"] for r in sc._records(pd.DataFrame(rows))] == [1, 2, 4]
    assert [r["devices"] for r in sc._records([row(10), row(9)])] == [9, 10]  # as numbers, not text


def test_rows_missing_a_column_name_it():
    bad = row(1)
    del bad["notes"], bad["serial_s"]
    with pytest.raises(WorkbenchError, match=r"^rows must carry devices, status, latency_s, notes, .*; missing "
                                             r"notes, serial_s$"):
        sc._records([bad])


def test_two_rows_of_one_count_are_refused():
    with pytest.raises(WorkbenchError, match=r"^rows must hold one row per device count \(one scheme, one phase\)$"):
        sc._records([row(2), row(2)])


def test_seconds_read_none_and_nan_as_zero():
    assert sc._seconds({"x": None}, "x") == 0.0 and sc._seconds({"x": math.nan}, "x") == 0.0
    assert sc._seconds({}, "x") == 0.0 and sc._seconds({"x": 2}, "x") == pytest.approx(2.0, rel=1e-12)


def test_the_component_that_grew_most_wins_and_the_first_of_equals():
    before, after = row(1, memory_s=1.0, serial_s=0.5), row(2, memory_s=0.5, serial_s=0.75, fixed_s=0.25)
    assert sc.growing_component(before, after) == ("serial_s", pytest.approx(0.25, rel=1e-12))  # serial before fixed
    assert sc.growing_component(row(1), row(2, other_s=0.1)) == ("other_s", pytest.approx(0.1, rel=1e-12))
    key, growth = sc.growing_component(row(1, memory_s=1.0), row(2, memory_s=0.5))  # everything fell or stayed
    assert key == "comm_link_latency_s" and growth == pytest.approx(0.0, abs=1e-15)


# ---- stop_helping ------------------------------------------------------------------------------------------------
def test_a_scheme_that_never_runs_applies_if_one_count_ran_out_of_memory():
    oom = sc.stop_helping("s", [row(1, "OOM"), row(2, "n/a", "n/a:   too\n many")])
    assert oom.applies and oom.best is None and oom.unsplittable == ((2, "n/a: too many"),)
    assert oom.cause == "" and oom.growth_s == 0.0 and oom.next is None and math.isnan(oom.best_latency_s)
    never = sc.stop_helping("s", [row(1, "n/a", "n/a: no"), row(2, "n/a", "")])
    assert not never.applies and never.unsplittable == ((1, "n/a: no"), (2, "does not apply"))
    assert sc.stop_helping("s", [row(1, "OOM"), row(2, "OOM")]).applies


def test_the_best_is_the_fewest_devices_of_equal_latency():
    answer = sc.stop_helping("s", [row(1, memory_s=2.0), row(2, memory_s=1.0), row(4, memory_s=1.0)])
    assert (answer.best, answer.best_latency_s, answer.next, answer.cause) == (2, 1.0, 4, "flat")


def test_n_a_counts_past_the_best_are_skipped_for_the_next():
    answer = sc.stop_helping("s", [row(1, memory_s=1.0), row(2, "n/a", "n/a: x"), row(4, memory_s=0.5, serial_s=1.0)])
    assert (answer.best, answer.next, answer.cause) == (1, 4, "serial_s")
    assert answer.growth_s == pytest.approx(1.0, rel=1e-12) and answer.unsplittable == ((2, "n/a: x"),)
    last = sc.stop_helping("s", [row(1, memory_s=2.0), row(2, memory_s=1.0), row(4, "n/a", "n/a: x")])
    assert (last.best, last.next, last.cause, last.growth_s) == (2, None, "", 0.0)
    assert last.unsplittable == ((4, "n/a: x"),) and last.still_falling


def test_the_next_count_out_of_memory_has_no_growth():
    answer = sc.stop_helping("s", [row(1, memory_s=1.0), row(2, "OOM")])
    assert answer.cause == "oom" and math.isnan(answer.growth_s) and answer.next == 2


def test_latencies_within_a_billionth_tie():
    """4 s and 4 s + 2 ns tie (flat: within 1e-9 x 4 s); 4 s + 6 ns does not: the comm bytes that grew are named."""
    flat = sc.stop_helping("s", [row(1, memory_s=4.0), row(2, memory_s=4.0, comm_bytes_s=2e-9)])
    assert flat.cause == "flat" and flat.growth_s == 0.0
    grows = sc.stop_helping("s", [row(1, memory_s=4.0), row(2, memory_s=4.0, comm_bytes_s=6e-9)])
    assert grows.cause == "comm_bytes_s" and grows.growth_s == pytest.approx(6e-9, rel=1e-6)


def test_every_scheme_of_a_frame_in_its_order():
    frame = pd.DataFrame([{**row(1, memory_s=1.0), "scheme": "b"}, {**row(1, memory_s=1.0), "scheme": "a"},
                          {**row(2, memory_s=2.0), "scheme": "b"}, {**row(2, memory_s=0.5), "scheme": "a"}])
    answers = sc.stop_helping_all(frame)
    assert [(a.scheme, a.best, a.next) for a in answers] == [("b", 1, 2), ("a", 2, None)]
    with pytest.raises(WorkbenchError, match=r"^rows must carry a scheme column$"):
        sc.stop_helping_all(frame.drop(columns="scheme"))


def test_the_answer_frame_has_a_row_per_scheme():
    answers = [sc.StopHelping("a", 2, 0.5, 4, "serial_s", 2.0, ((8, "n/a: eight"), (16, "n/a: sixteen"))),
               sc.StopHelping("b", None, math.nan, None, "", 0.0)]
    frame = sc.stop_helping_frame(answers)
    assert list(frame.columns) == ["scheme", "best_devices", "best_latency_s", "next_devices", "cause",
                                   "cannot_split_at", "answer"]
    first = frame.iloc[0]
    assert (first.scheme, first.best_devices, first.next_devices) == ("a", 2, 4)
    assert first.best_latency_s == pytest.approx(0.5, rel=1e-12)
    assert first.cause == "serial work on one device (root)" and first.cannot_split_at == "8, 16"
    assert first.answer == answers[0].line()
    assert frame.iloc[1].cause == "" and frame.iloc[1].cannot_split_at == ""


# ---- the sweep ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("count", [0, 1025, 2.0, True, "4"])
def test_device_counts_must_be_integers_from_1_to_1024(count):
    from workbench.scenarios.userconfig import load_config

    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    with pytest.raises(WorkbenchError, match=rf"^device counts must be integers in \[1, 1024\], got {count!r}$"):
        sc.device_sweep(config, [count])


def test_a_device_sweep_repeats_the_first_device_over_the_same_network_and_phases():
    from workbench.scenarios.userconfig import load_config

    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    sweep = sc.device_sweep(config, [1, 3], phases=("prefill",))
    assert set(sweep.phase) == {"prefill"} and list(dict.fromkeys(sweep.devices)) == [1, 3]
    assert list(sweep.index) == list(range(len(sweep)))  # one frame, renumbered


def test_a_device_sweep_hands_each_count_its_own_cluster(monkeypatch):
    """With the arena stubbed out (it would cost every scheme at 1024 devices): each count gets a cluster of that
    many copies of the first device, the same network and the same shared machine; 1024 is allowed."""
    from dataclasses import replace

    from workbench.machine.hardware import load_device
    from workbench.scenarios import arena
    from workbench.scenarios.userconfig import load_config

    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    first, other, host = config.cluster.devices[0], load_device("a100"), load_device("hepti_rpi4")
    cluster = replace(config.cluster, devices=(first, other) + config.cluster.devices[2:], shared_machine=host)
    seen = []

    class Table:
        def __init__(self, config, phases):
            seen.append((config, phases))

        def table(self):
            return pd.DataFrame({"scheme": ["s"], "phase": ["decode"]})

    monkeypatch.setattr(arena, "arena_for_config", lambda config, phases: Table(config, phases))
    sweep = sc.device_sweep(replace(config, cluster=cluster), [2, 1024], phases=("decode",))
    assert list(sweep.devices) == [2, 1024] and list(sweep.index) == [0, 1]
    for (used, phases), n in zip(seen, (2, 1024)):
        assert phases == ("decode",)
        assert used.cluster.devices == (first,) * n and used.cluster.topology.n_devices == n
        assert used.cluster.shared_machine == host
        assert used.cluster.topology.link == config.cluster.topology.link and used.model == config.model
