"""TPI-LLM's tensor-parallel Llama decoder as a `shard_map` program (TPI-LLM Sec. 3.1, Fig. 2, Alg. 1-2).

* Attention heads and FFN columns are split over a 1-D mesh in proportion to device capability
  (`workbench.schemes.planners.tpi_llm.TPSplit`); uneven splits are padded to the largest share and masked.
* Each device keeps the K/V of its own KV heads: a distributed KV cache.
* Per block: attention on local heads -> all-reduce -> FFN on local columns -> all-reduce.
* The embedding, final norm, task head and sampling live on the master (mesh position 0) only; the
  master's embedding is broadcast to the workers inside the program (Step 2).
* The all-reduce is selectable: ``"star"`` (push to master, sum, broadcast back; TPI-LLM's choice,
  written with ``ppermute``), ``"ring"`` (ppermute reduce-scatter + all-gather), ``"tree"`` (binary
  reduction tree to the master and back) or ``"psum"`` (XLA's own).

Public API (also used by the multi-process cluster runner)::

    tp = shard_params(cfg, params, mesh, split=None)       # split: None | weights | TPSplit
    cache = tp_empty_cache(tp, max_len)
    logits_sv, cache = tp_prefill(tp, prompt, cache, allreduce="star")
    logits_v, cache = tp_decode_step(tp, token, cache, allreduce="star")
    tokens = tp_generate(cfg, params, prompt, n_new, mesh, allreduce="star", split=None)

Multi-process use (jax.distributed, one mesh over every process's devices): every process calls
`shard_params` with the same weights (each keeps its devices' slices; only the master's process keeps
the embedding and head), `tp_empty_cache`, then per step ``h0 = master_input(tp, tokens or None,
seq_len)``, ``h, k, v = tp_backbone(tp, kind)(tp.blocks, cache.k, cache.v, h0, jnp.int32(length))``
and, on the master's process, ``master_logits(tp, h)``. `tp_prefill`/`tp_decode_step` do exactly this
in one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError, require_choice, require_int
from workbench.kernels import reference as ref
from workbench.kernels.mesh import OnLineMesh, check_line_mesh, on_first_device, stack_over_mesh
from workbench.machine.network import collective_cost
from workbench.model.models import TransformerConfig
from workbench.schemes.planners.tpi_llm import TPSplit, check_devices, proportional_split

ALLREDUCE_KINDS = ("star", "ring", "tree", "psum")
# Not an all-reduce: every device keeps its partial sum (wrong results by design). The timing baseline of the
# cluster's decoder sync chains (`workbench.measure.cluster.experiments.decoder_chain`): the same program less its syncs.
NO_SYNC = "none"
BLOCK_KEYS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "attn_norm", "ffn_norm",
              "kv_map", "head_mask", "ffn_mask")


# ---- collectives inside shard_map (x is this device's buffer; every device calls them) ------------
def _device_index(axis: str):
    return jax.lax.axis_index(axis)


def star_allreduce(x, axis: str, n: int):
    """Star all-reduce: every worker pushes x to the master (one ppermute each), the master sums and
    sends the sum back to each worker (one ppermute each): 2(n-1) sends, 2 path traversals."""
    if n == 1:
        return x
    idx = _device_index(axis)
    total = x
    for worker in range(1, n):
        total = total + jax.lax.ppermute(x, axis, [(worker, 0)])  # zeros on every non-receiver
    master_sum = jnp.where(idx == 0, total, jnp.zeros_like(total))
    return master_sum + star_broadcast(master_sum, axis, n, include_master=False)


def star_broadcast(x, axis: str, n: int, include_master: bool = True):
    """The master sends x to every worker directly (n-1 ppermutes); workers' own x is ignored."""
    idx = _device_index(axis)
    received = jnp.zeros_like(x)
    for worker in range(1, n):
        received = received + jax.lax.ppermute(x, axis, [(0, worker)])
    if not include_master:
        return received
    return jnp.where(idx == 0, x, received)


