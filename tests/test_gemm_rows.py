"""Skinny GEMMs: a GEMM of M rows (an M-token prompt's weight GEMM) runs at x M / (M + gemm_half_rows) of its
efficiency (`DeviceSpec.efficiency`); off (0) by default, so every other preset costs as before."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from deploy_toml import board_deployment
from profile_rows import base_profile_rows, provenance

from workbench.core.errors import WorkbenchError
from workbench.core.units import GIB
from workbench.machine.hardware import DeviceSpec, MemoryLevel, device_from_table, device_names, load_device
from workbench.measure.profile.microbench import GEMM_ROWS, gemm_half_rows, gemm_rows_flops
from workbench.model.models import get_model
from workbench.schemes.base import Workload
from workbench.schemes.common import kernel_times, layer_time, matmul_time, roofline_time

PREFILL = Workload("prefill", seq_len=32, kv_len=32, weight_bits=32, activation_bits=32)
DECODE = Workload("decode", seq_len=32, kv_len=32, weight_bits=32, activation_bits=32)


def board(**changes) -> DeviceSpec:
    """A 100 GFLOP/s fp32 device at 0.8 of peak on GEMMs, half of it at 24 rows unless changed."""
    fields = dict(name="board", peak_flops={"fp32": 1e11}, efficiency_gemm=0.8, efficiency_gemv=0.6,
                  memory=(MemoryLevel("DRAM", 8 * GIB, 40e9),), gemm_half_rows=24.0)
    return DeviceSpec(**{**fields, **changes})


def _rows(rates: dict[int, float]) -> pd.DataFrame:
    """gemm_rows_fp32 rows: {M: FLOP/s}."""
    return pd.DataFrame([{"benchmark": "gemm_rows_fp32", "size": m, "seconds": gemm_rows_flops(m) / r, "rate": r}
                         for m, r in rates.items()])


def test_a_gemm_at_the_half_rows_runs_at_half_its_efficiency():
    dev = board()
    assert dev.efficiency("gemm", rows=24) == pytest.approx(0.4)
    rows = np.array([1.0, 24.0, 96.0, 1e6])
    assert dev.efficiency("gemm", rows=rows) == pytest.approx(0.8 * rows / (rows + 24.0))
    assert dev.efficiency("gemm") == 0.8  # rows unknown: not row-limited
    # with the small-kernel loss too: the two factors multiply
    both = board(small_kernel_flops=1e6).efficiency("gemm", kernel_flops=1e6, rows=24)
    assert both == pytest.approx(0.8 * 0.5 * 0.5)
    flops = 2.0 * 24 * 1024 * 1024
    assert dev.compute_time(flops, "fp32", "gemm", rows=24) == pytest.approx(flops / (1e11 * 0.4))
    assert matmul_time(dev, flops, "fp32", "gemm", rows=24) == pytest.approx(flops / (1e11 * 0.4))
    assert roofline_time(dev, flops, 0.0, "fp32", "gemm", rows=24) == pytest.approx(flops / (1e11 * 0.4))
    assert matmul_time(dev, 0.0, "fp32", "gemm", rows=0) == 0.0


def test_gemvs_are_not_row_limited():
    dev = board()
    assert dev.efficiency("gemv", rows=1) == 0.6 and dev.efficiency("gemv", rows=np.array([1.0, 32.0])) == 0.6
    assert dev.compute_time(1e6, "fp32", "gemv", rows=1) == pytest.approx(1e6 / (1e11 * 0.6))


@pytest.mark.parametrize("device_id", device_names())
def test_off_by_default_compute_and_roofline_are_unchanged(device_id):
    dev = load_device(device_id)
    if "gemm_half_rows" not in dev.provenance:  # off unless the preset states it (this_machine_cpu, h100_sxm_measured)
        assert dev.gemm_half_rows == 0
    assert set(name for name in device_names() if load_device(name).gemm_half_rows) <= {"this_machine_cpu",
                                                                                      "h100_sxm_measured"}
    dev = dev.with_changes(gemm_half_rows=0.0)
    dtype = next(iter(dev.peak_flops))
    flops, n_bytes, rows = np.array([1e3, 1e6, 1e9]), np.array([1e3, 1e6, 1e8]), np.array([2.0, 32.0, 512.0])
    for kind in ("gemm", "gemv"):
        assert dev.compute_time(flops, dtype, kind, rows=rows) == pytest.approx(dev.compute_time(flops, dtype, kind),
                                                                               rel=0)
        assert roofline_time(dev, flops, n_bytes, dtype, kind, rows=rows) == \
            pytest.approx(roofline_time(dev, flops, n_bytes, dtype, kind), rel=0)


def test_a_32_token_prefill_is_slower_with_the_field_a_decode_step_is_not():
    model = get_model("TinyLlama-42M")
    on, off = board(), board(gemm_half_rows=0.0)
    prefill_on = kernel_times(model, on, PREFILL, model.n_heads, model.d_ff, 32)
    prefill_off = kernel_times(model, off, PREFILL, model.n_heads, model.d_ff, 32)
    for name in ("qkv", "out", "ffn1", "ffn2"):
        assert prefill_on[name] > 1.2 * prefill_off[name], name
    decode_on = kernel_times(model, on, DECODE, model.n_heads, model.d_ff, 1)
    decode_off = kernel_times(model, off, DECODE, model.n_heads, model.d_ff, 1)
    assert {k: float(v) for k, v in decode_on.items()} == {k: float(v) for k, v in decode_off.items()}
    # per-device token counts (a sequence split): each device's GEMM is row-limited at its own rows
    split = kernel_times(model, on, PREFILL, model.n_heads, model.d_ff, np.array([8.0, 24.0, 0.0]))
    whole = kernel_times(model, off, PREFILL, model.n_heads, model.d_ff, np.array([8.0, 24.0, 0.0]))
    assert split["ffn2"][2] == 0.0 and split["ffn2"][0] / whole["ffn2"][0] > split["ffn2"][1] / whole["ffn2"][1]


def test_the_half_rows_are_recovered_from_the_sweep():
    peak = 2e11
    assert gemm_half_rows(_rows({m: peak * m / (m + 24.0) for m in GEMM_ROWS}), peak) == pytest.approx(24.0, rel=1e-6)
    assert gemm_half_rows(_rows({m: 0.97 * peak for m in GEMM_ROWS}), peak) == 0.0  # flat: within 5 % of the peak
    assert gemm_half_rows(_rows({m: 1.1 * peak for m in GEMM_ROWS}), peak) == 0.0  # above peak is capped at 1
    assert gemm_half_rows(_rows({}).reindex(columns=["benchmark", "size", "rate"]), peak) == 0.0  # no rows: off
    with pytest.raises(WorkbenchError, match="peak must be"):
        gemm_half_rows(_rows({32: 1e11}), 0.0)


def test_the_microbench_and_the_profile_write_it_measured():
    from workbench.measure.profile.device_toml import device_constants, device_toml

    rows = base_profile_rows()
    bench = pd.concat([pd.DataFrame(rows), _rows({m: 2e11 * m / (m + 24.0) for m in (32, 512)})], ignore_index=True)
    constants = device_constants(bench, provenance())
    dev = device_from_table(tomllib.loads(device_toml(constants, "t", "")), "t.toml")
    assert dev.gemm_half_rows == pytest.approx(24.0, rel=1e-6)
    c = constants["gemm_half_rows"]
    assert c.kind == "measured" and "2020-01-01" in c.source and "M=32" in c.source and c.unit == "rows"
    flat = pd.DataFrame(rows)  # an older table without the sweep: the mechanism is off
    assert device_constants(flat, provenance(date="d"))["gemm_half_rows"].value == 0.0


DEPLOY = board_deployment("gemm_half_rows = 24")


def test_the_deployment_key_sets_the_field_and_a_bad_value_is_one_line_naming_it():
    from workbench.scenarios.userconfig import config_from_text

    assert config_from_text(DEPLOY, "t.toml").cluster.devices[0].gemm_half_rows == 24.0
    for bad in ("-1", "1e6"):
        with pytest.raises(WorkbenchError, match=r"gemm_half_rows must be a number >= 0 and <= 100000") as err:
            config_from_text(DEPLOY.replace("gemm_half_rows = 24", f"gemm_half_rows = {bad}"), "t.toml")
        assert "\n" not in str(err.value)
    with pytest.raises(WorkbenchError, match="gemm_half_rows must be") as err:
        board(gemm_half_rows=-1.0)
    assert "\n" not in str(err.value)
    preset = DEPLOY.split("[[devices]]")[0] + '[[devices]]\npreset = "this_machine_cpu"\ngemm_half_rows = 0\n'
    assert config_from_text(preset, "t.toml").cluster.devices[0].gemm_half_rows == 0.0


def test_this_machine_preset_cites_the_sweep():
    dev = load_device("this_machine_cpu")
    c = dev.provenance["gemm_half_rows"]
    assert c.kind == "measured" and "GEMM rows sweep" in c.source and "2026-11-24" in c.source
    bench = pd.read_csv(Path(__file__).resolve().parents[1] / "data" / "cluster" / "microbench.csv")
    stored = bench[bench.benchmark == "gemm_rows_fp32"]
    assert sorted(stored["size"]) == [32, 128, 512]
    for rate in stored["rate"]:
        assert f"{rate / 1e9:.1f}" in c.source
    # the preset's value is the derivation on the stored rows (6 significant digits in the file)
    assert dev.gemm_half_rows == pytest.approx(gemm_half_rows(stored, dev.peak_flops["fp32"]), rel=1e-4)
    assert 15 <= dev.gemm_half_rows <= 35


def test_a_tinyllama_prefill_layer_on_this_machine_grows_with_the_field():
    model, dev = get_model("TinyLlama-42M"), load_device("this_machine_cpu")
    assert dev.gemm_half_rows > 0
    off = dev.with_changes(gemm_half_rows=0.0)
    assert layer_time(model, dev, PREFILL) > 1.5 * layer_time(model, off, PREFILL)
    assert layer_time(model, dev, DECODE) == layer_time(model, off, DECODE)


def test_tpi_llm_blocks_run_their_prompt_rows_at_the_skinny_gemm_efficiency():
    from workbench.schemes import tpi_llm

    dev = load_device("this_machine_cpu")
    assert dev.gemm_half_rows > 0
    off = dev.with_changes(gemm_half_rows=0.0)
    launch = dev.kernel_launch_s  # 1 GFLOP on one byte of weights: compute-bound, so the rows decide
    fast = tpi_llm.compute_time(off, 1e9, 1.0, "fp32", "gemm", rows=32) - launch
    slow = tpi_llm.compute_time(dev, 1e9, 1.0, "fp32", "gemm", rows=32) - launch
    assert slow == pytest.approx(fast * (32 + dev.gemm_half_rows) / 32)
