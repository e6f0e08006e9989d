"""TPI-LLM: the tensor-parallel kernel against the reference, its collectives, the sliding-window scheduler
against Prop. 3-6, the peak-memory model against Table 2, latencies against Tables 1/3, clear errors."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from jax.sharding import PartitionSpec as P

from workbench.core.constants import check_provenance
from workbench.core.errors import InfeasibleError, WorkbenchError
from workbench.kernels import reference as ref
from workbench.kernels import tpi_llm as K
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_collectives, traffic_summary
from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology, bottleneck_bytes
from workbench.model.models import get_model, tiny_config
from workbench.papers import tpi_llm as T
from workbench.report import fidelity
from workbench.report.fidelity import load_reported, scoreboard
from workbench.schemes import tpi_llm as S
from workbench.schemes.base import SCHEMES, Cluster
from workbench.schemes.planners.tpi_llm import TPSplit, apportion, plan_split, proportional_split

GIB = 2**30


@pytest.fixture(scope="module")
def gqa():
    cfg = tiny_config("llama", n_kv_heads=2)  # 8 query heads in 2 GQA groups
    return cfg, ref.init_params(cfg, seed=1)


@pytest.fixture(scope="module")
def expected(gqa):
    """Reference greedy tokens, computed once per prompt."""
    cfg, params = gqa
    cache = {}

    def get(prompt, n_new):
        key = (tuple(prompt), n_new)
        if key not in cache:
            cache[key] = ref.generate_greedy(cfg, params, prompt, n_new)
        return cache[key]
    return get


@pytest.fixture(scope="module")
def reported():
    rep = load_reported()
    return rep[rep.paper == "tpi_llm"]


def _score(reported, rows, artifact):
    board = scoreboard(reported[reported.artifact == artifact], rows)
    assert board["modelled"].notna().all(), board[board["modelled"].isna()]
    return board


# ---- kernel ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_greedy_generation_equals_reference_star(gqa, expected, n, cpu_devices):
    cfg, params = gqa
    prompt = [5, 17, 3, 42, 8, 61]
    assert K.tp_generate(cfg, params, prompt, 5, make_mesh(n), "star") == expected(prompt, 5)


@pytest.mark.parametrize("kind", ["ring", "tree", "psum"])
def test_other_allreduces_generate_the_same_tokens(gqa, expected, kind, cpu_devices):
    cfg, params = gqa
    prompt = [5, 17, 3, 42, 8, 61]
    assert K.tp_generate(cfg, params, prompt, 5, make_mesh(4), kind) == expected(prompt, 5)


def test_uneven_capability_split_pads_and_masks(gqa, expected, cpu_devices):
    cfg, params = gqa
    split = proportional_split(cfg, [3.0, 2.0, 3.0])  # 3 devices do not divide 8 heads
    assert split.heads == (3, 2, 3) and split.ffn == (48, 32, 48)
    tp = K.shard_params(cfg, params, make_mesh(3), split)
    assert tp.heads_max == 3 and tp.kv_max == 2  # device 1's heads 3-4 straddle both GQA groups
    prompt = [5, 17, 3, 42, 8, 61]
    assert K.tp_generate(cfg, params, prompt, 5, make_mesh(3), "star", split) == expected(prompt, 5)


def test_prefill_logits_and_distributed_cache(gqa, cpu_devices):
    cfg, params = gqa
    tokens = np.array([3, 1, 4, 1, 5, 9])
    tp = K.shard_params(cfg, params, make_mesh(2))
    cache = K.tp_empty_cache(tp, 8)
    logits, cache = K.tp_prefill(tp, tokens[:4], cache, "star")
    full = ref.forward(cfg, params, tokens)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(full[:4]), rtol=2e-4, atol=2e-5)
    step, cache = K.tp_decode_step(tp, int(tokens[4]), cache, "star")
    np.testing.assert_allclose(np.asarray(step), np.asarray(full[4]), rtol=2e-4, atol=2e-5)
    assert cache.length == 5 and cache.k.shape == (2, cfg.n_layers, 8, tp.kv_max, cfg.d_head)
    assert len(cache.k.sharding.device_set) == 2  # each device keeps its own KV heads
    assert tp.master["embed"].devices() == {tp.master_device}  # embedding and head live on the master only


@pytest.mark.parametrize("n", [3, 8])
def test_allreduce_primitives_sum_over_devices(n, cpu_devices):
    mesh = make_mesh(n)
    x = jnp.arange(n * 2 * 5, dtype=jnp.float32).reshape(n, 2, 5) ** 1.5
    for kind in K.ALLREDUCE_KINDS:
        f = jax.jit(jax.shard_map(lambda v, kind=kind: K.allreduce(v[0], "x", n, kind)[None], mesh=mesh,
                                  in_specs=P("x"), out_specs=P("x"), check_vma=False))
        out = np.asarray(f(x))
        np.testing.assert_allclose(out, np.broadcast_to(np.asarray(x).sum(0), out.shape), rtol=1e-6, err_msg=kind)


def test_compiled_collectives_equal_analytical_traffic(gqa, cpu_devices):
    cfg, params = gqa
    n, s = 8, 3
    tp = K.shard_params(cfg, params, make_mesh(n))
    cache = K.tp_empty_cache(tp, 4)
    h0 = jax.device_put(np.zeros((n, s, cfg.d_model), np.float32), jax.sharding.NamedSharding(tp.mesh, P("x")))
    message = s * cfg.d_model * 4
    for kind in ("star", "ring", "tree", "psum"):
        got = traffic_summary(compiled_collectives(K.make_backbone(cfg, tp.mesh, kind), tp.blocks, cache.k, cache.v,
                                                   h0, np.int32(0)))
        want = K.step_traffic(kind, n, message)  # one scan body: broadcast + 2 all-reduces
        assert got == pytest.approx(want), kind
    # star and ring traffic equal the network model's busiest-link bytes
    assert K.allreduce_traffic("star", n, message)["collective-permute"] == bottleneck_bytes("star", "all_reduce", n, message)
    assert K.allreduce_traffic("ring", n, message)["collective-permute"] == \
        pytest.approx(bottleneck_bytes("ring", "all_reduce", n, message))


def test_kernel_errors(gqa, cpu_devices):
    cfg, params = gqa
    with pytest.raises(WorkbenchError, match="n_heads"):
        K.shard_params(cfg.with_changes(n_heads=2, n_kv_heads=2, d_head=32), ref.init_params(
            cfg.with_changes(n_heads=2, n_kv_heads=2, d_head=32), 0), make_mesh(4))
    with pytest.raises(WorkbenchError, match="allreduce"):
        K.tp_generate(cfg, params, [1, 2], 1, make_mesh(2), "butterfly")
    with pytest.raises(WorkbenchError, match="split is for 3 devices"):
        K.shard_params(cfg, params, make_mesh(2), [1.0, 1.0, 1.0])
    with pytest.raises(WorkbenchError, match="Llama"):
        bert = tiny_config("bert")
        K.shard_params(bert, ref.init_params(bert, 0), make_mesh(2))


# ---- planner -------------------------------------------------------------------------------------------
def test_apportion_and_capability_split():
    assert apportion(10, [1, 1, 1]) == (4, 3, 3)
    assert apportion(32, [2, 1, 1]) == (16, 8, 8)
    assert sum(apportion(28672, [3.3, 1.7, 2.2, 2.2])) == 28672
    with pytest.raises(WorkbenchError, match="at least 1"):
        apportion(3, [1, 1, 1, 1])
    laptops = [load_device(T.LAPTOPS[n]) for n in ("Mac Pro", "Mac Air", "Dell", "Dell")]
    split = plan_split(get_model("Llama 2-7B"), laptops)
    assert sum(split.heads) == 32 and split.heads[1] < split.heads[2]  # the Mac Air streams slowest
    with pytest.raises(WorkbenchError, match="sum"):
        TPSplit((4, 3), (64, 64)).validate(tiny_config())


# ---- scheduler vs the propositions ---------------------------------------------------------------------------
def test_loose_condition_is_exactly_when_the_timeline_stops_stalling():
    rng = np.random.default_rng(7)
    outcomes = set()
    for _ in range(150):
        t_attn, t_ffn, t_ar = rng.uniform(1, 20, 3)
        tau_attn, tau_ffn = rng.uniform(1, 45, 2)
        layers, retain = int(rng.integers(2, 6)), int(rng.integers(0, 4))
        stalls = S.compute_stalls(S.block_pipeline(t_attn, t_ffn, t_ar, tau_attn, tau_ffn, layers, None, retain))
        # Prop. 3 allows one stall at the first FFN before the steady state; Prop. 6 none
        steady = max(stalls[1:] if retain else stalls[2:]) < 1e-9
        loose = S.loose_steady(t_attn, t_ffn, t_ar, tau_attn, tau_ffn, layers, retain)
        assert steady == loose, (t_attn, t_ffn, t_ar, tau_attn, tau_ffn, layers, retain, stalls)
        outcomes.add(loose)
        if S.tight_steady(t_attn, t_ffn, t_ar, tau_attn, tau_ffn):  # Prop. 4 holds even with a window of 2
            assert max(S.compute_stalls(S.block_pipeline(t_attn, t_ffn, t_ar, tau_attn, tau_ffn, layers, 2))[1:]) < 1e-9
    assert outcomes == {True, False}


def test_sec33_quoted_times_meet_loose_not_tight():
    quoted = [T.reported_value("Sec. 3.3", "Llama 2-7B", "4 laptops,p=0.25,w=4", q)
              for q in ("t_attn", "t_ffn", "t_allreduce", "tau_attn", "tau_ffn")]  # ms, as the paper quotes them
    layers = get_model("Llama 2-7B").n_layers
    assert S.loose_steady(*quoted, layers) and not S.tight_steady(*quoted)


def test_window_peak_reproduces_prop5_when_embedding_blocks_dominate():
    for name in ("Llama 2-7B", "Llama 3.1-70B", "Yi-34B"):
        m = get_model(name)
        for n in (4, 8):
            for w in range(1, 7):
                blocks = S.device_blocks(m, 1 / n, True)
                assert S.window_peak_params(blocks, w) == pytest.approx(S.prop5_peak_params(m, 1 / n, w, True))
                worker = S.device_blocks(m, 1 / n, False)
                assert S.window_peak_params(worker, w) == pytest.approx(S.prop5_peak_params(m, 1 / n, w, False))
    # Llama 2-70B on 2 devices: an FFN share (1.3 GiB) outweighs the embedding (1 GiB); Prop. 5 undercounts
    m = get_model("Llama 2-70B")
    assert S.window_peak_params(S.device_blocks(m, 0.5, True), 2) > S.prop5_peak_params(m, 0.5, 2, True)


def test_timeline_window_bounds_resident_blocks_and_retention_costs_memory():
    m, cluster = get_model("Llama 2-7B"), T.emulated_cluster(4)
    prefill, _ = T.workloads()
    opts = S.default_options(decode_tokens=2)
    runs = {w: S.simulate_tpi(m, cluster, prefill, replace(opts, window=w)) for w in (1, 2, 4)}
    assert runs[1].peak_memory_bytes[0] < runs[2].peak_memory_bytes[0] <= runs[4].peak_memory_bytes[0]
    assert runs[1].token_latency_s > runs[2].token_latency_s  # a window of 1 blocks on every load
    # with a fast disk the loader runs ahead and fills the window: the timeline's peak is Prop. 5's
    dev = cluster.devices[0].with_changes(storage_read_bytes_per_s=200e9)
    fast = Cluster((dev,) * 4, cluster.topology)
    for w in (3, 4, 5):
        run = S.simulate_tpi(m, fast, prefill, replace(opts, window=w))
        window_bytes = opts.gamma * S.prop5_peak_params(m, 0.25, w, master=True) * 4
        kv = S.kv_bytes(m, 0.25, opts.context_tokens, 32)
        assert run.peak_memory_bytes[0] == pytest.approx(window_bytes + opts.runtime_overhead_bytes + kv, rel=1e-9)
    kept = S.simulate_tpi(m, cluster, prefill, replace(opts, retain_every=2))
    assert kept.peak_memory_bytes[1] > runs[2].peak_memory_bytes[1]
    assert kept.token_latency_s < runs[2].token_latency_s  # fewer FFN reloads


# ---- memory, latency, fidelity ---------------------------------------------------------------------------------
def test_table2_peak_memory_within_15_percent(reported):
    board = _score(reported, T.table2_rows(T.table2()), "Table 2")
    assert len(board) == 56
    assert (board["relative_error"].abs() <= 0.15).all(), board[board["relative_error"].abs() > 0.15]


def test_table1_oom_cells_exact_and_latencies(reported):
    board = _score(reported, T.table1_rows(T.table1()), "Table 1")
    exact = board[board["quantity"].isin(["oom", "fits"])]
    assert len(exact) == 14 and (exact["relative_error"] == 0).all()
    lat = board[board["quantity"].isin(["ttft", "token_latency"])].set_index(["model", "setting", "quantity"])
    assert len(lat) == 22
    # pinned: every row within the 25 % but the known misses (see the notebook): Llama 2-13B's
    # scheduler-on token latency, and Llama 3.1-8B's three rows bound by the master's first/steady reads
    ok = lat.drop(index=[("Llama 2-13B", "scheduler=on,w=2", "token_latency"),
                         ("Llama 3.1-8B", "scheduler=on,w=2", "token_latency"),
                         ("Llama 3.1-8B", "scheduler=on,w=2", "ttft"),
                         ("Llama 3.1-8B", "scheduler=off", "ttft")])
    assert (ok["relative_error"].abs() <= 0.25).all(), ok[ok["relative_error"].abs() > 0.25]


def test_table3_oom_cells_exact_and_tpi_latencies(reported):
    board = _score(reported, T.table3_rows(T.table3()), "Table 3")
    exact = board[board["quantity"].isin(["oom", "fits"])]
    assert len(exact) == 20 and (exact["relative_error"] == 0).all()
    lat = board[board["quantity"].isin(["ttft", "token_latency"])]
    pinned = lat[((lat["setting"].isin(["Transformers", "TPI-LLM"]) & (lat["model"] != "Llama 3.1-8B"))
                  | ((lat["setting"] == "Accelerate") & (lat["quantity"] == "token_latency")))]
    assert len(pinned) == 15
    assert (pinned["relative_error"].abs() <= 0.25).all(), pinned[pinned["relative_error"].abs() > 0.25]
    tpi = T.table3().set_index(["model", "setting"])["token_latency"]
    for model in T.TABLE3_MODELS:  # TPI-LLM beats every single-laptop system where they run (Sec. 4.4)
        others = tpi.loc[model].drop("TPI-LLM").dropna()
        assert (tpi.loc[(model, "TPI-LLM")] < others).all()


def test_master_starts_its_loader_after_the_prompt_workers_before():
    """Alg. 1 lines 2-3 / Alg. 2 line 2: the master reads its first blocks inside the first token (also every
    block, once, with the scheduler off); workers have their first w blocks resident at t = 0."""
    m, cluster = get_model("Llama 2-7B"), T.emulated_cluster()
    prefill, _ = T.workloads()
    master_bytes = S.resident_weight_bytes(m, 1 / 8, True, 32)
    read = cluster.devices[0].storage_read_bytes_per_s
    for scheduler in (False, True):
        opts = T.options_for("emulated", scheduler=scheduler)
        run = S.simulate_tpi(m, cluster, prefill, opts)
        loads = run.timeline.frame
        first = loads[loads["name"].str.startswith("load:t0.")]
        master, worker = first[first["resource"] == "disk0"], first[first["resource"] != "disk0"]
        assert master["duration"].sum() == pytest.approx(master_bytes / read, rel=1e-9)  # every block, read cold
        assert run.ttft_s >= master_bytes / read  # TTFT is bound by the master's first read
        if scheduler:
            assert (worker["duration"].iloc[:opts.window] == 0).all() and worker["duration"].iloc[opts.window] > 0
        else:
            assert worker.empty  # workers load before the prompt arrives; nothing left in the first token
            late = loads[loads["kind"] == "io"]
            assert late["name"].str.startswith("load:t0.").all()  # decode tokens find every weight resident
        old = S.simulate_tpi(m, cluster, prefill, replace(opts, first_token_loads=False))
        assert old.ttft_s < run.ttft_s and old.token_latency_s == pytest.approx(run.token_latency_s, rel=1e-9)
    # the paper's pattern: with the master's first read in both, TTFT is (nearly) the same off and on
    t1 = T.table1(("Llama 2-7B", "Llama 2-13B")).set_index(["model", "setting"])["ttft"]
    for name in ("Llama 2-7B", "Llama 2-13B"):
        assert t1[(name, "scheduler=off")] == pytest.approx(t1[(name, "scheduler=on,w=2")], rel=0.1)


def test_sec32_t_data_follows_the_papers_per_path_formula():
    """t_data = 2 sum over the path's links of 32|H|/B: star path 4 links, depth-2 tree 8, no master contention."""
    bits_per_link = 32 * 8192 / 300e6 * 1e3  # ms per link for Llama 2-70B's hidden state at 300 Mbps
    assert T.sec32_t_data_ms() == pytest.approx(2 * 4 * bits_per_link, rel=1e-12)
    assert T.sec32_t_data_ms(algorithm="tree") == pytest.approx(2 * 8 * bits_per_link, rel=1e-12)
    assert T.data_transfer_ms() == pytest.approx(2 * 7 * bits_per_link, rel=1e-9)  # the cost model serialises 7
    with pytest.raises(WorkbenchError, match="algorithm"):
        T.sec32_t_data_ms(algorithm="ring")


