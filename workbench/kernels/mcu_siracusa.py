"""Head-wise tensor partitioning of Bochem et al. (multi-MCU Siracusa) as a JAX `shard_map` program.

Each of N chips holds a contiguous slice of the heads: the columns of W_Q, W_K, W_V (and their
biases, and its slice of the KV cache), the matching rows of W_O, a column slice of W1 (W_gate and
W_up for Llama) and the matching rows of W2 (W_down). No weight matrix is replicated. Vectors that
act on the full (S, E) tensor (the norms, the output biases b_O and b_2) live on the root chip only.

Residual folding: only the root chip (chip 0) adds the residual stream (and b_O / b_2) to its partial
output, so the sum of the partials is the block's pre-norm output. The reduction is hierarchical:
chips form groups of `group_size` (four in the paper) whose members send their partials to the group
leader, the leaders form groups again, and so on up to the root; the root applies the norm and the
result is broadcast back down the same tree. Both directions are explicit `ppermute`s, so the compiled
program's collectives are exactly the tree's messages. There are two synchronisations per block (one
after attention, one after the FFN) plus one broadcast of the input before the first block.

Only the root keeps the residual stream; every chip receives the normalised tensor it needs as input:
  * Llama (pre-RMSNorm): after attention the root forms y = x + attn and broadcasts rms_norm(y); after
    the FFN it forms z = y + ffn and broadcasts the next block's rms_norm(z) (z itself after the last).
  * BERT / MobileBERT (post-LN): the root applies the LayerNorm after each reduction and broadcasts it.
  * GPT (pre-LN) works like Llama with LayerNorm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from workbench.core.errors import WorkbenchError
from workbench.kernels import reference
from workbench.kernels.mesh import make_mesh
from workbench.model.models import TransformerConfig
from workbench.schemes.mcu_tree import GROUP_SIZE, check_partition, tree_steps, tree_strides  # noqa: F401

AXIS = "chips"
SHARDED_COLUMNS = ("wq", "wk", "wv", "w_gate", "w_up", "w1")  # (E, X): columns split by heads / F
SHARDED_ROWS = ("wo", "w_down", "w2")  # (X, E): rows split
SHARDED_VECTORS = ("bq", "bk", "bv", "b1")  # follow their matrix's columns
ROOT_ONLY = ("bo", "b2", "attn_norm", "ffn_norm", "ln1_g", "ln1_b", "ln2_g", "ln2_b")


def tree_reduce(v, n_chips: int, group_size: int = GROUP_SIZE):
    """Sum `v` over all chips onto chip 0 through the group tree (other chips keep partial sums)."""
    for _, _, pairs in tree_steps(n_chips, group_size):
        v = v + jax.lax.ppermute(v, AXIS, pairs)
    return v


def tree_broadcast(v, n_chips: int, group_size: int = GROUP_SIZE):
    """Send chip 0's `v` to every chip down the same tree, top level first."""
    chip = jax.lax.axis_index(AXIS)
    for stride, j, pairs in reversed(tree_steps(n_chips, group_size)):
        received = jax.lax.ppermute(v, AXIS, [(dst, src) for src, dst in pairs])
        v = jnp.where(chip % (group_size * stride) == j * stride, received, v)
    return v


# ---- analytical traffic of the compiled program ------------------------------------------------
@dataclass(frozen=True)
class KernelTraffic:
    """What the kernel's compiled program must move per chip: one ppermute per tree message step."""

    permutes_per_sync: int  # collective-permutes in one reduce + broadcast
    syncs: int  # reduce + broadcast pairs (2 per block)
    input_broadcasts: int  # broadcasts of the block-stack input
    message_bytes: int  # S x E x itemsize, the payload of every permute

    @property
    def collective_permutes(self) -> int:
        """Total collective-permute ops in the program."""
        return self.syncs * self.permutes_per_sync + self.input_broadcasts * self.permutes_per_sync // 2

    @property
    def bytes_per_chip(self) -> int:
        """Sum of the result bytes of every collective the program executes (per device)."""
        return self.collective_permutes * self.message_bytes


