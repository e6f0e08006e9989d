"""Galaxy: shard_map kernels equal the reference and move what the cost model says; Algorithm 1 and its
exact optimum; the latency/memory model pinned to Table I, Table IV and Figs. 8-10."""

import math
import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.io import DATA_DIR
from workbench.kernels import reference as ref
from workbench.kernels.galaxy import KERNEL_SCHEMES, expected_collectives, galaxy_forward, program
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import parse_collectives
from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology, bottleneck_bytes, endpoint_messages
from workbench.model.models import get_model, tiny_config
from workbench.papers import galaxy as G
from workbench.report.fidelity import load_reported
from workbench.schemes.base import SCHEMES, Cluster, Workload
from workbench.schemes.galaxy import (
    Partition,
    layer_collectives,
    overlap_timeline,
    tp_memory_bytes,
    uniform_partition,
)
from workbench.schemes.planners import galaxy as PL
from workbench.schemes.planners.galaxy import evaluate

SEQ = 11


def _cfg(family: str, layers: int = 1):
    return tiny_config(family, n_layers=layers, **({"n_kv_heads": 4} if family == "llama" else {}))


def _reference_stack(cfg, blocks, x_se):
    positions = jnp.arange(x_se.shape[0])
    for p in blocks:
        x_se, _ = ref.block_forward(cfg, p, x_se, positions)
    return x_se


def _check_kernel(cfg, part: Partition, scheme: str, seed: int = 0):
    """Compile once: the output equals the reference stack and the HLO's collectives the analytical model."""
    params = ref.init_params(cfg, seed)
    x_se = jax.random.normal(jax.random.PRNGKey(seed + 1), (sum(part.seq), cfg.d_model))
    prog = program(cfg, params["blocks"], sum(part.seq), make_mesh(part.n), scheme, part)
    compiled = prog.compile(x_se)
    got = prog.unpad(compiled(*prog.weights, prog.pad(x_se)))
    want = _reference_stack(cfg, params["blocks"], x_se)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5, rtol=1e-4)
    moved: dict[str, int] = {}
    for c in parse_collectives(compiled.as_text()):
        moved[c.kind] = moved.get(c.kind, 0) + c.result_bytes
    assert moved == expected_collectives(cfg, scheme, part)


# ---- kernels -------------------------------------------------------------------------------------
@pytest.mark.parametrize("family,n", [("gpt", 1), ("gpt", 8), ("bert", 2), ("llama", 4)])
@pytest.mark.parametrize("scheme", KERNEL_SCHEMES)
def test_kernels_equal_reference_on_even_splits(cpu_devices, family, n, scheme):
    cfg = _cfg(family)
    _check_kernel(cfg, uniform_partition(cfg, n, SEQ), scheme)


UNEVEN = {
    "gpt-2": ("gpt", Partition((3, 5), (40, 88), (4, 7))),
    "bert-4-zero-shares": ("bert", Partition((1, 2, 0, 5), (8, 0, 70, 50), (0, 5, 3, 3))),
    "llama-4-gqa": ("llama", Partition((2, 0, 4, 2), (30, 30, 30, 38), (6, 1, 0, 4))),
}


@pytest.mark.parametrize("case", list(UNEVEN))
@pytest.mark.parametrize("scheme", KERNEL_SCHEMES)
def test_kernels_equal_reference_on_uneven_planner_splits(cpu_devices, case, scheme):
    family, part = UNEVEN[case]
    _check_kernel(_cfg(family), part, scheme, seed=3)


def test_whole_model_forward_with_overlap(cpu_devices):
    cfg = _cfg("gpt", layers=2)
    params = ref.init_params(cfg, 5)
    tokens = jnp.arange(SEQ) * 7 % cfg.vocab_size
    got = galaxy_forward(cfg, params, tokens, make_mesh(2), "galaxy_hmp_overlap", Partition((3, 5), (40, 88), (4, 7)))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref.forward(cfg, params, tokens)), atol=2e-5, rtol=1e-4)


def test_ring_overlap_moves_exactly_the_ring_collectives_bytes():
    cfg = _cfg("gpt", layers=3)
    part = uniform_partition(cfg, 4, 16)
    wl = Workload("prefill", 16, 16, weight_bits=32, activation_bits=32)
    ring = sum(bottleneck_bytes("ring", k, 4, m) for k, m in layer_collectives("galaxy_hmp", cfg, wl)) * 3
    assert expected_collectives(cfg, "galaxy_hmp_overlap", part) == {"collective-permute": int(ring)}


