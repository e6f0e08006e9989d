"""distributed-llama's tensor parallelism (issue 18 item 4): the all-gather-of-partials TP (v0.12-v0.16) and
the TP through the root (v0.8-v0.10). Kernels equal the reference; their compiled collectives carry the cost
model's messages and bytes (per layer and per forward); the cost model puts the messages where the engine
does (mesh: n-1 per sync per node; star: 2(n-1) per sync at the root) and the root's work in serial_s."""

import re
from dataclasses import replace

import jax.numpy as jnp
import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.kernels import engines as K
from workbench.kernels import reference as ref
from workbench.kernels.mesh import make_mesh
from workbench.kernels.traffic import compiled_collectives, compiled_hlo, parse_collectives
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model, tiny_config
from workbench.schemes import engines as S
from workbench.schemes.base import SCHEMES, Cluster, Workload, load_all

PROMPT = [5, 17, 3, 42, 8, 61]


@pytest.fixture(scope="module")
def tiny():
    cfg = tiny_config("llama", vocab_size=96)  # 8 heads, 8 KV heads, d_ff 128, vocab split by 2/4/8
    return cfg, ref.init_params(cfg, seed=1)


@pytest.fixture(scope="module")
def gqa():
    cfg = tiny_config("llama", vocab_size=96, n_kv_heads=2)  # 2 KV groups: meshes of 2 split them evenly
    return cfg, ref.init_params(cfg, seed=2)


@pytest.fixture(scope="module")
def greedy(tiny):
    cfg, params = tiny
    return ref.generate_greedy(cfg, params, PROMPT, 4)


# ---- kernels == reference --------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("kind", K.KINDS)
def test_greedy_generation_equals_reference(tiny, greedy, kind, n, cpu_devices):
    cfg, params = tiny
    assert K.generate(cfg, params, PROMPT, 4, make_mesh(n), kind) == greedy


@pytest.mark.parametrize("kind", K.KINDS)
def test_logits_equal_reference_and_cache_is_distributed(gqa, kind, cpu_devices):
    cfg, params = gqa
    tokens = np.array([3, 1, 4, 1, 5, 9])
    full = np.asarray(ref.forward(cfg, params, tokens))
    ep = K.shard_params(cfg, params, make_mesh(2), kind)
    cache = K.empty_cache(ep, 8)
    logits, cache = K.forward(ep, tokens[:4], cache)
    np.testing.assert_allclose(np.asarray(logits), full[:4], rtol=2e-4, atol=2e-5)
    step, cache = K.forward(ep, tokens[4:5], cache)
    np.testing.assert_allclose(np.asarray(step[0]), full[4], rtol=2e-4, atol=2e-5)
    assert cache.length == 5 and len(cache.k.sharding.device_set) == 2
    heads = cfg.n_kv_heads if kind == "root8" else 1  # one KV head per device; v0.1-v0.4: all on the root
    assert cache.k.shape == (2, cfg.n_layers, 8, heads, cfg.d_head)
    assert ep.root["embed"].devices() == {ep.root_device}


@pytest.mark.parametrize("n", [3, 8])
def test_sync_primitives_sum_and_gather_in_device_order(n, cpu_devices):
    import jax
    from jax.sharding import PartitionSpec as P

    x = jnp.arange(n * 5, dtype=jnp.float32).reshape(n, 5) ** 1.5
    mesh = make_mesh(n)

    def run(fn):
        f = jax.jit(jax.shard_map(lambda v: fn(v[0], "x", n)[None], mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                  check_vma=False))
        return np.asarray(f(x))

    total = np.asarray(x).sum(0)
    summed = run(K.mesh_sum)
    np.testing.assert_allclose(summed, np.broadcast_to(total, summed.shape), rtol=1e-6)
    assert (summed == summed[0]).all()  # every node adds the partials in the same order: identical x
    np.testing.assert_allclose(run(K.reduce_to_root)[0], total, rtol=1e-6)
    np.testing.assert_array_equal(run(K.gather_to_root)[0], np.asarray(x))


