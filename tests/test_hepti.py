"""Hepti: kernels equal the reference with uneven splits and move what the model says; the cost model agrees
with the compiled programs and the network module; the MILP matches brute force; the dynamic run keeps
every device within its memory on the shipped trace where the static partition does not."""

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.kernels import hepti as hk
from workbench.kernels import reference as ref
from workbench.kernels.traffic import parse_collectives
from workbench.machine import network
from workbench.model.models import get_model, tiny_config
from workbench.papers import hepti as wb
from workbench.schemes import SCHEMES, Cluster, Workload, load_all
from workbench.schemes.hepti import (
    BlockShape,
    DeviceProfile,
    Partition,
    _steps_2d,
    evaluate_partition,
    link_bytes_per_device,
    new_slice_bytes,
    weight_slices,
)
from workbench.schemes.planners.hepti import brute_force_p2, build_p2, linear_cost, plan, solve_p2

S = 8
WL_TINY = Workload("prefill", S, weight_bits=32, activation_bits=32)
# uneven splits of tiny_config (8 head units, 8 rows, d_ff 128, d_model 64) on 1, 2, 4, 8 devices
PARTITIONS = {
    ("ws", 1): Partition("ws", (8,), (8,)),
    ("ws", 2): Partition("ws", (5, 3), (2, 6)),
    ("ws", 4): Partition("ws", (3, 1, 2, 2), (1, 4, 0, 3)),
    ("ws", 8): Partition("ws", (2, 1, 1, 0, 1, 1, 1, 1), (1, 1, 2, 1, 0, 1, 1, 1)),
    ("1d", 1): Partition("1d", (8,), (8,), (128,)),
    ("1d", 2): Partition("1d", (6, 2), (3, 5), (100, 28)),
    ("1d", 4): Partition("1d", (3, 1, 2, 2), (1, 4, 0, 3), (40, 20, 60, 8)),
    ("1d", 8): Partition("1d", (1, 2, 1, 1, 0, 1, 1, 1), (2, 1, 1, 1, 1, 0, 1, 1), (30, 10, 20, 8, 16, 4, 24, 16)),
    ("2d", 1): Partition("2d", (8,), ffn=(128,), cols=(64,), grid=(1, 1)),
    ("2d", 2): Partition("2d", (5, 3), ffn=(100, 28), cols=(64,), grid=(2, 1)),
    ("2d", 4): Partition("2d", (3, 1, 2, 2), ffn=(100, 28), cols=(40, 24), grid=(2, 2)),
    ("2d", 8): Partition("2d", (1, 1, 2, 2, 1, 1, 0, 0), ffn=(90, 38), cols=(10, 20, 30, 4), grid=(2, 4)),
}
LINK_FACTOR = {"all-gather": lambda g: (g - 1) / g, "reduce-scatter": lambda g: g - 1,
               "all-reduce": lambda g: 2 * (g - 1) / g}


def _block(cfg, seed=0):
    p = ref.init_block_params(cfg, jax.random.PRNGKey(seed))
    x = jax.random.normal(jax.random.PRNGKey(seed + 1), (S, cfg.d_model))
    return p, x, jnp.arange(S)


def _reference(cfg, p, x, pos):
    return jax.jit(lambda p, x, pos: ref.block_forward(cfg, p, x, pos)[0])(p, x, pos)


def _compile(cfg, part, p, x, pos):
    args = hk.block_args(cfg, p, part, x, pos)
    compiled = hk.block_program(cfg, part, S).lower(*args).compile()
    return compiled(*args), [c for c in parse_collectives(compiled.as_text()) if c.group_size > 1]


def _by_kind(collectives):
    out = {}
    for c in collectives:
        out[c.kind] = out.get(c.kind, 0) + c.result_bytes
    return out


# ---- kernels ------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,n", sorted(PARTITIONS))
def test_kernel_equals_reference_and_modelled_traffic(cpu_devices, mode, n):
    cfg = tiny_config("llama")
    p, x, pos = _block(cfg)
    got, collectives = _compile(cfg, PARTITIONS[mode, n], p, x, pos)
    np.testing.assert_allclose(got, _reference(cfg, p, x, pos), rtol=1e-5, atol=1e-5)
    assert _by_kind(collectives) == hk.kernel_traffic(cfg, S, PARTITIONS[mode, n])
    if n > 1:
        assert collectives, "a multi-device split must communicate"


