"""Galaxy's parallel layouts as `shard_map` programs over a 1-D mesh (Galaxy Sec. III-B, III-D).

* ``megatron_tp``: heads and FFN columns split; activations replicated (S, E); norms and residuals
  computed redundantly; a `psum` (all-reduce) after the attention and after the FFN.
* ``sp``: the sequence split, every weight replicated; K and V all-gathered for attention.
* ``galaxy_hmp``: TP on MHA/MLP, SP on the connective ops: the residual stream stays sequence-sharded;
  an all-gather enters each TP block and a reduce-scatter leaves it.
* ``galaxy_hmp_overlap``: HMP with every all-gather fused into the following GEMM and every
  reduce-scatter into the preceding GEMM, tile by tile around a ring of `ppermute`s (Figs. 6-7).

Uneven, planner-chosen partitions (`workbench.schemes.galaxy.Partition`) are padded to the largest
share: padded heads and FFN columns have zero weights (they contribute exactly zero), padded tokens
are masked out of attention as keys and dropped from the output. Weights and activations are f32.

    out = galaxy_forward(cfg, params, tokens, mesh, "galaxy_hmp_overlap", partition)
    prog = program(cfg, params["blocks"], seq_len, mesh, scheme, partition)   # the backbone alone
    compiled_collectives(jax.jit(prog.fn), *prog.weights, prog.pad(x_se))   # what it moves
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError, require_choice
from workbench.kernels import reference as ref
from workbench.machine.network import bottleneck_bytes
from workbench.model.models import TransformerConfig
from workbench.schemes.base import Workload
from workbench.schemes.galaxy import PARALLEL_SCHEMES
from workbench.schemes.partitions import Partition, layer_collectives, uniform_partition

KERNEL_SCHEMES = PARALLEL_SCHEMES
AXIS = "x"
SHARDED_KEYS = ("wq", "wk", "wv", "bq", "bk", "bv", "wo", "w1", "b1", "w2", "w_gate", "w_up", "w_down")


# ---- host side: padded per-device weight slices ---------------------------------------------------
def _starts(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int)


def _take_pad(w, axis: int, starts, sizes, width: int, unit: int = 1) -> np.ndarray:
    """Per device, `sizes[d] * unit` entries of `w` along `axis` from `starts[d] * unit`, zero-padded
    to `width * unit`; stacked on a new leading device axis (host numpy: no per-shape compiles)."""
    w = np.asarray(w)
    parts = []
    for s, n in zip(starts, sizes):
        piece = np.take(w, np.arange(s * unit, (s + n) * unit), axis=axis)
        pad = [(0, 0)] * w.ndim
        pad[axis] = (0, (width - n) * unit)
        parts.append(np.pad(piece, pad))
    return np.stack(parts)


def shard_block(cfg: TransformerConfig, p: ref.Params, part: Partition) -> ref.Params:
    """One block's TP weights as (n, ...) stacks of padded per-device slices (heads, FFN columns)."""
    d, group = cfg.d_head, cfg.n_heads // cfg.n_kv_heads
    heads = np.asarray(part.heads)
    kv = heads // group
    h_max, kv_max, f_max = int(heads.max()), int(kv.max()), int(max(part.mlp_cols))
    hs, ks, fs = _starts(heads), _starts(kv), _starts(part.mlp_cols)
    out = {"wq": _take_pad(p["wq"], 1, hs, heads, h_max, d), "wk": _take_pad(p["wk"], 1, ks, kv, kv_max, d),
           "wv": _take_pad(p["wv"], 1, ks, kv, kv_max, d), "wo": _take_pad(p["wo"], 0, hs, heads, h_max, d)}
    if cfg.has_bias:
        out.update(bq=_take_pad(p["bq"], 0, hs, heads, h_max, d), bk=_take_pad(p["bk"], 0, ks, kv, kv_max, d),
                   bv=_take_pad(p["bv"], 0, ks, kv, kv_max, d))
    cols = part.mlp_cols
    if cfg.gated_ffn:
        out.update(w_gate=_take_pad(p["w_gate"], 1, fs, cols, f_max), w_up=_take_pad(p["w_up"], 1, fs, cols, f_max),
                   w_down=_take_pad(p["w_down"], 0, fs, cols, f_max))
    else:
        out.update(w1=_take_pad(p["w1"], 1, fs, cols, f_max), b1=_take_pad(p["b1"], 0, fs, cols, f_max),
                   w2=_take_pad(p["w2"], 0, fs, cols, f_max))
    return out