# ---- compiled collectives == the cost model's ---------------------------------------------------------------
def _while_body(hlo: str) -> str:
    """The text of the layer loop's body computation (the scan compiles to one while loop)."""
    bodies = re.findall(r"\bwhile\(.*?body=%([\w.\-]+)", hlo)
    assert len(bodies) == 1, bodies
    start = re.search(rf"^%{re.escape(bodies[0])} \(", hlo, re.M)
    assert start, bodies[0]
    return hlo[start.start():hlo.index("\n}", start.start())]


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("kind", ["allgather", "root"])
def test_compiled_collectives_carry_the_models_messages_and_bytes(tiny, kind, n, rows, cpu_devices):
    cfg, params = tiny
    ep = K.shard_params(cfg, params, make_mesh(n), kind)
    args = K.program_inputs(ep, np.arange(rows), K.empty_cache(ep, 4))
    got = compiled_collectives(K.program_for(ep), *args)
    assert set(got.kind) == {"collective-permute"}
    want = K.expected_traffic(cfg, n, kind, rows)  # per-forward syncs + one layer (the loop is compiled once)
    assert len(got) == want["messages"] and got.result_bytes.sum() == pytest.approx(want["bytes"])
    # per layer: the loop body holds exactly the model's per-layer syncs
    layer = parse_collectives(_while_body(compiled_hlo(K.program_for(ep), *args)))
    per_layer = [s for s in S.forward_syncs(K.SCHEME_OF[kind], cfg, n, rows, 32) if s.per_layer]
    model = S.sync_traffic(per_layer, n)
    assert len(layer) == model["messages"] and sum(c.result_bytes for c in layer) == pytest.approx(model["bytes"])
    mesh_like = 2 * rows * (n - 1) if kind == "allgather" else 2 * 2 * rows * (n - 1)
    assert model["messages"] == mesh_like
    assert model["bytes"] == pytest.approx(mesh_like * cfg.d_model * 4)  # every message is one full-d F32 row


def test_q80_blocks_are_34_bytes_per_32_values_and_round_trip(cpu_devices):
    x = jnp.asarray(np.random.default_rng(0).normal(size=128).astype(np.float32))
    packed = K.q80_pack(x)
    assert packed.shape == (4, 34) and packed.dtype == jnp.uint8 and packed.size == 128 * S.Q80_BYTES_PER_VALUE
    back = np.asarray(K.q80_unpack(packed))
    scale = np.abs(np.asarray(x)).reshape(4, 32).max(1) / 127
    assert np.all(np.abs(back - np.asarray(x)).reshape(4, 32) <= scale[:, None] * 0.51 + 1e-3 * scale[:, None])
    np.testing.assert_array_equal(np.asarray(K.q80_unpack(K.q80_pack(jnp.zeros(32)))), np.zeros(32))


@pytest.mark.parametrize("kind", ["allgather", "root"])
def test_q80_wire_compiles_to_the_models_q80_bytes_and_stays_close(tiny, kind, cpu_devices):
    cfg, params = tiny
    n, rows = 4, 3
    ep = K.shard_params(cfg, params, make_mesh(n), kind, wire="q80")
    args = K.program_inputs(ep, np.arange(rows), K.empty_cache(ep, 4))
    got = compiled_collectives(K.program_for(ep), *args)
    want = K.expected_traffic(cfg, n, kind, rows, wire="q80")
    assert len(got) == want["messages"] and got.result_bytes.sum() == pytest.approx(want["bytes"])
    layer = parse_collectives(_while_body(compiled_hlo(K.program_for(ep), *args)))
    per_layer = 2 * rows * (n - 1) * (1 if kind == "allgather" else 2)
    assert len(layer) == per_layer
    assert sum(c.result_bytes for c in layer) == pytest.approx(per_layer * cfg.d_model * 34 / 32)
    tokens = np.array([3, 1, 4, 1, 5])
    logits, _ = K.forward(ep, tokens, K.empty_cache(ep, 6))
    full = np.asarray(ref.forward(cfg, params, tokens))
    err = np.abs(np.asarray(logits) - full).max() / np.abs(full).max()
    assert 0 < err < 0.05  # quantised syncs: close to the reference, not equal


