"""Live what-if explorer: ipywidgets controls driving the arena's charts (`workbench.livechart.LiveChart`).

One path from a TOML to a result: a preset or TOML file is parsed by `workbench.userconfig.load_config` (what
`whatif` reads) into a `UserConfig`; the explorer's state is that deployment plus the view choices (`State`);
every control is a view of one of its fields (`control_values`) and moving one gives a new `UserConfig`
(`configure`); the model call `compute(State) -> View` runs `arena_for_config`, the function whatif runs. The
`Explorer` widget only turns controls into a `State`, calls `compute`, and swaps the charts' specs.
Invalid settings (more devices than heads for the chosen scheme, a budget nothing fits in) raise
`WorkbenchError`; the explorer shows its one line and keeps the previous charts.
"""

from __future__ import annotations

import html
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import pandas as pd

from workbench.arena import (
    GIB,
    METRIC,
    Arena,
    Registry,
    arena_for_config,
    breakdown_frame,
    memory_frame,
    ranking_frame,
    table_result_rows,
)
from workbench.arena_charts import (
    SCALES,
    breakdown_spec,
    format_gib,
    format_rate,
    memory_spec,
    ranking_spec,
    setting_title,
)
from workbench.errors import (
    WorkbenchError,
    require_choice,
    require_int,
)
from workbench.fields import declared_fields
from workbench.formats import RECIPE_DEFAULTS, recipe_bits
from workbench.hardware import device_names, load_device
from workbench.io import REPO_ROOT
from workbench.models import MODELS, get_model
from workbench.network import Link, Topology
from workbench.regimes import with_device_count, with_link, with_memory_budget
from workbench.routing import CACHE_POLICIES, ROUTING_KINDS, ExpertCache, Routing, check_cache
from workbench.schemes.base import PHASES, Cluster, Workload, load_all
from workbench.speculative import (
    MAX_GAMMA,
    NGRAM,
    PLACEMENTS,
    Speculation,
    allowed_drafts,
    check_draft,
    expected_tokens,
    scheme_table,
)
from workbench.units import bytes_per_s_to_mbps, format_seconds
from workbench.userconfig import (
    ENTRY_FIELDS,
    MODEL_FIELDS,
    WEIGHT_FORMATS,
    WORKLOAD_KEYS,
    UserConfig,
    load_config,
)

EXAMPLES_DIR = REPO_ROOT / "examples"
ALL = "all"
MAX_DEVICES = 64  # the device slider's end (further where a file has more)
MAX_DEVICE_COUNT = int(ENTRY_FIELDS["count"].high)  # what a deployment TOML allows
MAX_TOKENS = 4096  # the token sliders' end (further where a file has more)
KV_AS_ACTIVATIONS = "as activations"  # the KV-format choice of a file without kv_bits / kv_format
DEVICE_PRESET_COUNT = 4  # a data/devices preset starts as four such devices ...
DEVICE_PRESET_MODEL = "Llama 2-7B"  # ... running this model (then the controls move it)
NO_DRAFT = "none"  # the draft control's choice for plain decode (no [speculative] table)
SPECULATION_CONTROLS = ("draft", "placement", "gamma", "alpha")  # the [speculative] keys with a control
# Where the draft controls start for a file without [speculative] (they change nothing until a draft is chosen):
# Speculation's own default gamma and placement, and an alpha near llama.cpp PR #3006's code example (quoted in
# data/speculative/acceptance.csv: 87.8 % of 16 drafted tokens accepted) rounded to the slider's 0.05 steps
START_ALPHA = 0.85
ALPHA_SLIDER = (0.0, 0.95, 0.05)  # the alpha slider: i.i.d. acceptance, below 1 (Leviathan et al. 2023, Sec. 3.1)
BOARD_COUNTS = 5  # "will more boards help?" sweeps at most this many device counts (one arena each)


def preset_names() -> list[str]:
    """Example deployments (examples/<stem>.toml) first, then device presets (data/devices/<id>.toml)."""
    return example_names() + device_names()


@lru_cache(maxsize=64)
def _load_config_cached(path: str, mtime: float) -> UserConfig:
    return load_config(path)


