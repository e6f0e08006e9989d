"""What `Recorder.chart`'s check costs per chart beside what saving it costs (PNG + SVG through vl-convert):
the arena's breakdown chart (a layered, concatenated chart of every scheme) on the SBC example. Target: the
check at most half of the save, so checking every chart a reproduce writes adds at most half of the time
spent writing charts.
Run: .venv/bin/pytest benchmarks/bench_chartcheck.py --benchmark-enable"""

from __future__ import annotations

import time

import pytest

from workbench.core.io import REPO_ROOT

CHECK_OVER_SAVE = 0.5


@pytest.fixture(scope="module")
def chart():
    from workbench.report.chartcheck import check_chart
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.arena_charts import breakdown_chart
    from workbench.scenarios.userconfig import load_config

    built = breakdown_chart(arena_for_config(load_config(REPO_ROOT / "examples" / "sbc_gigabit.toml")))
    check_chart(built, "warm-up")  # vl-convert's first call starts its JavaScript engine
    return built


def _median_save_s(chart, folder, rounds: int = 5) -> float:
    """Median seconds to save `chart` as PNG (2x) and SVG, as Recorder.chart does."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        chart.save(str(folder / "c.png"), format="png", scale_factor=2)
        chart.save(str(folder / "c.svg"), format="svg")
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def test_check_costs_at_most_half_of_saving(benchmark, chart, tmp_path):
    from workbench.report.chartcheck import check_chart

    benchmark.pedantic(check_chart, args=(chart, "breakdown"), rounds=5, iterations=1)
    if benchmark.stats is not None:  # None with --benchmark-disable
        check_s, save_s = benchmark.stats.stats.median, _median_save_s(chart, tmp_path)
        assert check_s <= CHECK_OVER_SAVE * save_s, f"check {check_s:.3f} s > {CHECK_OVER_SAVE} x save {save_s:.3f} s"
