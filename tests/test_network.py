"""Collectives: TPI-LLM's hop counting (Appendix A.1, Sec. 3.2) exactly; validation; vectorisation."""

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine import network as net


def test_tpi_appendix_a1_star_2_vs_tree_ring_4_link_latencies():
    # 1 master + 2 workers: star = 2 t_link < tree = ring = 4 t_link (data, barrier, aggregation ~ 0)
    for algo, expected in [("star", 2), ("tree", 4), ("ring", 4)]:
        link, data = net.collective_latency(algo, "all_reduce", 3, 0, 1e9, 1.0, path_hops=1, breakdown=True)
        assert float(link) == expected
        assert float(data) == 0


def test_tpi_section_3_2_eight_devices_on_home_gateway_tree():
    topo = net.Topology("gateway_tree", 8, net.Link(300e6 / 8, 1.0))
    assert topo.path_hops == 4
    assert net.traversals("ring", "all_reduce", 8) == 14  # 7 reduce-scatter + 7 all-gather steps
    ring, _ = net.on_topology(topo, "ring", "all_reduce", 0, breakdown=True)
    tree, _ = net.on_topology(topo, "tree", "all_reduce", 0, depth=2, breakdown=True)
    star, _ = net.on_topology(topo, "star", "all_reduce", 0, breakdown=True)
    assert (float(ring), float(tree), float(star)) == (56.0, 16.0, 8.0)
    assert float(ring) / float(tree) == 3.5


def test_ring_allreduce_is_bandwidth_optimal():
    n, m, bw = 8, 8e6, 1e9
    t = net.allreduce_latency("ring", n, m, bw, 0.0)
    assert float(t) == pytest.approx(2 * (n - 1) / n * m / bw)
    # star serialises (n-1) buffers through the master
    assert float(net.allreduce_latency("star", n, m, bw, 0.0)) == pytest.approx(2 * (n - 1) * m / bw)


def test_hierarchical_groups_of_four():
    assert float(net.traversals("hierarchical", "all_reduce", 16, group_size=4)) == 4  # 2 levels up, 2 down
    assert float(net.traversals("hierarchical", "all_reduce", 4, group_size=4)) == 2


def test_single_device_costs_nothing():
    for algo in net.ALGORITHMS:
        assert float(net.allreduce_latency(algo, 1, 1e6, 1e6, 1e-3)) == 0


def test_vectorised_sweep_shapes():
    n = np.array([2, 4, 8, 16])
    t = net.allreduce_latency("ring", n, 1e6, 1e8, 1e-3)
    assert t.shape == (4,) and np.all(np.diff(t) > 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(bandwidth=0), "bandwidth"), (dict(bandwidth=-5), "bandwidth"), (dict(latency=-1), "latency"),
    (dict(message_bytes=-1), "message_bytes"), (dict(n_devices=0), "n_devices")])
def test_bad_input_names_parameter(kwargs, match):
    args = dict(n_devices=4, message_bytes=10.0, bandwidth=1e6, latency=1e-3) | kwargs
    with pytest.raises(WorkbenchError, match=match):
        net.allreduce_latency("ring", **args)


def test_bad_topology_and_link():
    with pytest.raises(WorkbenchError, match="bandwidth"):
        net.Link(0)
    with pytest.raises(WorkbenchError, match="n_devices"):
        net.Topology("switch", 9, net.Link(1e6), max_devices=8)
    with pytest.raises(WorkbenchError, match="topology"):
        net.Topology("mesh3d", 4, net.Link(1e6))
    with pytest.raises(WorkbenchError, match="algorithm"):
        net.allreduce_latency("butterfly", 4, 1, 1, 0)


def test_energy_counts_hops():
    e1 = net.collective_energy("star", "all_reduce", 4, 1000, 100, path_hops=1)
    e2 = net.collective_energy("star", "all_reduce", 4, 1000, 100, path_hops=2)
    assert float(e2) == 2 * float(e1) == pytest.approx(2 * 2 * 3 * 1000 * 100e-12)
