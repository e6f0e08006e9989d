"""Live what-if explorer: ipywidgets controls driving the arena's charts through `alt.JupyterChart`.

The model call is the pure function `compute(Settings) -> View` (what the benchmark times); the
`Explorer` widget only turns controls into `Settings`, calls `compute`, and swaps the charts' specs.
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
    breakdown_frame,
    memory_frame,
    ranking_frame,
    run_arena,
    table_result_rows,
)
from workbench.arena_charts import (
    SCALES,
    as_altair,
    breakdown_spec,
    format_duration,
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
    require_non_negative,
    require_positive,
)
from workbench.hardware import DeviceSpec, device_names, load_device
from workbench.io import REPO_ROOT
from workbench.models import MODELS, get_model
from workbench.network import Link, Topology
from workbench.regimes import vary_cluster
from workbench.schemes.base import PHASES, Cluster, load_all
from workbench.userconfig import UserConfig, load_config

EXAMPLES_DIR = REPO_ROOT / "examples"
ALL = "all"
MAX_DEVICES = 64


def preset_names() -> list[str]:
    """Example deployments (examples/<stem>.toml) first, then device presets (data/devices/<id>.toml)."""
    return example_names() + device_names()


@lru_cache(maxsize=64)
def _load_config_cached(path: str, mtime: float) -> UserConfig:
    return load_config(path)


def example_names() -> list[str]:
    """Stems of the example deployments in examples/."""
    return sorted(p.stem for p in EXAMPLES_DIR.glob("*.toml"))


def load_preset(preset: str) -> UserConfig | DeviceSpec:
    """An example or any TOML path -> its UserConfig; a device id -> its DeviceSpec."""
    path = Path(preset)
    if path.is_dir():
        raise WorkbenchError(f"config file {preset!r} is a directory; give a .toml file")
    if preset.endswith(".toml"):
        path = path if path.is_absolute() else (REPO_ROOT / path if not path.exists() else path)
    elif (EXAMPLES_DIR / f"{preset}.toml").exists():
        path = EXAMPLES_DIR / f"{preset}.toml"
    elif preset in device_names():
        return load_device(preset)
    else:
        raise WorkbenchError(f"unknown preset {preset!r}; examples: {', '.join(example_names())} "
                             f"(or a device id from data/devices/, or a path to a .toml file)")
    if path.is_dir():
        raise WorkbenchError(f"config file {preset!r} is a directory; give a .toml file")
    if not path.is_file():
        raise WorkbenchError(f"config file {preset!r} does not exist")
    return _load_config_cached(str(path), path.stat().st_mtime)


@dataclass(frozen=True)
class Settings:
    """Everything the explorer's controls set; validated on construction (one-line errors)."""

    preset: str = "sbc_gigabit"
    model: str = "Llama 2-7B"
    scheme: str = ALL
    n_devices: int = 4
    bandwidth_mbps: float = 1000.0
    latency_ms: float = 0.05
    memory_gib: float = 7.0
    seq_len: int = 128
    phase: str = "prefill"
    weight_bits: float = 16.0
    topology: str = "switch"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            get_model(self.model)  # raises listing the registry
        require_int("device count", self.n_devices, low=1, high=MAX_DEVICES)
        require_positive("link bandwidth (Mbps)", self.bandwidth_mbps)
        require_non_negative("per-hop latency (ms)", self.latency_ms)
        require_positive("memory budget per device (GiB)", self.memory_gib)
        require_int("sequence length", self.seq_len, low=1)
        require_choice("phase", self.phase, PHASES)
        require_positive("weight bits", self.weight_bits)


def settings_for_preset(preset: str, **changes) -> Settings:
    """Settings that start from a preset's own model, devices, network and prompt length."""
    base = load_preset(preset)
    if isinstance(base, UserConfig):
        link = base.cluster.topology.link
        values = dict(model=base.model.name if base.model.name in MODELS else Settings.model,
                      n_devices=base.cluster.n, bandwidth_mbps=link.bandwidth_bytes_per_s * 8 / 1e6,
                      latency_ms=link.latency_s * 1e3, memory_gib=base.cluster.devices[0].memory_bytes / GIB,
                      seq_len=base.seq_len, weight_bits=base.weight_bits, topology=base.cluster.topology.kind)
    else:
        values = dict(memory_gib=base.memory_bytes / GIB if base.memory else Settings.memory_gib)
    return Settings(preset=preset, **{**values, **changes})


