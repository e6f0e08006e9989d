"""Apportionment (workbench.core.apportion): exact sums, the tie-breaking each planner relies on, and the copies it
replaced (kept here verbatim as references, so a change of rounding shows up as a failing comparison)."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.apportion import apportion, apportion_capped, even_split, largest_remainder
from workbench.core.errors import WorkbenchError


# ---- the implementations this module replaced (verbatim but for names) --------------------------------------
def galaxy_apportion(total, weights, minimum=0):  # workbench/schemes/planners/galaxy.py before issue 20
    w = np.asarray(weights, dtype=float)
    spare = total - minimum * w.size
    quota = spare * w / w.sum()
    base = np.floor(quota + 1e-9).astype(int)
    left = spare - int(base.sum())
    if left > 0:
        order = np.lexsort((np.arange(w.size), -(quota - base)))
        base[order[:left]] += 1
    return base + minimum


def hepti_proportional_split(total, weights):  # workbench/schemes/hepti.py before issue 20
    w = np.asarray(weights, dtype=float)
    exact = total * w / w.sum()
    base = np.floor(exact + 1e-9).astype(int)
    order = np.argsort(-(exact - base), kind="stable")
    base[order[: total - base.sum()]] += 1
    return tuple(int(v) for v in base)


def tpi_apportion(total, weights, minimum=1):  # workbench/schemes/planners/tpi_llm.py before issue 20
    w = np.asarray(list(weights), dtype=float)
    quota = total * w / w.sum()
    parts = np.maximum(np.floor(quota).astype(int), minimum)
    while parts.sum() > total:
        over = np.where(parts > minimum, parts - quota, -np.inf)
        parts[int(np.argmax(over))] -= 1
    while parts.sum() < total:
        parts[int(np.argmax(quota - parts))] += 1
    return tuple(int(p) for p in parts)


def random_weights(rng, n):
    """Weights with many ties (small integers) or arbitrary reals."""
    return rng.integers(1, 4, n).astype(float) if rng.random() < 0.5 else rng.random(n) * 10 + 0.01


# ---- even split ---------------------------------------------------------------------------------------------
def test_even_split_gives_the_remainder_to_the_first_parts():
    assert even_split(10, 3) == (4, 3, 3)
    assert even_split(11, 3) == (4, 4, 3)
    assert even_split(2, 4) == (1, 1, 0, 0)
    assert even_split(0, 2) == (0, 0)
    assert even_split(np.int64(7), np.int64(2)) == (4, 3)
    for total in range(40):
        for n in range(1, 9):
            parts = even_split(total, n)
            assert sum(parts) == total and max(parts) - min(parts) <= 1 and list(parts) == sorted(parts, reverse=True)


@pytest.mark.parametrize("total, n, match", [(5, 0, "n must be an integer >= 1"), (-1, 2, "total must be"),
                                             (5, 1.5, "n must be")])
def test_even_split_rejects_bad_input(total, n, match):
    with pytest.raises(WorkbenchError, match=match):
        even_split(total, n)


# ---- largest remainder ----------------------------------------------------------------------------------------
def test_largest_remainder_rounds_to_the_total_ties_to_the_lower_index():
    assert largest_remainder([1.5, 1.5, 1.0], 4).tolist() == [2, 1, 1]
    assert largest_remainder([1 / 3 * 3] * 3, 3).tolist() == [1, 1, 1]  # floors within the tolerance
    assert largest_remainder([0.2, 0.7, 0.1], 1).tolist() == [0, 1, 0]
    assert largest_remainder([2.0, 3.0], 3).tolist() == [0, 3]  # floors above the total lose the smallest remainders


def test_largest_remainder_rejects_negative_quotas():
    with pytest.raises(WorkbenchError, match="quotas"):
        largest_remainder([1.0, -0.5], 1)


def test_largest_remainder_sums_exactly_and_moves_each_part_less_than_one():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, total = int(rng.integers(1, 9)), int(rng.integers(0, 60))
        quotas = total * rng.dirichlet(np.ones(n))  # real quotas that sum to the total
        got = largest_remainder(quotas, total)
        assert got.sum() == total and (got >= 0).all() and (np.abs(got - quotas) < 1).all()


# ---- apportion: the "reserve" rule (Galaxy, Hepti) ----------------------------------------------------------------
def test_apportion_reserve_examples():
    assert apportion(20, [1.0, 1.0, 1.0]).tolist() == [7, 7, 6]
    assert apportion(10, [8, 1, 1], minimum=1).tolist() == [6, 2, 2]  # minimum first, the rest in proportion
    assert apportion(5, [0.0, 1.0]).tolist() == [0, 5]
    assert apportion(0, [1.0, 2.0]).tolist() == [0, 0]


# ---- apportion: the "clamp" rule (TPI-LLM) ------------------------------------------------------------------------
def test_apportion_clamp_examples():
    assert tuple(apportion(10, [1, 1, 1], 1, rule="clamp")) == (4, 3, 3)
    assert tuple(apportion(32, [2, 1, 1], 1, rule="clamp")) == (16, 8, 8)
    assert tuple(apportion(10, [8, 1, 1], 1, rule="clamp")) == (8, 1, 1)  # differs from "reserve": (6, 2, 2)
    assert tuple(apportion(10, [100, 1, 1], 1, rule="clamp")) == (8, 1, 1)  # the clamp pushed it over: trimmed


def galaxy_or_hepti(total, w, minimum):
    """The Galaxy copy, checked against Hepti's where that applies (no minimum)."""
    out = tuple(galaxy_apportion(total, w, minimum).tolist())
    assert minimum or out == hepti_proportional_split(total, w)
    return out


