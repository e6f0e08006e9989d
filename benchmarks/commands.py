"""Timing a whole command in a fresh interpreter, for the benchmarks that measure one (whatif)."""

from __future__ import annotations

import resource
import subprocess
import time

from workbench.core.io import REPO_ROOT


def bench_command(benchmark, command: list[str], rounds: int) -> None:
    """Time `command` (wall seconds) after one warm-up run that fills the file cache; record the median CPU
    seconds (user + sys of the child, all threads) in `benchmark.extra_info["cpu_s_median"]`."""
    cpu: list[float] = []

    def run() -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, check=True, cwd=REPO_ROOT, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return time.perf_counter() - start

    run()  # warm the file cache (the first import compiles .pyc files)
    benchmark.pedantic(run, rounds=rounds, iterations=1)
    benchmark.extra_info["cpu_s_median"] = sorted(cpu)[len(cpu) // 2]


def example_variant(folder, name: str, replacements: tuple[tuple[str, str], ...], extra: str = ""):
    """examples/sbc_gigabit.toml with each (old, new) replaced (every old text must be there) and `extra` appended,
    written to `folder / name`: a benchmark's deployment, every other number as the example cites it."""
    text = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text + extra)
    return path
