"""Tests that kill mutmut survivors in workbench/machine/network.py (see docs/mutation.md).

Every expected value below is worked by hand from the algorithm's definition (docstrings of
`workbench.machine.network`), for a buffer of m = 24 bytes per device over n = 4 (a power of two) and n = 6 (not):
rows are (steps, busiest-link bytes, injected bytes, endpoint messages).
"""

from __future__ import annotations

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine import network as net

M = 24.0

# n = 4: (n-1)/n x m = 18, (n-1) m = 72.  n = 6: (n-1)/n x m = 20, (n-1) m = 120.
HAND = {
    # ring: all-reduce 2(n-1) steps of m/n; reduce-scatter / all-gather n-1 steps; broadcast / reduce pipeline m.
    ("ring", "all_reduce", 4): (6, 36, 144, 6),
    ("ring", "reduce_scatter", 4): (3, 18, 72, 3),
    ("ring", "all_gather", 4): (3, 18, 72, 3),
    ("ring", "broadcast", 4): (3, 24, 72, 3),
    ("ring", "reduce", 4): (3, 24, 72, 3),
    ("ring", "all_reduce", 6): (10, 40, 240, 10),
    ("ring", "reduce_scatter", 6): (5, 20, 120, 5),
    ("ring", "all_gather", 6): (5, 20, 120, 5),
    ("ring", "broadcast", 6): (5, 24, 120, 5),
    ("ring", "reduce", 6): (5, 24, 120, 5),
    # star: the master receives n-1 buffers and sends n-1; 2 wire traversals (1 for broadcast / reduce).
    ("star", "all_reduce", 4): (2, 144, 144, 6),
    ("star", "reduce_scatter", 4): (2, 72 + 18, 144, 6),
    ("star", "all_gather", 4): (2, 18 + 72, 144, 6),
    ("star", "broadcast", 4): (1, 72, 72, 3),
    ("star", "reduce", 4): (1, 72, 72, 3),
    ("star", "all_reduce", 6): (2, 240, 240, 10),
    ("star", "reduce_scatter", 6): (2, 120 + 20, 240, 10),
    ("star", "all_gather", 6): (2, 20 + 120, 240, 10),
    ("star", "broadcast", 6): (1, 120, 120, 5),
    ("star", "reduce", 6): (1, 120, 120, 5),
    # binary tree: depth ceil(log2 n) (2 for 4, 3 for 6), one buffer per level, up and down.
    ("tree", "all_reduce", 4): (4, 96, 144, 4),
    ("tree", "reduce_scatter", 4): (4, 96, 144, 4),
    ("tree", "all_gather", 4): (4, 96, 144, 4),
    ("tree", "broadcast", 4): (2, 48, 72, 2),
    ("tree", "reduce", 4): (2, 48, 72, 2),
    ("tree", "all_reduce", 6): (6, 144, 240, 6),
    ("tree", "broadcast", 6): (3, 72, 120, 3),
    ("tree", "reduce", 6): (3, 72, 120, 3),
    # hierarchical, groups of 4: depth ceil(log4 n) (1 for 4, 2 for 6); a parent takes 3 buffers per level.
    ("hierarchical", "all_reduce", 4): (2, 144, 144, 6),
    ("hierarchical", "broadcast", 4): (1, 72, 72, 3),
    ("hierarchical", "all_reduce", 6): (4, 288, 240, 12),
    ("hierarchical", "reduce", 6): (2, 144, 120, 6),
    # halving-doubling: log2 4 = 2 rounds each way; n = 6: 2 rounds + fold in + fold out = 4, plus m each fold.
    ("halving_doubling", "all_reduce", 4): (4, 36, 144, 4),
    ("halving_doubling", "reduce_scatter", 4): (2, 18, 72, 2),
    ("halving_doubling", "all_gather", 4): (2, 18, 72, 2),
    ("halving_doubling", "broadcast", 4): (2, 48, 72, 2),
    ("halving_doubling", "reduce", 4): (2, 48, 72, 2),
    ("halving_doubling", "all_reduce", 6): (8, 40 + 48, 240, 8),
    ("halving_doubling", "reduce_scatter", 6): (4, 20 + 24, 120, 4),
    ("halving_doubling", "all_gather", 6): (4, 20 + 24, 120, 4),
    ("halving_doubling", "broadcast", 6): (4, 96, 120, 4),
    ("halving_doubling", "reduce", 6): (4, 96, 120, 4),
    # mesh: one traversal; each device sends its part to the n-1 others; all-reduce all-gathers full partials.
    ("mesh", "all_reduce", 4): (1, 72, 288, 3),
    ("mesh", "reduce_scatter", 4): (1, 18, 72, 3),
    ("mesh", "all_gather", 4): (1, 18, 72, 3),
    ("mesh", "broadcast", 4): (1, 72, 72, 3),
    ("mesh", "reduce", 4): (1, 72, 72, 3),
    ("mesh", "all_reduce", 6): (1, 120, 720, 5),
    ("mesh", "reduce_scatter", 6): (1, 20, 120, 5),
    ("mesh", "all_gather", 6): (1, 20, 120, 5),
    ("mesh", "broadcast", 6): (1, 120, 120, 5),
    ("mesh", "reduce", 6): (1, 120, 120, 5),
    # gloo ring all-reduce, n = 4, m = 24: segments of 4 B -> 6 non-empty, 1.5 per rank -> 3 x 1.5 sends a phase.
    ("gloo_ring", "all_reduce", 4): (4.5, 36, 144, 9),
    # n = 6, m = 24: ceil(24/12) = 2 B -> one element, 4 B segments -> 6 non-empty, 1 per rank -> 5 sends a phase.
    ("gloo_ring", "all_reduce", 6): (5, 40, 240, 10),
    # gloo all-gather: the ring's steps and bytes, two halves per block -> 2(n-1) messages.
    ("gloo_ring", "all_gather", 4): (3, 18, 72, 6),
    ("gloo_ring", "all_gather", 6): (5, 20, 120, 10),
    # other gloo collectives: the plain ring.
    ("gloo_ring", "reduce_scatter", 4): (3, 18, 72, 3),
    ("gloo_ring", "broadcast", 6): (5, 24, 120, 5),
    ("gloo_ring", "reduce", 4): (3, 24, 72, 3),
    # gloo halving-doubling reduce-scatter: log2 rounds (2 / 3) + a distribution round (n >= 4) swapping m/n.
    ("gloo_halving_doubling", "reduce_scatter", 4): (3, 18 + 6, 72 + 24, 6),
    ("gloo_halving_doubling", "reduce_scatter", 6): (4, 20 + 4, 120 + 24, 8),
    ("gloo_halving_doubling", "reduce_scatter", 2): (1, 12, 24, 2),
    ("gloo_halving_doubling", "reduce_scatter", 3): (2, 16, 48, 4),
    ("gloo_halving_doubling", "all_reduce", 4): (4.5, 36, 144, 9),
    ("gloo_halving_doubling", "all_gather", 6): (5, 20, 120, 10),
    ("gloo_halving_doubling", "broadcast", 4): (3, 24, 72, 3),
}