def test_bandwidth_300_to_1000_mbps_changes_70b_token_latency_by_under_10_percent():
    change = T.bandwidth_sensitivity("Llama 2-70B", 300, 1000)
    assert 0 <= change < 0.10
    # but it is not a dead knob: with a 20x slower network the all-reduce data term shows
    assert T.bandwidth_sensitivity("Llama 2-70B", 15, 1000) > 0.10


def test_fig3_star_has_the_fewest_link_latencies_and_fig6_ordering():
    hops = T.link_latency_hops()
    assert hops == {a: T.reported_value("Sec. 3.2", "", "gateway_tree,n=8", f"link_latency_{a}") for a in hops}
    assert list(hops) == ["star", "tree", "ring"]
    fig3 = T.fig3((1, 5)).pivot(index="tau_ms", columns="algorithm", values="latency_ms")
    assert (fig3["star"] < fig3["tree"]).all() and (fig3["tree"] < fig3["ring"]).all()
    fig6 = T.fig6(("Llama 2-7B", "Llama 2-70B")).set_index(["model", "system"])
    assert fig6.loc[("Llama 2-7B", "Galaxy"), "token_latency"] > fig6.loc[("Llama 2-7B", "MP"), "token_latency"]
    assert fig6.loc[("Llama 2-7B", "TPI-LLM"), "peak_memory"] < fig6.loc[("Llama 2-7B", "MP"), "peak_memory"]
    assert fig6.loc[("Llama 2-70B", "TPI-LLM"), "oom"] == 0 and fig6.loc[("Llama 2-70B", "Galaxy"), "oom"] == 1


