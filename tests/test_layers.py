"""The folders are the layers: `workbench.LAYERS` lists them bottom to top, and every module imports only from its own
layer or the ones below it (not even inside a function); workbench/ holds at most 12 entries; the layout block of
docs/development.md is generated from the packages' docstrings; old module names still import, with a warning."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import workbench
from workbench.schemes.base import PLANNING_EVALUATOR_MODULES, load_all

PACKAGE_DIR = Path(workbench.__file__).parent
REPO_ROOT = PACKAGE_DIR.parent
PLANNERS_DIR = Path(workbench.__file__).parent / "schemes" / "planners"
MAX_TOP_LEVEL_ENTRIES = 12

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import layout_doc  # noqa: E402  (scripts/ is no package)


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


def layer_of(module: str, layers: tuple[str, ...]) -> int | None:
    """The index in `layers` of the longest layer that contains `module` (dotted, without `workbench.`), or None."""
    best = None
    for index, layer in enumerate(layers):
        if (module == layer or module.startswith(layer + ".")) and (best is None or len(layer) > len(layers[best])):
            best = index
    return best


def upward_imports(module: str, source: str, layers: tuple[str, ...]) -> list[str]:
    """The workbench modules `source` (module `module`, dotted without `workbench.`) imports from a higher layer."""
    own = layer_of(module, layers)
    package = module if module.endswith("__init__") else module.rsplit(".", 1)[0]
    names = imported_modules(source, "workbench." + package.removesuffix(".__init__"))
    found = []
    for name in sorted(names):
        if not name.startswith("workbench."):
            continue
        target = layer_of(name.removeprefix("workbench."), layers)
        if target is not None and own is not None and target > own:
            found.append(f"{name} ({layers[target]})")
    return found


def package_modules() -> dict[str, Path]:
    """Every module under workbench/ but the package root's own two files: dotted name (no `workbench.`) -> path."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR).with_suffix("")
        if len(rel.parts) > 1:
            found[".".join(rel.parts)] = path
    return found


def test_the_scan_sees_function_level_and_relative_imports():
    src = ("def f():\n    from workbench.kernels.sti import plan_sti\n"
           "def g():\n    import workbench.kernels.galaxy as g\n"
           "from ..papers import hepti\n")
    names = imported_modules(src, "workbench.schemes.x")
    assert {"workbench.kernels.sti", "workbench.kernels.galaxy", "workbench.schemes.papers.hepti"} <= names


def test_the_order_check_finds_an_upward_import():
    layers = ("low", "mid", "mid.inner", "high")
    src = "def f():\n    from workbench.high.x import y\nfrom workbench.mid.inner import z\nimport workbench.low.a\n"
    assert upward_imports("mid.m", src, layers) == ["workbench.high.x (high)", "workbench.high.x.y (high)",
                                                    "workbench.mid.inner (mid.inner)",
                                                    "workbench.mid.inner.z (mid.inner)"]
    assert upward_imports("high.m", src, layers) == []
    assert layer_of("mid.inner.k", layers) == 2 and layer_of("other.k", layers) is None


def test_workbench_holds_at_most_twelve_entries_each_a_layer():
    entries = sorted(p.name for p in PACKAGE_DIR.iterdir() if not p.name.startswith((".", "__pycache__")))
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, entries
    top_layers = {layer.split(".")[0] for layer in workbench.LAYERS}
    assert sorted(e for e in entries if e not in ("__init__.py", "__main__.py")) == sorted(top_layers)


def test_every_declared_layer_is_a_package_with_a_docstring():
    for layer in workbench.LAYERS:
        init = PACKAGE_DIR.joinpath(*layer.split(".")) / "__init__.py"
        assert init.is_file(), layer
        assert layout_doc.summary(init), f"{layer}/__init__.py has no docstring saying its layer"


def test_every_module_imports_only_its_own_layer_or_lower():
    modules = package_modules()
    assert len(modules) > 50  # the scan found the tree
    assert [m for m in modules if layer_of(m, workbench.LAYERS) is None] == []
    upward = {m: upward_imports(m, p.read_text(), workbench.LAYERS) for m, p in modules.items()}
    assert {m: found for m, found in upward.items() if found} == {}


def test_the_package_root_imports_only_the_bottom_layer():
    found = imported_modules((PACKAGE_DIR / "__init__.py").read_text(), "workbench")
    ours = {layer_of(n.removeprefix("workbench."), workbench.LAYERS) for n in found if n.startswith("workbench.")}
    assert ours == {0}


def test_the_layout_block_of_the_docs_is_up_to_date():
    text = (REPO_ROOT / layout_doc.DOC).read_text()
    assert layout_doc.current_block(text) == layout_doc.render(REPO_ROOT), "run python scripts/layout_doc.py"


def test_an_old_module_name_imports_the_moved_module_with_a_warning():
    assert workbench.MOVED  # the regroup ran (scripts/regroup.py writes the table)
    old, new = next((o, n) for o, n in workbench.MOVED.items()
                    if (PACKAGE_DIR.parent / Path(*n.split("."))).with_suffix(".py").is_file())
    moved = importlib.import_module(new)
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match="moved to"):
        alias = importlib.import_module(old)
    assert alias is moved and alias.__spec__.name == new
    sys.modules.pop(old, None)


def test_a_moved_package_keeps_its_submodules_under_the_old_name():
    old, new = next((o, n) for o, n in workbench.MOVED.items() if (PACKAGE_DIR.parent / Path(*n.split("."))).is_dir())
    sub = next(p.stem for p in sorted((PACKAGE_DIR.parent / Path(*new.split("."))).glob("*.py"))
               if p.stem != "__init__")
    moved = importlib.import_module(f"{new}.{sub}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        alias = importlib.import_module(f"{old}.{sub}")
    assert alias is moved
    for name in (old, f"{old}.{sub}"):
        sys.modules.pop(name, None)


def test_an_unknown_module_is_not_aliased():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("workbench.no_such_module_anywhere")


def test_planning_evaluator_is_registered_from_the_planner_layer():
    registry = load_all()
    paper, fn = registry["sti_pipeline"]
    assert paper == "sti" and fn.__module__ == "workbench.schemes.planners.sti"


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
    module = f"workbench.schemes.planners.{path.stem}"
    assert registers_evaluators(path.read_text()) == (module in PLANNING_EVALUATOR_MODULES)
