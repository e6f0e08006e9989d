"""The what-if explorer without a browser: compute(), the widget's update path and its error line."""

from __future__ import annotations

import pytest
from test_arena import REGISTRY  # stand-in evaluators (tests only)

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import device_names, load_device
from workbench.report.results import RESULT_COLUMNS
from workbench.scenarios.arena import COMPONENTS
from workbench.scenarios.arena_charts import COMPONENT_COLORS, format_gib, format_rate
from workbench.scenarios.explore import (
    ALL,
    Explorer,
    State,
    chart_specs,
    compute,
    configure,
    control_values,
    format_seconds,
    load_preset,
    notes_html,
    preset_names,
    readouts,
    state_for_preset,
    view_result_rows,
)
from workbench.scenarios.regimes import with_budget

GIB = 2**30


def test_presets_list_examples_then_devices():
    names = preset_names()
    examples = sorted(p.stem for p in (REPO_ROOT / "examples").glob("*.toml"))
    assert {"laptops_wifi", "qwen3_moe_pi5", "sbc_gigabit", "smart_home"} <= set(examples)
    assert names[:len(examples)] == examples
    assert names[len(examples):] == device_names()


def test_controls_start_from_the_preset():
    v = control_values(state_for_preset("sbc_gigabit").config)
    assert (v["model"], v["n_devices"], v["bandwidth_mbps"], v["latency_ms"], v["memory_gib"], v["weight_format"]) == \
        ("Llama 2-13B", 4, 1000.0, 0.05, 7.0, "q4_0")
    assert state_for_preset("sbc_gigabit", phase="decode").phase == "decode"


def test_cluster_follows_the_sliders():
    base = load_preset("laptops_wifi")
    cluster = configure(base, n_devices=6, bandwidth_mbps=50.0, latency_ms=2.0, memory_gib=3.0).cluster
    assert cluster.n == 6
    names = [d.name for d in cluster.devices]
    assert names[4:] == names[:2]  # the preset's devices, cycled
    assert all(d.memory_bytes == 3 * GIB for d in cluster.devices)
    assert cluster.topology.link.bandwidth_bytes_per_s == pytest.approx(50e6 / 8)
    assert cluster.topology.link.latency_s == pytest.approx(2e-3)


def test_a_budget_below_the_cache_caps_every_level():
    device = load_preset("sbc_gigabit").cluster.devices[0]
    small = with_budget(device, 2**20)
    assert [m.capacity_bytes for m in small.memory] == [2**20, 2**20]


def test_compute_ranks_and_summarises():
    view = compute(state_for_preset("sbc_gigabit"), REGISTRY)
    t = view.table()
    assert set(t.scheme) == set(REGISTRY) and set(t.phase) == {"prefill"}
    best = t.sort_values("latency_s").iloc[0]
    assert view.summary.startswith(f"best TTFT: {best.scheme}")
    rows = view_result_rows(view)
    assert list(rows.columns) == RESULT_COLUMNS and len(rows) == 4


@pytest.mark.parametrize("changes, fragment, error", [
    ({"memory_gib": 0.001}, "nothing fits", InfeasibleError),
    ({"scheme": "standin_tp", "n_devices": 64}, "standin_tp does not apply here", WorkbenchError),
    ({"seq_len": 10**6}, "max_positions", WorkbenchError),
    ({"kv_len": 10**6}, "max_positions", WorkbenchError),
    ({"scheme": "nope"}, "unknown scheme", WorkbenchError),
    ({"preset": "examples/nope.toml"}, "does not exist", WorkbenchError),
])
def test_invalid_settings_raise_one_line(changes, fragment, error):
    with pytest.raises(error, match=fragment) as info:
        compute(state_for_preset(**{"preset": "sbc_gigabit", **changes}), REGISTRY)
    assert "\n" not in str(info.value)


def test_moved_controls_are_checked_one_line_each():
    base = load_preset("sbc_gigabit")
    for changes, fragment in [({"n_devices": 0}, "device count"), ({"bandwidth_mbps": -1.0}, "link bandwidth"),
                              ({"model": "GPT-5"}, "unknown model"), ({"weight_format": "q3"}, "weight_format"),
                              ({"latency_ms": -1.0}, "per-hop latency"), ({"nope": 1}, "explorer control")]:
        with pytest.raises(WorkbenchError, match=fragment) as info:
            configure(base, **changes)
        assert "\n" not in str(info.value)
    with pytest.raises(WorkbenchError, match="UserConfig"):
        State(config="sbc_gigabit")


def test_chart_specs_keep_their_layout_and_change_their_data():
    first = chart_specs(compute(state_for_preset("sbc_gigabit"), REGISTRY))
    second = chart_specs(compute(state_for_preset("sbc_gigabit", bandwidth_mbps=10.0), REGISTRY))
    assert set(first) == {"breakdown", "ranking", "memory"}
    assert first["breakdown"]["vconcat"] == second["breakdown"]["vconcat"]
    assert first["breakdown"]["datasets"] != second["breakdown"]["datasets"]


