"""Boards as people buy them: a preset lists the RAM sizes its board is sold in and what its OS keeps; a [[devices]]
entry picks a size (ram_gib), its own reserve (os_reserve_gib) or a memory capacity, and the model gets board RAM
less the reserve, the budget the memory checks and whatif use. Bad values: one line naming the key and the allowed."""

from __future__ import annotations

import argparse

import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import OS_RESERVE_KEY, RAM_VARIANTS_KEY, load_device
from workbench.scenarios.userconfig import WEIGHT_FORMATS, config_from_text
from workbench.schemes import load_all

GIB = 2**30
PI5 = "edge_rpi5_8gb"


def deployment(device_lines: str, model: str = "Llama 3.1-8B", fmt: str = "q4_0") -> str:
    """One [[devices]] entry of `device_lines` running `model` at `fmt`."""
    return (f'[model]\nname = "{model}"\nweight_format = "{fmt}"\n[network]\ntopology = "switch"\n'
            f'bandwidth_mbps = 1000\n[[devices]]\n{device_lines}\n')


def board(device_lines: str):
    """The one device a deployment with `device_lines` builds."""
    return config_from_text(deployment(device_lines), "x.toml").cluster.devices[0]


def refused(device_lines: str, *fragments: str) -> str:
    with pytest.raises(WorkbenchError) as info:
        config_from_text(deployment(device_lines), "x.toml")
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_the_pi_presets_budget_their_ram_less_a_cited_os_reserve():
    for device_id, variants in ((PI5, (1, 2, 4, 8, 16)), ("edge_rpi_cm5", (2, 4, 8, 16))):
        device = load_device(device_id)
        assert device.ram_variants == variants
        assert device.provenance[RAM_VARIANTS_KEY].kind == "datasheet"
        assert "introduction.adoc" in device.provenance[RAM_VARIANTS_KEY].source
        reserve = device.provenance[OS_RESERVE_KEY]
        assert reserve.kind == "assumed" and "Pi Zero 2 W" in reserve.source and reserve.value == GIB // 2
        assert device.memory_bytes == 8 * GIB - GIB // 2
        assert (device.board_ram_bytes, device.os_reserve_bytes) == (8 * GIB, GIB // 2)
        assert device.provenance["mem_DRAM_capacity"].value == 8 * GIB  # the datasheet's RAM, budgeted below
    n100 = load_device("edge_intel_n100")  # no reserve stated: the whole level, as before
    assert (n100.board_ram_bytes, n100.os_reserve_bytes, n100.ram_variants) == (0.0, 0.0, ())


@pytest.mark.parametrize("ram", [1, 2, 4, 8, 16])
def test_ram_gib_picks_a_variant(ram):
    device = board(f'preset = "{PI5}"\nram_gib = {ram}')
    assert device.memory_bytes == ram * GIB - GIB // 2
    assert device.name == f"Raspberry Pi 5 ({ram} GB)"
    assert device.memory_level("DRAM").bandwidth_bytes_per_s == load_device(PI5).memory_level("DRAM").bandwidth_bytes_per_s


@pytest.mark.parametrize("value,fragment", [(3, "must be one of 1, 2, 4, 8, 16"), (32, "must be one of 1, 2, 4, 8, 16"),
                                            (-8, "ram_gib must be a number > 0"), ('"8"', "ram_gib must be a number")])
def test_a_ram_size_the_board_is_not_sold_in_lists_the_variants(value, fragment):
    refused(f'preset = "{PI5}"\nram_gib = {value}', "devices[0].ram_gib", fragment)


def test_ram_gib_needs_a_preset_that_lists_variants():
    refused('preset = "edge_intel_n100"\nram_gib = 8', "devices[0].ram_gib", "lists no RAM variants", "capacity_gib")
    own = ('name = "b"\npeak_gflops = { fp32 = 100 }\nmemory_efficiency = 1.0\nram_gib = 8\n'
           '[[devices.memory]]\nname = "DRAM"\ncapacity_gib = 8\nbandwidth_gb_per_s = 17')
    refused(own, "devices[0].ram_gib needs preset")


@pytest.mark.parametrize("reserve,budget", [(0, 8.0), (1, 7.0), (2.5, 5.5)])
def test_os_reserve_gib_sets_what_the_os_keeps(reserve, budget):
    device = board(f'preset = "{PI5}"\nos_reserve_gib = {reserve}')
    assert device.memory_bytes == budget * GIB
    assert device.provenance[OS_RESERVE_KEY].kind == "assumed" and "x.toml" in device.provenance[OS_RESERVE_KEY].source


@pytest.mark.parametrize("lines,fragment", [("os_reserve_gib = -1", "os_reserve_gib must be a number >= 0"),
                                            ("os_reserve_gib = 8", "must be below the board's RAM (8 GiB)"),
                                            ("ram_gib = 2\nos_reserve_gib = 2", "must be below the board's RAM (2 GiB)")])
def test_a_reserve_out_of_range_names_the_key(lines, fragment):
    refused(f'preset = "{PI5}"\n{lines}', "devices[0].os_reserve_gib", fragment)


def test_a_preset_memory_level_may_be_overridden():
    device = board(f'preset = "{PI5}"\n[[devices.memory]]\nname = "DRAM"\ncapacity_gib = 6\nbandwidth_gb_per_s = 10')
    assert device.memory_bytes == 6 * GIB - GIB // 2  # the board's RAM, less the preset's OS reserve
    assert device.memory_level("DRAM").bandwidth_bytes_per_s == 10e9
    refused(f'preset = "{PI5}"\n[[devices.memory]]\nname = "L9"\ncapacity_gib = 6', "devices[0].memory[0].name",
            "one of the preset's levels (DRAM)")
    refused(f'preset = "{PI5}"\nram_gib = 4\n[[devices.memory]]\nname = "DRAM"\ncapacity_gib = 6',
            "give devices[0].ram_gib or the capacity", "not both")
    refused(f'preset = "{PI5}"\n[[devices.memory]]\nname = "DRAM"\ncapacity_gib = 6\ncapacity_mib = 6',
            "at most one of capacity_kib, capacity_mib, capacity_gib")


def resident_step(device_lines: str):
    """single_device_resident's decode step of Llama 3.1-8B q4_0 on the entry's board (its notes say whether the
    weights fit the memory budget or swap)."""
    config = config_from_text(deployment(device_lines), "x.toml")
    return load_all()["single_device_resident"][1](config.model, config.cluster, config.workload("decode"))


def test_the_budget_reaches_the_memory_check():
    peak = resident_step(f'preset = "{PI5}"\nram_gib = 16').peak_memory_bytes[0]
    assert 4 * GIB < peak < 7.5 * GIB  # Llama 3.1-8B at q4_0: fits 8 GB less the reserve, not 4 GB
    assert resident_step(f'preset = "{PI5}"\nram_gib = 8').notes == "fits in DRAM"
    assert resident_step(f'preset = "{PI5}"\nram_gib = 4').notes.startswith("swaps")
    # around the weights: a reserve that leaves 0.1 GiB more than the step needs fits, 0.1 GiB less swaps
    fits, short = (8 * GIB - peak - 0.1 * GIB) / GIB, (8 * GIB - peak + 0.1 * GIB) / GIB
    assert resident_step(f'preset = "{PI5}"\nos_reserve_gib = {fits}').notes == "fits in DRAM"
    assert resident_step(f'preset = "{PI5}"\nos_reserve_gib = {short}').notes.startswith("swaps")
    assert WEIGHT_FORMATS["q4_0"] == pytest.approx(4.5)


def test_whatif_reports_the_budget_in_one_line(tmp_path, capsys):
    from workbench.scenarios.whatif import main

    path = tmp_path / "pi.toml"
    path.write_text(deployment(f'preset = "{PI5}"\nram_gib = 16\nos_reserve_gib = 1.5', model="Llama 3.2-1B"))
    args = argparse.Namespace(config=str(path), out=None, no_charts=True, png=False, seq_len=None, kv_len=None,
                              devices=None, set=[])
    assert main(args) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("memory budget:")]
    assert lines == ["memory budget: Raspberry Pi 5 (16 GB): 16 GiB board RAM - 1.5 GiB OS reserve = 14.5 GiB for "
                     f"the model (os_reserve assumed: devices[0] in {path.name} (a deployment's value))"]
