"""Device specs: validation, shape-dependent efficiency, memory levels, every preset loads with provenance."""

import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine.hardware import DeviceSpec, MemoryLevel, device_from_table, device_names, load_device


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
    table = {"meta": {"name": "x", "memory_levels": ["RAM"], "device_class": "gpu"},
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


def test_a_dtype_never_borrows_a_narrower_rate():
    """Fail closed: a device listing only int8 (or fp16) has no fp32 rate; the error is one line naming it."""
    int8_only = _device(peak_flops={"int8": 4e9})
    assert int8_only.peak("int8") == 4e9 and int8_only.peak("int4") == 4e9  # int4 codes run as int8 dot products
    for device, dtype in ((int8_only, "fp32"), (int8_only, "fp16"), (_device(peak_flops={"fp16": 2e9}), "fp32")):
        with pytest.raises(WorkbenchError) as info:
            device.peak(dtype)
        assert "\n" not in str(info.value) and f"no rate for {dtype} work" in str(info.value)


def test_rate_dtype_is_the_one_rule_behind_peak_and_compute_dtype():
    from workbench.schemes import common

    d = _device(peak_flops={"fp32": 1e9, "fp16": 2e9, "int8": 4e9})
    assert [d.rate_dtype(t) for t in ("fp32", "tf32", "fp16", "bf16", "int8")] == \
        ["fp32", "fp32", "fp16", "fp16", "int8"]
    assert common.compute_dtype(d, 8, 8) == d.rate_dtype("int8") and d.peak("bf16") == 2e9


@pytest.mark.parametrize("device_id", device_names())
def test_every_preset_resolves_every_dtype_at_a_rate_at_least_as_wide(device_id):
    """The papers' presets all list fp32, so every dtype a scheme may ask of them has a rate."""
    from workbench.machine.hardware import BITS, DTYPES

    d = load_device(device_id)
    for dtype in DTYPES:
        rate = d.rate_dtype(dtype)
        assert rate in d.peak_flops and BITS[rate] >= BITS[dtype] and d.peak(dtype) == d.peak_flops[rate]