def kernel_traffic(cfg: TransformerConfig, n_chips: int, seq_len: int, itemsize: int = 4,
                   group_size: int = GROUP_SIZE) -> KernelTraffic:
    """Analytical collectives of `run_blocks` for `seq_len` new tokens on `n_chips` chips."""
    steps = len(tree_steps(n_chips, group_size))
    return KernelTraffic(2 * steps, 2 * cfg.n_layers, 1 if steps else 0, seq_len * cfg.d_model * itemsize)


def tree_pairs(n_chips: int, group_size: int = GROUP_SIZE) -> list[tuple[tuple[int, int], ...]]:
    """The (source, target) pairs of every ppermute of one reduce followed by one broadcast."""
    steps = tree_steps(n_chips, group_size)
    up = [tuple(pairs) for _, _, pairs in steps]
    down = [tuple((dst, src) for src, dst in pairs) for _, _, pairs in reversed(steps)]
    return up + down


# ---- parameters on the chips -------------------------------------------------------------------
def _root_only(v, n_chips: int):
    """(n_chips, ...) stack holding `v` on chip 0 and zeros elsewhere: placed on the root only."""
    return jnp.zeros((n_chips,) + v.shape, v.dtype).at[0].set(v)


def place_block(p: reference.Params, n_chips: int) -> tuple[dict, dict]:
    """Block parameters laid out for the chips, and their PartitionSpecs (nothing replicated)."""
    arrays, specs = {}, {}
    for name, value in p.items():
        if name in SHARDED_COLUMNS:
            arrays[name], specs[name] = value, P(None, AXIS)
        elif name in SHARDED_ROWS:
            arrays[name], specs[name] = value, P(AXIS, None)
        elif name in SHARDED_VECTORS:
            arrays[name], specs[name] = value, P(AXIS)
        elif name in ROOT_ONLY:
            arrays[name], specs[name] = _root_only(value, n_chips), P(AXIS, *([None] * value.ndim))
        else:
            raise WorkbenchError(f"block parameter {name!r} has no placement rule")
    return arrays, specs


# ---- per-chip block computation ----------------------------------------------------------------
def _norm(cfg: TransformerConfig, x_se, gamma_e, beta_e=None):
    """The family's norm (RMSNorm for Llama, LayerNorm otherwise) with the reference's epsilon."""
    if cfg.family == "llama":
        return reference.rms_norm(x_se, gamma_e)
    eps = reference.norm_eps(cfg)
    return reference.layer_norm(x_se, gamma_e, beta_e, eps)


def _input_norm(cfg: TransformerConfig, p, x_se):
    """What every chip needs as the block input: the pre-norm of x (Llama/GPT) or x itself (BERT)."""
    if cfg.family == "llama":
        return _norm(cfg, x_se, p["attn_norm"][0])
    if cfg.family == "gpt":
        return _norm(cfg, x_se, p["ln1_g"][0], p["ln1_b"][0])
    return x_se


def _local_attention(cfg: TransformerConfig, p, h_se, positions_s, cache, start):
    """This chip's heads: (S, P/N) attention output and its updated KV-cache slice (or None)."""
    q_shd, k_shd, v_shd = reference.qkv_project(cfg, p, h_se, positions_s)
    if cache is None:
        attn_shd = reference.attention_core(q_shd, k_shd, v_shd, positions_s, positions_s, cfg.is_decoder)
        return attn_shd.reshape(h_se.shape[0], -1), None
    k_all = jax.lax.dynamic_update_slice(cache["k"], k_shd.astype(cache["k"].dtype), (start, 0, 0))
    v_all = jax.lax.dynamic_update_slice(cache["v"], v_shd.astype(cache["v"].dtype), (start, 0, 0))
    k_pos_t = jnp.arange(k_all.shape[0])
    valid_t = k_pos_t < start + h_se.shape[0]
    attn_shd = reference.attention_core(q_shd, k_all, v_all, positions_s, k_pos_t, cfg.is_decoder, valid_t)
    return attn_shd.reshape(h_se.shape[0], -1), {"k": k_all, "v": v_all}


