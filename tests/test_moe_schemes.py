"""MoE schemes on the one cost core (issue 33, deliverable 4): distributed-llama v0.16's TP inside every expert
(per-node weight bytes and per-role traffic equal the closed forms from the engine's source), the whole-layer
pipeline with an expert cache (full cache: no stall; misses grow as it shrinks; a prompt touches the union), expert
parallelism's slowest-device load, and the HiGHS placement planner (memory respected, beats an even split)."""

import numpy as np
import pytest

from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model, tiny_config
from workbench.scenarios.userconfig import load_config
from workbench.schemes import common, moe
from workbench.schemes.base import Cluster, Workload, load_all
from workbench.schemes.planners import moe as planner

QWEN = "Qwen3-30B-A3B"
Q4, Q80 = 4.5, 8.5  # q4_0 weights, Q80 activations (distributed-llama's only sync format for Q40 weights)


@pytest.fixture(scope="module")
def pi5():
    return load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml").cluster.devices[0]


def cluster_of(devices) -> Cluster:
    devices = tuple(devices)
    return Cluster(devices, Topology("switch", len(devices), Link.from_mbps(1000, 0.05)))


def step(phase: str, seq_len: int = 64) -> Workload:
    return Workload(phase=phase, seq_len=seq_len, kv_len=seq_len, weight_bits=Q4, activation_bits=Q80, weight_format="q4_0")


# ---- (a) distributed-llama v0.16 ------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("rows", [1, 7])
def test_dllama_traffic_equals_the_closed_form_from_the_source(n, rows):
    m = get_model(QWEN)
    d, L, V = m.d_model, m.n_layers, m.vocab_size
    z = d / 32 * 34  # Q80: 34 B per 32 values (nn-core.cpp:21-23)
    got = moe.dllama_traffic(m, n, rows, Q80)
    assert got["root_sent"] == (n - 1) * (8 + rows * (4 * d + 2 * L * z))
    assert got["root_received"] == (n - 1) * rows * (2 * L * z + 4 * V / n)
    assert got["worker_sent"] == rows * (2 * L * (n - 1) * z + 4 * V / n)
    assert got["worker_received"] == 8 + rows * (4 * d + 2 * L * (n - 1) * z)


@pytest.mark.parametrize("name,n", [(QWEN, 2), (QWEN, 4), ("Mixtral-8x7B", 8), ("OLMoE-1B-7B", 16)])
def test_dllama_node_stream_bytes_equal_the_closed_form(name, n):
    m = get_model(name)
    w, d, q, v, F, E, k = Q4 / 8, m.d_model, m.q_dim, m.kv_dim, m.d_ff, m.n_experts, m.n_active_experts
    closed = m.n_layers * ((2 * q + 2 * v) * d * w / n + 4 * d * E + 3 * k * d * F * w / n) + m.vocab_size * d * w / n
    assert moe.dllama_stream_bytes(m, step("decode"), n) == pytest.approx(closed, rel=1e-12)


def test_dllama_prefill_reads_experts_per_row(pi5):
    """The engine runs one GEMV per row and active expert: S k slice reads, more than the union a prompt touches."""
    m, n = get_model(QWEN), 4
    rows = {r.name: r for r in moe.dllama_layer_rows(m, step("prefill", 16), n)}
    slice_bytes = 3 * m.d_model * m.d_ff / n * Q4 / 8
    assert float(rows["ffn1"].bytes + rows["ffn2"].bytes) == pytest.approx(16 * m.n_active_experts * slice_bytes)
    assert moe.dllama_stream_bytes(m, step("prefill", 16), n) > moe.dllama_stream_bytes(m, step("decode", 16), n)


def test_dllama_scheme_costs_its_syncs_and_breakdown(pi5):
    m, cl = get_model(QWEN), cluster_of([pi5] * 4)
    r = load_all()["dllama_allgather_tp"][1](m, cl, step("decode"))
    assert r.parts_s == pytest.approx(r.latency_s)
    assert r.detail.traffic == moe.dllama_traffic(m, 4, 1, Q80)
    parts = r.detail
    assert parts.comm_s == pytest.approx(r.comm_link_latency_s + r.comm_bytes_s)
    assert parts.router_s > 0 and parts.experts_s > 0 and parts.misses_s == 0 and not r.oom


