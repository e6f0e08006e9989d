"""Hepti's three weight-stationary modes as shard_map programs with planner-chosen uneven splits.

shard_map gives every device an equal shard, so uneven splits (head units, rows, FFN columns,
d_model columns) are padded to the largest share and masked: host-side, each device's weight slice
is gathered into a zero-padded slot array (padded heads produce exactly zero attention output,
padded FFN/d_model columns stay zero through every op); inside the program, rows are taken with a
per-device offset table and gathered outputs are compacted with static index arrays. The padded
program therefore moves slightly more than the exact split (max share x devices);
`kernel_traffic` predicts exactly what the compiled program moves, and the cost model in
`workbench.schemes.hepti` charges the exact (unpadded) bytes a real deployment sends.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError
from workbench.kernels import reference as ref
from workbench.kernels.mesh import make_grid_mesh, make_mesh
from workbench.model.models import TransformerConfig
from workbench.schemes.hepti import Partition

AXIS = "x"
GRID_AXES = ("row", "col")


# ---- static index tables (numpy, host side) ----------------------------------------------------
def _offsets(sizes) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)


def _slot_index(sizes, pad: int) -> np.ndarray:
    """(n, max) table: slot j of part i -> global index offset_i + j, or `pad` beyond its size."""
    width = max(max(sizes), 1)
    table = np.full((len(sizes), width), pad, dtype=np.int32)
    for i, (off, size) in enumerate(zip(_offsets(sizes), sizes)):
        table[i, :size] = off + np.arange(size)
    return table


def _valid_slots(sizes, unit: int = 1) -> np.ndarray:
    """Positions of the real entries in a gathered padded buffer ((n * max) slots of `unit` each)."""
    width = max(max(sizes), 1)
    slots = [i * width + j for i, size in enumerate(sizes) for j in range(size)]
    return (np.asarray(slots, dtype=np.int32)[:, None] * unit + np.arange(unit)).reshape(-1)


def _pad_axis(a, axis: int):
    """Append one zero entry along `axis` (the target of every `pad` index)."""
    a = np.asarray(a)
    shape = list(a.shape)
    shape[axis] = 1
    return np.concatenate([a, np.zeros(shape, a.dtype)], axis=axis)


def _unit_table(cfg: TransformerConfig, heads) -> np.ndarray:
    return _slot_index(heads, cfg.n_kv_heads)


# ---- host-side weight placement (weight-stationary: done once per partition) -------------------
def _qkv_shards(cfg: TransformerConfig, p, heads) -> dict:
    """Per-device Q/K/V weight and bias columns of its head units, zero-padded: (n, E, hmax*r*D)."""
    e, u, d = cfg.d_model, cfg.n_kv_heads, cfg.d_head
    qd = cfg.n_heads // u * d  # query columns per unit
    idx = _unit_table(cfg, heads)  # (n, hmax)
    n, hmax = idx.shape
    out = {}
    for name, width in (("wq", qd), ("wk", d), ("wv", d)):
        w = _pad_axis(np.asarray(p[name]).reshape(e, u, width), 1)[:, idx]  # (E, n, hmax, width)
        out[name] = w.transpose(1, 0, 2, 3).reshape(n, e, hmax * width)
        if cfg.has_bias:
            b = _pad_axis(np.asarray(p["b" + name[1]]).reshape(u, width), 0)[idx]  # (n, hmax, width)
            out["b" + name[1]] = b.reshape(n, hmax * width)
    return out


def _wo_unit_rows(cfg: TransformerConfig, p, unit_idx) -> np.ndarray:
    """Rows of Wo belonging to the head units in `unit_idx` (pad -> zero rows): (..., units*r*D, E)."""
    u, e = cfg.n_kv_heads, cfg.d_model
    qd = cfg.n_heads // u * cfg.d_head
    wo = _pad_axis(np.asarray(p["wo"]).reshape(u, qd, e), 0)[unit_idx]  # (..., k, qd, E)
    return wo.reshape(*unit_idx.shape[:-1], unit_idx.shape[-1] * qd, e)


def _ffn_names(cfg: TransformerConfig) -> tuple[tuple[str, ...], str]:
    return (("w_gate", "w_up") if cfg.gated_ffn else ("w1",)), ("w_down" if cfg.gated_ffn else "w2")


def shard_params(cfg: TransformerConfig, p, part: Partition) -> dict:
    """Place one block's weights for `part`: stacked per-device (or per-grid-cell) padded slices."""
    out = _qkv_shards(cfg, p, part.heads)
    up_names, down_name = _ffn_names(cfg)
    if part.mode == "ws":
        return out
    if part.mode == "1d":
        out["wo"] = _wo_unit_rows(cfg, p, _unit_table(cfg, part.heads))  # (n, hmax*qd, E)
        fidx = _slot_index(part.ffn, cfg.d_ff)  # (n, fmax)
        for name in up_names:
            out[name] = _pad_axis(np.asarray(p[name]), 1)[:, fidx].transpose(1, 0, 2)  # (n, E, fmax)
        out[down_name] = _pad_axis(np.asarray(p[down_name]), 0)[fidx]  # (n, fmax, E)
        if cfg.has_bias:
            out["b1"] = _pad_axis(np.asarray(p["b1"]), 0)[fidx]  # (n, fmax)
        return {k: jnp.asarray(v) for k, v in out.items()}
    return _shard_2d(cfg, p, part, out)