def test_fitted_constants_reproduce_from_their_rows():
    table = T.fitted_constants_table()
    rel = (table["stored"] - table["refit"]).abs() / table["refit"].abs()
    assert (rel < 0.01).all(), table[rel >= 0.01]


def test_fits_read_their_targets_from_data(monkeypatch):
    """No reported number is typed into a fit: doubling Sec. 3.3's quoted load times halves the M1's derived
    SSD rate, and scaling Table 2's column scales the fitted memory constants."""
    base = T.fit_laptop_constants()["storage_read_bandwidth"]
    frame = load_reported()
    taus = (frame.artifact == "Sec. 3.3") & frame.quantity.isin(["tau_attn", "tau_ffn"])
    doubled = frame.assign(value=np.where(taus, frame["value"] * 2, frame["value"]))
    monkeypatch.setattr(fidelity, "load_reported", lambda: doubled)
    assert T.fit_laptop_constants()["storage_read_bandwidth"] == pytest.approx(base / 2, rel=1e-12)
    column = (frame.artifact == "Table 2") & frame.setting.str.startswith("scheduler=on")
    monkeypatch.setattr(fidelity, "load_reported", lambda: frame.assign(value=np.where(column, frame["value"] * 3,
                                                                                     frame["value"])))
    gamma, overhead = T.fit_memory_constants()
    assert gamma > 2 * T.constants()["gamma"] and overhead > 2 * T.constants()["runtime_overhead"]
    with pytest.raises(WorkbenchError, match="no reported tpi_llm value"):
        T.reported_value("Table 1", "Llama 2-7B", "scheduler=on,w=3", "token_latency")


