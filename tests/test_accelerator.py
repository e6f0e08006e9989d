"""The accelerator roofline's operators and fixed costs, the compiled-kernel count, the measured H100
preset and its comparison with the layers measured on the GPU lent on 2026-11-24."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from workbench.core.errors import WorkbenchError
from workbench.kernels import reference as ref
from workbench.kernels.accelerator import block_operators, kernel_count, measure_layer_latency, roofline
from workbench.machine.hardware import load_device, preset_table
from workbench.model.models import get_model, tiny_config

HLO = """HloModule jit_f

%fused_a (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

%command_buffer (q: f32[4]) -> f32[4] {
  %q = f32[4]{0} parameter(0)
  %f1 = f32[4]{0} fusion(%q), kind=kLoop, calls=%fused_a
  ROOT %f2 = f32[4]{0} fusion(%f1), kind=kLoop, calls=%fused_a
}

ENTRY %main (x: f32[4], w: f32[4,4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %w = f32[4,4]{1,0} parameter(1)
  %c = f32[] constant(1)
  %b = f32[1,4]{1,0} bitcast(%x)
  %g = (f32[1,4]{1,0}, s8[16]{0}) custom-call(%b, %w), custom_call_target="__cublas$lt$matmul"
  %e = f32[1,4]{1,0} get-tuple-element(%g), index=0
  %t = f32[4]{0} bitcast(%e)
  ROOT %r = f32[4]{0} call(%t), to_apply=%command_buffer
}
"""


def test_kernel_count_counts_kernels_not_views_and_enters_command_buffers():
    assert kernel_count(HLO) == 3  # the cuBLAS call and the two fusions inside the called command buffer
    with pytest.raises(WorkbenchError, match="ENTRY"):
        kernel_count("HloModule nothing\n")


def test_kernel_count_of_a_compiled_cpu_program(cpu_devices):
    text = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b).lower(jnp.ones((4, 4)), jnp.ones((4, 4))).compile().as_text()
    assert 2 <= kernel_count(text) <= 4  # two dots (the tanh fuses into one of them or runs on its own)


def test_unfused_operators_launch_a_kernel_per_step():
    llama, bert = get_model("Llama 2-7B"), get_model("BERT-base")
    decode = {o.name: o for o in block_operators(llama, "decode", 1, 128)}
    assert sum(o.kernels for o in decode.values()) == 17
    assert {"rotary", "cache_copy", "residual", "norms", "activation"} <= set(decode)
    prefill = {o.name: o for o in block_operators(bert, "prefill", 128)}
    assert sum(o.kernels for o in prefill.values()) == 12 and "rotary" not in prefill and "cache_copy" not in prefill
    # the score matrix passes through memory four times (written, read and written by the softmax, read by P.V)
    scores_bytes = 4 * bert.n_heads * 128 * 128 * 4
    assert prefill["attention"].bytes == pytest.approx(scores_bytes + (2 * 128 * bert.q_dim + 2 * 128 * bert.kv_dim) * 4)


def test_each_kernel_pays_the_launch_cost():
    cfg = get_model("TinyLlama-42M")
    device = load_device("h100_sxm_measured")
    table = roofline(cfg, device, "decode", 1, 128, "bf16")
    assert table["launch_s"].sum() == pytest.approx(table["kernels"].sum() * 2.58e-6)
    assert (table["latency_s"] >= table["launch_s"]).all()


def test_measured_preset_is_the_datasheet_preset_plus_its_measurements():
    measured, datasheet = load_device("h100_sxm_measured"), load_device("h100_sxm")
    assert measured.peak_flops == datasheet.peak_flops and measured.memory == datasheet.memory
    assert (measured.memory_efficiency, measured.efficiency_gemm, measured.kernel_launch_s) == (0.906, 0.763, 2.58e-6)
    kinds = {name: c.kind for name, c in measured.provenance.items()}
    assert kinds["memory_efficiency"] == kinds["kernel_launch"] == "measured" and kinds["gemm_half_rows"] == "fitted"
    assert measured.provenance["gemm_half_rows"].fitted_on
    assert kinds["peak_flops_bf16"] == "datasheet"
    assert "based_on" not in preset_table("h100_sxm_measured")["meta"]


def test_a_preset_based_on_itself_is_refused(tmp_path, monkeypatch):
    import workbench.machine.hardware as hw

    (tmp_path / "a.toml").write_text('[meta]\nbased_on = "b"\n')
    (tmp_path / "b.toml").write_text('[meta]\nbased_on = "a"\n')
    monkeypatch.setattr(hw, "DEVICES_DIR", tmp_path)
    with pytest.raises(WorkbenchError, match="circle"):
        hw.load_device("a")


def test_bf16_reference_block_stays_in_bf16(cpu_devices):
    cfg = tiny_config("llama")
    params = ref.init_block_params(cfg, jax.random.PRNGKey(0), dtype=jnp.bfloat16)
    x_se = jnp.ones((4, cfg.d_model), jnp.bfloat16)
    jaxpr = jax.make_jaxpr(lambda p, x: ref.block_forward(cfg, p, x, jnp.arange(4))[0])(params, x_se)
    dots = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "dot_general"]
    assert dots and all(e.outvars[0].aval.dtype == jnp.bfloat16 for e in dots)
    assert ref.block_forward(cfg, params, x_se, jnp.arange(4))[0].dtype == jnp.bfloat16


def test_stacked_layer_measurement_reports_per_layer_time(cpu_devices):
    cfg = tiny_config("llama")
    row = measure_layer_latency(cfg, "decode", 1, 16, reps=2, dtype="bf16", pipelined=True, layers=2)
    assert row["layers"] == 2 and row["dtype"] == "bf16" and row["kernels"] > 0 and row["pipelined_s"] > 0


def test_h100_layers_against_the_measured_preset():
    """The stored GPU rows (2026-11-24) against the roofline: large decode layers within the issue's 20 %,
    and the measured preset closer than the pure datasheet roofline in every phase."""
    import workbench.studies.cluster as wb

    table = wb.gpu_layer_table()
    assert set(table.dtype) == {"bf16", "fp32"} and set(table.phase) == {"prefill", "decode"}
    summary = wb.gpu_layer_summary(table).set_index(["phase", "size_class"])
    assert summary.loc[("decode", "large"), "median_abs_error"] <= 0.20
    datasheet_error = (table["measured_s"] / table["datasheet_roofline_s"] - 1).abs()
    model_error = (table["measured_over_predicted"] - 1).abs()
    for phase in ("prefill", "decode"):
        assert model_error[table.phase == phase].median() < datasheet_error[table.phase == phase].median()
    samples = wb.gpu_kernel_samples()
    assert len(samples) == 2 and ((samples.kernels_compiled - samples.kernels_model).abs() <= 4).all()


def test_an_unfused_block_keeps_the_layers_fixed_time_defined_under_the_fused_count():
    """layer_overhead is what a layer's measured fixed time leaves after KERNELS_PER_LAYER launches; the unfused
    study launches its own count, so it adds only what is left of that total (never a negative remainder)."""
    import pandas as pd

    from workbench.kernels.accelerator import block_overhead
    from workbench.machine.hardware import DeviceSpec
    from workbench.schemes.common import KERNELS_PER_LAYER

    device = DeviceSpec("d", {"fp32": 1e12}, kernel_launch_s=1e-6, layer_overhead_s=4e-6)
    total = KERNELS_PER_LAYER * 1e-6 + 4e-6
    for kernels, expected in ((3, total - 3e-6), (KERNELS_PER_LAYER, 4e-6), (16, 0.0)):
        table = pd.DataFrame({"launch_s": [1e-6] * kernels})
        assert block_overhead(device, table) == pytest.approx(expected, abs=1e-15), kernels