def _shard_2d(cfg: TransformerConfig, p, part: Partition, out: dict) -> dict:
    """2D tiles: Wo[P_r, E_c], W1[E_c, F_r], W2[F_r, E_c] and per-column vectors, stacked (R, C, ...)."""
    rows, cols = part.grid
    unit_idx = _unit_table(cfg, part.heads).reshape(rows, -1)  # (R, C*hmax): the grid row's units
    cidx = _slot_index(part.cols, cfg.d_model)  # (C, emax)
    fidx = _slot_index(part.ffn, cfg.d_ff)  # (R, fmax)
    wo_rows = _pad_axis(_wo_unit_rows(cfg, p, unit_idx), 2)  # (R, C*hmax*qd, E+1)
    out["wo"] = np.stack([wo_rows[:, :, cidx[c]] for c in range(cols)], axis=1)  # (R, C, C*hmax*qd, emax)
    up_names, down_name = _ffn_names(cfg)
    for name in up_names:
        w = _pad_axis(_pad_axis(np.asarray(p[name]), 0), 1)
        out[name] = w[cidx[None, :, :, None], fidx[:, None, None, :]]  # (R, C, emax, fmax)
    w2 = _pad_axis(_pad_axis(np.asarray(p[down_name]), 0), 1)
    out[down_name] = w2[fidx[:, None, :, None], cidx[None, :, None, :]]  # (R, C, fmax, emax)
    col_vectors = ["bo", "b2", "ln1_g", "ln1_b", "ln2_g", "ln2_b", "ffn_norm"]
    for name in [v for v in col_vectors if v in p]:
        out[name] = np.broadcast_to(_pad_axis(np.asarray(p[name]), 0)[cidx], (rows, cols, cidx.shape[1]))
    if cfg.has_bias:
        out["b1"] = np.broadcast_to(_pad_axis(np.asarray(p["b1"]), 0)[fidx][:, None], (rows, cols, fidx.shape[1]))
    for name in ("wq", "wk", "wv", "bq", "bk", "bv"):
        if name in out:
            out[name] = out[name].reshape(rows, cols, *out[name].shape[1:])
    return {k: jnp.asarray(v) for k, v in out.items()}


# ---- pieces shared by the three programs --------------------------------------------------------
def _local(shards: dict, lead: int = 1) -> dict:
    """Drop the `lead` leading device dimensions (size 1 per device) that shard_map leaves on stacked inputs."""
    return {k: v.reshape(v.shape[lead:]) for k, v in shards.items()}


def _attention_local(cfg: TransformerConfig, p_local: dict, h_se, positions_s):
    """This device's heads: Q/K/V projection and attention -> (S, hmax*r*D)."""
    q_shd, k_shd, v_shd = ref.qkv_project(cfg, p_local, h_se, positions_s)
    attn_shd = ref.attention_core(q_shd, k_shd, v_shd, positions_s, positions_s, cfg.is_decoder)
    return attn_shd.reshape(h_se.shape[0], -1)


def _after_attention(cfg: TransformerConfig, p, x_se, attn_se):
    """Residual, norms and FFN after the (biased) attention output, row-local (as reference.block_forward)."""
    eps = ref.norm_eps(cfg)
    if cfg.family == "bert":
        x_se = ref.layer_norm(x_se + attn_se, p["ln1_g"], p["ln1_b"], eps)
        return ref.layer_norm(x_se + ref.ffn(cfg, p, x_se), p["ln2_g"], p["ln2_b"], eps)
    x_se = x_se + attn_se
    h_se = ref.rms_norm(x_se, p["ffn_norm"]) if cfg.family == "llama" else ref.layer_norm(x_se, p["ln2_g"], p["ln2_b"], eps)
    return x_se + ref.ffn(cfg, p, h_se)


