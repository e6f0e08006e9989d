"""Small-kernel streaming: a kernel below `small_kernel_bytes` is not split across the cores and streams at one
core's rate (`DeviceSpec.kernel_stream_time`); off (0) by default, so every other preset costs as before."""

from __future__ import annotations

import tomllib

import numpy as np
import pandas as pd
import pytest
from deploy_toml import board_deployment
from profile_rows import base_profile_rows, provenance

from workbench.core.errors import WorkbenchError
from workbench.core.units import GIB, MIB
from workbench.machine.hardware import DeviceSpec, MemoryLevel, device_from_table, device_names, load_device
from workbench.measure.cluster.predict import shared_device
from workbench.measure.profile.microbench import (
    GEMV_SWEEP_BYTES,
    gemv_size_rows,
    gemv_sweep_lengths,
    small_kernel_stream,
)
from workbench.model.models import get_model
from workbench.schemes.base import Workload
from workbench.schemes.common import layer_time, roofline_time

BULK = 40e9 * 0.5  # bandwidth x memory_efficiency of `board`
CORE = 10e9


def board(**changes) -> DeviceSpec:
    """A two-core device with 20 GB/s bulk streaming and, unless changed, a 10 GB/s core below 4 MiB."""
    fields = dict(name="board", peak_flops={"fp32": 1e11}, memory=(MemoryLevel("DRAM", 8 * GIB, 40e9),),
                  memory_efficiency=0.5, cores=2, small_kernel_bytes=4 * MIB, core_stream_bytes_per_s=CORE)
    return DeviceSpec(**{**fields, **changes})


def test_a_small_kernel_streams_at_the_core_rate_a_large_one_at_the_bulk_rate():
    dev = board()
    sizes = np.array([0.0, 1 * MIB, 4 * MIB - 1, 4 * MIB, 64 * MIB])
    expect = np.array([0.0, 1 * MIB / CORE, (4 * MIB - 1) / CORE, 4 * MIB / BULK, 64 * MIB / BULK])
    assert dev.kernel_stream_time(sizes) == pytest.approx(expect)
    assert dev.stream_time(1 * MIB) == pytest.approx(1 * MIB / BULK)  # bulk bytes stay at the machine's rate
    # one kernel's roofline: a 1 MiB GEMV at the core rate, a 64 MiB one at the bulk rate (compute is negligible)
    assert roofline_time(dev, 2.0 * 512 * 512, 1 * MIB, "fp32", "gemv") == pytest.approx(1 * MIB / CORE, rel=1e-3)
    assert roofline_time(dev, 2.0 * 4096**2, 64 * MIB, "fp32", "gemv") == pytest.approx(64 * MIB / BULK, rel=1e-3)
    # a core faster than the bulk share is capped by it
    assert board(core_stream_bytes_per_s=1e12).kernel_stream_time(1 * MIB) == pytest.approx(1 * MIB / BULK)


@pytest.mark.parametrize("device_id", device_names())
def test_off_by_default_roofline_is_bandwidth_times_memory_efficiency(device_id):
    dev = load_device(device_id)
    if device_id != "this_machine_cpu":
        assert dev.small_kernel_bytes == 0 and dev.core_stream_bytes_per_s == 0
    dev = dev.with_changes(small_kernel_bytes=0.0, core_stream_bytes_per_s=0.0)
    if not dev.memory:
        pytest.skip(f"{device_id} lists no memory")
    n_bytes = np.array([1e3, 1 * MIB, 64 * MIB])
    dtype = next(iter(dev.peak_flops))
    bulk = n_bytes / (dev.memory[-1].bandwidth_bytes_per_s * dev.memory_efficiency)
    compute = 1.0 / (dev.peak(dtype) * dev.efficiency("gemv", 1.0))
    expect = np.maximum(compute, bulk) + dev.kernel_launch_s
    assert roofline_time(dev, 1.0, n_bytes, dtype, "gemv") == pytest.approx(expect, rel=1e-12)
    assert dev.kernel_stream_time(n_bytes) == pytest.approx(dev.stream_time(n_bytes), rel=0)