def _local_ffn(cfg: TransformerConfig, p, h_se):
    """This chip's FFN slice: (S, E) partial output without b2 (added once, by the root)."""
    if cfg.gated_ffn:
        local = {"w_gate": p["w_gate"], "w_up": p["w_up"], "w_down": p["w_down"]}
    else:
        local = {"w1": p["w1"], "b1": p["b1"], "w2": p["w2"], "b2": jnp.zeros((), h_se.dtype)}
    return reference.ffn(cfg, local, h_se)


def _block_on_chip(cfg: TransformerConfig, p, p_next, h_se, x_se, positions_s, cache, start, n_chips,
                   group_size):
    """One block on one chip: returns (next input h, residual stream x (root), new cache slice)."""
    is_root = jax.lax.axis_index(AXIS) == 0
    root = partial(jnp.where, is_root)
    attn_se, new_cache = _local_attention(cfg, p, h_se, positions_s, cache, start)
    partial_se = attn_se @ p["wo"]
    residual_se = x_se + (p["bo"][0] if cfg.has_bias else 0.0)
    y_se = tree_reduce(partial_se + root(residual_se, 0.0), n_chips, group_size)  # sync 1 (root holds sum)
    if cfg.family == "bert":
        y_se = _norm(cfg, y_se, p["ln1_g"][0], p["ln1_b"][0])
        h_se = y_se
    elif cfg.family == "llama":
        h_se = _norm(cfg, y_se, p["ffn_norm"][0])
    else:
        h_se = _norm(cfg, y_se, p["ln2_g"][0], p["ln2_b"][0])
    h_se = tree_broadcast(h_se, n_chips, group_size)
    partial_se = _local_ffn(cfg, p, h_se)
    residual_se = y_se + (p["b2"][0] if cfg.has_bias else 0.0)
    z_se = tree_reduce(partial_se + root(residual_se, 0.0), n_chips, group_size)  # sync 2
    if cfg.family == "bert":
        z_se = _norm(cfg, z_se, p["ln2_g"][0], p["ln2_b"][0])
        h_next = z_se
    else:
        h_next = z_se if p_next is None else _input_norm(cfg, p_next, z_se)
    return tree_broadcast(h_next, n_chips, group_size), z_se, new_cache


def _stack_on_chip(cfg, n_chips, group_size, start, x_se, positions_s, blocks, caches):
    """All blocks on one chip: the input is broadcast from the root, then two syncs per block."""
    h_se = tree_broadcast(_input_norm(cfg, blocks[0], x_se), n_chips, group_size)
    new_caches = []
    for i, p in enumerate(blocks):
        p_next = blocks[i + 1] if i + 1 < len(blocks) else None
        cache = None if caches is None else caches[i]
        h_se, x_se, c = _block_on_chip(cfg, p, p_next, h_se, x_se, positions_s, cache, start, n_chips, group_size)
        new_caches.append(c)
    return h_se, (None if caches is None else new_caches)  # the last broadcast carries the stack output


