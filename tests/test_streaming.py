"""Issue 31, streaming is not compute: the roofline time of every scheme splits into memory streaming (memory_s)
and arithmetic (compute_s) kernel by kernel, the latency unchanged; a scheme says what bounds it; a device
that states no memory_efficiency takes its class's quoted typical value, and whatif says so."""

from __future__ import annotations

import argparse
import json
import re
import sys

import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import (
    DEVICE_CLASSES,
    DeviceSpec,
    MemoryLevel,
    device_names,
    efficiency_notices,
    is_typical_efficiency,
    load_device,
    typical_memory_efficiency,
)
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.scenarios.arena import COMPONENTS, breakdown_frame, run_arena
from workbench.scenarios.arena_charts import COMPONENT_COLORS, breakdown_spec
from workbench.scenarios.userconfig import config_from_text, load_config
from workbench.scenarios.whatif import breakdown_text
from workbench.schemes import common
from workbench.schemes.base import SCHEMES, Cluster, SchemeResult, Workload, load_all, register, spec_of

sys.path.insert(0, str(REPO_ROOT / "tests"))
from deploy_toml import board_deployment  # noqa: E402
from streaming_cases import case_tables  # noqa: E402

BEFORE = json.loads((REPO_ROOT / "tests" / "golden" / "streaming_split_before.json").read_text())
GB = 1e9


def _board(bandwidth: float = 17.1 * GB, memory_efficiency: float = 0.67) -> DeviceSpec:
    """A Raspberry-Pi-5-like board (examples/sbc_gigabit.toml's numbers): 4x A76, LPDDR4X."""
    return DeviceSpec("pi5", {"fp32": 153.6e9, "fp16": 307.2e9, "int8": 614.4e9}, 0.4, 0.4,
                      memory=(MemoryLevel("LLC", 2 * 2**20, 50 * GB), MemoryLevel("DRAM", 7 * 2**30, bandwidth)),
                      memory_efficiency=memory_efficiency)


def _one(device: DeviceSpec) -> Cluster:
    return Cluster((device,), Topology("switch", 1, Link.from_mbps(1000.0, 0.05)))


# ---- the split leaves every latency as it was ------------------------------------------------------------
def test_every_scheme_keeps_its_latency_and_splits_its_old_compute_exactly():
    """558 (cluster, model, scheme, phase) cases captured before the split: the latency is the same float,
    compute_s + memory_s is the old compute_s bit for bit (the MCU's memory_s is its old other_s, the L2
    transfers, on 2 chips and more), and the parts still add up to the latency. (The captured values were
    refreshed once, after `one_device_is_local` made every scheme local's on one device, before the split.)"""
    seen = moved = 0
    for prefix, table in case_tables():
        for r in table[table.status != "n/a"].itertuples():
            parts = r.compute_s + r.memory_s + r.fixed_s + r.serial_s + r.comm_link_latency_s + r.comm_bytes_s \
                + r.io_stall_s + r.other_s
            assert parts == pytest.approx(r.latency_s, rel=1e-9, abs=1e-15)
            if f"{prefix}|{r.scheme}|{r.phase}" not in BEFORE:  # a scheme registered after the capture (issue 34)
                continue
            if spec_of(r.scheme).engine:  # runs its engine's kernels since kernel_cost: its time moved
                moved += 1
                continue
            latency, compute, other = map(float, BEFORE[f"{prefix}|{r.scheme}|{r.phase}"])
            assert r.latency_s == latency, (prefix, r.scheme, r.phase)
            if r.scheme == "mcu_headwise_tp" and r.n_devices > 1:  # on one chip every scheme is local's
                assert (r.compute_s, r.memory_s, r.other_s) == (compute, other, 0.0)
            else:
                assert r.compute_s + r.memory_s == compute and r.other_s == other, (prefix, r.scheme)
            seen += 1
    dense_kernels = sum(1 for key in BEFORE if not spec_of(key.split("|")[-2]).engine)
    assert len(BEFORE) == 558 and seen == dense_kernels and moved > 0


def test_decode_streams_and_prefill_computes_on_a_board():
    """Every roofline scheme's decode on a board is mostly streaming; its prefill mostly arithmetic."""
    table = run_arena(get_model("Llama 2-7B"), _one(_board()), weight_bits=4.5).table().set_index(["scheme", "phase"])
    for scheme in ("local", "single_device_resident", "layerwise_mp", "megatron_tp", "dllama_allgather_tp"):
        decode, prefill = table.loc[(scheme, "decode")], table.loc[(scheme, "prefill")]
        assert decode.memory_s > 10 * decode.compute_s and decode.bound == "memory", scheme
        assert prefill.compute_s > 10 * prefill.memory_s and prefill.bound == "compute", scheme


