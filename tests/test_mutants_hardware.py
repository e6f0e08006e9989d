"""Tests that kill mutmut survivors in workbench/machine/hardware.py (see docs/mutation.md): values worked by hand."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from workbench.core import fields
from workbench.core.errors import WorkbenchError
from workbench.machine import hardware
from workbench.machine.hardware import (
    DeviceSpec,
    FieldSpec,
    MemoryLevel,
    TomlKey,
    declared_fields,
    device_from_table,
    device_names,
    efficiency_notices,
    is_typical_efficiency,
    load_device,
    typical_memory_efficiency,
)


def _device(**kw) -> DeviceSpec:
    """fp16 2 Gop/s, fp32 1 Gop/s; gemm 0.5, gemv 0.25; L1 1 kB at 1 GB/s (1 pJ/B), L2 1 MB at 100 MB/s (10 pJ/B)."""
    base = dict(name="d", peak_flops={"fp16": 2e9, "fp32": 1e9}, efficiency_gemm=0.5, efficiency_gemv=0.25,
                memory=(MemoryLevel("L1", 1e3, 1e9, 1.0), MemoryLevel("L2", 1e6, 1e8, 10.0)))
    return DeviceSpec(**(base | kw))


def _const(value) -> dict:
    """A preset constant with the provenance keys a preset file needs."""
    return {"value": value, "unit": "1", "kind": "assumed", "source": "test"}


# ---- memory levels --------------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(capacity_bytes=0), "L1 capacity_bytes"),
    (dict(bandwidth_bytes_per_s=0), "L1 bandwidth_bytes_per_s"),
    (dict(energy_pj_per_byte=-1), "L1 energy_pj_per_byte"),
])
def test_memory_level_errors_name_the_level_and_field(kw: dict, match: str) -> None:
    """A bad memory level says which level and which field."""
    args = dict(name="L1", capacity_bytes=1e3, bandwidth_bytes_per_s=1e9) | kw
    with pytest.raises(WorkbenchError, match=match):
        MemoryLevel(**args)


def test_transfer_time_and_energy() -> None:
    """1 kB through 1 GB/s takes 1 us; 1e12 B at 2 pJ/B is 2 J."""
    level = MemoryLevel("L", 1e12, 1e9, 2.0)
    assert float(level.transfer_time(1e3)) == pytest.approx(1e-6)
    assert float(level.transfer_energy(1e12)) == pytest.approx(2.0)
    assert level.transfer_energy([1e12, 5e11]).tolist() == pytest.approx([2.0, 1.0])


def test_float32_inputs_are_costed_in_float64() -> None:
    """JAX hands float32 arrays: the cost model still computes in float64 (no float32 rounding)."""
    d = _device(kernel_launch_s=1e-6)
    x = np.float32(3.0)
    level = d.memory[0]
    for value in (level.transfer_time(x), level.transfer_energy(x), d.compute_time(x), d.launch_time(x),
                  d.stream_time(x), d.stream_time(x, "L1"), d.energy(x),
                  _device(small_kernel_flops=1.0).efficiency("gemm", x)):
        assert np.asarray(value).dtype == np.float64


# ---- device validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(peak_flops={}), "peak_flops needs at least one dtype"),
    (dict(peak_flops={"fp64": 1.0}), "unknown dtype 'fp64'"),
    (dict(efficiency_gemm=0), "efficiency_gemm must be"),
    (dict(efficiency_gemv=0), "efficiency_gemv must be"),
    (dict(small_kernel_flops=-1.0), "small_kernel_flops must be"),
    (dict(power_w=-1.0), "^power_w must be"),
    (dict(idle_power_w=-1.0), "idle_power_w must be"),
    (dict(kernel_launch_s=-1.0), "kernel_launch_s must be"),
    (dict(layer_overhead_s=-1.0), "layer_overhead_s must be"),
    (dict(memory_efficiency=1.5), "memory_efficiency must be"),
    (dict(memory_efficiency=0.0), "memory_efficiency must be"),
    (dict(storage_read_bytes_per_s=0.0), "storage_read_bytes_per_s must be"),
])
def test_device_errors_name_the_field(kw: dict, match: str) -> None:
    """Each bad field is rejected with its own name in the message."""
    with pytest.raises(WorkbenchError, match=match):
        _device(**kw)


def test_boundary_values_are_accepted() -> None:
    """memory_efficiency 1 is allowed; a level as large as its parent is allowed (only larger is not)."""
    assert _device(memory_efficiency=1.0).memory_efficiency == 1.0
    same = (MemoryLevel("L1", 1e6, 1e9), MemoryLevel("L2", 1e6, 1e8))
    assert _device(memory=same).memory_bytes == 1e6


# ---- peaks and efficiency ---------------------------------------------------------------------------
@pytest.mark.parametrize("peaks,dtype,expected", [
    ({"bf16": 3.0, "fp16": 2.0, "fp32": 1.0}, "int8", 3.0),  # int8 falls back to bf16 first
    ({"bf16": 3.0, "fp16": 2.0, "fp32": 1.0}, "int4", 3.0),
    ({"fp16": 2.0, "fp32": 1.0}, "int8", 2.0),
    ({"fp16": 2.0, "fp32": 1.0}, "int4", 2.0),
    ({"fp32": 1.0, "int4": 9.0}, "int8", 1.0),
    ({"fp32": 1.0, "int8": 9.0}, "int4", 9.0),  # int4 codes unpack to int8 dot products
    ({"fp16": 2.0, "fp32": 1.0}, "tf32", 1.0),  # tf32 goes to fp32, never to fp16
    ({"fp16": 2.0, "fp32": 1.0}, "bf16", 2.0),  # other dtypes: fp16, then fp32
    ({"fp32": 1.0, "int8": 9.0}, "bf16", 1.0),
])
def test_peak_falls_back_to_the_nearest_wider_dtype(peaks: dict, dtype: str, expected: float) -> None:
    """`peak` uses the dtype's own peak, else the first listed of its wider dtypes, else the first peak."""
    assert _device(peak_flops=peaks).peak(dtype) == expected