@pytest.mark.parametrize("n", [3, 8])
def test_dllama_device_count_it_cannot_split_is_one_line(n, pi5):
    with pytest.raises(WorkbenchError) as err:
        moe.evaluate_dllama_moe(get_model(QWEN), cluster_of([pi5] * n), step("decode"))
    text = str(err.value)
    assert "\n" not in text and "n_devices must be one of 1, 2, 4" in text and f"got {n}" in text


def test_dllama_refuses_what_its_graph_lacks(pi5):
    with pytest.raises(WorkbenchError, match="n_shared_experts = 2, n_dense_layers = 1, kv_lora_rank = 512"):
        moe.evaluate_dllama_moe(get_model("DeepSeek-V2-Lite"), cluster_of([pi5] * 2), step("decode"))


# ---- (b) the whole-layer pipeline and its expert cache ----------------------------------------------------------
@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("reads", moe.READS)
def test_full_cache_hits_every_expert_and_never_stalls(pi5, phase, reads):
    m = get_model(QWEN)
    assert moe.hit_rate(step(phase).routing, m.n_experts, m.n_active_experts, m.n_experts) == 1.0
    r = moe.evaluate_layer_pipeline(m, cluster_of([pi5] * 4), step(phase), cache_experts=m.n_experts, reads=reads)
    assert r.io_stall_s == 0 and r.detail.misses_per_step == 0 and r.detail.misses_s == 0


@pytest.mark.parametrize("phase", ["decode", "prefill"])
@pytest.mark.parametrize("reads", moe.READS)
def test_misses_grow_as_the_cache_shrinks(pi5, phase, reads):
    m, cl = get_model(QWEN), cluster_of([pi5] * 4)
    stalls = [moe.evaluate_layer_pipeline(m, cl, step(phase), cache_experts=c, reads=reads).io_stall_s
              for c in (128, 96, 64, 32, 0)]
    assert all(a < b for a, b in zip(stalls, stalls[1:])), stalls


def test_prefill_streams_more_expert_bytes_and_misses_more_than_decode(pi5):
    m, cl = get_model(QWEN), cluster_of([pi5] * 4)
    decode, prefill = (moe.evaluate_layer_pipeline(m, cl, step(p), cache_experts=32) for p in ("decode", "prefill"))
    assert prefill.detail.expert_bytes_per_step > 4 * decode.detail.expert_bytes_per_step
    assert prefill.detail.misses_per_step > decode.detail.misses_per_step
    per_token = m.moe_layers * m.n_active_experts * (1 - 32 / 128)  # uniform routing: k (1 - C/E) per MoE layer
    assert decode.detail.misses_per_step == pytest.approx(per_token)


def test_default_cache_is_what_free_memory_holds(pi5):
    m = get_model(QWEN)
    one = moe.evaluate_layer_pipeline(m, cluster_of([pi5]), step("decode"))
    cache = one.detail.stages[0]["cache"]
    assert 0 < cache < m.n_experts and not one.oom and one.io_stall_s > 0
    over = moe.evaluate_layer_pipeline(m, cluster_of([pi5]), step("decode"), cache_experts=cache + 1)
    assert over.oom and over.notes.count("infeasible: device 0 (") == 1 and over.notes.endswith("B do not fit)")
    assert one.detail.misses_s == one.io_stall_s


def test_cache_larger_than_the_models_experts_is_one_line(pi5):
    with pytest.raises(WorkbenchError) as err:
        moe.evaluate_layer_pipeline(get_model(QWEN), cluster_of([pi5] * 2), step("decode"), cache_experts=129)
    assert "\n" not in str(err.value) and "cache_experts must be an integer in 0..128" in str(err.value)


def test_pipeline_without_storage_rate_says_so(pi5):
    bare = pi5.with_changes(storage_read_bytes_per_s=None, offload_read_bytes_per_s=None)
    with pytest.raises(WorkbenchError, match="no storage_read_mb_per_s"):
        moe.evaluate_layer_pipeline(get_model(QWEN), cluster_of([bare]), step("decode"), cache_experts=0)


# ---- (c) expert parallelism ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8, 64])
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_ep_slowest_load_is_at_least_the_mean(pi5, n, phase):
    r = moe.evaluate_expert_parallel(get_model(QWEN), cluster_of([pi5] * n), step(phase))
    assert r.detail.slowest_pairs >= r.detail.mean_pairs > 0
    assert r.parts_s == pytest.approx(r.latency_s)