def build_cluster(settings: Settings) -> Cluster:
    """The preset's devices (cycled to the device count, memory capped at the budget) on the slider link."""
    base = load_preset(settings.preset)
    link = Link.from_mbps(settings.bandwidth_mbps, settings.latency_ms, name="explorer link")
    if isinstance(base, UserConfig):
        cluster = base.cluster
    else:
        cluster = Cluster((base,), Topology(settings.topology, 1, link))
    return vary_cluster(cluster, settings.n_devices, settings.bandwidth_mbps, settings.latency_ms,
                        settings.memory_gib)


@dataclass(frozen=True)
class View:
    """What the explorer shows for one setting: the arena of one phase and a one-line summary."""

    settings: Settings
    arena: Arena
    summary: str
    notes: tuple[str, ...] = field(default=())

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


def compute(settings: Settings, registry: Registry | None = None) -> View:
    """Evaluate the arena for `settings` (one phase); raise WorkbenchError when nothing can be shown."""
    registry = load_all() if registry is None else registry
    model = get_model(settings.model)
    if settings.seq_len > model.max_positions:
        raise WorkbenchError(f"sequence length {settings.seq_len} exceeds {model.name}'s max_positions "
                             f"({model.max_positions})")
    schemes = None if settings.scheme == ALL else [require_choice("scheme", settings.scheme, sorted(registry))]
    arena = memoised(run_arena(model, build_cluster(settings), settings.seq_len, settings.seq_len,
                               settings.weight_bits, phases=(settings.phase,), schemes=schemes, registry=registry))
    if schemes is not None and arena.entries and arena.entries[0].status == "n/a":
        raise WorkbenchError(f"{settings.scheme} does not apply here: {arena.entries[0].error}")
    arena.check_feasible()
    table = arena.table()
    ok = table[table["status"] == "ok"].sort_values(["latency_s", "scheme"])
    best = ok.iloc[0]
    counts = table["status"].value_counts()
    summary = (f"best {METRIC[settings.phase]}: {best.scheme} ({best.paper}) {format_seconds(best.latency_s)}"
               f" | {int(counts.get('ok', 0))} fit, {int(counts.get('OOM', 0))} OOM, {int(counts.get('n/a', 0))} n/a")
    notes = tuple(f"{e.scheme}: {e.error}" for e in arena.entries if e.status == "n/a")
    return View(settings, arena, summary, notes)


def format_seconds(seconds: float) -> str:
    """'50 µs', '12.3 ms' or '1.23 s' ('n/a' when not finite)."""
    return format_duration(seconds)


def readouts(settings: Settings) -> dict[str, str]:
    """The log sliders' values in human units: '1 Gbps', '50 µs', '1.0 MiB'."""
    return {"bandwidth_mbps": format_rate(settings.bandwidth_mbps),
            "latency_ms": format_duration(settings.latency_ms * 1e-3),
            "memory_gib": format_gib(settings.memory_gib)}


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
    title = setting_title(view.arena, f" · {format_gib(view.settings.memory_gib)}/device budget")
    return {"breakdown": breakdown_spec(view.arena, width=300, title=title, composition=False, scale=scale),
            "ranking": ranking_spec(view.arena, width=300, title=title),
            "memory": memory_spec(view.arena, phase=view.settings.phase, width=300, title=title)}


def chart_frames(view: View) -> dict[str, pd.DataFrame]:
    """The data behind each explorer chart."""
    return {"breakdown": breakdown_frame(view.arena), "ranking": ranking_frame(view.arena),
            "memory": memory_frame(view.arena, view.settings.phase)}


