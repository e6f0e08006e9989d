"""Timelines: recurrence semantics, overlap, buffers, errors."""

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.simulate import Scheduler, Task, pipeline, schedule


def test_resource_serialises_and_deps_wait():
    tl = schedule([Task("a", "cpu", 2), Task("b", "link", 1, ("a",), kind="communication"),
                   Task("c", "cpu", 3), Task("d", "cpu", 1, ("b",))])
    assert tl.end_of("b") == 3 and tl.end_of("c") == 5 and tl.end_of("d") == 6
    assert tl.makespan == 6 and tl.busy("cpu") == 6 and tl.stall("link") == 5


def test_pipeline_overlaps_io_with_compute():
    # loads 1, computes 2: after the first load everything hides behind compute
    tl = pipeline([1, 1, 1], [2, 2, 2])
    assert tl.makespan == 7
    # IO-bound: loads 3, computes 1 -> the compute core stalls
    tl = pipeline([3, 3, 3], [1, 1, 1])
    assert tl.makespan == 10 and tl.stall("compute") == 7


def test_buffer_slots_limit_prefetch():
    unbounded = pipeline([1, 1, 1, 1], [5, 5, 5, 5])
    double = pipeline([1, 1, 1, 1], [5, 5, 5, 5], buffer_slots=2)
    assert unbounded.end_of("load3") == 4
    assert double.end_of("load3") == double.end_of("compute1") + 1
    assert pipeline([1, 1], [1, 1], preloaded=1).busy("disk") == 1


def test_errors():
    with pytest.raises(WorkbenchError, match="not an earlier task"):
        schedule([Task("a", "cpu", 1, ("zzz",))])
    with pytest.raises(WorkbenchError, match="duration"):
        Task("a", "cpu", -1)
    with pytest.raises(WorkbenchError, match="duplicate"):
        schedule([Task("a", "cpu", 1), Task("a", "cpu", 1)])


def test_gantt_chart_builds():
    chart = pipeline([1, 1], [1, 1]).gantt("demo")
    assert chart.to_dict()["mark"]["type"] == "bar"


def test_scheduler_places_one_task_at_a_time_as_schedule_does():
    tasks = [Task("a", "cpu", 2), Task("b", "link", 1, ("a",), kind="communication"),
             Task("c", "cpu", 3), Task("d", "cpu", 1, ("b",))]
    sched = Scheduler()
    assert sched.free_at("cpu") == 0.0
    starts = [sched.add(t) for t in tasks]
    assert starts == [0, 2, 2, 5] and sched.end_of("b") == 3 and sched.free_at("cpu") == 6
    assert sched.timeline().frame.equals(schedule(tasks).frame)


def test_scheduler_errors():
    sched = Scheduler()
    sched.add(Task("a", "cpu", 1))
    with pytest.raises(WorkbenchError, match="duplicate"):
        sched.add(Task("a", "cpu", 1))
    with pytest.raises(WorkbenchError, match="not an earlier task"):
        sched.add(Task("b", "cpu", 1, ("zzz",)))
    with pytest.raises(WorkbenchError, match="no task named"):
        sched.end_of("zzz")
    assert sched.timeline().makespan == 1  # a rejected task leaves no trace
