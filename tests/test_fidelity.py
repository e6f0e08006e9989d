"""The fidelity scoreboard tells structure from timing: row classes, tolerances, the gain error of speedups,
the per-class report, and calibration flags that agree with the constants' provenance and with the fits."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

import workbench.papers.galaxy as G
import workbench.papers.mcu_siracusa as M
import workbench.papers.sti as S
import workbench.papers.tpi_llm as T
from workbench.core.constants import Constant
from workbench.core.errors import WorkbenchError
from workbench.report import fidelity
from workbench.report.fidelity import (
    ROW_CLASSES,
    calibration_mismatches,
    load_reported,
    provenance_constants,
    scoreboard,
    summary,
    write_report,
)
from workbench.report.results import KEY_COLUMNS

HEADER = "paper,artifact,model,setting,quantity,value,unit,source,fitted,tolerance,class\n"


def _write_reported(tmp_path, *lines: str):
    (tmp_path / "reported").mkdir(parents=True, exist_ok=True)
    (tmp_path / "reported" / "p.csv").write_text(HEADER + "".join(line + "\n" for line in lines))
    return tmp_path


# ---- classes and tolerances on the real data ----------------------------------------------------------------
def expected_class(row) -> str | None:
    """The class a row must have, by its unit or quantity (None: no rule covers it)."""
    by_quantity = {"weak_scaling_efficiency": "efficiency", "layer_time_ratio_12_vs_3_shards": "speedup",
                   "compute_stall_fraction": "timing", "comm_fraction_tp": "timing", "comm_fraction_mp": "timing",
                   "crossover_devices": "structural", "loose_steady": "structural",
                   "tight_steady_violated": "structural", "flops_ratio_vs_load_exec_and_stdpl_full": "structural",
                   "flops_ratio_vs_stdpl_2bit_and_6bit": "structural"}
    if row.quantity in by_quantity:
        return by_quantity[row.quantity]
    if row.quantity in ("oom", "fits") or row.quantity.startswith("oom_"):
        return "structural"
    by_unit = {"x": "speedup", "s": "timing", "ms": "timing", "s/token": "timing", "MB": "memory", "MiB": "memory",
               "GiB": "memory", "mJ": "energy", "tau": "structural"}
    return by_unit.get(row.unit)


def test_every_reported_row_has_the_class_its_quantity_implies():
    reported = load_reported()
    expected = [expected_class(r) for r in reported.itertuples(index=False)]
    uncovered = reported[[e is None for e in expected]]
    assert uncovered.empty, uncovered[KEY_COLUMNS]
    wrong = reported[reported["class"] != pd.Series(expected, index=reported.index)]
    assert wrong.empty, wrong[KEY_COLUMNS + ["class"]]
    assert set(reported["class"]) <= set(ROW_CLASSES)


def test_every_row_has_a_tolerance_and_only_structural_rows_are_exact():
    reported = load_reported()
    assert reported["tolerance"].notna().all()
    assert ((reported["tolerance"] >= 0) & (reported["tolerance"] < 1)).all()
    exact = reported[reported["tolerance"] == 0]
    assert (exact["class"] == "structural").all()
    # the design rule that had no tolerance is now an exact-match structural row
    rule = reported[reported.quantity == "crossover_devices"].iloc[0]
    assert rule["class"] == "structural" and rule.tolerance == 0


@pytest.mark.parametrize("cell, tolerance, message", [
    ("latency", "0.1", "class must be one of timing, speedup, efficiency, memory, energy, structural, got 'latency'"),
    ("", "0.1", "class must be one of"),
    ("timing", "", "tolerance must be a relative error in \\[0, 1\\)"),
    ("timing", "1.5", "tolerance must be a relative error in \\[0, 1\\)"),
    ("timing", "-0.1", "tolerance must be a relative error"),
    ("timing", "0", "tolerance 0 \\(exact match\\) is for structural rows only"),
])
def test_a_bad_class_or_tolerance_is_a_one_line_error(tmp_path, cell, tolerance, message):
    data = _write_reported(tmp_path, f"p,T1,m,s,q,1.0,s,Table 1,,{tolerance},{cell}")
    with pytest.raises(WorkbenchError, match=message) as err:
        load_reported(data)
    assert "p.csv line 2 (q)" in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_file_without_the_class_column_is_an_error(tmp_path):
    (tmp_path / "reported").mkdir()
    (tmp_path / "reported" / "p.csv").write_text(HEADER.replace(",class", "") + "p,T1,m,s,q,1.0,s,Table 1,,0.1\n")
    with pytest.raises(WorkbenchError, match="missing columns \\['class'\\]"):
        load_reported(tmp_path)


def test_structural_rows_with_tolerance_zero_need_an_exact_match(tmp_path):
    data = _write_reported(tmp_path, "p,T1,m,a,oom,1,bool,Table 1,,0,structural",
                           "p,T1,m,b,crossover_devices,16,devices,Sec. 4,,0,structural")
    modelled = pd.DataFrame([dict(paper="p", artifact="T1", model="m", setting="a", quantity="oom", value=1.0),
                             dict(paper="p", artifact="T1", model="m", setting="b", quantity="crossover_devices",
                                  value=15.0)])
    board = scoreboard(load_reported(data), modelled)
    assert list(board.within_tolerance) == ["yes", "no"]


# ---- the gain error of speedup rows ---------------------------------------------------------------------
def _row(setting, quantity, value, klass, fitted="", tolerance=0.1):
    return dict(paper="p", artifact="T1", model="m", setting=setting, quantity=quantity, value=value, unit="x",
                source="Table 1", fitted=fitted, tolerance=tolerance, **{"class": klass})


def _modelled(*pairs):
    return pd.DataFrame([dict(paper="p", artifact="T1", model="m", setting=s, quantity=q, value=v, unit="x")
                         for s, q, v in pairs])


def test_speedup_rows_carry_the_error_of_the_gain():
    reported = pd.DataFrame([_row("a", "speedup", 1.3, "speedup"), _row("b", "latency", 1.3, "timing"),
                             _row("c", "speedup", 1.0, "speedup"), _row("d", "weak_scaling_efficiency", 0.81, "efficiency")])
    board = scoreboard(reported, _modelled(("a", "speedup", 1.2), ("b", "latency", 1.2), ("c", "speedup", 1.1),
                                           ("d", "weak_scaling_efficiency", 1.0)))
    a, b, c, d = (board.iloc[i] for i in range(4))
    assert a.relative_error == pytest.approx(-0.1 / 1.3) and a.within_tolerance == "yes"
    assert a.gain_error == pytest.approx(0.2 / 0.3 - 1)  # a third of the gain is missing
    assert np.isnan(b.gain_error)  # not a speedup
    assert np.isnan(c.gain_error)  # no reported gain to compare with
    assert np.isnan(d.gain_error)  # an efficiency has no gain: (1.0 - 1) / (0.81 - 1) - 1 = -100 % meant nothing


def test_only_speedup_rows_of_the_real_data_get_a_gain_error():
    reported = load_reported()
    modelled = reported[KEY_COLUMNS + ["unit"]].assign(value=reported["value"] * 1.1 + 0.05)
    board = scoreboard(reported, modelled)
    assert set(board.loc[board.gain_error.notna(), "class"]) == {"speedup"}
    assert board.loc[board["class"] == "speedup", "gain_error"].notna().sum() >= 10
    fig10 = board[(board.paper == "galaxy") & (board.artifact == "Fig. 10")]
    assert len(fig10) == 2 and set(fig10["class"]) == {"efficiency"} and fig10.gain_error.isna().all()
    assert fig10.source.str.contains("Fig. 10: 4-way HMP reaches").all()  # the rows' provenance is kept


def test_summary_scores_each_class_and_role_separately():
    reported = pd.DataFrame([
        _row("a", "speedup", 1.3, "speedup"), _row("b", "speedup", 2.0, "speedup"),
        _row("c", "speedup", 1.5, "speedup", fitted="alpha"),
        _row("d", "latency", 10.0, "timing"), _row("e", "latency", 10.0, "timing"),
        _row("f", "oom", 1.0, "structural", tolerance=0.0)])
    modelled = _modelled(("a", "speedup", 1.2), ("b", "speedup", 2.5), ("c", "speedup", 1.5),
                         ("d", "latency", 13.0), ("f", "oom", 1.0))  # e is not modelled
    out = summary(scoreboard(reported, modelled)).set_index("class")
    sp, ti, st = out.loc["speedup"], out.loc["timing"], out.loc["structural"]
    assert (sp.rows, sp.calibration_rows, sp.calibration_within, sp.validation_rows, sp.validation_within) == (3, 1, 1, 2, 1)
    assert sp.validation_median_abs_error == pytest.approx(np.median([0.1 / 1.3, 0.25]))
    assert sp.validation_median_abs_gain_error == pytest.approx(np.median([1 / 3, 0.5]))
    assert (ti.rows, ti.modelled, ti.validation_within) == (2, 1, 0) and ti.validation_median_abs_error == pytest.approx(0.3)
    assert np.isnan(ti.validation_median_abs_gain_error)
    assert (st.rows, st.validation_within) == (1, 1) and st.validation_median_abs_error == 0
    overall = summary(scoreboard(reported, modelled), by_paper=False)
    assert set(overall["paper"]) == {"all"} and overall.set_index("class").loc["speedup", "rows"] == 3


def test_report_summarises_each_class_and_writes_the_gain_column(tmp_path):
    data = _write_reported(tmp_path / "data", "p,T1,m,a,speedup,1.3,x,Table 1,,0.1,speedup",
                           "p,T1,m,b,latency,2.0,s,Table 1,,0.1,timing",
                           "p,T1,m,c,oom,1,bool,Table 1,,0,structural")
    figures = tmp_path / "figures"
    (figures / "nb").mkdir(parents=True)
    _modelled(("a", "speedup", 1.2), ("b", "latency", 2.1), ("c", "oom", 1.0)).to_csv(figures / "nb" / "results.csv",
                                                                                      index=False)
    write_report(figures, data)
    board = pd.read_csv(figures / "fidelity.csv")
    assert board.set_index("setting").loc["a", "gain_error"] == pytest.approx(-1 / 3)
    report = (figures / "REPORT.md").read_text()
    assert "## Summary per paper and class" in report and "validation_median_abs_gain_error" in report
    for klass in ("speedup", "timing", "structural"):
        assert f"| p | {klass} |" in report and f"| all | {klass} |" in report


# ---- calibration flags vs provenance ------------------------------------------------------------------
def test_calibration_flags_agree_with_the_constants_both_ways():
    assert calibration_mismatches(load_reported(), provenance_constants()) == []


def test_constants_fitted_on_sec_3_3_are_fitted_not_derived():
    consts = provenance_constants()
    for key in ("tpi_mac_pro_m1.mem_DRAM_bandwidth", "tpi_mac_pro_m1.storage_read_bandwidth"):
        assert consts[key].kind == "fitted" and "Sec. 3.3" in consts[key].fitted_on


def _constant(kind, fitted_on=""):
    return Constant("c", 1.0, "1", kind, "somewhere", fitted_on)


@pytest.mark.parametrize("constants, fitted, message", [
    ({"dev.alpha": _constant("derived")}, "dev.alpha", "whose kind is 'derived', not 'fitted'"),
    ({"dev.alpha": _constant("fitted", "p,T2,m,s,latency")}, "dev.alpha", "fitted_on does not name this row"),
    ({"dev.alpha": _constant("fitted", "q,T1,m,s,latency")}, "dev.beta", "which is no fitted constant of p"),
    ({"dev.alpha": _constant("fitted", "p,T1,m,s,latency"), "dev.beta": _constant("fitted", "p,T1,m,s,latency")},
     "dev.alpha", "dev.beta: fitted on 'p,T1,m,s,latency', but no reported row names it"),
    ({"dev.alpha": _constant("fitted", "p,T1,m,s,latency"), "dev.gamma": _constant("derived", "p T1 latency")},
     "dev.alpha", "dev.gamma: kind 'derived' but it says fitted_on"),
])
def test_calibration_check_finds_each_disagreement(constants, fitted, message):
    rows = pd.DataFrame([_row("s", "latency", 1.0, "timing", fitted=fitted)])
    problems = calibration_mismatches(rows, constants)
    assert len(problems) == 1 and message in problems[0], problems


def test_a_bare_fitted_name_resolves_within_its_paper():
    constants = {"dev_a.alpha": _constant("fitted", "p T1 latency"), "dev_b.alpha": _constant("fitted", "q T1 latency")}
    assert calibration_mismatches(pd.DataFrame([_row("s", "latency", 1.0, "timing", fitted="alpha")]),
                                  {k: v for k, v in constants.items() if k == "dev_a.alpha"}) == []
    assert fidelity.resolve_fitted("alpha", "p", constants) == "dev_a.alpha"
    assert fidelity.resolve_fitted("alpha", "r", constants) is None


# ---- the fits read calibration rows only, and every calibration row is read by a fit ------------------------
PAPER_MODULES = {"galaxy": G, "mcu_siracusa": M, "sti": S, "tpi_llm": T}
FITS = {  # the functions that fit constants on reported rows, per paper
    "galaxy": (G.fit_nano_cpu_efficiency, G.fit_a100_layer_overhead),
    "mcu_siracusa": (M.fit_constants,),
    "sti": (S.fit_odroid,),
    "tpi_llm": (T.fit_memory_constants, T.fit_emulated_constants, T.fit_laptop_constants),
}
# Read by a fit as an input, not fitted on: the M1 disk rate divides Table 4's block bytes by Sec. 3.3's load
# times (the calibration rows); the modelled block sizes do not depend on the rate, so these rows validate.
FIT_INPUTS = {("tpi_llm", "Table 4", "Llama 2-7B", "n=4,p=0.25,fp32", q) for q in ("attention_block_size",
                                                                                    "ffn_block_size")}
# Fitted by hand (a discrete or bracketing choice, no fit function): the rows are checked against fitted_on only.
HAND_FITTED = {"galaxy.activation_bits_a100", "tpi_mac_pro_m1.swap_capacity"}


def _run_fits(paper: str, frame: pd.DataFrame, monkeypatch) -> list:
    for module in (fidelity, *PAPER_MODULES.values()):
        if hasattr(module, "load_reported"):
            monkeypatch.setattr(module, "load_reported", lambda *a, **k: frame.copy())
    return [fit() for fit in FITS[paper]]


@functools.cache
def _baseline(paper: str) -> list:
    """The paper's fitted values from the stored reported rows (computed once)."""
    return [fit() for fit in FITS[paper]]