@pytest.mark.parametrize("n,tokens", [(4, 1), (8, 16)])
def test_ep_load_bound_holds_over_a_monte_carlo(n, tokens):
    """The Gaussian bound is an upper bound on the expected slowest load of uniform top-8-of-128 routing, and
    within 25 % of it (a decode token: the discrete loads are furthest from Gaussian)."""
    E, k = 128, 8
    groups = moe.expert_groups(E, n)
    bound = float(moe.expected_max_load(np.full(E, k / E), groups, k, tokens).max())
    owner = np.concatenate([np.full(len(g), j) for j, g in enumerate(groups)])
    picks = np.argsort(np.random.default_rng(0).random((2000, tokens, E)), axis=-1)[..., :k]
    simulated = np.stack([(owner[picks] == j).sum(axis=(1, 2)) for j in range(n)], -1).max(-1).mean()
    assert simulated <= bound <= 1.25 * simulated


def test_ep_skewed_frequencies_load_the_hot_device(pi5):
    m, cl = get_model(QWEN), cluster_of([pi5] * 4)
    hot = 1.0 / (np.arange(m.n_experts) + 4.0)
    hot = hot / hot.sum() * m.n_active_experts
    uniform = moe.evaluate_expert_parallel(m, cl, step("decode"))
    skewed = moe.evaluate_expert_parallel(m, cl, step("decode"), frequencies=hot)
    assert skewed.detail.slowest_pairs > uniform.detail.slowest_pairs
    with pytest.raises(WorkbenchError, match="summing to n_active_experts"):
        moe.evaluate_expert_parallel(m, cl, step("decode"), frequencies=hot / 2)
    with pytest.raises(WorkbenchError, match="n_devices must be at most n_experts"):
        moe.evaluate_expert_parallel(get_model("Mixtral-8x7B"), cluster_of([pi5] * 16), step("decode"))


def test_the_moe_partitions_are_registered_for_moe_only(pi5):
    registry = load_all()
    dense = get_model("Llama 2-7B")
    for name in (moe.PIPELINE_SCHEME, moe.EP_SCHEME):
        with pytest.raises(WorkbenchError, match="is dense"):
            registry[name][1](dense, cluster_of([pi5] * 2), step("decode"))


def test_distributed_llama_v016_is_one_scheme_dense_or_moe(pi5):
    """dllama_allgather_tp is v0.16's one graph: a dense model costs the dense engine's layers (its notes), a MoE
    model TP inside every expert (its MoE breakdown); the old second name is gone."""
    registry = load_all()
    assert "dllama_moe_tp" not in registry and moe.DLLAMA_SCHEME == "dllama_allgather_tp"
    evaluate, cl = registry[moe.DLLAMA_SCHEME][1], cluster_of([pi5] * 2)
    dense = evaluate(get_model("Llama 2-7B"), cl, step("decode"))
    sparse = evaluate(get_model(QWEN), cl, step("decode"))
    assert "mesh all-gather of partials" in dense.notes and dense.detail is None
    assert "TP inside every expert" in sparse.notes and sparse.detail.router_s > 0
    assert dense.scheme == sparse.scheme == moe.DLLAMA_SCHEME


def test_pipeline_equals_the_dense_pipeline_when_every_expert_is_resident(pi5):
    """One cost path: with every expert cached, the MoE pipeline is llama.cpp's layer split on the same rows."""
    m, cl = get_model(QWEN), cluster_of([pi5] * 4)
    registry = load_all()
    ours = registry[moe.PIPELINE_SCHEME][1](m, cl, step("decode"))
    theirs = registry["pipeline_offload"][1](m, cl, step("decode"))
    assert ours.latency_s == pytest.approx(theirs.latency_s, rel=1e-9)


# ---- (d) the placement planner -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed(pi5):
    slow = pi5.with_memory("DRAM", bandwidth_bytes_per_s=4.26e9, capacity_bytes=3 * 2**30).with_changes(name="slow")
    return cluster_of([pi5, pi5, slow, slow, slow, slow])


def test_planner_respects_memory_and_beats_an_even_split(mixed):
    m = get_model(QWEN)
    plan = planner.plan_placement(m, mixed, step("decode"))
    even = planner.even_placement(m, planner.coefficients(m, mixed, step("decode")))
    assert plan.fits and all(b <= cap for b, cap in zip(plan.memory_bytes, plan.budget_bytes))
    assert plan.slowest_s < 0.75 * even.slowest_s
    assert sum(plan.layers) == m.n_layers
    counts = np.bincount(plan.owner.ravel(), minlength=mixed.n)
    assert (counts == plan.experts.sum(axis=0)).all() and counts.sum() == m.moe_layers * m.n_experts