def replicated_block(p: ref.Params) -> ref.Params:
    """The weights every device holds under TP: norms and the output biases (added once, after reducing)."""
    return {k: v for k, v in p.items() if k not in SHARDED_KEYS}


@dataclass(frozen=True)
class SeqLayout:
    """Where each token sits in the padded, sequence-sharded layout: device d owns rows
    [d * s_max, d * s_max + seq[d]) of an (n * s_max, E) array."""

    seq: tuple[int, ...]

    @property
    def s_max(self) -> int:
        """Rows per device after padding."""
        return max(max(self.seq), 1)

    @property
    def rows(self) -> np.ndarray:
        """Padded-layout row of each token, in sequence order (S,)."""
        return np.concatenate([d * self.s_max + np.arange(s) for d, s in enumerate(self.seq)]).astype(int)

    def positions_and_valid(self) -> tuple[np.ndarray, np.ndarray]:
        """Token position of every padded row (padding: the sequence length) and whether it is a token."""
        total = sum(self.seq)
        pos = np.full(len(self.seq) * self.s_max, total, dtype=np.int32)
        pos[self.rows] = np.arange(total)
        valid = np.zeros(len(self.seq) * self.s_max, dtype=bool)
        valid[self.rows] = True
        return pos, valid

    def pad(self, x_se):
        """(S, E) -> (n * s_max, E) with zero rows for padding."""
        out = jnp.zeros((len(self.seq) * self.s_max,) + x_se.shape[1:], x_se.dtype)
        return out.at[self.rows].set(x_se)

    def unpad(self, x_pe):
        """(n * s_max, E) -> (S, E)."""
        return x_pe[self.rows]


# ---- device side: building blocks -----------------------------------------------------------------
def _ring(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)]


def allgather_matmul(h_loc, w, n: int, overlap: bool):
    """AllGather(h) @ w: (s_max, K) per device -> (n * s_max, N). With `overlap`, a ring of ppermutes:
    step k multiplies the chunk of device i-k while sending it on to device i+1 (Galaxy Fig. 6)."""
    if not overlap:
        return jax.lax.all_gather(h_loc, AXIS, tiled=True) @ w
    idx = jax.lax.axis_index(AXIS)
    out = jnp.zeros((n,) + h_loc.shape[:1] + w.shape[1:], h_loc.dtype)
    chunk = h_loc
    for k in range(n):
        following = jax.lax.ppermute(chunk, AXIS, _ring(n)) if k < n - 1 else None
        out = jax.lax.dynamic_update_index_in_dim(out, chunk @ w, (idx - k) % n, 0)
        chunk = following
    return out.reshape((-1,) + w.shape[1:])


def matmul_reducescatter(x_all, w, n: int, overlap: bool):
    """ReduceScatter(x @ w) over the sequence: (n * s_max, K) per device -> own (s_max, N), summed over
    devices. With `overlap`, step k computes the partial of chunk i-1-k, adds the partial received from
    device i-1 and sends the sum to device i+1; the last step's chunk is the device's own (Fig. 7)."""
    if not overlap:
        return jax.lax.psum_scatter(x_all @ w, AXIS, scatter_dimension=0, tiled=True)
    idx = jax.lax.axis_index(AXIS)
    chunks = x_all.reshape((n, -1) + x_all.shape[1:])
    acc = None
    for k in range(n):
        part = jax.lax.dynamic_index_in_dim(chunks, (idx - 1 - k) % n, 0, keepdims=False) @ w
        acc = part if acc is None else part + jax.lax.ppermute(acc, AXIS, _ring(n))
    return acc