def test_wire_format_is_q80_for_narrow_activations():
    assert S.wire_bytes_per_value(8) == S.Q80_BYTES_PER_VALUE == 34 / 32
    assert S.wire_bytes_per_value(8.5) == 34 / 32 and S.wire_bytes_per_value(16) == 2.0
    m = get_model("Llama 2-7B")
    q80, f16 = (S.forward_syncs("dllama_allgather_tp", m, 4, 1, bits) for bits in (8, 16))
    assert [s.message_bytes for s in q80 if s.per_layer] == [m.d_model * 34 / 32] * 2
    assert [s.message_bytes for s in f16 if s.per_layer] == [m.d_model * 2.0] * 2
    x = [s for s in q80 if s.name == "x"][0]
    assert x.message_bytes == m.d_model * 4  # the X pipe is F32 whatever the sync type
    with pytest.raises(WorkbenchError, match="activation_bits"):
        S.wire_bytes_per_value(0)


# ---- the cost model ----------------------------------------------------------------------------------------
def _device(launch_s: float = 0.0) -> DeviceSpec:
    return DeviceSpec(name="pi-like", peak_flops={"fp32": 150e9, "fp16": 300e9}, efficiency_gemm=0.4,
                      efficiency_gemv=0.4, memory=(MemoryLevel("DRAM", 8 * 2**30, 17e9),), kernel_launch_s=launch_s)


def _cluster(n: int, *, message_overhead: float = 0.0, latency_ms: float = 0.05, mbps: float = 1000.0,
             launch_s: float = 0.0) -> Cluster:
    link = Link.from_mbps(mbps, latency_ms, message_overhead_s=message_overhead)
    return Cluster((_device(launch_s),) * n, Topology("switch", n, link))


def _link_per_layer(scheme: str, n: int, o: float) -> float:
    """Per-message seconds one more layer adds (wire latency 0, so only endpoint messages count)."""
    m = get_model("Llama 2-7B")
    cl = _cluster(n, message_overhead=o, latency_ms=0.0, mbps=1e9)
    w = Workload(phase="decode", kv_len=64, weight_bits=4.5, activation_bits=8)
    fn = SCHEMES[scheme][1]
    return fn(m.with_changes(n_layers=3), cl, w).comm_link_latency_s - fn(m.with_changes(n_layers=2), cl, w).comm_link_latency_s


def test_per_message_cost_mesh_at_every_node_star_at_the_root():
    o, n = 1e-4, 4
    assert _link_per_layer("dllama_allgather_tp", n, o) == pytest.approx(2 * (n - 1) * o)  # 2 syncs x n-1 peers
    assert _link_per_layer("dllama_root_tp", n, o) == pytest.approx(2 * 2 * (n - 1) * o)  # root: n-1 in + n-1 out
    for m in (2, 8):  # and both grow linearly in n
        assert _link_per_layer("dllama_allgather_tp", m, o) == pytest.approx(2 * (m - 1) * o)
        assert _link_per_layer("dllama_root_tp", m, o) == pytest.approx(4 * (m - 1) * o)


def test_root_serial_work_grows_with_n_the_allgathers_does_not():
    m = get_model("Llama 2-7B")
    w = Workload(phase="decode", kv_len=128, weight_bits=4.5, activation_bits=8)
    # the engines' own model (the registered evaluators take local's time on one device)
    own = {"dllama_allgather_tp": S.evaluate_allgather_tp, "dllama_root_tp": S.evaluate_root_tp}
    serial = {s: [own[s](m, _cluster(n), w).serial_s for n in (1, 2, 4, 8)] for s in own}
    assert np.all(np.diff(serial["dllama_root_tp"]) > 0)  # the root merges n partials, twice a layer
    assert np.allclose(serial["dllama_allgather_tp"], serial["dllama_allgather_tp"][0], rtol=1e-12)
    assert serial["dllama_root_tp"][0] > 10 * serial["dllama_allgather_tp"][0]  # norms and the head on the root


def test_breakdown_adds_up_and_fixed_costs_are_the_launches():
    m, launch = get_model("Llama 2-7B"), 20e-6
    w = Workload(phase="decode", kv_len=128, weight_bits=4.5, activation_bits=8)
    ag = S.evaluate_allgather_tp(m, _cluster(4, launch_s=launch), w)
    rt = S.evaluate_root_tp(m, _cluster(4, launch_s=launch), w)
    for r in (ag, rt):
        assert r.parts_s == pytest.approx(r.latency_s, rel=1e-12) and r.paper == "distributed_llama"
        assert not r.oom and len(r.peak_memory_bytes) == 4
    assert ag.fixed_s == pytest.approx(m.n_layers * 7 * launch + launch)  # 7 kernels a layer + the head's share
    assert rt.fixed_s == pytest.approx(m.n_layers * 5 * launch)  # workers skip the connective blocks
    assert rt.peak_memory_bytes[0] > rt.peak_memory_bytes[1]  # the root holds the whole classifier
    assert ag.peak_memory_bytes[0] - ag.peak_memory_bytes[1] == pytest.approx(m.vocab_size * m.d_model * 4)