# ---- one board's decode is memory-bound, one-for-one with the bandwidth --------------------------------------
@pytest.mark.parametrize("scheme", ["local", "single_device_resident"])
def test_one_board_decode_of_a_7b_model_is_memory_bound_and_scales_one_for_one_with_bandwidth(scheme):
    load_all()
    model, decode = get_model("Llama 2-7B"), Workload("decode", 128, 128, weight_bits=4.5)
    slow = SCHEMES[scheme][1](model, _one(_board(17.1 * GB)), decode)
    fast = SCHEMES[scheme][1](model, _one(_board(34.2 * GB)), decode)
    assert slow.bound == fast.bound == "memory" and slow.memory_s > 0.9 * slow.latency_s
    assert fast.memory_s == pytest.approx(slow.memory_s / 2, rel=1e-12)  # one-for-one
    assert fast.compute_s == slow.compute_s == 0.0  # no decode kernel of a 7B model computes longer than it streams
    assert (fast.fixed_s, fast.serial_s) == (slow.fixed_s, slow.serial_s)
    # the achieved fraction scales it the same way: 0.67 of the bandwidth streams 1/0.67 as long as 1.0 does
    full = SCHEMES[scheme][1](model, _one(_board(17.1 * GB, 1.0)), decode)
    assert slow.memory_s == pytest.approx(full.memory_s / 0.67, rel=1e-12)
    # prefill computes: its arithmetic does not move with the bandwidth, its streaming shrinks with it
    prefill = Workload("prefill", 128, 128, weight_bits=4.5)
    slow, fast = (SCHEMES[scheme][1](model, _one(_board(bw)), prefill) for bw in (17.1 * GB, 34.2 * GB))
    assert slow.bound == fast.bound == "compute" and fast.compute_s == pytest.approx(slow.compute_s, rel=1e-12)
    assert fast.memory_s <= slow.memory_s / 2 * (1 + 1e-12) and fast.latency_s < slow.latency_s


# ---- the roofline's two sides, kernel by kernel -------------------------------------------------------------


# ---- SchemeResult: the split, the bound, the registry ---------------------------------------------------------
def test_split_streaming_is_exact_and_checks_its_share():
    r = SchemeResult("s", "p", "decode", 1.0, compute_s=0.3, fixed_s=0.7)
    for share in (0.0, 0.1, 1 / 3, 0.5, 0.9, 1.0):
        s = r.split_streaming(share)
        assert s.compute_s + s.memory_s == 0.3 and s.memory_s == pytest.approx(0.3 * share, rel=1e-12)
        assert (s.latency_s, s.fixed_s, s.parts_s) == (1.0, 0.7, r.parts_s)
    for bad in (-0.1, 1.5):
        with pytest.raises(WorkbenchError, match="memory share must be in"):
            r.split_streaming(bad)


def test_bound_is_the_largest_component_group():
    def bound(**parts):
        return SchemeResult("s", "p", "decode", sum(parts.values()), **parts).bound

    assert bound(memory_s=0.5, compute_s=0.4) == "memory"
    assert bound(memory_s=0.4, compute_s=0.5) == "compute"
    assert bound(memory_s=0.3, comm_link_latency_s=0.2, comm_bytes_s=0.2) == "communication"  # link + bytes
    assert bound(compute_s=0.1, io_stall_s=0.9) == "IO"
    assert bound(compute_s=0.1, fixed_s=0.2) == "fixed" and bound(serial_s=1.0) == "serial"
    assert bound(other_s=1.0) == "other" and bound() == ""
    assert bound(memory_s=0.5, compute_s=0.5) == "memory"  # the first of equals
    row = SchemeResult("s", "p", "decode", 1.0, memory_s=0.6, compute_s=0.4).row()
    assert (row["memory_s"], row["bound"]) == (0.6, "memory")


def test_the_registry_splits_once_and_not_the_schemes_without_a_roofline():
    load_all()
    model, cluster = get_model("TinyLlama-42M"), _one(_board().with_changes(storage_read_bytes_per_s=90e6))
    w = Workload("decode", 64, 64)
    share = common.memory_share(model, cluster.devices, w)
    plain = SchemeResult("x", "p", "decode", 1.0, compute_s=1.0)

    def inner(model, cluster, workload):
        return plain

    def outer(model, cluster, workload):
        return SCHEMES["test_streaming_inner"][1](model, cluster, workload)  # a registered one calling another

    try:
        register("test_streaming_inner", "p", origin="a test", partition="one", no_moe="a test", no_operators="a test")(inner)
        register("test_streaming_outer", "p", origin="a test", partition="one", no_moe="a test", no_operators="a test")(outer)
        register("test_streaming_plain", "p", origin="a test", partition="one", no_moe="a test", no_operators="a test", streaming=False)(inner)
        once = SCHEMES["test_streaming_outer"][1](model, cluster, w)
        assert once.memory_s == pytest.approx(share, rel=1e-12) and once.compute_s + once.memory_s == 1.0
        unsplit = SCHEMES["test_streaming_plain"][1](model, cluster, w)  # plain, saying why it has no rows
        assert (unsplit.memory_s, unsplit.compute_s, unsplit.no_operators) == (0.0, 1.0, "a test")
    finally:
        for name in ("test_streaming_inner", "test_streaming_outer", "test_streaming_plain"):
            if name in SCHEMES:
                SCHEMES.remove(name)
    for name in ("sti_pipeline", "single_device_streamed"):  # STI's per-layer profile has no roofline
        assert SCHEMES[name][1](model, cluster, w).memory_s == 0.0


