"""The JAX reference of speculative decoding (`workbench.kernels.speculative`): greedy speculation reproduces the
target's own greedy tokens (monolithic, and partitioned by the all-gather TP kernel on 1, 2, 4 and 8 devices),
rejection sampling draws from the target's distribution (chi-square), and the verify forwards it makes per token
are what the cost model (`workbench.scenarios.speculative.expected_tokens`) says for the acceptance it measured."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from workbench.kernels import engines
from workbench.kernels import reference as ref
from workbench.kernels import speculative as ks
from workbench.kernels.mesh import make_mesh
from workbench.model.models import tiny_config
from workbench.scenarios import speculative as cost

PROMPT = [3, 14, 15, 92, 65, 35]
N_NEW = 20


@pytest.fixture(scope="module")
def models():
    """A tiny target (2 layers) and its draft: the target's first layer with the same embedding and head."""
    cfg = tiny_config("llama", vocab_size=96, max_positions=512)  # vocab split by 2/4/8
    params = ref.init_params(cfg, seed=1)
    draft_cfg = cfg.with_changes(name="tiny-draft", n_layers=1)
    return cfg, params, draft_cfg, {**params, "blocks": params["blocks"][:1]}


@pytest.fixture(scope="module")
def truth(models):
    cfg, params, _, _ = models
    return ks.greedy_target_tokens(cfg, params, PROMPT, N_NEW)


class CountingTarget:
    """A target that counts its forwards (the prefill and each verify step)."""

    def __init__(self, inner) -> None:
        self.inner, self.forwards = inner, 0

    @property
    def length(self) -> int:
        return self.inner.length

    def forward(self, tokens):
        self.forwards += 1
        return self.inner.forward(tokens)

    def rollback(self, length: int) -> None:
        self.inner.rollback(length)


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculation_gives_the_targets_own_greedy_tokens(models, truth, gamma):
    cfg, params, draft_cfg, draft_params = models
    out, trace = ks.generate_greedy_speculative(ks.ReferenceTarget(cfg, params, 64),
                                                ks.ModelDraft(draft_cfg, draft_params, 64), PROMPT, N_NEW, gamma)
    assert out == truth
    assert 0 < sum(trace.accepted) < len(trace.accepted) * gamma  # some drafts kept, some rejected


def test_a_draft_equal_to_the_target_is_always_accepted(models, truth):
    cfg, params, _, _ = models
    out, trace = ks.generate_greedy_speculative(ks.ReferenceTarget(cfg, params, 64),
                                                ks.ModelDraft(cfg, params, 64), PROMPT, N_NEW, 4)
    assert out == truth and set(trace.accepted) == {4}


@pytest.mark.parametrize("n_devices", [1, 2, 4, 8])
def test_greedy_speculation_on_the_tp_kernel_gives_the_targets_greedy_tokens(models, truth, n_devices, cpu_devices):
    cfg, params, draft_cfg, draft_params = models
    target = ks.EngineTarget(cfg, params, 64, make_mesh(n_devices))
    out, _ = ks.generate_greedy_speculative(target, ks.ModelDraft(draft_cfg, draft_params, 64), PROMPT, N_NEW, 3)
    assert out == truth


def test_verify_forwards_per_token_are_what_the_cost_model_says_for_the_measured_acceptance(models, cpu_devices):
    """An oracle draft right with probability alpha, i.i.d.: the counted verify forwards per generated token
    equal 1 / expected_tokens of the measured accepted lengths, and the i.i.d. formula at the measured alpha."""
    cfg, params, _, _ = models
    n_new, gamma, alpha = 240, 3, 0.6
    mesh = make_mesh(1)  # the TP kernel on one device: compiled once per row count, fast to step
    long_truth = engines.generate(cfg, params, PROMPT, n_new + gamma + 1, mesh)  # = the reference's (test_engines)
    target = CountingTarget(ks.EngineTarget(cfg, params, 512, mesh))
    draft = ks.OracleDraft(long_truth, len(PROMPT), alpha, cfg.vocab_size, seed=11)
    out, trace = ks.generate_greedy_speculative(target, draft, PROMPT, n_new, gamma)
    assert out == long_truth[:n_new]
    verify_forwards = target.forwards - 1  # less the prefill
    generated = sum(k + 1 for k in trace.accepted)  # before the cut to n_new
    assert verify_forwards == trace.verify_steps
    model_tokens = cost.expected_tokens(gamma, accepted_lengths=trace.accepted_lengths())
    assert verify_forwards / generated == pytest.approx(1 / model_tokens, rel=1e-12)
    attempts = sum(min(k + 1, gamma) for k in trace.accepted)
    measured_alpha = sum(trace.accepted) / attempts  # the maximum-likelihood alpha of the truncated geometric
    assert measured_alpha == pytest.approx(alpha, abs=0.08)
    assert generated / verify_forwards == pytest.approx(cost.expected_tokens(gamma, measured_alpha), rel=0.03)


# ---- rejection sampling ------------------------------------------------------------------------------------------
def chi_square_p(counts: dict, expected: dict, n: int) -> float:
    """The chi-square test's p-value of observed `counts` against `expected` probabilities (cells expecting
    fewer than 5 pooled into one)."""
    big = [c for c in expected if expected[c] * n >= 5]
    observed = [counts.get(c, 0) for c in big] + [n - sum(counts.get(c, 0) for c in big)]
    wanted = [expected[c] * n for c in big] + [n * (1 - sum(expected[c] for c in big))]
    return float(stats.chisquare(observed, wanted).pvalue)


def test_rejection_sampling_draws_the_first_two_tokens_from_the_targets_distribution():
    cfg = tiny_config("llama", vocab_size=6)
    draft_cfg = cfg.with_changes(name="tiny-draft", n_layers=1)
    target = ks.next_token_probs(cfg, ref.init_params(cfg, seed=1), temperature=0.1)
    draft = ks.next_token_probs(draft_cfg, ref.init_params(draft_cfg, seed=5), temperature=0.1)
    prompt, n, rng = (1, 2, 3), 2000, np.random.default_rng(0)
    samples = [tuple(ks.sample_speculative(target, draft, prompt, 2, 2, rng)[0]) for _ in range(n)]
    counts = {c: samples.count(c) for c in set(samples)}
    joint = {(a, b): target(prompt)[a] * target(prompt + (a,))[b] for a in range(6) for b in range(6)}
    assert chi_square_p(counts, joint, n) > 1e-3
    drafts_own = {(a, b): draft(prompt)[a] * draft(prompt + (a,))[b] for a in range(6) for b in range(6)}
    assert chi_square_p(counts, drafts_own, n) < 1e-6  # the test tells the draft's distribution apart