def test_root_prefill_is_s_single_token_forwards():
    m = get_model("Llama 2-7B").with_changes(n_layers=2)
    cl = _cluster(2, message_overhead=5e-5)
    pre = Workload(phase="prefill", seq_len=5, weight_bits=4.5, activation_bits=8)
    got = S.root_prefill(m, cl, pre)
    steps = [S.root_forward(m, cl, replace(pre, phase="decode", kv_len=p), sample=p == 5) for p in range(1, 6)]
    want = steps[0]
    for f in steps[1:]:
        want = want + f
    np.testing.assert_allclose(got.astuple(), want.astuple(), rtol=1e-12)
    link = S.evaluate_allgather_tp(m, cl, pre).comm_link_latency_s
    assert link == pytest.approx(S.comm_time(cl, S.forward_syncs("dllama_allgather_tp", m, 2, 5, 8), 2)[0])


def test_registered_and_in_the_arena_on_the_sbc_example():
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    registry = load_all()
    assert {"dllama_allgather_tp", "dllama_root_tp"} <= set(registry)
    table = arena_for_config(load_config("examples/sbc_gigabit.toml"), schemes=list(S.VERSIONS)).table()
    assert set(table.scheme) == set(S.VERSIONS) and (table.status == "ok").all()


def test_bad_device_counts_are_one_line_errors():
    m, w = get_model("Llama 2-7B"), Workload(phase="decode")
    with pytest.raises(WorkbenchError, match=r"n_devices must divide n_kv_heads \(32\).*allowed: 1, 2, 4"):
        S.evaluate_allgather_tp(m, _cluster(3), w)
    with pytest.raises(WorkbenchError, match="n_devices must divide"):
        S.evaluate_root_tp(get_model("Llama 3.1-8B"), _cluster(16), w)  # 8 KV heads
    with pytest.raises(WorkbenchError, match="syncs_per_layer"):
        S.evaluate_root_tp(m, _cluster(2), w, syncs_per_layer=0)
    with pytest.raises(WorkbenchError, match="Llama-family"):
        S.evaluate_allgather_tp(tiny_config("gpt", vocab_size=96), _cluster(2), w)
    with pytest.raises(WorkbenchError, match="n_devices must be an integer >= 1"):
        S.check_split(m, 0)
    assert "\n" not in _message(lambda: S.evaluate_allgather_tp(m, _cluster(3), w))


def test_kernel_errors(tiny, cpu_devices):
    cfg, params = tiny
    with pytest.raises(WorkbenchError, match="kind"):
        K.shard_params(cfg, params, make_mesh(2), "ring")
    with pytest.raises(WorkbenchError, match=r"n_devices must divide d_ff|n_devices must divide n_kv_heads"):
        K.shard_params(cfg, params, make_mesh(3), "allgather")
    odd = cfg.with_changes(vocab_size=97)
    with pytest.raises(WorkbenchError, match=r"vocab_size \(97\)"):
        K.shard_params(odd, ref.init_params(odd, 0), make_mesh(2), "allgather")
    ep = K.shard_params(cfg, params, make_mesh(2), "root")
    with pytest.raises(WorkbenchError, match="KV cache holds 2 tokens"):
        K.forward(ep, [1, 2, 3], K.empty_cache(ep, 2))


def _message(fn) -> str:
    try:
        fn()
    except WorkbenchError as exc:
        return str(exc)
    raise AssertionError("no error")


# ---- v0.1-v0.4 and v0.5-v0.7 (issue 34 item 3) -----------------------------------------------------------
OLD = ("dllama_root8_tp", "dllama_root6_tp")


