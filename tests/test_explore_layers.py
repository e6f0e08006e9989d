"""The explorer's package keeps its own order: State (pure) -> compute (pure) -> View (widgets, charts)."""

import subprocess
import sys

import pytest

from workbench.core.io import REPO_ROOT

PURE = ("workbench.scenarios.explore.state", "workbench.scenarios.explore.compute")


@pytest.mark.parametrize("module", PURE)
def test_state_and_compute_import_no_widget_library(module):
    code = f"import sys, {module}; print(sorted(m for m in ('ipywidgets', 'altair') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("module, later", [("state", ("compute", "view")), ("compute", ("view",))])
def test_no_module_imports_a_later_one(module, later):
    text = (REPO_ROOT / "workbench" / "scenarios" / "explore" / f"{module}.py").read_text()
    assert not [name for name in later if f"workbench.scenarios.explore.{name}" in text]


def test_the_package_keeps_every_public_name_the_notebooks_use():
    import workbench.scenarios.explore as explore
    from workbench.scenarios.explore import compute as compute_fn

    assert callable(compute_fn) and explore.Explorer.__module__ == "workbench.scenarios.explore.view"
    assert explore.State.__module__ == "workbench.scenarios.explore.state"
    assert explore.View.__module__ == "workbench.scenarios.explore.compute"