def _my_rows(x_se, offsets, smax: int, axis: str):
    """This device's rows [offset, offset + smax) of (S, E) (rows past its share are discarded later)."""
    x_pad = jnp.concatenate([x_se, jnp.zeros((smax, x_se.shape[1]), x_se.dtype)])
    start = jnp.asarray(offsets)[jax.lax.axis_index(axis)]
    return jax.lax.dynamic_slice(x_pad, (start, 0), (smax, x_se.shape[1]))


def _gather_rows(rows_se, valid_rows, axis: str):
    """All-gather every device's (smax, E) rows and keep the real ones -> (S, E)."""
    return jax.lax.all_gather(rows_se, axis, axis=0, tiled=True)[valid_rows]


def _reduce_scatter_rows(partial_se, slot_rows, axis: str):
    """Reduce-scatter (S, E) partial sums into each device's padded row block (smax, E)."""
    padded = jnp.concatenate([partial_se, jnp.zeros((1, partial_se.shape[1]), partial_se.dtype)])[slot_rows]
    return jax.lax.psum_scatter(padded, axis, scatter_dimension=0, tiled=True)


# ---- the three block programs -------------------------------------------------------------------
def _ws_body(cfg, part, seq_len):
    qd = cfg.n_heads // cfg.n_kv_heads * cfg.d_head
    valid_cols = _valid_slots(part.heads, qd)
    offsets, smax = _offsets(part.rows), max(max(part.rows), 1)
    valid_rows = _valid_slots(part.rows)

    def body(shards, full, x_se, positions_s):
        p = {**full, **_local(shards)}
        attn_local = _attention_local(cfg, p, ref.pre_attention_norm(cfg, full, x_se), positions_s)
        attn_full = jax.lax.all_gather(attn_local, AXIS, axis=1, tiled=True)[:, valid_cols]  # (S, P)
        attn_rows = _my_rows(attn_full, offsets, smax, AXIS) @ full["wo"]  # L row-wise (smax, E)
        if cfg.has_bias:
            attn_rows = attn_rows + full["bo"]
        out_rows = _after_attention(cfg, full, _my_rows(x_se, offsets, smax, AXIS), attn_rows)
        return _gather_rows(out_rows, valid_rows, AXIS)

    return body


def _1d_body(cfg, part, seq_len):
    offsets, smax = _offsets(part.rows), max(max(part.rows), 1)
    valid_rows = _valid_slots(part.rows)
    slot_rows = _slot_index(part.rows, seq_len).reshape(-1)
    up_names, down_name = _ffn_names(cfg)

    def body(shards, full, x_se, positions_s):
        mine = _local(shards)
        p = {**full, **mine}
        attn_local = _attention_local(cfg, p, ref.pre_attention_norm(cfg, full, x_se), positions_s)
        y_rows = _reduce_scatter_rows(attn_local @ mine["wo"], slot_rows, AXIS)  # block-wise Wo
        if cfg.has_bias:
            y_rows = y_rows + full["bo"]
        x_rows = _my_rows(x_se, offsets, smax, AXIS) + y_rows
        if cfg.family == "bert":
            x_rows = ref.layer_norm(x_rows, full["ln1_g"], full["ln1_b"], ref.norm_eps(cfg))
        x1_se = _gather_rows(x_rows, valid_rows, AXIS)
        if cfg.family == "llama":  # redundant norm on the whole matrix
            h_se = ref.rms_norm(x1_se, full["ffn_norm"])
        elif cfg.family == "gpt":
            h_se = ref.layer_norm(x1_se, full["ln2_g"], full["ln2_b"], ref.norm_eps(cfg))
        else:
            h_se = x1_se
        ffn_local = {name: mine[name] for name in (*up_names, down_name)}
        if cfg.has_bias:
            ffn_local.update(b1=mine["b1"], b2=jnp.zeros_like(full["b2"]))
        z_rows = _reduce_scatter_rows(ref.ffn(cfg, ffn_local, h_se), slot_rows, AXIS)  # block-wise W2
        if cfg.has_bias:
            z_rows = z_rows + full["b2"]
        out_rows = _my_rows(x1_se, offsets, smax, AXIS) + z_rows
        if cfg.family == "bert":
            out_rows = ref.layer_norm(out_rows, full["ln2_g"], full["ln2_b"], ref.norm_eps(cfg))
        return _gather_rows(out_rows, valid_rows, AXIS)

    return body


