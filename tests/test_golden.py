"""Every planner's decision on the papers' settings equals its golden file (tests/golden/planners.json);
after an intended change: `python scripts/regenerate_golden.py` and review the diff."""

from __future__ import annotations

import pytest

from workbench.papers.golden import GOLDEN_PATH, cases, compute, differences, load, tolerance

GOLDEN = load()


def test_golden_file_covers_every_case():
    assert sorted(GOLDEN) == sorted(cases()), "cases added or removed: run scripts/regenerate_golden.py"
    for prefix in ("galaxy/", "sti/", "hepti/", "tpi_llm/"):
        assert any(name.startswith(prefix) for name in GOLDEN)
    assert any("infeasible" in v for v in GOLDEN.values())  # Galaxy's OOM cells are decisions too


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_planner_decision_matches_golden(name):
    diffs = differences(GOLDEN[name], compute([name])[name], name, tolerance(name))
    assert not diffs, (f"{name} moved ({GOLDEN_PATH.name}); if intended, regenerate with "
                       f"scripts/regenerate_golden.py and review:\n" + "\n".join(diffs))


def test_differences_reports_what_moved():
    assert differences({"heads": [4, 4]}, {"heads": [5, 3]}, "x") == ["x/heads[0]: 4 -> 5", "x/heads[1]: 4 -> 3"]
    assert differences({"t": 1.0}, {"t": 1.0 + 1e-12}, "x") == []
    assert differences({"t": 1.0}, {"t": 1.001}, "x", 1e-6) == ["x/t: 1.0 -> 1.001"]
    assert differences({"a": 1, "partition_for_review": 1}, {"a": 1, "partition_for_review": 2}) == []
    assert differences({"a": 1}, {"infeasible": "m"}) == ["/a: missing now", "/infeasible: new"]
