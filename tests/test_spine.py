"""Runner, fidelity scoreboard, atomic outputs, provenance, notebook conventions."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from workbench.core.constants import check_provenance, load_constants
from workbench.core.errors import WorkbenchError
from workbench.core.io import NOTEBOOKS_DIR, REPO_ROOT, write_csv_atomic
from workbench.report import fidelity
from workbench.report.runner import list_notebooks, parse_parameters, route_parameters, select_notebooks

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import py2nb  # noqa: E402


def test_parse_parameters_literals_and_strings():
    assert parse_parameters(["chips=8", "model=TinyLlama-42M", "bw=[1, 2]"]) == {
        "chips": 8, "model": "TinyLlama-42M", "bw": [1, 2]}
    with pytest.raises(WorkbenchError, match="key=value"):
        parse_parameters(["oops"])


def test_unknown_parameter_and_notebook_are_errors():
    with pytest.raises(WorkbenchError, match="unknown parameter 'no_such_knob'"):
        route_parameters(["models"], {"no_such_knob": 1})
    with pytest.raises(WorkbenchError, match="unknown notebook"):
        select_notebooks(["nope"])
    assert route_parameters(["models"], {"seq_len": 4}) == {"models": {"seq_len": 4}}


def test_cli_reports_unknown_parameter_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "workbench", "reproduce", "--only", "models", "-p", "zzz=1"],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: unknown parameter 'zzz'")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_scoreboard_keeps_rows_without_modelled_values(tmp_path):
    reported = pd.DataFrame([
        dict(paper="p", artifact="T1", model="m", setting="s", quantity="q", value=10.0, unit="ms",
             source="Table 1", fitted="", tolerance=0.1),
        dict(paper="p", artifact="T1", model="m", setting="s2", quantity="q", value=20.0, unit="ms",
             source="Table 1", fitted="alpha", tolerance=0.1)])
    modelled = pd.DataFrame([dict(paper="p", artifact="T1", model="m", setting="s", quantity="q", value=12.0, unit="ms")])
    board = fidelity.scoreboard(reported, modelled)
    assert len(board) == 2
    first, second = board.iloc[0], board.iloc[1]
    assert first.relative_error == pytest.approx(0.2) and first.within_tolerance == "no" and first.role == "validation"
    assert pd.isna(second.modelled) and second.role == "calibration"


def test_reported_data_is_well_formed():
    reported = fidelity.load_reported()
    assert len(reported) > 0
    assert (reported["source"].str.len() > 0).all()


def test_every_constant_has_provenance():
    check_provenance()


def test_fitted_constant_without_fitted_on_is_rejected(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[alpha]\nvalue = 1.0\nunit = "-"\nkind = "fitted"\nsource = "fit"\n')
    with pytest.raises(WorkbenchError, match="fitted_on"):
        load_constants(f)
    f.write_text('[alpha]\nvalue = 1.0\nunit = "-"\n')
    with pytest.raises(WorkbenchError, match="provenance"):
        load_constants(f)


def test_atomic_csv_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.csv"
    write_csv_atomic(target, pd.DataFrame({"a": [1, 2]}))

    class Boom(pd.DataFrame):
        def to_csv(self, *a, **k):
            Path(a[0]).write_text("half")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_csv_atomic(target, Boom({"a": [3]}))
    assert target.read_text().splitlines() == ["a", "1", "2"]
    assert not [p for p in tmp_path.iterdir() if p.name != "out.csv"]


@pytest.mark.parametrize("name", list_notebooks())
def test_notebook_conventions(name):
    nb = json.loads((NOTEBOOKS_DIR / f"{name}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert not any(c.get("outputs") for c in code), "committed with outputs"
    tagged = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    for p in ("figures_dir", "interactive", "quick"):
        assert f"{p} =" in "".join(tagged[0]["source"]), f"parameters cell lacks {p}"
    src = NOTEBOOKS_DIR / "src" / f"{name}.py"
    assert src.exists(), "every notebook has its percent-format source in notebooks/src/"
    expected = py2nb.convert(src.read_text())
    assert [c["source"] for c in expected["cells"]] == [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb["cells"]
    ], "notebook out of sync with notebooks/src: run scripts/py2nb.py"


def test_outputs_get_the_users_normal_mode(tmp_path):
    import os
    import stat

    from workbench.core.io import write_text_atomic

    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