def example_names() -> list[str]:
    """Stems of the example deployments in examples/."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.toml"))


def load_preset(preset: str) -> UserConfig:
    """An example or any TOML path -> its UserConfig (`load_config`, what whatif reads); a device id -> the
    deployment `device_config` makes of it."""
    path = Path(preset)
    if path.is_dir():
        raise WorkbenchError(f"config file {preset!r} is a directory; give a .toml file")
    if preset.endswith(".toml"):
        path = path if path.is_absolute() else (REPO_ROOT / path if not path.exists() else path)
    elif (EXAMPLES_DIR / f"{preset}.toml").exists():
        path = EXAMPLES_DIR / f"{preset}.toml"
    elif preset in device_names():
        return device_config(preset)
    else:
        raise WorkbenchError(f"unknown preset {preset!r}; examples: {', '.join(example_names())} "
                             f"(or a device id from data/devices/, or a path to a .toml file)")
    if path.is_dir():
        raise WorkbenchError(f"config file {preset!r} is a directory; give a .toml file")
    if not path.is_file():
        raise WorkbenchError(f"config file {preset!r} does not exist")
    return _load_config_cached(str(path), path.stat().st_mtime)


@lru_cache(maxsize=32)
def device_config(device_id: str) -> UserConfig:
    """A data/devices preset as a deployment: four of it on a 1 Gbit switch (50 µs per hop) running
    Llama 2-7B in fp16 on a 128-token prompt (a starting point the controls then move)."""
    device = load_device(device_id)
    link = Link.from_mbps(1000.0, 0.05, name="1000 Mbps")
    cluster = Cluster((device,) * DEVICE_PRESET_COUNT, Topology("switch", DEVICE_PRESET_COUNT, link))
    return UserConfig(f"{DEVICE_PRESET_COUNT}x {device.name}", get_model(DEVICE_PRESET_MODEL), cluster,
                      Workload(phase="decode", weight_format="fp16"), activation_format="fp16")


# ---- the controls: views of a UserConfig's fields ----------------------------------------------------
def format_choice(bits: float | None, name: str) -> str:
    """What a format control shows: the file's format name, else '<bits> bit' (None: the activations')."""
    if bits is None:
        return KV_AS_ACTIVATIONS
    return name or f"{bits:g} bit"


def format_bits(control: str, choice: str, model=None) -> tuple[float | None, str]:
    """A format control's choice -> (bits, format name): 'q4_0' -> (4.5, 'q4_0'), '6 bit' -> (6.0, ''); a weight
    format may name a llama.cpp file type ('Q4_K_M' -> `model`'s file's average bits, `formats.recipe_bits`)."""
    if choice == KV_AS_ACTIVATIONS and control == "kv_format":
        return None, ""
    if choice in WEIGHT_FORMATS:
        return WEIGHT_FORMATS[choice], choice
    if control == "weight_format" and choice in RECIPE_DEFAULTS and model is not None:
        return recipe_bits(model, choice), choice
    number = choice.removesuffix(" bit")
    try:
        bits = float(number)
    except ValueError:
        raise WorkbenchError(f"{control} must be one of {', '.join(WEIGHT_FORMATS)} or '<bits> bit', "
                             f"got {choice!r}") from None
    return MODEL_FIELDS["weight_bits"].check(control, bits), ""


def control_values(config: UserConfig) -> dict[str, object]:
    """The value each explorer control shows for a deployment (model, cluster, link, workload, formats)."""
    link = config.cluster.topology.link
    return {"model": config.model.name, "n_devices": config.cluster.n,
            "bandwidth_mbps": bytes_per_s_to_mbps(link.bandwidth_bytes_per_s), "latency_ms": link.latency_s * 1e3,
            "memory_gib": config.cluster.devices[0].memory_bytes / GIB, "seq_len": config.seq_len,
            "kv_len": config.kv_len, "weight_format": format_choice(config.weight_bits, config.weight_format),
            "activation_format": format_choice(config.activation_bits, config.activation_format),
            "kv_format": format_choice(config.kv_bits, config.kv_format), **moe_values(config),
            **speculation_values(config)}


# ---- mixture-of-experts controls: one per routing / expert-cache key a deployment TOML accepts -------------
# key -> (widget kind, its range or the `workbench.routing` tuple of its choices). A key gets a control where the
# routing dataclasses declare it, the parser accepts it ([workload]) and a Workload field carries it to the
# schemes (`MOE_OWNERS`), so a key that would change nothing has no control.
MOE_WIDGETS = {"routing": ("choice", ROUTING_KINDS), "routing_skew": ("float", (0.0, 3.0, 0.1)),
               "routing_locality": ("float", (0.0, 0.95, 0.05)), "cache_experts": ("int", (0, 256)),
               "cache_policy": ("choice", CACHE_POLICIES)}
MOE_LABELS = {"routing": "expert routing", "routing_skew": "routing skew (Zipf)",
              "routing_locality": "routing locality", "cache_experts": "expert cache / layer",
              "cache_policy": "expert cache policy"}
MOE_OWNERS = {Routing: "routing", ExpertCache: "expert_cache"}  # workbench.routing class -> Workload field


def moe_fields() -> dict[str, tuple[type, str, str]]:
    """Key -> (its `workbench.routing` dataclass, the Workload field holding it, the dataclass field) for every
    MoE key the explorer has a control for."""
    return {tk.key: (cls, owner, f.name) for cls, owner in MOE_OWNERS.items() for f, spec in declared_fields(cls)
            for tk in spec.toml if tk.key in MOE_WIDGETS and tk.key in WORKLOAD_KEYS}


MOE_CONTROLS = tuple(moe_fields())
CONTROLS = ("model", "n_devices", "bandwidth_mbps", "latency_ms", "memory_gib", "seq_len", "kv_len",
            "weight_format", "activation_format", "kv_format") + MOE_CONTROLS + SPECULATION_CONTROLS


def moe_values(config: UserConfig) -> dict[str, object]:
    """What each MoE control shows: the deployment's routing / expert-cache fields (a per-layer skew: its first)."""
    values = {}
    for key, (cls, owner, name) in moe_fields().items():
        value = getattr(getattr(config, owner) or cls(), name)
        values[key] = float(value[0]) if isinstance(value, tuple) else value
    return values


