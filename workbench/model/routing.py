"""Which experts a mixture-of-experts layer's tokens touch, and how many of them a device's expert cache serves:
the routing model the operator table and the expert cache read (JAX-free, numpy / scipy only; below `models`'
users: `schemes.workload`, `schemes.common` and `schemes.moe` call it).

**The routing process** (one MoE layer; the analytic functions and `simulate_routing` use the same one):

- *Popularity.* Expert i is picked by a token with probability pi_i (sum_i pi_i = k, each <= 1): k / n for
  every expert under `uniform`; under `skewed` pi_i is proportional to (i + 1)^-skew (Zipf; expert 0 the most
  popular), under `trace` to the layer's selection counts read from a CSV (llama.cpp `llama-imatrix`'s
  per-expert counts of `ffn_down_exps.weight`); any pi_i the scaling pushes above 1 is capped at 1 and the
  excess spread over the others in proportion (water-filling).
- *A token's k distinct experts, no locality* (randomised systematic sampling, Madow 1949 / Goodman-Kish):
  shuffle the experts uniformly, lay their pi_i end to end on [0, k), draw one u ~ U[0, 1) and pick the experts
  whose intervals hold u, u + 1, ..., u + k - 1. Each expert is picked with probability exactly pi_i, always k
  distinct ones (no interval is longer than 1), and tokens are independent.
- *Temporal locality* `locality` = rho in [0, 1): each token after the first, with probability rho, reads the
  previous token's k experts again (a forced repeat, on top of repeats by chance), else makes its own fresh
  draw as above. So each of a token's k experts repeats one of the previous token's with probability
  rho + (1 - rho) x chance; the repeat is drawn once per token, for all k together, which keeps every expert's
  popularity exactly pi_i (keeping each previous expert independently and filling the other slots with a fresh
  draw's experts that are not kept pulls it towards uniform: simulated on 64 experts / 8 active, skew 0.8,
  rho 0.5, an 8-expert pinned cache then hits 0.40, not the 0.45 its popularity promises). Mixtral's
  routing analysis (arXiv 2401.04088, Sec. 5, Table 5) measures consecutive tokens repeating their expert well
  above chance, which is what lets a small LRU cache hit more than its share.

**What is exact and what is approximated.** Each expert's in / out sequence is a two-state chain: it keeps its
state with probability rho, else redraws with pi_i (stay a_i = rho + (1 - rho) pi_i, enter
b_i = (1 - rho) pi_i). So the expected union of T >= 1 consecutive tokens, sum_i 1 - (1 - pi_i)(1 - b_i)^(T-1)
((1 - pi_i)^T without locality, also below one token), and the pinned hit rate, the C largest pi_i summed / k,
are exact. LRU uses Che's approximation (Che, Tung, Wang, IEEE JSAC 20(7), 2002) on the same chains: the cache
holds the experts read in the last T tokens, T solving expected_distinct(T) = C; an expert read now hits if it
was read within those T tokens (a cache smaller than k holds a random C of the previous token's k). Under
uniform routing without locality both policies give C / n exactly. tests/test_routing.py checks every analytic
value against `simulate_routing` within 2 % absolute over 10^5 tokens.

**The cache** holds `cache_experts` = C experts per layer in fast memory: `pinned` keeps the C most popular (a
static placement, as llama.cpp's `--override-tensor` / `--n-cpu-moe` make one; llama.cpp places a layer's
experts as one `ffn_*_exps` tensor, so there C is n on the layers left on the GPU and 0 on the first N layers
`--n-cpu-moe N` keeps "in the CPU": common/arg.cpp, ggml-org/llama.cpp), `lru` the C most recently read, updated
once per token (a token's reads are served from the cache as it was when the token started; its k experts then
become the most recent, ties among them broken at random).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.core.fields import FieldSpec, TomlKey, declared
from workbench.core.io import DATA_DIR

ROUTING_KINDS = ("uniform", "skewed", "trace")
CACHE_POLICIES = ("pinned", "lru")
EXPERT_READS = ("routed", "prefetch")
TRACE_DIR = DATA_DIR / "routing"
TRACE_COLUMNS = ("layer", "expert", "count", "kind", "source")
DATA_KINDS = ("quoted", "datasheet", "measured", "fitted", "assumed", "derived")
WARMUP_TOKENS = 1000  # simulated tokens an empty LRU cache needs before its hit rate is counted


def _is_real(value) -> bool:
    """A real number, not a bool."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)


