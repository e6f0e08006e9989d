"""The what-if explorer without a browser: compute(), the widget's update path and its error line."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_arena import REGISTRY  # stand-in evaluators (tests only)

from workbench.errors import InfeasibleError, WorkbenchError
from workbench.explore import (
    ALL,
    Explorer,
    Settings,
    build_cluster,
    chart_specs,
    compute,
    load_preset,
    preset_names,
    settings_for_preset,
    view_result_rows,
)
from workbench.hardware import device_names
from workbench.io import REPO_ROOT
from workbench.regimes import with_budget
from workbench.results import RESULT_COLUMNS

GIB = 2**30


def test_presets_list_examples_then_devices():
    names = preset_names()
    assert names[:3] == ["laptops_wifi", "sbc_gigabit", "smart_home"]
    assert names[3:] == device_names()


def test_settings_start_from_the_preset():
    s = settings_for_preset("sbc_gigabit")
    assert (s.model, s.n_devices, s.bandwidth_mbps, s.latency_ms, s.memory_gib, s.weight_bits) == \
        ("Llama 2-13B", 4, 1000.0, 0.05, 7.0, 4.5)
    assert settings_for_preset("sbc_gigabit", phase="decode").phase == "decode"


def test_cluster_follows_the_sliders():
    s = replace(settings_for_preset("laptops_wifi"), n_devices=6, bandwidth_mbps=50.0, latency_ms=2.0, memory_gib=3.0)
    cluster = build_cluster(s)
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
    view = compute(settings_for_preset("sbc_gigabit"), REGISTRY)
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
    ({"scheme": "nope"}, "unknown scheme", WorkbenchError),
    ({"preset": "examples/nope.toml"}, "does not exist", WorkbenchError),
])
def test_invalid_settings_raise_one_line(changes, fragment, error):
    s = replace(settings_for_preset("sbc_gigabit"), **changes)
    with pytest.raises(error, match=fragment) as info:
        compute(s, REGISTRY)
    assert "\n" not in str(info.value)


def test_settings_validate_on_construction():
    with pytest.raises(WorkbenchError, match="device count"):
        Settings(n_devices=0)
    with pytest.raises(WorkbenchError, match="link bandwidth"):
        Settings(bandwidth_mbps=-1.0)
    with pytest.raises(WorkbenchError, match="unknown model"):
        Settings(model="GPT-5")


def test_chart_specs_keep_their_layout_and_change_their_data():
    s = settings_for_preset("sbc_gigabit")
    first = chart_specs(compute(s, REGISTRY))
    second = chart_specs(compute(replace(s, bandwidth_mbps=10.0), REGISTRY))
    assert set(first) == {"breakdown", "ranking", "memory"}
    assert first["breakdown"]["vconcat"] == second["breakdown"]["vconcat"]
    assert first["breakdown"]["datasets"] != second["breakdown"]["datasets"]


def test_toml_file_of_ones_own(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text((REPO_ROOT / "examples" / "smart_home.toml").read_text())
    s = settings_for_preset(str(path))
    assert s.n_devices == 3 and compute(s, REGISTRY).summary.startswith("best")
    explorer = Explorer(s, REGISTRY)
    assert explorer.controls["toml"].value == str(path) and explorer.current_settings().preset == str(path)
    explorer.controls["toml"].value = str(tmp_path / "missing.toml")
    assert explorer.message.value.startswith("⚠") and "does not exist" in explorer.message.value
    explorer.controls["toml"].value = ""
    assert explorer.current_settings().preset == explorer.controls["preset"].value


def test_explorer_widget_updates_and_keeps_charts_on_error():
    explorer = Explorer(settings_for_preset("sbc_gigabit"), REGISTRY)
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
    explorer = Explorer(settings_for_preset("sbc_gigabit"), REGISTRY)
    explorer.controls["preset"].value = "smart_home"
    assert explorer.controls["n_devices"].value == 3 and explorer.controls["model"].value == "Llama 2-3B"
    explorer.controls["phase"].value = "decode"
    assert explorer.view.settings.phase == "decode" and "time per token" in explorer.summary.value
    explorer.controls["scheme"].value = "standin_single"
    assert set(explorer.view.table().scheme) == {"standin_single"}
    assert explorer.controls["scheme"].options[0] == ALL


def test_explorer_with_the_real_registry():
    view = compute(settings_for_preset("sbc_gigabit"))
    assert view.summary.startswith("best TTFT")
    assert (view.table().status == "ok").any()