def configure_moe(config: UserConfig, changes: dict) -> UserConfig:
    """`config` with moved MoE controls applied to its routing / expert cache (each checked: one line)."""
    for key, value in changes.items():
        if key not in moe_fields():
            continue
        cls, owner, name = moe_fields()[key]
        config = config.with_workload(**{owner: replace(getattr(config, owner) or cls(), **{name: value})})
    cache = config.expert_cache
    if cache is not None and config.model.is_moe:
        check_cache(cache.experts, config.model.n_experts)
    return config


# ---- speculative decoding controls: the [speculative] table's draft, placement, gamma and alpha -------------
def draft_options(model, shown: str) -> list[tuple[str, str]]:
    """The draft dropdown: none, n-gram prompt lookup, the registered decoders smaller than the target `model` with
    its vocabulary (`speculative.allowed_drafts`; the draft shown kept, marked, where it is not one of them)."""
    drafts = [name for name in allowed_drafts(model) if name != NGRAM]
    options = [("none (plain decode)", NO_DRAFT), ("ngram (prompt lookup, no model)", NGRAM)] + \
        [(f"{name} ({get_model(name).total_params() / 1e9:.3g}B)", name) for name in drafts]
    if shown not in {value for _, value in options}:
        options.append((f"{shown} (not a draft for {model.name}: larger, or another vocabulary)", shown))
    return options


def shown_alpha(spec: Speculation) -> float:
    """What the alpha control shows: the file's alpha, or for accepted_lengths the i.i.d. alpha with the same
    expected tokens per step at its gamma (`speculative.alpha_from_tokens`; the slider's end where none does)."""
    if spec.alpha is not None:
        return float(spec.alpha)
    from workbench.speculative import alpha_from_tokens

    try:
        return alpha_from_tokens(expected_tokens(spec.gamma, None, spec.accepted_lengths), spec.gamma)
    except WorkbenchError:
        return ALPHA_SLIDER[1]


def speculation_values(config: UserConfig) -> dict[str, object]:
    """What the draft, placement, gamma and alpha controls show (their starting points without [speculative])."""
    spec = config.speculation
    if spec is None:
        return {"draft": NO_DRAFT, "placement": Speculation.placement, "gamma": Speculation.gamma,
                "alpha": START_ALPHA}
    return {"draft": spec.draft, "placement": spec.placement, "gamma": spec.gamma, "alpha": shown_alpha(spec)}


def configure_speculation(config: UserConfig, changes: dict) -> UserConfig:
    """`config` with moved draft / placement / gamma / alpha controls applied to its speculation (plain decode
    for draft "none"); placement "own" without a device of the file's runs the draft on a spare device like the
    first one, over the deployment's link. The draft is checked against the target (one line)."""
    moved = {key: changes[key] for key in SPECULATION_CONTROLS if key in changes}
    values = {**speculation_values(config), **moved}
    spec = config.speculation
    if moved and values["draft"] == NO_DRAFT:
        return replace(config, speculation=None)
    if moved:
        from workbench.userconfig import SPECULATIVE_FIELDS

        gamma = SPECULATIVE_FIELDS["gamma"].check("gamma", values["gamma"])
        base = spec or Speculation(values["draft"], alpha=START_ALPHA)
        acceptance = {"alpha": values["alpha"], "accepted_lengths": None} if "alpha" in moved or spec is None else {}
        spec = replace(base, draft=values["draft"], placement=values["placement"], gamma=gamma, **acceptance) \
            if values["placement"] != "own" or base.device is not None else \
            replace(base, draft=values["draft"], placement="own", gamma=gamma, device=config.cluster.devices[0],
                    link=config.cluster.topology.link, **acceptance)
    if spec is None:
        return config
    if spec.placement == "own" and spec.link != config.cluster.topology.link:  # the draft's link follows [network]
        spec = replace(spec, link=config.cluster.topology.link)
    check_draft(spec, config.model, config.cluster, config.workload("decode"))
    return replace(config, speculation=spec)


def configure(base: UserConfig, **changes) -> UserConfig:
    """`base` with some controls moved (`CONTROLS` names -> values); every field no control shows (per-message
    overhead, a shared machine, group size, device constants) is kept, so untouched controls give `base`."""
    for name in changes:
        require_choice("explorer control", name, CONTROLS)
    config = base
    if "model" in changes and changes["model"] != base.model.name:
        config = replace(config, model=get_model(changes["model"]))
        if config.weight_format in RECIPE_DEFAULTS and "weight_format" not in changes:  # a file type's bits follow the model
            config = config.with_workload(weight_bits=recipe_bits(config.model, config.weight_format))
    for kind in ("weight", "activation", "kv"):
        if f"{kind}_format" in changes:
            bits, name = format_bits(f"{kind}_format", changes[f"{kind}_format"], config.model)
            config = config.with_workload(**{f"{kind}_bits": bits})
            config = config.with_workload(weight_format=name) if kind == "weight" else \
                replace(config, **{f"{kind}_format": name})
    if "seq_len" in changes:
        config = config.with_workload(seq_len=require_int("sequence length", changes["seq_len"], low=1))
    if "kv_len" in changes:
        config = config.with_workload(kv_len=require_int("tokens attended (kv_len)", changes["kv_len"], low=1))
    cluster = config.cluster
    if "n_devices" in changes:
        cluster = with_device_count(cluster, changes["n_devices"], most=MAX_DEVICE_COUNT)
    cluster = with_link(cluster, changes.get("bandwidth_mbps"), changes.get("latency_ms"))
    if "memory_gib" in changes:
        cluster = with_memory_budget(cluster, changes["memory_gib"])
    config = configure_moe(replace(config, cluster=cluster), changes)
    return configure_speculation(config, changes) if changes else config


