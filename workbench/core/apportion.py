"""Apportionment: whole units (heads, FFN columns, layers, tokens) split over parts so that they sum exactly.

One implementation of each split the schemes and planners use (numpy and `workbench.core.errors` only, so
every layer may import it):

- `even_split`: as even as possible, the first `total % n` parts get one more (uniform partitions);
- `largest_remainder`: round real quotas to integers with the given sum (Hepti rounds P2's relaxed shares);
- `apportion`: in proportion to weights, by largest remainder, with a per-part minimum under one of two
  rules: "reserve" (Galaxy, Hepti: set the minimum aside, apportion the rest) or "clamp" (TPI-LLM:
  floors of the whole quotas raised to the minimum, then trimmed); ties always go to the lower index;
- `apportion_capped`: in proportion to weights with a cap per part (llama.cpp's layer split by memory).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.core.errors import WorkbenchError, require_choice, require_int

FLOOR_TOLERANCE = 1e-9  # a quota within this of the integer above floors to it (3 x 1/3 of 3 is 1, not 0)
APPORTION_RULES = ("reserve", "clamp")


def _whole(name: str, value, low: int) -> int:
    """`value` as a Python int >= `low` (numpy integers accepted), else raise naming `name`."""
    return require_int(name, int(value) if isinstance(value, np.integer) else value, low=low)


def _weights(weights) -> np.ndarray:
    """`weights` as a non-empty 1-D float array of finite numbers >= 0 with a positive sum, else raise."""
    w = np.asarray(weights, dtype=float)
    if w.ndim != 1 or w.size == 0 or np.any(~np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise WorkbenchError(f"weights must be a non-empty 1-D array of finite numbers >= 0 with a positive sum, "
                             f"got {weights}")
    return w


def even_split(total: int, n: int) -> tuple[int, ...]:
    """`total` units over `n` parts as evenly as possible (the first `total % n` parts get one more)."""
    n = _whole("n", n, 1)
    base, extra = divmod(_whole("total", total, 0), n)
    return tuple(base + (1 if i < extra else 0) for i in range(n))


def largest_remainder(quotas, total: int, tolerance: float = FLOOR_TOLERANCE) -> np.ndarray:
    """Integers summing to `total` nearest to real `quotas` (>= 0, summing to about `total`): floors (within
    `tolerance`), then one more for the largest remainders (ties: lower index); floors above `total` lose units
    from the smallest remainders."""
    q = np.asarray(quotas, dtype=float)
    if q.ndim != 1 or np.any(~np.isfinite(q)) or np.any(q < 0):
        raise WorkbenchError(f"quotas must be a 1-D array of finite numbers >= 0, got {quotas}")
    base = np.floor(q + tolerance).astype(int)
    short = int(total - base.sum())
    if short > 0:
        base[np.argsort(-(q - base), kind="stable")[:short]] += 1
    elif short < 0:
        for i in np.argsort(q - base, kind="stable"):
            take = min(base[i], -short)
            base[i] -= take
            short += take
            if short == 0:
                break
    return base


def _clamped(total: int, w: np.ndarray, minimum: int) -> np.ndarray:
    """TPI-LLM's rule: floors of the quotas raised to `minimum`, trimmed from the most over-served part,
    topped up on the most under-served one (ties: earlier part)."""
    quota = total * w / w.sum()
    parts = np.maximum(np.floor(quota).astype(int), minimum)
    while parts.sum() > total:
        over = np.where(parts > minimum, parts - quota, -np.inf)
        parts[int(np.argmax(over))] -= 1
    while parts.sum() < total:
        parts[int(np.argmax(quota - parts))] += 1
    return parts


def apportion(total: int, weights: Sequence[float] | np.ndarray, minimum: int = 0, rule: str = "reserve") -> np.ndarray:
    """`total` units in proportion to `weights` (>= 0), at least `minimum` per part, by largest remainder.

    rule "reserve" (Galaxy, Hepti): every part first gets `minimum`, the rest goes by the largest remainders of
    its quotas (floored within `FLOOR_TOLERANCE`). rule "clamp" (TPI-LLM): quotas of the whole `total` are
    floored and raised to `minimum`, then the excess is taken from the parts most over their quota and the
    shortfall given to those most under it. Ties go to the lower index under both rules.
    """
    total = _whole("total", total, 0)
    minimum = _whole("minimum", minimum, 0)
    require_choice("rule", rule, APPORTION_RULES)
    w = _weights(weights)
    if total < minimum * w.size:
        raise WorkbenchError(f"cannot give {w.size} parts at least {minimum} of {total} units each; "
                             f"total must be >= {minimum * w.size}")
    if rule == "clamp":
        return _clamped(total, w, minimum)
    spare = total - minimum * w.size
    return largest_remainder(spare * w / w.sum(), spare) + minimum


def apportion_capped(total: int, weights, caps) -> tuple[int, ...]:
    """`total` split in proportion to `weights` (negatives count as 0; largest remainder, ties: lower index), no
    part above its cap; what a cap stops goes to the parts with room, again in proportion (equally if their
    weights are all 0). Raises WorkbenchError when the caps hold less than `total`."""
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    caps = np.asarray(caps, dtype=int)
    if caps.shape != w.shape or w.ndim != 1:
        raise WorkbenchError(f"caps must have one entry per weight ({w.size}), got {caps.size}")
    if caps.sum() < total:
        raise WorkbenchError(f"total must be <= the sum of caps ({int(caps.sum())}), got {total}")
    out = np.zeros(len(w), dtype=int)
    while out.sum() < total:
        room = caps - out
        share = np.where(room > 0, w, 0.0)
        if share.sum() <= 0:
            share = (room > 0).astype(float)
        left = total - int(out.sum())
        ideal = left * share / share.sum()
        add = np.minimum(np.floor(ideal).astype(int), room)
        short = left - int(add.sum())
        for i in np.argsort(-(ideal - np.floor(ideal)), kind="stable"):
            if short == 0:
                break
            if room[i] - add[i] > 0:
                add[i] += 1
                short -= 1
        out += add
    return tuple(int(v) for v in out)