@pytest.mark.parametrize("bits", [8, 32])
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("scheme", [*OLD, "dllama_root_tp"])
def test_root_schemes_bytes_per_node_per_token_equal_the_closed_form(scheme, n, bits):
    m = get_model("Llama 2-7B")  # d 4096, kv 4096, d_ff 11008
    d, f, L = m.d_model, m.d_ff, m.n_layers
    w = 34 / 32 if bits == 8 else 4.0
    closed = S.node_bytes_per_token(scheme, m, n, bits)
    want_sends = {"dllama_root8_tp": (5 * d + f) / n, "dllama_root6_tp": d + f / n + d / n,
                  "dllama_root_tp": 2 * d}[scheme] * w * L  # Llama 2-7B: kv = d
    want_receives = {"dllama_root8_tp": 3 * d + (n - 1) * f / n, "dllama_root6_tp": 2 * d + (n - 1) * f / n,
                     "dllama_root_tp": 2 * d}[scheme] * w * L + 2
    assert closed["worker_sends"] == pytest.approx(want_sends) and closed["worker_receives"] == pytest.approx(want_receives)
    syncs = S.forward_syncs(scheme, m, n, 1, bits, output_head=True)
    # the scheme's messages: a worker sends the reduces' buffers and receives the broadcasts'
    per_layer = {c: sum(s.message_bytes * s.repeats for s in syncs if s.per_layer and s.collective == c)
                 for c in ("reduce", "broadcast")}
    once = sum(s.message_bytes for s in syncs if not s.per_layer)
    assert L * per_layer["reduce"] == pytest.approx(closed["worker_sends"])
    assert L * per_layer["broadcast"] + once == pytest.approx(closed["worker_receives"])
    traffic = S.sync_traffic(syncs, n, L)  # the root's link: n-1 workers' both ways
    assert traffic["bytes"] == pytest.approx(closed["root_sends"] + closed["root_receives"])
    assert traffic["messages"] == L * S.root_messages_per_layer(scheme, n) + (n - 1)


@pytest.mark.parametrize("scheme", OLD)
def test_old_versions_comm_time_is_their_bytes_over_the_link(scheme):
    m, n = get_model("Llama 2-7B"), 4
    cl = _cluster(n, latency_ms=0.0, mbps=1000.0)
    w = Workload(phase="decode", kv_len=64, weight_bits=4.5, activation_bits=8)
    r = SCHEMES[scheme][1](m, cl, w)
    closed = S.node_bytes_per_token(scheme, m, n, 8)
    assert r.comm_bytes_s == pytest.approx((closed["root_sends"] + closed["root_receives"]) / (1000e6 / 8), rel=1e-9)
    assert r.paper == "distributed_llama" and r.parts_s == pytest.approx(r.latency_s, rel=1e-12)


def test_per_message_cost_at_the_root_grows_as_n_squared_in_the_old_versions():
    o = 1e-4
    for n in (2, 4, 8):
        assert _link_per_layer("dllama_root6_tp", n, o) == pytest.approx((n - 1) * (n + 4) * o)
        assert _link_per_layer("dllama_root8_tp", n, o) == pytest.approx((n - 1) * (n + 8) * o)


def test_v01_runs_every_head_on_the_root_and_holds_the_whole_cache_there():
    m, n = get_model("Llama 2-7B"), 4
    w = Workload(phase="decode", kv_len=2048, weight_bits=4.5, activation_bits=8)
    v01, v05 = (S.evaluate_root_tp(m, _cluster(n), w, scheme=s) for s in OLD)
    root = _device()
    attention = m.n_layers * float(S.common.attention_time(m, root, w, m.n_heads))
    assert v01.serial_s - v05.serial_s > 0.9 * attention  # the root's own attention replaces the merges
    kv = m.kv_cache_bytes(w.attended, w.cache_bits)
    assert v01.peak_memory_bytes[0] - v05.peak_memory_bytes[0] == pytest.approx(kv - kv / n)
    assert v05.peak_memory_bytes[1] - v01.peak_memory_bytes[1] == pytest.approx(kv / n)