@dataclass(frozen=True)
class State:
    """What the explorer shows: a deployment (a parsed TOML, controls applied) and the view choices."""

    config: UserConfig
    preset: str = "sbc_gigabit"
    scheme: str = ALL
    phase: str = "prefill"

    def __post_init__(self) -> None:
        if not isinstance(self.config, UserConfig):
            raise WorkbenchError(f"explorer state needs a UserConfig, got {type(self.config).__name__}")
        require_choice("phase", self.phase, PHASES)


def state_for_preset(preset: str = "sbc_gigabit", scheme: str = ALL, phase: str = "prefill", **changes) -> State:
    """The state of a preset (example, TOML path or device id) as loaded, with `changes` (`configure`) applied."""
    return State(configure(load_preset(preset), **changes), preset, scheme, phase)


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


def speculation_html(view: View) -> str:
    """The speculation table (HTML): per scheme, time per token without and with the draft, the speed-up, the
    best gamma and its time per token; '' without a draft."""
    frame, spec = view.speculation, view.state.config.speculation
    if frame is None or spec is None:
        return ""
    accept = f"alpha {spec.alpha:g}" if spec.alpha is not None else "accepted lengths from the file"
    head = (f"<b>speculative decoding</b>: draft {html.escape(spec.draft)} ({spec.placement}), gamma {spec.gamma}, "
            f"{accept}, {expected_tokens(spec.gamma, spec.alpha, spec.accepted_lengths):.2f} tokens per verify step")
    if frame.empty:
        return f"{head}<br>no scheme's decode runs within memory"
    cells = ["scheme", "time/token", f"with draft (gamma {spec.gamma})", "speed-up", "best gamma", "at best gamma",
             "costliest part"]
    rows = []
    for r in frame.sort_values(["best_gamma_s", "plain_s", "scheme"], na_position="last").itertuples():
        if r.notes:
            values = [r.scheme, format_seconds(r.plain_s), "n/a", "", "", "", r.notes]
        else:
            values = [r.scheme, format_seconds(r.plain_s), format_seconds(r.speculative_s), f"{r.speedup:.2f}x",
                      str(r.best_gamma), format_seconds(r.best_gamma_s), r.costliest]
        rows.append(values)
    return f"{head}{html_table(cells, rows)}"


CELL_STYLE = "padding:0 8px;text-align:left;vertical-align:top;line-height:1.4"


SPECULATION_KINDS = {"plain_s": "plain decode", "speculative_s": "with the draft", "best_gamma_s": "at the best gamma"}


def speculation_spec(view: View, width: int = 300) -> dict | None:
    """Vega-Lite spec of the speculation chart: per scheme that can verify several tokens, time per token of
    plain decode, with the draft at its gamma and at the best gamma (dots on a log axis, a rule from plain to
    the best), best first; None without a draft. Its rows are `view.speculation`'s."""
    from workbench.arena_charts import field as channel
    from workbench.arena_charts import seconds_expr, time_axis, top_level

    spec, frame = view.state.config.speculation, view.speculation
    if spec is None or frame is None:
        return None
    rows = frame.dropna(subset=["speculative_s"]).drop(columns=["notes", "costliest"])
    y = {"y": channel("scheme", sort={"field": "best_gamma_s", "op": "min"}, title=None)}
    kinds = list(SPECULATION_KINDS.values())
    points = {"mark": {"type": "point", "filled": True, "size": 70}, "encoding": {
        **y, "x": channel("seconds", "quantitative", scale={"type": "log"},
                          axis=time_axis("time per token (log axis)", "log")),
        "color": channel("kind", scale={"domain": kinds, "range": ["#9d9d9d", "#4c78a8", "#f58518"]}, title=None),
        "shape": channel("kind", scale={"domain": kinds, "range": ["circle", "square", "diamond"]}, title=None),
        "tooltip": [channel("scheme"), channel("kind", title="decode"), channel("time", title="time per token"),
                    channel("best_gamma", "quantitative", title="best gamma")]},
        "transform": [{"fold": list(SPECULATION_KINDS), "as": ["column", "seconds"]},
                      {"calculate": " : ".join(f"datum.column === '{k}' ? '{v}'" for k, v in SPECULATION_KINDS.items())
                       + " : ''", "as": "kind"},
                      {"calculate": seconds_expr("datum.seconds"), "as": "time"}]}
    rule = {"mark": {"type": "rule", "color": "#bbbbbb"},
            "encoding": {**y, "x": channel("plain_s", "quantitative"), "x2": {"field": "best_gamma_s"}}}
    accept = f"alpha {spec.alpha:g}" if spec.alpha is not None else "accepted lengths from the file"
    title = {"text": setting_title(view.arena)["text"],
             "subtitle": f"decode with draft {spec.draft} ({spec.placement}), gamma {spec.gamma}, {accept}"}
    inner = {"layer": [rule, points], "width": width,
             "title": "Speculative decoding: time per token, plain / with the draft / at the best gamma"}
    return top_level({"vconcat": [inner], "title": title}, rows)