def _norm2(cfg: TransformerConfig, p, x):
    return ref.rms_norm(x, p["ffn_norm"]) if cfg.family == "llama" else ref.layer_norm(x, p["ln2_g"], p["ln2_b"])


def _split_qkv(cfg: TransformerConfig, p, qkv, positions):
    """(T, width) of concatenated local q|k|v -> q (T, a, D), k, v (T, kv, D) (+ rotary for Llama)."""
    nq, nk = p["wq"].shape[1], p["wk"].shape[1]
    d = cfg.d_head
    t = qkv.shape[0]
    q = qkv[:, :nq].reshape(t, -1, d)
    k = qkv[:, nq:nq + nk].reshape(t, -1, d)
    v = qkv[:, nq + nk:].reshape(t, -1, d)
    if cfg.family == "llama":
        q, k = ref.rotary(q, positions), ref.rotary(k, positions)
    return q, k, v


def _qkv_weight(cfg: TransformerConfig, p):
    w = jnp.concatenate([p["wq"], p["wk"], p["wv"]], axis=1)
    b = jnp.concatenate([p["bq"], p["bk"], p["bv"]]) if cfg.has_bias else None
    return w, b


def _ffn_in_weight(cfg: TransformerConfig, p):
    if cfg.gated_ffn:
        return jnp.concatenate([p["w_gate"], p["w_up"]], axis=1), None
    return p["w1"], p["b1"]


def _ffn_act(cfg: TransformerConfig, up):
    if cfg.gated_ffn:
        gate, val = jnp.split(up, 2, axis=1)
        return jax.nn.silu(gate) * val
    return ref.gelu(up)


def _ffn_out_weight(cfg: TransformerConfig, p):
    return p["w_down"] if cfg.gated_ffn else p["w2"]


def _bias(cfg: TransformerConfig, p, name: str, x):
    return x + p[name] if cfg.has_bias else x


# ---- the three layer bodies (inside shard_map; p holds this device's slices) -------------------------
def tp_layer(cfg: TransformerConfig, p, x_se, positions):
    """Megatron TP layer on replicated (S, E): local heads/columns, psum after attention and after the FFN."""
    h = ref.pre_attention_norm(cfg, p, x_se)
    w_qkv, b_qkv = _qkv_weight(cfg, p)
    qkv = h @ w_qkv + (b_qkv if b_qkv is not None else 0)
    q, k, v = _split_qkv(cfg, p, qkv, positions)
    attn = ref.attention_core(q, k, v, positions, positions, cfg.is_decoder)
    attn = _bias(cfg, p, "bo", jax.lax.psum(attn.reshape(x_se.shape[0], -1) @ p["wo"], AXIS))
    w_in, b_in = _ffn_in_weight(cfg, p)

    def ffn(h_se):
        up = h_se @ w_in + (b_in if b_in is not None else 0)
        return _bias(cfg, p, "b2", jax.lax.psum(_ffn_act(cfg, up) @ _ffn_out_weight(cfg, p), AXIS))

    if cfg.family == "bert":
        x_se = ref.layer_norm(x_se + attn, p["ln1_g"], p["ln1_b"])
        return ref.layer_norm(x_se + ffn(x_se), p["ln2_g"], p["ln2_b"])
    x_se = x_se + attn
    return x_se + ffn(_norm2(cfg, p, x_se))