@pytest.mark.parametrize("scheme", OLD)
def test_old_versions_prefill_is_s_single_token_forwards(scheme):
    m = get_model("Llama 2-7B").with_changes(n_layers=2)
    cl = _cluster(2, message_overhead=5e-5)
    pre = Workload(phase="prefill", seq_len=4, weight_bits=4.5, activation_bits=8)
    got = S.root_prefill(m, cl, pre, scheme=scheme)
    steps = [S.root_forward(m, cl, replace(pre, phase="decode", kv_len=p), sample=p == 4, scheme=scheme)
             for p in range(1, 5)]
    want = steps[0]
    for f in steps[1:]:
        want = want + f
    np.testing.assert_allclose(got.astuple(), want.astuple(), rtol=1e-12)


def test_old_versions_are_registered_and_run_in_the_arena():
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    assert set(OLD) <= set(load_all())
    table = arena_for_config(load_config("examples/sbc_gigabit.toml"), schemes=list(OLD)).table()
    assert (table.status == "ok").all() and "v0.1-v0.4" in table[table.scheme == "dllama_root8_tp"].notes.iloc[0]


@pytest.mark.parametrize(("n", "rows"), [(2, 1), (4, 3), (8, 1)])
@pytest.mark.parametrize("kind", ["root6", "root8"])
def test_old_versions_compile_to_their_closed_form(tiny, kind, n, rows, cpu_devices):
    """v0.1-v0.7 kernels: the compiled forward's messages and bytes are the cost model's, and one layer's are
    the docstring's closed form (root's link: n-1 workers' sends + receives; (n-1)(n+8) or (n-1)(n+4) messages)."""
    cfg, params = tiny
    ep = K.shard_params(cfg, params, make_mesh(n), kind)
    args = K.program_inputs(ep, np.arange(rows), K.empty_cache(ep, 4))
    got = compiled_collectives(K.program_for(ep), *args)
    want = K.expected_traffic(cfg, n, kind, rows)
    assert set(got.kind) == {"collective-permute"}
    assert len(got) == want["messages"] and got.result_bytes.sum() == pytest.approx(want["bytes"])
    layer = parse_collectives(_while_body(compiled_hlo(K.program_for(ep), *args)))
    one = cfg.with_changes(n_layers=1)
    closed = S.node_bytes_per_token(K.SCHEME_OF[kind], one, n, 32)
    assert sum(c.result_bytes for c in layer) == pytest.approx(rows * (closed["root_sends"] + closed["root_receives"]
                                                                      - (n - 1) * S.POSITION_BYTES))
    assert len(layer) == rows * S.root_messages_per_layer(K.SCHEME_OF[kind], n)


@pytest.mark.parametrize("kind", ["root6", "root8"])
def test_old_versions_q80_wire_compiles_to_q80_bytes_and_stays_close(tiny, kind, cpu_devices):
    cfg, params = tiny
    n, rows = 2, 1  # d/n, d_ff/n and kv/n multiples of 32: whole Q80 blocks
    ep = K.shard_params(cfg, params, make_mesh(n), kind, wire="q80")
    args = K.program_inputs(ep, np.arange(rows), K.empty_cache(ep, 4))
    got = compiled_collectives(K.program_for(ep), *args)
    want = K.expected_traffic(cfg, n, kind, rows, wire="q80")
    assert len(got) == want["messages"] and got.result_bytes.sum() == pytest.approx(want["bytes"])
    closed = S.node_bytes_per_token(K.SCHEME_OF[kind], cfg.with_changes(n_layers=1), n, 8)  # the loop compiles once
    assert got.result_bytes.sum() == pytest.approx(closed["root_sends"] + closed["root_receives"])
    tokens = np.array([3, 1, 4, 1, 5])
    logits, _ = K.forward(ep, tokens, K.empty_cache(ep, 6))
    full = np.asarray(ref.forward(cfg, params, tokens))
    err = np.abs(np.asarray(logits) - full).max() / np.abs(full).max()
    assert 0 < err < 0.05


def test_hidden_exchange_gives_every_device_every_slice_in_order(cpu_devices):
    import jax
    from jax.sharding import PartitionSpec as P

    n = 4
    x = jnp.arange(n * 6, dtype=jnp.float32).reshape(n, 6) + 1
    f = jax.jit(jax.shard_map(lambda v: K.hidden_exchange(v[0], "x", n)[None], mesh=make_mesh(n), in_specs=P("x"),
                              out_specs=P("x"), check_vma=False))
    out = np.asarray(f(x))
    for i in range(n):
        np.testing.assert_array_equal(out[i], np.asarray(x))