def test_peak_and_efficiency_reject_unknown_names() -> None:
    """Unknown dtypes and kernel kinds are named in the error; no narrower rate is borrowed."""
    with pytest.raises(WorkbenchError, match="no rate for fp32 work: it lists int8, int4, none of fp32"):
        _device(peak_flops={"int8": 9.0, "int4": 7.0}).peak("fp32")
    with pytest.raises(WorkbenchError, match="no rate for int8 work: it lists int4, none of int8, bf16, fp16, fp32;"):
        _device(peak_flops={"int4": 7.0}).peak("int8")
    with pytest.raises(WorkbenchError, match="unknown dtype 'fp64'"):
        _device().peak("fp64")
    with pytest.raises(WorkbenchError, match="unknown kernel kind 'conv'"):
        _device().efficiency("conv")


def test_efficiency_defaults_and_small_kernels() -> None:
    """Default kind is gemm; no kernel size -> the base; no small-kernel loss -> the base even for 0 FLOPs;
    with a half-efficiency size of 1e6, a 1e6-FLOP kernel runs at half the base."""
    d = _device()
    assert d.efficiency() == 0.5
    assert float(d.efficiency("gemv", 0.0)) == 0.25
    small = _device(small_kernel_flops=1e6)
    assert small.efficiency("gemm") == 0.5
    assert float(small.efficiency("gemm", 1e6)) == pytest.approx(0.25)
    assert float(_device(small_kernel_flops=1.0).efficiency("gemm", 1.0)) == pytest.approx(0.25)


def test_compute_time_defaults_to_fp16_gemm() -> None:
    """1e9 FLOPs at fp16 (2e9) x gemm efficiency 0.5 take 1 s; as gemv (0.25) 2 s; at fp32 2 s."""
    d = _device()
    assert float(d.compute_time(1e9)) == pytest.approx(1.0)
    assert float(d.compute_time(1e9, kind="gemv")) == pytest.approx(2.0)
    assert float(d.compute_time(1e9, "fp32")) == pytest.approx(2.0)


def test_compute_time_kernel_size_sets_the_efficiency() -> None:
    """small_kernel_flops 1e9: 1e9 FLOPs in one kernel run at half efficiency (2 s); in 3e9-FLOP kernels
    at 3/4 (4/3 s); 0 FLOPs take exactly 0 s, 0.5 FLOPs a positive time."""
    d = _device(small_kernel_flops=1e9)
    assert float(d.compute_time(1e9)) == pytest.approx(2.0)
    assert float(d.compute_time(1e9, kernel_flops=3e9)) == pytest.approx(4 / 3)
    assert float(d.compute_time(0.0)) == 0.0
    assert float(_device().compute_time(0.5)) == pytest.approx(0.5 / 1e9)