# ---- public entry points -------------------------------------------------------------------------
def stack_program(cfg: TransformerConfig, params: reference.Params, n_chips: int, with_cache: bool = False,
                  start: int = 0, group_size: int = GROUP_SIZE):
    """(function, placed block params, cache specs) for the partitioned block stack on `n_chips`.

    The function maps (x_se, positions_s, blocks[, caches]) to the block-stack output (S, E), the same
    on every chip, and (with a cache) the new per-block K/V, split by heads.
    """
    check_partition(cfg, n_chips)
    mesh = make_mesh(n_chips, AXIS)
    placed = [place_block(p, n_chips) for p in params["blocks"]]
    blocks = [a for a, _ in placed]
    block_specs = [s for _, s in placed]
    cache_spec = {"k": P(None, AXIS, None), "v": P(None, AXIS, None)}
    if with_cache:
        in_specs = (P(), P(), block_specs, [cache_spec] * cfg.n_layers)
        out_specs = (P(), [cache_spec] * cfg.n_layers)

        def body(x_se, positions_s, blocks_, caches_):
            return _stack_on_chip(cfg, n_chips, group_size, start, x_se, positions_s, blocks_, caches_)
    else:
        in_specs = (P(), P(), block_specs)
        out_specs = P()

        def body(x_se, positions_s, blocks_):
            return _stack_on_chip(cfg, n_chips, group_size, start, x_se, positions_s, blocks_, None)[0]
    fn = jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    return fn, blocks


def headwise_forward(cfg: TransformerConfig, params: reference.Params, tokens_s, n_chips: int,
                     group_size: int = GROUP_SIZE):
    """Full forward with the blocks partitioned head-wise: same outputs as `reference.forward`."""
    reference._check_tokens(cfg, tokens_s)
    tokens_s = jnp.asarray(tokens_s)
    positions_s = jnp.arange(tokens_s.shape[0])
    x_se = reference.embed(cfg, params, tokens_s, positions_s)
    fn, blocks = stack_program(cfg, params, n_chips, group_size=group_size)
    out_se = jax.jit(fn)(x_se, positions_s, blocks)
    if cfg.family == "bert":
        return out_se
    return reference.lm_logits(cfg, params, reference.final_norm(cfg, params, out_se))


def headwise_forward_with_cache(cfg: TransformerConfig, params: reference.Params, tokens_s,
                                cache: list[reference.Params], n_chips: int, group_size: int = GROUP_SIZE):
    """Decoder step(s) with a head-split KV cache: same (logits, cache) as `reference.forward_with_cache`."""
    if not cfg.is_decoder:
        raise WorkbenchError(f"model {cfg.name!r} is an encoder; a KV cache needs a decoder")
    tokens_s = jnp.asarray(tokens_s)
    start = int(cache[0]["length"])
    positions_s = start + jnp.arange(tokens_s.shape[0])
    x_se = reference.embed(cfg, params, tokens_s, positions_s)
    fn, blocks = stack_program(cfg, params, n_chips, with_cache=True, start=start, group_size=group_size)
    kv = [{"k": c["k"], "v": c["v"]} for c in cache]
    out_se, new_kv = jax.jit(fn)(x_se, positions_s, blocks, kv)
    length = start + int(tokens_s.shape[0])
    new_cache = [{"k": c["k"], "v": c["v"], "length": length} for c in new_kv]
    return reference.lm_logits(cfg, params, reference.final_norm(cfg, params, out_se)), new_cache


def chip_weight_bytes(cfg: TransformerConfig, params: reference.Params, n_chips: int) -> np.ndarray:
    """Bytes of block weights each chip holds under `place_block` (root holds the root-only vectors)."""
    per_chip = np.zeros(n_chips)
    for p in params["blocks"]:
        for name, value in p.items():
            nbytes = value.size * value.dtype.itemsize
            if name in ROOT_ONLY:
                per_chip[0] += nbytes
            else:
                per_chip += nbytes / n_chips
    return per_chip


def message_count(n_chips: int, group_size: int = GROUP_SIZE) -> int:
    """Point-to-point messages of one reduce (= of one broadcast): every non-root chip sends once."""
    return sum(len(pairs) for _, _, pairs in tree_steps(n_chips, group_size))


def tree_depth(n_chips: int, group_size: int = GROUP_SIZE) -> int:
    """Levels of the group tree: ceil(log_g n)."""
    return 0 if n_chips <= 1 else math.ceil(math.log(n_chips) / math.log(group_size) - 1e-12)
