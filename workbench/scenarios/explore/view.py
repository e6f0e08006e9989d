"""The explorer's view: ipywidgets controls, HTML tables and the Vega-Lite charts (`workbench.report.livechart.LiveChart`)
of a `View`; the `Explorer` widget turns controls into a `State`, calls `compute`, and swaps the charts' specs."""

from __future__ import annotations

import html
from collections import OrderedDict

import pandas as pd

from workbench.core.errors import WorkbenchError, require_choice
from workbench.core.units import format_seconds
from workbench.model.models import MODELS, get_model
from workbench.scenarios.arena import GIB, METRIC, Registry
from workbench.scenarios.arena_charts import (
    SCALES,
    breakdown_spec,
    format_gib,
    format_rate,
    memory_spec,
    ranking_spec,
    setting_title,
)
from workbench.scenarios.explore.compute import View, board_counts, boards_frame, compute
from workbench.scenarios.explore.state import (
    ALL,
    ALPHA_SLIDER,
    BOARD_COUNTS,
    CONTROLS,
    KV_AS_ACTIVATIONS,
    MAX_DEVICES,
    MAX_TOKENS,
    MOE_CONTROLS,
    MOE_LABELS,
    MOE_WIDGETS,
    NO_DRAFT,
    START_ALPHA,
    State,
    configure,
    control_values,
    draft_options,
    format_options,
    load_preset,
    model_options,
    preset_names,
    state_for_preset,
    toml_label,
)
from workbench.scenarios.speculative import MAX_GAMMA, PLACEMENTS, Speculation, expected_tokens
from workbench.scenarios.userconfig import UserConfig
from workbench.schemes.base import PHASES, load_all


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
    from workbench.scenarios.arena_charts import field as channel
    from workbench.scenarios.arena_charts import seconds_expr, time_axis, top_level

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

        from workbench.report.livechart import (
            LiveChart,  # redraws in place (vega from vl-convert's bundle: no CDN)
        )

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
