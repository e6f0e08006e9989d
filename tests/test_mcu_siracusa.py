"""Multi-MCU head-wise partitioning (Bochem et al.): kernel, traffic, placement, runtime, energy, fidelity."""

import ast
import math
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from workbench import network
from workbench.constants import load_constants
from workbench.errors import InfeasibleError, WorkbenchError
from workbench.hardware import load_device
from workbench.kernels import mcu_siracusa as K
from workbench.kernels import reference as R
from workbench.kernels.traffic import compiled_collectives
from workbench.models import get_model, tiny_config
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


# ---- chip-to-chip costed through workbench.network -----------------------------------------------
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
    assert "0.64 mJ" in device.provenance["mem_L2_bandwidth"].fitted_on
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
    assert sens.runtime_ms.tolist() == pytest.approx([0.54, 0.54])
    assert sens.energy_mJ.iloc[0] < sens.energy_mJ.iloc[1]  # slower DMA leaves less time to computation
