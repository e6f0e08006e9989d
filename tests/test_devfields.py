"""Issue 32, declared once, everywhere: every device value a scheme reads is a typed `DeviceSpec` field (none is
read out of `provenance`, which says where a value comes from), settable from a deployment TOML, and every
registered evaluator has the arena's signature (model, cluster, workload)."""

from __future__ import annotations

import ast
import inspect

import pytest
from deploy_toml import board_deployment

from workbench.core.errors import WorkbenchError
from workbench.core.fields import declared_fields
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import (
    KERNEL_RATE_PREFIX,
    OS_RESERVE_KEY,
    RAM_VARIANTS_KEY,
    DeviceSpec,
    device_names,
    load_device,
    preset_table,
)

# Preset constants no code reads: the inputs a preset's derived numbers were computed from (its peak from
# flops_per_cycle_per_core x clock x cores, a GPU's from cuda_cores x gpu_frequency, the MCU's power per core),
# and the micro-benchmarked host costs the cluster model does not use (jit_dispatch, numpy_op).
DERIVATION_INPUTS = {"flops_per_cycle_per_core", "gpu_frequency", "cuda_cores", "power_per_core_w", "jit_dispatch",
                     "numpy_op",
                     # the edge library (data/devices/edge_*): the factors of its derived peaks and DRAM peak, the
                     # quoted streaming rate memory_efficiency derives from, and the NIC rate its meta link_class names
                     "fp16_flops_per_cycle_per_core", "int8_ops_per_cycle_per_core", "dram_transfer_rate",
                     "dram_bus_width", "achieved_stream_bandwidth", "nic_bandwidth"}
# The functions that may look a constant up in a device's provenance: the typical-efficiency notice reads the
# constant's name and source (where the value comes from), never its value.
PROVENANCE_READERS = {("workbench/machine/hardware.py", "is_typical_efficiency"),
                      ("workbench/machine/hardware.py", "efficiency_notices"),
                      ("workbench/machine/hardware.py", "budget_notices")}  # cites the OS reserve's kind and source
NEW_KEYS = {  # the nine provenance-only preset constants and the stack what-if: field -> (TOML key, TOML value, SI)
    "clock_hz": ("clock_mhz", 825, 825e6), "program_dispatch_s": ("program_dispatch_us", 11, 11e-6),
    "layer_time_floor_s": ("layer_time_floor_ms", 60, 0.06),
    "decompress_weights_per_s": ("decompress_mweights_per_s", 1000, 1e9),
    "swap_capacity_bytes": ("swap_gib", 4, 4 * 2**30), "swap_read_bytes_per_s": ("swap_mb_per_s", 515, 515e6),
    "offload_read_bytes_per_s": ("offload_read_mb_per_s", 1206, 1206e6),
    "access_link_bytes_per_s": ("access_link_mbps", 610, 76.25e6),
    "access_link_latency_s": ("access_link_latency_ms", 1.5, 1.5e-3),
    "stack_s_per_byte": ("stack_ns_per_byte", 2, 2e-9)}


