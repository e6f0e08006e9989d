"""Speculative decoding's cost (`workbench.scenarios.speculative`): the acceptance model against a Monte-Carlo, a verify
step as the registered scheme's decode of gamma + 1 tokens, the parts of a step, best gamma and bad input."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.machine.network import Link, point_to_point
from workbench.model.routing import UNIFORM
from workbench.scenarios import speculative as sp
from workbench.scenarios.userconfig import load_config
from workbench.schemes.base import Workload, load_all

LAPTOPS = load_config(REPO_ROOT / "examples" / "laptops_wifi.toml")  # 4 laptops on Wi-Fi, Llama 2-13B fp16
DECODE = Workload("decode", seq_len=128, kv_len=128, weight_bits=16, activation_bits=16)


@pytest.fixture(scope="module")
def registry():
    return load_all()


# ---- the acceptance model -------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_expected_tokens_match_a_monte_carlo_of_iid_acceptance_within_1_percent(alpha, gamma):
    exact = sp.expected_tokens(gamma, alpha)
    assert sp.simulate_tokens(gamma, 200_000, seed=gamma, alpha=alpha) == pytest.approx(exact, rel=0.01)


@pytest.mark.parametrize("gamma", [1, 2, 3, 5])
def test_expected_tokens_match_a_monte_carlo_of_a_given_accepted_length_distribution(gamma):
    lengths = [0.2, 0.1, 0.3, 0.15, 0.25]  # P(0..3 accepted), P(>= 4)
    exact = sp.expected_tokens(gamma, accepted_lengths=lengths)
    assert sp.simulate_tokens(gamma, 200_000, seed=7, accepted_lengths=lengths) == pytest.approx(exact, rel=0.01)
    assert exact == pytest.approx(sum(p * (min(k, gamma) + 1) for k, p in enumerate(lengths)))


def test_the_iid_formula_is_the_geometric_distribution_of_accepted_lengths():
    alpha, gamma = 0.7, 5
    geometric = [alpha ** k * (1 - alpha) for k in range(gamma)] + [alpha ** gamma]
    assert sp.expected_tokens(gamma, alpha) == pytest.approx(sp.expected_tokens(gamma, accepted_lengths=geometric))
    assert sp.expected_tokens(gamma, 0.0) == 1.0
    assert sp.expected_tokens(3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)


def test_the_routing_union_of_a_verify_step_matches_a_simulated_routing_trace():
    """A MoE verify step streams the distinct experts of gamma + 1 tokens: n (1 - (1 - k/n)^(gamma+1))."""
    rng = np.random.default_rng(3)
    n, k = 128, 8  # Qwen3-30B-A3B's router: 128 experts, 8 active (its config.json)
    previous = 0.0
    for gamma in (1, 2, 4, 8, 16):
        trace = [len({e for _ in range(gamma + 1) for e in rng.choice(n, size=k, replace=False)}) for _ in range(4000)]
        expected = sp.expected_verify_experts(n, k, gamma, UNIFORM)
        assert np.mean(trace) == pytest.approx(expected, rel=0.01)
        assert expected > previous
        previous = expected


# ---- a verify step under a scheme -------------------------------------------------------------------------
def test_a_verify_workload_is_a_decode_of_gamma_plus_one_tokens_attending_kv_len_plus_gamma():
    verify = sp.verify_workload(DECODE, 4)
    assert (verify.new_tokens, verify.attended, verify.phase) == (5, 132, "decode")
    assert DECODE.new_tokens == 1
    with pytest.raises(WorkbenchError, match="decode only"):
        Workload("prefill", verify_tokens=2)
    with pytest.raises(WorkbenchError, match="verify_tokens must be an integer >= 1"):
        Workload("decode", verify_tokens=0)


def test_every_scheme_either_costs_a_multi_token_verify_or_says_n_a(registry):
    """A scheme whose spec verifies several tokens must cost 5 tokens above 1; one whose spec says why its decode
    carries one token (`SchemeSpec.single_token`) ignores the count, says n/a."""
    from workbench.model.models import get_model
    from workbench.schemes.base import spec_of

    for name, (_, fn) in registry.items():
        spec = spec_of(name)
        model = LAPTOPS.model if spec.dense else get_model("Qwen3-30B-A3B")  # a MoE-only scheme's own kind
        decode = DECODE if spec.engine != "distributed-llama" else \
            replace(DECODE, weight_bits=4.5, weight_format="q4_0")  # it has no f16 weight kernel: its Q40
        one = fn(model, LAPTOPS.cluster, decode).latency_s
        five = fn(model, LAPTOPS.cluster, replace(decode, verify_tokens=5)).latency_s
        if not spec.multi_token:  # its backbone ignores the count (the head's gamma + 1 logits aside)
            backbone = [fn(model, LAPTOPS.cluster, replace(decode, output_head=False, verify_tokens=t)).latency_s
                        for t in (1, 5)]
            assert backbone[1] == backbone[0], f"{name} now costs multi-token decode: drop its single_token reason"
            with pytest.raises(WorkbenchError, match="^n/a: "):
                sp.verify_result(name, fn, model, LAPTOPS.cluster, DECODE, 4)
        else:
            assert five > one, f"{name} ignores Workload.verify_tokens: register it with single_token=<why>"


def test_a_step_is_gamma_draft_forwards_plus_one_verify_over_the_expected_tokens(registry):
    spec = sp.Speculation("Llama 2-3B", "root", 4, 0.8)
    cost = sp.speculative_cost(spec, "local", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    local = registry["local"][1]
    verify = local(LAPTOPS.model, LAPTOPS.cluster, replace(DECODE, kv_len=132, verify_tokens=5)).latency_s
    draft = sp.draft_step_time(spec, LAPTOPS.cluster, DECODE, registry["single_device_resident"][1])
    tokens = (1 - 0.8 ** 5) / 0.2
    assert cost.tokens_per_step == pytest.approx(tokens)
    assert cost.per_token_s == pytest.approx((4 * draft + verify) / tokens)
    assert cost.plain_s == local(LAPTOPS.model, LAPTOPS.cluster, DECODE).latency_s
    assert cost.speedup == pytest.approx(cost.plain_s / cost.per_token_s)
    assert draft > 0 and cost.verify_experts_s == 0.0 and cost.communication_s == 0.0


def test_with_no_acceptance_speculation_only_loses(registry):
    spec = sp.Speculation(sp.NGRAM, "root", 3, 0.0)
    for scheme in ("local", "megatron_tp", "pipeline_offload"):
        cost = sp.speculative_cost(spec, scheme, registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
        assert cost.draft_s == 0.0 and cost.tokens_per_step == 1.0 and cost.speedup < 1.0


def test_a_draft_on_its_own_device_waits_for_two_messages_a_step(registry):
    link = Link.from_mbps(100, 20.0)
    device = LAPTOPS.cluster.devices[0]
    spec = sp.Speculation("Llama 2-3B", "own", 4, 0.6, device=device, link=link)
    root = sp.speculative_cost(replace(spec, placement="root", device=None, link=None), "local", registry,
                               LAPTOPS.model, LAPTOPS.cluster, DECODE)
    own = sp.speculative_cost(spec, "local", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    accepted = own.tokens_per_step - 1
    wire = (point_to_point(16, link.bandwidth_bytes_per_s, link.latency_s)
            + point_to_point(accepted * 4, link.bandwidth_bytes_per_s, link.latency_s))
    assert own.communication_s == pytest.approx(wire / own.tokens_per_step)
    assert own.per_token_s == pytest.approx(root.per_token_s + own.communication_s)


def test_the_ring_placement_is_prima_cpps_and_relays_its_kv_cache_commands(registry):
    spec = sp.Speculation("Llama 2-3B", "ring", 4, 0.7)
    with pytest.raises(WorkbenchError, match="^n/a: placement 'ring'"):
        sp.speculative_cost(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    slow = replace(LAPTOPS.cluster.topology, link=replace(LAPTOPS.cluster.topology.link, message_overhead_s=1e-3))
    cluster = replace(LAPTOPS.cluster, topology=slow)
    ring = sp.speculative_cost(spec, "pipeline_offload", registry, LAPTOPS.model, cluster, DECODE)
    root = sp.speculative_cost(replace(spec, placement="root"), "pipeline_offload", registry, LAPTOPS.model,
                               cluster, DECODE)
    link = slow.link  # five commands relayed over three hops, each a message of 25 bytes (its wire latency overlapped)
    relays = 5 * 3 * point_to_point(25, link.bandwidth_bytes_per_s, 0.0, message_overhead=1e-3)
    assert relays > 5 * 3 * 1e-3
    assert (ring.communication_s - root.communication_s) * ring.tokens_per_step == pytest.approx(relays, rel=0.01)


def test_best_gamma_is_the_least_time_per_token_of_1_to_16(registry):
    spec = sp.Speculation("Llama 2-3B", "root", 1, 0.8)
    best = sp.best_gamma(spec, "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    every = [sp.speculative_cost(replace(spec, gamma=g), "megatron_tp", registry, LAPTOPS.model, LAPTOPS.cluster,
                                 DECODE).per_token_s for g in range(1, 17)]
    assert best.per_token_s == min(every) and best.gamma == 1 + every.index(min(every))
    assert 1 < best.gamma < 16  # a trade-off, not an edge of the range


# ---- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gamma": 0}, "gamma must be an integer >= 1"),
    ({"alpha": 1.0}, r"alpha must be a number in \[0, 1\)"),
    ({"alpha": -0.1}, r"alpha must be a number in \[0, 1\)"),
    ({"placement": "cloud"}, "placement"),
    ({"alpha": None, "accepted_lengths": [0.5, 0.6]}, "sum to 1"),
    ({"draft": "GPT-5"}, "unknown model"),
])
def test_bad_speculation_input_is_one_line(kwargs, message):
    with pytest.raises(WorkbenchError, match=message) as err:
        sp.Speculation(**{"draft": "Llama 2-7B", "alpha": 0.7, **kwargs})
    assert "\n" not in str(err.value)


def test_a_draft_larger_than_the_target_or_its_device_is_one_line(registry):
    larger = sp.Speculation("Llama 2-70B", "root", 4, 0.7)
    with pytest.raises(WorkbenchError, match="must be smaller than the target"):
        sp.speculative_cost(larger, "local", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    board = LAPTOPS.cluster.devices[0]
    small = replace(board, memory=(replace(board.memory[-1], capacity_bytes=2 * 2**30),))
    spec = sp.Speculation("Llama 2-7B", "own", 4, 0.7, device=small, link=LAPTOPS.cluster.topology.link)
    with pytest.raises(WorkbenchError, match="^infeasible: draft Llama 2-7B needs .* GiB, more than its device"):
        sp.speculative_cost(spec, "local", registry, LAPTOPS.model, LAPTOPS.cluster, DECODE)
    assert isinstance(small, DeviceSpec) and isinstance(small.memory[-1], MemoryLevel)


# ---- quoted acceptance rates --------------------------------------------------------------------------------
def test_every_quoted_acceptance_rate_has_a_kind_and_a_source():
    table = sp.acceptance_table()
    assert len(table) >= 10 and set(table.kind) == {"quoted"}
    assert table.source.str.len().min() > 20
    assert set(table.metric) <= {"draft_accept_fraction", "mean_tokens_per_step", "alpha"}
    with_gamma = table.dropna(subset=["gamma"])
    assert with_gamma.implied_alpha.between(0, 1).all() and len(with_gamma) >= 2


def test_alpha_conversions_invert_the_acceptance_model():
    for alpha, gamma in ((0.3, 2), (0.7, 5), (0.9, 16)):
        tokens = sp.expected_tokens(gamma, alpha)
        assert sp.alpha_from_tokens(tokens, gamma) == pytest.approx(alpha, abs=1e-9)
        assert sp.alpha_from_accept_fraction((tokens - 1) / gamma, gamma) == pytest.approx(alpha, abs=1e-9)
    with pytest.raises(WorkbenchError, match="tokens per step must lie in"):
        sp.alpha_from_tokens(7.0, 4)  # more than gamma + 1


def test_a_mean_accepted_length_bounds_alpha_from_below():
    table = sp.acceptance_table()
    rows = table[table.metric == "mean_tokens_per_step"]
    for tau, least in zip(rows.value, rows.alpha_at_least):
        assert sp.expected_tokens(16, least) < tau  # at alpha_at_least even gamma = 16 falls short of tau
        assert sp.alpha_from_tokens(tau, 16) > least


# ---- the user's side: [speculative] in a deployment TOML and whatif ------------------------------------------
def deployment(speculative: str) -> str:
    return (REPO_ROOT / "examples" / "laptops_wifi.toml").read_text() + "\n[speculative]\n" + speculative


def test_a_speculative_table_reads_into_the_deployment():
    from workbench.scenarios.userconfig import config_from_text

    config = config_from_text(deployment('draft = "Llama 2-3B"\ngamma = 5\nalpha = 0.7\n'))
    assert config.speculation == sp.Speculation("Llama 2-3B", "root", 5, 0.7)
    lengths = config_from_text(deployment('draft = "ngram"\naccepted_lengths = [0.5, 0.3, 0.2]\n')).speculation
    assert lengths.accepted_lengths == (0.5, 0.3, 0.2) and lengths.gamma == 4
    own = config_from_text(deployment('draft = "Llama 2-3B"\nplacement = "own"\ndraft_device = "tpi_mac_pro_m1"\n'
                                      'alpha = 0.5\n')).speculation
    assert own.device.name and own.link == LAPTOPS.cluster.topology.link


@pytest.mark.parametrize(("body", "message"), [
    ('draft = "Llama 2-3B"\ngamma = 0\nalpha = 0.7', r"speculative\.gamma must be an integer in \[1, 64\], got 0"),
    ('draft = "Llama 2-3B"\nalpha = 1.0', r"speculative\.alpha must be a number >= 0 and < 1, got 1\.0"),
    ('draft = "Llama 2-3B"\nalpha = -0.1', r"speculative\.alpha must be a number >= 0 and < 1, got -0\.1"),
    ('draft = "Llama 2-70B"\nalpha = 0.5', r"\[speculative\] draft Llama 2-70B .* must be smaller than the target"),
    ('draft = "Llama 2-3B"\nplacement = "own"\ndraft_device = "hepti_rpi4"\nalpha = 0.5',
     r"^infeasible: config: \[speculative\] draft Llama 2-3B needs .* GiB, more than its device"),
    ('draft = "ngram"', r"needs exactly one of alpha and accepted_lengths"),
    ('draft = "OPT-L"\nalpha = 0.5', r"^config: \[speculative\] draft OPT-L has a vocabulary of 50272 tokens, the target "
                                    r"Llama 2-13B one of 32000: .* allowed: ngram, .*Llama 2-3B, Llama 2-7B$"),
    ('draft = "ngram"\naccepted_lengths = [0.5, 0.6]',
     r"^config: speculative\.accepted_lengths must be probabilities >= 0 that sum to 1, got \[0\.5, 0\.6\]$"),
    ('draft = "ngram"\naccepted_lengths = [0.5, true]', r"^config: speculative\.accepted_lengths must be a list of"),
    ('draft = "ngram"\nalpha = 0.5\nbeta = 1', r"unknown key speculative\.beta"),
])
def test_bad_speculative_keys_are_one_line_each(body, message):
    from workbench.scenarios.userconfig import config_from_text

    with pytest.raises(WorkbenchError, match=message) as err:
        config_from_text(deployment(body + "\n"))
    assert "\n" not in str(err.value)


def test_whatif_prints_rows_with_and_without_speculation_and_the_best_gamma(tmp_path, capsys):
    import argparse

    from workbench.scenarios import whatif

    path = tmp_path / "laptops_spec.toml"
    path.write_text(deployment('draft = "Llama 2-3B"\ngamma = 4\nalpha = 0.7\n'))
    parser = argparse.ArgumentParser()
    whatif.add_arguments(parser)
    assert whatif.main(parser.parse_args([str(path), "--no-charts"])) == 0
    out = capsys.readouterr().out
    section = out[out.index("speculative decoding: draft Llama 2-3B (root), gamma 4, alpha 0.7"):]
    assert "n/a: TPI-LLM's simulated decode steps carry one token each" in section
    best = [line for line in section.splitlines() if line.startswith("best with speculation: ")]
    assert len(best) == 1 and " at gamma " in best[0] and "x the fastest plain decode" in best[0]
    pipeline = next(line for line in section.splitlines() if line.split() and line.split()[0] == "pipeline_offload")
    assert pipeline.split()[-3].endswith("x")  # its speed-up at gamma 4
    plain = tmp_path / "laptops.toml"
    plain.write_text((REPO_ROOT / "examples" / "laptops_wifi.toml").read_text())
    assert whatif.main(parser.parse_args([str(plain), "--no-charts"])) == 0
    assert "speculative decoding" not in capsys.readouterr().out


def test_a_verify_step_computes_the_logits_of_each_of_its_tokens():
    """gamma + 1 verified tokens need gamma + 1 rows of logits (the output matrix is streamed once): the head's
    FLOPs grow with the verify tokens, its bytes do not."""
    from dataclasses import replace as _replace

    from workbench.machine.hardware import load_device
    from workbench.model.models import get_model
    from workbench.schemes import common
    from workbench.schemes.base import Workload

    model, device = get_model("Llama 3.1-8B"), load_device("a100")
    plain = Workload("decode", 64, 64, 4.5, 16)
    verify = _replace(plain, verify_tokens=5)
    assert common.head_tokens(plain) == 1 and common.head_tokens(verify) == 5
    assert common.head_tokens(Workload("prefill", 64, 64)) == 1
    # an A100 streams the 0.29 GB output matrix slower than it computes 5 rows: the same time as one row
    assert common.lm_head_time(model, device, verify) == common.lm_head_time(model, device, plain)
    # a Cortex-A72 board computes 5 x 1.05 GFLOP slower than it streams the matrix: the rows cost time
    pi = load_device("hepti_rpi4")
    assert common.lm_head_time(model, pi, verify, bound="compute") > 4 * common.lm_head_time(model, pi, plain)


@pytest.mark.parametrize("routing", [dict(kind="uniform"), dict(kind="skewed", skew=1.0),
                                     dict(kind="skewed", skew=0.6, locality=0.4)])
def test_a_moe_verify_step_streams_the_distinct_experts_a_simulated_trace_touches(routing):
    """For a MoE target the verify step of gamma + 1 tokens streams the experts those tokens touch: the FFN rows'
    bytes over one expert's equal the distinct experts of a simulated routing trace (10^5 tokens, windows of
    gamma + 1) within 2 %, and they grow with gamma as that count does."""
    from workbench.model.models import get_model
    from workbench.model.routing import Routing, simulate_routing, simulated_distinct
    from workbench.scenarios.speculative import verify_workload
    from workbench.schemes import common
    from workbench.schemes.base import Workload

    model = get_model("Qwen3-30B-A3B")
    route = Routing(**routing)
    plain = Workload("decode", 256, 256, 4.5, 16, routing=route)
    per_expert = model.d_model * model.d_ff * 4.5 / 8
    trace = simulate_routing(route, model.n_experts, model.n_active_experts, 100_000, seed=3)
    streamed = []
    for gamma in (1, 2, 4, 8):
        rows = {op.name: op for op in common.layer_operators(model, verify_workload(plain, gamma))}
        experts = float(rows["ffn2"].bytes) / per_expert
        assert experts == pytest.approx(simulated_distinct(trace, gamma + 1), rel=0.02)
        streamed.append(experts)
    assert all(b > a for a, b in zip(streamed, streamed[1:]))
    assert streamed[-1] < 9 * model.n_active_experts  # fewer than gamma + 1 tokens' k each: experts are shared


def test_a_moe_target_behind_a_small_expert_cache_loses_to_its_verify_misses():
    """Qwen3-30B-A3B on four Pi 5 boards, 32 of 128 experts cached per layer (moe_layer_pipeline): a verify step
    of 5 tokens reads the misses of their union from storage, so speculation loses and the breakdown names the
    expert misses; with every expert cached the misses are 0."""
    from dataclasses import replace as _replace

    from workbench.core.io import REPO_ROOT
    from workbench.model.routing import ExpertCache
    from workbench.scenarios.userconfig import load_config
    from workbench.schemes.base import load_all

    config = load_config(REPO_ROOT / "examples" / "qwen3_moe_pi5.toml")
    spec = sp.Speculation(sp.NGRAM, "root", 4, 0.7)
    small = _replace(config.workload("decode"), expert_cache=ExpertCache(32))
    cost = sp.speculative_cost(spec, "moe_layer_pipeline", load_all(), config.model, config.cluster, small)
    assert cost.speedup < 1 and cost.losing_part == "verify expert misses" and cost.expert_reads_s > 0
    assert math.isnan(cost.verify_experts_s)  # the reads are known, the streaming beside them is not (no operator rows)
    full = _replace(config.workload("decode"), expert_cache=ExpertCache(128))
    cached = sp.speculative_cost(spec, "moe_layer_pipeline", load_all(), config.model, config.cluster, full)
    assert cached.expert_reads_s == 0.0 and cached.losing_part == "verify compute (expert streaming n/a)"


def test_an_unknown_expert_streaming_is_n_a_with_its_reason_never_zero():
    """Qwen3-30B-A3B on four Pi 5 boards with an n-gram draft: a MoE scheme that attaches no operator rows cannot
    split its verify step's expert streaming out; it is NaN with the reason (it used to read 0 s and name another
    losing part), while dllama_allgather_tp, which carries its rows, gets a number."""
    config = load_config(REPO_ROOT / "examples" / "qwen3_moe_pi5.toml")
    spec, registry, decode = sp.Speculation(sp.NGRAM, "root", 4, 0.7), load_all(), config.workload("decode")
    for scheme in ("moe_expert_parallel", "moe_layer_pipeline", "layerwise_mp"):
        cost = sp.speculative_cost(spec, scheme, registry, config.model, config.cluster, decode)
        assert math.isnan(cost.verify_experts_s) and cost.experts_note == sp.experts_unknown(scheme)
        assert cost.losing_part != "verify compute" and "attaches no operator rows" in sp.losing_reason(cost)
        assert math.isnan(cost.row()["verify_experts_s"]) and cost.row()["experts_note"]
    known = sp.speculative_cost(spec, "dllama_allgather_tp", registry, config.model, config.cluster, decode)
    assert known.verify_experts_s > 0 and known.experts_note == ""
    plain = registry["moe_expert_parallel"][1](config.model, config.cluster, decode)
    assert plain.operators is None and math.isnan(sp.expert_misses(plain, config.model, decode))


def test_a_losing_draft_says_why_from_the_breakdown(registry):
    """dllama_allgather_tp sends each sync once per batch row: a verify step of gamma + 1 = 5 rows pays 5x the per-message
    time of a one-token step, which the reason derives from the two steps' numbers."""
    config = load_config(REPO_ROOT / "examples" / "qwen3_moe_pi5.toml")
    decode = config.workload("decode")
    cost = sp.speculative_cost(sp.Speculation(sp.NGRAM, "root", 4, 0.7), "dllama_allgather_tp", registry, config.model,
                               config.cluster, decode)
    plain = registry["dllama_allgather_tp"][1](config.model, config.cluster, decode)
    verify = sp.verify_result("dllama_allgather_tp", registry["dllama_allgather_tp"][1], config.model, config.cluster, decode, 4)
    ratio = verify.comm_link_latency_s / plain.comm_link_latency_s
    assert ratio == pytest.approx(5.0, rel=0.01) and cost.losing_part == "communication"
    reason = sp.losing_reason(cost)
    assert reason.startswith("communication: ") and f"per-message time is {ratio:.1f}x a one-token step's" in reason
    assert "each sync sent once per batch row: gamma + 1 = 5 messages per sync" in reason
    local = sp.speculative_cost(sp.Speculation(sp.NGRAM, "root", 4, 0.7), "local", registry, LAPTOPS.model,
                                LAPTOPS.cluster, DECODE)
    assert "once per batch row" not in sp.losing_reason(local)  # no communication: not that reason
