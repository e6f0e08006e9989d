"""Will more boards help? From one scheme's arena rows at several device counts, the count where its latency
stops falling and the latency component that grows past it.

Rows are the arena's (`workbench.scenarios.arena.Arena.table`, one phase): `devices`, `scheme`, `status` (ok / OOM / n/a),
`latency_s`, the components (`workbench.scenarios.arena.COMPONENTS`) and `notes` (an n/a row's reason). The answer
names one of the causes users ask about (exo #489, distributed-llama #58, llama.cpp PR #16020): the per-message
time at the busiest endpoint (`comm_link_latency_s`), the bytes on the busiest link (`comm_bytes_s`), serial
work on one device (`serial_s`), a memory level falling out (`io_stall_s`, or the next count running out of
memory), or, when no component dominates, the one that grew most. Counts where the scheme cannot split the model
are listed with the arena's n/a reason. Pure pandas: `whatif --devices` imports it without JAX.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pandas as pd

from workbench.core.errors import WorkbenchError
from workbench.core.units import format_seconds

# latency components a device count can grow, with the words a user reads (the arena's COMPONENTS keys)
CAUSES = {"comm_link_latency_s": "per-message time at the busiest endpoint",
          "comm_bytes_s": "bytes on the busiest link",
          "serial_s": "serial work on one device (root)",
          "io_stall_s": "a memory level falling out (IO stall)",
          "fixed_s": "fixed per-device costs (launches, per-layer)",
          "memory_s": "memory streaming", "compute_s": "arithmetic", "other_s": "other"}
OOM_CAUSE = "oom"
FLAT_CAUSE = "flat"  # the latency does not change with the count (the scheme runs on one device)
CAUSE_WORDS = {**CAUSES, OOM_CAUSE: "a memory level falling out (the next count does not fit: OOM)",
               FLAT_CAUSE: "nothing: the latency does not change with the device count"}
SAME = 1e-9  # relative latency difference below which two counts tie
NEEDED = ("devices", "status", "latency_s", "notes", *CAUSES)


@dataclass(frozen=True)
class StopHelping:
    """Where adding devices stops helping one scheme: the fastest count that runs (`best`), the next count
    tried past it (`next`, None when `best` is the largest that runs), the component that grows from one to
    the other (`cause`, a CAUSES key or "oom"), and the counts the scheme cannot split the model at."""

    scheme: str
    best: int | None
    best_latency_s: float
    next: int | None
    cause: str
    growth_s: float
    unsplittable: tuple[tuple[int, str], ...] = ()
    applies: bool = True  # False: n/a at every count tried (not one run, not one OOM)

    def __post_init__(self) -> None:
        if self.cause and self.cause not in CAUSE_WORDS:
            raise WorkbenchError(f"cause must be one of {', '.join(CAUSE_WORDS)}, got {self.cause!r}")
        if self.next is not None and (self.best is None or self.next <= self.best):
            raise WorkbenchError(f"next device count must exceed the best ({self.best}), got {self.next}")

    @property
    def still_falling(self) -> bool:
        """True when the latency still falls at the largest count that runs (more devices may help)."""
        return self.best is not None and self.next is None

    def line(self) -> str:
        """One line for `whatif --devices`: the stop-helping count and its cause, and the counts it cannot split at."""
        if not self.applies:
            return f"{self.scheme}: does not apply at any device count tried: {self.unsplittable[0][1]}"
        if self.best is None:
            text = f"{self.scheme}: fits within memory at no device count tried"
        elif self.still_falling:
            text = f"{self.scheme}: still falling at {_count(self.best)} ({format_seconds(self.best_latency_s)}/token)"
        elif self.cause == FLAT_CAUSE:
            text = f"{self.scheme}: more devices do not help ({format_seconds(self.best_latency_s)}/token at every count that runs)"
        else:
            text = (f"{self.scheme}: stops helping at {_count(self.best)} ({format_seconds(self.best_latency_s)}/token); "
                    f"at {self.next} {CAUSE_WORDS[self.cause]} grows")
            if self.cause != OOM_CAUSE:
                text += f" (+{format_seconds(self.growth_s)})"
        if self.unsplittable:
            counts = ", ".join(str(n) for n, _ in self.unsplittable)
            text += f"; cannot split the model at {counts}: {self.unsplittable[0][1]}"
        return text


def _count(n: int) -> str:
    return f"{n} device" + ("" if n == 1 else "s")


def _records(rows) -> list[dict]:
    """The rows as dicts sorted by device count, every needed column present (one-line error otherwise)."""
    records = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else [dict(r) for r in rows]
    for r in records:
        missing = [c for c in NEEDED if c not in r]
        if missing:
            raise WorkbenchError(f"rows must carry {', '.join(NEEDED)}; missing {', '.join(missing)}")
    counts = [int(r["devices"]) for r in records]
    if len(set(counts)) != len(counts):
        raise WorkbenchError("rows must hold one row per device count (one scheme, one phase)")
    return sorted(records, key=lambda r: int(r["devices"]))


def _seconds(row: Mapping, key: str) -> float:
    v = row.get(key, 0.0)
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def growing_component(before: Mapping, after: Mapping) -> tuple[str, float]:
    """(component, seconds) of the latency component that grew most from `before` to `after` (NaN counts 0)."""
    growth = {key: _seconds(after, key) - _seconds(before, key) for key in CAUSES}
    key = max(growth, key=growth.get)
    return key, growth[key]


def stop_helping(scheme: str, rows: Iterable[Mapping] | pd.DataFrame) -> StopHelping:
    """Where adding devices stops cutting `scheme`'s latency (see the module docstring)."""
    records = _records(rows)
    unsplittable = tuple((int(r["devices"]), " ".join(str(r["notes"]).split()) or "does not apply")
                         for r in records if r["status"] == "n/a")
    ran = [r for r in records if r["status"] == "ok"]
    if not ran:
        applies = any(r["status"] == "OOM" for r in records) or not unsplittable
        return StopHelping(scheme, None, math.nan, None, "", 0.0, unsplittable, applies)
    best = min(ran, key=lambda r: float(r["latency_s"]))  # the first of equals: the fewest devices
    n_best, t_best = int(best["devices"]), float(best["latency_s"])
    later = [r for r in records if int(r["devices"]) > n_best and r["status"] != "n/a"]
    if not later:
        return StopHelping(scheme, n_best, t_best, None, "", 0.0, unsplittable)
    after = later[0]
    if after["status"] == "OOM":
        cause, growth = OOM_CAUSE, math.nan
    elif abs(float(after["latency_s"]) - t_best) <= SAME * t_best:
        cause, growth = FLAT_CAUSE, 0.0
    else:
        cause, growth = growing_component(best, after)
    return StopHelping(scheme, n_best, t_best, int(after["devices"]), cause, growth, unsplittable)


