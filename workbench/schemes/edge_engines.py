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
type); a prefill's graph is costed as a recompute too: the whole graph (`RPC_CMD_GRAPH_COMPUTE`, 296 bytes a
tensor, ggml-rpc.cpp:1010-1040) that llama.cpp sends whenever the graph changes (every prompt after a decode) is
not counted, nor are TCP's pure ACKs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from workbench.errors import WorkbenchError
from workbench.fields import FieldSpec, TomlKey, declared
from workbench.models import TransformerConfig
from workbench.schemes import common
from workbench.schemes.base import Cluster, SchemeResult, Workload, register, with_streaming_split
from workbench.schemes.galaxy import first_overflow, head_cost, megatron_tp_on, one_device_is_local
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


def rpc_traffic(model: TransformerConfig, cluster: Cluster, workload: Workload, layers, last: int) -> RpcTraffic:
    """Per pass, for each server (device >= 1) holding layers or the output layer, as llama.cpp 0c1e57098 runs a
    decode step whose graph is reused (measured: data/engines/llamacpp_rpc_runs.csv): one `RPC_CMD_SET_TENSOR`
    per input tensor (`server_inputs`; body rpc_tensor + cache flag + offset + data, ggml-rpc.cpp:700-710, no
    reply), `RPC_CMD_GRAPH_RECOMPUTE` (ggml-rpc.cpp:1044-1049, a 4-byte device, no reply), and one
    `RPC_CMD_GET_TENSOR` per tensor the next split needs (body rpc_tensor + offset + size, reply the data;
    ggml-rpc.cpp:977-983): the logits on the output device. The first server's split starts with two hidden
    states when the client ran layers: the scheduler's pass 2 (ggml-backend.cpp:1124-1168) expands the RPC
    backend up over the weightless ops before its first weight and skips the CPU, so the server runs the client's
    last residual add and takes both its operands (the FFN output and the residual). Between two servers one
    hidden state travels, and one (the last row) to a server holding only the output layer: measured at this
    commit with the server's GGML_RPC_DEBUG log (data/engines/llamacpp_rpc_runs.csv, 3 processes), where the
    pass-2 reading alone (expand down gives the producer the next norm) would send two. Servers never talk to
    each other (cpy_tensor across servers is false, ggml-rpc.cpp:754-770), so every hand-off goes up to the client
    and down again. Seconds: every wire byte once at the link's rate, the link's per-message endpoint time for
    each queued command, and a hand-off each way per GET_TENSOR (the only command waited for)."""
    logits = (OUTPUT_ROWS * model.vocab_size if workload.output_head and model.is_decoder
              else workload.new_tokens * model.d_model) * F32_BYTES
    n_layers = sum(layers)
    holders = [i for i in range(1, len(layers)) if layers[i] or i == last]
    first_layer = np.concatenate([[0], np.cumsum(layers)])
    sent = received = sent_wire = received_wire = link = data = 0.0
    messages = 0
    for k, i in enumerate(holders):
        runs_last = layers[i] > 0 and first_layer[i] + layers[i] == n_layers
        from_client = k == 0 and layers[0] > 0 and layers[i] > 0
        inputs = server_inputs(model, workload, layers[i] > 0, runs_last, 2 if from_client else 1)
        requests = [_request(RPC_TENSOR_BYTES + 1 + 8 + size) for size in inputs]
        requests.append(_request(4))
        if i == last:
            outputs = [logits]
        else:
            following = holders[k + 1] if k + 1 < len(holders) else None
            rows = workload.new_tokens if following is not None and layers[following] else OUTPUT_ROWS
            outputs = [rows * model.d_model * F32_BYTES]
        requests += [_request(RPC_TENSOR_BYTES + 16) for _ in outputs]
        replies = [_reply(size) for size in outputs]
        # the requests are queued without waiting (send_async, ggml-rpc.cpp:434-442): each costs the endpoints'
        # per-message time only; each GET_TENSOR's reply is waited for: a hand-off each way (`handoff_time`'s
        # wire and endpoint terms); every byte once at the link's rate
        one_way = handoff_time(cluster, 0.0)[0]
        waited = len(outputs)
        link += (len(requests) - waited) * cluster.topology.link.message_overhead_s + waited * 2 * one_way
        data += sum(w for _, w in (*requests, *replies)) / cluster.topology.link.bandwidth_bytes_per_s
        sent += sum(p for p, _ in requests)
        sent_wire += sum(w for _, w in requests)
        received += sum(p for p, _ in replies)
        received_wire += sum(w for _, w in replies)
        messages += len(requests) + len(replies)
    return RpcTraffic(messages, sent, received, link, data, sent_wire, received_wire)


