"""llama.cpp's RPC layer split and exo's tensor / pipeline modes (issue 34 item 3): the layer rules are the
engines' own, the client's RPC messages and bytes are the closed form, exo's tensor mode is Megatron TP with the
head replicated, exo's pipeline is the core pipeline on exo's placement, and `[schemes.llamacpp] tensor_split`
reaches the evaluator."""

import tomllib
from dataclasses import replace

import numpy as np
import pytest

from workbench.core.errors import WorkbenchError
from workbench.core.io import REPO_ROOT
from workbench.machine.hardware import DeviceSpec, MemoryLevel
from workbench.machine.network import Link, Topology
from workbench.model.models import get_model
from workbench.scenarios.userconfig import parse_config
from workbench.schemes import edge_engines as E
from workbench.schemes.base import SCHEMES, Cluster, Workload, load_all
from workbench.schemes.galaxy import megatron_tp_on
from workbench.schemes.pipeline import PipelinePlan, evaluate_pipeline, handoff_time

EXAMPLE = REPO_ROOT / "examples" / "sbc_gigabit.toml"


def _cluster(n: int, gib: float = 8.0, overhead: float = 0.0, mbps: float = 1000.0) -> Cluster:
    device = DeviceSpec(name="board", peak_flops={"fp32": 150e9, "fp16": 300e9}, efficiency_gemm=0.4,
                        efficiency_gemv=0.4, memory=(MemoryLevel("DRAM", gib * 2**30, 17e9),))
    return Cluster((device,) * n, Topology("switch", n, Link.from_mbps(mbps, 0.05, message_overhead_s=overhead)))


W = Workload(phase="decode", kv_len=128, weight_bits=4.5, activation_bits=16, weight_format="q4_0")


def test_llamacpp_layer_rule_is_load_tensors_upper_bound():
    assert E.llamacpp_layers(40, [1, 1, 1, 1]) == (11, 10, 10, 9)  # L + 1 slots: the output layer takes one
    assert E.output_device(40, [1, 1, 1, 1]) == 3
    assert E.llamacpp_layers(32, [3, 1]) == (25, 7)  # il / 33 < 0.75 for il <= 24
    assert E.llamacpp_layers(32, [1, 0, 0]) == (32, 0, 0) and E.output_device(32, [1, 0, 0]) == 0
    with pytest.raises(WorkbenchError, match=r"tensor_split must be 3 comma-separated numbers >= 0 .* one per device "
                                             r"\(3 devices\).* got '1,2' \(2 given\)$"):
        E.parse_split("1,2", 3)
    with pytest.raises(WorkbenchError, match="not all zero"):
        E.parse_split("0,0", 2)


def test_rpc_client_messages_and_bytes_are_the_closed_form():
    """Per server: a SET_TENSOR per scheduler input (two hidden states from the client into the first server, one
    between servers; positions, K and V indices, the 256-cell F16 mask; the output ids on the last layer's server),
    a GRAPH_RECOMPUTE, a GET_TENSOR of its output (the logits on the last): queued commands pay the endpoint time,
    each GET a hand-off each way."""
    m, n, o = get_model("Llama 2-7B"), 4, 50e-6
    cl = _cluster(n, overhead=o)
    r = E.evaluate_llamacpp(m, cl, W)
    layers = r.extra["layers"]
    servers = sum(1 for i, a in enumerate(layers) if i and a)
    assert layers[0] and all(layers[1:]) and E.output_device(m.n_layers, [1] * n) == n - 1
    act, logits, frame = m.d_model * 4, m.vocab_size * 4, 9 + 296 + 1 + 8
    graph_inputs = 4 * frame + 4 + 8 + 8 + 256 * 2
    sent = (servers + 1) * (frame + act) + servers * graph_inputs + (frame + 4) + servers * ((9 + 4) + (9 + 296 + 16))
    received = (servers - 1) * (8 + act) + (8 + logits)  # the last server returns the logits
    t = r.extra["traffic"]
    set_tensors = (servers + 1) + 4 * servers + 1
    assert (t.messages, t.sent_bytes, t.received_bytes) == (set_tensors + 3 * servers, sent, received)
    one_way = handoff_time(cl, 0.0)[0]
    assert r.comm_link_latency_s == pytest.approx((set_tensors + servers) * o + servers * 2 * one_way)
    assert r.comm_bytes_s == pytest.approx((t.sent_wire_bytes + t.received_wire_bytes) / (1000e6 / 8))
    assert t.sent_wire_bytes > sent and t.received_wire_bytes > received  # headers on every segment
    assert r.parts_s == pytest.approx(r.latency_s, rel=1e-12)


def test_rpc_per_message_time_grows_with_every_board():
    m = get_model("Llama 2-7B")
    links = [SCHEMES["llamacpp_rpc"][1](m, _cluster(n, overhead=1e-4), W).comm_link_latency_s for n in (2, 4, 8)]
    assert links[0] < links[1] < links[2]