def hmp_layer(cfg: TransformerConfig, p, x_loc, pos_all, valid_all, n: int, overlap: bool):
    """Galaxy HMP layer on the sequence shard x_loc (s_max, E): AG -> TP MHA -> RS -> connective (SP)
    -> AG -> TP MLP -> RS -> connective; with `overlap` the AG/RS are fused into the GEMMs."""
    h = x_loc if cfg.family == "bert" else ref.pre_attention_norm(cfg, p, x_loc)
    w_qkv, b_qkv = _qkv_weight(cfg, p)
    qkv = allgather_matmul(h, w_qkv, n, overlap) + (b_qkv if b_qkv is not None else 0)
    q, k, v = _split_qkv(cfg, p, qkv, pos_all)
    attn = ref.attention_core(q, k, v, pos_all, pos_all, cfg.is_decoder, valid_all)
    attn_loc = _bias(cfg, p, "bo", matmul_reducescatter(attn.reshape(attn.shape[0], -1), p["wo"], n, overlap))
    if cfg.family == "bert":
        x_loc = ref.layer_norm(x_loc + attn_loc, p["ln1_g"], p["ln1_b"])
        h = x_loc
    else:
        x_loc = x_loc + attn_loc
        h = _norm2(cfg, p, x_loc)
    w_in, b_in = _ffn_in_weight(cfg, p)
    up = allgather_matmul(h, w_in, n, overlap) + (b_in if b_in is not None else 0)
    f_loc = _bias(cfg, p, "b2", matmul_reducescatter(_ffn_act(cfg, up), _ffn_out_weight(cfg, p), n, overlap))
    if cfg.family == "bert":
        return ref.layer_norm(x_loc + f_loc, p["ln2_g"], p["ln2_b"])
    return x_loc + f_loc


def sp_layer(cfg: TransformerConfig, p, x_loc, pos_loc, pos_all, valid_all):
    """SP layer on the sequence shard with all weights: K and V all-gathered, everything else local."""
    h = ref.pre_attention_norm(cfg, p, x_loc)
    q, k, v = ref.qkv_project(cfg, p, h, pos_loc)
    k_all = jax.lax.all_gather(k, AXIS, tiled=True)
    v_all = jax.lax.all_gather(v, AXIS, tiled=True)
    attn = ref.attention_core(q, k_all, v_all, pos_loc, pos_all, cfg.is_decoder, valid_all)
    attn = _bias(cfg, p, "bo", attn.reshape(x_loc.shape[0], -1) @ p["wo"])
    if cfg.family == "bert":
        x_loc = ref.layer_norm(x_loc + attn, p["ln1_g"], p["ln1_b"])
        return ref.layer_norm(x_loc + ref.ffn(cfg, p, x_loc), p["ln2_g"], p["ln2_b"])
    x_loc = x_loc + attn
    return x_loc + ref.ffn(cfg, p, _norm2(cfg, p, x_loc))


# ---- whole backbone as one shard_map -------------------------------------------------------------------
def _squeeze(tree):
    return jax.tree.map(lambda a: a[0], tree)


@dataclass(frozen=True)
class Program:
    """A compiled-ready backbone: `fn(weights, x_in)` is the shard_map program; `weights` are already
    placed on the mesh; `pad`/`unpad` map (S, E) hidden states to and from the program's layout."""

    fn: object
    weights: tuple
    layout: SeqLayout
    scheme: str

    def pad(self, x_se):
        """(S, E) -> the program's input layout (replicated for TP, padded sequence shards otherwise)."""
        return x_se if self.scheme == "megatron_tp" else self.layout.pad(x_se)

    def unpad(self, out):
        """The program's output -> (S, E)."""
        return out if self.scheme == "megatron_tp" else self.layout.unpad(out)

    def compile(self, x_se):
        """The jitted program lowered and compiled for hidden states like `x_se` (HLO via `.as_text()`)."""
        return jax.jit(self.fn).lower(*self.weights, self.pad(x_se)).compile()

    def __call__(self, x_se):
        return self.unpad(jax.jit(self.fn)(*self.weights, self.pad(x_se)))


def _place(tree, mesh: Mesh, spec: P):
    return jax.device_put(tree, jax.sharding.NamedSharding(mesh, spec))


