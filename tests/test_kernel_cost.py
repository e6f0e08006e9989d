"""The engines' quantized kernels cost every weight matmul of an engine's scheme (`workbench.machine.kernel_cost`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine import kernel_cost
from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.schemes.base import Cluster, Workload, load_all
from workbench.schemes.common import Operator, cost


def _cluster(device, n: int = 1) -> Cluster:
    return Cluster((device,) * n, Topology("switch" if n > 1 else "direct", n, Link(125e6, 1e-4)))


# (scheme, on a mixture of experts) for every scheme running an engine's kernels, on each kind of model it costs
ENGINE_SCHEMES = tuple((spec.name, moe) for spec in load_all().specs() if spec.engine
                       for moe, costs in ((False, spec.dense), (True, spec.moe)) if costs)


# ---- the rule ------------------------------------------------------------------------------------------------
def test_isa_class_is_the_most_capable_class_the_features_cover():
    pi5, pi4 = load_device("edge_rpi5_8gb"), load_device("edge_rpi4b_8gb")
    assert kernel_cost.isa_class(pi5) == "neon_dotprod"
    assert kernel_cost.isa_class(pi4) == "neon"
    assert kernel_cost.isa_class(replace(pi5, isa=("neon", "dotprod", "i8mm"))) == "neon_i8mm"
    assert kernel_cost.isa_class(load_device("edge_intel_n100")) == "avx_vnni"
    assert kernel_cost.isa_class(replace(pi5, isa=("avx2", "fma", "f16c"))) == "avx2"
    with pytest.raises(WorkbenchError, match="states no isa"):
        kernel_cost.isa_class(replace(pi5, isa=()))
    with pytest.raises(WorkbenchError, match="no engine kernel class"):
        kernel_cost.isa_class(replace(pi5, isa=("sse3",)))


def test_counted_rate_is_clock_cores_and_block_over_the_busiest_pipe():
    pi5 = load_device("edge_rpi5_8gb")
    row = kernel_cost.counted_row(pi5, "llama.cpp", "q4_0", "gemv")
    core = kernel_cost.core_of(pi5)
    assert row.path == "repack_gemv"  # ARM dotprod decode runs the repacked 4x4 q4_0 GEMV by default
    cycles = max((row.simd_mul + row.simd_alu) / core.simd_pipes, row.simd_mul / core.dot_per_cycle,
                 row.simd_load / kernel_cost.LOAD_PORTS, row.scalar_ops / kernel_cost.SCALAR_PORTS)
    expected = pi5.clock_hz * pi5.cores * row.block_weights / cycles
    assert kernel_cost.kernel_rate(pi5, "llama.cpp", "q4_0", "gemv") == pytest.approx(expected, rel=1e-12)


def test_a_measured_rate_wins_over_the_count():
    pi5 = load_device("edge_rpi5_8gb")
    measured = replace(pi5, kernel_rates={"llamacpp_q4_0_gemv": 3.0e9})
    assert kernel_cost.kernel_rate(measured, "llama.cpp", "q4_0", "gemv") == pytest.approx(3.0e9)
    assert kernel_cost.kernel_rate(measured, "llama.cpp", "q4_0", "gemm") != pytest.approx(3.0e9)


def test_a_format_without_a_kernel_is_one_line():
    pi5 = load_device("edge_rpi5_8gb")
    with pytest.raises(WorkbenchError, match="no kernel: distributed-llama has no q4_k gemv kernel") as caught:
        kernel_cost.kernel_rate(pi5, "distributed-llama", "q4_k", "gemv")
    assert "\n" not in str(caught.value)
    n100 = load_device("edge_intel_n100")
    with pytest.raises(WorkbenchError, match="not counted"):  # the path exists, its instructions were not counted
        kernel_cost.kernel_rate(n100, "llama.cpp", "q6_k", "gemm")


def test_q4_k_and_q4_0_cost_differently_though_both_are_4_5_bits():
    pi5 = load_device("edge_rpi5_8gb")
    rates = {f: kernel_cost.kernel_rate(pi5, "llama.cpp", f, "gemm") for f in ("q4_0", "q4_k")}
    assert rates["q4_0"] > 1.2 * rates["q4_k"]  # q4_k's super-block scales cost more instructions per weight


# ---- the operator table ----------------------------------------------------------------------------------------
def test_an_engine_row_streams_like_any_row_and_computes_at_the_kernel_rate():
    pi5 = load_device("edge_rpi5_8gb")
    plain = Operator("ffn1", 2e9, 5e8, 1, "int8", "gemm", 64)
    engine = replace(plain, engine="llama.cpp", formats=(("q4_0", 1.0),))
    (a,), (b,) = cost(pi5, [plain]), cost(pi5, [engine])
    assert float(b.memory_s) == pytest.approx(float(a.memory_s))
    assert float(b.compute_s) == pytest.approx(1e9 / kernel_cost.kernel_rate(pi5, "llama.cpp", "q4_0", "gemm"))
    assert float(b.busy_s) == pytest.approx(max(float(b.compute_s), float(b.memory_s)))


def test_an_in_order_core_adds_streaming_and_arithmetic():
    a55 = replace(load_device("edge_rpi5_8gb"), core="cortex_a55", name="a55 board")
    (row,) = cost(a55, [Operator("ffn1", 2e9, 5e8, 1, "int8", "gemv", None, engine="llama.cpp",
                                 formats=(("q4_0", 1.0),))])
    assert row.serial
    assert float(row.busy_s) == pytest.approx(float(row.compute_s) + float(row.memory_s))


def test_an_operator_needs_both_engine_and_formats():
    with pytest.raises(WorkbenchError, match="needs its formats"):
        Operator("ffn1", 1.0, 1.0, engine="llama.cpp")


def test_a_recipe_mixes_its_formats_by_weight():
    model = get_model("Llama-3.1-8B")
    shares = dict(kernel_cost.row_formats(model, "Q4_K_M", "ffn2"))
    assert set(shares) == {"q4_k", "q6_k"}  # half the ffn_down layers move to q6_k under Q4_K_M
    assert sum(shares.values()) == pytest.approx(1.0)
    assert kernel_cost.row_formats(model, "Q4_K_M", "head") == (("q6_k", 1.0),)
    assert kernel_cost.row_formats(model, "q4_0", "router") == (("f32", 1.0),)


# ---- the schemes ------------------------------------------------------------------------------------------------
class _KernelAsked(Exception):
    pass


@pytest.mark.parametrize(("name", "moe"), ENGINE_SCHEMES)
def test_an_engine_scheme_never_costs_a_quantized_matmul_by_its_bits_alone(name, moe, monkeypatch):
    """Every engine scheme asks the kernel model for each quantized matmul: with the kernel rate made to fail, the
    scheme fails (it would pass silently if it costed the format by its bits at a peak rate)."""
    registry = load_all()
    model = get_model("Qwen3-30B-A3B" if moe else "Llama-3.1-8B")
    device = load_device("edge_rpi5_8gb")
    n = 4 if name.startswith("dllama") else 2
    workload = Workload("decode", 64, 64, weight_bits=4.5, activation_bits=32.0, weight_format="q4_0")

    def refuse(*args, **kwargs):
        raise _KernelAsked

    monkeypatch.setattr(kernel_cost, "kernel_rate", refuse)
    with pytest.raises(_KernelAsked):
        registry[name][1](model, _cluster(replace(device, memory=tuple(
            replace(m, capacity_bytes=64 * 2**30) for m in device.memory)), n), workload)


def test_an_engine_scheme_refuses_bits_without_a_format():
    model, device = get_model("Llama-3.1-8B"), load_device("edge_rpi5_8gb")
    workload = Workload("decode", 64, 64, weight_bits=4.5, activation_bits=32.0)
    with pytest.raises(WorkbenchError, match="q4_0, q4_k|give weight_format"):
        load_all()["llamacpp_rpc"][1](model, _cluster(device, 2), workload)


def test_a_paper_scheme_keeps_its_dense_kernels(monkeypatch):
    """The papers' schemes never ask for an engine's kernel (their rows do not move)."""
    def refuse(*args, **kwargs):
        raise _KernelAsked

    monkeypatch.setattr(kernel_cost, "kernel_rate", refuse)
    model, device = get_model("Llama-3.1-8B"), load_device("edge_rpi5_8gb")
    workload = Workload("decode", 64, 64, weight_bits=4.5, activation_bits=16.0, weight_format="q4_0")
    for name in ("local", "megatron_tp", "tpi_star_tp", "single_device_resident"):
        load_all()[name][1](model, _cluster(device, 2 if name != "local" else 1), workload)


def test_a_deployment_may_name_the_engine_for_a_generic_scheme():
    model, device = get_model("Llama-3.1-8B"), load_device("edge_rpi5_8gb")
    base = Workload("prefill", 64, 64, weight_bits=4.5, activation_bits=32.0, weight_format="q4_0")
    fn = load_all()["single_device_resident"][1]
    plain = fn(model, _cluster(device), base).latency_s
    engine = fn(model, _cluster(device), replace(base, engine="llama.cpp")).latency_s
    assert engine != pytest.approx(plain, rel=0.01)
    with pytest.raises(WorkbenchError, match="engine must be one of"):
        replace(base, engine="vllm")


def test_a_tied_head_runs_the_token_embedding_in_the_recipe_s_output_format():
    """Bug found by the mutation round: a model with tied embeddings has no `output` tensor, so under a file type its
    head row had no format and every engine scheme failed on it ("formats ()"). llama.cpp multiplies the logits by
    token_embd, quantized as the output (q6_k under Q4_K_M; q8_0 under MXFP4_MOE, llama-quant.cpp's output rule)."""
    tied = get_model("Llama 3.2-1B")
    assert tied.tie_embeddings
    for recipe, fmt in (("Q4_K_M", "q6_k"), ("MXFP4_MOE", "q8_0")):
        ((name, share),) = kernel_cost.row_formats(tied, recipe, "head")
        assert name == fmt
        assert share == pytest.approx(1.0, rel=1e-12)
    device = load_device("edge_rpi5_8gb")
    workload = Workload("decode", 64, 64, weight_bits=4.5, activation_bits=32.0, weight_format="Q4_K_M")
    result = load_all()["llamacpp_rpc"][1](tied, _cluster(device, 2), workload)
    assert result.latency_s > 0
