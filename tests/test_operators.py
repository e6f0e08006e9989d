"""Issue 32, one operator table per layer: `common.layer_operators` lists a layer's typed rows (fused: the
schemes' 7 kernels; unfused: the accelerator study's 12 to 17) and `common.cost` is the one roofline that
costs them; every scheme and the accelerator study cost a layer through it and no other way."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.kernels import accelerator
from workbench.machine.hardware import load_device
from workbench.model.models import get_model
from workbench.schemes import common
from workbench.schemes.base import Workload

# The roofline's ingredients: whoever calls one of these computes (part of) a kernel's time itself.
PRIMITIVES = {"matmul_time", "compute_time", "kernel_stream_time", "stream_time", "efficiency", "peak"}
# (module, enclosing function) that may call them, and why: none of them costs a layer's kernels.
ALLOWED = {
    ("workbench/schemes/common.py", "_operator_cost"): "the one function that costs an operator row",
    ("workbench/schemes/common.py", "matmul_time"): "the arithmetic side `_operator_cost` calls",
    ("workbench/schemes/common.py", "stream_time"): "DeviceSpec.stream_time under the schemes' name",
    ("workbench/schemes/hepti.py", "profile_from_device"): "Hepti's Eq. 5 profile: one linear rate per device (the paper's)",
    ("workbench/schemes/hepti.py", "stream_rate"): "the per-byte rate of Hepti's Eq. 5 profile",
    ("workbench/schemes/mcu_siracusa.py", "root_work"): "the root's per-byte L2/L3 DMA rate (the MCU paper's memory model)",
    ("workbench/schemes/mcu_siracusa.py", "_chip_cost"): "the chips' L2/L3 DMA transfers at named levels (the MCU paper's)",
    ("workbench/kernels/accelerator.py", "ridge_point"): "a device's ridge point, no operator",
}
SCANNED = sorted([*(REPO_ROOT / "workbench" / "schemes").glob("*.py"), *(REPO_ROOT / "workbench" / "schemes" / "planners").glob(
    "*.py"), REPO_ROOT / "workbench" / "kernels" / "accelerator.py"])


def _primitive_calls(path: Path) -> list[tuple[str, str, int]]:
    """(enclosing top-level function, primitive, line) of every call of a roofline primitive in `path`, except
    calls by bare name of a function the module defines itself (a wrapper, itself scanned), unless the module
    is common.py, where the primitives themselves are defined."""
    tree = ast.parse(path.read_text())
    local = set() if path.name == "common.py" else {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    found = []
    for top in tree.body:
        for node in ast.walk(top):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else None
            if name in PRIMITIVES and not (isinstance(fn, ast.Name) and name in local):
                found.append((getattr(top, "name", "<module>"), name, node.lineno, node.col_offset))
    return [(func, name, line) for func, name, line, _ in sorted(found, key=lambda f: (f[2], f[3]))]


@pytest.mark.source_scan
def test_every_layer_is_costed_by_the_operator_table_and_no_other_way():
    """No scheme, planner or the accelerator study computes a kernel's arithmetic or streaming time itself:
    only `common._operator_cost` does (the listed exceptions are the papers' own non-roofline models)."""
    offending, used = [], set()
    for path in SCANNED:
        module = path.relative_to(REPO_ROOT).as_posix()
        for func, name, line in _primitive_calls(path):
            if (module, func) in ALLOWED:
                used.add((module, func))
            else:
                offending.append(f"{module}:{line} {func}() calls {name}")
    assert not offending, "cost a layer with common.layer_operators + common.cost:\n" + "\n".join(offending)
    assert used == set(ALLOWED), f"stale exceptions: {set(ALLOWED) - used}"


def test_the_scan_finds_a_scheme_that_costs_a_kernel_itself(tmp_path):
    """The scan sees a roofline computed by hand (attribute or imported name) and ignores a module's own wrapper."""
    source = ("from workbench.schemes.common import matmul_time\n"
              "def mine(d, f):\n    return max(d.peak('fp16') * f, d.stream_time(f))\n"
              "def theirs(d, f):\n    return matmul_time(d, f, 'fp16')\n"
              "def compute_time(d, f):\n    return 0.0\n"
              "def wrapped(d, f):\n    return compute_time(d, f)\n")
    path = tmp_path / "scheme.py"
    path.write_text(source)
    assert [(f, n) for f, n, _ in _primitive_calls(path)] == [("mine", "peak"), ("mine", "stream_time"),
                                                              ("theirs", "matmul_time")]


CASES = [("Llama 2-7B", Workload("decode", 128, 512, 4.5, 16.0)), ("Llama 2-7B", Workload("prefill", 128)),
         ("BERT-L", Workload("prefill", 64, 64, 8.0, 8.0)), ("TinyLlama-42M", Workload("decode", 32, 32, 16, 16))]
DEVICES = ("jetson_nano_cpu_m", "h100_sxm", "this_machine_cpu", "siracusa")


@pytest.mark.parametrize("model,workload", CASES)
def test_the_fused_table_has_seven_kernels_and_a_layer_is_its_sum(model, workload):
    """`KERNELS_PER_LAYER` is the fused table's kernel count; `layer_time` is its rows' sum plus the overhead,
    bit for bit, and with `bound` the sum of each row's busy seconds on that side."""
    cfg = get_model(model)
    rows = common.layer_operators(cfg, workload)
    assert [r.name for r in rows] == list(common.FUSED_OPERATORS)
    assert sum(r.kernels for r in rows) == common.KERNELS_PER_LAYER == 7
    for name in DEVICES:
        device = load_device(name)
        costs = common.cost(device, rows)
        total = 0.0
        for c in costs:
            total += c.time_s
        assert common.layer_time(cfg, device, workload) == float(total) + device.layer_overhead_s
        for side in common.BOUNDS:
            assert common.layer_time(cfg, device, workload, bound=side) == pytest.approx(
                sum(float(c.part(side)) for c in costs), rel=1e-12)
        launches = sum(float(c.launch_s) for c in costs)
        assert launches == pytest.approx(common.KERNELS_PER_LAYER * device.kernel_launch_s, rel=1e-12)


def test_a_slice_costs_its_share_of_the_table_vectorised_over_devices():
    """Per-device slices (arrays of heads, columns, tokens) cost like one slice at a time; an empty slice
    launches nothing."""
    cfg, device, workload = get_model("Llama 2-7B"), load_device("jetson_nano_cpu_m"), Workload("prefill", 96)
    heads, cols, tokens = np.array([8, 24, 0]), np.array([1000, 10008, 0]), np.array([32, 64, 0])
    together = common.cost(device, common.layer_operators(cfg, workload, heads, cols, tokens))
    for i in range(3):
        alone = common.cost(device, common.layer_operators(cfg, workload, int(heads[i]), int(cols[i]),
                                                           int(tokens[i])))
        assert [float(c.time_s[i]) for c in together] == [float(c.time_s) for c in alone]
    assert all(float(c.time_s[2]) == 0.0 for c in together)
    assert float(together[0].time_s[0]) < float(together[0].time_s[1])


@pytest.mark.parametrize("model,phase,seq,kv,kernels", [("Llama 2-7B", "decode", 1, 128, 17),
                                                        ("BERT-base", "prefill", 128, None, 12)])
def test_the_accelerator_study_is_the_same_table_unfused(model, phase, seq, kv, kernels):
    """`accelerator.block_operators` is `layer_operators(fused=False)` (12 to 17 kernels), and its roofline's
    latency column is `cost` of those rows in the arithmetic JAX runs."""
    cfg, device = get_model(model), load_device("h100_sxm")
    workload = Workload(phase, seq, kv or seq, 32, 32, output_head=False)
    rows = common.layer_operators(cfg, workload, fused=False)
    assert [(r.name, r.flops, r.bytes, r.kernels) for r in rows] == \
        [(r.name, r.flops, r.bytes, r.kernels) for r in accelerator.block_operators(cfg, phase, seq, kv)]
    assert sum(r.kernels for r in rows) == kernels
    table = accelerator.roofline(cfg, device, phase, seq, kv, precision="highest")
    assert list(table["latency_s"]) == [float(c.time_s) for c in common.cost(device, rows)]
    assert list(table["bound"]) == [c.bound for c in common.cost(device, rows)]
    with pytest.raises(WorkbenchError, match="fused=False costs the whole layer"):
        common.layer_operators(cfg, workload, heads=1, fused=False)


def test_cost_says_what_binds_each_operator():
    """A board's decode GEMVs stream (memory), its prefill GEMMs compute, the connective blocks always stream,
    and a tiny layer on a launch-heavy device is launch-bound."""
    cfg, board = get_model("Llama 2-7B"), load_device("jetson_nano_cpu_m")
    decode = {c.operator.name: c for c in common.cost(board, common.layer_operators(cfg, Workload("decode", 128)))}
    prefill = {c.operator.name: c for c in common.cost(board, common.layer_operators(cfg, Workload("prefill", 512)))}
    assert {n: decode[n].bound for n in common.WEIGHT_GEMMS} == dict.fromkeys(common.WEIGHT_GEMMS, "memory")
    assert {n: prefill[n].bound for n in common.WEIGHT_GEMMS} == dict.fromkeys(common.WEIGHT_GEMMS, "compute")
    assert prefill["con"].bound == "memory" and float(decode["con"].part("compute")) == 0.0
    assert float(decode["con"].part("memory")) == float(decode["con"].memory_s) > 0
    tiny = common.cost(board.with_changes(kernel_launch_s=1e-3),
                       common.layer_operators(get_model("TinyLlama-42M"), Workload("decode", 8)))
    assert {c.bound for c in tiny} == {"launch"}
    assert float(tiny[-1].launch_s) == 2e-3  # the connective row launches its two kernels


def test_operator_rows_check_their_invariants():
    with pytest.raises(WorkbenchError, match="kernels"):
        common.Operator("x", 1.0, 1.0, -1)
    with pytest.raises(WorkbenchError, match="operator kind"):
        common.Operator("x", 1.0, 1.0, 1, "fp16", "conv")
    with pytest.raises(WorkbenchError, match="flops and bytes must be >= 0"):
        common.Operator("x", 1.0, np.array([1.0, -1.0]))
    with pytest.raises(WorkbenchError, match="elementwise operator has no FLOPs"):
        common.Operator("x", 5.0, 1.0, 1, "fp16", "elementwise")


def test_a_layer_sequential_scheme_splits_exactly_its_own_devices_rows():
    """Pipeline and layer-wise model parallelism show as memory_s the memory-bound rows of each device's own
    layers (by the layers it holds; the pipeline's head is serial), not the whole step's share on every device:
    on a mixed cluster the two differ."""
    import sys

    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from dataclasses import replace

    from streaming_cases import cluster

    from workbench.schemes.base import SCHEMES, load_all
    from workbench.schemes.pipeline import default_plan

    load_all()
    model, mixed = get_model("Llama 2-7B"), cluster("mixed x4")
    workload = Workload("decode", 128, 128, 4.5, 16.0)

    def memory_rows(device, n_layers, on=workload):
        return n_layers * sum(float(c.part("memory")) for c in common.cost(device, common.layer_operators(model, on)))
    # prima.cpp's pipeline runs llama.cpp's kernels (q4_0 for these 4.5 bits): its rows are costed with them
    engine = replace(workload, engine="llama.cpp", weight_format="q4_0")
    plan = default_plan(model, mixed, engine)
    pipeline = SCHEMES["pipeline_offload"][1](model, mixed, replace(workload, weight_format="q4_0"))
    assert pipeline.memory_s == pytest.approx(sum(memory_rows(d, a, engine) for d, a in zip(mixed.devices, plan.layers)),
                                              rel=1e-6)
    from workbench.schemes.baselines import mp_layer_ranges

    layerwise = SCHEMES["layerwise_mp"][1](model, mixed, workload)
    head = float(common.cost(mixed.devices[0], [common.Operator(
        "head", common.lm_head_flops(model), common.weight_bytes(model.vocab_size * model.d_model, 4.5), 1, "fp16",
        "gemv")])[0].part("memory"))
    expected = sum(memory_rows(d, b - a) for d, (a, b) in zip(mixed.devices, mp_layer_ranges(model.n_layers, 4)))
    assert layerwise.memory_s == pytest.approx(expected + head, rel=1e-6)
    share = common.memory_share(model, mixed.devices, workload)
    assert layerwise.memory_s / (layerwise.memory_s + layerwise.compute_s) != pytest.approx(share, rel=1e-3)
