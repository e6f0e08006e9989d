"""`python -m workbench whatif examples/sbc_gigabit.toml --devices 1,2,4,8,16 --no-charts`: the device sweep and its
"will more devices help?" lines. Target: under 1 s for the sweep itself (in process, the time whatif prints: five
arenas and the stop-helping analysis); the fresh-interpreter command (imports included) is measured for the record.
Run: .venv/bin/pytest benchmarks/bench_scaling.py --benchmark-enable"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys

from commands import bench_command

from workbench.core.io import REPO_ROOT
from workbench.scenarios import whatif

EXAMPLE = REPO_ROOT / "examples" / "sbc_gigabit.toml"
DEVICES = "1,2,4,8,16"
TARGET_S = 1.0


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    whatif.add_arguments(parser)
    return parser.parse_args([str(EXAMPLE), "--devices", DEVICES, "--no-charts"])


def _run() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        whatif.main(_args())
    return out.getvalue()


def test_whatif_devices_sweep_in_process(benchmark):
    text = _run()  # warm: imports and the registry
    assert "will more devices help (decode)?" in text
    benchmark.pedantic(_run, rounds=5, iterations=1)
    if benchmark.stats is not None:  # None with --benchmark-disable
        median = benchmark.stats.stats.median
        assert median < TARGET_S, f"whatif --devices {DEVICES}: median {median:.2f} s >= {TARGET_S} s"


def test_whatif_devices_command(benchmark):
    """The same from a fresh interpreter (imports included): for the record, no target."""
    command = [sys.executable, "-m", "workbench", "whatif", str(EXAMPLE), "--devices", DEVICES, "--no-charts"]
    bench_command(benchmark, command, rounds=3)