def test_kernel_input_errors(cpu_devices):
    cfg = _cfg("gpt")
    blocks = ref.init_params(cfg, 0)["blocks"]
    with pytest.raises(WorkbenchError, match="heads must sum to 8"):
        program(cfg, blocks, SEQ, make_mesh(2), "galaxy_hmp", Partition((3, 3), (64, 64), (5, 6)))
    with pytest.raises(WorkbenchError, match="mesh has 4"):
        program(cfg, blocks, SEQ, make_mesh(4), "sp", Partition((4, 4), (64, 64), (5, 6)))
    with pytest.raises(WorkbenchError, match="unknown scheme"):
        program(cfg, blocks, SEQ, make_mesh(2), "pipeline")
    with pytest.raises(WorkbenchError, match="GQA group"):
        program(_cfg("llama"), blocks, SEQ, make_mesh(2), "galaxy_hmp", Partition((3, 5), (64, 64), (5, 6)))
    with pytest.raises(WorkbenchError, match="integers >= 0"):
        Partition((4, -4), (64, 64), (5, 6))


# ---- cost model ------------------------------------------------------------------------------------
def test_all_four_parallel_schemes_are_registered():
    for name in ("megatron_tp", "sp", "galaxy_hmp", "galaxy_hmp_overlap", "local"):
        assert SCHEMES[name][0] == "galaxy"
    cluster = G.environment("B", 125)
    r = SCHEMES["galaxy_hmp_overlap"][1](get_model("BERT-L"), cluster, G.workload(284))
    assert r.latency_s == pytest.approx(r.compute_s + r.memory_s + r.fixed_s + r.serial_s + r.comm_link_latency_s
                                        + r.comm_bytes_s)
    assert len(r.peak_memory_bytes) == 3 and not r.oom


def test_hmp_moves_the_same_bytes_as_megatron():
    """Sec. III-B5: two ring RS + two ring AG carry what two ring all-reduces carry."""
    m, wl = get_model("GPT2-L"), G.workload(284)
    for n in (2, 3, 4):
        link = {s: sum(bottleneck_bytes("ring", k, n, b) for k, b in layer_collectives(s, m, wl))
                for s in ("megatron_tp", "galaxy_hmp")}
        assert link["megatron_tp"] == pytest.approx(link["galaxy_hmp"])


def test_overlap_hides_communication_but_never_beats_compute():
    m, wl = get_model("BERT-L"), G.workload(284)
    for env in ("A", "C", "F"):
        cluster = G.environment(env, 125)
        plain = evaluate("galaxy_hmp", m, cluster, wl)
        fused = evaluate("galaxy_hmp_overlap", m, cluster, wl)
        assert fused.latency_s < plain.latency_s
        assert fused.latency_s >= fused.compute_s + fused.memory_s > 0
    # a link with no latency and near-infinite bandwidth: nothing left to hide, the two coincide (without
    # fixed costs: with them the tiles' extra launches and the plain schedule's per-phase barriers differ)
    fast = Cluster(G.environment("F", 125, fixed_scale=0.0).devices, Topology("switch", 3, Link(1e15, 0.0)))
    assert evaluate("galaxy_hmp_overlap", m, fast, wl).latency_s == pytest.approx(
        evaluate("galaxy_hmp", m, fast, wl).latency_s, rel=1e-3)
    fast = Cluster(cluster.devices, Topology("switch", 3, Link(1e15, 0.0)))  # with fixed costs: never slower
    assert evaluate("galaxy_hmp_overlap", m, fast, wl).latency_s <= evaluate("galaxy_hmp", m, fast, wl).latency_s


def test_overlap_timeline_follows_the_ring():
    m, wl = get_model("DistilBERT"), G.workload(30)
    cluster = G.environment("B", 125)
    part = uniform_partition(m, 3, 30)
    tl = overlap_timeline(m, cluster, wl, part, 1)
    # step 1 of the AG+QKV on device 0 multiplies the chunk device 2 sent in step 0
    assert tl.frame.set_index("name").loc["L0.qkv.c0.1", "start"] >= tl.end_of("L0.qkv.s2.0")
    # the reduced chunk of device 1 waits for device 0's last forward
    assert tl.end_of("L0.con1.1") >= tl.end_of("L0.out.s0.1")
    assert set(tl.frame.kind) == {"compute", "communication"}


def test_memory_model_and_oom_pattern_of_table4():
    df = G.table4()
    oom = {(r.model, r.environment): (r.oom_vs_mlm, r.oom_vs_sp) for r in df.itertuples()}
    for model in ("GPT2-L", "OPT-L"):
        for env in ("A", "B", "C"):
            if (model, env) in oom:
                assert oom[(model, env)] == (False, True)
    assert oom[("OPT-XL", "A")] == oom[("OPT-XL", "B")] == (True, True)
    assert oom[("OPT-XL", "C")] == (False, True)
    assert oom[("BERT-L", "B")] == oom[("DistilBERT", "A")] == (False, False)


