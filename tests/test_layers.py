"""Layers flow one way (models -> hardware/network -> schemes -> planners -> simulate -> papers -> arena):
no scheme module imports a planner, not even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import workbench
from workbench.schemes.base import PLANNING_EVALUATOR_MODULES, load_all

SCHEMES_DIR = Path(workbench.__file__).parent / "schemes"
PLANNERS_DIR = Path(workbench.__file__).parent / "planners"


def imported_modules(source: str, package: str) -> set[str]:
    """Every module an `import` / `from ... import` anywhere in `source` names (relative ones resolved in `package`)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def planner_imports(path: Path) -> list[str]:
    """The workbench.planners modules `path` imports (sorted)."""
    names = imported_modules(path.read_text(), "workbench.schemes")
    return sorted(n for n in names if n == "workbench.planners" or n.startswith("workbench.planners."))


def test_the_scan_sees_function_level_and_relative_imports():
    src = ("def f():\n    from workbench.planners.sti import plan_sti\n"
           "def g():\n    import workbench.planners.galaxy as g\n"
           "from ..planners import hepti\n")
    names = imported_modules(src, "workbench.schemes")
    assert {"workbench.planners.sti", "workbench.planners.galaxy", "workbench.planners.hepti"} <= names


@pytest.mark.parametrize("module", ["sti", "galaxy"])  # the two circles of issue 17 item 7
def test_scheme_module_does_not_import_planners(module):
    assert planner_imports(SCHEMES_DIR / f"{module}.py") == []


def test_no_other_scheme_module_imports_planners():
    paths = [p for p in sorted(SCHEMES_DIR.glob("*.py")) if p.stem not in ("sti", "galaxy")]
    assert paths  # the scan found the package
    assert {p.name: planner_imports(p) for p in paths if planner_imports(p)} == {}


def test_planning_evaluator_is_registered_from_the_planner_layer():
    registry = load_all()
    paper, fn = registry["sti_pipeline"]
    assert paper == "sti" and fn.__module__ == "workbench.planners.sti"


def registers_evaluators(source: str) -> bool:
    """Whether `source` decorates a function with `register(...)` (an arena evaluator)."""
    return any(isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", "")) == "register"
               for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef) for d in node.decorator_list)


def test_registers_evaluators_sees_the_decorator():
    assert registers_evaluators("@register('x', 'p')\ndef f():\n    pass\n")
    assert not registers_evaluators("def register():\n    pass\n@other('x')\ndef f():\n    pass\n")


@pytest.mark.parametrize("path", sorted(PLANNERS_DIR.glob("*.py")), ids=lambda p: p.stem)
def test_load_all_imports_every_planner_that_registers(path):
    """A planning evaluator registered in a planner module reaches the arena only if load_all imports it."""
    module = f"workbench.planners.{path.stem}"
    assert registers_evaluators(path.read_text()) == (module in PLANNING_EVALUATOR_MODULES)
