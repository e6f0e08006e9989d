"""Heterogeneous pipeline parallelism with offloading (llama.cpp RPC / prima.cpp piped ring): the plan, its
cost on the shared core, the HiGHS planner against the evaluator and brute force, and the shard_map kernel
against the reference and the cost model's hand-off bytes."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.kernels import pipeline as KP
from workbench.kernels import reference as ref
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_collectives
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.machine.network import Link, Topology, point_to_point
from workbench.model.models import get_model, tiny_config
from workbench.scenarios.userconfig import load_config
from workbench.schemes import common
from workbench.schemes import pipeline as PP
from workbench.schemes.base import Cluster, Workload, load_all
from workbench.schemes.planners import pipeline as PL

GIB = 2.0**30
REPO = Path(__file__).resolve().parents[1]
MODEL = tiny_config("llama", n_layers=6, d_model=256, n_heads=8, n_kv_heads=4, d_ff=768, vocab_size=512,
                    max_positions=256)
DECODE = Workload("decode", seq_len=64, kv_len=64)
PREFILL = Workload("prefill", seq_len=64, kv_len=64)


def device(name: str, gflops: float, dram_bytes: float, dram_gbs: float, storage_mbs: float | None,
           launch_s: float = 0.0, layer_s: float = 0.0) -> DeviceSpec:
    """A CPU-like device with one DRAM level (all numbers are test inputs, not claims about hardware)."""
    return DeviceSpec(name, {"fp32": gflops * 1e9}, 0.5, 0.5, memory=(MemoryLevel("DRAM", dram_bytes, dram_gbs * 1e9),),
                      storage_read_bytes_per_s=None if storage_mbs is None else storage_mbs * 1e6,
                      kernel_launch_s=launch_s, layer_overhead_s=layer_s)


def cluster_of(*devices: DeviceSpec, mbps: float = 300.0, ms: float = 2.0, overhead_s: float = 0.0) -> Cluster:
    """Devices on a switch."""
    link = Link.from_mbps(mbps, ms, message_overhead_s=overhead_s)
    return Cluster(tuple(devices), Topology("switch", len(devices), link))


def layer_b(model=MODEL, workload=DECODE) -> float:
    return PP.layer_weight_bytes(model, workload)


def master_f(model=MODEL, workload=DECODE) -> float:
    return PP.master_weight_bytes(model, workload)


def roomy(n: int = 3) -> Cluster:
    """Heterogeneous devices with memory for the whole model each."""
    speeds = [(50, 20), (30, 10), (80, 30), (20, 8)]
    return cluster_of(*[device(f"d{i}", g, 1 * GIB, bw, 500.0, launch_s=2e-6, layer_s=1e-5)
                        for i, (g, bw) in enumerate(speeds[:n])], overhead_s=1e-4)


def tight() -> Cluster:
    """3 devices whose memory holds 1 + 2 + 1 resident layers of 6: two can offload, the third cannot."""
    b, f = layer_b(), master_f()
    return cluster_of(device("master", 40, f + 1.6 * b, 20, 400.0, launch_s=1e-6),
                      device("big", 25, 2.7 * b, 12, 900.0, layer_s=2e-5),
                      device("no-disk", 60, 1.4 * b, 25, None), overhead_s=5e-5)


# ---- the plan ----------------------------------------------------------------------------------------
def test_plan_properties():
    plan = PP.PipelinePlan((3, 0, 2, 1), (1, 0, 0, 1))
    assert plan.resident == (2, 0, 2, 0)
    assert plan.ranges == ((0, 3), (3, 3), (3, 5), (5, 6))
    assert plan.participants == (0, 2, 3) and plan.handoffs == 3
    assert PP.PipelinePlan((6, 0, 0)).handoffs == 0 and PP.PipelinePlan((6, 0, 0)).offloaded == (0, 0, 0)
    assert PP.PipelinePlan((0, 6)).participants == (0, 1) and PP.PipelinePlan((0, 6)).handoffs == 2


@pytest.mark.parametrize("layers, offloaded, match", [
    ((3, -1), None, "layers must be integers >= 0"),
    ((3, 1.5), None, "layers must be integers >= 0"),
    ((3, True), None, "layers must be integers >= 0"),
    ((), None, "at least one device"),
    ((0, 0), None, "layers must sum"),
    ((3, 3), (1,), "offloaded must have one entry per device"),
    ((3, 3), (0, 4), r"offloaded\[1\] must be <= layers\[1\] \(3\)"),
    ((3, 3), (0, -1), "offloaded must be integers >= 0"),
    (5, None, "layers must be a sequence"),
])
def test_bad_plans_are_one_line_errors(layers, offloaded, match):
    with pytest.raises(WorkbenchError, match=match) as err:
        PP.PipelinePlan(layers, offloaded)
    assert "\n" not in str(err.value)


def test_plan_must_fit_the_model_and_cluster():
    with pytest.raises(WorkbenchError, match=r"sum to n_layers \(6\)"):
        PP.evaluate_pipeline(MODEL, roomy(2), DECODE, PP.PipelinePlan((3, 2)))
    with pytest.raises(WorkbenchError, match=r"one entry per device \(2\)"):
        PP.evaluate_pipeline(MODEL, roomy(2), DECODE, PP.PipelinePlan((3, 2, 1)))


# ---- the cost of a plan ---------------------------------------------------------------------------------
@pytest.mark.parametrize("workload", [DECODE, PREFILL], ids=["decode", "prefill"])
def test_cost_is_the_shared_core_summed_round_the_ring(workload):
    cl = tight()
    plan = PP.PipelinePlan((1, 3, 2), (1, 1, 0))
    r = PP.evaluate_pipeline(MODEL, cl, workload, plan)
    devs = cl.devices
    layer = [common.layer_time(MODEL, d, workload) for d in devs]
    read = [layer_b(MODEL, workload) / d.storage_read_bytes_per_s for d in devs[:2]]
    hidden = [min(read[0], 2 * layer[2]), min(read[1], 1 * layer[0])]  # each hides behind its predecessor
    msg = workload.new_tokens * MODEL.d_model * workload.activation_bits / 8
    hop = point_to_point(msg, cl.topology.link.bandwidth_bytes_per_s, cl.topology.link.latency_s, 2,
                         cl.topology.link.message_overhead_s)
    head = common.lm_head_time(MODEL, devs[0], workload)
    want = 1 * layer[0] + 3 * layer[1] + 2 * layer[2] + 1 * read[0] + 1 * read[1] - sum(hidden) + 3 * hop + head
    assert r.latency_s == pytest.approx(want, rel=1e-12)
    assert r.parts_s == pytest.approx(r.latency_s, rel=1e-12)
    assert r.io_stall_s == pytest.approx(sum(read) - sum(hidden), rel=1e-12)
    assert r.comm_link_latency_s + r.comm_bytes_s == pytest.approx(3 * hop, rel=1e-12)
    assert r.comm_bytes_s == pytest.approx(3 * msg / cl.topology.link.bandwidth_bytes_per_s, rel=1e-12)
    assert r.serial_s == pytest.approx(head, rel=1e-12)
    assert r.fixed_s == pytest.approx(sum(a * common.fixed_layer_time(d) for a, d in zip(plan.layers, devs)),
                                      rel=1e-12)
    assert r.fixed_s > 0


def test_memory_is_resident_layers_staging_kv_and_the_masters_tables():
    cl = tight()
    plan = PP.PipelinePlan((1, 3, 2), (1, 1, 0))
    cost = PP.pipeline_cost(MODEL, cl, DECODE, plan)
    b, k = layer_b(), MODEL.kv_cache_bytes_per_block(DECODE.kv_len, DECODE.cache_bits)
    assert cost.memory_bytes == pytest.approx((0 * b + b + 1 * k + master_f(), 2 * b + b + 3 * k, 2 * b + 2 * k))
    assert cost.oom  # the third device holds 1.4 layers
    assert not PP.pipeline_cost(MODEL, cl, DECODE, PP.PipelinePlan((1, 4, 1), (1, 3, 0))).oom


def test_a_single_device_hides_no_read_and_hands_nothing_off():
    solo = cluster_of(device("solo", 40, master_f() + 2.5 * layer_b(), 20, 400.0))
    plan = PP.PipelinePlan((6,), (4,))
    cost = PP.pipeline_cost(MODEL, solo, DECODE, plan)
    assert cost.hidden_s == (0.0,) and cost.handoffs == 0 and cost.handoff_link_s == 0.0
    assert cost.io_stall_s == pytest.approx(4 * layer_b() / 400e6)


def test_the_prefetch_hides_at_most_one_layer_behind_the_previous_device():
    cl = tight()
    one = PP.pipeline_cost(MODEL, cl, DECODE, PP.PipelinePlan((1, 4, 1), (0, 1, 0)))
    two = PP.pipeline_cost(MODEL, cl, DECODE, PP.PipelinePlan((1, 4, 1), (0, 2, 0)))
    r1 = layer_b() / 900e6
    assert one.hidden_s[1] == pytest.approx(min(r1, common.layer_time(MODEL, cl.devices[0], DECODE)))
    assert two.hidden_s == one.hidden_s  # the second offloaded layer is read blocking
    assert two.io_stall_s - one.io_stall_s == pytest.approx(r1)
    skipped = PP.pipeline_cost(MODEL, cl, DECODE, PP.PipelinePlan((3, 0, 3), (0, 0, 0)))
    assert skipped.handoffs == 2
    behind_empty = PP.pipeline_cost(MODEL, cl, DECODE, PP.PipelinePlan((0, 6, 0), (0, 2, 0)))
    assert behind_empty.hidden_s[1] == 0.0  # the master before it computes no layer


def test_offloading_on_a_device_without_storage_names_the_key():
    cl = tight()
    with pytest.raises(WorkbenchError, match="storage_read_mb_per_s") as err:
        PP.evaluate_pipeline(MODEL, cl, DECODE, PP.PipelinePlan((1, 3, 2), (0, 0, 1)))
    assert "\n" not in str(err.value) and "offloaded[2]" in str(err.value)


# ---- the default plan and the arena's evaluator ---------------------------------------------------------
def test_default_plan_splits_by_memory_and_offloads_only_what_does_not_fit():
    cl = roomy(3)
    plan = PP.default_plan(MODEL, cl, DECODE)
    assert plan.n_layers == 6 and plan.offloaded == (0, 0, 0)
    t = tight()
    p = PP.default_plan(MODEL, t, DECODE)
    cost = PP.pipeline_cost(MODEL, t, DECODE, p)
    assert not cost.oom and sum(p.offloaded) > 0 and p.offloaded[2] == 0
    for i, o in enumerate(p.offloaded):  # a device offloads only when one more resident layer would not fit
        if o:
            assert cost.memory_bytes[i] + layer_b() > cost.budget_bytes[i]


def test_registered_in_the_arena_with_its_source():
    paper, fn = load_all()["pipeline_offload"]
    assert paper == "prima.cpp" and fn is PP.evaluate_pipeline_offload
    r = fn(MODEL, tight(), DECODE)
    assert r.scheme == "pipeline_offload" and not r.oom and r.io_stall_s > 0
    assert r.parts_s == pytest.approx(r.latency_s, rel=1e-12)


def test_without_storage_or_memory_the_default_plan_is_infeasible():
    b = layer_b()
    cl = cluster_of(device("a", 40, master_f() + 2.2 * b, 20, None), device("b", 40, 2.2 * b, 20, None))
    with pytest.raises(InfeasibleError, match=r"^infeasible: total memory \+ storage: .* at most 4 of the 6") as err:
        PP.evaluate_pipeline_offload(MODEL, cl, DECODE)
    assert "\n" not in str(err.value) and "2 of 2 devices have no storage_read_mb_per_s" in str(err.value)
    small_master = cluster_of(device("a", 40, 0.5 * master_f(), 20, 400.0), device("b", 40, 9 * b, 20, None))
    with pytest.raises(InfeasibleError, match=r"^infeasible: memory of the master \(a\): embeddings and output head"):
        PP.evaluate_pipeline_offload(MODEL, small_master, DECODE)


# ---- the MILP ---------------------------------------------------------------------------------------------
CASES = {"roomy2": lambda: roomy(2), "roomy4": lambda: roomy(4), "tight": tight}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("workload", [DECODE, PREFILL], ids=["decode", "prefill"])
def test_milp_objective_is_the_evaluators_latency_of_its_plan(case, workload):
    cl = CASES[case]()
    sol = PL.plan_pipeline(MODEL, cl, workload)
    r = PP.evaluate_pipeline(MODEL, cl, workload, sol.plan)
    assert not r.oom
    assert sol.objective_s == pytest.approx(r.latency_s, rel=1e-9)
    default = PP.evaluate_pipeline(MODEL, cl, workload)
    assert r.latency_s <= default.latency_s * (1 + 1e-9)


@pytest.mark.parametrize("case", sorted(CASES))
def test_milp_equals_brute_force_on_three_devices_six_layers(case):
    cl = CASES[case]()
    if cl.n > 3:
        cl = cluster_of(*cl.devices[:3], overhead_s=cl.topology.link.message_overhead_s)
    coef = PP.coefficients(MODEL, cl, DECODE)
    sol = PL.plan_from_coefficients(coef)
    best_plan, best_s = PL.brute_force(coef)
    assert sol.objective_s == pytest.approx(best_s, rel=1e-9)
    assert PP.plan_cost(coef, sol.plan).latency_s == pytest.approx(best_s, rel=1e-9)
    if case == "tight":
        assert sum(best_plan.offloaded) > 0 and sum(sol.plan.offloaded) > 0
    program = PL.build_program(coef)  # named variables, laid out a, o, z, u, h (one per device), then w
    assert [program.columns(v) for v in "aozuh"] == [slice(k * coef.n, (k + 1) * coef.n) for k in range(5)]
    assert program.column("w") == 5 * coef.n == program.n_variables - 1 == sol.n_variables - 1


def test_offloading_appears_only_when_memory_binds_and_grows_io():
    b, f = layer_b(), master_f()
    stalls, offloaded = [], []
    for slots in (7.0, 6.4, 5.5, 4.5, 3.5, 2.5):  # layer weights the two devices hold together (KV is ~2 % more)
        cl = cluster_of(device("m", 40, f + slots / 2 * b, 20, 400.0), device("w", 40, slots / 2 * b, 20, 300.0))
        sol = PL.plan_pipeline(MODEL, cl, DECODE)
        cost = PP.pipeline_cost(MODEL, cl, DECODE, sol.plan)
        assert not cost.oom
        for i, o in enumerate(sol.plan.offloaded):
            if o:
                assert cost.memory_bytes[i] + b > cost.budget_bytes[i], "offloaded while memory did not bind"
        offloaded.append(sum(sol.plan.offloaded))
        stalls.append(cost.io_stall_s)
    assert offloaded[:2] == [0, 0] and stalls[:2] == [0.0, 0.0]
    assert all(o > 0 for o in offloaded[2:])
    assert offloaded == sorted(offloaded) and stalls == sorted(stalls) and stalls[-1] > stalls[2]


def test_milp_infeasible_names_total_memory_and_storage():
    b = layer_b()
    cl = cluster_of(device("a", 40, master_f() + 2.2 * b, 20, None), device("b", 40, 1.1 * b, 20, 400.0))
    # b can hold any number of layers offloaded only if its KV fits beside the staging buffer: shrink below that
    cl2 = cluster_of(device("a", 40, master_f() + 2.2 * b, 20, None), device("b", 40, 0.9 * b, 20, 400.0))
    assert PL.plan_pipeline(MODEL, cl, DECODE).plan.layers[1] >= 4
    with pytest.raises(InfeasibleError, match=r"^infeasible: total memory \+ storage: .* at most 2 of the 6") as err:
        PL.plan_pipeline(MODEL, cl2, DECODE)
    assert "\n" not in str(err.value)


def test_milp_rejects_bad_solver_settings():
    with pytest.raises(WorkbenchError, match="mip_rel_gap must be a finite number > 0"):
        PL.plan_pipeline(MODEL, roomy(2), DECODE, mip_rel_gap=-1.0)


def test_laptops_example_llama2_13b():
    cfg = load_config(REPO / "examples" / "laptops_wifi.toml")
    assert cfg.model.name == "Llama 2-13B"
    wl = cfg.workload("decode")
    sol = PL.plan_pipeline(cfg.model, cfg.cluster, wl)
    r = PP.evaluate_pipeline(cfg.model, cfg.cluster, wl, sol.plan)
    assert sol.objective_s == pytest.approx(r.latency_s, rel=1e-9) and not r.oom
    assert r.latency_s <= PP.evaluate_pipeline_offload(cfg.model, cfg.cluster, wl).latency_s


# ---- the kernel ---------------------------------------------------------------------------------------------
KCFG = tiny_config("llama", n_layers=5, n_kv_heads=4)


@pytest.mark.parametrize("layers", [(3, 2), (1, 4), (1, 2, 1, 1), (0, 3, 0, 2), (5, 0, 0, 0)])
def test_kernel_equals_reference(layers, cpu_devices):
    params = ref.init_params(KCFG, 1)
    tokens = np.array([5, 17, 3, 88, 41, 9])
    plan = PP.PipelinePlan(layers, (0,) * (len(layers) - 1) + (min(1, layers[-1]),))  # offloading changes nothing
    stages = KP.shard_stages(KCFG, params, make_mesh(len(layers)), plan)
    got = KP.pipeline_forward(stages, params, tokens)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref.forward(KCFG, params, tokens)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layers", [(3, 2), (1, 2, 1, 1), (0, 3, 0, 2), (5, 0, 0, 0)])
@pytest.mark.parametrize("seq", [1, 6])
def test_compiled_handoffs_are_the_cost_models(layers, seq, cpu_devices):
    params = ref.init_params(KCFG, 2)
    plan = PP.PipelinePlan(layers)
    mesh = make_mesh(len(layers))
    stages = KP.shard_stages(KCFG, params, mesh, plan)
    tokens = np.arange(seq) + 1
    table = compiled_collectives(KP.make_backbone(KCFG, mesh, plan), stages.blocks, stages.valid,
                                 KP.master_input(stages, params, tokens))
    workload = Workload("prefill" if seq > 1 else "decode", seq_len=seq, kv_len=seq, activation_bits=32)
    cl = cluster_of(*[device(f"d{i}", 10, GIB, 10, 100.0) for i in range(len(layers))])
    cost = PP.pipeline_cost(KCFG, cl, workload, plan)
    assert set(table.kind) <= {"collective-permute"}
    assert len(table) == cost.handoffs == plan.handoffs
    assert table.result_bytes.sum() == pytest.approx(cost.handoff_bytes_s * cl.topology.link.bandwidth_bytes_per_s,
                                                     rel=1e-12)
    assert table.result_bytes.sum() == plan.handoffs * PP.handoff_bytes(KCFG, workload)
    assert list(table.groups) == [f"{{{{{a},{b}}}}}" for a, b in KP.ring_pairs(plan)]


def test_kernel_rejects_a_plan_for_another_mesh(cpu_devices):
    params = ref.init_params(KCFG, 0)
    with pytest.raises(WorkbenchError, match=r"one entry per mesh device \(2\)"):
        KP.shard_stages(KCFG, params, make_mesh(2), PP.PipelinePlan((2, 2, 1)))
    with pytest.raises(WorkbenchError, match=r"sum to n_layers \(5\)"):
        KP.shard_stages(KCFG, params, make_mesh(2), PP.PipelinePlan((2, 2)))
    with pytest.raises(WorkbenchError, match="Llama decoder"):
        KP.shard_stages(tiny_config("gpt"), params, make_mesh(2), PP.PipelinePlan((1, 1)))


def test_big_model_is_not_needed_for_the_kernel_test():
    assert get_model("Llama 2-13B").n_layers == 40 and jax.devices()[0].platform == "cpu"


def test_evaluate_planned_costs_the_decode_plan_for_either_phase():
    cl = tight()
    sol = PL.plan_pipeline(MODEL, cl, DECODE)
    for workload in (DECODE, PREFILL):
        r = PL.evaluate_planned(MODEL, cl, workload)
        assert r.extra["plan"] == sol.plan and r.phase == workload.phase
        assert r.latency_s == pytest.approx(PP.pipeline_cost(MODEL, cl, workload, sol.plan).latency_s, rel=1e-12)
