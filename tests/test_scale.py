"""Costs that scale (issue 19): a 1,024-device arena evaluates (timing lives in benchmarks/bench_scale.py), and
the vectorised paths equal the per-device / per-task ones they replace, bit for bit."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from workbench.core.io import REPO_ROOT
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.papers import galaxy as PG
from workbench.scenarios.arena import arena_for_config
from workbench.scenarios.userconfig import load_config
from workbench.schemes import common
from workbench.schemes import galaxy as G
from workbench.schemes.base import Cluster, Workload


def scaled_example(tmp_path, count: int):
    """examples/sbc_gigabit.toml with `count` devices, written to a temporary TOML and loaded."""
    text = (REPO_ROOT / "examples" / "sbc_gigabit.toml").read_text()
    assert "\ncount = 4\n" in text
    path = tmp_path / f"sbc_{count}.toml"
    path.write_text(text.replace("\ncount = 4\n", f"\ncount = {count}\n"))
    return load_config(path)


def test_a_1024_device_arena_finishes_with_finite_numbers(tmp_path):
    config = scaled_example(tmp_path, 1024)
    assert config.cluster.n == 1024
    table = arena_for_config(config).table()
    ran = table[table["status"] != "n/a"]
    assert {"galaxy_hmp", "galaxy_hmp_overlap", "megatron_tp", "sp", "layerwise_mp", "pipeline_offload"} <= \
        set(ran["scheme"])
    columns = ["latency_s", "compute_s", "memory_s", "fixed_s", "serial_s", "comm_link_latency_s", "comm_bytes_s",
               "io_stall_s", "other_s", "peak_memory_bytes"]
    assert np.isfinite(ran[columns].to_numpy(dtype=float)).all()
    assert (ran["latency_s"] > 0).all()


def _random_partition(rng: random.Random, model, n: int, tokens: int) -> G.Partition:
    group = model.n_heads // model.n_kv_heads

    def split(total: int) -> tuple[int, ...]:
        cuts = sorted(rng.randint(0, total) for _ in range(n - 1))
        return tuple(b - a for a, b in zip([0] + cuts, cuts + [total]))

    return G.Partition(tuple(g * group for g in split(model.n_kv_heads)), split(model.d_ff), split(tokens))


def _clusters():
    """Heterogeneous and homogeneous clusters: Galaxy's environments, repeated and mixed device objects."""
    yield PG.environment("F", 100)
    yield PG.environment("D", 1000)
    yield PG.environment("C", 10, "gpu")
    a, b = PG.nano_cpu("L"), PG.nano_cpu("M")
    link = Link.from_mbps(200, 0.3, message_overhead_s=20e-6)
    for devices in ((a,) * 7, (a, b, a, a, b, b, a, b, a), (b,)):
        yield Cluster(devices, Topology("switch", len(devices), link))


def _cases():
    rng = random.Random(19)
    for ci, cluster in enumerate(_clusters()):
        for model_name in ("BERT-L", "OPT-L"):
            model = get_model(model_name)
            for phase, seq in (("prefill", 9), ("prefill", 3), ("decode", 12)):
                wl = Workload(phase, seq, seq, output_head=False)
                for k in range(2):
                    part = _random_partition(rng, model, cluster.n, wl.new_tokens) if k else \
                        G.uniform_partition(model, cluster.n, wl.new_tokens)
                    yield pytest.param(model, cluster, wl, part, id=f"c{ci}-{model_name}-{phase}{seq}-{k}")


@pytest.mark.parametrize("model, cluster, wl, part", list(_cases()))
def test_overlap_makespans_equal_the_task_timeline_bit_for_bit(model, cluster, wl, part):
    for stacked in (cluster, PG.with_network_stack(cluster, 12)):
        fast = G.overlap_makespans(model, stacked, wl, part, 2)
        slow = [G.overlap_timeline(model, stacked, wl, part, k).makespan for k in (1, 2)]
        assert fast == slow


@pytest.mark.parametrize("model, cluster, wl, part", list(_cases())[::3])
def test_per_device_class_blocks_equal_the_per_device_loop(model, cluster, wl, part):
    tiles = G.tile_times(model, cluster, wl, part)
    blocks = G.hmp_block_times(model, cluster, wl, part)
    seq = np.asarray(part.seq, dtype=float)
    for i, (d, a, b, s) in enumerate(zip(cluster.devices, part.heads, part.mlp_cols, part.seq)):
        row = common.kernel_times(model, d, wl, a, b, seq)
        whole = common.kernel_times(model, d, wl, a, b, wl.new_tokens)
        for k in ("qkv", "out", "ffn1", "ffn2"):
            assert np.array_equal(tiles[k][i], row[k])
            assert blocks[k][i] == float(whole[k])
        assert blocks["attn"][i] == float(common.attention_time(model, d, wl, a))
        assert blocks["con"][i] == float(G.connective_latency(model, d, wl, s))
        before, after = G.sp_layer_compute(model, d, wl, s)
        g = common.kernel_times(model, d, wl, model.n_heads, model.d_ff, s)
        assert before == float(g["qkv"])
        assert after == float(g["out"] + g["ffn1"] + g["ffn2"]
                              + common.attention_time(model, d, wl, model.n_heads, s)
                              + 2 * G.connective_latency(model, d, wl, s) + common.layer_overhead(d))
    fixed = G.fixed_layer_seconds("galaxy_hmp_overlap", model, cluster, wl, part)
    launches = G.layer_launches("galaxy_hmp_overlap", model, wl, part)
    assert fixed.tolist() == [float(d.launch_time(k)) + common.layer_overhead(d)
                              for d, k in zip(cluster.devices, launches)]


def test_layer_parts_memo_returns_fresh_equal_dicts():
    model, device = get_model("OPT-L"), PG.nano_cpu("L")
    wl = Workload("decode", 16, 16)
    first = common.layer_parts(model, device, wl)
    first["qkv"] = -1.0  # a caller's change does not reach the memo
    again = common.layer_parts(model, device, wl)
    assert again == common._layer_parts(model, device, wl) and again["qkv"] > 0
    other = common.layer_parts(model, device, replace(wl, kv_len=32))
    assert other["attn"] != again["attn"]


def test_distinct_devices_groups_by_identity_in_order():
    a, b = PG.nano_cpu("L"), PG.nano_cpu("M")
    groups = common.distinct_devices((a, b, a, b, b))
    assert [d is x for (d, _), x in zip(groups, (a, b))] == [True, True]
    assert [g.tolist() for _, g in groups] == [[0, 2], [1, 3, 4]]
    assert math.isclose(common.output_head_time(get_model("OPT-L"), (a, b, a), Workload("decode", 8, 8)),
                        max(common.lm_head_time(get_model("OPT-L"), d, Workload("decode", 8, 8)) for d in (a, b)) / 3,
                        rel_tol=0, abs_tol=0)
