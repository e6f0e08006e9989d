"""Shaped links: `network.token_bucket_time` (tc tbf's buckets, message by message) and the engine schemes' use of it
(`engines.shaped_comm_time`, `edge_engines.rpc_steps` / `shaped_rpc_seconds`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.core.errors import WorkbenchError
from workbench.machine.network import Link, Step, Topology, Transfer, token_bucket_time
from workbench.model.models import TransformerConfig
from workbench.schemes import edge_engines, engines
from workbench.schemes.base import Cluster, Workload

RATE = 1.25e6  # 10 Mbit/s in bytes/s
FRAME = 1514


def alternating(n_messages: int, size: float, gap: float) -> list[Step]:
    """A synchronous ping-pong: `size` bytes each way in turn, `gap` seconds of compute before each."""
    return [Step(gap, (Transfer(i % 2, 1 - i % 2, size),)) for i in range(n_messages)]


def test_without_a_bucket_every_message_takes_its_bytes_at_the_rate():
    steps = alternating(20, 600.0, 1e-4)
    assert token_bucket_time(steps, RATE, 0.0) == pytest.approx(20 * (1e-4 + 600 / RATE), rel=1e-9)


def test_a_bucket_passes_a_message_no_larger_than_itself_after_an_idle_gap():
    idle = [Step(1.0, (Transfer(0, 1, 1000.0),))]  # 1 s refills any bucket here
    assert token_bucket_time(idle, RATE, FRAME) == pytest.approx(1.0, abs=1e-12)
    assert token_bucket_time(idle, RATE, 0.0) == pytest.approx(1.0 + 1000 / RATE, rel=1e-9)


def test_a_larger_message_waits_for_the_bytes_beyond_the_bucket():
    idle = [Step(1.0, (Transfer(0, 1, 10_000.0),))]
    assert token_bucket_time(idle, RATE, FRAME) - 1.0 == pytest.approx((10_000 - FRAME) / RATE, rel=1e-9)


def test_directions_refill_apart_so_the_busier_direction_bounds_a_long_run():
    """Small messages both ways in turn: each direction's bytes at the rate, not both directions' in series."""
    steps = alternating(20, 600.0, 1e-4)
    one_direction = 10 * 600 / RATE
    shaped = token_bucket_time(steps, RATE, FRAME)
    assert shaped == pytest.approx(one_direction, rel=1e-6)
    assert shaped < token_bucket_time(steps, RATE, 0.0) / 2


def test_a_deep_bucket_drains_over_many_periods_before_the_steady_state():
    """Back-to-back messages with no gap: a bucket of any depth ends empty, so each period pays every byte."""
    steps = [Step(0.0, (Transfer(0, 1, 10_000.0),))]
    assert token_bucket_time(steps, RATE, 64 * 1024) == pytest.approx(10_000 / RATE, rel=1e-9)


def test_messages_sharing_a_port_go_one_after_another():
    """A star broadcast from port 0 to three others: its egress bucket passes the three in turn."""
    step = [Step(1.0, tuple(Transfer(0, w, 5000.0) for w in (1, 2, 3)))]
    assert token_bucket_time(step, RATE, 0.0) - 1.0 == pytest.approx(3 * 5000 / RATE, rel=1e-9)
    apart = [Step(1.0, tuple(Transfer(w, w + 3, 5000.0) for w in (0, 1, 2)))]
    assert token_bucket_time(apart, RATE, 0.0) - 1.0 == pytest.approx(5000 / RATE, rel=1e-9)


def test_messages_into_one_port_go_one_after_another_and_the_step_waits_for_the_longest():
    """A star reduce: two workers' buffers queue at the root's ingress bucket; a step lasts its longest transfer."""
    gather = [Step(1.0, (Transfer(1, 0, 5000.0), Transfer(2, 0, 5000.0)))]
    assert token_bucket_time(gather, RATE, 0.0) - 1.0 == pytest.approx(2 * 5000 / RATE, rel=1e-9)
    uneven = [Step(1.0, (Transfer(0, 1, 10_000.0), Transfer(2, 3, 100.0)))]
    assert token_bucket_time(uneven, RATE, 0.0) - 1.0 == pytest.approx(10_000 / RATE, rel=1e-9)


def test_a_transfer_enters_the_wire_when_its_sender_is_ready():
    """Queued sends overlap the wire: the step lasts the later of the last send's readiness and the bytes."""
    sends = tuple(Transfer(0, 1, 100.0, ready_s=(j + 1) * 1e-3) for j in range(4))
    assert token_bucket_time([Step(0.0, sends)], RATE, 0.0) == pytest.approx(4e-3 + 100 / RATE, rel=1e-9)
    big = tuple(Transfer(0, 1, 10_000.0, ready_s=(j + 1) * 1e-5) for j in range(4))
    assert token_bucket_time([Step(0.0, big)], RATE, 0.0) == pytest.approx(1e-5 + 40_000 / RATE, rel=1e-9)