def test_tensor_split_from_the_toml_reaches_the_evaluator():
    from workbench.scenarios.arena import arena_for_config

    doc = tomllib.loads(EXAMPLE.read_text())
    doc["model"]["name"] = "Llama 2-7B"
    doc["schemes"] = {"llamacpp": {"tensor_split": "1,1,0,0"}}
    table = arena_for_config(parse_config(doc, "t.toml", EXAMPLE.parent), schemes=["llamacpp_rpc"]).table()
    assert "RPC layer split 17 / 15 / 0 / 0" in table.notes.iloc[0]  # il / 33 < 0.5: 17 layers, then 15
    doc["schemes"] = {"llamacpp": {"tensor_split": "3:1:0:0"}}  # ':' separates as ',' does (whatif --set)
    table = arena_for_config(parse_config(doc, "t.toml", EXAMPLE.parent), schemes=["llamacpp_rpc"]).table()
    assert "RPC layer split 25 / 7 / 0 / 0" in table.notes.iloc[0]


@pytest.mark.parametrize(("split", "message"), [
    ("1,1", r"must be 4 comma-separated numbers >= 0 \(finite, not all zero\), one per device \(4 devices\).* "
            r"got '1,1' \(2 given\)$"),
    ("2/1/1", r"must be 4 comma-separated numbers .*got '2/1/1' \(3 given\)$"),
    ("inf,1,1,1", r"must be comma-separated numbers >= 0 \(finite, not all zero\), one per device.* got 'inf,1,1,1'"),
    ("nan,1,1,1", r"must be comma-separated .*got 'nan,1,1,1'"),
    ("1,1,x,1", r"must be comma-separated .*got '1,1,x,1'")])
def test_a_bad_tensor_split_is_a_load_error_naming_the_key_not_an_n_a_row(split, message):
    doc = tomllib.loads(EXAMPLE.read_text())
    doc["schemes"] = {"llamacpp": {"tensor_split": split}}
    with pytest.raises(WorkbenchError, match=r"^t\.toml: schemes\.llamacpp\.tensor_split " + message) as info:
        parse_config(doc, "t.toml", EXAMPLE.parent)
    assert "\n" not in str(info.value)


def test_exo_layers_are_largest_remainder_with_one_a_node():
    assert E.exo_layers(32, [3, 1, 1]) == (19, 7, 6)
    assert E.exo_layers(4, [100, 1, 1, 1]) == (1, 1, 1, 1)
    with pytest.raises(WorkbenchError, match=r"n_devices must be <= n_layers \(2\)"):
        E.exo_layers(2, [1, 1, 1])


def test_exo_pipeline_is_the_core_pipeline_on_exos_placement_and_refuses_what_exo_refuses():
    m = get_model("Llama 2-7B")
    got = SCHEMES["exo_pipeline"][1](m, _cluster(3), W)
    want = evaluate_pipeline(m, _cluster(3), W, PipelinePlan(E.exo_layers(m.n_layers, [1, 1, 1])))
    assert got.latency_s == want.latency_s and got.paper == "exo" and not got.oom
    small = SCHEMES["exo_pipeline"][1](m, _cluster(2, gib=1.0), W)
    assert small.oom and "exo refuses node 0" in small.notes


def test_exo_tensor_is_megatron_with_the_head_replicated():
    m, n = get_model("Llama 2-7B"), 4
    no_head = replace(W, output_head=False)
    ex, mg = SCHEMES["exo_tensor"][1](m, _cluster(n), no_head), megatron_tp_on(m, _cluster(n), no_head)
    assert ex.latency_s == pytest.approx(mg.latency_s, rel=1e-12)  # the same layers and all_sums
    outside = (m.embedding_params() + m.head_params()) * 4.5 / 8
    np.testing.assert_allclose(np.subtract(ex.peak_memory_bytes, mg.peak_memory_bytes), outside * (1 - 1 / n))
    with_head = SCHEMES["exo_tensor"][1](m, _cluster(n), W)
    assert with_head.latency_s > SCHEMES["megatron_tp"][1](m, _cluster(n), W).latency_s  # the whole head, each node
    with pytest.raises(WorkbenchError, match=r"n_devices must divide n_heads \(32\)"):
        E.check_exo_tensor(m, 3)


def test_registered_and_running_on_the_sbc_example():
    from workbench.scenarios.arena import arena_for_config
    from workbench.scenarios.userconfig import load_config

    names = ["llamacpp_rpc", "exo_pipeline", "exo_tensor"]
    assert set(names) <= set(load_all())
    table = arena_for_config(load_config(EXAMPLE), schemes=names).table()
    assert (table.status == "ok").all() and set(table.paper) == {"llama.cpp", "exo"}
