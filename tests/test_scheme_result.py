"""SchemeResult's derived OOM flag, its one over-budget note and its typed MoE detail."""

import pytest

from workbench.core.errors import WorkbenchError
from workbench.schemes.base import MoEParts, SchemeResult, costed, over_budget_note


def result(peak, budget, **kw) -> SchemeResult:
    return SchemeResult("s", "p", "decode", 1.0, compute_s=1.0, peak_memory_bytes=peak, memory_budget_bytes=budget,
                        **kw)


def test_oom_is_any_peak_over_its_budget():
    assert not result((1.0, 2.0), (1.0, 2.0)).oom  # equal fits
    assert result((1.0, 3.0), (1.0, 2.0)).oom
    assert not result((), ()).oom


def test_an_explicit_oom_flag_cannot_be_given():
    with pytest.raises(TypeError):
        SchemeResult("s", "p", "decode", 1.0, oom=True)


def test_peaks_and_budgets_are_one_per_device():
    with pytest.raises(WorkbenchError, match="2 peaks but 1 budgets"):
        result((1.0, 2.0), (3.0,))


def test_over_budget_note_names_the_device_most_over():
    note = over_budget_note((5.0, 9.0, 9.0), (4.0, 2.0, 2.0), ("a", "b", "c"))
    assert note == "infeasible: device 1 (b) needs 9 B but its budget is 2 B (7 B do not fit)"
    assert over_budget_note((1.0, 2.0), (1.0, 2.0), ("a", "b")) == ""


def test_costed_appends_the_note_after_the_schemes_own():
    fits = costed("s", "p", "decode", 1.0, ("a",), "own", compute_s=1.0, peak_memory_bytes=(1.0,),
                  memory_budget_bytes=(2.0,))
    over = costed("s", "p", "decode", 1.0, ("a",), "own", compute_s=1.0, peak_memory_bytes=(3.0,),
                  memory_budget_bytes=(2.0,))
    assert fits.notes == "own" and not fits.oom
    assert over.notes == "own; infeasible: device 0 (a) needs 3 B but its budget is 2 B (1 B do not fit)" and over.oom


def test_detail_is_a_typed_record():
    parts = MoEParts(1.0, 0.5, 2.0, 0.0, 0.25)
    assert result((), (), detail=parts).detail.seconds()["experts_s"] == pytest.approx(2.0)
    with pytest.raises(WorkbenchError, match="detail must be a MoEParts"):
        result((), (), detail={"experts_s": 2.0})
    with pytest.raises(WorkbenchError, match="router_s must be >= 0"):
        MoEParts(1.0, -0.5, 2.0, 0.0, 0.25)