def test_implied_load_rates_bound_the_loader_from_the_reported_latencies(reported):
    """Each row is bytes per token / the reported latency; the two rows a rate was derived or fitted from agree
    with the model, and the spread the notebook explains is in the paper's numbers."""
    rates = T.implied_load_rates().set_index(["artifact", "model", "setting"])
    assert len(rates) == len(T.MODELS) + len(T.TABLE3_MODELS) + 1
    latencies = reported[reported.quantity == "token_latency"].set_index(["artifact", "model", "setting"])["value"]
    for key, row in rates.drop(index="Sec. 3.3", level="artifact").iterrows():
        assert row.reported_s == latencies.loc[key]
        assert row.implied_rate_gb_s == pytest.approx(row.bytes_per_token_gb / row.reported_s, rel=1e-12)
    assert rates.loc[("Sec. 3.3", "Llama 2-7B", "4 laptops,p=0.25,w=4"), "implied_over_modelled"] == pytest.approx(1, abs=1e-3)
    assert rates.loc[("Table 1", "Llama 2-70B", "scheduler=on,w=2"), "implied_over_modelled"] == pytest.approx(1, abs=0.01)
    # the paper's own spread: 13B's later tokens need a loader 1.9x the 70B one; the Mac's rate falls with size
    assert rates.loc[("Table 1", "Llama 2-13B", "scheduler=on,w=2"), "implied_over_modelled"] > 1.8
    same = rates.loc[[("Table 1", "Llama 2-13B", "scheduler=on,w=2"), ("Table 1", "Llama 3.1-8B", "scheduler=on,w=2")]]
    assert same["bytes_per_token_gb"].iloc[0] == pytest.approx(same["bytes_per_token_gb"].iloc[1], rel=0.01)
    assert same["reported_s"].iloc[1] > 1.4 * same["reported_s"].iloc[0]  # same bytes, 2.9 vs 4.3 s
    mac = rates.xs("Transformers+MS", level="setting").sort_values("bytes_per_token_gb")
    assert mac["implied_rate_gb_s"].iloc[0] > 1.8 * mac["implied_rate_gb_s"].iloc[-1]


