"""Which experts a mixture-of-experts layer's tokens touch: the routing model the operator table and the
expert cache read (JAX-free, below `models`' users; `schemes.common` and `schemes.moe` call it).

A router picks `k` distinct experts of `n` for each token. Under **uniform** routing every expert is equally
likely and tokens are independent, so the expected number of distinct experts that `tokens` tokens touch
(the union a prefill or a speculative verify step streams) is n (1 - (1 - k/n)^tokens): one token touches
exactly k; many touch nearly all n.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError, require_choice, require_int

ROUTING_KINDS = ("uniform",)


@dataclass(frozen=True)
class Routing:
    """How tokens pick experts: `kind` (uniform: every expert equally likely, tokens independent)."""

    kind: str = "uniform"

    def __post_init__(self) -> None:
        require_choice("routing", self.kind, ROUTING_KINDS)


UNIFORM = Routing()


def check_experts(n_experts: int, k: int) -> None:
    """One line unless 1 <= k <= n_experts."""
    require_int("n_experts", n_experts, low=1)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n_experts:
        raise WorkbenchError(f"active experts must be an integer in 1..{n_experts} (the experts), got {k!r}")


def expected_distinct(routing: Routing, n_experts: int, k: int, tokens) -> np.ndarray | float:
    """Expected distinct experts of one layer that `tokens` tokens touch (vectorised over `tokens`; 0 -> 0)."""
    check_experts(n_experts, k)
    t = np.asarray(tokens, dtype=float)
    if np.any(t < 0):
        raise WorkbenchError(f"tokens must be >= 0, got {tokens!r}")
    distinct = n_experts * (1.0 - (1.0 - k / n_experts) ** t)
    return float(distinct) if np.ndim(distinct) == 0 else distinct