def stop_helping_all(frame: pd.DataFrame) -> list[StopHelping]:
    """`stop_helping` for every scheme of a frame with a `scheme` column (one phase), in the frame's order."""
    if "scheme" not in frame.columns:
        raise WorkbenchError("rows must carry a scheme column")
    by_scheme: dict[str, list[dict]] = {}
    for record in frame.to_dict("records"):
        by_scheme.setdefault(record["scheme"], []).append(record)
    return [stop_helping(s, rows) for s, rows in by_scheme.items()]


# ---- the sweep itself, for a notebook or the explorer ---------------------------------------------------
def device_sweep(config, counts, phases: tuple[str, ...] = ("decode",)) -> pd.DataFrame:
    """The arena table of a `workbench.scenarios.userconfig.UserConfig` with its first device repeated `counts` times (the
    same network), one block of rows per count with a `devices` column: what `whatif --devices` sweeps."""
    from dataclasses import replace

    from workbench.scenarios.arena import arena_for_config
    from workbench.schemes.base import Cluster

    tables = []
    for n in counts:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 1024:
            raise WorkbenchError(f"device counts must be integers in [1, 1024], got {n!r}")
        topology = replace(config.cluster.topology, n_devices=n)
        cluster = Cluster((config.cluster.devices[0],) * n, topology, config.cluster.shared_machine)
        tables.append(arena_for_config(replace(config, cluster=cluster), phases=phases).table().assign(devices=n))
    return pd.concat(tables, ignore_index=True)


def stop_helping_frame(answers: list[StopHelping]) -> pd.DataFrame:
    """One row per scheme: the fastest count, the next count tried, the cause (words), the counts it cannot split
    the model at, and the one-line answer."""
    return pd.DataFrame([{"scheme": a.scheme, "best_devices": a.best, "best_latency_s": a.best_latency_s,
                          "next_devices": a.next, "cause": CAUSE_WORDS.get(a.cause, ""),
                          "cannot_split_at": ", ".join(str(n) for n, _ in a.unsplittable), "answer": a.line()}
                         for a in answers])