def test_no_single_loader_rate_meets_every_scheduler_on_row():
    """The rate windows are where the model is within 25 %: the bounds solve exactly, and on each testbed two
    reported rows need disjoint rates (13B vs 3B/70B emulated, where 13B is the only such row; 3B vs Yi-34B
    on the Mac with the scheduler, and Yi-34B's TTFT vs its own token latency)."""
    windows = T.loader_rate_windows(0.25, T.MODELS, ("Llama 2-3B", "Yi-34B"))
    row = windows.set_index("model").loc["Llama 2-70B"]
    prefill, _ = T.workloads()
    at_low = T.simulate_tpi(get_model("Llama 2-70B"), T._emulated_with(disk=row.rate_low_gb_s * 1e9), prefill,
                            T.options_for("emulated")).token_latency_s
    assert at_low == pytest.approx(1.25 * row.reported_s, rel=1e-3)
    assert row.rate_low_gb_s < row.modelled_rate_gb_s < row.rate_high_gb_s  # the fitted row is inside its window
    common = T.common_rate_window(windows).set_index("testbed")
    assert not common.loc["emulated", "feasible"] and not common.loc["laptops", "feasible"]
    assert common.loc["emulated", "feasible_without"] == "Llama 2-13B, scheduler=on,w=2, token_latency"
    yi = T.loader_rate_windows(0.25, (), ("Yi-34B",), ("ttft", "token_latency")).set_index("quantity")
    assert yi.loc["ttft", "rate_high_gb_s"] < yi.loc["token_latency", "rate_low_gb_s"] / 2  # one run, two rates
    assert T.common_rate_window(yi.reset_index()).feasible.tolist() == [False]
    with pytest.raises(WorkbenchError, match="tolerance"):
        T.loader_rate_windows(1.5)