def _cost(algorithm: str, collective: str, n, m=M, **kw) -> tuple[float, ...]:
    """The four fields of `collective_cost` as floats."""
    return tuple(float(x) for x in net.collective_cost(algorithm, collective, n, m, **kw))


@pytest.mark.parametrize("key", list(HAND), ids=["-".join(map(str, k)) for k in HAND])
def test_collective_cost_matches_the_hand_table(key: tuple) -> None:
    """Steps, busiest bytes, injected bytes and endpoint messages equal the hand-worked row."""
    algorithm, collective, n = key
    assert _cost(algorithm, collective, n) == pytest.approx(HAND[key])


@pytest.mark.parametrize("key", list(HAND), ids=["-".join(map(str, k)) for k in HAND])
def test_collective_cost_vectorised_over_devices(key: tuple) -> None:
    """An array of device counts [1, n, n] gives zeros for one device and the hand row for the others."""
    algorithm, collective, n = key
    cost = net.collective_cost(algorithm, collective, np.array([1, n, n]), M)
    for field, expected in zip(cost, HAND[key]):
        assert field.shape == (3,)
        assert field.tolist() == pytest.approx([0.0, expected, expected])


def test_one_device_costs_nothing() -> None:
    """One device: no steps, no bytes, no messages, whatever the algorithm."""
    for algorithm in net.ALGORITHMS:
        for collective in net.COLLECTIVES:
            assert _cost(algorithm, collective, 1) == (0.0, 0.0, 0.0, 0.0)


