"""Every notebook runs through papermill with tiny parameters, records its numbers, and shows each chart it
writes inline as a static PNG (its HTML export needs no network for them: no Vega from a CDN)."""

import re
from pathlib import Path

import pandas as pd
import pytest
from table_units import table_problems

from workbench.report.results import RESULT_COLUMNS
from workbench.report.runner import ensure_kernel, list_notebooks, run_notebook


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    ensure_kernel()
    return tmp_path_factory.mktemp("figures"), tmp_path_factory.mktemp("build")


@pytest.mark.slow
@pytest.mark.parametrize("name", list_notebooks())
def test_notebook_executes_and_records_results(name, executed):
    figures, build = executed
    run = run_notebook(name, {"quick": True}, figures, build_dir=build, progress=False)
    assert run.error is None, run.error
    results = pd.read_csv(figures / name / "results.csv", keep_default_na=False)
    assert list(results.columns) == RESULT_COLUMNS
    assert len(results) > 0
    assert pd.to_numeric(results["value"], errors="coerce").notna().all()
    assert_charts_inline(build / f"{name}.ipynb", figures / name)
    assert_tables_readable(build / f"{name}.ipynb")
    assert_no_staging_path(build / f"{name}.ipynb")


def assert_no_staging_path(notebook: Path) -> None:
    """No output shows where a batch run wrote before swapping its folder in (figures/.staging-<name>-*/)."""
    import nbformat

    shown = [str(output) for cell in nbformat.read(notebook, as_version=4).cells for output in cell.get("outputs", [])]
    assert [text for text in shown if ".staging-" in text] == []


def shown_tables(notebook: Path) -> list[str]:
    """The HTML of every table an executed notebook shows."""
    import nbformat

    return [output["data"]["text/html"] for cell in nbformat.read(notebook, as_version=4).cells
            for output in cell.get("outputs", []) if "<table" in output.get("data", {}).get("text/html", "")]


def assert_tables_readable(notebook: Path) -> None:
    """No table the notebook shows prints a number in pandas' raw scientific notation (-2.377283e-01), and each
    number carries its column's unit (tests/table_units.py: no tokens/s as '5.82 s', no bare '56.4 µ')."""
    tables = shown_tables(notebook)
    raw = [found for html in tables for found in re.findall(r"\d\.\d{6}e[+-]\d\d", html)]
    assert raw == [], raw[:5]
    wrong = list(dict.fromkeys(problem for html in tables for problem in table_problems(html)))
    assert wrong == [], wrong[:10]


def assert_charts_inline(notebook: Path, figures: Path) -> None:
    """The executed notebook shows at least one chart and one PNG per chart written to `figures` (named by its
    alternative text), its HTML export embeds them all (data: URIs, no network) and nothing in it is drawn by Vega."""
    import nbformat
    from nbconvert import HTMLExporter

    node = nbformat.read(notebook, as_version=4)
    shown = [output.get("metadata", {}).get("image/png", {}).get("alt", "") for cell in node.cells
             for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]
    assert shown, "the executed notebook shows no chart (a widget alone shows nothing offline)"
    assert sorted(shown) == sorted(f"chart {figures.name}/{png.stem}" for png in figures.glob("*.png"))
    html, _ = HTMLExporter().from_notebook_node(node)
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', html)) == len(shown)
    for renderer in ("vega-embed", "vnd.vegalite", "cdn.jsdelivr.net/npm/vega"):
        assert renderer not in html, renderer

def test_models_notebook_records_registry_numbers(executed):
    from workbench.model.models import get_model

    figures, build = executed
    assert run_notebook("models", {"quick": True}, figures, build_dir=build, progress=False).error is None
    results = pd.read_csv(figures / "models" / "results.csv", keep_default_na=False)
    row = results[(results.model == "Llama 2-7B") & (results.quantity == "params")]
    assert float(row.value.iloc[0]) == get_model("Llama 2-7B").total_params()


def test_failing_notebook_is_reported_by_name(tmp_path):
    import json

    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "figures_dir = None\ninteractive = True\nquick = False",
              "outputs": [], "execution_count": None, "id": "a"},
             {"cell_type": "code", "metadata": {}, "source": "raise ValueError('boom here')", "outputs": [],
              "execution_count": None, "id": "b"}]
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "workbench", "display_name": "w", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (nbdir / "broken.ipynb").write_text(json.dumps(nb))
    ensure_kernel()
    run = run_notebook("broken", {}, tmp_path / "fig", notebooks_dir=nbdir, build_dir=tmp_path / "b", progress=False)
    assert run.error is not None and "ValueError" in run.error and "boom here" in run.error
