"""Speculative decoding in JAX, the reference `workbench.scenarios.speculative` costs: a draft proposes gamma tokens, the
target verifies them in one forward of gamma + 1 tokens and keeps the longest agreeing prefix plus its own next
token; both caches roll back to what was kept.

* `generate_greedy_speculative`: greedy; its output is exactly the target's own greedy tokens, whatever the
  draft proposes. The target is a `ReferenceTarget` (the monolithic `reference` forward with its KV cache) or an
  `EngineTarget` (Distributed Llama's all-gather TP `shard_map` kernel, `kernels.engines`, on 1-8 devices).
* `sample_speculative`: the rejection-sampling variant (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023):
  accept a drafted x with probability min(1, p(x) / q(x)), else sample from norm(max(0, p - q)); all accepted:
  one more from p. Its output distribution is the target's.
Each run counts its verify steps and the tokens each yielded (`Trace`): the cost model's tokens per step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import jax.numpy as jnp
import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.kernels import engines
from workbench.kernels import reference as ref
from workbench.model.models import TransformerConfig


@dataclass
class Trace:
    """What a run did: accepted drafted tokens per verify step (each step yields accepted + 1 tokens)."""

    gamma: int
    accepted: list[int] = field(default_factory=list)

    @property
    def verify_steps(self) -> int:
        """Target forwards after the prompt."""
        return len(self.accepted)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a verify step yielded (before the last step's cut to n_new)."""
        return float(np.mean(np.asarray(self.accepted) + 1))

    def accepted_lengths(self) -> list[float]:
        """The measured distribution of accepted lengths, P(k) for k = 0..gamma."""
        counts = np.bincount(np.asarray(self.accepted, dtype=int), minlength=self.gamma + 1)
        return list(counts / counts.sum())


