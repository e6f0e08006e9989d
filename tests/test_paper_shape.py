"""Every paper module has one shape (`workbench.papers.base`), and docs/development.md's "Adding a paper" is true: the
template in tests/toy_paper/, copied under a new paper's name with only the lines that name it changed,
loads its constants, reports, runs its notebook and scores within tolerance."""

import ast
import importlib
import importlib.util
import json
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

import pandas as pd
import pytest

import workbench.core.constants as constants_module
from workbench.core.constants import load_constants, paper_constants, paper_values, values
from workbench.core.errors import WorkbenchError
from workbench.core.io import DATA_DIR, REPO_ROOT
from workbench.papers.base import PaperSetting
from workbench.report import fidelity
from workbench.report.results import RESULT_COLUMNS
from workbench.report.runner import notebook_parameters

PAPERS = ("galaxy", "hepti", "mcu_siracusa", "sti", "tpi_llm")
SURFACE = ("PAPER", "constants", "Setting", "reported", "reported_value")
TEMPLATE = Path(__file__).parent / "toy_paper"
# template file -> where a new paper puts it (docs/development.md, "Adding a paper"); {p} is the paper's key
COPIES = {"toy.toml": "data/constants/{p}.toml", "toy.csv": "data/reported/{p}.csv",
          "toy.py": "workbench/papers/{p}.py", "toy_notebook.py": "notebooks/src/{p}.py"}
NEW = "sixth"  # the demonstration's paper key


def _check_shape(module, data_dir: Path = DATA_DIR) -> None:
    """The public names every paper module exposes, each behaving the same way."""
    missing = [n for n in SURFACE if not hasattr(module, n)]
    assert not missing, f"{module.__name__} lacks {missing}"
    paper = module.PAPER
    assert module.__name__.rsplit(".", 1)[-1] == paper
    assert dict(module.constants()) == values(load_constants(data_dir / "constants" / f"{paper}.toml"))
    assert module.constants() is module.constants()  # read once per process
    assert issubclass(module.Setting, PaperSetting) and is_dataclass(module.Setting)
    setting = module.Setting.from_constants()
    assert module.Setting.from_constants(**{f.name: None for f in fields(setting)}) == setting  # None: the paper's
    with pytest.raises(WorkbenchError, match="unknown"):
        module.Setting.from_constants(no_such_setting=1)
    rows = module.reported()
    assert len(rows) and (rows["paper"] == paper).all()
    first = rows.iloc[0]
    assert module.reported_value(first.artifact, first.model, first.setting, first.quantity) == first.value
    with pytest.raises(WorkbenchError, match=f"no reported {paper} value"):
        module.reported_value("no such artifact", "", "", "")
    assert hasattr(module, "pattern_checks") == hasattr(module, "pattern_rows")


@pytest.mark.parametrize("paper", PAPERS)
def test_every_paper_module_has_the_same_public_names(paper):
    _check_shape(importlib.import_module(f"workbench.papers.{paper}"))