def test_registered_schemes_and_contract():
    for name in ("tpi_star_tp", "layerwise_mp", "single_device_resident", "disk_offload_blocking", "tp_ring_allreduce"):
        assert name in SCHEMES
    m, cluster = get_model("Llama 2-13B"), T.emulated_cluster()
    prefill, decode = T.workloads()
    res = SCHEMES["tpi_star_tp"][1](m, cluster, decode)
    assert res.paper == "tpi_llm" and len(res.peak_memory_bytes) == 8 and not res.oom
    parts = res.compute_s + res.memory_s + res.comm_link_latency_s + res.comm_bytes_s + res.io_stall_s + \
        res.other_s + res.fixed_s + res.serial_s
    assert parts == pytest.approx(res.latency_s, rel=1e-6)
    assert res.parts_s == pytest.approx(res.latency_s, rel=1e-6)
    assert res.serial_s > 0  # the master's embedding and head run on it alone
    assert res.io_stall_s > 0  # Llama 2-13B on the emulated disk is load-bound


def test_clear_errors():
    with pytest.raises(WorkbenchError, match="window"):
        S.default_options(window=0)
    tiny_dev = load_device("tpi_emulated_edge").with_memory("DRAM", capacity_bytes=2 * GIB)
    tiny_dev = tiny_dev.with_changes(swap_capacity_bytes=0.0)
    cluster = Cluster((tiny_dev,) * 2, Topology("gateway_tree", 2, Link.from_mbps(300, 1)))
    with pytest.raises(InfeasibleError, match="infeasible: Llama 3.1-70B .* even with the memory scheduler"):
        S.simulate_tpi(get_model("Llama 3.1-70B"), cluster, T.workloads()[0], strict=True)
    with pytest.raises(WorkbenchError, match="n_heads"):
        S.simulate_tpi(get_model("Llama 2-7B"), T.emulated_cluster(33), T.workloads()[0])
    with pytest.raises(WorkbenchError, match="laptop"):
        T.laptop_cluster(["Mac Pro", "ThinkPad"])
    with pytest.raises(WorkbenchError, match="testbed"):
        T.testbed_cluster("cloud")


