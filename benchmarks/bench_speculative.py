"""`whatif` with a [speculative] table on 64 devices: the arena, the rows with and without speculation and the best
gamma (what `whatif` prints for the table), on 64 Raspberry Pi 5 boards (examples/sbc_gigabit.toml's board,
count 64) running Llama 2-13B with a Llama 2-3B draft on the root; target under 1 s in process.
Run: .venv/bin/pytest benchmarks/bench_speculative.py --benchmark-enable"""

from __future__ import annotations

import pytest
from commands import example_variant

TARGET_S = 1.0
DEVICES = 64
SPECULATIVE = '\n[speculative]\ndraft = "Llama 2-3B"\nplacement = "root"\ngamma = 4\nalpha = 0.8\n'


@pytest.fixture(scope="module")
def speculative_toml(tmp_path_factory):
    """examples/sbc_gigabit.toml with 64 boards and a [speculative] table (every other number as that file cites)."""
    return example_variant(tmp_path_factory.mktemp("spec"), "sbc_64_speculative.toml",
                           (("count = 4", f"count = {DEVICES}"),), SPECULATIVE)


def test_whatif_with_speculation_on_64_devices(benchmark, speculative_toml):
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config
    from workbench.scenarios.whatif import best_gamma_line, format_table, speculation_rows
    from workbench.schemes.base import load_all

    load_all()
    config = load_config(speculative_toml)
    assert config.cluster.n == DEVICES and config.speculation is not None

    def run():
        arena = arena_for_config(config)
        rows = speculation_rows(arena, config)
        return format_table(arena), rows, best_gamma_line(arena, config, rows)

    _, rows, line = benchmark(run)
    assert len(rows) and "gamma" in line
    if benchmark.stats is not None:  # None with --benchmark-disable
        median = benchmark.stats.stats.median
        assert median < TARGET_S, f"whatif with [speculative] on {DEVICES} devices: median {median:.2f} s >= {TARGET_S} s"