def _reported(artifact: str) -> pd.DataFrame:
    rep = load_reported()
    return rep[(rep.paper == "galaxy") & (rep.artifact == artifact)]


def _paper_range(artifact: str) -> tuple[float, float]:
    """Fig. 8's or Fig. 9's reported speedup range (data/reported/galaxy.csv)."""
    s = G.Setting.from_constants()
    setting = G.sweep_setting(s.sweep_mbps) if artifact == "Fig. 8" else G.hetero_setting(s.bandwidth_mbps)
    return tuple(G.reported_value(artifact, "", setting, q) for q in ("speedup_min", "speedup_max"))


def _paper_weak(model: str) -> float:
    """Fig. 10's reported 4-device weak-scaling efficiency of `model`."""
    s = G.Setting.from_constants()
    setting = f"env=C,{s.scaling_mbps:g}Mbps,{s.tokens_per_device} tokens/device,4 devices"
    return G.reported_value("Fig. 10", model, setting, "weak_scaling_efficiency")


def test_table4_speedups_within_tolerance_and_oom_cells_exact():
    modelled = G.speedup_rows("Table IV", G.table4())
    joined = _reported("Table IV").merge(modelled, on=["model", "setting", "quantity"], suffixes=("_r", "_m"))
    assert len(joined) == len(_reported("Table IV")) == 22
    err = (joined.value_m - joined.value_r).abs() / joined.value_r
    assert (err <= joined.tolerance + 1e-12).all(), joined.assign(err=err)[["model", "setting", "quantity", "err"]]


def test_fig8_bandwidth_sweep_range():
    low, high = G.speedup_range(G.bandwidth_sweep())
    paper_low, paper_high = _paper_range("Fig. 8")
    assert low == pytest.approx(paper_low, rel=0.10) and high == pytest.approx(paper_high, rel=0.10)


@pytest.mark.xfail(strict=True, reason="known miss: the model's smallest heterogeneous speedup is 1.48x "
                   "(env D vs SP; 1.478 before the fixed costs of issue 17, 1.480 after), the paper's 1.3x; compute "
                   "is assumed proportional to CPU frequency and the paper has no latency at a second clock to pin "
                   "a clock-independent share on; a network-stack CPU cost would need >= 8 cycles/B, where Table "
                   "IV's OPT-L env B row allows <= 4 (test_stack_cost_windows_do_not_overlap)")
def test_fig9_heterogeneous_range():
    low, high = G.speedup_range(G.heterogeneous())
    paper_low, paper_high = _paper_range("Fig. 9")
    assert low == pytest.approx(paper_low, rel=0.10) and high == pytest.approx(paper_high, rel=0.10)


def test_fig9_upper_end_and_memory_awareness():
    df = G.heterogeneous()
    _, high = G.speedup_range(df)
    assert high == pytest.approx(_paper_range("Fig. 9")[1], rel=0.10)
    # Galaxy fits models the memory-blind baselines cannot (Sec. IV-C)
    assert ((~df.galaxy_oom) & df.mlm_oom).any() and ((~df.galaxy_oom) & df.sp_oom).any()


@pytest.mark.xfail(strict=True, reason="known miss: at 1000 Mbps every ring step hides behind a GEMM tile, so "
                   "the model scales at 99.93 % / 99.98 % with the fixed costs of issue 17 (100.00 % before; 98.0 % "
                   "/ 99.4 % even at 30x the assumed costs), not the paper's 81 % / 86 %; even with every ring step "
                   "exposed and attention not counted it would be 88 % / 94 % (test_weak_scaling_miss_is_not_wire_"
                   "time...). Missing: CPU time the network stack takes from the GEMM cores would need 12-22 / "
                   "16-32 cycles per byte, where Table IV allows <= 4 (test_stack_cost_windows_do_not_overlap)")
def test_fig10_weak_scaling_efficiency():
    df = G.weak_scaling()
    four = df[df.devices == 4].set_index("model").scaling_efficiency
    assert abs(four["GPT2-L"] - _paper_weak("GPT2-L")) <= 0.05 and abs(four["OPT-XL"] - _paper_weak("OPT-XL")) <= 0.05