def _col_norm(cfg, v_se, gamma, beta, n_cols: int):
    """LayerNorm/RMSNorm over d_model split across the grid columns: statistics by one all-reduce."""
    if cfg.family == "llama":
        ms = jax.lax.psum(jnp.sum(v_se * v_se, axis=1, keepdims=True), GRID_AXES[1]) / n_cols
        return v_se * jax.lax.rsqrt(ms + ref.LN_EPS) * gamma  # as reference.rms_norm
    stats = jax.lax.psum(jnp.stack([v_se.sum(1), (v_se * v_se).sum(1)], axis=1), GRID_AXES[1]) / n_cols
    mean, var = stats[:, :1], stats[:, 1:] - stats[:, :1] ** 2
    return (v_se - mean) * jax.lax.rsqrt(var + ref.norm_eps(cfg)) * gamma + beta


def _2d_body(cfg, part, seq_len):
    row_ax, col_ax = GRID_AXES
    cidx = _slot_index(part.cols, cfg.d_model)  # (C, emax)
    valid_cols = _valid_slots(part.cols)
    e = cfg.d_model
    up_names, down_name = _ffn_names(cfg)

    def body(shards, full, x_se, positions_s):
        mine = _local(shards, lead=2)
        p = {**full, **mine}
        attn_local = _attention_local(cfg, p, ref.pre_attention_norm(cfg, full, x_se), positions_s)
        attn_row = jax.lax.all_gather(attn_local, col_ax, axis=1, tiled=True)  # (S, C*hmax*qd): grid row's heads
        y_c = jax.lax.psum(attn_row @ mine["wo"], row_ax)  # (S, emax): partial sums over the grid rows
        x_ext = jnp.concatenate([x_se, jnp.zeros((x_se.shape[0], 1), x_se.dtype)], axis=1)
        x_c = x_ext[:, jnp.asarray(cidx)[jax.lax.axis_index(col_ax)]]  # (S, emax)
        if cfg.has_bias:
            y_c = y_c + mine["bo"]
        x1_c = x_c + y_c
        if cfg.family == "bert":
            x1_c = h_c = _col_norm(cfg, x1_c, mine["ln1_g"], mine["ln1_b"], e)
        elif cfg.family == "gpt":
            h_c = _col_norm(cfg, x1_c, mine["ln2_g"], mine["ln2_b"], e)
        else:
            h_c = _col_norm(cfg, x1_c, mine["ffn_norm"], None, e)
        ups = [jax.lax.psum(h_c @ mine[name], col_ax) for name in up_names]  # (S, fmax) each
        if cfg.gated_ffn:
            hidden = jax.nn.silu(ups[0]) * ups[1]
        else:
            hidden = ref.gelu(ups[0] + mine["b1"], ref.gelu_is_approximate(cfg))
        z_c = jax.lax.psum(hidden @ mine[down_name], row_ax)  # (S, emax)
        if cfg.has_bias:
            z_c = z_c + mine["b2"]
        out_c = x1_c + z_c
        if cfg.family == "bert":
            out_c = _col_norm(cfg, out_c, mine["ln2_g"], mine["ln2_b"], e)
        return jax.lax.all_gather(out_c, col_ax, axis=1, tiled=True)[:, valid_cols]

    return body


_BODIES = {"ws": _ws_body, "1d": _1d_body, "2d": _2d_body}


def partition_mesh(part: Partition):
    """The mesh a partition runs on: 1-D over its devices, or its R x C grid."""
    if part.mode == "2d":
        return make_grid_mesh(*part.grid, axes=GRID_AXES)
    return make_mesh(part.n, AXIS)


def block_program(cfg: TransformerConfig, part: Partition, seq_len: int):
    """A jitted function (shards, full, x_se, positions_s) -> (S, E) running one block in `part`'s mode."""
    part.check(cfg, seq_len)
    mesh = partition_mesh(part)
    shard_spec = P(*GRID_AXES) if part.mode == "2d" else P(AXIS)
    fn = jax.shard_map(_BODIES[part.mode](cfg, part, seq_len), mesh=mesh,
                       in_specs=(shard_spec, P(), P(), P()), out_specs=P(), check_vma=False)
    return jax.jit(fn)