def toml_label(path: str) -> str:
    """The preset dropdown's entry for a TOML file of one's own."""
    return f"TOML file: {Path(path).name}"


class Explorer:
    """The widget: controls on the left, charts on the right; every change recomputes and redraws.

    The preset in force is `self.settings.preset`: a bad TOML path shows its one-line error and leaves
    it unchanged, so the other controls keep working. Views are cached by settings (moving a slider back
    costs nothing)."""

    CACHE_SIZE = 64

    def __init__(self, settings: Settings | None = None, registry: Registry | None = None):
        import altair as alt
        import ipywidgets as w

        alt.JupyterChart.enable_offline()  # vega from vl-convert's bundle: no CDN needed
        self.registry = load_all() if registry is None else registry
        self.settings = settings or settings_for_preset(Settings.preset)
        self._cache: OrderedDict[Settings, View] = OrderedDict()
        self._preset_error = ""
        s = self.settings
        style = {"description_width": "150px"}
        layout = w.Layout(width="420px")
        slider = w.Layout(width="330px")
        names = preset_names()
        self._last_listed = s.preset if s.preset in names else names[0]
        self.controls = {
            "preset": w.Dropdown(options=self._preset_options(s.preset), value=s.preset, description="device preset",
                                 style=style, layout=layout),
            "toml": w.Text(value="" if s.preset in names else s.preset,
                           placeholder="or a TOML file of your own (Enter)",
                           description="TOML file", continuous_update=False, style=style, layout=layout),
            "model": w.Dropdown(options=list(MODELS), value=s.model, description="model", style=style, layout=layout),
            "scheme": w.Dropdown(options=[ALL] + sorted(self.registry), value=s.scheme, description="scheme",
                                 style=style, layout=layout),
            "n_devices": w.IntSlider(value=s.n_devices, min=1, max=MAX_DEVICES, description="devices", style=style,
                                     layout=layout, continuous_update=False),
            "bandwidth_mbps": w.FloatLogSlider(value=s.bandwidth_mbps, base=10, min=0, max=5, step=0.1,
                                               description="link bandwidth", style=style, layout=slider,
                                               continuous_update=False, readout=False),
            "latency_ms": w.FloatLogSlider(value=max(s.latency_ms, 1e-3), base=10, min=-3, max=2, step=0.1,
                                           description="per-hop latency", style=style, layout=slider,
                                           continuous_update=False, readout=False),
            "memory_gib": w.FloatLogSlider(value=s.memory_gib, base=2, min=-10, max=7, step=0.25,
                                           description="memory budget", style=style, layout=slider,
                                           continuous_update=False, readout=False),
            "seq_len": w.IntSlider(value=s.seq_len, min=1, max=4096, description="sequence length", style=style,
                                   layout=layout, continuous_update=False),
            "phase": w.ToggleButtons(options=list(PHASES), value=s.phase, description="phase", style=style),
            "scale": w.ToggleButtons(options=list(SCALES), value="log", description="breakdown axis", style=style),
        }
        for name, control in self.controls.items():
            control.add_class(f"wb-{name.replace('_', '-')}")
        self.readouts = {name: w.Label(value="").add_class(f"wb-{name.replace('_', '-')}-readout")
                         for name in ("bandwidth_mbps", "latency_ms", "memory_gib")}
        self.message = w.HTML(value="").add_class("wb-message")
        self.summary = w.HTML(value="").add_class("wb-summary")
        self.notes = w.HTML(value="").add_class("wb-notes")
        self.view = self._compute(s)
        embed = {"renderer": "svg", "actions": False}
        self.charts = {name: alt.JupyterChart(as_altair(spec), embed_options=embed)
                       for name, spec in chart_specs(self.view, self.controls["scale"].value).items()}
        for name, chart in self.charts.items():
            chart.add_class(f"wb-chart-{name}")
        self._show(self.view)
        self._suspend = False
        for control in self.controls.values():
            control.observe(self._on_change, names="value")
        rows = [w.HBox([c, self.readouts[n]]) if n in self.readouts else c for n, c in self.controls.items()]
        left = w.VBox(rows + [self.summary, self.notes, self.message], layout=w.Layout(width="450px", flex="0 0 450px"))
        right = w.VBox([self.charts["breakdown"], self.charts["ranking"], self.charts["memory"]])
        self.widget = w.HBox([left, right])

    def _preset_options(self, preset: str) -> list[tuple[str, str]]:
        """Dropdown entries: a TOML file of one's own in force first, then the examples and devices."""
        own = [] if preset in preset_names() else [(toml_label(preset), preset)]
        return own + [(name, name) for name in preset_names()]

    def _compute(self, settings: Settings) -> View:
        """`compute`, cached by settings (least recently used dropped)."""
        if settings in self._cache:
            self._cache.move_to_end(settings)
            return self._cache[settings]
        view = compute(settings, self.registry)
        self._cache[settings] = view
        if len(self._cache) > self.CACHE_SIZE:
            self._cache.popitem(last=False)
        return view

    def _show(self, view: View) -> None:
        self.summary.value = f"<b>{html.escape(view.summary)}</b>"
        self.notes.value = notes_html(view.notes)
        for name, text in readouts(view.settings).items():
            self.readouts[name].value = text

    def current_settings(self) -> Settings:
        """Settings from the controls and the preset in force (raises WorkbenchError when they are invalid)."""
        c = self.controls
        return replace(self.settings, model=c["model"].value, scheme=c["scheme"].value,
                       n_devices=int(c["n_devices"].value), bandwidth_mbps=float(c["bandwidth_mbps"].value),
                       latency_ms=float(c["latency_ms"].value), memory_gib=float(c["memory_gib"].value),
                       seq_len=int(c["seq_len"].value), phase=c["phase"].value)

    def _on_change(self, change) -> None:
        if self._suspend:
            return
        owner = change["owner"]
        if owner is self.controls["scale"]:
            self._redraw(self.view)
            return
        if owner is self.controls["toml"]:
            self._load_preset(self.controls["toml"].value.strip() or self._last_listed)
        elif owner is self.controls["preset"]:
            if change["new"] == self.settings.preset:
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
            s = settings_for_preset(preset, scheme=self.controls["scheme"].value, phase=self.controls["phase"].value)
        except WorkbenchError as exc:
            self._preset_error = f"⚠ {html.escape(str(exc).splitlines()[0])} (still using {self.settings.preset})"
            return
        self._preset_error = ""
        self._cache.clear()  # the file may have changed on disk
        self._suspend = True
        try:
            self.settings = s
            if preset in preset_names():
                self._last_listed = preset
            self.controls["preset"].options = self._preset_options(preset)
            self.controls["preset"].value = preset
            for name in ("model", "n_devices", "bandwidth_mbps", "latency_ms", "memory_gib", "seq_len"):
                self.controls[name].value = getattr(s, name)
        finally:
            self._suspend = False

    def update(self) -> bool:
        """Recompute from the controls and redraw; on invalid input show one line and keep the charts."""
        try:
            view = self._compute(self.current_settings())
            self._redraw(view)
        except WorkbenchError as exc:
            self.message.value = f"⚠ {html.escape(str(exc).splitlines()[0])}"
            return False
        self.view = view
        self.message.value = self._preset_error
        self._show(view)
        return True

    def _redraw(self, view: View) -> None:
        """Swap the charts' specs for those of `view` (raises WorkbenchError before touching any chart)."""
        specs = chart_specs(view, self.controls["scale"].value)
        for name, spec in specs.items():
            self.charts[name].spec = spec


def view_result_rows(view: View) -> pd.DataFrame:
    """Tidy result rows (workbench.results columns) of a view: each scheme's latency and peak memory."""
    s = view.settings
    setting = (f"preset={s.preset},n={s.n_devices},bw={s.bandwidth_mbps:g}Mbps,tau={s.latency_ms:g}ms,"
               f"mem={s.memory_gib:g}GiB,S={s.seq_len},{s.phase}")
    return table_result_rows(view.table(), "explorer", s.model, setting, phase_in_name=False)