@pytest.mark.parametrize("bad, needle", [
    (lambda: Transfer(0, 0, 1.0), "two ports"),
    (lambda: Transfer(0, 1, -1.0), "n_bytes"),
    (lambda: Transfer(-1, 1, 1.0), "src"),
    (lambda: Transfer(0, 1, 1.0, ready_s=-1.0), "ready_s"),
    (lambda: Step(-1.0), "gap_s"),
    (lambda: Step(0.0, ("x",)), "Transfer"),
    (lambda: token_bucket_time([Step(0.0)], 0.0, 1.0), "rate_bytes_per_s"),
    (lambda: token_bucket_time([Step(0.0)], 1.0, -1.0), "bucket_bytes"),
    (lambda: token_bucket_time(["x"], 1.0, 1.0), "Step"),
    (lambda: token_bucket_time([Step(0.0)], 1.0, 1.0, max_periods=0), "max_periods"),
    (lambda: Link(1e6, bucket_bytes=-1.0), "bucket_bytes"),
])
def test_bad_input_is_one_line_naming_the_parameter(bad, needle):
    with pytest.raises(WorkbenchError) as err:
        bad()
    assert needle in str(err.value) and "\n" not in str(err.value)


TINY = TransformerConfig("tiny", "llama", n_layers=4, d_model=512, n_heads=8, d_ff=1024, vocab_size=512, n_kv_heads=4)


def cluster(bucket: float, n: int = 2) -> Cluster:
    """n copies of a small CPU on a 10 Mbit switch, `bucket` bytes of tbf bucket (0: a wire)."""
    from workbench.machine.hardware import load_device

    device = load_device("this_machine_xeon")
    return Cluster((device,) * n, Topology("switch", n, Link(RATE, 0.0, message_overhead_s=1e-5,
                                                              bucket_bytes=bucket)))


DECODE = Workload("decode", seq_len=16, kv_len=16, weight_bits=4.5, activation_bits=32.0, kv_bits=32.0,
                  engine="distributed-llama", weight_format="q4_0")


@pytest.mark.parametrize("scheme", ["dllama_allgather_tp", "dllama_root8_tp"])
def test_a_bucket_smaller_than_every_message_costs_the_bytes_of_the_wire(scheme):
    """The shaped timeline and the collective table agree where the bucket holds almost nothing: one cost, two
    paths (a 1-byte bucket lets 1 byte a message through free)."""
    syncs = engines.forward_syncs(scheme, TINY, 2, 1, 32.0)
    wire_link, wire_data = engines.comm_time(cluster(0.0), syncs, TINY.n_layers)
    link, data = engines.shaped_comm_time(cluster(1.0), syncs, TINY.n_layers, 1e-3)
    assert link == pytest.approx(wire_link, rel=1e-9)
    assert data == pytest.approx(wire_data, rel=1e-3)


def test_a_frame_bucket_makes_small_syncs_cheaper_and_a_wire_keeps_the_table():
    evaluate = engines.evaluate_dllama_root8_tp
    wire = evaluate(TINY, cluster(0.0), DECODE)
    shaped = evaluate(TINY, cluster(FRAME), DECODE)
    assert shaped.comm_bytes_s < 0.7 * wire.comm_bytes_s
    assert shaped.compute_s == pytest.approx(wire.compute_s, rel=1e-12)
    assert shaped.comm_link_latency_s == pytest.approx(wire.comm_link_latency_s, rel=1e-12)