def html_table(header: list[str], rows: list[list[str]]) -> str:
    """A small HTML table (cells escaped; every column but the last kept on one line, the last wraps)."""
    def line(cells, tag):
        return "<tr>" + "".join(
            f"<{tag} style='{CELL_STYLE}{'' if i == len(cells) - 1 else ';white-space:nowrap'}'>"
            f"{html.escape(str(c))}</{tag}>" for i, c in enumerate(cells)) + "</tr>"
    return ("<table style='font-size:12px;border-collapse:collapse'>" + line(header, "th")
            + "".join(line(r, "td") for r in rows) + "</table>")


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
    from workbench.scaling import device_sweep, stop_helping_all, stop_helping_frame

    answers = stop_helping_all(device_sweep(config, list(board_counts(config.cluster.n)), phases=(phase,)))
    return stop_helping_frame(answers).assign(applies=[a.applies for a in answers])


def boards_html(frame: pd.DataFrame, config: UserConfig, phase: str) -> str:
    """The "will more boards help?" table (HTML): the fastest count, the next count and what grows there, per
    scheme that applies; the schemes that apply at no count tried, in one line."""
    counts = ", ".join(str(n) for n in board_counts(config.cluster.n))
    head = (f"<b>will more boards help?</b> ({METRIC[phase]}; {counts} copies of "
            f"{html.escape(config.cluster.devices[0].name)})")
    shown = frame[frame["applies"]].sort_values(["best_latency_s", "scheme"], na_position="last")
    rows = [[r.scheme, "none fits" if pd.isna(r.best_devices) else f"{int(r.best_devices)}",
             format_seconds(r.best_latency_s), "" if pd.isna(r.next_devices) else f"{int(r.next_devices)}",
             r.cannot_split_at, r.cause or ("still falling at the largest count that runs"
                                            if not pd.isna(r.best_devices) else "")]
            for r in shown.itertuples()]
    table = html_table(["scheme", "fastest at", METRIC[phase], "next count", "cannot split at", "what grows there"],
                       rows)
    others = frame.loc[~frame["applies"], "scheme"].tolist()
    tail = f"<br>n/a at every count tried ({len(others)}): {html.escape(', '.join(others))}" if others else ""
    return f"{head}{table}{tail}"


def readouts(config: UserConfig) -> dict[str, str]:
    """The log sliders' values in human units: '1 Gbps', '50 µs', '1.0 MiB'."""
    values = control_values(config)
    return {"bandwidth_mbps": format_rate(values["bandwidth_mbps"]),
            "latency_ms": format_seconds(values["latency_ms"] * 1e-3),
            "memory_gib": format_gib(values["memory_gib"])}


def budget_text(config: UserConfig) -> str:
    """'7.0 GiB/device budget', or '8.0-16 GiB/device budget' where the devices' memories differ."""
    sizes = sorted({d.memory_bytes / GIB for d in config.cluster.devices})
    span = format_gib(sizes[0]) if len(sizes) == 1 else f"{format_gib(sizes[0])}-{format_gib(sizes[-1])}"
    return f"{span}/device budget"


def notes_html(notes: tuple[str, ...]) -> str:
    """Every n/a reason, one line each (HTML)."""
    if not notes:
        return ""
    lines = "".join(f"<br>• {html.escape(n)}" for n in notes)
    return f"{len(notes)} scheme(s) n/a here:{lines}"


def chart_specs(view: View, scale: str = "log") -> dict[str, dict]:
    """Vega-Lite specs (dicts) of the three explorer charts for `view`, what the widgets receive on an
    update: latency breakdown (`scale`: log or linear axis), ranking, memory vs budget; every title names
    the setting (model, cluster, link, prompt, phase, memory budget)."""
    require_choice("breakdown scale", scale, SCALES)
    title = setting_title(view.arena, f" · {budget_text(view.state.config)}")
    return {"breakdown": breakdown_spec(view.arena, width=300, title=title, composition=False, scale=scale),
            "ranking": ranking_spec(view.arena, width=300, title=title),
            "memory": memory_spec(view.arena, phase=view.state.phase, width=300, title=title)}


def static_charts(view: View, scale: str = "log") -> dict[str, object]:
    """The explorer's charts for `view` as altair charts (`chart_specs`, plus the speculation chart when a draft is
    set), for `Recorder.chart` to save and show as PNGs: what a batch run or an offline page shows, where no
    widget is drawn."""
    import altair as alt

    specs = {**chart_specs(view, scale), "speculation": speculation_spec(view)}
    kinds = {"vconcat": alt.VConcatChart, "hconcat": alt.HConcatChart, "layer": alt.LayerChart,
             "facet": alt.FacetChart, "concat": alt.ConcatChart}
    return {name: next((kind for key, kind in kinds.items() if key in spec), alt.Chart).from_dict(spec, validate=False)
            for name, spec in specs.items() if spec is not None}


def chart_frames(view: View) -> dict[str, pd.DataFrame]:
    """The data behind each explorer chart."""
    return {"breakdown": breakdown_frame(view.arena), "ranking": ranking_frame(view.arena),
            "memory": memory_frame(view.arena, view.state.phase)}


def toml_label(path: str) -> str:
    """The preset dropdown's entry for a TOML file of one's own."""
    return f"TOML file: {Path(path).name}"