@dataclass(frozen=True)
class Routing:
    """How tokens pick experts: `kind` (uniform / skewed / trace), Zipf `skew` (one, or one per layer),
    temporal `locality` and the `trace` CSV (kind trace)."""

    kind: str = declared(FieldSpec(f"how tokens pick experts: one of {', '.join(ROUTING_KINDS)}", kind="text",
                                   toml=(TomlKey("routing"),)), "uniform")
    skew: float | tuple[float, ...] = declared(FieldSpec(
        "Zipf exponent of expert popularity (only with routing = skewed; one number, or a list of one per MoE "
        "layer): 0 = uniform",
        "1", 0.0, math.inf, file_high=8.0, toml=(TomlKey("routing_skew"),)), 0.0)
    locality: float = declared(FieldSpec(
        "probability that a token reads the previous token's experts again (temporal locality), in [0, 1)", "1",
        0.0, 1.0, high_open=True, toml=(TomlKey("routing_locality"),)), 0.0)
    trace: str = declared(FieldSpec(
        "per-layer expert selection counts (only with routing = trace; one layer per MoE layer, n_experts each): a "
        "CSV name under data/routing/ or a path relative to the deployment file",
        kind="text", toml=(TomlKey("routing_trace"),)), "")

    def __post_init__(self) -> None:
        require_choice("routing", self.kind, ROUTING_KINDS)
        for s in self.skew if isinstance(self.skew, tuple) else (self.skew,):
            if not _is_real(s) or not 0 <= s < math.inf:
                raise WorkbenchError(f"routing_skew must be a finite number >= 0 (or a tuple of them), got {self.skew!r}")
        if isinstance(self.skew, tuple) and not self.skew:
            raise WorkbenchError("routing_skew must be a finite number >= 0 (or a tuple of them), got ()")
        if not _is_real(self.locality) or not 0 <= self.locality < 1:
            raise WorkbenchError(f"routing_locality must be a number in [0, 1), got {self.locality!r}")
        if self.kind == "trace" and not self.trace:
            raise WorkbenchError("routing_trace must name a count CSV (under data/routing/, or a path) for routing = 'trace'")

    def check(self, moe_layers: int, n_experts: int) -> Routing:
        """This routing if its per-layer parts fit a model of `moe_layers` MoE layers of `n_experts` experts each,
        else one line naming the key and the count it must have (a 2-entry skew list on a 48-layer model, a
        4-layer trace on a 32-layer one): a mismatch would otherwise fail later, in every scheme at once."""
        if self.kind == "skewed" and isinstance(self.skew, tuple) and len(self.skew) != moe_layers:
            raise WorkbenchError(f"routing_skew must be one number or a list of {moe_layers} (one per MoE layer of "
                                 f"the model), got a list of {len(self.skew)}")
        if self.kind == "trace":
            layers, experts = load_trace(self.trace).shape
            if (layers, experts) != (moe_layers, n_experts):
                raise WorkbenchError(f"routing_trace {self.trace} must give {moe_layers} layers (one per MoE layer of "
                                     f"the model) of {n_experts} experts, got {layers} layers of {experts}")
        return self


UNIFORM = Routing()


@dataclass(frozen=True)
class ExpertCache:
    """A device's fast-memory expert cache: `experts` per MoE layer, kept by `policy` (pinned / lru)."""

    experts: int = declared(FieldSpec("experts per MoE layer a device keeps in fast memory (0 = none)", "experts",
                                      0, math.inf, kind="integer", toml=(TomlKey("cache_experts"),)), 0)
    policy: str = declared(FieldSpec(f"which experts stay cached: one of {', '.join(CACHE_POLICIES)}", kind="text",
                                     toml=(TomlKey("cache_policy"),)), "pinned")
    reads: str = declared(FieldSpec(f"how misses are read from storage: one of {', '.join(EXPERT_READS)} (llama.cpp's "
                                    "mmap reads routed experts only; prima.cpp prefetches every non-resident one)",
                                    kind="text", toml=(TomlKey("expert_reads"),)), "routed")

    def __post_init__(self) -> None:
        require_int("cache_experts", self.experts, low=0)
        require_choice("cache_policy", self.policy, CACHE_POLICIES)
        require_choice("expert_reads", self.reads, EXPERT_READS)

    def check(self, n_experts: int) -> ExpertCache:
        """This cache if it holds at most the layer's `n_experts`, else one line (a cache larger than the model)."""
        check_cache(self.experts, n_experts)
        return self


