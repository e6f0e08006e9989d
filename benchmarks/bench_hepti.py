"""Hepti's partitioner: one P2 MILP solve (WS and 1D-tiled WS) and a whole plan() call on heterogeneous
clusters of 16, 64 and 256 devices (BERT-L, the settings of data/constants/hepti.toml). Target: a
64-device P2 solve under 1 s. Run: .venv/bin/pytest benchmarks/bench_hepti.py --benchmark-enable
"""

from __future__ import annotations

import time

import pytest

from workbench.papers.hepti import Setting, random_profiles
from workbench.schemes.planners.hepti import linear_cost, plan, solve_p2

SETTING = Setting.from_constants()
TARGET_S = 1.0


def _timed(benchmark, fn):
    cpu = []

    def run():
        start = time.process_time()
        out = fn()
        cpu.append(time.process_time() - start)
        return out

    result = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info["cpu_s_median"] = sorted(cpu)[len(cpu) // 2]
    return result


@pytest.mark.parametrize("mode", ["ws", "1d"])
@pytest.mark.parametrize("n", [16, 64, 256])
def test_p2_solve(benchmark, n, mode):
    profiles = random_profiles(SETTING, n, seed=0)
    cost = linear_cost(SETTING.cfg, SETTING.workload, mode)
    sol = _timed(benchmark, lambda: solve_p2(cost, profiles, comm_model=SETTING.comm_model))
    assert sum(sol.alloc["heads"]) == SETTING.cfg.n_kv_heads
    benchmark.extra_info.update(variables=sol.n_variables, constraints=sol.n_constraints, nodes=sol.nodes)
    if n == 64 and benchmark.stats is not None:  # None with --benchmark-disable
        assert benchmark.stats.stats.median < TARGET_S


@pytest.mark.parametrize("n", [16, 64, 256])
def test_plan(benchmark, n):
    profiles = random_profiles(SETTING, n, seed=0)
    result = _timed(benchmark, lambda: plan(SETTING.cfg, SETTING.workload, profiles, comm_model=SETTING.comm_model))
    benchmark.extra_info.update(mode=result.mode, solves=result.solves, participants=len(result.devices))
