"""The HLO collective reader sees what a compiled shard_map program moves."""

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_collectives, parse_collectives, traffic_summary


def test_reads_each_collective_kind_and_bytes(cpu_devices):
    mesh = make_mesh(4)

    def f(x_sd):  # x_sd: (16/4, 8) per device
        a = jax.lax.psum(x_sd, "x")
        b = jax.lax.all_gather(x_sd, "x", tiled=True)  # (16, 8)
        c = jax.lax.psum_scatter(b, "x", tiled=True)  # (4, 8)
        d = jax.lax.ppermute(x_sd, "x", [(i, (i + 1) % 4) for i in range(4)])
        return a + c + d

    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    table = compiled_collectives(g, jnp.ones((16, 8)))
    assert traffic_summary(table) == {"all-gather": 16 * 8 * 4, "all-reduce": 4 * 8 * 4,
                                      "reduce-scatter": 4 * 8 * 4, "collective-permute": 4 * 8 * 4}
    assert set(table.loc[table.kind != "collective-permute", "group_size"]) == {4}


def test_parser_handles_async_and_iota_groups():
    text = ("%ar = f32[8]{0} all-reduce-start(f32[8]{0} %p), replica_groups=[2,4]<=[8], to_apply=%add\n"
            "%ard = f32[8]{0} all-reduce-done(f32[8]{0} %ar)\n"
            "%ag = (f32[2]{0}, f32[8]{0}) all-gather-start(f32[2]{0} %q), replica_groups={{0,1,2,3}}\n")
    found = parse_collectives(text)
    assert [(c.kind, c.result_bytes, c.group_size) for c in found] == [("all-reduce", 32, 4), ("all-gather", 32, 4)]


def test_parser_reads_a_tuple_shape_with_index_comments():
    """A collective returning six or more arrays writes /*index=5*/ inside its tuple shape (an 8-way all-to-all):
    it is still read, with every array's bytes."""
    line = ("  %all-to-all = (f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}, f32[2,4]{1,0}, "
            "/*index=5*/f32[2,4]{1,0}) all-to-all(%a, %b, %c, %d, %e, %f), replica_groups={{0,1,2,3,4,5}}")
    (found,) = parse_collectives(line)
    assert (found.kind, found.result_bytes) == ("all-to-all", 6 * 2 * 4 * 4)