def test_compute_time_on_a_peak_below_one_op_per_second() -> None:
    """A (toy) 0.5 op/s device at efficiency 1 takes 2 s per op (the guard only avoids division by 0)."""
    d = DeviceSpec("slow", {"fp32": 0.5})
    assert float(d.compute_time(1.0, "fp32")) == pytest.approx(2.0)


# ---- memory --------------------------------------------------------------------------------------
def test_stream_time_by_level_and_without_memory() -> None:
    """1 MB from L2 (1e8 B/s) takes 10 ms, from L1 (1e9 B/s) 1 ms, at 50 % memory efficiency twice that;
    a device with no memory streams in zero time, shaped like its input."""
    d = _device()
    assert float(d.stream_time(1e6)) == pytest.approx(1e-2)
    assert float(d.stream_time(1e6, "L1")) == pytest.approx(1e-3)
    assert float(_device(memory_efficiency=0.5).stream_time(1e6, "L1")) == pytest.approx(2e-3)
    bare = _device(memory=())
    zeros = bare.stream_time([1, 2])
    assert zeros.shape == (2,) and zeros.dtype == np.float64 and not zeros.any()


def test_memory_level_lookup() -> None:
    """memory_level finds the named level; an unknown one is named in the error with the known levels."""
    d = _device()
    assert d.memory_level("L1").bandwidth_bytes_per_s == 1e9
    assert d.memory_level("L2").bandwidth_bytes_per_s == 1e8
    with pytest.raises(WorkbenchError, match=r"no memory level 'L9'; levels: \['L1', 'L2'\]"):
        d.memory_level("L9")


def test_energy_adds_power_and_per_level_traffic() -> None:
    """2 W for 3 s = 6 J; plus 1e12 B of L1 at 1 pJ/B (1 J) and 1e11 B of L2 at 10 pJ/B (1 J) = 8 J."""
    d = _device(power_w=2.0)
    assert float(d.energy(3.0)) == pytest.approx(6.0)
    assert float(d.energy(3.0, {"L1": 1e12, "L2": 1e11})) == pytest.approx(8.0)
    assert d.energy([1.0, 2.0]).tolist() == pytest.approx([2.0, 4.0])


def test_with_memory_changes_one_level_only() -> None:
    """with_memory replaces one level's fields and keeps the others; an unknown level raises."""
    d = _device().with_memory("L1", bandwidth_bytes_per_s=5e9)
    assert [m.bandwidth_bytes_per_s for m in d.memory] == [5e9, 1e8]
    assert [m.name for m in d.memory] == ["L1", "L2"]
    assert d.name == "d" and d.peak_flops == {"fp16": 2e9, "fp32": 1e9}
    with pytest.raises(WorkbenchError, match="no memory level"):
        _device().with_memory("L9", bandwidth_bytes_per_s=5e9)


# ---- presets ---------------------------------------------------------------------------------------
def test_device_from_table_reads_every_field() -> None:
    """Every preset key lands in its DeviceSpec field (values chosen unlike the defaults)."""
    table = {
        "meta": {"name": "Box", "memory_levels": ["L1", "L2"]},
        "peak_flops_fp16": _const(4e9), "peak_flops_int8": _const(8e9),
        "efficiency_gemm": _const(0.7), "efficiency_gemv": _const(0.3), "small_kernel_flops": _const(5e5),
        "power_w": _const(7.0), "idle_power_w": _const(2.0), "cores": _const(6),
        "storage_read_bandwidth": _const(3e8), "kernel_launch": _const(4e-6), "layer_overhead": _const(2e-5),
        "memory_efficiency": _const(0.8),
        "mem_L1_capacity": _const(1e4), "mem_L1_bandwidth": _const(1e10), "mem_L1_energy": _const(0.5),
        "mem_L2_capacity": _const(1e8), "mem_L2_bandwidth": _const(1e9),
    }
    d = device_from_table(table, "box.toml")
    assert d.name == "Box"
    assert d.peak_flops == {"fp16": 4e9, "int8": 8e9}
    assert (d.efficiency_gemm, d.efficiency_gemv, d.small_kernel_flops) == (0.7, 0.3, 5e5)
    assert (d.power_w, d.idle_power_w, d.cores) == (7.0, 2.0, 6)
    assert d.storage_read_bytes_per_s == 3e8
    assert (d.kernel_launch_s, d.layer_overhead_s, d.memory_efficiency) == (4e-6, 2e-5, 0.8)
    assert d.memory == (MemoryLevel("L1", 1e4, 1e10, 0.5), MemoryLevel("L2", 1e8, 1e9, 0.0))
    assert d.provenance["power_w"].source == "test"
    assert "meta" in table  # the caller's table is not modified


