"""The routing model and the expert cache (workbench.model.routing): the analytic values against a Monte-Carlo of the same
routing process, the exact special cases, the trace loader and the one-line errors."""

from functools import cache

import numpy as np
import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.fields import declared_fields
from workbench.core.io import DATA_DIR
from workbench.model.routing import (
    WARMUP_TOKENS,
    ExpertCache,
    Routing,
    expected_distinct,
    expected_misses,
    expected_misses_per_token,
    hit_rate,
    load_trace,
    lru_ranks,
    pinned_set,
    popularity,
    simulate_routing,
    simulated_distinct,
    simulated_hit_rate,
    water_fill,
)

TOKENS = 100_000
# (n_experts, active): Qwen3-30B-A3B 128 / 8, Mixtral 8x7B 8 / 2, OLMoE 64 / 8 (their config.json num_experts /
# num_experts_per_tok; Mixtral: arXiv 2401.04088 Sec. 2.1)
SHAPES = {"qwen3_30b_a3b": (128, 8), "mixtral_8x7b": (8, 2), "olmoe": (64, 8)}
ROUTINGS = {
    "uniform": Routing(),
    "skewed": Routing("skewed", skew=1.0),
    "uniform_locality": Routing(locality=0.3),
    "skewed_locality": Routing("skewed", skew=0.8, locality=0.5),
}
CASES = [(shape, routing) for shape in SHAPES for routing in ROUTINGS]


@cache
def simulated(shape: str, routing: str) -> tuple[np.ndarray, np.ndarray]:
    """(expert ids, LRU recency ranks) of 10^5 simulated tokens, shared by the tests of one setting."""
    n, k = SHAPES[shape]
    ids = simulate_routing(ROUTINGS[routing], n, k, TOKENS, seed=7)
    return ids, lru_ranks(ids, n, seed=7)


