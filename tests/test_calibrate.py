"""`python -m workbench calibrate`: fits only calibration rows, recovers known constants, refuses bad input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.scenarios import calibrate as C
from workbench.scenarios.userconfig import config_from_text, parse_config, read_document

EXAMPLE = REPO_ROOT / "examples" / "sbc_gigabit.toml"
TRUE = {"kernel_launch_us": 30.0, "message_overhead_us": 200.0}


def _rows(document: dict) -> pd.DataFrame:
    rows = pd.DataFrame([dict(scheme="megatron_tp", devices=d, phase=p, tokens=t, latency_s=1.0, role=r)
                         for d, p, t, r in [(1, "decode", 128, "calibration"), (2, "decode", 128, "calibration"),
                                            (4, "decode", 128, "calibration"), (4, "prefill", 64, "validation")]])
    rows["latency_s"] = C.predict(C.with_values(document, TRUE), rows, "sbc", None)
    return rows


def test_a_fit_recovers_the_constants_that_made_the_rows():
    document = read_document(EXAMPLE)
    fit = C.calibrate(document, _rows(document), list(TRUE), "sbc")
    for name, value in TRUE.items():
        assert fit.values[name] == pytest.approx(value, rel=1e-3)
    assert fit.rows["error_after"].abs().max() < 1e-3
    assert fit.rows["error_before"].abs().max() > 0.1  # the stored example had no fixed costs


def test_validation_rows_are_never_fitted():
    document = read_document(EXAMPLE)
    rows = _rows(document)
    rows.loc[rows.role == "validation", "latency_s"] *= 10  # a wild validation row must not move the fit
    fit = C.calibrate(document, rows, list(TRUE), "sbc")
    assert fit.values["kernel_launch_us"] == pytest.approx(TRUE["kernel_launch_us"], rel=1e-3)
    val = fit.rows[fit.rows.role == "validation"]
    assert float(val["error_after"].iloc[0]) == pytest.approx(-0.9, abs=1e-3)


def test_the_written_toml_reads_back_with_the_fitted_values_and_their_citation():
    document = read_document(EXAMPLE)
    fit = C.calibrate(document, _rows(document), list(TRUE), "sbc")
    text = C.to_toml(C.cite(fit.document, fit.values, "measured.csv", [2, 3, 4]))
    config = config_from_text(text, "fitted.toml")
    assert config.cluster.devices[0].kernel_launch_s == pytest.approx(30e-6, rel=1e-3)
    assert config.cluster.topology.link.message_overhead_s == pytest.approx(200e-6, rel=1e-3)
    assert "kind = fitted; fitted_on = measured.csv calibration rows (lines 2, 3, 4)" in text


def test_cli_writes_the_fitted_config(tmp_path, capsys):
    from workbench.__main__ import main

    document = read_document(EXAMPLE)
    _rows(document).to_csv(tmp_path / "m.csv", index=False)
    out = tmp_path / "fitted.toml"
    assert main(["calibrate", str(EXAMPLE), str(tmp_path / "m.csv"), "--fit", "kernel_launch_us,message_overhead_us",
                 "--out", str(out)]) == 0
    assert parse_config(read_document(out), "fitted.toml").cluster.n == 4
    assert (tmp_path / "fitted.rows.csv").exists()
    assert "validation: median |error|" in capsys.readouterr().out


@pytest.mark.parametrize("edit,match", [
    (lambda f: f.drop(columns="role"), "missing column role"),
    (lambda f: f.assign(role="train"), "role must be one of calibration, validation"),
    (lambda f: f.assign(phase="both"), "phase must be prefill or decode"),
    (lambda f: f.assign(latency_s=-1.0), "latency_s must be a finite number"),
    (lambda f: f.assign(tokens=0), r"tokens must be an integer in \[1"),
    (lambda f: f.assign(devices=2.5), r"devices must be an integer in \[1, 1024\]"),
    (lambda f: f.iloc[:0], "no rows"),
])
def test_bad_measurements_are_one_line_errors(tmp_path, edit, match):
    frame = pd.DataFrame([dict(scheme="local", devices=1, phase="decode", tokens=8, latency_s=0.1,
                               role="calibration")])
    edit(frame).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(WorkbenchError, match=match):
        C.read_measurements(tmp_path / "m.csv")


def test_bad_fit_requests():
    with pytest.raises(WorkbenchError, match="not fittable"):
        C.parse_fit_names("peak_gflops")
    with pytest.raises(WorkbenchError, match="twice"):
        C.parse_fit_names("latency_ms,latency_ms")
    document = read_document(EXAMPLE)
    rows = _rows(document).iloc[[0, 3]]
    with pytest.raises(WorkbenchError, match="at least as many calibration rows"):
        C.calibrate(document, rows, list(TRUE), "sbc")
    with pytest.raises(WorkbenchError, match="unknown scheme"):
        C.predict(document, rows.assign(scheme="warp_drive"), "sbc", None)


cells = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 2000), st.text(max_size=4),
                  st.sampled_from(["prefill", "decode", "calibration", "validation", "local"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({c: cells for c in C.COLUMNS}), min_size=1, max_size=4))
def test_random_measurement_files_give_one_line_errors_or_load(tmp_path, rows):
    path = tmp_path / "random.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    try:
        frame = C.read_measurements(path)
    except WorkbenchError as exc:
        assert "\n" not in str(exc)
        return
    assert set(frame.role) <= set(C.ROLES)
    assert all(math.isfinite(v) and v > 0 for v in frame.latency_s)


# ---- only what it fitted: sensitivities, refusals, caveats (issue 31) ----------------------------------------
def _cli(tmp_path, rows: pd.DataFrame, fit: str, *extra: str) -> tuple[int, object]:
    """Run `python -m workbench calibrate` in-process on `rows`; (exit code, the fitted TOML path)."""
    from workbench.__main__ import main

    rows.to_csv(tmp_path / "m.csv", index=False)
    out = tmp_path / "fitted.toml"
    return main(["calibrate", str(EXAMPLE), str(tmp_path / "m.csv"), "--fit", fit, "--out", str(out), *extra]), out


def test_sensitivities_say_which_constants_move_which_rows():
    document = read_document(EXAMPLE)
    cal = _rows(document).iloc[:3]  # memory-bound decode steps on 1, 2 and 4 devices
    table = C.starting_sensitivities(document, cal, ["kernel_launch_us"], "sbc")
    assert list(table.columns) == list(C.FITTABLE)
    assert (table["efficiency_gemv"].abs() < C.SENSITIVITY_FLOOR).all()
    assert (table["efficiency_gemm"].abs() < C.SENSITIVITY_FLOOR).all()
    for name in ("message_overhead_us", "latency_ms", "bandwidth_mbps"):  # no messages on one device, some on 2, 4
        assert abs(table[name].iloc[0]) < C.SENSITIVITY_FLOOR and (table[name].iloc[1:].abs() > 1e-3).all(), name
    assert -1.01 < table["memory_efficiency"].iloc[0] < -0.9  # the one-device step is mostly streaming weights
    assert (table["kernel_launch_us"] > 1e-3).all() and (table["bandwidth_mbps"].iloc[1:] < 0).all()
    at_zero = C.sensitivities(C.with_values(document, {"kernel_launch_us": 0.0}), cal, "sbc")["kernel_launch_us"]
    assert (at_zero > 1e-3).all() and at_zero.map(math.isfinite).all()  # an overhead at 0 steps by its typical size


@pytest.mark.parametrize("name,edit,why", [
    ("efficiency_gemv", lambda f: f.iloc[:3], "the calibration rows are memory-bound decode steps"),
    ("message_overhead_us", lambda f: f.iloc[[0]], "the calibration rows are one-device rows"),
    ("bandwidth_mbps", lambda f: f.iloc[[0]], "the calibration rows are one-device rows"),
    ("latency_ms", lambda f: f.iloc[[0]].drop(columns="devices").assign(scheme="local"),
     "the calibration rows send no messages"),
])
def test_a_constant_the_calibration_rows_do_not_move_is_refused_saying_why_and_what_would(tmp_path, capsys, name,
                                                                                          edit, why):
    document = read_document(EXAMPLE)
    rows = edit(_rows(document))
    with pytest.raises(WorkbenchError) as refused:
        C.calibrate(document, rows, [name], "sbc")
    assert str(refused.value) == (f"--fit {name}: {why}: {name} moves none of them (|d log latency / d log {name}| "
                                  f"< 1e-06 on all {len(rows)} calibration rows); memory_efficiency would move them "
                                  "(|sensitivity| up to 1)")
    code, out = _cli(tmp_path, rows, name)
    printed = capsys.readouterr()
    assert code == 2 and not out.exists() and printed.err.count("\n") == 1 and why in printed.err
    assert "sensitivity of each calibration row" in printed.out and f" {name}*" in printed.out  # shown first


def test_no_constant_is_written_as_fitted_that_the_calibration_rows_do_not_move(tmp_path):
    document = read_document(EXAMPLE)
    rows = _rows(document).iloc[[0, 0]].assign(tokens=[128, 512])  # one-device decode steps: memory, fixed costs
    table = C.starting_sensitivities(document, rows, [], "sbc")
    unmoved = [n for n in C.FITTABLE if table[n].abs().max() < C.SENSITIVITY_FLOOR]
    assert set(unmoved) == {"efficiency_gemm", "efficiency_gemv", "message_overhead_us", "latency_ms",
                            "bandwidth_mbps"}
    for name in unmoved:
        with pytest.raises(WorkbenchError, match=f"--fit {name}: .* moves none of them"):
            C.calibrate(document, rows, ["kernel_launch_us", name], "sbc")


@pytest.mark.parametrize("name,scale,bound", [("kernel_launch_us", 0.5, "lower bound 0"),
                                              ("memory_efficiency", 0.5, "upper bound 1")])
def test_a_fit_that_ends_on_a_bound_is_not_written_as_fitted_without_force(tmp_path, capsys, name, scale, bound):
    document = read_document(EXAMPLE)
    rows = _rows(document).assign(latency_s=lambda f: f.latency_s * scale)  # faster than any allowed value gives
    fit = C.calibrate(document, rows, [name], "sbc")
    assert [c.names for c in fit.caveats] == [(name,)] and f"ended on its {bound}" in fit.caveats[0].text
    code, out = _cli(tmp_path, rows, name)
    err = capsys.readouterr().err
    assert code == 2 and not out.exists() and err.count("\n") == 1
    assert f"not written as fitted: {name} = " in err and f"ended on its {bound}" in err and "--force" in err
    code, out = _cli(tmp_path, rows, name, "--force")
    assert code == 0 and f"warning: {name} = " in capsys.readouterr().out
    source = read_document(out)["devices"][0]["sources"][name]
    assert source.startswith("kind = fitted") and f"written with --force although {name} = " in source


def test_two_constants_the_rows_cannot_tell_apart_are_not_written_as_fitted_without_force(tmp_path, capsys):
    document = read_document(EXAMPLE)
    rows = _rows(document)  # launches and per-layer costs scale together on every row
    fit = C.calibrate(document, rows, ["kernel_launch_us", "layer_overhead_us"], "sbc")
    assert ("kernel_launch_us", "layer_overhead_us") in [c.names for c in fit.caveats]
    code, out = _cli(tmp_path, rows, "kernel_launch_us,layer_overhead_us")
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "kernel_launch_us and layer_overhead_us are strongly correlated in the fit" in err


def test_the_correlation_and_conditioning_checks_of_a_jacobian():
    names = ["kernel_launch_us", "layer_overhead_us"]
    assert C.correlation_caveats(names, np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])) == []  # r = -0.5
    near = C.correlation_caveats(names, np.array([[1.0, 2.0], [2.0, 4.1], [3.0, 6.0]]))
    assert [c.names for c in near] == [tuple(names)] and "r = -" in near[0].text
    flat = C.correlation_caveats(names, np.array([[1.0, 0.0], [2.0, 0.0]]))  # one constant moves nothing
    assert [c.names for c in flat] == [tuple(names)] and "ill-conditioned" in flat[0].text
    assert C.correlation_caveats(names[:1], np.array([[1.0], [2.0]])) == []


def test_a_calibration_row_that_gets_worse_in_the_fit_is_named(tmp_path, capsys):
    document = read_document(EXAMPLE)
    rows = _rows(document).iloc[:3]
    rows = rows.assign(latency_s=C.predict(document, rows, "sbc", None) * [1.3, 1.3, 1.0])  # the 3rd one exact
    fit = C.calibrate(document, rows, ["memory_efficiency"], "sbc")
    assert list(C.worse_rows(fit.rows).index) == [2] and not fit.caveats
    code, _ = _cli(tmp_path, rows, "memory_efficiency")
    printed = capsys.readouterr().out
    assert code == 0 and printed.count("got worse in the fit") == 1, printed
    table = printed[:printed.index("memory_efficiency = ")].splitlines()  # the sensitivities, printed before the fit
    assert table[0].startswith("sensitivity of each calibration row") and " memory_efficiency* " in table[1]
    assert [line.split()[0] for line in table[2:]] == ["2", "3", "4"] and len(table[2].split()) == 5 + len(C.FITTABLE)
    assert "warning: calibration row line 4 (megatron_tp, decode, 128 tokens) got worse in the fit: error +0.0% -> +" \
        in printed


def test_csv_errors_name_the_line_a_person_counts_and_the_offending_text(tmp_path):
    head = "scheme,devices,phase,tokens,latency_s,role\n"
    good = "local,1,decode,8,0.1,calibration\n"
    cases = [(good + "local,1,decode,8,abc,calibration\n", "m.csv line 3: latency_s must be a finite number of "
              "seconds > 0, got 'abc'"),
             (good + "\n" + "local,1,decode,2.5,0.1,calibration\n", "m.csv line 4: tokens must be an integer in "
              "[1, 1048576], got '2.5'"),
             (good + good + "local,0,decode,8,0.1,calibration\n", "m.csv line 4: devices must be an integer in "
              "[1, 1024], got '0'")]
    for body, message in cases:
        (tmp_path / "m.csv").write_text(head + body)
        with pytest.raises(WorkbenchError) as bad:
            C.read_measurements(tmp_path / "m.csv")
        assert str(bad.value) == message
    (tmp_path / "m.csv").write_text(head + good + "\n" + good.replace("0.1", "0.25"))
    frame = C.read_measurements(tmp_path / "m.csv")
    assert list(frame.line) == [2, 4] and list(frame.latency_s) == [0.1, 0.25] and list(frame.tokens) == [8, 8]


def test_the_fitted_toml_cites_the_lines_the_calibration_rows_are_on(tmp_path):
    document = read_document(EXAMPLE)
    rows = _rows(document)
    path = tmp_path / "m.csv"
    text = rows.to_csv(index=False).splitlines()
    path.write_text("\n".join(text[:2] + [""] + text[2:]) + "\n")  # a blank line after the first row
    from workbench.__main__ import main

    out = tmp_path / "fitted.toml"
    assert main(["calibrate", str(EXAMPLE), str(path), "--fit", "kernel_launch_us,message_overhead_us",
                 "--out", str(out)]) == 0
    assert "calibration rows (lines 2, 4, 5)" in read_document(out)["devices"][0]["sources"]["kernel_launch_us"]


def test_an_unusable_out_is_one_line_before_anything_is_read_or_fitted(tmp_path, capsys):
    from workbench.__main__ import main

    (tmp_path / "file").write_text("")
    for out, message in ((tmp_path / "file" / "x.toml", "its folder"), (tmp_path, "is a folder")):
        # the measurements file does not exist: the --out error proves nothing was read before it
        code = main(["calibrate", str(EXAMPLE), str(tmp_path / "missing.csv"), "--fit", "kernel_launch_us",
                     "--out", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"error: --out {str(out)!r}") and message in err
        assert err.count("\n") == 1


def test_an_unwritable_out_folder_is_one_line_before_anything_is_read(tmp_path, monkeypatch, capsys):
    from workbench.__main__ import main
    from workbench.core import io

    monkeypatch.setattr(io.os, "access", lambda path, mode: False)  # as a non-root user on a read-only folder
    out = tmp_path / "x.toml"
    with pytest.raises(WorkbenchError) as refused:
        io.writable_file(out, "--out 'x.toml'")
    assert str(refused.value) == (f"--out 'x.toml': its folder {str(tmp_path)!r} is not writable; it must be a "
                                  "folder you can write to")
    assert main(["calibrate", str(EXAMPLE), str(tmp_path / "missing.csv"), "--fit", "kernel_launch_us",
                 "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"error: --out {str(out)!r}: its folder {str(tmp_path)!r} is not writable; "
                                       "it must be a folder you can write to\n")