def _keys(frame: pd.DataFrame) -> list[tuple]:
    return list(zip(*(frame[c] for c in KEY_COLUMNS), strict=True))


@pytest.mark.parametrize("paper", sorted(FITS))
def test_fits_read_no_validation_row(paper, monkeypatch):
    """Scaling every validation row (fit inputs aside) leaves every fitted value unchanged."""
    frame = load_reported()
    base = _baseline(paper)
    scale = (frame["fitted"] == "") & ~pd.Series([k in FIT_INPUTS for k in _keys(frame)], index=frame.index)
    assert scale.sum() > 100
    assert _run_fits(paper, frame.assign(value=np.where(scale, frame["value"] * 1.37, frame["value"])),
                     monkeypatch) == base


def _code_fitted_rows() -> list[tuple]:
    frame = load_reported()
    rows = []
    for row in frame[frame["fitted"] != ""].itertuples(index=False):
        keys = {fidelity.resolve_fitted(n, row.paper, provenance_constants()) for n in fidelity.fitted_names(row.fitted)}
        if not keys <= HAND_FITTED:
            rows.append((row.paper, row.artifact, row.model, row.setting, row.quantity))
    return rows


@pytest.mark.parametrize("key", _code_fitted_rows(), ids=lambda k: " / ".join(k[1:]))
def test_every_calibration_row_moves_its_fit(key, monkeypatch):
    """A row flagged calibration is really fitted on: a 2 % change of it changes a fitted value of its paper."""
    frame = load_reported()
    paper = key[0]
    base = _baseline(paper)
    hit = pd.Series([k == key for k in _keys(frame)], index=frame.index)
    assert hit.sum() == 1
    assert _run_fits(paper, frame.assign(value=np.where(hit, frame["value"] * 1.02, frame["value"])),
                     monkeypatch) != base
