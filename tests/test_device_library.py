"""The edge-device library (data/devices/edge_*.toml) and the link classes (data/constants/links.toml).

Every preset's every constant carries a kind and a source (parsed by `workbench.core.constants.parse_constants`, the
one check every data file goes through; a fixture with a missing source shows it fails); the derived peaks equal
their factors (cores x per-cycle rate x clock), the DRAM peak its transfer rate x bus width, and memory_efficiency
the quoted achieved rate over that peak (a preset with no quoted rate says its efficiency is assumed). Each preset
loads and costs a Llama 3.1-8B q4_0 decode step. Values are written to 6 significant digits, hence REL.
"""

from __future__ import annotations

import math
import tomllib
from functools import cache

import pytest

from workbench.core.constants import KINDS, load_constants, parse_constants
from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import DEVICES_DIR, device_from_table, load_device
from workbench.machine.network import LINK_CLASSES, LINK_CLASSES_PATH, Link, Topology, link_class
from workbench.model.models import get_model
from workbench.scenarios.userconfig import WEIGHT_FORMATS
from workbench.schemes import Cluster, Workload, load_all

EDGE = sorted(p.stem for p in DEVICES_DIR.glob("edge_*.toml"))
REL = 1e-5  # the files hold 6 significant digits
# (peak constant, its per-cycle factor): a peak present must equal cores x factor x clock_hz
PEAK_FACTORS = {"peak_flops_fp32": "flops_per_cycle_per_core", "peak_flops_fp16": "fp16_flops_per_cycle_per_core",
                "peak_flops_int8": "int8_ops_per_cycle_per_core"}


@cache
def table(device_id: str) -> dict:
    """The raw TOML table of a library preset."""
    with open(DEVICES_DIR / f"{device_id}.toml", "rb") as f:
        return tomllib.load(f)


def constants(device_id: str):
    """The preset's constants, through the one provenance check (raises on a missing kind or source)."""
    raw = dict(table(device_id))
    raw.pop("meta")
    return parse_constants(raw, f"{device_id}.toml")


def test_the_library_holds_at_least_twelve_edge_devices():
    assert len(EDGE) >= 12, EDGE
    classes = {table(d)["meta"]["device_class"] for d in EDGE}
    assert {"cpu", "gpu"} <= classes


@pytest.mark.parametrize("device_id", EDGE)
def test_each_preset_names_the_link_class_its_nic_runs(device_id):
    meta, c = table(device_id)["meta"], constants(device_id)
    assert meta["link_class"] in LINK_CLASSES
    assert c["nic_bandwidth"].value >= link_class(meta["link_class"]).bandwidth_bytes_per_s  # the NIC carries the class


@pytest.mark.parametrize("device_id", EDGE)
def test_every_constant_has_a_kind_and_a_source(device_id):
    for name, constant in constants(device_id).items():
        assert constant.kind in KINDS, name
        assert constant.source.strip(), name


def test_a_constant_without_a_source_fails_to_load():
    raw = {key: dict(value) if isinstance(value, dict) else value for key, value in table(EDGE[0]).items()}
    del raw["clock_hz"]["source"]
    with pytest.raises(WorkbenchError, match="clock_hz.*lacks provenance"):
        device_from_table(raw, "fixture.toml")
    raw["clock_hz"]["source"] = "  "
    with pytest.raises(WorkbenchError, match="source"):
        device_from_table(raw, "fixture.toml")
    raw["clock_hz"].update(source="x", kind="guessed")
    with pytest.raises(WorkbenchError, match="kind"):
        device_from_table(raw, "fixture.toml")


@pytest.mark.parametrize("device_id", EDGE)
def test_derived_peaks_equal_their_factors(device_id):
    c = constants(device_id)
    assert c["peak_flops_fp32"].kind == "derived"
    found = 0
    for peak, factor in PEAK_FACTORS.items():
        assert (peak in c) == (factor in c), f"{peak} and {factor} come together"
        if peak in c:
            found += 1
            expected = c["cores"].value * c[factor].value * c["clock_hz"].value
            assert c[peak].value == pytest.approx(expected, rel=REL), peak
            assert load_device(device_id).peak_flops[peak.removeprefix("peak_flops_")] == c[peak].value
    assert found >= 1


@pytest.mark.parametrize("device_id", EDGE)
def test_dram_peak_is_transfer_rate_times_bus_width(device_id):
    c = constants(device_id)
    expected = c["dram_transfer_rate"].value * c["dram_bus_width"].value / 8
    assert c["mem_DRAM_bandwidth"].kind == "derived"
    assert c["mem_DRAM_bandwidth"].value == pytest.approx(expected, rel=REL)
    assert load_device(device_id).memory[-1].bandwidth_bytes_per_s == c["mem_DRAM_bandwidth"].value


