"""Generic baselines (workbench.schemes.baselines): registered under their names, after the papers' schemes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.schemes import baselines as B
from workbench.schemes import tpi_llm as TPI
from workbench.schemes.base import BASELINE_MODULES, Cluster, Workload, load_all

NAMES = {"single_device_resident": B.evaluate_single_device, "disk_offload_blocking": B.evaluate_disk_offload,
         "layerwise_mp": B.evaluate_layerwise_mp}


def test_registry_lists_the_baselines_under_their_names():
    registry = load_all()
    assert "workbench.schemes.baselines" in BASELINE_MODULES
    for name, fn in NAMES.items():
        assert registry[name] == ("baseline", fn)


def test_load_all_registers_the_baselines_after_every_papers_scheme():
    # a fresh interpreter: in this one the imports above have registered the baselines already
    code = ("from workbench.schemes.base import load_all\n"
            "for name, (_, fn) in load_all().items(): print(name, fn.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules = [line.split()[1] for line in out.splitlines()]
    first = modules.index("workbench.schemes.baselines")
    papers = [i for i, m in enumerate(modules) if m.startswith("workbench.schemes.")
                                                  and not m.startswith("workbench.schemes.planners.") and m != modules[first]]
    assert modules[first:first + len(NAMES)] == [modules[first]] * len(NAMES) and max(papers) < first


def test_baselines_live_only_in_their_module():
    for name in ("evaluate_single_device", "evaluate_disk_offload", "evaluate_layerwise_mp", "mp_layer_ranges"):
        assert hasattr(B, name) and not hasattr(TPI, name)


@pytest.mark.parametrize("n_layers,n_devices", [(32, 3), (7, 7), (5, 2), (1, 1)])
def test_mp_layer_ranges_cover_every_layer_once_earlier_devices_first(n_layers, n_devices):
    ranges = B.mp_layer_ranges(n_layers, n_devices)
    assert ranges[0][0] == 0 and ranges[-1][1] == n_layers
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [b - a for a, b in ranges]
    assert sizes == sorted(sizes, reverse=True) and max(sizes) - min(sizes) <= 1


def test_layerwise_mp_on_one_device_is_the_single_device_step():
    dev = load_device("tpi_mac_pro_m1")
    model, wl = get_model("Llama 2-7B"), Workload("decode", 128, 128, 16, 16)
    one = Cluster((dev,), Topology("switch", 1, Link.from_mbps(1000, 0.1)))
    mp, alone = B.evaluate_layerwise_mp(model, one, wl), B.evaluate_single_device(model, one, wl)
    assert mp.compute_s + mp.memory_s + mp.fixed_s == pytest.approx(alone.compute_s + alone.memory_s + alone.fixed_s)
    assert mp.parts_s == pytest.approx(mp.latency_s) and alone.parts_s == pytest.approx(alone.latency_s)