def test_weak_scaling_miss_is_not_wire_time_or_attention():
    """Fig. 10's bounds: per device the GEMM work is constant, so only the ring and attention grow with n.
    Even with every ring step exposed (plain HMP) and attention not counted as work, 4 Nano-M at 1000 Mbps
    scale far above the paper's 81 % / 86 %: the model's ~100 % is not a mis-costed collective."""
    b = G.weak_scaling_bounds().set_index(["model", "scheme"])
    for name in ("GPT2-L", "OPT-XL"):
        overlap, plain = b.loc[(name, "galaxy_hmp_overlap")], b.loc[(name, "galaxy_hmp")]
        assert overlap.scaling_efficiency == pytest.approx(1.0, abs=0.01)  # every ring step hidden (Sec. III-D)
        assert overlap.scaling_efficiency < 1.0  # ... but n tiles per GEMM are n launches (issue 17)
        assert plain.scaling_efficiency < overlap.scaling_efficiency  # the ring volume does grow with n ...
        assert plain.time_efficiency < plain.scaling_efficiency  # ... and so does attention
    assert b.loc[("GPT2-L", "galaxy_hmp"), "time_efficiency"] > _paper_weak("GPT2-L") + 0.05  # ... but not enough
    assert b.loc[("OPT-XL", "galaxy_hmp"), "time_efficiency"] > _paper_weak("OPT-XL") + 0.05
    # smaller hidden size -> larger communication-to-computation ratio -> GPT2-L loses more (the paper's order)
    assert b.loc[("GPT2-L", "galaxy_hmp"), "time_efficiency"] < b.loc[("OPT-XL", "galaxy_hmp"), "time_efficiency"]


def test_clock_independent_share_what_if():
    """x = 0 is the model (GEMM throughput proportional to the clock); a clock-independent share x of Nano-M's
    GEMM time compresses the capacity ratios to 1 / (x + (1 - x) 825 / f) and both ends of Fig. 9's range."""
    assert G.nano_cpu("L", clock_independent_share=0.0) == G.nano_cpu("L")
    assert G.nano_cpu("M", clock_independent_share=0.3).efficiency_gemm == G.nano_cpu("M").efficiency_gemm
    sens = G.clock_share_sensitivity((0.0, 0.2), models=("DistilBERT", "BERT-L")).set_index("clock_independent_share")
    assert sens.loc[0.0, "capacity_L_over_M"] == pytest.approx(1470 / 825, rel=1e-3)
    assert sens.loc[0.2, "capacity_L_over_M"] == pytest.approx(1 / (0.2 + 0.8 * 825 / 1470), rel=1e-3)
    assert sens.loc[0.2, "capacity_L_over_S"] == pytest.approx(  # stored peaks are rounded to 3 digits
        (0.2 + 0.8 * 825 / 403) / (0.2 + 0.8 * 825 / 1470), rel=1e-3)
    low, high = G.speedup_range(G.heterogeneous(models=("DistilBERT", "BERT-L")))
    assert (sens.loc[0.0, "speedup_min"], sens.loc[0.0, "speedup_max"]) == pytest.approx((low, high))
    assert sens.loc[0.2, "speedup_min"] < low and sens.loc[0.2, "speedup_max"] < high
    for bad in (-0.1, 1.0, "x"):
        with pytest.raises(WorkbenchError, match="clock_independent_share"):
            G.nano_cpu("M", clock_independent_share=bad)


def test_table1_fitted_constants_reproduce_their_rows_and_validate():
    with open(DATA_DIR / "devices" / "jetson_nano_cpu_m.toml", "rb") as f:
        stored = tomllib.load(f)["efficiency_gemm"]["value"]
    for mode in ("s", "l"):
        with open(DATA_DIR / "devices" / f"jetson_nano_cpu_{mode}.toml", "rb") as f:
            assert tomllib.load(f)["efficiency_gemm"]["value"] == stored
    assert stored == pytest.approx(G.fit_nano_cpu_efficiency(), rel=1e-3)
    with open(DATA_DIR / "devices" / "a100.toml", "rb") as f:
        assert tomllib.load(f)["layer_overhead"]["value"] == pytest.approx(G.fit_a100_layer_overhead(), rel=1e-3)
    t1 = G.table1().set_index(["model", "device"])
    paper = G.reported_value("Table I", "DistilBERT", "Nano-M S=30", "latency")
    assert t1.loc[("DistilBERT", "Nano-M"), "latency_s"] == pytest.approx(paper, rel=0.10)
    assert [bool(t1.loc[(m, "Nano-M"), "oom"]) for m in G.MODELS] == [False, False, True, True, True]


