"""Multi-MCU head-wise partitioning (Bochem et al.): kernel, traffic, placement, runtime, energy, fidelity."""

import ast
import math
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench.core.constants import load_constants
from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.kernels import mcu_siracusa as K
from workbench.kernels import reference as R
from workbench.kernels.traffic import compiled_collectives
from workbench.machine import network
from workbench.machine.hardware import load_device
from workbench.model.models import get_model, tiny_config
from workbench.papers import mcu_siracusa as M
from workbench.schemes import mcu_siracusa as S
from workbench.schemes.base import Workload, load_all

MESH_SIZES = (1, 2, 4, 8)


# ---- kernel equals the reference -----------------------------------------------------------------
@pytest.fixture(scope="module")
def reference_outputs():
    """The monolithic reference once per family (shared by every mesh size)."""
    out = {}
    for family in ("llama", "bert"):
        cfg = tiny_config(family)
        params = R.init_params(cfg, seed=3)
        tokens = np.array([5, 17, 2, 40, 9, 33, 1, 8])
        out[family] = (cfg, params, tokens, R.forward(cfg, params, tokens))
    return out


@pytest.mark.parametrize("family", ["llama", "bert"])
@pytest.mark.parametrize("n", MESH_SIZES)
def test_headwise_forward_equals_reference(cpu_devices, reference_outputs, family, n):
    cfg, params, tokens, ref = reference_outputs[family]
    np.testing.assert_allclose(K.headwise_forward(cfg, params, tokens, n), ref, rtol=1e-4, atol=1e-5)