@pytest.mark.parametrize("family", ["gpt", "bert"])
@pytest.mark.parametrize("mode", ["ws", "1d", "2d"])
def test_planner_chosen_split_other_families(cpu_devices, family, mode):
    cfg = tiny_config(family)
    part = plan(cfg, WL_TINY, wb.tiny_profiles(4), mode=mode).partition
    assert len(set(part.heads)) > 1, "the planner's split on devices of different speed should be uneven"
    p, x, pos = _block(cfg, seed=3)
    got, collectives = _compile(cfg, part, p, x, pos)
    np.testing.assert_allclose(got, _reference(cfg, p, x, pos), rtol=1e-5, atol=1e-5)
    assert _by_kind(collectives) == hk.kernel_traffic(cfg, S, part)


def test_grouped_query_attention_with_idle_devices(cpu_devices):
    cfg = tiny_config("llama", n_kv_heads=2)  # 2 head units of 4 query heads on up to 8 devices
    p, x, pos = _block(cfg, seed=5)
    want = _reference(cfg, p, x, pos)
    for part in (Partition("1d", (0, 1, 0, 1), (2, 2, 2, 2), (32, 32, 32, 32)),
                 Partition("2d", (1, 0, 0, 0, 0, 0, 1, 0), ffn=(64, 64), cols=(16, 16, 16, 16), grid=(2, 4))):
        got, _ = _compile(cfg, part, p, x, pos)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_forward_switching_modes_between_blocks(cpu_devices):
    cfg = tiny_config("gpt")
    params = ref.init_params(cfg, 2)
    tokens = np.array([3, 17, 5, 42, 8, 1, 60, 9])
    parts = [PARTITIONS["ws", 4], PARTITIONS["2d", 8]]  # the mode and the device set change between blocks
    np.testing.assert_allclose(hk.hepti_forward(cfg, params, tokens, parts), ref.forward(cfg, params, tokens),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_cost_model_link_bytes_equal_compiled_program_for_even_splits(cpu_devices, family):
    cfg = tiny_config(family)
    p, x, pos = _block(cfg)
    for part in (Partition("ws", (2,) * 4, (2,) * 4), Partition("1d", (2,) * 4, (2,) * 4, (32,) * 4),
                 Partition("2d", (1,) * 8, ffn=(64, 64), cols=(16,) * 4, grid=(2, 4))):
        _, collectives = _compile(cfg, part, p, x, pos)
        compiled = sum(LINK_FACTOR[c.kind](c.group_size) * c.result_bytes for c in collectives)
        np.testing.assert_allclose(link_bytes_per_device(cfg, WL_TINY, part), compiled)


# ---- cost model ---------------------------------------------------------------------------------
def test_ring_links_equal_network_ring_collectives():
    cfg, wl = get_model("BERT-L"), Workload("prefill", 128, weight_bits=32, activation_bits=32)
    prof = [DeviceProfile("d", 1.5e9, 0.125, 1e10, 125e6, 2e-4)] * 4
    bd = evaluate_partition(cfg, wl, Partition("1d", (4,) * 4, (32,) * 4, (1024,) * 4), prof, "ring")
    link, data = network.collective_latency("ring", "all_reduce", 4, 128 * 1024 * 4, 125e6, 2e-4, breakdown=True)
    assert bd.comm_bytes_s == pytest.approx(2 * cfg.n_layers * data, rel=1e-12)  # two all-reduces per block
    assert bd.comm_link_s == pytest.approx(2 * cfg.n_layers * link, rel=1e-12)


@pytest.mark.parametrize("family", ["llama", "gpt", "bert"])
def test_every_split_covers_the_block_flops_exactly(family):
    cfg = tiny_config(family, n_kv_heads=4) if family == "llama" else tiny_config(family, n_heads=4)
    sh = BlockShape.of(cfg, WL_TINY)
    want = cfg.block_flops(S)
    for part in (Partition("ws", (1, 2, 1, 0), (3, 1, 4, 0)), Partition("1d", (1, 2, 1, 0), (3, 1, 4, 0), (5, 60, 3, 60)),
                 Partition("2d", (1, 2, 1, 0), ffn=(100, 28), cols=(40, 24), grid=(2, 2))):
        part.check(cfg, S)
        if part.mode == "2d":
            total = sum(flops.sum() for _, flops, _, _ in _steps_2d(cfg, sh, part))
        else:
            cost = linear_cost(cfg, WL_TINY, part.mode)
            alloc = {"heads": np.array(part.heads), "rows": np.array(part.rows), "ffn": np.array(part.ffn)}
            total = sum(sum(c * alloc[d] for d, c in st.flops_per_unit.items()).sum() for st in cost.stages)
        assert total == pytest.approx(want, rel=1e-12), part.mode


def test_ws_replicates_weights_tiled_modes_split_them():
    cfg, wl = get_model("BERT-L"), Workload("prefill", 128, weight_bits=32, activation_bits=32)
    sh = BlockShape.of(cfg, wl)
    mem = {}
    for n in (2, 8):
        prof = [DeviceProfile("d", 1.5e9, 0.125, 1e12, 125e6)] * n
        for mode in ("ws", "1d"):
            mem[mode, n] = max(plan(cfg, wl, prof, mode=mode).breakdown.memory_bytes[1:])
    assert mem["ws", 8] > cfg.n_layers * sh.ws_replicated_bytes()
    assert mem["ws", 8] > 0.8 * mem["ws", 2]  # replicated: barely shrinks
    assert mem["1d", 8] < 0.35 * mem["1d", 2]  # split: shrinks about as 1/n


def test_registered_schemes_report_oom_when_ws_does_not_fit():
    from workbench.machine.hardware import load_device
    from workbench.machine.network import Link, Topology

    load_all()
    assert {k: SCHEMES[k][0] for k in ("hepti_ws", "hepti_1d", "hepti_2d")} == dict.fromkeys(
        ("hepti_ws", "hepti_1d", "hepti_2d"), "hepti")
    small = load_device("hepti_rpi4").with_memory("DRAM", capacity_bytes=600 * 2**20)
    cluster = Cluster((small,) * 4, Topology("switch", 4, Link.from_mbps(1000, 0.1)))
    wl = Workload("prefill", 128, weight_bits=32, activation_bits=32)
    ws = SCHEMES["hepti_ws"][1](get_model("BERT-L"), cluster, wl)
    tiled = SCHEMES["hepti_1d"][1](get_model("BERT-L"), cluster, wl)
    assert ws.oom and not tiled.oom
    assert ws.latency_s < tiled.latency_s  # WS has less traffic when it fits
    assert ws.comm_bytes_s > 0 and ws.comm_link_latency_s > 0


def test_reloading_after_a_switch_counts_only_new_slices():
    cfg = tiny_config("gpt")
    ws, tiled = PARTITIONS["ws", 4], PARTITIONS["1d", 4]
    a, b = weight_slices(cfg, ws), weight_slices(cfg, tiled)
    assert new_slice_bytes(cfg, WL_TINY, a[0], b[0]) == 0  # WS -> 1D with the same heads: a subset
    assert new_slice_bytes(cfg, WL_TINY, b[0], a[0]) > 0  # back to WS: Wo and the FFN must be loaded
    assert new_slice_bytes(cfg, WL_TINY, a[0], a[0]) == 0


# ---- the MILP -----------------------------------------------------------------------------------
def _small_instance(seed, n=3):
    rng = np.random.default_rng(seed)
    return [DeviceProfile(f"d{i}", 1e9, float(rng.uniform(1, 4)), float(rng.uniform(0.5, 2)) * 2**20,
                          float(rng.uniform(5e6, 5e7)), 1e-4) for i in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", ["ws", "1d"])
@pytest.mark.parametrize("comm", ["shared", "ring"])
def test_milp_matches_brute_force(seed, mode, comm):
    cfg = tiny_config("gpt", n_heads=4, d_model=32, d_ff=12)
    wl = Workload("prefill", 6, weight_bits=32, activation_bits=32)
    cost = linear_cost(cfg, wl, mode)
    profiles = _small_instance(seed)
    _, best = brute_force_p2(cost, profiles, comm_model=comm)
    sol = solve_p2(cost, profiles, comm_model=comm, integrality="all")
    assert sol.latency_s == pytest.approx(best, rel=1e-9)
    assert solve_p2(cost, profiles, comm_model=comm).latency_s >= best * (1 - 1e-12)  # rounded shares: never better


@pytest.mark.parametrize("mode", ["ws", "1d"])
def test_time_indexed_heads_equal_plain_milp(mode):
    s = wb.Setting.from_constants()
    profiles = wb.random_profiles(s, 12, seed=3)
    cost = linear_cost(s.cfg, s.workload, mode)
    program = build_p2(cost, profiles, None, "ring", integer_dims=("heads",))
    assert program.columns("heads") == slice(0, len(profiles)) and program.integrality[program.columns("heads")].all()
    assert not program.integrality[program.columns("rows")].any() and program.column("one") == program.n_variables - 1
    plain = milp(program.c, integrality=program.integrality, bounds=Bounds(program.lb, program.ub),
                 constraints=LinearConstraint(program.A, program.lo, program.hi), options={"mip_rel_gap": 1e-9})
    fast = solve_p2(cost, profiles, comm_model="ring", integrality="heads", mip_rel_gap=1e-9)
    assert fast.objective_s == pytest.approx(plain.fun / 1e3, rel=1e-7)
    assert fast.alloc["heads"].sum() == s.cfg.n_kv_heads


def test_devices_with_zero_share_are_dropped_and_the_rest_resolved():
    s = wb.Setting.from_constants()
    profiles = s.profiles(4)
    profiles[2] = profiles[2].with_changes(cycles_per_flop=1e3, bandwidth_bytes_per_s=1e5)  # hopeless device
    pl = plan(s.cfg, s.workload, profiles, mode="ws")
    assert 2 in pl.dropped and 2 not in pl.devices and pl.solves == 2
    first = solve_p2(linear_cost(s.cfg, s.workload, "ws"), profiles, comm_model=s.comm_model)
    assert pl.latency_s < first.latency_s


def test_mode_choice_follows_memory_and_device_count():
    s = wb.Setting.from_constants()
    cfg, wl = s.cfg, s.workload
    assert plan(cfg, wl, s.profiles(5)).mode == "ws"
    tight = [p.with_changes(free_memory_bytes=800 * 2**20) for p in s.profiles(5)]
    assert plan(cfg, wl, tight).mode == "1d"
    many = [p.with_changes(free_memory_bytes=800 * 2**20) for p in s.profiles(s.threshold)]  # the paper's 16
    two_d = plan(cfg, wl, many)
    assert two_d.mode == "2d" and two_d.partition.grid[0] > 1
    assert all(m <= 800 * 2**20 for m in two_d.breakdown.memory_bytes)
    assert plan(cfg, wl, many, threshold=32).mode == "1d"
    alone = [s.profiles(3)[0]] + [p.with_changes(free_memory_bytes=0.0) for p in s.profiles(3)[1:]]
    assert plan(cfg, wl, alone).mode == "serial"


def test_infeasible_deadline_names_the_binding_constraint():
    s = wb.Setting.from_constants()
    with pytest.raises(InfeasibleError, match=r"^infeasible: deadline \(T <= D\): D = 0.1 s .* takes"):
        plan(s.cfg, s.workload, s.profiles(5), deadline=0.1)
    assert plan(s.cfg, s.workload, s.profiles(5), deadline=60.0).latency_s <= 60.0


def test_infeasible_memory_names_the_binding_constraint():
    s = wb.Setting.from_constants()
    starved = [p.with_changes(free_memory_bytes=100 * 2**20) for p in s.profiles(5)]
    with pytest.raises(InfeasibleError, match=r"^infeasible: memory budget \(Eq. 4\) in mode 1D-tiled WS: device 0"):
        plan(s.cfg, s.workload, starved)
    thin = [p.with_changes(free_memory_bytes=300 * 2**20) for p in s.profiles(3)]
    with pytest.raises(InfeasibleError, match=r"^infeasible: memory budget \(Eq. 4\)"):
        plan(s.cfg, s.workload, thin)


def test_bad_inputs_raise_clear_errors():
    cfg = tiny_config("llama")
    with pytest.raises(WorkbenchError, match="heads split sizes .* must sum to 8"):
        Partition("ws", (3, 3), (4, 4)).check(cfg, 8)
    with pytest.raises(WorkbenchError, match="unknown mode"):
        Partition("3d", (8,))
    with pytest.raises(WorkbenchError, match="2d partition needs grid"):
        Partition("2d", (8,), ffn=(128,), cols=(64,))
    with pytest.raises(WorkbenchError, match="cycles_per_flop"):
        DeviceProfile("d", 1e9, -1.0, 1e9, 1e6)
    s = wb.Setting.from_constants()
    with pytest.raises(WorkbenchError, match="comm_model"):
        plan(s.cfg, s.workload, s.profiles(2), comm_model="mesh")
    with pytest.raises(WorkbenchError, match="deadline"):
        plan(s.cfg, s.workload, s.profiles(2), deadline=-1.0)
    with pytest.raises(WorkbenchError, match="unknown hepti setting"):
        wb.Setting.from_constants(bandwith_mbps=10)


def test_setting_reads_the_toml_and_keeps_its_floats_floats():
    s, c = wb.Setting.from_constants(), wb.constants()
    assert (s.free_memory_mib, s.threshold, s.replan_overhead_s) == (c["free_memory"], c["mode_threshold_devices"],
                                                                      c["replan_overhead"])
    assert type(s.free_memory_mib) is float and type(s.bandwidth_mbps) is float  # the toml writes 2600 and 1000
    assert (s.device, s.path_hops) == ("hepti_rpi4", 2)  # not constants: the preset and the switch's hops
    with pytest.raises(WorkbenchError, match="replan_overhead_s must be"):
        wb.Setting.from_constants(replan_overhead_s=-1.0)


def test_bad_trace_is_rejected(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"time_s": [0], "device": ["sec1"]}).to_csv(path, index=False)
    with pytest.raises(WorkbenchError, match="lacks columns"):
        wb.load_trace(path)


# ---- the dynamic run ----------------------------------------------------------------------------
def test_shipped_trace_is_the_documented_generator_output():
    shipped = wb.load_trace()
    regenerated = wb.generate_trace(**wb.shipped_trace_parameters())
    pd.testing.assert_frame_equal(shipped, regenerated, check_dtype=False)
    other = wb.generate_trace(**{**wb.shipped_trace_parameters(), "seed": 8})
    assert not other.free_memory_mib.equals(regenerated.free_memory_mib)


def test_dynamic_run_never_exceeds_memory_where_static_does():
    s = wb.Setting.from_constants()
    trace = wb.load_trace()
    runs = wb.dynamic_vs_static(s, trace)
    static, dynamic = (runs[p].summary() for p in ("static", "dynamic"))
    assert static["memory_violations"] > 0 and static["oom_events"] > 0
    assert dynamic["memory_violations"] == 0 and dynamic["oom_events"] == 0
    assert {"ws", "1d"} <= set(runs["dynamic"].layers["mode"])  # it switched modes
    assert dynamic["completed"] > static["completed"]
    for run in runs.values():  # the run's times are exactly workbench.core.simulate's schedule
        assert run.timeline.makespan == pytest.approx(run.requests.end_s.max(), rel=1e-12)


def test_arena_hepti_charges_each_kernel_a_launch_and_the_head_as_serial():
    """Every device launches each block's kernels (a split kernel keeps its launch), the primary the head's."""
    from workbench.machine.hardware import load_device
    from workbench.machine.network import Link, Topology
    from workbench.model.models import get_model
    from workbench.schemes.base import Cluster, Workload
    from workbench.schemes.common import KERNELS_PER_LAYER
    from workbench.schemes.hepti import evaluate_hepti_ws

    dev = load_device("hepti_rpi4")
    model, wl = get_model("Llama 2-7B"), Workload("decode", 128, 128, 4.5, 16)
    topo = Topology("switch", 4, Link.from_mbps(1000, 0.1))
    bare = evaluate_hepti_ws(model, Cluster((dev,) * 4, topo), wl)
    launched = evaluate_hepti_ws(model, Cluster((dev.with_changes(kernel_launch_s=1e-4),) * 4, topo), wl)
    kernels = model.n_layers * KERNELS_PER_LAYER + 1  # + the head's
    assert launched.latency_s - bare.latency_s == pytest.approx(kernels * 1e-4)
    assert launched.fixed_s == pytest.approx(kernels * 1e-4)
    assert bare.serial_s > 0 and bare.parts_s == pytest.approx(bare.latency_s)


# ---- issue 20: the runtime on workbench.core.simulate.Scheduler, no assumed storage rate ------------------------------
def test_storage_rate_is_the_device_presets_never_an_assumed_one():
    assert wb.Setting.from_constants().storage_bytes_per_s == 45e6  # data/devices/hepti_rpi4.toml
    s = wb.Setting.from_constants(device="a100")  # a preset without storage_read_bandwidth
    with pytest.raises(WorkbenchError, match="storage_read_bandwidth"):
        _ = s.storage_bytes_per_s
    with pytest.raises(WorkbenchError, match="storage_read_bandwidth"):
        wb.run_trace(s, wb.load_trace(), "static")


def test_runtime_blocks_are_the_timelines_tasks_through_ooms_and_switches():
    trace = wb.generate_trace(seed=3, n_secondaries=3, duration_s=60, free_memory_mib=1500)
    s = wb.Setting.from_constants(free_memory_mib=1500, deadline_s=2.0)
    run = wb.run_trace(s, trace, "dynamic")
    summary = run.summary()
    assert summary["oom_events"] > 0 and summary["mode_switches"] > 0 and summary["solves"] > 0
    frame = run.timeline.frame.set_index("name")
    for r in run.layers.drop_duplicates(["request", "layer"]).itertuples():
        task = frame.loc[f"r{r.request}.b{r.layer}"]
        assert (task.start, task.end) == (r.start_s, r.end_s)
    for r in run.requests[run.requests.oom].itertuples():  # an OOM ends the request with the reload
        assert frame.loc[f"r{r.request}.restart", "end"] == r.end_s
    assert frame[frame.resource.str.startswith("storage")].shape[0] > 0  # switches load slices from storage


@pytest.mark.parametrize("mode", ["ws", "1d", "2d"])
def test_arena_costs_a_memory_bound_decode_on_the_roofline(mode):
    """In the arena a Hepti step takes the slower of its FLOPs and the bytes it streams, as every scheme is
    costed: on one device its decode step equals the single-device roofline (`local`) within 2 %, where the
    paper's compute-only Eq. 5 is about twice as fast; the paper's path (no stream rate) is unchanged."""
    import math

    from workbench.machine.hardware import load_device
    from workbench.machine.network import Link, Topology
    from workbench.schemes import hepti as H

    load_all()
    pi = load_device("hepti_rpi4")
    cfg = get_model("Llama 2-7B")
    wl = Workload("decode", 1, 128, weight_bits=16, activation_bits=16)
    one = Cluster((pi,), Topology("switch", 1, Link.from_mbps(1000, 0.1)))
    local = SCHEMES["local"][1](cfg, one, wl).latency_s
    hepti = SCHEMES[f"hepti_{mode}"][1](cfg, one, wl)
    assert hepti.latency_s == pytest.approx(local, rel=0.02)
    profiles = H.cluster_profiles(one, wl, roofline=False)
    assert profiles[0].stream_bytes_per_s == math.inf
    part = H.proportional_partition(cfg, wl, mode, profiles)
    paper = H.evaluate_partition(cfg, wl, part, profiles, "ring").latency_s
    assert paper < 0.7 * hepti.latency_s  # compute only: the weights' streaming is missing
    with_rate = H.cluster_profiles(one, wl)
    assert with_rate[0].stream_bytes_per_s == pytest.approx(
        pi.memory[-1].bandwidth_bytes_per_s * pi.memory_efficiency)
    assert H.evaluate_partition(cfg, wl, part, with_rate, "ring").latency_s > paper / 0.7


def test_the_kv_cache_is_held_and_read_at_its_own_width():
    """`Workload.kv_bits` sets the cache's bytes in a device's memory and in what a decode step streams."""
    from workbench.machine.hardware import load_device
    from workbench.machine.network import Link, Topology

    load_all()
    pi = load_device("hepti_rpi4").with_memory("DRAM", capacity_bytes=64 * 2**30)
    cfg = get_model("Llama 2-7B")
    cluster = Cluster((pi,) * 2, Topology("switch", 2, Link.from_mbps(1000, 0.1)))
    wide = Workload("decode", 1, 4096, weight_bits=4, activation_bits=16)
    narrow = Workload("decode", 1, 4096, weight_bits=4, activation_bits=16, kv_bits=8)
    a, b = (SCHEMES["hepti_1d"][1](cfg, cluster, w) for w in (wide, narrow))
    cache_bytes = cfg.n_layers * 2 * 4096 * cfg.n_kv_heads * cfg.d_head  # 16-bit cache minus 8-bit, both devices
    assert sum(a.peak_memory_bytes) - sum(b.peak_memory_bytes) == pytest.approx(cache_bytes, rel=1e-6)
    assert b.latency_s < a.latency_s