@pytest.mark.parametrize("device_id", EDGE)
def test_memory_efficiency_is_achieved_over_peak(device_id):
    c = constants(device_id)
    efficiency = c["memory_efficiency"]
    if "achieved_stream_bandwidth" in c:
        assert c["achieved_stream_bandwidth"].kind == "quoted"
        assert efficiency.kind == "derived"
        assert efficiency.value == pytest.approx(c["achieved_stream_bandwidth"].value / c["mem_DRAM_bandwidth"].value,
                                                 rel=REL)
    else:  # no published measurement: it must say so
        assert efficiency.kind == "assumed"
    assert load_device(device_id).memory_efficiency == efficiency.value


def test_most_of_the_library_quotes_its_streaming_rate():
    quoted = [d for d in EDGE if "achieved_stream_bandwidth" in constants(d)]
    assert len(quoted) >= 9, quoted


def decode_step(device, model_name: str = "Llama 3.1-8B"):
    """The `local` scheme's q4_0 decode step (128 tokens attended) of `model_name` on `device` alone."""
    _, fn = load_all()["local"]
    cluster = Cluster((device,), Topology("switch", 1, Link.from_mbps(1000.0)))
    workload = Workload(phase="decode", seq_len=128, kv_len=128, weight_bits=WEIGHT_FORMATS["q4_0"],
                        activation_bits=16)
    return fn(get_model(model_name), cluster, workload)


@pytest.mark.parametrize("device_id", EDGE)
def test_each_preset_costs_a_llama_decode_step(device_id):
    device = load_device(device_id)
    result = decode_step(device)
    assert math.isfinite(result.latency_s) and result.latency_s > 0
    assert not result.oom
    slower = decode_step(device.with_changes(memory_efficiency=device.memory_efficiency / 2))
    assert slower.latency_s > result.latency_s  # the step streams its weights at the quoted rate


# ---- link classes ------------------------------------------------------------------------------------
def test_every_link_constant_is_cited_and_each_class_builds():
    cited = load_constants(LINK_CLASSES_PATH)
    assert all(c.kind in KINDS and c.source.strip() for c in cited.values())
    for name in LINK_CLASSES:
        link = link_class(name)
        assert link.bandwidth_bytes_per_s == cited[f"{name}_bandwidth"].value
        assert link.latency_s == cited[f"{name}_latency"].value
        assert link.message_overhead_s == cited[f"{name}_message_overhead"].value
    with pytest.raises(WorkbenchError, match="link class"):
        link_class("ethernet_10g")


def test_link_constants_split_the_quoted_round_trips():
    c = {k: v.value for k, v in load_constants(LINK_CLASSES_PATH).items()}
    assert c["ethernet_1g_latency"] == pytest.approx(c["ethernet_1g_switch_rtt"] / 2)
    # a message on a switch: 2 hops + o, so the ping round trip is twice that
    assert 2 * (2 * c["ethernet_1g_latency"] + c["ethernet_1g_message_overhead"]) == pytest.approx(c["ethernet_1g_ping_rtt"])
    assert 2 * (c["wifi5_latency"] + c["wifi5_message_overhead"]) == pytest.approx(c["wifi5_median_rtt"])
    assert link_class("wifi5").latency_s > 10 * link_class("ethernet_1g").latency_s


def test_a_deployment_names_a_link_class_and_overrides_one_of_its_numbers(tmp_path):
    """`[network] link_class` gives the class's cited bandwidth, latency and per-message time; a key beside it wins;
    an unknown class is one line listing the classes."""
    from workbench.core.errors import WorkbenchError
    from workbench.machine.network import link_class
    from workbench.scenarios.userconfig import load_config

    text = '''
[model]
name = "Llama 3.1-8B"
weight_format = "q4_0"
[network]
topology = "switch"
{network}
[[devices]]
preset = "edge_rpi5_8gb"
count = 2
'''
    path = tmp_path / "pi5.toml"
    path.write_text(text.format(network='link_class = "ethernet_1g"'))
    link = load_config(path).cluster.topology.link
    want = link_class("ethernet_1g")
    assert (link.bandwidth_bytes_per_s, link.latency_s, link.message_overhead_s) == \
        (want.bandwidth_bytes_per_s, want.latency_s, want.message_overhead_s)
    path.write_text(text.format(network='link_class = "wifi5"\nlatency_ms = 2.0'))
    link = load_config(path).cluster.topology.link
    assert link.latency_s == pytest.approx(2e-3)
    assert link.message_overhead_s == link_class("wifi5").message_overhead_s
    path.write_text(text.format(network='link_class = "wifi7"'))
    with pytest.raises(WorkbenchError, match="network.link_class must be one of ethernet_1g") as info:
        load_config(path)
    assert "\n" not in str(info.value)
    path.write_text(text.format(network=""))
    with pytest.raises(WorkbenchError, match="missing key network.bandwidth_mbps \\(or network.link_class"):
        load_config(path)