def test_a100_gemms_in_fp32_make_per_layer_time_grow_with_layer_size():
    """Table I's A100 per-layer time grows from 0.83 ms (BERT-L) to 1.19 ms (OPT-XL), x1.43; fp16 tensor
    cores would leave it flat (overhead-bound), fp32 GEMMs on CUDA cores reproduce it (the fitted choice)."""
    from dataclasses import replace

    t1 = G.table1().set_index(["model", "device"])
    per_layer = {m: t1.loc[(m, "A100"), "latency_s"] / get_model(m).n_layers for m in ("BERT-L", "OPT-XL")}
    paper = {m: G.reported_value("Table I", m, "A100 S=30", "latency") / get_model(m).n_layers for m in per_layer}
    assert per_layer["OPT-XL"] / per_layer["BERT-L"] == pytest.approx(paper["OPT-XL"] / paper["BERT-L"], rel=0.05)
    a100 = load_device("a100")
    cluster = Cluster((a100,), Topology("switch", 1, Link.from_mbps(1000)))
    fp16 = replace(G.workload(30, "gpu"), activation_bits=16)
    flat = [G.evaluate("local", get_model(m), cluster, fp16).latency_s / get_model(m).n_layers
            for m in ("BERT-L", "OPT-XL")]
    assert flat[1] / flat[0] < 1.15  # x1.11: the HBM stream and fp16 GEMMs barely grow


def test_experiments_are_deterministic():
    pd.testing.assert_frame_equal(G.table4(), G.table4())


def test_bad_experiment_inputs():
    with pytest.raises(WorkbenchError, match="environment"):
        G.environment("Z", 125)
    with pytest.raises(WorkbenchError, match="processor"):
        G.environment("A", 125, processor="tpu")
    with pytest.raises(WorkbenchError, match="bandwidth_mbps"):
        G.environment("A", 0)
    with pytest.raises(WorkbenchError, match="homogeneous"):
        G.environment("D", 125, devices=3)
    with pytest.raises(WorkbenchError, match="GPU environment"):
        G.environment("E", 125, processor="gpu")
    with pytest.raises(WorkbenchError, match="partition is for 2"):
        evaluate("galaxy_hmp", get_model("BERT-L"), G.environment("B", 125), G.workload(284),
                 uniform_partition(get_model("BERT-L"), 2, 284))


# ---- planner ---------------------------------------------------------------------------------------
def test_capacity_split_is_proportional_and_homogeneous_split_even():
    m, wl = get_model("BERT-L"), G.workload(284)
    assert PL.plan(m, G.environment("C", 125), wl) == uniform_partition(m, 4, 284)
    part = PL.plan(m, G.environment("E", 125), wl)  # Nano-L : Nano-S = 1470 : 403 MHz
    assert part.mlp_cols[0] / part.mlp_cols[1] == pytest.approx(1470 / 403, rel=0.01)
    assert part.seq == (142, 142)


def test_memory_aware_balancing_moves_mlp_first_then_heads():
    m, wl = get_model("OPT-L"), G.workload(284)
    cluster = G.environment("F", 125)  # Nano-L 1.5 GB, Nano-M 1.2 GB, Nano-S 0.7 GB
    first = PL.capacity_split(m, cluster, wl)
    assert np.all(tp_memory_bytes(m, wl, first) <= PL.budgets(cluster))  # fits as split: nothing moves
    tight = Cluster((G.nano_cpu("L", 1.7e9), G.nano_cpu("M", 0.7e9), G.nano_cpu("S", 0.5e9)), cluster.topology)
    first = PL.capacity_split(m, tight, wl)
    part = PL.plan(m, tight, wl)
    assert np.all(tp_memory_bytes(m, wl, part) <= PL.budgets(tight))
    assert part.mlp_cols[0] > first.mlp_cols[0]  # columns moved to the big device
    assert sum(part.heads) == m.n_heads and sum(part.mlp_cols) == m.d_ff


def test_a_device_out_of_columns_sheds_heads():
    m, wl = get_model("BERT-L"), G.workload(284)
    topo = Topology("switch", 2, Link.from_mbps(125))
    loose = Cluster((G.nano_cpu("L", 1e12), G.nano_cpu("S", 1e12)), topo)
    costs = PL.profile(m, loose, wl)
    first = PL.capacity_split(m, loose, wl)
    # the Nano-S can hold its fixed bytes and two heads, no columns
    small = costs.base_bytes[1] + 2.5 * costs.bytes_per_group
    cluster = Cluster((loose.devices[0], G.nano_cpu("S", float(small))), topo)
    part = PL.plan(m, cluster, wl)
    assert part.mlp_cols[1] == 0 and 0 < part.heads[1] < first.heads[1]
    assert np.all(tp_memory_bytes(m, wl, part) <= PL.budgets(cluster))


def test_infeasible_names_the_device_and_the_bytes():
    m, wl = get_model("OPT-XL"), G.workload(284)
    with pytest.raises(InfeasibleError, match=r"^infeasible: device \d \(Jetson Nano CPU .*\) needs .* B do not fit"):
        PL.plan(m, G.environment("A", 125), wl)
    result = evaluate("galaxy_hmp_overlap", m, G.environment("A", 125), wl)
    assert result.oom and result.notes.startswith("infeasible: device")
    with pytest.raises(InfeasibleError, match="infeasible: no split"):
        PL.exact_plan(m, G.environment("A", 125), wl)