def test_the_two_fields_are_on_together_or_off_together_in_one_line():
    for changes in ({"core_stream_bytes_per_s": 0.0}, {"small_kernel_bytes": 0.0}):
        with pytest.raises(WorkbenchError, match="small_kernel_bytes and core_stream_bytes_per_s") as err:
            board(**changes)
        assert "\n" not in str(err.value)
    with pytest.raises(WorkbenchError, match="core_stream_bytes_per_s must be"):
        board(core_stream_bytes_per_s=-1.0)
    with pytest.raises(WorkbenchError, match="small_kernel_bytes must be"):
        board(small_kernel_bytes=-1.0)
    assert board(small_kernel_bytes=0.0, core_stream_bytes_per_s=0.0).kernel_stream_time(MIB) == pytest.approx(MIB / BULK)


def test_a_small_model_decode_layer_on_this_machine_is_slower_with_the_core_rate():
    model, dev = get_model("TinyLlama-42M"), load_device("this_machine_cpu")
    assert dev.small_kernel_bytes > 0 and dev.core_stream_bytes_per_s > 0
    assert dev.provenance["small_kernel_bytes"].kind == "measured"
    assert dev.provenance["core_stream_bandwidth"].kind == "measured"
    decode = Workload("decode", seq_len=36, kv_len=36, weight_bits=32, activation_bits=32)
    off = dev.with_changes(small_kernel_bytes=0.0, core_stream_bytes_per_s=0.0)
    assert layer_time(model, dev, decode) > 1.1 * layer_time(model, off, decode)


def test_co_located_processes_share_a_small_kernel_rate_like_every_other():
    # measured (data/cluster/colocated.csv): two processes streaming 1 MiB GEMVs each get about half, not a core each
    dev = board()
    assert shared_device(dev, 2).core_stream_bytes_per_s == pytest.approx(CORE / 2)
    four = shared_device(dev, 4)
    assert four.core_stream_bytes_per_s == pytest.approx(CORE / 4) and four.small_kernel_bytes == 4 * MIB
    assert four.kernel_stream_time(MIB) == pytest.approx(MIB / min(BULK / 4, CORE / 4))
    measured = shared_device(dev, 2, share=0.6)
    assert measured.core_stream_bytes_per_s == pytest.approx(0.6 * CORE)
    assert measured.memory[-1].bandwidth_bytes_per_s == pytest.approx(0.6 * dev.memory[-1].bandwidth_bytes_per_s)
    with pytest.raises(WorkbenchError, match="share must be"):
        shared_device(dev, 2, share=1.5)
    assert shared_device(board(small_kernel_bytes=0.0, core_stream_bytes_per_s=0.0), 4).core_stream_bytes_per_s == 0


def _sweep(rates_gbs: dict[float, float]) -> pd.DataFrame:
    """gemv_size_fp32 rows: {MiB per kernel: GB/s}."""
    return pd.DataFrame([{"benchmark": "gemv_size_fp32", "size": mib * MIB, "seconds": mib * MIB / (r * 1e9),
                          "rate": r * 1e9} for mib, r in rates_gbs.items()])


def test_the_split_and_the_core_rate_come_from_the_sweep():
    step = _sweep({0.25: 12.4, 0.5: 12.4, 1: 12.6, 2: 13.0, 4: 21.9, 8: 19.5, 16: 21.7, 64: 23.2})
    core, split = small_kernel_stream(step, 26.7e9)
    assert split == 4 * MIB and core == pytest.approx(12.5e9)  # the median of the four sizes below 4 MiB
    assert small_kernel_stream(_sweep({0.25: 25.0, 1: 25.5, 4: 26.0, 16: 26.5}), 26.7e9) == (0.0, 0.0)
    assert small_kernel_stream(_sweep({0.25: 12.0, 1: 12.5}), 26.7e9) == (0.0, 0.0)  # no size reaches the midpoint
    assert small_kernel_stream(_sweep({1: 12.0}), 26.7e9) == (0.0, 0.0)