def _is_provenance(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "provenance"


def _provenance_lookup(node: ast.AST) -> bool:
    """`x.provenance[k]`, `x.provenance.get(k)` or `k in x.provenance`."""
    if isinstance(node, ast.Subscript):
        return _is_provenance(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return _is_provenance(node.func.value)
    if isinstance(node, ast.Compare):
        return any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and any(map(_is_provenance, node.comparators))
    return False


def provenance_lookups() -> dict[tuple[str, str], str]:
    """(file, function) -> source of every function in workbench/ that looks a constant up in a provenance."""
    found = {}
    for path in sorted((REPO_ROOT / "workbench").rglob("*.py")):
        text = path.read_text()
        for fn in ast.walk(ast.parse(text)):
            if isinstance(fn, ast.FunctionDef) and any(_provenance_lookup(n) for n in ast.walk(fn)):
                found[(str(path.relative_to(REPO_ROOT)), fn.name)] = ast.get_source_segment(text, fn)
    return found


@pytest.mark.source_scan
def test_no_device_value_is_read_out_of_provenance():
    """Only the typical-efficiency and memory-budget notices look into a device's provenance (for a kind and a
    source), and they read no value there."""
    found = provenance_lookups()
    assert set(found) == PROVENANCE_READERS, f"provenance is for where a value comes from: {sorted(found)}"
    for key, source in found.items():
        assert ".value" not in source, key


def test_the_scan_finds_a_provenance_read():
    """The scan's three shapes (the reads it replaced in Hepti, STI and TPI-LLM)."""
    for line in ('device.provenance.get("clock_hz")', 'd.provenance["link_bandwidth"].value',
                 '"swap_capacity" in device.provenance'):
        assert any(_provenance_lookup(n) for n in ast.walk(ast.parse(line))), line
    assert not any(_provenance_lookup(n) for n in ast.walk(ast.parse("d.provenance.values()")))


def test_every_preset_constant_is_a_field_or_a_derivation_input():
    """A preset's constant loads into a DeviceSpec field (by its preset_key), a peak, a memory level, or is
    one of the named derivation inputs no code reads: no value rides in provenance alone."""
    keys = {s.preset_key for _, s in declared_fields(DeviceSpec) if s.preset_key}
    keys |= {RAM_VARIANTS_KEY, OS_RESERVE_KEY}  # device_from_table loads them into ram_variants / os_reserve_bytes
    for device_id in device_names():
        for name in preset_table(device_id):
            if name != "meta" and not name.startswith(("peak_flops_", "mem_", KERNEL_RATE_PREFIX)):  # kernel_rates
                assert name in keys | DERIVATION_INPUTS, (device_id, name)


@pytest.mark.parametrize("field_name", sorted(NEW_KEYS))
def test_each_new_field_is_set_from_a_deployment_toml(field_name):
    """Each field is read from its TOML key in the key's unit (the access link's two keys come together)."""
    key, value, si = NEW_KEYS[field_name]
    extra = {"access_link_mbps": "\naccess_link_latency_ms = 1", "access_link_latency_ms": "\naccess_link_mbps = 100"}
    from workbench.scenarios.userconfig import config_from_text
    text = board_deployment(f'{key} = {value}{extra.get(key, "")}\ndevice_class = "cpu"', bandwidth_gb_per_s=17)
    device = config_from_text(text, "t.toml").cluster.devices[0]
    assert getattr(device, field_name) == pytest.approx(si, rel=1e-12)


def test_the_presets_load_the_nine_keys_into_their_fields():
    """The values the schemes read from provenance before, now the fields' (the preset files unchanged)."""
    mac, dell, gpu = load_device("tpi_mac_pro_m1"), load_device("tpi_dell_i7_1165g7"), load_device("sti_jetson_nano_gpu")
    assert (mac.swap_capacity_bytes, mac.swap_read_bytes_per_s, mac.offload_read_bytes_per_s) == (32 * 2**30, 0.515e9,
                                                                                                  1.206e9)
    assert (dell.access_link_bytes_per_s, dell.access_link_latency_s, dell.swap_read_bytes_per_s) == (76.25e6, 1.5e-3,
                                                                                                      None)
    assert (gpu.layer_time_floor_s, gpu.decompress_weights_per_s) == (0.060, 1e9)
    assert load_device("jetson_nano_cpu_m").clock_hz == 825e6 and load_device("jetson_nano_gpu_460").clock_hz == 0.0
    assert load_device("this_machine_cpu").program_dispatch_s == pytest.approx(1.13096e-05, rel=0)


def test_an_access_link_needs_both_its_bandwidth_and_its_latency():
    dell = load_device("tpi_dell_i7_1165g7")
    with pytest.raises(WorkbenchError, match="access_link_bytes_per_s and access_link_latency_s come together"):
        dell.with_changes(access_link_latency_s=None)


def test_a_missing_storage_rate_is_one_line_naming_both_keys():
    from workbench.schemes.tpi_llm import storage_rate
    board = load_device("jetson_nano_cpu_m")
    with pytest.raises(WorkbenchError) as info:
        storage_rate(board, "swap", "swapping its weights")
    assert "\n" not in str(info.value) and "storage_read_mb_per_s (nor swap_mb_per_s)" in str(info.value)
    assert storage_rate(load_device("tpi_dell_i7_1165g7"), "offload", "x") == \
        load_device("tpi_dell_i7_1165g7").storage_read_bytes_per_s



def test_every_registered_evaluator_takes_exactly_model_cluster_workload():
    from workbench.schemes.base import load_all
    for name, (_, evaluator) in load_all().items():
        params = list(inspect.signature(evaluator).parameters)
        assert params == ["model", "cluster", "workload"], (name, params)


# ---- per-device access links through the collective table ----------------------------------------------------
@pytest.mark.parametrize("collective", ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"])
def test_a_star_on_equal_access_links_is_the_tables_star_across_two_hops(collective):
    """Equal spokes: the table's star with each path two links long (worker -> router -> master)."""
    from workbench.machine.network import collective_latency, star_on_access_links
    n, m, bw, lat = 5, 3e5, 40e6, 2e-3
    link, data = star_on_access_links(collective, m, [bw] * n, [lat] * n)
    assert (link, data) == pytest.approx(collective_latency("star", collective, n, m, bw, lat, path_hops=2,
                                                            breakdown=True), rel=1e-15)


def test_the_slowest_access_link_binds_a_star():
    """The master's link serialises the busiest bytes; a slow enough worker link binds instead, and the slowest
    worker's latency sets the path."""
    from workbench.machine.network import collective_cost, star_on_access_links
    m, cost = 1e6, collective_cost("star", "all_reduce", 3, 1e6)
    link, data = star_on_access_links("all_reduce", m, [100e6, 100e6, 100e6], [1e-3, 2e-3, 5e-3])
    assert link == pytest.approx(float(cost.steps) * 6e-3) and data == pytest.approx(float(cost.busiest_bytes) / 100e6)
    _, slow = star_on_access_links("all_reduce", m, [100e6, 100e6, 1e6], [1e-3, 2e-3, 5e-3])
    assert slow == pytest.approx(float(cost.steps) * m / 1e6)
    with pytest.raises(WorkbenchError, match="one bandwidth and one latency per device"):
        star_on_access_links("all_reduce", m, [1e6], [1e-3])


def test_tpi_costs_the_laptops_access_links_through_the_table():
    """TPI-LLM's star and hand-off on the Table 7 laptops are `network.star_on_access_links` of their own links."""
    import numpy as np

    from workbench.machine.network import star_on_access_links
    from workbench.papers.tpi_llm import laptop_cluster
    from workbench.schemes.tpi_llm import collective_time, p2p_time
    cluster = laptop_cluster()
    bw = np.array([d.access_link_bytes_per_s for d in cluster.devices])
    lat = np.array([d.access_link_latency_s for d in cluster.devices])
    assert collective_time(cluster, "star", "all_reduce", 8192.0) == star_on_access_links("all_reduce", 8192.0, bw, lat)
    assert p2p_time(cluster, 1, 2, 8192.0) == sum(star_on_access_links("broadcast", 8192.0, bw[[1, 2]], lat[[1, 2]]))
    assert p2p_time(cluster, 1, 2, 8192.0) == pytest.approx(lat[1] + lat[2] + 8192.0 / min(bw[1], bw[2]), rel=1e-15)


def test_an_overridden_access_link_is_the_field_and_says_it_is_assumed():
    from workbench.papers.tpi_llm import laptop_devices
    for device in laptop_devices(bandwidth_mbps=100.0):
        assert device.access_link_bytes_per_s == 12.5e6
        constant = device.provenance["link_bandwidth"]
        assert (constant.value, constant.unit, constant.kind, constant.source) == (12.5e6, "B/s", "assumed",
                                                                                   "overridden: 100.0 Mbps")


# ---- the network stack's CPU cost: a device field, costed in the collective table's bytes term ------------------
def test_the_collective_table_moves_bytes_no_faster_than_the_stack():
    from workbench.machine.network import collective_cost, collective_latency
    busiest = float(collective_cost("ring", "all_reduce", 4, 1e6).busiest_bytes)
    args = ("ring", "all_reduce", 4, 1e6, 125e6, 1e-4)
    assert collective_latency(*args, breakdown=True, stack_s_per_byte=1e-9)[1] == busiest / 125e6  # wire binds
    assert collective_latency(*args, breakdown=True, stack_s_per_byte=2e-8)[1] == pytest.approx(busiest * 2e-8)
    with pytest.raises(WorkbenchError, match="stack_s_per_byte must be finite and >= 0"):
        collective_latency(*args, stack_s_per_byte=-1e-9)


def test_a_devices_stack_cost_slows_galaxys_collectives_through_its_field():
    """The slowest endpoint's stack sets Megatron-LM's bytes time; the what-if is the field, not a keyword."""
    from workbench.model.models import get_model
    from workbench.papers.galaxy import environment, with_network_stack, workload
    from workbench.schemes.base import Cluster
    from workbench.schemes.galaxy import evaluate_megatron_tp
    model, wl, base = get_model("BERT-L"), workload(96), environment("A", 1000)
    stacked = with_network_stack(base, 40.0)
    assert [d.stack_s_per_byte for d in stacked.devices] == pytest.approx([40.0 / d.clock_hz for d in base.devices])
    one_slow = Cluster(base.devices[:-1] + (base.devices[-1].with_changes(stack_s_per_byte=1e-6),), base.topology)
    plain, slow = evaluate_megatron_tp(model, base, wl), evaluate_megatron_tp(model, one_slow, wl)
    assert slow.comm_bytes_s > 10 * plain.comm_bytes_s and slow.comm_link_latency_s == plain.comm_link_latency_s
    assert evaluate_megatron_tp(model, stacked, wl).latency_s > plain.latency_s