def test_exact_milp_equals_exhaustive_search_and_bounds_the_heuristic():
    cfg = tiny_config("gpt", d_ff=24)
    wl = G.workload(16)
    rng = np.random.default_rng(7)
    link = Topology("switch", 3, Link.from_mbps(125))
    for _ in range(4):
        modes = rng.choice(["S", "M", "L"], 3)
        devices = tuple(G.nano_cpu(str(mo), float(rng.uniform(0.6e5, 1.6e5))) for mo in modes)
        cluster = Cluster(devices, link)
        exact = PL.partition_objective(cfg, cluster, wl, PL.exact_plan(cfg, cluster, wl))
        brute = PL.partition_objective(cfg, cluster, wl, PL.exhaustive_plan(cfg, cluster, wl))
        assert exact == pytest.approx(brute, rel=1e-12)
        try:
            assert PL.partition_objective(cfg, cluster, wl, PL.plan(cfg, cluster, wl)) >= exact * (1 - 1e-12)
        except InfeasibleError:
            pass


def test_optimality_gap_study_is_small_on_paper_scale_instances():
    df = G.planner_gap_study(12, seed=0)
    gaps = df.gap.dropna()
    assert len(gaps) >= 6 and (gaps >= -1e-12).all() and gaps.max() < 0.10
    assert not ((~df.heuristic_feasible) & df.exact_feasible).any()


def test_apportion_is_exact_and_deterministic():
    split = PL.apportion(20, [1.0, 1.0, 1.0])
    assert split.tolist() == [7, 7, 6] and split.sum() == 20
    with pytest.raises(WorkbenchError, match="weights"):
        PL.apportion(3, [0.0, 0.0])
    assert math.isclose(PL.apportion(7, [3, 1]).sum(), 7)


# ---- fixed costs (issue 17) ------------------------------------------------------------------------
def _fast(cluster: Cluster, message_overhead_s: float = 0.0) -> Cluster:
    link = Link(1e15, 0.0, message_overhead_s=message_overhead_s)
    return Cluster(cluster.devices, Topology("switch", cluster.n, link))


def test_nano_presets_carry_fixed_costs_with_provenance():
    for name in ("jetson_nano_cpu_s", "jetson_nano_cpu_m", "jetson_nano_cpu_l", "jetson_nano_gpu_460", "a100"):
        d = load_device(name)
        assert d.kernel_launch_s > 0 and d.layer_overhead_s > 0
        for key in ("kernel_launch", "layer_overhead"):
            c = d.provenance[key]
            assert c.kind in ("assumed", "quoted", "fitted") and c.source
    # the CPU's dispatch is CPU cycles: it scales with the clock (30,000 cycles)
    for mode, mhz in (("s", 403), ("m", 825), ("l", 1470)):
        assert load_device(f"jetson_nano_cpu_{mode}").kernel_launch_s == pytest.approx(30_000 / (mhz * 1e6), rel=1e-3)
    assert G.environment("B", 125).topology.link.message_overhead_s == G.constants()["link_message_overhead"] > 0


def test_every_tile_is_a_launch_on_every_device():
    """Under the tile overlap each fused GEMM runs as n row tiles, n kernels on each device; splitting a
    GEMM over devices does not split its launch."""
    m, wl = get_model("BERT-L").with_changes(n_layers=1), G.workload(96)
    from workbench.schemes.galaxy import fixed_layer_seconds, layer_launches
    for n in (2, 3, 4):
        part = uniform_partition(m, n, 96)
        assert layer_launches("galaxy_hmp_overlap", m, wl, part).tolist() == [4 * n + 3] * n
        assert layer_launches("galaxy_hmp", m, wl, part).tolist() == [7] * n
    cluster = _fast(G.environment("C", 1000))
    part = uniform_partition(m, 4, 96)
    launch = 5e-3  # make the launches dominate
    slow = Cluster(tuple(d.with_changes(kernel_launch_s=launch) for d in cluster.devices), cluster.topology)
    free = Cluster(tuple(d.with_changes(kernel_launch_s=0.0) for d in cluster.devices), cluster.topology)
    tl_slow = overlap_timeline(m, slow, wl, part, 1)
    tl_free = overlap_timeline(m, free, wl, part, 1)
    assert tl_slow.busy("cpu0") - tl_free.busy("cpu0") == pytest.approx(19 * launch, rel=1e-9)
    plain_slow, plain_free = (evaluate("galaxy_hmp", m, c, wl, part) for c in (slow, free))
    assert plain_slow.latency_s - plain_free.latency_s == pytest.approx(7 * launch, rel=1e-6)  # not 7 / 4
    r = evaluate("galaxy_hmp_overlap", m, slow, wl, part)  # 19 launches > 7: tiling no longer pays, runs unfused
    assert "runs unfused" in r.notes and r.latency_s == pytest.approx(plain_slow.latency_s)
    assert r.fixed_s == pytest.approx(plain_slow.fixed_s)
    assert plain_slow.fixed_s == pytest.approx(float(fixed_layer_seconds("galaxy_hmp", m, slow, wl, part).max()))


