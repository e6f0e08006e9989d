"""`python -m workbench reproduce`: a notebook's folder is replaced as a whole only when it succeeds (also under
Ctrl-C), REPORT.md and fidelity.csv follow `figures_dir`, and the report lists the non-default parameters."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sigint import python_sigint, restore_default_sigint

from workbench.core.errors import WorkbenchError
from workbench.core.io import NOTEBOOKS_DIR, REPO_ROOT
from workbench.report.fidelity import write_report
from workbench.report.results import PARAMETERS_FILE, read_parameters, write_parameters
from workbench.report.runner import (
    STAGING_PREFIX,
    ensure_kernel,
    figures_target,
    non_default_parameters,
    notebook_defaults,
    reproduce,
    run_notebook,
    sigint_held,
    swap_in,
)

# A tiny notebook: writes a chart-like file and results.csv through the Recorder, then fails if `fail`.
FAKE_SOURCE = """\
from workbench.report.results import Recorder
rec = Recorder("fake", figures_dir)
rec.out_dir.mkdir(parents=True, exist_ok=True)
(rec.out_dir / "new.csv").write_text("new\\n")
rec.write()
if fail:
    raise ValueError("fake failure")
"""


def _fake_notebooks(tmp_path: Path) -> Path:
    """A notebooks folder holding `fake.ipynb` (parameters: figures_dir, interactive, quick, fail=True)."""
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    params = "figures_dir = None\ninteractive = True\nquick = False\nfail = True  # raise after writing"
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": params, "outputs": [],
              "execution_count": None, "id": "a"},
             {"cell_type": "code", "metadata": {}, "source": FAKE_SOURCE, "outputs": [], "execution_count": None,
              "id": "b"}]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "workbench", "display_name": "w", "language": "python"}}}
    (nbdir / "fake.ipynb").write_text(json.dumps(nb))
    return nbdir


def _old_folder(figures: Path, name: str) -> dict[str, str]:
    """Create figures/<name>/ with an old results.csv and chart; return its contents."""
    folder = figures / name
    folder.mkdir(parents=True)
    (folder / "results.csv").write_text("old results\n")
    (folder / "old_chart.svg").write_text("<svg/>\n")
    return _contents(folder)


def _contents(folder: Path) -> dict[str, str]:
    """Relative path -> text of every file under `folder`."""
    return {str(p.relative_to(folder)): p.read_text(errors="replace") for p in sorted(folder.rglob("*")) if p.is_file()}


def _leftovers(figures: Path) -> list[Path]:
    """Temporary folders or files the runner or the atomic writes left under `figures`."""
    return [p for p in figures.rglob("*") if p.name.startswith(STAGING_PREFIX) or p.name.endswith(".tmp")]


# ---- the swap ------------------------------------------------------------------------------------------------
def test_swap_in_replaces_the_folder_as_a_whole(tmp_path):
    target, new, attic = tmp_path / "nb", tmp_path / "stage" / "nb", tmp_path / "stage"
    _old_folder(tmp_path, "nb")
    new.mkdir(parents=True)
    (new / "results.csv").write_text("new\n")
    swap_in(new, target, attic)
    assert _contents(target) == {"results.csv": "new\n"}
    assert not new.exists() and _contents(attic / "old-nb") == {"old_chart.svg": "<svg/>\n", "results.csv": "old results\n"}


def test_swap_in_puts_the_old_folder_back_when_the_second_rename_fails(tmp_path, monkeypatch):
    old = _old_folder(tmp_path, "nb")
    (tmp_path / "stage").mkdir()
    real, calls = os.replace, []

    def flaky(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(KeyboardInterrupt):
        swap_in(tmp_path / "stage" / "missing", tmp_path / "nb", tmp_path / "stage")
    assert _contents(tmp_path / "nb") == old


def test_sigint_is_held_until_the_block_ends():
    reached = False
    with python_sigint(), pytest.raises(KeyboardInterrupt):
        with sigint_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached = True
    assert reached


# ---- notebooks through the runner ----------------------------------------------------------------------------
@pytest.mark.slow
def test_failing_notebook_leaves_its_old_folder_untouched(tmp_path):
    ensure_kernel()
    figures = tmp_path / "figures"
    old = _old_folder(figures, "fake")
    run = run_notebook("fake", {}, figures, notebooks_dir=_fake_notebooks(tmp_path), progress=False)
    assert run.error is not None and "fake failure" in run.error
    assert _contents(figures / "fake") == old  # no executed notebook of the failed run inside it
    assert _leftovers(figures) == [] and sorted(p.name for p in figures.iterdir()) == ["fake", "fake.failed.ipynb"]
    assert str(figures / "fake.failed.ipynb") in run.error
    assert "fake failure" in (figures / "fake.failed.ipynb").read_text()


@pytest.mark.slow
def test_successful_notebook_replaces_its_folder_and_records_its_parameters(tmp_path):
    ensure_kernel()
    figures = tmp_path / "figures"
    _old_folder(figures, "fake")
    old_mask = os.umask(0o022)
    try:
        run = run_notebook("fake", {"fail": False, "quick": False}, figures, notebooks_dir=_fake_notebooks(tmp_path),
                           progress=False)
    finally:
        os.umask(old_mask)
    assert run.error is None
    # old chart gone; the executed notebook beside the outputs it made
    assert sorted(_contents(figures / "fake")) == ["fake.ipynb", "new.csv", PARAMETERS_FILE, "results.csv"]
    assert read_parameters(figures / "fake") == {"fail": False}  # quick=False is the default
    assert stat.S_IMODE((figures / "fake").stat().st_mode) == 0o755
    assert _leftovers(figures) == []


@pytest.mark.slow
def test_report_follows_the_figures_dir_parameter_and_lists_non_default_parameters(tmp_path, capsys):
    nbdir, default, chosen = _fake_notebooks(tmp_path), tmp_path / "default", tmp_path / "chosen"
    runs = reproduce(only=["fake"], params={"fail": False, "figures_dir": str(chosen)}, figures_dir=default,
                     notebooks_dir=nbdir, build_dir=tmp_path / "b", progress=False)
    assert [r.error for r in runs] == [None]
    assert (chosen / "fake" / "results.csv").exists()
    assert (chosen / "fidelity.csv").exists() and (chosen / "REPORT.md").exists()
    assert not (default / "REPORT.md").exists() and not (default / "fidelity.csv").exists()
    assert "- **fake**: `fail=False`" in (chosen / "REPORT.md").read_text()
    assert str(chosen / "REPORT.md") in capsys.readouterr().out


# ---- Ctrl-C during `reproduce` -------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigint_during_reproduce_leaves_no_mixed_folder(tmp_path):
    ensure_kernel()
    figures = tmp_path / "figures"
    old = _old_folder(figures, "models")
    before = set(figures.rglob("*"))
    cmd = [sys.executable, "-m", "workbench", "reproduce", "--only", "models", "arena", "--no-progress",
           "-p", "quick=True", "-p", f"figures_dir={figures}"]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=restore_default_sigint)
    try:
        deadline = time.monotonic() + 120
        while not [p for p in figures.rglob("*") if p.is_file() and p not in before and p.suffix != ".tmp"]:
            # wait for the first new chart file, complete (its atomic write done), so the run is mid-notebook
            assert proc.poll() is None and time.monotonic() < deadline, "no output before the run ended"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, "the run finished before the interrupt"
    assert "interrupted during models" in err
    time.sleep(1.5)  # a kernel still writing would show up now
    assert _leftovers(figures) == []
    assert sorted(p.name for p in figures.iterdir()) == ["models"]  # no folder for arena, which never started
    assert _contents(figures / "models") == old


# ---- parameters and bad input ----------------------------------------------------------------------------------
def test_non_default_parameters_compare_with_the_notebooks_defaults():
    defaults = notebook_defaults(NOTEBOOKS_DIR / "galaxy.ipynb")
    params = {"bandwidth_mbps": 125, "model": "OPT-L", "quick": True, "figures_dir": "x", "interactive": False,
              "seq_len": 284.0, "devices": None, "environment": "B"}
    assert non_default_parameters(params, defaults) == {"model": "OPT-L", "quick": True}
    assert non_default_parameters({"quick": 0}, {"quick": "False"}) == {"quick": 0}  # 0 is not False
    assert non_default_parameters({"x": 1}, {"x": "some_call()"}) == {"x": 1}  # a non-literal default


def test_report_says_per_notebook_which_parameters_differed(tmp_path):
    for name, params in (("a", {"model": "OPT-L", "quick": True}), ("b", {}), ("c", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.csv").write_text("paper,artifact,model,setting,quantity,value,unit\n")
        if params is not None:
            write_parameters(tmp_path / name, params)
    write_report(tmp_path)
    report = (tmp_path / "REPORT.md").read_text()
    assert "- **a**: `model='OPT-L'`, `quick=True`" in report
    assert "- **b**: defaults" in report
    assert "- **c**: not recorded" in report
    first = report
    write_report(tmp_path)
    assert (tmp_path / "REPORT.md").read_text() == first  # deterministic


@pytest.mark.parametrize("value, message", [
    ("FILE", "figures_dir='{file}' is a file; it must be a folder"),
    ("FILE/below", "figures_dir='{file}/below' cannot be created"),
    (3, "figures_dir must be a folder path (a string), got 3"),
])
def test_bad_figures_dir_is_a_one_line_error(tmp_path, value, message):
    file = tmp_path / "a_file"
    file.write_text("x")
    value = value.replace("FILE", str(file)) if isinstance(value, str) else value
    with pytest.raises(WorkbenchError) as info:
        figures_target(value)
    assert message.format(file=file) in str(info.value) and "\n" not in str(info.value)


def test_cli_bad_figures_dir_is_one_line(tmp_path):
    file = tmp_path / "a_file"
    file.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "workbench", "reproduce", "--only", "models",
                           "-p", f"figures_dir={file}"], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: figures_dir='{file}' is a file; it must be a folder (new or existing)"


# ---- executed notebooks follow their outputs; the report covers what ran ------------------------------------
@pytest.mark.slow
def test_executed_notebooks_follow_figures_dir_and_a_failure_leaves_them_agreeing(tmp_path):
    ensure_kernel()
    nbdir, default, other = _fake_notebooks(tmp_path), tmp_path / "figures", tmp_path / "other"
    assert run_notebook("fake", {"fail": False}, default, notebooks_dir=nbdir, progress=False).error is None
    first = (default / "fake" / "fake.ipynb").read_text()
    assert "fail = False" in first
    # a parameter run elsewhere leaves the default run's executed notebook alone
    assert run_notebook("fake", {"fail": False, "quick": True}, other, notebooks_dir=nbdir,
                        progress=False).error is None
    assert (default / "fake" / "fake.ipynb").read_text() == first
    assert "quick = True" in (other / "fake" / "fake.ipynb").read_text()
    # a failure in the default folder: outputs and their executed notebook are still the first run's
    assert run_notebook("fake", {}, default, notebooks_dir=nbdir, progress=False).error is not None
    assert (default / "fake" / "fake.ipynb").read_text() == first
    assert (default / "fake.failed.ipynb").exists()
    # the next success removes the failed copy
    assert run_notebook("fake", {"fail": False}, default, notebooks_dir=nbdir, progress=False).error is None
    assert not (default / "fake.failed.ipynb").exists()


@pytest.mark.slow
def test_build_dir_takes_the_executed_notebooks_only_when_they_match_the_outputs(tmp_path):
    ensure_kernel()
    nbdir, figures, build = _fake_notebooks(tmp_path), tmp_path / "figures", tmp_path / "build"
    assert run_notebook("fake", {"fail": False}, figures, notebooks_dir=nbdir, build_dir=build,
                        progress=False).error is None
    assert "fake.ipynb" not in _contents(figures / "fake")
    first = (build / "fake.ipynb").read_text()
    run = run_notebook("fake", {}, figures, notebooks_dir=nbdir, build_dir=build, progress=False)
    assert run.error is not None and str(build / "fake.failed.ipynb") in run.error
    assert (build / "fake.ipynb").read_text() == first and not (figures / "fake.failed.ipynb").exists()


def _results(folder: Path, paper: str, rows: list[tuple]) -> None:
    folder.mkdir(parents=True)
    lines = ["paper,artifact,model,setting,quantity,value,unit"] + [",".join(map(str, (paper, *r))) for r in rows]
    (folder / "results.csv").write_text("\n".join(lines) + "\n")


def test_a_partial_report_covers_only_the_notebooks_that_ran(tmp_path):
    from workbench.report.fidelity import load_reported

    reported = load_reported()
    galaxy = reported[reported.paper == "galaxy"].iloc[0]
    key = (galaxy.artifact, galaxy.model, f'"{galaxy.setting}"', galaxy.quantity, galaxy.value, galaxy.unit)
    _results(tmp_path / "galaxy", "galaxy", [key])
    sti = reported[reported.paper == "sti"].iloc[0]
    _results(tmp_path / "sti", "sti", [(sti.artifact, sti.model, f'"{sti.setting}"', sti.quantity, sti.value,
                                         sti.unit)])  # a stale folder of an earlier run
    board = write_report(tmp_path, notebooks=["galaxy"])
    assert set(board.paper) == {"galaxy"} and len(board) == (reported.paper == "galaxy").sum()
    assert board.modelled.notna().sum() == 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "| sti |" not in report and "**sti**" not in report and "| hepti |" not in report
    assert "covers the notebooks galaxy only" in report
    full = write_report(tmp_path)
    assert set(full.paper) == set(reported.paper) and full.modelled.notna().sum() == 2