def test_message_bytes_broadcast_against_a_scalar_device_count() -> None:
    """A scalar n with an array of buffers gives one result per buffer (ring all-reduce: 2 (n-1)/n m)."""
    cost = net.collective_cost("ring", "all_reduce", 4, np.array([8.0, 24.0]))
    assert cost.busiest_bytes.tolist() == [12.0, 36.0]
    assert cost.steps.tolist() == [6.0, 6.0]


def test_default_buffer_is_empty_and_default_groups_are_four() -> None:
    """collective_cost's defaults: m = 0 bytes (steps only), hierarchical groups of 4 (n = 5: two levels)."""
    cost = net.collective_cost("ring", "all_reduce", 4)
    assert (float(cost.steps), float(cost.busiest_bytes)) == (6.0, 0.0)
    assert float(net.collective_cost("hierarchical", "all_reduce", 5).steps) == 4.0
    assert float(net.collective_cost("hierarchical", "all_reduce", 5, group_size=5).steps) == 2.0


# ---- tree with a fixed depth ------------------------------------------------------------------------
@pytest.mark.parametrize("n,depth,collective,expected", [
    # depth 1 over 8: fan-in 8, one level; a parent takes 7 buffers.
    (8, 1, "all_reduce", (2, 2 * 7 * M, 2 * 7 * M, 14)),
    (8, 1, "broadcast", (1, 7 * M, 7 * M, 7)),
    # depth 2 over 9: fan-in 3, two levels of 2 buffers.
    (9, 2, "all_reduce", (4, 8 * M, 2 * 8 * M, 8)),
    (9, 2, "reduce", (2, 4 * M, 8 * M, 4)),
    # depth 2 over 4: fan-in 2 (binary), two levels.
    (4, 2, "all_reduce", (4, 4 * M, 2 * 3 * M, 4)),
    # depth 3 over 4: fan-in stays 2 (never below 2); the paper's 3 levels set steps and messages,
    # the bytes follow the real binary tree (2 levels).
    (4, 3, "all_reduce", (6, 4 * M, 2 * 3 * M, 6)),
])
def test_tree_with_fixed_depth(n: int, depth: int, collective: str, expected: tuple) -> None:
    """`depth` fixes the levels: fan-in ceil(n^(1/depth)) (>= 2), steps = depth each way."""
    assert _cost("tree", collective, n, depth=depth) == pytest.approx(expected)


def test_depth_only_applies_to_the_tree() -> None:
    """A depth passed with another algorithm changes nothing."""
    for algorithm in ("ring", "star", "hierarchical", "halving_doubling", "mesh"):
        assert _cost(algorithm, "all_reduce", 4, depth=5) == _cost(algorithm, "all_reduce", 4)


# ---- helpers ------------------------------------------------------------------------------------------
def test_tree_depth() -> None:
    """Binary by default: 1 device 0 levels, 2 -> 1, 8 -> 3, 9 -> 4; fan-in 4: 16 -> 2, 17 -> 3."""
    assert net.tree_depth(np.array([1, 2, 8, 9])).tolist() == [0, 1, 3, 4]
    assert net.tree_depth(np.array([16, 17]), 4).tolist() == [2, 3]


def test_log2_steps() -> None:
    """Rounds of recursive halving: 1 -> 0, 2 -> 1, 4 -> 2, 8 -> 3; 3 -> 1 + 2 folds, 6 -> 2 + 2."""
    assert net._log2_steps(np.array([1, 2, 4, 8, 3, 6])).tolist() == [0, 1, 2, 3, 3, 4]


@pytest.mark.parametrize("n,m,expected", [
    (4, 24, 1.5),            # 4 B segments: 6 non-empty over 4 ranks
    (4, 4096, 2.0),          # 512 B segments: 8 = 2n of them
    (2, 8 * 2**20, 4.0),     # segments capped at 1 MiB: 8 of them over 2 ranks
    (3, 7 * 2**20, 7 / 3),   # 1 MiB segments: 7 non-empty (the count rounds up to 9, two of them empty)
    (4, 4, 0.25),            # one element: one segment in all
    (4, 0, 0.25),            # an empty buffer still sends one (empty) segment
    (1, 24, 2.0),            # one rank: 12 B segments, two of them
])
def test_gloo_segments_per_rank(n: int, m: float, expected: float) -> None:
    """Non-empty gloo segments per rank, worked from gloo/allreduce.cc's sizing rule."""
    assert float(net.gloo_segments_per_rank(n, m)) == pytest.approx(expected)