def ring_allreduce(x, axis: str, n: int):
    """Ring all-reduce: reduce-scatter then all-gather of n chunks of the last axis, n-1 ppermute steps
    each (every step moves 1/n of the buffer to the next device): 2(n-1) traversals."""
    if n == 1:
        return x
    idx = _device_index(axis)
    width = x.shape[-1]
    chunk = -(-width // n)
    pad = chunk * n - width
    xc = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)]).reshape(*x.shape[:-1], n, chunk)
    right = [(j, (j + 1) % n) for j in range(n)]

    def take(buf, k):
        return jax.lax.dynamic_index_in_dim(buf, k % n, axis=buf.ndim - 2, keepdims=False)

    def put(buf, k, value):
        return jax.lax.dynamic_update_index_in_dim(buf, value, k % n, axis=buf.ndim - 2)

    for step in range(n - 1):  # reduce-scatter: device i ends with the full sum of chunk i+1
        recv = jax.lax.ppermute(take(xc, idx - step), axis, right)
        xc = put(xc, idx - step - 1, take(xc, idx - step - 1) + recv)
    for step in range(n - 1):  # all-gather: pass the finished chunks around
        recv = jax.lax.ppermute(take(xc, idx + 1 - step), axis, right)
        xc = put(xc, idx - step, recv)
    return xc.reshape(*x.shape[:-1], n * chunk)[..., :width]


def tree_allreduce(x, axis: str, n: int):
    """Binary-tree all-reduce: ceil(log2 n) levels of pairwise reduction to the master, then the same
    levels back down as a broadcast: 2 ceil(log2 n) traversals, one buffer per level per device."""
    if n == 1:
        return x
    idx = _device_index(axis)
    levels = int(np.ceil(np.log2(n) - 1e-12))
    for k in range(levels):  # up: device i (i mod 2s == s) sends to i - s
        s = 2 ** k
        pairs = [(i, i - s) for i in range(n) if i % (2 * s) == s]
        x = x + jax.lax.ppermute(x, axis, pairs)
    for k in reversed(range(levels)):  # down: i - s sends the total to i
        s = 2 ** k
        pairs = [(i - s, i) for i in range(n) if i % (2 * s) == s]
        is_receiver = (idx % (2 * s)) == s
        x = jnp.where(is_receiver, jax.lax.ppermute(x, axis, pairs), x)
    return x


def allreduce(x, axis: str, n: int, kind: str = "star"):
    """Sum x over the mesh axis with the chosen algorithm (inside shard_map)."""
    require_choice("allreduce", kind, ALLREDUCE_KINDS + (NO_SYNC,))
    if kind == NO_SYNC:
        return x
    if kind == "psum":
        return jax.lax.psum(x, axis)
    return {"star": star_allreduce, "ring": ring_allreduce, "tree": tree_allreduce}[kind](x, axis, n)


def broadcast_from_master(x, axis: str, n: int, kind: str = "star"):
    """Step 2: the master's x reaches every device (star: direct sends; else: an all-reduce of x on the
    master and zeros on the workers, with the same algorithm as the block all-reduces)."""
    if n == 1 or kind == NO_SYNC:
        return x
    if kind == "star":
        return star_broadcast(x, axis, n)
    masked = jnp.where(_device_index(axis) == 0, x, jnp.zeros_like(x))
    return allreduce(masked, axis, n, kind)


def allreduce_traffic(kind: str, n: int, message_bytes: float) -> dict[str, float]:
    """What one all-reduce of `message_bytes` compiles to: {'collective-permute': bytes} summed over the
    ppermutes' per-device result buffers (or {'all-reduce': bytes} for psum). For the ppermute kernels
    this is the network model's busiest-link bytes (`workbench.machine.network.collective_cost`), one definition."""
    require_choice("allreduce", kind, ALLREDUCE_KINDS)
    require_int("n", n, low=1)
    if n == 1:
        return {}
    if kind == "psum":
        return {"all-reduce": float(message_bytes)}
    return {"collective-permute": float(collective_cost(kind, "all_reduce", n, message_bytes).busiest_bytes)}


