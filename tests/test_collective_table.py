"""One cost table per collective algorithm: held to what the kernels compile to, and to its own invariants.

For each ppermute algorithm the TPI-LLM kernel sends (star, ring, tree) and several device counts, the
compiled program's collective-permute count must equal the table's endpoint messages and its summed
per-device result bytes the table's busiest-link bytes (fixed-costs issue, item 2).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError
from workbench.kernels import tpi_llm as K
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_collectives
from workbench.machine import network as net

WIDTH = 24  # floats per device: divisible by every n below, so the ring's chunks are exact


def _compiled(fn, n):
    mesh = make_mesh(n)
    f = jax.jit(jax.shard_map(lambda v: fn(v[0], "x", n)[None], mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                              check_vma=False))
    return compiled_collectives(f, jnp.ones((n, WIDTH), jnp.float32))


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("algorithm", ["star", "ring", "tree"])
def test_allreduce_kernels_compile_to_the_tables_messages_and_bytes(algorithm, n, cpu_devices):
    rows = _compiled(lambda x, axis, n: K.allreduce(x, axis, n, algorithm), n)
    permutes = rows[rows.kind == "collective-permute"]
    cost = net.collective_cost(algorithm, "all_reduce", n, WIDTH * 4)
    assert len(permutes) == int(cost.endpoint_messages), (algorithm, n)
    assert permutes.result_bytes.sum() == pytest.approx(float(cost.busiest_bytes)), (algorithm, n)
    assert set(rows.kind) <= {"collective-permute"}


@pytest.mark.parametrize("n", [2, 4, 8])
def test_star_broadcast_compiles_to_n_minus_1_sends_from_the_master(n, cpu_devices):
    rows = _compiled(K.star_broadcast, n)
    cost = net.collective_cost("star", "broadcast", n, WIDTH * 4)
    assert len(rows) == int(cost.endpoint_messages) == n - 1
    assert rows.result_bytes.sum() == pytest.approx(float(cost.busiest_bytes))


def test_unknown_algorithm_or_collective_is_an_error_not_a_tree():
    with pytest.raises(WorkbenchError, match="algorithm"):
        net.collective_cost("butterfly", "all_reduce", 4, 1.0)
    with pytest.raises(WorkbenchError, match="collective"):
        net.collective_cost("ring", "all_to_all_v", 4, 1.0)


@pytest.mark.parametrize("algorithm", net.ALGORITHMS)
@pytest.mark.parametrize("collective", net.COLLECTIVES)
def test_one_device_costs_nothing_and_more_devices_never_cost_less(algorithm, collective):
    n = np.arange(1, 17)
    cost = net.collective_cost(algorithm, collective, n, 1e6)
    for part in cost:
        assert part[0] == 0.0
        assert np.all(part >= 0)
    assert np.all(np.diff(cost.injected_bytes) >= 0)
    assert np.all(np.diff(cost.endpoint_messages) >= 0) or algorithm in ("halving_doubling",)


def test_tree_sends_one_buffer_per_level_and_its_depth_sets_the_bytes():
    m = 1e6
    binary = net.collective_cost("tree", "all_reduce", 8, m)
    assert float(binary.steps) == 6 and float(binary.busiest_bytes) == 6 * m  # 3 levels up + 3 down, m each
    shallow = net.collective_cost("tree", "all_reduce", 8, m, depth=2)  # fan-in 3: a parent takes 2 buffers
    assert float(shallow.steps) == 4 and float(shallow.busiest_bytes) == 2 * 2 * 2 * m
    assert float(shallow.endpoint_messages) == 2 * 2 * 2


def test_star_master_handles_every_message_in_turn():
    o = 1e-3
    for n in (2, 4, 8):
        link, data = net.collective_latency("star", "all_reduce", n, 0, 1e9, 0.0, message_overhead=o,
                                            breakdown=True)
        assert float(link) == pytest.approx(2 * (n - 1) * o)  # n-1 receives, then n-1 sends
        assert float(data) == 0.0
    # the wire latency is still paid twice (TPI-LLM Appendix A.1)
    assert float(net.traversals("star", "all_reduce", 8)) == 2


def test_halving_doubling_takes_log_rounds_and_folds_a_non_power_of_two():
    m = 8e6
    pow2 = net.collective_cost("halving_doubling", "all_reduce", 8, m)
    assert float(pow2.steps) == 6 and float(pow2.busiest_bytes) == pytest.approx(2 * 7 / 8 * m)
    odd = net.collective_cost("halving_doubling", "all_reduce", 6, m)
    assert float(odd.steps) == 2 * (2 + 2)  # floor(log2 6) = 2 rounds each way + fold in / out
    assert float(odd.busiest_bytes) > float(net.collective_cost("ring", "all_reduce", 6, m).busiest_bytes)


def test_mesh_all_gather_is_one_round_of_n_minus_1_sends():
    m = 8e6
    cost = net.collective_cost("mesh", "all_gather", 8, m)
    assert float(cost.steps) == 1 and float(cost.endpoint_messages) == 7
    assert float(cost.busiest_bytes) == pytest.approx(7 / 8 * m)
    partials = net.collective_cost("mesh", "all_reduce", 8, m)  # distributed-llama's all-gather of partials
    assert float(partials.busiest_bytes) == pytest.approx(7 * m)


def test_endpoint_time_is_separate_from_wire_hops():
    kw = dict(n_devices=4, message_bytes=0, bandwidth=1e9, path_hops=2)
    wire = net.collective_latency("ring", "all_reduce", latency=1e-3, **kw)
    endpoint = net.collective_latency("ring", "all_reduce", latency=0.0, message_overhead=1e-3, **kw)
    assert float(wire) == pytest.approx(6 * 2 * 1e-3)  # steps x hops x tau
    assert float(endpoint) == pytest.approx(6 * 1e-3)  # messages x o, not multiplied by hops
    with pytest.raises(WorkbenchError, match="message_overhead"):
        net.collective_latency("ring", "all_reduce", latency=0.0, message_overhead=-1.0, **kw)
    with pytest.raises(WorkbenchError, match="message_overhead_s"):
        net.Link(1e9, message_overhead_s=-1.0)