def test_each_ring_step_is_a_message_with_endpoint_costs():
    m, wl = get_model("GPT2-L").with_changes(n_layers=1), G.workload(96 * 4)
    base = _fast(G.environment("C", 1000))
    o = 2e-3
    costly = _fast(G.environment("C", 1000), message_overhead_s=o)
    part = uniform_partition(m, 4, 384)
    plain = [evaluate("galaxy_hmp", m, c, wl, part) for c in (base, costly)]
    # 4 ring collectives x 3 steps, each message paid at the endpoints as workbench.machine.network counts them
    per_layer = sum(float(endpoint_messages("ring", k, 4)) for k, _ in layer_collectives("galaxy_hmp", m, wl))
    assert per_layer >= 12
    assert plain[1].comm_link_latency_s - plain[0].comm_link_latency_s == pytest.approx(per_layer * o, rel=1e-9)
    tl = [overlap_timeline(m, c, wl, part, 1) for c in (base, costly)]
    sends = tl[1].frame[tl[1].frame.resource == "link0"]
    one = float(endpoint_messages("star", "broadcast", 2))  # one message: a send and a receive
    assert len(sends) == 12 and (sends.duration.values - tl[0].frame[tl[0].frame.resource == "link0"].duration.values
                                 == pytest.approx(one * o))
    mlm = [evaluate("megatron_tp", m, c, wl) for c in (base, costly)]  # 2 all-reduces x 6 ring steps
    assert mlm[1].latency_s - mlm[0].latency_s == pytest.approx(2 * float(endpoint_messages("ring", "all_reduce", 4)) * o,
                                                                rel=1e-9)


def test_fixed_and_serial_seconds_are_carved_out_of_compute():
    m = get_model("GPT2-L")
    cluster = G.environment("B", 125)
    for scheme in ("local", "megatron_tp", "sp", "galaxy_hmp", "galaxy_hmp_overlap"):
        for wl in (G.workload(96), Workload("decode", 64, 64, 16, 32)):  # backbone only; a generation step
            r = evaluate(scheme, m, cluster, wl)
            assert r.latency_s == pytest.approx(r.compute_s + r.memory_s + r.fixed_s + r.serial_s
                                                + r.comm_link_latency_s + r.comm_bytes_s)
            assert r.fixed_s > 0 and r.compute_s + r.memory_s > 0
            # SP runs the next token's logits on the device holding the last token: serial
            assert (r.serial_s > 0) == (scheme == "sp" and wl.output_head)
    nano = cluster.devices[0]
    local = evaluate("local", m, cluster, G.workload(96))
    assert local.fixed_s == pytest.approx(m.n_layers * (7 * nano.kernel_launch_s + nano.layer_overhead_s))


def test_fixed_costs_end_exact_linear_scaling_but_cannot_explain_fig10():
    """Before issue 17 the 4-device strong scaling was exactly 4.00x and weak scaling 100 %; the launches of
    n tiles per GEMM and the per-message costs make them sub-linear, but even 30x the assumed fixed costs
    leave weak scaling at >= 97 %, far above Fig. 10's 81 % / 86 %."""
    sens = G.fixed_cost_sensitivity((0.0, 1.0, 30.0)).set_index("fixed_scale")
    assert sens.loc[0.0, "fig11_GPT2-L_reduction"] == pytest.approx(4.0, abs=1e-3)
    assert sens.loc[0.0, "fig10_GPT2-L_efficiency"] == pytest.approx(1.0, abs=1e-3)
    for m in ("GPT2-L", "OPT-XL"):
        assert sens.loc[1.0, f"fig11_{m}_reduction"] < 4.0 - 1e-3
        assert sens.loc[1.0, f"fig10_{m}_efficiency"] < sens.loc[0.0, f"fig10_{m}_efficiency"]
        assert sens.loc[30.0, f"fig10_{m}_efficiency"] > 0.97
    # the smaller model loses more to the fixed costs (its layer is shorter)
    assert sens.loc[1.0, "fig10_GPT2-L_efficiency"] < sens.loc[1.0, "fig10_OPT-XL_efficiency"]