def step_traffic(kind: str, n: int, message_bytes: float, n_layers: int = 1) -> dict[str, float]:
    """Collective bytes of one backbone step: the master's broadcast + two all-reduces per layer.

    (The compiled program holds the layer loop once, so its HLO text shows n_layers = 1.)
    """
    per = allreduce_traffic(kind, n, message_bytes)
    bcast = {"collective-permute": float(collective_cost("star", "broadcast", n, message_bytes).busiest_bytes)} \
        if kind == "star" and n > 1 else per
    return {k: 2 * n_layers * v + bcast.get(k, 0.0) for k, v in per.items()}


def allreduce_steps(kind: str, n: int) -> int:
    """Sequential ppermute sends of one all-reduce (1 for psum): the network model's endpoint messages."""
    require_choice("allreduce", kind, ALLREDUCE_KINDS)
    require_int("n", n, low=1)
    if n == 1:
        return 0
    if kind == "psum":
        return 1
    return int(collective_cost(kind, "all_reduce", n).endpoint_messages)


# ---- parameters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TPParams(OnLineMesh):
    """A model laid out for TPI-LLM on a 1-D mesh: sharded block weights + master-only weights."""

    cfg: TransformerConfig
    mesh: Mesh
    split: TPSplit
    blocks: dict  # key -> (n, L, ...) array sharded on the mesh axis (each device holds its own slice)
    master: dict  # embed (V, E), final_norm_g (E,), lm_head (E, V): committed to the master device only
    heads_max: int
    kv_max: int
    ffn_max: int

    @property
    def master_device(self):
        """The master: mesh position 0 (embeds, samples, holds the task head)."""
        return self.first_device


def _resolve_split(cfg: TransformerConfig, n: int, split) -> TPSplit:
    if split is None:
        return proportional_split(cfg, n)
    if isinstance(split, TPSplit):
        out = split.validate(cfg)
    else:
        out = proportional_split(cfg, list(split))
    if out.n_devices != n:
        raise WorkbenchError(f"split is for {out.n_devices} devices but the mesh has {n}")
    return out


