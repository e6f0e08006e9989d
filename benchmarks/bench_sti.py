"""STI planner speed: the issue's target is < 50 ms for a 12x12 model with 6 bitwidths.

Run: .venv/bin/pytest benchmarks/bench_sti.py --benchmark-enable -q
"""

import numpy as np

from workbench.machine.hardware import load_device
from workbench.model.models import get_model
from workbench.schemes.planners.sti import plan_sti
from workbench.schemes.sti import latency_profile

TARGET_S = 0.050


def _inputs(device_id: str):
    profile = latency_profile(get_model("DynaBERT-12x12"), load_device(device_id))  # 12x12, bits {2..6, 32}
    importance = np.random.default_rng(0).random((profile.n_layers, profile.n_shards))
    return profile, importance


def _check(benchmark, plan, profile):
    assert len(profile.bitwidths) == 6 and (profile.n_layers, profile.n_shards) == (12, 12)
    assert plan.valid and plan.n * plan.m > 0
    if benchmark.stats is not None:  # None with --benchmark-disable
        median = benchmark.stats.stats.median
        assert median < TARGET_S, f"planner median {median * 1e3:.1f} ms >= {TARGET_S * 1e3:.0f} ms"


def test_planner_12x12_six_bitwidths_cpu_profile(benchmark):
    profile, importance = _inputs("sti_odroid_n2plus_cpu")
    plan = benchmark(plan_sti, profile, 0.4, 2**20, importance)
    _check(benchmark, plan, profile)


def test_planner_12x12_six_bitwidths_gpu_profile(benchmark):
    profile, importance = _inputs("sti_jetson_nano_gpu")
    plan = benchmark(plan_sti, profile, 0.4, 5 * 2**20, importance)
    _check(benchmark, plan, profile)