def replicated_params(cfg: TransformerConfig, p, part: Partition) -> dict:
    """The block weights every device holds in full in this mode (WS: Wo, norms, FFN; tiled: norms)."""
    if part.mode == "ws":
        skip = {"wq", "wk", "wv", "bq", "bk", "bv"}
    elif part.mode == "1d":
        skip = {"wq", "wk", "wv", "bq", "bk", "bv", "wo", "w1", "b1", "w_gate", "w_up", "w_down", "w2"}
    else:
        skip = {"wq", "wk", "wv", "bq", "bk", "bv", "wo", "w1", "b1", "w_gate", "w_up", "w_down", "w2", "bo", "b2",
                "ln2_g", "ln2_b", "ffn_norm"} | ({"ln1_g", "ln1_b"} if cfg.family == "bert" else set())
    return {k: v for k, v in p.items() if k not in skip}


def block_args(cfg: TransformerConfig, p, part: Partition, x_se, positions_s) -> tuple:
    """Arguments for `block_program`: placed shards, replicated weights, input and positions."""
    if x_se.ndim != 2 or x_se.shape[1] != cfg.d_model:
        raise WorkbenchError(f"x_se must have shape (S, {cfg.d_model}), got {tuple(x_se.shape)}")
    return shard_params(cfg, p, part), replicated_params(cfg, p, part), x_se, positions_s


def hepti_block(cfg: TransformerConfig, p, x_se, positions_s, part: Partition):
    """One block in `part`'s mode; equals `reference.block_forward(cfg, p, x_se, positions_s)[0]`.

    The input is first replicated onto this partition's mesh (the previous block may have run on another
    mesh when the mode or the device set changed).
    """
    fn = block_program(cfg, part, int(x_se.shape[0]))
    replicated = NamedSharding(partition_mesh(part), P())
    x_se, positions_s = jax.device_put(x_se, replicated), jax.device_put(positions_s, replicated)
    return fn(*block_args(cfg, p, part, x_se, positions_s))


def hepti_forward(cfg: TransformerConfig, params, tokens_s, partitions):
    """Full forward pass with one partition per block (modes may switch between blocks, as Hepti re-plans)."""
    tokens_s = jnp.asarray(tokens_s)
    if isinstance(partitions, Partition):
        partitions = [partitions] * cfg.n_layers
    if len(partitions) != cfg.n_layers:
        raise WorkbenchError(f"need one partition per block ({cfg.n_layers}), got {len(partitions)}")
    positions_s = jnp.arange(tokens_s.shape[0])
    x_se = ref.embed(cfg, params, tokens_s, positions_s)
    for p, part in zip(params["blocks"], partitions):
        x_se = hepti_block(cfg, p, x_se, positions_s, part)
    if cfg.family == "bert":
        return x_se
    return ref.lm_logits(cfg, params, ref.final_norm(cfg, params, x_se))


# ---- the traffic the padded programs move -------------------------------------------------------
def kernel_traffic(cfg: TransformerConfig, seq_len: int, part: Partition, bytes_per_element: int = 4) -> dict[str, int]:
    """Result bytes per device of each collective kind the compiled block program performs.

    Collectives over a group of one device are free (XLA drops them). Padded sizes: the largest
    share times the group size (see the module docstring).
    """
    part.check(cfg, seq_len)
    s, e, b = seq_len, cfg.d_model, bytes_per_element
    qd = cfg.n_heads // cfg.n_kv_heads * cfg.d_head
    hmax = max(part.heads)
    traffic: dict[str, int] = {}

    def add(kind: str, group: int, elements: int) -> None:
        if group > 1:
            traffic[kind] = traffic.get(kind, 0) + int(elements) * b

    if part.mode in ("ws", "1d"):
        n, smax = part.n, max(part.rows)
        if part.mode == "ws":
            add("all-gather", n, s * n * hmax * qd)
            add("all-gather", n, n * smax * e)
        else:
            for _ in range(2):
                add("reduce-scatter", n, smax * e)
                add("all-gather", n, n * smax * e)
        return traffic
    rows, cols = part.grid
    emax, fmax = max(part.cols), max(part.ffn)
    norms = 2 if cfg.family == "bert" else 1
    stats = 1 if cfg.family == "llama" else 2
    n_up = 2 if cfg.gated_ffn else 1
    add("all-gather", cols, s * cols * hmax * qd)
    add("all-reduce", rows, s * emax)  # Wo partial sums
    for _ in range(norms):
        add("all-reduce", cols, s * stats)
    for _ in range(n_up):
        add("all-reduce", cols, s * fmax)  # W1 (gate, up) partial sums
    add("all-reduce", rows, s * emax)  # W2 partial sums
    add("all-gather", cols, s * cols * emax)
    return traffic
