"""Benchmark: one what-if update of the multi-MCU notebook (the 1-8 chip sweep behind a slider move) and
the whole Fig. 6 sweep (target: well under 100 ms each so the sliders stay live)."""

from workbench.papers import mcu_siracusa as M


def what_if_update(l3_mbps: float = 400.0, mipi_mbps: float = 500.0):
    knobs = M.Knobs(link_bandwidth=mipi_mbps * 1e6, l3_bandwidth=l3_mbps * 1e6)
    return M.scaling("TinyLlama-42M", "autoregressive", (1, 2, 4, 8), knobs)


def test_what_if_update(benchmark):
    frame = benchmark(what_if_update, 250.0, 400.0)
    assert len(frame) == 4 and frame.speedup.iloc[-1] > 8


def test_fig6_sweep(benchmark):
    frame = benchmark(M.fig6)
    assert len(frame) == 2 * len(M.FIG6_CHIPS)


if __name__ == "__main__":
    import time

    for fn in (what_if_update, M.fig6):
        start = time.perf_counter()
        fn()
        print(f"{fn.__name__}: {1e3 * (time.perf_counter() - start):.1f} ms")
