"""`python -m workbench calibrate`: fits only calibration rows, recovers known constants, refuses bad input."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench import calibrate as C
from workbench.errors import WorkbenchError
from workbench.io import REPO_ROOT
from workbench.userconfig import config_from_text, parse_config, read_document

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
