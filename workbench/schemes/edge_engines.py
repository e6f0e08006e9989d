"""llama.cpp's RPC layer split and exo's tensor and pipeline modes, on the core's pipeline and TP cost paths.

* ``llamacpp_rpc`` - llama.cpp with `--rpc` servers (ggml-org/llama.cpp `tools/rpc/README.md`). Layers go to
  devices by `load_tensors`' rule (`src/llama-model.cpp`: layer il -> the first device whose cumulative split
  exceeds il / (L + 1), the output layer in slot L; the splits are each device's free memory or
  `--tensor-split`, option `[schemes.llamacpp] tensor_split = "3,1,1,1"`). Device 0 is the client: it embeds
  (the input layer stays on the host) and runs its own layers locally; every other device is an RPC server the
  client drives one synchronous command at a time (ggml-org/ggml `src/ggml-rpc/ggml-rpc.cpp`@d99724f2):
  per token and server holding layers, `RPC_CMD_SET_TENSOR` of the split's input (:486-510, no reply),
  `RPC_CMD_GRAPH_RECOMPUTE` (:722-745: the decode graph is reused; a 4-byte request, no reply), and
  `RPC_CMD_GET_TENSOR` of its output (:512-520: request, then the data back). Servers never talk to each
  other: `cpy_tensor` between two servers returns false (:522-541), so every hand-off goes up to the client and
  down again. A request is 1 command byte + an 8-byte size + its body (:314-331); a tensor is named by a packed
  `rpc_tensor` of 296 bytes (:35-51 with GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10,
  GGML_MAX_NAME 64, `include/ggml.h`:222-229). The last server's output is the logits (vocab F32 values of the
  last row). So the client handles 4 messages per server per token, the per-message cost that grows with
  every board (llama.cpp PR #16020's "every device you add, it gets worse").
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
type); a prefill's graph is costed as a recompute too (the first graph's `rpc_tensor` list is not counted).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from workbench.errors import WorkbenchError
from workbench.fields import FieldSpec, TomlKey, declared
from workbench.models import TransformerConfig
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

RPC_TENSOR_BYTES = 296  # packed struct rpc_tensor (derived: ggml-rpc.cpp:35-51 with include/ggml.h:222-229)
RPC_HEADER_BYTES = 1 + 8  # command byte + uint64 request size (quoted: ggml-rpc.cpp:314)
RPC_REPLY_HEADER_BYTES = 8  # uint64 response size (quoted: ggml-rpc.cpp:315)
F32_BYTES = 4  # the hidden state and logits between splits (assumed: llama.cpp's F32 residual stream)


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
    """What the client sends and receives per pass: endpoint messages, bytes, and their seconds."""

    messages: int
    sent_bytes: float
    received_bytes: float
    link_s: float
    bytes_s: float


def rpc_traffic(model: TransformerConfig, cluster: Cluster, workload: Workload, layers, last: int) -> RpcTraffic:
    """Per pass, for each server (device >= 1) holding layers: SET_TENSOR of its input, GRAPH_RECOMPUTE,
    GET_TENSOR of its output (the logits on the output device), each a point-to-point message."""
    act = workload.new_tokens * model.d_model * F32_BYTES
    logits = model.vocab_size * F32_BYTES if workload.output_head and model.is_decoder else act
    sent = received = link = data = 0.0
    messages = 0
    for i, a in enumerate(layers):
        if i == 0 or a == 0:
            continue
        out = logits if i == last else act
        sizes_up = (RPC_HEADER_BYTES + RPC_TENSOR_BYTES + 8 + act,  # set_tensor: tensor, offset, data
                    RPC_HEADER_BYTES + 4,  # graph_recompute: device
                    RPC_HEADER_BYTES + RPC_TENSOR_BYTES + 16)  # get_tensor: tensor, offset, size
        down = RPC_REPLY_HEADER_BYTES + out
        for size in (*sizes_up, down):
            a_s, b_s = handoff_time(cluster, size)
            link, data = link + a_s, data + b_s
        sent, received, messages = sent + sum(sizes_up), received + down, messages + 4
    return RpcTraffic(messages, sent, received, link, data)


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
    traffic = rpc_traffic(model, cluster, workload, layers, last)
    compute = sum(cost.compute_s) + cost.head_s
    result = costed("llamacpp_rpc", "llama.cpp", workload.phase, compute + traffic.link_s + traffic.bytes_s,
                    tuple(d.name for d in cluster.devices),
                    f"RPC layer split {' / '.join(map(str, layers))}, {traffic.messages} client messages/token",
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