@dataclass(frozen=True)
class LlamaCppOptions:
    """llama.cpp's options in a deployment ([schemes.llamacpp]): `--tensor-split`."""

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
        return ("llamacpp_rpc",)

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
    traffic = rpc_traffic(model, cluster, workload, layers, last)
    compute = sum(cost.compute_s) + cost.head_s
    message = first_overflow(np.asarray(cost.memory_bytes), cluster)
    result = SchemeResult("llamacpp_rpc", "llama.cpp", workload.phase, compute + traffic.link_s + traffic.bytes_s,
                          compute_s=compute, comm_link_latency_s=traffic.link_s, comm_bytes_s=traffic.bytes_s,
                          peak_memory_bytes=cost.memory_bytes, memory_budget_bytes=cost.budget_bytes,
                          oom=bool(message), extra={"layers": layers, "traffic": traffic},
                          notes="; ".join(x for x in (f"RPC layer split {' / '.join(map(str, layers))}, "
                                                      f"{traffic.messages} client messages/token", message) if x))
    return result.carve(fixed_s=sum(cost.fixed_s), serial_s=cost.head_s)


@register("llamacpp_rpc", "llama.cpp", moe=True, engine="llama.cpp")
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


@register("exo_pipeline", "exo", moe=True)
def evaluate_exo_pipeline(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """exo's pipeline mode: layers by available memory (largest remainder), the pipeline's ring of hand-offs."""
    budgets = [float(d.memory_bytes) for d in cluster.devices]
    layers = exo_layers(model.n_layers, budgets)
    result = evaluate_pipeline(model, cluster, workload, PipelinePlan(layers), scheme="exo_pipeline")
    share = model.weight_bytes(workload.weight_bits) / model.n_layers
    refused = [i for i, (a, b) in enumerate(zip(layers, budgets)) if a * share > b]
    notes = f"exo pipeline, layers {' / '.join(map(str, layers))}"
    if refused:
        i = refused[0]
        notes += (f"; infeasible: exo refuses node {i} ({cluster.devices[i].name}): {layers[i]} layers need "
                  f"{layers[i] * share:.4g} B, it has {budgets[i]:.4g} B")
    return replace(result, paper="exo", notes=notes, oom=result.oom or bool(refused))


def check_exo_tensor(model: TransformerConfig, n: int) -> None:
    """exo's tensor mode divides heads, KV heads and the MLP width by N: each must be divisible."""
    if model.family != "llama":
        raise WorkbenchError(f"exo_tensor shards Llama-family decoders (LlamaShardingStrategy); got {model.family!r}")
    for name, size in (("n_heads", model.n_heads), ("n_kv_heads", model.n_kv_heads), ("d_ff", model.d_ff)):
        if size % n:
            raise WorkbenchError(f"n_devices must divide {name} ({size}) of {model.name!r} for exo's tensor "
                                 f"sharding; got {n}")


@register("exo_tensor", "exo")
@one_device_is_local
def evaluate_exo_tensor(model: TransformerConfig, cluster: Cluster, workload: Workload) -> SchemeResult:
    """exo's tensor mode: Megatron TP (an all_sum after each attention and MLP block), the head whole on
    every node."""
    check_exo_tensor(model, cluster.n)
    base = megatron_tp_on(model, cluster, workload)
    split_head, head_link, head_data = head_cost("megatron_tp", model, cluster, workload)
    whole = max(common.lm_head_time(model, d, workload) for d in cluster.devices) \
        if workload.output_head and model.is_decoder else 0.0
    outside = float(common.weight_bytes(model.embedding_params() + model.head_params(), workload.weight_bits))
    need = np.asarray(base.peak_memory_bytes) + outside * (1 - 1 / cluster.n)  # replicated, not 1/n each
    message = first_overflow(need, cluster)
    extra = whole - split_head
    return replace(base, scheme="exo_tensor", paper="exo", latency_s=base.latency_s + extra - head_link - head_data,
                   compute_s=base.compute_s + extra, comm_link_latency_s=base.comm_link_latency_s - head_link,
                   comm_bytes_s=base.comm_bytes_s - head_data, peak_memory_bytes=tuple(map(float, need)),
                   oom=bool(message), notes="; ".join(x for x in ("exo tensor: all_sum after attention and MLP, "
                                                                   "head replicated", message) if x))

