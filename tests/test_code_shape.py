"""The package's shape: small functions a reader can hold in mind (no function over 80 lines)."""

import ast

from workbench.core.io import REPO_ROOT

MAX_FUNCTION_LINES = 80


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in `source` longer than `limit` lines, decorators excluded."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > limit]


def test_the_scan_finds_a_long_function_and_passes_a_short_one():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    assert long_functions(f"def long():\n{body}\n") == [("long", 81)]
    assert long_functions("class A:\n    def short(self):\n        return 1\n") == []


def test_no_function_in_the_package_is_over_80_lines():
    found = {f"{path.relative_to(REPO_ROOT)}:{name}": lines
             for path in sorted((REPO_ROOT / "workbench").rglob("*.py"))
             for name, lines in long_functions(path.read_text())}
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them): {found}"


def test_mbit_per_s_and_bytes_per_s_are_converted_in_one_place():
    """Links are rated in Mbit/s and costed in B/s: `workbench.core.units` converts; no module repeats the factor."""
    import re

    inline = re.compile(r"\*\s*8\s*/\s*1e6|\*\s*1e6\s*/\s*8|/\s*8e6|\*\s*125_?000\b")
    found = [f"{path.relative_to(REPO_ROOT)}:{n}" for path in sorted((REPO_ROOT / "workbench").rglob("*.py"))
             if path.name != "units.py" for n, line in enumerate(path.read_text().splitlines(), 1)
             if inline.search(line)]
    assert not found, f"convert with workbench.core.units (mbps_to_bytes_per_s / bytes_per_s_to_mbps): {found}"
    assert inline.search("rate * 8 / 1e6") and inline.search("mbps * 1e6 / 8")