def test_device_from_table_defaults() -> None:
    """A preset with only a peak: named after its file, efficiency 1, no small-kernel loss, no power,
    one core, no storage, no fixed costs, full memory efficiency, no memory levels."""
    d = device_from_table({"peak_flops_fp32": _const(1e9)}, "data/devices/tiny.toml")
    assert d.name == "tiny"
    assert (d.efficiency_gemm, d.efficiency_gemv, d.small_kernel_flops) == (1.0, 1.0, 0.0)
    assert (d.power_w, d.idle_power_w, d.cores, d.storage_read_bytes_per_s) == (0.0, 0.0, 1, None)
    assert (d.kernel_launch_s, d.layer_overhead_s, d.memory_efficiency) == (0.0, 0.0, 1.0)
    assert d.memory == ()


def test_device_from_table_errors_name_the_file() -> None:
    """A memory level missing a key, or a constant without provenance, names the file and the key."""
    table = {"meta": {"memory_levels": ["L1"]}, "peak_flops_fp32": _const(1e9), "mem_L1_capacity": _const(1e3)}
    with pytest.raises(WorkbenchError, match="box.toml: memory level L1 needs mem_L1_bandwidth"):
        device_from_table(table, "box.toml")
    with pytest.raises(WorkbenchError, match=r"box.toml: \[power_w\]"):
        device_from_table({"peak_flops_fp32": _const(1e9), "power_w": 3.0}, "box.toml")


def test_device_names_and_unknown_device() -> None:
    """The presets are listed by file stem; an unknown id lists them comma-separated."""
    names = device_names()
    assert {"siracusa", "a100"} <= set(names) and names == sorted(names)
    with pytest.raises(WorkbenchError, match=r"unknown device 'nope'; presets: a100, "):
        load_device("nope")


# ---- field declarations -----------------------------------------------------------------------------
def test_field_spec_validation() -> None:
    """A FieldSpec needs a known kind and low <= high (and <= the file bound)."""
    with pytest.raises(WorkbenchError, match="unknown field kind 'date'"):
        FieldSpec("h", kind="date")
    with pytest.raises(WorkbenchError, match=r"low <= high, got \[2.0, 1.0\]"):
        FieldSpec("h", low=2.0, high=1.0)
    with pytest.raises(WorkbenchError, match="low <= high"):
        FieldSpec("h", low=2.0, file_high=1.0)
    assert FieldSpec("h", low=1.0, high=1.0).high == 1.0


def test_field_spec_bounds() -> None:
    """The invariant [low, high] with no floor; from a file, the tighter high and the floor."""
    spec = FieldSpec("h", low=1.0, high=10.0, file_high=5.0, file_floor=2.0)
    assert spec.bounds() == (1.0, 10.0, None)
    assert spec.bounds(from_file=True) == (1.0, 5.0, 2.0)


@pytest.mark.parametrize("spec,args,text", [
    (FieldSpec("h", low=1, high=8, kind="integer"), (), "an integer in [1, 8]"),
    (FieldSpec("h", low=1, kind="integer"), (), "an integer >= 1"),
    (FieldSpec("h", low=0.0, low_open=True), (), "a finite number > 0"),
    (FieldSpec("h", low=0.0), (), "a finite number >= 0"),
    (FieldSpec("h", low=0.0, high=1.0), (), "a number >= 0 and <= 1"),
    (FieldSpec("h", low=0.0, low_open=True, file_high=1e14, file_floor=1e3), (1e9, True),
     "a number > 0 and <= 100000 (at least 1e-06)"),
    (FieldSpec("h", low=0.0, low_open=True, file_high=1e14, file_floor=1e3), (1e9,), "a finite number > 0"),
    (FieldSpec("h", low=2.0, file_floor=4.0, file_high=1e3), (2.0, True), "a number >= 1 and <= 500 (at least 2)"),
    (FieldSpec("h", low=2.0), (2.0,), "a finite number >= 1"),
])
def test_field_spec_range_text(spec: FieldSpec, args: tuple, text: str) -> None:
    """The allowed range in one phrase, in the units of the key (SI / scale)."""
    assert spec.range_text(*args) == text