def test_planner_under_skewed_routing_beats_an_even_split(mixed):
    m = get_model(QWEN)
    hot = 1.0 / (np.arange(m.n_experts) + 4.0)
    hot = hot / hot.sum() * m.n_active_experts
    plan = planner.plan_placement(m, mixed, step("decode"), frequencies=hot, groups=4)
    even = planner.even_placement(m, planner.coefficients(m, mixed, step("decode"), frequencies=hot, groups=4))
    assert plan.fits and plan.experts.shape == (4, mixed.n) and plan.slowest_s < even.slowest_s


def test_planner_says_which_constraint_binds(pi5):
    small = pi5.with_memory("DRAM", capacity_bytes=2**30)
    with pytest.raises(InfeasibleError, match="^infeasible: total memory"):
        planner.plan_placement(get_model(QWEN), cluster_of([small] * 2), step("decode"))
    tiny = pi5.with_memory("DRAM", capacity_bytes=2**28)
    with pytest.raises(InfeasibleError, match="^infeasible: memory of the master"):
        planner.plan_placement(get_model(QWEN), cluster_of([tiny] + [pi5] * 3), step("decode"))


def test_operator_rows_are_the_tables(pi5):
    """The pipeline's experts stream the routing union of the step (the table's rows), not k per token."""
    m = get_model(QWEN)
    rows = {r.name: r for r in common.layer_operators(m, step("prefill", 16))}
    union = float(common.experts_touched(m, step("prefill", 16), 16))
    assert m.n_active_experts < union < 16 * m.n_active_experts
    assert float(rows["ffn2"].bytes) == pytest.approx(union * m.d_model * m.d_ff * Q4 / 8)


# ---- the arena's contract on a tiny mixture of experts (the arena's own contract test runs a dense model) -------
TINY_MOE = tiny_config("llama", n_layers=2, d_model=128, n_heads=8, d_ff=64, vocab_size=512, max_positions=256,
                       n_experts=8, n_active_experts=2)


@pytest.mark.parametrize("name", [moe.DLLAMA_SCHEME, moe.PIPELINE_SCHEME, moe.EP_SCHEME])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_each_scheme_honours_the_arena_contract_on_a_tiny_moe(pi5, name, phase):
    paper, evaluate = load_all()[name]
    cl = cluster_of([pi5] * 2)
    workload = Workload(phase, seq_len=32, kv_len=32, weight_bits=4.5, weight_format="q4_0")  # distributed-llama: Q40
    r = evaluate(TINY_MOE, cl, workload)
    parts = [r.compute_s, r.memory_s, r.fixed_s, r.serial_s, r.comm_link_latency_s, r.comm_bytes_s, r.io_stall_s,
             r.other_s]
    assert (r.scheme, r.paper, r.phase) == (name, paper, phase) and r.latency_s > 0
    assert all(np.isfinite(parts)) and min(parts) >= 0 and sum(parts) == pytest.approx(r.latency_s, rel=1e-9)
    assert len(r.peak_memory_bytes) == cl.n and not r.oom and r.memory_s > 0
    assert set(r.detail.seconds()) == {"attention_s", "router_s", "experts_s", "misses_s", "comm_s"}


def test_planner_counts_shared_experts_and_dense_layers_as_always_on(pi5):
    """DeepSeek-V2-Lite: every token computes the 2 shared experts and the dense first layer runs its wide FFN, so a
    layer's always-on time exceeds its attention and router rows alone."""
    m, cl = get_model("DeepSeek-V2-Lite"), cluster_of([pi5] * 2)
    coef = planner.coefficients(m, cl, step("decode"))
    table = {r.name: r for r in common.layer_operators(m, step("decode"))}
    rows_only = sum(moe.row_seconds(pi5, [table[n] for n in moe.ATTENTION_ROWS + ("router",)]).values())
    always_on = planner.resident_ffn_seconds(m, pi5, step("decode"))
    assert always_on > 0 and coef.attention_s[0] == pytest.approx(rows_only + always_on + pi5.layer_overhead_s)
    plan = planner.plan_placement(m, cl, step("decode"))
    assert plan.fits and sum(plan.layers) == m.n_layers and plan.owner.shape == (m.moe_layers, m.n_experts)
