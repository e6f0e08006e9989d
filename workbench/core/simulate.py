"""Overlapped timelines: tasks on resources with dependencies -> makespan, busy and stall time, Gantt.

Each resource (a core, a link, a disk, a DMA engine) runs its tasks one at a time in the order they
are given; a task starts when its resource is free and all its dependencies have finished:

    start(t) = max(free(resource(t)), max(end(d) for d in deps(t)))

Why a recurrence and not a discrete-event library (SimPy): the schedules the papers describe are
static - the order of work on each resource is fixed by the scheme (tile i before tile i+1; load
block l+w after releasing block l) - so this one pass is exact, deterministic and O(tasks), fast
enough for the explorer's 100 ms budget. Memory limits (TPI-LLM's window, STI's preload buffer,
the MCU double buffer) are expressed as dependencies: "load l+w waits for the end of compute l".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from workbench.core.errors import WorkbenchError, require_non_negative

KINDS = ("compute", "communication", "io", "memory", "idle", "other")


@dataclass(frozen=True)
class Task:
    """One piece of work: `duration` seconds on `resource`, after every task named in `deps`."""

    name: str
    resource: str
    duration: float
    deps: tuple[str, ...] = ()
    kind: str = "compute"
    device: str = ""

    def __post_init__(self) -> None:
        require_non_negative(f"duration of task {self.name!r}", float(self.duration))
        if self.kind not in KINDS:
            raise WorkbenchError(f"task {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")


@dataclass(frozen=True)
class Timeline:
    """A scheduled set of tasks (one row per task with start and end)."""

    frame: pd.DataFrame

    @property
    def makespan(self) -> float:
        """Time from 0 to the end of the last task."""
        return float(self.frame["end"].max()) if len(self.frame) else 0.0

    def busy(self, resource: str) -> float:
        """Seconds `resource` spends working."""
        return float(self.frame.loc[self.frame["resource"] == resource, "duration"].sum())

    def stall(self, resource: str) -> float:
        """Seconds `resource` is idle between 0 and the makespan."""
        return self.makespan - self.busy(resource)

    def resources(self) -> pd.DataFrame:
        """Busy and stall seconds per resource."""
        busy = self.frame.groupby("resource", sort=True)["duration"].sum()
        return pd.DataFrame({"resource": busy.index, "busy": busy.values, "stall": self.makespan - busy.values})

    def by_kind(self) -> dict[str, float]:
        """Busy seconds summed per task kind (compute / communication / io ...)."""
        return {k: float(v) for k, v in self.frame.groupby("kind")["duration"].sum().items()}

    def end_of(self, name: str) -> float:
        """When task `name` ends."""
        row = self.frame.loc[self.frame["name"] == name]
        if row.empty:
            raise WorkbenchError(f"no task named {name!r}")
        return float(row["end"].iloc[0])

    def gantt(self, title: str = ""):
        """An altair Gantt chart (one row per resource, coloured by kind)."""
        import altair as alt  # lazy: cost-model users (the CLI, the explorer's hot path) need no charts

        return alt.Chart(self.frame, title=title).mark_bar().encode(
            x=alt.X("start:Q", title="time (s)"), x2="end:Q", y=alt.Y("resource:N", sort=None),
            color=alt.Color("kind:N"), tooltip=["name", "resource", "kind", "start", "end"],
        )


class Scheduler:
    """Places tasks one at a time by the recurrence above, for callers whose next task depends on when
    earlier ones end (Hepti's runtime re-plans at the start of each block); `schedule` is its batch form."""

    def __init__(self) -> None:
        self._end: dict[str, float] = {}
        self._free: dict[str, float] = {}
        self._rows: list[tuple] = []

    def add(self, task: Task) -> float:
        """Place `task` after the tasks added so far; return its start."""
        if task.name in self._end:
            raise WorkbenchError(f"duplicate task name {task.name!r}")
        try:
            ready = max((self._end[d] for d in task.deps), default=0.0)
        except KeyError as exc:
            raise WorkbenchError(f"task {task.name!r} depends on {exc.args[0]!r}, which is not an earlier task") from None
        start = max(ready, self._free.get(task.resource, 0.0))
        finish = start + float(task.duration)
        self._end[task.name] = finish
        self._free[task.resource] = finish
        self._rows.append((task.name, task.resource, task.kind, task.device, start, finish, float(task.duration)))
        return start

    def end_of(self, name: str) -> float:
        """When the added task `name` ends."""
        if name not in self._end:
            raise WorkbenchError(f"no task named {name!r}")
        return self._end[name]

    def free_at(self, resource: str) -> float:
        """When `resource` finishes the tasks added so far (0 if it has none)."""
        return self._free.get(resource, 0.0)

    def timeline(self) -> Timeline:
        """The tasks added so far as a Timeline (one row per task, in the order added)."""
        frame = pd.DataFrame(self._rows, columns=["name", "resource", "kind", "device", "start", "end", "duration"])
        return Timeline(frame)


def schedule(tasks: Iterable[Task]) -> Timeline:
    """Place tasks in list order: each starts when its resource is free and its deps are done."""
    scheduler = Scheduler()
    for task in tasks:
        scheduler.add(task)
    return scheduler.timeline()


def pipeline(loads: list[float], computes: list[float], buffer_slots: int | None = None,
             preloaded: int = 0, io_resource: str = "disk", compute_resource: str = "compute") -> Timeline:
    """The common IO/compute pipeline: load i then compute i, loads run ahead of compute.

    `buffer_slots` bounds how many loaded-but-not-computed items may be held (load i waits for the
    end of compute i - buffer_slots); `preloaded` items are already in memory (no load).
    Covers STI's shard pipeline, TPI-LLM's sliding window and the MCU double buffer (slots = 2).
    """
    if len(loads) != len(computes):
        raise WorkbenchError(f"loads ({len(loads)}) and computes ({len(computes)}) must have the same length")
    tasks = []
    for i, (load, comp) in enumerate(zip(loads, computes)):
        deps = []
        if i >= preloaded:
            load_deps = ()
            if buffer_slots is not None and i - buffer_slots >= 0:
                load_deps = (f"compute{i - buffer_slots}",)
            tasks.append(Task(f"load{i}", io_resource, load, load_deps, kind="io"))
            deps.append(f"load{i}")
        if i > 0:
            deps.append(f"compute{i - 1}")
        tasks.append(Task(f"compute{i}", compute_resource, comp, tuple(deps), kind="compute"))
    return schedule(tasks)
