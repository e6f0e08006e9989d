"""`python -m workbench whatif examples/<each>.toml` end to end (a fresh interpreter, table + 3 SVG charts
+ CSVs): target under 2 s. The `--png` variant is measured for the record (no target).
Run: .venv/bin/pytest benchmarks/bench_arena.py --benchmark-enable"""

from __future__ import annotations

import sys

import pytest
from commands import bench_command

from workbench.core.io import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.toml"))
TARGET_S = 2.0


@pytest.mark.parametrize("png", [False, True], ids=["svg", "svg+png"])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_whatif_command(benchmark, path, png, tmp_path):
    command = [sys.executable, "-m", "workbench", "whatif", str(path), "--out", str(tmp_path)] + ["--png"] * png
    bench_command(benchmark, command, rounds=5)
    if benchmark.stats is not None and not png:  # None with --benchmark-disable
        median = benchmark.stats.stats.median
        assert median < TARGET_S, f"whatif {path.name}: median {median:.2f} s >= {TARGET_S} s"


def test_arena_evaluation_only(benchmark):
    """The arena itself (every registered scheme, both phases) on the SBC example, no charts."""
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    arena_for_config(config)
    benchmark(lambda: arena_for_config(config).table())