@pytest.mark.parametrize("paper", PAPERS)
def test_no_paper_module_keeps_its_own_loader_or_row_helper(paper):
    """Constants come through `constants.paper_values`, reported numbers through `papers.base`, rows through
    `results.result_row(s)`: no module loads a file itself or builds rows its own way."""
    tree = ast.parse((REPO_ROOT / "workbench" / "papers" / f"{paper}.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert not imported & {"load_constants", "load_reported", "Constant"}
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert not defined & {"_row", "_frame", "paper_constants", "const_value"}


def test_setting_overrides_and_checks():
    from workbench.papers import galaxy

    s = galaxy.Setting.from_constants(seq_len=128)
    assert s.seq_len == 128 and s.bandwidth_mbps == galaxy.constants()["bandwidth_table4"]
    with pytest.raises(WorkbenchError, match="must be > 0"):
        galaxy.Setting.from_constants(bandwidth_mbps=-1)


# ---- the template, copied as a sixth paper -------------------------------------------------------------
def _copy_template(root: Path, paper: str) -> dict[str, list[int]]:
    """Copy every template file under `paper`'s name; return, per copy, the line numbers changed."""
    changed = {}
    for src, dst in COPIES.items():
        text = (TEMPLATE / src).read_text()
        new = text.replace("toy", paper)
        target = root / dst.format(p=paper)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(new)
        changed[dst.format(p=paper)] = [i for i, (a, b) in enumerate(zip(text.splitlines(), new.splitlines()), 1)
                                        if a != b]
    return changed


@pytest.fixture
def sixth(tmp_path, monkeypatch):
    """The template copied into a scratch repository as paper `NEW`, importable as workbench.papers.<NEW>."""
    changed = _copy_template(tmp_path, NEW)
    data = tmp_path / "data"
    load = fidelity.load_reported
    monkeypatch.setattr(constants_module, "DATA_DIR", data)
    monkeypatch.setattr(fidelity, "load_reported", lambda data_dir=data: load(data_dir))
    name = f"workbench.papers.{NEW}"
    spec = importlib.util.spec_from_file_location(name, tmp_path / "workbench" / "papers" / f"{NEW}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    paper_constants.cache_clear()
    paper_values.cache_clear()
    yield module, tmp_path, changed
    paper_constants.cache_clear()
    paper_values.cache_clear()


def test_the_template_copies_as_a_sixth_paper_changing_only_the_lines_that_name_it(sixth):
    module, root, changed = sixth
    lines = (TEMPLATE / "toy_notebook.py").read_text().splitlines()
    import_line = 1 + next(i for i, line in enumerate(lines) if line.startswith("from workbench.papers import"))
    assert changed == {f"data/constants/{NEW}.toml": [1, 8, 14, 20, 26, 32],  # the sources' prose
                       f"data/reported/{NEW}.csv": [2, 3],  # the paper column
                       f"workbench/papers/{NEW}.py": [22],  # PAPER = "..."
                       f"notebooks/src/{NEW}.py": [import_line]}  # from workbench.papers import ... as wb
    _check_shape(module, root / "data")
    frame = module.scaling()
    assert frame.speedup.is_monotonic_increasing and (frame.speedup <= frame.devices).all()
    assert module.pattern_checks().holds.all()
    rows = module.scaling_rows(frame)
    assert list(rows.columns) == RESULT_COLUMNS and (rows.paper == NEW).all()


def _run_notebook(source: Path, params: dict) -> dict:
    """Execute a percent-format notebook source cell by cell, `params` injected after the parameters cell
    (as papermill does); returns its namespace."""
    namespace = {"display": lambda *a, **k: None}
    cells = source.read_text().split("# %%")
    for cell in cells[1:]:
        header, _, body = cell.partition("\n")
        if "[markdown]" not in header:
            exec(compile(body, str(source), "exec"), namespace)  # noqa: S102 - the template's own notebook
        if "parameters" in header:
            namespace.update(params)
    return namespace


def test_the_sixth_papers_notebook_runs_records_and_scores_within_tolerance(sixth):
    module, root, _ = sixth
    source = root / "notebooks" / "src" / f"{NEW}.py"
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        from py2nb import convert
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))
    notebook = convert(source.read_text())
    params = [c for c in notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    ipynb = root / "notebooks" / f"{NEW}.ipynb"
    ipynb.write_text(json.dumps(notebook))
    assert {"figures_dir", "interactive", "quick"} <= notebook_parameters(ipynb)
    ns = _run_notebook(source, {"figures_dir": str(root / "figures"), "interactive": False, "quick": False})
    results = pd.read_csv(root / "figures" / NEW / "results.csv")
    assert list(results.columns) == RESULT_COLUMNS and (results.paper == NEW).all()
    board = ns["board"]
    assert len(board) == len(module.reported()) and (board.within_tolerance == "yes").all(), board


def test_readme_lists_the_template_files():
    section = (REPO_ROOT / "docs" / "development.md").read_text().split("## Adding a paper", 1)[1].split("\n## ", 1)[0]
    for src, dst in COPIES.items():
        assert f"tests/toy_paper/{src}" in section and dst.format(p="<paper>") in section