def program(cfg: TransformerConfig, blocks: list[ref.Params], seq_len: int, mesh: Mesh, scheme: str,
            partition: Partition | None = None) -> Program:
    """The shard_map program running every block under `scheme` on `seq_len` tokens (the reference's stack)."""
    require_choice("scheme", scheme, KERNEL_SCHEMES)
    n = mesh.shape[AXIS]
    part = uniform_partition(cfg, n, seq_len) if partition is None else partition
    if part.n != n:
        raise WorkbenchError(f"partition is for {part.n} devices but the mesh has {n}")
    part.check(cfg, seq_len)
    layout = SeqLayout(part.seq)
    pos_all, valid_all = (jnp.asarray(a) for a in layout.positions_and_valid())
    if scheme == "sp":
        pos_dev = pos_all.reshape(n, layout.s_max)

        @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False)
        def run_sp(blocks_, pos_loc, x_loc):
            for p in blocks_:
                x_loc = sp_layer(cfg, p, x_loc, pos_loc[0], pos_all, valid_all)
            return x_loc

        return Program(run_sp, (_place(blocks, mesh, P()), _place(pos_dev, mesh, P(AXIS))), layout, scheme)
    weights = (_place([shard_block(cfg, p, part) for p in blocks], mesh, P(AXIS)),
               _place([replicated_block(p) for p in blocks], mesh, P()))
    if scheme == "megatron_tp":
        positions = jnp.arange(seq_len)

        @partial(jax.shard_map, mesh=mesh, in_specs=(P(AXIS), P(), P()), out_specs=P(), check_vma=False)
        def run_tp(sh, rep, x):
            for a, b in zip(sh, rep):
                x = tp_layer(cfg, {**_squeeze(a), **b}, x, positions)
            return x

        return Program(run_tp, weights, layout, scheme)
    overlap = scheme == "galaxy_hmp_overlap"

    @partial(jax.shard_map, mesh=mesh, in_specs=(P(AXIS), P(), P(AXIS)), out_specs=P(AXIS), check_vma=False)
    def run_hmp(sh, rep, x_loc):
        for a, b in zip(sh, rep):
            x_loc = hmp_layer(cfg, {**_squeeze(a), **b}, x_loc, pos_all, valid_all, n, overlap)
        return x_loc

    return Program(run_hmp, weights, layout, scheme)


def galaxy_forward(cfg: TransformerConfig, params: ref.Params, tokens_s, mesh: Mesh, scheme: str,
                   partition: Partition | None = None):
    """Whole-model forward under `scheme`: BERT hidden states (S, E) or decoder logits (S, V), as the reference."""
    ref._check_tokens(cfg, tokens_s)
    tokens_s = jnp.asarray(tokens_s)
    positions = jnp.arange(tokens_s.shape[0])
    prog = program(cfg, params["blocks"], int(tokens_s.shape[0]), mesh, scheme, partition)
    x_se = prog(ref.embed(cfg, params, tokens_s, positions))
    if cfg.family == "bert":
        return x_se
    return ref.lm_logits(cfg, params, ref.final_norm(cfg, params, x_se))


# ---- analytical traffic of the compiled programs ---------------------------------------------------
def expected_collectives(cfg: TransformerConfig, scheme: str, partition: Partition) -> dict[str, int]:
    """Bytes of collective results per HLO kind the compiled backbone should show (f32, padded shapes),
    from the cost model's per-layer collectives (`workbench.schemes.galaxy.layer_collectives`)."""
    require_choice("scheme", scheme, KERNEL_SCHEMES)
    n = partition.n
    tokens = sum(partition.seq) if scheme == "megatron_tp" else n * SeqLayout(partition.seq).s_max
    wl = Workload("prefill", tokens, tokens, weight_bits=32, activation_bits=32)
    out: dict[str, int] = {}
    for kind, message in layer_collectives(scheme, cfg, wl) * cfg.n_layers:
        if scheme == "galaxy_hmp_overlap":  # each ring step is one ppermute of a chunk
            key, value = "collective-permute", bottleneck_bytes("ring", kind, n, message)
        else:
            key = kind.replace("_", "-")
            value = message / n if kind == "reduce_scatter" else message
        out[key] = out.get(key, 0) + int(round(float(value)))
    return {k: v for k, v in out.items() if v > 0}