def test_stack_what_if_is_off_by_default_and_costs_the_overlap():
    df0 = G.weak_scaling()
    pd.testing.assert_frame_equal(df0, G.weak_scaling(stack_cycles_per_byte=0.0))
    df8 = G.weak_scaling(stack_cycles_per_byte=G.constants()["stack_cycles_per_byte"])
    four = df8[df8.devices == 4].set_index("model").scaling_efficiency
    assert 0.85 < four["GPT2-L"] < four["OPT-XL"] < 0.97  # 0.90 / 0.95 at the rule of thumb's 8 cycles/B
    # GPU devices run their GEMMs on the GPU: the stack takes nothing from them
    gpu = G.environment("A", 500, processor="gpu")
    assert G.stack_seconds_per_byte(gpu, 8.0) == (0.0, 0.0)
    assert G.stack_seconds_per_byte(G.environment("A", 500), 8.0) == pytest.approx((8 / 825e6,) * 2)
    with pytest.raises(WorkbenchError, match="cycles_per_byte"):
        G.stack_seconds_per_byte(gpu, -1.0)


def test_stack_cost_windows_do_not_overlap():
    """The network-stack costs (cycles/B) that keep the validation rows within tolerance do not overlap:
    at 4 cycles/B every Table IV row passes but Fig. 10 is still far above 81 % / 86 % and Fig. 9's lower end
    above 1.3x; at 8 cycles/B (the quoted rule of thumb) Table IV's OPT-L env B row already fails. Both
    errors move monotonically with the cost (`stack_windows` scans it: Fig. 10 needs >= 12 / >= 16), so no
    single value explains Fig. 10 without breaking Table IV, and none is fitted (all are validation rows)."""
    rep = _reported("Table IV").set_index(["model", "setting", "quantity"])
    for cycles, table4_ok in ((4.0, True), (8.0, False)):
        mod = G.speedup_rows("Table IV", G.table4(stack_cycles_per_byte=cycles)).set_index(["model", "setting", "quantity"])
        joined = rep.join(mod, rsuffix="_m", how="inner")
        within = ((joined.value_m - joined.value).abs() / joined.value <= joined.tolerance + 1e-12)
        assert bool(within.all()) == table4_ok, joined.assign(within=within)
        if table4_ok:
            w = G.weak_scaling(stack_cycles_per_byte=cycles)
            four = w[w.devices == 4].set_index("model").scaling_efficiency
            assert four["GPT2-L"] > _paper_weak("GPT2-L") + 0.05 and four["OPT-XL"] > _paper_weak("OPT-XL") + 0.05
            low, _ = G.speedup_range(G.heterogeneous(stack_cycles_per_byte=cycles))
            assert low > _paper_range("Fig. 9")[0] * 1.1
        else:
            assert not within[("OPT-L", "env=A,125Mbps,S=284", "speedup_over_mlm")] or \
                not within[("OPT-L", "env=B,125Mbps,S=284", "speedup_over_mlm")]


def test_pattern_checks_of_the_scaling_claims():
    checks = G.pattern_checks()
    assert len(checks) == 12 and checks.holds.all(), checks
    # Fig. 10's order (GPT2-L below OPT-XL) holds, but only by launches: 0.05 points, not the paper's 5
    gap = checks[checks.claim.str.contains("scales less well")].modelled.iloc[0]
    assert 0 < gap < 0.005


def test_schemes_do_not_import_planners():
    """Layers flow schemes -> planners: the Galaxy scheme module takes its plan; the planning evaluators the
    arena registers live in workbench.schemes.planners.galaxy."""
    import ast
    import inspect

    import workbench.schemes.galaxy as S

    tree = ast.parse(inspect.getsource(S))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
        [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [i for i in imported if i and i.startswith("workbench.schemes.planners")]
    assert SCHEMES["galaxy_hmp_overlap"][1] is PL.evaluate_galaxy_hmp_overlap
    with pytest.raises(WorkbenchError, match="needs its partition"):
        S.evaluate("galaxy_hmp", get_model("BERT-L"), G.environment("A", 125), G.workload(284))


def test_strong_rows_key_follows_the_sequence_length():
    """Fig. 11's setting key records the sequence length the rows were modelled at (it once said S=384 always)."""
    bw = G.Setting.from_constants().scaling_mbps
    paper = G.strong_rows(G.strong_scaling(models=("GPT2-L",), max_devices=2), bw)
    short = G.strong_rows(G.strong_scaling(models=("GPT2-L",), max_devices=2, seq_len=128), bw)
    assert paper.setting.str.contains(f",S={G.Setting.from_constants().strong_seq_len},").all()
    assert short.setting.str.contains(",S=128,").all() and not set(short.setting) & set(paper.setting)
