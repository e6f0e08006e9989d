"""`python -m workbench whatif examples/<each>.toml` end to end (a fresh interpreter, table + 3 SVG charts
+ CSVs): target under 2 s. The `--png` variant is measured for the record (no target).
Run: .venv/bin/pytest benchmarks/bench_arena.py --benchmark-enable"""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest

from workbench.io import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.toml"))
TARGET_S = 2.0


@pytest.mark.parametrize("png", [False, True], ids=["svg", "svg+png"])
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_whatif_command(benchmark, path, png, tmp_path):
    cpu = []
    command = [sys.executable, "-m", "workbench", "whatif", str(path), "--out", str(tmp_path)] + ["--png"] * png

    def run() -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=REPO_ROOT, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return time.perf_counter() - start

    run()  # warm the file cache (first import compiles .pyc files)
    benchmark.pedantic(run, rounds=5, iterations=1)
    benchmark.extra_info["cpu_s_median"] = sorted(cpu)[len(cpu) // 2]  # user + sys of the child, all threads
    if benchmark.stats is not None and not png:  # None with --benchmark-disable
        median = benchmark.stats.stats.median
        assert median < TARGET_S, f"whatif {path.name}: median {median:.2f} s >= {TARGET_S} s"


def test_arena_evaluation_only(benchmark):
    """The arena itself (every registered scheme, both phases) on the SBC example, no charts."""
    from workbench.arena import arena_for_config
    from workbench.userconfig import load_config

    config = load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")
    arena_for_config(config)
    benchmark(lambda: arena_for_config(config).table())