def check_experts(n_experts: int, k: int) -> None:
    """One line unless 1 <= k <= n_experts."""
    require_int("n_experts", n_experts, low=1)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n_experts:
        raise WorkbenchError(f"active experts must be an integer in 1..{n_experts} (the experts), got {k!r}")


def check_cache(cache_experts: int, n_experts: int) -> None:
    """One line unless 0 <= cache_experts <= n_experts (a cache larger than the model holds nothing more): the one
    check of a cache's size against a model, which the deployment file, the explorer and the schemes call."""
    if not isinstance(cache_experts, int) or isinstance(cache_experts, bool) or not 0 <= cache_experts <= n_experts:
        raise WorkbenchError(f"cache_experts must be an integer in 0..{n_experts} (the model's experts per layer; "
                             f"a cache larger than the model), got {cache_experts!r}")


# --- popularity -------------------------------------------------------------------------------------------------

def water_fill(weights, k: int) -> np.ndarray:
    """Inclusion probabilities proportional to `weights`, summing to k, none above 1 (the excess of a capped
    expert spread over the rest in proportion): what 'picked with probability proportional to' means for k
    distinct picks."""
    w = np.asarray(weights, dtype=float)
    positive = w > 0
    if positive.sum() < k:
        raise WorkbenchError(f"routing popularity must give at least k = {k} experts a positive weight, "
                             f"got {int(positive.sum())}")
    capped = np.zeros(w.shape, dtype=bool)
    while True:
        free = positive & ~capped
        pi = np.where(capped, 1.0, 0.0)
        pi[free] = (k - capped.sum()) * w[free] / w[free].sum()
        over = free & (pi > 1.0)
        if not over.any():
            return pi
        capped |= over


def zipf_weights(n_experts: int, skew: float) -> np.ndarray:
    """Zipf popularity weights (i + 1)^-skew of experts 0..n-1 (expert 0 the most popular; skew 0 = uniform)."""
    return np.arange(1, n_experts + 1, dtype=float) ** -float(skew)


def trace_path(name: str) -> Path:
    """A trace CSV's path: `name` under data/routing/ if it is there, else `name` as a path."""
    under = TRACE_DIR / name
    return under if under.is_file() else Path(name)


