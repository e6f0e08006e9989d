"""Tests that kill mutmut survivors in workbench/core/simulate.py (see docs/mutation.md): timelines worked by hand."""

from __future__ import annotations

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.simulate import Scheduler, Task, pipeline, schedule


def _two_resources():
    """cpu: a 1 s then b 2 s; net: c 4 s after a. Makespan 5 (c runs 1..5); cpu busy 3, net busy 4."""
    return schedule([Task("a", "cpu", 1.0), Task("b", "cpu", 2.0),
                     Task("c", "net", 4.0, ("a",), kind="communication", device="d1")])


def test_resources_table_has_busy_and_stall_per_resource_sorted() -> None:
    """resources(): one row per resource in name order, busy = sum of durations, stall = makespan - busy."""
    table = _two_resources().resources()
    assert list(table.columns) == ["resource", "busy", "stall"]
    assert list(table["resource"]) == ["cpu", "net"]
    assert list(table["busy"]) == [3.0, 4.0]
    assert list(table["stall"]) == [2.0, 1.0]


def test_resources_are_listed_by_name_not_by_first_use() -> None:
    """A resource first used later but sorting first is still listed first."""
    t = schedule([Task("x", "net", 1.0), Task("y", "cpu", 2.0)])
    assert list(t.resources()["resource"]) == ["cpu", "net"]
    assert list(t.resources()["busy"]) == [2.0, 1.0]


def test_by_kind_sums_durations_per_kind() -> None:
    """by_kind(): compute 1 + 2 = 3 s, communication 4 s."""
    assert _two_resources().by_kind() == {"compute": 3.0, "communication": 4.0}


def test_frame_keeps_the_device_column() -> None:
    """The schedule frame names each task's device (the Gantt and the arena group by it)."""
    frame = _two_resources().frame
    assert list(frame.columns) == ["name", "resource", "kind", "device", "start", "end", "duration"]
    assert list(frame["device"]) == ["", "", "d1"]
    assert list(frame["start"]) == [0.0, 1.0, 1.0]


def test_error_messages_name_the_problem() -> None:
    """Errors say what is wrong (a bad kind, an unknown task, mismatched pipeline lists)."""
    with pytest.raises(WorkbenchError, match="kind must be one of"):
        Task("t", "cpu", 1.0, kind="nope")
    with pytest.raises(WorkbenchError, match="no task named 'zzz'"):
        _two_resources().end_of("zzz")
    with pytest.raises(WorkbenchError, match=r"loads \(1\) and computes \(2\)"):
        pipeline([1.0], [1.0, 2.0])


def test_pipeline_buffer_of_one_slot_serialises_load_after_compute() -> None:
    """One buffer slot: load 1 waits for compute 0. loads 1 s, computes 3 s: load0 0-1, compute0 1-4,
    load1 4-5, compute1 5-8 (without the bound, load1 would run 1-2 and the makespan be 7)."""
    t = pipeline([1.0, 1.0], [3.0, 3.0], buffer_slots=1)
    assert t.end_of("load1") == 5.0
    assert t.makespan == 8.0


def test_pipeline_buffer_of_two_slots_bounds_the_third_load() -> None:
    """Two slots: load 2 waits for compute 0 (ends at 1 + 3 = 4), so it ends at 5, not at 3."""
    t = pipeline([1.0, 1.0, 1.0], [3.0, 3.0, 3.0], buffer_slots=2)
    assert t.end_of("load1") == 2.0
    assert t.end_of("load2") == 5.0
    assert t.makespan == 10.0


def test_pipeline_kinds_are_io_and_compute() -> None:
    """Loads are io tasks, computes compute tasks (so by_kind splits them)."""
    t = pipeline([1.0, 2.0], [3.0, 4.0])
    assert t.by_kind() == {"io": 3.0, "compute": 7.0}


def test_gantt_encodes_time_resource_and_kind() -> None:
    """The Gantt chart: bars from start to end (time axis titled), one row per resource in task order,
    coloured by kind, with the title and a tooltip naming the task."""
    spec = _two_resources().gantt(title="T").to_dict()
    enc = spec["encoding"]
    assert spec["title"] == "T"
    assert spec["mark"]["type"] == "bar"
    assert enc["x"]["field"] == "start" and enc["x"]["type"] == "quantitative"
    assert enc["x"]["title"] == "time (s)"
    assert enc["x2"]["field"] == "end"
    assert enc["y"]["field"] == "resource" and enc["y"]["type"] == "nominal"
    assert enc["y"]["sort"] is None
    assert enc["color"]["field"] == "kind"
    assert [t["field"] for t in enc["tooltip"]] == ["name", "resource", "kind", "start", "end"]


def test_gantt_has_no_title_by_default() -> None:
    """No title argument: the chart carries an empty title."""
    assert _two_resources().gantt().to_dict().get("title", "") == ""


def test_scheduler_places_tasks_one_at_a_time() -> None:
    """add() returns each start; end_of / free_at answer between additions; timeline() keeps the order."""
    s = Scheduler()
    assert s.free_at("cpu") == 0.0
    assert s.add(Task("a", "cpu", 2.0)) == 0.0
    assert s.add(Task("b", "net", 1.0, ("a",))) == 2.0
    assert s.add(Task("c", "cpu", 0.5)) == 2.0
    assert (s.end_of("a"), s.end_of("b"), s.free_at("cpu"), s.free_at("net")) == (2.0, 3.0, 2.5, 3.0)
    assert list(s.timeline().frame["name"]) == ["a", "b", "c"]
    with pytest.raises(WorkbenchError, match="no task named 'z'"):
        s.end_of("z")
    with pytest.raises(WorkbenchError, match="duplicate task name 'a'"):
        s.add(Task("a", "cpu", 1.0))
    with pytest.raises(WorkbenchError, match="task 'd' depends on 'z', which is not an earlier task"):
        s.add(Task("d", "cpu", 1.0, ("z",)))