def test_field_spec_admits_numbers() -> None:
    """Numbers: finite reals (not bools, not strings) in range; the low end open or closed; the file floor."""
    closed = FieldSpec("h", low=0.0, high=1.0)
    assert closed.admits(0.0) and closed.admits(1.0) and closed.admits(np.float32(0.5))
    assert not closed.admits(1.0000001) and not closed.admits(-1e-9)
    assert not closed.admits(float("nan")) and not closed.admits(float("inf"))
    assert not closed.admits(True) and not closed.admits(np.bool_(True)) and not closed.admits("0.5")
    opened = FieldSpec("h", low=0.0, low_open=True, file_floor=1e3, file_high=1e6)
    assert not opened.admits(0.0) and opened.admits(1e-9)
    assert opened.admits(10.0) and not opened.admits(10.0, from_file=True)
    assert opened.admits(1e3, from_file=True) and not opened.admits(2e6, from_file=True)
    assert FieldSpec("h", low=0.0).admits(1e300)


def test_field_spec_admits_integers() -> None:
    """Integers: ints (numpy's too) in range, never floats or bools."""
    spec = FieldSpec("h", low=1, high=8, kind="integer")
    assert spec.admits(1) and spec.admits(8) and spec.admits(np.int64(3))
    assert not spec.admits(0) and not spec.admits(9) and not spec.admits(3.0) and not spec.admits(True)


def test_field_spec_check_scales_to_si() -> None:
    """check returns value x scale; an integer is returned as it is; a bad value names the key and range in
    the key's units."""
    rate = FieldSpec("h", low=0.0, low_open=True, file_high=1e14, file_floor=1e3)
    assert rate.check("bw", 2.0, 1e9) == 2e9
    assert rate.check("bw", 1e6, 1e9) == 1e15  # within the invariant, above a file's bound
    with pytest.raises(WorkbenchError, match=r"bw must be a number > 0 and <= 100000"):
        rate.check("bw", 1e6, 1e9, from_file=True)
    assert FieldSpec("h", low=1, kind="integer").check("cores", 4) == 4
    with pytest.raises(WorkbenchError, match=r"bw must be a number > 0 and <= 100000 \(at least 1e-06\), got 0"):
        rate.check("bw", 0, 1e9, from_file=True)
    with pytest.raises(WorkbenchError, match="cores must be an integer >= 1, got 0"):
        FieldSpec("h", low=1, kind="integer").check("cores", 0)
    with pytest.raises(WorkbenchError, match="x must be a finite number >= 0, got 'a'"):
        FieldSpec("h").check("x", "a")


def test_declared_fields_and_checks() -> None:
    """DeviceSpec declares its user-facing fields in order (provenance is not one); None is allowed where it
    is the default (no storage) and a bad number is named with the instance's prefix."""
    names = [f.name for f, _ in declared_fields(DeviceSpec)]
    assert names[:3] == ["name", "peak_flops", "efficiency_gemm"] and "provenance" not in names
    assert [f.name for f, _ in declared_fields(MemoryLevel)] == ["name", "capacity_bytes", "bandwidth_bytes_per_s",
                                                                 "energy_pj_per_byte"]
    assert _device(storage_read_bytes_per_s=None).storage_read_bytes_per_s is None
    with pytest.raises(WorkbenchError, match="^cores must be an integer >= 1, got 0"):
        _device(cores=0)
    with pytest.raises(WorkbenchError, match=r"^d peak_flops\[fp16\] must be a finite number > 0"):
        _device(peak_flops={"fp16": 0.0})
    assert TomlKey("k").scale == 1.0 and TomlKey("k").unit == ""