@lru_cache(maxsize=16)
def _read_counts(path: str) -> np.ndarray:
    """(layers, experts) selection counts of a trace CSV (columns layer, expert, count, kind, source)."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise WorkbenchError(f"routing_trace must name a count CSV under data/routing/ or a path, got {path!r}")
    frame = pd.read_csv(p)
    if tuple(frame.columns) != TRACE_COLUMNS:
        raise WorkbenchError(f"routing trace {p.name} must have columns {', '.join(TRACE_COLUMNS)}, "
                             f"got {', '.join(map(str, frame.columns))}")
    bad_kind = sorted(set(frame["kind"]) - set(DATA_KINDS))
    if bad_kind or frame["source"].isna().any():
        raise WorkbenchError(f"routing trace {p.name}: every row needs a source and a kind in {', '.join(DATA_KINDS)}")
    for column in ("layer", "expert", "count"):
        if not pd.api.types.is_integer_dtype(frame[column]) or (frame[column] < 0).any():
            raise WorkbenchError(f"routing trace {p.name}: column {column} must hold integers >= 0")
    layers, experts = int(frame["layer"].max()) + 1, int(frame["expert"].max()) + 1
    counts = np.full((layers, experts), -1.0)
    counts[frame["layer"].to_numpy(), frame["expert"].to_numpy()] = frame["count"].to_numpy(dtype=float)
    if len(frame) != layers * experts or (counts < 0).any():
        raise WorkbenchError(f"routing trace {p.name} must give a count for every layer 0..{layers - 1} "
                             f"and expert 0..{experts - 1} exactly once")
    counts.flags.writeable = False
    return counts


def load_trace(name: str) -> np.ndarray:
    """(layers, experts) per-layer per-expert selection counts of a trace CSV (a name under data/routing/)."""
    return _read_counts(str(trace_path(name)))


def popularity(routing: Routing, n_experts: int, k: int) -> np.ndarray:
    """(layers, n) inclusion probabilities pi (each row sums to k, none above 1): one row unless the routing
    differs per layer (a skew tuple, a trace). Read-only (cached: the operator table asks often)."""
    check_experts(n_experts, k)
    return _popularity(routing, n_experts, k)


@lru_cache(maxsize=256)
def _popularity(routing: Routing, n_experts: int, k: int) -> np.ndarray:
    """`popularity` of checked arguments, computed once per (routing, n, k)."""
    pi = _popularity_rows(routing, n_experts, k)
    pi.flags.writeable = False
    return pi


def _popularity_rows(routing: Routing, n_experts: int, k: int) -> np.ndarray:
    """The popularity rows of one routing kind."""
    if routing.kind == "uniform":
        return np.full((1, n_experts), k / n_experts)
    if routing.kind == "skewed":
        skews = routing.skew if isinstance(routing.skew, tuple) else (routing.skew,)
        return np.stack([water_fill(zipf_weights(n_experts, s), k) for s in skews])
    counts = load_trace(routing.trace)
    if counts.shape[1] != n_experts:
        raise WorkbenchError(f"routing trace {routing.trace} has {counts.shape[1]} experts per layer; the model "
                             f"has n_experts = {n_experts}")
    return np.stack([water_fill(row, k) for row in counts])


def _layer_rows(routing: Routing, n_experts: int, k: int, layer: int | None) -> np.ndarray:
    """The popularity rows to average over: every layer's (layer None) or one layer's."""
    pi = popularity(routing, n_experts, k)
    if layer is None:
        return pi
    require_int("layer", layer, low=0, high=len(pi) - 1)
    return pi[layer:layer + 1]


# --- the union of consecutive tokens ----------------------------------------------------------------------------

def _enter(pi: np.ndarray, locality: float) -> np.ndarray:
    """Probability an expert absent from one token is read by the next (the two-state chain's b = (1 - rho) pi)."""
    return (1.0 - locality) * pi


def _absent(pi: np.ndarray, locality: float, tokens: np.ndarray) -> np.ndarray:
    """P(an expert is read by none of `tokens` consecutive tokens), shape tokens.shape + pi.shape: (1 - pi)^T
    without locality; (1 - pi)(1 - b)^(T - 1) with it (T >= 1; below one token, (1 - pi)^T)."""
    t = tokens[..., None]
    first = (1.0 - pi) ** np.minimum(t, 1.0)
    return first * (1.0 - _enter(pi, locality)) ** np.maximum(t - 1.0, 0.0)


@lru_cache(maxsize=256)
def _grouped(routing: Routing, n_experts: int, k: int) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """Each layer's distinct popularities and how many experts share each (uniform routing: one of each)."""
    return tuple(np.unique(pi, return_counts=True) for pi in _popularity(routing, n_experts, k))


def expected_distinct(routing: Routing, n_experts: int, k: int, tokens, layer: int | None = None):
    """Expected distinct experts of one layer that `tokens` consecutive tokens touch (vectorised over `tokens`;
    0 -> 0; the mean over layers unless `layer` is given)."""
    check_experts(n_experts, k)
    groups = _grouped(routing, n_experts, k)
    if layer is not None:
        require_int("layer", layer, low=0, high=len(groups) - 1)
        groups = groups[layer:layer + 1]
    t = np.asarray(tokens, dtype=float)
    if np.any(~np.isfinite(t)) or np.any(t < 0):
        raise WorkbenchError(f"tokens must be finite and >= 0, got {tokens!r}")
    distinct = sum((1.0 - _absent(values, routing.locality, t)) @ experts for values, experts in groups) / len(groups)
    return float(distinct) if np.ndim(distinct) == 0 else distinct


# --- the expert cache -------------------------------------------------------------------------------------------

def _check_policy(n_experts: int, k: int, cache_experts: int, policy: str) -> None:
    """One line for a bad expert count, cache size or policy."""
    check_experts(n_experts, k)
    check_cache(cache_experts, n_experts)
    require_choice("cache_policy", policy, CACHE_POLICIES)


def pinned_set(pi: np.ndarray, cache_experts: int) -> np.ndarray:
    """The `cache_experts` most popular experts (ties to the lower id): what a pinned cache keeps resident."""
    return np.argsort(-pi, kind="stable")[:cache_experts]


def che_window(pi: np.ndarray, locality: float, cache_experts: int) -> float:
    """Che's characteristic time (tokens, >= 1): the window whose expected distinct experts fill the cache."""
    def excess(t: float) -> float:
        return float(np.sum(1.0 - _absent(pi, locality, np.asarray(t)))) - cache_experts

    high = 2.0
    while excess(high) < 0:
        if high >= 2.0 ** 64:  # only experts too rare for float64 (1 - pi == 1) are left: the cache never fills
            return high
        high *= 2.0
    from scipy.optimize import (
        brentq,  # imported here: `whatif` stays free of scipy unless an LRU cache is asked
    )

    return brentq(excess, 1.0, high, xtol=1e-10) if excess(1.0) < 0 else 1.0


def _lru_resident(pi: np.ndarray, locality: float, cache_experts: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(P(resident when read), P(resident at a random moment)) per expert under LRU, Che's approximation."""
    stay = locality + (1.0 - locality) * pi  # P(read by this token | read by the previous one)
    if cache_experts < k:  # the cache holds a random cache_experts of the previous token's k experts
        share = cache_experts / k
        return stay * share, pi * share
    if cache_experts >= np.count_nonzero(pi):
        return np.ones_like(pi), np.ones_like(pi)
    window = che_window(pi, locality, cache_experts)
    when_read = 1.0 - (1.0 - stay) * (1.0 - _enter(pi, locality)) ** (window - 1.0)
    return when_read, 1.0 - _absent(pi, locality, np.asarray(window))


def _resident(pi: np.ndarray, locality: float, cache_experts: int, k: int, policy: str):
    """(P(resident when read), P(resident at a random moment)) per expert under `policy`."""
    if policy == "pinned":
        held = np.zeros_like(pi)
        held[pinned_set(pi, cache_experts)] = 1.0
        return held, held
    return _lru_resident(pi, locality, cache_experts, k)


def hit_rate(routing: Routing, n_experts: int, k: int, cache_experts: int, policy: str = "pinned",
             layer: int | None = None) -> float:
    """Expected fraction of a decode token's k expert reads the cache serves (mean over layers unless `layer`)."""
    _check_policy(n_experts, k, cache_experts, policy)
    rows = _layer_rows(routing, n_experts, k, layer)
    return float(np.mean([pi @ _resident(pi, routing.locality, cache_experts, k, policy)[0] / k for pi in rows]))


def expected_misses_per_token(routing: Routing, n_experts: int, k: int, cache_experts: int, policy: str = "pinned",
                              layer: int | None = None) -> float:
    """Expected expert reads per decode token and layer the cache misses: k (1 - hit rate)."""
    return k * (1.0 - hit_rate(routing, n_experts, k, cache_experts, policy, layer))


def expected_misses(routing: Routing, n_experts: int, k: int, cache_experts: int, tokens, policy: str = "pinned",
                    layer: int | None = None):
    """Expected experts of one layer a prefill of `tokens` tokens touches that are not resident (vectorised over
    `tokens`); an LRU cache's contents come from earlier traffic, taken as independent of the new prompt."""
    _check_policy(n_experts, k, cache_experts, policy)
    rows = _layer_rows(routing, n_experts, k, layer)
    t = np.asarray(tokens, dtype=float)
    if np.any(~np.isfinite(t)) or np.any(t < 0):
        raise WorkbenchError(f"tokens must be finite and >= 0, got {tokens!r}")
    misses = []
    for pi in rows:
        resident = _resident(pi, routing.locality, cache_experts, k, policy)[1]
        misses.append(np.sum((1.0 - _absent(pi, routing.locality, t)) * (1.0 - resident), axis=-1))
    mean = np.mean(misses, axis=0)
    return float(mean) if np.ndim(mean) == 0 else mean


# --- Monte-Carlo ------------------------------------------------------------------------------------------------

def _systematic(pi: np.ndarray, k: int, tokens: int, rng: np.random.Generator, block: int = 8192) -> np.ndarray:
    """(tokens, k) independent draws of k distinct experts, each expert with probability pi_i (randomised
    systematic sampling, in a random order)."""
    n = len(pi)
    out = np.empty((tokens, k), dtype=np.int64)
    for start in range(0, tokens, block):
        b = min(block, tokens - start)
        order = np.argsort(rng.random((b, n)), axis=1)
        ends = np.cumsum(pi[order], axis=1)
        points = rng.random((b, 1)) + np.arange(k)
        shift = 2.0 * k * np.arange(b)[:, None]  # one sorted array: row r's interval ends sit in [2kr, 2kr + k]
        slot = np.searchsorted((ends + shift).ravel(), (points + shift).ravel(), side="right")
        slot = np.minimum(slot.reshape(b, k) - n * np.arange(b)[:, None], n - 1)
        picked = np.take_along_axis(order, slot, axis=1)
        out[start:start + b] = np.take_along_axis(picked, np.argsort(rng.random((b, k)), axis=1), axis=1)
    return out


def _with_locality(fresh: np.ndarray, repeat: np.ndarray) -> np.ndarray:
    """Each token whose `repeat` is set reads its predecessor's experts again, every other token its own fresh
    draw (token 0 always fresh)."""
    source = np.where(repeat, 0, np.arange(len(fresh)))
    source[0] = 0
    return fresh[np.maximum.accumulate(source)]


def simulate_routing(routing: Routing, n_experts: int, k: int, tokens: int, seed: int = 0, layer: int = 0) -> np.ndarray:
    """(tokens, k) expert ids of `tokens` consecutive tokens at `layer` under the routing process (deterministic
    for a seed: numpy's default Generator)."""
    require_int("tokens", tokens, low=1)
    require_int("seed", seed, low=0)
    pi = _layer_rows(routing, n_experts, k, layer)[0]
    rng = np.random.default_rng(seed)
    fresh = _systematic(pi, k, tokens, rng)
    if routing.locality == 0:
        return fresh
    return _with_locality(fresh, rng.random(tokens) < routing.locality)


def lru_ranks(ids: np.ndarray, n_experts: int, seed: int = 0, block: int = 8192) -> np.ndarray:
    """(tokens, k) recency rank of each read among all experts when its token starts (0 = the most recently
    read; n_experts = never read before): the read hits an LRU cache of C experts iff rank < C. A token's
    experts share a recency; ties are broken at random."""
    rng = np.random.default_rng(seed)
    tokens, k = ids.shape
    last = np.full(n_experts, -1.0)  # key of each expert's latest read: token index + a random tie-break
    ranks = np.empty((tokens, k), dtype=np.int64)
    for start in range(0, tokens, block):
        b = min(block, tokens - start)
        reads = np.full((b, n_experts), -1.0)
        now = ids[start:start + b]
        np.put_along_axis(reads, now, start + np.arange(b)[:, None] + rng.random((b, k)), axis=1)
        before = np.maximum.accumulate(np.vstack([last[None], reads[:-1]]), axis=0)  # as each token starts
        last = np.maximum(before[-1], reads[-1])
        mine = np.take_along_axis(before, now, axis=1)
        rank = (before[:, None, :] > mine[:, :, None]).sum(axis=2)
        ranks[start:start + b] = np.where(mine < 0, n_experts, rank)
    return ranks


def simulated_hit_rate(routing: Routing, n_experts: int, k: int, cache_experts: int, policy: str = "pinned",
                       tokens: int = 100_000, seed: int = 0, layer: int = 0) -> float:
    """Monte-Carlo counterpart of `hit_rate` at one layer: the fraction of simulated reads served from the cache
    (an LRU cache's first WARMUP_TOKENS tokens, while it fills, not counted)."""
    _check_policy(n_experts, k, cache_experts, policy)
    ids = simulate_routing(routing, n_experts, k, tokens, seed, layer)
    if policy == "pinned":
        pi = _layer_rows(routing, n_experts, k, layer)[0]
        return float(np.isin(ids, pinned_set(pi, cache_experts)).mean())
    if tokens <= WARMUP_TOKENS:
        raise WorkbenchError(f"tokens must be > {WARMUP_TOKENS} for an LRU simulation (its warm-up), got {tokens}")
    return float((lru_ranks(ids, n_experts, seed)[WARMUP_TOKENS:] < cache_experts).mean())


def simulated_distinct(ids: np.ndarray, tokens: int) -> float:
    """Mean distinct experts in the simulated sequence's consecutive non-overlapping windows of `tokens` tokens."""
    require_int("tokens", tokens, low=1)
    windows = ids[: len(ids) // tokens * tokens].reshape(-1, tokens * ids.shape[1])
    ordered = np.sort(windows, axis=1)
    return float(np.mean(1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1)))