def test_gpt_and_grouped_query_attention_equal_reference(cpu_devices):
    for cfg, n in ((tiny_config("gpt", n_layers=1), 8), (tiny_config("llama", n_kv_heads=4, n_layers=1), 4)):
        params = R.init_params(cfg, seed=5)
        tokens = np.arange(1, 7)
        np.testing.assert_allclose(K.headwise_forward(cfg, params, tokens, n), R.forward(cfg, params, tokens),
                                   rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def reference_decode():
    """Reference prefill of 5 tokens and one decode step with a KV cache of 12 positions."""
    cfg = tiny_config("llama")
    params = R.init_params(cfg, seed=7)
    prompt, nxt = jnp.array([3, 14, 15, 9, 26]), jnp.array([53])
    logits, cache = R.forward_with_cache(cfg, params, prompt, R.empty_cache(cfg, 12))
    logits2, cache2 = R.forward_with_cache(cfg, params, nxt, cache)
    return cfg, params, prompt, nxt, logits, logits2, cache2


@pytest.mark.parametrize("n", MESH_SIZES)
def test_autoregressive_with_head_split_kv_cache_equals_reference(cpu_devices, reference_decode, n):
    cfg, params, prompt, nxt, ref_logits, ref_logits2, ref_cache2 = reference_decode
    logits, cache = K.headwise_forward_with_cache(cfg, params, prompt, R.empty_cache(cfg, 12), n)
    logits2, cache2 = K.headwise_forward_with_cache(cfg, params, nxt, cache, n)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logits2, ref_logits2, rtol=1e-4, atol=1e-5)
    assert cache2[0]["length"] == ref_cache2[0]["length"] == 6
    for mine, ref in zip(cache2, ref_cache2):
        np.testing.assert_allclose(mine["k"], ref["k"], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(mine["v"], ref["v"], rtol=1e-4, atol=1e-6)
    if n > 1:
        spec = tuple(cache2[0]["k"].sharding.spec)
        assert spec[1] == K.AXIS, "the KV cache is split by heads across the chips"
        shard_shapes = {s.data.shape for s in cache2[0]["k"].addressable_shards}
        assert shard_shapes == {(12, cfg.n_kv_heads // n, cfg.d_head)}


# ---- the compiled program's collectives equal the analytical traffic -------------------------------
@pytest.mark.parametrize("n", MESH_SIZES)
def test_compiled_collectives_equal_analytical_tree_traffic(cpu_devices, n):
    cfg = tiny_config("llama")
    params = R.init_params(cfg, seed=1)
    s = 8
    fn, blocks = K.stack_program(cfg, params, n)
    table = compiled_collectives(jax.jit(fn), jnp.ones((s, cfg.d_model)), jnp.arange(s), blocks)
    expected = K.kernel_traffic(cfg, n, s)
    assert set(table["kind"]) <= {"collective-permute"}
    assert len(table) == expected.collective_permutes
    assert int(table["result_bytes"].sum()) == expected.bytes_per_chip
    assert (table["result_bytes"] == s * cfg.d_model * 4).all()
    # the same messages as the tree: input broadcast once, then reduce + broadcast twice per block
    pairs = Counter(tuple(sorted(map(tuple, ast.literal_eval(g.replace("{", "[").replace("}", "]"))))) for g in table["groups"])
    tree = K.tree_pairs(n)
    want = Counter(tuple(sorted(p)) for p in tree * expected.syncs + tree[len(tree) // 2:])
    assert pairs == want
    # hierarchical: in groups of four, members only talk to their group leader
    for pair_list in pairs:
        for a, b in pair_list:
            assert min(a, b) % 4 == 0 and abs(a - b) in (1, 2, 3, 4, 8, 12)


def test_traffic_matches_the_cost_models_chip_to_chip_bytes(cpu_devices):
    cfg, n, s = tiny_config("llama"), 8, 4
    expected = K.kernel_traffic(cfg, n, s, itemsize=1)
    per_sync_messages = sum(len(p) for p in K.tree_pairs(n))
    sync = S.sync_cost(n, s * cfg.d_model, network.Topology("direct", n, network.Link(0.5e9)))
    assert sync.system_bytes == per_sync_messages * expected.message_bytes == 2 * (n - 1) * s * cfg.d_model
    assert expected.permutes_per_sync == 2 * sum(k - 1 for k in S.tree_levels(n)) == 8


def test_no_weight_matrix_is_replicated():
    cfg = tiny_config("llama")
    params = R.init_params(cfg, seed=0)
    for n in MESH_SIZES:
        arrays, specs = K.place_block(params["blocks"][0], n)
        assert all(K.AXIS in tuple(spec) for spec in specs.values()), "every parameter is split or root-only"
        per_chip = K.chip_weight_bytes(cfg, params, n)
        total = sum(v.size * v.dtype.itemsize for p in params["blocks"] for v in p.values())
        assert per_chip.sum() == pytest.approx(total)
        if n > 1:
            assert per_chip[1] == pytest.approx(per_chip[-1]) and per_chip[1] < total / n * 1.001


def test_tree_is_two_level_on_eight_chips():
    assert K.tree_strides(8) == [1, 4] and S.tree_levels(8) == (4, 2) and S.tree_levels(64) == (4, 4, 4)
    assert K.message_count(8) == 7 and K.tree_depth(64) == 3


# ---- chip-to-chip costed through workbench.machine.network -----------------------------------------------
@pytest.mark.parametrize("n", [4, 16, 64])
def test_sync_equals_network_hierarchical_allreduce_for_full_groups(n):
    link = network.Link(0.5e9, latency_s=1e-6, energy_pj_per_byte=100)
    topo = network.Topology("direct", n, link, group_size=4)
    m = 8192.0
    sync = S.sync_cost(n, m, topo)
    lat, data = network.collective_latency("hierarchical", "all_reduce", n, m, link.bandwidth_bytes_per_s,
                                           link.latency_s, 1, group_size=4, breakdown=True)
    assert sync.link_latency_s == pytest.approx(float(lat)) and sync.data_s == pytest.approx(float(data))
    assert sync.energy_j == pytest.approx(float(network.collective_energy("hierarchical", "all_reduce", n, m, 100)))


# ---- placement ------------------------------------------------------------------------------------
def test_placement_follows_the_papers_narrative():
    cases = {n: M.placement("TinyLlama-42M", "autoregressive", n).case for n in (1, 2, 4, 8)}
    assert cases == {1: "streamed", 2: "streamed", 4: "streamed", 8: "double_buffered"}
    scaled = {n: M.placement("TinyLlama-42M-64h", "autoregressive", n).case for n in (8, 16, 32, 64)}
    assert scaled == {8: "double_buffered", 16: "double_buffered", 32: "all_on_chip", 64: "all_on_chip"}
    assert M.placement("MobileBERT", "prompt", 2).case == "streamed"
    assert M.placement("MobileBERT", "prompt", 4).case == "double_buffered"
    p8 = M.placement("TinyLlama-42M", "autoregressive", 8)
    l2 = p8.work_contents()
    assert "weights (next block, prefetch)" in l2 and sum(l2.values()) <= 2 * 2**20
    assert p8.weight_slice_bytes == pytest.approx(get_model("TinyLlama-42M").block_weight_bytes(8) / 8, rel=0.01)
    assert p8.kv_slice_bytes == 2 * 128 * 512 / 8  # K and V, 128 positions, 1/8 of the heads, int8


def test_l1_tiling_traffic():
    assert S.l1_tile_traffic(1, 512, 64, 1, 1, 128 * 1024) == 512 + 512 * 64 + 64  # fits: each operand once
    big = S.l1_tile_traffic(268, 512, 512, 1, 1, 128 * 1024)
    assert big > 268 * 512 * 2 + 512 * 512  # re-reads when the operands exceed half of L1
    assert big <= 268 * 512 * math.ceil(512 / 64) + 512 * 512 * math.ceil(268 / 64) + 268 * 512


# ---- runtime, energy, fidelity ----------------------------------------------------------------------
FITTED = ["efficiency_gemm", "efficiency_gemv", "mem_L2_bandwidth"]
AR8 = (M.DEFAULT_MODEL, "autoregressive,S=128,chips=8")  # the Abstract's 8-chip autoregressive block


def _abstract(quantity: str) -> float:
    """The Abstract's 8-chip autoregressive block runtime (ms) or energy (mJ), as reported (data/reported)."""
    return M.reported_value("Abstract", *AR8, quantity)


def test_fitted_constants_are_reproduced_by_the_fit_on_their_rows():
    fitted = M.fit_efficiencies()
    device = load_device("siracusa")
    assert fitted["efficiency_gemv"] == pytest.approx(device.efficiency_gemv, rel=2e-3)
    assert fitted["efficiency_gemm"] == pytest.approx(device.efficiency_gemm, rel=2e-3)
    kinds = {k: c.kind for k, c in device.provenance.items()}
    assert sorted(k for k, v in kinds.items() if v == "fitted") == FITTED
    rows = M.reported()
    assert sorted(rows.loc[rows.fitted != "", "fitted"]) == FITTED
    assert (rows.fitted == "").sum() == 3  # the rest (the three speedups) are validation rows
    assert all(c.kind != "fitted" for c in load_constants("constants/mcu_siracusa.toml").values())


@pytest.fixture(scope="module")
def fidelity():
    return M.fidelity_table().set_index(["model", "setting", "quantity"])


@pytest.mark.parametrize("key", [
    ("TinyLlama-42M", "autoregressive,S=128,chips=8", "speedup"),
    ("TinyLlama-42M", "prompt,S=16,chips=8", "speedup"),
    ("MobileBERT", "S=268,chips=4", "speedup"),
    ("TinyLlama-42M", "autoregressive,S=128,chips=8", "block_runtime"),
    ("TinyLlama-42M", "autoregressive,S=128,chips=8", "block_energy"),
    ("MobileBERT", "S=268,chips=4", "block_runtime"),
])
def test_fidelity_rows_within_the_issue_tolerance(fidelity, key):
    row = fidelity.loc[key]
    assert abs(row.relative_error) <= 0.15, f"{key}: modelled {row.modelled:.4g} vs reported {row.reported:.4g}"


def test_stored_dma_bandwidth_and_efficiencies_are_the_joint_refit():
    fitted = M.fit_constants()
    device = load_device("siracusa")
    assert fitted["mem_L2_bandwidth"] == pytest.approx(device.memory_level("L2").bandwidth_bytes_per_s, rel=2e-3)
    assert fitted["efficiency_gemv"] == pytest.approx(device.efficiency_gemv, rel=2e-3)
    assert fitted["efficiency_gemm"] == pytest.approx(device.efficiency_gemm, rel=2e-3)
    assert f"{_abstract('block_energy'):g} mJ" in device.provenance["mem_L2_bandwidth"].fitted_on
    refit = M.Knobs(l2_bandwidth=fitted["mem_L2_bandwidth"], efficiency_gemv=fitted["efficiency_gemv"],
                    efficiency_gemm=fitted["efficiency_gemm"])
    table = M.fidelity_table(refit)
    calibration = table[table.role.str.startswith("calibration")]
    assert len(calibration) == 3 and (calibration.relative_error.abs() < 1e-6).all()


def test_joint_fit_reports_when_no_dma_bandwidth_reproduces_the_energy():
    with pytest.raises(WorkbenchError, match=r"cannot fit mem_L2_bandwidth: no L2<->L1 DMA bandwidth in \[3, 64\]"):
        M.fit_constants(dma_range=(3e9, 64e9))  # >= 3 GB/s leaves so much computation that E_total > 0.64 mJ
    with pytest.raises(WorkbenchError, match="cannot fit mem_L2_bandwidth: even at 64 GB/s"):
        M.fit_constants(M.Knobs(link_bandwidth=1e6))  # 1 MB/s links alone exceed the 0.54 ms block
    with pytest.raises(WorkbenchError, match="dma_range"):
        M.fit_constants(dma_range=(2e9, 1e9))


def test_papers_pattern_super_linear_only_once_the_block_fits_on_chip():
    ar = M.scaling("TinyLlama-42M", "autoregressive", (1, 2, 4, 8))
    assert ar.speedup.iloc[3] > 8
    assert all(ar.speedup.iloc[i] <= n + 1e-9 for i, n in enumerate((1, 2, 4)))
    assert ar.energy_mJ.iloc[3] < ar.energy_mJ.iloc[0], "energy per block falls at 8 chips"
    assert (ar.L3_ms.iloc[:3] > ar.computation_ms.iloc[:3]).all() and ar.L3_ms.iloc[3] == 0
    pr = M.scaling("TinyLlama-42M", "prompt", (1, 8))
    assert pr.computation_ms.iloc[0] > max(pr.L3_ms.iloc[0], pr.L2_ms.iloc[0]), "prompt mode is compute-bound"


def test_energy_is_the_papers_e_total_formula():
    cost = M.block("TinyLlama-42M", "autoregressive", 8)
    n, device = 8, load_device("siracusa")
    expected = (n * device.power_w * cost.compute_s + n * cost.l3_bytes_per_chip * 100e-12
                + n * cost.l2_bytes_per_chip * 2e-12 + cost.c2c_bytes * 100e-12)
    # issue 17: the chips are no longer symmetric and fixed time costs energy. The root's serial work (its
    # partial-sum accumulation and norm, both syncs) moves bytes through L2 and runs its launches, and
    # every chip's launches and message handling run on its controlling core (P / cores).
    root = S.root_work(device, n, 512.0)
    expected += 2 * root.l2_bytes * 2e-12 + cost.fixed_energy_j + cost.root_energy_j
    assert cost.fixed_energy_j > 0 and cost.root_energy_j > 0
    assert cost.energy_j == pytest.approx(expected)
    assert device.power_w == pytest.approx(8 * 13e-3)
    assert cost.l3_bytes_per_chip == pytest.approx(cost.placement.state_bytes)  # the next block's prefetch


def test_scaled_model_drops_the_prefetch_energy_once_all_weights_stay_on_chip():
    sc = M.scaling("TinyLlama-42M-64h", "autoregressive", (16, 32))
    assert sc.energy_L3_mJ.iloc[0] > 0 and sc.energy_L3_mJ.iloc[1] == 0
    assert sc.energy_mJ.iloc[1] < sc.energy_mJ.iloc[0]


def test_double_buffered_prefetch_overlap_through_simulate():
    slow = M.Knobs(l3_bandwidth=100e6)
    cost = M.block("TinyLlama-42M", "autoregressive", 8, slow)
    layers = get_model("TinyLlama-42M").n_layers
    tl = M.timeline("TinyLlama-42M", "autoregressive", 8, slow)
    r, p = cost.runtime_s, cost.prefetch_s
    assert p > r
    assert tl.makespan == pytest.approx(r + (layers - 1) * max(r, p))
    fast = M.timeline("TinyLlama-42M", "autoregressive", 8, M.Knobs(l3_bandwidth=10e9))
    assert fast.makespan == pytest.approx(layers * M.block("TinyLlama-42M", "autoregressive", 8).runtime_s)


def test_scheme_is_registered_and_its_breakdown_adds_up():
    registry = load_all()
    assert registry[S.SCHEME][0] == "mcu_siracusa"
    cluster = M.siracusa_cluster(8)
    result = S.evaluate_mcu_headwise_tp(get_model("TinyLlama-42M"), cluster, M.paper_workload(
        get_model("TinyLlama-42M"), "autoregressive"))
    parts = result.compute_s + result.comm_link_latency_s + result.comm_bytes_s + result.io_stall_s + result.other_s
    parts += result.fixed_s + result.serial_s  # issue 17: launches and root work carved out of compute
    parts += result.memory_s  # issue 31: the L2<->L1 transfers are memory streaming (other_s before)
    assert result.memory_s > 0 and result.other_s == 0 and result.bound
    assert result.latency_s == pytest.approx(parts) and not result.oom
    assert result.io_stall_s > 0  # 400 MB/s cannot hide the 0.5 MiB prefetch behind a 0.54 ms block
    big = S.evaluate_mcu_headwise_tp(get_model("Llama 2-7B"), M.siracusa_cluster(1),
                                     Workload("decode", 16, 16, 8, 8))
    assert big.oom and "infeasible" in big.notes


# ---- bad input -------------------------------------------------------------------------------------------
def test_more_chips_than_heads_is_a_clear_error():
    with pytest.raises(WorkbenchError, match="n_chips must be <= the number of .*heads.*\\(8\\)"):
        M.block("TinyLlama-42M", "autoregressive", 16)
    with pytest.raises(WorkbenchError, match="n_chips must be <="):
        K.check_partition(tiny_config("llama"), 16)
    with pytest.raises(WorkbenchError, match="must divide"):
        K.check_partition(tiny_config("llama"), 3)
    with pytest.raises(WorkbenchError, match="n_chips must be <="):
        S.evaluate_mcu_headwise_tp(get_model("MobileBERT"), M.siracusa_cluster(8), M.paper_workload(
            get_model("MobileBERT"), "prompt"))


def test_model_that_cannot_fit_even_off_chip_is_infeasible():
    with pytest.raises(InfeasibleError, match="^infeasible: Llama 2-7B .* MiB per chip"):
        M.block("Llama 2-7B", "autoregressive", 1)
    with pytest.raises(WorkbenchError, match="unknown mode"):
        M.block("TinyLlama-42M", "decode", 8)
    with pytest.raises(WorkbenchError, match="encoder"):
        M.block("MobileBERT", "autoregressive", 4)
    with pytest.raises(WorkbenchError, match="dtype"):
        M.Knobs(dtype="int3")
    with pytest.raises(WorkbenchError, match="l3_bandwidth"):
        M.Knobs(l3_bandwidth=0)


def test_sweeps_are_deterministic():
    a, b = M.fig4(), M.fig4()
    assert a.equals(b)


def test_fit_reports_when_no_efficiency_reaches_the_reported_runtime():
    with pytest.raises(WorkbenchError, match="cannot fit efficiency_gemv"):
        M.fit_efficiencies(M.Knobs(l2_bandwidth=0.5e9))  # L2 transfers alone exceed 0.54 ms
    sens = M.dma_sensitivity((2e9, 4e9))
    assert sens.runtime_ms.tolist() == pytest.approx([_abstract("block_runtime")] * 2)
    assert sens.energy_mJ.iloc[0] < sens.energy_mJ.iloc[1]  # slower DMA leaves less time to computation


# ---- issue 17: fixed costs (launches, per-message endpoint time, root work) ---------------------------
def test_fixed_cost_constants_have_provenance():
    device = load_device("siracusa")
    launch = device.provenance["kernel_launch"]
    assert launch.kind == "derived" and "Deeploy" in launch.source and "1000 cycles" in launch.source
    assert device.kernel_launch_s == pytest.approx(1000 / 500e6)  # 1000 cycles at the 500 MHz clock
    assert device.small_kernel_flops == 0 and "small_kernel_flops" not in device.provenance  # replaced
    overhead = load_constants("constants/mcu_siracusa.toml")["mipi_message_overhead"]
    assert overhead.kind == "assumed" and overhead.value == pytest.approx(275 / 500e6)
    assert M.siracusa_cluster(8).topology.link.message_overhead_s == pytest.approx(overhead.value)


def test_every_chip_pays_the_launch_of_every_kernel_of_its_slice():
    cfg = get_model("TinyLlama-42M-64h")
    costs = {n: M.block(cfg, "autoregressive", n) for n in (1, 8, 64)}
    launches = {n: c.launches_per_chip for n, c in costs.items()}
    assert launches[1] == launches[8] == launches[64] == 9 + 3  # 9 matmuls + softmax, RoPE, SwiGLU
    for c in costs.values():
        assert c.launch_s == pytest.approx(c.launches_per_chip * 2e-6)
    # the launch is the one fixed term: the runtime grows by exactly the launches it adds (root ones too)
    slow = M.block(cfg, "autoregressive", 64, M.Knobs(kernel_launch=5e-6))
    delta = (costs[64].launches_per_chip + costs[64].root_launches) * 3e-6
    assert slow.runtime_s - costs[64].runtime_s == pytest.approx(delta)
    none = M.block(cfg, "autoregressive", 64, M.Knobs(kernel_launch=0.0))
    assert none.launch_s == 0 and costs[64].runtime_s > none.runtime_s


def test_sync_charges_each_message_at_the_leaders_in_sequence():
    o = 0.5e-6
    for n in (4, 16, 64):
        link = network.Link(0.5e9, latency_s=1e-6, energy_pj_per_byte=100, message_overhead_s=o)
        topo = network.Topology("direct", n, link, group_size=4)
        sync, bare = S.sync_cost(n, 512.0, topo), S.sync_cost(n, 512.0, network.Topology(
            "direct", n, network.Link(0.5e9, latency_s=1e-6, energy_pj_per_byte=100), group_size=4))
        levels = S.tree_levels(n)
        assert sync.link_latency_s - bare.link_latency_s == pytest.approx(2 * sum(k - 1 for k in levels) * o)
        lat, _ = network.collective_latency("hierarchical", "all_reduce", n, 512.0, 0.5e9, 1e-6, 1, group_size=4,
                                            breakdown=True, message_overhead=o)
        assert sync.link_latency_s == pytest.approx(float(lat))
        assert sync.endpoint_s == pytest.approx(4 * (n - 1) * o)  # 2(n-1) messages, a sender and a receiver each


def test_root_accumulates_partials_level_by_level_and_normalises():
    device = load_device("siracusa")
    m, bw = 512.0, device.memory_level("L2").bandwidth_bytes_per_s
    one = S.root_work(device, 1, m)
    assert one.launches == 2 and one.l2_bytes == (3 + 2) * m  # the residual add and the norm
    eight = S.root_work(device, 8, m)  # levels (4, 2): 4 partials + residual + sum, then 2 partials + sum
    assert eight.launches == 3 and eight.l2_bytes == ((4 + 1 + 1) + (2 + 1) + 2) * m
    assert eight.seconds == pytest.approx(3 * 2e-6 + eight.l2_bytes / bw)
    streamed = S.root_work(device, 1, m, streamed=True)  # intermediate tensors in L3 (1-4 chips)
    assert streamed.l3_bytes == streamed.l2_bytes and streamed.seconds > one.seconds
    assert S.root_work(device, 64, m).launches == 4 and S.root_work(device, 64, m).seconds > eight.seconds


def test_scheme_result_shows_fixed_and_serial_time_apart():
    cfg = get_model("TinyLlama-42M-64h")
    cluster = M.siracusa_cluster(64)
    result = S.evaluate_mcu_headwise_tp(cfg, cluster, M.paper_workload(cfg, "autoregressive"))
    cost = result.extra["block"]
    assert result.fixed_s == pytest.approx(cfg.n_layers * cost.launch_s) and result.fixed_s > 0
    assert result.serial_s == pytest.approx(cfg.n_layers * cost.root_s) and result.serial_s > 0
    assert result.compute_s == pytest.approx(cfg.n_layers * cost.compute_s)
    assert set(cost.breakdown()) == set(M.BREAKDOWN)
    assert sum(cost.breakdown().values()) == pytest.approx(cost.runtime_s)


def test_fixed_time_costs_energy_on_the_controlling_core():
    cfg = get_model("TinyLlama-42M-64h")
    base, slow = (M.block(cfg, "autoregressive", 64, M.Knobs(kernel_launch=t)) for t in (2e-6, 4e-6))
    device = load_device("siracusa")
    p_core = device.power_w / device.cores
    extra = (64 * base.launches_per_chip + base.root_launches) * 2e-6 * p_core
    assert slow.energy_j - base.energy_j == pytest.approx(extra)
    assert base.energy_breakdown()["cores_fixed"] > 0


# ---- issue 17: the paper's text claims as pattern checks (Fig. 5 energy, Fig. 6 scaling) ----------------
@pytest.fixture(scope="module")
def patterns():
    return M.pattern_checks().set_index("claim")


def _check(patterns, start):
    rows = patterns[patterns.index.str.startswith(start)]
    assert len(rows) == 1, start
    return rows.iloc[0]


def test_pattern_checks_include_fig5_and_fig6_and_are_recorded_with_their_numbers(patterns):
    assert {"Fig. 6", "Fig. 5a", "Fig. 5b", "Fig. 5c", "Sec. V-C"} <= set(patterns.artifact)
    assert patterns.modelled.notna().all() and patterns.holds.map(type).eq(bool).all()
    failing = set(patterns.index[~patterns.holds])
    assert failing == {"MobileBERT energy rises slightly at 4 chips (ratio to 1 chip)",
                       "autoregressive: quasi-linear at 64 chips (speedup/N)",
                       "prompt: linear up to 16 chips (speedup/N at 8 chips, the farthest from 1)"}


def test_fig6_autoregressive_is_super_linear_from_8_to_32_chips(patterns):
    row = _check(patterns, "autoregressive: super-linear for 8-32")
    assert row.holds and row.modelled > 1


def test_fig6_autoregressive_efficiency_falls_from_32_to_64_chips(patterns):
    row = _check(patterns, "autoregressive: parallel efficiency falls")
    assert row.holds and row.modelled < 1


@pytest.mark.xfail(strict=True, reason="64-chip autoregressive speedup is ~90x (speedup/N 1.40) with the derived "
                   "2 us launch over 12 kernels per chip; <= 1.25 N needs >= 3.1 us per launch (refitted), i.e. "
                   "~13 us more fixed time per chip and block (e.g. Deeploy nodes this model does not count)")
def test_fig6_autoregressive_is_quasi_linear_at_64_chips(patterns):
    assert _check(patterns, "autoregressive: quasi-linear at 64").holds


def test_quasi_linear_claim_can_hold_with_more_fixed_time_per_block():
    """The check is not impossible: with 6 us per launch (all three constants refitted) the 64-chip speedup
    is within the band, and super-linearity at 8-32 chips survives. A sensitivity, not a fit."""
    knobs = M.Knobs(kernel_launch=6e-6)
    fit = M.fit_constants(knobs)
    knobs = M._with(knobs, l2_bandwidth=fit["mem_L2_bandwidth"], efficiency_gemv=fit["efficiency_gemv"],
                    efficiency_gemm=fit["efficiency_gemm"])
    checks = {claim: holds for _, claim, _, _, holds in M.fig6_checks(knobs)}
    assert checks["autoregressive: quasi-linear at 64 chips (speedup/N)"]
    assert checks["autoregressive: super-linear for 8-32 chips (smallest speedup/N)"]


@pytest.mark.xfail(strict=True, reason="prompt speedup at 8 chips is ~11.4x (speedup/N 1.42), like the 9.9x "
                   "validation row's +14 %: the 1-chip prompt block adds its L3 streaming to a compute-bound "
                   "block; hiding ~1/3 of that streaming behind compute would be needed")
def test_fig6_prompt_is_linear_up_to_16_chips(patterns):
    assert _check(patterns, "prompt: linear up to 16").holds


def test_fig6_prompt_has_diminishing_returns_beyond_16_chips(patterns):
    row = _check(patterns, "prompt: diminishing returns")
    assert row.holds and row.modelled < 4


def test_gemm_runtime_scales_sub_linearly_and_needs_the_launch(patterns):
    row = _check(patterns, "GEMM kernels' runtime scales sub-linearly")
    assert row.holds and row.modelled < 1
    without = {claim: (value, holds) for _, claim, _, value, holds in M.fig6_checks(M.Knobs(kernel_launch=0.0))}
    value, holds = without["GEMM kernels' runtime scales sub-linearly as they shrink (prompt, 1 -> 64 chips: "
                           "GEMM-time speedup / N)"]
    assert not holds and value == pytest.approx(1.0)  # without a fixed cost the split GEMMs scale exactly


def test_chip_to_chip_and_accumulation_overhead_grows_with_chips(patterns):
    row = _check(patterns, "prompt: chip-to-chip transfers and partial-sum accumulation")
    assert row.holds and 0 < row.modelled < 1
    pr = M.scaling("TinyLlama-42M-64h", "prompt", (16, 64)).set_index("chips")
    # both named mechanisms grow with the tree: one more level of accumulation, more MIPI messages
    assert pr.accumulation_ms[64] > pr.accumulation_ms[16] > 0
    assert pr["chip-to-chip_ms"][64] > pr["chip-to-chip_ms"][16] > 0


@pytest.mark.parametrize("start", [
    "autoregressive energy falls at 8 chips", "prompt energy falls at 8 chips",
    "64-head autoregressive: a further energy reduction at 32", "64-head prompt: reduced energy at 32",
    "64-head autoregressive: energy reduced at 64", "64-head autoregressive: the L3 (off-chip) energy term"])
def test_fig5_energy_directions(patterns, start):
    assert _check(patterns, start).holds


@pytest.mark.xfail(strict=True, reason="MobileBERT's 4-chip energy falls (ratio ~0.94): its kernels are large "
                   "(hundreds of MFLOP), so launches cannot make them less efficient; the paper's utilisation loss "
                   "of smaller GEMMs has no number")
def test_fig5_mobilebert_energy_rises_slightly_at_4_chips(patterns):
    assert _check(patterns, "MobileBERT energy rises").holds