def test_field_declaration_helpers() -> None:
    """The one-line declarations: a number with at most one TOML key, a positive rate with file bounds, an
    achieved fraction in (0, 1] under one key, and a dataclass field carrying its spec."""
    key = TomlKey("bw_gb", 1e9, "GB/s")
    assert fields.number_field("n", "W", 1.0, 5.0, key, "power", kind="integer") == FieldSpec(
        "n", "W", 1.0, 5.0, kind="integer", preset_key="power", toml=(key,))
    assert fields.number_field("n", "W", 0.0, 5.0).toml == ()
    assert fields.rate_field("r", "B/s", 1e14, 1e3, key, "bandwidth", kind="integer") == FieldSpec(
        "r", "B/s", 0.0, math.inf, low_open=True, file_high=1e14, file_floor=1e3, kind="integer",
        preset_key="bandwidth", toml=(key,))
    assert fields.fraction_field("f", "efficiency") == FieldSpec(
        "f", "1", 0.0, 1.0, low_open=True, preset_key="efficiency", toml=(TomlKey("efficiency"),))
    spec = FieldSpec("x")
    with_default = fields.declared(spec, 3.0, repr=False)
    assert (with_default.default, with_default.metadata["spec"], with_default.repr) == (3.0, spec, False)
    assert fields.declared(spec).default is dataclasses.MISSING


# ---- issue 31: no silent memory_efficiency --------------------------------------------------------------
def test_a_preset_table_without_memory_efficiency_needs_a_class_with_a_typical_value():
    const = {"unit": "1", "kind": "datasheet", "source": "sheet"}
    table = {"meta": {"memory_levels": ["RAM"], "device_class": "gpu"}, "peak_flops_fp32": {"value": 1e9, **const},
             "mem_RAM_capacity": {"value": 1e9, **const}, "mem_RAM_bandwidth": {"value": 1e9, **const}}
    device = device_from_table(table, "box.toml")
    assert device.memory_efficiency == 0.83 and is_typical_efficiency(device)
    with pytest.raises(WorkbenchError, match="box.toml: device 'box' states no memory_efficiency"):
        device_from_table({**table, "meta": {"memory_levels": ["RAM"]}}, "box.toml")
    no_memory = device_from_table({"peak_flops_fp32": {"value": 1e9, **const}}, "box.toml")
    assert no_memory.memory == () and not is_typical_efficiency(no_memory)  # nothing to stream


def test_a_device_class_is_checked_on_every_instance():
    with pytest.raises(WorkbenchError, match="unknown device_class 'tpu'; allowed: cpu, gpu, mcu, npu, accelerator"):
        _device(device_class="tpu")


def test_typical_memory_efficiency_and_its_notice() -> None:
    """The class's quoted constant (file and key in the error otherwise), a notice naming it once per device
    name, none for a stated value."""
    cpu = typical_memory_efficiency("cpu", "d", "f.toml")
    assert (cpu.name, cpu.value, cpu.unit, cpu.kind) == ("typical_cpu", 0.67, "1", "quoted")
    assert typical_memory_efficiency("gpu", "d", "f.toml").value == 0.83
    for cls, tail in (("", "(cpu, gpu)"), ("npu", "(cpu, gpu); npu has none")):
        with pytest.raises(WorkbenchError, match=r"^f\.toml: device 'd' states no memory_efficiency; state it \(the "
                           r"achieved fraction of the memory bandwidth, in \(0, 1\]\) or a device_class with a "
                           r"typical value " + tail.replace("(", r"\(").replace(")", r"\)") + "$"):
            typical_memory_efficiency(cls, "d", "f.toml")
    with pytest.raises(WorkbenchError, match=r"^f\.toml: device_class must be one of cpu, gpu, mcu, npu, "
                                             r"accelerator, got 'tpu'$"):
        typical_memory_efficiency("tpu", "d", "f.toml")
    typical = _device(device_class="gpu", memory_efficiency=0.83,
                      provenance={"memory_efficiency": typical_memory_efficiency("gpu", "d", "f.toml")})
    stated = _device(name="e", device_class="gpu", provenance={"memory_efficiency": hardware.Constant(
        "memory_efficiency", 0.83, "1", "measured", "bench")})
    assert is_typical_efficiency(typical) and not is_typical_efficiency(stated) and not is_typical_efficiency(_device())
    assert efficiency_notices([typical, stated, typical]) == [
        "notice: d states no memory_efficiency; using 0.83, the typical for gpu (memory_efficiency.toml typical_gpu: "
        "CUDA samples bandwidthTest on a GeForce RTX 2060 (published output, pastebin.com/Fy4S4r7J))"]
