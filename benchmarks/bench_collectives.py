"""Benchmark: a vectorised sweep of 10^5 (bandwidth, latency, devices, bytes) points (target < 100 ms)."""

import numpy as np

from workbench.machine.network import ALGORITHMS, collective_latency

N_POINTS = 100_000


def _points(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.integers(2, 65, N_POINTS), 4.0 * 4 ** rng.integers(0, 13, N_POINTS),
            10 ** rng.uniform(5, 10, N_POINTS), 10 ** rng.uniform(-6, -2, N_POINTS))


def sweep_all(points):
    n, m, b, t = points
    return [collective_latency(a, "all_reduce", n, m, b, t, path_hops=2) for a in ALGORITHMS]


def test_collective_sweep_1e5_points(benchmark):
    points = _points()
    out = benchmark(sweep_all, points)
    assert all(r.shape == (N_POINTS,) for r in out)


if __name__ == "__main__":
    import time

    pts = _points()
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        sweep_all(pts)
        times.append(time.perf_counter() - t0)
    print(f"10^5 points x {len(ALGORITHMS)} algorithms: median {1e3 * np.median(times):.1f} ms, "
          f"per algorithm {1e3 * np.median(times) / len(ALGORITHMS):.1f} ms")