def test_the_sweep_rows_are_slopes_past_the_cache():
    for n in (256, 512, 1024, 2048, 4096):
        short, long = gemv_sweep_lengths(n)
        assert long * 4 * n * n >= GEMV_SWEEP_BYTES and short * 4 * n * n >= 2 * 32 * MIB and 1 <= short < long
    best = {(256, 8): 1e-4 + 8 * 2**18 / 12e9, (256, 16): 1e-4 + 16 * 2**18 / 12e9,
            (2048, 2): 1e-4 + 2 * 2**24 / 24e9, (2048, 4): 1e-4 + 4 * 2**24 / 24e9}
    rows = pd.DataFrame(gemv_size_rows(best))
    assert list(rows["size"]) == [2**18, 2**24] and rows.rate.tolist() == pytest.approx([12e9, 24e9])


def test_the_profile_writes_both_constants_measured():
    from workbench.measure.profile.device_toml import device_constants, device_toml

    rows = base_profile_rows()
    bench = pd.concat([pd.DataFrame(rows), _sweep({1: 12.0, 16: 23.0})], ignore_index=True)
    constants = device_constants(bench, provenance("test machine"))
    dev = device_from_table(tomllib.loads(device_toml(constants, "t", "")), "t.toml")
    assert constants["small_kernel_bytes"].value == 16 * MIB  # the split is the 16 MiB size, exactly
    # the file keeps 6 significant digits (`constants_toml`, the rule of data/devices/this_machine_cpu.toml)
    assert dev.small_kernel_bytes == pytest.approx(16 * MIB, rel=1e-6) and dev.core_stream_bytes_per_s == pytest.approx(12e9)
    for key in ("small_kernel_bytes", "core_stream_bandwidth"):
        assert constants[key].kind == "measured" and "2020-01-01" in constants[key].source, key
    flat = pd.concat([bench[bench.benchmark != "gemv_size_fp32"], _sweep({1: 23.0, 16: 23.5})], ignore_index=True)
    off = device_from_table(tomllib.loads(device_toml(device_constants(flat, provenance("tm", "d")), "t", "")), "t.toml")
    assert off.small_kernel_bytes == 0 and off.core_stream_bytes_per_s == 0


DEPLOY = board_deployment("memory_efficiency = 0.5\nsmall_kernel_mib = 4\ncore_stream_gb_per_s = 10",
                          "weight_bits = 32\nactivation_bits = 32")


def test_deployment_keys_set_the_fields_and_a_bad_value_is_one_line_naming_the_key():
    from workbench.scenarios.userconfig import config_from_text

    dev = config_from_text(DEPLOY, "t.toml").cluster.devices[0]
    assert (dev.small_kernel_bytes, dev.core_stream_bytes_per_s) == pytest.approx((4 * MIB, 10e9))
    for good, bad in (("small_kernel_mib = 4", "small_kernel_mib = -1"),
                      ("core_stream_gb_per_s = 10", "core_stream_gb_per_s = -2")):
        with pytest.raises(WorkbenchError, match=bad.split(" =")[0]) as err:
            config_from_text(DEPLOY.replace(good, bad), "t.toml")
        assert "\n" not in str(err.value)
    with pytest.raises(WorkbenchError, match="small_kernel_bytes and core_stream_bytes_per_s") as err:
        config_from_text(DEPLOY.replace("core_stream_gb_per_s = 10\n", ""), "t.toml")
    assert "\n" not in str(err.value)
    preset = DEPLOY.split("[[devices]]")[0] + '[[devices]]\npreset = "this_machine_cpu"\ncore_stream_gb_per_s = 5\n'
    assert config_from_text(preset, "t.toml").cluster.devices[0].core_stream_bytes_per_s == pytest.approx(5e9)


def test_this_machine_preset_cites_the_sweep():
    source = load_device("this_machine_cpu").provenance["small_kernel_bytes"].source
    assert "GEMV chain sweep" in source and "2026-11-24" in source