# ---- the arena, its charts and whatif show the new component -------------------------------------------------
def test_arena_table_breakdown_and_chart_show_memory_streaming_and_the_bound():
    arena = run_arena(get_model("TinyLlama-42M"), _one(_board()), phases=("decode",), schemes=["local"])
    row = arena.table().iloc[0]
    assert row.bound == "memory" and row.memory_s > 0.9 * row.latency_s
    assert list(COMPONENTS)[:2] == ["memory_s", "compute_s"] and set(COMPONENT_COLORS) == set(COMPONENTS)
    assert len(set(COMPONENT_COLORS.values())) == len(COMPONENTS)
    long = breakdown_frame(arena)
    seconds = dict(zip(long.component, long.seconds))
    assert seconds["memory streaming"] == row.memory_s and seconds["arithmetic"] == row.compute_s
    spec = json.dumps(breakdown_spec(arena))
    assert '"memory streaming"' in spec and "datum.component === \\\"arithmetic\\\"" in spec
    assert breakdown_text(row).startswith("memory ")


# ---- memory_efficiency: stated, or the class's quoted typical value -----------------------------------------
def test_every_preset_states_its_class_and_its_memory_efficiency():
    for name in device_names():
        device = load_device(name)
        assert device.device_class in DEVICE_CLASSES, name
        if device.memory:
            assert "memory_efficiency" in device.provenance and not is_typical_efficiency(device), name


def test_a_file_that_states_none_takes_its_class_typical_value_with_a_notice():
    cpu = typical_memory_efficiency("cpu", "x", "t.toml")
    gpu = typical_memory_efficiency("gpu", "x", "t.toml")
    assert (cpu.value, cpu.kind, gpu.value, gpu.kind) == (0.67, "quoted", 0.83, "quoted")
    assert "SPRACV1B" in cpu.source and "bandwidthTest" in gpu.source
    device = config_from_text(board_deployment('device_class = "cpu"'), "t.toml").cluster.devices[0]
    assert device.memory_efficiency == 0.67 and is_typical_efficiency(device)
    assert efficiency_notices([device, device]) == [
        "notice: board states no memory_efficiency; using 0.67, the typical for cpu (memory_efficiency.toml "
        "typical_cpu: TI application note SPRACV1B (AM64x/AM243x benchmarks, Feb 2022 - Jan 2024), STREAM table)"]
    stated = config_from_text(board_deployment('device_class = "cpu"\nmemory_efficiency = 0.5'), "t.toml")
    assert stated.cluster.devices[0].memory_efficiency == 0.5 and efficiency_notices(stated.cluster.devices) == []


@pytest.mark.parametrize("keys, message", [
    ("", "t.toml: devices[0]: device 'board' states no memory_efficiency; state it"),
    ('device_class = "mcu"', "with a typical value (cpu, gpu); mcu has none"),
    ('device_class = "fpga"', "t.toml: devices[0]: device_class must be one of cpu, gpu, mcu, npu, accelerator, got 'fpga'"),
])
def test_no_silent_memory_efficiency(keys, message):
    text = board_deployment(keys or 'name_note = ""').replace('name_note = ""\n', "")
    text = text.replace("memory_efficiency = 1.0\n", "")
    with pytest.raises(WorkbenchError, match=re.escape(message)) as info:
        config_from_text(text, "t.toml")
    assert "\n" not in str(info.value)


def test_the_examples_state_their_memory_efficiency_and_whatif_prints_the_notice(tmp_path, capsys):
    from workbench.scenarios.whatif import add_arguments, main

    for name in ("sbc_gigabit", "laptops_wifi", "smart_home"):
        config = load_config(REPO_ROOT / "examples" / f"{name}.toml")
        assert all(not is_typical_efficiency(d) and d.memory_efficiency == 0.67 for d in config.cluster.devices)
    text = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text().replace("memory_efficiency = 0.67\n", "")
    path = tmp_path / "pi.toml"
    path.write_text(text)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert main(parser.parse_args([str(path), "--no-charts"])) == 0
    out = capsys.readouterr().out
    assert out.count("notice: Raspberry Pi 5 (8 GB) states no memory_efficiency; using 0.67, the typical for cpu") == 1
    assert "bound by" in out and "memory" in out