def test_gloo_ring_all_reduce_of_a_large_buffer() -> None:
    """4 ranks, 4096 B: 2 segments per rank, 3 x 2 = 6 sends a phase, 12 messages; bytes of the ring."""
    assert _cost("gloo_ring", "all_reduce", 4, 4096) == pytest.approx((6, 6144, 24576, 12))


def test_gloo_halving_doubling_distribution_round_vectorised() -> None:
    """The distribution round applies from 4 ranks on, also over an array of device counts."""
    cost = net.collective_cost("gloo_halving_doubling", "reduce_scatter", np.array([2, 3, 4, 6]), M)
    assert cost.steps.tolist() == [1, 2, 3, 4]
    assert cost.endpoint_messages.tolist() == [2, 4, 6, 8]
    assert cost.injected_bytes.tolist() == [24, 48, 96, 144]


# ---- the one-field wrappers ---------------------------------------------------------------------------
def test_traversals_passes_depth_and_group_size() -> None:
    """traversals: binary tree over 8 = 6 steps; fixed depth 2 over 9 = 4; groups of 2 over 16 = 8;
    default groups of 4 over 5 = 4; gloo's all-reduce of an empty buffer: 3 x 0.25 sends."""
    assert float(net.traversals("tree", "all_reduce", 8)) == 6.0
    assert float(net.traversals("tree", "all_reduce", 9, depth=2)) == 4.0
    assert float(net.traversals("hierarchical", "all_reduce", 16, group_size=2)) == 8.0
    assert float(net.traversals("hierarchical", "all_reduce", 5)) == 4.0
    assert float(net.traversals("gloo_ring", "all_reduce", 4)) == pytest.approx(0.75)


def test_bottleneck_bytes_passes_every_argument() -> None:
    """bottleneck_bytes: ring all-reduce 36 B; tree depth 1 over 8: 14 m; groups of 2 over 16: 8 m;
    default groups of 4 over 5: 2 x 2 x 3 m."""
    assert float(net.bottleneck_bytes("ring", "all_reduce", 4, M)) == 36.0
    assert float(net.bottleneck_bytes("star", "broadcast", 4, M)) == 72.0
    assert float(net.bottleneck_bytes("tree", "all_reduce", 8, M, depth=1)) == 14 * M
    assert float(net.bottleneck_bytes("hierarchical", "all_reduce", 16, M, group_size=2)) == 8 * M
    assert float(net.bottleneck_bytes("hierarchical", "all_reduce", 5, M)) == 12 * M


def test_total_traffic() -> None:
    """total_traffic: injected bytes (ring all-reduce over 4: 2 x 3 x 24; mesh all-reduce: 4 x 3 x 24)."""
    assert float(net.total_traffic("ring", "all_reduce", 4, M)) == 144.0
    assert float(net.total_traffic("mesh", "all_reduce", 4, M)) == 288.0
    assert float(net.total_traffic("star", "broadcast", 6, M)) == 120.0


def test_endpoint_messages_passes_every_argument() -> None:
    """endpoint_messages: star all-reduce over 4 = 6; tree depth 2 over 9 = 8; depth 1 over 8 = 2 x 7 (binary: 6);
    groups of 2 over 16 = 8; default groups of 4 over 5 = 12; gloo all-reduce of an empty buffer: 1.5."""
    assert float(net.endpoint_messages("star", "all_reduce", 4)) == 6.0
    assert float(net.endpoint_messages("tree", "all_reduce", 9, depth=2)) == 8.0
    assert float(net.endpoint_messages("tree", "all_reduce", 8, depth=1)) == 14.0
    assert float(net.endpoint_messages("tree", "all_reduce", 8)) == 6.0
    assert float(net.endpoint_messages("hierarchical", "all_reduce", 16, group_size=2)) == 8.0
    assert float(net.endpoint_messages("hierarchical", "all_reduce", 5)) == 12.0
    assert float(net.endpoint_messages("gloo_ring", "all_reduce", 4)) == pytest.approx(1.5)