def model_options(config: UserConfig) -> list[tuple[str, str]]:
    """The model dropdown: the deployment's own model first when it is not a registered one (given by its
    dimensions, or a registered one changed), then the registry."""
    own = [] if config.model.name in MODELS else [(f"{config.model.name} (from the file)", config.model.name)]
    return own + [(name, name) for name in MODELS]


def format_options(control: str, shown: str) -> list[tuple[str, str]]:
    """A format dropdown: the named formats with their bits, the file's own '<bits> bit' where it gave bits."""
    named = [(f"{name} ({bits:g} bit)", name) for name, bits in WEIGHT_FORMATS.items()]
    files = [(f"{name} (llama.cpp file type)", name) for name in RECIPE_DEFAULTS] if control == "weight_format" else []
    same = [("as the activations", KV_AS_ACTIVATIONS)] if control == "kv_format" else []
    listed = {value for _, value in named + files}
    own = [] if shown in listed or shown == KV_AS_ACTIVATIONS else [(f"{shown} (from the file)", shown)]
    return same + own + named + files


def view_result_rows(view: View) -> pd.DataFrame:
    """Tidy result rows (workbench.results columns) of a view: each scheme's latency and peak memory."""
    s, v = view.state, control_values(view.state.config)
    setting = (f"preset={s.preset},n={v['n_devices']},bw={v['bandwidth_mbps']:g}Mbps,tau={v['latency_ms']:g}ms,"
               f"mem={v['memory_gib']:g}GiB,S={v['seq_len']},kv={v['kv_len']},w={v['weight_format']},"
               f"a={v['activation_format']},kv_format={v['kv_format']},"
               + "".join(f"{key}={v[key]}," for key in MOE_CONTROLS)
               + ("".join(f"{key}={v[key]}," for key in SPECULATION_CONTROLS) if s.config.speculation else "")
               + s.phase)
    return table_result_rows(view.table(), "explorer", s.config.model.name, setting, phase_in_name=False)