def test_sync_transfers_follow_the_collective_table():
    star = engines.Sync("x", "star", "broadcast", 100.0, 2)
    assert engines.sync_transfers(star, 3) == (Transfer(0, 1, 200.0), Transfer(0, 2, 200.0))
    gather = engines.Sync("y", "star", "reduce", 10.0)
    assert engines.sync_transfers(gather, 3) == (Transfer(1, 0, 10.0), Transfer(2, 0, 10.0))
    mesh = engines.sync_transfers(engines.Sync("z", "mesh", "all_reduce", 8.0), 3)
    assert sorted((t.src, t.dst) for t in mesh) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    with pytest.raises(WorkbenchError, match="no message pattern"):
        engines.sync_transfers(engines.Sync("w", "ring", "all_reduce", 8.0), 3)


def test_rpc_steps_queue_the_requests_then_wait_for_each_reply():
    requests = [(10, 100), (20, 200), (30, 300), (40, 400)]  # (payload, wire): two queued, two GET_TENSORs
    replies = [(5, 50), (6, 60)]
    steps = edge_engines.rpc_steps(2, requests, replies, before_s=1.0, compute_s=2.0, message_s=0.1, handoff_s=0.5)
    assert [s.gap_s for s in steps] == [1.0, 2.5, 0.5, 0.0]
    assert steps[0].transfers == (Transfer(0, 2, 100, 0.1), Transfer(0, 2, 200, 0.2), Transfer(0, 2, 300, 0.30000000000000004))
    assert steps[1].transfers == (Transfer(2, 0, 50),)
    assert steps[2].transfers == (Transfer(0, 2, 400),) and steps[3].transfers == (Transfer(2, 0, 60),)


def test_llamacpp_on_a_shaped_link_pays_less_than_its_wire_bytes():
    model = TransformerConfig("rpc-tiny", "llama", n_layers=4, d_model=256, n_heads=4, d_ff=512, vocab_size=2048,
                              n_kv_heads=2, max_positions=512, tie_embeddings=False)
    work = Workload("decode", seq_len=32, kv_len=48, weight_bits=16.0, activation_bits=32.0, kv_bits=16.0,
                    engine="llama.cpp", weight_format="f16")
    wire = edge_engines.evaluate_llamacpp(model, cluster(0.0), work, "1,1")
    shaped = edge_engines.evaluate_llamacpp(model, cluster(FRAME), work, "1,1")
    traffic = wire.extra["traffic"]
    assert shaped.extra["traffic"].messages == traffic.messages
    assert 0 < shaped.comm_bytes_s < wire.comm_bytes_s
    # never below the busier direction's wire bytes less one bucket a reply, at the rate
    floor = (max(traffic.sent_wire_bytes, traffic.received_wire_bytes) - 2 * FRAME) / RATE
    assert shaped.comm_bytes_s + shaped.comm_link_latency_s >= floor
    assert replace(shaped, notes="").compute_s == pytest.approx(wire.compute_s, rel=1e-12)


def test_the_output_heads_compute_refills_the_buckets_like_any_other_compute():
    """evaluate_llamacpp hands rpc_traffic each device's compute with the head on the output device: on a deep bucket
    that drains, the head's seconds of refill change the bytes seconds (so leaving them out is seen)."""
    from workbench.schemes.pipeline import PipelinePlan, coefficients, plan_cost

    model = TransformerConfig("rpc-small", "llama", n_layers=8, d_model=512, n_heads=8, d_ff=1408, vocab_size=8192,
                              n_kv_heads=4, max_positions=512, tie_embeddings=False)
    work = Workload("decode", seq_len=32, kv_len=48, weight_bits=16.0, activation_bits=32.0, kv_bits=16.0,
                    engine="llama.cpp", weight_format="f16")
    shaped = cluster(64 * 1024.0)
    split = edge_engines.parse_split("1,1", 2)
    layers = edge_engines.llamacpp_layers(model.n_layers, split)
    last = edge_engines.output_device(model.n_layers, split)
    cost = plan_cost(coefficients(model, shaped, work), PipelinePlan(layers))
    assert last == 1 and cost.head_s > 0
    with_head = [c + (cost.head_s if i == last else 0.0) for i, c in enumerate(cost.compute_s)]
    expected = edge_engines.rpc_traffic(model, shaped, work, layers, last, with_head).bytes_s
    without = edge_engines.rpc_traffic(model, shaped, work, layers, last, cost.compute_s).bytes_s
    assert abs(expected - without) > 1e-6
    got = edge_engines.evaluate_llamacpp(model, shaped, work, "1,1").comm_bytes_s
    assert got == pytest.approx(expected, rel=1e-9)
