"""What the explorer evaluates, pure: `compute(State) -> View` runs `arena_for_config` (what whatif runs), the
speculation table (`speculative.scheme_table`), the "will more boards help?" sweep and the tidy result rows."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice
from workbench.core.units import format_seconds
from workbench.scenarios.arena import (
    METRIC,
    Arena,
    Registry,
    arena_for_config,
    breakdown_frame,
    memory_frame,
    ranking_frame,
    table_result_rows,
)
from workbench.scenarios.explore.state import (
    ALL,
    BOARD_COUNTS,
    MAX_DEVICE_COUNT,
    MOE_CONTROLS,
    SPECULATION_CONTROLS,
    State,
    control_values,
)
from workbench.scenarios.speculative import scheme_table
from workbench.scenarios.userconfig import UserConfig
from workbench.schemes.base import load_all


@dataclass(frozen=True)
class View:
    """What the explorer shows for one setting: the arena of one phase and a one-line summary."""

    state: State
    arena: Arena
    summary: str
    notes: tuple[str, ...] = field(default=())
    speculation: pd.DataFrame | None = field(default=None, compare=False)  # `speculation_frame`, with a draft

    def table(self) -> pd.DataFrame:
        """The arena rows of this phase."""
        return self.arena.table()


class _MemoArena(Arena):
    """An Arena whose table() and memory() are built once (a redraw asks for them several times)."""

    def table(self) -> pd.DataFrame:
        """The arena rows (built on first use, a copy each call)."""
        if "_table" not in self.__dict__:
            object.__setattr__(self, "_table", Arena.table(self))
        return self.__dict__["_table"].copy()

    def memory(self) -> pd.DataFrame:
        """Peak memory per device (built on first use, a copy each call)."""
        if "_memory" not in self.__dict__:
            object.__setattr__(self, "_memory", Arena.memory(self))
        return self.__dict__["_memory"].copy()


def memoised(arena: Arena) -> Arena:
    """`arena` with its table and memory frames computed once."""
    return _MemoArena(arena.model, arena.cluster, arena.workloads, arena.entries)


def compute(state: State, registry: Registry | None = None, best_gammas: dict | None = None) -> View:
    """The arena of `state`'s deployment in one phase, by `arena_for_config` (what whatif runs), and with a draft
    its speculation table (`speculation_frame`; `best_gammas`: its memo of best gammas); raise WorkbenchError
    when nothing can be shown."""
    registry = load_all() if registry is None else registry
    config = state.config
    for what, tokens in (("sequence length", config.seq_len), ("tokens attended (kv_len)", config.kv_len)):
        if tokens > config.model.max_positions:
            raise WorkbenchError(f"{what} {tokens} exceeds {config.model.name}'s max_positions "
                                 f"({config.model.max_positions})")
    schemes = None if state.scheme == ALL else [require_choice("scheme", state.scheme, sorted(registry))]
    arena = memoised(arena_for_config(config, phases=(state.phase,), schemes=schemes, registry=registry))
    if schemes is not None and arena.entries and arena.entries[0].status == "n/a":
        raise WorkbenchError(f"{state.scheme} does not apply here: {arena.entries[0].error}")
    arena.check_feasible()
    table = arena.table()
    ok = table[table["status"] == "ok"].sort_values(["latency_s", "scheme"])
    best = ok.iloc[0]
    counts = table["status"].value_counts()
    summary = (f"best {METRIC[state.phase]}: {best.scheme} ({best.paper}) {format_seconds(best.latency_s)}"
               f" | {int(counts.get('ok', 0))} fit, {int(counts.get('OOM', 0))} OOM, {int(counts.get('n/a', 0))} n/a")
    notes = tuple(f"{e.scheme}: {e.error}" for e in arena.entries if e.status == "n/a")
    speculation = None
    if config.speculation is not None:
        decode = arena if state.phase == "decode" else \
            arena_for_config(config, phases=("decode",), schemes=schemes, registry=registry)
        speculation = speculation_frame(decode, config, registry, best_gammas)
    return View(state, arena, summary, notes, speculation)


def speculation_frame(arena: Arena, config: UserConfig, registry: Registry,
                      best_gammas: dict | None = None) -> pd.DataFrame:
    """`speculative.scheme_table` of the schemes whose decode runs within memory, with the deployment's draft at
    its gamma and each scheme's best gamma in 1..16. The best gamma does not depend on the gamma chosen:
    `best_gammas` (scheme -> `best_gamma`'s answer), given for one deployment up to its gamma, keeps them across
    gamma moves (most of the cost: 16 verify steps per scheme)."""
    plains = [(e.scheme, e.result) for e in arena.entries if e.phase == "decode" and e.status == "ok"]
    return scheme_table(config.speculation, plains, registry, config.model, config.cluster,
                        config.workload("decode"), best_gammas=best_gammas)


# ---- will more boards help? ---------------------------------------------------------------------------------
def board_counts(n: int) -> tuple[int, ...]:
    """The device counts tried around the deployment's `n`: 1, n/2, n, 2n and 4n within 1..MAX_DEVICE_COUNT
    (at most BOARD_COUNTS arenas: one sweep costs ~0.5 s on the 2-core machine)."""
    counts = sorted({min(max(c, 1), MAX_DEVICE_COUNT) for c in (1, n // 2, n, 2 * n, 4 * n)})
    return tuple(counts[:BOARD_COUNTS])


def boards_frame(config: UserConfig, phase: str) -> pd.DataFrame:
    """Per scheme, where adding devices (copies of the first) stops helping `phase` and why
    (`scaling.device_sweep` over `board_counts`, `scaling.stop_helping_frame`), with `applies` (False: n/a at
    every count tried)."""
    from workbench.scenarios.scaling import device_sweep, stop_helping_all, stop_helping_frame

    answers = stop_helping_all(device_sweep(config, list(board_counts(config.cluster.n)), phases=(phase,)))
    return stop_helping_frame(answers).assign(applies=[a.applies for a in answers])


def chart_frames(view: View) -> dict[str, pd.DataFrame]:
    """The data behind each explorer chart."""
    return {"breakdown": breakdown_frame(view.arena), "ranking": ranking_frame(view.arena),
            "memory": memory_frame(view.arena, view.state.phase)}


def view_result_rows(view: View) -> pd.DataFrame:
    """Tidy result rows (workbench.report.results columns) of a view: each scheme's latency and peak memory."""
    s, v = view.state, control_values(view.state.config)
    setting = (f"preset={s.preset},n={v['n_devices']},bw={v['bandwidth_mbps']:g}Mbps,tau={v['latency_ms']:g}ms,"
               f"mem={v['memory_gib']:g}GiB,S={v['seq_len']},kv={v['kv_len']},w={v['weight_format']},"
               f"a={v['activation_format']},kv_format={v['kv_format']},"
               + "".join(f"{key}={v[key]}," for key in MOE_CONTROLS)
               + ("".join(f"{key}={v[key]}," for key in SPECULATION_CONTROLS) if s.config.speculation else "")
               + s.phase)
    return table_result_rows(view.table(), "explorer", s.config.model.name, setting, phase_in_name=False)