# ---- targets: a forward over new tokens through a KV cache that can roll back ------------------------------
class ReferenceTarget:
    """The monolithic reference decoder with its KV cache (`reference.forward_with_cache`)."""

    def __init__(self, cfg: TransformerConfig, params: dict, max_len: int) -> None:
        self.cfg, self.params, self.cache = cfg, params, ref.empty_cache(cfg, max_len)

    @property
    def length(self) -> int:
        """Tokens in the cache."""
        return int(self.cache[0]["length"])

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits (S, V) of `tokens` appended at the cache's length."""
        logits, self.cache = ref.forward_with_cache(self.cfg, self.params, jnp.asarray(tokens, jnp.int32), self.cache)
        return np.asarray(logits)

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached tokens (later slots are masked out and overwritten)."""
        self.cache = [{**c, "length": length} for c in self.cache]


class EngineTarget:
    """The target partitioned by Distributed Llama's all-gather TP kernel (`kernels.engines`) over `mesh`."""

    def __init__(self, cfg: TransformerConfig, params: dict, max_len: int, mesh) -> None:
        self.ep = engines.shard_params(cfg, params, mesh, "allgather")
        self.cache = engines.empty_cache(self.ep, max_len)

    @property
    def length(self) -> int:
        """Tokens in the cache."""
        return int(self.cache.length)

    def forward(self, tokens: Sequence[int]) -> np.ndarray:
        """Logits (S, V) of `tokens` appended at the cache's length (one SPMD forward of S rows)."""
        logits, self.cache = engines.forward(self.ep, np.asarray(tokens, np.int32), self.cache)
        return np.asarray(logits)

    def rollback(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        self.cache = replace(self.cache, length=length)


# ---- drafts ---------------------------------------------------------------------------------------------------
class ModelDraft:
    """A small decoder that drafts greedily through its own KV cache (the reference forward)."""

    def __init__(self, cfg: TransformerConfig, params: dict, max_len: int) -> None:
        self.target = ReferenceTarget(cfg, params, max_len)

    def propose(self, sequence: list[int], gamma: int) -> list[int]:
        """Gamma greedy tokens after `sequence`: feed what the cache lacks, then gamma - 1 single tokens."""
        logits = self.target.forward(sequence[self.target.length:])
        drafted = [int(np.argmax(logits[-1]))]
        while len(drafted) < gamma:
            drafted.append(int(np.argmax(self.target.forward(drafted[-1:])[-1])))
        return drafted

    def keep(self, length: int) -> None:
        """Keep the first `length` tokens of the draft's cache (those still on the sequence)."""
        self.target.rollback(min(length, self.target.length))


class OracleDraft:
    """A draft whose every token is the target's greedy token with probability `alpha`, independently (else a
    wrong one): i.i.d. acceptance by construction, to check the cost model's (1 - alpha^(gamma+1)) / (1 - alpha)."""

    def __init__(self, truth: Sequence[int], prompt_len: int, alpha: float, vocab: int, seed: int) -> None:
        self.truth, self.prompt_len, self.alpha, self.vocab = list(truth), prompt_len, alpha, vocab
        self.rng = np.random.default_rng(seed)

    def propose(self, sequence: list[int], gamma: int) -> list[int]:
        """Gamma tokens: the true continuation, each replaced by a wrong token with probability 1 - alpha."""
        start = len(sequence) - self.prompt_len
        right = self.truth[start:start + gamma]
        return [t if self.rng.random() < self.alpha else (t + 1) % self.vocab for t in right]

    def keep(self, length: int) -> None:
        """No cache to roll back."""


# ---- greedy speculative decoding ------------------------------------------------------------------------------
def verify_greedy(logits: np.ndarray, drafted: list[int]) -> tuple[int, int]:
    """(accepted drafted tokens, the target's token after them): the longest prefix the target's argmax agrees
    with, then the target's own choice at the first disagreement (or after the last drafted token)."""
    choice = np.argmax(logits, axis=-1)
    k = 0
    while k < len(drafted) and drafted[k] == int(choice[k]):
        k += 1
    return k, int(choice[k])


def generate_greedy_speculative(target, draft, prompt: Sequence[int], n_new: int, gamma: int) -> tuple[list[int], Trace]:
    """`n_new` greedy tokens of `target` with `draft` proposing `gamma` per verify step; (tokens, trace)."""
    require_int("gamma", gamma, low=1)
    require_int("n_new", n_new, low=1)
    sequence = [int(t) for t in prompt]
    if not sequence:
        raise WorkbenchError("prompt must be a non-empty sequence of token ids")
    logits = target.forward(sequence)
    sequence.append(int(np.argmax(logits[-1])))  # the prefill's token: not yet in the target's cache
    trace, n_prompt = Trace(gamma), len(prompt)
    while len(sequence) - n_prompt < n_new:
        drafted = draft.propose(sequence, gamma)
        base = target.length  # = len(sequence) - 1: every token but the last is cached
        k, nxt = verify_greedy(target.forward(sequence[-1:] + drafted), drafted)
        target.rollback(base + 1 + k)
        draft.keep(len(sequence) + min(k, gamma - 1))
        sequence += drafted[:k] + [nxt]
        trace.accepted.append(k)
    return sequence[n_prompt:n_prompt + n_new], trace


def greedy_target_tokens(cfg: TransformerConfig, params: dict, prompt: Sequence[int], n_new: int) -> list[int]:
    """The target's own greedy tokens (`reference.generate_greedy`): what speculation must reproduce."""
    return ref.generate_greedy(cfg, params, jnp.asarray(prompt), n_new)


# ---- rejection sampling -----------------------------------------------------------------------------------------
def softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Probabilities of `logits` / temperature along the last axis (float64)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def accept_or_resample(p: np.ndarray, q: np.ndarray, x: int, rng: np.random.Generator) -> int | None:
    """Leviathan et al.'s step: None (x accepted) with probability min(1, p(x)/q(x)), else a token from
    norm(max(0, p - q))."""
    if rng.random() < min(1.0, p[x] / q[x]):
        return None
    residual = np.maximum(p - q, 0.0)
    return int(rng.choice(p.size, p=residual / residual.sum()))


def sample_speculative(target_probs: Callable, draft_probs: Callable, prompt: Sequence[int], n_new: int, gamma: int,
                       rng: np.random.Generator) -> tuple[list[int], Trace]:
    """`n_new` tokens by speculative sampling: `draft_probs(seq)` / `target_probs(seq)` give the next-token
    distribution after a token tuple (the target's for every drafted prefix come from one verify forward)."""
    sequence, trace = [int(t) for t in prompt], Trace(gamma)
    while len(sequence) - len(prompt) < n_new:
        drafted, qs = [], []
        for _ in range(gamma):
            q = draft_probs(tuple(sequence + drafted))
            qs.append(q)
            drafted.append(int(rng.choice(q.size, p=q)))
        ps = [target_probs(tuple(sequence + drafted[:i])) for i in range(gamma + 1)]  # one verify forward
        kept = drafted
        for i, x in enumerate(drafted):
            token = accept_or_resample(ps[i], qs[i], x, rng)
            if token is not None:
                kept = drafted[:i] + [token]
                break
        else:
            kept = drafted + [int(rng.choice(ps[gamma].size, p=ps[gamma]))]
        trace.accepted.append(len(kept) - 1)
        sequence += kept
    return sequence[len(prompt):len(prompt) + n_new], trace


def next_token_probs(cfg: TransformerConfig, params: dict, temperature: float) -> Callable:
    """seq -> the model's next-token distribution (the reference forward, remembered per sequence)."""
    memo: dict[tuple, np.ndarray] = {}

    def probs(seq: tuple) -> np.ndarray:
        if seq not in memo:
            memo[seq] = softmax(np.asarray(ref.forward(cfg, params, jnp.asarray(seq, jnp.int32)))[-1], temperature)
        return memo[seq]
    return probs