# ---- latency, energy, topologies ------------------------------------------------------------------------
def test_collective_latency_terms() -> None:
    """Ring all-reduce over 4, 24 B, 12 B/s, 1 s per hop, 2 hops, 0.5 s per message:
    6 steps x 2 hops x 1 s + 6 messages x 0.5 s = 15 s of link term; 36 B / 12 B/s = 3 s of data."""
    link, data = net.collective_latency("ring", "all_reduce", 4, M, 12.0, 1.0, path_hops=2, breakdown=True,
                                        message_overhead=0.5)
    assert (float(link), float(data)) == (15.0, 3.0)
    total = net.collective_latency("ring", "all_reduce", 4, M, 12.0, 1.0, path_hops=2, message_overhead=0.5)
    assert float(total) == 18.0


def test_collective_latency_defaults_and_group_size() -> None:
    """Defaults: one hop, no message overhead, groups of 4 (over 5: 4 steps, 12 x 24 B); groups of 2 over 8:
    6 steps and 6 x 24 B (groups of 4 would take 4 steps and 12 x 24 B)."""
    assert float(net.collective_latency("ring", "all_reduce", 4, M, 12.0, 1.0)) == 6.0 + 3.0
    assert float(net.collective_latency("hierarchical", "all_reduce", 5, M, 24.0, 1.0)) == 4.0 + 12.0
    assert float(net.collective_latency("hierarchical", "all_reduce", 8, M, 24.0, 1.0, group_size=2)) == 6.0 + 6.0


@pytest.mark.parametrize("kw,match", [
    (dict(bandwidth=np.inf), r"^bandwidth must be finite and > 0 \(B/s\)$"),
    (dict(bandwidth=0.0), r"^bandwidth must be finite and > 0 \(B/s\)$"),
    (dict(latency=np.nan), r"^latency must be finite and >= 0 \(s\)$"),
    (dict(latency=-1.0), r"^latency must be finite and >= 0 \(s\)$"),
    (dict(message_bytes=np.inf), "^message_bytes must be finite and >= 0$"),
    (dict(message_bytes=-1.0), "^message_bytes must be finite and >= 0$"),
    (dict(n_devices=2.5), "^n_devices must be integers >= 1$"),
    (dict(n_devices=0), "^n_devices must be integers >= 1$"),
    (dict(path_hops=0), "^path_hops must be >= 1$"),
    (dict(message_overhead=np.nan), r"^message_overhead must be finite and >= 0 \(s\)$"),
    (dict(message_overhead=-1.0), r"^message_overhead must be finite and >= 0 \(s\)$"),
])
def test_collective_latency_rejects_bad_inputs(kw: dict, match: str) -> None:
    """Each bad input is rejected with a message naming it."""
    args = dict(n_devices=4, message_bytes=M, bandwidth=12.0, latency=1.0) | kw
    with pytest.raises(WorkbenchError, match=match):
        net.collective_latency("ring", "all_reduce", **args)


def test_collective_cost_rejects_unknown_names() -> None:
    """Unknown algorithm or collective names are listed in the error."""
    with pytest.raises(WorkbenchError, match="unknown algorithm 'bus'"):
        net.collective_cost("bus", "all_reduce", 4)
    with pytest.raises(WorkbenchError, match="unknown collective 'scan'"):
        net.collective_cost("ring", "scan", 4)


def test_allreduce_latency_passes_hops_and_options() -> None:
    """allreduce_latency = collective_latency(all_reduce): default one hop; hops and overhead are passed."""
    assert float(net.allreduce_latency("ring", 4, M, 12.0, 1.0)) == 9.0
    assert float(net.allreduce_latency("ring", 4, M, 12.0, 1.0, 3)) == 18.0 + 3.0
    assert float(net.allreduce_latency("ring", 4, M, 12.0, 1.0, 2, message_overhead=0.5)) == 18.0


def test_collective_energy() -> None:
    """Energy = injected bytes x hops x pJ/B: 144 B x 1 hop x 1e12 pJ/B = 144 J; 2 hops 288 J."""
    assert float(net.collective_energy("ring", "all_reduce", 4, M, 1e12)) == pytest.approx(144.0)
    assert float(net.collective_energy("ring", "all_reduce", 4, M, 1e12, 2)) == pytest.approx(288.0)