def layout_block(cfg: TransformerConfig, block: dict, split: TPSplit, heads_max: int, kv_max: int,
                 ffn_max: int) -> dict[str, np.ndarray]:
    """One block's weights cut into per-device, zero-padded slices: key -> (n, ...) numpy array."""
    d, e = cfg.d_head, cfg.d_model
    group = cfg.n_heads // cfg.n_kv_heads
    w = {k: np.asarray(v, dtype=np.float32) for k, v in block.items()}
    wq_ehd = w["wq"].reshape(e, cfg.n_heads, d)
    wk_ekd = w["wk"].reshape(e, cfg.n_kv_heads, d)
    wv_ekd = w["wv"].reshape(e, cfg.n_kv_heads, d)
    wo_hde = w["wo"].reshape(cfg.n_heads, d, e)
    out = {k: [] for k in BLOCK_KEYS}
    for (q0, q1), (k0, k1), (f0, f1) in zip(split.head_ranges(), split.kv_ranges(cfg), split.ffn_ranges()):
        nh, nk, nf = q1 - q0, k1 - k0, f1 - f0
        out["wq"].append(np.pad(wq_ehd[:, q0:q1], [(0, 0), (0, heads_max - nh), (0, 0)]).reshape(e, -1))
        out["wk"].append(np.pad(wk_ekd[:, k0:k1], [(0, 0), (0, kv_max - nk), (0, 0)]).reshape(e, -1))
        out["wv"].append(np.pad(wv_ekd[:, k0:k1], [(0, 0), (0, kv_max - nk), (0, 0)]).reshape(e, -1))
        out["wo"].append(np.pad(wo_hde[q0:q1], [(0, heads_max - nh), (0, 0), (0, 0)]).reshape(-1, e))
        out["kv_map"].append(np.pad(np.arange(q0, q1) // group - k0, (0, heads_max - nh)).astype(np.int32))
        out["head_mask"].append(np.pad(np.ones(nh, np.float32), (0, heads_max - nh)))
        out["w_gate"].append(np.pad(w["w_gate"][:, f0:f1], [(0, 0), (0, ffn_max - nf)]))
        out["w_up"].append(np.pad(w["w_up"][:, f0:f1], [(0, 0), (0, ffn_max - nf)]))
        out["w_down"].append(np.pad(w["w_down"][f0:f1], [(0, ffn_max - nf), (0, 0)]))
        out["ffn_mask"].append(np.pad(np.ones(nf, np.float32), (0, ffn_max - nf)))
        out["attn_norm"].append(w["attn_norm"])
        out["ffn_norm"].append(w["ffn_norm"])
    return {k: np.stack(v) for k, v in out.items()}


def shard_params(cfg: TransformerConfig, params: dict, mesh: Mesh, split=None) -> TPParams:
    """Lay reference `params` out for TPI-LLM on `mesh` (Step 1: the master partitions the weights).

    `split`: None (equal shares), a sequence of per-device capability weights, or a `TPSplit`.
    Raises WorkbenchError for non-Llama models or more devices than heads.
    """
    if cfg.family != "llama":
        raise WorkbenchError(f"TPI-LLM's kernel implements the Llama decoder; got family {cfg.family!r}")
    check_line_mesh(mesh)
    n = int(mesh.devices.size)
    check_devices(cfg, n)
    split = _resolve_split(cfg, n, split)
    heads_max, ffn_max = max(split.heads), max(split.ffn)
    kv_max = max(b - a for a, b in split.kv_ranges(cfg))
    per_layer = [layout_block(cfg, b, split, heads_max, kv_max, ffn_max) for b in params["blocks"]]
    blocks = stack_over_mesh(per_layer, BLOCK_KEYS, mesh)  # (n, L, ...)
    head = params["embed"].T if cfg.tie_embeddings else params["lm_head"]
    master = on_first_device(mesh, {"embed": params["embed"], "final_norm_g": params["final_norm_g"], "lm_head": head})
    return TPParams(cfg, mesh, split, blocks, master, heads_max, kv_max, ffn_max)


# ---- the distributed KV cache -------------------------------------------------------------------
@dataclass(frozen=True)
class TPCache:
    """Each device's K/V for its own KV heads: k, v of shape (n, L, T_max, kv_max, D), sharded."""

    k: jax.Array
    v: jax.Array
    length: int = 0

    @property
    def max_len(self) -> int:
        """Token slots per device."""
        return int(self.k.shape[2])


def tp_empty_cache(tp: TPParams, max_len: int) -> TPCache:
    """An empty distributed KV cache with room for `max_len` tokens."""
    require_int("max_len", max_len, low=1, high=tp.cfg.max_positions)
    shape = (tp.n, tp.cfg.n_layers, max_len, tp.kv_max, tp.cfg.d_head)
    sharding = NamedSharding(tp.mesh, P(tp.axis))
    k = jax.device_put(np.zeros(shape, np.float32), sharding)
    v = jax.device_put(np.zeros(shape, np.float32), sharding)
    return TPCache(k, v, 0)


# ---- the SPMD program -----------------------------------------------------------------------------
def attention_partial(cfg: TransformerConfig, p: dict, h_se, k_tkd, v_tkd, start, positions_s):
    """This device's heads on the normed rows h_se: (its out-projection partial (S, E), new k, new v)."""
    d, s = cfg.d_head, h_se.shape[0]
    q_shd = ref.rotary((h_se @ p["wq"]).reshape(s, -1, d), positions_s)
    k_shd = ref.rotary((h_se @ p["wk"]).reshape(s, -1, d), positions_s)
    v_shd = (h_se @ p["wv"]).reshape(s, -1, d)
    k_tkd = jax.lax.dynamic_update_slice(k_tkd, k_shd, (start, 0, 0))
    v_tkd = jax.lax.dynamic_update_slice(v_tkd, v_shd, (start, 0, 0))
    k_pos_t = jnp.arange(k_tkd.shape[0])
    k_thd, v_thd = k_tkd[:, p["kv_map"]], v_tkd[:, p["kv_map"]]  # each local query head's KV head
    attn_shd = ref.attention_core(q_shd, k_thd, v_thd, positions_s, k_pos_t, True, k_pos_t < start + s)
    return (attn_shd * p["head_mask"][None, :, None]).reshape(s, -1) @ p["wo"], k_tkd, v_tkd


def _local_block(cfg: TransformerConfig, p: dict, x_se, k_tkd, v_tkd, start, positions_s, axis, n, kind):
    """One block on this device's heads/columns: returns (new x (S, E), new k, new v)."""
    partial_se, k_tkd, v_tkd = attention_partial(cfg, p, ref.rms_norm(x_se, p["attn_norm"]), k_tkd, v_tkd, start,
                                                 positions_s)
    x_se = x_se + allreduce(partial_se, axis, n, kind)
    h_se = ref.rms_norm(x_se, p["ffn_norm"])
    hidden_sf = jax.nn.silu(h_se @ p["w_gate"]) * (h_se @ p["w_up"]) * p["ffn_mask"]
    x_se = x_se + allreduce(hidden_sf @ p["w_down"], axis, n, kind)
    return x_se, k_tkd, v_tkd


def make_backbone(cfg: TransformerConfig, mesh: Mesh, kind: str = "star", donate: bool = True):
    """The jitted SPMD program: (blocks, k, v, h0 (n, S, E), start) -> (h (n, S, E), k, v).

    h0 holds the master's embedding in shard 0 (others are ignored: the master broadcasts it);
    every output shard holds the all-reduced final hidden state (the master uses shard 0). The caches are
    donated unless `donate=False` (a timing loop that calls it again on the same caches).
    """
    require_choice("allreduce", kind, ALLREDUCE_KINDS + (NO_SYNC,))
    check_line_mesh(mesh)
    axis, n = mesh.axis_names[0], int(mesh.devices.size)
    spec = P(axis)

    def program(blocks, k_cache, v_cache, h0_nse, start):
        local = {key: val[0] for key, val in blocks.items()}  # (L, ...)
        x_se = broadcast_from_master(h0_nse[0], axis, n, kind)
        positions_s = start + jnp.arange(x_se.shape[0])

        def layer(x, inputs):
            p, k_tkd, v_tkd = inputs
            x, k_tkd, v_tkd = _local_block(cfg, p, x, k_tkd, v_tkd, start, positions_s, axis, n, kind)
            return x, (k_tkd, v_tkd)

        x_se, (k_new, v_new) = jax.lax.scan(layer, x_se, (local, k_cache[0], v_cache[0]))
        return x_se[None], k_new[None], v_new[None]

    mapped = jax.shard_map(program, mesh=mesh, in_specs=(spec, spec, spec, spec, P()),
                           out_specs=(spec, spec, spec), check_vma=False)
    return jax.jit(mapped, donate_argnums=(1, 2) if donate else ())


_BACKBONES: dict = {}


def tp_backbone(tp: TPParams, kind: str = "star"):
    """The compiled-once SPMD backbone for `tp` and all-reduce `kind` (cached per config/mesh/kind)."""
    require_choice("allreduce", kind, ALLREDUCE_KINDS)  # a generation always syncs (NO_SYNC is for timing only)
    key = (tp.cfg, tuple(d.id for d in tp.mesh.devices.flat), tp.axis, kind)
    if key not in _BACKBONES:
        _BACKBONES[key] = make_backbone(tp.cfg, tp.mesh, kind)
    return _BACKBONES[key]


@partial(jax.jit, static_argnums=0)
def _embed(cfg: TransformerConfig, embed_ve, tokens_s):
    return embed_ve[tokens_s]


@partial(jax.jit, static_argnums=0)
def _head(cfg: TransformerConfig, final_norm_e, lm_head_ev, h_se):
    return ref.rms_norm(h_se, final_norm_e) @ lm_head_ev


def master_input(tp: TPParams, tokens_s=None, seq_len: int | None = None) -> jax.Array:
    """The backbone's input (n, S, E): the master's embedding of `tokens_s` in shard 0, zeros elsewhere.

    Workers never see the tokens. In a multi-process run, the master's process passes the tokens and
    every other process passes only `seq_len`; each builds the shards of its own devices.
    """
    e = tp.cfg.d_model
    if tokens_s is not None:
        seq_len = int(np.asarray(tokens_s).size)
    require_int("seq_len", seq_len, low=1)
    arrays = []
    local = [d for d in tp.mesh.devices.flat if d.process_index == jax.process_index()]
    for dev in local:
        if dev == tp.master_device:
            if tokens_s is None:
                raise WorkbenchError("the master's process must pass the tokens to master_input")
            tokens = jax.device_put(jnp.asarray(tokens_s, jnp.int32), dev)
            arrays.append(_embed(tp.cfg, tp.master["embed"], tokens)[None])
        else:
            arrays.append(jax.device_put(np.zeros((1, seq_len, e), np.float32), dev))
    return jax.make_array_from_single_device_arrays((tp.n, seq_len, e), NamedSharding(tp.mesh, P(tp.axis)), arrays)


def master_logits(tp: TPParams, h_nse: jax.Array):
    """Final norm + task head on the master's shard of the backbone output: logits (S, V), or None on a
    process that does not hold the master."""
    for shard in h_nse.addressable_shards:
        if shard.device == tp.master_device:
            return _head(tp.cfg, tp.master["final_norm_g"], tp.master["lm_head"], shard.data[0])
    return None


def _run(tp: TPParams, tokens_s, cache: TPCache, kind: str):
    tokens = np.asarray(tokens_s)
    if tokens.ndim != 1 or tokens.size == 0:
        raise WorkbenchError(f"tokens must be a non-empty 1-D sequence, got shape {tokens.shape}")
    if cache.length + tokens.size > cache.max_len:
        raise WorkbenchError(f"KV cache holds {cache.max_len} tokens; {cache.length} used, {tokens.size} more "
                             f"requested")
    h0 = master_input(tp, tokens)
    h, k, v = tp_backbone(tp, kind)(tp.blocks, cache.k, cache.v, h0, jnp.int32(cache.length))
    logits = master_logits(tp, h)
    return logits, TPCache(k, v, cache.length + int(tokens.size))


def tp_prefill(tp: TPParams, prompt, cache: TPCache, allreduce: str = "star"):
    """Prefill: run the prompt through the TP backbone; returns (logits (S, V) on the master, cache)."""
    return _run(tp, prompt, cache, allreduce)


def tp_decode_step(tp: TPParams, token: int, cache: TPCache, allreduce: str = "star"):
    """One decode step for `token`; returns (logits (V,) on the master, cache)."""
    logits, cache = _run(tp, [int(token)], cache, allreduce)
    return logits[0], cache


def tp_generate(cfg: TransformerConfig, params: dict, prompt: Sequence[int], n_new: int, mesh: Mesh,
                allreduce: str = "star", split=None) -> list[int]:
    """Greedy generation with TPI-LLM tensor parallelism; equals reference.generate_greedy token for token."""
    require_choice("allreduce", allreduce, ALLREDUCE_KINDS)
    require_int("n_new", n_new, low=0)
    prompt = [int(t) for t in np.asarray(prompt).reshape(-1)]
    if not prompt:
        raise WorkbenchError("prompt must be a non-empty sequence of token ids")
    tp = shard_params(cfg, params, mesh, split)
    cache = tp_empty_cache(tp, len(prompt) + max(n_new, 1))
    logits, cache = tp_prefill(tp, prompt, cache, allreduce)
    out: list[int] = []
    last = logits[-1]
    for _ in range(n_new):
        token = int(jnp.argmax(last))  # sampling on the master
        out.append(token)
        if len(out) == n_new:
            break
        last, cache = tp_decode_step(tp, token, cache, allreduce)
    return out
