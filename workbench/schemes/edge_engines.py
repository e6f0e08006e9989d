"""llama.cpp's RPC layer split and exo's tensor and pipeline modes, on the core's pipeline and TP cost paths.

* ``llamacpp_rpc`` - llama.cpp with `--rpc` servers (ggml-org/llama.cpp `tools/rpc/README.md`). Layers go to
  devices by `load_tensors`' rule (`src/llama-model.cpp`: layer il -> the first device whose cumulative split
  exceeds il / (L + 1), the output layer in slot L; the splits are each device's free memory or
  `--tensor-split`, option `[schemes.llamacpp] tensor_split = "3,1,1,1"`). Device 0 is the client: it embeds
  (the input layer stays on the host) and runs its own layers locally; every other device is an RPC server the
  client drives through one command queue per server (llama.cpp 0c1e57098, ggml/src/ggml-rpc/ggml-rpc.cpp):
  per token and server holding layers, one `RPC_CMD_SET_TENSOR` per tensor the scheduler copies into its split
  (hidden states and graph inputs: `server_inputs`), `RPC_CMD_GRAPH_RECOMPUTE` (the decode graph is reused),
  and `RPC_CMD_GET_TENSOR` of what the next split needs (the logits on the output device); `rpc_traffic` has
  the file:line of each. A request is 1 command byte + an 8-byte size + its body, sent in three `send()`s with
  TCP_NODELAY; a tensor is named by a packed `rpc_tensor` of 296 bytes (ggml-rpc.cpp:39-57). Servers never
  talk to each other, so every hand-off goes up to the client and down again: the per-message cost that grows
  with every board (llama.cpp PR #16020's "every device you add, it gets worse").
* ``exo_pipeline`` - exo's pipeline placement (exo-explore/exo `src/exo/master/placement_utils.py`,
  `allocate_layers_proportionally`: layers by each node's share of available RAM, largest remainder, at least
  one layer a node), costed by `workbench.schemes.pipeline.evaluate_pipeline` (hand-offs node to node, the
  head on the first, nothing offloaded); a node whose layers' share of the model exceeds its memory makes exo
  refuse the placement (`_allocate_and_validate_layers`): here an OOM result naming it.
* ``exo_tensor`` - exo's tensor mode (`src/exo/worker/engines/mlx/auto_parallel.py`, `LlamaShardingStrategy`:
  q/k/v and gate/up all-to-sharded, o_proj and down_proj sharded-to-all, i.e. an MLX `all_sum` after each
  attention and MLP block; heads and KV heads divided by N), costed by Galaxy's `megatron_tp_on` (two ring
  all-reduces a layer); the embedding and output head are not sharded, so every node holds them whole and runs
  the whole head (instead of Megatron's vocabulary split and its all-gather).

Assumed: the hidden state between llama.cpp splits travels as F32 (4 bytes a value, llama.cpp's residual stream
type); a decode step reuses its graph (`RPC_CMD_GRAPH_RECOMPUTE`), a prefill is a prompt after generation, so the
graph changed and each server gets it whole (`RPC_CMD_GRAPH_COMPUTE`, `split_graphs`; counted for dense Llama-family
models, whose graph builder it follows; not for others: said in the notes); TCP's pure ACKs are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from workbench.core.errors import WorkbenchError
from workbench.core.fields import FieldSpec, TomlKey, declared
from workbench.machine.network import Step, Transfer, token_bucket_time
from workbench.model.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import (
    Cluster,
    SchemeResult,
    Workload,
    costed,
    load_all,
    over_budget_note,
    register,
    with_streaming_split,
)
from workbench.schemes.galaxy import MEGATRON_TP
from workbench.schemes.partitions import head_cost, megatron_tp_on, one_device_is_local
from workbench.schemes.pipeline import (
    PipelinePlan,
    coefficients,
    evaluate_pipeline,
    handoff_time,
    plan_cost,
)

RPC_TENSOR_BYTES = 296  # packed rpc_tensor (derived: 0c1e57098 ggml-rpc.cpp:39-57, include/ggml.h:222-229)
RPC_HEADER_BYTES = 1 + 8  # command byte + uint64 request size (quoted: ggml-rpc.cpp:307-321)
RPC_REPLY_HEADER_BYTES = 8  # uint64 response size (quoted: ggml-rpc.cpp:323-340, send_msg :258-266)
F32_BYTES = 4  # the hidden state and logits between splits (assumed: llama.cpp's F32 residual stream)
F16_BYTES = 2  # the KQ mask with flash attention (quoted: llama-graph.cpp:982; flash attention auto is on for CPU)
OUTPUT_ROWS = 1  # rows whose logits a pass returns: the last token's (llama-cpp-python and llama-bench ask for one)
MSS_BYTES = 1448  # TCP payload a segment on a 1500-byte MTU with timestamps (derived: 1500 - 20 IPv4 - 32 TCP)
FRAME_BYTES = 14 + 20 + 32  # Ethernet + IPv4 + TCP-with-timestamps headers a packet (derived: RFC 894/791/7323)
# RPC_CMD_GRAPH_COMPUTE's body (quoted: 0c1e57098 ggml-rpc.cpp:1017-1020 serialize_graph): device, n_nodes and
# n_tensors (uint32 each), one uint64 id a node, one rpc_tensor for every tensor reachable from the nodes (add_tensor,
# ggml-rpc.cpp:990-1008: srcs and view_src, each once)
GRAPH_HEADER_BYTES = 3 * 4
NODE_ID_BYTES = 8
# Nodes and other tensors of llama.cpp 0c1e57098's Llama graph with flash attention (derived from the builder;
# view ops are graph nodes, ggml.c ggml_visit_parents): a layer (src/models/llama.cpp:126-211) is 31 nodes:
# attn_norm RMS_NORM + MUL (build_norm :132), Q/K/V MUL_MAT + RESHAPE_3D each (build_qkv, llama-graph.cpp:1703-1748),
# ROPE of Q and K (:146, :152), the cache stores VIEW_2D + SET_ROWS each (llama-kv-cache.cpp:1340-1353, 1374-1385),
# attention's VIEW_4D + PERMUTE of Q, PERMUTE of K and V (llama-graph.cpp:2635-2639), the cache views get_k / get_v
# (llama-kv-cache.cpp:1288, 1309), FLASH_ATTN_EXT (llama-graph.cpp:2660), RESHAPE_2D (:2686), attn_output MUL_MAT,
# the residual ADD (:178), ffn_norm RMS_NORM + MUL (:184), gate, up, SWIGLU, down (build_ffn), the residual ADD;
# the last layer adds two GET_ROWS of the output rows (:174-176); the head is RMS_NORM + MUL + MUL_MAT (:231-240).
# Other tensors: 9 weights a layer (attn_norm, q, k, v, o, ffn_norm, gate, up, down) and its K and V cache
# (view sources), the head's 2 (output_norm, output); every split input (one tensor each).
LAYER_NODES = 31
LAST_LAYER_NODES = 2
HEAD_NODES = 3
LAYER_TENSORS = 9 + 2
HEAD_TENSORS = 2
# Below this many tokens a pass pins each layer's first norm to the layer's device (quoted: src/llama-context.cpp
# :2643-2657, "ubatch.n_tokens < 32 || full_offload"); from it on, the scheduler's pass 2 (ggml-backend.cpp:1129-1148,
# expand down) gives that norm to the previous server, so two hidden states (norm and residual) cross that boundary
PIN_NORM_BELOW_TOKENS = 32


# ---- llama.cpp: which device holds which layer ------------------------------------------------------
SPLIT_SEPARATORS = ",/:"  # llama.cpp splits --tensor-split on ',' and '/' (common/arg.cpp); ':' for whatif --set


def split_parts(text: str) -> list[str]:
    """The entries of a `--tensor-split` text, split on any of SPLIT_SEPARATORS (empty entries dropped)."""
    for sep in SPLIT_SEPARATORS[1:]:
        text = text.replace(sep, ",")
    return [p.strip() for p in text.split(",") if p.strip()]


def parse_split(text: str, n: int | None) -> tuple[float, ...]:
    """`--tensor-split` text ("3,1,1,1", "3/1/1/1" or "3:1:1:1": one finite proportion >= 0 per device, not all
    zero) as numbers, `n` of them (None: any count); else one line saying what it needs and how many it got."""
    parts = split_parts(str(text))
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if (n is not None and len(values) != n) or not values or any(not (math.isfinite(v) and v >= 0) for v in values) \
            or not sum(values) > 0:
        count, devices = ("", "") if n is None else (f"{n} ", f" ({n} device{'s' if n != 1 else ''})")
        raise WorkbenchError(f"tensor_split must be {count}comma-separated numbers >= 0 (finite, not all zero), one "
                             f"per device{devices}; ':' or '/' also separate them; got {text!r} ({len(parts)} given)")
    return values


def llamacpp_layers(n_layers: int, split) -> tuple[int, ...]:
    """Layers per device by llama.cpp's `load_tensors` rule: layer il goes to the first device whose cumulative
    normalised split exceeds il / (n_layers + 1) (the output layer takes slot n_layers)."""
    weights = np.asarray(split, dtype=float)
    cumulative = np.cumsum(weights) / weights.sum()
    owner = np.searchsorted(cumulative, np.arange(n_layers) / (n_layers + 1), side="right")
    owner = np.minimum(owner, len(weights) - 1)
    return tuple(int(c) for c in np.bincount(owner, minlength=len(weights)))


def output_device(n_layers: int, split) -> int:
    """The device holding llama.cpp's output layer (slot n_layers of n_layers + 1)."""
    weights = np.asarray(split, dtype=float)
    cumulative = np.cumsum(weights) / weights.sum()
    return int(min(np.searchsorted(cumulative, n_layers / (n_layers + 1), side="right"), len(weights) - 1))


