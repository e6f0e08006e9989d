"""Benchmark: Galaxy's Algorithm 1 on 4 (paper: under 1 s), 64 and 1024 heterogeneous Nanos with tight,
random memory budgets, and one Galaxy-with-overlap evaluation (the tile timeline)."""

import time

import numpy as np

from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.papers.galaxy import environment, nano_cpu, workload
from workbench.schemes.base import Cluster
from workbench.schemes.galaxy import tp_memory_bytes
from workbench.schemes.planners.galaxy import capacity_split, evaluate, plan, profile

MODEL = "OPT-XL"
SEQ_LEN = 284


def heterogeneous_cluster(n: int, seed: int = 0) -> Cluster:
    """`n` Nanos (random S/M/L) whose budgets are their fixed bytes + 0.7-1.6x the weights the capacity
    split gives them, so some start over budget; one device in ten has room for two more heads, so the
    displaced heads (52 MB each for OPT-XL) have somewhere to go."""
    rng = np.random.default_rng(seed)
    modes = rng.choice(["S", "M", "L"], n)
    topo = Topology("switch", n, Link.from_mbps(125))
    loose = Cluster(tuple(nano_cpu(str(m), 1e12) for m in modes), topo)
    m, wl = get_model(MODEL), workload(SEQ_LEN)
    costs = profile(m, loose, wl)
    share = tp_memory_bytes(m, wl, capacity_split(m, loose, wl)) - costs.base_bytes
    roomy = (rng.random(n) < 0.1) | (np.arange(n) == 0)
    budgets = costs.base_bytes + share * rng.uniform(0.7, 1.6, n) + roomy * 2 * costs.bytes_per_group
    return Cluster(tuple(d.with_memory("DRAM", capacity_bytes=float(b)) for d, b in zip(loose.devices, budgets)), topo)


def over_budget_after_step_one(cluster: Cluster) -> int:
    """Devices the capacity split alone puts over budget (what the redistribution has to fix)."""
    m, wl = get_model(MODEL), workload(SEQ_LEN)
    need = tp_memory_bytes(m, wl, capacity_split(m, cluster, wl))
    return int(np.sum(need > [d.memory_bytes for d in cluster.devices]))


def _plan_and_check(cluster):
    m, wl = get_model(MODEL), workload(SEQ_LEN)
    part = plan(m, cluster, wl)
    assert np.all(tp_memory_bytes(m, wl, part) <= [d.memory_bytes for d in cluster.devices])
    return part


def test_planner_4_devices(benchmark):
    cluster = heterogeneous_cluster(4, seed=3)  # two of the four start over budget
    assert over_budget_after_step_one(cluster) > 0
    t0 = time.perf_counter()
    benchmark(_plan_and_check, cluster)
    assert time.perf_counter() - t0 < 1.0  # the paper: under one second for 4 devices


def test_planner_64_devices(benchmark):
    cluster = heterogeneous_cluster(64)
    assert over_budget_after_step_one(cluster) > 0
    benchmark(_plan_and_check, cluster)


def test_planner_1024_devices(benchmark):
    cluster = heterogeneous_cluster(1024)
    assert over_budget_after_step_one(cluster) > 0
    benchmark(_plan_and_check, cluster)


def test_galaxy_overlap_evaluation_env_f(benchmark):
    r = benchmark(evaluate, "galaxy_hmp_overlap", get_model("GPT2-L"), environment("F", 125), workload(SEQ_LEN))
    assert not r.oom


if __name__ == "__main__":
    for n, seed in ((4, 3), (64, 0), (1024, 0)):
        cluster = heterogeneous_cluster(n, seed)
        times = []
        for _ in range(5 if n < 1024 else 3):
            t0 = time.perf_counter()
            _plan_and_check(cluster)
            times.append(time.perf_counter() - t0)
        print(f"Algorithm 1, {n:5d} devices ({MODEL}, {over_budget_after_step_one(cluster)} over budget after "
              f"step 1): median {1e3 * np.median(times):8.1f} ms")