@pytest.mark.parametrize("rule, reference", [("reserve", galaxy_or_hepti), ("clamp", tpi_apportion)])
def test_apportion_equals_the_copies_it_replaced(rule, reference):
    rng = np.random.default_rng(1)
    for _ in range(1000):
        n = int(rng.integers(1, 9))
        w, minimum = random_weights(rng, n), int(rng.integers(0, 3))
        total = minimum * n + int(rng.integers(0, 200))
        got = apportion(total, w, minimum, rule=rule)
        assert got.sum() == total and (got >= minimum).all()
        assert tuple(got.tolist()) == reference(total, w, minimum)


@pytest.mark.parametrize("kwargs, match", [
    (dict(total=3, weights=[0.0, 0.0]), "weights"),
    (dict(total=3, weights=[]), "weights"),
    (dict(total=3, weights=[1.0, np.nan]), "weights"),
    (dict(total=3, weights=[1.0, -1.0]), "weights"),
    (dict(total=-1, weights=[1.0]), "total must be an integer >= 0"),
    (dict(total=2.5, weights=[1.0]), "total must be"),
    (dict(total=3, weights=[1.0] * 4, minimum=1), "at least 1"),
    (dict(total=3, weights=[1.0], minimum=-1), "minimum must be"),
    (dict(total=3, weights=[1.0], rule="nearest"), "rule"),
])
def test_apportion_rejects_bad_input(kwargs, match):
    with pytest.raises(WorkbenchError, match=match):
        apportion(**kwargs)


# ---- capped ------------------------------------------------------------------------------------------------------
def test_apportion_capped_respects_caps_and_moves_the_excess_in_proportion():
    assert apportion_capped(10, [1, 1], [10, 10]) == (5, 5)
    assert apportion_capped(10, [3, 1, 1], [4, 10, 10]) == (4, 3, 3)
    assert apportion_capped(5, [0, 0, 1], [2, 2, 1]) == (2, 2, 1)  # weightless parts with room share the rest
    assert apportion_capped(7, [1, 2], [7, 7]) == (2, 5)
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 7))
        w, caps = rng.random(n), rng.integers(0, 12, n)
        total = int(rng.integers(0, caps.sum() + 1))
        got = apportion_capped(total, w, caps)
        assert sum(got) == total and all(0 <= g <= c for g, c in zip(got, caps))


def test_apportion_capped_rejects_caps_that_hold_too_little():
    with pytest.raises(WorkbenchError, match="sum of caps"):
        apportion_capped(10, [1, 1], [4, 5])
    with pytest.raises(WorkbenchError, match="caps must have one entry per weight"):
        apportion_capped(2, [1, 1], [4, 5, 6])