def memory_split(model: TransformerConfig, cluster: Cluster, workload: Workload) -> tuple[float, ...]:
    """llama.cpp's default split: each device's free memory (its budget; the client's less the embeddings)."""
    coef = coefficients(model, cluster, workload)
    return tuple(max(b - f, 0.0) for b, f in zip(coef.budget_bytes, coef.fixed_bytes))


@dataclass(frozen=True)
class RpcTraffic:
    """What the client sends and receives per pass: RPC commands, payload bytes (what ggml-rpc writes to the
    socket), the same on the wire (payload plus each data segment's headers; no pure ACKs), and their seconds."""

    messages: int
    sent_bytes: float
    received_bytes: float
    link_s: float
    bytes_s: float
    sent_wire_bytes: float = 0.0
    received_wire_bytes: float = 0.0

    @property
    def payload_bytes(self) -> float:
        """RPC bytes both ways per pass: what every link carries less TCP/IP/Ethernet headers and ACKs."""
        return self.sent_bytes + self.received_bytes


def kv_window(workload: Workload) -> int:
    """Cache cells a step's KQ mask spans (`n_kv`): the used cells padded to 256, at least 256 (llama.cpp
    src/llama-kv-cache.cpp:1260-1274 get_n_kv at 0c1e57098; the cache itself is n_ctx padded to 256,
    src/llama-context.cpp:290, assumed at least that large)."""
    used = workload.attended if workload.phase == "decode" else workload.seq_len
    return max(256, -(-used // 256) * 256)


def segments(size: int) -> int:
    """TCP segments one `send()` of `size` bytes takes: ggml-rpc sets TCP_NODELAY (ggml/src/ggml-rpc/
    transport.cpp:692) and writes a command's byte, size and body in three sends (ggml-rpc.cpp:307-321), so
    nothing is coalesced; MSS_BYTES a segment."""
    return max(1, -(-size // MSS_BYTES))


def _request(body: int) -> tuple[int, int]:
    """(payload, wire bytes) of one request: command byte + uint64 size + body, three sends."""
    payload = RPC_HEADER_BYTES + body
    return payload, payload + FRAME_BYTES * (segments(1) + segments(8) + (segments(body) if body else 0))


def _reply(body: int) -> tuple[int, int]:
    """(payload, wire bytes) of one reply: uint64 size + body, two sends (send_msg, ggml-rpc.cpp:258-266)."""
    payload = RPC_REPLY_HEADER_BYTES + body
    return payload, payload + FRAME_BYTES * (segments(8) + segments(body))


def server_inputs(model: TransformerConfig, workload: Workload, holds_layers: bool, holds_last_layer: bool,
                  act_tensors: int) -> tuple[int, ...]:
    """Bytes of each tensor `ggml_backend_sched` copies into a server's split per pass (one SET_TENSOR each;
    ggml/src/ggml-backend.cpp:1297- pass 5 and the graph inputs flagged GGML_TENSOR_FLAG_INPUT): `act_tensors`
    hidden states (F32); where the server runs repeating layers, the graph inputs its attention reads: positions
    (I32, llama-graph.cpp build_inp_pos), the cache's K and V row indices (I64 each, src/llama-kv-cache.cpp:1422,
    1436) and the KQ mask (F16 with flash attention, n_kv x tokens, llama-graph.cpp:982); the output row ids (I32,
    llama-graph.cpp build_inp_out_ids) where it runs the last layer (src/models/llama.cpp:174-176)."""
    n = workload.new_tokens
    rows = n if holds_layers else OUTPUT_ROWS
    out = [rows * model.d_model * F32_BYTES] * act_tensors
    if holds_layers:
        out += [4 * n, 8 * n, 8 * n, kv_window(workload) * n * F16_BYTES]
        if holds_last_layer:
            out.append(4 * OUTPUT_ROWS)
    return tuple(out)


@dataclass(frozen=True)
class SplitGraph:
    """One server's split of llama.cpp's graph: the hidden states copied in, its nodes and tensors (`split_graphs`)."""

    hidden_in: int
    nodes: int
    tensors: int

    def __post_init__(self) -> None:
        if self.hidden_in < 1 or self.nodes < 1 or self.tensors < self.nodes:
            raise WorkbenchError(f"a split graph needs hidden_in >= 1, nodes >= 1, tensors >= nodes; got "
                                 f"{self.hidden_in}, {self.nodes}, {self.tensors}")

    @property
    def compute_body(self) -> int:
        """Bytes of its RPC_CMD_GRAPH_COMPUTE body (serialize_graph, ggml-rpc.cpp:1017-1020)."""
        return GRAPH_HEADER_BYTES + NODE_ID_BYTES * self.nodes + RPC_TENSOR_BYTES * self.tensors


def holders_of(layers, last: int) -> list[int]:
    """The servers (device >= 1) a pass runs on: those holding repeating layers or the output layer, in order."""
    return [i for i in range(1, len(layers)) if layers[i] or i == last]


def split_graphs(layers, last: int, new_tokens: int) -> tuple[SplitGraph, ...]:
    """Each server's split of a dense Llama graph at llama.cpp 0c1e57098, in `holders_of` order. Boundaries
    (ggml_backend_sched pass 2, ggml-backend.cpp:1124-1200: RPC backends expand down then up over weightless ops,
    the CPU, lowest priority, never): after the client's layers, the first server also runs the client's last
    residual ADD and takes both its operands; between two servers holding layers, one hidden state (the residual)
    when the next layer's norm is pinned (`PIN_NORM_BELOW_TOKENS` or full offload, llama-context.cpp:2643-2657), else
    the previous server runs that norm and two cross; a server holding only the output layer gets the final norm's
    output from a server before it (that norm, il -1, is never pinned) or, after the client, runs the last ADD
    and the norm itself. Nodes and tensors per layer and head: `LAYER_NODES` and the constants beside it."""
    holders = holders_of(layers, last)
    n_layers = sum(layers)
    full_offload = layers[0] == 0 and last != 0  # n_gpu_layers > n_layer (llama-context.cpp:2646)
    pinned = new_tokens < PIN_NORM_BELOW_TOKENS or full_offload
    first_layer = np.concatenate([[0], np.cumsum(layers)])
    hidden, moved = [], [0] * len(holders)
    for k, i in enumerate(holders):
        if k == 0:
            hidden.append(2 if layers[0] else 1)
            moved[k] += 1 if layers[0] else 0  # the client's last residual ADD
        elif layers[i] and pinned:
            hidden.append(1)
        else:  # the next norm (a layer's, or the final one) runs on the server before
            hidden.append(2 if layers[i] else 1)
            moved[k - 1] += 1
            moved[k] -= 1
    out = []
    for k, i in enumerate(holders):
        runs_last = bool(layers[i] > 0 and first_layer[i] + layers[i] == n_layers)
        inputs = hidden[k] + (4 if layers[i] else 0) + (1 if runs_last else 0)  # `server_inputs`' graph inputs
        nodes = int(LAYER_NODES * layers[i] + LAST_LAYER_NODES * runs_last + HEAD_NODES * (i == last) + moved[k])
        out.append(SplitGraph(hidden[k], nodes, int(nodes + LAYER_TENSORS * layers[i] + HEAD_TENSORS * (i == last)
                                                    + inputs)))
    return tuple(out)


def graph_counted(model: TransformerConfig) -> bool:
    """Whether `split_graphs` follows this model's graph builder: dense Llama-family models only."""
    return model.family == "llama" and not model.n_experts


def rpc_traffic(model: TransformerConfig, cluster: Cluster, workload: Workload, layers, last: int,
                compute_s=None) -> RpcTraffic:
    """Per pass, for each server (device >= 1) holding layers or the output layer, as llama.cpp 0c1e57098 runs it
    (measured: data/engines/llamacpp_rpc_runs.csv): one `RPC_CMD_SET_TENSOR` per input tensor (`server_inputs`;
    body rpc_tensor + cache flag + offset + data, ggml-rpc.cpp:700-710, no reply), then the graph: a decode step
    reuses it, `RPC_CMD_GRAPH_RECOMPUTE` (ggml-rpc.cpp:1044-1049, a 4-byte device, no reply); a prefill (a prompt
    after generation: the graph changed) sends it whole, `RPC_CMD_GRAPH_COMPUTE` (ggml-rpc.cpp:1050-1055,
    `SplitGraph.compute_body`, no reply; dense Llama-family models, `graph_counted`); then one `RPC_CMD_GET_TENSOR`
    per tensor the next split needs (body rpc_tensor + offset + size, reply the data; ggml-rpc.cpp:977-983): the
    logits on the output device, else the next split's hidden states (`split_graphs`: two from the client into the
    first server, one or two between servers; checked against the server's GGML_RPC_DEBUG log,
    data/engines/llamacpp_rpc_graphs.csv). Servers never talk to each other (cpy_tensor across servers is false,
    ggml-rpc.cpp:754-770), so every hand-off goes up to the client and down again. Seconds: every wire byte once at
    the link's rate, the link's per-message endpoint time for each queued command, and a hand-off each way per
    GET_TENSOR (the only command waited for). On a shaped link (`Link.bucket_bytes` > 0) the bytes seconds come
    from the pass's message timeline on token buckets (`shaped_rpc_seconds`), given each device's `compute_s`."""
    logits = (OUTPUT_ROWS * model.vocab_size if workload.output_head and model.is_decoder
              else workload.new_tokens * model.d_model) * F32_BYTES
    n_layers = sum(layers)
    holders = holders_of(layers, last)
    graphs = split_graphs(layers, last, workload.new_tokens)
    whole_graph = workload.phase == "prefill" and graph_counted(model)
    first_layer = np.concatenate([[0], np.cumsum(layers)])
    sent = received = sent_wire = received_wire = link = data = 0.0
    messages = 0
    steps = []
    compute = tuple(compute_s) if compute_s is not None else (0.0,) * cluster.n
    for k, i in enumerate(holders):
        runs_last = layers[i] > 0 and first_layer[i] + layers[i] == n_layers
        inputs = server_inputs(model, workload, layers[i] > 0, runs_last, graphs[k].hidden_in)
        requests = [_request(RPC_TENSOR_BYTES + 1 + 8 + size) for size in inputs]
        requests.append(_request(graphs[k].compute_body if whole_graph else 4))
        if i == last:
            outputs = [logits]
        else:
            following = holders[k + 1]
            rows = workload.new_tokens if layers[following] else OUTPUT_ROWS
            outputs = [rows * model.d_model * F32_BYTES] * graphs[k + 1].hidden_in
        requests += [_request(RPC_TENSOR_BYTES + 16) for _ in outputs]
        replies = [_reply(size) for size in outputs]
        # the requests are queued without waiting (send_async, ggml-rpc.cpp:434-442): each costs the endpoints'
        # per-message time only; each GET_TENSOR's reply is waited for: a hand-off each way (`handoff_time`'s
        # wire and endpoint terms); every byte once at the link's rate
        one_way = handoff_time(cluster, 0.0)[0]
        waited = len(outputs)
        link += (len(requests) - waited) * cluster.topology.link.message_overhead_s + waited * 2 * one_way
        data += sum(w for _, w in (*requests, *replies)) / cluster.topology.link.bandwidth_bytes_per_s
        steps += rpc_steps(i, requests, replies, compute[0] if k == 0 else 0.0, compute[i],
                           cluster.topology.link.message_overhead_s, 2 * one_way)
        sent += sum(p for p, _ in requests)
        sent_wire += sum(w for _, w in requests)
        received += sum(p for p, _ in replies)
        received_wire += sum(w for _, w in replies)
        messages += len(requests) + len(replies)
    if cluster.topology.link.bucket_bytes > 0:
        data = shaped_rpc_seconds(cluster, steps, link, sum(compute))
    return RpcTraffic(messages, sent, received, link, data, sent_wire, received_wire)


def rpc_steps(server: int, requests, replies, before_s: float, compute_s: float, message_s: float,
              handoff_s: float) -> list[Step]:
    """One server's part of a pass as timeline steps (client port 0): `before_s` of the client's compute, the
    queued requests and the first GET_TENSOR, each entering the wire after its sender's `message_s` (so they
    overlap the wire), the server's compute and a hand-off, its first reply; each further output a request and a
    reply after a hand-off."""
    waited = len(replies)
    queued = requests[:len(requests) - waited + 1]
    steps = [Step(before_s, tuple(Transfer(0, server, w, (j + 1) * message_s) for j, (_, w) in enumerate(queued))),
             Step(compute_s + handoff_s, (Transfer(server, 0, replies[0][1]),))]
    for (_, request), (_, reply) in zip(requests[len(queued):], replies[1:], strict=True):
        steps += [Step(handoff_s, (Transfer(0, server, request),)), Step(0.0, (Transfer(server, 0, reply),))]
    return steps


def shaped_rpc_seconds(cluster: Cluster, steps, link_s: float, compute_s: float) -> float:
    """Bytes seconds of a pass on a shaped link: the timeline on token buckets (`network.token_bucket_time`) less
    the devices' compute and the per-message seconds `link_s` already counts (never below 0)."""
    link = cluster.topology.link
    total = token_bucket_time(steps, link.bandwidth_bytes_per_s, link.bucket_bytes)
    return max(total - compute_s - link_s, 0.0)


@dataclass(frozen=True)
class LlamaCppOptions:
    """llama.cpp's options in a deployment ([schemes.llamacpp]): `--tensor-split`."""

    SECTION: ClassVar[str] = "llamacpp"  # its [schemes.llamacpp] table

    tensor_split: str = declared(FieldSpec("llama.cpp --tensor-split: one proportion per device in cluster order "
                                           "(\"3,1,1,1\"; '/' or ':' also separate, \"3:1:1:1\" for whatif --set); "
                                           "empty: each device's free memory", kind="text",
                                           toml=(TomlKey("tensor_split"),)), default="")

    def __post_init__(self) -> None:
        if self.tensor_split:
            parse_split(self.tensor_split, None)

    def check(self, n_devices: int) -> LlamaCppOptions:
        """These options if the split gives one proportion per device of a cluster of `n_devices`, else one line
        (at load time: a wrong count is the file's error, not a scheme that does not apply)."""
        if self.tensor_split:
            parse_split(self.tensor_split, n_devices)
        return self

    def schemes(self) -> tuple[str, ...]:
        """The schemes these options reach."""
        return load_all().filter(options=LlamaCppOptions)

    def evaluator(self, scheme: str):
        """llamacpp_rpc's evaluator on this split (registered form), None without a split."""
        if scheme != "llamacpp_rpc" or not self.tensor_split:
            return None
        split = self.tensor_split

        def evaluate(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
            return evaluate_llamacpp(model, cluster, workload, split)
        return with_streaming_split(evaluate)


def evaluate_llamacpp(model: TransformerConfig, cluster: Cluster, workload: Workload,
                      tensor_split: str = "") -> SchemeResult:
    """llama.cpp RPC: the pipeline's per-layer compute and memory for llama.cpp's layer split, every hand-off
    through the client as RPC commands."""
    split = parse_split(tensor_split, cluster.n) if tensor_split else memory_split(model, cluster, workload)
    layers = llamacpp_layers(model.n_layers, split)
    last = output_device(model.n_layers, split)
    coef = coefficients(model, cluster, workload)
    cost = plan_cost(coef, PipelinePlan(layers))
    traffic = rpc_traffic(model, cluster, workload, layers, last,
                          [c + (cost.head_s if i == last else 0.0) for i, c in enumerate(cost.compute_s)])
    compute = sum(cost.compute_s) + cost.head_s
    graph = ("" if workload.phase != "prefill" or graph_counted(model) else
             "the prefill graph (RPC_CMD_GRAPH_COMPUTE) not counted: its node count is derived for dense Llama only")
    split = f"RPC layer split {' / '.join(map(str, layers))}, {traffic.messages} client messages/token"
    result = costed("llamacpp_rpc", "llama.cpp", workload.phase, compute + traffic.link_s + traffic.bytes_s,
                    tuple(d.name for d in cluster.devices), "; ".join(x for x in (split, graph) if x),
                    compute_s=compute, comm_link_latency_s=traffic.link_s, comm_bytes_s=traffic.bytes_s,
                    peak_memory_bytes=cost.memory_bytes, memory_budget_bytes=cost.budget_bytes,
                    extra={"layers": layers, "traffic": traffic})
    return result.carve(fixed_s=sum(cost.fixed_s), serial_s=cost.head_s)


@register("llamacpp_rpc", "llama.cpp", no_operators=common.PIPELINE_ROWS,
          origin="llama.cpp --rpc layer split (src/llama-model.cpp load_tensors)",
          partition="pipeline", moe=True, engine="llama.cpp", options=LlamaCppOptions)
def evaluate_llamacpp_rpc(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """llama.cpp with RPC servers: layers by free memory (another split: [schemes.llamacpp] tensor_split,
    `LlamaCppOptions.evaluator`), hand-offs through the client."""
    return evaluate_llamacpp(model, cluster, workload)


# ---- exo ---------------------------------------------------------------------------------------------
def exo_layers(n_layers: int, memory) -> tuple[int, ...]:
    """exo's `allocate_layers_proportionally`: floor of each share, the rest by largest remainder, then every
    node with none takes one from the largest (fewer layers than nodes: a one-line error)."""
    mem = np.asarray(memory, dtype=float)
    if n_layers < len(mem):
        raise WorkbenchError(f"n_devices must be <= n_layers ({n_layers}) for exo's pipeline (one layer a node at "
                             f"least), got {len(mem)}")
    raw = mem / mem.sum() * n_layers
    out = np.floor(raw).astype(int)
    order = sorted(range(len(mem)), key=lambda i: raw[i] - out[i], reverse=True)  # stable, as Python's sorted
    for i in order[:n_layers - int(out.sum())]:
        out[i] += 1
    for i in range(len(out)):
        if out[i] == 0:
            top = int(np.argmax(out))
            out[top] -= 1
            out[i] = 1
    return tuple(int(v) for v in out)


@register("exo_pipeline", "exo", no_operators=common.PIPELINE_ROWS,
          origin="exo's pipeline mode", partition="pipeline", moe=True)
def evaluate_exo_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """exo's pipeline mode: layers by available memory (largest remainder), the pipeline's ring of hand-offs."""
    budgets = [float(d.memory_bytes) for d in cluster.devices]
    layers = exo_layers(model.n_layers, budgets)
    result = evaluate_pipeline(model, cluster, workload, PipelinePlan(layers), scheme="exo_pipeline")
    share = model.weight_bytes(workload.weight_bits) / model.n_layers
    refused = [i for i, (a, b) in enumerate(zip(layers, budgets)) if a * share > b]
    own = f"exo pipeline, layers {' / '.join(map(str, layers))}"
    reason = ""
    if refused:
        i = refused[0]
        reason = (f"exo refuses node {i} ({cluster.devices[i].name}): {layers[i]} layers need "
                  f"{layers[i] * share:.4g} B, it has {budgets[i]:.4g} B")
    # a refused node's peak is at least what exo counts for it (its OOM is then the peak's, like every scheme's)
    peaks = tuple(max(p, layers[i] * share) if i in refused else p for i, p in enumerate(result.peak_memory_bytes))
    note = over_budget_note(peaks, result.memory_budget_bytes, tuple(d.name for d in cluster.devices))
    return replace(result, paper="exo", peak_memory_bytes=peaks, notes="; ".join(x for x in (own, note, reason) if x))


def check_exo_tensor(model: TransformerConfig, n: int) -> None:
    """exo's tensor mode divides heads, KV heads and the MLP width by N: each must be divisible."""
    if model.family != "llama":
        raise WorkbenchError(f"exo_tensor shards Llama-family decoders (LlamaShardingStrategy); got {model.family!r}")
    for name, size in (("n_heads", model.n_heads), ("n_kv_heads", model.n_kv_heads), ("d_ff", model.d_ff)):
        if size % n:
            raise WorkbenchError(f"n_devices must divide {name} ({size}) of {model.name!r} for exo's tensor "
                                 f"sharding; got {n}")


@register("exo_tensor", "exo", moe=True, origin="exo's tensor mode", partition="tp")
@one_device_is_local
def evaluate_exo_tensor(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """exo's tensor mode: Megatron TP (an all_sum after each attention and MLP block), the head whole on
    every node."""
    check_exo_tensor(model, cluster.n)
    base = megatron_tp_on(model, cluster, workload)
    split_head, head_link, head_data = head_cost(MEGATRON_TP, model, cluster, workload)
    whole = max(common.lm_head_time(model, d, workload) for d in cluster.devices) \
        if workload.output_head and model.is_decoder else 0.0
    outside = float(common.weight_bytes(model.embedding_params() + model.head_params(), workload.weight_bits))
    need = np.asarray(base.peak_memory_bytes) + outside * (1 - 1 / cluster.n)  # replicated, not 1/n each
    message = over_budget_note(tuple(map(float, need)), base.memory_budget_bytes, tuple(d.name for d in cluster.devices))
    extra = whole - split_head
    return replace(base, scheme="exo_tensor", paper="exo", latency_s=base.latency_s + extra - head_link - head_data,
                   compute_s=base.compute_s + extra, comm_link_latency_s=base.comm_link_latency_s - head_link,
                   comm_bytes_s=base.comm_bytes_s - head_data, peak_memory_bytes=tuple(map(float, need)),
                   notes="; ".join(x for x in ("exo tensor: all_sum after attention and MLP, "
                                                                   "head replicated", message) if x))