def test_toml_file_of_ones_own(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text((REPO_ROOT / "examples" / "smart_home.toml").read_text())
    s = state_for_preset(str(path))
    assert s.config.cluster.n == 3 and compute(s, REGISTRY).summary.startswith("best")
    explorer = Explorer(s, REGISTRY)
    assert explorer.controls["toml"].value == str(path) and explorer.current_state().preset == str(path)
    explorer.controls["toml"].value = str(tmp_path / "missing.toml")
    assert explorer.message.value.startswith("⚠") and "does not exist" in explorer.message.value
    explorer.controls["toml"].value = ""
    assert explorer.current_state().preset == explorer.controls["preset"].value


def test_explorer_widget_updates_and_keeps_charts_on_error():
    explorer = Explorer(state_for_preset("sbc_gigabit"), REGISTRY)
    before = {k: c.spec for k, c in explorer.charts.items()}
    summary = explorer.summary.value
    explorer.controls["n_devices"].value = 2  # observe -> update
    assert explorer.message.value == ""
    assert explorer.summary.value != summary
    assert explorer.charts["ranking"].spec["datasets"] != before["ranking"]["datasets"]
    kept = {k: c.spec for k, c in explorer.charts.items()}
    explorer.controls["memory_gib"].value = explorer.controls["memory_gib"].min
    assert explorer.message.value.startswith("⚠ infeasible: nothing fits")
    assert {k: c.spec for k, c in explorer.charts.items()} == kept
    explorer.controls["memory_gib"].value = 8.0
    assert explorer.message.value == ""


def test_explorer_switches_preset_and_phase():
    explorer = Explorer(state_for_preset("sbc_gigabit"), REGISTRY)
    explorer.controls["preset"].value = "smart_home"
    assert explorer.controls["n_devices"].value == 3 and explorer.controls["model"].value == "Llama 2-3B"
    explorer.controls["phase"].value = "decode"
    assert explorer.view.state.phase == "decode" and "time per token" in explorer.summary.value
    explorer.controls["scheme"].value = "standin_single"
    assert set(explorer.view.table().scheme) == {"standin_single"}
    assert explorer.controls["scheme"].options[0] == ALL


def test_explorer_with_the_real_registry():
    view = compute(state_for_preset("sbc_gigabit"))
    assert view.summary.startswith("best TTFT")
    assert (view.table().status == "ok").any()


# ---- issue 19: the explorer fixed ------------------------------------------------------------------
def _counting(registry: dict) -> tuple[dict, list]:
    """`registry` with every evaluator counting its calls."""
    calls: list = []

    def wrap(name, fn):
        def counted(model, cluster, workload):
            calls.append(name)
            return fn(model, cluster, workload)
        return counted

    return {name: (paper, wrap(name, fn)) for name, (paper, fn) in registry.items()}, calls


def _notebook_code() -> list[str]:
    """The code cells of notebooks/src/explore.py (percent format)."""
    text = (REPO_ROOT / "notebooks" / "src" / "explore.py").read_text()
    cells = [c for c in text.split("# %%")[1:] if not c.startswith(" [markdown]")]
    return [c.split("\n", 1)[1] for c in cells]


def test_notebook_shows_the_best_line_once_live_only_in_the_widget(tmp_path, capsys, monkeypatch):
    import importlib

    for module in ("workbench.scenarios.explore.compute", "workbench.scenarios.explore.view"):  # small registry: the notebook's own flow
        monkeypatch.setattr(importlib.import_module(module), "load_all", lambda: REGISTRY)
    shown: list = []
    scope = {"display": shown.append}
    code = _notebook_code()
    exec(code[0], scope)  # parameters
    scope.update(figures_dir=str(tmp_path), interactive=True)
    for cell in code[1:]:
        exec(cell, scope)
    assert "best" not in capsys.readouterr().out  # no static copy that a slider would leave behind
    explorer = scope["explorer"]
    assert shown == [explorer.widget]
    before = explorer.summary.value
    explorer.controls["n_devices"].value = 2
    assert explorer.summary.value != before and explorer.summary.value.startswith("<b>best TTFT")
    scope["interactive"] = False
    exec(code[-1], scope)
    assert capsys.readouterr().out.startswith("best TTFT")


def test_a_bad_toml_path_shows_one_line_and_the_other_controls_keep_working(tmp_path):
    explorer = Explorer(state_for_preset("sbc_gigabit"), REGISTRY)
    explorer.controls["toml"].value = str(tmp_path / "missing.toml")
    assert "does not exist" in explorer.message.value and "\n" not in explorer.message.value
    assert explorer.view.state.preset == "sbc_gigabit"  # the preset in force is kept
    for name, value in [("model", "Llama 2-7B"), ("scheme", "standin_single"), ("phase", "decode"),
                        ("seq_len", 64), ("n_devices", 2), ("kv_len", 32), ("activation_format", "q8_0")]:
        explorer.controls[name].value = value
        shown = {**control_values(explorer.view.state.config), "scheme": explorer.view.state.scheme,
                 "phase": explorer.view.state.phase}
        assert shown[name] == value, name
    assert "does not exist" in explorer.message.value  # the error stays visible while the box holds it
    explorer.controls["toml"].value = ""
    assert explorer.message.value == ""


def test_after_a_toml_loads_the_dropdown_shows_it(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text((REPO_ROOT / "examples" / "smart_home.toml").read_text())
    explorer = Explorer(state_for_preset("sbc_gigabit"), REGISTRY)
    explorer.controls["toml"].value = str(path)
    assert explorer.view.state.preset == str(path)
    assert explorer.controls["preset"].label == "TOML file: mine.toml"
    explorer.controls["preset"].value = "sbc_gigabit"  # a listed preset replaces the TOML
    assert explorer.controls["toml"].value == "" and explorer.view.state.preset == "sbc_gigabit"
    assert not any(label.startswith("TOML file") for label, _ in explorer.controls["preset"].options)


def test_an_unknown_preset_lists_the_examples_not_device_ids(tmp_path):
    with pytest.raises(WorkbenchError, match="unknown preset 'nope'; examples: laptops_wifi, qwen3_moe_pi5, sbc_gigabit") as info:
        state_for_preset("nope")
    assert device_names()[0] not in str(info.value)
    (tmp_path / "cfg.toml").mkdir()
    for directory in (tmp_path, tmp_path / "cfg.toml"):
        with pytest.raises(WorkbenchError, match="is a directory"):
            load_preset(str(directory))
    config = load_preset(device_names()[0])  # a device preset: a deployment of four such devices
    assert config.cluster.n == 4 and {d.name for d in config.cluster.devices} == {load_device(device_names()[0]).name}


def test_readouts_are_in_human_units():
    s = state_for_preset("sbc_gigabit", bandwidth_mbps=1000.0, latency_ms=0.05, memory_gib=2**-10)
    assert readouts(s.config) == {"bandwidth_mbps": "1 Gbps", "latency_ms": "50 µs", "memory_gib": "1.0 MiB"}
    assert [format_rate(x) for x in (1.0, 250.0, 1e5, 0.064)] == ["1 Mbps", "250 Mbps", "100 Gbps", "64 kbps"]
    assert [format_gib(x) for x in (7.0, 128.0, 0.5)] == ["7.0 GiB", "128 GiB", "512 MiB"]
    assert [format_seconds(x) for x in (2.5, 0.0123, 5e-5)] == ["2.5 s", "12.3 ms", "50 µs"]


def test_titles_carry_the_setting():
    a = chart_specs(compute(state_for_preset("sbc_gigabit"), REGISTRY))
    b = chart_specs(compute(state_for_preset("sbc_gigabit", bandwidth_mbps=100.0, phase="decode"), REGISTRY))
    for name in a:
        title = a[name]["title"]
        text = f"{title['text']} {title['subtitle']}"
        for part in ("Llama 2-13B", "4x Raspberry Pi 5", "1 Gbps", "50 µs/hop", "prefill", "7.0 GiB/device"):
            assert part in text, (name, part, text)
        assert "100 Mbps" in b[name]["title"]["subtitle"] and "decode" in b[name]["title"]["subtitle"]


def test_memory_legend_groups_devices_by_kind():
    s = state_for_preset("laptops_wifi", n_devices=40, scheme="standin_tp", model="Llama 2-13B")
    spec = chart_specs(compute(s, REGISTRY))["memory"]
    points = spec["vconcat"][0]["layer"][0]["encoding"]
    assert points["color"]["field"] == "device_name"  # one colour per device kind, not per device
    rows = next(iter(spec["datasets"].values()))
    kinds = {d.name for d in load_preset("laptops_wifi").cluster.devices}
    assert sum(r["devices"] for r in rows) == 40 and {r["device_name"] for r in rows} == kinds
    assert len(rows) < 40  # identical devices draw one point, with their count (1,024 boards stay cheap)
    assert {"field": "device", "type": "quantitative", "title": "first device index"} in points["tooltip"]


def test_every_na_reason_is_listed_one_line_each():
    def never(name):
        def fn(model, cluster, workload):
            raise WorkbenchError(f"{name} never applies")
        return fn

    registry = {**REGISTRY, "no_a": ("paper_c", never("no_a")), "no_b": ("paper_c", never("no_b"))}
    explorer = Explorer(state_for_preset("sbc_gigabit"), registry)
    lines = explorer.notes.value.split("<br>")
    assert lines[0] == "2 scheme(s) n/a here:" and lines[1:] == ["• no_a: no_a never applies",
                                                                  "• no_b: no_b never applies"]
    assert notes_html(()) == ""


def test_breakdown_shows_every_component_with_its_own_colour():
    spec = chart_specs(compute(state_for_preset("sbc_gigabit"), REGISTRY))["breakdown"]
    color = spec["vconcat"][0]["layer"][0]["encoding"]["color"]["scale"]
    assert color["domain"] == list(COMPONENTS.values())
    assert len(set(color["range"])) == len(COMPONENTS) == len(COMPONENT_COLORS)
    assert set(COMPONENT_COLORS) == set(COMPONENTS)


def _bar_widths(svg: str) -> list[float]:
    """Total width in px of each breakdown bar in a rendered SVG, top row (the fastest scheme) first."""
    import re

    rows: dict[float, float] = {}
    for y, width in re.findall(r'aria-roledescription="bar" d="M-?[\d.e-]+,(-?[\d.e-]+)h(-?[\d.e-]+)', svg):
        rows[float(y)] = rows.get(float(y), 0.0) + abs(float(width))
    return [rows[y] for y in sorted(rows)]


def test_log_breakdown_keeps_the_winner_readable_and_linear_is_a_choice():
    from workbench.scenarios.arena_charts import render_svg

    view = compute(state_for_preset("sbc_gigabit", memory_gib=16.0, model="Llama 2-70B", n_devices=8), REGISTRY)
    t = view.table().sort_values("latency_s")
    assert list(t.status) == ["ok", "OOM"] and t.latency_s.iloc[1] > 5 * t.latency_s.iloc[0]
    ratios = {}
    for scale in ("log", "linear"):
        widths = _bar_widths(render_svg(chart_specs(view, scale)["breakdown"]))
        assert len(widths) == 2
        ratios[scale] = widths[0] / max(widths)
    assert ratios["log"] > 0.5 and ratios["linear"] < 0.2, ratios
    with pytest.raises(WorkbenchError, match="breakdown scale"):
        chart_specs(view, "sqrt")


def test_log_axis_labels_only_decades():
    import re

    from workbench.scenarios.arena_charts import render_svg

    view = compute(state_for_preset("sbc_gigabit"), REGISTRY)
    for name in ("ranking", "breakdown"):
        svg = render_svg(chart_specs(view, "log")[name])
        labels = re.findall(r'role-axis-label.*?</g></g>', svg, re.S)
        texts = [t for group in labels for t in re.findall(r"<text[^>]*>([^<]*)</text>", group)]
        numeric = [t for t in texts if re.match(r"^[\d.]", t)]
        assert numeric and all(re.fullmatch(r"(1|10|100|1000|10000) (µs|ms|s)", t) for t in numeric), numeric


def test_explorer_caches_views_and_switches_the_breakdown_axis_without_recomputing():
    registry, calls = _counting(REGISTRY)
    explorer = Explorer(state_for_preset("sbc_gigabit"), registry)
    slider = explorer.controls["bandwidth_mbps"]
    start = slider.value
    slider.value = 100.0
    n = len(calls)
    slider.value = start  # back to a setting seen before: no scheme evaluated
    assert len(calls) == n
    explorer.controls["scale"].value = "linear"
    assert len(calls) == n
    assert explorer.charts["breakdown"].spec["vconcat"][0]["layer"][0]["encoding"]["x"]["scale"]["type"] == "linear"


def test_composition_share_axis_labels_do_not_collide():
    import re

    from workbench.scenarios.arena_charts import breakdown_spec, render_svg

    view = compute(state_for_preset("sbc_gigabit"), REGISTRY)
    svg = render_svg(breakdown_spec(view.arena, composition=True))
    labels = re.findall(r"<text[^>]*>(\d+%)</text>", svg)
    assert labels == ["0%", "25%", "50%", "75%", "100%"], labels  # was 0% .. 80%100% at 190 px


# ---- issue 31: one path from a TOML to a result ------------------------------------------------------
PROFILED = """
[meta]
name = "two profiled boards, a model by its dimensions"
[model]
name = "my-llama"
family = "llama"
n_layers = 6
d_model = 512
n_heads = 8
d_ff = 1536
vocab_size = 8000
max_positions = 2048
weight_format = "q4_0"
activation_format = "q8_0"
kv_format = "fp16"
[workload]
seq_len = 96
kv_len = 300
[network]
topology = "switch"
bandwidth_mbps = 100
latency_ms = 0.2
message_overhead_us = 80
[cluster]
shared_machine = "board.toml"
[[devices]]
preset = "board.toml"
count = 2
"""


def _profiled_toml(tmp_path):
    """A deployment on a board TOML written by the profile (from micro-benchmark rows), as `profile` does."""
    import pandas as pd
    from profile_rows import base_profile_rows

    from workbench.measure.profile.device_toml import device_constants, device_toml, profile_provenance

    source = profile_provenance("2 cores, test machine", "2020-01-01", reps=5, rounds=3)
    constants = device_constants(pd.DataFrame(base_profile_rows()), source)
    (tmp_path / "board.toml").write_text(device_toml(constants, "board", "test machine, 2020-01-01"))
    path = tmp_path / "profiled.toml"
    path.write_text(PROFILED)
    return path


def _q8_activations_toml(tmp_path):
    """The four-board example with q4_0 weights x q8_0 activations and a longer decode context."""
    text = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    text = text.replace("activation_bits = 16\n", 'activation_format = "q8_0"\n', 1).replace("kv_len = 128", "kv_len = 512")
    path = tmp_path / "sbc_q8.toml"
    path.write_text(text)
    return path


def _whatif_table(path, phase: str):
    """What `whatif FILE.toml` computes (load_config -> arena_for_config), rows of one phase."""
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    table = arena_for_config(load_config(path)).table()
    return table[table.phase == phase].reset_index(drop=True)


@pytest.mark.parametrize("name", ["laptops_wifi", "sbc_gigabit", "smart_home", "profiled", "sbc_q8"])
def test_the_explorer_and_whatif_give_identical_tables(tmp_path, name):
    import pandas as pd

    makers = {"profiled": _profiled_toml, "sbc_q8": _q8_activations_toml}
    path = makers[name](tmp_path) if name in makers else REPO_ROOT / "examples" / f"{name}.toml"
    explorer = Explorer(state_for_preset(str(path)))  # the real registry: the numbers a person sees
    for phase in ("prefill", "decode"):
        explorer.controls["phase"].value = phase
        assert explorer.message.value == "", explorer.message.value
        pd.testing.assert_frame_equal(explorer.view.table().reset_index(drop=True), _whatif_table(path, phase))
    config = explorer.state.config
    assert explorer.controls["model"].value == config.model.name  # never swapped for a registered model
    title = explorer.charts["ranking"].spec["title"]["text"]
    assert config.model.name in title, title


def test_the_controls_show_the_file_and_moving_one_back_gives_the_file_again(tmp_path):
    import pandas as pd

    path = _profiled_toml(tmp_path)
    explorer = Explorer(state_for_preset(str(path)), REGISTRY)
    c = explorer.controls
    assert (c["model"].value, c["model"].label) == ("my-llama", "my-llama (from the file)")
    assert (c["weight_format"].value, c["activation_format"].value, c["kv_format"].value) == ("q4_0", "q8_0", "fp16")
    assert (c["seq_len"].value, c["kv_len"].value, c["n_devices"].value) == (96, 300, 2)
    first = explorer.view.table()
    c["activation_format"].value = "fp16"
    assert explorer.state.config.activation_bits == 16.0 and not explorer.view.table().equals(first)
    c["activation_format"].value = "q8_0"
    assert explorer.state.config == load_preset(str(path)) and explorer.changes() == {}
    pd.testing.assert_frame_equal(explorer.view.table(), first)
    c["model"].value = "TinyLlama-42M"
    assert explorer.state.config.model.name == "TinyLlama-42M"
    c["model"].value = "my-llama"
    assert explorer.state.config.model == load_preset(str(path)).model


def test_moving_a_control_keeps_what_no_control_shows(tmp_path):
    base = load_preset(str(_profiled_toml(tmp_path)))
    moved = configure(base, n_devices=3, bandwidth_mbps=1000.0, latency_ms=0.5, memory_gib=2.0, kv_format="6 bit")
    link = moved.cluster.topology.link
    assert link.message_overhead_s == base.cluster.topology.link.message_overhead_s == pytest.approx(80e-6)
    assert moved.cluster.shared_machine == base.cluster.shared_machine is not None
    assert (moved.cluster.n, link.bandwidth_bytes_per_s, link.latency_s) == (3, 125e6, pytest.approx(5e-4))
    assert all(d.memory_bytes == 2 * GIB for d in moved.cluster.devices)
    assert (moved.kv_bits, moved.kv_format, moved.weight_format) == (6.0, "", "q4_0")
    assert control_values(moved)["kv_format"] == "6 bit"
    assert configure(base) == base
    from workbench.scenarios.regimes import (
        vary_cluster,  # the regime map's grid points move the cluster the same way
    )

    assert vary_cluster(base.cluster, 3, 1000.0, 0.5, 2.0) == moved.cluster


def test_the_live_chart_module_is_bundled_for_offline_use():
    from workbench.report.livechart import LiveChart, bundled_js

    js = bundled_js()
    assert "esm.sh" not in js and "wb_title" in js and ".view.data(" in js  # rows swapped in the running view
    chart = LiveChart({"mark": "point"}, embed_options={"renderer": "svg"})
    assert chart.spec == {"mark": "point"} and chart._esm == js


def test_a_llama_cpp_file_type_is_a_weight_format_whose_bits_follow_the_model():
    """'Q4_K_M' in the weight-format control is that model's file's average bits (formats.recipe_bits); choosing
    another model keeps the file type and recomputes its bits; the dropdown lists the file types."""
    from workbench.model.formats import recipe_bits
    from workbench.model.models import get_model
    from workbench.scenarios.explore import configure, format_options
    from workbench.scenarios.userconfig import load_config

    base = load_config(REPO_ROOT / "examples" / "qwen3_moe_pi5.toml")
    q4km = configure(base, model="Llama 3.1-8B", weight_format="Q4_K_M")
    assert q4km.weight_format == "Q4_K_M"
    assert q4km.weight_bits == pytest.approx(recipe_bits(get_model("Llama 3.1-8B"), "Q4_K_M"))
    assert 4.6 < q4km.weight_bits < 5.2
    other = configure(q4km, model="Qwen3-30B-A3B")
    assert other.weight_bits == pytest.approx(recipe_bits(get_model("Qwen3-30B-A3B"), "Q4_K_M"))
    assert other.weight_bits != q4km.weight_bits
    assert ("Q4_K_M (llama.cpp file type)", "Q4_K_M") in format_options("weight_format", "Q4_K_M")
    assert all(value != "Q4_K_M" for _, value in format_options("activation_format", "q8_0"))


# ---- speculative decoding and "will more boards help?" (issues 34, 35) ---------------------------------------
SPECULATIVE = '\n[speculative]\ndraft = "Llama 2-3B"\ngamma = 4\nalpha = 0.7\n'


def _speculative_toml(tmp_path, body: str = SPECULATIVE, example: str = "laptops_wifi"):
    """An example deployment with a [speculative] table."""
    path = tmp_path / f"{example}_spec.toml"
    path.write_text((REPO_ROOT / "examples" / f"{example}.toml").read_text() + body)
    return path


def test_the_explorer_and_whatif_agree_on_a_speculative_deployment(tmp_path):
    """Same numbers as `whatif FILE.toml`: per scheme the plain and speculative time per token, speed-up,
    costliest part and n/a reason (whatif.speculation_rows), and whatif's best gamma for the fastest scheme."""
    import pandas as pd

    from workbench.scenarios import whatif
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.speculative import BEST_COLUMNS
    from workbench.scenarios.userconfig import load_config

    path = _speculative_toml(tmp_path)
    explorer = Explorer(state_for_preset(str(path)))  # prefill shown: the draft's table is of decode all the same
    assert explorer.message.value == "" and explorer.changes() == {}
    ours = explorer.view.speculation
    config = load_config(path)
    arena = arena_for_config(config)
    theirs = whatif.speculation_rows(arena, config)
    same = [c for c in theirs.columns if c not in BEST_COLUMNS]  # whatif's table leaves the best gamma out
    assert theirs[list(BEST_COLUMNS)].isna().all().all()
    pd.testing.assert_frame_equal(ours[same].fillna({"notes": ""}), theirs[same].fillna({"notes": ""}))
    assert ours["speculative_s"].notna().sum() >= 5 and ours["notes"].str.startswith("n/a: ").sum() >= 1
    line = whatif.best_gamma_line(arena, config, theirs)  # "best with speculation: <scheme> at gamma <g> (...)"
    scheme, gamma = line.split()[3], int(line.split()[6])
    row = ours.set_index("scheme").loc[scheme]
    assert row.best_gamma == gamma and f"at gamma {gamma} ({format_seconds(row.best_gamma_s)}/token" in line
    assert (ours.dropna(subset=["best_gamma_s"]).eval("best_gamma_s <= speculative_s + 1e-15")).all()
    shown = explorer.speculation.value
    assert "draft Llama 2-3B (root), gamma 4, alpha 0.7" in shown
    assert f"{row.speedup:.2f}x" in shown and format_seconds(row.speculative_s) in shown
    explorer.controls["phase"].value = "decode"  # the same table from the decode arena itself
    pd.testing.assert_frame_equal(explorer.view.speculation, ours)


def test_the_speculation_controls_show_the_file_and_round_trip(tmp_path):
    from workbench.scenarios.explore import NO_DRAFT, START_ALPHA
    from workbench.scenarios.speculative import Speculation

    path = _speculative_toml(tmp_path, example="sbc_gigabit")
    base = load_preset(str(path))
    values = control_values(base)
    assert {k: values[k] for k in ("draft", "placement", "gamma", "alpha")} == \
        {"draft": "Llama 2-3B", "placement": "root", "gamma": 4, "alpha": 0.7}
    assert configure(base, draft="Llama 2-3B", placement="root", gamma=4, alpha=0.7) == base
    explorer = Explorer(state_for_preset(str(path)), REGISTRY)
    c = explorer.controls
    assert (c["draft"].value, c["gamma"].value, c["alpha"].value) == ("Llama 2-3B", 4, 0.7)
    c["gamma"].value = 7
    assert explorer.state.config.speculation == Speculation("Llama 2-3B", "root", 7, 0.7)
    c["alpha"].value = 0.5
    c["draft"].value = "ngram"
    assert explorer.state.config.speculation == Speculation("ngram", "root", 7, 0.5)
    c["draft"].value = NO_DRAFT
    assert explorer.state.config.speculation is None and explorer.speculation.value == ""
    assert c["gamma"].disabled and c["alpha"].disabled
    c["draft"].value, c["gamma"].value, c["alpha"].value = "Llama 2-3B", 4, 0.7
    assert explorer.changes() == {} and explorer.state.config == base
    plain = load_preset("sbc_gigabit")  # no [speculative]: the controls start at Speculation's defaults
    assert control_values(plain)["draft"] == NO_DRAFT and configure(plain, gamma=9, alpha=0.2) == plain
    assert configure(plain, draft="ngram").speculation == Speculation("ngram", "root", 4, START_ALPHA)


def test_the_draft_dropdown_lists_smaller_decoders_and_a_bad_combination_is_one_line(tmp_path):
    from workbench.model.models import get_model

    explorer = Explorer(state_for_preset(str(_speculative_toml(tmp_path, example="sbc_gigabit"))), REGISTRY)
    c = explorer.controls
    listed = [value for _, value in c["draft"].options]
    assert listed[:2] == ["none", "ngram"] and "Llama 2-3B" in listed and "Llama 2-7B" in listed
    assert "Llama 2-13B" not in listed and "Llama 2-70B" not in listed and "BERT-base" not in listed
    assert all(get_model(m).total_params() < get_model("Llama 2-13B").total_params() for m in listed[2:])
    view = explorer.view
    c["model"].value = "OPT-XL"  # 2.7B: the file's 3.4B draft is now larger than the target
    assert "Llama 2-3B" in [value for _, value in c["draft"].options]  # kept, marked
    message = explorer.message.value
    assert "draft Llama 2-3B" in message and "must be smaller than the target OPT-XL" in message
    assert "\n" not in message and explorer.view is view  # the previous charts stay
    assert "Llama 2-7B" not in [value for _, value in c["draft"].options]
    c["draft"].value = "ngram"
    assert explorer.message.value == "" and explorer.state.config.speculation.draft == "ngram"
    base = load_preset(str(_speculative_toml(tmp_path)))
    for changes, fragment in (({"alpha": 1.2}, r"alpha must be a number in \[0, 1\), got 1.2"),
                              ({"gamma": 0}, r"gamma must be an integer in \[1, 64\]"),
                              ({"draft": "Llama 2-70B"}, "must be smaller than the target Llama 2-13B"),
                              ({"placement": "nowhere"}, "unknown placement .nowhere.; allowed: root, own, ring")):
        with pytest.raises(WorkbenchError, match=fragment) as err:
            configure(base, **changes)
        assert "\n" not in str(err.value)


def test_accepted_lengths_and_an_own_draft_device_follow_the_controls(tmp_path):
    from workbench.scenarios.speculative import expected_tokens

    lengths = _speculative_toml(tmp_path, '\n[speculative]\ndraft = "ngram"\ngamma = 3\n'
                                          'accepted_lengths = [0.4, 0.3, 0.2, 0.1]\n')
    base = load_preset(str(lengths))
    alpha = control_values(base)["alpha"]  # the i.i.d. alpha with the same tokens per step at gamma 3
    assert expected_tokens(3, alpha) == pytest.approx(expected_tokens(3, None, base.speculation.accepted_lengths))
    assert configure(base, gamma=5).speculation.accepted_lengths == base.speculation.accepted_lengths
    assert configure(base, alpha=0.6).speculation.accepted_lengths is None
    own = configure(base, placement="own")  # no draft_device in the file: a spare of the first device
    assert own.speculation.device == base.cluster.devices[0]
    moved = configure(own, bandwidth_mbps=100.0).speculation.link  # the hand-off link follows [network]
    assert moved == configure(base, bandwidth_mbps=100.0).cluster.topology.link
    assert moved.bandwidth_bytes_per_s == pytest.approx(100e6 / 8)


def test_will_more_boards_help_matches_the_scaling_module_and_follows_the_controls():
    import pandas as pd

    from workbench.scenarios.explore import board_counts, boards_frame
    from workbench.scenarios.scaling import device_sweep, stop_helping_all, stop_helping_frame

    assert board_counts(4) == (1, 2, 4, 8, 16) and board_counts(1) == (1, 2, 4) and board_counts(6) == (1, 3, 6, 12, 24)
    assert board_counts(1024) == (1, 512, 1024)
    config = load_preset("sbc_gigabit")
    frame = boards_frame(config, "decode")
    expected = stop_helping_frame(stop_helping_all(device_sweep(config, [1, 2, 4, 8, 16])))
    pd.testing.assert_frame_equal(frame.drop(columns="applies"), expected)
    explorer = Explorer(state_for_preset("sbc_gigabit", phase="decode"))
    assert explorer.boards.value == ""  # only on request: a sweep is 5 arenas
    explorer.boards_button.value = True
    shown = explorer.boards.value
    assert "will more boards help?" in shown and "1, 2, 4, 8, 16 copies of" in shown
    stops = frame[frame.applies & frame.next_devices.notna()].iloc[0]
    assert f">{stops.scheme}</td>" in shown and stops.cause in shown
    explorer.controls["n_devices"].value = 2  # recomputed with the controls: counts around 2
    assert "1, 2, 4, 8 copies of" in explorer.boards.value
    explorer.boards_button.value = False
    assert explorer.boards.value == ""


def test_the_speculation_chart_draws_the_tables_numbers_and_follows_the_draft(tmp_path):
    from workbench.scenarios.explore import SPECULATION_KINDS, speculation_spec

    explorer = Explorer(state_for_preset(str(_speculative_toml(tmp_path))))
    spec = explorer.speculation_chart.spec
    rows = next(iter(spec["datasets"].values()))
    frame = explorer.view.speculation.dropna(subset=["speculative_s"])
    assert [r["scheme"] for r in rows] == list(frame.scheme)
    for row, expected in zip(rows, frame.itertuples()):
        assert [row[k] for k in SPECULATION_KINDS] == [getattr(expected, k) for k in SPECULATION_KINDS]
    assert "draft Llama 2-3B (root), gamma 4, alpha 0.7" in spec["title"]["subtitle"]
    explorer.controls["gamma"].value = 6
    moved = explorer.speculation_chart.spec
    assert {**moved, "datasets": None, "title": None} == {**spec, "datasets": None, "title": None}  # redrawn in place
    assert moved["datasets"] != spec["datasets"] and "gamma 6" in moved["title"]["subtitle"]
    explorer.controls["draft"].value = "none"
    assert explorer.speculation_chart.spec is None and speculation_spec(explorer.view) is None


def test_a_gamma_move_reuses_the_best_gammas_and_gives_what_a_fresh_compute_gives(tmp_path, monkeypatch):
    import pandas as pd

    from workbench.scenarios import speculative

    explorer = Explorer(state_for_preset(str(_speculative_toml(tmp_path)), phase="decode"))
    calls = []
    monkeypatch.setattr(speculative, "best_gamma", lambda *a, **k: calls.append(a[1]) or pytest.fail("recomputed"))
    explorer.controls["gamma"].value = 7  # the best gamma does not depend on the gamma chosen: memo
    assert explorer.message.value == "" and calls == []
    monkeypatch.undo()
    fresh = compute(explorer.state).speculation
    pd.testing.assert_frame_equal(explorer.view.speculation, fresh)
    at_four = compute(state_for_preset(str(_speculative_toml(tmp_path)), phase="decode")).speculation
    moved = explorer.view.speculation.speculative_s.dropna()
    assert (moved != at_four.speculative_s.dropna()).all() and len(moved) >= 5  # gamma 7's own times
    explorer.controls["alpha"].value = 0.5  # alpha changes the best gamma: recomputed
    pd.testing.assert_frame_equal(explorer.view.speculation, compute(explorer.state).speculation)


def test_the_explorer_records_into_the_project_it_is_opened_from(tmp_path, monkeypatch):
    """notebooks/explore.ipynb's recording cell, opened from another checkout than the one the package is installed
    from: results.csv goes to that checkout's figures/explore/ (its figures_dir = None), or to figures_dir."""
    from workbench.report.results import Recorder
    from workbench.scenarios.explore import compute, state_for_preset, view_result_rows

    other = tmp_path / "checkout"
    (other / "workbench").mkdir(parents=True)
    (other / "workbench" / "__init__.py").write_text("")
    (other / "pyproject.toml").write_text("[project]\nname = 'workbench'\n")
    (other / "notebooks").mkdir()
    monkeypatch.chdir(other / "notebooks")  # where Jupyter starts a notebook's kernel
    rec = Recorder("explore", None)
    rec.add(view_result_rows(compute(state_for_preset("sbc_gigabit", phase="decode"))))
    written = rec.write()
    assert written == other / "figures" / "explore" / "results.csv" and written.is_file()
    assert REPO_ROOT not in written.parents
    assert Recorder("explore", "runs/a").out_dir == other / "runs" / "a" / "explore"  # relative: from the project
    assert Recorder("explore", tmp_path / "abs").out_dir == tmp_path / "abs" / "explore"
    monkeypatch.chdir(tmp_path)  # outside any checkout: the working directory itself
    assert Recorder("explore").out_dir == tmp_path / "figures" / "explore"


def test_a_batch_run_draws_the_explorers_charts_as_static_charts():
    """Without a kernel's widgets the executed notebook showed no chart: the batch run saves these as PNGs."""
    from workbench.report.chartcheck import chart_problems
    from workbench.scenarios.explore import chart_frames, static_charts

    view = compute(state_for_preset("sbc_gigabit"))
    charts = static_charts(view)
    assert set(charts) == {"breakdown", "ranking", "memory"} <= set(chart_frames(view))
    assert {name: chart_problems(chart) for name, chart in charts.items()} == {name: [] for name in charts}
    assert charts["ranking"].to_dict()["vconcat"] == chart_specs(view)["ranking"]["vconcat"]
    drafted = static_charts(compute(state_for_preset("laptops_wifi", phase="decode", draft="ngram")))
    assert set(drafted) == {"breakdown", "ranking", "memory", "speculation"}
    assert chart_problems(drafted["speculation"]) == []