class Explorer:
    """The widget: controls on the left, charts on the right; every change recomputes and redraws.

    The deployment in force is `self.base` (the preset or TOML file as loaded) and `self.state.preset` its
    name: the controls show its fields, and the state is `base` with the moved controls applied (`configure`),
    so controls left alone give exactly what whatif computes. A bad TOML path shows its one-line error and
    leaves the preset in force, so the other controls keep working. Views are cached by the moved controls
    (moving a slider back costs nothing)."""

    CACHE_SIZE = 64
    VIEW_CONTROLS = ("scheme", "phase")

    def __init__(self, state: State | None = None, registry: Registry | None = None):
        import ipywidgets as w

        from workbench.livechart import LiveChart  # redraws in place (vega from vl-convert's bundle: no CDN)

        self.registry = load_all() if registry is None else registry
        self.state = state or state_for_preset()
        self.base = load_preset(self.state.preset)
        self._cache: OrderedDict[tuple, View] = OrderedDict()
        self._preset_error = ""
        self._suspend = False
        names = preset_names()
        self._last_listed = self.state.preset if self.state.preset in names else names[0]
        self.controls = make_controls(self.registry, w)
        for name, control in self.controls.items():
            control.add_class(f"wb-{name.replace('_', '-')}")
        self.readouts = {name: w.Label(value="").add_class(f"wb-{name.replace('_', '-')}-readout")
                         for name in ("bandwidth_mbps", "latency_ms", "memory_gib")}
        self.message = w.HTML(value="").add_class("wb-message")
        self.summary = w.HTML(value="").add_class("wb-summary")
        self.notes = w.HTML(value="").add_class("wb-notes")
        self.speculation = w.HTML(value="").add_class("wb-speculation")
        self.boards_button = w.ToggleButton(value=False, description="will more boards help?",
                                            tooltip=f"sweep {BOARD_COUNTS} device counts on every change (~0.5 s)",
                                            layout=w.Layout(width="220px")).add_class("wb-boards-button")
        self.boards = w.HTML(value="").add_class("wb-boards")
        self._boards_cache: OrderedDict[tuple, pd.DataFrame] = OrderedDict()
        self._best_cache: OrderedDict[tuple, dict] = OrderedDict()
        self._show_base(self.state.preset)
        self._set_controls(control_values(self.base))
        for name, value in control_values(self.state.config).items():  # a state given with moved controls
            self._set_quietly(name, value)
        self._set_quietly("scheme", self.state.scheme)
        self._set_quietly("phase", self.state.phase)
        self.view = self._compute(self.current_state())
        embed = {"renderer": "svg", "actions": False}
        self.charts = {name: LiveChart(spec, embed_options=embed)
                       for name, spec in chart_specs(self.view, self.controls["scale"].value).items()}
        for name, chart in self.charts.items():
            chart.add_class(f"wb-chart-{name}")
        self.speculation_chart = LiveChart(speculation_spec(self.view), embed_options=embed)
        self.speculation_chart.add_class("wb-chart-speculation")
        self._show(self.view)
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        self.boards_button.observe(lambda _: self._show_boards(self.view), names="value")
        self.widget = self._layout(w)

    def _layout(self, w):
        """Controls (with the log sliders' readouts), the best line, n/a notes and message; the charts."""
        rows = [w.HBox([c, self.readouts[n]]) if n in self.readouts else c for n, c in self.controls.items()]
        left = w.VBox(rows + [self.summary, self.notes, self.message], layout=w.Layout(width="450px", flex="0 0 450px"))
        right = w.VBox([self.charts["breakdown"], self.charts["ranking"], self.charts["memory"],
                        self.speculation_chart, self.speculation, self.boards_button, self.boards])
        return w.HBox([left, right])

    def _preset_options(self, preset: str) -> list[tuple[str, str]]:
        """Dropdown entries: a TOML file of one's own in force first, then the examples and devices."""
        own = [] if preset in preset_names() else [(toml_label(preset), preset)]
        return own + [(name, name) for name in preset_names()]

    def _show_base(self, preset: str) -> None:
        """Point the preset, TOML, model and format dropdowns at the deployment in force (quietly)."""
        self._suspend = True
        try:
            c, shown = self.controls, control_values(self.base)
            c["preset"].options = self._preset_options(preset)
            c["preset"].value = preset
            c["toml"].value = "" if preset in preset_names() else preset
            c["model"].options = model_options(self.base)
            for name in ("weight_format", "activation_format", "kv_format"):
                c[name].options = format_options(name, shown[name])
            c["draft"].options = draft_options(self.base.model, shown["draft"])
            for name, limit in (("n_devices", MAX_DEVICES), ("seq_len", MAX_TOKENS), ("kv_len", MAX_TOKENS),
                                ("gamma", MAX_GAMMA)):
                c[name].max = max(limit, shown[name])
        finally:
            self._suspend = False

    def _set_controls(self, values: dict) -> None:
        """Move the deployment's controls to the preset's `values` without triggering an update, and remember
        what they show (a slider may clamp): a control differing from that is a moved one."""
        for name, value in values.items():
            self._set_quietly(name, value)
        self._shown_base = {name: self.controls[name].value for name in CONTROLS}

    def _compute(self, state: State) -> View:
        """`compute`, cached by the moved controls and view choices (least recently used dropped)."""
        key = (state.preset, tuple(sorted(self.changes().items())), state.scheme, state.phase)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        view = compute(state, self.registry, self._best_gammas(state))
        self._cache[key] = view
        if len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)
        return view

    def _show(self, view: View) -> None:
        for key in MOE_CONTROLS:  # a dense model takes no routing: its MoE controls are greyed out
            self.controls[key].disabled = not view.state.config.model.is_moe
        self.summary.value = f"<b>{html.escape(view.summary)}</b>"
        self.notes.value = notes_html(view.notes)
        self.speculation.value = speculation_html(view)
        self.speculation_chart.spec = speculation_spec(view)
        for key in ("placement", "gamma", "alpha"):  # plain decode: the draft's settings change nothing
            self.controls[key].disabled = view.state.config.speculation is None
        self._show_boards(view)
        for name, text in readouts(view.state.config).items():
            self.readouts[name].value = text

    def _best_gammas(self, state: State) -> dict | None:
        """The memo of best gammas of `state`'s deployment up to its gamma (None without a draft)."""
        if state.config.speculation is None:
            return None
        key = (state.preset, tuple(sorted((k, v) for k, v in self.changes().items() if k != "gamma")))
        if key not in self._best_cache:
            self._best_cache[key] = {}
            if len(self._best_cache) > self.CACHE_SIZE:
                self._best_cache.popitem(last=False)
        self._best_cache.move_to_end(key)
        return self._best_cache[key]

    def _show_boards(self, view: View) -> None:
        """The "will more boards help?" table of `view`'s deployment while its button is down (cached)."""
        if not self.boards_button.value:
            self.boards.value = ""
            return
        key = (view.state.preset, tuple(sorted(self.changes().items())), view.state.phase)
        if key not in self._boards_cache:
            self._boards_cache[key] = boards_frame(view.state.config, view.state.phase)
            if len(self._boards_cache) > self.CACHE_SIZE:
                self._boards_cache.popitem(last=False)
        self._boards_cache.move_to_end(key)
        self.boards.value = boards_html(self._boards_cache[key], view.state.config, view.state.phase)

    def _follow_model(self, name: str) -> None:
        """List the drafts smaller than a newly chosen target model (the draft chosen stays, marked if larger)."""
        draft = self.controls["draft"].value
        self._suspend = True
        try:
            self.controls["draft"].options = draft_options(get_model(name) if name in MODELS else self.base.model,
                                                           draft)
            self.controls["draft"].value = draft
        finally:
            self._suspend = False

    def changes(self) -> dict[str, object]:
        """The deployment's controls a person moved away from what the preset in force shows."""
        return {name: self.controls[name].value for name in CONTROLS
                if self.controls[name].value != self._shown_base[name]}

    def current_state(self) -> State:
        """The state from the controls and the preset in force (raises WorkbenchError when they are invalid)."""
        return State(configure(self.base, **self.changes()), self.state.preset, self.controls["scheme"].value,
                     self.controls["phase"].value)

    def _on_change(self, change) -> None:
        if self._suspend:
            return
        owner = change["owner"]
        if owner is self.controls["scale"]:
            self._redraw(self.view)
            return
        if owner is self.controls["model"]:
            self._follow_model(change["new"])
        if owner is self.controls["toml"]:
            self._load_preset(self.controls["toml"].value.strip() or self._last_listed)
        elif owner is self.controls["preset"]:
            if change["new"] == self.state.preset:
                return
            self._set_quietly("toml", "")
            self._load_preset(change["new"])
        self.update()

    def _set_quietly(self, name: str, value) -> None:
        """Set a control without triggering an update."""
        self._suspend = True
        try:
            self.controls[name].value = value
        finally:
            self._suspend = False

    def _load_preset(self, preset: str) -> None:
        """Move the controls to a newly chosen preset's own values; on a bad one keep the preset in force."""
        try:
            base = load_preset(preset)
        except WorkbenchError as exc:
            self._preset_error = f"⚠ {html.escape(str(exc).splitlines()[0])} (still using {self.state.preset})"
            return
        self._preset_error = ""
        self._cache.clear()  # the file may have changed on disk
        self._boards_cache.clear()
        self._best_cache.clear()
        self.base = base
        self.state = State(base, preset, self.controls["scheme"].value, self.controls["phase"].value)
        if preset in preset_names():
            self._last_listed = preset
        self._show_base(preset)
        self._set_controls(control_values(base))

    def update(self) -> bool:
        """Recompute from the controls and redraw; on invalid input show one line and keep the charts."""
        try:
            state = self.current_state()
            view = self._compute(state)
            self._redraw(view)
        except WorkbenchError as exc:
            self.message.value = f"⚠ {html.escape(str(exc).splitlines()[0])}"
            return False
        self.state, self.view = state, view
        self.message.value = self._preset_error
        self._show(view)
        return True

    def _redraw(self, view: View) -> None:
        """Swap the charts' specs for those of `view` (raises WorkbenchError before touching any chart)."""
        specs = chart_specs(view, self.controls["scale"].value)
        for name, spec in specs.items():
            self.charts[name].spec = spec