def test_laptop_subsets_and_provenance():
    three = T.table3(("Llama 2-7B",), laptops=["Mac Pro", "Dell", "Dell"]).set_index("setting")
    four = T.table3(("Llama 2-7B",)).set_index("setting")
    assert three.loc["TPI-LLM", "token_latency"] != four.loc["TPI-LLM", "token_latency"]
    assert {"tpi_llm.toml", "tpi_emulated_edge.toml", "tpi_mac_pro_m1.toml"} <= set(check_provenance())
    assert isinstance(T.fig5(devices=(4, 8), cores=(4,), bandwidths_mbps=(300,)), pd.DataFrame)


def test_decode_steps_cost_one_token_whatever_the_prompt():
    """Each block is costed per (device, block, tokens, attended) once and reused: a long prompt makes the
    first token slower, not the later ones (weights resident, so compute sets the pace)."""
    m, cluster = get_model("Llama 2-7B"), T.laptop_cluster()
    opts = T.options_for("laptops", scheduler=False)
    short, long = (S.simulate_tpi(m, cluster, T.workloads(p)[0], opts) for p in (4, 256))
    assert long.ttft_s > 1.5 * short.ttft_s
    assert long.token_latency_s == pytest.approx(short.token_latency_s, rel=0.05)


def test_window_memory_follows_prop5_where_the_loader_keeps_ahead_and_not_where_it_is_load_bound():
    """Fixed-costs issue item 4: at 2 devices the scheduler-on peak is the same at windows 2 and 4 because
    the master is load-bound (its loader never gets a block ahead), while the workers, which preload their
    first w blocks before the prompt (Alg. 2), hold Prop. 5's window exactly."""
    df = T.window_memory_check(models=("Llama 2-7B", "Llama 2-13B"), devices=(2,), windows=(2, 4))
    workers = df[df.device == "worker"]
    np.testing.assert_allclose(workers.simulated_peak_gib, workers.prop5_peak_gib, rtol=1e-9)
    masters = df[df.device == "master"].set_index(["model", "window"])
    for model in ("Llama 2-7B", "Llama 2-13B"):
        assert not masters.loc[(model, 4), "master_loader_ahead"]
        assert masters.loc[(model, 4), "tau_ffn_over_t_ffn"] > 2  # loads take several times the compute
        assert masters.loc[(model, 4), "simulated_peak_gib"] == masters.loc[(model, 2), "simulated_peak_gib"]
        assert masters.loc[(model, 4), "prop5_peak_gib"] > masters.loc[(model, 2), "prop5_peak_gib"]
        assert masters.loc[(model, 2), "simulated_peak_gib"] == pytest.approx(masters.loc[(model, 2), "prop5_peak_gib"])


def test_fixed_costs_hide_behind_the_loader_but_not_without_the_scheduler():
    """Each all-reduce of the star makes the master handle 2(n-1) messages; without the scheduler every
    one of a token's 2L all-reduces and the broadcast's n-1 sends is on the critical path."""
    df = T.fixed_cost_sensitivity(models=("Llama 2-7B",), message_overheads_ms=(0.0, 1.0), kernel_launches_us=(0.0,))
    off = df[~df.scheduler].set_index("message_overhead_ms")["token_latency"]
    n, layers = 8, get_model("Llama 2-7B").n_layers
    assert off[1.0] - off[0.0] == pytest.approx((2 * layers * 2 * (n - 1) + (n - 1)) * 1e-3, rel=1e-6)
    on = df[df.scheduler].set_index("message_overhead_ms")["token_latency"]
    assert on[1.0] == pytest.approx(on[0.0], rel=1e-9)  # the loader, not the network, binds the token
