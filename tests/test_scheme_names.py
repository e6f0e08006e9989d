"""A registered scheme's name is spelled once: in the modules of its family, and everywhere else through the
catalogue (`load_all().filter(...)`, `SchemeSpec` fields) or a constant those modules export (`galaxy.HMP`).

A scheme's home modules are every `workbench/` module named like a module that registers a scheme of its family
(a paper's `schemes/<paper>.py`, `planners/<paper>.py`, `kernels/<paper>.py` and `papers/<paper>.py` share its
names). Tests and `data/` are not scanned; nor are `notebooks/src/*.py`, whose prose and cells name the schemes
they discuss (a renamed scheme fails there when the notebook runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

from workbench.schemes.base import load_all

WORKBENCH = Path(__file__).resolve().parents[1] / "workbench"


def home_stems() -> dict[str, set[str]]:
    """Scheme name -> the module file stems where it may be spelled (its family's registering modules')."""
    specs = load_all().specs()
    by_family: dict[str, set[str]] = {}
    for spec in specs:
        by_family.setdefault(spec.family, set()).add(spec.evaluator.__module__.rsplit(".", 1)[-1])
    return {spec.name: by_family[spec.family] for spec in specs}


def spelled_names(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every string literal in `source` that is exactly one of `names`."""
    return sorted((node.lineno, node.value) for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names)


def strays() -> list[str]:
    """'path:line: name' for each scheme name spelled outside its home modules in workbench/."""
    homes = home_stems()
    found = []
    for path in sorted(WORKBENCH.rglob("*.py")):
        for line, name in spelled_names(path.read_text(encoding="utf-8"), set(homes)):
            if path.stem not in homes[name]:
                found.append(f"{path.relative_to(WORKBENCH.parent)}:{line}: {name}")
    return found


def test_no_scheme_name_is_spelled_outside_its_family_modules():
    assert strays() == [], "ask the catalogue or import the defining module's constant instead"


def test_the_scan_finds_a_spelled_name_and_only_an_exact_one():
    source = 'x = "megatron_tp"\ny = f"{x}: megatron_tp costs"\nz = ("sp",)\n"""A docstring naming megatron_tp."""\n'
    assert spelled_names(source, {"megatron_tp", "sp"}) == [(1, "megatron_tp"), (3, "sp")]


def test_every_family_has_home_modules_that_exist():
    for name, stems in home_stems().items():
        assert stems and all(list(WORKBENCH.rglob(f"{stem}.py")) for stem in stems), name