def test_link_from_mbps_and_validation() -> None:
    """8 Mbit/s = 1e6 B/s, 2 ms = 2e-3 s, extra fields pass through; no latency given means none."""
    link = net.Link.from_mbps(8.0, 2.0, name="wifi", message_overhead_s=1e-4)
    assert (link.bandwidth_bytes_per_s, link.latency_s, link.name, link.message_overhead_s) == (1e6, 2e-3, "wifi", 1e-4)
    assert net.Link.from_mbps(1.0).latency_s == 0.0
    assert net.Link.from_mbps(1.0).bandwidth_bytes_per_s == 125000.0
    with pytest.raises(WorkbenchError, match=r"bandwidth \(Mbps\) must be"):
        net.Link.from_mbps(0.0)
    with pytest.raises(WorkbenchError, match=r"latency \(ms\) must be"):
        net.Link.from_mbps(1.0, -1.0)


@pytest.mark.parametrize("kw,match", [
    (dict(bandwidth_bytes_per_s=0.0), "bandwidth_bytes_per_s must be"),
    (dict(latency_s=-1.0), "latency_s must be"),
    (dict(energy_pj_per_byte=-1.0), "energy_pj_per_byte must be"),
    (dict(message_overhead_s=-1.0), "message_overhead_s must be"),
])
def test_link_errors_name_the_field(kw: dict, match: str) -> None:
    """A bad link field is named in the error."""
    with pytest.raises(WorkbenchError, match=match):
        net.Link(**(dict(bandwidth_bytes_per_s=1.0) | kw))


def test_topology_validation() -> None:
    """Known kinds only; at least one device and at most max_devices; groups of at least 2."""
    link = net.Link(1.0)
    assert net.Topology("switch", 4, link, group_size=2).group_size == 2
    with pytest.raises(WorkbenchError, match="unknown topology 'bus'"):
        net.Topology("bus", 4, link)
    with pytest.raises(WorkbenchError, match="n_devices must be an integer >= 1 and <= 8"):
        net.Topology("switch", 9, link, max_devices=8)
    with pytest.raises(WorkbenchError, match="group_size must be an integer >= 2"):
        net.Topology("switch", 4, link, group_size=1)


def test_on_topology_uses_every_topology_field() -> None:
    """Ring all-reduce over a 4-device gateway tree (4 hops), 12 B/s, 1 s per hop, 0.5 s per message:
    6 x 4 + 6 x 0.5 = 27 s of link term and 3 s of data; hierarchical in groups of 2 over 16 devices
    (direct links): 8 steps + 8 x 24 B / 24 B/s."""
    link = net.Link(12.0, 1.0, message_overhead_s=0.5)
    topo = net.Topology("gateway_tree", 4, link)
    assert float(net.on_topology(topo, "ring", "all_reduce", M)) == 30.0
    parts = net.on_topology(topo, "ring", "all_reduce", M, breakdown=True)
    assert tuple(float(p) for p in parts) == (27.0, 3.0)
    pairs = net.Topology("direct", 16, net.Link(24.0, 1.0), group_size=2)
    assert float(net.on_topology(pairs, "hierarchical", "all_reduce", M)) == 16.0
    assert float(net.on_topology(net.Topology("switch", 9, net.Link(24.0, 1.0)), "tree", "all_reduce", M,
                                 depth=2)) == 4 * 2 + 8.0


def test_point_to_point() -> None:
    """One message: hops x latency + one send's overhead + bytes / bandwidth; defaults one hop, no overhead."""
    assert float(net.point_to_point(24.0, 12.0, 1.0)) == 3.0
    assert float(net.point_to_point(24.0, 12.0, 1.0, 3, 0.5)) == 3.0 + 0.5 + 2.0


def test_float32_device_counts_are_costed_in_float64() -> None:
    """JAX hands float32 arrays (x64 is off): device counts are converted to float64 first, so a binary
    tree over 2, 4, 8 devices has 1, 2, 3 levels (float32 logarithms would round 3 up to 4), and a ring
    all-reduce over 6 moves exactly 2 x 5/6 x 24 = 40 bytes (not float32's 5/6)."""
    n32 = np.array([2, 4, 8, 1024], dtype=np.float32)
    assert net.tree_depth(n32).tolist() == [1, 2, 3, 10]
    cost = net.collective_cost("ring", "all_reduce", np.float32(6), M)
    assert float(cost.busiest_bytes) == pytest.approx(40.0, rel=1e-12, abs=0)
    assert all(np.asarray(field).dtype == np.float64 for field in cost)