def cache_sizes(n: int, k: int) -> list[int]:
    """Cache sizes below, at and above one token's k experts, up to all but one expert."""
    return sorted({1, max(1, k // 2), k, n // 4, n // 2, 3 * n // 4, n - 1})


@pytest.mark.parametrize("shape,routing", CASES)
def test_the_analytic_hit_rate_is_within_2_percent_of_the_monte_carlo(shape, routing):
    n, k = SHAPES[shape]
    ids, ranks = simulated(shape, routing)
    pi = popularity(ROUTINGS[routing], n, k)[0]
    for c in cache_sizes(n, k):
        pinned_mc = np.isin(ids, pinned_set(pi, c)).mean()
        lru_mc = (ranks[WARMUP_TOKENS:] < c).mean()
        assert hit_rate(ROUTINGS[routing], n, k, c, "pinned") == pytest.approx(pinned_mc, abs=0.02), c
        assert hit_rate(ROUTINGS[routing], n, k, c, "lru") == pytest.approx(lru_mc, abs=0.02), c


@pytest.mark.parametrize("shape,routing", CASES)
def test_expected_distinct_is_within_2_percent_of_the_monte_carlo(shape, routing):
    n, k = SHAPES[shape]
    ids, _ = simulated(shape, routing)
    for tokens in (1, 2, 4, 16, 64):
        mc = simulated_distinct(ids, tokens)
        assert expected_distinct(ROUTINGS[routing], n, k, tokens) == pytest.approx(mc, rel=0.02), tokens


def test_simulated_hit_rate_reads_the_same_simulation():
    routing, (n, k) = ROUTINGS["skewed_locality"], SHAPES["mixtral_8x7b"]
    _, ranks = simulated("mixtral_8x7b", "skewed_locality")
    assert simulated_hit_rate(routing, n, k, 4, "lru", TOKENS, seed=7) == (ranks[WARMUP_TOKENS:] < 4).mean()
    assert simulated_hit_rate(routing, n, k, 4, "pinned", 20_000) == pytest.approx(
        hit_rate(routing, n, k, 4, "pinned"), abs=0.02)


def test_under_uniform_routing_both_policies_hit_the_cache_share_exactly():
    for n, k in SHAPES.values():
        for c in (0, 1, k, n // 2, n):
            for policy in ("pinned", "lru"):
                assert hit_rate(Routing(), n, k, c, policy) == pytest.approx(c / n, abs=1e-9)
            assert expected_misses_per_token(Routing(), n, k, c, "lru") == pytest.approx(k * (1 - c / n), abs=1e-9)


def test_uniform_expected_distinct_is_the_closed_form():
    t = np.array([0.0, 0.5, 1.0, 3.0, 512.0])
    assert np.allclose(expected_distinct(Routing(), 128, 8, t), 128 * (1 - (1 - 8 / 128) ** t))
    assert expected_distinct(Routing(locality=0.4), 64, 8, 1) == pytest.approx(8)
    assert expected_distinct(Routing(locality=0.4), 64, 8, 0) == 0


def test_the_pinned_cache_holds_the_most_popular_experts():
    # skew 1 over 4 experts, 1 active: pi = (1, 1/2, 1/3, 1/4) / H_4; a 2-expert pinned cache serves (1 + 1/2) / H_4
    h4 = 1 + 1 / 2 + 1 / 3 + 1 / 4
    routing = Routing("skewed", skew=1.0)
    assert popularity(routing, 4, 1)[0] == pytest.approx([1 / h4, 0.5 / h4, 1 / 3 / h4, 0.25 / h4])
    assert hit_rate(routing, 4, 1, 2, "pinned") == pytest.approx(1.5 / h4)
    assert hit_rate(routing, 4, 1, 2, "lru") < hit_rate(routing, 4, 1, 2, "pinned")


def test_locality_raises_the_lru_hit_rate_and_leaves_the_pinned_one():
    n, k = SHAPES["qwen3_30b_a3b"]
    still, local = Routing("skewed", skew=0.8), Routing("skewed", skew=0.8, locality=0.5)
    assert hit_rate(local, n, k, k, "lru") > hit_rate(still, n, k, k, "lru") + 0.2
    assert hit_rate(local, n, k, k, "pinned") == hit_rate(still, n, k, k, "pinned")
    assert expected_distinct(local, n, k, 16) < expected_distinct(still, n, k, 16)


def test_prefill_misses_are_the_union_outside_the_cache():
    n, k = SHAPES["olmoe"]
    routing = Routing("skewed", skew=1.0)
    ids, _ = simulated("olmoe", "skewed")
    held = pinned_set(popularity(routing, n, k)[0], 16)
    windows = ids[: TOKENS // 32 * 32].reshape(-1, 32 * k)
    mc = np.mean([len(np.setdiff1d(w, held)) for w in windows])
    assert expected_misses(routing, n, k, 16, 32, "pinned") == pytest.approx(mc, rel=0.02)
    for policy in ("pinned", "lru"):
        assert expected_misses(routing, n, k, 0, [1, 32], policy) == pytest.approx(
            expected_distinct(routing, n, k, [1, 32]))
        assert expected_misses(routing, n, k, n, 32, policy) == pytest.approx(0.0)
    assert expected_misses(routing, n, k, 16, 32, "lru") > expected_misses(routing, n, k, 16, 32, "pinned")


def test_the_simulation_is_seeded_and_picks_k_distinct_experts():
    routing = ROUTINGS["skewed_locality"]
    a = simulate_routing(routing, 64, 8, 2000, seed=3)
    assert a.shape == (2000, 8) and a.min() >= 0 and a.max() < 64
    assert np.array_equal(a, simulate_routing(routing, 64, 8, 2000, seed=3))
    assert not np.array_equal(a, simulate_routing(routing, 64, 8, 2000, seed=4))
    assert all(len(set(row)) == 8 for row in a.tolist())


def test_water_filling_caps_an_expert_at_one_and_spreads_the_excess():
    assert water_fill([10, 1, 1, 1], 2) == pytest.approx([1, 1 / 3, 1 / 3, 1 / 3])
    assert popularity(Routing("skewed", skew=3.0), 8, 2)[0].max() == 1.0
    assert popularity(Routing("skewed", skew=(0.0, 3.0)), 8, 2).sum(axis=1) == pytest.approx([2, 2])


def test_a_trace_gives_each_layer_its_counts_popularity():
    routing = Routing("trace", trace="synthetic_8x2_4layers.csv")
    counts = load_trace(routing.trace)
    assert counts.shape == (4, 8) and (counts.sum(axis=1) == 2000).all()  # 1000 tokens x 2 experts per layer
    assert popularity(routing, 8, 2) == pytest.approx(2 * counts / counts.sum(axis=1, keepdims=True))
    per_layer = [hit_rate(routing, 8, 2, 3, "lru", layer=layer) for layer in range(4)]
    assert hit_rate(routing, 8, 2, 3, "lru") == pytest.approx(np.mean(per_layer))
    assert len(set(np.round(per_layer, 6))) == 4
    frame = pd.read_csv(DATA_DIR / "routing" / "synthetic_8x2_4layers.csv")
    assert set(frame["kind"]) == {"assumed"} and frame["source"].str.contains("synthetic").all()


def test_a_bad_trace_file_is_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("layer,expert,count\n0,0,3\n")
    with pytest.raises(WorkbenchError, match="columns layer, expert, count, kind, source"):
        load_trace(str(bad))
    gap = tmp_path / "gap.csv"
    gap.write_text("layer,expert,count,kind,source\n0,0,3,assumed,x\n0,2,3,assumed,x\n")
    with pytest.raises(WorkbenchError, match="exactly once"):
        load_trace(str(gap))
    negative = tmp_path / "negative.csv"
    negative.write_text("layer,expert,count,kind,source\n0,0,3,assumed,x\n-1,1,3,assumed,x\n")
    with pytest.raises(WorkbenchError, match="column layer must hold integers >= 0"):
        load_trace(str(negative))
    unsourced = tmp_path / "unsourced.csv"
    unsourced.write_text("layer,expert,count,kind,source\n0,0,3,guessed,x\n")
    with pytest.raises(WorkbenchError, match="a kind in quoted"):
        load_trace(str(unsourced))
    with pytest.raises(WorkbenchError, match="has 8 experts per layer; the model has n_experts = 16"):
        popularity(Routing("trace", trace="synthetic_8x2_4layers.csv"), 16, 2)


@pytest.mark.parametrize("call,match", [
    (lambda: hit_rate(Routing(), 8, 9, 2, "lru"), r"active experts must be an integer in 1\.\.8"),
    (lambda: hit_rate(Routing(), 8, 2, 9, "lru"), r"cache_experts must be an integer in 0\.\.8 .*larger than the model"),
    (lambda: expected_misses(Routing(), 8, 2, -1, 4), r"cache_experts must be an integer in 0\.\.8"),
    (lambda: Routing("skewed", skew=-0.5), r"routing_skew must be a finite number >= 0"),
    (lambda: Routing(locality=1.0), r"routing_locality must be a number in \[0, 1\)"),
    (lambda: Routing(locality=-0.1), r"routing_locality must be a number in \[0, 1\)"),
    (lambda: Routing("zipf"), r"unknown routing 'zipf'; allowed: uniform, skewed, trace"),
    (lambda: hit_rate(Routing(), 8, 2, 2, "fifo"), r"unknown cache_policy 'fifo'; allowed: pinned, lru"),
    (lambda: ExpertCache(3, "fifo"), r"unknown cache_policy 'fifo'"),
    (lambda: Routing("trace"), r"routing_trace must name a count CSV"),
    (lambda: expected_distinct(Routing(), 8, 2, -1), r"tokens must be finite and >= 0"),
])
def test_bad_input_is_one_line_naming_the_key(call, match):
    with pytest.raises(WorkbenchError, match=match) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_the_user_facing_fields_are_declared_with_their_toml_keys():
    keys = {tk.key for cls in (Routing, ExpertCache) for _, spec in declared_fields(cls) for tk in spec.toml}
    assert keys == {"routing", "routing_skew", "routing_locality", "routing_trace", "cache_experts", "cache_policy",
                    "expert_reads"}
