"""STI's submodel executor: any n layers x m shards per layer, each shard at its own bitwidth.

A submodel is a `Selection`: for each of the first n layers, the (shard, bits) pairs to run. Each
layer's chosen shards (dequantized from a `ShardedModel` or read + decompressed from a `ShardStore`)
are assembled into a narrower BERT layer (`workbench.schemes.sti_shards.assemble_block`) and run with the
reference kernel's building blocks (`attention_core`, `layer_norm`, `gelu`), on a padded batch with
a key-validity mask. With every shard at 32 bits and all M shards of all N layers it computes exactly
the reference encoder (tests check it). Single device: STI's partition is in time (IO vs compute),
so there is no mesh and no collective.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np

from workbench.core.errors import WorkbenchError, require_int
from workbench.kernels.reference import attention_core, gelu, gelu_is_approximate, layer_norm, norm_eps
from workbench.model.models import TransformerConfig
from workbench.schemes.sti_shards import assemble_block, check_shardable, n_shards

Selection = Sequence[Sequence[tuple[int, int]]]  # per layer: ((shard, bits), ...)


class ShardSource(Protocol):
    """Anything that yields one shard's matrices at a bitwidth (ShardedModel, ShardStore)."""

    def shard_weights(self, layer: int, shard: int, bits: int) -> dict[str, np.ndarray]: ...


def full_selection(cfg: TransformerConfig, bits: int = 32, n_layers: int | None = None,
                   shards: Sequence[int] | None = None) -> list[tuple[tuple[int, int], ...]]:
    """Every layer (or the first `n_layers`) with `shards` (default all) at one bitwidth."""
    n_layers = cfg.n_layers if n_layers is None else n_layers
    shards = range(n_shards(cfg)) if shards is None else shards
    return [tuple((int(i), bits) for i in shards) for _ in range(n_layers)]


def check_selection(cfg: TransformerConfig, selection: Selection) -> None:
    """1..N layers, each with 1..M distinct shard indexes; errors name the layer."""
    require_int("submodel layers", len(selection), low=1, high=cfg.n_layers)
    m = n_shards(cfg)
    for layer, chosen in enumerate(selection):
        idx = [int(i) for i, _ in chosen]
        if not idx:
            raise WorkbenchError(f"layer {layer} of the submodel has no shard; each layer needs 1..{m}")
        if len(set(idx)) != len(idx) or min(idx) < 0 or max(idx) >= m:
            raise WorkbenchError(f"layer {layer}: shard indexes must be distinct and in 0..{m - 1}, got {idx}")


def assemble_submodel(cfg: TransformerConfig, params: dict, source: ShardSource, selection: Selection) -> list[dict]:
    """Block params (jnp) of each submodel layer, built from the source's shard versions."""
    check_shardable(cfg)
    check_selection(cfg, selection)
    blocks = []
    for layer, chosen in enumerate(selection):
        shards = {int(i): source.shard_weights(layer, int(i), int(b)) for i, b in chosen}
        block = assemble_block(cfg, params["blocks"][layer], shards)
        blocks.append({k: jnp.asarray(v) for k, v in block.items()})
    return blocks


def _block_one(p, x_se, valid_s, d_head: int, approximate: bool, eps: float):
    """One (narrow) post-LN BERT layer on (S, E) with keys masked by `valid_s`; reference math."""
    s = x_se.shape[0]
    q_shd = (x_se @ p["wq"] + p["bq"]).reshape(s, -1, d_head)
    k_shd = (x_se @ p["wk"] + p["bk"]).reshape(s, -1, d_head)
    v_shd = (x_se @ p["wv"] + p["bv"]).reshape(s, -1, d_head)
    positions_s = jnp.arange(s)
    attn_shd = attention_core(q_shd, k_shd, v_shd, positions_s, positions_s, False, valid_s)
    x_se = layer_norm(x_se + attn_shd.reshape(s, -1) @ p["wo"] + p["bo"], p["ln1_g"], p["ln1_b"], eps)
    ffn_se = gelu(x_se @ p["w1"] + p["b1"], approximate) @ p["w2"] + p["b2"]
    return layer_norm(x_se + ffn_se, p["ln2_g"], p["ln2_b"], eps)


@partial(jax.jit, static_argnames=("d_head", "approximate", "eps"))
def block_batch(p, x_bse, valid_bs, d_head: int, approximate: bool, eps: float):
    """`_block_one` over a padded batch (B, S, E)."""
    return jax.vmap(lambda x, v: _block_one(p, x, v, d_head, approximate, eps))(x_bse, valid_bs)


@partial(jax.jit, static_argnames=("eps",))
def embed_batch(embed_ve, pos_pe, ln_g, ln_b, tokens_bs, eps: float):
    """Token + position embedding and the embedding LayerNorm on (B, S)."""
    x_bse = embed_ve[tokens_bs] + pos_pe[: tokens_bs.shape[1]][None]
    return layer_norm(x_bse, ln_g, ln_b, eps)


def run_blocks(cfg: TransformerConfig, blocks: list[dict], x_bse, valid_bs):
    """Run assembled blocks in order on hidden states (B, S, E)."""
    flags = dict(d_head=cfg.d_head, approximate=gelu_is_approximate(cfg), eps=norm_eps(cfg))
    for p in blocks:
        x_bse = block_batch(p, x_bse, valid_bs, **flags)
    return x_bse


def embed_tokens(cfg: TransformerConfig, params: dict, tokens_bs, valid_bs):
    """Embeddings (B, S, E) of a padded token batch; checks shapes and lengths."""
    tokens_bs, valid_bs = np.asarray(tokens_bs), np.asarray(valid_bs, dtype=bool)
    if tokens_bs.ndim != 2 or tokens_bs.shape != valid_bs.shape or tokens_bs.shape[1] == 0:
        raise WorkbenchError(f"tokens and mask must both be (B, S) with S >= 1, got {tokens_bs.shape} and {valid_bs.shape}")
    if tokens_bs.shape[1] > cfg.max_positions:
        raise WorkbenchError(f"sequence length must be <= max_positions ({cfg.max_positions}), got {tokens_bs.shape[1]}")
    if not valid_bs.any(axis=1).all():
        raise WorkbenchError("every sequence needs at least one valid token")
    return embed_batch(jnp.asarray(params["embed"]), jnp.asarray(params["pos"]), jnp.asarray(params["emb_ln_g"]),
                       jnp.asarray(params["emb_ln_b"]), jnp.asarray(tokens_bs), eps=norm_eps(cfg))


def submodel_forward(cfg: TransformerConfig, params: dict, source: ShardSource, selection: Selection, tokens_bs, valid_bs):
    """Hidden states (B, S, E) of the submodel `selection` on a padded batch."""
    x_bse = embed_tokens(cfg, params, tokens_bs, valid_bs)
    blocks = assemble_submodel(cfg, params, source, selection)
    return run_blocks(cfg, blocks, x_bse, jnp.asarray(valid_bs, dtype=bool))


def mean_pool(hidden_bse, valid_bs):
    """Sentence embeddings (B, E): mean of valid token states (MiniLM's pooling)."""
    valid = jnp.asarray(valid_bs, dtype=hidden_bse.dtype)[..., None]
    return (hidden_bse * valid).sum(1) / valid.sum(1)


def cosine_rows(a_be, b_be):
    """Cosine similarity of matching rows (B,)."""
    a, b = np.asarray(a_be, dtype=np.float64), np.asarray(b_be, dtype=np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
