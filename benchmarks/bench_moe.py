"""The arena (every registered scheme, both phases, the whatif table) on a 64-device MoE cluster: 64 Raspberry Pi 5
boards (examples/sbc_gigabit.toml's, count 64) running Qwen3-30B-A3B in q4_0: target under 1 s in process. The
`whatif` command end to end (a fresh interpreter, no charts) is measured for the record.
Run: .venv/bin/pytest benchmarks/bench_moe.py --benchmark-enable"""

from __future__ import annotations

import sys

import pytest
from commands import bench_command, example_variant

TARGET_S = 1.0
DEVICES = 64
MODEL = "Qwen3-30B-A3B"


@pytest.fixture(scope="module")
def moe_toml(tmp_path_factory):
    """examples/sbc_gigabit.toml with the MoE model and 64 boards (every other number as that file cites it)."""
    return example_variant(tmp_path_factory.mktemp("moe"), "sbc_64_qwen3_moe.toml",
                           (('name = "Llama 2-13B"', f'name = "{MODEL}"'), ("count = 4", f"count = {DEVICES}")))


def test_arena_on_a_64_device_moe_cluster(benchmark, moe_toml):
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config
    from workbench.scenarios.whatif import format_table
    from workbench.schemes.base import load_all

    load_all()
    config = load_config(moe_toml)
    assert config.cluster.n == DEVICES and config.model.is_moe

    def run():
        arena = arena_for_config(config)
        return arena, format_table(arena)

    arena, _ = benchmark(run)
    table = arena.table()
    ran = set(table[table.status != "n/a"].scheme)
    assert {"moe_layer_pipeline", "moe_expert_parallel"} <= ran, ran
    if benchmark.stats is not None:  # None with --benchmark-disable
        median = benchmark.stats.stats.median
        assert median < TARGET_S, f"arena on {DEVICES} devices ({MODEL}): median {median:.2f} s >= {TARGET_S} s"


def test_whatif_command_on_a_64_device_moe_cluster(benchmark, moe_toml):
    """For the record (the interpreter's start and imports included): no target."""
    bench_command(benchmark, [sys.executable, "-m", "workbench", "whatif", str(moe_toml), "--no-charts"], rounds=3)
