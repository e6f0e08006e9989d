"""Tests that kill mutmut survivors in `workbench/scenarios/speculative.py` (see docs/mutation.md, "Speculative decoding,
GGUF formats, MoE advice, scaling").

Expected numbers are worked by hand from the acceptance model's closed form (1 - alpha^(gamma+1)) / (1 - alpha),
the routing union's closed form n (1 - (1 - k/n)^T) under uniform routing, or a hand-made `VerifyStep` /
`SchemeResult`; where a value is the registered scheme's own cost, the test takes it from the evaluator directly
and checks how speculative.py combines it. JAX-free; the whole file runs in a few seconds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import load_device
from workbench.machine.network import Link, Topology, point_to_point
from workbench.model.models import get_model
from workbench.model.routing import Routing, expected_distinct
from workbench.scenarios import speculative as sp
from workbench.scenarios.userconfig import load_config
from workbench.schemes.base import Cluster, SchemeResult, Workload, load_all

LAPTOPS = load_config(REPO_ROOT / "examples" / "laptops_wifi.toml")  # 4 laptops on Wi-Fi, Llama 2-13B fp16
PI5 = load_config(REPO_ROOT / "examples" / "qwen3_moe_pi5.toml")  # Qwen3-30B-A3B on four Pi 5 boards
DECODE = Workload("decode", seq_len=128, kv_len=128, weight_bits=16, activation_bits=16)
REL = 1e-12  # two ways of writing the same float64 arithmetic


@pytest.fixture(scope="module")
def registry():
    return load_all()


def fake(latency_s: float, **parts) -> SchemeResult:
    """A hand-made scheme result (only the fields speculative.py reads)."""
    return SchemeResult("fake", "none", "decode", latency_s, **parts)


# ---- Speculation's checks ----------------------------------------------------------------------------------
def test_an_unknown_placement_names_the_field_and_the_allowed_values():
    with pytest.raises(WorkbenchError, match=r"^unknown placement 'cloud'; allowed: root, own, ring$"):
        sp.Speculation(placement="cloud", alpha=0.5)


@pytest.mark.parametrize("kwargs", [{}, {"alpha": 0.5, "accepted_lengths": (1.0,)}])
def test_speculation_needs_exactly_one_acceptance_model(kwargs):
    with pytest.raises(WorkbenchError, match=r"^speculation needs exactly one acceptance model: alpha or "
                                             r"accepted_lengths$"):
        sp.Speculation(**kwargs)


def test_accepted_lengths_are_stored_as_a_tuple_of_floats():
    spec = sp.Speculation(accepted_lengths=[0, 1])  # integers from a TOML array
    assert spec.accepted_lengths == (0.0, 1.0)
    assert isinstance(spec.accepted_lengths, tuple) and all(type(p) is float for p in spec.accepted_lengths)
    assert hash(spec) == hash(sp.Speculation(accepted_lengths=(0.0, 1.0)))  # frozen and hashable: a tuple


@pytest.mark.parametrize("missing", ["device", "link"])
def test_placement_own_needs_both_the_device_and_the_link(missing):
    parts = {"device": LAPTOPS.cluster.devices[0], "link": LAPTOPS.cluster.topology.link}
    parts[missing] = None
    with pytest.raises(WorkbenchError, match=r"^placement 'own' needs the draft's device and its link to the root$"):
        sp.Speculation(placement="own", alpha=0.5, **parts)
    # the other placements need neither
    assert sp.Speculation(placement="root", alpha=0.5, **parts).placement == "root"


# ---- accepted-length distributions ---------------------------------------------------------------------------
@pytest.mark.parametrize("lengths", [[1.0], [0.0, 1.0], [0, 1], (0.25, 0.75)])
def test_valid_length_distributions_pass(lengths):
    """One entry, a zero probability and integer entries are all fine."""
    sp.check_lengths(lengths)


@pytest.mark.parametrize("lengths", [[], [float("nan"), 1.0], [None, 1.0], [-0.5, 1.5], [0.5, 0.4]])
def test_bad_length_distributions_are_one_line(lengths):
    """Empty, NaN (whose sum also slips past the sum test), a missing entry, a negative entry that still sums to 1."""
    with pytest.raises(WorkbenchError, match=r"^accepted_lengths must be probabilities >= 0 that sum to 1, got "):
        sp.check_lengths(lengths)


# ---- the acceptance model --------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [1.0, 1.5, -0.25, None])
def test_expected_tokens_takes_alpha_in_0_1_only(alpha):
    """alpha = 1 would divide by zero; 1.5 would give a negative count; None is no acceptance model at all."""
    with pytest.raises(WorkbenchError, match=rf"^alpha must be a number in \[0, 1\), got {alpha!r}$"):
        sp.expected_tokens(4, alpha)


def test_expected_tokens_names_gamma():
    with pytest.raises(WorkbenchError, match=r"^gamma must be an integer >= 1, got 0$"):
        sp.expected_tokens(0, 0.5)


def test_expected_tokens_just_below_alpha_1_approach_gamma_plus_1():
    assert sp.expected_tokens(4, 0.999) == pytest.approx(5 - 10 * 0.001, rel=1e-4)  # 5 - (1+2+3+4) (1 - alpha)


def test_a_monte_carlo_is_reproducible_by_its_seed():
    one = sp.simulate_tokens(8, 10_000, seed=11, alpha=0.9)
    assert sp.simulate_tokens(8, 10_000, seed=11, alpha=0.9) == pytest.approx(one, rel=1e-12)
    assert sp.simulate_tokens(8, 10_000, seed=12, alpha=0.9) != pytest.approx(one, rel=1e-12)


def test_a_monte_carlo_of_lengths_normalises_counts():
    """Counts (here 1 and 3 steps of 0 and 1 accepted tokens) are a distribution once divided by their sum."""
    mean = sp.simulate_tokens(1, 40_000, seed=5, accepted_lengths=[1, 3])
    assert mean == pytest.approx(1 + 0.75, abs=0.02)


def test_alpha_from_tokens_takes_the_closed_lower_end_and_refuses_the_upper():
    assert sp.alpha_from_tokens(1.0, 4) == pytest.approx(0.0, abs=1e-12)  # one token a step: nothing accepted
    top = sp.expected_tokens(4, 1.0 - 1e-12)
    with pytest.raises(WorkbenchError, match=r"^tokens per step must lie in \[1, 5\), got "):
        sp.alpha_from_tokens(top, 4)


def test_alpha_from_accept_fraction_names_what_is_out_of_range():
    with pytest.raises(WorkbenchError, match=r"^accept fraction must lie in \[0, 1\), got 1\.2$"):
        sp.alpha_from_accept_fraction(1.2, 4)


def test_the_acceptance_table_converts_each_metric_by_its_own_rule(tmp_path, monkeypatch):
    """A hand-made table: an accept fraction with gamma, a mean with gamma, a mean without, an alpha row."""
    csv = tmp_path / "acceptance.csv"
    # accept fraction 0.5 at gamma 2: (alpha + alpha^2) / 2 = 0.5 -> alpha = (sqrt(5) - 1) / 2
    # 1.75 tokens at gamma 2: 1 + alpha + alpha^2 = 1.75 -> alpha = 0.5; a mean of 2.5 alone: alpha >= 0.6
    csv.write_text("draft,target,task,gamma,metric,value,kind,source\n"
                   "a,b,t,2,draft_accept_fraction,0.5,quoted,s\n"
                   "a,b,t,2,mean_tokens_per_step,1.75,quoted,s\n"
                   "a,b,t,,mean_tokens_per_step,2.5,quoted,s\n"
                   "a,b,t,3,alpha,0.4,quoted,s\n")
    monkeypatch.setattr(sp, "ACCEPTANCE_CSV", csv)
    table = sp.acceptance_table()
    assert table.implied_alpha.iloc[0] == pytest.approx((5 ** 0.5 - 1) / 2, abs=1e-9)
    assert table.implied_alpha.iloc[1] == pytest.approx(0.5, abs=1e-9)
    assert np.isnan(table.implied_alpha.iloc[2]) and np.isnan(table.implied_alpha.iloc[3])
    assert table.alpha_at_least.dtype == np.float64
    assert table.alpha_at_least.iloc[2] == pytest.approx(0.6, abs=1e-12)
    assert table.alpha_at_least.iloc[1] == pytest.approx(1 - 1 / 1.75, abs=1e-12)
    assert np.isnan(table.alpha_at_least.iloc[0]) and np.isnan(table.alpha_at_least.iloc[3])


def test_the_verify_union_follows_the_routing_it_is_given():
    n, k, gamma = 128, 8, 4
    uniform = n * (1 - (1 - k / n) ** (gamma + 1))
    assert sp.expected_verify_experts(n, k, gamma) == pytest.approx(uniform, rel=1e-9)
    skewed = sp.expected_verify_experts(n, k, gamma, Routing("skewed", skew=1.0))
    assert skewed == pytest.approx(float(expected_distinct(Routing("skewed", skew=1.0), n, k, gamma + 1)), rel=1e-12)
    assert skewed < uniform - 1  # popular experts are shared more often


def test_a_verify_workload_of_prefill_is_one_line():
    with pytest.raises(WorkbenchError, match=r"^speculation applies to decode, got phase 'prefill'$"):
        sp.verify_workload(Workload("prefill", 64, 64), 4)


# ---- expert misses -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("routing", [Routing("uniform"), Routing("skewed", skew=1.0)])
@pytest.mark.parametrize("shared", [0, 2])
def test_expert_misses_are_the_ffn_rows_memory_times_the_experts_beyond_one_token(registry, routing, shared):
    """dllama_allgather_tp carries its operator rows: the misses are layers x (ffn1 + ffn2 memory seconds) x
    (union of 5 tokens - one token's experts) / union of 5 tokens, shared experts counted in both."""
    qwen = PI5.model
    model = replace(qwen, n_shared_experts=shared) if shared else qwen  # a hypothetical Qwen3 with shared experts
    verify = sp.verify_workload(replace(PI5.workload("decode"), routing=routing), 4)
    result = registry["dllama_allgather_tp"][1](qwen, PI5.cluster, verify)
    rows = {r.operator.name: float(r.part("memory")) for r in result.operators.rows}
    n, k = qwen.n_experts, qwen.n_active_experts
    union = (n * (1 - (1 - k / n) ** 5) if routing.kind == "uniform"
             else float(expected_distinct(routing, n, k, 5))) + shared
    want = result.operators.layers * (rows["ffn1"] + rows["ffn2"]) * (union - (k + shared)) / union
    assert rows["ffn1"] > 0 and rows["ffn2"] > 0 and rows["qkv"] > 0
    assert sp.expert_misses(result, model, verify) == pytest.approx(want, rel=1e-9)
    # a one-token step streams nothing beyond one token's experts
    assert sp.expert_misses(result, model, PI5.workload("decode")) == pytest.approx(0.0, abs=1e-15)


def test_expert_misses_of_a_dense_target_are_0_and_of_a_scheme_without_rows_n_a(registry):
    verify = sp.verify_workload(PI5.workload("decode"), 4)
    result = registry["dllama_allgather_tp"][1](PI5.model, PI5.cluster, verify)
    assert sp.expert_misses(result, get_model("Llama 2-7B"), verify) == 0.0
    assert math.isnan(sp.expert_misses(fake(1.0), PI5.model, verify))  # unknown is n/a, never 0


def test_storage_misses_are_the_verify_steps_extra_stall_only():
    assert sp.storage_misses(fake(5.0, io_stall_s=3.0), fake(2.0, io_stall_s=1.0), PI5.model) == pytest.approx(2.0, rel=1e-12)
    assert sp.storage_misses(fake(5.0, io_stall_s=1.0), fake(2.0, io_stall_s=3.0), PI5.model) == 0.0
    assert sp.storage_misses(fake(5.0, io_stall_s=3.0), fake(2.0, io_stall_s=1.0), get_model("Llama 2-7B")) == 0.0


# ---- the draft ----------------------------------------------------------------------------------------------------
def test_the_draft_runs_on_the_first_device_unless_it_has_its_own():
    first, second = load_device("hepti_rpi4"), load_device("a100")
    cluster = Cluster((first, second), Topology("switch", 2, LAPTOPS.cluster.topology.link))
    assert sp.draft_device(sp.Speculation(alpha=0.5), cluster) is first
    own = sp.Speculation(alpha=0.5, placement="own", device=second, link=LAPTOPS.cluster.topology.link)
    assert sp.draft_device(own, Cluster((first,), Topology("direct", 1, LAPTOPS.cluster.topology.link))) is second


def test_draft_bytes_are_weights_plus_its_cache_at_the_cache_width():
    draft = get_model("Llama 2-3B")
    work = Workload("decode", 256, 256, weight_bits=4, activation_bits=8)  # an 8-bit cache
    weights = draft.weight_bytes(4)
    cache = draft.n_layers * 2 * 256 * draft.kv_dim * 1  # K and V, 1 byte each
    assert sp.draft_bytes(draft, work) == pytest.approx(weights + cache, rel=REL)
    assert sp.draft_bytes(draft, work) == pytest.approx(draft.weight_bytes(4) + draft.kv_cache_bytes(256, 8), rel=REL)


def test_a_draft_as_large_as_the_target_is_refused_with_both_sizes():
    spec = sp.Speculation("Llama 2-13B", alpha=0.5)
    size = get_model("Llama 2-13B").total_params() / 1e9
    with pytest.raises(WorkbenchError, match=rf"^draft Llama 2-13B \({size:.3g}B parameters\) must be smaller than "
                                             rf"the target Llama 2-13B \({size:.3g}B\)$"):
        sp.check_draft(spec, LAPTOPS.model, LAPTOPS.cluster, DECODE)


def test_a_draft_that_exactly_fills_its_device_fits_and_one_byte_more_does_not():
    draft = get_model("Llama 2-3B")
    need = sp.draft_bytes(draft, DECODE)
    board = LAPTOPS.cluster.devices[0]
    exact = replace(board, memory=(replace(board.memory[-1], capacity_bytes=need),))
    assert exact.memory_bytes == pytest.approx(need, rel=1e-12)
    link = LAPTOPS.cluster.topology.link
    sp.check_draft(sp.Speculation("Llama 2-3B", "own", 4, 0.5, device=exact, link=link), LAPTOPS.model,
                   LAPTOPS.cluster, DECODE)
    short = replace(board, memory=(replace(board.memory[-1], capacity_bytes=need - 2**20),))
    gib = 2**30
    with pytest.raises(WorkbenchError, match=rf"^infeasible: draft Llama 2-3B needs {need / gib:.3g} GiB, more than "
                                             rf"its device .* holds \({(need - 2**20) / gib:.3g} GiB\)$"):
        sp.check_draft(sp.Speculation("Llama 2-3B", "own", 4, 0.5, device=short, link=link), LAPTOPS.model,
                       LAPTOPS.cluster, DECODE)


def test_a_draft_forward_is_one_token_whatever_the_workloads_verify_tokens(registry):
    spec = sp.Speculation("Llama 2-3B", alpha=0.5)
    evaluator = registry[sp.DRAFT_SCHEME][1]
    one = sp.draft_step_time(spec, LAPTOPS.cluster, DECODE, evaluator)
    assert sp.draft_step_time(spec, LAPTOPS.cluster, replace(DECODE, verify_tokens=5), evaluator) == \
        pytest.approx(one, rel=REL)
    alone = Cluster((LAPTOPS.cluster.devices[0],), Topology("direct", 1, LAPTOPS.cluster.topology.link))
    assert one == pytest.approx(evaluator(get_model("Llama 2-3B"), alone, DECODE).latency_s, rel=REL)


def test_an_own_draft_waits_for_each_messages_overhead():
    link = Link(1e8, 2e-3, message_overhead_s=5e-3, name="slow endpoints")
    spec = sp.Speculation(alpha=0.5, gamma=3, placement="own", device=LAPTOPS.cluster.devices[0], link=link)
    # 12 bytes out, 2 ids (8 bytes) back: each 2 ms of wire latency, 5 ms of endpoint time and its bytes
    want = (2e-3 + 5e-3 + 12 / 1e8) + (2e-3 + 5e-3 + 8 / 1e8)
    assert sp.handoff_time(spec, LAPTOPS.cluster, 2.0) == pytest.approx(want, rel=1e-9)


def test_a_two_device_ring_relays_its_commands_over_one_hop():
    link = Link(1e8, 2e-3, message_overhead_s=5e-3)
    two = Cluster(LAPTOPS.cluster.devices[:2], Topology("ring", 2, link))
    spec = sp.Speculation(alpha=0.5, placement="ring")
    assert sp.handoff_time(spec, two, 1.0) == pytest.approx(5 * 1 * (5e-3 + 25 / 1e8), rel=1e-9)
    one = Cluster(LAPTOPS.cluster.devices[:1], Topology("direct", 1, link))
    assert sp.handoff_time(spec, one, 1.0) == 0.0
    assert point_to_point(25, 1e8, 0.0, message_overhead=5e-3) == pytest.approx(5e-3 + 25 / 1e8, rel=1e-9)


# ---- per token --------------------------------------------------------------------------------------------------
def test_per_token_divides_each_part_of_a_hand_made_step():
    step = sp.VerifyStep("s", 4, plain_s=1.0, draft_s=0.2, verify_s=0.9, collectives_s=0.3, experts_s=0.2, oom=True)
    cost = sp.per_token(step, sp.Speculation(alpha=0.5), LAPTOPS.cluster, 2.5)
    assert (cost.scheme, cost.gamma) == ("s", 4)
    assert cost.tokens_per_step == pytest.approx(2.5, rel=1e-12)
    assert cost.draft_s == pytest.approx(0.08, rel=1e-12)
    assert cost.verify_compute_s == pytest.approx(0.24, rel=1e-12)  # (0.9 - 0.3) / 2.5
    assert cost.verify_experts_s == pytest.approx(0.08, rel=1e-12)
    assert cost.communication_s == pytest.approx(0.12, rel=1e-12)
    assert cost.extra["verify_s"] == pytest.approx(0.9, rel=1e-12) and cost.extra["oom"] is True
    assert list(cost.row())[:9] == ["scheme", "gamma", "tokens_per_step", "plain_s", "per_token_s", "speedup",
                                    "draft_s", "verify_compute_s", "verify_experts_s"]
    assert {"communication_s", "losing_part"} <= set(cost.row())
    assert cost.row()["losing_part"] == "verify compute" and cost.row()["per_token_s"] == pytest.approx(0.44, rel=1e-12)


# ---- a verify step under a scheme --------------------------------------------------------------------------------
def test_a_verify_step_takes_the_plain_result_it_is_given(registry):
    """pipeline_offload fits the laptops (no OOM): a given plain result's OOM alone marks the step."""
    spec = sp.Speculation(alpha=0.5)
    given = fake(7.0, peak_memory_bytes=(2.0,), memory_budget_bytes=(1.0,))  # over its budget: OOM
    assert not registry["pipeline_offload"][1](LAPTOPS.model, LAPTOPS.cluster, sp.verify_workload(DECODE, 4)).oom
    step = sp.verify_step(spec, "pipeline_offload", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, given)
    assert step.plain_s == pytest.approx(7.0, rel=1e-12) and step.oom
    assert step.scheme == "pipeline_offload" and step.gamma == 4
    assert not sp.verify_step(spec, "pipeline_offload", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE).oom
    cost = sp.speculative_cost(spec, "pipeline_offload", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, given)
    assert cost.plain_s == pytest.approx(7.0, rel=1e-12) and cost.extra["oom"]
    best = sp.best_gamma(spec, "pipeline_offload", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, range(1, 3),
                         given)
    assert best.plain_s == pytest.approx(7.0, rel=1e-12)


def test_a_verify_step_that_runs_out_of_memory_marks_the_step(registry):
    """megatron_tp holds Llama 2-13B fp16 in the laptops' memory only past their budget: OOM, whatever plain says."""
    spec = sp.Speculation(alpha=0.5)
    step = sp.verify_step(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, fake(7.0))
    assert step.oom


def test_plain_decode_is_costed_at_one_token_whatever_the_workload_says(registry):
    """A workload that already carries verify_tokens = 3 still compares against a one-token decode."""
    spec = sp.Speculation(alpha=0.5, gamma=2)
    three = replace(DECODE, verify_tokens=3)
    plain = registry["megatron_tp"][1](LAPTOPS.model, LAPTOPS.cluster, DECODE).latency_s
    assert registry["megatron_tp"][1](LAPTOPS.model, LAPTOPS.cluster, three).latency_s > plain * 1.01
    step = sp.verify_step(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, three)
    assert step.plain_s == pytest.approx(plain, rel=REL)
    best = sp.best_gamma(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, three, range(1, 3))
    assert best.plain_s == pytest.approx(plain, rel=REL)
    sweep = sp.alpha_sweep(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, three, [0.5], [2])
    assert sweep.plain_s.iloc[0] == pytest.approx(plain, rel=REL)


def test_a_verify_steps_collectives_are_its_link_latency_and_bytes(registry):
    spec = sp.Speculation(alpha=0.5, gamma=3)
    step = sp.verify_step(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    verify = registry["megatron_tp"][1](LAPTOPS.model, LAPTOPS.cluster, sp.verify_workload(DECODE, 3))
    assert verify.comm_link_latency_s > 0 and verify.comm_bytes_s > 0
    assert step.collectives_s == pytest.approx(verify.comm_link_latency_s + verify.comm_bytes_s, rel=REL)
    assert step.verify_s == pytest.approx(verify.latency_s, rel=REL) and step.oom == verify.oom


def test_a_moe_verify_step_counts_its_expert_misses(registry):
    spec = sp.Speculation(alpha=0.5, gamma=4)
    work = PI5.workload("decode")
    step = sp.verify_step(spec, "dllama_allgather_tp", registry, PI5.model, PI5.cluster, work)
    verify = registry["dllama_allgather_tp"][1](PI5.model, PI5.cluster, sp.verify_workload(work, 4))
    want = sp.expert_misses(verify, PI5.model, sp.verify_workload(work, 4))
    assert want > 0 and step.experts_s == pytest.approx(want, rel=REL)


def test_a_speculative_cost_uses_the_accepted_length_distribution(registry):
    spec = sp.Speculation(accepted_lengths=(0.5, 0.25, 0.25), gamma=2)  # 1, 2 or 3 tokens a step
    cost = sp.speculative_cost(spec, "local", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    assert cost.tokens_per_step == pytest.approx(0.5 + 0.5 + 0.75, rel=1e-12)


# ---- sweeps ------------------------------------------------------------------------------------------------------
def test_the_alpha_sweep_costs_every_gamma_from_1_to_16_by_default(registry):
    spec = sp.Speculation("Llama 2-3B", alpha=0.5)
    sweep = sp.alpha_sweep(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, [0.3, 0.8])
    assert list(sweep.gamma) == [g for g in range(1, 17) for _ in (0, 1)]
    assert list(sweep.alpha) == [0.3, 0.8] * 16
    assert list(sweep.columns) == ["alpha", *sp.SpeculativeCost("s", 1, 1, 1, 1, 1, 0, 0).row()]
    for g, a in ((1, 0.3), (7, 0.8), (16, 0.8)):
        row = sweep[(sweep.gamma == g) & (sweep.alpha == a)].iloc[0]
        cost = sp.speculative_cost(replace(spec, gamma=g, alpha=a), "megatron_tp", registry, LAPTOPS.model,
                                   LAPTOPS.cluster, DECODE)
        assert row.per_token_s == pytest.approx(cost.per_token_s, rel=REL)
        assert row.tokens_per_step == pytest.approx(sp.expected_tokens(g, a), rel=REL)
        assert row.communication_s == pytest.approx(cost.communication_s, rel=REL)


def test_the_alpha_sweep_carries_the_rings_kv_cache_commands(registry):
    spec = sp.Speculation("Llama 2-3B", "ring", alpha=0.5)
    sweep = sp.alpha_sweep(spec, "pipeline_offload", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, [0.5], [3])
    cost = sp.speculative_cost(replace(spec, gamma=3), "pipeline_offload", registry, LAPTOPS.model, LAPTOPS.cluster,
                               DECODE)
    assert sweep.communication_s.iloc[0] == pytest.approx(cost.communication_s, rel=REL)
    assert sp.handoff_time(spec, LAPTOPS.cluster, 1.0) > 0


def test_the_alpha_sweep_carries_the_own_placements_hand_off(registry):
    link = Link(1e8, 2e-3, message_overhead_s=1e-3)
    spec = sp.Speculation(alpha=0.5, placement="own", device=LAPTOPS.cluster.devices[0], link=link)
    sweep = sp.alpha_sweep(spec, "local", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, [0.5], [3])
    tokens = sp.expected_tokens(3, 0.5)
    want = sp.handoff_time(replace(spec, gamma=3), LAPTOPS.cluster, tokens - 1) / tokens
    assert sweep.communication_s.iloc[0] == pytest.approx(want, rel=REL) and want > 0


@pytest.mark.parametrize(("alpha", "gamma"), [(0.05, 1), (0.99, 16)])
def test_best_gamma_searches_1_to_16_by_default(registry, alpha, gamma):
    """Megatron TP over Wi-Fi: at alpha 0.05 one drafted token is best, at 0.99 the verify's cost hardly grows
    with its tokens and the largest gamma tried wins (19 would win if 1..19 were tried)."""
    spec = sp.Speculation("Llama 2-3B", alpha=alpha)
    best = sp.best_gamma(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    assert best.gamma == gamma


def test_best_over_gamma_takes_the_least_time_and_the_smaller_gamma_of_equals():
    sweep = pd.DataFrame({"alpha": [0.9, 0.9, 0.5, 0.5, 0.5], "gamma": [2, 1, 3, 2, 1],
                          "per_token_s": [1.0, 3.0, 2.0, 2.0, 4.0]})
    best = sp.best_over_gamma(sweep)
    assert list(best.alpha) == [0.5, 0.9] and list(best.gamma) == [2, 2] and list(best.index) == [0, 1]
    assert list(best.columns) == ["alpha", "gamma", "per_token_s"]  # the old index is dropped, not a column
    by_both = sp.best_over_gamma(sweep.assign(latency_s=[1, 1, 1, 2, 2]), by=("alpha", "latency_s"))
    assert list(by_both.gamma) == [3, 2, 2]  # (0.5, 1) has only gamma 3


def test_with_link_latency_changes_only_the_latency():
    cluster = sp.with_link_latency(LAPTOPS.cluster, 0.125)
    link = LAPTOPS.cluster.topology.link
    assert cluster.topology.link == replace(link, latency_s=0.125)
    assert cluster.topology.link.bandwidth_bytes_per_s == link.bandwidth_bytes_per_s
    assert cluster.devices == LAPTOPS.cluster.devices and cluster.topology.kind == LAPTOPS.cluster.topology.kind


def test_the_regime_map_is_the_best_gamma_at_each_latency(registry):
    spec = sp.Speculation("Llama 2-3B", alpha=0.5)
    regimes = sp.regime_map(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, [0.05, 0.99],
                            [1e-4, 5e-2])
    assert list(regimes.latency_s) == [1e-4, 1e-4, 5e-2, 5e-2] and list(regimes.alpha) == [0.05, 0.99, 0.05, 0.99]
    # on a fast link a verify of many tokens costs more than it saves; on a slow one the latency dominates and the
    # largest gamma of the default range wins: both ends of 1..16 are reached
    assert list(regimes.gamma) == [1, 2, 1, 16]
    assert list(regimes.index) == [0, 1, 2, 3]
    for _, row in regimes.iterrows():
        cluster = sp.with_link_latency(LAPTOPS.cluster, row.latency_s)
        best = sp.best_gamma(replace(spec, alpha=row.alpha), "megatron_tp", registry, LAPTOPS.model, cluster, DECODE)
        assert row.gamma == best.gamma and row.per_token_s == pytest.approx(best.per_token_s, rel=REL)
    capped = sp.regime_map(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE, [0.99], [5e-2],
                           gammas=[1, 2, 3])
    assert list(capped.gamma) == [3]  # the gammas it is given, not the default 1..16
    slow = regimes[regimes.latency_s == 5e-2]
    assert (slow.per_token_s.to_numpy() > regimes[regimes.latency_s == 1e-4].per_token_s.to_numpy()).all()