def moe_controls(w, style: dict, layout) -> dict:
    """One widget per `MOE_CONTROLS` key (a dropdown of the routing module's choices, or a slider)."""
    out = {}
    for key in MOE_CONTROLS:
        kind, spec = MOE_WIDGETS[key]
        common = dict(description=MOE_LABELS[key], style=style, layout=layout)
        if kind == "choice":
            out[key] = w.Dropdown(options=list(spec), **common)
        elif kind == "float":
            out[key] = w.FloatSlider(value=spec[0], min=spec[0], max=spec[1], step=spec[2], continuous_update=False,
                                     **common)
        else:
            out[key] = w.IntSlider(value=spec[0], min=spec[0], max=spec[1], continuous_update=False, **common)
    return out


def speculation_controls(w, style: dict, layout) -> dict:
    """The draft dropdown (its entries follow the target: `draft_options`), placement, gamma and alpha."""
    low, high, step = ALPHA_SLIDER
    return {"draft": w.Dropdown(options=[NO_DRAFT], description="speculative draft", style=style, layout=layout),
            "placement": w.Dropdown(options=list(PLACEMENTS), description="draft placement", style=style,
                                    layout=layout),
            "gamma": w.IntSlider(value=Speculation.gamma, min=1, max=MAX_GAMMA, description="drafted tokens (gamma)",
                                 style=style, layout=layout, continuous_update=False),
            "alpha": w.FloatSlider(value=START_ALPHA, min=low, max=high, step=step, description="acceptance (alpha)",
                                   style=style, layout=layout, continuous_update=False)}


def make_controls(registry: Registry, w) -> dict:
    """The explorer's controls (ipywidgets module `w`), not yet pointing at a deployment."""
    style, layout, slider = {"description_width": "150px"}, w.Layout(width="420px"), w.Layout(width="330px")

    def dropdown(description, options=("",)):
        return w.Dropdown(options=list(options), description=description, style=style, layout=layout)

    def log_slider(description, value, base, low, high, step):
        return w.FloatLogSlider(value=value, base=base, min=low, max=high, step=step, description=description,
                                style=style, layout=slider, continuous_update=False, readout=False)

    def int_slider(description, high):
        return w.IntSlider(value=1, min=1, max=high, description=description, style=style, layout=layout,
                           continuous_update=False)

    return {
        "preset": dropdown("preset", preset_names()),
        "toml": w.Text(value="", placeholder="or a TOML file of your own (Enter)", description="TOML file",
                       continuous_update=False, style=style, layout=layout),
        "model": dropdown("model", MODELS),
        "scheme": dropdown("scheme", [ALL] + sorted(registry)),
        "n_devices": int_slider("devices", MAX_DEVICES),
        "bandwidth_mbps": log_slider("link bandwidth", 1000.0, 10, 0, 5, 0.1),
        "latency_ms": log_slider("per-hop latency", 0.05, 10, -3, 2, 0.1),
        "memory_gib": log_slider("memory budget", 7.0, 2, -10, 7, 0.25),
        "seq_len": int_slider("sequence length", MAX_TOKENS),
        "kv_len": int_slider("tokens attended", MAX_TOKENS),
        "weight_format": dropdown("weight format", [KV_AS_ACTIVATIONS]),
        "activation_format": dropdown("activation format", [KV_AS_ACTIVATIONS]),
        "kv_format": dropdown("KV-cache format", [KV_AS_ACTIVATIONS]),
        **moe_controls(w, style, layout),
        **speculation_controls(w, style, layout),
        "phase": w.ToggleButtons(options=list(PHASES), value="prefill", description="phase", style=style),
        "scale": w.ToggleButtons(options=list(SCALES), value="log", description="breakdown axis", style=style),
    }
