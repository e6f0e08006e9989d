"""Device specs: validation, shape-dependent efficiency, memory levels, every preset loads with provenance."""

import pytest

from workbench.errors import WorkbenchError
from workbench.hardware import DeviceSpec, MemoryLevel, device_from_table, device_names, load_device


def _device(**kw):
    base = dict(name="d", peak_flops={"fp32": 1e9}, efficiency_gemm=0.8, efficiency_gemv=0.2,
                memory=(MemoryLevel("L1", 1e3, 1e9), MemoryLevel("L2", 1e6, 1e8)))
    return DeviceSpec(**(base | kw))


def test_gemv_slower_than_gemm_and_small_kernels_lose_efficiency():
    d = _device(small_kernel_flops=1e6)
    assert float(d.compute_time(1e9, "fp32", "gemv")) > float(d.compute_time(1e9, "fp32", "gemm"))
    big = float(d.efficiency("gemm", 1e9))
    small = float(d.efficiency("gemm", 1e5))
    assert small < big < 0.8 and big == pytest.approx(0.8 * 1e9 / (1e9 + 1e6))


def test_dtype_falls_back_to_wider_peak():
    assert _device().peak("int8") == 1e9


def test_memory_level_larger_than_parent_is_rejected():
    with pytest.raises(WorkbenchError, match="larger than its parent"):
        _device(memory=(MemoryLevel("L1", 1e7, 1e9), MemoryLevel("L2", 1e6, 1e8)))


@pytest.mark.parametrize("kw,match", [
    (dict(peak_flops={"fp32": -1}), "peak_flops"), (dict(efficiency_gemm=1.5), "efficiency_gemm"),
    (dict(peak_flops={"fp64": 1e9}), "dtype"), (dict(storage_read_bytes_per_s=0), "storage_read")])
def test_bad_device_input(kw, match):
    with pytest.raises(WorkbenchError, match=match):
        _device(**kw)


def test_bad_memory_level():
    with pytest.raises(WorkbenchError, match="bandwidth"):
        MemoryLevel("L2", 1e6, 0)


def test_device_from_table_requires_provenance():
    table = {"meta": {"name": "x", "memory_levels": ["RAM"]},
             "peak_flops_fp32": {"value": 1e9, "unit": "FLOP/s", "kind": "datasheet", "source": "sheet"},
             "mem_RAM_capacity": {"value": 1e9, "unit": "B", "kind": "datasheet", "source": "sheet"},
             "mem_RAM_bandwidth": {"value": 1e9, "unit": "B/s", "kind": "assumed", "source": "guess"}}
    d = device_from_table(table, "x.toml")
    assert d.memory_bytes == 1e9 and d.provenance["mem_RAM_bandwidth"].kind == "assumed"
    del table["mem_RAM_bandwidth"]["source"]
    with pytest.raises(WorkbenchError, match="provenance"):
        device_from_table(table, "x.toml")


def test_unknown_device():
    with pytest.raises(WorkbenchError, match="unknown device"):
        load_device("no-such-device")


@pytest.mark.parametrize("device_id", device_names())
def test_every_preset_loads_and_every_number_has_provenance(device_id):
    d = load_device(device_id)
    assert d.provenance, f"{device_id} has no provenance entries"
    assert all(c.source.strip() for c in d.provenance.values())
