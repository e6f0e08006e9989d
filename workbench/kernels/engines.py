"""distributed-llama's two tensor-parallel sync structures as `shard_map` programs on a 1-D mesh.

Both lay a Llama decoder (`workbench.kernels.reference`) out evenly over the mesh: each device holds its
query/KV heads (Q, K, V slices, its rows of wo) and its FFN columns (w1/w3 columns, w2 rows), so its
attention and FFN outputs are full-d partial sums (the layout of `workbench.kernels.tpi_llm.layout_block`).
The syncs are written with `ppermute` so the compiled program's collectives are exactly the messages of
`workbench.schemes.engines.forward_syncs` (the cost model's), one batch row at a time as the engine sends
them:

* ``"allgather"`` (v0.12-v0.16): the root's control packet (position, rows: 8 bytes) and its embedded x
  (F32 rows) go to every worker (star broadcast); twice per layer every device sends its partial to each
  of the n-1 others (n-1 ppermutes, shifts 1..n-1) and sums the n partials in device order, so every
  device holds the same x (norms run everywhere); the classifier is split by vocabulary and each worker
  sends its logits slice to the root (n-1 ppermutes into device 0), which concatenates them.
* ``"root"`` (v0.8-v0.10): the root sends the position (uint16) to every worker; twice per layer the root
  norms x and sends x_norm to every worker (n-1 ppermutes), every device computes its slice, and every
  worker sends its partial back (n-1 ppermutes into device 0), where the root adds them to x; only the
  root holds x. The classifier runs on the root (outside the SPMD program), one token per forward.

* ``"root6"`` (v0.5-v0.7): attention as ``"root"``; the FFN's x_norm goes to every worker, each device sends
  its d_ff/n slice of the hidden to the root (n-1 ppermutes), the root sends every worker the n-1 slices it
  lacks ((n-1)^2 ppermutes, in the engine's order: round r sends worker j slice r, or r+1 from j on), every
  device multiplies the whole hidden by its d/n output rows of w2 and sends them to the root, which adds
  the concatenated rows to x.
* ``"root8"`` (v0.1-v0.4): x_norm to every worker, each device's q, k and v slices to the root (3(n-1)
  ppermutes), the root runs every head's attention over its whole KV cache and sends the output to every
  worker, each device's d/n output rows of wo back; the FFN as ``"root6"``. The cache lives on the root.

The embedding lookup and sampling run on the root (mesh position 0). Public API::

    ep = shard_params(cfg, params, mesh, kind, wire)   # kind: one of KINDS; wire: "f32" | "q80"
    cache = empty_cache(ep, max_len)
    logits_sv, cache = forward(ep, tokens, cache)  # allgather: one forward of S rows; root: S forwards
    tokens = generate(cfg, params, prompt, n_new, mesh, kind)   # f32 wire: == reference.generate_greedy
    expected_traffic(cfg, n, kind, rows, wire)     # the cost model's messages and bytes it must compile to

With ``wire="q80"`` every partial (and the root TP's x_norm) travels as BlockQ80s packed into one uint8
buffer (34 bytes per 32 values), as the engine's ``--buffer-float-type q80`` sends them; the result is then
close to the reference, not equal.
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
from workbench.kernels.tpi_llm import (
    BLOCK_KEYS,
    TPCache,
    attention_partial,
    layout_block,
    star_broadcast,
    tp_empty_cache,
)
from workbench.schemes.engines import check_split, forward_syncs, sync_traffic
from workbench.schemes.planners.tpi_llm import TPSplit

KINDS = ("allgather", "root", "root6", "root8")
SCHEME_OF = {"allgather": "dllama_allgather_tp", "root": "dllama_root_tp", "root6": "dllama_root6_tp",
             "root8": "dllama_root8_tp"}
ROW_SLICED = ("root6", "root8")  # w2 (and in root8 wo) split by output rows: each node returns d/n values
WIRES = ("f32", "q80")  # the sync buffer type (distributed-llama's --buffer-float-type f32 | q80)
WIRE_BITS = {"f32": 32.0, "q80": 8.0}  # activation bits the cost model takes for each (8 -> Q80 on the wire)
Q80_BLOCK = 32  # values per BlockQ80 (an fp16 scale + 32 int8 codes)


# ---- the Q80 wire format ----------------------------------------------------------------------------
def q80_pack(x_e):
    """(E,) f32 -> (E/32, 34) uint8 BlockQ80s: per block the fp16 scale d = amax/127 then 32 int8 codes
    round(x / d) (distributed-llama v0.16.4 src/nn/nn-quants.cpp quantizeF32toQ80): 34 bytes per 32 values."""
    blocks = x_e.reshape(-1, Q80_BLOCK)
    d = jnp.max(jnp.abs(blocks), axis=-1) / 127.0  # codes from the f32 scale, the scale stored as fp16
    inv = jnp.where(d > 0, 1.0 / jnp.where(d > 0, d, 1.0), 0.0)
    codes = jnp.clip(jnp.round(blocks * inv[:, None]), -127, 127).astype(jnp.int8)
    return jnp.concatenate([jax.lax.bitcast_convert_type(d.astype(jnp.float16), jnp.uint8),
                            jax.lax.bitcast_convert_type(codes, jnp.uint8)], axis=-1)


def q80_unpack(packed):
    """(E/32, 34) uint8 BlockQ80s -> (E,) f32 (codes x scale)."""
    scale = jax.lax.bitcast_convert_type(packed[:, :2], jnp.float16).astype(jnp.float32)
    codes = jax.lax.bitcast_convert_type(packed[:, 2:], jnp.int8).astype(jnp.float32)
    return (codes * scale[:, None]).reshape(-1)


def _codec(wire: str):
    """(encode, decode) of one row for the wire format (identity for f32)."""
    require_choice("wire", wire, WIRES)
    if wire == "f32":
        return (lambda x: x), (lambda x: x)
    return q80_pack, q80_unpack


# ---- the syncs (inside shard_map; x is this device's buffer, every device calls them) ----------------
def _index(axis: str):
    return jax.lax.axis_index(axis)


def mesh_sum(x, axis: str, n: int, wire: str = "f32"):
    """Every device sends x (in the wire format) to each of the n-1 others (ppermute shifts 1..n-1) and sums
    the n partials, its own as it went on the wire too, in device order 0..n-1 (distributed-llama's
    SYNC_NODE_SLICES + OP_MERGE_ADD over the ZQ pipe): n-1 sends and receives."""
    encode, decode = _codec(wire)
    if n == 1:
        return decode(encode(x))
    idx = _index(axis)
    wx = encode(x)
    received = [wx] + [jax.lax.ppermute(wx, axis, [(i, (i + j) % n) for i in range(n)]) for j in range(1, n)]
    received = [decode(r) for r in received]
    by_source = jnp.take(jnp.stack(received), (idx - jnp.arange(n)) % n, axis=0)  # row s came from device s
    total = by_source[0]
    for s in range(1, n):
        total = total + by_source[s]
    return total


def gather_to_root(x, axis: str, n: int, wire: str = "f32"):
    """Each worker sends x (in the wire format) to device 0 (n-1 ppermutes); device 0 returns its own x and
    the n-1 received buffers decoded, stacked in device order (others: their own x and zeros)."""
    encode, decode = _codec(wire)
    return jnp.stack([x] + [decode(jax.lax.ppermute(encode(x), axis, [(j, 0)])) for j in range(1, n)])


def reduce_to_root(x, axis: str, n: int, wire: str = "f32"):
    """Each worker sends x to device 0 (n-1 ppermutes), which adds them to its own (not quantised, as
    v0.8's root slice) in device order."""
    parts = gather_to_root(x, axis, n, wire)
    total = parts[0]
    for s in range(1, n):
        total = total + parts[s]
    return total


def broadcast_from_root(x, axis: str, n: int, wire: str = "f32"):
    """The root sends x (in the wire format) to every worker (n-1 ppermutes); every device, the root too,
    returns it decoded (v0.8 runs its own matmuls on the quantised x_norm too)."""
    encode, decode = _codec(wire)
    return decode(star_broadcast(encode(x), axis, n))


def hidden_exchange(x, axis: str, n: int, wire: str = "f32"):
    """v0.1-v0.7's FFN hidden: each worker sends its slice to the root (n-1 ppermutes), which sends each worker
    the n-1 slices it lacks ((n-1)^2 ppermutes: round r, worker j gets slice r if r < j else r+1, as
    `syncMissingSlicesOfSlicedBuffer`); every device returns all n slices decoded, in device order (the root's
    own slice travels quantised too: `quantizeSlicedBuffer(..., true, ...)`)."""
    encode, decode = _codec(wire)
    idx, own = _index(axis), encode(x)
    held = jnp.stack([own] + [jax.lax.ppermute(own, axis, [(j, 0)]) for j in range(1, n)])  # the root's copy
    got = jnp.zeros_like(held)
    for r in range(n - 1):
        for j in range(1, n):
            s = r if r < j else r + 1
            got = got.at[s].add(jax.lax.ppermute(held[s], axis, [(0, j)]))
    mine = jnp.where((jnp.arange(n) == idx).reshape((n,) + (1,) * own.ndim), own[None], got)
    return jnp.stack([decode(b) for b in jnp.where(idx == 0, held, mine)])


def gather_rows_to_root(x, axis: str, n: int, wire: str = "f32"):
    """Each worker's d/n output rows to the root (n-1 ppermutes); the root returns the n slices concatenated
    (its own not quantised: `quantizeSlicedBuffer(..., false, ...)`)."""
    return gather_to_root(x, axis, n, wire).reshape(-1)


def per_row(fn, x_s, *args):
    """Apply a sync to each row of x_s separately (the engine syncs one batch row per message)."""
    return jnp.stack([fn(x_s[r], *args) for r in range(x_s.shape[0])])


# ---- parameters ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineParams(OnLineMesh):
    """A model laid out on a 1-D mesh for one of the engine's sync structures."""

    cfg: object
    mesh: Mesh
    kind: str
    blocks: dict  # key -> (n, L, ...) sharded
    head: dict  # allgather: lm_head (n, E, V/n) and final_norm_g (n, E), sharded
    root: dict  # embed, final_norm_g, lm_head (E, V) on the root device
    kv_max: int
    wire: str = "f32"

    @property
    def root_device(self):
        """The root: mesh position 0 (embeds, samples; in the root TP it also norms, merges and runs the head)."""
        return self.first_device


def shard_params(cfg, params: dict, mesh: Mesh, kind: str = "allgather", wire: str = "f32") -> EngineParams:
    """Lay reference `params` out evenly over `mesh` for sync structure `kind` ("allgather" | "root") with
    the syncs' buffer type `wire` ("f32" | "q80": d_model must be a multiple of 32)."""
    require_choice("kind", kind, KINDS)
    require_choice("wire", wire, WIRES)
    if wire == "q80" and cfg.d_model % Q80_BLOCK:
        raise WorkbenchError(f"wire q80 needs d_model divisible by {Q80_BLOCK}, got {cfg.d_model}")
    n = check_line_mesh(mesh)
    check_split(cfg, n, SCHEME_OF[kind])
    split = TPSplit((cfg.n_heads // n,) * n, (cfg.d_ff // n,) * n).validate(cfg)
    kv_max = max(b - a for a, b in split.kv_ranges(cfg))
    per_layer = [layout_block(cfg, b, split, cfg.n_heads // n, kv_max, cfg.d_ff // n) for b in params["blocks"]]
    sharding = NamedSharding(mesh, P(mesh.axis_names[0]))
    blocks = stack_over_mesh(per_layer, BLOCK_KEYS, mesh)
    if kind in ROW_SLICED:
        blocks.update(stack_over_mesh([output_rows(cfg, b, n) for b in params["blocks"]], ("wo_rows", "w_down_rows"),
                                      mesh))
    if kind == "root8":
        kv_max = cfg.n_kv_heads  # the whole cache on the root (the workers' copies stay empty)
    lm_head = np.asarray(params["embed"]).T if cfg.tie_embeddings else np.asarray(params["lm_head"])
    width = cfg.vocab_size // n
    head = {"lm_head": jax.device_put(np.stack([lm_head[:, i * width:(i + 1) * width] for i in range(n)]), sharding),
            "final_norm_g": jax.device_put(np.stack([np.asarray(params["final_norm_g"])] * n), sharding)}
    root = on_first_device(mesh, {"embed": params["embed"], "final_norm_g": params["final_norm_g"], "lm_head": lm_head})
    return EngineParams(cfg, mesh, kind, blocks, head, root, kv_max, wire)


def output_rows(cfg, block: dict, n: int) -> dict[str, np.ndarray]:
    """One block's wo and w2 cut by output rows (d/n columns of the (in, d) matrices) per device: (n, in, d/n)."""
    width = cfg.d_model // n
    return {key: np.stack([np.asarray(block[src], np.float32)[:, i * width:(i + 1) * width] for i in range(n)])
            for key, src in (("wo_rows", "wo"), ("w_down_rows", "w_down"))}


Cache = TPCache  # each device's K/V for its own KV heads, laid out as TPI-LLM's (root8: every head, on the root)


def empty_cache(ep: EngineParams, max_len: int) -> Cache:
    """An empty distributed KV cache with room for `max_len` tokens (TPI-LLM's layout; root8: kv_max is every
    KV head, used on the root only)."""
    return tp_empty_cache(ep, max_len)


# ---- the SPMD programs --------------------------------------------------------------------------------
def _ffn_partial(p, h_se):
    """This device's FFN columns on the normed rows: its w2 partial (S, E)."""
    return (jax.nn.silu(h_se @ p["w_gate"]) * (h_se @ p["w_up"]) * p["ffn_mask"]) @ p["w_down"]


def make_program(cfg, mesh: Mesh, kind: str, wire: str = "f32"):
    """The jitted SPMD forward.

    allgather: (blocks, k, v, head, h0 (n, S, E), ctrl (n, 2) int32) -> (logits (n, S, V), k, v), with
    the root's embedded rows and [position, rows] in shard 0 and the gathered logits in shard 0.
    root: (blocks, k, v, h0 (n, S, E), pos (n,) uint16) -> (x (n, S, E), k, v), x in shard 0.
    """
    require_choice("kind", kind, KINDS)
    require_choice("wire", wire, WIRES)
    n = check_line_mesh(mesh)
    axis = mesh.axis_names[0]
    spec = P(axis)

    def layers(blocks, k_cache, v_cache, x_se, start, sync_in, sync_out):
        positions_s = start + jnp.arange(x_se.shape[0])
        local = {key: val[0] for key, val in blocks.items()}

        def layer(x, inputs):
            p, k_tkd, v_tkd = inputs
            h = sync_in(ref.rms_norm(x, p["attn_norm"]))
            part, k_tkd, v_tkd = attention_partial(cfg, p, h, k_tkd, v_tkd, start, positions_s)
            x = sync_out(x, part)
            x = sync_out(x, _ffn_partial(p, sync_in(ref.rms_norm(x, p["ffn_norm"]))))
            return x, (k_tkd, v_tkd)

        return jax.lax.scan(layer, x_se, (local, k_cache[0], v_cache[0]))

    if kind == "allgather":
        def program(blocks, k_cache, v_cache, head, h0_nse, ctrl_n2):
            ctrl = star_broadcast(ctrl_n2[0], axis, n)  # the control packet: position, rows
            x_se = per_row(star_broadcast, h0_nse[0], axis, n)  # SYNC_WITH_ROOT of x, row by row
            x_se, (k_new, v_new) = layers(blocks, k_cache, v_cache, x_se, ctrl[0], lambda h: h,
                                          lambda x, part: x + per_row(mesh_sum, part, axis, n, wire))
            logits_sv = ref.rms_norm(x_se, head["final_norm_g"][0]) @ head["lm_head"][0]  # this device's vocab
            gathered = per_row(gather_to_root, logits_sv, axis, n)  # (S, n, V/n): all slices on the root
            return gathered.reshape(x_se.shape[0], -1)[None], k_new[None], v_new[None]

        mapped = jax.shard_map(program, mesh=mesh, in_specs=(spec, spec, spec, spec, spec, spec),
                               out_specs=(spec, spec, spec), check_vma=False)
        return jax.jit(mapped, donate_argnums=(1, 2))

    def root_program(blocks, k_cache, v_cache, h0_nse, pos_n):
        is_root = _index(axis) == 0
        start = star_broadcast(pos_n[0], axis, n).astype(jnp.int32)  # sendPos
        if kind in ROW_SLICED:
            x_se, (k_new, v_new) = sliced_layers(cfg, kind, wire, axis, n, blocks, k_cache, v_cache, h0_nse[0], start)
            return x_se[None], k_new[None], v_new[None]
        x_se, (k_new, v_new) = layers(
            blocks, k_cache, v_cache, h0_nse[0], start,
            lambda h: per_row(broadcast_from_root, h, axis, n, wire),  # the root's x_norm to every worker
            lambda x, part: jnp.where(is_root, x + per_row(reduce_to_root, part, axis, n, wire), 0.0))
        return x_se[None], k_new[None], v_new[None]

    mapped = jax.shard_map(root_program, mesh=mesh, in_specs=(spec, spec, spec, spec, spec),
                           out_specs=(spec, spec, spec), check_vma=False)
    return jax.jit(mapped, donate_argnums=(1, 2))


def _root_attention(cfg, p, h_se, k_tkd, v_tkd, start, positions_s, axis: str, n: int, wire: str):
    """v0.1-v0.4: every node's q, k, v slices (rotated on the node) go to the root, which stores k, v in its
    whole cache and runs every head; its output goes to every worker; each node's d/n rows of wo come back
    to the root. Returns (the attention block's output (S, E) on the root, k, v)."""
    d, s = cfg.d_head, h_se.shape[0]
    q = ref.rotary((h_se @ p["wq"]).reshape(s, -1, d), positions_s).reshape(s, -1)
    k = ref.rotary((h_se @ p["wk"]).reshape(s, -1, d), positions_s).reshape(s, -1)
    v = (h_se @ p["wv"]).reshape(s, -1)
    q_shd, k_shd, v_shd = (per_row(gather_rows_to_root, t, axis, n, wire).reshape(s, -1, d) for t in (q, k, v))
    k_tkd = jax.lax.dynamic_update_slice(k_tkd, k_shd, (start, 0, 0))
    v_tkd = jax.lax.dynamic_update_slice(v_tkd, v_shd, (start, 0, 0))
    k_pos_t = jnp.arange(k_tkd.shape[0])
    attn = ref.attention_core(q_shd, k_tkd, v_tkd, positions_s, k_pos_t, True, k_pos_t < start + s).reshape(s, -1)
    attn = per_row(broadcast_from_root, attn, axis, n, wire)  # llamaSyncMultiheadAtt
    return per_row(gather_rows_to_root, attn @ p["wo_rows"], axis, n, wire), k_tkd, v_tkd


def sliced_layers(cfg, kind: str, wire: str, axis: str, n: int, blocks, k_cache, v_cache, x_se, start):
    """The layer loop of v0.1-v0.7 (`kind` "root8" | "root6"): x lives on the root (zeros elsewhere)."""
    positions_s = start + jnp.arange(x_se.shape[0])
    local = {key: val[0] for key, val in blocks.items()}
    is_root = _index(axis) == 0

    def layer(x, inputs):
        p, k_tkd, v_tkd = inputs
        h = per_row(broadcast_from_root, ref.rms_norm(x, p["attn_norm"]), axis, n, wire)
        if kind == "root8":
            out, k_tkd, v_tkd = _root_attention(cfg, p, h, k_tkd, v_tkd, start, positions_s, axis, n, wire)
        else:
            part, k_tkd, v_tkd = attention_partial(cfg, p, h, k_tkd, v_tkd, start, positions_s)
            out = per_row(reduce_to_root, part, axis, n, wire)
        x = jnp.where(is_root, x + out, 0.0)
        h = per_row(broadcast_from_root, ref.rms_norm(x, p["ffn_norm"]), axis, n, wire)
        hidden = jax.nn.silu(h @ p["w_gate"]) * (h @ p["w_up"]) * p["ffn_mask"]  # (S, d_ff/n)
        whole = per_row(hidden_exchange, hidden, axis, n, wire).reshape(x.shape[0], -1)  # (S, d_ff)
        x = jnp.where(is_root, x + per_row(gather_rows_to_root, whole @ p["w_down_rows"], axis, n, wire), 0.0)
        return x, (k_tkd, v_tkd)

    return jax.lax.scan(layer, x_se, (local, k_cache[0], v_cache[0]))


_PROGRAMS: dict = {}


def program_for(ep: EngineParams):
    """The compiled-once program for `ep`'s config, mesh and kind."""
    key = (ep.cfg, tuple(d.id for d in ep.mesh.devices.flat), ep.axis, ep.kind, ep.wire)
    if key not in _PROGRAMS:
        _PROGRAMS[key] = make_program(ep.cfg, ep.mesh, ep.kind, ep.wire)
    return _PROGRAMS[key]


@partial(jax.jit, static_argnums=0)
def _root_head(cfg, final_norm_e, lm_head_ev, x_se):
    return ref.rms_norm(x_se, final_norm_e) @ lm_head_ev


def _on_root(ep: EngineParams, root_value, shape, dtype):
    """A (n, ...) array sharded on the mesh with `root_value` in shard 0 and zeros elsewhere."""
    arrays = [jax.device_put(root_value[None] if d == ep.root_device else np.zeros((1, *shape), dtype), d)
              for d in ep.mesh.devices.flat]
    return jax.make_array_from_single_device_arrays((ep.n, *shape), NamedSharding(ep.mesh, P(ep.axis)), arrays)


def program_inputs(ep: EngineParams, tokens_s, cache: Cache) -> tuple:
    """The program's arguments for `tokens_s` at the cache's position (the root embeds the tokens)."""
    tokens = np.asarray(tokens_s, dtype=np.int32)
    e = ep.cfg.d_model
    h0 = _on_root(ep, ep.root["embed"][jax.device_put(tokens, ep.root_device)], (tokens.size, e), np.float32)
    if ep.kind == "allgather":
        ctrl = _on_root(ep, jnp.asarray([cache.length, tokens.size], jnp.int32), (2,), np.int32)
        return ep.blocks, cache.k, cache.v, ep.head, h0, ctrl
    return ep.blocks, cache.k, cache.v, h0, _on_root(ep, jnp.asarray(cache.length, jnp.uint16), (), np.uint16)


def _check_room(cache: Cache, tokens: np.ndarray) -> None:
    if cache.length + tokens.size > int(cache.k.shape[2]):
        raise WorkbenchError(f"KV cache holds {int(cache.k.shape[2])} tokens; {cache.length} used, {tokens.size} "
                             f"more requested")


def _forward_once(ep: EngineParams, tokens: np.ndarray, cache: Cache):
    _check_room(cache, tokens)
    out, k, v = program_for(ep)(*program_inputs(ep, tokens, cache))
    root = next(s.data[0] for s in out.addressable_shards if s.device == ep.root_device)
    logits = root if ep.kind == "allgather" else _root_head(ep.cfg, ep.root["final_norm_g"], ep.root["lm_head"], root)
    return logits, Cache(k, v, cache.length + int(tokens.size))


def forward(ep: EngineParams, tokens_s, cache: Cache):
    """Run new tokens: allgather in one forward of S rows, the root kinds one token per forward (v0.1-v0.10);
    returns (logits (S, V) on the root, cache)."""
    tokens = np.asarray(tokens_s, dtype=np.int32).reshape(-1)
    if tokens.size == 0:
        raise WorkbenchError("tokens must be a non-empty sequence of token ids")
    _check_room(cache, tokens)
    if ep.kind == "allgather":
        return _forward_once(ep, tokens, cache)
    rows = []
    for t in tokens:
        logits, cache = _forward_once(ep, np.array([t], np.int32), cache)
        rows.append(logits[0])
    return jnp.stack(rows), cache


def generate(cfg, params: dict, prompt: Sequence[int], n_new: int, mesh: Mesh, kind: str = "allgather",
             wire: str = "f32") -> list[int]:
    """Greedy generation (sampling on the root); with the f32 wire equal to `reference.generate_greedy`."""
    require_int("n_new", n_new, low=0)
    prompt = [int(t) for t in np.asarray(prompt).reshape(-1)]
    if not prompt:
        raise WorkbenchError("prompt must be a non-empty sequence of token ids")
    ep = shard_params(cfg, params, mesh, kind, wire)
    cache = empty_cache(ep, len(prompt) + max(n_new, 1))
    logits, cache = forward(ep, prompt, cache)
    out: list[int] = []
    last = logits[-1]
    for _ in range(n_new):
        out.append(int(jnp.argmax(last)))
        if len(out) == n_new:
            break
        logits, cache = forward(ep, [out[-1]], cache)
        last = logits[-1]
    return out


def expected_traffic(cfg, n: int, kind: str, rows: int, wire: str = "f32") -> dict[str, float]:
    """What one compiled forward of `rows` rows must carry (its layer loop compiled once): the cost model's
    endpoint messages and busiest-link bytes (`forward_syncs`) for the wire format's activation bits."""
    require_choice("wire", wire, WIRES)
    syncs = forward_syncs(SCHEME_OF[kind], cfg, n, rows, WIRE_BITS[wire], output_head=kind == "allgather")
    return sync_traffic(syncs, n, n_layers=1)
